//! `wtxt oms sign` and the OMS signature every snapshot writer adds when
//! given an EC key.

use std::path::{Path, PathBuf};

use crate::crypto::ec::EcSecretKey;
use crate::error::{Error, Result};
use crate::oms::{sign_snapshot, SnapshotFiles};
use crate::store::input::WtxtIn;
use crate::wtxt::verify::InputTrust;

/// Writes `model.sig` for the snapshot a command has just written at
/// `out`, when it was given an OMS key. The head is read once (it is small
/// when split; a single file is hashed whole); the parts' SHA-256s are
/// those the writer put in the head.
pub fn oms_sign_written(out: &Path, key: Option<&EcSecretKey>) -> Result<Option<PathBuf>> {
    let Some(key) = key else { return Ok(None) };
    if crate::atomic::is_device(out) {
        return Err(Error::usage(format!("{}: --oms-key signs files in a folder, not a device", out.display())));
    }
    sign_snapshot(&SnapshotFiles::read(out)?, key).map(Some)
}

/// `wtxt oms sign`: verifies the snapshot whole, as `wtxt verify` would
/// under `trust`, then writes its `model.sig`. Beyond verifying, it costs
/// one read of the head.
pub fn oms_sign(snapshot: &Path, key: &EcSecretKey, trust: &InputTrust) -> Result<PathBuf> {
    WtxtIn::verify_whole(snapshot, &trust.options(), "oms sign")?;
    sign_snapshot(&SnapshotFiles::read(snapshot)?, key)
}
