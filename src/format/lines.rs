//! Lines as the profile has them: LF only, at most `MAX_LINE` bytes, pure
//! ASCII. [`LineReader`] reads them from a stream with one buffer, counts
//! them, and passes over text nobody needs where its input can seek
//! ([`crate::fs::Skip`]); [`SliceLines`] splits text already in memory.

use std::io::Read;
use std::ops::Range;

use crate::error::{check_at, reason, Error, Position, Reason, Result};
use crate::fs::Skip;
use crate::limits::MAX_LINE;

/// Reads lines with the profile's rules: LF only, at most `MAX_LINE` bytes.
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    line: u64,
    /// Bytes of the input already moved out of `buf`.
    consumed: u64,
    /// Passes over bytes of `inner` unread (see [`LineReader::skipping`]).
    skip: Option<SkipFn<R>>,
    /// The most one read of `inner` asks for.
    read_size: usize,
    /// The text leaves out the arrays a reader passes over ([`Skip::omits_arrays`]).
    omits_arrays: bool,
}

/// [`Skip::skip`] of a [`LineReader`]'s input.
type SkipFn<R> = fn(&mut R, u64, u64) -> std::io::Result<bool>;

impl<S: Skip> LineReader<S> {
    /// Wraps an input that can pass over bytes unread: [`LineReader::skip_lines`]
    /// passes over what it has not read yet. It reads ahead 16 KiB at a
    /// time (not 1 MiB), so that little of a chunk passed over is read,
    /// where the input can pass over anything ([`Skip::passes_over`]).
    pub fn skipping(inner: S) -> Self {
        let read_size = if inner.passes_over() { crate::fs::SKIP_READ_AHEAD } else { 1 << 20 };
        let omits_arrays = inner.omits_arrays();
        LineReader { omits_arrays, ..LineReader::with(inner, Some(S::skip), read_size) }
    }
}

impl<R: Read> LineReader<R> {
    /// Wraps a reader.
    pub fn new(inner: R) -> Self {
        LineReader::with(inner, None, 1 << 20)
    }

    fn with(inner: R, skip: Option<SkipFn<R>>, read_size: usize) -> Self {
        let buf = vec![0; read_size + MAX_LINE + 1];
        LineReader {
            inner,
            buf,
            start: 0,
            end: 0,
            eof: false,
            line: 0,
            consumed: 0,
            skip,
            read_size,
            omits_arrays: false,
        }
    }

    /// Marks the text as leaving out the arrays a reader passes over
    /// ([`Skip::omits_arrays`]), for an input read straight through.
    pub fn omitting_arrays(mut self, omits: bool) -> Self {
        self.omits_arrays = omits;
        self
    }

    /// The input's offset of the next line (where the last one's LF ended).
    pub fn offset(&self) -> u64 {
        self.consumed + self.start as u64
    }

    /// Whether the text leaves out all but the `arr` line of the arrays a
    /// reader passes over ([`Skip::omits_arrays`]).
    pub fn omits_arrays(&self) -> bool {
        self.omits_arrays
    }

    /// 1-based number of the line last returned.
    pub fn line_no(&self) -> u64 {
        self.line
    }

    /// The next line's range in [`Self::bytes`], without its LF; `None` at EOF.
    pub fn next_range(&mut self) -> Result<Option<Range<usize>>> {
        loop {
            if let Some(p) = memchr(&self.buf[self.start..self.end]) {
                let r = self.start..self.start + p;
                self.start += p + 1;
                self.line += 1;
                if r.len() > MAX_LINE {
                    if self.line == 1 {
                        return Err(Error::input(
                            Position::Line(1),
                            format!("not a WTXT file: its first line is longer than {MAX_LINE} bytes"),
                        ));
                    }
                    return Err(check_at(self.line, format!("line is longer than {MAX_LINE} bytes")));
                }
                return Ok(Some(r));
            }
            if self.end - self.start > MAX_LINE {
                if self.line == 0 {
                    // No LF in the first 4 KiB: a binary file, not a damaged WTXT.
                    return Err(Error::input(
                        Position::Line(1),
                        format!("not a WTXT file: no line break in its first {MAX_LINE} bytes"),
                    ));
                }
                return Err(check_at(self.line + 1, format!("line is longer than {MAX_LINE} bytes")));
            }
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                return Err(check_at(self.line + 1, "file ends inside a line (truncated?): expected LF"));
            }
            self.fill()?;
        }
    }

    fn fill(&mut self) -> Result<()> {
        self.consumed += self.start as u64;
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        while self.end < self.buf.len() {
            let to = self.buf.len().min(self.end + self.read_size);
            match self.inner.read(&mut self.buf[self.end..to]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => {
                    self.end += n;
                    if self.end > MAX_LINE + 1 {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::read_failed(e)),
            }
        }
        Ok(())
    }

    /// The next line when it is expected to be exactly `len` bytes long (base64
    /// lines): checks the LF at that position instead of scanning for it.
    #[inline]
    pub fn next_range_of(&mut self, len: usize) -> Result<Option<Range<usize>>> {
        if self.end - self.start > len && self.buf[self.start + len] == b'\n' {
            let r = self.start..self.start + len;
            // A shorter line would have an LF inside; that case takes the slow path.
            if memchr(&self.buf[r.clone()]).is_none() {
                self.start += len + 1;
                self.line += 1;
                return Ok(Some(r));
            }
        }
        self.next_range()
    }

    /// Reads past the next `len` bytes, which must hold exactly `lines`
    /// lines (each ending with its LF), without looking at them otherwise:
    /// text nobody needs (a chunk's base64, undecoded) costs a count of its
    /// LFs, and the lines after it keep their numbers. `Err` names the line
    /// where the text ends early or where the count goes wrong. Over an
    /// input that can ([`LineReader::skipping`]), what is not read yet is
    /// passed over unread: its lines are counted as `lines` says, and the
    /// line after it must be where the text says it is.
    pub fn skip_lines(&mut self, len: u64, lines: u64) -> Result<()> {
        let (mut left, mut seen) = (len, 0u64);
        while left > 0 {
            if self.start == self.end {
                if self.eof {
                    return Err(check_at(self.line + 1, "file ends inside a chunk: expected more base64 lines"));
                }
                if let Some(skip) = self.skip.filter(|_| seen <= lines) {
                    if skip(&mut self.inner, left, lines - seen).map_err(Error::read_failed)? {
                        self.consumed += left;
                        self.line += lines;
                        return Ok(());
                    }
                }
                self.fill()?;
                continue;
            }
            let n = (self.end - self.start).min(usize::try_from(left).unwrap_or(usize::MAX));
            let piece = &self.buf[self.start..self.start + n];
            seen += memchr::memchr_iter(b'\n', piece).count() as u64;
            if left == n as u64 && piece.last() != Some(&b'\n') {
                seen = u64::MAX;
            }
            self.start += n;
            left -= n as u64;
        }
        if seen != lines {
            return Err(check_at(self.line + 1, format!("chunk text: expected {lines} base64 lines of {len} bytes")));
        }
        self.line += lines;
        Ok(())
    }

    /// The bytes of a range returned by `next_range`.
    pub fn bytes(&self, r: Range<usize>) -> &[u8] {
        &self.buf[r]
    }

    /// The next line, which must exist and follow the text-line rules.
    pub fn expect_line(&mut self, what: &str) -> Result<(u64, &[u8])> {
        match self.next_range()? {
            Some(r) => {
                let n = self.line;
                let l = &self.buf[r];
                check_text_line(l).map_err(|m| check_at(n, m))?;
                Ok((n, l))
            }
            None => Err(check_at(self.line + 1, format!("file ends early: expected {what}"))),
        }
    }
}

fn memchr(hay: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', hay)
}

/// The lines of a byte slice held in memory, with their 1-based numbers
/// and byte ranges (LF excluded), one at a time; the last line may lack
/// its LF. For texts already in memory (a part, a damaged file being
/// recovered); [`LineReader`] reads a stream.
pub struct SliceLines<'a> {
    bytes: &'a [u8],
    at: usize,
    no: u64,
}

impl<'a> SliceLines<'a> {
    /// Lines of `bytes`.
    pub fn new(bytes: &'a [u8]) -> SliceLines<'a> {
        SliceLines { bytes, at: 0, no: 0 }
    }

    /// The next line, not taken.
    pub fn peek(&self) -> Option<&'a [u8]> {
        (self.at <= self.bytes.len() && !(self.at == self.bytes.len() && self.no > 0)).then(|| {
            let rest = &self.bytes[self.at..];
            &rest[..memchr(rest).unwrap_or(rest.len())]
        })
    }

    /// Where the next line starts.
    pub fn offset(&self) -> usize {
        self.at
    }
}

impl<'a> Iterator for SliceLines<'a> {
    type Item = (u64, Range<usize>, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        let l = self.peek()?;
        let r = self.at..self.at + l.len();
        self.at = r.end + 1;
        self.no += 1;
        Some((self.no, r, l))
    }
}

/// The rules every non-base64 line obeys: printable ASCII, not empty, no trailing space.
pub fn check_text_line(l: &[u8]) -> std::result::Result<(), Reason> {
    if l.is_empty() {
        return Err("empty line".into());
    }
    if let Some(p) = l.iter().position(|&b| !(0x20..0x7f).contains(&b)) {
        let what = match l[p] {
            b'\r' => "CR (only LF ends lines)".to_string(),
            b'\t' => "tab".to_string(),
            b => format!("byte 0x{b:02x}"),
        };
        return Err(reason!("column {}: {what} where printable ASCII was expected", p + 1));
    }
    if l.last() == Some(&b' ') {
        return Err("trailing space".into());
    }
    Ok(())
}
