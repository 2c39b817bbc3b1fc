//! A zlib stream of Huffman-coded literals: how wtxt stores a blob in the
//! packs it writes (`odb::pack`). Base64 text has no repeats for LZ77 to
//! find, so a general deflater spends its time looking for them (zlib at
//! level 1: 45 MB/s here) or, in its Huffman-only mode, tallying symbols
//! one by one (zlib-rs: 118-173 MB/s). Here each 1 MiB block gets its own
//! code, fitted to a sample of its bytes when it is text, and is written
//! two bytes a table lookup: about 1.3 GB/s on an idle core, 0.2% smaller
//! than zlib-rs's (no repeats are lost). Any inflater reads it: dynamic-Huffman blocks of
//! literals only (RFC 1951), in a zlib wrapper (RFC 1950).

/// Bytes a block: each gets a code fitted to its own bytes.
pub const BLOCK: usize = 1 << 20;

/// `bytes` as a zlib stream.
pub fn zlib(bytes: &[u8]) -> Vec<u8> {
    zlib_into(bytes, Vec::new())
}

/// `bytes` as a zlib stream written into `out`'s room.
pub fn zlib_into(bytes: &[u8], out: Vec<u8>) -> Vec<u8> {
    let mut z = Zlib::new(out, bytes.len());
    let blocks: Vec<&[u8]> = if bytes.is_empty() { vec![bytes] } else { bytes.chunks(BLOCK).collect() };
    for (i, block) in blocks.iter().enumerate() {
        z.block(block, i + 1 == blocks.len());
    }
    z.finish()
}

/// A zlib stream made a block at a time, so that what it codes need not
/// be held whole (a file read [`BLOCK`] bytes at a time).
pub struct Zlib {
    w: Bits,
    /// Indexed by two bytes: their codes joined, and their length (five
    /// bits); refilled for each block. At four bytes an entry, those of
    /// base64's pairs (about 20 KB) stay in the core's first cache.
    pairs: Box<[u32; 1 << 16]>,
    adler: u32,
}

impl Zlib {
    /// A stream of about `len` bytes coded, written over `out` (its bytes
    /// and room are reused).
    pub fn new(out: Vec<u8>, len: usize) -> Zlib {
        // Base64 codes to about 6 bits a byte: room for it all at once.
        let mut w = Bits::new(out, len / 8 * 7 + 1024);
        // CMF: deflate, 32 KiB window; FLG: fastest, check bits (0x7801 % 31 == 0).
        w.bytes(&[0x78, 0x01]);
        let pairs = vec![0u32; 1 << 16].try_into().expect("1 << 16 words");
        Zlib { w, pairs, adler: 1 }
    }

    /// Codes `block` (at most [`BLOCK`] bytes; an empty one only as the
    /// last), the stream's last when `last`.
    pub fn block(&mut self, block: &[u8], last: bool) {
        debug_assert!(block.len() <= BLOCK);
        write_block(&mut self.w, &mut self.pairs, block, last);
        self.adler = zlib_rs::adler32::adler32(self.adler, block);
    }

    /// The stream, once its last block was coded.
    pub fn finish(mut self) -> Vec<u8> {
        self.w.flush();
        self.w.bytes(&self.adler.to_be_bytes());
        self.w.out.truncate(self.w.at);
        self.w.out
    }
}

/// Bits written least significant first, as deflate orders them, at
/// `out[at..]`. The bytes past `at` are room, written over: filled once
/// (zeros, or the stream `out` held before), not zeroed again for each
/// block.
struct Bits {
    out: Vec<u8>,
    at: usize,
    acc: u64,
    n: u32,
}

impl Bits {
    /// Bits written over `out`, with `room` bytes of it ready.
    fn new(mut out: Vec<u8>, room: usize) -> Bits {
        if out.len() < room {
            out.resize(room, 0);
        }
        Bits { out, at: 0, acc: 0, n: 0 }
    }

    /// At least `n` bytes of room from `at` on (grown by doubling).
    fn room(&mut self, n: usize) -> &mut [u8] {
        if self.out.len() - self.at < n {
            let len = (self.at + n).max(self.out.len() * 2);
            self.out.resize(len, 0);
        }
        &mut self.out[self.at..]
    }

    /// Whole bytes, with no bits held.
    fn bytes(&mut self, b: &[u8]) {
        debug_assert_eq!(self.n, 0);
        self.room(b.len())[..b.len()].copy_from_slice(b);
        self.at += b.len();
    }

    /// The low `len` bits of `value` (at most 32).
    #[inline(always)]
    fn put(&mut self, value: u32, len: u32) {
        self.acc |= (value as u64) << self.n;
        self.n += len;
        if self.n >= 32 {
            let word = (self.acc as u32).to_le_bytes();
            self.room(4)[..4].copy_from_slice(&word);
            self.at += 4;
            self.acc >>= 32;
            self.n -= 32;
        }
    }

    /// Writes the whole bytes held, leaving fewer than 8 bits.
    fn flush_whole_bytes(&mut self) {
        while self.n >= 8 {
            let byte = self.acc as u8;
            self.room(1)[0] = byte;
            self.at += 1;
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Pads to a whole byte and writes what is held.
    fn flush(&mut self) {
        self.n = self.n.next_multiple_of(8);
        self.flush_whole_bytes();
    }
}

/// Huffman code lengths for `freq` (0: symbol unused), none over `max`
/// bits: the frequencies are halved until the longest fits.
fn lengths(freq: &[u32], max: u8) -> Vec<u8> {
    let mut f: Vec<u64> = freq.iter().map(|&x| x as u64).collect();
    loop {
        let l = huffman(&f);
        if l.iter().all(|&x| x <= max) {
            return l;
        }
        for x in f.iter_mut().filter(|x| **x > 0) {
            *x = x.div_ceil(2);
        }
    }
}

/// Huffman's construction: each used symbol's depth in the tree (at least
/// two symbols are used).
fn huffman(f: &[u64]) -> Vec<u8> {
    use std::cmp::Reverse;
    let mut parent = vec![usize::MAX; f.len()];
    let mut heap: std::collections::BinaryHeap<Reverse<(u64, usize)>> =
        f.iter().enumerate().filter(|(_, &w)| w > 0).map(|(i, &w)| Reverse((w, i))).collect();
    while heap.len() > 1 {
        let Reverse((wa, a)) = heap.pop().expect("two nodes");
        let Reverse((wb, b)) = heap.pop().expect("two nodes");
        let node = parent.len();
        parent.push(usize::MAX);
        parent[a] = node;
        parent[b] = node;
        heap.push(Reverse((wa + wb, node)));
    }
    (0..f.len())
        .map(|i| {
            if f[i] == 0 {
                return 0;
            }
            let (mut depth, mut at) = (0u8, i);
            while parent[at] != usize::MAX {
                at = parent[at];
                depth += 1;
            }
            depth
        })
        .collect()
}

/// The canonical codes of `len` (RFC 1951, 3.2.2), bit-reversed for
/// writing least significant bit first.
fn codes(len: &[u8]) -> Vec<u32> {
    let mut count = [0u32; 16];
    for &l in len.iter().filter(|&&l| l > 0) {
        count[l as usize] += 1;
    }
    let mut next = [0u32; 16];
    let mut code = 0;
    for bits in 1..16 {
        code = (code + count[bits - 1]) << 1;
        next[bits] = code;
    }
    len.iter()
        .map(|&l| {
            if l == 0 {
                return 0;
            }
            let c = next[l as usize];
            next[l as usize] += 1;
            c.reverse_bits() >> (32 - l as u32)
        })
        .collect()
}

/// At least two used symbols: a code of one is incomplete, which
/// inflaters refuse for literals.
fn two_used(freq: &mut [u32]) {
    for i in 0..freq.len() {
        if freq.iter().filter(|&&x| x > 0).count() >= 2 {
            return;
        }
        if freq[i] == 0 {
            freq[i] = 1;
        }
    }
}

/// `lens` as code-length symbols (0-15, 16: repeat the last 3-6 times,
/// 17: 3-10 zeros, 18: 11-138 zeros) with their extra bits.
fn run_lengths(lens: &[u8]) -> Vec<(u8, u8)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lens.len() {
        let l = lens[i];
        let mut run = lens[i..].iter().take_while(|&&x| x == l).count();
        i += run;
        if l == 0 {
            while run >= 11 {
                let k = run.min(138);
                out.push((18, (k - 11) as u8));
                run -= k;
            }
            if run >= 3 {
                out.push((17, (run - 3) as u8));
                run = 0;
            }
        } else {
            out.push((l, 0));
            run -= 1;
            while run >= 3 {
                let k = run.min(6);
                out.push((16, (k - 3) as u8));
                run -= k;
            }
        }
        out.extend(std::iter::repeat_n((l, 0), run));
    }
    out
}

/// The order code-length code lengths are written in (RFC 1951, 3.2.7).
const ORDER: [usize; 19] = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

/// Bytes a block's code is fitted to when it is text: a window every
/// [`STRIDE`] bytes, an eighth of the block. Counting every byte cost a
/// third of coding them (measured on a part: 13.6 of 44.5 ms); a code
/// fitted to the sample codes base64 within 0.1% of one fitted to it all.
const WINDOW: usize = 4 << 10;
const STRIDE: usize = 32 << 10;

/// Input bytes coded at a time into room made for them.
const SUB: usize = 64 << 10;

/// Whether every byte of `bytes` is printable ASCII or a newline, as WTXT
/// text is (each 4 KiB reduced without a branch, which vectorizes).
fn is_text(bytes: &[u8]) -> bool {
    bytes
        .chunks(4096)
        .all(|c| c.iter().fold(0u8, |bad, &b| bad | (b.wrapping_sub(0x20) > 0x5e && b != b'\n') as u8) == 0)
}

/// Adds `bytes`' byte counts to `freq`, counted four ways at once and then
/// summed (one running count stalls on repeated bytes).
fn count(bytes: &[u8], freq: &mut [u32; 257]) {
    let mut part = [[0u32; 256]; 4];
    let mut quads = bytes.chunks_exact(4);
    for q in &mut quads {
        part[0][q[0] as usize] += 1;
        part[1][q[1] as usize] += 1;
        part[2][q[2] as usize] += 1;
        part[3][q[3] as usize] += 1;
    }
    for &b in quads.remainder() {
        part[0][b as usize] += 1;
    }
    for (s, f) in freq.iter_mut().take(256).enumerate() {
        *f += part[0][s] + part[1][s] + part[2][s] + part[3][s];
    }
}

/// One dynamic-Huffman block of `block`'s bytes as literals, then its end.
/// Its code is fitted to a sample when the block is text (every text byte
/// gets a code, used or not), to a count of every byte otherwise; no code
/// is longer than 13 bits.
fn write_block(w: &mut Bits, pairs: &mut [u32; 1 << 16], block: &[u8], last: bool) {
    let mut freq = [0u32; 257];
    if is_text(block) {
        for window in block.chunks(STRIDE) {
            count(&window[..window.len().min(WINDOW)], &mut freq);
        }
        freq[b'\n' as usize] += 1;
        freq[0x20..0x7f].iter_mut().for_each(|f| *f += 1);
    } else {
        count(block, &mut freq);
    }
    freq[256] = 1;
    two_used(&mut freq);
    let lit_len = lengths(&freq, 13);
    let lit_code = codes(&lit_len);
    // 257 literal/length codes (HLIT 0), one distance code of length 0: no
    // distances are used.
    let mut all = lit_len.clone();
    all.push(0);
    let symbols = run_lengths(&all);
    let mut cl_freq = [0u32; 19];
    for &(s, _) in &symbols {
        cl_freq[s as usize] += 1;
    }
    two_used(&mut cl_freq);
    let cl_len = lengths(&cl_freq, 7);
    let cl_code = codes(&cl_len);
    let hclen = ORDER.iter().rposition(|&s| cl_len[s] > 0).map_or(4, |p| (p + 1).max(4));
    w.put(last as u32, 1);
    w.put(2, 2);
    w.put(0, 5);
    w.put(0, 5);
    w.put((hclen - 4) as u32, 4);
    for &s in &ORDER[..hclen] {
        w.put(cl_len[s] as u32, 3);
    }
    for &(s, extra) in &symbols {
        w.put(cl_code[s as usize], cl_len[s as usize] as u32);
        match s {
            16 => w.put(extra as u32, 2),
            17 => w.put(extra as u32, 3),
            18 => w.put(extra as u32, 7),
            _ => {}
        }
    }
    // Two bytes at a time: each pair's codes joined in one word of a
    // table, filled for the pairs of bytes with a code only.
    let used: Vec<usize> = (0..256).filter(|&s| lit_len[s] > 0).collect();
    for &a in &used {
        for &b in &used {
            let code = lit_code[a] as u64 | (lit_code[b] as u64) << lit_len[a];
            pairs[a | b << 8] = (code << 5 | (lit_len[a] + lit_len[b]) as u64) as u32;
        }
    }
    // With codes of at most 13 bits, two pairs (52 bits) go on the fewer
    // than 8 the accumulator holds before its whole bytes are stored, as
    // one 8-byte write.
    let (quads, rest) = block.split_at(block.len() / 4 * 4);
    w.flush_whole_bytes();
    let (mut acc, mut n) = (w.acc, w.n);
    for sub in quads.chunks(SUB) {
        let out = w.room(sub.len() / 4 * 7 + 8);
        let mut at = 0;
        for q in sub.chunks_exact(4) {
            let v = u32::from_le_bytes([q[0], q[1], q[2], q[3]]);
            for pair in [v & 0xffff, v >> 16] {
                let t = pairs[pair as usize];
                acc |= ((t >> 5) as u64) << n;
                n += t & 0x1f;
            }
            // n < 64: at most 7 bits held and 52 added.
            out[at..at + 8].copy_from_slice(&acc.to_le_bytes());
            let whole = n / 8;
            at += whole as usize;
            acc >>= 8 * whole;
            n &= 7;
        }
        w.at += at;
    }
    (w.acc, w.n) = (acc, n);
    for &b in rest {
        w.put(lit_code[b as usize], lit_len[b as usize] as u32);
    }
    w.put(lit_code[256], lit_len[256] as u32);
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use crate::testing::noise;

    fn inflate(z: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(z).read_to_end(&mut out).expect("a valid zlib stream");
        out
    }

    #[test]
    fn every_kind_of_input_inflates_back() {
        let b64: Vec<u8> = noise(3 << 20, 7)
            .chunks(57)
            .flat_map(|c| {
                let mut l = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, c).into_bytes();
                l.push(b'\n');
                l
            })
            .collect();
        // Fibonacci counts push Huffman's code past 15 bits.
        let (mut a, mut b) = (1usize, 1usize);
        let mut skewed = Vec::new();
        for s in 0..30u8 {
            skewed.extend(std::iter::repeat_n(s, a));
            (a, b) = (b, a + b);
        }
        let mut freq = [0u32; 257];
        skewed.iter().for_each(|&b| freq[b as usize] += 1);
        freq[256] = 1;
        assert_eq!(super::lengths(&freq, 15).into_iter().max(), Some(15), "codes of 15 bits");
        // The rarest symbols (the longest codes) side by side, after and
        // around the common ones.
        let mut rare_in_a_row = skewed.clone();
        rare_in_a_row.extend(skewed.iter().take(64).rev());
        rare_in_a_row.splice(5..5, [0u8, 1, 0, 1, 2, 0, 1, 0]);
        // Text whose rarest bytes lie outside the windows a text block's
        // code is fitted to (they get a code all the same), and text with
        // one byte that is not, late in a block (coded from a full count).
        let mut rare_unsampled = b64.clone();
        rare_unsampled[super::WINDOW + 7] = b'~';
        rare_unsampled[super::STRIDE + super::WINDOW + 1] = b'!';
        let mut one_binary = b64.clone();
        one_binary[super::BLOCK + 900_000] = 0;
        for (i, text) in [(true, &b64), (true, &rare_unsampled), (false, &one_binary)].into_iter().enumerate() {
            assert_eq!(super::is_text(&text.1[super::BLOCK..2 * super::BLOCK]), text.0, "case {i}");
        }
        for input in [
            Vec::new(),
            vec![b'x'],
            vec![0u8; 100_000],
            noise(2_500_000, 3),
            b64.clone(),
            rare_unsampled,
            one_binary,
            skewed,
            rare_in_a_row,
        ] {
            let z = super::zlib(&input);
            assert_eq!(inflate(&z), input, "{} bytes", input.len());
        }
        // Base64 comes out where zlib's Huffman-only mode puts it.
        let ours = super::zlib(&b64).len() as f64;
        let mut theirs = vec![0u8; zlib_rs::compress_bound(b64.len())];
        let config =
            zlib_rs::DeflateConfig { level: 1, strategy: zlib_rs::Strategy::HuffmanOnly, ..Default::default() };
        let theirs = zlib_rs::compress_slice(&mut theirs, &b64, config).0.len() as f64;
        assert!(ours < theirs * 1.005, "{ours} against {theirs}");
    }
}
