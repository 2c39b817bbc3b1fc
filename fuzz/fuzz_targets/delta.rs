//! DELTA v2: parsing, chunk checks, and applying to a fixed base.
#![no_main]
use libfuzzer_sys::fuzz_target;

const BASE: &[u8] = include_bytes!("../../fixtures/wtxt/expected/delta_base.wtxt");

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = wtxt::wtxt::delta::parse(data) {
        let _ = wtxt::wtxt::delta::check_chunks(&d);
        let _ = wtxt::wtxt::delta::minimal_changes(&d);
        let _ = wtxt::wtxt::delta::apply_extended(BASE, &d, &mut std::io::sink());
    }
});
