//! `wtxt convert` against files written by the formats' reference writers
//! (fixtures/peers, see its README).

use std::path::{Path, PathBuf};

use crate::util::wtxt;

fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/peers")
}

/// Runs `wtxt convert INPUT -o OUT --to TO` with a fixed `--ts`.
pub fn convert(input: &Path, out: &Path, to: &str) -> std::process::Output {
    convert_with(input, out, to, &[])
}

/// [`convert`] with more options.
fn convert_with(input: &Path, out: &Path, to: &str, extra: &[&str]) -> std::process::Output {
    wtxt()
        .arg("convert")
        .arg(input)
        .arg("-o")
        .arg(out)
        .args(["--to", to, "--ts", "2026-01-01T00:00:00Z"])
        .args(extra)
        .output()
        .unwrap()
}

/// Converts the peer file `name` to WTXT in `dir`: (source, WTXT, expected JSON).
fn peer_to_wtxt(dir: &Path, name: &str) -> (PathBuf, PathBuf, serde_json::Value) {
    let src = peers().join(name);
    let w = dir.join(format!("{name}.wtxt"));
    let o = convert(&src, &w, "wtxt");
    assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
    let expected =
        serde_json::from_slice(&std::fs::read(peers().join(format!("{name}.expected.json"))).unwrap()).unwrap();
    (src, w, expected)
}

#[test]
fn volp_reference_files_convert_exactly_and_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["volp_float32.volp", "volp_int16_scaled.volp", "volp_uint8.volp"] {
        let (src, w, expected) = peer_to_wtxt(dir.path(), name);
        let got: serde_json::Value =
            serde_json::from_slice(&wtxt().arg("inspect").arg(&w).arg("--json").output().unwrap().stdout).unwrap();
        for t in expected["tensors"].as_array().unwrap() {
            let a = got["arrays"].as_array().unwrap().iter().find(|a| a["name"] == t["name"]).unwrap();
            assert_eq!((&a["dtype"], &a["shape"], &a["sha256"]), (&t["dtype"], &t["shape"], &t["sha256"]), "{name}");
        }
        // The header is kept, unknown keys and scale/offset included.
        let loaded = wtxt::format::load(&std::fs::read(&w).unwrap()[..], u64::MAX, &Default::default()).unwrap();
        let header = loaded.arrays.iter().find(|a| a.name == "__volp_header").unwrap();
        let h: serde_json::Value = serde_json::from_slice(header.bytes()).unwrap();
        assert_eq!(h, expected["header"], "{name}");
        // WTXT -> VOLP -> WTXT is byte-identical.
        let v = dir.path().join(format!("{name}.again.volp"));
        assert!(convert(&w, &v, "volp").status.success());
        let w2 = dir.path().join(format!("{name}.again.wtxt"));
        assert!(convert(&v, &w2, "wtxt").status.success());
        assert!(
            std::fs::read(&w).unwrap() == std::fs::read(&w2).unwrap(),
            "{name}: WTXT -> VOLP -> WTXT changed bytes"
        );
        // And the VOLP written carries the same header bytes and tensor.
        let back = wtxt::convert::volp::read(&std::fs::read(&v).unwrap()).unwrap();
        let orig = wtxt::convert::volp::read(&std::fs::read(&src).unwrap()).unwrap();
        for (x, y) in back.iter().zip(&orig) {
            assert_eq!((&x.name, x.dtype, &x.shape, x.bytes()), (&y.name, y.dtype, &y.shape, y.bytes()));
        }
    }
}

#[test]
fn conversions_between_containers_keep_the_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wtxt/expected/ext_dtypes.wtxt");
    let st = dir.path().join("m.safetensors");
    assert!(convert(&src, &st, "safetensors").status.success());
    let npz = dir.path().join("m.npz");
    let o = convert(&src, &npz, "npz");
    assert_eq!(o.status.code(), Some(2), "NumPy has no bf16: {}", String::from_utf8_lossy(&o.stderr));
    let back = dir.path().join("m.wtxt");
    let o = wtxt()
        .arg("convert")
        .arg(&st)
        .arg("-o")
        .arg(&back)
        .args(["--to", "wtxt", "--gen", "5", "--ts", "2026-02-02T12:00:00Z"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(std::fs::read(&back).unwrap() == std::fs::read(&src).unwrap(), "WTXT -> safetensors -> WTXT");
    let o = convert(&src, &dir.path().join("x.volp"), "volp");
    assert_eq!(o.status.code(), Some(2), "five tensors do not fit one VOLP");
}

#[test]
fn hostile_volp_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(peers().join("volp_uint8.volp")).unwrap();
    let header_len = u32::from_le_bytes(good[4..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(good[8..8 + header_len].to_vec()).unwrap();
    let body = good[8 + header_len..].to_vec();
    let make = |h: &str, body: &[u8]| {
        let mut v = b"VOLP".to_vec();
        v.extend_from_slice(&(h.len() as u32).to_le_bytes());
        v.extend_from_slice(h.as_bytes());
        v.extend_from_slice(body);
        v
    };
    let mut zero_len = good.clone();
    zero_len[4..8].copy_from_slice(&0u32.to_le_bytes());
    let mut huge_len = good.clone();
    huge_len[4..8].copy_from_slice(&(2u32 << 20).to_le_bytes());
    let bomb = zstd::bulk::compress(&vec![0u8; 1 << 20], 3).unwrap();
    let cases = [
        ("zero header length", zero_len),
        ("header over 1 MiB", huge_len),
        ("gzip", make(&header.replace("\"zstd\"", "\"gzip\""), &body)),
        ("version 2", make(&header.replace("\"version\":1", "\"version\":2"), &body)),
        ("over 256 MiB", make(&header.replace("[1,2,9]", "[1024,1024,1024]"), &body)),
        ("bomb", make(&header, &bomb)),
        ("truncated body", make(&header, &body[..body.len() / 2])),
    ];
    for (what, bytes) in cases {
        let p = dir.path().join("x.volp");
        std::fs::write(&p, &bytes).unwrap();
        let o = convert(&p, &dir.path().join("o.wtxt"), "wtxt");
        assert_eq!(o.status.code(), Some(2), "{what}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(!dir.path().join("o.wtxt").exists());
    }
}

#[test]
fn safetensors_round_trips_byte_for_byte_with_names_kept() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["st_all_dtypes.safetensors", "st_name_collisions.safetensors"] {
        let (src, w, expected) = peer_to_wtxt(dir.path(), name);
        let loaded = wtxt::format::load(&std::fs::read(&w).unwrap()[..], u64::MAX, &Default::default()).unwrap();
        // Every tensor, under its mapped WTXT name, with the reference's bytes.
        let originals: Vec<String> =
            expected["tensors"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect();
        let mapped = wtxt::model::assign_names(&originals);
        for (t, m) in expected["tensors"].as_array().unwrap().iter().zip(&mapped) {
            let a = loaded.arrays.iter().find(|a| &a.name == m).unwrap_or_else(|| panic!("{name}: {m} missing"));
            use sha2::Digest;
            assert_eq!(hex::encode(sha2::Sha256::digest(a.bytes())), t["sha256"].as_str().unwrap(), "{name}: {m}");
            assert_eq!(a.dtype.as_str(), t["dtype"].as_str().unwrap());
        }
        // Back to safetensors: the very same bytes (header JSON and padding kept).
        let back = dir.path().join(format!("{name}.back"));
        assert!(convert(&w, &back, "safetensors").status.success());
        assert!(std::fs::read(&back).unwrap() == std::fs::read(&src).unwrap(), "{name}: not byte-identical");
        // And WTXT -> safetensors -> WTXT is byte-identical too.
        let w2 = dir.path().join(format!("{name}.2.wtxt"));
        assert!(convert(&back, &w2, "wtxt").status.success());
        assert!(std::fs::read(&w2).unwrap() == std::fs::read(&w).unwrap());
    }
}

/// A snapshot keeps the inputs' own names and a safetensors
/// file's `__metadata__`; extract gives them back exactly.
#[test]
fn hugging_face_names_and_metadata_come_back_on_extract() {
    let dir = tempfile::tempdir().unwrap();
    let st = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/peers/st_all_dtypes.safetensors");
    let w = dir.path().join("m.wtxt");
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let r = crate::util::run(&["snapshot", &s(&st), "-o", &s(&w)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let back = dir.path().join("back.safetensors");
    assert_eq!(crate::util::run(&["extract", &s(&w), "-o", &s(&back)]).code, 0);
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&st).unwrap(), "byte for byte, metadata included");
    // inspect shows the original names next to the stored ones, and the metadata.
    let r = crate::util::run(&["inspect", &s(&w)]);
    let row = r.stdout.lines().find(|l| l.starts_with("encoder_block_0_attn_qkv_bias ")).unwrap_or_default();
    assert!(row.ends_with("  encoder.block.0.attn.qkv.bias"), "{}", r.stdout);
    assert!(r.stdout.contains("\nmetadata format=pt"), "{}", r.stdout);
    let j: serde_json::Value = serde_json::from_str(&crate::util::run(&["inspect", &s(&w), "--json"]).stdout).unwrap();
    let a = j["arrays"].as_array().unwrap().iter().find(|a| a["name"] == "encoder_block_0_attn_qkv_bias").unwrap();
    assert_eq!(a["original"], "encoder.block.0.attn.qkv.bias");
    assert_eq!(j["metadata"]["format"], "pt");
    // One array by its original name.
    let one = dir.path().join("one.safetensors");
    let r = crate::util::run(&["extract", &s(&w), "--array", "encoder.block.0.attn.qkv.bias", "-o", &s(&one)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let b = std::fs::read(&one).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
    assert!(header.get("encoder.block.0.attn.qkv.bias").is_some(), "{header}");
    assert_eq!(header["__metadata__"]["format"], "pt");
    // An npz with dotted keys, from NumPy, back to NumPy with the same keys.
    let npz = dir.path().join("dotted.npz");
    let code = format!(
        "import numpy as np; np.savez({:?}, **{{'model.layers.0.weight': np.arange(6, dtype='f4').reshape(2, 3), 'lm_head.bias': np.ones(3)}})",
        s(&npz)
    );
    assert!(std::process::Command::new("python3").args(["-c", &code]).status().unwrap().success());
    let w2 = dir.path().join("d.wtxt");
    assert_eq!(crate::util::run(&["snapshot", &s(&npz), "-o", &s(&w2)]).code, 0);
    let out = dir.path().join("out.npz");
    assert_eq!(crate::util::run(&["extract", &s(&w2), "-o", &s(&out)]).code, 0);
    let check = format!(
        "import numpy as np; z = np.load({:?}); assert sorted(z.keys()) == ['lm_head.bias', 'model.layers.0.weight'], list(z.keys()); assert (z['model.layers.0.weight'] == np.arange(6).reshape(2, 3)).all()",
        s(&out)
    );
    let o = std::process::Command::new("python3").args(["-c", &check]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// WTXT -> container goes straight into the container's layout (the
/// tensors decoded to their places in the output) where the layout allows,
/// and gives the very bytes the ordinary path (decode all, then write)
/// gives, for every container and both forms of WTXT.
#[test]
fn wtxt_is_written_straight_into_each_container_with_the_same_bytes() {
    use wtxt::convert::{foreign_metadata, CONTAINERS};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inputs = [
        "aero_hash_b3.aero",
        "aero_multi_shard.aero",
        "aero_single_shard.aero",
        "fold_zstd_rs32_sten.fold",
        "st_all_dtypes.safetensors",
        "st_name_collisions.safetensors",
        "volp_int16_scaled.volp",
    ];
    let mut routes = std::collections::HashMap::new();
    for name in inputs {
        let src = peers().join(name);
        let stem = name;
        for form in ["none", "16K"] {
            let w = d.join(format!("{stem}.{form}.wtxt"));
            let o = convert_with(&src, &w, "wtxt", &["--part-size", form]);
            assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
            for fmt in CONTAINERS.iter().filter(|c| c.name() != "npy") {
                let plain = d.join(format!("{stem}.{form}.plain.{}", fmt.name()));
                let mut notes = Vec::new();
                let arrays = wtxt::convert::load_lossless(&w, &Default::default(), &mut notes).unwrap();
                let (arrays, _) = foreign_metadata(arrays, *fmt).unwrap();
                let ordinary = wtxt::convert::write_arrays_as(&arrays, &plain, *fmt);
                let out = d.join(format!("{stem}.{form}.{}", fmt.name()));
                let o = convert(&w, &out, fmt.name());
                match ordinary {
                    Err(_) => assert!(!o.status.success(), "{name} -> {}: only one path failed", fmt.name()),
                    Ok(()) => {
                        assert!(o.status.success(), "{name} -> {}: {}", fmt.name(), String::from_utf8_lossy(&o.stderr));
                        assert!(
                            std::fs::read(&plain).unwrap() == std::fs::read(&out).unwrap(),
                            "{name} ({form}) -> {}: the direct path changed bytes",
                            fmt.name()
                        );
                    }
                }
                let taken = wtxt::convert::write_direct(&w, None, &Default::default(), *fmt, &out, &|a| {
                    Ok((foreign_metadata(wtxt::convert::gather(vec![(&w, a)], &mut Vec::new())?, *fmt)?.0, ()))
                });
                if let Ok(Some(((), route))) = taken {
                    assert!(std::fs::read(&plain).unwrap() == std::fs::read(&out).unwrap());
                    routes.insert((name, form, fmt.name()), route);
                }
            }
        }
    }
    use wtxt::convert::Route::*;
    for form in ["none", "16K"] {
        for name in inputs.iter().filter(|n| !n.starts_with("aero_hash")) {
            // safetensors and AERO store each tensor's bytes whole: always in place.
            for to in ["safetensors", "aero"] {
                assert_eq!(routes.get(&(name, form, to)), Some(&InPlace), "{name} ({form}) -> {to}");
            }
        }
        // A file of one tensor is an .npz of one member, in place too.
        assert_eq!(routes.get(&("volp_int16_scaled.volp", form, "npz")), Some(&InPlace));
        // AERO's index of per-tensor BLAKE3 hashes is compressed, so its
        // size moves with the values: written again, the same bytes.
        assert_eq!(routes.get(&("aero_hash_b3.aero", form, "aero")), Some(&Rewritten));
        // FOLD, VOLP and MLDF transform the bytes: the ordinary path.
        for to in ["fold", "volp", "mldf"] {
            assert_eq!(routes.get(&("st_all_dtypes.safetensors", form, to)), None, "{to}");
        }
    }
}

/// A safetensors file of one f32 tensor per name, its header padded with
/// spaces to exactly `header_len` bytes (as the library pads to 8).
fn safetensors_padded(names: &[&str], header_len: usize) -> Vec<u8> {
    let entries: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                "{}:{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[{},{}]}}",
                serde_json::json!(n),
                4 * i,
                4 * i + 4
            )
        })
        .collect();
    let mut header = format!("{{{}}}", entries.join(",")).into_bytes();
    assert!(header.len() <= header_len);
    header.resize(header_len, b' ');
    let mut out = (header_len as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    for i in 0..names.len() {
        out.extend_from_slice(&(i as f32 + 0.5).to_le_bytes());
    }
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Issue 50.5: a header of 640 or 1152 bytes (mod 65536) makes the file
/// begin with pickle's magic (0x80 0x02, 0x80 0x04): still safetensors.
#[test]
fn a_safetensors_file_that_begins_like_a_pickle_is_read_as_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    for len in [640usize, 1152, 65536 + 640] {
        let st = dir.path().join(format!("m{len}.safetensors"));
        std::fs::write(&st, safetensors_padded(&["w"], len)).unwrap();
        let w = dir.path().join(format!("m{len}.wtxt"));
        let r = crate::util::run(&["snapshot", s(&st), "-o", s(&w)]);
        assert_eq!(r.code, 0, "header {len}: {}", r.stderr);
        let r =
            crate::util::run(&["convert", s(&st), "-o", s(&dir.path().join(format!("c{len}.wtxt"))), "--to", "wtxt"]);
        assert_eq!(r.code, 0, "header {len}: {}", r.stderr);
    }
    // A real pickle is still refused, naming what to do.
    let pkl = dir.path().join("state.pt");
    std::fs::write(&pkl, [0x80, 0x02, b'}', b'q', 0, b'.']).unwrap();
    let r = crate::util::run(&["snapshot", s(&pkl), "-o", s(&dir.path().join("p.wtxt"))]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("pickle"), "{}", r.stderr);
}

/// Issue 50.4: names that map to `_` while `_` is taken got `__2`, a
/// metadata name that extract then dropped. Every tensor comes back, under
/// its own name, and `--array` reaches it.
#[test]
fn names_that_map_to_an_underscore_keep_their_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["_", "", ".", "/", "-"];
    let st = dir.path().join("odd.safetensors");
    std::fs::write(&st, safetensors_padded(&names, 512)).unwrap();
    let w = dir.path().join("odd.wtxt");
    let r = crate::util::run(&["snapshot", s(&st), "-o", s(&w)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j: serde_json::Value = serde_json::from_str(&crate::util::run(&["inspect", s(&w), "--json"]).stdout).unwrap();
    let stored: Vec<&str> = j["arrays"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert!(!stored.iter().any(|n| n.starts_with("__") && *n != "__names"), "{stored:?}");
    let back = dir.path().join("back.safetensors");
    let r = crate::util::run(&["extract", s(&w), "-o", s(&back)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let b = std::fs::read(&back).unwrap();
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
    for name in names {
        assert!(header.get(name).is_some(), "{name:?} lost: {header}");
    }
    for name in ["-", "."] {
        let one = dir.path().join("one.npy");
        let _ = std::fs::remove_file(&one);
        let r = crate::util::run(&["extract", s(&w), "--array", name, "-o", s(&one)]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
    }
}

/// Issue 50.6: one name from two inputs (or one tensor given twice) is
/// refused at snapshot, naming both files, as for a duplicate valid name.
#[test]
fn one_original_name_from_two_inputs_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.safetensors");
    let b = dir.path().join("b.safetensors");
    std::fs::write(&a, safetensors_padded(&["w.1"], 64)).unwrap();
    std::fs::write(&b, safetensors_padded(&["w.1"], 64)).unwrap();
    let out = dir.path().join("x.wtxt");
    let r = crate::util::run(&["snapshot", s(&a), s(&b), "-o", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("\"w.1\"") && r.stderr.contains("a.safetensors") && r.stderr.contains("b.safetensors"),
        "{}",
        r.stderr
    );
    assert!(!out.exists());
    // A snapshot of `a` and `a` itself again: the same tensor twice.
    let w = dir.path().join("a.wtxt");
    assert_eq!(crate::util::run(&["snapshot", s(&a), "-o", s(&w)]).code, 0);
    let r = crate::util::run(&["snapshot", s(&w), s(&a), "-o", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!out.exists());
}

/// Issue 50.6: a crafted `__names` giving two arrays one original name:
/// `extract --array NAME` refuses instead of picking either.
#[test]
fn extract_refuses_an_original_name_two_arrays_share() {
    use wtxt::model::{Array, Dtype};
    let dir = tempfile::tempdir().unwrap();
    let a = Array::new("w_1", Dtype::U8, vec![1], vec![1].into()).unwrap();
    let b = Array::new("w_1_2", Dtype::U8, vec![1], vec![2].into()).unwrap();
    let names =
        wtxt::convert::meta_array("__names", &serde_json::json!({"names": {"w_1": "w.1", "w_1_2": "w.1"}})).unwrap();
    let w = dir.path().join("twice.wtxt");
    let opts = wtxt::format::WriteOptions::new(wtxt::format::syntax::Meta::new(0, None).unwrap(), 128);
    wtxt::store::write_wtxt(&[names, a, b], &opts, &w, Default::default(), None, &wtxt::progress::Progress::hidden())
        .unwrap();
    let out = dir.path().join("one.npy");
    let r = crate::util::run(&["extract", s(&w), "--array", "w.1", "-o", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("w_1") && r.stderr.contains("w_1_2"), "{}", r.stderr);
    assert!(!out.exists());
    // By its WTXT name it is one array.
    assert_eq!(crate::util::run(&["extract", s(&w), "--array", "w_1_2", "-o", s(&out)]).code, 0);
}
