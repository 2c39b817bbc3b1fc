//! Whole-file operations, one per command, by family: the CLI parses flags
//! into these option structs and calls them; the format's own logic lives
//! in [`crate::format`], the containers' in [`crate::convert`].
#![forbid(unsafe_code)]

mod check;
pub(crate) mod folders;
mod generations;
mod history;
mod inputs;
mod oms;
mod parts;
mod recover;
pub(crate) mod report;
mod revisions;
mod secrets;
mod snapshot;

pub use check::*;
pub use generations::*;
pub use history::*;
pub use inputs::{distinct_outputs, read_header_file};
pub use oms::*;
pub use parts::*;
pub use recover::*;
pub use revisions::*;
pub use secrets::*;
pub use snapshot::*;
