//! What a writer that seeks back to patch its output finally leaves (zip
//! fills in each member's CRC and sizes after its data), produced in order
//! into a stream that cannot seek (a compressor), with no temporary copy:
//! the writer runs twice, the first time to learn its patches and length,
//! the second to have its bytes passed on, patched, as they come.
#![forbid(unsafe_code)]

use std::io::{Seek, SeekFrom, Write};

use crate::convert::container::WriteSeek;
use crate::error::{Error, Result};

/// A writer that may seek back over what it wrote, run once per pass.
pub type Writer<'a> = dyn Fn(&mut dyn WriteSeek) -> Result<()> + 'a;

/// Most bytes a writer may rewrite (zip: a few dozen per member).
const MAX_PATCHED: usize = 64 << 20;

/// What the first run learned: the output's length and the bytes written
/// over earlier ones, merged and in order.
pub struct Learned {
    len: u64,
    patches: Vec<(u64, Vec<u8>)>,
}

/// Runs `write` once, keeping only what it writes over bytes it wrote before.
pub fn learn(write: &Writer) -> Result<Learned> {
    let mut l = Learn { pos: 0, end: 0, patches: Vec::new(), patched: 0 };
    write(&mut l)?;
    Ok(Learned { len: l.end, patches: merge(l.patches) })
}

impl Learned {
    /// The final output's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Runs `write` again and passes its final bytes, in order, to `out`.
    pub fn emit(&self, write: &Writer, out: &mut dyn Write) -> Result<()> {
        let mut e = Emit { patches: &self.patches, next: 0, pos: 0, emitted: 0, out };
        write(&mut e)?;
        if e.emitted != self.len {
            return Err(Error::write_failed(std::io::Error::other("the writer wrote differently the second time")));
        }
        Ok(())
    }
}

/// Patches in the order of their offsets, overlapping ones joined (the
/// later write winning), so that a forward pass applies each once.
fn merge(mut patches: Vec<(u64, Vec<u8>)>) -> Vec<(u64, Vec<u8>)> {
    let order: Vec<usize> = {
        let mut o: Vec<usize> = (0..patches.len()).collect();
        o.sort_by_key(|&i| patches[i].0);
        o
    };
    let mut out: Vec<(u64, Vec<u8>, Vec<usize>)> = Vec::new();
    for i in order {
        let (at, end) = (patches[i].0, patches[i].0 + patches[i].1.len() as u64);
        match out.last_mut() {
            Some((s, b, members)) if at <= *s + b.len() as u64 => {
                b.resize(b.len().max((end - *s) as usize), 0);
                members.push(i);
            }
            _ => out.push((at, vec![0; (end - at) as usize], vec![i])),
        }
    }
    // Each joined range takes its writes in the order they were made.
    out.into_iter()
        .map(|(s, mut b, mut members)| {
            members.sort_unstable();
            for i in members {
                let at = patches[i].0;
                let bytes = std::mem::take(&mut patches[i].1);
                let from = (at - s) as usize;
                b[from..from + bytes.len()].copy_from_slice(&bytes);
            }
            (s, b)
        })
        .collect()
}

struct Learn {
    pos: u64,
    end: u64,
    patches: Vec<(u64, Vec<u8>)>,
    patched: usize,
}

impl Write for Learn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.pos < self.end {
            let over = &b[..b.len().min((self.end - self.pos) as usize)];
            self.patched += over.len();
            if self.patched > MAX_PATCHED {
                return Err(std::io::Error::other(format!("the writer rewrites more than {MAX_PATCHED} bytes")));
            }
            self.patches.push((self.pos, over.to_vec()));
        }
        self.pos += b.len() as u64;
        self.end = self.end.max(self.pos);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Seek for Learn {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = seek_to(self.pos, self.end, to)?;
        Ok(self.pos)
    }
}

struct Emit<'a> {
    patches: &'a [(u64, Vec<u8>)],
    /// The first patch not wholly emitted yet.
    next: usize,
    pos: u64,
    emitted: u64,
    out: &'a mut dyn Write,
}

impl Write for Emit<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let (start, end) = (self.pos, self.pos + b.len() as u64);
        self.pos = end;
        if end <= self.emitted {
            return Ok(b.len()); // a patch, applied when its bytes went out
        }
        if start > self.emitted {
            return Err(std::io::Error::other("the writer left a gap"));
        }
        let fresh = &b[(self.emitted - start) as usize..];
        let from = self.emitted;
        while self.patches.get(self.next).is_some_and(|(at, p)| at + p.len() as u64 <= from) {
            self.next += 1;
        }
        let touching = self.patches[self.next..].iter().take_while(|(at, _)| *at < end);
        let mut patched: Option<Vec<u8>> = None;
        for (at, p) in touching {
            let buf = patched.get_or_insert_with(|| fresh.to_vec());
            let (lo, hi) = ((*at).max(from), (at + p.len() as u64).min(end));
            buf[(lo - from) as usize..(hi - from) as usize].copy_from_slice(&p[(lo - at) as usize..(hi - at) as usize]);
        }
        self.out.write_all(patched.as_deref().unwrap_or(fresh))?;
        self.emitted = end;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl Seek for Emit<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = seek_to(self.pos, self.emitted, to)?;
        Ok(self.pos)
    }
}

/// Where a seek lands, for a writer at `pos` whose output reaches `end`.
pub(crate) fn seek_to(pos: u64, end: u64, to: SeekFrom) -> std::io::Result<u64> {
    match to {
        SeekFrom::Start(p) => Some(p),
        SeekFrom::Current(d) => pos.checked_add_signed(d),
        SeekFrom::End(d) => end.checked_add_signed(d),
    }
    .ok_or_else(|| std::io::Error::other("seek out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that writes, seeks back, patches (overlapping patches too)
    /// and goes on: the stream is exactly what a seekable buffer holds.
    #[test]
    fn the_stream_is_the_final_bytes() {
        let write = |w: &mut dyn WriteSeek| -> Result<()> {
            let e = Error::write_failed;
            w.write_all(b"hdr?????").map_err(e)?;
            w.write_all(&[7u8; 5000]).map_err(e)?;
            w.seek(SeekFrom::Start(3)).map_err(e)?;
            w.write_all(b"=1234").map_err(e)?;
            w.seek(SeekFrom::Start(5)).map_err(e)?;
            w.write_all(b"xy").map_err(e)?;
            w.seek(SeekFrom::End(0)).map_err(e)?;
            w.write_all(b"tail").map_err(e)?;
            w.seek(SeekFrom::Start(4000)).map_err(e)?;
            w.write_all(b"mid").map_err(e)?;
            w.seek(SeekFrom::End(0)).map_err(e)?;
            Ok(())
        };
        let mut want = std::io::Cursor::new(Vec::new());
        write(&mut want).unwrap();
        let learned = learn(&write).unwrap();
        assert_eq!(learned.len(), want.get_ref().len() as u64);
        let mut got = Vec::new();
        learned.emit(&write, &mut got).unwrap();
        assert_eq!(got, want.into_inner());
    }
}
