//! Writing FOLD: tensors into NPZ0 chunks of at most 1 GiB, each compressed, hashed and given its parity on the way out.

use super::layout::*;
use crate::buffer::ArrayData;
use crate::buffer::Spill;
use crate::convert::common::meta_typed;
use crate::convert::container::WriteSeek;
use crate::convert::names::OriginalNames;
use crate::convert::npy;
use crate::convert::{npz, pyjson, rs, unseek};
use crate::error::{reason, Error, Reason, Result};
use crate::model::Array;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::io::{SeekFrom, Write};

/// The most an NPZ member can add to an archive besides its array's bytes:
/// the `.npy` header, the key twice (local and central headers, `.npy`
/// added), the fixed header fields and their Zip64 extras.
fn npz_member_bound(key: &str, a: &Array) -> Result<u64> {
    Ok(npy::header(a)?.len() as u64 + 2 * (key.len() as u64 + 4) + 30 + 20 + 46 + 28 + a.bytes().len() as u64)
}

/// Most bytes an NPZ0 chunk's archive may hold: 1 GiB less 1/128, so that
/// even incompressible data, which zstd grows by at most 1/256 and a few
/// bytes, is stored within [`MAX_CHUNK`].
pub(super) const NPZ_LIMIT: u64 = MAX_CHUNK - MAX_CHUNK / 128;

/// An archive's own bytes: its end records, Zip64 ones included.
const NPZ_TRAILER_BOUND: u64 = 22 + 56 + 20;

/// Members cut, in order, into archives of at most `limit` bytes each: a
/// FOLD chunk may hold 1 GiB ([`MAX_CHUNK`]), so a larger model takes
/// several `NPZ0` chunks. A member that alone exceeds the limit cannot be
/// stored in FOLD at all.
pub(super) fn npz_groups<'a>(members: Vec<(&'a str, &'a Array)>, limit: u64) -> Result<Vec<Vec<(&'a str, &'a Array)>>> {
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

/// FOLD keeps tensors in NPZ0 chunks: a dtype NumPy lacks is refused.
fn numpy_dtypes(arrays: &[Array]) -> Result<()> {
    if let Some(a) = arrays.iter().find(|a| npy::descr(a.dtype).is_err()) {
        return Err(Error::input(
            Default::default(),
            format!(
                "FOLD keeps tensors in NPZ0 chunks and NumPy has no {0}: array {1} is {0} (use --to safetensors)",
                a.dtype, a.name
            ),
        ));
    }
    Ok(())
}

/// Refuses, from dtypes and sizes alone, tensors that no FOLD chunk can hold.
pub fn check_sizes(arrays: &[Array]) -> Result<()> {
    numpy_dtypes(arrays)?;
    npz_groups(arrays.iter().filter(|a| !a.is_metadata()).map(|a| (a.name.as_str(), a)).collect(), NPZ_LIMIT)
        .map(|_| ())
}

/// Names for the chunks that hold arrays `__fold` does not place:
/// `arrays`, then `arrays_1`, `arrays_2`, ..., skipping names it uses.
pub(super) fn rest_chunk_names(taken: &[ChunkMeta]) -> impl Iterator<Item = String> + '_ {
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
    let held = npz::read(&ArrayData::Owned(std::sync::Arc::new(p.clone()))).ok()?;
    let same = held.len() == members.len()
        && held
            .iter()
            .zip(members)
            .all(|(h, (k, a))| h.name == *k && h.dtype == a.dtype && h.shape == a.shape && h.bytes() == a.bytes());
    same.then_some(p)
}

/// Why chunks could not be planned: `__fold` is wrong, or an array is.
enum PlanError {
    Meta(Reason),
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
        arrays.iter().find(|a| a.name == name).ok_or_else(|| PlanError::Meta(reason!("array {name} is missing")))
    };
    let mut plan: Vec<Planned> = Vec::new();
    let mut used: std::collections::HashSet<&str> = [META].into_iter().collect();
    for c in listed {
        let name = &c.name;
        if c.ctype.len() != 4 {
            return Err(PlanError::Meta(reason!("chunk {name:?}: ctype must be 4 bytes")));
        }
        if c.flags > 1 {
            return Err(PlanError::Meta(reason!("chunk {name:?}: flags must be 0 or 1")));
        }
        if plan.iter().any(|p| &p.name == name) {
            return Err(PlanError::Meta(reason!("chunk {name:?} is listed twice")));
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
            let arr = c.array.as_deref().ok_or_else(|| PlanError::Meta(reason!("chunk {name:?} lacks \"array\"")))?;
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
pub(super) fn write_limited(arrays: &[Array], out: &mut dyn WriteSeek, limit: u64) -> Result<()> {
    numpy_dtypes(arrays)?;
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
        PlanError::Meta(m) => bad(m.into()),
        PlanError::Other(e) => e,
    })?;
    let mut pos = HEADER_LEN;
    out.write_all(&[0; HEADER_LEN as usize]).map_err(Error::write_failed)?;
    let mut index_chunks = Vec::with_capacity(plan.len());
    let mut hashes = Map::new();
    for chunk in plan {
        let (entry, sha) = write_chunk(out, &mut pos, chunk).map_err(|e| match e {
            PlanError::Meta(m) => bad(m.into()),
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
                    Built::Bytes(ArrayData::Owned(std::sync::Arc::new(c.into_inner())))
                }
            }
        }
        Payload::Bytes(a) => Built::Bytes(a.data.clone()),
        Payload::Pinned(p) => Built::Bytes(ArrayData::Owned(std::sync::Arc::new(p))),
    };
    let len = match &built {
        Built::Bytes(b) => b.as_bytes().len() as u64,
        Built::Npz(_, learned) => learned.len(),
    };
    if len > MAX_CHUNK {
        return Err(PlanError::Meta(reason!("chunk {name:?}: {len} bytes exceed the FOLD limit of {MAX_CHUNK}")));
    }
    let offset = *pos;
    out.write_all(&[0; CHUNK_HEADER_LEN as usize]).map_err(Error::write_failed)?;
    let mut sink = Stored::new(out, ecc)?;
    let zerr = |e| Error::io_in("zstd", e);
    match built {
        Built::Bytes(payload) => {
            // Stored bytes `__fold` pins are kept when they still decode to the payload.
            let stored = stored.filter(|st| {
                flags == 1
                    && crate::convert::common::zstd_exact(&st[..], len)
                        .is_ok_and(|s| s.as_bytes() == payload.as_bytes())
            });
            if let Some(st) = stored {
                sink.write_all(&st).map_err(Error::write_failed)?;
            } else if flags == 1 && len <= ONE_SHOT {
                let comp = zstd::bulk::compress(payload.as_bytes(), ZSTD_LEVEL).map_err(zerr)?;
                sink.write_all(&comp).map_err(Error::write_failed)?;
            } else if flags == 1 {
                let mut z = zstd_stream(&mut sink, len)?;
                payload.slice(0..len as usize).each_window(&mut |w| z.write_all(w).map_err(Error::write_failed))?;
                z.finish().map_err(zerr)?;
            } else {
                payload.slice(0..len as usize).each_window(&mut |w| sink.write_all(w).map_err(Error::write_failed))?;
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
    let parity_len = parity.as_bytes().len() as u64;
    // What a reader refuses is never written (the output is not yet under its name).
    for (what, n) in [("stored bytes", comp_len), ("parity bytes", parity_len)] {
        if n > MAX_CHUNK {
            return Err(PlanError::Meta(reason!("chunk {name:?}: {n} {what} exceed the FOLD limit of {MAX_CHUNK}")));
        }
    }
    out.write_all(parity.as_bytes()).map_err(Error::write_failed)?;
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
    Bytes(ArrayData),
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
    fn finish(self) -> Result<(u64, u32, String, ArrayData)> {
        let parity = match self.parity {
            Some((enc, mut spill)) => {
                spill.push(&enc.finish())?;
                spill.finish()?
            }
            None => ArrayData::Owned(std::sync::Arc::new(Vec::new())),
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
