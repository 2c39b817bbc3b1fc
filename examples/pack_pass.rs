//! The passes storing a blob in a pack needs, over each file given: its
//! Git id (SHA-1) and one Huffman-coded deflate, with the code the
//! pre-commit hook and the daemon use (`src/odb/`). The packing part
//! of the hook's floor, measured by `scripts/bench.sh` (section `floor`).
//! Prints the bytes in and out.
//!
//! Run: `cargo run --release --example pack_pass -- FILE...`

use sha1::{Digest, Sha1};

fn main() -> std::io::Result<()> {
    let (mut read, mut out) = (0usize, 0usize);
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path)?;
        let mut h = Sha1::new();
        h.update(format!("blob {}\0", bytes.len()).as_bytes());
        h.update(&bytes);
        let _id = h.finalize();
        let deflated = wtxt::zlib(&bytes);
        read += bytes.len();
        out += deflated.len();
    }
    println!("{read} bytes, {out} deflated");
    Ok(())
}
