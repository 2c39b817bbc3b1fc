//! FOLD's layout: its constants, the index as `__fold` keeps it, and the checks of an index entry.

use crate::convert::npz::Member;
use crate::convert::pyjson;
use crate::error::{input_at, reason, Reason, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The magic bytes.
pub const MAGIC: &[u8] = b"FOLDv1\0\0";
/// Name of the metadata array.
pub const META: &str = "__fold";
/// Spec limit: index bytes.
pub const MAX_INDEX: u64 = 100 << 20;
/// Spec limit: a chunk's stored, decoded or parity bytes.
pub const MAX_CHUNK: u64 = 1 << 30;
pub(super) const HEADER_LEN: u64 = 28;
/// The reference writer's zstd level.
pub(super) const ZSTD_LEVEL: i32 = 3;
pub(super) const CHUNK_HEADER_LEN: u64 = 32;
/// Index versions this reader was written against.
pub(super) const KNOWN_VERSIONS: [&str; 3] = ["1.0.0", "1.1.0", "1.2.0"];

/// `__fold`: what reading kept of a file besides its tensors, so that
/// writing gives the file back. Fields in the order `__fold` has always had
/// (its bytes are part of snapshots).
#[derive(Serialize, Deserialize)]
pub(super) struct FoldMeta {
    #[serde(default = "latest_version")]
    pub(super) version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) created_at_unix: Option<Value>,
    /// The index's `metadata`, less the hashes the writer computes.
    #[serde(default)]
    pub(super) metadata: Map<String, Value>,
    /// Whether the file carried `chunk_hashes` and `manifest_hash`.
    #[serde(default = "yes")]
    pub(super) chunk_hashes: bool,
    #[serde(default = "yes")]
    pub(super) manifest_hash: bool,
    #[serde(default)]
    pub(super) chunks: Vec<ChunkMeta>,
}

pub(super) fn latest_version() -> String {
    "1.2.0".into()
}

pub(super) fn yes() -> bool {
    true
}

/// One chunk, in file order.
#[derive(Serialize, Deserialize)]
pub(super) struct ChunkMeta {
    pub(super) name: String,
    pub(super) ctype: String,
    pub(super) flags: u64,
    #[serde(default = "no_ecc")]
    pub(super) ecc_algo: String,
    /// The stored (compressed) bytes, when our zstd would not give them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) stored_hex: Option<String>,
    /// NPZ0: each member's key and the array holding it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) arrays: Option<Vec<Member>>,
    /// NPZ0: the payload, when our NPZ writer would not give it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) payload_hex: Option<String>,
    /// Any other chunk: the array holding its payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) array: Option<String>,
}

pub(super) fn no_ecc() -> String {
    "none".into()
}

/// One chunk as the index describes it.
pub(super) struct Entry {
    pub(super) name: String,
    pub(super) ctype: String,
    pub(super) flags: u32,
    pub(super) offset: u64,
    pub(super) comp_len: u64,
    pub(super) uncomp_len: u64,
    pub(super) crc32c: u32,
    pub(super) sha256: String,
    pub(super) ecc: Option<usize>,
    pub(super) ecc_len: u64,
}

pub(super) fn ecc_of(algo: &str) -> std::result::Result<Option<usize>, Reason> {
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

pub(super) fn ecc_name(ecc: Option<usize>) -> String {
    ecc.map_or_else(|| "none".into(), |n| format!("rs({n})"))
}

pub(super) fn entry(c: &Value, i: usize, at: u64) -> Result<Entry> {
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
pub(super) fn hex_digest(s: &str) -> &str {
    s.strip_prefix("sha256:").unwrap_or(s)
}

/// The `manifest_hash` of an index's metadata: SHA-256 of
/// `json.dumps(metadata minus manifest_hash, sort_keys=True, separators=(",", ":"))`.
pub(super) fn manifest_hash(metadata: &Map<String, Value>) -> String {
    let mut m = metadata.clone();
    m.shift_remove("manifest_hash");
    let text = pyjson::dumps(&Value::Object(m), true, true);
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}
