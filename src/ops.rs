//! Whole-file operations, one per command: the CLI parses flags into these
//! option structs and calls them; everything else lives here and below.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::atomic::{write_file, AtomicFile, Writeback};
use crate::convert::{load_inputs, map_file, write_arrays, Notes};
use crate::crypto::armor::{open_maybe_sealed, Seal, Unseal};
use crate::crypto::digest::{merkle_this, Hash};
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::{SecretKey, TrustedKeys};
use crate::error::{check_at, Error, Position, Result};
use crate::model::Array;
use crate::progress::Progress;
use crate::wtxt::layout::DEFAULT_ROWS_PER_CHUNK;
use crate::wtxt::read::{read, read_head, ArrayStart, Header, LineReader, Visitor};
use crate::wtxt::recover::{recover as scan, RecoveryReport};
use crate::wtxt::syntax::{Audit, ChLine, Meta, Root, SignLine, Wsum};
use crate::wtxt::verify::{check_header, verify, InputTrust, ProblemKind, Report, VerifyOptions};
use crate::wtxt::write::{header_text, write_snapshot, WriteOptions, Written};

/// Options of `wtxt snapshot`.
#[derive(Default)]
pub struct SnapshotOptions {
    pub gen: Option<u64>,
    /// The previous generation: gen = its gen + 1, merkle_prev = its merkle_this.
    pub prev: Option<PathBuf>,
    pub ts: Option<String>,
    pub build: Option<String>,
    pub schema: Option<String>,
    pub host: Option<String>,
    pub cuda: Option<String>,
    pub rows_per_chunk: Option<u64>,
    pub hmac_key: Option<HmacKey>,
    pub sign_key: Option<SecretKey>,
    /// Keys that WTXT inputs and `prev` must be signed by.
    pub trusted: Option<TrustedKeys>,
    /// With an HMAC key, accept input arrays whose hmac is all zeros.
    pub allow_unauthenticated: bool,
    pub audit: Option<String>,
    /// Write a WTXT-S and its WSUM here.
    pub wsum: Option<PathBuf>,
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

fn open(path: &Path) -> Result<(File, u64)> {
    let f = crate::atomic::open_input_file(path)?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    Ok((f, len))
}

/// Opens an input that may be age-encrypted (decrypted on the fly with
/// `unseal`); the length is the file's, an upper bound of the plaintext's.
fn open_input(path: &Path, unseal: Option<&Unseal>) -> Result<(Box<dyn Read>, u64)> {
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    Ok((open_maybe_sealed(path, unseal)?, len))
}

/// Reads only the header (and `sign` line) of a WTXT file.
pub fn read_header_file(path: &Path) -> Result<Header> {
    let (f, _) = open(path)?;
    read_head(&mut LineReader::new(BufReader::new(f))).map_err(|e| e.in_file(path))
}

/// The chain values `--prev` gives: next gen and merkle_prev. Nothing
/// chains from what it did not verify: the header must hold together
/// (`merkle_this` recomputed) and its signature satisfy `trust`; with an
/// HMAC key the whole file is verified, arrays included.
fn chain_from(prev: &Path, trust: &InputTrust) -> Result<(u64, Hash)> {
    let h = read_header_file(prev)?;
    if h.root != Root::Pending {
        let opts = trust.options();
        check_header(&h, &opts).map_err(|p| check_at(p.line, format!("--prev: {}", p.message)).in_file(prev))?;
        if trust.hmac_key.is_some() {
            let (f, _) = open(prev)?;
            let report = verify(BufReader::with_capacity(1 << 20, f), &opts, None).map_err(|e| e.in_file(prev))?;
            if let Some(p) = report.first_error() {
                return Err(check_at(p.line, format!("--prev: {}", p.message)).in_file(prev));
            }
        }
    }
    match h.root {
        Root::Final { merkle_this, .. } => {
            let gen = h
                .meta
                .gen
                .checked_add(1)
                .ok_or_else(|| Error::input(Default::default(), "gen overflows").in_file(prev))?;
            Ok((gen, merkle_this))
        }
        Root::Pending => {
            Err(check_at(4, "previous generation is a WTXT-S: finalize it first (wtxt finalize --rewrite)")
                .in_file(prev))
        }
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
    write_wtxt(arrays, &opts, out, o.wsum.as_deref(), progress)
}

/// Writes arrays as WTXT to `out` atomically, and the WSUM when streaming.
pub fn write_wtxt(
    arrays: &[Array],
    opts: &WriteOptions,
    out: &Path,
    wsum: Option<&Path>,
    progress: &Progress,
) -> Result<Written> {
    let mut f = AtomicFile::create(out)?;
    let written = {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, Writeback::new(f.file()));
        let r = write_snapshot(arrays, opts, &mut w, progress).map_err(|e| e.in_file(out))?;
        w.flush().map_err(|e| Error::io(out, e))?;
        r
    };
    let wsum_text = match (&written.wsum, wsum) {
        (Some(w), Some(_)) => Some(w.to_file()),
        _ => None,
    };
    f.commit()?;
    if let (Some(text), Some(p)) = (wsum_text, wsum) {
        write_file(p, text.as_bytes(), 0o644)?;
    }
    Ok(written)
}

/// Options of `wtxt verify` as files.
#[derive(Default)]
pub struct VerifyFiles {
    pub wsum: Option<PathBuf>,
    pub hmac_key: Option<HmacKey>,
    pub trusted: Option<TrustedKeys>,
    pub require_signature: bool,
    pub prev: Option<PathBuf>,
    /// With an HMAC key, accept arrays whose hmac is all zeros.
    pub allow_unauthenticated: bool,
    /// Decrypts an age-encrypted input.
    pub unseal: Option<Unseal>,
}

/// `wtxt verify`: the report, or an error when a file cannot be read at all.
pub fn verify_file(path: &Path, o: &VerifyFiles, progress: &Progress) -> Result<Report> {
    let wsum = match &o.wsum {
        Some(p) => {
            let b = std::fs::read(p).map_err(|e| Error::io(p, e))?;
            if b.len() > 4096 {
                return Err(Error::input(Default::default(), "expected a one-line WSUM file").in_file(p));
            }
            Some(Wsum::parse_file(&b).map_err(|m| check_at(1, m).in_file(p))?)
        }
        None => None,
    };
    let prev = o.prev.as_deref().map(read_header_file).transpose()?;
    let opts = VerifyOptions {
        hmac_key: o.hmac_key.as_ref(),
        trusted: o.trusted.as_ref(),
        require_signature: o.require_signature,
        wsum: wsum.as_ref(),
        prev: prev.as_ref(),
        allow_unauthenticated: o.allow_unauthenticated,
        refuse_untrusted: false,
    };
    let (f, len) = open_input(path, o.unseal.as_ref())?;
    progress.set_total(len);
    let reader = ProgressRead { inner: f, progress };
    verify(BufReader::with_capacity(1 << 20, reader), &opts, None).map_err(|e| e.in_file(path))
}

/// Counts bytes read for the progress bar.
struct ProgressRead<'a, R> {
    inner: R,
    progress: &'a Progress,
}

impl<R: Read> Read for ProgressRead<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.inc(n as u64);
        Ok(n)
    }
}

/// One array as `inspect` shows it.
#[derive(Serialize, Clone, Debug)]
pub struct ArrayInfo {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub bytes: u64,
    pub chunks: u64,
    pub rows_per_chunk: Option<u64>,
    pub sha256: String,
    pub hmac: bool,
    pub line: u64,
}

/// What `inspect` shows.
#[derive(Serialize, Clone, Debug)]
pub struct Inspection {
    pub schema: String,
    pub gen: u64,
    pub ts: String,
    pub build: String,
    pub host: String,
    pub cuda: String,
    pub cap: Vec<String>,
    pub streaming: bool,
    pub sha256_all: Option<String>,
    pub merkle_prev: Option<String>,
    pub merkle_this: Option<String>,
    pub fastxor: Option<String>,
    pub keyid: Option<String>,
    pub arrays: Vec<ArrayInfo>,
    pub audit: Vec<(String, String)>,
    pub total_bytes: u64,
}

struct InspectVisitor {
    arrays: Vec<ArrayInfo>,
    audit: Vec<(String, String)>,
    problems: Vec<(u64, String)>,
}

impl Visitor for InspectVisitor {
    fn array(&mut self, a: &ArrayStart) -> Result<()> {
        self.arrays.push(ArrayInfo {
            name: a.arr.name.clone(),
            dtype: a.arr.dtype.to_string(),
            shape: a.arr.shape.clone(),
            bytes: a.arr.bytes,
            chunks: a.layout.chunk_count(),
            rows_per_chunk: a.layout.idx.map(|i| i.rows_per_chunk),
            sha256: hex::encode(a.arr.sha256),
            hmac: !a.arr.hmac_is_zero(),
            line: a.line,
        });
        Ok(())
    }
    fn chunk(&mut self, _line: u64, _ch: &ChLine) {}
    fn data(&mut self, _buf: Vec<u8>) {}
    fn problem(&mut self, line: u64, message: String) {
        self.problems.push((line, message));
    }
    fn audit(&mut self, _line: u64, a: &Audit) {
        self.audit = a.pairs.clone();
    }
}

/// `wtxt inspect`: header and array table. The structure, parity and CRC
/// are checked on the way (digests are `verify`'s work).
pub fn inspect(path: &Path, unseal: Option<&Unseal>) -> Result<Inspection> {
    let (f, _) = open_input(path, unseal)?;
    let mut v = InspectVisitor { arrays: Vec::new(), audit: Vec::new(), problems: Vec::new() };
    let h = read(BufReader::with_capacity(1 << 20, f), &mut v).map_err(|e| e.in_file(path))?;
    if let Some((line, m)) = v.problems.first() {
        return Err(check_at(*line, m.clone()).in_file(path));
    }
    let (sha, prev, this, fx) = match &h.root {
        Root::Final { sha256_all, merkle_prev, merkle_this, fastxor } => (
            Some(hex::encode(sha256_all)),
            Some(hex::encode(merkle_prev)),
            Some(hex::encode(merkle_this)),
            Some(format!("{fastxor:016x}")),
        ),
        Root::Pending => (None, None, None, None),
    };
    Ok(Inspection {
        schema: h.meta.schema.clone(),
        gen: h.meta.gen,
        ts: h.meta.ts.as_str().to_string(),
        build: h.meta.build.clone(),
        host: h.meta.host.clone(),
        cuda: h.meta.cuda.clone(),
        cap: h.cap.items.clone(),
        streaming: h.root == Root::Pending,
        sha256_all: sha,
        merkle_prev: prev,
        merkle_this: this,
        fastxor: fx,
        keyid: h.sign.as_ref().map(|s| hex::encode(s.keyid)),
        total_bytes: v.arrays.iter().map(|a| a.bytes).sum(),
        arrays: v.arrays,
        audit: v.audit,
    })
}

/// `wtxt extract`: verifies the file under `opts`, then writes its arrays (or one).
pub fn extract(
    path: &Path,
    out: &Path,
    array: Option<&str>,
    opts: &VerifyOptions,
    unseal: Option<&Unseal>,
) -> Result<usize> {
    let (f, len) = open_input(path, unseal)?;
    let loaded = crate::wtxt::load(BufReader::with_capacity(1 << 20, f), len, opts).map_err(|e| e.in_file(path))?;
    let arrays: Vec<Array> = match array {
        Some(n) => {
            let a = loaded.arrays.into_iter().find(|a| a.name == n);
            vec![a.ok_or_else(|| Error::usage(format!("{}: no array named {n}", path.display())))?]
        }
        None => loaded.arrays,
    };
    write_arrays(&arrays, out)?;
    Ok(arrays.len())
}

/// Options of `wtxt recover`.
#[derive(Default)]
pub struct RecoverOptions {
    pub report: Option<PathBuf>,
    /// Where what survives of damaged arrays goes (.npz or .safetensors).
    pub partial: Option<PathBuf>,
    pub hmac_key: Option<HmacKey>,
    /// With an HMAC key, keep arrays whose hmac is all zeros (written unauthenticated).
    pub allow_unauthenticated: bool,
    pub sign_key: Option<SecretKey>,
}

/// Refuses two outputs of one command that name the same file: one would
/// overwrite the other.
pub fn distinct_outputs(paths: &[&Path]) -> Result<()> {
    let key = |p: &Path| {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        (std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()), p.file_name().map(|n| n.to_owned()))
    };
    for (i, a) in paths.iter().enumerate() {
        if let Some(b) = paths[..i].iter().find(|b| key(b) == key(a)) {
            return Err(Error::usage(format!(
                "{} and {} are the same file: give each output its own name",
                b.display(),
                a.display()
            )));
        }
    }
    Ok(())
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
    if o.sign_key.is_some() && o.hmac_key.is_none() {
        return Err(Error::usage(
            "recover --sign-key needs --hmac-key: only arrays authenticated by the HMAC key may be signed",
        ));
    }
    let (_, len) = open(path)?;
    let map = if len == 0 { None } else { Some(map_file(path)?) };
    let bytes = map.as_deref().map_or(&[][..], |m| &m[..]);
    let key = o.hmac_key.as_ref();
    let r = scan(bytes, key, o.allow_unauthenticated, o.partial.is_some());
    if o.sign_key.is_some() {
        if let Some(a) = r.arrays.iter().find(|a| !r.authenticated.contains(&a.name)) {
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
                .map(|a| (a.name.clone(), k.compute(&crate::crypto::digest::derive_salt(&gen, &a.name), a.bytes())))
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
        merkle_prev: r.merkle_prev.unwrap_or([0; 32]),
        sign_key: o.sign_key.as_ref(),
        audit: Some(audit),
        carried_hmacs,
        ..WriteOptions::new(meta, r.rows_per_chunk.unwrap_or(DEFAULT_ROWS_PER_CHUNK))
    };
    write_wtxt(&r.arrays, &opts, out, None, &Progress::hidden())?;
    if let Some(p) = &o.partial {
        write_arrays(&r.partials, p)?;
    }
    if let Some(p) = &o.report {
        let json = serde_json::to_string_pretty(&r.report).expect("report serializes");
        write_file(p, format!("{json}\n").as_bytes(), 0o644)?;
    }
    Ok(r.report)
}

/// Options of `wtxt finalize`.
#[derive(Default)]
pub struct FinalizeOptions {
    pub sign_key: Option<SecretKey>,
    pub prev: Option<PathBuf>,
    pub rewrite: Option<PathBuf>,
    /// What the WTXT-S (HMACs) and `prev` (signature) must prove.
    pub trust: InputTrust,
}

/// `wtxt finalize`: computes the WSUM of a WTXT-S, optionally rewriting it
/// as a plain (signed) WTXT whose body is byte-identical.
pub fn finalize(path: &Path, wsum_out: &Path, o: &FinalizeOptions) -> Result<Wsum> {
    let (sign_key, prev, rewrite) = (o.sign_key.as_ref(), o.prev.as_deref(), o.rewrite.as_deref());
    let mut outs = vec![wsum_out];
    outs.extend(rewrite);
    distinct_outputs(&outs)?;
    let (f, _) = open(path)?;
    // A WTXT-S carries no signature; its HMACs are checked when a key is given.
    let opts = VerifyOptions {
        hmac_key: o.trust.hmac_key.as_ref(),
        allow_unauthenticated: o.trust.allow_unauthenticated,
        ..Default::default()
    };
    let report = verify(BufReader::with_capacity(1 << 20, f), &opts, None).map_err(|e| e.in_file(path))?;
    let header = report.header.clone().ok_or_else(|| check_at(1, "not a WTXT").in_file(path))?;
    if header.root != Root::Pending {
        return Err(check_at(4, "expected a WTXT-S (root_pending); this file is already final").in_file(path));
    }
    // A WTXT-S verified alone ends with RootPending; anything else failed.
    if let Some(p) = report.errors.iter().find(|p| p.kind != ProblemKind::RootPending) {
        return Err(check_at(p.line, p.message.clone()).in_file(path));
    }
    let sha_all: Hash = report.sha256_all.ok_or_else(|| check_at(4, "no root computed").in_file(path))?;
    let merkle_prev = match prev {
        Some(p) => {
            // chain_from gives the next gen: this file's must be at least that.
            let (next, m) = chain_from(p, &o.trust)?;
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
    let gen = header.meta.gen_str();
    let mt = merkle_this(&merkle_prev, &sha_all, header.meta.ts.as_str(), &gen, &header.meta.build);
    let mut wsum = Wsum { sha256_all: sha_all, merkle_prev, merkle_this: mt, sign: None };
    if let Some(k) = sign_key {
        wsum.sign = Some(SignLine { signature: k.sign(wsum.signed_part().as_bytes()), keyid: k.public().keyid() });
    }
    if let Some(out) = rewrite {
        let root = Root::Final {
            sha256_all: sha_all,
            merkle_prev,
            merkle_this: mt,
            fastxor: report.fastxor_value().ok_or_else(|| check_at(4, "no fastxor computed").in_file(path))?,
        };
        let mut text = header_text(&header.meta, &header.cap, &root, None);
        if let Some(k) = sign_key {
            SignLine { signature: k.sign(text.as_bytes()), keyid: k.public().keyid() }.write(&mut text);
            text.push('\n');
        }
        let mut src = crate::atomic::open_input_file(path)?;
        src.seek(SeekFrom::Start(header.signed_bytes.len() as u64)).map_err(|e| Error::io(path, e))?;
        let mut af = AtomicFile::create(out)?;
        {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, af.file());
            w.write_all(text.as_bytes()).map_err(|e| Error::io(out, e))?;
            std::io::copy(&mut src, &mut w).map_err(|e| Error::io(out, e))?;
            w.flush().map_err(|e| Error::io(out, e))?;
        }
        af.commit()?;
    }
    write_file(wsum_out, wsum.to_file().as_bytes(), 0o644)?;
    Ok(wsum)
}

/// `wtxt keygen`: a new Ed25519 key (PKCS#8 PEM, mode 0600) and its `.pub`.
pub fn keygen(out: &Path) -> Result<String> {
    let k = SecretKey::generate()?;
    let mut pubpath = out.as_os_str().to_owned();
    pubpath.push(".pub");
    write_file(out, k.to_pkcs8_pem().as_bytes(), 0o600)?;
    write_file(Path::new(&pubpath), k.public().to_spki_pem().as_bytes(), 0o644)?;
    Ok(hex::encode(k.public().keyid()))
}

/// `wtxt delta create`: the extended DELTA v2 from `base` to `target`. The
/// target is verified strictly first; the base is read for its chunk lines.
pub fn delta_create(
    base: &Path,
    target: &Path,
    out: &Path,
    unseal: Option<Unseal>,
) -> Result<crate::wtxt::delta::DeltaStats> {
    let vf = VerifyFiles { unseal, ..Default::default() };
    let report = verify_file(target, &vf, &Progress::hidden())?;
    if let Some(p) = report.first_error() {
        return Err(check_at(p.line, p.message.clone()).in_file(target));
    }
    let (b, _) = open_input(base, vf.unseal.as_ref())?;
    let (t, _) = open_input(target, vf.unseal.as_ref())?;
    let mut f = AtomicFile::create(out)?;
    let stats = {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f.file());
        let r = crate::wtxt::delta::create(
            (BufReader::with_capacity(1 << 20, b), base),
            (BufReader::with_capacity(1 << 20, t), target),
            &mut w,
        )
        .map_err(|e| e.in_file(out))?;
        w.flush().map_err(|e| Error::io(out, e))?;
        r
    };
    f.commit()?;
    Ok(stats)
}

/// Options of `wtxt delta apply` (gen, ts, build and keys serve the minimal form).
#[derive(Default)]
pub struct DeltaApplyOptions {
    pub gen: Option<u64>,
    pub ts: Option<String>,
    pub build: Option<String>,
    pub hmac_key: Option<HmacKey>,
    /// With an HMAC key, accept arrays whose hmac is all zeros.
    pub allow_unauthenticated: bool,
    pub sign_key: Option<SecretKey>,
    /// When given, the rebuilt target must carry a valid signature by one of
    /// these keys; a minimal-form delta, which carries none, is refused.
    pub trusted: Option<TrustedKeys>,
    /// Decrypts age-encrypted inputs (base and delta).
    pub unseal: Option<Unseal>,
}

/// `wtxt delta apply`: rebuilds the target from `base` and the delta. The
/// result is verified before it is renamed into place; the base is only read.
pub fn delta_apply(base: &Path, delta: &Path, out: &Path, o: &DeltaApplyOptions) -> Result<Report> {
    let (d, _) = open_input(delta, o.unseal.as_ref())?;
    let parsed = crate::wtxt::delta::parse(d).map_err(|e| e.in_file(delta))?;
    if parsed.is_extended() {
        if o.gen.is_some() || o.ts.is_some() || o.build.is_some() || o.sign_key.is_some() {
            return Err(Error::usage(
                "--gen, --ts, --build and --sign-key serve the minimal form; this delta carries its target header",
            ));
        }
        let (b, _) = open_input(base, o.unseal.as_ref())?;
        let mut f = AtomicFile::create(out)?;
        let vopts = VerifyOptions {
            hmac_key: o.hmac_key.as_ref(),
            trusted: o.trusted.as_ref(),
            require_signature: o.trusted.is_some(),
            allow_unauthenticated: o.allow_unauthenticated,
            ..Default::default()
        };
        // Write the result and prove it in the same pass: the merge feeds
        // the file and, through a pipe, the strict verifier on other threads.
        let (pw, pr) = crate::pipe::pipe();
        let (merged, report) = std::thread::scope(|s| {
            let checker = s.spawn(|| verify(pr, &vopts, None));
            let mut tee = crate::pipe::Tee(std::io::BufWriter::with_capacity(1 << 20, Writeback::new(f.file())), pw);
            let merged = crate::wtxt::delta::apply_extended(BufReader::with_capacity(1 << 20, b), &parsed, &mut tee)
                .map_err(|e| e.in_files(base, out))
                .and_then(|()| tee.0.flush().map_err(|e| Error::io(out, e)));
            let crate::pipe::Tee(w, pw) = tee;
            drop(w);
            pw.close();
            (merged, checker.join().expect("verifier thread"))
        });
        merged?;
        let report = report?;
        if let Some(p) = report.first_error() {
            return Err(Error::check(
                Default::default(),
                format!(
                    "the rebuilt target fails verification (line {}: {}); base or delta is damaged",
                    p.line, p.message
                ),
            )
            .in_file(delta));
        }
        if report.sha256_all != parsed.head.target_sha256_all {
            return Err(Error::check(
                Default::default(),
                "the rebuilt target's sha256_all is not the delta's target_sha256_all",
            )
            .in_file(delta));
        }
        f.commit()?;
        return Ok(report);
    }
    apply_minimal(base, delta, &parsed, out, o)
}

fn apply_minimal(
    base: &Path,
    delta: &Path,
    d: &crate::wtxt::delta::Delta,
    out: &Path,
    o: &DeltaApplyOptions,
) -> Result<Report> {
    if o.trusted.is_some() {
        return Err(Error::check(
            Position::Line(1),
            "a minimal-form delta carries no signature, so no trusted key vouches for its chunks; \
             apply an extended delta (wtxt delta create) to require one",
        )
        .in_file(delta));
    }
    // The base is verified under the same rules as any input we sign or HMAC.
    let trust = InputTrust::new(o.hmac_key.as_ref(), None, o.sign_key.as_ref(), o.allow_unauthenticated);
    let (b, len) = open_input(base, o.unseal.as_ref())?;
    let loaded =
        crate::wtxt::load(BufReader::with_capacity(1 << 20, b), len, &trust.options()).map_err(|e| e.in_file(base))?;
    let Root::Final { sha256_all, merkle_this: base_this, .. } = loaded.header.root else {
        return Err(check_at(4, "the base is a WTXT-S: finalize it first").in_file(base));
    };
    if sha256_all != d.head.base_sha256_all {
        return Err(check_at(1, "this delta is for another base: base_sha256_all differs from the base's sha256_all")
            .in_file(delta));
    }
    let rows = loaded.rows_per_chunk.unwrap_or(DEFAULT_ROWS_PER_CHUNK);
    let mut arrays = loaded.arrays;
    for (name, chunks) in crate::wtxt::delta::minimal_changes(d).map_err(|e| e.in_file(delta))? {
        let a = arrays.iter_mut().find(|a| a.name == name).ok_or_else(|| {
            Error::check(Default::default(), format!("the delta changes array {name}, which the base lacks"))
                .in_file(delta)
        })?;
        let layout = crate::wtxt::layout::Layout::new(a.dtype, &a.shape, rows)
            .map_err(|m| Error::check(Default::default(), m))?;
        let mut bytes = a.bytes().to_vec();
        for (c, raw) in chunks {
            if c.ch.ix >= layout.chunk_count() || layout.chunk_range(c.ch.ix) != (c.ch.off, c.ch.len) {
                return Err(check_at(
                    c.line,
                    format!(
                        "chunk ix={} off={} len={} does not fit array {name} of the base",
                        c.ch.ix, c.ch.off, c.ch.len
                    ),
                )
                .in_file(delta));
            }
            bytes[c.ch.off as usize..(c.ch.off + c.ch.len) as usize].copy_from_slice(&raw);
        }
        a.data = bytes.into();
    }
    let m = &loaded.header.meta;
    let gen = match o.gen {
        Some(g) => g,
        None => m.gen.checked_add(1).ok_or_else(|| Error::usage("gen overflows"))?,
    };
    let meta = Meta { gen, ts: Meta::new(gen, o.ts.as_deref())?.ts, ..m.clone() }.with_tokens(
        None,
        o.build.as_deref(),
        None,
        None,
    )?;
    let opts = WriteOptions {
        merkle_prev: base_this,
        hmac_key: o.hmac_key.as_ref(),
        sign_key: o.sign_key.as_ref(),
        ..WriteOptions::new(meta, rows)
    };
    write_wtxt(&arrays, &opts, out, None, &Progress::hidden())?;
    verify_file(out, &VerifyFiles { hmac_key: o.hmac_key.clone(), ..Default::default() }, &Progress::hidden())
}

/// The text formats `encrypt` accepts: WTXT, WTXT-DELTA and WSUM.
fn is_wtxt_text(head: &[u8]) -> bool {
    [&b"WTXT 1\n"[..], b"WTXT-DELTA 2 ", b"WSUM 1 "].iter().any(|m| head.starts_with(m))
}

/// `wtxt encrypt`: wraps a WTXT (or delta, or WSUM) in age ASCII armor.
pub fn encrypt(input: &Path, out: &Path, seal: Seal) -> Result<()> {
    let (f, _) = open(input)?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let head = std::io::BufRead::fill_buf(&mut r).map_err(|e| Error::io(input, e))?;
    if !is_wtxt_text(head) {
        return Err(
            Error::input(crate::error::Position::Line(1), "expected a WTXT, WTXT-DELTA or WSUM file").in_file(input)
        );
    }
    let mut af = AtomicFile::create(out)?;
    {
        let w = std::io::BufWriter::new(af.file());
        let mut w = crate::crypto::armor::encrypt(r, seal, w).map_err(|e| e.in_files(input, out))?;
        w.flush().map_err(|e| Error::io(out, e))?;
    }
    af.commit()
}

/// `wtxt decrypt`: the plaintext of an age file, written atomically.
pub fn decrypt(input: &Path, out: &Path, unseal: &Unseal) -> Result<()> {
    let (f, _) = open(input)?;
    let mut plain =
        crate::crypto::armor::decrypt(BufReader::with_capacity(1 << 20, f), unseal).map_err(|e| e.in_file(input))?;
    let mut af = AtomicFile::create(out)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, af.file());
        std::io::copy(&mut plain, &mut w).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => {
                Error::check(Default::default(), format!("age: the ciphertext is damaged: {e}")).in_file(input)
            }
            _ => Error::io(out, e),
        })?;
        w.flush().map_err(|e| Error::io(out, e))?;
    }
    af.commit()
}

/// `wtxt log`: the chain of each path (or of every `*.wtxt` in HEAD).
/// Trusted keys default to the file named by `git config wtxt.trustedKeys`.
pub fn log(dir: &Path, path: Option<&Path>, trusted: Option<TrustedKeys>) -> Result<Vec<crate::git::history::Chain>> {
    use crate::git::history;
    let (repo, rel) = history::open(dir, path)?;
    let trusted = match trusted {
        Some(t) => Some(t),
        None => crate::git::configured_trusted_keys(&repo)?,
    };
    let paths = match rel {
        Some(p) => vec![p],
        None => history::wtxt_paths(&repo)?,
    };
    let opts = history::LogOptions { trusted };
    paths.iter().map(|p| history::chain(&repo, p, &opts)).collect()
}

/// `wtxt diff`: the semantic difference of two WTXT files (either may be age-encrypted).
pub fn diff(old: &Path, new: &Path, unseal: Option<&Unseal>) -> Result<crate::git::diff::FileDiff> {
    let (a, _) = open_input(old, unseal)?;
    let (b, _) = open_input(new, unseal)?;
    crate::git::diff::diff(a, b, crate::git::diff::Names { old, new })
}

/// Options of `wtxt merge`.
pub struct MergeOptions {
    pub strategy: crate::git::merge::Strategy,
    pub decisions: crate::git::merge::Decisions,
    /// Timestamp of the result; default `SOURCE_DATE_EPOCH`, else the later
    /// of the two sides (so a merge is deterministic).
    pub ts: Option<String>,
    /// What the three inputs must prove (HMAC key, trusted keys, signer's key).
    pub trust: InputTrust,
    pub sign_key: Option<SecretKey>,
}

/// What `merge` did.
pub struct MergeOutcome {
    pub conflicts: Vec<crate::git::merge::Conflict>,
    /// Written only when every conflict was settled.
    pub written: Option<Written>,
    pub gen: u64,
}

fn load_file(path: &Path, opts: &VerifyOptions) -> Result<Option<crate::wtxt::Loaded>> {
    let (f, len) = open(path)?;
    if len == 0 {
        return Ok(None); // Git passes an empty base when there is no common ancestor.
    }
    crate::wtxt::load(BufReader::with_capacity(1 << 20, f), len, opts).map(Some).map_err(|e| e.in_file(path))
}

/// `wtxt merge`: three-way at chunk granularity. The result is a canonical
/// WTXT with gen = max + 1 and merkle_prev = ours' merkle_this; nothing is
/// written while a conflict is unsettled.
pub fn merge(base: &Path, ours: &Path, theirs: &Path, out: &Path, o: &MergeOptions) -> Result<MergeOutcome> {
    // Nothing is signed or HMACed that was not verified first: the three
    // inputs must satisfy the trust policy.
    let vopts = o.trust.options();
    let b = load_file(base, &vopts)?;
    let ours_l =
        load_file(ours, &vopts)?.ok_or_else(|| Error::input(Default::default(), "empty file").in_file(ours))?;
    let theirs_l =
        load_file(theirs, &vopts)?.ok_or_else(|| Error::input(Default::default(), "empty file").in_file(theirs))?;
    let (Root::Final { merkle_this: ours_this, sha256_all: ours_all, .. }, Root::Final { sha256_all: theirs_all, .. }) =
        (&ours_l.header.root, &theirs_l.header.root)
    else {
        return Err(Error::check(Default::default(), "cannot merge a WTXT-S: finalize it first"));
    };
    let rows = ours_l.rows_per_chunk.or(theirs_l.rows_per_chunk).unwrap_or(DEFAULT_ROWS_PER_CHUNK);
    let base_arrays = b.as_ref().map_or(&[][..], |l| &l.arrays[..]);
    let merged =
        crate::git::merge::merge(base_arrays, &ours_l.arrays, &theirs_l.arrays, rows, o.strategy, &o.decisions)?;
    let (om, tm) = (&ours_l.header.meta, &theirs_l.header.meta);
    let gen = om.gen.max(tm.gen).checked_add(1).ok_or_else(|| Error::usage("gen overflows"))?;
    if merged.unsettled().next().is_some() {
        return Ok(MergeOutcome { conflicts: merged.conflicts, written: None, gen });
    }
    let ts = match (&o.ts, std::env::var_os("SOURCE_DATE_EPOCH")) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(_)) => None,
        (None, None) => Some(om.ts.as_str().max(tm.ts.as_str()).to_string()),
    };
    let meta = Meta { gen, ts: Meta::new(gen, ts.as_deref())?.ts, ..om.clone() };
    let settled = merged.conflicts.len();
    let audit = Audit {
        pairs: vec![
            ("merge_ours".into(), hex::encode(&ours_all[..8])),
            ("merge_theirs".into(), hex::encode(&theirs_all[..8])),
            ("settled_conflicts".into(), settled.to_string()),
        ],
    };
    let opts = WriteOptions {
        merkle_prev: *ours_this,
        hmac_key: o.trust.hmac_key.as_ref(),
        sign_key: o.sign_key.as_ref(),
        audit: Some(audit),
        ..WriteOptions::new(meta, rows)
    };
    let written = write_wtxt(&merged.arrays, &opts, out, None, &Progress::hidden())?;
    Ok(MergeOutcome { conflicts: merged.conflicts, written: Some(written), gen })
}

/// Target formats of `wtxt convert`.
#[derive(Clone, Copy)]
pub enum ConvertTo {
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
    let arrays = crate::convert::load_lossless(input, &trust.options(), notes)?;
    match to {
        ConvertTo::Wtxt => snapshot_arrays(&arrays, out, o, &Progress::hidden()).map(|_| ()),
        ConvertTo::Container(fmt) => {
            let (arrays, dropped) = crate::convert::container::foreign_metadata(arrays, fmt);
            if !dropped.is_empty() {
                notes.push(format!("left out metadata of other containers: {}", dropped.join(", ")));
            }
            write_arrays_as(&arrays, out, fmt)
        }
    }
}
