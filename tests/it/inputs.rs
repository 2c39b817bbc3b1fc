//! Snapshot inputs from real writers: NumPy's `savez_compressed` (deflate),
//! and hostile archives.

use std::io::{Read, Write};
use std::path::Path;

use crate::util::wtxt;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn numpy_savez_compressed_is_read_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.wtxt");
    let inp = root().join("fixtures/numpy/savez_compressed.npz");
    let r =
        wtxt().arg("snapshot").arg(&inp).arg("-o").arg(&out).args(["--ts", "2026-01-01T00:00:00Z"]).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let j = wtxt().arg("inspect").arg(&out).arg("--json").output().unwrap();
    let got: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    let want: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("fixtures/numpy/savez_compressed.expected.json")).unwrap())
            .unwrap();
    let want = want["tensors"].as_array().unwrap();
    let got = got["arrays"].as_array().unwrap();
    assert_eq!(got.len(), want.len());
    for w in want {
        let g = got.iter().find(|g| g["name"] == w["name"]).unwrap_or_else(|| panic!("{} missing", w["name"]));
        assert_eq!(g["dtype"], w["dtype"]);
        assert_eq!(g["shape"], w["shape"]);
        assert_eq!(g["sha256"], w["sha256"], "{}", w["name"]);
    }
}

/// A zip whose one deflated member inflates to far more than it declares.
fn bomb() -> Vec<u8> {
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    z.start_file("x.npy", opts).unwrap();
    let header = b"\x93NUMPY\x01\x00\x76\x00{'descr': '|u1', 'fortran_order': False, 'shape': (4194304,), }";
    let mut npy = header.to_vec();
    npy.resize(128, b' ');
    npy[127] = b'\n';
    z.write_all(&npy).unwrap();
    z.write_all(&vec![0u8; 4 << 20]).unwrap();
    let mut bytes = z.finish().unwrap().into_inner();
    // Declare 1000 bytes in the local header (offset 22) and the central directory (offset 24).
    let small = 1000u32.to_le_bytes();
    bytes[22..26].copy_from_slice(&small);
    let cd = bytes.windows(4).rposition(|w| w == b"PK\x01\x02").unwrap();
    bytes[cd + 24..cd + 28].copy_from_slice(&small);
    bytes
}

#[test]
fn a_compression_bomb_is_refused_not_inflated() {
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("bomb.npz");
    std::fs::write(&inp, bomb()).unwrap();
    let r = wtxt().arg("snapshot").arg(&inp).arg("-o").arg(dir.path().join("o.wtxt")).output().unwrap();
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("bomb.npz") && err.contains("x.npy"), "{err}");
}

/// A v1 `.npy` with this header dict (padded to 128 bytes) and `data` zero bytes.
fn npy(dict: &str, data: usize) -> Vec<u8> {
    let mut v = crate::util::npy_header(dict);
    v.resize(128 + data, 0);
    v
}

#[test]
fn hostile_npy_and_safetensors_fail_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("short.npy", b"\x93NUMPY\x01\x00\x10".to_vec()),
        ("liar.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000,), }", 16)),
        ("st.safetensors", {
            let mut v = 1_000_000u64.to_le_bytes().to_vec();
            v.extend_from_slice(b"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}");
            v
        }),
        ("struct.npy", npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4)),
    ];
    for (name, bytes) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let r = wtxt().arg("snapshot").arg(&p).arg("-o").arg(dir.path().join("o.wtxt")).output().unwrap();
        assert_eq!(r.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains(name), "{name}: {err}");
    }
}

/// Runs `wtxt ARGS` in `dir` under a 256 MiB address-space limit.
fn under_memory_limit(dir: &Path, args: &str) -> std::process::Output {
    let bin = env!("CARGO_BIN_EXE_wtxt");
    let mut sh = std::process::Command::new("sh");
    sh.current_dir(dir).arg("-c").arg(format!("ulimit -v 262144 && exec {bin} {args}")).output().unwrap()
}

#[test]
fn hostile_inputs_fail_cleanly_under_a_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fx = root().join("fixtures/wtxt");
    // A WTXT that claims a 1 TB array; an npy that claims 8 GB; a safetensors
    // header length of 2^40; a zip member that claims 64 GB from 1 KB.
    let wtxt_text = std::fs::read_to_string(fx.join("expected/defaults.wtxt")).unwrap();
    let huge =
        wtxt_text.replacen("shape=8300 order=C bytes=33200", "shape=250000000000 order=C bytes=1000000000000", 1);
    std::fs::write(d.join("huge.wtxt"), huge).unwrap();
    std::fs::write(d.join("huge.npy"), npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000,), }", 64))
        .unwrap();
    let mut st = (1u64 << 40).to_le_bytes().to_vec();
    st.extend_from_slice(b"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}");
    std::fs::write(d.join("huge.safetensors"), st).unwrap();
    let mut bomb = bomb();
    let small = (64u64 << 30).min(u32::MAX as u64 - 1) as u32;
    bomb[22..26].copy_from_slice(&small.to_le_bytes());
    let cd = bomb.windows(4).rposition(|w| w == b"PK\x01\x02").unwrap();
    bomb[cd + 24..cd + 28].copy_from_slice(&small.to_le_bytes());
    std::fs::write(d.join("claims.npz"), bomb).unwrap();
    // FOLD and AERO chunks that really inflate to 1 GiB, the most each spec allows.
    let gib = zstd_gib();
    std::fs::write(d.join("bomb.fold"), fold_bomb(&gib)).unwrap();
    std::fs::write(d.join("bomb.aero"), aero_bomb(&gib)).unwrap();
    // T5-8: a line that never ends (2 GB sparse, no newline), a link to
    // /dev/zero, and a Git blob of 300 MB of zeros in a few hundred KB of
    // `.git` that `git export` reads.
    std::fs::File::create(d.join("long.wtxt")).unwrap().set_len(2 << 30).unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.join("zero.wtxt")).unwrap();
    let repo = d.join("repo");
    crate::util::git_ok(d, &["init", "-q", "repo"]);
    let mut hash = std::process::Command::new("git");
    hash.current_dir(&repo).args(["hash-object", "-w", "--stdin"]);
    let mut child = hash.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().unwrap();
    std::io::copy(&mut std::io::repeat(0).take(300 << 20), child.stdin.as_mut().unwrap()).unwrap();
    let blob = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap().trim().to_string();
    crate::util::git_ok(&repo, &["update-index", "--add", "--cacheinfo", &format!("100644,{blob},m.wtxt")]);
    let tree = crate::util::git_ok(&repo, &["write-tree"]).trim().to_string();
    let p = |n: &str| d.join(n).display().to_string();
    for (args, want) in [
        (format!("split {} -o {}", p("long.wtxt"), p("s.wtxt")), 2),
        (format!("join {} -o {}", p("long.wtxt"), p("j.wtxt")), 2),
        (format!("split {} -o {}", p("zero.wtxt"), p("z.wtxt")), 2),
        (format!("git export {tree} m.wtxt -o {}", p("e.wtxt")), 2),
        (format!("convert {} -o {} --to wtxt", p("bomb.fold"), p("f.wtxt")), 2),
        (format!("convert {} -o {} --to wtxt", p("bomb.aero"), p("a.wtxt")), 2),
        (format!("verify {}", p("huge.wtxt")), 1),
        (format!("extract {} -o {}", p("huge.wtxt"), p("o.npz")), 1),
        (format!("recover {} -o {}", p("huge.wtxt"), p("r.wtxt")), 1),
        (format!("snapshot {} -o {}", p("huge.npy"), p("o.wtxt")), 2),
        (format!("snapshot {} -o {}", p("huge.safetensors"), p("o.wtxt")), 2),
        (format!("snapshot {} -o {}", p("claims.npz"), p("o.wtxt")), 2),
    ] {
        let o = under_memory_limit(&repo, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(want), "wtxt {args}: {err}");
        assert!(err.lines().count() <= 1 || args.starts_with("recover"), "wtxt {args}: one line, got {err}");
        if args.contains("long") || args.contains("export") {
            assert!(err.contains("line 1: not a WTXT file"), "wtxt {args}: {err}");
        }
        if args.contains("bomb") {
            // Refused by a limit, or the spill's map does not fit under ulimit -v.
            let clean = ["out of memory", "Cannot allocate memory", "exceed"];
            assert!(clean.iter().any(|c| err.contains(c)), "wtxt {args}: {err}");
        }
    }
}

/// 1 GiB of zeros as one zstd frame (a few tens of KB).
fn zstd_gib() -> Vec<u8> {
    let mut enc = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    std::io::copy(&mut std::io::repeat(0).take(1 << 30), &mut enc).unwrap();
    enc.finish().unwrap()
}

/// A FOLD whose one chunk has a valid CRC32C and SHA-256 and inflates to 1 GiB.
fn fold_bomb(comp: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    let mut b = vec![0u8; 28];
    b.extend_from_slice(b"JSON");
    b.extend_from_slice(&1u32.to_be_bytes());
    b.extend_from_slice(&(1u64 << 30).to_be_bytes());
    b.extend_from_slice(&(comp.len() as u64).to_be_bytes());
    b.extend_from_slice(&crc32c::crc32c(comp).to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(comp);
    let index = serde_json::json!({"format": "fold", "version": "1.2.0", "chunks": [{
        "name": "m", "ctype": "JSON", "flags": 1, "offset": 28, "header_len": 32, "comp_len": comp.len(),
        "uncomp_len": 1u64 << 30, "crc32c": crc32c::crc32c(comp),
        "sha256": format!("sha256:{}", hex::encode(sha2::Sha256::digest(comp))), "ecc_algo": "none", "ecc_len": 0}]});
    let text = serde_json::to_vec(&index).unwrap();
    let off = b.len() as u64;
    b.extend_from_slice(&text);
    b[..8].copy_from_slice(b"FOLDv1\0\0");
    b[8..12].copy_from_slice(&28u32.to_be_bytes());
    b[12..20].copy_from_slice(&off.to_be_bytes());
    b[20..28].copy_from_slice(&(text.len() as u64).to_be_bytes());
    b
}

/// An AERO whose metadata chunk inflates to 1 GiB (its BLAKE3 is never reached).
fn aero_bomb(comp: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"AERO");
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&96u32.to_le_bytes());
    for v in [96u64, 96, 192, 8, 0] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.resize(96, 0);
    b.extend_from_slice(&1u32.to_le_bytes());
    b.resize(112, 0);
    b.extend_from_slice(b"MMSG");
    b.extend_from_slice(&1u32.to_le_bytes());
    for v in [208u64, comp.len() as u64, 1 << 30] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.resize(192, 0);
    b.extend_from_slice(b"m\0\0\0\0\0\0\0");
    b.resize(208, 0);
    b.extend_from_slice(comp);
    b
}
