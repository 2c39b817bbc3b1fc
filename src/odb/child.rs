//! The Git children that bring objects from a remote (`git fetch` of a
//! partial clone's blobs, `git lfs fetch` of parts' LFS objects), run
//! under one overall deadline: a server that answers and then trickles a
//! byte at a time keeps every transfer timeout from firing, and would
//! otherwise hold a reader for ever. A child runs in a process group of
//! its own, so that the transport it started (`ssh`, a remote helper,
//! `git-lfs` under `git`) is stopped with it.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long one fetch may run unless `wtxt.fetchSeconds` says otherwise
/// (`0`: no limit).
pub const DEFAULT_FETCH_SECONDS: u64 = 900;

/// The most of a child's standard error kept for its message.
const STDERR_KEPT: usize = 64 << 10;

/// The deadline of a fetch into `repo`: `wtxt.fetchSeconds`, else
/// [`DEFAULT_FETCH_SECONDS`]; `None` when it is `0`.
pub fn fetch_limit(repo: &git2::Repository) -> Option<Duration> {
    let cfg = repo.config().and_then(|mut c| c.snapshot()).ok();
    let seconds =
        cfg.and_then(|c| c.get_i64("wtxt.fetchSeconds").ok()).map_or(DEFAULT_FETCH_SECONDS, |v| v.max(0) as u64);
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

/// Refuses a fetch of `count` objects from `remote` into `repo` when its
/// `wtxt.fetch` is false: a reader told to stay offline says what it
/// lacks instead.
pub fn may_fetch(repo: &git2::Repository, count: usize, remote: &str) -> Result<()> {
    let cfg = repo.config().and_then(|mut c| c.snapshot()).ok();
    if cfg.and_then(|c| c.get_bool("wtxt.fetch").ok()) == Some(false) {
        return Err(Error::input(
            Default::default(),
            format!(
                "{count} object(s) to read are not here, and wtxt.fetch is false: nothing is fetched from {remote} \
                 (`git config wtxt.fetch true` lets the read fetch them)"
            ),
        ));
    }
    Ok(())
}

/// What a child left: its exit status and the start of its standard error.
pub struct Finished {
    pub status: ExitStatus,
    pub stderr: String,
}

/// Runs `cmd` (its standard output discarded) with `input` on its standard
/// input, and waits for it at most `limit`; past it the child's process
/// group is killed and the error says `what` was stopped and why.
pub fn run(mut cmd: Command, input: &[u8], limit: Option<Duration>, what: &str) -> Result<Finished> {
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::input(Default::default(), format!("{what}: {e}")))?;
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = err.read(&mut buf) {
            if n == 0 {
                break;
            }
            let room = STDERR_KEPT.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        String::from_utf8_lossy(&kept).into_owned()
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) if limit.is_some_and(|l| started.elapsed() > l) => {
                kill_group(&mut child);
                let secs = limit.map_or(0, |l| l.as_secs());
                break Err(Error::input(
                    Default::default(),
                    format!("{what}: still running after {secs} s (wtxt.fetchSeconds): stopped"),
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break Err(Error::input(Default::default(), format!("{what}: {e}"))),
        }
    };
    let wrote = writer.join().unwrap_or(Ok(()));
    let stderr = reader.join().unwrap_or_default();
    let status = status?;
    if status.success() && wrote.is_err() {
        return Err(Error::input(Default::default(), format!("{what}: it did not read its input")));
    }
    Ok(Finished { status, stderr })
}

/// Stops `child` and every process of the group it leads (it was started
/// with `process_group(0)`), and reaps it.
#[allow(unsafe_code)]
pub fn kill_group(child: &mut Child) {
    // SAFETY: signals the process group the caller started with this child
    // as its leader (the group's id is the child's pid); nothing else is touched.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_past_its_deadline_is_stopped_with_its_group() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30 & echo started >&2; wait"]);
        let t = Instant::now();
        let e = run(cmd, b"", Some(Duration::from_millis(300)), "sh").err().expect("stopped");
        assert!(t.elapsed() < Duration::from_secs(10), "the grandchild held the pipe");
        assert!(e.to_string().contains("still running after 0 s (wtxt.fetchSeconds): stopped"), "{e}");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "cat >/dev/null; echo said >&2; exit 3"]);
        let done = run(cmd, b"input", None, "sh").unwrap();
        assert_eq!((done.status.code(), done.stderr.as_str()), (Some(3), "said\n"));
    }
}
