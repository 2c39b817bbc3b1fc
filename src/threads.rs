//! How many threads of work a command uses (`--threads N`: N threads, the
//! calling one counted; 1 is one core). The writer shares its work
//! (encoding, digests, `sha256_all`, writing in order) over `threads()`
//! threads, the caller among them; `verify` reads and decodes on the
//! calling thread and hashes on two more, or, at 1, hashes in place; OMS
//! signing hashes files on `threads()`, and a distributed rank encodes its
//! chunks on `threads()`. A thread that only waits on the disk (a direct
//! writer's) is not work.
//!
//! The count is `--threads N` (which sets it for the process), else the
//! environment's `WTXT_THREADS`, else the machine's parallelism.
//!
//! [`in_order`] is the pool whose results one writer takes in order while
//! the next are made: the packs a commit stores (`odb::pack`) are
//! Huffman-coded there, part by part.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The environment variable that sets the count.
pub const THREADS_ENV: &str = "WTXT_THREADS";

static SET: AtomicUsize = AtomicUsize::new(0);

/// Sets the count for this process (0: back to the environment's or the
/// machine's).
pub fn set(n: usize) {
    SET.store(n, Ordering::Relaxed);
}

/// The count the pools use (at least 1).
pub fn threads() -> usize {
    match SET.load(Ordering::Relaxed) {
        0 => std::env::var(THREADS_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        n => n,
    }
}

/// From this many threads of work on, no serial SHA-256 stream is paired
/// with another digest ([`crate::crypto::sha_pair`]). Two digests paired
/// cost 1.11x one, on one core: pairing saves a core's worth of work, but
/// the stream every other step waits on (`sha256_all`, and an array's
/// digest, which `sha256_all` waits on) then runs at 0.9x its speed, and
/// so does the whole command. From four threads there are cores to run the
/// other digest beside it: the writer hashes each chunk where it encodes
/// it, the verifier hashes the arrays on the thread that checks the chunks.
pub const STREAMS_ALONE_FROM: usize = 4;

/// `work` on each of `items` on up to [`threads`] threads, and `consume` of
/// each result on the calling thread in `items`' order as soon as it and
/// those before it are done: the consumer (a writer) runs beside the
/// workers, not after each batch of them. No item is begun more than
/// `ahead` places past the one the consumer awaits, whatever order they
/// finish in, so at most `ahead + 2` results are held (`ahead = workers -
/// 1` keeps every worker busy while one is consumed). Stops at the first
/// error of either; a worker's panic is raised again on the calling
/// thread.
pub fn in_order<T: Sync, R: Send, E: Send>(
    items: &[T],
    ahead: usize,
    work: impl Fn(&T) -> Result<R, E> + Sync,
    mut consume: impl FnMut(R) -> Result<(), E>,
) -> Result<(), E> {
    use std::collections::BTreeMap;
    use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
    use std::sync::{Condvar, Mutex};
    type Outcome<R, E> = std::thread::Result<Result<R, E>>;
    struct State<R, E> {
        /// Items claimed by a worker so far.
        claimed: usize,
        /// Items the consumer has taken.
        taken: usize,
        done: BTreeMap<usize, Outcome<R, E>>,
        stop: bool,
    }
    let state = Mutex::new(State { claimed: 0, taken: 0, done: BTreeMap::new(), stop: false });
    let changed = Condvar::new();
    let lock = || state.lock().unwrap_or_else(|p| p.into_inner());
    let workers = threads().min(items.len()).max(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = {
                    let mut st = lock();
                    while !st.stop && st.claimed < items.len() && st.claimed > st.taken + ahead {
                        st = changed.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                    if st.stop || st.claimed == items.len() {
                        return;
                    }
                    st.claimed += 1;
                    st.claimed - 1
                };
                let outcome = catch_unwind(AssertUnwindSafe(|| work(&items[i])));
                lock().done.insert(i, outcome);
                changed.notify_all();
            });
        }
        let stop = |st: &mut State<R, E>| {
            st.stop = true;
            changed.notify_all();
        };
        for i in 0..items.len() {
            let outcome = {
                let mut st = lock();
                let outcome = loop {
                    match st.done.remove(&i) {
                        Some(o) => break o,
                        None => st = changed.wait(st).unwrap_or_else(|p| p.into_inner()),
                    }
                };
                st.taken = i + 1;
                changed.notify_all();
                outcome
            };
            let result = match outcome {
                Ok(r) => r.and_then(&mut consume),
                Err(panic) => {
                    stop(&mut lock());
                    resume_unwind(panic);
                }
            };
            if let Err(e) = result {
                stop(&mut lock());
                return Err(e);
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn results_come_in_order_with_few_waiting_and_the_first_error_stops_the_rest() {
        let items: Vec<usize> = (0..40).collect();
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let (ready, most_ready) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let mut seen = Vec::new();
        super::in_order(
            &items,
            2,
            |&i| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Later items finish first.
                std::thread::sleep(std::time::Duration::from_micros(((40 - i) * 50) as u64));
                running.fetch_sub(1, Ordering::SeqCst);
                most_ready.fetch_max(ready.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                Ok::<usize, String>(i)
            },
            |r| {
                ready.fetch_sub(1, Ordering::SeqCst);
                seen.push(r);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, items);
        assert!(most.load(Ordering::SeqCst) <= super::threads());
        // The look-ahead, the one awaited, the one being consumed.
        assert!(most_ready.load(Ordering::SeqCst) <= 2 + 2, "{most_ready:?} results held");

        let started = AtomicUsize::new(0);
        let r = super::in_order(
            &items,
            1,
            |&i| {
                started.fetch_add(1, Ordering::SeqCst);
                if i == 3 {
                    Err(format!("item {i}"))
                } else {
                    Ok(i)
                }
            },
            |_| Ok(()),
        );
        assert_eq!(r, Err("item 3".to_string()));
        assert!(started.load(Ordering::SeqCst) <= 3 + 1 + 1 + super::threads(), "stopped early");
    }
}
