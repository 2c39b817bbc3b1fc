//! Joining a head and its parts back into the single text, each part
//! checked against the head as it streams.

use super::head::*;
use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::frame::FrameHash;
use crate::error::{check_at, Error, Position, Result};
use crate::format::syntax::{lossy, ArrLine};
use crate::fs::Skip;
use crate::limits::MAX_LINE;

/// Where the parts of a head are read from: files next to it, or blobs in
/// a Git tree or index.
pub trait PartSource {
    /// Opens part `ix` (a reader that owns what it reads; one that can
    /// pass over bytes unread where the source allows, see
    /// [`Joined::without_part_hashes`]).
    fn open(&self, ix: u64) -> Result<Box<dyn crate::fs::Skip>>;
    /// The path that names part `ix` in messages.
    fn name(&self, ix: u64) -> PathBuf;
    /// Parts present beyond the `count` the head lists (a stray part is
    /// as suspect as a missing one).
    fn unlisted(&self, _count: u64) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// Where a line of the joined text comes from, for messages.
#[derive(Default, Debug)]
pub struct LineMap {
    pub(super) prefix_lines: u64,
    /// (first joined line, body lines, part file, its line of the first body line)
    pub(super) parts: Vec<(u64, u64, PathBuf, u64)>,
    /// (joined line, head line) of each `arr` line put in for a `begin` line.
    pub(super) arrs: Vec<(u64, u64)>,
    pub(super) head_lines_before_tail: u64,
    pub(super) total_parts: usize,
    /// The joined line the head's tail starts on, where the text does not
    /// give every part's lines ([`super::Sparse`]).
    pub(super) tail_at: Option<u64>,
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
        if let Some(t) = self.tail_at.filter(|&t| n >= t) {
            return Some((None, self.head_lines_before_tail + (n - t) + 1));
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

/// A chunk's lines are passed over unread only where nothing else needs
/// them: the parts unhashed ([`Joined::without_part_hashes`], the caller
/// proves what it keeps) and a fault stopping the read (not lenient).
impl Skip for Joined<'_> {
    fn skip(&mut self, n: u64, lines: u64) -> io::Result<bool> {
        if !self.passes_over() {
            return Ok(false);
        }
        match &mut self.current {
            Some(cur) => cur.skip(n, lines),
            None => Ok(false),
        }
    }

    fn passes_over(&self) -> bool {
        !self.hash_parts && self.faults.is_none()
    }
}

/// How a part's bytes are checked against its `part` line as they pass.
enum PartCheck {
    /// Its frame hash (and lines, counted by the frame).
    Frame(FrameHash),
    /// SHA-256 of every byte, and LFs counted (heads written before frames).
    File(Sha256, u64),
    /// LFs only: the caller proves the bytes otherwise.
    Lines(u64),
}

impl PartCheck {
    fn update(&mut self, b: &[u8]) {
        match self {
            PartCheck::Frame(f) => f.update(b),
            PartCheck::File(sha, lines) => {
                sha.update(b);
                *lines += memchr::memchr_iter(b'\n', b).count() as u64;
            }
            PartCheck::Lines(lines) => *lines += memchr::memchr_iter(b'\n', b).count() as u64,
        }
    }

    /// The part's lines taken so far.
    fn lines(&self) -> u64 {
        match self {
            PartCheck::Frame(f) => f.lines_so_far(),
            PartCheck::File(_, lines) | PartCheck::Lines(lines) => *lines,
        }
    }

    /// What binds the bytes seen (`None`: not checked) and their lines.
    fn finish(self) -> (Option<PartHash>, u64) {
        match self {
            PartCheck::Frame(f) => {
                let (h, lines) = f.finish();
                (Some(PartHash::Frame(h)), lines)
            }
            PartCheck::File(sha, lines) => (Some(PartHash::File(sha.finalize().into())), lines),
            PartCheck::Lines(lines) => (None, lines),
        }
    }
}

/// One part's body, with its framing checked and its bytes hashed.
struct PartReader {
    inner: BufReader<Limited>,
    want: PartLine,
    name: PathBuf,
    head_line: u64,
    /// How the part's bytes are checked against its `part` line.
    check: PartCheck,
    bytes: u64,
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
    fn new(inner: Box<dyn Skip>, want: PartLine, name: PathBuf, head_line: u64, hash: bool) -> PartReader {
        // Unhashed, a part may be passed over in places ([`PartReader::skip`]):
        // little is read ahead of them.
        let ahead = if hash { 1 << 20 } else { crate::fs::SKIP_READ_AHEAD };
        PartReader {
            // Never read past what the head declares (and the one byte that
            // shows a part is longer): a huge part costs no more than its size.
            inner: BufReader::with_capacity(ahead, Limited::new(inner, want.bytes)),
            want,
            name,
            head_line,
            check: match (hash, want.hash) {
                (false, _) => PartCheck::Lines(0),
                (true, PartHash::Frame(_)) => PartCheck::Frame(FrameHash::default()),
                (true, PartHash::File(_)) => PartCheck::File(Sha256::new(), 0),
            },
            bytes: 0,
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
        self.check.update(&l);
        self.bytes += l.len() as u64;
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
        let (hash, lines) = std::mem::replace(&mut self.check, PartCheck::Lines(0)).finish();
        if self.bytes != self.want.bytes || lines != self.want.lines {
            return fail(format!(
                "{} bytes in {} lines, the head says {} in {} (truncated or changed?)",
                self.bytes, lines, self.want.bytes, self.want.lines
            ));
        }
        if hash.is_some_and(|h| h != self.want.hash) {
            return fail("its hash differs: it was changed, or comes from another generation".into());
        }
        Ok(())
    }
}

impl PartReader {
    /// Passes over the next `n` body bytes (a chunk's base64 lines,
    /// `lines` of them by its `ch` line) without reading them, when the
    /// part's bytes are proven by other means ([`PartCheck::Lines`]: a
    /// frame hash needs every byte) and its source can: what was read
    /// ahead is dropped, the rest passed over, and the lines counted as
    /// declared. `Ok(false)`, nothing consumed: read them through.
    fn skip(&mut self, n: u64, lines: u64) -> io::Result<bool> {
        let arr_left = self.splice.out.get_ref().len() as u64 - self.splice.out.position();
        if !matches!(self.check, PartCheck::Lines(_)) || self.eof || arr_left > 0 {
            return Ok(false);
        }
        // Read ahead, in the order the body gives them: counted already
        // (all but the buffer's), and to be dropped.
        let pending = &self.pending.get_ref()[(self.pending.position() as usize).min(self.pending.get_ref().len())..];
        let ahead = [&self.splice.carry[..], pending, &self.held[..]];
        let lfs = |b: &[u8]| memchr::memchr_iter(b'\n', b).count() as u64;
        let counted: u64 = ahead.iter().map(|b| lfs(b)).sum();
        let buffered = self.inner.buffer();
        let read = ahead.iter().map(|b| b.len() as u64).sum::<u64>() + buffered.len() as u64;
        if read >= n || counted + lfs(buffered) > lines {
            return Ok(false);
        }
        let buffered = buffered.len();
        if !self.inner.get_mut().skip(n - read)? {
            return Ok(false);
        }
        self.inner.consume(buffered);
        if let PartCheck::Lines(seen) = &mut self.check {
            *seen += lines - counted;
        }
        self.bytes += buffered as u64 + (n - read);
        self.splice.carry.clear();
        self.splice.mid_line = false;
        self.pending = io::Cursor::new(Vec::new());
        self.held.clear();
        self.given_tail.clear();
        Ok(true)
    }
}

/// A part's source, never read past `left` bytes.
pub(super) struct Limited {
    src: Box<dyn Skip>,
    left: u64,
}

impl Limited {
    /// `src`, read no further than `bytes` and the one byte that shows a
    /// part is longer than its head says.
    pub(super) fn new(src: Box<dyn Skip>, bytes: u64) -> Limited {
        Limited { src, left: bytes.saturating_add(1) }
    }
}

impl Skip for Limited {
    fn skip(&mut self, n: u64, _lines: u64) -> io::Result<bool> {
        Limited::skip(self, n)
    }

    fn passes_over(&self) -> bool {
        self.src.passes_over()
    }
}

impl Read for Limited {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let m = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        if m == 0 {
            return Ok(0);
        }
        let n = self.src.read(&mut buf[..m])?;
        self.left = self.left.saturating_sub(n as u64);
        Ok(n)
    }
}

impl Limited {
    /// Passes over the next `n` bytes when the source can and they end
    /// before the limit (else the read through finds where the part ends).
    fn skip(&mut self, n: u64) -> io::Result<bool> {
        if n >= self.left || !self.src.skip(n, 0)? {
            return Ok(false);
        }
        self.left -= n;
        Ok(true)
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
                self.put_arr(&line, self.check.lines() - ahead + 1);
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
            self.check.update(&out[h..h + n]);
            self.bytes += n as u64;
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
