//! .npz archives (stored and deflated members) through the snapshot loader.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("wtxt-fuzz-npz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join("x.npz");
    if std::fs::write(&p, data).is_ok() {
        let _ = wtxt::convert::load_inputs(&[&p], &Default::default());
    }
});
