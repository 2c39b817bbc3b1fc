//! Whole-file operations, one per command: the CLI parses flags into these
//! option structs and calls them; everything else lives here and below.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::atomic::{write_file, AtomicFile, Writeback};
use crate::convert::{load_inputs, map_file, write_arrays};
use crate::crypto::armor::{open_maybe_sealed, Seal, Unseal};
use crate::crypto::digest::{merkle_this, Hash};
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::{SecretKey, TrustedKeys};
use crate::error::{check_at, Error, Result};
use crate::model::Array;
use crate::progress::Progress;
use crate::wtxt::layout::DEFAULT_ROWS_PER_CHUNK;
use crate::wtxt::read::{read, read_header, ArrayStart, Header, LineReader, Visitor};
use crate::wtxt::recover::{recover as scan, RecoveryReport};
use crate::wtxt::syntax::{check_token, Audit, ChLine, Meta, Root, SignLine, Timestamp, Wsum};
use crate::wtxt::verify::{verify, Report, VerifyOptions};
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
    pub audit: Option<String>,
    /// Write a WTXT-S and its WSUM here.
    pub wsum: Option<PathBuf>,
}

fn open(path: &Path) -> Result<(File, u64)> {
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    Ok((f, len))
}

/// Opens an input that may be age-encrypted (decrypted on the fly with
/// `unseal`); the length is the file's, an upper bound of the plaintext's.
fn open_input(path: &Path, unseal: Option<&Unseal>) -> Result<(Box<dyn Read>, u64)> {
    let len = std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
    Ok((open_maybe_sealed(path, unseal)?, len))
}

/// Reads only the header of a WTXT file (for `--prev`).
pub fn read_header_file(path: &Path) -> Result<Header> {
    let (f, _) = open(path)?;
    read_header(&mut LineReader::new(BufReader::new(f))).map_err(|e| e.in_file(path))
}

/// The chain values `--prev` gives: next gen and merkle_prev.
fn chain_from(prev: &Path) -> Result<(u64, Hash)> {
    let h = read_header_file(prev)?;
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

fn token_or(v: &Option<String>, default: &str, what: &str) -> Result<String> {
    let v = v.clone().unwrap_or_else(|| default.to_string());
    check_token(&v, what).map_err(|m| Error::usage(format!("--{what}: {m}")))?;
    Ok(v)
}

/// Builds the meta line's values from options (gen, ts and tokens checked).
pub fn make_meta(
    gen: u64,
    ts: Option<&str>,
    schema: &Option<String>,
    build: &Option<String>,
    host: &Option<String>,
    cuda: &Option<String>,
) -> Result<Meta> {
    Ok(Meta {
        schema: token_or(schema, "weights/v1", "schema")?,
        gen,
        ts: Timestamp::resolve(ts).map_err(|m| Error::usage(format!("ts: {m}")))?,
        build: token_or(build, "none", "build")?,
        host: token_or(host, "cpu", "host")?,
        cuda: token_or(cuda, "off", "cuda")?,
    })
}

/// Parses `--audit 'k=v ...'`.
pub fn parse_audit(s: &str) -> Result<Audit> {
    if s.len() > crate::limits::MAX_AUDIT {
        return Err(Error::usage(format!("--audit: longer than {} bytes", crate::limits::MAX_AUDIT)));
    }
    Audit::parse_pairs(s.as_bytes()).map_err(|m| Error::usage(format!("--audit: {m}")))
}

/// `wtxt snapshot`: reads inputs, writes a canonical WTXT (and WSUM) atomically.
pub fn snapshot(inputs: &[PathBuf], out: &Path, o: &SnapshotOptions, progress: &Progress) -> Result<Written> {
    let verify = VerifyOptions { hmac_key: o.hmac_key.as_ref(), ..Default::default() };
    let arrays = load_inputs(inputs, &verify)?;
    snapshot_arrays(&arrays, out, o, progress)
}

/// Writes `arrays` (sorted, unique) as `snapshot` would, with its options.
pub fn snapshot_arrays(arrays: &[Array], out: &Path, o: &SnapshotOptions, progress: &Progress) -> Result<Written> {
    let (gen, merkle_prev) = match (&o.prev, o.gen) {
        (Some(_), Some(_)) => return Err(Error::usage("give --gen or --prev, not both")),
        (Some(p), None) => chain_from(p)?,
        (None, g) => (g.unwrap_or(0), [0; 32]),
    };
    let meta = make_meta(gen, o.ts.as_deref(), &o.schema, &o.build, &o.host, &o.cuda)?;
    let audit = o.audit.as_deref().map(parse_audit).transpose()?;
    let rows = o.rows_per_chunk.unwrap_or(DEFAULT_ROWS_PER_CHUNK);
    if rows == 0 {
        return Err(Error::usage("--rows-per-chunk: expected at least 1"));
    }
    let opts = WriteOptions {
        meta,
        merkle_prev,
        rows_per_chunk: rows,
        hmac_key: o.hmac_key.as_ref(),
        sign_key: o.sign_key.as_ref(),
        audit,
        streaming: o.wsum.is_some(),
        carried_hmacs: Vec::new(),
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

/// `wtxt extract`: verifies the file, then writes its arrays (or one).
pub fn extract(
    path: &Path,
    out: &Path,
    array: Option<&str>,
    key: Option<&HmacKey>,
    unseal: Option<&Unseal>,
) -> Result<usize> {
    let (f, len) = open_input(path, unseal)?;
    let opts = VerifyOptions { hmac_key: key, ..Default::default() };
    let loaded = crate::wtxt::load(BufReader::with_capacity(1 << 20, f), len, &opts).map_err(|e| e.in_file(path))?;
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
    /// Write only whole arrays (no `NAME__partial` / `NAME__intact`).
    pub whole_only: bool,
    pub hmac_key: Option<HmacKey>,
    pub sign_key: Option<SecretKey>,
}

/// `wtxt recover`: keeps every array that is still whole and reports the rest.
pub fn recover(path: &Path, out: &Path, o: &RecoverOptions) -> Result<RecoveryReport> {
    let (_, len) = open(path)?;
    let map = if len == 0 { None } else { Some(map_file(path)?) };
    let r = scan(map.as_deref().map_or(&[][..], |m| &m[..]), o.hmac_key.as_ref(), !o.whole_only);
    let meta = match r.meta.clone() {
        Some(m) => m,
        None => make_meta(0, None, &None, &None, &None, &None)?,
    };
    let recovered = r.report.recovered_arrays;
    let lost = r.report.lost_arrays;
    let audit = Audit {
        pairs: vec![("recovered_arrays".into(), recovered.to_string()), ("lost_arrays".into(), lost.to_string())],
    };
    let opts = WriteOptions {
        meta,
        merkle_prev: r.merkle_prev.unwrap_or([0; 32]),
        rows_per_chunk: r.rows_per_chunk.unwrap_or(DEFAULT_ROWS_PER_CHUNK),
        hmac_key: o.hmac_key.as_ref(),
        sign_key: o.sign_key.as_ref(),
        audit: Some(audit),
        streaming: false,
        carried_hmacs: r.carried_hmacs.clone(),
    };
    write_wtxt(&r.arrays, &opts, out, None, &Progress::hidden())?;
    if let Some(p) = &o.report {
        let json = serde_json::to_string_pretty(&r.report).expect("report serializes");
        write_file(p, format!("{json}\n").as_bytes(), 0o644)?;
    }
    Ok(r.report)
}

/// `wtxt finalize`: computes the WSUM of a WTXT-S, optionally rewriting it
/// as a plain (signed) WTXT whose body is byte-identical.
pub fn finalize(
    path: &Path,
    wsum_out: &Path,
    sign_key: Option<&SecretKey>,
    prev: Option<&Path>,
    rewrite: Option<&Path>,
) -> Result<Wsum> {
    let (f, _) = open(path)?;
    let report =
        verify(BufReader::with_capacity(1 << 20, f), &VerifyOptions::default(), None).map_err(|e| e.in_file(path))?;
    let header = report.header.clone().ok_or_else(|| check_at(1, "not a WTXT").in_file(path))?;
    if header.root != Root::Pending {
        return Err(check_at(4, "expected a WTXT-S (root_pending); this file is already final").in_file(path));
    }
    if let Some(p) = report.errors.iter().find(|p| p.message != "root pending: give --wsum") {
        return Err(check_at(p.line, p.message.clone()).in_file(path));
    }
    let sha_all: Hash = report
        .sha256_all
        .as_deref()
        .and_then(|s| hex::decode(s).ok())
        .and_then(|v| v.try_into().ok())
        .ok_or_else(|| check_at(4, "no root computed").in_file(path))?;
    let merkle_prev = match prev {
        Some(p) => {
            // chain_from gives the next gen: this file's must be at least that.
            let (next, m) = chain_from(p)?;
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
        let root = Root::Final { sha256_all: sha_all, merkle_prev, merkle_this: mt, fastxor: fastxor_of(&report)? };
        let mut text = header_text(&header.meta, &header.cap, &root, None);
        if let Some(k) = sign_key {
            SignLine { signature: k.sign(text.as_bytes()), keyid: k.public().keyid() }.write(&mut text);
            text.push('\n');
        }
        let mut src = File::open(path).map_err(|e| Error::io(path, e))?;
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

fn fastxor_of(r: &Report) -> Result<u64> {
    r.fastxor.as_deref().and_then(|s| u64::from_str_radix(s, 16).ok()).ok_or_else(|| check_at(4, "no fastxor computed"))
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
        )?;
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
    pub sign_key: Option<SecretKey>,
    /// When given, the rebuilt target's signature must be valid under these keys.
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
            ..Default::default()
        };
        // Write the result and prove it in the same pass: the merge feeds
        // the file and, through a pipe, the strict verifier on other threads.
        let (pw, pr) = crate::pipe::pipe();
        let (merged, report) = std::thread::scope(|s| {
            let checker = s.spawn(|| verify(pr, &vopts, None));
            let mut tee = crate::pipe::Tee(std::io::BufWriter::with_capacity(1 << 20, Writeback::new(f.file())), pw);
            let merged = crate::wtxt::delta::apply_extended(BufReader::with_capacity(1 << 20, b), &parsed, &mut tee)
                .map_err(|e| e.in_file(base))
                .and_then(|()| tee.0.flush().map_err(|e| Error::io(out, e)));
            let crate::pipe::Tee(w, pw) = tee;
            drop(w);
            pw.close();
            (merged, checker.join().expect("verifier thread"))
        });
        merged?;
        let report = report?;
        let want = parsed.head.target_sha256_all.map(hex::encode);
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
        if report.sha256_all != want {
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
    let (b, len) = open_input(base, o.unseal.as_ref())?;
    let loaded = crate::wtxt::load(
        BufReader::with_capacity(1 << 20, b),
        len,
        &VerifyOptions { hmac_key: o.hmac_key.as_ref(), ..Default::default() },
    )
    .map_err(|e| e.in_file(base))?;
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
    let meta = make_meta(
        gen,
        o.ts.as_deref(),
        &Some(m.schema.clone()),
        &o.build.clone().or(Some(m.build.clone())),
        &Some(m.host.clone()),
        &Some(m.cuda.clone()),
    )?;
    let opts = WriteOptions {
        meta,
        merkle_prev: base_this,
        rows_per_chunk: rows,
        hmac_key: o.hmac_key.as_ref(),
        sign_key: o.sign_key.as_ref(),
        audit: None,
        streaming: false,
        carried_hmacs: Vec::new(),
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
        let mut w = crate::crypto::armor::encrypt(r, seal, w)?;
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
        None => match repo.config().and_then(|c| c.get_path("wtxt.trustedKeys")) {
            Ok(p) => {
                let p = if p.is_absolute() { p } else { repo.workdir().unwrap_or(Path::new(".")).join(p) };
                Some(TrustedKeys::from_file(&p)?)
            }
            Err(_) => None,
        },
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
    pub hmac_key: Option<HmacKey>,
    pub sign_key: Option<SecretKey>,
}

/// What `merge` did.
pub struct MergeOutcome {
    pub conflicts: Vec<crate::git::merge::Conflict>,
    /// Written only when every conflict was settled.
    pub written: Option<Written>,
    pub gen: u64,
}

fn load_file(path: &Path, key: Option<&HmacKey>) -> Result<Option<crate::wtxt::Loaded>> {
    let (f, len) = open(path)?;
    if len == 0 {
        return Ok(None); // Git passes an empty base when there is no common ancestor.
    }
    crate::wtxt::load(BufReader::with_capacity(1 << 20, f), len, &VerifyOptions { hmac_key: key, ..Default::default() })
        .map(Some)
        .map_err(|e| e.in_file(path))
}

/// `wtxt merge`: three-way at chunk granularity. The result is a canonical
/// WTXT with gen = max + 1 and merkle_prev = ours' merkle_this; nothing is
/// written while a conflict is unsettled.
pub fn merge(base: &Path, ours: &Path, theirs: &Path, out: &Path, o: &MergeOptions) -> Result<MergeOutcome> {
    let key = o.hmac_key.as_ref();
    let b = load_file(base, key)?;
    let ours_l = load_file(ours, key)?.ok_or_else(|| Error::input(Default::default(), "empty file").in_file(ours))?;
    let theirs_l =
        load_file(theirs, key)?.ok_or_else(|| Error::input(Default::default(), "empty file").in_file(theirs))?;
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
    let meta = make_meta(
        gen,
        ts.as_deref(),
        &Some(om.schema.clone()),
        &Some(om.build.clone()),
        &Some(om.host.clone()),
        &Some(om.cuda.clone()),
    )?;
    let settled = merged.conflicts.len();
    let audit = Audit {
        pairs: vec![
            ("merge_ours".into(), hex::encode(&ours_all[..8])),
            ("merge_theirs".into(), hex::encode(&theirs_all[..8])),
            ("settled_conflicts".into(), settled.to_string()),
        ],
    };
    let opts = WriteOptions {
        meta,
        merkle_prev: *ours_this,
        rows_per_chunk: rows,
        hmac_key: key,
        sign_key: o.sign_key.as_ref(),
        audit: Some(audit),
        streaming: false,
        carried_hmacs: Vec::new(),
    };
    let written = write_wtxt(&merged.arrays, &opts, out, None, &Progress::hidden())?;
    Ok(MergeOutcome { conflicts: merged.conflicts, written: Some(written), gen })
}

/// Target formats of `wtxt convert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvertTo {
    Wtxt,
    /// A binary container (npy is not offered: it holds one array).
    Container(crate::convert::OutFormat),
}

/// `wtxt convert`: any readable input to WTXT (as `snapshot` with its
/// options, plus the container's metadata arrays, so converting back gives
/// the same file) or to another container.
pub fn convert(input: &Path, out: &Path, to: ConvertTo, o: &SnapshotOptions) -> Result<()> {
    use crate::convert::write_arrays_as;
    let verify = VerifyOptions { hmac_key: o.hmac_key.as_ref(), ..Default::default() };
    let arrays = crate::convert::load_lossless(input, &verify)?;
    match to {
        ConvertTo::Wtxt => snapshot_arrays(&arrays, out, o, &Progress::hidden()).map(|_| ()),
        ConvertTo::Container(fmt) => {
            let (arrays, dropped) = crate::convert::foreign_metadata(arrays, fmt);
            if !dropped.is_empty() {
                eprintln!("wtxt: note: left out metadata of other containers: {}", dropped.join(", "));
            }
            write_arrays_as(&arrays, out, fmt)
        }
    }
}
