//! Reading FOLD: the index, each chunk's SHA-256, parity and zstd checked, a window at a time.

use super::layout::*;
use crate::buffer::ArrayData;
use crate::convert::bytes::{be_u32, be_u64};
use crate::convert::common::{meta_array, Notes, ReadAs};
use crate::convert::npz::Member;
use crate::convert::{npz, rs};
use crate::error::{check_byte, input_at, Result};
use crate::model::{assign_names, Array};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Reads a FOLD file: tensors from `NPZ0` chunks, every other chunk and the
/// index as metadata arrays. Names are WTXT names already.
pub fn read(src: &ArrayData, notes: &mut Notes) -> Result<Vec<Array>> {
    read_with(src, notes, ReadAs::Mapped)
}

/// The tensors of a FOLD file under their NPZ keys (`layer.0.weight`), for
/// a snapshot to map and keep in `__names`.
pub fn read_tensors(src: &ArrayData, notes: &mut Notes) -> Result<Vec<Array>> {
    Ok(read_with(src, notes, ReadAs::OwnNames)?.into_iter().filter(|a| !a.is_metadata()).collect())
}

/// Like [`read`], and where our writer would not reproduce a chunk's bytes
/// (numpy's deflate in an NPZ0, another zstd's output), keeps the file's
/// own: `payload_hex` (the decoded payload) and `stored_hex` (the stored
/// bytes), so [`write`] gives this exact file back (the Git filter).
pub fn read_pinned(src: &ArrayData, notes: &mut Notes) -> Result<Vec<Array>> {
    read_with(src, notes, ReadAs::Pinned)
}

fn read_with(src: &ArrayData, notes: &mut Notes, how: ReadAs) -> Result<Vec<Array>> {
    let pin = how == ReadAs::Pinned;
    let Index { at, index, version, metadata, entries } = read_index(src.as_bytes(), notes)?;
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
                if zstd::bulk::compress(p.as_bytes(), ZSTD_LEVEL).ok().as_deref() != Some(stored.as_bytes()) {
                    m.stored_hex = Some(hex::encode(stored.as_bytes()));
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
                if ours.into_inner() != p.as_bytes() {
                    m.payload_hex = Some(hex::encode(p.as_bytes()));
                }
            }
        } else {
            let name = names.next().expect("one name per original");
            m.array = Some(name.clone());
            let n = p.as_bytes().len();
            out.push(Array::new(name, crate::model::Dtype::U8, vec![n as u64], p.slice(0..n))?);
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
fn chunk_payload(src: &ArrayData, e: &Entry, notes: &mut Notes) -> Result<(ArrayData, Option<ArrayData>)> {
    let b = src.as_bytes();
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
        None => src.slice(start..comp_end),
        Some(nsym) => {
            let mut copy = crate::buffer::Writable::copy_of(&b[start..comp_end])?;
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
            copy.into_data()?
        }
    };
    // Read in windows, each dropped once read: a 1 GiB chunk is never
    // wholly resident (neither here nor in the decompressor below).
    let stored_data = comp.slice(0..comp.as_bytes().len());
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
            let raw = crate::convert::common::zstd_exact(stored_data.reader(), e.uncomp_len)
                .map_err(|m| input_at(start as u64, format!("chunk {:?}: {m}", e.name)))?;
            (raw, Some(comp))
        }
        _ => (comp, None),
    };
    if raw.as_bytes().len() as u64 != e.uncomp_len {
        return Err(input_at(
            start as u64,
            format!("chunk {:?}: {} bytes, uncomp_len says {}", e.name, raw.as_bytes().len(), e.uncomp_len),
        ));
    }
    Ok((raw, stored))
}
