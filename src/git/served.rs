//! What each ref of a guarded repository has served: for every ref and
//! snapshot path, the newest generation (its `gen` and `merkle_this`) a
//! tip of that ref held, kept in `$GIT_DIR/wtxt/served`. The guard checks
//! a ref's new tip against its old one; this record is what it checks
//! against when there is no old tip to read: a ref deleted and created
//! again, a tag moved through a tree or a blob (which carry no history).
//! The checks themselves are here too: the generation a tip serves at a
//! path ([`Versions::served_at`]) and whether a new tip continues it
//! ([`Versions::continues`]).
//!
//! Why it can be trusted: it is written by the guard only, into the Git
//! directory, which a push cannot write; and only from tips the ref held
//! before the push (what clones were really served), never from what a
//! push brings. It keeps the highest generation seen per ref and path,
//! one line each, rewritten whole (atomically, under a lock), so its size
//! follows the refs and paths a repository has, not its pushes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use git2::{ObjectType, Oid, Sort};

use crate::crypto::digest::Hash;
use crate::error::{Error, Result};
use crate::format::read::Header;
use crate::format::syntax::Root;
use crate::git::history::{blob_at, Versions};
use crate::odb::git_err;
use crate::progress::Progress;

/// The record's file in a Git directory.
const RECORD: &str = "wtxt/served";
/// The largest record read: past it, the guard refuses pushes until a host
/// looks (a record this size means millions of refs × paths).
const MAX_RECORD: u64 = 64 << 20;

/// One generation a ref served at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// Its `gen`.
    pub gen: u64,
    /// Its `merkle_this`.
    pub merkle_this: Hash,
}

/// The record, read from a Git directory (empty when there is none).
#[derive(Debug, Default)]
pub struct Record {
    /// (ref, path bytes) -> the newest generation served there.
    entries: BTreeMap<(String, Vec<u8>), Served>,
    changed: bool,
}

impl Record {
    /// The record kept in `git_dir`. One that is a link, a device or over
    /// [`MAX_RECORD`] is an error: passing over it would forget what was
    /// served. Lines that do not read (a torn write) are passed over.
    pub fn read(git_dir: &Path) -> Result<Record> {
        let file = git_dir.join(RECORD);
        let Some(text) = crate::fs::read_small_file(&file, MAX_RECORD, crate::fs::Links::Refuse)? else {
            return Ok(Record::default());
        };
        let mut r = Record::default();
        for line in text.split(|&b| b == b'\n') {
            let f: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let [refname, gen, this, path] = f[..] else { continue };
            let (Ok(refname), Some(gen), Ok(this), Ok(path)) = (
                std::str::from_utf8(refname),
                std::str::from_utf8(gen).ok().and_then(|g| g.parse::<u64>().ok()),
                hex::decode(this).map_err(drop).and_then(|h| Hash::try_from(h).map_err(drop)),
                hex::decode(path),
            ) else {
                continue;
            };
            r.note(refname, &path, Served { gen, merkle_this: this });
        }
        r.changed = false;
        Ok(r)
    }

    /// Notes that `refname` served `served` at `path` (raised only: the
    /// newest generation stays).
    pub fn note(&mut self, refname: &str, path: &[u8], served: Served) {
        use std::collections::btree_map::Entry;
        match self.entries.entry((refname.to_string(), path.to_vec())) {
            Entry::Vacant(v) => {
                v.insert(served);
                self.changed = true;
            }
            Entry::Occupied(mut o) if served.gen > o.get().gen => {
                o.insert(served);
                self.changed = true;
            }
            Entry::Occupied(_) => {}
        }
    }

    /// What `refname` served, path by path.
    pub fn of(&self, refname: &str) -> Vec<(Vec<u8>, Served)> {
        let from = (refname.to_string(), Vec::new());
        self.entries.range(from..).take_while(|((r, _), _)| r == refname).map(|((_, p), s)| (p.clone(), *s)).collect()
    }

    /// Writes the record back into `git_dir` when it changed, whole and
    /// atomically, under `wtxt/served.lock` (two pushes checked at once
    /// each keep what the other noted: the file is read again under it).
    pub fn save(self, git_dir: &Path) -> Result<()> {
        if !self.changed {
            return Ok(());
        }
        let dir = git_dir.join("wtxt");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let _lock = crate::fs::FileLock::take(&dir.join("served.lock"), true)?;
        let mut now = Record::read(git_dir)?;
        for ((r, p), s) in self.entries {
            now.note(&r, &p, s);
        }
        let mut text = String::new();
        for ((r, p), s) in &now.entries {
            text.push_str(&format!("{r} {} {} {}\n", s.gen, hex::encode(s.merkle_this), hex::encode(p)));
        }
        crate::fs::write_file(&git_dir.join(RECORD), text.as_bytes(), 0o644)
    }
}

/// A ref's tips against what it served.
impl Versions<'_> {
    /// The generation `object` (a commit, tree or blob a ref held) serves
    /// at `path` (a blob serves at the path `refname`): for a commit,
    /// [`Versions::served`]'s; none where it holds no final version there.
    pub fn served_at(
        &mut self,
        object: &git2::Object,
        refname: &str,
        path: &Path,
        progress: &Progress,
    ) -> Result<Option<Served>> {
        let found = if let Ok(c) = object.peel_to_commit() {
            self.served(&c, path, progress)?
        } else if let Ok(t) = object.peel_to_tree() {
            blob_at(&t, path).map(|b| (Oid::ZERO_SHA1, b))
        } else {
            let blob = object.peel(ObjectType::Blob).ok().filter(|_| Path::new(refname) == path);
            blob.map(|b| (Oid::ZERO_SHA1, b.id()))
        };
        let Some((c, b)) = found else { return Ok(None) };
        Ok(self.version(c, b).header.as_ref().and_then(|h| match h.root {
            Root::Final { merkle_this, .. } => Some(Served { gen: h.meta.gen, merkle_this }),
            Root::Pending => None,
        }))
    }

    /// Why the version `new_blob` of `path` in `new_tip` (a commit, tree
    /// or blob) does not continue `old`, the generation the ref served
    /// there, when the ref moves to it; `None` when it does: it is that
    /// generation, or a newer one whose `merkle_prev` links reach `old`,
    /// version by version through `new_tip`'s history (every parent, at
    /// most `max_commits` commits; a tree or blob, which has no history,
    /// links to it directly). A rollback (an older generation put back, by
    /// a rename, a merge with another history, a force push, a ref deleted
    /// and created again, a tag moved through a tree) and a new chain
    /// where the path had one are refused so.
    pub fn continues(
        &mut self,
        old: Served,
        new_tip: &git2::Object,
        path: &Path,
        new_blob: Oid,
        max_commits: u64,
        progress: &Progress,
    ) -> Result<Option<String>> {
        let commit = new_tip.peel_to_commit().ok();
        let Some(new) = self.version(commit.as_ref().map_or(Oid::ZERO_SHA1, |c| c.id()), new_blob).header.clone()
        else {
            return Ok(Some("a version whose header does not read".into()));
        };
        let link = |h: &Header| match h.root {
            Root::Final { merkle_prev, merkle_this, .. } => Some((merkle_prev, merkle_this)),
            Root::Pending => None,
        };
        let Some((mut want, new_this)) = link(&new) else {
            return Ok(Some("a version with its root pending".into()));
        };
        if new_this == old.merkle_this {
            return Ok(None);
        }
        let old_gen = crate::format::syntax::pad(old.gen, 6);
        if new.meta.gen <= old.gen {
            return Ok(Some(format!(
                "gen {} does not follow gen {old_gen}, which the ref held: no generation goes back",
                new.meta.gen_str(),
            )));
        }
        let not_reached = || {
            Some(format!(
                "gen {}'s chain does not reach gen {old_gen}, which the ref held (a new chain or another history \
                 where the path had one)",
                new.meta.gen_str(),
            ))
        };
        let Some(new_tip) = commit else {
            return Ok(if want == old.merkle_this { None } else { not_reached() });
        };
        // The versions of the path in the new tip's history, by
        // merkle_this; the links are followed as the walk finds them.
        let mut by_link: HashMap<Hash, (u64, Hash)> = HashMap::new();
        let mut walk = self.repo.revwalk().map_err(git_err)?;
        walk.push(new_tip.id()).map_err(git_err)?;
        walk.set_sorting(Sort::TIME).map_err(git_err)?;
        // Follows the links known so far: reached, broken, or still open.
        let advance = |by_link: &HashMap<Hash, (u64, Hash)>, want: &mut Hash| loop {
            if *want == old.merkle_this {
                return Some(true);
            }
            match by_link.get(want) {
                Some(&(gen, prev)) if gen > old.gen => *want = prev,
                Some(_) => return Some(false),
                None => return None,
            }
        };
        for (n, oid) in walk.enumerate() {
            progress.in_time()?;
            match advance(&by_link, &mut want) {
                Some(true) => return Ok(None),
                Some(false) => return Ok(not_reached()),
                None if n as u64 >= max_commits => break,
                None => {}
            }
            let c = self.repo.find_commit(oid.map_err(git_err)?).map_err(git_err)?;
            if let Some(b) = blob_at(&c.tree().map_err(git_err)?, path) {
                if let Some((gen, (prev, this))) =
                    self.version(c.id(), b).header.as_ref().and_then(|h| link(h).map(|l| (h.meta.gen, l)))
                {
                    by_link.insert(this, (gen, prev));
                }
            }
        }
        match advance(&by_link, &mut want) {
            Some(true) => Ok(None),
            _ => Ok(not_reached()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_generation_stays_one_line_per_ref_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let s = |gen, b| Served { gen, merkle_this: [b; 32] };
        let mut r = Record::read(dir.path()).unwrap();
        r.note("refs/heads/main", b"m.wtxt", s(2, 2));
        r.note("refs/heads/main", b"m.wtxt", s(1, 1));
        r.note("refs/heads/mainline", b"m.wtxt", s(5, 5));
        r.note("refs/tags/v1", b"a b\n.wtxt", s(0, 0));
        r.save(dir.path()).unwrap();
        let mut again = Record::read(dir.path()).unwrap();
        again.note("refs/heads/main", b"m.wtxt", s(2, 2));
        assert!(!again.changed, "nothing newer: nothing to write");
        assert_eq!(again.of("refs/heads/main"), vec![(b"m.wtxt".to_vec(), s(2, 2))]);
        assert_eq!(again.of("refs/tags/v1"), vec![(b"a b\n.wtxt".to_vec(), s(0, 0))]);
        again.note("refs/heads/main", b"m.wtxt", s(3, 3));
        again.save(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(RECORD)).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert_eq!(Record::read(dir.path()).unwrap().of("refs/heads/main")[0].1, s(3, 3));
    }
}
