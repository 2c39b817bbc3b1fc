//! What a commit made by wtxt stores in the object store, and the staged
//! parts the pre-commit hook stores once they passed.
//!
//! Files up to a part's size go into one pack a commit ([`crate::odb::pack`]:
//! Huffman-coded, a part's previous version as a delta against it), which
//! `git gc` and `git push` copy as it is. A larger file (a single-file
//! snapshot of a whole model) is written loose as `git hash-object -w`
//! writes it, at the repository's loose compression level: libgit2 would
//! deflate it at its own fixed level whatever the configuration says (4.2 s
//! for 180 MB of snapshot text, which base64 leaves only 25% to gain from),
//! and `wtxt git install` sets `core.looseCompression=0`.

use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::git_err;
use crate::error::{Error, Result};
use crate::odb::pack::{Expect, PACKED_MAX};

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
        let (mut file, len) = crate::fs::open_regular(path)?;
        let objects = &self.objects;
        let mut tmp =
            tempfile::Builder::new().prefix("tmp_obj_").tempfile_in(objects).map_err(|e| Error::io(objects, e))?;
        // A loose object is its header and bytes, deflated; its name hashes the same.
        let header = format!("blob {len}\0");
        let mut hash = crate::odb::pack::Object::hasher(len);
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
        crate::odb::pack::same_length(path, len, written)?;
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

/// HEAD's blob at `rel`, when it is one small enough to try as a delta base.
fn base_of(repo: &git2::Repository, head: &git2::Tree, rel: &Path) -> Option<git2::Oid> {
    let entry = head.get_path(rel).ok()?;
    (entry.kind() == Some(git2::ObjectType::Blob)
        && crate::odb::blob::size(repo, entry.id()).is_ok_and(|n| n <= PACKED_MAX))
    .then(|| entry.id())
}

/// The first [`LOOK`] bytes of the regular file at `path` (never through
/// a link).
fn read_start(path: &Path) -> Result<Vec<u8>> {
    let (file, _) = crate::fs::open_regular(path)?;
    let mut bytes = Vec::with_capacity(LOOK);
    file.take(LOOK as u64).read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

/// Adds the files at `rels` (relative to the work tree's top) to `index`
/// as blobs written as `git hash-object -w` writes them (a repository of
/// SHA-256 objects: by libgit2), on up to
/// [`crate::threads::threads`] threads (a snapshot's parts are hashed
/// side by side), each with the stat data Git compares to see that it is
/// unchanged. A file the index lists already, untouched since (a part that
/// did not change keeps its inode and times), is not hashed again.
pub fn add_to_index(repo: &git2::Repository, index: &mut git2::Index, work: &Path, rels: &[&Path]) -> Result<()> {
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
    // The files not listed unchanged: up to a part's size into one pack
    // (each tried as a delta against its version in HEAD), larger ones
    // loose, each set written side by side.
    let mut todo: Vec<usize> = (0..files.len()).filter(|&i| files[i].3.is_none()).collect();
    let mut ids: Vec<Option<git2::Oid>> = files.iter().map(|f| f.3).collect();
    // Paths Git stores through LFS (`filter=lfs`, as `wtxt git install
    // --lfs` sets for parts): the object into the LFS store, its pointer
    // into Git, as `git add` through `git lfs` would.
    let (lfs, rest): (Vec<usize>, Vec<usize>) = todo.iter().partition(|&&i| crate::odb::lfs::tracks(repo, files[i].0));
    todo = rest;
    if !lfs.is_empty() {
        let store = crate::odb::lfs::Store::of(repo);
        let paths: Vec<std::path::PathBuf> = lfs.iter().map(|&i| files[i].1.clone()).collect();
        let pointers = crate::crypto::digest::files_parallel(&paths, |p| store.put(p))?;
        for (i, p) in lfs.into_iter().zip(pointers) {
            ids[i] = Some(repo.blob(p.text().as_bytes()).map_err(git_err)?);
        }
    }
    match Loose::of(repo)? {
        Some(loose) => {
            let (small, large): (Vec<usize>, Vec<usize>) = todo.iter().partition(|&&i| files[i].2.len() <= PACKED_MAX);
            let head = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
            let git_dir = repo.path();
            let objects = git_dir.join("objects");
            let mut jobs: Vec<(&Path, Option<git2::Oid>)> = Vec::with_capacity(small.len());
            for &i in &small {
                let base = match head.as_ref().and_then(|t| base_of(repo, t, files[i].0)) {
                    Some(b) if alike(&objects, b, &read_start(&files[i].1)?) => Some(b),
                    _ => None,
                };
                jobs.push((files[i].1.as_path(), base));
            }
            let packed = crate::odb::pack::store(
                &objects,
                &jobs,
                |j| if j.1.is_some() { Expect::Delta } else { Expect::File },
                |&(path, base)| {
                    let Some(base) = base else { return Ok(crate::odb::pack::Job::File(path.to_path_buf())) };
                    let target = crate::odb::pack::Object::hashed(crate::odb::pack::read_whole(path, PACKED_MAX)?);
                    if target.id == base {
                        // Rewritten unchanged (a part no chunk of which
                        // changed): HEAD's blob is this one.
                        return Ok(crate::odb::pack::Job::Stored(base));
                    }
                    Ok(crate::odb::pack::Job::Blob { target, base: Some(base_for(git_dir, base)?) })
                },
            )?;
            if packed.deltas {
                index_packs(git_dir)?;
            }
            let large_paths: Vec<std::path::PathBuf> = large.iter().map(|&i| files[i].1.clone()).collect();
            let written = crate::crypto::digest::files_parallel(&large_paths, |p| loose.write(p))?;
            for (i, id) in small.into_iter().zip(packed.ids).chain(large.into_iter().zip(written)) {
                ids[i] = Some(id);
            }
        }
        None => {
            for &i in &todo {
                ids[i] = Some(repo.blob_path(&files[i].1).map_err(git_err)?);
            }
        }
    }
    for ((rel, _, m, _), id) in files.iter().zip(ids) {
        let id = id.expect("one id a file");
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

/// How much of a part and of its previous version [`alike`] compares.
const LOOK: usize = 64 << 10;

/// Whether `base` is worth reading whole to try as the delta base of the
/// blob that starts with `target` (its first [`LOOK`] bytes): not when it
/// is stored whole and its first lines are mostly not `target`'s (a part
/// that changed wholly: nothing to gain). One stored as a delta is tried.
fn alike(objects: &Path, base: git2::Oid, target: &[u8]) -> bool {
    crate::odb::pack::stored_prefix(objects, base, LOOK)
        .is_none_or(|start| crate::odb::pack::starts_alike(&start, target))
}

/// Whether the blob `new` starts mostly as `old` does, both read from the
/// object folder `objects` ([`LOOK`] bytes of each at most): a part that
/// changed in places, whose push is worth Git's delta search. Yes when
/// `new` is not stored whole here (its start is not at hand).
pub(crate) fn starts_as(objects: &Path, old: git2::Oid, new: git2::Oid) -> bool {
    crate::odb::pack::stored_prefix(objects, new, LOOK).is_none_or(|start| alike(objects, old, &start))
}

/// The blob `base` of the repository at `git_dir` (at most [`PACKED_MAX`]
/// bytes, as [`base_of`] checked), read whole and hashed.
fn base_for(git_dir: &Path, base: git2::Oid) -> Result<crate::odb::pack::Object> {
    // Stored whole: inflated here (libgit2 would map the pack and hash it
    // with its collision-detecting SHA-1 too); else resolved by libgit2.
    let bytes = match crate::odb::pack::stored_prefix(&git_dir.join("objects"), base, PACKED_MAX as usize + 1) {
        Some(bytes) => bytes,
        None => {
            git2::Repository::open(git_dir).and_then(|r| Ok(r.find_blob(base)?.content().to_vec())).map_err(git_err)?
        }
    };
    verified(base, bytes)
}

/// Writes the repository's multi-pack index (`git multi-pack-index
/// write`) once a pack that may hold a delta was added. Such a pack holds
/// the previous version of a part again, as a delta; the index lists each
/// object once, from the newest pack that has it, so `git gc` and `git
/// push` take that delta, not the whole copy in the older pack (without it
/// Git takes the copy from whichever pack it last read from). A pack of
/// whole objects (every part of a full fine-tuning step) needs none: Git
/// also reads the packs an index does not list, and a whole copy is the
/// same whichever pack gives it.
fn index_packs(git_dir: &Path) -> Result<()> {
    git_in(git_dir, &["multi-pack-index", "write"]).map(drop)
}

/// What `git --git-dir GIT_DIR ARGS...` prints on stdout; its stderr in the
/// error when it fails.
fn git_in(git_dir: &Path, args: &[&str]) -> Result<Vec<u8>> {
    git_with_input(git_dir, args, Vec::new())
}

/// [`git_in`] with `input` on Git's standard input (written beside the
/// reading of its output, so that neither side waits on a full pipe).
pub(crate) fn git_with_input(git_dir: &Path, args: &[&str], input: Vec<u8>) -> Result<Vec<u8>> {
    use std::process::Stdio;
    let what = format!("git {}", args.join(" "));
    let mut child = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io_in(&what, e))?;
    let mut stdin = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().map_err(|e| Error::io_in(&what, e))?;
    let wrote = writer.join().unwrap_or(Ok(()));
    if !out.status.success() || wrote.is_err() {
        return Err(Error::input(
            Default::default(),
            format!("{what}: {}", crate::error::one_line(String::from_utf8_lossy(&out.stderr).trim())),
        ));
    }
    Ok(out.stdout)
}

/// `bytes` as the blob `id`, once they hash to it.
fn verified(id: git2::Oid, bytes: Vec<u8>) -> Result<crate::odb::pack::Object> {
    let o = crate::odb::pack::Object::hashed(bytes);
    if o.id != id {
        return Err(Error::input(Default::default(), format!("object {id} holds bytes that hash to {}", o.id)));
    }
    Ok(o)
}

/// Moves the loose blobs of the staged parts of split snapshots
/// (`*.wtxtpart`) into one pack, as [`add_to_index`] stores what it
/// commits: each tried as a delta against its path's version in HEAD.
/// The pre-commit hook calls it once the staged snapshots passed, unless
/// `wtxt.packParts` is false. Returns how many blobs it packed.
pub fn pack_staged_parts(dir: &Path) -> Result<usize> {
    let repo = git2::Repository::discover(dir).map_err(git_err)?;
    let cfg = repo.config().map_err(git_err)?;
    if cfg.get_bool("wtxt.packParts").ok() == Some(false) || Loose::of(&repo)?.is_none() {
        return Ok(0);
    }
    let index = repo.index().map_err(git_err)?;
    let head = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
    let objects = repo.path().join("objects");
    let mut jobs: Vec<(git2::Oid, Option<git2::Oid>, std::path::PathBuf)> = Vec::new();
    for e in index.iter() {
        // Stage bits: a conflicted entry is not one the commit stores.
        if e.flags & 0x3000 != 0
            || !e.path.ends_with(b".wtxtpart")
            || crate::odb::lfs::Pointer::of_blob(&repo, e.id).is_some()
        {
            continue;
        }
        let hex = e.id.to_string();
        let loose = objects.join(&hex[..2]).join(&hex[2..]);
        if !std::fs::symlink_metadata(&loose).is_ok_and(|m| m.is_file()) || jobs.iter().any(|j| j.0 == e.id) {
            continue;
        }
        let rel = Path::new(std::ffi::OsStr::from_bytes(&e.path));
        let base = head.as_ref().and_then(|t| base_of(&repo, t, rel)).filter(|b| *b != e.id);
        jobs.push((e.id, base, loose));
    }
    // A blob larger than a part stays loose, for Git to pack.
    jobs.retain(|j| crate::odb::blob::size(&repo, j.0).is_ok_and(|n| n <= PACKED_MAX));
    for j in jobs.iter_mut() {
        if let Some(b) = j.1 {
            let start = crate::odb::pack::stored_prefix(&objects, j.0, LOOK).unwrap_or_default();
            j.1 = alike(&objects, b, &start).then_some(b);
        }
    }
    let git_dir = repo.path();
    let load = |&(id, base, ref loose): &(git2::Oid, Option<git2::Oid>, std::path::PathBuf)| {
        let Some(bytes) = crate::odb::pack::stored_prefix(&objects, id, PACKED_MAX as usize + 1) else {
            return Err(Error::input(Default::default(), "expected a loose object that inflates").in_file(loose));
        };
        let target = verified(id, bytes).map_err(|e| e.in_file(loose))?;
        let base = base.map(|b| base_for(git_dir, b)).transpose()?;
        Ok(crate::odb::pack::Job::Blob { target, base })
    };
    let expect = |j: &(_, Option<_>, _)| if j.1.is_some() { Expect::Delta } else { Expect::Blob };
    let packed = crate::odb::pack::store(&objects, &jobs, expect, load)?;
    if packed.ids.is_empty() {
        return Ok(0);
    }
    if packed.deltas {
        index_packs(git_dir)?;
    }
    // Packed and synced: the loose copies go, as `git prune-packed` would.
    for (_, _, loose) in &jobs {
        std::fs::remove_file(loose).map_err(|e| Error::io(loose, e))?;
    }
    release_unreachable(git_dir)?;
    Ok(jobs.len())
}

/// Takes wtxt's keep file off the packs that nothing reaches any more:
/// not a branch, tag or other ref, not a reflog, not the index (what is
/// being committed). A generation that a reset or a rewrite dropped then
/// goes back to `git gc`, which prunes it once its reflog entries expire,
/// as any unreachable object. Only when some pack is kept, at the cost of
/// `git rev-list --objects` over the history: the hook at each commit, the
/// daemon and the Snapshotter once a start.
pub(crate) fn release_unreachable(git_dir: &Path) -> Result<()> {
    let reachable = || {
        let listed = git_in(git_dir, &["rev-list", "--objects", "--all", "--reflog", "--indexed-objects"])?;
        Ok(listed
            .split(|&b| b == b'\n')
            .filter_map(|l| git2::Oid::from_str(std::str::from_utf8(l.get(..40)?).ok()?).ok())
            .collect())
    };
    crate::odb::pack::release_unreachable(&git_dir.join("objects"), reachable)?;
    Ok(())
}
