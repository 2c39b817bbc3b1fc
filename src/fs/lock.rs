//! Advisory locks between processes (`flock`).

use std::path::Path;

use crate::error::{Error, Result};

/// An exclusive lock on a file, held until dropped (`flock`: between
/// processes and between handles of one process alike).
pub struct FileLock(#[allow(dead_code)] std::fs::File);

impl FileLock {
    /// Takes the lock on `path` (created if missing), waiting for it when
    /// `wait`, else failing at once with `None` when another holds it.
    #[allow(unsafe_code)]
    pub fn take(path: &Path, wait: bool) -> Result<Option<FileLock>> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        // A FIFO, device or link planted at the lock's path is refused, never
        // opened (a FIFO would hang the opener); the open is non-blocking
        // too, for one that appears in between, and checked after.
        let not_a_file = || Error::input(Default::default(), "a lock file must be a regular file").in_file(path);
        if std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_file()) {
            return Err(not_a_file());
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        if !f.metadata().map_err(|e| Error::io(path, e))?.is_file() {
            return Err(not_a_file());
        }
        let op = if wait { libc::LOCK_EX } else { libc::LOCK_EX | libc::LOCK_NB };
        loop {
            // SAFETY: flock on a descriptor this function owns; it only takes an advisory lock.
            if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
                return Ok(Some(FileLock(f)));
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => return Ok(None),
                _ => return Err(Error::io(path, e)),
            }
        }
    }
}
