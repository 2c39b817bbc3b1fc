//! The strict streaming reader. It enforces every line rule and the file's
//! structure, decodes base64 (checking each line's parity nibble and each
//! chunk's CRC32C) and hands decoded bytes to a [`Visitor`]. It never holds
//! more than one block of decoded bytes and one read buffer, whatever the
//! file size. Digests that span chunks or arrays are the visitor's work.

use std::collections::VecDeque;
use std::io::Read;

use crate::error::{check_at, Error, Position, Reason, Result};
use crate::format::chunk::{ChunkDecoder, Fault};
use crate::format::decode::{Pool, MAX_POOLED_TEXT};
use crate::format::layout::{last_line_width, Layout};
use crate::format::syntax::{
    body_text_len, lines_for, lossy, ArrLine, Audit, Cap, ChLine, IdxLine, Meta, Root, SignLine, B64_WIDTH,
    CAP_EXT_DTYPES, END, MAGIC, RAW_PER_LINE,
};
use crate::limits::BLOCK;

pub use crate::format::lines::{check_text_line, LineReader, SliceLines};

/// The header of a WTXT file.
#[derive(Clone, Debug)]
pub struct Header {
    /// The `meta` line.
    pub meta: Meta,
    /// The `cap` line.
    pub cap: Cap,
    /// The `root` line.
    pub root: Root,
    /// The `sign` line, if any.
    pub sign: Option<SignLine>,
    /// Lines 1-4 with their LFs: what a signature covers.
    pub signed_bytes: Vec<u8>,
    /// Number of header lines (4, or 5 with `sign`).
    pub lines: u64,
}

impl Header {
    /// The digest form its `cap` line announces (readers refuse a form
    /// they do not know before a header reaches anyone).
    pub fn digest(&self) -> crate::format::syntax::DigestForm {
        self.cap.digest_form().unwrap_or_default()
    }
}

/// The start of an array as the reader saw it.
#[derive(Clone, Debug)]
pub struct ArrayStart {
    /// Line number of the `arr` line.
    pub line: u64,
    /// The `arr` line.
    pub arr: ArrLine,
    /// The exact `arr` line bytes, without LF (what `sha256_all` covers).
    pub text: Vec<u8>,
    /// Its chunk layout.
    pub layout: Layout,
}

/// Receives what the reader finds, in file order.
pub trait Visitor {
    /// The header, once parsed.
    fn header(&mut self, _h: &Header) -> Result<()> {
        Ok(())
    }
    /// An array begins.
    fn array(&mut self, _a: &ArrayStart) -> Result<()> {
        Ok(())
    }
    /// Whether chunk `ch` of `a` must be decoded. A chunk it does not need
    /// has its lines counted and is told as a chunk with no data whose
    /// digest is its `ch` line's claim ([`Visitor::chunk_digest`]),
    /// so only a visitor that proves that claim by other means (the tree
    /// form's array digest) may say no. Asked as the chunk is read, which
    /// may be before the visitor hears of `a`.
    fn needs(&mut self, _a: &ArrayStart, _ch: &ChLine) -> bool {
        true
    }
    /// Whether the array of `arr` may be passed over whole: nothing of it
    /// read but its `arr` line (its chunks counted from its layout, or
    /// left out of the text altogether, [`crate::fs::Skip::omits_arrays`]),
    /// told as [`Visitor::passed_over`] in place of `array` ... `array_end`.
    /// Only a visitor for which the `arr` line alone is bound (the tree
    /// form's root covers the `arr` lines) and which wants none of the
    /// array's bytes may say yes.
    fn passes_over(&mut self, _arr: &ArrLine) -> bool {
        false
    }
    /// An array passed over whole ([`Visitor::passes_over`]): its `arr`
    /// line (`text`, without LF) on line `line`.
    fn passed_over(&mut self, _line: u64, _arr: &ArrLine, _text: &[u8]) {}
    /// A chunk begins.
    fn chunk(&mut self, _line: u64, _ch: &ChLine) {}
    /// An empty buffer to decode the next block into.
    fn buffer(&mut self) -> Vec<u8> {
        Vec::new()
    }
    /// The next decoded bytes of the current chunk (never more than `BLOCK`).
    fn data(&mut self, buf: Vec<u8>);
    /// The chunk's SHA-256, computed as it was decoded (before its data,
    /// and only where a decoding thread computed it).
    fn chunk_digest(&mut self, _sha256: &crate::crypto::digest::Hash) {}
    /// The chunk ended; `bad` if parity, base64 or CRC failed (already reported).
    fn chunk_end(&mut self, _line: u64, _ch: &ChLine, _bad: bool) {}
    /// The array ended.
    fn array_end(&mut self) {}
    /// A damaged chunk: reading goes on, the chunk is bad.
    fn problem(&mut self, line: u64, message: String);
    /// The `audit` line.
    fn audit(&mut self, _line: u64, _a: &Audit) {}
}

/// What follows a header: its `sign` line (parsed into the header; the
/// line's bytes here), or the next line, with its number.
pub(crate) enum AfterHeader {
    Sign(Vec<u8>),
    Next(u64, Vec<u8>),
}

/// Reads the line after the header: a `sign` line goes into `header`.
pub(crate) fn read_sign<R: Read>(lines: &mut LineReader<R>, header: &mut Header) -> Result<AfterHeader> {
    let (n, l) = lines.expect_line("a `sign` line, an `arr` line or `endwtxt`")?;
    if !l.starts_with(b"sign ") {
        return Ok(AfterHeader::Next(n, l.to_vec()));
    }
    if header.root == Root::Pending {
        return Err(check_at(n, "a WTXT-S (root_pending) carries no `sign` line; its signature is in the WSUM"));
    }
    header.sign = Some(SignLine::parse(l).map_err(|m| check_at(n, m))?);
    header.lines = 5;
    Ok(AfterHeader::Sign(l.to_vec()))
}

/// Reads the header and its `sign` line, if any: all a signature covers,
/// without reading the arrays (`--prev`, `wtxt log`, chaining in Git).
pub fn read_head<R: Read>(lines: &mut LineReader<R>) -> Result<Header> {
    let mut header = read_header(lines)?;
    read_sign(lines, &mut header)?;
    Ok(header)
}

/// Reads just the header of a WTXT file.
pub fn read_header<R: Read>(lines: &mut LineReader<R>) -> Result<Header> {
    // Whatever goes wrong on the first line, the file is not a WTXT at all:
    // unusable input (exit 2), not a damaged snapshot.
    let (n, l) = lines.expect_line("`WTXT 1`").map_err(|e| match e.kind() {
        crate::error::Kind::Check if e.path().is_none() => Error::input(
            Position::Line(1),
            format!("not a WTXT file: {}", e.message().trim_start_matches("not a WTXT file: ")),
        ),
        _ => e,
    })?;
    if l.starts_with(b"WTXT part ix=") {
        return Err(Error::input(
            Position::Line(n),
            "this is a part of a split snapshot: give its head (the file next to the `.parts` folder)",
        ));
    }
    if l != MAGIC.as_bytes() {
        // Not a WTXT at all: unusable input rather than a failed check.
        return Err(Error::input(
            Position::Line(n),
            format!("expected `{MAGIC}`, found `{}`: not a WTXT file", lossy(l, 40)),
        ));
    }
    let mut signed = Vec::with_capacity(512);
    signed.extend_from_slice(l);
    signed.push(b'\n');
    // Each header line is parsed and kept: the signature covers them.
    fn take<R: Read, T>(
        lines: &mut LineReader<R>,
        signed: &mut Vec<u8>,
        what: &str,
        parse: fn(&[u8]) -> std::result::Result<T, Reason>,
    ) -> Result<T> {
        let (n, l) = lines.expect_line(what)?;
        let v = parse(l).map_err(|m| check_at(n, m))?;
        signed.extend_from_slice(l);
        signed.push(b'\n');
        Ok(v)
    }
    let meta = take(lines, &mut signed, "the `meta` line", Meta::parse)?;
    let cap = take(lines, &mut signed, "the `cap` line", Cap::parse)?;
    // A digest form this reader does not know: unusable, never checked
    // the 1.1 way by mistake.
    cap.digest_form().map_err(|m| Error::input(Position::Line(lines.line_no()), m))?;
    let root = take(lines, &mut signed, "the `root` line", Root::parse)?;
    Ok(Header { meta, cap, root, sign: None, signed_bytes: signed, lines: 4 })
}

/// Reads a whole WTXT file, checking structure, line rules, parity and CRC,
/// and reports to `v`. Damage inside a chunk's base64 is a `problem` and
/// reading goes on; anything that breaks the structure ends it with an error.
pub fn read<R: Read, V: Visitor>(input: R, v: &mut V) -> Result<Header> {
    read_on(LineReader::new(input), v, 0)
}

/// [`read`], the chunks' base64 decoded on `decoders` threads beside this
/// one (0: on this one, as it reads): `v` hears exactly what [`read`] would
/// tell it, in the same order, and each chunk's SHA-256 besides
/// ([`Visitor::chunk_digest`]), which the threads compute as they decode.
/// It reads ahead of the visitor by at most `2 * decoders + 2` chunks, each
/// of at most [`MAX_POOLED_TEXT`] of text (larger ones are decoded here).
pub fn read_on<R: Read, V: Visitor>(lines: LineReader<R>, v: &mut V, decoders: usize) -> Result<Header> {
    if decoders == 0 {
        return read_to(lines, &mut Out { v, pool: None, queue: VecDeque::new() });
    }
    Pool::with(decoders, |pool| read_to(lines, &mut Out { v, pool: Some(pool), queue: VecDeque::new() }))
}

/// What the reader has read and the visitor not yet heard: chunks being
/// decoded on the pool, and the array boundaries around them.
enum Event {
    Array(ArrayStart),
    ArrayEnd,
    /// A chunk whose job is `id`; `end`: its `endch` was found (else the
    /// reader stopped there, and the visitor hears no `chunk_end`).
    Chunk {
        id: u64,
        line: u64,
        ch: ChLine,
        end: bool,
    },
    /// An array passed over whole ([`Visitor::passes_over`]).
    PassedOver {
        line: u64,
        arr: ArrLine,
        text: Vec<u8>,
    },
    /// A chunk the visitor does not need ([`Visitor::needs`]), read past.
    Skipped {
        line: u64,
        ch: ChLine,
    },
}

/// The visitor, and what it has yet to hear, in order.
struct Out<'v, 'p, V> {
    v: &'v mut V,
    pool: Option<&'p Pool>,
    queue: VecDeque<Event>,
}

impl<V: Visitor> Out<'_, '_, V> {
    fn array(&mut self, a: ArrayStart) -> Result<()> {
        if self.queue.is_empty() {
            return self.v.array(&a);
        }
        self.queue.push_back(Event::Array(a));
        Ok(())
    }

    fn array_end(&mut self) {
        if self.queue.is_empty() {
            return self.v.array_end();
        }
        self.queue.push_back(Event::ArrayEnd);
    }

    fn passed_over(&mut self, line: u64, arr: ArrLine, text: Vec<u8>) {
        if self.queue.is_empty() {
            return self.v.passed_over(line, &arr, &text);
        }
        self.queue.push_back(Event::PassedOver { line, arr, text });
    }

    /// Queues a chunk decoded on the pool; hands the visitor what is due
    /// once too much waits.
    fn chunk(&mut self, pool: &Pool, line: u64, ch: ChLine, text: Vec<u8>, end: bool) -> Result<()> {
        let id = pool.submit(ch, text);
        self.queue.push_back(Event::Chunk { id, line, ch, end });
        // Read ahead of what the visitor heard: enough to keep every
        // thread busy, no more (each holds a chunk's text and bytes).
        while self.queue.len() > 2 * pool.workers() + 2 {
            self.deliver_front()?;
        }
        Ok(())
    }

    /// A chunk read past undecoded: told as one whose digest is its
    /// `ch` line's and whose bytes never come.
    fn skipped(&mut self, line: u64, ch: ChLine) {
        if self.queue.is_empty() {
            return tell_skipped(self.v, line, &ch);
        }
        self.queue.push_back(Event::Skipped { line, ch });
    }

    /// Everything queued, to the visitor.
    fn drain(&mut self) -> Result<()> {
        while !self.queue.is_empty() {
            self.deliver_front()?;
        }
        Ok(())
    }

    fn deliver_front(&mut self) -> Result<()> {
        let Some(e) = self.queue.pop_front() else { return Ok(()) };
        match e {
            Event::Array(a) => self.v.array(&a)?,
            Event::ArrayEnd => self.v.array_end(),
            Event::PassedOver { line, arr, text } => self.v.passed_over(line, &arr, &text),
            Event::Skipped { line, ch } => tell_skipped(self.v, line, &ch),
            Event::Chunk { id, line, ch, end } => {
                let pool = self.pool.expect("a queued chunk came from the pool");
                let d = pool.wait(id);
                self.v.chunk(line, &ch);
                self.v.chunk_digest(&d.sha256);
                for block in d.blocks {
                    self.v.data(block);
                    // One block in, one out: the visitor's spares feed
                    // the pool and neither grows.
                    pool.give_back(self.v.buffer());
                }
                report_faults(self.v, line, &ch, &d.faults);
                if end {
                    self.v.chunk_end(line, &ch, !d.faults.is_empty());
                }
            }
        }
        Ok(())
    }
}

/// What the visitor hears of a chunk read past: its `ch` line's digest,
/// no data.
fn tell_skipped<V: Visitor>(v: &mut V, line: u64, ch: &ChLine) {
    v.chunk(line, ch);
    v.chunk_digest(&ch.sha256);
    v.chunk_end(line, ch, false);
}

fn read_to<R: Read, V: Visitor>(lines: LineReader<R>, out: &mut Out<'_, '_, V>) -> Result<Header> {
    // Whatever stops the reading, the visitor first hears what was read
    // before it, as the reader on one thread would have told it.
    let read = read_all(lines, out);
    let told = out.drain();
    let header = read?;
    told.map(|()| header)
}

fn read_all<R: Read, V: Visitor>(mut lines: LineReader<R>, out: &mut Out<'_, '_, V>) -> Result<Header> {
    let mut header = read_header(&mut lines)?;
    let mut pending = match read_sign(&mut lines, &mut header)? {
        AfterHeader::Next(n, l) => Some((n, l)),
        AfterHeader::Sign(_) => None,
    };
    out.v.header(&header)?;
    let ext_ok = header.cap.has(CAP_EXT_DTYPES);
    let mut prev_name: Option<String> = None;
    let mut arrays = 0usize;
    loop {
        let (n, l) = match pending.take() {
            Some(p) => p,
            None => {
                let (n, l) = lines.expect_line("an `arr` line, `audit` or `endwtxt`")?;
                (n, l.to_vec())
            }
        };
        if l.starts_with(b"arr ") {
            let arr = ArrLine::parse(&l).map_err(|m| check_at(n, m))?;
            if let Some(p) = prev_name.as_ref().filter(|p| p.as_bytes() >= arr.name.as_bytes()) {
                return Err(check_at(
                    n,
                    format!("array `{}` must come after `{p}` in byte-wise name order, once", arr.name),
                ));
            }
            if arr.dtype.is_extension() && !ext_ok {
                return Err(check_at(n, format!("dtype {} needs `{CAP_EXT_DTYPES}` in the cap line", arr.dtype)));
            }
            prev_name = Some(arr.name.clone());
            arrays += 1;
            if arrays > crate::limits::MAX_ARRAYS + crate::limits::MAX_METADATA_ARRAYS {
                let most = crate::limits::MAX_ARRAYS + crate::limits::MAX_METADATA_ARRAYS;
                return Err(check_at(n, format!("more than {most} arrays: over the limit a snapshot may hold")));
            }
            read_array(&mut lines, n, arr, l, out)?;
            continue;
        }
        out.drain()?;
        if l.starts_with(b"audit ") {
            let a = Audit::parse(&l).map_err(|m| check_at(n, m))?;
            out.v.audit(n, &a);
            let (n2, l2) = lines.expect_line("`endwtxt`")?;
            if l2 != END.as_bytes() {
                return Err(check_at(n2, format!("expected `{END}` after the audit line")));
            }
        } else if l != END.as_bytes() {
            return Err(check_at(n, format!("expected an `arr` line, `audit` or `{END}`, found `{}`", lossy(&l, 40))));
        }
        if lines.next_range()?.is_some() {
            return Err(check_at(lines.line_no(), format!("nothing may follow `{END}`")));
        }
        return Ok(header);
    }
}

fn read_array<R: Read, V: Visitor>(
    lines: &mut LineReader<R>,
    arr_no: u64,
    arr: ArrLine,
    text: Vec<u8>,
    out: &mut Out<'_, '_, V>,
) -> Result<()> {
    if out.v.passes_over(&arr) {
        if !lines.omits_arrays() {
            // Counted as the canonical text lays it out: a text of other
            // sizes leaves the reader elsewhere than at `endarr`, refused.
            let (layout, first) = layout_of(lines, &arr)?;
            let (mut len, mut count) = layout.chunks_text();
            if let Some((_, l)) = &first {
                (len, count) = (len.saturating_sub(l.len() as u64 + 1), count.saturating_sub(1));
            }
            lines.skip_lines(len, count)?;
            expect_endarr(lines)?;
        }
        out.passed_over(arr_no, arr, text);
        return Ok(());
    }
    let (layout, mut first) = layout_of(lines, &arr)?;
    let start = ArrayStart { line: arr_no, arr, text, layout };
    out.array(start.clone())?;
    for ix in 0..layout.chunk_count() {
        let (n, l) = match first.take() {
            Some(p) => p,
            None => {
                let (n, l) = lines.expect_line("a `ch` line")?;
                (n, l.to_vec())
            }
        };
        let ch = ChLine::parse(&l).map_err(|m| check_at(n, m))?;
        let (off, len) = layout.chunk_range(ix);
        if (ch.ix, ch.off, ch.len) != (ix, off, len) {
            return Err(check_at(
                n,
                format!(
                    "expected chunk ix={ix} off={off} len={len} from the layout, found ix={} off={} len={}",
                    ch.ix, ch.off, ch.len
                ),
            ));
        }
        let endch = |lines: &mut LineReader<R>| -> Result<()> {
            let (n2, l2) = lines.expect_line("`endch`")?;
            if l2 != b"endch" {
                return Err(check_at(
                    n2,
                    format!("expected `endch` after {} base64 lines, found `{}`", ch.lines, lossy(l2, 40)),
                ));
            }
            Ok(())
        };
        // Saturating: `len` is what the file declares (a layout of a
        // declared shape), not what it holds.
        let text_len = body_text_len(ch.len);
        if ch.lines == lines_for(ch.len) && !out.v.needs(&start, &ch) {
            // Its lines are counted, not read: nothing of them is used.
            lines.skip_lines(text_len, ch.lines)?;
            endch(lines)?;
            out.skipped(n, ch);
            continue;
        }
        match out.pool {
            // On the pool: the lines are read and their shape checked here,
            // decoded there.
            Some(pool) if ch.lines == lines_for(ch.len) && text_len <= MAX_POOLED_TEXT => {
                let text = chunk_text(lines, &ch)?;
                let found = endch(lines);
                out.chunk(pool, n, ch, text, found.is_ok())?;
                found?;
            }
            _ => {
                out.drain()?;
                out.v.chunk(n, &ch);
                let bad = read_chunk_lines(lines, n, &ch, out.v)?;
                endch(lines)?;
                out.v.chunk_end(n, &ch, bad);
            }
        }
    }
    expect_endarr(lines)?;
    out.array_end();
    Ok(())
}

/// A line read ahead: its number and bytes.
type ReadAhead = Option<(u64, Vec<u8>)>;

/// An array's layout, from its `idx` line where its rank has one, and the
/// line read after its `arr` line when that is not an `idx` line.
fn layout_of<R: Read>(lines: &mut LineReader<R>, arr: &ArrLine) -> Result<(Layout, ReadAhead)> {
    let rank = arr.shape.len();
    let (n, l) = lines.expect_line("an `idx` or `ch` line")?;
    if rank < 2 {
        if l.starts_with(b"idx ") {
            return Err(check_at(n, format!("an array of rank {rank} has no idx line")));
        }
        let first = Some((n, l.to_vec()));
        return Ok((Layout::new(arr.dtype, &arr.shape, 1).map_err(|m| check_at(n, m))?, first));
    }
    let idx = IdxLine::parse(l).map_err(|m| check_at(n, format!("array of rank {rank} needs its idx line: {m}")))?;
    let layout = Layout::new(arr.dtype, &arr.shape, idx.rows_per_chunk).map_err(|m| check_at(n, m))?;
    let want = layout.idx.expect("rank >= 2").row_size;
    if idx.row_size != want {
        return Err(check_at(n, format!("row_size: expected {want} for this shape, found {}", idx.row_size)));
    }
    Ok((layout, None))
}

fn expect_endarr<R: Read>(lines: &mut LineReader<R>) -> Result<()> {
    let (n, l) = lines.expect_line("`endarr`")?;
    if l != b"endarr" {
        return Err(check_at(n, format!("expected `endarr` after the array's last chunk, found `{}`", lossy(l, 40))));
    }
    Ok(())
}

/// A chunk's base64 lines, without their LFs, for a decoding thread: read
/// here, each line's width and separator checked as [`ChunkDecoder`]
/// checks them (a line of the wrong shape ends the reading with the same
/// error, on the same line).
fn chunk_text<R: Read>(lines: &mut LineReader<R>, ch: &ChLine) -> Result<Vec<u8>> {
    // The caller checked that this chunk's text is at most MAX_POOLED_TEXT.
    let mut text = Vec::with_capacity(ch.lines.saturating_mul(B64_WIDTH as u64 + 2).min(MAX_POOLED_TEXT) as usize);
    for k in 0..ch.lines {
        let width = if k + 1 == ch.lines { last_line_width(ch.len) } else { B64_WIDTH };
        let Some(r) = lines.next_range_of(width + 2)? else {
            return Err(check_at(
                lines.line_no() + 1,
                format!("file ends inside a chunk: expected {} more base64 lines", ch.lines - k),
            ));
        };
        let n = lines.line_no();
        let l = lines.bytes(r);
        if l.len() != width + 2 || l[width] != b' ' {
            if l == b"endch" || l.starts_with(b"ch ") || l == b"endarr" {
                return Err(check_at(n, format!("chunk has fewer base64 lines than lines={}", ch.lines)));
            }
            return Err(check_at(n, Fault::Shape { line: k, width, found: l.len() }.to_string()));
        }
        text.extend_from_slice(l);
    }
    Ok(text)
}

/// Tells the visitor a chunk's faults, each on its line.
fn report_faults<V: Visitor>(v: &mut V, ch_no: u64, ch: &ChLine, faults: &[Fault]) {
    for f in faults {
        match f.line() {
            Some(k) => v.problem(ch_no + 1 + k, f.to_string()),
            None => v.problem(ch_no, format!("chunk {} {f}", ch.ix)),
        }
    }
}

/// Reads a chunk's base64 lines through the one chunk decoder, handing the
/// visitor blocks of at most [`BLOCK`] bytes; returns true if the chunk is
/// damaged (each fault already reported on its line).
fn read_chunk_lines<R: Read, V: Visitor>(
    lines: &mut LineReader<R>,
    ch_no: u64,
    ch: &ChLine,
    v: &mut V,
) -> Result<bool> {
    let mut dec = ChunkDecoder::new(ch, false);
    let per_block = (BLOCK / RAW_PER_LINE) as u64;
    while dec.remaining() > 0 {
        let batch = dec.remaining().min(per_block);
        let mut out = v.buffer();
        out.clear();
        for _ in 0..batch {
            let Some(r) = lines.next_range()? else {
                return Err(check_at(
                    lines.line_no() + 1,
                    format!("file ends inside a chunk: expected {} more base64 lines", dec.remaining()),
                ));
            };
            let n = lines.line_no();
            let l = lines.bytes(r);
            if let Err(f) = dec.line(l, &mut out) {
                if l == b"endch" || l.starts_with(b"ch ") || l == b"endarr" {
                    return Err(check_at(n, format!("chunk has fewer base64 lines than lines={}", ch.lines)));
                }
                return Err(check_at(n, f.to_string()));
            }
        }
        dec.flush(&mut out);
        v.data(out);
    }
    let faults = dec.finish(ch, &mut Vec::new());
    report_faults(v, ch_no, ch, &faults);
    Ok(!faults.is_empty())
}
