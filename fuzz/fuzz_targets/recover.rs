//! Recovery scans anything and returns only arrays that check out; every
//! array it finds is counted as recovered or lost, and nothing it returns
//! is invented.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let r = wtxt::format::recover(data, None, Default::default(), true);
    let rep = &r.report;
    assert_eq!(rep.recovered_arrays + rep.lost_arrays, rep.arrays.len() + rep.unnamed_lost.len());
    for a in &r.arrays {
        assert!(rep.arrays.iter().any(|x| x.name == a.name && x.recovered));
    }
});
