//! `wtxt`: deterministic, self-checking ASCII snapshots of ML weights (WTXT 1.1).
//!
//! # The front
//!
//! Everything outside this crate (the `wtxt` binary, the Python binding,
//! the fuzz targets, the tests, the examples) uses only what this page
//! lists; the rooms behind it (file I/O, Git's object store, the byte
//! buffer, the thread pool) are private and free to move.
//! - [`format`](mod@format): one snapshot: [`format::load`], [`format::verify`],
//!   [`format::write_snapshot`], [`format::recover`]; its line grammar
//!   ([`format::syntax`]), the split form ([`format::split`]) and DELTA v2
//!   ([`format::delta`]);
//! - [`store`]: snapshots on disk, one file or a head and its parts, and
//!   the distributed writer ([`store::DistWrite`]);
//! - [`convert`]: the binary containers (npy, npz, safetensors, VOLP, FOLD,
//!   AERO, MLDF), one namespace each, and Hugging Face folders;
//! - [`crypto`]: digests, HMAC, Ed25519 and EC keys, age;
//! - [`options`]: the keys, metadata and output choices every entry point
//!   takes;
//! - [`ops`]: one function per command; [`cli`]: the command line over it;
//! - [`git`]: Git's drivers, filter, hooks and push; [`oms`]: OpenSSF Model
//!   Signing; [`daemon`]: the snapshot daemon and the in-process pipeline;
//! - [`model`]: named typed arrays; [`progress`]; [`limits`]: the bounds
//!   every reader enforces;
//! - at the root: [`Error`] (with its [`ErrorKind`] and [`Position`]),
//!   [`threads`], [`list_files`] and
//!   [`exit_cleanly_when_a_mapped_input_shrinks`].
//!
//! Each layer uses only those below it (docs/ARCHITECTURE.md; the layer
//! test enforces it).
//!
//! Unsafe code is denied crate-wide; the few places that need it (memory
//! maps, `flock`, `poll`, `setrlimit`, signals, decoding into a buffer's
//! spare room) allow it on one function each, with a `SAFETY` comment on
//! the block. The x86 SHA rounds are the `wtxt-sha-pair` crate's.
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

mod buffer;
pub mod cli;
pub mod convert;
pub mod crypto;
pub mod daemon;
mod error;
pub mod format;
mod fs;
pub mod git;
pub mod limits;
pub mod model;
mod odb;
pub mod oms;
pub mod ops;
pub mod options;
mod pipe;
pub mod progress;
pub mod store;
mod threads;

pub use error::{Error, Kind as ErrorKind, Position, Result};
pub use fs::{exit_cleanly_when_a_mapped_input_shrinks, list_files};
pub use odb::zlib;
pub use threads::threads;

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
