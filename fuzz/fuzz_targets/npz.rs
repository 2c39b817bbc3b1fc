//! .npz archives (stored and deflated members) through the snapshot loader,
//! and the Git filter's exact form: whatever it reads it must rebuild
//! byte for byte.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("wtxt-fuzz-npz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join("x.npz");
    if std::fs::write(&p, data).is_ok() {
        let _ = wtxt::convert::load_inputs(&[&p], &Default::default(), &mut Vec::new());
    }
    if let Ok(arrays) = wtxt::convert::npz::read_pinned(data) {
        assert_eq!(wtxt::convert::npz::rebuild(&arrays).expect("rebuilds"), data);
    }
});
