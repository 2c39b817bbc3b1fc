//! Applying a delta: the extended form as a streaming text merge, the
//! minimal form on decoded arrays.

use std::io::{Read, Write};
use std::path::Path;

use crate::error::{check_at, Error, Result};
use crate::format::layout::Layout;
use crate::format::syntax::{ChLine, END};

use super::read::{Delta, DeltaReader, ItemHead};
use super::walk::{decode_chunk, final_sha, next_array, wtxt_tail, ChunkText, Walker};

/// Applies an extended delta to `base`, writing the target's text to `out`.
/// The caller verifies the result against `target_sha256_all`.
/// The delta is read as a stream (`d`'s errors come named by `delta`).
pub fn apply_extended<B: Read, D: Read, W: Write>(
    base: B,
    d: &mut DeltaReader<D>,
    delta: &Path,
    out: &mut W,
) -> Result<()> {
    let header_text = d.target_text().ok_or_else(|| Error::usage("not an extended delta"))?.to_vec();
    let mut bw = Walker::new(base);
    let (bh, _) = bw.wtxt_header()?;
    if final_sha(&bh, "the base")? != d.head.base_sha256_all {
        return Err(check_at(
            4,
            "this delta is for another base: its base_sha256_all differs from the base's sha256_all",
        ));
    }
    let io = |e: std::io::Error| Error::write_failed(e);
    out.write_all(&header_text).map_err(io)?;
    let in_delta = |e: Error| e.in_file(delta);
    let mut item = d.next_item().map_err(in_delta)?;
    let mut base_cur = next_array(&mut bw)?;
    loop {
        // Names in order: the smaller of the next base array and the next item.
        let bname = base_cur.as_ref().map(|a| a.arr.name.clone());
        let iname = item.as_ref().map(|i| i.name().to_string());
        match (bname, iname) {
            (None, None) => break,
            (Some(b), i) if i.as_ref().is_none_or(|i| b.as_bytes() < i.as_bytes()) => {
                // Unchanged array: copy verbatim.
                let a = base_cur.take().expect("some");
                out.write_all(&a.head_text()).map_err(io)?;
                for _ in 0..a.layout()?.chunk_count() {
                    let (_, ch, head) = bw.ch_line()?;
                    out.write_all(&head).map_err(io)?;
                    out.write_all(b"\n").map_err(io)?;
                    bw.chunk_body(&ch, Some(&mut *out))?;
                }
                bw.expect("endarr")?;
                out.write_all(b"endarr\n").map_err(io)?;
                base_cur = next_array(&mut bw)?;
            }
            (b, Some(i)) => {
                let this = item.take().expect("named");
                let in_base = b.as_deref() == Some(i.as_str());
                let base_arr = if in_base { base_cur.take() } else { None };
                // The base array's chunks, read one at a time as the target needs them.
                let mut base_chunks = BaseChunks {
                    left: match &base_arr {
                        Some(a) => a.layout()?.chunk_count(),
                        None => 0,
                    },
                    held: None,
                };
                match this {
                    ItemHead::Del(n) if !in_base => {
                        return Err(Error::check(
                            Default::default(),
                            format!("delta removes array {n}, which the base lacks"),
                        ))
                    }
                    ItemHead::Del(_) => {}
                    ItemHead::Arr { line, name, head } => {
                        let head = head.as_ref().expect("extended arrays carry their head");
                        out.write_all(&head.head_text()).map_err(io)?;
                        let layout = head.layout()?;
                        // One chunk of the delta at a time, in increasing ix.
                        let mut given = d.next_chunk().map_err(in_delta)?;
                        for ix in 0..layout.chunk_count() {
                            if let Some(c) = given.take_if(|c| c.ch.ix == ix) {
                                out.write_all(&c.text).map_err(io)?;
                                given = d.next_chunk().map_err(in_delta)?;
                                continue;
                            }
                            if !base_chunks.copy(&mut bw, ix, layout.chunk_range(ix), out)? {
                                return Err(check_at(
                                    line,
                                    format!("array {name}: chunk {ix} is neither in the delta nor in the base"),
                                ));
                            }
                        }
                        out.write_all(b"endarr\n").map_err(io)?;
                    }
                }
                if base_arr.is_some() {
                    base_chunks.finish(&mut bw)?;
                }
                if in_base {
                    base_cur = next_array(&mut bw)?;
                }
                item = d.next_item().map_err(in_delta)?;
            }
            (Some(_), None) => unreachable!("handled by the first arm"),
        }
    }
    wtxt_tail(&mut bw)?;
    if let Some(a) = d.audit() {
        out.write_all(a).map_err(io)?;
        out.write_all(b"\n").map_err(io)?;
    }
    out.write_all(END.as_bytes()).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    Ok(())
}

/// A base array's chunks, read in order with one `ch` line of lookahead;
/// a chunk's base64 lines are copied straight to the output or skipped.
struct BaseChunks {
    left: u64,
    held: Option<(ChLine, Vec<u8>)>,
}

impl BaseChunks {
    /// Copies base chunk `ix` to `out` if the base has it at `range`; lower
    /// chunks are passed over. Returns false when it does not.
    fn copy<R: Read, W: Write>(&mut self, w: &mut Walker<R>, ix: u64, range: (u64, u64), out: &mut W) -> Result<bool> {
        loop {
            match &self.held {
                Some((ch, head)) if ch.ix == ix && (ch.off, ch.len) == range => {
                    out.write_all(head).map_err(Error::write_failed)?;
                    out.write_all(b"\n").map_err(Error::write_failed)?;
                    let ch = *ch;
                    self.held = None;
                    w.chunk_body(&ch, Some(out))?;
                    return Ok(true);
                }
                Some((ch, _)) if ch.ix >= ix => return Ok(false),
                Some((ch, _)) => {
                    let ch = *ch;
                    self.held = None;
                    w.chunk_body::<W>(&ch, None)?;
                }
                None if self.left == 0 => return Ok(false),
                None => {
                    let (_, ch, head) = w.ch_line()?;
                    self.held = Some((ch, head));
                    self.left -= 1;
                }
            }
        }
    }

    /// Reads past the rest of the array, through `endarr`.
    fn finish<R: Read>(&mut self, w: &mut Walker<R>) -> Result<()> {
        if let Some((ch, _)) = self.held.take() {
            w.chunk_body::<Vec<u8>>(&ch, None)?;
        }
        for _ in 0..self.left {
            w.skip_chunk()?;
        }
        w.expect("endarr")
    }
}

/// Per array name, the chunks to replace with their decoded bytes.
pub type ChunkChanges = Vec<(String, Vec<(ChunkText, Vec<u8>)>)>;

/// Applies a minimal-form delta's chunks to `arrays` (the base's, already
/// verified), array by array: each changed array is rebuilt once, through a
/// spill, so a large array costs no heap. Every chunk must fit its array's
/// layout exactly.
pub fn apply_minimal(arrays: &mut [crate::model::Array], rows_per_chunk: u64, d: &Delta) -> Result<()> {
    for (name, mut chunks) in minimal_changes(d)? {
        let a = arrays.iter_mut().find(|a| a.name == name).ok_or_else(|| {
            Error::check(Default::default(), format!("the delta changes array {name}, which the base lacks"))
        })?;
        let layout = Layout::new(a.dtype, &a.shape, rows_per_chunk).map_err(|m| Error::check(Default::default(), m))?;
        for (c, _) in &chunks {
            if c.ch.ix >= layout.chunk_count() || layout.chunk_range(c.ch.ix) != (c.ch.off, c.ch.len) {
                return Err(check_at(
                    c.line,
                    format!(
                        "chunk ix={} off={} len={} does not fit array {name} of the base",
                        c.ch.ix, c.ch.off, c.ch.len
                    ),
                ));
            }
        }
        chunks.sort_by_key(|(c, _)| c.ch.off);
        let old = a.bytes();
        let mut out = crate::buffer::Spill::with_expected(old.len() as u64)?;
        let mut at = 0usize;
        for (c, raw) in &chunks {
            let off = c.ch.off as usize;
            if off < at {
                return Err(check_at(c.line, format!("chunk ix={} of array {name} is given twice", c.ch.ix)));
            }
            out.push(&old[at..off])?;
            out.push(raw)?;
            at = off + raw.len();
        }
        out.push(&old[at..])?;
        let src = out.finish()?;
        a.data = src.slice(0..old.len());
    }
    Ok(())
}

/// The minimal form's changes, each chunk decoded and checked.
pub fn minimal_changes(d: &Delta) -> Result<ChunkChanges> {
    let mut out = Vec::new();
    for (name, chunks) in &d.arrays {
        let mut decoded = Vec::new();
        for c in chunks {
            let raw = decode_chunk(c)?;
            decoded.push((c.clone(), raw));
        }
        out.push((name.clone(), decoded));
    }
    Ok(out)
}
