//! Hashing, message authentication and signatures as the profile pins them.

pub mod digest;
pub mod mac;
pub mod sign;
