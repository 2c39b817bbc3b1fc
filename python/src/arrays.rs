//! Arrays as they cross the seam: NumPy memory staged by the Python side
//! (copied with the GIL released, or ranges of a stage file), given their
//! WTXT names with what gives the original names back.

use std::collections::BTreeMap;
use std::sync::Arc;

use wtxt::convert::{give_wtxt_names, objects_array, OriginalNames};
use wtxt::model::{Array, ArrayData, Dtype};

/// An array's memory as NumPy reports it: (name, WTXT dtype, shape,
/// address, length in bytes) of a C-contiguous little-endian array the
/// Python side keeps alive for the whole call.
pub(crate) type Staged = (String, String, Vec<u64>, usize, usize);

/// Copies the staged arrays' bytes, each into a buffer of `spare` of the
/// same length where there is one (its pages are faulted in already), in
/// pieces shared out over the `--threads` pool.
pub(crate) fn copy_staged(tensors: Vec<Staged>, spare: &mut Vec<Vec<u8>>) -> Vec<Named> {
    /// The unit of work the copying threads share out.
    const PIECE: usize = 4 << 20;
    let mut named = Vec::with_capacity(tensors.len());
    let mut pieces: Vec<(&[u8], &mut [u8])> = Vec::new();
    let mut copies: Vec<Vec<u8>> = Vec::with_capacity(tensors.len());
    let mut sources = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, addr, len) in tensors {
        // A buffer of the generation this one replaces, when one is free and
        // the same size: its pages are mapped already.
        let dst = match spare.iter().position(|b| b.len() == len) {
            Some(i) => spare.swap_remove(i),
            None => vec![0u8; len],
        };
        // NumPy may give an empty array no address at all.
        let src: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: the Python side passes the address and length NumPy
            // reports for a C-contiguous array it keeps alive for the whole
            // call, so the memory is valid for `len` bytes; it is only read,
            // and copied before the call returns.
            unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
        };
        named.push((name, dtype, shape));
        copies.push(dst);
        sources.push(src);
    }
    for (src, dst) in sources.iter().zip(copies.iter_mut()) {
        pieces.extend(src.chunks(PIECE).zip(dst.chunks_mut(PIECE)));
    }
    // The copy on the --threads pool, as torch's own clone spreads it.
    let threads = wtxt::threads().min(pieces.len()).max(1);
    let mut shares: Vec<Vec<(&[u8], &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, p) in pieces.into_iter().enumerate() {
        shares[i % threads].push(p);
    }
    let copy = |share: Vec<(&[u8], &mut [u8])>| share.into_iter().for_each(|(s, d)| d.copy_from_slice(s));
    std::thread::scope(|s| {
        let mut shares = shares.into_iter();
        let mine = shares.next();
        for share in shares {
            s.spawn(move || copy(share));
        }
        if let Some(share) = mine {
            copy(share);
        }
    });
    named.into_iter().zip(copies).map(|((n, d, s), c)| (n, d, s, ArrayData::from(c))).collect()
}

/// An array before it has its WTXT name: (name, dtype, shape, bytes).
pub(crate) type Named = (String, String, Vec<u64>, ArrayData);

/// Staged arrays whose bytes are ranges of the file `stage`, mapped once
/// (the distributed checkpoint writer's shards, put there by every rank).
pub(crate) fn staged_file(stage: &std::path::Path, tensors: Vec<Staged>) -> Result<Vec<Named>, wtxt::Error> {
    let f = std::fs::File::open(stage).map_err(|e| wtxt::Error::io(stage, e))?;
    let len = f.metadata().map_err(|e| wtxt::Error::io(stage, e))?.len();
    let map = if len == 0 {
        None
    } else {
        // SAFETY: the stage file is this checkpoint's own, made by the
        // writer under a fresh name, and no process writes it once the
        // ranks' writes have finished, which is when it is saved.
        Some(Arc::new(unsafe { memmap2::Mmap::map(&f) }.map_err(|e| wtxt::Error::io(stage, e))?))
    };
    tensors
        .into_iter()
        .map(|(name, dtype, shape, off, n)| {
            if n == 0 {
                return Ok((name, dtype, shape, ArrayData::from(Vec::new())));
            }
            let end = off.checked_add(n).filter(|&e| e as u64 <= len);
            match (end, &map) {
                (Some(end), Some(m)) => Ok((name, dtype, shape, ArrayData::from_map(m.clone()).slice(off..end))),
                _ => Err(wtxt::Error::usage(format!(
                    "tensor {name}: bytes {off}+{n} are past the end of {}",
                    stage.display()
                ))),
            }
        })
        .collect()
}

/// Arrays under WTXT names, sorted, with what gives the original names
/// (and `metadata`) back; two tensors of one name are refused.
pub(crate) fn named_arrays(
    tensors: impl Iterator<Item = Named>,
    metadata: Option<BTreeMap<String, String>>,
    objects: Option<BTreeMap<String, String>>,
) -> Result<Vec<Array>, wtxt::Error> {
    let mut arrays = Vec::new();
    for (name, dtype, shape, data) in tensors {
        let dt = Dtype::parse(dtype.as_bytes())
            .ok_or_else(|| wtxt::Error::usage(format!("tensor {name}: unknown dtype {dtype}")))?;
        arrays.push(Array::with_original_name(name, dt, shape, data)?);
    }
    if let Some(d) = wtxt::model::first_duplicate(&arrays.iter().map(|a| a.name.clone()).collect::<Vec<_>>()) {
        return Err(wtxt::Error::usage(format!("two tensors are named {d:?}")));
    }
    let objects = objects.filter(|o| !o.is_empty());
    if let Some(o) = &objects {
        if let Some(a) = arrays.iter().find(|a| o.contains_key(&a.name)) {
            return Err(wtxt::Error::usage(format!("{:?} is both a tensor and another value", a.name)));
        }
    }
    let mut kept = OriginalNames { metadata, ..Default::default() };
    give_wtxt_names(&mut arrays, &mut kept)?;
    if let Some(o) = &objects {
        arrays.push(objects_array(o)?);
    }
    wtxt::model::sort_arrays(&mut arrays)?;
    Ok(arrays)
}

/// Bytes as lowercase hex.
pub(crate) fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
