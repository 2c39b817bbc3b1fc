//! Split snapshots: the same identity split or not, join and split exact
//! inverses, every command on a head, and every kind of bad part refused
//! with the part's name, nothing written.

use std::path::{Path, PathBuf};

use crate::util::{snapshot, wtxt, ArraySpec};

fn f32s(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32).flat_map(|i| ((i.wrapping_mul(2654435761) ^ seed) as f32 / 1e9).to_le_bytes()).collect()
}

/// About 1.3 MB of text: a big matrix cut across parts, small arrays around it.
fn model(seed: u32) -> Vec<ArraySpec<'static>> {
    vec![
        ("a_bias", "f32", vec![1000], f32s(1000, seed)),
        ("emb", "f32", vec![1000, 240], f32s(240_000, seed)),
        ("small", "f32", vec![10], f32s(10, seed)),
        ("w", "f32", vec![300, 100], f32s(30_000, seed)),
    ]
}

fn ok(args: &[&std::ffi::OsStr]) -> String {
    let o = wtxt().args(args).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(args: &[&std::ffi::OsStr]) -> (i32, String) {
    let o = wtxt().args(args).output().unwrap();
    (o.status.code().unwrap(), String::from_utf8_lossy(&o.stderr).into_owned())
}

macro_rules! a {
    ($($x:expr),*) => { &[$(std::ffi::OsStr::new(&$x)),*] };
}

fn parts(head: &Path) -> Vec<PathBuf> {
    let dir = PathBuf::from(format!("{}.parts", head.display()));
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

fn root_line(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap().lines().nth(3).unwrap().to_string()
}

#[test]
fn split_or_not_is_one_identity_and_join_split_are_exact_inverses() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let one = snapshot(d, "one", &model(1), &["--part-size", "none"]);
    let head = d.join("split.wtxt");
    ok(a!("snapshot", d.join("one.npz"), "-o", &head, "--ts", "2026-03-01T00:00:00Z", "--part-size", "256K"));
    assert_eq!(root_line(&one), root_line(&head), "same sha256_all, merkle_this and fastxor");
    let ps = parts(&head);
    assert!(ps.len() >= 5, "{} parts", ps.len());
    for p in ps.iter().chain([&head]) {
        assert!(std::fs::metadata(p).unwrap().len() <= 256 << 10, "{} is larger than the part size", p.display());
        let text = std::fs::read(p).unwrap();
        assert!(text.iter().all(|&b| b == b'\n' || (0x20..0x7f).contains(&b)), "ASCII lines");
    }
    // join(split) == single file; split(join) == the same head and parts.
    let joined = d.join("joined.wtxt");
    ok(a!("join", &head, "-o", &joined));
    assert_eq!(std::fs::read(&joined).unwrap(), std::fs::read(&one).unwrap());
    let again = d.join("again.wtxt");
    ok(a!("split", &joined, "-o", &again, "--part-size", "256K"));
    assert_eq!(std::fs::read(&again).unwrap(), std::fs::read(&head).unwrap());
    for (x, y) in parts(&again).iter().zip(&ps) {
        assert_eq!(std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
    }
    // A part given where a snapshot is expected says what to give instead.
    let (code, err) = fails(a!("verify", &ps[0]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("give its head"), "{err}");
    // A snapshot that fits in one part is written exactly as before.
    let small = snapshot(d, "small", &model(1)[2..3], &[]);
    let plain = snapshot(d, "plain", &model(1)[2..3], &["--part-size", "none"]);
    assert_eq!(std::fs::read(&small).unwrap(), std::fs::read(&plain).unwrap());
    assert!(!d.join("small.wtxt.parts").exists());
}

#[test]
fn cut_points_follow_shapes_so_a_new_generation_rewrites_only_changed_parts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let g0 = snapshot(d, "g0", &model(1), &["--part-size", "256K"]);
    let mut m = model(1);
    m[1].3[500_000..500_004].copy_from_slice(&7f32.to_le_bytes()); // one row in the middle of `emb`
    let g1 = snapshot(d, "g1", &m, &["--part-size", "256K", "--prev", g0.to_str().unwrap()]);
    let (p0, p1) = (parts(&g0), parts(&g1));
    assert_eq!(p0.len(), p1.len(), "cut points depend on shapes only");
    let same = p0.iter().zip(&p1).filter(|(x, y)| std::fs::read(x).unwrap() == std::fs::read(y).unwrap()).count();
    // Only the part holding the changed chunk differs: the `arr` lines,
    // which change with every gen (the salt does), are in the head.
    assert_eq!(same, p0.len() - 1, "parts unchanged, of {}", p0.len());
    assert_ne!(std::fs::read(&g0).unwrap(), std::fs::read(&g1).unwrap(), "the head changed");
    ok(a!("verify", &g1, "--prev", &g0));
    // Writing the same snapshot again leaves unchanged part files alone.
    let before: Vec<_> = p1.iter().map(|p| std::fs::metadata(p).unwrap().modified().unwrap()).collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    snapshot(d, "g1", &m, &["--part-size", "256K", "--prev", g0.to_str().unwrap()]);
    let after: Vec<_> = p1.iter().map(|p| std::fs::metadata(p).unwrap().modified().unwrap()).collect();
    assert_eq!(before, after);
    // Shrinking the snapshot removes the parts its head no longer lists.
    snapshot(d, "g1", &m[..2], &["--part-size", "256K"]);
    ok(a!("verify", &g1));
    assert!(parts(&g1).len() < p1.len());
}

#[test]
fn every_command_takes_a_head() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = "256K";
    let g0 = snapshot(d, "g0", &model(1), &["--part-size", s]);
    let mut m = model(1);
    m[1].3[4..8].copy_from_slice(&3f32.to_le_bytes());
    let g1 = snapshot(d, "g1", &m, &["--part-size", s, "--prev", g0.to_str().unwrap()]);
    // A chain may pass from one form to the other.
    let single = snapshot(d, "single", &m, &["--part-size", "none", "--prev", g0.to_str().unwrap()]);
    assert_eq!(root_line(&single), root_line(&g1));
    let out = ok(a!("inspect", &g1, "--json"));
    assert!(out.contains("\"name\":\"emb\""), "{out}");
    let diff = ok(a!("diff", &g0, &g1));
    assert!(diff.contains("emb") && diff.contains("1 element(s) changed"), "{diff}");
    // extract, convert
    let npz = d.join("x.npz");
    ok(a!("extract", &g1, "-o", &npz));
    let back = d.join("back.wtxt");
    ok(a!(
        "convert",
        &npz,
        "-o",
        &back,
        "--to",
        "wtxt",
        "--part-size",
        s,
        "--gen",
        "1",
        "--ts",
        "2026-03-01T00:00:00Z"
    ));
    ok(a!("verify", &back));
    // delta create/apply rebuild the same head and parts
    let delta = d.join("d.wtxtdelta");
    ok(a!("delta", "create", &g0, &g1, "-o", &delta));
    let rebuilt = d.join("rebuilt.wtxt");
    ok(a!("delta", "apply", &g0, &delta, "-o", &rebuilt, "--part-size", s));
    assert_eq!(std::fs::read(&rebuilt).unwrap(), std::fs::read(&g1).unwrap());
    for (x, y) in parts(&rebuilt).iter().zip(&parts(&g1)) {
        assert_eq!(std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
    }
    // merge
    let merged = d.join("merged.wtxt");
    ok(a!("merge", &g0, &g1, &g0, "-o", &merged, "--part-size", s, "--ts", "2026-03-02T00:00:00Z"));
    ok(a!("verify", &merged));
    assert!(!parts(&merged).is_empty());
    // streaming + finalize --rewrite
    let ws = d.join("ws.wtxt");
    ok(a!("snapshot", &npz, "-o", &ws, "--streaming", "--wsum", d.join("ws.wsum"), "--part-size", s));
    ok(a!("verify", &ws, "--wsum", d.join("ws.wsum")));
    let fin = d.join("fin.wtxt");
    ok(a!("finalize", &ws, "-o", d.join("fin.wsum"), "--rewrite", &fin, "--part-size", s));
    ok(a!("verify", &fin));
    // recover of an intact split snapshot keeps everything
    let rec = d.join("rec.wtxt");
    ok(a!("recover", &g1, "-o", &rec, "--part-size", "none"));
    ok(a!("verify", &rec));
}

#[test]
fn encrypted_split_snapshots_stay_split_and_read_with_an_identity() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let id = d.join("id.txt");
    let k = std::process::Command::new("age-keygen").arg("-o").arg(&id).output().unwrap();
    assert!(k.status.success());
    let text = std::fs::read_to_string(&id).unwrap();
    let recipient = text.lines().find_map(|l| l.strip_prefix("# public key: ")).unwrap().to_string();
    let g0 = snapshot(d, "g0", &model(1), &["--part-size", "256K"]);
    let enc = d.join("enc.wtxt");
    ok(a!("encrypt", "-r", &recipient, &g0, "-o", &enc));
    assert_eq!(parts(&enc).len(), parts(&g0).len());
    // The real `age` opens every part.
    let plain = std::process::Command::new("age").arg("-d").arg("-i").arg(&id).arg(&parts(&enc)[1]).output().unwrap();
    assert_eq!(plain.stdout, std::fs::read(&parts(&g0)[1]).unwrap());
    ok(a!("verify", "-i", &id, &enc));
    let dec = d.join("dec.wtxt");
    ok(a!("decrypt", "-i", &id, &enc, "-o", &dec));
    assert_eq!(std::fs::read(&dec).unwrap(), std::fs::read(&g0).unwrap());
    for (x, y) in parts(&dec).iter().zip(&parts(&g0)) {
        assert_eq!(std::fs::read(x).unwrap(), std::fs::read(y).unwrap());
    }
}

/// Each damage: verify and extract exit 1 naming the part, nothing written.
#[test]
fn bad_parts_fail_with_the_part_named_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let g0 = snapshot(d, "g0", &model(1), &["--part-size", "256K"]);
    let mut m = model(1);
    m[0].3[0] ^= 1;
    m[1].3[0] ^= 1;
    let g1 = snapshot(d, "g1", &m, &["--part-size", "256K", "--prev", g0.to_str().unwrap()]);
    let mut m2 = m.clone();
    m2[0].3[1] ^= 1;
    let g2 = snapshot(d, "g2", &m2, &["--part-size", "256K", "--prev", g1.to_str().unwrap()]);
    let delta = d.join("g1g2.wtxtdelta");
    ok(a!("delta", "create", &g1, &g2, "-o", &delta));
    let pdir = d.join("g1.wtxt.parts");
    let keep = d.join("keep");
    std::fs::create_dir(&keep).unwrap();
    for p in parts(&g1) {
        std::fs::copy(&p, keep.join(p.file_name().unwrap())).unwrap();
    }
    let restore = || {
        for p in std::fs::read_dir(&pdir).unwrap() {
            std::fs::remove_file(p.unwrap().path()).unwrap();
        }
        for p in std::fs::read_dir(&keep).unwrap() {
            let p = p.unwrap().path();
            std::fs::copy(&p, pdir.join(p.file_name().unwrap())).unwrap();
        }
    };
    let p = |i: u32| pdir.join(format!("{i:06}.wtxtpart"));
    type Damage<'a> = (&'a str, Box<dyn Fn() + 'a>, &'a str);
    let cases: Vec<Damage> = vec![
        ("missing", Box::new(|| std::fs::remove_file(p(2)).unwrap()), "000002.wtxtpart"),
        ("renamed", Box::new(|| std::fs::rename(p(3), pdir.join("000003.old")).unwrap()), "000003.wtxtpart"),
        (
            "extra",
            Box::new(|| {
                std::fs::copy(p(1), p(99)).unwrap();
            }),
            "000099.wtxtpart",
        ),
        (
            "truncated",
            Box::new(|| {
                let b = std::fs::read(p(2)).unwrap();
                std::fs::write(p(2), &b[..b.len() / 2]).unwrap();
            }),
            "000002.wtxtpart",
        ),
        (
            "swapped",
            Box::new(|| {
                let (x, y) = (std::fs::read(p(2)).unwrap(), std::fs::read(p(3)).unwrap());
                std::fs::write(p(2), y).unwrap();
                std::fs::write(p(3), x).unwrap();
            }),
            "000002.wtxtpart",
        ),
        (
            "from another generation",
            Box::new(|| {
                std::fs::copy(d.join("g0.wtxt.parts/000001.wtxtpart"), p(1)).unwrap();
            }),
            "000001.wtxtpart",
        ),
        (
            "one byte changed",
            Box::new(|| {
                let mut b = std::fs::read(p(3)).unwrap();
                let i = b.len() / 2;
                b[i] = if b[i] == b'A' { b'B' } else { b'A' };
                std::fs::write(p(3), b).unwrap();
            }),
            "000003.wtxtpart",
        ),
        ("head without parts", Box::new(|| std::fs::remove_dir_all(&pdir).unwrap()), "000001.wtxtpart"),
    ];
    for (what, damage, named) in cases {
        restore();
        assert_eq!(std::fs::read_dir(&pdir).unwrap().count(), std::fs::read_dir(&keep).unwrap().count());
        ok(a!("verify", &g1));
        damage();
        let (code, err) = fails(a!("verify", &g1));
        assert_eq!(code, 1, "{what}: {err}");
        assert!(err.contains(named), "{what}: expected {named} in: {err}");
        // .safetensors goes straight into the container's layout, .npz of
        // several members the ordinary way: neither writes a damaged set.
        for out in [d.join("out.npz"), d.join("out.safetensors")] {
            let (code, err) = fails(a!("extract", &g1, "-o", &out));
            assert_eq!(code, 1, "{what}: {err}");
            assert!(err.contains(named), "{what}: expected {named} in: {err}");
            assert!(!out.exists(), "{what}: output written");
            assert_eq!(
                std::fs::read_dir(d)
                    .unwrap()
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
                    .count(),
                0
            );
        }
        // delta apply reads its base's parts without hashing them (the
        // target it builds is verified whole), and still names the part.
        let rebuilt = d.join("rebuilt.wtxt");
        let (code, err) = fails(a!("delta", "apply", &g1, &delta, "-o", &rebuilt, "--part-size", "256K"));
        assert_eq!(code, 1, "{what}: {err}");
        assert!(err.contains(named), "{what}: expected {named} in: {err}");
        assert!(!rebuilt.exists() && !d.join("rebuilt.wtxt.parts").exists(), "{what}: output written");
        let json = wtxt().args(["verify", "--json"]).arg(&g1).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(v["ok"], false, "{what}");
        if !pdir.exists() {
            std::fs::create_dir(&pdir).unwrap();
        }
    }
}

#[test]
fn damage_inside_a_part_is_located_to_part_and_line_and_recover_works_per_part() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let g = snapshot(d, "g", &model(1), &["--part-size", "256K"]);
    let target = parts(&g)[2].clone();
    let mut text = std::fs::read(&target).unwrap();
    // Damage a base64 character on line 10 of the part.
    let line_start = text.split(|&b| b == b'\n').take(9).map(|l| l.len() + 1).sum::<usize>();
    text[line_start + 3] = if text[line_start + 3] == b'A' { b'B' } else { b'A' };
    std::fs::write(&target, &text).unwrap();
    let json = wtxt().args(["verify", "--json"]).arg(&g).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let errors = v["errors"].as_array().unwrap();
    let name = target.display().to_string();
    assert!(
        errors.iter().any(|e| e["file"] == name.as_str() && e["line"] == 10),
        "expected {name} line 10 in {errors:?}"
    );
    let rec = d.join("rec.wtxt");
    let report = d.join("rep.json");
    let o = wtxt().args(["recover"]).arg(&g).arg("-o").arg(&rec).arg("--report").arg(&report).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    ok(a!("verify", &rec));
    let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["lost_arrays"], 1, "{r}");
    assert_eq!(r["recovered_arrays"], 3, "{r}");
    // The damaged chunk is named by its part and line there (the part's
    // frame is intact: no part fault, the chunk's own checks found it).
    let damaged = &r["arrays"].as_array().unwrap().iter().find(|a| a["name"] == "emb").unwrap()["damaged_chunks"][0];
    assert_eq!(
        (damaged["file"].as_str(), damaged["line"].as_u64()),
        (Some(name.as_str()), Some(3)),
        "its ch line: {r}"
    );
}

/// `split` and `join` copy bytes, but verify them as they go: a damaged
/// snapshot is refused (the line, or the part, named) and nothing is
/// written, instead of coming out under a new name with fresh part hashes.
#[test]
fn split_and_join_refuse_a_damaged_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let one = snapshot(d, "one", &model(1), &["--part-size", "none"]);
    let head = snapshot(d, "g", &model(1), &["--part-size", "256K"]);
    let damage = |p: &Path, line: usize| {
        let mut text = std::fs::read(p).unwrap();
        let at = text.split(|&b| b == b'\n').take(line - 1).map(|l| l.len() + 1).sum::<usize>() + 3;
        text[at] = if text[at] == b'A' { b'B' } else { b'A' };
        std::fs::write(p, &text).unwrap();
    };
    damage(&one, 40);
    damage(&parts(&head)[1], 10);
    let out = d.join("out.wtxt");
    let (code, err) = fails(a!("split", &one, "-o", &out, "--part-size", "256K"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("one.wtxt: line 40"), "{err}");
    let (code, err) = fails(a!("join", &head, "-o", &out));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("000002.wtxtpart"), "{err}");
    assert!(!out.exists() && !d.join("out.wtxt.parts").exists());
}

#[test]
fn part_size_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    snapshot(d, "m", &model(1)[..1], &[]);
    for bad in ["12", "1X", "-5", ""] {
        let (code, err) = fails(a!("snapshot", d.join("m.npz"), "-o", d.join("o.wtxt"), "--part-size", bad));
        assert_eq!(code, 2, "{bad}: {err}");
    }
    // A chunk larger than a part: a usage error naming the way out.
    let big = snapshot(d, "big", &[("m", "f32", vec![1000, 100], f32s(100_000, 1))], &["--part-size", "none"]);
    let (code, err) = fails(a!("split", &big, "-o", d.join("s.wtxt"), "--part-size", "8K"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--rows-per-chunk"), "{err}");
    assert!(!d.join("s.wtxt").exists());
}

#[test]
fn parts_written_directly_are_the_cut_of_the_single_text() {
    // `snapshot` writes a split snapshot straight into its parts (the cut
    // points are known before writing); `split` cuts a finished text as it
    // streams. Both must give the same files, signed, audited, at any size.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = d.join("k.pem");
    ok(a!("keygen", "-o", &key));
    let extra = ["--sign-key", key.to_str().unwrap(), "--audit", "run=7 by=ci", "--rows-per-chunk", "16"];
    let one = snapshot(d, "one", &model(3), &[&extra[..], &["--part-size", "none"]].concat());
    for size in ["40K", "100K", "256K", "1M"] {
        let direct = snapshot(d, "direct", &model(3), &[&extra[..], &["--part-size", size]].concat());
        let cut = d.join("cut.wtxt");
        ok(a!("split", &one, "-o", &cut, "--part-size", size));
        assert_eq!(std::fs::read(&direct).unwrap(), std::fs::read(&cut).unwrap(), "head at {size}");
        let (pd, pc) = (parts(&direct), parts(&cut));
        assert_eq!(pd.len(), pc.len(), "parts at {size}");
        for (x, y) in pd.iter().zip(&pc) {
            assert_eq!(std::fs::read(x).unwrap(), std::fs::read(y).unwrap(), "{} at {size}", x.display());
        }
        ok(a!("verify", &direct));
    }
    // A text that breaks off halfway leaves the split snapshot already
    // there as it was: new parts wait under temporary names until the end.
    let cut = d.join("cut.wtxt");
    let before: Vec<Vec<u8>> = parts(&cut).iter().chain([&cut]).map(|p| std::fs::read(p).unwrap()).collect();
    let text = std::fs::read_to_string(&one).unwrap();
    let at = text.rfind("\nch ix=").unwrap();
    let bad = d.join("bad.wtxt");
    std::fs::write(&bad, format!("{}\nxx{}", &text[..at], &text[at + 3..])).unwrap();
    let (code, err) = fails(a!("split", &bad, "-o", &cut, "--part-size", "40K"));
    assert_ne!(code, 0, "{err}");
    let after: Vec<Vec<u8>> = parts(&cut).iter().chain([&cut]).map(|p| std::fs::read(p).unwrap()).collect();
    assert!(before == after, "the existing split snapshot was changed");
    // A chunk larger than a part: refused before anything is written.
    let (code, err) = fails(a!("snapshot", d.join("one.npz"), "-o", d.join("no.wtxt"), "--part-size", "8K"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not fit in a part"), "{err}");
    assert!(!d.join("no.wtxt").exists() && !d.join("no.wtxt.parts").exists());
}

mod placed {
    use proptest::prelude::*;
    use wtxt::format::split;
    use wtxt::format::{write_snapshot, WriteOptions, WritePlan};
    use wtxt::model::{Array, Dtype};

    fn arrays() -> impl Strategy<Value = Vec<(Dtype, Vec<u64>)>> {
        let dtype = prop::sample::select(vec![Dtype::F32, Dtype::U8, Dtype::I16, Dtype::F64, Dtype::F6E2m3]);
        let shape = prop::collection::vec(1u64..40, 1..4);
        prop::collection::vec((dtype, shape).prop_map(|(d, s)| (d, crate::roundtrip::whole_blocks(d, s))), 1..6)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// The parts the writer places before writing are exactly the cuts
        /// the streaming splitter makes in the finished text.
        #[test]
        fn placed_parts_are_the_streaming_cuts(specs in arrays(), rows in 1u64..9, size in 4096u64..24_000) {
            let list: Vec<Array> = specs
                .iter()
                .enumerate()
                .map(|(i, (d, s))| {
                    let n = wtxt::model::byte_size(*d, s).unwrap() as usize;
                    let bytes: Vec<u8> = (0..n).map(|k| (k * 31 + i) as u8).collect();
                    Array::new(format!("a{i}"), *d, s.clone(), bytes.into()).unwrap()
                })
                .collect();
            let meta = wtxt::format::syntax::Meta::new(3, Some("2026-01-01T00:00:00Z")).unwrap();
            let opts = WriteOptions::new(meta, rows);
            let mut text = std::io::Cursor::new(Vec::new());
            write_snapshot(&list, &opts, &mut text, &wtxt::progress::Progress::hidden()).unwrap();
            let text = text.into_inner();
            let placed = split::place_parts(&WritePlan::new(&list, &opts).unwrap().shape(), size);
            let mut mem: Vec<Vec<u8>> = Vec::new();
            let streamed = split::split(&text[..], size, &mut mem);
            match placed {
                Err(_) => prop_assert!(streamed.is_err()),
                Ok(None) => prop_assert!(text.len() as u64 <= size),
                Ok(Some(spans)) => {
                    let head = streamed.unwrap();
                    prop_assert_eq!(spans.len(), mem.len());
                    // Joined back in reads of any size (the head's `arr`
                    // lines are spliced in across them): the same text.
                    let Ok(split::Opened::Split(h)) = split::open(Box::new(&head[..])) else { panic!("a head") };
                    let mut joined = split::Joined::new(h, Box::new(mem.clone()), None);
                    let (mut back, mut buf) = (Vec::new(), vec![0u8; 4096]);
                    for i in 0usize.. {
                        let n = std::io::Read::read(&mut joined, &mut buf[..[1, 2, 5, 9, 77, 4096][i % 6]]).unwrap();
                        if n == 0 {
                            break;
                        }
                        back.extend_from_slice(&buf[..n]);
                    }
                    prop_assert!(back == text, "join(split(text)) == text");
                    for (s, part) in spans.iter().zip(&mem) {
                        // The range of the single text, each `arr` line replaced by its `begin` line.
                        let mut want = s.opening();
                        let mut at = s.start as usize;
                        for a in &s.arrs {
                            want.extend_from_slice(&text[at..a.at as usize]);
                            want.extend_from_slice(format!("{}\n", a.begin).as_bytes());
                            at = (a.at + a.len) as usize;
                        }
                        want.extend_from_slice(&text[at..s.end as usize]);
                        want.extend_from_slice(split::PartSpan::closing());
                        prop_assert!(&want == part, "part {}", s.ix);
                    }
                }
            }
        }
    }
}

#[test]
fn a_text_that_does_not_fill_its_planned_parts_is_never_put_in_place() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.wtxt");
    let spans = vec![
        wtxt::format::split::PartSpan { ix: 1, start: 10, end: 20, cont: None, arrs: vec![] },
        wtxt::format::split::PartSpan {
            ix: 2,
            start: 20,
            end: 30,
            cont: Some("cont name=a dtype=u8 shape=30".into()),
            arrs: vec![],
        },
    ];
    let mut w = wtxt::store::PartedOut::create(&out, spans.clone(), 8).unwrap();
    w.write_all(&[b'x'; 10 + 10 + 5]).unwrap(); // stops inside the second part, no tail
    let err = w.finish().unwrap_err();
    assert!(err.to_string().contains("does not match the parts planned"), "{err}");
    assert!(!out.exists() && !dir.path().join("m.wtxt.parts").exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no temporary file left");
    // Filled exactly, it is put in place: the head, then parts framed as planned.
    let mut w = wtxt::store::PartedOut::create(&out, spans, 8).unwrap();
    w.write_all(&[b'y'; 38]).unwrap();
    assert_eq!(w.finish().unwrap(), 2);
    let second = std::fs::read_to_string(dir.path().join("m.wtxt.parts/000002.wtxtpart")).unwrap();
    assert_eq!(second, "WTXT part ix=000002\ncont name=a dtype=u8 shape=30\nyyyyyyyyyyendpart\n");
}

/// The head keeps every `arr` line; a part keeps a `begin` line in each
/// one's place. Each is checked against the other, and an error about an
/// `arr` line names the head and its line there.
#[test]
fn arr_lines_in_the_head_and_begin_lines_in_parts_are_checked_against_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let g = snapshot(d, "g", &model(1), &["--part-size", "256K"]);
    let head = std::fs::read_to_string(&g).unwrap();
    let line_of = |prefix: &str| head.lines().position(|l| l.starts_with(prefix)).unwrap() + 1;
    let small = line_of("arr name=small ");
    assert!(small > line_of("part ix=000002 "), "`small` begins in a later part");
    for p in parts(&g) {
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(!text.contains("\narr "), "{}: no `arr` line in a part", p.display());
    }
    let check = |what: &str, named: &str, at: String| {
        let (code, err) = fails(a!("verify", &g));
        assert_eq!(code, 1, "{what}: {err}");
        assert!(err.contains(named) && err.contains(&at), "{what}: expected {named} and {at} in: {err}");
        let out = d.join("out.safetensors");
        let (code, err) = fails(a!("extract", &g, "-o", &out));
        assert_eq!(code, 1, "{what}: {err}");
        assert!(!out.exists(), "{what}: output written");
        std::fs::write(&g, &head).unwrap();
    };
    // A changed `arr` line: named at its line in the head.
    let l = head.lines().nth(small - 1).unwrap();
    let i = l.find("sha256=").unwrap() + 7;
    let changed = format!("{}{}{}", &l[..i], if &l[i..=i] == "0" { "1" } else { "0" }, &l[i + 1..]);
    let changed = head.replacen(l, &changed, 1);
    std::fs::write(&g, changed).unwrap();
    check("changed arr line", "g.wtxt", format!("line {small}"));
    // An `arr` line listed under another part than the one holding its `begin` line.
    let mut lines: Vec<&str> = head.lines().collect();
    let moved = lines.remove(small - 1);
    let before = lines.iter().position(|l| l.starts_with("part ix=000002 ")).unwrap();
    lines.insert(before, moved);
    std::fs::write(&g, lines.join("\n") + "\n").unwrap();
    check("arr line under another part", ".wtxtpart", "begin".into());
    // A `begin` line naming another array, with the table made to match.
    let holder =
        parts(&g).into_iter().find(|p| std::fs::read_to_string(p).unwrap().contains("begin name=small ")).unwrap();
    let keep = std::fs::read(&holder).unwrap();
    let bent = String::from_utf8(keep.clone()).unwrap().replace("begin name=small ", "begin name=smalx ");
    let sha = |b: &[u8]| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b));
    std::fs::write(&holder, &bent).unwrap();
    std::fs::write(&g, head.replace(&sha(&keep), &sha(bent.as_bytes()))).unwrap();
    let n = bent.lines().position(|l| l.starts_with("begin name=smalx")).unwrap() + 1;
    let (code, err) = fails(a!("verify", &g));
    assert_eq!(code, 1, "{err}");
    let name = holder.file_name().unwrap().to_string_lossy().into_owned();
    assert!(err.contains(&name) && err.contains(&format!("line {n}")), "{err}");
    std::fs::write(&holder, keep).unwrap();
    std::fs::write(&g, &head).unwrap();
    ok(a!("verify", &g));
}

/// Copies the split snapshot of an earlier form in `fixtures/FIXTURE` to
/// `d`, checks that it verifies and joins to its single file: the head's
/// path, the joined file's, and the single file's bytes.
fn old_form(d: &Path, fixture: &str) -> (PathBuf, PathBuf, Vec<u8>) {
    let fx = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(fixture);
    let old = d.join("old.wtxt");
    std::fs::copy(fx.join("old.wtxt"), &old).unwrap();
    std::fs::create_dir(d.join("old.wtxt.parts")).unwrap();
    for p in parts(&fx.join("old.wtxt")) {
        std::fs::copy(&p, d.join("old.wtxt.parts").join(p.file_name().unwrap())).unwrap();
    }
    ok(a!("verify", &old));
    let joined = d.join("joined.wtxt");
    ok(a!("join", &old, "-o", &joined));
    let single = std::fs::read(fx.join("old-single.wtxt")).unwrap();
    assert_eq!(std::fs::read(&joined).unwrap(), single);
    (old, joined, single)
}

/// Split snapshots written before the `arr` lines moved to the head (their
/// parts hold `arr` lines, their head none) still read, verify and join.
#[test]
fn split_snapshots_of_the_earlier_form_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_, joined, single) = old_form(d, "split-v0");
    // Split again, it takes today's form, the same single file joined.
    let again = d.join("again.wtxt");
    ok(a!("split", &joined, "-o", &again, "--part-size", "8K"));
    assert!(std::fs::read_to_string(&again).unwrap().contains("\narr name=bias "));
    let back = d.join("back.wtxt");
    ok(a!("join", &again, "-o", &back));
    assert_eq!(std::fs::read(&back).unwrap(), single);
}

/// Heads that bind their parts by the SHA-256 of every byte (`sha256=`,
/// written before frame hashes) still read, verify and join; a changed
/// byte anywhere in a part fails its hash. Split again, they take today's
/// form (`frame=`) and join to the same single file.
#[test]
fn split_snapshots_bound_by_whole_part_hashes_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (old, joined, single) = old_form(d, "split-v1");
    let head_text = std::fs::read_to_string(&old).unwrap();
    assert!(head_text.lines().filter(|l| l.starts_with("part ")).all(|l| l.contains(" sha256=")));
    let again = d.join("again.wtxt");
    ok(a!("split", &joined, "-o", &again, "--part-size", "8K"));
    let text = std::fs::read_to_string(&again).unwrap();
    let part_lines: Vec<&str> = text.lines().filter(|l| l.starts_with("part ")).collect();
    assert!(!part_lines.is_empty() && part_lines.iter().all(|l| l.contains(" frame=")), "{text}");
    let back = d.join("back.wtxt");
    ok(a!("join", &again, "-o", &back));
    assert_eq!(std::fs::read(&back).unwrap(), single);
    // One byte of the old form's part changed: its whole-part hash fails.
    let p2 = d.join("old.wtxt.parts/000002.wtxtpart");
    let mut b = std::fs::read(&p2).unwrap();
    let i = b.len() / 2;
    b[i] = if b[i] == b'A' { b'B' } else { b'A' };
    std::fs::write(&p2, b).unwrap();
    let (code, err) = fails(a!("verify", &old));
    assert_eq!(code, 1);
    assert!(err.contains("000002.wtxtpart") && err.contains("its hash differs"), "{err}");
}

/// Rewrites part `ix` of the split snapshot at `head` with `edit` and puts
/// the head's `part` line right again (size, lines, SHA-256), as an
/// attacker who controls both would.
fn forge_part(head: &Path, ix: u64, edit: impl Fn(&str) -> String) {
    let part = PathBuf::from(format!("{}.parts/{ix:06}.wtxtpart", head.display()));
    let text = edit(&std::fs::read_to_string(&part).unwrap());
    std::fs::write(&part, &text).unwrap();
    let (frame, _, _) = wtxt::format::split::FrameHash::of(std::io::Cursor::new(text.as_bytes())).unwrap();
    let line = format!(
        "part ix={ix:06} bytes={} lines={} frame={}",
        text.len(),
        text.matches('\n').count(),
        hex::encode(frame)
    );
    let h = std::fs::read_to_string(head).unwrap();
    let fixed: Vec<String> = h
        .lines()
        .map(|l| if l.starts_with(&format!("part ix={ix:06} ")) { line.clone() } else { l.to_string() })
        .collect();
    std::fs::write(head, fixed.join("\n") + "\n").unwrap();
}

/// `cont` lines are checked: one removed, one naming another array, one
/// added where no array continues, an extra line after `endpart`, a part
/// that is a folder: `verify` and `join` fail (exit 1) naming the part.
#[test]
fn cont_lines_and_part_framing_are_checked_by_verify_and_join() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = snapshot(d, "g", &model(1), &["--part-size", "256K"]);
    let pdir = d.join("g.wtxt.parts");
    let keep = d.join("keep");
    std::fs::create_dir(&keep).unwrap();
    for p in parts(&good) {
        std::fs::copy(&p, keep.join(p.file_name().unwrap())).unwrap();
    }
    std::fs::copy(&good, d.join("keep.wtxt")).unwrap();
    let restore = || {
        let _ = std::fs::remove_dir_all(&pdir);
        std::fs::create_dir(&pdir).unwrap();
        for p in std::fs::read_dir(&keep).unwrap() {
            let p = p.unwrap().path();
            std::fs::copy(&p, pdir.join(p.file_name().unwrap())).unwrap();
        }
        std::fs::copy(d.join("keep.wtxt"), &good).unwrap();
    };
    // Which parts start with `cont`, and which do not (after the first).
    let with_cont: Vec<u64> = (2..=parts(&good).len() as u64)
        .filter(|ix| {
            std::fs::read_to_string(pdir.join(format!("{ix:06}.wtxtpart")))
                .unwrap()
                .lines()
                .nth(1)
                .unwrap()
                .starts_with("cont ")
        })
        .collect();
    let without: Vec<u64> = (2..=parts(&good).len() as u64).filter(|ix| !with_cont.contains(ix)).collect();
    assert!(!with_cont.is_empty() && !without.is_empty(), "{with_cont:?} {without:?}");
    let (c, n) = (with_cont[0], without[0]);
    type Forgery = (u64, Box<dyn Fn(&str) -> String>, &'static str);
    let cases: Vec<Forgery> = vec![
        (
            c,
            Box::new(|t: &str| t.lines().enumerate().filter(|(i, _)| *i != 1).map(|(_, l)| format!("{l}\n")).collect()),
            "expected `cont name=emb",
        ),
        (c, Box::new(|t: &str| t.replacen("cont name=emb", "cont name=w", 1)), "expected `cont name=emb"),
        (c, Box::new(|t: &str| t.replacen("shape=1000,240", "shape=1000,24", 1)), "expected `cont name=emb"),
        (
            n,
            Box::new(|t: &str| t.replacen('\n', "\ncont name=emb dtype=f32 shape=1000,240\n", 1)),
            "no `cont` line belongs here",
        ),
        (n, Box::new(|t: &str| format!("{t}extra\n")), "endpart"),
    ];
    for (ix, edit, want) in cases {
        restore();
        forge_part(&good, ix, edit);
        let part = format!("{ix:06}.wtxtpart");
        for cmd in ["verify", "join"] {
            let args: Vec<&std::ffi::OsStr> = if cmd == "verify" {
                vec![cmd.as_ref(), good.as_os_str()]
            } else {
                vec![cmd.as_ref(), good.as_os_str(), "-o".as_ref(), "j.wtxt".as_ref()]
            };
            let o = wtxt().current_dir(d).args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{cmd} {want}: {err}");
            assert!(err.contains(&part) && err.contains(want), "{cmd}: {err}");
            assert!(!d.join("j.wtxt").exists());
        }
    }
    // A part that is a folder: a failed check in both commands.
    restore();
    let p2 = pdir.join("000002.wtxtpart");
    std::fs::remove_file(&p2).unwrap();
    std::fs::create_dir(&p2).unwrap();
    for args in [vec!["verify", "g.wtxt"], vec!["join", "g.wtxt", "-o", "j.wtxt"]] {
        let o = wtxt().current_dir(d).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("000002.wtxtpart") && err.contains("not a regular file"), "{err}");
    }
}

/// docs/FORMAT.md's worked example of cut points, byte for byte: the sizes
/// follow from shapes alone.
#[test]
fn the_documented_worked_example_of_cut_points_holds() {
    let dir = tempfile::tempdir().unwrap();
    let arrays = vec![("a", "f32", vec![300], f32s(300, 1)), ("w", "f32", vec![512, 64], f32s(512 * 64, 2))];
    let head = snapshot(dir.path(), "m", &arrays, &["--part-size", "64K"]);
    let sizes: Vec<u64> = parts(&head).iter().map(|p| std::fs::metadata(p).unwrap().len()).collect();
    assert_eq!(sizes, [47_557, 45_640, 45_640, 45_647]);
    assert_eq!(std::fs::metadata(&head).unwrap().len(), 1_295);
}

/// The proof that a part's frame hash leaves nothing unbound: every byte
/// of every part, changed (three ways), fails a full verify. The base64
/// lines are outside the frame and bound by their chunks' checks; every
/// other byte (framing, `begin`, `cont`, `idx` of a one-chunk array whose
/// `rows_per_chunk` no chunk pins, `ch`, `endch`, `endarr`, `endpart`) is
/// in the frame.
#[test]
fn every_byte_of_every_part_is_bound_by_frame_and_chunk_checks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let arrays = vec![
        ("a", "f32", vec![200], f32s(200, 1)),
        ("m", "f32", vec![40, 8], f32s(320, 2)),
        ("one", "u8", vec![3, 5], (0..15).collect()),
        ("z", "f32", vec![0], Vec::new()),
    ];
    let head = snapshot(d, "s", &arrays, &["--part-size", "4K", "--rows-per-chunk", "8"]);
    let ps = parts(&head);
    assert!(ps.len() >= 2, "{} parts", ps.len());
    let verifies = || wtxt::store::WtxtIn::verify_path(&head, None, &Default::default()).is_ok_and(|r| r.ok);
    assert!(verifies());
    let mut cases = 0;
    for p in &ps {
        let good = std::fs::read(p).unwrap();
        for i in 0..good.len() {
            for new in [good[i] ^ 0x01, good[i] ^ 0x20, if good[i] == b'0' { b'1' } else { b'0' }] {
                if new == good[i] {
                    continue;
                }
                let mut bad = good.clone();
                bad[i] = new;
                std::fs::write(p, &bad).unwrap();
                assert!(!verifies(), "{} byte {i} ({:?} -> {:?}) passes", p.display(), good[i] as char, new as char);
                cases += 1;
            }
        }
        std::fs::write(p, &good).unwrap();
    }
    assert!(cases > 10_000, "{cases}");
}

/// `git show REV:PATH` of a split snapshot gives its head alone: verifying
/// it says how to get the whole from history, and `wtxt git export -C DIR`
/// does, from anywhere.
#[test]
fn a_head_from_git_show_points_to_export() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let repo = d.join("repo");
    crate::util::git_ok(d, &["init", "-q", "repo"]);
    let o = wtxt()
        .arg("snapshot")
        .arg(crate::util::fixture("inputs/model.npz"))
        .args(["-o", repo.join("s.wtxt").to_str().unwrap(), "--gen", "0", "--part-size", "50000"])
        .args(["--rows-per-chunk", "64"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(repo.join("s.wtxt.parts").is_dir(), "the snapshot is split");
    crate::util::git_ok(&repo, &["add", "-A"]);
    crate::util::git_ok(&repo, &["commit", "-q", "--no-verify", "-m", "gen 0"]);
    let head = crate::util::git_ok(&repo, &["show", "HEAD:s.wtxt"]);
    std::fs::write(d.join("head.wtxt"), head).unwrap();
    let (code, err) = fails(&["verify".as_ref(), d.join("head.wtxt").as_os_str()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("`wtxt git export REV PATH -o OUT`"), "{err}");
    let o =
        wtxt().current_dir(d).args(["git", "export", "-C", "repo", "HEAD", "s.wtxt", "-o", "../whole.wtxt"]).output();
    let o = o.unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    ok(&["verify".as_ref(), d.join("whole.wtxt").as_os_str()]);
}
