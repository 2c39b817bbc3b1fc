//! The command line's behaviour as data: every `tests/cmd/*.case` file is a
//! list of `wtxt` runs with what each must do, read and checked here.
//!
//! A case file is lines:
//! - `# text`: a comment;
//! - `$ wtxt ARGS`: a run, from `fixtures/wtxt` with a clean environment
//!   (arguments split on spaces; `"..."` keeps spaces; `$TMP` is a folder
//!   of the file's own, empty at its start);
//! - `env NAME=VALUE`: set for the next run only;
//! - `? CODE`: the exit code it must give (0 unless said);
//! - `> TEXT`: its stdout must contain TEXT (`>^ TEXT`: start with it);
//! - `! TEXT`: its stderr must contain TEXT;
//! - `file PATH`: PATH (under `$TMP`) must exist after the run, `nofile
//!   PATH` must not.

use std::path::Path;

use crate::util::wtxt;

/// One run and what it must do.
#[derive(Default)]
struct Run {
    line: usize,
    args: Vec<String>,
    env: Vec<(String, String)>,
    code: i32,
    checks: Vec<(usize, Check)>,
}

enum Check {
    Stdout(String),
    StdoutStarts(String),
    Stderr(String),
    File(String, bool),
}

/// `line` split into arguments: on spaces, `"..."` kept whole.
fn split_args(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

fn parse(text: &str, file: &str) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut env = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end();
        let last = runs.last_mut();
        if line.is_empty() || line.starts_with('#') {
            continue;
        } else if let Some(cmd) = line.strip_prefix("$ wtxt") {
            runs.push(Run { line: n, args: split_args(cmd.trim()), env: std::mem::take(&mut env), ..Run::default() });
        } else if let Some(kv) = line.strip_prefix("env ") {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("{file}:{n}: env NAME=VALUE"));
            env.push((k.to_string(), v.to_string()));
        } else {
            let run = last.unwrap_or_else(|| panic!("{file}:{n}: a check before any `$ wtxt` line"));
            let check = if let Some(c) = line.strip_prefix("? ") {
                run.code = c.trim().parse().unwrap_or_else(|_| panic!("{file}:{n}: `? CODE`"));
                continue;
            } else if let Some(t) = line.strip_prefix(">^ ") {
                Check::StdoutStarts(t.to_string())
            } else if let Some(t) = line.strip_prefix("> ") {
                Check::Stdout(t.to_string())
            } else if let Some(t) = line.strip_prefix("! ") {
                Check::Stderr(t.to_string())
            } else if let Some(p) = line.strip_prefix("file ") {
                Check::File(p.to_string(), true)
            } else if let Some(p) = line.strip_prefix("nofile ") {
                Check::File(p.to_string(), false)
            } else {
                panic!("{file}:{n}: not a case line: {line}");
            };
            run.checks.push((n, check));
        }
    }
    runs
}

/// Runs every run of one case file; gives what failed, each naming its line.
fn check_file(path: &Path) -> Vec<String> {
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let tmp_s = tmp.path().to_str().unwrap().to_string();
    let mut failed = Vec::new();
    for run in parse(&text, &name) {
        let args: Vec<String> = run.args.iter().map(|a| a.replace("$TMP", &tmp_s)).collect();
        let mut cmd = wtxt();
        cmd.args(&args);
        for (k, v) in &run.env {
            cmd.env(k, v.replace("$TMP", &tmp_s));
        }
        let o = cmd.output().unwrap();
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        let at = |n: usize, what: String| format!("{name}:{n}: wtxt {}: {what}", args.join(" "));
        if o.status.code() != Some(run.code) {
            failed.push(at(run.line, format!("exit {:?}, expected {}; stderr: {err}", o.status.code(), run.code)));
        }
        for (n, c) in &run.checks {
            let bad = match c {
                Check::Stdout(t) => (!out.contains(t.as_str())).then(|| format!("stdout lacks `{t}`: {out}")),
                Check::StdoutStarts(t) => {
                    (!out.starts_with(t.as_str())).then(|| format!("stdout does not start with `{t}`: {out}"))
                }
                Check::Stderr(t) => (!err.contains(t.as_str())).then(|| format!("stderr lacks `{t}`: {err}")),
                Check::File(p, want) => {
                    let exists = Path::new(&p.replace("$TMP", &tmp_s)).exists();
                    (exists != *want).then(|| format!("{p} {}", if *want { "is missing" } else { "exists" }))
                }
            };
            failed.extend(bad.map(|b| at(*n, b)));
        }
    }
    failed
}

#[test]
fn the_command_line_does_what_its_case_files_say() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cmd");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|p| p.extension().is_some_and(|x| x == "case"));
    files.sort();
    assert!(files.len() >= 4, "case files in {}", dir.display());
    let failed: Vec<String> = files.iter().flat_map(|f| check_file(f)).collect();
    assert!(failed.is_empty(), "{} check(s) failed:\n{}", failed.len(), failed.join("\n"));
}

#[test]
fn a_check_that_does_not_hold_is_reported_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("wrong.case");
    std::fs::write(&p, "# a case that must fail\n$ wtxt verify expected/defaults.wtxt\n? 1\n> NOT THERE\n").unwrap();
    let failed = check_file(&p);
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(failed[0].starts_with("wrong.case:2: wtxt verify expected/defaults.wtxt: exit Some(0), expected 1"));
    assert!(failed[1].starts_with("wrong.case:4: "), "{}", failed[1]);
    assert_eq!(split_args(r#"a "b c" "" d"#), ["a", "b c", "", "d"]);
}
