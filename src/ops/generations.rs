//! Generations: `wtxt finalize` (WTXT-S + WSUM) and `wtxt delta create|apply`.

use crate::crypto::armor::Unseal;
use crate::crypto::digest::{fingerprint_key, Fingerprint, Hash};
use crate::error::{check_at, Error, Position, Result};
use crate::format::layout::DEFAULT_ROWS_PER_CHUNK;
use crate::format::syntax::{Meta, Root, Wsum};
use crate::format::verify::{verify, InputTrust, ProblemKind, Report, VerifyOptions};
use crate::format::write::WriteOptions;
use crate::fs::{write_file, AtomicFile};
use crate::options::{Keys, MetaFields, Output};
use crate::progress::Progress;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::check::{verify_file, VerifyFiles};
use super::inputs::{chain_from, distinct_outputs, open_input};
use super::oms::oms_sign_written;
use super::parts::{copy_text, write_verified};
use crate::store::input::WtxtIn;
use crate::store::{write_wtxt, SnapshotOut};

/// Options of `wtxt finalize`.
#[derive(Default)]
pub struct FinalizeOptions {
    /// What the WTXT-S (HMACs) and `prev` (signature) must prove; signs the
    /// WSUM and the rewritten file.
    pub keys: Keys,
    /// The previous generation: `merkle_prev` is its `merkle_this`.
    pub prev: Option<PathBuf>,
    /// Also write the finalized plain WTXT here.
    pub rewrite: Option<PathBuf>,
    /// How the rewritten WTXT is stored.
    pub output: Output,
}

/// `wtxt finalize`: computes the WSUM of a WTXT-S, optionally rewriting it
/// as a plain (signed) WTXT whose body is byte-identical.
pub fn finalize(path: &Path, wsum_out: &Path, o: &FinalizeOptions) -> Result<Wsum> {
    let trust = o.keys.trust();
    let (sign_key, prev, rewrite) = (o.keys.sign_key.as_ref(), o.prev.as_deref(), o.rewrite.as_deref());
    let mut outs = vec![wsum_out];
    outs.extend(rewrite);
    distinct_outputs(&outs)?;
    let mut input = WtxtIn::open(path, None)?;
    // A WTXT-S carries no signature; its HMACs are checked when a key is given.
    let opts = VerifyOptions {
        hmac_key: trust.hmac_key.as_ref(),
        allow_unauthenticated: trust.allow_unauthenticated,
        allow_unbound: trust.allow_unbound,
        ..Default::default()
    };
    let key = fingerprint_key()?;
    let mut verified = Fingerprint::new(input.text(), &key);
    let mut report = verify(&mut verified, &opts, None).map_err(|e| input.blame(e))?;
    let verified = verified.finish();
    input.locate_report(&mut report);
    let header = report.header.clone().ok_or_else(|| check_at(1, "not a WTXT").in_file(path))?;
    if header.root != Root::Pending {
        return Err(check_at(4, "expected a WTXT-S (root_pending); this file is already final").in_file(path));
    }
    // A WTXT-S verified alone ends with RootPending; anything else failed.
    if let Some(p) = report.errors.iter().find(|p| p.kind != ProblemKind::RootPending) {
        return Err(p.to_error().in_file(path));
    }
    let sha_all: Hash = report.sha256_all.ok_or_else(|| check_at(4, "no root computed").in_file(path))?;
    let merkle_prev = match prev {
        Some(p) => {
            // chain_from gives the next gen: this file's must be at least that.
            let (next, m) = chain_from(p, &trust)?;
            if header.meta.gen < next {
                return Err(check_at(
                    2,
                    format!("gen {} does not follow --prev (expected {next} or later)", header.meta.gen_str()),
                )
                .in_file(path));
            }
            m
        }
        None => [0; 32],
    };
    let fastxor = report.fastxor_value().ok_or_else(|| check_at(4, "no fastxor computed").in_file(path))?;
    let fin = crate::format::write::finalize(&header, sha_all, fastxor, merkle_prev, sign_key);
    let wsum = fin.wsum;
    if let Some(out) = rewrite {
        let text = fin.header;
        // The body is copied as the verified text has it (joined, for a
        // split WTXT-S); the result is stored split by `o.output.part_size`.
        let mut input = WtxtIn::open(path, None)?;
        let mut src = Fingerprint::new(input.text(), &key);
        let skip = header.signed_bytes.len() as u64;
        std::io::copy(&mut (&mut src).take(skip), &mut std::io::sink())
            .map_err(|e| input.blame(Error::read_failed(e)))?;
        let mut w = SnapshotOut::create(out, o.output.part_size)?;
        w.write_all(text.as_bytes()).map_err(Error::write_failed)?;
        copy_text(&mut src, &mut w).map_err(|e| e.either(|e| input.blame(e), |e| e.in_file(out)))?;
        // The input is read twice: what is copied must be what was verified.
        if src.finish() != verified {
            return Err(Error::check(Position::None, "the file changed while it was finalized").in_file(path));
        }
        w.finish()?;
        oms_sign_written(out, o.keys.oms_key.as_ref())?;
    }
    write_file(wsum_out, wsum.to_file().as_bytes(), 0o644)?;
    Ok(wsum)
}

/// `wtxt delta create`: the extended DELTA v2 from `base` to `target`. The
/// target is verified strictly first; the base is read for its chunk lines.
pub fn delta_create(
    base: &Path,
    target: &Path,
    out: &Path,
    unseal: Option<Unseal>,
) -> Result<crate::format::delta::DeltaStats> {
    let vf = VerifyFiles { unseal, ..Default::default() };
    // Both inputs are verified first, side by side: a delta names its base
    // by `sha256_all`, and one made from a damaged or forged file must not
    // look like a delta of the file it claims to follow.
    let (b, t) = std::thread::scope(|s| {
        let b = s.spawn(|| verify_file(base, &vf, &Progress::hidden()));
        (b.join().expect("verify thread"), verify_file(target, &vf, &Progress::hidden()))
    });
    for (path, report) in [(base, b?), (target, t?)] {
        if let Some(p) = report.first_error() {
            return Err(p.to_error().in_file(path));
        }
    }
    let mut b = WtxtIn::open(base, vf.unseal.as_ref())?;
    let mut t = WtxtIn::open(target, vf.unseal.as_ref())?;
    let mut f = AtomicFile::create(out)?;
    let stats = {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f.file());
        let r =
            crate::format::delta::create((b.lines(), base), (t.lines(), target), &mut w).map_err(|e| e.in_file(out))?;
        w.flush().map_err(|e| Error::io(out, e))?;
        r
    };
    f.commit()?;
    Ok(stats)
}

/// Options of `wtxt delta apply` (the meta fields and the signing key
/// serve the minimal form).
#[derive(Default)]
pub struct DeltaApplyOptions {
    /// Minimal form: `gen` (default: the base's + 1), `ts`, `build` (default: the base's).
    pub meta: MetaFields,
    /// Inputs must authenticate with the HMAC key; with trusted keys, the
    /// rebuilt target must carry a valid signature by one of them (a
    /// minimal-form delta, which carries none, is refused).
    pub keys: Keys,
    /// Decrypts age-encrypted inputs (base and delta).
    pub unseal: Option<Unseal>,
    /// How the result is stored.
    pub output: Output,
}

/// `wtxt delta apply`: rebuilds the target from `base` and the delta. The
/// result is verified before it is renamed into place; the base is only read.
pub fn delta_apply(base: &Path, delta: &Path, out: &Path, o: &DeltaApplyOptions) -> Result<Report> {
    let (d, _) = open_input(delta, o.unseal.as_ref())?;
    let mut reader = crate::format::delta::DeltaReader::open(d).map_err(|e| e.in_file(delta))?;
    if reader.is_extended() {
        let target_sha256_all = reader.head.target_sha256_all;
        if o.meta.is_set() || o.keys.sign_key.is_some() {
            return Err(Error::usage(
                "--gen, --ts, the tokens and --sign-key serve the minimal form; this delta carries its target header",
            ));
        }
        // The base's parts are not hashed as they are read: the target is
        // verified whole below, which proves every byte taken from them;
        // only when that fails are they checked, to name the culprit.
        let mut b = WtxtIn::open_unhashed(base, o.unseal.as_ref())?;
        let mut f = SnapshotOut::create(out, o.output.part_size)?;
        let vopts = VerifyOptions {
            hmac_key: o.keys.hmac_key.as_ref(),
            trusted: o.keys.trusted.as_ref(),
            require_signature: o.keys.trusted.is_some(),
            allow_unauthenticated: o.keys.allow_unauthenticated,
            allow_unbound: o.keys.allow_unbound,
            ..Default::default()
        };
        // Write the result and prove it in the same pass.
        let mut text = b.text();
        let merged = write_verified(&mut f, &vopts, |w| {
            crate::format::delta::apply_extended(&mut text, &mut reader, delta, &mut &mut *w)
                .map_err(|e| b.blame_input(e).in_file(out))
        });
        let bad_base = || WtxtIn::find_bad_part(base, o.unseal.as_ref());
        let report = merged.map_err(|e| bad_base().unwrap_or(e))?;
        if let Some(e) =
            (report.first_error().is_some() || report.sha256_all != target_sha256_all).then(bad_base).flatten()
        {
            return Err(e);
        }
        if let Some(p) = report.first_error() {
            return Err(Error::check(
                Default::default(),
                format!(
                    "the rebuilt target fails verification (line {}: {}); base or delta is damaged",
                    p.line,
                    p.text()
                ),
            )
            .in_file(delta));
        }
        if report.sha256_all != target_sha256_all {
            return Err(Error::check(
                Default::default(),
                "the rebuilt target's sha256_all is not the delta's target_sha256_all",
            )
            .in_file(delta));
        }
        f.finish()?;
        oms_sign_written(out, o.keys.oms_key.as_ref())?;
        return Ok(report);
    }
    let parsed = reader.collect().map_err(|e| e.in_file(delta))?;
    apply_minimal(base, delta, &parsed, out, o)
}

fn apply_minimal(
    base: &Path,
    delta: &Path,
    d: &crate::format::delta::Delta,
    out: &Path,
    o: &DeltaApplyOptions,
) -> Result<Report> {
    if o.keys.trusted.is_some() {
        return Err(Error::check(
            Position::Line(1),
            "a minimal-form delta carries no signature, so no trusted key vouches for its chunks; \
             apply an extended delta (wtxt delta create) to require one",
        )
        .in_file(delta));
    }
    // The base is verified under the same rules as any input we sign or HMAC.
    let trust = InputTrust::new(
        o.keys.hmac_key.as_ref(),
        None,
        o.keys.sign_key.as_ref(),
        o.keys.allow_unauthenticated,
        o.keys.allow_unbound,
    );
    let mut b = WtxtIn::open(base, o.unseal.as_ref())?;
    let loaded = crate::format::load(b.text(), b.len, &trust.options()).map_err(|e| b.blame(e))?;
    let Root::Final { sha256_all, merkle_this: base_this, .. } = loaded.header.root else {
        return Err(check_at(4, "the base is a WTXT-S: finalize it first").in_file(base));
    };
    if sha256_all != d.head.base_sha256_all {
        return Err(check_at(1, "this delta is for another base: base_sha256_all differs from the base's sha256_all")
            .in_file(delta));
    }
    let rows = loaded.rows_per_chunk.unwrap_or(DEFAULT_ROWS_PER_CHUNK);
    let mut arrays = loaded.arrays;
    crate::format::delta::apply_minimal(&mut arrays, rows, d).map_err(|e| e.in_file(delta))?;
    let m = &loaded.header.meta;
    let gen = match o.meta.gen {
        Some(g) => g,
        None => m.gen.checked_add(1).ok_or_else(|| Error::usage("gen overflows"))?,
    };
    let meta = Meta { gen, ts: Meta::new(gen, o.meta.ts.as_deref())?.ts, ..m.clone() }.with_tokens(
        o.meta.schema.as_deref(),
        o.meta.build.as_deref(),
        o.meta.host.as_deref(),
        o.meta.cuda.as_deref(),
    )?;
    let opts = WriteOptions {
        merkle_prev: base_this,
        hmac_key: o.keys.hmac_key.as_ref(),
        sign_key: o.keys.sign_key.as_ref(),
        digest: loaded.header.digest(),
        ..WriteOptions::new(meta, rows)
    };
    write_wtxt(&arrays, &opts, out, o.output.part_size, None, &Progress::hidden())?;
    let report = verify_file(
        out,
        &VerifyFiles { hmac_key: o.keys.hmac_key.clone(), ..Default::default() },
        &Progress::hidden(),
    )?;
    if report.ok {
        oms_sign_written(out, o.keys.oms_key.as_ref())?;
    }
    Ok(report)
}
