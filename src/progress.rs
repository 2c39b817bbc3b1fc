//! A progress bar for long work: drawn on stderr only when it is a terminal,
//! and only once the work has run for a second, so short commands and pipes
//! stay quiet.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A thread-safe progress counter that may show a bar.
pub struct Progress {
    bar: Option<ProgressBar>,
    start: Instant,
    shown: AtomicBool,
    total: AtomicU64,
    /// Work still reading past this instant fails, with this reason.
    deadline: Option<(Instant, String)>,
}

impl Progress {
    /// A counter that never draws (library use, tests, pipes).
    pub fn hidden() -> Progress {
        Progress {
            bar: None,
            start: Instant::now(),
            shown: AtomicBool::new(true),
            total: AtomicU64::new(0),
            deadline: None,
        }
    }

    /// A counter that draws `label` on stderr after one second if stderr is a terminal.
    pub fn for_terminal(label: &str) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_message(label.to_string());
        Progress {
            bar: Some(bar),
            start: Instant::now(),
            shown: AtomicBool::new(false),
            total: AtomicU64::new(0),
            deadline: None,
        }
    }

    /// The same counter with a deadline: every read counted on it after
    /// `at` fails with `why`, so a bound on time (the guard's
    /// `wtxt.guardSeconds`) holds inside one long verification too.
    pub fn until(mut self, at: Instant, why: impl Into<String>) -> Progress {
        self.deadline = Some((at, why.into()));
        self
    }

    /// Why the work must stop now, if its deadline has passed.
    pub fn expired(&self) -> Option<&str> {
        self.deadline.as_ref().filter(|(at, _)| Instant::now() > *at).map(|(_, why)| why.as_str())
    }

    /// [`Progress::expired`] as the error that stops a walk deep inside
    /// some work (a history searched for a path's last version).
    pub fn in_time(&self) -> crate::error::Result<()> {
        match self.expired() {
            Some(why) => Err(crate::error::Error::check(Default::default(), why.to_string())),
            None => Ok(()),
        }
    }

    /// Sets how many units the work has.
    pub fn set_total(&self, total: u64) {
        self.total.store(total, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.set_length(total);
        }
    }

    /// Records `n` more units done.
    pub fn inc(&self, n: u64) {
        let Some(b) = &self.bar else { return };
        b.inc(n);
        if !self.shown.load(Ordering::Relaxed) && self.start.elapsed() > Duration::from_secs(1) {
            self.shown.store(true, Ordering::Relaxed);
            b.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// Starts the count again for the next piece of work, labelled `label`.
    pub fn restart(&self, label: &str) {
        if let Some(b) = &self.bar {
            b.set_position(0);
            b.set_message(label.to_string());
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// A reader that counts what passes through it on a [`Progress`].
pub struct Counted<'a, R> {
    /// What is read.
    pub inner: R,
    /// Told of every byte.
    pub progress: &'a Progress,
}

impl<R: std::io::Read> std::io::Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(why) = self.progress.expired() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why.to_string()));
        }
        let n = self.inner.read(buf)?;
        self.progress.inc(n as u64);
        Ok(n)
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_read_past_the_deadline_fails_with_its_reason() {
        let data = [7u8; 64];
        let ahead = Progress::hidden().until(Instant::now() + Duration::from_secs(3600), "late");
        let mut buf = Vec::new();
        Counted { inner: &data[..], progress: &ahead }.read_to_end(&mut buf).unwrap();
        assert_eq!(buf.len(), 64);
        let past = Progress::hidden().until(Instant::now() - Duration::from_millis(1), "still checking (limit)");
        let e = Counted { inner: &data[..], progress: &past }.read_to_end(&mut buf).unwrap_err();
        assert_eq!(e.to_string(), "still checking (limit)");
        assert_eq!(past.expired(), Some("still checking (limit)"));
        assert_eq!(Progress::hidden().expired(), None);
    }
}
