//! Files in and out. Output files appear whole or not at all: written to a temporary file
//! in the destination's folder, fsynced, then renamed over the final name. A
//! crash, a full disk or an error never leaves a partial file under that name.
//!
//! A destination that exists and is not a regular file (`/dev/null`,
//! `/dev/stdout`, a FIFO) is never replaced: the output is staged in an
//! unnamed temporary file and copied to it on commit. Temporary files are
//! removed when the command fails, and on SIGINT/SIGTERM once
//! [`remove_temp_files_on_signals`] is installed; only a `kill -9` (or a
//! power cut) leaves a `.NAME.XXXXXX.tmp` beside the output.
//!
//! Large outputs start their writeback as they go ([`Writeback`]), or skip
//! the page cache altogether when nothing reads them back soon
//! ([`DirectWriter`]).

mod direct;
mod input;
mod lock;
mod out;
mod signals;
mod walk;

pub use direct::{start_writeback, DirectWriter, Writeback};
pub use input::{
    is_device, open_input_file, open_no_follow, open_regular, read_small_file, Links, Skip, Streamed, SKIP_READ_AHEAD,
};
pub(crate) use input::{read_full, ReadAt};
pub use lock::FileLock;
pub use out::{exchange, write_file, AtomicFile, NewFolder, OutputDir};
pub use signals::{exit_cleanly_when_a_mapped_input_shrinks, remove_temp_files_on_signals};
pub use walk::{is_ignored, is_real_dir, list_files, no_links_below};
