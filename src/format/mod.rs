//! The WTXT 1.1 format: grammar, layout, canonical writer, strict reader and
//! verifier, recovery and streaming finalization.
#![forbid(unsafe_code)]

pub(crate) mod bind;
pub(crate) mod chunk;
pub(crate) mod decode;
pub mod delta;
pub(crate) mod layout;
pub(crate) mod lines;
pub(crate) mod load;
pub(crate) mod read;
pub(crate) mod recover;
pub mod split;
pub mod syntax;
pub(crate) mod verify;
pub(crate) mod write;

/// What a [`LineReader::skipping`] reads from (and a [`split::PartSource`] gives).
pub use crate::fs::{Skip, Streamed};
pub use layout::{hex_digit, parity, Layout, DEFAULT_ROWS_PER_CHUNK};
pub use lines::LineReader;
pub use load::{
    canonical_bytes, keeps_array, load, without_sign_line, write_canonical, Collect, Destination, Keep, Load, Loaded,
};
pub use recover::recover;
pub use verify::{verify, Carried, Report, VerifyOptions};
pub use write::{write_snapshot, WriteOptions, WritePlan};
