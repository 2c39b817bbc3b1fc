//! `wtxt log` in a real Git repository made with the real `git` binary:
//! five generations committed one by one prove their chain; a broken link,
//! renames, deletion and re-adding, merges and untrusted keys.

use std::path::{Path, PathBuf};

use crate::util::{fixture, git_ok, wtxt};

struct Repo {
    _dir: tempfile::TempDir,
    root: PathBuf,
    n: u32,
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let r = Repo { _dir: dir, root, n: 0 };
        r.git(&["init", "-q", "-b", "main"]);
        r
    }

    fn git(&self, args: &[&str]) -> String {
        git_ok(&self.root, args)
    }

    /// Snapshots the example model as `rel`, chained to `prev` when given.
    fn snapshot(&mut self, rel: &str, prev: Option<&Path>, extra: &[&str]) -> PathBuf {
        self.n += 1;
        let out = self.root.join(rel);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let tmp = self.root.join(format!(".gen{}.wtxt", self.n));
        let mut c = wtxt();
        c.arg("snapshot").arg(fixture("inputs/model.npz")).arg("-o").arg(&tmp);
        c.args(["--ts", &format!("2026-04-01T00:00:{:02}Z", self.n)]);
        match prev {
            Some(p) => c.arg("--prev").arg(p),
            None if !extra.contains(&"--gen") => c.args(["--gen", "0"]),
            None => &mut c,
        };
        let o = c.args(extra).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::rename(&tmp, &out).unwrap();
        // Keep a copy outside the work tree as the next --prev.
        let keep = self.root.join(format!(".git/gen{}.wtxt", self.n));
        std::fs::copy(&out, &keep).unwrap();
        keep
    }

    fn commit(&self, msg: &str) {
        self.git(&["add", "-A", "."]);
        self.git(&["commit", "-qm", msg]);
    }

    fn log(&self, args: &[&str]) -> (i32, serde_json::Value) {
        let o = wtxt().arg("log").arg("-C").arg(&self.root).args(args).arg("--json").output().unwrap();
        let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
        (o.status.code().unwrap(), v)
    }
}

fn problems(v: &serde_json::Value) -> Vec<String> {
    v["chains"][0]["generations"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["problems"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn five_generations_prove_their_chain_and_a_break_is_flagged() {
    let mut r = Repo::new();
    let mut prev = None;
    for g in 0..5 {
        prev = Some(r.snapshot("m.wtxt", prev.as_deref(), &[]));
        r.commit(&format!("gen {g}"));
    }
    let (code, v) = r.log(&["m.wtxt"]);
    assert_eq!(code, 0, "{v}");
    let gens = v["chains"][0]["generations"].as_array().unwrap();
    assert_eq!(gens.len(), 5);
    let numbers: Vec<u64> = gens.iter().map(|g| g["gen"].as_u64().unwrap()).collect();
    assert_eq!(numbers, [4, 3, 2, 1, 0], "newest first");
    assert!(gens[..4].iter().all(|g| g["links"][0]["merkle_ok"] == true));
    assert_eq!(gens[4]["links"].as_array().unwrap().len(), 0, "genesis");
    // The text form tells the same.
    let o = wtxt().arg("log").arg("-C").arg(&r.root).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("m.wtxt: 5 generation(s), headers and links OK; data not verified"), "{text}");
    assert!(!text.contains("chain OK"), "nothing says OK of bytes it did not hash: {text}");
    let o = wtxt().arg("log").arg("--verify").arg("-C").arg(&r.root).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("m.wtxt: 5 generation(s), chain OK, every generation's data verified"), "{text}");
    // Packed whole (as Git packs every blob over core.bigFileThreshold),
    // the headers are read through `git cat-file`: the same chain.
    r.git(&["-c", "core.bigFileThreshold=1k", "gc", "-q"]);
    assert_eq!(r.log(&["m.wtxt"]), (0, v.clone()));

    // A generation written without --prev breaks the chain.
    r.snapshot("m.wtxt", None, &["--gen", "5"]);
    r.commit("unlinked");
    let (code, v) = r.log(&["m.wtxt"]);
    assert_eq!(code, 1);
    let p = problems(&v);
    assert!(p.iter().any(|p| p.contains("broken link")), "{p:?}");

    // A gen going backwards is flagged too.
    let mut r = Repo::new();
    let g0 = r.snapshot("m.wtxt", None, &[]);
    r.commit("g0");
    let g1 = r.snapshot("m.wtxt", Some(&g0), &[]);
    r.commit("g1");
    let _ = g1;
    r.snapshot("m.wtxt", Some(&g0), &[]);
    r.commit("g1 again");
    let (code, v) = r.log(&[]);
    assert_eq!(code, 1);
    assert!(problems(&v).iter().any(|p| p.contains("backwards") || p.contains("broken link")), "{v}");
}

#[test]
fn renames_deletions_and_merges() {
    let mut r = Repo::new();
    let g0 = r.snapshot("m.wtxt", None, &[]);
    r.commit("g0");
    r.git(&["mv", "m.wtxt", "model.wtxt"]);
    r.commit("rename");
    let g1 = r.snapshot("model.wtxt", Some(&g0), &[]);
    r.commit("g1 after rename");
    r.git(&["rm", "-q", "model.wtxt"]);
    r.commit("delete");
    let g2 = r.snapshot("model.wtxt", Some(&g1), &[]);
    r.commit("g2 re-added");
    // Two branches each write the next generation; the merge writes gen 4
    // chained to ours, as the merge driver does.
    r.git(&["checkout", "-q", "-b", "side"]);
    let side = r.snapshot("model.wtxt", Some(&g2), &["--build", "side"]);
    r.commit("g3 side");
    let _ = side;
    r.git(&["checkout", "-q", "main"]);
    let ours = r.snapshot("model.wtxt", Some(&g2), &["--build", "main"]);
    r.commit("g3 main");
    r.git(&["merge", "-q", "-s", "ours", "--no-commit", "side"]);
    // The merge result: gen 4 chained to ours.
    let merged = r.root.join("model.wtxt");
    let o = wtxt()
        .arg("snapshot")
        .arg(fixture("inputs/model.npz"))
        .arg("-o")
        .arg(&merged)
        .arg("--prev")
        .arg(&ours)
        .args(["--ts", "2026-04-02T00:00:00Z", "--build", "merged"])
        .output()
        .unwrap();
    assert!(o.status.success());
    r.commit("merge side");
    let (code, v) = r.log(&["model.wtxt"]);
    assert_eq!(code, 0, "{v}");
    let gens = v["chains"][0]["generations"].as_array().unwrap();
    let builds: Vec<&str> = gens.iter().map(|g| g["build"].as_str().unwrap()).collect();
    assert_eq!(builds.len(), 6, "{builds:?}");
    let merge = &gens[0];
    assert_eq!(merge["parents"].as_array().unwrap().len(), 2);
    assert_eq!(merge["links"].as_array().unwrap().len(), 2, "each parent checked");
    assert!(gens.iter().any(|g| g["path"] == "m.wtxt"), "the rename was followed");
    let readded = gens.iter().find(|g| g["gen"] == 2).unwrap();
    assert_eq!(readded["links"][0]["merkle_ok"], true, "linked across the deletion");
}

#[test]
fn untrusted_signatures_are_flagged_with_trusted_keys() {
    let mut r = Repo::new();
    let sign = fixture("keys/sign.pem");
    let other = fixture("keys/other.pem");
    let g0 = r.snapshot("s.wtxt", None, &["--sign-key", sign.to_str().unwrap()]);
    r.commit("g0");
    let g1 = r.snapshot("s.wtxt", Some(&g0), &["--sign-key", sign.to_str().unwrap()]);
    r.commit("g1");
    let trusted = fixture("keys/trusted_keys");
    let (code, v) = r.log(&["--trusted-keys", trusted.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert!(v["chains"][0]["generations"].as_array().unwrap().iter().all(|g| g["signature"] == "valid"));
    // Signing with another key chains from g1 only once g1's key is trusted.
    r.snapshot(
        "s.wtxt",
        Some(&g1),
        &["--sign-key", other.to_str().unwrap(), "--trusted-keys", trusted.to_str().unwrap()],
    );
    r.commit("g2 by another key");
    let (code, v) = r.log(&["--trusted-keys", trusted.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(problems(&v).iter().any(|p| p.contains("not trusted")), "{v}");
    // The same check through git config.
    r.git(&["config", "wtxt.trustedKeys", trusted.to_str().unwrap()]);
    assert_eq!(r.log(&[]).0, 1);
    // With --verify the data is proven all the same: the signer is what
    // failed, and the text says so, not that the data did.
    let (code, v) = r.log(&["--verify"]);
    assert_eq!(code, 1, "{v}");
    let newest = &v["chains"][0]["generations"][0];
    assert_eq!(newest["data"], "verified", "{v}");
    assert!(problems(&v).iter().any(|p| p.starts_with("signature: ")), "{v}");
    let o = wtxt().arg("log").arg("-C").arg(&r.root).arg("--verify").output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!text.contains("data FAILED") && text.contains("data verified"), "{text}");
    // From outside the repository, the path names it.
    let outside = tempfile::tempdir().unwrap();
    let o = wtxt().current_dir(outside.path()).args(["log", "--json"]).arg(r.root.join("s.wtxt")).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["chains"][0]["generations"].as_array().unwrap().len(), 3, "{v}");
}

/// A generation whose header (signature included) is intact but whose data
/// was changed, committed past the hook: plain `log` says it did not check
/// the data; `log --verify` proves every generation from its commit and
/// exits 1 naming the first that fails, for a single file and a split one.
#[test]
fn log_verify_proves_the_data_and_plain_log_says_it_did_not() {
    let key = fixture("keys/sign.pem");
    let trusted = fixture("keys/trusted_keys");
    for split in [false, true] {
        let r = Repo::new();
        let mut extra = vec!["--sign-key", key.to_str().unwrap()];
        if split {
            extra.extend(["--part-size", "48K"]);
        }
        // Each generation written beside the work tree, then moved in (head and parts).
        let write = |gen: u32, prev: Option<&Path>| {
            let out = r.root.join(format!(".git/g{gen}/m.wtxt"));
            std::fs::create_dir_all(out.parent().unwrap()).unwrap();
            let mut c = wtxt();
            c.arg("snapshot").arg(fixture("inputs/model.npz")).arg("-o").arg(&out).args(&extra);
            c.args(["--ts", &format!("2026-04-01T00:00:0{gen}Z")]);
            if let Some(p) = prev {
                c.arg("--prev").arg(p);
            }
            let o = c.output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let _ = std::fs::remove_dir_all(r.root.join("m.wtxt.parts"));
            if split {
                std::fs::create_dir(r.root.join("m.wtxt.parts")).unwrap();
                for e in std::fs::read_dir(format!("{}.parts", out.display())).unwrap() {
                    let e = e.unwrap();
                    std::fs::copy(e.path(), r.root.join("m.wtxt.parts").join(e.file_name())).unwrap();
                }
            }
            std::fs::copy(&out, r.root.join("m.wtxt")).unwrap();
            out
        };
        let g0 = write(0, None);
        r.commit("gen 0");
        write(1, Some(&g0));
        // Damage one base64 character of a chunk's text in the last part
        // (or the file), and put the head's part line right again.
        let target = if split {
            let dir = r.root.join("m.wtxt.parts");
            let mut parts: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
            parts.sort();
            parts.last().unwrap().clone()
        } else {
            r.root.join("m.wtxt")
        };
        let mut bytes = std::fs::read(&target).unwrap();
        let old_len = bytes.len();
        let at = bytes.windows(4).rposition(|w| w == b"\nch ").unwrap();
        let line = at + 1 + bytes[at + 1..].iter().position(|&b| b == b'\n').unwrap() + 1;
        bytes[line + 2] = if bytes[line + 2] == b'A' { b'B' } else { b'A' };
        std::fs::write(&target, &bytes).unwrap();
        if split {
            use sha2::Digest;
            let ix: u64 = target.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            let head = std::fs::read_to_string(r.root.join("m.wtxt")).unwrap();
            let fixed: Vec<String> = head
                .lines()
                .map(|l| {
                    if l.starts_with(&format!("part ix={ix:06} ")) {
                        let lines = l.split(' ').find(|f| f.starts_with("lines=")).unwrap().to_string();
                        let sha = hex::encode(sha2::Sha256::digest(&bytes));
                        format!("part ix={ix:06} bytes={old_len} {lines} sha256={sha}")
                    } else {
                        l.to_string()
                    }
                })
                .collect();
            std::fs::write(r.root.join("m.wtxt"), fixed.join("\n") + "\n").unwrap();
        }
        r.git(&["add", "-A", "."]);
        r.git(&["commit", "-qm", "tampered gen 1"]);
        let tampered = r.git(&["rev-parse", "HEAD"]).trim().to_string();

        let o = wtxt().arg("log").arg("-C").arg(&r.root).arg("--trusted-keys").arg(&trusted).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "headers and links hold: {text}");
        assert!(text.contains("header signature valid; data not verified"), "{text}");
        assert!(!text.contains("chain OK") && !text.contains("signed (valid)"), "{text}");

        let o = wtxt().arg("log").arg("--verify").arg("-C").arg(&r.root).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "split={split}: {}{err}", String::from_utf8_lossy(&o.stdout));
        assert!(err.contains(&tampered) && err.contains("does not verify"), "{err}");
        let (code, v) = r.log(&["--verify"]);
        assert_eq!(code, 1);
        let gens = v["chains"][0]["generations"].as_array().unwrap();
        assert_eq!((gens[0]["data"].as_str(), gens[1]["data"].as_str()), (Some("failed"), Some("verified")), "{v}");
    }
}

/// Objects a partial clone lacks (`rev-list --missing=print` lists them
/// without fetching).
fn missing(repo: &Path) -> usize {
    git_ok(repo, &["rev-list", "--objects", "--all", "--missing=print"]).lines().filter(|l| l.starts_with('?')).count()
}

/// Issue 66.3: in a blobless partial clone from a real `git daemon`,
/// `wtxt log` proves the chain from the heads alone (fetching those, in
/// one go), `log --verify` fetches and verifies every generation, and `git
/// export` gives an old generation whole. The commit that adds the
/// snapshot also adds and changes other files: their blobs are never
/// fetched, as they cannot be where the snapshot came from.
#[test]
fn a_blobless_clone_logs_verifies_and_exports() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (served, bare) = crate::util::served_repository(d);
    git_ok(d, &["init", "-q", "-b", "main", "w"]);
    let w = d.join("w");
    std::fs::write(w.join("notes.txt"), "first\n").unwrap();
    std::fs::write(w.join("old.txt"), "a file the next commit deletes\n").unwrap();
    git_ok(&w, &["add", "-A"]);
    git_ok(&w, &["commit", "-q", "--no-verify", "-m", "before any snapshot"]);
    std::fs::write(w.join("notes.txt"), "second\n").unwrap();
    std::fs::write(w.join("data.bin"), vec![7u8; 300_000]).unwrap();
    git_ok(&w, &["rm", "-q", "old.txt"]);
    for n in 0..3u32 {
        // Another chunking each generation: every part differs.
        let rows = (64 - 16 * n).to_string();
        let mut c = wtxt();
        c.arg("snapshot").arg(fixture("inputs/model.npz")).args(["-o", "m.wtxt", "--part-size", "50000"]);
        c.args(["--rows-per-chunk", &rows]);
        c.args(["--ts", &format!("2026-04-01T00:00:0{n}Z"), "--audit", &format!("run={n}")]);
        if n == 0 {
            c.args(["--gen", "0"]);
        } else {
            c.args(["--prev", "m.wtxt"]);
        }
        let o = c.current_dir(&w).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        git_ok(&w, &["add", "-A"]);
        git_ok(&w, &["commit", "-q", "--no-verify", "-m", &format!("gen {n}")]);
    }
    git_ok(&w, &["push", "-q", bare.to_str().unwrap(), "main"]);
    let (_server, port) = crate::util::git_daemon(&served);
    let url = format!("git://127.0.0.1:{port}/models.git");
    let clone = |name: &str, how: &str| {
        git_ok(d, &["clone", "-q", how, "--filter=blob:none", &url, name]);
        d.join(name)
    };
    // No checkout: every blob it has is one a command fetched.
    let c = clone("c", "--no-checkout");
    let before = missing(&c);
    assert!(before > 0, "the clone is blobless");
    let log = |args: &[&str]| {
        let o = wtxt().current_dir(&c).arg("log").args(args).args(["m.wtxt", "--json"]).output().unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
        (o.status.code(), v)
    };
    let (code, v) = log(&[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["chains"][0]["generations"].as_array().unwrap().len(), 3, "{v}");
    let heads_only = missing(&c);
    assert!(heads_only < before && heads_only > 0, "{before} -> {heads_only}: only the heads were fetched");
    let unfetched = git_ok(&c, &["rev-list", "--objects", "--all", "--missing=print"]);
    for other in ["HEAD:data.bin", "HEAD:notes.txt"] {
        let oid = git_ok(&c, &["rev-parse", other]);
        assert!(unfetched.contains(&format!("?{}", oid.trim())), "{other} was fetched");
    }
    let (code, v) = log(&["--verify"]);
    assert_eq!(code, Some(0), "{v}");
    assert!(v["chains"][0]["generations"].as_array().unwrap().iter().all(|g| g["data"] == "verified"), "{v}");
    // Every generation was fetched to be verified, and nothing else: the
    // other files of both commits before it stay where they are.
    let left: Vec<String> = git_ok(&c, &["rev-list", "--objects", "--all", "--missing=print"])
        .lines()
        .filter_map(|l| l.strip_prefix('?').map(str::to_string))
        .collect();
    let others: Vec<String> = ["HEAD:data.bin", "HEAD:notes.txt", "HEAD~3:notes.txt"]
        .iter()
        .map(|r| git_ok(&c, &["rev-parse", r]).trim().to_string())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(others.iter().all(|o| left.contains(o)), "{left:?} {others:?}");
    // A fresh blobless clone: an old generation, exported whole.
    let e = clone("e", "--checkout");
    let o = wtxt().current_dir(&e).args(["git", "export", "HEAD~2", "m.wtxt", "-o", "../old.wtxt"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = wtxt().arg("verify").arg(d.join("old.wtxt")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("gen 000000"));
}

/// Issue 68.3: `extract --rev REV --array NAME` in a blobless clone of a
/// tree-form split snapshot fetches the head and the parts that hold the
/// array, no other part, and gives the full read's bytes; a whole extract
/// at that revision fetches the rest.
#[test]
fn one_array_from_history_fetches_only_the_parts_that_hold_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (served, bare) = crate::util::served_repository(d);
    git_ok(d, &["init", "-q", "-b", "main", "w"]);
    let w = d.join("w");
    let arrays = crate::util::spanning_snapshot(d, &w.join("m.wtxt"), ["a", "b", "c", "d", "e"]);
    git_ok(&w, &["add", "-A"]);
    git_ok(&w, &["commit", "-q", "--no-verify", "-m", "gen 0"]);
    git_ok(&w, &["push", "-q", bare.to_str().unwrap(), "main"]);
    let (_server, port) = crate::util::git_daemon(&served);
    git_ok(
        d,
        &["clone", "-q", "--no-checkout", "--filter=blob:none", &format!("git://127.0.0.1:{port}/models.git"), "c"],
    );
    let c = d.join("c");
    // Each part's blob, and whether it holds `c`, as written.
    let parts: Vec<(String, bool)> = git_ok(&c, &["ls-tree", "HEAD", "m.wtxt.parts/"])
        .lines()
        .map(|l| {
            let (meta, name) = l.split_once('\t').unwrap();
            let held = std::fs::read(w.join(name)).unwrap();
            (meta.split_whitespace().nth(2).unwrap().to_string(), memchr::memmem::find(&held, b"name=c ").is_some())
        })
        .collect();
    assert!(parts.iter().filter(|p| p.1).count() + 2 <= parts.len(), "{parts:?}");
    crate::util::extract_at_head(&c, "c", &arrays[2]);
    let missing = git_ok(&c, &["rev-list", "--objects", "--all", "--missing=print"]);
    for (oid, holds_c) in &parts {
        assert_eq!(missing.contains(&format!("?{oid}")), !holds_c, "part {oid}: fetched only if it holds c");
    }
    // The whole snapshot at that revision fetches every part.
    let o = wtxt().current_dir(&c).args(["extract", "m.wtxt", "--rev", "HEAD", "-o", "../all.npz"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let missing = git_ok(&c, &["rev-list", "--objects", "--all", "--missing=print"]);
    assert!(parts.iter().all(|(oid, _)| !missing.contains(&format!("?{oid}"))));
}

/// Issue 69.5: the CI jobs' review (examples/ci/review.sh, which the
/// GitHub Actions and GitLab CI examples run and post): every snapshot a
/// branch changed, verified and diffed against the base as Markdown.
#[test]
fn the_ci_review_names_what_a_branch_changed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "-b", "main", "w"]);
    let w = d.join("w");
    let gen = |n: u32| {
        crate::lfs::write_generation(&w, n);
        git_ok(&w, &["add", "-A"]);
        git_ok(&w, &["commit", "-q", "--no-verify", "-m", &format!("gen {n}")]);
    };
    gen(0);
    git_ok(&w, &["branch", "base"]);
    gen(1);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/ci/review.sh");
    let o = std::process::Command::new(&script)
        .args(["base", "review.md"])
        .env("WTXT", env!("CARGO_BIN_EXE_wtxt"))
        .current_dir(&w)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(w.join("review.md")).unwrap();
    assert!(md.starts_with("### `m.wtxt`: base → HEAD\n"), "{md}");
    assert!(md.contains("| generation | 0 | 1 |") && md.contains("continues the old one's chain"), "{md}");
    assert!(md.contains("**Tensors:** 0 changed") && md.contains("12 unchanged"), "{md}");
}
