//! The layer rule of docs/ARCHITECTURE.md, checked on the source: each
//! module of the library names only the modules its layer may use.

use std::path::Path;

/// Each top-level module and the modules it must never name (outside
/// comments). The command line (`cli`) sits above all of them; the binary
/// and the Python package only call it.
const NEVER: &[(&str, &[&str])] = &[
    ("cli", &[]),
    ("daemon", &["cli"]),
    ("ops", &["daemon", "cli"]),
    ("git", &["ops", "daemon", "cli"]),
    ("odb", &["ops", "git", "daemon", "oms", "store", "convert", "format", "cli"]),
    ("oms", &["ops", "git", "odb", "daemon", "convert", "cli"]),
    ("convert", &["ops", "git", "odb", "daemon", "oms", "cli"]),
    ("options", &["ops", "git", "odb", "daemon", "oms", "store", "convert", "cli"]),
    ("store", &["ops", "git", "odb", "daemon", "oms", "convert", "cli"]),
    ("format", &["ops", "git", "odb", "daemon", "oms", "store", "options", "convert", "cli"]),
    ("crypto", &["ops", "git", "odb", "daemon", "oms", "store", "options", "convert", "format", "model", "cli"]),
    ("model", &["ops", "git", "odb", "daemon", "oms", "store", "options", "convert", "format", "crypto", "cli"]),
    (
        "buffer",
        &["ops", "git", "odb", "daemon", "oms", "store", "options", "convert", "format", "crypto", "model", "cli"],
    ),
    ("fs", &["ops", "git", "odb", "daemon", "oms", "store", "options", "convert", "format", "crypto", "model", "cli"]),
    (
        "error",
        &["ops", "git", "odb", "daemon", "oms", "store", "options", "convert", "format", "crypto", "model", "cli"],
    ),
    (
        "limits",
        &[
            "ops", "git", "odb", "daemon", "oms", "store", "options", "convert", "format", "crypto", "model", "fs",
            "cli",
        ],
    ),
    (
        "pipe",
        &["ops", "git", "odb", "daemon", "oms", "store", "options", "convert", "format", "crypto", "model", "cli"],
    ),
    (
        "progress",
        &["ops", "git", "odb", "daemon", "oms", "store", "options", "convert", "format", "crypto", "model", "cli"],
    ),
];

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_module_names_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (module, never) in NEVER {
        let mut files = Vec::new();
        let dir = src.join(module);
        if dir.is_dir() {
            sources(&dir, &mut files);
        } else {
            files.push(src.join(format!("{module}.rs")));
        }
        assert!(!files.is_empty() && files[0].exists(), "module {module} not found");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                for above in *never {
                    let name = format!("crate::{above}");
                    let at = code.find(&name);
                    let names_it = at.is_some_and(|i| {
                        !code[i + name.len()..].starts_with(|c: char| c == '_' || c.is_alphanumeric())
                    });
                    if names_it {
                        broken.push(format!("{}:{}: {module} names {name}", f.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "layer rule broken (docs/ARCHITECTURE.md):\n{}", broken.join("\n"));
}

/// The front of docs/ARCHITECTURE.md: the modules `src/lib.rs` makes public,
/// and the namespaces below them that stay public. Anything else public
/// below a top module is a room someone outside could come to depend on.
#[test]
fn the_front_is_the_one_the_architecture_lists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let public = |file: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(file).unwrap();
        text.lines().filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';').map(str::to_string)).collect()
    };
    let top = public(&root.join("src/lib.rs"));
    let want = [
        "cli", "convert", "crypto", "daemon", "format", "git", "limits", "model", "oms", "ops", "options", "progress",
        "store",
    ];
    assert_eq!(top, want, "src/lib.rs's public modules differ from docs/ARCHITECTURE.md's front");
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let front = &doc[doc.find("## The front").unwrap()..doc.find("## Layers").unwrap()];
    for m in &top {
        assert!(front.contains(&format!("`{m}`")), "docs/ARCHITECTURE.md's front does not list `{m}`");
    }
    let mut below = Vec::new();
    for m in &top {
        let dir = root.join("src").join(m);
        if dir.is_dir() {
            below.extend(public(&dir.join("mod.rs")).into_iter().map(|s| format!("{m}::{s}")));
        }
    }
    let namespaces = [
        "convert::aero",
        "convert::fold",
        "convert::mldf",
        "convert::npy",
        "convert::npz",
        "convert::safetensors",
        "convert::volp",
        "format::delta",
        "format::split",
        "format::syntax",
    ];
    assert_eq!(below, namespaces, "public modules below the top differ from docs/ARCHITECTURE.md's front");
}

/// The layer rule file by file inside a folder: a file names the sibling
/// that defines what it uses, never its parent's `mod.rs` (`use super::*`,
/// `super::item` or `crate::folder::item` for an item of `mod.rs` rather
/// than a module declared there). A `mod.rs` that children reach is a
/// front and a basement at once, the import that runs back up a floor.
#[test]
fn no_file_reaches_back_up_into_its_folders_mod_rs() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
                dirs.push(p);
            }
        }
    }
    let mut broken = Vec::new();
    for dir in dirs {
        let rel = dir.strip_prefix(&src).unwrap().to_str().unwrap().to_string();
        let Ok(front) = std::fs::read_to_string(dir.join("mod.rs")) else { continue };
        let modules: Vec<&str> = front
            .lines()
            .filter_map(|l| l.trim().split_once("mod ")?.1.strip_suffix(';'))
            .filter(|m| m.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()))
            .collect();
        let own = format!("crate::{}::", rel.replace('/', "::"));
        let mut files = Vec::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && p.join("mod.rs").exists() {
                files.push(p.join("mod.rs"));
            } else if p.extension().is_some_and(|x| x == "rs")
                && !["mod.rs", "tests.rs"].contains(&p.file_name().unwrap().to_str().unwrap())
            {
                files.push(p);
            }
        }
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            // A file's own tests (`mod tests { use super::*; }`) name the file, not its parent.
            let body = text.split("\n#[cfg(test)]").next().unwrap();
            for (n, line) in body.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                let reaches = |prefix: &str| {
                    code.match_indices(prefix).any(|(i, _)| {
                        let rest = &code[i + prefix.len()..];
                        let names: Vec<&str> = match rest.strip_prefix('{') {
                            Some(group) => group.split('}').next().unwrap().split(',').collect(),
                            None => vec![rest],
                        };
                        names.iter().any(|r| {
                            let r = r.trim();
                            let name: String = r.chars().take_while(|c| *c == '_' || c.is_alphanumeric()).collect();
                            r.starts_with('*') || (!name.is_empty() && !modules.contains(&name.as_str()))
                        })
                    })
                };
                if reaches("super::") || reaches(&own) {
                    broken.push(format!("{}:{}: {}", f.display(), n + 1, code));
                }
            }
        }
    }
    assert!(broken.is_empty(), "files reaching back up into their folder's mod.rs:\n{}", broken.join("\n"));
}
