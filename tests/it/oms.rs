//! OpenSSF Model Signing: `model.sig` written beside snapshots by every
//! writer, `oms sign` refusing what does not verify, `verify --oms-pubkey`
//! and `oms verify` refusing any altered, added or removed part, keys of
//! every form openssl writes, and hostile signature files. Interoperability
//! with the reference `model_signing` tool is in python/tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{run, write_npz, wtxt, ArraySpec};

fn f32s(n: usize, seed: u32) -> Vec<u8> {
    (0..n as u32).flat_map(|i| ((i.wrapping_mul(2654435761) ^ seed) as f32 / 1e9).to_le_bytes()).collect()
}

/// Keys as openssl writes them: SEC1 with its EC PARAMETERS block, PKCS#8,
/// and the SPKI public key.
struct Keys {
    sec1: PathBuf,
    pkcs8: PathBuf,
    public: PathBuf,
}

fn openssl(args: &[&str]) {
    let o = Command::new("openssl").args(args).output().expect("openssl runs");
    assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

fn keys(dir: &Path, curve: &str) -> Keys {
    let k = Keys {
        sec1: dir.join(format!("{curve}.sec1.pem")),
        pkcs8: dir.join(format!("{curve}.pkcs8.pem")),
        public: dir.join(format!("{curve}.pub")),
    };
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    openssl(&["ecparam", "-name", curve, "-genkey", "-out", &s(&k.sec1)]);
    openssl(&["pkcs8", "-topk8", "-nocrypt", "-in", &s(&k.sec1), "-out", &s(&k.pkcs8)]);
    openssl(&["ec", "-in", &s(&k.sec1), "-pubout", "-out", &s(&k.public)]);
    k
}

/// A snapshot of about 1.3 MB of text in `dir/model/`, split in 256 KiB
/// parts, signed with `key`.
fn signed_split(dir: &Path, key: &Path) -> PathBuf {
    let arrays: Vec<ArraySpec> =
        vec![("emb", "f32", vec![1000, 240], f32s(240_000, 1)), ("w", "f32", vec![300, 100], f32s(30_000, 2))];
    let npz = write_npz(dir, "in", &arrays);
    std::fs::create_dir_all(dir.join("model")).unwrap();
    let head = dir.join("model/model.wtxt");
    let o = wtxt()
        .arg("snapshot")
        .arg(&npz)
        .arg("-o")
        .arg(&head)
        .args(["--ts", "2026-03-01T00:00:00Z", "--part-size", "256K", "--oms-key"])
        .arg(key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    head
}

fn p(x: &Path) -> &str {
    x.to_str().unwrap()
}

fn sig_of(head: &Path) -> PathBuf {
    head.parent().unwrap().join("model.sig")
}

#[test]
fn split_snapshot_signed_as_written_and_checked_both_ways() {
    let t = tempfile::tempdir().unwrap();
    let k = keys(t.path(), "prime256v1");
    let head = signed_split(t.path(), &k.sec1);
    let sig = sig_of(&head);
    assert!(sig.is_file());
    let folder = head.parent().unwrap();
    let r = run(&["verify", p(&head), "--oms-pubkey", p(&k.public)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("OMS signature valid"), "{}", r.stdout);
    let j = run(&["verify", p(&head), "--oms-pubkey", p(&k.public), "--json"]);
    assert!(j.stdout.contains(r#""oms":"valid""#), "{}", j.stdout);
    let r = run(&["oms", "verify", p(folder), "--signature", p(&sig), "--public-key", p(&k.public)]);
    assert_eq!(r.code, 0, "{}", r.stderr);

    // The same snapshot and key give the same signature, byte for byte.
    let first = std::fs::read(&sig).unwrap();
    let again = run(&["oms", "sign", p(&head), "--key", p(&k.pkcs8)]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(std::fs::read(&sig).unwrap(), first);

    // Another key's public half is refused.
    let other = keys(t.path(), "secp384r1");
    let r = run(&["verify", p(&head), "--oms-pubkey", p(&other.public), "--json"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains(r#""oms":"invalid""#), "{}", r.stdout);
}

#[test]
fn altered_added_or_removed_parts_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let k = keys(t.path(), "prime256v1");
    let head = signed_split(t.path(), &k.pkcs8);
    let folder = head.parent().unwrap().to_path_buf();
    let sig = sig_of(&head);
    let parts = folder.join("model.wtxt.parts");
    let check = |what: &str, expect: &str| {
        let r = run(&["oms", "verify", p(&folder), "--signature", p(&sig), "--public-key", p(&k.public)]);
        assert_eq!(r.code, 1, "{what}: {}", r.stderr);
        assert!(r.stderr.contains(expect), "{what}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{what}: one line: {}", r.stderr);
        let v = run(&["verify", p(&head), "--oms-pubkey", p(&k.public)]);
        assert_eq!(v.code, 1, "{what}: verify: {}", v.stderr);
    };
    let part2 = parts.join("000002.wtxtpart");
    let kept = std::fs::read(&part2).unwrap();

    let mut altered = kept.clone();
    let at = altered.len() / 2;
    altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
    std::fs::write(&part2, &altered).unwrap();
    check("altered", "hash mismatch for model.wtxt.parts/000002.wtxtpart");
    std::fs::write(&part2, &kept).unwrap();

    std::fs::write(parts.join("000099.wtxtpart"), b"extra").unwrap();
    let r = run(&["oms", "verify", p(&folder), "--signature", p(&sig), "--public-key", p(&k.public)]);
    assert_eq!(r.code, 1, "added: {}", r.stderr);
    assert!(r.stderr.contains("extra files: model.wtxt.parts/000099.wtxtpart"), "{}", r.stderr);
    std::fs::remove_file(parts.join("000099.wtxtpart")).unwrap();

    std::fs::remove_file(&part2).unwrap();
    check("removed", "missing files: model.wtxt.parts/000002.wtxtpart");
    std::fs::write(&part2, &kept).unwrap();
    let r = run(&["oms", "verify", p(&folder), "--signature", p(&sig), "--public-key", p(&k.public)]);
    assert_eq!(r.code, 0, "restored: {}", r.stderr);
}

#[test]
fn nothing_signs_what_does_not_verify() {
    let t = tempfile::tempdir().unwrap();
    let k = keys(t.path(), "prime256v1");
    let head = signed_split(t.path(), &k.sec1);
    std::fs::remove_file(sig_of(&head)).unwrap();
    let part = head.parent().unwrap().join("model.wtxt.parts/000001.wtxtpart");
    let mut b = std::fs::read(&part).unwrap();
    let at = b.len() / 2;
    b[at] = if b[at] == b'A' { b'B' } else { b'A' };
    std::fs::write(&part, &b).unwrap();
    let r = run(&["oms", "sign", p(&head), "--key", p(&k.sec1)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("000001.wtxtpart"), "{}", r.stderr);
    assert!(!sig_of(&head).exists(), "no signature for a snapshot that fails");
    let r = run(&["verify", p(&head), "--oms-pubkey", p(&k.public), "--json"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains(r#""oms":"absent""#), "{}", r.stdout);
}

#[test]
fn every_writer_signs_single_files_too() {
    let t = tempfile::tempdir().unwrap();
    let k = keys(t.path(), "prime256v1");
    let head = signed_split(t.path(), &k.sec1);
    let key = p(&k.pkcs8);
    let pubkey = p(&k.public);
    for (cmd, out) in [("join", "joined/one.wtxt"), ("split", "split/again.wtxt")] {
        let out = t.path().join(out);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let mut args = vec![cmd, p(&head), "-o", p(&out), "--oms-key", key];
        if cmd == "split" {
            args.extend(["--part-size", "300K"]);
        }
        let r = run(&args);
        assert_eq!(r.code, 0, "{cmd}: {}", r.stderr);
        let r = run(&["verify", p(&out), "--oms-pubkey", pubkey]);
        assert_eq!(r.code, 0, "{cmd}: {}", r.stderr);
        assert!(r.stdout.contains("OMS signature valid"), "{cmd}: {}", r.stdout);
        let r =
            run(&["oms", "verify", p(out.parent().unwrap()), "--signature", p(&sig_of(&out)), "--public-key", pubkey]);
        assert_eq!(r.code, 0, "{cmd}: {}", r.stderr);
    }
    // A signature covers the snapshot's whole folder (issue 50.1): a file
    // that appears beside it later is unsigned, and both checks say so;
    // signed again, it is listed.
    let single = t.path().join("joined/one.wtxt");
    std::fs::write(t.path().join("joined/notes.txt"), b"later").unwrap();
    let r = run(&["verify", p(&single), "--oms-pubkey", pubkey]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("unsigned files beside the snapshot: notes.txt"), "{}", r.stderr);
    let sig = sig_of(&single);
    let r = run(&["oms", "verify", p(single.parent().unwrap()), "--signature", p(&sig), "--public-key", pubkey]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(run(&["oms", "sign", p(&single), "--key", key]).code, 0);
    let r = run(&["verify", p(&single), "--oms-pubkey", pubkey]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // --oms-key signs WTXT output only.
    let r = run(&["convert", p(&single), "-o", p(&t.path().join("x.npz")), "--to", "npz", "--oms-key", key]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn keys_of_every_form_and_no_other() {
    let t = tempfile::tempdir().unwrap();
    let key = t.path().join("k.pem");
    let r = run(&["keygen", "-o", p(&key), "--type", "p256"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let public = t.path().join("k.pem.pub");
    assert!(std::fs::read_to_string(&key).unwrap().starts_with("-----BEGIN PRIVATE KEY-----"));
    let head = signed_split(t.path(), &key);
    let r = run(&["verify", p(&head), "--oms-pubkey", p(&public)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for curve in ["secp384r1", "secp521r1"] {
        let k = keys(t.path(), curve);
        let r = run(&["oms", "sign", p(&head), "--key", p(&k.sec1)]);
        assert_eq!(r.code, 0, "{curve}: {}", r.stderr);
        let r = run(&["verify", p(&head), "--oms-pubkey", p(&k.public)]);
        assert_eq!(r.code, 0, "{curve}: {}", r.stderr);
    }
    // Another curve, an Ed25519 key: refused at once, naming the file.
    let k1 = t.path().join("k1.pem");
    openssl(&["ecparam", "-name", "secp256k1", "-genkey", "-noout", "-out", p(&k1)]);
    let ed = t.path().join("ed.pem");
    assert_eq!(run(&["keygen", "-o", p(&ed)]).code, 0);
    for bad in [&k1, &ed] {
        let r = run(&["oms", "sign", p(&head), "--key", p(bad)]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains(p(bad)) && r.stderr.contains("P-256"), "{}", r.stderr);
    }
    let ed_public = t.path().join("ed.pem.pub");
    let r = run(&["verify", p(&head), "--oms-pubkey", p(&ed_public)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn hostile_signature_files() {
    let t = tempfile::tempdir().unwrap();
    let k = keys(t.path(), "prime256v1");
    let head = signed_split(t.path(), &k.sec1);
    let folder = head.parent().unwrap();
    let good = std::fs::read_to_string(sig_of(&head)).unwrap();
    let payload_of = |bundle: &str| {
        use base64::Engine;
        let v: serde_json::Value = serde_json::from_str(bundle).unwrap();
        let b = v["dsseEnvelope"]["payload"].as_str().unwrap();
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).unwrap()).unwrap()
    };
    let with_payload = |payload: &str| {
        use base64::Engine;
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["dsseEnvelope"]["payload"] = base64::engine::general_purpose::STANDARD.encode(payload).into();
        v.to_string()
    };
    let outside = payload_of(&good).replacen("\"name\": \"model.wtxt\"", "\"name\": \"../model.wtxt\"", 1);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not JSON", b"model signature".to_vec(), "not a Sigstore bundle"),
        ("media type", good.replace("bundle.v0.3+json", "bundle.v9+json").into_bytes(), "media type"),
        ("payload type", good.replace("application/vnd.in-toto+json", "application/json").into_bytes(), "payload type"),
        ("payload changed", with_payload(&outside).into_bytes(), "does not verify"),
        ("deep", "[".repeat(1 << 20).into_bytes(), "not a Sigstore bundle"),
        ("huge", vec![b' '; 9 << 20], "larger than"),
    ];
    let sig = t.path().join("hostile.sig");
    for (what, bytes, expect) in cases {
        std::fs::write(&sig, &bytes).unwrap();
        let r = run(&["oms", "verify", p(folder), "--signature", p(&sig), "--public-key", p(&k.public)]);
        assert!(r.code == 1 || r.code == 2, "{what}: {}", r.stderr);
        assert!(r.stderr.contains(expect), "{what}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{what}: {}", r.stderr);
        let v = run(&["verify", p(&head), "--oms-pubkey", p(&k.public), "--oms-sig", p(&sig)]);
        assert!(v.code == 1 || v.code == 2, "{what}: {}", v.stderr);
    }
    // A statement naming a file outside the folder, properly signed, is refused too.
    let key = wtxt::crypto::EcSecretKey::from_file(&k.sec1).unwrap();
    let m = wtxt::oms::Manifest {
        model_name: "model".into(),
        hash_type: wtxt::oms::HashType::Sha256,
        allow_symlinks: false,
        ignore_paths: vec![],
        resources: vec![wtxt::oms::Resource { name: "../in.npz".into(), digest: [0; 32] }],
    };
    std::fs::write(&sig, wtxt::oms::sign_manifest(&m, &key)).unwrap();
    let r = run(&["oms", "verify", p(folder), "--signature", p(&sig), "--public-key", p(&k.public)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("not a path inside the folder"), "{}", r.stderr);
}

#[test]
fn convert_merge_recover_delta_apply_and_finalize_sign_what_they_write() {
    let t = tempfile::tempdir().unwrap();
    let k = keys(t.path(), "prime256v1");
    let g0 = signed_split(t.path(), &k.sec1);
    let npz = t.path().join("in.npz");
    let g1 = t.path().join("g1.wtxt");
    let (key, public) = (p(&k.pkcs8), p(&k.public));
    let ok = |args: &[&str]| {
        let r = run(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    };
    ok(&["snapshot", p(&npz), "-o", p(&g1), "--prev", p(&g0), "--ts", "2026-03-02T00:00:00Z"]);
    let delta = t.path().join("d.wtxtdelta");
    ok(&["delta", "create", p(&g0), p(&g1), "-o", p(&delta)]);
    let streaming = t.path().join("s.wtxt");
    let wsum = t.path().join("s.wsum");
    ok(&["snapshot", p(&npz), "-o", p(&streaming), "--streaming", "--wsum", p(&wsum), "--ts", "2026-03-01T00:00:00Z"]);
    let out = |name: &str| {
        let d = t.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d.join("model.wtxt")
    };
    let written = [
        ("convert", out("convert")),
        ("merge", out("merge")),
        ("recover", out("recover")),
        ("delta", out("delta")),
        ("finalize", out("finalize")),
    ];
    for (cmd, o) in &written {
        let o = p(o);
        let wsum2 = t.path().join("s2.wsum");
        let args: Vec<&str> = match *cmd {
            "convert" => vec!["convert", p(&g1), "-o", o, "--to", "wtxt"],
            "merge" => vec!["merge", p(&g0), p(&g0), p(&g1), "-o", o],
            "recover" => vec!["recover", p(&g1), "-o", o],
            "delta" => vec!["delta", "apply", p(&g0), p(&delta), "-o", o],
            _ => vec!["finalize", p(&streaming), "-o", p(&wsum2), "--rewrite", o],
        };
        let mut args = args;
        args.extend(["--part-size", "256K", "--oms-key", key]);
        ok(&args);
        let r = run(&["verify", o, "--oms-pubkey", public]);
        assert_eq!(r.code, 0, "{cmd}: {}", r.stderr);
        assert!(r.stdout.contains("OMS signature valid"), "{cmd}: {}", r.stdout);
    }
    // finalize without --rewrite writes no snapshot to sign.
    let r = run(&["finalize", p(&streaming), "-o", p(&t.path().join("s3.wsum")), "--oms-key", key]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

/// `model.sig` in a snapshot's folder is read only as a regular file: a
/// link there (the folder may be a cloned repository's) is refused, while
/// a path the user names with `--oms-sig` is theirs to point anywhere.
#[test]
fn a_linked_model_sig_is_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let k = keys(t.path(), "prime256v1");
    let head = signed_split(t.path(), &k.sec1);
    let sig = sig_of(&head);
    let elsewhere = t.path().join("real.sig");
    std::fs::rename(&sig, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &sig).unwrap();
    let r = run(&["verify", p(&head), "--oms-pubkey", p(&k.public)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
    let r = run(&["verify", p(&head), "--oms-pubkey", p(&k.public), "--oms-sig", p(&elsewhere)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// Issue 50 (nits): a file name with a bidirectional control is shown
/// escaped (it could pose as another name), a listed file below a linked
/// folder is never read through the link (`--ignore-unsigned-files` too),
/// and `snapshot LINK_TO_DIR` says what it is.
#[test]
fn names_are_shown_escaped_and_linked_folders_are_not_followed() {
    let t = tempfile::tempdir().unwrap();
    let k = keys(t.path(), "prime256v1");
    let dir = t.path().join("model");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/w.bin"), b"weights").unwrap();
    let sig = t.path().join("model.sig");
    let r = run(&["oms", "sign", p(&dir), "--key", p(&k.pkcs8), "--signature", p(&sig)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::write(dir.join("evil\u{202e}txt.py"), b"x").unwrap();
    let r = run(&["oms", "verify", p(&dir), "--signature", p(&sig), "--public-key", p(&k.public)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("evil\\u{202e}txt.py") && !r.stderr.contains('\u{202e}'), "{}", r.stderr);
    std::fs::remove_file(dir.join("evil\u{202e}txt.py")).unwrap();
    // `sub` replaced by a link to a folder holding the same file.
    let elsewhere = t.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("w.bin"), b"weights").unwrap();
    std::fs::remove_dir_all(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join("sub")).unwrap();
    for extra in [&[][..], &["--ignore-unsigned-files"][..]] {
        let mut args = vec!["oms", "verify", p(&dir), "--signature", p(&sig), "--public-key", p(&k.public)];
        args.extend(extra);
        let r = run(&args);
        assert_ne!(r.code, 0, "{extra:?}: {}", r.stdout);
        assert!(r.stderr.contains("symbolic link"), "{extra:?}: {}", r.stderr);
    }
    let r = run(&["snapshot", p(&dir.join("sub")), "-o", p(&t.path().join("x.wtxt"))]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("symbolic link to a folder"), "{}", r.stderr);
}
