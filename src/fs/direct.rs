//! Large outputs: writeback started as they go ([`Writeback`]), or written
//! past the page cache with `O_DIRECT` on a disk thread ([`DirectWriter`]).

use std::io::{Seek, SeekFrom};

/// Starts the kernel's writeback of `len` bytes of `file` from `from` (0:
/// to its end) without waiting for it, so that a later fsync finds them on
/// disk already instead of flushing everything at the end.
#[allow(unsafe_code)]
pub fn start_writeback(file: &impl std::os::fd::AsFd, from: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on an open descriptor the caller owns; it only
        // schedules writeback (SYNC_FILE_RANGE_WRITE) and never blocks on I/O completion.
        unsafe {
            libc::sync_file_range(
                file.as_fd().as_raw_fd(),
                from as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
}

/// A file writer that starts the kernel's writeback of each 32 MiB it writes,
/// so the final fsync of a large output finds most of it on disk already
/// instead of flushing everything at the end.
pub struct Writeback<F> {
    file: F,
    pos: u64,
    kicked: u64,
}

impl<F: std::os::fd::AsFd> Writeback<F> {
    const STEP: u64 = 32 << 20;

    /// Wraps a file (`File` or `&mut File`) positioned at its start.
    pub fn new(file: F) -> Writeback<F> {
        Writeback { file, pos: 0, kicked: 0 }
    }

    /// The file written.
    pub fn get_ref(&self) -> &F {
        &self.file
    }

    fn kick(&mut self) {
        if self.pos >= self.kicked + Self::STEP {
            start_writeback(&self.file, self.kicked, self.pos - self.kicked);
            self.kicked = self.pos;
        }
    }
}

impl<F: std::os::fd::AsFd + std::io::Write> std::io::Write for Writeback<F> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.pos += n as u64;
        self.kick();
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl<F: std::os::fd::AsFd + std::io::Seek> std::io::Seek for Writeback<F> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.pos = self.file.seek(to)?;
        // Writeback resumes from wherever sequential writing continues.
        self.kicked = self.kicked.min(self.pos);
        Ok(self.pos)
    }
}

/// Sets or clears `O_DIRECT` on an open file; false where the file system
/// or the platform refuses it.
#[allow(unsafe_code)]
fn set_direct(file: &impl std::os::fd::AsFd, on: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_fd().as_raw_fd();
        // SAFETY: fcntl on a descriptor the caller holds open; F_GETFL and
        // F_SETFL only read and change its status flags.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 {
                return false;
            }
            let flags = if on { flags | libc::O_DIRECT } else { flags & !libc::O_DIRECT };
            libc::fcntl(fd, libc::F_SETFL, flags) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, on);
        false
    }
}

/// A sequential writer of a large file that is synced once written and
/// not read back soon (a pack): whole pieces go to the disk without the
/// page cache (`O_DIRECT`), from a thread of their own, so writing costs
/// neither a copy into the page cache (nor, in a virtual machine, the
/// host's faults on pages it has not lent yet) nor the writer's time
/// waiting for the disk. Where the file system refuses direct I/O, pieces
/// go through the page cache as [`Writeback`] writes them; the bytes are
/// the same.
pub struct DirectWriter<F: std::os::fd::AsFd + std::io::Write + Seek + Send + 'static> {
    piece: Piece,
    to_disk: Option<crossbeam_channel::Sender<Piece>>,
    spare: crossbeam_channel::Receiver<Piece>,
    disk: Option<std::thread::JoinHandle<std::io::Result<F>>>,
}

/// Room for [`Piece::LEN`] bytes at an address direct I/O accepts;
/// `buf[at..at + len]` is held.
struct Piece {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl Piece {
    const LEN: usize = 4 << 20;
    /// Pieces the disk's thread may hold besides the one being filled:
    /// the disk's pace varies piece to piece (with one, the writer
    /// waited on it: a 141 MB model's commit took 0.29-0.30 s; with
    /// three, 0.27).
    const HANDED: usize = 3;
    /// Addresses, offsets and lengths of direct writes are multiples of
    /// this (the largest logical block size disks have).
    const ALIGN: usize = 4096;

    fn new() -> Piece {
        let buf = vec![0u8; Piece::LEN + Piece::ALIGN];
        let at = buf.as_ptr().align_offset(Piece::ALIGN);
        Piece { buf, at, len: 0 }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.at..self.at + self.len]
    }
}

/// The disk's side of a [`DirectWriter`].
struct Disk<F: std::os::fd::AsFd + std::io::Write + Seek> {
    file: Writeback<F>,
    direct: bool,
}

impl<F: std::os::fd::AsFd + std::io::Write + Seek> Disk<F> {
    /// Writes `piece`; where a direct write fails as unsupported (or the
    /// piece is a last one, not aligned), writes it through the page cache
    /// instead, and all that follows.
    fn write(&mut self, piece: &Piece) -> std::io::Result<()> {
        use std::io::Write;
        let start = self.file.pos;
        if self.direct && piece.len.is_multiple_of(Piece::ALIGN) {
            match self.file.write_all(piece.bytes()) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(e),
            }
        }
        self.buffered(start)?;
        self.file.write_all(piece.bytes())
    }

    /// Turns direct I/O off, the file positioned at `at` (the start of a
    /// piece a refused direct write may have written in part).
    fn buffered(&mut self, at: u64) -> std::io::Result<()> {
        if self.direct {
            self.direct = false;
            if !set_direct(self.file.get_ref(), false) {
                return Err(std::io::Error::other("cannot turn direct I/O off"));
            }
            self.file.seek(SeekFrom::Start(at))?;
        }
        Ok(())
    }
}

impl<F: std::os::fd::AsFd + std::io::Write + Seek + Send + 'static> DirectWriter<F> {
    /// Wraps a file positioned at its start; fails only when no thread
    /// can be started.
    pub fn new(file: F) -> std::io::Result<DirectWriter<F>> {
        let direct = set_direct(&file, true);
        let mut disk = Disk { file: Writeback::new(file), direct };
        let (to_disk, pieces) = crossbeam_channel::bounded::<Piece>(Piece::HANDED);
        let (back, spare) = crossbeam_channel::bounded(Piece::HANDED);
        for _ in 0..Piece::HANDED {
            back.send(Piece::new()).expect("room for each");
        }
        let handle = std::thread::Builder::new().name("wtxt-direct-write".into()).spawn(move || {
            for mut piece in pieces {
                disk.write(&piece)?;
                piece.len = 0;
                let _ = back.send(piece);
            }
            disk.buffered(disk.file.pos)?;
            Ok(disk.file.file)
        })?;
        Ok(DirectWriter { piece: Piece::new(), to_disk: Some(to_disk), spare, disk: Some(handle) })
    }

    /// Hands the full piece to the disk's thread and takes an empty one.
    fn hand_over(&mut self) -> std::io::Result<()> {
        let handed = match self.spare.recv() {
            Ok(empty) => {
                let full = std::mem::replace(&mut self.piece, empty);
                self.to_disk.as_ref().is_some_and(|t| t.send(full).is_ok())
            }
            Err(_) => false,
        };
        if handed {
            Ok(())
        } else {
            // The disk's thread stopped at an error: that error.
            self.join().map(|_| ())
        }
    }

    fn join(&mut self) -> std::io::Result<F> {
        self.to_disk = None;
        match self.disk.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => Err(std::io::Error::other("the writer already stopped")),
        }
    }

    /// Writes what is held, turns direct I/O off, and gives the file back
    /// positioned at its end (to be synced, or read and patched).
    pub fn into_inner(mut self) -> std::io::Result<F> {
        if self.piece.len > 0 {
            self.hand_over()?;
        }
        self.join()
    }
}

impl<F: std::os::fd::AsFd + std::io::Write + Seek + Send + 'static> std::io::Write for DirectWriter<F> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let p = &mut self.piece;
        let n = bytes.len().min(Piece::LEN - p.len);
        let from = p.at + p.len;
        p.buf[from..from + n].copy_from_slice(&bytes[..n]);
        p.len += n;
        if p.len == Piece::LEN {
            self.hand_over()?;
        }
        Ok(n)
    }

    /// Whole pieces only: a shorter one would not be aligned.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<F: std::os::fd::AsFd + std::io::Write + Seek + Send + 'static> Drop for DirectWriter<F> {
    /// A writer dropped unfinished stops its thread before the file goes.
    fn drop(&mut self) {
        self.to_disk = None;
        if let Some(h) = self.disk.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek, SeekFrom, Write};

    use super::{DirectWriter, Piece};
    use crate::testing::noise;

    /// Writes `bytes` through a [`DirectWriter`] in uneven pieces, then a
    /// tail through the file it gives back, and reads the file.
    fn written(dir: &std::path::Path, bytes: &[u8]) -> Vec<u8> {
        let file = tempfile::tempfile_in(dir).expect("a temporary file");
        let mut w = DirectWriter::new(file).expect("a thread");
        let mut rest = bytes;
        for step in [1, 4095, 12_345, 3 << 20].iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (a, b) = rest.split_at((*step).min(rest.len()));
            w.write_all(a).expect("written");
            rest = b;
        }
        let mut file = w.into_inner().expect("written");
        file.write_all(b"tail").expect("written after");
        file.seek(SeekFrom::Start(0)).expect("seek");
        let mut back = Vec::new();
        file.read_to_end(&mut back).expect("read");
        back
    }

    #[test]
    fn a_direct_writer_writes_every_byte_in_order_whatever_the_file_system() {
        let sizes = [0, 1, 4095, 4096, Piece::LEN - 1, Piece::LEN, Piece::LEN + 1, 3 * Piece::LEN + 12_345];
        let here = tempfile::tempdir().expect("a folder");
        // tmpfs refuses direct I/O on older kernels: the page cache then.
        let dirs = [here.path(), std::path::Path::new("/dev/shm")];
        for dir in dirs.iter().filter(|d| d.is_dir()) {
            for (i, &n) in sizes.iter().enumerate() {
                let bytes = noise(n, i as u64);
                let back = written(dir, &bytes);
                assert_eq!(back.len(), n + 4, "{} bytes in {}", n, dir.display());
                assert!(back[..n] == bytes[..] && &back[n..] == b"tail", "{} bytes in {}", n, dir.display());
            }
        }
    }

    #[test]
    fn a_direct_write_the_file_system_refuses_is_written_through_the_page_cache() {
        let dir = tempfile::tempdir().expect("a folder");
        let file = tempfile::tempfile_in(dir.path()).expect("a temporary file");
        let direct = super::set_direct(&file, true);
        let mut disk = super::Disk { file: super::Writeback::new(file), direct };
        let mut piece = Piece::new();
        let bytes = noise(2 * Piece::ALIGN, 5);
        piece.buf[piece.at..piece.at + bytes.len()].copy_from_slice(&bytes);
        piece.len = Piece::ALIGN;
        disk.write(&piece).expect("an aligned piece");
        // An address direct I/O refuses (EINVAL) where it is on.
        piece.at += 1;
        piece.buf[piece.at..piece.at + Piece::ALIGN].copy_from_slice(&bytes[Piece::ALIGN..]);
        disk.write(&piece).expect("written through the page cache");
        assert!(!disk.direct, "direct I/O off once refused");
        let mut file = disk.file.file;
        file.seek(SeekFrom::Start(0)).expect("seek");
        let mut back = Vec::new();
        file.read_to_end(&mut back).expect("read");
        assert!(back == bytes, "every byte, in order");
    }

    #[test]
    fn a_direct_writer_reports_the_error_its_disk_thread_met() {
        let tmp = tempfile::NamedTempFile::new().expect("a temporary file");
        let read_only = std::fs::File::open(tmp.path()).expect("opened");
        let mut w = DirectWriter::new(read_only).expect("a thread");
        let bytes = noise(3 * Piece::LEN, 1);
        let wrote = w.write_all(&bytes);
        let finished = w.into_inner();
        assert!(wrote.is_err() || finished.is_err(), "a write into a file opened to read");
    }
}
