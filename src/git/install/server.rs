//! `wtxt git install --server`: what a bare repository a host serves
//! needs beside the guard's hook (Git's own object checks, no delta search
//! over parts, the guard's LFS store), written or printed.

use std::path::{Path, PathBuf};

use git2::Repository;

use super::{calling, put_hooks, remove_block, remove_hooks, shell_word, write_block, SERVER_HOOK};
use crate::error::{Error, Result};
use crate::odb::git_err;

/// `wtxt git install --server`: the guard's `pre-receive` hook, calling the
/// `wtxt` at `exe`, in the bare repository around `dir` (or, with
/// `uninstall`, that hook removed). Returns the hook's path.
pub fn server(dir: &Path, exe: &Path, lfs_objects: Option<&Path>, uninstall: bool) -> Result<PathBuf> {
    let (repo, hooks) = server_repo(dir)?;
    let attributes = repo.path().join("info/attributes");
    if uninstall {
        remove_hooks(&hooks, ["pre-receive"])?;
        remove_block(&attributes)?;
    } else {
        let mut cfg = repo.config().and_then(|c| c.open_level(git2::ConfigLevel::Local)).map_err(git_err)?;
        for (key, value) in SERVER_CONFIG {
            cfg.set_str(key, value).map_err(git_err)?;
        }
        if let Some(store) = lfs_objects {
            let store = lfs_store(store)?;
            cfg.set_str(LFS_OBJECTS_KEY, &store.display().to_string()).map_err(git_err)?;
        }
        write_block(&attributes, SERVER_ATTRIBUTES)?;
        put_hooks(&hooks, &[("pre-receive", server_hook(exe))])?;
    }
    Ok(hooks.join("pre-receive"))
}

/// The setting that names the LFS server's object store to the guard.
const LFS_OBJECTS_KEY: &str = "wtxt.lfsObjects";

/// `--lfs-objects DIR` as the guard will read it: an existing folder, by
/// its absolute path (the hook runs in the repository, not where install ran).
fn lfs_store(dir: &Path) -> Result<PathBuf> {
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    if !meta.is_dir() {
        return Err(Error::usage(format!("--lfs-objects {}: not a folder", dir.display())));
    }
    std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))
}

/// What `--server` writes in the bare repository's `info/attributes`:
/// no delta search over parts when Git packs them for a clone or a fetch.
/// A part's bytes change wholly where they change at all (each is a run of
/// arrays' base64), so the search finds nothing and costs most of a
/// clone's time; a delta wtxt stored is still sent as it is.
pub const SERVER_ATTRIBUTES: &str = "*.wtxtpart -delta";

/// What `--server --manual` prints: the configuration and the hook
/// `--server` would write in the bare repository at `dir`, nothing written.
pub fn describe_server(dir: &Path, exe: &Path, lfs_objects: Option<&Path>) -> Result<String> {
    let (repo, hooks) = server_repo(dir)?;
    let mut s = String::from("# Git configuration of the bare repository:\n");
    for (key, value) in SERVER_CONFIG {
        s.push_str(&format!("git config --local {key} {}\n", shell_word(value)));
    }
    if let Some(store) = lfs_objects {
        let store = lfs_store(store)?.display().to_string();
        s.push_str(&format!("git config --local {LFS_OBJECTS_KEY} {}\n", shell_word(&store)));
    }
    s.push_str(&format!("\n# In {}:\n{SERVER_ATTRIBUTES}\n", repo.path().join("info/attributes").display()));
    s.push_str(&format!(
        "\n# Hook {} (an existing hook is kept as pre-receive.wtxt-chained and runs first):\n{}",
        hooks.join("pre-receive").display(),
        server_hook(exe)
    ));
    Ok(s)
}

fn server_hook(exe: &Path) -> String {
    calling(SERVER_HOOK, &shell_word(&exe.display().to_string()))
}

/// The bare repository around `dir` and its hooks folder.
fn server_repo(dir: &Path) -> Result<(Repository, PathBuf)> {
    let repo = Repository::discover(dir)
        .map_err(|e| Error::usage(format!("--server: not in a Git repository: {}", e.message())))?;
    if !repo.is_bare() {
        return Err(Error::usage(
            "--server belongs in the bare repository a host serves (this one has a work tree: `git install` without --server)",
        ));
    }
    let hooks = match repo.config().and_then(|c| c.get_path("core.hooksPath")) {
        Ok(p) if p.is_absolute() => p,
        Ok(p) => repo.path().join(p),
        Err(_) => repo.path().join("hooks"),
    };
    Ok((repo, hooks))
}

/// What `--server` sets in the bare repository's own config, beside the
/// guard: Git itself refuses malformed objects (a tree that names an entry
/// twice, which readers resolve differently) before the guard runs; every
/// push is kept as the pack it came in (no loose objects to deflate
/// again), and partial clones may ask for what they need.
pub const SERVER_CONFIG: [(&str, &str); 4] = [
    ("receive.fsckObjects", "true"),
    ("receive.unpackLimit", "1"),
    ("uploadpack.allowFilter", "true"),
    ("uploadpack.allowAnySHA1InWant", "true"),
];
