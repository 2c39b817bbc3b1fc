//! Partial recovery of a damaged WTXT.
//!
//! Unlike the strict reader, the scanner resynchronizes on every `arr` and
//! `ch` line, so flipped bits, deleted, duplicated or mangled lines and
//! truncation damage only the chunks they touch. A chunk counts as intact
//! when its base64 lines are well formed, every parity nibble holds, and its
//! bytes match both the CRC32C and the SHA-256 of its `ch` line. An array is
//! whole when intact chunks tile it and their bytes match the array's SHA-256
//! (and HMAC, given the key: with a key an array whose tag is all zeros is
//! not authenticated and counts as lost unless the caller allows it).
//!
//! What survives of a damaged array never goes into the recovered file
//! (cli.md: it holds only arrays the damaged file had, whole and exact); it
//! is returned apart, for a separate file.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::buffer::Spill;
use crate::crypto::digest::derive_salt;
use crate::crypto::mac::HmacKey;
use crate::format::chunk;
use crate::format::read::SliceLines;
use crate::format::syntax::{ArrLine, Cap, ChLine, DigestForm, IdxLine, Meta, Root, B64_WIDTH};
use crate::model::{Array, ArrayData};

/// What was found for one array.
#[derive(Clone, Debug, Serialize)]
pub struct ArrayRecovery {
    /// WTXT name.
    pub name: String,
    /// Element type.
    pub dtype: String,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Line of its `arr` line.
    pub line: u64,
    /// True when the array is whole and goes into the recovered file.
    pub recovered: bool,
    /// Why not, when it is not.
    pub reason: Option<String>,
    /// Chunks whose checks pass.
    pub intact_chunks: Vec<ChunkFound>,
    /// Chunks that fail.
    pub damaged_chunks: Vec<ChunkFound>,
    /// Byte ranges no intact chunk covers.
    pub missing_ranges: Vec<(u64, u64)>,
}

/// A chunk the scanner saw.
#[derive(Clone, Debug, Serialize)]
pub struct ChunkFound {
    /// Chunk index.
    pub ix: u64,
    /// Offset of its bytes in the array.
    pub off: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Line of its `ch` line (in `file` when it has one).
    pub line: u64,
    /// The part file of a split snapshot the chunk is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// For damaged chunks: what failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The scan's findings (`recover --report` writes them as JSON).
#[derive(Clone, Debug, Serialize)]
pub struct RecoveryReport {
    /// True when the header lines verify.
    pub header_intact: bool,
    /// Every array found.
    pub arrays: Vec<ArrayRecovery>,
    /// `ch` blocks found outside any readable `arr` block.
    pub orphan_chunks: u64,
    /// Arrays whose `arr` line is unreadable or gone: seen only as a mangled
    /// `arr` line or a run of chunks outside any array. Each counts as lost.
    pub unnamed_lost: Vec<UnnamedLoss>,
    /// Lines the scanner could not place.
    pub unparsed_lines: u64,
    /// Arrays kept whole.
    pub recovered_arrays: usize,
    /// Arrays lost.
    pub lost_arrays: usize,
    /// Parts of a split snapshot that were missing or did not match the
    /// head (their chunks are still checked one by one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub part_faults: Vec<String>,
}

/// An array that was lost with its `arr` line.
#[derive(Clone, Debug, Serialize)]
pub struct UnnamedLoss {
    /// The first line where it shows.
    pub line: u64,
    /// What failed.
    pub what: String,
}

/// What recovery yields: the header values it could read, whole arrays and the report.
pub struct Recovered {
    /// The `meta` line, when it survived.
    pub meta: Option<Meta>,
    /// `merkle_prev`, when it survived.
    pub merkle_prev: Option<[u8; 32]>,
    /// Rows per chunk, when an `idx` line survived.
    pub rows_per_chunk: Option<u64>,
    /// The whole arrays, in name order.
    pub arrays: Vec<Array>,
    /// Names of the whole arrays whose HMAC held under the key, their salts
    /// derived from `gen` and their names.
    pub authenticated: Vec<String>,
    /// What survives of damaged arrays (only with `keep_partial`): `NAME`
    /// (intact chunks, zeros elsewhere) and `NAME__intact` (u8, 1 per intact chunk).
    pub partials: Vec<Array>,
    /// HMAC tags carried over for whole arrays whose salt the writer will derive again.
    pub carried_hmacs: Vec<(String, [u8; 32])>,
    /// The digest form of the file (its `cap` line; 1.1 when it did not survive).
    pub digest: DigestForm,
    /// What was kept and lost.
    pub report: RecoveryReport,
}

struct Candidate {
    arr: ArrLine,
    line: u64,
    idx: Option<IdxLine>,
    /// Intact chunks by `ix`: where their base64 lines are in the file. Their
    /// bytes are decoded again when the array is assembled, so the scan
    /// holds no chunk data.
    intact: BTreeMap<u64, (ChunkFound, ChLine, std::ops::Range<usize>)>,
    damaged: Vec<ChunkFound>,
}

/// What one pass over a damaged file finds: the header values it could
/// read and every array's intact and damaged chunks (where they lie, not
/// their bytes).
struct Scan {
    meta: Option<Meta>,
    root: Option<Root>,
    header_intact: bool,
    cands: Vec<Candidate>,
    orphans: u64,
    unparsed: u64,
    unnamed: Vec<UnnamedLoss>,
    digest: Option<DigestForm>,
}

/// Resynchronizes on every `arr` and `ch` line; checks each chunk with the
/// one chunk decoder.
fn scan(bytes: &[u8]) -> Scan {
    let mut lines = SliceLines::new(bytes);
    let mut meta = None;
    let mut root = None;
    // `None`: a form this wtxt does not know, whose digests it cannot check.
    let mut digest = Some(DigestForm::Sha256);
    for (_, _, l) in (SliceLines::new(bytes)).take(8) {
        if l.starts_with(b"meta ") {
            meta = meta.or(Meta::parse(l).ok());
        } else if l.starts_with(b"root ") {
            root = root.or(Root::parse(l).ok());
        } else if l.starts_with(b"cap ") {
            // A form this wtxt does not know recovers nothing: no array's
            // digest can be checked.
            digest = Cap::parse(l).ok().map_or(Some(DigestForm::Sha256), |c| c.digest_form().ok());
        }
    }
    let header_intact = lines.peek() == Some(&b"WTXT 1"[..]) && meta.is_some() && root.is_some();
    let mut cands: Vec<Candidate> = Vec::new();
    let mut current: Option<usize> = None;
    let (mut orphans, mut unparsed) = (0u64, 0u64);
    let mut unnamed: Vec<UnnamedLoss> = Vec::new();
    // True while chunks outside any array belong to a loss already counted.
    let mut in_loss = false;
    while let Some((no, _, l)) = lines.next() {
        if l.starts_with(b"arr ") {
            current = match ArrLine::parse(l) {
                Ok(arr) => {
                    in_loss = false;
                    cands.push(Candidate { arr, line: no, idx: None, intact: BTreeMap::new(), damaged: Vec::new() });
                    Some(cands.len() - 1)
                }
                Err(m) => {
                    unparsed += 1;
                    in_loss = true;
                    unnamed.push(UnnamedLoss { line: no, what: format!("unreadable arr line: {m}") });
                    None
                }
            };
        } else if l.starts_with(b"idx ") {
            match (current, IdxLine::parse(l)) {
                (Some(c), Ok(idx)) => cands[c].idx = Some(idx),
                _ => unparsed += 1,
            }
        } else if l.starts_with(b"ch ") {
            let ch = ChLine::parse(l);
            // Base64 lines follow until anything else.
            let start = lines.offset().min(bytes.len());
            let mut end = start;
            while lines.peek().is_some_and(looks_like_b64) {
                end = lines.next().expect("peeked").1.end;
            }
            let body = start..end;
            let (Some(c), Ok(ch)) = (current, ch) else {
                orphans += 1;
                if current.is_none() && !in_loss {
                    in_loss = true;
                    unnamed
                        .push(UnnamedLoss { line: no, what: "chunks outside any array (its arr line is gone)".into() });
                }
                continue;
            };
            let found = ChunkFound { ix: ch.ix, off: ch.off, len: ch.len, line: no, file: None, problem: None };
            match chunk::decode(&ch, body_lines(bytes, &body)) {
                Ok(_) if ch.off.checked_add(ch.len).is_some_and(|e| e <= cands[c].arr.bytes) => {
                    cands[c].intact.entry(ch.ix).or_insert((found, ch, body));
                }
                Ok(_) => {
                    cands[c].damaged.push(ChunkFound { problem: Some("chunk lies outside its array".into()), ..found })
                }
                Err(f) => cands[c].damaged.push(ChunkFound { problem: Some(f.to_string()), ..found }),
            }
        } else if l == b"endch" || l == b"endarr" {
            if l == b"endarr" {
                current = None;
            }
        } else if !l.is_empty() && no > 4 && !l.starts_with(b"sign ") && !l.starts_with(b"audit ") && l != b"endwtxt" {
            unparsed += 1;
        }
    }
    Scan { meta, root, digest, header_intact, cands, orphans, unparsed, unnamed }
}

/// What recovery with a key keeps though the key cannot vouch for it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Accept {
    /// Arrays whose hmac is all zeros.
    pub unauthenticated: bool,
    /// Arrays whose salt does not derive from the file's `gen` and their
    /// name (a writer that binds nothing, as `--allow-unbound` says): their
    /// tag holds, but could be another generation's array put in.
    pub unbound: bool,
}

/// Scans `bytes` (a damaged WTXT) and keeps everything that still checks out.
///
/// With `keep_partial`, an array that is not whole but has intact chunks is
/// returned in `partials` as `NAME` (its dtype and shape, damaged ranges
/// zero-filled) with `NAME__intact` (u8, one per chunk: 1 intact, 0 not),
/// so no intact byte is lost. Its size is bounded by 4x the file's size
/// (at least 64 MiB) before anything is allocated.
/// With a key, an array whose tag holds is kept only if its salt derives
/// from `gen` and its name (unless `accept.unbound`): a tag alone does not
/// say which generation the array came from.
pub fn recover(bytes: &[u8], key: Option<&HmacKey>, accept: Accept, keep_partial: bool) -> Recovered {
    let Scan { meta, root, digest, header_intact, cands, orphans, unparsed, unnamed } = scan(bytes);
    let gen_str = meta.as_ref().map(Meta::gen_str);
    let mut arrays = Vec::new();
    let mut authenticated = Vec::new();
    let mut carried = Vec::new();
    let mut reports = Vec::new();
    let mut rows_per_chunk = None;
    let mut seen = std::collections::BTreeSet::new();
    let partial_limit = (bytes.len() as u64).saturating_mul(4).max(64 << 20);
    let mut partials = Vec::new();
    for c in cands {
        let (mut whole, mut reason, missing) = assemble(bytes, &c, digest, key, accept.unauthenticated);
        let name = c.arr.name.clone();
        let salt_kept = gen_str.as_ref().is_some_and(|g| derive_salt(g, &name) == c.arr.salt);
        if whole.is_some() && key.is_some() && !c.arr.hmac_is_zero() && !salt_kept && !accept.unbound {
            whole = None;
            let why = "its salt does not derive from the file's gen and its name (an array of another generation?); --allow-unbound keeps it";
            reason = Some(why.into());
        }
        let duplicate = !seen.insert(name.clone());
        let recovered = whole.is_some() && !duplicate;
        if keep_partial && !recovered && !duplicate && !c.intact.is_empty() && c.arr.bytes <= partial_limit {
            partials.extend(partial(bytes, &c));
        }
        if let Some(data) = whole.filter(|_| !duplicate) {
            if let Ok(a) = Array::new(name.clone(), c.arr.dtype, c.arr.shape.clone(), data) {
                if c.idx.is_some() {
                    rows_per_chunk = rows_per_chunk.or(c.idx.map(|i| i.rows_per_chunk));
                }
                if salt_kept && !c.arr.hmac_is_zero() {
                    carried.push((name.clone(), c.arr.hmac));
                }
                // Kept by `accept.unbound` alone, an array is not one the
                // key vouches for: nothing signs or binds it.
                if key.is_some() && !c.arr.hmac_is_zero() && salt_kept {
                    authenticated.push(name.clone());
                }
                arrays.push(a);
            }
        }
        reports.push(ArrayRecovery {
            name,
            dtype: c.arr.dtype.to_string(),
            shape: c.arr.shape.clone(),
            line: c.line,
            recovered,
            reason: if duplicate { Some("a second array of the same name".into()) } else { reason },
            intact_chunks: c.intact.values().map(|(f, _, _)| f.clone()).collect(),
            damaged_chunks: c.damaged,
            missing_ranges: missing,
        });
    }
    let merkle_prev = match root {
        Some(Root::Final { merkle_prev, .. }) => Some(merkle_prev),
        _ => None,
    };
    let recovered_arrays = arrays.len();
    let lost_arrays = reports.len() - recovered_arrays + unnamed.len();
    arrays.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    partials.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    Recovered {
        meta,
        merkle_prev,
        rows_per_chunk,
        arrays,
        authenticated,
        partials,
        carried_hmacs: carried,
        digest: digest.unwrap_or_default(),
        report: RecoveryReport {
            header_intact,
            arrays: reports,
            orphan_chunks: orphans,
            unnamed_lost: unnamed,
            unparsed_lines: unparsed,
            recovered_arrays,
            lost_arrays,
            part_faults: Vec::new(),
        },
    }
}

fn looks_like_b64(l: &[u8]) -> bool {
    l.len() >= 3
        && l.len() <= B64_WIDTH + 2
        && l[l.len() - 2] == b' '
        && l[..l.len() - 2].iter().all(|&c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/' || c == b'=')
}

/// The base64 lines in `bytes[body]`.
fn body_lines<'a>(bytes: &'a [u8], body: &std::ops::Range<usize>) -> impl Iterator<Item = &'a [u8]> {
    bytes[body.clone()].split(|&b| b == b'\n').filter(|l| !l.is_empty())
}

/// An intact chunk's bytes, decoded again (they checked out in the scan).
fn chunk_bytes(bytes: &[u8], ch: &ChLine, body: &std::ops::Range<usize>) -> Vec<u8> {
    chunk::decode(ch, body_lines(bytes, body)).unwrap_or_default()
}

/// `NAME` (intact chunks, zeros elsewhere) and `NAME__intact`, written
/// through a spill so a large array costs no heap.
fn partial(bytes: &[u8], c: &Candidate) -> Vec<Array> {
    let rows = c.idx.map_or(1, |i| i.rows_per_chunk);
    let Ok(layout) = crate::format::layout::Layout::new(c.arr.dtype, &c.arr.shape, rows) else { return Vec::new() };
    let mut mask = vec![0u8; layout.chunk_count() as usize];
    let Ok(mut data) = Spill::with_expected(c.arr.bytes) else { return Vec::new() };
    let zeros = [0u8; 1 << 16];
    let fill = |data: &mut Spill, mut n: u64| -> bool {
        while n > 0 {
            let k = n.min(zeros.len() as u64);
            if data.push(&zeros[..k as usize]).is_err() {
                return false;
            }
            n -= k;
        }
        true
    };
    for ix in 0..layout.chunk_count() {
        let (off, len) = layout.chunk_range(ix);
        let intact = c.intact.get(&ix).filter(|(f, _, _)| (f.off, f.len) == (off, len));
        let ok = match intact {
            Some((_, ch, body)) => {
                mask[ix as usize] = 1;
                data.push(&chunk_bytes(bytes, ch, body)).is_ok()
            }
            None => fill(&mut data, len),
        };
        if !ok {
            return Vec::new();
        }
    }
    let Ok(data) = data.finish() else { return Vec::new() };
    let base: String = c.arr.name.chars().take(crate::limits::MAX_NAME - "__intact".len()).collect();
    let n = mask.len() as u64;
    let size = data.as_bytes().len();
    [
        Array::new(c.arr.name.clone(), c.arr.dtype, c.arr.shape.clone(), data.slice(0..size)),
        Array::new(format!("{base}__intact"), crate::model::Dtype::U8, vec![n], ArrayData::from(mask)),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The whole array's bytes (or why not), and the byte ranges no intact chunk covers.
type Assembled = (Option<ArrayData>, Option<String>, Vec<(u64, u64)>);

/// Joins intact chunks into the whole array if they tile it and it checks
/// out (SHA-256, and the HMAC under `key`).
fn assemble(
    bytes: &[u8],
    c: &Candidate,
    digest: Option<DigestForm>,
    key: Option<&HmacKey>,
    allow_unauthenticated: bool,
) -> Assembled {
    let mut by_off: Vec<&(ChunkFound, ChLine, std::ops::Range<usize>)> = c.intact.values().collect();
    by_off.sort_by_key(|(f, _, _)| f.off);
    let mut missing = Vec::new();
    let mut at = 0u64;
    for (f, _, _) in &by_off {
        if f.off > at {
            missing.push((at, f.off));
        }
        at = at.max(f.off + f.len);
    }
    if at < c.arr.bytes {
        missing.push((at, c.arr.bytes));
    }
    if c.arr.bytes == 0 && by_off.is_empty() {
        return (None, Some("its only chunk is damaged or missing".into()), missing);
    }
    if !missing.is_empty() {
        return (None, Some(format!("{} byte range(s) have no intact chunk", missing.len())), missing);
    }
    let Ok(mut data) = Spill::with_expected(c.arr.bytes) else {
        return (None, Some("no room to hold the array".into()), missing);
    };
    let Some(digest) = digest else {
        return (None, Some("the file's digest form is not one this wtxt knows".into()), missing);
    };
    let tree = digest == DigestForm::Tree;
    let mut sha = Sha256::new();
    let mut mac = key.filter(|_| !c.arr.hmac_is_zero() && !tree).map(|k| k.start(&c.arr.salt));
    let mut chunks = Vec::new();
    for (f, ch, body) in &by_off {
        if f.off != data.len() {
            return (None, Some("intact chunks overlap".into()), missing);
        }
        let raw = chunk_bytes(bytes, ch, body);
        if tree {
            chunks.push((raw.len() as u64, crate::crypto::digest::sha256(&raw)));
        } else {
            sha.update(&raw);
        }
        if let Some(m) = mac.as_mut() {
            hmac::Mac::update(m, &raw);
        }
        if data.push(&raw).is_err() {
            return (None, Some("no room to hold the array".into()), missing);
        }
    }
    let found = if tree { crate::crypto::digest::tree_array(c.arr.bytes, &chunks) } else { sha.finalize().into() };
    if found != c.arr.sha256 {
        return (None, Some("chunks are intact but the array's sha256 does not match".into()), missing);
    }
    if mac.is_some_and(|m| !crate::crypto::mac::verify_tag(m, &c.arr.hmac)) {
        return (None, Some("hmac does not match under the given key".into()), missing);
    }
    let tree_tag_fails = |k: &HmacKey| !k.verify_tree_tag(&c.arr.salt, &found, &c.arr.hmac);
    if tree && !c.arr.hmac_is_zero() && key.is_some_and(tree_tag_fails) {
        return (None, Some("hmac does not match under the given key".into()), missing);
    }
    if key.is_some() && c.arr.hmac_is_zero() && !allow_unauthenticated {
        let why =
            "not authenticated (hmac is all zeros) although an HMAC key was given; --allow-unauthenticated keeps it";
        return (None, Some(why.into()), missing);
    }
    match data.finish() {
        Ok(src) => {
            let n = src.as_bytes().len();
            (Some(src.slice(0..n)), None, missing)
        }
        Err(_) => (None, Some("no room to hold the array".into()), missing),
    }
}
