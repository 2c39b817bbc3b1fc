//! Split snapshots: any bytes as a head (parsed, then joined with a part
//! made of the same bytes), as a part (scanned, diffed, chunk-checked), and
//! as a text to split, never panic; a text that splits joins back exactly.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Read;
use wtxt::wtxt::split;

fuzz_target!(|data: &[u8]| {
    // As a head, its parts being the same bytes.
    if let Ok(split::Opened::Split(h)) = split::open(Box::new(data)) {
        let parts = vec![data.to_vec(); h.parts.len().min(4)];
        let mut joined = split::Joined::new(h, Box::new(parts), Some(Default::default()));
        let _ = wtxt::wtxt::verify::verify(&mut joined, &Default::default(), None);
    }
    // As a part.
    let p = std::path::Path::new("p");
    let _ = wtxt::git::parts::check_part(data, p, &[]);
    let _ = wtxt::git::parts::textconv(&data, p);
    let names = wtxt::git::diff::Names { old: p, new: p };
    let _ = wtxt::git::parts::diff_parts(&data, &data, names);
    // As a text to split: what splits joins back to the same bytes.
    let mut sink: Vec<Vec<u8>> = Vec::new();
    if let Ok(head) = split::split(data, 8192, &mut sink) {
        if let Ok(split::Opened::Split(h)) = split::open(Box::new(&head[..])) {
            let mut joined = split::Joined::new(h, Box::new(sink), None);
            let mut back = Vec::new();
            joined.read_to_end(&mut back).expect("a split made here joins");
            assert_eq!(back, data, "join(split(x)) == x");
        }
    }
});
