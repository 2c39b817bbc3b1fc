//! DELTA v2: parsing, chunk checks, and applying to a fixed base.
#![no_main]
use libfuzzer_sys::fuzz_target;

const BASE: &[u8] = include_bytes!("../../fixtures/wtxt/expected/delta_base.wtxt");

fuzz_target!(|data: &[u8]| {
    let _ = wtxt::format::delta::check(data);
    if let Ok(d) = wtxt::format::delta::parse(data) {
        let _ = wtxt::format::delta::minimal_changes(&d);
    }
    if let Ok(mut d) = wtxt::format::delta::DeltaReader::open(data) {
        let _ = wtxt::format::delta::apply_extended(BASE, &mut d, "d".as_ref(), &mut std::io::sink());
    }
});
