//! The distributed write's schedule as Python records: who encodes each
//! chunk, and each rank's hand-off steps, computed by
//! [`wtxt::store::schedule`]; `wtxt.torch.dcp` only runs the steps.

use std::collections::HashMap;

use pyo3::prelude::*;

use wtxt::convert::OriginalNames;
use wtxt::store::{DistWrite, Shard, Step};

use crate::error::raise;

/// One tensor's chunks, who encodes each, and whether that rank holds the
/// chunk whole in its own memory.
#[pyclass(name = "TensorPlan", module = "wtxt._rust", frozen, get_all)]
pub struct PyTensorPlan {
    /// Each chunk as (offset, length) in the tensor's C-order bytes.
    chunks: Vec<(u64, u64)>,
    /// The rank that encodes each chunk.
    owners: Vec<usize>,
    /// Whether the owner reads the chunk from its own memory.
    held: Vec<bool>,
}

/// The plan of a tensor of `dtype` and `shape` held as `shards`
/// ((rank, offsets, sizes) each): the same on every rank.
#[pyfunction]
pub fn plan_tensor(dtype: &str, shape: Vec<u64>, shards: Vec<(usize, Vec<u64>, Vec<u64>)>) -> PyResult<PyTensorPlan> {
    let shards: Vec<Shard> = shards.into_iter().map(|(rank, offsets, sizes)| Shard { rank, offsets, sizes }).collect();
    let p = wtxt::store::plan_tensor(dtype, &shape, &shards).map_err(raise)?;
    Ok(PyTensorPlan { chunks: p.chunks, owners: p.owners, held: p.held })
}

/// A chunk this rank encodes.
#[pyclass(name = "Chunk", module = "wtxt._rust", frozen, get_all)]
#[derive(Clone)]
pub struct PyChunk {
    /// Its array, by place in the file.
    array: usize,
    /// Its place in the array.
    index: u64,
    /// The array's original name.
    name: String,
    /// Where it starts in the array's bytes.
    offset: u64,
    /// Its length in bytes.
    length: u64,
    /// Whether this rank reads it from its own memory (else from the stage).
    held: bool,
}

/// One step of a hand-off pass: `kind` is "recv" or "send" (the state,
/// from or to `peer`), "hash" (chunks `start..end` of `array`, continuing
/// the state in hand when `carry`, else fresh) or "line" (`array`'s state
/// is final).
#[pyclass(name = "Step", module = "wtxt._rust", frozen, get_all)]
#[derive(Clone)]
pub struct PyStep {
    kind: String,
    array: usize,
    start: u64,
    end: u64,
    peer: usize,
    carry: bool,
}

impl From<Step> for PyStep {
    fn from(s: Step) -> PyStep {
        let mut p = PyStep { kind: String::new(), array: 0, start: 0, end: 0, peer: 0, carry: false };
        match s {
            Step::Recv { peer } => (p.kind, p.peer) = ("recv".into(), peer),
            Step::Send { peer } => (p.kind, p.peer) = ("send".into(), peer),
            Step::Line { array } => (p.kind, p.array) = ("line".into(), array),
            Step::Hash { array, start, end, carry } => {
                (p.kind, p.array, p.start, p.end, p.carry) = ("hash".into(), array, start, end, carry)
            }
        }
        p
    }
}

/// What one rank does in a distributed write.
#[pyclass(name = "Schedule", module = "wtxt._rust", frozen, get_all)]
pub struct PySchedule {
    /// The arrays in the file (metadata arrays included).
    arrays: usize,
    /// The chunks this rank encodes, in the file's order.
    own: Vec<PyChunk>,
    /// Arrays this rank encodes whole, as "hash" steps: hashed side by side.
    whole: Vec<PyStep>,
    /// The per-array pass: states of arrays that span ranks, handed on.
    array_steps: Vec<PyStep>,
    /// The `sha256_all` pass, one state along every run in the file's order.
    all_steps: Vec<PyStep>,
    /// The rank holding `sha256_all`'s state at the end.
    last: usize,
    /// The parts (0-based) this rank hashes once every rank has written.
    parts: Vec<usize>,
}

/// The schedule of `rank` of `world` for the arrays `w` plans, given each
/// tensor's plan by name; metadata arrays are rank 0's.
pub fn schedule(
    w: &DistWrite,
    plans: HashMap<String, PyRef<'_, PyTensorPlan>>,
    rank: usize,
    world: usize,
) -> PyResult<PySchedule> {
    let arrays = w.arrays();
    let kept = OriginalNames::of(arrays).map_err(raise)?.unwrap_or_default();
    let mut runs = Vec::with_capacity(arrays.len());
    let mut chunks = Vec::with_capacity(arrays.len());
    let mut held = Vec::with_capacity(arrays.len());
    for (i, a) in arrays.iter().enumerate() {
        let cs = w.chunks(i).map_err(raise)?;
        let name = kept.original(&a.name).to_string();
        let (owners, h) = if a.is_metadata() {
            (vec![0; cs.len()], vec![false; cs.len()])
        } else {
            let p =
                plans.get(&name).ok_or_else(|| raise(wtxt::Error::usage(format!("tensor {name:?}: no plan given"))))?;
            if p.chunks != cs {
                return Err(raise(wtxt::Error::usage(format!(
                    "tensor {name:?}: its plan has other chunks than the text's"
                ))));
            }
            (p.owners.clone(), p.held.clone())
        };
        runs.push(wtxt::store::runs(&owners));
        chunks.push((name, cs));
        held.push(h);
    }
    let s = wtxt::store::schedule(&runs, rank);
    let own = s
        .own
        .iter()
        .map(|&(i, ix)| {
            let (name, cs) = &chunks[i];
            let (offset, length) = cs[ix as usize];
            PyChunk { array: i, index: ix, name: name.clone(), offset, length, held: held[i][ix as usize] }
        })
        .collect();
    let whole = s
        .whole
        .iter()
        .map(|&i| Step::Hash { array: i, start: 0, end: chunks[i].1.len() as u64, carry: false }.into())
        .collect();
    Ok(PySchedule {
        arrays: arrays.len(),
        own,
        whole,
        array_steps: s.arrays.into_iter().map(PyStep::from).collect(),
        all_steps: s.all.into_iter().map(PyStep::from).collect(),
        last: s.last,
        parts: (rank..w.part_count()).step_by(world.max(1)).collect(),
    })
}
