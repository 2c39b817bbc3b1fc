//! Test data shared by the criterion benches and `examples/bench_daemon.rs`.

use wtxt::model::{Array, ArrayData, Dtype};

/// An f32 matrix `w` of `mib` MiB (rows of 1024) filled with xorshift noise:
/// incompressible, the same on every run.
pub fn noise_matrix(mib: usize) -> Array {
    let n = mib << 20;
    let mut x = 0x9e3779b97f4a7c15u64;
    let data: Vec<u8> = (0..n / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect();
    Array::new("w", Dtype::F32, vec![(n / 4096) as u64, 1024], ArrayData::from(data)).expect("a valid array")
}
