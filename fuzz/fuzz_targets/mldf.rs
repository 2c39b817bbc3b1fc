//! MLDF: header, descriptors, metadata table, allocation table; whatever
//! reads must write back and read again to the same arrays.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wtxt::convert::mldf;
use wtxt::model::ArrayData;

fuzz_target!(|data: &[u8]| {
    let src = ArrayData::Owned(std::sync::Arc::new(data.to_vec()));
    if let Ok(arrays) = mldf::read(&src, &mut Vec::new()) {
        if let Ok(bytes) = mldf::write(&arrays) {
            let again = mldf::read(&ArrayData::Owned(std::sync::Arc::new(bytes)), &mut Vec::new()).expect("reads back");
            assert_eq!(again.len(), arrays.len());
        }
    }
});
