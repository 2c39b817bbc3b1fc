//! Blobs read as streams. libgit2 inflates a blob whole when asked for its
//! content (and streams only loose objects, through a reader that borrows
//! its object database); a large blob (a single-file snapshot of a model)
//! is streamed by `git cat-file`, packed or not.
//! Git-side commands read through here so that what they hold stays a
//! buffer, not a file.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use git2::{Oid, Repository};

use crate::error::git_err;
use crate::error::{Error, Result};
use crate::odb::pack::stored_prefix;

/// The blob's size, from its object header (nothing is inflated).
pub fn size(repo: &Repository, blob: Oid) -> Result<u64> {
    let odb = repo.odb().map_err(git_err)?;
    let (size, _) = odb.read_header(blob).map_err(git_err)?;
    Ok(size as u64)
}

/// Largest blob inflated whole by libgit2 (a part is at most 50 MB by
/// default); a larger one is streamed by `git cat-file`.
pub(crate) const INFLATE_WHOLE: u64 = 64 << 20;

/// The blob's bytes as a stream: inflated by libgit2 when small, else from
/// `git cat-file` (whose failure surfaces as a read error at the end).
pub fn reader<'r>(repo: &'r Repository, blob: Oid) -> Result<Box<dyn Read + 'r>> {
    reader_inflating(repo, blob, INFLATE_WHOLE)
}

fn reader_inflating<'r>(repo: &'r Repository, blob: Oid, whole: u64) -> Result<Box<dyn Read + 'r>> {
    if size(repo, blob).is_ok_and(|n| n <= whole) {
        let b = repo.find_blob(blob).map_err(git_err)?;
        return Ok(Box::new(Inflated { blob: b, at: 0 }));
    }
    Ok(Box::new(stream(repo.path(), blob)?))
}

/// The blob's bytes streamed by `git cat-file` from the repository at
/// `git_dir`, whatever its size: the reader owns its process, so it can be
/// handed on (a part source's readers outlive any borrow of a repository).
/// Git holds a blob under `core.bigFileThreshold` (512 MiB by default)
/// whole in memory before writing it; at 1 MiB it streams every loose or
/// undeltified blob, so a blob of zeros that a few MB of `.git` declare as
/// gigabytes costs Git no more memory than wtxt. A blob a partial clone
/// lacks is not fetched here, a round trip each and with no deadline: the
/// reader fetched what it reads first ([`crate::odb::promisor`]).
pub fn stream(git_dir: &std::path::Path, blob: Oid) -> Result<impl Read + Send> {
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .env("GIT_NO_LAZY_FETCH", "1")
        .args(["--no-replace-objects", "-c", "core.bigFileThreshold=1m"])
        .args(["cat-file", "blob", &blob.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::input(Default::default(), format!("git cat-file blob {blob}: {e}")))?;
    let out = child.stdout.take().expect("piped");
    Ok(CatFile { child, out, blob })
}

/// A blob libgit2 inflated, read from where the last read stopped.
struct Inflated<'r> {
    blob: git2::Blob<'r>,
    at: usize,
}

impl Read for Inflated<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (&self.blob.content()[self.at..]).read(buf)?;
        self.at += n;
        Ok(n)
    }
}

/// The first `n` bytes of a blob (fewer when it is shorter), into a buffer
/// sized once (the filter and the hook take whole 44 MB blobs this way). A
/// blob streamed by Git is read no further than `n`.
pub fn prefix(repo: &Repository, blob: Oid, n: u64) -> Result<Vec<u8>> {
    let want = n.min(size(repo, blob)?);
    let mut buf = Vec::new();
    buf.try_reserve_exact(want as usize)
        .map_err(|_| Error::input(Default::default(), format!("out of memory holding {want} bytes of blob {blob}")))?;
    reader(repo, blob)?.take(n).read_to_end(&mut buf).map_err(Error::read_failed)?;
    Ok(buf)
}

/// Blobs up to this size are read through libgit2, which caches delta
/// bases only this small (its pack cache takes no object over 1 MiB).
const LIBGIT2_CACHES: u64 = 1 << 20;

/// Many blobs of one repository: the headers of every version of a file
/// (`wtxt log`), both sides of a diff. Git packs the versions of a file
/// as a delta chain; libgit2, which caches no base over 1 MiB, would
/// rebuild each version from the chain's start (5 generations of a 44 MB
/// filtered model: 15 inflates, 3.3 s). Blobs between that and
/// [`INFLATE_WHOLE`] are asked of one `git cat-file --batch`, whose
/// delta-base cache, sized for one such blob, keeps the last base: each
/// older version costs one delta, not a chain.
pub struct Blobs<'r> {
    repo: &'r Repository,
    batch: Option<Batch>,
}

struct Batch {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl<'r> Blobs<'r> {
    /// Reads blobs of `repo`.
    pub fn new(repo: &'r Repository) -> Blobs<'r> {
        Blobs { repo, batch: None }
    }

    /// The first `n` bytes of `blob` (fewer when it is shorter).
    pub fn prefix(&mut self, blob: Oid, n: u64) -> Result<Vec<u8>> {
        let whole = size(self.repo, blob)?;
        if whole <= LIBGIT2_CACHES || whole > INFLATE_WHOLE {
            return prefix(self.repo, blob, n);
        }
        // A blob stored whole is inflated only as far as `n`; Git's batch
        // would inflate all of it (the guard's look at each changed part's
        // first bytes: 7.2 s of 78 parts at 1 GiB).
        let n = n.min(whole);
        if let Some(start) = object_dirs(self.repo).iter().find_map(|d| stored_prefix(d, blob, n as usize)) {
            return Ok(start);
        }
        self.ask(blob, n).unwrap_or_else(|| prefix(self.repo, blob, n))
    }

    /// The blob as a [`Text`](Text): in memory up to
    /// [`INFLATE_WHOLE`], else streamed by Git into an unnamed temporary
    /// file, so that a large blob is never held whole.
    pub fn text(&mut self, blob: Oid) -> Result<Box<dyn Text>> {
        let whole = size(self.repo, blob)?;
        if whole > LIBGIT2_CACHES && whole <= INFLATE_WHOLE {
            if let Some(bytes) = self.ask(blob, u64::MAX) {
                return Ok(Box::new(bytes?));
            }
        }
        text_inflating(self.repo, blob, INFLATE_WHOLE)
    }

    /// The first `n` bytes of `blob` from `git cat-file --batch`; `None`
    /// when there is no `git` to run (libgit2 still reads it, only slower).
    fn ask(&mut self, blob: Oid, n: u64) -> Option<Result<Vec<u8>>> {
        if self.batch.is_none() {
            let mut child = Command::new("git")
                .arg("--git-dir")
                .arg(self.repo.path())
                .env("GIT_NO_LAZY_FETCH", "1")
                .arg("--no-replace-objects")
                .args(["-c", &format!("core.deltaBaseCacheLimit={INFLATE_WHOLE}")])
                // Git maps packs a GiB at a time and keeps what it touched:
                // a bare remote's batch over a 1.5 GB pack grew to 1.5 GB.
                .args(["-c", "core.packedGitWindowSize=32m", "-c", "core.packedGitLimit=96m"])
                .args(["cat-file", "--batch"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .ok()?;
            let input = child.stdin.take().expect("piped");
            let output = BufReader::new(child.stdout.take().expect("piped"));
            self.batch = Some(Batch { child, input, output });
        }
        let answer = self.batch.as_mut().expect("started").ask(blob, n);
        if answer.is_err() {
            self.batch = None; // out of step with Git: a later call starts again
        }
        Some(answer.map_err(|e| Error::input(Default::default(), format!("git cat-file --batch: {e}"))))
    }
}

impl Batch {
    fn ask(&mut self, blob: Oid, n: u64) -> std::io::Result<Vec<u8>> {
        writeln!(self.input, "{blob}")?;
        self.input.flush()?;
        let mut line = String::new();
        self.output.read_line(&mut line)?;
        // `<oid> blob <size>`, or `<oid> missing`.
        let size = match line.trim_end().split(' ').collect::<Vec<_>>()[..] {
            [_, "blob", size] => size.parse::<u64>().map_err(std::io::Error::other)?,
            _ => return Err(std::io::Error::other(format!("blob {blob}: git answered `{}`", line.trim_end()))),
        };
        let mut head = Vec::new();
        (&mut self.output).take(n.min(size)).read_to_end(&mut head)?;
        let rest = size - head.len() as u64;
        if std::io::copy(&mut (&mut self.output).take(rest), &mut std::io::sink())? != rest {
            return Err(std::io::Error::other(format!("blob {blob}: git's answer ended early")));
        }
        let mut nl = [0u8];
        self.output.read_exact(&mut nl)?;
        Ok(head)
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where `repo`'s objects may lie in a folder of their own: a pre-receive
/// hook's quarantine first (Git names it in `GIT_OBJECT_DIRECTORY`), then
/// the repository's. An object found in either is the one its id names:
/// Git wrote the pack index from the objects it hashed.
fn object_dirs(repo: &Repository) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> =
        std::env::var_os("GIT_OBJECT_DIRECTORY").map(std::path::PathBuf::from).into_iter().collect();
    dirs.push(repo.path().join("objects"));
    dirs
}

/// [`Blobs::text`] with `whole` for [`INFLATE_WHOLE`].
fn text_inflating(repo: &Repository, blob: Oid, whole: u64) -> Result<Box<dyn Text>> {
    if size(repo, blob)? <= whole {
        let b = repo.find_blob(blob).map_err(git_err)?;
        return Ok(Box::new(b.content().to_vec()));
    }
    let failed = |e| Error::io_in(&format!("a temporary copy of blob {blob}"), e);
    let mut f = tempfile::tempfile().map_err(failed)?;
    std::io::copy(&mut reader_inflating(repo, blob, whole)?, &mut f).map_err(failed)?;
    Ok(Box::new(f))
}

/// `git cat-file blob`'s output; a non-zero exit is an error once the
/// output ends (a short blob is never taken for the whole one). Dropped
/// early, the process is stopped.
struct CatFile {
    child: Child,
    out: ChildStdout,
    blob: Oid,
}

impl Read for CatFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.out.read(buf)?;
        if n == 0 && !buf.is_empty() && !self.child.wait()?.success() {
            return Err(std::io::Error::other(format!("git cat-file blob {} failed", self.blob)));
        }
        Ok(n)
    }
}

impl Drop for CatFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A WTXT text Git hands over, in memory (a blob) or in a file (a
/// temporary file, the work tree), read as a stream or by range so that a
/// part or a single file is never held whole.
pub trait Text: Sync {
    /// The text from its start.
    fn stream(&self) -> Box<dyn Read + '_>;
    /// The bytes in `r`.
    fn range(&self, r: Range<u64>) -> std::io::Result<Vec<u8>>;
    /// The bytes in `r`, into `out` (its contents replaced, its room reused).
    fn range_into(&self, r: Range<u64>, out: &mut Vec<u8>) -> std::io::Result<()> {
        *out = self.range(r)?;
        Ok(())
    }
}

impl Text for &[u8] {
    fn stream(&self) -> Box<dyn Read + '_> {
        Box::new(*self)
    }
    fn range(&self, r: Range<u64>) -> std::io::Result<Vec<u8>> {
        let (lo, hi) = (r.start.min(self.len() as u64) as usize, r.end.min(self.len() as u64) as usize);
        Ok(self[lo..hi].to_vec())
    }
}

impl Text for Vec<u8> {
    fn stream(&self) -> Box<dyn Read + '_> {
        Box::new(&self[..])
    }
    fn range(&self, r: Range<u64>) -> std::io::Result<Vec<u8>> {
        (&self[..]).range(r)
    }
}

impl Text for File {
    fn stream(&self) -> Box<dyn Read + '_> {
        Box::new(crate::fs::ReadAt::new(self))
    }
    fn range(&self, r: Range<u64>) -> std::io::Result<Vec<u8>> {
        let mut v = Vec::new();
        self.range_into(r, &mut v)?;
        Ok(v)
    }
    fn range_into(&self, r: Range<u64>, out: &mut Vec<u8>) -> std::io::Result<()> {
        out.clear();
        out.resize((r.end - r.start) as usize, 0);
        self.read_exact_at(out, r.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository where file `f` was committed once per version, then
    /// packed by `git gc` with `gc_config`.
    fn repo_of(versions: &[Vec<u8>], gc_config: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let o = Command::new("git").arg("-C").arg(dir.path()).args(args).output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        git(&["init", "-q"]);
        for text in versions {
            std::fs::write(dir.path().join("f"), text).unwrap();
            git(&["add", "f"]);
            git(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "f"]);
        }
        git(&[gc_config, &["gc", "-q"]].concat());
        dir
    }

    #[test]
    fn a_large_packed_blob_streams_through_git() {
        let text: Vec<u8> = (0..200_000u32).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        let dir = repo_of(std::slice::from_ref(&text), &["-c", "core.bigFileThreshold=1k"]);
        let repo = Repository::open(dir.path()).unwrap();
        let oid = repo.head().unwrap().peel_to_tree().unwrap().get_name("f").unwrap().id();
        assert!(repo.odb().unwrap().reader(oid).is_err(), "libgit2 cannot stream a packed blob");
        assert_eq!(prefix(&repo, oid, 5000).unwrap(), text[..5000]);
        assert_eq!(size(&repo, oid).unwrap(), text.len() as u64);
        // Inflated whole, and streamed by Git: the same bytes.
        for whole in [u64::MAX, 1000] {
            let mut all = Vec::new();
            reader_inflating(&repo, oid, whole).unwrap().read_to_end(&mut all).unwrap();
            assert!(all == text);
            // As a Text: in memory, or a temporary copy Git streamed.
            let t = text_inflating(&repo, oid, whole).unwrap();
            let mut all = Vec::new();
            t.stream().read_to_end(&mut all).unwrap();
            assert!(all == text);
            assert_eq!(t.range(10..20).unwrap(), text[10..20]);
        }
        // A blob Git does not have: an error, not an empty stream.
        let missing = Oid::from_str("0123456789012345678901234567890123456789").unwrap();
        assert!(reader_inflating(&repo, missing, 0).unwrap().read_to_end(&mut Vec::new()).is_err());
    }

    #[test]
    fn prefixes_of_a_packed_delta_chain_come_from_one_git_process() {
        // Over libgit2's 1 MiB cache: four versions a few lines apart, packed
        // as a delta chain.
        let versions: Vec<Vec<u8>> = (0..4u32)
            .map(|v| {
                (0..150_000u32)
                    .flat_map(|i| format!("v{} line {i}\n", if i % 1000 == 7 { v } else { 0 }).into_bytes())
                    .collect()
            })
            .collect();
        assert!(versions.iter().all(|t| t.len() as u64 > LIBGIT2_CACHES));
        let dir = repo_of(&versions, &[]);
        let repo = Repository::open(dir.path()).unwrap();
        let oids: Vec<Oid> = (0..4).map(|back| repo.revparse_single(&format!("HEAD~{back}:f")).unwrap().id()).collect();
        // The newest version, stored whole: its first bytes are inflated
        // alone, and no Git process is started for them.
        let mut q = Blobs::new(&repo);
        assert_eq!(q.prefix(oids[0], 3000).unwrap(), versions[3][..3000]);
        assert!(q.batch.is_none(), "read from the pack, not asked of Git");
        let mut p = Blobs::new(&repo);
        let missing = Oid::from_str("0123456789012345678901234567890123456789").unwrap();
        for (back, oid) in oids.iter().enumerate() {
            assert_eq!(p.prefix(*oid, 3000).unwrap(), versions[3 - back][..3000], "HEAD~{back}");
            assert!(p.prefix(missing, 10).is_err(), "a blob Git does not have is an error");
        }
        assert!(p.batch.is_some(), "asked of git cat-file --batch");
        // Whole blobs, from the same process.
        let mut all = Vec::new();
        p.text(oids[1]).unwrap().stream().read_to_end(&mut all).unwrap();
        assert!(all == versions[2]);
        // Longer than the blob: the whole blob.
        assert_eq!(p.prefix(oids[0], u64::MAX).unwrap(), versions[3]);
    }
}
