//! A snapshot written to disk: one file, or a head and its parts.

use std::path::Path;

use crate::error::Result;
use crate::format::split::PartSize;
use crate::format::write::{WriteOptions, WritePlan, Written};
use crate::fs::write_file;
use crate::model::Array;
use crate::progress::Progress;

use super::out::{PartedOut, SnapshotOut};

/// Writes arrays as WTXT to `out` atomically (split when its text is
/// larger than `size`), and the WSUM when streaming.
pub fn write_wtxt(
    arrays: &[Array],
    opts: &WriteOptions,
    out: &Path,
    size: PartSize,
    wsum: Option<&Path>,
    progress: &Progress,
) -> Result<Written> {
    // The cut points follow from sizes alone: a split snapshot is written
    // straight into its parts, in one pass like a single file, with the
    // plan that placed them.
    let plan = WritePlan::new(arrays, opts).map_err(|e| e.in_file(out))?;
    let placed = match size.limit() {
        Some(limit) if !crate::fs::is_device(out) => {
            let shape = plan.shape();
            let spans = crate::format::split::place_parts(&shape, limit).map_err(|e| e.in_file(out))?;
            spans.map(|s| (s, shape.tail))
        }
        _ => None,
    };
    let written = if let Some((spans, tail)) = placed {
        let mut w = PartedOut::create(out, spans, tail)?;
        let written = plan.write(&mut w, progress).map_err(|e| e.in_file(out))?;
        w.finish()?;
        written
    } else {
        let mut w = SnapshotOut::create(out, PartSize::Whole)?;
        let written = plan.write(&mut w, progress).map_err(|e| e.in_file(out))?;
        w.finish()?;
        written
    };
    let wsum_text = match (&written.wsum, wsum) {
        (Some(w), Some(_)) => Some(w.to_file()),
        _ => None,
    };
    if let (Some(text), Some(p)) = (wsum_text, wsum) {
        write_file(p, text.as_bytes(), 0o644)?;
    }
    Ok(written)
}
