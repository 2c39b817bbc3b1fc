//! `wtxt git install`: wires the diff and merge drivers, optional
//! clean/smudge filters, the attributes and the pre-commit hook into Git;
//! with `--folder DIR`, the model folders kept in the work tree while the
//! repository holds their snapshots (`crate::ops::folders`), and the hooks
//! that keep the two in step.
//!
//! Idempotent: running it twice changes nothing. The attributes (and the
//! folders' lines in `.git/info/exclude`) live in a marked block that is
//! replaced, never duplicated. A hook that `wtxt` did not write is never
//! overwritten: it is kept as `NAME.wtxt-chained` and run first.
//! `--uninstall` reverses all of it.

use std::io::Read;
use std::path::{Path, PathBuf};

use git2::{Config, ConfigLevel, Repository};

use crate::error::{Error, Result};
use crate::fs::write_file;
use crate::git::shell::shell_word;
use crate::odb::git_err;

mod server;
pub use server::{describe_server, server};

/// The hook script (`hooks/pre-commit` in the source tree).
pub const HOOK: &str = include_str!("../../hooks/pre-commit");
/// The script of the hooks that write model folders after Git moved the
/// work tree (`hooks/post-checkout` in the source tree).
pub const FOLDER_HOOK: &str = include_str!("../../hooks/post-checkout");
/// The hooks [`FOLDER_HOOK`] is installed as: every way Git changes the
/// work tree's snapshots (a checkout, a merge, a commit such as `git
/// resolve`'s result, a rebase or amend).
pub const FOLDER_HOOKS: [&str; 4] = ["post-checkout", "post-merge", "post-commit", "post-rewrite"];
/// The hook that runs Git LFS's own (`hooks/lfs` in the source tree),
/// installed with `--lfs` as each of [`LFS_HOOKS`].
pub const LFS_HOOK: &str = include_str!("../../hooks/lfs");
/// The hooks `git lfs install` writes: the pre-push one uploads the LFS
/// objects of what is pushed, the others keep locked files read-only.
pub const LFS_HOOKS: [&str; 4] = ["pre-push", "post-checkout", "post-commit", "post-merge"];
/// The hook a server's bare repository gets (`hooks/pre-receive` in the
/// source tree): [`crate::git::guard`].
pub const SERVER_HOOK: &str = include_str!("../../hooks/pre-receive");
/// Marks a hook `wtxt` wrote.
pub const HOOK_MARK: &str = "wtxt-managed-hook";
/// Set by `--lfs`: parts are Git LFS objects in this repository.
const LFS_KEY: &str = "wtxt.lfs";
const BEGIN: &str = "# >>> wtxt (managed by `wtxt git install`; `wtxt git install --uninstall` removes it)";
const END: &str = "# <<< wtxt";

/// Formats the clean/smudge filter can carry.
pub const FILTER_FORMATS: [&str; 4] = ["safetensors", "npz", "aero", "fold"];

/// The file name extensions a filter format covers.
fn extensions(format: &str) -> &'static [&'static str] {
    match format {
        "fold" => &["fold", "mind"],
        "aero" => &["aero"],
        "npz" => &["npz"],
        _ => &["safetensors"],
    }
}

/// Where to install.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// This repository (`.git/config`).
    Local,
    /// The user (`~/.gitconfig`).
    Global,
    /// The machine (`/etc/gitconfig`).
    System,
}

/// What install writes.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Where the configuration goes.
    pub scope: Scope,
    /// `git config` keys and values set.
    pub config: Vec<(String, String)>,
    /// Settings written only where the scope has none (a value of the
    /// user's is kept), and removed only while they are still ours.
    pub defaults: Vec<(String, String)>,
    /// The attributes file written.
    pub attributes_file: PathBuf,
    /// Its lines.
    pub attributes: Vec<String>,
    /// Local scope: this clone's own attributes file
    /// (`.git/info/attributes`, which wins over `.gitattributes`) and its
    /// lines. The committed `.gitattributes` then says what a clone without
    /// wtxt needs ([`snapshot_attributes`]); this file turns the drivers on here.
    pub clone_attributes: Option<(PathBuf, Vec<String>)>,
    /// The hooks folder (local scope only).
    pub hooks_dir: Option<PathBuf>,
    /// The hooks installed there: name and script.
    pub hooks: Vec<(&'static str, String)>,
    /// Model folders kept in the work tree, their snapshots in the
    /// repository (local scope only; `wtxt.folder`).
    pub folders: Vec<crate::git::folders::Folder>,
    /// The exclude file the folders are listed in (`.git/info/exclude`).
    pub exclude_file: Option<PathBuf>,
    /// File name extensions the installed filters carry.
    pub filtered: Vec<&'static str>,
    /// Parts stored as Git LFS objects (`--lfs`, then `wtxt.lfs`).
    pub lfs: bool,
}

/// What a repository of large snapshots sets where it sets nothing itself
/// (docs/PERFORMANCE.md, "Git at 1 GiB", has the measurements):
/// - caps on Git's own memory: it maps up to 1 GiB of pack per window and
///   caches 96 MiB of delta bases; `git diff` of a 1 GiB split snapshot
///   peaked at 750 MiB, of which its drivers used a few (198 MiB with these);
/// - loose objects stored, not deflated: zlib reaches 46 MB/s on base64 and
///   saves a quarter of it, and `gc` or `push` deflate every object again
///   anyway (a loose object's stream is never reused in a pack): `git add`
///   of a generation, 35 CPU-s -> 6;
/// - packs at zlib level 1 (as fast as Git's zlib goes on base64, 77% of
///   the text) and a delta window of one object: a part's only useful base
///   is the same part's previous version, which sorts next to it; every
///   other candidate costs a failed delta search over 46 MB. `git gc` of
///   two wholly changed 1 GiB generations: 735 CPU-s and 2.2 GB -> 165 and
///   0.4 GB, the pack 2% larger.
///
/// No `pack.packSizeLimit`: `gc` writes reused deltas after the whole
/// objects, so a limit puts a delta in another pack than its base and Git
/// stores it whole again (two generations: 12 deltas became 1, 5 CPU-s 21).
/// `gc` leaves the packs of whole parts wtxt writes as they are instead
/// (their `.keep` files: [`crate::odb::pack`]).
const REPOSITORY_DEFAULTS: [(&str, &str); 6] = [
    ("core.packedGitWindowSize", "32m"),
    ("core.packedGitLimit", "96m"),
    ("core.deltaBaseCacheLimit", "32m"),
    ("core.looseCompression", "0"),
    ("pack.compression", "1"),
    ("pack.window", "1"),
];

/// The diff and merge drivers the `diff=wtxt merge=wtxt` attributes name,
/// each calling the `wtxt` at `exe` (a shell word).
fn drivers(exe: &str) -> Vec<(String, String)> {
    vec![
        ("diff.wtxt.command".to_string(), format!("{exe} git diff-driver")),
        // `git log -p` and `git show` run no external diff: they use textconv.
        ("diff.wtxt.textconv".to_string(), format!("{exe} git textconv")),
        ("merge.wtxt.name".to_string(), "wtxt: three-way merge of WTXT chunks".to_string()),
        ("merge.wtxt.driver".to_string(), format!("{exe} merge %O %A %B -o %A --path %P")),
    ]
}

/// Sets up the diff and merge drivers in `repo`'s own configuration, and
/// this clone's attributes (parts diffed by the driver, as `install`
/// gives a clone), where no level of its configuration names a wtxt diff
/// driver yet: a repository the daemon, a Snapshotter or a trainer
/// integration commits to diffs by tensor without a `wtxt git install`
/// (the committed attributes its commit writes itself:
/// [`ensure_committed_attributes`]). Nothing else `install` does (hooks,
/// filters, pack settings) is done here. Returns true when it wrote them;
/// false too when this process cannot tell where its `wtxt` command is
/// ([`super::shell::command`]), as a driver Git cannot run would break `git
/// diff`.
pub fn drivers_where_unset(repo: &Repository) -> Result<bool> {
    let mut cfg = repo.config().map_err(git_err)?;
    if cfg.snapshot().map_err(git_err)?.get_entry("diff.wtxt.command").is_ok() {
        return Ok(false);
    }
    let Ok(exe) = super::shell::command() else { return Ok(false) };
    let mut local = cfg.open_level(git2::ConfigLevel::Local).map_err(git_err)?;
    for (k, v) in drivers(&shell_word(&exe.display().to_string())) {
        local.set_str(&k, &v).map_err(git_err)?;
    }
    let lfs = local.get_bool(LFS_KEY).unwrap_or(false);
    ensure_block(&repo.path().join("info/attributes"), &snapshot_attributes(false, lfs))?;
    Ok(true)
}

/// Works out what to write for `scope` from the repository around `dir`.
pub fn plan(dir: &Path, scope: Scope, filters: &[String], folders: &[String], lfs: bool, exe: &Path) -> Result<Plan> {
    if !folders.is_empty() && scope != Scope::Local {
        return Err(Error::usage("--folder belongs to one repository: give it without --global or --system"));
    }
    if lfs && scope != Scope::Local {
        return Err(Error::usage("--lfs belongs to one repository: give it without --global or --system"));
    }
    // Installed once with --lfs, kept by every install after.
    let lfs = lfs
        || (scope == Scope::Local
            && Repository::discover(dir).ok().and_then(|r| r.config().ok()?.get_bool(LFS_KEY).ok()) == Some(true));
    let folders = folders.iter().map(|f| crate::git::folders::Folder::new(f)).collect::<Result<Vec<_>>>()?;
    for f in filters {
        if !FILTER_FORMATS.contains(&f.as_str()) {
            return Err(Error::usage(format!("--filter {f}: supported formats: {}", FILTER_FORMATS.join(", "))));
        }
    }
    let w = shell_word(&exe.display().to_string());
    let mut config = drivers(&w);
    // A model folder's snapshot passes through unchanged; a clone without
    // the folder set up hears what writes it.
    config.push(("filter.wtxt-folder.smudge".to_string(), format!("{w} git folder-notice %f")));
    if lfs {
        config.push((LFS_KEY.to_string(), "true".to_string()));
    }
    let mut attributes = snapshot_attributes(false, lfs);
    let mut filtered = Vec::new();
    for f in filters {
        config.push((format!("filter.wtxt-{f}.process"), format!("{w} git filter-process {f}")));
        config.push((format!("filter.wtxt-{f}.required"), "true".to_string()));
        for ext in extensions(f) {
            filtered.push(format!("*.{ext} filter=wtxt-{f} diff=wtxt merge=wtxt"));
        }
    }
    attributes.extend(filtered.iter().cloned());
    let mut exclude_file = None;
    let mut clone_attributes = None;
    let (attributes_file, hooks_dir) = match scope {
        Scope::Local => {
            let repo = Repository::discover(dir)
                .map_err(|e| Error::usage(format!("--local: not in a Git repository: {}", e.message())))?;
            let root = repo.workdir().ok_or_else(|| Error::usage("--local needs a work tree"))?.to_path_buf();
            let hooks = match repo.config().and_then(|c| c.get_path("core.hooksPath")) {
                Ok(p) if p.is_absolute() => p,
                Ok(p) => root.join(p),
                Err(_) => repo.path().join("hooks"),
            };
            exclude_file = Some(repo.path().join("info/exclude"));
            // The drivers for this clone; the committed file for every clone.
            clone_attributes = Some((repo.path().join("info/attributes"), std::mem::take(&mut attributes)));
            attributes = snapshot_attributes(true, lfs);
            attributes.extend(filtered);
            // Every folder set up here, these included: the committed block is written whole.
            let mut all = crate::git::folders::configured(&repo)?;
            all.extend(folders.iter().filter(|f| !all.contains(f)).cloned().collect::<Vec<_>>());
            attributes.extend(all.iter().filter_map(|f| f.attribute()));
            (root.join(".gitattributes"), Some(hooks))
        }
        Scope::Global => {
            let f = match Config::open_default().and_then(|c| c.get_path("core.attributesFile")) {
                Ok(p) => p,
                Err(_) => {
                    let home = std::env::var_os("XDG_CONFIG_HOME")
                        .map(PathBuf::from)
                        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
                        .ok_or_else(|| Error::usage("--global: neither XDG_CONFIG_HOME nor HOME is set"))?;
                    home.join("git/attributes")
                }
            };
            (f, None)
        }
        Scope::System => (PathBuf::from("/etc/gitattributes"), None),
    };
    // Local only: other repositories keep Git's own settings.
    let defaults = match scope {
        Scope::Local => REPOSITORY_DEFAULTS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        _ => Vec::new(),
    };
    Ok(Plan {
        scope,
        config,
        defaults,
        attributes_file,
        attributes,
        clone_attributes,
        hooks: hook_scripts(&w, !folders.is_empty(), lfs),
        hooks_dir,
        folders,
        exclude_file,
        filtered: filters.iter().flat_map(|f| extensions(f).iter().copied()).collect(),
        lfs,
    })
}

/// The hooks to install, each calling the `wtxt` at `exe` (a shell word).
/// With `lfs`, Git LFS's hooks too: a name both need runs Git LFS's
/// first, then the folders'.
fn hook_scripts(exe: &str, folders: bool, lfs: bool) -> Vec<(&'static str, String)> {
    let with_exe = |s: &str| calling(s, exe);
    let mut hooks = vec![("pre-commit", with_exe(HOOK))];
    if folders {
        hooks.extend(FOLDER_HOOKS.iter().map(|&h| (h, with_exe(FOLDER_HOOK))));
    }
    if lfs {
        for name in LFS_HOOKS {
            match hooks.iter_mut().find(|(n, _)| *n == name) {
                Some((_, text)) => {
                    let run = "\"$wtxt\" hook checkout";
                    *text = text.replace(run, &format!("git lfs {name} \"$@\" || exit $?\n{run}"));
                }
                None => hooks.push((name, LFS_HOOK.to_string())),
            }
        }
    }
    hooks
}

/// A hook script calling the `wtxt` at `exe` (a shell word) unless `WTXT` names another.
fn calling(script: &str, exe: &str) -> String {
    script.replace("${WTXT:-wtxt}", &format!("${{WTXT:-{exe}}}"))
}

/// The lines `.git/info/exclude` gets for `folders`: Git never takes a
/// model folder itself, only its snapshot.
fn exclude_lines(folders: &[crate::git::folders::Folder]) -> Vec<String> {
    folders.iter().map(|f| format!("/{}/", f.dir.display())).collect()
}

/// A value as a regular expression that matches only itself (for
/// `git config`'s multi-valued keys).
fn exactly(v: &str) -> String {
    let mut r = String::from("^");
    for c in v.chars() {
        if !c.is_ascii_alphanumeric() {
            r.push('\\');
        }
        r.push(c);
    }
    r.push('$');
    r
}

fn open_config(dir: &Path, scope: Scope) -> Result<Config> {
    match scope {
        Scope::Local => {
            let repo = Repository::discover(dir).map_err(git_err)?;
            repo.config().and_then(|c| c.open_level(ConfigLevel::Local)).map_err(git_err)
        }
        Scope::Global => {
            let path = Config::find_global().or_else(|_| {
                std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(".gitconfig"))
                    .ok_or_else(|| git2::Error::from_str("HOME is not set"))
            });
            Config::open(&path.map_err(git_err)?).map_err(git_err)
        }
        Scope::System => {
            Config::open(&Config::find_system().unwrap_or_else(|_| PathBuf::from("/etc/gitconfig"))).map_err(git_err)
        }
    }
}

/// What `--manual` prints: every change, nothing written.
pub fn describe(p: &Plan) -> String {
    let flag = match p.scope {
        Scope::Local => "--local",
        Scope::Global => "--global",
        Scope::System => "--system",
    };
    let mut s = String::from("# Git configuration:\n");
    if p.lfs {
        s.push_str("git lfs install --local --skip-repo\n");
    }
    for (k, v) in &p.config {
        s.push_str(&format!("git config {flag} {k} {}\n", shell_word(v)));
    }
    for (k, v) in &p.defaults {
        s.push_str(&format!("git config {flag} {k} {} # unless set already\n", shell_word(v)));
    }
    s.push_str(&format!("\n# In {}:\n{BEGIN}\n", p.attributes_file.display()));
    for a in &p.attributes {
        s.push_str(a);
        s.push('\n');
    }
    s.push_str(END);
    s.push('\n');
    if let Some((file, lines)) = &p.clone_attributes {
        s.push_str(&format!("\n# In {} (this clone only):\n{BEGIN}\n", file.display()));
        for a in lines {
            s.push_str(a);
            s.push('\n');
        }
        s.push_str(END);
        s.push('\n');
    }
    for f in &p.folders {
        s.push_str(&format!(
            "git config {flag} --add {} {}\n",
            crate::git::folders::FOLDER_KEY,
            shell_word(&f.dir.display().to_string())
        ));
    }
    if let (Some(x), false) = (&p.exclude_file, p.folders.is_empty()) {
        s.push_str(&format!("\n# In {}:\n{BEGIN}\n", x.display()));
        for l in exclude_lines(&p.folders) {
            s.push_str(&l);
            s.push('\n');
        }
        s.push_str(END);
        s.push('\n');
    }
    if let Some(h) = &p.hooks_dir {
        for (name, text) in &p.hooks {
            s.push_str(&format!(
                "\n# Hook {} (an existing hook is kept as {name}.wtxt-chained and runs first):\n{text}",
                h.join(name).display(),
            ));
        }
    }
    s
}

/// The attributes of snapshot files. `committed`: the lines a repository
/// commits in `.gitattributes`,
/// what every clone needs, with wtxt installed or not. A part is base64 no
/// person reads, and a `diff=wtxt` that a clone has no driver for is
/// diffed as text (hundreds of MB of it for one generation), so parts are
/// `-diff` there; `wtxt git install` turns the semantic diff on in the
/// clone's own `.git/info/attributes` (the lines with `committed` false),
/// which wins. Heads stay text: a few KB a reviewer can read. Committed
/// parts are `linguist-generated` too, so a host's pull-request page folds
/// them and shows the heads.
pub fn snapshot_attributes(committed: bool, lfs: bool) -> Vec<String> {
    vec![
        "*.wtxt text eol=lf diff=wtxt merge=wtxt".to_string(),
        // Parts of split snapshots: diffed chunk by chunk; merged by
        // `wtxt merge` on their heads, so Git never merges one alone.
        // Committed: stored by wtxt whole or as a delta (crate::odb::pack),
        // which `git gc` keeps as they are, never searching again. Not in
        // this clone's own file, so that a push given attributes from an
        // empty tree (crate::git::push) may search against the remote's.
        // With `lfs`: Git holds a pointer, Git LFS the bytes (`-text`:
        // the pointer is stored as it is).
        match (committed, lfs) {
            (true, false) => "*.wtxtpart text eol=lf -diff merge=binary -delta linguist-generated",
            (false, false) => "*.wtxtpart text eol=lf diff=wtxt merge=binary",
            (true, true) => "*.wtxtpart filter=lfs -text -diff merge=binary -delta linguist-generated",
            (false, true) => "*.wtxtpart filter=lfs -text diff=wtxt merge=binary",
        }
        .to_string(),
        "*.wtxtdelta text eol=lf diff".to_string(),
        "*.wsum text eol=lf".to_string(),
    ]
}

/// Puts the committed [`snapshot_attributes`] in the `.gitattributes` at the top of
/// `work` when it has no wtxt block yet (a repository the daemon, a
/// Snapshotter or a distributed save fills, which nobody ran `wtxt git
/// install` in). Returns true when it wrote the file, which the caller
/// then commits.
pub fn ensure_committed_attributes(work: &Path) -> Result<bool> {
    ensure_block(&work.join(".gitattributes"), &snapshot_attributes(true, false))
}

/// Adds `lines` as the wtxt block of the attributes file `path` when it has
/// none; true when it wrote the file.
fn ensure_block(path: &Path, lines: &[String]) -> Result<bool> {
    let old = read_attributes(path)?;
    if old.lines().any(|l| l == BEGIN) {
        return Ok(false);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    write_file(path, with_block(&old, Some(lines)).as_bytes(), 0o644)?;
    Ok(true)
}

/// Sets `lines` as the wtxt block of the attributes file `path`, keeping
/// what else it holds.
fn write_block(path: &Path, lines: &str) -> Result<()> {
    let old = read_attributes(path)?;
    let lines: Vec<String> = lines.lines().map(str::to_string).collect();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    write_file(path, with_block(&old, Some(&lines)).as_bytes(), 0o644)
}

/// Removes the wtxt block of the attributes file `path`, if it has one.
fn remove_block(path: &Path) -> Result<()> {
    let old = read_attributes(path)?;
    if old.lines().any(|l| l == BEGIN) {
        write_file(path, with_block(&old, None).as_bytes(), 0o644)?;
    }
    Ok(())
}

/// Replaces (or removes, with `lines` = None) the marked block in `text`.
fn with_block(text: &str, lines: Option<&[String]>) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for l in text.lines() {
        if l == BEGIN {
            skipping = true;
            continue;
        }
        if skipping {
            if l == END {
                skipping = false;
            }
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    if let Some(lines) = lines {
        out.push_str(BEGIN);
        out.push('\n');
        for l in lines {
            out.push_str(l);
            out.push('\n');
        }
        out.push_str(END);
        out.push('\n');
    }
    out
}

/// Largest attributes file or hook read (Git's own attributes files are a
/// few KB).
const MAX_TEXT: u64 = 1 << 20;

/// The attributes file's text ("" when there is none). A repository's
/// `.gitattributes` is the repository's to set: a symbolic link there
/// (committed, pointing at `~/.ssh/id_ed25519` or `/dev/zero`) is refused,
/// never followed, and a device or FIFO never read.
fn read_attributes(path: &Path) -> Result<String> {
    let bytes = crate::fs::read_small_file(path, MAX_TEXT, crate::fs::Links::Refuse)?.unwrap_or_default();
    String::from_utf8(bytes).map_err(|_| Error::input(Default::default(), "expected text (UTF-8)").in_file(path))
}

/// True when `hook` is a regular file `wtxt` wrote (a link, or anything
/// else, is not ours: it is kept, never read through).
fn is_our_hook(hook: &Path) -> bool {
    crate::fs::read_small_file(hook, MAX_TEXT, crate::fs::Links::Refuse)
        .is_ok_and(|t| t.is_some_and(|t| memchr::memmem::find(&t, HOOK_MARK.as_bytes()).is_some()))
}

/// Writes the plan.
/// Wires everything in; then, inside a repository, checks out again the
/// filtered files its work tree holds in clean form (returned).
pub fn install(dir: &Path, p: &Plan) -> Result<Vec<String>> {
    let mut cfg = open_config(dir, p.scope)?;
    for (k, v) in &p.config {
        cfg.set_str(k, v).map_err(git_err)?;
    }
    for (k, v) in &p.defaults {
        if cfg.get_entry(k).is_err() {
            cfg.set_str(k, v).map_err(git_err)?;
        }
    }
    let old = read_attributes(&p.attributes_file)?;
    if let Some(parent) = p.attributes_file.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    write_file(&p.attributes_file, with_block(&old, Some(&p.attributes)).as_bytes(), 0o644)?;
    if let Some((file, lines)) = &p.clone_attributes {
        let old = read_attributes(file)?;
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        write_file(file, with_block(&old, Some(lines)).as_bytes(), 0o644)?;
    }
    for f in &p.folders {
        let v = f.dir.display().to_string();
        cfg.set_multivar(crate::git::folders::FOLDER_KEY, &exactly(&v), &v).map_err(git_err)?;
    }
    if let (Some(x), false) = (&p.exclude_file, p.folders.is_empty()) {
        let mut lines = exclude_lines(&crate::git::folders::configured(&Repository::discover(dir).map_err(git_err)?)?);
        lines.sort();
        lines.dedup();
        let old = read_attributes(x)?;
        if let Some(parent) = x.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        write_file(x, with_block(&old, Some(&lines)).as_bytes(), 0o644)?;
    }
    if p.lfs {
        // Git LFS's filter in this repository's configuration; its hooks are
        // among ours, so that neither replaces the other's.
        crate::odb::lfs::install_client(dir)?;
    }
    if let Some(h) = &p.hooks_dir {
        put_hooks(h, &p.hooks)?;
    }
    smudge_clean_files(dir, &p.filtered)
}

/// Writes each hook into `dir`; a hook there that is not ours is kept as
/// `NAME.wtxt-chained` (which ours runs first).
fn put_hooks(dir: &Path, hooks: &[(&str, String)]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for (name, text) in hooks {
        let hook = dir.join(name);
        let chained = dir.join(format!("{name}.wtxt-chained"));
        if std::fs::symlink_metadata(&hook).is_ok() && !is_our_hook(&hook) {
            if std::fs::symlink_metadata(&chained).is_ok() {
                return Err(Error::usage(format!(
                    "{} is not wtxt's and {} exists already: merge them by hand",
                    hook.display(),
                    chained.display()
                )));
            }
            std::fs::rename(&hook, &chained).map_err(|e| Error::io(&hook, e))?;
        }
        write_file(&hook, text.as_bytes(), 0o755)?;
    }
    Ok(())
}

/// Removes the hooks of `names` that are ours from `dir`, putting back the
/// ones they replaced.
fn remove_hooks<'a>(dir: &Path, names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    for name in names {
        let hook = dir.join(name);
        let chained = dir.join(format!("{name}.wtxt-chained"));
        if is_our_hook(&hook) {
            std::fs::remove_file(&hook).map_err(|e| Error::io(&hook, e))?;
            if chained.exists() {
                std::fs::rename(&chained, &hook).map_err(|e| Error::io(&chained, e))?;
            }
        }
    }
    Ok(())
}

/// Files a filter now carries that the work tree holds in clean form (WTXT
/// text where the binary belongs: the repository was cloned before the
/// filter was installed) are checked out again through the filter, as `git
/// lfs install` followed by a checkout would. Only files exactly as
/// committed are touched; an edited one is left alone.
fn smudge_clean_files(dir: &Path, exts: &[&str]) -> Result<Vec<String>> {
    let Ok(repo) = Repository::discover(dir) else { return Ok(Vec::new()) };
    let Some(work) = repo.workdir().map(Path::to_path_buf) else { return Ok(Vec::new()) };
    let index = repo.index().map_err(git_err)?;
    let mut stale = Vec::new();
    for e in index.iter() {
        let path = String::from_utf8_lossy(&e.path).into_owned();
        let ext = Path::new(&path).extension().and_then(|x| x.to_str()).unwrap_or("").to_ascii_lowercase();
        if !exts.contains(&ext.as_str()) {
            continue;
        }
        // By its first bytes, then by its object name (hashed as a stream):
        // a filtered file can be large, and is never read whole here.
        // A regular file only: a committed link is not followed, a device not read.
        let file = work.join(&path);
        if !std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let mut start = [0u8; 7];
        let wtxt = crate::fs::open_no_follow(&file).and_then(|mut f| f.read_exact(&mut start)).is_ok()
            && &start == b"WTXT 1\n";
        if wtxt && git2::Oid::hash_file(git2::ObjectType::Blob, &file).is_ok_and(|id| id == e.id) {
            stale.push(path);
        }
    }
    if stale.is_empty() {
        return Ok(stale);
    }
    for p in &stale {
        std::fs::remove_file(work.join(p)).map_err(|e| Error::io(work.join(p), e))?;
    }
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(&work)
        // Index paths, never patterns: a file named `:!x.npz` is that file.
        .args(["--literal-pathspecs", "checkout", "--"])
        .args(&stale)
        .output()
        .map_err(|e| Error::io_in("git checkout", e))?;
    if !o.status.success() {
        return Err(Error::input(
            Default::default(),
            format!("git checkout of the filtered files failed: {}", String::from_utf8_lossy(&o.stderr).trim()),
        ));
    }
    Ok(stale)
}

/// Reverses `install`.
pub fn uninstall(dir: &Path, p: &Plan) -> Result<()> {
    let mut cfg = open_config(dir, p.scope)?;
    let ours = p.defaults.iter().filter(|(k, v)| cfg.get_string(k).is_ok_and(|have| have == *v));
    let ours: Vec<_> = ours.cloned().collect();
    for (k, _) in p.config.iter().chain(&ours) {
        match cfg.remove(k) {
            Ok(()) => {}
            Err(e) if e.code() == git2::ErrorCode::NotFound => {}
            Err(e) => return Err(git_err(e)),
        }
    }
    let old = read_attributes(&p.attributes_file)?;
    if !old.is_empty() {
        let new = with_block(&old, None);
        if new.trim().is_empty() && p.scope == Scope::Local {
            std::fs::remove_file(&p.attributes_file).map_err(|e| Error::io(&p.attributes_file, e))?;
        } else if new != old {
            write_file(&p.attributes_file, new.as_bytes(), 0o644)?;
        }
    }
    for x in p.exclude_file.iter().chain(p.clone_attributes.as_ref().map(|(f, _)| f)) {
        let old = read_attributes(x)?;
        let new = with_block(&old, None);
        if new != old {
            write_file(x, new.as_bytes(), 0o644)?;
        }
    }
    if p.scope == Scope::Local {
        match cfg.remove_multivar(crate::git::folders::FOLDER_KEY, ".*") {
            Ok(()) => {}
            Err(e) if e.code() == git2::ErrorCode::NotFound => {}
            Err(e) => return Err(git_err(e)),
        }
        // Git repacks the packs of whole parts as any other again.
        let repo = Repository::discover(dir).map_err(git_err)?;
        crate::odb::pack::release_all(&repo.path().join("objects"))?;
    }
    if let Some(h) = &p.hooks_dir {
        remove_hooks(h, std::iter::once("pre-commit").chain(FOLDER_HOOKS).chain(LFS_HOOKS))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_is_replaced_not_duplicated() {
        let lines = vec!["*.wtxt diff=wtxt".to_string()];
        let once = with_block("*.bin binary\n", Some(&lines));
        let twice = with_block(&once, Some(&lines));
        assert_eq!(once, twice);
        assert_eq!(with_block(&twice, None), "*.bin binary\n");
    }
}
