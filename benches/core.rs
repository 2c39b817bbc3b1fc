//! Criterion benches of the writer and the verifier against a SHA-256 of the
//! same bytes (and two SHA-256 of them, paired) measured in the same run (`cargo bench`; ratios in docs/PERFORMANCE.md).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sha2::{Digest, Sha256};
use wtxt::crypto::{Sha1State, Sha256State};
use wtxt::format::syntax::{Meta, Timestamp};
use wtxt::format::verify;
use wtxt::format::{write_snapshot, WriteOptions};
use wtxt::model::Array;
use wtxt::progress::Progress;

mod common;

const MIB: usize = 64;

fn arrays() -> Vec<Array> {
    vec![common::noise_matrix(MIB)]
}

fn options() -> WriteOptions<'static> {
    let meta = Meta {
        schema: "weights/v1".into(),
        gen: 1,
        ts: Timestamp::parse("2026-01-01T00:00:00Z").unwrap(),
        build: "bench".into(),
        host: "cpu".into(),
        cuda: "off".into(),
    };
    WriteOptions::new(meta, 128)
}

fn bench(c: &mut Criterion) {
    let arrays = arrays();
    let opts = options();
    let mut text = std::io::Cursor::new(Vec::new());
    write_snapshot(&arrays, &opts, &mut text, &Progress::hidden()).unwrap();
    let text = text.into_inner();
    let mut g = c.benchmark_group("64MiB");
    g.throughput(Throughput::Bytes((MIB << 20) as u64));
    g.sample_size(10);
    g.bench_function("baseline_sha256", |b| b.iter(|| Sha256::digest(arrays[0].bytes())));
    // Two digests of the same bytes, their rounds paired: what the writer
    // and the verifier do for each chunk's and each array's.
    g.bench_function("two_sha256_paired", |b| {
        b.iter(|| {
            let (mut x, mut y) = (Sha256State::default(), Sha256State::default());
            Sha256State::update_pair(&mut x, arrays[0].bytes(), &mut y, arrays[0].bytes());
            (x.finalize(), y.finalize())
        })
    });
    // Git's blob ids of two files, hashed side by side (the pack writer's).
    g.bench_function("baseline_sha1", |b| {
        b.iter(|| {
            let mut x = Sha1State::default();
            x.update(arrays[0].bytes());
            x.finalize()
        })
    });
    g.bench_function("two_sha1_paired", |b| {
        b.iter(|| {
            let (mut x, mut y) = (Sha1State::default(), Sha1State::default());
            Sha1State::update_pair(&mut x, arrays[0].bytes(), &mut y, arrays[0].bytes());
            (x.finalize(), y.finalize())
        })
    });
    let mut out = std::io::Cursor::new(Vec::with_capacity(text.len()));
    g.bench_function("snapshot_to_memory", |b| {
        b.iter(|| {
            out.get_mut().clear();
            out.set_position(0);
            write_snapshot(&arrays, &opts, &mut out, &Progress::hidden()).unwrap()
        })
    });
    g.bench_function("verify_from_memory", |b| b.iter(|| verify(&text[..], &Default::default(), None).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
