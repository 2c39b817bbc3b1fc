//! The records `wtxt._rust` returns: named fields, where a tuple would
//! leave the reader to count.

use std::collections::BTreeMap;

use numpy::PyArray1;
use pyo3::prelude::*;

/// How a requested snapshot ended.
#[pyclass(name = "Outcome", module = "wtxt._rust", frozen, get_all)]
pub struct PyOutcome {
    /// The generation written.
    pub gen: u64,
    /// Its commit, when it was committed.
    pub commit: Option<String>,
    /// Whether the commit reached the remote.
    pub pushed: bool,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// The seconds each stage took, as JSON text.
    pub stages: Option<String>,
}

/// A tensor a snapshot holds, as its `arr` line and names say.
#[pyclass(name = "TensorInfo", module = "wtxt._rust", frozen, get_all)]
#[derive(Clone)]
pub struct PyTensorInfo {
    /// Its original name.
    pub name: String,
    /// Its WTXT dtype.
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<u64>,
}

/// What a snapshot holds, read from its `arr` lines and metadata arrays
/// alone, nothing verified.
#[pyclass(name = "Outline", module = "wtxt._rust", frozen, get_all)]
pub struct PyOutline {
    /// Every tensor, in the file's order.
    pub tensors: Vec<PyTensorInfo>,
    /// The state dict's entries that are not tensors, as Python literals.
    pub objects: Option<BTreeMap<String, String>>,
}

/// A verified tensor: its bytes as a flat NumPy `uint8` array over the
/// buffer the decoder wrote (NumPy owns it; nothing was copied).
#[pyclass(name = "LoadedTensor", module = "wtxt._rust", frozen, get_all)]
pub struct PyLoadedTensor {
    /// Its original name.
    pub name: String,
    /// Its WTXT dtype.
    pub dtype: String,
    /// Its shape (when `load` was asked for rows, the first dimension
    /// counts those rows).
    pub shape: Vec<u64>,
    /// Its bytes, little-endian.
    pub data: Py<PyArray1<u8>>,
}

/// A verified snapshot's tensors and what was kept with them.
#[pyclass(name = "Loaded", module = "wtxt._rust", frozen, get_all)]
pub struct PyLoaded {
    /// The tensors, metadata arrays left out.
    pub tensors: Vec<Py<PyLoadedTensor>>,
    /// The metadata given when it was saved.
    pub metadata: Option<BTreeMap<String, String>>,
    /// The state dict's entries that are not tensors, as Python literals.
    pub objects: Option<BTreeMap<String, String>>,
    /// Its `merkle_this` as hex: it binds the header, the root and so every
    /// byte, so ranks loading one checkpoint compare it first.
    pub identity: String,
}
