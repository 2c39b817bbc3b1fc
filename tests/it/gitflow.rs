//! The drivers inside real Git: `wtxt git install`, then `git diff`,
//! `git log -p`, `git merge` and commits through the hook, all with the real
//! `git` binary in repositories made here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::{fixture, git_cmd, git_ok, snapshot};

struct Repo {
    _dir: tempfile::TempDir,
    root: PathBuf,
    work: PathBuf,
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        let work = dir.path().join("work");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let r = Repo { _dir: dir, root, work };
        r.ok(&["init", "-q", "-b", "main"]);
        r
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        git_cmd(&self.root, args, env)
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args, &[]);
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn wtxt(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_wtxt")).current_dir(&self.root).args(args).output().unwrap()
    }

    /// Writes a model whose matrix `w` (64 rows of 16 f32, 8 rows per chunk)
    /// has the given rows set to `value`, chained to `prev`, as `m.wtxt`.
    fn model(&self, tag: &str, rows: &[(usize, f32)], prev: Option<&Path>) -> PathBuf {
        let mut w = vec![0f32; 64 * 16];
        for &(r, v) in rows {
            w[r * 16..r * 16 + 16].iter_mut().for_each(|x| *x = v);
        }
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let prev_s = prev.map(|p| p.to_str().unwrap().to_string());
        let mut extra = vec!["--rows-per-chunk", "8"];
        match &prev_s {
            Some(p) => extra.extend(["--prev", p.as_str()]),
            None => extra.extend(["--gen", "0"]),
        }
        let out = snapshot(
            &self.work,
            tag,
            &[("w", "f32", vec![64, 16], bytes), ("bias", "f64", vec![4], vec![0; 32])],
            &extra,
        );
        std::fs::copy(&out, self.root.join("m.wtxt")).unwrap();
        out
    }

    fn commit(&self, msg: &str) {
        self.ok(&["add", "-A", "."]);
        self.ok(&["commit", "-qm", msg]);
    }
}

#[test]
fn install_is_idempotent_chains_hooks_and_uninstalls() {
    let r = Repo::new();
    let hook = r.root.join(".git/hooks/pre-commit");
    std::fs::write(&hook, "#!/bin/sh\necho theirs > \"$(git rev-parse --git-dir)/foreign-hook-ran\"\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A setting of the user's is kept; the caps on Git's memory come in where there are none.
    r.ok(&["config", "core.deltaBaseCacheLimit", "200m"]);
    let manual = r.wtxt(&["git", "install", "--manual"]);
    assert!(String::from_utf8_lossy(&manual.stdout).contains("merge.wtxt.driver"));
    assert!(!r.root.join(".gitattributes").exists(), "--manual writes nothing");
    for _ in 0..2 {
        let o = r.wtxt(&["git", "install"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let attrs = std::fs::read_to_string(r.root.join(".gitattributes")).unwrap();
    assert_eq!(attrs.matches("*.wtxt text eol=lf diff=wtxt merge=wtxt").count(), 1, "{attrs}");
    // Committed: parts are no text diff for a clone without wtxt; this
    // clone's own attributes (which win) turn the semantic diff on.
    assert!(attrs.contains("*.wtxtpart text eol=lf -diff merge=binary"), "{attrs}");
    // A host's pull-request page folds parts (GitHub's and GitLab's attribute).
    assert!(r.ok(&["check-attr", "linguist-generated", "--", "m.wtxt.parts/000001.wtxtpart"]).ends_with("set\n"));
    let mine = std::fs::read_to_string(r.root.join(".git/info/attributes")).unwrap();
    assert_eq!(mine.matches("*.wtxtpart text eol=lf diff=wtxt merge=binary").count(), 1, "{mine}");
    assert!(r.ok(&["check-attr", "diff", "--", "m.wtxt.parts/000001.wtxtpart"]).contains("diff: wtxt"));
    assert!(r.ok(&["config", "merge.wtxt.driver"]).contains("merge %O %A %B -o %A"));
    assert_eq!(r.ok(&["config", "core.packedGitLimit"]).trim(), "96m");
    assert_eq!(r.ok(&["config", "core.packedGitWindowSize"]).trim(), "32m");
    for (k, v) in [("core.looseCompression", "0"), ("pack.compression", "1"), ("pack.window", "1")] {
        assert_eq!(r.ok(&["config", k]).trim(), v, "{k}");
    }
    assert_eq!(r.ok(&["config", "core.deltaBaseCacheLimit"]).trim(), "200m", "the user's own value stays");
    assert!(std::fs::read_to_string(&hook).unwrap().contains("wtxt-managed-hook"));
    assert!(r.root.join(".git/hooks/pre-commit.wtxt-chained").exists());
    // The chained hook still runs.
    r.model("g0", &[], None);
    r.commit("g0");
    assert!(r.root.join(".git/foreign-hook-ran").exists());
    let o = r.wtxt(&["git", "install", "--uninstall"]);
    assert!(o.status.success());
    assert!(r.run(&["config", "merge.wtxt.driver"], &[]).status.code() == Some(1));
    assert!(r.run(&["config", "core.packedGitLimit"], &[]).status.code() == Some(1), "ours is removed");
    assert_eq!(r.ok(&["config", "core.deltaBaseCacheLimit"]).trim(), "200m", "the user's is not");
    assert!(!std::fs::read_to_string(&hook).unwrap().contains("wtxt-managed-hook"), "the foreign hook is back");
    assert!(std::fs::read_to_string(r.root.join(".gitattributes")).map_or(true, |a| !a.contains("wtxt")));
    assert!(!std::fs::read_to_string(r.root.join(".git/info/attributes")).unwrap().contains("wtxt"));
}

#[test]
fn git_diff_log_and_show_speak_wtxt() {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install"]).status.success());
    let g0 = r.model("g0", &[], None);
    r.commit("g0");
    r.model("g1", &[(9, 1.5), (10, 1.5)], Some(&g0));
    r.commit("g1");
    let d = r.ok(&["diff", "HEAD~1", "HEAD"]);
    assert!(d.contains("~ w f32[64,16]: 32 element(s) changed in 1 chunk(s) [1], rows 9-10"), "{d}");
    assert!(d.contains("header gen: 000000 -> 000001"), "{d}");
    // Without the external driver: a line diff of the textconv listing;
    // without textconv too: the raw WTXT lines.
    let listing = r.ok(&["diff", "--no-ext-diff", "HEAD~1", "HEAD"]);
    assert!(listing.contains("-gen 000000") && listing.contains("+  w chunk 1 rows 8-15"), "{listing}");
    let plain = r.ok(&["diff", "--no-ext-diff", "--no-textconv", "HEAD~1", "HEAD"]);
    assert!(plain.contains("-meta schema=weights/v1 gen=000000"), "{plain}");
    let log = r.ok(&["log", "-p", "-1"]);
    assert!(log.contains("+  w chunk 1 rows 8-15 sha256="), "{log}");
    let show = r.ok(&["show", "HEAD"]);
    assert!(show.contains("-  w chunk 1 rows 8-15"), "{show}");
}

#[test]
fn three_way_merges_clean_and_conflicting() {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install"]).status.success());
    let base = r.model("base", &[], None);
    r.commit("base");
    // Non-overlapping: ours changes chunk 0, theirs chunk 5.
    r.ok(&["checkout", "-q", "-b", "theirs"]);
    r.model("theirs", &[(41, 2.0)], Some(&base));
    r.commit("theirs: row 41");
    r.ok(&["checkout", "-q", "main"]);
    let ours = r.model("ours", &[(1, 1.0)], Some(&base));
    r.commit("ours: row 1");
    let o = r.run(&["merge", "-q", "--no-edit", "theirs"], &[]);
    assert!(o.status.success(), "clean merge: {}", String::from_utf8_lossy(&o.stderr));
    let merged = r.root.join("m.wtxt");
    let v = r.wtxt(&["verify", merged.to_str().unwrap(), "--prev", ours.to_str().unwrap(), "--json"]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    let x = r.wtxt(&["diff", ours.to_str().unwrap(), merged.to_str().unwrap(), "--json"]);
    let d: serde_json::Value = serde_json::from_slice(&x.stdout).unwrap();
    let w = d["arrays"].as_array().unwrap().iter().find(|a| a["name"] == "w").unwrap();
    assert_eq!(w["changed_rows"], serde_json::json!([[41, 42]]), "theirs' row came in, ours' stayed");

    // Overlapping: both change chunk 2 (rows 16-23) differently.
    let head = r.work.join("head.wtxt");
    std::fs::copy(&merged, &head).unwrap();
    r.ok(&["checkout", "-q", "-b", "theirs2"]);
    r.model("t2", &[(17, 4.0)], Some(&head));
    r.commit("theirs2: row 17");
    r.ok(&["checkout", "-q", "main"]);
    let ours2 = r.model("o2", &[(17, 2.0)], Some(&head));
    r.commit("ours2: row 17");
    let before = std::fs::read(r.root.join("m.wtxt")).unwrap();
    let o = r.run(&["merge", "-q", "--no-edit", "theirs2"], &[]);
    assert!(!o.status.success(), "conflict with the default strategy");
    let err = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    assert!(err.contains("conflict: array w chunk 2 rows 16-23"), "{err}");
    assert_eq!(std::fs::read(r.root.join("m.wtxt")).unwrap(), before, "ours is untouched");
    r.ok(&["merge", "--abort"]);
    for (strategy, want) in [("ours", 2.0f32), ("theirs", 4.0), ("average", 3.0)] {
        let o = r.run(&["merge", "-q", "--no-edit", "--no-commit", "theirs2"], &[("WTXT_MERGE_STRATEGY", strategy)]);
        assert!(o.status.success(), "{strategy}: {}", String::from_utf8_lossy(&o.stderr));
        let m = r.root.join("m.wtxt");
        let npy = r.work.join(format!("{strategy}.npy"));
        let x = r.wtxt(&["extract", m.to_str().unwrap(), "--array", "w", "-o", npy.to_str().unwrap()]);
        assert!(x.status.success());
        let b = std::fs::read(&npy).unwrap();
        let data = &b[b.len() - 64 * 16 * 4..];
        let v = f32::from_le_bytes(data[17 * 64..17 * 64 + 4].try_into().unwrap());
        assert_eq!(v, want, "{strategy}");
        assert!(r.wtxt(&["verify", m.to_str().unwrap(), "--prev", ours2.to_str().unwrap()]).status.success());
        r.ok(&["merge", "--abort"]);
    }
}

#[test]
fn the_installed_hook_blocks_tampered_unsigned_and_unchained_files() {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install"]).status.success());
    let g0 = r.model("g0", &[], None);
    r.commit("g0");
    // Tampered: one base64 character changed.
    let mut t = std::fs::read(&g0).unwrap();
    let at = t.len() - 300;
    t[at] = if t[at] == b'A' { b'B' } else { b'A' };
    std::fs::write(r.root.join("m.wtxt"), &t).unwrap();
    r.ok(&["add", "m.wtxt"]);
    let o = r.run(&["commit", "-qm", "tampered"], &[]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("m.wtxt") && err.contains("line") && err.contains("fix:"), "{err}");
    // Not chained to HEAD's version.
    r.model("g1", &[(3, 1.0)], None);
    r.ok(&["add", "m.wtxt"]);
    let o = r.run(&["commit", "-qm", "unchained"], &[]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("does not follow HEAD"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Signatures required: an unsigned next generation is refused, a signed one passes.
    r.ok(&["config", "wtxt.requireSignature", "true"]);
    r.ok(&["config", "wtxt.trustedKeys", fixture("keys/trusted_keys").to_str().unwrap()]);
    r.model("g1", &[(3, 1.0)], Some(&g0));
    r.ok(&["add", "m.wtxt"]);
    assert!(!r.run(&["commit", "-qm", "unsigned"], &[]).status.success());
    let signed = r.work.join("signed.wtxt");
    let key = fixture("keys/sign.pem");
    let o = r.wtxt(&[
        "snapshot",
        r.work.join("g1.npz").to_str().unwrap(),
        "-o",
        signed.to_str().unwrap(),
        "--prev",
        g0.to_str().unwrap(),
        "--rows-per-chunk",
        "8",
        "--sign-key",
        key.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::copy(&signed, r.root.join("m.wtxt")).unwrap();
    r.ok(&["add", "m.wtxt"]);
    let o = r.run(&["commit", "-qm", "signed"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Runs `wtxt merge BASE OURS THEIRS -o OUT` plus `extra`, with `env`.
fn wtxt_merge(sides: [&Path; 3], out: &Path, extra: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wtxt"));
    c.arg("merge")
        .args(sides)
        .arg("-o")
        .arg(out)
        .args(extra)
        .env_remove("WTXT_MERGE_STRATEGY")
        .env_remove("WTXT_SIGN_KEY");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn merge_decisions_and_signing_without_git() {
    let r = Repo::new();
    let base = r.model("b", &[], None);
    let ours = r.model("o", &[(2, 1.0), (50, 1.0)], Some(&base));
    let theirs = r.model("t", &[(3, 5.0), (51, 5.0)], Some(&base));
    let sides = [base.as_path(), ours.as_path(), theirs.as_path()];
    let out = r.work.join("out.wtxt");
    let dec = r.work.join("decisions.json");
    let dec_s = dec.to_str().unwrap();
    // Chunk 0 (rows 0-7) goes to theirs, chunk 6 (rows 48-55) is averaged.
    std::fs::write(&dec, r#"{"chunks": {"w": {"0": "theirs", "6": "average"}}}"#).unwrap();
    let key = fixture("keys/sign.pem");
    let o = wtxt_merge(sides, &out, &["--decisions", dec_s], &[("WTXT_SIGN_KEY", key.as_path())]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("2 conflict(s) settled"));
    let v = r.wtxt(&[
        "verify",
        out.to_str().unwrap(),
        "--pubkey",
        fixture("keys/sign.pem.pub").to_str().unwrap(),
        "--require-signature",
        "--prev",
        ours.to_str().unwrap(),
    ]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    let i: serde_json::Value =
        serde_json::from_slice(&r.wtxt(&["inspect", out.to_str().unwrap(), "--json"]).stdout).unwrap();
    assert_eq!(i["gen"], 2, "gen = max(ours, theirs) + 1");
    // A decision naming a strategy that does not exist is unusable input.
    std::fs::write(&dec, r#"{"arrays": {"w": "mine"}}"#).unwrap();
    assert_eq!(wtxt_merge(sides, &out, &["--decisions", dec_s], &[]).status.code(), Some(2));
    // No common ancestor (Git passes an empty base): both sides changed everything.
    let empty = r.work.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let o = wtxt_merge([empty.as_path(), ours.as_path(), theirs.as_path()], &out, &["--strategy", "ours"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn safetensors_filter_stores_wtxt_and_checks_out_the_same_bytes() {
    let r = Repo::new();
    let o = r.wtxt(&["git", "install", "--filter", "safetensors"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let original = std::fs::read(fixture("inputs/ext.safetensors")).unwrap();
    let path = r.root.join("model.safetensors");
    std::fs::write(&path, &original).unwrap();
    r.commit("model v0");
    let blob = r.ok(&["cat-file", "-p", "HEAD:model.safetensors"]);
    assert!(blob.starts_with("WTXT 1\nmeta schema=weights/v1 gen=000000"), "the repository holds WTXT");
    assert!(blob.contains("arr name=__safetensors_header dtype=u8"));
    // Checkout gives the binary back byte for byte, and nothing shows as modified.
    std::fs::remove_file(&path).unwrap();
    r.ok(&["checkout", "--", "model.safetensors"]);
    assert!(std::fs::read(&path).unwrap() == original, "smudge restores the exact bytes");
    assert_eq!(r.ok(&["status", "--porcelain"]), "");
    // A changed model becomes the next generation of the chain.
    let mut changed = original.clone();
    let n = changed.len();
    changed[n - 1] ^= 1;
    std::fs::write(&path, &changed).unwrap();
    r.commit("model v1");
    let blob = r.ok(&["cat-file", "-p", "HEAD:model.safetensors"]);
    assert!(blob.contains("gen=000001"), "chained to HEAD's version");
    let log = r.wtxt(&["log", "model.safetensors", "--json"]);
    assert!(log.status.success(), "{}", String::from_utf8_lossy(&log.stdout));
    std::fs::remove_file(&path).unwrap();
    r.ok(&["checkout", "--", "model.safetensors"]);
    assert!(std::fs::read(&path).unwrap() == changed);
    let d = r.ok(&["diff", "HEAD~1", "HEAD"]);
    assert!(d.contains("element(s) changed"), "{d}");
    // The driver reads the committed blobs: gen 0 -> 1 as
    // committed, not a header made up by cleaning the work tree again.
    assert!(d.contains("header gen: 000000 -> 000001"), "{d}");
    assert!(!d.contains("000002"), "{d}");
    // textconv (`git log -p`, `git show`) gets no blob name, only the
    // smudged file: it lists the committed chunks and invents no header.
    let shown = r.ok(&["show", "--textconv", "HEAD~1:model.safetensors"]);
    assert!(shown.contains("the committed header is not shown"), "{shown}");
    assert!(shown.contains("\n  __safetensors_header chunk 0 "), "{shown}");
    assert!(!shown.contains("\ngen ") && !shown.contains("\nts ") && !shown.contains("sha256_all"), "{shown}");
    let p = r.ok(&["log", "-p", "-1", "HEAD"]);
    assert!(p.lines().any(|l| l.starts_with('-') && l.contains(" chunk ")), "the changed chunk shows: {p}");
    assert!(!p.lines().any(|l| l.starts_with(['-', '+']) && l.contains(" ts ")), "{p}");
    // A clone made before install holds WTXT text under model.safetensors;
    // install checks it out again through the filter, and says so.
    let clone = r.root.parent().unwrap().join("clone");
    r.ok(&["clone", "-q", r.root.to_str().unwrap(), clone.to_str().unwrap()]);
    let cloned = clone.join("model.safetensors");
    assert!(std::fs::read(&cloned).unwrap().starts_with(b"WTXT 1\n"));
    let o = Command::new(env!("CARGO_BIN_EXE_wtxt"))
        .current_dir(&clone)
        .args(["git", "install", "--filter", "safetensors"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("checked out 1 file(s) again"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(std::fs::read(&cloned).unwrap() == changed, "the binary is back");
    assert_eq!(String::from_utf8_lossy(&git_cmd(&clone, &["status", "--porcelain"], &[]).stdout), "");
    // A clone that requires signatures smudges nothing unsigned into its
    // work tree (the filter signs nothing).
    let trusted = fixture("keys/trusted_keys");
    git_ok(&clone, &["config", "wtxt.trustedKeys", trusted.to_str().unwrap()]);
    git_ok(&clone, &["config", "wtxt.requireSignature", "true"]);
    std::fs::remove_file(&cloned).unwrap();
    let o = git_cmd(&clone, &["checkout", "--", "model.safetensors"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "an unsigned snapshot was smudged: {err}");
    assert!(err.contains("model.safetensors") && err.contains("sign"), "{err}");
    assert!(std::fs::read(&cloned).map_or(true, |b| b != changed), "the model reached the work tree");
}

#[test]
fn aero_and_fold_filters_store_wtxt_and_check_out_the_reference_bytes() {
    let r = Repo::new();
    let o = r.wtxt(&["git", "install", "--filter", "aero", "--filter", "fold"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let attrs = std::fs::read_to_string(r.root.join(".gitattributes")).unwrap();
    for ext in ["aero", "fold", "mind"] {
        assert!(attrs.contains(&format!("*.{ext} filter=wtxt-")), "{attrs}");
    }
    let peers = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/peers");
    // Files from the reference writers, numpy's deflate and all (FOLD), kept exactly.
    let files = [
        ("aero_hash_b3.aero", "m.aero"),
        ("aero_multi_shard.aero", "n.aero"),
        ("fold_zstd_rs32_sten.fold", "s.fold"),
        ("fold_none_rs16.fold", "t.mind"),
    ];
    for (src, dst) in files {
        std::fs::copy(peers.join(src), r.root.join(dst)).unwrap();
    }
    r.commit("models");
    for (src, dst) in files {
        let blob = r.ok(&["cat-file", "-p", &format!("HEAD:{dst}")]);
        assert!(blob.starts_with("WTXT 1\n"), "{dst}: the repository holds WTXT");
        std::fs::remove_file(r.root.join(dst)).unwrap();
        r.ok(&["checkout", "--", dst]);
        assert!(std::fs::read(r.root.join(dst)).unwrap() == std::fs::read(peers.join(src)).unwrap(), "{dst}");
    }
    assert_eq!(r.ok(&["status", "--porcelain"]), "");
    // A changed tensor becomes the next generation, and git diff names it.
    let path = r.root.join("n.aero");
    let mut b = std::fs::read(&path).unwrap();
    let n = b.len();
    b[n - 2] ^= 0x10; // inside the last shard: its BLAKE3 no longer matches
    std::fs::write(&path, &b).unwrap();
    let o = r.run(&["add", "n.aero"], &[]);
    assert!(!o.status.success(), "a damaged AERO is refused by the filter");
    let fixed = wtxt::convert::aero::read(
        &wtxt::model::ArrayData::Owned(std::sync::Arc::new(
            std::fs::read(peers.join("aero_multi_shard.aero")).unwrap(),
        )),
        &mut Vec::new(),
    )
    .unwrap();
    let mut fixed: Vec<wtxt::model::Array> = fixed;
    let at = fixed.iter().position(|a| a.name == "head_weight").unwrap();
    let mut bytes = fixed[at].bytes().to_vec();
    bytes[0] ^= 0x01;
    fixed[at] = wtxt::model::Array::new("head_weight", fixed[at].dtype, fixed[at].shape.clone(), bytes.into()).unwrap();
    std::fs::write(&path, wtxt::convert::aero::write(&fixed).unwrap()).unwrap();
    r.commit("head changed");
    let blob = r.ok(&["cat-file", "-p", "HEAD:n.aero"]);
    assert!(blob.contains("gen=000001"), "chained to HEAD's version");
    let d = r.ok(&["diff", "HEAD~1", "HEAD", "--", "n.aero"]);
    assert!(d.contains("head_weight") && d.contains("element(s) changed"), "{d}");
}

#[test]
fn npz_filter_keeps_numpy_archives_exactly_and_rebuilds_valid_ones_after_edits() {
    let r = Repo::new();
    let o = r.wtxt(&["git", "install", "--filter", "npz"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // np.savez (stored members) and np.savez_compressed (deflated), as numpy writes them.
    let script = "import numpy as np, sys; \
        np.savez(sys.argv[1] + '/plain.npz', **{'layer.0.w': np.arange(12, dtype=np.float32).reshape(3, 4), \
                 'f': np.asfortranarray(np.ones((2, 3))), 'be': np.arange(3, dtype='>i4')}); \
        np.savez_compressed(sys.argv[1] + '/packed.npz', a=np.arange(100, dtype=np.int16))";
    let made = std::process::Command::new("python3").args(["-c", script]).arg(&r.root).status().unwrap();
    assert!(made.success());
    let originals: Vec<(String, Vec<u8>)> =
        ["plain.npz", "packed.npz"].iter().map(|n| (n.to_string(), std::fs::read(r.root.join(n)).unwrap())).collect();
    r.commit("archives");
    for (name, bytes) in &originals {
        assert!(r.ok(&["cat-file", "-p", &format!("HEAD:{name}")]).starts_with("WTXT 1\n"), "{name}");
        std::fs::remove_file(r.root.join(name)).unwrap();
        r.ok(&["checkout", "--", name]);
        assert!(&std::fs::read(r.root.join(name)).unwrap() == bytes, "{name}: byte for byte");
    }
    assert_eq!(r.ok(&["status", "--porcelain"]), "");
    // `convert` of the stored WTXT gives the archive back too.
    let stored = r.root.join("stored.wtxt");
    std::fs::write(&stored, r.ok(&["cat-file", "-p", "HEAD:packed.npz"])).unwrap();
    let back = r.root.join("back.npz");
    let o = r.wtxt(&["convert", stored.to_str().unwrap(), "-o", back.to_str().unwrap(), "--to", "npz"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&back).unwrap() == originals[1].1, "convert --to npz rebuilds the exact archive");
    std::fs::remove_file(&back).unwrap();
    std::fs::remove_file(&stored).unwrap();
    // A tensor changed in the WTXT (as a merge would) gives a valid archive: CRC-32 recomputed.
    let blob = r.ok(&["cat-file", "-p", "HEAD:plain.npz"]);
    let loaded = wtxt::format::load(blob.as_bytes(), blob.len() as u64, &Default::default()).unwrap();
    let mut arrays = loaded.arrays;
    let at = arrays.iter().position(|a| a.name == "layer_0_w").unwrap();
    let mut b = arrays[at].bytes().to_vec();
    b[..4].copy_from_slice(&42f32.to_le_bytes());
    arrays[at] = wtxt::model::Array::new("layer_0_w", arrays[at].dtype, arrays[at].shape.clone(), b.into()).unwrap();
    let rebuilt = wtxt::convert::npz::rebuild(&arrays).unwrap();
    let out = r.root.join("edited.npz");
    std::fs::write(&out, rebuilt).unwrap();
    let check = std::process::Command::new("python3")
        .args([
            "-c",
            "import numpy as np, sys; z = np.load(sys.argv[1]); print(z['layer.0.w'][0, 0], z['f'][1, 2], z['be'][2])",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "42.0 1.0 2");
}

/// A split snapshot in Git: writes `m.wtxt` and `m.wtxt.parts/` straight
/// into the repository with 64 KiB parts.
fn split_model(r: &Repo, gen: u64, rows: &[(usize, f32)]) -> Output {
    let mut w = vec![0f32; 4096 * 16];
    for &(row, v) in rows {
        w[row * 16..row * 16 + 16].iter_mut().for_each(|x| *x = v);
    }
    let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    let list = vec![wtxt::model::Array::new("w", wtxt::model::Dtype::F32, vec![4096, 16], bytes.into()).unwrap()];
    let npz = r.work.join(format!("s{gen}.npz"));
    wtxt::convert::npz::write(&list, std::fs::File::create(&npz).unwrap()).unwrap();
    let head = r.root.join("m.wtxt");
    let mut args = vec!["snapshot".to_string(), npz.display().to_string(), "-o".into(), head.display().to_string()];
    args.extend(["--part-size".into(), "64K".into(), "--rows-per-chunk".into(), "64".into()]);
    args.extend(["--ts".into(), "2026-03-01T00:00:00Z".into()]);
    if gen > 0 {
        // Chain to the committed head (its parts are in the work tree too).
        let prev = r.work.join("prev.wtxt");
        let o = r.wtxt(&["join", head.to_str().unwrap(), "-o", prev.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        args.extend(["--prev".into(), prev.display().to_string()]);
    }
    Command::new(env!("CARGO_BIN_EXE_wtxt")).current_dir(&r.root).args(&args).output().unwrap()
}

#[test]
fn split_snapshots_commit_diff_and_log_part_by_part() {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install"]).status.success());
    let attrs = std::fs::read_to_string(r.root.join(".gitattributes")).unwrap();
    assert!(attrs.contains("*.wtxtpart"), "{attrs}");
    assert!(split_model(&r, 0, &[]).status.success());
    let parts = std::fs::read_dir(r.root.join("m.wtxt.parts")).unwrap().count();
    assert!(parts >= 4, "{parts} parts");
    r.commit("g0");
    assert!(split_model(&r, 1, &[(1000, 2.5)]).status.success());
    r.commit("g1");
    // git diff: the head's header, which parts changed, and inside the
    // changed part which rows, from the chunks that differ.
    let d = r.ok(&["diff", "HEAD~1", "HEAD"]);
    assert!(d.contains("header gen: 000000 -> 000001"), "{d}");
    assert!(d.contains("split parts changed:"), "{d}");
    assert!(d.contains("~ w f32[4096,16]: 16 element(s) changed in 1 chunk(s) [15], rows 1000"), "{d}");
    let changed = r.ok(&["diff", "--name-only", "HEAD~1", "HEAD"]);
    assert!(changed.lines().count() < parts, "only some parts change: {changed}");
    let log = r.ok(&["log", "-p", "-1"]);
    assert!(log.contains("+  w chunk 15 rows 960-1023"), "{log}");
    // wtxt log reads the heads.
    let o = r.wtxt(&["log", "m.wtxt"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("000001") && out.contains("000000"), "{out}");
    // The hook: a part changed without its head is refused, naming the part.
    let part = r.root.join("m.wtxt.parts/000002.wtxtpart");
    let good = std::fs::read(&part).unwrap();
    let mut bad = good.clone();
    let i = bad.len() / 2;
    bad[i] = if bad[i] == b'A' { b'B' } else { b'A' };
    std::fs::write(&part, &bad).unwrap();
    r.ok(&["add", "-A", "."]);
    let o = r.run(&["commit", "-qm", "part only"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("m.wtxt.parts/000002.wtxtpart"), "{err}");
    // The staged bytes are judged, not the work tree's: with the good part
    // back in the work tree but the damaged one staged, still refused.
    std::fs::write(&part, &good).unwrap();
    let o = r.run(&["commit", "-qm", "part only"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("m.wtxt.parts/000002.wtxtpart"), "{err}");
    r.ok(&["add", "-A", "."]);
    // A part file the head does not list is refused, named.
    let stray = r.root.join(format!("m.wtxt.parts/{:06}.wtxtpart", parts + 1));
    std::fs::write(&stray, &good).unwrap();
    r.ok(&["add", "-A", "."]);
    let o = r.run(&["commit", "-qm", "extra part"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    let name = format!("m.wtxt.parts/{:06}.wtxtpart", parts + 1);
    assert!(!o.status.success() && err.contains(&name) && err.contains("does not list"), "{err}");
    std::fs::remove_file(&stray).unwrap();
    r.ok(&["add", "-A", "."]);
    // So is a listed part's name in other letter case, which a checkout on
    // a case-insensitive file system would take for the part.
    let shouted = r.root.join("m.wtxt.parts/000001.WTXTPART");
    std::fs::write(&shouted, &good).unwrap();
    r.ok(&["add", "-A", "."]);
    let o = r.run(&["commit", "-qm", "a part in capitals"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("000001.WTXTPART") && err.contains("does not list"), "{err}");
    std::fs::remove_file(&shouted).unwrap();
    r.ok(&["add", "-A", "."]);
    // A new head whose parts are not staged is refused too.
    assert!(split_model(&r, 2, &[(5, 1.0)]).status.success());
    r.ok(&["add", "m.wtxt"]);
    let o = r.run(&["commit", "-qm", "head only"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("does not match the head"), "{err}");
    r.ok(&["add", "-A", "."]);
    let o = r.run(&["commit", "-qm", "g2"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Any revision's snapshot, head and parts from that commit.
    let old = r.work.join("g1-export.wtxt");
    let o = r.wtxt(&["git", "export", "HEAD~1", "m.wtxt", "-o", old.to_str().unwrap(), "--part-size", "none"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(r.wtxt(&["verify", old.to_str().unwrap()]).status.success());
    let i = r.wtxt(&["inspect", old.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&i.stdout).contains("gen 000001"));
}

/// The driver on a head names a few changed arrays and counts the rest:
/// a full fine-tune changes every array, and one line of them all reads as
/// a wall; the parts' diffs show each.
#[test]
fn a_head_diff_counts_what_it_does_not_name() {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install"]).status.success());
    let gen = |g: u64| {
        let list: Vec<_> = (0..12)
            .map(|i| {
                let v: Vec<u8> = (0..2048).flat_map(|k| ((k + i * 7 + g as usize) as f32).to_le_bytes()).collect();
                wtxt::model::Array::new(format!("layer{i:02}"), wtxt::model::Dtype::F32, vec![2048], v.into()).unwrap()
            })
            .collect();
        let npz = r.work.join(format!("g{g}.npz"));
        wtxt::convert::npz::write(&list, std::fs::File::create(&npz).unwrap()).unwrap();
        let head = r.root.join("m.wtxt");
        let prev = r.work.join("prev.wtxt");
        let mut args = vec!["snapshot".to_string(), npz.display().to_string(), "-o".into(), head.display().to_string()];
        args.extend(["--part-size".into(), "32K".into()]);
        if g > 0 {
            assert!(r.wtxt(&["join", head.to_str().unwrap(), "-o", prev.to_str().unwrap()]).status.success());
            args.extend(["--prev".into(), prev.display().to_string()]);
        }
        let o = Command::new(env!("CARGO_BIN_EXE_wtxt")).current_dir(&r.root).args(&args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        r.commit(&format!("g{g}"));
    };
    gen(0);
    gen(1);
    let d = r.ok(&["diff", "HEAD~1", "HEAD", "--", "m.wtxt"]);
    assert!(d.contains("arrays changed (12): layer00, layer01,") && d.contains(" and 4 more"), "{d}");
    assert!(!d.contains("layer11"), "{d}");
}

/// `wtxt diff REV1 REV2 PATH` and `REV:PATH`: a review without exporting
/// by hand, each side read from its commit and named by its revision (and
/// the commit it resolved to), never by a temporary copy.
#[test]
fn diff_takes_revisions_of_a_path() {
    let r = Repo::new();
    assert!(split_model(&r, 0, &[]).status.success());
    r.commit("g0");
    assert!(split_model(&r, 1, &[(1000, 2.5)]).status.success());
    r.commit("g1");
    let head = r.ok(&["rev-parse", "HEAD"]);
    let o = r.wtxt(&["diff", "HEAD~1", "HEAD", "m.wtxt"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("16 element(s) changed in 1 chunk(s) [15], rows 1000"), "{out}");
    assert!(out.contains(&format!("HEAD:m.wtxt ({})", &head[..12])) && !out.contains("wtxt-diff-"), "{out}");
    // One side a revision, the other the work tree's file; markdown names both.
    let o = r.wtxt(&["diff", "HEAD~1:m.wtxt", "m.wtxt", "--format", "markdown"]);
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && md.contains("`HEAD~1:m.wtxt (") && md.contains("→ `m.wtxt`"), "{md}");
    // A revision that does not hold it, or does not exist: one line naming it, exit 2.
    let o = r.wtxt(&["diff", "nope", "HEAD", "m.wtxt"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("nope:m.wtxt") && err.lines().count() == 1, "{err}");
    // Damage in history is named by its revision and path (the line is the
    // snapshot's, its parts joined).
    let part = r.root.join("m.wtxt.parts/000002.wtxtpart");
    let mut bad = std::fs::read(&part).unwrap();
    let i = bad.len() / 2;
    bad[i] = if bad[i] == b'A' { b'B' } else { b'A' };
    std::fs::write(&part, &bad).unwrap();
    r.ok(&["add", "-A", "."]);
    r.ok(&["commit", "-qm", "damaged", "--no-verify"]);
    let o = r.wtxt(&["diff", "HEAD~1", "HEAD", "m.wtxt"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("HEAD:m.wtxt: line ") && err.contains("parity") && !err.contains("wtxt-diff-"), "{err}");
}

/// The diff driver streams parts: equal chunk lines are not enough to call
/// two parts identical, their bytes are compared when nothing else differs.
#[test]
fn part_diff_reads_parts_as_streams_and_calls_identical_only_equal_bytes() {
    let r = Repo::new();
    assert!(split_model(&r, 0, &[]).status.success());
    let part = r.root.join("m.wtxt.parts/000002.wtxtpart");
    let text = std::fs::read_to_string(&part).unwrap();
    let (same, renumbered) = (r.work.join("same.wtxtpart"), r.work.join("renumbered.wtxtpart"));
    std::fs::write(&same, &text).unwrap();
    std::fs::write(&renumbered, text.replacen("WTXT part ix=000002", "WTXT part ix=000003", 1)).unwrap();
    let zero = "0".repeat(40);
    let driver = |new: &std::path::Path| {
        let (old, new) = (part.to_str().unwrap(), new.to_str().unwrap());
        let o =
            r.wtxt(&["git", "diff-driver", "m.wtxt.parts/000002.wtxtpart", old, &zero, "100644", new, &zero, "100644"]);
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(driver(&same).contains("identical"), "{}", driver(&same));
    let d = driver(&renumbered);
    assert!(!d.contains("identical") && d.contains("unchanged values"), "same chunks, other framing: {d}");
}

/// A repository with `wtxt git install`, a split model committed, then
/// changed on branch `side` (row 10) and on `main` (row 3000): both sides
/// of a merge changed it.
fn diverged() -> Repo {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install"]).status.success());
    assert!(split_model(&r, 0, &[]).status.success());
    r.commit("g0");
    r.ok(&["checkout", "-q", "-b", "side"]);
    assert!(split_model(&r, 1, &[(10, 1.0)]).status.success());
    r.commit("side");
    r.ok(&["checkout", "-q", "main"]);
    assert!(split_model(&r, 1, &[(3000, 2.0)]).status.success());
    r.commit("main");
    r
}

/// Git merges files one by one and cannot see a split snapshot whole: a
/// merge that changes the model on both sides stops on a conflict, and
/// `wtxt git resolve` merges the three versions whole from their commits,
/// writes and stages the result, which passes the hook. The same for a
/// cherry-pick; a conflict left unsettled writes and stages nothing.
#[test]
fn split_snapshots_merge_through_wtxt_git_resolve() {
    let r = diverged();
    let ours = r.work.join("ours.wtxt");
    assert!(r.wtxt(&["git", "export", "HEAD", "m.wtxt", "-o", ours.to_str().unwrap()]).status.success());
    // A part alone is not a snapshot: refused, naming it, nothing written.
    let part = r.work.join("part.wtxt");
    let o = r.wtxt(&["git", "export", "HEAD", "m.wtxt.parts/000001.wtxtpart", "-o", part.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a part of a split snapshot") && !part.exists());
    let o = r.run(&["merge", "-q", "side"], &[]);
    assert!(!o.status.success(), "both sides changed the model: a conflict");
    let told = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    assert!(told.contains("wtxt git resolve m.wtxt"), "the merge driver names the command: {told}");
    // Split heads with their parts next to them merge as they are, --path or not.
    let side = |rev: &str, name: &str| {
        let out = r.work.join(name);
        let o = r.wtxt(&["git", "export", rev, "m.wtxt", "-o", out.to_str().unwrap(), "--part-size", "64K"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out.to_str().unwrap().to_string()
    };
    let (b, o, t) = (side("HEAD~1", "b.wtxt"), side("HEAD", "o.wtxt"), side("side", "t.wtxt"));
    let out = r.work.join("by-hand.wtxt");
    let o = r.wtxt(&["merge", &b, &o, &t, "-o", out.to_str().unwrap(), "--path", "m.wtxt", "--part-size", "64K"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = r.wtxt(&["git", "resolve", "m.wtxt", "--part-size", "64K"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("(merge of ") && err.contains("staged m.wtxt"), "{err}");
    let status = r.ok(&["status", "--porcelain"]);
    assert!(!status.lines().any(|l| l.starts_with("UU") || l.starts_with("AA")), "nothing left unmerged: {status}");
    let o = r.run(&["commit", "-qm", "merged"], &[]);
    assert!(o.status.success(), "the hook passes the result: {}", String::from_utf8_lossy(&o.stderr));
    let d = r.wtxt(&["diff", ours.to_str().unwrap(), r.root.join("m.wtxt").to_str().unwrap()]);
    let d = String::from_utf8_lossy(&d.stdout);
    assert!(d.contains("rows 10") && !d.contains("rows 3000"), "theirs' row 10 came in, ours' row 3000 stayed: {d}");

    // A cherry-pick whose change touches the row the merge brought in: with
    // the default strategy (fail) nothing is written or staged; with
    // `--strategy theirs` it is settled.
    r.ok(&["checkout", "-q", "-b", "pick", "HEAD~1"]);
    assert!(split_model(&r, 2, &[(10, 5.0)]).status.success());
    r.commit("pick");
    r.ok(&["checkout", "-q", "main"]);
    assert!(!r.run(&["cherry-pick", "pick"], &[]).status.success());
    let before = std::fs::read(r.root.join("m.wtxt")).unwrap();
    let o = r.wtxt(&["git", "resolve", "m.wtxt", "--part-size", "64K"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cherry-pick of") && err.contains("conflict: array w"), "{err}");
    assert_eq!(std::fs::read(r.root.join("m.wtxt")).unwrap(), before, "the work tree is untouched");
    assert!(r.ok(&["status", "--porcelain"]).lines().any(|l| l.starts_with("UU")), "still unmerged");
    let o = r.wtxt(&["git", "resolve", "m.wtxt", "--part-size", "64K", "--strategy", "theirs"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = r.run(&["-c", "core.editor=true", "cherry-pick", "--continue"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Outside of any of these, it says so.
    let o = r.wtxt(&["git", "resolve", "m.wtxt"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no merge, cherry-pick, revert or rebase is in progress"));
}

/// With `git config wtxt.omsKey`, `wtxt git resolve` signs the merged
/// snapshot's folder with an OMS `model.sig` and stages it with the rest.
#[test]
fn git_resolve_signs_and_stages_model_sig_with_the_configured_oms_key() {
    let r = diverged();
    assert!(!r.run(&["merge", "-q", "side"], &[]).status.success());
    let key = r.work.join("ec.pem");
    assert!(r.wtxt(&["keygen", "-o", key.to_str().unwrap(), "--type", "p256"]).status.success());
    r.ok(&["config", "wtxt.omsKey", key.to_str().unwrap()]);
    let o = r.wtxt(&["git", "resolve", "m.wtxt", "--part-size", "64K"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let staged = r.ok(&["diff", "--cached", "--name-only"]);
    assert!(staged.lines().any(|l| l == "model.sig"), "model.sig is staged: {staged}");
    let public = format!("{}.pub", key.display());
    let o = r.wtxt(&["verify", "m.wtxt", "--oms-pubkey", &public]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = r.wtxt(&["oms", "verify", ".", "--signature", "model.sig", "--public-key", &public]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `wtxt git resolve` in the other operations Git stops in: a rebase step
/// (REBASE_HEAD: the commit's parent, HEAD, the commit) and a revert
/// (REVERT_HEAD: the commit, HEAD, its parent), each then continued.
#[test]
fn git_resolve_settles_a_rebase_step_and_a_revert() {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install"]).status.success());
    let w = |gen: u64, rows: &[(usize, f32)], msg: &str| {
        assert!(split_model(&r, gen, rows).status.success());
        r.commit(msg);
    };
    let resolve = || {
        let o = r.wtxt(&["git", "resolve", "m.wtxt", "--part-size", "64K"]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        err
    };
    // Which rows differ from generation 0 (all zeros) at `rev`.
    let export = |rev: &str, name: &str| {
        let out = r.work.join(name);
        assert!(r.wtxt(&["git", "export", rev, "m.wtxt", "-o", out.to_str().unwrap()]).status.success());
        out
    };
    let rows = |rev: &str| {
        let (zero, now) = (r.work.join("zero.wtxt"), export(rev, "now.wtxt"));
        let d = r.wtxt(&["diff", zero.to_str().unwrap(), now.to_str().unwrap()]);
        String::from_utf8_lossy(&d.stdout).into_owned()
    };
    w(0, &[], "g0");
    export("HEAD", "zero.wtxt");
    r.ok(&["checkout", "-q", "-b", "side"]);
    w(1, &[(10, 1.0)], "side");
    r.ok(&["checkout", "-q", "main"]);
    w(1, &[(3000, 2.0)], "main");
    // Rebase side onto main: its one step stops on the model.
    r.ok(&["checkout", "-q", "side"]);
    assert!(!r.run(&["rebase", "main"], &[]).status.success());
    assert!(resolve().contains("(rebase of "));
    let o = r.run(&["-c", "core.editor=true", "rebase", "--continue"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d = rows("HEAD");
    assert!(d.contains("rows 10,3000;"), "both changes after the rebase: {d}");
    // Revert the rebased step (row 10) on top of a later change (row 200, another chunk).
    w(3, &[(10, 1.0), (200, 4.0), (3000, 2.0)], "later");
    assert!(!r.run(&["revert", "--no-edit", "HEAD~1"], &[]).status.success());
    assert!(resolve().contains("(revert of "));
    let o = r.run(&["-c", "core.editor=true", "revert", "--continue"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d = rows("HEAD");
    assert!(d.contains("rows 200,3000;"), "row 10 reverted, the later change kept: {d}");
}

/// A single-file snapshot over the part size (`--part-size none`) is the
/// user's choice: the hook commits it but says what it costs and how to
/// store it split; `git config wtxt.partSize` sets the size a team keeps to.
#[test]
fn the_hook_warns_of_a_single_file_over_the_part_size() {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install"]).status.success());
    assert!(split_model(&r, 0, &[]).status.success());
    std::fs::remove_dir_all(r.root.join("m.wtxt.parts")).unwrap();
    let npz = r.work.join("s0.npz");
    let o = r.wtxt(&[
        "snapshot",
        npz.to_str().unwrap(),
        "-o",
        r.root.join("m.wtxt").to_str().unwrap(),
        "--part-size",
        "none",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    r.ok(&["add", "-A", "."]);
    r.ok(&["config", "wtxt.partSize", "64K"]);
    let o = r.run(&["commit", "-qm", "one file"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "a warning, not a refusal: {err}");
    assert!(
        err.contains("m.wtxt:")
            && err.contains("over the part size (65536)")
            && err.contains("wtxt split m.wtxt -o m.wtxt"),
        "{err}"
    );
    // Under the default part size (45M) the next generation says nothing.
    r.ok(&["config", "--unset", "wtxt.partSize"]);
    let prev = r.work.join("prev.wtxt");
    std::fs::copy(r.root.join("m.wtxt"), &prev).unwrap();
    let head = r.root.join("m.wtxt");
    let (npz, head, prev) = (npz.to_str().unwrap(), head.to_str().unwrap(), prev.to_str().unwrap());
    let o = r.wtxt(&["snapshot", npz, "-o", head, "--part-size", "none", "--prev", prev]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    r.ok(&["add", "-A", "."]);
    let o = r.run(&["commit", "-qm", "next"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("warning"), "{err}");
}

/// A filter stores one blob per file: a model whose WTXT would exceed the
/// part size is refused at `git add`, with the split workflow named, and
/// nothing over the limit enters the repository.
#[test]
fn a_filtered_model_too_large_for_one_blob_is_refused_at_add() {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install", "--filter", "safetensors"]).status.success());
    // 36 MiB of f32: its WTXT would be about 50 MiB, over 45 MiB.
    let n = 36usize << 18;
    let header = format!(r#"{{"w":{{"dtype":"F32","shape":[{n}],"data_offsets":[0,{}]}}}}"#, n * 4);
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.resize(file.len() + n * 4, 0);
    std::fs::write(r.root.join("big.safetensors"), &file).unwrap();
    let o = r.run(&["add", "big.safetensors"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "refused at git add");
    assert!(err.contains("part size") && err.contains("wtxt snapshot big.safetensors"), "{err}");
    assert!(r.run(&["cat-file", "-e", ":big.safetensors"], &[]).status.code() != Some(0), "nothing staged");
}

#[test]
fn the_hook_checks_what_a_filter_stores() {
    let r = Repo::new();
    assert!(r.wtxt(&["git", "install", "--filter", "safetensors"]).status.success());
    let path = r.root.join("model.safetensors");
    let original = std::fs::read(fixture("inputs/ext.safetensors")).unwrap();
    std::fs::write(&path, &original).unwrap();
    r.commit("model v0");
    let mut changed = original.clone();
    let n = changed.len();
    changed[n - 1] ^= 1;
    std::fs::write(&path, &changed).unwrap();
    r.commit("model v1");
    // Staged past the filter: the binary itself, as a clone without
    // `wtxt git install` would store it.
    let stage = |oid: &str| r.ok(&["update-index", "--cacheinfo", &format!("100644,{oid},model.safetensors")]);
    let raw = r.ok(&["hash-object", "-w", "--no-filters", "model.safetensors"]);
    stage(raw.trim());
    let o = r.run(&["commit", "-qm", "raw"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a raw binary under a filtered path is refused");
    assert!(err.contains("model.safetensors") && err.contains("git install --filter safetensors"), "{err}");
    // A WTXT that does not continue HEAD's: the first generation again.
    let old = r.ok(&["rev-parse", "HEAD~1:model.safetensors"]);
    stage(old.trim());
    let o = r.run(&["commit", "-qm", "old"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("does not follow HEAD"), "{err}");
    // Through the filter again, the next generation passes.
    changed[n - 2] ^= 1;
    std::fs::write(&path, &changed).unwrap();
    r.commit("model v2");
    assert!(r.ok(&["cat-file", "-p", "HEAD:model.safetensors"]).contains("gen=000002"));
    // The filter does not sign. Where signatures are required, a changed
    // file is refused at `git add` already: HEAD's version, which it would
    // chain from, is not signed by a trusted key (the file named once).
    let trusted = fixture("keys/trusted_keys");
    r.ok(&["config", "wtxt.requireSignature", "true"]);
    r.ok(&["config", "wtxt.trustedKeys", trusted.to_str().unwrap()]);
    changed[n - 3] ^= 1;
    std::fs::write(&path, &changed).unwrap();
    let o = r.run(&["add", "model.safetensors"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("HEAD's version fails verification"), "{err}");
    assert!(!err.contains("model.safetensors: model.safetensors"), "{err}");
    // A new filtered file, which chains from nothing, is refused by the hook.
    let fresh = Repo::new();
    assert!(fresh.wtxt(&["git", "install", "--filter", "safetensors"]).status.success());
    fresh.ok(&["config", "wtxt.requireSignature", "true"]);
    fresh.ok(&["config", "wtxt.trustedKeys", trusted.to_str().unwrap()]);
    std::fs::write(fresh.root.join("model.safetensors"), &original).unwrap();
    fresh.ok(&["add", "model.safetensors"]);
    let o = fresh.run(&["commit", "-qm", "unsigned"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("filter does not sign"), "{err}");
}
