//! Loading a snapshot: the verifier's sink that keeps the decoded arrays
//! ([`Collect`], what [`Keep`] asks), [`load`] and its options ([`Load`]:
//! some arrays, some rows, checked against the root), and the canonical
//! rewrite of what was loaded.

use std::collections::BTreeMap;
use std::io::Read;

use crate::buffer::Spill;
use crate::crypto::digest::Hash;
use crate::error::{check_at, Result};
use crate::format::read::{ArrayStart, Header, LineReader};
use crate::format::verify::{self, Report, Sink, VerifyOptions};
use crate::format::{layout, write};
use crate::model::Array;

/// Which decoded arrays a load keeps, and where. Every array is verified
/// whatever is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Keep {
    /// Every array; a large one in a mapped temporary file, so loading a
    /// WTXT that really holds gigabytes costs file-backed pages, not heap.
    #[default]
    Spilled,
    /// Every array on the heap, for a caller that wants them there (the
    /// Python package hands them to NumPy); bounded by the file's size.
    InMemory,
    /// Only the metadata arrays (names starting `__`: original names,
    /// foreign metadata); the others are checked and dropped.
    Metadata,
}

/// Where a loaded array's bytes go: its own buffer (`None` after a failure
/// to hold them), an array already held with the same bytes, or the
/// caller's memory (with how much of it is written).
enum Held<'t> {
    Own(Option<Spill>),
    Known(Array),
    Into(&'t mut [u8], usize),
}

/// Memory of the caller's that an array's kept rows are decoded straight
/// into ([`Load::run_lines_into`]): no buffer of the load's own and no copy
/// after, at the price that a failed check leaves it partly written. What
/// it must hold is checked against the `arr` line before a byte is written.
pub struct Destination<'t> {
    /// The element type the caller holds.
    pub dtype: crate::model::Dtype,
    /// The shape of what is kept: the first dimension counts the rows.
    pub shape: Vec<u64>,
    /// Exactly the bytes of those rows.
    pub bytes: &'t mut [u8],
}

impl Destination<'_> {
    /// Whether this holds array `a`'s `want` bytes, rows `taken`.
    fn fits(&self, a: &ArrayStart, want: u64, taken: Option<Rows>) -> Result<()> {
        let shape = kept_shape(a.arr.shape.clone(), taken);
        if self.dtype != a.arr.dtype || self.shape != shape || self.bytes.len() as u64 != want {
            return Err(check_at(
                a.line,
                format!(
                    "array {}: holds {} {shape:?} where the destination is {} {:?} ({} bytes)",
                    crate::error::one_line(&a.arr.name),
                    a.arr.dtype.as_str(),
                    self.dtype.as_str(),
                    self.shape,
                    self.bytes.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Rows `start..end` of an array's first dimension (see [`Load::rows`]).
type Rows = (u64, u64);

/// The shape of what is kept of an array of `shape`: with rows `taken`,
/// the first dimension counts those.
fn kept_shape(mut shape: Vec<u64>, taken: Option<Rows>) -> Vec<u64> {
    if let (Some((start, end)), Some(first)) = (taken, shape.first_mut()) {
        *first = end - start;
    }
    shape
}

/// Collects decoded arrays while a file is verified (see [`Keep`]).
#[derive(Default)]
pub struct Collect<'t> {
    /// Each array kept, and the rows it holds (`None`: all of it).
    arrays: Vec<(ArrayStart, Held<'t>, Option<Rows>)>,
    /// See [`Load::run_lines_into`]; each is taken out when its array begins.
    into: BTreeMap<String, Destination<'t>>,
    /// Verified arrays of other files, with their SHA-256 (see [`Load::known`]).
    known: Vec<(Array, Hash)>,
    keep: Keep,
    /// The array being read is not kept.
    skipping: bool,
    /// Bytes reserved so far for the arrays kept.
    reserved: u64,
    /// HMAC tags as the file carries them, by array name.
    hmacs: Vec<(String, [u8; 32])>,
    limit: u64,
    rows_per_chunk: Option<u64>,
    /// The first failure to hold decoded bytes (disk full, no memory).
    failed: Option<crate::Error>,
    /// See [`Load::rows`].
    rows: Option<BTreeMap<String, (u64, u64)>>,
    /// The byte window of the array being read that is kept, and how far
    /// into that array the data has come.
    window: Option<(u64, u64)>,
    at: u64,
}

impl Collect<'_> {
    /// The byte window rows `wanted` of `a` span, checked against its
    /// (verified) `arr` line; an array of no dimensions is one row.
    fn window_of(a: &ArrayStart, (start, end): (u64, u64)) -> Result<(u64, u64)> {
        let rows = a.arr.shape.first().copied().unwrap_or(1);
        if start > end || end > rows {
            return Err(crate::Error::usage(format!(
                "array {}: rows {start}..{end} asked of its {rows}",
                crate::error::one_line(&a.arr.name)
            )));
        }
        // A rank-1 sub-byte array's "rows" are its elements: a window of
        // them must start and end on a byte.
        let inner = crate::model::element_count(a.arr.shape.get(1..).unwrap_or(&[])).unwrap_or(0);
        let bytes = |r: u64| r.checked_mul(inner).and_then(|e| a.arr.dtype.bytes_of(e));
        match (bytes(start), bytes(end)) {
            (Some(lo), Some(hi)) => Ok((lo, hi)),
            _ => Err(crate::Error::usage(format!(
                "array {}: rows {start}..{end} of {} elements end inside a byte (ask for multiples of {})",
                crate::error::one_line(&a.arr.name),
                a.arr.dtype,
                a.arr.dtype.block().elems
            ))),
        }
    }
}

impl Sink for Collect<'_> {
    fn in_place(&self) -> bool {
        !self.into.is_empty()
    }

    fn array(&mut self, a: &ArrayStart) {
        // A liar is caught by the verifier; a buffer grows only as data comes.
        self.rows_per_chunk = self.rows_per_chunk.or(a.layout.idx.map(|i| i.rows_per_chunk));
        if !a.arr.hmac_is_zero() {
            self.hmacs.push((a.arr.name.clone(), a.arr.hmac));
        }
        let metadata = crate::model::is_metadata_name(&a.arr.name);
        self.skipping = self.keep == Keep::Metadata && !metadata;
        self.window = None;
        self.at = 0;
        let mut taken = None;
        if let (Some(rows), false) = (&self.rows, metadata) {
            match rows.get(&a.arr.name).map(|&r| (r, Self::window_of(a, r))) {
                None => self.skipping = true,
                Some((r, Ok(w))) => (taken, self.window) = (Some(r), Some(w)),
                Some((_, Err(e))) => {
                    self.failed.get_or_insert(e);
                    self.skipping = true;
                }
            }
        }
        if self.skipping {
            return;
        }
        let want = self.window.map_or(a.arr.bytes, |(lo, hi)| hi - lo);
        if let Some(d) = self.into.remove(&a.arr.name) {
            match d.fits(a, want, taken) {
                Ok(()) => self.arrays.push((a.clone(), Held::Into(d.bytes, 0), taken)),
                Err(e) => {
                    self.failed.get_or_insert(e);
                    self.skipping = true;
                }
            }
            return;
        }
        let same = |(k, h): &&(Array, Hash)| {
            k.name == a.arr.name && k.dtype == a.arr.dtype && k.shape == a.arr.shape && *h == a.arr.sha256
        };
        if let Some((k, _)) = self.known.iter().find(same) {
            // Verified like any other, but not held twice: once the file
            // verifies, equal SHA-256 means equal bytes.
            self.arrays.push((a.clone(), Held::Known(k.clone()), None));
            self.skipping = true;
            return;
        }
        // All arrays together are bounded by the file's size (decoded bytes
        // are fewer than their text): what one declares cannot reserve more
        // than is left of it.
        let expected = want.min(self.limit.saturating_sub(self.reserved));
        self.reserved += expected;
        let buf = match self.keep {
            Keep::InMemory => Spill::in_memory(expected),
            _ => Spill::with_expected(expected),
        };
        let buf = match buf {
            Ok(b) => Some(b),
            Err(e) => {
                self.failed.get_or_insert(e);
                None
            }
        };
        self.arrays.push((a.clone(), Held::Own(buf), taken));
    }

    fn wants(&self, a: &ArrayStart, ch: &crate::format::syntax::ChLine) -> bool {
        let Some(rows) = &self.rows else { return true };
        if crate::model::is_metadata_name(&a.arr.name) {
            return true;
        }
        match rows.get(&a.arr.name).map(|&r| Self::window_of(a, r)) {
            None => false,
            Some(Ok((lo, hi))) => ch.off < hi && lo < ch.off + ch.len,
            // The load fails; the array's own report says why.
            Some(Err(_)) => true,
        }
    }

    fn wants_array(&self, arr: &crate::format::syntax::ArrLine) -> bool {
        self.rows.as_ref().is_none_or(|rows| keeps_array(rows, &arr.name))
    }

    fn chunk(&mut self, ch: &crate::format::syntax::ChLine) {
        self.at = ch.off;
    }

    fn data(&mut self, bytes: &[u8]) {
        if self.skipping {
            return;
        }
        let mut bytes = bytes;
        if let Some((lo, hi)) = self.window {
            // Only the part of these bytes inside the window is held.
            let (from, to) = (self.at, self.at + bytes.len() as u64);
            self.at = to;
            let (a, b) = (from.max(lo), to.min(hi));
            if a >= b {
                return;
            }
            bytes = &bytes[(a - from) as usize..(b - from) as usize];
        }
        match self.arrays.last_mut() {
            Some((_, Held::Own(held), _)) => {
                if let Some(Err(e)) = held.as_mut().map(|buf| buf.push(bytes)) {
                    self.failed.get_or_insert(e);
                    *held = None;
                }
            }
            Some((a, Held::Into(dest, at), _)) => match dest.get_mut(*at..*at + bytes.len()) {
                Some(room) => {
                    room.copy_from_slice(bytes);
                    *at += bytes.len();
                }
                // Past what its `arr` line declares: the verifier reports
                // that; nothing is written past the caller's memory.
                None => {
                    let what = format!("array {}: more bytes than it declares", crate::error::one_line(&a.arr.name));
                    self.failed.get_or_insert(check_at(a.line, what));
                }
            },
            _ => {}
        }
    }
}

/// Whether a load of `rows` ([`Load::rows`]) keeps any of array `name`:
/// the arrays named, and the metadata arrays always.
pub fn keeps_array(rows: &BTreeMap<String, (u64, u64)>, name: &str) -> bool {
    crate::model::is_metadata_name(name) || rows.contains_key(name)
}

/// A verified WTXT read into memory.
pub struct Loaded {
    /// The header lines.
    pub header: Header,
    /// The arrays, verified.
    pub arrays: Vec<Array>,
    /// What verification found.
    pub report: Report,
    /// `rows_per_chunk` of the first row-blocked array, if any.
    pub rows_per_chunk: Option<u64>,
    /// HMAC tags as the file carries them, by array name.
    pub hmacs: Vec<(String, [u8; 32])>,
    /// Each array's SHA-256 (its `arr` line's, verified), as `arrays`.
    pub digests: Vec<Hash>,
    /// With [`Load::rows`]: the rows of its first dimension each array
    /// holds (`None`: all of it, a metadata array), as `arrays`.
    pub rows: Vec<Option<(u64, u64)>>,
    /// The arrays (stored names) decoded into the caller's memory
    /// ([`Load::run_lines_into`]), whole, with the rows asked: they are
    /// not in `arrays`.
    pub placed: Vec<String>,
}

/// How a WTXT is loaded: which arrays are kept, and verified arrays of
/// other files it may hand back instead of holding equal bytes twice (the
/// sides of a merge). The one way a WTXT is read into memory; [`load`] is
/// its default.
#[derive(Default)]
pub struct Load<'a> {
    /// What is kept of the decoded arrays.
    pub keep: Keep,
    /// Files already loaded: an array with the same name, dtype, shape and
    /// SHA-256 as one of theirs is verified in full, then handed back as
    /// theirs.
    pub known: &'a [&'a Loaded],
    /// Only these rows (`start..end` of the first dimension) of these
    /// arrays, by stored name, are kept, with the metadata arrays; every
    /// other array is verified and dropped. What a rank of a distributed
    /// load holds: its share, whatever the snapshot's size. A range past
    /// an array's rows fails the load. In the tree form only the chunks
    /// these rows touch are decoded: every other chunk's `ch` line digest
    /// is bound to the root through its array's tree digest, so what is
    /// kept is proven without the rest's bytes, which go unchecked (as
    /// does `fastxor`; [`Report::skipped_chunks`] counts them). The 1.1
    /// form decodes and checks every byte.
    pub rows: Option<&'a BTreeMap<String, (u64, u64)>>,
}

impl Load<'_> {
    /// Reads and verifies a whole WTXT. Any failed check is an error naming
    /// its line (exit 1); `file_len` bounds pre-allocation.
    pub fn run<R: Read>(&self, input: R, file_len: u64, opts: &VerifyOptions) -> Result<Loaded> {
        self.run_lines(LineReader::new(input), file_len, opts)
    }

    /// [`Load::run`] of the text `lines` reads: with [`Load::rows`] in the
    /// tree form, one made by [`LineReader::skipping`] passes over
    /// the chunks not kept unread, where its input can.
    pub fn run_lines<R: Read>(&self, lines: LineReader<R>, file_len: u64, opts: &VerifyOptions) -> Result<Loaded> {
        self.run_lines_into(lines, file_len, opts, BTreeMap::new())
    }

    /// [`Load::run_lines`], decoding the kept bytes of the arrays named in
    /// `into` (by stored name, the rows [`Load::rows`] asks) straight into
    /// the caller's memory rather than a buffer of the load's own. Only
    /// what the verifier has not yet refused is written, but a check that
    /// fails after (the array's digest, the root, a signature) leaves that
    /// memory partly written: for a caller that would discard it on error.
    /// A destination whose array the snapshot does not hold fails the load.
    pub fn run_lines_into<R: Read>(
        &self,
        lines: LineReader<R>,
        file_len: u64,
        opts: &VerifyOptions,
        into: BTreeMap<String, Destination<'_>>,
    ) -> Result<Loaded> {
        self.report_lines(lines, file_len, opts, into)?
            .map_err(|report| report.first_error().expect("a failed report names its problem").to_error())
    }

    /// [`Load::run`], but a failed check gives back the whole report, whose
    /// problems callers can match by kind.
    pub fn run_or_report<R: Read>(
        &self,
        input: R,
        file_len: u64,
        opts: &VerifyOptions,
    ) -> Result<std::result::Result<Loaded, Report>> {
        self.report_lines(LineReader::new(input), file_len, opts, BTreeMap::new())
    }

    fn report_lines<R: Read>(
        &self,
        lines: LineReader<R>,
        file_len: u64,
        opts: &VerifyOptions,
        into: BTreeMap<String, Destination<'_>>,
    ) -> Result<std::result::Result<Loaded, Report>> {
        let known = self.known.iter().flat_map(|l| l.arrays.iter().cloned().zip(l.digests.iter().copied())).collect();
        let rows = self.rows.cloned();
        load_with(lines, opts, Collect { limit: file_len, keep: self.keep, known, rows, into, ..Default::default() })
    }
}

/// Reads and verifies a whole WTXT, every array kept ([`Load`]'s default).
pub fn load<R: Read>(input: R, file_len: u64, opts: &VerifyOptions) -> Result<Loaded> {
    Load::default().run(input, file_len, opts)
}

fn load_with<R: Read>(
    lines: LineReader<R>,
    opts: &VerifyOptions,
    mut sink: Collect,
) -> Result<std::result::Result<Loaded, Report>> {
    let report = verify::verify_lines(lines, opts, Some(&mut sink))?;
    if report.first_error().is_some() {
        return Ok(Err(report));
    }
    if let Some(e) = sink.failed {
        return Err(e);
    }
    if let Some(name) = sink.into.keys().next() {
        return Err(crate::Error::usage(format!(
            "no array {} among those kept to decode into",
            crate::error::one_line(name)
        )));
    }
    let header = report.header.clone().ok_or_else(|| check_at(1, "no header"))?;
    let mut arrays = Vec::with_capacity(sink.arrays.len());
    let mut digests = Vec::with_capacity(sink.arrays.len());
    let mut rows = Vec::with_capacity(sink.arrays.len());
    let mut placed = Vec::new();
    for (a, held, taken) in sink.arrays {
        let line = a.line;
        let arr = match held {
            Held::Into(dest, at) if at == dest.len() => {
                placed.push(a.arr.name);
                continue;
            }
            Held::Into(dest, at) => {
                let what = format!("array {}: {at} of its {} bytes decoded", a.arr.name, dest.len());
                return Err(check_at(line, what));
            }
            Held::Known(k) => k,
            Held::Own(data) => {
                let data = data.expect("no failure").finish()?;
                let n = data.as_bytes().len();
                Array::new(a.arr.name, a.arr.dtype, kept_shape(a.arr.shape, taken), data.slice(0..n))
                    .map_err(|e| check_at(line, e.message().to_string()))?
            }
        };
        digests.push(a.arr.sha256);
        arrays.push(arr);
        rows.push(taken);
    }
    let (rows_per_chunk, hmacs) = (sink.rows_per_chunk, sink.hmacs);
    Ok(Ok(Loaded { header, arrays, report, rows_per_chunk, hmacs, digests, rows, placed }))
}

/// The canonical bytes of a verified file: what the writer emits for the
/// same arrays and header values (HMAC tags carried over). A file is
/// canonical when these equal its own bytes, its `sign` line set aside
/// (a signature needs the key; it covers the header, which must match).
pub fn canonical_bytes(loaded: &Loaded) -> Result<Vec<u8>> {
    let mut out = std::io::Cursor::new(Vec::new());
    write_canonical(loaded, &mut out)?;
    Ok(out.into_inner())
}

/// Writes [`canonical_bytes`] to `out` (empty, at position 0), for a file
/// too large to hold twice.
pub fn write_canonical<W: std::io::Write + std::io::Seek + Send>(loaded: &Loaded, out: &mut W) -> Result<()> {
    use crate::format::syntax::Root;
    let (merkle_prev, streaming) = match &loaded.header.root {
        Root::Final { merkle_prev, .. } => (*merkle_prev, false),
        Root::Pending => ([0; 32], true),
    };
    let opts = write::WriteOptions {
        merkle_prev,
        audit: loaded.report.audit.clone(),
        streaming,
        carried_hmacs: loaded.hmacs.clone(),
        digest: loaded.header.digest(),
        ..write::WriteOptions::new(
            loaded.header.meta.clone(),
            loaded.rows_per_chunk.unwrap_or(layout::DEFAULT_ROWS_PER_CHUNK),
        )
    };
    write::write_snapshot(&loaded.arrays, &opts, out, &crate::progress::Progress::hidden())?;
    Ok(())
}

/// `bytes` without its `sign` line (line 5), if it has one.
pub fn without_sign_line(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let mut at = 0;
    for _ in 0..4 {
        match bytes[at..].iter().position(|&b| b == b'\n') {
            Some(p) => at += p + 1,
            None => return bytes.into(),
        }
    }
    if bytes[at..].starts_with(b"sign ") {
        let end = bytes[at..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| at + p + 1);
        let mut v = bytes[..at].to_vec();
        v.extend_from_slice(&bytes[end..]);
        return v.into();
    }
    bytes.into()
}

#[cfg(test)]
mod tests;
