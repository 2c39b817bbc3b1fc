//! The pack store's tests: blobs stored whole and as deltas, read back
//! through Git, and what a hostile object store gets from it.

use super::delta::lines;
use super::*;

fn stored(dir: &Path, jobs: &[Job]) -> Vec<Oid> {
    let copy = |o: &Object| Object { id: o.id, bytes: o.bytes.clone() };
    let ids = store(
        dir,
        jobs,
        |j| match j {
            Job::Blob { base: Some(_), .. } => Expect::Delta,
            Job::Blob { base: None, .. } => Expect::Blob,
            Job::File(_) => Expect::File,
            Job::Stored(_) => Expect::Blob,
        },
        |j| match j {
            Job::Blob { target, base } => Ok(Job::Blob { target: copy(target), base: base.as_ref().map(copy) }),
            Job::File(p) => Ok(Job::File(p.clone())),
            Job::Stored(id) => Ok(Job::Stored(*id)),
        },
    )
    .unwrap()
    .ids;
    for idx in std::fs::read_dir(dir.join("pack")).unwrap().map(|e| e.unwrap().path()) {
        if idx.extension().is_some_and(|x| x == "idx") {
            let out = std::process::Command::new("git").arg("verify-pack").arg(&idx).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }
    ids
}

#[test]
fn a_blob_held_already_is_not_stored_again_and_a_pack_of_none_is_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let packs = || std::fs::read_dir(dir.path().join("pack")).map_or(0, |d| d.count());
    let held = Object::hashed(lines(300, |_| false));
    let id = held.id;
    assert_eq!(stored(dir.path(), &[Job::Blob { target: held, base: None }]), [id]);
    let before = packs();
    assert_eq!(stored(dir.path(), &[Job::Stored(id), Job::Stored(id)]), [id, id]);
    assert_eq!(packs(), before, "a pack of no objects was written");
    // Beside a new object: its pack lists that one alone (and verifies).
    let new = Object::hashed(lines(300, |_| true));
    let n = new.id;
    assert_eq!(stored(dir.path(), &[Job::Stored(id), Job::Blob { target: new, base: None }]), [id, n]);
    assert_eq!(stored_prefix(dir.path(), n, 1 << 20).unwrap(), lines(300, |_| true));
}

#[test]
fn a_prefix_is_read_from_a_whole_packed_blob_and_not_from_a_delta() {
    let dir = tempfile::tempdir().unwrap();
    let base = Object::hashed(lines(3000, |_| false));
    let target = Object::hashed(lines(3000, |i| i == 10));
    let other = Object::hashed(lines(3000, |_| true));
    let (b, t, o) = (base.id, target.id, other.id);
    let ids = stored(dir.path(), &[Job::Blob { target, base: Some(base) }, Job::Blob { target: other, base: None }]);
    assert_eq!(ids, [t, o]);
    assert_eq!(stored_prefix(dir.path(), t, 100).unwrap(), lines(3000, |i| i == 10)[..100]);
    assert_eq!(stored_prefix(dir.path(), o, 1 << 20).unwrap(), lines(3000, |_| true));
    assert!(stored_prefix(dir.path(), b, 100).is_none(), "the old version, a delta against the new");
    assert!(stored_prefix(dir.path(), Oid::ZERO_SHA1, 100).is_none(), "not there");
    let start = |v: &[u8]| v[..4000].to_vec();
    assert!(starts_alike(&start(&lines(3000, |_| false)), &start(&lines(3000, |i| i == 10))));
    assert!(!starts_alike(&start(&lines(3000, |_| false)), &start(&lines(3000, |_| true))));
}

#[test]
fn a_pack_whose_expected_delta_did_not_pay_gets_its_count_and_checksum_corrected() {
    let dir = tempfile::tempdir().unwrap();
    // Alike in its first lines, changed in the rest: no delta after all.
    let base = Object::hashed(lines(3000, |_| false));
    let target = Object::hashed(lines(3000, |i| i > 100));
    let t = target.id;
    assert_eq!(stored(dir.path(), &[Job::Blob { target, base: Some(base) }]), [t]);
    assert_eq!(stored_prefix(dir.path(), t, 1 << 20).unwrap(), lines(3000, |i| i > 100));
}

/// The keep files in the pack folder under `dir`, with their content.
fn keeps(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(dir.join("pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "keep"))
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    out
}

#[test]
fn a_pack_of_whole_objects_is_kept_until_a_newer_pack_stores_one_as_a_delta() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let v0 = || Object::hashed(lines(3000, |_| false));
    stored(d, &[Job::Blob { target: v0(), base: None }]);
    let first = keeps(d);
    assert_eq!(first.len(), 1, "whole objects only: kept");
    assert_eq!(first[0].1, KEEP);
    assert!(first[0].0.with_extension("pack").is_file());
    // Someone else's keep on a second pack of whole objects.
    let w0 = || Object::hashed(lines(3000, |i| i % 2 == 0));
    stored(d, &[Job::Blob { target: w0(), base: None }]);
    let foreign = keeps(d).into_iter().find(|k| k.0 != first[0].0).unwrap().0;
    std::fs::remove_file(&foreign).unwrap();
    std::fs::write(&foreign, b"receive-pack 42 on host\n").unwrap();
    // A newer version of each, the old ones stored again as deltas.
    let (v1, w1) = (Object::hashed(lines(3000, |i| i == 7)), Object::hashed(lines(3000, |i| i % 2 == 0 || i == 9)));
    stored(d, &[Job::Blob { target: v1, base: Some(v0()) }, Job::Blob { target: w1, base: Some(w0()) }]);
    assert_eq!(
        keeps(d),
        [(foreign, b"receive-pack 42 on host\n".to_vec())],
        "ours off, theirs left, none on the pack of deltas"
    );
    // Whole again, and a pack that held none of the superseded stays kept.
    stored(d, &[Job::Blob { target: Object::hashed(lines(3000, |_| true)), base: None }]);
    assert_eq!(keeps(d).len(), 2);
    stored(
        d,
        &[Job::Blob {
            target: Object::hashed(lines(3000, |i| i == 8)),
            base: Some(Object::hashed(lines(3000, |i| i == 7))),
        }],
    );
    assert_eq!(keeps(d).len(), 2, "the superseded object was in a pack of deltas, kept by no one");
    assert_eq!(release_all(d).unwrap(), 1, "every keep of ours taken off");
    assert_eq!(keeps(d).len(), 1, "theirs left");
}

#[test]
fn files_coded_as_they_are_read_two_at_a_time_are_the_blobs_coded_whole() {
    let dir = tempfile::tempdir().unwrap();
    let block = crate::odb::deflate::BLOCK;
    // Empty, a block exactly (the end found a block ahead), two and a
    // half, a few bytes: in jobs of two files (of unlike lengths), and
    // of one file before a blob's job of its own.
    let sizes = [0, block, 2 * block, 2 * block + block / 2, 3];
    let mut jobs = Vec::new();
    let mut wholes = Vec::new();
    for (i, n) in sizes.into_iter().enumerate() {
        let bytes: Vec<u8> = lines(n / 7 + 1, |j| j % (i + 2) == 0).into_iter().cycle().take(n).collect();
        let path = dir.path().join(format!("f{i}"));
        std::fs::write(&path, &bytes).unwrap();
        jobs.push(Job::File(path));
        wholes.push(Object::hashed(bytes));
    }
    let blob = Object::hashed(lines(500, |j| j == 3));
    jobs.insert(3, Job::Blob { target: Object::hashed(blob.bytes.clone()), base: None });
    wholes.insert(3, blob);
    let objects = dir.path().join("objects");
    assert_eq!(stored(&objects, &jobs), wholes.iter().map(|w| w.id).collect::<Vec<_>>());
    let pack = std::fs::read_dir(objects.join("pack")).unwrap().map(|e| e.unwrap().path());
    let pack = std::fs::read(pack.into_iter().find(|p| p.extension().is_some_and(|x| x == "pack")).unwrap());
    let pack = pack.unwrap();
    for whole in wholes {
        let n = whole.bytes.len();
        assert_eq!(stored_prefix(&objects, whole.id, n + 1).unwrap(), whole.bytes);
        let (_, coded) = prepare_blob(whole, None, Vec::new()).unwrap();
        let at = pack.windows(coded[0].deflated.len()).position(|w| w == coded[0].deflated);
        assert!(at.is_some(), "{n} bytes: the same stream as the blob coded whole");
    }
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    assert!(store(&dir.path().join("o"), &[0], |_| Expect::File, |_| Ok(Job::File(fifo.clone()))).is_err());
}

#[test]
fn rooms_a_pack_leaves_dirty_and_lazily_freed_code_the_next_pack_to_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let jobs: Vec<Job> = (0..5)
        .map(|i| {
            let path = dir.path().join(format!("f{i}"));
            std::fs::write(&path, lines(40_000 + 977 * i, |j| j % (i + 2) == 0)).unwrap();
            Job::File(path)
        })
        .collect();
    let pack_of = |objects: &Path| {
        stored(objects, &jobs);
        let pack = std::fs::read_dir(objects.join("pack")).unwrap().map(|e| e.unwrap().path());
        std::fs::read(pack.into_iter().find(|p| p.extension().is_some_and(|x| x == "pack")).unwrap()).unwrap()
    };
    let first = pack_of(&dir.path().join("a"));
    // Rooms full of other bytes, larger and smaller than the parts' streams.
    let rooms = Rooms::kept(8);
    for n in [1 << 10, 1 << 20, 3 << 20, 64 << 10] {
        rooms.give(vec![0xa5; n]);
    }
    drop(rooms);
    assert_eq!(pack_of(&dir.path().join("b")), first);
}

#[test]
fn a_file_that_gives_other_than_its_size_is_refused_as_changed_while_read() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    std::fs::write(&good, lines(20_000, |_| false)).unwrap();
    let refused = |path: &Path| {
        let streamed = [vec![path], vec![good.as_path(), path], vec![path, good.as_path()]].map(|paths| {
            match prepare_files(&paths, Vec::new) {
                Ok(_) => panic!("{} streamed", path.display()),
                Err(e) => e.to_string(),
            }
        });
        let whole = read_whole(path, 1 << 20).expect_err("read whole").to_string();
        for e in streamed.into_iter().chain([whole]) {
            assert!(e.contains("changed while it was read") && e.contains(&*path.to_string_lossy()), "{e}");
        }
    };
    // procfs says 0 bytes and gives more, as a file that grew meanwhile.
    refused(Path::new("/proc/self/status"));
    // sysfs says 4096 and gives fewer, as one cut short.
    let short = Path::new("/sys/kernel/mm/transparent_hugepage/enabled");
    if short.exists() {
        refused(short);
    }
}

#[test]
fn a_loose_object_that_is_a_fifo_or_a_link_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let id = Object::hashed(b"x".to_vec()).id;
    let hex = id.to_string();
    std::fs::create_dir_all(dir.path().join(&hex[..2])).unwrap();
    let at = dir.path().join(&hex[..2]).join(&hex[2..]);
    assert!(std::process::Command::new("mkfifo").arg(&at).status().unwrap().success());
    assert!(stored_prefix(dir.path(), id, 100).is_none(), "a FIFO: refused, not waited on");
    std::fs::remove_file(&at).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &at).unwrap();
    assert!(stored_prefix(dir.path(), id, 100).is_none(), "a link to a device: not followed");
}
