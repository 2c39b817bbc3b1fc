//! Git integration: the Merkle chain through history.

pub mod diff;
pub mod history;
pub mod hooks;
pub mod install;
pub mod merge;
