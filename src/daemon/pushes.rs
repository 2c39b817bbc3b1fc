//! The commits a pipeline made that wait for their push, and the thread
//! that pushes them: beside writing, never after it. Each push carries
//! every commit that is ready (up to [`CARRY_MAX`] bytes of snapshots), so
//! a remote slower than training gets one push for many generations, and
//! requests that never stop never hold pushes back. What waits survives a
//! restart in the ring's `resend.queue`.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::Result;

/// Most snapshot bytes one push carries (at least one generation goes,
/// whatever its size): a remote that was away for many generations of a
/// wholly changing model gets them in pushes of a bounded size.
pub const CARRY_MAX: u64 = 2 << 30;

/// A generation just committed, for the push thread.
#[derive(Clone, Debug)]
pub struct ToPush {
    /// The generation.
    pub gen: u64,
    /// Its commit.
    pub commit: String,
    /// Over half its chunks changed (see [`crate::git::push::Push`]).
    pub wholly: bool,
    /// Its snapshot's bytes.
    pub len: u64,
}

/// A committed generation waiting for its push.
#[derive(Clone, Debug)]
struct Waiting {
    gen: u64,
    /// Its commit (`None` for a queue file that did not record it: HEAD is pushed).
    commit: Option<String>,
    /// Over half its chunks changed (see [`crate::git::push::Push`]).
    wholly: bool,
    /// Its snapshot's bytes.
    len: u64,
}

/// What one push attempt came to, for whoever tells the waiting futures.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// The generations it carried, oldest first.
    pub carried: Vec<u64>,
    /// Whether they reached the remote.
    pub pushed: bool,
    /// Why not.
    pub error: Option<String>,
    /// Every generation still waiting after it.
    pub waiting: Vec<u64>,
    /// Wall seconds it took.
    pub secs: f64,
}

#[derive(Default)]
struct State {
    waiting: Vec<Waiting>,
    next_retry: Option<Instant>,
    backoff: Duration,
    pushed_gen: Option<u64>,
    last_error: Option<String>,
    /// Attempts begun, and the number of the last one that failed.
    begun: u64,
    failed: u64,
    /// A push is running.
    busy: bool,
    stop: bool,
}

/// The queue of commits to push, shared by the snapshot thread (which adds
/// each commit) and the push thread (which pushes what is ready).
pub struct Pushes {
    remote: String,
    repo: PathBuf,
    queue_file: PathBuf,
    stopping: Arc<AtomicBool>,
    log: Option<super::log::Log>,
    state: Mutex<State>,
    changed: Condvar,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

impl Pushes {
    /// The queue for pushes of `repo` to `remote`, reloaded from the ring's
    /// `resend.queue` (a generation it names is retried at once).
    pub fn open(
        ring: &std::path::Path,
        repo: PathBuf,
        remote: String,
        stopping: Arc<AtomicBool>,
        log: Option<super::log::Log>,
    ) -> Pushes {
        let queue_file = ring.join("resend.queue");
        let text = std::fs::read_to_string(&queue_file).unwrap_or_default();
        let mut waiting = Vec::new();
        for line in text.lines() {
            let mut words = line.split(' ');
            let Some(gen) = words.next().and_then(|w| w.strip_prefix("gen=")?.parse().ok()) else { continue };
            let commit =
                words.next().and_then(|w| w.strip_prefix("commit=")).filter(|c| git2::Oid::from_str(c).is_ok());
            waiting.push(Waiting { gen, commit: commit.map(String::from), wholly: false, len: 0 });
        }
        let next_retry = (!waiting.is_empty()).then(Instant::now);
        let state = State { waiting, next_retry, backoff: FIRST_BACKOFF, ..Default::default() };
        Pushes { remote, repo, queue_file, stopping, log, state: Mutex::new(state), changed: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a generation just committed for the next push (recorded in
    /// `resend.queue` before this returns).
    pub fn add(&self, c: ToPush) -> Result<()> {
        let mut s = self.lock();
        s.waiting.push(Waiting { gen: c.gen, commit: Some(c.commit), wholly: c.wholly, len: c.len });
        // A push that failed waits for its retry; otherwise this one is due.
        if s.next_retry.is_none() {
            s.next_retry = Some(Instant::now());
        }
        self.save(&s)?;
        self.changed.notify_all();
        Ok(())
    }

    fn save(&self, s: &State) -> Result<()> {
        let text: String = s
            .waiting
            .iter()
            .map(|w| match &w.commit {
                Some(c) => format!("gen={} commit={c}\n", w.gen),
                None => format!("gen={}\n", w.gen),
            })
            .collect();
        crate::fs::write_file(&self.queue_file, text.as_bytes(), 0o644)
    }

    /// The generations waiting, the newest pushed, and the last push error.
    pub fn status(&self) -> (Vec<u64>, Option<u64>, Option<String>) {
        let s = self.lock();
        (s.waiting.iter().map(|w| w.gen).collect(), s.pushed_gen, s.last_error.clone())
    }

    /// Pushes until [`Pushes::stop`]: whenever commits wait and no retry is
    /// scheduled for later, every ready one up to [`CARRY_MAX`] bytes in
    /// one push; `told` hears of each attempt. Run on a thread of its own.
    pub fn run(&self, mut told: impl FnMut(&Attempt)) {
        loop {
            let (job, began) = {
                let mut s = self.lock();
                loop {
                    let due = s.next_retry.filter(|_| !s.waiting.is_empty());
                    match due {
                        Some(t) if t <= Instant::now() => break,
                        _ if s.stop => return,
                        Some(t) => {
                            let left = t.saturating_duration_since(Instant::now());
                            s = self.changed.wait_timeout(s, left).unwrap_or_else(|p| p.into_inner()).0;
                        }
                        None => s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner()),
                    }
                }
                let mut bytes = 0u64;
                let take = s
                    .waiting
                    .iter()
                    .take_while(|w| {
                        bytes = bytes.saturating_add(w.len);
                        bytes <= CARRY_MAX
                    })
                    .count()
                    .max(1);
                s.begun += 1;
                s.busy = true;
                (s.waiting[..take].to_vec(), s.begun)
            };
            let attempt = self.push(&job);
            let mut s = self.lock();
            s.busy = false;
            match &attempt.error {
                None => {
                    s.waiting.drain(..job.len());
                    s.pushed_gen = job.last().map(|w| w.gen).max(s.pushed_gen);
                    s.next_retry = (!s.waiting.is_empty()).then(Instant::now);
                    s.backoff = FIRST_BACKOFF;
                }
                Some(e) => {
                    if let Some(log) = &self.log {
                        log(e);
                    }
                    s.last_error = Some(e.clone());
                    s.failed = began;
                    s.next_retry = Some(Instant::now() + s.backoff);
                    s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
                }
            }
            let _ = self.save(&s);
            let attempt = Attempt { waiting: s.waiting.iter().map(|w| w.gen).collect(), ..attempt };
            self.changed.notify_all();
            drop(s);
            told(&attempt);
        }
    }

    /// One push of `job`'s newest commit (which carries the older ones); a
    /// remote whose branch moved on past it (another writer pushed a
    /// commit made on top of ours) gets HEAD, which holds every commit of
    /// ours.
    fn push(&self, job: &[Waiting]) -> Attempt {
        let started = Instant::now();
        let newest = job.last().and_then(|w| w.commit.as_deref());
        // A job with a generation of unknown commit pushes HEAD.
        let commit = if job.iter().all(|w| w.commit.is_some()) { newest } else { None };
        let wholly = job.iter().all(|w| w.wholly);
        let what = crate::git::push::Push { commit, changed_wholly: wholly };
        let pushed = match crate::git::push::push(&self.repo, &self.remote, what, &self.stopping) {
            Ok(crate::git::push::Outcome::Behind(_)) if commit.is_some() => {
                let head = crate::git::push::Push { commit: None, changed_wholly: wholly };
                crate::git::push::push(&self.repo, &self.remote, head, &self.stopping).and_then(|o| o.done())
            }
            other => other.and_then(|o| o.done()),
        };
        let error =
            pushed.err().map(|e| crate::git::push::redact(&format!("push to {}: {}", self.remote, e.message())));
        Attempt {
            carried: job.iter().map(|w| w.gen).collect(),
            pushed: error.is_none(),
            error,
            waiting: Vec::new(),
            secs: started.elapsed().as_secs_f64(),
        }
    }

    /// Waits until everything queued is pushed, or an attempt begun after
    /// this call failed (what waits then stays queued, retried later with
    /// backoff); a retry scheduled for later is tried now.
    pub fn flush(&self) {
        let mut s = self.lock();
        let after = s.begun;
        loop {
            if s.waiting.is_empty() || s.stop || s.failed > after {
                return;
            }
            if !s.busy && s.next_retry.is_none_or(|t| t > Instant::now()) {
                s.next_retry = Some(Instant::now());
                self.changed.notify_all();
            }
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Stops the push thread once it is done with the push it runs.
    pub fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }
}
