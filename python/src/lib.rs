//! The `wtxt._rust` extension: a thin layer over the `wtxt` library. No
//! format logic lives here: arrays cross as (name, dtype, shape, bytes), keys
//! as file paths, failures as one exception carrying the error's kind, line
//! and message (the Python package turns it into `wtxt.Error` or
//! `wtxt.VerifyError`). The GIL is released while files are read, verified
//! or written.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

mod arrays;
mod dist;
mod error;
mod options;
mod records;
mod schedule;

use numpy::PyArray1;
use pyo3::prelude::*;

use wtxt::convert::{objects_of, OriginalNames};
use wtxt::daemon::{DaemonConfig, Generation, Outcomes, Queue, Snapshotter};
use wtxt::format::Keep;
use wtxt::model::ArrayData;

use arrays::{copy_staged, hex_of, named_arrays, Staged};
use error::{raise, WtxtError};
use options::{Trust, Writing};

/// Writes `tensors` (staged NumPy arrays, copied once with the GIL
/// released) as a canonical WTXT at `path`; names that are not WTXT names and `metadata`
/// are kept for `load` (and `wtxt extract`), `objects` (a state dict's
/// entries that are not tensors, as Python literals) in `__objects`.
/// Returns `sha256_all` as hex.
#[pyfunction]
#[pyo3(signature = (tensors, path, writing, metadata=None, objects=None))]
fn save(
    py: Python<'_>,
    tensors: Vec<Staged>,
    path: PathBuf,
    writing: Writing,
    metadata: Option<BTreeMap<String, String>>,
    objects: Option<BTreeMap<String, String>>,
) -> PyResult<String> {
    py.allow_threads(|| {
        let mut no_spare = Vec::new();
        let arrays = named_arrays(copy_staged(tensors, &mut no_spare).into_iter(), metadata, objects)?;
        let opts = writing.options()?;
        let w = wtxt::ops::snapshot_arrays(&arrays, &path, &opts, &wtxt::progress::Progress::hidden())?;
        Ok(hex_of(&w.sha256_all))
    })
    .map_err(raise)
}

/// `wtxt snapshot FOLDER`: a Hugging Face folder (every file, the shards
/// checked against the index) as a snapshot at `path`. Returns `sha256_all`
/// as hex and the notes (files left out).
#[pyfunction]
fn save_folder(py: Python<'_>, folder: PathBuf, path: PathBuf, writing: Writing) -> PyResult<(String, Vec<String>)> {
    py.allow_threads(|| {
        if !wtxt::convert::is_folder(&folder) {
            return Err(wtxt::Error::usage(format!("{}: not a Hugging Face folder", folder.display())));
        }
        let opts = writing.options()?;
        let mut notes = Vec::new();
        let w = wtxt::ops::snapshot(&[folder], &path, &opts, &wtxt::progress::Progress::hidden(), &mut notes)?;
        Ok((hex_of(&w.sha256_all), notes))
    })
    .map_err(raise)
}

/// `wtxt extract --hf`: the Hugging Face folder a snapshot was made from,
/// verified (every check, under the trust options given), written into the
/// new folder `out`. Returns the number of shards.
#[pyfunction]
fn extract_folder(py: Python<'_>, path: PathBuf, out: PathBuf, trust: Trust) -> PyResult<usize> {
    py.allow_threads(|| {
        let keys = trust.keys()?;
        wtxt::ops::extract_folder(&path, &out, &keys.verify_options(), None)
    })
    .map_err(raise)
}

/// `wtxt git export`: the snapshot at `path` (a file in a Git work tree)
/// as revision `rev` holds it, head and parts read from that commit,
/// written to `out` (nothing verified here: the loader that reads `out`
/// verifies it). Returns the number of parts.
#[pyfunction]
fn export(py: Python<'_>, path: PathBuf, rev: String, out: PathBuf) -> PyResult<usize> {
    py.allow_threads(|| wtxt::ops::export_path(&path, &rev, &out)).map_err(raise)
}

/// The snapshot daemon's pipeline inside the process (ring, delta, age,
/// commit, push, resend queue); `wtxt.Snapshotter` is its Python face.
#[pyclass(name = "Snapshotter", module = "wtxt._rust")]
struct PySnapshotter {
    inner: std::sync::Mutex<Option<Snapshotter>>,
    outcomes: std::sync::Arc<Outcomes>,
    next_gen: std::sync::atomic::AtomicU64,
    /// The generation the last publish replaced: once the snapshot thread no
    /// longer holds it, its buffers take the next copy (no fresh pages to
    /// fault in, which costs more than the copy itself).
    replaced: std::sync::Mutex<Option<std::sync::Arc<Generation>>>,
    /// Held through each publish: see [`PySnapshotter::publish`].
    publishing: std::sync::Mutex<()>,
}

/// Buffers of a generation nothing else holds, to copy the next one into.
fn reclaim(g: Option<std::sync::Arc<Generation>>) -> Vec<Vec<u8>> {
    let Some(g) = g.and_then(|g| std::sync::Arc::try_unwrap(g).ok()) else { return Vec::new() };
    g.arrays
        .into_iter()
        .filter_map(|a| match a.data {
            ArrayData::Owned(v) => std::sync::Arc::try_unwrap(v).ok(),
            _ => None,
        })
        .collect()
}

impl PySnapshotter {
    /// Runs `f` on the open Snapshotter with the GIL released: the lock it
    /// takes is held by `flush` while that waits, and a thread that waited
    /// for it holding the GIL would stop every other Python thread.
    fn with<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&Snapshotter) -> T + Send) -> PyResult<T> {
        py.allow_threads(|| self.with_inner(f)).map_err(raise)
    }

    /// [`PySnapshotter::with`] without the GIL: its error is wtxt's.
    fn with_inner<T>(&self, f: impl FnOnce(&Snapshotter) -> T) -> Result<T, wtxt::Error> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_ref() {
            Some(s) => Ok(f(s)),
            None => Err(wtxt::Error::usage("the Snapshotter is closed")),
        }
    }
}

#[pymethods]
impl PySnapshotter {
    /// The daemon's pipeline in this process: the key files, part size
    /// and digest form from `writing` (as `save` takes them; with no HMAC
    /// key file `WTXT_HMAC_KEY` counts, as for the daemon), the rest as the
    /// daemon's settings name them.
    #[new]
    #[pyo3(signature = (repo, path_in_repo, writing, remote=None, ring=None, recipients=Vec::new(), keep=None, build=None, coalesce=false, max_pending=2))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        repo: PathBuf,
        path_in_repo: PathBuf,
        writing: Writing,
        remote: Option<String>,
        ring: Option<PathBuf>,
        recipients: Vec<String>,
        keep: Option<usize>,
        build: Option<String>,
        coalesce: bool,
        max_pending: usize,
    ) -> PyResult<PySnapshotter> {
        py.allow_threads(|| {
            writing.no_generation("Snapshotter")?;
            let (parts, digest) = writing.choices()?;
            let mut keys = writing.key_files();
            keys.hmac.from_env = true;
            let cfg = DaemonConfig {
                repo: Some(repo),
                path_in_repo: Some(path_in_repo),
                remote,
                ring,
                keys,
                parts,
                digest,
                recipients,
                keep,
                build: Some(build.unwrap_or_else(|| "python".into())),
                ..Default::default()
            };
            // Background failures reach Python through the futures and status().
            let (pc, _) = cfg.pipeline(std::sync::Arc::new(|_: &str| {}))?;
            let queue = if coalesce { Queue::Coalesce } else { Queue::Every { max_pending } };
            let snap = Snapshotter::start(pc, Generation::default(), queue)?;
            let next = snap.next_gen()?;
            Ok(PySnapshotter {
                outcomes: snap.outcomes(),
                inner: std::sync::Mutex::new(Some(snap)),
                next_gen: std::sync::atomic::AtomicU64::new(next),
                replaced: std::sync::Mutex::new(None),
                publishing: std::sync::Mutex::new(()),
            })
        })
        .map_err(raise)
    }

    /// Stages one copy of the arrays (the GIL released while copying) and
    /// publishes it as the next generation, which it returns.
    #[pyo3(signature = (tensors, metadata=None, objects=None))]
    fn publish(
        &self,
        py: Python<'_>,
        tensors: Vec<Staged>,
        metadata: Option<BTreeMap<String, String>>,
        objects: Option<BTreeMap<String, String>>,
    ) -> PyResult<u64> {
        self.with(py, |_| ())?;
        // One publish at a time, from taking a generation to publishing it
        // (the lock is taken with the GIL released): from several threads,
        // generations are unique and increase in the order they are published.
        py.allow_threads(|| {
            let _one = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
            let gen = self.next_gen.load(std::sync::atomic::Ordering::SeqCst);
            let mut spare = reclaim(self.replaced.lock().unwrap_or_else(|e| e.into_inner()).take());
            let arrays = named_arrays(copy_staged(tensors, &mut spare).into_iter(), metadata, objects)?;
            let old = self.with_inner(|s| s.swap(std::sync::Arc::new(Generation { gen, arrays })))?;
            *self.replaced.lock().unwrap_or_else(|e| e.into_inner()) = Some(old);
            self.next_gen.store(gen + 1, std::sync::atomic::Ordering::SeqCst);
            Ok(gen)
        })
        .map_err(raise)
    }

    /// Asks for a snapshot of the newest generation and returns that
    /// generation (nothing is hashed, written or pushed here); the GIL is
    /// released while it waits for room in the queue.
    fn request(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |s| s.request_snapshot())
    }

    /// Waits (the GIL released) for the snapshot that answers a request of
    /// generation `gen`: how it ended, or None if the
    /// Snapshotter closed first or `timeout` seconds passed.
    #[pyo3(signature = (gen, timeout=None))]
    fn wait(&self, py: Python<'_>, gen: u64, timeout: Option<f64>) -> Option<records::PyOutcome> {
        let outcomes = self.outcomes.clone();
        let timeout = timeout.map(|t| std::time::Duration::from_secs_f64(t.max(0.0)));
        py.allow_threads(move || outcomes.wait_for(gen, timeout)).map(|o| records::PyOutcome {
            gen: o.gen,
            commit: o.commit,
            pushed: o.pushed,
            error: o.error,
            stages: o.stages.map(|s| s.to_json()),
        })
    }

    /// Waits until every request so far is written, committed and pushed
    /// (or parked in the resend queue, which is retried first).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |s| s.flush())
    }

    /// The daemon's `status`, as JSON text.
    fn status(&self, py: Python<'_>) -> PyResult<String> {
        self.with(py, |s| s.status().to_json())
    }

    /// Finishes what is queued and stops the background threads.
    fn close(&self, py: Python<'_>) {
        py.allow_threads(|| {
            if let Some(s) = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take() {
                s.shutdown();
            }
        });
    }
}

/// Memory a load decodes a tensor's rows into: (dtype, shape of the rows,
/// writable contiguous bytes).
type RowsInto<'py> = (String, Vec<u64>, numpy::PyReadwriteArray1<'py, u8>);

/// Reads and verifies `path` (every check; with `hmac_key` every array must
/// authenticate; with `pubkey`/`trusted_keys` a signature must hold, and
/// must be there with `require_signature`). With `metadata_only` every
/// array is still verified but only the metadata is kept. With `rows` (by
/// original name: `start..end` of the first dimension) every array is
/// still verified but only those rows of those tensors are kept: a rank's
/// share of a distributed load. `into` names tensors (of `rows`) whose rows
/// are decoded straight into the caller's memory, each given as (dtype,
/// shape of the rows, a writable contiguous byte array): they are not
/// returned, and a failed check leaves that memory partly written.
#[pyfunction]
#[pyo3(signature = (path, trust=None, metadata_only=false, rows=None, into=None))]
fn load<'py>(
    py: Python<'py>,
    path: PathBuf,
    trust: Option<Trust>,
    metadata_only: bool,
    rows: Option<BTreeMap<String, (u64, u64)>>,
    into: Option<BTreeMap<String, RowsInto<'py>>>,
) -> PyResult<records::PyLoaded> {
    let mut into = into.unwrap_or_default();
    let into_names: std::collections::BTreeSet<String> = into.keys().cloned().collect();
    let mut destinations = BTreeMap::new();
    for (name, (dtype, shape, mem)) in &mut into {
        let dtype = wtxt::model::Dtype::parse(dtype.as_bytes())
            .ok_or_else(|| raise(wtxt::Error::usage(format!("{name}: no dtype {dtype:?}"))))?;
        let bytes = mem.as_slice_mut().map_err(|e| raise(wtxt::Error::usage(format!("{name}: {e}"))))?;
        destinations.insert(name.clone(), wtxt::format::Destination { dtype, shape: shape.clone(), bytes });
    }
    let (arrays, kept, objects, identity) = py
        .allow_threads(|| {
            let keys = trust.map(Trust::keys).transpose()?.unwrap_or_default();
            let opts = keys.verify_options();
            let outline = match rows.is_some() || !destinations.is_empty() {
                true => wtxt::ops::named_outline(&path)?,
                false => None,
            };
            let stored = rows.as_ref().map(|r| stored_names(outline.as_ref(), r.clone()));
            let destinations = stored_names(outline.as_ref(), destinations);
            // A split snapshot's head is read with its parts. A rank's
            // share does not hash every part: what it keeps is proven by
            // the arrays' digests (the tree form reads little else), and
            // the parts are checked only to name the culprit of a failure.
            let unhashed = stored.is_some();
            // A load of some tensors of the tree form opens only the parts
            // that hold them.
            let mut input = match &stored {
                Some(rows) => wtxt::store::WtxtIn::open_for_arrays(&path, &|n| wtxt::format::keeps_array(rows, n))?,
                None => wtxt::store::WtxtIn::open(&path, None)?,
            };
            // On the heap: the arrays end up there anyway, and a temporary
            // file would cost another pass over fresh pages.
            let keep = if metadata_only { Keep::Metadata } else { Keep::InMemory };
            let load = wtxt::format::Load { keep, rows: stored.as_ref(), ..Default::default() };
            // A share of the tree form passes over the chunks it does not
            // keep unread, where the parts are plain files.
            let loaded = if unhashed {
                load.run_lines_into(input.lines(), input.len, &opts, destinations)
            } else if !destinations.is_empty() {
                return Err(wtxt::Error::usage("rows decoded into memory need the rows named"));
            } else {
                load.run(input.text(), input.len, &opts)
            }
            .map_err(|e| if unhashed { input.blame_load(e) } else { input.blame(e) })?;
            let kept = OriginalNames::of(&loaded.arrays)?.unwrap_or_default();
            if let Some(rows) = &rows {
                // The stored names came from the outline, read before
                // anything was verified: every array kept must be, by its
                // verified name, one asked for, with the rows asked.
                // Each kept or placed array with its rows, and whether it was placed.
                let kept_rows = loaded
                    .arrays
                    .iter()
                    .zip(&loaded.rows)
                    .filter(|(a, _)| !a.is_metadata())
                    .map(|(a, r)| (&a.name, r.as_ref(), false));
                let placed = loaded.placed.iter().map(|name| (name, stored.as_ref().and_then(|s| s.get(name)), true));
                for (stored_name, got, was_placed) in kept_rows.chain(placed) {
                    let name = kept.original(stored_name);
                    if got.is_none() || rows.get(name) != got || (was_placed && !into_names.contains(name)) {
                        return Err(wtxt::Error::input(
                            Default::default(),
                            format!("{}: the snapshot changed while it was read (array {stored_name})", path.display()),
                        ));
                    }
                }
                // A name asked for that the snapshot does not hold is the
                // caller's mistake, never an empty answer.
                let held: std::collections::HashSet<&str> =
                    loaded.arrays.iter().map(|a| &a.name).chain(&loaded.placed).map(|n| kept.original(n)).collect();
                if let Some(absent) = rows.keys().chain(&into_names).find(|n| !held.contains(n.as_str())) {
                    return Err(wtxt::Error::usage(format!("{}: no tensor named {absent:?}", path.display())));
                }
            }
            let objects = objects_of(&loaded.arrays)?;
            Ok((loaded.arrays, kept, objects, identity_of(&loaded.header.root)))
        })
        .map_err(raise)?;
    to_python(py, arrays, kept, objects, identity)
}

/// The tensors `names` (original names; all when `None`) of the snapshot
/// at `path` (a file in a Git work tree) as revision `rev` holds it,
/// verified as `load` verifies: in the tree form only the parts that hold
/// them are read, and fetched where a clone lacks them.
#[pyfunction]
#[pyo3(signature = (path, rev, trust=None, names=None))]
fn load_at(
    py: Python<'_>,
    path: PathBuf,
    rev: String,
    trust: Option<Trust>,
    names: Option<Vec<String>>,
) -> PyResult<records::PyLoaded> {
    let (arrays, kept, objects, identity) = py
        .allow_threads(|| {
            let keys = trust.map(Trust::keys).transpose()?.unwrap_or_default();
            let asked = names.clone().unwrap_or_default();
            let loaded = wtxt::ops::load_path_at(&path, &rev, &asked, &keys.verify_options())?;
            let kept = OriginalNames::of(&loaded.arrays)?.unwrap_or_default();
            // Only the tensors asked (a snapshot read whole holds others).
            let arrays: Vec<wtxt::model::Array> = match &names {
                None => loaded.arrays,
                Some(n) => loaded
                    .arrays
                    .into_iter()
                    .filter(|a| a.is_metadata() || n.iter().any(|x| x == &a.name || x == kept.original(&a.name)))
                    .collect(),
            };
            let held: std::collections::HashSet<&str> = arrays.iter().map(|a| kept.original(&a.name)).collect();
            let absent = asked.iter().find(|n| !held.contains(n.as_str()) && !arrays.iter().any(|a| &a.name == *n));
            if let Some(absent) = absent {
                return Err(wtxt::Error::usage(format!("{rev}:{}: no tensor named {absent:?}", path.display())));
            }
            let objects = objects_of(&arrays)?;
            Ok((arrays, kept, objects, identity_of(&loaded.header.root)))
        })
        .map_err(raise)?;
    to_python(py, arrays, kept, objects, identity)
}

/// A snapshot's identity: its `merkle_this` as hex (empty while pending).
fn identity_of(root: &wtxt::format::syntax::Root) -> String {
    match *root {
        wtxt::format::syntax::Root::Final { merkle_this, .. } => hex_of(&merkle_this),
        wtxt::format::syntax::Root::Pending => String::new(),
    }
}

/// Verified arrays handed to Python under their original names.
fn to_python(
    py: Python<'_>,
    arrays: Vec<wtxt::model::Array>,
    kept: OriginalNames,
    objects: Option<BTreeMap<String, String>>,
    identity: String,
) -> PyResult<records::PyLoaded> {
    // Each decoded buffer is handed to NumPy as it is: the heap holds the
    // arrays once, and nothing is copied.
    let tensors = arrays
        .into_iter()
        .filter(|a| !a.is_metadata())
        .map(|a| {
            let name = kept.original(&a.name).to_string();
            let bytes = match a.data {
                ArrayData::Owned(v) => Arc::try_unwrap(v).unwrap_or_else(|shared| shared.to_vec()),
                mapped => mapped.as_bytes().to_vec(),
            };
            let t = records::PyLoadedTensor {
                name,
                dtype: a.dtype.as_str().to_string(),
                shape: a.shape,
                data: PyArray1::from_vec(py, bytes).unbind(),
            };
            Py::new(py, t)
        })
        .collect::<PyResult<_>>()?;
    Ok(records::PyLoaded { tensors, metadata: kept.metadata.clone(), objects, identity })
}

/// `by_name` (by original name) by stored name, from the snapshot's
/// outline (unverified: `load` checks the result against the verified
/// names); none without one.
fn stored_names<T>(outline: Option<&wtxt::ops::NamedOutline>, mut by_name: BTreeMap<String, T>) -> BTreeMap<String, T> {
    let Some(o) = outline else { return BTreeMap::new() };
    o.tensors
        .iter()
        .filter_map(|(stored, ..)| by_name.remove(o.names.original(stored)).map(|t| (stored.clone(), t)))
        .collect()
}

/// What a snapshot holds, from its `arr` lines and metadata arrays alone,
/// nothing verified: (original name, dtype, shape) of every tensor, and
/// `__objects`. `None` when the text does not outline cleanly (`load` then
/// says why). For planning a load whose every byte is verified after.
#[pyfunction]
fn outline(py: Python<'_>, path: PathBuf) -> PyResult<Option<records::PyOutline>> {
    py.allow_threads(|| {
        let Some(wtxt::ops::NamedOutline { metas, names, tensors }) = wtxt::ops::named_outline(&path)? else {
            return Ok(None);
        };
        let objects = objects_of(&metas)?;
        let tensors = tensors
            .into_iter()
            .map(|(stored, dtype, shape)| records::PyTensorInfo {
                name: names.original(&stored).to_string(),
                dtype: dtype.as_str().to_string(),
                shape,
            })
            .collect();
        Ok(Some(records::PyOutline { tensors, objects }))
    })
    .map_err(raise)
}

/// `wtxt verify --json` of `path`: the report as JSON text.
#[pyfunction]
#[pyo3(signature = (path, trust, wsum=None, prev=None, allow_unauthenticated=false))]
fn verify(
    py: Python<'_>,
    path: PathBuf,
    trust: Trust,
    wsum: Option<PathBuf>,
    prev: Option<PathBuf>,
    allow_unauthenticated: bool,
) -> PyResult<String> {
    py.allow_threads(|| {
        let keys = trust.keys()?;
        let opts = wtxt::ops::VerifyFiles {
            wsum,
            hmac_key: keys.hmac_key,
            trusted: keys.trusted,
            require_signature: keys.require_signature,
            prev,
            allow_unauthenticated,
            allow_unbound: keys.allow_unbound,
            unseal: None,
            oms: None,
        };
        let report = wtxt::ops::verify_file(&path, &opts, &wtxt::progress::Progress::hidden())?;
        Ok(report.to_json())
    })
    .map_err(raise)
}

/// Runs the `wtxt` command line `argv` (the program's name first) in this
/// process, the GIL released, and gives its exit code: the Python package's
/// `wtxt` command is the library's own command line, not a second one.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> u8 {
    py.allow_threads(|| wtxt::cli::exit_code(argv))
}

/// Records where this package's `wtxt` command is (its console script):
/// the Git diff and merge drivers a Snapshotter's first commit sets up
/// call it, as the process itself is Python's.
#[pyfunction]
fn set_command(path: PathBuf) {
    wtxt::git::set_command(path)
}

/// The number of threads the library's pools use (`WTXT_THREADS`, else
/// the cores this process may run on): Python's own pools size to it.
#[pyfunction]
fn threads() -> usize {
    wtxt::threads()
}

#[pymodule]
fn _rust(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // A shard that shrinks under `save_folder`'s map: one line and exit 2,
    // not a death by SIGBUS (any other SIGBUS goes to Python's handler).
    wtxt::exit_cleanly_when_a_mapped_input_shrinks();
    // A clone's part files that are Git LFS pointers read as their parts.
    wtxt::git::read_lfs_pointers_in_work_trees();
    m.add("WtxtError", m.py().get_type::<WtxtError>())?;
    m.add_function(wrap_pyfunction!(save, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(set_command, m)?)?;
    m.add_function(wrap_pyfunction!(threads, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(load_at, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(outline, m)?)?;
    m.add_function(wrap_pyfunction!(save_folder, m)?)?;
    m.add_function(wrap_pyfunction!(extract_folder, m)?)?;
    m.add_function(wrap_pyfunction!(export, m)?)?;
    m.add_function(wrap_pyfunction!(dist::snapshot_meta, m)?)?;
    m.add_function(wrap_pyfunction!(dist::commit_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(dist::head_link, m)?)?;
    m.add_function(wrap_pyfunction!(dist::hmac_fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(dist::hash_state_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(schedule::plan_tensor, m)?)?;
    m.add_class::<schedule::PyTensorPlan>()?;
    m.add_class::<schedule::PyChunk>()?;
    m.add_class::<schedule::PyStep>()?;
    m.add_class::<schedule::PySchedule>()?;
    m.add_class::<dist::PyDistWriter>()?;
    m.add_class::<PySnapshotter>()?;
    m.add_class::<records::PyOutcome>()?;
    m.add_class::<records::PyTensorInfo>()?;
    m.add_class::<records::PyOutline>()?;
    m.add_class::<records::PyLoadedTensor>()?;
    m.add_class::<records::PyLoaded>()?;
    Ok(())
}
