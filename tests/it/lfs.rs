//! Parts in Git LFS (`wtxt git install --lfs`), end to end against a real
//! LFS server (giftless) and the real `git lfs` client, on 127.0.0.1.

use std::path::{Path, PathBuf};

use crate::util::{fixture, git_cmd, git_ok, wtxt};

/// Writes generation `n` of `m.wtxt` in `w`, split into small parts (each
/// generation chunked differently, so every part changes).
pub(crate) fn write_generation(w: &Path, n: u32) {
    let rows = (64 - 16 * n).to_string();
    let mut c = wtxt();
    c.arg("snapshot").arg(fixture("inputs/model.npz")).args(["-o", "m.wtxt", "--part-size", "50000"]);
    c.args(["--rows-per-chunk", &rows, "--ts", &format!("2026-04-01T00:00:0{n}Z")]);
    if n == 0 {
        c.args(["--gen", "0"]);
    } else {
        c.args(["--prev", "m.wtxt"]);
    }
    let o = c.current_dir(w).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A new repository `d/w` whose parts go to the LFS server at `lfs_url`
/// (`wtxt git install --lfs`).
fn lfs_repository(d: &Path, lfs_url: &str) -> PathBuf {
    git_ok(d, &["init", "-q", "-b", "main", "w"]);
    let w = d.join("w");
    git_ok(&w, &["config", "lfs.url", lfs_url]);
    let o = wtxt().current_dir(&w).args(["git", "install", "--lfs"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    w
}

/// A work tree set up with `--lfs` whose LFS server is `lfs_url`, and three
/// generations committed: by `git commit` (through Git LFS's filter and the
/// pre-commit hook), by wtxt's own commit (the daemon's, the Snapshotter's
/// and the distributed writer's way), and by `git commit` again.
fn lfs_history(d: &Path, lfs_url: &str) -> PathBuf {
    let w = lfs_repository(d, lfs_url);
    for n in 0..3u32 {
        write_generation(&w, n);
        if n == 1 {
            wtxt::git::commit_written(&w.join("m.wtxt"), false, "t", "gen 1").unwrap();
        } else {
            git_ok(&w, &["add", "-A"]);
            git_ok(&w, &["commit", "-q", "-m", &format!("gen {n}")]);
        }
        let part = git_ok(&w, &["cat-file", "-p", "HEAD:m.wtxt.parts/000001.wtxtpart"]);
        assert!(part.starts_with("version https://git-lfs.github.com/spec/v1\noid sha256:"), "gen {n}: {part}");
    }
    w
}

fn log_json(repo: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let o = wtxt().current_dir(repo).arg("log").args(args).args(["m.wtxt", "--json"]).output().unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code(), v)
}

/// Issue 66.2: heads in Git, parts as LFS objects on a real LFS server,
/// pushed as the daemon pushes; a blobless clone that fetched no LFS object logs, verifies (fetching
/// through `git lfs`), exports an old generation and diffs by tensor; an
/// LFS object changed in the clone's store is caught as damage.
#[test]
fn parts_live_in_git_lfs_and_every_command_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = d.join("lfs-store");
    let (_lfs, lfs_url) = crate::util::lfs_server(&store, "models");
    let w = lfs_history(d, &lfs_url);
    let (served, _bare) = crate::util::served_repository(d);
    let (_git, port) = crate::util::git_daemon(&served);
    let url = format!("git://127.0.0.1:{port}/models.git");
    // The guard on the host verifies parts from the LFS server's store.
    git_ok(&served.join("models.git"), &["config", "wtxt.lfsObjects", store.join("wtxt/models").to_str().unwrap()]);
    // Pushed as the daemon and the Snapshotter push (wtxt::git::push, Git
    // LFS's pre-push hook sending the objects), one generation a push.
    let stop = std::sync::atomic::AtomicBool::new(false);
    for rev in ["HEAD~2", "HEAD~1", "HEAD"] {
        let commit = git_ok(&w, &["rev-parse", rev]);
        let what = wtxt::git::Push { commit: Some(commit.trim()), changed_wholly: rev == "HEAD~2" };
        wtxt::git::push(&w, &url, what, &stop).unwrap().done().unwrap();
    }
    let objects = std::fs::read_dir(store.join("wtxt/models")).unwrap().count();
    assert_eq!(objects, 6, "two parts a generation, each an LFS object");

    // A blobless clone that smudges nothing: pointers only, no LFS object.
    let env = [("GIT_LFS_SKIP_SMUDGE", "1")];
    let o = git_cmd(d, &["clone", "-q", "--filter=blob:none", "-c", &format!("lfs.url={lfs_url}"), &url, "c"], &env);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = d.join("c");
    let lfs_objects = |repo: &Path| {
        let mut n = 0;
        for e in walk(&repo.join(".git/lfs/objects")) {
            n += usize::from(e.is_file());
        }
        n
    };
    let (code, v) = log_json(&c, &[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["chains"][0]["generations"].as_array().unwrap().len(), 3, "{v}");
    assert_eq!(lfs_objects(&c), 0, "the chain is proven from the heads alone");
    let (code, v) = log_json(&c, &["--verify"]);
    assert_eq!(code, Some(0), "{v}");
    assert!(v["chains"][0]["generations"].as_array().unwrap().iter().all(|g| g["data"] == "verified"), "{v}");
    assert_eq!(lfs_objects(&c), 6, "git lfs fetch brought every generation's parts");

    // An old generation by revision, from a fresh clone.
    let o = git_cmd(d, &["clone", "-q", "--filter=blob:none", "-c", &format!("lfs.url={lfs_url}"), &url, "e"], &env);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = wtxt().current_dir(d.join("e")).args(["git", "export", "HEAD~2", "m.wtxt", "-o", "../old.wtxt"]).output();
    let o = o.unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = wtxt().arg("verify").arg(d.join("old.wtxt")).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("gen 000000"), "{}", String::from_utf8_lossy(&o.stdout));

    // `git diff` by tensor in the clone, once wtxt's drivers are installed there.
    let o = wtxt().current_dir(&c).args(["git", "install", "--lfs"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let diff = git_ok(&c, &["diff", "HEAD~1", "HEAD"]);
    assert!(diff.contains("header gen: 000001 -> 000002"), "{diff}");
    assert!(diff.contains("array(s) with unchanged values") && !diff.contains("oid sha256"), "{diff}");

    // Damage in an LFS object: found, named by generation.
    let victim = walk(&c.join(".git/lfs/objects")).into_iter().find(|p| p.is_file()).unwrap();
    let mut bytes = std::fs::read(&victim).unwrap();
    let at = bytes.len() / 2;
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(&victim, bytes).unwrap();
    let (code, v) = log_json(&c, &["--verify"]);
    assert_eq!(code, Some(1), "{v}");
    assert!(v["chains"][0]["generations"].as_array().unwrap().iter().any(|g| g["data"] == "failed"), "{v}");
}

/// The host's guard reads parts where `wtxt.lfsObjects` says; where it
/// cannot read them, it refuses the push rather than pass data it never
/// saw.
#[test]
fn the_guard_verifies_lfs_parts_or_refuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = d.join("lfs-store");
    let (_lfs, lfs_url) = crate::util::lfs_server(&store, "models");
    let w = lfs_history(d, &lfs_url);
    let (_served, bare) = crate::util::served_repository(d);
    let o = git_cmd(&w, &["push", "-q", bare.to_str().unwrap(), "main"], &[]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a push whose parts the guard cannot read passed");
    assert!(said.contains("Git LFS object") && said.contains("wtxt.lfsObjects"), "{said}");
    git_ok(&bare, &["config", "wtxt.lfsObjects", store.join("wtxt/models").to_str().unwrap()]);
    git_ok(&w, &["push", "-q", bare.to_str().unwrap(), "main"]);
    assert!(git_ok(&bare, &["rev-parse", "main"]).trim() == git_ok(&w, &["rev-parse", "HEAD"]).trim());
}

/// A real LFS server keeping its objects in `d/lfs-store`, a work tree
/// `d/w` set up with `--lfs` for it, and `m.wtxt` there, a tree-form split
/// snapshot of five arrays `a`..`e` spanning several parts each (not yet
/// committed): the server, its LFS URL, its store, the work tree and the
/// arrays' bytes.
fn lfs_snapshot(d: &Path) -> (crate::util::Server, String, PathBuf, PathBuf, Vec<Vec<u8>>) {
    let store = d.join("lfs-store");
    let (lfs, lfs_url) = crate::util::lfs_server(&store, "models");
    let w = lfs_repository(d, &lfs_url);
    let arrays = crate::util::spanning_snapshot(d, &w.join("m.wtxt"), ["a", "b", "c", "d", "e"]);
    (lfs, lfs_url, store, w, arrays)
}

/// [`lfs_snapshot`], committed as generation 0.
fn committed_lfs_snapshot(d: &Path) -> (crate::util::Server, String, PathBuf, PathBuf, Vec<Vec<u8>>) {
    let s = lfs_snapshot(d);
    git_ok(&s.3, &["add", "-A"]);
    git_ok(&s.3, &["commit", "-q", "-m", "gen 0"]);
    s
}

/// How many parts of `w/m.wtxt` hold chunks of array `name`.
fn parts_holding(w: &Path, name: &str) -> usize {
    holding(w, name).len()
}

/// The parts of `w/m.wtxt` that hold chunks of array `name`, their bytes.
fn holding(w: &Path, name: &str) -> std::collections::BTreeSet<Vec<u8>> {
    let needle = format!("name={name} ");
    std::fs::read_dir(w.join("m.wtxt.parts"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .filter(|bytes| memchr::memmem::find(bytes, needle.as_bytes()).is_some())
        .collect()
}

/// `w`'s main pushed to a guarded bare repository whose guard reads the LFS
/// server's `store`, served by a real `git daemon`: the daemon and its URL.
fn serve(d: &Path, w: &Path, store: &Path) -> (crate::util::Server, String) {
    let (served, bare) = crate::util::served_repository(d);
    git_ok(&bare, &["config", "wtxt.lfsObjects", store.join("wtxt/models").to_str().unwrap()]);
    git_ok(w, &["push", "-q", bare.to_str().unwrap(), "main"]);
    let (git, port) = crate::util::git_daemon(&served);
    (git, format!("git://127.0.0.1:{port}/models.git"))
}

/// `w` served ([`serve`]) and cloned into `d/c` blobless, with no checkout
/// (a checkout would fetch every blob of the tip) and no LFS object.
fn bare_clone(d: &Path, w: &Path, store: &Path, lfs_url: &str) -> (crate::util::Server, PathBuf) {
    let (git, url) = serve(d, w, store);
    let clone = ["clone", "-q", "--no-checkout", "--filter=blob:none", "-c", &format!("lfs.url={lfs_url}"), &url, "c"];
    let o = git_cmd(d, &clone, &[("GIT_LFS_SKIP_SMUDGE", "1")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (git, d.join("c"))
}

/// Every path under `root` (none when it does not exist).
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        if let Ok(rd) = std::fs::read_dir(&p) {
            for e in rd.flatten() {
                todo.push(e.path());
            }
        }
        out.push(p);
    }
    out
}

/// Issue 68.3, 86.1: one tensor of a tree-form split snapshot whose parts
/// are LFS objects, by revision from a blobless clone that smudged
/// nothing, from a history that holds decoys (another snapshot with parts
/// of the same names, a large blob named as a part in another folder):
/// only the LFS objects of the parts that hold it are fetched, and it is
/// the full read's bytes; a whole export fetches that snapshot's parts and
/// no other's.
#[test]
fn one_array_from_history_fetches_only_its_parts_lfs_objects() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_lfs, lfs_url, store, w, arrays) = lfs_snapshot(d);
    std::fs::create_dir(d.join("other")).unwrap();
    crate::util::spanning_snapshot(&d.join("other"), &w.join("other.wtxt"), ["v", "w", "x", "y", "z"]);
    git_ok(&w, &["add", "-A"]);
    // A 3 MB blob under a part's name, outside every parts folder, as Git
    // holds it (not through LFS).
    std::fs::write(d.join("junk"), vec![7u8; 3 << 20]).unwrap();
    let junk = git_ok(&w, &["hash-object", "-w", "--no-filters", d.join("junk").to_str().unwrap()]).trim().to_string();
    git_ok(&w, &["update-index", "--add", "--cacheinfo", &format!("100644,{junk},junk/000001.wtxtpart")]);
    git_ok(&w, &["commit", "-q", "--no-verify", "-m", "gen 0"]);
    let holding = parts_holding(&w, "c");
    let (_git, c) = bare_clone(d, &w, &store, &lfs_url);
    let objects = || walk(&c.join(".git/lfs/objects")).into_iter().filter(|p| p.is_file()).count();
    let here = |blob: &str| git_cmd(&c, &["cat-file", "-e", blob], &[("GIT_NO_LAZY_FETCH", "1")]).status.success();
    let before = objects();
    assert!(!here(&junk));
    crate::util::extract_at_head(&c, "c", &arrays[2]);
    let fetched = objects() - before;
    assert!(holding >= 2 && fetched == holding, "{fetched} LFS objects fetched, {holding} parts hold c");
    assert!(!here(&junk), "the blob outside the snapshot's parts folder was fetched");
    let o = wtxt().current_dir(&c).args(["git", "export", "HEAD", "m.wtxt", "-o", "../x.wtxt"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let parts = std::fs::read_dir(w.join("m.wtxt.parts")).unwrap().count();
    assert_eq!(objects() - before, parts, "a whole export fetched its own parts and no other snapshot's");
    assert!(!here(&junk));
}

/// Issue 86.2: an LFS server that answers the batch call and then sends a
/// byte a second (no transfer timeout fires) holds a read by revision no
/// longer than `wtxt.fetchSeconds`: the fetch is stopped, the error names
/// the remote and what it fetched, and no object lands under its name.
#[test]
fn a_trickling_lfs_server_is_given_up_at_the_fetch_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_lfs, _, store, w, _) = committed_lfs_snapshot(d);
    let (_git, url) = serve(d, &w, &store);
    let trickle = crate::util::TricklingLfs::start();
    let env = [("GIT_LFS_SKIP_SMUDGE", "1")];
    let o =
        git_cmd(d, &["clone", "-q", "--filter=blob:none", "-c", &format!("lfs.url={}", trickle.url), &url, "c"], &env);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = d.join("c");
    git_ok(&c, &["config", "wtxt.fetchSeconds", "2"]);
    let started = std::time::Instant::now();
    let extract = ["extract", "m.wtxt", "--rev", "HEAD", "--array", "c", "-o", "../c.npy"];
    let o = wtxt().current_dir(&c).args(extract).output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "held {:?}", started.elapsed());
    assert!(said.contains("from origin: still running after 2 s (wtxt.fetchSeconds): stopped"), "{said}");
    assert!(trickle.served_bytes() > 0, "the server was asked");
    assert!(!d.join("c.npy").exists());
    let objects = walk(&c.join(".git/lfs/objects")).into_iter().filter(|p| p.is_file()).count();
    assert_eq!(objects, 0, "an object landed under its name");
}

/// Issue 82: the guard hashes every LFS object it reads against the oid
/// that names it. A decoy (a part's real bytes kept under the oid of other
/// bytes, as a store that checks no oid keeps whatever was uploaded) is
/// refused, though its bytes would verify against the head.
#[test]
fn the_guard_reads_an_lfs_part_through_its_oid() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_lfs, lfs_url) = crate::util::lfs_server(&d.join("lfs-store"), "models");
    let w = lfs_history(d, &lfs_url);
    let (_served, bare) = crate::util::served_repository(d);
    // The host's store, flat as a local-disk server keeps it: every object
    // the history names, as the honest client uploaded it.
    let store = d.join("host-store");
    std::fs::create_dir_all(&store).unwrap();
    for p in walk(&w.join(".git/lfs/objects")).into_iter().filter(|p| p.is_file()) {
        std::fs::copy(&p, store.join(p.file_name().unwrap())).unwrap();
    }
    git_ok(&bare, &["config", "wtxt.lfsObjects", store.to_str().unwrap()]);
    git_ok(&w, &["push", "-q", "--no-verify", bare.to_str().unwrap(), "main"]);
    // Generation 3, whose first part's pointer names other bytes of the
    // same size, while the host keeps the real part under that name.
    write_generation(&w, 3);
    git_ok(&w, &["add", "-A"]);
    git_ok(&w, &["commit", "-q", "--no-verify", "-m", "gen 3"]);
    let part = "m.wtxt.parts/000001.wtxtpart";
    let pointer = git_ok(&w, &["cat-file", "-p", &format!("HEAD:{part}")]);
    let oid = pointer.lines().find_map(|l| l.strip_prefix("oid sha256:")).unwrap().to_string();
    let real = std::fs::read(w.join(".git/lfs/objects").join(&oid[..2]).join(&oid[2..4]).join(&oid)).unwrap();
    for p in walk(&w.join(".git/lfs/objects")).into_iter().filter(|p| p.is_file()) {
        std::fs::copy(&p, store.join(p.file_name().unwrap())).unwrap();
    }
    let mut other = real.clone();
    let at = other.len() / 2;
    other[at] ^= 1;
    let named = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&other));
    std::fs::write(store.join(&named), &real).unwrap();
    let decoy = d.join("pointer");
    std::fs::write(&decoy, pointer.replace(&oid, &named)).unwrap();
    let blob = git_ok(&w, &["hash-object", "-w", "--no-filters", decoy.to_str().unwrap()]).trim().to_string();
    git_ok(&w, &["update-index", "--cacheinfo", &format!("100644,{blob},{part}")]);
    git_ok(&w, &["commit", "-q", "--no-verify", "--amend", "-m", "gen 3, a decoy part"]);
    let o = git_cmd(&w, &["push", "-q", "--no-verify", bare.to_str().unwrap(), "main"], &[]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a decoy LFS part passed the guard: {said}");
    assert!(said.contains(&format!("sha256:{named} holds bytes that hash to sha256:{oid}")), "{said}");
    assert_ne!(git_ok(&bare, &["rev-parse", "main"]), git_ok(&w, &["rev-parse", "HEAD"]));
}

/// Issue 83: a clone that smudged nothing (`GIT_LFS_SKIP_SMUDGE`, and a
/// blobless clone) holds LFS pointers where parts would be. Read from the
/// work tree, a snapshot fetches the objects it reads, in one `git lfs
/// fetch` per command, and verifies them; told not to fetch, or outside
/// any repository, it refuses in one line naming the pointer, never as
/// damage.
#[test]
fn a_clones_lfs_pointers_are_fetched_when_read_from_the_work_tree() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_lfs, lfs_url, store, w, arrays) = lfs_snapshot(d);
    git_ok(&w, &["add", "-A"]);
    git_ok(&w, &["commit", "-q", "-m", "gen 0"]);
    let parts = std::fs::read_dir(w.join("m.wtxt.parts")).unwrap().count();
    let holding = parts_holding(&w, "c");
    let (_git, url) = serve(d, &w, &store);
    let clone = |name: &str, blobless: bool| {
        let mut args = vec!["clone", "-q", "-c"];
        let lfs = format!("lfs.url={lfs_url}");
        args.push(&lfs);
        if blobless {
            args.push("--filter=blob:none");
        }
        args.extend([url.as_str(), name]);
        let o = git_cmd(d, &args, &[("GIT_LFS_SKIP_SMUDGE", "1")]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let c = d.join(name);
        let part = std::fs::read_to_string(c.join("m.wtxt.parts/000001.wtxtpart")).unwrap();
        assert!(part.starts_with("version https://git-lfs.github.com/spec/v1\n"), "{part}");
        c
    };
    let objects = |c: &Path| walk(&c.join(".git/lfs/objects")).into_iter().filter(|p| p.is_file()).count();
    // Each command run with Git's trace: how many `git lfs fetch` it ran.
    let traced = |c: &Path, args: &[&str]| {
        let trace = d.join("trace");
        let _ = std::fs::remove_file(&trace);
        let o = wtxt().current_dir(c).args(args).env("GIT_TRACE", &trace).output().unwrap();
        let fetches = std::fs::read_to_string(&trace).unwrap_or_default().matches("run_command: git-lfs fetch").count();
        (o, fetches)
    };
    let run = |c: &Path, args: &[&str]| {
        let (o, fetches) = traced(c, args);
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned(), fetches)
    };
    for blobless in [false, true] {
        let c = clone(if blobless { "blobless" } else { "skipped" }, blobless);
        // One tensor: the objects of the parts that hold it, in one fetch.
        let (code, said, fetches) = run(&c, &["extract", "m.wtxt", "--array", "c", "-o", "../c.npy"]);
        assert_eq!((code, fetches), (Some(0), 1), "{said}");
        assert_eq!(objects(&c), holding);
        let got = std::fs::read(d.join("c.npy")).unwrap();
        assert!(got.ends_with(&arrays[2]));
        // A whole verify: the rest, in one fetch; then nothing more to fetch.
        let (code, said, fetches) = run(&c, &["verify", "m.wtxt"]);
        assert_eq!((code, fetches), (Some(0), 1), "{said}");
        assert_eq!(objects(&c), parts);
        for args in [&["inspect", "m.wtxt"][..], &["extract", "m.wtxt", "-o", "../all.npz"], &["verify", "m.wtxt"]] {
            let (code, said, fetches) = run(&c, args);
            assert_eq!((code, fetches), (Some(0), 0), "{args:?}: {said}");
        }
        // An object changed in the clone's store is damage, named as such.
        let victim = walk(&c.join(".git/lfs/objects")).into_iter().find(|p| p.is_file()).unwrap();
        let mut bytes = std::fs::read(&victim).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&victim, &bytes).unwrap();
        let (code, said, _) = run(&c, &["verify", "m.wtxt"]);
        assert!(code == Some(1) && said.contains("hash to"), "{said}");
    }
    // A diff of the work tree's snapshot against its commit: the work tree's
    // pointers are fetched as read, and nothing differs.
    for blobless in [false, true] {
        let c = clone(if blobless { "diff-blobless" } else { "diff-skipped" }, blobless);
        let (o, fetches) = traced(&c, &["diff", "HEAD:m.wtxt", "m.wtxt", "--json"]);
        assert_eq!((o.status.code(), fetches), (Some(0), 1), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(objects(&c), parts);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let arrays = v["arrays"].as_array().unwrap();
        assert!(arrays.len() == 5 && arrays.iter().all(|a| a["status"] == "unchanged"), "{v}");
    }
    // Told not to fetch: one line naming the pointer and why.
    let c = clone("offline", false);
    git_ok(&c, &["config", "wtxt.fetch", "false"]);
    let (code, said, fetches) = run(&c, &["verify", "m.wtxt"]);
    assert_eq!((code, fetches), (Some(2), 0), "{said}");
    assert!(said.contains("000001.wtxtpart") && said.contains("a Git LFS pointer to sha256:"), "{said}");
    assert!(said.contains("wtxt.fetch is false") && said.trim().lines().count() == 1, "{said}");
    assert!(said.contains("`git config wtxt.fetch true`"), "the command that fetches it: {said}");
    // Outside any repository: the same pointers say where they can be fetched.
    let out = tempfile::tempdir().unwrap();
    std::fs::copy(c.join("m.wtxt"), out.path().join("m.wtxt")).unwrap();
    std::fs::create_dir(out.path().join("m.wtxt.parts")).unwrap();
    for e in std::fs::read_dir(c.join("m.wtxt.parts")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), out.path().join("m.wtxt.parts").join(e.file_name())).unwrap();
    }
    let (code, said, _) = run(out.path(), &["verify", "m.wtxt"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("no Git repository holds it") && said.contains("git lfs pull"), "{said}");
}

/// Issue 80.4: `wtxt diff REV1 REV2 PATH` of a tree-form snapshot whose
/// parts are LFS objects, in a blobless clone from `git daemon` that
/// smudged nothing: only the parts that hold the array that changed are
/// fetched and read, on both sides; the arrays left out are unchanged by
/// their heads, and the review says the same as a diff of the whole files.
#[test]
fn a_diff_by_revision_reads_only_the_parts_of_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_lfs, lfs_url, store, w, _) = committed_lfs_snapshot(d);
    let mut read = holding(&w, "c");
    crate::util::spanning_generation(d, &w.join("m.wtxt"), ["a", "b", "c", "d", "e"], Some(2));
    git_ok(&w, &["add", "-A"]);
    git_ok(&w, &["commit", "-q", "-m", "gen 1"]);
    // Both sides' parts that hold c (the same object once).
    read.extend(holding(&w, "c"));
    let holding = read.len();
    let parts = std::fs::read_dir(w.join("m.wtxt.parts")).unwrap().count();
    let (_git, c) = bare_clone(d, &w, &store, &lfs_url);
    let objects = || walk(&c.join(".git/lfs/objects")).into_iter().filter(|p| p.is_file()).count();
    let o = wtxt().current_dir(&c).args(["diff", "HEAD~1", "HEAD", "m.wtxt"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("1536 element(s) changed"), "{out}");
    assert_eq!(objects(), holding, "of {parts} parts a side, only those holding c were fetched: {out}");
    let md =
        wtxt().current_dir(&c).args(["diff", "HEAD~1", "HEAD", "m.wtxt", "--format", "markdown"]).output().unwrap();
    let md = String::from_utf8_lossy(&md.stdout).into_owned();
    assert!(md.contains("| `c` |") && !md.contains("| `a` |"), "{md}");
    // The same diff of the whole files, exported.
    for (rev, out) in [("HEAD~1", "old.wtxt"), ("HEAD", "new.wtxt")] {
        let o = wtxt().current_dir(&c).args(["git", "export", rev, "m.wtxt", "-o"]).arg(d.join(out)).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let whole = wtxt().current_dir(d).args(["diff", "old.wtxt", "new.wtxt", "--json"]).output().unwrap();
    let sparse = wtxt().current_dir(&c).args(["diff", "HEAD~1", "HEAD", "m.wtxt", "--json"]).output().unwrap();
    let arrays =
        |o: &std::process::Output| serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["arrays"].clone();
    assert_eq!(arrays(&sparse), arrays(&whole));
}
