//! Small hostile files that declare or expand to far
//! more than the heap cap. Every reader either reads them in bounded heap
//! (data that is really there goes to mapped temporary files, which are
//! file-backed pages) or refuses them before inflating anything; always a
//! clean exit with one line naming the file.
//!
//! The files are made by `tests/py/hostile.py`; the heap is the child's
//! anonymous RSS (`RssAnon` in /proc), sampled while it runs.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// What the hostile files expand to, in MiB: above the 256 MiB cap, so a
/// reader that held it would fail the bound below.
const EXPANDS_TO_MIB: u64 = 384;

/// The heap any of these commands may reach (the cap the docs name is
/// 256 MiB; these files need far less when read right).
const HEAP_BOUND_KIB: u64 = 128 << 10;

struct Outcome {
    code: i32,
    stderr: String,
    peak_anon_kib: u64,
    /// Resident pages of every kind, file-backed maps included.
    peak_rss_kib: u64,
    /// Pages of the file `watch` names that the process had mapped in.
    peak_watched_kib: u64,
}

/// A `kB` field of /proc/PID/status.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The resident kB of the process's maps of `path` (/proc/PID/smaps).
fn mapped_kib(pid: u32, path: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let name = path.to_str()?;
    let mut total = 0;
    let mut in_map = false;
    for l in s.lines() {
        // A map's header line starts with its address range, `a-b perms ...`.
        if l.split_whitespace()
            .next()
            .is_some_and(|f| f.contains('-') && f.chars().all(|c| c.is_ascii_hexdigit() || c == '-'))
        {
            in_map = l.ends_with(name);
        } else if let Some(v) = l.strip_prefix("Rss:").filter(|_| in_map) {
            total += v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()?;
        }
    }
    Some(total)
}

/// Runs the real binary and samples its anonymous RSS until it exits.
fn measured(args: &[&str], env: &[(&str, &str)]) -> Outcome {
    measured_watching(args, env, None)
}

/// [`measured`], also sampling how much of the file `watch` it has mapped in.
fn measured_watching(args: &[&str], env: &[(&str, &str)], watch: Option<&Path>) -> Outcome {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wtxt"));
    c.args(args).stdout(Stdio::null()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let (mut peak, mut peak_rss, mut peak_watched) = (0, 0, 0);
    let status = loop {
        if let Some(kib) = status_kib(child.id(), "RssAnon:") {
            peak = peak.max(kib);
        }
        if let Some(kib) = status_kib(child.id(), "VmRSS:") {
            peak_rss = peak_rss.max(kib);
        }
        if let Some(kib) = watch.and_then(|w| mapped_kib(child.id(), w)) {
            peak_watched = peak_watched.max(kib);
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    Outcome {
        code: status.code().unwrap_or(-1),
        stderr,
        peak_anon_kib: peak,
        peak_rss_kib: peak_rss,
        peak_watched_kib: peak_watched,
    }
}

fn make_files(dir: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/hostile.py");
    let o = Command::new("python3").arg(script).arg(dir).arg(EXPANDS_TO_MIB.to_string()).output().unwrap();
    assert!(o.status.success(), "hostile.py: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn every_reader_stays_in_bounded_heap_or_refuses_early() {
    let dir = tempfile::tempdir().unwrap();
    make_files(dir.path());
    let f = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    // (file, commands, expected exit code, what the message says)
    let cases: [(&str, u8, &str); 7] = [
        ("npz_deflated.npz", 0, "wrote"),
        ("fold_zstd.fold", 0, "wrote"),
        ("volp_body.volp", 0, "wrote"),
        ("npz_overlap.npz", 2, "overlap"),
        ("aero_window.aero", 2, "overlap"),
        ("aero_tidx.aero", 2, "values"),
        ("scrypt22.age", 2, "work factor 2^22"),
    ];
    for (name, code, says) in cases {
        let path = f(name);
        let runs: Vec<Vec<&str>> = if name.ends_with(".age") {
            vec![vec!["verify", &path, "-p"], vec!["decrypt", &path, "-p", "-o", "/dev/null"]]
        } else {
            vec![vec!["snapshot", &path, "-o", "/dev/null"], vec!["convert", &path, "--to", "npz", "-o", "/dev/null"]]
        };
        for args in runs {
            let o = measured(&args, &[("WTXT_PASSPHRASE", "not the passphrase")]);
            assert_eq!(o.code, code as i32, "{args:?}: {}", o.stderr);
            assert!(o.stderr.contains(says), "{args:?}: {}", o.stderr);
            if code != 0 {
                assert_eq!(o.stderr.lines().count(), 1, "one line: {}", o.stderr);
                assert!(o.stderr.contains(&path), "names the file: {}", o.stderr);
            }
            assert!(
                o.peak_anon_kib < HEAP_BOUND_KIB,
                "{args:?}: heap {} KiB for a file that expands to {EXPANDS_TO_MIB} MiB",
                o.peak_anon_kib
            );
        }
    }
}

/// Every container writer streams what a small file expands to. MLDF
/// gives every sample a record, so it refuses this file's 1-byte samples
/// (a 13 KB input would make a 16 GB MLDF) from the sizes, in one line.
#[test]
fn container_outputs_stream_or_refuse() {
    let dir = tempfile::tempdir().unwrap();
    make_files(dir.path());
    let fold = dir.path().join("fold_zstd.fold");
    let fold = fold.to_str().unwrap();
    for (to, code) in [("aero", 0), ("safetensors", 0), ("fold", 0), ("mldf", 2)] {
        let o = measured(&["convert", fold, "--to", to, "-o", "/dev/null"], &[]);
        assert_eq!(o.code, code, "--to {to}: {}", o.stderr);
        if code == 2 {
            assert!(o.stderr.contains("201326592 samples of 80 bytes of records"), "{}", o.stderr);
            assert_eq!(o.stderr.lines().count(), 1, "one line: {}", o.stderr);
        }
        assert!(o.peak_anon_kib < HEAP_BOUND_KIB, "--to {to}: heap {} KiB", o.peak_anon_kib);
    }
}

/// An MLDF whose 2000 fields all point their one sample at the same 1 MiB
/// blob: 1.5 MB of file that would gather 2 GB. The reader refuses it,
/// from the declared sizes, before it reserves anything.
#[test]
fn mldf_records_sharing_a_blob_do_not_amplify() {
    let dir = tempfile::tempdir().unwrap();
    let (fields, blob) = (2000u64, 1u64 << 20);
    let align = |x: u64, a: u64| x.div_ceil(a) * a;
    let desc_ptr = 9 + 64;
    let meta_ptr = align(desc_ptr + 208 * fields, 64);
    let data_ptr = align(meta_ptr + 16 * fields, 4096);
    let alloc_ptr = data_ptr + blob;
    let mut b = b"\x89MLDF\r\n\x1a\n".to_vec();
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes()); // one sample
    b.extend_from_slice(&(fields as u16).to_le_bytes());
    b.extend_from_slice(&[0; 2]);
    b.extend_from_slice(&4096u32.to_le_bytes());
    for p in [desc_ptr, meta_ptr, data_ptr, alloc_ptr] {
        b.extend_from_slice(&p.to_le_bytes());
    }
    b.extend_from_slice(&[0; 8]);
    for i in 0..fields {
        let mut d = [0u8; 208];
        d[..format!("f{i}").len()].copy_from_slice(format!("f{i}").as_bytes());
        d[64..66].copy_from_slice(&4u16.to_le_bytes()); // NDARRAY
        d[68..72].copy_from_slice(&16u32.to_le_bytes());
        d[76..78].copy_from_slice(b"u8");
        d[84] = 1; // ndim
        d[92..100].copy_from_slice(&blob.to_le_bytes());
        b.extend_from_slice(&d);
    }
    b.resize(meta_ptr as usize, 0);
    for _ in 0..fields {
        b.extend_from_slice(&data_ptr.to_le_bytes());
        b.extend_from_slice(&(blob as u32).to_le_bytes());
        b.extend_from_slice(&[0; 4]);
    }
    b.resize(alloc_ptr as usize, 7);
    b.extend_from_slice(&data_ptr.to_le_bytes());
    b.extend_from_slice(&(blob as u32).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    let path = dir.path().join("shared.mldf");
    std::fs::write(&path, &b).unwrap();
    let out = dir.path().join("out.wtxt");
    let o = measured(&["snapshot", path.to_str().unwrap(), "-o", out.to_str().unwrap()], &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("exceed the data region"), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "one line: {}", o.stderr);
    assert!(o.peak_anon_kib < HEAP_BOUND_KIB, "heap {} KiB", o.peak_anon_kib);
    assert!(!out.exists());
}

/// An MLDF whose page size its data region does not keep to is refused:
/// converting back honours the page size, and a 4 KB file (found by the
/// fuzzer) declaring 805 MB pages made an 805 MB MLDF of padding.
#[test]
fn an_mldf_page_size_its_file_does_not_keep_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mldf/fields.mldf")).unwrap();
    let data_ptr = u64::from_le_bytes(b[9 + 40..9 + 48].try_into().unwrap());
    let page = 805_310_464u32;
    assert!(!data_ptr.is_multiple_of(page as u64));
    b[9 + 20..9 + 24].copy_from_slice(&page.to_le_bytes());
    let path = dir.path().join("pages.mldf");
    std::fs::write(&path, &b).unwrap();
    let out = dir.path().join("out.mldf");
    let r = crate::util::run(&["convert", path.to_str().unwrap(), "-o", out.to_str().unwrap(), "--to", "mldf"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("pages.mldf: byte 29: page_size 805310464"), "{}", r.stderr);
    assert!(!out.exists());
}

/// MLDF is written and read in bounded heap: 300 MiB of samples, past
/// the 256 MiB its writer (which built the file in memory) refused before,
/// go to MLDF and back to the same safetensors as the `.npy` gives.
#[test]
fn mldf_is_written_and_read_in_bounded_heap() {
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("m.npy");
    let rows = 300 * 256;
    let head =
        crate::util::npy_header(&format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, 1024), }}"));
    let f = std::fs::File::create(&npy).unwrap();
    std::io::Write::write_all(&mut &f, &head).unwrap();
    f.set_len(head.len() as u64 + rows as u64 * 4096).unwrap(); // zeros, sparse
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let (mldf, back, direct) = (path("m.mldf"), path("back.safetensors"), path("direct.safetensors"));
    for args in [
        vec!["convert", npy.to_str().unwrap(), "--to", "mldf", "-o", &mldf],
        vec!["convert", &mldf, "--to", "safetensors", "-o", &back],
        vec!["convert", npy.to_str().unwrap(), "--to", "safetensors", "-o", &direct],
    ] {
        let o = measured(&args, &[]);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        assert!(o.peak_anon_kib < HEAP_BOUND_KIB, "{args:?}: heap {} KiB", o.peak_anon_kib);
    }
    assert!(std::fs::metadata(&mldf).unwrap().len() > 300 << 20);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&direct).unwrap(), "the same tensor comes back");
}

/// An array of a trillion empty samples holds no bytes, and a WTXT of it
/// is a few hundred bytes, but as MLDF every sample takes a record: the
/// writer refuses it from the sizes (it aborted allocating 16 TB before),
/// and every other writer takes it in bounded heap.
#[test]
fn a_trillion_empty_samples_are_refused_by_mldf_not_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("z.npy");
    let b = crate::util::npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, 0), }");
    std::fs::write(&npy, &b).unwrap();
    let w = dir.path().join("z.wtxt");
    let o = measured(&["snapshot", npy.to_str().unwrap(), "-o", w.to_str().unwrap()], &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for input in [&npy, &w] {
        for to in ["mldf", "npz", "safetensors", "aero", "fold"] {
            let out = dir.path().join(format!("out.{to}"));
            let o = measured(&["convert", input.to_str().unwrap(), "--to", to, "-o", out.to_str().unwrap()], &[]);
            assert!(o.peak_anon_kib < HEAP_BOUND_KIB, "--to {to}: heap {} KiB", o.peak_anon_kib);
            if to == "mldf" {
                assert_eq!(o.code, 2, "{}", o.stderr);
                assert!(o.stderr.contains("1000000000000 samples"), "{}", o.stderr);
                assert_eq!(o.stderr.lines().count(), 1, "one line: {}", o.stderr);
                assert!(!out.exists());
            } else {
                assert_eq!(o.code, 0, "--to {to}: {}", o.stderr);
            }
        }
    }
}

/// An `.npy` of `mib` MiB of f32 noise (rows of 1024), which compresses little.
fn noise_npy(dir: &Path, mib: usize) -> std::path::PathBuf {
    let npy = dir.join("m.npy");
    let rows = mib * 256;
    let mut bytes =
        crate::util::npy_header(&format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, 1024), }}"));
    bytes.extend((0..rows * 1024 * 4).map(|i: usize| (i.wrapping_mul(2654435761) >> 13) as u8));
    std::fs::write(&npy, bytes).unwrap();
    npy
}

/// FOLD, AERO and MLDF inputs are read a window at a time: a FOLD chunk is
/// hashed and decompressed, the NPZ inside it CRC-checked, an AERO shard
/// and its tensors BLAKE3-hashed, an MLDF's fields gathered in one pass,
/// each dropping pages once read, so a snapshot of a 96 MiB file never
/// holds it resident. Before, it did (a 1 GiB FOLD took 2 GB of RSS, a
/// 1 GiB AERO 1 GB, an MLDF its size in heap).
#[test]
fn fold_aero_and_mldf_inputs_are_read_a_window_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let npy = noise_npy(dir.path(), 96);
    for to in ["fold", "aero", "mldf"] {
        let c = dir.path().join(format!("m.{to}"));
        let o = measured(&["convert", npy.to_str().unwrap(), "--to", to, "-o", c.to_str().unwrap()], &[]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        if to == "mldf" {
            // MLDF's writer walks the samples; it drops what it has gone past.
            assert!(o.peak_rss_kib < 64 << 10, "--to mldf: resident at once: {} KiB", o.peak_rss_kib);
        }
        let out = dir.path().join(format!("{to}.wtxt"));
        let o = measured(&["snapshot", c.to_str().unwrap(), "-o", out.to_str().unwrap()], &[]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.peak_rss_kib < 64 << 10, "{to}: resident at once: {} KiB for 96 MiB", o.peak_rss_kib);
    }
}

/// A snapshot reads its input through a map, three times over (chunk sums,
/// array digests and `sha256_all`, the text): each reader drops the pages
/// it is done with, so a model of many GB is never wholly resident. Here a
/// 96 MiB input may have at most a third of itself mapped in at once.
#[test]
fn a_snapshot_keeps_windows_of_its_input_resident_not_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let npy = noise_npy(dir.path(), 96);
    let out = dir.path().join("m.wtxt");
    let o = measured_watching(&["snapshot", npy.to_str().unwrap(), "-o", out.to_str().unwrap()], &[], Some(&npy));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.peak_watched_kib > 0, "the input was never seen mapped");
    assert!(o.peak_watched_kib < 32 << 10, "input pages resident at once: {} KiB", o.peak_watched_kib);
}

/// Writes `arrays` as generation 0 at `path`, as the library's writers do.
fn write_gen0(arrays: &[wtxt::model::Array], path: &std::path::Path) {
    let opts = wtxt::format::WriteOptions::new(wtxt::format::syntax::Meta::new(0, None).unwrap(), 128);
    wtxt::store::write_wtxt(arrays, &opts, path, Default::default(), None, &wtxt::progress::Progress::hidden())
        .unwrap();
}

/// A WTXT whose npz exact form splices one 1 MiB array 3000 times: a small
/// file that would rebuild into a 3 GB archive.
#[test]
fn npz_exact_form_may_not_reuse_an_array() {
    use wtxt::model::{Array, Dtype};
    let dir = tempfile::tempdir().unwrap();
    let a = Array::new("a", Dtype::U8, vec![1 << 20], vec![0u8; 1 << 20].into()).unwrap();
    let skeleton = Array::new("__npz_skeleton", Dtype::U8, vec![4], b"PK\x05\x06".to_vec().into()).unwrap();
    let splices: Vec<serde_json::Value> =
        (0..3000).map(|_| serde_json::json!({"at": 0, "array": "a", "len": 1 << 20})).collect();
    let meta = wtxt::convert::meta_array("__npz", &serde_json::json!({"splices": splices})).unwrap();
    let path = dir.path().join("splices.wtxt");
    write_gen0(&[meta, skeleton, a], &path);
    let out = dir.path().join("out.npz");
    let o = measured(&["convert", path.to_str().unwrap(), "--to", "npz", "-o", out.to_str().unwrap()], &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("spliced in more than once"), "{}", o.stderr);
    assert!(!out.exists());
    assert!(o.peak_anon_kib < HEAP_BOUND_KIB, "heap {} KiB", o.peak_anon_kib);
    let bytes = std::fs::read(&path).unwrap();
    assert!(wtxt::git::smudge(&bytes, &Default::default()).is_err(), "the smudge filter refuses it too");
}

/// A verified WTXT whose `__names` gives two arrays one original name (or
/// an array the name of another) cannot be written as a container whose
/// names must be unique: exit 2 naming the name, never a panic (the
/// safetensors crate indexes out of bounds on a repeated name; found by
/// the `direct` fuzz target).
#[test]
fn original_names_that_collide_are_refused_by_every_writer() {
    use wtxt::model::{Array, Dtype};
    let dir = tempfile::tempdir().unwrap();
    for (i, names) in [serde_json::json!({"a": "x", "b": "x"}), serde_json::json!({"a": "b"})].iter().enumerate() {
        let a = Array::new("a", Dtype::F32, vec![2], vec![0u8; 8].into()).unwrap();
        let b = Array::new("b", Dtype::F32, vec![1], vec![0u8; 4].into()).unwrap();
        let meta = wtxt::convert::meta_array("__names", &serde_json::json!({ "names": names })).unwrap();
        let path = dir.path().join(format!("{i}.wtxt"));
        write_gen0(&[meta, a, b], &path);
        for ext in ["safetensors", "npz"] {
            let out = dir.path().join(format!("{i}.{ext}"));
            let o = measured(&["extract", path.to_str().unwrap(), "-o", out.to_str().unwrap()], &[]);
            assert_eq!(o.code, 2, "{names} -> {ext}: {}", o.stderr);
            assert!(o.stderr.contains("both named"), "{names} -> {ext}: {}", o.stderr);
            assert!(!out.exists());
        }
    }
}

/// A safetensors file of as many empty tensors as a snapshot may hold
/// (`MAX_ARRAYS`): snapshot and verify stay within the 256 MiB heap bound
/// (its head, over 16 MiB, is one a reader takes); one tensor more is
/// refused.
#[test]
fn the_most_tensors_a_snapshot_holds_fit_the_heap_bound() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |n: usize, name: &str| {
        let mut json = String::from("{");
        for i in 0..n {
            json.push_str(&format!("\"t{i:07}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}},"));
        }
        json.pop();
        json.push('}');
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(json.as_bytes());
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_string()
    };
    let cap = wtxt::limits::MAX_ARRAYS;
    let (at_cap, over) = (write(cap, "cap.safetensors"), write(cap + 1, "over.safetensors"));
    let snap = d.join("cap.wtxt").to_str().unwrap().to_string();
    let runs: [&[&str]; 2] = [&["snapshot", &at_cap, "-o", &snap], &["verify", &snap]];
    for args in runs {
        let o = measured(args, &[]);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        assert!(o.peak_anon_kib < 256 << 10, "{args:?}: {} KiB of heap", o.peak_anon_kib);
    }
    let o = measured(&["snapshot", &over, "-o", &d.join("over.wtxt").to_string_lossy()], &[]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("exceed the limit"), "{}", o.stderr);
}

/// The AERO writer refuses more tensors than its reader takes, naming the
/// limit, instead of writing a file wtxt itself would then refuse.
#[test]
fn aero_never_writes_more_tensors_than_it_reads() {
    use wtxt::model::{Array, Dtype};
    let n = wtxt::convert::aero::MAX_TIDX_TENSORS;
    let arrays: Vec<Array> =
        (0..=n).map(|i| Array::new(format!("t{i:07}"), Dtype::F32, vec![0], Vec::new().into()).unwrap()).collect();
    let e = wtxt::convert::aero::write(&arrays).expect_err("one tensor too many");
    assert!(e.message().contains(&format!("at most {n}")), "{e}");
}
