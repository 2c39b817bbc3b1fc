//! Blobs written into a repository's object store as `git hash-object -w`
//! writes them, at the repository's loose compression level.
//!
//! libgit2 deflates every loose object at its own fixed level, whatever the
//! configuration says: 4.2 s for one 180 MB generation of snapshot text,
//! which base64 leaves only 25% to gain from. `wtxt git install` sets
//! `core.looseCompression=0` for that reason (Git's packs compress once,
//! later), and a commit made here honours it: one pass that hashes
//! (SHA-1, with the CPU's instructions) and copies the file into a stored
//! zlib stream.

use std::io::{Read, Write};
use std::path::Path;

use sha1::{Digest, Sha1};

use crate::error::{Error, Result};
use crate::git::git_err;

/// The loose compression level `repo` asks for: `core.looseCompression`,
/// else `core.compression`, else 0 (the level `wtxt git install` sets: the
/// text of a snapshot is compressed when Git packs it).
fn loose_level(cfg: &git2::Config) -> u32 {
    let level = |k: &str| cfg.get_i32(k).ok().filter(|l| (-1..=9).contains(l));
    match level("core.looseCompression").or_else(|| level("core.compression")) {
        Some(-1) => 1, // Git's "default" for loose objects is zlib's best speed.
        Some(l) => l as u32,
        None => 0,
    }
}

/// Where and how blobs are written: the repository's loose object folder
/// and level. Plain data, so several threads can write blobs at once.
struct Loose {
    objects: std::path::PathBuf,
    level: u32,
}

impl Loose {
    /// `None` for a repository of SHA-256 objects (left to libgit2).
    fn of(repo: &git2::Repository) -> Result<Option<Loose>> {
        let cfg = repo.config().map_err(git_err)?;
        if cfg.get_string("extensions.objectformat").is_ok_and(|f| !f.eq_ignore_ascii_case("sha1")) {
            return Ok(None);
        }
        Ok(Some(Loose { objects: repo.path().join("objects"), level: loose_level(&cfg) }))
    }

    /// Writes the regular file at `path` as a blob and returns its id.
    fn write(&self, path: &Path) -> Result<git2::Oid> {
        let mut file = crate::atomic::open_no_follow(path).map_err(|e| Error::io(path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return Err(Error::usage("not a regular file").in_file(path));
        }
        let len = meta.len();
        let objects = &self.objects;
        let mut tmp =
            tempfile::Builder::new().prefix("tmp_obj_").tempfile_in(objects).map_err(|e| Error::io(objects, e))?;
        let header = format!("blob {len}\0");
        let mut hash = Sha1::new();
        hash.update(header.as_bytes());
        let written = {
            let out = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
            let mut z = flate2::write::ZlibEncoder::new(out, flate2::Compression::new(self.level));
            let copy = || -> std::io::Result<u64> {
                z.write_all(header.as_bytes())?;
                let mut buf = vec![0u8; 1 << 20];
                let mut n = 0u64;
                loop {
                    let k = file.read(&mut buf)?;
                    if k == 0 {
                        break;
                    }
                    hash.update(&buf[..k]);
                    z.write_all(&buf[..k])?;
                    n += k as u64;
                }
                z.finish()?.flush()?;
                Ok(n)
            };
            copy().map_err(|e| Error::io(path, e))?
        };
        if written != len {
            return Err(Error::input(
                Default::default(),
                format!("changed while it was read ({len} bytes, then {written})"),
            )
            .in_file(path));
        }
        let id = hex::encode(hash.finalize());
        let dir = objects.join(&id[..2]);
        let dest = dir.join(&id[2..]);
        // An object that is there already is the same bytes (its name is their hash).
        if std::fs::symlink_metadata(&dest).is_err() {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let read_only = std::os::unix::fs::PermissionsExt::from_mode(0o444);
            tmp.as_file().set_permissions(read_only).map_err(|e| Error::io(tmp.path(), e))?;
            tmp.persist(&dest).map_err(|e| Error::io(&dest, e.error))?;
        }
        git2::Oid::from_str(&id).map_err(git_err)
    }
}

/// Adds the files at `rels` (relative to the work tree's top) to `index`
/// as blobs written as `git hash-object -w` writes them (a repository of
/// SHA-256 objects: by libgit2), on up to
/// [`crate::threads::threads`] threads (a snapshot's parts are hashed
/// side by side), each with the stat data Git compares to see that it is
/// unchanged. A file the index lists already, untouched since (a part that
/// did not change keeps its inode and times), is not hashed again.
pub fn add_to_index(repo: &git2::Repository, index: &mut git2::Index, work: &Path, rels: &[&Path]) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let odb = repo.odb().map_err(git_err)?;
    let mut files = Vec::with_capacity(rels.len());
    for rel in rels {
        let path = work.join(rel);
        let m = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
        let listed = index.get_path(rel, 0).filter(|e| {
            (e.ino, e.file_size, e.mtime.seconds(), e.mtime.nanoseconds(), e.ctime.seconds(), e.ctime.nanoseconds())
                == (
                    m.ino() as u32,
                    m.len() as u32,
                    m.mtime() as i32,
                    m.mtime_nsec() as u32,
                    m.ctime() as i32,
                    m.ctime_nsec() as u32,
                )
        });
        let known = listed.map(|e| e.id).filter(|id| odb.exists(*id));
        files.push((rel, path, m, known));
    }
    // The files not listed unchanged, written side by side.
    let todo: Vec<std::path::PathBuf> = files.iter().filter(|f| f.3.is_none()).map(|f| f.1.clone()).collect();
    let mut written = match Loose::of(repo)? {
        Some(loose) => crate::crypto::digest::files_parallel(&todo, |p| loose.write(p))?,
        None => todo.iter().map(|p| repo.blob_path(p).map_err(git_err)).collect::<Result<_>>()?,
    }
    .into_iter();
    for (rel, _, m, known) in &files {
        let id = known.or_else(|| written.next()).expect("one id a file");
        let exec = m.mode() & 0o111 != 0;
        let entry = git2::IndexEntry {
            ctime: git2::IndexTime::new(m.ctime() as i32, m.ctime_nsec() as u32),
            mtime: git2::IndexTime::new(m.mtime() as i32, m.mtime_nsec() as u32),
            dev: m.dev() as u32,
            ino: m.ino() as u32,
            mode: if exec { 0o100755 } else { 0o100644 },
            uid: m.uid(),
            gid: m.gid(),
            file_size: m.len() as u32,
            id,
            flags: 0,
            flags_extended: 0,
            path: rel.as_os_str().as_bytes().to_vec(),
        };
        index.add(&entry).map_err(git_err)?;
    }
    Ok(())
}
