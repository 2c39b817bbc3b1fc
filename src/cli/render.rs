//! The text the binary prints: verify's summary, inspect's table, the
//! chain of `wtxt log`, and the semantic diff (for `wtxt diff` and Git's
//! diff driver). The library gives typed results; how they read is here.

use std::path::Path;

use crate::format::syntax::shape_str;
use crate::format::verify::{Binding, Report, SigStatus};
use crate::git::diff::{FileDiff, Status};
use crate::git::files_diff::FileStatus;
use crate::git::history::DataCheck;
use crate::ops;

/// `verify`'s one line for a file that passed.
pub fn verify_summary(file: &Path, r: &Report) -> String {
    let keyid = r.keyid.map(hex::encode).unwrap_or_default();
    let authed = r.arrays.iter().filter(|a| a.authenticated).count();
    let hmac = if !r.keyed {
        "HMAC not checked (no key given)".to_string()
    } else if authed == r.arrays.len() && !r.arrays.is_empty() {
        "all arrays authenticated".to_string()
    } else {
        format!("{authed}/{} arrays authenticated", r.arrays.len())
    };
    let hmac = match (r.keyed, r.binding) {
        (true, Binding::Bound) => format!("{hmac}, file bound by the key"),
        (true, _) => format!(
            "{hmac}, file NOT bound by the key (--allow-unbound: its generation, names and set of arrays are \
             not authenticated)"
        ),
        (false, _) => hmac,
    };
    let sig = match r.signature {
        SigStatus::Valid => format!("signature valid (keyid {keyid})"),
        SigStatus::Untrusted => {
            format!("signature untrusted (keyid {keyid}; give --pubkey or --trusted-keys)")
        }
        SigStatus::Absent => "unsigned".to_string(),
        SigStatus::Invalid => "signature INVALID".to_string(),
    };
    let bytes: u64 = r.arrays.iter().map(|a| a.bytes).sum();
    format!(
        "OK {}: gen {:06} ts {} build {}, {} arrays, {} bytes, {}, {}{}\n",
        file.display(),
        r.gen,
        r.ts,
        r.build,
        r.arrays.len(),
        bytes,
        hmac,
        sig,
        if r.oms.is_some() { ", OMS signature valid" } else { "" }
    )
}

/// `inspect`'s table.
pub fn inspection_text(i: &ops::Inspection) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "schema {}  gen {:06}  ts {}  build {}  host {}  cuda {}",
        i.schema, i.gen, i.ts, i.build, i.host, i.cuda
    );
    let _ = writeln!(s, "cap {}", i.cap.join(","));
    let form = if i.digest == "tree" { "tree (from the chunks' SHA-256)" } else { "sha256 (WTXT 1.1)" };
    let _ = writeln!(s, "digest {form}");
    match &i.sha256_all {
        Some(sha) => {
            let _ = writeln!(s, "sha256_all {sha}");
            let _ = writeln!(s, "merkle_prev {}", i.merkle_prev.as_deref().unwrap_or(""));
            let _ = writeln!(s, "merkle_this {}", i.merkle_this.as_deref().unwrap_or(""));
        }
        None => {
            let _ = writeln!(s, "root pending (WTXT-S): finalize with a WSUM");
        }
    }
    let _ = writeln!(s, "signature {}", i.keyid.as_deref().map_or("none".to_string(), |k| format!("keyid {k}")));
    let _ = writeln!(s, "{} arrays, {} bytes", i.arrays.len(), i.total_bytes);
    let w = i.arrays.iter().map(|a| a.name.len()).max().unwrap_or(4).max(4);
    // The inputs' own names, where they had to be mapped, in a last column.
    let originals = i.arrays.iter().any(|a| a.original.is_some());
    let _ = writeln!(
        s,
        "{:<w$}  {:<5}  {:<16}  {:>12}  {:>6}  hmac  sha256{}",
        "name",
        "dtype",
        "shape",
        "bytes",
        "chunks",
        if originals { "            original name" } else { "" }
    );
    for a in &i.arrays {
        let shape = crate::format::syntax::shape_str(&a.shape);
        let line = format!(
            "{:<w$}  {:<5}  {:<16}  {:>12}  {:>6}  {:<4}  {}  {}",
            a.name,
            a.dtype,
            shape,
            a.bytes,
            a.chunks,
            if a.hmac { "yes" } else { "no" },
            &a.sha256[..16],
            a.original.as_deref().unwrap_or("")
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
    if let Some(m) = &i.metadata {
        let pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(s, "metadata {}", pairs.join(" "));
    }
    if !i.audit.is_empty() {
        let pairs: Vec<String> = i.audit.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(s, "audit {}", pairs.join(" "));
    }
    s
}

/// `verified`: every generation's data was verified (`--verify`); else
/// only headers and links were read, and the text says so.
pub fn log_text(chains: &[crate::git::history::Chain], verified: bool) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for c in chains {
        let bad = c.generations.iter().filter(|g| !g.problems.is_empty()).count();
        let verdict = match (bad, verified) {
            (0, true) => "chain OK, every generation's data verified".to_string(),
            (0, false) => "headers and links OK; data not verified (`wtxt log --verify` proves it)".to_string(),
            _ => format!("{bad} generation(s) FLAGGED"),
        };
        let _ = writeln!(s, "{}: {} generation(s), {verdict}", c.path, c.generations.len());
        for g in &c.generations {
            let link = if g.links.is_empty() {
                "genesis".to_string()
            } else if g.links.iter().any(|l| l.merkle_ok) {
                "link ok".to_string()
            } else {
                "LINK BROKEN".to_string()
            };
            let data = match g.data {
                DataCheck::Verified => "data verified",
                DataCheck::NotVerified => "data not verified",
                DataCheck::Failed => "data FAILED",
            };
            let sig = match g.signature {
                SigStatus::Valid if g.data == DataCheck::Verified => "signed (valid)".to_string(),
                SigStatus::Valid => "header signature valid".to_string(),
                SigStatus::Invalid => "signature INVALID".to_string(),
                SigStatus::Untrusted => {
                    format!(
                        "signature not checked (keyid {}; no trusted key for it)",
                        g.keyid.as_deref().unwrap_or("?")
                    )
                }
                SigStatus::Absent => "unsigned".to_string(),
            };
            let _ = writeln!(
                s,
                "{} gen {:06} {} build {} sha256_all {} {link}, {sig}; {data}  {}{}",
                &g.commit[..10],
                g.gen,
                g.ts,
                g.build,
                g.sha256_all.as_deref().map_or("-", |h| &h[..16]),
                g.summary,
                if g.path != c.path { format!(" [{}]", g.path) } else { String::new() }
            );
            for p in &g.problems {
                let _ = writeln!(s, "    ! {p}");
            }
        }
    }
    s
}

/// What Git's diff driver prints for one path.
pub fn driver_text(v: &ops::DriverView, color: bool) -> String {
    let path = &v.path;
    let head = format!("diff --wtxt a/{path} b/{path}\n");
    let one = |what: &str, i: &crate::Result<ops::Inspection>| match i {
        Ok(i) => format!("{head}{what} {path}: gen {:06}, {} arrays, {} bytes\n", i.gen, i.arrays.len(), i.total_bytes),
        Err(e) => format!("{head}{what} {path}: {}\n", e.message()),
    };
    match &v.shown {
        ops::Shown::Added(i) => one("new file", i),
        ops::Shown::Deleted(i) => one("deleted file", i),
        ops::Shown::Diff(d) => {
            format!("{head}{}", diff_text(d, &format!("a/{path}"), &format!("b/{path}"), color, diff_full()))
        }
        ops::Shown::BadArguments(_) => "wtxt: the diff driver takes 7 arguments\n".to_string(),
        ops::Shown::Failed(e) => {
            format!("{head}wtxt diff: {e} (use git diff --no-ext-diff --no-textconv for the text)\n")
        }
    }
}

/// Header fields a reviewer does not read: hashes that change with every
/// generation and say nothing of what changed (`--full` shows them).
const HASH_FIELDS: [&str; 4] = ["sha256_all", "merkle_prev", "merkle_this", "fastxor"];

/// The diff as text, `git diff` style; `color` adds ANSI colours. Without
/// `full`, what a reviewer does not read is counted, not shown: the
/// header's hashes and its raw lines, and wtxt's own arrays (`__...`, the
/// integrations' `wtxt.*.json`); a text file of a checkpoint folder is
/// shown as a diff of its lines, not as an array.
pub fn diff_text(d: &FileDiff, old: &str, new: &str, color: bool, full: bool) -> String {
    use std::fmt::Write as _;
    let paint = |code: &str, s: String| if color { format!("\x1b[{code}m{s}\x1b[0m") } else { s };
    let mut s = String::new();
    let _ = writeln!(s, "{}", paint("1", format!("wtxt diff {old} {new}")));
    for x in &d.damage {
        let _ = writeln!(
            s,
            "{}",
            paint(
                "1;31",
                format!(
                    "DAMAGED {} line {}: array {}: {} (this side fails verification; its damaged chunks are not compared)",
                    x.file, x.line, x.array, x.message
                )
            )
        );
    }
    if d.identical {
        let _ = writeln!(s, "identical");
        return s;
    }
    let mut hidden = 0;
    for f in &d.header {
        if !full && HASH_FIELDS.contains(&f.field.as_str()) {
            hidden += 1;
            continue;
        }
        let _ = writeln!(s, "{} {}: {} -> {}", paint("36", "header".into()), f.field, short(&f.old), short(&f.new));
    }
    if hidden > 0 {
        let _ = writeln!(
            s,
            "{} {hidden} hash(es) changed, as every generation's do (--full shows them)",
            paint("36", "header".into())
        );
    }
    for n in &d.notes {
        let _ = writeln!(s, "{} {n}", paint("36", "split".into()));
    }
    let (mut unchanged, mut rewrapped, mut internal) = (0, 0, 0);
    for a in &d.arrays {
        let ty = type_text(&a.dtype, &a.shape);
        // A text file shown below as a diff of its lines.
        if d.files.iter().any(|f| f.path == a.shown_name()) {
            continue;
        }
        if !full && a.status != Status::Unchanged && (a.name.starts_with("__") || a.shown_name().starts_with("wtxt.")) {
            internal += 1;
            continue;
        }
        let line = match a.status {
            Status::Unchanged => {
                unchanged += 1;
                continue;
            }
            Status::Added => paint("32", format!("+ {} {ty} (added)", a.shown_name())),
            Status::Removed => paint("31", format!("- {} {ty} (removed)", a.shown_name())),
            Status::Reshaped | Status::DtypeChanged => paint(
                "33",
                format!(
                    "! {} {} -> {ty} ({})",
                    a.shown_name(),
                    type_text(a.old_dtype.as_deref().unwrap_or(""), a.old_shape.as_deref().unwrap_or(&[])),
                    if a.status == Status::Reshaped { "reshaped" } else { "dtype changed" }
                ),
            ),
            Status::Rewrapped => {
                rewrapped += 1;
                continue;
            }
            Status::Changed => {
                let chunks = ranges_text(&runs(&a.changed_chunks), false);
                let mut t = format!(
                    "~ {} {ty}: {} element(s) changed in {} chunk(s) [{chunks}], rows {}",
                    a.shown_name(),
                    a.changed_elements,
                    a.changed_chunks.len(),
                    ranges_text(&a.changed_rows, a.rows_truncated)
                );
                if let (Some(m), Some(r), Some(l)) = (a.max_abs, a.max_rel, a.l2) {
                    if let Some(n) = a.moved {
                        let _ = write!(t, "; {n} moved beyond isclose");
                    }
                    let _ = write!(t, "; max|d| {m:.3e}, max rel {r:.3e}, L2 {l:.3e}");
                }
                paint("33", t)
            }
        };
        let _ = writeln!(s, "{line}");
    }
    if unchanged + rewrapped > 0 {
        let note = if rewrapped > 0 {
            format!(" ({rewrapped} with a new arr line: salt/HMAC of the new gen)")
        } else {
            String::new()
        };
        let _ = writeln!(s, "= {} array(s) with unchanged values{note}", unchanged + rewrapped);
    }
    if internal > 0 {
        let _ = writeln!(s, "= {internal} of wtxt's own array(s) changed (names, structure; --full shows them)");
    }
    for n in &d.names {
        let _ = writeln!(s, "{} {n}", paint("36", "names".into()));
    }
    for f in &d.files {
        let size = |n: Option<u64>| n.map_or(String::new(), |n| format!("{n} bytes"));
        let line = match f.status {
            FileStatus::Added => paint("32", format!("+ file {} ({})", f.path, size(f.new_len))),
            FileStatus::Removed => paint("31", format!("- file {} ({})", f.path, size(f.old_len))),
            FileStatus::Changed => {
                paint("33", format!("~ file {}: {} -> {}", f.path, size(f.old_len), size(f.new_len)))
            }
        };
        let _ = writeln!(s, "{line}");
        match &f.unified {
            Some(u) => {
                unified(&mut s, u, &paint);
                if f.lines_left_out > 0 {
                    let _ = writeln!(s, "  ... {} more line(s) of this diff", f.lines_left_out);
                }
            }
            None => {
                let h = |x: &Option<String>| x.as_deref().map_or("(none)".to_string(), |x| x[..16].to_string());
                let _ = writeln!(s, "  not text: sha256 {} -> {}", h(&f.old_sha256), h(&f.new_sha256));
            }
        }
    }
    if full {
        unified(&mut s, &d.header_unified, &paint);
    }
    s
}

/// A unified diff's lines, coloured as `git diff` colours them.
/// An array's type as the diffs show it: `dtype[shape]`.
pub(super) fn type_text(dtype: &str, shape: &[u64]) -> String {
    format!("{dtype}[{}]", if shape.is_empty() { String::new() } else { shape_str(shape) })
}

fn unified(s: &mut String, text: &str, paint: &dyn Fn(&str, String) -> String) {
    use std::fmt::Write as _;
    for l in text.lines() {
        let l = match l.chars().next() {
            Some('+') if !l.starts_with("+++") => paint("32", l.to_string()),
            Some('-') if !l.starts_with("---") => paint("31", l.to_string()),
            Some('@') => paint("36", l.to_string()),
            _ => l.to_string(),
        };
        let _ = writeln!(s, "{l}");
    }
}

/// Sorted indices as half-open runs of consecutive ones.
fn runs(ix: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &i in ix {
        match out.last_mut() {
            Some(r) if r.1 == i => r.1 = i + 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

/// Ranges a diff line shows before it folds the rest into a count.
const SHOWN_RANGES: usize = 8;

/// `a,b-c,...`: at most [`SHOWN_RANGES`] half-open ranges, then how many
/// more (`, +N more`, or `, ...` when whoever built the list left some
/// out), so that a change that touches thousands of chunks stays a short
/// line (`--json` lists up to [`crate::git::diff::MAX_RANGES`]).
fn ranges_text(ranges: &[(u64, u64)], more: bool) -> String {
    let shown = ranges.len().min(SHOWN_RANGES);
    let mut s = ranges[..shown]
        .iter()
        .map(|(x, y)| if y - x == 1 { x.to_string() } else { format!("{x}-{}", y - 1) })
        .collect::<Vec<_>>()
        .join(",");
    match (ranges.len() - shown, more) {
        (0, false) => {}
        (0, true) => s.push_str(", ..."),
        (n, false) => s.push_str(&format!(", +{n} more")),
        (n, true) => s.push_str(&format!(", +{n} more, ...")),
    }
    s
}

fn short(v: &str) -> String {
    if v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()) {
        format!("{}..", &v[..16])
    } else {
        v.to_string()
    }
}

/// Whether Git's diff driver shows everything (`WTXT_DIFF_FULL=1`), as
/// `wtxt diff --full` does.
fn diff_full() -> bool {
    std::env::var_os("WTXT_DIFF_FULL").is_some_and(|v| v == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_of_changed_chunks_is_shown_as_capped_runs() {
        assert_eq!(ranges_text(&runs(&[0, 1, 2, 5, 7, 8]), false), "0-2,5,7-8");
        let every_other: Vec<u64> = (0..1000).map(|i| 2 * i).collect();
        let text = ranges_text(&runs(&every_other), false);
        assert_eq!(text.split(',').count(), SHOWN_RANGES + 1, "{text}");
        assert!(text.ends_with(&format!("{}, +{} more", 2 * (SHOWN_RANGES - 1), 1000 - SHOWN_RANGES)), "{text}");
        assert_eq!(ranges_text(&[(3, 4)], true), "3, ...");
    }
}
