//! Writing snapshots that may be split: [`PartedOut`] for the writer, which
//! knows its cut points in advance, [`SnapshotOut`] for texts copied in
//! order; copying a stored snapshot as it is ([`copy_snapshot`]).
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::files::parts_dir;
use crate::error::{Error, Result};
use crate::format::split::{self, part_ix, part_name, PartLine, PartSink, PartSize};
use crate::fs::{AtomicFile, OutputDir, Writeback};

/// A snapshot's text on its way to `out`: one file while it fits the part
/// size; once it outgrows it, cut into parts as it streams, on a thread of
/// its own that also hashes them. A split snapshot so costs one pass, like
/// a single file. Nothing appears under a final name before
/// [`SnapshotOut::finish`]: the parts wait under temporary names, then
/// they are renamed into place and the head last; parts that already hold
/// the same bytes are left untouched (Git does not read them again).
pub struct SnapshotOut {
    out: PathBuf,
    limit: Option<u64>,
    /// The single form: the whole text until it passes `limit`.
    single: Option<(AtomicFile, std::io::BufWriter<Writeback<File>>)>,
    written: u64,
    split: Option<Splitting>,
}

struct Splitting {
    pipe: crate::pipe::PipeWriter,
    cutter: std::thread::JoinHandle<Result<(Vec<u8>, PartDir)>>,
    made: OutputDir,
}

impl SnapshotOut {
    /// Starts writing the snapshot at `out`, split by `size`.
    pub fn create(out: &Path, size: PartSize) -> Result<SnapshotOut> {
        let mut af = AtomicFile::create(out)?;
        // A device or FIFO takes the single form: it has no folder of parts.
        let limit = if af.is_device() { None } else { size.limit() };
        let file = af.file().try_clone().map_err(|e| Error::io(out, e))?;
        let w = std::io::BufWriter::with_capacity(1 << 20, Writeback::new(file));
        Ok(SnapshotOut { out: out.to_path_buf(), limit, single: Some((af, w)), written: 0, split: None })
    }

    /// The text outgrew the part size: from here on it is cut into parts,
    /// starting with what the single file already holds.
    fn start_split(&mut self, limit: u64) -> Result<()> {
        let out = self.out.clone();
        let dir = parts_dir(&out);
        let made = OutputDir::create(&dir)?;
        let mut sink = PartDir { dir, old: old_parts(&out), parked: Vec::new() };
        let (mut pipe, text) = crate::pipe::pipe();
        let cutter = std::thread::Builder::new()
            .name("wtxt-split".into())
            .spawn(move || {
                let head = split::split(text, limit, &mut sink)?;
                Ok((head, sink))
            })
            .map_err(|e| Error::io_in("starting the part writer", e))?;
        let (af, mut w) = self.single.take().expect("single until split");
        w.flush().map_err(|e| Error::io(&out, e))?;
        drop(w);
        let mut start = af.file_ref().try_clone().map_err(|e| Error::io(&out, e))?;
        start.seek(SeekFrom::Start(0)).map_err(|e| Error::io(&out, e))?;
        let copied = std::io::copy(&mut (&mut start).take(self.written), &mut pipe);
        drop(af); // the single form is not wanted: its temporary file goes
        self.split = Some(Splitting { pipe, cutter, made });
        match copied {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(self.cutter_failure()),
            copied => copied.map(drop).map_err(|e| Error::io(&out, e)),
        }
    }

    /// Puts the snapshot in place. Returns the number of parts (0: one file).
    pub fn finish(mut self) -> Result<usize> {
        let out = self.out.clone();
        let dir = parts_dir(&out);
        let Some(Splitting { pipe, cutter, made }) = self.split.take() else {
            let Some((af, mut w)) = self.single.take() else { return Err(stopped_earlier()) };
            w.flush().map_err(|e| Error::io(&out, e))?;
            drop(w);
            af.commit()?;
            if crate::fs::is_real_dir(&dir) {
                remove_stale_parts(&dir, 0)?;
                let _ = std::fs::remove_dir(&dir);
            }
            return Ok(0);
        };
        pipe.close();
        let (head, sink) = cutter
            .join()
            .map_err(|_| Error::io_in("the part writer", std::io::Error::other("stopped unexpectedly")))?
            .map_err(|e| e.in_files(&out, &dir))?;
        let count = head.split(|&b| b == b'\n').filter(|l| l.starts_with(b"part ")).count();
        install(sink.parked, AtomicFile::create(&out)?, &head, made, count)
    }

    /// Why the part writer stopped reading before the text ended.
    fn cutter_failure(&mut self) -> Error {
        let Some(Splitting { cutter, .. }) = self.split.take() else { unreachable!("splitting") };
        let dir = parts_dir(&self.out);
        match cutter.join() {
            Ok(Err(e)) => e.in_files(&self.out, &dir),
            _ => Error::io_in("the part writer", std::io::Error::other("stopped unexpectedly")),
        }
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        if self.split.is_none() {
            if let Some(limit) = self.limit.filter(|&l| self.written + b.len() as u64 > l) {
                self.start_split(limit)?;
            }
        }
        match (&mut self.split, &mut self.single) {
            // The part writer stopped at a problem: its error, not the pipe's.
            (Some(s), _) if !s.pipe.is_open() => return Err(self.cutter_failure()),
            (Some(s), _) => {
                if s.pipe.write_all(b).is_err() {
                    return Err(self.cutter_failure());
                }
            }
            (None, Some((_, w))) => w.write_all(b).map_err(|e| Error::io(&self.out, e))?,
            (None, None) => return Err(stopped_earlier()),
        }
        self.written += b.len() as u64;
        Ok(())
    }
}

/// A write to a [`SnapshotOut`] whose part writer failed already.
fn stopped_earlier() -> Error {
    Error::io_in("the part writer", std::io::Error::other("stopped at an earlier error"))
}

/// A split snapshot written in place by [`crate::format::write::WritePlan::write`],
/// whose cut points are known before it starts (they follow from sizes
/// alone, [`split::place_parts`]): each write, the writer's patches too,
/// lands straight in the part file that holds that offset of the single
/// text (an `arr` line: in the head, its `begin` line being in the part),
/// and the head's lines stay in memory. One pass over the weights; the
/// parts are hashed at the end, in parallel.
pub struct PartedOut {
    out: PathBuf,
    /// The head, created first: its folder is checked as for a single file.
    head_file: AtomicFile,
    dir: PathBuf,
    spans: Vec<split::PartSpan>,
    /// Each part's file, parked (closed) until `finish`.
    files: Vec<AtomicFile>,
    /// Bytes before the part's share of the text (its opening lines).
    opening: Vec<u64>,
    /// Each part's `arr` lines, for the head, as the writer gives them.
    arrs: Vec<Vec<Vec<u8>>>,
    /// How much shorter the part is than its range of the single text
    /// before each of its `arr` slots (`begin` lines are shorter).
    shrink: Vec<Vec<u64>>,
    /// The part file written last, kept open.
    open: Option<(usize, File)>,
    head: Vec<u8>,
    tail: Vec<u8>,
    pos: u64,
    /// How far the writer got into each part's range, and the tail's
    /// planned size: checked before anything is put in place.
    filled: Vec<u64>,
    tail_len: u64,
    /// Last, so that it is dropped after the parts' temporary files.
    made: Option<OutputDir>,
}

impl PartedOut {
    /// Starts the parts `spans` of the snapshot at `out`.
    pub fn create(out: &Path, spans: Vec<split::PartSpan>, tail_len: u64) -> Result<PartedOut> {
        use std::os::unix::fs::FileExt;
        let head_file = AtomicFile::create(out)?;
        let dir = parts_dir(out);
        let made = Some(OutputDir::create(&dir)?);
        let mut files = Vec::with_capacity(spans.len());
        let mut opening = Vec::with_capacity(spans.len());
        let mut shrink = Vec::with_capacity(spans.len());
        for s in &spans {
            let path = dir.join(part_name(s.ix));
            let mut af = AtomicFile::create_replacing(&path, 0o644)?;
            let first = s.opening();
            let f = af.file();
            f.write_all(&first).map_err(|e| Error::io(&path, e))?;
            let mut less = vec![0u64];
            for a in &s.arrs {
                let at = first.len() as u64 + a.at - s.start - less.last().expect("one");
                f.write_all_at(format!("{}\n", a.begin).as_bytes(), at).map_err(|e| Error::io(&path, e))?;
                less.push(less.last().expect("one") + a.len - a.begin.len() as u64 - 1);
            }
            let end = first.len() as u64 + s.end - s.start - less.last().expect("one");
            f.write_all_at(split::PartSpan::closing(), end).map_err(|e| Error::io(&path, e))?;
            af.park();
            files.push(af);
            opening.push(first.len() as u64);
            shrink.push(less);
        }
        let spans_len = spans.len();
        let arrs = spans.iter().map(|s| vec![Vec::new(); s.arrs.len()]).collect();
        Ok(PartedOut {
            out: out.to_path_buf(),
            head_file,
            dir,
            made,
            spans,
            files,
            opening,
            arrs,
            shrink,
            open: None,
            head: Vec::new(),
            tail: Vec::new(),
            pos: 0,
            filled: vec![0; spans_len],
            tail_len,
        })
    }

    fn put(&mut self, mut b: &[u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let (body_start, body_end) = (self.spans[0].start, self.spans[self.spans.len() - 1].end);
        while !b.is_empty() {
            let n = if self.pos < body_start || self.pos >= body_end {
                let (buf, at, room) = if self.pos < body_start {
                    (&mut self.head, self.pos, body_start - self.pos)
                } else {
                    (&mut self.tail, self.pos - body_end, u64::MAX)
                };
                let n = (b.len() as u64).min(room) as usize;
                let at = at as usize;
                if buf.len() < at + n {
                    buf.resize(at + n, 0);
                }
                buf[at..at + n].copy_from_slice(&b[..n]);
                n
            } else {
                let k = self.spans.partition_point(|s| s.end <= self.pos);
                let span = &self.spans[k];
                let j = span.arrs.partition_point(|a| a.at <= self.pos);
                if let Some(a) = span.arrs.get(j.wrapping_sub(1)).filter(|a| self.pos < a.at + a.len) {
                    // An `arr` line: it goes to the head.
                    let n = (b.len() as u64).min(a.at + a.len - self.pos) as usize;
                    let (buf, at) = (&mut self.arrs[k][j - 1], (self.pos - a.at) as usize);
                    if buf.len() < at + n {
                        buf.resize(at + n, 0);
                    }
                    buf[at..at + n].copy_from_slice(&b[..n]);
                    self.filled[k] = self.filled[k].max(self.pos + n as u64 - span.start);
                    self.pos += n as u64;
                    b = &b[n..];
                    continue;
                }
                let until = span.arrs.get(j).map_or(span.end, |a| a.at);
                let n = (b.len() as u64).min(until - self.pos) as usize;
                let local = self.opening[k] + self.pos - span.start - self.shrink[k][j];
                let path = || self.files[k].parked_path().expect("parked");
                if self.open.as_ref().is_none_or(|(i, _)| *i != k) {
                    // Moving on from a part the body filled: its writeback
                    // starts now, so the fsync at the end finds it on disk.
                    if let Some((_, done)) = self.open.take().filter(|(i, _)| *i < k) {
                        crate::fs::start_writeback(&done, 0, 0);
                    }
                    let f = std::fs::OpenOptions::new().write(true).open(path()).map_err(|e| Error::io(path(), e))?;
                    self.open = Some((k, f));
                }
                let (_, f) = self.open.as_ref().expect("just opened");
                f.write_all_at(&b[..n], local).map_err(|e| Error::io(path(), e))?;
                self.filled[k] = self.filled[k].max(self.pos + n as u64 - span.start);
                n
            };
            self.pos += n as u64;
            b = &b[n..];
        }
        Ok(())
    }

    /// Hashes the parts, then puts them in place (a part whose file already
    /// holds the same bytes is left alone) and the head last. Returns the
    /// number of parts.
    pub fn finish(mut self) -> Result<usize> {
        self.open = None;
        // The writer's text must fill exactly the places planned for it.
        let whole = self.spans.iter().zip(&self.filled).all(|(s, &f)| f == s.end - s.start);
        let arrs_whole = self
            .spans
            .iter()
            .zip(&self.arrs)
            .all(|(s, got)| s.arrs.iter().zip(got).all(|(a, l)| l.len() as u64 == a.len && l.ends_with(b"\n")));
        if !whole
            || !arrs_whole
            || self.head.len() as u64 != self.spans[0].start
            || self.tail.len() as u64 != self.tail_len
        {
            return Err(Error::input(
                Default::default(),
                "the text written does not match the parts planned for it (a bug: please report it)",
            )
            .in_file(&self.out));
        }
        let paths: Vec<PathBuf> = self.files.iter().map(|f| f.parked_path().expect("parked").to_path_buf()).collect();
        let lines = hash_parts(&paths)?;
        let old = old_parts(&self.out);
        let mut changed = Vec::with_capacity(lines.len());
        for (part, af) in lines.iter().zip(self.files.drain(..)) {
            if !unchanged(&old, part, &self.dir, af.parked_path().expect("parked")) {
                changed.push(af);
            }
        }
        for l in self.arrs.iter_mut().flatten() {
            l.pop(); // its LF: the head writes its lines
        }
        let head = split::head_bytes(&self.head, &lines, &self.arrs, &self.tail);
        let PartedOut { head_file, made, .. } = self;
        install(changed, head_file, &head, made.expect("kept once"), lines.len())
    }
}

/// Each part file's `part` line (size, lines, frame hash), read back on
/// every core: only the frames are read (the base64 lines are bound by
/// their chunks' `ch` lines, section 18 of docs/FORMAT.md).
fn hash_parts(paths: &[PathBuf]) -> Result<Vec<PartLine>> {
    let lines = crate::crypto::digest::files_parallel(paths, |path| {
        let f = File::open(path).map_err(|e| Error::io(path, e))?;
        let (frame, lines, bytes) = split::FrameHash::of(f).map_err(|e| Error::io(path, e))?;
        Ok(PartLine { ix: 0, bytes, lines, hash: split::PartHash::Frame(frame) })
    })?;
    Ok(lines.into_iter().enumerate().map(|(i, l)| PartLine { ix: i as u64 + 1, ..l }).collect())
}

impl Write for PartedOut {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.put(b).map_err(std::io::Error::other)?;
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for PartedOut {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = match to {
            SeekFrom::Start(p) => p,
            _ => return Err(std::io::Error::other("a split snapshot is written by absolute offsets")),
        };
        Ok(self.pos)
    }
}

impl Seek for SnapshotOut {
    /// Only the single form seeks (it is never split when it does): a
    /// writer that patches its text writes splits through [`PartedOut`].
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        match (&mut self.single, self.limit) {
            (Some((_, w)), None) => w.seek(to),
            _ => Err(std::io::Error::other("a snapshot being split is written in order")),
        }
    }
}

impl Drop for SnapshotOut {
    /// Unfinished: the part writer stops and its parts' temporary files go.
    fn drop(&mut self) {
        if let Some(Splitting { pipe, cutter, made }) = self.split.take() {
            drop(pipe);
            let _ = cutter.join(); // its parked parts go with it, then the folder
            drop(made);
        }
    }
}

impl Write for SnapshotOut {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.put(b).map_err(std::io::Error::other)?;
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
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
    /// Parts written, waiting to be renamed into place.
    parked: Vec<AtomicFile>,
}

/// The part table of the head at `out`, if it is one.
fn old_parts(out: &Path) -> Vec<PartLine> {
    // A regular file only: a device or FIFO at the name has no parts.
    let Ok(f) = crate::fs::open_input_file(out) else { return Vec::new() };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
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
        let mut af = AtomicFile::create_replacing(&path, 0o644)?;
        let f = af.file().try_clone().map_err(|e| Error::io(&path, e))?;
        Ok(PartFile { af, w: std::io::BufWriter::with_capacity(1 << 20, f) })
    }

    fn close(&mut self, mut p: PartFile, part: &PartLine) -> Result<()> {
        let path = self.dir.join(part_name(part.ix));
        let file = p.w.into_inner().map_err(|e| Error::io(&path, e.into_error()))?;
        p.af.park();
        if unchanged(&self.old, part, &self.dir, p.af.parked_path().expect("parked")) {
            return Ok(()); // dropping the AtomicFile removes the copy
        }
        // Kept: its writeback starts now, so the fsync at the end finds it on disk.
        crate::fs::start_writeback(&file, 0, 0);
        self.parked.push(p.af);
        Ok(())
    }
}

/// True when the part file in `dir` already holds the new part waiting at
/// `new`: the head it belongs to lists the part with the same size and
/// hash, and the file holds those very bytes. The new copy is then not
/// needed, and the old file stays untouched (Git does not read it again).
fn unchanged(old: &[PartLine], part: &PartLine, dir: &Path, new: &Path) -> bool {
    let listed = old.get(part.ix as usize - 1).is_some_and(|o| (o.bytes, o.hash) == (part.bytes, part.hash));
    listed && same_file(&dir.join(part_name(part.ix)), new)
}

/// Puts a written split snapshot in place: its changed parts (waiting
/// under temporary names), then the head, which holds `count` parts; then
/// parts numbered past them go, and the parts folder is kept.
fn install(
    changed: Vec<AtomicFile>,
    mut head_file: AtomicFile,
    head: &[u8],
    made: OutputDir,
    count: usize,
) -> Result<usize> {
    for part in changed {
        part.commit()?;
    }
    let out = head_file.dest().to_path_buf();
    head_file.file().write_all(head).map_err(|e| Error::io(&out, e))?;
    head_file.commit()?;
    made.keep();
    remove_stale_parts(&parts_dir(&out), count as u64)?;
    Ok(count)
}

/// Puts a split snapshot whose parts were written elsewhere in place (the
/// ranks of a distributed write cut them into `staged`, each with its
/// `part` line; they are moved, not copied), as [`PartedOut`] does its own:
/// parts already holding the same bytes stay untouched, the head goes last.
pub fn install_staged(out: &Path, staged: Vec<(PathBuf, PartLine)>, head: &[u8]) -> Result<usize> {
    let head_file = AtomicFile::create(out)?;
    let dir = parts_dir(out);
    let made = OutputDir::create(&dir)?;
    let old = old_parts(out);
    let count = staged.len();
    let mut changed = Vec::with_capacity(count);
    for (path, part) in staged {
        let af = AtomicFile::adopt(&dir.join(part_name(part.ix)), path)?;
        if !unchanged(&old, &part, &dir, af.parked_path().expect("adopted")) {
            changed.push(af);
        }
    }
    install(changed, head_file, head, made, count)
}

/// Puts a single-file snapshot written elsewhere (at `text`, in `out`'s
/// file system) in place, as [`SnapshotOut::finish`] does its own: parts
/// of an earlier split form go.
pub fn install_text(out: &Path, text: PathBuf) -> Result<()> {
    AtomicFile::adopt(out, text)?.commit()?;
    let dir = parts_dir(out);
    if crate::fs::is_real_dir(&dir) {
        remove_stale_parts(&dir, 0)?;
        let _ = std::fs::remove_dir(&dir);
    }
    Ok(())
}

/// True when the file at `path` holds exactly the bytes of the new part
/// waiting at `new` (compared, not hashed: both are usually in the page
/// cache, and a comparison costs a fraction of SHA-256).
fn same_file(path: &Path, new: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // A link at the part's name is not the part: it is replaced, never read.
    let (Ok(a), Ok(b)) = (std::fs::symlink_metadata(path), std::fs::metadata(new)) else { return false };
    if !a.is_file() || a.len() != b.len() {
        return false;
    }
    if (a.dev(), a.ino()) == (b.dev(), b.ino()) {
        return true;
    }
    let (Ok(mut x), Ok(mut y)) = (crate::fs::open_no_follow(path), File::open(new)) else { return false };
    let (mut bx, mut by) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = match x.read(&mut bx) {
            Ok(0) => return y.read(&mut by).is_ok_and(|m| m == 0),
            Ok(n) => n,
            Err(_) => return false,
        };
        if y.read_exact(&mut by[..n]).is_err() || bx[..n] != by[..n] {
            return false;
        }
    }
}

/// Puts a stored snapshot (one file, or a head and its parts, plain or
/// age-armored file by file) at `dest` as well: parts first, each
/// atomically and only when its bytes differ, then the head; parts `dest`
/// had beyond the new count are removed. Each file is a hard link of the
/// stored one where the file system allows (stored snapshots are never
/// written in place, and Git replaces a work-tree file rather than writing
/// into it), else a copy. Returns the number of parts.
pub fn copy_snapshot(src: &Path, dest: &Path) -> Result<u64> {
    let (from, to) = (parts_dir(src), parts_dir(dest));
    let mut count = 0;
    if crate::fs::is_real_dir(&from) {
        OutputDir::create(&to)?.keep();
        while std::fs::symlink_metadata(from.join(part_name(count + 1))).is_ok_and(|m| m.is_file()) {
            count += 1;
            let name = part_name(count);
            let (a, b) = (from.join(&name), to.join(&name));
            if !same_file(&b, &a) {
                link_or_copy(&a, &b)?;
            }
        }
    }
    if crate::fs::is_real_dir(&to) {
        remove_stale_parts(&to, count)?;
    }
    link_or_copy(src, dest)?;
    Ok(count)
}

/// Puts a hard link of `from` at `to` in one rename, replacing whatever is
/// there (never written through); a copy where no link can be made.
fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    let dir = to.parent().unwrap_or(Path::new("."));
    let tmp =
        dir.join(format!(".{}.wtxt-link-{}", to.file_name().unwrap_or_default().to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    match std::fs::hard_link(from, &tmp) {
        Ok(()) => std::fs::rename(&tmp, to).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(to, e)
        }),
        Err(_) => copy_file(from, to),
    }
}

/// Copies `from` to `to`, replacing whatever is at `to` (never written through).
fn copy_file(from: &Path, to: &Path) -> Result<()> {
    let mut f = AtomicFile::create_replacing(to, 0o644)?;
    std::io::copy(&mut File::open(from).map_err(|e| Error::io(from, e))?, f.file()).map_err(|e| Error::io(to, e))?;
    f.commit()
}
