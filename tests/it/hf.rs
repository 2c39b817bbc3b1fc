//! Hugging Face folders: `wtxt snapshot DIR` and `wtxt extract --hf`, byte
//! for byte, and every inconsistency between the index and its shards
//! refused. (python/tests/test_hf.py does the same with folders the real
//! `transformers` wrote, and loads the result with `from_pretrained`.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::util::run;
use wtxt::model::{Array, Dtype};

pub(crate) fn tensor(name: &str, dtype: Dtype, shape: &[u64], seed: u8) -> Array {
    let n = wtxt::model::byte_size(dtype, shape).unwrap();
    let bytes: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    Array::new("t", dtype, shape.to_vec(), bytes.into()).unwrap().renamed(name)
}

/// Writes a shard as the Python `safetensors` library does (`{"format": "pt"}`).
pub(crate) fn shard(path: &Path, tensors: &[&Array]) {
    let named: Vec<(&str, &Array)> = tensors.iter().map(|a| (a.name.as_str(), *a)).collect();
    let meta = BTreeMap::from([("format".to_string(), "pt".to_string())]);
    let mut f = std::fs::File::create(path).unwrap();
    wtxt::convert::safetensors::write_named(&named, Some(&meta), &mut f).unwrap();
}

/// A two-shard folder as `save_pretrained` lays it out.
pub(crate) fn folder(dir: &Path) -> PathBuf {
    let m = dir.join("model");
    std::fs::create_dir_all(&m).unwrap();
    let a = tensor("model.embed_tokens.weight", Dtype::Bf16, &[64, 16], 1);
    let b = tensor("model.layers.0.mlp.up_proj.weight", Dtype::F32, &[40, 16], 2);
    let c = tensor("model.norm.weight", Dtype::F16, &[16], 3);
    let d = tensor("model.layers.0.self_attn.q_proj.weight", Dtype::F8E4m3, &[16, 16], 4);
    let e = tensor("model.layers.0.self_attn.q_proj.weight_scale", Dtype::F8E5m2, &[16], 5);
    shard(&m.join("model-00001-of-00002.safetensors"), &[&a, &b]);
    shard(&m.join("model-00002-of-00002.safetensors"), &[&c, &d, &e]);
    let total = [&a, &b, &c, &d, &e].iter().map(|t| t.bytes().len()).sum::<usize>();
    let index = format!(
        "{{\n  \"metadata\": {{\n    \"total_size\": {total}\n  }},\n  \"weight_map\": {{\n    \
         \"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\",\n    \
         \"model.layers.0.mlp.up_proj.weight\": \"model-00001-of-00002.safetensors\",\n    \
         \"model.layers.0.self_attn.q_proj.weight\": \"model-00002-of-00002.safetensors\",\n    \
         \"model.layers.0.self_attn.q_proj.weight_scale\": \"model-00002-of-00002.safetensors\",\n    \
         \"model.norm.weight\": \"model-00002-of-00002.safetensors\"\n  }}\n}}\n"
    );
    std::fs::write(m.join("model.safetensors.index.json"), index).unwrap();
    std::fs::write(m.join("config.json"), "{\n  \"architectures\": [\"LlamaForCausalLM\"]\n}\n").unwrap();
    std::fs::write(m.join("generation_config.json"), "{\"do_sample\": false}").unwrap();
    std::fs::create_dir(m.join("extra")).unwrap();
    std::fs::write(m.join("extra").join("chat_template.jinja"), "{{ messages }}").unwrap();
    m
}

pub(crate) fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    wtxt::list_files(dir, &[]).unwrap().into_iter().map(|f| (f.clone(), std::fs::read(dir.join(&f)).unwrap())).collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_folder_goes_in_and_comes_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let m = folder(dir.path());
    std::fs::write(m.join(".hidden"), "not kept").unwrap();
    let snap = dir.path().join("m.wtxt");
    let r = run(&["snapshot", s(&m), "-o", s(&snap), "--ts", "2026-01-01T00:00:00Z"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains(".hidden"), "{}", r.stderr);
    assert_eq!(run(&["verify", s(&snap)]).code, 0);
    let out = dir.path().join("out");
    let r = run(&["extract", s(&snap), "--hf", s(&out)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut want = files(&m);
    want.remove(".hidden");
    assert_eq!(files(&out), want);
    // The tensors are the snapshot's arrays, under the model's own names;
    // a format without float8 refuses them by name.
    let r = run(&["extract", s(&snap), "-o", s(&dir.path().join("all.safetensors"))]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let q = "model.layers.0.self_attn.q_proj.weight";
    let r = run(&["extract", s(&snap), "--array", q, "-o", s(&dir.path().join("q.npy"))]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("f8e4m3"), "{}", r.stderr);
    let r = run(&["convert", s(&snap), "--to", "aero", "-o", s(&dir.path().join("all.aero"))]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("f8e4m3") && r.stderr.contains("self_attn"), "{}", r.stderr);
    // Encrypted (it cannot be outlined): decrypted, verified, written the same.
    let pass = dir.path().join("pass");
    std::fs::write(&pass, "correct horse\n").unwrap();
    let sealed = dir.path().join("m.wtxt.age");
    let pf = s(&pass);
    let r = run(&["encrypt", s(&snap), "-o", s(&sealed), "-p", "--passphrase-file", pf]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let opened = dir.path().join("opened");
    let r = run(&["extract", s(&sealed), "--passphrase-file", pf, "--hf", s(&opened)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(files(&opened), want);
    // `convert DIR --to wtxt` writes what `snapshot DIR` does.
    let converted = dir.path().join("c.wtxt");
    let r = run(&["convert", s(&m), "--to", "wtxt", "-o", s(&converted), "--ts", "2026-01-01T00:00:00Z"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(std::fs::read(&converted).unwrap(), std::fs::read(&snap).unwrap());
    // An existing folder is not written into.
    let r = run(&["extract", s(&snap), "--hf", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("already exists"), "{}", r.stderr);
    // A snapshot not made from a folder has no folder to give.
    let r = run(&["extract", "golden_vector_a.wtxt", "--hf", s(&dir.path().join("none"))]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!dir.path().join("none").exists());
}

#[test]
fn an_index_and_shards_that_disagree_are_refused_naming_the_file() {
    type Break = fn(&Path);
    let cases: &[(&str, Break, &str)] = &[
        ("missing shard", |m| std::fs::remove_file(m.join("model-00002-of-00002.safetensors")).unwrap(), "missing"),
        (
            "extra shard",
            |m| {
                std::fs::copy(m.join("model-00002-of-00002.safetensors"), m.join("adapter.safetensors"))
                    .map(drop)
                    .unwrap()
            },
            "adapter.safetensors",
        ),
        (
            "tensor in two shards",
            |m| {
                let c = tensor("model.embed_tokens.weight", Dtype::F16, &[16], 3);
                shard(
                    &m.join("model-00002-of-00002.safetensors"),
                    &[&c, &tensor("model.norm.weight", Dtype::F16, &[16], 3)],
                );
            },
            "model.embed_tokens.weight",
        ),
        (
            "tensor the index does not list",
            |m| {
                let c = tensor("model.norm.weight", Dtype::F16, &[16], 3);
                shard(
                    &m.join("model-00002-of-00002.safetensors"),
                    &[&c, &tensor("lm_head.weight", Dtype::F16, &[4], 1)],
                );
            },
            "lm_head.weight",
        ),
        (
            "total_size",
            |m| {
                let p = m.join("model.safetensors.index.json");
                let t = std::fs::read_to_string(&p).unwrap().replace("\"total_size\": ", "\"total_size\": 1");
                std::fs::write(p, t).unwrap();
            },
            "total_size",
        ),
        (
            "both forms",
            |m| {
                std::fs::copy(m.join("model-00002-of-00002.safetensors"), m.join("model.safetensors"))
                    .map(drop)
                    .unwrap()
            },
            "both",
        ),
        ("a link", |m| std::os::unix::fs::symlink("/etc/passwd", m.join("tokenizer.json")).unwrap(), "link"),
    ];
    for (what, breaks, says) in cases {
        let dir = tempfile::tempdir().unwrap();
        let m = folder(dir.path());
        breaks(&m);
        let snap = dir.path().join("m.wtxt");
        let r = run(&["snapshot", s(&m), "-o", s(&snap)]);
        assert_eq!(r.code, 2, "{what}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{what}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{what}: {}", r.stderr);
        assert!(!snap.exists(), "{what}");
    }
}

#[test]
fn diffs_name_tensors_as_the_model_does() {
    let dir = tempfile::tempdir().unwrap();
    let m = folder(dir.path());
    let (a, b) = (dir.path().join("a.wtxt"), dir.path().join("b.wtxt"));
    assert_eq!(run(&["snapshot", s(&m), "-o", s(&a), "--part-size", "none"]).code, 0);
    let up = tensor("model.layers.0.mlp.up_proj.weight", Dtype::F32, &[40, 16], 9);
    let embed = tensor("model.embed_tokens.weight", Dtype::Bf16, &[64, 16], 1);
    shard(&m.join("model-00001-of-00002.safetensors"), &[&embed, &up]);
    assert_eq!(run(&["snapshot", s(&m), "-o", s(&b), "--part-size", "none"]).code, 0);
    let r = run(&["diff", s(&a), s(&b)]);
    assert!(r.stdout.contains("~ model.layers.0.mlp.up_proj.weight f32[40,16]"), "{}", r.stdout);
    assert!(!r.stdout.contains("model_layers_0"), "{}", r.stdout);
    // JSON keeps the stored name beside the model's.
    let r = run(&["diff", s(&a), s(&b), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let up = v["arrays"].as_array().unwrap().iter().find(|x| x["status"] == "changed").unwrap();
    assert_eq!(up["name"], "model_layers_0_mlp_up_proj_weight");
    assert_eq!(up["original"], "model.layers.0.mlp.up_proj.weight");

    // `verify --json` gives both names too.
    let r = run(&["verify", s(&b), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let up = v["arrays"].as_array().unwrap().iter().find(|x| x["name"] == "model_layers_0_mlp_up_proj_weight").unwrap();
    assert_eq!(up["original"], "model.layers.0.mlp.up_proj.weight");

    // And `git diff` of the snapshot in a repository.
    let repo = dir.path().join("repo");
    crate::util::git_ok(dir.path(), &["init", "-q", "repo"]);
    let o = crate::util::wtxt().current_dir(&repo).args(["git", "install"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (f, msg) in [(&a, "a"), (&b, "b")] {
        std::fs::copy(f, repo.join("model.wtxt")).unwrap();
        crate::util::git_ok(&repo, &["add", "model.wtxt"]);
        crate::util::git_ok(
            &repo,
            &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--no-verify", "-m", msg],
        );
    }
    let shown = crate::util::git_ok(&repo, &["diff", "HEAD~1", "HEAD"]);
    assert!(shown.contains("~ model.layers.0.mlp.up_proj.weight"), "{shown}");
}

#[test]
fn merge_conflicts_are_named_and_settled_by_the_models_names() {
    let dir = tempfile::tempdir().unwrap();
    let m = folder(dir.path());
    let snap = |tag: &str, up_seed: u8| {
        let up = tensor("model.layers.0.mlp.up_proj.weight", Dtype::F32, &[40, 16], up_seed);
        let embed = tensor("model.embed_tokens.weight", Dtype::Bf16, &[64, 16], 1);
        shard(&m.join("model-00001-of-00002.safetensors"), &[&embed, &up]);
        let out = dir.path().join(format!("{tag}.wtxt"));
        let r = run(&["snapshot", s(&m), "-o", s(&out), "--ts", "2026-01-01T00:00:00Z"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        out
    };
    let (base, ours, theirs) = (snap("base", 2), snap("ours", 7), snap("theirs", 9));
    let theirs_folder = dir.path().join("theirs-folder");
    assert_eq!(run(&["extract", s(&theirs), "--hf", s(&theirs_folder)]).code, 0);
    let out = dir.path().join("m.wtxt");
    let r = run(&["merge", s(&base), s(&ours), s(&theirs), "-o", s(&out)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("conflict: array model.layers.0.mlp.up_proj.weight chunk 0"), "{}", r.stderr);
    let decisions = dir.path().join("d.json");
    std::fs::write(&decisions, r#"{"arrays": {"model.layers.0.mlp.up_proj.weight": "theirs"}}"#).unwrap();
    let r = run(&["merge", s(&base), s(&ours), s(&theirs), "-o", s(&out), "--decisions", s(&decisions)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let merged = dir.path().join("merged-folder");
    assert_eq!(run(&["extract", s(&out), "--hf", s(&merged)]).code, 0);
    assert_eq!(files(&merged), files(&theirs_folder));
}

/// A damaged tensor is named as the model names it: in `verify`'s line
/// (also when the first problem is its part's frame) and `--json`, and in
/// the pre-commit hook's refusal.
#[test]
fn damage_is_reported_by_the_models_tensor_names() {
    let dir = tempfile::tempdir().unwrap();
    let m = folder(dir.path());
    let snap = dir.path().join("m.wtxt");
    assert_eq!(run(&["snapshot", s(&m), "-o", s(&snap), "--part-size", "8K"]).code, 0);
    // The first data line of the embedding's first chunk, in whichever part holds it.
    let parts = dir.path().join("m.wtxt.parts");
    // `at` picks a byte of the embedding's first chunk: its `ch` line (0)
    // or its first data line (1).
    let damage = |line: usize| -> Vec<(PathBuf, Vec<u8>)> {
        let mut kept = Vec::new();
        for e in std::fs::read_dir(&parts).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            let Some(at) = text.find("begin name=model_embed_tokens_weight") else { continue };
            let ch = at + text[at..].find("\nch ").unwrap() + 1;
            let data = ch + text[ch..].find('\n').unwrap() + 1;
            // The last digit of `crc32c`, or the first base64 character.
            let i = if line == 0 { ch + text[ch..].find(" b64=on").unwrap() - 1 } else { data };
            kept.push((p.clone(), text.clone().into_bytes()));
            let mut bytes = text.into_bytes();
            bytes[i] = if bytes[i] == b'0' {
                b'1'
            } else if bytes[i] == b'A' {
                b'B'
            } else {
                b'0'
            };
            std::fs::write(&p, bytes).unwrap();
        }
        assert_eq!(kept.len(), 1);
        kept
    };
    let kept = damage(0);
    let r = run(&["verify", s(&snap)]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("does not match the head") && r.stderr.contains(", in model.embed_tokens.weight"),
        "{}",
        r.stderr
    );
    for (p, b) in kept {
        std::fs::write(p, b).unwrap();
    }
    damage(1);
    let r = run(&["verify", s(&snap)]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("(in the model: model.embed_tokens.weight)"), "{}", r.stderr);
    let r = run(&["verify", s(&snap), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let named = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["array"] == "model_embed_tokens_weight" && e["original"] == "model.embed_tokens.weight");
    assert!(named, "{}", r.stdout);
    // The hook says the same of the staged copy.
    let git = |args: &[&str]| crate::util::git_cmd(dir.path(), args, &[]);
    assert!(git(&["init", "-q"]).status.success());
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/pre-commit"),
        dir.path().join(".git/hooks/pre-commit"),
    )
    .unwrap();
    assert!(git(&["add", "m.wtxt", "m.wtxt.parts"]).status.success());
    let o = git(&["commit", "-qm", "damaged"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("model.embed_tokens.weight"), "{err}");
}

/// Issue 50.7: a (crafted, verified) snapshot whose `__hf` lists a shard
/// twice, or a file twice: `extract --hf` refuses, nothing written, never
/// a folder with a shard or tensor left out.
#[test]
fn extract_hf_refuses_a_path_listed_twice() {
    let dir = tempfile::tempdir().unwrap();
    let m = folder(dir.path());
    let snap = dir.path().join("m.wtxt");
    assert_eq!(run(&["snapshot", s(&m), "-o", s(&snap)]).code, 0);
    let loaded = wtxt::format::load(&std::fs::read(&snap).unwrap()[..], u64::MAX, &Default::default()).unwrap();
    for list in ["shards", "files"] {
        let mut arrays = loaded.arrays.clone();
        let at = arrays.iter().position(|a| a.name == "__hf").unwrap();
        let mut hf: serde_json::Value = serde_json::from_slice(arrays[at].bytes()).unwrap();
        let first = hf[list][0].clone();
        hf[list].as_array_mut().unwrap().push(first);
        arrays[at] = wtxt::convert::meta_array("__hf", &hf).unwrap();
        let crafted = dir.path().join(format!("twice-{list}.wtxt"));
        let opts = wtxt::format::WriteOptions::new(wtxt::format::syntax::Meta::new(0, None).unwrap(), 128);
        wtxt::store::write_wtxt(
            &arrays,
            &opts,
            &crafted,
            Default::default(),
            None,
            &wtxt::progress::Progress::hidden(),
        )
        .unwrap();
        assert_eq!(run(&["verify", s(&crafted)]).code, 0, "{list}: the snapshot itself verifies");
        let out = dir.path().join(format!("out-{list}"));
        let r = run(&["extract", s(&crafted), "--hf", s(&out)]);
        assert_eq!(r.code, 2, "{list}: {}", r.stderr);
        assert!(r.stderr.contains("listed twice"), "{list}: {}", r.stderr);
        assert!(!out.exists(), "{list}");
    }
}

/// Issue 50.8: a shard that shrinks while `snapshot DIR` has it mapped
/// (`save_pretrained` rewriting it) ends the command with one line naming
/// the shard and exit 2, nothing written, instead of a death by SIGBUS;
/// written whole or in parts, no temporary file stays behind (T5-12).
#[test]
fn a_shard_that_shrinks_while_mapped_is_reported_not_a_crash() {
    for parts in ["none", "16M"] {
        shrinks_while_mapped(parts);
    }
}

fn shrinks_while_mapped(parts: &str) {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("big");
    std::fs::create_dir(&m).unwrap();
    // Large enough that reading it takes a while after it is mapped.
    let big = tensor("model.embed_tokens.weight", Dtype::U8, &[256 << 20], 7);
    let st = m.join("model.safetensors");
    shard(&st, &[&big]);
    std::fs::write(m.join("config.json"), "{}").unwrap();
    let out = dir.path().join("big.wtxt");
    for attempt in 0..5 {
        let _ = std::fs::remove_file(&out);
        shard(&st, &[&big]);
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_wtxt"))
            // Four threads read the map: several fault at once, and the
            // first to fault must clean up before any of them exits.
            .args(["--threads", "4", "snapshot", s(&m), "-o", s(&out), "--part-size", parts])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Once the shard is mapped, cut it to its header.
        let maps = format!("/proc/{}/maps", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !std::fs::read_to_string(&maps).unwrap_or_default().contains(s(&st)) {
            assert!(std::time::Instant::now() < deadline, "the shard was never mapped");
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        std::fs::OpenOptions::new().write(true).open(&st).unwrap().set_len(4096).unwrap();
        let o = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        if o.status.success() {
            continue; // it had read the shard before the cut: try again
        }
        assert_eq!(o.status.code(), Some(2), "{parts}: attempt {attempt}: {:?} {stderr}", o.status);
        assert!(stderr.contains(s(&st)) && stderr.contains("changed while it was read"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!out.exists());
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 1, "{parts}: only the folder stays: {left:?}");
        return;
    }
    panic!("the snapshot read the shard before it was cut, five times");
}
