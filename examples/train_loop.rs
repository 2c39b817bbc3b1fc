//! A training loop using the library API: publish a generation every step
//! (an RCU store) and request a snapshot every few steps; the snapshot
//! thread writes the ring (and would commit/push with a repository set).
//!
//! Run: `cargo run --release --example train_loop -- /tmp/wtxt-ring`

use std::sync::Arc;

use wtxt::daemon::PipelineConfig;
use wtxt::daemon::{Generation, Queue, Snapshotter};
use wtxt::model::{Array, ArrayData, Dtype};

fn main() -> wtxt::Result<()> {
    let ring = std::env::args().nth(1).unwrap_or_else(|| "wtxt-ring".into());
    let snap = Snapshotter::start(PipelineConfig::new(&ring), Generation::default(), Queue::default())?;
    let mut w = vec![0f32; 512 * 64];
    for step in 1..=200u64 {
        // "Training": nudge the weights.
        for (i, x) in w.iter_mut().enumerate() {
            *x += ((i as u64 * 31 + step) % 7) as f32 * 1e-3;
        }
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let arrays = vec![Array::new("w", Dtype::F32, vec![512, 64], ArrayData::from(bytes))?];
        snap.publish(Arc::new(Generation { gen: step, arrays }));
        if step % 20 == 0 {
            snap.request_snapshot();
        }
    }
    snap.flush();
    println!("{}", serde_json::to_string_pretty(&snap.status()).expect("status serializes"));
    snap.shutdown();
    Ok(())
}
