//! Reading AERO: every limit and hash checked before a byte is used; tensors are windows of the mapped shards.

use super::layout::*;
use crate::convert::bytes::{le_u16, le_u32, le_u64};
use crate::convert::common::ReadAs;
use crate::convert::common::{meta_array, zstd_exact, Notes};
use crate::convert::msgpack;
use crate::error::{check_byte, input_at, reason, Reason, Result};
use crate::model::{assign_names, Array, ArrayData, Dtype};
use serde_json::{json, Value};

/// Reads an AERO file. Names are WTXT names already; the file's own are
/// kept in `__aero`.
pub fn read(src: &ArrayData, notes: &mut Notes) -> Result<Vec<Array>> {
    read_with(src, notes, ReadAs::Mapped)
}

/// The tensors of an AERO file under the names the file gives them
/// (`layer.0.weight`), for a snapshot to map and keep in `__names`.
pub fn read_tensors(src: &ArrayData, notes: &mut Notes) -> Result<Vec<Array>> {
    let arrays = read_with(src, notes, ReadAs::OwnNames)?;
    Ok(arrays.into_iter().filter(|a| a.name != META).collect())
}

/// Like [`read`], and where our zstd would not reproduce a compressed
/// chunk's stored bytes, keeps them (`stored_hex`), so [`write()`](super::write::write) gives this
/// exact file back (the Git filter).
pub fn read_pinned(src: &ArrayData, notes: &mut Notes) -> Result<Vec<Array>> {
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
fn decode_chunks(src: &ArrayData, chunks: &[Chunk]) -> Result<Vec<Option<ArrayData>>> {
    let b = src.as_bytes();
    let mut payloads: Vec<Option<ArrayData>> = Vec::with_capacity(chunks.len());
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
            check_blake3(&src.slice(c.offset as usize..(c.offset + c.length) as usize), c, &what)?;
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
            src.slice(c.offset as usize..(c.offset + c.length) as usize)
        } else {
            return Err(input_at(
                c.toc_at + 24,
                format!("{what}: uncompressed but ulen {} != length {}", c.ulen, c.length),
            ));
        };
        check_blake3(&raw.slice(0..raw.as_bytes().len()), c, &what)?;
        payloads.push(Some(raw));
    }

    Ok(payloads)
}

fn read_with(src: &ArrayData, _notes: &mut Notes, how: ReadAs) -> Result<Vec<Array>> {
    let b = src.as_bytes();
    let (major, minor, chunks) = read_toc(b)?;
    let toc_off = le_u64(b, 12);
    let payloads = decode_chunks(src, &chunks)?;

    let tidx_at = chunks.iter().position(|c| c.fourcc == "TIDX").ok_or_else(|| input_at(toc_off, "no TIDX chunk"))?;
    let tidx_raw = payloads[tidx_at].as_ref().map(ArrayData::as_bytes).expect("TIDX is not a shard");
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
        let data = src.slice(range.clone());
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
        let p = p.as_ref().map(ArrayData::as_bytes);
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
fn place_tensor<'a>(t: &'a Value, chunks: &[Chunk]) -> std::result::Result<Placed<'a>, Reason> {
    let name = t.get("name").and_then(Value::as_str).ok_or("expected a string \"name\"")?;
    let uint =
        |k: &str| t.get(k).and_then(Value::as_u64).ok_or_else(|| reason!("{name}: expected an unsigned integer {k:?}"));
    let (code, sid, off, len) = (uint("dtype")?, uint("shard_id")?, uint("data_off")?, uint("data_len")?);
    let shape: Vec<u64> = t
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|s| s.iter().map(Value::as_u64).collect())
        .ok_or_else(|| reason!("{name}: expected \"shape\" as non-negative integers"))?;
    let shard = chunks
        .iter()
        .find(|c| c.fourcc == "WTSH" && c.name == format!("weights.shard{sid}"))
        .ok_or_else(|| reason!("{name}: shard weights.shard{sid} does not exist"))?;
    if off.checked_add(len).is_none_or(|e| e > shard.length) {
        return Err(reason!("{name}: bytes {off}+{len} run past shard weights.shard{sid} ({} bytes)", shard.length));
    }
    let start = (shard.offset + off) as usize;
    let (dtype, shape) = if code == PACKED {
        (Dtype::U8, vec![len])
    } else {
        (dtype_of(code).ok_or_else(|| reason!("{name}: dtype code {code} is not an AERO dtype"))?, shape)
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

fn check_ihsh(b: &[u8], chunks: &[Chunk], p: &[u8], c: &Chunk) -> Result<()> {
    let bad = |m: &str| input_at(c.offset, format!("IHSH: {m}"));
    let v = msgpack::to_json(&msgpack::decode(p).map_err(|m| bad(m.as_str()))?);
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

fn check_phsh(src: &ArrayData, chunks: &[Chunk], p: &[u8], c: &Chunk) -> Result<u64> {
    let bad = |m: &str| input_at(c.offset, format!("PHSH {:?}: {m}", c.name));
    let v = msgpack::to_json(&msgpack::decode(p).map_err(|m| bad(m.as_str()))?);
    let shard_name = v.get("shard_name").and_then(Value::as_str).ok_or_else(|| bad("expected shard_name"))?;
    let page =
        v.get("page_size").and_then(Value::as_u64).filter(|&p| p > 0).ok_or_else(|| bad("expected page_size > 0"))?;
    let shard =
        chunks.iter().find(|s| s.fourcc == "WTSH" && s.name == shard_name).ok_or_else(|| bad("no such shard"))?;
    let digests = v.get("digests").and_then(Value::as_array).ok_or_else(|| bad("expected digests"))?;
    let shard_data = src.slice(shard.offset as usize..(shard.offset + shard.length) as usize);
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
