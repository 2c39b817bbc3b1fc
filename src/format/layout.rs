//! How an array is cut into chunks, and how a chunk's bytes become base64
//! lines. Writer and verifier share this, so they cannot disagree.

use crate::format::syntax::{body_text_len, lines_for, ChLine, IdxLine, PResult, B64_WIDTH, RAW_PER_LINE};
use crate::model::{byte_size, shape_bytes, Dtype};

/// Raw chunk size of rank 0 and rank 1 arrays (the seed's default).
pub const FLAT_CHUNK: u64 = 32 * 1024;

/// Default rows per chunk for arrays of rank 2 and up.
pub const DEFAULT_ROWS_PER_CHUNK: u64 = 128;

/// The chunking of one array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Present for arrays of rank >= 2 (row blocking).
    pub idx: Option<IdxLine>,
    /// Raw bytes per chunk (the last may be shorter).
    pub chunk: u64,
    /// Total raw bytes.
    pub bytes: u64,
}

impl Layout {
    /// The profile's layout: rank >= 2 arrays are cut every `rows_per_chunk`
    /// rows of `product(shape[1..]) * itemsize` bytes; rank 0 and 1 arrays in
    /// 32 KiB chunks, or for the f6 types (four elements in three bytes) the
    /// 32,766 bytes that end on an element.
    pub fn new(dtype: Dtype, shape: &[u64], rows_per_chunk: u64) -> PResult<Layout> {
        let bytes = shape_bytes(dtype, shape)?;
        if shape.len() < 2 {
            let block = dtype.block().bytes;
            return Ok(Layout { idx: None, chunk: FLAT_CHUNK / block * block, bytes });
        }
        if rows_per_chunk == 0 {
            return Err("rows_per_chunk: expected at least 1".into());
        }
        let row_size = byte_size(dtype, &shape[1..]).ok_or("shape: row size overflows")?;
        let chunk = rows_per_chunk.checked_mul(row_size).ok_or("rows_per_chunk x row_size overflows")?;
        Ok(Layout { idx: Some(IdxLine { rows_per_chunk, row_size }), chunk, bytes })
    }

    /// Number of chunks: an empty array still has one, of length 0.
    pub fn chunk_count(&self) -> u64 {
        if self.bytes == 0 || self.chunk == 0 {
            1
        } else {
            self.bytes.div_ceil(self.chunk)
        }
    }

    /// Offset and length of chunk `ix`.
    pub fn chunk_range(&self, ix: u64) -> (u64, u64) {
        if self.bytes == 0 || self.chunk == 0 {
            return (0, 0);
        }
        let off = ix * self.chunk;
        (off, self.chunk.min(self.bytes - off))
    }

    /// Bytes and lines of chunk `ix`'s text as the canonical writer lays it
    /// out: its `ch` line, its base64 lines and `endch`. They follow from
    /// the layout alone (a `ch` line's hashes have fixed widths), which is
    /// what lets a reader pass over chunks without reading them.
    pub fn chunk_text(&self, ix: u64, scratch: &mut String) -> (u64, u64) {
        let (off, len) = self.chunk_range(ix);
        scratch.clear();
        let lines = lines_for(len);
        ChLine { ix, off, len, sha256: [0; 32], crc32c: 0, lines }.write(scratch);
        (scratch.len() as u64 + 1 + body_text_len(len) + "endch\n".len() as u64, lines + 2)
    }

    /// [`Layout::chunk_text`] of every chunk together: the array's text
    /// between its `arr` (and `idx`) line and `endarr`.
    pub fn chunks_text(&self) -> (u64, u64) {
        let mut scratch = String::with_capacity(200);
        (0..self.chunk_count()).fold((0, 0), |(b, l), ix| {
            let (cb, cl) = self.chunk_text(ix, &mut scratch);
            (b.saturating_add(cb), l.saturating_add(cl))
        })
    }
}

/// The parity nibble of a base64 line: XOR of its characters, low 4 bits.
#[inline]
pub fn parity(line: &[u8]) -> u8 {
    let mut words = line.chunks_exact(8);
    let mut x = 0u64;
    for w in &mut words {
        x ^= u64::from_le_bytes(w.try_into().expect("8 bytes"));
    }
    let mut b = x.to_le_bytes().iter().fold(0u8, |a, &c| a ^ c);
    for &c in words.remainder() {
        b ^= c;
    }
    b & 0x0f
}

/// The lowercase hex digit of a nibble.
#[inline]
pub fn hex_digit(n: u8) -> u8 {
    b"0123456789abcdef"[(n & 0x0f) as usize]
}

/// Appends a chunk's base64 lines (`<76 chars> <parity>\n`, the last line
/// shorter) to `out`. `scratch` is reused between calls to avoid page faults.
pub fn encode_lines(raw: &[u8], out: &mut Vec<u8>, scratch: &mut Vec<u8>) {
    let full = raw.len() / RAW_PER_LINE * RAW_PER_LINE;
    let (body, tail) = raw.split_at(full);
    scratch.resize(body.len() / 3 * 4, 0);
    let _ = base64_simd::STANDARD.encode(body, base64_simd::Out::from_slice(&mut scratch[..]));
    out.reserve(scratch.len() / B64_WIDTH * (B64_WIDTH + 3) + 104);
    for line in scratch.chunks_exact(B64_WIDTH) {
        push_line(out, line);
    }
    if !tail.is_empty() {
        let mut buf = [0u8; B64_WIDTH];
        let enc = base64_simd::STANDARD.encode(tail, base64_simd::Out::from_slice(&mut buf[..]));
        let n = enc.len();
        push_line(out, &buf[..n]);
    }
}

#[inline]
fn push_line(out: &mut Vec<u8>, line: &[u8]) {
    out.extend_from_slice(line);
    out.extend_from_slice(&[b' ', hex_digit(parity(line)), b'\n']);
}

/// Base64 characters of the last line of a chunk of `len` bytes.
pub fn last_line_width(len: u64) -> usize {
    let rem = (len % RAW_PER_LINE as u64) as usize;
    if rem == 0 {
        B64_WIDTH
    } else {
        rem.div_ceil(3) * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        let l = Layout::new(Dtype::F32, &[8300], 128).unwrap();
        assert_eq!((l.chunk_count(), l.chunk_range(1)), (2, (32768, 432)));
        let l = Layout::new(Dtype::F64, &[300, 8], 128).unwrap();
        assert_eq!(l.idx.unwrap().row_size, 64);
        assert_eq!((l.chunk_count(), l.chunk_range(2)), (3, (16384, 2816)));
        let l = Layout::new(Dtype::F32, &[0, 4], 128).unwrap();
        assert_eq!((l.chunk_count(), l.chunk_range(0)), (1, (0, 0)));
        let l = Layout::new(Dtype::F32, &[4, 0], 128).unwrap();
        assert_eq!((l.chunk_count(), l.idx.unwrap().row_size), (1, 0));
        assert!(Layout::new(Dtype::F64, &[2, u64::MAX / 4], 128).is_err());
    }

    #[test]
    fn encoding_matches_reference() {
        let raw: Vec<u8> = (0..200u8).collect();
        let (mut out, mut s) = (Vec::new(), Vec::new());
        encode_lines(&raw, &mut out, &mut s);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[3].len(), last_line_width(200) + 2);
        use base64::Engine;
        let joined: String = lines.iter().map(|l| &l[..l.len() - 2]).collect();
        assert_eq!(base64::engine::general_purpose::STANDARD.decode(joined).unwrap(), raw);
    }
}
