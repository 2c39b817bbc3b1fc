//! A split snapshot of the tree form read for some of its arrays: the text
//! given is the joined text less the chunks of every other array, and the
//! parts that hold none of the kept arrays' chunks are never opened (in a
//! partial clone or an LFS repository: never fetched).
//!
//! This is sound only in the tree form, where the root covers the `arr`
//! lines, which the head holds, and each array's digest is built from its
//! chunks' `ch` lines: what is left out is bound by the `arr` lines given
//! (docs/FORMAT.md section 19). A reader of this text passes over the
//! arrays left out ([`crate::fs::Skip::omits_arrays`]); one that does not
//! finds an `arr` line where it expects a chunk and fails.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::path::PathBuf;

use super::head::*;
use super::join::PartSource;
use super::map::{LineMap, SharedMap};
use super::part::Limited;
use crate::error::{check_at, Result};
use crate::format::read::LineReader;
use crate::format::syntax::{body_text_len, lines_for, lossy, ArrLine, ChLine};
use crate::fs::Skip;

/// The numbers of the parts a [`Sparse`] read of `head` for the arrays
/// `keep` is true of certainly opens: for each, the parts from the one its
/// `begin` line is in up to the one before the part the next array's is in
/// (or the last part). The part where the next array begins holds the
/// array's last chunks only sometimes, which the head does not tell: it is
/// opened when the array's text runs into it. What a caller fetches before
/// such a read (and the rest, if needed, when it is opened).
pub fn parts_for(head: &Head, keep: &dyn Fn(&str) -> bool) -> Vec<u64> {
    // Each array's name and the part (index) it begins in, in order.
    let begins: Vec<(String, usize)> = head
        .arrs
        .iter()
        .enumerate()
        .flat_map(|(i, arrs)| arrs.iter().filter_map(move |a| ArrLine::parse(a).ok().map(|a| (a.name, i))))
        .collect();
    let mut out = std::collections::BTreeSet::new();
    for (j, (name, first)) in begins.iter().enumerate() {
        if keep(name) {
            let last = begins.get(j + 1).map_or(head.parts.len().saturating_sub(1), |(_, i)| i.saturating_sub(1));
            let last = last.max(*first);
            out.extend((*first..=last).filter_map(|i| head.parts.get(i)).map(|p| p.ix));
        }
    }
    out.into_iter().collect()
}

/// What is given next.
enum Piece {
    /// The header lines and `sign`.
    Header(Vec<u8>),
    /// `audit` and `endwtxt`.
    Tail(Vec<u8>),
    /// An array's `arr` line (with LF), the head's line `head_line`.
    Arr { line: Vec<u8>, head_line: u64 },
    /// The text of an array kept, after its `arr` line up to `endarr`,
    /// from the part (index) its `begin` line is in.
    Body { begin: String, cont: String, part: usize },
}

/// A split snapshot read for the arrays `keep` names (see the module doc).
pub struct Sparse<'a> {
    source: Box<dyn PartSource + 'a>,
    parts: Vec<PartLine>,
    queue: VecDeque<Piece>,
    /// The kept array being given: its part's lines, which part, and the
    /// `cont` line a next part must start with.
    body: Option<(LineReader<Limited>, usize, String)>,
    /// Bytes being given.
    out: io::Cursor<Vec<u8>>,
    map: SharedMap,
    /// LFs given so far: the joined line number of the last line given.
    given_lines: u64,
}

impl<'a> Sparse<'a> {
    /// `head`'s text with only the arrays for which `keep` is true read
    /// from `source`'s parts. Every part the head lists is first checked
    /// as far as it can be unread ([`PartSource::check_unopened`]), and a
    /// part it does not list is refused, as a whole read refuses them.
    pub fn new(head: Head, source: Box<dyn PartSource + 'a>, keep: &dyn Fn(&str) -> bool) -> Result<Sparse<'a>> {
        source.will_open(&parts_for(&head, keep));
        for p in &head.parts {
            source.check_unopened(p, head.part_line(p.ix))?;
        }
        if let Some(extra) = source.unlisted(head.parts.len() as u64).first() {
            return Err(super::join::unlisted_part(head.parts.len(), extra));
        }
        let prefix_lines = head.prefix.iter().filter(|&&b| b == b'\n').count() as u64;
        let arr_count: usize = head.arrs.iter().map(Vec::len).sum();
        let head_lines_before_tail = head.part_line(1) + (head.parts.len() + arr_count) as u64 - 1;
        let mut queue = VecDeque::with_capacity(arr_count + 2);
        queue.push_back(Piece::Header(head.prefix));
        for (i, arrs) in head.arrs.iter().enumerate() {
            for (j, arr) in arrs.iter().enumerate() {
                let head_line = head.part_lines[i] + 1 + j as u64;
                let a = ArrLine::parse(arr).map_err(|m| check_at(head_line, m))?;
                let mut line = arr.clone();
                line.push(b'\n');
                queue.push_back(Piece::Arr { line, head_line });
                if keep(&a.name) {
                    let begin = begin_line(&a.name, a.dtype, &a.shape);
                    queue.push_back(Piece::Body { begin, cont: cont_line(&a.name, a.dtype, &a.shape), part: i });
                }
            }
        }
        queue.push_back(Piece::Tail(head.tail));
        let map = LineMap { prefix_lines, head_lines_before_tail, ..Default::default() };
        Ok(Sparse {
            source,
            parts: head.parts,
            queue,
            body: None,
            out: io::Cursor::new(Vec::new()),
            map: std::sync::Arc::new(std::sync::Mutex::new(map)),
            given_lines: 0,
        })
    }

    /// The line map, to name a part and its line in messages.
    pub fn map(&self) -> SharedMap {
        self.map.clone()
    }

    fn name(&self, i: usize) -> PathBuf {
        self.source.name(self.parts[i].ix)
    }

    /// Opens part `i` and checks its first line; `cont`: the line that must
    /// follow it.
    fn open(&self, i: usize, cont: Option<&str>) -> Result<LineReader<Limited>> {
        let p = self.parts[i];
        let name = self.name(i);
        let src = self.source.open(p.ix).map_err(|e| e.in_file(&name))?;
        // Never read past what the head declares.
        let mut lines = LineReader::skipping(Limited::new(src, p.bytes));
        let want = format!("{}{:06}", PART_MAGIC, p.ix);
        let (_, first) = lines.expect_line(&format!("`{want}`")).map_err(|e| e.in_file(&name))?;
        if first != want.as_bytes() {
            let m = format!("expected `{want}`, found `{}`: not part {} of this head", lossy(first, 40), p.ix);
            return Err(check_at(1, m).in_file(&name));
        }
        if let Some(c) = cont {
            let (n, l) = lines.expect_line(&format!("`{c}`")).map_err(|e| e.in_file(&name))?;
            if l != c.as_bytes() {
                let m = format!("expected `{c}` (the array the part before ends inside), found `{}`", lossy(l, 60));
                return Err(check_at(n, m).in_file(&name));
            }
        }
        Ok(lines)
    }

    /// Opens part `i` and reads it up to the `begin` line `begin`, passing
    /// over chunks' base64 unread (nothing read here is given).
    fn find_begin(&self, i: usize, begin: &str) -> Result<LineReader<Limited>> {
        let name = self.name(i);
        let mut lines = self.open(i, None)?;
        loop {
            let (n, l) = lines.expect_line(&format!("`{begin}`")).map_err(|e| e.in_file(&name))?;
            if l == begin.as_bytes() {
                return Ok(lines);
            }
            if l == PART_END.strip_suffix(b"\n").unwrap_or(PART_END) {
                let m = format!("no `{begin}` line, though the head lists the array under this part");
                return Err(check_at(n, m).in_file(&name));
            }
            if l.starts_with(b"ch ") {
                let ch = ChLine::parse(l).map_err(|m| check_at(n, m).in_file(&name))?;
                lines.skip_lines(body_text_len(ch.len), lines_for(ch.len)).map_err(|e| e.in_file(&name))?;
            }
        }
    }

    /// The next piece's bytes into `out`; false at the end.
    fn next_piece(&mut self) -> Result<bool> {
        let Some(piece) = self.queue.pop_front() else { return Ok(false) };
        let mut m = self.map.lock().expect("map");
        match piece {
            Piece::Header(t) => {
                self.given_lines += memchr::memchr_iter(b'\n', &t).count() as u64;
                self.out = io::Cursor::new(t);
            }
            Piece::Tail(t) => {
                m.tail_at = Some(self.given_lines + 1);
                self.out = io::Cursor::new(t);
            }
            Piece::Arr { line, head_line } => {
                self.given_lines += 1;
                m.arrs.push((self.given_lines, head_line));
                self.out = io::Cursor::new(line);
            }
            Piece::Body { begin, cont, part } => {
                drop(m);
                let lines = self.find_begin(part, &begin)?;
                self.start_run(part, &lines);
                self.body = Some((lines, part, cont));
                self.out = io::Cursor::new(Vec::new());
            }
        }
        Ok(true)
    }

    /// Lines given from now on come from part `i`, from the line after the
    /// one `lines` read last.
    fn start_run(&mut self, i: usize, lines: &LineReader<Limited>) {
        let name = self.name(i);
        self.map.lock().expect("map").parts.push((self.given_lines + 1, u64::MAX, name, lines.line_no() + 1));
    }

    /// Ends the run of lines from a part at the lines given so far.
    fn end_run(&mut self) {
        if let Some(last) = self.map.lock().expect("map").parts.last_mut() {
            last.1 = self.given_lines + 1 - last.0;
        }
    }

    /// The kept array's next lines into `out` (at most about 64 KiB); at
    /// its `endarr` the array is done.
    fn next_lines(&mut self) -> Result<()> {
        let Some((mut lines, mut part, cont)) = self.body.take() else { return Ok(()) };
        let mut buf = Vec::with_capacity(64 << 10);
        let mut count = 0u64;
        let mut done = false;
        while buf.len() < 64 << 10 {
            let (_, l) = lines.expect_line("`endarr`").map_err(|e| e.in_file(self.name(part)))?;
            if l == PART_END.strip_suffix(b"\n").unwrap_or(PART_END) {
                // The array goes on in the next part, which starts with its `cont` line.
                self.given_lines += count;
                count = 0;
                self.end_run();
                part += 1;
                if part >= self.parts.len() {
                    let m = "the last part ends inside an array";
                    return Err(check_at(lines.line_no(), m).in_file(self.name(part - 1)));
                }
                lines = self.open(part, Some(&cont))?;
                self.start_run(part, &lines);
                continue;
            }
            buf.extend_from_slice(l);
            buf.push(b'\n');
            count += 1;
            if l == b"endarr" {
                done = true;
                break;
            }
        }
        self.out = io::Cursor::new(buf);
        self.given_lines += count;
        if done {
            self.end_run();
        } else {
            self.body = Some((lines, part, cont));
        }
        Ok(())
    }
}

impl Read for Sparse<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.out.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            if self.body.is_some() {
                self.next_lines().map_err(io::Error::other)?;
                continue;
            }
            if !self.next_piece().map_err(io::Error::other)? {
                return Ok(0);
            }
        }
    }
}

/// A kept array's chunks are passed over where the reader asks (a load of
/// some rows): what is given already is dropped, the rest passed over in
/// its part.
impl Skip for Sparse<'_> {
    fn skip(&mut self, n: u64, lines: u64) -> io::Result<bool> {
        let Some((body, _, _)) = &mut self.body else { return Ok(false) };
        let rest = &self.out.get_ref()[(self.out.position() as usize).min(self.out.get_ref().len())..];
        let (len, lfs) = (rest.len() as u64, memchr::memchr_iter(b'\n', rest).count() as u64);
        let (Some(n), Some(lines)) = (n.checked_sub(len), lines.checked_sub(lfs)) else { return Ok(false) };
        body.skip_lines(n, lines).map_err(io::Error::other)?;
        self.out = io::Cursor::new(Vec::new());
        // The lines given were counted with the batch they came in; those
        // passed over in the part are counted here.
        self.given_lines += lines;
        Ok(true)
    }

    fn passes_over(&self) -> bool {
        true
    }

    fn omits_arrays(&self) -> bool {
        true
    }
}
