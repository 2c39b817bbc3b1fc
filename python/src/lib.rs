//! The `wtxt._rust` extension: a thin layer over the `wtxt` library. No
//! format logic lives here: arrays cross as (name, dtype, shape, bytes), keys
//! as file paths, failures as one exception carrying the error's kind, line
//! and message (the Python package turns it into `wtxt.Error` or
//! `wtxt.VerifyError`). The GIL is released while files are read, verified
//! or written.

use std::collections::BTreeMap;
use std::path::PathBuf;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use wtxt::convert::names::{self, OriginalNames};
use wtxt::crypto::mac::HmacKey;
use wtxt::crypto::sign::{SecretKey, TrustedKeys};
use wtxt::error::{Kind, Position};
use wtxt::model::{Array, ArrayData, Dtype};

pyo3::create_exception!(_rust, WtxtError, PyException, "kind, line (or None), message");

/// A library error as `WtxtError(kind, line, message)`.
fn raise(e: wtxt::Error) -> PyErr {
    let kind = match e.kind() {
        Kind::Check => "check",
        Kind::Input => "input",
        Kind::Usage => "usage",
        Kind::Io => "io",
    };
    let line = match e.position() {
        Position::Line(n) => Some(n),
        _ => None,
    };
    WtxtError::new_err((kind, line, e.to_string()))
}

fn hmac(path: Option<PathBuf>) -> Result<Option<HmacKey>, wtxt::Error> {
    path.as_deref().map(HmacKey::from_file).transpose()
}

fn trusted(pubkey: Option<PathBuf>, trusted_keys: Option<PathBuf>) -> Result<Option<TrustedKeys>, wtxt::Error> {
    TrustedKeys::from_flags(pubkey.as_deref(), trusted_keys.as_deref())
}

type Tensor = (String, String, Vec<u64>, Vec<u8>);

/// Writes `tensors` (name, dtype, shape, little-endian C-order bytes) as a
/// canonical WTXT at `path`; names that are not WTXT names and `metadata`
/// are kept for `load` (and `wtxt extract`). Returns `sha256_all` as hex.
#[pyfunction]
#[pyo3(signature = (tensors, path, metadata=None, prev=None, sign_key=None, hmac_key=None, gen=None, ts=None, part_size=None))]
#[allow(clippy::too_many_arguments)]
fn save(
    py: Python<'_>,
    tensors: Vec<Tensor>,
    path: PathBuf,
    metadata: Option<BTreeMap<String, String>>,
    prev: Option<PathBuf>,
    sign_key: Option<PathBuf>,
    hmac_key: Option<PathBuf>,
    gen: Option<u64>,
    ts: Option<String>,
    part_size: Option<String>,
) -> PyResult<String> {
    py.allow_threads(|| {
        let part_size = match part_size {
            Some(s) => s.parse().map_err(|m| wtxt::Error::usage(format!("part_size: {m}")))?,
            None => Default::default(),
        };
        let mut arrays = Vec::with_capacity(tensors.len());
        for (name, dtype, shape, bytes) in tensors {
            let dt = Dtype::parse(dtype.as_bytes())
                .ok_or_else(|| wtxt::Error::usage(format!("tensor {name}: unknown dtype {dtype}")))?;
            arrays.push(Array::with_original_name(name, dt, shape, ArrayData::from(bytes))?);
        }
        if let Some(d) = wtxt::model::first_duplicate(&arrays.iter().map(|a| a.name.clone()).collect::<Vec<_>>()) {
            return Err(wtxt::Error::usage(format!("two tensors are named {d:?}")));
        }
        let mut kept = OriginalNames { metadata, ..Default::default() };
        names::give_wtxt_names(&mut arrays, &mut kept)?;
        wtxt::model::sort_arrays(&mut arrays)?;
        let opts = wtxt::ops::SnapshotOptions {
            gen,
            prev,
            ts,
            hmac_key: hmac(hmac_key)?,
            sign_key: sign_key.as_deref().map(SecretKey::from_file).transpose()?,
            part_size,
            ..Default::default()
        };
        let w = wtxt::ops::snapshot_arrays(&arrays, &path, &opts, &wtxt::progress::Progress::hidden())?;
        Ok(hex_of(&w.sha256_all))
    })
    .map_err(raise)
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A verified WTXT's tensors under their original names (metadata arrays
/// left out), and the metadata kept with them.
type LoadedTensors = (Vec<(String, String, Vec<u64>, Py<PyBytes>)>, Option<BTreeMap<String, String>>);

/// Reads and verifies `path` (every check; with `hmac_key` every array must
/// authenticate; with `pubkey`/`trusted_keys` a signature must hold, and
/// must be there with `require_signature`).
#[pyfunction]
#[pyo3(signature = (path, hmac_key=None, pubkey=None, trusted_keys=None, require_signature=false))]
fn load(
    py: Python<'_>,
    path: PathBuf,
    hmac_key: Option<PathBuf>,
    pubkey: Option<PathBuf>,
    trusted_keys: Option<PathBuf>,
    require_signature: bool,
) -> PyResult<LoadedTensors> {
    let (arrays, kept) = py
        .allow_threads(|| {
            let key = hmac(hmac_key)?;
            let trusted = trusted(pubkey, trusted_keys)?;
            let opts = wtxt::wtxt::verify::VerifyOptions {
                hmac_key: key.as_ref(),
                trusted: trusted.as_ref(),
                require_signature,
                ..Default::default()
            };
            // A split snapshot's head is read with its parts.
            let mut input = wtxt::wtxt::input::WtxtIn::open(&path, None)?;
            let loaded = wtxt::wtxt::load(input.text(), input.len, &opts).map_err(|e| input.blame(e))?;
            let kept = OriginalNames::of(&loaded.arrays)?.unwrap_or_default();
            Ok((loaded.arrays, kept))
        })
        .map_err(raise)?;
    let tensors = arrays
        .iter()
        .filter(|a| !a.name.starts_with("__"))
        .map(|a| {
            let name = kept.original(&a.name).to_string();
            (name, a.dtype.as_str().to_string(), a.shape.clone(), PyBytes::new(py, a.bytes()).unbind())
        })
        .collect();
    Ok((tensors, kept.metadata.clone()))
}

/// `wtxt verify --json` of `path`: the report as JSON text.
#[pyfunction]
#[pyo3(signature = (path, hmac_key=None, pubkey=None, trusted_keys=None, require_signature=false, wsum=None, prev=None, allow_unauthenticated=false))]
#[allow(clippy::too_many_arguments)]
fn verify(
    py: Python<'_>,
    path: PathBuf,
    hmac_key: Option<PathBuf>,
    pubkey: Option<PathBuf>,
    trusted_keys: Option<PathBuf>,
    require_signature: bool,
    wsum: Option<PathBuf>,
    prev: Option<PathBuf>,
    allow_unauthenticated: bool,
) -> PyResult<String> {
    py.allow_threads(|| {
        let opts = wtxt::ops::VerifyFiles {
            wsum,
            hmac_key: hmac(hmac_key)?,
            trusted: trusted(pubkey, trusted_keys)?,
            require_signature,
            prev,
            allow_unauthenticated,
            unseal: None,
        };
        let report = wtxt::ops::verify_file(&path, &opts, &wtxt::progress::Progress::hidden())?;
        Ok(report.to_json())
    })
    .map_err(raise)
}

#[pymodule]
fn _rust(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("WtxtError", m.py().get_type::<WtxtError>())?;
    m.add_function(wrap_pyfunction!(save, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    Ok(())
}
