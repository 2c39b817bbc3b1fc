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
