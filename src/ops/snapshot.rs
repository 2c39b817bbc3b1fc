//! `wtxt snapshot` and `wtxt convert`: inputs of any format to a canonical
//! WTXT, or to another container.

use crate::convert::{load_inputs, Notes};
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::{SecretKey, TrustedKeys};
use crate::error::{Error, Result};
use crate::model::Array;
use crate::progress::Progress;
use crate::wtxt::layout::DEFAULT_ROWS_PER_CHUNK;
use crate::wtxt::syntax::{Audit, Meta};
use crate::wtxt::verify::InputTrust;
use crate::wtxt::write::{WriteOptions, Written};
use std::path::{Path, PathBuf};

use super::*;

/// Options of `wtxt snapshot`.
#[derive(Default)]
pub struct SnapshotOptions {
    /// Generation number (default 0).
    pub gen: Option<u64>,
    /// The previous generation: gen = its gen + 1, merkle_prev = its merkle_this.
    pub prev: Option<PathBuf>,
    /// Timestamp (default: `SOURCE_DATE_EPOCH`, else now).
    pub ts: Option<String>,
    /// `build` token (default `none`).
    pub build: Option<String>,
    /// `schema` token (default `weights/v1`).
    pub schema: Option<String>,
    /// `host` token (default `cpu`).
    pub host: Option<String>,
    /// `cuda` token (default `off`).
    pub cuda: Option<String>,
    /// Rows per chunk for arrays of rank >= 2 (default 128).
    pub rows_per_chunk: Option<u64>,
    /// HMACs every array; WTXT inputs must authenticate with it.
    pub hmac_key: Option<HmacKey>,
    /// Signs the snapshot.
    pub sign_key: Option<SecretKey>,
    /// Keys that WTXT inputs and `prev` must be signed by.
    pub trusted: Option<TrustedKeys>,
    /// With an HMAC key, accept input arrays whose hmac is all zeros.
    pub allow_unauthenticated: bool,
    /// The `audit` line: `k=v ...`.
    pub audit: Option<String>,
    /// Write a WTXT-S and its WSUM here.
    pub wsum: Option<PathBuf>,
    /// Largest file of the output (split above it).
    pub part_size: crate::wtxt::split::PartSize,
    /// Also write an OpenSSF Model Signing `model.sig` beside the output.
    pub oms_key: Option<crate::crypto::ec::EcSecretKey>,
}

impl SnapshotOptions {
    /// What the inputs must prove before this snapshot signs or HMACs them.
    pub fn trust(&self) -> InputTrust {
        InputTrust::new(
            self.hmac_key.as_ref(),
            self.trusted.as_ref(),
            self.sign_key.as_ref(),
            self.allow_unauthenticated,
        )
    }
}

/// Parses `--audit 'k=v ...'`.
pub fn parse_audit(s: &str) -> Result<Audit> {
    if s.len() > crate::limits::MAX_AUDIT {
        return Err(Error::usage(format!("--audit: longer than {} bytes", crate::limits::MAX_AUDIT)));
    }
    Audit::parse_pairs(s.as_bytes()).map_err(|m| Error::usage(format!("--audit: {m}")))
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
    let trust = o.trust();
    let arrays = load_inputs(inputs, &trust.options(), notes)?;
    snapshot_arrays(&arrays, out, o, progress)
}

/// Writes `arrays` (sorted, unique) as `snapshot` would, with its options.
pub fn snapshot_arrays(arrays: &[Array], out: &Path, o: &SnapshotOptions, progress: &Progress) -> Result<Written> {
    let (gen, merkle_prev) = match (&o.prev, o.gen) {
        (Some(_), Some(_)) => return Err(Error::usage("give --gen or --prev, not both")),
        (Some(p), None) => chain_from(p, &o.trust())?,
        (None, g) => (g.unwrap_or(0), [0; 32]),
    };
    let meta = Meta::new(gen, o.ts.as_deref())?.with_tokens(
        o.schema.as_deref(),
        o.build.as_deref(),
        o.host.as_deref(),
        o.cuda.as_deref(),
    )?;
    let audit = o.audit.as_deref().map(parse_audit).transpose()?;
    let rows = o.rows_per_chunk.unwrap_or(DEFAULT_ROWS_PER_CHUNK);
    if rows == 0 {
        return Err(Error::usage("--rows-per-chunk: expected at least 1"));
    }
    let opts = WriteOptions {
        merkle_prev,
        hmac_key: o.hmac_key.as_ref(),
        sign_key: o.sign_key.as_ref(),
        audit,
        streaming: o.wsum.is_some(),
        ..WriteOptions::new(meta, rows)
    };
    let written = write_wtxt(arrays, &opts, out, o.part_size, o.wsum.as_deref(), progress)?;
    oms_sign_written(out, o.oms_key.as_ref())?;
    Ok(written)
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
    use crate::convert::write_arrays_as;
    let trust = o.trust();
    if let ConvertTo::Container(fmt) = to {
        // A WTXT goes straight into the container's layout (when it can).
        let prepare = |arrays: Vec<Array>| -> crate::convert::direct::Chosen<(Vec<String>, Notes)> {
            let mut found = Notes::new();
            let arrays = crate::convert::gather(vec![(input, arrays)], &mut found)?;
            let (arrays, dropped) = crate::convert::formats::foreign_metadata(arrays, fmt)?;
            Ok((arrays, (dropped, found)))
        };
        if let Some(((dropped, found), _)) =
            crate::convert::direct::write_direct(input, &trust.options(), fmt, out, &prepare)?
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
    let arrays = crate::convert::load_for(input, target, &trust.options(), notes)?;
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
