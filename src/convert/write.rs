//! Arrays written to the container a path names, atomically.

use std::path::Path;

use crate::convert::container::Container;
use crate::convert::formats;
use crate::error::{Error, Result};
use crate::fs::AtomicFile;
use crate::model::Array;

/// Writes arrays in the format `extract` picks from the output's extension.
pub fn write_arrays(arrays: &[Array], out: &Path) -> Result<()> {
    write_arrays_as(arrays, out, formats::by_extension(out)?)
}

/// Writes arrays to `out` as `to`, atomically.
pub fn write_arrays_as(arrays: &[Array], out: &Path, to: &dyn Container) -> Result<()> {
    to.check_sizes(arrays).map_err(|e| e.in_file(out))?;
    let mut f = AtomicFile::create(out)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f.file());
        to.write(arrays, &mut w).map_err(|e| e.in_file(out))?;
        std::io::Write::flush(&mut w).map_err(|e| Error::io(out, e))?;
    }
    f.commit()
}
