//! Decoded bytes that may be large: inflated npz members, zstd chunks,
//! arrays read from a WTXT. Up to [`SPILL_AT`] they stay in memory; past it
//! they go to an unnamed temporary file that is then mapped read-only, so a
//! file that really holds gigabytes costs file-backed pages (which the
//! kernel can drop and write back), not heap. A compression bomb therefore
//! costs disk, bounded by what it declares, never memory.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;

use crate::convert::npy::Source;
use crate::error::{Error, Result};
use crate::limits::SPILL_AT;

/// A growing buffer that moves to a temporary file once it passes [`SPILL_AT`].
pub struct Spill {
    mem: Vec<u8>,
    file: Option<std::io::BufWriter<File>>,
    len: u64,
    /// Past this many bytes the buffer moves to disk.
    spill_at: u64,
}

impl Spill {
    /// A buffer for about `expected` bytes: a larger one starts on disk.
    pub fn with_expected(expected: u64) -> Result<Spill> {
        Spill::starting(expected, SPILL_AT)
    }

    /// A buffer for about `expected` bytes that stays in memory whatever its
    /// size, for a caller that wants the bytes on the heap anyway.
    pub fn in_memory(expected: u64) -> Result<Spill> {
        Spill::starting(expected, u64::MAX)
    }

    fn starting(expected: u64, spill_at: u64) -> Result<Spill> {
        let mut s = Spill { mem: Vec::new(), file: None, len: 0, spill_at };
        if expected > spill_at {
            s.move_to_disk()?;
        } else {
            s.mem.try_reserve_exact(expected as usize).map_err(|_| out_of_memory(expected))?;
        }
        Ok(s)
    }

    fn move_to_disk(&mut self) -> Result<()> {
        let f = tempfile::tempfile().map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        w.write_all(&self.mem).map_err(|e| Error::io(std::env::temp_dir(), e))?;
        self.mem = Vec::new();
        self.file = Some(w);
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends bytes.
    pub fn push(&mut self, b: &[u8]) -> Result<()> {
        if self.file.is_none() && self.len + b.len() as u64 > self.spill_at {
            self.move_to_disk()?;
        }
        match &mut self.file {
            Some(w) => w.write_all(b).map_err(|e| Error::io(std::env::temp_dir(), e))?,
            None => {
                self.mem.try_reserve(b.len()).map_err(|_| out_of_memory(self.len + b.len() as u64))?;
                self.mem.extend_from_slice(b);
            }
        }
        self.len += b.len() as u64;
        Ok(())
    }

    /// The bytes, in memory or mapped from the temporary file.
    pub fn finish(self) -> Result<Source> {
        match self.file {
            None => Ok(Source::Owned(Arc::new(self.mem))),
            Some(w) => {
                let f = w.into_inner().map_err(|e| Error::io(std::env::temp_dir(), e.into_error()))?;
                if self.len == 0 {
                    return Ok(Source::Owned(Arc::new(Vec::new())));
                }
                // SAFETY: the file is unnamed and ours alone; nothing else can
                // change or truncate it while the map lives.
                let m = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io(std::env::temp_dir(), e))?;
                Ok(Source::Mapped(Arc::new(m)))
            }
        }
    }
}

impl Write for Spill {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.push(buf).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A private, writable copy of some bytes, for repairs in place (FOLD's
/// Reed-Solomon): in memory up to [`SPILL_AT`], else a mapped temporary file.
pub enum Writable {
    Mem(Vec<u8>),
    Map(memmap2::MmapMut),
}

impl Writable {
    /// Copies `bytes`.
    pub fn copy_of(bytes: &[u8]) -> Result<Writable> {
        if bytes.len() as u64 <= SPILL_AT {
            return Ok(Writable::Mem(bytes.to_vec()));
        }
        let tmp = || std::env::temp_dir();
        let f = tempfile::tempfile().map_err(|e| Error::io(tmp(), e))?;
        f.set_len(bytes.len() as u64).map_err(|e| Error::io(tmp(), e))?;
        // SAFETY: the file is unnamed and ours alone, sized before mapping.
        let mut m = unsafe { memmap2::MmapMut::map_mut(&f) }.map_err(|e| Error::io(tmp(), e))?;
        m.copy_from_slice(bytes);
        Ok(Writable::Map(m))
    }

    /// The bytes, to change.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Writable::Mem(v) => v,
            Writable::Map(m) => m,
        }
    }

    /// Read-only from here on.
    pub fn into_source(self) -> Result<Source> {
        match self {
            Writable::Mem(v) => Ok(Source::Owned(Arc::new(v))),
            Writable::Map(m) => {
                let m = m.make_read_only().map_err(|e| Error::io(std::env::temp_dir(), e))?;
                Ok(Source::Mapped(Arc::new(m)))
            }
        }
    }
}

fn out_of_memory(n: u64) -> Error {
    Error::input(Default::default(), format!("out of memory holding {n} decoded bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_stays_in_memory_large_goes_to_a_map() {
        let mut s = Spill::with_expected(10).unwrap();
        s.push(b"hello").unwrap();
        assert!(matches!(s.finish().unwrap(), Source::Owned(v) if &v[..] == b"hello"));
        let mut s = Spill::with_expected(0).unwrap();
        let piece = vec![7u8; 1 << 20];
        for _ in 0..(SPILL_AT >> 20) + 1 {
            s.push(&piece).unwrap();
        }
        let src = s.finish().unwrap();
        assert!(matches!(src, Source::Mapped(_)));
        assert_eq!(src.bytes().len() as u64, SPILL_AT + (1 << 20));
        assert!(src.bytes().iter().all(|&b| b == 7));
    }
}
