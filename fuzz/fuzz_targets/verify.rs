//! WTXT: the strict verifier, loading, and canonical re-emission (which must
//! give back the same bytes for anything that verifies); a load of some rows
//! of each array (a distributed rank's, which skips chunks in the tree form)
//! never panics, and gives back exactly those rows of a file that verifies.
#![no_main]
use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use wtxt::format::syntax::ArrLine;

fuzz_target!(|data: &[u8]| {
    let _ = wtxt::format::verify(data, &Default::default(), None);
    let full = wtxt::format::load(data, data.len() as u64, &Default::default());
    if let Ok(l) = &full {
        let c = wtxt::format::canonical_bytes(l).expect("a verified file re-emits");
        // Canonical writer output is what verifies; anything else that
        // verifies must at least re-emit to something that verifies.
        let again = wtxt::format::load(&c[..], c.len() as u64, &Default::default()).expect("re-emitted file verifies");
        assert_eq!(again.arrays.len(), l.arrays.len());
    }
    // The middle third of each array's rows, as its `arr` line declares them.
    let rows: BTreeMap<String, (u64, u64)> = data
        .split(|&b| b == b'\n')
        .filter_map(|l| ArrLine::parse(l).ok())
        .filter(|a| !wtxt::model::is_metadata_name(&a.name))
        .filter_map(|a| a.shape.first().map(|&n| (a.name, (n / 3, n - n / 3))))
        .collect();
    if !rows.is_empty() {
        let load = wtxt::format::Load { rows: Some(&rows), ..Default::default() };
        let some = load.run(data, data.len() as u64, &Default::default());
        if let Ok(full) = &full {
            let some = some.expect("some rows of a file that verifies load");
            for b in &full.arrays {
                let Some(&(start, end)) = rows.get(&b.name) else { continue };
                let a = some.arrays.iter().find(|a| a.name == b.name).expect("an array asked for is kept");
                let row = b.bytes().len() / b.shape[0].max(1) as usize;
                assert_eq!(a.bytes(), &b.bytes()[start as usize * row..end as usize * row], "{}", b.name);
            }
        }
    }
    let _ = wtxt::git::textconv(data);
});
