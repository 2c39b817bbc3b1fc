//! Fixed-width integers at a byte offset, for the binary container readers.
//! Callers have checked that `at + width` lies inside `b`.
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
