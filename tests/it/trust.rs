//! Nothing signs, HMACs or chains what it did not verify: every command that writes authenticated output refuses a
//! forged input, and an HMAC key makes every array authenticate.
//!
//! The forged file is made here, as an attacker without the keys would:
//! one array of a signed, HMAC'd snapshot zeroed, its `hmac` set to zeros,
//! every digest recomputed, and the old (now stale) `sign` line put back.

use std::path::{Path, PathBuf};

use crate::util::{fixture, git_cmd, read, run};

/// `bind/signed_pkcs8.wtxt` with array `bias` zeroed and unauthenticated.
pub fn forged(dir: &Path) -> PathBuf {
    use wtxt::format::{write_snapshot, WriteOptions};
    let orig = read("bind/signed_pkcs8.wtxt");
    let loaded = wtxt::format::load(&orig[..], orig.len() as u64, &Default::default()).unwrap();
    let mut arrays = loaded.arrays.clone();
    let bias = arrays.iter_mut().find(|a| a.name == "bias").unwrap();
    bias.data = vec![0u8; bias.bytes().len()].into();
    let wtxt::format::syntax::Root::Final { merkle_prev, .. } = loaded.header.root else { unreachable!() };
    let opts = WriteOptions {
        merkle_prev,
        carried_hmacs: loaded.hmacs.iter().filter(|(n, _)| n != "bias").cloned().collect(),
        ..WriteOptions::new(loaded.header.meta.clone(), loaded.rows_per_chunk.unwrap_or(128))
    };
    let mut out = std::io::Cursor::new(Vec::new());
    write_snapshot(&arrays, &opts, &mut out, &wtxt::progress::Progress::hidden()).unwrap();
    // The stale signature of the original goes back in as line 5.
    let text = String::from_utf8(out.into_inner()).unwrap();
    let sign = String::from_utf8(orig).unwrap().lines().nth(4).unwrap().to_string();
    assert!(sign.starts_with("sign "));
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(4, &sign);
    let p = dir.join("forged.wtxt");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn hmac_key_means_every_array_authenticates() {
    let dir = tempfile::tempdir().unwrap();
    let f = forged(dir.path());
    let r = run(&["verify", s(&f), "--hmac-key", "keys/hmac.hex"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("array bias: not authenticated"), "{}", r.stderr);
    // The forger left the keyed tag out: a file unbound as well.
    let r = run(&["verify", s(&f), "--hmac-key", "keys/hmac.hex", "--allow-unauthenticated"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("no keyed tag"), "{}", r.stderr);
    let r = run(&["verify", s(&f), "--hmac-key", "keys/hmac.hex", "--allow-unauthenticated", "--allow-unbound"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("11/12 arrays authenticated"), "{}", r.stdout);
    // The stale signature is caught as soon as its key is given.
    let r = run(&["verify", s(&f), "--pubkey", "keys/sign.pem.pub"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let out = dir.path().join("x.npz");
    let r = run(&["extract", s(&f), "-o", s(&out), "--hmac-key", "keys/hmac.hex"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(!out.exists());
}

#[test]
fn merge_snapshot_and_convert_refuse_to_sign_a_forged_input() {
    let dir = tempfile::tempdir().unwrap();
    let f = forged(dir.path());
    let good = fixture("bind/signed_pkcs8.wtxt");
    let out = dir.path().join("out.wtxt");
    for keys in [&["--hmac-key", "keys/hmac.hex", "--sign-key", "keys/sign.pem"][..], &["--sign-key", "keys/sign.pem"]]
    {
        let mut args = vec!["merge", s(&good), s(&good), s(&f), "-o", s(&out), "--strategy", "theirs"];
        args.extend(keys);
        let r = run(&args);
        assert_eq!(r.code, 1, "{keys:?}: {}", r.stderr);
        assert!(r.stderr.contains("forged.wtxt"), "{}", r.stderr);
        assert!(!out.exists(), "nothing written");
        let mut args = vec!["snapshot", s(&f), "-o", s(&out)];
        args.extend(keys);
        assert_eq!(run(&args).code, 1);
        let mut args = vec!["convert", s(&f), "-o", s(&out), "--to", "wtxt"];
        args.extend(keys);
        assert_eq!(run(&args).code, 1);
        assert!(!out.exists());
    }
    // A signature by a key nobody said to trust is not passed on either.
    let r = run(&["snapshot", s(&good), "-o", s(&out), "--sign-key", "keys/other.pem"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("no trusted key checks"), "{}", r.stderr);
    let r =
        run(&["snapshot", s(&good), "-o", s(&out), "--sign-key", "keys/other.pem", "--pubkey", "keys/sign.pem.pub"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn git_merge_with_keys_set_refuses_a_forged_branch() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    let key = fixture("keys/sign.pem");
    let hmac = std::fs::read_to_string(fixture("keys/hmac.hex")).unwrap();
    let env = [("WTXT_SIGN_KEY", s(&key)), ("WTXT_HMAC_KEY", hmac.trim()), ("WTXT_MERGE_STRATEGY", "theirs")];
    let git = |args: &[&str]| {
        let o = git_cmd(&repo, args, &env);
        (o.status.success(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    assert!(git(&["init", "-q", "-b", "main"]).0);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_wtxt"))
        .current_dir(&repo)
        .args(["git", "install", "--local"])
        .output()
        .unwrap();
    assert!(o.status.success());
    std::fs::copy(fixture("bind/signed_pkcs8.wtxt"), repo.join("model.wtxt")).unwrap();
    assert!(git(&["add", "-A"]).0);
    assert!(git(&["commit", "-qm", "signed base"]).0);
    assert!(git(&["checkout", "-qb", "evil"]).0);
    std::fs::copy(forged(dir.path()), repo.join("model.wtxt")).unwrap();
    // As a pushed commit would arrive: the hook is not asked.
    assert!(git(&["commit", "-qam", "zero bias", "--no-verify"]).0);
    assert!(git(&["checkout", "-q", "main"]).0);
    // Main moves on too (a signed, HMAC'd next generation), so Git runs the driver.
    let next = dir.path().join("next.wtxt");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_wtxt"))
        .current_dir(fixture(""))
        .args(["snapshot", "inputs/delta_base.npz", "-o", s(&next), "--prev", s(&repo.join("model.wtxt"))])
        .args(["--sign-key", "keys/sign.pem", "--hmac-key", "keys/hmac.hex"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::copy(&next, repo.join("model.wtxt")).unwrap();
    assert!(git(&["commit", "-qam", "gen 4"]).0);
    let ours = std::fs::read(repo.join("model.wtxt")).unwrap();
    let (ok, err) = git(&["merge", "-q", "--no-edit", "evil"]);
    assert!(!ok, "the merge of a forged branch succeeded");
    assert!(err.contains("forged") || err.contains("not authenticated") || err.contains("does not verify"), "{err}");
    assert_eq!(std::fs::read(repo.join("model.wtxt")).unwrap(), ours, "ours is left as it was");
}

#[test]
fn recover_signs_only_what_the_key_authenticated() {
    let dir = tempfile::tempdir().unwrap();
    let f = forged(dir.path());
    let out = dir.path().join("rec.wtxt");
    let r = run(&["recover", s(&f), "-o", s(&out), "--sign-key", "keys/sign.pem"]);
    assert_eq!(r.code, 2, "signing needs the HMAC key: {}", r.stderr);
    let rep = dir.path().join("rep.json");
    let r = run(&[
        "recover",
        s(&f),
        "-o",
        s(&out),
        "--sign-key",
        "keys/sign.pem",
        "--hmac-key",
        "keys/hmac.hex",
        "--report",
        s(&rep),
    ]);
    assert_eq!(r.code, 1, "the forged array is lost: {}", r.stderr);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&rep).unwrap()).unwrap();
    assert_eq!(v["lost_arrays"], 1);
    let r = run(&[
        "verify",
        s(&out),
        "--pubkey",
        "keys/sign.pem.pub",
        "--require-signature",
        "--hmac-key",
        "keys/hmac.hex",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let names: Vec<&str> = v["arrays"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 11);
    assert!(!names.contains(&"bias"), "the forged array is not in the signed output");
    // Two outputs of one command may not name the same file.
    let r = run(&["recover", s(&f), "-o", s(&out), "--report", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn minimal_deltas_cannot_meet_a_trusted_key_requirement() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.wtxt");
    let base = fixture("expected/delta_base.wtxt");
    let d = fixture("expected/delta.minimal.wtxtdelta");
    let r = run(&["delta", "apply", s(&base), s(&d), "-o", s(&out), "--pubkey", "keys/sign.pem.pub"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("minimal-form delta carries no signature"), "{}", r.stderr);
    let r = run(&[
        "delta",
        "apply",
        s(&base),
        s(&d),
        "-o",
        s(&out),
        "--pubkey",
        "keys/sign.pem.pub",
        "--sign-key",
        "keys/sign.pem",
    ]);
    assert_eq!(r.code, 1, "our own fresh signature does not vouch for the delta: {}", r.stderr);
    assert!(!out.exists());
}

#[test]
fn finalize_and_prev_are_verified_before_signing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.wsum");
    // The WTXT-S carries no HMACs: with a key it does not authenticate.
    let r = run(&["finalize", "expected/streaming.wtxt", "-o", s(&out), "--hmac-key", "keys/hmac.hex"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(!out.exists());
    let r = run(&["finalize", "expected/streaming.wtxt", "-o", s(&out), "--rewrite", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // A --prev whose merkle_this does not follow from its fields is not chained from.
    let text = String::from_utf8(read("expected/defaults.wtxt")).unwrap();
    let i = text.find("merkle_this=").unwrap() + "merkle_this=".len();
    let mut bad = text.clone();
    bad.replace_range(i..i + 1, if &text[i..i + 1] == "0" { "1" } else { "0" });
    let prev = dir.path().join("prev.wtxt");
    std::fs::write(&prev, bad).unwrap();
    let o = dir.path().join("next.wtxt");
    let r = run(&["snapshot", "inputs/model.npz", "-o", s(&o), "--prev", s(&prev)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("prev.wtxt: line 4: --prev: merkle_this"), "{}", r.stderr);
}

/// A `--prev` is verified whole before anything chains from it: a data
/// line damaged below an intact header (which alone used to be checked)
/// stops `snapshot`, `finalize` and a split prev's damaged part alike,
/// named with its line, and nothing is written.
#[test]
fn a_prev_whose_arrays_fail_their_checks_is_not_chained_from() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rows: Vec<u8> = (0..64 * 1024u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let one = crate::util::snapshot(d, "one", &[("w", "f32", vec![256, 256], rows.clone())], &["--part-size", "none"]);
    let split = crate::util::snapshot(
        d,
        "split",
        &[("w", "f32", vec![256, 256], rows)],
        &["--part-size", "64K", "--rows-per-chunk", "16"],
    );
    // One character of the 12th line (an array's data, past the header) changed.
    let damage = |path: &Path| {
        let text = std::fs::read_to_string(path).unwrap();
        let at: usize = text.split_inclusive('\n').take(11).map(str::len).sum::<usize>() + 3;
        let mut bad = text.into_bytes();
        bad[at] = if bad[at] == b'A' { b'B' } else { b'A' };
        std::fs::write(path, bad).unwrap();
    };
    damage(&one);
    let part = d.join("split.wtxt.parts/000002.wtxtpart");
    damage(&part);
    for (prev, named) in
        [(&one, "one.wtxt: line 12: --prev"), (&split, "000002.wtxtpart: line 12: --prev: parity nibble")]
    {
        assert_eq!(run(&["verify", s(prev)]).code, 1);
        let o = d.join("next.wtxt");
        let r = run(&["snapshot", "inputs/model.npz", "-o", s(&o), "--prev", s(prev), "--sign-key", "keys/sign.pem"]);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(r.stderr.contains(named), "{}", r.stderr);
        assert!(!o.exists());
        let w = d.join("o.wsum");
        let r = run(&["finalize", "expected/streaming.wtxt", "-o", s(&w), "--prev", s(prev)]);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(r.stderr.contains(named), "{}", r.stderr);
        assert!(!w.exists());
    }
}

/// `finalize --rewrite` reads its input twice, to verify it and to copy
/// it: a file replaced between the two reads is refused and nothing is
/// written. `strace` holds the second open back (fault injection) while
/// the test swaps the file, so the race is made to happen every run.
#[test]
fn finalize_refuses_a_file_replaced_between_its_two_reads() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("s.wtxt"), read("expected/streaming.wtxt")).unwrap();
    let (other, other_wsum) = (p("other.wtxt"), p("other.wsum"));
    let r =
        run(&["snapshot", "inputs/model.npz", "-o", s(&other), "--gen", "7", "--streaming", "--wsum", s(&other_wsum)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let child = std::process::Command::new("strace")
        .args(["-q", "-o", s(&p("strace.log")), "-P", s(&p("s.wtxt")), "-e", "trace=openat"])
        .args(["-e", "inject=openat:delay_enter=5000000:when=2", env!("CARGO_BIN_EXE_wtxt"), "finalize"])
        .args([s(&p("s.wtxt")), "-o", s(&p("f.wsum")), "--rewrite", s(&p("f.wtxt"))])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("strace (Debian package strace) runs this test");
    // The first open is logged once it returned; the verify of a few KB
    // is done well within the second before the swap, and the second open
    // waits 5 s.
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(p("strace.log")).unwrap_or_default().contains("openat(") {
        assert!(t0.elapsed().as_secs() < 60, "the first open never came");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    std::fs::rename(p("other.wtxt"), p("s.wtxt")).unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("s.wtxt: the file changed while it was finalized"), "{err}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!p("f.wsum").exists() && !p("f.wtxt").exists(), "nothing written: {left:?}");
    assert!(left.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")), "no temporary file left: {left:?}");
}

/// The lines of array `name`'s block in `text`, from its `arr` line to its `endarr`.
fn block(lines: &[String], name: &str) -> std::ops::Range<usize> {
    let start = lines.iter().position(|l| l.starts_with(&format!("arr name={name} "))).unwrap();
    let end = start + lines[start..].iter().position(|l| l == "endarr").unwrap();
    start..end + 1
}

/// `lines` with the root recomputed as one without the key would: the
/// unkeyed `sha256_all` the arrays give, and `merkle_this` over it.
fn rerooted(lines: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let text = lines.join("\n") + "\n";
    let r = crate::util::verify_bytes(text.as_bytes(), &Default::default()).unwrap();
    let sha_all = r.sha256_all.unwrap_or_else(|| panic!("{:?}", r.errors));
    let f = |k: &str| lines[1].split(' ').find_map(|p| p.strip_prefix(k)).unwrap().to_string();
    let (gen, ts, build) = (f("gen="), f("ts="), f("build="));
    let mut h = Sha256::new();
    h.update([0u8; 32]);
    h.update(sha_all);
    h.update(format!("{ts}{gen}{build}"));
    let this: [u8; 32] = h.finalize().into();
    let mut out = lines.to_vec();
    let fastxor = format!("{:016x}", r.fastxor_value().unwrap());
    out[3] = format!(
        "root sha256_all={} merkle_prev={} merkle_this={} fastxor={fastxor}",
        hex::encode(sha_all),
        "0".repeat(64),
        hex::encode(this)
    );
    out.join("\n") + "\n"
}

#[test]
fn hmac_only_files_bind_their_arrays_names_and_generation() {
    // T5-2: without the key, drop an array, swap two of one shape, or put
    // in one from an older generation, then recompute the unkeyed root.
    let dir = tempfile::tempdir().unwrap();
    let f32s = |v: f32| v.to_le_bytes().repeat(4);
    let gen = |g: &str, v: f32| {
        let arrays: Vec<crate::util::ArraySpec> = vec![
            ("a", "f32", vec![4], f32s(v)),
            ("b", "f32", vec![4], f32s(v + 1.0)),
            ("c", "f32", vec![4], f32s(v + 2.0)),
        ];
        crate::util::snapshot(dir.path(), &format!("g{g}"), &arrays, &["--gen", g, "--hmac-key", "keys/hmac.hex"])
    };
    let old: Vec<String> = std::fs::read_to_string(gen("1", 10.0)).unwrap().lines().map(String::from).collect();
    let new: Vec<String> = std::fs::read_to_string(gen("2", 20.0)).unwrap().lines().map(String::from).collect();
    let mut dropped = new.clone();
    dropped.drain(block(&new, "c"));
    let mut swapped = new.clone();
    let (ra, rb) = (block(&new, "a"), block(&new, "b"));
    // Each name keeps its place; its data, digest, tag and salt are the other's.
    let (mut now_b, mut now_a) = (new[ra.clone()].to_vec(), new[rb.clone()].to_vec());
    now_b[0] = now_b[0].replacen("name=a ", "name=b ", 1);
    now_a[0] = now_a[0].replacen("name=b ", "name=a ", 1);
    swapped.splice(rb, now_b);
    swapped.splice(ra, now_a);
    let mut replayed = new.clone();
    replayed.splice(block(&new, "a"), old[block(&old, "a")].to_vec());
    for (what, lines) in [("dropped", dropped), ("swapped", swapped), ("replayed", replayed)] {
        let forged = rerooted(&lines);
        let p = dir.path().join(format!("{what}.wtxt"));
        std::fs::write(&p, &forged).unwrap();
        let r = run(&["verify", s(&p), "--hmac-key", "keys/hmac.hex"]);
        assert_eq!(r.code, 1, "{what}: {}", r.stdout);
        assert!(r.stderr.contains("keyed tag") || r.stderr.contains("salt"), "{what}: {}", r.stderr);
        let out = dir.path().join(format!("{what}.npz"));
        assert_eq!(run(&["extract", s(&p), "-o", s(&out), "--hmac-key", "keys/hmac.hex"]).code, 1, "{what}");
        assert!(!out.exists());
        let signed = dir.path().join(format!("{what}.signed.wtxt"));
        let r =
            run(&["snapshot", s(&p), "-o", s(&signed), "--hmac-key", "keys/hmac.hex", "--sign-key", "keys/sign.pem"]);
        assert_eq!(r.code, 1, "{what}: signed a forgery: {}", r.stderr);
        assert!(!signed.exists());
        // Stripping the tag is no way around it: an unbound file needs the flag.
        let stripped = forged.lines().filter(|l| !l.starts_with("audit ")).collect::<Vec<_>>().join("\n") + "\n";
        std::fs::write(&p, stripped).unwrap();
        // Unkeyed, the forgery is a well-formed file; every array's tag holds alone.
        assert_eq!(run(&["verify", s(&p)]).code, 0, "{what}");
        let r = run(&["verify", s(&p), "--hmac-key", "keys/hmac.hex"]);
        assert_eq!(r.code, 1, "{what}: {}", r.stdout);
        assert!(r.stderr.contains("no keyed tag"), "{what}: {}", r.stderr);
        let r = run(&["verify", s(&p), "--hmac-key", "keys/hmac.hex", "--allow-unbound"]);
        assert!(r.stdout.contains("NOT bound"), "{what}: {} {}", r.stdout, r.stderr);
        // Recovery with the key keeps no array of another generation, and
        // so binds and signs none, unless told the writer bound nothing.
        let (rec, report) = (dir.path().join(format!("{what}.rec.wtxt")), dir.path().join(format!("{what}.json")));
        let args = [
            "recover",
            s(&p),
            "-o",
            s(&rec),
            "--report",
            s(&report),
            "--hmac-key",
            "keys/hmac.hex",
            "--sign-key",
            "keys/sign.pem",
        ];
        let r = run(&args);
        let lost =
            |r: &serde_json::Value| r["arrays"].as_array().unwrap().iter().filter(|a| a["recovered"] == false).count();
        let rep: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        if what != "dropped" {
            // A swap moves two arrays' salts away from their names.
            assert_eq!(r.code, 1, "{what}: {}", r.stderr);
            assert_eq!(lost(&rep), if what == "swapped" { 2 } else { 1 }, "{what}: {rep}");
            assert!(rep.to_string().contains("does not derive"), "{what}: {rep}");
            let r = run(&[&args[..], &["--allow-unbound"]].concat());
            assert_eq!(r.code, 1, "{what}: signed an unbound array: {}", r.stderr);
        } else {
            assert_eq!(lost(&rep), 0, "{what}: {rep}");
        }
    }
}

/// `extract` takes `verify`'s signature options, and inside a repository
/// both apply its `wtxt.trustedKeys`/`wtxt.requireSignature` unless told
/// other keys: an unsigned generation writes nothing, from the work tree
/// or by revision; a signer outside the keys is reported as the signer's.
#[test]
fn verify_and_extract_hold_a_repositorys_signature_policy() {
    use crate::util::{git_ok, wtxt};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "-b", "main", "w"]);
    let w = d.join("w");
    let snap = |out: &str, key: Option<&str>| {
        let mut c = wtxt();
        c.arg("snapshot").arg(fixture("inputs/model.npz")).args(["-o", out, "--gen", "0"]);
        if let Some(k) = key {
            c.arg("--sign-key").arg(fixture(k));
        }
        assert!(c.current_dir(&w).output().unwrap().status.success());
    };
    snap("u.wtxt", None);
    snap("s.wtxt", Some("keys/sign.pem"));
    snap("o.wtxt", Some("keys/other.pem"));
    git_ok(&w, &["add", "-A"]);
    git_ok(&w, &["commit", "-q", "--no-verify", "-m", "three"]);
    git_ok(&w, &["config", "wtxt.trustedKeys", fixture("keys/trusted_keys").to_str().unwrap()]);
    git_ok(&w, &["config", "wtxt.requireSignature", "true"]);
    let run = |args: &[&str]| {
        let o = wtxt().current_dir(&w).args(args).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    assert_eq!(run(&["verify", "s.wtxt"]).0, Some(0));
    assert_eq!(run(&["verify", "u.wtxt"]).0, Some(1), "the repository requires a signature");
    let (code, said) = run(&["verify", "o.wtxt"]);
    assert!(code == Some(1) && said.contains("not a trusted key"), "{said}");
    for (file, args) in [("u.wtxt", &[][..]), ("u.wtxt", &["--rev", "HEAD"][..]), ("o.wtxt", &[][..])] {
        let (code, said) = run(&[&["extract", file, "-o", "../x.npz"][..], args].concat());
        assert_eq!(code, Some(1), "{file} {args:?}: {said}");
        assert!(!d.join("x.npz").exists(), "{file} {args:?}: written");
    }
    assert_eq!(run(&["extract", "s.wtxt", "-o", "../s.npz"]).0, Some(0));
    assert_eq!(run(&["extract", "s.wtxt", "--rev", "HEAD", "-o", "../r.npz"]).0, Some(0));
    // Keys named on the command line are the policy instead.
    let other = fixture("keys/other.pem.pub");
    let (code, said) = run(&["extract", "o.wtxt", "--pubkey", other.to_str().unwrap(), "-o", "../o.npz"]);
    assert_eq!(code, Some(0), "{said}");
    // Outside the repository, extract takes the same options itself.
    let outside = tempfile::tempdir().unwrap();
    std::fs::copy(w.join("u.wtxt"), outside.path().join("u.wtxt")).unwrap();
    let o = wtxt()
        .current_dir(outside.path())
        .args(["extract", "u.wtxt", "-o", "x.npz", "--require-signature", "--trusted-keys"])
        .arg(fixture("keys/trusted_keys"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!outside.path().join("x.npz").exists());
}
