//! NumPy `.npz`: a zip of `.npy` members, stored or deflated
//! (`numpy.savez_compressed`). Stored members are read in place from the map.

use std::io::{Cursor, Read, Seek, Write};
use std::sync::Arc;

use zip::CompressionMethod;

use crate::convert::npy::{self, Source};
use crate::error::{input_at, Error, Result};
use crate::limits::{MAX_ARRAYS, MAX_NPZ_MEMBER};
use crate::model::Array;

/// Reads every member of an `.npz`, each array named by its key (the
/// caller maps keys to WTXT names).
pub fn read(src: &Source) -> Result<Vec<Array>> {
    let bytes: &[u8] = src.bytes();
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| input_at(0, format!("not a readable zip archive: {e}")))?;
    if zip.len() > MAX_ARRAYS {
        return Err(input_at(0, format!("{} members exceed the limit of {MAX_ARRAYS}", zip.len())));
    }
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
                // The CRC of a stored member is checked by reading it through the zip reader.
                std::io::copy(&mut f, &mut std::io::sink()).map_err(|e| input_at(at, format!("member {name}: {e}")))?;
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
                // Grow as data comes; reserve only a little up front.
                let mut buf = Vec::with_capacity(size.min(64 << 20) as usize);
                // Never inflate past the declared size: a bomb stops here.
                (&mut f)
                    .take(size + 1)
                    .read_to_end(&mut buf)
                    .map_err(|e| input_at(at, format!("member {name}: {e}")))?;
                if buf.len() as u64 != size {
                    return Err(input_at(
                        at,
                        format!("member {name} inflates to more or less than its declared {size} bytes"),
                    ));
                }
                let len = buf.len();
                npy::read(&key, &Source::Owned(Arc::new(buf)), 0..len).map_err(wrap)?
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
pub fn with_key_names(mut arrays: Vec<Array>) -> Result<Vec<Array>> {
    let keys: Vec<String> = arrays.iter().map(|a| a.name.clone()).collect();
    let mut originals = keys.clone();
    originals.push(META.to_string());
    let names = crate::model::assign_names(&originals);
    let renamed = keys.iter().zip(&names).any(|(k, n)| k != n);
    for (a, n) in arrays.iter_mut().zip(&names) {
        a.name = n.clone();
    }
    if renamed {
        let list: Vec<serde_json::Value> =
            keys.iter().zip(&names).map(|(k, n)| serde_json::json!({"key": k, "array": n})).collect();
        arrays.push(crate::convert::meta_array(META, &serde_json::json!({ "keys": list }))?);
    }
    crate::model::sort_arrays(&mut arrays)?;
    Ok(arrays)
}

/// Writes `.npz` with the keys `__npz` names (in its order), then every
/// other array under its own name.
pub fn write_with_keys<W: Write + Seek>(arrays: &[Array], out: W) -> Result<W> {
    let Some(meta) = crate::convert::meta_json(arrays, META)? else {
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
        members.push((key, a));
    }
    let listed: std::collections::HashSet<&str> = members.iter().map(|m| m.1.name.as_str()).collect();
    let rest: Vec<&Array> = arrays.iter().filter(|a| a.name != META && !listed.contains(a.name.as_str())).collect();
    members.extend(rest.into_iter().map(|a| (a.name.as_str(), a)));
    write_keyed(members, out)
}

/// Writes arrays as an uncompressed `.npz` with fixed timestamps, so the
/// same arrays give the same bytes.
pub fn write<W: Write + Seek>(arrays: &[Array], out: W) -> Result<W> {
    write_keyed(arrays.iter().map(|a| (a.name.as_str(), a)), out)
}

/// Like [`write`], with each member's key given (a container's original
/// names, which need not be WTXT names).
pub fn write_keyed<'a, W: Write + Seek>(arrays: impl IntoIterator<Item = (&'a str, &'a Array)>, out: W) -> Result<W> {
    let mut z = zip::ZipWriter::new(out);
    let zerr = |e: zip::result::ZipError| Error::io("output", std::io::Error::other(e.to_string()));
    for (key, a) in arrays {
        let header = npy::header(a)?;
        let size = header.len() as u64 + a.bytes().len() as u64;
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .last_modified_time(zip::DateTime::default())
            .large_file(size >= u32::MAX as u64);
        z.start_file(format!("{key}.npy"), opts).map_err(zerr)?;
        z.write_all(&header).map_err(|e| Error::io("output", e))?;
        z.write_all(a.bytes()).map_err(|e| Error::io("output", e))?;
    }
    z.finish().map_err(zerr)
}
