//! One snapshot written by many processes at once (the ranks of a
//! distributed training run, `wtxt.torch.dcp`), byte for byte the snapshot
//! one process writes of the same arrays and options.
//!
//! Every rank plans the same text from the same arrays and options (every
//! line has a fixed width, so each chunk's place is known before a byte is
//! written). Each rank then writes the chunks it owns into one shared text
//! file, in the single file's layout, and hashes them; hashes that run over
//! several ranks' chunks (an array's SHA-256 and HMAC, `sha256_all`) are
//! [`Sha256State`]s the caller hands from rank to rank in the text's order,
//! and `fastxor` is XORed from each rank's share. Once every rank has
//! written, each cuts the parts it is given out of the text and hashes
//! them. The coordinator then writes the head from what the ranks report,
//! never reading the arrays back. docs/DISTRIBUTED.md says who does what.
//!
//! The caller moves data and states between ranks; nothing here knows of
//! processes.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

use crate::crypto::digest::{fastxor_at, Hash, Sha256State};
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::SecretKey;
use crate::error::{Error, Result};
use crate::model::Array;
use crate::wtxt::split::{self, part_name, PartLine, PartSize, PartSpan};
use crate::wtxt::syntax::{ArrLine, Meta};
use crate::wtxt::write::{Places, WriteOptions, WritePlan, Written};

/// What every rank must give [`DistWrite::new`] alike.
pub struct DistOptions {
    /// The `meta` line (its `ts` resolved once, by the coordinator).
    pub meta: Meta,
    /// Rows per chunk for arrays of rank >= 2.
    pub rows_per_chunk: u64,
    /// The previous generation's `merkle_this` (the coordinator's concern).
    pub merkle_prev: Hash,
    /// Per-array HMACs: every rank hashes with it.
    pub hmac_key: Option<HmacKey>,
    /// The `sign` line: its presence sets the header's size on every rank;
    /// the coordinator signs.
    pub sign_key: Option<SecretKey>,
    /// How the snapshot is stored.
    pub part_size: PartSize,
}

/// An array's SHA-256 and HMAC, part way through its bytes.
#[derive(Clone, Debug)]
pub struct ArrayHash {
    sha: Sha256State,
    mac: Option<Sha256State>,
}

impl ArrayHash {
    /// Bytes of [`ArrayHash::to_bytes`].
    pub const BYTES: usize = 1 + 2 * Sha256State::BYTES;

    /// The state as bytes, for the next rank's [`ArrayHash::from_bytes`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::BYTES);
        out.push(self.mac.is_some() as u8);
        out.extend_from_slice(&self.sha.to_bytes());
        out.extend_from_slice(&self.mac.as_ref().map_or([0; Sha256State::BYTES], |m| m.to_bytes()));
        out
    }

    /// A state from [`ArrayHash::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<ArrayHash> {
        let bad = || Error::usage(format!("an array's hash state: expected {} bytes", Self::BYTES));
        if b.len() != Self::BYTES || b[0] > 1 {
            return Err(bad());
        }
        let sha = Sha256State::from_bytes(&b[1..1 + Sha256State::BYTES]).ok_or_else(bad)?;
        let mac =
            if b[0] == 1 { Some(Sha256State::from_bytes(&b[1 + Sha256State::BYTES..]).ok_or_else(bad)?) } else { None };
        Ok(ArrayHash { sha, mac })
    }
}

/// One rank's view of a snapshot being written by many.
pub struct DistWrite {
    arrays: Vec<Array>,
    o: DistOptions,
    out: PathBuf,
    stage: PathBuf,
    places: Places,
    spans: Option<Vec<PartSpan>>,
}

impl DistWrite {
    /// Plans the snapshot of `arrays` (sorted, named) at `out`; the ranks'
    /// files go in `stage`, a folder beside `out` that every rank sees.
    pub fn new(arrays: Vec<Array>, o: DistOptions, out: &Path, stage: &Path) -> Result<DistWrite> {
        let opts = options(&o);
        let plan = WritePlan::new(&arrays, &opts).map_err(|e| e.in_file(out))?;
        let places = plan.places();
        let spans = match o.part_size.limit() {
            Some(limit) => split::place_parts(&plan.shape(), limit).map_err(|e| e.in_file(out))?,
            None => None,
        };
        drop(plan);
        Ok(DistWrite { arrays, o, out: out.to_path_buf(), stage: stage.to_path_buf(), places, spans })
    }

    fn with_plan<T>(&self, f: impl FnOnce(&WritePlan) -> Result<T>) -> Result<T> {
        let opts = options(&self.o);
        let plan = WritePlan::new(&self.arrays, &opts)?;
        f(&plan)
    }

    /// Where the snapshot goes.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// The arrays, in the file's order.
    pub fn arrays(&self) -> &[Array] {
        &self.arrays
    }

    /// Array `i`'s chunks: (offset, length) of each in its bytes.
    pub fn chunks(&self, i: usize) -> Result<Vec<(u64, u64)>> {
        self.with_plan(|p| {
            let l = p.layout(i);
            Ok((0..l.chunk_count()).map(|ix| l.chunk_range(ix)).collect())
        })
    }

    /// How many parts the snapshot has (0: it is a single file).
    pub fn part_count(&self) -> usize {
        self.spans.as_ref().map_or(0, Vec::len)
    }

    /// The shared file the ranks write the text into.
    fn text_path(&self) -> PathBuf {
        self.stage.join("snapshot.text")
    }

    fn open_text(&self) -> Result<File> {
        let path = self.text_path();
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))
    }

    /// Writes the text around the chunks (the coordinator's share).
    pub fn write_fixed(&self) -> Result<()> {
        let f = self.open_text()?;
        let path = self.text_path();
        for (at, bytes) in self.with_plan(|p| Ok(p.fixed_text(&self.places)))? {
            f.write_all_at(&bytes, at).map_err(|e| Error::io(&path, e))?;
        }
        Ok(())
    }

    /// Writes `chunks` ((array, chunk) pairs this rank owns) into the text,
    /// on every core.
    pub fn write_chunks(&self, chunks: &[(usize, u64)]) -> Result<()> {
        let f = self.open_text()?;
        let path = self.text_path();
        self.with_plan(|plan| {
            let next = AtomicUsize::new(0);
            let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(chunks.len().max(1));
            std::thread::scope(|s| {
                let work = || -> Result<()> {
                    let (mut buf, mut scratch) = (Vec::with_capacity(2 << 20), Vec::new());
                    loop {
                        let Some(&(i, ix)) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) else { return Ok(()) };
                        let base = self.places.ch[plan.first_chunk(i) + ix as usize];
                        plan.write_chunk(i, ix, &mut buf, &mut scratch, &mut |at, b| {
                            f.write_all_at(b, base + at).map_err(|e| Error::io(&path, e))
                        })?;
                    }
                };
                let handles: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
                let mut r = work();
                for h in handles {
                    let done =
                        h.join().map_err(|_| Error::io_in("a chunk writer", std::io::Error::other("panicked")))?;
                    r = r.and(done);
                }
                r
            })
        })
    }

    /// Array `i`'s SHA-256 and HMAC continued over its chunks `from..to`
    /// (from its start when `state` is `None`).
    pub fn hash_array(&self, i: usize, from: u64, to: u64, state: Option<ArrayHash>) -> Result<ArrayHash> {
        let raw = self.raw(i, from, to)?;
        let mut h = match state {
            Some(h) => h,
            None => {
                let salt = self.with_plan(|p| Ok(p.salt(i)))?;
                ArrayHash { sha: Sha256State::default(), mac: self.o.hmac_key.as_ref().map(|k| k.resumable(&salt)) }
            }
        };
        for piece in raw.chunks(1 << 20) {
            h.sha.update(piece);
            if let Some(m) = h.mac.as_mut() {
                m.update(piece);
            }
        }
        Ok(h)
    }

    /// Array `i`'s `arr` line (without LF) once `h` has seen all its bytes.
    pub fn arr_line(&self, i: usize, h: ArrayHash) -> Result<String> {
        let mac = match (&self.o.hmac_key, h.mac) {
            (Some(k), Some(m)) => Some(k.finish_resumable(m)),
            (None, None) => None,
            _ => return Err(Error::usage("an array's hash state disagrees with the HMAC key")),
        };
        self.with_plan(|p| Ok(p.arr_line(i, h.sha.finalize(), mac).to_line()))
    }

    /// `sha256_all` continued over array `i`'s chunks `from..to`, starting
    /// with its `arr` line when `from` is 0.
    pub fn hash_all(&self, state: Option<Sha256State>, i: usize, from: u64, to: u64, arr: &str) -> Result<Sha256State> {
        let mut h = state.unwrap_or_default();
        if from == 0 {
            self.check_arr(i, arr)?;
            h.update(arr.as_bytes());
        }
        for piece in self.raw(i, from, to)?.chunks(1 << 20) {
            h.update(piece);
        }
        Ok(h)
    }

    /// This rank's share of `fastxor`: over `chunks`, each at its place in
    /// the concatenation of all arrays' bytes.
    pub fn fastxor(&self, chunks: &[(usize, u64)]) -> Result<u64> {
        let mut starts = Vec::with_capacity(self.arrays.len());
        let mut at = 0u64;
        for a in &self.arrays {
            starts.push(at);
            at += a.bytes().len() as u64;
        }
        let mut x = 0u64;
        for &(i, ix) in chunks {
            let (off, _) = self.with_plan(|p| Ok(p.layout(i).chunk_range(ix)))?;
            x ^= fastxor_at(starts[i] + off, self.raw(i, ix, ix + 1)?);
        }
        Ok(x)
    }

    /// Array `i`'s bytes of chunks `from..to`.
    fn raw(&self, i: usize, from: u64, to: u64) -> Result<&[u8]> {
        let a = self.arrays.get(i).ok_or_else(|| Error::usage(format!("no array {i}")))?;
        let (start, end) = self.with_plan(|p| {
            let l = p.layout(i);
            if from >= to || to > l.chunk_count() {
                return Err(Error::usage(format!("array {}: no chunks {from}..{to}", a.name)));
            }
            let (last, len) = l.chunk_range(to - 1);
            Ok((l.chunk_range(from).0, last + len))
        })?;
        Ok(&a.bytes()[start as usize..end as usize])
    }

    /// Refuses an `arr` line (from another rank) that is not array `i`'s.
    fn check_arr(&self, i: usize, arr: &str) -> Result<ArrLine> {
        let a = &self.arrays[i];
        let line = ArrLine::parse(arr.as_bytes()).map_err(|m| Error::usage(format!("array {}: {m}", a.name)))?;
        if line.name != a.name || line.dtype != a.dtype || line.shape != a.shape {
            return Err(Error::usage(format!("array {}: a rank reported the arr line of {}", a.name, line.name)));
        }
        Ok(line)
    }

    /// Cuts part `k` (0-based) out of the finished text into the stage
    /// folder, and hashes it.
    pub fn cut_part(&self, k: usize) -> Result<PartLine> {
        let span = self.spans.as_ref().and_then(|s| s.get(k)).ok_or_else(|| Error::usage(format!("no part {k}")))?;
        let path = self.stage.join(part_name(span.ix));
        let text_path = self.text_path();
        let mut text = File::open(&text_path).map_err(|e| Error::io(&text_path, e))?;
        text.seek(SeekFrom::Start(span.start)).map_err(|e| Error::io(&text_path, e))?;
        let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        let mut out = Hashing { w: BufWriter::with_capacity(1 << 20, file), sha: Sha256::new(), bytes: 0, lines: 0 };
        let io = |e| Error::io(&path, e);
        out.write_all(&span.opening()).map_err(io)?;
        let mut at = span.start;
        for slot in span.arrs.iter().map(Some).chain([None]) {
            let until = slot.map_or(span.end, |s| s.at);
            std::io::copy(&mut (&mut text).take(until - at), &mut out).map_err(io)?;
            if let Some(s) = slot {
                out.write_all(s.begin.as_bytes()).and_then(|()| out.write_all(b"\n")).map_err(io)?;
                text.seek(SeekFrom::Start(s.at + s.len)).map_err(|e| Error::io(&text_path, e))?;
                at = s.at + s.len;
            }
        }
        out.write_all(PartSpan::closing()).map_err(io)?;
        let Hashing { w, sha, bytes, lines } = out;
        let f = w.into_inner().map_err(|e| Error::io(&path, e.into_error()))?;
        crate::atomic::start_writeback(&f, 0, 0);
        Ok(PartLine { ix: span.ix, bytes, lines, sha256: sha.finalize().into() })
    }

    /// Puts the snapshot in place (the coordinator, once every rank is
    /// done): the header and `arr` lines from the ranks' hashes, then the
    /// parts the ranks cut (or the text itself, for a single file), the
    /// head last. `arr_lines` are every array's, in order; `parts` every
    /// part's line, in order.
    pub fn finish(&self, arr_lines: &[String], sha256_all: Hash, fastxor: u64, parts: &[PartLine]) -> Result<Written> {
        if arr_lines.len() != self.arrays.len() {
            return Err(Error::usage(format!("{} arr lines for {} arrays", arr_lines.len(), self.arrays.len())));
        }
        for (i, l) in arr_lines.iter().enumerate() {
            self.check_arr(i, l)?;
        }
        let (header, merkle_this) = self.with_plan(|p| Ok(p.header(sha256_all, fastxor)))?;
        let text_path = self.text_path();
        match &self.spans {
            None => {
                let f = self.open_text()?;
                let io = |e| Error::io(&text_path, e);
                f.write_all_at(header.as_bytes(), 0).map_err(io)?;
                for (l, &at) in arr_lines.iter().zip(&self.places.arr) {
                    f.write_all_at(l.as_bytes(), at).map_err(io)?;
                }
                drop(f);
                crate::store::install_text(&self.out, text_path)?;
            }
            Some(spans) => {
                if parts.len() != spans.len() || parts.iter().zip(spans).any(|(p, s)| p.ix != s.ix) {
                    return Err(Error::usage(format!("{} part lines for {} parts", parts.len(), spans.len())));
                }
                let mut arrs: Vec<Vec<Vec<u8>>> = Vec::with_capacity(spans.len());
                for s in spans {
                    let mut lines = Vec::with_capacity(s.arrs.len());
                    for slot in &s.arrs {
                        let i = self.places.arr.binary_search(&slot.at).map_err(|_| {
                            Error::usage(format!("part {}: an arr line at {} the plan does not have", s.ix, slot.at))
                        })?;
                        lines.push(arr_lines[i].clone().into_bytes());
                    }
                    arrs.push(lines);
                }
                let tail_at = spans.last().expect("at least one part").end;
                let mut tail = vec![0u8; (self.places.len - tail_at) as usize];
                File::open(&text_path)
                    .and_then(|f| f.read_exact_at(&mut tail, tail_at))
                    .map_err(|e| Error::io(&text_path, e))?;
                let head = split::head_bytes(header.as_bytes(), parts, &arrs, &tail);
                let staged = parts.iter().map(|p| (self.stage.join(part_name(p.ix)), *p)).collect();
                crate::store::install_staged(&self.out, staged, &head)?;
            }
        }
        Ok(Written { sha256_all, merkle_this, fastxor, wsum: None, len: self.places.len })
    }
}

/// The writer's options over `o`'s keys.
fn options(o: &DistOptions) -> WriteOptions<'_> {
    WriteOptions {
        merkle_prev: o.merkle_prev,
        hmac_key: o.hmac_key.as_ref(),
        sign_key: o.sign_key.as_ref(),
        ..WriteOptions::new(o.meta.clone(), o.rows_per_chunk)
    }
}

/// A writer that hashes and counts what goes through it.
struct Hashing<W: Write> {
    w: W,
    sha: Sha256,
    bytes: u64,
    lines: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.w.write(b)?;
        self.sha.update(&b[..n]);
        self.bytes += n as u64;
        self.lines += b[..n].iter().filter(|&&c| c == b'\n').count() as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}
