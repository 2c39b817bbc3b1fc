//! NIST elliptic-curve keys (P-256, P-384, P-521) for OpenSSF Model Signing
//! signatures: ECDSA with the hash the curve's size calls for (SHA-256,
//! SHA-384, SHA-512), DER-encoded, as `model_signing sign key` writes them.
//! Keys are read as openssl writes them: PKCS#8 (`BEGIN PRIVATE KEY`), SEC1
//! (`BEGIN EC PRIVATE KEY`, after an optional `EC PARAMETERS` block) and SPKI
//! public keys.

use std::path::Path;

use p256::ecdsa::signature::{Signer, Verifier};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding};

use crate::crypto::mac::read_small_text;
use crate::error::{reason, Error, Reason, Result};

/// An ECDSA signing key on one of the curves OMS accepts.
pub enum EcSecretKey {
    /// NIST P-256 (ECDSA with SHA-256).
    P256(p256::ecdsa::SigningKey),
    /// NIST P-384 (ECDSA with SHA-384).
    P384(p384::ecdsa::SigningKey),
    /// NIST P-521 (ECDSA with SHA-512).
    P521(p521::ecdsa::SigningKey),
}

/// An ECDSA public key on one of the curves OMS accepts.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum EcPublicKey {
    /// NIST P-256.
    P256(p256::ecdsa::VerifyingKey),
    /// NIST P-384.
    P384(p384::ecdsa::VerifyingKey),
    /// NIST P-521.
    P521(p521::ecdsa::VerifyingKey),
}

/// The same expression for each curve's key: the three key types share
/// their method names but not a trait that could carry them.
macro_rules! each_curve {
    ($ty:ident, $v:expr, $k:ident => $e:expr) => {
        match $v {
            $ty::P256($k) => $e,
            $ty::P384($k) => $e,
            $ty::P521($k) => $e,
        }
    };
}

const CURVES: &str = "NIST P-256, P-384 or P-521";

impl std::fmt::Debug for EcSecretKey {
    /// The curve only: a secret is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let curve = match self {
            EcSecretKey::P256(_) => "P-256",
            EcSecretKey::P384(_) => "P-384",
            EcSecretKey::P521(_) => "P-521",
        };
        write!(f, "EcSecretKey({curve})")
    }
}

impl EcSecretKey {
    /// Reads an EC private key file (PKCS#8 or SEC1 PEM, unencrypted).
    pub fn from_file(path: &Path) -> Result<EcSecretKey> {
        let text = read_small_text(path)?;
        EcSecretKey::parse(&text).map_err(|m| Error::input(Default::default(), m).in_file(path))
    }

    /// Parses the text of an EC private key file.
    pub fn parse(text: &str) -> std::result::Result<EcSecretKey, Reason> {
        if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") || text.contains("Proc-Type: 4,ENCRYPTED") {
            return Err("the EC key is encrypted: give an unencrypted key".into());
        }
        if let Some(block) = pem_block(text, "PRIVATE KEY") {
            return p256::ecdsa::SigningKey::from_pkcs8_pem(block)
                .map(EcSecretKey::P256)
                .or_else(|_| p384::ecdsa::SigningKey::from_pkcs8_pem(block).map(EcSecretKey::P384))
                .or_else(|_| p521::ecdsa::SigningKey::from_pkcs8_pem(block).map(EcSecretKey::P521))
                .map_err(|_| reason!("expected a PKCS#8 EC private key on {CURVES}"));
        }
        if let Some(block) = pem_block(text, "EC PRIVATE KEY") {
            return p256::SecretKey::from_sec1_pem(block)
                .map(|k| EcSecretKey::P256(k.into()))
                .or_else(|_| p384::SecretKey::from_sec1_pem(block).map(|k| EcSecretKey::P384(k.into())))
                .or_else(|_| p521::SecretKey::from_sec1_pem(block).map(|k| EcSecretKey::P521(k.into())))
                .map_err(|_| reason!("expected a SEC1 EC private key on {CURVES}"));
        }
        Err(reason!("expected an EC private key on {CURVES} (PKCS#8 or SEC1 PEM)"))
    }

    /// A fresh P-256 key from the operating system's random source.
    pub fn generate_p256() -> Result<EcSecretKey> {
        loop {
            let mut bytes = [0u8; 32];
            getrandom::fill(&mut bytes).map_err(|e| Error::usage(format!("no random source: {e}")))?;
            // A value at or above the group order is drawn again (p < 2^-32).
            if let Ok(k) = p256::ecdsa::SigningKey::from_slice(&bytes) {
                return Ok(EcSecretKey::P256(k));
            }
        }
    }

    /// The public half.
    pub fn public(&self) -> EcPublicKey {
        match self {
            EcSecretKey::P256(k) => EcPublicKey::P256(*k.verifying_key()),
            EcSecretKey::P384(k) => EcPublicKey::P384(*k.verifying_key()),
            EcSecretKey::P521(k) => EcPublicKey::P521(*k.verifying_key()),
        }
    }

    /// A deterministic (RFC 6979) ECDSA signature over `msg`, DER-encoded.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        each_curve!(EcSecretKey, self, k => {
            let sig: ecdsa::Signature<_> = k.sign(msg);
            sig.to_der().as_bytes().to_vec()
        })
    }

    /// The key as PKCS#8 PEM, as `openssl pkcs8 -topk8 -nocrypt` writes it.
    pub fn to_pkcs8_pem(&self) -> String {
        each_curve!(EcSecretKey, self, k => k
            .to_pkcs8_pem(LineEnding::LF)
            .map(|p| p.to_string())
            .expect("a valid key encodes"))
    }
}

impl EcPublicKey {
    /// Reads an SPKI PEM public key file.
    pub fn from_file(path: &Path) -> Result<EcPublicKey> {
        let text = read_small_text(path)?;
        EcPublicKey::parse(&text).map_err(|m| Error::input(Default::default(), m).in_file(path))
    }

    /// Parses an SPKI PEM (`BEGIN PUBLIC KEY`).
    pub fn parse(text: &str) -> std::result::Result<EcPublicKey, Reason> {
        let Some(block) = pem_block(text, "PUBLIC KEY") else {
            return Err(reason!("expected an EC public key on {CURVES} (SPKI PEM)"));
        };
        p256::ecdsa::VerifyingKey::from_public_key_pem(block)
            .map(EcPublicKey::P256)
            .or_else(|_| p384::ecdsa::VerifyingKey::from_public_key_pem(block).map(EcPublicKey::P384))
            .or_else(|_| p521::ecdsa::VerifyingKey::from_public_key_pem(block).map(EcPublicKey::P521))
            .map_err(|_| reason!("expected an EC public key on {CURVES} (another curve or key type?)"))
    }

    /// The key as SPKI PEM, byte for byte as Python's `cryptography` and
    /// openssl write it: OMS names a key by the SHA-256 of this text.
    pub fn to_spki_pem(&self) -> String {
        each_curve!(EcPublicKey, self, k => k.to_public_key_pem(LineEnding::LF).expect("a valid key encodes"))
    }

    /// OMS's key hint: hex SHA-256 of [`EcPublicKey::to_spki_pem`].
    pub fn hint(&self) -> String {
        hex::encode(crate::crypto::digest::sha256(self.to_spki_pem().as_bytes()))
    }

    /// Checks a DER-encoded ECDSA signature over `msg`.
    pub fn verify(&self, msg: &[u8], der: &[u8]) -> bool {
        each_curve!(EcPublicKey, self, k => ecdsa::Signature::from_der(der).is_ok_and(|s| k.verify(msg, &s).is_ok()))
    }
}

/// The first PEM block labelled `label`, from its BEGIN line to its END line.
fn pem_block<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)?;
    let stop = start + text[start..].find(&end)? + end.len();
    Some(&text[start..stop])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_key_signs_and_round_trips() {
        let k = EcSecretKey::generate_p256().unwrap();
        let again = EcSecretKey::parse(&k.to_pkcs8_pem()).unwrap();
        let public = EcPublicKey::parse(&again.public().to_spki_pem()).unwrap();
        assert_eq!(public, k.public());
        let sig = k.sign(b"payload");
        assert_eq!(sig, again.sign(b"payload"), "RFC 6979 signatures are deterministic");
        assert!(public.verify(b"payload", &sig));
        assert!(!public.verify(b"payloae", &sig));
        assert!(!public.verify(b"payload", &sig[1..]));
    }

    #[test]
    fn refuses_other_keys() {
        let ed = crate::crypto::sign::SecretKey::generate().unwrap();
        assert!(EcSecretKey::parse(&ed.to_pkcs8_pem()).is_err());
        assert!(EcPublicKey::parse(&ed.public().to_spki_pem()).is_err());
        assert!(EcSecretKey::parse("-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
            .unwrap_err()
            .as_str()
            .contains("encrypted"));
    }
}
