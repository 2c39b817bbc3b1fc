//! Merge's inputs: three WTXT texts separated by NUL bytes. Whatever they
//! are, a merge that writes a signed, HMAC'd result had inputs that verify
//! under the same keys.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parts: Vec<&[u8]> = data.splitn(3, |&b| b == 0).collect();
    let [base, ours, theirs] = parts[..] else { return };
    let key = wtxt::crypto::mac::HmacKey::from_hex(&"ab".repeat(32)).unwrap();
    let opts = wtxt::wtxt::verify::VerifyOptions { hmac_key: Some(&key), ..Default::default() };
    let load = |b: &[u8]| wtxt::wtxt::load(b, b.len() as u64, &opts).ok();
    let (Some(o), Some(t)) = (load(ours), load(theirs)) else { return };
    let b = load(base).map(|l| l.arrays).unwrap_or_default();
    for s in [wtxt::git::merge::Strategy::Average, wtxt::git::merge::Strategy::Theirs] {
        let _ = wtxt::git::merge::merge(&b, &o.arrays, &t.arrays, 4, s, &Default::default());
    }
});
