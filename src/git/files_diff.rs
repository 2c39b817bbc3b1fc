//! What changed in the files a Hugging Face folder's snapshot keeps beside
//! its tensors (`__hf_files`: `config.json`, the tokenizer, the index...),
//! by path, with a unified diff of a text file's lines; and changes of
//! `__names` and of the shards' headers (`__hf_headers`) in words. A reviewer reads a changed `config.json` (which may
//! name code to run, `auto_map`) as plain Git would show it, not as bytes
//! of a `u8` array. Display only: the arrays' bytes are compared by the
//! diff itself, and every byte shown was decoded from chunks whose
//! CRC32C and SHA-256 held (a damaged side is reported, not shown).

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::convert::hf::{HF, HF_FILES, HF_HEADERS};
use crate::convert::names::NAMES;

/// Text files larger than this are summarized, not diffed line by line.
const MAX_TEXT_DIFF: usize = 1 << 20;
/// Lines of a unified diff shown per file, and lines in words per diff.
const MAX_DIFF_LINES: usize = 200;

/// How the stored names of the text files a checkpoint folder keeps as
/// `u8` arrays end (`trainer_state.json` is stored as `trainer_state_json`).
const TEXT_SUFFIXES: [&str; 7] = ["_json", "_jsonl", "_yaml", "_yml", "_txt", "_md", "_csv"];

/// A stored name that holds a text file of a checkpoint folder (a Trainer's
/// `trainer_state.json`, a config): not wtxt's own arrays (`__...`, the
/// `wtxt.*.json` structures the integrations keep).
fn text_file(name: &str) -> bool {
    !name.starts_with("__") && !name.starts_with("wtxt_") && TEXT_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// True for the arrays whose values a diff reads whole (`u8`, up to the
/// metadata limit): the metadata it shows in words or lines, and the text
/// files of a checkpoint folder.
pub fn wanted(name: &str) -> bool {
    name == HF || name == HF_FILES || name == HF_HEADERS || name == NAMES || text_file(name)
}

/// The wanted arrays' bytes on each side (old, new), as decoded.
#[derive(Default)]
pub struct Captured {
    arrays: BTreeMap<String, [Option<Vec<u8>>; 2]>,
}

impl Captured {
    /// Keeps one side's bytes of `name` (`side` 0: old, 1: new).
    pub fn keep(&mut self, name: &str, side: usize, bytes: Vec<u8>) {
        self.arrays.entry(name.to_string()).or_default()[side] = Some(bytes);
    }

    fn get(&self, name: &str, side: usize) -> Option<&[u8]> {
        self.arrays.get(name).and_then(|s| s[side].as_deref())
    }

    /// One side's pieces of `array` by path, as that side's `__hf` list
    /// (`files` or `shards`) places them; None without a readable list.
    fn pieces(&self, array: &str, list: &str, side: usize) -> Option<BTreeMap<String, Vec<u8>>> {
        let bytes = self.get(array, side)?;
        let folder: serde_json::Value = serde_json::from_slice(self.get(HF, side)?).ok()?;
        let mut out = BTreeMap::new();
        for f in folder.get(list)?.as_array()? {
            let (path, off, len) = (f.get("path")?.as_str()?, f.get("offset")?.as_u64()?, f.get("len")?.as_u64()?);
            let end = off.checked_add(len)?;
            out.insert(path.to_string(), bytes.get(off as usize..end as usize)?.to_vec());
        }
        Some(out)
    }
}

/// How a file of the folder changed.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    /// Only in the new snapshot.
    Added,
    /// Only in the old one.
    Removed,
    /// Other bytes.
    Changed,
}

/// One file of the folder that differs.
#[derive(Clone, Debug, Serialize)]
pub struct FileChange {
    /// Its path in the folder (`__hf_files` when the list of files is not
    /// in the text diffed, as in a part of a split snapshot without `__hf`).
    pub path: String,
    /// What happened to it.
    pub status: FileStatus,
    /// Its size in the old snapshot.
    pub old_len: Option<u64>,
    /// Its size in the new one.
    pub new_len: Option<u64>,
    /// SHA-256 of its old bytes, hex.
    pub old_sha256: Option<String>,
    /// SHA-256 of its new bytes, hex.
    pub new_sha256: Option<String>,
    /// A unified diff of its lines, when both sides are text (UTF-8, no
    /// NUL) up to 1 MiB; at most 200 lines of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unified: Option<String>,
    /// Lines of the unified diff left out past the 200 shown.
    #[serde(skip_serializing_if = "is_zero")]
    pub lines_left_out: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The files of `__hf_files` that differ between the sides. Each side's
/// `__hf` list names them; without it (a part that holds the bytes but not
/// the list), the whole array is one text.
pub fn file_changes(c: &Captured) -> Vec<FileChange> {
    let mut out = folder_changes(c);
    out.extend(text_changes(c));
    out
}

/// The text files of a checkpoint folder that changed, by their names in
/// the folder, as a unified diff of their lines (a file that is not text
/// stays an array of the diff).
fn text_changes(c: &Captured) -> Vec<FileChange> {
    let names = |side: usize| -> BTreeMap<String, String> {
        let v: Option<serde_json::Value> = c.get(NAMES, side).and_then(|b| serde_json::from_slice(b).ok());
        let m = v.as_ref().and_then(|v| v.get("names")?.as_object().cloned()).unwrap_or_default();
        m.into_iter().filter_map(|(k, v)| Some((k, v.as_str()?.to_string()))).collect()
    };
    let original = names(1);
    let mut out = Vec::new();
    for (name, [x, y]) in c.arrays.iter().filter(|(n, _)| text_file(n)) {
        let (Some(x), Some(y)) = (x, y) else { continue };
        if x == y {
            continue;
        }
        let path = original.get(name).unwrap_or(name);
        let (Some(unified), lines_left_out) = unified(path, x, y) else { continue };
        out.push(FileChange {
            path: path.clone(),
            status: FileStatus::Changed,
            old_len: Some(x.len() as u64),
            new_len: Some(y.len() as u64),
            old_sha256: Some(hex::encode(Sha256::digest(x))),
            new_sha256: Some(hex::encode(Sha256::digest(y))),
            unified: Some(unified),
            lines_left_out,
        });
    }
    out
}

/// The files of `__hf_files` that differ (see [`file_changes`]).
fn folder_changes(c: &Captured) -> Vec<FileChange> {
    let (Some(old), Some(new)) = (c.get(HF_FILES, 0), c.get(HF_FILES, 1)) else { return Vec::new() };
    if old == new {
        return Vec::new();
    }
    let (a, b) = match (c.pieces(HF_FILES, "files", 0), c.pieces(HF_FILES, "files", 1)) {
        (Some(a), Some(b)) => (a, b),
        _ => {
            let whole = |x: &[u8]| BTreeMap::from([(HF_FILES.to_string(), x.to_vec())]);
            (whole(old), whole(new))
        }
    };
    let mut out = Vec::new();
    for path in a.keys().chain(b.keys().filter(|p| !a.contains_key(*p))) {
        let (x, y) = (a.get(path), b.get(path));
        if x == y {
            continue;
        }
        let status = match (x, y) {
            (None, _) => FileStatus::Added,
            (_, None) => FileStatus::Removed,
            _ => FileStatus::Changed,
        };
        let (unified, lines_left_out) = unified(path, x.map_or(&[][..], |v| v), y.map_or(&[][..], |v| v));
        out.push(FileChange {
            path: path.clone(),
            status,
            old_len: x.map(|v| v.len() as u64),
            new_len: y.map(|v| v.len() as u64),
            old_sha256: x.map(|v| hex::encode(Sha256::digest(v))),
            new_sha256: y.map(|v| hex::encode(Sha256::digest(v))),
            unified,
            lines_left_out,
        });
    }
    out.sort_by(|p, q| p.path.cmp(&q.path));
    out
}

/// A unified diff of two texts, cut to [`MAX_DIFF_LINES`]; none when
/// either side is not text or too large.
fn unified(path: &str, a: &[u8], b: &[u8]) -> (Option<String>, u64) {
    let (Some(ta), Some(tb)) = (as_text(a), as_text(b)) else { return (None, 0) };
    let diff = similar::TextDiff::from_lines(ta, tb)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    let total = diff.lines().count();
    if total <= MAX_DIFF_LINES {
        return (Some(diff), 0);
    }
    let shown: String = diff.lines().take(MAX_DIFF_LINES).flat_map(|l| [l, "\n"]).collect();
    (Some(shown), (total - MAX_DIFF_LINES) as u64)
}

/// `x` as text to diff by line: UTF-8 without NUL, up to [`MAX_TEXT_DIFF`].
fn as_text(x: &[u8]) -> Option<&str> {
    if x.len() > MAX_TEXT_DIFF || x.contains(&0) {
        return None;
    }
    std::str::from_utf8(x).ok()
}

/// A change of the model's names (`__names`: WTXT name to the model's) in
/// words, one line per name added, removed or mapped anew.
fn names_changes(c: &Captured) -> Vec<String> {
    let map = |side: usize| -> Option<BTreeMap<String, String>> {
        let v: serde_json::Value = serde_json::from_slice(c.get(NAMES, side)?).ok()?;
        let m = v.get("names")?.as_object()?;
        Some(m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
    };
    let (Some(a), Some(b)) = (map(0), map(1)) else { return Vec::new() };
    let mut out = Vec::new();
    for (k, v) in &a {
        match b.get(k) {
            None => out.push(format!("name removed: {v} (stored as {k})")),
            Some(w) if w != v => out.push(format!("name changed: {k} was {v}, now {w}")),
            _ => {}
        }
    }
    for (k, v) in b.iter().filter(|(k, _)| !a.contains_key(*k)) {
        out.push(format!("name added: {v} (stored as {k})"));
    }
    out
}

/// The changes of `__names` and of the shards' headers, in words.
pub fn in_words(c: &Captured) -> Vec<String> {
    let mut out = names_changes(c);
    out.extend(headers_changes(c));
    out
}

/// A change of the shards' safetensors headers (`__hf_headers`) in words:
/// shards added or removed, `__metadata__` entries, tensors added, removed,
/// retyped or reshaped, and how many only moved. At most
/// 200 lines (`MAX_DIFF_LINES`), then how many were left out.
pub fn headers_changes(c: &Captured) -> Vec<String> {
    let (Some(old), Some(new)) = (c.get(HF_HEADERS, 0), c.get(HF_HEADERS, 1)) else { return Vec::new() };
    if old == new {
        return Vec::new();
    }
    let (Some(a), Some(b)) = (c.pieces(HF_HEADERS, "shards", 0), c.pieces(HF_HEADERS, "shards", 1)) else {
        return vec![format!("shard headers changed ({} -> {} bytes)", old.len(), new.len())];
    };
    let mut out = Vec::new();
    for path in a.keys().chain(b.keys().filter(|p| !a.contains_key(*p))) {
        let (x, y) = (a.get(path).map(|h| header(h)), b.get(path).map(|h| header(h)));
        let count = |h: &Option<serde_json::Map<String, serde_json::Value>>| {
            h.as_ref().map_or(0, |m| m.keys().filter(|k| *k != "__metadata__").count())
        };
        match (x, y) {
            (None, Some(y)) => out.push(format!("shard added: {path} ({} tensors)", count(&y))),
            (Some(x), None) => out.push(format!("shard removed: {path} ({} tensors)", count(&x))),
            (Some(x), Some(y)) if a.get(path) != b.get(path) => match (x, y) {
                (Some(x), Some(y)) => shard_changes(path, &x, &y, &mut out),
                _ => out.push(format!("{path}: header changed (not a safetensors header)")),
            },
            _ => {}
        }
    }
    if out.len() > MAX_DIFF_LINES {
        let left = out.len() - MAX_DIFF_LINES;
        out.truncate(MAX_DIFF_LINES);
        out.push(format!("... {left} more header change(s)"));
    }
    out
}

/// A shard's header (8-byte length, then JSON) as its JSON object.
fn header(h: &[u8]) -> Option<serde_json::Map<String, serde_json::Value>> {
    let n = u64::from_le_bytes(h.get(..8)?.try_into().ok()?);
    let json = h.get(8..8usize.checked_add(usize::try_from(n).ok()?)?)?;
    match serde_json::from_slice(json).ok()? {
        serde_json::Value::Object(m) => Some(m),
        _ => None,
    }
}

/// One shard's header changes, as lines into `out`.
fn shard_changes(
    path: &str,
    x: &serde_json::Map<String, serde_json::Value>,
    y: &serde_json::Map<String, serde_json::Value>,
    out: &mut Vec<String>,
) {
    let meta = |m: &serde_json::Map<String, serde_json::Value>| {
        m.get("__metadata__").and_then(|v| v.as_object()).cloned().unwrap_or_default()
    };
    let (ma, mb) = (meta(x), meta(y));
    for (k, v) in &ma {
        match mb.get(k) {
            None => out.push(format!("{path}: __metadata__ {k:?} removed (was {v})")),
            Some(w) if w != v => out.push(format!("{path}: __metadata__ {k:?} was {v}, now {w}")),
            _ => {}
        }
    }
    for (k, v) in mb.iter().filter(|(k, _)| !ma.contains_key(*k)) {
        out.push(format!("{path}: __metadata__ {k:?} added ({v})"));
    }
    let kind = |v: &serde_json::Value| {
        format!(
            "{} {}",
            v.get("dtype").unwrap_or(&serde_json::Value::Null),
            v.get("shape").unwrap_or(&serde_json::Value::Null)
        )
    };
    let mut moved = 0usize;
    for (k, v) in x.iter().filter(|(k, _)| *k != "__metadata__") {
        match y.get(k) {
            None => out.push(format!("{path}: tensor {k:?} removed ({})", kind(v))),
            Some(w) if kind(w) != kind(v) => out.push(format!("{path}: tensor {k:?} was {}, now {}", kind(v), kind(w))),
            Some(w) if w != v => moved += 1,
            _ => {}
        }
    }
    for (k, v) in y.iter().filter(|(k, _)| *k != "__metadata__" && !x.contains_key(*k)) {
        out.push(format!("{path}: tensor {k:?} added ({})", kind(v)));
    }
    if moved > 0 {
        out.push(format!("{path}: {moved} tensor(s) at other offsets"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &str)]) -> (Vec<u8>, Vec<u8>) {
        let (mut bytes, mut list) = (Vec::new(), Vec::new());
        for (p, t) in files {
            list.push(serde_json::json!({"path": p, "offset": bytes.len(), "len": t.len()}));
            bytes.extend_from_slice(t.as_bytes());
        }
        (serde_json::to_vec(&serde_json::json!({"files": list, "shards": []})).unwrap(), bytes)
    }

    #[test]
    fn a_changed_config_is_shown_by_path_and_line() {
        let mut c = Captured::default();
        let (hf0, f0) = folder(&[("config.json", "{\n  \"eps\": 1e-05,\n  \"x\": 1\n}\n"), ("tok.bin", "\0ab")]);
        let (hf1, f1) = folder(&[("config.json", "{\n  \"eps\": 1e-06,\n  \"x\": 1\n}\n"), ("tok.bin", "\0abc")]);
        for (side, hf, f) in [(0, hf0, f0), (1, hf1, f1)] {
            c.keep(HF, side, hf);
            c.keep(HF_FILES, side, f);
        }
        let ch = file_changes(&c);
        assert_eq!(ch.len(), 2);
        let u = ch[0].unified.as_deref().unwrap();
        assert_eq!(ch[0].path, "config.json");
        assert!(
            u.contains("--- a/config.json") && u.contains("-  \"eps\": 1e-05,") && u.contains("+  \"eps\": 1e-06,")
        );
        assert_eq!((ch[1].path.as_str(), ch[1].unified.is_none(), ch[1].new_len), ("tok.bin", true, Some(4)));
    }

    fn shards(headers: &[(&str, serde_json::Value)]) -> (Vec<u8>, Vec<u8>) {
        let (mut bytes, mut list) = (Vec::new(), Vec::new());
        for (p, h) in headers {
            let json = serde_json::to_vec(h).unwrap();
            let at = bytes.len();
            bytes.extend_from_slice(&(json.len() as u64).to_le_bytes());
            bytes.extend_from_slice(&json);
            list.push(serde_json::json!({"path": p, "offset": at, "len": bytes.len() - at}));
        }
        (serde_json::to_vec(&serde_json::json!({"files": [], "shards": list})).unwrap(), bytes)
    }

    #[test]
    fn changed_shard_headers_are_told_in_words() {
        use serde_json::json;
        let t = |d: &str, s: &[u64], o: [u64; 2]| json!({"dtype": d, "shape": s, "data_offsets": o});
        let (hf0, h0) = shards(&[
            (
                "a.safetensors",
                json!({"__metadata__": {"format": "pt"}, "w": t("F32", &[2, 2], [0, 16]),
                                     "b": t("F32", &[2], [16, 24]), "gone": t("F32", &[1], [24, 28])}),
            ),
            ("old.safetensors", json!({"x": t("F32", &[1], [0, 4])})),
        ]);
        let (hf1, h1) = shards(&[
            (
                "a.safetensors",
                json!({"__metadata__": {"format": "np", "step": "5"}, "w": t("BF16", &[2, 2], [0, 8]),
                                     "b": t("F32", &[2], [8, 16]), "new": t("F32", &[3], [16, 28])}),
            ),
            ("new.safetensors", json!({"y": t("F32", &[1], [0, 4]), "z": t("F32", &[1], [4, 8])})),
        ]);
        let mut c = Captured::default();
        for (side, hf, h) in [(0, hf0, h0), (1, hf1, h1)] {
            c.keep(HF, side, hf);
            c.keep(HF_HEADERS, side, h);
        }
        let lines = headers_changes(&c);
        let want = [
            r#"a.safetensors: __metadata__ "format" was "pt", now "np""#,
            r#"a.safetensors: __metadata__ "step" added ("5")"#,
            r#"a.safetensors: tensor "w" was "F32" [2,2], now "BF16" [2,2]"#,
            r#"a.safetensors: tensor "gone" removed ("F32" [1])"#,
            r#"a.safetensors: tensor "new" added ("F32" [3])"#,
            "a.safetensors: 1 tensor(s) at other offsets",
            "shard removed: old.safetensors (1 tensors)",
            "shard added: new.safetensors (2 tensors)",
        ];
        assert_eq!(lines, want);
    }
}
