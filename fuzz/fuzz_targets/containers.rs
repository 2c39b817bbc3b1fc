//! .npy headers, safetensors (lossless), VOLP, and the Git filter's clean/smudge.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wtxt::convert::npy::parse_header(data);
    if let Ok(arrays) = wtxt::convert::safetensors::safetensors_to_arrays(data) {
        let mut back = Vec::new();
        wtxt::convert::safetensors::write_pinned(&arrays, &mut back).expect("rebuilds");
        assert_eq!(back, data, "safetensors round trip is byte-identical");
    }
    let _ = wtxt::convert::volp::read(data);
    let _ = wtxt::git::smudge(data, &Default::default());
});
