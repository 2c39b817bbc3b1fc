//! DELTA v2: patches that carry only the chunks that changed.
//!
//! Two forms (docs/FORMAT.md, section 11):
//! - the **extended** form this project writes: the first line adds
//!   `target_sha256_all`, the target's header lines follow, every changed
//!   array carries its full target `arr` (and `idx`) line, `delarr` removes
//!   an array, and a new, reshaped or re-typed array carries all its chunks.
//!   Applying it rebuilds the target byte for byte: unchanged chunks are
//!   copied verbatim from the base, so apply is a streaming text merge,
//!   followed by a strict verification of the result against
//!   `target_sha256_all` (and the signature) before it is renamed into place;
//! - the seed's **minimal** form (`arr name=X`, changed chunks, `endarr`),
//!   which carries no target header: applying it decodes the base, replaces
//!   the chunks and re-hashes into a new generation.
//!
//! A delta never applies to a base whose `sha256_all` differs from
//! `base_sha256_all`.

use std::io::{Read, Write};
use std::path::Path;

use crate::crypto::digest::Hash;
use crate::error::{check_at, reason, Error, Reason, Result};
use crate::format::layout::Layout;
use crate::format::read::{read_header, Header, LineReader};
use crate::format::syntax::{hexn, lossy, ArrLine, Cap, ChLine, IdxLine, Meta, PResult, Root, SignLine, END};

/// First token of a delta.
pub const MAGIC: &str = "WTXT-DELTA 2";
/// Last line of a delta.
pub const DELTA_END: &str = "enddelta";

/// One chunk as text: its `ch` line and base64 lines, each with LF, and `endch`.
#[derive(Clone, Debug)]
pub struct ChunkText {
    /// Its `ch` line.
    pub ch: ChLine,
    /// Line of the `ch` line.
    pub line: u64,
    /// Its text (`ch` line to `endch`).
    pub text: Vec<u8>,
}

impl ChunkText {
    /// The chunk's base64 lines: between its `ch` line and `endch`.
    pub fn body(&self) -> impl Iterator<Item = &[u8]> {
        let end = self.text.len() - self.text.ends_with(b"endch\n") as usize * "endch\n".len();
        self.text[..end].split(|&b| b == b'\n').skip(1).filter(|l| !l.is_empty())
    }
}

/// The first line of a delta.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaHead {
    /// `sha256_all` of the base it applies to.
    pub base_sha256_all: Hash,
    /// Present in the extended form only.
    pub target_sha256_all: Option<Hash>,
}

impl DeltaHead {
    /// Parses `WTXT-DELTA 2 base_sha256_all=H [target_sha256_all=H]`.
    pub fn parse(l: &[u8]) -> std::result::Result<DeltaHead, Reason> {
        let rest = l
            .strip_prefix(MAGIC.as_bytes())
            .and_then(|r| r.strip_prefix(b" "))
            .ok_or_else(|| reason!("expected `{MAGIC} base_sha256_all=...`"))?;
        let mut f = crate::format::syntax::Fields::new_unkeyed(rest, "WTXT-DELTA");
        let base_sha256_all = hexn::<32>(f.next("base_sha256_all")?, "base_sha256_all")?;
        let target_sha256_all = if f.rest().is_empty() {
            None
        } else {
            Some(hexn::<32>(f.next("target_sha256_all")?, "target_sha256_all")?)
        };
        f.end()?;
        Ok(DeltaHead { base_sha256_all, target_sha256_all })
    }

    fn write(&self) -> String {
        let mut s = format!("{MAGIC} base_sha256_all={}", hex::encode(self.base_sha256_all));
        if let Some(t) = self.target_sha256_all {
            s.push_str(&format!(" target_sha256_all={}", hex::encode(t)));
        }
        s
    }
}

/// Walks a WTXT or delta file at the text level: lines are checked for the
/// text rules and the structure, chunk texts are kept verbatim, and base64 is
/// not decoded (the strict verifier does that on the result).
pub struct Walker<R> {
    lines: LineReader<R>,
    peeked: Option<(u64, Vec<u8>)>,
}

impl<R: Read> Walker<R> {
    /// Wraps a reader positioned at the start of a file.
    pub fn new(inner: R) -> Self {
        Walker { lines: LineReader::new(inner), peeked: None }
    }

    /// Reads a WTXT header (and its optional `sign` line) as the strict
    /// reader does, and gives its text too.
    pub fn wtxt_header(&mut self) -> Result<(Header, Vec<u8>)> {
        let mut h = read_header(&mut self.lines)?;
        let mut text = h.signed_bytes.clone();
        match crate::format::read::read_sign(&mut self.lines, &mut h)? {
            crate::format::read::AfterHeader::Sign(l) => {
                text.extend_from_slice(&l);
                text.push(b'\n');
            }
            crate::format::read::AfterHeader::Next(n, l) => self.peeked = Some((n, l)),
        }
        Ok((h, text))
    }

    /// The next line (text rules checked).
    pub fn next(&mut self, what: &str) -> Result<(u64, Vec<u8>)> {
        if let Some(p) = self.peeked.take() {
            return Ok(p);
        }
        let (n, l) = self.lines.expect_line(what)?;
        Ok((n, l.to_vec()))
    }

    /// Looks at the next line without taking it.
    pub fn peek(&mut self, what: &str) -> Result<&[u8]> {
        if self.peeked.is_none() {
            let p = self.next(what)?;
            self.peeked = Some(p);
        }
        Ok(&self.peeked.as_ref().expect("just set").1)
    }

    /// Reads a chunk whose `ch` line is next: its text through `endch`.
    pub fn chunk(&mut self) -> Result<ChunkText> {
        let (line, ch, head) = self.ch_line()?;
        let mut text = Vec::with_capacity(head.len() + 1 + (ch.lines as usize).min(1 << 20) * 80 + 6);
        text.extend_from_slice(&head);
        text.push(b'\n');
        self.chunk_body(&ch, Some(&mut text))?;
        Ok(ChunkText { ch, line, text })
    }

    /// Reads past a chunk, keeping only its `ch` line.
    pub fn skip_chunk(&mut self) -> Result<ChLine> {
        let (_, ch, _) = self.ch_line()?;
        self.chunk_body::<Vec<u8>>(&ch, None)?;
        Ok(ch)
    }

    /// The next `ch` line: its number, parsed form and text.
    fn ch_line(&mut self) -> Result<(u64, ChLine, Vec<u8>)> {
        let (n, l) = self.next("a `ch` line")?;
        let ch = ChLine::parse(&l).map_err(|m| check_at(n, m))?;
        Ok((n, ch, l))
    }

    /// The base64 lines and `endch` of a chunk whose `ch` line was read,
    /// copied to `out` (with their LFs) or skipped.
    fn chunk_body<W: Write>(&mut self, ch: &ChLine, mut out: Option<&mut W>) -> Result<()> {
        for _ in 0..ch.lines {
            let Some(r) = self.lines.next_range_of(78)? else {
                return Err(check_at(self.lines.line_no() + 1, "file ends inside a chunk"));
            };
            let b = self.lines.bytes(r.start..r.end + 1);
            if b.len() < 4 || b.len() > 79 || b[b.len() - 3] != b' ' {
                return Err(check_at(self.lines.line_no(), "expected a base64 line, a space and a parity nibble"));
            }
            if let Some(o) = out.as_mut() {
                o.write_all(b).map_err(Error::write_failed)?;
            }
        }
        let (n2, e) = self.next("`endch`")?;
        if e != b"endch" {
            return Err(check_at(n2, format!("expected `endch` after {} base64 lines", ch.lines)));
        }
        if let Some(o) = out.as_mut() {
            o.write_all(b"endch\n").map_err(Error::write_failed)?;
        }
        Ok(())
    }

    /// The next line, which must be `want`.
    pub fn expect(&mut self, want: &str) -> Result<()> {
        let (n, l) = self.next(&format!("`{want}`"))?;
        if l != want.as_bytes() {
            return Err(check_at(n, format!("expected `{want}`, found `{}`", lossy(&l, 40))));
        }
        Ok(())
    }

    /// After the last line: nothing may follow.
    pub fn expect_eof(&mut self) -> Result<()> {
        if self.peeked.is_some() || self.lines.next_range()?.is_some() {
            return Err(check_at(self.lines.line_no(), "nothing may follow the last line"));
        }
        Ok(())
    }
}

/// One array of a WTXT read at the text level.
pub struct ArrayText {
    /// Line of the `arr` line.
    pub line: u64,
    /// The `arr` line.
    pub arr: ArrLine,
    /// Its text.
    pub arr_text: Vec<u8>,
    /// The `idx` line and its text, for rank >= 2.
    pub idx: Option<(IdxLine, Vec<u8>)>,
}

impl ArrayText {
    /// The `arr` and `idx` lines with their LFs.
    fn head_text(&self) -> Vec<u8> {
        let mut t = self.arr_text.clone();
        t.push(b'\n');
        if let Some((_, i)) = &self.idx {
            t.extend_from_slice(i);
            t.push(b'\n');
        }
        t
    }

    /// The array's chunk layout.
    pub fn layout(&self) -> Result<Layout> {
        let rows = self.idx.as_ref().map_or(1, |(i, _)| i.rows_per_chunk);
        Layout::new(self.arr.dtype, &self.arr.shape, rows).map_err(|m| check_at(self.line, m))
    }
}

/// Reads the next `arr` (+ `idx`) lines of a WTXT body, or `None` at its end
/// (the `audit`/`endwtxt` line stays unread).
pub fn next_array<R: Read>(w: &mut Walker<R>) -> Result<Option<ArrayText>> {
    let l = w.peek("an `arr` line, `audit` or `endwtxt`")?;
    if !l.starts_with(b"arr ") {
        return Ok(None);
    }
    let (n, l) = w.next("an `arr` line")?;
    arr_head(w, n, l).map(Some)
}

/// Parses an `arr` line already read and the `idx` line that may follow it.
fn arr_head<R: Read>(w: &mut Walker<R>, n: u64, l: Vec<u8>) -> Result<ArrayText> {
    let arr = ArrLine::parse(&l).map_err(|m| check_at(n, m))?;
    let idx = if w.peek("an `idx`, `ch` or `endarr` line")?.starts_with(b"idx ") {
        let (ni, li) = w.next("an `idx` line")?;
        Some((IdxLine::parse(&li).map_err(|m| check_at(ni, m))?, li))
    } else {
        None
    };
    Ok(ArrayText { line: n, arr, arr_text: l, idx })
}

/// The `audit` line (if any) and `endwtxt` at the end of a WTXT body.
pub fn wtxt_tail<R: Read>(w: &mut Walker<R>) -> Result<Option<Vec<u8>>> {
    let (n, l) = w.next("`audit` or `endwtxt`")?;
    let audit = if l.starts_with(b"audit ") {
        w.expect(END)?;
        Some(l)
    } else if l == END.as_bytes() {
        None
    } else {
        return Err(check_at(n, format!("expected `audit` or `{END}`, found `{}`", lossy(&l, 40))));
    };
    w.expect_eof()?;
    Ok(audit)
}

fn final_sha(h: &Header, what: &str) -> Result<Hash> {
    match h.root {
        Root::Final { sha256_all, .. } => Ok(sha256_all),
        Root::Pending => Err(check_at(4, format!("{what} is a WTXT-S (root_pending): finalize it first"))),
    }
}

/// A chunk's identity for change detection: position and content hashes.
fn same_chunk(a: &ChLine, b: &ChLine) -> bool {
    (a.ix, a.off, a.len, a.sha256, a.crc32c) == (b.ix, b.off, b.len, b.sha256, b.crc32c)
}

/// Writes the extended DELTA v2 that turns `base` into `target`. Both are
/// read as text; the caller verifies `target` strictly first.
pub fn create<B: Read, T: Read, W: Write>(base: (B, &Path), target: (T, &Path), out: &mut W) -> Result<DeltaStats> {
    let (base, base_path) = base;
    let (target, target_path) = target;
    let in_base = |e: Error| e.in_input(base_path);
    let in_target = |e: Error| e.in_input(target_path);
    let mut bw = Walker::new(base);
    let base_arrays = (|| -> Result<(Hash, Vec<BaseArray>)> {
        let (bh, _) = bw.wtxt_header()?;
        let base_sha = final_sha(&bh, "the base")?;
        // The base's arrays as (arr line, idx, chunk lines): small, no base64.
        let mut arrays = Vec::new();
        while let Some(a) = next_array(&mut bw)? {
            let layout = a.layout()?;
            let chunks = (0..layout.chunk_count()).map(|_| bw.skip_chunk()).collect::<Result<Vec<_>>>()?;
            bw.expect("endarr")?;
            arrays.push((a, chunks));
        }
        wtxt_tail(&mut bw)?;
        Ok((base_sha, arrays))
    })()
    .map_err(in_base)?;
    let (base_sha, base_arrays) = base_arrays;
    create_from(base_sha, &base_arrays, Walker::new(target), out).map_err(in_target)
}

/// A base array as `create` needs it: its lines and its chunks' `ch` lines.
type BaseArray = (ArrayText, Vec<ChLine>);

fn create_from<T: Read, W: Write>(
    base_sha: Hash,
    base_arrays: &[BaseArray],
    mut tw: Walker<T>,
    out: &mut W,
) -> Result<DeltaStats> {
    let (th, theader) = tw.wtxt_header()?;
    let target_sha = final_sha(&th, "the target")?;
    let io = |e: std::io::Error| Error::write_failed(e);
    let mut stats = DeltaStats::default();
    let head = DeltaHead { base_sha256_all: base_sha, target_sha256_all: Some(target_sha) };
    out.write_all(head.write().as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    // The target's header lines after `WTXT 1`.
    out.write_all(&theader["WTXT 1\n".len()..]).map_err(io)?;

    let mut bi = 0usize;
    let emit_deletions_before = |name: Option<&str>, out: &mut W, bi: &mut usize| -> Result<()> {
        while *bi < base_arrays.len() && name.is_none_or(|n| base_arrays[*bi].0.arr.name.as_str() < n) {
            writeln!(out, "delarr name={}", base_arrays[*bi].0.arr.name).map_err(io)?;
            *bi += 1;
        }
        Ok(())
    };
    while let Some(t) = next_array(&mut tw)? {
        emit_deletions_before(Some(&t.arr.name), out, &mut bi)?;
        let layout = t.layout()?;
        let base = match base_arrays.get(bi) {
            Some((b, chunks)) if b.arr.name == t.arr.name => {
                bi += 1;
                Some((b, chunks))
            }
            _ => None,
        };
        // Same dtype, shape and blocking: compare chunk by chunk.
        let comparable = base.filter(|(b, _)| {
            b.arr.dtype == t.arr.dtype
                && b.arr.shape == t.arr.shape
                && b.idx.as_ref().map(|i| i.0) == t.idx.as_ref().map(|i| i.0)
        });
        let head_same = base.is_some_and(|(b, _)| b.head_text() == t.head_text());
        let mut pending_head = Some(t.head_text());
        for _ in 0..layout.chunk_count() {
            // Decide from the ch line; only a changed chunk's lines are copied.
            let (_, ch, head) = tw.ch_line()?;
            let unchanged = comparable.and_then(|(_, bc)| bc.get(ch.ix as usize)).is_some_and(|b| same_chunk(b, &ch));
            stats.target_chunks += 1;
            if unchanged {
                tw.chunk_body::<W>(&ch, None)?;
                continue;
            }
            if let Some(h) = pending_head.take() {
                out.write_all(&h).map_err(io)?;
            }
            out.write_all(&head).map_err(io)?;
            out.write_all(b"\n").map_err(io)?;
            tw.chunk_body(&ch, Some(&mut *out))?;
            stats.changed_chunks += 1;
            stats.changed_text_bytes += chunk_text_len(head.len(), &ch);
        }
        tw.expect("endarr")?;
        match pending_head {
            // Some chunk was written: close the array.
            None => out.write_all(b"endarr\n").map_err(io)?,
            // No chunk changed, but the arr/idx lines did (a new salt, say).
            Some(h) if !head_same => {
                out.write_all(&h).map_err(io)?;
                out.write_all(b"endarr\n").map_err(io)?;
            }
            Some(_) => {}
        }
    }
    emit_deletions_before(None, out, &mut bi)?;
    if let Some(a) = wtxt_tail(&mut tw)? {
        out.write_all(&a).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.write_all(DELTA_END.as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    Ok(stats)
}

/// Bytes of a chunk's text: its `ch` line, base64 lines and `endch`, each with LF.
fn chunk_text_len(ch_line: usize, ch: &ChLine) -> u64 {
    let last = if ch.lines == 0 { 0 } else { crate::format::layout::last_line_width(ch.len) as u64 + 3 };
    ch_line as u64 + 1 + ch.lines.saturating_sub(1) * 79 + last + "endch\n".len() as u64
}

/// What `create` put in the delta.
#[derive(Default, Clone, Copy, Debug)]
pub struct DeltaStats {
    /// Chunks of the target.
    pub target_chunks: u64,
    /// Chunks the delta carries.
    pub changed_chunks: u64,
    /// Bytes of chunk text it carries.
    pub changed_text_bytes: u64,
}

/// A whole delta in memory, for the minimal form: the seed's patch,
/// applied to decoded arrays (the extended form streams instead).
pub struct Delta {
    /// The delta's header.
    pub head: DeltaHead,
    /// The changed arrays with their chunks, in name order.
    arrays: Vec<(String, Vec<ChunkText>)>,
}

impl Delta {
    /// True for the extended form.
    pub fn is_extended(&self) -> bool {
        self.head.target_sha256_all.is_some()
    }
}

/// A delta read as a stream: its first line and the target's header when
/// opened, then one item and one chunk at a time, every structural rule
/// checked as it comes. Applying an extended delta this way holds one
/// chunk, whatever the delta's size (a fine-tune that changes every weight
/// makes a delta as large as the model).
pub struct DeltaReader<R> {
    w: Walker<R>,
    /// The delta's header.
    pub head: DeltaHead,
    /// The target's header lines (extended form), checked, as text.
    target_header: Option<Vec<u8>>,
    /// The last item's name (items come in byte-wise name order, once).
    prev: Option<String>,
    audit: Option<Vec<u8>>,
    done: bool,
    /// The array whose chunks are being read: its layout (extended form)
    /// and the last chunk's `ix`.
    open: Option<(Option<Layout>, Option<u64>)>,
}

/// An item's first lines; an array's chunks follow through
/// [`DeltaReader::next_chunk`].
pub enum ItemHead {
    /// An array the target no longer has.
    Del(String),
    /// An array of the target, with its chunks.
    Arr {
        /// Line of the item.
        line: u64,
        /// The array.
        name: String,
        /// Its `arr` (and `idx`) lines when the target has it.
        head: Option<Box<ArrayText>>,
    },
}

impl ItemHead {
    fn name(&self) -> &str {
        match self {
            ItemHead::Del(n) | ItemHead::Arr { name: n, .. } => n,
        }
    }
}

impl<R: Read> DeltaReader<R> {
    /// Reads the first line and, in the extended form, the target's header.
    pub fn open(input: R) -> Result<Self> {
        let mut w = Walker::new(input);
        let (n, l) = w.next(&format!("`{MAGIC}`"))?;
        if !l.starts_with(MAGIC.as_bytes()) {
            return Err(Error::input(
                crate::error::Position::Line(n),
                format!("expected `{MAGIC} ...`: not a WTXT delta"),
            ));
        }
        let head = DeltaHead::parse(&l).map_err(|m| check_at(n, m))?;
        let target_header = match head.target_sha256_all {
            Some(_) => Some(target_header_lines(&mut w)?),
            None => None,
        };
        Ok(DeltaReader { w, head, target_header, prev: None, audit: None, done: false, open: None })
    }

    /// True for the extended form.
    pub fn is_extended(&self) -> bool {
        self.head.target_sha256_all.is_some()
    }

    /// The next item, `None` after `enddelta` (and the end of the file).
    /// The chunks of an array not read through are passed over.
    pub fn next_item(&mut self) -> Result<Option<ItemHead>> {
        while self.next_chunk()?.is_some() {}
        if self.done {
            return Ok(None);
        }
        let extended = self.is_extended();
        let (n, l) = self.w.next("an `arr` or `delarr` line, or `enddelta`")?;
        if l == DELTA_END.as_bytes() || (extended && l.starts_with(b"audit ")) {
            if l != DELTA_END.as_bytes() {
                crate::format::syntax::Audit::parse(&l).map_err(|m| check_at(n, m))?;
                self.audit = Some(l);
                let (n2, l2) = self.w.next("`enddelta`")?;
                if l2 != DELTA_END.as_bytes() {
                    return Err(check_at(n2, "expected `enddelta` after the audit line"));
                }
            }
            self.w.expect_eof()?;
            self.done = true;
            return Ok(None);
        }
        let item = if let Some(rest) = l.strip_prefix(b"delarr name=") {
            if !extended {
                return Err(check_at(n, "`delarr` needs the extended form (target_sha256_all)"));
            }
            ItemHead::Del(name_of(rest, n)?)
        } else if extended && l.starts_with(b"arr ") {
            let a = arr_head(&mut self.w, n, l)?;
            self.open = Some((Some(a.layout()?), None));
            ItemHead::Arr { line: n, name: a.arr.name.clone(), head: Some(Box::new(a)) }
        } else if let (false, Some(rest)) = (extended, l.strip_prefix(b"arr name=")) {
            self.open = Some((None, None));
            ItemHead::Arr { line: n, name: name_of(rest, n)?, head: None }
        } else {
            return Err(check_at(
                n,
                format!("expected an `arr` or `delarr` line, or `{DELTA_END}`, found `{}`", lossy(&l, 40)),
            ));
        };
        let name = item.name();
        if let Some(p) = self.prev.as_ref().filter(|p| p.as_bytes() >= name.as_bytes()) {
            return Err(check_at(n, format!("`{name}` must come after `{p}` in byte-wise name order, once")));
        }
        self.prev = Some(name.to_string());
        Ok(Some(item))
    }

    /// The open array's next chunk (increasing `ix`, fitting its layout in
    /// the extended form), `None` at its `endarr`.
    pub fn next_chunk(&mut self) -> Result<Option<ChunkText>> {
        let Some((layout, last)) = &mut self.open else { return Ok(None) };
        if !self.w.peek("a `ch` line or `endarr`")?.starts_with(b"ch ") {
            self.w.expect("endarr")?;
            self.open = None;
            return Ok(None);
        }
        let c = self.w.chunk()?;
        if let Some(layout) = layout {
            if c.ch.ix >= layout.chunk_count() || layout.chunk_range(c.ch.ix) != (c.ch.off, c.ch.len) {
                return Err(check_at(
                    c.line,
                    format!("chunk ix={} off={} len={} does not fit the array's layout", c.ch.ix, c.ch.off, c.ch.len),
                ));
            }
        }
        if last.is_some_and(|l| c.ch.ix <= l) {
            return Err(check_at(c.line, "chunks must come in increasing ix, once each"));
        }
        *last = Some(c.ch.ix);
        Ok(Some(c))
    }

    /// The target's `audit` line, once the items are read.
    pub fn audit(&self) -> Option<&[u8]> {
        self.audit.as_deref()
    }

    /// The target's header lines as text (extended form).
    pub fn target_text(&self) -> Option<&[u8]> {
        self.target_header.as_deref()
    }

    /// Reads the rest: every changed array with its chunks, in memory.
    pub fn collect(mut self) -> Result<Delta> {
        let mut arrays = Vec::new();
        while let Some(item) = self.next_item()? {
            if let ItemHead::Arr { name, .. } = item {
                let mut chunks = Vec::new();
                while let Some(c) = self.next_chunk()? {
                    chunks.push(c);
                }
                arrays.push((name, chunks));
            }
        }
        Ok(Delta { head: self.head, arrays })
    }
}

/// The target's header lines of an extended delta, exactly as the target
/// WTXT has them, each checked by its parser.
fn target_header_lines<R: Read>(w: &mut Walker<R>) -> Result<Vec<u8>> {
    let mut text = b"WTXT 1\n".to_vec();
    let mut take = |w: &mut Walker<R>, what: &str, check: &dyn Fn(&[u8]) -> PResult<()>| {
        let (n, l) = w.next(what)?;
        check(&l).map_err(|m| check_at(n, m))?;
        text.extend_from_slice(&l);
        text.push(b'\n');
        Ok::<_, Error>(())
    };
    take(w, "the target `meta` line", &|l| Meta::parse(l).map(drop))?;
    take(w, "the target `cap` line", &|l| Cap::parse(l).map(drop))?;
    take(w, "the target `root` line", &|l| match Root::parse(l)? {
        Root::Pending => Err("a delta's target must have a final root".into()),
        _ => Ok(()),
    })?;
    if w.peek("a `sign` line or an array")?.starts_with(b"sign ") {
        take(w, "a `sign` line", &|l| SignLine::parse(l).map(drop))?;
    }
    Ok(text)
}

/// Reads and checks a whole delta, chunk texts in memory: for the minimal
/// form, applied to decoded arrays. Applying the extended form and checking
/// a delta stream instead ([`DeltaReader`], [`check`]).
pub fn parse<R: Read>(input: R) -> Result<Delta> {
    DeltaReader::open(input)?.collect()
}

/// Checks a delta's structure and every chunk it carries (parity, base64,
/// CRC32C, SHA-256), one chunk in memory at a time.
pub fn check<R: Read>(input: R) -> Result<()> {
    let mut d = DeltaReader::open(input)?;
    while d.next_item()?.is_some() {
        while let Some(c) = d.next_chunk()? {
            decode_chunk(&c)?;
        }
    }
    Ok(())
}

fn name_of(v: &[u8], line: u64) -> Result<String> {
    let s = String::from_utf8(v.to_vec()).unwrap_or_default();
    if !crate::model::is_valid_name(&s) {
        return Err(check_at(line, format!("expected an array name [A-Za-z0-9_]+, found `{}`", lossy(v, 40))));
    }
    Ok(s)
}

/// Applies an extended delta to `base`, writing the target's text to `out`.
/// The caller verifies the result against `target_sha256_all`.
/// The delta is read as a stream (`d`'s errors come named by `delta`).
pub fn apply_extended<B: Read, D: Read, W: Write>(
    base: B,
    d: &mut DeltaReader<D>,
    delta: &Path,
    out: &mut W,
) -> Result<()> {
    let header_text = d.target_text().ok_or_else(|| Error::usage("not an extended delta"))?.to_vec();
    let mut bw = Walker::new(base);
    let (bh, _) = bw.wtxt_header()?;
    if final_sha(&bh, "the base")? != d.head.base_sha256_all {
        return Err(check_at(
            4,
            "this delta is for another base: its base_sha256_all differs from the base's sha256_all",
        ));
    }
    let io = |e: std::io::Error| Error::write_failed(e);
    out.write_all(&header_text).map_err(io)?;
    let in_delta = |e: Error| e.in_file(delta);
    let mut item = d.next_item().map_err(in_delta)?;
    let mut base_cur = next_array(&mut bw)?;
    loop {
        // Names in order: the smaller of the next base array and the next item.
        let bname = base_cur.as_ref().map(|a| a.arr.name.clone());
        let iname = item.as_ref().map(|i| i.name().to_string());
        match (bname, iname) {
            (None, None) => break,
            (Some(b), i) if i.as_ref().is_none_or(|i| b.as_bytes() < i.as_bytes()) => {
                // Unchanged array: copy verbatim.
                let a = base_cur.take().expect("some");
                out.write_all(&a.head_text()).map_err(io)?;
                for _ in 0..a.layout()?.chunk_count() {
                    let (_, ch, head) = bw.ch_line()?;
                    out.write_all(&head).map_err(io)?;
                    out.write_all(b"\n").map_err(io)?;
                    bw.chunk_body(&ch, Some(&mut *out))?;
                }
                bw.expect("endarr")?;
                out.write_all(b"endarr\n").map_err(io)?;
                base_cur = next_array(&mut bw)?;
            }
            (b, Some(i)) => {
                let this = item.take().expect("named");
                let in_base = b.as_deref() == Some(i.as_str());
                let base_arr = if in_base { base_cur.take() } else { None };
                // The base array's chunks, read one at a time as the target needs them.
                let mut base_chunks = BaseChunks {
                    left: match &base_arr {
                        Some(a) => a.layout()?.chunk_count(),
                        None => 0,
                    },
                    held: None,
                };
                match this {
                    ItemHead::Del(n) if !in_base => {
                        return Err(Error::check(
                            Default::default(),
                            format!("delta removes array {n}, which the base lacks"),
                        ))
                    }
                    ItemHead::Del(_) => {}
                    ItemHead::Arr { line, name, head } => {
                        let head = head.as_ref().expect("extended arrays carry their head");
                        out.write_all(&head.head_text()).map_err(io)?;
                        let layout = head.layout()?;
                        // One chunk of the delta at a time, in increasing ix.
                        let mut given = d.next_chunk().map_err(in_delta)?;
                        for ix in 0..layout.chunk_count() {
                            if let Some(c) = given.take_if(|c| c.ch.ix == ix) {
                                out.write_all(&c.text).map_err(io)?;
                                given = d.next_chunk().map_err(in_delta)?;
                                continue;
                            }
                            if !base_chunks.copy(&mut bw, ix, layout.chunk_range(ix), out)? {
                                return Err(check_at(
                                    line,
                                    format!("array {name}: chunk {ix} is neither in the delta nor in the base"),
                                ));
                            }
                        }
                        out.write_all(b"endarr\n").map_err(io)?;
                    }
                }
                if base_arr.is_some() {
                    base_chunks.finish(&mut bw)?;
                }
                if in_base {
                    base_cur = next_array(&mut bw)?;
                }
                item = d.next_item().map_err(in_delta)?;
            }
            (Some(_), None) => unreachable!("handled by the first arm"),
        }
    }
    wtxt_tail(&mut bw)?;
    if let Some(a) = d.audit() {
        out.write_all(a).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.write_all(END.as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    Ok(())
}

/// A base array's chunks, read in order with one `ch` line of lookahead;
/// a chunk's base64 lines are copied straight to the output or skipped.
struct BaseChunks {
    left: u64,
    held: Option<(ChLine, Vec<u8>)>,
}

impl BaseChunks {
    /// Copies base chunk `ix` to `out` if the base has it at `range`; lower
    /// chunks are passed over. Returns false when it does not.
    fn copy<R: Read, W: Write>(&mut self, w: &mut Walker<R>, ix: u64, range: (u64, u64), out: &mut W) -> Result<bool> {
        loop {
            match &self.held {
                Some((ch, head)) if ch.ix == ix && (ch.off, ch.len) == range => {
                    out.write_all(head).map_err(Error::write_failed)?;
                    out.write_all(b"\n").map_err(Error::write_failed)?;
                    let ch = *ch;
                    self.held = None;
                    w.chunk_body(&ch, Some(out))?;
                    return Ok(true);
                }
                Some((ch, _)) if ch.ix >= ix => return Ok(false),
                Some((ch, _)) => {
                    let ch = *ch;
                    self.held = None;
                    w.chunk_body::<W>(&ch, None)?;
                }
                None if self.left == 0 => return Ok(false),
                None => {
                    let (_, ch, head) = w.ch_line()?;
                    self.held = Some((ch, head));
                    self.left -= 1;
                }
            }
        }
    }

    /// Reads past the rest of the array, through `endarr`.
    fn finish<R: Read>(&mut self, w: &mut Walker<R>) -> Result<()> {
        if let Some((ch, _)) = self.held.take() {
            w.chunk_body::<Vec<u8>>(&ch, None)?;
        }
        for _ in 0..self.left {
            w.skip_chunk()?;
        }
        w.expect("endarr")
    }
}

/// Per array name, the chunks to replace with their decoded bytes.
pub type ChunkChanges = Vec<(String, Vec<(ChunkText, Vec<u8>)>)>;

/// Applies a minimal-form delta's chunks to `arrays` (the base's, already
/// verified), array by array: each changed array is rebuilt once, through a
/// spill, so a large array costs no heap. Every chunk must fit its array's
/// layout exactly.
pub fn apply_minimal(arrays: &mut [crate::model::Array], rows_per_chunk: u64, d: &Delta) -> Result<()> {
    for (name, mut chunks) in minimal_changes(d)? {
        let a = arrays.iter_mut().find(|a| a.name == name).ok_or_else(|| {
            Error::check(Default::default(), format!("the delta changes array {name}, which the base lacks"))
        })?;
        let layout = Layout::new(a.dtype, &a.shape, rows_per_chunk).map_err(|m| Error::check(Default::default(), m))?;
        for (c, _) in &chunks {
            if c.ch.ix >= layout.chunk_count() || layout.chunk_range(c.ch.ix) != (c.ch.off, c.ch.len) {
                return Err(check_at(
                    c.line,
                    format!(
                        "chunk ix={} off={} len={} does not fit array {name} of the base",
                        c.ch.ix, c.ch.off, c.ch.len
                    ),
                ));
            }
        }
        chunks.sort_by_key(|(c, _)| c.ch.off);
        let old = a.bytes();
        let mut out = crate::buffer::Spill::with_expected(old.len() as u64)?;
        let mut at = 0usize;
        for (c, raw) in &chunks {
            let off = c.ch.off as usize;
            if off < at {
                return Err(check_at(c.line, format!("chunk ix={} of array {name} is given twice", c.ch.ix)));
            }
            out.push(&old[at..off])?;
            out.push(raw)?;
            at = off + raw.len();
        }
        out.push(&old[at..])?;
        let src = out.finish()?;
        a.data = src.slice(0..old.len());
    }
    Ok(())
}

/// The minimal form's changes, each chunk decoded and checked.
pub fn minimal_changes(d: &Delta) -> Result<ChunkChanges> {
    let mut out = Vec::new();
    for (name, chunks) in &d.arrays {
        let mut decoded = Vec::new();
        for c in chunks {
            let raw = decode_chunk(c)?;
            decoded.push((c.clone(), raw));
        }
        out.push((name.clone(), decoded));
    }
    Ok(out)
}

/// Decodes a chunk's text with the one chunk decoder, every check included.
fn decode_chunk(c: &ChunkText) -> Result<Vec<u8>> {
    crate::format::chunk::decode(&c.ch, c.body()).map_err(|f| fault_at(c, &f))
}

/// A chunk fault as an error on its file line.
pub fn fault_at(c: &ChunkText, f: &crate::format::chunk::Fault) -> crate::Error {
    match f.line() {
        Some(k) => check_at(c.line + 1 + k, f.to_string()),
        None => check_at(c.line, format!("chunk {}: {f}", c.ch.ix)),
    }
}
