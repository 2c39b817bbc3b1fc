//! `wtxt report`: the history of one snapshot path in Git as figures a page
//! draws: per generation its commit, chain and signature status and size,
//! and per tensor how much of it changed from the generation before.
//!
//! The chain is `wtxt log`'s (headers and links; with `verify`, every
//! generation's data too). The changes are `wtxt diff`'s, of each
//! generation against the one before it in the log's order (for a merge,
//! the newer of its parents' generations), each exported whole from its
//! commit into a temporary folder, two at a time.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::crypto::sign::TrustedKeys;
use crate::error::{Error, Result};
use crate::format::split::PartSize;
use crate::format::verify::SigStatus;
use crate::git::diff::Status;
use crate::git::history::{DataCheck, Generation};
use crate::progress::Progress;

/// One generation, as the page shows it.
#[derive(Clone, Debug, Serialize)]
pub struct GenerationView {
    /// Commit id, hex.
    pub commit: String,
    /// The commit message's first line.
    pub summary: String,
    /// The snapshot's generation.
    pub gen: u64,
    /// Its timestamp.
    pub ts: String,
    /// Its signature's status.
    pub signature: SigStatus,
    /// Whether its data was verified (`--verify`).
    pub data: DataCheck,
    /// What is wrong with it (chain, signature, data); empty when all holds.
    pub problems: Vec<String>,
    /// The snapshot's text, head and parts, in bytes.
    pub bytes: u64,
    /// The tensors that changed most in it (by [`Cell::heat`], then the
    /// fraction of their elements), at most [`TOP`].
    pub top: Vec<(String, Cell)>,
}

/// How many of a generation's most changed tensors it lists.
pub const TOP: usize = 10;

/// How one tensor changed in one generation.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// What happened to it (against the generation before).
    pub status: Status,
    /// Fraction of its elements that changed (1 for an added, reshaped or
    /// retyped tensor; 0 when unchanged).
    pub changed: f64,
    /// Largest |new - old| / max(|new|, |old|), for floats.
    pub max_rel: Option<f64>,
    /// L2 norm of the difference, for floats.
    pub l2: Option<f64>,
    /// The relative change, L2 of the difference over L2 of the tensor's
    /// new values, for floats that changed.
    pub rel: Option<f64>,
}

impl Cell {
    /// How much the tensor changed, from 0 (nothing) to 1 (all of it, or
    /// added, reshaped, retyped): for floats the relative change on a log
    /// scale (1e-6 and below at the bottom, 1 at the top), else the square
    /// root of the fraction of elements changed.
    pub fn heat(&self) -> f64 {
        match self.status {
            Status::Unchanged | Status::Rewrapped => 0.0,
            Status::Changed => match self.rel {
                Some(r) if r > 0.0 => ((r.log10() + 6.0) / 6.0).clamp(0.02, 1.0),
                _ => self.changed.clamp(0.0, 1.0).sqrt(),
            },
            _ => 1.0,
        }
    }
}

/// The history of one path.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// The snapshot's path in the repository.
    pub path: String,
    /// Oldest first.
    pub generations: Vec<GenerationView>,
    /// Every tensor of any generation, by the model's names, in order.
    pub tensors: Vec<String>,
    /// `cells[t][g]`: tensor `t` in generation `g` (none where it is absent;
    /// the first generation's cells say `added`).
    pub cells: Vec<Vec<Option<Cell>>>,
    /// True when every link, signature (and, with `verify`, data) holds.
    pub ok: bool,
}

/// Gathers the report of `path` in the repository around `dir`.
pub fn report(
    dir: &Path,
    path: &Path,
    trusted: Option<TrustedKeys>,
    verify: bool,
    progress: &Progress,
) -> Result<RunReport> {
    let chain = super::history::log(dir, Some(path), trusted, verify, progress)?
        .into_iter()
        .next()
        .ok_or_else(|| Error::usage(format!("{}: no history", path.display())))?;
    let (repo, rel) = crate::git::history::open(dir, Some(path))?;
    let rel = rel.expect("a path was given");
    // Every generation is exported whole below: in a partial clone, one fetch.
    crate::git::history::prefetch(&repo, &rel, true)?;
    let gens: Vec<Generation> = chain.generations.into_iter().rev().collect();
    if gens.is_empty() {
        return Err(Error::usage(format!("{}: no commit holds a snapshot at this path", rel.display())));
    }
    let tmp = tempfile::Builder::new().prefix("wtxt-report").tempdir().map_err(|e| Error::io(Path::new("/tmp"), e))?;
    let mut views = Vec::new();
    let mut columns: Vec<BTreeMap<String, Cell>> = Vec::new();
    let mut prev: Option<std::path::PathBuf> = None;
    for (i, g) in gens.iter().enumerate() {
        progress.restart(&format!("{} {}", &g.commit[..10], rel.display()));
        let out = tmp.path().join(format!("gen{i}.wtxt"));
        super::parts::export(dir, &g.commit, &rel, &out, PartSize::Whole)?;
        let bytes = std::fs::metadata(&out).map_err(|e| Error::io(&out, e))?.len();
        // The first generation against itself: every tensor, each "added".
        let d = match &prev {
            Some(p) => super::history::diff_norms(p, &out)?,
            None => super::history::diff(&out, &out, None)?,
        };
        let mut column = BTreeMap::new();
        for a in d.arrays.iter().filter(|a| !a.name.starts_with("__") && a.status != Status::Removed) {
            let c = if prev.is_some() {
                cell(a)
            } else {
                Cell { status: Status::Added, changed: 1.0, max_rel: None, l2: None, rel: None }
            };
            column.insert(a.shown_name().to_string(), c);
        }
        if let Some(p) = &prev {
            std::fs::remove_file(p).map_err(|e| Error::io(p, e))?;
        }
        columns.push(column);
        prev = Some(out);
        views.push(GenerationView {
            commit: g.commit.clone(),
            summary: g.summary.clone(),
            gen: g.gen,
            ts: g.ts.clone(),
            signature: g.signature,
            data: g.data,
            problems: g.problems.clone(),
            bytes,
            top: top(columns.last().expect("pushed above"), i > 0),
        });
    }
    // First seen, first listed; the set keeps it linear in the names.
    let mut tensors: Vec<String> = Vec::new();
    let mut listed = std::collections::HashSet::new();
    for c in &columns {
        for name in c.keys() {
            if listed.insert(name.as_str()) {
                tensors.push(name.clone());
            }
        }
    }
    let cells = tensors.iter().map(|t| columns.iter().map(|c| c.get(t).cloned()).collect()).collect();
    let ok = views.iter().all(|v| v.problems.is_empty());
    Ok(RunReport { path: rel.display().to_string(), generations: views, tensors, cells, ok })
}

/// The most changed tensors of a generation's column (none for the first,
/// where every tensor is new).
fn top(column: &BTreeMap<String, Cell>, after_first: bool) -> Vec<(String, Cell)> {
    if !after_first {
        return Vec::new();
    }
    let mut v: Vec<(&String, &Cell)> = column.iter().filter(|(_, c)| c.heat() > 0.0).collect();
    v.sort_by(|a, b| {
        let key = |c: &Cell| (c.heat(), c.changed);
        key(b.1).partial_cmp(&key(a.1)).unwrap_or(std::cmp::Ordering::Equal).then_with(|| a.0.cmp(b.0))
    });
    v.into_iter().take(TOP).map(|(n, c)| (n.clone(), c.clone())).collect()
}

/// How much of `a` changed, as a cell.
fn cell(a: &crate::git::diff::ArrayDiff) -> Cell {
    let numel: u64 = a.shape.iter().product::<u64>().max(1);
    let changed = match a.status {
        Status::Unchanged | Status::Rewrapped => 0.0,
        Status::Changed => a.changed_elements as f64 / numel as f64,
        _ => 1.0,
    };
    let rel = match (a.status, a.l2, a.norm) {
        (Status::Changed, Some(l2), Some(norm)) if norm > 0.0 => Some(l2 / norm),
        (Status::Changed, Some(l2), Some(_)) if l2 > 0.0 => Some(1.0), // from all zeros
        _ => None,
    };
    Cell { status: a.status, changed, max_rel: a.max_rel, l2: a.l2, rel }
}
