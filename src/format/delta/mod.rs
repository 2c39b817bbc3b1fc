//! DELTA v2: patches that carry only the chunks that changed.
//!
//! Two forms (docs/FORMAT.md, section 11):
//! - the **extended** form this project writes: the first line adds
//!   `target_sha256_all`, the target's header lines follow, every changed
//!   array carries its full target `arr` (and `idx`) line, `delarr` removes
//!   an array, and a new, reshaped or re-typed array carries all its chunks.
//!   Applying it rebuilds the target byte for byte: unchanged chunks are
//!   copied verbatim from the base, so apply is a streaming text merge,
//!   followed by a strict verification of the result against
//!   `target_sha256_all` (and the signature) before it is renamed into place;
//! - the seed's **minimal** form (`arr name=X`, changed chunks, `endarr`),
//!   which carries no target header: applying it decodes the base, replaces
//!   the chunks and re-hashes into a new generation.
//!
//! A delta never applies to a base whose `sha256_all` differs from
//! `base_sha256_all`.

mod apply;
mod create;
mod read;
mod walk;

pub use apply::*;
pub use create::*;
pub use read::*;
pub use walk::*;
