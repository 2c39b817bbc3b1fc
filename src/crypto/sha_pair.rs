//! SHA-256 and SHA-1 compressions, two digests side by side on one core.
//!
//! With the x86 SHA extensions each step of rounds waits on the one before
//! it, so a core computing one digest leaves its SHA unit idle much of the
//! time. Interleaving the rounds of two independent digests fills it: two
//! SHA-256 digests cost about 1.1 times one, two SHA-1 digests about 1.2
//! times one (docs/PERFORMANCE.md, "SHA-256 in pairs"). The format asks for
//! several SHA-256 digests of the same bytes (each chunk, each array,
//! `sha256_all`, the HMAC), so the writer and the verifier pair them; the
//! pack writer pairs the SHA-1 blob ids of two files. The interleaved
//! rounds are the `wtxt-sha-pair` crate's (`crates/sha-pair`, a crate so
//! that debug builds optimize it); without the extensions the two run one
//! after the other through `sha2` or `sha1`, with the same results.

/// A hash of 64-byte blocks and big-endian words whose compressions run
/// alone or in pairs.
pub trait Rounds {
    /// The chaining state.
    type State: Copy + std::fmt::Debug + Eq + AsRef<[u32]> + AsMut<[u32]>;
    /// The state before the first block.
    const IV: Self::State;
    /// Compresses `blocks` into `s`.
    fn alone(s: &mut Self::State, blocks: &[[u8; 64]]);
    /// Compresses two runs of one length, interleaved; `false`, with
    /// nothing done, where the CPU lacks the SHA extensions.
    fn interleaved(a: &mut Self::State, a_blocks: &[[u8; 64]], b: &mut Self::State, b_blocks: &[[u8; 64]]) -> bool;
}

/// SHA-256 (FIPS 180-4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sha256;

impl Rounds for Sha256 {
    type State = [u32; 8];
    const IV: [u32; 8] =
        [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

    fn alone(s: &mut [u32; 8], blocks: &[[u8; 64]]) {
        sha2::block_api::compress256(s, blocks);
    }

    fn interleaved(a: &mut [u32; 8], a_blocks: &[[u8; 64]], b: &mut [u32; 8], b_blocks: &[[u8; 64]]) -> bool {
        wtxt_sha_pair::sha256::compress2(a, a_blocks, b, b_blocks)
    }
}

/// SHA-1, as Git names its objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sha1;

impl Rounds for Sha1 {
    type State = [u32; 5];
    const IV: [u32; 5] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0];

    fn alone(s: &mut [u32; 5], blocks: &[[u8; 64]]) {
        sha1::block_api::compress(s, blocks);
    }

    fn interleaved(a: &mut [u32; 5], a_blocks: &[[u8; 64]], b: &mut [u32; 5], b_blocks: &[[u8; 64]]) -> bool {
        wtxt_sha_pair::sha1::compress2(a, a_blocks, b, b_blocks)
    }
}

/// Compresses `a_blocks` into `a` and `b_blocks` into `b`. The blocks both
/// have are interleaved; the rest of the longer run goes alone.
pub fn compress_pair<H: Rounds>(a: &mut H::State, a_blocks: &[[u8; 64]], b: &mut H::State, b_blocks: &[[u8; 64]]) {
    compress_pair_with::<H>(true, a, a_blocks, b, b_blocks)
}

/// [`compress_pair`], interleaved only when `interleave` (tests reach both ways).
fn compress_pair_with<H: Rounds>(
    interleave: bool,
    a: &mut H::State,
    a_blocks: &[[u8; 64]],
    b: &mut H::State,
    b_blocks: &[[u8; 64]],
) {
    let both = a_blocks.len().min(b_blocks.len());
    let both = if interleave && H::interleaved(a, &a_blocks[..both], b, &b_blocks[..both]) { both } else { 0 };
    H::alone(a, &a_blocks[both..]);
    H::alone(b, &b_blocks[both..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(n: usize, seed: u32) -> Vec<[u8; 64]> {
        (0..n).map(|i| std::array::from_fn(|j| (((i * 64 + j) as u32).wrapping_mul(2654435761) ^ seed) as u8)).collect()
    }

    /// Paired and one after the other, `H`'s two states are those its
    /// compressions give alone, from the IV and from another state.
    fn pairs_agree<H: Rounds>(other: H::State) {
        for (na, nb) in [(0, 0), (1, 0), (0, 3), (1, 1), (5, 5), (7, 2), (2, 9)] {
            let (xa, xb) = (blocks(na, 1), blocks(nb, 2));
            let (mut want_a, mut want_b) = (H::IV, other);
            H::alone(&mut want_a, &xa);
            H::alone(&mut want_b, &xb);
            for interleave in [false, true] {
                let (mut a, mut b) = (H::IV, other);
                compress_pair_with::<H>(interleave, &mut a, &xa, &mut b, &xb);
                assert_eq!((a, b), (want_a, want_b), "{na} and {nb} blocks, interleaved: {interleave}");
            }
        }
    }

    #[test]
    fn a_pair_gives_each_digest_s_own_state_either_way_and_for_uneven_runs() {
        pairs_agree::<Sha256>([1, 2, 3, 4, 5, 6, 7, 8]);
        pairs_agree::<Sha1>([1, 2, 3, 4, 5]);
    }
}
