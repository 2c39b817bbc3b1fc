//! Git integration: the Merkle chain through history.

pub mod history;
