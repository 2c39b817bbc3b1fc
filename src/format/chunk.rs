//! The one chunk decoder. Every command that turns a chunk's base64 lines
//! back into bytes — the verifier, DELTA v2, recovery, diff and textconv —
//! goes through [`ChunkDecoder`], so all of them hold a chunk to the same
//! rules (profile, "Chunks"):
//!
//! - "Every line encodes 57 raw bytes (76 characters) except the chunk's
//!   last line, which encodes the remainder": width, then one space and one
//!   parity nibble;
//! - "the XOR of all the line's base64 characters (as bytes), low 4 bits",
//!   written as a lowercase hex digit;
//! - RFC 4648 base64, the last line canonical (right padding, no stray bits);
//! - `lines` = ceil(len / 57), and the bytes match `len`, `crc32c` and
//!   (where the caller asks) `sha256` of the `ch` line.
//!
//! Strictness is the caller's: a line of the wrong shape breaks the
//! structure and is returned at once (the strict reader stops there), while
//! parity and alphabet faults are recorded and decoding goes on, so the
//! verifier can name every damaged line and recovery can judge the chunk.

use sha2::{Digest, Sha256};

use crate::format::layout::{hex_digit, last_line_width, parity};
use crate::format::syntax::{lossy, ChLine, B64_WIDTH, RAW_PER_LINE};

/// What is wrong with a chunk. `line` is 0-based within the chunk's base64
/// lines (the `ch` line's number + 1 + `line` is the file line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Not `<base64 of the expected width> <nibble>`.
    Shape {
        /// Base64 line (from 0).
        line: u64,
        /// Characters expected.
        width: usize,
        /// Characters found.
        found: usize,
    },
    /// The parity nibble does not match the line.
    Parity {
        /// Base64 line (from 0).
        line: u64,
        /// The nibble written.
        found: u8,
        /// The nibble computed.
        expected: u8,
    },
    /// A character outside the base64 alphabet.
    NotBase64 {
        /// Base64 line (from 0).
        line: u64,
    },
    /// The last line is not the canonical base64 of the chunk's remainder.
    LastLine {
        /// Base64 line (from 0).
        line: u64,
        /// Characters expected.
        want: usize,
    },
    /// Fewer or more base64 lines than `lines=`.
    LineCount {
        /// Lines `lines=` gives.
        expected: u64,
        /// Lines found.
        found: u64,
    },
    /// The bytes' CRC32C is not the `ch` line's.
    Crc {
        /// The `ch` line's CRC32C.
        expected: u32,
        /// The bytes' CRC32C.
        found: u32,
    },
    /// The bytes' SHA-256 is not the `ch` line's.
    Sha256,
}

impl Fault {
    /// The 0-based chunk line the fault is on, if it is on one.
    pub fn line(&self) -> Option<u64> {
        match self {
            Fault::Shape { line, .. }
            | Fault::Parity { line, .. }
            | Fault::NotBase64 { line }
            | Fault::LastLine { line, .. } => Some(*line),
            _ => None,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Shape { width, found, .. } => write!(
                f,
                "expected a base64 line of {width} characters, a space and a parity nibble, found {found} bytes"
            ),
            Fault::Parity { found, expected, .. } if found.is_ascii_hexdigit() && !found.is_ascii_uppercase() => {
                write!(f, "parity nibble is {}, the line's characters give {}", *found as char, *expected as char)
            }
            Fault::Parity { found, .. } => {
                write!(f, "expected a lowercase hex parity nibble, found `{}`", lossy(&[*found], 1))
            }
            Fault::NotBase64 { .. } => write!(f, "expected only base64 characters (A-Z a-z 0-9 + /)"),
            Fault::LastLine { want, .. } => {
                write!(f, "expected canonical base64 of {want} bytes (right padding, no stray bits)")
            }
            Fault::LineCount { expected, found } => write!(f, "expected {expected} base64 lines, found {found}"),
            Fault::Crc { expected, found } => write!(f, "crc32c is {expected:08x}, its bytes give {found:08x}"),
            Fault::Sha256 => write!(f, "sha256 does not match its bytes"),
        }
    }
}

/// Decodes one chunk, line by line. Full lines are staged and decoded in
/// batches (one SIMD call per [`ChunkDecoder::flush`]); the caller decides
/// how often to flush, which bounds what is held.
pub struct ChunkDecoder {
    len: u64,
    lines: u64,
    seen: u64,
    crc: u32,
    sha: Option<Sha256>,
    decoded: u64,
    staging: Vec<u8>,
    staged_from: u64,
    faults: Vec<Fault>,
}

impl ChunkDecoder {
    /// A decoder for the chunk `ch` describes; `check_sha` adds the SHA-256
    /// check (the verifier computes it on other threads instead).
    pub fn new(ch: &ChLine, check_sha: bool) -> ChunkDecoder {
        ChunkDecoder {
            len: ch.len,
            lines: ch.lines,
            seen: 0,
            crc: 0,
            sha: check_sha.then(Sha256::new),
            decoded: 0,
            staging: Vec::new(),
            staged_from: 0,
            faults: Vec::new(),
        }
    }

    /// Lines still expected.
    pub fn remaining(&self) -> u64 {
        self.lines.saturating_sub(self.seen)
    }

    /// Takes the next base64 line (without its LF), appending what it
    /// decodes to `out` (the last line at once, full lines on `flush`). A
    /// line of the wrong shape is returned as an error and not taken.
    pub fn line(&mut self, l: &[u8], out: &mut Vec<u8>) -> Result<(), Fault> {
        let k = self.seen;
        let last = k + 1 >= self.lines;
        let width = if last { last_line_width(self.len) } else { B64_WIDTH };
        if l.len() != width + 2 || l[width] != b' ' {
            return Err(Fault::Shape { line: k, width, found: l.len() });
        }
        self.seen += 1;
        let (b64, nib) = (&l[..width], l[width + 1]);
        let expected = hex_digit(parity(b64));
        if nib != expected {
            self.faults.push(Fault::Parity { line: k, found: nib, expected });
        }
        if self.staging.is_empty() {
            self.staged_from = k;
        }
        if last {
            self.flush(out);
            // The last line may be padded: decoded strictly (no stray bits).
            use base64::Engine;
            let want = (self.len - (self.lines - 1) * RAW_PER_LINE as u64) as usize;
            let start = out.len();
            out.resize(start + want.max(RAW_PER_LINE), 0);
            let got = base64::engine::general_purpose::STANDARD.decode_slice(b64, &mut out[start..]);
            out.truncate(start + want);
            if !matches!(got, Ok(n) if n == want) {
                self.faults.push(Fault::LastLine { line: k, want });
            }
            self.account(&out[start..]);
        } else {
            self.staging.extend_from_slice(b64);
        }
        Ok(())
    }

    /// Decodes the staged full lines into `out`.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        if self.staging.is_empty() {
            return;
        }
        let start = out.len();
        if !crate::buffer::append_base64(out, &self.staging) {
            // Find the lines at fault; the others still decode.
            out.resize(start + self.staging.len() / 4 * 3, 0);
            for (i, line) in self.staging.chunks(B64_WIDTH).enumerate() {
                let o = start + i * RAW_PER_LINE;
                let dst = base64_simd::Out::from_slice(&mut out[o..o + RAW_PER_LINE]);
                if base64_simd::STANDARD.decode(line, dst).is_err() {
                    self.faults.push(Fault::NotBase64 { line: self.staged_from + i as u64 });
                }
            }
        }
        self.staging.clear();
        let (a, b) = (start, out.len());
        self.account(&out[a..b]);
    }

    fn account(&mut self, bytes: &[u8]) {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.decoded += bytes.len() as u64;
        if let Some(h) = self.sha.as_mut() {
            h.update(bytes);
        }
    }

    /// Ends the chunk: every fault found, in line order, then what the
    /// whole chunk gets wrong (line count, CRC32C, SHA-256). The CRC and
    /// SHA-256 are judged only when every line was sound.
    pub fn finish(&mut self, ch: &ChLine, out: &mut Vec<u8>) -> Vec<Fault> {
        self.flush(out);
        let mut faults = std::mem::take(&mut self.faults);
        faults.sort_by_key(|f| f.line());
        if self.seen != self.lines {
            faults.push(Fault::LineCount { expected: self.lines, found: self.seen });
        }
        if faults.is_empty() && self.decoded == self.len {
            if self.crc != ch.crc32c {
                faults.push(Fault::Crc { expected: ch.crc32c, found: self.crc });
            } else if self.sha.take().is_some_and(|h| <[u8; 32]>::from(h.finalize()) != ch.sha256) {
                faults.push(Fault::Sha256);
            }
        }
        faults
    }
}

/// Decodes a chunk's base64 lines (each without its LF) as the verifier
/// does, a block at a time: every [`crate::limits::BLOCK`] bytes of full
/// lines, and at the end what is left, are decoded onto `out` and handed
/// to `block`, which takes them from there (leaving `out` empty, or a
/// fresh buffer, for the next). Returns the chunk's faults: a line of the
/// wrong shape first (the line is not taken), then what
/// [`ChunkDecoder::finish`] finds. The SHA-256 is not checked here: the
/// caller hashes the blocks it is handed.
pub fn decode_blocks<'a>(
    ch: &ChLine,
    lines: impl IntoIterator<Item = &'a [u8]>,
    out: &mut Vec<u8>,
    mut block: impl FnMut(&mut Vec<u8>),
) -> Vec<Fault> {
    let per_block = crate::limits::BLOCK / RAW_PER_LINE;
    let mut dec = ChunkDecoder::new(ch, false);
    let (mut shapes, mut pending) = (Vec::new(), 0);
    for l in lines {
        if let Err(f) = dec.line(l, out) {
            shapes.push(f);
            continue;
        }
        pending += 1;
        if pending == per_block {
            dec.flush(out);
            block(out);
            pending = 0;
        }
    }
    if pending > 0 {
        dec.flush(out);
        block(out);
    }
    shapes.extend(dec.finish(ch, out));
    shapes
}

/// Decodes a whole chunk from its base64 lines, every check included:
/// its bytes, or its first fault.
pub fn decode<'a>(ch: &ChLine, body: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<u8>, Fault> {
    let mut out = Vec::new();
    decode_into(ch, body, &mut out, &mut Vec::new())?;
    Ok(out)
}

/// [`decode`] into `out` (emptied first), staging the base64 in `staging`:
/// a caller decoding many chunks keeps both, so each chunk reuses pages
/// already faulted in (a 2 MiB chunk is 512 faults in fresh memory).
pub fn decode_into<'a>(
    ch: &ChLine,
    body: impl IntoIterator<Item = &'a [u8]>,
    out: &mut Vec<u8>,
    staging: &mut Vec<u8>,
) -> Result<(), Fault> {
    out.clear();
    let mut dec = ChunkDecoder::new(ch, true);
    dec.staging = std::mem::take(staging);
    dec.staging.clear();
    let mut extra = 0u64;
    for l in body {
        if dec.remaining() == 0 {
            extra += 1;
            continue;
        }
        if let Err(f) = dec.line(l, out) {
            *staging = dec.staging;
            return Err(f);
        }
        if dec.staging.len() >= crate::limits::BLOCK {
            dec.flush(out);
        }
    }
    let lines = dec.lines;
    let mut faults = dec.finish(ch, out);
    *staging = dec.staging;
    if extra > 0 {
        faults.insert(0, Fault::LineCount { expected: lines, found: lines + extra });
    }
    match faults.into_iter().next() {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(raw: &[u8]) -> (ChLine, Vec<Vec<u8>>) {
        let mut text = Vec::new();
        crate::format::layout::encode_lines(raw, &mut text, &mut Vec::new());
        let lines: Vec<Vec<u8>> = text.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec).collect();
        let ch = ChLine {
            ix: 0,
            off: 0,
            len: raw.len() as u64,
            sha256: Sha256::digest(raw).into(),
            crc32c: crc32c::crc32c(raw),
            lines: lines.len() as u64,
        };
        (ch, lines)
    }

    #[test]
    fn sound_chunks_decode_and_each_fault_is_named() {
        let raw: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let (ch, lines) = chunk(&raw);
        assert_eq!(decode(&ch, lines.iter().map(Vec::as_slice)).unwrap(), raw);
        let mut bad = lines.clone();
        bad[3][0] = if bad[3][0] == b'A' { b'B' } else { b'A' };
        assert!(matches!(decode(&ch, bad.iter().map(Vec::as_slice)), Err(Fault::Parity { line: 3, .. })));
        let mut short = lines.clone();
        short[2].pop();
        assert!(matches!(decode(&ch, short.iter().map(Vec::as_slice)), Err(Fault::Shape { line: 2, .. })));
        assert!(matches!(decode(&ch, lines[..5].iter().map(Vec::as_slice)), Err(Fault::LineCount { found: 5, .. })));
        let mut other = ch;
        other.sha256 = [0; 32];
        assert_eq!(decode(&other, lines.iter().map(Vec::as_slice)), Err(Fault::Sha256));
        other.crc32c ^= 1;
        assert!(matches!(decode(&other, lines.iter().map(Vec::as_slice)), Err(Fault::Crc { .. })));
    }
}
