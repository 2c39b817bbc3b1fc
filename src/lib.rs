//! `wtxt`: deterministic, self-checking ASCII snapshots of ML weights (WTXT 1.1).
//!
//! The library holds everything; the `wtxt` binary only parses flags and
//! calls [`ops`]. Layout:
//! - [`model`]: the one in-memory model (named, typed arrays);
//! - [`wtxt`]: the format (grammar, layout, writer, reader, verifier, recovery);
//! - [`crypto`]: digests, HMAC, Ed25519 keys;
//! - [`convert`]: `.npy`, `.npz`, `.safetensors` in and out;
//! - [`ops`]: one function per command;
//! - [`error`], [`limits`], [`atomic`], [`progress`]: shared plumbing.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![allow(missing_docs)]

pub mod atomic;
pub mod convert;
pub mod crypto;
pub mod daemon;
pub mod error;
pub mod git;
pub mod limits;
pub mod model;
pub mod oms;
pub mod ops;
pub mod pipe;
pub mod progress;
pub mod store;
pub mod wtxt;

pub use error::{Error, Result};
