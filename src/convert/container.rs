//! One interface for every binary container: each format's file implements
//! [`Container`] for its row of the table ([`crate::convert::formats`]),
//! with the helpers here that the rows share.

use std::io::{Seek, Write};

use serde_json::Value;

use crate::buffer::ArrayData;
use crate::convert::common::Notes;
use crate::convert::names;
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
    fn read(&self, src: &ArrayData, stem: &str, notes: &mut Notes) -> Result<Vec<Array>>;
    /// The tensors a snapshot takes, under the names the file gives them.
    fn read_tensors(&self, src: &ArrayData, stem: &str, notes: &mut Notes) -> Result<Vec<Array>> {
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
            crate::convert::common::fits_in_memory(arrays, self.name())?;
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

    /// True when a file of this format holds exactly one array (`.npy`).
    fn holds_one_array(&self) -> bool {
        false
    }

    /// True when `name` is one of this format's metadata arrays.
    fn owns(&self, name: &str) -> bool {
        self.metadata().iter().any(|m| name == *m || name.strip_prefix(m).is_some_and(|r| r.starts_with('_')))
    }
}

/// The row of a format that keeps its whole layout in one JSON metadata
/// array (`__fold`, `__aero`) and the inputs' own names beside it: the
/// format's functions, which [`Container`] composes the same way for each.
pub(crate) struct MetaLayout {
    /// [`Container::name`].
    pub name: &'static str,
    /// [`Container::extensions`].
    pub extensions: &'static [&'static str],
    /// The bytes a file starts with.
    pub magic: &'static [u8],
    /// [`Container::metadata`]: the layout array first, then `__names`.
    pub metadata: &'static [&'static str],
    /// Every array, the metadata array included.
    pub read: fn(&ArrayData, &mut Notes) -> Result<Vec<Array>>,
    /// [`Container::read_tensors`].
    pub read_tensors: fn(&ArrayData, &mut Notes) -> Result<Vec<Array>>,
    /// [`Container::read_exact`].
    pub read_pinned: fn(&ArrayData, &mut Notes) -> Result<Vec<Array>>,
    /// Writes arrays under the names they are to have in the file.
    pub write: fn(&[Array], &mut dyn WriteSeek) -> Result<()>,
    /// The metadata array reading the writer's output for these tensors gives.
    pub default_meta: fn(&[Array]) -> Option<Value>,
    /// [`Container::original_names`].
    pub kept_names: fn(&[Array]) -> Result<Option<names::OriginalNames>>,
    /// [`Container::check_sizes`].
    pub check_sizes: fn(&[Array]) -> Result<()>,
    /// [`Container::stores_tensors_verbatim`].
    pub verbatim: bool,
}

impl Container for MetaLayout {
    fn name(&self) -> &'static str {
        self.name
    }
    fn extensions(&self) -> &'static [&'static str] {
        self.extensions
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(self.magic)
    }
    fn read(&self, src: &ArrayData, _: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        drop_default_meta((self.read)(src, notes)?, self.default_meta)
    }
    fn read_tensors(&self, src: &ArrayData, _: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        (self.read_tensors)(src, notes)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        (self.write)(&with_original_names(arrays, self.metadata[0])?, out)
    }
    fn check_sizes(&self, arrays: &[Array]) -> Result<()> {
        (self.check_sizes)(arrays)
    }
    fn metadata(&self) -> &'static [&'static str] {
        self.metadata
    }
    fn read_exact(&self, content: &[u8], notes: &mut Notes) -> Option<Result<Vec<Array>>> {
        Some((self.read_pinned)(&ArrayData::Owned(std::sync::Arc::new(content.to_vec())), notes))
    }
    fn original_names(&self, arrays: &[Array]) -> Result<Option<names::OriginalNames>> {
        (self.kept_names)(arrays)
    }
    fn stores_tensors_verbatim(&self) -> bool {
        self.verbatim
    }
}

/// Leaves out the metadata array when it is exactly what reading back our
/// writer's output for the tensors alone would give (each container
/// predicts that without writing): then nothing is lost, and WTXT ->
/// container -> WTXT gives the same bytes.
pub(crate) fn drop_default_meta(arrays: Vec<Array>, predict: fn(&[Array]) -> Option<Value>) -> Result<Vec<Array>> {
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
pub(crate) fn with_original_names(arrays: &[Array], exact: &str) -> Result<Vec<Array>> {
    let (tensors, kept) = names::split(arrays)?;
    Ok(if tensors.iter().any(|a| a.name == exact) {
        tensors.into_iter().cloned().collect()
    } else {
        tensors.into_iter().map(|a| a.renamed(kept.original(&a.name))).collect()
    })
}

/// Writes a file built in memory.
pub(crate) fn into_vec(out: &mut dyn WriteSeek, bytes: &[u8]) -> Result<()> {
    out.write_all(bytes).map_err(Error::write_failed)
}
