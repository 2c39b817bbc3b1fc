//! A snapshot committed as the next commit on HEAD, without a `git`
//! process: the daemon and Python's Snapshotter commit each generation
//! through it. And a snapshot staged with `git add` for a commit the user
//! makes (`git resolve`, model folders).

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::odb::git_err;

/// Stages the snapshot at `head` (a path in the work tree: its `parts`
/// parts replace whatever the index listed in its parts folder) and the
/// `extra` paths, and commits them on HEAD as `who` with `message`.
/// Returns the commit's id. The caller holds [`commit_lock`]
/// from before it put the files in the work tree, so that no other wtxt
/// writer commits in between.
pub fn commit_snapshot(
    repo: &git2::Repository,
    head: &Path,
    parts: u64,
    extra: &[PathBuf],
    who: &str,
    message: &str,
) -> Result<String> {
    let mut index = repo.index().map_err(git_err)?;
    index.read(true).map_err(git_err)?;
    let parts_rel = crate::store::parts_dir(head);
    index.remove_dir(&parts_rel, 0).map_err(git_err)?;
    let work = repo.workdir().ok_or_else(|| crate::error::Error::usage("committing needs a work tree"))?;
    let part_paths: Vec<PathBuf> = (1..=parts).map(|ix| parts_rel.join(crate::format::split::part_name(ix))).collect();
    let mut rels: Vec<&Path> = Vec::new();
    // So that a clone without wtxt never diffs parts as text.
    if crate::git::install::ensure_committed_attributes(work)? {
        rels.push(Path::new(".gitattributes"));
    }
    // And so that `git diff` here shows tensors, not text.
    crate::git::install::drivers_where_unset(repo)?;
    rels.extend(part_paths.iter().map(PathBuf::as_path));
    rels.push(head);
    rels.extend(extra.iter().map(PathBuf::as_path));
    crate::odb::objects::add_to_index(repo, &mut index, work, &rels)?;
    index.write().map_err(git_err)?;
    let tree = repo.find_tree(index.write_tree().map_err(git_err)?).map_err(git_err)?;
    // The author Git's config names (user.name, user.email), as `git
    // commit` would; `who` only where none is configured.
    let sig = repo.signature().or_else(|_| git2::Signature::now(who, "wtxt@localhost")).map_err(git_err)?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<&git2::Commit> = parent.iter().collect();
    let oid = repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents).map_err(git_err)?;
    Ok(oid.to_string())
}

/// Commits the snapshot its writer just put at `head`, inside a work tree
/// (its parts, and `model.sig` beside it when `oms` signed it), as the
/// next commit on HEAD: what the distributed checkpoint writer's
/// coordinator does after a save. Returns the repository's folder and the
/// commit's id.
pub fn commit_written(head: &Path, oms: bool, who: &str, message: &str) -> Result<(PathBuf, String)> {
    let (repo, work, rel, abs) = in_work_tree(head)?;
    let parts = match crate::format::split::open(Box::new(crate::fs::open_input_file(&abs)?))? {
        crate::format::split::Opened::Split(h) => h.parts.len() as u64,
        crate::format::split::Opened::Single(_) => 0,
    };
    let extra: Vec<PathBuf> = if oms { vec![rel.with_file_name(crate::oms::SIGNATURE_NAME)] } else { Vec::new() };
    let _lock = commit_lock(&repo)?;
    continues_head(&repo, &rel, &abs)?;
    let id = commit_snapshot(&repo, &rel, parts, &extra, who, message)?;
    Ok((work, id))
}

/// The repository around `head` (a path that need not exist yet), its work
/// tree, `head` relative to it (links resolved) and `head` made absolute.
pub(crate) fn in_work_tree(head: &Path) -> Result<(git2::Repository, PathBuf, PathBuf, PathBuf)> {
    let abs = std::path::absolute(head).map_err(|e| crate::error::Error::io(head, e))?;
    let dir = abs.parent().unwrap_or(Path::new("/"));
    let repo = git2::Repository::discover(dir).map_err(git_err)?;
    let work = repo
        .workdir()
        .ok_or_else(|| crate::error::Error::usage(format!("{}: not in a Git work tree", head.display())))?
        .canonicalize()
        .map_err(|e| crate::error::Error::io(dir, e))?;
    let real =
        dir.canonicalize().map_err(|e| crate::error::Error::io(dir, e))?.join(abs.file_name().unwrap_or_default());
    let rel = real
        .strip_prefix(&work)
        .map_err(|_| {
            crate::error::Error::usage(format!("{}: not in the work tree {}", head.display(), work.display()))
        })?
        .to_path_buf();
    Ok((repo, work, rel, abs))
}

/// The generation a commit of a snapshot at `head` continues: HEAD's
/// version of that path, verified whole under the repository's policy
/// (nothing chains from what it did not verify): its `gen` and
/// `merkle_this`; `None` when HEAD holds none there. `head`'s folder must
/// exist.
pub fn committed_link(head: &Path) -> Result<Option<(u64, crate::crypto::digest::Hash)>> {
    let (repo, _, rel, _) = in_work_tree(head)?;
    let policy = super::config::Policy::of(&repo)?;
    crate::git::history::head_link(&repo, &rel, &policy.options())
}

/// What the pre-commit hook asks of a snapshot's header before it is
/// committed at `rel`: a signature by the repository's trusted keys where
/// `wtxt.requireSignature` says so (and none that fails), and, when HEAD
/// holds `rel`, the next generation of HEAD's (`gen` + 1, `merkle_prev` =
/// its `merkle_this`). The data is the writer's to have verified: a
/// commit made without `git commit` runs no hook, so it checks here.
fn continues_head(repo: &git2::Repository, rel: &Path, abs: &Path) -> Result<()> {
    use crate::error::Error;
    use crate::format::syntax::Root;
    let policy = super::config::Policy::of(repo)?;
    let f = crate::fs::open_input_file(abs)?;
    let h = crate::format::read::read_head(&mut crate::format::read::LineReader::new(std::io::BufReader::new(f)))
        .map_err(|e| e.in_file(abs))?;
    let status = crate::format::verify::check_header(&h, &policy.options()).map_err(|p| p.to_error().in_file(abs))?;
    if policy.require && status != crate::format::verify::SigStatus::Valid {
        return Err(Error::check(
            Default::default(),
            "wtxt.requireSignature: the repository requires a signature by its trusted keys",
        )
        .in_file(abs));
    }
    let Some(head) = crate::git::history::head_header(repo, rel)? else { return Ok(()) };
    let (Root::Final { merkle_this, .. }, Root::Final { merkle_prev, .. }) = (&head.root, &h.root) else {
        return Err(Error::check(Default::default(), "a WTXT-S cannot be committed: finalize it first").in_file(abs));
    };
    if h.meta.gen != head.meta.gen.saturating_add(1) || merkle_prev != merkle_this {
        return Err(Error::check(
            Default::default(),
            format!(
                "gen {} does not continue HEAD's chain (HEAD holds gen {} of {}): chain it with prev=, or leave \
                 prev and gen unset to continue from HEAD",
                h.meta.gen,
                head.meta.gen,
                rel.display()
            ),
        )
        .in_file(abs));
    }
    Ok(())
}

/// Stages the snapshot its writer just put at `head` (relative to the work
/// tree's top) with `git add -A`: the head, its parts folder (new, changed
/// and gone parts; left out when Git has none there and there is none), and
/// `model.sig` beside it when `oms` signed it. Paths are given as paths,
/// never patterns (`--literal-pathspecs`: a file named `:!x` or `*` is that
/// file). Run inside a hook, `git` stages into the index Git is committing
/// (`GIT_INDEX_FILE`), as `repo` reads it.
pub fn stage_snapshot(repo: &git2::Repository, head: &Path, oms: bool) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let work = repo.workdir().ok_or_else(|| crate::error::Error::usage("staging needs a work tree"))?;
    let parts = crate::store::parts_dir(head);
    let index = repo.index().map_err(git_err)?;
    let listed = index.iter().any(|e| Path::new(std::ffi::OsStr::from_bytes(&e.path)).starts_with(&parts));
    let mut paths = vec![head.to_path_buf()];
    if listed || std::fs::symlink_metadata(work.join(&parts)).is_ok() {
        paths.push(parts);
    }
    if oms {
        paths.push(head.parent().unwrap_or(Path::new("")).join(crate::oms::SIGNATURE_NAME));
    }
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(work)
        .args(["--literal-pathspecs", "add", "-A", "--"])
        .args(&paths)
        .output()
        .map_err(|e| crate::error::Error::io_in("running git add", e))?;
    if !o.status.success() {
        let said = String::from_utf8_lossy(&o.stderr);
        return Err(crate::error::Error::input(Default::default(), format!("git add: {}", said.trim()))
            .in_file(work.join(head)));
    }
    Ok(())
}

/// The lock every `wtxt` commit to `repo` holds from reading the index and
/// HEAD to moving HEAD: two Snapshotters (or a daemon beside one) on one
/// repository commit one after the other, each on the other's tree.
pub fn commit_lock(repo: &git2::Repository) -> Result<crate::fs::FileLock> {
    let path = repo.path().join("wtxt-commit.lock");
    crate::fs::FileLock::take(&path, true)?
        .ok_or_else(|| crate::error::Error::usage("could not lock the repository for a commit"))
}
