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
}

impl Progress {
    /// A counter that never draws (library use, tests, pipes).
    pub fn hidden() -> Progress {
        Progress { bar: None, start: Instant::now(), shown: AtomicBool::new(true), total: AtomicU64::new(0) }
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
        Progress { bar: Some(bar), start: Instant::now(), shown: AtomicBool::new(false), total: AtomicU64::new(0) }
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
