//! AERO: header, TOC, string table, BLAKE3, MessagePack, zstd, IHSH/PHSH;
//! whatever reads must write back and read again.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wtxt::convert::aero;
use wtxt::model::ArrayData;

fuzz_target!(|data: &[u8]| {
    let src = ArrayData::Owned(std::sync::Arc::new(data.to_vec()));
    if let Ok(arrays) = aero::read(&src, &mut Vec::new()) {
        if let Ok(bytes) = aero::write(&arrays) {
            aero::read(&ArrayData::Owned(std::sync::Arc::new(bytes)), &mut Vec::new()).expect("our output reads back");
        }
    }
});
