//! The body's lines: `arr`, `idx` and `ch`, and the sizes of a chunk's text.

use std::fmt::Write as _;

use crate::crypto::digest::Hash;
use crate::error::reason;
use crate::limits::{MAX_NAME, MAX_RANK};
use crate::model::{is_valid_name, Dtype};

use super::fields::{dec, hexn, lossy, padded, Fields, PResult, B64_WIDTH, RAW_PER_LINE, ZERO32};

/// An `arr` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrLine {
    /// WTXT name.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Raw bytes.
    pub bytes: u64,
    /// SHA-256 of the raw bytes.
    pub sha256: Hash,
    /// HMAC-SHA256 (all zeros: none).
    pub hmac: Hash,
    /// The salt the HMAC keys with.
    pub salt: [u8; 8],
}

/// Writes a shape: `()` for rank 0, else comma-separated dims.
pub fn shape_str(shape: &[u64]) -> String {
    if shape.is_empty() {
        return "()".into();
    }
    shape.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// Parses a shape.
pub fn parse_shape(v: &[u8]) -> PResult<Vec<u64>> {
    if v == b"()" {
        return Ok(Vec::new());
    }
    let dims: Vec<&[u8]> = v.split(|&b| b == b',').collect();
    if dims.len() > MAX_RANK {
        return Err(reason!("shape: rank {} exceeds {MAX_RANK}", dims.len()));
    }
    dims.into_iter().map(|d| dec(d, "shape")).collect()
}

impl ArrLine {
    /// True when the array carries no HMAC (unauthenticated).
    pub fn hmac_is_zero(&self) -> bool {
        self.hmac == ZERO32
    }

    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        let _ = write!(
            out,
            "arr name={} dtype={} shape={} order=C bytes={} sha256={} hmac={} salt={}",
            self.name,
            self.dtype,
            shape_str(&self.shape),
            self.bytes,
            hex::encode(self.sha256),
            hex::encode(self.hmac),
            hex::encode(self.salt)
        );
    }

    /// The line as a string.
    pub fn to_line(&self) -> String {
        let mut s = String::with_capacity(256);
        self.write(&mut s);
        s
    }

    /// Parses the line and checks `bytes` against dtype and shape.
    pub fn parse(line: &[u8]) -> PResult<ArrLine> {
        let mut f = Fields::new(line, "arr")?;
        let name_b = f.next("name")?;
        let name = String::from_utf8(name_b.to_vec()).unwrap_or_default();
        if !is_valid_name(&name) {
            return Err(reason!(
                "name: expected [A-Za-z0-9_]+ of at most {MAX_NAME} bytes, found `{}`",
                lossy(name_b, 40)
            ));
        }
        let dt = f.next("dtype")?;
        let dtype = Dtype::parse(dt).ok_or_else(|| reason!("dtype: unknown dtype `{}`", lossy(dt, 16)))?;
        let shape = parse_shape(f.next("shape")?)?;
        if f.next("order")? != b"C" {
            return Err("order: expected `C`".into());
        }
        let bytes = dec(f.next("bytes")?, "bytes")?;
        let want = crate::model::shape_bytes(dtype, &shape)?;
        if bytes != want {
            return Err(reason!("bytes: expected {want} for {dtype} shape {}, found {bytes}", shape_str(&shape)));
        }
        let sha256 = hexn::<32>(f.next("sha256")?, "sha256")?;
        let hmac = hexn::<32>(f.next("hmac")?, "hmac")?;
        let salt = hexn::<8>(f.next("salt")?, "salt")?;
        f.end()?;
        Ok(ArrLine { name, dtype, shape, bytes, sha256, hmac, salt })
    }
}

/// An `idx` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdxLine {
    /// Rows per chunk.
    pub rows_per_chunk: u64,
    /// Bytes per row.
    pub row_size: u64,
}

impl IdxLine {
    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        let _ = write!(out, "idx rows_per_chunk={} row_size={} row_blocking=on", self.rows_per_chunk, self.row_size);
    }

    /// Parses the line; this profile only writes `row_blocking=on`.
    pub fn parse(line: &[u8]) -> PResult<IdxLine> {
        let mut f = Fields::new(line, "idx")?;
        let rows_per_chunk = dec(f.next("rows_per_chunk")?, "rows_per_chunk")?;
        if rows_per_chunk == 0 {
            return Err("rows_per_chunk: expected at least 1".into());
        }
        let row_size = dec(f.next("row_size")?, "row_size")?;
        if f.next("row_blocking")? != b"on" {
            return Err("row_blocking: expected `on`".into());
        }
        f.end()?;
        Ok(IdxLine { rows_per_chunk, row_size })
    }
}

/// A `ch` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChLine {
    /// Chunk index.
    pub ix: u64,
    /// Offset of its bytes in the array.
    pub off: u64,
    /// Its length in bytes.
    pub len: u64,
    /// SHA-256 of its bytes.
    pub sha256: Hash,
    /// CRC32C of its bytes.
    pub crc32c: u32,
    /// Base64 lines.
    pub lines: u64,
}

/// Number of base64 lines for `len` raw bytes: ceil(len / 57).
pub fn lines_for(len: u64) -> u64 {
    len.div_ceil(RAW_PER_LINE as u64)
}

/// Bytes of the base64 lines of a chunk of `len` raw bytes: 79 for each
/// full line (76 characters, a space, the parity nibble, LF), `4 x
/// ceil(r/3) + 3` for a last line of `r` bytes. A `len` that a hostile
/// line declares may make this exceed `u64`: it saturates, and no input
/// holds that much.
pub fn body_text_len(len: u64) -> u64 {
    let (full, rest) = (len / RAW_PER_LINE as u64, len % RAW_PER_LINE as u64);
    full.saturating_mul(B64_WIDTH as u64 + 3).saturating_add(if rest > 0 { rest.div_ceil(3) * 4 + 3 } else { 0 })
}

impl ChLine {
    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        let _ = write!(
            out,
            "ch ix={:06} off={:012} len={} sha256={} crc32c={:08x} b64=on width=76 lines={}",
            self.ix,
            self.off,
            self.len,
            hex::encode(self.sha256),
            self.crc32c,
            self.lines
        );
    }

    /// Parses the line and checks `lines` = ceil(len / 57).
    pub fn parse(line: &[u8]) -> PResult<ChLine> {
        let mut f = Fields::new(line, "ch")?;
        let ix = padded(f.next("ix")?, 6, "ix")?;
        let off = padded(f.next("off")?, 12, "off")?;
        let len = dec(f.next("len")?, "len")?;
        let sha256 = hexn::<32>(f.next("sha256")?, "sha256")?;
        let crc32c = u32::from_be_bytes(hexn::<4>(f.next("crc32c")?, "crc32c")?);
        if f.next("b64")? != b"on" {
            return Err("b64: expected `on`".into());
        }
        if f.next("width")? != b"76" {
            return Err("width: expected `76`".into());
        }
        let lines = dec(f.next("lines")?, "lines")?;
        f.end()?;
        if lines != lines_for(len) {
            return Err(reason!("lines: expected {} for len={len}, found {lines}", lines_for(len)));
        }
        Ok(ChLine { ix, off, len, sha256, crc32c, lines })
    }
}
