//! The commands Git runs and the ones that work on a repository: `wtxt git
//! ...`, `wtxt hook ...` and `wtxt merge`.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::ops;
use crate::options::Output;

use super::args as cli;
use super::process::emit;
use super::render;

/// Runs a `wtxt git` command.
pub(super) fn run(cmd: cli::GitCommand) -> Result<u8> {
    match cmd {
        cli::GitCommand::Install(a) => git_install(a),
        cli::GitCommand::Folder { dir, checkout, stage, force } => git_folder(&dir, checkout, stage, force),
        cli::GitCommand::FilterProcess { format } => filter_process(format),
        cli::GitCommand::FolderNotice { path } => folder_notice(&path),
        cli::GitCommand::Textconv { file } => textconv(file),
        cli::GitCommand::DiffDriver { args } => diff_driver_cmd(args),
        cli::GitCommand::Resolve { path, how } => git_resolve(path, how),
        cli::GitCommand::Push { remote } => git_push(remote),
        cli::GitCommand::Export { dir, rev, path, output, parts } => {
            let here = std::env::current_dir().map_err(|e| Error::io(".", e))?.join(dir);
            let output = here.join(output);
            let n = ops::export(&here, &rev, &path, &output, parts.part_size.unwrap_or_default())?;
            eprintln!(
                "wrote {rev}:{} to {}{}",
                path.display(),
                output.display(),
                if n > 0 { format!(" ({n} parts)") } else { String::new() }
            );
            Ok(0)
        }
    }
}

/// Runs a `wtxt hook` command.
pub(super) fn hook(cmd: cli::HookCommand) -> Result<u8> {
    match cmd {
        cli::HookCommand::PreCommit => pre_commit(),
        cli::HookCommand::Checkout => hook_checkout(),
        cli::HookCommand::PreReceive => pre_receive(),
    }
}

fn git_install(a: cli::InstallArgs) -> Result<u8> {
    use crate::git::install::{self, Scope};
    let scope = if a.global {
        Scope::Global
    } else if a.system {
        Scope::System
    } else {
        Scope::Local
    };
    let exe = crate::git::command()?;
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    if a.server && a.manual {
        emit(&install::describe_server(&here, &exe, a.lfs_objects.as_deref())?)?;
        return Ok(0);
    }
    if a.server {
        let hook = install::server(&here, &exe, a.lfs_objects.as_deref(), a.uninstall)?;
        let done = if a.uninstall { "removed" } else { "installed" };
        eprintln!("wtxt: {done} the guard {}", hook.display());
        if !a.uninstall {
            signing_policy(&here, a.trusted_keys.as_deref(), "the guard accepts any signature or none")?;
        }
        if !a.uninstall && a.lfs_objects.is_none() {
            eprintln!(
                "wtxt: parts stored in Git LFS are refused until the guard can read them: --lfs-objects DIR names the \
                 LFS server's object store (a host that runs no hook checks pushes with `wtxt log --verify` in CI)"
            );
        }
        return Ok(0);
    }
    let plan = install::plan(&here, scope, &a.filter, &a.folder, a.lfs, &exe)?;
    if a.manual {
        emit(&install::describe(&plan))?;
    } else if a.uninstall {
        install::uninstall(&here, &plan)?;
        eprintln!("wtxt: removed the drivers, attributes and hook");
    } else {
        let again = install::install(&here, &plan)?;
        eprintln!("wtxt: installed (attributes in {})", plan.attributes_file.display());
        if scope == Scope::Local {
            let lax = "the hook takes an unsigned generation that a guarded host then refuses";
            signing_policy(&here, a.trusted_keys.as_deref(), lax)?;
        }
        if !again.is_empty() {
            eprintln!(
                "wtxt: checked out {} file(s) again through the filter (they were in their stored WTXT form): {}",
                again.len(),
                again.join(", ")
            );
        }
        if scope == Scope::Local {
            // A clone holds the snapshots, not the folders: say what writes them.
            for f in crate::git::folders::unconfigured(&here)? {
                eprintln!("wtxt: {}", f.not_set_up());
            }
        }
        if !plan.folders.is_empty() {
            return hook_checkout();
        }
    }
    Ok(0)
}

/// Sets the repository's signing policy from `trusted_keys`, or, where it
/// has none, says what taking any signature means (`lax`).
fn signing_policy(here: &std::path::Path, trusted_keys: Option<&std::path::Path>, lax: &str) -> Result<()> {
    match trusted_keys {
        Some(file) => {
            let set = crate::git::set_signing_policy(here, file)?;
            eprintln!("wtxt: signatures required, by a key in {} (wtxt.trustedKeys)", set.display());
        }
        None if !crate::git::has_signing_policy(here) => eprintln!(
            "wtxt: no signing policy: {lax}; `wtxt git install --trusted-keys FILE` requires signatures by FILE's keys"
        ),
        None => {}
    }
    Ok(())
}

/// Writes every model folder whose snapshot changed; says what it left.
fn hook_checkout() -> Result<u8> {
    use crate::git::folders::{CheckedOut, State};
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let mut code = 0;
    for (f, r) in crate::git::folders::checkout_changed(&here)? {
        match r {
            Ok(CheckedOut::Written(n)) => {
                eprintln!("wtxt: wrote {}/ from {} ({n} shard(s))", f.dir.display(), f.snapshot.display())
            }
            Ok(CheckedOut::Left(s @ (State::FolderChanged | State::BothChanged))) => {
                eprintln!("wtxt: warning: {}", s.describe(&f))
            }
            Ok(CheckedOut::Left(_)) => {}
            Err(e) => {
                eprintln!("wtxt: {}/ not written: {e}", f.dir.display());
                code = e.exit_code() as u8;
            }
        }
    }
    Ok(code)
}

fn git_folder(dir: &str, checkout: bool, stage: bool, force: bool) -> Result<u8> {
    use crate::git::folders::{self, CheckedOut};
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let (repo, f) = folders::open(&here, dir)?;
    if stage {
        let s = crate::ops::folders::stage(&repo, &f, force)?;
        eprintln!(
            "wtxt: snapshotted {}/ into {} (gen {}, {} bytes), staged",
            f.dir.display(),
            s.snapshot.display(),
            s.gen,
            s.len
        );
    } else if checkout {
        match folders::checkout(&repo, &f, force)? {
            CheckedOut::Written(n) => {
                eprintln!("wtxt: wrote {}/ from {} ({n} shard(s))", f.dir.display(), f.snapshot.display())
            }
            CheckedOut::Left(s) => {
                eprintln!("wtxt: {}", s.describe(&f));
                return Ok(1);
            }
        }
    } else {
        emit(&format!("{}\n", folders::state(&repo, &f)?.describe(&f)))?;
    }
    Ok(0)
}

fn pre_commit() -> Result<u8> {
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let staged = crate::ops::folders::stage_changed(&here)?;
    for s in &staged {
        eprintln!(
            "pre-commit: snapshotted the folder into {} (gen {}, {} bytes), staged",
            s.snapshot.display(),
            s.gen,
            s.len
        );
    }
    if !staged.is_empty() && crate::ops::folders::only_folders_staged(&here, &staged)? {
        eprintln!(
            "pre-commit: nothing else was staged, so Git may already have decided there is nothing to commit \
             (it checks before running this hook): the snapshot stays staged and the same commit again takes it; \
             `wtxt git folder DIR --stage` before `git commit` does it in one"
        );
    }
    let crate::git::hooks::Checked { staged: n, refusals, notes } = crate::git::hooks::pre_commit(&here)?;
    for note in &notes {
        eprintln!("pre-commit: warning: {note}");
    }
    if refusals.is_empty() {
        crate::git::hooks::pack_staged(&here)?;
        return Ok(0);
    }
    for r in &refusals {
        eprintln!("pre-commit: {r}");
    }
    eprintln!("pre-commit: commit blocked: {} of {n} staged WTXT file(s) refused", refusals.len());
    Ok(1)
}

fn pre_receive() -> Result<u8> {
    use crate::git::guard;
    // Git's input: one line of about 100 bytes per ref update.
    let mut input = Vec::new();
    let cap = (guard::MAX_UPDATES as u64 + 1) * 512;
    std::io::Read::read_to_end(&mut std::io::Read::take(std::io::stdin().lock(), cap), &mut input)
        .map_err(Error::read_failed)?;
    if input.len() as u64 == cap {
        return Err(Error::usage(format!("pre-receive: more than {} ref updates in one push", guard::MAX_UPDATES)));
    }
    let updates = guard::parse_updates(&input)?;
    let repo = git2::Repository::open_from_env().map_err(crate::odb::git_err)?;
    let v = guard::check(&repo, &updates)?;
    if v.refusals.is_empty() {
        if let Some(branch) = guard::head_to_pushed_branch(&repo, &updates)? {
            eprintln!("wtxt pre-receive: HEAD now names {branch}, the first branch pushed (clones check it out)");
        }
    }
    for r in &v.refusals {
        // Names and paths are the pusher's: shown escaped, so none can
        // forge a line of Git's `remote:` output or reorder the terminal's.
        let one_line = crate::error::one_line;
        let commit = if r.commit.is_empty() { String::new() } else { format!(" {}", &r.commit[..10]) };
        let path = if r.path.is_empty() { String::new() } else { format!(" {}", one_line(&r.path)) };
        let at = if commit.is_empty() && path.is_empty() { String::new() } else { format!("{commit}{path}:") };
        eprintln!("wtxt pre-receive: {}:{at} {}", one_line(&r.refname), one_line(&r.reason));
    }
    if !v.refusals.is_empty() {
        eprintln!("wtxt pre-receive: push refused: nothing of it is kept");
        return Ok(1);
    }
    let parts = match v.parts_total {
        0 => String::new(),
        n => format!(" ({} of {n} parts read, the rest verified before)", v.parts_read),
    };
    eprintln!("wtxt pre-receive: {} generation(s) in {} new commit(s) verified{parts}", v.generations, v.commits);
    Ok(0)
}

fn filter_process(format: String) -> Result<u8> {
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let stdin = std::io::stdin().lock();
    let stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let log = |m: &str| eprintln!("wtxt filter: {}", crate::error::one_line(m));
    crate::git::filter::serve(&format, &here, stdin, stdout, &log)?;
    Ok(0)
}

/// Git's smudge filter for the snapshot of a model folder: the snapshot's
/// bytes go through as they are (streamed, never held), then a clone that
/// has the snapshot but not the folder hears what writes it. Nothing of
/// the snapshot is read or acted on.
fn folder_notice(path: &str) -> Result<u8> {
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    std::io::copy(&mut std::io::stdin().lock(), &mut std::io::stdout().lock())
        .map_err(|e| Error::io_in("the snapshot Git smudges", e))?;
    if let Some(f) = crate::git::folders::unset_up(&here, path)? {
        eprintln!("wtxt: {}", f.not_set_up());
    }
    Ok(0)
}

fn textconv(file: PathBuf) -> Result<u8> {
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    // A file that is not a readable WTXT is shown as it is: `git show`
    // must not fail on it.
    match ops::textconv(&file, &here) {
        Ok(text) => emit(&text)?,
        Err(e) => {
            let raw = std::fs::read(&file).map_err(|e| Error::io(&file, e))?;
            emit(&format!("wtxt textconv: {e} (shown as it is)\n{}", String::from_utf8_lossy(&raw)))?;
        }
    }
    Ok(0)
}

fn diff_driver_cmd(args: Vec<String>) -> Result<u8> {
    emit(&diff_driver(&args))?;
    // Git treats a failing external diff as fatal: problems are printed instead.
    Ok(0)
}

pub(super) fn merge(a: cli::MergeArgs) -> Result<u8> {
    if let (Some(p), true) = (&a.path, crate::git::merge::is_lone_head(&a.ours)) {
        eprintln!("wtxt merge: {p} is a split snapshot: Git merges its head and parts one by one, which cannot merge the model; run `wtxt git resolve {p}` to merge it whole");
        return Ok(1);
    }
    let opts = merge_options(&a.how)?;
    let what = a.path.clone().unwrap_or_else(|| a.ours.display().to_string());
    let out = ops::merge(&a.base, &a.ours, &a.theirs, &a.output, &opts)?;
    Ok(merge_told(&what, &out, opts.keys.sign_key.is_some(), "ours is untouched"))
}

fn git_push(remote: Option<String>) -> Result<u8> {
    use crate::git::push;
    let here = push::repository_top(&std::env::current_dir().map_err(|e| Error::io(".", e))?)?;
    let remote = match remote {
        Some(r) => r,
        None => push::default_remote(&here)?,
    };
    let shown = push::redact(&remote);
    let backlog = push::backlog(&here, &remote)?;
    if backlog.is_empty() {
        eprintln!("wtxt git push: {shown} is up to date");
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    for (i, (commit, changed_wholly)) in backlog.iter().enumerate() {
        let id = commit.to_string();
        let how = if *changed_wholly { "as stored" } else { "as deltas against the remote's version" };
        eprintln!("wtxt git push: {} ({} of {}) to {shown}, {how}", &id[..12], i + 1, backlog.len());
        push::push(&here, &remote, push::Push { commit: Some(&id), changed_wholly: *changed_wholly }, &stop)?.done()?;
    }
    Ok(0)
}

fn git_resolve(path: PathBuf, how: cli::MergeHow) -> Result<u8> {
    let mut opts = merge_options(&how)?;
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    if opts.keys.oms_key.is_none() {
        opts.keys.oms_key = crate::git::oms_key_around(&here)?;
    }
    let r = ops::resolve(&here, &path, &opts)?;
    let what = format!("{} ({} of {})", path.display(), r.operation, r.theirs);
    let code = merge_told(&what, &r.outcome, opts.keys.sign_key.is_some(), "the work tree is untouched");
    if code == 0 {
        eprintln!("wtxt git resolve: staged {}; commit to conclude", path.display());
    }
    Ok(code)
}

/// The options of a merge from its command line.
fn merge_options(a: &cli::MergeHow) -> Result<ops::MergeOptions> {
    let strategy =
        a.strategy.clone().or_else(|| std::env::var("WTXT_MERGE_STRATEGY").ok()).unwrap_or_else(|| "fail".into());
    let strategy = strategy.parse().map_err(Error::usage)?;
    let decisions = match &a.decisions {
        Some(p) => crate::git::merge::Decisions::parse(&crate::crypto::mac::read_small_text(p)?)
            .map_err(|m| Error::input(Default::default(), m).in_file(p))?,
        None => Default::default(),
    };
    let mut files = a.keys.clone();
    if files.sign.sign_key.is_none() {
        files.sign.sign_key = std::env::var_os("WTXT_SIGN_KEY").map(PathBuf::from);
    }
    let mut keys = files.load()?;
    // As Git's driver the keys come from `git config wtxt.trustedKeys`.
    if keys.trusted.is_none() {
        keys.trusted = crate::git::trusted_keys_around(&std::env::current_dir().map_err(|e| Error::io(".", e))?)?;
    }
    Ok(ops::MergeOptions {
        strategy,
        decisions,
        ts: a.ts.clone(),
        keys,
        output: Output::of(a.parts, Default::default()),
    })
}

/// Tells how a merge ended: the conflicts left (exit 1), or what was written.
fn merge_told(what: &str, out: &ops::MergeOutcome, signed: bool, untouched: &str) -> u8 {
    let unsettled: Vec<_> = out.conflicts.iter().filter(|c| c.settled_by.is_none()).collect();
    if !unsettled.is_empty() {
        eprintln!("wtxt merge: {what}: {} conflict(s) left; {untouched}. Settle them with --strategy ours|theirs|average or --decisions FILE:", unsettled.len());
        for c in unsettled {
            let at = match (c.chunk, c.rows) {
                (Some(ix), Some((r0, r1))) => format!(" chunk {ix} rows {r0}-{}", r1.saturating_sub(1)),
                _ => String::new(),
            };
            eprintln!("  conflict: array {}{at}: {}", c.original.as_deref().unwrap_or(&c.array), c.what);
        }
        return 1;
    }
    let w = out.written.as_ref().expect("written when settled");
    eprintln!(
        "wtxt merge: {what}: merged gen {:06} ({} conflict(s) settled), sha256_all={}, {}",
        out.gen,
        out.conflicts.len(),
        hex::encode(w.sha256_all),
        if signed { "signed" } else { "unsigned (set WTXT_SIGN_KEY or --sign-key to sign merges)" }
    );
    0
}

/// Git's external diff, which never fails (Git treats that as fatal).
fn diff_driver(args: &[String]) -> String {
    let color = std::env::var_os("GIT_PAGER_IN_USE").is_none() && std::io::stdout().is_terminal();
    let here = std::env::current_dir().unwrap_or_default();
    render::driver_text(&ops::diff_driver(args, &here), color)
}
