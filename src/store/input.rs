//! The one way a WTXT file is opened for reading: a single file, or a split
//! snapshot's head joined with its parts, read as the single file it
//! stands for, with errors moved to the part and line they are about.
#![forbid(unsafe_code)]

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use super::files::{parts_dir, PartFiles};
use crate::crypto::armor::{read_maybe_sealed, Unseal};
use crate::error::{Error, Result};
use crate::format::read::LineReader;
use crate::format::split::{self, Joined};
use crate::format::verify::{verify_lines, Problem, ProblemKind, Report, Sink, VerifyOptions};
use crate::fs::{Skip, Streamed};

/// How [`WtxtIn::joined`] reads a split snapshot's parts against its head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartReading {
    /// Each part checked whole (size, lines, frame hash); a faulty one is
    /// recorded and reading goes on (a full verify's report).
    Lenient,
    /// Sizes and lines only, and a fault stops the read: for a reader that
    /// proves what it keeps by other means and passes over the rest
    /// ([`WtxtIn::verify_structure`]).
    Unhashed,
}

/// Wants every array and none of its chunks' bytes (see
/// [`WtxtIn::verify_structure`]).
struct NoChunkBytes;

impl Sink for NoChunkBytes {
    fn array(&mut self, _a: &crate::format::read::ArrayStart) {}

    fn data(&mut self, _bytes: &[u8]) {}

    fn wants(&self, _a: &crate::format::read::ArrayStart, _ch: &crate::format::syntax::ChLine) -> bool {
        false
    }
}

/// A WTXT input: a single file, or a split snapshot's head joined with its
/// parts and read as the single file it stands for.
pub struct WtxtIn<'a> {
    /// The text: a split snapshot's parts joined, which can pass over a
    /// chunk unread ([`WtxtIn::lines`]).
    reader: Box<dyn Skip + 'a>,
    /// Bytes the reader will give at most (progress, size bounds).
    pub len: u64,
    path: PathBuf,
    map: Option<split::SharedMap>,
    faults: Option<split::SharedFaults>,
    /// Read for some arrays, the parts without them never opened
    /// ([`WtxtIn::open_for_arrays`]).
    sparse: bool,
}

impl<'a> WtxtIn<'a> {
    /// Opens `path` (decrypting with `unseal` when it is an age file). A
    /// part that is missing or does not match the head stops the read,
    /// naming the part.
    pub fn open(path: &Path, unseal: Option<&'a Unseal>) -> Result<WtxtIn<'a>> {
        WtxtIn::open_with(path, unseal, false, true)
    }

    /// As [`WtxtIn::open`], of `file` (`len` bytes) open already, read from
    /// its start by position, named `path`: a caller that told what the
    /// file is from its first bytes reads the file it looked at, not
    /// whatever the path names by then.
    pub fn from_file(file: &'a std::fs::File, len: u64, path: &Path, unseal: Option<&'a Unseal>) -> Result<WtxtIn<'a>> {
        let raw = read_maybe_sealed(crate::fs::ReadAt::new(file), path, unseal)?;
        WtxtIn::from_reader(raw, len, path, unseal, false, true)
    }

    /// As [`WtxtIn::open`], but faulty parts are recorded (see
    /// [`WtxtIn::faults`]) and reading goes on: for verify's full report
    /// and for recover.
    pub fn open_lenient(path: &Path, unseal: Option<&'a Unseal>) -> Result<WtxtIn<'a>> {
        WtxtIn::open_with(path, unseal, true, true)
    }

    /// As [`WtxtIn::open`], but a split snapshot's parts are not hashed
    /// (see [`Joined::without_part_hashes`]): for a caller that proves
    /// every byte it reads by other means, and calls [`WtxtIn::find_bad_part`]
    /// when that proof fails.
    pub fn open_unhashed(path: &Path, unseal: Option<&'a Unseal>) -> Result<WtxtIn<'a>> {
        WtxtIn::open_with(path, unseal, false, false)
    }

    /// As [`WtxtIn::open_unhashed`], for a load that keeps only the arrays
    /// `keep` is true of: a split snapshot of the tree form is read without
    /// the parts that hold none of their chunks, which are never opened
    /// ([`split::Sparse`]; the reader passes over the arrays it leaves out).
    pub fn open_for_arrays(path: &Path, keep: &dyn Fn(&str) -> bool) -> Result<WtxtIn<'a>> {
        let file = crate::fs::open_input_file(path)?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let raw = read_maybe_sealed(file, path, None)?;
        let head = match split::open(raw).map_err(|e| e.in_file(path))? {
            split::Opened::Single(reader) => return Ok(WtxtIn::single(reader, len, path)),
            split::Opened::Split(head) => head,
        };
        let source = Box::new(PartFiles::new(parts_dir(path), None));
        let tree = head.header().is_ok_and(|h| h.digest() == crate::format::syntax::DigestForm::Tree);
        let names = head.arrs.iter().flatten().filter_map(|a| crate::format::syntax::ArrLine::parse(a).ok());
        if !tree || names.map(|a| a.name).all(|n| keep(&n)) {
            return Ok(WtxtIn::from_head(head, source, path, len, false, false));
        }
        WtxtIn::sparse(head, source, path, len, keep)
    }

    /// A split snapshot's `head` (read from `path`, `head_len` bytes) read
    /// for the arrays `keep` is true of, from the parts `source` gives that
    /// hold them ([`split::Sparse`]); the head must be of the tree form for
    /// a load to verify.
    pub fn sparse(
        head: split::Head,
        source: Box<dyn split::PartSource + 'a>,
        path: &Path,
        head_len: u64,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<WtxtIn<'a>> {
        let len = head_len + head.parts.iter().map(|p| p.bytes).sum::<u64>();
        let sparse = split::Sparse::new(head, source, keep).map_err(|e| e.in_file(path))?;
        let map = Some(sparse.map());
        Ok(WtxtIn { reader: Box::new(sparse), len, path: path.to_path_buf(), map, faults: None, sparse: true })
    }

    /// Verifies `path` whole and returns the first problem found in one of
    /// its parts (`None` for a single file or a set whose parts are all
    /// sound): names the culprit after an unhashed read. A part's frame
    /// hash binds its base64 only through its chunks' hashes, so every
    /// chunk is checked, not only each part against its head.
    pub fn find_bad_part(path: &Path, unseal: Option<&Unseal>) -> Option<Error> {
        let input = WtxtIn::open_lenient(path, unseal).ok()?;
        if !input.is_split() {
            return None;
        }
        let report = input.verify(&VerifyOptions::default(), &crate::progress::Progress::hidden()).ok()?;
        report.errors.iter().find(|p| p.file.is_some()).map(|p| p.to_error())
    }

    /// Verifies `path` whole under `opts` (a split snapshot with its parts,
    /// the faults of parts first): the report, every problem at its part
    /// and line, or an error when the file cannot be read at all.
    pub fn verify_path(path: &Path, unseal: Option<&Unseal>, opts: &VerifyOptions) -> Result<Report> {
        WtxtIn::open_lenient(path, unseal)?.verify(opts, &crate::progress::Progress::hidden())
    }

    /// A single-file text of `len` bytes read from `reader` (a Git blob), named `path`.
    pub fn single(reader: Box<dyn Read + 'a>, len: u64, path: &Path) -> WtxtIn<'a> {
        WtxtIn {
            reader: Box::new(Streamed(reader)),
            len,
            path: path.to_path_buf(),
            map: None,
            faults: None,
            sparse: false,
        }
    }

    /// A split snapshot's `head` (read from `path`, `head_len` bytes) joined
    /// with the parts `source` gives, read as `reading` says: parts that
    /// are not files beside the head (the Git index's blobs, a staged
    /// snapshot).
    pub fn joined(
        head: split::Head,
        source: Box<dyn split::PartSource + 'a>,
        path: &Path,
        head_len: u64,
        reading: PartReading,
    ) -> WtxtIn<'a> {
        let lenient = reading == PartReading::Lenient;
        WtxtIn::from_head(head, source, path, head_len, lenient, lenient)
    }

    /// [`WtxtIn::joined`], read leniently, with the parts `out` is true of
    /// left out ([`Joined::leaving_out`]): for a verification told of the
    /// arrays they hold ([`VerifyOptions::carried`]).
    pub fn joined_leaving_out(
        head: split::Head,
        source: Box<dyn split::PartSource + 'a>,
        path: &Path,
        head_len: u64,
        out: &[bool],
    ) -> WtxtIn<'a> {
        let faults: Option<split::SharedFaults> = Some(Default::default());
        let joined = Joined::new(head, source, faults.clone()).leaving_out(out);
        WtxtIn::from_joined(joined, path, head_len, faults)
    }

    /// `head` joined with `source`'s parts; `lenient`: faults of parts are
    /// recorded and reading goes on; `hash_parts`: see [`Joined::without_part_hashes`].
    fn from_head(
        head: split::Head,
        source: Box<dyn split::PartSource + 'a>,
        path: &Path,
        head_len: u64,
        lenient: bool,
        hash_parts: bool,
    ) -> WtxtIn<'a> {
        let faults: Option<split::SharedFaults> = lenient.then(Default::default);
        let mut joined = Joined::new(head, source, faults.clone());
        if !hash_parts {
            joined = joined.without_part_hashes();
        }
        WtxtIn::from_joined(joined, path, head_len, faults)
    }

    /// The input `joined` gives, its head `head_len` bytes, its faults
    /// recorded in `faults` when there.
    fn from_joined(joined: Joined<'a>, path: &Path, head_len: u64, faults: Option<split::SharedFaults>) -> WtxtIn<'a> {
        let len = head_len + joined.parts_len();
        let map = Some(joined.map());
        WtxtIn { reader: Box::new(joined), len, path: path.to_path_buf(), map, faults, sparse: false }
    }

    /// Verifies the whole input under `opts`, as `wtxt verify` does
    /// (counting its bytes on `progress`): the report, every problem at its
    /// part and line, the faults of parts first; an error when the input
    /// cannot be read at all.
    pub fn verify(mut self, opts: &VerifyOptions, progress: &crate::progress::Progress) -> Result<Report> {
        progress.set_total(self.len);
        let omits = self.reader.omits_arrays();
        let inner = self.take();
        let text = LineReader::new(crate::progress::Counted { inner, progress }).omitting_arrays(omits);
        let mut report = verify_lines(text, opts, None).map_err(|e| self.blame(e))?;
        self.locate_report(&mut report);
        Ok(report)
    }

    /// Verifies every line of the input but its chunks' base64, each
    /// chunk's digest taken from its `ch` line (in the tree form bound to
    /// the root all the same; the 1.1 form's digests read every byte, so
    /// there nothing is passed over): for a writer whose chunks were each
    /// read back and checked by the process that wrote them
    /// ([`crate::store::dist::DistWrite::check_chunks`]). Opened unhashed
    /// ([`WtxtIn::open_unhashed`], [`PartReading::Unhashed`]), the input
    /// passes over the base64 unread.
    pub fn verify_structure(mut self, opts: &VerifyOptions) -> Result<Report> {
        let mut report = verify_lines(self.lines(), opts, Some(&mut NoChunkBytes)).map_err(|e| self.blame(e))?;
        self.locate_report(&mut report);
        Ok(report)
    }

    /// [`WtxtIn::verify_path`] for a caller about to chain from `path`:
    /// its first problem is the error, `what` before its message, naming
    /// its part and line.
    pub fn verify_whole(path: &Path, opts: &VerifyOptions, what: &str) -> Result<Report> {
        let report = WtxtIn::verify_path(path, None, opts)?;
        match report.errors.first() {
            Some(p) => {
                let file = p.file.as_ref().map(PathBuf::from).unwrap_or_else(|| path.to_path_buf());
                Err(crate::error::check_at(p.line, format!("{what}: {}", p.message)).in_file(file))
            }
            None => Ok(report),
        }
    }

    fn open_with(path: &Path, unseal: Option<&'a Unseal>, lenient: bool, hash_parts: bool) -> Result<WtxtIn<'a>> {
        let file = crate::fs::open_input_file(path)?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        WtxtIn::from_reader(read_maybe_sealed(file, path, unseal)?, len, path, unseal, lenient, hash_parts)
    }

    fn from_reader(
        raw: Box<dyn Read + 'a>,
        len: u64,
        path: &Path,
        unseal: Option<&'a Unseal>,
        lenient: bool,
        hash_parts: bool,
    ) -> Result<WtxtIn<'a>> {
        Ok(match split::open(raw).map_err(|e| e.in_file(path))? {
            split::Opened::Single(reader) => WtxtIn::single(reader, len, path),
            split::Opened::Split(head) => {
                let source = Box::new(PartFiles::new(parts_dir(path), unseal));
                WtxtIn::from_head(head, source, path, len, lenient, hash_parts)
            }
        })
    }

    /// The text, buffered; the input keeps what names errors.
    pub fn text(&mut self) -> BufReader<Box<dyn Read + 'a>> {
        BufReader::with_capacity(1 << 20, self.take())
    }

    /// The text as lines, passing over what a load does not keep unread
    /// where it can ([`LineReader::skipping`]): a split snapshot's parts
    /// opened with [`WtxtIn::open_unhashed`], read from plain files.
    pub fn lines(&mut self) -> LineReader<Box<dyn Skip + 'a>> {
        LineReader::skipping(self.take())
    }

    fn take(&mut self) -> Box<dyn Skip + 'a> {
        std::mem::replace(&mut self.reader, Box::new(Streamed(std::io::empty())))
    }

    /// True for a split snapshot.
    pub fn is_split(&self) -> bool {
        self.map.is_some()
    }

    /// Names the file an error is about: the part (and its line) for a line
    /// that came from a part, else the head.
    pub fn blame(&self, e: Error) -> Error {
        self.relocate(e).in_file(&self.path)
    }

    /// What a load of this input opened unhashed reports when it fails with
    /// `e`: the first part at fault when the whole snapshot is verified
    /// ([`WtxtIn::find_bad_part`]), else `e` at its part and line. A read
    /// of some arrays names what it met: the parts it never opened are
    /// not its concern.
    pub fn blame_load(&self, e: Error) -> Error {
        let part = (!self.sparse).then(|| WtxtIn::find_bad_part(&self.path, None)).flatten();
        part.unwrap_or_else(|| self.blame(e))
    }

    /// As [`WtxtIn::blame`], for an error that may be about an output too.
    pub fn blame_input(&self, e: Error) -> Error {
        self.relocate(e).in_input(&self.path)
    }

    fn relocate(&self, e: Error) -> Error {
        match &self.map {
            Some(m) => {
                let m = m.lock().expect("line map");
                e.relocated(|n| m.locate(n))
            }
            None => e,
        }
    }

    /// The faults of parts met so far (lenient reads only).
    pub fn faults(&self) -> Vec<Error> {
        self.faults.as_ref().map(|f| std::mem::take(&mut *f.lock().expect("faults"))).unwrap_or_default()
    }

    /// Where line `n` of the joined text is: its part file (`None`: the
    /// head, or a single file) and line there.
    pub fn locate(&self, n: u64) -> (Option<PathBuf>, u64) {
        match self.map.as_ref().and_then(|m| m.lock().expect("line map").locate(n)) {
            Some((file, line)) => (file, line),
            None => (None, n),
        }
    }

    /// Gives every problem of `report` its part file and line, and puts
    /// the faults of parts first: they are the cause of what follows.
    pub fn locate_report(&self, report: &mut Report) {
        let Some(m) = &self.map else { return };
        {
            let m = m.lock().expect("line map");
            for p in &mut report.errors {
                if let Some((file, line)) = m.locate(p.line) {
                    p.line = line;
                    p.file = file.map(|f| f.display().to_string());
                }
            }
        }
        let faults = self.faults();
        if !faults.is_empty() {
            report.ok = false;
            let mut first: Vec<_> = faults.into_iter().map(|e| Problem::from_error(ProblemKind::Part, e)).collect();
            first.append(&mut report.errors);
            report.errors = first;
        }
    }
}
