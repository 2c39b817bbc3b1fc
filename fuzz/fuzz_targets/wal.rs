//! The daemon's WAL replay: any bytes a crash leaves are read without a
//! panic, and a path written hex-encoded comes back byte for byte.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = wtxt::daemon::Wal::parse_pending(&String::from_utf8_lossy(data));
    let path = std::path::PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(
        data.iter().copied().filter(|&b| b != 0).collect(),
    ));
    if path.as_os_str().is_empty() {
        return;
    }
    let line = format!("snapshot requested gen=7 ts=1 pathhex={}\n", hex::encode(path.as_os_str().as_encoded_bytes()));
    assert_eq!(wtxt::daemon::Wal::parse_pending(&line), vec![(7, Some(path))]);
});
