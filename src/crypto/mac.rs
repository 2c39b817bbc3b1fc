//! Per-array HMAC-SHA256 and the hex key files that hold its key.

use std::path::Path;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::error::{reason, Error, Reason, Result};
use crate::limits::MAX_KEY_FILE;

/// HMAC-SHA256 as used for `arr ... hmac=`.
pub type HmacSha256 = Hmac<Sha256>;

/// Environment variable holding a hex HMAC key when no key file is given.
pub const HMAC_KEY_ENV: &str = "WTXT_HMAC_KEY";

/// A secret HMAC key (at least 32 bytes).
#[derive(Clone)]
pub struct HmacKey(Vec<u8>);

impl std::fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HmacKey({} bytes)", self.0.len())
    }
}

impl HmacKey {
    /// Parses the key as hex: at least 64 hex digits, surrounding whitespace ignored.
    pub fn from_hex(text: &str) -> std::result::Result<HmacKey, Reason> {
        let t = text.trim();
        if t.len() < 64 {
            return Err(reason!("expected at least 64 hex digits, found {}", t.len()));
        }
        if !t.len().is_multiple_of(2) {
            return Err("expected an even number of hex digits".into());
        }
        hex::decode(t).map(HmacKey).map_err(|e| reason!("expected hex digits: {e}"))
    }

    /// Reads a key file.
    pub fn from_file(path: &Path) -> Result<HmacKey> {
        let text = read_small_text(path)?;
        HmacKey::from_hex(&text).map_err(|m| Error::input(Default::default(), format!("HMAC key: {m}")).in_file(path))
    }

    /// The key from `path`, else from `WTXT_HMAC_KEY`, else none.
    pub fn from_file_or_env(path: Option<&Path>) -> Result<Option<HmacKey>> {
        if let Some(p) = path {
            return HmacKey::from_file(p).map(Some);
        }
        match std::env::var(HMAC_KEY_ENV) {
            Ok(v) => HmacKey::from_hex(&v).map(Some).map_err(|m| Error::usage(format!("{HMAC_KEY_ENV}: {m}"))),
            Err(_) => Ok(None),
        }
    }

    /// A running HMAC over `salt || raw`; feed `raw` with `update`.
    pub fn start(&self, salt: &[u8; 8]) -> HmacSha256 {
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(salt);
        m
    }

    /// `start` as a [`crate::crypto::digest::Sha256State`] (the inner
    /// hash after the padded key and `salt`), for a tag whose bytes are
    /// hashed on several processes in turn; [`HmacKey::finish_resumable`]
    /// gives the tag.
    pub fn resumable(&self, salt: &[u8; 8]) -> crate::crypto::digest::Sha256State {
        let mut inner = crate::crypto::digest::Sha256State::default();
        inner.update(&self.padded(0x36));
        inner.update(salt);
        inner
    }

    /// The tag of the bytes `inner` (from [`HmacKey::resumable`]) absorbed.
    pub fn finish_resumable(&self, inner: crate::crypto::digest::Sha256State) -> [u8; 32] {
        let mut outer = crate::crypto::digest::Sha256State::default();
        outer.update(&self.padded(0x5c));
        outer.update(&inner.finalize());
        outer.finalize()
    }

    /// Whether the tag of the bytes `inner` absorbed is `expected`,
    /// compared in constant time.
    pub fn verify_resumable(&self, inner: crate::crypto::digest::Sha256State, expected: &[u8; 32]) -> bool {
        let tag = self.finish_resumable(inner);
        std::hint::black_box(tag.iter().zip(expected).fold(0u8, |d, (a, b)| d | (a ^ b))) == 0
    }

    /// The key as HMAC pads it (RFC 2104: hashed when longer than a block),
    /// XORed with `pad`.
    fn padded(&self, pad: u8) -> [u8; 64] {
        let mut k = [0u8; 64];
        if self.0.len() > 64 {
            k[..32].copy_from_slice(&crate::crypto::digest::sha256(&self.0));
        } else {
            k[..self.0.len()].copy_from_slice(&self.0);
        }
        k.map(|b| b ^ pad)
    }

    /// An array's tag in the tree form (FORMAT.md section 19):
    /// `HMAC-SHA256(K', salt || digest)` with `K' = HMAC-SHA256(key, "WT-TREE")`.
    pub fn tree_tag(&self, salt: &[u8; 8], digest: &[u8; 32]) -> [u8; 32] {
        let mut m = self.derived(crate::crypto::digest::TREE_HMAC_KEY);
        m.update(salt);
        m.update(digest);
        m.finalize().into_bytes().into()
    }

    /// A MAC under the key derived from this one for `purpose`:
    /// `HMAC-SHA256(key, purpose)`. Every 1.1 array tag is the HMAC of at
    /// least its 8 salt bytes, so a purpose shorter than that makes a key
    /// no array tag ever published, and tags of one use never serve another.
    fn derived(&self, purpose: &[u8]) -> HmacSha256 {
        debug_assert!(purpose.len() < 8, "a derivation must be shorter than a salt");
        let mut derive = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        derive.update(purpose);
        let derived = derive.finalize().into_bytes();
        HmacSha256::new_from_slice(&derived).expect("HMAC takes keys of any length")
    }

    /// The keyed tag that binds a whole file (FORMAT.md section 5):
    /// `HMAC-SHA256(HMAC-SHA256(key, "WT-BIND"), message)`.
    pub fn bind_tag(&self, message: &[u8]) -> [u8; 32] {
        let mut m = self.derived(crate::crypto::digest::BIND_HMAC_KEY);
        m.update(message);
        m.finalize().into_bytes().into()
    }

    /// Whether `expected` is the keyed tag of `message`, compared in constant time.
    pub fn verify_bind_tag(&self, message: &[u8], expected: &[u8; 32]) -> bool {
        let mut m = self.derived(crate::crypto::digest::BIND_HMAC_KEY);
        m.update(message);
        verify_tag(m, expected)
    }

    /// Whether `expected` is the tree-form tag of `digest`, compared in
    /// constant time.
    pub fn verify_tree_tag(&self, salt: &[u8; 8], digest: &[u8; 32], expected: &[u8; 32]) -> bool {
        let tag = self.tree_tag(salt, digest);
        std::hint::black_box(tag.iter().zip(expected).fold(0u8, |d, (a, b)| d | (a ^ b))) == 0
    }

    /// A name for the key that does not give it away: the first 8 bytes of
    /// HMAC-SHA256(key, "wtxt key fingerprint"), hex. Processes that must
    /// hash with one key (the ranks of a distributed save) compare it.
    pub fn fingerprint(&self) -> String {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(b"wtxt key fingerprint");
        hex::encode(&mac.finalize().into_bytes()[..8])
    }

    /// HMAC-SHA256(key, salt || raw).
    pub fn compute(&self, salt: &[u8; 8], raw: &[u8]) -> [u8; 32] {
        let mut m = self.start(salt);
        m.update(raw);
        m.finalize().into_bytes().into()
    }
}

/// Checks a finished HMAC against an expected tag in constant time.
pub fn verify_tag(mac: HmacSha256, expected: &[u8; 32]) -> bool {
    mac.verify_slice(expected).is_ok()
}

/// Reads a small text file (keys, trusted keys, identities, configuration):
/// a regular file of at most `MAX_KEY_FILE` bytes, read through a bounded
/// reader (see [`crate::fs::read_small_file`]).
pub fn read_small_text(path: &Path) -> Result<String> {
    let bytes = crate::fs::read_small_file(path, MAX_KEY_FILE, crate::fs::Links::Follow)?
        .ok_or_else(|| Error::io(path, std::io::Error::from(std::io::ErrorKind::NotFound)))?;
    String::from_utf8(bytes).map_err(|_| Error::input(Default::default(), "expected text (UTF-8)").in_file(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_key_rules() {
        assert!(HmacKey::from_hex(&"ab".repeat(31)).is_err());
        assert!(HmacKey::from_hex(&format!("  {}\n", "ab".repeat(32))).is_ok());
        assert!(HmacKey::from_hex(&"zz".repeat(32)).is_err());
    }

    #[test]
    fn streaming_equals_one_shot() {
        let k = HmacKey::from_hex(&"01".repeat(32)).unwrap();
        let salt = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut m = k.start(&salt);
        m.update(b"hello ");
        m.update(b"world");
        assert!(verify_tag(m, &k.compute(&salt, b"hello world")));
    }

    #[test]
    fn a_resumable_tag_is_the_hmac() {
        for len in [32usize, 64, 65, 100] {
            let key = HmacKey((0..len as u8).collect());
            let raw: Vec<u8> = (0..777u32).map(|i| i as u8).collect();
            let mut inner = key.resumable(&[7; 8]);
            inner.update(&raw[..300]);
            inner.update(&raw[300..]);
            let tag = key.compute(&[7; 8], &raw);
            assert!(key.verify_resumable(inner.clone(), &tag));
            let mut other = tag;
            other[31] ^= 1;
            assert!(!key.verify_resumable(inner.clone(), &other));
            assert_eq!(key.finish_resumable(inner), tag, "key of {len} bytes");
        }
    }
}
