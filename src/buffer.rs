//! The one byte buffer below the format: [`ArrayData`] (bytes the process
//! holds, or a range of a mapped file, read a window at a time) and
//! [`Spill`], a growing buffer that moves to a mapped temporary file once it
//! is large, so the heap stays bounded whatever a file declares. Every
//! container's bytes, every array's values and every decoded spill are
//! one of these.
#![deny(unsafe_code)]

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::sync::Arc;

use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::limits::SPILL_AT;

/// The bytes of an array: owned, or a window into a memory-mapped file.
#[derive(Clone)]
pub enum ArrayData {
    /// Bytes the process holds.
    Owned(Arc<Vec<u8>>),
    /// A range of a mapped file (already C order, little-endian). The map is
    /// read-only and either shared with a file or anonymous and never
    /// written, so dropping its pages never changes what it reads.
    Mapped(Arc<Mmap>, Range<usize>),
}

/// How much of a mapped array [`ArrayData::each_window`] keeps resident.
const WINDOW: usize = 16 << 20;

impl ArrayData {
    /// The whole of a mapped file.
    pub fn from_map(m: Arc<Mmap>) -> ArrayData {
        let len = m.len();
        ArrayData::Mapped(m, 0..len)
    }

    /// The bytes `r` of these: no copy when mapped or when `r` is the whole
    /// buffer.
    pub fn slice(&self, r: Range<usize>) -> ArrayData {
        match self {
            ArrayData::Mapped(m, p) => ArrayData::Mapped(m.clone(), p.start + r.start..p.start + r.end),
            ArrayData::Owned(v) if r.start == 0 && r.end == v.len() => ArrayData::Owned(v.clone()),
            ArrayData::Owned(v) => ArrayData::from(v[r].to_vec()),
        }
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            ArrayData::Owned(v) => v,
            ArrayData::Mapped(m, r) => &m[r.clone()],
        }
    }

    /// True when both are the very same bytes in memory (one buffer, or one
    /// range of one map): equal without reading them.
    pub fn is_same_buffer(&self, other: &ArrayData) -> bool {
        match (self, other) {
            (ArrayData::Owned(a), ArrayData::Owned(b)) => Arc::ptr_eq(a, b),
            (ArrayData::Mapped(a, r), ArrayData::Mapped(b, q)) => Arc::ptr_eq(a, b) && r == q,
            _ => false,
        }
    }

    /// Hands the bytes to `f` in order, in windows. A mapped array's window
    /// is dropped from this process once `f` is done with it (the data
    /// stays in the page cache), so writing or hashing a 1 GiB mapped array
    /// keeps a window resident, not the array.
    pub fn each_window(&self, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        self.each_window_of(WINDOW, f)
    }

    fn each_window_of(&self, window: usize, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let (m, r) = match self {
            ArrayData::Owned(v) => return f(v),
            ArrayData::Mapped(m, r) => (m, r),
        };
        let mut at = r.start;
        while at < r.end {
            let end = r.end.min(at + window);
            f(&m[at..end])?;
            self.release(at - r.start..end - r.start);
            at = end;
        }
        Ok(())
    }

    /// The bytes as a reader that, like [`ArrayData::each_window`], drops
    /// what it has read from the process a window at a time (a decompressor
    /// reading a large mapped chunk keeps a window resident, not the chunk).
    pub fn reader(&self) -> WindowReader<'_> {
        WindowReader { at: 0, behind: self.behind(0) }
    }

    /// For a pass that moves forward through the bytes from `from` in
    /// steps of its own: drops what it has gone past, a window at a time.
    pub fn behind(&self, from: usize) -> Behind<'_> {
        Behind { data: self, done: from }
    }

    /// Drops the bytes `range` (of this array) from the process when they
    /// are mapped: they stay in the page cache and are read again on the
    /// next use. For a reader done with part of a large array.
    pub fn release(&self, range: Range<usize>) {
        let ArrayData::Mapped(m, r) = self else { return };
        let (at, end) = (r.start + range.start, r.end.min(r.start + range.end));
        if at < end {
            #[allow(unsafe_code)]
            // SAFETY: the map is read-only and shared with a file, or
            // anonymous and never written (the variant's contract): after
            // MADV_DONTNEED the next read faults in the same bytes, so a
            // borrow of them elsewhere still sees what it saw. It is a hint;
            // a failure only leaves the pages resident.
            let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, at, end - at) };
        }
    }
}

/// See [`ArrayData::reader`].
pub struct WindowReader<'a> {
    at: usize,
    behind: Behind<'a>,
}

impl std::io::Read for WindowReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let rest = &self.behind.data.as_bytes()[self.at..];
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.at += n;
        if n == 0 {
            self.behind.end(self.at);
        } else {
            self.behind.reached(self.at);
        }
        Ok(n)
    }
}

/// See [`ArrayData::behind`]. The pages stay in the page cache.
pub struct Behind<'a> {
    data: &'a ArrayData,
    done: usize,
}

impl Behind<'_> {
    /// The pass is at `at`: nothing before it is read again.
    pub fn reached(&mut self, at: usize) {
        if at >= self.done + WINDOW {
            self.end(at);
        }
    }

    /// The pass is over at `at`: drops what is left behind, however little.
    pub fn end(&mut self, at: usize) {
        if at > self.done {
            self.data.release(self.done..at);
            self.done = at;
        }
    }
}

/// Appends to `out` what the standard base64 `b64` (no line breaks)
/// decodes to, written straight into `out`'s spare room: the decoder is the
/// only writer, so nothing is zeroed first (zeroing cost the verifier as
/// much as copying the text in). `false`, with `out` unchanged, when `b64`
/// is not valid base64.
pub fn append_base64(out: &mut Vec<u8>, b64: &[u8]) -> bool {
    let start = out.len();
    let room = base64_simd::STANDARD.estimated_decoded_length(b64.len());
    out.reserve(room);
    let spare = &mut out.spare_capacity_mut()[..room];
    let at = spare.as_ptr().cast::<u8>();
    let Ok(written) = base64_simd::STANDARD.decode(b64, base64_simd::Out::from_uninit_slice(spare)) else {
        return false;
    };
    // The decoder's contract: what it wrote starts the room it was given.
    assert!(written.as_ptr() == at && written.len() <= room, "base64 written in place");
    let len = written.len();
    #[allow(unsafe_code)]
    // SAFETY: `decode` initialized the first `len` bytes of the spare room
    // (checked above), so the first `start + len` bytes of `out` are.
    unsafe {
        out.set_len(start + len)
    };
    true
}

/// Hands the whole pages of `room` (memory this process owns and holds
/// nothing in) back to the kernel lazily (`MADV_FREE`): they stay mapped,
/// and written again cost no fault, unless memory ran short in between and
/// the kernel took them. A hint; where it is refused the pages stay.
pub fn lazily_free(room: &mut [std::mem::MaybeUninit<u8>]) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let at = room.as_mut_ptr() as usize;
        let (start, end) = (at.next_multiple_of(PAGE), (at + room.len()) / PAGE * PAGE);
        if start < end {
            #[allow(unsafe_code)]
            // SAFETY: `start..end` lies inside `room`, which the caller
            // owns and which holds no initialized bytes: whatever the
            // kernel leaves there (the old bytes or zeros) is never read
            // before it is written.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_FREE)
            };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = room;
}

impl From<Vec<u8>> for ArrayData {
    fn from(v: Vec<u8>) -> Self {
        ArrayData::Owned(Arc::new(v))
    }
}

impl fmt::Debug for ArrayData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ArrayData({} bytes)", self.as_bytes().len())
    }
}

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
    pub fn finish(self) -> Result<ArrayData> {
        match self.file {
            None => Ok(ArrayData::from(self.mem)),
            Some(w) => {
                let f = w.into_inner().map_err(|e| Error::io(std::env::temp_dir(), e.into_error()))?;
                if self.len == 0 {
                    return Ok(ArrayData::from(Vec::new()));
                }
                #[allow(unsafe_code)]
                // SAFETY: the file is unnamed and ours alone; nothing else can
                // change or truncate it while the map lives.
                let m = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io(std::env::temp_dir(), e))?;
                Ok(ArrayData::from_map(Arc::new(m)))
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
    /// Bytes on the heap.
    Mem(Vec<u8>),
    /// A mapped temporary file.
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
        #[allow(unsafe_code)]
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
    pub fn into_data(self) -> Result<ArrayData> {
        match self {
            Writable::Mem(v) => Ok(ArrayData::from(v)),
            Writable::Map(m) => {
                let m = m.make_read_only().map_err(|e| Error::io(std::env::temp_dir(), e))?;
                Ok(ArrayData::from_map(Arc::new(m)))
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
    fn a_lazily_freed_room_is_written_again_as_any_other() {
        let mut room = vec![0xa5u8; 3 << 20];
        room.clear();
        super::lazily_free(room.spare_capacity_mut());
        room.resize(3 << 20, 0);
        assert!(room.iter().all(|&b| b == 0));
        room[12345] = 7;
        assert_eq!(room.iter().map(|&b| b as u64).sum::<u64>(), 7);
    }

    #[test]
    fn a_mapped_array_reads_the_same_in_windows_and_after_them() {
        use std::io::Write;
        let want: Vec<u8> = (0..3 * 4096 + 17).map(|i| (i * 7 % 251) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&want).unwrap();
        let m = Arc::new(map_of(&f));
        let data = ArrayData::Mapped(m, 100..want.len());
        let mut got = Vec::new();
        let mut calls = 0;
        data.each_window_of(4096, &mut |b| {
            assert!(b.len() <= 4096);
            got.extend_from_slice(b);
            calls += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, 3);
        assert_eq!(got, want[100..]);
        assert_eq!(data.as_bytes(), &want[100..], "dropped pages fault the same bytes back in");
    }

    #[allow(unsafe_code)]
    fn map_of(f: &std::fs::File) -> Mmap {
        // SAFETY: the file is unnamed and this test's alone.
        unsafe { Mmap::map(f) }.unwrap()
    }

    #[test]
    fn small_stays_in_memory_large_goes_to_a_map() {
        let mut s = Spill::with_expected(10).unwrap();
        s.push(b"hello").unwrap();
        assert!(matches!(s.finish().unwrap(), ArrayData::Owned(v) if &v[..] == b"hello"));
        let mut s = Spill::with_expected(0).unwrap();
        let piece = vec![7u8; 1 << 20];
        for _ in 0..(SPILL_AT >> 20) + 1 {
            s.push(&piece).unwrap();
        }
        let src = s.finish().unwrap();
        assert!(matches!(src, ArrayData::Mapped(..)));
        assert_eq!(src.as_bytes().len() as u64, SPILL_AT + (1 << 20));
        assert!(src.as_bytes().iter().all(|&b| b == 7));
    }
}
