//! What a repository's Git configuration sets for wtxt (`wtxt.*` keys):
//! the option pieces (key files; part size and digest form) and the policy
//! the hooks apply, each read in one place.

use std::path::Path;

use crate::crypto::sign::TrustedKeys;
use crate::error::{Error, Reason, Result};
use crate::options::{DigestChoice, HmacFile, KeyFiles, OmsFile, Output, PartSizeChoice, SignFile, TrustFiles};

/// The key settings of `git config`: the files they name are keys, never
/// to be committed (the hook refuses to stage them).
pub const PRIVATE_KEY_SETTINGS: [&str; 2] = ["wtxt.signKey", "wtxt.omsKey"];

/// The file `git config KEY` of `repo` names, if any (relative: from the
/// work tree's top). Inside the work tree no component may be a link: the
/// work tree is what a merge writes, so a committed link would choose the
/// key (a trusted key, a key to sign with) for whoever merged it.
pub fn configured_file(repo: &git2::Repository, key: &str) -> Result<Option<std::path::PathBuf>> {
    let Ok(p) = repo.config().and_then(|c| c.get_path(key)) else { return Ok(None) };
    // A bare repository (a server's): relative to it, as Git runs its hooks there.
    let Some(work) = repo.workdir() else { return Ok(Some(if p.is_absolute() { p } else { repo.path().join(p) })) };
    let p = if p.is_absolute() { p } else { work.join(p) };
    let work = std::fs::canonicalize(work).unwrap_or_else(|_| work.to_path_buf());
    if let Ok(rel) = p.strip_prefix(&work) {
        let mut at = work.clone();
        for c in rel.components() {
            at.push(c);
            if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(Error::usage(format!(
                    "git config {key}: {} is a symbolic link inside the work tree (a merge can change where it \
                     points): name the key's own path, outside the work tree",
                    at.display()
                )));
            }
        }
    }
    Ok(Some(p))
}

/// The key files `git config` of `repo` names (`wtxt.hmacKey`,
/// `wtxt.signKey`, `wtxt.trustedKeys`, `wtxt.omsKey`), as the option piece
/// the command line and the daemon fill: the one place these settings are
/// read. No key comes from the environment here.
pub fn configured_keys(repo: &git2::Repository) -> Result<KeyFiles> {
    Ok(KeyFiles { hmac: hmac_file(repo)?, sign: sign_file(repo)?, trust: trust_files(repo)?, oms: oms_file(repo)? })
}

// Each group from its own setting: a reader that needs one key resolves
// (and checks for links) only that one.
fn hmac_file(repo: &git2::Repository) -> Result<HmacFile> {
    Ok(HmacFile { hmac_key: configured_file(repo, "wtxt.hmacKey")?, ..HmacFile::default() })
}
fn sign_file(repo: &git2::Repository) -> Result<SignFile> {
    Ok(SignFile { sign_key: configured_file(repo, "wtxt.signKey")? })
}
fn trust_files(repo: &git2::Repository) -> Result<TrustFiles> {
    Ok(TrustFiles { pubkey: None, trusted_keys: configured_file(repo, "wtxt.trustedKeys")? })
}
fn oms_file(repo: &git2::Repository) -> Result<OmsFile> {
    Ok(OmsFile { oms_key: configured_file(repo, "wtxt.omsKey")? })
}

/// How `git config` of `repo` asks snapshots to be stored: `wtxt.partSize`
/// (as `--part-size`) and `wtxt.digest` (as `--digest`), the model
/// folders' and the Git filter's.
pub fn configured_output(repo: &git2::Repository) -> Result<Output> {
    let cfg = repo.config().map_err(crate::error::git_err)?;
    let part_size = parsed(&cfg, "wtxt.partSize")?;
    Ok(Output::of(PartSizeChoice { part_size }, DigestChoice { digest: parsed(&cfg, "wtxt.digest")? }))
}

/// The value of `key` read by its type's `FromStr`, if set.
fn parsed<T: std::str::FromStr<Err = Reason>>(cfg: &git2::Config, key: &str) -> Result<Option<T>> {
    match cfg.get_string(key) {
        Ok(v) => v.parse().map(Some).map_err(|e| Error::usage(format!("git config {key}: {e}"))),
        Err(_) => Ok(None),
    }
}

/// The trusted keys named by `git config wtxt.trustedKeys` of `repo`, if
/// it names a file.
pub fn configured_trusted_keys(repo: &git2::Repository) -> Result<Option<TrustedKeys>> {
    trust_files(repo)?.keys()
}

/// The HMAC key named by `git config wtxt.hmacKey` of `repo` (a hex key
/// file), if it names one: the hook and the guard check every array with it.
pub fn configured_hmac_key(repo: &git2::Repository) -> Result<Option<crate::crypto::HmacKey>> {
    hmac_file(repo)?.key()
}

/// The EC key named by `git config wtxt.omsKey` of the repository around
/// `dir`: `git resolve` signs the merged snapshot's folder with it.
pub fn oms_key_around(dir: &Path) -> Result<Option<crate::crypto::ec::EcSecretKey>> {
    let Ok(repo) = git2::Repository::discover(dir) else { return Ok(None) };
    oms_file(&repo)?.key()
}

/// What the repository asks of every snapshot it takes in: its trusted
/// keys, whether a valid signature by one of them is required
/// (`wtxt.requireSignature`, which needs `wtxt.trustedKeys`), and the HMAC
/// key every array must authenticate with (`wtxt.hmacKey`, a hex key
/// file), under which every snapshot must also carry the keyed tag.
pub struct Policy {
    /// `wtxt.trustedKeys`.
    pub trusted: Option<TrustedKeys>,
    /// `wtxt.requireSignature`.
    pub require: bool,
    /// `wtxt.hmacKey`.
    pub hmac: Option<crate::crypto::HmacKey>,
}

impl Policy {
    /// The policy of `repo`.
    pub fn of(repo: &git2::Repository) -> Result<Policy> {
        let require = repo.config().and_then(|c| c.get_bool("wtxt.requireSignature")).unwrap_or(false);
        let trusted = configured_trusted_keys(repo)?;
        if require && trusted.is_none() {
            return Err(Error::usage("wtxt.requireSignature is set but wtxt.trustedKeys names no key file"));
        }
        let hmac = configured_hmac_key(repo)?;
        Ok(Policy { trusted, require, hmac })
    }

    /// The verification it asks for.
    pub fn options(&self) -> crate::format::verify::VerifyOptions<'_> {
        crate::format::verify::VerifyOptions {
            hmac_key: self.hmac.as_ref(),
            trusted: self.trusted.as_ref(),
            require_signature: self.require,
            ..Default::default()
        }
    }
}

/// Sets the signing policy of the repository around `dir`: its local
/// `wtxt.trustedKeys` to `file` (absolute, and read first: a file that
/// holds no key is refused before anything is set) and
/// `wtxt.requireSignature` to true. Returns the path it set.
pub fn set_signing_policy(dir: &Path, file: &Path) -> Result<std::path::PathBuf> {
    let abs = std::path::absolute(file).map_err(|e| Error::io(file, e))?;
    TrustedKeys::from_file(&abs)?;
    let text = abs.to_str().ok_or_else(|| Error::usage(format!("{}: not a UTF-8 path", abs.display())))?;
    let repo = git2::Repository::discover(dir).map_err(crate::odb::git_err)?;
    let mut cfg = repo.config().and_then(|c| c.open_level(git2::ConfigLevel::Local)).map_err(crate::odb::git_err)?;
    cfg.set_str("wtxt.trustedKeys", text).map_err(crate::odb::git_err)?;
    cfg.set_bool("wtxt.requireSignature", true).map_err(crate::odb::git_err)?;
    Ok(abs)
}

/// Whether the repository around `dir` has a signing policy (`wtxt.trustedKeys`).
pub fn has_signing_policy(dir: &Path) -> bool {
    let Ok(repo) = git2::Repository::discover(dir) else { return false };
    repo.config().and_then(|c| c.get_path("wtxt.trustedKeys")).is_ok()
}

/// The signature policy a command that reads the snapshot at `file` holds
/// it to: the keys it was given (`named`, with `require`), else those of
/// the repository around the file (`wtxt.trustedKeys`, with
/// `wtxt.requireSignature`), else none.
pub fn signature_policy(file: &Path, named: Option<TrustedKeys>, require: bool) -> Result<(Option<TrustedKeys>, bool)> {
    if named.is_some() {
        return Ok((named, require));
    }
    let abs = std::path::absolute(file).map_err(|e| Error::io(file, e))?;
    let Some(repo) = abs.parent().and_then(|d| git2::Repository::discover(d).ok()) else { return Ok((None, require)) };
    let trusted = configured_trusted_keys(&repo)?;
    let required = repo.config().and_then(|c| c.get_bool("wtxt.requireSignature")).unwrap_or(false);
    Ok((trusted.clone(), require || (required && trusted.is_some())))
}

/// [`configured_trusted_keys`] of the repository around `dir`; none outside one.
pub fn trusted_keys_around(dir: &Path) -> Result<Option<TrustedKeys>> {
    match git2::Repository::discover(dir) {
        Ok(repo) => configured_trusted_keys(&repo),
        Err(_) => Ok(None),
    }
}
