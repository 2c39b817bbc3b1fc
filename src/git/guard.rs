//! The server's guard: Git's `pre-receive` hook in a bare repository
//! (`wtxt git install --server` installs a hook that runs `wtxt hook
//! pre-receive`).
//!
//! Git hands the hook one line per ref update (`OLD NEW REF`) while the
//! pushed objects wait in quarantine, visible through the environment Git
//! sets (which [`Repository::open_from_env`] and `git cat-file` honour); a
//! non-zero exit refuses the whole push and nothing of it reaches the refs.
//! Every commit the push brings (reachable from a new tip and from no ref
//! the repository has) that adds or changes a snapshot (a path named
//! `*.wtxt` in any case, any blob that begins with the WTXT magic line
//! whatever its name, as a filter stores `model.safetensors`; a split
//! snapshot's head or parts) is checked as `wtxt log --verify` checks a
//! generation: the data verified whole from its blobs, the header's own
//! `merkle_this`, the link to each parent's version, and with
//! `wtxt.trustedKeys` set a valid signature by one of those keys. A tag
//! or ref naming a tree or a blob has every snapshot it holds verified so.
//! Nothing the push carries is run: blobs are read, never checked out,
//! filtered or shown through a textconv. The work is bounded: at most
//! [`MAX_UPDATES`] ref updates and `wtxt.guardMaxCommits` new commits
//! (default [`DEFAULT_MAX_COMMITS`]), and a push still being checked after
//! `wtxt.guardSeconds` (default [`DEFAULT_SECONDS`]) is refused, inside a
//! generation's verification too; verifying streams, so memory does not
//! grow with a snapshot.

use std::collections::HashMap;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{ObjectType, Oid, Repository, Sort, Tree};

use crate::error::{Error, Result};
use crate::format::verify::VerifyOptions;
use crate::git::history::{snapshot_paths, LogOptions, Versions};
use crate::git::proof::verify_version;
use crate::git::served::{Record, Served};
use crate::odb::blob::Blobs;
use crate::odb::git_err;
use crate::progress::Progress;

/// The most ref updates one push may carry.
pub const MAX_UPDATES: usize = 10_000;
/// The most new commits one push may bring unless `wtxt.guardMaxCommits` says otherwise.
pub const DEFAULT_MAX_COMMITS: u64 = 100_000;
/// How long a push may be checked unless `wtxt.guardSeconds` says otherwise.
pub const DEFAULT_SECONDS: u64 = 3600;

/// One line of Git's input to `pre-receive`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The ref's tip before the push (zero: the ref is new).
    pub old: Oid,
    /// Its tip after (zero: the ref is deleted).
    pub new: Oid,
    /// The ref, as Git names it.
    pub refname: String,
}

/// Parses Git's `OLD NEW REF` lines.
pub fn parse_updates(input: &[u8]) -> Result<Vec<Update>> {
    let text = std::str::from_utf8(input).map_err(|_| Error::usage("pre-receive: Git's input is not UTF-8"))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let bad = || Error::usage(format!("pre-receive: input line {}: expected OLD NEW REF", i + 1));
        let mut f = line.splitn(3, ' ');
        let (Some(old), Some(new), Some(refname)) = (f.next(), f.next(), f.next()) else { return Err(bad()) };
        let (old, new) = (Oid::from_str(old).map_err(|_| bad())?, Oid::from_str(new).map_err(|_| bad())?);
        if out.len() == MAX_UPDATES {
            return Err(Error::usage(format!("pre-receive: more than {MAX_UPDATES} ref updates in one push")));
        }
        out.push(Update { old, new, refname: refname.to_string() });
    }
    Ok(out)
}

/// Why a push is refused: the first generation that failed in each ref.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The ref the push updates.
    pub refname: String,
    /// The commit (hex), empty when the refusal is not about one.
    pub commit: String,
    /// The snapshot's path in it.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

/// What the guard found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// New commits walked.
    pub commits: u64,
    /// Generations checked (new or changed snapshots in those commits).
    pub generations: u64,
    /// Empty when the push may land.
    pub refusals: Vec<Refusal>,
    /// Parts of split snapshots read, of all those the generations
    /// checked have: the others were the same bytes as in a generation
    /// verified before ([`crate::git::proof::Proofs`]).
    pub parts_read: u64,
    /// See `parts_read`.
    pub parts_total: u64,
}

/// Checks what `updates` bring into `repo` (opened from Git's environment,
/// so the quarantined objects are visible) under its policy.
pub fn check(repo: &Repository, updates: &[Update]) -> Result<Verdict> {
    let cfg = repo.config().map_err(git_err)?;
    let max_commits = cfg.get_i64("wtxt.guardMaxCommits").map_or(DEFAULT_MAX_COMMITS, |v| v.max(0) as u64);
    let seconds = cfg.get_i64("wtxt.guardSeconds").map_or(DEFAULT_SECONDS, |v| v.max(0) as u64);
    let late = format!("still checking after {seconds} s (wtxt.guardSeconds)");
    let progress = &Progress::hidden().until(Instant::now() + Duration::from_secs(seconds), late);
    let opts = LogOptions {
        trusted: super::config::configured_trusted_keys(repo)?,
        verify: true,
        hmac: super::config::configured_hmac_key(repo)?,
    };
    // What the repository already holds: every ref's tip before the push.
    let mut known = Vec::new();
    for r in repo.references().map_err(git_err)?.flatten() {
        if known.len() % 1024 == 1023 {
            progress.in_time()?;
        }
        if let Some(id) = r.resolve().ok().and_then(|r| r.target()) {
            known.push(id);
        }
    }
    let mut verdict = Verdict::default();
    let mut versions = Versions::recorded(repo);
    let mut held = Held::new(repo, progress);
    // What every ref updated served before the push (a ref deleted now
    // too): the newest generation at each snapshot path its tip holds or
    // its record names, so that the ref created again, or moved through a
    // tree or a blob, is checked against it.
    let mut record = Record::read(repo.path())?;
    for u in updates.iter().filter(|u| !u.old.is_zero()) {
        let Ok(old) = repo.find_object(u.old, None) else { continue };
        let mut paths: Vec<PathBuf> = match old.peel_to_tree() {
            Ok(t) => snapshot_paths(&t, progress)?,
            Err(_) => vec![PathBuf::from(&u.refname)],
        };
        paths.extend(record.of(&u.refname).into_iter().map(|(p, _)| PathBuf::from(std::ffi::OsString::from_vec(p))));
        for p in paths {
            if let Some(s) = versions.served_at(&old, &u.refname, &p, progress)? {
                record.note(&u.refname, p.as_os_str().as_bytes(), s);
            }
        }
    }
    for u in updates.iter().filter(|u| !u.new.is_zero()) {
        let refuse = |commit: &str, path: &str, reason: String| Refusal {
            refname: u.refname.clone(),
            commit: commit.to_string(),
            path: path.to_string(),
            reason,
        };
        // A replace ref changes what every reader that follows replace refs
        // sees in place of an object: a signed stand-in for an unsigned blob.
        if u.refname.starts_with("refs/replace/") {
            let why = "replace refs are refused: they would show readers other objects than the ones checked";
            verdict.refusals.push(refuse("", "", why.into()));
            continue;
        }
        let object = repo.find_object(u.new, None).map_err(git_err)?;
        let tip = object.peel_to_commit().ok();
        if tip.is_none() {
            // A tag or ref naming a tree or a blob: no history, but every
            // snapshot it holds is one a clone can read.
            let vopts = VerifyOptions {
                trusted: opts.trusted.as_ref(),
                require_signature: opts.trusted.is_some(),
                hmac_key: opts.hmac.as_ref(),
                ..Default::default()
            };
            for (path, why) in held.unchained(&object, &u.refname, &vopts, progress)? {
                verdict.refusals.push(refuse("", &path, why));
            }
        }
        if let Some(tip) = &tip {
            let mut walk = repo.revwalk().map_err(git_err)?;
            walk.push(tip.id()).map_err(git_err)?;
            for k in &known {
                // A tip that is not a commit (a tag of a blob) hides nothing.
                let _ = walk.hide(*k);
            }
            // Parents first: a refusal names the earliest commit that fails.
            walk.set_sorting(Sort::TOPOLOGICAL | Sort::REVERSE).map_err(git_err)?;
            'commits: for oid in walk {
                if let Some(why) = progress.expired() {
                    verdict.refusals.push(refuse("", "", why.to_string()));
                    return Ok(verdict);
                }
                let commit = repo.find_commit(oid.map_err(git_err)?).map_err(git_err)?;
                verdict.commits += 1;
                if verdict.commits > max_commits {
                    verdict.refusals.push(refuse(
                        "",
                        "",
                        format!("more than {max_commits} new commits (wtxt.guardMaxCommits)"),
                    ));
                    break;
                }
                let base = commit.parents().next().map(|p| p.tree()).transpose().map_err(git_err)?;
                let paths = match held.paths(base.as_ref(), &commit.tree().map_err(git_err)?)? {
                    Ok(p) => p,
                    Err(why) => {
                        verdict.refusals.push(refuse(&commit.id().to_string(), "", why));
                        break 'commits;
                    }
                };
                for path in paths {
                    if let Some(why) = progress.expired() {
                        verdict.refusals.push(refuse("", "", why.to_string()));
                        return Ok(verdict);
                    }
                    let Some(g) = versions.generation(&commit, &path, &opts, progress)? else { continue };
                    verdict.generations += 1;
                    if let Some(p) = g.problems.first() {
                        verdict.refusals.push(refuse(&g.commit, &g.path, p.clone()));
                        break 'commits;
                    }
                }
            }
        }
        // The ref's new tip against what it served, path by path: however
        // the commits between came (a rename, a merge with another history,
        // a force push, the ref deleted and created again, a tag moved
        // through a tree), no snapshot goes back or starts over.
        let shown = tip.as_ref().map_or(String::new(), |t| t.id().to_string());
        let mut baseline: HashMap<PathBuf, Served> = record
            .of(&u.refname)
            .into_iter()
            .map(|(p, s)| (PathBuf::from(std::ffi::OsString::from_vec(p)), s))
            .collect();
        if let Some(old) = (!u.old.is_zero()).then(|| repo.find_object(u.old, None).ok()).flatten() {
            // The paths that changed (a tip already held, so not walked
            // above, whose tree does not list cleanly is refused).
            let (old_tree, new_tree) = (old.peel_to_tree().ok(), object.peel_to_tree().ok());
            if let Some(new_tree) = &new_tree {
                match held.paths(old_tree.as_ref(), new_tree)? {
                    Ok(paths) => {
                        for p in paths {
                            if let Some(s) = versions.served_at(&old, &u.refname, &p, progress)? {
                                let e = baseline.entry(p).or_insert(s);
                                if s.gen > e.gen {
                                    *e = s;
                                }
                            }
                        }
                    }
                    Err(why) => verdict.refusals.push(refuse(&shown, "", why)),
                }
            }
        }
        let new_tree = object.peel_to_tree().ok();
        let mut baseline: Vec<(PathBuf, Served)> = baseline.into_iter().collect();
        baseline.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, served) in baseline {
            let new_blob = match &new_tree {
                Some(t) => t.get_path(&path).ok().filter(|e| e.kind() == Some(ObjectType::Blob)).map(|e| e.id()),
                None => object.peel(ObjectType::Blob).ok().filter(|_| Path::new(&u.refname) == path).map(|b| b.id()),
            };
            let Some(new_blob) = new_blob else { continue };
            if let Some(why) = versions.continues(served, &object, &path, new_blob, max_commits, progress)? {
                verdict.refusals.push(refuse(&shown, &path.display().to_string(), why));
            }
        }
    }
    record.save(repo.path())?;
    (verdict.parts_read, verdict.parts_total) = (versions.proofs.parts_read, versions.proofs.parts_total);
    Ok(verdict)
}

/// Points HEAD at the branch a push creates when HEAD names a branch that
/// does not exist (a bare repository made by `git init --bare` names
/// `master`, the README pushes `main`): a clone then checks it out. Called
/// once the push is accepted; `main` wins where the push creates several.
/// Returns the branch HEAD now names.
pub fn head_to_pushed_branch(repo: &Repository, updates: &[Update]) -> Result<Option<String>> {
    let Ok(head) = repo.find_reference("HEAD") else { return Ok(None) };
    let Ok(Some(target)) = head.symbolic_target() else { return Ok(None) };
    if repo.find_reference(target).is_ok() {
        return Ok(None);
    }
    let created = |u: &&Update| u.old.is_zero() && !u.new.is_zero() && u.refname.starts_with("refs/heads/");
    let mut branches = updates.iter().filter(created);
    let Some(first) = branches.clone().find(|u| u.refname == "refs/heads/main").or_else(|| branches.next()) else {
        return Ok(None);
    };
    if first.refname == target {
        return Ok(None);
    }
    repo.reference_symbolic("HEAD", &first.refname, true, "wtxt: HEAD names the branch pushed").map_err(git_err)?;
    Ok(Some(first.refname.clone()))
}

/// Where snapshots are held, by name and by content, each blob looked at once.
struct Held<'r> {
    repo: &'r Repository,
    /// The push's deadline, inside every tree walked.
    progress: &'r Progress,
    blobs: Blobs<'r>,
    /// Whether a blob begins with the WTXT magic line.
    wtxt: HashMap<Oid, bool>,
}

impl<'r> Held<'r> {
    fn new(repo: &'r Repository, progress: &'r Progress) -> Held<'r> {
        Held { repo, progress, blobs: Blobs::new(repo), wtxt: HashMap::new() }
    }

    /// The snapshot paths of `tree` to check against `base`: every path
    /// named `*.wtxt`, and every other path whose blob differs from
    /// `base`'s (all of them without a base) and holds a WTXT head. Or why
    /// the tree is refused: an entry named twice, or two snapshot paths
    /// that differ only in case (a case-insensitive checkout keeps one).
    fn paths(&mut self, base: Option<&Tree>, tree: &Tree) -> Result<std::result::Result<Vec<PathBuf>, String>> {
        let mut paths = match snapshot_paths(tree, self.progress) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e.message().to_string())),
        };
        let named = paths.len();
        let mut opts = git2::DiffOptions::new();
        opts.ignore_submodules(true);
        let diff = self.repo.diff_tree_to_tree(base, Some(tree), Some(&mut opts)).map_err(git_err)?;
        let mut changed = Vec::new();
        let mut attributes_changed = false;
        for d in diff.deltas() {
            let f = d.new_file();
            let blob = matches!(f.mode(), git2::FileMode::Blob | git2::FileMode::BlobExecutable);
            attributes_changed |= [d.old_file().path(), f.path()]
                .iter()
                .any(|p| p.and_then(Path::file_name).is_some_and(|n| n == ".gitattributes"));
            let Some(path) = f.path().filter(|_| blob && !f.id().is_zero()) else { continue };
            if paths[..named].iter().any(|p| p == path) {
                continue;
            }
            if self.holds_wtxt(f.id())? {
                paths.push(path.to_path_buf());
            } else {
                changed.push(path.to_path_buf());
            }
        }
        // A path a wtxt filter owns holds a snapshot whatever its bytes say:
        // raw bytes staged past the clean filter would reach a clone's
        // work tree as they are. Attributes that change can give the
        // filter files that did not change.
        let candidates = if attributes_changed { blob_paths(tree, self.progress)? } else { changed };
        for (p, filter) in self.owned(tree, candidates)? {
            let blob = tree.get_path(&p).map_err(git_err)?.id();
            if !self.holds_wtxt(blob)? {
                let why = format!("`{}`: filter={filter} owns it, but it holds no WTXT snapshot", p.display());
                return Ok(Err(why));
            }
        }
        let mut folded = HashMap::new();
        for p in &paths {
            if let Some(other) = folded.insert(p.to_string_lossy().to_lowercase(), p) {
                return Ok(Err(format!(
                    "`{}` and `{}` differ only in case: a case-insensitive checkout keeps one of them",
                    other.display(),
                    p.display()
                )));
            }
        }
        Ok(Ok(paths))
    }

    /// Those of `candidates` (paths in `tree`), with their filter, whose attributes, as a
    /// checkout of `tree` reads them, give a wtxt clean/smudge filter
    /// (`filter=wtxt-FORMAT`). Git answers (`git check-attr --source`, the
    /// paths on its standard input, never as patterns); it is asked only
    /// where a `.gitattributes` lies on some candidate's way from the root.
    fn owned(&self, tree: &Tree, candidates: Vec<PathBuf>) -> Result<Vec<(PathBuf, String)>> {
        let mut dirs = std::collections::HashSet::new();
        for p in &candidates {
            dirs.extend(p.ancestors().skip(1));
        }
        let any = dirs.iter().any(|d| tree.get_path(&d.join(".gitattributes")).is_ok());
        if !any {
            return Ok(Vec::new());
        }
        let mut input = Vec::new();
        for p in &candidates {
            input.extend_from_slice(p.as_os_str().as_encoded_bytes());
            input.push(0);
        }
        let source = format!("--source={}", tree.id());
        let args = ["check-attr", "-z", "--stdin", &source, "filter"];
        let out = crate::odb::objects::git_with_input(self.repo.path(), &args, input)?;
        // One `PATH NUL filter NUL VALUE NUL` per path, in the order asked.
        let values = out.split(|&b| b == 0).skip(2).step_by(3);
        let owns = |v: &[u8]| {
            std::str::from_utf8(v)
                .ok()
                .and_then(|v| v.strip_prefix("wtxt-"))
                .is_some_and(|f| crate::git::install::FILTER_FORMATS.contains(&f))
        };
        let owned = candidates.into_iter().zip(values).filter(|(_, v)| owns(v));
        Ok(owned.map(|(p, v)| (p, String::from_utf8_lossy(v).into_owned())).collect())
    }

    /// Whether `blob` begins with the WTXT magic line (with either line end).
    fn holds_wtxt(&mut self, blob: Oid) -> Result<bool> {
        if let Some(&w) = self.wtxt.get(&blob) {
            return Ok(w);
        }
        let start = self.blobs.prefix(blob, 8)?;
        let w = start.starts_with(b"WTXT 1\n") || start.starts_with(b"WTXT 1\r\n");
        self.wtxt.insert(blob, w);
        Ok(w)
    }

    /// Every snapshot held by `object`, a tree or a blob (through tags),
    /// verified whole under `opts`: the path (`refname` for a blob) and
    /// the first problem of each that fails.
    fn unchained(
        &mut self,
        object: &git2::Object,
        refname: &str,
        opts: &VerifyOptions,
        progress: &Progress,
    ) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        let mut verify = |tree: Option<&Tree>, path: &Path, blob: Oid| {
            let first = match verify_version(self.repo, tree, path, blob, opts, progress) {
                Ok(r) => r.errors.into_iter().next().map(|p| format!("data: line {}: {}", p.line, p.text())),
                Err(e) => Some(format!("data: {}", crate::error::one_line(&e.to_string()))),
            };
            if let Some(why) = first {
                out.push((path.display().to_string(), why));
            }
        };
        if let Ok(tree) = object.peel_to_tree() {
            let paths = match self.paths(None, &tree)? {
                Ok(p) => p,
                Err(why) => return Ok(vec![(String::new(), why)]),
            };
            for p in paths {
                let entry = tree.get_path(&p).map_err(git_err)?;
                verify(Some(&tree), &p, entry.id());
            }
        } else if let Ok(blob) = object.peel(ObjectType::Blob) {
            if self.holds_wtxt(blob.id())? {
                verify(None, Path::new(refname), blob.id());
            }
        }
        Ok(out)
    }
}

/// Every blob's path in `tree`, walked within `progress`'s deadline.
fn blob_paths(tree: &Tree, progress: &Progress) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut late = None;
    let walked = tree.walk(git2::TreeWalkMode::PreOrder, |dir, e| {
        if out.len() % 4096 == 4095 {
            if let Err(e) = progress.in_time() {
                late = Some(e);
                return git2::TreeWalkResult::Abort;
            }
        }
        if e.kind() == Some(ObjectType::Blob) {
            out.push(Path::new(dir).join(String::from_utf8_lossy(e.name_bytes()).as_ref()));
        }
        git2::TreeWalkResult::Ok
    });
    if let Some(e) = late {
        return Err(e);
    }
    walked.map_err(git_err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_are_parsed_strictly() {
        let z = "0".repeat(40);
        let a = "a".repeat(40);
        let u = parse_updates(format!("{z} {a} refs/heads/main\n").as_bytes()).unwrap();
        assert_eq!(
            u,
            vec![Update { old: Oid::ZERO_SHA1, new: Oid::from_str(&a).unwrap(), refname: "refs/heads/main".into() }]
        );
        for bad in [format!("{z} {a}\n"), format!("{z} nothex refs/heads/x\n"), "\u{ff}".into()] {
            assert!(parse_updates(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }
}
