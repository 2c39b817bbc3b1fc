//! `wtxt diff --format markdown`: a review of a change as a pull request's
//! page shows it (GitHub-flavoured Markdown): the chain and the signers,
//! the tensors that changed and by how much, the checkpoint folder's text
//! files as line diffs.

use std::fmt::Write as _;

use crate::cli::render::type_text as ty;
use crate::git::diff::Status;
use crate::git::files_diff::FileStatus;
use crate::ops::{Review, Side};

/// Changed tensors listed before the rest are counted only.
const MAX_ROWS: usize = 50;
/// The rows a group of the table keeps at least, however many groups share [`MAX_ROWS`].
const MIN_ROWS_A_GROUP: usize = 10;

/// The review of `r` between the files named `old` and `new`. `full` also
/// lists wtxt's own arrays.
pub fn diff_markdown(r: &Review, old: &str, new: &str, full: bool) -> String {
    let d = &r.diff;
    let mut s = format!("### wtxt diff `{}` → `{}`\n\n", code(old), code(new));
    let signer = |x: &Side| x.keyid.as_ref().map_or("unsigned".to_string(), |k| format!("signed, key `{k}`"));
    let _ = writeln!(s, "| | old | new |\n|---|---|---|");
    let _ = writeln!(s, "| generation | {} | {} |", r.old.gen, r.new.gen);
    let _ = writeln!(s, "| time | {} | {} |", r.old.ts, r.new.ts);
    let _ = writeln!(s, "| signature | {} | {} |", signer(&r.old), signer(&r.new));
    for (what, old, new) in [("step", &r.old.step, &r.new.step), ("epoch", &r.old.epoch, &r.new.epoch)] {
        if old.is_some() || new.is_some() {
            let v = |x: &Option<String>| x.as_deref().map_or(String::new(), code);
            let _ = writeln!(s, "| {what} | {} | {} |", v(old), v(new));
        }
    }
    let chain = if r.continues {
        "the new generation continues the old one's chain (`gen` + 1, `merkle_prev` = its `merkle_this`)"
    } else {
        "**the new file does not continue the old one's chain**"
    };
    let _ = writeln!(s, "\nChain: {chain}. Signatures are checked by `wtxt verify --trusted-keys` (or the hook and the host's guard), not by this diff.\n");
    for x in &d.damage {
        let _ = writeln!(
            s,
            "> **DAMAGED** `{}` line {}: array `{}`: {}\n",
            code(&x.file),
            x.line,
            code(&x.array),
            x.message
        );
    }
    if d.identical {
        s.push_str("Identical.\n");
        return s;
    }
    let internal = |name: &str| name.starts_with("__") || name.starts_with("wtxt.");
    let shown: Vec<_> = d
        .arrays
        .iter()
        .filter(|a| full || !internal(a.shown_name()) && !internal(&a.name))
        .filter(|a| !d.files.iter().any(|f| f.path == a.shown_name()))
        .collect();
    let count = |st: &[Status]| shown.iter().filter(|a| st.contains(&a.status)).count();
    let mut changed: Vec<_> = shown.iter().filter(|a| a.status == Status::Changed).collect();
    let _ = writeln!(
        s,
        "**Tensors:** {} changed, {} added, {} removed, {} reshaped or retyped, {} unchanged.\n",
        changed.len(),
        count(&[Status::Added]),
        count(&[Status::Removed]),
        count(&[Status::Reshaped, Status::DtypeChanged]),
        count(&[Status::Unchanged, Status::Rewrapped]),
    );
    // Largest movers first (relative L2, then elements beyond isclose), in
    // groups by what holds them (a checkpoint's `model.safetensors/`,
    // `optimizer.pt/`), each group's largest shown whatever the cap.
    changed.sort_by(|a, b| movement(b).partial_cmp(&movement(a)).unwrap_or(std::cmp::Ordering::Equal));
    let mut groups: Vec<(&str, Vec<_>)> = Vec::new();
    for a in &changed {
        let g = a.shown_name().split_once('/').map_or("", |(g, _)| g);
        match groups.iter_mut().find(|(name, _)| *name == g) {
            Some((_, list)) => list.push(a),
            None => groups.push((g, vec![a])),
        }
    }
    let cap = MAX_ROWS.div_ceil(groups.len().max(1)).max(MIN_ROWS_A_GROUP);
    for (group, list) in &groups {
        if groups.len() > 1 || !group.is_empty() {
            let _ = writeln!(s, "**`{}`**: {} changed\n", code(group), list.len());
        }
        s.push_str("| tensor | type | elements changed | moved beyond `isclose` | relative L2 | max abs |\n");
        s.push_str("|---|---|---:|---:|---:|---:|\n");
        for a in list.iter().take(cap) {
            let sci = |v: Option<f64>| v.map_or("".to_string(), |v| format!("{v:.2e}"));
            let _ = writeln!(
                s,
                "| `{}` | {} | {} | {} | {} | {} |",
                code(a.shown_name()),
                ty(&a.dtype, &a.shape),
                a.changed_elements,
                a.moved.map_or(String::new(), |m| m.to_string()),
                sci(movement(a).0),
                sci(a.max_abs)
            );
        }
        if list.len() > cap {
            let _ = writeln!(
                s,
                "\n… and {} more changed tensor(s), each moved less (`wtxt diff --json` lists them all).",
                list.len() - cap
            );
        }
        s.push('\n');
    }
    for a in shown
        .iter()
        .filter(|a| matches!(a.status, Status::Added | Status::Removed | Status::Reshaped | Status::DtypeChanged))
    {
        let what = match a.status {
            Status::Added => "added".to_string(),
            Status::Removed => "removed".to_string(),
            _ => format!(
                "was {}",
                ty(a.old_dtype.as_deref().unwrap_or(&a.dtype), a.old_shape.as_deref().unwrap_or(&a.shape))
            ),
        };
        let _ = writeln!(s, "- `{}` {} {what}", code(a.shown_name()), ty(&a.dtype, &a.shape));
    }
    for n in &d.names {
        let _ = writeln!(s, "- names: {n}");
    }
    for f in &d.files {
        let size = |n: Option<u64>| n.map_or(String::new(), |n| format!("{n} bytes"));
        let what = match f.status {
            FileStatus::Added => format!("added ({})", size(f.new_len)),
            FileStatus::Removed => format!("removed ({})", size(f.old_len)),
            FileStatus::Changed => format!("{} → {}", size(f.old_len), size(f.new_len)),
        };
        let _ = writeln!(s, "\n<details><summary><code>{}</code>: {what}</summary>\n", html(&f.path));
        match &f.unified {
            Some(u) => {
                let fence = "`".repeat(longest_run(u, '`').max(2) + 1);
                let _ = writeln!(s, "{fence}diff\n{}{fence}", u.trim_end_matches('\n').to_string() + "\n");
                if f.lines_left_out > 0 {
                    let _ = writeln!(s, "\n… {} more line(s) of this diff", f.lines_left_out);
                }
            }
            None => s.push_str("Not text.\n"),
        }
        s.push_str("\n</details>\n");
    }
    s
}

/// How much a changed tensor moved, the order of the review's table:
/// relative L2 of the difference, then elements beyond `isclose`.
fn movement(a: &crate::git::diff::ArrayDiff) -> (Option<f64>, u64) {
    (a.l2.zip(a.norm.filter(|n| *n > 0.0)).map(|(l, n)| l / n), a.moved.unwrap_or(0))
}

/// `v` safe inside a Markdown code span in a table: no backquote or pipe
/// ends it, no line break splits the row.
fn code(v: &str) -> String {
    v.chars().map(|c| if matches!(c, '`' | '|' | '\n' | '\r') { '?' } else { c }).collect()
}

/// `v` as HTML text.
fn html(v: &str) -> String {
    v.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The longest run of `c` in `v` (a fence must be longer).
fn longest_run(v: &str, c: char) -> usize {
    v.split(|x| x != c).map(str::len).max().unwrap_or(0)
}
