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

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::convert::bytes::{align, each_zero_piece, le_u16, le_u32, le_u64};
use crate::convert::common::ReadAs;
use crate::convert::common::{meta_array, meta_typed, zstd_exact, Notes};
use crate::convert::container::MetaLayout;
use crate::convert::names;
use crate::convert::names::OriginalNames;
use crate::convert::{msgpack, pyjson};
use crate::error::{check_byte, input_at, reason, Error, Reason, Result};
use crate::model::{assign_names, Array, ArrayData, Dtype};

mod read;
mod write;

pub use read::*;
use write::default_chunks;
pub use write::*;

/// The magic bytes.
pub const MAGIC: &[u8] = b"AERO";
/// Name of the metadata array.
pub const META: &str = "__aero";
/// Spec limit: TOC entries.
pub const MAX_ENTRY_COUNT: u64 = 1_000_000;
/// Spec limit: string table bytes.
pub const MAX_STRING_TABLE: u64 = 512 * 1024 * 1024;
/// Most tensors a TIDX may list (65,536): each costs about 3 KiB of parsed
/// metadata and bookkeeping on the way to or from a snapshot, so this keeps
/// the index within the heap cap (at the cap: writing 228 MB, reading 211
/// MB); the writer refuses more, so it never writes what the reader refuses.
pub const MAX_TIDX_TENSORS: usize = 1 << 16;

/// Our limit on a metadata chunk's uncompressed bytes (the spec allows
/// 2 GiB): metadata is parsed into memory, so it must fit the heap cap.
pub const MAX_PARSED_METADATA: u64 = 64 << 20;
/// The reference writer's largest shard.
const MAX_SHARD_BYTES: u64 = 2 << 30;
const HEADER_SIZE: u64 = 96;
const TOC_HEADER: u64 = 16;
const TOC_ENTRY: u64 = 80;
const ZSTD: u32 = 0x1;
/// The reference writer's zstd level for metadata chunks.
const ZSTD_LEVEL: i32 = 6;
const MMAP_CRITICAL: u32 = 0x2;
const IS_INDEX: u32 = 0x4;
const PACKED: u64 = 0x8000;

/// `__aero`: what reading kept of a file besides its tensors, so that
/// writing gives the file back.
#[derive(Serialize, Deserialize)]
struct AeroMeta {
    /// `[major, minor]`.
    #[serde(default)]
    version: Vec<u64>,
    uuid: String,
    chunks: Vec<ChunkMeta>,
}

/// One chunk, in file order. Serialized in this field order, which is the
/// order `__aero` has always had (its bytes are part of snapshots).
#[derive(Serialize, Deserialize, Default)]
struct ChunkMeta {
    fourcc: String,
    name: String,
    #[serde(default)]
    flags: u32,
    /// TIDX: the index's own keys, its tensor list given as array names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tidx: Option<Value>,
    /// TIDX: the tensor entries as the file had them. They stay JSON
    /// objects: keys this reader does not know, and the file's key order,
    /// must come back byte for byte in the MessagePack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tensors: Option<Vec<Value>>,
    /// PHSH: bytes per hashed page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    page_size: Option<u64>,
    /// Content: JSON (MJSN as the Python writer dumps it), MessagePack
    /// shown as JSON (when it re-encodes exactly), else hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    json: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    msgpack: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hex: Option<String>,
    /// The stored (compressed) bytes, when our zstd would not give them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stored_hex: Option<String>,
}

impl ChunkMeta {
    fn new(fourcc: &str, name: impl Into<String>, flags: u32) -> ChunkMeta {
        ChunkMeta { fourcc: fourcc.to_string(), name: name.into(), flags, ..Default::default() }
    }
}

fn dtype_of(code: u64) -> Option<Dtype> {
    Some(match code {
        0 => Dtype::F16,
        1 => Dtype::F32,
        2 => Dtype::Bf16,
        3 => Dtype::F64,
        4 => Dtype::I8,
        5 => Dtype::U8,
        6 => Dtype::I16,
        7 => Dtype::U16,
        8 => Dtype::I32,
        9 => Dtype::U32,
        10 => Dtype::I64,
        11 => Dtype::U64,
        12 => Dtype::Bool,
        _ => return None,
    })
}

/// AERO's code of a dtype; the float8 types have none.
fn code_of(d: Dtype) -> Option<u64> {
    (0..13).find(|&c| dtype_of(c) == Some(d))
}

/// One TOC entry.
struct Chunk {
    fourcc: String,
    flags: u32,
    offset: u64,
    length: u64,
    ulen: u64,
    name: String,
    blake3: [u8; 32],
    toc_at: u64,
}

/// A chunk's content in `__aero`: JSON for MJSN when the Python writer's
/// bytes come back, MessagePack as JSON when it re-encodes exactly, else hex.
fn content_to_meta(fourcc: &str, p: &[u8], m: &mut ChunkMeta) {
    if fourcc == "MJSN" {
        if let Ok(v) = serde_json::from_slice::<Value>(p) {
            if pyjson::dumps(&v, true, true).as_bytes() == p {
                m.json = Some(v);
                return;
            }
        }
    } else if let Some(j) = msgpack::exact_json(p) {
        m.msgpack = Some(j);
        return;
    }
    m.hex = Some(hex::encode(p));
}

fn meta_to_content(m: &ChunkMeta) -> std::result::Result<Vec<u8>, Reason> {
    if let Some(v) = &m.json {
        return Ok(pyjson::dumps(v, true, true).into_bytes());
    }
    if let Some(v) = &m.msgpack {
        return Ok(msgpack::encode(&msgpack::from_json(v)?));
    }
    m.hex
        .as_deref()
        .and_then(|h| hex::decode(h).ok())
        .ok_or_else(|| "a chunk has no json, msgpack or hex content".into())
}

/// The control region `[0, end)` with every TOC entry's hash zeroed (AIP-0001).
fn control_digest(b: &[u8], chunks: &[Chunk], ranges: &[(u64, u64)]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    for &(s, e) in ranges {
        let mut region = b[s as usize..e as usize].to_vec();
        for c in chunks {
            let (hs, he) = (c.toc_at + 48, c.toc_at + 80);
            let (from, to) = (hs.max(s), he.min(e));
            if from < to {
                region[(from - s) as usize..(to - s) as usize].fill(0);
            }
        }
        h.update(&region);
    }
    *h.finalize().as_bytes()
}

/// Feeds `b` to a BLAKE3 hasher, on all cores when it is large.
pub fn hash_into(h: &mut blake3::Hasher, b: &[u8]) {
    if b.len() >= 1 << 20 {
        h.update_rayon(b);
    } else {
        h.update(b);
    }
}

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

    #[test]
    fn dtype_codes_round_trip() {
        for d in Dtype::ALL {
            match code_of(d) {
                Some(c) => assert_eq!(dtype_of(c), Some(d)),
                None => assert!(matches!(d, Dtype::F8E4m3 | Dtype::F8E5m2)),
            }
        }
    }
}
