//! Who does what when many processes write one snapshot: which process
//! encodes each chunk, whether it can read that chunk from its own memory,
//! and the order in which the hash states that span processes are handed
//! on. Every process computes the same schedule from the same plan; the
//! caller (`wtxt.torch.dcp`) only runs its steps, moving bytes and states
//! over its own transport.

use crate::error::{Error, Result};
use crate::format::{Layout, DEFAULT_ROWS_PER_CHUNK};
use crate::model::Dtype;

/// Part of a tensor one process holds: its offsets in the full tensor and
/// its sizes, one per dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The process (rank) that holds it.
    pub rank: usize,
    /// Where it starts, per dimension.
    pub offsets: Vec<u64>,
    /// How far it reaches, per dimension.
    pub sizes: Vec<u64>,
}

/// One tensor's chunks and who encodes each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    /// Each chunk as (offset, length) in the tensor's C-order bytes.
    pub chunks: Vec<(u64, u64)>,
    /// The rank that encodes and hashes each chunk.
    pub owners: Vec<usize>,
    /// Whether the owner holds all of the chunk in one shard of whole rows
    /// (it reads the chunk from its own memory); otherwise the chunk is
    /// assembled in the stage file.
    pub held: Vec<bool>,
}

/// A maximal run of chunks of one array with one owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Its owner.
    pub owner: usize,
    /// Its first chunk.
    pub start: u64,
    /// One past its last chunk.
    pub end: u64,
}

/// One step of a process's part in a hand-off pass, run in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Receive the state from `peer`.
    Recv {
        /// The rank it comes from.
        peer: usize,
    },
    /// Hash chunks `start..end` of `array`; `carry` says whether the state
    /// in hand continues (otherwise the array's hash starts fresh).
    Hash {
        /// The array, by its place in the file.
        array: usize,
        /// Its first chunk.
        start: u64,
        /// One past its last chunk.
        end: u64,
        /// Continue the state in hand.
        carry: bool,
    },
    /// Send the state in hand to `peer`.
    Send {
        /// The rank it goes to.
        peer: usize,
    },
    /// The state in hand is `array`'s final one: write its `arr` line.
    Line {
        /// The array, by its place in the file.
        array: usize,
    },
}

/// What one process does in a distributed write, from every array's runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The chunks it encodes, as (array, chunk), in the file's order.
    pub own: Vec<(usize, u64)>,
    /// Arrays whose every chunk it encodes: hashed side by side, nothing
    /// handed on.
    pub whole: Vec<usize>,
    /// The per-array pass: the SHA-256 (and HMAC) states of arrays that
    /// span processes, handed along their runs.
    pub arrays: Vec<Step>,
    /// The `sha256_all` pass: one state along every run in the file's order.
    pub all: Vec<Step>,
    /// The rank holding `sha256_all`'s state at the end.
    pub last: usize,
}

fn product(dims: &[u64]) -> Result<u64> {
    dims.iter()
        .try_fold(1u64, |p, &d| p.checked_mul(d))
        .ok_or_else(|| Error::usage(format!("shape {dims:?} overflows")))
}

/// The chunks of a tensor of `dtype` and `shape`, who encodes each and
/// whether its owner holds it whole. The owner of a chunk is the rank
/// holding most of its bytes (ties go to the holders in turn, by position,
/// so an array sharded along another dimension still falls in a few long
/// runs); a chunk nobody holds bytes of goes to the first holder, or rank 0.
pub fn plan_tensor(dtype: &str, shape: &[u64], shards: &[Shard]) -> Result<TensorPlan> {
    let dt = Dtype::parse(dtype.as_bytes()).ok_or_else(|| Error::usage(format!("unknown dtype {dtype}")))?;
    let layout = Layout::new(dt, shape, DEFAULT_ROWS_PER_CHUNK).map_err(|m| Error::usage(m.to_string()))?;
    let chunks: Vec<(u64, u64)> = (0..layout.chunk_count()).map(|ix| layout.chunk_range(ix)).collect();
    for s in shards {
        if s.offsets.len() != shape.len() || s.sizes.len() != shape.len() {
            return Err(Error::usage(format!(
                "a shard of rank {} has {} offsets and {} sizes for a tensor of {} dimensions",
                s.rank,
                s.offsets.len(),
                s.sizes.len(),
                shape.len()
            )));
        }
    }
    let first = shards.iter().map(|s| s.rank).min().unwrap_or(0);
    let inner_full = product(shape.get(1..).unwrap_or(&[]))?;
    // Flat units: a row of a rank >= 2 array, a block of elements otherwise
    // (one element but for the sub-byte dtypes).
    let block = dt.block();
    let unit = if shape.len() >= 2 { dt.bytes_of(inner_full).unwrap_or(u64::MAX) } else { block.bytes };
    let per_unit = if shape.len() >= 2 { 1 } else { block.elems };
    // Each shard as (rank, first unit, end unit, bytes per unit / unit).
    let spans: Vec<(usize, u64, u64, u64)> = shards
        .iter()
        .map(|s| {
            if shape.is_empty() {
                return Ok((s.rank, 0, 1, 1));
            }
            let inner = if shape.len() >= 2 { product(&s.sizes[1..])? } else { 1 };
            let (a, b) = (s.offsets[0] / per_unit, s.offsets[0].saturating_add(s.sizes[0]).div_ceil(per_unit));
            Ok((s.rank, a, b, inner))
        })
        .collect::<Result<_>>()?;
    let mut owners = Vec::with_capacity(chunks.len());
    for (ci, &(coff, clen)) in chunks.iter().enumerate() {
        let lo = coff.checked_div(unit).unwrap_or(0);
        let hi = (coff + clen).checked_div(unit).unwrap_or(0);
        let mut held: Vec<(usize, u128)> = Vec::new();
        for &(r, a, b, inner) in &spans {
            let n = hi.min(b).saturating_sub(lo.max(a)) as u128 * inner as u128;
            if n > 0 {
                match held.iter_mut().find(|(h, _)| *h == r) {
                    Some((_, t)) => *t += n,
                    None => held.push((r, n)),
                }
            }
        }
        let Some(best) = held.iter().map(|&(_, n)| n).max() else {
            owners.push(first);
            continue;
        };
        let mut tied: Vec<usize> = held.iter().filter(|&&(_, n)| n == best).map(|&(r, _)| r).collect();
        tied.sort_unstable();
        owners.push(tied[ci * tied.len() / chunks.len()]);
    }
    let held = chunks
        .iter()
        .zip(&owners)
        .map(|(&(coff, clen), &owner)| {
            shards.iter().filter(|s| s.rank == owner).any(|s| {
                let Some(start) = row_start(shape, dt, s) else { return false };
                let n = product(&s.sizes).ok().and_then(|e| dt.bytes_of(e)).map_or(u128::MAX, u128::from);
                start as u128 <= coff as u128 && coff as u128 + clen as u128 <= start as u128 + n
            })
        })
        .collect();
    Ok(TensorPlan { chunks, owners, held })
}

/// The first byte, in its tensor's C-order bytes, of a shard of whole rows
/// (all of every dimension but the first), which is then one run of those
/// bytes; None for any other shard.
pub fn row_start(shape: &[u64], dtype: Dtype, shard: &Shard) -> Option<u64> {
    if shape.is_empty() {
        return Some(0);
    }
    if shard.sizes.get(1..)? != &shape[1..] || shard.offsets.get(1..)?.iter().any(|&o| o != 0) {
        return None;
    }
    dtype.bytes_of(shard.offsets[0].checked_mul(product(&shape[1..]).ok()?)?)
}

/// Maximal runs of one owner.
pub fn runs(owners: &[usize]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (ix, &owner) in owners.iter().enumerate() {
        match out.last_mut() {
            Some(r) if r.owner == owner => r.end = ix as u64 + 1,
            _ => out.push(Run { owner, start: ix as u64, end: ix as u64 + 1 }),
        }
    }
    out
}

/// What `rank` does, given every array's runs in the file's order.
pub fn schedule(runs: &[Vec<Run>], rank: usize) -> Schedule {
    let own = runs
        .iter()
        .enumerate()
        .flat_map(|(i, rs)| {
            rs.iter().filter(|r| r.owner == rank).flat_map(move |r| (r.start..r.end).map(move |ix| (i, ix)))
        })
        .collect();
    let is_whole = |rs: &[Run]| rs.len() == 1 && rs[0].owner == rank;
    let whole: Vec<usize> = (0..runs.len()).filter(|&i| is_whole(&runs[i])).collect();
    let mut arrays = Vec::new();
    for (i, rs) in runs.iter().enumerate() {
        if is_whole(rs) {
            continue;
        }
        for (k, r) in rs.iter().enumerate().filter(|(_, r)| r.owner == rank) {
            if k > 0 {
                arrays.push(Step::Recv { peer: rs[k - 1].owner });
            }
            arrays.push(Step::Hash { array: i, start: r.start, end: r.end, carry: k > 0 });
            arrays.push(match rs.get(k + 1) {
                Some(next) => Step::Send { peer: next.owner },
                None => Step::Line { array: i },
            });
        }
    }
    let (mut all, mut before) = (Vec::new(), None);
    for (i, rs) in runs.iter().enumerate() {
        for r in rs {
            if r.owner == rank {
                if let Some(b) = before.filter(|&b| b != rank) {
                    all.push(Step::Recv { peer: b });
                }
                all.push(Step::Hash { array: i, start: r.start, end: r.end, carry: true });
            } else if before == Some(rank) {
                all.push(Step::Send { peer: r.owner });
            }
            before = Some(r.owner);
        }
    }
    Schedule { own, whole, arrays, all, last: before.unwrap_or(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(rank: usize, offsets: &[u64], sizes: &[u64]) -> Shard {
        Shard { rank, offsets: offsets.to_vec(), sizes: sizes.to_vec() }
    }

    #[test]
    fn rows_split_between_two_ranks_are_each_held_whole() {
        // 4096 rows of 256 f32: 16 chunks of 256 rows at the default layout.
        let p =
            plan_tensor("f32", &[4096, 256], &[shard(0, &[0, 0], &[2048, 256]), shard(1, &[2048, 0], &[2048, 256])])
                .unwrap();
        assert!(p.chunks.len() > 1);
        let half = p.chunks.len() / 2;
        assert!(p.owners[..half].iter().all(|&o| o == 0) && p.owners[half..].iter().all(|&o| o == 1));
        assert!(p.held.iter().all(|&h| h));
    }

    #[test]
    fn columns_split_tie_and_alternate_in_runs_and_are_assembled() {
        let p = plan_tensor("f32", &[4096, 256], &[shard(0, &[0, 0], &[4096, 128]), shard(1, &[0, 128], &[4096, 128])])
            .unwrap();
        let rs = runs(&p.owners);
        assert_eq!(rs.len(), 2, "{rs:?}");
        assert!(p.held.iter().all(|&h| !h), "no rank holds whole rows");
    }

    #[test]
    fn unheld_and_scalar_tensors_go_to_the_first_holder() {
        let p = plan_tensor("f32", &[0, 4], &[shard(2, &[0, 0], &[0, 4])]).unwrap();
        assert!(p.owners.iter().all(|&o| o == 2));
        let s = plan_tensor("f64", &[], &[shard(1, &[], &[])]).unwrap();
        assert_eq!((s.owners, s.held), (vec![1], vec![true]));
    }

    #[test]
    fn hostile_shards_are_refused_not_panicked_on() {
        assert!(plan_tensor("f32", &[4, 4], &[shard(0, &[0], &[4, 4])]).is_err());
        assert!(plan_tensor("f32", &[4, 4], &[shard(0, &[u64::MAX, 0], &[u64::MAX, u64::MAX])]).is_ok());
        assert!(plan_tensor("nope", &[4], &[]).is_err());
    }

    #[test]
    fn hand_offs_pair_every_send_with_a_receive_in_order() {
        // Array 0 runs 0 -> 1 -> 0, array 1 lies whole on 1, array 2 on 0.
        let rs = vec![runs(&[0, 0, 1, 0]), runs(&[1, 1]), runs(&[0])];
        let (s0, s1) = (schedule(&rs, 0), schedule(&rs, 1));
        assert_eq!((s0.whole.clone(), s1.whole.clone()), (vec![2], vec![1]));
        assert_eq!(
            s0.arrays,
            vec![
                Step::Hash { array: 0, start: 0, end: 2, carry: false },
                Step::Send { peer: 1 },
                Step::Recv { peer: 1 },
                Step::Hash { array: 0, start: 3, end: 4, carry: true },
                Step::Line { array: 0 },
            ]
        );
        assert_eq!(
            s1.arrays,
            vec![
                Step::Recv { peer: 0 },
                Step::Hash { array: 0, start: 2, end: 3, carry: true },
                Step::Send { peer: 0 }
            ]
        );
        let sends = |s: &Schedule, to| s.all.iter().filter(|x| **x == Step::Send { peer: to }).count();
        let recvs = |s: &Schedule, from| s.all.iter().filter(|x| **x == Step::Recv { peer: from }).count();
        assert_eq!((sends(&s0, 1), recvs(&s1, 0)), (2, 2));
        assert_eq!((sends(&s1, 0), recvs(&s0, 1)), (2, 2));
        assert_eq!((s0.last, s1.last), (0, 0));
        assert_eq!(s0.own, vec![(0, 0), (0, 1), (0, 3), (2, 0)]);
    }
}
