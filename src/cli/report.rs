//! The page `wtxt report` writes: one self-contained HTML file (no network,
//! no CDN, nothing loaded from elsewhere) drawing a snapshot path's history:
//! a heat map of how much of each tensor changed in each generation, the
//! chain and signature status of each generation and its size. The map is
//! SVG drawn here, so the page reads without scripts; a short script adds
//! the details of a clicked cell and a filter by tensor name, from the
//! report embedded as JSON. Every name and message comes from the
//! repository, so all of it is escaped (`<` in the JSON too).

use std::fmt::Write as _;

use crate::format::verify::SigStatus;
use crate::git::diff::Status;
use crate::git::history::DataCheck;
use crate::ops::report::{Cell, RunReport};

const CELL_W: usize = 22;
const CELL_H: usize = 16;
const LABEL_W: usize = 360;
const TOP: usize = 96;

/// `s` safe as HTML text and attribute values.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}

/// The colour of a cell: grey unchanged, green added, purple reshaped, a
/// white-to-red ramp by [`Cell::heat`] (the relative change of a float
/// tensor on a log scale).
fn colour(c: &Cell) -> String {
    match c.status {
        Status::Unchanged | Status::Rewrapped => "#e8e8e8".into(),
        Status::Added => "#7fbf7f".into(),
        Status::Reshaped | Status::DtypeChanged => "#7f3fbf".into(),
        _ => {
            let g = (235.0 * (1.0 - c.heat()) + 20.0) as u8;
            format!("#ff{g:02x}{g:02x}")
        }
    }
}

/// How much a changed tensor changed, in words.
fn amount(c: &Cell) -> String {
    match c.rel {
        Some(r) => format!("relative change {r:.2e}, {:.2}% of elements", c.changed * 100.0),
        None => format!("{:.2}% of elements", c.changed * 100.0),
    }
}

fn tip(name: &str, gen: u64, c: &Cell) -> String {
    let what = match c.status {
        Status::Added => "added",
        Status::Removed => "removed",
        Status::Reshaped => "reshaped",
        Status::DtypeChanged => "dtype changed",
        Status::Changed => "changed",
        Status::Rewrapped | Status::Unchanged => "unchanged",
    };
    let mut t = format!("{name}, gen {gen}: {what}");
    if c.status == Status::Changed {
        let _ = write!(t, ", {}", amount(c));
    }
    if let (Some(r), Some(l)) = (c.max_rel, c.l2) {
        let _ = write!(t, ", max rel {r:.3e}, L2 {l:.3e}");
    }
    t
}

/// The most generations (the newest) and tensors (the most changed) a page draws.
const MAX_COLUMNS: usize = 1000;
const MAX_ROWS: usize = 1000;

/// `r` cut to what a page draws, and a line for what was left out.
fn bounded(r: &RunReport) -> (RunReport, Option<String>) {
    let (ng, nt) = (r.generations.len(), r.tensors.len());
    if ng <= MAX_COLUMNS && nt <= MAX_ROWS {
        return (r.clone(), None);
    }
    let first = ng.saturating_sub(MAX_COLUMNS);
    let score = |t: usize| -> f64 { r.cells[t][first.max(1)..].iter().flatten().map(|c| c.heat()).sum() };
    let mut rows: Vec<usize> = (0..nt).collect();
    rows.sort_by(|&a, &b| score(b).partial_cmp(&score(a)).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b)));
    rows.truncate(MAX_ROWS);
    rows.sort_unstable();
    let cut = RunReport {
        path: r.path.clone(),
        generations: r.generations[first..].to_vec(),
        tensors: rows.iter().map(|&t| r.tensors[t].clone()).collect(),
        cells: rows.iter().map(|&t| r.cells[t][first..].to_vec()).collect(),
        ok: r.ok,
    };
    let note = format!(
        "Drawn: the newest {} of {ng} generation(s) and the {} of {nt} tensor(s) that changed most in them.",
        cut.generations.len(),
        cut.tensors.len()
    );
    (cut, Some(note))
}

/// The page: at most 1,000 generations (the newest) by 1,000 tensors (the
/// most changed in them), whatever the history holds.
pub fn html(full: &RunReport) -> String {
    let (cut, note) = bounded(full);
    let r = &cut;
    let (ng, nt) = (r.generations.len(), r.tensors.len());
    let width = LABEL_W + ng * CELL_W + 20;
    let height = TOP + (nt + 4) * CELL_H + 60;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg id=\"map\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"monospace\" font-size=\"11\">"
    );
    let max_bytes = r.generations.iter().map(|g| g.bytes).max().unwrap_or(1).max(1);
    for (j, g) in r.generations.iter().enumerate() {
        let x = LABEL_W + j * CELL_W;
        // Size, as a bar above the column.
        let h = ((g.bytes as f64 / max_bytes as f64) * 40.0).ceil() as usize;
        let _ = write!(
            svg,
            "<rect class=\"size\" x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{h}\" fill=\"#6f8fbf\">\
             <title>gen {}: {} bytes</title></rect>",
            44 - h,
            CELL_W - 2,
            g.gen,
            g.bytes
        );
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" transform=\"rotate(-60 {} {})\">{}</text>",
            x + 6,
            TOP - 34,
            x + 6,
            TOP - 34,
            g.gen
        );
        // Chain and signature, one square each.
        let (chain, chain_tip) = if g.problems.is_empty() {
            ("#3f9f3f", "chain holds".to_string())
        } else {
            ("#cf2f2f", g.problems.join("; "))
        };
        let (sig, sig_tip) = match g.signature {
            SigStatus::Valid => ("#3f9f3f", "signature valid"),
            SigStatus::Absent => ("#bfbfbf", "not signed"),
            SigStatus::Untrusted => ("#dfaf3f", "signed by a key not trusted here"),
            SigStatus::Invalid => ("#cf2f2f", "signature does not verify"),
        };
        let data = match g.data {
            DataCheck::Verified => ", data verified",
            DataCheck::Failed => ", data failed",
            DataCheck::NotVerified => ", data not verified (headers and links only; --verify proves it)",
        };
        for (k, (fill, t)) in [(chain, format!("{chain_tip}{data}")), (sig, sig_tip.to_string())].iter().enumerate() {
            let _ = write!(
                svg,
                "<rect class=\"status\" x=\"{x}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{fill}\">\
                 <title>gen {}: {}</title></rect>",
                TOP - 28 + k * (CELL_H - 2),
                CELL_W - 2,
                CELL_H - 4,
                g.gen,
                esc(t)
            );
        }
    }
    let _ = write!(svg, "<text x=\"4\" y=\"{}\">chain</text>", TOP - 18);
    let _ = write!(svg, "<text x=\"4\" y=\"{}\">signature</text>", TOP - 4);
    let _ = write!(svg, "<text x=\"4\" y=\"30\">size</text>");
    for (i, name) in r.tensors.iter().enumerate() {
        let y = TOP + 8 + i * CELL_H;
        let shown: String = if name.chars().count() > 52 {
            format!("...{}", name.chars().rev().take(49).collect::<Vec<_>>().into_iter().rev().collect::<String>())
        } else {
            name.clone()
        };
        let _ = write!(
            svg,
            "<g class=\"row\" data-row=\"{i}\"><text x=\"4\" y=\"{}\"><title>{}</title>{}</text>",
            y + CELL_H - 4,
            esc(name),
            esc(&shown)
        );
        for (j, c) in r.cells[i].iter().enumerate() {
            let Some(c) = c else { continue };
            let _ = write!(
                svg,
                "<rect class=\"cell\" data-t=\"{i}\" data-g=\"{j}\" x=\"{}\" y=\"{y}\" width=\"{}\" height=\"{}\" \
                 fill=\"{}\"><title>{}</title></rect>",
                LABEL_W + j * CELL_W,
                CELL_W - 2,
                CELL_H - 2,
                colour(c),
                esc(&tip(name, r.generations[j].gen, c))
            );
        }
        svg.push_str("</g>");
    }
    svg.push_str("</svg>");
    let mut most = String::from("<h2>Most changed per generation</h2><ol class=\"top\">");
    for g in r.generations.iter().skip(1) {
        let list: Vec<String> = g.top.iter().map(|(n, c)| format!("{} ({})", esc(n), amount(c))).collect();
        let list = if list.is_empty() { "nothing changed".to_string() } else { list.join(", ") };
        let _ = write!(most, "<li>gen {} ({}): {list}</li>", g.gen, esc(&g.commit[..10.min(g.commit.len())]));
    }
    most.push_str("</ol>");
    // The report for the script; `<` escaped so no text can end the element.
    let data = serde_json::to_string(r).unwrap_or_default().replace('<', "\\u003c");
    let problems: usize = full.generations.iter().map(|g| g.problems.len()).sum();
    let (ng, nt) = (full.generations.len(), full.tensors.len());
    let note = note.map_or(String::new(), |n| format!("<p class=\"note\">{}</p>", esc(&n)));
    let proven = full.generations.iter().all(|g| g.data == DataCheck::Verified);
    let verdict = match (r.ok, proven) {
        (true, true) => "every link, signature and generation's data holds",
        (true, false) => "every link and signature in the headers holds; the data was not verified (--verify)",
        (false, _) => "problems: see the red squares",
    };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; \
         script-src 'unsafe-inline'; img-src data:\">\
         <title>wtxt report: {path}</title><style>{STYLE}</style></head><body>\
         <h1>{path}</h1><p id=\"summary\">{ng} generation(s), {nt} tensor(s), {problems} problem(s): {verdict}.</p>{note}\
         <p class=\"legend\"><span style=\"background:#e8e8e8\">unchanged</span> \
         <span style=\"background:#ffd0d0\">changed little (relative change 1e-6)</span> \
         <span style=\"background:#ff8080\">1e-3</span> \
         <span style=\"background:#ff1414;color:#fff\">changed wholly (1)</span> \
         <span style=\"background:#7fbf7f\">added</span> <span style=\"background:#7f3fbf;color:#fff\">reshaped</span></p>\
         <p><input id=\"filter\" placeholder=\"filter tensors by name\" size=\"40\"></p>\
         <div id=\"detail\">Click a cell for its figures.</div>{svg}{most}\
         <script type=\"application/json\" id=\"data\">{data}</script><script>{SCRIPT}</script></body></html>\n",
        path = esc(&r.path),
    )
}

const STYLE: &str = "body{font-family:sans-serif;margin:16px;color:#222}h1{font-size:18px}\
    .legend span{padding:1px 6px;margin-right:4px;font-size:12px}#detail{font-family:monospace;font-size:12px;\
    min-height:3em;white-space:pre-wrap;margin:6px 0}rect.cell{cursor:pointer}.hidden{display:none}\
    h2{font-size:15px}ol.top{font-family:monospace;font-size:12px}";

const SCRIPT: &str = r#"(function(){
var r=JSON.parse(document.getElementById("data").textContent);
var detail=document.getElementById("detail");
function put(t,g){var c=r.cells[t][g],v=r.generations[g];if(!c){return;}
detail.textContent=r.tensors[t]+"\ngen "+v.gen+" (commit "+v.commit.slice(0,10)+", "+v.ts+"): "+c.status+
(c.status==="rewrapped"?" (same values)":"")+(c.status==="changed"?", "+(c.rel!==null&&c.rel!==undefined?"relative change "+c.rel.toExponential(3)+", ":"")+(c.changed*100).toFixed(3)+"% of elements":"")+
(c.max_rel!==null&&c.max_rel!==undefined?", max rel "+c.max_rel.toExponential(3)+", L2 "+c.l2.toExponential(3):"")+
(v.problems.length?"\nproblems: "+v.problems.join("; "):"");}
Array.prototype.forEach.call(document.querySelectorAll("rect.cell"),function(e){
e.addEventListener("click",function(){put(+e.getAttribute("data-t"),+e.getAttribute("data-g"));});});
document.getElementById("filter").addEventListener("input",function(ev){var q=ev.target.value.toLowerCase();
Array.prototype.forEach.call(document.querySelectorAll("g.row"),function(g){
var n=r.tensors[+g.getAttribute("data-row")].toLowerCase();g.setAttribute("class",n.indexOf(q)<0?"row hidden":"row");});});
document.body.setAttribute("data-ready",String(document.querySelectorAll("rect.cell").length));
})();"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::report::GenerationView;

    /// A history larger than a page draws the newest generations and the
    /// most changed tensors, and says so; names stay text.
    #[test]
    fn a_page_stays_bounded_and_names_stay_text() {
        let gen = |g: u64| GenerationView {
            commit: format!("{g:040x}"),
            summary: String::new(),
            gen: g,
            ts: String::new(),
            signature: SigStatus::Absent,
            data: DataCheck::NotVerified,
            problems: Vec::new(),
            bytes: 10,
            top: Vec::new(),
        };
        let (ng, nt) = (MAX_COLUMNS + 2, MAX_ROWS + 5);
        let changed = |f: f64| Some(Cell { status: Status::Changed, changed: f, max_rel: None, l2: None, rel: None });
        let r = RunReport {
            path: "m.wtxt".into(),
            generations: (0..ng as u64).map(gen).collect(),
            tensors: (0..nt)
                .map(|t| if t == nt - 1 { "<img src=x onerror=alert(1)>".into() } else { format!("t{t}") })
                .collect(),
            // Tensor t changes by t / nt each generation: the last ones most.
            cells: (0..nt).map(|t| (0..ng).map(|_| changed(t as f64 / nt as f64)).collect()).collect(),
            ok: true,
        };
        let page = html(&r);
        assert!(page.contains(&format!(
            "Drawn: the newest {MAX_COLUMNS} of {ng} generation(s) and the {MAX_ROWS} of {nt} tensor(s)"
        )));
        assert_eq!(page.matches("<g class=\"row\"").count(), MAX_ROWS);
        assert!(!page.contains(">t1<") && page.contains(&format!(">t{}<", nt - 2)), "the least changed are left out");
        assert!(!page.contains("<img") && page.contains("&lt;img src=x onerror=alert(1)&gt;"));
    }
}
