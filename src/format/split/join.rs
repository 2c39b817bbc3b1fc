//! Joining a head and its parts back into the single text, each part
//! checked against the head as it streams.

use super::head::*;
use std::collections::VecDeque;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::map::{LineMap, SharedMap};
use super::part::{PartReader, Splice};
use crate::error::{check_at, Error, Position, Result};
use crate::format::syntax::{lossy, ArrLine};
use crate::fs::Skip;

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
    /// The parts that will be opened, in order, told before the first is:
    /// a source whose reads are slow (Git inflating a blob) may begin the
    /// next ones while one is read.
    fn will_open(&self, _ixs: &[u64]) {}
    /// Checks `part` (listed on the head's line `head_line`) as far as the
    /// source can without reading it: that it is there, of the size the
    /// head gives, and an LFS pointer's oid where the head binds the file's
    /// SHA-256. What a read of some arrays checks of the parts it leaves
    /// unopened; a source that can tell nothing says nothing.
    fn check_unopened(&self, _part: &PartLine, _head_line: u64) -> Result<()> {
        Ok(())
    }
}

/// The error for part `ix` found `size` bytes long where the head's line
/// `head_line` gives it `bytes`.
pub fn unlike_head(ix: u64, bytes: u64, head_line: u64, size: u64) -> Error {
    let m = format!(
        "part {ix:06} does not match the head (line {head_line}): {size} bytes, the head says {bytes}: \
         a part changed without its head, or the other way round"
    );
    Error::check(Position::None, m)
}

/// The error for `path`, a part present beyond the `count` a head lists.
pub fn unlisted_part(count: usize, path: &Path) -> Error {
    let m = format!("a part the head does not list (it lists {count}, named {} on)", part_name(1));
    Error::check(Position::None, m).in_file(path)
}

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
    /// Some parts are left out ([`Joined::leaving_out`]).
    leaves_out: bool,
    /// Whether the source was told which parts will be opened.
    told: bool,
}

enum Segment {
    Bytes(io::Cursor<Vec<u8>>),
    Part(usize),
    /// A part left out: only the `arr` lines the head lists under it.
    LeftOut(usize),
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
            leaves_out: false,
            told: false,
        }
    }

    /// Leaves out the parts `out` is true of: in place of each, only the
    /// `arr` lines the head lists under it, as if every array beginning in
    /// it were passed over ([`crate::fs::Skip::omits_arrays`]); the part is
    /// never opened. For a reader to whom those arrays are proven
    /// otherwise ([`crate::format::Carried`]): each must lie in
    /// parts left out only, none ending inside an array, or the read fails
    /// where a part left out should have been.
    pub fn leaving_out(mut self, out: &[bool]) -> Joined<'a> {
        for seg in self.queue.iter_mut() {
            if let Segment::Part(i) = *seg {
                if out.get(i).copied().unwrap_or(false) {
                    *seg = Segment::LeftOut(i);
                    self.leaves_out = true;
                }
            }
        }
        self
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

    /// Total size of the parts it reads (all but those left out), as the head says.
    pub fn parts_len(&self) -> u64 {
        self.queue.iter().filter_map(|s| if let Segment::Part(i) = s { Some(self.parts[*i].bytes) } else { None }).sum()
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
            // A part the source cannot give (an LFS object it could not
            // fetch) makes the input unusable: no check ran on it.
            Err(e) if e.kind() != crate::error::Kind::Check => return Err(io::Error::other(e.in_file(&name))),
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
        if self.leaves_out && i + 1 == self.parts.len() {
            m.tail_at = Some(self.joined_lines + 1);
        }
        Ok(Some(pr))
    }

    /// The `arr` lines the head lists under part `i`, left out.
    fn left_out(&mut self, i: usize) -> Vec<u8> {
        let arrs = std::mem::take(&mut self.arrs[i]);
        let mut m = self.map.lock().expect("map");
        let mut text = Vec::new();
        for (k, a) in arrs.iter().enumerate() {
            self.joined_lines += 1;
            m.arrs.push((self.joined_lines, self.part_lines[i] + 1 + k as u64));
            text.extend_from_slice(a);
            text.push(b'\n');
        }
        if i + 1 == self.parts.len() {
            m.tail_at = Some(self.joined_lines + 1);
        }
        self.prev_inside = Some(false);
        self.open_arr = arrs.back().cloned().or(self.open_arr.take());
        text
    }

    /// After the last part: any part present that the head does not list.
    fn unlisted(&mut self) -> io::Result<()> {
        for p in self.source.unlisted(self.parts.len() as u64) {
            self.fault(unlisted_part(self.parts.len(), &p))?;
        }
        Ok(())
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
                    if !self.told {
                        self.told = true;
                        let ixs: Vec<u64> = self
                            .queue
                            .iter()
                            .filter_map(|s| if let Segment::Part(j) = s { Some(self.parts[*j].ix) } else { None })
                            .collect();
                        self.source.will_open(&ixs);
                    }
                    self.queue.pop_front();
                    self.current = self.open_part(i)?;
                    if i + 1 == self.parts.len() {
                        self.unlisted()?;
                    }
                }
                Some(Segment::LeftOut(i)) => {
                    let i = *i;
                    self.queue.pop_front();
                    let text = self.left_out(i);
                    self.queue.push_front(Segment::Bytes(io::Cursor::new(text)));
                    if i + 1 == self.parts.len() {
                        self.unlisted()?;
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

    fn omits_arrays(&self) -> bool {
        self.leaves_out
    }
}
