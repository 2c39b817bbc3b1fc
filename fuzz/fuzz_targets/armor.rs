//! age armor and binary age files.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static ID: OnceLock<wtxt::crypto::Unseal> = OnceLock::new();
    let unseal = ID.get_or_init(|| {
        let id = "AGE-SECRET-KEY-1GFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPYYSJZGFPQ4EGAEX"
            .parse::<age::x25519::Identity>()
            .unwrap_or_else(|_| age::x25519::Identity::generate());
        wtxt::crypto::Unseal::Identities(vec![Box::new(id)])
    });
    if let Ok(mut r) = wtxt::crypto::decrypt(data, unseal) {
        let _ = std::io::copy(&mut r, &mut std::io::sink());
    }
});
