//! Walking a folder's regular files, bounded and without following links.

use std::path::Path;

use crate::error::{Error, Result};

/// Most files a folder may hold for [`list_files`]: bounds the heap
/// whatever the folder holds.
pub const MAX_FILES: usize = 1 << 20;

/// The regular files below `root` (relative `/`-separated paths, sorted
/// component by component), but the ignored paths (a path is ignored when
/// it is one of `ignore` or lies below one). A link or special file is
/// refused, never followed or read.
pub fn list_files(root: &Path, ignore: &[String]) -> Result<Vec<String>> {
    let mut files = Vec::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let path = if dir.is_empty() { root.to_path_buf() } else { root.join(&dir) };
        let entries = std::fs::read_dir(&path).map_err(|e| Error::io(&path, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&path, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                return Err(Error::input(Default::default(), "a file name that is not UTF-8").in_file(entry.path()));
            };
            let rel = if dir.is_empty() { name.to_string() } else { format!("{dir}/{name}") };
            if is_ignored(&rel, ignore) {
                continue;
            }
            let ty = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
            if ty.is_dir() {
                stack.push(rel);
            } else if ty.is_file() {
                if files.len() == MAX_FILES {
                    return Err(Error::input(Default::default(), format!("more than {MAX_FILES} files")).in_file(root));
                }
                files.push(rel);
            } else {
                let what = if ty.is_symlink() {
                    "a symbolic link (wtxt does not follow links)"
                } else {
                    "not a regular file or folder"
                };
                return Err(Error::input(Default::default(), what).in_file(entry.path()));
            }
        }
    }
    files.sort_by(|a, b| a.split('/').cmp(b.split('/')));
    Ok(files)
}

/// True when the relative path `rel` is one of `ignore` or lies below one
/// (path components compared, as Python's `PurePath.is_relative_to`).
pub fn is_ignored(rel: &str, ignore: &[String]) -> bool {
    ignore.iter().any(|i| {
        let i = i.trim_end_matches('/');
        rel == i || rel.strip_prefix(i).is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Refuses `rel` below `root` when any component of it that exists is a
/// symbolic link (every folder on the way, and the file itself), or a
/// folder on the way is not a folder: a path inside a Git work tree is the
/// repository's to choose, and a committed link would send a write (or a
/// read) outside it. `root` itself is the caller's.
pub fn no_links_below(root: &Path, rel: &Path) -> Result<()> {
    let mut at = root.to_path_buf();
    let mut components = rel.components().peekable();
    while let Some(c) = components.next() {
        at.push(c);
        let Ok(m) = std::fs::symlink_metadata(&at) else { return Ok(()) };
        if m.file_type().is_symlink() {
            return Err(Error::input(Default::default(), "a symbolic link (wtxt does not follow links)").in_file(&at));
        }
        if components.peek().is_some() && !m.is_dir() {
            return Err(Error::input(Default::default(), "expected a folder").in_file(&at));
        }
    }
    Ok(())
}

/// True when `dir` is a folder itself, not a link to one.
pub fn is_real_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
}
