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

use crate::convert::bytes::{be_u32, be_u64};
use crate::convert::container::WriteSeek;
use crate::convert::names::OriginalNames;
use crate::convert::npy::{self, Source};
use crate::convert::npz::Member;
use crate::convert::spill::Spill;
use crate::convert::{meta_array, meta_typed, npz, pyjson, rs, unseek, Notes, ReadAs};
use crate::error::{check_byte, input_at, Error, Result};
use crate::model::{assign_names, Array};

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

fn ecc_of(algo: &str) -> std::result::Result<Option<usize>, String> {
    if algo == "none" {
        return Ok(None);
    }
    algo.strip_prefix("rs(")
        .and_then(|s| s.strip_suffix(')'))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| (1..255).contains(n))
        .map(Some)
        .ok_or_else(|| format!("ecc_algo {algo:?}: expected \"none\" or \"rs(N)\" with N in 1..=254"))
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

/// Reads a FOLD file: tensors from `NPZ0` chunks, every other chunk and the
/// index as metadata arrays. Names are WTXT names already.
pub fn read(src: &Source, notes: &mut Notes) -> Result<Vec<Array>> {
    read_with(src, notes, ReadAs::Mapped)
}

/// The tensors of a FOLD file under their NPZ keys (`layer.0.weight`), for
/// a snapshot to map and keep in `__names`.
pub fn read_tensors(src: &Source, notes: &mut Notes) -> Result<Vec<Array>> {
    Ok(read_with(src, notes, ReadAs::OwnNames)?.into_iter().filter(|a| !a.is_metadata()).collect())
}

/// Like [`read`], and where our writer would not reproduce a chunk's bytes
/// (numpy's deflate in an NPZ0, another zstd's output), keeps the file's
/// own: `payload_hex` (the decoded payload) and `stored_hex` (the stored
/// bytes), so [`write`] gives this exact file back (the Git filter).
pub fn read_pinned(src: &Source, notes: &mut Notes) -> Result<Vec<Array>> {
    read_with(src, notes, ReadAs::Pinned)
}

fn read_with(src: &Source, notes: &mut Notes, how: ReadAs) -> Result<Vec<Array>> {
    let pin = how == ReadAs::Pinned;
    let Index { at, index, version, metadata, entries } = read_index(src.bytes(), notes)?;
    let index_off = at;
    let chunk_hashes = metadata.get("chunk_hashes").and_then(Value::as_object);

    let mut payloads = Vec::with_capacity(entries.len());
    for e in &entries {
        if let Some(h) = chunk_hashes.and_then(|m| m.get(&e.name)) {
            if h.as_str() != Some(e.sha256.as_str()) {
                return Err(check_byte(
                    at,
                    format!("chunk {:?}: metadata.chunk_hashes says {h}, the index says {}", e.name, e.sha256),
                ));
            }
        }
        payloads.push(chunk_payload(src, e, notes)?);
    }

    // Name everything: NPZ keys and `__fold_<chunk>` arrays share one pool.
    let mut originals: Vec<String> = vec![META.to_string()];
    let mut found: Vec<Vec<Array>> = Vec::with_capacity(entries.len());
    for (e, (p, _)) in entries.iter().zip(&payloads) {
        if e.ctype == "NPZ0" {
            let arrays = npz::read(p)
                .map_err(|err| input_at(e.offset, format!("chunk {:?} (NPZ0): {}", e.name, err.message())))?;
            originals.extend(arrays.iter().map(|a| a.name.clone()));
            found.push(arrays);
        } else {
            originals.push(format!("__fold_{}", e.name));
            found.push(Vec::new());
        }
    }
    if let Some(d) = crate::model::first_duplicate(&originals) {
        return Err(input_at(index_off, format!("index: two chunks or NPZ members are named {d:?}")));
    }
    let names = assign_names(&originals);
    let mut names = names.into_iter().skip(1);
    let mut out = Vec::new();
    let mut chunks_meta = Vec::with_capacity(entries.len());
    for ((e, (p, stored)), arrays) in entries.iter().zip(payloads).zip(found) {
        let mut m = ChunkMeta {
            name: e.name.clone(),
            ctype: e.ctype.clone(),
            flags: e.flags as u64,
            ecc_algo: ecc_name(e.ecc),
            stored_hex: None,
            arrays: None,
            payload_hex: None,
            array: None,
        };
        if pin {
            if let Some(stored) = &stored {
                if zstd::bulk::compress(p.bytes(), ZSTD_LEVEL).ok().as_deref() != Some(stored.bytes()) {
                    m.stored_hex = Some(hex::encode(stored.bytes()));
                }
            }
        }
        if e.ctype == "NPZ0" {
            let mut listed = Vec::new();
            let keys: Vec<(String, Array)> = arrays.iter().map(|a| (a.name.clone(), a.clone())).collect();
            for mut a in arrays {
                let name = names.next().expect("one name per original");
                let key =
                    if how == ReadAs::OwnNames { a.name.clone() } else { std::mem::replace(&mut a.name, name.clone()) };
                listed.push(Member { key, array: name });
                out.push(a);
            }
            m.arrays = Some(listed);
            if pin {
                let ours =
                    npz::write_keyed(keys.iter().map(|(k, a)| (k.as_str(), a)), std::io::Cursor::new(Vec::new()))?;
                if ours.into_inner() != p.bytes() {
                    m.payload_hex = Some(hex::encode(p.bytes()));
                }
            }
        } else {
            let name = names.next().expect("one name per original");
            m.array = Some(name.clone());
            let n = p.bytes().len();
            out.push(Array::new(name, crate::model::Dtype::U8, vec![n as u64], p.window(0..n))?);
        }
        chunks_meta.push(m);
    }
    let mut kept = metadata;
    let chunk_hashes = kept.shift_remove("chunk_hashes").is_some();
    let manifest_hash = kept.shift_remove("manifest_hash").is_some();
    let meta = FoldMeta {
        version,
        created_at_unix: index.get("created_at_unix").cloned(),
        metadata: kept,
        chunk_hashes,
        manifest_hash,
        chunks: chunks_meta,
    };
    out.push(meta_array(META, &serde_json::to_value(&meta).expect("metadata serializes"))?);
    Ok(out)
}

/// The JSON index at the end of a FOLD file, checked: its place, format,
/// chunk entries laid out apart, and the manifest hash.
struct Index {
    /// Where the index starts.
    at: u64,
    index: Value,
    version: String,
    metadata: Map<String, Value>,
    entries: Vec<Entry>,
}

fn read_index(b: &[u8], notes: &mut Notes) -> Result<Index> {
    let file_len = b.len() as u64;
    if file_len < HEADER_LEN || !b.starts_with(MAGIC) {
        return Err(input_at(0, "expected the FOLD magic \"FOLDv1\\0\\0\" and a 28-byte header"));
    }
    if be_u32(b, 8) as u64 != HEADER_LEN {
        return Err(input_at(8, format!("header_len is {}, expected 28", be_u32(b, 8))));
    }
    let (index_off, index_len) = (be_u64(b, 12), be_u64(b, 20));
    if index_len > MAX_INDEX {
        return Err(input_at(20, format!("index_len {index_len} exceeds the limit of {MAX_INDEX} bytes")));
    }
    if index_off < HEADER_LEN || index_off.checked_add(index_len) != Some(file_len) {
        return Err(input_at(
            12,
            format!("index at {index_off} with {index_len} bytes: expected it to end the {file_len}-byte file after the header"),
        ));
    }
    let index: Value = serde_json::from_slice(&b[index_off as usize..])
        .map_err(|e| input_at(index_off, format!("index is not JSON: {e}")))?;
    let at = index_off;
    if index.get("format").and_then(Value::as_str) != Some("fold") {
        return Err(input_at(at, "index: expected \"format\": \"fold\""));
    }
    let version = index.get("version").and_then(Value::as_str).unwrap_or("1.0.0").to_string();
    if !KNOWN_VERSIONS.contains(&version.as_str()) {
        notes.push(format!(
            "FOLD index version {version} is newer than this reader knows (1.2.0); reading what it understands"
        ));
    }
    let metadata = match index.get("metadata") {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(input_at(at, "index: \"metadata\" must be an object")),
    };
    let chunk_values = index
        .get("chunks")
        .and_then(Value::as_array)
        .ok_or_else(|| input_at(at, "index: expected a \"chunks\" list"))?;
    let entries: Vec<Entry> = chunk_values.iter().enumerate().map(|(i, c)| entry(c, i, at)).collect::<Result<_>>()?;
    check_layout(&entries, index_off)?;
    if let Some(want) = metadata.get("manifest_hash") {
        let have = manifest_hash(&metadata);
        if want.as_str() != Some(have.as_str()) {
            return Err(check_byte(at, format!("index: manifest_hash is {want}, the metadata hashes to {have}")));
        }
    }
    Ok(Index { at, index, version, metadata, entries })
}

/// Chunks lie between the header and the index, in bounds and without overlap.
fn check_layout(entries: &[Entry], index_off: u64) -> Result<()> {
    let mut spans = Vec::with_capacity(entries.len());
    for e in entries {
        for (what, v) in [("comp_len", e.comp_len), ("uncomp_len", e.uncomp_len), ("ecc_len", e.ecc_len)] {
            if v > MAX_CHUNK {
                return Err(input_at(
                    e.offset,
                    format!("chunk {:?}: {what} {v} exceeds the limit of {MAX_CHUNK}", e.name),
                ));
            }
        }
        let end = e
            .offset
            .checked_add(CHUNK_HEADER_LEN + e.comp_len + e.ecc_len)
            .filter(|&end| e.offset >= HEADER_LEN && end <= index_off);
        let end = end.ok_or_else(|| {
            input_at(
                e.offset,
                format!(
                    "chunk {:?} at {} does not fit between the header and the index at {index_off}",
                    e.name, e.offset
                ),
            )
        })?;
        spans.push((e.offset, end, &e.name));
    }
    spans.sort();
    if let Some(w) = spans.windows(2).find(|w| w[1].0 < w[0].1) {
        return Err(input_at(w[1].0, format!("chunk {:?} overlaps chunk {:?}", w[1].2, w[0].2)));
    }
    Ok(())
}

/// One chunk's decoded payload, after ECC, CRC32C, SHA-256 and decompression.
/// One chunk's decoded payload and, when it was compressed, its stored bytes.
fn chunk_payload(src: &Source, e: &Entry, notes: &mut Notes) -> Result<(Source, Option<Source>)> {
    let b = src.bytes();
    let at = e.offset as usize;
    let h = &b[at..at + CHUNK_HEADER_LEN as usize];
    let agree = &h[..4] == e.ctype.as_bytes()
        && be_u32(h, 4) == e.flags
        && be_u64(h, 8) == e.uncomp_len
        && be_u64(h, 16) == e.comp_len
        && be_u32(h, 24) == e.crc32c
        && be_u32(h, 28) as u64 == e.ecc_len;
    if !agree {
        return Err(check_byte(e.offset, format!("chunk {:?}: its header disagrees with the index", e.name)));
    }
    let start = at + CHUNK_HEADER_LEN as usize;
    let comp_end = start + e.comp_len as usize;
    let parity = &b[comp_end..comp_end + e.ecc_len as usize];
    // Without ECC the stored bytes are read where they lie; a repair works
    // on a private copy.
    let comp = match e.ecc {
        None if e.ecc_len != 0 => {
            return Err(input_at(
                e.offset + 28,
                format!("chunk {:?}: ecc_len {} without an ECC algorithm", e.name, e.ecc_len),
            ))
        }
        None => src.sub(start..comp_end),
        Some(nsym) => {
            let mut copy = crate::convert::spill::Writable::copy_of(&b[start..comp_end])?;
            match rs::correct(copy.bytes_mut(), parity, nsym) {
                Ok(0) => {}
                Ok(n) => notes.push(format!("FOLD chunk {:?}: repaired {n} corrupted bytes with rs({nsym})", e.name)),
                Err(rs::RsError::Length { expected, found }) => {
                    return Err(input_at(
                        e.offset + 28,
                        format!(
                            "chunk {:?}: rs({nsym}) needs {expected} parity bytes for {} bytes, ecc_len is {found}",
                            e.name, e.comp_len
                        ),
                    ))
                }
                Err(rs::RsError::Uncorrectable { block }) => {
                    return Err(check_byte(
                        e.offset,
                        format!("chunk {:?}: block {block} has more errors than rs({nsym}) can repair", e.name),
                    ))
                }
            }
            copy.into_source()?
        }
    };
    // Read in windows, each dropped once read: a 1 GiB chunk is never
    // wholly resident (neither here nor in the decompressor below).
    let stored_data = comp.window(0..comp.bytes().len());
    let (mut crc, mut sha) = (0u32, Sha256::new());
    stored_data.each_window(&mut |w| {
        crc = crc32c::crc32c_append(crc, w);
        sha.update(w);
        Ok(())
    })?;
    if crc != e.crc32c {
        return Err(check_byte(start as u64, format!("chunk {:?}: CRC32C is {crc}, expected {}", e.name, e.crc32c)));
    }
    let sha = hex::encode(sha.finalize());
    if sha != hex_digest(&e.sha256) {
        return Err(check_byte(
            start as u64,
            format!("chunk {:?}: SHA-256 is {sha}, the index says {}", e.name, e.sha256),
        ));
    }
    let (raw, stored) = match e.flags {
        1 => {
            let raw = crate::convert::zstd_exact(stored_data.reader(), e.uncomp_len)
                .map_err(|m| input_at(start as u64, format!("chunk {:?}: {m}", e.name)))?;
            (raw, Some(comp))
        }
        _ => (comp, None),
    };
    if raw.bytes().len() as u64 != e.uncomp_len {
        return Err(input_at(
            start as u64,
            format!("chunk {:?}: {} bytes, uncomp_len says {}", e.name, raw.bytes().len(), e.uncomp_len),
        ));
    }
    Ok((raw, stored))
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

/// The most an NPZ member can add to an archive besides its array's bytes:
/// the `.npy` header, the key twice (local and central headers, `.npy`
/// added), the fixed header fields and their Zip64 extras.
fn npz_member_bound(key: &str, a: &Array) -> Result<u64> {
    Ok(npy::header(a)?.len() as u64 + 2 * (key.len() as u64 + 4) + 30 + 20 + 46 + 28 + a.bytes().len() as u64)
}

/// Most bytes an NPZ0 chunk's archive may hold: 1 GiB less 1/128, so that
/// even incompressible data, which zstd grows by at most 1/256 and a few
/// bytes, is stored within [`MAX_CHUNK`].
const NPZ_LIMIT: u64 = MAX_CHUNK - MAX_CHUNK / 128;

/// An archive's own bytes: its end records, Zip64 ones included.
const NPZ_TRAILER_BOUND: u64 = 22 + 56 + 20;

/// Members cut, in order, into archives of at most `limit` bytes each: a
/// FOLD chunk may hold 1 GiB ([`MAX_CHUNK`]), so a larger model takes
/// several `NPZ0` chunks. A member that alone exceeds the limit cannot be
/// stored in FOLD at all.
fn npz_groups<'a>(members: Vec<(&'a str, &'a Array)>, limit: u64) -> Result<Vec<Vec<(&'a str, &'a Array)>>> {
    let mut groups: Vec<Vec<(&str, &Array)>> = Vec::new();
    let mut size = 0;
    for (key, a) in members {
        let add = npz_member_bound(key, a)?;
        if add + NPZ_TRAILER_BOUND > limit {
            return Err(Error::input(
                Default::default(),
                format!(
                    "array {key} is {} bytes: a FOLD chunk holds at most {MAX_CHUNK} (the FOLD spec's MAX_CHUNK_SIZE; \
                     {limit} of NPZ, leaving room for compression), and NPZ0 keeps each array whole in one chunk \
                     (use --to safetensors or aero)",
                    a.bytes().len()
                ),
            ));
        }
        match groups.last_mut() {
            Some(g) if size + add + NPZ_TRAILER_BOUND <= limit => {
                g.push((key, a));
                size += add;
            }
            _ => {
                groups.push(vec![(key, a)]);
                size = add;
            }
        }
    }
    Ok(groups)
}

/// Refuses, from sizes alone, tensors that no FOLD chunk can hold.
pub fn check_sizes(arrays: &[Array]) -> Result<()> {
    npz_groups(arrays.iter().filter(|a| !a.is_metadata()).map(|a| (a.name.as_str(), a)).collect(), NPZ_LIMIT)
        .map(|_| ())
}

/// Names for the chunks that hold arrays `__fold` does not place:
/// `arrays`, then `arrays_1`, `arrays_2`, ..., skipping names it uses.
fn rest_chunk_names(taken: &[ChunkMeta]) -> impl Iterator<Item = String> + '_ {
    (0..)
        .map(|i| if i == 0 { "arrays".to_string() } else { format!("arrays_{i}") })
        .filter(|name| taken.iter().all(|c| &c.name != name))
}

/// A chunk's payload before it is stored.
enum Payload<'a> {
    /// An NPZ of these members (key, array), built when the chunk is written.
    Npz(Vec<(&'a str, &'a Array)>),
    /// Bytes as they are: a non-NPZ chunk's array.
    Bytes(&'a Array),
    /// The NPZ payload `__fold` pins (`payload_hex`), which still holds
    /// exactly the chunk's members.
    Pinned(Vec<u8>),
}

/// A chunk about to be written.
struct Planned<'a> {
    name: String,
    ctype: String,
    flags: u32,
    ecc: Option<usize>,
    payload: Payload<'a>,
    /// The original stored bytes, when `__fold` pins them.
    stored: Option<Vec<u8>>,
}

/// A pinned NPZ0 payload (`payload_hex`) when it still holds exactly these
/// members, keys and bytes; else `None` and the chunk is re-emitted.
fn pinned_npz(c: &ChunkMeta, members: &[(&str, &Array)]) -> Option<Vec<u8>> {
    let p = hex::decode(c.payload_hex.as_deref()?).ok()?;
    let held = npz::read(&Source::Owned(std::sync::Arc::new(p.clone()))).ok()?;
    let same = held.len() == members.len()
        && held
            .iter()
            .zip(members)
            .all(|(h, (k, a))| h.name == *k && h.dtype == a.dtype && h.shape == a.shape && h.bytes() == a.bytes());
    same.then_some(p)
}

/// Why chunks could not be planned: `__fold` is wrong, or an array is.
enum PlanError {
    Meta(String),
    Other(Error),
}

impl From<Error> for PlanError {
    fn from(e: Error) -> PlanError {
        PlanError::Other(e)
    }
}

/// The chunks to write: those `__fold` lists, in its order; then any
/// arrays it does not place, in as many NPZ0 chunks as their size needs.
fn plan_chunks<'a>(
    arrays: &'a [Array],
    listed: &'a [ChunkMeta],
    limit: u64,
) -> std::result::Result<Vec<Planned<'a>>, PlanError> {
    let find = |name: &str| {
        arrays.iter().find(|a| a.name == name).ok_or_else(|| PlanError::Meta(format!("array {name} is missing")))
    };
    let mut plan: Vec<Planned> = Vec::new();
    let mut used: std::collections::HashSet<&str> = [META].into_iter().collect();
    for c in listed {
        let name = &c.name;
        if c.ctype.len() != 4 {
            return Err(PlanError::Meta(format!("chunk {name:?}: ctype must be 4 bytes")));
        }
        if c.flags > 1 {
            return Err(PlanError::Meta(format!("chunk {name:?}: flags must be 0 or 1")));
        }
        if plan.iter().any(|p| &p.name == name) {
            return Err(PlanError::Meta(format!("chunk {name:?} is listed twice")));
        }
        let ecc = ecc_of(&c.ecc_algo).map_err(PlanError::Meta)?;
        let payload = if c.ctype == "NPZ0" {
            let mut members = Vec::new();
            for m in c.arrays.as_deref().unwrap_or(&[]) {
                let a = find(&m.array)?;
                used.insert(&a.name);
                members.push((m.key.as_str(), a));
            }
            match pinned_npz(c, &members) {
                Some(p) => Payload::Pinned(p),
                None => Payload::Npz(members),
            }
        } else {
            let arr = c.array.as_deref().ok_or_else(|| PlanError::Meta(format!("chunk {name:?} lacks \"array\"")))?;
            let a = find(arr)?;
            used.insert(&a.name);
            Payload::Bytes(a)
        };
        let stored = c.stored_hex.as_deref().and_then(|h| hex::decode(h).ok());
        plan.push(Planned { name: name.clone(), ctype: c.ctype.clone(), flags: c.flags as u32, ecc, payload, stored });
    }
    let rest: Vec<(&str, &Array)> =
        arrays.iter().filter(|a| !used.contains(a.name.as_str())).map(|a| (a.name.as_str(), a)).collect();
    let groups = npz_groups(rest, limit)?;
    for (g, name) in groups.into_iter().zip(rest_chunk_names(listed)) {
        let payload = Payload::Npz(g);
        plan.push(Planned { name, ctype: "NPZ0".into(), flags: 1, ecc: None, payload, stored: None });
    }
    Ok(plan)
}

/// Chunks whose payload is at most this many bytes are compressed in one
/// call, as every earlier version did (so files the Git filter rebuilds
/// keep their bytes); larger ones as a stream, which keeps memory bounded
/// (zstd's streaming output differs from its one-shot output, but is as
/// deterministic and decodes the same).
const ONE_SHOT: u64 = 64 << 20;

/// Writes arrays as FOLD, following `__fold` when present. Each chunk is
/// compressed and hashed as it goes to `out` (a large NPZ never held: see
/// `convert::unseek`), and its header filled in afterwards: memory stays
/// bounded whatever the model's size.
pub fn write_to(arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
    write_limited(arrays, out, NPZ_LIMIT)
}

/// The original names `__fold` keeps among `arrays` (each NPZ0 member's
/// key, with the array holding it), for writers of other formats.
pub fn kept_names(arrays: &[Array]) -> Result<Option<OriginalNames>> {
    let Some(meta) = meta_typed::<FoldMeta>(arrays, META)? else { return Ok(None) };
    let members = meta.chunks.into_iter().flat_map(|c| c.arrays.unwrap_or_default());
    Ok(OriginalNames::from_pairs(members.map(|m| (m.array, m.key))))
}

/// [`write_to`] with NPZ0 chunks of at most `limit` bytes.
fn write_limited(arrays: &[Array], out: &mut dyn WriteSeek, limit: u64) -> Result<()> {
    if let Some(a) = arrays.iter().find(|a| a.dtype == crate::model::Dtype::Bf16) {
        return Err(Error::input(
            Default::default(),
            format!(
                "FOLD keeps tensors in NPZ0 chunks and NumPy has no bfloat16: array {} is bf16 (use --to aero or safetensors)",
                a.name
            ),
        ));
    }
    let bad = |m: String| Error::input(Default::default(), format!("{META}: {m}"));
    let meta = meta_typed(arrays, META)?.unwrap_or(FoldMeta {
        version: latest_version(),
        created_at_unix: None,
        metadata: Map::new(),
        chunk_hashes: true,
        manifest_hash: true,
        chunks: Vec::new(),
    });
    let plan = plan_chunks(arrays, &meta.chunks, limit).map_err(|e| match e {
        PlanError::Meta(m) => bad(m),
        PlanError::Other(e) => e,
    })?;
    let mut pos = HEADER_LEN;
    out.write_all(&[0; HEADER_LEN as usize]).map_err(Error::write_failed)?;
    let mut index_chunks = Vec::with_capacity(plan.len());
    let mut hashes = Map::new();
    for chunk in plan {
        let (entry, sha) = write_chunk(out, &mut pos, chunk).map_err(|e| match e {
            PlanError::Meta(m) => bad(m),
            PlanError::Other(e) => e,
        })?;
        hashes.insert(entry["name"].as_str().expect("a name").to_string(), json!(sha));
        index_chunks.push(entry);
    }
    let mut metadata = meta.metadata;
    if meta.chunk_hashes {
        metadata.insert("chunk_hashes".into(), Value::Object(hashes));
    }
    if meta.manifest_hash {
        let h = manifest_hash(&metadata);
        metadata.insert("manifest_hash".into(), json!(h));
    }
    let mut index = Map::new();
    index.insert("format".into(), json!("fold"));
    index.insert("version".into(), json!(meta.version));
    index.insert("created_at_unix".into(), meta.created_at_unix.unwrap_or_else(|| json!(0.0)));
    index.insert("metadata".into(), Value::Object(metadata));
    index.insert("chunks".into(), Value::Array(index_chunks));
    let text = pyjson::dumps(&Value::Object(index), false, false);
    out.write_all(text.as_bytes()).map_err(Error::write_failed)?;
    let mut header = Vec::with_capacity(HEADER_LEN as usize);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&(HEADER_LEN as u32).to_be_bytes());
    header.extend_from_slice(&pos.to_be_bytes());
    header.extend_from_slice(&(text.len() as u64).to_be_bytes());
    patch(out, 0, &header, pos + text.len() as u64)
}

/// Writes `bytes` at `at`, then goes back to `end`.
fn patch(out: &mut dyn WriteSeek, at: u64, bytes: &[u8], end: u64) -> Result<()> {
    out.seek(SeekFrom::Start(at)).map_err(Error::write_failed)?;
    out.write_all(bytes).map_err(Error::write_failed)?;
    out.seek(SeekFrom::Start(end)).map_err(Error::write_failed)?;
    Ok(())
}

/// Writes one chunk at `pos` (header, stored bytes, parity) and returns its
/// index entry and SHA-256.
fn write_chunk(out: &mut dyn WriteSeek, pos: &mut u64, c: Planned) -> std::result::Result<(Value, String), PlanError> {
    let Planned { name, ctype, flags, ecc, payload, stored } = c;
    let built = match payload {
        Payload::Npz(members) => {
            let mut bound = NPZ_TRAILER_BOUND;
            for (k, a) in &members {
                bound += npz_member_bound(k, a)?;
            }
            let write = move |w: &mut dyn WriteSeek| npz::write_keyed(members.iter().copied(), w).map(|_| ());
            // Too large to hold: the NPZ's bytes go straight into the compressor.
            let learned = if bound > ONE_SHOT { Some(unseek::learn(&write)?) } else { None };
            match learned {
                Some(learned) if learned.len() > ONE_SHOT => Built::Npz(Box::new(write), learned),
                _ => {
                    let mut c = std::io::Cursor::new(Vec::new());
                    write(&mut c)?;
                    Built::Bytes(Source::Owned(std::sync::Arc::new(c.into_inner())))
                }
            }
        }
        Payload::Bytes(a) => Built::Bytes(Source::from(&a.data)),
        Payload::Pinned(p) => Built::Bytes(Source::Owned(std::sync::Arc::new(p))),
    };
    let len = match &built {
        Built::Bytes(b) => b.bytes().len() as u64,
        Built::Npz(_, learned) => learned.len(),
    };
    if len > MAX_CHUNK {
        return Err(PlanError::Meta(format!("chunk {name:?}: {len} bytes exceed the FOLD limit of {MAX_CHUNK}")));
    }
    let offset = *pos;
    out.write_all(&[0; CHUNK_HEADER_LEN as usize]).map_err(Error::write_failed)?;
    let mut sink = Stored::new(out, ecc)?;
    let zerr = |e| Error::io_in("zstd", e);
    match built {
        Built::Bytes(payload) => {
            // Stored bytes `__fold` pins are kept when they still decode to the payload.
            let stored = stored.filter(|st| {
                flags == 1 && crate::convert::zstd_exact(&st[..], len).is_ok_and(|s| s.bytes() == payload.bytes())
            });
            if let Some(st) = stored {
                sink.write_all(&st).map_err(Error::write_failed)?;
            } else if flags == 1 && len <= ONE_SHOT {
                let comp = zstd::bulk::compress(payload.bytes(), ZSTD_LEVEL).map_err(zerr)?;
                sink.write_all(&comp).map_err(Error::write_failed)?;
            } else if flags == 1 {
                let mut z = zstd_stream(&mut sink, len)?;
                payload.window(0..len as usize).each_window(&mut |w| z.write_all(w).map_err(Error::write_failed))?;
                z.finish().map_err(zerr)?;
            } else {
                payload.window(0..len as usize).each_window(&mut |w| sink.write_all(w).map_err(Error::write_failed))?;
            }
        }
        Built::Npz(write, learned) if flags == 1 => {
            let mut z = zstd_stream(&mut sink, len)?;
            learned.emit(&*write, &mut z)?;
            z.finish().map_err(zerr)?;
        }
        Built::Npz(write, learned) => learned.emit(&*write, &mut sink)?,
    }
    let (comp_len, crc, sha, parity) = sink.finish()?;
    let parity_len = parity.bytes().len() as u64;
    // What a reader refuses is never written (the output is not yet under its name).
    for (what, n) in [("stored bytes", comp_len), ("parity bytes", parity_len)] {
        if n > MAX_CHUNK {
            return Err(PlanError::Meta(format!("chunk {name:?}: {n} {what} exceed the FOLD limit of {MAX_CHUNK}")));
        }
    }
    out.write_all(parity.bytes()).map_err(Error::write_failed)?;
    let end = offset + CHUNK_HEADER_LEN + comp_len + parity_len;
    let mut header = Vec::with_capacity(CHUNK_HEADER_LEN as usize);
    header.extend_from_slice(&ctype.as_bytes()[..4]);
    header.extend_from_slice(&flags.to_be_bytes());
    header.extend_from_slice(&len.to_be_bytes());
    header.extend_from_slice(&comp_len.to_be_bytes());
    header.extend_from_slice(&crc.to_be_bytes());
    header.extend_from_slice(&(parity_len as u32).to_be_bytes());
    patch(out, offset, &header, end)?;
    *pos = end;
    let sha = format!("sha256:{sha}");
    let entry = json!({
        "name": name, "ctype": ctype, "flags": flags, "offset": offset, "header_len": CHUNK_HEADER_LEN,
        "comp_len": comp_len, "uncomp_len": len, "crc32c": crc, "sha256": sha,
        "ecc_algo": ecc_name(ecc), "ecc_len": parity_len,
    });
    Ok((entry, sha))
}

/// A chunk's payload, ready: bytes at hand, or an NPZ too large to hold,
/// written again straight into the compressor.
enum Built<'a> {
    Bytes(Source),
    Npz(Box<unseek::Writer<'a>>, unseek::Learned),
}

/// A zstd stream at [`ZSTD_LEVEL`] of `len` bytes (pledged: the frame
/// records the size, as a one-shot compression does).
fn zstd_stream<'w, 's>(
    to: &'w mut Stored<'s>,
    len: u64,
) -> Result<zstd::stream::write::Encoder<'static, &'w mut Stored<'s>>> {
    let zerr = |e| Error::io_in("zstd", e);
    let mut z = zstd::stream::write::Encoder::new(to, ZSTD_LEVEL).map_err(zerr)?;
    z.set_pledged_src_size(Some(len)).map_err(zerr)?;
    z.include_contentsize(true).map_err(zerr)?;
    Ok(z)
}

/// Where a chunk's stored bytes go: to the output, through CRC32C, SHA-256
/// and (with ECC) the Reed-Solomon encoder, whose parity waits in a
/// buffer that spills to disk (rs(254) makes 254 bytes of it per byte).
struct Stored<'w> {
    out: &'w mut dyn WriteSeek,
    len: u64,
    crc: u32,
    sha: Sha256,
    parity: Option<(rs::Encoder, Spill)>,
}

impl<'w> Stored<'w> {
    fn new(out: &'w mut dyn WriteSeek, ecc: Option<usize>) -> Result<Stored<'w>> {
        let parity = match ecc {
            Some(n) => Some((rs::Encoder::new(n), Spill::with_expected(0)?)),
            None => None,
        };
        Ok(Stored { out, len: 0, crc: 0, sha: Sha256::new(), parity })
    }

    /// Stored length, CRC32C, SHA-256 (hex) and parity.
    fn finish(self) -> Result<(u64, u32, String, Source)> {
        let parity = match self.parity {
            Some((enc, mut spill)) => {
                spill.push(&enc.finish())?;
                spill.finish()?
            }
            None => Source::Owned(std::sync::Arc::new(Vec::new())),
        };
        Ok((self.len, self.crc, hex::encode(self.sha.finalize()), parity))
    }
}

impl Write for Stored<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.out.write_all(b)?;
        self.len += b.len() as u64;
        self.crc = crc32c::crc32c_append(self.crc, b);
        self.sha.update(b);
        if let Some((enc, spill)) = &mut self.parity {
            enc.update(b);
            spill.write_all(&enc.take())?;
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
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
        let back = read(&Source::Owned(std::sync::Arc::new(out.into_inner())), &mut Vec::new()).unwrap();
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
