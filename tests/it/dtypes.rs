//! The float8 variants, the OCP MX types (E8M0 scales, FP4, FP6) and
//! complex, from files that safetensors 0.8 (its Python package with torch,
//! and its Rust crate for FP6, which the Python package cannot write) and
//! NumPy write: snapshot, verify, extract byte-identical, split, convert,
//! diff.

use std::path::{Path, PathBuf};
use std::process::Command;

use safetensors::tensor::TensorView;
use safetensors::Dtype as St;

use crate::util::run;

/// An MXFP4-style checkpoint (F4 blocks and their E8M0 scales), the AMD
/// float8 pair and complex64, written by safetensors 0.8 from torch 2.15
/// tensors. `row1` is the byte that opens row 1 of the F4 blocks.
pub(crate) fn torch_checkpoint(out: &Path, row1: u8, scale0: u8) {
    let script = r#"
import sys, torch
from safetensors.torch import save_file
out, row1, scale0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
blocks = torch.tensor([(i * 37) % 256 for i in range(64 * 64)], dtype=torch.uint8).reshape(64, 64)
blocks[1, 0] = row1
scales = torch.tensor([[127 + i % 5] for i in range(64)], dtype=torch.uint8)
scales[0, 0] = scale0
g = torch.Generator().manual_seed(0)
save_file({
    "mlp.experts.down_blocks": blocks.view(torch.float4_e2m1fn_x2),
    "mlp.experts.down_scales": scales.view(torch.float8_e8m0fnu),
    "q.weight": torch.randn(3, 5, generator=g).to(torch.float8_e4m3fnuz),
    "k.weight": torch.randn(7, generator=g).to(torch.float8_e5m2fnuz),
    "rope.freqs": torch.polar(torch.ones(6), torch.arange(6.0)).to(torch.complex64),
}, out)
"#;
    let o = Command::new("python3")
        .args(["-c", script])
        .arg(out)
        .args([row1.to_string(), scale0.to_string()])
        .output()
        .expect("python3 with torch and safetensors is needed");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// FP6 tensors written by the safetensors crate.
fn fp6_file(out: &Path) {
    let a: Vec<u8> = (0..12u8).map(|i| i.wrapping_mul(29)).collect();
    let b: Vec<u8> = (0..6u8).map(|i| i.wrapping_mul(53) ^ 0x5a).collect();
    let views = [
        ("e2m3", TensorView::new(St::F6_E2M3, vec![2, 8], &a).unwrap()),
        ("e3m2", TensorView::new(St::F6_E3M2, vec![8], &b).unwrap()),
    ];
    safetensors::serialize_to_file(views, None, out).unwrap();
}

fn ok(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// snapshot -> verify -> extract gives the safetensors file back byte for byte.
fn round_trip(src: &Path, dir: &Path, extra: &[&str]) -> PathBuf {
    let w = dir.join(format!("{}.wtxt", src.file_stem().unwrap().to_str().unwrap()));
    ok(&[&["snapshot", s(src), "-o", s(&w)][..], extra].concat());
    ok(&["verify", s(&w)]);
    let back = dir.join("back.safetensors");
    ok(&["extract", s(&w), "-o", s(&back)]);
    assert!(std::fs::read(src).unwrap() == std::fs::read(&back).unwrap(), "{}: extract changed bytes", src.display());
    w
}

#[test]
fn every_safetensors_dtype_snapshots_and_extracts_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (st, f6) = (dir.path().join("mx.safetensors"), dir.path().join("f6.safetensors"));
    torch_checkpoint(&st, 0x72, 127);
    fp6_file(&f6);
    let w = round_trip(&st, dir.path(), &[]);
    let inspect: serde_json::Value = serde_json::from_str(&ok(&["inspect", s(&w), "--json"])).unwrap();
    let dtype = |n: &str| {
        let a = inspect["arrays"].as_array().unwrap().iter().find(|a| a["name"] == n).unwrap();
        (a["dtype"].as_str().unwrap().to_string(), a["shape"].clone())
    };
    // torch's float4_e2m1fn_x2 [64, 64] is safetensors' F4 [64, 128]: wtxt counts elements.
    assert_eq!(dtype("mlp_experts_down_blocks"), ("f4e2m1".into(), serde_json::json!([64, 128])));
    assert_eq!(dtype("mlp_experts_down_scales").0, "f8e8m0");
    assert_eq!(dtype("q_weight").0, "f8e4m3fnuz");
    assert_eq!(dtype("k_weight").0, "f8e5m2fnuz");
    assert_eq!(dtype("rope_freqs").0, "c64");
    assert!(std::fs::read_to_string(&w).unwrap().lines().any(|l| l.starts_with("cap ") && l.contains("ext_dtypes")));
    let w6 = round_trip(&f6, dir.path(), &[]);
    assert!(ok(&["inspect", s(&w6)]).contains("f6e2m3"));
    // Split: parts of 4 KiB with 8 rows a chunk cut the 4 KiB of F4 blocks across parts.
    let split = round_trip(&st, dir.path(), &["--part-size", "4K", "--rows-per-chunk", "8"]);
    let parts = std::fs::read_dir(split.with_extension("wtxt.parts")).unwrap();
    assert!(parts.count() >= 2, "{} is one file", split.display());
}

#[test]
fn containers_without_a_dtype_refuse_it_by_name_and_numpy_keeps_complex() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("mx.safetensors");
    torch_checkpoint(&st, 0x72, 127);
    let w = dir.path().join("mx.wtxt");
    ok(&["snapshot", s(&st), "-o", s(&w)]);
    // VOLP holds one tensor: the E8M0 scales alone.
    let (st1, w1) = (dir.path().join("one.safetensors"), dir.path().join("one.wtxt"));
    ok(&["extract", s(&w), "-o", s(&st1), "--array", "mlp_experts_down_scales"]);
    ok(&["snapshot", s(&st1), "-o", s(&w1)]);
    // MLDF holds samples of one first dimension: the float8 FNUZ weights alone.
    let (st2, w2) = (dir.path().join("two.safetensors"), dir.path().join("two.wtxt"));
    ok(&["extract", s(&w), "-o", s(&st2), "--array", "q_weight"]);
    ok(&["snapshot", s(&st2), "-o", s(&w2)]);
    let cases = [
        ("aero", "AERO has no dtype code for f8e5m2fnuz", &w),
        ("npz", "array k_weight: NumPy has no f8e5m2fnuz", &w),
        ("fold", "FOLD keeps tensors in NPZ0 chunks and NumPy has no f8e5m2fnuz", &w),
        ("volp", "VOLP has no dtype f8e8m0", &w1),
        ("mldf", "MLDF: an NDARRAY dtype is 8 bytes and `f8e4m3fnuz` is 10", &w2),
    ];
    for (to, says, w) in cases {
        let out = dir.path().join(format!("x.{to}"));
        let r = run(&["convert", s(w), "-o", s(&out), "--to", to]);
        assert_eq!(r.code, 2, "{to}: {}", r.stderr);
        let errors: Vec<&str> = r.stderr.lines().filter(|l| !l.starts_with("wtxt: warning")).collect();
        assert!(errors.len() == 1 && errors[0].contains(says), "{to}: {}", r.stderr);
        assert!(!out.exists(), "{to}: partial output");
    }
    // complex64 and complex128 from NumPy come back from .npy as they went in.
    let script = "import numpy as np, sys; np.savez(sys.argv[1], z=(np.arange(6) * (1 + 2j)).astype('<c8'), \
                  zz=np.array([1.5 - 1j, -0.0 + 3j]), big=np.arange(4).astype('>c8'))";
    let npz = dir.path().join("z.npz");
    assert!(Command::new("python3").args(["-c", script]).arg(&npz).status().unwrap().success());
    let wz = dir.path().join("z.wtxt");
    ok(&["snapshot", s(&npz), "-o", s(&wz)]);
    let listing = ok(&["inspect", s(&wz)]);
    assert!(listing.contains("c64") && listing.contains("c128"), "{listing}");
    let npy = dir.path().join("z.npy");
    ok(&["extract", s(&wz), "-o", s(&npy), "--array", "big"]);
    let check = "import numpy as np, sys; a = np.load(sys.argv[1]); \
                 assert a.dtype == np.complex64 and (a == np.arange(4)).all(), a";
    assert!(Command::new("python3").args(["-c", check]).arg(&npy).status().unwrap().success());
}

#[test]
fn a_sub_byte_shape_that_is_not_whole_bytes_is_refused_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    // Valid for safetensors (6 elements of 4 bits are 3 bytes), but a row
    // of 3 F4 elements ends inside a byte.
    let data = [0x12u8, 0x34, 0x56];
    let odd = dir.path().join("odd.safetensors");
    safetensors::serialize_to_file([("w", TensorView::new(St::F4, vec![2, 3], &data).unwrap())], None, &odd).unwrap();
    let out = dir.path().join("odd.wtxt");
    let r = run(&["snapshot", s(&odd), "-o", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("f4e2m1 shape [2, 3]: the innermost dimension must be a multiple of 2"), "{}", r.stderr);
    assert!(!out.exists());
    // A snapshot whose `arr` line claims bytes that do not match its shape.
    let good = dir.path().join("g.safetensors");
    safetensors::serialize_to_file([("w", TensorView::new(St::F4, vec![2, 2], &data[..2]).unwrap())], None, &good)
        .unwrap();
    let w = dir.path().join("g.wtxt");
    ok(&["snapshot", s(&good), "-o", s(&w)]);
    let text = std::fs::read_to_string(&w).unwrap().replace("shape=2,2 order=C bytes=2", "shape=2,2 order=C bytes=4");
    std::fs::write(&w, text).unwrap();
    let r = run(&["verify", s(&w)]);
    assert!(r.code == 1 || r.code == 2, "{}", r.stderr);
    assert!(r.stderr.contains("bytes: expected 2 for f4e2m1 shape 2,2, found 4"), "{}", r.stderr);
}

#[test]
fn diff_decodes_fp4_elements_and_e8m0_powers_of_two() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.safetensors"), dir.path().join("b.safetensors"));
    // Row 1's first byte: elements 32 and 33 are 0b0010 (1.0) and 0b0111 (6.0);
    // then 0b0011 (1.5) and 0b0111: one element moves by 0.5.
    torch_checkpoint(&a, 0x72, 127);
    torch_checkpoint(&b, 0x73, 128);
    let (wa, wb) = (dir.path().join("a.wtxt"), dir.path().join("b.wtxt"));
    ok(&["snapshot", s(&a), "-o", s(&wa)]);
    ok(&["snapshot", s(&b), "-o", s(&wb)]);
    let r = run(&["diff", s(&wa), s(&wb), "--json"]);
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stderr));
    let arr = |n: &str| j["arrays"].as_array().unwrap().iter().find(|a| a["name"] == n).unwrap().clone();
    let blocks = arr("mlp_experts_down_blocks");
    assert_eq!(blocks["changed_elements"], 1, "{blocks}");
    assert_eq!(blocks["changed_rows"], serde_json::json!([[1, 2]]), "{blocks}");
    assert_eq!(blocks["max_abs"], 0.5, "{blocks}");
    let scales = arr("mlp_experts_down_scales");
    assert_eq!((scales["changed_elements"].as_u64(), scales["max_abs"].as_f64()), (Some(1), Some(1.0)), "{scales}");
    assert_eq!(arr("rope_freqs")["status"], "unchanged");
}
