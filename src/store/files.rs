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

/// What reads a part file that is a Git LFS pointer (a clone that smudged
/// nothing: `GIT_LFS_SKIP_SMUDGE`, a blobless clone) as the part it stands
/// for. It needs Git and `git lfs`, which live in layers above this one:
/// the Git layer's is installed once per process by
/// `wtxt::git::read_lfs_pointers_in_work_trees` (the command line and the
/// Python package do it on start). Without it a pointer is refused as one.
pub trait PointerParts: Send + Sync {
    /// The size of the object `bytes` (a file of at most
    /// [`MAX_POINTER_FILE`] bytes) names, if it is a pointer.
    fn pointed_size(&self, bytes: &[u8]) -> Option<u64>;
    /// Fetches, in one batch, the objects that the pointer files `files`
    /// (their bytes, in the parts folder `dir`) name and that are not
    /// here; `Err`: why not, said when such a part is opened.
    fn fetch(&self, dir: &Path, files: &[Vec<u8>]) -> std::result::Result<(), String>;
    /// The object the pointer file `file` (its `bytes`, in `dir`) names,
    /// hashed against its oid as it is read; fetched first where it is
    /// not here, unless `failed` says why an earlier fetch did not bring it.
    fn open(&self, dir: &Path, file: &Path, bytes: &[u8], failed: Option<&str>) -> Result<Box<dyn crate::fs::Skip>>;
}

/// The largest pointer file the Git LFS specification allows.
pub const MAX_POINTER_FILE: u64 = 1024;

static POINTER_PARTS: std::sync::OnceLock<&'static dyn PointerParts> = std::sync::OnceLock::new();

/// Installs the reader of pointer files for this process (the first call wins).
pub fn set_pointer_parts(reader: &'static dyn PointerParts) {
    let _ = POINTER_PARTS.set(reader);
}

/// Part files in the folder next to the head; a part file that is a Git
/// LFS pointer is read as the object it names ([`PointerParts`]) and
/// verified as any part.
pub struct PartFiles<'a> {
    /// The parts folder.
    dir: PathBuf,
    /// Decrypts age-armored parts.
    unseal: Option<&'a crate::crypto::armor::Unseal>,
    /// Why the batch fetch of the parts to be opened failed, said by each
    /// open of a part it did not bring.
    fetch_failed: std::cell::RefCell<Option<String>>,
}

impl<'a> PartFiles<'a> {
    /// The parts in `dir`, age-armored ones opened with `unseal`.
    pub fn new(dir: PathBuf, unseal: Option<&'a crate::crypto::armor::Unseal>) -> PartFiles<'a> {
        PartFiles { dir, unseal, fetch_failed: Default::default() }
    }

    /// The bytes of the file at `p` (`len` bytes) and the size it names,
    /// when it is a Git LFS pointer.
    fn pointer(p: &Path, len: u64) -> Option<(Vec<u8>, u64)> {
        if len > MAX_POINTER_FILE {
            return None;
        }
        let reader = POINTER_PARTS.get()?;
        let (f, _) = crate::fs::open_regular(p).ok()?;
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut io::Read::take(f, MAX_POINTER_FILE + 1), &mut bytes).ok()?;
        let size = reader.pointed_size(&bytes)?;
        Some((bytes, size))
    }

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
        let (p, len) = self.present(ix)?;
        if let (Some((bytes, _)), Some(reader)) = (Self::pointer(&p, len), POINTER_PARTS.get()) {
            return reader.open(&self.dir, &p, &bytes, self.fetch_failed.borrow().as_deref());
        }
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
        match Self::pointer(&p, len) {
            Some((_, size)) if size == part.bytes => Ok(()),
            _ => Err(unlike_head(part.ix, part.bytes, head_line, len).in_file(&p)),
        }
    }

    fn name(&self, ix: u64) -> PathBuf {
        self.dir.join(part_name(ix))
    }

    /// The LFS objects of the pointers among parts `ixs` that are not
    /// here, fetched in one batch.
    fn will_open(&self, ixs: &[u64]) {
        let Some(reader) = POINTER_PARTS.get() else { return };
        let pointers: Vec<Vec<u8>> = ixs
            .iter()
            .filter_map(|&ix| {
                let (p, len) = self.present(ix).ok()?;
                Some(Self::pointer(&p, len)?.0)
            })
            .collect();
        if !pointers.is_empty() {
            *self.fetch_failed.borrow_mut() = reader.fetch(&self.dir, &pointers).err();
        }
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
