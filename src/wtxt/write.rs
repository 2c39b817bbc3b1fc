//! The canonical writer: the only code that emits WTXT.
//!
//! Every header field has a fixed width once the meta values are known, so the
//! writer emits the body first at the header's offset and fills in the header
//! (root and signature) last. Work runs in two parallel phases:
//! 1. per-array SHA-256 (and HMAC) and per-chunk SHA-256/CRC32C, spread over
//!    all cores;
//! 2. `sha256_all` and `fastxor` on one thread while another base64-encodes
//!    and writes the body.
//!
//! Inputs are only read (often a memory map), never copied whole.

use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::crypto::digest::{derive_salt, merkle_this, FastXor, Hash};
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::SecretKey;
use crate::error::{Error, Result};
use crate::model::Array;
use crate::progress::Progress;
use crate::wtxt::layout::{encode_lines, Layout};
use crate::wtxt::syntax::{lines_for, ArrLine, Audit, Cap, ChLine, Meta, Root, SignLine, Wsum, END, MAGIC};

/// What the writer needs besides the arrays.
pub struct WriteOptions<'a> {
    /// The `meta` line's values.
    pub meta: Meta,
    /// The previous generation's `merkle_this` (zeros for the first).
    pub merkle_prev: Hash,
    /// Rows per chunk for arrays of rank >= 2.
    pub rows_per_chunk: u64,
    /// Key for per-array HMACs; zeros are written without one.
    pub hmac_key: Option<&'a HmacKey>,
    /// Key for the `sign` line (or the WSUM's signature when streaming).
    pub sign_key: Option<&'a SecretKey>,
    /// The optional `audit` line.
    pub audit: Option<Audit>,
    /// Write a WTXT-S (`root_pending`, no `sign`) and return its WSUM.
    pub streaming: bool,
    /// HMACs to carry over unchanged when no key is given, by array name
    /// (recovery keeps a damaged file's tags for the arrays it rescues).
    pub carried_hmacs: Vec<(String, Hash)>,
}

/// What the writer computed.
#[derive(Clone, Debug)]
pub struct Written {
    /// The root hash over all arrays.
    pub sha256_all: Hash,
    /// This generation's Merkle link.
    pub merkle_this: Hash,
    /// The XOR check word.
    pub fastxor: u64,
    /// The WSUM for a streaming write.
    pub wsum: Option<Wsum>,
    /// Bytes written.
    pub len: u64,
}

struct ChunkSum {
    sha256: Hash,
    crc32c: u32,
}

struct Plan<'a> {
    array: &'a Array,
    layout: Layout,
    salt: [u8; 8],
    first_chunk: usize,
}

/// Writes `arrays` (sorted by name, unique; see `model::sort_arrays`) as a
/// canonical WTXT to `out`, which must start empty at position 0.
pub fn write_snapshot<W: Write + Seek>(
    arrays: &[Array],
    opts: &WriteOptions,
    out: &mut W,
    progress: &Progress,
) -> Result<Written> {
    if let Some(w) = arrays.windows(2).find(|w| w[0].name.as_bytes() >= w[1].name.as_bytes()) {
        return Err(Error::input(
            Default::default(),
            format!("arrays not in name order or duplicated: {} / {}", w[0].name, w[1].name),
        ));
    }
    let gen = opts.meta.gen_str();
    let mut plans = Vec::with_capacity(arrays.len());
    let mut total_chunks = 0usize;
    for a in arrays {
        let layout = Layout::new(a.dtype, &a.shape, opts.rows_per_chunk)
            .map_err(|m| Error::input(Default::default(), format!("array {}: {m}", a.name)))?;
        plans.push(Plan { array: a, layout, salt: derive_salt(&gen, &a.name), first_chunk: total_chunks });
        total_chunks += layout.chunk_count() as usize;
    }
    let raw_total: u64 = arrays.iter().map(|a| a.bytes().len() as u64).sum();
    progress.set_total(raw_total * 2);

    let (array_sums, chunk_sums) = hash_phase(&plans, total_chunks, opts.hmac_key, progress);

    let arr_lines: Vec<ArrLine> = plans
        .iter()
        .zip(&array_sums)
        .map(|(p, (sha256, hmac))| {
            let carried = opts.carried_hmacs.iter().find(|(n, _)| *n == p.array.name).map(|(_, h)| *h);
            ArrLine {
                name: p.array.name.clone(),
                dtype: p.array.dtype,
                shape: p.array.shape.clone(),
                bytes: p.layout.bytes,
                sha256: *sha256,
                hmac: hmac.or(carried).unwrap_or([0; 32]),
                salt: p.salt,
            }
        })
        .collect();
    let arr_texts: Vec<String> = arr_lines.iter().map(ArrLine::to_line).collect();

    let cap = Cap::for_profile(arrays.iter().any(|a| a.dtype.is_extension()));
    let signs_file = opts.sign_key.is_some() && !opts.streaming;
    let header_len =
        header_text(&opts.meta, &cap, &placeholder_root(opts.streaming), signs_file.then(placeholder_sign)).len();
    out.seek(SeekFrom::Start(header_len as u64)).map_err(io_err)?;

    let (root_sums, body_len) = std::thread::scope(|s| {
        let root = s.spawn(|| root_phase(&plans, &arr_texts));
        let body = body_phase(&plans, &arr_texts, &chunk_sums, opts.audit.as_ref(), out, progress);
        (root.join().expect("root hashing thread"), body)
    });
    let body_len = body_len?;
    let (sha256_all, fastxor) = root_sums;
    let merkle = merkle_this(&opts.merkle_prev, &sha256_all, opts.meta.ts.as_str(), &gen, &opts.meta.build);

    let root = if opts.streaming {
        Root::Pending
    } else {
        Root::Final { sha256_all, merkle_prev: opts.merkle_prev, merkle_this: merkle, fastxor }
    };
    let mut header = header_text(&opts.meta, &cap, &root, None);
    if signs_file {
        let key = opts.sign_key.expect("checked");
        let line = SignLine { signature: key.sign(header.as_bytes()), keyid: key.public().keyid() };
        line.write(&mut header);
        header.push('\n');
    }
    debug_assert_eq!(header.len(), header_len);
    out.seek(SeekFrom::Start(0)).map_err(io_err)?;
    out.write_all(header.as_bytes()).map_err(io_err)?;
    out.flush().map_err(io_err)?;

    let wsum = opts.streaming.then(|| {
        let mut w = Wsum { sha256_all, merkle_prev: opts.merkle_prev, merkle_this: merkle, sign: None };
        if let Some(key) = opts.sign_key {
            w.sign = Some(SignLine { signature: key.sign(w.signed_part().as_bytes()), keyid: key.public().keyid() });
        }
        w
    });
    Ok(Written { sha256_all, merkle_this: merkle, fastxor, wsum, len: header_len as u64 + body_len })
}

fn io_err(e: std::io::Error) -> Error {
    Error::io("output", e)
}

/// The four header lines (and a `sign` line if given), each with its LF.
pub fn header_text(meta: &Meta, cap: &Cap, root: &Root, sign: Option<SignLine>) -> String {
    let mut h = String::with_capacity(512);
    h.push_str(MAGIC);
    h.push('\n');
    meta.write(&mut h);
    h.push('\n');
    cap.write(&mut h);
    h.push('\n');
    root.write(&mut h);
    h.push('\n');
    if let Some(s) = sign {
        s.write(&mut h);
        h.push('\n');
    }
    h
}

fn placeholder_root(streaming: bool) -> Root {
    if streaming {
        Root::Pending
    } else {
        Root::Final { sha256_all: [0; 32], merkle_prev: [0; 32], merkle_this: [0; 32], fastxor: 0 }
    }
}

fn placeholder_sign() -> SignLine {
    SignLine { signature: [0; 64], keyid: [0; 8] }
}

/// Phase 1: array digests (and HMACs) and chunk sums, in parallel.
type ArraySums = Vec<(Hash, Option<Hash>)>;

fn hash_phase(
    plans: &[Plan],
    total_chunks: usize,
    key: Option<&HmacKey>,
    progress: &Progress,
) -> (ArraySums, Vec<ChunkSum>) {
    enum Job {
        Array(usize),
        Mac(usize),
        Chunk(usize, u64),
    }
    let mut jobs: Vec<Job> = Vec::with_capacity(plans.len() * 2 + total_chunks);
    // Whole-array jobs are the longest: start them first, largest first.
    let mut by_size: Vec<usize> = (0..plans.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(plans[i].layout.bytes));
    for &i in &by_size {
        jobs.push(Job::Array(i));
        if key.is_some() {
            jobs.push(Job::Mac(i));
        }
    }
    for (i, p) in plans.iter().enumerate() {
        for ix in 0..p.layout.chunk_count() {
            jobs.push(Job::Chunk(i, ix));
        }
    }
    let digests: Vec<OnceLock<Hash>> = (0..plans.len()).map(|_| OnceLock::new()).collect();
    let macs: Vec<OnceLock<Hash>> = (0..plans.len()).map(|_| OnceLock::new()).collect();
    let chunks: Vec<OnceLock<ChunkSum>> = (0..total_chunks).map(|_| OnceLock::new()).collect();
    let next = AtomicUsize::new(0);
    let work = || loop {
        let j = next.fetch_add(1, Ordering::Relaxed);
        let Some(job) = jobs.get(j) else { break };
        match *job {
            Job::Array(i) => {
                let _ = digests[i].set(Sha256::digest(plans[i].array.bytes()).into());
            }
            Job::Mac(i) => {
                let k = key.expect("mac jobs only with a key");
                let _ = macs[i].set(k.compute(&plans[i].salt, plans[i].array.bytes()));
            }
            Job::Chunk(i, ix) => {
                let p = &plans[i];
                let (off, len) = p.layout.chunk_range(ix);
                let raw = &p.array.bytes()[off as usize..(off + len) as usize];
                let sum = ChunkSum { sha256: Sha256::digest(raw).into(), crc32c: crc32c::crc32c(raw) };
                let _ = chunks[p.first_chunk + ix as usize].set(sum);
                progress.inc(len);
            }
        }
    };
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(jobs.len().max(1));
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
    let sums = digests
        .into_iter()
        .zip(macs)
        .map(|(d, m)| (d.into_inner().expect("every array hashed"), m.into_inner()))
        .collect();
    let chunks = chunks.into_iter().map(|c| c.into_inner().expect("every chunk hashed")).collect();
    (sums, chunks)
}

/// Phase 2a: `sha256_all` over each `arr` line (no LF) and raw bytes, and `fastxor`.
fn root_phase(plans: &[Plan], arr_texts: &[String]) -> (Hash, u64) {
    let mut h = Sha256::new();
    let mut fx = FastXor::default();
    for (p, line) in plans.iter().zip(arr_texts) {
        h.update(line.as_bytes());
        h.update(p.array.bytes());
        fx.update(p.array.bytes());
    }
    (h.finalize().into(), fx.value())
}

/// Phase 2b: everything after the header, streamed to `out`.
fn body_phase<W: Write>(
    plans: &[Plan],
    arr_texts: &[String],
    sums: &[ChunkSum],
    audit: Option<&Audit>,
    out: &mut W,
    progress: &Progress,
) -> Result<u64> {
    let mut buf: Vec<u8> = Vec::with_capacity(4 << 20);
    let mut scratch = Vec::new();
    let mut written = 0u64;
    let mut flush = |buf: &mut Vec<u8>, force: bool| -> Result<()> {
        if force || buf.len() >= 2 << 20 {
            out.write_all(buf).map_err(io_err)?;
            written += buf.len() as u64;
            buf.clear();
        }
        Ok(())
    };
    let mut line = String::with_capacity(256);
    for (p, text) in plans.iter().zip(arr_texts) {
        buf.extend_from_slice(text.as_bytes());
        buf.push(b'\n');
        if let Some(idx) = p.layout.idx {
            line.clear();
            idx.write(&mut line);
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
        }
        for ix in 0..p.layout.chunk_count() {
            let (off, len) = p.layout.chunk_range(ix);
            let sum = &sums[p.first_chunk + ix as usize];
            let ch = ChLine { ix, off, len, sha256: sum.sha256, crc32c: sum.crc32c, lines: lines_for(len) };
            line.clear();
            ch.write(&mut line);
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
            encode_lines(&p.array.bytes()[off as usize..(off + len) as usize], &mut buf, &mut scratch);
            buf.extend_from_slice(b"endch\n");
            flush(&mut buf, false)?;
            progress.inc(len);
        }
        buf.extend_from_slice(b"endarr\n");
    }
    if let Some(a) = audit {
        line.clear();
        a.write(&mut line);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
    }
    buf.extend_from_slice(END.as_bytes());
    buf.push(b'\n');
    flush(&mut buf, true)?;
    Ok(written)
}
