//! Git integration: drivers, filters, hooks and the Merkle chain through history.
#![forbid(unsafe_code)]

use std::path::Path;

use crate::crypto::sign::TrustedKeys;
use crate::error::{Error, Result};

pub mod blob;
pub mod diff;
pub mod filter;
pub mod history;
pub mod hooks;
pub mod install;
pub mod merge;
pub mod parts;

/// A libgit2 failure as unusable input, naming Git.
pub fn git_err(e: git2::Error) -> Error {
    Error::input(Default::default(), format!("git: {}", e.message()))
}

/// The trusted keys named by `git config wtxt.trustedKeys` of `repo` (a
/// relative path is taken from the work tree's top), if it names a file.
pub fn configured_trusted_keys(repo: &git2::Repository) -> Result<Option<TrustedKeys>> {
    let Ok(p) = repo.config().and_then(|c| c.get_path("wtxt.trustedKeys")) else { return Ok(None) };
    let p = if p.is_absolute() { p } else { repo.workdir().unwrap_or(Path::new(".")).join(p) };
    TrustedKeys::from_file(&p).map(Some)
}

/// [`configured_trusted_keys`] of the repository around `dir`; none outside one.
pub fn trusted_keys_around(dir: &Path) -> Result<Option<TrustedKeys>> {
    match git2::Repository::discover(dir) {
        Ok(repo) => configured_trusted_keys(&repo),
        Err(_) => Ok(None),
    }
}
