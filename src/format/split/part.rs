//! One part's body as [`super::Joined`] reads it: its framing checked, its
//! bytes hashed against its `part` line as they pass, the head's `arr`
//! lines put in for its `begin` lines; and [`Limited`], which never reads
//! a part past what its head declares.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::frame::FrameHash;
use super::head::*;
use super::map::SharedMap;
use crate::error::{check_at, Error, Position, Result};
use crate::format::syntax::lossy;
use crate::fs::Skip;
use crate::limits::MAX_LINE;

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
pub(super) struct PartReader {
    inner: BufReader<Limited>,
    want: PartLine,
    pub(super) name: PathBuf,
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
    pub(super) splice: Splice,
    /// The part's `cont` line (without LF), if it has one.
    pub(super) cont: Option<Vec<u8>>,
    /// The last bytes of the body given: whether it ends after `endarr`.
    given_tail: Vec<u8>,
}

/// The state of putting `arr` lines in for `begin` lines as a part's body
/// streams. The body is given as read, straight into the caller's buffer;
/// only from a line that may be a `begin` line on are bytes held here
/// (`carry`), until the line is whole.
#[derive(Default)]
pub(super) struct Splice {
    /// The `arr` lines still to come in this part.
    pub(super) arrs: VecDeque<Vec<u8>>,
    /// The head's line of the next of them.
    pub(super) next_head_line: u64,
    pub(super) map: SharedMap,
    /// The joined text's line of the body's first line, and that line's
    /// number in the part.
    pub(super) joined_start: u64,
    pub(super) first_body: u64,
    /// True when the next byte given does not start a line (the last one
    /// given was not a line feed).
    pub(super) mid_line: bool,
    /// Body bytes read, not yet given; they start where a `begin` line may.
    pub(super) carry: Vec<u8>,
    /// An `arr` line being given.
    pub(super) out: io::Cursor<Vec<u8>>,
    /// `begin` lines that do not match the head.
    pub(super) faults: Vec<Error>,
    /// The last `arr` line put in.
    pub(super) last_arr: Option<Vec<u8>>,
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
    pub(super) fn new(inner: Box<dyn Skip>, want: PartLine, name: PathBuf, head_line: u64, hash: bool) -> PartReader {
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
    pub(super) fn ends_inside_array(&self) -> bool {
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
    pub(super) fn read_framing(&mut self) -> Result<bool> {
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
    pub(super) fn finish(mut self) -> Result<()> {
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
    pub(super) fn skip(&mut self, n: u64, lines: u64) -> io::Result<bool> {
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
