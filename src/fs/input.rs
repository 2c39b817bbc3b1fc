//! Opening inputs: regular files only, never blocking on a FIFO, links
//! refused where they must be, small files read with a bound.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, Result};

/// True when `dest` exists and is not a regular file or folder (a device,
/// FIFO or socket: written through, never replaced).
pub fn is_device(dest: &Path) -> bool {
    std::fs::metadata(dest).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Opens an input for reading, naming `path` in any error. Never blocks:
/// a FIFO that no process writes to reads as empty instead of hanging the
/// command (opened non-blocking, then switched back to blocking reads).
#[allow(unsafe_code)]
pub fn open_input_file(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    refuse_device(&f, path)?;
    // SAFETY: fcntl on a descriptor this function owns; it only changes its status flags.
    unsafe {
        use std::os::fd::AsRawFd;
        let fd = f.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(f)
}

/// Refuses a character or block device (`/dev/zero` would never end, a
/// disk is no snapshot); `/dev/null`, which Git hands a diff driver for a
/// side that does not exist, reads as empty and is taken. FIFOs and
/// sockets are streams their writer ends.
fn refuse_device(f: &File, path: &Path) -> Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = f.metadata().map_err(|e| Error::io(path, e))?;
    let t = m.file_type();
    if !(t.is_char_device() || t.is_block_device()) {
        return Ok(());
    }
    if t.is_char_device() && std::fs::metadata("/dev/null").is_ok_and(|n| n.rdev() == m.rdev()) {
        return Ok(());
    }
    Err(Error::input(Default::default(), "a device, not a file: it is never read as a snapshot").in_file(path))
}

/// Whether [`read_small_file`] follows a symbolic link at the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// A path the user named (a key file may be a link they made).
    Follow,
    /// A path a repository controls (a committed `.gitattributes`): a link
    /// there could name any file the user can read.
    Refuse,
}

/// Reads a small file whole: a regular file only (a device, FIFO, socket or
/// folder is refused, never read or waited on), at most `max` bytes, counted
/// as they are read (a device's `metadata` says 0). `Ok(None)` when nothing
/// is at `path`.
pub fn read_small_file(path: &Path, max: u64, links: Links) -> Result<Option<Vec<u8>>> {
    use std::os::unix::fs::OpenOptionsExt;
    let meta = match links {
        Links::Follow => std::fs::metadata(path),
        Links::Refuse => std::fs::symlink_metadata(path),
    };
    let meta = match meta {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let refuse = |what: &str| Err(Error::input(Default::default(), what.to_string()).in_file(path));
    if meta.file_type().is_symlink() {
        return refuse("a symbolic link: refusing to follow it (replace it with a regular file)");
    }
    if !meta.is_file() {
        return refuse("not a regular file (a device, FIFO, socket or folder): refusing to read it");
    }
    let nofollow = if links == Links::Refuse { libc::O_NOFOLLOW } else { 0 };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | nofollow)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    // What was opened, not what was looked at: the name may have changed between.
    if !f.metadata().map_err(|e| Error::io(path, e))?.is_file() {
        return refuse("not a regular file (a device, FIFO, socket or folder): refusing to read it");
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(f, max + 1), &mut bytes).map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > max {
        return refuse(&format!("larger than {max} bytes: not the small text file expected here"));
    }
    Ok(Some(bytes))
}

/// Opens a file for reading without following a symbolic link at its name
/// and without waiting on a FIFO.
pub fn open_no_follow(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
}

/// The regular file at `path`, opened without following a link at its
/// name or waiting on a FIFO, and its length; anything else (a folder, a
/// device, a FIFO, a socket) is refused.
pub fn open_regular(path: &Path) -> Result<(File, u64)> {
    let file = open_no_follow(path).map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::usage("not a regular file").in_file(path));
    }
    Ok((file, meta.len()))
}

/// A file read from a position of its own, from its start: the handle's
/// offset is left alone, so several readers of one open file (a look at
/// its first bytes, an outline, the strict read) never disturb each other.
pub(crate) struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
}

impl<'a> ReadAt<'a> {
    /// `file`, read from its first byte.
    pub(crate) fn new(file: &'a File) -> ReadAt<'a> {
        ReadAt { file, pos: 0 }
    }
}

impl std::io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = std::os::unix::fs::FileExt::read_at(self.file, buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for ReadAt<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let at = match to {
            std::io::SeekFrom::Start(n) => Some(n),
            std::io::SeekFrom::End(d) => self.file.metadata()?.len().checked_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = at.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

/// Reads until `buf` is full or the input ends; gives the bytes read.
pub(crate) fn read_full(r: &mut dyn std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// An input that can pass over bytes nobody reads without reading them: a
/// distributed load of the tree form seeks past the chunks it does not
/// keep instead of reading the whole model's text.
pub trait Skip: std::io::Read {
    /// Passes over the next `n` bytes, which hold `lines` LFs by what the
    /// caller read about them (a chunk's `ch` line), without reading them.
    /// `Ok(false)`, nothing consumed: this input cannot (the caller reads
    /// them through). Bytes passed over are not checked.
    fn skip(&mut self, n: u64, lines: u64) -> std::io::Result<bool>;

    /// Whether [`Skip::skip`] can pass over anything: a reader in front of
    /// one that cannot reads ahead in large blocks, as any reader does.
    fn passes_over(&self) -> bool;

    /// Whether the text this gives leaves out all but the `arr` line of
    /// every array a reader passes over whole (an array none of whose
    /// bytes a load of the tree form keeps): a split snapshot read for some
    /// of its arrays, whose other parts are never opened
    /// ([`crate::store::WtxtIn::open_for_arrays`]).
    fn omits_arrays(&self) -> bool {
        false
    }
}

/// How much each buffer in front of a [`Skip`] input reads ahead: what
/// is read ahead into a chunk passed over is read for nothing (a chunk's
/// text is about 1.4 MB at the default 128 rows of 4096 bf16 values),
/// while each read is a call down the layers.
pub const SKIP_READ_AHEAD: usize = 16 << 10;

impl<S: Skip + ?Sized> Skip for Box<S> {
    fn skip(&mut self, n: u64, lines: u64) -> std::io::Result<bool> {
        (**self).skip(n, lines)
    }

    fn passes_over(&self) -> bool {
        (**self).passes_over()
    }

    fn omits_arrays(&self) -> bool {
        (**self).omits_arrays()
    }
}

/// A file seeks: the buffer's bytes are passed over first, then the
/// file's offset moves. A seek past the end is not an error here; the
/// next read finds the end.
impl Skip for std::io::BufReader<File> {
    fn skip(&mut self, n: u64, _lines: u64) -> std::io::Result<bool> {
        let Ok(n) = i64::try_from(n) else { return Ok(false) };
        self.seek_relative(n)?;
        Ok(true)
    }

    fn passes_over(&self) -> bool {
        true
    }
}

/// Bytes in memory (tests, fuzzing) pass over as a file does.
impl Skip for std::io::Cursor<Vec<u8>> {
    fn skip(&mut self, n: u64, _lines: u64) -> std::io::Result<bool> {
        self.set_position(self.position().saturating_add(n));
        Ok(true)
    }

    fn passes_over(&self) -> bool {
        true
    }
}

/// An input read only in order (a pipe, a decrypting stream, a Git blob):
/// nothing is skipped.
pub struct Streamed<R>(pub R);

impl<R: std::io::Read> std::io::Read for Streamed<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: std::io::Read> Skip for Streamed<R> {
    fn skip(&mut self, _n: u64, _lines: u64) -> std::io::Result<bool> {
        Ok(false)
    }

    fn passes_over(&self) -> bool {
        false
    }
}
