//! Git integration: drivers, filters, hooks and the Merkle chain through history.

use std::path::Path;

use crate::crypto::sign::TrustedKeys;
use crate::error::{Error, Reason, Result};
use crate::fs::FileLock;

pub(crate) mod commit;
pub(crate) mod diff;
pub(crate) mod files_diff;
pub(crate) mod filter;
pub(crate) mod folders;
pub(crate) mod guard;
pub(crate) mod history;
pub(crate) mod hooks;
pub(crate) mod install;
pub(crate) mod merge;
pub(crate) mod parts;
pub(crate) mod push;
pub(crate) mod shell;

use crate::odb::git_err;
pub use commit::{commit_written, committed_link};
pub use diff::{diff, textconv, Names};
pub use filter::{clean, smudge};
pub use merge::{merge, Strategy};
pub use parts::{check_part, diff_parts, textconv_part};
pub use push::{push, redact, Push};
pub use shell::{command, set_command};

/// The lock every `wtxt` commit to `repo` holds from reading the index and
/// HEAD to moving HEAD: two Snapshotters (or a daemon beside one) on one
/// repository commit one after the other, each on the other's tree.
pub fn commit_lock(repo: &git2::Repository) -> Result<FileLock> {
    let path = repo.path().join("wtxt-commit.lock");
    FileLock::take(&path, true)?.ok_or_else(|| Error::usage("could not lock the repository for a commit"))
}

/// Stops `child`, started as the leader of its own process group
/// (`process_group(0)`), with every process it started (`git push`'s `ssh`),
/// and reaps it.
#[allow(unsafe_code)]
pub fn kill_group(child: &mut std::process::Child) {
    // SAFETY: signals the process group the caller started with this child
    // as its leader (the group's id is the child's pid); nothing else is touched.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    let _ = child.wait();
}

/// The repository around `dir` as a hook Git runs sees it: with the index
/// Git is committing. `git commit -a` and `git commit PATH` stage into a
/// temporary index named by `GIT_INDEX_FILE`; `.git/index` then holds the
/// previous state, and checking it would pass what is being committed
/// unread.
pub fn open_for_hook(dir: &Path) -> Result<git2::Repository> {
    let repo = git2::Repository::discover(dir).map_err(git_err)?;
    if let Some(file) = std::env::var_os("GIT_INDEX_FILE").filter(|f| !f.is_empty()) {
        // Relative to the directory Git ran the hook in.
        let path = std::path::absolute(Path::new(&file)).map_err(|e| Error::io(Path::new(&file), e))?;
        let mut index = git2::Index::open(&path).map_err(git_err)?;
        repo.set_index(&mut index).map_err(git_err)?;
    }
    Ok(repo)
}

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

/// The digest form `git config wtxt.digest` asks of the snapshots wtxt
/// writes in `repo` (`sha256`, the default, or `tree`): the model folders'
/// and the Git filter's.
pub fn configured_digest(repo: &git2::Repository) -> Result<crate::format::syntax::DigestForm> {
    match repo.config().and_then(|c| c.get_string("wtxt.digest")) {
        Ok(v) => crate::format::syntax::DigestForm::parse(&v)
            .map_err(|m| Error::usage(format!("git config wtxt.digest: {m}"))),
        Err(_) => Ok(Default::default()),
    }
}

/// The trusted keys named by `git config wtxt.trustedKeys` of `repo`, if
/// it names a file.
pub fn configured_trusted_keys(repo: &git2::Repository) -> Result<Option<TrustedKeys>> {
    configured_file(repo, "wtxt.trustedKeys")?.map(|p| TrustedKeys::from_file(&p)).transpose()
}

/// The HMAC key named by `git config wtxt.hmacKey` of `repo` (a hex key
/// file), if it names one: the hook and the guard check every array with it.
pub fn configured_hmac_key(repo: &git2::Repository) -> Result<Option<crate::crypto::HmacKey>> {
    configured_file(repo, "wtxt.hmacKey")?.map(|p| crate::crypto::HmacKey::from_file(&p)).transpose()
}

/// The EC key named by `git config wtxt.omsKey` of the repository around
/// `dir`: `git resolve` signs the merged snapshot's folder with it.
pub fn oms_key_around(dir: &Path) -> Result<Option<crate::crypto::ec::EcSecretKey>> {
    let Ok(repo) = git2::Repository::discover(dir) else { return Ok(None) };
    configured_file(&repo, "wtxt.omsKey")?.map(|p| crate::crypto::ec::EcSecretKey::from_file(&p)).transpose()
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

/// The part size a team keeps files under (`git config wtxt.partSize`, as `--part-size`).
pub fn configured_part_size(repo: &git2::Repository) -> Result<crate::format::split::PartSize> {
    match repo.config().and_then(|c| c.get_string("wtxt.partSize")) {
        Ok(v) => v.parse().map_err(|e: Reason| Error::usage(format!("git config wtxt.partSize: {e}"))),
        Err(_) => Ok(Default::default()),
    }
}

/// [`configured_trusted_keys`] of the repository around `dir`; none outside one.
pub fn trusted_keys_around(dir: &Path) -> Result<Option<TrustedKeys>> {
    match git2::Repository::discover(dir) {
        Ok(repo) => configured_trusted_keys(&repo),
        Err(_) => Ok(None),
    }
}
