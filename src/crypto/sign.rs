//! Ed25519 keys and signatures: PKCS#8/SPKI PEM as openssl writes them,
//! OpenSSH ed25519 keys, and trusted-keys files.

use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

use crate::crypto::digest::keyid;
use crate::crypto::mac::read_small_text;
use crate::error::{reason, Error, Reason, Result};

/// A signing key and its key id.
pub struct SecretKey {
    key: SigningKey,
}

impl SecretKey {
    /// Reads a PKCS#8 PEM (`openssl genpkey -algorithm ed25519`) or an
    /// unencrypted OpenSSH ed25519 private key.
    pub fn from_file(path: &Path) -> Result<SecretKey> {
        let text = read_small_text(path)?;
        SecretKey::parse(&text).map_err(|m| Error::input(Default::default(), m).in_file(path))
    }

    /// Parses the text of a key file.
    pub fn parse(text: &str) -> std::result::Result<SecretKey, Reason> {
        let t = text.trim_start();
        if t.starts_with("-----BEGIN PRIVATE KEY-----") {
            SigningKey::from_pkcs8_pem(t)
                .map(|key| SecretKey { key })
                .map_err(|e| reason!("expected an Ed25519 PKCS#8 private key: {e}"))
        } else if t.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----") {
            parse_openssh_private(t).map(|seed| SecretKey { key: SigningKey::from_bytes(&seed) })
        } else {
            Err("expected an Ed25519 private key (PKCS#8 PEM or OpenSSH)".into())
        }
    }

    /// A fresh key from the operating system's random source.
    pub fn generate() -> Result<SecretKey> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| Error::usage(format!("no random source: {e}")))?;
        Ok(SecretKey { key: SigningKey::from_bytes(&seed) })
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey { key: self.key.verifying_key() }
    }

    /// A deterministic (RFC 8032) signature over `msg`.
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.key.sign(msg).to_bytes()
    }

    /// The key as PKCS#8 v1 PEM, byte for byte what openssl writes.
    pub fn to_pkcs8_pem(&self) -> String {
        const PREFIX: [u8; 16] =
            [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
        let mut der = PREFIX.to_vec();
        der.extend_from_slice(&self.key.to_bytes());
        pem("PRIVATE KEY", &der)
    }
}

/// An Ed25519 public key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PublicKey {
    key: VerifyingKey,
}

impl PublicKey {
    /// From the 32 raw bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> std::result::Result<PublicKey, Reason> {
        VerifyingKey::from_bytes(bytes)
            .map(|key| PublicKey { key })
            .map_err(|_| Reason::new("expected a valid Ed25519 public key"))
    }

    /// Reads an SPKI PEM or an `ssh-ed25519 AAAA... comment` line.
    pub fn from_file(path: &Path) -> Result<PublicKey> {
        let text = read_small_text(path)?;
        PublicKey::parse(&text).map_err(|m| Error::input(Default::default(), m).in_file(path))
    }

    /// Parses the text of a public key file.
    pub fn parse(text: &str) -> std::result::Result<PublicKey, Reason> {
        let t = text.trim();
        if t.starts_with("-----BEGIN PUBLIC KEY-----") {
            VerifyingKey::from_public_key_pem(t)
                .map(|key| PublicKey { key })
                .map_err(|e| reason!("expected an Ed25519 SPKI public key: {e}"))
        } else if t.starts_with("ssh-ed25519 ") {
            parse_openssh_public(t)
        } else {
            Err("expected an Ed25519 public key (SPKI PEM or ssh-ed25519 line)".into())
        }
    }

    /// The 32 raw bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// The profile's key id: first 8 bytes of SHA256(public key).
    pub fn keyid(&self) -> [u8; 8] {
        keyid(&self.to_bytes())
    }

    /// Strict verification: rejects non-canonical and small-order signatures.
    pub fn verify(&self, msg: &[u8], sig: &[u8; 64]) -> bool {
        let sig = Signature::from_bytes(sig);
        self.key.verify_strict(msg, &sig).is_ok()
    }

    /// The key as SPKI PEM, as `openssl pkey -pubout` writes it.
    pub fn to_spki_pem(&self) -> String {
        const PREFIX: [u8; 12] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];
        let mut der = PREFIX.to_vec();
        der.extend_from_slice(&self.to_bytes());
        pem("PUBLIC KEY", &der)
    }
}

fn pem(label: &str, der: &[u8]) -> String {
    let b = B64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A cursor over OpenSSH's wire encoding (RFC 4251 strings and u32s).
struct Wire<'a>(&'a [u8]);

impl<'a> Wire<'a> {
    fn u32(&mut self) -> std::result::Result<u32, Reason> {
        let (h, t) = self.0.split_at_checked(4).ok_or("OpenSSH key: truncated")?;
        self.0 = t;
        Ok(u32::from_be_bytes(h.try_into().expect("4 bytes")))
    }

    fn string(&mut self) -> std::result::Result<&'a [u8], Reason> {
        let n = self.u32()? as usize;
        let (h, t) = self.0.split_at_checked(n).ok_or("OpenSSH key: truncated string")?;
        self.0 = t;
        Ok(h)
    }
}

fn parse_openssh_private(text: &str) -> std::result::Result<[u8; 32], Reason> {
    let body: String = text
        .lines()
        .map(str::trim)
        .skip_while(|l| !l.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END OPENSSH PRIVATE KEY-----"))
        .collect();
    let raw = B64.decode(body.as_bytes()).map_err(|e| reason!("OpenSSH key: bad base64: {e}"))?;
    let rest = raw.strip_prefix(b"openssh-key-v1\0").ok_or("OpenSSH key: expected magic openssh-key-v1")?;
    let mut w = Wire(rest);
    let cipher = w.string()?;
    let kdf = w.string()?;
    let _kdf_options = w.string()?;
    if cipher != b"none" || kdf != b"none" {
        return Err("OpenSSH key is encrypted: expected an unencrypted key (ssh-keygen -p -N '')".into());
    }
    if w.u32()? != 1 {
        return Err("OpenSSH key: expected exactly one key".into());
    }
    let _public_blob = w.string()?;
    let mut p = Wire(w.string()?);
    if p.u32()? != p.u32()? {
        return Err("OpenSSH key: check bytes differ".into());
    }
    if p.string()? != b"ssh-ed25519" {
        return Err("OpenSSH key: expected key type ssh-ed25519".into());
    }
    let public = p.string()?;
    let secret = p.string()?;
    if public.len() != 32 || secret.len() != 64 || &secret[32..] != public {
        return Err("OpenSSH key: expected a 32-byte public and 64-byte secret ed25519 key".into());
    }
    let seed: [u8; 32] = secret[..32].try_into().expect("32 bytes");
    if SigningKey::from_bytes(&seed).verifying_key().to_bytes()[..] != public[..] {
        return Err("OpenSSH key: secret and public halves do not match".into());
    }
    Ok(seed)
}

fn parse_openssh_public(line: &str) -> std::result::Result<PublicKey, Reason> {
    let b64 = line.split_whitespace().nth(1).ok_or("expected `ssh-ed25519 <base64> [comment]`")?;
    let blob = B64.decode(b64).map_err(|e| reason!("ssh-ed25519 key: bad base64: {e}"))?;
    let mut w = Wire(&blob);
    if w.string()? != b"ssh-ed25519" {
        return Err("expected key type ssh-ed25519".into());
    }
    let key: [u8; 32] = w.string()?.try_into().map_err(|_| "ssh-ed25519 key: expected 32 bytes")?;
    if !w.0.is_empty() {
        return Err("ssh-ed25519 key: trailing bytes".into());
    }
    PublicKey::from_bytes(&key)
}

/// Keys a verifier trusts: from `--pubkey` or a trusted-keys file.
#[derive(Default, Clone, Debug)]
pub struct TrustedKeys {
    keys: Vec<(PublicKey, String)>,
}

impl TrustedKeys {
    /// One key.
    pub fn single(key: PublicKey) -> TrustedKeys {
        TrustedKeys { keys: vec![(key, String::new())] }
    }

    /// Reads a trusted-keys file: one key a line,
    /// `<keyid> <base64 of the 32-byte public key> [comment]`, `#` comments.
    /// A line whose keyid does not match its key is refused. A public key
    /// file as `--pubkey` takes it (the `.pub` that `wtxt keygen` writes, an
    /// `ssh-ed25519` line) is taken too, meaning that one key.
    pub fn from_file(path: &Path) -> Result<TrustedKeys> {
        let text = read_small_text(path)?;
        TrustedKeys::parse(&text).map_err(|e| e.in_file(path))
    }

    /// Parses a trusted-keys file; errors carry the 1-based line.
    pub fn parse(text: &str) -> Result<TrustedKeys> {
        let at = |n: u64, m: &str| Error::input(crate::error::Position::Line(n), m);
        if TrustedKeys::is_one_key_file(text) {
            return PublicKey::parse(text).map(TrustedKeys::single).map_err(|m| at(1, m.as_str()));
        }
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i as u64 + 1;
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let mut parts = l.splitn(3, char::is_whitespace);
            let id = parts.next().unwrap_or_default();
            let b64 = parts.next().ok_or_else(|| at(n, "expected `<keyid> <base64 public key> [comment]`"))?;
            let comment = parts.next().unwrap_or_default().trim().to_string();
            let raw: [u8; 32] = B64
                .decode(b64.trim())
                .ok()
                .and_then(|v| v.try_into().ok())
                .ok_or_else(|| at(n, "expected the base64 of a 32-byte Ed25519 public key"))?;
            let key = PublicKey::from_bytes(&raw).map_err(|m| at(n, m.as_str()))?;
            if hex::encode(key.keyid()) != id {
                return Err(at(
                    n,
                    &format!("keyid {id} does not match its key (expected {})", hex::encode(key.keyid())),
                ));
            }
            keys.push((key, comment));
        }
        Ok(TrustedKeys { keys })
    }

    /// Whether `text` is a public key file (SPKI PEM or an `ssh-` line),
    /// which a trusted-keys file's reader takes as that one key.
    pub fn is_one_key_file(text: &str) -> bool {
        let t = text.trim_start();
        t.starts_with("-----BEGIN ") || t.starts_with("ssh-")
    }

    /// The keys of `--pubkey` (one key file) or else `--trusted-keys` (a
    /// trusted-keys file), if either is given.
    pub fn from_flags(pubkey: Option<&Path>, file: Option<&Path>) -> Result<Option<TrustedKeys>> {
        Ok(match (pubkey, file) {
            (Some(p), _) => Some(TrustedKeys::single(PublicKey::from_file(p)?)),
            (None, Some(t)) => Some(TrustedKeys::from_file(t)?),
            (None, None) => None,
        })
    }

    /// The trusted key with this keyid, if any.
    pub fn find(&self, keyid: &[u8; 8]) -> Option<&PublicKey> {
        self.keys.iter().map(|(k, _)| k).find(|k| &k.keyid() == keyid)
    }

    /// Trusts one more key (no-op when its keyid is there already).
    pub fn add(&mut self, key: PublicKey) {
        if self.find(&key.keyid()).is_none() {
            self.keys.push((key, String::new()));
        }
    }

    /// True when no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Each trusted key with the comment its line gave (empty for none).
    pub fn iter(&self) -> impl Iterator<Item = (&PublicKey, &str)> {
        self.keys.iter().map(|(k, c)| (k, c.as_str()))
    }

    /// The line a trusted-keys file holds for `key`, newline included. The
    /// comment is kept to one line of printable ASCII, so that what is
    /// appended is one key and nothing else.
    pub fn line(key: &PublicKey, comment: &str) -> String {
        let comment: String = comment.chars().map(|c| if c.is_ascii_graphic() { c } else { ' ' }).collect::<String>();
        let comment = comment.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut line = format!("{} {}", hex::encode(key.keyid()), B64.encode(key.to_bytes()));
        if !comment.is_empty() {
            line.push(' ');
            line.push_str(&comment);
        }
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_round_trip_and_sign() {
        let k = SecretKey::generate().unwrap();
        let k2 = SecretKey::parse(&k.to_pkcs8_pem()).unwrap();
        let p = PublicKey::parse(&k.public().to_spki_pem()).unwrap();
        assert_eq!(p, k2.public());
        let sig = k2.sign(b"msg");
        assert!(p.verify(b"msg", &sig));
        assert!(!p.verify(b"msh", &sig));
    }

    #[test]
    fn a_trusted_line_holds_one_key_whatever_its_comment() {
        let key = SecretKey::generate().unwrap().public();
        let line = TrustedKeys::line(&key, "ci\n4141414141414141 AAAA evil\r\t key");
        assert_eq!(line.matches('\n').count(), 1);
        let parsed = TrustedKeys::parse(&line).unwrap();
        let all: Vec<_> = parsed.iter().collect();
        assert_eq!(all.len(), 1);
        assert_eq!(*all[0].0, key);
        assert_eq!(all[0].1, "ci 4141414141414141 AAAA evil key");
    }

    #[test]
    fn trusted_keys_reject_wrong_keyid() {
        let k = SecretKey::generate().unwrap().public();
        let line = format!("{} {}\n", "00".repeat(8), B64.encode(k.to_bytes()));
        assert_eq!(TrustedKeys::parse(&line).unwrap_err().position(), crate::error::Position::Line(1));
        let ok = format!("# c\n{} {} me\n", hex::encode(k.keyid()), B64.encode(k.to_bytes()));
        assert!(TrustedKeys::parse(&ok).unwrap().find(&k.keyid()).is_some());
    }
}
