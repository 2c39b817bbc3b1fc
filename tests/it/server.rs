//! The server's guard (`wtxt git install --server`): a real bare repository
//! served by a real `git daemon` on 127.0.0.1 takes a push of good,
//! signed, chained generations and refuses (naming the commit, path and
//! reason) one that does not verify, breaks the chain or is not signed by
//! its trusted keys, though the pusher skipped its own hook; nothing of a
//! refused push reaches the refs or the object store. `wtxt log` audits the
//! bare repository.

use std::path::{Path, PathBuf};

use crate::util::{fixture, git_cmd, git_daemon, git_ok, wtxt};

/// Snapshots the example model to `out` (chained to `prev`, or gen 0),
/// with the extra arguments.
fn snapshot(out: &Path, prev: Option<&Path>, n: u32, extra: &[&str]) {
    let mut c = wtxt();
    c.arg("snapshot").arg(fixture("inputs/model.npz")).arg("-o").arg(out);
    c.args(["--ts", &format!("2026-04-01T00:00:{n:02}Z")]);
    match prev {
        Some(p) => c.arg("--prev").arg(p),
        None => c.args(["--gen", "0"]),
    };
    let o = c.args(extra).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Commits the work tree without its hook (as a pusher who skipped it
/// would) and pushes; the push's exit status and stderr.
fn commit_and_push(work: &Path, msg: &str) -> (bool, String) {
    git_ok(work, &["add", "-A", "."]);
    git_ok(work, &["commit", "-q", "--no-verify", "-m", msg]);
    let o = git_cmd(work, &["push", "origin", "HEAD:main"], &[]);
    (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// A bare repository `served/models.git` with the guard installed and the
/// example keys trusted, served by a `git daemon` on 127.0.0.1, and a clone
/// of it at `work`: the repository, the clone and the server (stopped when
/// dropped).
fn guarded(d: &Path) -> (PathBuf, PathBuf, crate::util::Server) {
    let (served, bare) = crate::util::served_repository(d);
    git_ok(&bare, &["config", "wtxt.trustedKeys", fixture("keys/trusted_keys").to_str().unwrap()]);
    let (server, port) = git_daemon(&served);
    let url = format!("git://127.0.0.1:{port}/models.git");
    git_ok(d, &["clone", "-q", &url, "work"]);
    (bare, d.join("work"), server)
}

/// A bare repository `d/r.git` with the guard installed (no keys) and a
/// clone of it over the file system at `d/w`.
fn guarded_locally(d: &Path) -> (PathBuf, PathBuf) {
    git_ok(d, &["init", "-q", "--bare", "-b", "main", "r.git"]);
    let bare = d.join("r.git");
    let o = wtxt().current_dir(&bare).args(["git", "install", "--server"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    git_ok(d, &["clone", "-q", bare.to_str().unwrap(), "w"]);
    (bare, d.join("w"))
}

fn rev(git_dir: &Path, what: &str) -> String {
    git_ok(git_dir, &["rev-parse", what]).trim().to_string()
}

#[test]
fn a_bare_repository_refuses_what_does_not_verify() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // --server needs a bare repository.
    let work_repo = d.join("plain");
    git_ok(d, &["init", "-q", "plain"]);
    let o = wtxt().current_dir(&work_repo).args(["git", "install", "--server"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    // --manual prints what --server would set and writes nothing.
    git_ok(d, &["init", "-q", "--bare", "shown.git"]);
    let shown = d.join("shown.git");
    let o = wtxt().current_dir(&shown).args(["git", "install", "--server", "--manual"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains("git config --local receive.fsckObjects true") && text.contains("hook pre-receive"),
        "{text}"
    );
    assert!(!shown.join("hooks/pre-receive").exists());
    assert!(git_cmd(&shown, &["config", "receive.fsckObjects"], &[]).stdout.is_empty());
    let (bare, work, _server) = guarded(d);
    let m = work.join("m.wtxt");
    let keep = |n: u32| -> PathBuf {
        let k = d.join(format!("gen{n}.wtxt"));
        std::fs::copy(&m, &k).unwrap();
        k
    };
    let (sign, trusted) = (fixture("keys/sign.pem"), fixture("keys/trusted_keys"));
    let signed = ["--sign-key", sign.to_str().unwrap(), "--trusted-keys", trusted.to_str().unwrap()];

    // Good, signed generations land.
    snapshot(&m, None, 0, &signed);
    let g0 = keep(0);
    let (ok, err) = commit_and_push(&work, "gen 0");
    assert!(ok, "{err}");
    assert!(err.contains("1 generation(s) in 1 new commit(s) verified"), "{err}");
    snapshot(&m, Some(&g0), 1, &signed);
    let g1 = keep(1);
    let (ok, err) = commit_and_push(&work, "gen 1");
    assert!(ok, "{err}");
    let landed = rev(&bare, "main");
    assert_eq!(landed, rev(&work, "HEAD"));

    // Each bad generation is refused, named, and leaves nothing behind.
    let refused = |what: &str, expect: &str| {
        let (ok, err) = commit_and_push(&work, what);
        let tried = rev(&work, "HEAD");
        assert!(!ok, "{what}: the push landed: {err}");
        assert!(err.contains("pre-receive hook declined"), "{what}: {err}");
        assert!(err.contains(&format!("refs/heads/main: {} m.wtxt: ", &tried[..10])), "{what}: {err}");
        assert!(err.contains(expect), "{what}: expected {expect:?} in {err}");
        assert_eq!(rev(&bare, "main"), landed, "{what}: the ref moved");
        let o = git_cmd(&bare, &["cat-file", "-e", &tried], &[]);
        assert!(!o.status.success(), "{what}: the refused commit is in the server's objects");
        git_ok(&work, &["reset", "-q", "--hard", &landed]);
    };
    // Data changed after signing: one base64 character of a chunk.
    snapshot(&m, Some(&g1), 2, &signed);
    let text = std::fs::read_to_string(&m).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines.iter().position(|l| l.starts_with("ch ")).unwrap() + 1;
    let c = if lines[at].as_bytes()[3] == b'A' { "B" } else { "A" };
    lines[at].replace_range(3..4, c);
    std::fs::write(&m, lines.join("\n") + "\n").unwrap();
    refused("tampered data", "data: m.wtxt: line");
    // A generation that does not continue the chain.
    snapshot(&m, None, 3, &signed);
    refused("a new chain", "broken link");
    // Unsigned, and signed by a key the server does not trust.
    snapshot(&m, Some(&g1), 4, &["--trusted-keys", trusted.to_str().unwrap()]);
    refused("unsigned", "not signed");
    let other = fixture("keys/other.pem");
    snapshot(&m, Some(&g1), 5, &["--sign-key", other.to_str().unwrap(), "--trusted-keys", trusted.to_str().unwrap()]);
    refused("another key", "not trusted");

    // The next good generation still lands after the refusals.
    snapshot(&m, Some(&g1), 6, &signed);
    let (ok, err) = commit_and_push(&work, "gen 2");
    assert!(ok, "{err}");

    // The server audits what it holds: `wtxt log --verify` in the bare repository.
    let o = wtxt().current_dir(&bare).args(["log", "m.wtxt", "--verify", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let gens = v["chains"][0]["generations"].as_array().unwrap();
    assert_eq!(gens.len(), 3);
    assert!(gens.iter().all(|g| g["data"] == "verified" && g["signature"] == "valid"), "{v}");
    let o = wtxt().current_dir(&bare).args(["log", "../m.wtxt"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "a path outside the commits is refused");

    // --uninstall puts back what was there.
    let o = wtxt().current_dir(&bare).args(["git", "install", "--server", "--uninstall"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!bare.join("hooks/pre-receive").exists());
}

/// A hook the repository had is kept and runs first, on the same input;
/// its refusal stands.
#[test]
fn a_hook_the_server_had_runs_first() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "--bare", "-b", "main", "r.git"]);
    let bare = d.join("r.git");
    let theirs = bare.join("hooks/pre-receive");
    let seen = d.join("seen");
    std::fs::write(&theirs, format!("#!/bin/sh\ncat > '{}'\nexit 0\n", seen.display())).unwrap();
    std::fs::set_permissions(&theirs, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = wtxt().current_dir(&bare).args(["git", "install", "--server"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(bare.join("hooks/pre-receive.wtxt-chained").exists());
    git_ok(d, &["clone", "-q", bare.to_str().unwrap(), "w"]);
    let m = d.join("w/m.wtxt");
    snapshot(&m, None, 0, &[]);
    let (ok, err) = commit_and_push(&d.join("w"), "gen 0");
    assert!(ok, "{err}");
    let input = std::fs::read_to_string(&seen).unwrap();
    assert!(input.ends_with(" refs/heads/main\n"), "{input:?}");
    std::fs::write(theirs.with_extension("wtxt-chained"), "#!/bin/sh\necho no >&2\nexit 1\n").unwrap();
    snapshot(&m, Some(&d.join("w/m.wtxt")), 1, &[]);
    let (ok, _) = commit_and_push(&d.join("w"), "gen 1");
    assert!(!ok, "the chained hook's refusal stands");
}

/// A push that changes one part of a split snapshot and not its head is
/// still a new version of the snapshot: verified, and refused.
#[test]
fn a_changed_part_alone_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_, w) = guarded_locally(d);
    snapshot(&w.join("s.wtxt"), None, 0, &["--part-size", "49152"]);
    let parts: Vec<PathBuf> = std::fs::read_dir(w.join("s.wtxt.parts")).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(parts.len() > 1, "the snapshot is split");
    let (ok, err) = commit_and_push(&w, "gen 0");
    assert!(ok, "{err}");
    let part = &parts[parts.len() - 1];
    let text = std::fs::read_to_string(part).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines.iter().position(|l| l.starts_with("ch ")).unwrap() + 1;
    let c = if lines[at].as_bytes()[3] == b'A' { "B" } else { "A" };
    lines[at].replace_range(3..4, c);
    std::fs::write(part, lines.join("\n") + "\n").unwrap();
    let (ok, err) = commit_and_push(&w, "a part changed");
    assert!(!ok, "{err}");
    assert!(err.contains(" s.wtxt: "), "{err}");
    // Named as what it is: damage, not a broken link.
    assert!(!err.contains("broken link") && !err.contains("backwards"), "{err}");
    // `wtxt log` shows that commit as a version of the snapshot too.
    let o = wtxt().current_dir(&w).args(["log", "s.wtxt", "--json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("parts changed under an unchanged head"));
    // A listed part's name in capitals beside it: a case-insensitive
    // checkout would keep one of the two, so the guard refuses it.
    git_ok(&w, &["reset", "-q", "--hard", "HEAD~1"]);
    snapshot(&w.join("s.wtxt"), Some(&w.join("s.wtxt")), 1, &["--part-size", "49152"]);
    std::fs::copy(&parts[0], w.join("s.wtxt.parts/000001.WTXTPART")).unwrap();
    let (ok, err) = commit_and_push(&w, "gen 1 and a part in capitals");
    assert!(!ok && err.contains("000001.WTXTPART") && err.contains("does not list"), "{err}");
}

/// What a probe walked around the guard with (issue findings T5-1, T5-3,
/// T5-5), each against a real `git daemon`: replace refs, a rollback by
/// rename over two pushes, a merge with an orphan history, a force push
/// to an old commit, and a tree that lists a snapshot twice.
#[test]
fn the_guard_cannot_be_walked_around() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (bare, work, _server) = guarded(d);
    assert_eq!(git_ok(&bare, &["config", "receive.fsckObjects"]).trim(), "true");
    let m = work.join("m.wtxt");
    let (sign, trusted) = (fixture("keys/sign.pem"), fixture("keys/trusted_keys"));
    let signed = ["--sign-key", sign.to_str().unwrap(), "--trusted-keys", trusted.to_str().unwrap()];
    let (g0, g1) = (d.join("g0.wtxt"), d.join("g1.wtxt"));
    snapshot(&g0, None, 0, &signed);
    snapshot(&g1, Some(&g0), 1, &signed);
    std::fs::copy(&g0, &m).unwrap();
    assert!(commit_and_push(&work, "gen 0").0);
    let first = rev(&work, "HEAD");
    std::fs::copy(&g1, &m).unwrap();
    let (ok, err) = commit_and_push(&work, "gen 1");
    assert!(ok, "{err}");
    let push = |args: &[&str]| {
        let o = git_cmd(&work, args, &[]);
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };

    // T5-1: a replace ref is refused, whatever it replaces.
    let unsigned = d.join("unsigned.wtxt");
    snapshot(&unsigned, Some(&g1), 2, &[]);
    let blob = git_ok(&work, &["hash-object", "-w", unsigned.to_str().unwrap()]).trim().to_string();
    let good = git_ok(&work, &["rev-parse", "HEAD:m.wtxt"]).trim().to_string();
    let (ok, err) = push(&["push", "origin", &format!("{good}:refs/replace/{blob}")]);
    assert!(!ok && err.contains("replace refs are refused"), "{err}");

    // T5-3: an old signed generation put back by a rename, over two pushes.
    git_ok(&work, &["rm", "-q", "m.wtxt"]);
    std::fs::copy(&g0, work.join("a.wtxt")).unwrap();
    // Git sees the rename, so the per-commit link already refuses it...
    let (ok, err) = commit_and_push(&work, "a new path");
    assert!(!ok && err.contains("broken link"), "{err}");
    // ...and where it sees none (another file at a new path), the path's
    // own history still holds: its old generation cannot come back.
    git_ok(&work, &["reset", "-q", "--hard", "origin/main"]);
    git_ok(&work, &["rm", "-q", "m.wtxt"]);
    let (ok, err) = commit_and_push(&work, "deleted");
    assert!(ok, "{err}");
    std::fs::copy(&g0, &m).unwrap();
    let (ok, err) = commit_and_push(&work, "gen 0 back");
    assert!(!ok && err.contains("does not follow gen 000001"), "{err}");
    git_ok(&work, &["reset", "-q", "--hard", "origin/main"]);
    std::fs::copy(&g1, &m).unwrap();
    let (ok, err) = commit_and_push(&work, "gen 1 back");
    assert!(ok, "{err}");
    let landed = rev(&bare, "main");

    // T5-3: a merge with an orphan history holding gen 0 at the path.
    git_ok(&work, &["checkout", "-q", "--orphan", "old"]);
    git_ok(&work, &["rm", "-rfq", "."]);
    std::fs::copy(&g0, &m).unwrap();
    git_ok(&work, &["add", "m.wtxt"]);
    git_ok(&work, &["commit", "-q", "--no-verify", "-m", "orphan"]);
    git_ok(&work, &["checkout", "-q", "main"]);
    git_ok(&work, &["reset", "-q", "--hard", "origin/main"]);
    git_cmd(&work, &["merge", "-q", "--allow-unrelated-histories", "-s", "ours", "--no-edit", "old"], &[]);
    git_ok(&work, &["checkout", "old", "--", "m.wtxt"]);
    git_ok(&work, &["commit", "-q", "--no-verify", "--amend", "--no-edit"]);
    let (ok, err) = push(&["push", "origin", "HEAD:main"]);
    assert!(!ok, "an orphan's old generation merged in landed: {err}");

    // T5-3: a force push to an old commit.
    let (ok, err) = push(&["push", "-f", "origin", &format!("{first}:main")]);
    assert!(!ok && err.contains("does not follow"), "{err}");
    assert_eq!(rev(&bare, "main"), landed, "the ref did not move");

    // T5-5: a tree naming m.wtxt twice, the unsigned version first.
    let tree_text = format!("100644 blob {blob}\tm.wtxt\n100644 blob {good}\tm.wtxt\n");
    let tree = crate::util::mktree(&work, &tree_text);
    if !tree.is_empty() {
        let commit = git_ok(&work, &["commit-tree", &tree, "-p", &landed, "-m", "twice"]).trim().to_string();
        let (ok, err) = push(&["push", "origin", &format!("{commit}:refs/heads/main")]);
        assert!(!ok, "a tree listing m.wtxt twice landed: {err}");
    }
    assert_eq!(rev(&bare, "main"), landed);
}

/// Issue 79: `--server` sets up a host as it serves: no delta search over
/// parts (info/attributes), the guard's LFS store (`--lfs-objects`), and
/// HEAD moved to the branch the first push creates, so a clone of a
/// repository made by `git init --bare` (HEAD at `master`) checks out `main`.
#[test]
fn a_server_install_sets_up_what_a_host_needs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "--bare", "-b", "master", "r.git"]);
    let bare = d.join("r.git");
    let o = wtxt().current_dir(&bare).args(["git", "install", "--server", "--lfs-objects", "no-such-dir"]).output();
    assert!(!o.unwrap().status.success(), "a store that is not there is refused");
    std::fs::create_dir(d.join("lfs")).unwrap();
    let o = wtxt().current_dir(&bare).args(["git", "install", "--server", "--lfs-objects", "../lfs"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let store = git_ok(&bare, &["config", "wtxt.lfsObjects"]);
    assert_eq!(Path::new(store.trim()), std::fs::canonicalize(d.join("lfs")).unwrap());
    let attrs = git_ok(&bare, &["check-attr", "delta", "--", "m.wtxt.parts/000001.wtxtpart"]);
    assert!(attrs.trim().ends_with("delta: unset"), "{attrs}");
    git_ok(d, &["init", "-q", "-b", "main", "w"]);
    let w = d.join("w");
    snapshot(&w.join("m.wtxt"), None, 0, &[]);
    git_ok(&w, &["add", "-A"]);
    git_ok(&w, &["commit", "-q", "--no-verify", "-m", "gen 0"]);
    let o = git_cmd(&w, &["push", bare.to_str().unwrap(), "main"], &[]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && said.contains("HEAD now names refs/heads/main"), "{said}");
    git_ok(d, &["clone", "-q", bare.to_str().unwrap(), "c"]);
    assert!(d.join("c/m.wtxt").is_file(), "the clone checked out main");
    let o = wtxt().current_dir(&bare).args(["git", "install", "--server", "--uninstall"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let attrs = git_ok(&bare, &["check-attr", "delta", "--", "m.wtxt.parts/000001.wtxtpart"]);
    assert!(attrs.trim().ends_with("delta: unspecified"), "{attrs}");
}

/// T5-9: the guard's deadline holds in every walk, also over commits that
/// hold no snapshot at all: with `wtxt.guardSeconds 0` such a push is
/// refused, not waved through for having nothing to verify.
#[test]
fn the_guard_deadline_holds_without_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (bare, w) = guarded_locally(dir.path());
    for n in 0..3 {
        std::fs::write(w.join(format!("f{n}.txt")), "x\n").unwrap();
        git_ok(&w, &["add", "-A"]);
        git_ok(&w, &["commit", "-q", "-m", &format!("c{n}")]);
    }
    git_ok(&bare, &["config", "wtxt.guardSeconds", "0"]);
    let o = git_cmd(&w, &["push", "origin", "HEAD:main"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("still checking after 0 s (wtxt.guardSeconds)"), "{err}");
    git_ok(&bare, &["config", "wtxt.guardSeconds", "60"]);
    let o = git_cmd(&w, &["push", "origin", "HEAD:main"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Issue 82: a ref's newest generation is the one it served, whatever
/// parent leads to it: a merge whose first parent is a new root without the
/// snapshot removes it in one fast-forward push, and an older signed
/// generation added after it in the next is refused.
#[test]
fn a_rollback_through_a_merge_with_a_new_root_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (bare, work, _server) = guarded(d);
    let (sign, trusted) = (fixture("keys/sign.pem"), fixture("keys/trusted_keys"));
    let signed = ["--sign-key", sign.to_str().unwrap(), "--trusted-keys", trusted.to_str().unwrap()];
    let gens: Vec<PathBuf> = (0..3).map(|n| d.join(format!("g{n}.wtxt"))).collect();
    for (n, g) in gens.iter().enumerate() {
        snapshot(g, n.checked_sub(1).map(|p| gens[p].as_path()), n as u32, &signed);
        std::fs::copy(g, work.join("m.wtxt")).unwrap();
        let (ok, err) = commit_and_push(&work, &format!("gen {n}"));
        assert!(ok, "{err}");
    }
    let served = rev(&bare, "main");
    // Push 1: main becomes a merge whose first parent is a root without m.wtxt.
    std::fs::write(d.join("README"), "another history\n").unwrap();
    let readme = git_ok(&work, &["hash-object", "-w", d.join("README").to_str().unwrap()]).trim().to_string();
    let tree = crate::util::mktree(&work, &format!("100644 blob {readme}\tREADME\n"));
    let root = git_ok(&work, &["commit-tree", &tree, "-m", "a new root"]).trim().to_string();
    let merge = git_ok(&work, &["commit-tree", &tree, "-p", &root, "-p", &served, "-m", "merge"]).trim().to_string();
    let o = git_cmd(&work, &["push", "origin", &format!("{merge}:refs/heads/main")], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Push 2: an older signed generation on top of it.
    for old in &gens[..2] {
        let blob = git_ok(&work, &["hash-object", "-w", old.to_str().unwrap()]).trim().to_string();
        let tree = crate::util::mktree(&work, &format!("100644 blob {readme}\tREADME\n100644 blob {blob}\tm.wtxt\n"));
        let back = git_ok(&work, &["commit-tree", &tree, "-p", &merge, "-m", "an old generation"]).trim().to_string();
        let o = git_cmd(&work, &["push", "origin", &format!("{back}:refs/heads/main")], &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{} came back: {err}", old.display());
        assert!(err.contains("does not follow gen 000002"), "{err}");
    }
    assert_eq!(rev(&bare, "main"), merge);
}

/// Issue 82: every ref is checked against what it served, whatever its
/// kind: a tag at gen 2's commit moved to gen 0's tree and then to gen 0's
/// commit, and a branch deleted and created again at gen 0, are refused
/// (`$GIT_DIR/wtxt/served` keeps what each ref held).
#[test]
fn every_ref_keeps_what_it_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (bare, work, _server) = guarded(d);
    let (sign, trusted) = (fixture("keys/sign.pem"), fixture("keys/trusted_keys"));
    let signed = ["--sign-key", sign.to_str().unwrap(), "--trusted-keys", trusted.to_str().unwrap()];
    let gens: Vec<PathBuf> = (0..3).map(|n| d.join(format!("g{n}.wtxt"))).collect();
    let mut commits = Vec::new();
    for (n, g) in gens.iter().enumerate() {
        snapshot(g, n.checked_sub(1).map(|p| gens[p].as_path()), n as u32, &signed);
        std::fs::copy(g, work.join("m.wtxt")).unwrap();
        let (ok, err) = commit_and_push(&work, &format!("gen {n}"));
        assert!(ok, "{err}");
        commits.push(rev(&work, "HEAD"));
    }
    let push = |spec: &str, force: bool| {
        let args = if force { vec!["push", "-f", "origin", spec] } else { vec!["push", "origin", spec] };
        let o = git_cmd(&work, &args, &[]);
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (ok, err) = push(&format!("{}:refs/tags/latest", commits[2]), false);
    assert!(ok, "{err}");
    let tree0 = rev(&work, &format!("{}^{{tree}}", commits[0]));
    let (ok, err) = push(&format!("{tree0}:refs/tags/latest"), true);
    assert!(!ok && err.contains("does not follow gen 000002"), "a tag moved to gen 0's tree: {err}");
    let (ok, err) = push(&format!("{}:refs/tags/latest", commits[0]), true);
    assert!(!ok && err.contains("does not follow gen 000002"), "a tag moved to gen 0's commit: {err}");
    // A branch that is not HEAD's, deleted, then created again at gen 0.
    let (ok, err) = push(&format!("{}:refs/heads/release", commits[2]), false);
    assert!(ok, "{err}");
    let (ok, err) = push(":refs/heads/release", false);
    assert!(ok, "{err}");
    let (ok, err) = push(&format!("{}:refs/heads/release", commits[0]), false);
    assert!(!ok && err.contains("does not follow gen 000002"), "a branch created again at gen 0: {err}");
    // Created again where it was, it lands; a new name starts where it likes.
    let (ok, err) = push(&format!("{}:refs/heads/release", commits[2]), false);
    assert!(ok, "{err}");
    let (ok, err) = push(&format!("{}:refs/heads/first", commits[0]), false);
    assert!(ok, "{err}");
    let record = std::fs::read_to_string(bare.join("wtxt/served")).unwrap();
    assert_eq!(record.lines().filter(|l| l.starts_with("refs/heads/release ")).count(), 1, "{record}");
}

/// Issue 82: a path a wtxt filter owns (by the pushed tree's own
/// attributes) holds a verified snapshot: raw bytes staged past the clean
/// filter are refused by the guard, as is an attributes change that hands
/// the filter a raw file already there; a clone that requires signatures
/// does not smudge such bytes into its work tree.
#[test]
fn a_raw_file_a_filter_owns_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (bare, work, _server) = guarded(d);
    let raw = d.join("raw.safetensors");
    let o =
        wtxt().arg("convert").arg(fixture("inputs/model.npz")).args(["--to", "safetensors", "-o"]).arg(&raw).output();
    let o = o.unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let blob = git_ok(&work, &["hash-object", "-w", "--no-filters", raw.to_str().unwrap()]).trim().to_string();
    let stage = |path: &str| git_ok(&work, &["update-index", "--add", "--cacheinfo", &format!("100644,{blob},{path}")]);
    std::fs::write(work.join(".gitattributes"), "*.safetensors filter=wtxt-safetensors diff=wtxt merge=wtxt\n")
        .unwrap();
    git_ok(&work, &["add", ".gitattributes"]);
    stage("model.safetensors");
    git_ok(&work, &["commit", "-q", "--no-verify", "-m", "raw past the filter"]);
    let o = git_cmd(&work, &["push", "origin", "HEAD:main"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a raw file the filter owns landed: {err}");
    assert!(err.contains("`model.safetensors`: filter=wtxt-safetensors owns it, but it holds no WTXT"), "{err}");
    // The raw file lands where no filter owns it; an attributes change
    // that gives it to the filter is refused.
    git_ok(&work, &["rm", "-q", "--cached", ".gitattributes"]);
    git_ok(&work, &["commit", "-q", "--no-verify", "--amend", "-m", "a raw file"]);
    let o = git_cmd(&work, &["push", "origin", "HEAD:main"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    git_ok(&work, &["add", ".gitattributes"]);
    git_ok(&work, &["commit", "-q", "--no-verify", "-m", "the filter owns it now"]);
    let o = git_cmd(&work, &["push", "origin", "HEAD:main"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("model.safetensors"), "{err}");
    assert_ne!(rev(&bare, "main"), rev(&work, "HEAD"));
    // A clone that requires signatures does not smudge it.
    let o = wtxt().current_dir(&work).args(["git", "install", "--filter", "safetensors"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    git_ok(&work, &["config", "wtxt.trustedKeys", fixture("keys/trusted_keys").to_str().unwrap()]);
    git_ok(&work, &["config", "wtxt.requireSignature", "true"]);
    let _ = std::fs::remove_file(work.join("model.safetensors"));
    let o = git_cmd(&work, &["checkout", "--", "model.safetensors"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("must hold a signed snapshot"), "{err}");
    assert!(!work.join("model.safetensors").exists());
}

/// T5-4, T5-11: WTXT is checked wherever it is held: under a filtered
/// name, under any other name, in two paths one case-insensitive checkout
/// cannot hold apart, and through a tag or ref naming a blob or a tree.
#[test]
fn the_guard_checks_wtxt_whatever_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (bare, work, _server) = guarded(d);
    let (sign, trusted) = (fixture("keys/sign.pem"), fixture("keys/trusted_keys"));
    let signed = ["--sign-key", sign.to_str().unwrap(), "--trusted-keys", trusted.to_str().unwrap()];
    let (good, unsigned) = (d.join("good.wtxt"), d.join("unsigned.wtxt"));
    snapshot(&good, None, 0, &signed);
    snapshot(&unsigned, None, 0, &[]);
    std::fs::copy(&good, work.join("m.wtxt")).unwrap();
    let (ok, err) = commit_and_push(&work, "gen 0");
    assert!(ok, "{err}");
    let landed = rev(&bare, "main");
    let push = |args: &[&str]| {
        let o = git_cmd(&work, args, &[]);
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let refused = |what: &str, expect: &str, (ok, err): (bool, String)| {
        assert!(!ok, "{what} landed: {err}");
        assert!(err.contains(expect), "{what}: expected {expect:?} in {err}");
        git_ok(&work, &["reset", "-q", "--hard", &landed]);
    };
    // What a filter stores (`*.safetensors filter=wtxt-safetensors` in a
    // clone), and a copy under a name that is not `*.wtxt`.
    for name in ["model.safetensors", "m.wtxt.bak"] {
        std::fs::copy(&unsigned, work.join(name)).unwrap();
        refused(name, &format!("{name}: not signed"), commit_and_push(&work, name));
    }
    // Two snapshots a case-insensitive checkout cannot both hold.
    std::fs::copy(&good, work.join("M.wtxt")).unwrap();
    refused("M.wtxt beside m.wtxt", "differ only in case", commit_and_push(&work, "case"));
    // Tags and refs naming a blob or a tree.
    let blob = git_ok(&work, &["hash-object", "-w", unsigned.to_str().unwrap()]).trim().to_string();
    git_ok(&work, &["tag", "-a", "-m", "a blob", "blob-tag", &blob]);
    refused("a tag of a blob", "not signed", push(&["push", "origin", "refs/tags/blob-tag"]));
    refused("a ref to a blob", "not signed", push(&["push", "origin", &format!("{blob}:refs/tags/bare-blob")]));
    let tree = crate::util::mktree(&work, &format!("100644 blob {blob}\tweights.bin\n"));
    refused("a ref to a tree", "weights.bin: data: ", push(&["push", "origin", &format!("{tree}:refs/tags/tree")]));
    // A signed snapshot under a tag lands.
    let signed_blob = git_ok(&work, &["rev-parse", "HEAD:m.wtxt"]).trim().to_string();
    let (ok, err) = push(&["push", "origin", &format!("{signed_blob}:refs/tags/signed-blob")]);
    assert!(ok, "{err}");
    assert_eq!(rev(&bare, "main"), landed);
}

/// With `wtxt.hmacKey` set on the server, every array pushed must
/// authenticate with it and every snapshot carry the keyed tag that binds
/// it whole: a signed but unkeyed generation, and one whose tag was
/// stripped, are refused.
#[test]
fn a_configured_hmac_key_is_demanded_of_every_push() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (bare, work, _server) = guarded(d);
    git_ok(&bare, &["config", "wtxt.hmacKey", fixture("keys/hmac.hex").to_str().unwrap()]);
    let (sign, hmac) = (fixture("keys/sign.pem"), fixture("keys/hmac.hex"));
    let signed = ["--sign-key", sign.to_str().unwrap()];
    let keyed = ["--sign-key", sign.to_str().unwrap(), "--hmac-key", hmac.to_str().unwrap()];
    let m = work.join("m.wtxt");
    let g0 = d.join("g0.wtxt");
    snapshot(&g0, None, 0, &keyed);
    std::fs::copy(&g0, &m).unwrap();
    let (ok, err) = commit_and_push(&work, "gen 0, keyed");
    assert!(ok, "{err}");
    let landed = rev(&bare, "main");
    let refused = |what: &str, expect: &str| {
        let (ok, err) = commit_and_push(&work, what);
        assert!(!ok && err.contains(expect), "{what}: expected {expect:?} in {err}");
        git_ok(&work, &["reset", "-q", "--hard", &landed]);
    };
    snapshot(&m, Some(&g0), 1, &signed);
    refused("signed, not keyed", "hmac");
    snapshot(&m, Some(&g0), 2, &keyed);
    let text = std::fs::read_to_string(&m).unwrap();
    let stripped: String = text.lines().filter(|l| !l.starts_with("audit ")).map(|l| format!("{l}\n")).collect();
    std::fs::write(&m, stripped).unwrap();
    refused("keyed, its tag stripped", "keyed tag");
    snapshot(&m, Some(&g0), 3, &keyed);
    let (ok, err) = commit_and_push(&work, "gen 1, keyed");
    assert!(ok, "{err}");
}

/// A generation of a split snapshot of the tree form is checked reading
/// only the parts that changed since the one the guard verified before
/// (pushed earlier or in the same push); what it carries over is bound as
/// in a full check, so a forged root is still refused.
#[test]
fn a_generation_is_checked_reading_only_the_parts_that_changed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (bare, w) = guarded_locally(d);
    let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let values = |k: usize, g: usize| (0..32 * 1024).map(|i| ((i * 7 + k * 13 + g) % 251) as u8).collect::<Vec<u8>>();
    // Generation `g` moves array `moved` (none in the first).
    let generation = |g: usize, moved: Option<usize>| {
        let arrays: Vec<crate::util::ArraySpec> = names
            .iter()
            .enumerate()
            .map(|(k, n)| (*n, "u8", vec![64, 512], values(k, if Some(k) == moved { g } else { 0 })))
            .collect();
        let npz = crate::util::write_npz(d, &format!("s{g}"), &arrays);
        let mut c = wtxt();
        c.arg("snapshot").arg(&npz).arg("-o").arg(w.join("m.wtxt"));
        c.args(["--part-size", "48K", "--digest", "tree", "--rows-per-chunk", "8"]);
        c.args(["--ts", &format!("2026-04-01T00:00:{g:02}Z")]);
        match g {
            0 => c.args(["--gen", "0"]),
            _ => c.arg("--prev").arg(w.join("m.wtxt")),
        };
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let parts_read = |err: &str| -> (u64, u64) {
        let at = err.find(" parts read").unwrap_or_else(|| panic!("{err}"));
        let words: Vec<&str> = err[..at].rsplit('(').next().unwrap().split(' ').collect();
        (words[0].parse().unwrap(), words[2].parse().unwrap())
    };
    generation(0, None);
    let (ok, err) = commit_and_push(&w, "gen 0");
    assert!(ok, "{err}");
    let (read, total) = parts_read(&err);
    assert!(total > 4 && read == total, "{err}");
    assert!(bare.join("wtxt/verified").is_file(), "what was verified is recorded");
    // A later push: only the parts of the array moved are read.
    generation(1, Some(2));
    let (ok, err) = commit_and_push(&w, "gen 1");
    assert!(ok, "{err}");
    let (read, total) = parts_read(&err);
    assert!(read > 0 && read <= total / 2, "{err}");
    // Two generations in one push: the second against the first.
    generation(2, Some(5));
    git_ok(&w, &["add", "-A", "."]);
    git_ok(&w, &["commit", "-q", "--no-verify", "-m", "gen 2"]);
    generation(3, Some(6));
    let (ok, err) = commit_and_push(&w, "gen 3");
    assert!(ok, "{err}");
    let (read, total) = parts_read(&err);
    assert!(read <= total / 2, "{err}");
    // A root whose fastxor the arrays do not give, the rest as written: the
    // carried arrays' shares stand in for their bytes, so it is refused.
    generation(4, Some(1));
    let head = w.join("m.wtxt");
    let text = std::fs::read_to_string(&head).unwrap();
    let at = text.find("fastxor=").unwrap() + "fastxor=".len();
    let digit = if &text[at..at + 1] == "0" { "1" } else { "0" };
    std::fs::write(&head, format!("{}{digit}{}", &text[..at], &text[at + 1..])).unwrap();
    let (ok, err) = commit_and_push(&w, "gen 4, its fastxor forged");
    assert!(!ok && err.contains("fastxor"), "{err}");
    git_ok(&w, &["reset", "-q", "--hard", "HEAD~1"]);
    // A record grown past 4 MiB is compacted when it is read: the newest
    // generations and their arrays' shares stay, so the push that read it
    // and the next one (from the compacted file) read only what changed.
    let record = bare.join("wtxt/verified");
    let junk: String = (0..60_000u64).map(|i| format!("x {i:064x} {i:016x}\n")).collect();
    let mut f = std::fs::OpenOptions::new().append(true).open(&record).unwrap();
    std::io::Write::write_all(&mut f, junk.as_bytes()).unwrap();
    drop(f);
    for (g, moved) in [(5, 0), (6, 3)] {
        generation(g, Some(moved));
        let (ok, err) = commit_and_push(&w, &format!("gen {g}"));
        assert!(ok, "{err}");
        let (read, total) = parts_read(&err);
        assert!(read > 0 && read <= total / 2, "gen {g}: {err}");
        assert!(std::fs::metadata(&record).unwrap().len() < 1 << 20, "the record was compacted");
    }
    // A record that is a link is neither read nor written through: the
    // next push is checked whole, and the file the link names is untouched.
    let elsewhere = d.join("elsewhere");
    std::fs::write(&elsewhere, std::fs::read(&record).unwrap()).unwrap();
    std::fs::remove_file(&record).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &record).unwrap();
    let before = std::fs::read(&elsewhere).unwrap();
    generation(7, Some(7));
    let (ok, err) = commit_and_push(&w, "gen 7");
    assert!(ok, "{err}");
    let (read, total) = parts_read(&err);
    assert_eq!(read, total, "{err}");
    assert_eq!(std::fs::read(&elsewhere).unwrap(), before);
    // `wtxt log --verify` checks the history the same way, and finds it whole.
    let o = wtxt().current_dir(&w).args(["log", "--verify", "m.wtxt"]).output().unwrap();
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
}
