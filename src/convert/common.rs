//! What every container's reader and writer uses: the notes a reader
//! leaves, metadata arrays of JSON, exact zstd payloads, mapped inputs and
//! the check that an output fits in memory.

use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use crate::error::{reason, Error, Reason, Result};
use crate::model::Array;

/// Warnings a reader wants the user to see (a repaired chunk, a newer minor
/// version, metadata left out); the library never prints: the command does.
pub type Notes = Vec<String>;

/// How a container reader that maps names (AERO, FOLD) reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadAs {
    /// Tensors under WTXT names, the file's own kept in its metadata array.
    Mapped,
    /// As `Mapped`, also keeping stored bytes our encoders would not
    /// reproduce (the Git filter's exact form).
    Pinned,
    /// Tensors under the file's own names, for a snapshot to map and keep
    /// in `__names`.
    OwnNames,
}

/// Decompresses one zstd payload that must decode to exactly `want` bytes,
/// never inflating past that: a compression bomb stops at the declared
/// size. Large payloads go to a mapped temporary file (`buffer::Spill`), so the
/// heap stays small whatever the file declares.
pub fn zstd_exact(body: impl std::io::Read, want: u64) -> std::result::Result<crate::buffer::ArrayData, Reason> {
    use std::io::Read;
    let mut dec = zstd::stream::read::Decoder::new(body).map_err(|e| e.to_string())?;
    let mut out = crate::buffer::Spill::with_expected(want).map_err(|e| e.message().to_string())?;
    let mut piece = vec![0u8; 1 << 20];
    loop {
        let n = dec.read(&mut piece).map_err(|e| reason!("not a valid zstd frame: {e}"))?;
        if n == 0 {
            break;
        }
        if out.len() + n as u64 > want {
            return Err(reason!("decodes to more than the {want} bytes declared"));
        }
        out.push(&piece[..n]).map_err(|e| e.message().to_string())?;
    }
    if out.len() != want {
        return Err(reason!("decodes to {} bytes, {want} declared", out.len()));
    }
    out.finish().map_err(|e| Reason::new(e.message()))
}

/// A metadata array: `name` (beginning with `__`) holding `v` as UTF-8 JSON.
pub fn meta_array(name: &str, v: &serde_json::Value) -> Result<Array> {
    let bytes = serde_json::to_vec(v).expect("a JSON value serializes");
    Array::new(name, crate::model::Dtype::U8, vec![bytes.len() as u64], bytes.into())
}

/// The JSON held by metadata array `name`, if there is one.
pub fn meta_json(arrays: &[Array], name: &str) -> Result<Option<serde_json::Value>> {
    let Some(a) = arrays.iter().find(|a| a.name == name) else { return Ok(None) };
    if a.dtype != crate::model::Dtype::U8 || a.shape.len() != 1 {
        return Err(Error::input(Default::default(), format!("{name}: expected a rank-1 u8 array of JSON")));
    }
    serde_json::from_slice(a.bytes())
        .map(Some)
        .map_err(|e| Error::input(Default::default(), format!("{name}: not JSON: {e}")))
}

/// A streaming writer's output collected in memory (tests, fuzzing).
pub fn in_memory(write: impl FnOnce(&mut dyn std::io::Write) -> Result<()>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    write(&mut out)?;
    Ok(out)
}

/// A metadata array parsed into its serde shape (`None` when absent).
pub fn meta_typed<T: serde::de::DeserializeOwned>(arrays: &[Array], name: &str) -> Result<Option<T>> {
    meta_json(arrays, name)?
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| Error::input(Default::default(), format!("{name}: {e}")))
}

/// Maps a whole file read-only.
pub fn map_file(path: &Path) -> Result<Arc<Mmap>> {
    map_open(&crate::fs::open_input_file(path)?, path)
}

/// [`map_file`] of a file already open, named `path`.
#[allow(unsafe_code)]
pub fn map_open(f: &std::fs::File, path: &Path) -> Result<Arc<Mmap>> {
    // SAFETY: the map is read-only; a file truncated under us by another
    // process can fault, which is the accepted cost of not copying weights.
    // Not populated up front: that made every input wholly resident (a
    // 4.2 GiB safetensors held 4.4 GB of RSS through a snapshot), where the
    // WTXT writer drops the pages it is done with; faulting them in as read
    // costs about as much (docs/PERFORMANCE.md).
    let m = unsafe { memmap2::MmapOptions::new().map(f) }.map_err(|e| Error::io(path, e))?;
    Ok(Arc::new(m))
}

/// Refuses arrays too large for `writer`, which builds its file in memory
/// (MLDF, VOLP): the heap stays bounded whatever the input holds.
pub(crate) fn fits_in_memory(arrays: &[Array], writer: &str) -> Result<()> {
    let total: u64 = arrays.iter().map(|a| a.bytes().len() as u64).sum();
    if total > crate::limits::MAX_IN_MEMORY_OUTPUT {
        return Err(Error::input(
            Default::default(),
            format!(
                "{total} bytes of tensors: the {} writer builds the file in memory and takes at most {} \
                 (the heap cap); write .safetensors, .npz, .aero or .fold, which stream",
                writer,
                crate::limits::MAX_IN_MEMORY_OUTPUT
            ),
        ));
    }
    Ok(())
}
