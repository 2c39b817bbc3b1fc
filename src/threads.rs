//! How many threads the hashing pools use. The writer hashes chunks on
//! `threads() - 1` threads beside the one that writes (at least one), OMS
//! signing hashes files on `threads()`, and a distributed rank encodes its
//! chunks on `threads()`. `verify`'s pipeline has fixed roles (one thread
//! reads and decodes, one hashes arrays, one the root) and does not grow.
//!
//! The count is `--threads N` (which sets it for the process), else the
//! environment's `WTXT_THREADS`, else the machine's parallelism.

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
