//! Merge's inputs: three WTXT texts separated by NUL bytes. Whatever they
//! are, a merge that writes a signed, HMAC'd result had inputs that verify
//! under the same keys, and a side loaded sharing the arrays of the sides
//! before it (as `wtxt merge` loads them) is exactly the side loaded alone.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wtxt::format::Loaded;

fuzz_target!(|data: &[u8]| {
    let parts: Vec<&[u8]> = data.splitn(3, |&b| b == 0).collect();
    let [base, ours, theirs] = parts[..] else { return };
    let key = wtxt::crypto::HmacKey::from_hex(&"ab".repeat(32)).unwrap();
    let opts = wtxt::format::VerifyOptions { hmac_key: Some(&key), ..Default::default() };
    let load = |b: &[u8], known: &[&Loaded]| {
        let alone = wtxt::format::load(b, b.len() as u64, &opts).ok();
        let shared = wtxt::format::Load { known, ..Default::default() }.run(b, b.len() as u64, &opts).ok();
        assert_eq!(alone.is_some(), shared.is_some(), "sharing changes whether a side loads");
        if let (Some(a), Some(s)) = (&alone, &shared) {
            assert!(a.arrays.iter().zip(&s.arrays).all(|(x, y)| x.name == y.name && x.bytes() == y.bytes()));
            assert_eq!((a.arrays.len(), &a.digests), (s.arrays.len(), &s.digests));
        }
        shared
    };
    let Some(o) = load(ours, &[]) else { return };
    let Some(t) = load(theirs, &[&o]) else { return };
    let b = load(base, &[&o, &t]).map(|l| l.arrays).unwrap_or_default();
    for s in [wtxt::git::Strategy::Average, wtxt::git::Strategy::Theirs] {
        let _ = wtxt::git::merge(&b, &o.arrays, &t.arrays, 4, s, &Default::default());
    }
});
