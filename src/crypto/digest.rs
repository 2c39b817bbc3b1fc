//! The profile's derived values (salts, the Merkle link, key ids and
//! `fastxor`), and fingerprints of what a command read.

use std::io::Read;

use sha2::{Digest, Sha256};

use crate::crypto::sha_pair::Rounds;
use crate::error::{Error, Result};

/// A SHA-256 digest.
pub type Hash = [u8; 32];

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> Hash {
    Sha256::digest(data).into()
}

/// The tree form's domain strings (FORMAT.md section 19): an array node,
/// the root over the `arr` lines, and the derivation of its HMAC key.
pub const TREE_ARRAY: &[u8] = b"WTXT-TREE-1 array\0";
/// See [`TREE_ARRAY`].
pub const TREE_ALL: &[u8] = b"WTXT-TREE-1 all\0";
/// See [`TREE_ARRAY`]. Shorter than a salt, so that the derived key is no
/// array's tag (FORMAT.md section 10).
pub const TREE_HMAC_KEY: &[u8] = b"WT-TREE";
/// The derivation of the keyed tag's key (FORMAT.md section 5): shorter
/// than a salt, as [`TREE_HMAC_KEY`].
pub const BIND_HMAC_KEY: &[u8] = b"WT-BIND";

/// An array's digest in the tree form, from its chunks' lengths and
/// SHA-256 in order: `SHA256("WTXT-TREE-1 array\0" || le64(bytes) ||
/// le64(chunks) || (le64(len) || sha256) for each chunk)`.
pub fn tree_array(bytes: u64, chunks: &[(u64, Hash)]) -> Hash {
    let mut h = Sha256::new();
    h.update(TREE_ARRAY);
    h.update(bytes.to_le_bytes());
    h.update((chunks.len() as u64).to_le_bytes());
    for (len, sha) in chunks {
        h.update(len.to_le_bytes());
        h.update(sha);
    }
    h.finalize().into()
}

/// `sha256_all` in the tree form, from every `arr` line (without its LF)
/// in name order: `SHA256("WTXT-TREE-1 all\0" || le64(arrays) ||
/// (le64(len(line)) || line) for each array)`.
pub fn tree_all<'a>(lines: impl ExactSizeIterator<Item = &'a [u8]>) -> Hash {
    let mut h = Sha256::new();
    h.update(TREE_ALL);
    h.update((lines.len() as u64).to_le_bytes());
    for l in lines {
        h.update((l.len() as u64).to_le_bytes());
        h.update(l);
    }
    h.finalize().into()
}

/// The default salt of an array:
/// `first 8 bytes of SHA256("wtxt-salt" || gen-as-written || 0x00 || name)`.
/// Deterministic, yet it rotates with every generation.
pub fn derive_salt(gen_as_written: &str, name: &str) -> [u8; 8] {
    let mut h = Sha256::new();
    h.update(b"wtxt-salt");
    h.update(gen_as_written.as_bytes());
    h.update([0u8]);
    h.update(name.as_bytes());
    let d = h.finalize();
    d[..8].try_into().expect("8 of 32 bytes")
}

/// `merkle_this = SHA256(merkle_prev || sha256_all || ts || gen || build)`,
/// the first two as 32 raw bytes, the rest as the ASCII written in `meta`.
pub fn merkle_this(merkle_prev: &Hash, sha256_all: &Hash, ts: &str, gen_as_written: &str, build: &str) -> Hash {
    let mut h = Sha256::new();
    h.update(merkle_prev);
    h.update(sha256_all);
    h.update(ts.as_bytes());
    h.update(gen_as_written.as_bytes());
    h.update(build.as_bytes());
    h.finalize().into()
}

/// `keyid` = first 8 bytes of SHA256(32-byte public key).
pub fn keyid(public_key: &[u8; 32]) -> [u8; 8] {
    sha256(public_key)[..8].try_into().expect("8 of 32 bytes")
}

/// The profile's `fastxor`: all arrays' raw bytes concatenated in name order,
/// zero-padded to a multiple of 8, read as little-endian u64 words and XORed.
///
/// Arrays are fed one after another; a byte at global position `p` lands in
/// lane `p % 8` of the word, so each array's own XOR is rotated into place.
///
/// It also keeps the current array's **share**: its bytes' value as if
/// they stood alone (from offset 0). A share depends on the bytes only, so
/// one recorded when an array was decoded stands in for its bytes wherever
/// the same bytes come again ([`FastXor::add_share`]).
#[derive(Default, Clone, Copy, Debug)]
pub struct FastXor {
    acc: u64,
    pos: u64,
    /// Where the current array began, and its share so far.
    array_at: u64,
    array_acc: u64,
}

impl FastXor {
    /// Adds the next bytes of the concatenation.
    pub fn update(&mut self, data: &[u8]) {
        let x = xor_words(data);
        self.acc ^= x.rotate_left((self.pos % 8) as u32 * 8);
        self.array_acc ^= x.rotate_left(((self.pos - self.array_at) % 8) as u32 * 8);
        self.pos += data.len() as u64;
    }

    /// The next array begins here.
    pub fn begin_array(&mut self) {
        (self.array_at, self.array_acc) = (self.pos, 0);
    }

    /// The share of the array begun last, from the bytes added since.
    pub fn array_share(&self) -> u64 {
        self.array_acc
    }

    /// Adds an array of `len` bytes by its share, its bytes unread.
    pub fn add_share(&mut self, len: u64, share: u64) {
        self.begin_array();
        self.acc ^= share.rotate_left((self.pos % 8) as u32 * 8);
        self.array_acc = share;
        self.pos += len;
    }

    /// The value written in the `root` line.
    pub fn value(&self) -> u64 {
        self.acc
    }
}

/// XOR of `data` read as little-endian u64 words, the tail zero-padded.
fn xor_words(data: &[u8]) -> u64 {
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().expect("8 bytes"));
    // Four independent lanes so the loop vectorizes.
    let mut lanes = [0u64; 4];
    let mut blocks = data.chunks_exact(32);
    for b in &mut blocks {
        for (l, c) in lanes.iter_mut().zip(b.chunks_exact(8)) {
            *l ^= word(c);
        }
    }
    let mut x = lanes.iter().fold(0, |a, l| a ^ l);
    let mut words = blocks.remainder().chunks_exact(8);
    for c in &mut words {
        x ^= word(c);
    }
    let rem = words.remainder();
    let mut tail = [0u8; 8];
    tail[..rem.len()].copy_from_slice(rem);
    x ^ u64::from_le_bytes(tail)
}

/// SHA-256 of each file `open` gives for `paths`, on every core, each core
/// hashing two files at a time with their rounds paired
/// ([`Sha256State::update_pair`]): results in the order of `paths`, the
/// first error (in that order) returned.
pub fn sha256_files(
    paths: &[std::path::PathBuf],
    open: impl Fn(&std::path::Path) -> Result<std::fs::File> + Sync,
) -> Result<Vec<Hash>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let found: Vec<std::sync::Mutex<Option<Result<Hash>>>> = paths.iter().map(|_| Default::default()).collect();
    let put = |i: usize, r: Result<Hash>| *found[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
    // The next file to hash, opened; one that cannot be opened is recorded.
    let take = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let path = paths.get(i)?;
        match open(path) {
            Ok(file) => return Some(Lane { i, path, file, sha: Sha256State::default(), buf: vec![0; 1 << 20] }),
            Err(e) => put(i, Err(e)),
        }
    };
    let workers = crate::threads::threads().min(paths.len().div_ceil(2)).max(1);
    // A lane whose file ended (a short read) or failed is done.
    let done = |lane: &mut Option<Lane>, read: std::io::Result<usize>| {
        if let Some(l) = lane.take_if(|l| !matches!(read, Ok(n) if n == l.buf.len())) {
            put(l.i, read.map(|_| l.sha.finalize()).map_err(|e| Error::io(l.path, e)));
        }
    };
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                let mut lanes: [Option<Lane>; 2] = [None, None];
                loop {
                    for l in lanes.iter_mut().filter(|l| l.is_none()) {
                        *l = take();
                    }
                    // A lone lane goes first.
                    let [x, y] = &mut lanes;
                    if x.is_none() {
                        std::mem::swap(x, y);
                    }
                    match (x.as_mut(), y.as_mut()) {
                        (None, _) => return,
                        (Some(l), None) => {
                            let r = l.read();
                            l.hash(&r);
                            done(x, r);
                        }
                        (Some(a), Some(b)) => {
                            let (ra, rb) = (a.read(), b.read());
                            match (&ra, &rb) {
                                (Ok(na), Ok(nb)) => {
                                    Sha256State::update_pair(&mut a.sha, &a.buf[..*na], &mut b.sha, &b.buf[..*nb])
                                }
                                _ => {
                                    a.hash(&ra);
                                    b.hash(&rb);
                                }
                            }
                            done(x, ra);
                            done(y, rb);
                        }
                    }
                }
            });
        }
    });
    found.into_iter().map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()).expect("every file done")).collect()
}

/// A file being hashed by [`sha256_files`], and its read buffer.
struct Lane<'p> {
    i: usize,
    path: &'p std::path::Path,
    file: std::fs::File,
    sha: Sha256State,
    buf: Vec<u8>,
}

impl Lane<'_> {
    /// The file's next bytes, a buffer's worth unless it ends first.
    fn read(&mut self) -> std::io::Result<usize> {
        crate::fs::read_full(&mut self.file, &mut self.buf)
    }

    /// Hashes what `read` gave, alone.
    fn hash(&mut self, read: &std::io::Result<usize>) {
        if let Ok(n) = read {
            self.sha.update(&self.buf[..*n]);
        }
    }
}

/// `each` of `paths`, on every core, results in the order of `paths`; the
/// first error (in that order) is returned.
pub fn files_parallel<T: Send>(
    paths: &[std::path::PathBuf],
    each: impl Fn(&std::path::Path) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let found: Vec<std::sync::Mutex<Option<Result<T>>>> = paths.iter().map(|_| Default::default()).collect();
    let workers = crate::threads::threads().min(paths.len()).max(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = paths.get(i) else { return };
                *found[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(each(path));
            });
        }
    });
    found.into_iter().map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()).expect("every file done")).collect()
}

/// A key drawn for one run, for [`Fingerprint`]s that are compared with
/// each other and never leave the process.
pub fn fingerprint_key() -> Result<[u8; 32]> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| Error::io_in("drawing a key", std::io::Error::other(e.to_string())))?;
    Ok(key)
}

/// Reads through `inner`, feeding every byte to BLAKE3 keyed with a key of
/// [`fingerprint_key`]: two texts with the same fingerprint are the same
/// bytes, and no one who cannot see the key can make them match otherwise.
/// It proves a text read twice did not change in between, or that a text
/// equals one written elsewhere, without holding either.
pub struct Fingerprint<R> {
    inner: R,
    hash: blake3::Hasher,
}

impl<R: Read> Fingerprint<R> {
    /// Reads through `inner`, fingerprinting with `key`.
    pub fn new(inner: R, key: &[u8; 32]) -> Fingerprint<R> {
        Fingerprint { inner, hash: blake3::Hasher::new_keyed(key) }
    }

    /// The fingerprint of what was read.
    pub fn finish(self) -> blake3::Hash {
        self.hash.finalize()
    }

    /// Reads the rest, then gives the fingerprint of all of it.
    pub fn finish_reading(mut self) -> std::io::Result<blake3::Hash> {
        std::io::copy(&mut self, &mut std::io::sink())?;
        Ok(self.finish())
    }
}

impl<R: Read> Read for Fingerprint<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// XOR of a fragment of the concatenation `fastxor` runs over, starting
/// `offset` bytes into it: fragments computed apart (on other processes)
/// XOR together to the whole's value.
pub fn fastxor_at(offset: u64, data: &[u8]) -> u64 {
    xor_words(data).rotate_left((offset % 8) as u32 * 8)
}

/// A digest of 64-byte blocks (SHA-256, SHA-1) fed any bytes at a time,
/// alone or two side by side ([`BlockState::update_pair`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockState<H: Rounds> {
    h: H::State,
    /// Bytes absorbed so far; the last `len % 64` wait in `buf`.
    len: u64,
    buf: [u8; 64],
}

/// SHA-256 whose state can be handed to another process between any two
/// bytes: a distributed writer hashes a stream whose pieces lie on
/// different ranks, each continuing where the previous one stopped.
pub type Sha256State = BlockState<crate::crypto::sha_pair::Sha256>;

/// SHA-1, for Git's object ids.
pub type Sha1State = BlockState<crate::crypto::sha_pair::Sha1>;

impl<H: Rounds> Default for BlockState<H> {
    fn default() -> BlockState<H> {
        BlockState { h: H::IV, len: 0, buf: [0; 64] }
    }
}

impl<H: Rounds> BlockState<H> {
    /// Absorbs `data`.
    pub fn update(&mut self, data: &[u8]) {
        let data = self.fill(data);
        let (blocks, rest) = data.as_chunks::<64>();
        H::alone(&mut self.h, blocks);
        self.buf[..rest.len()].copy_from_slice(rest);
    }

    /// Absorbs `da` into `a` and `db` into `b`, the two digests' rounds
    /// side by side where both have whole blocks ([`crate::crypto::sha_pair`]).
    pub fn update_pair(a: &mut BlockState<H>, da: &[u8], b: &mut BlockState<H>, db: &[u8]) {
        let (da, db) = (a.fill(da), b.fill(db));
        let ((ba, ra), (bb, rb)) = (da.as_chunks::<64>(), db.as_chunks::<64>());
        crate::crypto::sha_pair::compress_pair::<H>(&mut a.h, ba, &mut b.h, bb);
        a.buf[..ra.len()].copy_from_slice(ra);
        b.buf[..rb.len()].copy_from_slice(rb);
    }

    /// Counts `data` and completes the waiting partial block from it
    /// (compressing it once whole); gives the bytes left, which start on a
    /// block boundary unless all of them fit in the waiting block.
    fn fill<'d>(&mut self, data: &'d [u8]) -> &'d [u8] {
        let have = (self.len % 64) as usize;
        self.len += data.len() as u64;
        if have == 0 {
            return data;
        }
        let n = data.len().min(64 - have);
        self.buf[have..have + n].copy_from_slice(&data[..n]);
        if have + n == 64 {
            H::alone(&mut self.h, &[self.buf]);
        }
        &data[n..]
    }

    /// The digest of everything absorbed: the padded state's words,
    /// big-endian.
    fn digest_into(mut self, out: &mut [u8]) {
        let bits = self.len.wrapping_mul(8);
        let have = (self.len % 64) as usize;
        let pad = if have < 56 { 56 - have } else { 120 - have };
        let mut tail = [0u8; 128];
        tail[0] = 0x80;
        tail[pad..pad + 8].copy_from_slice(&bits.to_be_bytes());
        self.update(&tail[..pad + 8]);
        for (o, w) in out.chunks_exact_mut(4).zip(self.h.as_ref()) {
            o.copy_from_slice(&w.to_be_bytes());
        }
    }
}

impl Sha1State {
    /// The digest of everything absorbed.
    pub fn finalize(self) -> [u8; 20] {
        let mut out = [0u8; 20];
        self.digest_into(&mut out);
        out
    }
}

impl Sha256State {
    /// Bytes of [`Sha256State::to_bytes`].
    pub const BYTES: usize = 32 + 8 + 64;

    /// The digest of everything absorbed.
    pub fn finalize(self) -> Hash {
        let mut out = [0u8; 32];
        self.digest_into(&mut out);
        out
    }

    /// The state as bytes, for another process's [`Sha256State::from_bytes`].
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        for (o, w) in out[..32].chunks_exact_mut(4).zip(self.h) {
            o.copy_from_slice(&w.to_le_bytes());
        }
        out[32..40].copy_from_slice(&self.len.to_le_bytes());
        out[40..].copy_from_slice(&self.buf);
        out
    }

    /// A state from [`Sha256State::to_bytes`]; `None` unless `b` is one.
    pub fn from_bytes(b: &[u8]) -> Option<Sha256State> {
        if b.len() != Self::BYTES {
            return None;
        }
        let mut h = [0u32; 8];
        for (w, c) in h.iter_mut().zip(b[..32].chunks_exact(4)) {
            *w = u32::from_le_bytes(c.try_into().ok()?);
        }
        let len = u64::from_le_bytes(b[32..40].try_into().ok()?);
        Some(BlockState { h, len, buf: b[40..].try_into().ok()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(data: &[u8]) -> u64 {
        let mut x = 0u64;
        for (i, b) in data.iter().enumerate() {
            x ^= (*b as u64) << (8 * (i % 8));
        }
        x
    }

    #[test]
    fn fastxor_matches_byte_lanes_across_arrays() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for cut in [0, 1, 3, 8, 13, 999, 1000] {
            let mut f = FastXor::default();
            f.update(&data[..cut]);
            f.update(&data[cut..]);
            assert_eq!(f.value(), naive(&data), "cut {cut}");
        }
    }

    #[test]
    fn keyid_is_sha256_prefix() {
        let k = [7u8; 32];
        assert_eq!(keyid(&k)[..], sha256(&k)[..8]);
    }

    #[test]
    fn a_sha256_handed_on_at_any_byte_gives_the_one_pass_digest() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for cut in [0, 1, 55, 56, 63, 64, 65, 127, 500, 999, 1000] {
            let mut a = Sha256State::default();
            a.update(&data[..cut]);
            let mut b = Sha256State::from_bytes(&a.to_bytes()).expect("round trip");
            b.update(&data[cut..]);
            assert_eq!(b.finalize(), sha256(&data), "cut at {cut}");
        }
        assert_eq!(Sha256State::default().finalize(), sha256(b""));
        assert!(Sha256State::from_bytes(&[0; 10]).is_none());
    }

    /// `data` fed `sa` and `sb` bytes a step to two digests side by side,
    /// the second after `prefix`.
    fn fed_in_pairs<H: Rounds>(data: &[u8], prefix: &[u8], sa: usize, sb: usize) -> (BlockState<H>, BlockState<H>) {
        let (mut a, mut b) = (BlockState::<H>::default(), BlockState::<H>::default());
        b.update(prefix);
        let (mut ia, mut ib) = (0, 0);
        while ia < data.len() || ib < data.len() {
            let (na, nb) = ((ia + sa).min(data.len()), (ib + sb).min(data.len()));
            BlockState::update_pair(&mut a, &data[ia..na], &mut b, &data[ib..nb]);
            (ia, ib) = (na, nb);
        }
        (a, b)
    }

    #[test]
    fn digests_fed_in_pairs_at_any_offsets_are_the_digests_fed_alone() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
        let prefix = b"an arr line";
        let mut alone = prefix.to_vec();
        alone.extend_from_slice(&data);
        let sha1 = |d: &[u8]| -> [u8; 20] { sha1::Sha1::digest(d).into() };
        // Steps of each feed: whole blocks, partial ones, and ones that
        // leave the two digests at different offsets within a block.
        for (sa, sb) in [(64, 64), (1, 1), (100, 37), (3, 200), (640, 129), (5000, 1)] {
            let (a, b) = fed_in_pairs::<crate::crypto::sha_pair::Sha256>(&data, prefix, sa, sb);
            assert_eq!((a.finalize(), b.finalize()), (sha256(&data), sha256(&alone)), "steps {sa} and {sb}");
            // SHA-1 the same way, against the `sha1` crate.
            let (a, b) = fed_in_pairs::<crate::crypto::sha_pair::Sha1>(&data, prefix, sa, sb);
            assert_eq!((a.finalize(), b.finalize()), (sha1(&data), sha1(&alone)), "SHA-1, steps {sa} and {sb}");
        }
        assert_eq!(Sha1State::default().finalize(), sha1(b""));
    }

    #[test]
    fn files_hashed_two_at_a_time_give_each_file_s_digest_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = [0usize, 1, 1 << 20, (1 << 20) + 1, 3 << 20 | 5, 64, 100_000];
        let mut paths = Vec::new();
        let mut want = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..*n).map(|k| (k * 13 + i) as u8).collect();
            let p = dir.path().join(format!("f{i}"));
            std::fs::write(&p, &data).unwrap();
            want.push(sha256(&data));
            paths.push(p);
        }
        let open = |p: &std::path::Path| std::fs::File::open(p).map_err(|e| Error::io(p, e));
        assert_eq!(sha256_files(&paths, open).unwrap(), want);
        paths.insert(3, dir.path().join("missing"));
        let e = sha256_files(&paths, open).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn shares_stand_in_for_the_arrays_they_were_taken_from() {
        let data: Vec<u8> = (0..301u32).map(|i| (i * 13 + 1) as u8).collect();
        let mut whole = FastXor::default();
        let mut shares = Vec::new();
        for cut in [(0, 5), (5, 150), (150, 301)] {
            whole.begin_array();
            whole.update(&data[cut.0..cut.1 / 2 + cut.0 / 2]);
            whole.update(&data[cut.1 / 2 + cut.0 / 2..cut.1]);
            let mut alone = FastXor::default();
            alone.update(&data[cut.0..cut.1]);
            assert_eq!(whole.array_share(), alone.value());
            shares.push((cut.1 - cut.0, alone.value()));
        }
        let mut mixed = FastXor::default();
        mixed.add_share(shares[0].0 as u64, shares[0].1);
        mixed.begin_array();
        mixed.update(&data[5..150]);
        mixed.add_share(shares[2].0 as u64, shares[2].1);
        assert_eq!(mixed.value(), whole.value());
    }

    #[test]
    fn fastxor_of_fragments_is_fastxor_of_the_whole() {
        let data: Vec<u8> = (0..301u32).map(|i| (i * 13 + 1) as u8).collect();
        let mut whole = FastXor::default();
        whole.update(&data);
        let parts = fastxor_at(0, &data[..17]) ^ fastxor_at(17, &data[17..200]) ^ fastxor_at(200, &data[200..]);
        assert_eq!(parts, whole.value());
    }
}
