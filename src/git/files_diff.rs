//! What changed in the files a Hugging Face folder's snapshot keeps beside
//! its tensors (`__hf_files`: `config.json`, the tokenizer, the index...),
//! by path, with a unified diff of a text file's lines; and a change of
//! `__names` in words. A reviewer reads a changed `config.json` (which may
//! name code to run, `auto_map`) as plain Git would show it, not as bytes
//! of a `u8` array. Display only: the arrays' bytes are compared by the
//! diff itself, and every byte shown was decoded from chunks whose
//! CRC32C and SHA-256 held (a damaged side is reported, not shown).

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::convert::hf::{HF, HF_FILES};
use crate::convert::names::NAMES;

/// Text files larger than this are summarized, not diffed line by line.
const MAX_TEXT_DIFF: usize = 1 << 20;
/// Lines of a unified diff shown per file.
const MAX_DIFF_LINES: usize = 200;

/// True for the metadata arrays whose values a diff reads whole.
pub fn wanted(name: &str) -> bool {
    name == HF || name == HF_FILES || name == NAMES
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
    let (Some(old), Some(new)) = (c.get(HF_FILES, 0), c.get(HF_FILES, 1)) else { return Vec::new() };
    if old == new {
        return Vec::new();
    }
    let split = |side: usize, bytes: &[u8]| -> Option<BTreeMap<String, Vec<u8>>> {
        let list: serde_json::Value = serde_json::from_slice(c.get(HF, side)?).ok()?;
        let mut out = BTreeMap::new();
        for f in list.get("files")?.as_array()? {
            let (path, off, len) = (f.get("path")?.as_str()?, f.get("offset")?.as_u64()?, f.get("len")?.as_u64()?);
            let end = off.checked_add(len)?;
            out.insert(path.to_string(), bytes.get(off as usize..end as usize)?.to_vec());
        }
        Some(out)
    };
    let (a, b) = match (split(0, old), split(1, new)) {
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
pub fn names_changes(c: &Captured) -> Vec<String> {
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
}
