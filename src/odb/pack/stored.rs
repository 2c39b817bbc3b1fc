//! Reading back the start of a stored blob, loose or whole in a pack,
//! to steer the choice of a delta.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use git2::Oid;

/// Object types as a pack's entry headers number them.
pub(super) const BLOB: u8 = 3;
pub(super) const OFS_DELTA: u8 = 6;

/// The first `n` bytes (fewer when it is shorter) of the blob `id` in the
/// object folder `objects`, inflated no further, when it is stored loose or
/// whole in a pack; `None` when it is a delta or not found here (the
/// caller then reads it whole, or not at all). What it returns is unchecked
/// (a prefix cannot be hashed against the id): it only steers a choice.
pub(crate) fn stored_prefix(objects: &Path, id: Oid, n: usize) -> Option<Vec<u8>> {
    let hex = id.to_string();
    // Room for what the object says it holds, up to `n`: read whole, it
    // is allocated once, not grown by doubling.
    let read = |r: &mut dyn Read, size: u64| -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(size.min(n as u64) as usize);
        r.take(n as u64).read_to_end(&mut out).ok()?;
        Some(out)
    };
    // An object store is read as a hostile repository may have laid it
    // out: regular files only, never through a link, never a FIFO.
    let open = |p: &Path| crate::fs::open_regular(p).ok().map(|(f, _)| f);
    if let Some(f) = open(&objects.join(&hex[..2]).join(&hex[2..])) {
        let mut z = flate2::read::ZlibDecoder::new(std::io::BufReader::new(f));
        let mut head = Vec::with_capacity(32);
        let mut b = [0u8];
        for _ in 0..32 {
            z.read_exact(&mut b).ok()?;
            if b[0] == 0 {
                // `blob <size>`; a size that does not parse allocates nothing ahead.
                let size = head.strip_prefix(b"blob ").and_then(|d| std::str::from_utf8(d).ok()?.parse().ok());
                return read(&mut z, size.unwrap_or(0));
            }
            head.push(b[0]);
        }
        return None;
    }
    let packs = std::fs::read_dir(objects.join("pack")).ok()?;
    for idx in packs.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "idx")) {
        let Some(at) = offset_in(&idx, id) else { continue };
        let mut pack = std::io::BufReader::new(open(&idx.with_extension("pack"))?);
        pack.seek(SeekFrom::Start(at)).ok()?;
        let mut b = [0u8];
        pack.read_exact(&mut b).ok()?;
        if (b[0] >> 4) & 7 != BLOB {
            return None;
        }
        let (mut size, mut shift) = ((b[0] & 0x0f) as u64, 4);
        while b[0] & 0x80 != 0 {
            pack.read_exact(&mut b).ok()?;
            if shift < 64 {
                size |= ((b[0] & 0x7f) as u64) << shift;
            }
            shift += 7;
        }
        return read(&mut flate2::read::ZlibDecoder::new(pack), size);
    }
    None
}

/// Where the version-2 pack index at `idx` puts `id` in its pack.
fn offset_in(idx: &Path, id: Oid) -> Option<u64> {
    let mut f = crate::fs::open_regular(idx).ok()?.0;
    let mut head = [0u8; 8 + 256 * 4];
    f.read_exact(&mut head).ok()?;
    if head[..8] != *b"\xfftOc\0\0\0\x02" {
        return None;
    }
    let fan = |i: usize| u32::from_be_bytes(head[8 + 4 * i..12 + 4 * i].try_into().expect("4 bytes")) as u64;
    let first = id.as_bytes()[0] as usize;
    let total = fan(255);
    let (mut lo, mut hi) = (if first == 0 { 0 } else { fan(first - 1) }, fan(first));
    if hi > total || total > 1 << 32 {
        return None;
    }
    let mut name = [0u8; 20];
    while lo < hi {
        let mid = (lo + hi) / 2;
        f.seek(SeekFrom::Start(head.len() as u64 + 20 * mid)).ok()?;
        f.read_exact(&mut name).ok()?;
        match name.as_slice().cmp(id.as_bytes()) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => {
                let mut word = [0u8; 4];
                f.seek(SeekFrom::Start(head.len() as u64 + 24 * total + 4 * mid)).ok()?;
                f.read_exact(&mut word).ok()?;
                let small = u32::from_be_bytes(word) as u64;
                if small & 0x8000_0000 == 0 {
                    return Some(small);
                }
                let mut wide = [0u8; 8];
                f.seek(SeekFrom::Start(head.len() as u64 + 28 * total + 8 * (small & 0x7fff_ffff))).ok()?;
                f.read_exact(&mut wide).ok()?;
                return Some(u64::from_be_bytes(wide));
            }
        }
    }
    None
}
