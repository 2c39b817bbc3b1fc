//! `wtxt._rust.DistWriter`: one rank's part of a snapshot written by many
//! (`wtxt.torch.dcp`), over [`wtxt::store::DistWrite`]. The Python
//! side moves hash states between ranks; everything else happens here,
//! with the GIL released.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use wtxt::crypto::{Hash, Sha256State};
use wtxt::format::split::{PartHash, PartLine};
use wtxt::format::syntax::Meta;
use wtxt::options::{HmacFile, OmsFile};
use wtxt::store::{ArrayHash, DistOptions, DistWrite, Raw, StagedCheck};

use crate::arrays::{hex_of, named_arrays, staged_file, Staged};
use crate::error::raise;
use crate::options::Writing;

/// A `part` line as it crosses between ranks: (ix, bytes, lines, sha256).
type Part = (u64, u64, u64, [u8; 32]);

/// A chunk's bytes as Python gives them: (address, length) of memory it
/// keeps alive for the call (a rank's own shard), or None (the stage).
type Mem = Option<(usize, usize)>;

/// The bytes `m` points at.
#[allow(unsafe_code)]
fn mem<'a>(m: Mem) -> Raw<'a> {
    m.map(|(addr, len)| {
        if len == 0 {
            return &[][..];
        }
        // SAFETY: the Python side passes the address and length NumPy
        // reports for a C-contiguous array it keeps alive until the call
        // returns; the memory is only read.
        unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
    })
}

fn hash32(b: &[u8], what: &str) -> Result<[u8; 32], wtxt::Error> {
    b.try_into().map_err(|_| wtxt::Error::usage(format!("{what}: expected 32 bytes, found {}", b.len())))
}

fn sha_state(b: &[u8]) -> Result<Sha256State, wtxt::Error> {
    Sha256State::from_bytes(b).ok_or_else(|| wtxt::Error::usage("a SHA-256 state of the wrong size"))
}

/// The `meta` values and `merkle_prev` of the snapshot a distributed save
/// writes: (gen, ts, merkle_prev), resolved once by the coordinator as
/// `save` resolves them (`prev` verified as `--prev` is).
#[pyfunction]
pub fn snapshot_meta(py: Python<'_>, writing: Writing) -> PyResult<(u64, String, Py<PyBytes>)> {
    let (meta, merkle_prev) = py
        .allow_threads(|| {
            let opts = writing.options()?;
            wtxt::ops::snapshot_meta(&opts)
        })
        .map_err(raise)?;
    Ok((meta.gen, meta.ts.as_str().to_string(), PyBytes::new(py, &merkle_prev).unbind()))
}

#[pyclass(name = "DistWriter", module = "wtxt._rust")]
pub struct PyDistWriter {
    inner: DistWrite,
}

#[pymethods]
impl PyDistWriter {
    /// Plans the snapshot at `path` of the staged tensors (offsets into
    /// `stage_file`) and `objects`, its text and parts written in
    /// `stage_dir`; every rank gives the same arguments.
    /// The keys, part size and digest form are `writing`'s (as `save`
    /// takes them); `gen`, `ts` and `merkle_prev` are the ones
    /// `snapshot_meta` resolved.
    #[new]
    #[pyo3(signature = (tensors, stage_file, stage_dir, path, gen, ts, merkle_prev, writing, metadata=None, objects=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        tensors: Vec<Staged>,
        stage_file: PathBuf,
        stage_dir: PathBuf,
        path: PathBuf,
        gen: u64,
        ts: String,
        merkle_prev: &[u8],
        writing: Writing,
        metadata: Option<BTreeMap<String, String>>,
        objects: Option<BTreeMap<String, String>>,
    ) -> PyResult<PyDistWriter> {
        let merkle_prev = hash32(merkle_prev, "merkle_prev").map_err(raise)?;
        py.allow_threads(|| {
            let arrays = named_arrays(staged_file(&stage_file, tensors)?.into_iter(), metadata, objects)?;
            let o = DistOptions {
                meta: Meta::new(gen, Some(&ts))?.with_tokens(None, None, None, None)?,
                rows_per_chunk: wtxt::format::DEFAULT_ROWS_PER_CHUNK,
                merkle_prev,
                keys: writing.key_files().load()?,
                output: writing.output()?,
            };
            Ok(PyDistWriter { inner: DistWrite::new(arrays, o, &path, &stage_dir)? })
        })
        .map_err(raise)
    }

    /// What `rank` of `world` does, given each tensor's plan by its name
    /// (every rank gives the same plans).
    fn schedule(
        &self,
        plans: std::collections::HashMap<String, PyRef<'_, crate::schedule::PyTensorPlan>>,
        rank: usize,
        world: usize,
    ) -> PyResult<crate::schedule::PySchedule> {
        crate::schedule::schedule(&self.inner, plans, rank, world)
    }

    /// Writes the text around the chunks (the coordinator).
    fn write_fixed(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.inner.write_fixed()).map_err(raise)
    }

    /// Writes `chunks` ((array, chunk, bytes) this rank owns) into their
    /// files; returns each chunk's (array, chunk, SHA-256), which the tree
    /// form's ranks report.
    fn write_chunks(&self, py: Python<'_>, chunks: Vec<(usize, u64, Mem)>) -> PyResult<Vec<(usize, u64, Py<PyBytes>)>> {
        let raw: Vec<(usize, u64, Raw)> = chunks.iter().map(|&(i, ix, m)| (i, ix, mem(m))).collect();
        let digests = py.allow_threads(|| self.inner.write_chunks(&raw)).map_err(raise)?;
        Ok(chunks.iter().zip(digests).map(|(&(i, ix, _), d)| (i, ix, PyBytes::new(py, &d).unbind())).collect())
    }

    /// The tree form: every array's `arr` line and `sha256_all`, from every
    /// chunk's SHA-256 as the ranks reported them.
    fn tree_arr_lines(
        &self,
        py: Python<'_>,
        digests: Vec<(usize, u64, Vec<u8>)>,
    ) -> PyResult<(Vec<String>, Py<PyBytes>)> {
        let digests: Vec<(usize, u64, Hash)> = digests
            .into_iter()
            .map(|(i, ix, d)| hash32(&d, "a chunk's digest").map(|h| (i, ix, h)))
            .collect::<Result<_, _>>()
            .map_err(raise)?;
        let (lines, all) = py.allow_threads(|| self.inner.tree_arr_lines(&digests)).map_err(raise)?;
        Ok((lines, PyBytes::new(py, &all).unbind()))
    }

    /// Array `i`'s hash state after `chunks` ((chunk, bytes), consecutive),
    /// continuing `state`.
    #[pyo3(signature = (i, chunks, state=None))]
    fn hash_array(
        &self,
        py: Python<'_>,
        i: usize,
        chunks: Vec<(u64, Mem)>,
        state: Option<&[u8]>,
    ) -> PyResult<Py<PyBytes>> {
        let state = state.map(ArrayHash::from_bytes).transpose().map_err(raise)?;
        let chunks: Vec<(u64, Raw)> = chunks.into_iter().map(|(ix, m)| (ix, mem(m))).collect();
        let h = py.allow_threads(|| self.inner.hash_array(i, &chunks, state)).map_err(raise)?;
        Ok(PyBytes::new(py, &h.to_bytes()).unbind())
    }

    /// Array `i`'s `arr` line from its final hash state.
    fn arr_line(&self, i: usize, state: &[u8]) -> PyResult<String> {
        let h = ArrayHash::from_bytes(state).map_err(raise)?;
        self.inner.arr_line(i, h).map_err(raise)
    }

    /// `sha256_all`'s state after array `i`'s `chunks` (and its `arr` line
    /// `arr` first when they start at chunk 0), continuing `state`.
    fn hash_all(
        &self,
        py: Python<'_>,
        state: Option<&[u8]>,
        i: usize,
        chunks: Vec<(u64, Mem)>,
        arr: &str,
    ) -> PyResult<Py<PyBytes>> {
        let state = state.map(sha_state).transpose().map_err(raise)?;
        let chunks: Vec<(u64, Raw)> = chunks.into_iter().map(|(ix, m)| (ix, mem(m))).collect();
        let h = py.allow_threads(|| self.inner.hash_all(state, i, &chunks, arr)).map_err(raise)?;
        Ok(PyBytes::new(py, &h.to_bytes()).unbind())
    }

    /// This rank's share of `fastxor`, over `chunks`.
    fn fastxor(&self, py: Python<'_>, chunks: Vec<(usize, u64, Mem)>) -> PyResult<u64> {
        let chunks: Vec<(usize, u64, Raw)> = chunks.into_iter().map(|(i, ix, m)| (i, ix, mem(m))).collect();
        py.allow_threads(|| self.inner.fastxor(&chunks)).map_err(raise)
    }

    /// Reads back and checks the chunks `chunks` ((array, chunk)) this rank
    /// wrote, as `wtxt verify` does: each one's SHA-256, in order, and the
    /// share of `fastxor` of the bytes read back (see
    /// `DistWrite::check_chunks`).
    fn check_chunks(&self, py: Python<'_>, chunks: Vec<(usize, u64)>) -> PyResult<(Vec<Py<PyBytes>>, u64)> {
        let (got, x) = py.allow_threads(|| self.inner.check_chunks(&chunks)).map_err(raise)?;
        Ok((got.iter().map(|h| PyBytes::new(py, h).unbind()).collect(), x))
    }

    /// Hashes part `k` (0-based) once every rank has written; its `part` line.
    fn hash_part(&self, py: Python<'_>, k: usize) -> PyResult<Part> {
        let p = py.allow_threads(|| self.inner.hash_part(k)).map_err(raise)?;
        match p.hash {
            PartHash::Frame(h) => Ok((p.ix, p.bytes, p.lines, h)),
            PartHash::File(_) => Err(raise(wtxt::Error::usage("a part hashed whole: writers hash frames"))),
        }
    }

    /// Puts the snapshot in place from every array's `arr` line, the final
    /// `sha256_all` state (`None` when there are no arrays), `fastxor` and
    /// the parts' lines; with `verify`, only once the staged snapshot
    /// verifies under the writer's keys: whole, or, `chunks_checked` (every
    /// rank's `check_chunks` agreed with the digests the root was built
    /// from), all but its chunks' base64. Returns `sha256_all` as hex.
    #[pyo3(signature = (arr_lines, all_state, fastxor, parts, verify=true, sha256_all=None, chunks_checked=false))]
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        py: Python<'_>,
        arr_lines: Vec<String>,
        all_state: Option<&[u8]>,
        fastxor: u64,
        parts: Vec<Part>,
        verify: bool,
        sha256_all: Option<&[u8]>,
        chunks_checked: bool,
    ) -> PyResult<String> {
        // The tree form gives `sha256_all` itself; else its final state (none:
        // the snapshot has no arrays, and `sha256_all` hashed nothing).
        let all = match sha256_all {
            Some(h) => hash32(h, "sha256_all").map_err(raise)?,
            None => all_state.map(sha_state).transpose().map_err(raise)?.unwrap_or_default().finalize(),
        };
        py.allow_threads(|| {
            let parts: Vec<PartLine> = parts
                .into_iter()
                .map(|(ix, bytes, lines, h)| PartLine { ix, bytes, lines, hash: PartHash::Frame(h) })
                .collect();
            let check = match (verify, chunks_checked) {
                (false, _) => StagedCheck::Nothing,
                (true, false) => StagedCheck::Whole,
                (true, true) => StagedCheck::ChunksChecked,
            };
            let w = self.inner.finish(&arr_lines, all, fastxor, &parts, check)?;
            Ok(hex_of(&w.sha256_all))
        })
        .map_err(raise)
    }

    /// Writes the OpenSSF Model Signing `model.sig` of the snapshot just
    /// put in place, signed with the EC key at `oms_key` (once the folder
    /// holds only what stays there: the stage is gone).
    fn sign_oms(&self, py: Python<'_>, oms_key: PathBuf) -> PyResult<()> {
        py.allow_threads(|| {
            let key = OmsFile { oms_key: Some(oms_key) }.key()?;
            wtxt::ops::oms_sign_written(self.inner.out(), key.as_ref()).map(drop)
        })
        .map_err(raise)
    }
}

/// Bytes of the hash states the ranks hand each other: an array's
/// (`ArrayHash`: its SHA-256 and HMAC) and `sha256_all`'s (a `Sha256State`).
#[pyfunction]
pub fn hash_state_bytes() -> (usize, usize) {
    (ArrayHash::BYTES, Sha256State::BYTES)
}

/// The HMAC key file's fingerprint (`HmacKey::fingerprint`), or None
/// without a key: the ranks of a save compare theirs before any hashes.
#[pyfunction]
#[pyo3(signature = (path=None))]
pub fn hmac_fingerprint(path: Option<PathBuf>) -> PyResult<Option<String>> {
    Ok(HmacFile { hmac_key: path, ..HmacFile::default() }.key().map_err(raise)?.map(|k| k.fingerprint()))
}

/// The generation a commit at `path` continues: HEAD's version of that
/// path in the work tree around it, verified whole under the repository's
/// policy (nothing chains from what it did not verify): its (gen,
/// merkle_this); None when HEAD has no snapshot there.
#[pyfunction]
pub fn head_link(py: Python<'_>, path: PathBuf) -> PyResult<Option<(u64, Py<PyBytes>)>> {
    let link = py
        .allow_threads(|| {
            if let Some(dir) = std::path::absolute(&path).ok().and_then(|a| a.parent().map(Path::to_path_buf)) {
                std::fs::create_dir_all(&dir).map_err(|e| wtxt::Error::io(&dir, e))?;
            }
            wtxt::git::committed_link(&path)
        })
        .map_err(raise)?;
    Ok(link.map(|(gen, merkle)| (gen, PyBytes::new(py, &merkle).unbind())))
}

/// Commits the snapshot at `path` (in a Git work tree: its parts, and its
/// `model.sig` with `oms`) as the next commit on HEAD with `message`, then
/// pushes HEAD's branch to `remote` when given: (commit id, pushed, the
/// push's error). A failed push leaves the commit; the next push carries it.
#[pyfunction]
#[pyo3(signature = (path, message, oms=false, remote=None))]
pub fn commit_snapshot(
    py: Python<'_>,
    path: PathBuf,
    message: String,
    oms: bool,
    remote: Option<String>,
) -> PyResult<(String, bool, Option<String>)> {
    py.allow_threads(|| {
        let (work, id) = wtxt::git::commit_written(&path, oms, "wtxt", &message)?;
        let Some(remote) = remote else { return Ok((id, false, None)) };
        let never = std::sync::atomic::AtomicBool::new(false);
        Ok(match wtxt::git::push(&work, &remote, Default::default(), &never).and_then(|o| o.done()) {
            Ok(()) => (id, true, None),
            Err(e) => (id, false, Some(wtxt::git::redact(&format!("push to {remote}: {e}")))),
        })
    })
    .map_err(raise)
}
