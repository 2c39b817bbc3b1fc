//! The writer's work, shared by [`crate::threads::threads`] threads (the
//! calling thread is one of them: `--threads 1` is one core).
//!
//! Three kinds of work, each taken by whichever thread is free, most
//! urgent first:
//! - **root**: `sha256_all`, one stream over every `arr` line and the raw
//!   bytes in name order, an array at a time once that array's digest is
//!   known (its `arr` line comes first), and with an HMAC key the chunks'
//!   SHA-256 beside it. It is the one serial obligation of the format, so
//!   no thread takes other work while it can advance;
//! - **digest**: an array's SHA-256 (and HMAC), each array on its own, a
//!   few arrays ahead of the root (later arrays' digests run beside it),
//!   paired with its chunks' SHA-256 when there is no key and few threads;
//! - **encode**: a piece of text (a chunk's base64 lines with their parity,
//!   its CRC32C and its share of `fastxor`, or a run of whole lines of a
//!   larger chunk), a bounded number of pieces ahead of the output; and
//!   **writing** the encoded pieces in order, which one thread at a time
//!   does, so any sink that takes bytes in order works.
//!
//! In the tree form (`digest_tree`) there is no root or digest work:
//! encoding a chunk hashes it, and the caller computes the arrays'
//! digests and `sha256_all` from the chunks' SHA-256 once all are encoded.
//!
//! From [`crate::threads::STREAMS_ALONE_FROM`] threads on, encoding a
//! chunk hashes it in the sha256 form too, so that neither an array's
//! digest nor `sha256_all`, the two streams everything waits on, is slowed
//! by a digest paired with it.
//!
//! Placeholder `ch` and `arr` lines go out with the pieces; the caller
//! patches them once everything is hashed. The bytes never depend on the
//! number of threads.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use crate::crypto::digest::{fastxor_at, Hash, Sha256State};
use crate::error::{Error, Result};
use crate::format::layout::encode_lines;
use crate::format::syntax::{ArrLine, DigestForm};
use crate::progress::Progress;

use super::arrays::{ch_line, final_arr, placeholder_arr, Plan, WriteOptions, ENCODE_PIECE};

/// What the work computes, each slot set once.
pub(super) struct Sums {
    pub arr_lines: Vec<OnceLock<ArrLine>>,
    pub chunk_sha: Vec<OnceLock<Hash>>,
    /// Each piece's CRC32C, combined into its chunk's by the caller.
    pub piece_crc: Vec<OnceLock<u32>>,
    pub sha256_all: OnceLock<Hash>,
}

/// A run of a chunk's bytes encoded as one piece of text: whole base64
/// lines (a multiple of 57 bytes but the chunk's last), with the lines
/// that stand before and after it.
pub(super) struct Piece {
    /// The array (index into the plans) and the chunk's index in it.
    pub array: usize,
    pub ix: u64,
    /// The chunk's index among all chunks.
    pub chunk: usize,
    /// The bytes, as offsets into the array's bytes.
    pub off: u64,
    pub len: u64,
    /// The first piece of its chunk (its `ch` line goes first), and the last
    /// (`endch` follows).
    pub first: bool,
    pub last: bool,
}

/// Cuts the planned arrays into pieces, in text order.
pub(super) fn pieces(plans: &[Plan]) -> Vec<Piece> {
    let mut out = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        for ix in 0..p.layout.chunk_count() {
            let (off, len) = p.layout.chunk_range(ix);
            let chunk = p.first_chunk + ix as usize;
            let mut at = 0u64;
            loop {
                let n = (len - at).min(ENCODE_PIECE as u64);
                out.push(Piece { array: i, ix, chunk, off: off + at, len: n, first: at == 0, last: at + n == len });
                at += n;
                if at == len {
                    break;
                }
            }
        }
    }
    out
}

/// One job a thread took.
enum Job {
    Root(usize),
    Digest(usize),
    Encode(usize),
    Write(usize),
}

#[derive(Default)]
struct State {
    /// The next array the root absorbs, and whether a thread is at it.
    root_at: usize,
    rooting: bool,
    /// The next array whose digest is unclaimed; digests done.
    next_digest: usize,
    digested: Vec<bool>,
    /// The next piece unclaimed, the pieces encoded and not yet written,
    /// the next piece to write, whether a thread is writing.
    next_piece: usize,
    encoded: BTreeMap<usize, Vec<u8>>,
    written: usize,
    writing: bool,
    /// Buffers written, for the next pieces.
    spare: Vec<Vec<u8>>,
    failed: Option<Error>,
}

/// The work of writing a planned body; see the module's comment.
pub(super) struct Work<'a, 'p> {
    plans: &'a [Plan<'p>],
    opts: &'a WriteOptions<'a>,
    pieces: Vec<Piece>,
    /// Each array's first byte among all arrays' bytes (for `fastxor`).
    starts: Vec<u64>,
    /// The text after the last array (placeholders where the root goes).
    tail: Vec<u8>,
    pub sums: Sums,
    /// Each array's SHA-256 and HMAC, as its digest job left them.
    digests: Vec<OnceLock<(Hash, Option<Hash>)>>,
    fastxor: Mutex<u64>,
    /// `sha256_all` so far: only the root job, one at a time, takes it.
    root_state: Mutex<Sha256State>,
    state: Mutex<State>,
    changed: Condvar,
    progress: &'a Progress,
    /// Each chunk's SHA-256 is hashed as it is encoded (the tree form, or
    /// the serial streams alone), not beside a digest or the root.
    chunks_in_encode: bool,
    /// Digests and pieces taken ahead of the root and the output.
    digest_ahead: usize,
    encode_ahead: usize,
    /// The threads that share the work (read once: what the work was
    /// planned for is what runs it).
    threads: usize,
}

impl<'a, 'p> Work<'a, 'p> {
    pub(super) fn new(
        plans: &'a [Plan<'p>],
        opts: &'a WriteOptions<'a>,
        tail: Vec<u8>,
        total_chunks: usize,
        progress: &'a Progress,
    ) -> Work<'a, 'p> {
        let pieces = pieces(plans);
        let mut starts = Vec::with_capacity(plans.len());
        let mut at = 0u64;
        for p in plans {
            starts.push(at);
            at += p.layout.bytes;
        }
        let threads = crate::threads::threads();
        let sums = Sums {
            arr_lines: (0..plans.len()).map(|_| OnceLock::new()).collect(),
            chunk_sha: (0..total_chunks).map(|_| OnceLock::new()).collect(),
            piece_crc: (0..pieces.len()).map(|_| OnceLock::new()).collect(),
            sha256_all: OnceLock::new(),
        };
        // The tree form has no digest or root job: an array's digest and
        // `sha256_all` come from the chunks' SHA-256, which encoding computes.
        let tree = opts.digest == DigestForm::Tree;
        let state = if tree {
            let n = plans.len();
            State { digested: vec![true; n], root_at: n, next_digest: n, ..Default::default() }
        } else {
            State { digested: vec![false; plans.len()], ..Default::default() }
        };
        Work {
            plans,
            opts,
            pieces,
            starts,
            tail,
            sums,
            digests: (0..plans.len()).map(|_| OnceLock::new()).collect(),
            fastxor: Mutex::new(0),
            root_state: Mutex::new(Sha256State::default()),
            state: Mutex::new(state),
            changed: Condvar::new(),
            progress,
            chunks_in_encode: tree || threads >= crate::threads::STREAMS_ALONE_FROM,
            digest_ahead: threads + 1,
            encode_ahead: 2 * threads + 2,
            threads,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs the work on the threads it was planned for (this one among
    /// them), writing the body to `out` in order; returns its length.
    pub(super) fn run<W: Write + Send>(&self, out: &mut W) -> Result<u64> {
        let out = Mutex::new((out, 0u64));
        let extra = self.threads.saturating_sub(1);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..extra).map(|_| s.spawn(|| self.thread(&out))).collect();
            self.thread(&out);
            for h in handles {
                if let Err(panic) = h.join() {
                    std::panic::resume_unwind(panic);
                }
            }
        });
        if let Some(e) = self.lock().failed.take() {
            return Err(e);
        }
        let (out, len) = out.into_inner().unwrap_or_else(|p| p.into_inner());
        out.write_all(&self.tail).map_err(Error::write_failed)?;
        Ok(len + self.tail.len() as u64)
    }

    /// `fastxor` once the work is done.
    pub(super) fn fastxor(&self) -> u64 {
        *self.fastxor.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One thread's loop: take the most urgent job, do it, until all is done.
    fn thread<W: Write>(&self, out: &Mutex<(&mut W, u64)>) {
        // Base64 before its lines are laid out: kept from piece to piece,
        // so a piece costs no fresh pages.
        let mut scratch = Vec::new();
        while let Some(job) = self.take() {
            let done = match job {
                Job::Root(i) => {
                    self.root(i);
                    Ok(())
                }
                Job::Digest(i) => {
                    self.digest(i);
                    Ok(())
                }
                Job::Encode(k) => {
                    let buf = self.lock().spare.pop().unwrap_or_default();
                    let text = self.encode(k, buf, &mut scratch);
                    self.lock().encoded.insert(k, text);
                    Ok(())
                }
                Job::Write(k) => self.write_from(k, out),
            };
            let mut s = self.lock();
            match (job, done) {
                (_, Err(e)) => {
                    s.failed.get_or_insert(e);
                }
                (Job::Root(_), _) => {
                    s.root_at += 1;
                    s.rooting = false;
                }
                (Job::Digest(i), _) => s.digested[i] = true,
                (Job::Write(_), _) => s.writing = false,
                (Job::Encode(_), _) => {}
            }
            drop(s);
            self.changed.notify_all();
        }
    }

    /// The most urgent job free, waiting until there is one; `None` once
    /// everything is done (or a job failed).
    fn take(&self) -> Option<Job> {
        let n = self.plans.len();
        let mut s = self.lock();
        loop {
            if s.failed.is_some() {
                return None;
            }
            if !s.rooting && s.root_at < n && s.digested[s.root_at] {
                s.rooting = true;
                return Some(Job::Root(s.root_at));
            }
            if !s.writing && s.encoded.contains_key(&s.written) {
                s.writing = true;
                return Some(Job::Write(s.written));
            }
            if s.next_digest < n && s.next_digest < s.root_at + self.digest_ahead {
                s.next_digest += 1;
                return Some(Job::Digest(s.next_digest - 1));
            }
            if s.next_piece < self.pieces.len() && s.next_piece < s.written + self.encode_ahead {
                s.next_piece += 1;
                return Some(Job::Encode(s.next_piece - 1));
            }
            if s.root_at == n && s.written == self.pieces.len() {
                return None;
            }
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Writes the encoded pieces from `k` on while they are ready, in order.
    fn write_from<W: Write>(&self, mut k: usize, out: &Mutex<(&mut W, u64)>) -> Result<()> {
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let Some(text) = self.lock().encoded.remove(&k) else { return Ok(()) };
            out.0.write_all(&text).map_err(Error::write_failed)?;
            out.1 += text.len() as u64;
            let mut s = self.lock();
            s.written = k + 1;
            s.spare.push(text);
            drop(s);
            self.changed.notify_all();
            k += 1;
        }
    }

    /// Piece `k`'s text into `buf` (emptied first): the lines before it
    /// (an array's placeholder `arr` and `idx` lines, its chunk's
    /// placeholder `ch` line), its base64 lines, and the lines after it
    /// (`endch`, and `endarr` after an array's last chunk). Its CRC32C and
    /// share of `fastxor` are set on the way.
    fn encode(&self, k: usize, mut buf: Vec<u8>, scratch: &mut Vec<u8>) -> Vec<u8> {
        buf.clear();
        let piece = &self.pieces[k];
        let p = &self.plans[piece.array];
        let mut line = String::with_capacity(256);
        if piece.first && piece.ix == 0 {
            buf.extend_from_slice(placeholder_arr(p).to_line().as_bytes());
            buf.push(b'\n');
            if let Some(idx) = p.layout.idx {
                idx.write(&mut line);
                buf.extend_from_slice(line.as_bytes());
                buf.push(b'\n');
            }
        }
        if piece.first {
            line.clear();
            ch_line(p, piece.ix, None).write(&mut line);
            buf.extend_from_slice(line.as_bytes());
            buf.push(b'\n');
        }
        let range = piece.off as usize..(piece.off + piece.len) as usize;
        let raw = &p.array.bytes()[range.clone()];
        if self.chunks_in_encode && piece.first {
            // The whole chunk's digest, on the thread that encodes its first
            // piece (a chunk is a piece unless its rows are very wide).
            let (off, len) = p.layout.chunk_range(piece.ix);
            let chunk = &p.array.bytes()[off as usize..(off + len) as usize];
            let _ = self.sums.chunk_sha[piece.chunk].set(crate::crypto::digest::sha256(chunk));
        }
        encode_lines(raw, &mut buf, scratch);
        let _ = self.sums.piece_crc[k].set(crc32c::crc32c(raw));
        let x = fastxor_at(self.starts[piece.array] + piece.off, raw);
        *self.fastxor.lock().unwrap_or_else(|p| p.into_inner()) ^= x;
        if piece.last {
            buf.extend_from_slice(b"endch\n");
            if piece.ix + 1 == p.layout.chunk_count() {
                buf.extend_from_slice(b"endarr\n");
            }
        }
        p.array.data.release(range);
        self.progress.inc(piece.len);
        buf
    }

    /// Array `i`'s SHA-256 and HMAC in one pass; without a key, each chunk's
    /// SHA-256 beside the array's (two digests cost little more than one)
    /// unless encoding hashes the chunks.
    fn digest(&self, i: usize) {
        let p = &self.plans[i];
        let mut sha = Sha256State::default();
        let mut mac = self.opts.hmac_key.map(|k| (k, k.resumable(&p.salt)));
        let mut chunks = (!self.chunks_in_encode).then(|| ChunkDigests::new(p, &self.sums.chunk_sha));
        each_block(p, &mut |block| match (mac.as_mut(), chunks.as_mut()) {
            (Some((_, m)), _) => Sha256State::update_pair(&mut sha, block, m, block),
            (None, Some(chunks)) => chunks.pair(&mut sha, block),
            (None, None) => sha.update(block),
        });
        let _ = self.digests[i].set((sha.finalize(), mac.map(|(k, m)| k.finish_resumable(m))));
    }

    /// `sha256_all` through array `i` (its `arr` line, then its bytes): the
    /// stream is this job's alone, one array at a time in order. With a
    /// key, the chunks' SHA-256 beside it (the digest job paired the HMAC)
    /// unless encoding hashes them.
    fn root(&self, i: usize) {
        let p = &self.plans[i];
        let (sha, hmac) = *self.digests[i].get().expect("the root takes an array once its digest is done");
        let line = final_arr(p, self.opts, sha, hmac);
        let mut all = self.root_state.lock().unwrap_or_else(|p| p.into_inner());
        all.update(line.to_line().as_bytes());
        let keyed = self.opts.hmac_key.is_some() && !self.chunks_in_encode;
        let mut chunks = keyed.then(|| ChunkDigests::new(p, &self.sums.chunk_sha));
        each_block(p, &mut |block| match chunks.as_mut() {
            Some(chunks) => chunks.pair(&mut all, block),
            None => all.update(block),
        });
        self.progress.inc(p.layout.bytes);
        let _ = self.sums.arr_lines[i].set(line);
        if i + 1 == self.plans.len() {
            let _ = self.sums.sha256_all.set(std::mem::take(&mut *all).finalize());
        }
    }
}

/// Hands `p`'s bytes to `f` a block at a time, dropping the mapped pages of
/// each window once done.
fn each_block(p: &Plan, f: &mut dyn FnMut(&[u8])) {
    let _ = p.array.data.each_window(&mut |window| {
        window.chunks(256 << 10).for_each(&mut *f);
        Ok(())
    });
}

/// The SHA-256 of each chunk of one array, fed its bytes in order beside
/// another digest of the same bytes; each is set in `out` once complete.
struct ChunkDigests<'a> {
    plan: &'a Plan<'a>,
    out: &'a [OnceLock<Hash>],
    ix: u64,
    left: u64,
    sha: Sha256State,
}

impl<'a> ChunkDigests<'a> {
    fn new(plan: &'a Plan<'a>, out: &'a [OnceLock<Hash>]) -> ChunkDigests<'a> {
        let mut c = ChunkDigests { plan, out, ix: 0, left: plan.layout.chunk_range(0).1, sha: Sha256State::default() };
        // An array of 0 bytes has one chunk, of 0 bytes.
        c.set_completed();
        c
    }

    /// Feeds `bytes` to the chunks and `other` alike.
    fn pair(&mut self, other: &mut Sha256State, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = (self.left as usize).min(bytes.len());
            if n == 0 {
                // Past the last chunk: the layout covers every byte, so never.
                break;
            }
            Sha256State::update_pair(other, &bytes[..n], &mut self.sha, &bytes[..n]);
            bytes = &bytes[n..];
            self.left -= n as u64;
            self.set_completed();
        }
    }

    /// Sets the digest of each chunk whose bytes were all fed.
    fn set_completed(&mut self) {
        let chunks = self.plan.layout.chunk_count();
        while self.left == 0 && self.ix < chunks {
            let _ = self.out[self.plan.first_chunk + self.ix as usize].set(std::mem::take(&mut self.sha).finalize());
            self.ix += 1;
            if self.ix < chunks {
                self.left = self.plan.layout.chunk_range(self.ix).1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::format::write::{write_snapshot, WriteOptions};
    use crate::model::{Array, Dtype};

    /// Arrays that take every path: a chunk longer than a piece (its CRC
    /// combined from the pieces'), empty arrays, a scalar, a flat array of
    /// many chunks.
    fn arrays() -> Vec<Array> {
        let n = |len: usize, seed: u64| crate::testing::noise(len, seed);
        vec![
            Array::new("a_wide", Dtype::U8, vec![2, 3 << 20], n(6 << 20, 1).into()).unwrap(),
            Array::new("b_empty", Dtype::F32, vec![0, 5], Vec::new().into()).unwrap(),
            Array::new("c_scalar", Dtype::F64, vec![], n(8, 2).into()).unwrap(),
            Array::new("d_flat", Dtype::F32, vec![100_003], n(400_012, 3).into()).unwrap(),
            Array::new("e_rows", Dtype::Bf16, vec![301, 7], n(301 * 14, 4).into()).unwrap(),
        ]
    }

    /// The same bytes whatever the number of threads, with and without a
    /// key, in either digest form, and the text verifies.
    #[test]
    fn the_bytes_do_not_depend_on_the_threads() {
        use crate::format::syntax::DigestForm;
        let key = crate::crypto::mac::HmacKey::from_hex(&"ab".repeat(32)).unwrap();
        let arrays = arrays();
        for (hmac, digest) in
            [None, Some(&key)].into_iter().flat_map(|k| [(k, DigestForm::Sha256), (k, DigestForm::Tree)])
        {
            let mut texts = Vec::new();
            for threads in [1, 2, 3, 8] {
                crate::threads::set(threads);
                let meta = crate::format::syntax::Meta::new(3, Some("2026-01-01T00:00:00Z")).unwrap();
                let opts = WriteOptions { hmac_key: hmac, digest, ..WriteOptions::new(meta, 1) };
                let mut out = std::io::Cursor::new(Vec::new());
                write_snapshot(&arrays, &opts, &mut out, &crate::progress::Progress::hidden()).unwrap();
                texts.push(out.into_inner());
            }
            crate::threads::set(0);
            assert!(texts.iter().all(|t| *t == texts[0]), "a thread count changed the bytes");
            assert_eq!(std::str::from_utf8(&texts[0]).unwrap().contains(",digest_tree\n"), digest == DigestForm::Tree);
            let opts = crate::format::verify::VerifyOptions { hmac_key: hmac, ..Default::default() };
            // 5: `sha256_all` alone, the arrays' digests on the chunks' worker.
            for threads in [1, 3, 5] {
                crate::threads::set(threads);
                let report = crate::format::verify::verify(&texts[0][..], &opts, None).unwrap();
                assert!(report.ok, "{digest:?} {threads}: {:?}", report.errors);
                assert!(report.arrays.iter().all(|a| a.authenticated == hmac.is_some()));
                // One byte of one chunk changed, its `ch` line made to match:
                // the array's digest (from the chunks') no longer does.
                let mut t = String::from_utf8(texts[0].clone()).unwrap();
                let at = t.find("\nendch\n").unwrap() - 8;
                let flipped = if &t[at..at + 1] == "A" { "B" } else { "A" };
                t.replace_range(at..at + 1, flipped);
                let report = crate::format::verify::verify(t.as_bytes(), &opts, None).unwrap();
                assert!(!report.ok);
            }
            crate::threads::set(0);
        }
    }
}
