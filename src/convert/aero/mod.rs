//! AERO v0.1 (and v0.2's `hash_b3`): a 96-byte little-endian header, a TOC
//! of 80-byte entries, a string table, and 16-byte aligned chunk payloads,
//! each with the BLAKE3 of its uncompressed bytes.
//!
//! Read: every limit of the spec and every bound is checked before a byte is
//! used; every chunk's BLAKE3 (and `hash_b3`, IHSH, PHSH when present) is
//! verified; tensors are windows of the mapped WTSH shards (no copy). The
//! header, the chunk list and the content of every chunk but the shards
//! become the JSON array `__aero` (MessagePack shown as JSON, see
//! `msgpack.rs`). Write: the chunks `__aero` lists, in its order; without
//! it, what the reference `AeroWriter.write_model` writes.
#![forbid(unsafe_code)]

use serde_json::Value;

use crate::convert::container::MetaLayout;
use crate::convert::names;
use crate::model::Array;

mod layout;
mod read;
mod write;

pub use layout::*;
pub use read::*;
use write::default_chunks;
pub use write::*;

/// The `__aero` that reading back [`write()`]'s output for `tensors` alone
/// gives, or `None` when there is none to predict.
pub fn default_meta(tensors: &[Array]) -> Option<Value> {
    let refs: Vec<&Array> = tensors.iter().collect();
    let meta = AeroMeta { version: vec![0, 1], uuid: hex::encode([0u8; 16]), chunks: default_chunks(&refs) };
    Some(serde_json::to_value(&meta).expect("metadata serializes"))
}

/// The aero row of the container table.
pub(crate) static AERO: MetaLayout = MetaLayout {
    name: "aero",
    extensions: &["aero"],
    magic: MAGIC,
    metadata: &[META, names::NAMES],
    read,
    read_tensors,
    read_pinned,
    write: |arrays, out| write_to(arrays, out),
    default_meta,
    kept_names,
    check_sizes: |_| Ok(()),
    verbatim: true,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dtype;

    #[test]
    fn dtype_codes_round_trip() {
        for d in Dtype::ALL {
            match code_of(d) {
                Some(c) => assert_eq!(dtype_of(c), Some(d)),
                None => assert!(d > Dtype::Bool, "{d}: every seed dtype and f16, bf16, bool have a code"),
            }
        }
    }
}
