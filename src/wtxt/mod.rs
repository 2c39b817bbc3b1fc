//! The WTXT 1.1 format: grammar, layout, canonical writer, strict reader and
//! verifier, recovery and streaming finalization.

pub mod delta;
pub mod layout;
pub mod read;
pub mod recover;
pub mod syntax;
pub mod verify;
pub mod write;

use std::io::Read;

use crate::error::{check_at, Result};
use crate::model::{Array, ArrayData};
use crate::wtxt::read::{ArrayStart, Header};
use crate::wtxt::verify::{verify, Report, Sink, VerifyOptions};

/// Collects decoded arrays while a file is verified.
#[derive(Default)]
pub struct Collect {
    arrays: Vec<(ArrayStart, Vec<u8>)>,
    /// HMAC tags as the file carries them, by array name.
    hmacs: Vec<(String, [u8; 32])>,
    limit: u64,
    rows_per_chunk: Option<u64>,
}

impl Sink for Collect {
    fn array(&mut self, a: &ArrayStart) {
        // `bytes` was checked against the file size by the caller's limit; a
        // liar is caught by the verifier, the buffer grows only as data comes.
        let cap = a.arr.bytes.min(self.limit) as usize;
        self.rows_per_chunk = self.rows_per_chunk.or(a.layout.idx.map(|i| i.rows_per_chunk));
        if !a.arr.hmac_is_zero() {
            self.hmacs.push((a.arr.name.clone(), a.arr.hmac));
        }
        self.arrays.push((a.clone(), Vec::with_capacity(cap)));
    }

    fn data(&mut self, bytes: &[u8]) {
        if let Some((_, buf)) = self.arrays.last_mut() {
            buf.extend_from_slice(bytes);
        }
    }
}

/// A verified WTXT read into memory.
pub struct Loaded {
    pub header: Header,
    pub arrays: Vec<Array>,
    pub report: Report,
    /// `rows_per_chunk` of the first row-blocked array, if any.
    pub rows_per_chunk: Option<u64>,
    /// HMAC tags as the file carries them, by array name.
    pub hmacs: Vec<(String, [u8; 32])>,
}

/// Reads and verifies a whole WTXT, returning its arrays. Any failed check is
/// an error naming its line (exit 1); `file_len` bounds pre-allocation.
pub fn load<R: Read>(input: R, file_len: u64, opts: &VerifyOptions) -> Result<Loaded> {
    let mut sink = Collect { arrays: Vec::new(), hmacs: Vec::new(), limit: file_len, rows_per_chunk: None };
    let report = verify(input, opts, Some(&mut sink))?;
    if let Some(p) = report.first_error() {
        return Err(check_at(p.line, p.message.clone()));
    }
    let header = report.header.clone().ok_or_else(|| check_at(1, "no header"))?;
    let mut arrays = Vec::with_capacity(sink.arrays.len());
    for (a, data) in sink.arrays {
        let line = a.line;
        let arr = Array::new(a.arr.name, a.arr.dtype, a.arr.shape, ArrayData::from(data))
            .map_err(|e| check_at(line, e.message().to_string()))?;
        arrays.push(arr);
    }
    Ok(Loaded { header, arrays, report, rows_per_chunk: sink.rows_per_chunk, hmacs: sink.hmacs })
}

/// The canonical bytes of a verified file: what the writer emits for the
/// same arrays and header values (HMAC tags carried over). A file is
/// canonical when these equal its own bytes, its `sign` line set aside
/// (a signature needs the key; it covers the header, which must match).
pub fn canonical_bytes(loaded: &Loaded) -> Result<Vec<u8>> {
    use crate::wtxt::syntax::Root;
    let (merkle_prev, streaming) = match &loaded.header.root {
        Root::Final { merkle_prev, .. } => (*merkle_prev, false),
        Root::Pending => ([0; 32], true),
    };
    let opts = write::WriteOptions {
        merkle_prev,
        audit: loaded.report.audit.clone(),
        streaming,
        carried_hmacs: loaded.hmacs.clone(),
        ..write::WriteOptions::new(
            loaded.header.meta.clone(),
            loaded.rows_per_chunk.unwrap_or(layout::DEFAULT_ROWS_PER_CHUNK),
        )
    };
    let mut out = std::io::Cursor::new(Vec::new());
    write::write_snapshot(&loaded.arrays, &opts, &mut out, &crate::progress::Progress::hidden())?;
    Ok(out.into_inner())
}

/// `bytes` without its `sign` line (line 5), if it has one.
pub fn without_sign_line(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let mut at = 0;
    for _ in 0..4 {
        match bytes[at..].iter().position(|&b| b == b'\n') {
            Some(p) => at += p + 1,
            None => return bytes.into(),
        }
    }
    if bytes[at..].starts_with(b"sign ") {
        let end = bytes[at..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |p| at + p + 1);
        let mut v = bytes[..at].to_vec();
        v.extend_from_slice(&bytes[end..]);
        return v.into();
    }
    bytes.into()
}
