//! `wtxt recover`: what survives of a damaged WTXT, signed only when authenticated.

use crate::convert::{map_file, write_arrays};
use crate::error::{Error, Result};
use crate::format::layout::DEFAULT_ROWS_PER_CHUNK;
use crate::format::recover::{recover as scan, Accept, RecoveryReport};
use crate::format::syntax::{Audit, Meta};
use crate::format::write::WriteOptions;
use crate::fs::write_file;
use crate::options::{Keys, Output};
use crate::progress::Progress;
use std::path::{Path, PathBuf};

use super::inputs::distinct_outputs;
use super::oms::oms_sign_written;
use crate::store::input::WtxtIn;
use crate::store::write_wtxt;

/// Options of `wtxt recover`.
#[derive(Default)]
pub struct RecoverOptions {
    /// Write a JSON report here.
    pub report: Option<PathBuf>,
    /// Where what survives of damaged arrays goes (.npz or .safetensors).
    pub partial: Option<PathBuf>,
    /// Only arrays that authenticate with the HMAC key are kept signed
    /// (with `allow_unauthenticated`, all-zero tags are kept, written
    /// unauthenticated); the signing key needs the HMAC key.
    pub keys: Keys,
    /// How the recovered file is stored.
    pub output: Output,
}

/// `wtxt recover`: keeps every array that is still whole and reports the
/// rest. The output holds only whole arrays of the damaged file; HMAC tags
/// are written only for arrays authenticated under the key, and the output
/// is signed only when every array in it was (a damaged file's own
/// signature cannot vouch for what survives).
pub fn recover(path: &Path, out: &Path, o: &RecoverOptions) -> Result<RecoveryReport> {
    let mut outs = vec![out];
    outs.extend(o.report.as_deref());
    outs.extend(o.partial.as_deref());
    distinct_outputs(&outs)?;
    if o.keys.sign_key.is_some() && o.keys.hmac_key.is_none() {
        return Err(Error::usage(
            "recover --sign-key needs --hmac-key: only arrays authenticated by the HMAC key may be signed",
        ));
    }
    // A split snapshot is joined into an unnamed temporary file first, going
    // on past missing or damaged parts: recovery works on what is there.
    let mut input = WtxtIn::open_lenient(path, None)?;
    let text = match (input.len, input.is_split()) {
        (0, _) => None,
        (_, false) => Some(crate::buffer::ArrayData::from_map(map_file(path)?)),
        (len, true) => {
            let mut spill = crate::buffer::Spill::with_expected(len)?;
            std::io::copy(&mut input.text(), &mut spill).map_err(|e| input.blame(Error::read_failed(e)))?;
            Some(spill.finish()?)
        }
    };
    let faults = input.faults();
    let bytes = text.as_ref().map_or(&[][..], |m| m.as_bytes());
    let key = o.keys.hmac_key.as_ref();
    let accept = Accept { unauthenticated: o.keys.allow_unauthenticated, unbound: o.keys.allow_unbound };
    let mut r = scan(bytes, key, accept, o.partial.is_some());
    r.report.part_faults = faults.iter().map(|e| e.to_string()).collect();
    // A chunk of a split snapshot is named by its part and line there.
    for a in &mut r.report.arrays {
        for c in a.intact_chunks.iter_mut().chain(&mut a.damaged_chunks) {
            let (file, line) = input.locate(c.line);
            (c.file, c.line) = (file.map(|f| f.display().to_string()), line);
        }
    }
    // The key vouches for the output (signs it, binds it whole) only when it
    // authenticated every array in it.
    let unauthenticated = r.arrays.iter().find(|a| !r.authenticated.contains(&a.name));
    if o.keys.sign_key.is_some() {
        if let Some(a) = unauthenticated {
            return Err(Error::check(
                Default::default(),
                format!("array {} is not authenticated by the HMAC key: refusing to sign it", a.name),
            )
            .in_file(path));
        }
    }
    let meta = match r.meta.clone() {
        Some(m) => m,
        None => Meta::new(0, None)?,
    };
    // Tags: recomputed for the arrays the key authenticated (the salt follows
    // the output's gen), carried as they were without a key, zeros otherwise.
    let carried_hmacs = match key {
        Some(k) => {
            let gen = meta.gen_str();
            r.arrays
                .iter()
                .filter(|a| r.authenticated.contains(&a.name))
                .map(|a| {
                    let salt = crate::crypto::digest::derive_salt(&gen, &a.name);
                    (a.name.clone(), carried_tag(k, r.digest, &salt, a, r.rows_per_chunk))
                })
                .collect()
        }
        None => r.carried_hmacs.clone(),
    };
    let audit = Audit {
        pairs: vec![
            ("recovered_arrays".into(), r.report.recovered_arrays.to_string()),
            ("lost_arrays".into(), r.report.lost_arrays.to_string()),
        ],
    };
    let opts = WriteOptions {
        bind_key: key.filter(|_| unauthenticated.is_none()),
        merkle_prev: r.merkle_prev.unwrap_or([0; 32]),
        sign_key: o.keys.sign_key.as_ref(),
        audit: Some(audit),
        carried_hmacs,
        digest: r.digest,
        ..WriteOptions::new(meta, r.rows_per_chunk.unwrap_or(DEFAULT_ROWS_PER_CHUNK))
    };
    // Nothing kept: no snapshot is written, so an output already there
    // (a good copy, say) is never replaced by an empty one.
    if !r.arrays.is_empty() {
        write_wtxt(&r.arrays, &opts, out, o.output.part_size, None, &Progress::hidden())?;
        oms_sign_written(out, o.keys.oms_key.as_ref())?;
    }
    if let Some(p) = &o.partial {
        write_arrays(&r.partials, p)?;
    }
    if let Some(p) = &o.report {
        let json = serde_json::to_string_pretty(&r.report).expect("report serializes");
        write_file(p, format!("{json}\n").as_bytes(), 0o644)?;
    }
    Ok(r.report)
}

/// An array's tag under `key` in `digest`'s form, with the salt the
/// output derives (the array laid out as the writer will lay it out).
fn carried_tag(
    key: &crate::crypto::mac::HmacKey,
    digest: crate::format::syntax::DigestForm,
    salt: &[u8; 8],
    a: &crate::model::Array,
    rows: Option<u64>,
) -> [u8; 32] {
    if digest == crate::format::syntax::DigestForm::Sha256 {
        return key.compute(salt, a.bytes());
    }
    let Ok(layout) = crate::format::layout::Layout::new(a.dtype, &a.shape, rows.unwrap_or(DEFAULT_ROWS_PER_CHUNK))
    else {
        return key.compute(salt, a.bytes());
    };
    let chunks: Vec<(u64, crate::crypto::digest::Hash)> = (0..layout.chunk_count())
        .map(|ix| {
            let (off, len) = layout.chunk_range(ix);
            (len, crate::crypto::digest::sha256(&a.bytes()[off as usize..(off + len) as usize]))
        })
        .collect();
    key.tree_tag(salt, &crate::crypto::digest::tree_array(layout.bytes, &chunks))
}
