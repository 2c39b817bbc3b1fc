//! FOLD / `.mind` (pyfolds): a 28-byte big-endian header, chunks of
//! `header(32) + payload + ECC parity`, and a JSON index at the end.
//!
//! Read: every chunk is bounds-checked, its Reed-Solomon parity applied
//! (bytes repaired are reported), its CRC32C, SHA-256, `chunk_hashes` entry
//! and the index's `manifest_hash` checked, then decompressed to exactly its
//! declared size. `NPZ0` chunks become typed arrays (named by their keys);
//! every other chunk (`JSON`, `TSAV`, `STEN`, ...) is kept byte for byte as a
//! u8 array `__fold_<chunk>`; the index, minus what the writer recomputes,
//! is the JSON array `__fold` (docs/FORMAT.md, "Metadata arrays").
//! Write: the chunks `__fold` lists, in its order, with their compression and
//! ECC; arrays it does not list go into more `NPZ0` chunks (`arrays`,
//! `arrays_1`, ...: a chunk holds at most 1 GiB). Streamed: memory stays
//! bounded whatever the model's size.
#![forbid(unsafe_code)]

use serde_json::{json, Map, Value};

use crate::convert::container::{with_original_names, MetaLayout};
use crate::convert::names;
use crate::convert::npz::Member;
use crate::model::Array;

mod layout;
mod read;
mod write;

pub use layout::*;
pub use read::*;
pub use write::*;
use write::{npz_groups, rest_chunk_names, NPZ_LIMIT};

/// The `__fold` that reading back [`write_to`]'s output for `tensors` alone
/// gives: `NPZ0` chunks `arrays`, `arrays_1`, ... (none when there are no
/// tensors; `None` when they do not fit FOLD's chunks).
pub fn default_meta(tensors: &[Array]) -> Option<Value> {
    let members: Vec<(&str, &Array)> = tensors.iter().map(|a| (a.name.as_str(), a)).collect();
    let groups = npz_groups(members, NPZ_LIMIT).ok()?;
    let names = rest_chunk_names(&[]);
    let chunks = groups
        .into_iter()
        .zip(names)
        .map(|(g, name)| ChunkMeta {
            name,
            ctype: "NPZ0".into(),
            flags: 1,
            ecc_algo: no_ecc(),
            stored_hex: None,
            arrays: Some(g.iter().map(|(k, a)| Member { key: k.to_string(), array: a.name.clone() }).collect()),
            payload_hex: None,
            array: None,
        })
        .collect();
    let meta = FoldMeta {
        version: latest_version(),
        created_at_unix: Some(json!(0.0)),
        metadata: Map::new(),
        chunk_hashes: true,
        manifest_hash: true,
        chunks,
    };
    Some(serde_json::to_value(&meta).expect("metadata serializes"))
}

/// The fold row of the container table.
pub(crate) static FOLD: MetaLayout = MetaLayout {
    name: "fold",
    extensions: &["fold", "mind"],
    magic: MAGIC,
    metadata: &[META, names::NAMES],
    read,
    read_tensors,
    read_pinned,
    write: write_to,
    default_meta,
    kept_names,
    check_sizes: |arrays| check_sizes(&with_original_names(arrays, META)?),
    verbatim: false,
};

#[cfg(test)]
mod tests {
    use super::write::write_limited;
    use super::*;
    use crate::buffer::ArrayData;
    use crate::convert::common::meta_typed;
    use crate::model::Dtype;

    fn u8s(name: &str, n: usize) -> Array {
        Array::new(name, Dtype::U8, vec![n as u64], (0..n).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>().into())
            .unwrap()
    }

    #[test]
    fn arrays_past_a_chunks_limit_go_into_more_npz0_chunks() {
        let arrays = [u8s("a", 1000), u8s("b", 1000), u8s("c", 1000)];
        let mut out = std::io::Cursor::new(Vec::new());
        write_limited(&arrays, &mut out, 3000).unwrap();
        let back = read(&ArrayData::Owned(std::sync::Arc::new(out.into_inner())), &mut Vec::new()).unwrap();
        let meta: FoldMeta = meta_typed(&back, META).unwrap().unwrap();
        let chunks: Vec<(&str, usize)> =
            meta.chunks.iter().map(|c| (c.name.as_str(), c.arrays.as_ref().unwrap().len())).collect();
        assert_eq!(chunks, [("arrays", 2), ("arrays_1", 1)]);
        for a in &arrays {
            let b = back.iter().find(|b| b.name == a.name).unwrap();
            assert_eq!((b.dtype, &b.shape, b.bytes()), (a.dtype, &a.shape, a.bytes()));
        }
        // An array that alone exceeds the limit has no place in FOLD.
        let err = write_limited(&arrays, &mut std::io::Cursor::new(Vec::new()), 1000).unwrap_err();
        assert!(err.message().contains("array a is 1000 bytes"), "{err}");
    }
}
