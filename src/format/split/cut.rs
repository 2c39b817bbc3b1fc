//! Cutting a single-file text into parts as it streams, line by line.

use super::head::*;
use std::io::{self, Read, Write};
use std::path::PathBuf;

use super::frame::FrameHash;
use super::join::PartSource;
use super::plan::{array_units, cuts};
use crate::error::{check_at, Error, Position, Result};
use crate::format::layout::last_line_width;
use crate::format::layout::Layout;
use crate::format::read::LineReader;
use crate::format::syntax::{lines_for, B64_WIDTH};
use crate::format::syntax::{lossy, ArrLine, ChLine, IdxLine};

/// Where parts are written while a snapshot is split.
pub trait PartSink {
    /// Where a part's bytes go.
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
    fn open(&self, ix: u64) -> Result<Box<dyn crate::fs::Skip>> {
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
    frame: FrameHash,
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
        self.frame.update(b);
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

    /// Copies the base64 lines of the chunk `ch` as they are, once each is
    /// as wide as the canonical form makes it: a part's frame leaves out
    /// exactly those bytes (section 18), so a line of another width could
    /// not be framed.
    fn copy_lines(&mut self, ch: &ChLine) -> Result<()> {
        if ch.lines != lines_for(ch.len) {
            let m = format!("chunk {}: {} base64 lines, where its length makes {}", ch.ix, ch.lines, lines_for(ch.len));
            return Err(check_at(self.lines.line_no(), m));
        }
        for k in 0..ch.lines {
            let r = self.lines.next_range()?.ok_or_else(|| check_at(self.lines.line_no() + 1, "file ends early"))?;
            let want = if k + 1 == ch.lines { last_line_width(ch.len) } else { B64_WIDTH } + 2;
            if r.len() != want {
                return Err(check_at(
                    self.lines.line_no(),
                    format!("a base64 line of {} bytes, where chunk {} has {want}: not canonical WTXT", r.len(), ch.ix),
                ));
            }
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
        let mut p = PartOut { inner, frame: FrameHash::default(), bytes: 0, lines: 0 };
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
                hash: PartHash::Frame(p.frame.finish().0),
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
            self.copy_lines(&ch)?;
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
