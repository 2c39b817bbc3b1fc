//! Files in and out. Output files appear whole or not at all: written to a temporary file
//! in the destination's folder, fsynced, then renamed over the final name. A
//! crash, a full disk or an error never leaves a partial file under that name.
//!
//! A destination that exists and is not a regular file (`/dev/null`,
//! `/dev/stdout`, a FIFO) is never replaced: the output is staged in an
//! unnamed temporary file and copied to it on commit. Temporary files are
//! removed when the command fails, and on SIGINT/SIGTERM once
//! [`remove_temp_files_on_signals`] is installed; only a `kill -9` (or a
//! power cut) leaves a `.NAME.XXXXXX.tmp` beside the output.
//!
//! Large outputs start their writeback as they go ([`Writeback`]), or skip
//! the page cache altogether when nothing reads them back soon
//! ([`DirectWriter`]).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tempfile::NamedTempFile;

use crate::error::{Error, Result};

/// Temporary files being written, removed by the signal thread.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
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
static LIVE_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live_dirs() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
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

/// Most files a folder may hold for [`list_files`]: bounds the heap
/// whatever the folder holds.
pub const MAX_FILES: usize = 1 << 20;

/// The regular files below `root` (relative `/`-separated paths, sorted
/// component by component), but the ignored paths (a path is ignored when
/// it is one of `ignore` or lies below one). A link or special file is
/// refused, never followed or read.
pub fn list_files(root: &Path, ignore: &[String]) -> Result<Vec<String>> {
    let mut files = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let path = if dir.is_empty() { root.to_path_buf() } else { root.join(&dir) };
        let entries = std::fs::read_dir(&path).map_err(|e| Error::io(&path, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&path, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                return Err(Error::input(Default::default(), "a file name that is not UTF-8").in_file(entry.path()));
            };
            let rel = if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") };
            if is_ignored(&rel, ignore) {
                continue;
            }
            let ty = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
            if ty.is_dir() {
                stack.push(rel);
            } else if ty.is_file() {
                if files.len() == MAX_FILES {
                    return Err(Error::input(Default::default(), format!("more than {MAX_FILES} files")).in_file(root));
                }
                files.push(rel);
            } else {
                let what = if ty.is_symlink() {
                    "a symbolic link (wtxt does not follow links)"
                } else {
                    "not a regular file or folder"
                };
                return Err(Error::input(Default::default(), what).in_file(entry.path()));
            }
        }
    }
    files.sort_by(|a, b| a.split('/').cmp(b.split('/')));
    Ok(files)
}

/// True when the relative path `rel` is one of `ignore` or lies below one
/// (path components compared, as Python's `PurePath.is_relative_to`).
pub fn is_ignored(rel: &str, ignore: &[String]) -> bool {
    ignore.iter().any(|i| {
        let i = i.trim_end_matches('/');
        rel == i || rel.strip_prefix(i).is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Refuses `rel` below `root` when any component of it that exists is a
/// symbolic link (every folder on the way, and the file itself), or a
/// folder on the way is not a folder: a path inside a Git work tree is the
/// repository's to choose, and a committed link would send a write (or a
/// read) outside it. `root` itself is the caller's.
pub fn no_links_below(root: &Path, rel: &Path) -> Result<()> {
    let mut at = root.to_path_buf();
    let mut components = rel.components().peekable();
    while let Some(c) = components.next() {
        at.push(c);
        let Ok(m) = std::fs::symlink_metadata(&at) else { return Ok(()) };
        if m.file_type().is_symlink() {
            return Err(Error::input(Default::default(), "a symbolic link (wtxt does not follow links)").in_file(&at));
        }
        if components.peek().is_some() && !m.is_dir() {
            return Err(Error::input(Default::default(), "expected a folder").in_file(&at));
        }
    }
    Ok(())
}

/// True when `dir` is a folder itself, not a link to one.
pub fn is_real_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
}

/// Removes the temporary files of unfinished outputs when SIGINT or SIGTERM
/// arrives, then exits with 128 + the signal's number, as a shell would
/// report it. Call once, before any other thread starts: the signals are
/// blocked in every thread and taken by one waiting thread.
#[allow(unsafe_code)]
pub fn remove_temp_files_on_signals() {
    #[cfg(unix)]
    // SAFETY: plain libc calls on a local, initialized signal set; the mask is
    // set before other threads exist, so they all inherit it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
        let _ = std::thread::Builder::new().name("wtxt-signals".into()).spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is an initialized signal set owned by this closure.
            if libc::sigwait(&set, &mut sig) == 0 {
                // Both locks are held until the exit: no thread can list a
                // new temporary file or folder after they were removed.
                let mut files = live();
                let mut dirs = live_dirs();
                for p in files.drain(..) {
                    let _ = std::fs::remove_file(p);
                }
                for d in dirs.drain(..) {
                    let _ = std::fs::remove_dir(d); // only when empty
                }
                std::process::exit(128 + sig);
            }
        });
    }
}

/// Turns a SIGBUS from an input that shrank while mapped (a shard that
/// `save_pretrained` rewrote under `wtxt snapshot DIR`) into one line
/// naming the file, the unfinished outputs' temporary files removed, and
/// exit 2, instead of a silent death by signal. A SIGBUS anywhere else
/// (not in a mapped file) goes to the handler that was there before. Call
/// once, at start. Process-wide: for the binary and the Python module.
#[allow(unsafe_code)]
pub fn exit_cleanly_when_a_mapped_input_shrinks() {
    #[cfg(target_os = "linux")]
    // SAFETY: sigaction with a zeroed, then filled struct; the handler only
    // calls async-signal-safe functions (open, read, write, unlink, rmdir,
    // _exit, sigaction) on stack buffers, and takes the temporary-file
    // lists only if no thread holds them.
    unsafe {
        use std::sync::atomic::{AtomicBool, Ordering};
        static INSTALLED: AtomicBool = AtomicBool::new(false);
        if INSTALLED.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        let old = std::ptr::addr_of_mut!(OLD_SIGBUS);
        libc::sigaction(libc::SIGBUS, &act, (*old).as_mut_ptr());
    }
}

#[cfg(target_os = "linux")]
static mut OLD_SIGBUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::zeroed();

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
extern "C" fn on_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: `info` is the kernel's siginfo for this SIGBUS; everything
    // below is async-signal-safe and works on stack buffers.
    unsafe {
        let addr = (*info).si_addr() as usize;
        let mut path = [0u8; 4096];
        let Some(n) = mapped_file_at(addr, &mut path) else {
            // Not a file's map: the handler before ours (or the default,
            // which ends the process) takes it when the access faults again.
            let old = std::ptr::addr_of!(OLD_SIGBUS);
            libc::sigaction(libc::SIGBUS, (*old).as_ptr(), std::ptr::null_mut());
            return;
        };
        let say = |b: &[u8]| {
            libc::write(2, b.as_ptr().cast(), b.len());
        };
        say(b"wtxt: ");
        say(&path[..n]);
        say(b": changed while it was read (it shrank under its memory map): nothing was written\n");
        if let Ok(files) = LIVE.try_lock() {
            for p in files.iter() {
                with_c_path(p, |c| {
                    libc::unlink(c);
                });
            }
        }
        if let Ok(dirs) = LIVE_DIRS.try_lock() {
            for d in dirs.iter() {
                with_c_path(d, |c| {
                    libc::rmdir(c);
                });
            }
        }
        libc::_exit(2);
    }
}

/// Calls `f` with `p` as a NUL-terminated C string on the stack (no
/// allocation: for a signal handler); nothing when it does not fit.
#[cfg(target_os = "linux")]
fn with_c_path(p: &Path, f: impl FnOnce(*const libc::c_char)) {
    let b = p.as_os_str().as_encoded_bytes();
    let mut buf = [0u8; 4097];
    if b.len() < buf.len() && !b.contains(&0) {
        buf[..b.len()].copy_from_slice(b);
        f(buf.as_ptr().cast());
    }
}

/// The path of the file mapped at `addr`, from `/proc/self/maps`, into
/// `out`; its length, or `None` when `addr` is in no file's map. Reads
/// with `open`/`read` into stack buffers only (for a signal handler).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn mapped_file_at(addr: usize, out: &mut [u8; 4096]) -> Option<usize> {
    // SAFETY: open/read/close on a NUL-terminated literal and stack buffers.
    let fd = unsafe { libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 8192];
    let mut line = [0u8; 4096 + 256];
    let (mut len, mut found) = (0usize, None);
    'read: loop {
        // SAFETY: reads into the stack buffer, within its length.
        let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if got <= 0 {
            break;
        }
        for &b in &buf[..got as usize] {
            if b != b'\n' {
                if len < line.len() {
                    line[len] = b;
                }
                len += 1;
                continue;
            }
            let l = &line[..len.min(line.len())];
            len = 0;
            if let Some(n) = maps_line_path(l, addr, out) {
                found = Some(n);
                break 'read;
            }
        }
    }
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(fd) };
    found
}

/// One `/proc/self/maps` line (`start-end perms offset dev inode path`):
/// when `addr` is inside its range and it maps a file, the path into `out`.
#[cfg(target_os = "linux")]
fn maps_line_path(l: &[u8], addr: usize, out: &mut [u8; 4096]) -> Option<usize> {
    let hex = |s: &[u8]| -> Option<usize> {
        let mut v = 0usize;
        for &c in s {
            v = v.checked_mul(16)?.checked_add((c as char).to_digit(16)? as usize)?;
        }
        Some(v)
    };
    let mut fields = l.splitn(6, |&b| b == b' ');
    let range = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let (start, end) = (hex(&range[..dash])?, hex(&range[dash + 1..])?);
    if addr < start || addr >= end {
        return None;
    }
    let inode = fields.nth(3)?;
    let path = fields.next()?.trim_ascii_start();
    if inode == b"0" || !path.starts_with(b"/") || path.len() > out.len() {
        return None;
    }
    out[..path.len()].copy_from_slice(path);
    Some(path.len())
}

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

/// Writes `bytes` to `dest` atomically.
pub fn write_file(dest: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    let mut f = AtomicFile::create_with_mode(dest, mode)?;
    f.file().write_all(bytes).map_err(|e| Error::io(dest, e))?;
    f.commit()
}

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
