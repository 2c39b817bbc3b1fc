//! `wtxt report`: one self-contained page of a snapshot path's history in a
//! real Git repository, drawn by a real headless browser (Chromium): every
//! tensor's change per generation, the chain and signature status; names
//! from the repository are shown as text, never run.

use std::path::Path;
use std::process::Command;

use crate::util::{fixture, git_ok, wtxt};

/// The headless browser, when this machine has one (`.ci/run` installs it).
fn browser() -> Option<&'static str> {
    let found = ["chromium-headless-shell", "chromium", "chromium-browser"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()));
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI installs chromium-headless-shell for this test");
        eprintln!("no headless Chromium here: the page is checked as text only");
    }
    found
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A `.safetensors` of f32 tensors under any names, as the format writes it.
fn safetensors(path: &Path, tensors: &[(&str, Vec<u64>, Vec<u8>)]) {
    let (mut header, mut data) = (serde_json::Map::new(), Vec::new());
    for (name, shape, bytes) in tensors {
        let at = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [at, data.len()]}),
        );
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    std::fs::write(path, out).unwrap();
}

/// Snapshots `tensors` to `out` with the extra arguments.
fn snapshot(d: &Path, name: &str, tensors: &[(&str, Vec<u64>, Vec<u8>)], extra: &[&str]) -> std::path::PathBuf {
    let input = d.join(format!("{name}.safetensors"));
    safetensors(&input, tensors);
    let out = d.join(format!("{name}.wtxt"));
    let o = wtxt().arg("snapshot").arg(&input).arg("-o").arg(&out).args(extra).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

#[test]
fn a_page_of_the_history_drawn_by_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "-b", "main", "repo"]);
    let repo = d.join("repo");
    let hostile = "</script><script>document.title='owned'</script><b id=\"x\">";
    let mut w0: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let mut w1: Vec<f32> = vec![1.0; 16];
    let key = fixture("keys/sign.pem");
    let mut prev: Option<std::path::PathBuf> = None;
    for g in 0..3u32 {
        match g {
            1 => w0[5] += 1.0,                          // one element of 64
            2 => w1.iter_mut().for_each(|x| *x += 0.5), // all 16
            _ => {}
        }
        let arrays = [
            ("layer.0.w", vec![8, 8], floats(&w0)),
            ("layer.1.w", vec![16], floats(&w1)),
            (hostile, vec![2], floats(&[0.0, 0.0])),
        ];
        let (p, t) = (prev.as_ref().map(|x| x.display().to_string()), fixture("keys/trusted_keys"));
        let mut extra = vec!["--sign-key", key.to_str().unwrap(), "--ts", "2026-05-01T00:00:00Z"];
        match &p {
            Some(p) => extra.extend(["--prev", p, "--trusted-keys", t.to_str().unwrap()]),
            None => extra.extend(["--gen", "0"]),
        }
        let s = snapshot(d, &format!("g{g}"), &arrays, &extra);
        std::fs::copy(&s, repo.join("m.wtxt")).unwrap();
        git_ok(&repo, &["add", "m.wtxt"]);
        git_ok(&repo, &["commit", "-q", "-m", &format!("gen {g}")]);
        prev = Some(s);
    }
    let page = d.join("report.html");
    let trusted = fixture("keys/trusted_keys");
    let o = wtxt()
        .current_dir(&repo)
        .args(["report", "m.wtxt", "-o"])
        .arg(&page)
        .arg("--trusted-keys")
        .arg(&trusted)
        .arg("--verify")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing is fetched, and the policy forbids it.
    assert!(!html.contains("http://") || html.matches("http://").all(|_| html.contains("http://www.w3.org/2000/svg")));
    assert!(!html.contains("https://") && !html.contains(" src=") && html.contains("default-src 'none'"));
    // Names are text: the only scripts are the page's own two.
    assert_eq!(html.matches("<script").count(), 2, "{html}");
    assert!(html.contains("&lt;/script&gt;&lt;script&gt;"));
    // Three generations; cells: 3 tensors in gen 0, each after it.
    assert!(html.contains("3 generation(s), 3 tensor(s), 0 problem(s)"), "{html}");
    // Relative change: L2 of the difference over L2 of the new values
    // (1 / sqrt(85355) for one element of 0..64 raised by 1; 2 / 6 for
    // sixteen ones raised by a half).
    assert!(html.contains("layer.0.w, gen 1: changed, relative change 3.42e-3, 1.56% of elements"), "{html}");
    assert!(html.contains("layer.1.w, gen 2: changed, relative change 3.33e-1, 100.00% of elements"), "{html}");
    assert!(html.contains("signature valid") && html.contains("data verified"));

    assert!(
        html.contains("<li>gen 2 (")
            && html.contains("): layer.1.w (relative change 3.33e-1, 100.00% of elements)</li>"),
        "{html}"
    );

    if let Some(b) = browser() {
        let url = format!("file://{}", page.display());
        let run = |extra: &[&str]| {
            let o = Command::new(b)
                .args(["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"])
                .args(extra)
                .arg(&url)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            assert!(o.status.success(), "{err}");
            // No console errors: an exception in the page's script shows here.
            assert!(!err.contains("Uncaught") && !err.contains(":CONSOLE"), "{err}");
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let dom = run(&["--dump-dom"]);
        // The page's script ran over all 9 cells, and nothing of the names did.
        assert!(dom.contains("data-ready=\"9\""), "{dom}");
        assert!(dom.contains("<title>wtxt report: m.wtxt</title>") && !dom.contains("<b id=\"x\">"), "{dom}");
        // The screenshot shows the heat map: the most changed cell's red
        // (relative change 1/3 on the log scale) and the added cells' green.
        let shot = d.join("shot.png");
        run(&["--window-size=900,500", &format!("--screenshot={}", shot.display())]);
        let px = png_pixels(&std::fs::read(&shot).unwrap());
        let count = |rgb: [u8; 3]| px.iter().filter(|p| **p == rgb).count();
        let g = (235.0 * (1.0 - ((1.0f64 / 3.0).log10() + 6.0) / 6.0) + 20.0) as u8;
        assert!(count([0xff, g, g]) >= 200, "the most changed cell is drawn");
        assert!(count([0x7f, 0xbf, 0x7f]) >= 3 * 200, "the added cells are drawn");
    }

    // A broken chain shows, and the command says so (exit 1).
    let s = snapshot(d, "broken", &[("layer.0.w", vec![8, 8], floats(&w0))], &["--gen", "7"]);
    std::fs::copy(&s, repo.join("m.wtxt")).unwrap();
    git_ok(&repo, &["commit", "-q", "-am", "broken"]);
    let o = wtxt().current_dir(&repo).args(["report", "m.wtxt", "-o"]).arg(&page).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("broken link"), "{html}");
    // Without --verify the page never claims the data holds.
    assert!(html.contains("data not verified") && !html.contains("data verified"), "{html}");
}

/// The RGB pixels of an 8-bit RGB or RGBA PNG (what Chromium writes).
fn png_pixels(png: &[u8]) -> Vec<[u8; 3]> {
    use std::io::Read;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (mut at, mut idat, mut dims) = (8, Vec::new(), (0usize, 0usize, 0usize));
    while at + 8 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
        let (kind, body) = (&png[at + 4..at + 8], &png[at + 8..at + 8 + len]);
        match kind {
            b"IHDR" => {
                let w = u32::from_be_bytes(body[0..4].try_into().unwrap()) as usize;
                let h = u32::from_be_bytes(body[4..8].try_into().unwrap()) as usize;
                assert_eq!((body[8], body[12]), (8, 0), "8-bit, not interlaced");
                dims = (w, h, if body[9] == 6 { 4 } else { 3 });
            }
            b"IDAT" => idat.extend_from_slice(body),
            _ => {}
        }
        at += 12 + len;
    }
    let (w, h, bpp) = dims;
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..]).read_to_end(&mut raw).unwrap();
    let stride = w * bpp;
    let mut out = vec![0u8; h * stride];
    for y in 0..h {
        let (filter, line) = (raw[y * (stride + 1)], &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)]);
        for x in 0..stride {
            let a = if x >= bpp { out[y * stride + x - bpp] as i32 } else { 0 };
            let b = if y > 0 { out[(y - 1) * stride + x] as i32 } else { 0 };
            let c = if x >= bpp && y > 0 { out[(y - 1) * stride + x - bpp] as i32 } else { 0 };
            let pred = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => (a + b) / 2,
                4 => {
                    let p = a + b - c;
                    let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                f => panic!("PNG filter {f}"),
            };
            out[y * stride + x] = (line[x] as i32 + pred) as u8;
        }
    }
    out.chunks(bpp).map(|p| [p[0], p[1], p[2]]).collect()
}
