//! Reading a delta: its head, then each array's changes, strictly.

use std::io::Read;

use crate::error::{check_at, Error, Result};
use crate::format::layout::Layout;
use crate::format::syntax::{lossy, Cap, Meta, PResult, Root, SignLine};

use super::walk::{arr_head, decode_chunk, ArrayText, ChunkText, DeltaHead, Walker, DELTA_END, MAGIC};

/// A whole delta in memory, for the minimal form: the seed's patch,
/// applied to decoded arrays (the extended form streams instead).
pub struct Delta {
    /// The delta's header.
    pub head: DeltaHead,
    /// The changed arrays with their chunks, in name order.
    pub(super) arrays: Vec<(String, Vec<ChunkText>)>,
}

impl Delta {
    /// True for the extended form.
    pub fn is_extended(&self) -> bool {
        self.head.target_sha256_all.is_some()
    }
}

/// A delta read as a stream: its first line and the target's header when
/// opened, then one item and one chunk at a time, every structural rule
/// checked as it comes. Applying an extended delta this way holds one
/// chunk, whatever the delta's size (a fine-tune that changes every weight
/// makes a delta as large as the model).
pub struct DeltaReader<R> {
    w: Walker<R>,
    /// The delta's header.
    pub head: DeltaHead,
    /// The target's header lines (extended form), checked, as text.
    target_header: Option<Vec<u8>>,
    /// The last item's name (items come in byte-wise name order, once).
    prev: Option<String>,
    audit: Option<Vec<u8>>,
    done: bool,
    /// The array whose chunks are being read: its layout (extended form)
    /// and the last chunk's `ix`.
    open: Option<(Option<Layout>, Option<u64>)>,
}

/// An item's first lines; an array's chunks follow through
/// [`DeltaReader::next_chunk`].
pub enum ItemHead {
    /// An array the target no longer has.
    Del(String),
    /// An array of the target, with its chunks.
    Arr {
        /// Line of the item.
        line: u64,
        /// The array.
        name: String,
        /// Its `arr` (and `idx`) lines when the target has it.
        head: Option<Box<ArrayText>>,
    },
}

impl ItemHead {
    pub(super) fn name(&self) -> &str {
        match self {
            ItemHead::Del(n) | ItemHead::Arr { name: n, .. } => n,
        }
    }
}

impl<R: Read> DeltaReader<R> {
    /// Reads the first line and, in the extended form, the target's header.
    pub fn open(input: R) -> Result<Self> {
        let mut w = Walker::new(input);
        let (n, l) = w.next(&format!("`{MAGIC}`"))?;
        if !l.starts_with(MAGIC.as_bytes()) {
            return Err(Error::input(
                crate::error::Position::Line(n),
                format!("expected `{MAGIC} ...`: not a WTXT delta"),
            ));
        }
        let head = DeltaHead::parse(&l).map_err(|m| check_at(n, m))?;
        let target_header = match head.target_sha256_all {
            Some(_) => Some(target_header_lines(&mut w)?),
            None => None,
        };
        Ok(DeltaReader { w, head, target_header, prev: None, audit: None, done: false, open: None })
    }

    /// True for the extended form.
    pub fn is_extended(&self) -> bool {
        self.head.target_sha256_all.is_some()
    }

    /// The next item, `None` after `enddelta` (and the end of the file).
    /// The chunks of an array not read through are passed over.
    pub fn next_item(&mut self) -> Result<Option<ItemHead>> {
        while self.next_chunk()?.is_some() {}
        if self.done {
            return Ok(None);
        }
        let extended = self.is_extended();
        let (n, l) = self.w.next("an `arr` or `delarr` line, or `enddelta`")?;
        if l == DELTA_END.as_bytes() || (extended && l.starts_with(b"audit ")) {
            if l != DELTA_END.as_bytes() {
                crate::format::syntax::Audit::parse(&l).map_err(|m| check_at(n, m))?;
                self.audit = Some(l);
                let (n2, l2) = self.w.next("`enddelta`")?;
                if l2 != DELTA_END.as_bytes() {
                    return Err(check_at(n2, "expected `enddelta` after the audit line"));
                }
            }
            self.w.expect_eof()?;
            self.done = true;
            return Ok(None);
        }
        let item = if let Some(rest) = l.strip_prefix(b"delarr name=") {
            if !extended {
                return Err(check_at(n, "`delarr` needs the extended form (target_sha256_all)"));
            }
            ItemHead::Del(name_of(rest, n)?)
        } else if extended && l.starts_with(b"arr ") {
            let a = arr_head(&mut self.w, n, l)?;
            self.open = Some((Some(a.layout()?), None));
            ItemHead::Arr { line: n, name: a.arr.name.clone(), head: Some(Box::new(a)) }
        } else if let (false, Some(rest)) = (extended, l.strip_prefix(b"arr name=")) {
            self.open = Some((None, None));
            ItemHead::Arr { line: n, name: name_of(rest, n)?, head: None }
        } else {
            return Err(check_at(
                n,
                format!("expected an `arr` or `delarr` line, or `{DELTA_END}`, found `{}`", lossy(&l, 40)),
            ));
        };
        let name = item.name();
        if let Some(p) = self.prev.as_ref().filter(|p| p.as_bytes() >= name.as_bytes()) {
            return Err(check_at(n, format!("`{name}` must come after `{p}` in byte-wise name order, once")));
        }
        self.prev = Some(name.to_string());
        Ok(Some(item))
    }

    /// The open array's next chunk (increasing `ix`, fitting its layout in
    /// the extended form), `None` at its `endarr`.
    pub fn next_chunk(&mut self) -> Result<Option<ChunkText>> {
        let Some((layout, last)) = &mut self.open else { return Ok(None) };
        if !self.w.peek("a `ch` line or `endarr`")?.starts_with(b"ch ") {
            self.w.expect("endarr")?;
            self.open = None;
            return Ok(None);
        }
        let c = self.w.chunk()?;
        if let Some(layout) = layout {
            if c.ch.ix >= layout.chunk_count() || layout.chunk_range(c.ch.ix) != (c.ch.off, c.ch.len) {
                return Err(check_at(
                    c.line,
                    format!("chunk ix={} off={} len={} does not fit the array's layout", c.ch.ix, c.ch.off, c.ch.len),
                ));
            }
        }
        if last.is_some_and(|l| c.ch.ix <= l) {
            return Err(check_at(c.line, "chunks must come in increasing ix, once each"));
        }
        *last = Some(c.ch.ix);
        Ok(Some(c))
    }

    /// The target's `audit` line, once the items are read.
    pub fn audit(&self) -> Option<&[u8]> {
        self.audit.as_deref()
    }

    /// The target's header lines as text (extended form).
    pub fn target_text(&self) -> Option<&[u8]> {
        self.target_header.as_deref()
    }

    /// Reads the rest: every changed array with its chunks, in memory.
    pub fn collect(mut self) -> Result<Delta> {
        let mut arrays = Vec::new();
        while let Some(item) = self.next_item()? {
            if let ItemHead::Arr { name, .. } = item {
                let mut chunks = Vec::new();
                while let Some(c) = self.next_chunk()? {
                    chunks.push(c);
                }
                arrays.push((name, chunks));
            }
        }
        Ok(Delta { head: self.head, arrays })
    }
}

/// The target's header lines of an extended delta, exactly as the target
/// WTXT has them, each checked by its parser.
fn target_header_lines<R: Read>(w: &mut Walker<R>) -> Result<Vec<u8>> {
    let mut text = b"WTXT 1\n".to_vec();
    let mut take = |w: &mut Walker<R>, what: &str, check: &dyn Fn(&[u8]) -> PResult<()>| {
        let (n, l) = w.next(what)?;
        check(&l).map_err(|m| check_at(n, m))?;
        text.extend_from_slice(&l);
        text.push(b'\n');
        Ok::<_, Error>(())
    };
    take(w, "the target `meta` line", &|l| Meta::parse(l).map(drop))?;
    take(w, "the target `cap` line", &|l| Cap::parse(l).map(drop))?;
    take(w, "the target `root` line", &|l| match Root::parse(l)? {
        Root::Pending => Err("a delta's target must have a final root".into()),
        _ => Ok(()),
    })?;
    if w.peek("a `sign` line or an array")?.starts_with(b"sign ") {
        take(w, "a `sign` line", &|l| SignLine::parse(l).map(drop))?;
    }
    Ok(text)
}

/// Reads and checks a whole delta, chunk texts in memory: for the minimal
/// form, applied to decoded arrays. Applying the extended form and checking
/// a delta stream instead ([`DeltaReader`], [`check`]).
pub fn parse<R: Read>(input: R) -> Result<Delta> {
    DeltaReader::open(input)?.collect()
}

/// Checks a delta's structure and every chunk it carries (parity, base64,
/// CRC32C, SHA-256), one chunk in memory at a time.
pub fn check<R: Read>(input: R) -> Result<()> {
    let mut d = DeltaReader::open(input)?;
    while d.next_item()?.is_some() {
        while let Some(c) = d.next_chunk()? {
            decode_chunk(&c)?;
        }
    }
    Ok(())
}

fn name_of(v: &[u8], line: u64) -> Result<String> {
    let s = String::from_utf8(v.to_vec()).unwrap_or_default();
    if !crate::model::is_valid_name(&s) {
        return Err(check_at(line, format!("expected an array name [A-Za-z0-9_]+, found `{}`", lossy(v, 40))));
    }
    Ok(s)
}
