//! Blobs read as streams. libgit2 inflates a blob whole when asked for its
//! content (and streams only loose objects, through a reader that borrows
//! its object database); a large blob (a single-file snapshot of a model)
//! is streamed by `git cat-file`, packed or not.
//! Git-side commands read through here so that what they hold stays a
//! buffer, not a file.
#![forbid(unsafe_code)]

use std::io::Read;
use std::process::{Child, ChildStdout, Command, Stdio};

use git2::{Oid, Repository};

use crate::error::{Error, Result};
use crate::git::git_err;

/// The blob's size, from its object header (nothing is inflated).
pub fn size(repo: &Repository, blob: Oid) -> Result<u64> {
    let odb = repo.odb().map_err(git_err)?;
    let (size, _) = odb.read_header(blob).map_err(git_err)?;
    Ok(size as u64)
}

/// Largest blob inflated whole by libgit2 (a part is at most 50 MB by
/// default); a larger one is streamed by `git cat-file`.
const INFLATE_WHOLE: u64 = 64 << 20;

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
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(repo.path())
        .args(["cat-file", "blob", &blob.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::input(Default::default(), format!("git cat-file blob {blob}: {e}")))?;
    let out = child.stdout.take().expect("piped");
    Ok(Box::new(CatFile { child, out, blob }))
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

/// The first `n` bytes of a blob (fewer when it is shorter), without
/// inflating the rest.
pub fn prefix(repo: &Repository, blob: Oid, n: u64) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    reader(repo, blob)?.take(n).read_to_end(&mut buf).map_err(Error::read_failed)?;
    Ok(buf)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_packed_blob_streams_through_git() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let o = Command::new("git").arg("-C").arg(dir.path()).args(args).output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        git(&["init", "-q"]);
        let text: Vec<u8> = (0..200_000u32).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
        std::fs::write(dir.path().join("f"), &text).unwrap();
        git(&["add", "f"]);
        git(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "f"]);
        git(&["-c", "core.bigFileThreshold=1k", "gc", "-q"]);
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
        }
        // A blob Git does not have: an error, not an empty stream.
        let missing = Oid::from_str("0123456789012345678901234567890123456789").unwrap();
        assert!(reader_inflating(&repo, missing, 0).unwrap().read_to_end(&mut Vec::new()).is_err());
    }
}
