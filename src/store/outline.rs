//! A quick outline of a WTXT on disk: every array's `arr` line, and the
//! bytes of the few arrays a caller asks for (metadata arrays), read while
//! seeking over every other chunk's base64 lines instead of decoding them.
//!
//! Nothing here is trusted. A converter plans an output layout from the
//! outline (where each tensor's bytes will go) before the strict reader
//! runs; the strict reader then checks every byte, and what it announces
//! must agree with the outline or the plan is dropped. A file that does not
//! outline cleanly (damaged, encrypted, not canonical) gives `None`, and the
//! caller reads it the ordinary way, whose errors are the ones reported.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Seek};
use std::path::Path;

use super::files::parts_dir;
use crate::format::chunk;
use crate::format::layout::last_line_width;
use crate::format::split::{self, part_name};
use crate::format::syntax::{ArrLine, ChLine, B64_WIDTH};
use crate::fs::ReadAt;
use crate::limits::MAX_LINE;

/// One array of the outline.
pub struct Outlined {
    /// Its `arr` line, as parsed (not verified).
    pub arr: ArrLine,
    /// The array's bytes, for the arrays the caller asked for.
    pub data: Option<Vec<u8>>,
}

/// The `arr` lines a part's `begin` lines stand for, in order.
type ArrLines = VecDeque<Vec<u8>>;

/// Something the outline reads lines from and skips bytes in.
trait Segment: BufRead + Seek {}
impl<T: BufRead + Seek> Segment for T {}

/// Outlines the single file or split snapshot at `path`. `wanted` picks
/// the arrays whose bytes are decoded; together they may hold at most
/// `max_wanted` bytes. `None` when the file does not outline cleanly.
pub fn outline(path: &Path, wanted: &dyn Fn(&str) -> bool, max_wanted: u64) -> Option<Vec<Outlined>> {
    outline_of(&open_file(path)?, path, wanted, max_wanted)
}

/// [`outline`] of `file`, open already (its parts are found beside
/// `path`). Read in place: `file`'s own position is left where it was, so
/// the strict reader can read the same open file after.
pub fn outline_of(file: &File, path: &Path, wanted: &dyn Fn(&str) -> bool, max_wanted: u64) -> Option<Vec<Outlined>> {
    // Little is read ahead of each chunk seeked over (see `crate::fs::Skip`).
    let mut first = BufReader::with_capacity(crate::fs::SKIP_READ_AHEAD, ReadAt::new(file));
    let mut segments: Vec<(Box<dyn Segment + '_>, ArrLines)> = Vec::new();
    let head = {
        let start = first.fill_buf().ok()?;
        start.starts_with(b"WTXT 1\n")
    };
    if !head {
        return None;
    }
    match split::open(Box::new(ReadAt::new(file))).ok()? {
        split::Opened::Single(_) => segments.push((Box::new(first), VecDeque::new())),
        // The head holds every `arr` line: only the parts that hold the
        // wanted arrays' chunks are read ([`split::Sparse`]).
        split::Opened::Split(h) if h.arrs.iter().any(|a| !a.is_empty()) => {
            let source = Box::new(super::files::PartFiles::new(parts_dir(path), None));
            let sparse = split::Sparse::new(h, source, wanted).ok()?;
            segments.push((
                Box::new(Unseekable(BufReader::with_capacity(crate::fs::SKIP_READ_AHEAD, sparse))),
                VecDeque::new(),
            ));
        }
        split::Opened::Split(h) => {
            let dir = parts_dir(path);
            segments.push((Box::new(Cursor::new(h.prefix)), VecDeque::new()));
            for (p, arrs) in h.parts.iter().zip(h.arrs) {
                let f = open_file(&dir.join(part_name(p.ix)))?;
                segments.push((Box::new(BufReader::with_capacity(crate::fs::SKIP_READ_AHEAD, f)), arrs.into()));
            }
            segments.push((Box::new(Cursor::new(h.tail)), VecDeque::new()));
        }
    }
    let mut out: Vec<Outlined> = Vec::new();
    let mut budget = max_wanted;
    for (mut seg, mut arrs) in segments {
        scan(&mut *seg, &mut arrs, &mut out, wanted, &mut budget)?;
        if !arrs.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// A text with no chunks to seek over: only the wanted arrays' are in it.
struct Unseekable<R>(R);

impl<R: std::io::Read> std::io::Read for Unseekable<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl<R: BufRead> BufRead for Unseekable<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.0.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        self.0.consume(n)
    }
}

impl<R> Seek for Unseekable<R> {
    fn seek(&mut self, _: std::io::SeekFrom) -> std::io::Result<u64> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

/// `path` opened for reading when it is a regular file, as a part is
/// opened to be read ([`crate::store::PartFiles`]): a FIFO is never waited
/// on, a device never read.
pub(crate) fn open_file(path: &Path) -> Option<File> {
    let f = crate::fs::open_input_file(path).ok()?;
    f.metadata().ok()?.is_file().then_some(f)
}

/// Reads one segment's lines, skipping the chunks of arrays not wanted;
/// a part's `begin` line stands for the next of `arrs`.
fn scan(
    r: &mut dyn Segment,
    arrs: &mut ArrLines,
    out: &mut Vec<Outlined>,
    wanted: &dyn Fn(&str) -> bool,
    budget: &mut u64,
) -> Option<()> {
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let n = read_line(r, &mut line, MAX_LINE)?;
        if n == 0 {
            return Some(());
        }
        let mut l = line.strip_suffix(b"\n")?.to_vec();
        if l.starts_with(b"begin ") {
            let arr = arrs.pop_front()?;
            if split::begin_for(&arr).ok()?.as_bytes() != l {
                return None;
            }
            l = arr;
        }
        let l = &l[..];
        if l.starts_with(b"arr ") {
            let arr = ArrLine::parse(l).ok()?;
            // Names in strictly ascending byte order, as the strict reader
            // requires: writers planned with the outline never see a name twice.
            if out.last().is_some_and(|o| o.arr.name.as_bytes() >= arr.name.as_bytes()) {
                return None;
            }
            let data = if wanted(&arr.name) {
                *budget = budget.checked_sub(arr.bytes)?;
                Some(Vec::with_capacity(arr.bytes as usize))
            } else {
                None
            };
            out.push(Outlined { arr, data });
        } else if l.starts_with(b"ch ") {
            let ch = ChLine::parse(l).ok()?;
            match out.last_mut() {
                Some(Outlined { arr, data: Some(data) }) => {
                    // What the `arr` line declares bounds what is held.
                    if ch.len > arr.bytes - data.len() as u64 {
                        return None;
                    }
                    data.extend(read_chunk(r, &ch)?)
                }
                _ => skip_chunk(r, &ch)?,
            }
        }
        // Every other line (header, part framing, idx, endarr, audit) says
        // nothing the outline needs.
    }
}

/// Decodes a wanted chunk's lines and its `endch` strictly.
fn read_chunk(r: &mut dyn Segment, ch: &ChLine) -> Option<Vec<u8>> {
    let mut lines = Vec::with_capacity(ch.lines as usize);
    for _ in 0..ch.lines {
        let mut l = Vec::with_capacity(B64_WIDTH + 3);
        read_line(r, &mut l, MAX_LINE)?;
        l.pop().filter(|&c| c == b'\n')?;
        lines.push(l);
    }
    let data = chunk::decode(ch, lines.iter().map(|l| &l[..])).ok()?;
    expect_endch(r)?;
    Some(data)
}

/// Seeks over a chunk's base64 lines: their sizes follow from `len` alone
/// (full lines of 76 characters, the last of the remainder, each with a
/// space, a parity nibble and an LF).
fn skip_chunk(r: &mut dyn Segment, ch: &ChLine) -> Option<()> {
    let body = match ch.lines {
        0 => 0,
        k => (k - 1).checked_mul(B64_WIDTH as u64 + 3)?.checked_add(last_line_width(ch.len) as u64 + 3)?,
    };
    r.seek_relative(i64::try_from(body).ok()?).ok()?;
    expect_endch(r)
}

fn expect_endch(r: &mut dyn Segment) -> Option<()> {
    let mut l = Vec::with_capacity(8);
    read_line(r, &mut l, 8)?;
    (l == b"endch\n").then_some(())
}

/// Appends one line (at most `max` bytes and its LF) to `out`.
fn read_line(r: &mut dyn Segment, out: &mut Vec<u8>, max: usize) -> Option<usize> {
    let mut limited = std::io::Read::take(r, max as u64 + 1);
    limited.read_until(b'\n', out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hostile file cannot make the outline allocate or overflow: sizes
    /// it declares are checked before they are used, and a file that does
    /// not outline cleanly gives `None`.
    #[test]
    fn declared_sizes_are_bounded_before_use() {
        let dir = tempfile::tempdir().unwrap();
        let head = "WTXT 1\n";
        let arr = |name: &str, shape: &str, bytes: u64| {
            format!(
                "arr name={name} dtype=u8 shape={shape} order=C bytes={bytes} sha256={z} hmac={z} salt=0000000000000000\n",
                z = "0".repeat(64)
            )
        };
        let ch = |len: u64| {
            let lines = len.div_ceil(57);
            format!(
                "ch ix=000000 off=000000000000 len={len} sha256={} crc32c=00000000 b64=on width=76 lines={lines}\n",
                "0".repeat(64)
            )
        };
        let huge = 1u64 << 62;
        let cases = [
            // A metadata array past the budget.
            format!("{head}{}", arr("__m", &huge.to_string(), huge)),
            // A chunk longer than its (small, wanted) array.
            format!("{head}{}{}", arr("__m", "4", 4), ch(huge)),
            // A skipped chunk whose body length overflows.
            format!("{head}{}{}", arr("w", &u64::MAX.to_string(), u64::MAX), ch(u64::MAX)),
        ];
        for (i, text) in cases.iter().enumerate() {
            let p = dir.path().join(format!("{i}.wtxt"));
            std::fs::write(&p, text).unwrap();
            assert!(outline(&p, &crate::model::is_metadata_name, 1 << 20).is_none(), "case {i}");
        }
    }

    /// A FIFO or device where the snapshot or a part should be is refused
    /// at once, never waited on or read.
    #[test]
    fn a_fifo_or_device_is_not_outlined() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f.wtxt");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(outline(&fifo, &|_| false, 0).is_none());
        assert!(outline(Path::new("/dev/zero"), &|_| false, 0).is_none());
    }
}
