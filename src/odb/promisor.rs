//! Blobless partial clones (`git clone --filter=blob:none`): the commits
//! and trees are local, a blob only once something asked for it. Git
//! fetches a missing object itself when it reads one, a round trip each;
//! libgit2 does not fetch at all. So a command that will read many blobs
//! of history names them here first, and the missing ones come in one
//! fetch from the promisor remote, as Git's own lazy fetch asks for them.
#![forbid(unsafe_code)]

use std::process::Command;

use git2::{Oid, Repository};

use crate::error::git_err;
use crate::error::{Error, Result};

/// The promisor remote of a partial clone (`extensions.partialClone`, or
/// the first remote with `remote.<name>.promisor` set, as `git clone
/// --filter` leaves it), `None` for a repository that holds every object.
pub fn promisor(repo: &Repository) -> Option<String> {
    let cfg = repo.config().and_then(|mut c| c.snapshot()).ok()?;
    if let Ok(r) = cfg.get_string("extensions.partialclone") {
        return Some(r).filter(|r| !r.is_empty());
    }
    let entries = cfg.entries(Some(r"remote\..*\.promisor")).ok()?;
    let mut found = None;
    entries
        .for_each(|e| {
            if found.is_none() && e.value().is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
                let name = e.name().ok().and_then(|n| n.strip_prefix("remote.")?.strip_suffix(".promisor"));
                found = name.map(str::to_string);
            }
        })
        .ok()?;
    found
}

/// Fetches, in one round trip, those of `oids` that a partial clone lacks;
/// returns how many it asked for (none in a repository that is not a
/// partial clone, or that has them all). Only object ids go to Git, on
/// its standard input, never a path or a pattern; the fetch stops at its
/// deadline ([`crate::odb::child::fetch_limit`]).
pub fn fetch_missing(repo: &Repository, oids: impl IntoIterator<Item = Oid>) -> Result<usize> {
    let Some(remote) = promisor(repo).filter(|r| !r.starts_with('-')) else { return Ok(0) };
    let odb = repo.odb().map_err(git_err)?;
    let mut missing: Vec<Oid> = oids.into_iter().filter(|o| !odb.exists(*o)).collect();
    missing.sort();
    missing.dedup();
    if missing.is_empty() {
        return Ok(0);
    }
    crate::odb::child::may_fetch(repo, missing.len(), &remote)?;
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir").arg(repo.path());
    cmd.args(["-c", "fetch.negotiationAlgorithm=noop", "fetch", "--no-tags", "--no-write-fetch-head"]);
    cmd.args(["--recurse-submodules=no", "--filter=blob:none", "--stdin", &remote]);
    let mut list = String::with_capacity(missing.len() * 41);
    for o in &missing {
        list.push_str(&o.to_string());
        list.push('\n');
    }
    let what = format!("git fetch of {} object(s) from the promisor remote {remote}", missing.len());
    let done = crate::odb::child::run(cmd, list.as_bytes(), crate::odb::child::fetch_limit(repo), &what)?;
    if !done.status.success() {
        let why = crate::error::one_line(done.stderr.trim()).into_owned();
        return Err(Error::input(Default::default(), format!("{what} failed: {why}")));
    }
    // libgit2 lists packs once: the new one is seen after a refresh.
    odb.refresh().map_err(git_err)?;
    Ok(missing.len())
}
