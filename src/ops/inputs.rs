//! What several commands share: an input opened (sealed or not), a
//! file's header, the generation `--prev` chains from, and outputs that
//! must be distinct files.

use crate::crypto::armor::{open_maybe_sealed, Unseal};
use crate::crypto::digest::Hash;
use crate::error::{check_at, Error, Result};
use crate::format::read::{read_head, Header, LineReader};
use crate::format::syntax::Root;
use crate::format::verify::InputTrust;
use crate::store::input::WtxtIn;

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

pub(super) fn open(path: &Path) -> Result<(File, u64)> {
    let f = crate::fs::open_input_file(path)?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    Ok((f, len))
}

/// Opens an input that may be age-encrypted (decrypted on the fly with
/// `unseal`); the length is the file's, an upper bound of the plaintext's.
pub(super) fn open_input(path: &Path, unseal: Option<&Unseal>) -> Result<(Box<dyn Read>, u64)> {
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    Ok((open_maybe_sealed(path, unseal, 1 << 20)?, len))
}

/// Reads only the header (and `sign` line) of a WTXT file.
pub fn read_header_file(path: &Path) -> Result<Header> {
    let (f, _) = open(path)?;
    read_head(&mut LineReader::new(BufReader::new(f))).map_err(|e| e.in_file(path))
}

/// The chain values `--prev` gives: next gen and merkle_prev. Nothing
/// chains from what it did not verify: the whole file is verified under
/// `trust` (every line, chunk and array, its signature under the policy,
/// with an HMAC key every tag), as `wtxt verify` would. A header alone
/// would do for the link itself, but a new generation signed on top of a
/// damaged or forged one would vouch for a history nobody checked.
pub(super) fn chain_from(prev: &Path, trust: &InputTrust) -> Result<(u64, Hash)> {
    let h = read_header_file(prev)?;
    if h.root != Root::Pending {
        WtxtIn::verify_whole(prev, &trust.options(), "--prev")?;
    }
    match h.root {
        Root::Final { merkle_this, .. } => {
            let gen = h
                .meta
                .gen
                .checked_add(1)
                .ok_or_else(|| Error::input(Default::default(), "gen overflows").in_file(prev))?;
            Ok((gen, merkle_this))
        }
        Root::Pending => {
            Err(check_at(4, "previous generation is a WTXT-S: finalize it first (wtxt finalize --rewrite)")
                .in_file(prev))
        }
    }
}

/// Refuses two outputs of one command that name the same file: one would
/// overwrite the other.
pub fn distinct_outputs(paths: &[&Path]) -> Result<()> {
    let key = |p: &Path| {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        (std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()), p.file_name().map(|n| n.to_owned()))
    };
    for (i, a) in paths.iter().enumerate() {
        if let Some(b) = paths[..i].iter().find(|b| key(b) == key(a)) {
            return Err(Error::usage(format!(
                "{} and {} are the same file: give each output its own name",
                b.display(),
                a.display()
            )));
        }
    }
    Ok(())
}
