//! The Merkle chain through Git history (`wtxt log`).
//!
//! Commits are walked children-first; the file's path is carried from each
//! commit to its parents, following renames. A commit counts as a new
//! generation when its version of the file differs from every parent's. Each
//! generation is linked to the previous version in each parent (for a file
//! deleted and re-added, the last version before the deletion): its
//! `merkle_prev` must equal that version's `merkle_this`, and its `gen` must
//! be the next one. Every version's header must be self-consistent
//! (`merkle_this` recomputed from its own fields), and with trusted keys its
//! signature must be valid. That reads headers only: a header's signature
//! and links bind the data through `sha256_all`, which only verifying the
//! data recomputes, so a generation is reported as verified only when
//! [`LogOptions::verify`] read it whole from its commit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use git2::{Commit, DiffFindOptions, DiffOptions, ObjectType, Oid, Repository, Sort, Tree};
use serde::Serialize;

use crate::crypto::digest::{merkle_this, Hash};
use crate::crypto::sign::TrustedKeys;
use crate::error::{Error, Result};
use crate::format::read::{read_header, Header, LineReader};
use crate::format::split;
use crate::format::syntax::{Root, SignLine};
use crate::format::verify::{SigStatus, VerifyOptions};
use crate::git::proof::{parts_of, verify_version, Proofs};
use crate::odb::blob::Blobs;
use crate::odb::git_err;
use crate::progress::Progress;

/// How far back to look for the last version of a deleted file.
const MAX_LOOKBACK: usize = 100_000;

/// One generation as committed.
#[derive(Clone, Debug, Serialize)]
pub struct Generation {
    /// Commit id, hex.
    pub commit: String,
    /// Its parents.
    pub parents: Vec<String>,
    /// Path of the snapshot in that commit.
    pub path: String,
    /// The commit message's first line.
    pub summary: String,
    /// The snapshot's generation.
    pub gen: u64,
    /// Its timestamp.
    pub ts: String,
    /// Its `build` token.
    pub build: String,
    /// Key id of its signature, hex.
    pub keyid: Option<String>,
    /// Its signature's status.
    pub signature: SigStatus,
    /// Its `sha256_all`, hex.
    pub sha256_all: Option<String>,
    /// Its `merkle_prev`, hex.
    pub merkle_prev: Option<String>,
    /// Its `merkle_this`, hex.
    pub merkle_this: Option<String>,
    /// For each previous version: the commit it comes from and whether the link holds.
    pub links: Vec<Link>,
    /// Whether the data was proven (`wtxt log --verify`) or only the header read.
    pub data: DataCheck,
    /// What is wrong with this generation; empty when all is well.
    pub problems: Vec<String>,
}

/// What `wtxt log` proved of a generation's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DataCheck {
    /// Only the header was read: its signature and links say nothing of
    /// the bytes until `sha256_all` is recomputed.
    NotVerified,
    /// Verified whole from its commit, as `wtxt verify` does.
    Verified,
    /// Verification failed (see the problems).
    Failed,
}

/// A link from a generation to a previous version.
#[derive(Clone, Debug, Serialize)]
pub struct Link {
    /// The commit where the link is checked.
    pub commit: String,
    /// The generation there.
    pub gen: u64,
    /// `merkle_prev` is the previous generation's `merkle_this`.
    pub merkle_ok: bool,
    /// `gen` increases.
    pub gen_ok: bool,
}

/// The chain of one path.
#[derive(Clone, Debug, Serialize)]
pub struct Chain {
    /// Path of the snapshot.
    pub path: String,
    /// Newest first, as `git log` shows commits.
    pub generations: Vec<Generation>,
    /// True when every link holds.
    pub ok: bool,
}

/// Options of `wtxt log`.
#[derive(Default)]
pub struct LogOptions {
    /// Keys whose signatures count; when set, unsigned, untrusted and
    /// invalid signatures are flagged.
    pub trusted: Option<TrustedKeys>,
    /// Verify every generation's data from its commit (`--verify`).
    pub verify: bool,
    /// With `verify`: every array must authenticate with it, and the file
    /// carry the keyed tag (`git config wtxt.hmacKey`).
    pub hmac: Option<crate::crypto::HmacKey>,
}

/// A version of the file: which blob, and its parsed header.
#[derive(Clone)]
pub(super) struct Version {
    commit: Oid,
    pub(super) header: Option<Header>,
    error: Option<String>,
}

/// Opens the repository around `path`'s folder (else around `dir`) and
/// resolves `path` (relative to `dir`) to a path inside it; in a bare repository (a server
/// auditing what it holds) `path` is taken as the path in its commits.
pub fn open(dir: &Path, path: Option<&Path>) -> Result<(Repository, Option<PathBuf>)> {
    // A path names its own repository (`wtxt log runs/model.wtxt` from
    // outside `runs/`); without one, the repository is `dir`'s.
    let around = path.and_then(|p| dir.join(p).parent().map(Path::to_path_buf)).filter(|f| f.is_dir());
    let repo = around
        .and_then(|f| Repository::discover(f).ok())
        .map_or_else(|| Repository::discover(dir), Ok)
        .map_err(|e| Error::usage(format!("not in a Git repository: {}", e.message())))?;
    let Some(root) = repo.workdir() else {
        let rel = path.map(in_commits).transpose()?;
        return Ok((repo, rel));
    };
    let root = root.canonicalize().map_err(|e| Error::io(root, e))?;
    let rel = match path {
        None => None,
        Some(p) => {
            let abs = if p.is_absolute() { p.to_path_buf() } else { dir.join(p) };
            // The file may no longer exist: canonicalize its folder.
            let parent = abs.parent().unwrap_or(Path::new("."));
            let parent = parent.canonicalize().map_err(|e| Error::io(parent, e))?;
            let full =
                parent.join(abs.file_name().ok_or_else(|| Error::usage(format!("{}: not a file", p.display())))?);
            Some(
                full.strip_prefix(&root)
                    .map_err(|_| Error::usage(format!("{} is outside the repository {}", p.display(), root.display())))?
                    .to_path_buf(),
            )
        }
    };
    Ok((repo, rel))
}

/// `path` as a path in a commit's tree: relative, with no `.` or `..`.
fn in_commits(path: &Path) -> Result<PathBuf> {
    let plain = path.components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !plain || path.as_os_str().is_empty() {
        return Err(Error::usage(format!(
            "{}: in a bare repository, name the snapshot by its path in the commits (as `git ls-tree -r HEAD` shows it)",
            path.display()
        )));
    }
    Ok(path.to_path_buf())
}

/// A merge, cherry-pick, revert or rebase that stopped on a conflict:
/// the two versions it combines with HEAD's.
pub struct InProgress {
    /// `merge`, `cherry-pick`, `revert` or `rebase`.
    pub operation: &'static str,
    /// The common ancestor (none when the histories share none).
    pub base: Option<Oid>,
    /// The other side.
    pub theirs: Oid,
}

/// What Git is in the middle of (`Repository::state`, from the files Git
/// keeps while stopped), and the refs it leaves for it (`MERGE_HEAD`,
/// `CHERRY_PICK_HEAD`, `REVERT_HEAD`, `REBASE_HEAD`; a finished operation
/// may leave its ref behind, so the state decides which counts): a merge
/// combines HEAD and MERGE_HEAD over their merge base; a cherry-pick or a
/// rebase step applies a commit's change (base: its parent); a revert
/// applies one backwards.
pub fn in_progress(repo: &Repository) -> Result<InProgress> {
    use git2::RepositoryState as S;
    let (name, operation) = match repo.state() {
        S::Merge => ("MERGE_HEAD", "merge"),
        S::CherryPick | S::CherryPickSequence => ("CHERRY_PICK_HEAD", "cherry-pick"),
        S::Revert | S::RevertSequence => ("REVERT_HEAD", "revert"),
        S::Rebase | S::RebaseInteractive | S::RebaseMerge | S::ApplyMailboxOrRebase => ("REBASE_HEAD", "rebase"),
        _ => return Err(Error::usage("no merge, cherry-pick, revert or rebase is in progress")),
    };
    let c = repo
        .revparse_single(name)
        .and_then(|o| o.peel_to_commit())
        .map_err(|_| Error::usage(format!("a {operation} is in progress but {name} names no commit")))?;
    if operation == "merge" {
        let head = repo.head().and_then(|h| h.peel_to_commit()).map_err(git_err)?;
        let bases = match repo.merge_bases(head.id(), c.id()) {
            Ok(b) => b.iter().copied().collect::<Vec<_>>(),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Vec::new(),
            Err(e) => return Err(git_err(e)),
        };
        if bases.len() > 1 {
            return Err(Error::usage(format!(
                "HEAD and MERGE_HEAD have {} merge bases (a criss-cross merge): export the versions with `wtxt git export` and `wtxt merge` them",
                bases.len()
            )));
        }
        return Ok(InProgress { operation, base: bases.first().copied(), theirs: c.id() });
    }
    let parent = c.parent_id(0).ok();
    if operation != "revert" {
        return Ok(InProgress { operation, base: parent, theirs: c.id() });
    }
    let parent = parent.ok_or_else(|| Error::usage(format!("{name} has no parent to revert to")))?;
    Ok(InProgress { operation, base: Some(c.id()), theirs: parent })
}

/// Every `*.wtxt` path in HEAD's tree.
pub fn wtxt_paths(repo: &Repository) -> Result<Vec<PathBuf>> {
    snapshot_paths(&repo.head().and_then(|h| h.peel_to_tree()).map_err(git_err)?, &Progress::hidden())
}

/// Every `*.wtxt` path in `tree` (a split snapshot by its head), walked
/// within `progress`'s deadline (a tree can hold millions of entries).
pub fn snapshot_paths(tree: &Tree, progress: &Progress) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut late = None;
    // A tree that names one entry twice is malformed (`git fsck` refuses
    // it): which of the two a reader sees depends on the reader.
    let mut seen = std::collections::HashSet::new();
    let mut twice = None;
    let walked = tree.walk(git2::TreeWalkMode::PreOrder, |dir, e| {
        if seen.len() % 4096 == 4095 {
            if let Err(e) = progress.in_time() {
                late = Some(e);
                return git2::TreeWalkResult::Abort;
            }
        }
        let path = format!("{dir}{}", String::from_utf8_lossy(e.name_bytes()));
        if seen.contains(&path) {
            twice = Some(path);
            return git2::TreeWalkResult::Abort;
        }
        let b = path.as_bytes();
        if e.kind() == Some(ObjectType::Blob) && b.len() >= 5 && b[b.len() - 5..].eq_ignore_ascii_case(b".wtxt") {
            out.push(PathBuf::from(&path));
        }
        seen.insert(path);
        git2::TreeWalkResult::Ok
    });
    if let Some(e) = late {
        return Err(e);
    }
    if let Some(p) = twice {
        return Err(Error::input(Default::default(), format!("tree {}: `{p}` is listed twice", tree.id())));
    }
    walked.map_err(git_err)?;
    Ok(out)
}

pub(super) fn blob_at(tree: &Tree, path: &Path) -> Option<Oid> {
    tree.get_path(path).ok().filter(|e| e.kind() == Some(ObjectType::Blob)).map(|e| e.id())
}

/// The path `path` (in `child`) had in `parent`, following a rename.
/// Only files `parent` has and `child` lacks can be where `path` came
/// from: their blobs and `path`'s are all that is compared (and, in a
/// partial clone, fetched), never those of other files the commit adds or
/// changes.
fn path_in_parent(repo: &Repository, parent: &Tree, child: &Tree, path: &Path) -> Result<PathBuf> {
    let Some(new) = blob_at(child, path) else { return Ok(path.to_path_buf()) };
    if blob_at(parent, path).is_some() {
        return Ok(path.to_path_buf());
    }
    let listed = repo
        .diff_tree_to_tree(Some(parent), Some(child), Some(DiffOptions::new().ignore_submodules(true)))
        .map_err(git_err)?;
    let mut gone = Vec::new();
    for d in listed.deltas().filter(|d| d.status() == git2::Delta::Deleted) {
        let Some(old) = d.old_file().path() else { continue };
        // The same bytes under another name need no reading.
        if d.old_file().id() == new {
            return Ok(old.to_path_buf());
        }
        gone.push((old.to_path_buf(), d.old_file().id()));
    }
    if gone.is_empty() {
        return Ok(path.to_path_buf());
    }
    // The same diff over those paths alone, each taken literally.
    let mut opts = DiffOptions::new();
    opts.ignore_submodules(true).disable_pathspec_match(true).pathspec(path);
    for (old, _) in &gone {
        opts.pathspec(old);
    }
    let mut diff = repo.diff_tree_to_tree(Some(parent), Some(child), Some(&mut opts)).map_err(git_err)?;
    let sides = gone.iter().map(|(_, o)| *o).chain([new]).filter(|o| !o.is_zero());
    crate::odb::promisor::fetch_missing(repo, sides.collect::<Vec<_>>())?;
    diff.find_similar(Some(DiffFindOptions::new().renames(true).rename_threshold(50))).map_err(git_err)?;
    for d in diff.deltas() {
        if d.status() == git2::Delta::Renamed && d.new_file().path() == Some(path) {
            if let Some(old) = d.old_file().path() {
                return Ok(old.to_path_buf());
            }
        }
    }
    Ok(path.to_path_buf())
}

fn read_version(blobs: &mut Blobs, commit: Oid, blob: Oid) -> Version {
    // A header needs at most 5 lines of at most 4096 bytes.
    let head = match blobs.prefix(blob, 5 * 4097) {
        Ok(h) => h,
        Err(e) => return Version { commit, header: None, error: Some(e.message().to_string()) },
    };
    // Only complete lines: the header is parsed from what was read.
    let cut = head.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    let text = &head[..cut];
    match read_header(&mut LineReader::new(text)) {
        Ok(h) => {
            let sign = text
                .get(h.signed_bytes.len()..)
                .and_then(|rest| rest.split(|&x| x == b'\n').next())
                .filter(|l| l.starts_with(b"sign "))
                .and_then(|l| SignLine::parse(l).ok());
            Version { commit, header: Some(Header { sign, ..h }), error: None }
        }
        Err(e) => Version { commit, header: None, error: Some(e.to_string()) },
    }
}

/// The header of HEAD's version of `path`, if HEAD has one (read from the
/// start of its blob: a head, or a single file's first lines), unverified.
pub fn head_header(repo: &Repository, path: &Path) -> Result<Option<Header>> {
    let Some(tree) = repo.head().ok().and_then(|h| h.peel_to_tree().ok()) else { return Ok(None) };
    let Some(blob) = blob_at(&tree, path) else { return Ok(None) };
    let shown = PathBuf::from(format!("HEAD:{}", path.display()));
    let head = crate::odb::blob::prefix(repo, blob, split::MAX_HEAD + 1)?;
    read_header(&mut LineReader::new(&head[..])).map(Some).map_err(|e| e.in_file(&shown))
}

/// The link a new generation of `path` continues from HEAD's version, if
/// HEAD has one: its `gen` and `merkle_this`, once that version verified
/// whole from its blobs under `opts` (nothing chains from what it did not
/// verify).
pub fn head_link(repo: &Repository, path: &Path, opts: &VerifyOptions) -> Result<Option<(u64, Hash)>> {
    let Some(tree) = repo.head().ok().and_then(|h| h.peel_to_tree().ok()) else { return Ok(None) };
    let Some(blob) = blob_at(&tree, path) else { return Ok(None) };
    let shown = PathBuf::from(format!("HEAD:{}", path.display()));
    let report =
        verify_version(repo, Some(&tree), path, blob, opts, &Progress::hidden()).map_err(|e| e.in_file(&shown))?;
    if let Some(p) = report.first_error() {
        return Err(p.to_error().in_file(&shown));
    }
    let head = crate::odb::blob::prefix(repo, blob, split::MAX_HEAD + 1)?;
    let h = read_header(&mut LineReader::new(&head[..])).map_err(|e| e.in_file(&shown))?;
    match h.root {
        Root::Final { merkle_this, .. } => Ok(Some((h.meta.gen, merkle_this))),
        Root::Pending => Err(Error::input(Default::default(), "a WTXT-S: finalize it first").in_file(&shown)),
    }
}

/// Fetches in one round trip what a walk of `path`'s history from HEAD
/// will read and the repository lacks: in a blobless partial clone every
/// version's head (a single file, or a split snapshot's head), and with
/// `parts` every part of every version; then, with `parts`, the Git LFS
/// objects of parts kept in LFS, in one `git lfs fetch`. The walk reads
/// trees only, which a blobless clone has; a version reached through a
/// rename is fetched when the rename is followed. Returns how many objects
/// were fetched.
pub fn prefetch(repo: &Repository, path: &Path, parts: bool) -> Result<usize> {
    let partial = crate::odb::promisor::promisor(repo).is_some();
    if !partial && !parts {
        return Ok(0);
    }
    let Ok(head) = repo.head().and_then(|h| h.peel_to_commit()) else { return Ok(0) };
    let mut walk = repo.revwalk().map_err(git_err)?;
    walk.push(head.id()).map_err(git_err)?;
    // Every commit names its head's blob, most of them the same one.
    let mut want = std::collections::HashSet::new();
    let mut part_blobs = Vec::new();
    let mut seen_parts = std::collections::HashSet::new();
    for oid in walk {
        let oid = oid.map_err(git_err)?;
        let tree = repo.find_commit(oid).and_then(|c| c.tree()).map_err(git_err)?;
        want.extend(blob_at(&tree, path));
        // A parts folder many commits share is listed once.
        if let Some(dir) = parts_of(&tree, path).filter(|dir| parts && seen_parts.insert(*dir)) {
            part_blobs.extend(part_blobs_of(repo, dir));
        }
    }
    want.extend(part_blobs.iter().copied());
    let n = crate::odb::promisor::fetch_missing(repo, want)?;
    Ok(n + crate::odb::lfs::fetch_missing(repo, &crate::odb::lfs::pointers(repo, &part_blobs))?)
}

/// Fetches what reading the whole split snapshot `head` at `path` in
/// `tree` needs (see [`fetch_parts`]).
pub(crate) fn fetch_version(repo: &Repository, tree: &Tree, path: &Path, head: &split::Head) -> Result<usize> {
    let every: Vec<u64> = (1..=head.parts.len() as u64).collect();
    fetch_parts(repo, tree, path, head, &every)
}

/// Fetches what reading parts `ixs` of the split snapshot `head` at `path`
/// in `tree` needs, and nothing else: those parts' blobs (in a blobless
/// clone), then the LFS objects of those that are pointers of the size the
/// head gives (a pointer of another size is refused unread), in one round
/// trip each; parts being LFS pointers, the other parts' pointers come in
/// one more, for [`crate::format::split::PartSource::check_unopened`].
/// [`crate::format::split::parts_for`] says which parts a read of some
/// arrays needs.
pub(crate) fn fetch_parts(
    repo: &Repository,
    tree: &Tree,
    path: &Path,
    head: &split::Head,
    ixs: &[u64],
) -> Result<usize> {
    let dir = crate::store::parts_dir(path);
    let blobs: Vec<(u64, Oid)> =
        ixs.iter().filter_map(|&ix| Some((ix, blob_at(tree, &dir.join(split::part_name(ix)))?))).collect();
    let mut n = crate::odb::promisor::fetch_missing(repo, blobs.iter().map(|b| b.1))?;
    let sized = |ix: u64| head.parts.get(usize::try_from(ix).ok()?.checked_sub(1)?).map(|p| p.bytes);
    let pointers: Vec<crate::odb::lfs::Pointer> = blobs
        .iter()
        .filter_map(|&(ix, id)| crate::odb::lfs::Pointer::of_blob(repo, id).filter(|p| Some(p.size) == sized(ix)))
        .collect();
    // Parts in LFS: every other part's pointer too (a few hundred bytes
    // each), so that a read of some arrays checks each part's size.
    if !pointers.is_empty() && blobs.len() < head.parts.len() {
        let others = head.parts.iter().filter_map(|p| blob_at(tree, &dir.join(split::part_name(p.ix))));
        n += crate::odb::promisor::fetch_missing(repo, others)?;
    }
    n += crate::odb::lfs::fetch_missing(repo, &pointers)?;
    Ok(n)
}

/// The version of `path` in revision `rev` of `repo`: the revision's
/// tree, its commit (when it is one) and the blob at `path`, fetched
/// where a blobless clone lacks it.
pub fn version_at<'r>(repo: &'r Repository, rev: &str, path: &Path) -> Result<(Tree<'r>, Option<Oid>, Oid)> {
    let object = repo.revparse_single(rev).map_err(git_err)?;
    let tree = object.peel_to_tree().map_err(git_err)?;
    let commit = object.peel_to_commit().ok().map(|c| c.id());
    let blob =
        blob_at(&tree, path).ok_or_else(|| Error::usage(format!("{rev}: no {} in that commit", path.display())))?;
    crate::odb::promisor::fetch_missing(repo, [blob])?;
    Ok((tree, commit, blob))
}

/// The blobs of the parts folder `dir` that bear a part's name: what a
/// whole read of its snapshot may open (anything else there is refused by
/// name, never read).
fn part_blobs_of(repo: &Repository, dir: Oid) -> Vec<Oid> {
    let Ok(sub) = repo.find_tree(dir) else { return Vec::new() };
    let named = |e: &git2::TreeEntry| e.name().is_ok_and(|n| split::part_ix(n).is_some());
    sub.iter().filter(|e| e.kind() == Some(ObjectType::Blob) && named(e)).map(|e| e.id()).collect()
}

/// Walks the history of `path` from HEAD and checks every link (and, with
/// [`LogOptions::verify`], every generation's data, counted on `progress`).
pub fn chain(repo: &Repository, path: &Path, opts: &LogOptions, progress: &Progress) -> Result<Chain> {
    prefetch(repo, path, opts.verify)?;
    let head = repo.head().and_then(|h| h.peel_to_commit()).map_err(git_err)?;
    let mut walk = repo.revwalk().map_err(git_err)?;
    walk.push(head.id()).map_err(git_err)?;
    walk.set_sorting(Sort::TOPOLOGICAL | Sort::TIME).map_err(git_err)?;
    let mut paths: HashMap<Oid, PathBuf> = HashMap::from([(head.id(), path.to_path_buf())]);
    let mut versions = Versions::new(repo);
    let mut generations = Vec::new();
    for oid in walk {
        let oid = oid.map_err(git_err)?;
        let commit = repo.find_commit(oid).map_err(git_err)?;
        let Some(p) = paths.get(&oid).cloned() else { continue };
        let tree = commit.tree().map_err(git_err)?;
        for parent in commit.parents() {
            let pp = path_in_parent(repo, &parent.tree().map_err(git_err)?, &tree, &p)?;
            paths.entry(parent.id()).or_insert(pp);
        }
        if let Some(g) = versions.generation(&commit, &p, opts, progress)? {
            generations.push(g);
        }
    }
    let ok = generations.iter().all(|g| g.problems.is_empty());
    Ok(Chain { path: path.display().to_string(), generations, ok })
}

/// The versions of snapshots read so far (headers parsed once).
pub struct Versions<'r> {
    pub(super) repo: &'r Repository,
    blobs: Blobs<'r>,
    cache: HashMap<Oid, Version>,
    /// What was verified, to check each generation against its parent's.
    pub proofs: Proofs,
}

impl<'r> Versions<'r> {
    /// Nothing read yet.
    pub fn new(repo: &'r Repository) -> Versions<'r> {
        Versions { repo, blobs: Blobs::new(repo), cache: HashMap::new(), proofs: Proofs::default() }
    }

    /// As [`Versions::new`], with what was verified recorded in the
    /// repository between runs (the server's guard, [`Proofs::kept_in`]).
    pub fn recorded(repo: &'r Repository) -> Versions<'r> {
        Versions { proofs: Proofs::kept_in(repo), ..Versions::new(repo) }
    }

    /// The generation `commit` makes of the snapshot at `path`, checked
    /// against the version each parent has (following renames), or none
    /// when the commit has no such file or did not change it: neither its
    /// blob nor, for a split snapshot, its parts' folder.
    pub fn generation(
        &mut self,
        commit: &Commit,
        path: &Path,
        opts: &LogOptions,
        progress: &Progress,
    ) -> Result<Option<Generation>> {
        let repo = self.repo;
        let tree = commit.tree().map_err(git_err)?;
        let Some(blob) = blob_at(&tree, path) else { return Ok(None) };
        let parts = parts_of(&tree, path);
        let mut prevs: Vec<(Oid, Oid)> = Vec::new();
        // A parent's head kept as it was while its parts changed.
        let mut parts_alone = false;
        for parent in commit.parents() {
            let pp = path_in_parent(repo, &parent.tree().map_err(git_err)?, &tree, path)?;
            if let Some((c, b)) = self.served(&parent, &pp, progress)? {
                let same_parts = || -> Result<bool> {
                    Ok(parts_of(&repo.find_commit(c).and_then(|c| c.tree()).map_err(git_err)?, &pp) == parts)
                };
                if b == blob {
                    // The same version as a parent's: this commit made no
                    // generation. The same head over other parts is no new
                    // generation either, but damage: the head commits to
                    // its parts' bytes.
                    if same_parts()? {
                        return Ok(None);
                    }
                    parts_alone = true;
                    continue;
                }
                prevs.push((c, b));
            }
        }
        let cur = read_version(&mut self.blobs, commit.id(), blob);
        let prev_versions: Vec<Version> = prevs.iter().map(|(c, b)| self.version(*c, *b).clone()).collect();
        let mut g = check(commit, path, &cur, &prev_versions, opts);
        if parts_alone {
            g.problems.push("its parts changed under an unchanged head: they no longer match the head".into());
        }
        if opts.verify {
            progress.restart(&format!("{} {}", &g.commit[..10], path.display()));
            let vopts =
                VerifyOptions { trusted: opts.trusted.as_ref(), hmac_key: opts.hmac.as_ref(), ..Default::default() };
            let base = match prevs.first() {
                Some((c, b)) => Some((repo.find_commit(*c).and_then(|c| c.tree()).map_err(git_err)?.id(), *b)),
                None => None,
            };
            let verified = self.proofs.verify(repo, Some(&tree), path, blob, base, &vopts, progress);
            // A signature the policy refuses says nothing against the
            // data, which was verified all the same: it is flagged as the
            // signature's, and the data counts as verified unless it failed.
            let data_problem = verified.map(|r| {
                let (signer, data): (Vec<_>, Vec<_>) =
                    r.errors.into_iter().partition(|p| p.kind == crate::format::verify::ProblemKind::Signature);
                g.problems.extend(signer.iter().map(|p| format!("signature: {}", p.text())));
                data.into_iter().next()
            });
            match data_problem {
                Ok(None) => g.data = DataCheck::Verified,
                Ok(Some(mut problem)) => {
                    // The model's names from the work tree's copy (display only).
                    if let (Some(a), Some(w)) = (&problem.array, repo.workdir()) {
                        problem.original = crate::convert::names::originals_of(&w.join(path)).remove(a);
                    }
                    let file = problem.file.clone().unwrap_or_else(|| path.display().to_string());
                    g.problems.push(format!("data: {file}: line {}: {}", problem.line, problem.text()));
                    g.data = DataCheck::Failed;
                }
                Err(e) => {
                    g.problems.push(format!("data: {}", crate::error::one_line(&e.to_string())));
                    g.data = DataCheck::Failed;
                }
            }
        }
        self.cache.insert(blob, cur);
        Ok(Some(g))
    }
}

impl Versions<'_> {
    /// The version `blob` (first seen in `commit`), its header read once.
    pub(super) fn version(&mut self, commit: Oid, blob: Oid) -> &Version {
        self.cache.entry(blob).or_insert_with(|| read_version(&mut self.blobs, commit, blob))
    }

    /// The version of `path` that `start` answers for: its own, else the
    /// newest (highest `gen`) of the versions nearest to it along every
    /// parent, so that a version deleted since still counts, and a merge
    /// whose first parent never had the path hides none of its other
    /// parents' (a rollback in two pushes: the path removed by such a
    /// merge, an old generation added back after it). At most
    /// `MAX_LOOKBACK` commits are searched, within `progress`'s deadline;
    /// a version whose header does not read counts as the newest, so that
    /// the link to it is checked and refused.
    pub fn served(&mut self, start: &Commit, path: &Path, progress: &Progress) -> Result<Option<(Oid, Oid)>> {
        if let Some(b) = blob_at(&start.tree().map_err(git_err)?, path) {
            return Ok(Some((start.id(), b)));
        }
        let mut seen = std::collections::HashSet::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut found = Vec::new();
        'walk: while let Some(c) = queue.pop_front() {
            for p in c.parents() {
                if !seen.insert(p.id()) {
                    continue;
                }
                if seen.len() > MAX_LOOKBACK {
                    break 'walk;
                }
                progress.in_time()?;
                match blob_at(&p.tree().map_err(git_err)?, path) {
                    Some(b) => found.push((p.id(), b)),
                    None => queue.push_back(p),
                }
            }
        }
        let newest =
            found.into_iter().max_by_key(|&(c, b)| self.version(c, b).header.as_ref().map_or(u64::MAX, |h| h.meta.gen));
        Ok(newest)
    }
}

fn check(commit: &Commit, path: &Path, cur: &Version, prevs: &[Version], opts: &LogOptions) -> Generation {
    let mut g = Generation {
        commit: commit.id().to_string(),
        parents: commit.parent_ids().map(|p| p.to_string()).collect(),
        path: path.display().to_string(),
        summary: commit.summary().ok().flatten().unwrap_or_default().to_string(),
        gen: 0,
        ts: String::new(),
        build: String::new(),
        keyid: None,
        signature: SigStatus::Absent,
        sha256_all: None,
        merkle_prev: None,
        merkle_this: None,
        links: Vec::new(),
        data: DataCheck::NotVerified,
        problems: Vec::new(),
    };
    let Some(h) = &cur.header else {
        g.problems.push(format!("not a readable WTXT: {}", cur.error.clone().unwrap_or_default()));
        return g;
    };
    g.gen = h.meta.gen;
    g.ts = h.meta.ts.as_str().to_string();
    g.build = h.meta.build.clone();
    let Root::Final { sha256_all, merkle_prev, merkle_this: mt, .. } = &h.root else {
        g.problems.push("a WTXT-S (root_pending) was committed: its chain cannot be proven".into());
        return g;
    };
    g.sha256_all = Some(hex::encode(sha256_all));
    g.merkle_prev = Some(hex::encode(merkle_prev));
    g.merkle_this = Some(hex::encode(mt));
    if merkle_this(merkle_prev, sha256_all, h.meta.ts.as_str(), &h.meta.gen_str(), &h.meta.build) != *mt {
        g.problems.push("merkle_this does not match the header's own fields".into());
    }
    g.signature = match &h.sign {
        None => SigStatus::Absent,
        Some(s) => {
            g.keyid = Some(hex::encode(s.keyid));
            match opts.trusted.as_ref().and_then(|t| t.find(&s.keyid)) {
                None => SigStatus::Untrusted,
                Some(k) if k.verify(&h.signed_bytes, &s.signature) => SigStatus::Valid,
                Some(_) => SigStatus::Invalid,
            }
        }
    };
    match g.signature {
        SigStatus::Invalid => {
            g.problems.push(format!("signature by keyid {} does not verify", g.keyid.clone().unwrap_or_default()))
        }
        SigStatus::Untrusted if opts.trusted.is_some() => {
            g.problems.push(format!("signed by keyid {}, which is not trusted", g.keyid.clone().unwrap_or_default()))
        }
        SigStatus::Absent if opts.trusted.is_some() => g.problems.push("not signed".into()),
        _ => {}
    }
    let readable: Vec<(&Version, &Header, [u8; 32])> = prevs
        .iter()
        .filter_map(|v| match &v.header {
            Some(ph) => match ph.root {
                Root::Final { merkle_this, .. } => Some((v, ph, merkle_this)),
                Root::Pending => None,
            },
            None => None,
        })
        .collect();
    for (v, ph, pthis) in &readable {
        g.links.push(Link {
            commit: v.commit.to_string(),
            gen: ph.meta.gen,
            merkle_ok: *merkle_prev == *pthis,
            gen_ok: h.meta.gen > ph.meta.gen,
        });
    }
    if readable.is_empty() {
        if !prevs.is_empty() {
            g.problems.push("the previous version is not a readable, final WTXT".into());
        }
        // Genesis: nothing before it in this history.
        return g;
    }
    if !g.links.iter().any(|l| l.merkle_ok) {
        let want: Vec<String> = readable.iter().map(|(_, _, t)| hex::encode(&t[..6])).collect();
        g.problems.push(format!(
            "broken link: merkle_prev {} is not the previous generation's merkle_this ({})",
            &hex::encode(merkle_prev)[..12],
            want.join(" or ")
        ));
    }
    // Gaps are fine (a daemon that coalesces requests skips generations);
    // the Merkle link is what chains them. Going backwards is not.
    if let Some(max) = readable.iter().map(|(_, ph, _)| ph.meta.gen).max() {
        if h.meta.gen <= max {
            g.problems.push(format!(
                "gen goes backwards: {} after {}",
                h.meta.gen_str(),
                crate::format::syntax::pad(max, 6)
            ));
        }
    }
    g
}
