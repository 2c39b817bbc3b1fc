//! The snapshot daemon: training loops publish generations through RCU; a
//! background thread snapshots them into a ring, commits and pushes them.

pub mod pipeline;
pub mod server;
pub mod snapshotter;
