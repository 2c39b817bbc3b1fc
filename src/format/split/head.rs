//! The head's grammar: its `part` lines, the part names and sizes, and the
//! head parsed from a text that may be split or single.

use std::io::{self, BufRead, BufReader, Read};

use crate::crypto::digest::Hash;
use crate::error::{check_at, reason, Error, Position, Reason, Result};
use crate::format::read::LineReader;
use crate::format::syntax::{dec, hexn, lossy, padded, shape_str, ArrLine, Fields, PResult};
use crate::limits::MAX_LINE;

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

pub(super) const PART_MAGIC: &str = "WTXT part ix=";
pub(super) const PART_END: &[u8] = b"endpart\n";
/// `WTXT part ix=NNNNNN` LF.
pub(super) const PART_FIRST_LEN: u64 = PART_MAGIC.len() as u64 + 7;

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
    type Err = Reason;

    /// `none`, or bytes with an optional `K`/`M`/`G` suffix (KiB, MiB, GiB).
    fn from_str(s: &str) -> std::result::Result<PartSize, Reason> {
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
        let bytes = n.checked_mul(1 << shift).ok_or_else(|| reason!("part size `{s}` overflows"))?;
        if bytes < MIN_PART_SIZE {
            return Err(reason!("part size `{s}`: expected at least {MIN_PART_SIZE} bytes"));
        }
        Ok(PartSize::Max(bytes))
    }
}

impl<'de> serde::Deserialize<'de> for PartSize {
    /// As on the command line (`"45M"`, `"none"`), or a number of bytes.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<PartSize, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Given {
            Bytes(u64),
            Text(String),
        }
        match Given::deserialize(d)? {
            Given::Bytes(n) => n.to_string().parse(),
            Given::Text(s) => s.parse(),
        }
        .map_err(serde::de::Error::custom)
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
    /// What binds the part's bytes.
    pub hash: PartHash,
}

/// What a `part` line binds its part by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartHash {
    /// `frame=`: SHA-256 of the part's frame ([`FrameHash`](super::frame::FrameHash)): what writers write.
    Frame(Hash),
    /// `sha256=`: SHA-256 of every byte, in heads written before frames.
    File(Hash),
}

impl PartLine {
    /// The line, without LF.
    pub fn to_line(&self) -> String {
        let (key, h) = match self.hash {
            PartHash::Frame(h) => ("frame", h),
            PartHash::File(h) => ("sha256", h),
        };
        format!("part ix={:06} bytes={} lines={} {key}={}", self.ix, self.bytes, self.lines, hex::encode(h))
    }

    /// Parses a `part` line.
    pub fn parse(line: &[u8]) -> PResult<PartLine> {
        let mut f = Fields::new(line, "part")?;
        let ix = padded(f.next("ix")?, 6, "ix")?;
        let bytes = dec(f.next("bytes")?, "bytes")?;
        let lines = dec(f.next("lines")?, "lines")?;
        let hash = if f.rest().starts_with(b"frame=") {
            PartHash::Frame(hexn::<32>(f.next("frame")?, "frame")?)
        } else {
            PartHash::File(hexn::<32>(f.next("sha256")?, "sha256")?)
        };
        f.end()?;
        Ok(PartLine { ix, bytes, lines, hash })
    }
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

/// Whether a file named `name` in a parts folder whose head lists `count`
/// parts is one it does not list yet could be taken for a part: numbered
/// 0 or past `count`, or a part's name in other letter case (a checkout
/// on a case-insensitive file system keeps only one of the two).
pub fn stray_part(name: &str, count: u64) -> bool {
    let lower = name.to_ascii_lowercase();
    part_ix(&lower).is_some_and(|ix| ix == 0 || ix > count || lower != name)
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
pub(super) fn check_head_size(len: u64, size: u64) -> Result<()> {
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

/// The head of a split snapshot, parsed.
#[derive(Clone)]
pub struct Head {
    /// The header lines and `sign`, as in the single file.
    pub prefix: Vec<u8>,
    /// The `part` lines, in order.
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
    pub fn header(&self) -> Result<crate::format::read::Header> {
        // What follows the header in the joined text is an `arr` line; a
        // stand-in end lets the reader see that no `sign` line is left.
        let text = [&self.prefix[..], b"endwtxt\n"].concat();
        crate::format::read::read_head(&mut LineReader::new(&text[..]))
    }
}

/// Reads the start of a WTXT file: a head when the line after the header
/// (and `sign`) is a `part` line, else the single file, returned unread.
pub enum Opened<'a> {
    /// A single-file WTXT: the reader, from where the sniffing stopped.
    Single(Box<dyn Read + 'a>),
    /// A split snapshot's head.
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
            if parts
                .first()
                .is_some_and(|q: &PartLine| std::mem::discriminant(&q.hash) != std::mem::discriminant(&p.hash))
            {
                return Err(check_at(n, "a head binds all its parts one way: `frame=` or `sha256=`, not both"));
            }
            parts.push(p);
            part_lines.push(n);
            arrs.push(Vec::new());
        } else if l.starts_with(b"arr ") && tail.is_empty() && !parts.is_empty() {
            crate::format::read::check_text_line(l).map_err(|m| check_at(n, m))?;
            begin_for(l).map_err(|m| check_at(n, m))?;
            arrs.last_mut().expect("after a part line").push(l.to_vec());
        } else if (l.starts_with(b"audit ") && tail.is_empty()) || l == b"endwtxt" {
            crate::format::read::check_text_line(l).map_err(|m| check_at(n, m))?;
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
