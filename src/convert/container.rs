//! One interface for every binary container, and the table of them: adding
//! a format is one file and one row in [`CONTAINERS`]. Commands never match
//! on formats; they ask the table (by magic bytes when reading, by name or
//! extension when writing).

use std::io::{Seek, Write};

use serde_json::Value;

use crate::convert::npy::Source;
use crate::convert::{aero, fold, mldf, names, npy, npz, safetensors, volp, Notes};
use crate::error::{Error, Result};
use crate::model::Array;

/// A writer the containers can seek in (zip needs it; the rest stream).
pub trait WriteSeek: Write + Seek {}
impl<T: Write + Seek> WriteSeek for T {}

/// A binary container format.
pub trait Container: Sync {
    /// The name `--to` and messages use.
    fn name(&self) -> &'static str;
    /// File extensions it is written under, the usual one first.
    fn extensions(&self) -> &'static [&'static str];
    /// True when a file that starts with `head` and is `file_len` bytes long is of this format.
    fn sniff(&self, head: &[u8], file_len: u64) -> bool;
    /// Everything the file holds: tensors under their own names (mapped to
    /// WTXT names where needed) and this format's metadata arrays, so that
    /// writing them back gives the file again (what `convert` keeps). The
    /// metadata array is left out when it is what the writer would produce
    /// for the tensors alone. `stem` names a format's single array (`.npy`).
    fn read(&self, src: &Source, stem: &str, notes: &mut Notes) -> Result<Vec<Array>>;
    /// The tensors a snapshot takes, under the names the file gives them.
    fn read_tensors(&self, src: &Source, stem: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        let arrays = self.read(src, stem, notes)?;
        let kept = self.original_names(&arrays)?.unwrap_or_default();
        Ok(arrays.iter().filter(|a| !a.is_metadata()).map(|a| a.renamed(kept.original(&a.name))).collect())
    }
    /// Writes `arrays` (honouring this format's metadata arrays) to `out`.
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()>;
    /// The metadata arrays the writer reads back: a name is this format's
    /// when it equals one of these or starts with one followed by `_`.
    fn metadata(&self) -> &'static [&'static str];
    /// The Git filter's exact form: arrays that rebuild these very bytes
    /// (where our encoders would not reproduce stored bytes, those are
    /// pinned), or `None` when the filter does not carry this format.
    fn read_exact(&self, _content: &[u8], _notes: &mut Notes) -> Option<Result<Vec<Array>>> {
        None
    }

    /// True when the writer builds the whole file in memory (its output is
    /// then capped at [`crate::limits::MAX_IN_MEMORY_OUTPUT`]).
    fn writes_in_memory(&self) -> bool {
        false
    }

    /// Refuses, from their sizes alone, arrays this format cannot hold
    /// (checked before a WTXT is decoded): by default the heap cap of a
    /// writer that builds its file in memory.
    fn check_sizes(&self, arrays: &[Array]) -> Result<()> {
        if self.writes_in_memory() {
            crate::convert::fits_in_memory(arrays, self.name())?;
        }
        Ok(())
    }

    /// The original names (and metadata) this format's exact form keeps
    /// among `arrays`, for writers of other formats; `None` when it keeps none.
    fn original_names(&self, _arrays: &[Array]) -> Result<Option<names::OriginalNames>> {
        Ok(None)
    }

    /// True when the writer keeps a safetensors file's `__metadata__` (which
    /// `__names` carries); the rest report it left out.
    fn keeps_metadata(&self) -> bool {
        false
    }

    /// False when the writer transforms tensors' bytes (compresses them):
    /// they cannot then be decoded straight into their places in the output.
    fn stores_tensors_verbatim(&self) -> bool {
        true
    }

    /// True when `name` is one of this format's metadata arrays.
    fn owns(&self, name: &str) -> bool {
        self.metadata().iter().any(|m| name == *m || name.strip_prefix(m).is_some_and(|r| r.starts_with('_')))
    }
}

/// Every container, in the order their magic bytes are tried (safetensors,
/// which has none, last).
pub static CONTAINERS: [&dyn Container; 7] = [&Npy, &Npz, &Volp, &Fold, &Aero, &Mldf, &Safetensors];

/// The container a file starting with `head` is, by magic bytes only.
pub fn sniff(head: &[u8], file_len: u64) -> Option<&'static dyn Container> {
    CONTAINERS.iter().copied().find(|c| c.sniff(head, file_len))
}

/// The container named `name` (as `--to` spells it).
pub fn by_name(name: &str) -> Option<&'static dyn Container> {
    CONTAINERS.iter().copied().find(|c| c.name() == name)
}

/// The container an output file's extension asks for (`extract -o`).
pub fn by_extension(out: &std::path::Path) -> Result<&'static dyn Container> {
    let ext = out.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    CONTAINERS.iter().copied().find(|c| c.extensions().contains(&ext.as_str())).ok_or_else(|| {
        let all: Vec<String> = CONTAINERS.iter().flat_map(|c| c.extensions()).map(|e| format!(".{e}")).collect();
        Error::usage(format!("{}: output must end in {}", out.display(), all.join(", ")))
    })
}

/// The container whose metadata arrays `arrays` carry (a filter-made WTXT).
pub fn by_metadata(arrays: &[Array]) -> Option<&'static dyn Container> {
    CONTAINERS.iter().copied().find(|c| c.metadata().iter().any(|m| arrays.iter().any(|a| a.name == *m)))
}

/// Splits off metadata arrays that belong to other containers (their
/// names start with `__`), which `to` has no place for.
/// The original names an exact form kept (a safetensors header, `__aero`,
/// `__fold`, `__npz`, `__mldf`) still reach `to` when it gives names back:
/// as `__names`, unless the arrays carry one already. A safetensors
/// `__metadata__` that `to` cannot keep is reported with what is dropped.
pub fn foreign_metadata(arrays: Vec<Array>, to: &dyn Container) -> Result<(Vec<Array>, Vec<String>)> {
    let (mut keep, drop): (Vec<Array>, Vec<Array>) =
        arrays.into_iter().partition(|a| !a.is_metadata() || to.owns(&a.name));
    let mut dropped: Vec<String> = drop.iter().map(|a| a.name.clone()).collect();
    if to.owns(names::NAMES) && !keep.iter().any(|a| a.name == names::NAMES) {
        // An exact form too damaged to name anything is left out as before.
        let kept = CONTAINERS
            .iter()
            .filter(|c| c.name() != to.name())
            .find_map(|c| Some((c.original_names(&drop).ok()??, *c)));
        if let Some((kept, from)) = kept {
            keep.push(kept.to_array()?);
            crate::model::sort_arrays(&mut keep)?;
            for d in dropped.iter_mut().filter(|d| from.owns(d)) {
                d.push_str(" (its original names are kept)");
            }
        }
    }
    if !to.keeps_metadata() {
        if let Some(at) = keep.iter().position(|a| a.name == names::NAMES) {
            let mut kept = names::OriginalNames::of(&keep)?.unwrap_or_default();
            if kept.metadata.take().is_some() {
                dropped.push(format!("the safetensors __metadata__ in {}", names::NAMES));
                if kept.is_empty() {
                    keep.remove(at);
                } else {
                    keep[at] = kept.to_array()?;
                }
            }
        }
    }
    Ok((keep, dropped))
}

/// Leaves out the metadata array when it is exactly what reading back our
/// writer's output for the tensors alone would give (each container
/// predicts that without writing): then nothing is lost, and WTXT ->
/// container -> WTXT gives the same bytes.
fn drop_default_meta(arrays: Vec<Array>, predict: fn(&[Array]) -> Option<Value>) -> Result<Vec<Array>> {
    let (meta, tensors): (Vec<Array>, Vec<Array>) = arrays.into_iter().partition(|a| a.is_metadata());
    if let ([m], Some(p)) = (&meta[..], predict(&tensors)) {
        if m.bytes() == serde_json::to_vec(&p).expect("a JSON value serializes") {
            return Ok(tensors);
        }
    }
    let mut all = tensors;
    all.extend(meta);
    crate::model::sort_arrays(&mut all)?;
    Ok(all)
}

/// The arrays for a writer that names tensors freely (AERO, FOLD): under
/// the inputs' own names, as a snapshot kept them in `__names`, unless they
/// carry the format's exact form (`exact`), which names them itself.
fn with_original_names(arrays: &[Array], exact: &str) -> Result<Vec<Array>> {
    let (tensors, kept) = names::split(arrays)?;
    Ok(if tensors.iter().any(|a| a.name == exact) {
        tensors.into_iter().cloned().collect()
    } else {
        tensors.into_iter().map(|a| a.renamed(kept.original(&a.name))).collect()
    })
}

fn into_vec(out: &mut dyn WriteSeek, bytes: &[u8]) -> Result<()> {
    out.write_all(bytes).map_err(Error::write_failed)
}

struct Npy;
impl Container for Npy {
    fn name(&self) -> &'static str {
        "npy"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["npy"]
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(npy::MAGIC)
    }
    fn read(&self, src: &Source, stem: &str, _: &mut Notes) -> Result<Vec<Array>> {
        Ok(vec![npy::read(stem, src, 0..src.bytes().len())?])
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        let [a] = arrays else {
            return Err(Error::usage(format!(
                "a .npy holds one array, this selection has {}: use --array NAME or .npz",
                arrays.len()
            )));
        };
        into_vec(out, &npy::header(a)?)?;
        into_vec(out, a.bytes())
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[]
    }
}

struct Npz;
impl Container for Npz {
    fn original_names(&self, arrays: &[Array]) -> Result<Option<names::OriginalNames>> {
        npz::kept_names(arrays)
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
    fn read(&self, src: &Source, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        npz::with_key_names(npz::read(src)?)
    }
    fn read_tensors(&self, src: &Source, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        npz::read(src)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        // A filter-made WTXT carries the archive's exact form: give it back.
        if arrays.iter().any(|a| a.name == npz::SKELETON) {
            return into_vec(out, &npz::rebuild(arrays)?);
        }
        if arrays.iter().any(|a| a.name == npz::META) {
            return npz::write_with_keys(arrays, out).map(|_| ());
        }
        // The inputs' own names as the archive's keys, as a snapshot kept them.
        let (tensors, kept) = names::split(arrays)?;
        npz::write_keyed(tensors.into_iter().map(|a| (kept.original(&a.name), a)), out).map(|_| ())
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[npz::META, names::NAMES]
    }
    fn read_exact(&self, content: &[u8], _: &mut Notes) -> Option<Result<Vec<Array>>> {
        Some(npz::read_pinned(content))
    }
}

struct Safetensors;
impl Container for Safetensors {
    fn name(&self) -> &'static str {
        "safetensors"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["safetensors"]
    }
    fn sniff(&self, b: &[u8], file_len: u64) -> bool {
        // u64 LE header length, then a JSON object.
        b.len() >= 10 && b[8] == b'{' && {
            let n = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
            n >= 2 && n <= file_len - 8
        }
    }
    fn read(&self, src: &Source, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        let mut arrays = safetensors::safetensors_to_arrays_in(src)?;
        crate::model::sort_arrays(&mut arrays)?;
        // A file our own writer would produce for these tensors needs no
        // header array to be rebuilt: leave it out, so WTXT -> safetensors
        // -> WTXT gives the same bytes too.
        let tensors: Vec<Array> = arrays.iter().filter(|a| a.name != safetensors::ST_HEADER).cloned().collect();
        Ok(if safetensors::is_ours(src.bytes(), &tensors) { tensors } else { arrays })
    }
    /// The tensors, and the file's `__metadata__` in `__names` for `extract`.
    fn read_tensors(&self, src: &Source, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        let mut tensors = safetensors::read(src)?;
        if let Some(metadata) = safetensors::metadata(src)? {
            let kept = names::OriginalNames { metadata: Some(metadata), ..Default::default() };
            tensors.push(kept.to_array()?);
        }
        Ok(tensors)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        if arrays.iter().any(|a| a.name == safetensors::ST_HEADER) {
            return safetensors::write_pinned(arrays, out);
        }
        // The inputs' own names and `__metadata__`, as a snapshot kept them.
        let (tensors, kept) = names::split(arrays)?;
        let named: Vec<(&str, &Array)> = tensors.iter().map(|a| (kept.original(&a.name), *a)).collect();
        safetensors::write_named(&named, kept.metadata.as_ref(), out)
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[safetensors::ST_HEADER, names::NAMES]
    }
    fn read_exact(&self, content: &[u8], _: &mut Notes) -> Option<Result<Vec<Array>>> {
        Some(safetensors::safetensors_to_arrays(content))
    }
    fn original_names(&self, arrays: &[Array]) -> Result<Option<names::OriginalNames>> {
        safetensors::pinned_names(arrays)
    }
    fn keeps_metadata(&self) -> bool {
        true
    }
}

struct Volp;
impl Container for Volp {
    fn writes_in_memory(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        "volp"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["volp"]
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(volp::MAGIC)
    }
    fn read(&self, src: &Source, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        volp::read(src.bytes())
    }
    /// A snapshot of a VOLP keeps its header: it holds the volume's
    /// meaning (bbox, levels, scale and offset), not just its layout.
    fn read_tensors(&self, src: &Source, stem: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        self.read(src, stem, notes)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        into_vec(out, &volp::write(arrays)?)
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[volp::HEADER]
    }
}

struct Fold;
impl Container for Fold {
    fn original_names(&self, arrays: &[Array]) -> Result<Option<names::OriginalNames>> {
        fold::kept_names(arrays)
    }
    fn stores_tensors_verbatim(&self) -> bool {
        false
    }
    fn name(&self) -> &'static str {
        "fold"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["fold", "mind"]
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(fold::MAGIC)
    }
    fn read(&self, src: &Source, _: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        drop_default_meta(fold::read(src, notes)?, fold::default_meta)
    }
    fn read_tensors(&self, src: &Source, _: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        fold::read_tensors(src, notes)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        fold::write_to(&with_original_names(arrays, fold::META)?, out)
    }
    fn check_sizes(&self, arrays: &[Array]) -> Result<()> {
        fold::check_sizes(&with_original_names(arrays, fold::META)?)
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[fold::META, names::NAMES]
    }
    fn read_exact(&self, content: &[u8], notes: &mut Notes) -> Option<Result<Vec<Array>>> {
        Some(fold::read_pinned(&Source::Owned(std::sync::Arc::new(content.to_vec())), notes))
    }
}

struct Aero;
impl Container for Aero {
    fn original_names(&self, arrays: &[Array]) -> Result<Option<names::OriginalNames>> {
        aero::kept_names(arrays)
    }
    fn name(&self) -> &'static str {
        "aero"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["aero"]
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(aero::MAGIC)
    }
    fn read(&self, src: &Source, _: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        drop_default_meta(aero::read(src, notes)?, aero::default_meta)
    }
    fn read_tensors(&self, src: &Source, _: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        aero::read_tensors(src, notes)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        aero::write_to(&with_original_names(arrays, aero::META)?, out)
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[aero::META, names::NAMES]
    }
    fn read_exact(&self, content: &[u8], notes: &mut Notes) -> Option<Result<Vec<Array>>> {
        Some(aero::read_pinned(&Source::Owned(std::sync::Arc::new(content.to_vec())), notes))
    }
}

struct Mldf;
impl Container for Mldf {
    fn original_names(&self, arrays: &[Array]) -> Result<Option<names::OriginalNames>> {
        mldf::kept_names(arrays)
    }
    /// Samples interleave fields: a tensor's bytes are not in one place.
    fn stores_tensors_verbatim(&self) -> bool {
        false
    }
    fn name(&self) -> &'static str {
        "mldf"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["mldf"]
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(mldf::MAGIC)
    }
    fn read(&self, src: &Source, _: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        drop_default_meta(mldf::read(src, notes)?, mldf::default_meta)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        mldf::write_to(arrays, out)
    }
    /// A record per sample, however small: refuses a few bytes that
    /// declare a trillion samples.
    fn check_sizes(&self, arrays: &[Array]) -> Result<()> {
        mldf::check_sizes(arrays)
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[mldf::META, names::NAMES]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dtype;

    fn header_array(json: &str) -> Array {
        let mut b = (json.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(json.as_bytes());
        Array::new(safetensors::ST_HEADER, Dtype::U8, vec![b.len() as u64], b.into()).unwrap()
    }

    /// A safetensors header's names reach another format as `__names`; a
    /// header too damaged to name anything is left out, as before, without
    /// failing the conversion.
    #[test]
    fn an_exact_headers_names_go_to_other_formats_unless_it_is_damaged() {
        let w = Array::new("a_b", Dtype::F32, vec![1], vec![0u8; 4].into()).unwrap();
        let good = header_array(r#"{"a.b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#);
        let (kept, dropped) = foreign_metadata(vec![w.clone(), good], &Aero).unwrap();
        let names = names::OriginalNames::of(&kept).unwrap().expect("__names");
        assert_eq!(names.original("a_b"), "a.b");
        assert_eq!(dropped, ["__safetensors_header (its original names are kept)"]);
        let (kept, dropped) = foreign_metadata(vec![w, header_array("not json")], &Aero).unwrap();
        assert!(names::OriginalNames::of(&kept).unwrap().is_none());
        assert_eq!(dropped, ["__safetensors_header"]);
    }
}
