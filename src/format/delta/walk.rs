//! Reading a WTXT (or a delta's body) as whole arrays of text: the lines
//! of each array and its chunks, as they are written, for copying or
//! comparing without decoding.

use std::io::{Read, Write};

use crate::crypto::digest::Hash;
use crate::error::{check_at, reason, Error, Reason, Result};
use crate::format::layout::Layout;
use crate::format::read::{read_header, Header, LineReader};
use crate::format::syntax::{body_text_len, hexn, lines_for, lossy, ArrLine, ChLine, IdxLine, Root, END};

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

    pub(super) fn write(&self) -> String {
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

    /// Walks `lines` (one made [`LineReader::skipping`] seeks past the
    /// chunks it skips).
    pub fn on(lines: LineReader<R>) -> Self {
        Walker { lines, peeked: None }
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
    pub(super) fn ch_line(&mut self) -> Result<(u64, ChLine, Vec<u8>)> {
        let (n, l) = self.next("a `ch` line")?;
        let ch = ChLine::parse(&l).map_err(|m| check_at(n, m))?;
        Ok((n, ch, l))
    }

    /// The base64 lines and `endch` of a chunk whose `ch` line was read,
    /// copied to `out` (with their LFs) or skipped. A chunk of the canonical
    /// line count is skipped as the strict reader passes over a chunk it
    /// does not decode ([`LineReader::skip_lines`]): its lines counted in the
    /// length its `len` makes them, or sought past, and `endch` where that
    /// length ends; nothing of it is used.
    pub(super) fn chunk_body<W: Write>(&mut self, ch: &ChLine, mut out: Option<&mut W>) -> Result<()> {
        if out.is_none() && self.peeked.is_none() && ch.lines == lines_for(ch.len) {
            self.lines.skip_lines(body_text_len(ch.len), ch.lines)?;
            return self.endch(ch);
        }
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
        self.endch(ch)?;
        if let Some(o) = out.as_mut() {
            o.write_all(b"endch\n").map_err(Error::write_failed)?;
        }
        Ok(())
    }

    fn endch(&mut self, ch: &ChLine) -> Result<()> {
        let (n, e) = self.next("`endch`")?;
        if e != b"endch" {
            return Err(check_at(n, format!("expected `endch` after {} base64 lines", ch.lines)));
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

    /// True when the array whose `arr` line was just read has no text here
    /// (a [`crate::format::split::Sparse`] read left it out): what follows
    /// is the next array's `arr` line or the tail.
    pub fn left_out(&mut self) -> Result<bool> {
        let l = self.peek("an `idx`, `ch`, `endarr`, `arr` or `audit` line, or `endwtxt`")?;
        Ok(l.starts_with(b"arr ") || l.starts_with(b"audit ") || l == b"endwtxt")
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
    pub(super) fn head_text(&self) -> Vec<u8> {
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
pub(super) fn arr_head<R: Read>(w: &mut Walker<R>, n: u64, l: Vec<u8>) -> Result<ArrayText> {
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

pub(super) fn final_sha(h: &Header, what: &str) -> Result<Hash> {
    match h.root {
        Root::Final { sha256_all, .. } => Ok(sha256_all),
        Root::Pending => Err(check_at(4, format!("{what} is a WTXT-S (root_pending): finalize it first"))),
    }
}

/// Decodes a chunk's text with the one chunk decoder, every check included.
pub(super) fn decode_chunk(c: &ChunkText) -> Result<Vec<u8>> {
    crate::format::chunk::decode(&c.ch, c.body()).map_err(|f| fault_at(c, &f))
}

/// A chunk fault as an error on its file line.
pub fn fault_at(c: &ChunkText, f: &crate::format::chunk::Fault) -> crate::Error {
    match f.line() {
        Some(k) => check_at(c.line + 1 + k, f.to_string()),
        None => check_at(c.line, format!("chunk {}: {f}", c.ch.ix)),
    }
}
