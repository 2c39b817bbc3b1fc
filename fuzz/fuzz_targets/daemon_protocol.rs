//! The daemon's socket protocol: one request line, parsed or refused.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(wtxt::daemon::Request::Snapshot { path, .. }) = wtxt::daemon::parse_request(data) {
        assert!(!path.as_os_str().is_empty());
    }
});
