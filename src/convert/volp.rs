//! VOLP (Volume Pack): `VOLP`, a little-endian u32 header length, a UTF-8
//! JSON header, and a zstd body holding one C-order little-endian tensor.
//!
//! Read: the tensor becomes the array `volume`, and the header's exact bytes
//! the u8 array `__volp_header` (unknown keys, `scale` and `offset` are kept
//! as metadata, never applied to the data). Write: that header when present
//! (it must agree with the tensor), else a minimal one; the body is zstd
//! level 3. The seed's limits are enforced before anything is allocated.
#![forbid(unsafe_code)]

use crate::convert::common::Notes;
use crate::convert::container::{into_vec, Container, WriteSeek};
use crate::error::{input_at, reason, Error, Reason, Result};
use crate::model::{Array, ArrayData, Dtype};

/// The magic bytes.
pub const MAGIC: &[u8] = b"VOLP";
/// Name of the tensor array.
pub const TENSOR: &str = "volume";
/// Name of the array holding the header JSON bytes.
pub const HEADER: &str = "__volp_header";
/// Seed limit: header bytes.
pub const MAX_HEADER: usize = 1 << 20;
/// Seed limit: decoded body bytes.
pub const MAX_BODY: u64 = 256 << 20;

fn dtype_of(s: &str) -> Option<Dtype> {
    Some(match s {
        "uint8" => Dtype::U8,
        "int16" => Dtype::I16,
        "int32" => Dtype::I32,
        "float32" => Dtype::F32,
        "float64" => Dtype::F64,
        _ => return None,
    })
}

fn name_of(d: Dtype) -> Option<&'static str> {
    Some(match d {
        Dtype::U8 => "uint8",
        Dtype::I16 => "int16",
        Dtype::I32 => "int32",
        Dtype::F32 => "float32",
        Dtype::F64 => "float64",
        _ => return None,
    })
}

/// The shape and dtype a header declares.
fn declared(h: &serde_json::Value) -> std::result::Result<(Dtype, Vec<u64>), Reason> {
    let dtype = h["dtype"].as_str().ok_or("header: expected a string `dtype`")?;
    let dtype = dtype_of(dtype)
        .ok_or_else(|| reason!("header: dtype {dtype:?} is not one of uint8 int16 int32 float32 float64"))?;
    let shape: Vec<u64> = h["shape"]
        .as_array()
        .filter(|a| a.len() == 3)
        .and_then(|a| a.iter().map(|d| d.as_u64()).collect())
        .ok_or("header: expected `shape` as 3 non-negative integers [levels, lat, lon]")?;
    Ok((dtype, shape))
}

/// Reads a VOLP file.
pub fn read(b: &[u8]) -> Result<Vec<Array>> {
    if !b.starts_with(MAGIC) {
        return Err(input_at(0, "expected the VOLP magic"));
    }
    let n = b
        .get(4..8)
        .map(|x| u32::from_le_bytes(x.try_into().expect("4 bytes")) as usize)
        .ok_or_else(|| input_at(4, "file ends inside the header length"))?;
    if n == 0 || n > MAX_HEADER {
        return Err(input_at(4, format!("header length {n} is outside 1..={MAX_HEADER}")));
    }
    let header = b.get(8..8 + n).ok_or_else(|| input_at(8, format!("file ends inside the {n}-byte header")))?;
    let h: serde_json::Value =
        serde_json::from_slice(header).map_err(|e| input_at(8, format!("header is not JSON: {e}")))?;
    if !h.is_object() {
        return Err(input_at(8, "header: expected a JSON object"));
    }
    if h.get("compression").and_then(|c| c.as_str()) != Some("zstd") {
        return Err(input_at(8, "header: compression must be \"zstd\""));
    }
    if let Some(v) = h.get("version").and_then(|v| v.as_u64()).filter(|v| *v > 1) {
        return Err(input_at(8, format!("header version {v} is newer than this reader (1)")));
    }
    let (dtype, shape) = declared(&h).map_err(|m| input_at(8, m))?;
    let want = crate::model::byte_size(dtype, &shape)
        .filter(|s| *s <= MAX_BODY)
        .ok_or_else(|| input_at(8, format!("shape {shape:?} exceeds the {MAX_BODY}-byte body limit")))?;
    let body = &b[8 + n..];
    let out =
        crate::convert::common::zstd_exact(body, want).map_err(|m| input_at(8 + n as u64, format!("body: {m}")))?;
    Ok(vec![
        Array::new(TENSOR, dtype, shape, out.slice(0..out.as_bytes().len()))?,
        Array::new(HEADER, Dtype::U8, vec![n as u64], ArrayData::from(header.to_vec()))?,
    ])
}

/// Writes arrays as VOLP: exactly one tensor (`volume`, or the only
/// non-metadata array) plus, optionally, `__volp_header`.
pub fn write(arrays: &[Array]) -> Result<Vec<u8>> {
    let data: Vec<&Array> = arrays.iter().filter(|a| !a.is_metadata()).collect();
    let t = match data[..] {
        [one] => one,
        _ => return Err(Error::usage(format!("VOLP holds one tensor, this snapshot has {}", data.len()))),
    };
    let dname = name_of(t.dtype)
        .ok_or_else(|| Error::usage(format!("VOLP has no dtype {} (uint8 int16 int32 float32 float64)", t.dtype)))?;
    if t.shape.len() != 3 {
        return Err(Error::usage(format!(
            "VOLP needs a rank-3 tensor [levels, lat, lon], {} has rank {}",
            t.name,
            t.shape.len()
        )));
    }
    let header = match arrays.iter().find(|a| a.name == HEADER) {
        Some(h) => {
            let v: serde_json::Value = serde_json::from_slice(h.bytes())
                .map_err(|e| Error::input(Default::default(), format!("{HEADER}: {e}")))?;
            let (d, s) = declared(&v).map_err(|m| Error::input(Default::default(), format!("{HEADER}: {m}")))?;
            if (d, &s) != (t.dtype, &t.shape) {
                return Err(Error::input(
                    Default::default(),
                    format!("{HEADER} declares {d}{s:?}, the tensor is {}{:?}", t.dtype, t.shape),
                ));
            }
            h.bytes().to_vec()
        }
        None => serde_json::to_vec(&serde_json::json!({
            "compression": "zstd", "dtype": dname, "offset": 0.0, "scale": 1.0, "shape": t.shape, "version": 1
        }))
        .expect("json"),
    };
    if header.len() > MAX_HEADER || t.bytes().len() as u64 > MAX_BODY {
        return Err(Error::usage(format!("VOLP limits: header <= {MAX_HEADER} bytes, body <= {MAX_BODY} bytes")));
    }
    let body = zstd::bulk::compress(t.bytes(), 3).map_err(|e| Error::io_in("zstd", e))?;
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&body);
    Ok(out)
}

/// The volp row of the container table.
pub struct Volp;
impl Container for Volp {
    fn writes_in_memory(&self) -> bool {
        true
    }
    fn name(&self) -> &'static str {
        "volp"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["volp"]
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(MAGIC)
    }
    fn read(&self, src: &ArrayData, _: &str, _: &mut Notes) -> Result<Vec<Array>> {
        read(src.as_bytes())
    }
    /// A snapshot of a VOLP keeps its header: it holds the volume's
    /// meaning (bbox, levels, scale and offset), not just its layout.
    fn read_tensors(&self, src: &ArrayData, stem: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        self.read(src, stem, notes)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        into_vec(out, &write(arrays)?)
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[HEADER]
    }
}
