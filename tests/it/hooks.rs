//! hooks/pre-commit in a real Git repository with the real `git` binary.

use std::path::Path;

use crate::util::{fixture, git_cmd, read};

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    git_cmd(dir, args, &[])
}

#[test]
fn pre_commit_blocks_damaged_and_unsigned_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(git(d, &["init", "-q"]).status.success());
    let hook = d.join(".git/hooks/pre-commit");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/pre-commit"), &hook).unwrap();

    std::fs::write(d.join("m.wtxt"), read("expected/signed_pkcs8.wtxt")).unwrap();
    git(d, &["add", "m.wtxt"]);
    let ok = git(d, &["commit", "-qm", "good"]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));

    // A damaged snapshot is refused, naming the file and the line.
    let mut bad = read("expected/defaults.wtxt");
    let at = bad.len() / 2;
    bad[at] = if bad[at] == b'A' { b'B' } else { b'A' };
    std::fs::write(d.join("bad.wtxt"), &bad).unwrap();
    git(d, &["add", "bad.wtxt"]);
    let r = git(d, &["commit", "-qm", "bad"]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("bad.wtxt") && err.contains("line"), "{err}");
    git(d, &["rm", "-q", "--cached", "bad.wtxt"]);

    // With wtxt.requireSignature, an unsigned snapshot is refused, a signed one by a trusted key passes.
    git(d, &["config", "wtxt.requireSignature", "true"]);
    git(d, &["config", "wtxt.trustedKeys", fixture("keys/trusted_keys").to_str().unwrap()]);
    std::fs::write(d.join("u.wtxt"), read("expected/defaults.wtxt")).unwrap();
    git(d, &["add", "u.wtxt"]);
    assert!(!git(d, &["commit", "-qm", "unsigned"]).status.success());
    git(d, &["rm", "-q", "--cached", "u.wtxt"]);
    std::fs::write(d.join("s.wtxt"), read("expected/signed_openssh.wtxt")).unwrap();
    git(d, &["add", "s.wtxt"]);
    let r = git(d, &["commit", "-qm", "signed"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));

    // With trusted keys set, another key's signature is refused even where
    // no signature is required; an unsigned file is the policy's to allow.
    git(d, &["config", "--unset", "wtxt.requireSignature"]);
    let o = crate::util::wtxt()
        .arg("snapshot")
        .arg(fixture("inputs/model.npz"))
        .args(["-o", d.join("o.wtxt").to_str().unwrap(), "--gen", "0", "--sign-key"])
        .arg(fixture("keys/other.pem"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    git(d, &["add", "o.wtxt"]);
    let r = git(d, &["commit", "-qm", "another key"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("not among the trusted keys"), "{err}");
    git(d, &["rm", "-q", "--cached", "o.wtxt"]);
    git(d, &["add", "u.wtxt"]);
    let r = git(d, &["commit", "-qm", "unsigned, not required"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));

    // With wtxt.hmacKey, every array must authenticate and the file carry
    // the keyed tag: a 1.1 file of another writer (no tag) is refused,
    // wtxt's own keyed file is taken.
    git(d, &["config", "wtxt.hmacKey", fixture("keys/hmac.hex").to_str().unwrap()]);
    std::fs::write(d.join("h.wtxt"), read("expected/hmac.wtxt")).unwrap();
    git(d, &["add", "h.wtxt"]);
    let r = git(d, &["commit", "-qm", "no keyed tag"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("keyed tag"), "{err}");
    std::fs::write(d.join("h.wtxt"), read("bind/hmac.wtxt")).unwrap();
    git(d, &["add", "h.wtxt"]);
    let r = git(d, &["commit", "-qm", "keyed"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

/// A file that verifies but is not what the writer emits (here its `cap`
/// values reordered, which no hash covers) is refused; the staged blob is
/// what counts, packed or loose, not the work tree.
#[test]
fn pre_commit_refuses_a_verifying_file_that_is_not_canonical() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(git(d, &["init", "-q"]).status.success());
    // Blobs over the threshold go straight into a pack at `git add`.
    assert!(git(d, &["config", "core.bigFileThreshold", "1k"]).status.success());
    let hook = d.join(".git/hooks/pre-commit");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/pre-commit"), &hook).unwrap();
    let good = read("expected/defaults.wtxt");
    let text = String::from_utf8(good.clone()).unwrap();
    let reordered = text.replacen(
        "cap ext=crc32c,line_parity,arr_hmac,delta_v2,row_blocking\n",
        "cap ext=crc32c,line_parity,arr_hmac,row_blocking,delta_v2\n",
        1,
    );
    assert_ne!(reordered, text);
    std::fs::write(d.join("m.wtxt"), &reordered).unwrap();
    let v = crate::util::wtxt().arg("verify").arg(d.join("m.wtxt")).output().unwrap();
    assert!(v.status.success(), "it verifies: {}", String::from_utf8_lossy(&v.stderr));
    git(d, &["add", "m.wtxt"]);
    // The work tree is put right after `git add`: the staged bytes are checked.
    std::fs::write(d.join("m.wtxt"), &good).unwrap();
    let r = git(d, &["commit", "-qm", "reordered"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success() && err.contains("m.wtxt") && err.contains("not in canonical form"), "{err}");
    git(d, &["add", "m.wtxt"]);
    let r = git(d, &["commit", "-qm", "canonical"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

/// The hook reads what is staged, never the rest of the work tree: a
/// tracked file changed but not staged (it could be a whole model) is not
/// opened. `strace` logs every open of that one path.
#[test]
fn pre_commit_does_not_read_unstaged_work_tree_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(git(d, &["init", "-q"]).status.success());
    std::fs::write(d.join("data.bin"), vec![b'a'; 4096]).unwrap();
    git(d, &["add", "data.bin"]);
    assert!(git(d, &["commit", "-qm", "data"]).status.success());
    // Same size, other bytes, a later mtime: only hashing it would tell.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(d.join("data.bin"), vec![b'b'; 4096]).unwrap();
    std::fs::write(d.join("m.wtxt"), read("expected/defaults.wtxt")).unwrap();
    git(d, &["add", "m.wtxt"]);
    let log = d.join("strace.log");
    let o = std::process::Command::new("strace")
        .arg("-f")
        .arg("-q")
        .arg("-o")
        .arg(&log)
        .arg("-P")
        .arg(d.join("data.bin"))
        .args(["-e", "trace=open,openat,openat2", env!("CARGO_BIN_EXE_wtxt"), "hook", "pre-commit"])
        .current_dir(d)
        .output()
        .expect("strace (Debian package strace) runs this test");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let opened = std::fs::read_to_string(&log).unwrap();
    assert!(!opened.contains("data.bin"), "the unstaged file was read:\n{opened}");
}

/// A signed split snapshot with one part swapped for another save's (its
/// chunks self-consistent) and the head's `part` line fixed to match: the
/// signature covers the header, which binds the data only through
/// `sha256_all`. The hook refuses it as `wtxt verify` does, as a first
/// commit and chained on the previous generation.
#[test]
fn pre_commit_refuses_a_split_snapshot_whose_part_was_swapped_and_its_head_fixed() {
    use crate::util::{snapshot, wtxt};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = |seed: u8| -> Vec<crate::util::ArraySpec<'static>> {
        vec![
            ("a", "u8", vec![64, 64], vec![1; 4096]),
            ("b", "u8", vec![256, 64], (0..16384u32).map(|i| (i as u8) ^ seed).collect()),
            ("c", "u8", vec![64, 64], vec![3; 4096]),
        ]
    };
    let key = fixture("keys/sign.pem");
    let signed = ["--part-size", "8K", "--rows-per-chunk", "16", "--sign-key", key.to_str().unwrap()];
    let work = d.join("w");
    std::fs::create_dir(&work).unwrap();
    let good = snapshot(&work, "good", &model(0), &signed);
    let other = snapshot(&work, "other", &model(7), &signed);
    // The tampered set: good's head with part k's line taken from other's,
    // and other's part k.
    let parts = |h: &std::path::Path| std::path::PathBuf::from(format!("{}.parts", h.display()));
    let k = 3;
    let name = format!("{k:06}.wtxtpart");
    let good_head = std::fs::read_to_string(&good).unwrap();
    let other_head = std::fs::read_to_string(&other).unwrap();
    let line = |h: &str| h.lines().find(|l| l.starts_with(&format!("part ix={k:06} "))).unwrap().to_string();
    assert_ne!(line(&good_head), line(&other_head), "the part differs");
    let tampered_head = good_head.replace(&line(&good_head), &line(&other_head));
    let plant = |repo: &std::path::Path| {
        let pdir = repo.join("m.wtxt.parts");
        std::fs::create_dir_all(&pdir).unwrap();
        for e in std::fs::read_dir(parts(&good)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), pdir.join(e.file_name())).unwrap();
        }
        std::fs::copy(parts(&other).join(&name), pdir.join(&name)).unwrap();
        std::fs::write(repo.join("m.wtxt"), &tampered_head).unwrap();
    };
    let v = wtxt()
        .arg("verify")
        .arg(&{
            plant(&work.join("t"));
            work.join("t/m.wtxt")
        })
        .output()
        .unwrap();
    assert_eq!(v.status.code(), Some(1), "verify refuses it: {}", String::from_utf8_lossy(&v.stdout));

    let setup = |repo: &std::path::Path| {
        std::fs::create_dir_all(repo).unwrap();
        assert!(git(repo, &["init", "-q"]).status.success());
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/pre-commit"),
            repo.join(".git/hooks/pre-commit"),
        )
        .unwrap();
        git(repo, &["config", "wtxt.requireSignature", "true"]);
        git(repo, &["config", "wtxt.trustedKeys", fixture("keys/trusted_keys").to_str().unwrap()]);
    };
    // As a first commit.
    let first = d.join("first");
    setup(&first);
    plant(&first);
    git(&first, &["add", "m.wtxt", "m.wtxt.parts"]);
    let r = git(&first, &["commit", "-qm", "tampered"]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "the hook let a tampered split snapshot in");
    assert!(err.contains("m.wtxt") && err.contains("sha256"), "{err}");

    // Chained on a good generation.
    let chained = d.join("chained");
    setup(&chained);
    let g0 = snapshot(&work, "g0", &model(9), &signed);
    std::fs::copy(&g0, chained.join("m.wtxt")).unwrap();
    let pdir = chained.join("m.wtxt.parts");
    std::fs::create_dir_all(&pdir).unwrap();
    for e in std::fs::read_dir(parts(&g0)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), pdir.join(e.file_name())).unwrap();
    }
    git(&chained, &["add", "-A"]);
    let r = git(&chained, &["commit", "-qm", "g0"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let prev = ["--prev", g0.to_str().unwrap()];
    let good1 = snapshot(&work, "good1", &model(0), &[&signed[..], &prev[..]].concat());
    let other1 = snapshot(&work, "other1", &model(7), &[&signed[..], &prev[..]].concat());
    let h1 = std::fs::read_to_string(&good1).unwrap();
    let o1 = std::fs::read_to_string(&other1).unwrap();
    std::fs::write(chained.join("m.wtxt"), h1.replace(&line(&h1), &line(&o1))).unwrap();
    for e in std::fs::read_dir(parts(&good1)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), pdir.join(e.file_name())).unwrap();
    }
    std::fs::copy(parts(&other1).join(&name), pdir.join(&name)).unwrap();
    git(&chained, &["add", "-A"]);
    let r = git(&chained, &["commit", "-qm", "tampered gen 1"]);
    assert!(!r.status.success(), "the hook let a tampered generation in");
    // The honest generation passes.
    std::fs::copy(parts(&good1).join(&name), pdir.join(&name)).unwrap();
    std::fs::write(chained.join("m.wtxt"), &h1).unwrap();
    git(&chained, &["add", "-A"]);
    let r = git(&chained, &["commit", "-qm", "gen 1"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

/// `git commit -a` and `git commit PATH` stage into a temporary index
/// (`GIT_INDEX_FILE`), not `.git/index`: the hook checks that one, so a
/// damaged file committed either way is refused.
#[test]
fn pre_commit_checks_the_index_git_commits_with_a_and_with_paths() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(git(d, &["init", "-q"]).status.success());
    let hook = d.join(".git/hooks/pre-commit");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/pre-commit"), &hook).unwrap();
    std::fs::write(d.join("m.wtxt"), read("expected/defaults.wtxt")).unwrap();
    git(d, &["add", "m.wtxt"]);
    assert!(git(d, &["commit", "-qm", "good"]).status.success());
    let mut bad = read("expected/defaults.wtxt");
    let at = bad.len() / 2;
    bad[at] = if bad[at] == b'A' { b'B' } else { b'A' };
    std::fs::write(d.join("m.wtxt"), &bad).unwrap();
    for args in [
        &["commit", "-qam", "bad"][..],
        &["commit", "-qm", "bad", "--", "m.wtxt"][..],
        &["commit", "-qm", "bad", "-i", "m.wtxt"][..],
    ] {
        let r = git(d, args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success() && err.contains("m.wtxt") && err.contains("line"), "{args:?}: {err}");
    }
    let log = git(d, &["rev-list", "--count", "HEAD"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout).trim(), "1");
}

/// `git verify-pack -v` of every pack of the repository at `d` (a work
/// tree or a bare one): (blobs stored as deltas, blobs stored whole).
fn packed_blobs(d: &Path) -> (usize, usize) {
    let mut counts = (0, 0);
    let git = if d.join(".git").exists() { d.join(".git") } else { d.to_path_buf() };
    for e in std::fs::read_dir(git.join("objects/pack")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "idx") {
            let out = crate::util::git_ok(d, &["verify-pack", "-v", p.to_str().unwrap()]);
            for l in out.lines().filter(|l| l.split_whitespace().nth(1) == Some("blob")) {
                if l.split_whitespace().count() == 7 {
                    counts.0 += 1;
                } else {
                    counts.1 += 1;
                }
            }
        }
    }
    counts
}

/// The packs of the repository at `d` that wtxt keeps out of `git gc`
/// (a `.keep` file of its own), by name.
fn kept(d: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(d.join(".git/objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "keep"))
        .filter(|p| std::fs::read(p).unwrap().starts_with(b"wtxt:"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

/// Loose objects left in the repository.
fn loose(d: &Path) -> usize {
    let objects = d.join(".git/objects");
    std::fs::read_dir(&objects)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().len() == 2)
        .map(|p| std::fs::read_dir(p).unwrap().count())
        .sum()
}

/// A repository under `wtxt git install` at `d/r` whose commits are
/// generations of one split snapshot `m.wtxt` (a u32 matrix of [`ROWS`]
/// rows, parts of 64 KiB), each chained to the one before.
struct Generations {
    d: std::path::PathBuf,
    r: std::path::PathBuf,
}

/// Rows of the matrix [`Generations`] commits.
const ROWS: u64 = 512;

impl Generations {
    fn new(d: &Path) -> Generations {
        let r = d.join("r");
        std::fs::create_dir(&r).unwrap();
        crate::util::git_ok(&r, &["init", "-q", "-b", "main"]);
        let install = crate::util::wtxt().current_dir(&r).args(["git", "install"]).output().unwrap();
        assert!(install.status.success(), "{}", String::from_utf8_lossy(&install.stderr));
        Generations { d: d.to_path_buf(), r }
    }

    /// The matrix's bytes: the rows `changed` picks drawn from `seed`, the
    /// others the same in every generation.
    fn values(seed: u32, changed: &dyn Fn(u64) -> bool) -> Vec<u8> {
        (0..ROWS * 256)
            .flat_map(|i| {
                let row = i / 256;
                let v = if changed(row) {
                    seed.wrapping_mul(2654435761) ^ i as u32
                } else {
                    (i as u32).wrapping_mul(40503)
                };
                v.to_le_bytes()
            })
            .collect()
    }

    /// Snapshots `data` as generation `g` (chained to the last) and commits
    /// it through the hook.
    /// A split snapshot copied as its head and parts folder.
    fn place(from: &Path, to: &Path) {
        let parts = |h: &Path| h.with_file_name(format!("{}.parts", h.file_name().unwrap().to_str().unwrap()));
        let _ = std::fs::remove_dir_all(parts(to));
        std::fs::create_dir_all(parts(to)).unwrap();
        std::fs::copy(from, to).unwrap();
        for p in std::fs::read_dir(parts(from)).unwrap() {
            let p = p.unwrap().path();
            std::fs::copy(&p, parts(to).join(p.file_name().unwrap())).unwrap();
        }
    }

    /// The next generation chains to the work tree's (after a reset).
    fn chain_to_work_tree(&self) {
        Generations::place(&self.r.join("m.wtxt"), &self.d.join("prev.wtxt"));
    }

    /// Snapshots `data` as generation `g` into the work tree (new files,
    /// new inodes) and commits it through the hook.
    fn commit(&self, g: u32, data: Vec<u8>) {
        self.write(g, data);
        crate::util::git_ok(&self.r, &["add", "-A"]);
        crate::util::git_ok(&self.r, &["commit", "-qm", &format!("gen {g}")]);
    }

    /// As [`Generations::commit`], committed in this process as the daemon
    /// and the Snapshotter commit a generation.
    fn commit_in_process(&self, g: u32, data: Vec<u8>) {
        self.write(g, data);
        wtxt::git::commit_written(&self.r.join("m.wtxt"), false, "t", &format!("gen {g}")).unwrap();
    }

    fn write(&self, g: u32, data: Vec<u8>) {
        let place = Generations::place;
        let prev = self.d.join("prev.wtxt");
        let chain = if g == 0 { ["--gen", "0"] } else { ["--prev", prev.to_str().unwrap()] };
        let extra = [&["--part-size", "64K", "--rows-per-chunk", "16"][..], &chain[..]].concat();
        let out = crate::util::snapshot(&self.d, &format!("g{g}"), &[("w", "u32", vec![ROWS, 256], data)], &extra);
        place(&out, &prev);
        place(&out, &self.r.join("m.wtxt"));
    }
}

/// A commit through the hook stores the staged parts in one pack: a part
/// whose rows changed in a few places as a delta against HEAD's version
/// (its base beside it), one that changed wholly whole. Git reads it all
/// back (`fsck --full`), and `git gc` keeps the deltas without searching.
/// A pack of whole parts is kept out of `gc` until a newer pack stores one
/// of them as a delta.
#[test]
fn the_hook_packs_staged_parts_as_deltas_where_few_lines_changed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gens = Generations::new(d);
    let r = gens.r.clone();
    let values = Generations::values;
    let commit = |g, data| gens.commit(g, data);
    commit(0, values(0, &|_| false));
    let parts = std::fs::read_dir(r.join("m.wtxt.parts")).unwrap().count();
    assert!(parts >= 4, "{parts} parts");
    assert_eq!(packed_blobs(&r), (0, parts), "the first generation whole");
    assert_eq!(kept(&r).len(), 1, "a pack of whole parts: kept");
    // One row in each part's 32 changed: every part changes a little.
    commit(1, values(1, &|row| row % 32 == 5));
    let (deltas, whole) = packed_blobs(&r);
    assert_eq!(deltas, parts, "each changed part's previous version a delta");
    assert_eq!(whole, 2 * parts, "against the new version, whole");
    assert!(kept(&r).is_empty(), "the first generation's pack superseded; the second holds deltas");
    // A push of this generation (as the daemon makes it) still sends each
    // changed part as a delta against the version the remote has.
    let remote = d.join("remote.git");
    crate::util::git_ok(d, &["init", "-q", "--bare", "remote.git"]);
    crate::util::git_ok(&remote, &["config", "receive.unpackLimit", "1"]);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let to = remote.to_str().unwrap();
    let first = crate::util::git_ok(&r, &["rev-parse", "HEAD~1"]);
    let push = |commit| wtxt::git::Push { commit, changed_wholly: false };
    wtxt::git::push(&r, to, push(Some(first.trim())), &stop).unwrap();
    let before = packed_blobs(&remote);
    wtxt::git::push(&r, to, push(None), &stop).unwrap();
    assert!(packed_blobs(&remote).0 - before.0 >= parts, "a thin pack of deltas");
    // Every value new: stored whole, in a pack the multi-pack index (which
    // makes Git take the deltas above) is not rewritten for; Git, `gc` and
    // libgit2 (`log --verify`) read it beside the index all the same.
    let midx = r.join(".git/objects/pack/multi-pack-index");
    let indexed = std::fs::read(&midx).unwrap();
    commit(2, values(2, &|_| true));
    assert_eq!(std::fs::read(&midx).unwrap(), indexed, "a pack of whole objects: the index as it was");
    assert_eq!(packed_blobs(&r), (parts, 3 * parts));
    let full = kept(&r);
    assert_eq!(full.len(), 1, "every part whole: kept");
    let loose_parts = crate::util::git_ok(&r, &["count-objects", "-v"]);
    assert!(loose(&r) <= 16, "only heads, trees and commits stay loose: {loose_parts}");
    crate::util::git_ok(&r, &["fsck", "--full", "--strict"]);
    crate::util::git_ok(&r, &["gc", "-q"]);
    crate::util::git_ok(&r, &["fsck", "--full", "--strict"]);
    assert_eq!(packed_blobs(&r).0, parts, "gc kept the deltas");
    assert_eq!(kept(&r), full, "gc left the kept pack as it was");
    // The kept pack and `gc`'s (a cruft pack holds the empty tree the push made).
    let pack = r.join(".git/objects/pack");
    let packs: Vec<_> = std::fs::read_dir(&pack).unwrap().map(|e| e.unwrap().path()).collect();
    let live =
        |p: &&std::path::PathBuf| p.extension().is_some_and(|x| x == "pack") && !p.with_extension("mtimes").exists();
    assert_eq!(packs.iter().filter(live).count(), 2, "{packs:?}");
    let log = crate::util::wtxt().current_dir(&r).args(["log", "--verify", "m.wtxt"]).output().unwrap();
    assert!(log.status.success(), "{}", String::from_utf8_lossy(&log.stderr));

    // Against bases in the pack `git gc` wrote, as against wtxt's own.
    commit(3, values(2, &|row| row % 32 != 9));
    assert_eq!(packed_blobs(&r).0, 2 * parts, "a delta each against the packed generation");
    assert!(kept(&r).is_empty(), "the whole generation superseded");
    crate::util::git_ok(&r, &["fsck", "--full", "--strict"]);
    crate::util::git_ok(&r, &["gc", "-q"]);
    crate::util::git_ok(&r, &["fsck", "--full", "--strict"]);
    assert_eq!(packed_blobs(&r).0, 2 * parts, "gc kept every delta, the superseded pack's included");
    assert!(kept(&r).is_empty());

    // Turned off, the parts stay as `git add` wrote them.
    crate::util::git_ok(&r, &["config", "wtxt.packParts", "false"]);
    let before = loose(&r);
    commit(4, values(4, &|row| row == 7));
    assert!(loose(&r) > before + 1, "the changed part left loose");

    // Uninstalled, Git repacks every pack again.
    crate::util::git_ok(&r, &["config", "--unset", "wtxt.packParts"]);
    commit(5, values(5, &|_| true));
    assert_eq!(kept(&r).len(), 1);
    let out = crate::util::wtxt().current_dir(&r).args(["git", "install", "--uninstall"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(kept(&r).is_empty());
}

/// `wtxt git push` sends the commits the remote lacks one a push, oldest
/// first, as the daemon does: the generation that changed in places as
/// deltas against the version the remote has, where a plain `git push`
/// sends its changed parts whole (they carry `-delta`).
/// A generation committed in process stores its changed parts in a pack
/// as deltas and writes the multi-pack index for them; parts rewritten
/// unchanged (new files, the same bytes) are HEAD's blobs already: only
/// the new head is stored, and the index is not written again.
#[test]
fn an_in_process_commit_of_parts_rewritten_unchanged_stores_nothing() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let gens = Generations::new(dir.path());
    let r = &gens.r;
    let few = |row: u64| row % 32 == 5;
    gens.commit_in_process(0, Generations::values(0, &|_| false));
    gens.commit_in_process(1, Generations::values(1, &few));
    let parts = std::fs::read_dir(r.join("m.wtxt.parts")).unwrap().count();
    assert_eq!(packed_blobs(r).0, parts, "each changed part's previous version a delta");
    let midx = r.join(".git/objects/pack/multi-pack-index");
    let stamp = || {
        let m = std::fs::symlink_metadata(&midx).expect("a pack of deltas is indexed");
        (m.ino(), m.mtime(), m.mtime_nsec())
    };
    let (indexed, blobs, loose_before) = (stamp(), packed_blobs(r), loose(r));
    gens.commit_in_process(2, Generations::values(1, &few));
    assert_eq!(stamp(), indexed, "the multi-pack index not written again");
    assert_eq!(packed_blobs(r), (blobs.0, blobs.1 + 1), "only the new head stored, whole");
    assert_eq!(loose(r), loose_before + 2, "a tree and a commit");
    let log = crate::util::git_ok(r, &["log", "--format=%s"]);
    assert_eq!(log.lines().collect::<Vec<_>>(), ["gen 2", "gen 1", "gen 0"]);
    crate::util::git_ok(r, &["fsck", "--full", "--strict"]);
    let verify = crate::util::wtxt().current_dir(r).args(["log", "--verify", "m.wtxt"]).output().unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stderr));
}

#[test]
fn wtxt_git_push_sends_one_generation_a_push_and_changes_in_places_as_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let gens = Generations::new(d);
    let r = &gens.r;
    gens.commit(0, Generations::values(0, &|_| false));
    gens.commit(1, Generations::values(1, &|row| row % 32 == 5));
    gens.commit(2, Generations::values(2, &|_| true));
    let parts = std::fs::read_dir(r.join("m.wtxt.parts")).unwrap().count();
    // Remotes that keep each push as the pack it received.
    let bare = |name: &str| {
        crate::util::git_ok(d, &["init", "-q", "--bare", name]);
        crate::util::git_ok(&d.join(name), &["config", "receive.unpackLimit", "1"]);
        d.join(name)
    };
    let (plain, remote) = (bare("plain.git"), bare("remote.git"));
    crate::util::git_ok(r, &["push", "-q", plain.to_str().unwrap(), "HEAD~2:refs/heads/main"]);
    crate::util::git_ok(r, &["push", "-q", plain.to_str().unwrap(), "HEAD~1:refs/heads/main"]);
    assert_eq!(packed_blobs(&plain).0, 0, "git push: the changed parts whole");

    crate::util::git_ok(r, &["remote", "add", "origin", remote.to_str().unwrap()]);
    let push = || crate::util::wtxt().current_dir(r.join("m.wtxt.parts")).args(["git", "push"]).output().unwrap();
    let out = push();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 3, "{said}");
    assert!(lines[0].contains("(1 of 3)") && lines[0].contains("as stored"), "{said}");
    assert!(lines[1].contains("(2 of 3)") && lines[1].contains("as deltas"), "{said}");
    assert!(lines[2].contains("(3 of 3)") && lines[2].contains("as stored"), "{said}");
    let packs = std::fs::read_dir(remote.join("objects/pack")).unwrap();
    assert_eq!(packs.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "pack")).count(), 3);
    assert!(packed_blobs(&remote).0 >= parts, "the second generation's parts as deltas");
    let head = crate::util::git_ok(r, &["rev-parse", "HEAD"]);
    assert_eq!(crate::util::git_ok(&remote, &["rev-parse", "main"]), head);
    crate::util::git_ok(&remote, &["fsck", "--full", "--strict"]);

    let again = push();
    assert!(again.status.success() && String::from_utf8_lossy(&again.stderr).contains("up to date"));
    // A remote that moved on: Git's refusal, the remote untouched.
    crate::util::git_ok(r, &["commit", "-q", "--allow-empty", "-m", "local"]);
    let other = d.join("other");
    crate::util::git_ok(d, &["clone", "-q", "-b", "main", remote.to_str().unwrap(), "other"]);
    crate::util::git_ok(
        &other,
        &["-c", "user.name=o", "-c", "user.email=o@o", "commit", "-q", "--allow-empty", "-m", "theirs"],
    );
    crate::util::git_ok(&other, &["push", "-q"]);
    let refused = push();
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
    assert_ne!(crate::util::git_ok(&remote, &["rev-parse", "main"]), crate::util::git_ok(r, &["rev-parse", "HEAD"]));
}

/// A generation a reset dropped goes back to `git gc` once no reflog names
/// it: the next commit through the hook takes its pack's keep file off, and
/// `git gc --prune=now` removes it.
#[test]
fn a_kept_pack_nothing_reaches_is_released_for_gc_to_prune() {
    let dir = tempfile::tempdir().unwrap();
    let gens = Generations::new(dir.path());
    let r = &gens.r;
    gens.commit(0, Generations::values(0, &|_| false));
    let first = kept(r);
    gens.commit(1, Generations::values(1, &|_| true));
    let dropped: Vec<String> = kept(r).into_iter().filter(|k| !first.contains(k)).collect();
    assert_eq!((first.len(), dropped.len()), (1, 1), "every part whole each time: both packs kept");
    crate::util::git_ok(r, &["reset", "-q", "--hard", "HEAD~1"]);
    gens.chain_to_work_tree();
    // Still named by the reflog: kept.
    gens.commit(2, Generations::values(2, &|_| true));
    assert!(kept(r).contains(&dropped[0]));
    crate::util::git_ok(r, &["reset", "-q", "--hard", "HEAD~1"]);
    crate::util::git_ok(r, &["reflog", "expire", "--expire=now", "--all"]);
    gens.chain_to_work_tree();
    gens.commit(3, Generations::values(3, &|_| true));
    let now = kept(r);
    assert!(now.contains(&first[0]) && !now.contains(&dropped[0]) && now.len() == 2, "{now:?}");
    crate::util::git_ok(r, &["gc", "-q", "--prune=now"]);
    let pack = r.join(".git/objects/pack").join(format!("{}.pack", dropped[0]));
    assert!(!pack.exists(), "the dropped generation pruned");
    assert!(r.join(".git/objects/pack").join(format!("{}.pack", first[0])).exists(), "the kept one left");
    crate::util::git_ok(r, &["fsck", "--full", "--strict"]);
    let log = crate::util::wtxt().current_dir(r).args(["log", "--verify", "m.wtxt"]).output().unwrap();
    assert!(log.status.success(), "{}", String::from_utf8_lossy(&log.stderr));
}

/// `wtxt git install --trusted-keys FILE` gives the trainer's repository
/// the host's signing policy, so its hook refuses at commit what the guard
/// would refuse at push; without it, install says that nothing is required.
#[test]
fn install_with_trusted_keys_sets_the_signing_policy_the_hook_holds() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert!(git(d, &["init", "-q"]).status.success());
    let o = crate::util::wtxt().current_dir(d).args(["git", "install"]).output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && said.contains("no signing policy"), "{said}");
    let install = ["git", "install", "--trusted-keys"];
    let o = crate::util::wtxt().current_dir(d).args(install).arg(fixture("keys/hmac.hex")).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "a file that holds no key is refused");
    assert!(!git(d, &["config", "wtxt.trustedKeys"]).status.success(), "nothing was set");
    let o = crate::util::wtxt()
        .current_dir(d)
        .args(["git", "install", "--trusted-keys"])
        .arg(fixture("keys/trusted_keys"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && said.contains("signatures required"), "{said}");
    let set = String::from_utf8_lossy(&git(d, &["config", "wtxt.trustedKeys"]).stdout).trim().to_string();
    assert!(Path::new(&set).is_absolute() && set.ends_with("keys/trusted_keys"), "{set}");
    std::fs::write(d.join("u.wtxt"), read("expected/defaults.wtxt")).unwrap();
    git(d, &["add", "u.wtxt"]);
    assert!(!git(d, &["commit", "-qm", "unsigned"]).status.success(), "the hook took an unsigned generation");
    git(d, &["rm", "-q", "--cached", "u.wtxt"]);
    std::fs::write(d.join("s.wtxt"), read("expected/signed_openssh.wtxt")).unwrap();
    git(d, &["add", "s.wtxt"]);
    let r = git(d, &["commit", "-qm", "signed"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}
