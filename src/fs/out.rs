//! Outputs that appear whole or not at all: written to a temporary file in
//! the destination's folder, fsynced, then renamed over the final name (or,
//! for a device or FIFO, staged unnamed and copied on commit).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tempfile::NamedTempFile;

use super::walk::is_real_dir;
use crate::error::{Error, Result};

/// Temporary files being written, removed by the signal thread.
pub(super) static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

pub(super) fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

enum Stage {
    /// Renamed over a regular file (or a new name) on commit.
    Rename(NamedTempFile),
    /// Copied into a device, FIFO or socket on commit.
    Copy(File),
    /// Written, on disk and closed, waiting under its temporary name.
    Parked(tempfile::TempPath),
}

/// A file being written; dropped without `commit`, it is removed.
pub struct AtomicFile {
    /// `None` only once committed.
    stage: Option<Stage>,
    dest: PathBuf,
    mode: u32,
}

/// An I/O error without tempfile's added context, which names the
/// temporary file instead of the path the user gave. The folder is asked
/// again, so a missing or unwritable folder reports the system's own words.
fn plain(e: std::io::Error, dir: &Path) -> std::io::Error {
    if let Err(d) = std::fs::metadata(dir) {
        return d;
    }
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => std::io::Error::from_raw_os_error(libc::EACCES),
        k => std::io::Error::new(k, k.to_string()),
    }
}

impl AtomicFile {
    /// Starts writing `dest` (mode 0644 once committed).
    pub fn create(dest: &Path) -> Result<AtomicFile> {
        AtomicFile::create_with_mode(dest, 0o644)
    }

    /// Starts writing `dest` with the given Unix permissions (0600 for secrets).
    pub fn create_with_mode(dest: &Path, mode: u32) -> Result<AtomicFile> {
        if let Ok(m) = std::fs::metadata(dest) {
            if m.is_dir() {
                return Err(Error::usage(format!("{}: is a folder, expected a file name", dest.display())));
            }
            if !m.is_file() {
                let f = tempfile::tempfile().map_err(|e| Error::io(dest, plain(e, &std::env::temp_dir())))?;
                return Ok(AtomicFile { stage: Some(Stage::Copy(f)), dest: dest.to_path_buf(), mode });
            }
        }
        AtomicFile::create_replacing(dest, mode)
    }

    /// Starts writing `dest`, a file the command names itself (a part
    /// inside a parts folder): whatever is at that name (a symbolic link, a
    /// device, a FIFO) is replaced by the rename on commit, never written
    /// through or read.
    pub fn create_replacing(dest: &Path, mode: u32) -> Result<AtomicFile> {
        if std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_dir()) {
            return Err(Error::usage(format!("{}: is a folder, expected a file name", dest.display())));
        }
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = dest.file_name().ok_or_else(|| Error::usage(format!("{}: not a file name", dest.display())))?;
        // Created under the lock the signal thread drains with: a signal
        // never finds the file made but not yet listed.
        let mut listed = live();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.to_string_lossy()))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::io(dest, plain(e, dir)))?;
        listed.push(tmp.path().to_path_buf());
        drop(listed);
        Ok(AtomicFile { stage: Some(Stage::Rename(tmp)), dest: dest.to_path_buf(), mode })
    }

    /// A file written in full elsewhere (at `waiting`, in `dest`'s file
    /// system: another process wrote it), to be put at `dest` by
    /// [`AtomicFile::commit`] like a parked one; dropped uncommitted, it is
    /// removed.
    pub fn adopt(dest: &Path, waiting: PathBuf) -> Result<AtomicFile> {
        let tmp = tempfile::TempPath::try_from_path(&waiting).map_err(|e| Error::io(&waiting, e))?;
        live().push(tmp.to_path_buf());
        Ok(AtomicFile { stage: Some(Stage::Parked(tmp)), dest: dest.to_path_buf(), mode: 0o644 })
    }

    /// The file to write to.
    pub fn file(&mut self) -> &mut File {
        match self.stage.as_mut().expect("not committed") {
            Stage::Rename(t) => t.as_file_mut(),
            Stage::Copy(f) => f,
            Stage::Parked(_) => panic!("a parked file is not written to"),
        }
    }

    /// The file being written, shared.
    pub fn file_ref(&self) -> &File {
        match self.stage.as_ref().expect("not committed") {
            Stage::Rename(t) => t.as_file(),
            Stage::Copy(f) => f,
            Stage::Parked(_) => panic!("a parked file is not written to"),
        }
    }

    /// Closes the file, which waits under its temporary name for
    /// [`AtomicFile::commit`] (which puts it on disk then). Many outputs
    /// that must appear together (a split snapshot's parts) can wait so
    /// without holding a descriptor each. A device destination stays open.
    pub fn park(&mut self) {
        match self.stage.take() {
            Some(Stage::Rename(tmp)) => self.stage = Some(Stage::Parked(tmp.into_temp_path())),
            other => self.stage = other,
        }
    }

    /// Where a parked file waits (to write more into it).
    pub fn parked_path(&self) -> Option<&Path> {
        match &self.stage {
            Some(Stage::Parked(t)) => Some(t),
            _ => None,
        }
    }

    /// True when the destination is a device, FIFO or socket (written
    /// through on commit, never replaced).
    pub fn is_device(&self) -> bool {
        matches!(self.stage, Some(Stage::Copy(_)))
    }

    /// The destination.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Flushes to disk and renames into place (or copies into a device).
    pub fn commit(mut self) -> Result<()> {
        let dest = std::mem::take(&mut self.dest);
        match self.stage.take().expect("committed once") {
            Stage::Copy(mut f) => {
                f.seek(SeekFrom::Start(0)).map_err(|e| Error::io(&dest, e))?;
                let mut out = std::fs::OpenOptions::new().write(true).open(&dest).map_err(|e| Error::io(&dest, e))?;
                std::io::copy(&mut f, &mut out).map_err(|e| Error::io(&dest, e))?;
                Ok(())
            }
            Stage::Rename(tmp) => {
                let tmp_path = tmp.path().to_path_buf();
                let r = seal(tmp.as_file(), tmp.path(), &dest, self.mode)
                    .and_then(|()| tmp.persist(&dest).map(drop).map_err(|e| Error::io(&dest, e.error)));
                live().retain(|p| *p != tmp_path);
                r.map(|()| sync_parent(&dest))
            }
            Stage::Parked(tmp) => {
                let tmp_path = tmp.to_path_buf();
                let r = File::open(&tmp)
                    .map_err(|e| Error::io(&dest, e))
                    .and_then(|f| seal(&f, &tmp, &dest, self.mode))
                    .and_then(|()| tmp.persist(&dest).map_err(|e| Error::io(&dest, e.error)));
                live().retain(|p| *p != tmp_path);
                r.map(|()| sync_parent(&dest))
            }
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        let p = match &self.stage {
            Some(Stage::Rename(t)) => t.path().to_path_buf(),
            Some(Stage::Parked(t)) => t.to_path_buf(),
            _ => return,
        };
        live().retain(|x| *x != p);
    }
}

/// Gives the temporary file its final mode and puts it on disk.
fn seal(file: &File, tmp: &Path, dest: &Path, mode: u32) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(mode)).map_err(|e| Error::io(dest, e))?;
    }
    file.sync_all().map_err(|e| Error::io(dest, e))
}

/// Makes a rename into `dest`'s folder durable; a failure here is not
/// worth failing the write.
fn sync_parent(dest: &Path) {
    if let Some(dir) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Folders made for outputs being written (a split snapshot's parts folder),
/// removed with the temporary files when a command fails or is stopped.
pub(super) static LIVE_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

pub(super) fn live_dirs() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE_DIRS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A folder an output needs: made if missing, and then removed again
/// (when empty) unless the output is committed ([`OutputDir::keep`]).
pub struct OutputDir {
    made: Option<PathBuf>,
}

impl OutputDir {
    /// Makes `dir` (one level: its parent must exist) unless it is there.
    /// A symbolic link at `dir` is refused, never written through: the
    /// outputs would land, and stale ones be deleted, wherever it points.
    pub fn create(dir: &Path) -> Result<OutputDir> {
        let mut listed = live_dirs();
        match std::fs::create_dir(dir) {
            Ok(()) => {
                listed.push(dir.to_path_buf());
                Ok(OutputDir { made: Some(dir.to_path_buf()) })
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && is_real_dir(dir) => Ok(OutputDir { made: None }),
            Err(_) if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) => Err(Error::input(
                Default::default(),
                "a symbolic link: refusing to write parts through it (remove it, or write the snapshot elsewhere)",
            )
            .in_file(dir)),
            Err(e) => Err(Error::io(dir, e)),
        }
    }

    /// The output is in place: the folder stays.
    pub fn keep(mut self) {
        if let Some(d) = self.made.take() {
            live_dirs().retain(|x| *x != d);
        }
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if let Some(d) = self.made.take() {
            live_dirs().retain(|x| *x != d);
            let _ = std::fs::remove_dir(&d);
        }
    }
}

/// A folder written whole or not at all: filled under a temporary name
/// beside `dest` (which must not exist), renamed to `dest` by
/// [`NewFolder::commit`]; dropped uncommitted, it is removed with what it
/// holds.
pub struct NewFolder {
    tmp: Option<tempfile::TempDir>,
    dest: PathBuf,
}

impl NewFolder {
    /// Starts the folder `dest`.
    pub fn create(dest: &Path) -> Result<NewFolder> {
        if std::fs::symlink_metadata(dest).is_ok() {
            return Err(Error::usage(format!("{}: already exists (give a new folder)", dest.display())));
        }
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = dest.file_name().ok_or_else(|| Error::usage(format!("{}: not a folder name", dest.display())))?;
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.to_string_lossy()))
            .suffix(".tmp")
            .tempdir_in(parent)
            .map_err(|e| Error::io(dest, plain(e, parent)))?;
        live_dirs().push(tmp.path().to_path_buf());
        Ok(NewFolder { tmp: Some(tmp), dest: dest.to_path_buf() })
    }

    /// Where to write the folder's files meanwhile.
    pub fn path(&self) -> &Path {
        self.tmp.as_ref().expect("until committed").path()
    }

    /// Puts the folder at its name (its files on disk first).
    pub fn commit(mut self) -> Result<()> {
        let tmp = self.tmp.take().expect("committed once");
        let at = tmp.keep();
        live_dirs().retain(|x| *x != at);
        sync_tree(&at);
        std::fs::rename(&at, &self.dest).map_err(|e| {
            let _ = std::fs::remove_dir_all(&at);
            Error::io(&self.dest, e)
        })?;
        sync_parent(&self.dest);
        Ok(())
    }
}

impl Drop for NewFolder {
    fn drop(&mut self) {
        if let Some(t) = &self.tmp {
            let p = t.path().to_path_buf();
            live_dirs().retain(|x| *x != p);
        }
    }
}

/// Flushes every file below `dir` (and the folders) to disk.
fn sync_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                sync_tree(&p);
            } else if let Ok(f) = File::open(&p) {
                let _ = f.sync_all();
            }
        }
    }
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Writes `bytes` to `dest` atomically.
pub fn write_file(dest: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    let mut f = AtomicFile::create_with_mode(dest, mode)?;
    f.file().write_all(bytes).map_err(|e| Error::io(dest, e))?;
    f.commit()
}

/// Swaps two existing entries of one file system in one step
/// (`renameat2(RENAME_EXCHANGE)`): whoever looks sees the old folder or the
/// new one, never neither. Where the file system cannot exchange, `b` is
/// moved aside to `aside` first, then `a` to `b` (`aside` must not exist).
#[allow(unsafe_code)]
pub fn exchange(a: &Path, b: &Path, aside: &Path) -> Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::usage("a path holds a NUL byte"));
    let (ca, cb) = (c(a)?, c(b)?);
    // SAFETY: two NUL-terminated paths that live across the call; the call
    // only renames.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), libc::RENAME_EXCHANGE) };
    if r == 0 {
        sync_parent(b);
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
        return Err(Error::io(b, e));
    }
    std::fs::rename(b, aside).map_err(|e| Error::io(b, e))?;
    std::fs::rename(a, b).map_err(|e| Error::io(b, e))?;
    sync_parent(b);
    Ok(())
}
