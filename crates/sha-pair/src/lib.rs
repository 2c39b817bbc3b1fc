//! Two SHA-256 or two SHA-1 compressions side by side on one core, with
//! the x86 SHA extensions. Each step of rounds waits on the one before it,
//! so one digest leaves the core's SHA unit idle much of the time; the
//! rounds of two independent digests fill it (two SHA-256 digests cost
//! about 1.1 times one; two SHA-1 digests about 1.2 times one).
//!
//! A crate of its own so that a debug build of `wtxt` still optimizes it:
//! unoptimized, these rounds run some fifty times slower, and `wtxt`'s tests
//! run a debug build over real data. `wtxt::crypto::sha_pair` is the
//! interface; this crate holds only the rounds.

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

/// A hash's module: its state and its two-way compression, the rounds
/// being `x86::$rounds`.
macro_rules! two_way {
    ($(#[$doc:meta])* $module:ident, $state:ty, $rounds:ident) => {
        $(#[$doc])*
        pub mod $module {
            /// The chaining state, as the hash's RustCrypto crate keeps it.
            pub type State = $state;

            /// Compresses `a_blocks` into `a` and `b_blocks` into `b` (runs
            /// of the same length), their rounds interleaved. Returns
            /// `false`, touching nothing, where [`crate::available`] is false.
            ///
            /// # Panics
            /// When the two runs differ in length.
            pub fn compress2(a: &mut State, a_blocks: &[[u8; 64]], b: &mut State, b_blocks: &[[u8; 64]]) -> bool {
                assert_eq!(a_blocks.len(), b_blocks.len(), "two runs of the same length");
                if !crate::available() {
                    return false;
                }
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the rounds need the `sha`, `sse4.1` and `ssse3`
                // features, which `available` detected.
                unsafe {
                    crate::x86::$rounds(a, a_blocks, b, b_blocks)
                };
                cfg!(target_arch = "x86_64")
            }
        }
    };
}

two_way!(
    /// Two SHA-256 compressions (state: eight words).
    sha256,
    [u32; 8],
    sha256
);
two_way!(
    /// Two SHA-1 compressions (state: five words).
    sha1,
    [u32; 5],
    sha1
);

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::{sha1, sha256};

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
    fn load_state(s: &sha256::State) -> [__m128i; 2] {
        let dcba = _mm_set_epi32(s[3] as i32, s[2] as i32, s[1] as i32, s[0] as i32);
        let hgfe = _mm_set_epi32(s[7] as i32, s[6] as i32, s[5] as i32, s[4] as i32);
        let cdab = _mm_shuffle_epi32(dcba, 0xB1);
        let efgh = _mm_shuffle_epi32(hgfe, 0x1B);
        [_mm_alignr_epi8(cdab, efgh, 8), _mm_blend_epi16(efgh, cdab, 0xF0)]
    }

    #[target_feature(enable = "sha,sse4.1,ssse3")]
    fn store_state(s: &mut sha256::State, [abef, cdgh]: [__m128i; 2]) {
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

    /// A block's sixteen words, big-endian, four to a register: the lowest
    /// word first (`swap` bytes within each word: SHA-256's order), or
    /// the highest (the whole register reversed: SHA-1's).
    #[target_feature(enable = "sha,sse4.1,ssse3")]
    fn load_block(block: &[u8; 64], swap: __m128i) -> [__m128i; 4] {
        let p: *const __m128i = block.as_ptr().cast();
        // SAFETY: the four 16-byte loads stay inside the 64-byte block;
        // `loadu` takes any alignment.
        std::array::from_fn(|i| _mm_shuffle_epi8(unsafe { _mm_loadu_si128(p.add(i)) }, swap))
    }

    #[target_feature(enable = "sha,sse4.1,ssse3")]
    pub(super) fn sha256(a: &mut sha256::State, a_blocks: &[[u8; 64]], b: &mut sha256::State, b_blocks: &[[u8; 64]]) {
        let swap = _mm_set_epi64x(0x0C0D_0E0F_0809_0A0B, 0x0405_0607_0001_0203);
        let [mut abef0, mut cdgh0] = load_state(a);
        let [mut abef1, mut cdgh1] = load_state(b);
        for (x, y) in a_blocks.iter().zip(b_blocks) {
            let (save_abef0, save_cdgh0, save_abef1, save_cdgh1) = (abef0, cdgh0, abef1, cdgh1);
            let mut w0 = load_block(x, swap);
            let mut w1 = load_block(y, swap);
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

    /// SHA-1's state as `sha1rnds4` works on it: A-D in one register
    /// (A highest), E in the highest word of another.
    #[target_feature(enable = "sha,sse4.1,ssse3")]
    fn load_sha1(s: &sha1::State) -> (__m128i, __m128i) {
        let w = |i: usize| s[i] as i32;
        (_mm_set_epi32(w(0), w(1), w(2), w(3)), _mm_set_epi32(w(4), 0, 0, 0))
    }

    #[target_feature(enable = "sha,sse4.1,ssse3")]
    fn store_sha1(s: &mut sha1::State, abcd: __m128i, e: __m128i) {
        let w = |v: __m128i, i: i32| match i {
            0 => _mm_extract_epi32(v, 0) as u32,
            1 => _mm_extract_epi32(v, 1) as u32,
            2 => _mm_extract_epi32(v, 2) as u32,
            _ => _mm_extract_epi32(v, 3) as u32,
        };
        *s = [w(abcd, 3), w(abcd, 2), w(abcd, 1), w(abcd, 0), w(e, 3)];
    }

    #[target_feature(enable = "sha,sse4.1,ssse3")]
    pub(super) fn sha1(a: &mut sha1::State, a_blocks: &[[u8; 64]], b: &mut sha1::State, b_blocks: &[[u8; 64]]) {
        let swap = _mm_set_epi64x(0x0001_0203_0405_0607, 0x0809_0a0b_0c0d_0e0f);
        let (mut abcd0, mut e0) = load_sha1(a);
        let (mut abcd1, mut e1) = load_sha1(b);
        for (x, y) in a_blocks.iter().zip(b_blocks) {
            let (save_abcd0, save_e0, save_abcd1, save_e1) = (abcd0, e0, abcd1, e1);
            let mut w0 = load_block(x, swap);
            let mut w1 = load_block(y, swap);
            // The state at the start of the four rounds before: its A,
            // turned 30 bits, is the next four rounds' E (`sha1nexte`).
            let (mut before0, mut before1) = (abcd0, abcd1);
            abcd0 = _mm_sha1rnds4_epu32(abcd0, _mm_add_epi32(e0, w0[0]), 0);
            abcd1 = _mm_sha1rnds4_epu32(abcd1, _mm_add_epi32(e1, w1[0]), 0);
            // Four rounds of each digest in turn (rounds 4g to 4g + 3, with
            // the function of rounds 20f on), words 4g on scheduled from
            // the sixteen before them.
            macro_rules! rounds {
                ($g:expr, $f:expr) => {{
                    const G: usize = $g;
                    macro_rules! one {
                        ($w:ident, $abcd:ident, $before:ident) => {{
                            if G >= 4 {
                                let t = _mm_sha1msg1_epu32($w[G % 4], $w[(G + 1) % 4]);
                                $w[G % 4] = _mm_sha1msg2_epu32(_mm_xor_si128(t, $w[(G + 2) % 4]), $w[(G + 3) % 4]);
                            }
                            let e = _mm_sha1nexte_epu32($before, $w[G % 4]);
                            $before = $abcd;
                            $abcd = _mm_sha1rnds4_epu32($abcd, e, $f);
                        }};
                    }
                    one!(w0, abcd0, before0);
                    one!(w1, abcd1, before1);
                }};
            }
            rounds!(1, 0);
            rounds!(2, 0);
            rounds!(3, 0);
            rounds!(4, 0);
            rounds!(5, 1);
            rounds!(6, 1);
            rounds!(7, 1);
            rounds!(8, 1);
            rounds!(9, 1);
            rounds!(10, 2);
            rounds!(11, 2);
            rounds!(12, 2);
            rounds!(13, 2);
            rounds!(14, 2);
            rounds!(15, 3);
            rounds!(16, 3);
            rounds!(17, 3);
            rounds!(18, 3);
            rounds!(19, 3);
            e0 = _mm_sha1nexte_epu32(before0, save_e0);
            e1 = _mm_sha1nexte_epu32(before1, save_e1);
            abcd0 = _mm_add_epi32(abcd0, save_abcd0);
            abcd1 = _mm_add_epi32(abcd1, save_abcd1);
        }
        store_sha1(a, abcd0, e0);
        store_sha1(b, abcd1, e1);
    }
}
