//! WTXT -> container in one pass (`convert::direct`, planned from
//! `wtxt::outline`): any bytes as a WTXT never panic, and whatever the
//! direct path writes is exactly what the ordinary path writes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wtxt::convert::{by_name, foreign_metadata};

fuzz_target!(|data: &[u8]| {
    thread_local! {
        static DIR: tempfile::TempDir = tempfile::tempdir().expect("a temporary folder");
    }
    DIR.with(|dir| {
        let input = dir.path().join("in.wtxt");
        std::fs::write(&input, data).expect("write the input");
        let _ = wtxt::store::outline(&input, &|n| n.starts_with("__"), 1 << 20);
        for to in ["safetensors", "aero", "npz"] {
            let fmt = by_name(to).expect("a container");
            let out = dir.path().join(format!("out.{to}"));
            let _ = std::fs::remove_file(&out);
            let direct = wtxt::convert::write_direct(&input, None, &Default::default(), fmt, &out, &|a| {
                Ok((foreign_metadata(a, fmt)?.0, ()))
            });
            if let Ok(Some(_)) = direct {
                let got = std::fs::read(&out).expect("the direct output");
                let loaded = wtxt::format::load(data, data.len() as u64, &Default::default()).expect("it verified");
                let plain = dir.path().join(format!("plain.{to}"));
                wtxt::convert::write_arrays_as(&foreign_metadata(loaded.arrays, fmt).expect("metadata").0, &plain, fmt)
                    .expect("the ordinary path writes it too");
                assert_eq!(got, std::fs::read(&plain).expect("the ordinary output"), "{to}");
            }
        }
    });
});
