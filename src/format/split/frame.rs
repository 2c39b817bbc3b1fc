//! A part's frame hash: SHA-256 of the part's bytes less the base64 lines
//! of its chunks (docs/FORMAT.md section 18). The base64 lines are bound
//! through their chunk's `ch` line, which the frame holds: its `sha256` and
//! `crc32c` cover the raw bytes, and the encoding of given bytes is
//! canonical (fixed widths, canonical padding, a parity nibble computed
//! from the line). Hashing the frame instead of every byte spares a
//! SHA-256 pass over the whole text on every write and verify of a split
//! snapshot; the chunk checks of a full verify still read every byte.

use sha2::{Digest, Sha256};

use crate::crypto::digest::Hash;
use crate::format::syntax::{body_text_len, ChLine};
use crate::limits::MAX_LINE;

/// Hashes a part's frame from its bytes, given in pieces of any size, and
/// counts its lines (the frame's LFs plus each chunk's `lines`).
pub struct FrameHash {
    sha: Sha256,
    /// Base64 bytes still to leave out, of `body` in all.
    skip: u64,
    body: u64,
    /// The lines of the base64 being left out.
    body_lines: u64,
    /// The frame line being read, while it may be a `ch` line.
    line: Vec<u8>,
    /// The current line is past `MAX_LINE` or cannot be a `ch` line.
    not_ch: bool,
    lines: u64,
}

impl Default for FrameHash {
    fn default() -> Self {
        FrameHash {
            sha: Sha256::new(),
            skip: 0,
            body: 0,
            body_lines: 0,
            line: Vec::with_capacity(256),
            not_ch: false,
            lines: 0,
        }
    }
}

impl FrameHash {
    /// Takes the next bytes of the part.
    pub fn update(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(b.len() as u64) as usize;
                self.skip -= n as u64;
                b = &b[n..];
                if self.skip == 0 {
                    self.lines += self.body_lines;
                }
                continue;
            }
            let (piece, done) = match memchr::memchr(b'\n', b) {
                Some(i) => (&b[..=i], true),
                None => (b, false),
            };
            self.sha.update(piece);
            b = &b[piece.len()..];
            if !self.not_ch {
                self.line.extend_from_slice(piece);
                let start = &self.line[..self.line.len().min(3)];
                if !b"ch ".starts_with(start) || self.line.len() > MAX_LINE {
                    self.not_ch = true;
                    self.line.clear();
                }
            }
            if done {
                self.lines += 1;
                if !self.not_ch {
                    // A `ch` line that does not parse leaves nothing out: the
                    // strict reader refuses it, and the frame hash differs.
                    if let Ok(ch) = ChLine::parse(&self.line[..self.line.len() - 1]) {
                        (self.skip, self.body, self.body_lines) =
                            (body_text_len(ch.len), body_text_len(ch.len), ch.lines);
                    }
                }
                self.line.clear();
                self.not_ch = false;
            }
        }
    }

    /// The lines taken so far (in base64 being left out, its full lines
    /// of 79 bytes so far: exact for the canonical text).
    pub fn lines_so_far(&self) -> u64 {
        let skipped = if self.skip > 0 { (self.body - self.skip) / 79 } else { 0 };
        self.lines + skipped
    }

    /// The frame's SHA-256 and the part's lines.
    pub fn finish(self) -> (Hash, u64) {
        let lines = self.lines + if self.skip > 0 { self.body_lines } else { 0 };
        (self.sha.finalize().into(), lines)
    }

    /// The frame hash, lines and size of the part `r` holds, reading only
    /// the frame: each chunk's base64 lines are skipped by seeking.
    pub fn of<R: std::io::Read + std::io::Seek>(mut r: R) -> std::io::Result<(Hash, u64, u64)> {
        let mut f = FrameHash::default();
        // A `ch` line is under 200 bytes: a small read after each skip.
        let mut buf = vec![0u8; 1024];
        let mut bytes = 0u64;
        let end = r.seek(std::io::SeekFrom::End(0))?;
        r.seek(std::io::SeekFrom::Start(0))?;
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
            f.update(&buf[..n]);
            if f.skip > 0 {
                let at = bytes.saturating_add(f.skip).min(end);
                f.skip -= at - bytes;
                if f.skip == 0 {
                    f.lines += f.body_lines;
                }
                bytes = at;
                r.seek(std::io::SeekFrom::Start(at))?;
            }
        }
        let (h, lines) = f.finish();
        Ok((h, lines, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_of(text: &[u8], piece: usize) -> (Hash, u64) {
        let mut f = FrameHash::default();
        for c in text.chunks(piece.max(1)) {
            f.update(c);
        }
        f.finish()
    }

    #[test]
    fn the_frame_of_a_file_reads_only_the_frame() {
        let ch = "ch ix=000000 off=000000000000 len=6000 sha256=0000000000000000000000000000000000000000000000000000000000000000 crc32c=00000000 b64=on width=76 lines=106";
        let mut body = String::new();
        for _ in 0..105 {
            body.push_str(&format!("{} 0\n", "A".repeat(76)));
        }
        body.push_str(&format!("{} 0\n", "A".repeat(20)));
        let text =
            format!("WTXT part ix=000001\nbegin name=a dtype=u8 shape=6000\n{ch}\n{body}endch\nendarr\nendpart\n");
        let (h, lines) = frame_of(text.as_bytes(), 4096);
        assert_eq!(FrameHash::of(std::io::Cursor::new(text.as_bytes())).unwrap(), (h, lines, text.len() as u64));
        // Cut short inside the base64: the size read says so.
        let short = &text.as_bytes()[..3000];
        assert_eq!(FrameHash::of(std::io::Cursor::new(short)).unwrap().2, 3000);
    }

    #[test]
    fn the_frame_leaves_out_base64_lines_whatever_the_pieces() {
        let ch = "ch ix=000000 off=000000000000 len=60 sha256=0000000000000000000000000000000000000000000000000000000000000000 crc32c=00000000 b64=on width=76 lines=2";
        let body = format!("{} 0\n{} 0\n", "A".repeat(76), "A".repeat(4));
        let text = format!("WTXT part ix=000001\nbegin name=a dtype=u8 shape=60\n{ch}\n{body}endch\nendarr\nendpart\n");
        let frame = format!("WTXT part ix=000001\nbegin name=a dtype=u8 shape=60\n{ch}\nendch\nendarr\nendpart\n");
        let want: Hash = Sha256::digest(frame.as_bytes()).into();
        for piece in [1, 2, 3, 7, 80, 1 << 20] {
            assert_eq!(frame_of(text.as_bytes(), piece), (want, 8), "pieces of {piece}");
        }
        // Another body of the same size: the same frame (the chunk's sha256 binds it).
        let other = text.replacen(&"A".repeat(76), &"B".repeat(76), 1);
        assert_eq!(frame_of(other.as_bytes(), 5).0, want);
        // A changed frame line changes it.
        let other = text.replace("endarr", "endarR");
        assert_ne!(frame_of(other.as_bytes(), 5).0, want);
    }
}
