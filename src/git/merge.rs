//! Three-way merge of WTXT snapshots at chunk granularity (`wtxt merge`, and
//! Git's merge driver).
//!
//! Per array: unchanged on one side takes the other side; changed the same
//! way on both is fine. Per chunk of an array both sides changed (same dtype
//! and shape everywhere): a chunk changed on one side only comes from that
//! side; changed differently on both is a conflict, settled by a decision
//! (per array or per chunk) or the strategy: `ours`, `theirs`, `average`
//! (element-wise mean, float dtypes) or `fail`. Structural conflicts (an
//! array added, removed, reshaped or re-typed differently on the two sides)
//! can only be settled by `ours` or `theirs`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::buffer::Spill;
use crate::error::{reason, Error, Reason, Result};
use crate::format::layout::Layout;
use crate::model::{Array, Dtype};

/// True when `ours` is a split snapshot's head handed over without its
/// parts, as Git's merge driver gets it: Git merges a head and each part
/// as files of their own, which cannot merge the model
/// (`wtxt git resolve` merges it whole).
pub fn is_lone_head(ours: &std::path::Path) -> bool {
    use crate::git::parts::{classify, open_text, Blob};
    if crate::store::parts_dir(ours).exists() {
        return false;
    }
    matches!(open_text(ours), Ok(Some(f)) if matches!(classify(&f), Ok(Blob::Head(_))))
}

/// How to settle a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Refuse any chunk both sides changed.
    Fail,
    /// Take ours.
    Ours,
    /// Take theirs.
    Theirs,
    /// The element-wise mean of ours and theirs (floats only).
    Average,
}

impl std::str::FromStr for Strategy {
    type Err = Reason;
    fn from_str(s: &str) -> std::result::Result<Self, Reason> {
        match s {
            "fail" => Ok(Strategy::Fail),
            "ours" => Ok(Strategy::Ours),
            "theirs" => Ok(Strategy::Theirs),
            "average" => Ok(Strategy::Average),
            _ => Err(reason!("unknown strategy `{s}` (expected fail, ours, theirs or average)")),
        }
    }
}

/// Scripted decisions: `{"arrays": {"W": "ours"}, "chunks": {"W": {"3": "average"}}}`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decisions {
    /// A strategy for every conflict of an array.
    #[serde(default)]
    pub arrays: BTreeMap<String, Strategy>,
    /// A strategy for one chunk of an array.
    #[serde(default)]
    pub chunks: BTreeMap<String, BTreeMap<u64, Strategy>>,
}

impl Decisions {
    /// Parses a decisions file.
    pub fn parse(text: &str) -> std::result::Result<Decisions, Reason> {
        serde_json::from_str(text).map_err(|e| reason!("decisions: {e}"))
    }

    /// The same decisions with every key that is an array's original name
    /// (as conflicts show it: `model.layers.0.mlp.up_proj.weight`) given as
    /// its WTXT name; `names` maps WTXT names to original ones (`__names`).
    pub fn by_wtxt_name(&self, names: &BTreeMap<String, String>) -> Decisions {
        let wtxt: BTreeMap<&str, &str> = names.iter().map(|(w, o)| (o.as_str(), w.as_str())).collect();
        let key = |k: &String| wtxt.get(k.as_str()).map_or_else(|| k.clone(), |w| w.to_string());
        Decisions {
            arrays: self.arrays.iter().map(|(k, v)| (key(k), *v)).collect(),
            chunks: self.chunks.iter().map(|(k, v)| (key(k), v.clone())).collect(),
        }
    }

    fn for_chunk(&self, array: &str, ix: u64, default: Strategy) -> Strategy {
        self.chunks.get(array).and_then(|c| c.get(&ix)).or_else(|| self.arrays.get(array)).copied().unwrap_or(default)
    }

    fn for_array(&self, array: &str, default: Strategy) -> Strategy {
        self.arrays.get(array).copied().unwrap_or(default)
    }
}

/// A conflict left unsettled (or settled, for the report).
#[derive(Clone, Debug, Serialize)]
pub struct Conflict {
    /// The array in conflict.
    pub array: String,
    /// Its name in the model, when the snapshot maps it (`__names`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// The chunk, for a data conflict; none for a structural one.
    pub chunk: Option<u64>,
    /// Half-open row range of the chunk (elements for rank 0 and 1).
    pub rows: Option<(u64, u64)>,
    /// What both sides did.
    pub what: String,
    /// How it was settled; `None` when it was not.
    pub settled_by: Option<Strategy>,
}

/// The merge result.
pub struct Merged {
    /// The merged arrays.
    pub arrays: Vec<Array>,
    /// Every conflict, settled or not.
    pub conflicts: Vec<Conflict>,
}

impl Merged {
    /// Conflicts nothing settled.
    pub fn unsettled(&self) -> impl Iterator<Item = &Conflict> {
        self.conflicts.iter().filter(|c| c.settled_by.is_none())
    }
}

fn same_array(a: &Array, b: &Array) -> bool {
    a.dtype == b.dtype && a.shape == b.shape && (a.data.is_same_buffer(&b.data) || a.bytes() == b.bytes())
}

fn same_opt(a: Option<&Array>, b: Option<&Array>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => same_array(x, y),
        _ => false,
    }
}

/// Merges three versions (`base` may be empty: no common ancestor).
pub fn merge(
    base: &[Array],
    ours: &[Array],
    theirs: &[Array],
    rows_per_chunk: u64,
    strategy: Strategy,
    decisions: &Decisions,
) -> Result<Merged> {
    let find = |set: &[Array], n: &str| set.iter().position(|a| a.name == n);
    let names: BTreeSet<&str> = base.iter().chain(ours).chain(theirs).map(|a| a.name.as_str()).collect();
    let mut arrays = Vec::new();
    let mut conflicts = Vec::new();
    for name in names {
        let b = find(base, name).map(|i| &base[i]);
        let o = find(ours, name).map(|i| &ours[i]);
        let t = find(theirs, name).map(|i| &theirs[i]);
        let pick = |x: Option<&Array>, arrays: &mut Vec<Array>| {
            if let Some(a) = x {
                arrays.push(a.clone());
            }
        };
        if same_opt(o, t) || same_opt(t, b) {
            pick(o, &mut arrays);
            continue;
        }
        if same_opt(o, b) {
            pick(t, &mut arrays);
            continue;
        }
        // Changed differently on both sides.
        match (b, o, t) {
            (Some(b), Some(o), Some(t))
                if o.dtype == b.dtype && t.dtype == b.dtype && o.shape == b.shape && t.shape == b.shape =>
            {
                arrays.push(merge_chunks(b, o, t, rows_per_chunk, strategy, decisions, &mut conflicts)?);
            }
            _ => {
                let what = describe(b, o, t);
                let s = decisions.for_array(name, strategy);
                let settled = match s {
                    Strategy::Ours => {
                        pick(o, &mut arrays);
                        Some(s)
                    }
                    Strategy::Theirs => {
                        pick(t, &mut arrays);
                        Some(s)
                    }
                    Strategy::Average => match (o, t) {
                        (Some(x), Some(y)) if x.dtype == y.dtype && x.shape == y.shape && x.dtype.is_computed() => {
                            arrays.push(averaged(x, y)?);
                            Some(s)
                        }
                        _ => None,
                    },
                    Strategy::Fail => None,
                };
                conflicts.push(Conflict {
                    array: name.to_string(),
                    original: None,
                    chunk: None,
                    rows: None,
                    what,
                    settled_by: settled,
                });
            }
        }
    }
    Ok(Merged { arrays, conflicts })
}

fn describe(b: Option<&Array>, o: Option<&Array>, t: Option<&Array>) -> String {
    let d = |x: Option<&Array>| match x {
        None => "absent".to_string(),
        Some(a) => format!("{}[{}]", a.dtype, a.shape.iter().map(u64::to_string).collect::<Vec<_>>().join(",")),
    };
    format!("changed on both sides: base {}, ours {}, theirs {}", d(b), d(o), d(t))
}

#[allow(clippy::too_many_arguments)]
fn merge_chunks(
    b: &Array,
    o: &Array,
    t: &Array,
    rows_per_chunk: u64,
    strategy: Strategy,
    decisions: &Decisions,
    conflicts: &mut Vec<Conflict>,
) -> Result<Array> {
    let layout = Layout::new(o.dtype, &o.shape, rows_per_chunk).map_err(|m| Error::input(Default::default(), m))?;
    let row_bytes = layout.idx.map_or(o.dtype.block().bytes, |i| i.row_size.max(1));
    // Built chunk by chunk, on disk past the spill size: an array can be
    // far larger than the memory a merge driver may take.
    let mut out = Spill::with_expected(o.bytes().len() as u64)?;
    for ix in 0..layout.chunk_count() {
        let (off, len) = layout.chunk_range(ix);
        let r = off as usize..(off + len) as usize;
        let (cb, co, ct) = (&b.bytes()[r.clone()], &o.bytes()[r.clone()], &t.bytes()[r.clone()]);
        if co == ct || ct == cb {
            out.push(co)?; // ours already holds it
        } else if co == cb {
            out.push(ct)?;
        } else {
            let s = decisions.for_chunk(&o.name, ix, strategy);
            let settled = match s {
                Strategy::Ours | Strategy::Theirs => Some(s),
                Strategy::Average if o.dtype.is_computed() => Some(s),
                Strategy::Average | Strategy::Fail => None,
            };
            match settled {
                Some(Strategy::Theirs) => out.push(ct)?,
                Some(Strategy::Average) => out.push(&average(o.dtype, co, ct))?,
                _ => out.push(co)?,
            }
            conflicts.push(Conflict {
                array: o.name.clone(),
                original: None,
                chunk: Some(ix),
                rows: Some((off / row_bytes, (off + len).div_ceil(row_bytes))),
                what: if s == Strategy::Average && settled.is_none() {
                    format!("both sides changed this chunk; average needs a float dtype, not {}", o.dtype)
                } else {
                    "both sides changed this chunk differently".into()
                },
                settled_by: settled,
            });
        }
        // Merged: each side's chunk leaves the process (three mapped sides
        // of a large array are not held whole).
        for side in [b, o, t] {
            side.data.release(r.clone());
        }
    }
    finish(o, out)
}

/// An array like `like` holding what `out` was given (all of its bytes).
fn finish(like: &Array, out: Spill) -> Result<Array> {
    let len = like.bytes().len();
    if out.len() != len as u64 {
        return Err(Error::input(
            Default::default(),
            format!("array {}: merged {} of its {len} bytes", like.name, out.len()),
        ));
    }
    Array::new(like.name.clone(), like.dtype, like.shape.clone(), out.finish()?.slice(0..len))
}

/// The element-wise mean of two whole float arrays of one dtype and shape,
/// a window at a time (never a whole array on the heap).
fn averaged(x: &Array, y: &Array) -> Result<Array> {
    let size = x.dtype.block().bytes as usize;
    let step = (1 << 20) / size * size;
    let mut out = Spill::with_expected(x.bytes().len() as u64)?;
    for (i, (a, b)) in x.bytes().chunks(step).zip(y.bytes().chunks(step)).enumerate() {
        out.push(&average(x.dtype, a, b))?;
        x.data.release(i * step..(i + 1) * step);
        y.data.release(i * step..(i + 1) * step);
    }
    finish(x, out)
}

/// Element-wise mean of two float runs, in their dtype.
fn average(dtype: Dtype, a: &[u8], b: &[u8]) -> Vec<u8> {
    let size = dtype.block().bytes as usize;
    let mut out = Vec::with_capacity(a.len());
    for (x, y) in a.chunks_exact(size).zip(b.chunks_exact(size)) {
        let m = (dtype.to_f64(x).unwrap_or(0.0) + dtype.to_f64(y).unwrap_or(0.0)) / 2.0;
        if !dtype.push_f64(m, &mut out) {
            out.extend_from_slice(x);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ArrayData;

    fn arr(name: &str, vals: &[f32]) -> Array {
        let b: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        Array::new(name, Dtype::F32, vec![vals.len() as u64, 1], b.into()).unwrap()
    }

    #[test]
    fn chunks_merge_three_ways() {
        let base = arr("w", &[0.0, 0.0, 0.0, 0.0]);
        let ours = arr("w", &[1.0, 0.0, 0.0, 4.0]);
        let theirs = arr("w", &[0.0, 2.0, 0.0, 2.0]);
        // One row per chunk: rows 0 and 1 merge cleanly, row 3 conflicts.
        let m = merge(
            std::slice::from_ref(&base),
            std::slice::from_ref(&ours),
            std::slice::from_ref(&theirs),
            1,
            Strategy::Fail,
            &Decisions::default(),
        )
        .unwrap();
        let c: Vec<_> = m.unsettled().collect();
        assert_eq!((c.len(), c[0].chunk, c[0].rows), (1, Some(3), Some((3, 4))));
        let m = merge(&[base], &[ours], &[theirs], 1, Strategy::Average, &Decisions::default()).unwrap();
        assert_eq!(m.unsettled().count(), 0);
        assert_eq!(m.arrays[0].bytes(), arr("w", &[1.0, 2.0, 0.0, 3.0]).bytes());
    }

    #[test]
    fn float8_is_never_averaged() {
        let f8 = |b: &[u8]| Array::new("w", Dtype::F8E4m3, vec![b.len() as u64, 1], b.to_vec().into()).unwrap();
        let (base, ours, theirs) = (f8(&[0x38, 0x38]), f8(&[0x40, 0x38]), f8(&[0x30, 0x38]));
        let m = merge(&[base], &[ours], &[theirs], 1, Strategy::Average, &Decisions::default()).unwrap();
        let c: Vec<_> = m.unsettled().collect();
        assert_eq!((c.len(), c[0].chunk), (1, Some(0)), "the changed row stays a conflict");
    }

    #[test]
    fn a_merged_array_past_the_spill_size_is_built_on_disk() {
        // 40 MiB: chunk-merged and whole-array averaged results are mapped
        // temporary files, not a heap copy of the array.
        let n = 10 << 20;
        let base = arr("w", &vec![0.0; n]);
        let mut o = vec![0.0; n];
        o[0] = 1.0;
        let mut t = vec![0.0; n];
        t[n - 1] = 3.0;
        let (ours, theirs) = (arr("w", &o), arr("w", &t));
        let m = merge(
            std::slice::from_ref(&base),
            std::slice::from_ref(&ours),
            std::slice::from_ref(&theirs),
            1 << 16,
            Strategy::Fail,
            &Decisions::default(),
        )
        .unwrap();
        assert_eq!(m.unsettled().count(), 0);
        assert!(matches!(m.arrays[0].data, ArrayData::Mapped(..)));
        o[n - 1] = 3.0;
        assert_eq!(m.arrays[0].bytes(), arr("w", &o).bytes());
        // Changed whole on both sides (another shape): averaged.
        let wide = |v: f32| {
            let b: Vec<u8> = std::iter::repeat_n(v.to_le_bytes(), n).flatten().collect();
            Array::new("w", Dtype::F32, vec![1, n as u64], b.into()).unwrap()
        };
        let m = merge(&[base], &[wide(1.0)], &[wide(3.0)], 1 << 16, Strategy::Average, &Decisions::default()).unwrap();
        assert!(matches!(m.arrays[0].data, ArrayData::Mapped(..)));
        assert_eq!(m.arrays[0].bytes(), wide(2.0).bytes());
    }
}
