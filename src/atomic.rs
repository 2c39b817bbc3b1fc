//! Output files that appear whole or not at all: written to a temporary file
//! in the destination's folder, fsynced, then renamed over the final name. A
//! crash, a full disk or an error never leaves a partial file under that name.

use std::fs::File;
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

use crate::error::{Error, Result};

/// A file being written; dropped without `commit`, it is removed.
pub struct AtomicFile {
    tmp: NamedTempFile,
    dest: PathBuf,
    mode: u32,
}

impl AtomicFile {
    /// Starts writing `dest` (mode 0644 once committed).
    pub fn create(dest: &Path) -> Result<AtomicFile> {
        AtomicFile::create_with_mode(dest, 0o644)
    }

    /// Starts writing `dest` with the given Unix permissions (0600 for secrets).
    pub fn create_with_mode(dest: &Path, mode: u32) -> Result<AtomicFile> {
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = dest.file_name().ok_or_else(|| Error::usage(format!("{}: not a file name", dest.display())))?;
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.to_string_lossy()))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::io(dest, e))?;
        Ok(AtomicFile { tmp, dest: dest.to_path_buf(), mode })
    }

    /// The file to write to.
    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    /// Flushes to disk and renames into place.
    pub fn commit(self) -> Result<()> {
        let dest = self.dest;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(self.tmp.path(), std::fs::Permissions::from_mode(self.mode))
                .map_err(|e| Error::io(&dest, e))?;
        }
        self.tmp.as_file().sync_all().map_err(|e| Error::io(&dest, e))?;
        self.tmp.persist(&dest).map_err(|e| Error::io(&dest, e.error))?;
        if let Some(dir) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            // Make the rename itself durable; a failure here is not worth failing the write.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

/// Writes `bytes` to `dest` atomically.
pub fn write_file(dest: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    let mut f = AtomicFile::create_with_mode(dest, mode)?;
    f.file().write_all(bytes).map_err(|e| Error::io(dest, e))?;
    f.commit()
}

/// A file writer that starts the kernel's writeback of each 32 MiB it writes,
/// so the final fsync of a large output finds most of it on disk already
/// instead of flushing everything at the end.
pub struct Writeback<'a> {
    file: &'a mut File,
    pos: u64,
    kicked: u64,
}

impl<'a> Writeback<'a> {
    const STEP: u64 = 32 << 20;

    /// Wraps a file positioned at its start.
    pub fn new(file: &'a mut File) -> Writeback<'a> {
        Writeback { file, pos: 0, kicked: 0 }
    }

    fn kick(&mut self) {
        if self.pos >= self.kicked + Self::STEP {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                // SAFETY: a plain syscall on an open descriptor we own; it only
                // schedules writeback (SYNC_FILE_RANGE_WRITE) and never blocks on I/O completion.
                unsafe {
                    libc::sync_file_range(
                        self.file.as_raw_fd(),
                        self.kicked as libc::off64_t,
                        (self.pos - self.kicked) as libc::off64_t,
                        libc::SYNC_FILE_RANGE_WRITE,
                    );
                }
            }
            self.kicked = self.pos;
        }
    }
}

impl std::io::Write for Writeback<'_> {
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

impl std::io::Seek for Writeback<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        self.pos = self.file.seek(to)?;
        // Writeback resumes from wherever sequential writing continues.
        self.kicked = self.kicked.min(self.pos);
        Ok(self.pos)
    }
}
