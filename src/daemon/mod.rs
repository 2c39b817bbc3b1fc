//! The snapshot daemon: training loops publish generations through RCU; a
//! background thread snapshots them into a ring, commits and pushes them.

use std::sync::Arc;

pub(crate) mod pipeline;
pub(crate) mod pushes;
pub(crate) mod server;
pub(crate) mod snapshotter;

pub use pipeline::{Pipeline, PipelineConfig, Wal};
pub use server::{parse_request, DaemonConfig, Request};
pub use snapshotter::{Generation, Outcomes, Queue, Snapshotter, Status};

/// Where the daemon reports what goes wrong in the background (a failed
/// push, a snapshot that could not be written): the library never prints;
/// `wtxt daemon` passes a sink that writes stderr.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;
