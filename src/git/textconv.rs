//! The text Git's `textconv` shows of a WTXT (`git log -p`, `git show`):
//! one line per fact, so a line diff of two generations says which arrays
//! and which rows of them changed.

use std::io::Read;

use crate::error::Result;
use crate::format::delta::{next_array, wtxt_tail, Walker};
use crate::format::syntax::shape_str;
use crate::git::diff::header_fields;

/// A line-per-fact text of a WTXT for Git's `textconv` (`git log -p`,
/// `git show`): header fields, then per array its type and digest, then per
/// chunk its row range and digest, so a line diff shows which rows changed.
pub fn textconv<R: Read>(input: R) -> Result<String> {
    listing(input, true)
}

/// [`textconv`] without the header fields (and the audit line), for a WTXT
/// made here from a filter's smudged file: its arrays and chunks are the
/// committed ones (clean is canonical), its header would be invented.
pub fn textconv_arrays<R: Read>(input: R) -> Result<String> {
    listing(input, false)
}

fn listing<R: Read>(input: R, header: bool) -> Result<String> {
    use std::fmt::Write as _;
    let mut w = Walker::new(input);
    let (h, _) = w.wtxt_header()?;
    let mut s = String::new();
    if header {
        for (k, v) in header_fields(&h) {
            let _ = writeln!(s, "{k} {v}");
        }
    }
    while let Some(a) = next_array(&mut w)? {
        let layout = a.layout()?;
        let row = layout.idx.map_or(a.arr.dtype.block().bytes, |i| i.row_size.max(1));
        let unit = if layout.idx.is_some() { "rows" } else { "elements" };
        let _ = writeln!(
            s,
            "array {} {}[{}] bytes={} sha256={}",
            a.arr.name,
            a.arr.dtype,
            shape_str(&a.arr.shape),
            a.arr.bytes,
            hex::encode(a.arr.sha256)
        );
        for _ in 0..layout.chunk_count() {
            let ch = w.skip_chunk()?;
            let (r0, r1) = (ch.off / row, (ch.off + ch.len).div_ceil(row));
            let _ = writeln!(
                s,
                "  {} chunk {} {unit} {r0}-{} sha256={}",
                a.arr.name,
                ch.ix,
                r1.saturating_sub(1),
                hex::encode(&ch.sha256[..8])
            );
        }
        w.expect("endarr")?;
    }
    // The tail is read (and checked) either way; its audit line is header.
    if let Some(audit) = wtxt_tail(&mut w)?.filter(|_| header) {
        let _ = writeln!(s, "{}", String::from_utf8_lossy(&audit));
    }
    Ok(s)
}
