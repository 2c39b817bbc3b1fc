//! NumPy `.npy`: read (v1-v3, any byte order, C or Fortran order) and write (v1/v2).
#![forbid(unsafe_code)]

use crate::convert::common::Notes;
use crate::convert::container::{into_vec, Container, WriteSeek};
use crate::error::{input_at, reason, Error, Position, Reason, Result};
use crate::limits::{MAX_NPY_HEADER, MAX_RANK};
use crate::model::{byte_size, Array, ArrayData, Dtype};

/// The `.npy` magic.
pub const MAGIC: &[u8] = b"\x93NUMPY";

/// What a `.npy` header declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Element type.
    pub dtype: Dtype,
    /// Stored big-endian (converted on read).
    pub big_endian: bool,
    /// Stored in Fortran order (converted on read).
    pub fortran_order: bool,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Offset of the data in the file.
    pub data_offset: usize,
    /// Bytes of data the header declares.
    pub data_len: u64,
}

/// Parses a `.npy` header at the start of `b`.
pub fn parse_header(b: &[u8]) -> Result<NpyHeader> {
    if !b.starts_with(MAGIC) {
        return Err(input_at(0, "expected the .npy magic \\x93NUMPY"));
    }
    let (major, minor) = (*b.get(6).unwrap_or(&0), *b.get(7).unwrap_or(&0));
    let (len, start) = match major {
        1 => (b.get(8..10).map(|s| u16::from_le_bytes([s[0], s[1]]) as usize), 10),
        2 | 3 => (b.get(8..12).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize), 12),
        _ => return Err(input_at(6, format!("unsupported .npy version {major}.{minor} (expected 1.0, 2.0 or 3.0)"))),
    };
    let len = len.ok_or_else(|| input_at(8, "file ends inside the .npy preamble"))?;
    if len > MAX_NPY_HEADER {
        return Err(input_at(8, format!("header of {len} bytes exceeds {MAX_NPY_HEADER}")));
    }
    let text = b
        .get(start..start + len)
        .ok_or_else(|| input_at(start as u64, format!("file ends inside the {len}-byte header")))?;
    let text = std::str::from_utf8(text).map_err(|_| input_at(start as u64, "header is not UTF-8"))?;
    let dict = parse_dict(text).map_err(|m| input_at(start as u64, format!("header {m}")))?;
    let (dtype, big_endian) = parse_descr(&dict.descr).map_err(|m| input_at(start as u64, m))?;
    let data_len = byte_size(dtype, &dict.shape).ok_or_else(|| input_at(start as u64, "shape overflows"))?;
    Ok(NpyHeader {
        dtype,
        big_endian,
        fortran_order: dict.fortran_order,
        shape: dict.shape,
        data_offset: start + len,
        data_len,
    })
}

struct Dict {
    descr: String,
    fortran_order: bool,
    shape: Vec<u64>,
}

/// A strict parser for the Python dict literal NumPy writes.
fn parse_dict(t: &str) -> std::result::Result<Dict, Reason> {
    let mut p = Lit { s: t.as_bytes(), i: 0 };
    p.ws();
    p.eat(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.ws();
        if p.peek() == Some(b'}') {
            p.i += 1;
            break;
        }
        let key = p.string()?;
        p.ws();
        p.eat(b':')?;
        p.ws();
        match key.as_str() {
            "descr" => {
                descr = Some(
                    p.string()
                        .map_err(|_| "descr: expected a simple dtype string (structured dtypes are not supported)")?,
                )
            }
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            k => return Err(reason!("has unexpected key {k:?}")),
        }
        p.ws();
        if p.peek() == Some(b',') {
            p.i += 1;
        }
    }
    p.ws();
    if p.i != p.s.len() {
        return Err("has text after the dict".into());
    }
    Ok(Dict {
        descr: descr.ok_or("lacks 'descr'")?,
        fortran_order: fortran.ok_or("lacks 'fortran_order'")?,
        shape: shape.ok_or("lacks 'shape'")?,
    })
}

struct Lit<'a> {
    s: &'a [u8],
    i: usize,
}

impl Lit<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\t')) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> std::result::Result<(), Reason> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(reason!("expected `{}` at column {}", c as char, self.i + 1))
        }
    }
    fn string(&mut self) -> std::result::Result<String, Reason> {
        let q = self
            .peek()
            .filter(|&c| c == b'\'' || c == b'"')
            .ok_or(format!("expected a string at column {}", self.i + 1))?;
        self.i += 1;
        let start = self.i;
        while self.peek().ok_or("unterminated string")? != q {
            self.i += 1;
        }
        let v = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(v)
    }
    fn boolean(&mut self) -> std::result::Result<bool, Reason> {
        for (w, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.i..].starts_with(w) {
                self.i += w.len();
                return Ok(v);
            }
        }
        Err("fortran_order: expected True or False".into())
    }
    fn tuple(&mut self) -> std::result::Result<Vec<u64>, Reason> {
        self.eat(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                Some(b')') => {
                    self.i += 1;
                    return Ok(dims);
                }
                Some(c) if c.is_ascii_digit() => {
                    let start = self.i;
                    while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                        self.i += 1;
                    }
                    let d = std::str::from_utf8(&self.s[start..self.i])
                        .expect("digits")
                        .parse()
                        .map_err(|_| "shape: dimension too large")?;
                    dims.push(d);
                    if dims.len() > MAX_RANK {
                        return Err(reason!("shape: rank exceeds {MAX_RANK}"));
                    }
                    self.ws();
                    if self.peek() == Some(b',') {
                        self.i += 1;
                    }
                }
                _ => return Err("shape: expected a tuple of non-negative integers".into()),
            }
        }
    }
}

/// Maps a NumPy type string (`<f4`, `|b1`, `>i8`, ...) to a dtype and byte order.
fn parse_descr(d: &str) -> std::result::Result<(Dtype, bool), Reason> {
    let b = d.as_bytes();
    let (order, code) = match b {
        [o @ (b'<' | b'>' | b'|' | b'='), rest @ ..] => (*o, rest),
        _ => (b'=', b),
    };
    let dtype = match code {
        b"f8" => Dtype::F64,
        b"f4" => Dtype::F32,
        b"f2" => Dtype::F16,
        b"i8" => Dtype::I64,
        b"i4" => Dtype::I32,
        b"i2" => Dtype::I16,
        b"i1" => Dtype::I8,
        b"u8" => Dtype::U64,
        b"u4" => Dtype::U32,
        b"u2" => Dtype::U16,
        b"u1" => Dtype::U8,
        b"b1" => Dtype::Bool,
        b"c8" => Dtype::C64,
        b"c16" => Dtype::C128,
        _ => {
            return Err(reason!(
                "dtype {d:?} has no WTXT equivalent (supported: f8 f4 f2 i8 i4 i2 i1 u8 u4 u2 u1 b1 c8 c16)"
            ))
        }
    };
    if order == b'|' && dtype.bits() != 8 {
        return Err(reason!("dtype {d:?}: `|` (no byte order) is only valid for 1-byte types"));
    }
    Ok((dtype, order == b'>' && dtype.bits() > 8))
}

/// Reads the `.npy` held in `src[range]` as array `name`. C-order
/// little-endian data is not copied; other layouts are converted.
pub fn read(name: &str, src: &ArrayData, range: std::ops::Range<usize>) -> Result<Array> {
    let b = &src.as_bytes()[range.clone()];
    let h = parse_header(b)?;
    let have = (b.len() - h.data_offset) as u64;
    if have != h.data_len {
        return Err(Error::input(
            Position::Byte(h.data_offset as u64),
            format!("{} shape {:?} needs {} data bytes, the file has {have}", h.dtype, h.shape, h.data_len),
        ));
    }
    let data_range = range.start + h.data_offset..range.end;
    let data = if !h.big_endian && (!h.fortran_order || h.shape.len() < 2) {
        src.slice(data_range)
    } else {
        ArrayData::from(to_c_le(&b[h.data_offset..], &h))
    };
    Array::with_original_name(name.to_string(), h.dtype, h.shape, data)
}

/// Converts Fortran-order and/or big-endian data to C-order little-endian.
fn to_c_le(data: &[u8], h: &NpyHeader) -> Vec<u8> {
    let size = h.dtype.block().bytes as usize;
    let mut out =
        if h.fortran_order && h.shape.len() >= 2 { fortran_to_c(data, &h.shape, size) } else { data.to_vec() };
    if h.big_endian {
        // A complex element is two numbers, each in the file's byte order.
        let word = if matches!(h.dtype, Dtype::C64 | Dtype::C128) { size / 2 } else { size };
        for e in out.chunks_exact_mut(word) {
            e.reverse();
        }
    }
    out
}

/// Transposes an N-d array stored in Fortran order into C order.
fn fortran_to_c(data: &[u8], shape: &[u64], size: usize) -> Vec<u8> {
    let n: usize = shape.iter().product::<u64>() as usize;
    let mut out = vec![0u8; n * size];
    // Fortran stride of each dim, in elements.
    let mut fstride = vec![1usize; shape.len()];
    for k in 1..shape.len() {
        fstride[k] = fstride[k - 1] * shape[k - 1] as usize;
    }
    let mut idx = vec![0usize; shape.len()];
    let mut src = 0usize;
    for dst in 0..n {
        out[dst * size..(dst + 1) * size].copy_from_slice(&data[src * size..(src + 1) * size]);
        // Advance the C-order odometer (last dim fastest), tracking the Fortran offset.
        for k in (0..shape.len()).rev() {
            idx[k] += 1;
            src += fstride[k];
            if idx[k] < shape[k] as usize {
                break;
            }
            src -= fstride[k] * idx[k];
            idx[k] = 0;
        }
    }
    out
}

/// The NumPy type string of a dtype, or an error for bf16, float8 and the
/// MX types (NumPy has none).
pub fn descr(dtype: Dtype) -> Result<&'static str> {
    Ok(match dtype {
        Dtype::F64 => "<f8",
        Dtype::F32 => "<f4",
        Dtype::F16 => "<f2",
        Dtype::I64 => "<i8",
        Dtype::I32 => "<i4",
        Dtype::I16 => "<i2",
        Dtype::I8 => "|i1",
        Dtype::U64 => "<u8",
        Dtype::U32 => "<u4",
        Dtype::U16 => "<u2",
        Dtype::U8 => "|u1",
        Dtype::Bool => "|b1",
        Dtype::C64 => "<c8",
        Dtype::C128 => "<c16",
        Dtype::Bf16 => return Err(Error::usage("NumPy has no bfloat16: extract bf16 arrays to .safetensors")),
        _ => return Err(Error::usage(format!("NumPy has no {dtype}: extract {dtype} arrays to .safetensors"))),
    })
}

/// The `.npy` header for an array, as NumPy writes it (64-byte aligned).
pub fn header(a: &Array) -> Result<Vec<u8>> {
    let shape = match a.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", a.shape[0]),
        _ => format!("({})", a.shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    };
    let descr = descr(a.dtype).map_err(|e| Error::usage(format!("array {}: {}", a.name, e.message())))?;
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let mut out = MAGIC.to_vec();
    let v1 = 10 + dict.len() < 65535;
    let pre = if v1 { 10 } else { 12 };
    let total = (pre + dict.len() + 1).div_ceil(64) * 64;
    let hlen = total - pre;
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(hlen as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(hlen as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    Ok(out)
}

/// The npy row of the container table.
pub struct Npy;
impl Container for Npy {
    fn name(&self) -> &'static str {
        "npy"
    }
    fn holds_one_array(&self) -> bool {
        true
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["npy"]
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(MAGIC)
    }
    fn read(&self, src: &ArrayData, stem: &str, _: &mut Notes) -> Result<Vec<Array>> {
        Ok(vec![read(stem, src, 0..src.as_bytes().len())?])
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        let [a] = arrays else {
            return Err(Error::usage(format!(
                "a .npy holds one array, this selection has {}: use --array NAME or .npz",
                arrays.len()
            )));
        };
        into_vec(out, &header(a)?)?;
        into_vec(out, a.bytes())
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        for shape in [vec![], vec![5], vec![3, 4, 2]] {
            let n = byte_size(Dtype::F32, &shape).unwrap() as usize;
            let a = Array::new("x", Dtype::F32, shape.clone(), vec![0u8; n].into()).unwrap();
            let mut b = header(&a).unwrap();
            assert_eq!(b.len() % 64, 0);
            b.extend(vec![0u8; n]);
            let h = parse_header(&b).unwrap();
            assert_eq!((h.dtype, h.shape, h.fortran_order), (Dtype::F32, shape, false));
        }
    }

    #[test]
    fn fortran_transpose() {
        // 2x3 matrix [[0,1,2],[3,4,5]] stored column-major: 0,3,1,4,2,5.
        let f: Vec<u8> = vec![0, 3, 1, 4, 2, 5];
        assert_eq!(fortran_to_c(&f, &[2, 3], 1), vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn hostile_headers_are_refused() {
        assert!(parse_header(b"\x93NUMPY\x01\x00\xff\xff{").is_err());
        assert!(parse_header(b"\x93NUMPY\x09\x00").is_err());
        let h =
            b"\x93NUMPY\x01\x00\x3a\x00{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }";
        assert!(parse_header(h).is_err());
    }
}
