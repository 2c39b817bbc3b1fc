//! A Hugging Face folder in the work tree, its split snapshot in the
//! repository (`wtxt git install --folder`): commit, diff, log, checkout of
//! an older commit, clone and merge with the real `git` binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::hf::{files, folder, shard, tensor};
use crate::util::{fixture, git_cmd};
use wtxt::model::Dtype;

struct Work {
    root: PathBuf,
}

impl Work {
    fn git(&self, args: &[&str]) -> Output {
        git_cmd(&self.root, args, &[])
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.git(args);
        assert!(
            o.status.success(),
            "git {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
    }

    fn wtxt(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_wtxt")).current_dir(&self.root).args(args).output().unwrap()
    }

    fn model(&self) -> BTreeMap<String, Vec<u8>> {
        files(&self.root.join("model"))
    }

    /// Rewrites the first shard with the embedding and the up projection
    /// drawn from `seeds` (same shapes: the index stays as it is).
    fn retrain(&self, seeds: (u8, u8)) {
        let a = tensor("model.embed_tokens.weight", Dtype::Bf16, &[64, 16], seeds.0);
        let b = tensor("model.layers.0.mlp.up_proj.weight", Dtype::F32, &[40, 16], seeds.1);
        shard(&self.root.join("model/model-00001-of-00002.safetensors"), &[&a, &b]);
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_model_folder_lives_in_the_work_tree_and_its_signed_snapshot_in_git() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    let w = Work { root: root.clone() };
    w.ok(&["init", "-q", "-b", "main"]);
    folder(&root);
    let (key, trusted) = (fixture("keys/sign.pem"), fixture("keys/trusted_keys"));
    let o = w.wtxt(&["git", "install", "--folder", "model"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (k, v) in [
        ("wtxt.signKey", s(&key)),
        ("wtxt.trustedKeys", s(&trusted)),
        ("wtxt.requireSignature", "true"),
        ("wtxt.partSize", "8K"),
    ] {
        w.ok(&["config", k, v]);
    }
    // Git never takes the folder itself.
    assert_eq!(w.ok(&["status", "--porcelain"]).lines().filter(|l| l.contains("model/")).count(), 0);
    let g0 = w.model();

    // `git folder --stage` snapshots the folder and stages head and parts, signed.
    let o = w.wtxt(&["git", "folder", "model", "--stage"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.contains("into model.wtxt (gen 0"), "{err}");
    w.ok(&["add", ".gitattributes"]);
    w.ok(&["commit", "-q", "-m", "g0"]);
    let tree = w.ok(&["ls-tree", "-r", "--name-only", "HEAD"]);
    assert!(
        tree.lines().any(|l| l == "model.wtxt") && tree.lines().any(|l| l.starts_with("model.wtxt.parts/")),
        "{tree}"
    );
    assert!(!tree.contains("safetensors"), "{tree}");
    let v = w.wtxt(&["verify", "model.wtxt", "--trusted-keys", s(&trusted), "--require-signature"]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    // Nothing changed: the next commit takes nothing from the folder.
    std::fs::write(root.join("notes.txt"), "x").unwrap();
    w.ok(&["add", "notes.txt"]);
    let o = w.ok(&["commit", "-m", "notes"]);
    assert!(!o.contains("snapshotted"), "{o}");

    // Trained further: any commit snapshots the changed folder (here `-a`,
    // whose index is Git's temporary one), the next generation chained to HEAD's.
    w.retrain((9, 2));
    std::fs::write(root.join("notes.txt"), "y").unwrap();
    let o = w.ok(&["commit", "-a", "-m", "g1"]);
    assert!(o.contains("snapshotted the folder into model.wtxt (gen 1"), "{o}");
    let g1 = w.model();
    assert_ne!(g0, g1);
    let log = w.wtxt(&["log", "model.wtxt", "--verify", "--trusted-keys", s(&trusted)]);
    assert!(log.status.success(), "{}{}", String::from_utf8_lossy(&log.stdout), String::from_utf8_lossy(&log.stderr));
    // git diff names the tensor as the model does.
    let d = w.ok(&["diff", "HEAD~2", "HEAD", "--", "model.wtxt", "model.wtxt.parts"]);
    assert!(d.contains("model.embed_tokens.weight"), "{d}");

    // An older commit writes the older folder back, byte for byte; and back again.
    let o = w.ok(&["checkout", "-q", "HEAD~2"]);
    assert!(o.contains("wrote model/ from model.wtxt"), "{o}");
    assert_eq!(w.model(), g0);
    w.ok(&["checkout", "-q", "main"]);
    assert_eq!(w.model(), g1);

    // A folder changed by hand is never overwritten by a checkout.
    w.retrain((7, 7));
    let edited = w.model();
    let o = w.ok(&["checkout", "-q", "HEAD~2"]);
    assert!(o.contains("model/ and model.wtxt both changed"), "{o}");
    assert_eq!(w.model(), edited);
    w.ok(&["checkout", "-q", "main"]);
    let o = w.wtxt(&["git", "folder", "model", "--checkout", "--force"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(w.model(), g1);

    // A clone names its folders itself; install writes them.
    let clone = dir.path().join("clone");
    let o = git_cmd(dir.path(), &["clone", "-q", s(&root), s(&clone)], &[]);
    assert!(o.status.success());
    let c = Work { root: clone.clone() };
    assert!(!clone.join("model").exists());
    c.ok(&["config", "wtxt.trustedKeys", s(&trusted)]);
    c.ok(&["config", "wtxt.requireSignature", "true"]);
    // The clone has the snapshot, not the folder: an install says what writes it.
    let o = c.wtxt(&["git", "install"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("model.wtxt holds the model folder model/: `wtxt git install --folder model`"), "{err}");
    let o = c.wtxt(&["git", "install", "--folder", "model"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(c.model(), g1);

    // Where wtxt is installed for the user (`--global`, as git-lfs is), the
    // clone itself says what writes the folder: the committed attributes
    // smudge the folder's snapshot through `wtxt git folder-notice`, which
    // passes it through unchanged.
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let config = home.join(".config");
    let env = [("HOME", s(&home)), ("XDG_CONFIG_HOME", s(&config))];
    let mut install = Command::new(env!("CARGO_BIN_EXE_wtxt"));
    install.current_dir(&home).args(["git", "install", "--global"]).envs(env);
    let o = install.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let told = dir.path().join("told");
    let o = git_cmd(dir.path(), &["clone", "-q", s(&root), s(&told)], &env);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        err.matches("model.wtxt holds the model folder model/: `wtxt git install --folder model`").count(),
        1,
        "{err}"
    );
    assert_eq!(std::fs::read(told.join("model.wtxt")).unwrap(), std::fs::read(root.join("model.wtxt")).unwrap());
    assert!(!told.join("model").exists());
    // Set up, the folder's checkouts say nothing of the kind.
    let o = git_cmd(&clone, &["checkout", "-q", "HEAD~2"], &env);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("holds the model folder"), "{err}");
    git_cmd(&clone, &["checkout", "-q", "main"], &env);

    // Both sides train different tensors; Git cannot merge a split
    // snapshot file by file, `wtxt git resolve` merges it whole, and the
    // commit writes the merged folder.
    let train = |seeds, msg| {
        w.retrain(seeds);
        assert!(w.wtxt(&["git", "folder", "model", "--stage"]).status.success());
        w.ok(&["commit", "-q", "-m", msg]);
    };
    w.ok(&["checkout", "-q", "-b", "side"]);
    train((5, 2), "side");
    w.ok(&["checkout", "-q", "main"]);
    train((9, 6), "main");
    assert!(!w.git(&["merge", "-q", "side"]).status.success());
    let o = w.wtxt(&["git", "resolve", "model.wtxt", "--part-size", "8K", "--sign-key", s(&key)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = w.ok(&["commit", "-q", "-m", "merged"]);
    assert!(o.contains("wrote model/ from model.wtxt"), "{o}");
    let merged = w.model();
    let shard1 = |seeds: (u8, u8)| {
        let t = tempfile::tempdir().unwrap();
        let a = tensor("model.embed_tokens.weight", Dtype::Bf16, &[64, 16], seeds.0);
        let b = tensor("model.layers.0.mlp.up_proj.weight", Dtype::F32, &[40, 16], seeds.1);
        shard(&t.path().join("s"), &[&a, &b]);
        std::fs::read(t.path().join("s")).unwrap()
    };
    assert_eq!(merged["model-00001-of-00002.safetensors"], shard1((5, 6)), "side's embedding, main's projection");
    assert_eq!(w.ok(&["status", "--porcelain"]), "");

    // A changed config reads by file and line in `git diff`, not as bytes
    // of `__hf_files`; the head's summary names tensors as the model does.
    std::fs::write(
        root.join("model/config.json"),
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"auto_map\": \"evil.Model\"\n}\n",
    )
    .unwrap();
    w.retrain((5, 5));
    // The first shard's header gains a `__metadata__` entry.
    let (a, b) = (
        tensor("model.embed_tokens.weight", Dtype::Bf16, &[64, 16], 5),
        tensor("model.layers.0.mlp.up_proj.weight", Dtype::F32, &[40, 16], 5),
    );
    let meta =
        std::collections::BTreeMap::from([("format".to_string(), "pt".to_string()), ("step".into(), "100".into())]);
    let mut f = std::fs::File::create(root.join("model/model-00001-of-00002.safetensors")).unwrap();
    wtxt::convert::safetensors::write_named(&[(a.name.as_str(), &a), (b.name.as_str(), &b)], Some(&meta), &mut f)
        .unwrap();
    drop(f);
    assert!(w.wtxt(&["git", "folder", "model", "--stage"]).status.success());
    w.ok(&["commit", "-q", "-m", "config"]);
    let d = w.ok(&["diff", "HEAD~1", "HEAD", "--", "model.wtxt", "model.wtxt.parts"]);
    assert!(d.contains("~ file config.json: "), "{d}");
    assert!(d.contains("--- a/config.json") && d.contains("+  \"auto_map\": \"evil.Model\""), "{d}");
    assert!(d.contains("-  \"architectures\": [\"LlamaForCausalLM\"]\n"), "{d}");
    assert!(d.contains(r#"model-00001-of-00002.safetensors: __metadata__ "step" added ("100")"#), "{d}");
    assert!(d.contains("arrays changed: ") && d.contains("model.layers.0.mlp.up_proj.weight"), "{d}");
    assert!(!d.contains("model_layers_0"), "{d}");
    // `wtxt diff` of the two snapshots whole says the same, in JSON too.
    let (a, b) = (root.join("old.wtxt"), root.join("new.wtxt"));
    for (rev, out) in [("HEAD~1", &a), ("HEAD", &b)] {
        let o = w.wtxt(&["git", "export", rev, "model.wtxt", "-o", s(out), "--part-size", "none"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = w.wtxt(&["diff", s(&a), s(&b), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &v["files"][0];
    assert_eq!((f["path"].as_str(), f["status"].as_str()), (Some("config.json"), Some("changed")), "{v}");
    assert!(f["unified"].as_str().unwrap().contains("+  \"auto_map\""), "{v}");
    std::fs::remove_file(&a).unwrap();
    std::fs::remove_file(&b).unwrap();

    // Only the folder changed: the status says how to stage it. A commit
    // begun with nothing staged is one Git ends before its hook's staging
    // counts: the hook says so, and the same commit again takes it.
    w.retrain((3, 4));
    let st = String::from_utf8_lossy(&w.wtxt(&["git", "folder", "model"]).stdout).into_owned();
    assert!(st.contains("`wtxt git folder model --stage`"), "{st}");
    let o = w.git(&["commit", "-m", "only the folder"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("nothing else was staged") && err.contains("the same commit again takes it"), "{err}");
    assert!(!err.contains("  "), "no runs of spaces: {err}");
    if !o.status.success() {
        w.ok(&["commit", "-q", "-m", "only the folder"]);
    }
    assert_eq!(w.ok(&["log", "-1", "--format=%s"]).trim(), "only the folder");
    assert_eq!(w.ok(&["status", "--porcelain"]), "");
}

/// Folders are named by the user, inside the work tree only; install and
/// uninstall leave nothing of theirs behind.
#[test]
fn folders_are_plain_paths_inside_the_work_tree_and_uninstall_removes_their_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let w = Work { root: dir.path().to_path_buf() };
    w.ok(&["init", "-q"]);
    for bad in ["../model", "/tmp/model", ".git", "a/../../b", "", "a/.hidden"] {
        let o = w.wtxt(&["git", "install", "--folder", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", String::from_utf8_lossy(&o.stderr));
    }
    let o = w.wtxt(&["git", "install", "--global", "--folder", "model"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(w.wtxt(&["git", "install", "--folder", "models/llama"]).status.success());
    assert!(w.wtxt(&["git", "install", "--folder", "models/llama/"]).status.success(), "idempotent");
    assert_eq!(w.ok(&["config", "--get-all", "wtxt.folder"]).trim(), "models/llama");
    let exclude = std::fs::read_to_string(dir.path().join(".git/info/exclude")).unwrap();
    assert_eq!(exclude.matches("/models/llama/").count(), 1, "{exclude}");
    for h in ["pre-commit", "post-checkout", "post-merge", "post-commit", "post-rewrite"] {
        assert!(dir.path().join(".git/hooks").join(h).exists(), "{h}");
    }
    let o = w.wtxt(&["git", "folder", "other"]);
    assert_eq!(o.status.code(), Some(2), "not a configured folder");
    let o = w.wtxt(&["git", "folder", "models/llama"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("neither the folder nor models/llama.wtxt exists"));
    assert!(w.wtxt(&["git", "install", "--uninstall"]).status.success());
    assert!(!w.git(&["config", "--get-all", "wtxt.folder"]).status.success());
    assert!(!std::fs::read_to_string(dir.path().join(".git/info/exclude")).unwrap().contains("llama"));
    for h in ["pre-commit", "post-checkout", "post-merge", "post-commit", "post-rewrite"] {
        assert!(!dir.path().join(".git/hooks").join(h).exists(), "{h}");
    }
}

/// A work tree is the repository's: a committed link where a model folder
/// (or a folder above it) goes is refused, never followed, by the hook,
/// `git folder` and the checkout hooks; nothing is written through it.
#[test]
fn a_link_in_place_of_a_model_folder_is_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    let w = Work { root: root.clone() };
    w.ok(&["init", "-q", "-b", "main"]);
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    folder(&elsewhere);
    let target = elsewhere.join("model");
    std::os::unix::fs::symlink(&target, root.join("model")).unwrap();
    std::fs::create_dir(root.join("up")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join("up/via")).unwrap();
    for f in ["model", "up/via/model"] {
        // Installed, but the folder is not written through the link.
        let o = w.wtxt(&["git", "install", "--folder", f]);
        assert!(String::from_utf8_lossy(&o.stderr).contains("symbolic link"), "{f}");
        assert!(w.ok(&["config", "--get-all", "wtxt.folder"]).lines().any(|l| l == f));
        let o = w.wtxt(&["git", "folder", f, "--stage"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{f}: {err}");
        assert!(err.contains("symbolic link"), "{f}: {err}");
        assert!(!root.join(format!("{f}.wtxt")).exists() && !elsewhere.join("model.wtxt").exists());
    }
    let before = files(&target);
    let o = w.wtxt(&["hook", "checkout"]);
    assert_ne!(o.status.code(), Some(0));
    assert_eq!(files(&target), before);
}

/// Issue 50.2: a merged branch that force-added files below a model folder
/// (the folder is only in `.git/info/exclude`) would have the next commit
/// snapshot and sign them: while HEAD or the index tracks any path below
/// a configured folder, the hook and `git folder --stage` refuse, and the
/// checkout hooks say so.
#[test]
fn files_a_branch_planted_in_a_model_folder_are_never_snapshotted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    let w = Work { root: root.clone() };
    w.ok(&["init", "-q", "-b", "main"]);
    folder(&root);
    assert!(w.wtxt(&["git", "install", "--folder", "model"]).status.success());
    w.ok(&["config", "wtxt.partSize", "8K"]);
    w.ok(&["add", ".gitattributes"]);
    w.ok(&["commit", "-q", "-m", "g0"]);
    let g0 = w.ok(&["rev-parse", "HEAD:model.wtxt"]);
    // Another branch force-adds code into the folder; merged, Git writes it.
    w.ok(&["checkout", "-q", "-b", "evil"]);
    std::fs::write(root.join("model/evil.py"), "import os\n").unwrap();
    w.ok(&["add", "-f", "model/evil.py"]);
    let o = w.git(&["commit", "-q", "-m", "plant"]);
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "the hook refuses to commit a tracked path below the folder: {said}");
    assert!(said.contains("model/evil.py"), "{said}");
    w.ok(&["commit", "-q", "--no-verify", "-m", "plant"]);
    w.ok(&["checkout", "-q", "main"]);
    let o = w.ok(&["merge", "-q", "--no-verify", "evil"]);
    assert!(o.contains("Git tracks model/evil.py"), "the merge's hook says so: {o}");
    // Any later commit, and `git folder --stage`, refuse while it is tracked.
    w.retrain((9, 2));
    std::fs::write(root.join("notes.txt"), "x").unwrap();
    w.ok(&["add", "notes.txt"]);
    let o = w.git(&["commit", "-q", "-m", "g1"]);
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success() && said.contains("Git tracks model/evil.py"), "{said}");
    let o = w.wtxt(&["git", "folder", "model", "--stage"]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(w.ok(&["rev-parse", "HEAD:model.wtxt"]), g0, "no generation was committed");
    assert!(!w.ok(&["diff", "--cached", "--name-only"]).contains("model.wtxt"), "nor staged");
    // Taken out of Git, the folder is the user's again.
    w.ok(&["rm", "-q", "--cached", "--", "model/evil.py"]);
    std::fs::remove_file(root.join("model/evil.py")).unwrap();
    let o = w.ok(&["commit", "-q", "-m", "g1"]);
    assert!(o.contains("snapshotted the folder into model.wtxt"), "{o}");
}

/// Issue 50.3: a private key is never committed: the hook refuses a staged
/// file that is one (the path `wtxt.signKey` names, or any PEM, OpenSSH or
/// age private key), and a key setting never follows a link in the work
/// tree.
#[test]
fn private_keys_are_never_committed_and_key_settings_follow_no_link() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    let w = Work { root: root.clone() };
    w.ok(&["init", "-q", "-b", "main"]);
    folder(&root);
    assert!(w.wtxt(&["git", "install", "--folder", "model"]).status.success());
    let o = w.wtxt(&["keygen", "-o", "key.pem"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    w.ok(&["config", "wtxt.signKey", "key.pem"]);
    w.ok(&["add", "-A"]);
    let o = w.git(&["commit", "-q", "-m", "g0"]);
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success() && said.contains("key.pem") && said.contains("wtxt.signKey"), "{said}");
    // Any private key, under any name.
    w.ok(&["reset", "-q"]);
    let outside = dir.path().join("key.pem");
    std::fs::rename(root.join("key.pem"), &outside).unwrap();
    std::fs::rename(root.join("key.pem.pub"), dir.path().join("key.pem.pub")).unwrap();
    w.ok(&["config", "wtxt.signKey", s(&outside)]);
    std::fs::copy(&outside, root.join("backup.txt")).unwrap();
    w.ok(&["add", "-A"]);
    let o = w.git(&["commit", "-q", "-m", "g0"]);
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success() && said.contains("backup.txt: a private key"), "{said}");
    w.ok(&["rm", "-q", "--cached", "backup.txt"]);
    std::fs::remove_file(root.join("backup.txt")).unwrap();
    w.ok(&["commit", "-q", "-m", "g0"]);
    // A key setting through a link in the work tree is refused.
    std::os::unix::fs::symlink(&outside, root.join("linked.pem")).unwrap();
    w.ok(&["config", "wtxt.signKey", "linked.pem"]);
    w.retrain((3, 4));
    let o = w.wtxt(&["git", "folder", "model", "--stage"]);
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("symbolic link inside the work tree"), "{said}");
}
