//! age encryption against the real `age` tool (Debian package `age`,
//! installed by .ci/run): files we encrypt decrypt with `age -d`, files
//! `age` encrypts decrypt and verify with `wtxt ... -i`.

use std::path::Path;
use std::process::Command;

use crate::util::{fixture, read, wtxt};

fn tool(name: &str) -> Command {
    assert!(
        Command::new(name).arg("--version").output().is_ok(),
        "the `{name}` binary is needed (Debian package `age`; .ci/run installs it)"
    );
    Command::new(name)
}

fn keygen(dir: &Path) -> (std::path::PathBuf, String) {
    let key = dir.join("key.txt");
    let o = tool("age-keygen").arg("-o").arg(&key).output().unwrap();
    assert!(o.status.success());
    let r = tool("age-keygen").arg("-y").arg(&key).output().unwrap();
    (key, String::from_utf8(r.stdout).unwrap().trim().to_string())
}

#[test]
fn wtxt_encrypts_age_decrypts_x25519_and_ssh() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, recipient) = keygen(d);
    let ssh_pub = std::fs::read_to_string(fixture("keys/sign_openssh.pub")).unwrap();
    let enc = d.join("m.wtxt.age");
    let r = wtxt()
        .args(["encrypt", "expected/signed_pkcs8.wtxt", "-o"])
        .arg(&enc)
        .args(["-r", &recipient, "-r", ssh_pub.trim()])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let armored = std::fs::read(&enc).unwrap();
    assert!(armored.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----\n"));
    assert!(armored.iter().all(|&b| b == b'\n' || (0x20..0x7f).contains(&b)), "pure ASCII");
    for identity in [key.clone(), fixture("keys/sign_openssh")] {
        let o = tool("age").arg("-d").arg("-i").arg(&identity).arg(&enc).output().unwrap();
        assert!(o.status.success(), "age -d -i {}: {}", identity.display(), String::from_utf8_lossy(&o.stderr));
        assert!(o.stdout == read("expected/signed_pkcs8.wtxt"));
    }
}

#[test]
fn age_encrypts_wtxt_reads_verifies_and_extracts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, recipient) = keygen(d);
    let enc = d.join("h.age");
    let o = tool("age").args(["-a", "-r", &recipient, "-o"]).arg(&enc).arg(fixture("bind/hmac.wtxt")).output().unwrap();
    assert!(o.status.success());
    let k = key.to_str().unwrap();
    let r = wtxt().arg("verify").arg(&enc).args(["-i", k, "--hmac-key", "keys/hmac.hex"]).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let r = wtxt().arg("inspect").arg(&enc).args(["-i", k, "--json"]).output().unwrap();
    assert!(r.status.success());
    let npz = d.join("x.npz");
    let r = wtxt().arg("extract").arg(&enc).args(["-i", k, "-o"]).arg(&npz).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let plain = d.join("p.wtxt");
    let r = wtxt().arg("decrypt").arg(&enc).args(["-i", k, "-o"]).arg(&plain).output().unwrap();
    assert!(r.status.success());
    assert!(std::fs::read(&plain).unwrap() == read("bind/hmac.wtxt"));
    // Binary (unarmored) age files are read too.
    let bin = d.join("h.bin.age");
    assert!(tool("age")
        .args(["-r", &recipient, "-o"])
        .arg(&bin)
        .arg(fixture("bind/hmac.wtxt"))
        .status()
        .unwrap()
        .success());
    assert!(wtxt().arg("verify").arg(&bin).args(["-i", k]).output().unwrap().status.success());

    // Without an identity: unusable input (2); with the wrong one: a failed check (1).
    let r = wtxt().arg("verify").arg(&enc).output().unwrap();
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("age-encrypted: give -i"));
    let (other, _) = keygen(&{
        let o = d.join("o");
        std::fs::create_dir(&o).unwrap();
        o
    });
    let r = wtxt().arg("verify").arg(&enc).arg("-i").arg(&other).output().unwrap();
    assert_eq!(r.status.code(), Some(1), "{}", String::from_utf8_lossy(&r.stderr));
}

#[test]
fn deltas_apply_across_encrypted_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (key, recipient) = keygen(d);
    let k = key.to_str().unwrap();
    for (src, dst) in [("expected/delta_base.wtxt", "b.age"), ("expected/delta.wtxtdelta", "d.age")] {
        let r = wtxt().args(["encrypt", src, "-r", &recipient, "-o"]).arg(d.join(dst)).output().unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    }
    let out = d.join("t.wtxt");
    let r = wtxt()
        .args(["delta", "apply"])
        .arg(d.join("b.age"))
        .arg(d.join("d.age"))
        .args(["-i", k, "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(std::fs::read(&out).unwrap() == read("expected/delta_target.wtxt"));
}

#[test]
fn passphrase_round_trip_and_damage() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let enc = d.join("p.age");
    let r = wtxt()
        .args(["encrypt", "expected/defaults.wtxt", "-p", "-o"])
        .arg(&enc)
        .env("WTXT_PASSPHRASE", "correct horse")
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let r = wtxt().arg("verify").arg(&enc).arg("-p").env("WTXT_PASSPHRASE", "correct horse").output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let r = wtxt().arg("verify").arg(&enc).arg("-p").env("WTXT_PASSPHRASE", "wrong").output().unwrap();
    assert_eq!(r.status.code(), Some(1));
    // Flip one character inside the armored payload: decryption must fail, nothing written.
    let mut bytes = std::fs::read(&enc).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] = if bytes[mid] == b'A' { b'B' } else { b'A' };
    std::fs::write(&enc, &bytes).unwrap();
    let out = d.join("out.wtxt");
    let r = wtxt()
        .arg("decrypt")
        .arg(&enc)
        .args(["-p", "-o"])
        .arg(&out)
        .env("WTXT_PASSPHRASE", "correct horse")
        .output()
        .unwrap();
    assert_ne!(r.status.code(), Some(0));
    assert!(!out.exists());
    let r = wtxt()
        .args(["encrypt", "cases.json", "-p", "-o"])
        .arg(d.join("x"))
        .env("WTXT_PASSPHRASE", "x")
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2), "only WTXT text formats are encrypted");
}
