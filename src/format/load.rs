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
    /// Whether this holds array `a`'s `window` of bytes, rows `taken`.
    fn fits(&self, a: &ArrayStart, window: Option<(u64, u64)>, taken: Option<Rows>) -> Result<()> {
        let mut shape = a.arr.shape.clone();
        if let (Some((start, end)), Some(first)) = (taken, shape.first_mut()) {
            *first = end - start;
        }
        let want = window.map_or(a.arr.bytes, |(lo, hi)| hi - lo);
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
        let row = a.arr.bytes.checked_div(rows).unwrap_or(0);
        Ok((start * row, end * row))
    }
}

impl Sink for Collect<'_> {
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
        if let Some(d) = self.into.remove(&a.arr.name) {
            match d.fits(a, self.window, taken) {
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
        let want = self.window.map_or(a.arr.bytes, |(lo, hi)| hi - lo);
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
        let known = self.known.iter().flat_map(|l| l.arrays.iter().cloned().zip(l.digests.iter().copied())).collect();
        let rows = self.rows.cloned();
        let sink = Collect { limit: file_len, keep: self.keep, known, rows, into, ..Default::default() };
        load_with(lines, opts, sink)?
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
        self.report_lines(LineReader::new(input), file_len, opts)
    }

    fn report_lines<R: Read>(
        &self,
        lines: LineReader<R>,
        file_len: u64,
        opts: &VerifyOptions,
    ) -> Result<std::result::Result<Loaded, Report>> {
        let known = self.known.iter().flat_map(|l| l.arrays.iter().cloned().zip(l.digests.iter().copied())).collect();
        let rows = self.rows.cloned();
        load_with(lines, opts, Collect { limit: file_len, keep: self.keep, known, rows, ..Default::default() })
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
                let mut shape = a.arr.shape;
                if let (Some((start, end)), Some(first)) = (taken, shape.first_mut()) {
                    *first = end - start;
                }
                Array::new(a.arr.name, a.arr.dtype, shape, data.slice(0..n))
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
mod tests {
    use super::*;
    use crate::format::{split, syntax};
    use crate::model::Dtype;

    fn text(arrays: &[Array]) -> Vec<u8> {
        text_in(arrays, syntax::DigestForm::Sha256)
    }

    fn text_in(arrays: &[Array], digest: syntax::DigestForm) -> Vec<u8> {
        text_of(arrays, digest, 4)
    }

    fn text_of(arrays: &[Array], digest: syntax::DigestForm, rows_per_chunk: u64) -> Vec<u8> {
        let meta = syntax::Meta::new(0, Some("2026-01-01T00:00:00Z")).unwrap();
        let mut out = std::io::Cursor::new(Vec::new());
        let opts = write::WriteOptions { digest, ..write::WriteOptions::new(meta, rows_per_chunk) };
        write::write_snapshot(arrays, &opts, &mut out, &crate::progress::Progress::hidden()).unwrap();
        out.into_inner()
    }

    /// `t` with one character of the first base64 line of chunk `ix` of
    /// array `name` changed; `in_ch`: the first digit of that chunk's `ch`
    /// line's `sha256` instead.
    fn damaged(t: &[u8], name: &str, ix: u64, in_ch: bool) -> Vec<u8> {
        let at = t.windows(name.len() + 10).position(|w| w == format!("arr name={name} ").as_bytes()).unwrap();
        let ch = format!("\nch ix={ix:06}");
        let body = at + t[at..].windows(ch.len()).position(|w| w == ch.as_bytes()).unwrap() + 1;
        let line = body + t[body..].iter().position(|&c| c == b'\n').unwrap() + 1;
        let at = if in_ch { body + memchr::memmem::find(&t[body..line], b"sha256=").unwrap() + 7 } else { line };
        let mut bad = t.to_vec();
        bad[at] = if bad[at] == b'a' { b'b' } else { b'a' };
        bad
    }

    /// Parts in memory that count the bytes read from them, and pass over
    /// bytes unread as files do; those numbered in `gone` fail to open.
    struct Counted {
        parts: Vec<Vec<u8>>,
        read: std::sync::Arc<std::sync::atomic::AtomicU64>,
        gone: Vec<u64>,
    }

    struct CountedPart(std::io::Cursor<Vec<u8>>, std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl Read for CountedPart {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            Ok(n)
        }
    }

    impl crate::fs::Skip for CountedPart {
        fn skip(&mut self, n: u64, lines: u64) -> std::io::Result<bool> {
            self.0.skip(n, lines)
        }

        fn passes_over(&self) -> bool {
            true
        }
    }

    impl split::PartSource for Counted {
        fn open(&self, ix: u64) -> Result<Box<dyn crate::fs::Skip>> {
            if self.gone.contains(&ix) {
                return Err(crate::Error::input(crate::error::Position::None, format!("part {ix} is not here")));
            }
            let part = std::io::Cursor::new(self.parts[ix as usize - 1].clone());
            Ok(Box::new(CountedPart(part, self.read.clone())))
        }
        fn name(&self, ix: u64) -> std::path::PathBuf {
            split::part_name(ix).into()
        }
    }

    /// A rank's share of a split snapshot in the tree form: the chunks it
    /// does not keep are passed over unread (a third of the parts' bytes
    /// is read for a quarter of them kept), the rows it keeps are exact
    /// and proven as when every byte is read, and a part cut short still
    /// fails.
    #[test]
    fn a_share_of_split_parts_passes_over_the_chunks_it_does_not_keep_unread() {
        // Eight chunks of one 128 KiB row each, past what the readers read ahead.
        let row = 1usize << 17;
        let values: Vec<u8> = (0..8 * row).map(|i| (i * 7 % 251) as u8).collect();
        let a = Array::new("a", Dtype::U8, vec![8, row as u64], values.clone().into()).unwrap();
        let t = text_of(&[a, arr("b", 2)], syntax::DigestForm::Tree, 1);
        let rows = BTreeMap::from([("a".to_string(), (3, 5))]);
        let cut = |t: &[u8]| {
            let mut parts: Vec<Vec<u8>> = Vec::new();
            let head = split::split(t, 400 << 10, &mut parts).unwrap();
            (head, parts)
        };
        let load = |(head, parts): &(Vec<u8>, Vec<Vec<u8>>), skipping: bool| {
            let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let Ok(split::Opened::Split(h)) = split::open(Box::new(&head[..])) else { panic!("a head") };
            let source = Counted { parts: parts.clone(), read: read.clone(), gone: Vec::new() };
            let joined = split::Joined::new(h, Box::new(source), None).without_part_hashes();
            let lines = if skipping { LineReader::skipping(joined) } else { LineReader::new(joined) };
            let got = Load { rows: Some(&rows), ..Default::default() }.run_lines(lines, 1 << 30, &Default::default());
            (got, read.load(std::sync::atomic::Ordering::Relaxed))
        };
        let whole = cut(&t);
        let total: u64 = whole.1.iter().map(|p| p.len() as u64).sum();
        assert!(whole.1.len() >= 3, "{} parts", whole.1.len());
        for threads in [1, 5] {
            crate::threads::set(threads);
            let (got, read) = load(&whole, true);
            let got = got.unwrap();
            assert_eq!(got.arrays[0].bytes(), &values[3 * row..5 * row]);
            assert_eq!(got.report.skipped_chunks, 6, "all of a's one-row chunks but those kept");
            assert_eq!(got.report.arrays_passed_over, 1, "b, none of whose rows is kept");
            // The two chunks kept are a quarter of the parts; each chunk
            // passed over costs what was read ahead into it.
            assert!(read < total / 3, "{read} of {total} bytes read");
            let (through, all) = load(&whole, false);
            assert_eq!(through.unwrap().arrays[0].bytes(), got.arrays[0].bytes());
            assert_eq!(all, total, "read through: every byte");
            // What is passed over is not checked (`wtxt verify` checks it)...
            assert!(load(&cut(&damaged(&t, "a", 6, false)), true).0.is_ok());
            // ...nor is an array none of whose rows is kept (its `arr` line
            // is bound by the root; its chunks are passed over whole)...
            assert!(load(&cut(&damaged(&t, "b", 9, true)), true).0.is_ok());
            // ...but a kept array's `ch` lines' digests are bound to the
            // root, and a kept chunk is checked.
            for (name, ix, in_ch) in [("a", 6, true), ("a", 0, true), ("a", 4, false)] {
                let Err(e) = load(&cut(&damaged(&t, name, ix, in_ch)), true).0 else { panic!("{name} {ix} loaded") };
                assert_eq!(e.kind(), crate::error::Kind::Check, "{e}");
            }
            // A byte gone from a chunk passed over: the line after it is
            // not where the text says it is.
            let mut short = whole.clone();
            let (p, at) = short
                .1
                .iter()
                .enumerate()
                .find_map(|(i, p)| Some((i, memchr::memmem::find(p, b"\nch ix=000006")?)))
                .unwrap();
            short.1[p].remove(at + 300);
            let Err(e) = load(&short, true).0 else { panic!("a part cut short loaded") };
            assert!(e.to_string().contains("endch"), "{e}");
        }
        crate::threads::set(0);
    }

    /// Issue 68.1: in the tree form an array asked alone is read from the
    /// parts that hold it; the others are not opened at all (here they
    /// fail to open), and the array is exactly what a full read gives,
    /// proven by the root: a changed byte or `ch` line of it is refused,
    /// whatever the parts passed over hold.
    #[test]
    fn an_array_asked_alone_opens_only_the_parts_that_hold_it() {
        let row = 1usize << 17;
        let make = |name: &str, k: usize| {
            let v: Vec<u8> = (0..6 * row).map(|i| ((i * 7 + k) % 251) as u8).collect();
            Array::new(name, Dtype::U8, vec![6, row as u64], v.into()).unwrap()
        };
        let arrays = [make("a", 1), arr("b", 9), make("c", 2), make("d", 3)];
        let t = text_of(&arrays, syntax::DigestForm::Tree, 1);
        let cut = |t: &[u8]| {
            let mut parts: Vec<Vec<u8>> = Vec::new();
            let head = split::split(t, 300 << 10, &mut parts).unwrap();
            (head, parts)
        };
        let (head, parts) = cut(&t);
        // Which parts hold `c`: from the one its `begin` line is in to the
        // one `d`'s is in.
        let holds = |name: &str| {
            parts
                .iter()
                .position(|p| memchr::memmem::find(p, format!("begin name={name} ").as_bytes()).is_some())
                .unwrap() as u64
                + 1
        };
        let (first, last) = (holds("c"), holds("d"));
        assert!(first > 2 && last < parts.len() as u64, "{first}..={last} of {}", parts.len());
        let gone: Vec<u64> = (1..=parts.len() as u64).filter(|ix| *ix < first || *ix > last).collect();
        let rows = BTreeMap::from([("c".to_string(), (0, 6))]);
        let load = |(head, parts): &(Vec<u8>, Vec<Vec<u8>>), gone: &[u64]| {
            let Ok(split::Opened::Split(h)) = split::open(Box::new(&head[..])) else { panic!("a head") };
            let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let source = Counted { parts: parts.clone(), read, gone: gone.to_vec() };
            let sparse = split::Sparse::new(h, Box::new(source), &|n| n == "c").unwrap();
            Load { rows: Some(&rows), ..Default::default() }.run_lines(
                LineReader::skipping(sparse),
                1 << 30,
                &Default::default(),
            )
        };
        for threads in [1, 5] {
            crate::threads::set(threads);
            let got = load(&(head.clone(), parts.clone()), &gone).unwrap();
            assert_eq!(got.arrays.len(), 1);
            assert_eq!(got.arrays[0].bytes(), arrays[2].bytes());
            assert!(got.report.ok);
            // The parts passed over may hold anything.
            let mut junk = parts.clone();
            for ix in &gone {
                junk[*ix as usize - 1] = b"not a part".to_vec();
            }
            assert_eq!(load(&(head.clone(), junk), &[]).unwrap().arrays[0].bytes(), arrays[2].bytes());
            // What it returns is proven: a changed byte, a changed `ch`
            // line of a chunk of it, refused.
            for (ix, in_ch) in [(0, false), (5, false), (3, true)] {
                let Err(e) = load(&cut(&damaged(&t, "c", ix, in_ch)), &gone) else { panic!("c {ix} {in_ch} loaded") };
                assert_eq!(e.kind(), crate::error::Kind::Check, "{e}");
            }
            // A part it needs that is missing fails the load.
            assert!(load(&(head.clone(), parts.clone()), &[first + 1]).is_err());
        }
        crate::threads::set(0);
    }

    fn arr(name: &str, fill: u8) -> Array {
        Array::new(name, Dtype::U8, vec![64, 4], vec![fill; 256].into()).unwrap()
    }

    #[test]
    fn a_load_shares_the_arrays_a_known_file_holds_and_still_checks_them() {
        let a = text(&[arr("a", 1), arr("b", 2)]);
        let b = text(&[arr("a", 1), arr("b", 3)]);
        let first = load(&a[..], a.len() as u64, &Default::default()).unwrap();
        let second =
            Load { known: &[&first], ..Default::default() }.run(&b[..], b.len() as u64, &Default::default()).unwrap();
        assert!(second.arrays[0].data.is_same_buffer(&first.arrays[0].data), "equal: shared");
        assert!(!second.arrays[1].data.is_same_buffer(&first.arrays[1].data));
        assert_eq!(second.arrays[1].bytes(), &[3; 256][..]);
        assert_eq!(second.digests[0], first.digests[0]);
        assert_ne!(second.digests[1], first.digests[1]);
        // A shared array is verified all the same: damage in it fails the load.
        let body = b.windows(13).position(|w| w == b"\nch ix=000000").unwrap() + 1;
        let line = body + b[body..].iter().position(|&c| c == b'\n').unwrap() + 1;
        let mut bad = b.clone();
        bad[line] = if bad[line] == b'A' { b'B' } else { b'A' };
        assert!(Load { known: &[&first], ..Default::default() }
            .run(&bad[..], bad.len() as u64, &Default::default())
            .is_err());
    }

    #[test]
    fn a_load_of_rows_keeps_those_rows_and_the_metadata_and_still_checks_everything() {
        let counting = Array::new("a", Dtype::U8, vec![64, 4], (0..=255u8).collect::<Vec<_>>().into()).unwrap();
        let meta = Array::new("__m", Dtype::U8, vec![3], vec![7, 8, 9].into()).unwrap();
        let t = text(&[meta, counting, arr("b", 2)]);
        let load = |rows: &BTreeMap<String, (u64, u64)>, t: &[u8]| {
            Load { rows: Some(rows), ..Default::default() }.run(t, t.len() as u64, &Default::default())
        };
        // Rows 10..23 cross chunk boundaries (4 rows a chunk).
        let rows = BTreeMap::from([("a".to_string(), (10, 23))]);
        let got = load(&rows, &t).unwrap();
        let names: Vec<_> = got.arrays.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["__m", "a"]);
        assert_eq!(got.arrays[1].shape, [13, 4]);
        assert_eq!(got.arrays[1].bytes(), &(40..92u8).collect::<Vec<_>>()[..]);
        assert_eq!(got.rows, [None, Some((10, 23))]);
        assert_eq!(got.arrays[0].bytes(), &[7, 8, 9]);
        // Rows past the array's end are refused.
        let past = BTreeMap::from([("a".to_string(), (60, 65))]);
        let Err(e) = load(&past, &t) else { panic!("rows past the end were loaded") };
        assert!(e.to_string().contains("rows 60..65 asked of its 64"), "{e}");
        // Damage in an array not kept still fails the load.
        let at = t.windows(11).position(|w| w == b"arr name=b ").unwrap();
        let body = at + t[at..].windows(13).position(|w| w == b"\nch ix=000000").unwrap() + 1;
        let line = body + t[body..].iter().position(|&c| c == b'\n').unwrap() + 1;
        let mut bad = t.clone();
        bad[line] = if bad[line] == b'A' { b'B' } else { b'A' };
        assert!(load(&rows, &bad).is_err());
        assert!(load(&rows, &damaged(&t, "b", 7, false)).is_err());
    }

    #[test]
    fn a_load_of_rows_in_the_tree_form_decodes_only_the_chunks_it_keeps_and_proves_them() {
        let counting = Array::new("a", Dtype::U8, vec![64, 4], (0..=255u8).collect::<Vec<_>>().into()).unwrap();
        let meta = Array::new("__m", Dtype::U8, vec![3], vec![7, 8, 9].into()).unwrap();
        let t = text_in(&[meta, counting, arr("b", 2)], syntax::DigestForm::Tree);
        let rows = BTreeMap::from([("a".to_string(), (10, 23))]);
        let load =
            |t: &[u8]| Load { rows: Some(&rows), ..Default::default() }.run(t, t.len() as u64, &Default::default());
        // In place, on two hashing threads, and with chunks decoded on two more.
        for threads in [1, 3, 5] {
            crate::threads::set(threads);
            let got = load(&t).unwrap();
            assert_eq!(got.arrays[1].bytes(), &(40..92u8).collect::<Vec<_>>()[..]);
            assert_eq!(got.arrays[0].bytes(), &[7, 8, 9]);
            // Rows 10..23 are in chunks 2..=5 of a's 16; none of b's is needed.
            assert_eq!((got.report.skipped_chunks, got.report.arrays_passed_over), (12, 1));
            assert_eq!(got.report.fastxor, None);
            // Damage in a chunk not decoded touches nothing kept, nor does
            // any in an array passed over whole (b: its `arr` line is what
            // the root binds)...
            assert!(load(&damaged(&t, "b", 7, false)).is_ok());
            assert!(load(&damaged(&t, "b", 7, true)).is_ok());
            assert!(load(&damaged(&t, "a", 0, false)).is_ok());
            // ...but a kept array's `ch` lines' digests are bound to the
            // root, and a chunk kept is checked.
            for (name, ix, in_ch) in
                [("a", 15, true), ("a", 0, true), ("a", 3, false), ("a", 3, true), ("__m", 0, false)]
            {
                let Err(e) = load(&damaged(&t, name, ix, in_ch)) else { panic!("{name} {ix} {in_ch} loaded") };
                assert_eq!(e.kind(), crate::error::Kind::Check, "{e}");
            }
            // An array passed over still has its lines counted: one LF
            // fewer is a structural error, named on its line.
            let mut joined = t.clone();
            // b is the last array; its chunk 7's one base64 line (16 bytes:
            // 24 characters, a space and the parity digit) ends 27 bytes
            // after its `ch` line does.
            let ch = t.windows(13).rposition(|w| w == b"\nch ix=000007").unwrap() + 1;
            let lf = ch + t[ch..].iter().position(|&c| c == b'\n').unwrap() + 27;
            assert_eq!(joined[lf], b'\n');
            joined.remove(lf);
            let Err(e) = load(&joined) else { panic!("a chunk one line short loaded") };
            assert!(e.to_string().contains("base64 lines"), "{e}");
            // A load of everything decodes every chunk.
            let all = Load::default().run(&t[..], t.len() as u64, &Default::default()).unwrap();
            assert_eq!((all.report.skipped_chunks, all.report.fastxor.is_some()), (0, true));
        }
        crate::threads::set(0);
    }

    /// Rows decoded into the caller's memory are the rows a load keeps, in
    /// both forms; a destination of another type, shape or size, or one
    /// the snapshot does not hold, is refused before a byte is written,
    /// and damage in what is kept still fails the load.
    #[test]
    fn rows_decoded_into_the_callers_memory_are_the_rows_a_load_keeps() {
        let counting = Array::new("a", Dtype::U8, vec![64, 4], (0..=255u8).collect::<Vec<_>>().into()).unwrap();
        let meta = Array::new("__m", Dtype::U8, vec![3], vec![7, 8, 9].into()).unwrap();
        let rows = BTreeMap::from([("a".to_string(), (10, 23))]);
        let into = |t: &[u8], name: &str, dtype, shape: Vec<u64>, mem: &mut [u8]| {
            let d = Destination { dtype, shape, bytes: mem };
            Load { rows: Some(&rows), ..Default::default() }.run_lines_into(
                LineReader::new(t),
                t.len() as u64,
                &Default::default(),
                BTreeMap::from([(name.to_string(), d)]),
            )
        };
        for form in [syntax::DigestForm::Sha256, syntax::DigestForm::Tree] {
            let t = text_in(&[meta.clone(), counting.clone(), arr("b", 2)], form);
            let mut mem = vec![0u8; 13 * 4];
            let got = into(&t, "a", Dtype::U8, vec![13, 4], &mut mem).unwrap();
            assert_eq!(mem, (40..92u8).collect::<Vec<_>>());
            assert_eq!(got.placed, ["a"]);
            let names: Vec<_> = got.arrays.iter().map(|a| a.name.as_str()).collect();
            assert_eq!((names, got.rows.len(), got.digests.len()), (vec!["__m"], 1, 1));
            for (dtype, shape, len) in
                [(Dtype::I8, vec![13, 4], 52), (Dtype::U8, vec![26, 2], 52), (Dtype::U8, vec![13, 4], 51)]
            {
                let mut mem = vec![0u8; len];
                let Err(e) = into(&t, "a", dtype, shape, &mut mem) else { panic!("{dtype:?} loaded") };
                assert!(e.to_string().contains("where the destination is"), "{e}");
                assert!(mem.iter().all(|&b| b == 0));
            }
            let Err(e) = into(&t, "c", Dtype::U8, vec![13, 4], &mut mem) else { panic!("c loaded") };
            assert!(e.to_string().contains("no array c among those kept"), "{e}");
            assert!(into(&damaged(&t, "a", 3, false), "a", Dtype::U8, vec![13, 4], &mut mem).is_err());
        }
    }
}
