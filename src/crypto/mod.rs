//! Hashing, message authentication and signatures as the profile pins them.
#![forbid(unsafe_code)]

pub(crate) mod armor;
pub(crate) mod digest;
pub(crate) mod ec;
pub(crate) mod mac;
pub(crate) mod sha_pair;
pub(crate) mod sign;

pub use armor::{decrypt, encrypt, Seal, Unseal};
pub use digest::{Hash, Sha1State, Sha256State};
pub use ec::{EcPublicKey, EcSecretKey};
pub use mac::HmacKey;
pub use sign::{PublicKey, SecretKey, TrustedKeys};
