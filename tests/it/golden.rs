//! Every case of `fixtures/wtxt/cases.json`, written by an independent
//! implementation: our output must equal the expected files byte for byte
//! (with an HMAC key, once the keyed tag every wtxt writer adds is taken
//! out; the tagged files are vectors of their own, `fixtures/wtxt/bind`),
//! and the expected files must verify.

use crate::util::{fixture, fixtures, wtxt};

fn cases() -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(fixture("cases.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["cases"].as_array().unwrap().clone()
}

fn run_case(case: &serde_json::Value) {
    let name = case["name"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> = case["command"].as_array().unwrap()[1..]
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap();
            if a.starts_with("OUT.") {
                dir.path().join(a).to_string_lossy().into_owned()
            } else {
                a.to_string()
            }
        })
        .collect();
    let mut cmd = wtxt();
    for (k, v) in case["env"].as_object().unwrap() {
        cmd.env(k, v.as_str().unwrap());
    }
    let out = cmd.args(&args).output().unwrap();
    assert!(out.status.success(), "case {name}: {}", String::from_utf8_lossy(&out.stderr));
    let keyed = args.iter().any(|a| a == "--hmac-key");
    for (produced, expected) in case["outputs"].as_object().unwrap() {
        let got = std::fs::read(dir.path().join(produced)).unwrap();
        let want = std::fs::read(fixtures().join(expected.as_str().unwrap())).unwrap();
        if keyed {
            let bound = fixture(&format!("bind/{name}.wtxt"));
            assert!(got == std::fs::read(&bound).unwrap(), "case {name}: {produced} differs from {bound:?}");
            assert!(without_tag(&got) == want, "case {name}: {produced} less its tag differs from {expected}");
            check_tag(&bound);
        } else {
            assert!(got == want, "case {name}: {produced} differs from {expected}");
        }
    }
    let mut verify: Vec<&str> = case["verify"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    if keyed {
        // The independent writer binds nothing: its files verify as such.
        let o = wtxt().args(&verify[1..]).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "case {name}: an unbound file passed under its key");
        assert!(String::from_utf8_lossy(&o.stderr).contains("--allow-unbound"), "case {name}");
        verify.push("--allow-unbound");
    }
    if !verify.is_empty() {
        let o = wtxt().args(&verify[1..]).output().unwrap();
        assert!(o.status.success(), "case {name}: verify failed: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// `text` with its keyed tag taken out of the `audit` line (the line
/// itself when the tag was its only pair).
fn without_tag(text: &[u8]) -> Vec<u8> {
    let s = std::str::from_utf8(text).unwrap();
    let at = s.rfind(" wtxt.bind=").expect("a keyed tag");
    let line_start = s[..at].rfind('\n').unwrap() + 1;
    let end = at + " wtxt.bind=".len() + 64;
    if &s[line_start..at] == "audit" {
        [&s[..line_start], &s[end + 1..]].concat().into_bytes()
    } else {
        [&s[..at], &s[end..]].concat().into_bytes()
    }
}

/// The keyed tag and salts of `file` recomputed by `tests/py/check_tree.py`.
fn check_tag(file: &std::path::Path) {
    let c = std::process::Command::new("python3")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/check_tree.py"))
        .arg(file)
        .args(["--bind-only", "--hmac-key", fixture("keys/hmac.hex").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(c.status.success(), "{file:?}: the independent check: {}", String::from_utf8_lossy(&c.stdout));
}

#[test]
fn every_case_reproduces_byte_for_byte() {
    let mut ran = 0;
    for case in cases() {
        run_case(&case);
        ran += 1;
    }
    assert_eq!(ran, 19, "every case ran");
}

#[test]
fn the_extended_delta_applies_to_the_expected_target() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("OUT.wtxt");
    let o = wtxt()
        .args(["delta", "apply", "expected/delta_base.wtxt", "expected/delta.wtxtdelta", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(fixture("expected/delta_target.wtxt")).unwrap());
}

#[test]
fn finalize_rewrites_streaming_into_the_expected_pair() {
    let dir = tempfile::tempdir().unwrap();
    let (wsum, plain) = (dir.path().join("OUT.wsum"), dir.path().join("OUT.wtxt"));
    let o = wtxt()
        .args(["finalize", "expected/streaming.wtxt", "-o"])
        .arg(&wsum)
        .args(["--sign-key", "keys/sign.pem", "--rewrite"])
        .arg(&plain)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&wsum).unwrap(), std::fs::read(fixture("expected/streaming.wsum")).unwrap());
    assert_eq!(std::fs::read(&plain).unwrap(), std::fs::read(fixture("expected/streaming.finalized.wtxt")).unwrap());
}

/// Re-emits a verified file with the values it carries.
fn reemit(bytes: &[u8]) -> Vec<u8> {
    let loaded = wtxt::format::load(bytes, bytes.len() as u64, &Default::default()).unwrap();
    wtxt::format::canonical_bytes(&loaded).unwrap()
}

#[test]
fn every_expected_file_reemits_identically() {
    // "Canonical" means parse then write gives the same bytes (a signature
    // needs the key, so the sign line is set aside; it covers the header).
    let mut checked = 0;
    for entry in std::fs::read_dir(fixture("expected")).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".wtxt") || name == "streaming.wtxt" {
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        let unsigned = wtxt::format::without_sign_line(&bytes);
        assert!(reemit(&bytes) == *unsigned, "{name}: re-emitting changed the bytes");
        checked += 1;
    }
    assert_eq!(checked, 17, "checked {checked} files");
}

/// The tree digest form's vectors (`fixtures/wtxt/tree`, FORMAT.md section
/// 19): written again byte for byte, accepted by `wtxt verify` (HMAC,
/// signature and chain), and recomputed from the text alone by
/// `tests/py/check_tree.py` (Python's hashlib, hmac and base64).
#[test]
fn tree_form_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let out = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let ts = ["--ts", "2026-01-01T00:00:00Z"];
    let both = ["inputs/model.npz", "inputs/ext.safetensors"];
    let hmac = ["--hmac-key", "keys/hmac.hex"];
    let sign = ["--sign-key", "keys/sign.pem"];
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("single", [&both[..], &["--part-size", "none"], &ts].concat()),
        ("split", [&both[..], &["--part-size", "48K"], &ts].concat()),
        ("hmac", [&["inputs/model.npz"][..], &hmac, &["--part-size", "none"], &ts].concat()),
        (
            "signed",
            [&["inputs/model.npz"][..], &hmac, &sign, &["--part-size", "none", "--build", "golden"], &ts].concat(),
        ),
        ("chain0", [&["inputs/single.npy"][..], &sign, &["--part-size", "none"], &ts].concat()),
        (
            "chain1",
            [
                &["inputs/single.npy", "--prev", "tree/chain0.wtxt"][..],
                &sign,
                &["--part-size", "none"],
                &["--ts", "2026-01-02T00:00:00Z"],
            ]
            .concat(),
        ),
    ];
    for (name, args) in &cases {
        let o = out(&format!("{name}.wtxt"));
        let r = wtxt().arg("snapshot").args(args).args(["-o", &o, "--digest", "tree"]).output().unwrap();
        assert!(r.status.success(), "{name}: {}", String::from_utf8_lossy(&r.stderr));
        let want = fixture(&format!("tree/{name}.wtxt"));
        assert!(std::fs::read(&o).unwrap() == std::fs::read(&want).unwrap(), "{name}: not the golden bytes");
        let parts = fixture(&format!("tree/{name}.wtxt.parts"));
        if parts.is_dir() {
            for e in std::fs::read_dir(&parts).unwrap() {
                let p = e.unwrap().path();
                let got = std::fs::read(format!("{o}.parts/{}", p.file_name().unwrap().to_str().unwrap())).unwrap();
                assert!(got == std::fs::read(&p).unwrap(), "{name}: part {} differs", p.display());
            }
        }
        let mut check = std::process::Command::new("python3");
        check.arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/check_tree.py")).arg(&want);
        if args.contains(&"--hmac-key") {
            check.args(["--hmac-key", fixture("keys/hmac.hex").to_str().unwrap()]);
        }
        if args.contains(&"--sign-key") {
            check.args(["--pubkey", fixture("keys/sign.pem.pub").to_str().unwrap()]);
        }
        let c = check.output().unwrap();
        assert!(c.status.success(), "{name}: the independent check: {}", String::from_utf8_lossy(&c.stdout));
        let mut v = vec!["verify", want.to_str().unwrap()];
        if args.contains(&"--hmac-key") {
            v.extend(["--hmac-key", "keys/hmac.hex"]);
        }
        if args.contains(&"--sign-key") {
            v.extend(["--trusted-keys", "keys/trusted_keys", "--require-signature"]);
        }
        if *name == "chain1" {
            v.extend(["--prev", "tree/chain0.wtxt"]);
        }
        let r = wtxt().args(&v).output().unwrap();
        assert!(r.status.success(), "{name}: {}", String::from_utf8_lossy(&r.stderr));
    }
}
