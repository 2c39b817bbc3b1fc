//! Split snapshots: a head file plus part files, so that no file of a large
//! snapshot reaches Git's `core.bigFileThreshold` (512 MiB, above which Git
//! stores every version whole) or a host's per-file limit (GitHub: 100 MB).
//!
//! Splitting is a storage form of the single file, not a new identity. The
//! head keeps the single file's header lines, `sign`, every `arr` line,
//! `audit` and `endwtxt` byte for byte and lists the parts (`part` lines)
//! where the arrays' chunks are; each part holds a run of the single file's
//! array lines verbatim between a framing line and `endpart`, except that
//! an array's `arr` line is replaced by a `begin` line that carries no
//! value (name, dtype, shape). The `arr` line holds the salt, which changes
//! with every generation, and the array's hashes: kept in the head, a part
//! changes only when one of its chunks does. Joining (the head up to its
//! part lines, each part's body with its `begin` lines replaced by the
//! head's `arr` lines, then the head's tail) gives the single file byte
//! for byte: that is how every reader reads a split snapshot, so every
//! check of the single file applies unchanged, and split/join are exact
//! inverses. Cut points follow from the arrays' names, dtypes, shapes,
//! `rows_per_chunk` and the part size only, never from values. Grammar:
//! docs/FORMAT.md section 18.
//!
//! This module is the pure form, knowing no files: the head's grammar
//! (`head.rs`), where the cuts fall (`plan.rs`), cutting a text into parts
//! (`cut.rs`), joining parts back into the single text (`join.rs`, one
//! part read by `part.rs`, its lines mapped back by `map.rs`), reading
//! only some arrays' parts in the tree form (`sparse.rs`) and what a
//! generation carries over unchanged from one verified (`carry.rs`). Where
//! part files live and how they are written and read is
//! [`crate::store`]'s.
#![forbid(unsafe_code)]

mod carry;
mod cut;
mod frame;
mod head;
mod join;
mod map;
mod part;
mod plan;
mod sparse;

pub use carry::*;
pub use cut::*;
pub use frame::*;
pub use head::*;
pub use join::*;
pub use map::*;
pub use plan::*;
pub use sparse::{parts_for, Sparse};
