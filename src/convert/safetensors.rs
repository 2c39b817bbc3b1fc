//! safetensors: read in place from the map (the `safetensors` crate validates
//! the header and offsets) and write.
#![forbid(unsafe_code)]

use std::io::Write;
use std::sync::Arc;

use safetensors::{Dtype as St, SafeTensors};

use crate::convert::common::Notes;
use crate::convert::container::{Container, WriteSeek};
use crate::error::{input_at, Error, Result};
use crate::limits::MAX_ARRAYS;
use crate::model::{Array, ArrayData, Dtype};

/// safetensors' dtypes and wtxt's, one to one; wtxt's `c128` has no
/// safetensors dtype.
const DTYPES: [(St, Dtype); 22] = [
    (St::F64, Dtype::F64),
    (St::F32, Dtype::F32),
    (St::F16, Dtype::F16),
    (St::BF16, Dtype::Bf16),
    (St::I64, Dtype::I64),
    (St::I32, Dtype::I32),
    (St::I16, Dtype::I16),
    (St::I8, Dtype::I8),
    (St::U64, Dtype::U64),
    (St::U32, Dtype::U32),
    (St::U16, Dtype::U16),
    (St::U8, Dtype::U8),
    (St::BOOL, Dtype::Bool),
    (St::F8_E4M3, Dtype::F8E4m3),
    (St::F8_E5M2, Dtype::F8E5m2),
    (St::F8_E4M3FNUZ, Dtype::F8E4m3fnuz),
    (St::F8_E5M2FNUZ, Dtype::F8E5m2fnuz),
    (St::F8_E8M0, Dtype::F8E8m0),
    (St::C64, Dtype::C64),
    (St::F4, Dtype::F4E2m1),
    (St::F6_E2M3, Dtype::F6E2m3),
    (St::F6_E3M2, Dtype::F6E3m2),
];

fn from_st(d: St) -> Option<Dtype> {
    DTYPES.iter().find(|p| p.0 == d).map(|p| p.1)
}

fn to_st(d: Dtype) -> Option<St> {
    DTYPES.iter().find(|p| p.1 == d).map(|p| p.0)
}

/// Name of the array that carries a safetensors file's header bytes.
pub const ST_HEADER: &str = "__safetensors_header";

/// The file's `__metadata__`, if it has one.
pub fn metadata(src: &ArrayData) -> Result<Option<std::collections::BTreeMap<String, String>>> {
    let (_, m) = SafeTensors::read_metadata(src.as_bytes())
        .map_err(|e| input_at(0, format!("not a valid safetensors file: {e}")))?;
    Ok(m.metadata().as_ref().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()))
}

/// Reads every tensor, each array named by its tensor name (the caller
/// maps names to WTXT names); the tensors are windows of `src`.
pub fn read(src: &ArrayData) -> Result<Vec<Array>> {
    let bytes = src.as_bytes();
    let st = SafeTensors::deserialize(bytes).map_err(|e| input_at(0, format!("not a valid safetensors file: {e}")))?;
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("checked by deserialize")) as usize;
    let base = bytes.as_ptr() as usize;
    let tensors = st.tensors();
    if tensors.len() > MAX_ARRAYS {
        return Err(input_at(8, format!("{} tensors exceed the limit of {MAX_ARRAYS}", tensors.len())));
    }
    let mut out = Vec::with_capacity(tensors.len());
    for (name, view) in tensors {
        let dtype = from_st(view.dtype())
            .ok_or_else(|| input_at(8, format!("tensor {name}: dtype {:?} has no WTXT equivalent", view.dtype())))?;
        let data = view.data();
        let start = data.as_ptr() as usize - base;
        let shape = view.shape().iter().map(|&d| d as u64).collect();
        let arr = Array::with_original_name(name.clone(), dtype, shape, src.slice(start..start + data.len()))
            .map_err(|e| input_at((8 + n) as u64, format!("tensor {name}: {}", e.message())))?;
        out.push(arr);
    }
    Ok(out)
}

/// A tensor's dtype and shape without its bytes: lets the crate build the
/// exact header it would write, without copying any tensor.
struct Described {
    dtype: St,
    shape: Vec<usize>,
    len: usize,
}

impl safetensors::View for &Described {
    fn dtype(&self) -> St {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

/// The first `8 + n` bytes the crate's `serialize` writes for these arrays
/// (named as in WTXT), and the arrays in the order their bytes follow.
pub fn header_of(arrays: &[Array]) -> Result<(Vec<u8>, Vec<&Array>)> {
    header_named(&arrays.iter().map(|a| (a.name.as_str(), a)).collect::<Vec<_>>(), None)
}

/// Like [`header_of`] with each tensor's name given, and `__metadata__`.
fn header_named<'a>(
    named: &[(&str, &'a Array)],
    metadata: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<(Vec<u8>, Vec<&'a Array>)> {
    let described: Vec<(&str, Described)> = named
        .iter()
        .map(|(n, a)| {
            let dtype = to_st(a.dtype).ok_or_else(|| {
                Error::usage(format!("array {}: safetensors has no {} dtype (extract it to .npy)", a.name, a.dtype))
            })?;
            let shape = a.shape.iter().map(|&d| d as usize).collect();
            Ok((*n, Described { dtype, shape, len: a.bytes().len() }))
        })
        .collect::<Result<_>>()?;
    let header = safetensors::serialize(described.iter().map(|(n, d)| (*n, d)), None)
        .map_err(|e| Error::input(Default::default(), e.to_string()))?;
    // The crate writes `__metadata__` from a HashMap, in no fixed order: put
    // it in ourselves, keys sorted (as Python's safetensors writes them), so
    // the same dict always gives the same bytes.
    let header = match metadata {
        None => header,
        Some(m) => {
            let json = std::str::from_utf8(&header[8..]).expect("the crate writes UTF-8").trim_end();
            let rest = json.strip_prefix('{').expect("a JSON object");
            let sep = if rest.starts_with('}') { "" } else { "," };
            let meta = serde_json::to_string(m).expect("strings serialize");
            let mut text = format!("{{\"__metadata__\":{meta}{sep}{rest}").into_bytes();
            text.resize(text.len().next_multiple_of(8), b' ');
            let mut h = (text.len() as u64).to_le_bytes().to_vec();
            h.extend_from_slice(&text);
            h
        }
    };
    // The crate's order: descending dtype, then name.
    let mut order: Vec<&(&str, &Array)> = named.iter().collect();
    order.sort_by(|l, r| to_st(r.1.dtype).cmp(&to_st(l.1.dtype)).then(l.0.cmp(r.0)));
    Ok((header, order.into_iter().map(|(_, a)| *a).collect()))
}

/// Writes arrays as safetensors, byte for byte what the crate's `serialize`
/// gives (names as in WTXT), streaming each tensor from where it lives.
pub fn write<W: Write + ?Sized>(arrays: &[Array], out: &mut W) -> Result<()> {
    write_named(&arrays.iter().map(|a| (a.name.as_str(), a)).collect::<Vec<_>>(), None, out)
}

/// Writes tensors under the names given, with `__metadata__`: what
/// the Python `safetensors` library writes for the same dict.
pub fn write_named<W: Write + ?Sized>(
    named: &[(&str, &Array)],
    metadata: Option<&std::collections::BTreeMap<String, String>>,
    out: &mut W,
) -> Result<()> {
    let (header, order) = header_named(named, metadata)?;
    out.write_all(&header).map_err(Error::write_failed)?;
    for a in order {
        a.data.each_window(&mut |b| out.write_all(b).map_err(Error::write_failed))?;
    }
    Ok(())
}

/// True when `file` is exactly what [`write()`] gives for `tensors`: the same
/// header and length (the tensor bytes are the file's own).
pub fn is_ours(file: &[u8], tensors: &[Array]) -> bool {
    let Ok((header, _)) = header_of(tensors) else { return false };
    let total = tensors.iter().map(|a| a.bytes().len()).sum::<usize>() + header.len();
    file.len() == total && file.starts_with(&header)
}

/// The tensors of a safetensors file plus its header bytes, as WTXT arrays.
pub fn safetensors_to_arrays(content: &[u8]) -> Result<Vec<Array>> {
    safetensors_to_arrays_in(&ArrayData::Owned(Arc::new(content.to_vec())))
}

/// Like [`safetensors_to_arrays`]; the tensors are windows of `src`.
pub fn safetensors_to_arrays_in(src: &ArrayData) -> Result<Vec<Array>> {
    let mut arrays = read(src)?;
    let originals: Vec<String> = arrays.iter().map(|a| a.name.clone()).collect();
    for (a, name) in arrays.iter_mut().zip(crate::model::assign_names(&originals)) {
        a.name = name;
    }
    let content = src.as_bytes();
    let n = u64::from_le_bytes(content[..8].try_into().expect("checked by read")) as usize;
    let header = content[..8 + n].to_vec();
    arrays.push(Array::new(ST_HEADER, Dtype::U8, vec![header.len() as u64], ArrayData::from(header))?);
    Ok(arrays)
}

/// The header a filter-made WTXT keeps (`__safetensors_header`), parsed:
/// its JSON, and its tensors in file order as (start, end, original name,
/// WTXT name), the WTXT names given as reading the file gave them.
type PinnedLayout = (serde_json::Map<String, serde_json::Value>, Vec<(u64, u64, String, String)>);

fn pinned_layout(arrays: &[Array]) -> Result<(&[u8], PinnedLayout)> {
    let header = arrays
        .iter()
        .find(|a| a.name == ST_HEADER)
        .ok_or_else(|| {
            Error::input(Default::default(), format!("no {ST_HEADER} array: not made by the safetensors filter"))
        })?
        .bytes();
    let (meta, tensors) = layout(header).map_err(|e| Error::input(Default::default(), format!("{ST_HEADER}: {e}")))?;
    let mut sorted_names: Vec<String> = tensors.iter().map(|t| t.2.clone()).collect();
    sorted_names.sort();
    let mapped = crate::model::assign_names(&sorted_names);
    let layout = tensors
        .into_iter()
        .map(|(a, b, k)| {
            let wtxt_name = mapped[sorted_names.binary_search(&k).expect("present")].clone();
            (a, b, k, wtxt_name)
        })
        .collect();
    Ok((header, (meta, layout)))
}

/// A safetensors header (the file's first `8 + n` bytes) parsed: its JSON,
/// and its tensors in file order as (start, end, name), offsets relative
/// to the end of the header.
pub fn layout(header: &[u8]) -> Result<HeaderLayout> {
    let n = header.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize).unwrap_or(usize::MAX);
    let json = header
        .get(8..)
        .filter(|j| j.len() == n)
        .ok_or_else(|| Error::input(Default::default(), "bad header length"))?;
    let meta: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| Error::input(Default::default(), e.to_string()))?;
    let mut tensors: Vec<(u64, u64, String)> = Vec::new();
    for (k, v) in &meta {
        if k == "__metadata__" {
            continue;
        }
        let offs = v["data_offsets"].as_array().and_then(|o| Some((o.first()?.as_u64()?, o.get(1)?.as_u64()?)));
        let (a, b) = offs.ok_or_else(|| Error::input(Default::default(), format!("tensor {k} lacks data_offsets")))?;
        tensors.push((a, b, k.clone()));
    }
    tensors.sort();
    Ok((meta, tensors))
}

/// [`layout`]'s answer: the header's JSON, and (start, end, name) per tensor.
pub type HeaderLayout = (serde_json::Map<String, serde_json::Value>, Vec<(u64, u64, String)>);

/// The original names and `__metadata__` the header of a filter-made WTXT
/// keeps, for writers of other formats (`None` without that header).
pub fn pinned_names(arrays: &[Array]) -> Result<Option<crate::convert::names::OriginalNames>> {
    if !arrays.iter().any(|a| a.name == ST_HEADER) {
        return Ok(None);
    }
    let (_, (meta, layout)) = pinned_layout(arrays)?;
    let mut kept = crate::convert::names::OriginalNames::default();
    for (_, _, original, wtxt_name) in layout {
        if original != wtxt_name {
            kept.names.insert(wtxt_name, original);
        }
    }
    kept.metadata = meta.get("__metadata__").and_then(|m| serde_json::from_value(m.clone()).ok());
    Ok((!kept.is_empty()).then_some(kept))
}

/// Writes the original safetensors bytes from its header array and
/// tensors, streaming: the header, then each tensor's bytes where the
/// header's offsets put them (checked before anything is written).
pub fn write_pinned<W: Write + ?Sized>(arrays: &[Array], w: &mut W) -> Result<()> {
    let (header, (_, layout)) = pinned_layout(arrays)?;
    let mut order = Vec::with_capacity(layout.len());
    let mut at = 0u64;
    for (a, b, k, wtxt_name) in layout {
        let arr = arrays
            .iter()
            .find(|x| x.name == wtxt_name)
            .ok_or_else(|| Error::input(Default::default(), format!("tensor {k} is missing")))?;
        if at != a || arr.bytes().len() as u64 != b - a {
            return Err(Error::input(Default::default(), format!("tensor {k}: offsets do not match its bytes")));
        }
        at = b;
        order.push(arr);
    }
    w.write_all(header).map_err(Error::write_failed)?;
    for arr in order {
        arr.data.each_window(&mut |b| w.write_all(b).map_err(Error::write_failed))?;
    }
    Ok(())
}

/// The safetensors row of the container table.
pub struct Safetensors;
impl Container for Safetensors {
    fn name(&self) -> &'static str {
        "safetensors"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["safetensors"]
    }
    fn sniff(&self, b: &[u8], file_len: u64) -> bool {
        // u64 LE header length, then a JSON object.
        b.len() >= 10 && b[8] == b'{' && {
            let n = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
            n >= 2 && n <= file_len - 8
        }
    }
    fn read(&self, src: &ArrayData, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        let mut arrays = safetensors_to_arrays_in(src)?;
        crate::model::sort_arrays(&mut arrays)?;
        // A file our own writer would produce for these tensors needs no
        // header array to be rebuilt: leave it out, so WTXT -> safetensors
        // -> WTXT gives the same bytes too.
        let tensors: Vec<Array> = arrays.iter().filter(|a| a.name != ST_HEADER).cloned().collect();
        Ok(if is_ours(src.as_bytes(), &tensors) { tensors } else { arrays })
    }
    /// The tensors, and the file's `__metadata__` in `__names` for `extract`.
    fn read_tensors(&self, src: &ArrayData, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        let mut tensors = read(src)?;
        if let Some(metadata) = metadata(src)? {
            let kept = crate::convert::names::OriginalNames { metadata: Some(metadata), ..Default::default() };
            tensors.push(kept.to_array()?);
        }
        Ok(tensors)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        if arrays.iter().any(|a| a.name == ST_HEADER) {
            return write_pinned(arrays, out);
        }
        // The inputs' own names and `__metadata__`, as a snapshot kept them.
        let (tensors, kept) = crate::convert::names::split(arrays)?;
        let named: Vec<(&str, &Array)> = tensors.iter().map(|a| (kept.original(&a.name), *a)).collect();
        write_named(&named, kept.metadata.as_ref(), out)
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[ST_HEADER, crate::convert::names::NAMES]
    }
    fn read_exact(&self, content: &[u8], _: &mut Notes) -> Option<Result<Vec<Array>>> {
        Some(safetensors_to_arrays(content))
    }
    fn original_names(&self, arrays: &[Array]) -> Result<Option<crate::convert::names::OriginalNames>> {
        pinned_names(arrays)
    }
    fn keeps_metadata(&self) -> bool {
        true
    }
}
