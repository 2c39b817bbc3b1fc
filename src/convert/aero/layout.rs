//! AERO's layout: its constants and limits, the chunks and TOC entries as `__aero` keeps them, and the control region's digest.

use crate::convert::{msgpack, pyjson};
use crate::error::Reason;
use crate::model::Dtype;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
pub(super) const MAX_SHARD_BYTES: u64 = 2 << 30;
pub(super) const HEADER_SIZE: u64 = 96;
pub(super) const TOC_HEADER: u64 = 16;
pub(super) const TOC_ENTRY: u64 = 80;
pub(super) const ZSTD: u32 = 0x1;
/// The reference writer's zstd level for metadata chunks.
pub(super) const ZSTD_LEVEL: i32 = 6;
pub(super) const MMAP_CRITICAL: u32 = 0x2;
pub(super) const IS_INDEX: u32 = 0x4;
pub(super) const PACKED: u64 = 0x8000;

/// `__aero`: what reading kept of a file besides its tensors, so that
/// writing gives the file back.
#[derive(Serialize, Deserialize)]
pub(super) struct AeroMeta {
    /// `[major, minor]`.
    #[serde(default)]
    pub(super) version: Vec<u64>,
    pub(super) uuid: String,
    pub(super) chunks: Vec<ChunkMeta>,
}

/// One chunk, in file order. Serialized in this field order, which is the
/// order `__aero` has always had (its bytes are part of snapshots).
#[derive(Serialize, Deserialize, Default)]
pub(super) struct ChunkMeta {
    pub(super) fourcc: String,
    pub(super) name: String,
    #[serde(default)]
    pub(super) flags: u32,
    /// TIDX: the index's own keys, its tensor list given as array names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tidx: Option<Value>,
    /// TIDX: the tensor entries as the file had them. They stay JSON
    /// objects: keys this reader does not know, and the file's key order,
    /// must come back byte for byte in the MessagePack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) tensors: Option<Vec<Value>>,
    /// PHSH: bytes per hashed page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) page_size: Option<u64>,
    /// Content: JSON (MJSN as the Python writer dumps it), MessagePack
    /// shown as JSON (when it re-encodes exactly), else hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) json: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) msgpack: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) hex: Option<String>,
    /// The stored (compressed) bytes, when our zstd would not give them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stored_hex: Option<String>,
}

impl ChunkMeta {
    pub(super) fn new(fourcc: &str, name: impl Into<String>, flags: u32) -> ChunkMeta {
        ChunkMeta { fourcc: fourcc.to_string(), name: name.into(), flags, ..Default::default() }
    }
}

pub(super) fn dtype_of(code: u64) -> Option<Dtype> {
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
pub(super) fn code_of(d: Dtype) -> Option<u64> {
    (0..13).find(|&c| dtype_of(c) == Some(d))
}

/// One TOC entry.
pub(super) struct Chunk {
    pub(super) fourcc: String,
    pub(super) flags: u32,
    pub(super) offset: u64,
    pub(super) length: u64,
    pub(super) ulen: u64,
    pub(super) name: String,
    pub(super) blake3: [u8; 32],
    pub(super) toc_at: u64,
}

/// A chunk's content in `__aero`: JSON for MJSN when the Python writer's
/// bytes come back, MessagePack as JSON when it re-encodes exactly, else hex.
pub(super) fn content_to_meta(fourcc: &str, p: &[u8], m: &mut ChunkMeta) {
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

pub(super) fn meta_to_content(m: &ChunkMeta) -> std::result::Result<Vec<u8>, Reason> {
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
pub(super) fn control_digest(b: &[u8], chunks: &[Chunk], ranges: &[(u64, u64)]) -> [u8; 32] {
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
