//! Hashing, message authentication and signatures as the profile pins them.
//! Unsafe code is forbidden in each module but `sha256_pair`, whose SIMD
//! rounds allow it in their x86 module.

pub mod armor;
pub mod digest;
pub mod ec;
pub mod mac;
pub mod sha256_pair;
pub mod sign;
