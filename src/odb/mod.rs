//! Git's object store, written and read without porcelain: the packs wtxt
//! writes (Huffman-coded blobs, a part's previous version as a delta),
//! loose objects written as `git hash-object -w` writes them, and blobs
//! read as streams. Nothing here runs a hook, moves a ref or reads a work
//! tree: that is [`crate::git`]'s. docs/STORAGE.md tells how the pieces fit.

pub(crate) mod ahead;
pub(crate) mod blob;
pub(crate) mod child;
pub(crate) mod deflate;
pub mod lfs;
pub(crate) mod objects;
pub(crate) mod pack;
pub(crate) mod promisor;

/// The pack's deflate of one blob (what `examples/pack_pass` times).
pub use deflate::zlib;

pub use crate::error::git_err;
