//! Git's view of split snapshots. Git diffs, shows and stores a head and
//! each part as files of their own, so each is read from its own blob: a
//! head diff shows the header and which parts changed; a part diff compares
//! chunk hashes and decodes only the chunks that differ. Parts and single
//! files are streamed: what is held is their chunk lines and the chunks
//! being compared, never a whole part.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::ops::Range;

use std::path::{Path, PathBuf};

use crate::error::{check_at, Error, Reason, Result};
use crate::format::delta::ChunkText;
use crate::format::read::{LineReader, SliceLines};
use crate::format::split::{self, Head, PartLine};
use crate::format::syntax::{parse_shape, ArrLine, ChLine, Fields};
use crate::fs::read_full;
use crate::git::diff::{
    check_unchanged, decode_pair, decode_side, header_changes, ArrayDiff, Damage, FileDiff, Names, Side, Stats, Status,
};
use crate::git::files_diff::{self, Captured};
use crate::model::Dtype;
use crate::odb::blob::Text;
use crate::odb::lfs::Pointer;

/// What a blob of a WTXT path holds.
pub enum Blob {
    /// The head of a split snapshot.
    Head(Head),
    /// A part of one.
    Part,
    /// Anything else (a single-file WTXT, or not a WTXT).
    Other,
}

/// Tells a head or a part from anything else by its first lines (the
/// rest is not read).
pub fn classify(text: &dyn Text) -> Result<Blob> {
    let mut first = [0u8; 13];
    let n = text.stream().take(13).read(&mut first).map_err(Error::read_failed)?;
    if first[..n] == *b"WTXT part ix=" {
        return Ok(Blob::Part);
    }
    Ok(match split::open(text.stream()) {
        Ok(split::Opened::Split(h)) => Blob::Head(h),
        _ => Blob::Other,
    })
}

/// Opens `path` as a `Text` (a file read as a WTXT stream) when it starts as WTXT text does (`WTXT `);
/// `None` for anything else (a container a filter smudged).
pub(crate) fn open_text(path: &Path) -> Result<Option<File>> {
    let f = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut magic = [0u8; 5];
    let n = f.stream().take(5).read(&mut magic).map_err(|e| Error::io(path, e))?;
    Ok((magic[..n] == *b"WTXT ").then_some(f))
}

/// True when two texts hold the same bytes, compared a block at a time.
fn same_bytes(a: &dyn Text, b: &dyn Text) -> std::io::Result<bool> {
    let (mut ra, mut rb) = (a.stream(), b.stream());
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = read_full(&mut ra, &mut ba)?;
        if n != read_full(&mut rb, &mut bb)? || ba[..n] != bb[..n] {
            return Ok(false);
        }
        if n < ba.len() {
            return Ok(true);
        }
    }
}

/// The difference of two heads: header fields, and which parts changed
/// (their own diffs say how).
/// Arrays are named by `originals` (WTXT name to the model's) where it has them.
pub fn diff_heads(old: &Head, new: &Head, names: Names, originals: &BTreeMap<String, String>) -> Result<FileDiff> {
    let read = |h: &Head, p: &Path| h.header().map_err(|e| e.in_file(p));
    let (ha, hb) = (read(old, names.old)?, read(new, names.new)?);
    let (header, header_unified) = header_changes(&ha, &old.prefix, &hb, &new.prefix);
    let mut notes = Vec::new();
    let list = |v: Vec<u64>| v.iter().map(|ix| format!("{ix:06}")).collect::<Vec<_>>().join(", ");
    let same = |a: &PartLine, b: &PartLine| (a.bytes, a.hash) == (b.bytes, b.hash);
    let changed: Vec<u64> = old.parts.iter().zip(&new.parts).filter(|(a, b)| !same(a, b)).map(|(_, b)| b.ix).collect();
    if !changed.is_empty() {
        notes.push(format!("parts changed: {} (of {})", list(changed), new.parts.len()));
    }
    if new.parts.len() > old.parts.len() {
        notes.push(format!("parts added: {}", list(new.parts[old.parts.len()..].iter().map(|p| p.ix).collect())));
    }
    if old.parts.len() > new.parts.len() {
        notes.push(format!("parts removed: {}", list(old.parts[new.parts.len()..].iter().map(|p| p.ix).collect())));
    }
    notes.extend(arr_changes(old, new, originals));
    if old.tail != new.tail {
        notes.push("audit line changed".into());
    }
    let identical = header.is_empty() && notes.is_empty();
    let (arrays, damage, unexplained, files, names) = Default::default();
    Ok(FileDiff { identical, header, header_unified, arrays, damage, notes, files, names, unexplained })
}

/// The arrays a head diff names before it counts the rest: a review reads
/// them in the parts' diffs, not as one line of every name.
const HEAD_NAMES_SHOWN: usize = 8;

/// How two heads' `arr` lines compare, in the new head's order.
pub(crate) struct ArrChanges {
    /// Arrays whose values (their SHA-256), dtype or shape differ.
    pub changed: Vec<ArrLine>,
    /// Arrays only in the new head.
    pub added: Vec<ArrLine>,
    /// Arrays only in the old head.
    pub removed: Vec<ArrLine>,
    /// Arrays whose line changed with the same values (a new salt, HMAC).
    pub rewrapped: usize,
}

/// Compares the `arr` lines of `old` and `new` array by array.
pub(crate) fn arr_changes_of(old: &Head, new: &Head) -> ArrChanges {
    let lines = |h: &Head| -> Vec<ArrLine> { h.arrs.iter().flatten().filter_map(|l| ArrLine::parse(l).ok()).collect() };
    let (a, b) = (lines(old), lines(new));
    let find = |v: &[ArrLine], name: &str| v.iter().position(|x| x.name == name);
    let key = |x: &ArrLine| (x.dtype, x.shape.clone(), x.sha256);
    let mut out = ArrChanges { changed: Vec::new(), added: Vec::new(), removed: Vec::new(), rewrapped: 0 };
    for y in &b {
        match find(&a, &y.name).map(|i| &a[i]) {
            None => out.added.push(y.clone()),
            Some(x) if key(x) != key(y) => out.changed.push(y.clone()),
            Some(x) if x != y => out.rewrapped += 1,
            Some(_) => {}
        }
    }
    out.removed = a.iter().filter(|x| find(&b, &x.name).is_none()).cloned().collect();
    out
}

/// What the heads' `arr` lines say changed: arrays whose values (their
/// SHA-256), dtype or shape differ, added or removed; arrays whose line
/// changed with the same values (a new salt, as every generation has) are
/// only counted.
fn arr_changes(old: &Head, new: &Head, originals: &BTreeMap<String, String>) -> Vec<String> {
    let c = arr_changes_of(old, new);
    let mut notes = Vec::new();
    for (what, arrs) in [("changed", &c.changed), ("added", &c.added), ("removed", &c.removed)] {
        let names: Vec<&str> =
            arrs.iter().map(|x| originals.get(&x.name).map_or(x.name.as_str(), String::as_str)).collect();
        if names.len() > HEAD_NAMES_SHOWN {
            let more = names.len() - HEAD_NAMES_SHOWN;
            let first = names[..HEAD_NAMES_SHOWN].join(", ");
            notes
                .push(format!("arrays {what} ({}): {first} and {more} more (the parts' diffs show each)", names.len()));
        } else if !names.is_empty() {
            notes.push(format!("arrays {what}: {}", names.join(", ")));
        }
    }
    if c.rewrapped > 0 {
        notes.push(format!("{} array(s) with the same values and a new `arr` line (salt, HMAC)", c.rewrapped));
    }
    notes
}

/// Keeps the bytes of a metadata array the diff shows (`files_diff::wanted`)
/// when the part holds all of it; a chunk that fails its checks keeps
/// nothing (the diff itself reports it).
fn capture(t: &dyn Text, file: &Path, s: &Section, side: usize, captured: &mut Captured) -> Result<()> {
    let size = s.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    let whole = s.chunks.first().is_none_or(|c| c.0.off == 0) && size == Some(s.chunks.iter().map(|c| c.0.len).sum());
    if !files_diff::wanted(&s.name) || s.dtype != Dtype::U8 || !whole || size > Some(crate::limits::MAX_METADATA) {
        return Ok(());
    }
    let mut bytes = Vec::new();
    for (ch, line, r) in &s.chunks {
        let c = ChunkText { ch: *ch, line: *line, text: t.range(r.clone()).map_err(|e| Error::io(file, e))? };
        match decode_side(&c, file, &s.name, &mut Vec::new()) {
            Some(raw) => bytes.extend_from_slice(&raw),
            None => return Ok(()),
        }
    }
    captured.keep(&s.name, side, bytes);
    Ok(())
}

/// The run of one array inside a part.
struct Section {
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    /// The `arr` line, when the array starts in a part written before
    /// `arr` lines moved to the head.
    arr_text: Option<Vec<u8>>,
    /// The line of the `begin` line, when the array starts in this part.
    begin: Option<u64>,
    /// Each chunk's line, its line number and where its text (from `ch`
    /// to `endch`) is in the part: chunks are compared by their `ch` lines
    /// and read again only to decode the ones that differ.
    chunks: Vec<(ChLine, u64, Range<u64>)>,
}

/// Reads a part's arrays and chunks, streaming (chunks are not decoded):
/// what it keeps is each chunk's `ch` line and where its text is.
fn scan(text: &dyn Text, file: &Path) -> Result<Vec<Section>> {
    let at = |n: u64, m: Reason| check_at(n, m).in_file(file);
    let mut lines = LineReader::new(text.stream());
    let next = |lines: &mut LineReader<_>| -> Result<Option<(u64, Vec<u8>)>> {
        let r = lines.next_range().map_err(|e| e.in_file(file))?;
        Ok(r.map(|r| (lines.line_no(), lines.bytes(r).to_vec())))
    };
    match next(&mut lines)? {
        Some((_, first)) if first.starts_with(b"WTXT part ix=") => {}
        _ => return Err(at(1, "expected `WTXT part ix=...`: not a part".into())),
    }
    let mut out: Vec<Section> = Vec::new();
    loop {
        let start = lines.offset();
        let ended = lines.line_no() + 1;
        let (n, l) = next(&mut lines)?.ok_or_else(|| at(ended, "file ends early: expected `endpart`".into()))?;
        crate::format::read::check_text_line(&l).map_err(|m| at(n, m))?;
        if l == b"endpart" {
            return match next(&mut lines)? {
                None => Ok(out),
                Some((m, _)) => Err(at(m, "text after `endpart`".into())),
            };
        }
        if l.starts_with(b"cont ") || l.starts_with(b"begin ") {
            let kind = if l.starts_with(b"cont ") { "cont" } else { "begin" };
            let mut f = Fields::new(&l, kind).map_err(|m| at(n, m))?;
            let parsed = (|| {
                let name = String::from_utf8_lossy(f.next("name")?).into_owned();
                let dtype = Dtype::parse(f.next("dtype")?).ok_or("dtype: unknown")?;
                let shape = parse_shape(f.next("shape")?)?;
                f.end()?;
                let begin = (kind == "begin").then_some(n);
                Ok::<_, Reason>(Section { name, dtype, shape, arr_text: None, begin, chunks: Vec::new() })
            })();
            out.push(parsed.map_err(|m| at(n, m))?);
        } else if l.starts_with(b"arr ") {
            let a = ArrLine::parse(&l).map_err(|m| at(n, m))?;
            let (name, dtype, shape) = (a.name, a.dtype, a.shape);
            out.push(Section { name, dtype, shape, arr_text: Some(l), begin: None, chunks: Vec::new() });
        } else if l.starts_with(b"ch ") {
            let ch = ChLine::parse(&l).map_err(|m| at(n, m))?;
            // Skip the base64 lines to `endch` (a count that lies is caught here).
            for _ in 0..ch.lines {
                let ended = lines.line_no() + 1;
                lines
                    .next_range()
                    .map_err(|e| e.in_file(file))?
                    .ok_or_else(|| at(ended, "file ends early: expected a base64 line".into()))?;
            }
            let ended = lines.line_no() + 1;
            match next(&mut lines)? {
                Some((_, e)) if e == b"endch" => {}
                other => return Err(at(other.map_or(ended, |(m, _)| m), "expected `endch`".into())),
            }
            let s = out.last_mut().ok_or_else(|| at(n, "a chunk outside any array".into()))?;
            s.chunks.push((ch, n, start..lines.offset()));
        } else if l != b"endarr" && !l.starts_with(b"idx ") {
            return Err(at(n, "expected a `cont`, `begin`, `idx`, `ch`, `endarr` or `endpart` line".into()));
        }
    }
}

/// The difference of two parts at the same place of a split snapshot:
/// chunks whose hashes differ are decoded and compared, the rest is not.
pub fn diff_parts(old: &dyn Text, new: &dyn Text, names: Names) -> Result<FileDiff> {
    // The two sides are read at once: Git waits for the driver, so the
    // second core is free.
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| scan(old, names.old));
        let b = scan(new, names.new);
        (a.join().expect("scan thread"), b)
    });
    let (a, b) = (a?, b?);
    let mut arrays = Vec::new();
    let mut damage = Vec::new();
    let mut notes = Vec::new();
    let mut captured = Captured::default();
    for (side, t, file, sections) in [(0, old, names.old, &a), (1, new, names.new, &b)] {
        for s in sections {
            capture(t, file, s, side, &mut captured)?;
        }
    }
    for y in &b {
        let Some(x) = a.iter().find(|x| x.name == y.name) else {
            arrays.push(section_diff(y, Status::Added));
            continue;
        };
        let mut d = section_diff(y, Status::Unchanged);
        if (x.dtype, &x.shape) != (y.dtype, &y.shape) {
            d.status = if x.dtype != y.dtype { Status::DtypeChanged } else { Status::Reshaped };
            d.old_dtype = Some(x.dtype.to_string());
            d.old_shape = Some(x.shape.clone());
            arrays.push(d);
            continue;
        }
        let row_elems = if y.shape.len() >= 2 { y.shape[1..].iter().product() } else { 1 };
        let mut st = Stats::new(y.dtype, row_elems, false);
        let text = |t: &dyn Text, file: &Path, (ch, line, r): &(ChLine, u64, Range<u64>), room: &mut Vec<u8>| {
            t.range_into(r.clone(), room).map_err(|e| Error::io(file, e))?;
            Ok::<_, Error>(ChunkText { ch: *ch, line: *line, text: std::mem::take(room) })
        };
        let mut sides: [Side; 2] = Default::default();
        for cb in &y.chunks {
            let found = x.chunks.iter().find(|c| c.0.ix == cb.0.ix);
            let big = found.is_some_and(|ca| span(&ca.2) + span(&cb.2) > MAX_DECODED_PAIR);
            match found {
                Some(ca) if big && (ca.0.len, ca.0.sha256) == (cb.0.len, cb.0.sha256) => {
                    if !same_range(old, ca.2.clone(), new, cb.2.clone()).map_err(|e| Error::io(names.new, e))? {
                        damage.push(Damage {
                            file: names.new.display().to_string(),
                            line: cb.1,
                            array: y.name.clone(),
                            message: format!(
                                "chunk {}: its text differs from the other side's under the same `ch` line; \
                                 too large to decode here (`wtxt verify` names the damaged side)",
                                cb.0.ix
                            ),
                        });
                    }
                }
                Some(ca) if (ca.0.len, ca.0.sha256) == (cb.0.len, cb.0.sha256) => {
                    let ta = text(old, names.old, ca, &mut sides[0].text)?;
                    let tb = text(new, names.new, cb, &mut sides[1].text)?;
                    check_unchanged(&ta, &tb, names, &y.name, &mut damage);
                    (sides[0].text, sides[1].text) = (ta.text, tb.text);
                }
                Some(_) if big => {
                    d.changed_chunks.push(cb.0.ix);
                    notes.push(format!(
                        "{}: chunk {} changed; its text is over the {} MiB the diff driver decodes at once, \
                         so its element counts are left out",
                        y.name,
                        cb.0.ix,
                        MAX_DECODED_PAIR >> 20
                    ));
                }
                Some(ca) => {
                    d.changed_chunks.push(cb.0.ix);
                    let ta = text(old, names.old, ca, &mut sides[0].text)?;
                    let tb = text(new, names.new, cb, &mut sides[1].text)?;
                    if decode_pair(&ta, &tb, names, &y.name, &mut damage, &mut sides) == (true, true) {
                        st.compare(cb.0.off, &sides[0].raw, &sides[1].raw);
                    }
                    (sides[0].text, sides[1].text) = (ta.text, tb.text);
                }
                // Cut points follow shapes: with equal shapes the same chunks are here.
                None => d.changed_chunks.push(cb.0.ix),
            }
        }
        st.finish(&mut d, y.dtype);
        if d.status == Status::Unchanged && x.arr_text != y.arr_text {
            d.status = Status::Rewrapped;
        }
        arrays.push(d);
    }
    for x in a.iter().filter(|x| !b.iter().any(|y| y.name == x.name)) {
        arrays.push(section_diff(x, Status::Removed));
    }
    // Equal chunk lines do not make equal text (framing, a damaged base64
    // line): the bytes decide, read again only when nothing else differs.
    let unchanged = arrays.iter().all(|d| d.status == Status::Unchanged) && damage.is_empty();
    let identical = unchanged && same_bytes(old, new).map_err(|e| Error::io(names.new, e))?;
    let (header, header_unified, unexplained) = (Vec::new(), String::new(), Vec::new());
    let (files, names) = (files_diff::file_changes(&captured), files_diff::in_words(&captured));
    Ok(FileDiff { identical, header, header_unified, arrays, damage, notes, files, names, unexplained })
}

/// A changed chunk pair (both sides' text) the part driver decodes whole to
/// count changed elements; a larger one (a part may declare a 400 MiB
/// chunk) is compared by its bytes, a window at a time, so the driver's
/// heap stays bounded whatever a part declares.
const MAX_DECODED_PAIR: u64 = 64 << 20;

fn span(r: &Range<u64>) -> u64 {
    r.end.saturating_sub(r.start)
}

/// True when `a`'s bytes in `ra` equal `b`'s in `rb`, compared 4 MiB at a time.
fn same_range(a: &dyn Text, ra: Range<u64>, b: &dyn Text, rb: Range<u64>) -> std::io::Result<bool> {
    if span(&ra) != span(&rb) {
        return Ok(false);
    }
    let step = 4 << 20;
    let mut at = 0;
    while at < span(&ra) {
        let n = step.min(span(&ra) - at);
        if a.range(ra.start + at..ra.start + at + n)? != b.range(rb.start + at..rb.start + at + n)? {
            return Ok(false);
        }
        at += n;
    }
    Ok(true)
}

fn section_diff(s: &Section, status: Status) -> ArrayDiff {
    ArrayDiff::new(&s.name, status, s.dtype, &s.shape)
}

/// Line-per-fact text of a head, a part or a single file for `textconv`:
/// the head's header fields and part table; a part's chunks with their row
/// ranges and digests, so a line diff shows which rows changed. A part or
/// a single file is streamed, never held whole.
pub fn textconv_part(text: &dyn Text, file: &Path) -> Result<String> {
    use std::fmt::Write as _;
    let mut s = String::new();
    match classify(text)? {
        Blob::Head(h) => s.push_str(&String::from_utf8_lossy(&h.to_bytes())),
        Blob::Other => return crate::git::textconv::textconv(text.stream()).map_err(|e| e.in_file(file)),
        Blob::Part => {
            for sec in scan(text, file)? {
                let row = if sec.shape.len() >= 2 {
                    crate::model::byte_size(sec.dtype, &sec.shape[1..]).unwrap_or(1)
                } else {
                    sec.dtype.block().bytes
                };
                let unit = if sec.shape.len() >= 2 { "rows" } else { "elements" };
                let shape = crate::format::syntax::shape_str(&sec.shape);
                let _ = writeln!(s, "array {} {}[{shape}]", sec.name, sec.dtype);
                for (ch, _, _) in &sec.chunks {
                    let (r0, r1) = (ch.off / row.max(1), (ch.off + ch.len).div_ceil(row.max(1)));
                    let _ = writeln!(
                        s,
                        "  {} chunk {} {unit} {r0}-{} sha256={}",
                        sec.name,
                        ch.ix,
                        r1.saturating_sub(1),
                        hex::encode(&ch.sha256[..8])
                    );
                }
            }
        }
    }
    Ok(s)
}

/// Checks every chunk of a part (line rules, parity, base64, CRC32C,
/// SHA-256), as the verifier checks a single file's chunks, and that its
/// `begin` lines are those its head lists for it (`begins`, from
/// [`Head::begins`]): the part is read as `diff_parts` reads it, then each
/// chunk decoded from its lines in place (never copied).
pub fn check_part(bytes: &[u8], file: &Path, begins: &[String]) -> Result<()> {
    let sections = scan(&bytes, file)?;
    let found: Vec<(String, u64)> =
        sections.iter().filter_map(|s| Some((split::begin_line(&s.name, s.dtype, &s.shape), s.begin?))).collect();
    if found.len() != begins.len() {
        let m = format!("{} `begin` line(s), the head lists {} array(s) for this part", found.len(), begins.len());
        return Err(check_at(found.get(begins.len()).map_or(0, |b| b.1), m).in_file(file));
    }
    for ((got, n), want) in found.iter().zip(begins) {
        if got != want {
            let m = format!("expected `{want}` (the array the head lists here), found `{got}`");
            return Err(check_at(*n, m).in_file(file));
        }
    }
    for sec in sections {
        for (ch, n, r) in &sec.chunks {
            // The chunk's text runs from its `ch` line to `endch`: the lines between.
            let r = r.start as usize..r.end as usize;
            let body = SliceLines::new(&bytes[r]).skip(1).take(ch.lines as usize).map(|(_, _, b)| b);
            if let Err(f) = crate::format::chunk::decode(ch, body) {
                return Err(check_at(n + 1 + f.line().unwrap_or(0), format!("chunk {}: {f}", ch.ix)).in_file(file));
            }
        }
    }
    Ok(())
}

/// The parts of a head as blobs: a commit's tree or the index
/// (`PATH.parts/NNNNNN.wtxtpart` next to the head's path). A blob whose
/// size is not the head's is never read; the others are streamed by Git,
/// so what a part declares costs no heap.
pub struct BlobParts {
    git_dir: PathBuf,
    dir: PathBuf,
    /// Each listed part's blob, its size and, where the blob is a Git LFS
    /// pointer, what it points to (`None`: not there).
    listed: Vec<Option<(git2::Oid, u64, Option<Pointer>)>>,
    /// Where the LFS objects of parts are found.
    lfs: crate::odb::lfs::Store,
    /// Each listed part's size and head line, as the head says.
    want: Vec<(u64, u64)>,
    /// Parts there that the head does not list.
    unlisted: Vec<PathBuf>,
    /// Where the part is missing: "the commit" or "the index".
    whose: &'static str,
    local: Option<LocalCopy>,
    /// Each listed part's blob, where the tree or index names one.
    ids: Vec<Option<git2::Oid>>,
    /// Whether a part missing here is fetched when it is opened
    /// ([`BlobParts::fetching`]).
    fetch: bool,
    /// Parts Git inflates ahead of their reader.
    ahead: std::cell::RefCell<Option<crate::odb::ahead::ReadAhead>>,
}

/// A reader of the same bytes as blob `oid` at part `ix`, when one is at
/// hand without Git (the hook's work-tree copy the index vouches for).
pub type LocalCopy = Box<dyn Fn(u64, git2::Oid) -> Option<Box<dyn Read>>>;

impl BlobParts {
    /// The parts of `head` (at `path`) in `tree`.
    pub fn of_tree(repo: &git2::Repository, tree: &git2::Tree, path: &Path, head: &Head) -> BlobParts {
        let dir = crate::store::parts_dir(path);
        let mut unlisted = Vec::new();
        if let Ok(sub) = tree.get_path(&dir).and_then(|e| e.to_object(repo)).and_then(|o| o.peel_to_tree()) {
            for e in sub.iter() {
                let name = e.name().unwrap_or_default();
                if split::stray_part(name, head.parts.len() as u64) {
                    unlisted.push(dir.join(name));
                }
            }
        }
        let find =
            |p: &Path| tree.get_path(p).ok().filter(|e| e.kind() == Some(git2::ObjectType::Blob)).map(|e| e.id());
        BlobParts::new(repo, path, head, find, unlisted, "the commit")
    }

    /// The parts of `head` (at `path`) in `index`, as staged.
    pub fn of_index(repo: &git2::Repository, index: &git2::Index, path: &Path, head: &Head) -> BlobParts {
        let dir = crate::store::parts_dir(path);
        let prefix = format!("{}/", dir.display());
        let unlisted = index
            .iter()
            .filter_map(|e| {
                let p = String::from_utf8_lossy(&e.path).into_owned();
                split::stray_part(p.strip_prefix(&prefix)?, head.parts.len() as u64).then(|| PathBuf::from(p))
            })
            .collect();
        let find = |p: &Path| index.get_path(p, 0).map(|e| e.id);
        BlobParts::new(repo, path, head, find, unlisted, "the index")
    }

    fn new(
        repo: &git2::Repository,
        path: &Path,
        head: &Head,
        find: impl Fn(&Path) -> Option<git2::Oid>,
        unlisted: Vec<PathBuf>,
        whose: &'static str,
    ) -> BlobParts {
        let dir = crate::store::parts_dir(path);
        let ids: Vec<Option<git2::Oid>> = head.parts.iter().map(|p| find(&dir.join(split::part_name(p.ix)))).collect();
        let listed = head.parts.iter().zip(&ids).map(|(p, id)| Self::resolve(repo, (*id)?, p.bytes)).collect();
        let want = head.parts.iter().map(|p| (p.bytes, head.part_line(p.ix))).collect();
        let lfs = crate::odb::lfs::Store::of(repo);
        let git_dir = repo.path().to_path_buf();
        let ahead = Default::default();
        BlobParts { git_dir, dir, listed, want, unlisted, whose, local: None, lfs, ids, fetch: false, ahead }
    }

    /// Blob `id` of a part the head sizes `bytes`: its size, and what it
    /// points to when it is a Git LFS pointer; `None` when it is not here.
    fn resolve(repo: &git2::Repository, id: git2::Oid, bytes: u64) -> Option<(git2::Oid, u64, Option<Pointer>)> {
        let size = crate::odb::blob::size(repo, id).ok()?;
        // A part is far larger than a pointer: only a blob the head does not size is asked.
        let pointer = (size != bytes).then(|| Pointer::of_blob(repo, id)).flatten();
        Some((id, pointer.as_ref().map_or(size, |p| p.size), pointer))
    }

    /// Fetches a part this clone lacks (a blobless clone's blob, a Git LFS
    /// object) when it is first opened: a read of some arrays, which cannot
    /// tell from the head alone whether an array's last chunk lies in the
    /// part where the next array begins.
    pub fn fetching(mut self) -> BlobParts {
        self.fetch = true;
        self
    }

    /// Part `i` (0-based) as listed, fetched first where it is missing and
    /// [`BlobParts::fetching`] says so.
    fn listed(&self, i: usize) -> Result<Option<(git2::Oid, u64, Option<Pointer>)>> {
        let found = self.listed.get(i).cloned().flatten();
        let (true, Some(Some(id))) = (self.fetch, self.ids.get(i)) else { return Ok(found) };
        if found.as_ref().is_some_and(|(_, _, p)| p.as_ref().is_none_or(|p| self.lfs.has(p))) {
            return Ok(found);
        }
        let repo = git2::Repository::open(&self.git_dir).map_err(crate::odb::git_err)?;
        crate::odb::promisor::fetch_missing(&repo, [*id])?;
        let got = Self::resolve(&repo, *id, self.want[i].0);
        if let Some((_, size, Some(p))) = &got {
            if *size == self.want[i].0 {
                crate::odb::lfs::fetch_missing(&repo, std::slice::from_ref(p))?;
            }
        }
        Ok(got)
    }

    /// Each listed part's blob, where the tree or index names one.
    pub fn ids(&self) -> &[Option<git2::Oid>] {
        &self.ids
    }

    /// Reads a part from `local` where it gives a reader.
    pub fn with_local(mut self, local: LocalCopy) -> BlobParts {
        self.local = Some(local);
        self
    }
}

impl crate::format::split::PartSource for BlobParts {
    fn open(&self, ix: u64) -> Result<Box<dyn crate::fs::Skip>> {
        let i = (ix as usize).wrapping_sub(1);
        let name = self.name(ix);
        let Some((id, size, pointer)) = self.listed(i)? else {
            let m = format!("missing part: the head lists it, {} does not have it", self.whose);
            return Err(Error::check(Default::default(), m).in_file(&name));
        };
        let (want, line) = self.want[i];
        if size != want {
            return Err(split::unlike_head(ix, want, line, size).in_file(&name));
        }
        if let Some(p) = pointer {
            let Some(f) = self.lfs.open(&p) else {
                let m = format!(
                    "part {ix:06} is the Git LFS object sha256:{}, which is not here: `git lfs fetch` it (a host's \
                     guard reads them where wtxt.lfsObjects says)",
                    p.oid
                );
                return Err(Error::check(Default::default(), m).in_file(&name));
            };
            return Ok(Box::new(crate::fs::Streamed(f)));
        }
        if let Some(r) = self.local.as_ref().and_then(|local| local(ix, id)) {
            return Ok(Box::new(crate::fs::Streamed(r)));
        }
        if let Some(bytes) = self.ahead.borrow_mut().as_mut().and_then(|a| a.take(ix)) {
            return Ok(Box::new(crate::fs::Streamed(std::io::Cursor::new(bytes))));
        }
        Ok(Box::new(crate::fs::Streamed(crate::odb::blob::stream(&self.git_dir, id)?)))
    }

    /// Parts Git holds whole, of the size the head gives, are read ahead;
    /// not where a part comes from a local copy, Git LFS, or a fetch.
    fn will_open(&self, ixs: &[u64]) {
        if self.local.is_some() || self.fetch {
            return;
        }
        let order = ixs.iter().filter_map(|&ix| {
            let i = (ix as usize).checked_sub(1)?;
            match self.listed.get(i)? {
                Some((id, size, None)) if *size == self.want.get(i)?.0 => Some((ix, *id, *size)),
                _ => None,
            }
        });
        let order: Vec<_> = order.collect();
        *self.ahead.borrow_mut() = Some(crate::odb::ahead::ReadAhead::new(self.git_dir.clone(), order));
    }

    fn name(&self, ix: u64) -> PathBuf {
        self.dir.join(crate::format::split::part_name(ix))
    }

    fn unlisted(&self, _count: u64) -> Vec<PathBuf> {
        self.unlisted.clone()
    }

    /// Named by the tree or index; where its blob is here, of the head's
    /// size, and an LFS pointer's oid the SHA-256 a `sha256=` line binds.
    /// A blob a blobless clone has not fetched tells nothing more.
    fn check_unopened(&self, part: &PartLine, head_line: u64) -> Result<()> {
        let i = (part.ix as usize).wrapping_sub(1);
        let name = self.name(part.ix);
        if !matches!(self.ids.get(i), Some(Some(_))) {
            let m = format!("missing part: the head lists it, {} does not have it", self.whose);
            return Err(Error::check(Default::default(), m).in_file(&name));
        }
        let Some(Some((_, size, pointer))) = self.listed.get(i) else { return Ok(()) };
        if *size != part.bytes {
            return Err(split::unlike_head(part.ix, part.bytes, head_line, *size).in_file(&name));
        }
        if let (Some(p), split::PartHash::File(h)) = (pointer, part.hash) {
            if p.oid != hex::encode(h) {
                let m = format!(
                    "part {:06} is the Git LFS object sha256:{}, the head (line {head_line}) binds sha256:{}",
                    part.ix,
                    p.oid,
                    hex::encode(h)
                );
                return Err(Error::check(Default::default(), m).in_file(&name));
            }
        }
        Ok(())
    }
}

/// The head a part path belongs to: `m.wtxt.parts/000003.wtxtpart` -> `m.wtxt`
/// (a part's name in any letter case, which the head's check refuses).
pub fn head_of_part(p: &Path) -> Option<std::path::PathBuf> {
    crate::format::split::part_ix(&p.file_name()?.to_string_lossy().to_ascii_lowercase())?;
    let dir = p.parent()?.to_string_lossy().into_owned();
    dir.strip_suffix(".parts").map(std::path::PathBuf::from)
}
