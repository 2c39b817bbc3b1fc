//! MLDF, the format of the header-design seed: PNG-style magic, a 64-byte
//! header, 208-byte field descriptors, a per-sample metadata table, a data
//! region and an allocation table of (pointer, size) pairs.
//!
//! The seed leaves the per-type records and arguments open; docs/FORMAT.md
//! ("MLDF") fixes them. Each field becomes WTXT arrays: INT -> i64 `[n]`,
//! FLOAT -> f64 `[n]`, NDARRAY -> `[n, *shape]` of its dtype, BYTES and JSON
//! -> u8 (every sample's bytes, in order) plus u64 `NAME__sizes` `[n]`. The
//! header and descriptors are kept in the JSON array `__mldf`.
#![forbid(unsafe_code)]

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::convert::bytes::{align, each_zero_piece, le_u16, le_u32, le_u64};
use crate::convert::names::{self, OriginalNames};
use crate::convert::npy::Source;
use crate::convert::spill::Spill;
use crate::convert::{meta_array, meta_typed, Notes};
use crate::error::{input_at, Error, Result};
use crate::model::{assign_names, Array, ArrayData, Dtype};

/// The magic bytes: the seed's literal `b'\x89MLDF\r\n\x1a\n'`, which is 9
/// bytes (its comment says 8; its code writes and reads all 9).
pub const MAGIC: &[u8] = b"\x89MLDF\r\n\x1a\n";
/// Where the header starts: right after the magic.
const H: usize = MAGIC.len();
/// Name of the metadata array.
pub const META: &str = "__mldf";
const HEADER: usize = 64;

/// What `__mldf` keeps of a file that its arrays do not say: the header
/// fields and each field's descriptor, with the arrays holding its values.
/// Fields serialize in this order (the bytes of a snapshot depend on it).
#[derive(Serialize, Deserialize)]
struct MldfMeta {
    #[serde(default = "MldfMeta::version")]
    version: [u16; 2],
    #[serde(default = "MldfMeta::flags")]
    flags: u32,
    #[serde(default = "MldfMeta::page_size")]
    page_size: u32,
    #[serde(default)]
    num_samples: u64,
    #[serde(default)]
    fields: Vec<FieldMeta>,
}

/// One field's descriptor in `__mldf`.
#[derive(Serialize, Deserialize, Default)]
struct FieldMeta {
    /// The field's own name in the file (its original name).
    name: String,
    type_id: u16,
    #[serde(default)]
    flags: u16,
    /// The WTXT array holding the values.
    array: String,
    /// For BYTES and JSON: the array of per-sample sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sizes: Option<String>,
    /// The descriptor's 128 argument bytes as hex, when any is not zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arguments: Option<String>,
}

impl MldfMeta {
    fn version() -> [u16; 2] {
        [VERSION_MAJOR, VERSION_MINOR]
    }
    fn flags() -> u32 {
        LITTLE_ENDIAN
    }
    fn page_size() -> u32 {
        PAGE as u32
    }
    fn of(arrays: &[Array]) -> Result<Option<MldfMeta>> {
        meta_typed(arrays, META)
    }
    fn array(&self) -> Result<Array> {
        meta_array(META, &serde_json::to_value(self).expect("the metadata serializes"))
    }
}
const DESC: u64 = 208;
const ALLOC: u64 = 16;
const VERSION_MAJOR: u16 = 1;
const VERSION_MINOR: u16 = 0;
const LITTLE_ENDIAN: u32 = 0x1;
const UNSUPPORTED_FLAGS: [(u32, &str); 3] = [(0x2, "compressed"), (0x4, "checksummed"), (0x8, "encrypted")];
const MAX_NDIM: usize = 14;
/// Our writer's page size (the data region starts on a page boundary).
const PAGE: u64 = 4096;

/// Field types this reader and writer handle.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Int = 1,
    Float = 2,
    Bytes = 3,
    Ndarray = 4,
    Json = 5,
}

impl Kind {
    fn from_id(id: u16) -> Option<Kind> {
        Some(match id {
            1 => Kind::Int,
            2 => Kind::Float,
            3 => Kind::Bytes,
            4 => Kind::Ndarray,
            5 => Kind::Json,
            _ => return None,
        })
    }

    /// Size of the field's record in a metadata row.
    fn record(self) -> u64 {
        match self {
            Kind::Int | Kind::Float => 8,
            _ => 16,
        }
    }
}

/// NDARRAY arguments: dtype (8 bytes, NUL-padded WTXT spelling), ndim (1
/// byte), 7 zero bytes, then ndim little-endian u64 dims.
fn parse_ndarray_args(a: &[u8]) -> std::result::Result<(Dtype, Vec<u64>), String> {
    let name: Vec<u8> = a[..8].iter().copied().take_while(|&c| c != 0).collect();
    let dtype = Dtype::parse(&name)
        .ok_or_else(|| format!("NDARRAY dtype {:?} is not a WTXT dtype", String::from_utf8_lossy(&name)))?;
    let ndim = a[8] as usize;
    if ndim > MAX_NDIM {
        return Err(format!("NDARRAY ndim {ndim} exceeds {MAX_NDIM}"));
    }
    Ok((dtype, (0..ndim).map(|i| le_u64(a, 16 + 8 * i)).collect()))
}

fn ndarray_args(dtype: Dtype, dims: &[u64]) -> Result<[u8; 128]> {
    if dims.len() > MAX_NDIM {
        return Err(Error::input(Default::default(), format!("MLDF: a sample has at most {MAX_NDIM} dims")));
    }
    let mut a = [0u8; 128];
    a[..dtype.as_str().len()].copy_from_slice(dtype.as_str().as_bytes());
    a[8] = dims.len() as u8;
    for (i, d) in dims.iter().enumerate() {
        a[16 + 8 * i..24 + 8 * i].copy_from_slice(&d.to_le_bytes());
    }
    Ok(a)
}

struct Field {
    name: String,
    kind: Kind,
    flags: u16,
    args: [u8; 128],
}

/// The field descriptors, each checked, and the metadata row size.
fn read_fields(b: &[u8], desc_ptr: u64, nf: u64) -> Result<(Vec<Field>, u64)> {
    let mut fields = Vec::with_capacity(nf as usize);
    let mut row = 0u64;
    for i in 0..nf {
        let at = (desc_ptr + i * DESC) as usize;
        let d = &b[at..at + DESC as usize];
        let raw_name = &d[..64];
        let end = raw_name
            .iter()
            .position(|&c| c == 0)
            .ok_or_else(|| input_at(at as u64, format!("field {i}: name has no NUL terminator")))?;
        let name = std::str::from_utf8(&raw_name[..end])
            .map_err(|_| input_at(at as u64, format!("field {i}: name is not UTF-8")))?
            .to_string();
        let type_id = le_u16(d, 64);
        let kind = Kind::from_id(type_id).ok_or_else(|| {
            input_at(
                at as u64 + 64,
                format!("field {name:?}: type_id {type_id} is not one of INT 1, FLOAT 2, BYTES 3, NDARRAY 4, JSON 5"),
            )
        })?;
        let meta_size = le_u32(d, 68) as u64;
        if meta_size != kind.record() {
            return Err(input_at(
                at as u64 + 68,
                format!("field {name:?}: metadata_size {meta_size}, a {kind:?} record is {} bytes", kind.record()),
            ));
        }
        row += meta_size;
        let args: [u8; 128] = d[76..204].try_into().expect("128 bytes");
        if kind == Kind::Ndarray {
            parse_ndarray_args(&args).map_err(|m| input_at(at as u64 + 76, format!("field {name:?}: {m}")))?;
        }
        fields.push(Field { name, kind, flags: le_u16(d, 66), args });
    }
    Ok((fields, row))
}

/// A gathered column's bytes: on the heap when small, else mapped from an
/// unnamed temporary file (a column of a large file is never all heap).
fn whole(v: Spill) -> Result<ArrayData> {
    let src = v.finish()?;
    Ok(src.window(0..src.bytes().len()))
}

/// The allocation table, read in place: (pointer, size) entries of 16 bytes.
#[derive(Clone, Copy)]
struct Allocs<'a> {
    table: &'a [u8],
}

impl<'a> Allocs<'a> {
    fn len(&self) -> usize {
        self.table.len() / ALLOC as usize
    }

    fn get(&self, i: usize) -> (u64, u64) {
        let at = i * ALLOC as usize;
        (le_u64(self.table, at), le_u32(self.table, at + 8) as u64)
    }

    /// Checks that every blob lies inside the data region, in order and
    /// apart (so the table can be searched by pointer where it lies).
    fn checked(b: &'a [u8], alloc_ptr: u64, data_ptr: u64) -> Result<Allocs<'a>> {
        let table = &b[alloc_ptr as usize..];
        let allocs = Allocs { table };
        let mut end = data_ptr;
        for i in 0..allocs.len() {
            let at = alloc_ptr + (i as u64) * ALLOC;
            let (p, s) = allocs.get(i);
            if p < data_ptr || p.checked_add(s).is_none_or(|e| e > alloc_ptr) {
                return Err(input_at(at, format!("allocation {i}: {s} bytes at {p} lie outside the data region")));
            }
            if p < end && i > 0 {
                return Err(input_at(at, format!("allocation {i} at {p} is out of order or overlaps the one before")));
            }
            end = p + s;
        }
        Ok(allocs)
    }

    /// The size of the blob that starts at `p`, if the table has one.
    fn size_at(&self, p: u64) -> Option<u64> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid).0.cmp(&p) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.get(mid).1),
            }
        }
        None
    }
}

/// Reads an MLDF file. Names are WTXT names already.
pub fn read(src: &Source, notes: &mut Notes) -> Result<Vec<Array>> {
    let b = src.bytes();
    let h = read_header(b, notes)?;
    let (fields, row) = read_fields(b, h.desc_ptr, h.nf)?;
    let table_end = h.n.checked_mul(row).and_then(|t| t.checked_add(h.meta_ptr)).filter(|&e| e <= h.data_ptr);
    table_end.ok_or_else(|| {
        input_at(
            H as u64 + 8,
            format!("{} samples of {row}-byte rows do not fit before the data region at {}", h.n, h.data_ptr),
        )
    })?;
    let alloc_len = b.len() as u64 - h.alloc_ptr;
    if !alloc_len.is_multiple_of(ALLOC) {
        return Err(input_at(
            h.alloc_ptr,
            format!("allocation table: {alloc_len} bytes is not a whole number of 16-byte entries"),
        ));
    }
    let allocs = Allocs::checked(b, h.alloc_ptr, h.data_ptr)?;

    let mut originals: Vec<String> = vec![META.to_string()];
    for f in &fields {
        crate::model::check_tensor_name(&f.name).map_err(|e| input_at(h.desc_ptr, e.message().to_string()))?;
        originals.push(f.name.clone());
        if matches!(f.kind, Kind::Bytes | Kind::Json) {
            originals.push(format!("{}__sizes", f.name));
        }
    }
    if let Some(d) = crate::model::first_duplicate(&originals) {
        return Err(input_at(h.desc_ptr, format!("two fields (or a field and a sizes array) are named {d:?}")));
    }
    let mut names = assign_names(&originals).into_iter().skip(1);
    let table = Table { b, h: &h, row, allocs };
    let columns = table.columns(&fields, &src.window(0..b.len()))?;
    let mut out = Vec::new();
    let mut fields_meta = Vec::with_capacity(fields.len());
    for (f, g) in fields.iter().zip(columns) {
        let name = names.next().expect("one name per field");
        let mut m = FieldMeta {
            name: f.name.clone(),
            type_id: f.kind as u16,
            flags: f.flags,
            array: name.clone(),
            ..Default::default()
        };
        let n = h.n;
        match f.kind {
            Kind::Int | Kind::Float => {
                let dtype = if f.kind == Kind::Int { Dtype::I64 } else { Dtype::F64 };
                out.push(Array::new(name, dtype, vec![n], whole(g.bytes)?)?);
            }
            Kind::Ndarray => {
                let (dtype, dims, _) = g.ndarray.expect("NDARRAY fields are planned");
                let mut shape = vec![n];
                shape.extend(dims);
                out.push(Array::new(name, dtype, shape, whole(g.bytes)?)?);
            }
            Kind::Bytes | Kind::Json => {
                let sizes_name = names.next().expect("a sizes name");
                m.sizes = Some(sizes_name.clone());
                let sizes = g.sizes.expect("BYTES and JSON keep sizes");
                out.push(Array::new(sizes_name, Dtype::U64, vec![n], whole(sizes)?)?);
                let len = g.bytes.len();
                out.push(Array::new(name, Dtype::U8, vec![len], whole(g.bytes)?)?);
            }
        }
        if f.args.iter().any(|&x| x != 0) && f.kind != Kind::Ndarray {
            m.arguments = Some(hex::encode(f.args));
        }
        fields_meta.push(m);
    }
    let meta = MldfMeta {
        version: [h.major, h.minor],
        flags: h.flags,
        page_size: h.page_size,
        num_samples: h.n,
        fields: fields_meta,
    };
    out.push(meta.array()?);
    Ok(out)
}

/// The 64-byte header after the magic.
struct Header {
    major: u16,
    minor: u16,
    flags: u32,
    /// Samples.
    n: u64,
    /// Fields.
    nf: u64,
    page_size: u32,
    desc_ptr: u64,
    meta_ptr: u64,
    data_ptr: u64,
    alloc_ptr: u64,
}

/// Reads and checks the header: a version this reader knows, little-endian
/// data without unsupported regions, sections in order inside the file.
fn read_header(b: &[u8], notes: &mut Notes) -> Result<Header> {
    let len = b.len() as u64;
    if !b.starts_with(MAGIC) {
        return Err(input_at(0, "expected the MLDF magic \\x89MLDF\\r\\n\\x1a\\n"));
    }
    let h = b.get(H..H + HEADER).ok_or_else(|| input_at(H as u64, "file ends inside the 64-byte header"))?;
    let (major, minor) = (le_u16(h, 0), le_u16(h, 2));
    if major > VERSION_MAJOR {
        return Err(input_at(
            H as u64,
            format!(
                "version {major}.{minor} is newer than this reader ({VERSION_MAJOR}.{VERSION_MINOR}): upgrade wtxt"
            ),
        ));
    }
    if major < VERSION_MAJOR {
        return Err(input_at(
            H as u64,
            format!("version {major}.{minor} is older than this reader's major version {VERSION_MAJOR}"),
        ));
    }
    if minor > VERSION_MINOR {
        notes.push(format!("MLDF version {major}.{minor} is newer than this reader ({VERSION_MAJOR}.{VERSION_MINOR}); parts it does not know are ignored"));
    }
    let flags = le_u32(h, 4);
    if flags & LITTLE_ENDIAN == 0 {
        return Err(input_at(H as u64 + 4, "flags: only little-endian files (flag 0x1) are supported"));
    }
    if let Some((_, what)) = UNSUPPORTED_FLAGS.iter().find(|(f, _)| flags & f != 0) {
        return Err(input_at(H as u64 + 4, format!("flags: {what} data regions are not supported")));
    }
    let (n, nf, page_size) = (le_u64(h, 8), le_u16(h, 16) as u64, le_u32(h, 20));
    let (desc_ptr, meta_ptr, data_ptr, alloc_ptr) = (le_u64(h, 24), le_u64(h, 32), le_u64(h, 40), le_u64(h, 48));
    desc_ptr.checked_add(nf * DESC).filter(|&e| desc_ptr >= (H + HEADER) as u64 && e <= meta_ptr).ok_or_else(|| {
        input_at(
            H as u64 + 24,
            format!("field descriptors at {desc_ptr} ({nf} x {DESC}) must end before the metadata table at {meta_ptr}"),
        )
    })?;
    if !(meta_ptr <= data_ptr && data_ptr <= alloc_ptr && alloc_ptr <= len) {
        return Err(input_at(H as u64 + 24, format!("sections out of order or past the end: metadata {meta_ptr}, data {data_ptr}, allocation table {alloc_ptr}, file {len}")));
    }
    // The format's writer starts the data region on a page boundary. A page
    // size the file does not keep to is refused: converting back honours
    // it, and 4 KB declaring 800 MB pages made an 805 MB MLDF of padding.
    if page_size != 0 && !data_ptr.is_multiple_of(page_size as u64) {
        return Err(input_at(
            H as u64 + 20,
            format!("page_size {page_size}: the data region at {data_ptr} does not start on a page boundary"),
        ));
    }
    Ok(Header { major, minor, flags, n, nf, page_size, desc_ptr, meta_ptr, data_ptr, alloc_ptr })
}

/// The sample table (one row of records per sample) and what its records
/// point to, checked against the allocation table.
struct Table<'a> {
    b: &'a [u8],
    h: &'a Header,
    row: u64,
    allocs: Allocs<'a>,
}

impl Table<'_> {
    /// Where sample `s`'s record of the field at column `col` is.
    fn record(&self, s: u64, col: u64) -> usize {
        (self.h.meta_ptr + s * self.row + col) as usize
    }

    /// The bytes a variable-size record points to: an allocation exactly.
    fn blob(&self, f: &Field, s: u64, col: u64) -> Result<&[u8]> {
        let at = self.record(s, col);
        let (p, size) = (le_u64(self.b, at), le_u32(self.b, at + 8) as u64);
        if size == 0 {
            return Ok(&[]);
        }
        match self.allocs.size_at(p) {
            Some(have) if have == size => Ok(&self.b[p as usize..(p + size) as usize]),
            _ => Err(input_at(
                at as u64,
                format!("field {:?} sample {s}: {size} bytes at {p} are not in the allocation table", f.name),
            )),
        }
    }

    /// Every field's samples gathered in one pass, sample by sample (the
    /// order the file holds them in), each field into its own spill: the
    /// bytes (and, for BYTES and JSON, each sample's size). Pages of the
    /// file behind the pass are dropped a window at a time.
    fn columns(&self, fields: &[Field], whole_file: &ArrayData) -> Result<Vec<Gathered>> {
        let (n, len) = (self.h.n, self.b.len() as u64);
        // Records may share an allocation, but what is gathered may not
        // pass the data region: a few KB of records pointing 65535 fields
        // at one blob would otherwise gather gigabytes.
        let region = self.h.alloc_ptr - self.h.data_ptr;
        let mut gathered = 0u64;
        let mut take = |x: &[u8], at: usize| -> Result<()> {
            gathered += x.len() as u64;
            if gathered > region {
                return Err(input_at(
                    at as u64,
                    format!("the samples add up to more than the {region}-byte data region (records share blobs)"),
                ));
            }
            Ok(())
        };
        let (mut cols, mut col, mut declared) = (Vec::with_capacity(fields.len()), 0u64, 0u64);
        for f in fields {
            let ndarray = match f.kind {
                Kind::Ndarray => {
                    let (dtype, dims) = parse_ndarray_args(&f.args).expect("checked when read");
                    let at = self.h.desc_ptr;
                    let per = crate::model::byte_size(dtype, &dims)
                        .ok_or_else(|| input_at(at, format!("field {:?}: shape overflows", f.name)))?;
                    // All NDARRAY fields together, before anything is reserved.
                    declared = per.checked_mul(n).and_then(|t| t.checked_add(declared)).unwrap_or(u64::MAX);
                    if declared > region && per != 0 {
                        return Err(input_at(
                            at,
                            format!("field {:?}: {n} samples of {per} bytes exceed the data region", f.name),
                        ));
                    }
                    Some((dtype, dims, per))
                }
                _ => None,
            };
            let expected = match (f.kind, &ndarray) {
                (Kind::Ndarray, Some((_, _, per))) => per * n,
                (Kind::Int | Kind::Float, _) => (n * 8).min(len),
                _ => 0,
            };
            let sizes = matches!(f.kind, Kind::Bytes | Kind::Json).then(|| Spill::with_expected((n * 8).min(len)));
            cols.push(Gathered { col, ndarray, bytes: Spill::with_expected(expected)?, sizes: sizes.transpose()? });
            col += f.kind.record();
        }
        if fields.is_empty() {
            // No records: a file may declare any number of samples of nothing.
            return Ok(cols);
        }
        // Behind the pass: the metadata table's rows, and the data region's blobs.
        let mut rows_behind = whole_file.behind(self.h.meta_ptr as usize);
        let mut data_behind = whole_file.behind(self.h.data_ptr as usize);
        for s in 0..n {
            let mut low = u64::MAX;
            for (f, g) in fields.iter().zip(cols.iter_mut()) {
                let at = self.record(s, g.col);
                match (f.kind, &g.ndarray) {
                    (Kind::Int | Kind::Float, _) => g.bytes.push(&self.b[at..at + 8])?,
                    (Kind::Ndarray, Some((dtype, dims, per))) => {
                        let x = self.blob(f, s, g.col)?;
                        if x.len() as u64 != *per {
                            return Err(input_at(
                                at as u64,
                                format!(
                                    "field {:?} sample {s}: {} bytes, a {dtype} {dims:?} sample is {per}",
                                    f.name,
                                    x.len()
                                ),
                            ));
                        }
                        take(x, at)?;
                        g.bytes.push(x)?;
                        low = low.min(blob_start(x, self.b));
                    }
                    _ => {
                        let x = self.blob(f, s, g.col)?;
                        if f.kind == Kind::Json && !x.is_empty() {
                            serde_json::from_slice::<serde::de::IgnoredAny>(x).map_err(|e| {
                                input_at(at as u64, format!("field {:?} sample {s}: not JSON: {e}", f.name))
                            })?;
                        }
                        take(x, at)?;
                        g.bytes.push(x)?;
                        g.sizes.as_mut().expect("BYTES and JSON keep sizes").push(&(x.len() as u64).to_le_bytes())?;
                        low = low.min(blob_start(x, self.b));
                    }
                }
            }
            // Rows come in order; blobs too in files written sample by
            // sample. A file laid out otherwise only reads some pages twice.
            rows_behind.reached(self.record(s, 0));
            if low != u64::MAX {
                data_behind.reached(low as usize);
            }
        }
        Ok(cols)
    }
}

/// One field's samples as [`Table::columns`] gathers them.
struct Gathered {
    /// Where the field's record is in a row.
    col: u64,
    /// NDARRAY: the samples' dtype, dims and size.
    ndarray: Option<(Dtype, Vec<u64>, u64)>,
    bytes: Spill,
    /// BYTES and JSON: each sample's size, u64.
    sizes: Option<Spill>,
}

/// Where `x` (a slice of `b`, possibly empty) starts in `b`; an empty
/// sample does not hold the pass back.
fn blob_start(x: &[u8], b: &[u8]) -> u64 {
    if x.is_empty() {
        return u64::MAX;
    }
    (x.as_ptr() as usize - b.as_ptr() as usize) as u64
}

/// The `__mldf` that reading back [`write`]'s output for `tensors` alone
/// gives (every array an NDARRAY field), or `None` when it cannot write them.
pub fn default_meta(tensors: &[Array]) -> Option<Value> {
    let n = match tensors.first() {
        None => 0,
        Some(a) => *a.shape.first()?,
    };
    if tensors.iter().any(|a| a.shape.first() != Some(&n)) {
        return None;
    }
    let field = |a: &Array| FieldMeta {
        name: a.name.clone(),
        type_id: Kind::Ndarray as u16,
        array: a.name.clone(),
        ..Default::default()
    };
    let meta = MldfMeta {
        version: [1, 0],
        flags: LITTLE_ENDIAN,
        page_size: PAGE as u32,
        num_samples: n,
        fields: tensors.iter().map(field).collect(),
    };
    serde_json::to_value(meta).ok()
}

/// A field about to be written: the array with its values and, for BYTES
/// and JSON, the array of per-sample sizes.
struct Planned<'a> {
    name: String,
    kind: Kind,
    flags: u16,
    args: [u8; 128],
    data: &'a Array,
    sizes: Option<&'a Array>,
}

/// How a field's samples are cut from its array, in order.
enum Cut<'a> {
    /// `n` samples of the same size: 8-byte values, or NDARRAY samples.
    Fixed { data: &'a ArrayData, per: usize, n: u64 },
    /// BYTES and JSON: the sizes array (u64 each) cuts the bytes.
    Sized { data: &'a ArrayData, sizes: &'a [u8] },
}

impl<'a> Cut<'a> {
    /// The samples, one at a time (nothing is collected: a field of a
    /// billion samples costs no heap), dropping the pages gone past.
    fn samples(&self) -> Box<dyn Iterator<Item = &'a [u8]> + 'a> {
        match *self {
            Cut::Fixed { data, per, n } => {
                let mut behind = data.behind(0);
                Box::new((0..n as usize).map(move |s| {
                    behind.reached(s * per);
                    data.as_bytes().get(s * per..(s + 1) * per).unwrap_or_default()
                }))
            }
            Cut::Sized { data, sizes } => {
                let (mut behind, mut at) = (data.behind(0), 0usize);
                Box::new(sizes.chunks_exact(8).map(move |c| {
                    let len = u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize;
                    behind.reached(at);
                    at += len;
                    &data.as_bytes()[at - len..at]
                }))
            }
        }
    }
}

/// A field's samples (`n` of them), checked against its kind: 8-byte
/// values, equal slices of an NDARRAY, or the blobs its sizes array cuts.
fn field_cut<'a>(p: &mut Planned<'a>, n: u64) -> Result<Cut<'a>> {
    let bad = |m: String| Error::input(Default::default(), format!("MLDF: {m}"));
    let Planned { name, kind, args, data: a, sizes, .. } = p;
    let a: &'a Array = a;
    if a.shape.first() != Some(&n) && !matches!(kind, Kind::Bytes | Kind::Json) {
        return Err(bad(format!(
            "samples are the first dimension: array {name} has shape {:?}, the first field has {n} samples",
            a.shape
        )));
    }
    Ok(match kind {
        Kind::Int | Kind::Float => {
            let want = if *kind == Kind::Int { Dtype::I64 } else { Dtype::F64 };
            if a.dtype != want || a.shape.len() != 1 {
                return Err(bad(format!("field {name}: expected {want} [{n}]")));
            }
            Cut::Fixed { data: &a.data, per: 8, n }
        }
        Kind::Ndarray => {
            *args = ndarray_args(a.dtype, &a.shape[1..])?;
            Cut::Fixed { data: &a.data, per: a.bytes().len() / n.max(1) as usize, n }
        }
        Kind::Bytes | Kind::Json => {
            let s = sizes.ok_or_else(|| bad(format!("field {name}: no sizes array")))?;
            if s.dtype != Dtype::U64 || s.shape != [n] {
                return Err(bad(format!("field {name}: sizes must be u64 [{n}]")));
            }
            let mut at = 0u64;
            for c in s.bytes().chunks_exact(8) {
                let len = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                if len > u32::MAX as u64 {
                    return Err(bad(format!("field {name}: a sample over 4 GiB")));
                }
                at = at
                    .checked_add(len)
                    .filter(|&e| e <= a.bytes().len() as u64)
                    .ok_or_else(|| bad(format!("field {name}: sizes add up to more than its bytes")))?;
            }
            if at != a.bytes().len() as u64 {
                return Err(bad(format!("field {name}: sizes add up to {at}, it holds {}", a.bytes().len())));
            }
            Cut::Sized { data: &a.data, sizes: s.bytes() }
        }
    })
}

/// Walks every sample in file order (sample by sample, field by field),
/// giving `f` its kind, its bytes and, for a blob, where it goes in the
/// data region that starts at `data_ptr`. Returns where the region ends
/// (the allocation table's place). Each pass of the writer walks again, so
/// nothing per sample is kept.
fn walk(kinds: &[Kind], cuts: &[Cut], n: u64, data_ptr: u64, f: &mut Visit) -> Result<u64> {
    let mut samples: Vec<_> = cuts.iter().map(Cut::samples).collect();
    let mut pos = data_ptr;
    for _ in 0..n {
        for (&kind, it) in kinds.iter().zip(samples.iter_mut()) {
            let x = it.next().unwrap_or_default();
            let at = (kind.record() > 8 && !x.is_empty()).then(|| {
                pos = align(pos, 8);
                pos += x.len() as u64;
                pos - x.len() as u64
            });
            f(kind, x, at)?;
        }
    }
    Ok(align(pos, 8))
}

/// What [`walk`] calls for each sample: its field's kind, its bytes and
/// where a blob goes.
type Visit<'v> = dyn FnMut(Kind, &[u8], Option<u64>) -> Result<()> + 'v;

/// The original names `__mldf` keeps among `arrays` (each field's name,
/// with the array holding it), for writers of other formats.
pub fn kept_names(arrays: &[Array]) -> Result<Option<OriginalNames>> {
    let Some(m) = MldfMeta::of(arrays)? else { return Ok(None) };
    Ok(OriginalNames::from_pairs(m.fields.into_iter().map(|f| (f.array, f.name))))
}

/// The fields to write, with the file's flags and page size: from `__mldf`
/// when present, else every array an NDARRAY field under its original name
/// (`__names`).
fn plan_fields(arrays: &[Array]) -> Result<(Vec<Planned<'_>>, u32, u32)> {
    let bad = |m: String| Error::input(Default::default(), format!("MLDF: {m}"));
    let find = |n: &str| arrays.iter().find(|a| a.name == n).ok_or_else(|| bad(format!("array {n} is missing")));
    let mut plan: Vec<Planned> = Vec::new();
    let (flags, page_size) = match MldfMeta::of(arrays)? {
        Some(m) => {
            for f in m.fields {
                let kind = Kind::from_id(f.type_id).ok_or_else(|| bad(format!("field {:?}: bad type_id", f.name)))?;
                let sizes = f.sizes.as_deref().map(find).transpose()?;
                let mut args = [0u8; 128];
                if let Some(h) = &f.arguments {
                    let v = hex::decode(h)
                        .ok()
                        .filter(|v| v.len() == 128)
                        .ok_or_else(|| bad(format!("field {:?}: arguments must be 256 hex digits", f.name)))?;
                    args.copy_from_slice(&v);
                }
                plan.push(Planned { kind, flags: f.flags, args, data: find(&f.array)?, sizes, name: f.name });
            }
            (m.flags, m.page_size)
        }
        None => {
            // The inputs' own names, as a snapshot kept them.
            let (tensors, kept) = names::split(arrays)?;
            for a in tensors.into_iter().filter(|a| !a.is_metadata()) {
                plan.push(Planned {
                    name: kept.original(&a.name).to_string(),
                    kind: Kind::Ndarray,
                    flags: 0,
                    args: [0; 128],
                    data: a,
                    sizes: None,
                });
            }
            (LITTLE_ENDIAN, PAGE as u32)
        }
    };
    Ok((plan, flags, page_size))
}

/// The sample count: the first field's first dimension.
fn sample_count(plan: &[Planned]) -> Result<u64> {
    Ok(match plan.first() {
        None => 0,
        Some(Planned { kind: Kind::Bytes | Kind::Json, sizes: Some(s), .. }) => s.shape.first().copied().unwrap_or(0),
        Some(Planned { name, data: a, .. }) => *a.shape.first().ok_or_else(|| {
            Error::input(
                Default::default(),
                format!("MLDF: array {name} is rank 0: a field needs one value per sample"),
            )
        })?,
    })
}

/// Refuses, from sizes alone, an MLDF too large to build in memory. The
/// per-sample records and allocations count as well as the tensors: an
/// array of a billion empty samples holds no bytes but would need 16 GB.
pub fn check_sizes(arrays: &[Array]) -> Result<()> {
    let (plan, _, page_size) = plan_fields(arrays)?;
    check_plan(&plan, page_size)
}

/// [`check_sizes`] for fields already planned. The writer streams, but
/// every sample takes a record whatever its size: a few bytes declaring a
/// trillion empty samples would make a 16 TB file. Records and allocation
/// entries may take at most [`MAX_TABLES_PER_BYTE`] times the tensors'
/// bytes plus [`MAX_TABLES_FREE`], which any real dataset is far below.
fn check_plan(plan: &[Planned], page_size: u32) -> Result<()> {
    let n = sample_count(plan)?;
    let per_sample: u64 = plan.iter().map(|p| p.kind.record() + if p.kind.record() > 8 { ALLOC + 8 } else { 0 }).sum();
    let tensors: u64 = plan.iter().map(|p| p.data.bytes().len() as u64).sum();
    let fixed = (H + HEADER) as u64 + DESC * plan.len() as u64 + 64 + page_size as u64;
    let tables = n.checked_mul(per_sample).and_then(|r| r.checked_add(fixed));
    let allowed = tensors.saturating_mul(MAX_TABLES_PER_BYTE).saturating_add(MAX_TABLES_FREE);
    match tables {
        Some(t) if t <= allowed => Ok(()),
        _ => Err(Error::input(
            Default::default(),
            format!(
                "MLDF: {n} samples of {per_sample} bytes of records for {tensors} bytes of tensors: the records \
                 would take more than {MAX_TABLES_PER_BYTE} times the tensors plus 1 GiB; refused"
            ),
        )),
    }
}

/// See [`check_plan`].
const MAX_TABLES_PER_BYTE: u64 = 8;
/// See [`check_plan`].
const MAX_TABLES_FREE: u64 = 1 << 30;

/// Writes arrays as MLDF, following `__mldf` when present; without it every
/// array is an NDARRAY field and all must share their first dimension (the
/// sample count).
pub fn write(arrays: &[Array]) -> Result<Vec<u8>> {
    crate::convert::in_memory(|w| write_to(arrays, w))
}

/// [`write`] to a stream. The layout follows from the sizes alone, so the
/// header is written first and the records, the data region and the
/// allocation table follow in three walks over the samples: the heap holds
/// a few buffers whatever the size of the dataset.
pub fn write_to(arrays: &[Array], w: &mut dyn Write) -> Result<()> {
    let bad = |m: String| Error::input(Default::default(), format!("MLDF: {m}"));
    let (mut plan, flags, page_size) = plan_fields(arrays)?;
    check_plan(&plan, page_size)?;
    let n = sample_count(&plan)?;
    if plan.len() > u16::MAX as usize {
        return Err(bad(format!("{} fields exceed 65535", plan.len())));
    }
    if let Some(p) = plan.iter().find(|p| p.name.len() > 63) {
        return Err(bad(format!("field name {:?} is over 63 bytes", p.name)));
    }
    let cuts = plan.iter_mut().map(|p| field_cut(p, n)).collect::<Result<Vec<Cut>>>()?;
    let kinds: Vec<Kind> = plan.iter().map(|p| p.kind).collect();
    let row: u64 = plan.iter().map(|p| p.kind.record()).sum();
    let desc_ptr = (MAGIC.len() + HEADER) as u64;
    let meta_ptr = align(desc_ptr + DESC * plan.len() as u64, 64);
    let data_ptr = align(meta_ptr + row * n, (page_size as u64).max(1));
    let alloc_ptr = walk(&kinds, &cuts, n, data_ptr, &mut |_, _, _| Ok(()))?;

    let mut out = Out { w: std::io::BufWriter::with_capacity(1 << 20, w), at: 0 };
    out.put(MAGIC)?;
    let mut h = Vec::with_capacity(HEADER);
    h.extend_from_slice(&VERSION_MAJOR.to_le_bytes());
    h.extend_from_slice(&VERSION_MINOR.to_le_bytes());
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&n.to_le_bytes());
    h.extend_from_slice(&(plan.len() as u16).to_le_bytes());
    h.extend_from_slice(&[0; 2]);
    h.extend_from_slice(&page_size.to_le_bytes());
    for p in [desc_ptr, meta_ptr, data_ptr, alloc_ptr] {
        h.extend_from_slice(&p.to_le_bytes());
    }
    h.resize(HEADER, 0);
    out.put(&h)?;
    for Planned { name, kind, flags: fl, args, .. } in &plan {
        let mut d = [0u8; DESC as usize];
        d[..name.len()].copy_from_slice(name.as_bytes());
        d[64..66].copy_from_slice(&(*kind as u16).to_le_bytes());
        d[66..68].copy_from_slice(&fl.to_le_bytes());
        d[68..72].copy_from_slice(&(kind.record() as u32).to_le_bytes());
        d[76..204].copy_from_slice(args);
        out.put(&d)?;
    }
    out.pad_to(meta_ptr)?;
    walk(&kinds, &cuts, n, data_ptr, &mut |kind, x, at| match (kind, at) {
        (Kind::Int | Kind::Float, _) => out.put(x),
        (_, Some(p)) => out.entry(p, x.len()),
        (_, None) => out.put(&[0; 16]),
    })?;
    out.pad_to(data_ptr)?;
    walk(&kinds, &cuts, n, data_ptr, &mut |_, x, at| match at {
        Some(p) => {
            out.pad_to(p)?;
            out.put(x)
        }
        None => Ok(()),
    })?;
    out.pad_to(alloc_ptr)?;
    walk(&kinds, &cuts, n, data_ptr, &mut |_, x, at| match at {
        Some(p) => out.entry(p, x.len()),
        None => Ok(()),
    })?;
    out.w.flush().map_err(Error::write_failed)
}

/// The output and how far into it the writer is.
struct Out<W: Write> {
    w: W,
    at: u64,
}

impl<W: Write> Out<W> {
    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.at += b.len() as u64;
        self.w.write_all(b).map_err(Error::write_failed)
    }

    /// Zeros up to `to` (the next section, or a blob's aligned place).
    fn pad_to(&mut self, to: u64) -> Result<()> {
        each_zero_piece(to.saturating_sub(self.at), &mut |z| self.put(z))
    }

    /// A blob's 16-byte entry, as a record and the allocation table both
    /// hold it: `{ptr u64, size u32, pad u32}`.
    fn entry(&mut self, p: u64, len: usize) -> Result<()> {
        self.put(&p.to_le_bytes())?;
        self.put(&(len as u32).to_le_bytes())?;
        self.put(&[0; 4])
    }
}
