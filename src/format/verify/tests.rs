//! The verifier's tests: the same report at one thread of work and at
//! several, chunk digests paired without losing a wrong one, and sizes a
//! file declares refused before they are used.

use std::sync::Arc;

use super::hashing::{ChunkEnd, ChunkPairs, Pooled, HOLD};
use super::*;
use crate::crypto::digest::sha256;
use crate::crypto::digest::Sha256State;

/// Chunks of these sizes, cut into blocks of at most `block` bytes, with
/// the chunks in `wrong` given a wrong digest; from chunk `mac_from`
/// on, with an HMAC's digest beside them (as in the arrays that have
/// one). Gives the chunks found bad.
fn run(sizes: &[usize], block: usize, wrong: &[usize], mac_from: usize) -> Vec<u64> {
    let (home, _pool) = unbounded();
    let mut pairs = ChunkPairs::default();
    let mut inner = Sha256State::default();
    let mut all = Vec::new();
    for (ix, &n) in sizes.iter().enumerate() {
        let bytes: Vec<u8> = (0..n).map(|i| (i * 7 + ix * 131) as u8).collect();
        if ix >= mac_from {
            all.extend_from_slice(&bytes);
        }
        for b in bytes.chunks(block) {
            pairs
                .data(Arc::new(Pooled { buf: b.to_vec(), home: home.clone() }), (ix >= mac_from).then_some(&mut inner));
            let held = pairs.held.as_ref().map_or(0, |h| h.blocks.iter().map(|b| b.buf.len()).sum::<usize>() - h.at);
            assert!(pairs.waiting_bytes <= HOLD && held <= HOLD, "at most HOLD bytes wait");
        }
        let mut want = sha256(&bytes);
        if wrong.contains(&ix) {
            want[0] ^= 1;
        }
        pairs.end(ChunkEnd { array: 0, ix: ix as u64, len: n as u64, line: ix as u64, want, bad: false });
    }
    let mut bad: Vec<u64> = pairs.finish().0.into_iter().map(|(_, ix, _)| ix).collect();
    bad.sort_unstable();
    assert_eq!(inner.finalize(), sha256(&all), "the HMAC's digest took each of its bytes once");
    bad
}

/// A chunk whose declared size makes its text longer than `u64` counts
/// (a shape of 2^64 - 1 bytes in rows of one) is refused on its line,
/// whatever the threads, and by a load that would read past it.
#[test]
fn a_chunk_declared_past_any_size_is_refused_not_overflowed() {
    use crate::format::syntax::{lines_for, DigestForm};
    use crate::model::{Array, Dtype};
    let a = Array::new("a", Dtype::U8, vec![1, 64], vec![0; 64].into()).unwrap();
    let meta = crate::format::syntax::Meta::new(1, Some("2026-01-01T00:00:00Z")).unwrap();
    let opts = crate::format::write::WriteOptions {
        digest: DigestForm::Tree,
        ..crate::format::write::WriteOptions::new(meta, 1)
    };
    let mut out = std::io::Cursor::new(Vec::new());
    crate::format::write::write_snapshot(&[a], &opts, &mut out, &crate::progress::Progress::hidden()).unwrap();
    let big = u64::MAX;
    let text = String::from_utf8(out.into_inner())
        .unwrap()
        .replace("shape=1,64 order=C bytes=64 ", &format!("shape=1,{big} order=C bytes={big} "))
        .replace("row_size=64 ", &format!("row_size={big} "))
        .replace(" len=64 ", &format!(" len={big} "))
        .replace(" lines=2", &format!(" lines={}", lines_for(big)));
    assert!(text.contains(&format!("lines={}", lines_for(big))), "{text}");
    for threads in [1, 3, 5] {
        crate::threads::set(threads);
        let r = verify(text.as_bytes(), &VerifyOptions::default(), None).unwrap();
        assert!(!r.ok && r.first_error().is_some_and(|p| p.line == 9), "{threads}: {:?}", r.first_error());
        let rows = std::collections::BTreeMap::from([("a".to_string(), (0, 0))]);
        let load = crate::format::Load { rows: Some(&rows), ..Default::default() };
        assert!(load.run(text.as_bytes(), text.len() as u64, &VerifyOptions::default()).is_err());
    }
    crate::threads::set(0);
    let mut frame = crate::format::split::FrameHash::default();
    frame.update(text.as_bytes());
}

/// One thread of work or three, the same report, for a sound text and
/// for damaged ones (a data byte, a chunk digest, an HMAC tag).
#[test]
fn one_thread_of_work_finds_what_three_do() {
    use crate::model::{Array, Dtype};
    let key = HmacKey::from_hex(&"cd".repeat(32)).unwrap();
    let arrays = vec![
        Array::new("a", Dtype::F32, vec![300, 40], crate::testing::noise(48_000, 5).into()).unwrap(),
        Array::new("b", Dtype::U8, vec![70_000], crate::testing::noise(70_000, 6).into()).unwrap(),
    ];
    let meta = crate::format::syntax::Meta::new(1, Some("2026-01-01T00:00:00Z")).unwrap();
    let opts = crate::format::write::WriteOptions {
        hmac_key: Some(&key),
        ..crate::format::write::WriteOptions::new(meta, 64)
    };
    let mut out = std::io::Cursor::new(Vec::new());
    crate::format::write::write_snapshot(&arrays, &opts, &mut out, &crate::progress::Progress::hidden()).unwrap();
    let good = out.into_inner();
    let text = String::from_utf8(good.clone()).unwrap();
    let mut data = good.clone();
    let at = text.find("\nendch\n").unwrap() - 10;
    data[at] = if data[at] == b'A' { b'B' } else { b'A' };
    let chunk = {
        let i = text.find("\nch ").unwrap();
        let i = i + text[i..].find(" sha256=").unwrap() + 8;
        let mut t = good.clone();
        t[i] = if t[i] == b'0' { b'1' } else { b'0' };
        t
    };
    let tag = {
        let i = text.find(" hmac=").unwrap() + 6;
        let mut t = good.clone();
        t[i] = if t[i] == b'0' { b'1' } else { b'0' };
        t
    };
    // A line cut short (the structure breaks there), `endch` missing,
    // and the file cut inside a chunk.
    let short = text.replacen(" 0\n", "\n", 1).into_bytes();
    let no_endch = text.replacen("\nendch\n", "\n", 2).into_bytes();
    let cut = good[..good.len() / 2].to_vec();
    // Not base64 in a full line, and a parity digit changed.
    let (alphabet, parity) = {
        let i = text.find("\nch ").unwrap() + 1;
        let first = i + text[i..].find('\n').unwrap() + 1;
        let (mut a, mut p) = (good.clone(), good.clone());
        a[first + 3] = b'!';
        let nib = first + text[first..].find('\n').unwrap() - 1;
        p[nib] = if p[nib] == b'0' { b'1' } else { b'0' };
        (a, p)
    };
    let cases = [
        ("alphabet", alphabet),
        ("parity", parity),
        ("good", good.clone()),
        ("data", data),
        ("chunk", chunk),
        ("tag", tag),
        ("short", short),
        ("endch", no_endch),
        ("cut", cut),
    ];
    // Without the key the tags go unchecked, not the arrays' digests.
    for ((what, input), key) in cases.iter().flat_map(|c| [(c, Some(&key)), (c, None)]) {
        let vopts = VerifyOptions { hmac_key: key, ..Default::default() };
        let mut seen = Vec::new();
        // 1: in place; 3: two hashing threads; 5 and 8: chunks decoded
        // on two and five more, `sha256_all` alone on its thread.
        for threads in [1, 3, 5, 8] {
            crate::threads::set(threads);
            let r = verify(&input[..], &vopts, None).map(|r| (r.ok, r.errors, r.arrays));
            seen.push(format!("{:?}", r.map(|r| serde_json::to_string(&r).unwrap()).map_err(|e| e.to_string())));
        }
        crate::threads::set(0);
        assert!(seen.iter().all(|x| *x == seen[0]), "{what}: {seen:?}");
        assert_eq!(*what == "good", seen[0].starts_with("Ok(\"[true"), "{what}: {}", seen[0]);
    }
}

/// Mutated texts (a byte changed, dropped or doubled) get the same
/// report at one thread, three (two hashing threads) and five (the
/// chunks decoded beside them, `sha256_all` alone), with and without
/// the key: the digests move between threads, never what is found.
#[test]
fn mutated_texts_get_one_report_whatever_the_threads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wtxt");
    let hex = std::fs::read_to_string(dir.join("keys/hmac.hex")).unwrap();
    let key = HmacKey::from_hex(hex.trim()).unwrap();
    const PICK: &[u8] = b"AZaz09+/ =\n";
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    for f in ["expected/hmac.wtxt", "expected/defaults.wtxt", "expected/rows_per_chunk_3.wtxt"] {
        let good = std::fs::read(dir.join(f)).unwrap();
        for case in 0..60 {
            let mut t = good.clone();
            let at = next(t.len());
            match case % 3 {
                0 => t[at] = PICK[next(PICK.len())],
                1 => drop(t.remove(at)),
                _ => t.insert(at, t[at]),
            }
            for key in [Some(&key), None] {
                let opts = VerifyOptions { hmac_key: key, ..Default::default() };
                let mut seen = Vec::new();
                for threads in [1, 3, 5] {
                    crate::threads::set(threads);
                    let r = verify(&t[..], &opts, None).map(|r| (r.ok, r.errors, r.arrays));
                    seen.push(format!(
                        "{:?}",
                        r.map(|r| serde_json::to_string(&r).unwrap()).map_err(|e| e.to_string())
                    ));
                }
                crate::threads::set(0);
                assert!(seen.iter().all(|x| *x == seen[0]), "{f} case {case} at {at}: {seen:?}");
            }
        }
    }
}

#[test]
fn chunks_hashed_in_pairs_find_exactly_the_chunks_whose_digest_is_wrong() {
    let hold = HOLD;
    let cases: &[(&[usize], usize)] = &[
        (&[100, 100, 100], 64),
        (&[0, 5, 0, 0, 200], 64),
        (&[1000, 10, 3000, 1], 128),
        // Longer than may wait: hashed alone beyond HOLD.
        (&[hold + 5000, hold * 2 + 1, 777, hold + 1], 1 << 20),
        (&[3 << 20, 100, 3 << 20], 1 << 20),
    ];
    for (sizes, block) in cases {
        for wrong in [vec![], vec![0], vec![sizes.len() - 1], (0..sizes.len()).step_by(2).collect()] {
            for mac_from in [0, 1, sizes.len() / 2, usize::MAX] {
                let bad = run(sizes, *block, &wrong, mac_from);
                assert_eq!(bad, wrong.iter().map(|&i| i as u64).collect::<Vec<_>>(), "{sizes:?} {block} {mac_from}");
            }
        }
    }
}
