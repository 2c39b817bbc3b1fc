//! The daemon's one way of saying what went wrong off the caller's thread.

use std::sync::Arc;

/// Where the daemon reports what goes wrong in the background (a failed
/// push, a snapshot that could not be written): the library never prints;
/// `wtxt daemon` passes a sink that writes stderr.
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;
