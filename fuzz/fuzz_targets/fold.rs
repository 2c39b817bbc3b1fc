//! FOLD / .mind: header, index JSON, Reed-Solomon repair, CRC32C, SHA-256,
//! zstd; whatever reads must write back and read again to the same arrays.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wtxt::convert::fold;
use wtxt::model::ArrayData;

fuzz_target!(|data: &[u8]| {
    let src = ArrayData::Owned(std::sync::Arc::new(data.to_vec()));
    if let Ok(arrays) = fold::read(&src, &mut Vec::new()) {
        let mut bytes = std::io::Cursor::new(Vec::new());
        fold::write_to(&arrays, &mut bytes).expect("what was read can be written");
        let again = fold::read(&ArrayData::Owned(std::sync::Arc::new(bytes.into_inner())), &mut Vec::new())
            .expect("reads back");
        assert_eq!(again.len(), arrays.len());
    }
});
