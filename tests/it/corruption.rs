//! The corruption matrix: every kind of damage, applied to every line of a
//! signed, HMAC'd file, is rejected (never a panic), and errors name the
//! damaged line. `idx` and `audit` lines are outside every hash by the
//! profile's design; they get their own checks.

use wtxt::crypto::HmacKey;
use wtxt::crypto::{PublicKey, SecretKey, TrustedKeys};
use wtxt::format::{Report, VerifyOptions};

use crate::util::{fixture, read, verify_bytes};

struct Keys {
    hmac: HmacKey,
    trusted: TrustedKeys,
}

fn keys() -> Keys {
    Keys {
        hmac: HmacKey::from_file(&fixture("keys/hmac.hex")).unwrap(),
        trusted: TrustedKeys::single(PublicKey::from_file(&fixture("keys/sign.pem.pub")).unwrap()),
    }
}

/// A small signed file with every line kind: rank 0-2 arrays, several chunks, an audit line.
fn signed_sample() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.wtxt");
    let opts = wtxt::ops::SnapshotOptions {
        meta: wtxt::options::MetaFields { gen: Some(4), ts: Some("2026-02-02T12:00:00Z".into()), ..Default::default() },
        rows_per_chunk: Some(2),
        keys: wtxt::options::Keys {
            hmac_key: Some(keys().hmac),
            sign_key: Some(SecretKey::from_file(&fixture("keys/sign.pem")).unwrap()),
            ..Default::default()
        },
        audit: Some("note=\"sample\"".into()),
        ..Default::default()
    };
    wtxt::ops::snapshot(
        &[fixture("inputs/ext.safetensors")],
        &out,
        &opts,
        &wtxt::progress::Progress::hidden(),
        &mut Vec::new(),
    )
    .unwrap();
    std::fs::read(out).unwrap()
}

fn strict(bytes: &[u8], k: &Keys) -> Result<Report, wtxt::Error> {
    let opts = VerifyOptions {
        hmac_key: Some(&k.hmac),
        trusted: Some(&k.trusted),
        require_signature: true,
        ..Default::default()
    };
    verify_bytes(bytes, &opts)
}

fn rejected(bytes: &[u8], k: &Keys) -> bool {
    match strict(bytes, k) {
        Ok(r) => !r.ok,
        Err(_) => true,
    }
}

fn lines(b: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = b.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect();
    v.pop(); // after the final LF
    v
}

fn join(ls: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in ls {
        out.extend_from_slice(l);
        out.push(b'\n');
    }
    out
}

#[test]
fn the_sample_verifies() {
    let k = keys();
    let r = strict(&signed_sample(), &k).unwrap();
    assert!(r.ok, "{:?}", r.errors);
    assert!(r.arrays.iter().all(|a| a.authenticated));
}

#[test]
fn every_single_line_damage_is_rejected() {
    let k = keys();
    let base = signed_sample();
    let ls = lines(&base);
    let mut cases = 0;
    for i in 0..ls.len() {
        let uncovered = ls[i].starts_with(b"idx ") || ls[i].starts_with(b"audit ");
        let mut variants: Vec<(&str, Vec<Vec<u8>>)> = Vec::new();
        if !ls[i].starts_with(b"audit ") {
            let mut del = ls.clone();
            del.remove(i);
            variants.push(("delete", del));
        }
        let mut dup = ls.clone();
        dup.insert(i, ls[i].clone());
        variants.push(("duplicate", dup));
        if i + 1 < ls.len() && ls[i] != ls[i + 1] {
            let mut sw = ls.clone();
            sw.swap(i, i + 1);
            variants.push(("swap", sw));
        }
        for (what, byte) in
            [("trailing space", None), ("CR", Some(b'\r')), ("tab", Some(b'\t')), ("non-ASCII", Some(0xc3))]
        {
            let mut v = ls.clone();
            match byte {
                None => v[i].push(b' '),
                Some(b) => {
                    let m = v[i].len() / 2;
                    v[i].insert(m, b);
                }
            }
            variants.push((what, v));
        }
        if !uncovered {
            for pos in [0, ls[i].len() / 2, ls[i].len().saturating_sub(1)] {
                let mut v = ls.clone();
                let c = &mut v[i][pos];
                *c = if *c == b'A' {
                    b'B'
                } else if *c == b'0' {
                    b'1'
                } else {
                    b'A'
                };
                variants.push(("change a character", v));
            }
        }
        for (what, v) in variants {
            let bytes = join(&v);
            assert!(
                rejected(&bytes, &k),
                "{what} on line {} (`{}`) was accepted",
                i + 1,
                String::from_utf8_lossy(&ls[i])
            );
            cases += 1;
        }
    }
    assert!(cases > 300, "{cases} cases");
}

#[test]
fn truncation_at_every_byte_is_rejected() {
    let k = keys();
    let base = signed_sample();
    for cut in 0..base.len() {
        assert!(rejected(&base[..cut], &k), "truncated to {cut} bytes was accepted");
    }
}

#[test]
fn errors_name_the_damaged_line() {
    let k = keys();
    let base = signed_sample();
    let ls = lines(&base);
    let first_b64 = ls.iter().position(|l| l.len() > 10 && l[l.len() - 2] == b' ' && !l.contains(&b'=')).unwrap_or(8);
    let mut v = ls.clone();
    v[first_b64][3] = if v[first_b64][3] == b'Q' { b'R' } else { b'Q' };
    let r = strict(&join(&v), &k).unwrap();
    assert_eq!(r.errors[0].line, first_b64 as u64 + 1, "{:?}", r.errors);
    assert!(r.errors[0].message.contains("parity"), "{:?}", r.errors[0]);
    let bad = r.arrays.iter().find(|a| !a.ok).unwrap();
    assert_eq!(bad.bad_chunks.len(), 1);

    // A consistent edit of a chunk (parity fixed) is caught by its CRC at the ch line.
    let mut v = ls.clone();
    let l = &mut v[first_b64];
    let w = l.len() - 2;
    l[3] = if l[3] == b'Q' { b'R' } else { b'Q' };
    let p = wtxt::format::parity(&l[..w]);
    l[w + 1] = wtxt::format::hex_digit(p);
    let r = strict(&join(&v), &k).unwrap();
    assert!(r.errors[0].message.contains("crc32c"), "{:?}", r.errors);
    assert!(r.errors[0].line < first_b64 as u64 + 1);
}

#[test]
fn idx_must_agree_with_the_chunks() {
    let k = keys();
    let text = String::from_utf8(signed_sample()).unwrap();
    let idx = text.lines().find(|l| l.starts_with("idx ")).unwrap().to_string();
    let lied = idx.replace("row_size=", "row_size=9");
    let r = strict(text.replacen(&idx, &lied, 1).as_bytes(), &k).unwrap();
    assert!(!r.ok);
    assert!(r.errors[0].message.contains("row_size"), "{:?}", r.errors);
    let moved = idx.replace("rows_per_chunk=2", "rows_per_chunk=1");
    assert!(rejected(text.replacen(&idx, &moved, 1).as_bytes(), &k), "a rows_per_chunk that moves chunk boundaries");
}

#[test]
fn hostile_headers_and_sizes_fail_cleanly() {
    let k = keys();
    let base = String::from_utf8(read("expected/defaults.wtxt")).unwrap();
    let huge = base.replacen("shape=8300 order=C bytes=33200", "shape=8300000000000 order=C bytes=33200000000000", 1);
    assert!(rejected(huge.as_bytes(), &k));
    let overflow = base.replacen("shape=2,3,2 order=C bytes=24", "shape=4294967296,4294967296,8 order=C bytes=0", 1);
    assert!(rejected(overflow.as_bytes(), &k));
    let long = format!("{}{}\n", base, "x".repeat(5000));
    let r = strict(long.as_bytes(), &k).unwrap();
    assert!(r.errors.iter().any(|e| e.message.contains("longer than 4096")), "{:?}", r.errors);
    assert!(rejected(b"", &k));
    assert!(rejected(b"WTXT 1\n", &k));
    let lines_lie = base.replacen("lines=575", "lines=576", 1);
    assert!(rejected(lines_lie.as_bytes(), &k));
}

#[test]
fn audit_is_outside_the_hashes_and_inside_the_keyed_tag() {
    // The profile: `audit` is covered by no hash and no signature
    // (docs/FORMAT.md, "What the hashes cover"); the keyed tag, which a
    // writer holding an HMAC key adds, covers the pairs before it.
    let k = keys();
    let text = String::from_utf8(signed_sample()).unwrap();
    let edited = text.replace("audit note=\"sample\"", "audit note=\"edited\"");
    assert_ne!(edited, text);
    let unkeyed = VerifyOptions { trusted: Some(&k.trusted), require_signature: true, ..Default::default() };
    assert!(verify_bytes(edited.as_bytes(), &unkeyed).unwrap().ok);
    let r = strict(edited.as_bytes(), &k).unwrap();
    assert!(!r.ok && r.errors.iter().any(|e| e.message.contains("keyed tag does not match")), "{:?}", r.errors);
}
