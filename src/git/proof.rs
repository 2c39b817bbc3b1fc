//! Verifying a generation from its blobs: whole, or, for a split snapshot
//! of the tree form whose version in the parent commit was verified whole,
//! reading only the parts that changed ([`carry_plan`]). What was verified
//! is recorded for the run (`wtxt log --verify`) or, for the server's
//! guard, in the repository (`$GIT_DIR/wtxt/verified`), so that the next
//! push is checked against it too.
//!
//! Why the record can be trusted: it is written by this process only after
//! a generation passed every check, into the Git directory, which a push
//! cannot write (it brings objects and ref updates only); it names blobs
//! by their Git ids, and a repository holds one object per id. A record
//! that is lost, torn or unreadable only makes the next check read more.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use git2::{Oid, Repository, Tree};

use crate::crypto::digest::Hash;
use crate::error::{Error, Result};
use crate::format::split::{self, carry_plan, CarrySource, Head};
use crate::format::syntax::{ArrLine, DigestForm};
use crate::format::verify::{Report, VerifyOptions};
use crate::git::parts::BlobParts;
use crate::progress::Progress;
use crate::store::{PartReading, WtxtIn};

/// The record's file in a Git directory.
const RECORD: &str = "wtxt/verified";
/// The largest record read (about 180,000 lines, some 20 MiB in memory); a
/// larger one is passed over, and every generation read whole.
const MAX_RECORD: u64 = 16 << 20;
/// A record past this size is rewritten when it is read, keeping only the
/// newest [`KEPT_GENERATIONS`] generations and the shares of their arrays:
/// the record grows with what is pushed, never past about twice this.
const COMPACT_AT: u64 = 4 << 20;
/// The generations a compacted record keeps: a push is checked against its
/// parent's version, which is almost always among the newest.
const KEPT_GENERATIONS: usize = 64;

/// The id of the `PATH.parts` folder in `tree`.
pub(crate) fn parts_of(tree: &Tree, path: &Path) -> Option<Oid> {
    let mut p = path.as_os_str().to_owned();
    p.push(".parts");
    tree.get_path(Path::new(&p)).ok().map(|e| e.id())
}

/// Verifies one version whole, with nothing recorded ([`Proofs::verify`]).
pub(crate) fn verify_version(
    repo: &Repository,
    tree: Option<&Tree>,
    path: &Path,
    blob: Oid,
    opts: &VerifyOptions,
    progress: &Progress,
) -> Result<Report> {
    Proofs::default().verify(repo, tree, path, blob, None, opts, progress)
}

/// Generations verified whole, and the `fastxor` shares of their arrays.
#[derive(Default)]
pub struct Proofs {
    /// (head blob, parts folder) of each generation verified.
    generations: HashSet<(Oid, Option<Oid>)>,
    /// Tree-form digest -> `fastxor` share (both follow from the bytes).
    shares: HashMap<Hash, u64>,
    /// Where the record is kept between runs, once read.
    file: Option<PathBuf>,
    /// The tree and head blob of the generation verified last (`wtxt log
    /// --verify` walks from the newest: a generation's child).
    last: Option<(Oid, Oid)>,
    /// Parts read, and parts the split generations verified have.
    pub parts_read: u64,
    /// See `parts_read`.
    pub parts_total: u64,
}

impl Proofs {
    /// A record kept in `repo`'s Git directory between runs (the server's
    /// guard), read line by line (a regular file only, not a link; one
    /// past [`MAX_RECORD`] counts as none) and compacted when it has grown
    /// past [`COMPACT_AT`].
    pub fn kept_in(repo: &Repository) -> Proofs {
        let file = repo.path().join(RECORD);
        let mut p = Proofs { file: Some(file.clone()), ..Default::default() };
        let Ok((f, len)) = crate::fs::open_regular(&file) else { return p };
        if len > MAX_RECORD {
            return p;
        }
        let mut order = Vec::new();
        let lines = std::io::BufRead::split(std::io::BufReader::new(f.take(MAX_RECORD)), b'\n');
        for line in lines.map_while(std::result::Result::ok) {
            let f: Vec<&str> = std::str::from_utf8(&line).unwrap_or("").split(' ').collect();
            match f[..] {
                // Whole lines only: a line a torn write cut short is passed over.
                ["x", sha, share] if sha.len() == 64 && share.len() == 16 => {
                    if let (Ok(sha), Ok(share)) = (hex::decode(sha), u64::from_str_radix(share, 16)) {
                        if let Ok(sha) = Hash::try_from(sha) {
                            p.shares.insert(sha, share);
                        }
                    }
                }
                ["g", head, parts] if head.len() == parts.len() => {
                    if let (Ok(head), Ok(parts)) = (Oid::from_str(head), Oid::from_str(parts)) {
                        if p.generations.insert((head, Some(parts))) {
                            order.push((head, parts));
                        }
                    }
                }
                _ => {}
            }
        }
        if len > COMPACT_AT {
            // The record only saves work: a failure to compact it is none of the check's.
            let _ = p.compact(repo, &order, &file);
        }
        p
    }

    /// Rewrites the record at `file` with the newest generations of
    /// `order` (as written) and the shares of their arrays, read from
    /// their heads; what this run holds in memory stays as read.
    fn compact(&self, repo: &Repository, order: &[(Oid, Oid)], file: &Path) -> Result<()> {
        let mut text = String::new();
        let mut written = HashSet::new();
        for &(blob, parts) in order.iter().rev().take(KEPT_GENERATIONS).rev() {
            let head = crate::odb::blob::prefix(repo, blob, split::MAX_HEAD + 1)?;
            let split::Opened::Split(head) = split::open(Box::new(std::io::Cursor::new(head)))? else { continue };
            // A generation is kept only with the share of every array it lists.
            let shares: Option<Vec<(Hash, u64)>> = head
                .arrs
                .iter()
                .flatten()
                .map(|a| ArrLine::parse(a).ok().and_then(|a| Some((a.sha256, *self.shares.get(&a.sha256)?))))
                .collect();
            let Some(shares) = shares else { continue };
            for (sha, share) in shares {
                if written.insert(sha) {
                    text.push_str(&format!("x {} {share:016x}\n", hex::encode(sha)));
                }
            }
            text.push_str(&format!("g {blob} {parts}\n"));
        }
        crate::fs::write_file(file, text.as_bytes(), 0o644)
    }

    /// Verifies the version of `path` whose blob is `blob` in `tree` whole,
    /// as `wtxt verify` does: a single file streamed from its blob, a head
    /// joined with the tree's parts (a head with no tree has none to join:
    /// refused). `base`, the tree and blob of the version it follows, lets
    /// a split snapshot of the tree form be checked reading only the parts
    /// that changed since, when that version was verified (else those of
    /// the generation verified last, when it was). A check that leaves
    /// parts out and fails is done again whole, so its report is a full
    /// verify's.
    #[allow(clippy::too_many_arguments)]
    pub fn verify(
        &mut self,
        repo: &Repository,
        tree: Option<&Tree>,
        path: &Path,
        blob: Oid,
        base: Option<(Oid, Oid)>,
        opts: &VerifyOptions,
        progress: &Progress,
    ) -> Result<Report> {
        let len = crate::odb::blob::size(repo, blob)?;
        let text = Box::new(crate::odb::blob::stream(repo.path(), blob)?);
        let head = match split::open(text).map_err(|e| e.in_file(path))? {
            split::Opened::Single(r) => return WtxtIn::single(r, len, path).verify(opts, progress),
            split::Opened::Split(head) => head,
        };
        let Some(tree) = tree else {
            return Err(Error::input(Default::default(), "a split snapshot's head with no tree to hold its parts")
                .in_file(path));
        };
        let key = (blob, parts_of(tree, path), tree.id());
        // Only the tree form can leave parts out: only its generations are recorded.
        let tree_form = head.header().is_ok_and(|h| h.digest() == DigestForm::Tree);
        let count = head.parts.len() as u64;
        self.parts_total += count;
        let parts = BlobParts::of_tree(repo, tree, path, &head);
        let proven = |&(t, b): &(Oid, Oid)| {
            let tree = repo.find_tree(t).ok()?;
            self.generations.contains(&(b, parts_of(&tree, path))).then_some((tree, b))
        };
        let base = base.as_ref().and_then(proven).or_else(|| self.last.as_ref().and_then(proven));
        let plan = base.filter(|_| tree_form).and_then(|(t, b)| self.plan(repo, &head, &parts, (&t, b), path));
        let parts = match plan {
            None => parts,
            Some(plan) => {
                let carried = VerifyOptions { carried: Some(&plan.carried), ..opts.clone() };
                let left_out = plan.parts_left_out() as u64;
                let input = WtxtIn::joined_leaving_out(head.clone(), Box::new(parts), path, len, &plan.left_out);
                let report = input.verify(&carried, progress)?;
                if report.ok && report.fastxor.is_some() {
                    self.parts_read += count - left_out;
                    self.record(key, &head, &report);
                    return Ok(report);
                }
                BlobParts::of_tree(repo, tree, path, &head)
            }
        };
        self.parts_read += count;
        let report =
            WtxtIn::joined(head.clone(), Box::new(parts), path, len, PartReading::Lenient).verify(opts, progress)?;
        if tree_form && report.ok && report.fastxor.is_some() {
            self.record(key, &head, &report);
        }
        Ok(report)
    }

    /// What a check of `head` may leave out, given the version `base`
    /// (its tree and head blob) when that was verified.
    fn plan(
        &self,
        repo: &Repository,
        head: &Head,
        parts: &BlobParts,
        (base_tree, base_blob): (&Tree, Oid),
        path: &Path,
    ) -> Option<split::CarryPlan> {
        let text = crate::odb::blob::prefix(repo, base_blob, split::MAX_HEAD + 1).ok()?;
        let split::Opened::Split(old) = split::open(Box::new(std::io::Cursor::new(text))).ok()? else { return None };
        let old_ids = BlobParts::of_tree(repo, base_tree, path, &old).ids().to_vec();
        let source = Against { parts, new_ids: parts.ids(), old_ids: &old_ids, shares: &self.shares };
        carry_plan(head, &old, &source)
    }

    /// Records a generation that verified (`key`: its head blob, parts
    /// folder and tree) with its arrays' shares; kept in the file when
    /// there is one.
    fn record(&mut self, (blob, parts, tree): (Oid, Option<Oid>, Oid), head: &Head, report: &Report) {
        let digests = head.arrs.iter().flatten().map(|a| ArrLine::parse(a).ok().map(|a| a.sha256));
        let mut lines = String::new();
        for (sha, share) in digests.zip(&report.fastxor_shares) {
            let Some(sha) = sha else { return };
            if self.shares.insert(sha, *share).is_none() {
                lines.push_str(&format!("x {} {share:016x}\n", hex::encode(sha)));
            }
        }
        self.generations.insert((blob, parts));
        self.last = Some((tree, blob));
        if let (Some(file), Some(parts)) = (&self.file, parts) {
            // Written last, the generation's line names shares written before it.
            lines.push_str(&format!("g {blob} {parts}\n"));
            // The record only saves work: a failure to keep it is no failure of the check.
            let _ = append(file, lines.as_bytes());
        }
    }
}

/// Appends `text` to the record in one write, creating it (and its folder)
/// as needed; a link in its place is not followed.
fn append(file: &Path, text: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .map_err(|e| Error::io(file, e))?;
    f.write_all(text).map_err(|e| Error::io(file, e))
}

/// The parts of a generation against those of the one verified before.
struct Against<'a> {
    parts: &'a BlobParts,
    new_ids: &'a [Option<Oid>],
    old_ids: &'a [Option<Oid>],
    shares: &'a HashMap<Hash, u64>,
}

impl CarrySource for Against<'_> {
    fn same_bytes(&self, i: usize) -> bool {
        matches!((self.new_ids.get(i), self.old_ids.get(i)), (Some(Some(a)), Some(Some(b))) if a == b)
    }

    fn starts_inside(&self, i: usize) -> bool {
        use split::PartSource;
        // Its first two lines; a part that cannot be read is taken to.
        let Ok(r) = self.parts.open(i as u64 + 1) else { return true };
        let mut lines = crate::format::read::LineReader::new(r.take(2 * (crate::limits::MAX_LINE as u64 + 1)));
        let _ = lines.next_range();
        match lines.next_range() {
            Ok(Some(l)) => lines.bytes(l).starts_with(b"cont "),
            _ => true,
        }
    }

    fn share(&self, sha256: &Hash) -> Option<u64> {
        self.shares.get(sha256).copied()
    }
}
