//! Reading MLDF: header, field table and allocation table checked, each field gathered sample by sample in bounded heap.

use super::layout::*;
use crate::buffer::Spill;
use crate::convert::bytes::{le_u16, le_u32, le_u64};
use crate::convert::common::Notes;
use crate::error::{input_at, Result};
use crate::model::{assign_names, Array, ArrayData, Dtype};

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
    Ok(src.slice(0..src.as_bytes().len()))
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
pub fn read(src: &ArrayData, notes: &mut Notes) -> Result<Vec<Array>> {
    let b = src.as_bytes();
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
    let columns = table.columns(&fields, &src.slice(0..b.len()))?;
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
