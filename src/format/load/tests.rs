//! The loader's tests: rows and arrays kept exactly, in both digest forms and
//! from parts read in part, and damage in what is kept always refused.

use super::*;
use crate::format::{split, syntax};
use crate::model::Dtype;

fn text(arrays: &[Array]) -> Vec<u8> {
    text_in(arrays, syntax::DigestForm::Sha256)
}

fn text_in(arrays: &[Array], digest: syntax::DigestForm) -> Vec<u8> {
    text_of(arrays, digest, 4)
}

fn text_of(arrays: &[Array], digest: syntax::DigestForm, rows_per_chunk: u64) -> Vec<u8> {
    let meta = syntax::Meta::new(0, Some("2026-01-01T00:00:00Z")).unwrap();
    let mut out = std::io::Cursor::new(Vec::new());
    let opts = write::WriteOptions { digest, ..write::WriteOptions::new(meta, rows_per_chunk) };
    write::write_snapshot(arrays, &opts, &mut out, &crate::progress::Progress::hidden()).unwrap();
    out.into_inner()
}

/// `t` with one character of the first base64 line of chunk `ix` of
/// array `name` changed; `in_ch`: the first digit of that chunk's `ch`
/// line's `sha256` instead.
fn damaged(t: &[u8], name: &str, ix: u64, in_ch: bool) -> Vec<u8> {
    let at = t.windows(name.len() + 10).position(|w| w == format!("arr name={name} ").as_bytes()).unwrap();
    let ch = format!("\nch ix={ix:06}");
    let body = at + t[at..].windows(ch.len()).position(|w| w == ch.as_bytes()).unwrap() + 1;
    let line = body + t[body..].iter().position(|&c| c == b'\n').unwrap() + 1;
    let at = if in_ch { body + memchr::memmem::find(&t[body..line], b"sha256=").unwrap() + 7 } else { line };
    let mut bad = t.to_vec();
    bad[at] = if bad[at] == b'a' { b'b' } else { b'a' };
    bad
}

/// Parts in memory that count the bytes read from them, and pass over
/// bytes unread as files do; those numbered in `gone` fail to open.
struct Counted {
    parts: Vec<Vec<u8>>,
    read: std::sync::Arc<std::sync::atomic::AtomicU64>,
    gone: Vec<u64>,
}

struct CountedPart(std::io::Cursor<Vec<u8>>, std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Read for CountedPart {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        self.1.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

impl crate::fs::Skip for CountedPart {
    fn skip(&mut self, n: u64, lines: u64) -> std::io::Result<bool> {
        self.0.skip(n, lines)
    }

    fn passes_over(&self) -> bool {
        true
    }
}

impl split::PartSource for Counted {
    fn open(&self, ix: u64) -> Result<Box<dyn crate::fs::Skip>> {
        if self.gone.contains(&ix) {
            return Err(crate::Error::input(crate::error::Position::None, format!("part {ix} is not here")));
        }
        let part = std::io::Cursor::new(self.parts[ix as usize - 1].clone());
        Ok(Box::new(CountedPart(part, self.read.clone())))
    }
    fn name(&self, ix: u64) -> std::path::PathBuf {
        split::part_name(ix).into()
    }
}

/// A rank's share of a split snapshot in the tree form: the chunks it
/// does not keep are passed over unread (a third of the parts' bytes
/// is read for a quarter of them kept), the rows it keeps are exact
/// and proven as when every byte is read, and a part cut short still
/// fails.
#[test]
fn a_share_of_split_parts_passes_over_the_chunks_it_does_not_keep_unread() {
    // Eight chunks of one 128 KiB row each, past what the readers read ahead.
    let row = 1usize << 17;
    let values: Vec<u8> = (0..8 * row).map(|i| (i * 7 % 251) as u8).collect();
    let a = Array::new("a", Dtype::U8, vec![8, row as u64], values.clone().into()).unwrap();
    let t = text_of(&[a, arr("b", 2)], syntax::DigestForm::Tree, 1);
    let rows = BTreeMap::from([("a".to_string(), (3, 5))]);
    let cut = |t: &[u8]| {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let head = split::split(t, 400 << 10, &mut parts).unwrap();
        (head, parts)
    };
    let load = |(head, parts): &(Vec<u8>, Vec<Vec<u8>>), skipping: bool| {
        let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let Ok(split::Opened::Split(h)) = split::open(Box::new(&head[..])) else { panic!("a head") };
        let source = Counted { parts: parts.clone(), read: read.clone(), gone: Vec::new() };
        let joined = split::Joined::new(h, Box::new(source), None).without_part_hashes();
        let lines = if skipping { LineReader::skipping(joined) } else { LineReader::new(joined) };
        let got = Load { rows: Some(&rows), ..Default::default() }.run_lines(lines, 1 << 30, &Default::default());
        (got, read.load(std::sync::atomic::Ordering::Relaxed))
    };
    let whole = cut(&t);
    let total: u64 = whole.1.iter().map(|p| p.len() as u64).sum();
    assert!(whole.1.len() >= 3, "{} parts", whole.1.len());
    for threads in [1, 5] {
        crate::threads::set(threads);
        let (got, read) = load(&whole, true);
        let got = got.unwrap();
        assert_eq!(got.arrays[0].bytes(), &values[3 * row..5 * row]);
        assert_eq!(got.report.skipped_chunks, 6, "all of a's one-row chunks but those kept");
        assert_eq!(got.report.arrays_passed_over, 1, "b, none of whose rows is kept");
        // The two chunks kept are a quarter of the parts; each chunk
        // passed over costs what was read ahead into it.
        assert!(read < total / 3, "{read} of {total} bytes read");
        let (through, all) = load(&whole, false);
        assert_eq!(through.unwrap().arrays[0].bytes(), got.arrays[0].bytes());
        assert_eq!(all, total, "read through: every byte");
        // What is passed over is not checked (`wtxt verify` checks it)...
        assert!(load(&cut(&damaged(&t, "a", 6, false)), true).0.is_ok());
        // ...nor is an array none of whose rows is kept (its `arr` line
        // is bound by the root; its chunks are passed over whole)...
        assert!(load(&cut(&damaged(&t, "b", 9, true)), true).0.is_ok());
        // ...but a kept array's `ch` lines' digests are bound to the
        // root, and a kept chunk is checked.
        for (name, ix, in_ch) in [("a", 6, true), ("a", 0, true), ("a", 4, false)] {
            let Err(e) = load(&cut(&damaged(&t, name, ix, in_ch)), true).0 else { panic!("{name} {ix} loaded") };
            assert_eq!(e.kind(), crate::error::Kind::Check, "{e}");
        }
        // A byte gone from a chunk passed over: the line after it is
        // not where the text says it is.
        let mut short = whole.clone();
        let (p, at) = short
            .1
            .iter()
            .enumerate()
            .find_map(|(i, p)| Some((i, memchr::memmem::find(p, b"\nch ix=000006")?)))
            .unwrap();
        short.1[p].remove(at + 300);
        let Err(e) = load(&short, true).0 else { panic!("a part cut short loaded") };
        assert!(e.to_string().contains("endch"), "{e}");
    }
    crate::threads::set(0);
}

/// Issue 68.1: in the tree form an array asked alone is read from the
/// parts that hold it; the others are not opened at all (here they
/// fail to open), and the array is exactly what a full read gives,
/// proven by the root: a changed byte or `ch` line of it is refused,
/// whatever the parts passed over hold.
#[test]
fn an_array_asked_alone_opens_only_the_parts_that_hold_it() {
    let row = 1usize << 17;
    let make = |name: &str, k: usize| {
        let v: Vec<u8> = (0..6 * row).map(|i| ((i * 7 + k) % 251) as u8).collect();
        Array::new(name, Dtype::U8, vec![6, row as u64], v.into()).unwrap()
    };
    let arrays = [make("a", 1), arr("b", 9), make("c", 2), make("d", 3)];
    let t = text_of(&arrays, syntax::DigestForm::Tree, 1);
    let cut = |t: &[u8]| {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let head = split::split(t, 300 << 10, &mut parts).unwrap();
        (head, parts)
    };
    let (head, parts) = cut(&t);
    // Which parts hold `c`: from the one its `begin` line is in to the
    // one `d`'s is in.
    let holds = |name: &str| {
        parts.iter().position(|p| memchr::memmem::find(p, format!("begin name={name} ").as_bytes()).is_some()).unwrap()
            as u64
            + 1
    };
    let (first, last) = (holds("c"), holds("d"));
    assert!(first > 2 && last < parts.len() as u64, "{first}..={last} of {}", parts.len());
    let gone: Vec<u64> = (1..=parts.len() as u64).filter(|ix| *ix < first || *ix > last).collect();
    let rows = BTreeMap::from([("c".to_string(), (0, 6))]);
    let load = |(head, parts): &(Vec<u8>, Vec<Vec<u8>>), gone: &[u64]| {
        let Ok(split::Opened::Split(h)) = split::open(Box::new(&head[..])) else { panic!("a head") };
        let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let source = Counted { parts: parts.clone(), read, gone: gone.to_vec() };
        let sparse = split::Sparse::new(h, Box::new(source), &|n| n == "c").unwrap();
        Load { rows: Some(&rows), ..Default::default() }.run_lines(
            LineReader::skipping(sparse),
            1 << 30,
            &Default::default(),
        )
    };
    for threads in [1, 5] {
        crate::threads::set(threads);
        let got = load(&(head.clone(), parts.clone()), &gone).unwrap();
        assert_eq!(got.arrays.len(), 1);
        assert_eq!(got.arrays[0].bytes(), arrays[2].bytes());
        assert!(got.report.ok);
        // The parts passed over may hold anything.
        let mut junk = parts.clone();
        for ix in &gone {
            junk[*ix as usize - 1] = b"not a part".to_vec();
        }
        assert_eq!(load(&(head.clone(), junk), &[]).unwrap().arrays[0].bytes(), arrays[2].bytes());
        // What it returns is proven: a changed byte, a changed `ch`
        // line of a chunk of it, refused.
        for (ix, in_ch) in [(0, false), (5, false), (3, true)] {
            let Err(e) = load(&cut(&damaged(&t, "c", ix, in_ch)), &gone) else { panic!("c {ix} {in_ch} loaded") };
            assert_eq!(e.kind(), crate::error::Kind::Check, "{e}");
        }
        // A part it needs that is missing fails the load.
        assert!(load(&(head.clone(), parts.clone()), &[first + 1]).is_err());
    }
    crate::threads::set(0);
}

fn arr(name: &str, fill: u8) -> Array {
    Array::new(name, Dtype::U8, vec![64, 4], vec![fill; 256].into()).unwrap()
}

#[test]
fn a_load_shares_the_arrays_a_known_file_holds_and_still_checks_them() {
    let a = text(&[arr("a", 1), arr("b", 2)]);
    let b = text(&[arr("a", 1), arr("b", 3)]);
    let first = load(&a[..], a.len() as u64, &Default::default()).unwrap();
    let second =
        Load { known: &[&first], ..Default::default() }.run(&b[..], b.len() as u64, &Default::default()).unwrap();
    assert!(second.arrays[0].data.is_same_buffer(&first.arrays[0].data), "equal: shared");
    assert!(!second.arrays[1].data.is_same_buffer(&first.arrays[1].data));
    assert_eq!(second.arrays[1].bytes(), &[3; 256][..]);
    assert_eq!(second.digests[0], first.digests[0]);
    assert_ne!(second.digests[1], first.digests[1]);
    // A shared array is verified all the same: damage in it fails the load.
    let body = b.windows(13).position(|w| w == b"\nch ix=000000").unwrap() + 1;
    let line = body + b[body..].iter().position(|&c| c == b'\n').unwrap() + 1;
    let mut bad = b.clone();
    bad[line] = if bad[line] == b'A' { b'B' } else { b'A' };
    assert!(Load { known: &[&first], ..Default::default() }
        .run(&bad[..], bad.len() as u64, &Default::default())
        .is_err());
}

#[test]
fn a_load_of_rows_keeps_those_rows_and_the_metadata_and_still_checks_everything() {
    let counting = Array::new("a", Dtype::U8, vec![64, 4], (0..=255u8).collect::<Vec<_>>().into()).unwrap();
    let meta = Array::new("__m", Dtype::U8, vec![3], vec![7, 8, 9].into()).unwrap();
    let t = text(&[meta, counting, arr("b", 2)]);
    let load = |rows: &BTreeMap<String, (u64, u64)>, t: &[u8]| {
        Load { rows: Some(rows), ..Default::default() }.run(t, t.len() as u64, &Default::default())
    };
    // Rows 10..23 cross chunk boundaries (4 rows a chunk).
    let rows = BTreeMap::from([("a".to_string(), (10, 23))]);
    let got = load(&rows, &t).unwrap();
    let names: Vec<_> = got.arrays.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["__m", "a"]);
    assert_eq!(got.arrays[1].shape, [13, 4]);
    assert_eq!(got.arrays[1].bytes(), &(40..92u8).collect::<Vec<_>>()[..]);
    assert_eq!(got.rows, [None, Some((10, 23))]);
    assert_eq!(got.arrays[0].bytes(), &[7, 8, 9]);
    // Rows past the array's end are refused.
    let past = BTreeMap::from([("a".to_string(), (60, 65))]);
    let Err(e) = load(&past, &t) else { panic!("rows past the end were loaded") };
    assert!(e.to_string().contains("rows 60..65 asked of its 64"), "{e}");
    // Damage in an array not kept still fails the load.
    let at = t.windows(11).position(|w| w == b"arr name=b ").unwrap();
    let body = at + t[at..].windows(13).position(|w| w == b"\nch ix=000000").unwrap() + 1;
    let line = body + t[body..].iter().position(|&c| c == b'\n').unwrap() + 1;
    let mut bad = t.clone();
    bad[line] = if bad[line] == b'A' { b'B' } else { b'A' };
    assert!(load(&rows, &bad).is_err());
    assert!(load(&rows, &damaged(&t, "b", 7, false)).is_err());
}

#[test]
fn a_load_of_rows_in_the_tree_form_decodes_only_the_chunks_it_keeps_and_proves_them() {
    let counting = Array::new("a", Dtype::U8, vec![64, 4], (0..=255u8).collect::<Vec<_>>().into()).unwrap();
    let meta = Array::new("__m", Dtype::U8, vec![3], vec![7, 8, 9].into()).unwrap();
    let t = text_in(&[meta, counting, arr("b", 2)], syntax::DigestForm::Tree);
    let rows = BTreeMap::from([("a".to_string(), (10, 23))]);
    let load = |t: &[u8]| Load { rows: Some(&rows), ..Default::default() }.run(t, t.len() as u64, &Default::default());
    // In place, on two hashing threads, and with chunks decoded on two more.
    for threads in [1, 3, 5] {
        crate::threads::set(threads);
        let got = load(&t).unwrap();
        assert_eq!(got.arrays[1].bytes(), &(40..92u8).collect::<Vec<_>>()[..]);
        assert_eq!(got.arrays[0].bytes(), &[7, 8, 9]);
        // Rows 10..23 are in chunks 2..=5 of a's 16; none of b's is needed.
        assert_eq!((got.report.skipped_chunks, got.report.arrays_passed_over), (12, 1));
        assert_eq!(got.report.fastxor, None);
        // Damage in a chunk not decoded touches nothing kept, nor does
        // any in an array passed over whole (b: its `arr` line is what
        // the root binds)...
        assert!(load(&damaged(&t, "b", 7, false)).is_ok());
        assert!(load(&damaged(&t, "b", 7, true)).is_ok());
        assert!(load(&damaged(&t, "a", 0, false)).is_ok());
        // ...but a kept array's `ch` lines' digests are bound to the
        // root, and a chunk kept is checked.
        for (name, ix, in_ch) in [("a", 15, true), ("a", 0, true), ("a", 3, false), ("a", 3, true), ("__m", 0, false)] {
            let Err(e) = load(&damaged(&t, name, ix, in_ch)) else { panic!("{name} {ix} {in_ch} loaded") };
            assert_eq!(e.kind(), crate::error::Kind::Check, "{e}");
        }
        // An array passed over still has its lines counted: one LF
        // fewer is a structural error, named on its line.
        let mut joined = t.clone();
        // b is the last array; its chunk 7's one base64 line (16 bytes:
        // 24 characters, a space and the parity digit) ends 27 bytes
        // after its `ch` line does.
        let ch = t.windows(13).rposition(|w| w == b"\nch ix=000007").unwrap() + 1;
        let lf = ch + t[ch..].iter().position(|&c| c == b'\n').unwrap() + 27;
        assert_eq!(joined[lf], b'\n');
        joined.remove(lf);
        let Err(e) = load(&joined) else { panic!("a chunk one line short loaded") };
        assert!(e.to_string().contains("base64 lines"), "{e}");
        // A load of everything decodes every chunk.
        let all = Load::default().run(&t[..], t.len() as u64, &Default::default()).unwrap();
        assert_eq!((all.report.skipped_chunks, all.report.fastxor.is_some()), (0, true));
    }
    crate::threads::set(0);
}

/// Rows decoded into the caller's memory are the rows a load keeps, in
/// both forms; a destination of another type, shape or size, or one
/// the snapshot does not hold, is refused before a byte is written,
/// and damage in what is kept still fails the load.
#[test]
fn rows_decoded_into_the_callers_memory_are_the_rows_a_load_keeps() {
    let counting = Array::new("a", Dtype::U8, vec![64, 4], (0..=255u8).collect::<Vec<_>>().into()).unwrap();
    let meta = Array::new("__m", Dtype::U8, vec![3], vec![7, 8, 9].into()).unwrap();
    let rows = BTreeMap::from([("a".to_string(), (10, 23))]);
    let into = |t: &[u8], name: &str, dtype, shape: Vec<u64>, mem: &mut [u8]| {
        let d = Destination { dtype, shape, bytes: mem };
        Load { rows: Some(&rows), ..Default::default() }.run_lines_into(
            LineReader::new(t),
            t.len() as u64,
            &Default::default(),
            BTreeMap::from([(name.to_string(), d)]),
        )
    };
    for form in [syntax::DigestForm::Sha256, syntax::DigestForm::Tree] {
        let t = text_in(&[meta.clone(), counting.clone(), arr("b", 2)], form);
        let mut mem = vec![0u8; 13 * 4];
        let got = into(&t, "a", Dtype::U8, vec![13, 4], &mut mem).unwrap();
        assert_eq!(mem, (40..92u8).collect::<Vec<_>>());
        assert_eq!(got.placed, ["a"]);
        let names: Vec<_> = got.arrays.iter().map(|a| a.name.as_str()).collect();
        assert_eq!((names, got.rows.len(), got.digests.len()), (vec!["__m"], 1, 1));
        for (dtype, shape, len) in
            [(Dtype::I8, vec![13, 4], 52), (Dtype::U8, vec![26, 2], 52), (Dtype::U8, vec![13, 4], 51)]
        {
            let mut mem = vec![0u8; len];
            let Err(e) = into(&t, "a", dtype, shape, &mut mem) else { panic!("{dtype:?} loaded") };
            assert!(e.to_string().contains("where the destination is"), "{e}");
            assert!(mem.iter().all(|&b| b == 0));
        }
        let Err(e) = into(&t, "c", Dtype::U8, vec![13, 4], &mut mem) else { panic!("c loaded") };
        assert!(e.to_string().contains("no array c among those kept"), "{e}");
        assert!(into(&damaged(&t, "a", 3, false), "a", Dtype::U8, vec![13, 4], &mut mem).is_err());
        // The signature policy is the header's to decide: a file it
        // refuses writes nothing into the caller's memory.
        let mut mem = vec![0u8; 13 * 4];
        let opts = VerifyOptions { require_signature: true, ..Default::default() };
        let d = Destination { dtype: Dtype::U8, shape: vec![13, 4], bytes: &mut mem };
        let Err(e) = Load { rows: Some(&rows), ..Default::default() }.run_lines_into(
            LineReader::new(&t[..]),
            t.len() as u64,
            &opts,
            BTreeMap::from([("a".to_string(), d)]),
        ) else {
            panic!("an unsigned file loaded under a required signature")
        };
        assert!(e.to_string().contains("line 5: signature required: the file is not signed"), "{e}");
        assert!(mem.iter().all(|&b| b == 0));
    }
}

/// A partial read of a sub-byte array cuts on bytes: a row-blocked f4e2m1
/// array's rows are whole bytes, a rank-1 one's window of elements must
/// start and end on a byte.
#[test]
fn a_load_of_rows_of_a_sub_byte_array_cuts_whole_bytes() {
    let blocks = Array::new("f4", Dtype::F4E2m1, vec![16, 6], (0..48u8).collect::<Vec<_>>().into()).unwrap();
    let flat = Array::new("f6", Dtype::F6E2m3, vec![8], (0..6u8).collect::<Vec<_>>().into()).unwrap();
    let t = text(&[blocks, flat]);
    let load = |rows: &[(&str, (u64, u64))]| {
        let rows: BTreeMap<String, (u64, u64)> = rows.iter().map(|(n, r)| (n.to_string(), *r)).collect();
        Load { rows: Some(&rows), ..Default::default() }.run(&t[..], t.len() as u64, &Default::default())
    };
    let got = load(&[("f4", (5, 9)), ("f6", (4, 8))]).unwrap();
    assert_eq!(
        (got.arrays[0].shape.as_slice(), got.arrays[0].bytes()),
        (&[4, 6][..], &(15..27u8).collect::<Vec<_>>()[..])
    );
    assert_eq!((got.arrays[1].shape.as_slice(), got.arrays[1].bytes()), (&[4][..], &[3u8, 4, 5][..]));
    let Err(e) = load(&[("f6", (2, 8))]) else { panic!("half a block was loaded") };
    assert!(e.to_string().contains("rows 2..8 of f6e2m3 elements end inside a byte (ask for multiples of 4)"), "{e}");
}
