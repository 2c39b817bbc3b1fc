//! The hot-path API: `publish` a generation (one RCU store) and
//! `request_snapshot` (one WAL line and a hand-off). Neither waits on
//! snapshot I/O. How requests queue is the caller's choice ([`Queue`]):
//! each request pins the generation it names and every one is written, or
//! the snapshot thread pins the newest generation when it gets to a
//! request, so requests made while it is busy coalesce into one and a
//! counter says how many were folded.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender, TrySendError};
use serde::Serialize;

use crate::daemon::pipeline::{Pipeline, PipelineConfig, PipelineState, Stages, Wal};
use crate::daemon::pushes::{Attempt, Pushes};
use crate::error::Result;
use crate::model::Array;

/// One generation of training state: immutable once published.
#[derive(Debug, Default)]
pub struct Generation {
    /// The generation these arrays are.
    pub gen: u64,
    /// Sorted by name, unique (see `model::sort_arrays`).
    pub arrays: Vec<Array>,
}

/// One WAL line, by value.
struct WalLine {
    buf: [u8; 256],
    len: usize,
}

/// How requests wait for the snapshot thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queue {
    /// Every request pins the generation current at the call and is
    /// written, in order. At most `max_pending` wait (each holds its
    /// generation's arrays); a request beyond that waits for the oldest to
    /// be written, as a checkpointer that cannot keep up must either wait
    /// or drop.
    Every {
        /// Requests that may wait at once (at least 1).
        max_pending: usize,
    },
    /// A request waiting is enough: later ones fold into it, and the
    /// snapshot thread writes the newest generation when it gets to it.
    /// Never waits; `coalesced` counts the folded requests.
    Coalesce,
}

impl Default for Queue {
    /// Every request written, two waiting at most.
    fn default() -> Queue {
        Queue::Every { max_pending: 2 }
    }
}

/// Committed generations whose outcome waits for their push: commit and
/// stages, by generation.
type Untold = std::collections::BTreeMap<u64, (Option<String>, Option<Stages>)>;

/// What a request hands the snapshot thread: the generation it pinned, or
/// none (coalescing: the newest when the thread gets to it).
type Pin = Option<Arc<Generation>>;

enum Control {
    Flush(Sender<()>),
    Shutdown(Sender<()>),
}

struct Shared {
    coalesced: AtomicU64,
    requested: AtomicU64,
    state: Mutex<PipelineState>,
    outcomes: Arc<Outcomes>,
    /// The commits waiting for their push, when there is a remote.
    pushes: Option<Arc<Pushes>>,
    untold: Mutex<Untold>,
}

impl Shared {
    /// Tells the futures of the generations a push attempt carried (and,
    /// when it failed, of every generation waiting that was not told yet:
    /// committed, not pushed, waiting in the resend queue).
    fn tell(&self, a: &Attempt) {
        let mut untold = self.untold.lock().unwrap_or_else(|e| e.into_inner());
        let told: Vec<u64> = if a.pushed { a.carried.clone() } else { a.waiting.clone() };
        for gen in told {
            let Some((commit, mut stages)) = untold.remove(&gen) else { continue };
            if let (Some(st), true) = (&mut stages, a.pushed) {
                st.push = a.secs;
            }
            let error = a
                .error
                .as_ref()
                .map(|why| format!("gen {gen} is committed but not pushed ({why}); it waits in the resend queue"));
            self.outcomes.record(Outcome { gen, commit, pushed: a.pushed, error, stages });
        }
    }
}

/// What became of one snapshot: written and committed (`commit`), pushed,
/// or why not. A request is answered by the first snapshot of its
/// generation or a later one (requests coalesce).
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The generation written.
    pub gen: u64,
    /// The commit that holds it, when committed.
    pub commit: Option<String>,
    /// True once pushed.
    pub pushed: bool,
    /// Set when the snapshot failed, or was committed but not pushed.
    pub error: Option<String>,
    /// How long each stage took (none for a failed snapshot).
    pub stages: Option<crate::daemon::pipeline::Stages>,
}

/// The outcomes of recent snapshots, for whoever waits on a request.
#[derive(Default)]
pub struct Outcomes {
    list: Mutex<Told>,
    changed: std::sync::Condvar,
}

/// Outcomes recorded, whether the snapshotter stopped, and the
/// generations committed whose outcome waits for their push.
#[derive(Default)]
struct Told {
    list: std::collections::VecDeque<Outcome>,
    closed: bool,
    awaited: std::collections::BTreeSet<u64>,
}

/// Outcomes kept for waiters (older requests were answered long ago).
const OUTCOMES_KEPT: usize = 4096;

impl Outcomes {
    fn record(&self, o: Outcome) {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        l.awaited.remove(&o.gen);
        l.list.push_back(o);
        if l.list.len() > OUTCOMES_KEPT {
            l.list.pop_front();
        }
        self.changed.notify_all();
    }

    /// Generation `gen` is committed and its outcome comes with its push.
    fn await_push(&self, gen: u64) {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).awaited.insert(gen);
    }

    fn close(&self) {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
        self.changed.notify_all();
    }

    /// Waits for the outcome of generation `gen`, or of the first later
    /// snapshot when `gen` was folded into one (requests coalesce); `None`
    /// when the snapshotter stopped first or `timeout` passed. A committed
    /// generation waits for its own push, whatever came of later ones.
    pub fn wait_for(&self, gen: u64, timeout: Option<Duration>) -> Option<Outcome> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let own = l.list.iter().find(|o| o.gen == gen);
            let later = || l.list.iter().find(|o| o.gen > gen).filter(|_| !l.awaited.contains(&gen));
            if let Some(o) = own.or_else(later) {
                return Some(o.clone());
            }
            if l.closed {
                return None;
            }
            l = match deadline {
                None => self.changed.wait(l).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.checked_duration_since(Instant::now())?;
                    self.changed.wait_timeout(l, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }
}

/// What `status` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    /// The newest generation written.
    pub last_gen: Option<u64>,
    /// Requests waiting.
    pub queue_depth: usize,
    /// Requests covered by a later snapshot.
    pub coalesced: u64,
    /// Requests received.
    pub requested: u64,
    /// Commits not yet pushed.
    pub resend_queue: usize,
    /// The last background failure, if any.
    pub last_error: Option<String>,
    /// Snapshots written.
    pub snapshots_written: u64,
    /// The newest generation pushed.
    pub pushed_gen: Option<u64>,
    /// Generations a restart could not redo (their data was not kept).
    pub lost: Vec<u64>,
    /// Wall seconds each stage of the last snapshot took.
    pub last_stages: Option<crate::daemon::pipeline::Stages>,
}

impl Status {
    /// The status as one JSON object (the daemon's `status` reply).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a status serializes")
    }
}

/// Publishes generations and snapshots them in the background.
pub struct Snapshotter {
    state: Arc<ArcSwap<Generation>>,
    queue: Queue,
    req_tx: Sender<Pin>,
    ctl_tx: Sender<Control>,
    wal: Arc<Wal>,
    /// WAL lines on their way to the WAL thread (fixed size: no allocation).
    wal_tx: Option<Sender<WalLine>>,
    wal_thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    push_thread: Option<JoinHandle<()>>,
    /// The pipeline's [`PipelineConfig::stopping`].
    stopping: Arc<std::sync::atomic::AtomicBool>,
}

impl Snapshotter {
    /// Opens the pipeline and starts the snapshot thread.
    pub fn start(cfg: PipelineConfig, initial: Generation, queue: Queue) -> Result<Snapshotter> {
        let stopping = cfg.stopping.clone();
        let pipeline = Pipeline::open(cfg)?;
        let wal = pipeline.wal();
        let shared = Arc::new(Shared {
            coalesced: AtomicU64::new(0),
            requested: AtomicU64::new(0),
            state: Mutex::new(pipeline.state.clone()),
            outcomes: Arc::new(Outcomes::default()),
            pushes: pipeline.pushes(),
            untold: Mutex::new(Untold::new()),
        });
        // Pushes run beside writing, on a thread of their own.
        let push_thread = match &shared.pushes {
            None => None,
            Some(p) => {
                let (p, shared) = (p.clone(), shared.clone());
                let t = std::thread::Builder::new()
                    .name("wtxt-push".into())
                    .spawn(move || {
                        background_priority();
                        p.run(|a| shared.tell(a));
                    })
                    .map_err(|e| crate::Error::io_in("push thread", e))?;
                Some(t)
            }
        };
        let state = Arc::new(ArcSwap::from_pointee(initial));
        let (req_tx, req_rx) = bounded::<Pin>(match queue {
            Queue::Every { max_pending } => max_pending.max(1),
            // A request waiting is enough; more fold into it.
            Queue::Coalesce => 1,
        });
        let (ctl_tx, ctl_rx) = unbounded::<Control>();
        let thread = {
            let (state, shared) = (state.clone(), shared.clone());
            std::thread::Builder::new()
                .name("wtxt-snapshot".into())
                .spawn(move || run(pipeline, state, shared, req_rx, ctl_rx))
                .map_err(|e| crate::Error::io_in("snapshot thread", e))?
        };
        // The WAL is appended by its own thread, so the hot path never waits
        // on the file system (a writer can be throttled while snapshots
        // dirty the page cache).
        let (wal_tx, wal_rx) = bounded::<WalLine>(4096);
        let wal_thread = {
            let wal = wal.clone();
            std::thread::Builder::new()
                .name("wtxt-wal".into())
                .spawn(move || {
                    background_priority();
                    for l in wal_rx {
                        let _ = wal.append(std::str::from_utf8(&l.buf[..l.len]).unwrap_or_default());
                    }
                })
                .map_err(|e| crate::Error::io_in("wal thread", e))?
        };
        Ok(Snapshotter {
            state,
            queue,
            req_tx,
            ctl_tx,
            wal,
            wal_tx: Some(wal_tx),
            wal_thread: Some(wal_thread),
            shared,
            thread: Some(thread),
            push_thread,
            stopping,
        })
    }

    /// Publishes a new generation (an RCU store: no lock, no allocation but the `Arc`).
    #[inline]
    pub fn publish(&self, g: Arc<Generation>) {
        self.state.store(g);
    }

    /// Publishes `g` and gives back the generation it replaces (whose
    /// buffers a caller may reuse once nothing else holds it).
    pub fn swap(&self, g: Arc<Generation>) -> Arc<Generation> {
        self.state.swap(g)
    }

    /// The generation now published.
    pub fn current(&self) -> Arc<Generation> {
        self.state.load_full()
    }

    /// Asks for a snapshot of the newest generation: one WAL line and a
    /// hand-off, which waits only when [`Queue::Every`]'s `max_pending`
    /// requests already wait. Returns the generation current at the call.
    #[inline]
    pub fn request_snapshot(&self) -> u64 {
        self.request_inner(None)
    }

    /// Like `request_snapshot`, recording where the state came from, so a
    /// restart can redo the request from that file.
    pub fn request_snapshot_from(&self, source: &std::path::Path) -> u64 {
        self.request_inner(Some(source))
    }

    fn request_inner(&self, source: Option<&std::path::Path>) -> u64 {
        let pin = match self.queue {
            Queue::Every { .. } => Some(self.state.load_full()),
            Queue::Coalesce => None,
        };
        let gen = pin.as_ref().map_or_else(|| self.state.load().gen, |g| g.gen);
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // Formatted on the stack: no allocation on the hot path.
        let mut buf = [0u8; 256];
        let mut cur = std::io::Cursor::new(&mut buf[..]);
        let _ = write!(cur, "snapshot requested gen={gen} ts={secs}");
        let n = cur.position() as usize;
        match source {
            None => {
                let _ = self.wal.append(std::str::from_utf8(&buf[..n]).unwrap_or_default());
            }
            Some(p) => {
                // The path's exact bytes, hex-encoded: spaces, newlines and
                // non-UTF-8 names all come back as they were.
                let _ = self.wal.append(&format!(
                    "{} pathhex={}",
                    std::str::from_utf8(&buf[..n]).unwrap_or_default(),
                    hex::encode(p.as_os_str().as_encoded_bytes())
                ));
            }
        }
        self.shared.requested.fetch_add(1, Ordering::Relaxed);
        match self.req_tx.try_send(pin) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(None)) => {
                self.shared.coalesced.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(pin)) => {
                let _ = self.req_tx.send(pin);
            }
        }
        gen
    }

    /// Blocks until every queued snapshot is written, committed and pushed
    /// (or parked in the resend queue).
    pub fn flush(&self) {
        let (tx, rx) = bounded(1);
        if self.ctl_tx.send(Control::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    /// The pipeline's state.
    pub fn status(&self) -> Status {
        let mut s = self.shared.state.lock().map(|s| s.clone()).unwrap_or_default();
        if let Some(p) = &self.shared.pushes {
            let (waiting, pushed, error) = p.status();
            s.resend_queue = waiting;
            s.pushed_gen = pushed;
            // A push failure is newer than any write failure only while it waits.
            if error.is_some() && (!s.resend_queue.is_empty() || s.last_error.is_none()) {
                s.last_error = error;
            }
        }
        Status {
            last_gen: s.last_gen,
            queue_depth: self.req_tx.len(),
            coalesced: self.shared.coalesced.load(Ordering::Relaxed),
            requested: self.shared.requested.load(Ordering::Relaxed),
            resend_queue: s.resend_queue.len(),
            last_error: s.last_error,
            snapshots_written: s.snapshots_written,
            pushed_gen: s.pushed_gen,
            lost: s.lost,
            last_stages: s.last_stages,
        }
    }

    /// The generation after the last one snapshotted (0 for a new ring).
    pub fn next_gen(&self) -> Result<u64> {
        match self.status().last_gen {
            None => Ok(0),
            Some(g) => g
                .checked_add(1)
                .ok_or_else(|| crate::Error::input(Default::default(), "the ring's last gen is the largest there is")),
        }
    }

    /// Where the outcomes of snapshots are posted (shareable with waiters).
    pub fn outcomes(&self) -> Arc<Outcomes> {
        self.shared.outcomes.clone()
    }

    /// Records generations a restart could not redo.
    pub fn report_lost(&self, gens: &[u64]) {
        if let Ok(mut s) = self.shared.state.lock() {
            s.lost.extend_from_slice(gens);
        }
    }

    /// Finishes the snapshot in flight and what is queued, tries the resend
    /// queue once more, and stops the thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        // Drain the WAL first: its lines precede the snapshots' `done` lines.
        self.wal_tx.take();
        if let Some(t) = self.wal_thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.thread.take() {
            let (tx, rx) = bounded(1);
            if self.ctl_tx.send(Control::Shutdown(tx)).is_ok() {
                let _ = rx.recv();
            }
            let _ = t.join();
        }
        if let (Some(p), Some(t)) = (&self.shared.pushes, self.push_thread.take()) {
            p.stop();
            let _ = t.join();
        }
        self.shared.outcomes.close();
    }
}

impl Drop for Snapshotter {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Requests in the ring's WAL that no snapshot finished: (gen, source).
pub fn pending_requests(ring: &std::path::Path) -> Vec<(u64, Option<PathBuf>)> {
    Wal::pending(ring)
}

/// Lowers the calling thread's scheduling priority (Linux: per thread, and
/// inherited by the threads it starts), so background snapshot work yields
/// the CPU to the training loop.
#[allow(unsafe_code)]
fn background_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on the calling thread; failure only leaves the priority as it was.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
}

fn run(
    mut p: Pipeline,
    state: Arc<ArcSwap<Generation>>,
    shared: Arc<Shared>,
    req_rx: Receiver<Pin>,
    ctl_rx: Receiver<Control>,
) {
    background_priority();
    let publish = |p: &Pipeline| {
        if let Ok(mut s) = shared.state.lock() {
            let lost = std::mem::take(&mut s.lost);
            *s = p.state.clone();
            s.lost = lost;
        }
    };
    let once = |p: &mut Pipeline, pin: Pin| {
        let pin = pin.unwrap_or_else(|| state.load_full());
        if p.state.last_gen == Some(pin.gen) {
            // Already written by an earlier request that pinned the same
            // state or a newer one: this request was folded into it.
            shared.coalesced.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let outcome = match p.snapshot(pin.gen, &pin.arrays) {
            Err(e) => {
                let message = format!("gen {}: {e}", pin.gen);
                p.fail(message.clone());
                Outcome { gen: pin.gen, commit: None, pushed: false, error: Some(message), stages: None }
            }
            Ok(Some(to_push)) => {
                // Its outcome comes with its push (the push thread's).
                let commit = p.state.last_commit.clone();
                let queued = shared.pushes.as_ref().map(|pushes| {
                    shared.outcomes.await_push(to_push.gen);
                    let told = (commit.clone(), p.state.last_stages);
                    shared.untold.lock().unwrap_or_else(|e| e.into_inner()).insert(to_push.gen, told);
                    publish(p);
                    pushes.add(to_push)
                });
                match queued {
                    Some(Ok(())) => return,
                    other => {
                        shared.untold.lock().unwrap_or_else(|e| e.into_inner()).remove(&pin.gen);
                        let why = other.and_then(|r| r.err()).map_or("no push queue".into(), |e| e.to_string());
                        let message = format!("gen {} is committed, not queued for its push: {why}", pin.gen);
                        p.fail(message.clone());
                        Outcome {
                            gen: pin.gen,
                            commit,
                            pushed: false,
                            error: Some(message),
                            stages: p.state.last_stages,
                        }
                    }
                }
            }
            Ok(None) => Outcome {
                gen: pin.gen,
                commit: p.state.last_commit.clone(),
                pushed: false,
                error: None,
                stages: p.state.last_stages,
            },
        };
        // The state first: whoever the outcome wakes sees it in `status`.
        publish(p);
        shared.outcomes.record(outcome);
    };
    // Flush and shutdown: what is queued is written, then everything
    // pushed (a retry scheduled for later is tried now).
    let finish = |p: &mut Pipeline| {
        while let Ok(pin) = req_rx.try_recv() {
            once(p, pin);
        }
        if let Some(pushes) = &shared.pushes {
            pushes.flush();
        }
        publish(p);
    };
    loop {
        select! {
            recv(req_rx) -> r => match r {
                Ok(pin) => once(&mut p, pin),
                Err(_) => break,
            },
            recv(ctl_rx) -> c => match c {
                Ok(Control::Flush(reply)) => {
                    finish(&mut p);
                    let _ = reply.send(());
                }
                Ok(Control::Shutdown(reply)) => {
                    finish(&mut p);
                    let _ = reply.send(());
                    break;
                }
                Err(_) => break,
            },
        }
        publish(&p);
    }
}
