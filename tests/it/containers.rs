//! FOLD, AERO and MLDF: the reference writers' files read exactly, the
//! files we write checked by independent Python readers (tests/py, using
//! reedsolo, zstandard, blake3, msgpack and the MLDF seed's NumPy dtypes),
//! round trips, repairs and damage.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/peers")
}

fn py(script: &str, args: &[&Path]) -> String {
    let o = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(script))
        .args(args)
        .output()
        .expect("python3 is needed");
    assert!(o.status.success(), "{script}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// Runs `wtxt convert`; returns (exit code, stderr).
fn convert(input: &Path, out: &Path, to: &str) -> (i32, String) {
    let o = crate::convert::convert(input, out, to);
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn load(path: &Path) -> Vec<wtxt::model::Array> {
    wtxt::format::load(&std::fs::read(path).unwrap()[..], u64::MAX, &Default::default()).unwrap().arrays
}

fn meta(arrays: &[wtxt::model::Array], name: &str) -> serde_json::Value {
    serde_json::from_slice(arrays.iter().find(|a| a.name == name).unwrap().bytes()).unwrap()
}

fn expected(name: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(peers().join(format!("{name}.expected.json"))).unwrap()).unwrap()
}

/// Every expected tensor is the array `names` maps its original name to,
/// with the same dtype, shape and bytes.
fn assert_tensors(name: &str, arrays: &[wtxt::model::Array], names: &[(String, String)]) {
    for t in expected(name)["tensors"].as_array().unwrap() {
        let orig = t["name"].as_str().unwrap();
        let wname = &names.iter().find(|(o, _)| o == orig).unwrap_or_else(|| panic!("{name}: {orig} not kept")).1;
        let a = arrays.iter().find(|a| &a.name == wname).unwrap();
        assert_eq!(a.dtype.as_str(), t["dtype"], "{name}: {orig}");
        assert_eq!(serde_json::json!(a.shape), t["shape"], "{name}: {orig}");
        assert_eq!(hex::encode(Sha256::digest(a.bytes())), t["sha256"].as_str().unwrap(), "{name}: {orig}");
    }
}

/// WTXT -> container -> WTXT gives the same bytes.
fn assert_wtxt_round_trip(w: &Path, to: &str, dir: &Path) -> PathBuf {
    let c = dir.join(format!("back.{to}"));
    assert_eq!(convert(w, &c, to).0, 0);
    let again = dir.join("again.wtxt");
    assert_eq!(convert(&c, &again, "wtxt").0, 0);
    assert!(
        std::fs::read(w).unwrap() == std::fs::read(&again).unwrap(),
        "{}: WTXT -> {to} -> WTXT changed",
        w.display()
    );
    c
}

#[test]
fn fold_reference_files_read_exactly_repair_and_round_trip() {
    for name in ["fold_zstd_noecc.fold", "fold_none_rs16.fold", "fold_zstd_rs32_sten.fold", "fold_rs32_corrupted.fold"]
    {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join("m.wtxt");
        let (code, err) = convert(&peers().join(name), &w, "wtxt");
        assert_eq!(code, 0, "{name}: {err}");
        if name.contains("corrupted") {
            assert!(err.contains("repaired 10 corrupted bytes with rs(32)"), "{name}: {err}");
        } else {
            assert!(!err.contains("repaired"), "{name}: {err}");
        }
        let arrays = load(&w);
        let m = meta(&arrays, "__fold");
        let mut names = Vec::new();
        for c in m["chunks"].as_array().unwrap() {
            for k in c["arrays"].as_array().into_iter().flatten() {
                names.push((k["key"].as_str().unwrap().to_string(), k["array"].as_str().unwrap().to_string()));
            }
        }
        assert_tensors(name, &arrays, &names);
        // Every other chunk is kept byte for byte, as the reference reader returns it.
        let exp = expected(name);
        for c in exp["chunks"].as_array().unwrap().iter().filter(|c| c["ctype"] != "NPZ0") {
            let entry = m["chunks"].as_array().unwrap().iter().find(|x| x["name"] == c["name"]).unwrap();
            assert_eq!(
                (&entry["ctype"], &entry["flags"], &entry["ecc_algo"]),
                (&c["ctype"], &c["flags"], &c["ecc_algo"])
            );
            let a = arrays.iter().find(|a| a.name == entry["array"].as_str().unwrap()).unwrap();
            assert!(
                a.bytes() == std::fs::read(peers().join(c["file"].as_str().unwrap())).unwrap(),
                "{name}: {}",
                c["name"]
            );
        }
        for (k, v) in exp["index_metadata"].as_object().unwrap() {
            assert_eq!(&m["metadata"][k], v, "{name}: metadata.{k}");
        }
        // The FOLD we write back passes an independent reader, chunks and tensors intact.
        let back = assert_wtxt_round_trip(&w, "fold", dir.path());
        let chunks = peers().join(format!("{name}.chunks"));
        assert_eq!(py("check_fold.py", &[&back, &peers().join(format!("{name}.expected.json")), &chunks]).trim(), "ok");
    }
}

#[test]
fn fold_damage_beyond_repair_or_outside_ecc_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read(peers().join("fold_rs32_corrupted.fold")).unwrap();
    let bad = dir.path().join("bad.fold");
    let out = dir.path().join("o.wtxt");
    // 7 more wrong bytes in the block that already has 10: 17 > 16.
    let npz = 214 + 32;
    let mut b = src.clone();
    for i in 0..7 {
        b[npz + 100 + i] ^= 0x55;
    }
    std::fs::write(&bad, &b).unwrap();
    let (code, err) = convert(&bad, &out, "wtxt");
    assert!(code == 1 || code == 2, "{err}");
    assert!(!out.exists());
    // No ECC: one flipped byte is a CRC32C failure, exit 1, nothing written.
    let mut b = std::fs::read(peers().join("fold_zstd_noecc.fold")).unwrap();
    b[28 + 32 + 5] ^= 1;
    std::fs::write(&bad, &b).unwrap();
    let (code, err) = convert(&bad, &out, "wtxt");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("CRC32C") && err.contains("bad.fold"), "{err}");
    // A changed metadata value: manifest_hash no longer matches.
    let mut b = std::fs::read(peers().join("fold_zstd_noecc.fold")).unwrap();
    let at = b.windows(11).position(|w| w == b"wtxt-golden").unwrap();
    b[at + 8] = b'3';
    std::fs::write(&bad, &b).unwrap();
    let (code, err) = convert(&bad, &out, "wtxt");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("manifest_hash"), "{err}");
    // Truncated anywhere: refused, never a panic.
    for cut in (0..src.len()).step_by(97) {
        std::fs::write(&bad, &src[..cut]).unwrap();
        let (code, err) = convert(&bad, &out, "wtxt");
        assert!(code == 1 || code == 2, "cut {cut}: {err}");
    }
}

#[test]
fn aero_reference_files_read_exactly_and_write_back_byte_for_byte() {
    for name in ["aero_single_shard.aero", "aero_multi_shard.aero", "aero_hash_b3.aero"] {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().join("m.wtxt");
        let (code, err) = convert(&peers().join(name), &w, "wtxt");
        assert_eq!(code, 0, "{name}: {err}");
        let arrays = load(&w);
        let m = meta(&arrays, "__aero");
        let tidx = m["chunks"].as_array().unwrap().iter().find(|c| c["fourcc"] == "TIDX").unwrap();
        let names: Vec<(String, String)> = tidx["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .zip(tidx["tidx"]["tensors"].as_array().unwrap())
            .map(|(e, n)| (e["name"].as_str().unwrap().to_string(), n.as_str().unwrap().to_string()))
            .collect();
        assert_tensors(name, &arrays, &names);
        let exp = expected(name);
        assert_eq!(m["uuid"], exp["uuid"]);
        let mjsn = m["chunks"].as_array().unwrap().iter().find(|c| c["fourcc"] == "MJSN").unwrap();
        assert_eq!(mjsn["json"]["model_name"], exp["model_name"]);
        // AERO -> WTXT -> AERO reproduces the reference writer's bytes.
        let back = assert_wtxt_round_trip(&w, "aero", dir.path());
        assert!(
            std::fs::read(&back).unwrap() == std::fs::read(peers().join(name)).unwrap(),
            "{name}: not byte-identical"
        );
        assert_eq!(py("check_aero.py", &[&back, &peers().join(format!("{name}.expected.json"))]).trim(), "ok");
    }
}

#[test]
fn aero_damage_is_refused_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read(peers().join("aero_hash_b3.aero")).unwrap();
    let bad = dir.path().join("bad.aero");
    let out = dir.path().join("o.wtxt");
    // The last byte of the last shard: its BLAKE3 fails.
    let mut b = src.clone();
    let last = b.len() - 1;
    b[last] ^= 0x40;
    std::fs::write(&bad, &b).unwrap();
    let (code, err) = convert(&bad, &out, "wtxt");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("BLAKE3") && err.contains("byte"), "{err}");
    // A version this reader does not know.
    let mut b = src.clone();
    b[4] = 1;
    std::fs::write(&bad, &b).unwrap();
    let (code, err) = convert(&bad, &out, "wtxt");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("version 1.1"), "{err}");
    // A huge entry count is refused before anything is allocated.
    let mut b = src.clone();
    b[96..100].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(&bad, &b).unwrap();
    let (code, err) = convert(&bad, &out, "wtxt");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("entry_count"), "{err}");
    for cut in (0..src.len()).step_by(61) {
        std::fs::write(&bad, &src[..cut]).unwrap();
        let (code, err) = convert(&bad, &out, "wtxt");
        assert!(code == 1 || code == 2, "cut {cut}: {err}");
        assert!(!out.exists());
    }
}

#[test]
fn tensors_without_metadata_make_plain_aero_fold_and_mldf_that_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let w = crate::util::fixture("expected/defaults.wtxt");
    // MLDF holds samples: every array needs the same first dimension.
    let (code, err) = convert(&w, &dir.path().join("x.mldf"), "mldf");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("samples are the first dimension"), "{err}");
    for to in ["aero", "fold"] {
        let c = dir.path().join(format!("m.{to}"));
        assert_eq!(convert(&w, &c, to).0, 0);
        let again = dir.path().join(format!("m.{to}.wtxt"));
        assert_eq!(convert(&c, &again, "wtxt").0, 0);
        // Nothing but the tensors: no metadata array is needed to write them back.
        let a = load(&again);
        assert!(a.iter().all(|a| !a.is_metadata()), "{to}");
        let orig = load(&w);
        assert_eq!(a.len(), orig.len(), "{to}");
        for (x, y) in a.iter().zip(&orig) {
            assert_eq!((&x.name, x.dtype, &x.shape, x.bytes()), (&y.name, y.dtype, &y.shape, y.bytes()), "{to}");
        }
    }
}

#[test]
fn arrays_with_a_common_first_dimension_make_mldf_that_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let npz = dir.path().join("s.npz");
    let script =
        "import numpy as np, sys; np.savez(sys.argv[1], img=np.arange(24, dtype=np.float32).reshape(2, 3, 4), \
                  lab=np.array([3, -7]), flag=np.array([True, False]))";
    assert!(Command::new("python3").args(["-c", script]).arg(&npz).status().unwrap().success());
    let w = dir.path().join("s.wtxt");
    assert_eq!(convert(&npz, &w, "wtxt").0, 0);
    assert_wtxt_round_trip(&w, "mldf", dir.path());
    assert!(load(&w).iter().all(|a| !a.is_metadata()));
}

#[test]
fn mldf_from_the_seed_dtypes_reads_and_writes_back() {
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("seed.mldf");
    py("mldf_seed.py", &[Path::new("write"), &seed]);
    let w = dir.path().join("seed.wtxt");
    assert_eq!(convert(&seed, &w, "wtxt").0, 0);
    let arrays = load(&w);
    let step = arrays.iter().find(|a| a.name == "step").unwrap();
    let values: Vec<i64> = step.bytes().chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(values, [10, -3, 7]);
    let tag = arrays.iter().find(|a| a.name == "tag").unwrap();
    assert_eq!(tag.bytes(), b"alpha\x00\xffbin");
    let emb = arrays.iter().find(|a| a.name == "emb").unwrap();
    assert_eq!((emb.dtype.as_str(), &emb.shape[..]), ("f32", &[3, 2, 3][..]));
    // What we write reads the same in the seed's NumPy reader.
    let back = assert_wtxt_round_trip(&w, "mldf", dir.path());
    let read = |p: &Path| py("mldf_seed.py", &[Path::new("read"), p]);
    assert_eq!(read(&back), read(&seed));
    // Versions: a newer minor is read with a warning, a newer major refused.
    let mut b = std::fs::read(&seed).unwrap();
    b[11] = 3;
    std::fs::write(&seed, &b).unwrap();
    let (code, err) = convert(&seed, &dir.path().join("m.wtxt"), "wtxt");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning") && err.contains("1.3"), "{err}");
    b[9] = 2;
    std::fs::write(&seed, &b).unwrap();
    let (code, err) = convert(&seed, &dir.path().join("n.wtxt"), "wtxt");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("newer") && err.contains("seed.mldf"), "{err}");
}

#[test]
fn npz_keys_that_are_not_wtxt_names_come_back_and_foreign_metadata_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let npz = dir.path().join("k.npz");
    let script = "import numpy as np, sys; np.savez(sys.argv[1], **{'layer.0.weight': np.ones(3, np.float32), \
                  'ok': np.zeros(2), 'a-b': np.arange(4)})";
    assert!(Command::new("python3").args(["-c", script]).arg(&npz).status().unwrap().success());
    let w = dir.path().join("k.wtxt");
    assert_eq!(convert(&npz, &w, "wtxt").0, 0);
    let arrays = load(&w);
    let names: Vec<&str> = arrays.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["__npz", "a_b", "layer_0_weight", "ok"]);
    assert_wtxt_round_trip(&w, "npz", dir.path());
    let back = dir.path().join("back.npz");
    let keys = Command::new("python3")
        .args(["-c", "import numpy as np, sys; print(np.load(sys.argv[1]).files)"])
        .arg(&back)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&keys.stdout).trim(), "['layer.0.weight', 'ok', 'a-b']");
    // `__npz` means nothing to AERO: left out, and said so.
    let (code, err) = convert(&w, &dir.path().join("k.aero"), "aero");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("left out metadata of other containers: __npz"), "{err}");
}

#[test]
fn aero_control_and_page_hashes_and_packed_tensors() {
    use wtxt::convert::aero;
    use wtxt::model::ArrayData;
    use wtxt::model::{Array, Dtype};
    let dir = tempfile::tempdir().unwrap();
    let src = ArrayData::Owned(std::sync::Arc::new(std::fs::read(peers().join("aero_multi_shard.aero")).unwrap()));
    let mut arrays = aero::read(&src, &mut Vec::new()).unwrap();
    let at = arrays.iter().position(|a| a.name == "__aero").unwrap();
    let mut m: serde_json::Value = serde_json::from_slice(arrays[at].bytes()).unwrap();
    let chunks = m["chunks"].as_array_mut().unwrap();
    chunks.insert(0, serde_json::json!({"fourcc": "IHSH", "name": "integrity", "flags": 8}));
    chunks.push(serde_json::json!({"fourcc": "PHSH", "name": "weights.shard2.phsh", "flags": 8, "page_size": 32}));
    // meta.ids (u32 [3]) becomes a packed tensor carried as u8 with its quant_params.
    let tidx = chunks.iter_mut().find(|c| c["fourcc"] == "TIDX").unwrap();
    let entry = tidx["tensors"].as_array_mut().unwrap().iter_mut().find(|e| e["name"] == "meta.ids").unwrap();
    entry["dtype"] = serde_json::json!(0x8000);
    entry["quant_params"] = serde_json::json!({"ggml_type": 2});
    let ids = arrays.iter().position(|a| a.name == "meta_ids").unwrap();
    arrays[ids] = Array::new("meta_ids", Dtype::U8, vec![12], arrays[ids].bytes().to_vec().into()).unwrap();
    arrays[at] = wtxt::convert::meta_array("__aero", &m).unwrap();
    let bytes = aero::write(&arrays).unwrap();
    let back = aero::read(&ArrayData::Owned(std::sync::Arc::new(bytes.clone())), &mut Vec::new()).unwrap();
    let again: serde_json::Value =
        serde_json::from_slice(back.iter().find(|a| a.name == "__aero").unwrap().bytes()).unwrap();
    assert_eq!(again, m, "IHSH, PHSH, the packed entry and its quant_params survive");
    let ids = back.iter().find(|a| a.name == "meta_ids").unwrap();
    assert_eq!((ids.dtype, &ids.shape[..]), (Dtype::U8, &[12][..]));
    // An independent reader checks IHSH and PHSH too.
    let f = dir.path().join("h.aero");
    std::fs::write(&f, &bytes).unwrap();
    let mut exp = expected("aero_multi_shard.aero");
    for t in exp["tensors"].as_array_mut().unwrap().iter_mut().filter(|t| t["name"] == "meta.ids") {
        t["dtype"] = serde_json::json!("u8");
        t["shape"] = serde_json::json!([12]);
    }
    let e = dir.path().join("h.expected.json");
    std::fs::write(&e, serde_json::to_vec(&exp).unwrap()).unwrap();
    assert_eq!(py("check_aero.py", &[&f, &e]).trim(), "ok");
    // A changed byte in the string table: the layout is no longer what IHSH covers.
    let st = u64::from_le_bytes(bytes[28..36].try_into().unwrap()) as usize;
    let mut bad = bytes.clone();
    bad[st] ^= 0x20;
    let err = aero::read(&ArrayData::Owned(std::sync::Arc::new(bad)), &mut Vec::new()).unwrap_err();
    assert!(err.message().contains("IHSH"), "{}", err.message());
    // A changed shard byte fails its page hash or its chunk BLAKE3.
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(aero::read(&ArrayData::Owned(std::sync::Arc::new(bad)), &mut Vec::new()).is_err());
}

#[test]
fn snapshot_takes_the_tensors_of_fold_aero_and_mldf_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let mldf = dir.path().join("f.mldf");
    py("mldf_seed.py", &[Path::new("write"), &mldf]);
    for (input, some) in [
        (peers().join("aero_single_shard.aero"), "encoder_embed_weight"),
        (peers().join("fold_zstd_noecc.fold"), "protection"),
        (mldf.clone(), "emb"),
    ] {
        let out = dir.path().join("s.wtxt");
        let o = crate::util::wtxt()
            .arg("snapshot")
            .arg(&input)
            .args(["-o", out.to_str().unwrap(), "--ts", "2026-01-01T00:00:00Z"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}: {}", input.display(), String::from_utf8_lossy(&o.stderr));
        let arrays = load(&out);
        assert!(arrays.iter().any(|a| a.name == some), "{}", input.display());
        // Tensors, and `__names` where a name was mapped (the profile's
        // "Original names"): the AERO's names have dots.
        assert!(arrays.iter().all(|a| !a.is_metadata() || a.name == "__names"), "{}: tensors only", input.display());
    }
    let out = dir.path().join("aero.wtxt");
    let o = crate::util::wtxt()
        .args(["snapshot", peers().join("aero_single_shard.aero").to_str().unwrap(), "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let names = meta(&load(&out), "__names");
    assert_eq!(names["names"]["encoder_embed_weight"], "encoder.embed.weight", "{names}");
}

/// A Hugging Face name (`model.layers.0.weight`) survives safetensors ->
/// AERO or FOLD, directly or through a snapshot (both give the same file,
/// checked by the independent readers), and back to safetensors.
#[test]
fn aero_and_fold_written_from_safetensors_keep_the_original_names() {
    use wtxt::model::ArrayData;
    use wtxt::model::{Array, Dtype};
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("m.safetensors");
    let w = Array::new("w", Dtype::F32, vec![4, 4], (0..64u8).collect::<Vec<u8>>().into()).unwrap();
    let b = Array::new("b", Dtype::F32, vec![2], vec![7u8; 8].into()).unwrap();
    let named = [("model.layers.0.weight", &w), ("lm_head.bias", &b)];
    let snap = safetensors_and_snapshot(&st, &named);

    let e = expected_f32(dir.path(), &named);
    for to in ["aero", "fold"] {
        let direct = dir.path().join(format!("direct.{to}"));
        let (code, err) = convert(&st, &direct, to);
        assert_eq!(code, 0, "{err}");
        assert!(!err.contains("left out"), "--to {to}: nothing is lost: {err}");
        let via = dir.path().join(format!("via.{to}"));
        assert_eq!(convert(&snap, &via, to).0, 0);
        assert_eq!(std::fs::read(&direct).unwrap(), std::fs::read(&via).unwrap(), "--to {to}");
        // A WTXT that keeps the safetensors header exactly (`convert --to
        // wtxt`) gives its names too.
        let exact = dir.path().join("exact.wtxt");
        assert_eq!(convert(&st, &exact, "wtxt").0, 0);
        let via_exact = dir.path().join(format!("via_exact.{to}"));
        assert_eq!(convert(&exact, &via_exact, to).0, 0);
        assert_eq!(
            std::fs::read(&direct).unwrap(),
            std::fs::read(&via_exact).unwrap(),
            "--to {to} from the exact form"
        );
        let checked = match to {
            "aero" => py("check_aero.py", &[&direct, &e]),
            _ => py("check_fold.py", &[&direct, &e, dir.path()]),
        };
        assert_eq!(checked.trim(), "ok");
        // A snapshot of that file keeps the names too.
        let again = dir.path().join("again.wtxt");
        let o = crate::util::wtxt()
            .args(["snapshot", direct.to_str().unwrap(), "-o", again.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let kept = meta(&load(&again), "__names");
        assert_eq!(kept["names"]["model_layers_0_weight"], "model.layers.0.weight", "--to {to}: {kept}");

        let back = dir.path().join("back.safetensors");
        assert_eq!(convert(&direct, &back, "safetensors").0, 0);
        let got =
            wtxt::convert::safetensors::read(&ArrayData::Owned(std::sync::Arc::new(std::fs::read(&back).unwrap())))
                .unwrap();
        let mut names: Vec<&str> = got.iter().map(|a| a.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["lm_head.bias", "model.layers.0.weight"], "--to {to}");
    }
}

/// The names a container's exact form keeps (`convert x.aero --to wtxt`
/// keeps `__aero`; likewise `__fold`, `__npz`, `__mldf`) reach every other
/// format, MLDF fields included, and a snapshot of such a file keeps them.
/// A safetensors `__metadata__` that a format cannot hold is reported.
#[test]
fn names_an_exact_form_keeps_reach_every_other_format() {
    use wtxt::model::ArrayData;
    use wtxt::model::{Array, Dtype};
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("m.safetensors");
    // A common first dimension, so that MLDF takes them as fields.
    let w = Array::new("w", Dtype::F32, vec![3, 4], (0..48u8).collect::<Vec<u8>>().into()).unwrap();
    let b = Array::new("b", Dtype::F32, vec![3], vec![7u8; 12].into()).unwrap();
    let named = [("layers.0.weight", &w), ("layers.0.bias", &b)];
    let metadata = std::collections::BTreeMap::from([("format".to_string(), "pt".to_string())]);
    let mut bytes = std::io::Cursor::new(Vec::new());
    wtxt::convert::safetensors::write_named(&named, Some(&metadata), &mut bytes).unwrap();
    std::fs::write(&st, bytes.into_inner()).unwrap();
    let own_names = |path: &Path| -> Vec<String> {
        let src = ArrayData::Owned(std::sync::Arc::new(std::fs::read(path).unwrap()));
        let c = wtxt::convert::sniff(src.as_bytes(), src.as_bytes().len() as u64).unwrap();
        let mut names: Vec<String> =
            c.read_tensors(&src, "m", &mut Vec::new()).unwrap().into_iter().map(|a| a.name).collect();
        names.sort();
        names
    };
    let formats = ["safetensors", "aero", "fold", "npz", "mldf"];
    for via in &formats[1..] {
        let first = dir.path().join(format!("m.{via}"));
        let (code, err) = convert(&st, &first, via);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("__metadata__"), "--to {via} says what it cannot hold: {err}");
        assert_eq!(own_names(&first), ["layers.0.bias", "layers.0.weight"], "--to {via}");
        let exact = dir.path().join(format!("{via}.wtxt"));
        assert_eq!(convert(&first, &exact, "wtxt").0, 0);
        assert!(load(&exact).iter().any(|a| a.name == format!("__{via}")), "{via}: the exact form is kept");
        for to in formats.iter().filter(|t| *t != via) {
            let out = dir.path().join(format!("from_{via}.{to}"));
            let (code, err) = convert(&exact, &out, to);
            assert_eq!(code, 0, "{via} -> {to}: {err}");
            assert!(err.contains(&format!("__{via} (its original names are kept)")), "{via} -> {to}: {err}");
            assert_eq!(own_names(&out), ["layers.0.bias", "layers.0.weight"], "{via} -> {to}");
        }
        let snap = dir.path().join(format!("snap_{via}.wtxt"));
        let o = crate::util::wtxt()
            .args(["snapshot", first.to_str().unwrap(), "-o", snap.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let kept = meta(&load(&snap), "__names");
        assert_eq!(kept["names"]["layers_0_weight"], "layers.0.weight", "snapshot of a .{via}: {kept}");
    }
}

/// A FOLD chunk past the size compressed in one call (64 MiB) is built in
/// a temporary file and compressed as a stream: the independent reader
/// accepts it, it holds the same tensors under their own names, and a
/// snapshot gives the same file as the container it came from.
#[test]
fn a_fold_chunk_larger_than_one_call_is_streamed_and_reads_back() {
    use wtxt::model::{Array, Dtype};
    let dir = tempfile::tempdir().unwrap();
    // 70 MiB that compress well, with 1 MiB of noise so zstd emits real blocks.
    let mut x = 0x9e3779b9u32;
    let big: Vec<u8> = (0..70u32 << 20)
        .map(|i| {
            if i < 1 << 20 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            } else {
                (i % 4093) as u8
            }
        })
        .collect();
    let w = Array::new("w", Dtype::F32, vec![70 << 18], big.into()).unwrap();
    let b = Array::new("b", Dtype::F32, vec![3], vec![1u8; 12].into()).unwrap();
    let named = [("layers.0.weight", &w), ("layers.0.bias", &b)];
    let st = dir.path().join("m.safetensors");
    let snap = safetensors_and_snapshot(&st, &named);
    let fold = dir.path().join("m.fold");
    let (code, err) = convert(&st, &fold, "fold");
    assert_eq!(code, 0, "{err}");
    let via = dir.path().join("via.fold");
    assert_eq!(convert(&snap, &via, "fold").0, 0);
    assert!(std::fs::read(&fold).unwrap() == std::fs::read(&via).unwrap(), "a snapshot gives the same FOLD");

    let e = expected_f32(dir.path(), &named);
    assert_eq!(py("check_fold.py", &[&fold, &e, dir.path()]).trim(), "ok");

    let back = dir.path().join("back.safetensors");
    assert_eq!(convert(&fold, &back, "safetensors").0, 0);
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&st).unwrap(), "the safetensors comes back");
}

/// Writes `named` as the safetensors `st` and snapshots it beside it.
fn safetensors_and_snapshot(st: &Path, named: &[(&str, &wtxt::model::Array)]) -> PathBuf {
    let mut bytes = std::io::Cursor::new(Vec::new());
    wtxt::convert::safetensors::write_named(named, None, &mut bytes).unwrap();
    std::fs::write(st, bytes.into_inner()).unwrap();
    let snap = st.with_extension("wtxt");
    let o =
        crate::util::wtxt().args(["snapshot", st.to_str().unwrap(), "-o", snap.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    snap
}

/// What the independent readers expect of f32 tensors `named`, as a file in `dir`.
fn expected_f32(dir: &Path, named: &[(&str, &wtxt::model::Array)]) -> PathBuf {
    let tensors: Vec<serde_json::Value> = named
        .iter()
        .map(|(n, a)| {
            serde_json::json!({"name": n, "dtype": "f32", "shape": a.shape, "sha256": hex::encode(Sha256::digest(a.bytes()))})
        })
        .collect();
    let e = dir.join("expected.json");
    let expected = serde_json::json!({
        "uuid": "0".repeat(32), "model_name": "wtxt", "tensors": tensors, "chunks": [], "index_metadata": {}
    });
    std::fs::write(&e, serde_json::to_vec(&expected).unwrap()).unwrap();
    e
}
