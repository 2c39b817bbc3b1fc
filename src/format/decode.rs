//! Chunks decoded on a pool of threads beside the strict reader, handed
//! back in the order they were read. The reader still reads every line and
//! checks the structure itself (each base64 line's width and separator, the
//! `endch` after it), so every structural error is the one the sequential
//! reader gives at the line it gives it; a job only does what cannot break
//! the structure: parity, the base64 alphabet, decoding, CRC32C, and the
//! chunk's SHA-256 (which the verifier then needs from no other thread).
//! [`crate::format::read::read_on`] uses it; `verify` gives it the threads
//! beyond its own three.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::crypto::digest::{Hash, Sha256State};
use crate::format::chunk::{decode_blocks, Fault};
use crate::format::syntax::{ChLine, B64_WIDTH};
use crate::limits::BLOCK;

/// Most text a chunk may have to be decoded on the pool (larger ones, rows
/// of hundreds of MiB, are decoded by the reader a block at a time, as
/// before): a job holds its text and its bytes at once.
pub(crate) const MAX_POOLED_TEXT: u64 = 8 << 20;

/// A chunk as a job decoded it.
pub(crate) struct Decoded {
    /// Its bytes, in blocks of at most [`BLOCK`] bytes.
    pub blocks: Vec<Vec<u8>>,
    /// Its faults (parity, alphabet, last line, CRC32C), in line order.
    pub faults: Vec<Fault>,
    /// The SHA-256 of its bytes (judged by the caller, not here).
    pub sha256: Hash,
}

struct Job {
    id: u64,
    ch: ChLine,
    /// The chunk's base64 lines without their LFs, every one of the right
    /// width and with its separator (the reader checked): full lines are
    /// `B64_WIDTH + 2` bytes apart.
    text: Vec<u8>,
}

/// Decoding threads and the jobs they finished, by id.
pub(crate) struct Pool {
    workers: usize,
    tx: Mutex<Option<Sender<Job>>>,
    done: Mutex<HashMap<u64, Decoded>>,
    ready: Condvar,
    /// Blocks to decode into, handed back by the reader as it hands the
    /// visitor decoded ones: the pool allocates only while it fills up.
    spares: Mutex<Vec<Vec<u8>>>,
    next: std::sync::atomic::AtomicU64,
}

/// Closes a pool's queue when dropped (see [`Pool::with`]).
struct Closing<'p>(&'p Pool);

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.0.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl Pool {
    /// Runs `f` with a pool of `workers` decoding threads.
    pub(crate) fn with<T>(workers: usize, f: impl FnOnce(&Pool) -> T) -> T {
        let (tx, rx) = bounded::<Job>(workers * 2);
        let pool = Pool {
            workers,
            tx: Mutex::new(Some(tx)),
            done: Mutex::new(HashMap::new()),
            ready: Condvar::new(),
            spares: Mutex::new(Vec::new()),
            next: 0.into(),
        };
        std::thread::scope(|s| {
            for _ in 0..workers {
                let (rx, pool) = (rx.clone(), &pool);
                s.spawn(move || pool.work(rx));
            }
            drop(rx);
            // Closing the queue ends the threads once they are done, also
            // when `f` panics: the scope waits for them before the panic
            // goes on, and an open queue would keep them waiting forever.
            let _close = Closing(&pool);
            f(&pool)
        })
    }

    /// Its decoding threads.
    pub(crate) fn workers(&self) -> usize {
        self.workers
    }

    fn work(&self, rx: Receiver<Job>) {
        for job in rx {
            let decoded = self.decode(&job.ch, &job.text);
            self.done.lock().unwrap_or_else(|p| p.into_inner()).insert(job.id, decoded);
            self.ready.notify_all();
        }
    }

    /// Hands chunk `ch`'s lines to a decoding thread; the id to wait on.
    pub(crate) fn submit(&self, ch: ChLine, text: Vec<u8>) -> u64 {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let job = Job { id, ch, text };
        // Without a thread left to take it, it is decoded here.
        if let Some(Err(e)) = tx.map(|tx| tx.send(job)) {
            let job = e.into_inner();
            let decoded = self.decode(&job.ch, &job.text);
            self.done.lock().unwrap_or_else(|p| p.into_inner()).insert(id, decoded);
        }
        id
    }

    /// The decoded chunk of job `id`, once it is done.
    pub(crate) fn wait(&self, id: u64) -> Decoded {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(d) = done.remove(&id) {
                return d;
            }
            done = self.ready.wait(done).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Keeps `block` to decode into later (as many as the chunks that can
    /// be in flight need; the others are freed).
    pub(crate) fn give_back(&self, mut block: Vec<u8>) {
        let mut spares = self.spares.lock().unwrap_or_else(|p| p.into_inner());
        let most = (2 * self.workers + 4) * MAX_POOLED_TEXT.div_ceil(BLOCK as u64) as usize;
        if spares.len() < most && block.capacity() >= BLOCK {
            block.clear();
            spares.push(block);
        }
    }

    fn spare(&self) -> Vec<u8> {
        let spare = self.spares.lock().unwrap_or_else(|p| p.into_inner()).pop();
        spare.unwrap_or_else(|| Vec::with_capacity(BLOCK))
    }

    /// Decodes a chunk's lines as the reader would, a block at a time.
    fn decode(&self, ch: &ChLine, text: &[u8]) -> Decoded {
        let (mut sha, mut blocks, mut out) = (Sha256State::default(), Vec::new(), self.spare());
        // The reader checked each line's shape: no fault of shape comes.
        let faults = decode_blocks(ch, text.chunks(B64_WIDTH + 2), &mut out, |out| {
            sha.update(out);
            blocks.push(std::mem::replace(out, self.spare()));
        });
        self.give_back(out);
        Decoded { blocks, faults, sha256: sha.finalize() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that panics beside its pool panics; it does not wait
    /// forever on threads that wait for more chunks.
    #[test]
    fn a_panic_beside_the_pool_ends_its_threads_and_goes_on() {
        let got = std::panic::catch_unwind(|| Pool::with(3, |_| panic!("a reader's bug")));
        assert!(got.is_err());
    }
}
