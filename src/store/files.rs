//! Where a split snapshot's part files live, and reading them.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Position, Result};
use crate::format::split::{part_name, stray_part, unlike_head, PartLine, PartSource};

/// The folder holding the parts of the head at `head`: `model.wtxt` keeps
/// its parts in `model.wtxt.parts/`.
pub fn parts_dir(head: &Path) -> PathBuf {
    let mut s = head.as_os_str().to_owned();
    s.push(".parts");
    PathBuf::from(s)
}

/// Part files in the folder next to the head.
pub struct PartFiles<'a> {
    /// The parts folder.
    pub dir: PathBuf,
    /// Decrypts age-armored parts.
    pub unseal: Option<&'a crate::crypto::armor::Unseal>,
}

impl PartFiles<'_> {
    /// Part `ix`'s file and its size, when it is there as a regular file.
    fn present(&self, ix: u64) -> Result<(PathBuf, u64)> {
        let p = self.name(ix);
        match std::fs::metadata(&p) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // A head alone is what `git show REV:PATH` gives of a split snapshot.
                let m = "missing part: the head lists it, the folder does not have it (from Git history, \
                         `wtxt git export REV PATH -o OUT` writes a split snapshot whole)";
                Err(Error::check(Position::None, m).in_file(&p))
            }
            // A folder, device or FIFO (`/dev/stdin`) is not a part: never read or waited on.
            Ok(m) if !m.is_file() => {
                Err(Error::check(Position::None, "not a regular file: the head lists a part here").in_file(&p))
            }
            Ok(m) => Ok((p, m.len())),
            Err(e) => Err(Error::io(&p, e)),
        }
    }
}

impl PartSource for PartFiles<'_> {
    fn open(&self, ix: u64) -> Result<Box<dyn crate::fs::Skip>> {
        let (p, _) = self.present(ix)?;
        // The joined reader reads in larger blocks (straight from the
        // file) except where it passes over chunks ([`crate::fs::Skip`]).
        crate::crypto::armor::open_maybe_sealed(&p, self.unseal, crate::fs::SKIP_READ_AHEAD)
    }

    /// Present and, unless parts may be sealed (an age file is larger than
    /// its part), of the head's size, or a Git LFS pointer to an object of
    /// that size (a clone that smudged nothing holds pointers).
    fn check_unopened(&self, part: &PartLine, head_line: u64) -> Result<()> {
        let (p, len) = self.present(part.ix)?;
        if self.unseal.is_some() || len == part.bytes {
            return Ok(());
        }
        let pointer = (len <= crate::odb::lfs::MAX_POINTER)
            .then(|| std::fs::read(&p).ok())
            .flatten()
            .and_then(|b| crate::odb::lfs::Pointer::parse(&b));
        match pointer {
            Some(ptr) if ptr.size == part.bytes => Ok(()),
            _ => Err(unlike_head(part.ix, part.bytes, head_line, len).in_file(&p)),
        }
    }

    fn name(&self, ix: u64) -> PathBuf {
        self.dir.join(part_name(ix))
    }

    fn unlisted(&self, count: u64) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut extra: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| stray_part(&e.file_name().to_string_lossy(), count))
            .map(|e| e.path())
            .collect();
        extra.sort();
        extra
    }
}
