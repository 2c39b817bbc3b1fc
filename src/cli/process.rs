//! What the command line has of its process: stdout and stderr.

use crate::error::{Error, Result};
use std::io::Write;

/// Prints what the library noted (repairs, versions, metadata left out).
pub(super) fn warn(notes: &[String]) {
    for n in notes {
        eprintln!("wtxt: warning: {}", crate::error::one_line(n));
    }
}

/// Writes to stdout; a closed pipe (`wtxt inspect f | head`) is not an error.
pub(super) fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::io("stdout", e)),
        _ => Ok(()),
    }
}
