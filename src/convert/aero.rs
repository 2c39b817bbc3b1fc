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
use crate::convert::names::OriginalNames;
use crate::convert::npy::Source;
use crate::convert::ReadAs;
use crate::convert::{meta_array, meta_typed, msgpack, pyjson, zstd_exact, Notes};
use crate::error::{check_byte, input_at, Error, Result};
use crate::model::{assign_names, Array, ArrayData, Dtype};

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

fn code_of(d: Dtype) -> u64 {
    (0..13).find(|&c| dtype_of(c) == Some(d)).expect("every dtype has a code")
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

/// Reads an AERO file. Names are WTXT names already; the file's own are
/// kept in `__aero`.
pub fn read(src: &Source, notes: &mut Notes) -> Result<Vec<Array>> {
    read_with(src, notes, ReadAs::Mapped)
}

/// The tensors of an AERO file under the names the file gives them
/// (`layer.0.weight`), for a snapshot to map and keep in `__names`.
pub fn read_tensors(src: &Source, notes: &mut Notes) -> Result<Vec<Array>> {
    let arrays = read_with(src, notes, ReadAs::OwnNames)?;
    Ok(arrays.into_iter().filter(|a| a.name != META).collect())
}

/// Like [`read`], and where our zstd would not reproduce a compressed
/// chunk's stored bytes, keeps them (`stored_hex`), so [`write`] gives this
/// exact file back (the Git filter).
pub fn read_pinned(src: &Source, notes: &mut Notes) -> Result<Vec<Array>> {
    read_with(src, notes, ReadAs::Pinned)
}

/// The header and the TOC: every chunk's place, checked against the file,
/// the spec's limits and each other, before anything is read.
fn read_toc(b: &[u8]) -> Result<(u16, u16, Vec<Chunk>)> {
    let file_len = b.len() as u64;
    if file_len < HEADER_SIZE || !b.starts_with(MAGIC) {
        return Err(input_at(0, "expected the AERO magic and a 96-byte header"));
    }
    let (major, minor) = (le_u16(b, 4), le_u16(b, 6));
    if major != 0 || !(1..=2).contains(&minor) {
        return Err(input_at(4, format!("version {major}.{minor}: this reader reads AERO 0.1 and 0.2")));
    }
    if le_u32(b, 8) as u64 != HEADER_SIZE {
        return Err(input_at(8, format!("header_size is {}, expected 96", le_u32(b, 8))));
    }
    let (toc_off, toc_len, st_off, st_len, file_flags) =
        (le_u64(b, 12), le_u64(b, 20), le_u64(b, 28), le_u64(b, 36), le_u64(b, 44));
    if file_flags != 0 {
        return Err(input_at(44, format!("file_flags is {file_flags:#x}, only 0 is valid")));
    }
    if b[68..96].iter().any(|&x| x != 0) {
        return Err(input_at(68, "reserved header bytes must be zero"));
    }
    let fits = |off: u64, len: u64| off.checked_add(len).is_some_and(|e| e <= file_len);
    if toc_len < TOC_HEADER || !fits(toc_off, toc_len) || toc_off < HEADER_SIZE {
        return Err(input_at(
            12,
            format!("TOC at {toc_off} with {toc_len} bytes does not fit the {file_len}-byte file"),
        ));
    }
    let count = le_u32(b, toc_off as usize) as u64;
    if count > MAX_ENTRY_COUNT {
        return Err(input_at(toc_off, format!("entry_count {count} exceeds the limit of {MAX_ENTRY_COUNT}")));
    }
    if toc_len < TOC_HEADER + count * TOC_ENTRY {
        return Err(input_at(20, format!("toc_length {toc_len} is too short for {count} entries")));
    }
    if st_len > MAX_STRING_TABLE || !fits(st_off, st_len) {
        return Err(input_at(
            28,
            format!("string table at {st_off} with {st_len} bytes does not fit (limit {MAX_STRING_TABLE})"),
        ));
    }
    let strings = &b[st_off as usize..(st_off + st_len) as usize];
    let mut chunks = Vec::with_capacity(count as usize);
    for i in 0..count {
        let at = toc_off + TOC_HEADER + i * TOC_ENTRY;
        let e = &b[at as usize..(at + TOC_ENTRY) as usize];
        let fourcc = std::str::from_utf8(&e[..4])
            .ok()
            .filter(|f| f.bytes().all(|c| c.is_ascii_graphic()))
            .ok_or_else(|| input_at(at, format!("TOC entry {i}: fourcc is not 4 ASCII letters")))?
            .to_string();
        let (flags, offset, length, ulen) = (le_u32(e, 4), le_u64(e, 8), le_u64(e, 16), le_u64(e, 24));
        let (name_off, name_len) = (le_u32(e, 32) as u64, le_u32(e, 36) as u64);
        if le_u64(e, 40) != 0 {
            return Err(input_at(at + 40, format!("TOC entry {i}: reserved0 must be zero")));
        }
        if !fits(offset, length) || offset < HEADER_SIZE {
            return Err(input_at(
                at + 8,
                format!("chunk {i} ({fourcc}) at {offset} with {length} bytes runs past the end of the file"),
            ));
        }
        if name_off + name_len > st_len {
            return Err(input_at(at + 32, format!("chunk {i} ({fourcc}): name runs past the string table")));
        }
        let name = std::str::from_utf8(&strings[name_off as usize..(name_off + name_len) as usize])
            .map_err(|_| input_at(st_off + name_off, format!("chunk {i} ({fourcc}): name is not UTF-8")))?
            .to_string();
        let blake3: [u8; 32] = e[48..80].try_into().expect("32 bytes");
        chunks.push(Chunk { fourcc, flags, offset, length, ulen, name, blake3, toc_at: at });
    }
    check_overlaps(&chunks, st_off + st_len)?;
    Ok((major, minor, chunks))
}

/// Verifies and decodes every chunk but the shards, which stay in the map.
fn decode_chunks(src: &Source, chunks: &[Chunk]) -> Result<Vec<Option<Source>>> {
    let b = src.bytes();
    let mut payloads: Vec<Option<Source>> = Vec::with_capacity(chunks.len());
    for c in chunks {
        let stored = &b[c.offset as usize..(c.offset + c.length) as usize];
        let what = format!("chunk {:?} ({})", c.name, c.fourcc);
        if c.fourcc == "WTSH" {
            if c.flags & ZSTD != 0 || c.length != c.ulen {
                return Err(input_at(c.toc_at, format!("{what}: weight shards are never compressed")));
            }
            if c.offset % 16 != 0 {
                return Err(input_at(c.toc_at + 8, format!("{what}: offset {} is not 16-byte aligned", c.offset)));
            }
            check_blake3(&src.window(c.offset as usize..(c.offset + c.length) as usize), c, &what)?;
            payloads.push(None);
            continue;
        }
        // Metadata is parsed into memory: our own limit, below the spec's 2 GiB.
        if c.ulen > MAX_PARSED_METADATA {
            return Err(input_at(
                c.toc_at + 24,
                format!("{what}: {} bytes exceed the metadata limit of {MAX_PARSED_METADATA}", c.ulen),
            ));
        }
        let raw = if c.flags & ZSTD != 0 {
            zstd_exact(stored, c.ulen).map_err(|m| input_at(c.offset, format!("{what}: {m}")))?
        } else if c.length == c.ulen {
            src.sub(c.offset as usize..(c.offset + c.length) as usize)
        } else {
            return Err(input_at(
                c.toc_at + 24,
                format!("{what}: uncompressed but ulen {} != length {}", c.ulen, c.length),
            ));
        };
        check_blake3(&raw.window(0..raw.bytes().len()), c, &what)?;
        payloads.push(Some(raw));
    }

    Ok(payloads)
}

fn read_with(src: &Source, _notes: &mut Notes, how: ReadAs) -> Result<Vec<Array>> {
    let b = src.bytes();
    let (major, minor, chunks) = read_toc(b)?;
    let toc_off = le_u64(b, 12);
    let payloads = decode_chunks(src, &chunks)?;

    let tidx_at = chunks.iter().position(|c| c.fourcc == "TIDX").ok_or_else(|| input_at(toc_off, "no TIDX chunk"))?;
    let tidx_raw = payloads[tidx_at].as_ref().map(Source::bytes).expect("TIDX is not a shard");
    let tidx_mp = msgpack::decode(tidx_raw).map_err(|m| input_at(chunks[tidx_at].offset, format!("TIDX: {m}")))?;
    let tidx = msgpack::to_json(&tidx_mp);
    drop(tidx_mp); // the JSON form is what is kept
    let mut tidx = tidx;
    let tensors = match tidx.get_mut("tensors").map(Value::take) {
        Some(Value::Array(t)) => t,
        _ => return Err(input_at(chunks[tidx_at].offset, "TIDX: expected a \"tensors\" list")),
    };
    if tensors.len() > MAX_TIDX_TENSORS {
        return Err(input_at(
            chunks[tidx_at].offset,
            format!("TIDX: {} tensors exceed the limit of {MAX_TIDX_TENSORS}", tensors.len()),
        ));
    }
    let mut originals = Vec::with_capacity(tensors.len());
    let mut placed = Vec::with_capacity(tensors.len());
    let mut found = Vec::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        let p = place_tensor(t, &chunks)
            .map_err(|m| input_at(chunks[tidx_at].offset, format!("TIDX tensors[{i}]: {m}")))?;
        originals.push(p.0.to_string());
        placed.push(p);
    }
    // Nothing is read, hashed or copied before the tensors are known to be apart.
    check_tensors_apart(&placed, chunks[tidx_at].offset)?;
    for (name, dtype, shape, range, hash) in placed {
        let data = src.window(range.clone());
        if let Some(h) = hash {
            let mut hasher = blake3::Hasher::new();
            data.each_window(&mut |w| {
                hash_into(&mut hasher, w);
                Ok(())
            })?;
            let have = hasher.finalize().to_hex();
            if have.as_str() != h {
                return Err(check_byte(range.start as u64, format!("tensor {name}: hash_b3 is {have}, TIDX says {h}")));
            }
        }
        let a = Array::with_original_name(name.to_string(), dtype, shape, data)
            .map_err(|e| input_at(chunks[tidx_at].offset, format!("TIDX tensor {name}: {}", e.message())))?;
        found.push(a);
    }
    let mut tensors_meta = tensors;
    originals.push(META.to_string());
    if let Some(d) = crate::model::first_duplicate(&originals) {
        return Err(input_at(chunks[tidx_at].offset, format!("TIDX: two tensors are named {d:?}")));
    }
    let names = assign_names(&originals);

    let mut out = Vec::with_capacity(found.len() + 1);
    if how != ReadAs::OwnNames {
        for (a, n) in found.iter_mut().zip(&names) {
            a.name = n.clone();
        }
    }
    let mut chunk_meta = Vec::with_capacity(chunks.len());
    for (c, p) in chunks.iter().zip(&payloads) {
        let p = p.as_ref().map(Source::bytes);
        let mut m = ChunkMeta::new(&c.fourcc, c.name.clone(), c.flags);
        match (c.fourcc.as_str(), p) {
            ("WTSH", _) => {}
            ("TIDX", _) => {
                tidx["tensors"] = json!(found.iter().map(|a| a.name.clone()).collect::<Vec<_>>());
                m.tidx = Some(std::mem::take(&mut tidx));
                m.tensors = Some(std::mem::take(&mut tensors_meta));
            }
            ("IHSH", Some(p)) => check_ihsh(b, &chunks, p, c)?,
            ("PHSH", Some(p)) => m.page_size = Some(check_phsh(src, &chunks, p, c)?),
            (_, Some(p)) => content_to_meta(&c.fourcc, p, &mut m),
            (_, None) => unreachable!("only shards stay unread"),
        }
        if let (true, Some(p)) = (how == ReadAs::Pinned && c.flags & ZSTD != 0, p) {
            let stored = &b[c.offset as usize..(c.offset + c.length) as usize];
            if zstd::bulk::compress(p, ZSTD_LEVEL).ok().as_deref() != Some(stored) {
                m.stored_hex = Some(hex::encode(stored));
            }
        }
        chunk_meta.push(m);
    }
    out.extend(found);
    let meta =
        AeroMeta { version: vec![major as u64, minor as u64], uuid: hex::encode(&b[52..68]), chunks: chunk_meta };
    out.push(meta_array(META, &serde_json::to_value(&meta).expect("metadata serializes"))?);
    Ok(out)
}

/// Where TIDX puts one tensor: checked against its shard's bounds.
fn place_tensor<'a>(t: &'a Value, chunks: &[Chunk]) -> std::result::Result<Placed<'a>, String> {
    let name = t.get("name").and_then(Value::as_str).ok_or("expected a string \"name\"")?;
    let uint =
        |k: &str| t.get(k).and_then(Value::as_u64).ok_or_else(|| format!("{name}: expected an unsigned integer {k:?}"));
    let (code, sid, off, len) = (uint("dtype")?, uint("shard_id")?, uint("data_off")?, uint("data_len")?);
    let shape: Vec<u64> = t
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|s| s.iter().map(Value::as_u64).collect())
        .ok_or_else(|| format!("{name}: expected \"shape\" as non-negative integers"))?;
    let shard = chunks
        .iter()
        .find(|c| c.fourcc == "WTSH" && c.name == format!("weights.shard{sid}"))
        .ok_or_else(|| format!("{name}: shard weights.shard{sid} does not exist"))?;
    if off.checked_add(len).is_none_or(|e| e > shard.length) {
        return Err(format!("{name}: bytes {off}+{len} run past shard weights.shard{sid} ({} bytes)", shard.length));
    }
    let start = (shard.offset + off) as usize;
    let (dtype, shape) = if code == PACKED {
        (Dtype::U8, vec![len])
    } else {
        (dtype_of(code).ok_or_else(|| format!("{name}: dtype code {code} is not an AERO dtype"))?, shape)
    };
    let hash = t.get("hash_b3").and_then(Value::as_str).filter(|h| !h.is_empty());
    Ok((name, dtype, shape, start..start + len as usize, hash))
}

/// A tensor as TIDX places it: name, dtype, shape, byte range, hash_b3.
type Placed<'a> = (&'a str, Dtype, Vec<u64>, std::ops::Range<usize>, Option<&'a str>);

/// Refuses tensors that share bytes: a TIDX listing one window many times
/// would make a small file read (and write) as many times its size.
fn check_tensors_apart(placed: &[Placed], tidx_at: u64) -> Result<()> {
    let mut spans: Vec<(usize, usize, &str)> =
        placed.iter().filter(|p| !p.3.is_empty()).map(|p| (p.3.start, p.3.end, p.0)).collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(input_at(
                tidx_at,
                format!("TIDX: tensors {:?} and {:?} overlap: tensors may not share bytes", w[0].2, w[1].2),
            ));
        }
    }
    Ok(())
}

/// Checks a chunk's BLAKE3 a window at a time, each dropped once hashed: a
/// shard of gigabytes is never wholly resident.
fn check_blake3(raw: &ArrayData, c: &Chunk, what: &str) -> Result<()> {
    let mut h = blake3::Hasher::new();
    raw.each_window(&mut |w| {
        hash_into(&mut h, w);
        Ok(())
    })?;
    let have = h.finalize();
    if have.as_bytes() != &c.blake3 {
        return Err(check_byte(
            c.offset,
            format!("{what}: BLAKE3 is {}, the TOC says {}", have.to_hex(), hex::encode(c.blake3)),
        ));
    }
    Ok(())
}

/// Payloads lie after the string table and do not overlap.
fn check_overlaps(chunks: &[Chunk], control_end: u64) -> Result<()> {
    let mut spans: Vec<(u64, u64, &str)> =
        chunks.iter().filter(|c| c.length > 0).map(|c| (c.offset, c.offset + c.length, c.name.as_str())).collect();
    spans.sort();
    if let Some(s) = spans.first().filter(|s| s.0 < control_end) {
        return Err(input_at(s.0, format!("chunk {:?} overlaps the header, TOC or string table", s.2)));
    }
    if let Some(w) = spans.windows(2).find(|w| w[1].0 < w[0].1) {
        return Err(input_at(w[1].0, format!("chunk {:?} overlaps chunk {:?}", w[1].2, w[0].2)));
    }
    Ok(())
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

fn meta_to_content(m: &ChunkMeta) -> std::result::Result<Vec<u8>, String> {
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

fn check_ihsh(b: &[u8], chunks: &[Chunk], p: &[u8], c: &Chunk) -> Result<()> {
    let bad = |m: &str| input_at(c.offset, format!("IHSH: {m}"));
    let v = msgpack::to_json(&msgpack::decode(p).map_err(|m| bad(&m))?);
    if v.get("algo").and_then(Value::as_str) != Some("blake3-256") {
        return Err(bad("algo must be \"blake3-256\""));
    }
    let ranges: Vec<(u64, u64)> = v
        .get("covered_ranges")
        .and_then(Value::as_array)
        .and_then(|r| r.iter().map(|x| Some((x.get(0)?.as_u64()?, x.get(1)?.as_u64()?))).collect())
        .filter(|r: &Vec<(u64, u64)>| r.iter().all(|&(s, e)| s <= e && e <= b.len() as u64))
        .ok_or_else(|| bad("covered_ranges must be [start, end] pairs inside the file"))?;
    let want = v
        .get("digest")
        .and_then(|d| d.get("$bin"))
        .and_then(Value::as_str)
        .ok_or_else(|| bad("digest must be 32 bytes"))?;
    let have = hex::encode(control_digest(b, chunks, &ranges));
    if have != want {
        return Err(check_byte(0, format!("IHSH: the control region hashes to {have}, IHSH says {want}")));
    }
    Ok(())
}

fn check_phsh(src: &Source, chunks: &[Chunk], p: &[u8], c: &Chunk) -> Result<u64> {
    let bad = |m: &str| input_at(c.offset, format!("PHSH {:?}: {m}", c.name));
    let v = msgpack::to_json(&msgpack::decode(p).map_err(|m| bad(&m))?);
    let shard_name = v.get("shard_name").and_then(Value::as_str).ok_or_else(|| bad("expected shard_name"))?;
    let page =
        v.get("page_size").and_then(Value::as_u64).filter(|&p| p > 0).ok_or_else(|| bad("expected page_size > 0"))?;
    let shard =
        chunks.iter().find(|s| s.fourcc == "WTSH" && s.name == shard_name).ok_or_else(|| bad("no such shard"))?;
    let digests = v.get("digests").and_then(Value::as_array).ok_or_else(|| bad("expected digests"))?;
    let shard_data = src.window(shard.offset as usize..(shard.offset + shard.length) as usize);
    let data = shard_data.as_bytes();
    if digests.len() as u64 != shard.length.div_ceil(page) {
        return Err(bad("one digest per page expected"));
    }
    // Pages hashed are dropped from the process every 16 MiB or so.
    let mut behind = shard_data.behind(0);
    for (i, (page_bytes, d)) in data.chunks(page as usize).zip(digests).enumerate() {
        behind.reached(i * page as usize);
        let have = blake3::hash(page_bytes).to_hex();
        if d.get("$bin").and_then(Value::as_str) != Some(have.as_str()) {
            return Err(check_byte(
                shard.offset + i as u64 * page,
                format!("PHSH {:?}: page {i} does not match", c.name),
            ));
        }
    }
    Ok(page)
}

/// One chunk to write.
struct Out {
    fourcc: String,
    name: String,
    flags: u32,
    raw: Vec<u8>,
    /// The original stored bytes of a compressed chunk, when pinned.
    pinned: Option<Vec<u8>>,
    /// Shard payload, as ranges of arrays' bytes (written without copying).
    parts: Vec<Part>,
}

enum Part {
    Zeros(u64),
    Array(usize),
}

/// Each shard's pieces, by shard id.
type Shards = std::collections::BTreeMap<u64, Vec<Part>>;

/// Writes arrays as AERO into memory (see [`write_to`]).
pub fn write(arrays: &[Array]) -> Result<Vec<u8>> {
    crate::convert::in_memory(|w| write_to(arrays, w))
}

/// Writes arrays as AERO, following `__aero` when present.
pub fn write_to(arrays: &[Array], w: &mut dyn Write) -> Result<()> {
    let bad = |m: String| Error::input(Default::default(), format!("{META}: {m}"));
    let meta: Option<AeroMeta> = meta_typed(arrays, META)?;
    let tensors: Vec<&Array> = arrays.iter().filter(|a| a.name != META).collect();
    // Never write what the reader refuses.
    if tensors.len() > MAX_TIDX_TENSORS {
        return Err(Error::input(
            Default::default(),
            format!("{} tensors: an AERO index holds at most {MAX_TIDX_TENSORS}", tensors.len()),
        ));
    }
    let (uuid, minor, mut plan) = match meta {
        Some(m) => {
            let uuid = hex::decode(&m.uuid).ok().filter(|u| u.len() == 16);
            let uuid = uuid.ok_or_else(|| bad("uuid must be 32 hex digits".into()))?;
            (uuid, m.version.get(1).copied().unwrap_or(1) as u16, m.chunks)
        }
        None => (vec![0u8; 16], 1, default_chunks(&tensors)),
    };
    let tidx = plan.iter_mut().find(|c| c.fourcc == "TIDX").ok_or_else(|| bad("no TIDX chunk".into()))?;
    let (mut shards, mut tidx_bytes) = place_tensors(tidx, &tensors).map_err(bad)?;
    for sid in shards.keys() {
        let name = format!("weights.shard{sid}");
        if !plan.iter().any(|c| c.name == name) {
            plan.push(ChunkMeta::new("WTSH", name, MMAP_CRITICAL));
        }
    }

    let mut outs = Vec::with_capacity(plan.len());
    for c in &plan {
        if c.fourcc.len() != 4 {
            return Err(bad("a chunk lacks a 4-letter fourcc".into()));
        }
        let (raw, parts) = match c.fourcc.as_str() {
            "WTSH" => {
                let sid = c.name.strip_prefix("weights.shard").and_then(|s| s.parse::<u64>().ok());
                (Vec::new(), sid.and_then(|s| shards.remove(&s)).unwrap_or_default())
            }
            "TIDX" => (std::mem::take(&mut tidx_bytes), Vec::new()),
            "IHSH" | "PHSH" => (Vec::new(), Vec::new()),
            _ => (meta_to_content(c).map_err(|m| bad(format!("chunk {:?}: {m}", c.name)))?, Vec::new()),
        };
        let pinned = c.stored_hex.as_deref().and_then(|h| hex::decode(h).ok());
        let pinned = pinned.filter(|p| zstd_exact(&p[..], raw.len() as u64).is_ok_and(|s| s.bytes() == &raw[..]));
        outs.push(Out { fourcc: c.fourcc.clone(), name: c.name.clone(), flags: c.flags, raw, pinned, parts });
    }
    // PHSH payloads need the shards' bytes; IHSH the finished control region.
    for (i, c) in plan.iter().enumerate() {
        if outs[i].fourcc == "PHSH" {
            let shard_name = outs[i].name.strip_suffix(".phsh").unwrap_or(&outs[i].name).to_string();
            let page = c.page_size.filter(|&p| p > 0).unwrap_or(4 << 20);
            let shard = outs
                .iter()
                .find(|o| o.fourcc == "WTSH" && o.name == shard_name)
                .ok_or_else(|| bad(format!("PHSH for missing shard {shard_name}")))?;
            let bytes = shard_bytes(&shard.parts, &tensors);
            let digests: Vec<rmpv::Value> =
                bytes.chunks(page as usize).map(|p| rmpv::Value::Binary(blake3::hash(p).as_bytes().to_vec())).collect();
            outs[i].raw = msgpack::encode(&rmpv::Value::Map(vec![
                ("shard_name".into(), shard_name.as_str().into()),
                ("page_size".into(), page.into()),
                ("digests".into(), rmpv::Value::Array(digests)),
            ]));
        }
    }
    assemble(&outs, &tensors, &uuid, minor, w)
}

/// The original names `__aero` keeps among `arrays` (TIDX's entries, each
/// with the array holding it), for writers of other formats.
pub fn kept_names(arrays: &[Array]) -> Result<Option<OriginalNames>> {
    let Some(meta) = meta_typed::<AeroMeta>(arrays, META)? else { return Ok(None) };
    let mut pairs = Vec::new();
    for c in meta.chunks {
        let listed = c.tidx.as_ref().and_then(|t| t.get("tensors")).and_then(Value::as_array);
        for (array, entry) in listed.into_iter().flatten().zip(c.tensors.iter().flatten()) {
            if let (Some(w), Some(o)) = (array.as_str(), entry.get("name").and_then(Value::as_str)) {
                pairs.push((w.to_string(), o.to_string()));
            }
        }
    }
    Ok(OriginalNames::from_pairs(pairs))
}

/// Lays the tensors out in their shards (at the offsets TIDX gives when
/// they still fit, else packed) and updates TIDX's entries to match;
/// returns each shard's pieces and the TIDX chunk's MessagePack.
/// Takes `tidx`'s tensor entries (one copy of the index is held, not three:
/// a file may hold 131,072 tensors).
fn place_tensors(tidx: &mut ChunkMeta, tensors: &[&Array]) -> std::result::Result<(Shards, Vec<u8>), String> {
    // By name, and which are placed: a file may hold 131,072 tensors.
    let by_name: std::collections::HashMap<&str, usize> =
        tensors.iter().enumerate().map(|(i, a)| (a.name.as_str(), i)).collect();
    let index_of = |n: &str| by_name.get(n).copied();
    let listed: Vec<String> = tidx
        .tidx
        .as_ref()
        .and_then(|t| t.get("tensors"))
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(|n| n.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let mut entries: Vec<Value> = tidx.tensors.take().unwrap_or_default();
    if entries.len() != listed.len() {
        return Err("TIDX tensors and their arrays differ in number".into());
    }
    let mut order: Vec<usize> = Vec::with_capacity(tensors.len());
    let mut placed = vec![false; tensors.len()];
    for n in &listed {
        let i = index_of(n).ok_or_else(|| format!("array {n} is missing"))?;
        placed[i] = true;
        order.push(i);
    }
    let last_shard = entries.iter().filter_map(|e| e.get("shard_id").and_then(Value::as_u64)).max();
    let extra_shard = last_shard.map_or(0, |s| s + 1);
    for (i, a) in tensors.iter().enumerate() {
        if !placed[i] {
            order.push(i);
            entries.push(json!({"name": a.name, "dtype": code_of(a.dtype), "shape": a.shape, "shard_id": extra_shard, "data_off": 0, "data_len": 0, "flags": 0}));
        }
    }
    let mut shards: Shards = Default::default();
    let mut shard_len: std::collections::BTreeMap<u64, u64> = Default::default();
    for (e, &ai) in entries.iter_mut().zip(&order) {
        let a = tensors[ai];
        let sid = e.get("shard_id").and_then(Value::as_u64).ok_or_else(|| format!("tensor {}: no shard_id", a.name))?;
        let len = a.bytes().len() as u64;
        let end = shard_len.entry(sid).or_insert(0);
        let want = e.get("data_off").and_then(Value::as_u64).filter(|&o| o >= *end).unwrap_or(*end);
        let parts = shards.entry(sid).or_default();
        if want > *end {
            parts.push(Part::Zeros(want - *end));
        }
        parts.push(Part::Array(ai));
        *end = want + len;
        let packed = e.get("dtype").and_then(Value::as_u64) == Some(PACKED);
        if packed && (a.dtype != Dtype::U8 || a.shape.len() != 1) {
            return Err(format!("tensor {}: a packed tensor must be a rank-1 u8 array", a.name));
        }
        if !packed {
            e["dtype"] = json!(code_of(a.dtype));
            e["shape"] = json!(a.shape);
        }
        e["data_off"] = json!(want);
        e["data_len"] = json!(len);
        if e.get("hash_b3").is_some() {
            let mut h = blake3::Hasher::new();
            a.data
                .each_window(&mut |b| {
                    hash_into(&mut h, b);
                    Ok(())
                })
                .map_err(|e| e.to_string())?;
            e["hash_b3"] = json!(h.finalize().to_hex().as_str());
        }
    }
    let mut t = tidx.tidx.take().unwrap_or_else(|| json!({}));
    t["tensors"] = Value::Array(entries);
    let packed = msgpack::from_json(&t)?;
    drop(t);
    Ok((shards, msgpack::encode(&packed)))
}

fn shard_bytes(parts: &[Part], tensors: &[&Array]) -> Vec<u8> {
    let mut v = Vec::new();
    each_piece(parts, tensors, &mut |b| {
        v.extend_from_slice(b);
        Ok(())
    })
    .expect("collecting into memory does not fail");
    v
}

/// Hands a shard's bytes to `f` in order, piece by piece: each tensor's
/// bytes where they live, gaps as runs of zeros.
fn each_piece(parts: &[Part], tensors: &[&Array], f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    for p in parts {
        match p {
            Part::Zeros(n) => each_zero_piece(*n, f)?,
            Part::Array(i) => tensors[*i].data.each_window(f)?,
        }
    }
    Ok(())
}

/// Lays out header, TOC, string table and payloads as the reference does,
/// and streams them to `w`: tensor bytes go from their arrays (often a
/// mapped input) to the output without an intermediate copy.
fn assemble(outs: &[Out], tensors: &[&Array], uuid: &[u8], minor: u16, w: &mut dyn Write) -> Result<()> {
    let n = outs.len() as u64;
    let mut strings = Vec::new();
    let mut names = Vec::with_capacity(outs.len());
    for o in outs {
        names.push((strings.len() as u32, o.name.len() as u32));
        strings.extend_from_slice(o.name.as_bytes());
        strings.push(0);
    }
    strings.resize(align(strings.len() as u64, 8) as usize, 0);
    let toc_len = TOC_HEADER + n * TOC_ENTRY;
    let st_off = align(HEADER_SIZE + toc_len, 8);
    let payload_start = align(st_off + strings.len() as u64, 16);
    let ihsh_len = ihsh_payload(&[0; 32], payload_start).len() as u64;
    // Stored bytes, lengths and BLAKE3 of every chunk (IHSH filled in last).
    let mut stored: Vec<Vec<u8>> = Vec::with_capacity(outs.len());
    let mut sizes: Vec<(u64, u64)> = Vec::with_capacity(outs.len());
    let mut hashes: Vec<[u8; 32]> = Vec::with_capacity(outs.len());
    for o in outs {
        let (st, len, ulen, hash) = match o.fourcc.as_str() {
            "WTSH" => {
                let l = part_len(&o.parts, tensors);
                (Vec::new(), l, l, hash_parts(&o.parts, tensors))
            }
            "IHSH" => (Vec::new(), ihsh_len, ihsh_len, [0; 32]),
            _ if o.flags & ZSTD != 0 => {
                let c = match &o.pinned {
                    Some(p) => p.clone(),
                    None => zstd::bulk::compress(&o.raw, ZSTD_LEVEL).map_err(|e| Error::io_in("zstd", e))?,
                };
                let l = c.len() as u64;
                (c, l, o.raw.len() as u64, *blake3::hash(&o.raw).as_bytes())
            }
            _ => (o.raw.clone(), o.raw.len() as u64, o.raw.len() as u64, *blake3::hash(&o.raw).as_bytes()),
        };
        stored.push(st);
        sizes.push((len, ulen));
        hashes.push(hash);
    }
    let mut offsets = Vec::with_capacity(outs.len());
    let mut cur = payload_start;
    for &(len, _) in &sizes {
        cur = align(cur, 16);
        offsets.push(cur);
        cur += len;
    }
    let mut control = Vec::with_capacity(payload_start as usize);
    control.extend_from_slice(MAGIC);
    control.extend_from_slice(&0u16.to_le_bytes());
    control.extend_from_slice(&minor.to_le_bytes());
    control.extend_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
    for v in [HEADER_SIZE, toc_len, st_off, strings.len() as u64, 0] {
        control.extend_from_slice(&v.to_le_bytes());
    }
    control.extend_from_slice(uuid);
    control.resize(HEADER_SIZE as usize, 0);
    control.extend_from_slice(&(n as u32).to_le_bytes());
    control.resize((HEADER_SIZE + TOC_HEADER) as usize, 0);
    let mut hash_at = Vec::with_capacity(outs.len());
    for (i, o) in outs.iter().enumerate() {
        control.extend_from_slice(&o.fourcc.as_bytes()[..4]);
        control.extend_from_slice(&o.flags.to_le_bytes());
        for v in [offsets[i], sizes[i].0, sizes[i].1] {
            control.extend_from_slice(&v.to_le_bytes());
        }
        control.extend_from_slice(&names[i].0.to_le_bytes());
        control.extend_from_slice(&names[i].1.to_le_bytes());
        control.extend_from_slice(&0u64.to_le_bytes());
        hash_at.push(control.len());
        control.extend_from_slice(&[0u8; 32]);
    }
    control.resize(st_off as usize, 0);
    control.extend_from_slice(&strings);
    control.resize(payload_start as usize, 0);
    // IHSH (AIP-0001): the control region with every TOC hash zeroed.
    for (i, o) in outs.iter().enumerate() {
        if o.fourcc == "IHSH" {
            stored[i] = ihsh_payload(blake3::hash(&control).as_bytes(), payload_start);
            hashes[i] = *blake3::hash(&stored[i]).as_bytes();
        }
    }
    for (i, h) in hashes.iter().enumerate() {
        control[hash_at[i]..hash_at[i] + 32].copy_from_slice(h);
    }
    let mut write = |b: &[u8]| w.write_all(b).map_err(Error::write_failed);
    write(&control)?;
    let mut pos = payload_start;
    for (i, o) in outs.iter().enumerate() {
        each_zero_piece(offsets[i] - pos, &mut write)?;
        if o.fourcc == "WTSH" {
            each_piece(&o.parts, tensors, &mut write)?;
        } else {
            write(&stored[i])?;
        }
        pos = offsets[i] + sizes[i].0;
    }
    Ok(())
}

/// BLAKE3 of a shard from its parts; large tensors are hashed on all cores.
fn hash_parts(parts: &[Part], tensors: &[&Array]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    each_piece(parts, tensors, &mut |b| {
        hash_into(&mut h, b);
        Ok(())
    })
    .expect("hashing does not fail");
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

fn part_len(parts: &[Part], tensors: &[&Array]) -> u64 {
    parts
        .iter()
        .map(|p| match p {
            Part::Zeros(n) => *n,
            Part::Array(i) => tensors[*i].bytes().len() as u64,
        })
        .sum()
}

/// IHSH payload covering `[0, end)`; its length depends only on `end`, so
/// it can be laid out before the digest is known.
fn ihsh_payload(digest: &[u8; 32], end: u64) -> Vec<u8> {
    msgpack::encode(&rmpv::Value::Map(vec![
        ("algo".into(), "blake3-256".into()),
        ("covered_ranges".into(), rmpv::Value::Array(vec![rmpv::Value::Array(vec![0u64.into(), end.into()])])),
        ("digest".into(), rmpv::Value::Binary(digest.to_vec())),
    ]))
}

/// The `__aero` that reading back [`write`]'s output for `tensors` alone
/// gives, or `None` when there is none to predict.
pub fn default_meta(tensors: &[Array]) -> Option<Value> {
    let refs: Vec<&Array> = tensors.iter().collect();
    let meta = AeroMeta { version: vec![0, 1], uuid: hex::encode([0u8; 16]), chunks: default_chunks(&refs) };
    Some(serde_json::to_value(&meta).expect("metadata serializes"))
}

/// What the reference `write_model` writes for tensors with no `__aero`.
fn default_chunks(tensors: &[&Array]) -> Vec<ChunkMeta> {
    let mut entries = Vec::with_capacity(tensors.len());
    let mut shard_sizes: Vec<(u64, u64)> = Vec::new();
    let (mut sid, mut size, mut count) = (0u64, 0u64, 0u64);
    for a in tensors {
        let len = a.bytes().len() as u64;
        if count > 0 && size + len > MAX_SHARD_BYTES {
            shard_sizes.push((size, count));
            sid += 1;
            size = 0;
            count = 0;
        }
        entries.push(json!({"name": a.name, "dtype": code_of(a.dtype), "shape": a.shape, "shard_id": sid, "data_off": size, "data_len": len, "flags": 0}));
        size += len;
        count += 1;
    }
    if count > 0 || tensors.is_empty() {
        shard_sizes.push((size, count));
    }
    let mut chunks_desc = vec![
        json!({"role": "json", "fourcc": "MJSN", "toc_index": 0}),
        json!({"role": "manifest", "fourcc": "MMSG", "toc_index": 1}),
        json!({"role": "tensors", "fourcc": "TIDX", "toc_index": 2}),
    ];
    let mut shard_info = Vec::new();
    for (i, (size, count)) in shard_sizes.iter().enumerate() {
        chunks_desc.push(json!({"role": "weights", "fourcc": "WTSH", "toc_index": 3 + i, "shard_id": i}));
        shard_info.push(json!({"shard_id": i, "toc_index": 3 + i, "size_bytes": size, "tensor_count": count, "mmap_critical": true}));
    }
    let manifest = json!({
        "format": {"name": "AERO", "version": [0, 1]},
        "model": {"name": "wtxt", "architecture": "unknown"},
        "chunks": chunks_desc,
        "shards": shard_info,
    });
    let names: Vec<String> = tensors.iter().map(|a| a.name.clone()).collect();
    let mut out = vec![
        ChunkMeta {
            json: Some(json!({"architecture": "unknown", "model_name": "wtxt"})),
            ..ChunkMeta::new("MJSN", "meta.json", 0)
        },
        ChunkMeta { msgpack: Some(manifest), ..ChunkMeta::new("MMSG", "manifest", ZSTD) },
        ChunkMeta {
            tidx: Some(json!({ "tensors": names })),
            tensors: Some(entries),
            ..ChunkMeta::new("TIDX", "tensors", IS_INDEX | ZSTD)
        },
    ];
    for i in 0..shard_sizes.len() {
        out.push(ChunkMeta::new("WTSH", format!("weights.shard{i}"), MMAP_CRITICAL));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_codes_round_trip() {
        for d in Dtype::ALL {
            assert_eq!(dtype_of(code_of(d)), Some(d));
        }
    }
}
