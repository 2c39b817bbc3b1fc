//! Parts kept as Git LFS objects (`wtxt git install --lfs`): Git holds a
//! pointer (three lines: the spec's version, `oid sha256:HEX`, `size N`)
//! where a part would be, and the part's bytes live in the LFS store
//! (`.git/lfs/objects/aa/bb/HEX` here, an LFS server's store on a host).
//! Nothing about a part is trusted for being there: a part read from an
//! LFS object is verified against its head as one read from a blob is.
//! Missing objects come from the remote through the real `git lfs`
//! client, exactly those a read needs, in one `git lfs fetch`.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use git2::{Oid, Repository};

use crate::error::git_err;
use crate::error::{Error, Result};

/// The pointer format's first line (the Git LFS specification, v1).
const VERSION: &str = "version https://git-lfs.github.com/spec/v1";

/// Largest pointer file the specification allows.
pub const MAX_POINTER: u64 = 1024;

/// What a pointer names: an object by its SHA-256 and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    /// The object's SHA-256, 64 lowercase hex digits.
    pub oid: String,
    /// The object's size in bytes.
    pub size: u64,
}

impl Pointer {
    /// Reads a pointer as `git lfs` writes one, and nothing else: exactly
    /// the version, `oid` and `size` lines (a pointer with extensions is no
    /// part of wtxt's), each ended by LF.
    pub fn parse(bytes: &[u8]) -> Option<Pointer> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.strip_suffix('\n')?.split('\n');
        if lines.next()? != VERSION {
            return None;
        }
        let oid = lines.next()?.strip_prefix("oid sha256:")?;
        let size = lines.next()?.strip_prefix("size ")?;
        let canonical =
            |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
        if lines.next().is_some()
            || oid.len() != 64
            || !oid.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            || !canonical(size)
        {
            return None;
        }
        Some(Pointer { oid: oid.to_string(), size: size.parse().ok()? })
    }

    /// The pointer file's text, as `git lfs clean` writes it.
    pub fn text(&self) -> String {
        format!("{VERSION}\noid sha256:{}\nsize {}\n", self.oid, self.size)
    }

    /// The pointer blob `id` holds, if it is one (a blob over
    /// [`MAX_POINTER`] bytes is not read).
    pub fn of_blob(repo: &Repository, id: Oid) -> Option<Pointer> {
        if crate::odb::blob::size(repo, id).ok()? > MAX_POINTER {
            return None;
        }
        Pointer::parse(repo.find_blob(id).ok()?.content())
    }
}

/// Where a repository finds LFS objects: its own store (`lfs.storage`, or
/// `lfs` in the common Git folder), laid out `aa/bb/HEX`; and on a host,
/// `wtxt.lfsObjects`, the folder an LFS server beside it keeps its
/// objects in (`aa/bb/HEX`, or a flat `HEX` as a local-disk server lays
/// them out), so that the server's guard verifies parts' data.
#[derive(Debug, Clone)]
pub struct Store {
    own: PathBuf,
    server: Option<PathBuf>,
}

impl Store {
    /// The stores of `repo`.
    pub fn of(repo: &Repository) -> Store {
        let cfg = repo.config().and_then(|mut c| c.snapshot()).ok();
        let common = repo.commondir().to_path_buf();
        let at = |p: PathBuf| if p.is_absolute() { p } else { common.join(p) };
        let own = cfg.as_ref().and_then(|c| c.get_path("lfs.storage").ok()).map(at).unwrap_or(common.join("lfs"));
        let server = cfg.as_ref().and_then(|c| c.get_path("wtxt.lfsObjects").ok()).map(at);
        Store { own: own.join("objects"), server }
    }

    /// Where this repository keeps object `oid` (written there by
    /// [`Store::put`] or `git lfs`).
    fn own_path(&self, oid: &str) -> PathBuf {
        nested(&self.own, oid)
    }

    /// The object `p` names, where it is with the pointer's size; a link or
    /// anything but a regular file is never read.
    fn find(&self, p: &Pointer) -> Option<std::fs::File> {
        let mut places = vec![self.own_path(&p.oid)];
        if let Some(s) = &self.server {
            places.push(nested(s, &p.oid));
            places.push(s.join(&p.oid));
        }
        places.into_iter().find_map(|path| {
            let (f, len) = crate::fs::open_regular(&path).ok()?;
            (len == p.size).then_some(f)
        })
    }

    /// The object `p` names, opened for reading through its oid: a file
    /// stored under the name of other bytes (a store that checks no oid, a
    /// decoy a host was handed) fails its last read, so no reader counts
    /// bytes that are not the ones the pointer names.
    pub fn open(&self, p: &Pointer) -> Option<Hashed<std::fs::File>> {
        let file = self.find(p)?;
        Some(Hashed { inner: file, sha: <sha2::Sha256 as sha2::Digest>::new(), left: p.size, oid: p.oid.clone() })
    }

    /// Whether the object `p` names is here (by its size; its bytes are
    /// hashed when they are read).
    pub fn has(&self, p: &Pointer) -> bool {
        self.find(p).is_some()
    }

    /// Copies the regular file at `path` into this repository's store as
    /// an LFS object (hashed as it is copied, so the object is the bytes
    /// its name says whatever happens to the file meanwhile) and returns
    /// its pointer. An object already there is kept.
    pub fn put(&self, path: &Path) -> Result<Pointer> {
        let (mut file, _) = crate::fs::open_regular(path)?;
        let tmp_dir = self.own.parent().unwrap_or(&self.own).join("tmp");
        std::fs::create_dir_all(&tmp_dir).map_err(|e| Error::io(&tmp_dir, e))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir).map_err(|e| Error::io(&tmp_dir, e))?;
        let mut sha = <sha2::Sha256 as sha2::Digest>::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            sha2::Digest::update(&mut sha, &buf[..n]);
            tmp.write_all(&buf[..n]).map_err(|e| Error::io(tmp.path(), e))?;
            size += n as u64;
        }
        let oid = hex::encode(sha2::Digest::finalize(sha));
        let dest = self.own_path(&oid);
        if !crate::fs::open_regular(&dest).is_ok_and(|(_, len)| len == size) {
            let dir = dest.parent().expect("aa/bb");
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
            tmp.as_file().sync_all().map_err(|e| Error::io(tmp.path(), e))?;
            tmp.persist(&dest).map_err(|e| Error::io(&dest, e.error))?;
        }
        Ok(Pointer { oid, size })
    }
}

/// An LFS object's bytes, hashed as they pass: the read that brings the
/// last of the pointer's `size` bytes fails unless they hash to its oid,
/// and nothing past `size` is given.
pub struct Hashed<R> {
    inner: R,
    sha: sha2::Sha256,
    left: u64,
    oid: String,
}

impl<R: Read> Read for Hashed<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            let why = format!("Git LFS object sha256:{} ended {} bytes short of its size", self.oid, self.left);
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, why));
        }
        sha2::Digest::update(&mut self.sha, &buf[..n]);
        self.left -= n as u64;
        if self.left == 0 {
            let got = hex::encode(sha2::Digest::finalize_reset(&mut self.sha));
            if got != self.oid {
                let why = format!("Git LFS object sha256:{} holds bytes that hash to sha256:{got}", self.oid);
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
            }
        }
        Ok(n)
    }
}

/// Where a store laid out as Git LFS lays its own keeps `oid`: `aa/bb/HEX`.
fn nested(dir: &Path, oid: &str) -> PathBuf {
    dir.join(&oid[..2]).join(&oid[2..4]).join(oid)
}

/// Whether Git's attributes store `path` (relative to the work tree) through
/// Git LFS (`filter=lfs`), as `git add` would.
pub fn tracks(repo: &Repository, path: &Path) -> bool {
    repo.get_attr(path, "filter", git2::AttrCheckFlags::FILE_THEN_INDEX).ok().flatten() == Some("lfs")
}

/// The remote `git lfs fetch` asks: the promisor remote of a partial
/// clone, else `origin`, else the only remote.
fn remote(repo: &Repository) -> Option<String> {
    if let Some(r) = crate::odb::promisor::promisor(repo) {
        return Some(r);
    }
    let names = repo.remotes().ok()?;
    let names: Vec<&str> = names.iter().flatten().flatten().collect();
    names.iter().find(|n| **n == "origin").or(names.first()).map(|n| n.to_string())
}

/// Fetches through `git lfs fetch`, in one run (one batch of requests to
/// the LFS server), the objects of `pointers` that are not here; returns
/// how many were missing. `git lfs fetch` takes commits and path
/// patterns, not objects: given the commits that hold the parts, it
/// brings every LFS object of their trees that a pattern matches, other
/// snapshots' and other folders' among them. So it is given one commit
/// made for the purpose, whose tree holds exactly these pointers (named by
/// their oids), kept in an object folder of its own that Git sees as an
/// alternate for this one run and that is removed afterwards: no path of
/// the repository's reaches it as a pattern, and the repository gains no
/// object. The fetch stops at its deadline
/// ([`crate::odb::child::fetch_limit`]); `git lfs` moves an object under
/// its final name only once it has all of it and checked its oid.
pub fn fetch_missing(repo: &Repository, pointers: &[Pointer]) -> Result<usize> {
    let store = Store::of(repo);
    let mut missing: Vec<&Pointer> = pointers.iter().filter(|p| !store.has(p)).collect();
    missing.sort_by(|a, b| a.oid.cmp(&b.oid));
    missing.dedup_by(|a, b| a.oid == b.oid);
    if missing.is_empty() {
        return Ok(0);
    }
    let Some(remote) = remote(repo).filter(|r| !r.starts_with('-')) else {
        return Err(Error::input(
            Default::default(),
            format!("{} Git LFS object(s) of parts are not here and the repository has no remote", missing.len()),
        ));
    };
    crate::odb::child::may_fetch(repo, missing.len(), &remote)?;
    let scratch = tempfile::Builder::new()
        .prefix("wtxt-lfs-fetch")
        .tempdir()
        .map_err(|e| Error::io_in("a folder for the LFS fetch's commit", e))?;
    let commit = listing_commit(scratch.path(), &missing)?;
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir").arg(repo.path());
    cmd.env("GIT_ALTERNATE_OBJECT_DIRECTORIES", alternate(&scratch.path().join("objects")));
    cmd.args(["lfs", "fetch", "--include=*.wtxtpart", "--exclude=", &remote, &commit.to_string()]);
    let what = format!("git lfs fetch of {} object(s) from {remote}", missing.len());
    let done = crate::odb::child::run(cmd, b"", crate::odb::child::fetch_limit(repo), &what)?;
    if !done.status.success() {
        let why = crate::error::one_line(done.stderr.trim()).into_owned();
        return Err(Error::input(Default::default(), format!("{what} failed: {why}")));
    }
    Ok(missing.len())
}

/// A commit, in a new repository at `dir`, whose tree holds `pointers`, one
/// file `OID.wtxtpart` each: what [`fetch_missing`] names to `git lfs fetch`.
fn listing_commit(dir: &Path, pointers: &[&Pointer]) -> Result<Oid> {
    let scratch = Repository::init_bare(dir).map_err(git_err)?;
    let mut tree = scratch.treebuilder(None).map_err(git_err)?;
    for p in pointers {
        let blob = scratch.blob(p.text().as_bytes()).map_err(git_err)?;
        tree.insert(format!("{}.wtxtpart", p.oid), blob, 0o100644).map_err(git_err)?;
    }
    let tree = scratch.find_tree(tree.write().map_err(git_err)?).map_err(git_err)?;
    let who = git2::Signature::new("wtxt", "wtxt", &git2::Time::new(0, 0)).map_err(git_err)?;
    scratch.commit(None, &who, &who, "LFS objects to fetch", &tree, &[]).map_err(git_err)
}

/// `dir` as one entry of `GIT_ALTERNATE_OBJECT_DIRECTORIES`, quoted as Git
/// reads a quoted entry when it holds the list's separator or a quote.
fn alternate(dir: &Path) -> std::ffi::OsString {
    let s = dir.to_string_lossy();
    if !s.contains([':', '"']) && !s.starts_with(' ') {
        return dir.as_os_str().to_owned();
    }
    let mut quoted = String::from('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted.into()
}

/// The pointers among the blobs `ids` (in a tree of parts), read from Git.
pub fn pointers(repo: &Repository, ids: &[Oid]) -> Vec<Pointer> {
    ids.iter().filter_map(|id| Pointer::of_blob(repo, *id)).collect()
}

/// Runs `git lfs install --local --skip-repo` in the repository at `work`:
/// the `lfs` filter in its configuration (the hooks are `wtxt git
/// install`'s to write, beside its own).
pub fn install_client(work: &Path) -> Result<()> {
    let out = Command::new("git")
        .arg("-C")
        .arg(work)
        .args(["lfs", "install", "--local", "--skip-repo"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::input(Default::default(), format!("git lfs install: {e} (is git-lfs installed?)")))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let said = crate::error::one_line(said.trim());
        return Err(Error::input(Default::default(), format!("git lfs install --local --skip-repo: {said}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_are_read_strictly() {
        let p = Pointer { oid: "a".repeat(64), size: 12 };
        assert_eq!(Pointer::parse(p.text().as_bytes()), Some(p.clone()));
        let t = p.text();
        assert_eq!(Pointer::parse(t.trim_end().as_bytes()), None, "no final LF");
        assert_eq!(Pointer::parse(t.replace("size 12", "size 012").as_bytes()), None);
        assert_eq!(Pointer::parse(t.replace(&"a".repeat(64), &"A".repeat(64)).as_bytes()), None);
        assert_eq!(Pointer::parse(format!("{t}ext-0-x sha256:00\n").as_bytes()), None);
        assert_eq!(Pointer::parse(b"WTXT part ix=1\n"), None);
    }

    #[test]
    fn an_object_is_read_through_its_oid() {
        let oid = |b: &[u8]| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b));
        let read = |bytes: &[u8], oid: String| {
            let mut h = Hashed {
                inner: std::io::Cursor::new(bytes.to_vec()),
                sha: <sha2::Sha256 as sha2::Digest>::new(),
                left: 5,
                oid,
            };
            let mut out = Vec::new();
            h.read_to_end(&mut out).map(|_| out)
        };
        assert_eq!(read(b"hello", oid(b"hello")).unwrap(), b"hello");
        assert_eq!(read(b"hello, more", oid(b"hello")).unwrap(), b"hello", "nothing past the size");
        let e = read(b"decoy", oid(b"hello")).unwrap_err();
        assert!(e.to_string().contains("hash to"), "{e}");
        assert!(read(b"hell", oid(b"hello")).is_err(), "short");
    }
}
