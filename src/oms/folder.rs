//! A folder as OMS's "files" serialization sees it: every regular file
//! below it, by POSIX path relative to it, but the ignored paths (a path
//! is ignored when it is an ignored path or lies below one), each with its
//! digest. Links are never followed and a device or FIFO is refused.

use std::path::{Path, PathBuf};

use crate::crypto::digest::Hash;
use crate::error::{Error, Result};
use crate::oms::bundle::HashType;

/// Most files a folder may hold for signing or verifying: bounds the heap
/// whatever the folder holds.
pub const MAX_FILES: usize = 1 << 20;

/// The regular files below `root` (relative POSIX paths, OMS's order), not
/// under `ignore`. A link or special file anywhere outside the ignored
/// paths is refused, as OMS refuses it when links are not allowed (wtxt
/// never follows them).
pub fn list(root: &Path, ignore: &[String]) -> Result<Vec<String>> {
    let ignored = |rel: &str| is_ignored(rel, ignore);
    let mut files = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let path = if dir.is_empty() { root.to_path_buf() } else { root.join(&dir) };
        let entries = std::fs::read_dir(&path).map_err(|e| Error::io(&path, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&path, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                return Err(Error::input(Default::default(), "a file name that is not UTF-8").in_file(entry.path()));
            };
            let rel = if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") };
            if ignored(&rel) {
                continue;
            }
            let ty = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
            if ty.is_dir() {
                stack.push(rel);
            } else if ty.is_file() {
                if files.len() == MAX_FILES {
                    return Err(Error::input(Default::default(), format!("more than {MAX_FILES} files")).in_file(root));
                }
                files.push(rel);
            } else {
                let what = if ty.is_symlink() {
                    "a symbolic link (wtxt does not follow links)"
                } else {
                    "not a regular file or folder"
                };
                return Err(Error::input(Default::default(), what).in_file(entry.path()));
            }
        }
    }
    files.sort_by(|a, b| a.split('/').cmp(b.split('/')));
    Ok(files)
}

/// True when the relative path `rel` is one of `ignore` or lies below one
/// (OMS compares path components, as `PurePath.is_relative_to`).
pub fn is_ignored(rel: &str, ignore: &[String]) -> bool {
    ignore.iter().any(|i| {
        let i = i.trim_end_matches('/');
        rel == i || rel.strip_prefix(i).is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Digests of the files `names` below `root`, on every core; each file is
/// opened without following links and must be a regular file.
pub fn digests(root: &Path, names: &[String], hash: HashType) -> Result<Vec<Hash>> {
    let paths: Vec<PathBuf> = names.iter().map(|n| root.join(n)).collect();
    crate::crypto::digest::files_parallel(&paths, |path| {
        let mut f = crate::atomic::open_no_follow(path).map_err(|e| Error::io(path, e))?;
        if !f.metadata().map_err(|e| Error::io(path, e))?.is_file() {
            return Err(Error::input(Default::default(), "not a regular file").in_file(path));
        }
        match hash {
            HashType::Sha256 => crate::crypto::digest::sha256_reader(&mut f).map_err(|e| Error::io(path, e)),
            HashType::Blake3 => {
                let mut h = blake3::Hasher::new();
                std::io::copy(&mut f, &mut h).map_err(|e| Error::io(path, e))?;
                Ok(*h.finalize().as_bytes())
            }
        }
    })
}
