//! Snapshot text stored as a Git pack that `gc` and `push` copy as it is.
//!
//! Left to Git, a repository of parts pays twice for every generation
//! (docs/PERFORMANCE.md, "Git at 1 GiB"): zlib runs at 45 MB/s on base64,
//! hunting for repeats that random text does not have, and `gc` tries a
//! delta for every part, 1.4 CPU-s each for one that changed wholly, at
//! every repack. Here a blob is deflated with Huffman codes alone
//! ([`crate::odb::deflate`]: to 75.9% of the text, where Git's level 1
//! reaches 77.6%), and when most of a part's lines are those of the same
//! path's previous version (found by comparing lines in place: a
//! generation keeps its layout), that version is stored again beside it as
//! a delta against it. Parts carry the `-delta` attribute (`wtxt git
//! install`), so Git keeps both choices: it reuses a stored delta or whole
//! object and never searches again.
//!
//! Git reads a delta only against a base in the same pack, so the delta
//! goes from the new version (in this pack) to the old, as Git's own
//! repacking would store it: the newest version whole.
//!
//! A pack of whole objects only (every part of a full fine-tuning step)
//! gets a `.keep` file: `git gc` would copy it byte for byte into one pack
//! of the whole history (4.3 GB for four 1 GiB generations, a full rewrite
//! at every `gc --auto` past 50 packs) and gain nothing. The keep comes off
//! when a later pack stores one of its objects again as a delta, or once
//! nothing reaches the pack ([`KEEP`]).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use git2::Oid;
use sha1::{Digest, Sha1};

use crate::crypto::digest::Sha1State;
use crate::error::{Error, Result};
use crate::fs::DirectWriter;

mod delta;
mod keep;
mod stored;

pub(crate) use delta::{line_delta, starts_alike};
use keep::{release, KEEP};
pub(crate) use keep::{release_all, release_unreachable};
pub(crate) use stored::stored_prefix;
use stored::{BLOB, OFS_DELTA};

/// A blob's bytes and their id.
pub(crate) struct Object {
    /// The blob's id (SHA-1 of `blob <len>\0` and the bytes).
    pub id: Oid,
    /// Its content.
    pub bytes: Vec<u8>,
}

impl Object {
    /// `bytes` with the id Git gives them.
    pub fn hashed(bytes: Vec<u8>) -> Object {
        let mut h = Object::hasher(bytes.len() as u64);
        h.update(&bytes);
        Object { id: Object::id(h), bytes }
    }

    /// The SHA-1 that names a blob of `len` bytes once they are fed to it
    /// (Git's `blob <len>` header and a NUL go first).
    pub fn hasher(len: u64) -> Sha1State {
        let mut h = Sha1State::default();
        h.update(format!("blob {len}\0").as_bytes());
        h
    }

    /// The id a [`Object::hasher`] fed all of a blob's bytes gives.
    pub fn id(h: Sha1State) -> Oid {
        Oid::from_bytes(&h.finalize()).expect("20 bytes")
    }
}

/// Largest file written into a pack (a part is at most 50 MB by default):
/// a blob tried as a delta, and its base, are read whole.
pub(crate) const PACKED_MAX: u64 = 64 << 20;

/// One blob to store.
pub(crate) enum Job {
    /// A blob in memory, with the previous version of its path when there
    /// is one to store again as a delta against it.
    Blob {
        /// The blob stored.
        target: Object,
        /// The previous version tried as a delta.
        base: Option<Object>,
    },
    /// The regular file at this path (at most [`PACKED_MAX`]
    /// bytes), read and coded a block at a time: nothing holds it whole,
    /// and no delta is tried.
    File(PathBuf),
    /// A blob the repository holds already (a part unchanged since HEAD,
    /// though rewritten): nothing is stored.
    Stored(Oid),
}

/// One object as it goes into the pack.
struct Entry {
    id: Oid,
    /// The base's id for a delta.
    base: Option<Oid>,
    /// Length before deflating (of the delta, for a delta).
    size: usize,
    deflated: Vec<u8>,
}

/// The bytes of the regular file at `path` (never through a link, at most
/// `max`), read in full after a size check.
pub(crate) fn read_whole(path: &Path, max: u64) -> Result<Vec<u8>> {
    let (file, len) = open_sized(path, max)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| Error::io(path, e))?;
    same_length(path, len, bytes.len() as u64)?;
    Ok(bytes)
}

/// The regular file at `path` and its length, at most `max`.
fn open_sized(path: &Path, max: u64) -> Result<(File, u64)> {
    let (file, len) = crate::fs::open_regular(path)?;
    if len > max {
        return Err(Error::input(Default::default(), format!("grew past {max} bytes while it was read")).in_file(path));
    }
    Ok((file, len))
}

/// A file that gave `read` bytes where its size said `len`.
pub(crate) fn same_length(path: &Path, len: u64, read: u64) -> Result<()> {
    if read != len {
        return Err(Error::input(Default::default(), format!("changed while it was read ({len} bytes, then {read})"))
            .in_file(path));
    }
    Ok(())
}

/// A file read and coded a block at a time, a block ahead (to know the
/// last), while its blob id is hashed.
struct FileLane<'p> {
    path: &'p Path,
    file: File,
    /// The size it had when opened, which the id's header says.
    len: u64,
    read: u64,
    id: Sha1State,
    z: crate::odb::deflate::Zlib,
    /// The block in hand: hashed by the caller, then coded.
    cur: Vec<u8>,
    n: usize,
    next: Vec<u8>,
    coded: bool,
}

impl<'p> FileLane<'p> {
    fn open(path: &'p Path, out: Vec<u8>) -> Result<FileLane<'p>> {
        use crate::odb::deflate::{Zlib, BLOCK};
        let (file, len) = open_sized(path, PACKED_MAX)?;
        let z = Zlib::new(out, len as usize);
        let (cur, next) = (vec![0u8; BLOCK], vec![0u8; BLOCK]);
        let mut lane = FileLane { path, file, len, read: 0, id: Object::hasher(len), z, cur, n: 0, next, coded: false };
        lane.n = lane.fill(false)?;
        lane.read = lane.n as u64;
        Ok(lane)
    }

    /// Reads a block into `next` (`cur` when not `next`); its length.
    fn fill(&mut self, next: bool) -> Result<usize> {
        let buf = if next { &mut self.next } else { &mut self.cur };
        crate::fs::read_full(&mut self.file, buf).map_err(|e| Error::io(self.path, e))
    }

    /// Codes the block in hand and reads the next.
    fn code(&mut self) -> Result<()> {
        use crate::odb::deflate::BLOCK;
        let m = if self.n == BLOCK { self.fill(true)? } else { 0 };
        self.read += m as u64;
        if self.read > self.len {
            return same_length(self.path, self.len, self.read);
        }
        self.z.block(&self.cur[..self.n], m == 0);
        self.coded = m == 0;
        std::mem::swap(&mut self.cur, &mut self.next);
        self.n = m;
        Ok(())
    }

    /// The file's id and its one whole entry.
    fn finish(self) -> Result<(Oid, Vec<Entry>)> {
        same_length(self.path, self.len, self.read)?;
        let id = Object::id(self.id);
        Ok((id, vec![Entry { id, base: None, size: self.len as usize, deflated: self.z.finish() }]))
    }
}

/// The files at `paths` (one or two) as whole entries, each coded into
/// one of `outs`' room as it is read: two files' blob ids are hashed side
/// by side on this core ([`Sha1State::update_pair`]). Blocks fall where
/// they fall for a blob coded whole: the same bytes either way.
fn prepare_files(paths: &[&Path], mut outs: impl FnMut() -> Vec<u8>) -> Result<Vec<(Oid, Vec<Entry>)>> {
    let mut lanes = paths.iter().map(|p| FileLane::open(p, outs())).collect::<Result<Vec<_>>>()?;
    while lanes.iter().any(|l| !l.coded) {
        match lanes.as_mut_slice() {
            [a, b] if !a.coded && !b.coded => {
                Sha1State::update_pair(&mut a.id, &a.cur[..a.n], &mut b.id, &b.cur[..b.n]);
            }
            lanes => {
                for l in lanes.iter_mut().filter(|l| !l.coded) {
                    l.id.update(&l.cur[..l.n]);
                }
            }
        }
        for lane in lanes.iter_mut().filter(|l| !l.coded) {
            lane.code()?;
        }
    }
    lanes.into_iter().map(FileLane::finish).collect()
}

/// What `jobs` (one or two) put in the pack, in order, each coded into
/// room `take` gives: two files are read side by side, their blob ids
/// hashed as a pair.
fn prepare_group(jobs: Vec<Job>, mut take: impl FnMut() -> Vec<u8>) -> Result<Vec<(Oid, Vec<Entry>)>> {
    let files: Option<Vec<&Path>> = jobs
        .iter()
        .map(|j| match j {
            Job::File(path) => Some(path.as_path()),
            Job::Blob { .. } | Job::Stored(_) => None,
        })
        .collect();
    if let Some(paths) = files {
        return prepare_files(&paths, take);
    }
    let mut done = Vec::with_capacity(jobs.len());
    for job in jobs {
        done.extend(match job {
            Job::File(path) => prepare_files(&[&path], &mut take)?,
            Job::Blob { target, base } => vec![prepare_blob(target, base, take())?],
            Job::Stored(id) => vec![(id, Vec::new())],
        });
    }
    Ok(done)
}

/// What a blob job puts in the pack, coded into `out`'s room: its target
/// whole and, when most lines are shared, the previous version again as a
/// delta against it (the newest version whole, older ones as deltas: what
/// Git's own repacking chooses, so that reading the newest applies no
/// delta). Returns the target's id with the entries.
fn prepare_blob(target: Object, base: Option<Object>, out: Vec<u8>) -> Result<(Oid, Vec<Entry>)> {
    let deflated = crate::odb::deflate::zlib_into(&target.bytes, out);
    let whole = Entry { id: target.id, base: None, size: target.bytes.len(), deflated };
    if let Some(old) = &base {
        if let Some(delta) = line_delta(&target.bytes, &old.bytes) {
            let d = Entry {
                id: old.id,
                base: Some(target.id),
                size: delta.len(),
                deflated: crate::odb::deflate::zlib(&delta),
            };
            return Ok((target.id, vec![whole, d]));
        }
    }
    Ok((target.id, vec![whole]))
}

/// A pack being written: its temporary file, what its index lists, and
/// the checksum of what was written so far.
struct Writer {
    dir: PathBuf,
    file: DirectWriter<tempfile::NamedTempFile>,
    at: u64,
    /// Id, CRC-32 of the entry as stored, offset.
    listed: Vec<(Oid, u32, u64)>,
    /// The object count the header says.
    count: u32,
    sum: Sha1,
    /// What this pack stores as deltas, whole in the packs they came from
    /// (none: a pack of whole objects, kept).
    superseded: Vec<Oid>,
}

impl Writer {
    /// A pack whose header says `count` objects: the checksum runs over the
    /// header first, so a count that holds lets the pack be hashed as it is
    /// written (see `finish` for one that does not).
    fn create(dir: &Path, count: u32) -> Result<Writer> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tmp = tempfile::Builder::new().prefix("tmp_pack_").tempfile_in(dir).map_err(|e| Error::io(dir, e))?;
        let file = DirectWriter::new(tmp).map_err(|e| Error::io(dir, e))?;
        let mut w = Writer {
            dir: dir.to_path_buf(),
            file,
            at: 0,
            listed: Vec::new(),
            count,
            sum: Sha1::new(),
            superseded: Vec::new(),
        };
        w.write(b"PACK\0\0\0\x02")?;
        w.write(&count.to_be_bytes())?;
        Ok(w)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.sum.update(bytes);
        self.file.write_all(bytes).map_err(|e| Error::io(&self.dir, e))?;
        self.at += bytes.len() as u64;
        Ok(())
    }

    fn offset_of(&self, id: Oid) -> Option<u64> {
        self.listed.iter().rev().find(|l| l.0 == id).map(|l| l.2)
    }

    fn add(&mut self, e: &Entry) -> Result<()> {
        if self.offset_of(e.id).is_some() {
            return Ok(());
        }
        let kind = if e.base.is_some() { OFS_DELTA } else { BLOB };
        let mut head = Vec::with_capacity(24);
        let mut size = e.size as u64;
        let mut c = (kind << 4) | (size & 0x0f) as u8;
        size >>= 4;
        while size != 0 {
            head.push(c | 0x80);
            c = (size & 0x7f) as u8;
            size >>= 7;
        }
        head.push(c);
        if let Some(base) = e.base {
            self.superseded.push(e.id);
            let base_at = self.offset_of(base).expect("a delta's base is written before it");
            let mut ofs = self.at - base_at;
            let mut buf = [0u8; 10];
            let mut pos = buf.len() - 1;
            buf[pos] = (ofs & 0x7f) as u8;
            ofs >>= 7;
            while ofs != 0 {
                ofs -= 1;
                pos -= 1;
                buf[pos] = 0x80 | (ofs & 0x7f) as u8;
                ofs >>= 7;
            }
            head.extend_from_slice(&buf[pos..]);
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&head);
        crc.update(&e.deflated);
        self.listed.push((e.id, crc.finalize(), self.at));
        self.write(&head)?;
        self.write(&e.deflated)
    }

    /// Writes the trailing SHA-1, then the index, and moves both into
    /// place, the pack first. When the header's count did not hold (an
    /// expected delta did not save enough to be stored), the count is
    /// corrected and the pack read back to hash it, as `git index-pack
    /// --fix-thin` does. Returns the objects it stores as deltas.
    fn finish(self) -> Result<Vec<Oid>> {
        if self.listed.is_empty() {
            // Every object was there already: no pack (the temporary
            // file goes), and nothing superseded.
            return Ok(self.superseded);
        }
        let dir = self.dir;
        let mut tmp = self.file.into_inner().map_err(|e| Error::io(&dir, e))?;
        let count = self.listed.len() as u32;
        let f = tmp.as_file_mut();
        let io = |e| Error::io(&dir, e);
        let sum: [u8; 20] = if count == self.count {
            self.sum.finalize().into()
        } else {
            f.seek(SeekFrom::Start(8)).map_err(io)?;
            f.write_all(&count.to_be_bytes()).map_err(io)?;
            f.seek(SeekFrom::Start(0)).map_err(io)?;
            let mut h = Sha1::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = f.read(&mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
            f.seek(SeekFrom::End(0)).map_err(io)?;
            h.finalize().into()
        };
        f.write_all(&sum).map_err(io)?;
        let name = format!("pack-{}", hex::encode(sum));
        let idx = index_bytes(self.listed, &sum);
        let mut idx_tmp = tempfile::Builder::new().prefix("tmp_idx_").tempfile_in(&dir).map_err(io)?;
        idx_tmp.write_all(&idx).map_err(io)?;
        // Kept before it can be seen, as `git index-pack --keep` does: a
        // `gc` starting meanwhile leaves it.
        if self.superseded.is_empty() {
            let keep = dir.join(format!("{name}.keep"));
            if std::fs::symlink_metadata(&keep).is_err() {
                crate::fs::write_file(&keep, KEEP, 0o444)?;
            }
        }
        for (t, ext) in [(tmp, "pack"), (idx_tmp, "idx")] {
            let dest = dir.join(format!("{name}.{ext}"));
            t.as_file().sync_all().map_err(io)?;
            t.as_file().set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o444)).map_err(io)?;
            // A pack of that name is these bytes already (its name is their hash).
            if std::fs::symlink_metadata(&dest).is_err() {
                t.persist(&dest).map_err(|e| Error::io(&dest, e.error))?;
            }
        }
        File::open(&dir).and_then(|d| d.sync_all()).map_err(io)?;
        Ok(self.superseded)
    }
}

/// A version-2 pack index of `listed` for the pack whose checksum is `sum`.
fn index_bytes(mut listed: Vec<(Oid, u32, u64)>, sum: &[u8; 20]) -> Vec<u8> {
    listed.sort_by_key(|l| l.0);
    let mut out = b"\xfftOc\0\0\0\x02".to_vec();
    let mut fanout = [0u32; 256];
    for (id, ..) in &listed {
        fanout[id.as_bytes()[0] as usize] += 1;
    }
    let mut total = 0;
    for n in fanout {
        total += n;
        out.extend_from_slice(&total.to_be_bytes());
    }
    for (id, ..) in &listed {
        out.extend_from_slice(id.as_bytes());
    }
    for (_, crc, _) in &listed {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for (.., at) in &listed {
        let small = if *at < 0x8000_0000 {
            *at as u32
        } else {
            large.push(*at);
            0x8000_0000 | (large.len() - 1) as u32
        };
        out.extend_from_slice(&small.to_be_bytes());
    }
    for at in large {
        out.extend_from_slice(&at.to_be_bytes());
    }
    out.extend_from_slice(sum);
    let own: [u8; 20] = Sha1::digest(&out).into();
    out.extend_from_slice(&own);
    out
}

/// What an item of [`store`] loads as, said before it is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expect {
    /// A [`Job::File`]: two in a row go to one job, their ids hashed as a
    /// pair.
    File,
    /// A [`Job::Blob`] without a base (or one whose delta is not expected).
    Blob,
    /// A [`Job::Blob`] whose base is expected to be stored as a delta.
    Delta,
}

/// Stores the blob of each of `items` in one new pack in the object
/// folder `objects`: `load` reads an item's blob (and the base to try),
/// on up to [`crate::threads::threads`] threads, each deflated there, and
/// they are written in `items`' order as they come. `expect` says
/// beforehand what each item loads as: how many entries a delta adds (the
/// header's count, which the checksum covers first, is then known before
/// the first entry), and which files go two to a job.
pub(crate) fn store<T: Sync>(
    objects: &Path,
    items: &[T],
    expect: impl Fn(&T) -> Expect,
    load: impl Fn(&T) -> Result<Job> + Sync,
) -> Result<Stored> {
    if items.is_empty() {
        return Ok(Stored { ids: Vec::new(), deltas: false });
    }
    let expected: Vec<Expect> = items.iter().map(expect).collect();
    let count = items.len() + expected.iter().filter(|&&e| e == Expect::Delta).count();
    let dir = objects.join("pack");
    let mut w = Writer::create(&dir, u32::try_from(count).unwrap_or(u32::MAX))?;
    let mut ids = Vec::with_capacity(items.len());
    // As many jobs coded ahead as keep every worker busy while one is
    // written, no more: each holds one or two parts' coded bytes.
    let ahead = crate::threads::threads().saturating_sub(1).max(1);
    // A job's whole entry's buffer, once written, for the next to code
    // into (see [`Rooms`]). One comes back a job (a delta's small buffer is
    // dropped), and no more are kept than results `in_order` holds at once.
    let spare = Rooms::kept(2 * (ahead + 2));
    let take = || spare.take();
    // Two files in a row go to one job, so that a core hashes their ids
    // side by side; a blob (read whole first) goes alone.
    let mut groups: Vec<&[T]> = Vec::with_capacity(items.len());
    let mut at = 0;
    while at < items.len() {
        let two = expected.get(at..at + 2) == Some(&[Expect::File, Expect::File]);
        let n = if two { 2 } else { 1 };
        groups.push(&items[at..at + n]);
        at += n;
    }
    crate::threads::in_order(
        &groups,
        ahead,
        |group| prepare_group(group.iter().map(&load).collect::<Result<_>>()?, take),
        |done| {
            for (id, entries) in done {
                for (i, e) in entries.into_iter().enumerate() {
                    w.add(&e)?;
                    if i == 0 {
                        spare.give(e.deflated);
                    }
                }
                ids.push(id);
            }
            Ok(())
        },
    )?;
    let superseded = w.finish()?;
    release(&dir, &superseded)?;
    Ok(Stored { ids, deltas: !superseded.is_empty() })
}

/// What [`store`] did.
pub(crate) struct Stored {
    /// Each item's id, in order.
    pub ids: Vec<Oid>,
    /// Whether the pack it wrote holds a delta (none when every object was
    /// there already, or no delta saved enough to be stored as one).
    pub deltas: bool,
}

/// Rooms a pack's entries are coded into, reused from job to job and
/// from pack to pack in one process (the daemon and the Snapshotter commit
/// a generation at a time): fresh memory costs a page fault every 4 KiB,
/// about half what coding the bytes costs (measured), reused memory none.
/// Between packs at most [`Rooms::LEFT_MAX`] bytes of rooms are left,
/// emptied and lazily freed (`MADV_FREE`): counted in the process's RSS,
/// they are the first pages the kernel takes back when memory runs short,
/// and until then a room taken again costs no fault.
struct Rooms {
    spare: std::sync::Mutex<Vec<Vec<u8>>>,
    keep: usize,
}

/// The rooms the last pack of this process left.
static LEFT: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

impl Rooms {
    /// The most the rooms left between packs hold: what a generation of
    /// the default 45M parts takes on two cores (four rooms of about
    /// 41 MB), with room to spare, and not what many cores take.
    const LEFT_MAX: usize = 256 << 20;

    /// The rooms the last pack left, keeping at most `keep`.
    fn kept(keep: usize) -> Rooms {
        let mut left = std::mem::take(&mut *LEFT.lock().unwrap_or_else(|p| p.into_inner()));
        left.truncate(keep);
        Rooms { spare: std::sync::Mutex::new(left), keep }
    }

    fn take(&self) -> Vec<u8> {
        self.spare.lock().unwrap_or_else(|p| p.into_inner()).pop().unwrap_or_default()
    }

    fn give(&self, room: Vec<u8>) {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < self.keep {
            spare.push(room);
        }
    }
}

impl Drop for Rooms {
    /// Leaves the rooms, emptied and lazily freed, for the next pack.
    fn drop(&mut self) {
        let mut spare = std::mem::take(&mut *self.spare.lock().unwrap_or_else(|p| p.into_inner()));
        let mut held = 0;
        spare.retain(|room| {
            held += room.capacity();
            held <= Rooms::LEFT_MAX
        });
        for room in &mut spare {
            room.clear();
            crate::buffer::lazily_free(room.spare_capacity_mut());
        }
        *LEFT.lock().unwrap_or_else(|p| p.into_inner()) = spare;
    }
}

#[cfg(test)]
mod tests;
