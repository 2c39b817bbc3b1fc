//! The option pieces every entry point shares: the keys a command is given
//! ([`Keys`]), the `meta` fields it may set ([`MetaFields`]) and how it
//! stores what it writes ([`Output`]).
//!
//! Keys arrive as paths: flags of the command line, fields of the daemon's
//! TOML, arguments of the Python package. Those paths are one value,
//! [`KeyFiles`], and [`KeyFiles::load`] is the one place a key file is read,
//! once, at the edge. A new kind of key is a field of both structs and a
//! line of `load`; every entry point then passes it on unchanged.

use std::path::PathBuf;

use crate::crypto::ec::EcSecretKey;
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::{SecretKey, TrustedKeys};
use crate::error::Result;
use crate::format::split::PartSize;
use crate::format::syntax::DigestForm;
use crate::format::verify::InputTrust;

/// The key files a command is told of, as paths: what a flag, a config
/// field or a Python argument names.
#[derive(Clone, Debug, Default)]
pub struct KeyFiles {
    /// HMAC key (hex).
    pub hmac_key: Option<PathBuf>,
    /// With no `hmac_key` file, take the key from `WTXT_HMAC_KEY` (the
    /// command line and the daemon do; the Python package names its keys).
    pub hmac_from_env: bool,
    /// With an HMAC key, accept input arrays whose hmac is all zeros.
    pub allow_unauthenticated: bool,
    /// With an HMAC key, accept inputs without the keyed tag that binds them.
    pub allow_unbound: bool,
    /// Ed25519 key that signs the output.
    pub sign_key: Option<PathBuf>,
    /// The one public key a signed input must be signed by (wins over
    /// `trusted_keys`).
    pub pubkey: Option<PathBuf>,
    /// A trusted-keys file: a signed input must be signed by one of them.
    pub trusted_keys: Option<PathBuf>,
    /// EC key that signs an OpenSSF Model Signing `model.sig` beside the output.
    pub oms_key: Option<PathBuf>,
}

impl KeyFiles {
    /// Reads every key named, each once.
    pub fn load(&self) -> Result<Keys> {
        Ok(Keys {
            hmac_key: self.hmac()?,
            allow_unauthenticated: self.allow_unauthenticated,
            allow_unbound: self.allow_unbound,
            sign_key: self.sign()?,
            trusted: self.trusted()?,
            oms_key: self.oms()?,
        })
    }

    /// The HMAC key: from its file, else (when asked) `WTXT_HMAC_KEY`, else none.
    pub fn hmac(&self) -> Result<Option<HmacKey>> {
        match &self.hmac_key {
            Some(p) => HmacKey::from_file(p).map(Some),
            None if self.hmac_from_env => HmacKey::from_file_or_env(None),
            None => Ok(None),
        }
    }

    /// The signing key, if named.
    pub fn sign(&self) -> Result<Option<SecretKey>> {
        self.sign_key.as_deref().map(SecretKey::from_file).transpose()
    }

    /// The trusted keys: `pubkey` alone, else the `trusted_keys` file, else none.
    pub fn trusted(&self) -> Result<Option<TrustedKeys>> {
        TrustedKeys::from_flags(self.pubkey.as_deref(), self.trusted_keys.as_deref())
    }

    /// The OMS signing key, if named.
    pub fn oms(&self) -> Result<Option<EcSecretKey>> {
        self.oms_key.as_deref().map(EcSecretKey::from_file).transpose()
    }
}

/// The keys a command is given, read once: what its WTXT inputs must prove,
/// and what its output is HMAC'd and signed with.
#[derive(Default)]
pub struct Keys {
    /// Every input array must authenticate with it; the output is HMAC'd with it.
    pub hmac_key: Option<HmacKey>,
    /// Signs the output.
    pub sign_key: Option<SecretKey>,
    /// Keys that signed inputs must be signed by.
    pub trusted: Option<TrustedKeys>,
    /// Signs an OpenSSF Model Signing `model.sig` beside the output.
    pub oms_key: Option<EcSecretKey>,
    /// With an HMAC key, accept input arrays whose hmac is all zeros.
    pub allow_unauthenticated: bool,
    /// With an HMAC key, accept inputs without the keyed tag that binds them.
    pub allow_unbound: bool,
}

impl Keys {
    /// What the inputs must prove before the output is signed or HMAC'd.
    pub fn trust(&self) -> InputTrust {
        InputTrust::new(
            self.hmac_key.as_ref(),
            self.trusted.as_ref(),
            self.sign_key.as_ref(),
            self.allow_unauthenticated,
            self.allow_unbound,
        )
    }
}

/// The `meta` fields a command may set; unset ones take the writer's
/// defaults (section 3 of docs/FORMAT.md) or the base's.
#[derive(Default)]
pub struct MetaFields {
    /// Generation number.
    pub gen: Option<u64>,
    /// Timestamp (default: `SOURCE_DATE_EPOCH`, else now).
    pub ts: Option<String>,
    /// `build` token.
    pub build: Option<String>,
    /// `schema` token.
    pub schema: Option<String>,
    /// `host` token.
    pub host: Option<String>,
    /// `cuda` token.
    pub cuda: Option<String>,
}

/// How a command stores the snapshot it writes.
#[derive(Clone, Copy, Default)]
pub struct Output {
    /// Largest file (split above it).
    pub part_size: PartSize,
    /// The digest form of a new snapshot (commands that write a snapshot
    /// from others keep their form).
    pub digest: DigestForm,
}
