//! A folder as OMS's "files" serialization sees it: every regular file
//! below it, by POSIX path relative to it, but the ignored paths (a path
//! is ignored when it is an ignored path or lies below one), each with its
//! digest. Links are never followed and a device or FIFO is refused (the
//! walk itself is [`crate::fs::list_files`]).

use std::path::{Path, PathBuf};

use crate::crypto::digest::Hash;
use crate::error::{Error, Result};
use crate::oms::bundle::HashType;

pub use crate::fs::{is_ignored, list_files as list};

/// Digests of the files `names` below `root`, on every core; each file is
/// opened without following links and must be a regular file.
pub fn digests(root: &Path, names: &[String], hash: HashType) -> Result<Vec<Hash>> {
    // No folder on the way may be a link either (a listed `sub/w.bin`
    // whose `sub` links elsewhere would be read from there).
    for n in names {
        crate::fs::no_links_below(root, Path::new(n))?;
    }
    let paths: Vec<PathBuf> = names.iter().map(|n| root.join(n)).collect();
    let open = |path: &Path| {
        let f = crate::fs::open_no_follow(path).map_err(|e| Error::io(path, e))?;
        if !f.metadata().map_err(|e| Error::io(path, e))?.is_file() {
            return Err(Error::input(Default::default(), "not a regular file").in_file(path));
        }
        Ok(f)
    };
    match hash {
        HashType::Sha256 => crate::crypto::digest::sha256_files(&paths, open),
        HashType::Blake3 => crate::crypto::digest::files_parallel(&paths, |path| {
            let mut h = blake3::Hasher::new();
            std::io::copy(&mut open(path)?, &mut h).map_err(|e| Error::io(path, e))?;
            Ok(*h.finalize().as_bytes())
        }),
    }
}
