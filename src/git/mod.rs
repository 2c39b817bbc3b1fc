//! Git integration: the Merkle chain through history.

pub mod diff;
pub mod filter;
pub mod history;
pub mod hooks;
pub mod install;
pub mod merge;
