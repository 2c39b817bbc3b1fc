//! The verifier's hashing work: blocks from a recycled pool handed to two
//! workers, one for the arrays' digests, `sha256_all` and `fastxor`, one
//! for the chunks' digests two at a time or each paired with the array's
//! HMAC. When the chunks' digests come from the threads that decode them
//! and the serial stream runs alone ([`crate::threads::STREAMS_ALONE_FROM`]),
//! the first worker computes `sha256_all` alone and the second the arrays'
//! digests and `fastxor`.

use std::collections::VecDeque;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use crate::crypto::digest::{FastXor, Hash, Sha256State};
use crate::crypto::mac::HmacKey;
use crate::error::Result;
use crate::format::read::{ArrayStart, Header, Visitor};
use crate::format::syntax::{ArrLine, ChLine, DigestForm};
use crate::limits::BLOCK;

use super::carried::Carried;
use super::report::{ArrayReport, Problem, ProblemKind, Sink};

pub(super) struct Pooled {
    pub(super) buf: Vec<u8>,
    pub(super) home: Sender<Vec<u8>>,
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let _ = self.home.send(std::mem::take(&mut self.buf));
    }
}

pub(super) enum Msg {
    /// An array begins; `tree`: the file is of the tree digest form.
    Array {
        text: Arc<Vec<u8>>,
        salt: [u8; 8],
        hmac: Option<Hash>,
        tree: bool,
        /// Passed over, its bytes proven before: its size and `fastxor` share.
        share: Option<(u64, u64)>,
    },
    Data {
        block: Arc<Pooled>,
    },
    /// The current chunk's SHA-256, as the thread that decoded it computed
    /// it: its bytes need no hashing here.
    ChunkDigest {
        sha256: Hash,
    },
    ChunkEnd {
        array: usize,
        ix: u64,
        len: u64,
        line: u64,
        sha256: Hash,
        bad: bool,
    },
    ArrayEnd,
}

pub(super) struct Expect {
    pub(super) sha256: Hash,
    /// Its chunks were passed over whole: its `arr` line's digest, bound
    /// by the tree form's root, stands for them.
    pub(super) passed_over: bool,
    /// Passed over, its `fastxor` share known ([`Carried`]).
    pub(super) share: Option<u64>,
    /// The tag the `arr` line carries (none when all zeros), and the salt.
    pub(super) hmac: Option<Hash>,
    pub(super) salt: [u8; 8],
}

/// Where the reader's messages go: two hashing threads, or (one thread of
/// work) the hashing done in place.
pub(super) enum Hashers<'k> {
    Threads(Vec<Sender<Msg>>),
    Inline(Box<RootWork>, Box<ChunkWork<'k>>),
}

pub(super) struct Hashing<'s, 'k> {
    pub(super) hashers: Hashers<'k>,
    pub(super) pool_rx: Receiver<Vec<u8>>,
    pub(super) pool_tx: Sender<Vec<u8>>,
    pub(super) arrays: Vec<ArrayReport>,
    pub(super) expected: Vec<Expect>,
    pub(super) problems: Vec<Problem>,
    pub(super) sink: Option<&'s mut dyn Sink>,
    pub(super) key_given: bool,
    /// The file is of the tree digest form.
    pub(super) tree: bool,
    pub(super) header: Option<Header>,
    /// Arrays proven before, passed over in the tree form.
    pub(super) carried: Option<&'k Carried>,
    pub(super) audit: Option<crate::format::syntax::Audit>,
    /// The `audit` line's number.
    pub(super) audit_line: u64,
    /// Chunks read past undecoded (see [`Sink::wants`]).
    pub(super) skipped: u64,
    /// The signature policy applied from the header alone where the sink
    /// writes in place ([`Sink::in_place`]): the first problem it finds.
    pub(super) policy: &'k dyn Fn(&Header) -> Option<Problem>,
    /// That policy refused the file: its problem is in `problems` and
    /// nothing past the header was read.
    pub(super) refused: bool,
}

impl Hashing<'_, '_> {
    pub(super) fn send(&mut self, make: impl Fn() -> Msg) {
        match &mut self.hashers {
            Hashers::Threads(tx) => {
                for t in tx.iter() {
                    // A closed channel means a worker died; its join reports it.
                    let _ = t.send(make());
                }
            }
            Hashers::Inline(root, chunks) => {
                root.take(make());
                chunks.take(make());
            }
        }
    }
}

impl Hashing<'_, '_> {
    /// An array begins: its report, what its `arr` line expects, and its
    /// line to the hashers.
    fn begin(&mut self, line: u64, arr: &ArrLine, text: &[u8], passed_over: bool) {
        self.arrays.push(ArrayReport {
            original: None,
            name: arr.name.clone(),
            dtype: arr.dtype.to_string(),
            shape: arr.shape.clone(),
            bytes: arr.bytes,
            ok: true,
            authenticated: false,
            bad_chunks: Vec::new(),
            line,
        });
        let text = Arc::new(text.to_vec());
        let hmac = (self.key_given && !arr.hmac_is_zero()).then_some(arr.hmac);
        let salt = arr.salt;
        let share = self.carried.filter(|_| passed_over).and_then(|c| c.share(arr));
        self.expected.push(Expect { sha256: arr.sha256, passed_over, share, hmac, salt });
        let tree = self.tree;
        let share = share.map(|s| (arr.bytes, s));
        self.send(|| Msg::Array { text: text.clone(), salt, hmac, tree, share });
    }
}

impl Visitor for Hashing<'_, '_> {
    fn header(&mut self, h: &Header) -> Result<()> {
        self.tree = h.cap.digest_form() == Ok(DigestForm::Tree);
        self.header = Some(h.clone());
        if self.sink.as_ref().is_some_and(|s| s.in_place()) {
            if let Some(p) = (self.policy)(h) {
                let e = p.to_error();
                self.problems.push(p);
                self.refused = true;
                return Err(e);
            }
        }
        Ok(())
    }

    fn array(&mut self, a: &ArrayStart) -> Result<()> {
        if let Some(s) = self.sink.as_mut() {
            s.array(a);
        }
        self.begin(a.line, &a.arr, &a.text, false);
        Ok(())
    }

    fn needs(&mut self, a: &ArrayStart, ch: &ChLine) -> bool {
        // Only the tree form binds a chunk's claimed digest to the root
        // without its bytes.
        let wanted = !self.tree || self.sink.as_ref().is_none_or(|s| s.wants(a, ch));
        self.skipped += u64::from(!wanted);
        wanted
    }

    fn passes_over(&mut self, arr: &ArrLine) -> bool {
        self.tree
            && (self.sink.as_ref().is_some_and(|s| !s.wants_array(arr))
                || self.carried.is_some_and(|c| c.share(arr).is_some()))
    }

    fn passed_over(&mut self, line: u64, arr: &ArrLine, text: &[u8]) {
        // An array with no chunks, whose digest is its `arr` line's (see
        // `tree_digests`); the sink hears nothing of it.
        self.begin(line, arr, text, true);
        self.send(|| Msg::ArrayEnd);
    }

    fn chunk(&mut self, _line: u64, ch: &ChLine) {
        if let Some(s) = self.sink.as_mut() {
            s.chunk(ch);
        }
    }

    fn buffer(&mut self) -> Vec<u8> {
        self.pool_rx.try_recv().unwrap_or_else(|_| Vec::with_capacity(BLOCK))
    }

    fn data(&mut self, buf: Vec<u8>) {
        if let Some(s) = self.sink.as_mut() {
            s.data(&buf);
        }
        let block = Arc::new(Pooled { buf, home: self.pool_tx.clone() });
        self.send(|| Msg::Data { block: block.clone() });
    }

    fn chunk_digest(&mut self, sha256: &Hash) {
        let sha256 = *sha256;
        self.send(|| Msg::ChunkDigest { sha256 });
    }

    fn chunk_end(&mut self, line: u64, ch: &ChLine, bad: bool) {
        let (array, ix, len, sha256) = (self.arrays.len() - 1, ch.ix, ch.len, ch.sha256);
        self.send(|| Msg::ChunkEnd { array, ix, len, line, sha256, bad });
        if bad {
            self.arrays[array].bad_chunks.push(ix);
        }
    }

    fn array_end(&mut self) {
        self.send(|| Msg::ArrayEnd);
    }

    fn problem(&mut self, line: u64, message: String) {
        let p = Problem::at(ProblemKind::Chunk, line, message);
        self.problems.push(match self.arrays.last() {
            Some(a) => p.in_array(&a.name),
            None => p,
        });
    }

    fn audit(&mut self, line: u64, a: &crate::format::syntax::Audit) {
        self.audit = Some(a.clone());
        self.audit_line = line;
    }
}

type BadChunk = (usize, u64, u64);

/// A chunk's digest as the verifier computed it: (array, ix, len, SHA-256).
type KeptDigest = (usize, u64, u64, Hash);

pub(super) struct RootDigests {
    /// Per array, its SHA-256.
    pub(super) arrays: Vec<Hash>,
    /// `sha256_all` and `fastxor`.
    pub(super) root: Option<(Hash, u64)>,
    /// Per array, its `fastxor` share.
    pub(super) shares: Vec<u64>,
}

pub(super) struct ChunkDigests {
    /// The arrays' digests, `fastxor` and the arrays' shares of it, where
    /// this worker computed them.
    pub(super) alone: Option<(Vec<Hash>, u64, Vec<u64>)>,
    pub(super) bad_chunks: Vec<BadChunk>,
    /// Per array, whether its HMAC matched, where it was checked.
    pub(super) macs: Vec<Option<bool>>,
    /// The tree form: every chunk's digest.
    pub(super) kept: Vec<KeptDigest>,
}

/// Each array's digest paired with `sha256_all` (both take the same
/// bytes; the `arr` line that `sha256_all` starts with is read first), and
/// `fastxor`; or, `alone`, `sha256_all` by itself.
#[derive(Default)]
pub(super) struct RootWork {
    pub(super) alone: bool,
    pub(super) all: Sha256State,
    pub(super) fx: FastXor,
    pub(super) shares: Vec<u64>,
    pub(super) arrays: Vec<Hash>,
    pub(super) cur: Option<Sha256State>,
    /// The tree form: the `arr` lines, for `sha256_all` once all are read
    /// (no digest here reads the raw bytes; `fastxor` still does).
    pub(super) tree: Option<Vec<Arc<Vec<u8>>>>,
}

impl RootWork {
    pub(super) fn take(&mut self, m: Msg) {
        if !self.alone {
            fastxor_arrays(&mut self.fx, &mut self.shares, &m);
        }
        match m {
            Msg::Array { text, tree: true, .. } => self.tree.get_or_insert_with(Vec::new).push(text),
            Msg::Array { text, .. } => {
                self.all.update(&text[..]);
                self.cur = (!self.alone).then(Sha256State::default);
            }
            Msg::Data { block } if self.alone => {
                if self.tree.is_none() {
                    self.all.update(&block.buf);
                }
            }
            Msg::Data { block } if self.tree.is_some() => self.fx.update(&block.buf),
            Msg::Data { block } => {
                match self.cur.as_mut() {
                    Some(array) => Sha256State::update_pair(array, &block.buf, &mut self.all, &block.buf),
                    None => self.all.update(&block.buf),
                }
                self.fx.update(&block.buf);
            }
            Msg::ChunkEnd { .. } | Msg::ChunkDigest { .. } => {}
            Msg::ArrayEnd => self.arrays.extend(self.cur.take().map(Sha256State::finalize)),
        }
    }

    pub(super) fn finish(self) -> RootDigests {
        let all = match self.tree {
            Some(lines) => crate::crypto::digest::tree_all(lines.iter().map(|l| &l[..])),
            None => self.all.finalize(),
        };
        RootDigests { arrays: self.arrays, root: Some((all, self.fx.value())), shares: self.shares }
    }
}

/// Where arrays begin and end for `fastxor`: each array's share kept, and
/// an array passed over whose share is known added by it.
fn fastxor_arrays(fx: &mut FastXor, shares: &mut Vec<u64>, m: &Msg) {
    match m {
        Msg::Array { share: Some((len, share)), .. } => fx.add_share(*len, *share),
        Msg::Array { .. } => fx.begin_array(),
        Msg::ArrayEnd => shares.push(fx.array_share()),
        _ => {}
    }
}

/// Each chunk's digest, and each HMAC checked. Chunks are hashed two at a
/// time ([`ChunkPairs`]); in an array with an HMAC, each chunk is paired
/// with the HMAC instead, both taking the same bytes.
pub(super) struct ChunkWork<'k> {
    pub(super) key: Option<&'k HmacKey>,
    /// The arrays' digests and `fastxor`, here instead of beside
    /// `sha256_all` ([`RootWork::alone`]).
    pub(super) alone: Option<Arrays>,
    pub(super) chunks: ChunkPairs,
    pub(super) mac: Option<(Sha256State, Hash)>,
    pub(super) macs: Vec<Option<bool>>,
    /// The current chunk's digest, when its decoding thread computed it.
    pub(super) given: Option<Hash>,
}

impl<'k> ChunkWork<'k> {
    /// `alone`: the arrays' digests and `fastxor` are computed here.
    pub(super) fn new(key: Option<&'k HmacKey>, alone: bool) -> ChunkWork<'k> {
        let alone = alone.then(Arrays::default);
        ChunkWork { key, alone, chunks: ChunkPairs::default(), mac: None, macs: Vec::new(), given: None }
    }

    pub(super) fn take(&mut self, m: Msg) {
        let key = self.key;
        if let Some(a) = self.alone.as_mut() {
            fastxor_arrays(&mut a.fx, &mut a.shares, &m);
        }
        match m {
            // The tree form: every chunk's digest is kept; the arrays' digests
            // and tags are computed from them at the end.
            Msg::Array { tree: true, .. } => self.chunks.keep = true,
            Msg::Array { salt, hmac, .. } => {
                self.mac = hmac.zip(key).map(|(want, k)| (k.resumable(&salt), want));
                if let Some(a) = self.alone.as_mut() {
                    a.cur = Some(Sha256State::default());
                }
            }
            Msg::ChunkDigest { sha256 } => self.given = Some(sha256),
            Msg::Data { block } => {
                let mut mac = self.mac.as_mut().map(|(inner, _)| inner);
                let mut array = None;
                if let Some(a) = self.alone.as_mut() {
                    a.fx.update(&block.buf);
                    array = a.cur.as_mut();
                }
                // The array's digest pairs with the HMAC, else with the
                // chunk's when this thread hashes it.
                if let (Some(m), Some(a)) = (mac.as_mut(), array.as_mut()) {
                    Sha256State::update_pair(m, &block.buf, a, &block.buf);
                    (mac, array) = (None, None);
                }
                match (self.given.is_some(), mac.or(array)) {
                    (true, Some(other)) => other.update(&block.buf),
                    (true, None) => {}
                    (false, partner) => self.chunks.data(block, partner),
                }
            }
            Msg::ChunkEnd { array, ix, len, line, sha256, bad } => {
                let end = ChunkEnd { array, ix, len, line, want: sha256, bad };
                match self.given.take() {
                    Some(computed) => self.chunks.given(computed, end),
                    None => self.chunks.end(end),
                }
            }
            Msg::ArrayEnd => {
                let checked = self.mac.take().zip(key).map(|((inner, want), k)| k.verify_resumable(inner, &want));
                self.macs.push(checked);
                if let Some(a) = self.alone.as_mut() {
                    a.done.extend(a.cur.take().map(Sha256State::finalize));
                }
            }
        }
    }

    pub(super) fn finish(self) -> ChunkDigests {
        let (bad_chunks, kept) = self.chunks.finish();
        let alone = self.alone.map(|a| (a.done, a.fx.value(), a.shares));
        ChunkDigests { alone, bad_chunks, macs: self.macs, kept }
    }
}

/// The arrays' digests and `fastxor`, on the chunks' worker.
#[derive(Default)]
pub(super) struct Arrays {
    cur: Option<Sha256State>,
    done: Vec<Hash>,
    fx: FastXor,
    shares: Vec<u64>,
}

/// A chunk's place and what its `ch` line says.
pub(super) struct ChunkEnd {
    pub(super) array: usize,
    pub(super) ix: u64,
    pub(super) len: u64,
    pub(super) line: u64,
    pub(super) want: Hash,
    /// Already found damaged: its digest is not judged.
    pub(super) bad: bool,
}

/// A chunk whose bytes have all arrived and are not all hashed.
pub(super) struct Held {
    pub(super) sha: Sha256State,
    /// Blocks not yet hashed, the first from `at`.
    pub(super) blocks: VecDeque<Arc<Pooled>>,
    pub(super) at: usize,
    pub(super) end: ChunkEnd,
}

/// Chunk digests computed two at a time: a chunk's blocks wait (at most
/// [`HOLD`] bytes of them; beyond that they are hashed alone) until the
/// next chunk's arrive, and the two chunks' bytes go through as a pair.
#[derive(Default)]
pub(super) struct ChunkPairs {
    pub(super) held: Option<Held>,
    /// The chunk arriving now, and its blocks waiting for a partner (the
    /// first from `waiting_at`).
    pub(super) cur: Sha256State,
    pub(super) waiting: VecDeque<Arc<Pooled>>,
    pub(super) waiting_at: usize,
    pub(super) waiting_bytes: usize,
    pub(super) bad: Vec<BadChunk>,
    /// Keep every chunk's digest (the tree form), in `kept`.
    pub(super) keep: bool,
    pub(super) kept: Vec<KeptDigest>,
}

/// Bytes of a chunk that may wait for a partner.
pub(super) const HOLD: usize = 4 * BLOCK;

impl ChunkPairs {
    /// The current chunk's next block; `partner` is another digest of the
    /// same bytes (an HMAC) to pair it with instead of another chunk.
    pub(super) fn data(&mut self, block: Arc<Pooled>, partner: Option<&mut Sha256State>) {
        if let Some(p) = partner {
            if let Some(h) = self.held.take() {
                self.alone(h);
            }
            while self.waiting_bytes > 0 {
                self.hash_first_waiting();
            }
            Sha256State::update_pair(p, &block.buf, &mut self.cur, &block.buf);
            return;
        }
        let mut from = 0;
        if let Some(h) = self.held.as_mut() {
            while from < block.buf.len() {
                let Some(front) = h.blocks.front() else { break };
                let n = (front.buf.len() - h.at).min(block.buf.len() - from);
                Sha256State::update_pair(
                    &mut self.cur,
                    &block.buf[from..from + n],
                    &mut h.sha,
                    &front.buf[h.at..h.at + n],
                );
                from += n;
                h.at += n;
                if h.at == front.buf.len() {
                    h.blocks.pop_front();
                    h.at = 0;
                }
            }
            if h.blocks.is_empty() {
                let h = self.held.take().expect("held");
                self.judge(h.sha, h.end);
            }
        }
        if from < block.buf.len() {
            if self.waiting.is_empty() {
                self.waiting_at = from;
            }
            self.waiting_bytes += block.buf.len() - from;
            self.waiting.push_back(block);
            while self.waiting_bytes > HOLD {
                self.hash_first_waiting();
            }
        }
    }

    /// Hashes the first block waiting by itself.
    pub(super) fn hash_first_waiting(&mut self) {
        let b = self.waiting.pop_front().expect("bytes waiting");
        self.cur.update(&b.buf[self.waiting_at..]);
        self.waiting_bytes -= b.buf.len() - self.waiting_at;
        self.waiting_at = 0;
    }

    /// The current chunk has ended.
    pub(super) fn end(&mut self, end: ChunkEnd) {
        let sha = std::mem::take(&mut self.cur);
        self.waiting_bytes = 0;
        match self.held {
            // Every byte of it went through paired with the held chunk.
            Some(_) => self.judge(sha, end),
            None => {
                let blocks = std::mem::take(&mut self.waiting);
                self.held = Some(Held { sha, blocks, at: self.waiting_at, end });
            }
        }
    }

    /// A chunk whose digest another thread computed (its bytes never came
    /// here): judged as any other, after a chunk still held for a partner
    /// is hashed by itself.
    pub(super) fn given(&mut self, computed: Hash, end: ChunkEnd) {
        if let Some(h) = self.held.take() {
            self.alone(h);
        }
        if computed != end.want && !end.bad {
            self.bad.push((end.array, end.ix, end.line));
        }
        if self.keep {
            self.kept.push((end.array, end.ix, end.len, computed));
        }
    }

    /// Hashes what `h` still holds by itself.
    pub(super) fn alone(&mut self, mut h: Held) {
        for b in h.blocks.drain(..) {
            h.sha.update(&b.buf[h.at..]);
            h.at = 0;
        }
        self.judge(h.sha, h.end);
    }

    pub(super) fn judge(&mut self, sha: Sha256State, e: ChunkEnd) {
        let sha = sha.finalize();
        if sha != e.want && !e.bad {
            self.bad.push((e.array, e.ix, e.line));
        }
        if self.keep {
            self.kept.push((e.array, e.ix, e.len, sha));
        }
    }

    /// The chunks whose digest did not match, once every block arrived,
    /// and every chunk's digest where they were kept.
    pub(super) fn finish(mut self) -> (Vec<BadChunk>, Vec<KeptDigest>) {
        if let Some(h) = self.held.take() {
            self.alone(h);
        }
        (self.bad, self.kept)
    }
}
