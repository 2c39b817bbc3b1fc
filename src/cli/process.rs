//! What the command line has of its process: stdout, stderr, and the path
//! it was started as.

use std::io::Write;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// The command line's first word, as this process was started.
pub(super) static INVOKED_AS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The command Git should run for wtxt's hooks and drivers: this binary, or,
/// when the command line runs inside another program (the Python package's
/// `wtxt` script, whose process is Python's), the script it was started as.
pub(super) fn command_path() -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| Error::io("wtxt", e))?;
    if exe.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("wtxt")) {
        return Ok(exe);
    }
    let invoked = INVOKED_AS.get().cloned().unwrap_or_default();
    let found = if invoked.components().count() > 1 {
        Some(std::path::absolute(&invoked).map_err(|e| Error::io(&invoked, e))?)
    } else {
        // A bare name: the first on PATH.
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(&invoked)).find(|c| c.is_file()))
    };
    found.filter(|p| p.is_file()).ok_or_else(|| {
        Error::usage(format!("cannot tell where the wtxt command is (started as {})", invoked.display()))
    })
}

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
