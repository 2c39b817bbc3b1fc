//! Split snapshots: a head file plus part files, so that no file of a large
//! snapshot reaches Git's `core.bigFileThreshold` (512 MiB, above which Git
//! stores every version whole) or a host's per-file limit (GitHub: 100 MB).
//!
//! Splitting is a storage form of the single file, not a new identity. The
//! head keeps the single file's header lines, `sign`, every `arr` line,
//! `audit` and `endwtxt` byte for byte and lists the parts (`part` lines)
//! where the arrays' chunks are; each part holds a run of the single file's
//! array lines verbatim between a framing line and `endpart`, except that
//! an array's `arr` line is replaced by a `begin` line that carries no
//! value (name, dtype, shape). The `arr` line holds the salt, which changes
//! with every generation, and the array's hashes: kept in the head, a part
//! changes only when one of its chunks does. Joining (the head up to its
//! part lines, each part's body with its `begin` lines replaced by the
//! head's `arr` lines, then the head's tail) gives the single file byte
//! for byte: that is how every reader reads a split snapshot, so every
//! check of the single file applies unchanged, and split/join are exact
//! inverses. Cut points follow from the arrays' names, dtypes, shapes,
//! `rows_per_chunk` and the part size only, never from values. Grammar:
//! docs/FORMAT.md section 18.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::crypto::digest::Hash;
use crate::error::{check_at, Error, Position, Result};
use crate::limits::MAX_LINE;
use crate::wtxt::layout::Layout;
use crate::wtxt::read::LineReader;
use crate::wtxt::syntax::{dec, hexn, lines_for, lossy, padded, shape_str, ArrLine, ChLine, Fields, IdxLine, PResult};

/// Default part size: 45 MiB (47,185,920 bytes) keeps every file under
/// GitHub's 50 MB warning, with room to spare.
pub const DEFAULT_PART_SIZE: u64 = 45 << 20;

/// Smallest part size accepted: a part must hold its framing and a chunk.
pub const MIN_PART_SIZE: u64 = 4096;

/// File name extension of parts.
pub const PART_EXT: &str = "wtxtpart";

/// Most parts one head may list (4.5 TB at the default part size); bounds
/// the head a reader holds in memory.
pub const MAX_PARTS: u64 = 100_000;

/// Largest head read into memory: a full `MAX_PARTS` table (12 MB) and the
/// `arr` lines of `MAX_ARRAYS` arrays with names of typical length fit;
/// writers refuse a larger head, so none is written that readers refuse.
pub const MAX_HEAD: u64 = 64 << 20;

const PART_MAGIC: &str = "WTXT part ix=";
const PART_END: &[u8] = b"endpart\n";
/// `WTXT part ix=NNNNNN` LF.
const PART_FIRST_LEN: u64 = PART_MAGIC.len() as u64 + 7;

/// How large the files of a snapshot may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartSize {
    /// Always one file (`--part-size none`).
    Whole,
    /// Split when the text would exceed this many bytes.
    Max(u64),
}

impl Default for PartSize {
    fn default() -> Self {
        PartSize::Max(DEFAULT_PART_SIZE)
    }
}

impl std::str::FromStr for PartSize {
    type Err = String;

    /// `none`, or bytes with an optional `K`/`M`/`G` suffix (KiB, MiB, GiB).
    fn from_str(s: &str) -> std::result::Result<PartSize, String> {
        if s == "none" {
            return Ok(PartSize::Whole);
        }
        let (digits, shift) = match s.as_bytes().last() {
            Some(b'K' | b'k') => (&s[..s.len() - 1], 10),
            Some(b'M' | b'm') => (&s[..s.len() - 1], 20),
            Some(b'G' | b'g') => (&s[..s.len() - 1], 30),
            _ => (s, 0),
        };
        let n: u64 =
            digits.parse().ok().filter(|_| digits.bytes().all(|b| b.is_ascii_digit())).ok_or_else(|| {
                format!("part size `{s}`: expected bytes with an optional K, M or G suffix, or `none`")
            })?;
        let bytes = n.checked_mul(1 << shift).ok_or_else(|| format!("part size `{s}` overflows"))?;
        if bytes < MIN_PART_SIZE {
            return Err(format!("part size `{s}`: expected at least {MIN_PART_SIZE} bytes"));
        }
        Ok(PartSize::Max(bytes))
    }
}

impl PartSize {
    /// The largest file allowed, if any.
    pub fn limit(self) -> Option<u64> {
        match self {
            PartSize::Whole => None,
            PartSize::Max(n) => Some(n),
        }
    }
}

/// A head's `part` line: which part, and what binds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartLine {
    /// 1-based position.
    pub ix: u64,
    /// Size of the part file.
    pub bytes: u64,
    /// Lines of the part file, framing included.
    pub lines: u64,
    /// SHA-256 of the part file.
    pub sha256: Hash,
}

impl PartLine {
    /// The line, without LF.
    pub fn to_line(&self) -> String {
        format!("part ix={:06} bytes={} lines={} sha256={}", self.ix, self.bytes, self.lines, hex::encode(self.sha256))
    }

    /// Parses a `part` line.
    pub fn parse(line: &[u8]) -> PResult<PartLine> {
        let mut f = Fields::new(line, "part")?;
        let ix = padded(f.next("ix")?, 6, "ix")?;
        let bytes = dec(f.next("bytes")?, "bytes")?;
        let lines = dec(f.next("lines")?, "lines")?;
        let sha256 = hexn::<32>(f.next("sha256")?, "sha256")?;
        f.end()?;
        Ok(PartLine { ix, bytes, lines, sha256 })
    }
}

/// The folder holding the parts of the head at `head`: `model.wtxt` keeps
/// its parts in `model.wtxt.parts/`.
pub fn parts_dir(head: &Path) -> PathBuf {
    let mut s = head.as_os_str().to_owned();
    s.push(".parts");
    PathBuf::from(s)
}

/// The file name of part `ix` inside the parts folder.
pub fn part_name(ix: u64) -> String {
    format!("{ix:06}.{PART_EXT}")
}

/// The part number of a file name written by [`part_name`].
pub fn part_ix(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(PART_EXT)?.strip_suffix('.')?;
    (stem.len() == 6 && stem.bytes().all(|b| b.is_ascii_digit())).then(|| stem.parse().ok()).flatten()
}

/// Where parts are written while a snapshot is split.
pub trait PartSink {
    type W: Write;
    /// Starts part `ix`.
    fn open(&mut self, ix: u64) -> Result<Self::W>;
    /// Part `ix` is complete: `part` describes what was written to `w`.
    fn close(&mut self, w: Self::W, part: &PartLine) -> Result<()>;
}

/// Parts held in memory, in order: a sink to cut a text into and a source
/// to join it from again (what tests and fuzzing use).
impl PartSink for Vec<Vec<u8>> {
    type W = Vec<u8>;
    fn open(&mut self, _ix: u64) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }
    fn close(&mut self, w: Vec<u8>, _part: &PartLine) -> Result<()> {
        self.push(w);
        Ok(())
    }
}

impl PartSource for Vec<Vec<u8>> {
    fn open(&self, ix: u64) -> Result<Box<dyn Read>> {
        match ix.checked_sub(1).and_then(|i| self.get(i as usize)) {
            Some(p) => Ok(Box::new(io::Cursor::new(p.clone()))),
            None => Err(Error::check(Position::None, format!("part {ix} is missing"))),
        }
    }
    fn name(&self, ix: u64) -> PathBuf {
        part_name(ix).into()
    }
}

/// A part being written, hashed and counted as it goes.
struct PartOut<W> {
    inner: W,
    sha: Sha256,
    bytes: u64,
    lines: u64,
}

impl<W: Write> PartOut<W> {
    fn line(&mut self, l: &[u8]) -> Result<()> {
        self.raw(l)?;
        self.raw(b"\n")?;
        self.lines += 1;
        Ok(())
    }

    fn raw(&mut self, b: &[u8]) -> Result<()> {
        self.inner.write_all(b).map_err(Error::write_failed)?;
        self.sha.update(b);
        self.bytes += b.len() as u64;
        Ok(())
    }
}

/// Cuts the single-file text read from `input` into parts of at most
/// `size` bytes, written to `sink`; returns the head's bytes. The input is
/// read once, line by line; lines are copied, not decoded.
pub fn split<R: Read, S: PartSink>(input: R, size: u64, sink: &mut S) -> Result<Vec<u8>> {
    let mut s = Splitter {
        lines: LineReader::new(input),
        size,
        sink,
        cur: None,
        parts: Vec::new(),
        arrs: Vec::new(),
        peeked: None,
    };
    let mut head = Vec::with_capacity(1024);
    for what in ["`WTXT 1`", "the `meta` line", "the `cap` line", "the `root` line"] {
        let (_, l) = s.lines.expect_line(what)?;
        head.extend_from_slice(l);
        head.push(b'\n');
    }
    let mut tail = Vec::new();
    loop {
        let (n, l) = s.next("an `arr`, `audit` or `endwtxt` line")?;
        if l.starts_with(b"sign ") && s.parts.is_empty() && s.cur.is_none() {
            head.extend_from_slice(&l);
            head.push(b'\n');
        } else if l.starts_with(b"arr ") {
            s.array(n, &l)?;
        } else if l.starts_with(b"audit ") || l == b"endwtxt" {
            tail.extend_from_slice(&l);
            tail.push(b'\n');
            if l != b"endwtxt" {
                let (_, e) = s.next("`endwtxt`")?;
                if e != b"endwtxt" {
                    return Err(check_at(n + 1, format!("expected `endwtxt`, found `{}`", lossy(&e, 40))));
                }
                tail.extend_from_slice(b"endwtxt\n");
            }
            if s.lines.next_range()?.is_some() {
                return Err(check_at(s.lines.line_no(), "text after `endwtxt`"));
            }
            break;
        } else {
            return Err(check_at(n, format!("expected an `arr` line, found `{}`", lossy(&l, 40))));
        }
    }
    s.finish_part()?;
    if s.parts.is_empty() {
        return Err(Error::input(Position::None, "a snapshot without arrays is never split"));
    }
    let head = head_bytes(&head, &s.parts, &s.arrs, &tail);
    check_head_size(head.len() as u64, size)?;
    Ok(head)
}

/// The head's bytes: the header lines, each `part` line followed by the
/// `arr` lines (without LF) of the arrays that begin in that part, the tail.
pub fn head_bytes(prefix: &[u8], parts: &[PartLine], arrs: &[Vec<Vec<u8>>], tail: &[u8]) -> Vec<u8> {
    let arr_bytes: usize = arrs.iter().flatten().map(|a| a.len() + 1).sum();
    let mut head = Vec::with_capacity(prefix.len() + parts.len() * 120 + arr_bytes + tail.len());
    head.extend_from_slice(prefix);
    for (i, p) in parts.iter().enumerate() {
        head.extend_from_slice(p.to_line().as_bytes());
        head.push(b'\n');
        for a in arrs.get(i).into_iter().flatten() {
            head.extend_from_slice(a);
            head.push(b'\n');
        }
    }
    head.extend_from_slice(tail);
    head
}

/// The head is a file of the set too: it holds every `arr` line, so a
/// snapshot of very many arrays needs parts large enough for its head.
fn check_head_size(len: u64, size: u64) -> Result<()> {
    if len >= MAX_HEAD {
        return Err(Error::usage(format!(
            "the head (the header and every array's `arr` line) would be {len} bytes, \
             over the {MAX_HEAD} bytes a reader takes: fewer arrays, or shorter names"
        )));
    }
    if len > size {
        return Err(Error::usage(format!(
            "the head (the header and every array's `arr` line) would be {len} bytes, \
             more than the part size of {size}: give a larger --part-size"
        )));
    }
    Ok(())
}

struct Splitter<'s, R, S: PartSink> {
    lines: LineReader<R>,
    size: u64,
    sink: &'s mut S,
    cur: Option<PartOut<S::W>>,
    parts: Vec<PartLine>,
    /// The `arr` lines of the arrays that begin in each part, for the head.
    arrs: Vec<Vec<Vec<u8>>>,
    peeked: Option<(u64, Vec<u8>)>,
}

impl<R: Read, S: PartSink> Splitter<'_, R, S> {
    fn next(&mut self, what: &str) -> Result<(u64, Vec<u8>)> {
        if let Some(p) = self.peeked.take() {
            return Ok(p);
        }
        let (n, l) = self.lines.expect_line(what)?;
        Ok((n, l.to_vec()))
    }

    /// Copies the next `count` lines (base64) as they are.
    fn copy_lines(&mut self, count: u64) -> Result<()> {
        for _ in 0..count {
            let r = self.lines.next_range()?.ok_or_else(|| check_at(self.lines.line_no() + 1, "file ends early"))?;
            let cur = self.cur.as_mut().expect("a part is open");
            cur.line(self.lines.bytes(r))?;
        }
        Ok(())
    }

    fn used(&self) -> Option<u64> {
        self.cur.as_ref().map(|c| c.bytes)
    }

    fn start_part(&mut self, cont: Option<&str>) -> Result<()> {
        self.finish_part()?;
        let ix = self.parts.len() as u64 + 1;
        if ix > MAX_PARTS {
            return Err(Error::input(Position::None, format!("more than {MAX_PARTS} parts: use a larger --part-size")));
        }
        let inner = self.sink.open(ix)?;
        let mut p = PartOut { inner, sha: Sha256::new(), bytes: 0, lines: 0 };
        p.line(format!("{PART_MAGIC}{ix:06}").as_bytes())?;
        if let Some(c) = cont {
            p.line(c.as_bytes())?;
        }
        self.cur = Some(p);
        self.arrs.push(Vec::new());
        Ok(())
    }

    fn finish_part(&mut self) -> Result<()> {
        if let Some(mut p) = self.cur.take() {
            p.line(&PART_END[..PART_END.len() - 1])?;
            let line = PartLine {
                ix: self.parts.len() as u64 + 1,
                bytes: p.bytes,
                lines: p.lines,
                sha256: p.sha.finalize().into(),
            };
            if line.bytes > self.size {
                return Err(Error::input(
                    Position::Line(self.lines.line_no()),
                    format!("a part would exceed {} bytes: the input is not canonical WTXT", self.size),
                ));
            }
            self.sink.close(p.inner, &line)?;
            self.parts.push(line);
        }
        Ok(())
    }

    /// One array: where it is cut follows from its layout alone.
    fn array(&mut self, n: u64, arr_text: &[u8]) -> Result<()> {
        let arr = ArrLine::parse(arr_text).map_err(|m| check_at(n, m))?;
        let (n2, l2) = self.next("an `idx` or `ch` line")?;
        let idx = if l2.starts_with(b"idx ") {
            Some((IdxLine::parse(&l2).map_err(|m| check_at(n2, m))?, l2))
        } else {
            self.peeked = Some((n2, l2));
            None
        };
        let layout = Layout::new(arr.dtype, &arr.shape, idx.as_ref().map_or(1, |(i, _)| i.rows_per_chunk))
            .map_err(|m| check_at(n, m))?;
        if layout.idx.is_some() != idx.is_some() {
            return Err(check_at(n + 1, "the `idx` line does not match the array's rank"));
        }
        let cont = cont_line(&arr.name, arr.dtype, &arr.shape);
        let begin = begin_line(&arr.name, arr.dtype, &arr.shape);
        let lead = begin.len() as u64 + 1 + idx.as_ref().map_or(0, |(_, l)| l.len() as u64 + 1);
        let cuts = self.plan(&array_units(lead, &layout), cont.len() as u64 + 1)?;
        if cuts[0] || self.cur.is_none() {
            self.start_part(None)?;
        }
        self.arrs.last_mut().expect("a part is open").push(arr_text.to_vec());
        let cur = self.cur.as_mut().expect("a part is open");
        cur.line(begin.as_bytes())?;
        if let Some((_, text)) = &idx {
            cur.line(text)?;
        }
        loop {
            let (m, l) = self.next("a `ch` or `endarr` line")?;
            if l == b"endarr" {
                self.cur.as_mut().expect("open").line(&l)?;
                return Ok(());
            }
            let ch = ChLine::parse(&l).map_err(|e| check_at(m, e))?;
            if ch.ix > 0 && cuts.get(ch.ix as usize).copied().unwrap_or(false) {
                self.start_part(Some(&cont))?;
            }
            self.cur.as_mut().expect("open").line(&l)?;
            self.copy_lines(ch.lines)?;
            let (e, end) = self.next("`endch`")?;
            if end != b"endch" {
                return Err(check_at(e, format!("expected `endch`, found `{}`", lossy(&end, 40))));
            }
            self.cur.as_mut().expect("open").line(&end)?;
        }
    }

    fn plan(&self, units: &[u64], cont_len: u64) -> Result<Vec<bool>> {
        cuts(self.size, self.used(), units, cont_len)
    }
}

/// Before which of an array's chunks a new part starts (`[0]`: before the
/// array itself), given the bytes `used` of the open part (`None`: none is
/// open) and each chunk's text size. An array that fits in a part is never
/// cut; a larger one is cut at chunk boundaries.
fn cuts(size: u64, used: Option<u64>, units: &[u64], cont_len: u64) -> Result<Vec<bool>> {
    let total: u64 = units.iter().sum();
    let frame = PART_FIRST_LEN + PART_END.len() as u64;
    let mut cuts = vec![false; units.len()];
    if used.is_some_and(|u| u + total + PART_END.len() as u64 <= size) {
        return Ok(cuts);
    }
    if frame + total <= size {
        cuts[0] = true;
        return Ok(cuts);
    }
    let mut used = used.unwrap_or(u64::MAX / 2);
    for (i, &u) in units.iter().enumerate() {
        if used + u + PART_END.len() as u64 > size {
            cuts[i] = true;
            used = if i == 0 { PART_FIRST_LEN } else { PART_FIRST_LEN + cont_len };
            if used + u + PART_END.len() as u64 > size {
                return Err(Error::usage(format!(
                    "a chunk of {u} bytes of text does not fit in a part of {size} bytes: \
                     give a larger --part-size or a smaller --rows-per-chunk"
                )));
            }
        }
        used += u;
    }
    Ok(cuts)
}

/// The `cont` line that opens a part continuing an array.
pub fn cont_line(name: &str, dtype: crate::model::Dtype, shape: &[u64]) -> String {
    format!("cont name={name} dtype={dtype} shape={}", shape_str(shape))
}

/// The `begin` line that stands in a part where an array's `arr` line is in
/// the single file (the `arr` line itself is in the head).
pub fn begin_line(name: &str, dtype: crate::model::Dtype, shape: &[u64]) -> String {
    format!("begin name={name} dtype={dtype} shape={}", shape_str(shape))
}

/// The `begin` line that stands for the `arr` line `arr` (without LF).
pub(crate) fn begin_for(arr: &[u8]) -> PResult<String> {
    let a = ArrLine::parse(arr)?;
    Ok(begin_line(&a.name, a.dtype, &a.shape))
}

/// The sizes of a single-file text, known before it is written.
pub struct TextShape {
    /// Bytes of the header lines (`sign` included).
    pub header: u64,
    /// Each array, in order.
    pub arrays: Vec<ArrayText>,
    /// Bytes of the `audit` and `endwtxt` lines.
    pub tail: u64,
}

/// An array's text: its `arr` and `idx` lines (`lead` bytes), its chunks.
pub struct ArrayText {
    pub lead: u64,
    /// Bytes of the `arr` line, LF included (it goes to the head).
    pub arr_len: u64,
    pub layout: Layout,
    /// The array's [`cont_line`] and [`begin_line`].
    pub cont: String,
    pub begin: String,
}

/// A part of a split snapshot placed before it is written: the range of
/// the single text it holds and the lines that frame it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartSpan {
    pub ix: u64,
    /// Offsets in the single text.
    pub start: u64,
    pub end: u64,
    /// The `cont` line when the part continues an array.
    pub cont: Option<String>,
    /// The `arr` lines in the range: they go to the head, and a `begin`
    /// line takes each one's place in the part.
    pub arrs: Vec<ArrSlot>,
}

/// Where an `arr` line is in the single text, and what stands for it in a part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrSlot {
    /// Offset of the `arr` line in the single text.
    pub at: u64,
    /// Its bytes, LF included.
    pub len: u64,
    /// The [`begin_line`] in its place, without LF.
    pub begin: String,
}

impl PartSpan {
    /// The part file's first lines.
    pub fn opening(&self) -> Vec<u8> {
        let mut o = format!("{PART_MAGIC}{:06}\n", self.ix).into_bytes();
        if let Some(c) = &self.cont {
            o.extend_from_slice(c.as_bytes());
            o.push(b'\n');
        }
        o
    }

    /// The part file's last line.
    pub fn closing() -> &'static [u8] {
        PART_END
    }
}

/// Where the parts of the text `shape` describes go when it is split by
/// `size`: the same cuts [`split`] makes when it reads that text. `None`
/// when the text fits in one file.
pub fn place_parts(shape: &TextShape, size: u64) -> Result<Option<Vec<PartSpan>>> {
    let mut pos = shape.header;
    // The open part's bytes and lines so far (`None`: no part is open).
    let mut used: Option<u64> = None;
    let mut lines = 0;
    let mut spans: Vec<PartSpan> = Vec::new();
    let mut head = shape.header + shape.tail;
    let part_line = |bytes: u64, lines: u64| {
        PartLine { ix: 1, bytes: bytes + PART_END.len() as u64, lines: lines + 1, sha256: [0; 32] }.to_line().len()
            as u64
            + 1
    };
    for a in &shape.arrays {
        let begin_len = a.begin.len() as u64 + 1;
        let units = array_units(a.lead - a.arr_len + begin_len, &a.layout);
        let cont_len = a.cont.len() as u64 + 1;
        head += a.arr_len;
        for (i, (&u, cut)) in units.iter().zip(cuts(size, used, &units, cont_len)?).enumerate() {
            if cut {
                if let Some(last) = spans.last_mut() {
                    last.end = pos;
                    head += part_line(used.unwrap_or(0), lines);
                }
                let ix = spans.len() as u64 + 1;
                if ix > MAX_PARTS {
                    return Err(Error::usage(format!("more than {MAX_PARTS} parts: use a larger --part-size")));
                }
                let cont = (i > 0).then(|| a.cont.clone());
                spans.push(PartSpan { ix, start: pos, end: pos, cont, arrs: Vec::new() });
                used = Some(PART_FIRST_LEN + if i > 0 { cont_len } else { 0 });
                lines = 1 + (i > 0) as u64;
            }
            let last = spans.last_mut().expect("the first chunk opens a part");
            if i == 0 {
                last.arrs.push(ArrSlot { at: pos, len: a.arr_len, begin: a.begin.clone() });
            }
            used = used.map(|x| x + u);
            lines += unit_lines(&a.layout, i as u64);
            pos += u + if i == 0 { a.arr_len - begin_len } else { 0 };
        }
    }
    if let Some(last) = spans.last_mut() {
        last.end = pos;
        head += part_line(used.unwrap_or(0), lines);
    }
    if pos + shape.tail <= size || spans.is_empty() {
        return Ok(None);
    }
    check_head_size(head, size)?;
    Ok(Some(spans))
}

/// Lines of chunk `ix`'s text as [`array_units`] counts it: `ch`, base64,
/// `endch`; the first also the `begin` (and `idx`) line, the last `endarr`.
fn unit_lines(layout: &Layout, ix: u64) -> u64 {
    let (_, len) = layout.chunk_range(ix);
    let mut n = 2 + lines_for(len);
    if ix == 0 {
        n += 1 + layout.idx.is_some() as u64;
    }
    if ix + 1 == layout.chunk_count() {
        n += 1;
    }
    n
}

/// The text size of each chunk of an array, as a canonical writer lays it
/// out: the first includes the `begin` (or `arr`) and `idx` lines (`lead`
/// bytes), the last `endarr`.
fn array_units(lead: u64, layout: &Layout) -> Vec<u64> {
    let count = layout.chunk_count();
    let mut scratch = String::with_capacity(200);
    (0..count)
        .map(|ix| {
            let (off, len) = layout.chunk_range(ix);
            scratch.clear();
            ChLine { ix, off, len, sha256: [0; 32], crc32c: 0, lines: lines_for(len) }.write(&mut scratch);
            let full = len / 57;
            let rest = len % 57;
            let b64 = full * (76 + 3) + if rest > 0 { rest.div_ceil(3) * 4 + 3 } else { 0 };
            let mut u = scratch.len() as u64 + 1 + b64 + "endch\n".len() as u64;
            if ix == 0 {
                u += lead;
            }
            if ix + 1 == count {
                u += "endarr\n".len() as u64;
            }
            u
        })
        .collect()
}

/// Where the parts of a head are read from: files next to it, or blobs in
/// a Git tree or index.
pub trait PartSource {
    /// Opens part `ix` (a reader that owns what it reads).
    fn open(&self, ix: u64) -> Result<Box<dyn Read>>;
    /// The path that names part `ix` in messages.
    fn name(&self, ix: u64) -> PathBuf;
    /// Parts present beyond the `count` the head lists (a stray part is
    /// as suspect as a missing one).
    fn unlisted(&self, _count: u64) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// Part files in the folder next to the head.
pub struct PartFiles<'a> {
    pub dir: PathBuf,
    pub unseal: Option<&'a crate::crypto::armor::Unseal>,
}

impl PartSource for PartFiles<'_> {
    fn open(&self, ix: u64) -> Result<Box<dyn Read>> {
        let p = self.name(ix);
        match std::fs::metadata(&p) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(Error::check(Position::None, "missing part: the head lists it, the folder does not have it")
                    .in_file(&p))
            }
            // A folder, device or FIFO (`/dev/stdin`) is not a part: never read or waited on.
            Ok(m) if !m.is_file() => {
                Err(Error::check(Position::None, "not a regular file: the head lists a part here").in_file(&p))
            }
            _ => crate::crypto::armor::open_maybe_sealed(&p, self.unseal),
        }
    }

    fn name(&self, ix: u64) -> PathBuf {
        self.dir.join(part_name(ix))
    }

    fn unlisted(&self, count: u64) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut extra: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| part_ix(&e.file_name().to_string_lossy()).is_some_and(|ix| ix > count))
            .map(|e| e.path())
            .collect();
        extra.sort();
        extra
    }
}

/// The head of a split snapshot, parsed.
pub struct Head {
    /// The header lines and `sign`, as in the single file.
    pub prefix: Vec<u8>,
    pub parts: Vec<PartLine>,
    /// The `arr` lines (without LF) listed under each `part` line: the
    /// arrays that begin in that part, in order.
    pub arrs: Vec<Vec<Vec<u8>>>,
    /// Head line of each `part` line.
    pub part_lines: Vec<u64>,
    /// `audit` (if any) and `endwtxt`.
    pub tail: Vec<u8>,
}

impl Head {
    /// The head's line that lists part `ix` (1-based).
    pub fn part_line(&self, ix: u64) -> u64 {
        self.part_lines.get((ix as usize).wrapping_sub(1)).copied().unwrap_or(0)
    }

    /// The `begin` lines part `ix` must hold, for the arrays the head lists under it.
    pub fn begins(&self, ix: u64) -> Vec<String> {
        let arrs = self.arrs.get((ix as usize).wrapping_sub(1)).map_or(&[][..], |a| &a[..]);
        arrs.iter().map(|a| begin_for(a).unwrap_or_default()).collect()
    }

    /// The head's bytes, as [`head_bytes`] writes them.
    pub fn to_bytes(&self) -> Vec<u8> {
        head_bytes(&self.prefix, &self.parts, &self.arrs, &self.tail)
    }

    /// The header lines and `sign`, parsed (signature not checked).
    pub fn header(&self) -> Result<crate::wtxt::read::Header> {
        // What follows the header in the joined text is an `arr` line; a
        // stand-in end lets the reader see that no `sign` line is left.
        let text = [&self.prefix[..], b"endwtxt\n"].concat();
        crate::wtxt::read::read_head(&mut LineReader::new(&text[..]))
    }
}

/// Reads the start of a WTXT file: a head when the line after the header
/// (and `sign`) is a `part` line, else the single file, returned unread.
pub enum Opened<'a> {
    Single(Box<dyn Read + 'a>),
    Split(Head),
}

/// Looks at the first lines of `input` to tell a head from a single file.
pub fn open<'a>(input: Box<dyn Read + 'a>) -> Result<Opened<'a>> {
    let mut r = BufReader::with_capacity(1 << 16, input);
    let mut seen = Vec::with_capacity(1024);
    let mut starts = Vec::with_capacity(6);
    for _ in 0..6 {
        starts.push(seen.len());
        let n = (&mut r).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut seen).map_err(Error::read_failed)?;
        if n == 0 || seen.last() != Some(&b'\n') {
            break;
        }
    }
    let line = |i: usize| -> &[u8] { starts.get(i).map_or(&[][..], |&s| &seen[s..]) };
    let part_at = if line(4).starts_with(b"sign ") { 5 } else { 4 };
    if !line(part_at).starts_with(b"part ") || !line(0).starts_with(b"WTXT 1\n") {
        return Ok(Opened::Single(Box::new(io::Cursor::new(seen).chain(r))));
    }
    let prefix = seen[..starts[part_at]].to_vec();
    let mut rest = seen[starts[part_at]..].to_vec();
    r.take(MAX_HEAD).read_to_end(&mut rest).map_err(Error::read_failed)?;
    if rest.len() as u64 >= MAX_HEAD {
        return Err(Error::input(Position::None, format!("a head larger than {MAX_HEAD} bytes")));
    }
    parse_head(prefix, &rest, part_at as u64 + 1).map(Opened::Split)
}

fn parse_head(prefix: Vec<u8>, rest: &[u8], first: u64) -> Result<Head> {
    if rest.last() != Some(&b'\n') {
        return Err(check_at(first, "the head ends inside a line (truncated?): expected `endwtxt`"));
    }
    let mut parts = Vec::new();
    let mut arrs: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut part_lines = Vec::new();
    let mut tail = Vec::new();
    let mut n = first;
    for l in rest[..rest.len() - 1].split(|&b| b == b'\n') {
        if !tail.is_empty() && tail.ends_with(b"endwtxt\n") {
            return Err(check_at(n, "text after `endwtxt`"));
        }
        if l.starts_with(b"part ") && tail.is_empty() {
            let p = PartLine::parse(l).map_err(|m| check_at(n, m))?;
            if p.ix > MAX_PARTS {
                return Err(check_at(n, format!("part ix={:06}: a head lists at most {MAX_PARTS} parts", p.ix)));
            }
            if p.ix != parts.len() as u64 + 1 {
                return Err(check_at(n, format!("expected part ix={:06}, found ix={:06}", parts.len() + 1, p.ix)));
            }
            parts.push(p);
            part_lines.push(n);
            arrs.push(Vec::new());
        } else if l.starts_with(b"arr ") && tail.is_empty() && !parts.is_empty() {
            crate::wtxt::read::check_text_line(l).map_err(|m| check_at(n, m))?;
            begin_for(l).map_err(|m| check_at(n, m))?;
            arrs.last_mut().expect("after a part line").push(l.to_vec());
        } else if (l.starts_with(b"audit ") && tail.is_empty()) || l == b"endwtxt" {
            crate::wtxt::read::check_text_line(l).map_err(|m| check_at(n, m))?;
            tail.extend_from_slice(l);
            tail.push(b'\n');
        } else {
            let what = "expected a `part`, `arr`, `audit` or `endwtxt` line";
            return Err(check_at(n, format!("{what}, found `{}`", lossy(l, 40))));
        }
        n += 1;
    }
    if !tail.ends_with(b"endwtxt\n") {
        return Err(check_at(n, "file ends early: expected `endwtxt`"));
    }
    Ok(Head { prefix, parts, arrs, part_lines, tail })
}

/// Where a line of the joined text comes from, for messages.
#[derive(Default, Debug)]
pub struct LineMap {
    prefix_lines: u64,
    /// (first joined line, body lines, part file, its line of the first body line)
    parts: Vec<(u64, u64, PathBuf, u64)>,
    /// (joined line, head line) of each `arr` line put in for a `begin` line.
    arrs: Vec<(u64, u64)>,
    head_lines_before_tail: u64,
    total_parts: usize,
}

impl LineMap {
    /// The part file (`None`: the head) and its line for line `n` of the
    /// joined text; `None` when `n` is the head's line `n`.
    pub fn locate(&self, n: u64) -> Option<(Option<PathBuf>, u64)> {
        if n <= self.prefix_lines {
            return None;
        }
        if let Ok(i) = self.arrs.binary_search_by_key(&n, |&(j, _)| j) {
            return Some((None, self.arrs[i].1));
        }
        for (start, count, path, local) in &self.parts {
            if n >= *start && n < start + count {
                return Some((Some(path.clone()), local + (n - start)));
            }
        }
        let after = self.parts.last().map_or(self.prefix_lines + 1, |(s, c, _, _)| s + c);
        if self.parts.len() == self.total_parts && n >= after {
            // The head's tail: its lines follow the part lines.
            return Some((None, self.head_lines_before_tail + (n - after) + 1));
        }
        None
    }
}

/// A shared [`LineMap`], filled in as parts are opened.
pub type SharedMap = Arc<Mutex<LineMap>>;

/// Faults of parts found while joining (missing, truncated, not matching
/// the head), when the reader is told to go on past them.
pub type SharedFaults = Arc<Mutex<Vec<Error>>>;

/// Reads a split snapshot as the single file it stands for, checking each
/// part against the head (size, lines, SHA-256, framing) as it goes.
pub struct Joined<'a> {
    queue: VecDeque<Segment>,
    parts: Vec<PartLine>,
    /// Each part's `arr` lines, taken by its reader.
    arrs: Vec<VecDeque<Vec<u8>>>,
    part_lines: Vec<u64>,
    source: Box<dyn PartSource + 'a>,
    current: Option<PartReader>,
    map: SharedMap,
    /// `None`: a faulty part stops the read. `Some`: faults are recorded
    /// and the part's body is still given (recover, verify's full report).
    faults: Option<SharedFaults>,
    /// False when the reader's output is proven whole afterwards (see
    /// [`Joined::without_part_hashes`]).
    hash_parts: bool,
    joined_lines: u64,
    /// Whether the part read last ended inside an array (`None`: not known,
    /// its read failed), and the `arr` line of the array begun last.
    prev_inside: Option<bool>,
    open_arr: Option<Vec<u8>>,
}

enum Segment {
    Bytes(io::Cursor<Vec<u8>>),
    Part(usize),
}

impl<'a> Joined<'a> {
    /// Joins `head` with the parts `source` gives.
    pub fn new(head: Head, source: Box<dyn PartSource + 'a>, faults: Option<SharedFaults>) -> Joined<'a> {
        let prefix_lines = head.prefix.iter().filter(|&&b| b == b'\n').count() as u64;
        let arr_count: usize = head.arrs.iter().map(Vec::len).sum();
        let head_lines_before_tail = head.part_line(1) + (head.parts.len() + arr_count) as u64 - 1;
        let mut queue = VecDeque::with_capacity(head.parts.len() + 2);
        queue.push_back(Segment::Bytes(io::Cursor::new(head.prefix)));
        queue.extend((0..head.parts.len()).map(Segment::Part));
        queue.push_back(Segment::Bytes(io::Cursor::new(head.tail)));
        let map = LineMap { prefix_lines, head_lines_before_tail, total_parts: head.parts.len(), ..Default::default() };
        Joined {
            queue,
            parts: head.parts,
            arrs: head.arrs.into_iter().map(VecDeque::from).collect(),
            part_lines: head.part_lines,
            source,
            current: None,
            map: Arc::new(Mutex::new(map)),
            faults,
            hash_parts: true,
            joined_lines: prefix_lines,
            prev_inside: Some(false),
            open_arr: None,
        }
    }

    /// Leaves the parts' SHA-256 unchecked (framing, size and line count
    /// are still checked). Only for a reader that proves everything it
    /// took from the parts by other means: `delta apply` verifies the
    /// target it builds against the delta's `target_sha256_all`, which
    /// covers every byte a part gave, and hashing the base's parts again
    /// would cost a third of a verify.
    pub fn without_part_hashes(mut self) -> Joined<'a> {
        self.hash_parts = false;
        self
    }

    /// The line map, to name a part and its line in messages.
    pub fn map(&self) -> SharedMap {
        self.map.clone()
    }

    /// Total size of the parts, as the head says.
    pub fn parts_len(&self) -> u64 {
        self.parts.iter().map(|p| p.bytes).sum()
    }

    fn fault(&self, e: Error) -> io::Result<()> {
        match &self.faults {
            Some(f) => {
                f.lock().expect("faults").push(e);
                Ok(())
            }
            None => Err(io::Error::other(e)),
        }
    }

    fn open_part(&mut self, i: usize) -> io::Result<Option<PartReader>> {
        let p = self.parts[i];
        let name = self.source.name(p.ix);
        let head_line = self.part_lines[i];
        let inner = match self.source.open(p.ix) {
            Ok(r) => r,
            Err(e) => {
                self.fault(e.in_file(&name))?;
                return Ok(None);
            }
        };
        let mut pr = PartReader::new(inner, p, name.clone(), head_line, self.hash_parts);
        let inside = self.prev_inside.take();
        let cont = match pr.read_framing() {
            Ok(c) => c,
            Err(e) => {
                self.fault(e)?;
                return Ok(None);
            }
        };
        if let Some(e) = inside.and_then(|inside| self.cont_fault(inside, pr.cont.as_deref(), &name)) {
            self.fault(e)?;
        }
        let first_body = 2 + cont as u64;
        pr.splice = Splice {
            arrs: std::mem::take(&mut self.arrs[i]),
            next_head_line: head_line + 1,
            map: self.map.clone(),
            joined_start: self.joined_lines + 1,
            first_body,
            ..Default::default()
        };
        let body_lines = p.lines.saturating_sub(first_body);
        let mut m = self.map.lock().expect("map");
        m.parts.push((self.joined_lines + 1, body_lines, name, first_body));
        self.joined_lines += body_lines;
        Ok(Some(pr))
    }
}

impl Joined<'_> {
    /// Why a part's `cont` line (`got`) is wrong, when it is: a part starts
    /// with one exactly when the part before it ends inside an array
    /// (`inside`), naming that array as its `arr` line does.
    fn cont_fault(&self, inside: bool, got: Option<&[u8]>, name: &Path) -> Option<Error> {
        let want = match (inside, &self.open_arr) {
            (false, _) => None,
            (true, Some(arr)) => {
                let a = ArrLine::parse(arr).ok()?;
                Some(cont_line(&a.name, a.dtype, &a.shape))
            }
            // The earlier form: `arr` lines in the parts, none put in from
            // the head; its `cont` lines are checked for presence only.
            (true, None) if got.is_some() => return None,
            (true, None) => Some("cont ...".to_string()),
        };
        let m = match (want, got) {
            (Some(w), Some(g)) if w.as_bytes() != g => {
                format!("expected `{w}` (the array the part before ends inside), found `{}`", lossy(g, 60))
            }
            (Some(w), None) => format!("expected `{w}`: the part before ends inside that array"),
            (None, Some(g)) => {
                format!("`{}`: the part before ends after `endarr`, so no `cont` line belongs here", lossy(g, 60))
            }
            _ => return None,
        };
        Some(check_at(2, m).in_file(name))
    }
}

impl Read for Joined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if let Some(cur) = &mut self.current {
                match cur.read(buf) {
                    Ok(0) => {
                        let mut cur = self.current.take().expect("current");
                        self.prev_inside = Some(cur.ends_inside_array());
                        if let Some(a) = cur.splice.last_arr.take() {
                            self.open_arr = Some(a);
                        }
                        if let Err(e) = cur.finish() {
                            self.fault(e)?;
                        }
                        continue;
                    }
                    Ok(n) => {
                        for e in std::mem::take(&mut cur.splice.faults) {
                            self.fault(e)?;
                        }
                        return Ok(n);
                    }
                    Err(e) => {
                        let name = cur.name.clone();
                        self.current = None;
                        let e = Error::read_failed(e).in_file(name);
                        self.fault(e)?;
                        continue;
                    }
                }
            }
            match self.queue.front_mut() {
                None => return Ok(0),
                Some(Segment::Bytes(c)) => {
                    let n = c.read(buf)?;
                    if n > 0 {
                        return Ok(n);
                    }
                    self.queue.pop_front();
                }
                Some(Segment::Part(i)) => {
                    let i = *i;
                    self.queue.pop_front();
                    self.current = self.open_part(i)?;
                    if i + 1 == self.parts.len() {
                        for p in self.source.unlisted(self.parts.len() as u64) {
                            let e = Error::check(
                                Position::None,
                                format!("a part the head does not list (it lists {})", self.parts.len()),
                            );
                            self.fault(e.in_file(p))?;
                        }
                    }
                }
            }
        }
    }
}

/// One part's body, with its framing checked and its bytes hashed.
struct PartReader {
    inner: BufReader<io::Take<Box<dyn Read>>>,
    want: PartLine,
    name: PathBuf,
    head_line: u64,
    /// `None` when the part's hash is not checked.
    sha: Option<Sha256>,
    bytes: u64,
    lines: u64,
    /// The last bytes read, held back until EOF shows whether they are `endpart`.
    held: Vec<u8>,
    /// Body bytes read with the framing, given first.
    pending: io::Cursor<Vec<u8>>,
    eof: bool,
    /// Puts the head's `arr` lines in place of the `begin` lines.
    splice: Splice,
    /// The part's `cont` line (without LF), if it has one.
    cont: Option<Vec<u8>>,
    /// The last bytes of the body given: whether it ends after `endarr`.
    given_tail: Vec<u8>,
}

/// The state of putting `arr` lines in for `begin` lines as a part's body
/// streams. The body is given as read, straight into the caller's buffer;
/// only from a line that may be a `begin` line on are bytes held here
/// (`carry`), until the line is whole.
#[derive(Default)]
struct Splice {
    /// The `arr` lines still to come in this part.
    arrs: VecDeque<Vec<u8>>,
    /// The head's line of the next of them.
    next_head_line: u64,
    map: SharedMap,
    /// The joined text's line of the body's first line, and that line's
    /// number in the part.
    joined_start: u64,
    first_body: u64,
    /// True when the next byte given starts a line.
    mid_line: bool,
    /// Body bytes read, not yet given; they start where a `begin` line may.
    carry: Vec<u8>,
    /// An `arr` line being given.
    out: io::Cursor<Vec<u8>>,
    /// `begin` lines that do not match the head.
    faults: Vec<Error>,
    /// The last `arr` line put in.
    last_arr: Option<Vec<u8>>,
}

const BEGIN: &[u8] = b"begin ";

/// Where in `s` the first line that is, or may turn out to be, a `begin`
/// line starts (`s.len()` when none). `line_start`: `s` starts a line.
fn begin_at(s: &[u8], line_start: bool) -> usize {
    let maybe = |p: usize| {
        let t = &s[p..];
        if t.len() >= BEGIN.len() {
            t.starts_with(BEGIN)
        } else {
            BEGIN.starts_with(t)
        }
    };
    if line_start && maybe(0) && !s.is_empty() {
        return 0;
    }
    if let Some(i) = memchr::memmem::find(s, b"\nbegin ") {
        return i + 1;
    }
    // A line cut off at the end of `s` may be the start of one.
    match memchr::memrchr(b'\n', s) {
        Some(i) if i + 1 < s.len() && maybe(i + 1) => i + 1,
        _ => s.len(),
    }
}

impl PartReader {
    fn new(inner: Box<dyn Read>, want: PartLine, name: PathBuf, head_line: u64, hash: bool) -> PartReader {
        PartReader {
            // Never read past what the head declares (and the one byte that
            // shows a part is longer): a huge part costs no more than its size.
            inner: BufReader::with_capacity(1 << 20, inner.take(want.bytes.saturating_add(1))),
            want,
            name,
            head_line,
            sha: hash.then(Sha256::new),
            bytes: 0,
            lines: 0,
            held: Vec::with_capacity(PART_END.len() * 2),
            pending: io::Cursor::new(Vec::new()),
            eof: false,
            splice: Splice::default(),
            cont: None,
            given_tail: Vec::new(),
        }
    }

    /// True when the body given so far ends inside an array (not after
    /// `endarr`): the next part must then start with that array's `cont`.
    fn ends_inside_array(&self) -> bool {
        !self.given_tail.ends_with(b"endarr\n")
    }

    fn take_line(&mut self) -> Result<Vec<u8>> {
        let mut l = Vec::new();
        (&mut self.inner).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut l).map_err(Error::read_failed)?;
        if let Some(h) = &mut self.sha {
            h.update(&l);
        }
        self.bytes += l.len() as u64;
        self.lines += l.iter().filter(|&&b| b == b'\n').count() as u64;
        Ok(l)
    }

    /// Checks the first line (and reads `cont`); true when a `cont` line is there.
    fn read_framing(&mut self) -> Result<bool> {
        let first = self.take_line()?;
        let want = format!("{PART_MAGIC}{:06}\n", self.want.ix);
        if first != want.as_bytes() {
            return Err(check_at(
                1,
                format!(
                    "expected `{}`, found `{}`: not part {} of this head",
                    want.trim_end(),
                    lossy(first.strip_suffix(b"\n").unwrap_or(&first), 40),
                    self.want.ix
                ),
            )
            .in_file(&self.name));
        }
        let second = self.take_line()?;
        if second.starts_with(b"cont ") {
            self.cont = Some(second.strip_suffix(b"\n").unwrap_or(&second).to_vec());
            return Ok(true);
        }
        // `held` keeps at most the bytes that may be `endpart`; a body line
        // is given first. (Found by the `split` fuzz target.)
        if second == PART_END {
            self.held = second;
        } else {
            self.pending = io::Cursor::new(second);
        }
        Ok(false)
    }

    /// At EOF: the part must end with `endpart` and match the head.
    fn finish(mut self) -> Result<()> {
        let fail = |what: String| {
            Err(Error::check(
                Position::None,
                format!("part {:06} does not match the head (line {}): {what}", self.want.ix, self.head_line),
            )
            .in_file(&self.name))
        };
        if self.held != PART_END {
            return fail("it does not end with `endpart` (truncated?)".into());
        }
        if !self.splice.arrs.is_empty() {
            return fail(format!(
                "the head lists {} more array(s) beginning in it (line {}) than it has `begin` lines",
                self.splice.arrs.len(),
                self.splice.next_head_line
            ));
        }
        let sha: Option<Hash> = self.sha.take().map(|h| h.finalize().into());
        if self.bytes != self.want.bytes || self.lines != self.want.lines {
            return fail(format!(
                "{} bytes in {} lines, the head says {} in {} (truncated or changed?)",
                self.bytes, self.lines, self.want.bytes, self.want.lines
            ));
        }
        if sha.is_some_and(|s| s != self.want.sha256) {
            return fail("its SHA-256 differs: it was changed, or comes from another generation".into());
        }
        Ok(())
    }
}

impl Read for PartReader {
    /// The body with the head's `arr` lines in place of its `begin` lines.
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.read_spliced(out)?;
        let keep = 8usize;
        self.given_tail.extend_from_slice(&out[n.saturating_sub(keep)..n]);
        let extra = self.given_tail.len().saturating_sub(keep);
        self.given_tail.drain(..extra);
        Ok(n)
    }
}

impl PartReader {
    fn read_spliced(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.splice.out.read(out)?;
            if n > 0 {
                return Ok(n);
            }
            if !self.splice.carry.is_empty() {
                match self.give_carry(out)? {
                    0 => continue,
                    n => return Ok(n),
                }
            }
            let n = self.read_body(out)?;
            if n == 0 {
                return Ok(0);
            }
            let k = begin_at(&out[..n], !self.splice.mid_line);
            if k == n {
                self.splice.mid_line = out[n - 1] != b'\n';
                return Ok(n);
            }
            self.splice.carry.extend_from_slice(&out[k..n]);
            if k > 0 {
                self.splice.mid_line = false; // `out[k - 1]` is LF
                return Ok(k);
            }
        }
    }
}

impl PartReader {
    /// Gives what `carry` holds: the line at its start whole when it is a
    /// `begin` line (its `arr` line goes to `splice.out`; returns 0), else
    /// the bytes up to the next line that may be one.
    fn give_carry(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let line_start = !self.splice.mid_line;
        // Read on until the line at the start is whole, or cannot be `begin`.
        while line_start && memchr::memchr(b'\n', &self.splice.carry).is_none() {
            let c = &self.splice.carry;
            if (c.len() >= BEGIN.len() && !c.starts_with(BEGIN)) || c.len() > MAX_LINE {
                break;
            }
            let mut more = vec![0u8; 1 << 16];
            let m = self.read_body(&mut more)?;
            if m == 0 {
                break;
            }
            self.splice.carry.extend_from_slice(&more[..m]);
        }
        let c = &self.splice.carry;
        if line_start && c.starts_with(BEGIN) {
            if let Some(e) = memchr::memchr(b'\n', c) {
                let line = c[..e].to_vec();
                // Its line in the part: those read, less those not given yet.
                let ahead = [&self.held[..], &self.pending.get_ref()[self.pending.position() as usize..], c]
                    .iter()
                    .map(|b| memchr::memchr_iter(b'\n', b).count() as u64)
                    .sum::<u64>();
                self.splice.carry.drain(..=e);
                self.put_arr(&line, self.lines - ahead + 1);
                return Ok(0);
            }
        }
        // Not a `begin` line (or the part ends inside it): the line goes as
        // it is, and what follows up to the next line that may be one.
        let e = memchr::memchr(b'\n', c).map_or(c.len(), |e| e + 1);
        let give = e + begin_at(&c[e..], true);
        let m = give.min(out.len());
        out[..m].copy_from_slice(&c[..m]);
        self.splice.mid_line = out[m - 1] != b'\n';
        self.splice.carry.drain(..m);
        Ok(m)
    }

    /// The `arr` line for the `begin` line `line` (line `local` of the part).
    fn put_arr(&mut self, line: &[u8], local: u64) {
        let sp = &mut self.splice;
        let joined = sp.joined_start + local.saturating_sub(sp.first_body);
        let mut text = match sp.arrs.pop_front() {
            Some(arr) => {
                let want = begin_for(&arr).unwrap_or_default();
                if line != want.as_bytes() {
                    let m = format!(
                        "expected `{}` (the array the head lists on its line {}), found `{}`",
                        lossy(want.as_bytes(), 60),
                        sp.next_head_line,
                        lossy(line, 60)
                    );
                    sp.faults.push(check_at(local, m).in_file(&self.name));
                }
                sp.map.lock().expect("map").arrs.push((joined, sp.next_head_line));
                sp.next_head_line += 1;
                sp.last_arr = Some(arr.clone());
                arr
            }
            None => {
                let m = format!("`{}`: the head lists no more arrays beginning in this part", lossy(line, 60));
                sp.faults.push(check_at(local, m).in_file(&self.name));
                line.to_vec()
            }
        };
        text.push(b'\n');
        sp.out = io::Cursor::new(text);
        sp.mid_line = false;
    }

    /// Reads the body straight into `out`, keeping the last bytes back
    /// until EOF shows whether they are `endpart`: no copy but those few bytes.
    fn read_body(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.pending.read(out)?;
        if n > 0 {
            return Ok(n);
        }
        let keep = PART_END.len();
        if self.eof || out.len() <= keep {
            if self.eof {
                return Ok(0);
            }
            // A tiny buffer: go through `pending`.
            let mut buf = vec![0u8; 64 << 10];
            let m = self.read_body(&mut buf)?;
            buf.truncate(m);
            self.pending = io::Cursor::new(buf);
            return self.pending.read(out);
        }
        loop {
            let h = self.held.len();
            out[..h].copy_from_slice(&self.held);
            let n = self.inner.read(&mut out[h..])?;
            if n == 0 {
                self.eof = true;
                return Ok(0); // `held` stays for the check at `finish`
            }
            let fresh = &out[h..h + n];
            if let Some(h) = &mut self.sha {
                h.update(fresh);
            }
            self.bytes += n as u64;
            self.lines += memchr::memchr_iter(b'\n', fresh).count() as u64;
            let total = h + n;
            let give = total.saturating_sub(keep);
            self.held.clear();
            self.held.extend_from_slice(&out[give..total]);
            if give > 0 {
                return Ok(give);
            }
        }
    }
}
