//! `wtxt snapshot` and `wtxt convert`: inputs of any format to a canonical
//! WTXT, or to another container.

use crate::convert::{load_inputs, Notes};
use crate::error::{Error, Result};
use crate::format::layout::DEFAULT_ROWS_PER_CHUNK;
use crate::format::syntax::{Audit, Meta};
use crate::format::write::{WriteOptions, Written};
use crate::model::Array;
use crate::options::{Keys, MetaFields, Output};
use crate::progress::Progress;
use std::path::{Path, PathBuf};

use super::inputs::chain_from;
use super::oms::oms_sign_written;
use crate::crypto::digest::Hash;
use crate::store::write_wtxt;

/// Options of `wtxt snapshot`.
#[derive(Default)]
pub struct SnapshotOptions {
    /// The header's `meta` fields.
    pub meta: MetaFields,
    /// The previous generation: gen = its gen + 1, merkle_prev = its merkle_this.
    pub prev: Option<Prev>,
    /// Rows per chunk for arrays of rank >= 2 (default 128).
    pub rows_per_chunk: Option<u64>,
    /// The `audit` line: `k=v ...`.
    pub audit: Option<String>,
    /// Write a WTXT-S and its WSUM here.
    pub wsum: Option<PathBuf>,
    /// What inputs must prove; what the snapshot is HMAC'd and signed with.
    pub keys: Keys,
    /// How the snapshot is stored.
    pub output: Output,
}

/// The generation a new snapshot continues.
pub enum Prev {
    /// A snapshot file, verified whole before it is chained to (`--prev`).
    File(PathBuf),
    /// A link the caller verified itself (a version in Git's objects,
    /// verified from its blobs): its `gen` and `merkle_this`.
    Verified {
        /// Its generation.
        gen: u64,
        /// Its `merkle_this`.
        merkle_this: Hash,
    },
}

/// Parses `--audit 'k=v ...'`.
pub fn parse_audit(s: &str) -> Result<Audit> {
    if s.len() > crate::limits::MAX_AUDIT {
        return Err(Error::usage(format!("--audit: longer than {} bytes", crate::limits::MAX_AUDIT)));
    }
    let a = Audit::parse_pairs(s.as_bytes()).map_err(|m| Error::usage(format!("--audit: {m}")))?;
    if a.pairs.iter().any(|(k, _)| k == crate::format::bind::BIND_KEY) {
        let m = format!("--audit: `{}` is the keyed tag's, which the writer computes", crate::format::bind::BIND_KEY);
        return Err(Error::usage(m));
    }
    Ok(a)
}

/// `wtxt snapshot`: reads inputs, writes a canonical WTXT (and WSUM)
/// atomically; readers' warnings go to `notes`.
pub fn snapshot(
    inputs: &[PathBuf],
    out: &Path,
    o: &SnapshotOptions,
    progress: &Progress,
    notes: &mut Notes,
) -> Result<Written> {
    let trust = o.keys.trust();
    let arrays = load_inputs(inputs, &trust.options(), notes)?;
    snapshot_arrays(&arrays, out, o, progress)
}

/// Writes `arrays` (sorted, unique) as `snapshot` would, with its options.
pub fn snapshot_arrays(arrays: &[Array], out: &Path, o: &SnapshotOptions, progress: &Progress) -> Result<Written> {
    let (meta, merkle_prev) = snapshot_meta(o)?;
    let audit = o.audit.as_deref().map(parse_audit).transpose()?;
    let rows = o.rows_per_chunk.unwrap_or(DEFAULT_ROWS_PER_CHUNK);
    if rows == 0 {
        return Err(Error::usage("--rows-per-chunk: expected at least 1"));
    }
    let opts = WriteOptions {
        merkle_prev,
        hmac_key: o.keys.hmac_key.as_ref(),
        sign_key: o.keys.sign_key.as_ref(),
        audit,
        streaming: o.wsum.is_some(),
        digest: o.output.digest,
        ..WriteOptions::new(meta, rows)
    };
    let written = write_wtxt(arrays, &opts, out, o.output.part_size, o.wsum.as_deref(), progress)?;
    oms_sign_written(out, o.keys.oms_key.as_ref())?;
    Ok(written)
}

/// The `meta` line and `merkle_prev` of a new snapshot under `o`: from
/// the previous generation (verified as `--prev` is), or `--gen`; `ts`
/// resolved (the option, `SOURCE_DATE_EPOCH`, or the clock). A writer on
/// many processes resolves them once and gives every process the result.
pub fn snapshot_meta(o: &SnapshotOptions) -> Result<(Meta, Hash)> {
    let (gen, merkle_prev) = match (&o.prev, o.meta.gen) {
        (Some(_), Some(_)) => return Err(Error::usage("give --gen or --prev, not both")),
        (Some(Prev::File(p)), None) => chain_from(p, &o.keys.trust())?,
        (Some(Prev::Verified { gen, merkle_this }), None) => {
            (gen.checked_add(1).ok_or_else(|| Error::usage("gen overflows"))?, *merkle_this)
        }
        (None, g) => (g.unwrap_or(0), [0; 32]),
    };
    let meta = Meta::new(gen, o.meta.ts.as_deref())?.with_tokens(
        o.meta.schema.as_deref(),
        o.meta.build.as_deref(),
        o.meta.host.as_deref(),
        o.meta.cuda.as_deref(),
    )?;
    Ok((meta, merkle_prev))
}

/// Target formats of `wtxt convert`.
#[derive(Clone, Copy)]
pub enum ConvertTo {
    /// A WTXT snapshot.
    Wtxt,
    /// A binary container (npy is not offered: it holds one array).
    Container(&'static dyn crate::convert::container::Container),
}

/// `wtxt convert`: any readable input to WTXT (as `snapshot` with its
/// options, plus the container's metadata arrays, so converting back gives
/// the same file) or to another container.
pub fn convert(input: &Path, out: &Path, to: ConvertTo, o: &SnapshotOptions, notes: &mut Notes) -> Result<()> {
    use crate::convert::{write_arrays_as, Source};
    let trust = o.keys.trust();
    // The input is opened once: what it is, the outline, and the read all
    // come from this file.
    let source = Source::open(input).map_err(|e| e.in_file(input))?;
    if let (ConvertTo::Container(fmt), Source::Wtxt { file, .. }) = (to, &source) {
        // A WTXT goes straight into the container's layout (when it can).
        let prepare = |arrays: Vec<Array>| -> crate::convert::direct::Chosen<(Vec<String>, Notes)> {
            let mut found = Notes::new();
            let arrays = crate::convert::gather(vec![(input, arrays)], &mut found)?;
            let (arrays, dropped) = crate::convert::formats::foreign_metadata(arrays, fmt)?;
            Ok((arrays, (dropped, found)))
        };
        if let Some(((dropped, found), _)) =
            crate::convert::direct::write_direct(input, Some(file), &trust.options(), fmt, out, &prepare)?
        {
            notes.extend(found);
            note_dropped(&dropped, notes);
            return Ok(());
        }
    }
    let target = match to {
        ConvertTo::Wtxt => None,
        ConvertTo::Container(fmt) => Some(fmt),
    };
    let arrays = crate::convert::load_source_for(input, source, target, &trust.options(), notes)?;
    match to {
        ConvertTo::Wtxt => snapshot_arrays(&arrays, out, o, &Progress::hidden()).map(|_| ()),
        ConvertTo::Container(fmt) => {
            let (arrays, dropped) = crate::convert::formats::foreign_metadata(arrays, fmt)?;
            note_dropped(&dropped, notes);
            write_arrays_as(&arrays, out, fmt)
        }
    }
}

fn note_dropped(dropped: &[String], notes: &mut Notes) {
    if !dropped.is_empty() {
        notes.push(format!("left out metadata of other containers: {}", dropped.join(", ")));
    }
}
