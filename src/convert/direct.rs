//! WTXT -> container in one pass over the weights: each tensor's bytes are
//! decoded, while the strict reader checks them, straight to the place the
//! container's layout gives them in the output file; the container's
//! writer then fills in the rest (headers, indexes, hashes) around them.
//! Nothing is spilled to a temporary file and written again, and memory
//! does not grow with the model.
//!
//! The layout comes from the container's own writer, run once on
//! stand-ins (zero pages that cost no memory) with a recorder that notes
//! where each tensor's bytes went; no format is described twice. The real
//! write is then checked byte by byte against what is already in place:
//! a write that would change a tensor's bytes is refused before it happens
//! (a layout that depends on values), and the output is then written the
//! ordinary way from the decoded bytes. Either way the file holds exactly
//! what the container's writer produced.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use memmap2::{Mmap, MmapOptions};

use crate::convert::container::Container;
use crate::convert::unseek::seek_to;
use crate::error::{Error, Result};
use crate::format::read::ArrayStart;
use crate::format::verify::{verify, Sink, VerifyOptions};
use crate::fs::AtomicFile;
use crate::model::{Array, ArrayData};
use crate::store::input::WtxtIn;
use crate::store::outline::{outline_of, Outlined};

/// How [`write_direct`] wrote its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The tensors were decoded into their places; the writer added the rest.
    InPlace,
    /// The writer's layout moved with the values (a compressed index of
    /// hashes): the decoded tensors were written again, the ordinary way.
    Rewritten,
}

/// What a caller's selection gives: the arrays to write, and what it
/// wants to report about its choice.
pub type Chosen<T> = Result<(Vec<Array>, T)>;

/// Writes the arrays of the WTXT at `path` (verified under `opts`) to
/// `out` as `to`, after `prepare` (the caller's selection and renaming; it
/// must depend on names and metadata arrays only, and is run twice).
/// `open`: `path` open already (the outline and the strict read then both
/// read that file), else it is opened here.
/// `Ok(None)` when this path does not apply (encrypted or unusual input,
/// a writer that builds its file in memory or transforms the bytes): the
/// caller then reads the WTXT the ordinary way, before anything is written.
pub fn write_direct<T>(
    path: &Path,
    open: Option<&File>,
    opts: &VerifyOptions,
    to: &dyn Container,
    out: &Path,
    prepare: &dyn Fn(Vec<Array>) -> Chosen<T>,
) -> Result<Option<(T, Route)>> {
    let opened;
    let input = match open {
        Some(f) => f,
        None => match crate::store::outline::open_file(path) {
            Some(f) => {
                opened = f;
                &opened
            }
            None => return Ok(None),
        },
    };
    let Some(outlined) = outline_of(input, path, &crate::model::is_metadata_name, crate::limits::MAX_METADATA) else {
        return Ok(None);
    };
    if to.writes_in_memory() || !to.stores_tensors_verbatim() {
        // Sizes the format cannot take are refused now, from the declared
        // sizes, rather than after decoding and checking gigabytes (the
        // ordinary path checks again).
        if let Some((chosen, _)) = stand_ins(&outlined).and_then(|s| prepare(s.arrays).ok()) {
            to.check_sizes(&chosen).map_err(|e| e.in_file(out))?;
        }
        return Ok(None);
    }
    let Some(Plan { place, zeros, stand_in }) = plan(&outlined, to, prepare) else { return Ok(None) };

    // Decode, checking everything, into the output's places.
    let dest = AtomicFile::create(out)?;
    let file = dest.file_ref().try_clone().map_err(|e| Error::io(out, e))?;
    let starts: HashMap<String, (usize, u64)> = place.iter().map(|(n, r)| (n.clone(), (0, r.start))).collect();
    let meta = decode_into(input, path, opts, &outlined, &[(out, &file)], &starts)?;

    // The tensors are in place: hand them to the writer as windows of the output.
    let span = place.values().map(|r| r.start).min().unwrap_or(0)..place.values().map(|r| r.end).max().unwrap_or(0);
    let map = map_span(&file, &span).map_err(|e| Error::io(out, e))?;
    let mut meta = meta.into_iter();
    let mut arrays = Vec::with_capacity(outlined.len());
    for o in &outlined {
        let data = match (&o.data, place.get(&o.arr.name)) {
            (Some(_), _) => ArrayData::from(meta.next().expect("one per metadata array")),
            (None, Some(r)) => {
                ArrayData::Mapped(map.clone(), (r.start - span.start) as usize..(r.end - span.start) as usize)
            }
            // Empty, or not chosen by `prepare` (which chooses the same way again).
            (None, None) => ArrayData::Mapped(zeros.clone(), stand_in[&o.arr.name].clone()),
        };
        arrays.push(Array::new(o.arr.name.clone(), o.arr.dtype, o.arr.shape.clone(), data)?);
    }
    let (arrays, extra) = prepare(arrays).map_err(|e| e.in_file(path))?;
    if arrays.iter().any(|a| !a.is_metadata() && !a.bytes().is_empty() && !place.contains_key(&a.name)) {
        return Err(Error::io_in("planning the output", std::io::Error::other("a tensor was chosen without a place")));
    }
    let mut w = InPlace { file: &file, span: span.clone(), map: &map, pos: 0, covered: Vec::new(), refused: false };
    let wrote = to.write(&arrays, &mut w);
    match (wrote, w.finish()) {
        (Err(e), _) => Err(e.in_file(out)),
        (Ok(()), Some(end)) => {
            file.set_len(end).map_err(|e| Error::io(out, e))?;
            dest.commit()?;
            Ok(Some((extra, Route::InPlace)))
        }
        (Ok(()), None) => {
            // The layout moved with the values: write the ordinary way,
            // from the bytes already decoded.
            crate::convert::write::write_arrays_as(&arrays, out, to)?;
            Ok(Some((extra, Route::Rewritten)))
        }
    }
}

/// Where the chosen tensors' bytes go in the output, and the zero pages
/// that stood in for every tensor (by name, their range there).
struct Plan {
    place: HashMap<String, Range<u64>>,
    zeros: Arc<Mmap>,
    stand_in: HashMap<String, Range<usize>>,
}

/// Runs the writer on stand-ins and returns where each chosen tensor's
/// bytes go, or `None` when some tensor is not stored as its own bytes.
fn plan<T>(outlined: &[Outlined], to: &dyn Container, prepare: &dyn Fn(Vec<Array>) -> Chosen<T>) -> Option<Plan> {
    let StandIns { arrays, zeros, stand_in, total } = stand_ins(outlined)?;
    let (chosen, _) = prepare(arrays).ok()?;
    let mut rec = Recorder { base: zeros.as_ptr() as usize, len: total as usize, pos: 0, end: 0, seen: Vec::new() };
    to.write(&chosen, &mut rec).ok()?;
    let mut place = HashMap::new();
    for a in chosen.iter().filter(|a| !a.is_metadata() && !a.bytes().is_empty()) {
        // A tensor `prepare` made anew (not a stand-in) has no place.
        let from = (a.bytes().as_ptr() as usize).checked_sub(rec.base).filter(|f| f + a.bytes().len() <= rec.len)?;
        let to = from + a.bytes().len();
        // Every byte written exactly once, at one shift from the stand-in.
        let pieces: Vec<&(u64, Range<usize>)> = rec.seen.iter().filter(|(_, r)| r.start < to && r.end > from).collect();
        let shift = pieces.first()?.0 as i128 - pieces.first()?.1.start as i128;
        let mut covered = from;
        for (pos, r) in pieces {
            if *pos as i128 - r.start as i128 != shift || r.start != covered {
                return None;
            }
            covered = r.end;
        }
        if covered != to {
            return None;
        }
        let start = u64::try_from(from as i128 + shift).ok()?;
        place.insert(a.name.clone(), start..start + a.bytes().len() as u64);
    }
    Some(Plan { place, zeros, stand_in })
}

/// The outlined arrays with zero pages standing in for every tensor.
struct StandIns {
    arrays: Vec<Array>,
    zeros: Arc<Mmap>,
    /// Each tensor's range in `zeros`, by name.
    stand_in: HashMap<String, Range<usize>>,
    total: u64,
}

fn stand_ins(outlined: &[Outlined]) -> Option<StandIns> {
    // Declared sizes (not yet checked by anyone) are added with care.
    let total = outlined.iter().filter(|o| o.data.is_none()).try_fold(0u64, |t, o| t.checked_add(o.arr.bytes))?;
    usize::try_from(total).ok()?;
    // Untouched anonymous pages read as the shared zero page: no memory.
    let zeros = Arc::new(MmapOptions::new().len(total.max(1) as usize).map_anon().ok()?.make_read_only().ok()?);
    let mut at = 0u64;
    let mut arrays = Vec::with_capacity(outlined.len());
    let mut stand_in = HashMap::new();
    for o in outlined {
        let data = match &o.data {
            Some(d) => ArrayData::from(d.clone()),
            None => {
                let r = at as usize..(at + o.arr.bytes) as usize;
                at += o.arr.bytes;
                stand_in.insert(o.arr.name.clone(), r.clone());
                ArrayData::Mapped(zeros.clone(), r)
            }
        };
        arrays.push(Array::new(o.arr.name.clone(), o.arr.dtype, o.arr.shape.clone(), data).ok()?);
    }
    Some(StandIns { arrays, zeros, stand_in, total })
}

/// Notes where the writer puts bytes that come from the stand-ins' pages.
struct Recorder {
    base: usize,
    len: usize,
    pos: u64,
    end: u64,
    /// Output position and stand-in range of each such write.
    seen: Vec<(u64, Range<usize>)>,
}

impl Write for Recorder {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let p = b.as_ptr() as usize;
        if p >= self.base && p + b.len() <= self.base + self.len && !b.is_empty() {
            self.seen.push((self.pos, p - self.base..p - self.base + b.len()));
        }
        self.pos += b.len() as u64;
        self.end = self.end.max(self.pos);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for Recorder {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = seek_to(self.pos, self.end, to)?;
        Ok(self.pos)
    }
}

/// Reads and verifies `input`, the WTXT at `path` (every check under `opts`),
/// writing each tensor's bytes where `place` says, (file, offset) into
/// `files`, as they are decoded; every array must come as `outlined`
/// announced. Returns the bytes of the outlined metadata arrays. Nothing
/// is held but the metadata: the output files are the only copy.
pub(crate) fn decode_into(
    input: &File,
    path: &Path,
    opts: &VerifyOptions,
    outlined: &[Outlined],
    files: &[(&Path, &File)],
    place: &HashMap<String, (usize, u64)>,
) -> Result<Vec<Vec<u8>>> {
    let len = input.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut input = WtxtIn::from_file(input, len, path, None)?;
    let mut sink = Place { files, outlined, place, next: 0, at: None, meta: Vec::new(), failed: None };
    let report = verify(input.text(), opts, Some(&mut sink)).map_err(|e| input.blame(e))?;
    if let Some(p) = report.first_error() {
        return Err(input.blame(p.to_error()));
    }
    // A failed write names the output already; the rest is the input's.
    sink.finish().map_err(|e| e.in_file(path))
}

/// The strict reader's sink: tensor bytes to their places, metadata
/// arrays kept, and every array checked against the outline.
struct Place<'a> {
    files: &'a [(&'a Path, &'a File)],
    outlined: &'a [Outlined],
    place: &'a HashMap<String, (usize, u64)>,
    next: usize,
    /// Where the current array's next bytes go, (file, offset) (`None`:
    /// not kept here).
    at: Option<(usize, u64)>,
    meta: Vec<Vec<u8>>,
    failed: Option<Error>,
}

impl Place<'_> {
    fn fail(&mut self, e: Error) {
        self.failed.get_or_insert(e);
        self.at = None;
    }

    /// The metadata arrays' bytes, once every array came as outlined.
    fn finish(self) -> Result<Vec<Vec<u8>>> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let want: Vec<&Vec<u8>> = self.outlined.iter().filter_map(|o| o.data.as_ref()).collect();
        if self.next != self.outlined.len()
            || want.len() != self.meta.len()
            || want.iter().zip(&self.meta).any(|(a, b)| *a != b)
        {
            return Err(changed());
        }
        Ok(self.meta)
    }
}

fn changed() -> Error {
    Error::input(Default::default(), "the file changed while it was read")
}

impl Sink for Place<'_> {
    fn array(&mut self, a: &ArrayStart) {
        let Some(o) = self.outlined.get(self.next) else { return self.fail(changed()) };
        self.next += 1;
        if o.arr.name != a.arr.name || o.arr.dtype != a.arr.dtype || o.arr.shape != a.arr.shape {
            return self.fail(changed());
        }
        self.at = self.place.get(&a.arr.name).copied();
        if o.data.is_some() {
            self.meta.push(Vec::with_capacity(o.arr.bytes as usize));
        }
    }

    fn data(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        if self.outlined[self.next - 1].data.is_some() {
            self.meta.last_mut().expect("pushed with its array").extend_from_slice(bytes);
        } else if let Some((k, at)) = self.at {
            let (out, file) = self.files[k];
            match file.write_all_at(bytes, at) {
                Ok(()) => self.at = Some((k, at + bytes.len() as u64)),
                Err(e) => self.fail(Error::io(out, e)),
            }
        }
    }
}

/// Maps `span` of the output read-only (an empty span maps nothing).
#[allow(unsafe_code)]
fn map_span(file: &File, span: &Range<u64>) -> std::io::Result<Arc<Mmap>> {
    if span.is_empty() {
        return Ok(Arc::new(MmapOptions::new().len(1).map_anon()?.make_read_only()?));
    }
    // SAFETY: the file is our own temporary output (created exclusively,
    // not yet under its final name). Nothing writes inside `span` while the
    // map lives: the strict reader is done, and `InPlace` only compares
    // there, refusing before it would write a different byte.
    let m = unsafe { MmapOptions::new().offset(span.start).len((span.end - span.start) as usize).map(file)? };
    Ok(Arc::new(m))
}

/// The output as the container's writer sees it: bytes outside the
/// tensors' span are written; inside it they must already be there.
struct InPlace<'a> {
    file: &'a File,
    span: Range<u64>,
    map: &'a [u8],
    pos: u64,
    covered: Vec<Range<u64>>,
    /// A write inside the span would have changed a byte.
    refused: bool,
}

impl InPlace<'_> {
    /// The output's length when the writer produced every byte of it.
    fn finish(&mut self) -> Option<u64> {
        if self.refused {
            return None;
        }
        self.covered.sort_by_key(|r| r.start);
        let mut end = 0;
        for r in &self.covered {
            if r.start > end {
                return None; // a hole the writer never filled
            }
            end = end.max(r.end);
        }
        (end >= self.span.end).then_some(end)
    }
}

impl Write for InPlace<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let (start, end) = (self.pos, self.pos + b.len() as u64);
        let (lo, hi) = (start.max(self.span.start), end.min(self.span.end));
        if lo < hi {
            let have = &self.map[(lo - self.span.start) as usize..(hi - self.span.start) as usize];
            let want = &b[(lo - start) as usize..(hi - start) as usize];
            // The writer hands over the very bytes in place (same address), or a copy.
            if !std::ptr::eq(have.as_ptr(), want.as_ptr()) && have != want {
                // Nothing more is written; the writer runs to its end (an
                // error would make some writers complain as they drop).
                self.refused = true;
            }
        }
        if self.refused {
            self.pos = end;
            return Ok(b.len());
        }
        if lo < hi {
            self.file.write_all_at(&b[..(lo - start) as usize], start)?;
            self.file.write_all_at(&b[(hi - start) as usize..], hi)?;
        } else {
            self.file.write_all_at(b, start)?;
        }
        self.covered.push(start..end);
        self.pos = end;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for InPlace<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let end = self.covered.iter().map(|r| r.end).max().unwrap_or(0);
        self.pos = seek_to(self.pos, end, to)?;
        Ok(self.pos)
    }
}
