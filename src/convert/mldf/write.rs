//! Writing MLDF: fields planned from the arrays, samples streamed out in one pass with their allocation table.

use super::layout::*;
use crate::convert::bytes::{align, each_zero_piece};
use crate::convert::names::{self, OriginalNames};
use crate::error::{Error, Result};
use crate::model::{Array, ArrayData, Dtype};
use std::io::Write;

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
    crate::convert::common::in_memory(|w| write_to(arrays, w))
}

/// [`write()`] to a stream. The layout follows from the sizes alone, so the
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
