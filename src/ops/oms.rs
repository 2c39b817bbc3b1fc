//! `wtxt oms sign` and the OMS signature every snapshot writer adds when
//! given an EC key.

use std::path::{Path, PathBuf};

use crate::crypto::ec::EcSecretKey;
use crate::error::{Error, Result};
use crate::format::verify::InputTrust;
use crate::oms::{sign_folder, sign_snapshot, SnapshotFiles};
use crate::store::input::WtxtIn;

/// Writes `model.sig` for the snapshot a command has just written at
/// `out`, when it was given an OMS key: the signature of the snapshot's
/// folder, the files beside it included. The head is read once (it is
/// small when split; a single file is hashed whole); the parts' SHA-256s
/// are those the writer put in the head.
pub fn oms_sign_written(out: &Path, key: Option<&EcSecretKey>) -> Result<Option<PathBuf>> {
    let Some(key) = key else { return Ok(None) };
    if crate::fs::is_device(out) {
        return Err(Error::usage(format!("{}: --oms-key signs files in a folder, not a device", out.display())));
    }
    sign_snapshot(&SnapshotFiles::read(out)?, key).map(|(path, _)| Some(path))
}

/// What `wtxt oms sign` signed.
pub struct OmsSigned {
    /// The signature written.
    pub signature: PathBuf,
    /// Files it lists.
    pub files: usize,
    /// WTXT snapshots in the folder, each verified before it was signed.
    pub verified: usize,
}

/// `wtxt oms sign`: a snapshot is verified whole, as `wtxt verify` would
/// under `trust`, then its folder signed into `model.sig` beside it; a
/// folder is signed as `model_signing sign key DIR` signs it (`signature`,
/// or `DIR/model.sig`), after every WTXT snapshot in it (a file that
/// begins as one) is verified the same way: nothing is signed that a
/// verifier would refuse.
pub fn oms_sign(target: &Path, signature: Option<&Path>, key: &EcSecretKey, trust: &InputTrust) -> Result<OmsSigned> {
    if crate::fs::is_real_dir(target) {
        let names = crate::oms::folder::list(target, &crate::oms::GIT_PATHS.map(String::from))?;
        let mut verified = 0;
        for name in &names {
            let path = target.join(name);
            if begins_as_wtxt(&path)? {
                WtxtIn::verify_whole(&path, &trust.options(), "oms sign")?;
                verified += 1;
            }
        }
        let default = target.join(crate::oms::SIGNATURE_NAME);
        let (signature, files) = sign_folder(target, Vec::new(), signature.unwrap_or(&default), key)?;
        return Ok(OmsSigned { signature, files, verified });
    }
    if signature.is_some_and(|s| s != crate::oms::signature_path(target)) {
        return Err(Error::usage("--signature: a snapshot's signature is model.sig beside it"));
    }
    WtxtIn::verify_whole(target, &trust.options(), "oms sign")?;
    let (signature, files) = sign_snapshot(&SnapshotFiles::read(target)?, key)?;
    Ok(OmsSigned { signature, files, verified: 1 })
}

/// True when the file at `path` begins as a WTXT (a single file or the
/// head of a split one); read without following a link.
fn begins_as_wtxt(path: &Path) -> Result<bool> {
    let mut f = crate::fs::open_no_follow(path).map_err(|e| Error::io(path, e))?;
    let mut head = [0u8; 7];
    let n = crate::fs::read_full(&mut f, &mut head).map_err(|e| Error::io(path, e))?;
    Ok(n == head.len() && &head == b"WTXT 1\n")
}
