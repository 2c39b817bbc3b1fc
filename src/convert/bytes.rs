//! Byte-layout helpers shared by the binary containers: fixed-width
//! integers at an offset (callers have checked that `at + width` lies
//! inside `b`), alignment, and runs of zero bytes for padding.
#![forbid(unsafe_code)]

macro_rules! int_at {
    ($name:ident, $t:ty, $from:ident) => {
        #[doc = concat!("The `", stringify!($t), "` at `b[at..]` (", stringify!($from), ").")]
        pub fn $name(b: &[u8], at: usize) -> $t {
            <$t>::$from(b[at..at + std::mem::size_of::<$t>()].try_into().expect("width checked by the caller"))
        }
    };
}

int_at!(le_u16, u16, from_le_bytes);
int_at!(le_u32, u32, from_le_bytes);
int_at!(le_u64, u64, from_le_bytes);
int_at!(be_u32, u32, from_be_bytes);
int_at!(be_u64, u64, from_be_bytes);

/// `x` rounded up to a multiple of `a`.
pub fn align(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// Hands `n` zero bytes to `f`, a page at a time.
pub fn each_zero_piece(n: u64, f: &mut dyn FnMut(&[u8]) -> crate::error::Result<()>) -> crate::error::Result<()> {
    let zeros = [0u8; 4096];
    let mut left = n;
    while left > 0 {
        let k = left.min(zeros.len() as u64) as usize;
        f(&zeros[..k])?;
        left -= k as u64;
    }
    Ok(())
}
