//! Where snapshots live on disk: a single file, or a head with its parts
//! in `NAME.wtxt.parts/`. Reading ([`input::WtxtIn`], the one way a WTXT
//! path is opened), writing ([`SnapshotOut`], [`PartedOut`] and
//! [`write_wtxt`], the one entry point every writer of new text goes
//! through: the CLI, the daemon and Python), and the part files themselves
//! ([`PartFiles`]). The split form itself, which knows no files, is
//! [`crate::format::split`].

pub(crate) mod dist;
mod files;
pub(crate) mod input;
mod out;
pub(crate) mod outline;
pub(crate) mod schedule;
mod write;

pub use dist::{ArrayHash, DistOptions, DistWrite, Raw, StagedCheck};
pub use files::*;
pub use input::{PartReading, WtxtIn};
pub use out::*;
pub use outline::outline;
pub use schedule::{plan_tensor, runs, schedule, Run, Schedule, Shard, Step, TensorPlan};
pub use write::write_wtxt;
