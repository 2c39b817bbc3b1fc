//! Two SHA-256 compressions side by side on one core.
//!
//! With the x86 SHA extensions each pair of rounds waits on the one before
//! it, so a core computing one digest leaves its SHA unit idle about half
//! the time. Interleaving the rounds of two independent digests fills it:
//! two digests cost what one does (docs/PERFORMANCE.md, "SHA-256 in
//! pairs"). The format asks for several digests of the same bytes (each
//! chunk, each array, `sha256_all`, the HMAC), so the writer and the
//! verifier pair them. The interleaved rounds are the `wtxt-sha256-pair`
//! crate's (`crates/sha256-pair`, a crate so that debug builds optimize
//! it); without the extensions the two run one after the other through
//! `sha2`, with the same results.

pub use wtxt_sha256_pair::State;

/// Compresses `a_blocks` into `a` and `b_blocks` into `b`. The blocks both
/// have are interleaved; the rest of the longer run goes alone.
pub fn compress_pair(a: &mut State, a_blocks: &[[u8; 64]], b: &mut State, b_blocks: &[[u8; 64]]) {
    compress_pair_with(true, a, a_blocks, b, b_blocks)
}

/// [`compress_pair`], interleaved only when `interleave` (tests reach both ways).
fn compress_pair_with(interleave: bool, a: &mut State, a_blocks: &[[u8; 64]], b: &mut State, b_blocks: &[[u8; 64]]) {
    let both = a_blocks.len().min(b_blocks.len());
    let both =
        if interleave && wtxt_sha256_pair::compress2(a, &a_blocks[..both], b, &b_blocks[..both]) { both } else { 0 };
    sha2::block_api::compress256(a, &a_blocks[both..]);
    sha2::block_api::compress256(b, &b_blocks[both..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    const IV: State = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

    fn blocks(n: usize, seed: u32) -> Vec<[u8; 64]> {
        (0..n).map(|i| std::array::from_fn(|j| (((i * 64 + j) as u32).wrapping_mul(2654435761) ^ seed) as u8)).collect()
    }

    #[test]
    fn a_pair_gives_each_digest_s_own_state_either_way_and_for_uneven_runs() {
        for (na, nb) in [(0, 0), (1, 0), (0, 3), (1, 1), (5, 5), (7, 2), (2, 9)] {
            let (xa, xb) = (blocks(na, 1), blocks(nb, 2));
            let mut want_a = IV;
            sha2::block_api::compress256(&mut want_a, &xa);
            let mut want_b = [1, 2, 3, 4, 5, 6, 7, 8];
            sha2::block_api::compress256(&mut want_b, &xb);
            for interleave in [false, true] {
                let (mut a, mut b) = (IV, [1, 2, 3, 4, 5, 6, 7, 8]);
                compress_pair_with(interleave, &mut a, &xa, &mut b, &xb);
                assert_eq!((a, b), (want_a, want_b), "{na} and {nb} blocks, interleaved: {interleave}");
            }
        }
    }
}
