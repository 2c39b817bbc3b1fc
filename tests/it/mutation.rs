//! Seeded random mutations of every fixture through every reader that
//! exists: bit flips, byte insertions and deletions, truncation at every
//! line boundary, duplicated and swapped lines, huge numbers in size
//! fields. A reader may refuse (it must), but never panic. Bounded: a few
//! thousand cases per reader.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::util::read;

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn lines(b: &[u8]) -> Vec<&[u8]> {
    b.split_inclusive(|&c| c == b'\n').collect()
}

/// One mutation of `base`, chosen by `rng`.
fn mutate(base: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut v = base.to_vec();
    if v.is_empty() {
        return vec![rng.next() as u8];
    }
    match rng.below(8) {
        0 => {
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
        }
        1 => {
            let i = rng.below(v.len() + 1);
            v.insert(i.min(v.len()), rng.next() as u8);
        }
        2 => {
            let i = rng.below(v.len());
            let n = 1 + rng.below(16);
            v.drain(i..(i + n).min(v.len()));
        }
        3 => {
            let ls = lines(base);
            let cut: usize = ls[..rng.below(ls.len() + 1)].iter().map(|l| l.len()).sum();
            v.truncate(cut);
        }
        4 => {
            let ls = lines(base);
            let i = rng.below(ls.len());
            let mut out: Vec<u8> = Vec::new();
            for (k, l) in ls.iter().enumerate() {
                out.extend_from_slice(l);
                if k == i {
                    out.extend_from_slice(l);
                }
            }
            v = out;
        }
        5 => {
            let mut ls = lines(base);
            if ls.len() > 1 {
                let (a, b) = (rng.below(ls.len()), rng.below(ls.len()));
                ls.swap(a, b);
            }
            v = ls.concat();
        }
        6 => {
            // A huge number where a number stands.
            let digits: Vec<usize> = (0..v.len()).filter(|&i| v[i].is_ascii_digit()).collect();
            if let Some(&i) = digits.get(rng.below(digits.len())) {
                let huge = ["99999999999999999999", "18446744073709551615", "4294967296", "0"][rng.below(4)];
                v.splice(i..i + 1, huge.bytes());
            }
        }
        _ => {
            // Binary headers: overwrite 8 bytes with a huge little-endian length.
            let i = rng.below(v.len().saturating_sub(8).max(1));
            let n = [u64::MAX, 1 << 40, 0x7fff_ffff, 12345][rng.below(4)].to_le_bytes();
            for (k, b) in n.iter().enumerate() {
                if i + k < v.len() {
                    v[i + k] = *b;
                }
            }
        }
    }
    v
}

/// Runs `reader` on `count` mutations of `base`; any panic fails with the seed.
fn never_panics(name: &str, base: &[u8], count: usize, reader: impl Fn(&[u8])) {
    let mut rng = Rng(0x5eed ^ name.len() as u64 ^ (base.len() as u64) << 20);
    for case in 0..count {
        let seed = rng.0;
        let input = mutate(base, &mut rng);
        if catch_unwind(AssertUnwindSafe(|| reader(&input))).is_err() {
            panic!("{name}: the reader panicked on mutation {case} (rng state {seed:#x})");
        }
    }
}

fn verify(b: &[u8]) {
    let _ = wtxt::format::verify(b, &Default::default(), None);
}

#[test]
fn wtxt_readers_never_panic() {
    for f in
        ["expected/defaults.wtxt", "expected/ext_dtypes.wtxt", "expected/signed_pkcs8.wtxt", "expected/streaming.wtxt"]
    {
        let base = read(f);
        let n = if base.len() > 10_000 { 400 } else { 2000 };
        never_panics(&format!("verify {f}"), &base, n, verify);
        never_panics(&format!("load+canonical {f}"), &base, n / 2, |b| {
            if let Ok(l) = wtxt::format::load(b, b.len() as u64, &Default::default()) {
                let _ = wtxt::format::canonical_bytes(&l);
            }
        });
        never_panics(&format!("recover {f}"), &base, n / 2, |b| {
            let _ = wtxt::format::recover(b, None, Default::default(), true);
        });
        never_panics(&format!("textconv {f}"), &base, n / 2, |b| {
            let _ = wtxt::git::textconv(b);
        });
        let good = base.clone();
        never_panics(&format!("diff {f}"), &base, n / 4, |b| {
            let names = wtxt::git::Names { old: std::path::Path::new("a"), new: std::path::Path::new("b") };
            let _ = wtxt::git::diff(&good[..], b, names);
        });
    }
}

#[test]
fn delta_and_wsum_readers_never_panic() {
    for f in ["expected/delta.wtxtdelta", "expected/delta.minimal.wtxtdelta"] {
        let base = read(f);
        never_panics(f, &base, 600, |b| {
            let _ = wtxt::format::delta::check(b);
            if let Ok(d) = wtxt::format::delta::parse(b) {
                let _ = wtxt::format::delta::minimal_changes(&d);
            }
            if let Ok(mut d) = wtxt::format::delta::DeltaReader::open(b) {
                let target = read("expected/delta_base.wtxt");
                let _ = wtxt::format::delta::apply_extended(&target[..], &mut d, "d".as_ref(), &mut std::io::sink());
            }
        });
    }
    // Creating one from a mutated base or target, read through or passed
    // over by seeking (the snapshot pipeline's ring delta).
    let (base, target) = (read("expected/delta_base.wtxt"), read("expected/delta_target.wtxt"));
    let create = |b: &[u8], t: &[u8]| {
        use wtxt::format::{delta, LineReader};
        let p = std::path::Path::new("x");
        let _ = delta::create((LineReader::new(b), p), (LineReader::new(t), p), &mut std::io::sink());
        let (b, t) = (std::io::Cursor::new(b.to_vec()), std::io::Cursor::new(t.to_vec()));
        let _ = delta::create((LineReader::skipping(b), p), (LineReader::skipping(t), p), &mut std::io::sink());
    };
    never_panics("delta create, base", &base, 600, |b| create(b, &target));
    never_panics("delta create, target", &target, 600, |t| create(&base, t));
    let wsum = read("expected/streaming.wsum");
    never_panics("wsum", &wsum, 3000, |b| {
        let _ = wtxt::format::syntax::Wsum::parse_file(b);
    });
}

#[test]
fn container_readers_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["inputs/single.npy", "inputs/model.npz", "inputs/ext.npz", "inputs/ext.safetensors", "inputs/layout.npz"]
    {
        let base = read(f);
        let path = dir.path().join("x");
        never_panics(f, &base, 400, |b| {
            std::fs::write(&path, b).unwrap();
            let _ = wtxt::convert::load_inputs(&[&path], &Default::default(), &mut Vec::new());
            let _ = wtxt::git::clean(b, dir.path(), "x");
            if let Ok(arrays) = wtxt::convert::npz::read_pinned(b) {
                let _ = wtxt::convert::npz::rebuild(&arrays);
            }
        });
    }
    for f in ["volp_float32.volp", "volp_int16_scaled.volp", "volp_uint8.volp"] {
        let base =
            std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/peers").join(f)).unwrap();
        never_panics(f, &base, 1000, |b| {
            let _ = wtxt::convert::volp::read(b);
        });
    }
}

#[test]
fn fold_aero_mldf_readers_never_panic() {
    use wtxt::convert::{aero, fold, mldf};
    use wtxt::model::ArrayData;
    let peers = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/peers");
    let owned = |b: &[u8]| ArrayData::Owned(std::sync::Arc::new(b.to_vec()));
    for f in ["fold_zstd_noecc.fold", "fold_rs32_corrupted.fold", "fold_zstd_rs32_sten.fold"] {
        let base = std::fs::read(peers.join(f)).unwrap();
        never_panics(f, &base, 1500, |b| {
            let _ = fold::read(&owned(b), &mut Vec::new());
            if let Ok(arrays) = fold::read_pinned(&owned(b), &mut Vec::new()) {
                let _ = fold::write_to(&arrays, &mut std::io::Cursor::new(Vec::new()));
            }
        });
    }
    for f in ["aero_hash_b3.aero", "aero_multi_shard.aero"] {
        let base = std::fs::read(peers.join(f)).unwrap();
        never_panics(f, &base, 1500, |b| {
            if let Ok(arrays) = aero::read_pinned(&owned(b), &mut Vec::new()) {
                let _ = aero::write(&arrays);
            }
        });
    }
    // An MLDF with every field type, written by our writer from its metadata.
    let seed = wtxt::convert::load_lossless(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mldf/fields.mldf"),
        &Default::default(),
        &mut Vec::new(),
    )
    .unwrap();
    let base = mldf::write(&seed).unwrap();
    never_panics("mldf", &base, 3000, |b| {
        if let Ok(arrays) = mldf::read(&owned(b), &mut Vec::new()) {
            let _ = mldf::write(&arrays);
        }
    });
}

#[test]
fn age_armor_never_panics() {
    use wtxt::crypto::{decrypt, Unseal};
    // An armored file made here (X25519: no scrypt cost per case), then mangled.
    let id = age::x25519::Identity::generate();
    let seal = wtxt::crypto::Seal::Recipients(vec![Box::new(id.to_public())]);
    let enc = wtxt::crypto::encrypt(&read("expected/defaults.wtxt")[..], &seal, Vec::new()).unwrap();
    let unseal = Unseal::Identities(vec![Box::new(id)]);
    never_panics("age armor", &enc, 1000, |b| {
        if let Ok(mut r) = decrypt(b, &unseal) {
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        }
    });
}

/// Inputs the fuzzers found (fuzz/artifacts): each read must fail or round trip.
#[test]
fn fuzz_regressions() {
    use wtxt::convert::mldf;
    use wtxt::model::ArrayData;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzz");
    for e in std::fs::read_dir(dir.join("mldf")).unwrap() {
        let b = std::fs::read(e.unwrap().path()).unwrap();
        if let Ok(arrays) = mldf::read(&ArrayData::Owned(std::sync::Arc::new(b)), &mut Vec::new()) {
            if let Ok(bytes) = mldf::write(&arrays) {
                let again = mldf::read(&ArrayData::Owned(std::sync::Arc::new(bytes)), &mut Vec::new()).unwrap();
                assert_eq!(again.len(), arrays.len());
            }
        }
    }
    for e in std::fs::read_dir(dir.join("npz")).unwrap() {
        let b = std::fs::read(e.unwrap().path()).unwrap();
        if let Ok(arrays) = wtxt::convert::npz::read_pinned(&b) {
            assert!(wtxt::convert::npz::rebuild(&arrays).unwrap() == b, "the filter's npz form rebuilds exactly");
        }
    }
}

/// Merge and recover sign and HMAC what they write: whatever a mutated
/// input looks like, what comes out signed and HMAC'd must have come from
/// inputs that verified under the same keys.
#[test]
fn merge_and_recover_never_launder_mutated_inputs() {
    use wtxt::crypto::HmacKey;
    use wtxt::crypto::{SecretKey, TrustedKeys};
    use wtxt::format::VerifyOptions;
    let dir = tempfile::tempdir().unwrap();
    let key = HmacKey::from_file(&crate::util::fixture("keys/hmac.hex")).unwrap();
    let sk = SecretKey::from_file(&crate::util::fixture("keys/sign.pem")).unwrap();
    let trusted = TrustedKeys::single(sk.public());
    let good_path = crate::util::fixture("expected/signed_pkcs8.wtxt");
    let base = read("expected/signed_pkcs8.wtxt");
    let checks =
        VerifyOptions { hmac_key: Some(&key), trusted: Some(&trusted), require_signature: true, ..Default::default() };
    let theirs = dir.path().join("theirs.wtxt");
    let out = dir.path().join("out.wtxt");
    let opts = wtxt::ops::MergeOptions {
        strategy: wtxt::git::Strategy::Theirs,
        decisions: Default::default(),
        ts: Some("2026-05-01T00:00:00Z".into()),
        keys: wtxt::options::Keys {
            hmac_key: Some(key.clone()),
            sign_key: Some(SecretKey::from_file(&crate::util::fixture("keys/sign.pem")).unwrap()),
            ..Default::default()
        },
        output: Default::default(),
    };
    never_panics("merge theirs", &base, 150, |b| {
        std::fs::write(&theirs, b).unwrap();
        let _ = std::fs::remove_file(&out);
        if let Ok(m) = wtxt::ops::merge(&good_path, &good_path, &theirs, &out, &opts) {
            if m.written.is_some() {
                let r = wtxt::format::verify(b, &checks, None).unwrap();
                assert!(r.ok, "merge signed a result from an input that does not verify: {:?}", r.errors);
            }
        }
    });
    let hmac_only = read("expected/hmac.wtxt");
    never_panics("recover with a key", &hmac_only, 300, |b| {
        let r = wtxt::format::recover(b, Some(&key), Default::default(), false);
        for a in &r.arrays {
            assert!(r.authenticated.contains(&a.name), "recover kept {} without authenticating it", a.name);
        }
    });
}

/// The daemon's WAL replay reads whatever a crash left.
#[test]
fn wal_replay_never_panics() {
    let base = b"snapshot requested gen=1 ts=5 pathhex=2f746d702f6120622e6e707a\nsnapshot done gen=1 sha256_all=00\n\
snapshot requested gen=2 ts=6 path=/tmp/x y.npz\n"
        .to_vec();
    never_panics("wal", &base, 3000, |b| {
        let _ = wtxt::daemon::Wal::parse_pending(&String::from_utf8_lossy(b));
    });
}

/// Split snapshots: a mutated head, or a mutated part under a sound head,
/// through the joining reader (verify, load, recover's lenient read), the
/// Git side's part scanner and chunk check, and splitting itself.
#[test]
fn split_readers_never_panic() {
    use wtxt::format::split;
    let dir = tempfile::tempdir().unwrap();
    let single = read("expected/defaults.wtxt");
    let head_path = dir.path().join("h.wtxt");
    let _ = std::fs::remove_file(&head_path);
    // Split the golden vector into small parts with the library's own code.
    let mut parts: Vec<Vec<u8>> = Vec::new();
    let head = split::split(&single[..], 48 << 10, &mut parts).unwrap();
    assert!(parts.len() >= 2, "{} parts", parts.len());
    let write_set = |h: &[u8], ps: &[Vec<u8>]| {
        let pdir = wtxt::store::parts_dir(&head_path);
        let _ = std::fs::remove_dir_all(&pdir);
        std::fs::create_dir_all(&pdir).unwrap();
        for (i, p) in ps.iter().enumerate() {
            std::fs::write(pdir.join(split::part_name(i as u64 + 1)), p).unwrap();
        }
        std::fs::write(&head_path, h).unwrap();
    };
    let read_set = || {
        if let Ok(mut input) = wtxt::store::WtxtIn::open_lenient(&head_path, None) {
            let _ = wtxt::format::verify(input.text(), &Default::default(), None);
            let _ = input.faults();
        }
        if let Ok(mut input) = wtxt::store::WtxtIn::open(&head_path, None) {
            let _ = wtxt::format::load(input.text(), 1 << 20, &Default::default()).map_err(|e| input.blame(e));
        }
    };
    never_panics("split head", &head, 300, |h| {
        write_set(h, &parts);
        read_set();
    });
    never_panics("split part", &parts[1], 300, |p| {
        let mut ps = parts.clone();
        ps[1] = p.to_vec();
        write_set(&head, &ps);
        read_set();
        let arrs = split::open(Box::new(&head[..])).ok().and_then(|o| match o {
            split::Opened::Split(h) => Some(h.begins(2)),
            _ => None,
        });
        let _ = wtxt::git::check_part(p, std::path::Path::new("p"), &arrs.unwrap_or_default());
        let names = wtxt::git::Names { old: std::path::Path::new("a"), new: std::path::Path::new("b") };
        let _ = wtxt::git::diff_parts(&parts[1], &p, names);
        let _ = wtxt::git::textconv_part(&p, std::path::Path::new("p"));
    });
    never_panics("split input", &single, 300, |b| {
        let _ = split::split(b, 48 << 10, &mut Vec::<Vec<u8>>::new());
    });
    // What the `split` fuzz target found: joining with small reads (as
    // `read_to_end` starts) panicked on a part's long first body line; a
    // base64 line one character wider than the canonical form split into
    // a part its frame could not count (it is refused now).
    let found = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzz/split");
    let mut texts = vec![single.clone()];
    texts.extend(std::fs::read_dir(found).unwrap().map(|e| std::fs::read(e.unwrap().path()).unwrap()));
    for text in texts {
        for size in [8 << 10, 48 << 10] {
            let mut sink: Vec<Vec<u8>> = Vec::new();
            let Ok(head) = split::split(&text[..], size, &mut sink) else { continue };
            let Ok(split::Opened::Split(h)) = split::open(Box::new(&head[..])) else { panic!("a head") };
            let mut back = Vec::new();
            std::io::Read::read_to_end(&mut split::Joined::new(h, Box::new(sink), None), &mut back).unwrap();
            assert!(back == text, "join(split(x)) == x");
        }
    }
}
