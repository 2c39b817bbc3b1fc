//! The real binary where a case needs more than a case file of
//! `tests/cmd/` can say (files made or damaged first, bytes compared):
//! forged signatures, keys, extract, WTXT-S pairs, diffs and threads.

use crate::util::{fixture, read, run, wtxt};

#[test]
fn a_forged_signature_under_a_trusted_keyid_is_invalid() {
    let f = "expected/signed_pkcs8.wtxt";
    let dir = tempfile::tempdir().unwrap();
    let text = String::from_utf8(read(f)).unwrap();
    let sig_start = text.find("sign ed25519=").unwrap() + "sign ed25519=".len();
    let mut forged = text.clone().into_bytes();
    forged[sig_start + 3] = if forged[sig_start + 3] == b'A' { b'B' } else { b'A' };
    let p = dir.path().join("forged.wtxt");
    std::fs::write(&p, &forged).unwrap();
    let r = wtxt().args(["verify"]).arg(&p).args(["--trusted-keys", "keys/trusted_keys", "--json"]).output().unwrap();
    assert_eq!(r.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["signature"], "invalid");
}

#[test]
fn hmac_with_the_wrong_key_fails() {
    let dir = tempfile::tempdir().unwrap();
    let k = dir.path().join("k.hex");
    std::fs::write(&k, "ab".repeat(32)).unwrap();
    let r = wtxt().args(["verify", "expected/hmac.wtxt", "--hmac-key"]).arg(&k).output().unwrap();
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("hmac does not match"));
}

#[test]
fn a_wsum_of_another_file_does_not_finalize_it() {
    let dir = tempfile::tempdir().unwrap();
    let w = String::from_utf8(read("expected/streaming.wsum")).unwrap();
    let bad = dir.path().join("bad.wsum");
    std::fs::write(&bad, w.replacen("sha256_all=f", "sha256_all=0", 1)).unwrap();
    let r = wtxt().args(["verify", "expected/streaming.wtxt", "--wsum"]).arg(&bad).output().unwrap();
    assert_eq!(r.status.code(), Some(1));
}

#[test]
fn keygen_sign_verify() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k.pem");
    let r = wtxt().args(["keygen", "-o"]).arg(&key).output().unwrap();
    assert!(r.status.success());
    let keyid = String::from_utf8(r.stdout).unwrap().trim().to_string();
    assert_eq!(keyid.len(), 16);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let out = dir.path().join("s.wtxt");
    let r = wtxt()
        .args(["snapshot", "inputs/model.npz", "--ts", "2026-01-01T00:00:00Z", "-o"])
        .arg(&out)
        .arg("--sign-key")
        .arg(&key)
        .output()
        .unwrap();
    assert!(r.status.success());
    let pubkey = dir.path().join("k.pem.pub");
    let r = wtxt()
        .arg("verify")
        .arg(&out)
        .arg("--pubkey")
        .arg(&pubkey)
        .args(["--require-signature", "--json"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["signature"], "valid");
    assert_eq!(v["keyid"], keyid.as_str());
}

#[test]
fn extract_round_trips_through_every_output_format() {
    let dir = tempfile::tempdir().unwrap();
    for (src, ext) in [
        ("expected/defaults.wtxt", "npz"),
        ("expected/ext_dtypes.wtxt", "safetensors"),
        ("expected/defaults.wtxt", "safetensors"),
    ] {
        let out = dir.path().join(format!("x.{ext}"));
        let r = wtxt().args(["extract", src, "-o"]).arg(&out).output().unwrap();
        assert!(r.status.success(), "{src} -> {ext}: {}", String::from_utf8_lossy(&r.stderr));
        let gen = if src.contains("ext_dtypes") { "5" } else { "0" };
        let back = dir.path().join("back.wtxt");
        let r = wtxt()
            .arg("snapshot")
            .arg(&out)
            .arg("-o")
            .arg(&back)
            .args(["--gen", gen, "--ts", "2026-02-02T12:00:00Z"])
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        assert!(std::fs::read(&back).unwrap() == read(src), "{src} -> {ext} -> wtxt is not byte-identical");
    }
    let npy = dir.path().join("one.npy");
    let r =
        wtxt().args(["extract", "expected/defaults.wtxt", "--array", "tok_embed", "-o"]).arg(&npy).output().unwrap();
    assert!(r.status.success());
    let h = wtxt::convert::npy::parse_header(&std::fs::read(&npy).unwrap()).unwrap();
    assert_eq!(h.shape, vec![40, 12]);
    let r = wtxt().args(["extract", "expected/defaults.wtxt", "-o"]).arg(&npy).output().unwrap();
    assert_eq!(r.status.code(), Some(2), "many arrays do not fit one .npy");
    let r =
        wtxt().args(["extract", "expected/ext_dtypes.wtxt", "--array", "act_bf16", "-o"]).arg(&npy).output().unwrap();
    assert_eq!(r.status.code(), Some(2), "NumPy has no bf16");
}

#[test]
fn wsum_pair_binds_both_files_and_finalize_follows_prev() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (s, w) = (d.join("s.wtxt"), d.join("s.wsum"));
    let r = wtxt()
        .args([
            "snapshot",
            "inputs/model.npz",
            "--streaming",
            "--ts",
            "2026-02-02T12:00:00Z",
            "--prev",
            "expected/defaults.wtxt",
            "-o",
        ])
        .arg(&s)
        .arg("--wsum")
        .arg(&w)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let ok =
        wtxt().arg("verify").arg(&s).arg("--wsum").arg(&w).args(["--prev", "expected/defaults.wtxt"]).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    // finalize with the same --prev gives the same WSUM.
    let w2 = d.join("again.wsum");
    let r =
        wtxt().arg("finalize").arg(&s).arg("-o").arg(&w2).args(["--prev", "expected/defaults.wtxt"]).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(std::fs::read(&w).unwrap(), std::fs::read(&w2).unwrap());
    // Altering the WTXT-S breaks the pair.
    let mut text = std::fs::read_to_string(&s).unwrap();
    // Re-type one array: its bytes still check, but sha256_all changes.
    text = text.replacen("u16 shape=5", "i16 shape=5", 1);
    std::fs::write(&s, text).unwrap();
    let bad = wtxt().arg("verify").arg(&s).arg("--wsum").arg(&w).output().unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("WSUM sha256_all"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// A damaged side is named, not taken for a weight update.
#[test]
fn diff_names_the_side_that_fails_its_checks() {
    let dir = tempfile::tempdir().unwrap();
    let base = String::from_utf8(crate::util::read("expected/delta_base.wtxt")).unwrap();
    let target = String::from_utf8(crate::util::read("expected/delta_target.wtxt")).unwrap();
    let (bl, mut tl): (Vec<&str>, Vec<String>) = (base.lines().collect(), target.lines().map(String::from).collect());
    // The first changed chunk of the target: damage its first base64 line.
    let dense = tl.iter().position(|l| l.starts_with("arr name=dense ")).unwrap();
    let at = dense + tl[dense..].iter().position(|l| l.starts_with("ch ") && !bl.contains(&l.as_str())).unwrap() + 1;
    let c = tl[at].as_bytes()[0];
    tl[at].replace_range(0..1, if c == b'A' { "B" } else { "A" });
    let damaged = dir.path().join("damaged.wtxt");
    std::fs::write(&damaged, tl.join("\n") + "\n").unwrap();
    let r = crate::util::run(&["diff", "expected/delta_base.wtxt", damaged.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stderr.contains(&format!("damaged.wtxt: line {}: ", at + 1)), "{}", r.stderr);
    assert!(r.stderr.contains("parity"), "{}", r.stderr);
    assert!(r.stdout.contains("DAMAGED"), "{}", r.stdout);
}

/// A damaged line in a chunk whose `ch` line is the same on both sides is
/// not hidden by skipping that chunk: a damaged copy of a file was shown
/// as "identical" (exit 0 even with --exit-code). The same holds for the
/// part diff Git's driver runs on a split snapshot.
#[test]
fn diff_finds_damage_in_chunks_it_does_not_decode() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The 12th line of the base's text (past the header: base64 of the first chunk), changed.
    let damaged_copy = |from: &std::path::Path, to: &std::path::Path| -> usize {
        let text = std::fs::read_to_string(from).unwrap();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        let at = 1 + lines.iter().position(|l| l.starts_with("ch ")).unwrap();
        let c = lines[at].as_bytes()[0];
        lines[at].replace_range(0..1, if c == b'A' { "B" } else { "A" });
        std::fs::write(to, lines.join("\n") + "\n").unwrap();
        at + 1
    };
    let copy = d.join("copy.wtxt");
    let line = damaged_copy(&fixture("expected/delta_base.wtxt"), &copy);
    let r = crate::util::run(&["diff", "expected/delta_base.wtxt", copy.to_str().unwrap(), "--exit-code"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains(&format!("DAMAGED {} line {line}", copy.display())), "{}", r.stdout);
    assert!(!r.stdout.contains("identical"), "{}", r.stdout);
    // An `arr` line whose sha256 was changed: every chunk is the same, so
    // the two sha256s cannot both be right; verifying names the side, in
    // `wtxt diff` and in Git's driver alike.
    let base = std::fs::read_to_string(fixture("expected/delta_base.wtxt")).unwrap();
    let arr = base.lines().position(|l| l.starts_with("arr ")).unwrap();
    let mut lines: Vec<String> = base.lines().map(String::from).collect();
    let at = lines[arr].find("sha256=").unwrap() + 7;
    let digit = if &lines[arr][at..at + 1] == "0" { "1" } else { "0" };
    lines[arr].replace_range(at..at + 1, digit);
    let forged = d.join("forged.wtxt");
    std::fs::write(&forged, lines.join("\n") + "\n").unwrap();
    let r = run(&["diff", "expected/delta_base.wtxt", forged.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains(&format!("DAMAGED {} line {}", forged.display(), arr + 1)), "{}", r.stdout);
    let (p, f) = (fixture("expected/delta_base.wtxt"), forged.to_str().unwrap().to_string());
    let o = wtxt()
        .args(["git", "diff-driver", "m.wtxt", p.to_str().unwrap(), ".", "100644", &f, ".", "100644"])
        .current_dir(d)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("DAMAGED b/m.wtxt line {}", arr + 1)), "{out}");
    // Git's driver on one part of a split snapshot and a damaged copy of it.
    let rows: Vec<u8> = (0..64 * 1024u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let head = crate::util::snapshot(
        d,
        "s",
        &[("w", "f32", vec![256, 256], rows)],
        &["--part-size", "64K", "--rows-per-chunk", "16"],
    );
    let part = d.join("s.wtxt.parts/000002.wtxtpart");
    let bad_part = d.join("bad.wtxtpart");
    let line = damaged_copy(&part, &bad_part);
    assert!(head.exists());
    let (p, b) = (part.to_str().unwrap(), bad_part.to_str().unwrap());
    let o = wtxt()
        .args(["git", "diff-driver", "s.wtxt.parts/000002.wtxtpart", p, ".", "100644", b, ".", "100644"])
        .current_dir(d)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("DAMAGED b/s.wtxt.parts/000002.wtxtpart line {line}")), "{out}");
}

/// The hashing pools' size changes how fast, never what: the same bytes
/// from one thread, from two, and from `WTXT_THREADS`; 0 is refused.
#[test]
fn threads_change_no_byte() {
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str, threads: Option<&str>, env: Option<&str>| {
        let o = dir.path().join(name);
        let mut c = wtxt();
        if let Some(t) = threads {
            c.args(["--threads", t]);
        }
        if let Some(e) = env {
            c.env("WTXT_THREADS", e);
        }
        let r = c
            .args(["snapshot", "inputs/model.npz", "--part-size", "64K", "--ts", "2026-03-01T00:00:00Z", "-o"])
            .arg(&o)
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let mut bytes = std::fs::read(&o).unwrap();
        for p in 1..=4 {
            if let Ok(b) = std::fs::read(dir.path().join(format!("{name}.parts/{p:06}.wtxtpart"))) {
                bytes.extend(b);
            }
        }
        bytes
    };
    let one = out("one.wtxt", Some("1"), None);
    assert_eq!(one, out("two.wtxt", Some("2"), None));
    assert_eq!(one, out("env.wtxt", None, Some("3")));
    assert_eq!(run(&["--threads", "0", "verify", "expected/hmac.wtxt"]).code, 2);
}

/// Issue 69.5: what a reviewer reads. A checkpoint folder's text file
/// (`trainer_state.json`, kept as a `u8` array) is shown as a diff of its
/// lines; the header's hashes, its raw lines and wtxt's own arrays are
/// counted, not shown, unless `--full`.
#[test]
fn a_diff_shows_text_files_as_lines_and_leaves_out_what_no_reviewer_reads() {
    use wtxt::model::{Array, Dtype};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let state = |step: u32| format!("{{\n  \"global_step\": {step},\n  \"epoch\": 1.0,\n  \"log_history\": []\n}}\n");
    let gen = |step: u32, w: f32| {
        let text = state(step).into_bytes();
        let n = text.len() as u64;
        let weights: Vec<u8> = [1.0f32, w, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        vec![
            Array::with_original_name("trainer_state.json".into(), Dtype::U8, vec![n], text.into()).unwrap(),
            Array::with_original_name("model.w".into(), Dtype::F32, vec![3], weights.into()).unwrap(),
        ]
    };
    let (npz0, npz1) = (d.join("s0.npz"), d.join("s1.npz"));
    wtxt::convert::npz::write(&gen(2, 2.0), std::fs::File::create(&npz0).unwrap()).unwrap();
    wtxt::convert::npz::write(&gen(14, 2.5), std::fs::File::create(&npz1).unwrap()).unwrap();
    let (a, b) = (d.join("a.wtxt"), d.join("b.wtxt"));
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    assert_eq!(run(&["snapshot", &s(&npz0), "-o", &s(&a), "--gen", "0"]).code, 0);
    assert_eq!(run(&["snapshot", &s(&npz1), "-o", &s(&b), "--prev", &s(&a)]).code, 0);
    let shown = run(&["diff", &s(&a), &s(&b), "--color", "never"]).stdout;
    assert!(shown.contains("~ file trainer_state.json"), "{shown}");
    assert!(shown.contains("-  \"global_step\": 2,\n+  \"global_step\": 14,"), "{shown}");
    assert!(!shown.contains("u8["), "the text file is not an array line: {shown}");
    assert!(shown.contains("~ model.w f32[3]"), "{shown}");
    assert!(shown.contains("header gen: 000000 -> 000001"), "{shown}");
    assert!(!shown.contains("sha256_all") && !shown.contains("+++ new header"), "{shown}");
    assert!(shown.contains("(--full shows them)"), "{shown}");
    let full = run(&["diff", &s(&a), &s(&b), "--color", "never", "--full"]).stdout;
    assert!(full.contains("header sha256_all:") && full.contains("+++ new header"), "{full}");
    // The change a reviewer reads: elements beyond `isclose`, not a max
    // relative change ruled by values near zero.
    assert!(shown.contains("1 moved beyond isclose"), "{shown}");

    // For a pull request's page: the chain, the signers, a table of the
    // tensors that changed, the text file as a folded line diff.
    let md = run(&["diff", "--format", "markdown", &s(&a), &s(&b)]).stdout;
    assert!(md.contains("| generation | 0 | 1 |") && md.contains("| signature | unsigned | unsigned |"), "{md}");
    assert!(md.contains("continues the old one's chain"), "{md}");
    assert!(md.contains("**Tensors:** 1 changed, 0 added, 0 removed"), "{md}");
    // 2.0 -> 2.5 of a norm of sqrt(1 + 6.25 + 9): relative L2 0.5 / 4.03.
    assert!(md.contains("| `model.w` | f32[3] | 1 | 1 | 1.24e-1 | 5.00e-1 |"), "{md}");
    assert!(md.contains("<summary><code>trainer_state.json</code>") && md.contains("+  \"global_step\": 14,"), "{md}");
    assert!(!md.contains("__") && !md.contains("sha256_all"), "{md}");
    // Two files of different runs: the chain does not continue, and says so.
    let c = d.join("c.wtxt");
    assert_eq!(run(&["snapshot", &s(&npz1), "-o", &s(&c), "--gen", "1"]).code, 0);
    let md = run(&["diff", "--format", "markdown", &s(&a), &s(&c)]).stdout;
    assert!(md.contains("**the new file does not continue the old one's chain**"), "{md}");
}
