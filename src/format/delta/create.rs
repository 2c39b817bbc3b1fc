//! Writing a delta: the chunks of the target that differ from the base's.

use std::io::{Read, Write};
use std::path::Path;

use crate::crypto::digest::Hash;
use crate::error::{Error, Result};
use crate::format::read::LineReader;
use crate::format::syntax::ChLine;

use super::walk::{final_sha, next_array, wtxt_tail, ArrayText, DeltaHead, Walker, DELTA_END};

/// A chunk's identity for change detection: position and content hashes.
fn same_chunk(a: &ChLine, b: &ChLine) -> bool {
    (a.ix, a.off, a.len, a.sha256, a.crc32c) == (b.ix, b.off, b.len, b.sha256, b.crc32c)
}

/// Writes the extended DELTA v2 that turns `base` into `target`. Both are
/// read as text lines, the chunks the delta does not carry passed over
/// (sought past where the readers can, [`LineReader::skipping`]); the
/// caller verifies `target` strictly first.
pub fn create<B: Read, T: Read, W: Write>(
    base: (LineReader<B>, &Path),
    target: (LineReader<T>, &Path),
    out: &mut W,
) -> Result<DeltaStats> {
    let (base, base_path) = base;
    let (target, target_path) = target;
    let in_base = |e: Error| e.in_input(base_path);
    let in_target = |e: Error| e.in_input(target_path);
    let mut bw = Walker::on(base);
    let base_arrays = (|| -> Result<(Hash, Vec<BaseArray>)> {
        let (bh, _) = bw.wtxt_header()?;
        let base_sha = final_sha(&bh, "the base")?;
        // The base's arrays as (arr line, idx, chunk lines): small, no base64.
        let mut arrays = Vec::new();
        while let Some(a) = next_array(&mut bw)? {
            let layout = a.layout()?;
            let chunks = (0..layout.chunk_count()).map(|_| bw.skip_chunk()).collect::<Result<Vec<_>>>()?;
            bw.expect("endarr")?;
            arrays.push((a, chunks));
        }
        wtxt_tail(&mut bw)?;
        Ok((base_sha, arrays))
    })()
    .map_err(in_base)?;
    let (base_sha, base_arrays) = base_arrays;
    create_from(base_sha, &base_arrays, Walker::on(target), out).map_err(in_target)
}

/// A base array as `create` needs it: its lines and its chunks' `ch` lines.
type BaseArray = (ArrayText, Vec<ChLine>);

fn create_from<T: Read, W: Write>(
    base_sha: Hash,
    base_arrays: &[BaseArray],
    mut tw: Walker<T>,
    out: &mut W,
) -> Result<DeltaStats> {
    let (th, theader) = tw.wtxt_header()?;
    let target_sha = final_sha(&th, "the target")?;
    let io = |e: std::io::Error| Error::write_failed(e);
    let mut stats = DeltaStats::default();
    let head = DeltaHead { base_sha256_all: base_sha, target_sha256_all: Some(target_sha) };
    out.write_all(head.write().as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    // The target's header lines after `WTXT 1`.
    out.write_all(&theader["WTXT 1\n".len()..]).map_err(io)?;

    let mut bi = 0usize;
    let emit_deletions_before = |name: Option<&str>, out: &mut W, bi: &mut usize| -> Result<()> {
        while *bi < base_arrays.len() && name.is_none_or(|n| base_arrays[*bi].0.arr.name.as_str() < n) {
            writeln!(out, "delarr name={}", base_arrays[*bi].0.arr.name).map_err(io)?;
            *bi += 1;
        }
        Ok(())
    };
    while let Some(t) = next_array(&mut tw)? {
        emit_deletions_before(Some(&t.arr.name), out, &mut bi)?;
        let layout = t.layout()?;
        let base = match base_arrays.get(bi) {
            Some((b, chunks)) if b.arr.name == t.arr.name => {
                bi += 1;
                Some((b, chunks))
            }
            _ => None,
        };
        // Same dtype, shape and blocking: compare chunk by chunk.
        let comparable = base.filter(|(b, _)| {
            b.arr.dtype == t.arr.dtype
                && b.arr.shape == t.arr.shape
                && b.idx.as_ref().map(|i| i.0) == t.idx.as_ref().map(|i| i.0)
        });
        let head_same = base.is_some_and(|(b, _)| b.head_text() == t.head_text());
        let mut pending_head = Some(t.head_text());
        for _ in 0..layout.chunk_count() {
            // Decide from the ch line; only a changed chunk's lines are copied.
            let (_, ch, head) = tw.ch_line()?;
            let unchanged = comparable.and_then(|(_, bc)| bc.get(ch.ix as usize)).is_some_and(|b| same_chunk(b, &ch));
            stats.target_chunks += 1;
            if unchanged {
                tw.chunk_body::<W>(&ch, None)?;
                continue;
            }
            if let Some(h) = pending_head.take() {
                out.write_all(&h).map_err(io)?;
            }
            out.write_all(&head).map_err(io)?;
            out.write_all(b"\n").map_err(io)?;
            tw.chunk_body(&ch, Some(&mut *out))?;
            stats.changed_chunks += 1;
            stats.changed_text_bytes += chunk_text_len(head.len(), &ch);
        }
        tw.expect("endarr")?;
        match pending_head {
            // Some chunk was written: close the array.
            None => out.write_all(b"endarr\n").map_err(io)?,
            // No chunk changed, but the arr/idx lines did (a new salt, say).
            Some(h) if !head_same => {
                out.write_all(&h).map_err(io)?;
                out.write_all(b"endarr\n").map_err(io)?;
            }
            Some(_) => {}
        }
    }
    emit_deletions_before(None, out, &mut bi)?;
    if let Some(a) = wtxt_tail(&mut tw)? {
        out.write_all(&a).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.write_all(DELTA_END.as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    Ok(stats)
}

/// Bytes of a chunk's text: its `ch` line, base64 lines and `endch`, each with LF.
fn chunk_text_len(ch_line: usize, ch: &ChLine) -> u64 {
    let last = if ch.lines == 0 { 0 } else { crate::format::layout::last_line_width(ch.len) as u64 + 3 };
    ch_line as u64 + 1 + ch.lines.saturating_sub(1) * 79 + last + "endch\n".len() as u64
}

/// What `create` put in the delta.
#[derive(Default, Clone, Copy, Debug)]
pub struct DeltaStats {
    /// Chunks of the target.
    pub target_chunks: u64,
    /// Chunks the delta carries.
    pub changed_chunks: u64,
    /// Bytes of chunk text it carries.
    pub changed_text_bytes: u64,
}
