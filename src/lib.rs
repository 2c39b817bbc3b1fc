//! `wtxt`: deterministic, self-checking ASCII snapshots of ML weights (WTXT 1.1).
//!
//! The library holds everything; the command line ([`cli`], which the `wtxt`
//! binary and the Python package's `wtxt` command run) only parses flags
//! and calls [`ops`]. Layout, from the top (each layer uses only those
//! below it; docs/ARCHITECTURE.md):
//! - [`daemon`]: the snapshot daemon and the pipeline Python runs in process;
//! - [`ops`]: one function per command;
//! - [`git`]: Git's drivers, filter, hooks, install, history, push;
//! - [`oms`]: OpenSSF Model Signing signatures;
//! - [`convert`]: the binary containers (npy, npz, safetensors, VOLP, FOLD, AERO, MLDF);
//! - [`store`]: snapshots on disk, one file or a head and its parts;
//! - [`format`](mod@format): the WTXT format (grammar, layout, writer, reader, verifier, recovery, split form);
//! - [`crypto`]: digests, HMAC, Ed25519 and EC keys, age;
//! - [`model`] and [`buffer`]: named typed arrays, and the one byte buffer;
//! - [`error`], [`limits`], [`fs`], `pipe`, [`progress`], [`threads`]: shared plumbing.
//!
//! Unsafe code is denied crate-wide; the few places that need it (memory
//! maps, `flock`, `poll`, `setrlimit`, signals, decoding into a buffer's
//! spare room) allow it on one function each, with a `SAFETY` comment on
//! the block. The x86 SHA rounds are the `wtxt-sha-pair` crate's.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod buffer;
pub mod cli;
pub mod convert;
pub mod crypto;
pub mod daemon;
pub mod error;
pub mod format;
pub mod fs;
pub mod git;
pub mod limits;
pub mod model;
pub mod odb;
pub mod oms;
pub mod ops;
pub mod options;
pub(crate) mod pipe;
pub mod progress;
pub mod store;
pub mod threads;

pub use error::{Error, Result};

/// Inputs the unit tests of several modules share.
#[cfg(test)]
pub(crate) mod testing {
    /// `n` bytes of xorshift noise from `seed` (0 too): the same bytes on
    /// every run and machine.
    pub fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }
}
