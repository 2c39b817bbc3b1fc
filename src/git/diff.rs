//! A semantic diff of two WTXT files (`wtxt diff`, and Git's diff driver).
//!
//! Both files are read once, as text, in lockstep by array name. Chunks whose
//! `ch` lines match are equal without decoding; only differing chunks are
//! decoded and compared element by element. Memory is a few chunks, whatever
//! the file sizes.

use std::io::Read;
use std::path::Path;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::format::delta::ChunkText;
use crate::format::delta::{next_array, wtxt_tail, ArrayText, Walker};
use crate::format::layout::Layout;
use crate::format::read::Header;
use crate::format::syntax::{ChLine, Root};
use crate::git::files_diff;
use crate::model::Dtype;

/// Most changed-row ranges listed per array (the counts stay exact).
pub const MAX_RANGES: usize = 64;

/// What happened to one array.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Only in the new file.
    Added,
    /// Only in the old file.
    Removed,
    /// Same name, another shape.
    Reshaped,
    /// Same name, another dtype.
    DtypeChanged,
    /// Values changed.
    Changed,
    /// Same values; only the `arr` line changed (a new salt or HMAC).
    Rewrapped,
    /// The same values.
    Unchanged,
}

/// The difference of one array.
#[derive(Clone, Debug, Serialize)]
pub struct ArrayDiff {
    /// The array's WTXT name.
    pub name: String,
    /// Its name in the model (`model.layers.0.mlp.up_proj.weight`), when
    /// the snapshot maps it to its WTXT name (`__names`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// What happened to it.
    pub status: Status,
    /// Its dtype (the new file's, when both have it).
    pub dtype: String,
    /// Its shape (the new file's, when both have it).
    pub shape: Vec<u64>,
    /// Dtype in the old file, when it differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_dtype: Option<String>,
    /// Shape in the old file, when it differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_shape: Option<Vec<u64>>,
    /// `ix` of the new file's chunks that differ.
    pub changed_chunks: Vec<u64>,
    /// Half-open ranges of changed rows (elements for rank 0 and 1).
    pub changed_rows: Vec<(u64, u64)>,
    /// True when more ranges changed than are listed.
    pub rows_truncated: bool,
    /// Elements whose values differ.
    pub changed_elements: u64,
    /// For float dtypes: largest |new - old| over changed elements (NaN pairs left out).
    pub max_abs: Option<f64>,
    /// For float dtypes: largest |new - old| / max(|new|, |old|).
    pub max_rel: Option<f64>,
    /// For float dtypes: L2 norm of (new - old).
    pub l2: Option<f64>,
    /// For float dtypes: elements that moved beyond NumPy's `isclose`
    /// (|new - old| > 1e-8 + 1e-5 |old|): the change a reviewer reads,
    /// where `max_rel` is ruled by values near zero.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved: Option<u64>,
    /// For float dtypes, when asked for ([`diff_norms`]): L2 norm of the
    /// new values, so that `l2 / norm` is the relative change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub norm: Option<f64>,
}

/// A header field that changed.
#[derive(Clone, Debug, Serialize)]
pub struct FieldChange {
    /// The header field (`gen`, `ts`, `build`, ...).
    pub field: String,
    /// Its old value.
    pub old: String,
    /// Its new value.
    pub new: String,
}

/// The whole difference.
#[derive(Clone, Debug, Serialize)]
pub struct FileDiff {
    /// True when nothing differs: header, arrays, tail, and no damage.
    pub identical: bool,
    /// Header fields that changed.
    pub header: Vec<FieldChange>,
    /// A short unified diff of the header lines.
    pub header_unified: String,
    /// Every array of either file, in name order.
    pub arrays: Vec<ArrayDiff>,
    /// Checks that failed in the chunks the diff decoded: the side is
    /// damaged, and those chunks' values are not compared.
    pub damage: Vec<Damage>,
    /// Facts about the files besides arrays (a split snapshot's parts).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The files of a Hugging Face folder (`__hf_files`) that differ, by
    /// path, a text file's lines as a unified diff.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<crate::git::files_diff::FileChange>,
    /// Changes of the model's names (`__names`) and of the shards'
    /// safetensors headers (`__hf_headers`), in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Arrays whose `arr` lines record different SHA-256s although every
    /// chunk is the same: one side is damaged, and only verifying says
    /// which (see [`explain`]).
    #[serde(skip)]
    pub unexplained: Vec<String>,
}

/// A failed check on one side of a diff.
#[derive(Clone, Debug, Serialize)]
pub struct Damage {
    /// The file, as named to the diff.
    pub file: String,
    /// Line of the damaged file.
    pub line: u64,
    /// The array it belongs to.
    pub array: String,
    /// What failed.
    pub message: String,
}

impl FileDiff {
    /// True when the two files differ in anything but nothing at all.
    pub fn differs(&self) -> bool {
        !self.identical
    }

    /// Gives each array the name the model knows it by: the new file's
    /// `__names` (`new`, WTXT name to original), else the old file's.
    pub fn name_originals(&mut self, old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) {
        for a in &mut self.arrays {
            a.original = new.get(&a.name).or_else(|| old.get(&a.name)).cloned();
        }
    }
}

impl ArrayDiff {
    /// The name a person reads: the model's own, else the WTXT name.
    pub fn shown_name(&self) -> &str {
        self.original.as_deref().unwrap_or(&self.name)
    }
}

/// What decoding one side's chunks reuses from one chunk to the next (its
/// text, its bytes, the base64 staged), so that each reuses pages already
/// faulted in.
#[derive(Default)]
pub(crate) struct Side {
    /// The chunk's text, for a caller that reads it here.
    pub text: Vec<u8>,
    /// The bytes last decoded.
    pub raw: Vec<u8>,
    staging: Vec<u8>,
}

/// Decodes one side's chunk; a fault becomes damage on that side.
pub(crate) fn decode_side(c: &ChunkText, file: &Path, array: &str, damage: &mut Vec<Damage>) -> Option<Vec<u8>> {
    let mut side = Side::default();
    decode_side_into(c, file, array, damage, &mut side).then_some(side.raw)
}

/// [`decode_side`] into `side.raw`; false on a fault.
fn decode_side_into(c: &ChunkText, file: &Path, array: &str, damage: &mut Vec<Damage>, side: &mut Side) -> bool {
    match crate::format::chunk::decode_into(&c.ch, c.body(), &mut side.raw, &mut side.staging) {
        Ok(()) => true,
        Err(f) => {
            let e = crate::format::delta::fault_at(c, &f);
            let line = match e.position() {
                crate::error::Position::Line(n) => n,
                _ => c.line,
            };
            damage.push(Damage {
                file: file.display().to_string(),
                line,
                array: array.to_string(),
                message: e.message().to_string(),
            });
            false
        }
    }
}

/// Chunk text (both sides) from which decoding in two threads pays for
/// the thread: a model of many small arrays must not spawn one per chunk.
const DECODE_IN_TWO: usize = 256 << 10;

/// Decodes both sides of a changed chunk into `sides` (old, new), at once
/// when they are large (Git waits while its driver runs, so the second
/// core is free); faults become damage, the old side's first. Whether each
/// side decoded.
pub(crate) fn decode_pair(
    a: &ChunkText,
    b: &ChunkText,
    names: Names,
    array: &str,
    damage: &mut Vec<Damage>,
    sides: &mut [Side; 2],
) -> (bool, bool) {
    let [sa, sb] = sides;
    if a.text.len() + b.text.len() < DECODE_IN_TWO {
        let ra = decode_side_into(a, names.old, array, damage, sa);
        return (ra, decode_side_into(b, names.new, array, damage, sb));
    }
    let (mut damage_a, mut damage_b) = (Vec::new(), Vec::new());
    let (ra, rb) = std::thread::scope(|s| {
        let ra = s.spawn(|| decode_side_into(a, names.old, array, &mut damage_a, sa));
        let rb = decode_side_into(b, names.new, array, &mut damage_b, sb);
        (ra.join().expect("decode thread"), rb)
    });
    damage.extend(damage_a);
    damage.extend(damage_b);
    (ra, rb)
}

pub(crate) fn header_fields(h: &Header) -> Vec<(&'static str, String)> {
    let m = &h.meta;
    let mut v = vec![
        ("schema", m.schema.clone()),
        ("gen", m.gen_str()),
        ("ts", m.ts.as_str().to_string()),
        ("build", m.build.clone()),
        ("host", m.host.clone()),
        ("cuda", m.cuda.clone()),
        ("cap", h.cap.items.join(",")),
    ];
    match &h.root {
        Root::Final { sha256_all, merkle_prev, merkle_this, .. } => {
            v.push(("sha256_all", hex::encode(sha256_all)));
            v.push(("merkle_prev", hex::encode(merkle_prev)));
            v.push(("merkle_this", hex::encode(merkle_this)));
        }
        Root::Pending => v.push(("root", "pending".into())),
    }
    v.push(("signature", h.sign.as_ref().map_or("none".into(), |s| format!("keyid {}", hex::encode(s.keyid)))));
    v
}

/// Compares two WTXT files read from `a` (old) and `b` (new).
pub fn diff<A: Read, B: Read>(a: A, b: B, names: Names) -> Result<FileDiff> {
    diff_with(a, b, names, false, false)
}

/// [`diff`], and the L2 norm of every float array's new values
/// ([`ArrayDiff::norm`]): the chunks that did not change are decoded too.
pub fn diff_norms<A: Read, B: Read>(a: A, b: B, names: Names) -> Result<FileDiff> {
    diff_with(a, b, names, true, false)
}

/// [`diff`] (with `norms`, [`diff_norms`]) of two texts that leave out the
/// arrays whose heads' `arr` lines match ([`crate::format::split::Sparse`]):
/// an array left out on both sides is unchanged by its `arr` lines (the same
/// dtype, shape and SHA-256 of its values), and its chunks are not read.
pub fn diff_sparse<A: Read, B: Read>(a: A, b: B, names: Names, norms: bool) -> Result<FileDiff> {
    diff_with(a, b, names, norms, true)
}

fn diff_with<A: Read, B: Read>(a: A, b: B, names: Names, norms: bool, sparse: bool) -> Result<FileDiff> {
    let (mut wa, mut wb) = (Walker::new(a), Walker::new(b));
    let (ha, ta) = wa.wtxt_header().map_err(|e| e.in_file(names.old))?;
    let (hb, tb) = wb.wtxt_header().map_err(|e| e.in_file(names.new))?;
    let (header, header_unified) = header_changes(&ha, &ta, &hb, &tb);

    let mut arrays = Vec::new();
    let mut damage = Vec::new();
    let mut unexplained = Vec::new();
    let mut captured = files_diff::Captured::default();
    let mut na = next_array(&mut wa).map_err(|e| e.in_file(names.old))?;
    let mut nb = next_array(&mut wb).map_err(|e| e.in_file(names.new))?;
    loop {
        let order = match (&na, &nb) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => x.arr.name.as_bytes().cmp(y.arr.name.as_bytes()),
        };
        match order {
            std::cmp::Ordering::Less => {
                let x = na.take().expect("some");
                if !(sparse && wa.left_out().map_err(|e| e.in_file(names.old))?) {
                    skip_array(&mut wa, &x).map_err(|e| e.in_file(names.old))?;
                }
                arrays.push(whole(&x, Status::Removed));
                na = next_array(&mut wa).map_err(|e| e.in_file(names.old))?;
            }
            std::cmp::Ordering::Greater => {
                let y = nb.take().expect("some");
                if !(sparse && wb.left_out().map_err(|e| e.in_file(names.new))?) {
                    skip_array(&mut wb, &y).map_err(|e| e.in_file(names.new))?;
                }
                arrays.push(whole(&y, Status::Added));
                nb = next_array(&mut wb).map_err(|e| e.in_file(names.new))?;
            }
            std::cmp::Ordering::Equal => {
                let (x, y) = (na.take().expect("some"), nb.take().expect("some"));
                let before = damage.len();
                let unread = sparse
                    && wa.left_out().map_err(|e| e.in_file(names.old))?
                    && wb.left_out().map_err(|e| e.in_file(names.new))?;
                let d = if unread {
                    // Left out as the heads give it the same values (other
                    // SHA-256s are `unexplained` below).
                    whole(&y, if x.arr_text == y.arr_text { Status::Unchanged } else { Status::Rewrapped })
                } else if files_diff::wanted(&x.arr.name) && small_bytes(&x) && small_bytes(&y) {
                    let old = read_whole(&mut wa, &x, names.old, &mut damage)?;
                    let new = read_whole(&mut wb, &y, names.new, &mut damage)?;
                    compare_whole((&x, old), (&y, new), &mut captured)
                } else {
                    compare_array(&mut wa, &x, &mut wb, &y, names, &mut damage, norms)?
                };
                // Equal chunks give equal bytes, hence equal SHA-256s.
                let same_values = d.status != Status::DtypeChanged && d.status != Status::Reshaped;
                if same_values && d.changed_chunks.is_empty() && damage.len() == before && x.arr.sha256 != y.arr.sha256
                {
                    unexplained.push(d.name.clone());
                }
                arrays.push(d);
                na = next_array(&mut wa).map_err(|e| e.in_file(names.old))?;
                nb = next_array(&mut wb).map_err(|e| e.in_file(names.new))?;
            }
        }
    }
    wtxt_tail(&mut wa).map_err(|e| e.in_file(names.old))?;
    wtxt_tail(&mut wb).map_err(|e| e.in_file(names.new))?;
    let identical = header.is_empty()
        && arrays.iter().all(|a| a.status == Status::Unchanged)
        && ta == tb
        && damage.is_empty()
        && unexplained.is_empty();
    let (files, names) = (files_diff::file_changes(&captured), files_diff::in_words(&captured));
    Ok(FileDiff { identical, header, header_unified, arrays, damage, notes: Vec::new(), files, names, unexplained })
}

/// Names the damaged side behind `d.unexplained`: `check` verifies a side
/// whole (`names.old` or `names.new`) and gives its first failure. Both
/// sides are verified at once, and only when a diff found such an array,
/// so an ordinary diff never pays for it.
pub fn explain(d: &mut FileDiff, names: Names, check: &(dyn Fn(&Path) -> Option<Error> + Sync)) {
    let Some(array) = d.unexplained.first().cloned() else { return };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| check(names.old));
        (a.join().expect("verify thread"), check(names.new))
    });
    for (side, e) in [(names.old, a), (names.new, b)] {
        let Some(e) = e else { continue };
        let line = match e.position() {
            crate::error::Position::Line(n) => n,
            _ => 0,
        };
        let file = e.path().unwrap_or(side).display().to_string();
        let message = e.message().strip_prefix(&format!("array {array}: ")).unwrap_or(e.message()).to_string();
        d.damage.push(Damage { file, line, array: array.clone(), message });
    }
}

/// The header fields that differ, and a short unified diff of the header
/// lines (`ta`, `tb`: their text).
pub(crate) fn header_changes(ha: &Header, ta: &[u8], hb: &Header, tb: &[u8]) -> (Vec<FieldChange>, String) {
    let header: Vec<FieldChange> = header_fields(ha)
        .into_iter()
        .zip(header_fields(hb))
        .filter(|(x, y)| x.1 != y.1)
        .map(|((f, old), (_, new))| FieldChange { field: f.to_string(), old, new })
        .collect();
    let (sa, sb) = (String::from_utf8_lossy(ta), String::from_utf8_lossy(tb));
    let unified = similar::TextDiff::from_lines(sa.as_ref(), sb.as_ref())
        .unified_diff()
        .context_radius(1)
        .header("old header", "new header")
        .to_string();
    (header, unified)
}

/// The two files' names, for errors.
#[derive(Clone, Copy)]
pub struct Names<'a> {
    /// The old file's name.
    pub old: &'a Path,
    /// The new file's name.
    pub new: &'a Path,
}

fn whole(x: &ArrayText, status: Status) -> ArrayDiff {
    ArrayDiff::new(&x.arr.name, status, x.arr.dtype, &x.arr.shape)
}

impl ArrayDiff {
    /// An array's difference with no figures yet.
    pub(crate) fn new(name: &str, status: Status, dtype: Dtype, shape: &[u64]) -> ArrayDiff {
        ArrayDiff {
            name: name.to_string(),
            original: None,
            status,
            dtype: dtype.to_string(),
            shape: shape.to_vec(),
            old_dtype: None,
            old_shape: None,
            changed_chunks: Vec::new(),
            changed_rows: Vec::new(),
            rows_truncated: false,
            changed_elements: 0,
            max_abs: None,
            max_rel: None,
            l2: None,
            moved: None,
            norm: None,
        }
    }
}

fn skip_array<R: Read>(w: &mut Walker<R>, x: &ArrayText) -> Result<()> {
    for _ in 0..x.layout()?.chunk_count() {
        w.skip_chunk()?;
    }
    w.expect("endarr")
}

/// NumPy's `isclose` defaults: an element within them has not moved.
const ISCLOSE_RTOL: f64 = 1e-5;
const ISCLOSE_ATOL: f64 = 1e-8;

/// Element-wise statistics of one array.
/// Running comparison of one array's elements.
pub(crate) struct Stats {
    dtype: Dtype,
    row_elems: u64,
    rows: Vec<(u64, u64)>,
    truncated: bool,
    changed: u64,
    max_abs: f64,
    max_rel: f64,
    sum_sq: f64,
    moved: u64,
    /// With `norms`: the sum of squares of the new values, over `seen`
    /// elements (the norm is given only when they are all of them).
    norms: bool,
    sum_sq_new: f64,
    seen: u64,
}

impl Stats {
    pub(crate) fn new(dtype: Dtype, row_elems: u64, norms: bool) -> Stats {
        Stats {
            dtype,
            row_elems,
            rows: Vec::new(),
            truncated: false,
            changed: 0,
            max_abs: 0.0,
            max_rel: 0.0,
            sum_sq: 0.0,
            moved: 0,
            norms: norms && dtype.is_float(),
            sum_sq_new: 0.0,
            seen: 0,
        }
    }

    /// Adds the squares of `new`'s finite values to the new side's norm.
    fn add_norm(&mut self, new: &[u8]) {
        if !self.norms {
            return;
        }
        let block = self.dtype.block();
        let mut v = [[0.0; 2]; 4];
        for y in new.chunks_exact(block.bytes as usize) {
            let n = self.dtype.decode(y, &mut v).unwrap_or(0);
            for [re, im] in &v[..n] {
                let sq = re * re + im * im;
                if sq.is_finite() {
                    self.sum_sq_new += sq;
                }
            }
        }
        self.seen += new.len() as u64 / block.bytes * block.elems;
    }

    /// Puts the figures into `d` (status `Changed` when any element changed).
    pub(crate) fn finish(self, d: &mut ArrayDiff, dtype: Dtype) {
        let numel = d.shape.iter().product::<u64>();
        if self.norms && self.seen == numel {
            d.norm = Some(self.sum_sq_new.sqrt());
        }
        d.changed_elements = self.changed;
        d.changed_rows = self.rows;
        d.rows_truncated = self.truncated;
        if self.changed > 0 {
            d.status = Status::Changed;
            if dtype.is_float() {
                d.max_abs = Some(self.max_abs);
                d.max_rel = Some(self.max_rel);
                d.l2 = Some(self.sum_sq.sqrt());
                d.moved = Some(self.moved);
            }
        }
    }

    fn add_row(&mut self, row: u64) {
        let full = self.rows.len() >= MAX_RANGES;
        match self.rows.last_mut() {
            Some(r) if r.1 == row => r.1 = row + 1,
            Some(r) if r.1 > row => {}
            _ if full => self.truncated = true,
            _ => self.rows.push((row, row + 1)),
        }
    }

    /// Compares `old` and `new`, equal-length runs of whole blocks
    /// starting at byte `off` of the array. A complex element moves by the
    /// modulus of its change.
    pub(crate) fn compare(&mut self, off: u64, old: &[u8], new: &[u8]) {
        self.add_norm(new);
        let block = self.dtype.block();
        let first = off / block.bytes * block.elems;
        let (mut va, mut vb) = ([[0.0; 2]; 4], [[0.0; 2]; 4]);
        let size = block.bytes as usize;
        for (k, (x, y)) in old.chunks_exact(size).zip(new.chunks_exact(size)).enumerate() {
            if x == y {
                continue;
            }
            let base = first + k as u64 * block.elems;
            let decoded = self.dtype.decode(x, &mut va).zip(self.dtype.decode(y, &mut vb));
            if decoded.is_none() {
                // No values: the one element of an integer or bool block changed.
                self.changed += 1;
                self.add_row(base / self.row_elems.max(1));
                continue;
            }
            for j in 0..block.elems as usize {
                let (a, b) = (va[j], vb[j]);
                if block.elems > 1 && a.map(f64::to_bits) == b.map(f64::to_bits) {
                    continue;
                }
                self.changed += 1;
                self.add_row((base + j as u64) / self.row_elems.max(1));
                let d = (b[0] - a[0]).hypot(b[1] - a[1]);
                if d.is_finite() {
                    self.max_abs = self.max_abs.max(d);
                    let (ma, mb) = (a[0].hypot(a[1]), b[0].hypot(b[1]));
                    if ma.max(mb) > 0.0 {
                        self.max_rel = self.max_rel.max(d / ma.max(mb));
                    }
                    self.sum_sq += d * d;
                    self.moved += u64::from(d > ISCLOSE_ATOL + ISCLOSE_RTOL * ma);
                }
            }
        }
    }
}

fn compare_array<A: Read, B: Read>(
    wa: &mut Walker<A>,
    x: &ArrayText,
    wb: &mut Walker<B>,
    y: &ArrayText,
    names: Names,
    damage: &mut Vec<Damage>,
    norms: bool,
) -> Result<ArrayDiff> {
    let mut d = whole(y, Status::Unchanged);
    if retyped(&mut d, x, y) {
        skip_array(wa, x).map_err(|e| e.in_file(names.old))?;
        skip_array(wb, y).map_err(|e| e.in_file(names.new))?;
        return Ok(d);
    }
    let (la, lb) = (x.layout()?, y.layout()?);
    let mut st = Stats::new(y.arr.dtype, row_elems(y), norms);
    let mut sides: [Side; 2] = Default::default();
    if la == lb {
        for _ in 0..la.chunk_count() {
            let ca = wa.chunk().map_err(|e| e.in_file(names.old))?;
            let cb = wb.chunk().map_err(|e| e.in_file(names.new))?;
            if same(&ca.ch, &cb.ch) {
                check_unchanged(&ca, &cb, names, &y.arr.name, damage);
                if st.norms && decode_side_into(&cb, names.new, &y.arr.name, damage, &mut sides[1]) {
                    st.add_norm(&sides[1].raw);
                }
                continue;
            }
            d.changed_chunks.push(cb.ch.ix);
            if decode_pair(&ca, &cb, names, &y.arr.name, damage, &mut sides) == (true, true) {
                st.compare(cb.ch.off, &sides[0].raw, &sides[1].raw);
            }
        }
    } else {
        // Different blocking: align the two byte streams.
        compare_streams((wa, &la), (wb, &lb), &mut st, &mut d, names, damage)?;
    }
    wa.expect("endarr").map_err(|e| e.in_file(names.old))?;
    wb.expect("endarr").map_err(|e| e.in_file(names.new))?;
    st.finish(&mut d, y.arr.dtype);
    if d.status == Status::Unchanged && x.arr_text != y.arr_text {
        d.status = Status::Rewrapped;
    }
    Ok(d)
}

/// Marks `d` reshaped or retyped when `x` and `y` differ in dtype or shape.
fn retyped(d: &mut ArrayDiff, x: &ArrayText, y: &ArrayText) -> bool {
    if x.arr.dtype == y.arr.dtype && x.arr.shape == y.arr.shape {
        return false;
    }
    d.status = if x.arr.dtype != y.arr.dtype { Status::DtypeChanged } else { Status::Reshaped };
    d.old_dtype = Some(x.arr.dtype.to_string());
    d.old_shape = Some(x.arr.shape.clone());
    true
}

/// Elements in one row of `x` (one for rank 0 and 1).
fn row_elems(x: &ArrayText) -> u64 {
    if x.arr.shape.len() >= 2 {
        x.arr.shape[1..].iter().product()
    } else {
        1
    }
}

/// A `u8` array small enough to read whole ([`crate::limits::MAX_METADATA`]).
fn small_bytes(x: &ArrayText) -> bool {
    x.arr.dtype == Dtype::U8
        && x.arr.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).is_some_and(|n| n <= crate::limits::MAX_METADATA)
}

/// One side's array read whole: its chunks' `ch` lines and its bytes (none
/// when a chunk failed its checks, which becomes damage).
type Whole = (Vec<ChLine>, Option<Vec<u8>>);

/// [`Whole`] of the array `x` at `w`.
fn read_whole<R: Read>(w: &mut Walker<R>, x: &ArrayText, file: &Path, damage: &mut Vec<Damage>) -> Result<Whole> {
    let mut chs = Vec::new();
    let mut bytes = Some(Vec::new());
    for _ in 0..x.layout()?.chunk_count() {
        let c = w.chunk().map_err(|e| e.in_file(file))?;
        match (decode_side(&c, file, &x.arr.name, damage), bytes.as_mut()) {
            (Some(raw), Some(b)) => b.extend_from_slice(&raw),
            _ => bytes = None,
        }
        chs.push(c.ch);
    }
    w.expect("endarr").map_err(|e| e.in_file(file))?;
    Ok((chs, bytes))
}

/// [`compare_array`] for a small metadata array whose values the diff
/// shows (`files_diff::wanted`): both sides, read whole ([`read_whole`]),
/// compared and kept in `captured`.
fn compare_whole(old: (&ArrayText, Whole), new: (&ArrayText, Whole), captured: &mut files_diff::Captured) -> ArrayDiff {
    let ((x, (ca, ba)), (y, (cb, bb))) = (old, new);
    let mut d = whole(y, Status::Unchanged);
    if !retyped(&mut d, x, y) {
        if let (Some(a), Some(b)) = (&ba, &bb) {
            d.changed_chunks = cb.iter().filter(|c| !ca.iter().any(|o| same(o, c))).map(|c| c.ix).collect();
            let mut st = Stats::new(y.arr.dtype, row_elems(y), false);
            st.compare(0, a, b);
            st.finish(&mut d, y.arr.dtype);
        }
        if d.status == Status::Unchanged && x.arr_text != y.arr_text {
            d.status = Status::Rewrapped;
        }
    }
    for (side, bytes) in [(0, ba), (1, bb)] {
        if let Some(b) = bytes {
            captured.keep(&x.arr.name, side, b);
        }
    }
    d
}

/// A chunk whose `ch` line records the same hash on both sides is not
/// decoded, but its text must then be the same bytes: text that differs
/// means one side no longer gives that hash (a damaged line), so both are
/// checked and the failing side is reported, never taken for unchanged.
/// Comparing bytes costs nothing next to decoding; damage that is the same
/// on both sides is for `verify` to find.
pub(crate) fn check_unchanged(a: &ChunkText, b: &ChunkText, names: Names, array: &str, damage: &mut Vec<Damage>) {
    if a.text != b.text {
        decode_pair(a, b, names, array, damage, &mut Default::default());
    }
}

fn same(a: &ChLine, b: &ChLine) -> bool {
    (a.off, a.len, a.sha256) == (b.off, b.len, b.sha256)
}

fn compare_streams<A: Read, B: Read>(
    (wa, la): (&mut Walker<A>, &Layout),
    (wb, lb): (&mut Walker<B>, &Layout),
    st: &mut Stats,
    d: &mut ArrayDiff,
    names: Names,
    damage: &mut Vec<Damage>,
) -> Result<()> {
    let size = st.dtype.block().bytes;
    let before = damage.len();
    let (mut left_a, mut left_b) = (la.chunk_count(), lb.chunk_count());
    let (mut buf_a, mut buf_b): (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
    let (mut pos, mut cur_b_ix) = (0u64, 0u64);
    loop {
        // After damage the two streams no longer align: the rest is read, not compared.
        while buf_a.len() < buf_b.len().max(1) && left_a > 0 {
            let c = wa.chunk().map_err(|e| e.in_file(names.old))?;
            if damage.len() == before {
                buf_a.extend(decode_side(&c, names.old, &d.name, damage).unwrap_or_default());
            }
            left_a -= 1;
        }
        while buf_b.len() < buf_a.len().max(1) && left_b > 0 {
            let c = wb.chunk().map_err(|e| e.in_file(names.new))?;
            cur_b_ix = c.ch.ix;
            if damage.len() == before {
                buf_b.extend(decode_side(&c, names.new, &d.name, damage).unwrap_or_default());
            }
            left_b -= 1;
        }
        if damage.len() > before {
            buf_a.clear();
            buf_b.clear();
            if left_a == 0 && left_b == 0 {
                break;
            }
            continue;
        }
        let n = buf_a.len().min(buf_b.len()) / size as usize * size as usize;
        if n == 0 {
            break;
        }
        let before = st.changed;
        st.compare(pos, &buf_a[..n], &buf_b[..n]);
        if st.changed > before && d.changed_chunks.last() != Some(&cur_b_ix) {
            d.changed_chunks.push(cur_b_ix);
        }
        pos += n as u64;
        buf_a.drain(..n);
        buf_b.drain(..n);
    }
    Ok(())
}
