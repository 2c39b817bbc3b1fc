//! Recovery scans anything and returns only arrays that check out.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let r = wtxt::wtxt::recover::recover(data, None, true);
    assert_eq!(r.report.recovered_arrays + r.report.lost_arrays, r.report.arrays.len());
});
