//! Hashing, message authentication and signatures as the profile pins them.
#![forbid(unsafe_code)]

pub mod armor;
pub mod digest;
pub mod ec;
pub mod mac;
pub mod sha_pair;
pub mod sign;
