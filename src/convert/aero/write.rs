//! Writing AERO: the chunks `__aero` lists, in its order, or the reference writer's defaults.

use super::layout::*;
use crate::convert::bytes::{align, each_zero_piece};
use crate::convert::common::{meta_typed, zstd_exact};
use crate::convert::msgpack;
use crate::convert::names::OriginalNames;
use crate::error::{reason, Error, Reason, Result};
use crate::model::{Array, Dtype};
use serde_json::{json, Value};
use std::io::Write;

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
    crate::convert::common::in_memory(|w| write_to(arrays, w))
}

/// Writes arrays as AERO, following `__aero` when present.
pub fn write_to(arrays: &[Array], w: &mut dyn Write) -> Result<()> {
    let bad = |m: Reason| Error::input(Default::default(), format!("{META}: {m}"));
    let meta: Option<AeroMeta> = meta_typed(arrays, META)?;
    let tensors: Vec<&Array> = arrays.iter().filter(|a| a.name != META).collect();
    if let Some(a) = tensors.iter().find(|a| code_of(a.dtype).is_none()) {
        return Err(Error::usage(code(a).expect_err("no code")));
    }
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
            _ => (meta_to_content(c).map_err(|m| bad(m.context(format_args!("chunk {:?}", c.name))))?, Vec::new()),
        };
        let pinned = c.stored_hex.as_deref().and_then(|h| hex::decode(h).ok());
        let pinned = pinned.filter(|p| zstd_exact(&p[..], raw.len() as u64).is_ok_and(|s| s.as_bytes() == &raw[..]));
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
                .ok_or_else(|| bad(reason!("PHSH for missing shard {shard_name}")))?;
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
fn place_tensors(tidx: &mut ChunkMeta, tensors: &[&Array]) -> std::result::Result<(Shards, Vec<u8>), Reason> {
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
        let i = index_of(n).ok_or_else(|| reason!("array {n} is missing"))?;
        placed[i] = true;
        order.push(i);
    }
    let last_shard = entries.iter().filter_map(|e| e.get("shard_id").and_then(Value::as_u64)).max();
    let extra_shard = last_shard.map_or(0, |s| s + 1);
    for (i, a) in tensors.iter().enumerate() {
        if !placed[i] {
            order.push(i);
            entries.push(json!({"name": a.name, "dtype": code(a)?, "shape": a.shape, "shard_id": extra_shard, "data_off": 0, "data_len": 0, "flags": 0}));
        }
    }
    let mut shards: Shards = Default::default();
    let mut shard_len: std::collections::BTreeMap<u64, u64> = Default::default();
    for (e, &ai) in entries.iter_mut().zip(&order) {
        let a = tensors[ai];
        let sid = e.get("shard_id").and_then(Value::as_u64).ok_or_else(|| reason!("tensor {}: no shard_id", a.name))?;
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
            return Err(reason!("tensor {}: a packed tensor must be a rank-1 u8 array", a.name));
        }
        if !packed {
            e["dtype"] = json!(code(a)?);
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

/// What the reference `write_model` writes for tensors with no `__aero`.
pub(super) fn default_chunks(tensors: &[&Array]) -> Vec<ChunkMeta> {
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

/// The AERO dtype code of `a`'s dtype, or why it has none.
fn code(a: &Array) -> std::result::Result<u64, Reason> {
    code_of(a.dtype)
        .ok_or_else(|| reason!("array {}: AERO has no dtype code for {} (use safetensors)", a.name, a.dtype))
}
