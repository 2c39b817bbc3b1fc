//! One CRC32C pass over a file, with the crate and instructions the writer
//! and the verifier use: the CRC32C part of the format's floor, measured
//! by `scripts/bench.sh` (section `floor`). Prints the checksum.
//!
//! Run: `cargo run --release --example crc32c_pass -- FILE`

use std::io::Read;

fn main() -> std::io::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "bench-work/model_1024m.npy".into());
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
    println!("{crc:08x}");
    Ok(())
}
