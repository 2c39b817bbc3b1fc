//! The tree digest form (`--digest tree`, FORMAT.md section 19) through
//! every command that reads or writes a snapshot: verify (damage found,
//! an unknown form refused), split and join, WSUM, DELTA v2, merge,
//! recover, diff, OMS, the Git hook and `log --verify`. The golden vectors
//! are in `golden.rs`.

use std::path::{Path, PathBuf};

use crate::util::{fixture, run, Run};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A tree-form snapshot of the fixtures' model at `out`, gen from `prev`.
fn snap(out: &Path, input: &str, prev: Option<&Path>, extra: &[&str]) -> Run {
    let mut args = vec!["snapshot", input, "-o", s(out), "--digest", "tree", "--ts", "2026-01-01T00:00:00Z"];
    if let Some(p) = prev {
        args.extend(["--prev", s(p)]);
    }
    args.extend(extra);
    run(&args)
}

#[test]
fn damage_is_found_and_an_unknown_form_refused() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("m.wtxt");
    let model = fixture("inputs/model.npz");
    assert_eq!(snap(&w, s(&model), None, &["--part-size", "none"]).code, 0);
    let text = std::fs::read_to_string(&w).unwrap();
    // A base64 byte changed and its chunk's line made to match: the array's
    // digest, built from the chunks', fails.
    let bad = dir.path().join("bad.wtxt");
    let at = text.find("\nendch\n").unwrap() - 8;
    let mut t = text.clone().into_bytes();
    t[at] = if t[at] == b'A' { b'B' } else { b'A' };
    std::fs::write(&bad, &t).unwrap();
    let r = run(&["verify", s(&bad)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    // A form this wtxt does not know: refused (exit 2), never checked as 1.1.
    let unknown = dir.path().join("unknown.wtxt");
    std::fs::write(&unknown, text.replace(",digest_tree\n", ",digest_tree2\n")).unwrap();
    let r = run(&["verify", s(&unknown)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("digest_tree2") && r.stderr.contains("does not know"), "{}", r.stderr);
    // The form is not the 1.1 one: its digests do not pass as 1.1's.
    let as_11 = dir.path().join("as11.wtxt");
    std::fs::write(&as_11, text.replace(",digest_tree\n", "\n")).unwrap();
    assert_eq!(run(&["verify", s(&as_11)]).code, 1);
    let r = run(&["inspect", s(&w)]);
    assert!(r.stdout.contains("\ndigest tree"), "{}", r.stdout);
    let j: serde_json::Value = serde_json::from_str(&run(&["inspect", s(&w), "--json"]).stdout).unwrap();
    assert_eq!(j["digest"], "tree");
}

#[test]
fn every_command_keeps_the_form() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = fixture("keys/hmac.hex");
    let sign = fixture("keys/sign.pem");
    let base = fixture("inputs/delta_base.npz");
    let target = fixture("inputs/delta_target.npz");
    let g0 = d.join("g0.wtxt");
    let g1 = d.join("g1.wtxt");
    let hm = ["--hmac-key", s(&key), "--sign-key", s(&sign), "--part-size", "64K"];
    assert_eq!(snap(&g0, s(&base), None, &hm).code, 0);
    let r = snap(&g1, s(&target), Some(&g0), &hm);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let tree = |p: &Path| std::fs::read_to_string(p).unwrap().lines().nth(2).unwrap().ends_with(",digest_tree");
    assert!(tree(&g0) && tree(&g1));
    let r = run(&["verify", s(&g1), "--prev", s(&g0), "--hmac-key", s(&key)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Join and split: exact inverses, the same sha256_all.
    let one = d.join("one.wtxt");
    assert_eq!(run(&["join", s(&g1), "-o", s(&one)]).code, 0);
    let again = d.join("again.wtxt");
    assert_eq!(run(&["split", s(&one), "-o", s(&again), "--part-size", "64K"]).code, 0);
    assert_eq!(std::fs::read(&again).unwrap(), std::fs::read(&g1).unwrap());
    // DELTA v2: the target rebuilt byte for byte, and a minimal delta's
    // output keeps the base's form.
    let delta = d.join("d.wtxtdelta");
    assert_eq!(run(&["delta", "create", s(&g0), s(&one), "-o", s(&delta)]).code, 0);
    let rebuilt = d.join("rebuilt.wtxt");
    let r = run(&["delta", "apply", s(&g0), s(&delta), "-o", s(&rebuilt), "--hmac-key", s(&key)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(std::fs::read(&rebuilt).unwrap(), std::fs::read(&one).unwrap());
    // WTXT-S and its WSUM.
    let streaming = d.join("s.wtxt");
    let wsum = d.join("s.wsum");
    let r = snap(&streaming, s(&target), None, &["--streaming", "--wsum", s(&wsum), "--part-size", "none"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(run(&["verify", s(&streaming), "--wsum", s(&wsum)]).code, 0);
    // Merge: the result is of ours' form, and verifies.
    let theirs = d.join("theirs.wtxt");
    assert_eq!(snap(&theirs, s(&target), Some(&g0), &["--part-size", "none"]).code, 0);
    let merged = d.join("merged.wtxt");
    let r = run(&["merge", s(&g0), s(&g1), s(&theirs), "-o", s(&merged), "--strategy", "ours"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(tree(&merged));
    assert_eq!(run(&["verify", s(&merged)]).code, 0);
    // Diff compares chunk digests, whatever the form.
    let r = run(&["diff", s(&g0), s(&g1), "--exit-code"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    // Recover: a damaged single file gives its whole arrays back, checked in
    // its own form; with the key, they are tagged again in it.
    let damaged = d.join("damaged.wtxt");
    let mut t = std::fs::read(&one).unwrap();
    let at = String::from_utf8_lossy(&t).rfind("\nendch\n").unwrap() - 8;
    t[at] = if t[at] == b'A' { b'B' } else { b'A' };
    std::fs::write(&damaged, &t).unwrap();
    let rescued = d.join("rescued.wtxt");
    let r = run(&["recover", s(&damaged), "-o", s(&rescued), "--hmac-key", s(&key)]);
    assert_eq!(r.code, 1, "an array was lost: {}", r.stderr);
    assert!(tree(&rescued));
    assert_eq!(run(&["verify", s(&rescued), "--hmac-key", s(&key)]).code, 0);
}

/// OMS, the Git hook and `log --verify` on the tree form.
#[test]
fn signatures_and_git_take_the_form_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let repo = d.join("repo");
    crate::util::git_ok(d, &["init", "-q", "-b", "main", "repo"]);
    let w = crate::util::wtxt().current_dir(&repo).args(["git", "install"]).output().unwrap();
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    let base = fixture("inputs/delta_base.npz");
    let target = fixture("inputs/delta_target.npz");
    let m = repo.join("m.wtxt");
    assert_eq!(snap(&m, s(&base), None, &["--part-size", "64K"]).code, 0);
    crate::util::git_ok(&repo, &["add", "-A"]);
    crate::util::git_ok(&repo, &["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "g0"]);
    let prev = d.join("prev.wtxt");
    assert_eq!(run(&["join", s(&m), "-o", s(&prev)]).code, 0);
    assert_eq!(snap(&m, s(&target), Some(&prev), &["--part-size", "64K"]).code, 0);
    crate::util::git_ok(&repo, &["add", "-A"]);
    crate::util::git_ok(&repo, &["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "g1"]);
    let log = crate::util::wtxt().current_dir(&repo).args(["log", "--verify", "m.wtxt"]).output().unwrap();
    assert!(log.status.success(), "{}", String::from_utf8_lossy(&log.stdout));
    // OMS over a tree-form snapshot's folder.
    let oms = d.join("oms");
    std::fs::create_dir(&oms).unwrap();
    let key = d.join("ec.pem");
    assert_eq!(run(&["keygen", "-o", s(&key), "--type", "p256"]).code, 0);
    let o = oms.join("m.wtxt");
    assert_eq!(snap(&o, s(&base), None, &["--part-size", "64K", "--oms-key", s(&key)]).code, 0);
    let r = run(&["verify", s(&o), "--oms-pubkey", &format!("{}.pub", s(&key))]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `text` with one byte changed: the one `skip` bytes into the line after
/// the first line starting `ch ` below `arr name=NAME`, or, with
/// `in_ch_line`, that `ch` line's SHA-256 digit `skip`.
fn changed(text: &[u8], name: &str, in_ch_line: bool, skip: usize) -> Vec<u8> {
    let t = std::str::from_utf8(text).unwrap();
    let arr = t.find(&format!("\narr name={name} ")).unwrap();
    let ch = arr + t[arr..].find("\nch ").unwrap() + 1;
    let at = if in_ch_line {
        ch + t[ch..].find(" sha256=").unwrap() + " sha256=".len() + skip
    } else {
        ch + t[ch..].find('\n').unwrap() + 1 + skip
    };
    let mut out = text.to_vec();
    out[at] = match out[at] {
        b'A' => b'B',
        b'0' => b'1',
        b if b.is_ascii_digit() => b'0',
        // A hex digit stays one.
        b'a' if in_ch_line => b'b',
        _ if in_ch_line => b'a',
        _ => b'A',
    };
    out
}

/// Issue 68.3: `extract --array` gives exactly the bytes a full read gives;
/// in the tree form it decodes only that array's chunks, and passes over
/// the other arrays whole, their `arr` lines bound by the root, so a byte
/// or a `ch` line changed in what it returns is refused, while the arrays
/// it passes over are not its concern (docs/SECURITY.md). The 1.1 form
/// checks every byte still.
#[test]
fn one_array_alone_is_the_full_reads_bytes_and_what_it_skips_is_bound_by_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = fixture("inputs/model.npz");
    let tree = d.join("tree.wtxt");
    assert_eq!(snap(&tree, s(&model), None, &["--part-size", "none", "--rows-per-chunk", "8"]).code, 0);
    let v11 = d.join("v11.wtxt");
    let r = run(&["snapshot", s(&model), "-o", s(&v11), "--part-size", "none", "--rows-per-chunk", "8"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read(&tree).unwrap();
    let full = wtxt::format::load(&text[..], text.len() as u64, &Default::default()).unwrap();
    let want = full.arrays.iter().find(|a| a.name == "tok_embed").unwrap().bytes().to_vec();
    let extract = |file: &Path| {
        let out = file.with_extension("npy");
        let r = run(&["extract", s(file), "--array", "tok_embed", "-o", s(&out)]);
        (r, std::fs::read(&out).ok())
    };
    for file in [&tree, &v11] {
        let (r, got) = extract(file);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let got = got.unwrap();
        assert!(got.starts_with(b"\x93NUMPY") && got.ends_with(&want), "{}", file.display());
    }
    let cases = [
        // (file, array, in its `ch` line, exit code)
        (&tree, "tok_embed", false, 1),
        (&tree, "tok_embed", true, 1),
        (&tree, "long_vec", true, 0),
        (&tree, "long_vec", false, 0),
        (&v11, "long_vec", false, 1),
    ];
    for (n, (file, array, in_ch, code)) in cases.into_iter().enumerate() {
        let bad = d.join(format!("bad{n}.wtxt"));
        std::fs::write(&bad, changed(&std::fs::read(file).unwrap(), array, in_ch, 5)).unwrap();
        let (r, got) = extract(&bad);
        assert_eq!(r.code, code, "case {n}: {}", r.stderr);
        if code == 0 {
            assert!(got.unwrap().ends_with(&want), "case {n}");
        } else {
            assert!(got.is_none(), "case {n}: nothing written");
        }
    }
}

/// Issue 68.1: from a split snapshot of the tree form, `extract --array`
/// opens only the parts that hold the array: the others may hold anything
/// of their size. What
/// it returns is the full read's bytes, and damage in it is named by part
/// and line.
#[test]
fn one_array_of_a_split_snapshot_is_read_from_the_parts_that_hold_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tree = d.join("tree.wtxt");
    crate::util::spanning_snapshot(d, &tree, ["a", "b", "tok_embed", "x", "y"]);
    let parts = d.join("tree.wtxt.parts");
    let part_files: Vec<PathBuf> =
        (1..).map(|i| parts.join(format!("{i:06}.wtxtpart"))).take_while(|p| p.exists()).collect();
    let holding: Vec<&PathBuf> = part_files
        .iter()
        .filter(|p| memchr::memmem::find(&std::fs::read(p).unwrap(), b"name=tok_embed ").is_some())
        .collect();
    assert!(!holding.is_empty() && holding.len() + 2 <= part_files.len(), "{} of {}", holding.len(), part_files.len());
    // The full read: the parts joined, every byte verified.
    let single = d.join("single.wtxt");
    let r = run(&["join", s(&tree), "-o", s(&single)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read(&single).unwrap();
    let full = wtxt::format::load(&text[..], text.len() as u64, &Default::default()).unwrap();
    let want = full.arrays.iter().find(|a| a.name == "tok_embed").unwrap().bytes().to_vec();
    let one = d.join("one.npy");
    let extract = || run(&["extract", s(&tree), "--array", "tok_embed", "-o", s(&one)]);
    // Every part that holds none of it overwritten with other bytes of its
    // size (what a read that never opens it cannot tell; a missing one it
    // refuses, see `a_read_of_some_arrays_checks_the_parts_it_leaves_unread`).
    for p in &part_files {
        if !holding.contains(&p) {
            std::fs::write(p, vec![b'x'; std::fs::metadata(p).unwrap().len() as usize]).unwrap();
        }
    }
    let r = extract();
    assert_eq!(r.code, 0, "{}", r.stderr);
    let got = std::fs::read(&one).unwrap();
    assert!(got.starts_with(b"\x93NUMPY") && got.ends_with(&want), "the full read's bytes");
    // A base64 byte of it changed, in its last part: refused, naming that part.
    let last = holding.last().unwrap();
    let mut t = std::fs::read(last).unwrap();
    let at = memchr::memmem::rfind(&t, b"\nendch").unwrap() - 3;
    t[at] = if t[at] == b'A' { b'B' } else { b'A' };
    std::fs::write(last, &t).unwrap();
    std::fs::remove_file(&one).unwrap();
    let r = extract();
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains(&last.file_name().unwrap().to_string_lossy().to_string()), "{}", r.stderr);
    assert!(!one.exists(), "nothing written");
}

/// A split snapshot of the tree form checked with some of its parts left
/// out ([`wtxt::format::split::Joined::leaving_out`]): the arrays they hold,
/// carried with the `fastxor` shares a full check recorded, stand in for
/// them, and every check a full read makes still fails where it should.
#[test]
fn carried_arrays_stand_in_for_the_parts_left_out_and_nothing_else() {
    use wtxt::format::split::{self, carry_plan, CarrySource};
    use wtxt::format::{syntax::ArrLine, Carried, VerifyOptions};
    use wtxt::store::{PartFiles, WtxtIn};
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.wtxt");
    crate::util::spanning_snapshot(dir.path(), &m, ["a", "b", "c", "d", "e"]);
    let hidden = wtxt::progress::Progress::hidden();
    let full = WtxtIn::open_lenient(&m, None).unwrap().verify(&VerifyOptions::default(), &hidden).unwrap();
    assert!(full.ok && full.fastxor.is_some());
    let head = || {
        let split::Opened::Split(h) = split::open(Box::new(std::fs::File::open(&m).unwrap())).unwrap() else {
            panic!("split")
        };
        h
    };
    let digests: Vec<_> = head().arrs.iter().flatten().map(|a| ArrLine::parse(a).unwrap().sha256).collect();
    let shares: std::collections::HashMap<_, _> = digests.iter().copied().zip(full.fastxor_shares.clone()).collect();
    /// The generation against itself, the parts in `changed` taken as new.
    struct Itself<'a> {
        changed: Vec<usize>,
        shares: &'a std::collections::HashMap<[u8; 32], u64>,
        parts: &'a Path,
    }
    impl CarrySource for Itself<'_> {
        fn same_bytes(&self, i: usize) -> bool {
            !self.changed.contains(&i)
        }
        fn starts_inside(&self, i: usize) -> bool {
            let text = std::fs::read_to_string(self.parts.join(split::part_name(i as u64 + 1))).unwrap();
            text.lines().nth(1).unwrap().starts_with("cont ")
        }
        fn share(&self, sha256: &[u8; 32]) -> Option<u64> {
            self.shares.get(sha256).copied()
        }
    }
    let parts = wtxt::store::parts_dir(&m);
    let check = |left_out: &[bool], carried: &Carried| {
        let source = Box::new(PartFiles::new(parts.clone(), None));
        let len = std::fs::metadata(&m).unwrap().len();
        let input = WtxtIn::joined_leaving_out(head(), source, &m, len, left_out);
        input.verify(&VerifyOptions { carried: Some(carried), ..Default::default() }, &hidden).unwrap()
    };
    // The middle array's parts taken as changed: the others are carried,
    // the parts only they reach left out, and the result is the full one.
    let n = head().parts.len();
    let itself = Itself { changed: vec![n / 2], shares: &shares, parts: &parts };
    let plan = carry_plan(&head(), &head(), &itself).unwrap();
    assert!(plan.parts_left_out() > 0 && plan.parts_left_out() < n, "{:?}", plan.left_out);
    let r = check(&plan.left_out, &plan.carried);
    assert!(r.ok, "{:?}", r.errors);
    assert_eq!((r.fastxor, r.sha256_all, &r.fastxor_shares), (full.fastxor, full.sha256_all, &full.fastxor_shares));
    // Every part left out: the head alone, with every array's share.
    let all = carry_plan(&head(), &head(), &Itself { changed: vec![], shares: &shares, parts: &parts }).unwrap();
    assert!(all.left_out.iter().all(|&o| o));
    assert!(check(&all.left_out, &all.carried).ok);
    // A share that is not the array's: fastxor no longer matches.
    let wrong: std::collections::HashMap<_, _> = shares.iter().map(|(d, s)| (*d, s ^ 1)).collect();
    let forged = carry_plan(&head(), &head(), &Itself { changed: vec![], shares: &wrong, parts: &parts }).unwrap();
    let r = check(&forged.left_out, &forged.carried);
    assert!(!r.ok && r.errors.iter().any(|p| p.message.contains("fastxor")), "{:?}", r.errors);
    // An array carried under a digest its `arr` line does not carry is not
    // passed over: the text left out breaks where it should have been.
    let mut other = Carried::default();
    for (k, d) in digests.iter().enumerate() {
        other.insert(["a", "b", "c", "d", "e"][k].to_string(), if k == 1 { [0; 32] } else { *d }, shares[d]);
    }
    assert!(!check(&all.left_out, &other).ok);
    // Parts left out that an array read reaches: refused, never passed.
    let mut holes = plan.left_out.clone();
    holes[n / 2] = true;
    assert!(!check(&holes, &plan.carried).ok);
}

/// Issue 80.2: a read of some arrays leaves parts unopened, but checks each
/// of them for what can be told without reading it, from a folder and from
/// a commit: present, of the head's size, and no part the head does not
/// list. What it cannot tell unread (a part swapped for another of the
/// same size) is for a whole verify (docs/SECURITY.md).
#[test]
fn a_read_of_some_arrays_checks_the_parts_it_leaves_unread() {
    use crate::util::{git_ok, wtxt};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "-b", "main", "w"]);
    let w = d.join("w");
    crate::util::spanning_snapshot(d, &w.join("m.wtxt"), ["a", "b", "c", "d", "e"]);
    let parts = w.join("m.wtxt.parts");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&parts).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    let holds_c = |p: &Path| memchr::memmem::find(&std::fs::read(p).unwrap(), b"name=c ").is_some();
    let far = names.iter().rev().find(|p| !holds_c(p)).unwrap().clone();
    let original = std::fs::read(&far).unwrap();
    let extract = |args: &[&str]| {
        let base = ["extract", "m.wtxt", "--array", "c", "-o", "../c.npy"];
        let o = wtxt().current_dir(&w).args(base).args(args).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    assert_eq!(extract(&[]).0, Some(0));
    let mut longer = original.clone();
    longer.push(b'\n');
    std::fs::write(&far, &longer).unwrap();
    let (code, said) = extract(&[]);
    assert!(code == Some(1) && said.contains("does not match the head"), "{said}");
    std::fs::remove_file(&far).unwrap();
    let (code, said) = extract(&[]);
    assert!(code == Some(1) && said.contains("missing part"), "{said}");
    std::fs::write(&far, &original).unwrap();
    std::fs::write(parts.join("000099.wtxtpart"), &original).unwrap();
    let (code, said) = extract(&[]);
    assert!(code == Some(1) && said.contains("a part the head does not list"), "{said}");
    std::fs::remove_file(parts.join("000099.wtxtpart")).unwrap();
    // From a commit: the good generation, then one whose far part is
    // longer (committed past the hook).
    git_ok(&w, &["add", "-A"]);
    git_ok(&w, &["commit", "-q", "--no-verify", "-m", "gen 0"]);
    std::fs::write(&far, &longer).unwrap();
    git_ok(&w, &["add", "-A"]);
    git_ok(&w, &["commit", "-q", "--no-verify", "-m", "gen 0, a part grown"]);
    std::fs::write(&far, &original).unwrap();
    assert_eq!(extract(&["--rev", "HEAD~1"]).0, Some(0));
    let (code, said) = extract(&["--rev", "HEAD"]);
    assert!(code == Some(1) && said.contains("does not match the head"), "{said}");
}
