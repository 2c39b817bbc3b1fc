//! Storing a written text as a split snapshot when it exceeds the part size
//! (reading one is [`crate::wtxt::input`]'s).
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::atomic::AtomicFile;
use crate::error::{Error, Result};
use crate::wtxt::split::{self, part_ix, part_name, parts_dir, PartLine, PartSink, PartSize};

/// Puts a written single-file text in place: at `af`'s destination as it
/// is when it fits in `size`, else split, the head there and the parts in
/// the folder next to it. Returns the number of parts (0: one file).
pub fn store(mut af: AtomicFile, size: PartSize) -> Result<usize> {
    let out = af.dest().to_path_buf();
    let len = af.file().metadata().map_err(|e| Error::io(&out, e))?.len();
    let dir = parts_dir(&out);
    match size.limit() {
        Some(limit) if len > limit && !af.is_device() => {
            let mut text = af.file().try_clone().map_err(|e| Error::io(&out, e))?;
            text.seek(SeekFrom::Start(0)).map_err(|e| Error::io(&out, e))?;
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            let mut sink = PartDir { dir: dir.clone(), old: old_parts(&out) };
            let head = split::split(BufReader::with_capacity(1 << 20, text), limit, &mut sink)
                .map_err(|e| e.in_files(&out, &dir))?;
            let count = head.split(|&b| b == b'\n').filter(|l| l.starts_with(b"part ")).count();
            let mut h = AtomicFile::create(&out)?;
            h.file().write_all(&head).map_err(|e| Error::io(&out, e))?;
            h.commit()?;
            drop(af);
            remove_stale_parts(&dir, count as u64)?;
            Ok(count)
        }
        _ => {
            af.commit()?;
            if dir.is_dir() {
                remove_stale_parts(&dir, 0)?;
                let _ = std::fs::remove_dir(&dir);
            }
            Ok(0)
        }
    }
}

/// Removes part files numbered above `count`: a head with fewer parts than
/// the last one replaced them.
fn remove_stale_parts(dir: &Path, count: u64) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        if part_ix(&name.to_string_lossy()).is_some_and(|ix| ix > count) {
            std::fs::remove_file(entry.path()).map_err(|e| Error::io(entry.path(), e))?;
        }
    }
    Ok(())
}

/// Writes parts into a folder, each atomically; a part whose file already
/// holds exactly these bytes is left alone (its mtime too, so Git does not
/// read it again).
struct PartDir {
    dir: PathBuf,
    /// The part table of the head being replaced: only a part it lists with
    /// the same hash can be unchanged, so only those files are read again.
    old: Vec<PartLine>,
}

/// The part table of the head at `out`, if it is one.
fn old_parts(out: &Path) -> Vec<PartLine> {
    let Ok(f) = File::open(out) else { return Vec::new() };
    match split::open(Box::new(f)) {
        Ok(split::Opened::Split(h)) => h.parts,
        _ => Vec::new(),
    }
}

struct PartFile {
    af: AtomicFile,
    w: std::io::BufWriter<File>,
}

impl Write for PartFile {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.w.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

impl PartSink for PartDir {
    type W = PartFile;

    fn open(&mut self, ix: u64) -> Result<PartFile> {
        let path = self.dir.join(part_name(ix));
        let mut af = AtomicFile::create(&path)?;
        let f = af.file().try_clone().map_err(|e| Error::io(&path, e))?;
        Ok(PartFile { af, w: std::io::BufWriter::with_capacity(1 << 20, f) })
    }

    fn close(&mut self, mut p: PartFile, part: &PartLine) -> Result<()> {
        let path = self.dir.join(part_name(part.ix));
        p.w.flush().map_err(|e| Error::io(&path, e))?;
        let listed =
            self.old.get(part.ix as usize - 1).is_some_and(|o| (o.bytes, o.sha256) == (part.bytes, part.sha256));
        if listed && same_file(&path, part) {
            return Ok(()); // dropping the AtomicFile removes the copy
        }
        p.af.commit()
    }
}

/// True when `path` already holds the part's bytes.
fn same_file(path: &Path, part: &PartLine) -> bool {
    use sha2::{Digest, Sha256};
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == part.bytes => {}
        _ => return false,
    }
    let Ok(mut f) = File::open(path) else { return false };
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => sha.update(&buf[..n]),
            Err(_) => return false,
        }
    }
    <[u8; 32]>::from(sha.finalize()) == part.sha256
}

/// `wtxt split` and `wtxt join`: the same snapshot stored in the other form
/// (split by `size`, or one file with [`PartSize::Whole`]). The bytes are
/// copied, never decoded: joining then splitting again gives back the very
/// same files. Each part is checked against its head on the way.
pub fn restore(input: &Path, out: &Path, size: PartSize) -> Result<usize> {
    let mut src = crate::wtxt::input::WtxtIn::open(input, None)?;
    let mut af = AtomicFile::create(out)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, af.file());
        std::io::copy(&mut src.text(), &mut w).map_err(|e| match e.kind() {
            std::io::ErrorKind::Other => src.blame(Error::read_failed(e)),
            _ => Error::io(out, e),
        })?;
        w.flush().map_err(|e| Error::io(out, e))?;
    }
    store(af, size)
}

/// Copies a stored snapshot (one file, or a head and its parts, plain or
/// age-armored file by file) to `dest`: parts first, each atomically and
/// only when its bytes differ, then the head; parts `dest` had beyond the
/// new count are removed. Returns the number of parts.
pub fn copy_snapshot(src: &Path, dest: &Path) -> Result<u64> {
    let (from, to) = (parts_dir(src), parts_dir(dest));
    let mut count = 0;
    if from.is_dir() {
        std::fs::create_dir_all(&to).map_err(|e| Error::io(&to, e))?;
        while from.join(part_name(count + 1)).is_file() {
            count += 1;
            let name = part_name(count);
            let (a, b) = (from.join(&name), to.join(&name));
            if std::fs::read(&b).ok() != Some(std::fs::read(&a).map_err(|e| Error::io(&a, e))?) {
                copy_file(&a, &b)?;
            }
        }
    }
    if to.is_dir() {
        remove_stale_parts(&to, count)?;
    }
    copy_file(src, dest)?;
    Ok(count)
}

fn copy_file(from: &Path, to: &Path) -> Result<()> {
    let mut f = AtomicFile::create(to)?;
    std::io::copy(&mut File::open(from).map_err(|e| Error::io(from, e))?, f.file()).map_err(|e| Error::io(to, e))?;
    f.commit()
}

/// `wtxt git export REV PATH -o OUT`: the snapshot at PATH in revision REV
/// of the repository around `dir`, head and parts read from that commit,
/// written to OUT (split by `size`): what a merge of split snapshots, which
/// Git's drivers see only file by file, starts from.
pub fn export(dir: &Path, rev: &str, path: &Path, out: &Path, size: PartSize) -> Result<usize> {
    let git = |e: git2::Error| Error::input(Default::default(), format!("git: {}", e.message()));
    let repo = git2::Repository::discover(dir).map_err(git)?;
    let (tree_id, bytes) = {
        let tree = repo.revparse_single(rev).and_then(|o| o.peel_to_tree()).map_err(git)?;
        let no = || Error::usage(format!("{rev}: no {} in that commit", path.display()));
        let entry = tree.get_path(path).map_err(|_| no())?;
        (tree.id(), repo.find_blob(entry.id()).map_err(git)?.content().to_vec())
    };
    let shown = PathBuf::from(format!("{rev}:{}", path.display()));
    let mut af = AtomicFile::create(out)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, af.file());
        let copy = |r: &mut dyn Read, w: &mut dyn Write| {
            std::io::copy(r, w).map_err(|e| match e.kind() {
                std::io::ErrorKind::Other => Error::read_failed(e).in_file(&shown),
                _ => Error::io(out, e),
            })
        };
        match split::open(Box::new(std::io::Cursor::new(bytes))).map_err(|e| e.in_file(&shown))? {
            split::Opened::Single(mut r) => copy(&mut r, &mut w)?,
            split::Opened::Split(head) => {
                let parts = crate::git::parts::TreeParts { repo, tree: tree_id, dir: parts_dir(path) };
                copy(&mut split::Joined::new(head, Box::new(parts), None), &mut w)?
            }
        };
        w.flush().map_err(|e| Error::io(out, e))?;
    }
    store(af, size)
}
