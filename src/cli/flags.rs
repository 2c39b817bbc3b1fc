//! The flag groups many commands share, and what they become: the
//! library's option pieces ([`crate::options`]), each key file read once.

use std::path::PathBuf;

use clap::Args;

use crate::crypto::armor::{self, Unseal};
use crate::crypto::ec::EcSecretKey;
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::{SecretKey, TrustedKeys};
use crate::error::Result;
use crate::options::{KeyFiles, Keys, Output};

/// Reading age-encrypted inputs.
#[derive(Args, Debug, Default)]
pub struct SealedArg {
    /// Decrypt an age-encrypted input with this identity (age key file or OpenSSH key); repeatable.
    #[arg(short = 'i', long = "identity", value_name = "IDENTITY")]
    pub identities: Vec<PathBuf>,
    /// The input is passphrase-encrypted: passphrase from --passphrase-file or $WTXT_PASSPHRASE.
    #[arg(short = 'p', long = "passphrase", conflicts_with = "identities")]
    pub passphrase: bool,
    /// Read the passphrase from this file's first line (implies -p).
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
}

/// An HMAC key, for what is read and what is written.
#[derive(Args, Debug, Default)]
pub struct HmacArg {
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
}

/// How large the files of a written snapshot may be.
#[derive(Args, Debug, Default)]
pub struct PartSizeArg {
    /// Store a snapshot whose text exceeds SIZE (bytes, or K/M/G for KiB/MiB/GiB)
    /// split: the head at OUT, parts in OUT.parts/ (default 45M; `none`: one file).
    #[arg(long, value_name = "SIZE|none")]
    pub part_size: Option<crate::format::split::PartSize>,
}

impl PartSizeArg {
    /// The size given, else the default (`PartSize::default`, 45M).
    pub fn size(&self) -> crate::format::split::PartSize {
        self.part_size.unwrap_or_default()
    }
}

/// How a new snapshot's digests are computed.
#[derive(Args, Debug, Default)]
pub struct DigestArg {
    /// `sha256` (WTXT 1.1, the default) or `tree`: the opt-in tree form, the
    /// arrays' digests and `sha256_all` computed from the chunks' SHA-256
    /// (docs/FORMAT.md section 19).
    #[arg(long, value_name = "sha256|tree", value_parser = parse_digest)]
    pub digest: Option<crate::format::syntax::DigestForm>,
}

fn parse_digest(s: &str) -> std::result::Result<crate::format::syntax::DigestForm, String> {
    crate::format::syntax::DigestForm::parse(s).map_err(|r| r.to_string())
}

/// An OpenSSF Model Signing signature for a written snapshot.
#[derive(Args, Debug, Default)]
pub struct OmsKeyArg {
    /// Also write an OMS `model.sig` beside the snapshot, signed with this
    /// EC key (P-256/384/521, PKCS#8 or SEC1 PEM).
    #[arg(long, value_name = "EC.pem")]
    pub oms_key: Option<PathBuf>,
}

/// The keys whose signatures count.
#[derive(Args, Debug, Default)]
pub struct TrustArg {
    /// Trust this public key (SPKI PEM or ssh-ed25519 line).
    #[arg(long, value_name = "PUB.pem", conflicts_with = "trusted_keys")]
    pub pubkey: Option<PathBuf>,
    /// Trust the keys in this file (`<keyid> <base64 key> [comment]` lines).
    #[arg(long, value_name = "FILE")]
    pub trusted_keys: Option<PathBuf>,
}

/// The key files the flags name, as one piece.
pub(super) fn key_files(hmac: &HmacArg, sign: &Option<PathBuf>, trust: &TrustArg, oms: &OmsKeyArg) -> KeyFiles {
    KeyFiles {
        hmac_key: hmac.hmac_key.clone(),
        hmac_from_env: true,
        allow_unauthenticated: hmac.allow_unauthenticated,
        allow_unbound: hmac.allow_unbound,
        sign_key: sign.clone(),
        pubkey: trust.pubkey.clone(),
        trusted_keys: trust.trusted_keys.clone(),
        oms_key: oms.oms_key.clone(),
    }
}

/// The keys of `--hmac-key`, `--sign-key`, the trust flags and `--oms-key`, read once.
pub(super) fn keys(hmac: &HmacArg, sign: &Option<PathBuf>, trust: &TrustArg, oms: &OmsKeyArg) -> Result<Keys> {
    key_files(hmac, sign, trust, oms).load()
}

/// `--hmac-key`'s key (else `WTXT_HMAC_KEY`'s), for a command that only reads.
pub(super) fn hmac_key(hmac: &HmacArg) -> Result<Option<HmacKey>> {
    KeyFiles { hmac_key: hmac.hmac_key.clone(), hmac_from_env: true, ..KeyFiles::default() }.hmac()
}

/// `--sign-key`'s key.
pub(super) fn sign_key(path: &Option<PathBuf>) -> Result<Option<SecretKey>> {
    KeyFiles { sign_key: path.clone(), ..KeyFiles::default() }.sign()
}

/// `--oms-key`'s key.
pub(super) fn oms_key(a: &OmsKeyArg) -> Result<Option<EcSecretKey>> {
    KeyFiles { oms_key: a.oms_key.clone(), ..KeyFiles::default() }.oms()
}

/// The keys of `--pubkey` or `--trusted-keys`.
pub(super) fn trusted_keys(t: &TrustArg) -> Result<Option<TrustedKeys>> {
    KeyFiles { pubkey: t.pubkey.clone(), trusted_keys: t.trusted_keys.clone(), ..KeyFiles::default() }.trusted()
}

/// How the written snapshot is stored: `--part-size` (the digest form
/// stays the default; commands with `--digest` set it).
pub(super) fn output(parts: &PartSizeArg) -> Output {
    Output { part_size: parts.size(), ..Output::default() }
}

/// How to read age-encrypted inputs, if the user said.
pub(super) fn unseal(a: &SealedArg) -> Result<Option<Unseal>> {
    if a.passphrase || a.passphrase_file.is_some() {
        return Ok(Some(Unseal::Passphrase(armor::passphrase(a.passphrase_file.as_deref())?)));
    }
    if a.identities.is_empty() {
        return Ok(None);
    }
    let mut ids = Vec::new();
    for p in &a.identities {
        ids.extend(armor::read_identities(p)?);
    }
    Ok(Some(Unseal::Identities(ids)))
}
