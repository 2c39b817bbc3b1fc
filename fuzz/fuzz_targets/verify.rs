//! WTXT: the strict verifier, loading, and canonical re-emission (which must
//! give back the same bytes for anything that verifies).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wtxt::format::verify(data, &Default::default(), None);
    if let Ok(l) = wtxt::format::load(data, data.len() as u64, &Default::default()) {
        let c = wtxt::format::canonical_bytes(&l).expect("a verified file re-emits");
        // Canonical writer output is what verifies; anything else that
        // verifies must at least re-emit to something that verifies.
        let again = wtxt::format::load(&c[..], c.len() as u64, &Default::default()).expect("re-emitted file verifies");
        assert_eq!(again.arrays.len(), l.arrays.len());
    }
    let _ = wtxt::git::textconv(data);
});
