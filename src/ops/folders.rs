//! Snapshotting a model folder of the work tree into its split snapshot
//! and staging it (`wtxt git folder DIR --stage`, and the pre-commit hook
//! for every folder that changed). The folders themselves, their records
//! and writing them back are [`crate::git::folders`].

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::git::folders::{configured, snapshot_id, stats, work_tree, write_record, Folder, Record, State};
use crate::options::{Keys, MetaFields};
use crate::progress::Progress;

/// What [`stage`] did.
pub struct Staged {
    /// The snapshot written and staged.
    pub snapshot: PathBuf,
    /// Its generation.
    pub gen: u64,
    /// Its size in bytes (head and parts).
    pub len: u64,
}

/// Snapshots the folder `f` into `DIR.wtxt` and stages it (head, parts,
/// and `model.sig` with `wtxt.omsKey`): chained to HEAD's version (verified
/// whole from its blobs first, under the repository's policy), signed with
/// `wtxt.signKey`, split at `wtxt.partSize`. Refused when the snapshot
/// changed too since they last matched (a merge, a checkout), unless
/// `force`.
pub fn stage(repo: &git2::Repository, f: &Folder, force: bool) -> Result<Staged> {
    let work = work_tree(repo)?;
    let st = crate::git::folders::state(repo, f)?;
    if st == State::BothChanged && !force {
        return Err(Error::usage(st.describe(f)));
    }
    let dir = work.join(&f.dir);
    if !crate::convert::hf::is_folder(&dir) {
        return Err(Error::input(
            Default::default(),
            "expected a Hugging Face folder (model.safetensors.index.json or model.safetensors)",
        )
        .in_file(&dir));
    }
    let policy = crate::git::Policy::of(repo)?;
    let link = crate::git::history::head_link(repo, &f.snapshot, &policy.options())?;
    let gen = match link {
        Some((g, _)) => g.checked_add(1).ok_or_else(|| Error::usage("gen overflows"))?,
        None => 0,
    };
    // The folder's snapshot is signed as configured, and HMAC'd by no key.
    let files = crate::git::configured_keys(repo)?;
    let keys = Keys { sign_key: files.sign.key()?, oms_key: files.oms.key()?, ..Keys::default() };
    let signs_oms = keys.oms_key.is_some();
    let opts = super::snapshot::SnapshotOptions {
        meta: MetaFields { gen: link.is_none().then_some(0), ..Default::default() },
        prev: link.map(|(gen, merkle_this)| super::snapshot::Prev::Verified { gen, merkle_this }),
        keys,
        output: crate::git::configured_output(repo)?,
        ..Default::default()
    };
    // Read before the folder is: a file changed while it is read makes
    // the record disagree, and the next commit reads the folder again.
    let before = stats(&dir)?;
    let out = work.join(&f.snapshot);
    let mut notes = Vec::new();
    let written = super::snapshot::snapshot(std::slice::from_ref(&dir), &out, &opts, &Progress::hidden(), &mut notes)?;
    crate::git::commit::stage_snapshot(repo, &f.snapshot, signs_oms)?;
    let id = snapshot_id(&out)?.ok_or_else(|| Error::usage("the snapshot just written is gone"))?;
    write_record(&f.record_path(repo), &Record { snapshot: id, files: before })?;
    Ok(Staged { snapshot: f.snapshot.clone(), gen, len: written.len })
}

/// True when the index holds nothing against HEAD but what `staged` put
/// there (each snapshot, its parts and the `model.sig` beside it): a
/// commit Git began with nothing staged, which it ends as "nothing to
/// commit" whatever its pre-commit hook stages (Git compares the index it
/// read before running the hook), unless it amends or allows an empty one.
pub fn only_folders_staged(dir: &Path, staged: &[Staged]) -> Result<bool> {
    let repo = crate::git::open_for_hook(dir)?;
    let Ok(head) = repo.head().and_then(|h| h.peel_to_tree()) else { return Ok(false) };
    let index = repo.index().map_err(crate::odb::git_err)?;
    let diff = repo.diff_tree_to_index(Some(&head), Some(&index), None).map_err(crate::odb::git_err)?;
    let ours = |p: &Path| {
        staged.iter().any(|s| {
            let parts = crate::store::parts_dir(&s.snapshot);
            let sig = s.snapshot.with_file_name(crate::oms::SIGNATURE_NAME);
            p == s.snapshot || p.starts_with(&parts) || p == sig
        })
    };
    Ok(diff.deltas().all(|d| d.new_file().path().or(d.old_file().path()).is_some_and(ours)))
}

/// Every configured folder of the repository around `dir` that changed,
/// snapshotted and staged (what the pre-commit hook runs first).
pub fn stage_changed(dir: &Path) -> Result<Vec<Staged>> {
    let repo = crate::git::open_for_hook(dir)?;
    let mut out = Vec::new();
    for f in configured(&repo)? {
        match crate::git::folders::state(&repo, &f)? {
            State::FolderChanged | State::NoSnapshot => out.push(stage(&repo, &f, false)?),
            State::BothChanged => return Err(Error::usage(State::BothChanged.describe(&f))),
            _ => {}
        }
    }
    Ok(out)
}
