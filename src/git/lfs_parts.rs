//! A work tree's part files that are Git LFS pointers (a clone that
//! smudged nothing), read as the objects they name: from the repository's
//! LFS store, the missing ones fetched in one `git lfs fetch` of exactly
//! those objects ([`crate::odb::lfs::fetch_missing`]), each hashed against
//! its oid as it is read. The store layer reads part files; this is what
//! it asks about pointers ([`crate::store::PointerParts`]).

use std::path::Path;

use crate::error::{Error, Position, Result};
use crate::odb::lfs::{Pointer, Store};

/// The Git layer's reader of pointer part files.
struct GitPointers;

/// Has every reader of a work-tree snapshot in this process read part
/// files that are Git LFS pointers as the parts they stand for, fetching
/// what is missing (`wtxt.fetch false` forbids it). The command line and
/// the Python package call it when they start; a library user calls it
/// once too.
pub fn read_lfs_pointers_in_work_trees() {
    crate::store::set_pointer_parts(&GitPointers);
}

/// The repository around the parts folder `dir`, and its LFS store.
fn repository(dir: &Path) -> Option<(git2::Repository, Store)> {
    let repo = git2::Repository::discover(dir).ok()?;
    let store = Store::of(&repo);
    Some((repo, store))
}

impl crate::store::PointerParts for GitPointers {
    fn pointed_size(&self, bytes: &[u8]) -> Option<u64> {
        Pointer::parse(bytes).map(|p| p.size)
    }

    fn fetch(&self, dir: &Path, files: &[Vec<u8>]) -> std::result::Result<(), String> {
        let Some((repo, store)) = repository(dir) else { return Ok(()) };
        let missing: Vec<Pointer> = files.iter().filter_map(|b| Pointer::parse(b)).filter(|p| !store.has(p)).collect();
        crate::odb::lfs::fetch_missing(&repo, &missing).map(|_| ()).map_err(|e| e.to_string())
    }

    fn open(&self, dir: &Path, file: &Path, bytes: &[u8], failed: Option<&str>) -> Result<Box<dyn crate::fs::Skip>> {
        let said = |m: String| Error::input(Position::None, m).in_file(file);
        let ptr = Pointer::parse(bytes).ok_or_else(|| said("not a Git LFS pointer".into()))?;
        let what = format!("a Git LFS pointer to sha256:{} ({} bytes), not the part", ptr.oid, ptr.size);
        let Some((repo, store)) = repository(dir) else {
            return Err(said(format!(
                "{what}, and no Git repository holds it: in the clone it came from, `git lfs pull` fetches it"
            )));
        };
        if !store.has(&ptr) {
            let fetched = match failed {
                Some(why) => Err(why.to_string()),
                None => crate::odb::lfs::fetch_missing(&repo, std::slice::from_ref(&ptr)).map_err(|e| e.to_string()),
            };
            if let Err(why) = fetched {
                return Err(said(format!("{what}: {why}")));
            }
        }
        match store.open(&ptr) {
            Some(f) => Ok(Box::new(crate::fs::Streamed(f))),
            None => Err(said(format!("{what}: `git lfs fetch` did not bring it"))),
        }
    }
}
