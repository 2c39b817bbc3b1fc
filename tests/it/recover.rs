//! Partial recovery: what is intact survives, the rest is reported.

use std::path::Path;

use crate::util::{read, wtxt};

fn recover(damaged: &[u8], dir: &Path) -> (i32, serde_json::Value, Vec<u8>) {
    let inp = dir.join("damaged.wtxt");
    let out = dir.join("out.wtxt");
    let rep = dir.join("report.json");
    std::fs::write(&inp, damaged).unwrap();
    let o = wtxt().arg("recover").arg(&inp).arg("-o").arg(&out).arg("--report").arg(&rep).output().unwrap();
    let report = serde_json::from_slice(&std::fs::read(&rep).unwrap()).unwrap();
    (o.status.code().unwrap(), report, std::fs::read(&out).unwrap())
}

fn arrays_of(wtxt_bytes: &[u8]) -> Vec<wtxt::model::Array> {
    wtxt::format::load(wtxt_bytes, wtxt_bytes.len() as u64, &Default::default()).unwrap().arrays
}

#[test]
fn flipped_bits_deleted_lines_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let base = read("expected/hmac.wtxt");
    let orig = arrays_of(&base);
    let text = String::from_utf8(base.clone()).unwrap();
    let mut ls: Vec<String> = text.lines().map(String::from).collect();
    // Damage long_vec's second chunk (a base64 line), and delete a line of tok_embed.
    let lv = ls.iter().position(|l| l.starts_with("arr name=long_vec")).unwrap();
    let second_ch = ls[lv..].iter().position(|l| l.starts_with("ch ix=000001")).unwrap() + lv;
    ls[second_ch + 2].replace_range(0..1, "Z");
    let te = ls.iter().position(|l| l.starts_with("arr name=tok_embed")).unwrap();
    ls.remove(te + 5);
    let damaged = ls.join("\n") + "\n";
    let (code, rep, out) = recover(damaged.as_bytes(), dir.path());
    assert_eq!(code, 1, "arrays were lost");
    assert_eq!(rep["lost_arrays"], 2);
    let lv_rep = rep["arrays"].as_array().unwrap().iter().find(|a| a["name"] == "long_vec").unwrap();
    assert_eq!(lv_rep["intact_chunks"].as_array().unwrap().len(), 1, "chunk 0 is still intact");
    assert_eq!(lv_rep["damaged_chunks"][0]["ix"], 1);
    let got = arrays_of(&out);
    // Only the 10 whole arrays: nothing invented goes into the output.
    assert_eq!(got.len(), orig.len() - 2);
    for a in &got {
        let o = orig.iter().find(|o| o.name == a.name).unwrap();
        assert_eq!(a.bytes(), o.bytes(), "{} changed", a.name);
    }
    // What survives of long_vec goes to the separate --partial file.
    let partial = dir.path().join("partial.npz");
    let o = wtxt()
        .arg("recover")
        .arg(dir.path().join("damaged.wtxt"))
        .arg("-o")
        .arg(dir.path().join("out2.wtxt"))
        .arg("--partial")
        .arg(&partial)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let parts = wtxt::convert::load_inputs(&[partial.as_path()], &Default::default(), &mut Vec::new()).unwrap();
    let lv = orig.iter().find(|o| o.name == "long_vec").unwrap();
    let part = parts.iter().find(|a| a.name == "long_vec").unwrap();
    assert_eq!(&part.bytes()[..32768], &lv.bytes()[..32768], "the intact chunk's bytes are kept");
    assert!(part.bytes()[32768..].iter().all(|&b| b == 0), "the damaged chunk is zero-filled");
    assert_eq!(parts.iter().find(|a| a.name == "long_vec__intact").unwrap().bytes(), &[1, 0]);
    assert!(!parts.iter().any(|a| a.name.starts_with("tok_embed")), "no intact chunk: nothing to keep");
    assert_eq!(arrays_of(&std::fs::read(dir.path().join("out2.wtxt")).unwrap()).len(), orig.len() - 2);
    // The HMAC tags of rescued arrays are carried over; a recovery without
    // the key cannot bind the set it kept, so the file is unbound.
    let r = wtxt()
        .arg("verify")
        .arg(dir.path().join("out.wtxt"))
        .args(["--hmac-key", "keys/hmac.hex", "--allow-unbound", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let whole = v["arrays"].as_array().unwrap().iter().filter(|a| !a["name"].as_str().unwrap().contains("__"));
    assert!(whole.clone().count() == 10 && whole.into_iter().all(|a| a["authenticated"] == true));

    // Truncation in the middle keeps every array before the cut.
    let cut = text.find("arr name=mask_u8").unwrap() + 20;
    let (_, rep, out) = recover(&base[..cut], dir.path());
    let names: Vec<String> = arrays_of(&out).into_iter().map(|a| a.name).collect();
    assert_eq!(names, ["Zeta", "_hidden", "bias", "counts", "i8_cube", "long_vec"]);
    assert_eq!(rep["header_intact"], true);
}

#[test]
fn an_intact_file_recovers_whole() {
    let dir = tempfile::tempdir().unwrap();
    let base = read("expected/defaults.wtxt");
    let (code, rep, out) = recover(&base, dir.path());
    assert_eq!(code, 0);
    assert_eq!(rep["lost_arrays"], 0);
    assert_eq!(arrays_of(&out).len(), 12);
}

#[test]
fn garbage_recovers_nothing_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    // T5-14: an output already there is left as it was, not replaced by an
    // empty snapshot.
    let out = dir.path().join("out.wtxt");
    std::fs::write(&out, read("expected/defaults.wtxt")).unwrap();
    for input in [&b"\x00\x01garbage\narr name=x\nch ix=1\n"[..], b"PK\x03\x04 not a snapshot at all"] {
        let (code, rep, kept) = recover(input, dir.path());
        assert_eq!(code, 1);
        assert_eq!(rep["recovered_arrays"], 0);
        assert_eq!(kept, read("expected/defaults.wtxt"), "the output was replaced");
    }
}

#[test]
fn a_mangled_arr_line_counts_as_a_lost_array() {
    let dir = tempfile::tempdir().unwrap();
    let text = String::from_utf8(read("expected/defaults.wtxt")).unwrap();
    let damaged = text.replacen("arr name=bias dtype=f64", "arr name=bias dtype=f6?", 1);
    let (code, rep, out) = recover(damaged.as_bytes(), dir.path());
    assert_eq!(code, 1);
    assert_eq!(rep["lost_arrays"], 1, "{rep}");
    assert!(rep["unnamed_lost"][0]["what"].as_str().unwrap().contains("unreadable arr line"), "{rep}");
    assert_eq!(arrays_of(&out).len(), 11);
    // Its arr line gone altogether: its chunks are orphans, and still one loss.
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("arr name=bias ")).collect();
    let (code, rep, _) = recover((lines.join("\n") + "\n").as_bytes(), dir.path());
    assert_eq!(code, 1);
    assert_eq!(rep["lost_arrays"], 1, "{rep}");
}
