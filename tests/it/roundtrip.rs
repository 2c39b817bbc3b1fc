//! Property tests: random dtypes, shapes (rank 0 and zero-size included) and
//! chunk sizes; write -> verify -> read is exact and writing is deterministic.

use proptest::prelude::*;
use wtxt::format::syntax::{Meta, Timestamp};
use wtxt::format::{write_snapshot, WriteOptions};
use wtxt::model::{byte_size, Array, ArrayData, Dtype};
use wtxt::progress::Progress;

fn arb_array(i: usize) -> impl Strategy<Value = Array> {
    let dtype = prop::sample::select(Dtype::ALL.to_vec());
    let shape = prop::collection::vec(0u64..6, 0..4);
    (dtype, shape, any::<u64>()).prop_map(move |(d, s, seed)| {
        let s = whole_blocks(d, s);
        let n = byte_size(d, &s).unwrap() as usize;
        let mut x = seed | 1;
        let data: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if d == Dtype::Bool {
                    (x & 1) as u8
                } else {
                    x as u8
                }
            })
            .collect();
        Array::new(format!("a{i}_{}", d.as_str()), d, s, ArrayData::from(data)).unwrap()
    })
}

/// `shape` with its innermost dimension in whole blocks of `d`'s elements
/// (a sub-byte scalar becomes one block).
pub(crate) fn whole_blocks(d: Dtype, mut shape: Vec<u64>) -> Vec<u64> {
    let elems = d.block().elems;
    match shape.last_mut() {
        Some(last) => *last *= elems,
        None if elems > 1 => shape.push(elems),
        None => {}
    }
    shape
}

fn write(arrays: &[Array], rows: u64, gen: u64) -> Vec<u8> {
    let meta = Meta {
        schema: "weights/v1".into(),
        gen,
        ts: Timestamp::parse("2026-01-01T00:00:00Z").unwrap(),
        build: "p".into(),
        host: "cpu".into(),
        cuda: "off".into(),
    };
    let opts = WriteOptions { merkle_prev: [7; 32], ..WriteOptions::new(meta, rows) };
    let mut out = std::io::Cursor::new(Vec::new());
    write_snapshot(arrays, &opts, &mut out, &Progress::hidden()).unwrap();
    out.into_inner()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn write_verify_read_is_exact(arrays in prop::collection::vec(any::<u8>(), 0..5)
        .prop_flat_map(|v| (0..v.len()).map(arb_array).collect::<Vec<_>>()),
        rows in 1u64..5, gen in 0u64..2_000_000) {
        let mut arrays = arrays;
        wtxt::model::sort_arrays(&mut arrays).unwrap();
        let bytes = write(&arrays, rows, gen);
        prop_assert_eq!(&bytes, &write(&arrays, rows, gen), "deterministic");
        let loaded = wtxt::format::load(&bytes[..], bytes.len() as u64, &Default::default()).unwrap();
        prop_assert!(loaded.report.ok);
        prop_assert_eq!(loaded.arrays.len(), arrays.len());
        for (a, b) in arrays.iter().zip(&loaded.arrays) {
            prop_assert_eq!(&a.name, &b.name);
            prop_assert_eq!(a.dtype, b.dtype);
            prop_assert_eq!(&a.shape, &b.shape);
            prop_assert_eq!(a.bytes(), b.bytes());
        }
    }
}

#[test]
fn large_multi_chunk_arrays_round_trip() {
    // Chunks of many base64 lines, a tail line of every length mod 57, and
    // blocks larger than the verifier's 1 MiB pipeline block.
    let mut arrays = Vec::new();
    for (i, n) in [1usize, 56, 57, 58, 32767, 32768, 32769, 3 << 20].iter().enumerate() {
        let data: Vec<u8> = (0..*n).map(|k| (k * 31 + i) as u8).collect();
        arrays.push(Array::new(format!("v{i}"), Dtype::U8, vec![*n as u64], data.into()).unwrap());
    }
    let m: Vec<u8> = (0..(3000 * 700)).map(|k| (k % 251) as u8).collect();
    arrays.push(Array::new("m", Dtype::U8, vec![3000, 700], m.into()).unwrap());
    wtxt::model::sort_arrays(&mut arrays).unwrap();
    for rows in [1, 128, 5000] {
        let bytes = write(&arrays, rows, 1);
        let loaded = wtxt::format::load(&bytes[..], bytes.len() as u64, &Default::default()).unwrap();
        assert!(loaded.report.ok, "{:?}", loaded.report.errors);
        for (a, b) in arrays.iter().zip(&loaded.arrays) {
            assert_eq!(a.bytes(), b.bytes());
        }
    }
}
