//! NumPy `.npz`: a zip of `.npy` members, stored or deflated
//! (`numpy.savez_compressed`). Stored members are read in place from the map.
#![forbid(unsafe_code)]

use std::io::{Cursor, Read, Seek, Write};
use std::sync::Arc;

use zip::CompressionMethod;

use crate::buffer::ArrayData;
use crate::buffer::Spill;
use crate::convert::common::Notes;
use crate::convert::container::{into_vec, Container, WriteSeek};
use crate::convert::names;
use crate::convert::names::OriginalNames;
use crate::convert::npy;
use crate::error::{input_at, Error, Result};
use crate::limits::{MAX_ARRAYS, MAX_NPZ_MEMBER};
use crate::model::Array;

/// Refuses an archive whose members share bytes: a central directory that
/// lists one stored member many times (or members inside each other) would
/// make a small file read as many times its size. Checked before anything
/// is read or inflated.
fn check_members_apart<R: Read + Seek>(zip: &mut zip::ZipArchive<R>) -> Result<()> {
    let mut spans = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let f = zip.by_index_raw(i).map_err(|e| input_at(0, format!("zip member {i}: {e}")))?;
        let start = f.header_start();
        let end = f.data_start().unwrap_or(start).saturating_add(f.compressed_size());
        spans.push((start, end, i));
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(input_at(
                w[1].0,
                format!("zip members {} and {} overlap: an archive's members may not share bytes", w[0].2, w[1].2),
            ));
        }
    }
    Ok(())
}

/// Reads every member of an `.npz`, each array named by its key (the
/// caller maps keys to WTXT names).
pub fn read(src: &ArrayData) -> Result<Vec<Array>> {
    let bytes: &[u8] = src.as_bytes();
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| input_at(0, format!("not a readable zip archive: {e}")))?;
    if zip.len() > MAX_ARRAYS {
        return Err(input_at(0, format!("{} members exceed the limit of {MAX_ARRAYS}", zip.len())));
    }
    check_members_apart(&mut zip)?;
    let mut out = Vec::with_capacity(zip.len());
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).map_err(|e| input_at(0, format!("zip member {i}: {e}")))?;
        let name = f.name().map_err(|e| input_at(0, format!("zip member {i}: {e}")))?.into_owned();
        if name.ends_with('/') {
            continue;
        }
        let key = name.strip_suffix(".npy").unwrap_or(&name).to_string();
        let at = f.data_start().unwrap_or(0);
        let wrap = |e: Error| Error::input(e.position(), format!("member {name}: {}", e.message()));
        let array = match f.compression() {
            CompressionMethod::Stored => {
                let start = at as usize;
                let end = start
                    .checked_add(f.size() as usize)
                    .filter(|&e| e <= bytes.len())
                    .ok_or_else(|| input_at(at, format!("member {name} runs past the end of the file")))?;
                // The stored member's CRC, over windows dropped once read: a
                // large member is never wholly resident.
                let mut crc = crc32fast::Hasher::new();
                src.slice(start..end).each_window(&mut |w| {
                    crc.update(w);
                    Ok(())
                })?;
                if crc.finalize() != f.crc32() {
                    return Err(input_at(at, format!("member {name}: CRC-32 does not match its bytes")));
                }
                npy::read(&key, src, start..end).map_err(wrap)?
            }
            CompressionMethod::Deflated => {
                let size = f.size();
                if size > MAX_NPZ_MEMBER {
                    return Err(input_at(
                        at,
                        format!("member {name} declares {size} bytes, over the limit of {MAX_NPZ_MEMBER}"),
                    ));
                }
                // Deflate expands at most ~1032:1: a larger claim is a lie.
                if size > f.compressed_size().saturating_mul(1032).saturating_add(1024) {
                    return Err(input_at(
                        at,
                        format!(
                            "member {name} claims {size} bytes from {} compressed: not possible with deflate",
                            f.compressed_size()
                        ),
                    ));
                }
                // Never inflate past the declared size: a bomb stops here. A
                // large member goes to a mapped temporary file, not the heap.
                let mut buf = Spill::with_expected(size)?;
                std::io::copy(&mut (&mut f).take(size + 1), &mut buf)
                    .map_err(|e| input_at(at, format!("member {name}: {e}")))?;
                if buf.len() != size {
                    return Err(input_at(
                        at,
                        format!("member {name} inflates to more or less than its declared {size} bytes"),
                    ));
                }
                let buf = buf.finish()?;
                npy::read(&key, &buf, 0..size as usize).map_err(wrap)?
            }
            m => {
                return Err(input_at(
                    at,
                    format!("member {name}: compression {m} is not supported (expected stored or deflate)"),
                ))
            }
        };
        out.push(array);
    }
    Ok(out)
}

/// Name of the metadata array that keeps keys which are not WTXT names.
pub const META: &str = "__npz";

/// Gives the arrays of an `.npz` WTXT names; when a key had to change, the
/// keys in archive order go into `__npz` (`{"keys": [{"key", "array"}]}`)
/// so writing `.npz` again restores them.
pub fn with_key_names(arrays: Vec<Array>) -> Result<Vec<Array>> {
    key_names(arrays, false)
}

fn key_names(mut arrays: Vec<Array>, always: bool) -> Result<Vec<Array>> {
    let keys: Vec<String> = arrays.iter().map(|a| a.name.clone()).collect();
    let mut originals = keys.clone();
    originals.push(META.to_string());
    if let Some(d) = crate::model::first_duplicate(&originals) {
        return Err(input_at(0, format!("two members are named {d:?}")));
    }
    let names = crate::model::assign_names(&originals);
    let renamed = keys.iter().zip(&names).any(|(k, n)| k != n);
    for (a, n) in arrays.iter_mut().zip(&names) {
        a.name = n.clone();
    }
    if renamed || always {
        let list: Vec<serde_json::Value> =
            keys.iter().zip(&names).map(|(k, n)| serde_json::json!({"key": k, "array": n})).collect();
        arrays.push(crate::convert::common::meta_array(META, &serde_json::json!({ "keys": list }))?);
    }
    crate::model::sort_arrays(&mut arrays)?;
    Ok(arrays)
}

/// One member in `__npz` (and in `__fold`'s NPZ0 chunks): its key in the
/// archive and the array holding it.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// The member's name in the archive.
    pub key: String,
    /// The array's name once read.
    pub array: String,
}

/// The original names `__npz` keeps among `arrays` (each member's key),
/// for writers of other formats.
pub fn kept_names(arrays: &[Array]) -> Result<Option<OriginalNames>> {
    #[derive(serde::Deserialize)]
    struct Keys {
        keys: Vec<Member>,
    }
    let Some(m) = crate::convert::common::meta_typed::<Keys>(arrays, META)? else { return Ok(None) };
    Ok(OriginalNames::from_pairs(m.keys.into_iter().map(|k| (k.array, k.key))))
}

/// Name of the array holding the archive minus the tensor bytes spliced
/// out of it (the Git filter's exact form).
pub const SKELETON: &str = "__npz_skeleton";

/// Reads an `.npz` so that [`rebuild`] gives these exact bytes back: the
/// data of every stored, C-order little-endian member is cut out of the
/// archive (it lives in its array); the rest (zip records, `.npy` headers,
/// deflated members) is kept in `__npz_skeleton`, and `__npz` says where
/// each cut was (`"splices": [{"at", "array"}]`).
pub fn read_pinned(content: &[u8]) -> Result<Vec<Array>> {
    let src = ArrayData::Owned(Arc::new(content.to_vec()));
    let keyed = read(&src)?;
    let keys: Vec<String> = keyed.iter().map(|a| a.name.clone()).collect();
    let mut arrays = key_names(keyed, true)?;
    let meta_at = arrays.iter().position(|a| a.name == META).expect("always written");
    let mut meta = crate::convert::common::meta_json(&arrays, META)?.expect("present");
    let name_of = |key: &str| -> Option<String> {
        let list = meta["keys"].as_array()?;
        list.iter().find(|k| k["key"] == key).and_then(|k| k["array"].as_str().map(String::from))
    };
    let mut zip = zip::ZipArchive::new(Cursor::new(content)).map_err(|e| input_at(0, format!("not a zip: {e}")))?;
    let mut cuts: Vec<(usize, usize, String, serde_json::Value)> = Vec::new();
    for i in 0..zip.len() {
        let f = zip.by_index_raw(i).map_err(|e| input_at(0, format!("zip member {i}: {e}")))?;
        let Ok(member) = f.name().map(|n| n.to_string()) else { continue };
        let key = member.strip_suffix(".npy").unwrap_or(&member);
        let (Some(at), CompressionMethod::Stored, true) =
            (f.data_start(), f.compression(), keys.iter().any(|k| k == key))
        else {
            continue;
        };
        let start = at as usize;
        let Some(body) = content.get(start..start + f.size() as usize) else { continue };
        let Ok(h) = npy::parse_header(body) else { continue };
        // Only members whose CRC-32 stands right in both headers: rebuild
        // recomputes it, which must give the bytes the archive has.
        let crc = crc32fast::hash(body).to_le_bytes();
        let crc_ok = [f.header_start() + 14, f.central_header_start() + 16]
            .iter()
            .all(|&at| content.get(at as usize..at as usize + 4) == Some(&crc[..]));
        if crc_ok && !h.big_endian && (!h.fortran_order || h.shape.len() < 2) {
            if let Some(name) = name_of(key) {
                // Where the member's CRC-32 stands (local and central headers),
                // so a changed tensor of the same size gets a correct archive.
                let crc = serde_json::json!({"member": [start, start + body.len()],
                    "crc_at": [f.header_start() + 14, f.central_header_start() + 16]});
                cuts.push((start + h.data_offset, start + body.len(), name, crc));
            }
        }
    }
    cuts.sort_by_key(|c| c.0);
    let mut skeleton = Vec::with_capacity(content.len() - cuts.iter().map(|c| c.1 - c.0).sum::<usize>());
    let mut pos = 0;
    let mut splices = Vec::with_capacity(cuts.len());
    for (from, to, name, crc) in cuts {
        skeleton.extend_from_slice(&content[pos..from]);
        let mut s = serde_json::json!({"at": from, "array": name, "len": to - from});
        s["member"] = crc["member"].clone();
        s["crc_at"] = crc["crc_at"].clone();
        splices.push(s);
        pos = to;
    }
    skeleton.extend_from_slice(&content[pos..]);
    meta["splices"] = serde_json::Value::Array(splices);
    arrays[meta_at] = crate::convert::common::meta_array(META, &meta)?;
    let n = skeleton.len() as u64;
    arrays.push(Array::new(SKELETON, crate::model::Dtype::U8, vec![n], skeleton.into())?);
    crate::model::sort_arrays(&mut arrays)?;
    Ok(arrays)
}

/// The archive [`read_pinned`] read: the skeleton with each array's bytes
/// put back where they were cut and each such member's CRC-32 recomputed
/// (a merge may have changed values). When a tensor no longer has its old
/// size the archive cannot keep its layout: a fresh `.npz` is written.
pub fn rebuild(arrays: &[Array]) -> Result<Vec<u8>> {
    let meta = crate::convert::common::meta_json(arrays, META)?;
    let resized = meta.as_ref().and_then(|m| m["splices"].as_array()).is_some_and(|list| {
        list.iter().any(|s| {
            let a = arrays.iter().find(|a| s["array"] == a.name.as_str());
            a.map(|a| a.bytes().len() as u64) != s["len"].as_u64()
        })
    });
    if resized {
        let plain: Vec<Array> = arrays.iter().filter(|a| a.name != SKELETON).cloned().collect();
        return Ok(write_with_keys(&plain, Cursor::new(Vec::new()))?.into_inner());
    }
    let mut out = splice(arrays)?;
    for s in meta.as_ref().and_then(|m| m["splices"].as_array()).into_iter().flatten() {
        let range =
            s["member"].as_array().and_then(|m| Some((m.first()?.as_u64()? as usize, m.get(1)?.as_u64()? as usize)));
        let Some((a, b)) = range.filter(|&(a, b)| a <= b && b <= out.len()) else { continue };
        let crc = crc32fast::hash(&out[a..b]).to_le_bytes();
        for at in s["crc_at"].as_array().into_iter().flatten().filter_map(|x| x.as_u64()) {
            if let Some(dst) = out.get_mut(at as usize..at as usize + 4) {
                dst.copy_from_slice(&crc);
            }
        }
    }
    Ok(out)
}

fn splice(arrays: &[Array]) -> Result<Vec<u8>> {
    let bad = |m: &str| Error::input(Default::default(), format!("{SKELETON}: {m}"));
    let skeleton = arrays.iter().find(|a| a.name == SKELETON).ok_or_else(|| bad("missing"))?.bytes();
    let meta = crate::convert::common::meta_json(arrays, META)?.ok_or_else(|| bad("no __npz"))?;
    let splices = meta["splices"].as_array().ok_or_else(|| bad("no splices in __npz"))?;
    // Each array fills one place: a file whose splices reuse bytes would
    // make a small WTXT rebuild into an archive many times its size.
    let mut used = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(skeleton.len());
    let mut from = 0usize;
    for s in splices {
        let at = s["at"].as_u64().ok_or_else(|| bad("a splice lacks \"at\""))? as usize;
        let name = s["array"].as_str().ok_or_else(|| bad("a splice lacks \"array\""))?;
        if !used.insert(name) {
            return Err(bad(&format!("array {name} is spliced in more than once")));
        }
        let a = arrays.iter().find(|a| a.name == name).ok_or_else(|| bad("a spliced array is missing"))?;
        let take = at
            .checked_sub(out.len())
            .filter(|&t| from + t <= skeleton.len())
            .ok_or_else(|| bad("splices out of order"))?;
        out.extend_from_slice(&skeleton[from..from + take]);
        from += take;
        out.extend_from_slice(a.bytes());
    }
    out.extend_from_slice(&skeleton[from..]);
    Ok(out)
}

/// Writes `.npz` with the keys `__npz` names (in its order), then every
/// other array under its own name.
pub fn write_with_keys<W: Write + Seek>(arrays: &[Array], out: W) -> Result<W> {
    let Some(meta) = crate::convert::common::meta_json(arrays, META)? else {
        return write(arrays, out);
    };
    let bad = || Error::input(Default::default(), format!("{META}: expected {{\"keys\": [{{\"key\", \"array\"}}]}}"));
    let mut members: Vec<(&str, &Array)> = Vec::new();
    for k in meta.get("keys").and_then(|k| k.as_array()).ok_or_else(bad)? {
        let (Some(key), Some(name)) = (k.get("key").and_then(|v| v.as_str()), k.get("array").and_then(|v| v.as_str()))
        else {
            return Err(bad());
        };
        let a = arrays
            .iter()
            .find(|a| a.name == name)
            .ok_or_else(|| Error::input(Default::default(), format!("{META}: array {name} is missing")))?;
        check_member_key(key)?;
        members.push((key, a));
    }
    let listed: std::collections::HashSet<&str> = members.iter().map(|m| m.1.name.as_str()).collect();
    let rest: Vec<&Array> = arrays.iter().filter(|a| a.name != META && !listed.contains(a.name.as_str())).collect();
    members.extend(rest.into_iter().map(|a| (a.name.as_str(), a)));
    write_keyed(members, out)
}

/// A member key from metadata becomes a zip entry name: it must not climb
/// out of the folder an unzip would write to, nor name a folder.
fn check_member_key(key: &str) -> Result<()> {
    let bad = key.is_empty()
        || key.starts_with('/')
        || key.contains('\\')
        || key.contains('\0')
        || key.split('/').any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        return Err(Error::input(Default::default(), format!("{META}: key {key:?} is not a safe archive member name")));
    }
    Ok(())
}

/// Writes arrays as an uncompressed `.npz` with fixed timestamps, so the
/// same arrays give the same bytes.
pub fn write<W: Write + Seek>(arrays: &[Array], out: W) -> Result<W> {
    write_keyed(arrays.iter().map(|a| (a.name.as_str(), a)), out)
}

/// Like [`write()`], with each member's key given (a container's original
/// names, which need not be WTXT names).
pub fn write_keyed<'a, W: Write + Seek>(arrays: impl IntoIterator<Item = (&'a str, &'a Array)>, out: W) -> Result<W> {
    let mut z = zip::ZipWriter::new(out);
    let zerr = |e: zip::result::ZipError| Error::write_failed(std::io::Error::other(e.to_string()));
    for (key, a) in arrays {
        let header = npy::header(a)?;
        let size = header.len() as u64 + a.bytes().len() as u64;
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .last_modified_time(zip::DateTime::default())
            .large_file(size >= u32::MAX as u64);
        z.start_file(format!("{key}.npy"), opts).map_err(zerr)?;
        z.write_all(&header).map_err(Error::write_failed)?;
        a.data.each_window(&mut |b| z.write_all(b).map_err(Error::write_failed))?;
    }
    z.finish().map_err(zerr)
}

/// The npz row of the container table.
pub struct Npz;
impl Container for Npz {
    fn original_names(&self, arrays: &[Array]) -> Result<Option<names::OriginalNames>> {
        kept_names(arrays)
    }
    fn name(&self) -> &'static str {
        "npz"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["npz"]
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06")
    }
    fn read(&self, src: &ArrayData, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        with_key_names(read(src)?)
    }
    fn read_tensors(&self, src: &ArrayData, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        read(src)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        // A filter-made WTXT carries the archive's exact form: give it back.
        if arrays.iter().any(|a| a.name == SKELETON) {
            return into_vec(out, &rebuild(arrays)?);
        }
        if arrays.iter().any(|a| a.name == META) {
            return write_with_keys(arrays, out).map(|_| ());
        }
        // The inputs' own names as the archive's keys, as a snapshot kept them.
        let (tensors, kept) = names::split(arrays)?;
        write_keyed(tensors.into_iter().map(|a| (kept.original(&a.name), a)), out).map(|_| ())
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[META, names::NAMES]
    }
    fn read_exact(&self, content: &[u8], _: &mut Notes) -> Option<Result<Vec<Array>>> {
        Some(read_pinned(content))
    }
}
