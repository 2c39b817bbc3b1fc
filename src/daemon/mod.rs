//! The snapshot daemon: training loops publish generations through RCU; a
//! background thread snapshots them into a ring, commits and pushes them.

use std::sync::Arc;

pub mod pipeline;
pub mod pushes;
pub mod server;
pub mod snapshotter;

/// Where the daemon reports what goes wrong in the background (a failed
/// push, a snapshot that could not be written): the library never prints;
/// `wtxt daemon` passes a sink that writes stderr.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;
