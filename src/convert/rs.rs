//! Reed-Solomon over GF(2^8) as FOLD's `rs(N)` uses it (the `reedsolo`
//! conventions: primitive polynomial 0x11d, generator 2, first consecutive
//! root 0, the first byte of a block is the highest-degree coefficient).
//!
//! A payload is cut into blocks of `255 - N` bytes (the last may be
//! shorter); each block gets `N` parity bytes, and the parities are stored one
//! after another after the payload. Decoding corrects up to `N / 2` wrong
//! bytes per block and refuses anything it cannot prove correct (the
//! syndromes of the repaired block must all be zero).
#![forbid(unsafe_code)]

/// Exponent and logarithm tables of GF(2^8) with polynomial 0x11d.
struct Gf {
    exp: [u8; 512],
    log: [u8; 256],
}

const fn tables() -> Gf {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= 0x11d;
        }
        i += 1;
    }
    while i < 512 {
        exp[i] = exp[i - 255];
        i += 1;
    }
    Gf { exp, log }
}

static GF: Gf = tables();

fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    GF.exp[GF.log[a as usize] as usize + GF.log[b as usize] as usize]
}

fn div(a: u8, b: u8) -> u8 {
    debug_assert!(b != 0);
    if a == 0 {
        return 0;
    }
    GF.exp[(GF.log[a as usize] as usize + 255 - GF.log[b as usize] as usize) % 255]
}

fn pow2(e: usize) -> u8 {
    GF.exp[e % 255]
}

fn inv(a: u8) -> u8 {
    div(1, a)
}

/// Generator polynomial prod_{i<nsym} (x - 2^i), highest degree first.
fn generator(nsym: usize) -> Vec<u8> {
    let mut g = vec![1u8];
    for i in 0..nsym {
        let root = pow2(i);
        let mut next = vec![0u8; g.len() + 1];
        for (j, &c) in g.iter().enumerate() {
            next[j] ^= c;
            next[j + 1] ^= mul(c, root);
        }
        g = next;
    }
    g
}

/// Data bytes per block for `nsym` parity bytes.
pub fn block_len(nsym: usize) -> usize {
    255 - nsym
}

/// Parity length for a payload: `nsym` per block.
pub fn parity_len(payload: usize, nsym: usize) -> usize {
    payload.div_ceil(block_len(nsym)) * nsym
}

/// The parity bytes of `data`, block after block (the streaming
/// [`Encoder`] in one call, for the tests).
#[cfg(test)]
pub fn encode(data: &[u8], nsym: usize) -> Vec<u8> {
    let mut e = Encoder::new(nsym);
    e.update(data);
    e.finish()
}

/// Parity computed as the payload goes by (a chunk compressed as a stream):
/// the same bytes [`encode`] gives for the whole payload.
pub struct Encoder {
    g: Vec<u8>,
    nsym: usize,
    /// The current block's remainder, and how many of its bytes came.
    rem: Vec<u8>,
    filled: usize,
    /// Parity of the blocks completed and not yet taken.
    parity: Vec<u8>,
}

impl Encoder {
    /// An encoder for `nsym` parity bytes per block (1..=254).
    pub fn new(nsym: usize) -> Encoder {
        assert!((1..255).contains(&nsym), "nsym must be 1..=254");
        Encoder { g: generator(nsym), nsym, rem: vec![0; nsym], filled: 0, parity: Vec::new() }
    }

    /// Takes the next payload bytes.
    pub fn update(&mut self, data: &[u8]) {
        let nsym = self.nsym;
        for &b in data {
            // Remainder of block(x) * x^nsym divided by g(x), by synthetic division.
            let coef = b ^ self.rem[0];
            self.rem.rotate_left(1);
            self.rem[nsym - 1] = 0;
            if coef != 0 {
                for (r, &gj) in self.rem.iter_mut().zip(&self.g[1..]) {
                    *r ^= mul(gj, coef);
                }
            }
            self.filled += 1;
            if self.filled == block_len(nsym) {
                self.parity.extend_from_slice(&self.rem);
                self.rem.fill(0);
                self.filled = 0;
            }
        }
    }

    /// The parity of the blocks completed since the last call.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.parity)
    }

    /// The rest of the parity, the last (short) block's included.
    pub fn finish(mut self) -> Vec<u8> {
        if self.filled > 0 {
            self.parity.extend_from_slice(&self.rem);
        }
        self.parity
    }
}

/// Why a payload could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum RsError {
    /// The parity length does not fit the payload length.
    Length {
        /// Parity bytes expected.
        expected: usize,
        /// Parity bytes found.
        found: usize,
    },
    /// Block `block` has more errors than `nsym / 2`.
    Uncorrectable {
        /// The block.
        block: usize,
    },
}

/// Repairs `data` in place from its `parity`; returns how many bytes of the
/// payload were wrong (errors in the parity itself are corrected too but
/// not counted).
pub fn correct(data: &mut [u8], parity: &[u8], nsym: usize) -> Result<usize, RsError> {
    let expected = parity_len(data.len(), nsym);
    if !(1..255).contains(&nsym) || parity.len() != expected {
        return Err(RsError::Length { expected, found: parity.len() });
    }
    let k = block_len(nsym);
    let mut fixed = 0;
    let mut word = Vec::with_capacity(255);
    for (bi, (block, par)) in data.chunks_mut(k).zip(parity.chunks(nsym)).enumerate() {
        word.clear();
        word.extend_from_slice(block);
        word.extend_from_slice(par);
        let positions = correct_word(&mut word, nsym).ok_or(RsError::Uncorrectable { block: bi })?;
        fixed += positions.iter().filter(|&&p| p < block.len()).count();
        block.copy_from_slice(&word[..block.len()]);
    }
    Ok(fixed)
}

/// Syndromes S_i = word(2^i), i < nsym.
fn syndromes(word: &[u8], nsym: usize) -> Vec<u8> {
    (0..nsym)
        .map(|i| {
            let x = pow2(i);
            word.iter().fold(0u8, |acc, &c| mul(acc, x) ^ c)
        })
        .collect()
}

/// Evaluates a polynomial stored lowest degree first.
fn eval_low(p: &[u8], x: u8) -> u8 {
    p.iter().rev().fold(0u8, |acc, &c| mul(acc, x) ^ c)
}

/// Corrects one codeword in place; returns the positions changed.
fn correct_word(word: &mut [u8], nsym: usize) -> Option<Vec<usize>> {
    let n = word.len();
    let s = syndromes(word, nsym);
    if s.iter().all(|&x| x == 0) {
        return Some(Vec::new());
    }
    // Berlekamp-Massey: error locator Lambda(x), lowest degree first.
    let mut lambda = vec![1u8];
    let mut prev = vec![1u8];
    let mut l = 0usize;
    let mut m = 1usize;
    let mut b = 1u8;
    for r in 0..nsym {
        let mut d = s[r];
        for i in 1..=l.min(lambda.len() - 1) {
            d ^= mul(lambda[i], s[r - i]);
        }
        if d == 0 {
            m += 1;
            continue;
        }
        let coef = div(d, b);
        let mut next = lambda.clone();
        if next.len() < prev.len() + m {
            next.resize(prev.len() + m, 0);
        }
        for (i, &p) in prev.iter().enumerate() {
            next[i + m] ^= mul(coef, p);
        }
        if 2 * l <= r {
            prev = std::mem::replace(&mut lambda, next);
            l = r + 1 - l;
            b = d;
            m = 1;
        } else {
            lambda = next;
            m += 1;
        }
    }
    while lambda.len() > 1 && *lambda.last().expect("non-empty") == 0 {
        lambda.pop();
    }
    let errors = lambda.len() - 1;
    if errors == 0 || 2 * errors > nsym || errors > n {
        return None;
    }
    // Chien search: position j has locator X = 2^(n-1-j); it is an error
    // when Lambda(X^-1) = 0.
    let mut positions = Vec::with_capacity(errors);
    for j in 0..n {
        let x_inv = inv(pow2(n - 1 - j));
        if eval_low(&lambda, x_inv) == 0 {
            positions.push(j);
        }
    }
    if positions.len() != errors {
        return None;
    }
    // Forney: Omega(x) = S(x) Lambda(x) mod x^nsym; with first root 2^0 the
    // magnitude is X * Omega(X^-1) / Lambda'(X^-1).
    let mut omega = vec![0u8; nsym];
    for (i, &si) in s.iter().enumerate() {
        for (j, &lj) in lambda.iter().enumerate() {
            if i + j < nsym {
                omega[i + j] ^= mul(si, lj);
            }
        }
    }
    // Formal derivative in characteristic 2: odd-degree terms shift down.
    let deriv: Vec<u8> = (1..lambda.len()).map(|i| if i % 2 == 1 { lambda[i] } else { 0 }).collect();
    for &j in &positions {
        let x = pow2(n - 1 - j);
        let x_inv = inv(x);
        let den = eval_low(&deriv, x_inv);
        if den == 0 {
            return None;
        }
        word[j] ^= mul(x, div(eval_low(&omega, x_inv), den));
    }
    if syndromes(word, nsym).iter().any(|&x| x != 0) {
        return None;
    }
    Some(positions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::noise;

    #[test]
    fn clean_payloads_decode_unchanged() {
        for (len, nsym) in [(0, 16), (1, 16), (239, 16), (240, 16), (1432, 16), (1430, 32), (5000, 64)] {
            let data = noise(len, len as u64);
            let par = encode(&data, nsym);
            assert_eq!(par.len(), parity_len(len, nsym));
            let mut copy = data.clone();
            assert_eq!(correct(&mut copy, &par, nsym), Ok(0));
            assert_eq!(copy, data);
        }
    }

    #[test]
    fn repairs_up_to_half_the_parity_per_block() {
        for nsym in [2, 16, 32, 64] {
            let data = noise(3 * block_len(nsym) + 17, nsym as u64);
            let par = encode(&data, nsym);
            for t in 1..=nsym / 2 {
                let mut bad = data.clone();
                // t errors in the first block, t in the short last block.
                for e in 0..t {
                    bad[e * 3 % block_len(nsym)] ^= 0x5a ^ e as u8 | 1;
                    let last = 3 * block_len(nsym) + (e % 17);
                    bad[last] = bad[last].wrapping_add(1 + e as u8);
                }
                let mut fixed = bad.clone();
                let n = correct(&mut fixed, &par, nsym).unwrap_or_else(|e| panic!("nsym {nsym} t {t}: {e:?}"));
                assert_eq!(fixed, data, "nsym {nsym} t {t}");
                assert_eq!(n, bad.iter().zip(&data).filter(|(a, b)| a != b).count());
            }
        }
    }

    #[test]
    fn too_many_errors_are_refused_not_miscorrected() {
        let nsym = 16;
        let data = noise(200, 7);
        let par = encode(&data, nsym);
        let mut bad = data.clone();
        for b in bad.iter_mut().take(40) {
            *b ^= 0xff;
        }
        assert!(matches!(correct(&mut bad, &par, nsym), Err(RsError::Uncorrectable { block: 0 })));
        assert!(matches!(correct(&mut bad, &par[1..], nsym), Err(RsError::Length { .. })));
    }

    /// Fed in pieces that cut across blocks, the parity is that of the whole.
    #[test]
    fn streamed_parity_is_the_parity_of_the_whole() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 253) as u8).collect();
        for nsym in [2, 32, 254] {
            let mut e = Encoder::new(nsym);
            let mut got = Vec::new();
            for piece in data.chunks(777) {
                e.update(piece);
                got.extend(e.take());
            }
            got.extend(e.finish());
            assert_eq!(got, encode(&data, nsym), "rs({nsym})");
            assert_eq!(got.len(), parity_len(data.len(), nsym));
        }
    }
}
