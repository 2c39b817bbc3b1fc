//! The distributed writer's tests: ranks in one process give the one
//! process's bytes, and what each rank reads back catches.

use super::*;
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::SecretKey;
use crate::format::split::PartSize;
use crate::format::syntax::DigestForm;
use crate::model::Dtype;
use crate::progress::Progress;

fn arrays() -> Vec<Array> {
    let bytes = |n: usize, seed: u32| {
        (0..n).map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(seed) as u8).collect::<Vec<u8>>()
    };
    vec![
        Array::new("a_scalar", Dtype::U8, vec![], bytes(1, 1).into()).unwrap(),
        Array::new("b_empty", Dtype::F32, vec![0, 3], Vec::new().into()).unwrap(),
        Array::new("embed", Dtype::F32, vec![301, 24], bytes(301 * 24 * 4, 2).into()).unwrap(),
        Array::new("vec", Dtype::F64, vec![9001], bytes(9001 * 8, 3).into()).unwrap(),
    ]
}

fn options(size: PartSize, sign: bool, digest: DigestForm) -> DistOptions {
    DistOptions {
        meta: Meta::new(3, Some("2026-01-01T00:00:00Z")).unwrap(),
        rows_per_chunk: 128,
        merkle_prev: [7; 32],
        keys: Keys {
            hmac_key: Some(HmacKey::from_hex(&"ab".repeat(32)).unwrap()),
            sign_key: sign.then(|| SecretKey::from_file(Path::new("fixtures/wtxt/keys/sign.pem")).unwrap()),
            ..Keys::default()
        },
        output: Output { part_size: size, digest },
    }
}

/// Files of the snapshot at `head`: the head, then its parts.
fn files(head: &Path) -> Vec<Vec<u8>> {
    let mut out = vec![std::fs::read(head).unwrap()];
    let dir = crate::store::parts_dir(head);
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut names: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        names.sort();
        out.extend(names.iter().map(|p| std::fs::read(p).unwrap()));
    }
    out
}

/// `world` writers in one process, each owning a contiguous share of
/// every array's chunks, handing hash states on as ranks would (in the
/// tree form, reporting their chunks' digests instead).
fn write_as_ranks(world: usize, size: PartSize, sign: bool, digest: DigestForm, out: &Path) {
    let stage = out.parent().unwrap().join(format!(".stage{world}"));
    std::fs::create_dir(&stage).unwrap();
    let ranks: Vec<DistWrite> =
        (0..world).map(|_| DistWrite::new(arrays(), options(size, sign, digest), out, &stage).unwrap()).collect();
    let n = ranks[0].arrays().len();
    let owner = |i: usize, ix: u64| {
        let count = ranks[0].chunks(i).unwrap().len() as u64;
        ((ix * world as u64) / count) as usize
    };
    let mut reported = Vec::new();
    for (r, w) in ranks.iter().enumerate() {
        let mine: Vec<(usize, u64, Raw)> = (0..n)
            .flat_map(|i| (0..w.chunks(i).unwrap().len() as u64).map(move |ix| (i, ix)))
            .filter(|&(i, ix)| owner(i, ix) == r)
            .map(|(i, ix)| (i, ix, None))
            .collect();
        let digests = w.write_chunks(&mine).unwrap();
        reported.extend(mine.iter().zip(digests).map(|(&(i, ix, _), d)| (i, ix, d)));
    }
    ranks[0].write_fixed().unwrap();
    if digest == DigestForm::Tree {
        // Each rank reads back what it wrote: its report is the digests
        // it wrote them with.
        for (r, w) in ranks.iter().enumerate() {
            let mine: Vec<(usize, u64)> =
                reported.iter().filter(|&&(i, ix, _)| owner(i, ix) == r).map(|&(i, ix, _)| (i, ix)).collect();
            let want: Vec<Hash> = reported.iter().filter(|&&(i, ix, _)| owner(i, ix) == r).map(|&(.., d)| d).collect();
            let raw: Vec<(usize, u64, Raw)> = mine.iter().map(|&(i, ix)| (i, ix, None)).collect();
            assert_eq!(w.check_chunks(&mine).unwrap(), (want, w.fastxor(&raw).unwrap()));
        }
        let fastxor = ranks.iter().enumerate().fold(0, |x, (r, w)| {
            let mine: Vec<(usize, u64, Raw)> =
                reported.iter().filter(|&&(i, ix, _)| owner(i, ix) == r).map(|&(i, ix, _)| (i, ix, None)).collect();
            x ^ w.fastxor(&mine).unwrap()
        });
        reported.reverse(); // any order
        let (lines, sha256_all) = ranks[0].tree_arr_lines(&reported).unwrap();
        let parts: Vec<PartLine> = (0..ranks[0].part_count()).map(|k| ranks[k % world].hash_part(k).unwrap()).collect();
        ranks[0].finish(&lines, sha256_all, fastxor, &parts, StagedCheck::ChunksChecked).unwrap();
        std::fs::remove_dir_all(&stage).unwrap();
        return;
    }
    // Each array's hash, chunk by chunk, by whichever rank owns it.
    let mut lines = Vec::new();
    let mut all: Option<Sha256State> = None;
    for i in 0..n {
        let mut state: Option<Vec<u8>> = None;
        for ix in 0..ranks[0].chunks(i).unwrap().len() as u64 {
            let w = &ranks[owner(i, ix)];
            let got = state.map(|b| ArrayHash::from_bytes(&b).unwrap());
            state = Some(w.hash_array(i, &[(ix, None)], got).unwrap().to_bytes());
        }
        let last = ranks[owner(i, ranks[0].chunks(i).unwrap().len() as u64 - 1)]
            .arr_line(i, ArrayHash::from_bytes(&state.unwrap()).unwrap());
        lines.push(last.unwrap());
    }
    let mut fastxor = 0;
    for i in 0..n {
        for ix in 0..ranks[0].chunks(i).unwrap().len() as u64 {
            let w = &ranks[owner(i, ix)];
            let handed = all.map(|s| Sha256State::from_bytes(&s.to_bytes()).unwrap());
            all = Some(w.hash_all(handed, i, &[(ix, None)], &lines[i]).unwrap());
            fastxor ^= w.fastxor(&[(i, ix, None)]).unwrap();
        }
    }
    let parts: Vec<PartLine> = (0..ranks[0].part_count()).map(|k| ranks[k % world].hash_part(k).unwrap()).collect();
    ranks[0].finish(&lines, all.unwrap().finalize(), fastxor, &parts, StagedCheck::Whole).unwrap();
    std::fs::remove_dir_all(&stage).unwrap();
}

/// A rank's read-back catches a byte of its chunks' text that is not
/// what it wrote, naming the array and chunk; with every rank's chunks
/// checked, the coordinator's own pass still refuses a changed `ch`
/// line (its digest is a leaf of the root).
#[test]
fn a_rank_checking_its_chunks_finds_a_changed_byte_and_the_coordinator_a_changed_ch_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.wtxt");
    let stage = dir.path().join(".stage");
    std::fs::create_dir(&stage).unwrap();
    let size = PartSize::Max(64 << 10);
    let w = DistWrite::new(arrays(), options(size, false, DigestForm::Tree), &out, &stage).unwrap();
    let all: Vec<(usize, u64)> =
        (0..w.arrays().len()).flat_map(|i| (0..w.chunks(i).unwrap().len() as u64).map(move |ix| (i, ix))).collect();
    let raw: Vec<(usize, u64, Raw)> = all.iter().map(|&(i, ix)| (i, ix, None)).collect();
    let digests = w.write_chunks(&raw).unwrap();
    w.write_fixed().unwrap();
    assert_eq!(w.check_chunks(&all).unwrap().0, digests);
    let reported: Vec<(usize, u64, Hash)> = all.iter().zip(&digests).map(|(&(i, ix), &d)| (i, ix, d)).collect();
    let (lines, sha256_all) = w.tree_arr_lines(&reported).unwrap();
    let part = stage.join(part_name(2));
    let text = std::fs::read(&part).unwrap();
    let change = |at: usize| {
        let mut t = text.clone();
        t[at] = if t[at] == b'A' { b'B' } else { b'A' };
        std::fs::write(&part, &t).unwrap();
    };
    // A base64 character: found by the read-back.
    let ch = memchr::memmem::find(&text, b"\nch ").unwrap() + 1;
    let body = ch + memchr::memchr(b'\n', &text[ch..]).unwrap() + 1;
    change(body + 10);
    let e = w.check_chunks(&all).unwrap_err();
    assert!(e.to_string().contains("chunk") && e.to_string().contains("000002.wtxtpart"), "{e}");
    // A digit of a `ch` line's digest: found by the coordinator.
    change(ch + memchr::memmem::find(&text[ch..], b"sha256=").unwrap() + 7);
    let parts: Vec<PartLine> = (0..w.part_count()).map(|k| w.hash_part(k).unwrap()).collect();
    let fastxor = w.fastxor(&raw).unwrap();
    let e = w.finish(&lines, sha256_all, fastxor, &parts, StagedCheck::ChunksChecked).unwrap_err();
    assert!(e.to_string().contains("does not verify"), "{e}");
    assert!(!out.exists(), "nothing installed");
}

#[test]
fn ranks_writing_their_chunks_give_the_one_process_snapshot() {
    for digest in [DigestForm::Sha256, DigestForm::Tree] {
        for (size, sign) in
            [(PartSize::Max(64 << 10), true), (PartSize::Whole, false), (PartSize::Max(64 << 10), false)]
        {
            let dir = tempfile::tempdir().unwrap();
            let one = dir.path().join("one.wtxt");
            let o = options(size, sign, digest);
            let opts = super::options(&o);
            crate::store::write_wtxt(&arrays(), &opts, &one, size, None, &Progress::hidden()).unwrap();
            let want = files(&one);
            assert_eq!(want.len() > 1, size != PartSize::Whole);
            for world in [1, 2, 3] {
                let out = dir.path().join(format!("w{world}.wtxt"));
                write_as_ranks(world, size, sign, digest, &out);
                assert_eq!(files(&out), want, "{digest:?}, {world} ranks, {size:?}");
            }
        }
    }
}
