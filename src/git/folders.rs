//! Hugging Face folders in a Git work tree, split snapshots in the
//! repository (`wtxt git install --folder DIR`). Writing a folder back
//! from its snapshot is here; snapshotting it is `crate::ops::folders`.
//!
//! A model folder is too large for Git's filters (one file, one blob), so
//! the work tree holds the folder as `save_pretrained` wrote it, ignored by
//! Git, and the repository holds its snapshot beside it: `DIR.wtxt` and
//! `DIR.wtxt.parts/`. The pre-commit hook snapshots a folder that changed
//! since it was last written or snapshotted (`crate::ops::folders::stage`), chained to HEAD's
//! version and signed with the repository's keys; the hooks that run after
//! Git moves the work tree write the folder back from the snapshot
//! ([`checkout`]), verified under the repository's policy. Which folder
//! goes with which snapshot is the user's local configuration
//! (`wtxt.folder`), never the cloned work tree's: a clone names its folders
//! itself.
//!
//! Whether a side changed is decided as `git status` decides it, from a
//! record kept in `.git/wtxt/folders/`: each file's size, times and inode
//! when the folder was last written or read, and the `merkle_this` of the
//! snapshot it matched. A folder that changed is never overwritten (unless
//! forced); a folder and a snapshot that both changed refuse the commit.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::odb::git_err;

/// The Git configuration key naming the folders (one value each).
pub const FOLDER_KEY: &str = "wtxt.folder";

/// Largest record read back (a folder's file list; `MAX_FILES` bounds it).
const MAX_RECORD: u64 = 256 << 20;

/// A model folder of the work tree and the snapshot that stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folder {
    /// The folder, relative to the work tree's top.
    pub dir: PathBuf,
    /// Its snapshot (`DIR.wtxt`), relative to the work tree's top.
    pub snapshot: PathBuf,
}

impl Folder {
    /// The folder at `rel` (relative to the work tree's top): plain names
    /// only (no `..`, no hidden or absolute path), so the work tree's
    /// content can never steer a write outside it.
    pub fn new(rel: &str) -> Result<Folder> {
        let rel = rel.trim_end_matches('/');
        let p = Path::new(rel);
        let plain = !rel.is_empty()
            && p.components().all(|c| matches!(c, Component::Normal(n) if !n.to_string_lossy().starts_with('.')));
        if !plain {
            return Err(Error::usage(format!(
                "--folder {rel}: expected a folder inside the work tree, by a relative path of plain names"
            )));
        }
        Ok(Folder { dir: p.to_path_buf(), snapshot: PathBuf::from(format!("{rel}.wtxt")) })
    }

    /// What a clone that has this folder's snapshot but not the folder
    /// is told to run, as one printable line (the name is the
    /// repository's: a control character in it is shown escaped).
    pub fn not_set_up(&self) -> String {
        let dir = self.dir.display().to_string();
        let text = format!(
            "{} holds the model folder {dir}/: `wtxt git install --folder {}` writes it and keeps it in step",
            self.snapshot.display(),
            crate::git::shell::typed_word(&dir)
        );
        crate::error::one_line(&text).into_owned()
    }

    /// The committed attribute that has Git smudge this folder's snapshot
    /// through `wtxt git folder-notice` (filter.wtxt-folder.smudge, set by
    /// every `wtxt git install`), so that a clone says what writes the
    /// folder. None for a name an attributes pattern cannot hold literally
    /// (spaces, quotes, glob characters): that folder is named by `wtxt git
    /// install` alone.
    pub(crate) fn attribute(&self) -> Option<String> {
        let name = self.snapshot.to_str()?;
        let literal = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+@,=".contains(&b));
        literal.then(|| format!("/{name} filter=wtxt-folder"))
    }

    pub(crate) fn record_path(&self, repo: &git2::Repository) -> PathBuf {
        let id = crate::crypto::digest::sha256(self.dir.as_os_str().as_encoded_bytes());
        repo.path().join("wtxt/folders").join(hex::encode(&id[..16]))
    }
}

/// The folders `git config wtxt.folder` names for `repo`.
pub fn configured(repo: &git2::Repository) -> Result<Vec<Folder>> {
    let cfg = repo.config().map_err(git_err)?;
    let mut out = Vec::new();
    if let Ok(mut entries) = cfg.multivar(FOLDER_KEY, None) {
        while let Some(e) = entries.next() {
            let e = e.map_err(git_err)?;
            let v = e.value().map_err(|_| Error::usage("git config wtxt.folder: expected UTF-8"))?;
            let f = Folder::new(v)?;
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    Ok(out)
}

/// The snapshots of model folders HEAD's index tracks whose folder is not
/// configured here (a fresh clone's): `DIR.wtxt` files, regular files of
/// the work tree, whose outline holds the folder table (`__hf`). What
/// `wtxt git install` tells the user to run `--folder DIR` for.
pub fn unconfigured(here: &Path) -> Result<Vec<Folder>> {
    let Ok(repo) = git2::Repository::discover(here) else { return Ok(Vec::new()) };
    let Some(work) = repo.workdir().map(Path::to_path_buf) else { return Ok(Vec::new()) };
    let known = configured(&repo)?;
    let mut out = Vec::new();
    for e in repo.index().map_err(git_err)?.iter() {
        let Ok(path) = std::str::from_utf8(&e.path) else { continue };
        let Some(dir) = path.strip_suffix(".wtxt") else { continue };
        let Ok(f) = Folder::new(dir) else { continue };
        let file = work.join(path);
        // A regular file only: a committed link is not followed.
        if known.contains(&f) || !std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let arrays = crate::store::outline::outline(&file, &|_| false, 0).unwrap_or_default();
        if arrays.iter().any(|a| a.arr.name == crate::convert::hf::HF) {
            out.push(f);
        }
    }
    Ok(out)
}

/// The folder whose snapshot is `path` (from the work tree's top) when the
/// repository around `here` does not set it up: what `wtxt git
/// folder-notice` names.
pub fn unset_up(here: &Path, path: &str) -> Result<Option<Folder>> {
    let Some(f) = path.strip_suffix(".wtxt").and_then(|d| Folder::new(d).ok()) else { return Ok(None) };
    let Ok(repo) = git2::Repository::discover(here) else { return Ok(None) };
    Ok((!configured(&repo)?.contains(&f)).then_some(f))
}

/// The repository around `here` and its configured folder `dir`.
pub fn open(here: &Path, dir: &str) -> Result<(git2::Repository, Folder)> {
    let repo = git2::Repository::discover(here).map_err(git_err)?;
    let f = Folder::new(dir)?;
    if !configured(&repo)?.contains(&f) {
        return Err(Error::usage(format!(
            "{dir}: not a model folder of this repository: `wtxt git install --folder {dir}`"
        )));
    }
    Ok((repo, f))
}

/// One file of a folder as the file system describes it.
#[derive(Serialize, Deserialize, PartialEq, Eq, Debug)]
pub(crate) struct Stat {
    path: String,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
}

/// What a folder and its snapshot were when they last matched.
#[derive(Serialize, Deserialize)]
pub(crate) struct Record {
    /// The snapshot's `merkle_this` (hex).
    pub(crate) snapshot: String,
    /// The folder's files.
    pub(crate) files: Vec<Stat>,
}

/// The files a snapshot of the folder takes (hidden ones are left out by
/// the reader), each as the file system describes it. A link or special
/// file is refused.
pub(crate) fn stats(dir: &Path) -> Result<Vec<Stat>> {
    use std::os::unix::fs::MetadataExt;
    let files = crate::fs::list_files(dir, &[])?;
    let mut out = Vec::with_capacity(files.len());
    for f in files.into_iter().filter(|p| !p.split('/').any(|c| c.starts_with('.'))) {
        let p = dir.join(&f);
        let m = std::fs::symlink_metadata(&p).map_err(|e| Error::io(&p, e))?;
        out.push(Stat {
            path: f,
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            ino: m.ino(),
        });
    }
    Ok(out)
}

/// The snapshot's identity: its `merkle_this` (hex), which binds its header,
/// its root and so every byte. `None` when there is no snapshot.
pub(crate) fn snapshot_id(path: &Path) -> Result<Option<String>> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(None);
    }
    let f = crate::fs::open_input_file(path)?;
    let mut lines = crate::format::read::LineReader::new(std::io::BufReader::new(f));
    let h = crate::format::read::read_head(&mut lines).map_err(|e| e.in_file(path))?;
    match h.root {
        crate::format::syntax::Root::Final { merkle_this, .. } => Ok(Some(hex::encode(merkle_this))),
        crate::format::syntax::Root::Pending => {
            Err(Error::input(Default::default(), "a WTXT-S: finalize it first").in_file(path))
        }
    }
}

pub(crate) fn read_record(path: &Path) -> Option<Record> {
    let bytes = crate::fs::read_small_file(path, MAX_RECORD, crate::fs::Links::Refuse).ok()??;
    serde_json::from_slice(&bytes).ok()
}

pub(crate) fn write_record(path: &Path, r: &Record) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let text = serde_json::to_vec(r).map_err(|e| Error::usage(format!("recording a folder: {e}")))?;
    crate::fs::write_file(path, &text, 0o600)
}

/// Where a folder stands against its snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Both as they were when they last matched.
    UpToDate,
    /// The folder changed: `--stage`, or the next commit of other changes, snapshots it.
    FolderChanged,
    /// The snapshot changed (a checkout, a merge): the folder is written from it.
    SnapshotChanged,
    /// Both changed: one must be chosen (`wtxt git folder DIR --stage` or `--checkout --force`).
    BothChanged,
    /// No folder: it is written from the snapshot.
    NoFolder,
    /// No snapshot yet: `--stage`, or the next commit of other changes, takes the folder.
    NoSnapshot,
    /// Neither exists.
    Neither,
}

impl State {
    /// One line for a person.
    pub fn describe(self, f: &Folder) -> String {
        // The folder as shown, and as a suggested command names it (quoted).
        let (d, s) = (f.dir.display(), f.snapshot.display());
        let w = crate::git::shell::typed_word(&d.to_string());
        match self {
            State::UpToDate => format!("{d}/: up to date with {s}"),
            State::FolderChanged => format!(
                "{d}/: changed since it matched {s}: `wtxt git folder {w} --stage` snapshots and stages it \
                 (a commit of other staged changes does it too; Git commits nothing when nothing was staged)"
            ),
            State::SnapshotChanged => format!("{d}/: {s} changed: `wtxt git folder {w} --checkout` writes the folder"),
            State::BothChanged => format!(
                "{d}/ and {s} both changed: keep the folder's with `wtxt git folder {w} --stage --force`, \
                 or the snapshot's with `wtxt git folder {w} --checkout --force`"
            ),
            State::NoFolder => format!("{d}/: missing: `wtxt git folder {w} --checkout` writes it from {s}"),
            State::NoSnapshot => format!(
                "{d}/: no {s} yet: `wtxt git folder {w} --stage` snapshots and stages it (or any commit of other staged changes)"
            ),
            State::Neither => format!("{d}/: neither the folder nor {s} exists"),
        }
    }
}

/// Refuses a folder or snapshot reached through a symbolic link (the work
/// tree is the repository's: a committed link named like the folder, or
/// like a folder above it, would point the snapshot or the write
/// elsewhere), or a folder path that is not a folder.
fn no_links(work: &Path, f: &Folder) -> Result<()> {
    crate::fs::no_links_below(work, &f.dir)?;
    if std::fs::symlink_metadata(work.join(&f.dir)).is_ok_and(|m| !m.is_dir()) {
        return Err(Error::input(Default::default(), "expected a folder").in_file(work.join(&f.dir)));
    }
    crate::fs::no_links_below(work, &f.snapshot)
}

/// Where `f` stands in the repository around its work tree `work`. A
/// folder or snapshot reached through a link is refused (`no_links`);
/// [`checkout`] and `stage` start here.
pub fn state(repo: &git2::Repository, f: &Folder) -> Result<State> {
    let work = work_tree(repo)?;
    no_links(&work, f)?;
    if let Some(path) = tracked_inside(repo, f)? {
        let d = f.dir.display();
        return Err(Error::usage(format!(
            "{d}/: Git tracks {path} below this model folder (a merge, pull or checkout writes such files, and \
             the next snapshot would take and sign them): `git rm -r --cached -- {d}`, then check what the folder \
             holds before the next commit"
        )));
    }
    let (dir, snap) = (work.join(&f.dir), work.join(&f.snapshot));
    let id = snapshot_id(&snap)?;
    let has_dir = std::fs::symlink_metadata(&dir).is_ok();
    let rec = read_record(&f.record_path(repo));
    Ok(match (has_dir, id) {
        (false, None) => State::Neither,
        (false, Some(_)) => State::NoFolder,
        (true, None) => State::NoSnapshot,
        (true, Some(id)) => {
            let Some(rec) = rec else { return Ok(State::BothChanged) };
            let folder_same = rec.files == stats(&dir)?;
            match (folder_same, rec.snapshot == id) {
                (true, true) => State::UpToDate,
                (false, true) => State::FolderChanged,
                (true, false) => State::SnapshotChanged,
                (false, false) => State::BothChanged,
            }
        }
    })
}

/// The first path below the folder that the index holds (what the next
/// commit takes; after a merge or checkout, what HEAD holds): the folder
/// is kept out of Git (`.git/info/exclude`), so such a path came from
/// someone else's commit (a branch that force-added it). Taking it out of
/// the index (`git rm --cached`) is the way back.
fn tracked_inside(repo: &git2::Repository, f: &Folder) -> Result<Option<String>> {
    let dir = f.dir.to_str().ok_or_else(|| Error::usage("a model folder's path must be UTF-8"))?;
    let prefix = format!("{dir}/");
    let index = repo.index().map_err(git_err)?;
    for e in index.iter() {
        if e.path.starts_with(prefix.as_bytes()) || e.path == dir.as_bytes() {
            return Ok(Some(String::from_utf8_lossy(&e.path).into_owned()));
        }
    }
    Ok(None)
}

pub(crate) fn work_tree(repo: &git2::Repository) -> Result<PathBuf> {
    repo.workdir().map(Path::to_path_buf).ok_or_else(|| Error::usage("a model folder needs a work tree"))
}

/// What [`checkout`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum CheckedOut {
    /// The folder was written from the snapshot (this many shards).
    Written(usize),
    /// Nothing to do, or nothing done, and why (a line for a person).
    Left(State),
}

/// Writes the folder `f` from its snapshot when the snapshot changed since
/// they last matched (or the folder is missing): verified whole under the
/// repository's policy as it is written into a new folder, which then
/// takes the old one's place in one step. A folder that changed is left
/// as it is, unless `force`; a folder holding files a snapshot does not
/// keep (hidden ones) is never replaced.
pub fn checkout(repo: &git2::Repository, f: &Folder, force: bool) -> Result<CheckedOut> {
    let work = work_tree(repo)?;
    let st = state(repo, f)?;
    let write = match st {
        State::SnapshotChanged | State::NoFolder => true,
        State::FolderChanged | State::BothChanged => force,
        State::UpToDate => force,
        State::NoSnapshot | State::Neither => false,
    };
    if !write {
        return Ok(CheckedOut::Left(st));
    }
    let dir = work.join(&f.dir);
    let snap = work.join(&f.snapshot);
    if std::fs::symlink_metadata(&dir).is_ok() {
        let kept: Vec<String> = crate::fs::list_files(&dir, &[])?
            .into_iter()
            .filter(|p| p.split('/').any(|c| c.starts_with('.')))
            .collect();
        if !kept.is_empty() {
            return Err(Error::usage(format!(
                "{}: holds files its snapshot does not keep ({}): move them out, then `wtxt git folder {} --checkout`",
                f.dir.display(),
                kept.join(", "),
                crate::git::shell::typed_word(&f.dir.display().to_string())
            )));
        }
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(&work).to_path_buf();
    std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let scratch = tempfile::Builder::new()
        .prefix(&format!(".{name}.wtxt-checkout"))
        .tempdir_in(&parent)
        .map_err(|e| Error::io(&parent, e))?;
    let new = scratch.path().join("new");
    let policy = super::config::Policy::of(repo)?;
    let shards = crate::convert::hf::extract(&snap, &policy.options(), &new)?;
    if std::fs::symlink_metadata(&dir).is_ok() {
        crate::fs::exchange(&new, &dir, &scratch.path().join("old"))?;
    } else {
        std::fs::rename(&new, &dir).map_err(|e| Error::io(&dir, e))?;
    }
    let id = snapshot_id(&snap)?.ok_or_else(|| Error::usage("the snapshot is gone"))?;
    write_record(&f.record_path(repo), &Record { snapshot: id, files: stats(&dir)? })?;
    Ok(CheckedOut::Written(shards))
}

/// Every configured folder of the repository around `dir` written from its
/// snapshot where that changed (what the hooks after a checkout, merge,
/// commit or rewrite run), with the state of each.
pub fn checkout_changed(dir: &Path) -> Result<Vec<(Folder, Result<CheckedOut>)>> {
    let repo = git2::Repository::discover(dir).map_err(git_err)?;
    Ok(configured(&repo)?.into_iter().map(|f| (f.clone(), checkout(&repo, &f, false))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suggested_command_names_the_folder_as_a_shell_reads_it() {
        let f = Folder { dir: PathBuf::from("my\nmodel"), snapshot: PathBuf::from("my\nmodel.wtxt") };
        let line = f.not_set_up();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("`wtxt git install --folder $'my\\nmodel'`"), "{line}");
        let both = State::BothChanged.describe(&f);
        assert!(both.contains("`wtxt git folder $'my\\nmodel' --stage --force`"), "{both}");
    }
}
