//! Two SHA-256 compressions side by side on one core, with the x86 SHA
//! extensions. Each pair of rounds waits on the one before it, so one
//! digest leaves the core's SHA unit idle about half the time; the rounds
//! of two independent digests fill it, and two digests cost about what one
//! does.
//!
//! A crate of its own so that a debug build of `wtxt` still optimizes it:
//! unoptimized, these rounds run some fifty times slower, and `wtxt`'s tests
//! run a debug build over real data. `wtxt::crypto::sha256_pair` is the
//! interface; this crate holds only the rounds.

/// SHA-256's state: eight words, as `sha2::block_api::compress256` keeps it.
pub type State = [u32; 8];

/// Whether this CPU has the SHA extensions (and the SSE the rounds use).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("sha")
            && std::is_x86_feature_detected!("sse4.1")
            && std::is_x86_feature_detected!("ssse3")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Compresses `a_blocks` into `a` and `b_blocks` into `b` (runs of the same
/// length), their rounds interleaved. Returns `false`, touching nothing,
/// where [`available`] is false.
///
/// # Panics
/// When the two runs differ in length.
pub fn compress2(a: &mut State, a_blocks: &[[u8; 64]], b: &mut State, b_blocks: &[[u8; 64]]) -> bool {
    assert_eq!(a_blocks.len(), b_blocks.len(), "two runs of the same length");
    if !available() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `compress` needs the `sha`, `sse4.1` and `ssse3` features,
    // which `available` detected.
    unsafe {
        x86::compress(a, a_blocks, b, b_blocks)
    };
    cfg!(target_arch = "x86_64")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::State;

    /// SHA-256's round constants (FIPS 180-4, 4.2.2).
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];

    /// Eight state words as the two registers `sha256rnds2` works on.
    #[target_feature(enable = "sha,sse4.1,ssse3")]
    fn load_state(s: &State) -> [__m128i; 2] {
        let dcba = _mm_set_epi32(s[3] as i32, s[2] as i32, s[1] as i32, s[0] as i32);
        let hgfe = _mm_set_epi32(s[7] as i32, s[6] as i32, s[5] as i32, s[4] as i32);
        let cdab = _mm_shuffle_epi32(dcba, 0xB1);
        let efgh = _mm_shuffle_epi32(hgfe, 0x1B);
        [_mm_alignr_epi8(cdab, efgh, 8), _mm_blend_epi16(efgh, cdab, 0xF0)]
    }

    #[target_feature(enable = "sha,sse4.1,ssse3")]
    fn store_state(s: &mut State, [abef, cdgh]: [__m128i; 2]) {
        let feba = _mm_shuffle_epi32(abef, 0x1B);
        let dchg = _mm_shuffle_epi32(cdgh, 0xB1);
        let dcba = _mm_blend_epi16(feba, dchg, 0xF0);
        let hgef = _mm_alignr_epi8(dchg, feba, 8);
        let mut w = [0u32; 8];
        for (i, v) in [dcba, hgef].into_iter().enumerate() {
            w[4 * i] = _mm_extract_epi32(v, 0) as u32;
            w[4 * i + 1] = _mm_extract_epi32(v, 1) as u32;
            w[4 * i + 2] = _mm_extract_epi32(v, 2) as u32;
            w[4 * i + 3] = _mm_extract_epi32(v, 3) as u32;
        }
        *s = w;
    }

    /// A block's sixteen words, big-endian, four to a register.
    #[target_feature(enable = "sha,sse4.1,ssse3")]
    fn load_block(block: &[u8; 64]) -> [__m128i; 4] {
        let swap = _mm_set_epi64x(0x0C0D_0E0F_0809_0A0B, 0x0405_0607_0001_0203);
        let p: *const __m128i = block.as_ptr().cast();
        // SAFETY: the four 16-byte loads stay inside the 64-byte block;
        // `loadu` takes any alignment.
        std::array::from_fn(|i| _mm_shuffle_epi8(unsafe { _mm_loadu_si128(p.add(i)) }, swap))
    }

    #[target_feature(enable = "sha,sse4.1,ssse3")]
    pub(super) fn compress(a: &mut State, a_blocks: &[[u8; 64]], b: &mut State, b_blocks: &[[u8; 64]]) {
        let [mut abef0, mut cdgh0] = load_state(a);
        let [mut abef1, mut cdgh1] = load_state(b);
        for (x, y) in a_blocks.iter().zip(b_blocks) {
            let (save_abef0, save_cdgh0, save_abef1, save_cdgh1) = (abef0, cdgh0, abef1, cdgh1);
            let mut w0 = load_block(x);
            let mut w1 = load_block(y);
            // Four rounds of each digest in turn: one's rounds run while the
            // other's wait on theirs.
            macro_rules! rounds {
                ($r:expr) => {{
                    let r: usize = $r;
                    let k =
                        _mm_set_epi32(K[4 * r + 3] as i32, K[4 * r + 2] as i32, K[4 * r + 1] as i32, K[4 * r] as i32);
                    macro_rules! one {
                        ($w:ident, $abef:ident, $cdgh:ident) => {{
                            if r >= 4 {
                                let j = r % 4;
                                let t = _mm_add_epi32(
                                    _mm_sha256msg1_epu32($w[j], $w[(j + 1) % 4]),
                                    _mm_alignr_epi8($w[(j + 3) % 4], $w[(j + 2) % 4], 4),
                                );
                                $w[j] = _mm_sha256msg2_epu32(t, $w[(j + 3) % 4]);
                            }
                            let t = _mm_add_epi32($w[r % 4], k);
                            $cdgh = _mm_sha256rnds2_epu32($cdgh, $abef, t);
                            $abef = _mm_sha256rnds2_epu32($abef, $cdgh, _mm_shuffle_epi32(t, 0x0E));
                        }};
                    }
                    one!(w0, abef0, cdgh0);
                    one!(w1, abef1, cdgh1);
                }};
            }
            rounds!(0);
            rounds!(1);
            rounds!(2);
            rounds!(3);
            rounds!(4);
            rounds!(5);
            rounds!(6);
            rounds!(7);
            rounds!(8);
            rounds!(9);
            rounds!(10);
            rounds!(11);
            rounds!(12);
            rounds!(13);
            rounds!(14);
            rounds!(15);
            abef0 = _mm_add_epi32(abef0, save_abef0);
            cdgh0 = _mm_add_epi32(cdgh0, save_cdgh0);
            abef1 = _mm_add_epi32(abef1, save_abef1);
            cdgh1 = _mm_add_epi32(cdgh1, save_cdgh1);
        }
        store_state(a, [abef0, cdgh0]);
        store_state(b, [abef1, cdgh1]);
    }
}
