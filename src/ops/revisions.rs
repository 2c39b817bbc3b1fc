//! `wtxt diff` of snapshots in commits: each revision resolved once, and
//! two split snapshots of the tree form compared from their commits by
//! reading (in a blobless or LFS clone, fetching) only the parts that hold
//! what changed.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::convert::OriginalNames;
use crate::error::{Error, Result};
use crate::format::split::{self, Head};
use crate::format::syntax::{ArrLine, DigestForm};
use crate::format::verify::VerifyOptions;
use crate::format::{Keep, Load};
use crate::store::input::WtxtIn;

use super::history::{review_of, Review};

/// A snapshot's path in one commit, as a command that reads two names it.
pub struct AtRevision {
    /// The work tree of the repository.
    pub work: PathBuf,
    /// The path in the repository.
    pub rel: PathBuf,
    /// The revision as given.
    pub rev: String,
    /// The commit it named when resolved (hex).
    pub commit: String,
}

impl AtRevision {
    /// Resolves `rev` once for `path`, a file in a Git work tree (which
    /// need not hold it now): later reads see that commit whatever moves.
    pub fn resolve(path: &Path, rev: &str) -> Result<AtRevision> {
        let (repo, work, rel, _) = crate::git::commit::in_work_tree(path)?;
        let commit = repo
            .revparse_single(rev)
            .and_then(|o| o.peel_to_commit())
            .map_err(|e| Error::usage(format!("{rev}:{}: {}", rel.display(), e.message())))?
            .id()
            .to_string();
        Ok(AtRevision { work, rel, rev: rev.to_string(), commit })
    }

    /// `REV:PATH`, as messages name it.
    pub fn shown(&self) -> PathBuf {
        PathBuf::from(format!("{}:{}", self.rev, self.rel.display()))
    }

    /// An error that names the commit read as the revision given.
    pub fn named(&self, e: Error) -> Error {
        let read_as = format!("{}:", self.commit);
        e.renamed(|p| p.to_str()?.strip_prefix(&read_as).map(|rest| PathBuf::from(format!("{}:{rest}", self.rev))))
    }
}

/// [`super::export`] of the snapshot `at` names, from the commit it
/// resolved to (errors name the revision as given).
pub fn export_revision(at: &AtRevision, out: &Path) -> Result<usize> {
    super::parts::export(&at.work, &at.commit, &at.rel, out, split::PartSize::default()).map_err(|e| at.named(e))
}

/// One side opened from its commit: the head and its blob's size.
struct Opened {
    repo: git2::Repository,
    tree: git2::Oid,
    head: Head,
    len: u64,
    shown: PathBuf,
}

impl Opened {
    /// The split snapshot of the tree form at `at`, or `None` for anything else.
    fn of(at: &AtRevision) -> Result<Option<Opened>> {
        let repo = git2::Repository::discover(&at.work).map_err(crate::odb::git_err)?;
        let shown = at.shown();
        let (tree, head, len) = {
            let (tree, _, blob) =
                crate::git::history::version_at(&repo, &at.commit, &at.rel).map_err(|e| at.named(e))?;
            let len = crate::odb::blob::size(&repo, blob)?;
            let text = crate::odb::blob::reader(&repo, blob).map_err(|e| e.in_file(&shown))?;
            match split::open(text) {
                Ok(split::Opened::Split(h)) if h.header().is_ok_and(|h| h.digest() == DigestForm::Tree) => {
                    (tree.id(), h, len)
                }
                _ => return Ok(None),
            }
        };
        Ok(Some(Opened { repo, tree, head, len, shown }))
    }

    /// Its text with only the arrays `keep` is true of, from the parts
    /// that hold them (those fetched first, in one round trip).
    fn sparse(&self, rel: &Path, keep: &dyn Fn(&str) -> bool) -> Result<WtxtIn<'static>> {
        let tree = self.repo.find_tree(self.tree).map_err(crate::odb::git_err)?;
        crate::git::history::fetch_parts(&self.repo, &tree, rel, &self.head, &split::parts_for(&self.head, keep))?;
        let parts = crate::git::parts::BlobParts::of_tree(&self.repo, &tree, rel, &self.head).fetching();
        WtxtIn::sparse(self.head.clone(), Box::new(parts), &self.shown, self.len, keep)
    }

    /// Verifies against the root the arrays `keep` is true of, whole: the
    /// first problem found, if any.
    fn check(&self, rel: &Path, keep: &dyn Fn(&str) -> bool) -> Option<Error> {
        let rows: BTreeMap<String, (u64, u64)> = (self.head.arrs.iter().flatten())
            .filter_map(|l| ArrLine::parse(l).ok())
            .filter(|a| keep(&a.name))
            .map(|a| (a.name, (0, a.shape.first().copied().unwrap_or(1))))
            .collect();
        let mut input = match self.sparse(rel, keep) {
            Ok(i) => i,
            Err(e) => return Some(e),
        };
        let load = Load { keep: Keep::Metadata, rows: Some(&rows), ..Default::default() };
        load.run_lines(input.lines(), input.len, &VerifyOptions::default()).err().map(|e| input.blame(e))
    }

    /// The producer's names and metadata, verified; none where they do not load.
    fn names(&self, rel: &Path) -> OriginalNames {
        let load = || -> Result<OriginalNames> {
            let mut input = self.sparse(rel, &crate::model::is_metadata_name)?;
            let rows = BTreeMap::new();
            let load = Load { keep: Keep::InMemory, rows: Some(&rows), ..Default::default() };
            let loaded =
                load.run_lines(input.lines(), input.len, &VerifyOptions::default()).map_err(|e| input.blame(e))?;
            Ok(OriginalNames::of(&loaded.arrays)?.unwrap_or_default())
        };
        load().unwrap_or_default()
    }
}

/// [`super::review`] of two revisions' snapshots read from their commits,
/// when both are split snapshots of the tree form (`None` otherwise: the
/// caller reads them whole). Only the arrays the heads' `arr` lines say
/// changed, and the metadata arrays, are read: the parts that hold nothing
/// else are neither read nor fetched, and an array left out is reported
/// unchanged on the heads' word (a whole `verify` proves the parts). With
/// `norms`, each changed float array's relative change is given.
pub fn review_revisions(old: &AtRevision, new: &AtRevision, norms: bool) -> Result<Option<Review>> {
    let (Some(a), Some(b)) = (Opened::of(old)?, Opened::of(new)?) else { return Ok(None) };
    // An array added or removed shows from its `arr` line alone.
    let changed: BTreeSet<String> =
        crate::git::parts::arr_changes_of(&a.head, &b.head).changed.into_iter().map(|x| x.name).collect();
    let keep = |n: &str| crate::model::is_metadata_name(n) || changed.contains(n);
    let (mut ta, mut tb) = (a.sparse(&old.rel, &keep)?, b.sparse(&new.rel, &keep)?);
    let names = crate::git::diff::Names { old: &a.shown, new: &b.shown };
    let mut d = crate::git::diff::diff_sparse(ta.text(), tb.text(), names, norms).map_err(|e| {
        if e.path() == Some(b.shown.as_path()) {
            tb.blame(e)
        } else {
            ta.blame(e)
        }
    })?;
    // An array whose text does not explain its head's SHA-256: each side
    // read again for what was compared and verified against its root.
    if !d.unexplained.is_empty() {
        let unexplained = d.unexplained.clone();
        let keep_all = |n: &str| keep(n) || unexplained.iter().any(|u| u == n);
        let check = |p: &Path| {
            let at = if p == a.shown { old } else { new };
            Opened::of(at).ok().flatten().and_then(|side| side.check(&at.rel, &keep_all))
        };
        crate::git::diff::explain(&mut d, names, &check);
    }
    let (na, nb) = (a.names(&old.rel), b.names(&new.rel));
    d.name_originals(&na.names, &nb.names);
    let ha = a.head.header().map_err(|e| e.in_file(&a.shown))?;
    let hb = b.head.header().map_err(|e| e.in_file(&b.shown))?;
    Ok(Some(review_of(d, [(&ha, &na), (&hb, &nb)])))
}
