//! The canonical writer: the only code that emits WTXT.
//!
//! Every line has a fixed width once the meta values, names and shapes are
//! known (hashes are fixed-width hex), so the writer emits the body at once
//! with placeholder `arr` and `ch` lines while it hashes, then patches
//! those lines and writes the header (root, signature) last. The work
//! (encoding chunks, each array's digests, `sha256_all`, writing in order)
//! is shared by `--threads` threads, the calling one among them
//! (`work.rs`); the bytes are the same whatever their number.
//!
//! Inputs are only read (often a memory map), never copied whole; each
//! reader drops the mapped pages it is done with, so a snapshot of a model
//! of many GB keeps windows of it resident, not the model (a page another
//! reader still needs is faulted in again from the page cache).

use std::io::{Seek, SeekFrom, Write};

use sha2::{Digest, Sha256};

mod arrays;
mod work;

pub use arrays::WriteOptions;
use arrays::{ch_line, final_arr, placeholder_arr, ChunkSum, Plan, ENCODE_PIECE};

use crate::crypto::digest::{derive_salt, merkle_this, Hash, Sha256State};
use crate::crypto::sign::SecretKey;
use crate::error::{Error, Result};
use crate::format::layout::{encode_lines, Layout};
use crate::format::read::Header;
use crate::format::syntax::{lines_for, ArrLine, Audit, Cap, DigestForm, Meta, Root, SignLine, Wsum, END, MAGIC};
use crate::model::Array;
use crate::progress::Progress;

/// What the writer computed.
#[derive(Clone, Debug)]
pub struct Written {
    /// The root hash over all arrays.
    pub sha256_all: Hash,
    /// This generation's Merkle link.
    pub merkle_this: Hash,
    /// The XOR check word.
    pub fastxor: u64,
    /// The WSUM for a streaming write.
    pub wsum: Option<Wsum>,
    /// Bytes written.
    pub len: u64,
    /// Every array's chunk digests, in order (empty where the writer did
    /// not keep them): the next generation's writer counts changed chunks
    /// with them ([`changed_chunks`]) without reading either file.
    pub chunk_sha256: Vec<(String, Vec<Hash>)>,
}

/// How many of `after`'s chunks differ from the chunk at the same place
/// of the same array in `before`, and how many chunks `after` has.
pub fn changed_chunks(before: &[(String, Vec<Hash>)], after: &[(String, Vec<Hash>)]) -> (usize, usize) {
    let before: std::collections::HashMap<&str, &Vec<Hash>> = before.iter().map(|(n, c)| (n.as_str(), c)).collect();
    let (mut changed, mut total) = (0, 0);
    for (name, chunks) in after {
        let old = before.get(name.as_str());
        total += chunks.len();
        changed += chunks.iter().enumerate().filter(|(i, h)| old.and_then(|o| o.get(*i)) != Some(h)).count();
    }
    (changed, total)
}

/// Writes `arrays` (sorted by name, unique; see `model::sort_arrays`) as a
/// canonical WTXT to `out`, which must start empty at position 0.
pub fn write_snapshot<W: Write + Seek + Send>(
    arrays: &[Array],
    opts: &WriteOptions,
    out: &mut W,
    progress: &Progress,
) -> Result<Written> {
    WritePlan::new(arrays, opts)?.write(out, progress)
}

/// A snapshot's layout, planned once before a byte is written: each
/// array's chunks and salt, and the header's size. A writer of split
/// snapshots takes the text's sizes from it ([`WritePlan::shape`]) to place
/// the parts, then writes with the same plan.
pub struct WritePlan<'a> {
    arrays: &'a [Array],
    opts: &'a WriteOptions<'a>,
    plans: Vec<Plan<'a>>,
    total_chunks: usize,
    header_len: usize,
    /// The `audit` line as planned: with a key, the keyed tag's
    /// placeholder last ([`crate::format::bind`]).
    audit: Option<Audit>,
}

impl<'a> WritePlan<'a> {
    /// Plans `arrays` (sorted by name, unique) under `opts`.
    pub fn new(arrays: &'a [Array], opts: &'a WriteOptions<'a>) -> Result<WritePlan<'a>> {
        if let Some(w) = arrays.windows(2).find(|w| w[0].name.as_bytes() >= w[1].name.as_bytes()) {
            return Err(Error::input(
                Default::default(),
                format!("arrays not in name order or duplicated: {} / {}", w[0].name, w[1].name),
            ));
        }
        let (plans, total_chunks) = plan_arrays(arrays, opts)?;
        let audit = crate::format::bind::planned(opts.audit.as_ref(), opts.tag_key().is_some());
        Ok(WritePlan { arrays, opts, plans, total_chunks, header_len: header_len(arrays, opts), audit })
    }

    /// The sizes of the text [`WritePlan::write`] will write, known
    /// before a byte is written (every line has a fixed width): what a writer
    /// of split snapshots needs to put each part's bytes straight in its file.
    pub fn shape(&self) -> crate::format::split::TextShape {
        let arrays_text = self
            .plans
            .iter()
            .map(|p| {
                let idx = p.layout.idx.map_or(0, |i| {
                    let mut l = String::new();
                    i.write(&mut l);
                    l.len() as u64 + 1
                });
                let arr_len = placeholder_arr(p).to_line().len() as u64 + 1;
                let (name, dtype, shape) = (&p.array.name, p.array.dtype, &p.array.shape);
                crate::format::split::ArrayText {
                    lead: arr_len + idx,
                    arr_len,
                    layout: p.layout,
                    cont: crate::format::split::cont_line(name, dtype, shape),
                    begin: crate::format::split::begin_line(name, dtype, shape),
                }
            })
            .collect();
        crate::format::split::TextShape {
            header: self.header_len as u64,
            arrays: arrays_text,
            tail: self.tail_text(None).len() as u64,
        }
    }

    /// Writes the planned text to `out`, which must start empty at position 0.
    pub fn write<W: Write + Seek + Send>(&self, out: &mut W, progress: &Progress) -> Result<Written> {
        let (arrays, opts, plans, total_chunks, header_len) =
            (self.arrays, self.opts, &self.plans, self.total_chunks, self.header_len);
        let raw_total: u64 = arrays.iter().map(|a| a.bytes().len() as u64).sum();
        // Encoded, and passed by the root (the tree form has none).
        progress.set_total(raw_total * if opts.digest == DigestForm::Tree { 1 } else { 2 });

        out.seek(SeekFrom::Start(header_len as u64)).map_err(io_err)?;
        let work = work::Work::new(plans, opts, self.tail_text(None), total_chunks, progress);
        let body_len = work.run(out)?;
        let fastxor = work.fastxor();
        let sums = work.sums;
        let chunk_sha: Vec<Hash> =
            sums.chunk_sha.into_iter().map(|c| c.into_inner().expect("every chunk hashed")).collect();
        let (arr_lines, tree_all) = if opts.digest == DigestForm::Tree {
            let lines: Vec<ArrLine> = (0..plans.len()).map(|i| self.tree_arr_line(i, &chunk_sha)).collect();
            let texts: Vec<String> = lines.iter().map(ArrLine::to_line).collect();
            let all = crate::crypto::digest::tree_all(texts.iter().map(|t| t.as_bytes()));
            (lines, Some(all))
        } else {
            let lines = sums.arr_lines.into_iter().map(|l| l.into_inner().expect("every array hashed")).collect();
            (lines, None)
        };
        // Each chunk's CRC32C from its pieces', in order.
        let mut crcs: Vec<Option<(u32, u64)>> = vec![None; total_chunks];
        for (piece, crc) in work::pieces(plans).iter().zip(sums.piece_crc) {
            let crc = crc.into_inner().expect("every piece encoded");
            let c = &mut crcs[piece.chunk];
            *c = Some(match *c {
                None => (crc, piece.len),
                Some((acc, len)) => (crc32c::crc32c_combine(acc, crc, piece.len as usize), len + piece.len),
            });
        }
        let chunk_sums: Vec<ChunkSum> = (chunk_sha.into_iter().zip(crcs))
            .map(|(sha256, crc)| ChunkSum { sha256, crc32c: crc.expect("every chunk encoded").0 })
            .collect();
        // No arrays: `sha256_all` hashed nothing.
        let sha256_all =
            tree_all.or_else(|| sums.sha256_all.into_inner()).unwrap_or_else(|| Sha256State::default().finalize());
        let places = self.places();
        patch_lines(out, plans, &arr_lines, &chunk_sums, &places)?;
        let (header, merkle) = self.header(sha256_all, fastxor);
        out.seek(SeekFrom::Start(0)).map_err(io_err)?;
        out.write_all(header.as_bytes()).map_err(io_err)?;
        if opts.tag_key().is_some() {
            let tail = self.tail_text(Some((&sha256_all, &merkle)));
            out.seek(SeekFrom::Start(places.len - tail.len() as u64)).map_err(io_err)?;
            out.write_all(&tail).map_err(io_err)?;
        }
        out.flush().map_err(io_err)?;

        let wsum = opts.streaming.then(|| {
            let mut w = Wsum { sha256_all, merkle_prev: opts.merkle_prev, merkle_this: merkle, sign: None };
            if let Some(key) = opts.sign_key {
                w.sign =
                    Some(SignLine { signature: key.sign(w.signed_part().as_bytes()), keyid: key.public().keyid() });
            }
            w
        });
        let chunk_sha256 = plans
            .iter()
            .map(|p| {
                let n = p.layout.chunk_count() as usize;
                (p.array.name.clone(), chunk_sums[p.first_chunk..p.first_chunk + n].iter().map(|c| c.sha256).collect())
            })
            .collect();
        Ok(Written { sha256_all, merkle_this: merkle, fastxor, wsum, len: header_len as u64 + body_len, chunk_sha256 })
    }
}

/// Where each piece of a planned text lies: what a writer needs that
/// produces the text in pieces, on several processes at once
/// ([`crate::store::dist`]). Offsets are into the single file's text.
pub struct Places {
    /// Each array's `arr` line.
    pub arr: Vec<u64>,
    /// Each chunk's `ch` line, all arrays' chunks in order (an array's
    /// first is [`WritePlan::first_chunk`]).
    pub ch: Vec<u64>,
    /// The whole text's length.
    pub len: u64,
}

impl WritePlan<'_> {
    /// The planned arrays, in the file's order.
    pub fn arrays(&self) -> &[Array] {
        self.arrays
    }

    /// Array `i`'s layout.
    pub fn layout(&self, i: usize) -> Layout {
        self.plans[i].layout
    }

    /// The index of array `i`'s first chunk among all chunks.
    pub fn first_chunk(&self, i: usize) -> usize {
        self.plans[i].first_chunk
    }

    /// Where every line goes: the offsets [`WritePlan::write`] writes them at.
    pub fn places(&self) -> Places {
        let mut places = Places { arr: Vec::with_capacity(self.plans.len()), ch: Vec::new(), len: 0 };
        let mut pos = self.header_len as u64;
        let mut line = String::new();
        for p in &self.plans {
            places.arr.push(pos);
            pos += placeholder_arr(p).to_line().len() as u64 + 1;
            if let Some(idx) = p.layout.idx {
                line.clear();
                idx.write(&mut line);
                pos += line.len() as u64 + 1;
            }
            for ix in 0..p.layout.chunk_count() {
                places.ch.push(pos);
                pos += unit_len(p, ix);
            }
            pos += b"endarr\n".len() as u64;
        }
        places.len = pos + self.tail_text(None).len() as u64;
        places
    }

    /// The text around the chunks, each piece with its offset and where it
    /// goes: the header and `arr` lines as placeholders (same widths),
    /// `idx` and `endarr` lines, and the tail (`audit`, `endwtxt`).
    pub fn fixed_text(&self, places: &Places) -> Vec<Fixed> {
        let (cap, signs_file) = cap_and_sign(self.arrays, self.opts);
        let header = header_text(
            &self.opts.meta,
            &cap,
            &placeholder_root(self.opts.streaming),
            signs_file.then(placeholder_sign),
        );
        let mut out = vec![Fixed { at: 0, bytes: header.into_bytes(), kind: FixedKind::Head }];
        let mut line = String::new();
        for (i, p) in self.plans.iter().enumerate() {
            let mut arr = placeholder_arr(p).to_line().into_bytes();
            arr.push(b'\n');
            let after = places.arr[i] + arr.len() as u64;
            out.push(Fixed { at: places.arr[i], bytes: arr, kind: FixedKind::Arr });
            if let Some(idx) = p.layout.idx {
                line.clear();
                idx.write(&mut line);
                line.push('\n');
                out.push(Fixed { at: after, bytes: line.clone().into_bytes(), kind: FixedKind::Body });
            }
            let last = p.first_chunk + p.layout.chunk_count() as usize - 1;
            let at = places.ch[last] + unit_len(p, p.layout.chunk_count() - 1);
            out.push(Fixed { at, bytes: b"endarr\n".to_vec(), kind: FixedKind::Body });
        }
        let tail = self.tail_text(None);
        out.push(Fixed { at: places.len - tail.len() as u64, bytes: tail, kind: FixedKind::Tail });
        out
    }

    /// The text after the last array, `audit` (if any) and `endwtxt`:
    /// with the keyed tag over the root's `sha256_all` and `merkle_this`
    /// when they are given and the options carry a key, else with its
    /// placeholder (same width).
    pub fn tail_text(&self, root: Option<(&Hash, &Hash)>) -> Vec<u8> {
        let mut line = String::new();
        if let Some(a) = &self.audit {
            match (root, self.opts.tag_key()) {
                (Some((sha256_all, merkle_this)), Some(key)) => {
                    let (cap, _) = cap_and_sign(self.arrays, self.opts);
                    let bound = crate::format::bind::Bound {
                        meta: &self.opts.meta,
                        cap: &cap,
                        sha256_all,
                        merkle_prev: &self.opts.merkle_prev,
                        merkle_this,
                    };
                    bound.tagged(a, key).write(&mut line);
                }
                _ => a.write(&mut line),
            }
            line.push('\n');
        }
        line.push_str(END);
        line.push('\n');
        line.into_bytes()
    }

    /// Writes chunk `ix` of array `i`, whose bytes are `raw` (its `ch`
    /// line, base64 lines and `endch`), through `put(offset in the chunk's
    /// text, bytes)`, a piece at a time; `buf` and `scratch` are reused
    /// between calls. Returns the chunk's SHA-256.
    pub fn write_chunk(
        &self,
        i: usize,
        ix: u64,
        raw: &[u8],
        buf: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        put: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<Hash> {
        let p = &self.plans[i];
        if raw.len() as u64 != p.layout.chunk_range(ix).1 {
            return Err(Error::usage(format!("array {}: chunk {ix} is not {} bytes", p.array.name, raw.len())));
        }
        let sum = ChunkSum { sha256: Sha256::digest(raw).into(), crc32c: crc32c::crc32c(raw) };
        let mut line = String::with_capacity(200);
        ch_line(p, ix, Some(&sum)).write(&mut line);
        line.push('\n');
        buf.clear();
        buf.extend_from_slice(line.as_bytes());
        let mut at = 0u64;
        for piece in raw.chunks(ENCODE_PIECE) {
            encode_lines(piece, buf, scratch);
            put(at, buf)?;
            at += buf.len() as u64;
            buf.clear();
        }
        buf.extend_from_slice(b"endch\n");
        put(at, buf)?;
        Ok(sum.sha256)
    }

    /// Array `i`'s `arr` line, given the SHA-256 and HMAC of its bytes
    /// (zeros, or a carried tag, without a key).
    pub fn arr_line(&self, i: usize, sha256: Hash, hmac: Option<Hash>) -> ArrLine {
        final_arr(&self.plans[i], self.opts, sha256, hmac)
    }

    /// Array `i`'s `arr` line in the tree form, from every chunk's SHA-256
    /// (all arrays' chunks, in order): its digest, and its tag with a key.
    pub fn tree_arr_line(&self, i: usize, chunk_sha: &[Hash]) -> ArrLine {
        let p = &self.plans[i];
        let chunks: Vec<(u64, Hash)> = (0..p.layout.chunk_count())
            .map(|ix| (p.layout.chunk_range(ix).1, chunk_sha[p.first_chunk + ix as usize]))
            .collect();
        let digest = crate::crypto::digest::tree_array(p.layout.bytes, &chunks);
        let tag = self.opts.hmac_key.map(|k| k.tree_tag(&p.salt, &digest));
        final_arr(p, self.opts, digest, tag)
    }

    /// Array `i`'s salt.
    pub fn salt(&self, i: usize) -> [u8; 8] {
        self.plans[i].salt
    }

    /// The header lines of the text whose arrays give `sha256_all` and
    /// `fastxor` (signed when the options carry a key), and `merkle_this`.
    pub fn header(&self, sha256_all: Hash, fastxor: u64) -> (String, Hash) {
        let opts = self.opts;
        let (cap, signs_file) = cap_and_sign(self.arrays, opts);
        let merkle =
            merkle_this(&opts.merkle_prev, &sha256_all, opts.meta.ts.as_str(), &opts.meta.gen_str(), &opts.meta.build);
        let root = if opts.streaming {
            Root::Pending
        } else {
            Root::Final { sha256_all, merkle_prev: opts.merkle_prev, merkle_this: merkle, fastxor }
        };
        let mut header = header_text(&opts.meta, &cap, &root, None);
        if signs_file {
            let key = opts.sign_key.expect("checked");
            let line = SignLine { signature: key.sign(header.as_bytes()), keyid: key.public().keyid() };
            line.write(&mut header);
            header.push('\n');
        }
        debug_assert_eq!(header.len(), self.header_len);
        (header, merkle)
    }
}

/// A piece of [`WritePlan::fixed_text`].
pub struct Fixed {
    /// Its offset in the single file's text.
    pub at: u64,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Where a split snapshot keeps it.
    pub kind: FixedKind,
}

/// Where a piece of fixed text goes in a split snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixedKind {
    /// The header lines: the head.
    Head,
    /// An `arr` line: the head (a `begin` line stands in the part).
    Arr,
    /// An `idx` or `endarr` line: the part.
    Body,
    /// `audit` and `endwtxt`: the head.
    Tail,
}

/// Bytes of chunk `ix`'s text: its `ch` line, base64 lines and `endch`.
fn unit_len(p: &Plan, ix: u64) -> u64 {
    let (_, len) = p.layout.chunk_range(ix);
    let mut line = String::with_capacity(200);
    ch_line(p, ix, None).write(&mut line);
    let b64 =
        if len == 0 { 0 } else { (lines_for(len) - 1) * 79 + crate::format::layout::last_line_width(len) as u64 + 3 };
    line.len() as u64 + 1 + b64 + b"endch\n".len() as u64
}

fn plan_arrays<'a>(arrays: &'a [Array], opts: &WriteOptions) -> Result<(Vec<Plan<'a>>, usize)> {
    let gen = opts.meta.gen_str();
    let mut plans = Vec::with_capacity(arrays.len());
    let mut total_chunks = 0usize;
    for a in arrays {
        let layout = Layout::new(a.dtype, &a.shape, opts.rows_per_chunk)
            .map_err(|m| Error::input(Default::default(), format!("array {}: {m}", a.name)))?;
        plans.push(Plan { array: a, layout, salt: derive_salt(&gen, &a.name), first_chunk: total_chunks });
        total_chunks += layout.chunk_count() as usize;
    }
    Ok((plans, total_chunks))
}

/// The `cap` line, and whether the file carries a `sign` line (a
/// streaming write signs its WSUM instead).
fn cap_and_sign(arrays: &[Array], opts: &WriteOptions) -> (Cap, bool) {
    let cap = Cap::for_profile(arrays.iter().any(|a| a.dtype.is_extension()), opts.digest);
    (cap, opts.sign_key.is_some() && !opts.streaming)
}

/// Bytes of the header lines, placeholders in place of the root and sign.
fn header_len(arrays: &[Array], opts: &WriteOptions) -> usize {
    let (cap, signs_file) = cap_and_sign(arrays, opts);
    header_text(&opts.meta, &cap, &placeholder_root(opts.streaming), signs_file.then(placeholder_sign)).len()
}

/// What finalizing a WTXT-S gives: its WSUM and the header of the plain
/// WTXT it becomes (`root` filled in, and `sign` when a key is given).
pub struct Finalized {
    /// The WSUM.
    pub wsum: Wsum,
    /// The header lines it was computed over.
    pub header: String,
}

/// Finalizes a WTXT-S whose arrays give `sha256_all` and `fastxor`
/// (verified by the caller), chained to `merkle_prev`.
pub fn finalize(h: &Header, sha256_all: Hash, fastxor: u64, merkle_prev: Hash, key: Option<&SecretKey>) -> Finalized {
    let mt = merkle_this(&merkle_prev, &sha256_all, h.meta.ts.as_str(), &h.meta.gen_str(), &h.meta.build);
    let mut wsum = Wsum { sha256_all, merkle_prev, merkle_this: mt, sign: None };
    let sign = |k: &SecretKey, text: &[u8]| SignLine { signature: k.sign(text), keyid: k.public().keyid() };
    if let Some(k) = key {
        wsum.sign = Some(sign(k, wsum.signed_part().as_bytes()));
    }
    let root = Root::Final { sha256_all, merkle_prev, merkle_this: mt, fastxor };
    let mut header = header_text(&h.meta, &h.cap, &root, None);
    if let Some(k) = key {
        sign(k, header.as_bytes()).write(&mut header);
        header.push('\n');
    }
    Finalized { wsum, header }
}

fn io_err(e: std::io::Error) -> Error {
    Error::write_failed(e)
}

/// The four header lines (and a `sign` line if given), each with its LF.
pub fn header_text(meta: &Meta, cap: &Cap, root: &Root, sign: Option<SignLine>) -> String {
    let mut h = String::with_capacity(512);
    h.push_str(MAGIC);
    h.push('\n');
    meta.write(&mut h);
    h.push('\n');
    cap.write(&mut h);
    h.push('\n');
    root.write(&mut h);
    h.push('\n');
    if let Some(s) = sign {
        s.write(&mut h);
        h.push('\n');
    }
    h
}

fn placeholder_root(streaming: bool) -> Root {
    if streaming {
        Root::Pending
    } else {
        Root::Final { sha256_all: [0; 32], merkle_prev: [0; 32], merkle_this: [0; 32], fastxor: 0 }
    }
}

fn placeholder_sign() -> SignLine {
    SignLine { signature: [0; 64], keyid: [0; 8] }
}

/// Overwrites the placeholder lines with the final ones (same widths), at
/// the places the plan gives them.
fn patch_lines<W: Write + Seek>(
    out: &mut W,
    plans: &[Plan],
    arr_lines: &[ArrLine],
    sums: &[ChunkSum],
    places: &Places,
) -> Result<()> {
    let mut line = String::with_capacity(256);
    for (i, p) in plans.iter().enumerate() {
        out.seek(SeekFrom::Start(places.arr[i])).map_err(io_err)?;
        out.write_all(arr_lines[i].to_line().as_bytes()).map_err(io_err)?;
        for ix in 0..p.layout.chunk_count() {
            let c = p.first_chunk + ix as usize;
            line.clear();
            ch_line(p, ix, Some(&sums[c])).write(&mut line);
            out.seek(SeekFrom::Start(places.ch[c])).map_err(io_err)?;
            out.write_all(line.as_bytes()).map_err(io_err)?;
        }
    }
    Ok(())
}
