//! The option pieces every entry point shares: the keys a command is given
//! ([`KeyFiles`], read into [`Keys`]), the `meta` fields it may set
//! ([`MetaFields`]) and how it stores what it writes ([`Output`], from
//! [`PartSizeChoice`] and [`DigestChoice`]).
//!
//! Each piece is declared once and is itself what every edge parses: a
//! clap argument group the commands flatten (so `--sign-key` is one
//! declaration), a serde table the daemon's TOML and the Python package's
//! settings are read into, and the fields `git config` fills. A new kind of
//! key is a field of its group here, a line of [`KeyFiles::load`] and of
//! [`KeyFiles::or`]; the command line, the daemon's TOML and the Python
//! settings then take it with no line of their own.

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

use crate::crypto::ec::EcSecretKey;
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::{SecretKey, TrustedKeys};
use crate::error::Result;
use crate::format::split::PartSize;
use crate::format::syntax::DigestForm;
use crate::format::verify::InputTrust;

/// An HMAC key, for what is read and what is written.
#[derive(Args, Clone, Debug, Default)]
pub struct HmacFile {
    /// HMAC key file (hex, at least 64 digits); else $WTXT_HMAC_KEY. With a
    /// key, every array read must authenticate.
    #[arg(long, value_name = "FILE")]
    pub hmac_key: Option<PathBuf>,
    /// With an HMAC key: accept arrays whose hmac is all zeros (reported as unauthenticated).
    #[arg(long)]
    pub allow_unauthenticated: bool,
    /// With an HMAC key: accept a file without the keyed tag that binds its
    /// generation, names and set of arrays (a 1.1 file from a writer that
    /// binds nothing; reported as unbound).
    #[arg(long)]
    pub allow_unbound: bool,
    /// With no `hmac_key` file, take the key from `WTXT_HMAC_KEY`: the
    /// command line and the daemon do, the Python package names its keys.
    #[arg(skip = true)]
    pub from_env: bool,
}

/// The Ed25519 key that signs what a command writes.
#[derive(Args, Clone, Debug, Default)]
pub struct SignFile {
    /// Ed25519 signing key (PKCS#8 PEM or OpenSSH) for what is written.
    #[arg(long, value_name = "KEY.pem")]
    pub sign_key: Option<PathBuf>,
}

/// The keys whose signatures count.
#[derive(Args, Clone, Debug, Default)]
pub struct TrustFiles {
    /// Trust this public key (SPKI PEM or ssh-ed25519 line): a signed input
    /// must be signed by it.
    #[arg(long, value_name = "PUB.pem", conflicts_with = "trusted_keys")]
    pub pubkey: Option<PathBuf>,
    /// Trust the keys in this file (`<keyid> <base64 key> [comment]` lines;
    /// default, inside a repository: `git config wtxt.trustedKeys`).
    #[arg(long, value_name = "FILE")]
    pub trusted_keys: Option<PathBuf>,
}

/// The EC key of an OpenSSF Model Signing `model.sig` beside what is written.
#[derive(Args, Clone, Debug, Default)]
pub struct OmsFile {
    /// Also write an OMS `model.sig` beside the snapshot, signed with this
    /// EC key (P-256/384/521, PKCS#8 or SEC1 PEM).
    #[arg(long, value_name = "EC.pem")]
    pub oms_key: Option<PathBuf>,
}

/// The key files a command is told of, as paths: what its flags, the
/// daemon's TOML or a Python argument name.
#[derive(Args, Deserialize, Clone, Debug, Default)]
#[serde(from = "KeyFields")]
pub struct KeyFiles {
    #[command(flatten)]
    /// `--hmac-key` and what it lets pass.
    pub hmac: HmacFile,
    #[command(flatten)]
    /// `--sign-key`.
    pub sign: SignFile,
    #[command(flatten)]
    /// `--pubkey` or `--trusted-keys`.
    pub trust: TrustFiles,
    #[command(flatten)]
    /// `--oms-key`.
    pub oms: OmsFile,
}

/// [`KeyFiles`] as a table names them, one key a field (serde's nested
/// `flatten` cannot refuse an unknown field, and the daemon's TOML does).
#[derive(Deserialize)]
struct KeyFields {
    hmac_key: Option<PathBuf>,
    #[serde(default)]
    allow_unauthenticated: bool,
    #[serde(default)]
    allow_unbound: bool,
    sign_key: Option<PathBuf>,
    pubkey: Option<PathBuf>,
    trusted_keys: Option<PathBuf>,
    oms_key: Option<PathBuf>,
}

impl From<KeyFields> for KeyFiles {
    /// A table's keys: with no `hmac_key`, `WTXT_HMAC_KEY` counts, as on
    /// the command line.
    fn from(f: KeyFields) -> KeyFiles {
        KeyFiles {
            hmac: HmacFile {
                hmac_key: f.hmac_key,
                allow_unauthenticated: f.allow_unauthenticated,
                allow_unbound: f.allow_unbound,
                from_env: true,
            },
            sign: SignFile { sign_key: f.sign_key },
            trust: TrustFiles { pubkey: f.pubkey, trusted_keys: f.trusted_keys },
            oms: OmsFile { oms_key: f.oms_key },
        }
    }
}

impl KeyFiles {
    /// Reads every key named, each once.
    pub fn load(&self) -> Result<Keys> {
        Ok(Keys {
            hmac_key: self.hmac.key()?,
            allow_unauthenticated: self.hmac.allow_unauthenticated,
            allow_unbound: self.hmac.allow_unbound,
            sign_key: self.sign.key()?,
            trusted: self.trust.keys()?,
            oms_key: self.oms.key()?,
        })
    }

    /// `self` with every key it does not name taken from `other` (flags
    /// over a config file).
    pub fn or(self, other: KeyFiles) -> KeyFiles {
        KeyFiles {
            hmac: HmacFile {
                hmac_key: self.hmac.hmac_key.or(other.hmac.hmac_key),
                allow_unauthenticated: self.hmac.allow_unauthenticated || other.hmac.allow_unauthenticated,
                allow_unbound: self.hmac.allow_unbound || other.hmac.allow_unbound,
                from_env: self.hmac.from_env,
            },
            sign: SignFile { sign_key: self.sign.sign_key.or(other.sign.sign_key) },
            trust: match (&self.trust.pubkey, &self.trust.trusted_keys) {
                (None, None) => other.trust,
                _ => self.trust,
            },
            oms: OmsFile { oms_key: self.oms.oms_key.or(other.oms.oms_key) },
        }
    }
}

impl HmacFile {
    /// The key: from its file, else (when asked) `WTXT_HMAC_KEY`, else none.
    pub fn key(&self) -> Result<Option<HmacKey>> {
        match &self.hmac_key {
            Some(p) => HmacKey::from_file(p).map(Some),
            None if self.from_env => HmacKey::from_file_or_env(None),
            None => Ok(None),
        }
    }
}

impl SignFile {
    /// The key, if named.
    pub fn key(&self) -> Result<Option<SecretKey>> {
        self.sign_key.as_deref().map(SecretKey::from_file).transpose()
    }
}

impl TrustFiles {
    /// `pubkey` alone, else the `trusted_keys` file, else none.
    pub fn keys(&self) -> Result<Option<TrustedKeys>> {
        TrustedKeys::from_flags(self.pubkey.as_deref(), self.trusted_keys.as_deref())
    }
}

impl OmsFile {
    /// The key, if named.
    pub fn key(&self) -> Result<Option<EcSecretKey>> {
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
#[derive(Args, Clone, Debug, Default)]
pub struct MetaFields {
    /// Generation number (default 0, or the previous generation's + 1).
    #[arg(long, value_name = "N")]
    pub gen: Option<u64>,
    /// Timestamp YYYY-MM-DDTHH:MM:SSZ (default: $SOURCE_DATE_EPOCH, else now).
    #[arg(long, value_name = "TS")]
    pub ts: Option<String>,
    /// Build token (default none).
    #[arg(long, value_name = "TOK")]
    pub build: Option<String>,
    /// Schema token (default weights/v1).
    #[arg(long, value_name = "TOK")]
    pub schema: Option<String>,
    /// Host token (default cpu).
    #[arg(long, value_name = "TOK")]
    pub host: Option<String>,
    /// CUDA token (default off).
    #[arg(long, value_name = "TOK")]
    pub cuda: Option<String>,
}

impl MetaFields {
    /// Whether any field is given.
    pub fn is_set(&self) -> bool {
        let MetaFields { gen, ts, build, schema, host, cuda } = self;
        gen.is_some() || [ts, build, schema, host, cuda].iter().any(|t| t.is_some())
    }
}

/// How large the files of a written snapshot may be, if said.
#[derive(Args, Deserialize, Clone, Copy, Debug, Default)]
pub struct PartSizeChoice {
    /// Store a snapshot whose text exceeds SIZE (bytes, or K/M/G for KiB/MiB/GiB)
    /// split: the head at OUT, parts in OUT.parts/ (default 45M; `none`: one file).
    #[arg(long, value_name = "SIZE|none")]
    pub part_size: Option<PartSize>,
}

/// How a new snapshot's digests are computed, if said.
#[derive(Args, Deserialize, Clone, Copy, Debug, Default)]
pub struct DigestChoice {
    /// `sha256` (WTXT 1.1, the default) or `tree`: the opt-in tree form, the
    /// arrays' digests and `sha256_all` computed from the chunks' SHA-256
    /// (docs/FORMAT.md section 19).
    #[arg(long, value_name = "sha256|tree")]
    pub digest: Option<DigestForm>,
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

impl Output {
    /// What the choices say, the defaults for what they leave unsaid.
    pub fn of(parts: PartSizeChoice, digest: DigestChoice) -> Output {
        Output { part_size: parts.part_size.unwrap_or_default(), digest: digest.digest.unwrap_or_default() }
    }
}
