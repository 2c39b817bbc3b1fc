//! FOLD / `.mind` (pyfolds): a 28-byte big-endian header, chunks of
//! `header(32) + payload + ECC parity`, and a JSON index at the end.
//!
//! Read: every chunk is bounds-checked, its Reed-Solomon parity applied
//! (bytes repaired are reported), its CRC32C, SHA-256, `chunk_hashes` entry
//! and the index's `manifest_hash` checked, then decompressed to exactly its
//! declared size. `NPZ0` chunks become typed arrays (named by their keys);
//! every other chunk (`JSON`, `TSAV`, `STEN`, ...) is kept byte for byte as a
//! u8 array `__fold_<chunk>`; the index, minus what the writer recomputes,
//! is the JSON array `__fold` (docs/FORMAT.md, "Metadata arrays").
//! Write: the chunks `__fold` lists, in its order, with their compression and
//! ECC; arrays it does not list go into more `NPZ0` chunks (`arrays`,
//! `arrays_1`, ...: a chunk holds at most 1 GiB). Streamed: memory stays
//! bounded whatever the model's size.
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use std::io::{SeekFrom, Write};

use crate::buffer::ArrayData;
use crate::buffer::Spill;
use crate::convert::bytes::{be_u32, be_u64};
use crate::convert::common::{meta_array, meta_typed, Notes, ReadAs};
use crate::convert::container::WriteSeek;
use crate::convert::container::{with_original_names, MetaLayout};
use crate::convert::names;
use crate::convert::names::OriginalNames;
use crate::convert::npy;
use crate::convert::npz::Member;
use crate::convert::{npz, pyjson, rs, unseek};
use crate::error::{check_byte, input_at, reason, Error, Reason, Result};
use crate::model::{assign_names, Array};

mod read;
mod write;

pub use read::*;
pub use write::*;
use write::{npz_groups, rest_chunk_names, NPZ_LIMIT};

/// The magic bytes.
pub const MAGIC: &[u8] = b"FOLDv1\0\0";
/// Name of the metadata array.
pub const META: &str = "__fold";
/// Spec limit: index bytes.
pub const MAX_INDEX: u64 = 100 << 20;
/// Spec limit: a chunk's stored, decoded or parity bytes.
pub const MAX_CHUNK: u64 = 1 << 30;
const HEADER_LEN: u64 = 28;
/// The reference writer's zstd level.
const ZSTD_LEVEL: i32 = 3;
const CHUNK_HEADER_LEN: u64 = 32;
/// Index versions this reader was written against.
const KNOWN_VERSIONS: [&str; 3] = ["1.0.0", "1.1.0", "1.2.0"];

/// `__fold`: what reading kept of a file besides its tensors, so that
/// writing gives the file back. Fields in the order `__fold` has always had
/// (its bytes are part of snapshots).
#[derive(Serialize, Deserialize)]
struct FoldMeta {
    #[serde(default = "latest_version")]
    version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    created_at_unix: Option<Value>,
    /// The index's `metadata`, less the hashes the writer computes.
    #[serde(default)]
    metadata: Map<String, Value>,
    /// Whether the file carried `chunk_hashes` and `manifest_hash`.
    #[serde(default = "yes")]
    chunk_hashes: bool,
    #[serde(default = "yes")]
    manifest_hash: bool,
    #[serde(default)]
    chunks: Vec<ChunkMeta>,
}

fn latest_version() -> String {
    "1.2.0".into()
}

fn yes() -> bool {
    true
}

/// One chunk, in file order.
#[derive(Serialize, Deserialize)]
struct ChunkMeta {
    name: String,
    ctype: String,
    flags: u64,
    #[serde(default = "no_ecc")]
    ecc_algo: String,
    /// The stored (compressed) bytes, when our zstd would not give them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stored_hex: Option<String>,
    /// NPZ0: each member's key and the array holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arrays: Option<Vec<Member>>,
    /// NPZ0: the payload, when our NPZ writer would not give it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload_hex: Option<String>,
    /// Any other chunk: the array holding its payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    array: Option<String>,
}

fn no_ecc() -> String {
    "none".into()
}

/// One chunk as the index describes it.
struct Entry {
    name: String,
    ctype: String,
    flags: u32,
    offset: u64,
    comp_len: u64,
    uncomp_len: u64,
    crc32c: u32,
    sha256: String,
    ecc: Option<usize>,
    ecc_len: u64,
}

fn ecc_of(algo: &str) -> std::result::Result<Option<usize>, Reason> {
    if algo == "none" {
        return Ok(None);
    }
    algo.strip_prefix("rs(")
        .and_then(|s| s.strip_suffix(')'))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| (1..255).contains(n))
        .map(Some)
        .ok_or_else(|| reason!("ecc_algo {algo:?}: expected \"none\" or \"rs(N)\" with N in 1..=254"))
}

fn ecc_name(ecc: Option<usize>) -> String {
    ecc.map_or_else(|| "none".into(), |n| format!("rs({n})"))
}

fn entry(c: &Value, i: usize, at: u64) -> Result<Entry> {
    let field = |k: &str| c.get(k).ok_or_else(|| input_at(at, format!("index chunks[{i}]: missing {k:?}")));
    let uint = |k: &str| {
        field(k)?.as_u64().ok_or_else(|| input_at(at, format!("index chunks[{i}].{k}: expected an unsigned integer")))
    };
    let text = |k: &str| {
        field(k)?
            .as_str()
            .map(String::from)
            .ok_or_else(|| input_at(at, format!("index chunks[{i}].{k}: expected a string")))
    };
    let ctype = text("ctype")?;
    if ctype.len() != 4 || !ctype.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(input_at(at, format!("index chunks[{i}].ctype {ctype:?}: expected 4 ASCII characters")));
    }
    let flags = uint("flags")?;
    if flags > 1 {
        return Err(input_at(at, format!("index chunks[{i}].flags {flags}: expected 0 (none) or 1 (zstd)")));
    }
    if uint("header_len")? != CHUNK_HEADER_LEN {
        return Err(input_at(at, format!("index chunks[{i}].header_len: expected {CHUNK_HEADER_LEN}")));
    }
    let crc = uint("crc32c")?;
    let ecc = ecc_of(&text("ecc_algo")?).map_err(|m| input_at(at, format!("index chunks[{i}]: {m}")))?;
    Ok(Entry {
        name: text("name")?,
        ctype,
        flags: flags as u32,
        offset: uint("offset")?,
        comp_len: uint("comp_len")?,
        uncomp_len: uint("uncomp_len")?,
        crc32c: u32::try_from(crc).map_err(|_| input_at(at, format!("index chunks[{i}].crc32c: over 32 bits")))?,
        sha256: text("sha256")?,
        ecc,
        ecc_len: uint("ecc_len")?,
    })
}

/// `"sha256:<hex>"` as pyfolds writes it (a bare hex digest is accepted).
fn hex_digest(s: &str) -> &str {
    s.strip_prefix("sha256:").unwrap_or(s)
}

/// The `manifest_hash` of an index's metadata: SHA-256 of
/// `json.dumps(metadata minus manifest_hash, sort_keys=True, separators=(",", ":"))`.
fn manifest_hash(metadata: &Map<String, Value>) -> String {
    let mut m = metadata.clone();
    m.shift_remove("manifest_hash");
    let text = pyjson::dumps(&Value::Object(m), true, true);
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// The `__fold` that reading back [`write_to`]'s output for `tensors` alone
/// gives: `NPZ0` chunks `arrays`, `arrays_1`, ... (none when there are no
/// tensors; `None` when they do not fit FOLD's chunks).
pub fn default_meta(tensors: &[Array]) -> Option<Value> {
    let members: Vec<(&str, &Array)> = tensors.iter().map(|a| (a.name.as_str(), a)).collect();
    let groups = npz_groups(members, NPZ_LIMIT).ok()?;
    let names = rest_chunk_names(&[]);
    let chunks = groups
        .into_iter()
        .zip(names)
        .map(|(g, name)| ChunkMeta {
            name,
            ctype: "NPZ0".into(),
            flags: 1,
            ecc_algo: no_ecc(),
            stored_hex: None,
            arrays: Some(g.iter().map(|(k, a)| Member { key: k.to_string(), array: a.name.clone() }).collect()),
            payload_hex: None,
            array: None,
        })
        .collect();
    let meta = FoldMeta {
        version: latest_version(),
        created_at_unix: Some(json!(0.0)),
        metadata: Map::new(),
        chunk_hashes: true,
        manifest_hash: true,
        chunks,
    };
    Some(serde_json::to_value(&meta).expect("metadata serializes"))
}

/// The fold row of the container table.
pub(crate) static FOLD: MetaLayout = MetaLayout {
    name: "fold",
    extensions: &["fold", "mind"],
    magic: MAGIC,
    metadata: &[META, names::NAMES],
    read,
    read_tensors,
    read_pinned,
    write: write_to,
    default_meta,
    kept_names,
    check_sizes: |arrays| check_sizes(&with_original_names(arrays, META)?),
    verbatim: false,
};

#[cfg(test)]
mod tests {
    use super::write::write_limited;
    use super::*;
    use crate::model::Dtype;

    fn u8s(name: &str, n: usize) -> Array {
        Array::new(name, Dtype::U8, vec![n as u64], (0..n).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>().into())
            .unwrap()
    }

    #[test]
    fn arrays_past_a_chunks_limit_go_into_more_npz0_chunks() {
        let arrays = [u8s("a", 1000), u8s("b", 1000), u8s("c", 1000)];
        let mut out = std::io::Cursor::new(Vec::new());
        write_limited(&arrays, &mut out, 3000).unwrap();
        let back = read(&ArrayData::Owned(std::sync::Arc::new(out.into_inner())), &mut Vec::new()).unwrap();
        let meta: FoldMeta = meta_typed(&back, META).unwrap().unwrap();
        let chunks: Vec<(&str, usize)> =
            meta.chunks.iter().map(|c| (c.name.as_str(), c.arrays.as_ref().unwrap().len())).collect();
        assert_eq!(chunks, [("arrays", 2), ("arrays_1", 1)]);
        for a in &arrays {
            let b = back.iter().find(|b| b.name == a.name).unwrap();
            assert_eq!((b.dtype, &b.shape, b.bytes()), (a.dtype, &a.shape, a.bytes()));
        }
        // An array that alone exceeds the limit has no place in FOLD.
        let err = write_limited(&arrays, &mut std::io::Cursor::new(Vec::new()), 1000).unwrap_err();
        assert!(err.message().contains("array a is 1000 bytes"), "{err}");
    }
}
