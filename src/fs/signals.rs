//! Process-wide signal handling: SIGINT/SIGTERM remove unfinished outputs,
//! and a SIGBUS from a shrunk mapped input becomes one line and exit 2.

use std::path::Path;

use super::out::{live, live_dirs, LIVE, LIVE_DIRS};

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
        // Several threads reading the shrunk map fault at once: the first
        // speaks and cleans up, the others wait for its exit.
        static FIRST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if FIRST.swap(true, std::sync::atomic::Ordering::SeqCst) {
            loop {
                libc::pause();
            }
        }
        let say = |b: &[u8]| {
            libc::write(2, b.as_ptr().cast(), b.len());
        };
        say(b"wtxt: ");
        say(&path[..n]);
        say(b": changed while it was read (it shrank under its memory map): nothing was written\n");
        // unlink and rmdir on NUL-terminated paths on the stack.
        each_when_free(&LIVE, |c| {
            libc::unlink(c);
        });
        each_when_free(&LIVE_DIRS, |c| {
            libc::rmdir(c);
        });
        libc::_exit(2);
    }
}

/// Calls `f` on every path of `list` as a C string, once no thread holds
/// it: a thread listing or removing a file holds a list only briefly, and
/// never while it reads a map, so the handler waits for it (up to 2 s)
/// rather than leave temporary files behind.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn each_when_free(list: &std::sync::Mutex<Vec<std::path::PathBuf>>, f: impl Fn(*const libc::c_char)) {
    let tick = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
    for _ in 0..2000 {
        if let Ok(paths) = list.try_lock() {
            for p in paths.iter() {
                with_c_path(p, &f);
            }
            return;
        }
        // SAFETY: nanosleep with a valid timespec on the stack; async-signal-safe.
        unsafe { libc::nanosleep(&tick, std::ptr::null_mut()) };
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
