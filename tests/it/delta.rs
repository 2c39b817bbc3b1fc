//! DELTA v2: round trips byte for byte, only changed chunks carried, and
//! every failure leaves the base untouched and no output behind.

use std::path::Path;

use crate::util::{fixture, read, snapshot, wtxt};

fn f64_rows(rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    (0..rows * cols).flat_map(|i| ((i as u64 * 2654435761 + seed) as f64).to_le_bytes()).collect()
}

/// `base` (4096 x 64 f64 rows) with the first value of each of `rows` set to 42.
fn rows_set(base: &[u8], rows: &[usize]) -> Vec<u8> {
    let mut target = base.to_vec();
    for row in rows {
        target[row * 512..row * 512 + 8].copy_from_slice(&42f64.to_le_bytes());
    }
    target
}

fn create(base: &Path, target: &Path, out: &Path) -> std::process::Output {
    wtxt().args(["delta", "create"]).arg(base).arg(target).arg("-o").arg(out).output().unwrap()
}

fn apply(base: &Path, delta: &Path, out: &Path) -> std::process::Output {
    wtxt().args(["delta", "apply"]).arg(base).arg(delta).arg("-o").arg(out).output().unwrap()
}

#[test]
fn three_changed_rows_of_4096x64_carry_at_most_three_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base_bytes = f64_rows(4096, 64, 1);
    let target_bytes = rows_set(&base_bytes, &[5, 1000, 3000]);
    let base = snapshot(d, "base", &[("R", "f64", vec![4096, 64], base_bytes)], &["--gen", "1"]);
    let prev = base.to_str().unwrap().to_string();
    let target = snapshot(d, "target", &[("R", "f64", vec![4096, 64], target_bytes)], &["--prev", &prev]);
    let delta = d.join("d.wtxtdelta");
    assert!(create(&base, &target, &delta).status.success());
    let text = std::fs::read_to_string(&delta).unwrap();
    let chunks = text.lines().filter(|l| l.starts_with("ch ")).count();
    assert!((1..=3).contains(&chunks), "{chunks} chunks");
    assert!(std::fs::metadata(&delta).unwrap().len() < std::fs::metadata(&target).unwrap().len() / 8);
    let out = d.join("out.wtxt");
    let r = apply(&base, &delta, &out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&target).unwrap());
}

#[test]
fn added_removed_reshaped_and_retyped_arrays_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let v: Vec<u8> = (0..40000u32).flat_map(|i| i.to_le_bytes()).collect();
    let mut v2 = v.clone();
    v2[100] ^= 1;
    let base = snapshot(
        d,
        "b",
        &[
            ("a", "u8", vec![4, 6], vec![1; 24]),
            ("gone", "i32", vec![2], vec![0; 8]),
            ("m", "f64", vec![300, 8], f64_rows(300, 8, 3)),
            ("retype", "i32", vec![4], vec![9; 16]),
            ("same", "u16", vec![3], vec![5; 6]),
            ("v", "u32", vec![40000], v.clone()),
        ],
        &["--gen", "7", "--rows-per-chunk", "16"],
    );
    let prev = base.to_str().unwrap().to_string();
    let target = snapshot(
        d,
        "t",
        &[
            ("a", "u8", vec![6, 4], vec![1; 24]),
            ("m", "f64", vec![300, 8], f64_rows(300, 8, 3)),
            ("new", "bool", vec![3], vec![1, 0, 1]),
            ("retype", "u32", vec![4], vec![9; 16]),
            ("same", "u16", vec![3], vec![5; 6]),
            ("v", "u32", vec![40000], v2),
        ],
        &["--prev", &prev, "--rows-per-chunk", "16", "--build", "next", "--audit", "step=8"],
    );
    let delta = d.join("d.wtxtdelta");
    assert!(create(&base, &target, &delta).status.success());
    let text = std::fs::read_to_string(&delta).unwrap();
    assert!(text.contains("delarr name=gone\n"));
    assert!(text.contains("\naudit step=8\nenddelta\n"));
    let out = d.join("o.wtxt");
    let r = apply(&base, &delta, &out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&target).unwrap());
    // Identity: a file against itself gives an empty delta that rebuilds it.
    let same = d.join("same.wtxtdelta");
    assert!(create(&target, &target, &same).status.success());
    assert_eq!(std::fs::read_to_string(&same).unwrap().lines().filter(|l| l.starts_with("arr ")).count(), 0);
    assert!(apply(&target, &same, &out).status.success());
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&target).unwrap());
}

#[test]
fn wrong_base_truncated_or_tampered_delta_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = fixture("expected/delta_base.wtxt");
    let base_before = std::fs::read(&base).unwrap();
    let delta = read("expected/delta.wtxtdelta");
    let text = String::from_utf8(delta.clone()).unwrap();
    let mut tampered = text.clone().into_bytes();
    let first_b64 = text.find("lines=144\n").unwrap() + "lines=144\n".len();
    tampered[first_b64 + 5] = if tampered[first_b64 + 5] == b'A' { b'B' } else { b'A' };
    // Re-fix the parity nibble so only CRC/SHA can catch it.
    let line_end = first_b64 + text[first_b64..].find('\n').unwrap();
    let p = wtxt::format::parity(&tampered[first_b64..line_end - 2]);
    tampered[line_end - 1] = wtxt::format::hex_digit(p);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", delta[..delta.len() / 2].to_vec()),
        ("tampered", tampered),
        ("no enddelta", delta[..delta.len() - "enddelta\n".len()].to_vec()),
        ("wrong target", text.replacen("target_sha256_all=4", "target_sha256_all=5", 1).into_bytes()),
    ];
    for (what, bytes) in cases {
        let dp = d.join("d.wtxtdelta");
        std::fs::write(&dp, &bytes).unwrap();
        let out = d.join("out.wtxt");
        let r = apply(&base, &dp, &out);
        assert_eq!(r.status.code(), Some(1), "{what}: {}", String::from_utf8_lossy(&r.stderr));
        assert_eq!(String::from_utf8_lossy(&r.stderr).lines().count(), 1, "{what}");
        assert!(!out.exists(), "{what}: no output");
        assert_eq!(std::fs::read_dir(d).unwrap().count(), 1, "{what}: no temp file left");
    }
    let dp = d.join("d.wtxtdelta");
    std::fs::write(&dp, &delta).unwrap();
    let r = apply(&fixture("expected/defaults.wtxt"), &dp, &d.join("o.wtxt"));
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("another base"));
    assert_eq!(std::fs::read(&base).unwrap(), base_before, "the base is never written");
    let r = wtxt()
        .args(["delta", "apply", "expected/delta_base.wtxt", "expected/delta.wtxtdelta", "--gen", "3", "-o"])
        .arg(d.join("o.wtxt"))
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2), "minimal-form options on an extended delta");
}

/// A minimal-form delta carries no header: the rebuilt target takes the
/// `meta` fields `snapshot` takes (the base's where none is given), and an
/// extended delta, which carries its target's header, refuses every one.
#[test]
fn the_minimal_form_takes_the_meta_fields_snapshot_takes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.wtxt");
    let r = wtxt()
        .args(["delta", "apply", "expected/delta_base.wtxt", "expected/delta.minimal.wtxtdelta", "-o"])
        .arg(&out)
        .args(["--ts", "2026-02-03T04:05:06Z", "--host", "gpu0", "--schema", "weights/v2"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
    let text = String::from_utf8(std::fs::read(&out).unwrap()).unwrap();
    let meta = text.lines().find(|l| l.starts_with("meta ")).unwrap();
    for field in ["ts=2026-02-03T04:05:06Z", "host=gpu0", "schema=weights/v2"] {
        assert!(meta.contains(field), "{meta}");
    }
    let r = wtxt().arg("verify").arg(&out).output().unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
    let r = wtxt()
        .args(["delta", "apply", "expected/delta_base.wtxt", "expected/delta.wtxtdelta", "--host", "gpu0", "-o"])
        .arg(dir.path().join("x.wtxt"))
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2), "meta fields on an extended delta");
}

/// `delta create` verifies its base as well as its target: a delta names
/// its base by `sha256_all`, and one made from a damaged base (here a
/// forged `sha256_all` in its root line) would not apply to the real one.
#[test]
fn create_refuses_a_base_or_target_that_fails_verification() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let text = String::from_utf8(read("expected/delta_base.wtxt")).unwrap();
    let at = text.find("sha256_all=").unwrap() + "sha256_all=".len();
    let mut forged = text.clone();
    forged.replace_range(at..at + 1, if &text[at..at + 1] == "0" { "1" } else { "0" });
    let bad = d.join("bad.wtxt");
    std::fs::write(&bad, forged).unwrap();
    let good = fixture("expected/delta_target.wtxt");
    for (base, target) in [(&bad, &good), (&good, &bad)] {
        let out = d.join("d.wtxtdelta");
        let r = create(base, target, &out);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{err}");
        assert!(err.contains("bad.wtxt: line 4: sha256_all"), "{err}");
        assert!(!out.exists());
    }
}

/// Split snapshots read unhashed, as the snapshot pipeline reads its own
/// ring files: the chunks the delta does not carry are sought past, and
/// the delta is the one `delta create` makes after verifying both files.
/// A chunk passed over that is a byte short still fails, at its `endch`.
#[test]
fn a_delta_of_parts_read_unhashed_is_the_verified_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base_bytes = f64_rows(4096, 64, 1);
    let target_bytes = rows_set(&base_bytes, &[5, 3000]);
    let split = ["--rows-per-chunk", "64", "--part-size", "300000"];
    let base =
        snapshot(d, "base", &[("R", "f64", vec![4096, 64], base_bytes)], &[&["--gen", "1"][..], &split].concat());
    let prev = base.to_str().unwrap().to_string();
    let target = snapshot(
        d,
        "target",
        &[("R", "f64", vec![4096, 64], target_bytes)],
        &[&["--prev", &prev][..], &split].concat(),
    );
    assert!(d.join("base.wtxt.parts").is_dir(), "split into parts");
    let made = |base: &Path| -> wtxt::Result<Vec<u8>> {
        let mut b = wtxt::store::WtxtIn::open_unhashed(base, None)?;
        let mut t = wtxt::store::WtxtIn::open_unhashed(&target, None)?;
        let mut out = Vec::new();
        wtxt::format::delta::create((b.lines(), base), (t.lines(), &target), &mut out)?;
        Ok(out)
    };
    let verified = d.join("verified.wtxtdelta");
    let r = create(&base, &target, &verified);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let unhashed = made(&base).unwrap();
    assert!(unhashed == std::fs::read(&verified).unwrap(), "the same delta");
    assert_eq!(String::from_utf8_lossy(&unhashed).lines().filter(|l| l.starts_with("ch ")).count(), 2);
    let out = d.join("out.wtxt");
    let r = apply(&base, &verified, &out);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let joined = d.join("joined.wtxt");
    assert!(wtxt().arg("join").arg(&target).arg("-o").arg(&joined).output().unwrap().status.success());
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&joined).unwrap(), "the target's text, rebuilt");
    // A base64 character dropped from a chunk of the base, which the delta
    // only names: its length no longer ends at `endch`.
    let part = d.join("base.wtxt.parts").join(wtxt::format::split::part_name(1));
    let mut text = std::fs::read(&part).unwrap();
    let ch = memchr::memmem::find(&text, b"\nch ").unwrap() + 1;
    let line = ch + memchr::memchr(b'\n', &text[ch..]).unwrap() + 1;
    text.remove(line + 10);
    std::fs::write(&part, &text).unwrap();
    let e = made(&base).unwrap_err().to_string();
    assert!(e.contains("endch"), "{e}");
}
