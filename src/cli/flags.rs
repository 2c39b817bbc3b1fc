//! The flag groups many commands share that are the command line's own
//! (age-encrypted inputs); the groups that are option pieces are those
//! pieces ([`crate::options`]), flattened where a command takes them.

use std::path::PathBuf;

use clap::Args;

use crate::crypto::armor::{self, Unseal};
use crate::error::Result;

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
