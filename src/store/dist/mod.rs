//! One snapshot written by many processes at once (the ranks of a
//! distributed training run, `wtxt.torch.dcp`), byte for byte the snapshot
//! one process writes of the same arrays and options.
//!
//! Every rank plans the same text from the same arrays and options (every
//! line has a fixed width, so each chunk's place is known before a byte is
//! written, in the single file or in its part). Each rank then writes the
//! chunks it owns straight into their files and hashes them; hashes that
//! run over several ranks' chunks (an array's SHA-256 and HMAC,
//! `sha256_all`) are [`Sha256State`]s the caller hands from rank to rank in
//! the text's order, and `fastxor` is XORed from each rank's share. Once
//! every rank has written, each hashes the parts it is given. The
//! coordinator then writes the head from what the ranks report, never
//! reading the arrays back. docs/DISTRIBUTED.md says who does what.
//!
//! A chunk's bytes come from the caller's memory (a rank's own shard) or
//! from the arrays given to [`DistWrite::new`] (a stage file the ranks put
//! the other chunks' pieces in, and the metadata arrays).
//!
//! The caller moves data and states between ranks; nothing here knows of
//! processes.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::crypto::digest::{fastxor_at, Hash, Sha256State};
use crate::error::{Error, Result};
use crate::format::chunk::decode_blocks;
use crate::format::layout::Layout;
use crate::format::split::{self, part_name, PartLine, PartSpan};
use crate::format::syntax::{ArrLine, ChLine, Meta};
use crate::format::write::{FixedKind, Places, WriteOptions, WritePlan, Written};
use crate::model::Array;
use crate::options::{Keys, Output};
use crate::store::input::{PartReading, WtxtIn};

/// Where a chunk's bytes are: the caller's memory, or (`None`) the
/// array's own data.
pub type Raw<'a> = Option<&'a [u8]>;

/// What every rank must give [`DistWrite::new`] alike.
pub struct DistOptions {
    /// The `meta` line (its `ts` resolved once, by the coordinator).
    pub meta: Meta,
    /// Rows per chunk for arrays of rank >= 2.
    pub rows_per_chunk: u64,
    /// The previous generation's `merkle_this` (the coordinator's concern).
    pub merkle_prev: Hash,
    /// The keys: `hmac_key` (every rank hashes with it) and `sign_key` (its
    /// presence sets the header's size on every rank; the coordinator
    /// signs). The others are not used here.
    pub keys: Keys,
    /// How the snapshot is stored, and how its digests are computed: in the
    /// tree form the ranks only report their chunks' SHA-256
    /// ([`DistWrite::tree_arr_lines`]), nothing is handed from rank to rank.
    pub output: Output,
}

/// What the coordinator verifies of the staged snapshot before it
/// installs it ([`DistWrite::finish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagedCheck {
    /// Nothing: one process wrote and hashed every byte itself.
    Nothing,
    /// Every byte, as `wtxt verify` does.
    Whole,
    /// Every line but the chunks' base64, each chunk's digest taken from
    /// its `ch` line: every rank read back and checked the chunks it wrote
    /// ([`DistWrite::check_chunks`]) and reported their digests, which the
    /// caller found equal to those the root was built from. Only the tree
    /// form binds a `ch` line's digest to the root; in the 1.1 form this
    /// reads every byte, as `Whole` does.
    ChunksChecked,
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
    /// Each array's chunking and the index of its first chunk among all,
    /// taken from the plan once: every chunk written or hashed needs them.
    layouts: Vec<(Layout, usize)>,
}

impl DistWrite {
    /// Plans the snapshot of `arrays` (sorted, named) at `out`; the ranks'
    /// files go in `stage`, a folder beside `out` that every rank sees.
    pub fn new(arrays: Vec<Array>, o: DistOptions, out: &Path, stage: &Path) -> Result<DistWrite> {
        let opts = options(&o);
        let plan = WritePlan::new(&arrays, &opts).map_err(|e| e.in_file(out))?;
        let places = plan.places();
        let spans = match o.output.part_size.limit() {
            Some(limit) => split::place_parts(&plan.shape(), limit).map_err(|e| e.in_file(out))?,
            None => None,
        };
        let layouts = (0..arrays.len()).map(|i| (plan.layout(i), plan.first_chunk(i))).collect();
        drop(plan);
        Ok(DistWrite { arrays, o, out: out.to_path_buf(), stage: stage.to_path_buf(), places, spans, layouts })
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
        let (l, _) = self.layout(i)?;
        Ok((0..l.chunk_count()).map(|ix| l.chunk_range(ix)).collect())
    }

    /// Array `i`'s layout and the index of its first chunk among all.
    fn layout(&self, i: usize) -> Result<(Layout, usize)> {
        self.layouts.get(i).copied().ok_or_else(|| Error::usage(format!("no array {i}")))
    }

    /// How many parts the snapshot has (0: it is a single file).
    pub fn part_count(&self) -> usize {
        self.spans.as_ref().map_or(0, Vec::len)
    }

    /// The file a single-file snapshot's text is written into.
    fn text_path(&self) -> PathBuf {
        self.stage.join("snapshot.text")
    }

    /// The file of part `k` (0-based) while it is written.
    fn part_path(&self, k: usize) -> PathBuf {
        self.stage.join(part_name(k as u64 + 1))
    }

    fn open(path: &Path) -> Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(path, e))
    }

    /// Where the byte at `at` of the single text goes: (part, offset in
    /// it), or (`None`, `at`) for a single file. In a split snapshot `at`
    /// must lie in a part's body, outside its `arr` lines (they go to the
    /// head).
    fn locate(&self, at: u64) -> (Option<usize>, u64) {
        let Some(spans) = &self.spans else { return (None, at) };
        let k = spans.partition_point(|s| s.end <= at);
        let s = &spans[k];
        let shrink: u64 = s.arrs.iter().filter(|a| a.at < at).map(|a| a.len - a.begin.len() as u64 - 1).sum();
        (Some(k), s.opening().len() as u64 + at - s.start - shrink)
    }

    /// Writes the text around the chunks (the coordinator's share): in a
    /// split snapshot, each part's framing and its `begin`, `idx` and
    /// `endarr` lines (the head is written at the end).
    pub fn write_fixed(&self) -> Result<()> {
        let fixed = self.with_plan(|p| Ok(p.fixed_text(&self.places)))?;
        let Some(spans) = &self.spans else {
            let path = self.text_path();
            let f = Self::open(&path)?;
            for piece in fixed {
                f.write_all_at(&piece.bytes, piece.at).map_err(|e| Error::io(&path, e))?;
            }
            return Ok(());
        };
        let files: Vec<(PathBuf, File)> = (0..spans.len())
            .map(|k| {
                let path = self.part_path(k);
                Self::open(&path).map(|f| (path, f))
            })
            .collect::<Result<_>>()?;
        let put = |k: usize, b: &[u8], at: u64| files[k].1.write_all_at(b, at).map_err(|e| Error::io(&files[k].0, e));
        for (k, s) in spans.iter().enumerate() {
            put(k, &s.opening(), 0)?;
            for a in &s.arrs {
                put(k, format!("{}\n", a.begin).as_bytes(), self.locate(a.at).1)?;
            }
            put(k, PartSpan::closing(), self.locate(s.end - 1).1 + 1)?;
        }
        for piece in fixed.iter().filter(|p| p.kind == FixedKind::Body) {
            let (k, at) = self.locate(piece.at);
            put(k.expect("a split snapshot"), &piece.bytes, at)?;
        }
        Ok(())
    }

    /// Where each of `chunks` ((array, chunk)) has its text: (part, offset
    /// in it), and each file that holds one of them, opened once.
    #[allow(clippy::type_complexity)]
    fn chunk_files(
        &self,
        chunks: impl Iterator<Item = (usize, u64)>,
    ) -> Result<(Vec<(Option<usize>, u64)>, Vec<Option<(PathBuf, File)>>)> {
        let mut places = Vec::new();
        for (i, ix) in chunks {
            let (layout, first) = self.layout(i)?;
            if ix >= layout.chunk_count() {
                return Err(Error::usage(format!("array {i}: no chunk {ix}")));
            }
            places.push(self.locate(self.places.ch[first + ix as usize]));
        }
        let mut files: Vec<Option<(PathBuf, File)>> = (0..self.part_count().max(1)).map(|_| None).collect();
        for &(k, _) in &places {
            let k = k.unwrap_or(0);
            if files[k].is_none() {
                let path = if self.spans.is_some() { self.part_path(k) } else { self.text_path() };
                files[k] = Some((path.clone(), Self::open(&path)?));
            }
        }
        Ok((places, files))
    }

    /// Reads back the chunks `chunks` ((array, chunk)) this rank wrote and
    /// checks each as `wtxt verify` does: its `ch` line is the one the
    /// layout places there, its base64 lines decode (widths, parity,
    /// padding) to bytes whose CRC32C and SHA-256 the line carries, and
    /// `endch` follows. Returns each chunk's SHA-256, in `chunks`' order,
    /// and the share of `fastxor` of the bytes read back: the rank's
    /// report, from which the coordinator installs the head without
    /// reading the chunks' bytes again (docs/DISTRIBUTED.md).
    pub fn check_chunks(&self, chunks: &[(usize, u64)]) -> Result<(Vec<Hash>, u64)> {
        let (places, files) = self.chunk_files(chunks.iter().copied())?;
        let starts = self.starts();
        let items: Vec<usize> = (0..chunks.len()).collect();
        let (mut out, mut x) = (Vec::with_capacity(chunks.len()), 0u64);
        let ahead = crate::threads::threads().saturating_sub(1).max(1);
        let check = |&n: &usize| self.check_chunk(chunks[n], places[n], &files, &starts);
        crate::threads::in_order(&items, ahead, check, |(h, share)| {
            out.push(h);
            x ^= share;
            Ok(())
        })?;
        Ok((out, x))
    }

    /// [`DistWrite::check_chunks`] of one chunk, whose text is at `place`:
    /// its SHA-256 and share of `fastxor`.
    fn check_chunk(
        &self,
        (i, ix): (usize, u64),
        (k, at): (Option<usize>, u64),
        files: &[Option<(PathBuf, File)>],
        starts: &[u64],
    ) -> Result<(Hash, u64)> {
        thread_local! {
            // The text read back, and its bytes decoded a block at a time:
            // one buffer each per thread, not fresh pages per chunk.
            static BUFFERS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = Default::default();
        }
        let (path, f) = files[k.unwrap_or(0)].as_ref().expect("opened");
        let (layout, _) = self.layout(i)?;
        let (len, _) = layout.chunk_text(ix, &mut String::new());
        let len = usize::try_from(len).map_err(|_| Error::usage("a chunk's text past memory"))?;
        let name = &self.arrays[i].name;
        let fail = |m: String| {
            Error::check(crate::error::Position::None, format!("array {name}, chunk {ix}: {m}")).in_file(path)
        };
        BUFFERS.with_borrow_mut(|(text, out)| {
            text.resize(len, 0);
            f.read_exact_at(text, at).map_err(|e| Error::io(path, e))?;
            let mut lines = text.strip_suffix(b"\n").unwrap_or(text).split(|&b| b == b'\n');
            let ch = ChLine::parse(lines.next().unwrap_or_default()).map_err(|m| fail(m.to_string()))?;
            let (off, chunk_len) = layout.chunk_range(ix);
            if (ch.ix, ch.off, ch.len) != (ix, off, chunk_len) {
                return Err(fail(format!("its `ch` line says ix={} off={} len={}", ch.ix, ch.off, ch.len)));
            }
            // Decoded and hashed as the verifier does, a block at a time.
            let (mut sha, mut share, mut at) = (Sha256State::default(), 0u64, starts[i] + off);
            let faults = decode_blocks(&ch, lines.by_ref().take(ch.lines as usize), out, |out| {
                sha.update(out);
                share ^= fastxor_at(at, out);
                at += out.len() as u64;
                out.clear();
            });
            if let Some(f) = faults.first() {
                return Err(fail(f.to_string()));
            }
            if sha.finalize() != ch.sha256 {
                return Err(fail("sha256 does not match its bytes".into()));
            }
            if lines.next() != Some(&b"endch"[..]) || lines.next().is_some() {
                return Err(fail("its text does not end with `endch` where its length says".into()));
            }
            Ok((ch.sha256, share))
        })
    }

    /// Writes `chunks` ((array, chunk, bytes) this rank owns) into their
    /// files, on every core; returns each chunk's SHA-256, in `chunks`' order.
    pub fn write_chunks(&self, chunks: &[(usize, u64, Raw)]) -> Result<Vec<Hash>> {
        // Each file this rank writes, opened once.
        let (places, files) = self.chunk_files(chunks.iter().map(|&(i, ix, _)| (i, ix)))?;
        let digests: Vec<std::sync::OnceLock<Hash>> = chunks.iter().map(|_| std::sync::OnceLock::new()).collect();
        self.with_plan(|plan| {
            let next = AtomicUsize::new(0);
            let threads = crate::threads::threads().min(chunks.len().max(1));
            std::thread::scope(|s| {
                let work = || -> Result<()> {
                    let (mut buf, mut scratch) = (Vec::with_capacity(2 << 20), Vec::new());
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(i, ix, raw)) = chunks.get(n) else { return Ok(()) };
                        let (k, base) = places[n];
                        let (path, f) = files[k.unwrap_or(0)].as_ref().expect("opened");
                        let raw = self.chunk_raw(i, ix, raw)?;
                        let sha = plan.write_chunk(i, ix, raw, &mut buf, &mut scratch, &mut |at, b| {
                            f.write_all_at(b, base + at).map_err(|e| Error::io(path, e))
                        })?;
                        let _ = digests[n].set(sha);
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
        })?;
        Ok(digests.into_iter().map(|d| d.into_inner().expect("every chunk written")).collect())
    }

    /// The tree form: every array's `arr` line (without LF) and
    /// `sha256_all`, from every chunk's SHA-256 as the ranks reported them
    /// ((array, chunk, digest), in any order; each chunk exactly once).
    pub fn tree_arr_lines(&self, digests: &[(usize, u64, Hash)]) -> Result<(Vec<String>, Hash)> {
        let total = self.layouts.iter().map(|(l, _)| l.chunk_count() as usize).sum();
        let mut all: Vec<Option<Hash>> = vec![None; total];
        for &(i, ix, sha) in digests {
            let (layout, first) = self.layout(i)?;
            if ix >= layout.chunk_count() {
                return Err(Error::usage(format!("array {i}: no chunk {ix}")));
            }
            if all[first + ix as usize].replace(sha).is_some() {
                return Err(Error::usage(format!("array {i}: chunk {ix} reported twice")));
            }
        }
        let all: Vec<Hash> = all
            .into_iter()
            .enumerate()
            .map(|(c, d)| d.ok_or_else(|| Error::usage(format!("chunk {c} of the snapshot was reported by no rank"))))
            .collect::<Result<_>>()?;
        self.with_plan(|p| {
            let lines: Vec<String> = (0..self.arrays.len()).map(|i| p.tree_arr_line(i, &all).to_line()).collect();
            let sha256_all = crate::crypto::digest::tree_all(lines.iter().map(|l| l.as_bytes()));
            Ok((lines, sha256_all))
        })
    }

    /// Array `i`'s SHA-256 and HMAC continued over `chunks` (consecutive,
    /// with their bytes), from its start when `state` is `None`.
    pub fn hash_array(&self, i: usize, chunks: &[(u64, Raw)], state: Option<ArrayHash>) -> Result<ArrayHash> {
        self.layout(i)?;
        let mut h = match state {
            Some(h) => h,
            None => {
                let salt = self.with_plan(|p| Ok(p.salt(i)))?;
                ArrayHash {
                    sha: Sha256State::default(),
                    mac: self.o.keys.hmac_key.as_ref().map(|k| k.resumable(&salt)),
                }
            }
        };
        for &(ix, raw) in chunks {
            let raw = self.chunk_raw(i, ix, raw)?;
            match h.mac.as_mut() {
                Some(m) => Sha256State::update_pair(&mut h.sha, raw, m, raw),
                None => h.sha.update(raw),
            }
        }
        Ok(h)
    }

    /// Array `i`'s `arr` line (without LF) once `h` has seen all its bytes.
    pub fn arr_line(&self, i: usize, h: ArrayHash) -> Result<String> {
        let mac = match (&self.o.keys.hmac_key, h.mac) {
            (Some(k), Some(m)) => Some(k.finish_resumable(m)),
            (None, None) => None,
            _ => return Err(Error::usage("an array's hash state disagrees with the HMAC key")),
        };
        self.layout(i)?;
        self.with_plan(|p| Ok(p.arr_line(i, h.sha.finalize(), mac).to_line()))
    }

    /// `sha256_all` continued over array `i`'s `chunks` (consecutive, with
    /// their bytes), starting with its `arr` line when they start at chunk 0.
    pub fn hash_all(
        &self,
        state: Option<Sha256State>,
        i: usize,
        chunks: &[(u64, Raw)],
        arr: &str,
    ) -> Result<Sha256State> {
        let mut h = state.unwrap_or_default();
        if chunks.first().is_some_and(|&(ix, _)| ix == 0) {
            self.check_arr(i, arr)?;
            h.update(arr.as_bytes());
        }
        for &(ix, raw) in chunks {
            h.update(self.chunk_raw(i, ix, raw)?);
        }
        Ok(h)
    }

    /// This rank's share of `fastxor`: over `chunks`, each at its place in
    /// the concatenation of all arrays' bytes.
    pub fn fastxor(&self, chunks: &[(usize, u64, Raw)]) -> Result<u64> {
        let starts = self.starts();
        let mut x = 0u64;
        for &(i, ix, raw) in chunks {
            let bytes = self.chunk_raw(i, ix, raw)?;
            let (off, _) = self.layout(i)?.0.chunk_range(ix);
            x ^= fastxor_at(starts[i] + off, bytes);
        }
        Ok(x)
    }

    /// Where each array's bytes start in the stream `fastxor` runs over.
    fn starts(&self) -> Vec<u64> {
        let mut at = 0u64;
        self.arrays
            .iter()
            .map(|a| {
                at += a.bytes().len() as u64;
                at - a.bytes().len() as u64
            })
            .collect()
    }

    /// Chunk `ix` of array `i`: `raw` when given (it must be the chunk's
    /// length), else from the array's data.
    fn chunk_raw<'r>(&'r self, i: usize, ix: u64, raw: Raw<'r>) -> Result<&'r [u8]> {
        let a = self.arrays.get(i).ok_or_else(|| Error::usage(format!("no array {i}")))?;
        let (layout, _) = self.layout(i)?;
        if ix >= layout.chunk_count() {
            return Err(Error::usage(format!("array {}: no chunk {ix}", a.name)));
        }
        let (off, len) = layout.chunk_range(ix);
        match raw {
            Some(r) if r.len() as u64 == len => Ok(r),
            Some(r) => Err(Error::usage(format!("array {}: chunk {ix} is {len} bytes, given {}", a.name, r.len()))),
            None => Ok(&a.bytes()[off as usize..(off + len) as usize]),
        }
    }

    /// Refuses an `arr` line (from another rank) that is not array `i`'s.
    fn check_arr(&self, i: usize, arr: &str) -> Result<ArrLine> {
        let a = self.arrays.get(i).ok_or_else(|| Error::usage(format!("no array {i}")))?;
        let line = ArrLine::parse(arr.as_bytes()).map_err(|m| Error::usage(format!("array {}: {m}", a.name)))?;
        if line.name != a.name || line.dtype != a.dtype || line.shape != a.shape {
            return Err(Error::usage(format!("array {}: a rank reported the arr line of {}", a.name, line.name)));
        }
        Ok(line)
    }

    /// Hashes part `k` (0-based) once every rank has written: its `part` line.
    pub fn hash_part(&self, k: usize) -> Result<PartLine> {
        let span = self.spans.as_ref().and_then(|s| s.get(k)).ok_or_else(|| Error::usage(format!("no part {k}")))?;
        let path = self.part_path(k);
        let f = crate::fs::open_no_follow(&path).map_err(|e| Error::io(&path, e))?;
        let (frame, lines, bytes) = crate::format::split::FrameHash::of(f).map_err(|e| Error::io(&path, e))?;
        Ok(PartLine { ix: span.ix, bytes, lines, hash: crate::format::split::PartHash::Frame(frame) })
    }

    /// Puts the snapshot in place (the coordinator, once every rank is
    /// done): the header and `arr` lines from the ranks' hashes, then the
    /// parts the ranks cut (or the text itself, for a single file), the
    /// head last. `arr_lines` are every array's, in order; `parts` every
    /// part's line, in order. `check` says what of the staged snapshot is
    /// verified first, as `wtxt verify` would, under the writer's own keys
    /// (its signature, every HMAC tag): a head signed from what other
    /// processes reported is installed only once every byte it vouches for
    /// was read back and checked, here or by the rank that wrote it.
    pub fn finish(
        &self,
        arr_lines: &[String],
        sha256_all: Hash,
        fastxor: u64,
        parts: &[PartLine],
        check: StagedCheck,
    ) -> Result<Written> {
        let trust = crate::format::verify::InputTrust::new(
            self.o.keys.hmac_key.as_ref(),
            None,
            self.o.keys.sign_key.as_ref(),
            false,
            false,
        );
        let opts = trust.options();
        let verify = (check != StagedCheck::Nothing).then_some(&opts);
        let unhashed = check == StagedCheck::ChunksChecked;
        if arr_lines.len() != self.arrays.len() {
            return Err(Error::usage(format!("{} arr lines for {} arrays", arr_lines.len(), self.arrays.len())));
        }
        for (i, l) in arr_lines.iter().enumerate() {
            self.check_arr(i, l)?;
        }
        let (header, merkle_this) = self.with_plan(|p| Ok(p.header(sha256_all, fastxor)))?;
        let tail = self.with_plan(|p| Ok(p.tail_text(Some((&sha256_all, &merkle_this)))))?;
        let text_path = self.text_path();
        match &self.spans {
            None => {
                let f = Self::open(&text_path)?;
                let io = |e| Error::io(&text_path, e);
                f.write_all_at(header.as_bytes(), 0).map_err(io)?;
                for (l, &at) in arr_lines.iter().zip(&self.places.arr) {
                    f.write_all_at(l.as_bytes(), at).map_err(io)?;
                }
                f.write_all_at(&tail, self.places.len - tail.len() as u64).map_err(io)?;
                drop(f);
                if let Some(opts) = verify {
                    let open = if unhashed { WtxtIn::open_unhashed } else { WtxtIn::open };
                    self.verify_staged(open(&text_path, None)?, opts, unhashed)?;
                }
                super::out::install_text(&self.out, text_path)?;
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
                let head = split::head_bytes(header.as_bytes(), parts, &arrs, &tail);
                if let Some(opts) = verify {
                    let split::Opened::Split(h) = split::open(Box::new(&head[..]))? else {
                        return Err(Error::usage("the head written is not a split snapshot's head"));
                    };
                    let source = Box::new(super::files::PartFiles::new(self.stage.clone(), None));
                    let reading = if unhashed { PartReading::Unhashed } else { PartReading::Lenient };
                    let input = WtxtIn::joined(h, source, &self.out, head.len() as u64, reading);
                    self.verify_staged(input, opts, unhashed)?;
                }
                let staged = parts.iter().map(|p| (self.part_path(p.ix as usize - 1), *p)).collect();
                super::out::install_staged(&self.out, staged, &head)?;
            }
        }
        Ok(Written { sha256_all, merkle_this, fastxor, wsum: None, len: self.places.len, chunk_sha256: Vec::new() })
    }
}

impl DistWrite {
    /// Verifies the staged snapshot `input` (whole, or, `chunks_checked`,
    /// all but its chunks' base64: [`WtxtIn::verify_structure`]); its first
    /// problem is the error, named at the snapshot's path.
    fn verify_staged(
        &self,
        input: WtxtIn<'_>,
        opts: &crate::format::verify::VerifyOptions,
        chunks_checked: bool,
    ) -> Result<()> {
        let report = match chunks_checked {
            true => input.verify_structure(opts)?,
            false => input.verify(opts, &crate::progress::Progress::hidden())?,
        };
        match report.errors.first() {
            None => Ok(()),
            Some(p) => Err(crate::error::check_at(
                p.line,
                format!("the snapshot the ranks wrote does not verify, so it is not installed: {}", p.message),
            )
            .in_file(&self.out)),
        }
    }
}

/// The writer's options over `o`'s keys.
fn options(o: &DistOptions) -> WriteOptions<'_> {
    WriteOptions {
        merkle_prev: o.merkle_prev,
        hmac_key: o.keys.hmac_key.as_ref(),
        sign_key: o.keys.sign_key.as_ref(),
        digest: o.output.digest,
        ..WriteOptions::new(o.meta.clone(), o.rows_per_chunk)
    }
}

#[cfg(test)]
mod tests;
