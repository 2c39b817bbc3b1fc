//! Hot-path latency of `publish` + `request_snapshot` while snapshots of a
//! large state run back to back, and snapshot throughput through the
//! pipeline against writing the same state directly. Run by
//! `scripts/bench_daemon.sh`; arguments: RING_DIR [MIB] [CALLS].

use std::sync::Arc;
use std::time::Instant;

use wtxt::daemon::PipelineConfig;
use wtxt::daemon::{Generation, Queue, Snapshotter};

#[path = "../benches/common/mod.rs"]
mod common;

fn main() -> wtxt::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let ring = std::path::PathBuf::from(args.get(1).cloned().unwrap_or_else(|| "bench-ring".into()));
    let mib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(256);
    let calls: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let _ = std::fs::remove_dir_all(&ring);
    let array = common::noise_matrix(mib);

    // Direct: the canonical writer on the same state.
    let direct_file = ring.with_extension("direct.wtxt");
    std::fs::create_dir_all(&ring).ok();
    let opts = wtxt::format::WriteOptions::new(wtxt::format::syntax::Meta::new(1, None)?, 128);
    let mut directs = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        wtxt::store::write_wtxt(
            std::slice::from_ref(&array),
            &opts,
            &direct_file,
            Default::default(),
            None,
            &wtxt::progress::Progress::hidden(),
        )?;
        directs.push(t.elapsed().as_secs_f64());
    }
    directs.sort_by(f64::total_cmp);
    let direct = directs[1];
    let _ = std::fs::remove_file(&direct_file);

    let mut cfg = PipelineConfig::new(&ring);
    cfg.keep = 2;
    // The daemon's queueing: a request never waits (the loop measures the hot path).
    let snap = Snapshotter::start(cfg, Generation::default(), Queue::Coalesce)?;
    // Through the pipeline, one at a time (ring write + delta from the previous).
    let mut through = Vec::new();
    for gen in 1..=4u64 {
        let t = Instant::now();
        snap.publish(Arc::new(Generation { gen, arrays: vec![array.clone()] }));
        snap.request_snapshot();
        snap.flush();
        through.push(t.elapsed().as_secs_f64());
    }

    // The hot loop while snapshots run back to back: at least `calls` calls,
    // and on until two snapshots have completed during it.
    let mut lat = Vec::with_capacity(calls * 2);
    let written_before = snap.status().snapshots_written;
    let t = Instant::now();
    let mut i = 0u64;
    loop {
        let g = Arc::new(Generation { gen: 10 + i, arrays: vec![array.clone()] });
        let s = Instant::now();
        snap.publish(g);
        snap.request_snapshot();
        lat.push(s.elapsed().as_nanos() as u64);
        i += 1;
        if i as usize >= calls && i.is_multiple_of(1024) && snap.status().snapshots_written >= written_before + 2 {
            break;
        }
    }
    let loop_secs = t.elapsed().as_secs_f64();
    let during = snap.status().snapshots_written - written_before;
    snap.flush();
    let st = snap.status();
    snap.shutdown();
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize] as f64 / 1000.0;
    println!("state: {mib} MiB f32; {} publish+request_snapshot calls in {loop_secs:.2} s while {during} snapshots completed", lat.len());
    println!(
        "latency: p50 {:.2} us, p99 {:.2} us, p99.9 {:.2} us, max {:.1} us (targets: p99 <= 5 us, max <= 1000 us)",
        pct(0.5),
        pct(0.99),
        pct(0.999),
        *lat.last().unwrap_or(&0) as f64 / 1000.0
    );
    println!("coalesced: {}, snapshots written: {}", st.coalesced, st.snapshots_written);
    // The first has no previous snapshot, hence no delta: leave it out.
    let med = {
        let mut t = through[1..].to_vec();
        t.sort_by(f64::total_cmp);
        t[1]
    };
    println!("direct write_wtxt (median of {directs:.2?}): {direct:.2} s; through the pipeline (incl. delta): {:?} s, median {med:.2} s = {:.2}x (target <= 1.3x)", through.iter().map(|t| (t * 100.0).round() / 100.0).collect::<Vec<_>>(), med / direct);
    Ok(())
}
