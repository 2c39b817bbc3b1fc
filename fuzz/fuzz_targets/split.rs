//! Split snapshots: any bytes as a head (parsed, then joined with parts:
//! the bytes after the first NUL, else the same bytes), as a part
//! (scanned, diffed, chunk-checked), and as a text to split, never panic; a
//! text that splits joins back exactly, read in any size of pieces, and a
//! share of its rows loads from the parts as from the text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Read;
use wtxt::format::split;

fuzz_target!(|data: &[u8]| {
    // As a head, with parts.
    let (head, part) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, data),
    };
    for lenient in [true, false] {
        if let Ok(split::Opened::Split(h)) = split::open(Box::new(head)) {
            let parts = vec![part.to_vec(); h.parts.len().min(4)];
            let faults = lenient.then(Default::default);
            let mut joined = split::Joined::new(h, Box::new(parts), faults);
            let _ = wtxt::format::verify(&mut joined, &Default::default(), None);
        }
    }
    // As a part.
    let p = std::path::Path::new("p");
    let _ = wtxt::git::check_part(part, p, &[]);
    let _ = wtxt::git::textconv_part(&part, p);
    let names = wtxt::git::Names { old: p, new: p };
    let _ = wtxt::git::diff_parts(&part, &part, names);
    // As a text to split: what splits joins back to the same bytes, whatever
    // the size of the reads (the `begin` lines are spliced across them).
    let mut sink: Vec<Vec<u8>> = Vec::new();
    if let Ok(head) = split::split(data, 8192, &mut sink) {
        if let Ok(split::Opened::Split(h)) = split::open(Box::new(&head[..])) {
            let mut joined = split::Joined::new(h, Box::new(sink.clone()), None);
            let mut back = Vec::new();
            let sizes = [1usize, 3, 7, 64, 4096, 5, 65536];
            let mut buf = vec![0u8; 65536];
            for i in 0.. {
                let n = joined.read(&mut buf[..sizes[i % sizes.len()]]).expect("a split made here joins");
                if n == 0 {
                    break;
                }
                back.extend_from_slice(&buf[..n]);
            }
            assert_eq!(back, data, "join(split(x)) == x");
            some_rows_passed_over(data, &head, sink);
        }
    }
});

/// A load of the middle third of each array's rows from the parts, unhashed
/// and passing over what it does not keep (a distributed rank's), never
/// panics, and gives back what a load of the single text does when that
/// verifies.
fn some_rows_passed_over(data: &[u8], head: &[u8], parts: Vec<Vec<u8>>) {
    use wtxt::format::{syntax::ArrLine, LineReader, Load};
    let rows: std::collections::BTreeMap<String, (u64, u64)> = data
        .split(|&b| b == b'\n')
        .filter_map(|l| ArrLine::parse(l).ok())
        .filter(|a| !wtxt::model::is_metadata_name(&a.name))
        .filter_map(|a| a.shape.first().map(|&n| (a.name, (n / 3, n - n / 3))))
        .collect();
    let Ok(split::Opened::Split(h)) = split::open(Box::new(head)) else { return };
    let load = Load { rows: Some(&rows), ..Default::default() };
    let joined = split::Joined::new(h, Box::new(parts), None).without_part_hashes();
    let passed = load.run_lines(LineReader::skipping(joined), data.len() as u64, &Default::default());
    if let Ok(whole) = load.run(data, data.len() as u64, &Default::default()) {
        let passed = passed.expect("some rows of a split that verifies load");
        assert_eq!(passed.arrays.len(), whole.arrays.len());
        for (a, b) in passed.arrays.iter().zip(&whole.arrays) {
            assert_eq!((&a.name, a.bytes()), (&b.name, b.bytes()));
        }
    }
}
