//! Where the cuts fall: from sizes alone, before a byte is written.

use super::head::*;
use crate::error::{Error, Result};
use crate::format::layout::Layout;

/// Before which of an array's chunks a new part starts (`[0]`: before the
/// array itself), given the bytes `used` of the open part (`None`: none is
/// open) and each chunk's text size. An array that fits in a part is never
/// cut; a larger one is cut at chunk boundaries.
pub(super) fn cuts(size: u64, used: Option<u64>, units: &[u64], cont_len: u64) -> Result<Vec<bool>> {
    let total: u64 = units.iter().sum();
    let frame = PART_FIRST_LEN + PART_END.len() as u64;
    let mut cuts = vec![false; units.len()];
    if used.is_some_and(|u| u + total + PART_END.len() as u64 <= size) {
        return Ok(cuts);
    }
    if frame + total <= size {
        cuts[0] = true;
        return Ok(cuts);
    }
    let mut used = used.unwrap_or(u64::MAX / 2);
    for (i, &u) in units.iter().enumerate() {
        if used + u + PART_END.len() as u64 > size {
            cuts[i] = true;
            used = if i == 0 { PART_FIRST_LEN } else { PART_FIRST_LEN + cont_len };
            if used + u + PART_END.len() as u64 > size {
                return Err(Error::usage(format!(
                    "a chunk of {u} bytes of text does not fit in a part of {size} bytes: \
                     give a larger --part-size or a smaller --rows-per-chunk"
                )));
            }
        }
        used += u;
    }
    Ok(cuts)
}

/// The sizes of a single-file text, known before it is written.
pub struct TextShape {
    /// Bytes of the header lines (`sign` included).
    pub header: u64,
    /// Each array, in order.
    pub arrays: Vec<ArrayText>,
    /// Bytes of the `audit` and `endwtxt` lines.
    pub tail: u64,
}

/// An array's text: its `arr` and `idx` lines (`lead` bytes), its chunks.
pub struct ArrayText {
    /// Bytes of its `arr` and `idx` lines.
    pub lead: u64,
    /// Bytes of the `arr` line, LF included (it goes to the head).
    pub arr_len: u64,
    /// Its chunk layout.
    pub layout: Layout,
    /// The array's [`cont_line`] and [`begin_line`].
    pub cont: String,
    /// Its `begin` line.
    pub begin: String,
}

/// A part of a split snapshot placed before it is written: the range of
/// the single text it holds and the lines that frame it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartSpan {
    /// Part number.
    pub ix: u64,
    /// Offsets in the single text.
    pub start: u64,
    /// End offset (exclusive).
    pub end: u64,
    /// The `cont` line when the part continues an array.
    pub cont: Option<String>,
    /// The `arr` lines in the range: they go to the head, and a `begin`
    /// line takes each one's place in the part.
    pub arrs: Vec<ArrSlot>,
}

/// Where an `arr` line is in the single text, and what stands for it in a part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrSlot {
    /// Offset of the `arr` line in the single text.
    pub at: u64,
    /// Its bytes, LF included.
    pub len: u64,
    /// The [`begin_line`] in its place, without LF.
    pub begin: String,
}

impl PartSpan {
    /// The part file's first lines.
    pub fn opening(&self) -> Vec<u8> {
        let mut o = format!("{PART_MAGIC}{:06}\n", self.ix).into_bytes();
        if let Some(c) = &self.cont {
            o.extend_from_slice(c.as_bytes());
            o.push(b'\n');
        }
        o
    }

    /// The part file's last line.
    pub fn closing() -> &'static [u8] {
        PART_END
    }
}

/// Where the parts of the text `shape` describes go when it is split by
/// `size`: the same cuts [`split`](super::cut::split) makes when it reads that text. `None`
/// when the text fits in one file.
pub fn place_parts(shape: &TextShape, size: u64) -> Result<Option<Vec<PartSpan>>> {
    let mut pos = shape.header;
    // The open part's bytes and lines so far (`None`: no part is open).
    let mut used: Option<u64> = None;
    let mut lines = 0;
    let mut spans: Vec<PartSpan> = Vec::new();
    let mut head = shape.header + shape.tail;
    let part_line = |bytes: u64, lines: u64| {
        PartLine { ix: 1, bytes: bytes + PART_END.len() as u64, lines: lines + 1, hash: PartHash::Frame([0; 32]) }
            .to_line()
            .len() as u64
            + 1
    };
    for a in &shape.arrays {
        let begin_len = a.begin.len() as u64 + 1;
        let units = array_units(a.lead - a.arr_len + begin_len, &a.layout);
        let cont_len = a.cont.len() as u64 + 1;
        head += a.arr_len;
        for (i, (&u, cut)) in units.iter().zip(cuts(size, used, &units, cont_len)?).enumerate() {
            if cut {
                if let Some(last) = spans.last_mut() {
                    last.end = pos;
                    head += part_line(used.unwrap_or(0), lines);
                }
                let ix = spans.len() as u64 + 1;
                if ix > MAX_PARTS {
                    return Err(Error::usage(format!("more than {MAX_PARTS} parts: use a larger --part-size")));
                }
                let cont = (i > 0).then(|| a.cont.clone());
                spans.push(PartSpan { ix, start: pos, end: pos, cont, arrs: Vec::new() });
                used = Some(PART_FIRST_LEN + if i > 0 { cont_len } else { 0 });
                lines = 1 + (i > 0) as u64;
            }
            let last = spans.last_mut().expect("the first chunk opens a part");
            if i == 0 {
                last.arrs.push(ArrSlot { at: pos, len: a.arr_len, begin: a.begin.clone() });
            }
            used = used.map(|x| x + u);
            lines += unit_lines(&a.layout, i as u64);
            pos += u + if i == 0 { a.arr_len - begin_len } else { 0 };
        }
    }
    if let Some(last) = spans.last_mut() {
        last.end = pos;
        head += part_line(used.unwrap_or(0), lines);
    }
    if pos + shape.tail <= size || spans.is_empty() {
        return Ok(None);
    }
    check_head_size(head, size)?;
    Ok(Some(spans))
}

/// Lines of chunk `ix`'s text as [`array_units`] counts it: `ch`, base64,
/// `endch`; the first also the `begin` (and `idx`) line, the last `endarr`.
fn unit_lines(layout: &Layout, ix: u64) -> u64 {
    let (_, mut n) = layout.chunk_text(ix, &mut String::new());
    if ix == 0 {
        n += 1 + layout.idx.is_some() as u64;
    }
    if ix + 1 == layout.chunk_count() {
        n += 1;
    }
    n
}

/// The text size of each chunk of an array, as a canonical writer lays it
/// out: the first includes the `begin` (or `arr`) and `idx` lines (`lead`
/// bytes), the last `endarr`.
pub(super) fn array_units(lead: u64, layout: &Layout) -> Vec<u64> {
    let count = layout.chunk_count();
    let mut scratch = String::with_capacity(200);
    (0..count)
        .map(|ix| {
            let (mut u, _) = layout.chunk_text(ix, &mut scratch);
            if ix == 0 {
                u += lead;
            }
            if ix + 1 == count {
                u += "endarr\n".len() as u64;
            }
            u
        })
        .collect()
}
