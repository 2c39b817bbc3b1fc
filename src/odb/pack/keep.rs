//! The `.keep` files that hold a pack of whole objects out of `git gc`
//! until a newer pack stores one of them as a delta.

use std::io::Read;
use std::path::{Path, PathBuf};

use git2::Oid;

use crate::error::{Error, Result};

/// The content of the `.keep` file that keeps a pack of whole objects out
/// of `git gc`'s repacking. It is taken off (only a keep file with exactly
/// this content: any other is Git's or the user's) once a later pack
/// stores one of the pack's objects as a delta: `gc` may then drop the
/// whole copy. `gc` never prunes what a kept pack holds, so the keep also
/// comes off once nothing reaches the pack ([`release_unreachable`]).
pub(super) const KEEP: &[u8] =
    b"wtxt: whole objects only; kept from repacking until a newer pack stores one as a delta\n";

/// Takes the [`KEEP`] file off each pack in the pack folder `dir` that
/// holds one of `superseded` (objects a newer pack stores as deltas), so
/// that `git gc` may drop their whole copies.
pub(super) fn release(dir: &Path, superseded: &[Oid]) -> Result<()> {
    if !superseded.is_empty() {
        release_where(dir, |idx| Ok(listed_in(idx).is_some_and(|ids| ids.iter().any(|id| superseded.contains(id)))))?;
    }
    Ok(())
}

/// Takes every [`KEEP`] file off the packs of the object folder `objects`
/// (`wtxt git install --uninstall`: Git repacks them as any other again).
/// Returns how many it took off.
pub(crate) fn release_all(objects: &Path) -> Result<usize> {
    release_where(&objects.join("pack"), |_| Ok(true))
}

/// Takes the [`KEEP`] file off each pack in the object folder `objects`
/// none of whose objects the set `reachable` gives holds (a generation a
/// reset or a rewrite dropped, once no reflog names it): `git gc` then
/// prunes it as any unreachable object. `reachable` is asked only when
/// some pack is kept. Returns how many keep files it took off.
pub(crate) fn release_unreachable(
    objects: &Path,
    reachable: impl FnOnce() -> Result<std::collections::HashSet<Oid>>,
) -> Result<usize> {
    let mut reachable = Some(reachable);
    let mut held = std::collections::HashSet::new();
    release_where(&objects.join("pack"), |idx| {
        if let Some(list) = reachable.take() {
            held = list()?;
        }
        Ok(listed_in(idx).is_some_and(|ids| !ids.iter().any(|id| held.contains(id))))
    })
}

/// Takes the [`KEEP`] file off each pack in the pack folder `dir` kept by
/// wtxt whose index (its path) `drop` picks; asks nothing when none is
/// kept. Returns how many it took off.
fn release_where(dir: &Path, mut drop: impl FnMut(&Path) -> Result<bool>) -> Result<usize> {
    let mut n = 0;
    for keep in keep_files(dir)? {
        if is_ours(&keep) && drop(&keep.with_extension("idx"))? {
            match std::fs::remove_file(&keep) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(&keep, e)),
                _ => n += 1,
            }
        }
    }
    Ok(n)
}

/// Every object the version-2 pack index at `idx` lists; `None` when it is
/// not one (or not all there: its length is checked against its count
/// before a name is read).
fn listed_in(idx: &Path) -> Option<Vec<Oid>> {
    let (f, len) = crate::fs::open_regular(idx).ok()?;
    let mut f = std::io::BufReader::new(f);
    let mut head = [0u8; 8 + 256 * 4];
    f.read_exact(&mut head).ok()?;
    if head[..8] != *b"\xfftOc\0\0\0\x02" {
        return None;
    }
    let total = u32::from_be_bytes(head[head.len() - 4..].try_into().expect("4 bytes")) as u64;
    if len < head.len() as u64 + 20 * total {
        return None;
    }
    let mut ids = Vec::with_capacity(total as usize);
    let mut name = [0u8; 20];
    for _ in 0..total {
        f.read_exact(&mut name).ok()?;
        ids.push(Oid::from_bytes(&name).ok()?);
    }
    Some(ids)
}

/// The `.keep` files in the pack folder `dir` (none when it is absent).
fn keep_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    Ok(entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "keep"))
        .collect())
}

/// Whether `keep` is a regular file holding [`KEEP`] (any other is Git's
/// or the user's).
fn is_ours(keep: &Path) -> bool {
    crate::fs::read_small_file(keep, KEEP.len() as u64, crate::fs::Links::Refuse)
        .is_ok_and(|b| b.as_deref() == Some(KEEP))
}
