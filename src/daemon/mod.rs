//! The snapshot daemon: training loops publish generations through RCU; a
//! background thread snapshots them into a ring, commits and pushes them.

pub(crate) mod log;
pub(crate) mod pipeline;
pub(crate) mod pushes;
pub(crate) mod server;
pub(crate) mod snapshotter;

pub use log::Log;
pub use pipeline::{Pipeline, PipelineConfig, Wal};
pub use server::{parse_request, DaemonConfig, Request};
pub use snapshotter::{Generation, Outcomes, Queue, Snapshotter, Status};
