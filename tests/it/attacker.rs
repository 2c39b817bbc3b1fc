//! A hostile repository, pull request or key path: what a cloned work tree
//! or a path a user names cannot make `wtxt` read, write, follow or reset.

use std::path::Path;

use crate::util::{git_cmd, git_ok, wtxt};

fn init(dir: &Path) {
    git_ok(dir, &["init", "-q", "-b", "main"]);
}

/// A committed `.gitattributes` that is a link to a secret (or to a
/// device) is never read by `git install`: refused, exit 2, nothing copied.
#[test]
fn git_install_refuses_a_linked_gitattributes() {
    for target in ["secret", "/dev/zero"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let secret = d.join("secret");
        std::fs::write(&secret, "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
        let repo = d.join("repo");
        std::fs::create_dir(&repo).unwrap();
        init(&repo);
        let to = if target == "secret" { secret.clone() } else { target.into() };
        std::os::unix::fs::symlink(&to, repo.join(".gitattributes")).unwrap();
        git_ok(&repo, &["add", ".gitattributes"]);
        git_ok(&repo, &["-c", "user.name=a", "-c", "user.email=a@a", "commit", "-qm", "attributes"]);
        let o = wtxt().current_dir(&repo).args(["git", "install"]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{target}: {err}");
        assert!(err.contains(".gitattributes") && err.contains("symbolic link"), "{err}");
        assert!(std::fs::symlink_metadata(repo.join(".gitattributes")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "-----BEGIN OPENSSH PRIVATE KEY-----\n");
        assert!(!String::from_utf8_lossy(&o.stdout).contains("installed"));
    }
}

/// `git install --filter` checks out the files it now carries by their
/// index paths, literally: a committed file named `:!x.npz` is that file,
/// not a pattern that resets every modified file to HEAD.
#[test]
fn git_install_hands_git_literal_paths() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    init(repo);
    let text = std::fs::read(crate::util::fixture("expected/defaults.wtxt")).unwrap();
    std::fs::write(repo.join(":!x.npz"), &text).unwrap();
    std::fs::write(repo.join("notes.txt"), "committed\n").unwrap();
    git_ok(repo, &["add", "--", ":(literal):!x.npz", "notes.txt"]);
    let o = git_cmd(repo, &["commit", "-qm", "x"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(repo.join("notes.txt"), "uncommitted work\n").unwrap();
    let o = wtxt().current_dir(repo).args(["git", "install", "--filter", "npz"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(repo.join("notes.txt")).unwrap(), "uncommitted work\n");
    // The filtered file itself was checked out again through the filter.
    assert!(!std::fs::read(repo.join(":!x.npz")).unwrap().starts_with(b"WTXT"), "smudged to its binary form");
}

/// Key, trusted-keys, HMAC and identity files are regular files read
/// through a bounded reader: a device or a FIFO is refused at once (exit
/// 2, the file named), never read without end or waited on.
#[test]
fn key_files_that_are_devices_or_fifos_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let model = crate::util::fixture("inputs/model.npz");
    let out = d.join("o.wtxt");
    let signed = crate::util::fixture("expected/signed_pkcs8.wtxt");
    for bad in ["/dev/zero", fifo.to_str().unwrap()] {
        let cases: Vec<Vec<&std::ffi::OsStr>> = vec![
            vec![
                "snapshot".as_ref(),
                model.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
                "--sign-key".as_ref(),
                bad.as_ref(),
            ],
            vec![
                "snapshot".as_ref(),
                model.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
                "--hmac-key".as_ref(),
                bad.as_ref(),
            ],
            vec!["verify".as_ref(), signed.as_os_str(), "--trusted-keys".as_ref(), bad.as_ref()],
            vec!["verify".as_ref(), signed.as_os_str(), "--pubkey".as_ref(), bad.as_ref()],
            vec!["decrypt".as_ref(), "-i".as_ref(), bad.as_ref(), signed.as_os_str(), "-o".as_ref(), out.as_os_str()],
        ];
        for args in cases {
            let start = std::time::Instant::now();
            let o = wtxt().args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(bad) && err.contains("not a regular file"), "{args:?}: {err}");
            assert!(start.elapsed() < std::time::Duration::from_secs(20), "{args:?} waited");
            assert!(!out.exists());
        }
    }
}

/// A parts folder that is a symbolic link is refused by every writer (exit
/// 2, nothing written or deleted where it points); a part that is a link
/// (to a device, or to a file elsewhere) is replaced, never written
/// through or read.
#[test]
fn writers_never_follow_links_at_or_below_their_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = crate::util::fixture("inputs/model.npz");
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("000001.wtxtpart"), "precious\n").unwrap();
    std::fs::write(elsewhere.join("000009.wtxtpart"), "precious\n").unwrap();
    let out = d.join("m.wtxt");
    std::os::unix::fs::symlink(&elsewhere, d.join("m.wtxt.parts")).unwrap();
    let single = d.join("single.wtxt");
    let o = wtxt().arg("snapshot").arg(&model).arg("-o").arg(&single).args(["--part-size", "none"]).output().unwrap();
    assert!(o.status.success());
    let run = |cmd: &str, input: &Path, size: &str| -> Vec<std::ffi::OsString> {
        vec![cmd.into(), input.into(), "-o".into(), out.clone().into(), "--part-size".into(), size.into()]
    };
    let runs = [run("snapshot", &model, "48K"), run("split", &single, "48K"), run("snapshot", &model, "none")];
    for args in runs {
        let o = wtxt().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let whole = args.iter().any(|a| a == "none");
        if whole {
            // One file: the link is left alone, and nothing behind it is deleted.
            assert!(o.status.success(), "{args:?}: {err}");
        } else {
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("m.wtxt.parts") && err.contains("symbolic link"), "{err}");
            assert!(!out.exists(), "{args:?}: nothing under the final name");
        }
        let mut names: Vec<_> = std::fs::read_dir(&elsewhere).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["000001.wtxtpart", "000009.wtxtpart"], "{args:?}");
        assert_eq!(std::fs::read_to_string(elsewhere.join("000001.wtxtpart")).unwrap(), "precious\n");
        let _ = std::fs::remove_file(&out);
    }
    // A real folder whose parts are links: each is replaced by the part.
    std::fs::remove_file(d.join("m.wtxt.parts")).unwrap();
    std::fs::create_dir(d.join("m.wtxt.parts")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.join("m.wtxt.parts/000001.wtxtpart")).unwrap();
    std::os::unix::fs::symlink(elsewhere.join("000001.wtxtpart"), d.join("m.wtxt.parts/000002.wtxtpart")).unwrap();
    for cmd in ["snapshot", "split"] {
        let input = if cmd == "snapshot" { &model } else { &single };
        let o = wtxt().arg(cmd).arg(input).arg("-o").arg(&out).args(["--part-size", "48K"]).output().unwrap();
        assert!(o.status.success(), "{cmd}: {}", String::from_utf8_lossy(&o.stderr));
        for ix in [1, 2] {
            let p = d.join(format!("m.wtxt.parts/{ix:06}.wtxtpart"));
            assert!(std::fs::symlink_metadata(&p).unwrap().is_file(), "{cmd}: {} replaced", p.display());
        }
        assert_eq!(std::fs::read_to_string(elsewhere.join("000001.wtxtpart")).unwrap(), "precious\n");
        assert!(wtxt().arg("verify").arg(&out).output().unwrap().status.success());
        std::fs::remove_file(d.join("m.wtxt.parts/000001.wtxtpart")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.join("m.wtxt.parts/000001.wtxtpart")).unwrap();
        std::fs::remove_file(d.join("m.wtxt.parts/000002.wtxtpart")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("000001.wtxtpart"), d.join("m.wtxt.parts/000002.wtxtpart")).unwrap();
    }
}

/// Names that map to something beginning with `__` (JAX's
/// `['params']['w']`, `_.y`, `../x`) are tensors, not metadata: they round
/// trip through snapshot and extract, none dropped, none colliding.
#[test]
fn names_that_would_map_to_reserved_ones_round_trip() {
    use wtxt::model::{Array, Dtype};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let names = ["['params']['w']", "_.y", "../x", "x__y", "._"];
    let arrays: Vec<Array> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Array::with_original_name(n.to_string(), Dtype::U8, vec![2], vec![i as u8; 2].into()).unwrap())
        .collect();
    let npz = d.join("in.npz");
    wtxt::convert::npz::write(&arrays, std::fs::File::create(&npz).unwrap()).unwrap();
    let snap = d.join("s.wtxt");
    let o = wtxt().arg("snapshot").arg(&npz).arg("-o").arg(&snap).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = wtxt().arg("inspect").arg(&snap).arg("--json").output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let stored: Vec<&str> = v["arrays"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(stored.iter().filter(|n| !n.starts_with("__")).count(), names.len(), "{stored:?}");
    let out = d.join("out.npz");
    let o = wtxt().arg("extract").arg(&snap).arg("-o").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let src = wtxt::model::ArrayData::Owned(std::sync::Arc::new(std::fs::read(&out).unwrap()));
    let back = wtxt::convert::npz::read(&src).unwrap();
    let mut got: Vec<(String, Vec<u8>)> = back.iter().map(|a| (a.name.clone(), a.bytes().to_vec())).collect();
    got.sort();
    let mut want: Vec<(String, Vec<u8>)> =
        names.iter().enumerate().map(|(i, n)| (n.to_string(), vec![i as u8; 2])).collect();
    want.sort();
    assert_eq!(got, want);
}

/// `keygen -o EXISTING` does not replace a key (every signature made with
/// it would be orphaned) unless told to with `--force`.
#[test]
fn keygen_never_replaces_a_key_silently() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k.pem");
    assert!(wtxt().args(["keygen", "-o"]).arg(&key).output().unwrap().status.success());
    let before = std::fs::read(&key).unwrap();
    let o = wtxt().args(["keygen", "-o"]).arg(&key).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(std::fs::read(&key).unwrap(), before);
    assert!(wtxt().args(["keygen", "--force", "-o"]).arg(&key).output().unwrap().status.success());
    assert_ne!(std::fs::read(&key).unwrap(), before);
}

/// A part blob that inflates far past what its head declares (a few MB of
/// repository, hundreds of MB inflated) is refused by the hook and by `git
/// export` from its size alone, before it is read: the heap stays small.
#[test]
fn a_part_blob_larger_than_its_head_says_is_never_inflated() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let repo = d.join("repo");
    std::fs::create_dir(&repo).unwrap();
    init(&repo);
    let model = crate::util::fixture("inputs/model.npz");
    let o = wtxt().arg("snapshot").arg(&model).arg("-o").arg(repo.join("m.wtxt")).args(["--part-size", "48K"]).output();
    assert!(o.unwrap().status.success());
    // Part 2 replaced by 300 MB of one byte (compresses to well under a MB).
    let big = repo.join("m.wtxt.parts/000002.wtxtpart");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(300 << 20).unwrap();
    drop(f);
    git_ok(&repo, &["add", "-A"]);
    let measure = |args: &[&str]| {
        let o = std::process::Command::new("/usr/bin/time")
            .args(["-f", "%M"])
            .arg(env!("CARGO_BIN_EXE_wtxt"))
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let kib: u64 = err.lines().last().unwrap().trim().parse().unwrap();
        (o.status.code(), err, kib)
    };
    let (code, err, kib) = measure(&["hook", "pre-commit"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("000002.wtxtpart") && err.contains("the head says"), "{err}");
    assert!(kib < 64 << 10, "the hook held {kib} KiB");
    git_ok(&repo, &["-c", "user.name=a", "-c", "user.email=a@a", "commit", "-qm", "big", "--no-verify"]);
    let out = d.join("x.wtxt");
    let (code, err, kib) = measure(&["git", "export", "HEAD", "m.wtxt", "-o", out.to_str().unwrap()]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("000002.wtxtpart"), "{err}");
    assert!(kib < 64 << 10, "export held {kib} KiB");
    assert!(!out.exists());
}

/// A changed chunk too large to decode at once (two one-chunk parts of 40
/// MB text each) is shown by Git's part driver as changed, its element
/// counts left out and said so, without holding both decoded.
#[test]
fn the_part_driver_does_not_decode_a_huge_chunk_pair_whole() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    init(repo);
    assert!(wtxt().current_dir(repo).args(["git", "install"]).output().unwrap().status.success());
    let rows = 7000u32;
    let write_npy = |name: &str, seed: u32| {
        let mut v =
            crate::util::npy_header(&format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, 1000), }}"));
        for i in 0..rows * 1000 {
            v.extend_from_slice(&((i ^ seed) as f32).to_le_bytes());
        }
        let p = repo.join(format!("{name}.npy"));
        std::fs::write(&p, v).unwrap();
        p
    };
    // Two one-chunk arrays of 39 MB text each: one part each.
    let snap = |seed: u32, prev: Option<&std::path::Path>| {
        let (a, b) = (write_npy("a", seed), write_npy("b", 0));
        let mut c = wtxt();
        c.arg("snapshot").arg(&a).arg(&b).arg("-o").arg(repo.join("m.wtxt"));
        c.args(["--rows-per-chunk", &rows.to_string(), "--part-size", "40M", "--ts", "2026-01-01T00:00:00Z"]);
        if let Some(p) = prev {
            c.arg("--prev").arg(p);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::remove_file(&a).unwrap();
        std::fs::remove_file(&b).unwrap();
    };
    snap(0, None);
    std::fs::write(repo.join(".gitignore"), "*.npy\nprev.wtxt\nprev.wtxt.parts\n").unwrap();
    let commit = |m: &str| {
        git_ok(repo, &["add", "-A"]);
        let o = git_cmd(repo, &["commit", "-qm", m], &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    commit("g0");
    let o = wtxt().current_dir(repo).args(["git", "export", "HEAD", "m.wtxt", "-o", "prev.wtxt"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    snap(1, Some(&repo.join("prev.wtxt")));
    commit("g1");
    let o = git_cmd(repo, &["diff", "HEAD~1", "HEAD", "--", "m.wtxt.parts/000001.wtxtpart"], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("a: chunk 0 changed") && out.contains("element counts are left out"), "{out}");
}
