//! The `wtxt` command line: parses flags, calls the library, prints, and
//! decides the exit code in one place (0 ok, 1 a check failed, 2 unusable
//! input or usage). The `wtxt` binary and the Python package's `wtxt`
//! command both run [`main`]: one code path, whichever way it was installed.

mod args;
mod render;
mod report;

use args as cli;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::convert::formats;
use crate::crypto::armor::{self, Seal, Unseal};
use crate::crypto::ec::{EcPublicKey, EcSecretKey};
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::{SecretKey, TrustedKeys};
use crate::error::{Error, Result};
use crate::format::verify::InputTrust;
use crate::git::history::DataCheck;
use crate::git::merge;
use crate::ops;
use crate::progress::Progress;
use clap::Parser;

use cli::{Cli, Command, DeltaCommand};

/// Runs the command line `argv` (the program's name first) and gives the
/// exit code. Prints to stdout and stderr; installs the process's signal
/// handling (unfinished outputs removed on SIGINT/SIGTERM, a shrinking
/// input reported): call it once, from a process that runs only it.
pub fn main(argv: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    ExitCode::from(exit_code(argv))
}

/// [`main`], the exit code as a number (0 ok, 1 a check failed, 2 unusable
/// input or usage): what the Python package's `wtxt` command exits with.
pub fn exit_code(argv: impl IntoIterator<Item = std::ffi::OsString>) -> u8 {
    let argv: Vec<std::ffi::OsString> = argv.into_iter().collect();
    if let Some(first) = argv.first() {
        let _ = INVOKED_AS.set(PathBuf::from(first));
    }
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    if let Some(n) = cli.threads {
        crate::threads::set(n as usize);
    }
    crate::fs::exit_cleanly_when_a_mapped_input_shrinks();
    // The daemon finishes in-flight work on SIGTERM itself; every other
    // command removes its unfinished outputs' temporary files and exits.
    if !matches!(cli.command, Command::Daemon(_)) {
        crate::fs::remove_temp_files_on_signals();
    }
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wtxt: {e}");
            e.exit_code() as u8
        }
    }
}

/// The command line's first word, as this process was started.
static INVOKED_AS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The command Git should run for wtxt's hooks and drivers: this binary, or,
/// when the command line runs inside another program (the Python package's
/// `wtxt` script, whose process is Python's), the script it was started as.
fn command_path() -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| Error::io("wtxt", e))?;
    if exe.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("wtxt")) {
        return Ok(exe);
    }
    let invoked = INVOKED_AS.get().cloned().unwrap_or_default();
    let found = if invoked.components().count() > 1 {
        Some(std::path::absolute(&invoked).map_err(|e| Error::io(&invoked, e))?)
    } else {
        // A bare name: the first on PATH.
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(&invoked)).find(|c| c.is_file()))
    };
    found.filter(|p| p.is_file()).ok_or_else(|| {
        Error::usage(format!("cannot tell where the wtxt command is (started as {})", invoked.display()))
    })
}

/// Prints what the library noted (repairs, versions, metadata left out).
fn warn(notes: &[String]) {
    for n in notes {
        eprintln!("wtxt: warning: {}", crate::error::one_line(n));
    }
}

/// Writes to stdout; a closed pipe (`wtxt inspect f | head`) is not an error.
fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::io("stdout", e)),
        _ => Ok(()),
    }
}

fn hmac_key(path: &Option<PathBuf>) -> Result<Option<HmacKey>> {
    HmacKey::from_file_or_env(path.as_deref())
}

fn sign_key(path: &Option<PathBuf>) -> Result<Option<SecretKey>> {
    path.as_deref().map(SecretKey::from_file).transpose()
}

fn oms_key(a: &cli::OmsKeyArg) -> Result<Option<EcSecretKey>> {
    a.oms_key.as_deref().map(EcSecretKey::from_file).transpose()
}

/// How to read age-encrypted inputs, if the user said.
fn unseal(a: &cli::SealedArg) -> Result<Option<Unseal>> {
    if a.passphrase || a.passphrase_file.is_some() {
        return Ok(Some(Unseal::Passphrase(armor::passphrase(a.passphrase_file.as_deref())?)));
    }
    if a.identities.is_empty() {
        return Ok(None);
    }
    let mut ids = Vec::new();
    for p in &a.identities {
        ids.extend(armor::read_identities(p)?);
    }
    Ok(Some(Unseal::Identities(ids)))
}

/// The keys of `--hmac-key`, `--sign-key` and the trust flags, read once.
fn keys(hmac: &cli::HmacArg, sign: &Option<PathBuf>, trust: &cli::TrustArg) -> Result<ops::Keys> {
    Ok(ops::Keys {
        hmac_key: hmac_key(&hmac.hmac_key)?,
        allow_unauthenticated: hmac.allow_unauthenticated,
        sign_key: sign_key(sign)?,
        trusted: trusted_keys(trust)?,
    })
}

/// How the written snapshot is stored: `--part-size` and `--oms-key`.
fn output(parts: &cli::PartSizeArg, oms: &cli::OmsKeyArg) -> Result<ops::Output> {
    Ok(ops::Output { part_size: parts.size(), oms_key: oms_key(oms)?, digest: Default::default() })
}

fn trusted_keys(t: &cli::TrustArg) -> Result<Option<TrustedKeys>> {
    TrustedKeys::from_flags(t.pubkey.as_deref(), t.trusted_keys.as_deref())
}

fn run(cmd: Command) -> Result<u8> {
    match cmd {
        Command::Snapshot(a) => snapshot(a),
        Command::Verify(a) => verify(a),
        Command::Inspect(a) => inspect(a),
        Command::Extract(a) => extract(a),
        Command::Recover(a) => recover(a),
        Command::Finalize(a) => finalize(a),
        Command::Delta(DeltaCommand::Create(a)) => delta_create(a),
        Command::Delta(DeltaCommand::Apply(a)) => delta_apply(*a),
        Command::Log(a) => log(a),
        Command::Report(a) => report(a),
        Command::Convert(a) => convert(a),
        Command::Diff(a) => diff_files(a),
        Command::Git(cli::GitCommand::Install(a)) => git_install(a),
        Command::Daemon(a) => daemon(a),
        Command::Hook(cli::HookCommand::PreCommit) => pre_commit(),
        Command::Hook(cli::HookCommand::Checkout) => hook_checkout(),
        Command::Hook(cli::HookCommand::PreReceive) => pre_receive(),
        Command::Git(cli::GitCommand::Folder { dir, checkout, stage, force }) => {
            git_folder(&dir, checkout, stage, force)
        }
        Command::Git(cli::GitCommand::FilterProcess { format }) => filter_process(format),
        Command::Git(cli::GitCommand::Textconv { file }) => textconv(file),
        Command::Git(cli::GitCommand::DiffDriver { args }) => diff_driver_cmd(args),
        Command::Git(cli::GitCommand::Resolve { path, how }) => git_resolve(path, how),
        Command::Git(cli::GitCommand::Push { remote }) => git_push(remote),
        Command::Git(cli::GitCommand::Export { rev, path, output, parts }) => {
            let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
            let n = ops::export(&here, &rev, &path, &output, parts.size())?;
            eprintln!(
                "wrote {rev}:{} to {}{}",
                path.display(),
                output.display(),
                if n > 0 { format!(" ({n} parts)") } else { String::new() }
            );
            Ok(0)
        }
        Command::Merge(a) => merge(a),
        Command::Encrypt(a) => encrypt(a),
        Command::Decrypt(a) => decrypt(a),
        Command::Keygen(a) => keygen(a),
        Command::Oms(cli::OmsCommand::Sign(a)) => oms_sign(a),
        Command::Oms(cli::OmsCommand::Verify(a)) => oms_verify(a),
        Command::Split(a) => {
            let n = ops::restore(&a.file, &a.output, a.parts.size(), oms_key(&a.oms)?.as_ref())?;
            eprintln!(
                "wrote {} as {}",
                a.output.display(),
                if n == 0 { "one file (it fits in a part)".into() } else { format!("a head and {n} parts") }
            );
            Ok(0)
        }
        Command::Join(a) => {
            ops::restore(&a.file, &a.output, crate::format::split::PartSize::Whole, oms_key(&a.oms)?.as_ref())?;
            eprintln!("wrote {}", a.output.display());
            Ok(0)
        }
    }
}

fn snapshot(a: cli::SnapshotArgs) -> Result<u8> {
    let opts = ops::SnapshotOptions {
        meta: ops::MetaFields { gen: a.gen, ts: a.ts, build: a.build, schema: a.schema, host: a.host, cuda: a.cuda },
        prev: a.prev.map(ops::Prev::File),
        rows_per_chunk: a.rows_per_chunk,
        audit: a.audit,
        wsum: if a.streaming { a.wsum } else { None },
        keys: keys(&a.hmac, &a.sign_key, &a.trust)?,
        output: ops::Output { digest: a.digest.digest.unwrap_or_default(), ..output(&a.parts, &a.oms)? },
    };
    let progress = Progress::for_terminal("snapshot");
    let mut notes = Vec::new();
    let w = ops::snapshot(&a.inputs, &a.output, &opts, &progress, &mut notes);
    progress.finish();
    warn(&notes);
    let w = w?;
    eprintln!("wrote {} ({} bytes) sha256_all={}", a.output.display(), w.len, hex::encode(w.sha256_all));
    Ok(0)
}

fn verify(a: cli::VerifyArgs) -> Result<u8> {
    let trusted = trusted_keys(&a.trust)?;
    let opts = ops::VerifyFiles {
        wsum: a.wsum,
        hmac_key: hmac_key(&a.hmac.hmac_key)?,
        trusted,
        require_signature: a.require_signature,
        prev: a.prev,
        allow_unauthenticated: a.hmac.allow_unauthenticated,
        unseal: unseal(&a.sealed)?,
        oms: a.oms_pubkey.as_deref().map(EcPublicKey::from_file).transpose()?.map(|k| (k, a.oms_sig)),
    };
    let progress = Progress::for_terminal("verify");
    let report = ops::verify_file(&a.file, &opts, &progress)?;
    progress.finish();
    if a.json {
        emit(&format!("{}\n", report.to_json()))?;
    } else if report.ok {
        emit(&render::verify_summary(&a.file, &report))?;
    }
    if !report.ok {
        if let Some(p) = report.first_error() {
            let more = report.errors.len() - 1;
            let affected = if p.array.is_none() { report.failing_arrays() } else { String::new() };
            let tail = if more > 0 { format!(" ({more} more{affected}; --json lists all)") } else { String::new() };
            let text = p.text();
            let msg = crate::error::one_line(&text);
            let file = p.file.clone().unwrap_or_else(|| a.file.display().to_string());
            let at = if p.line > 0 { format!("line {}: ", p.line) } else { String::new() };
            eprintln!("wtxt: {}: {at}{msg}{tail}", crate::error::one_line(&file));
        }
        return Ok(1);
    }
    Ok(0)
}

fn inspect(a: cli::InspectArgs) -> Result<u8> {
    let i = ops::inspect(&a.file, unseal(&a.sealed)?.as_ref())?;
    if a.json {
        emit(&format!("{}\n", serde_json::to_string(&i).expect("inspection serializes")))?;
    } else {
        emit(&render::inspection_text(&i))?;
    }
    Ok(0)
}

fn extract(a: cli::ExtractArgs) -> Result<u8> {
    let u = unseal(&a.sealed)?;
    let key = hmac_key(&a.hmac.hmac_key)?;
    let checks = crate::format::verify::VerifyOptions {
        hmac_key: key.as_ref(),
        allow_unauthenticated: a.hmac.allow_unauthenticated,
        ..Default::default()
    };
    if let Some(dir) = &a.hf {
        let shards = ops::extract_folder(&a.file, dir, &checks, u.as_ref())?;
        eprintln!("wrote the folder {} ({shards} shard(s))", dir.display());
        return Ok(0);
    }
    let output = a.output.as_deref().ok_or_else(|| Error::usage("give -o OUT or --hf OUTDIR"))?;
    let mut notes = Vec::new();
    let n = ops::extract(&a.file, output, a.array.as_deref(), &checks, u.as_ref(), &mut notes);
    warn(&notes);
    let n = n?;
    eprintln!("wrote {} array(s) to {}", n, output.display());
    Ok(0)
}

fn recover(a: cli::RecoverArgs) -> Result<u8> {
    let opts = ops::RecoverOptions {
        report: a.report,
        partial: a.partial,
        keys: keys(&a.hmac, &a.sign_key, &cli::TrustArg::default())?,
        output: output(&a.parts, &a.oms)?,
    };
    let r = ops::recover(&a.file, &a.output, &opts)?;
    eprintln!("recovered {} array(s), lost {}, into {}", r.recovered_arrays, r.lost_arrays, a.output.display());
    Ok(if r.lost_arrays == 0 && r.header_intact { 0 } else { 1 })
}

fn finalize(a: cli::FinalizeArgs) -> Result<u8> {
    if a.oms.oms_key.is_some() && a.rewrite.is_none() {
        return Err(Error::usage("--oms-key signs the snapshot of --rewrite: give --rewrite OUT.wtxt"));
    }
    let opts = ops::FinalizeOptions {
        keys: keys(&a.hmac, &a.sign_key, &a.trust)?,
        prev: a.prev,
        rewrite: a.rewrite,
        output: output(&a.parts, &a.oms)?,
    };
    let w = ops::finalize(&a.file, &a.output, &opts)?;
    eprintln!("wrote {} sha256_all={}", a.output.display(), hex::encode(w.sha256_all));
    Ok(0)
}

fn delta_create(a: cli::DeltaCreateArgs) -> Result<u8> {
    let s = ops::delta_create(&a.base, &a.target, &a.output, unseal(&a.sealed)?)?;
    eprintln!(
        "wrote {}: {} of {} chunks changed ({} bytes of chunk text)",
        a.output.display(),
        s.changed_chunks,
        s.target_chunks,
        s.changed_text_bytes
    );
    Ok(0)
}

fn delta_apply(a: cli::DeltaApplyArgs) -> Result<u8> {
    let opts = ops::DeltaApplyOptions {
        meta: ops::MetaFields { gen: a.gen, ts: a.ts, build: a.build, ..Default::default() },
        keys: keys(&a.hmac, &a.sign_key, &a.trust)?,
        unseal: unseal(&a.sealed)?,
        output: output(&a.parts, &a.oms)?,
    };
    let r = ops::delta_apply(&a.base, &a.delta, &a.output, &opts)?;
    eprintln!(
        "wrote {} gen {:06} sha256_all={}",
        a.output.display(),
        r.gen,
        r.sha256_all.map(hex::encode).unwrap_or_default()
    );
    Ok(0)
}

fn log(a: cli::LogArgs) -> Result<u8> {
    let progress = Progress::for_terminal("verify");
    let chains = ops::log(&a.dir, a.path.as_deref(), trusted_keys(&a.trust)?, a.verify, &progress)?;
    progress.finish();
    let ok = chains.iter().all(|c| c.ok);
    if a.json {
        let v = serde_json::json!({ "ok": ok, "data_verified": a.verify, "chains": chains });
        emit(&format!("{v}\n"))?;
    } else {
        emit(&render::log_text(&chains, a.verify))?;
    }
    // The first generation whose data failed, newest first, as the log lists them.
    let failed = chains.iter().flat_map(|c| &c.generations).find(|g| g.data == DataCheck::Failed);
    if let Some(g) = failed {
        let why = g.problems.iter().find(|p| p.starts_with("data: ")).map_or("", |p| &p[6..]);
        eprintln!("wtxt: log --verify: commit {} ({} gen {:06}) does not verify: {why}", g.commit, g.path, g.gen);
    }
    Ok(if ok { 0 } else { 1 })
}

fn report(a: cli::ReportArgs) -> Result<u8> {
    let progress = Progress::for_terminal("report");
    let r = ops::report::report(&a.dir, &a.path, trusted_keys(&a.trust)?, a.verify, &progress)?;
    progress.finish();
    crate::fs::write_file(&a.output, report::html(&r).as_bytes(), 0o644)?;
    let cells: usize = r.cells.iter().map(|c| c.iter().flatten().count()).sum();
    eprintln!(
        "wtxt: wrote {} ({} generation(s), {} tensor(s), {cells} cell(s)){}",
        a.output.display(),
        r.generations.len(),
        r.tensors.len(),
        if r.ok { "" } else { "; the chain or a signature does not hold: see the page" }
    );
    Ok(if r.ok { 0 } else { 1 })
}

fn convert(a: cli::ConvertArgs) -> Result<u8> {
    let to = match formats::by_name(&a.to) {
        Some(c) => ops::ConvertTo::Container(c),
        None => ops::ConvertTo::Wtxt,
    };
    if a.oms.oms_key.is_some() && !matches!(to, ops::ConvertTo::Wtxt) {
        return Err(Error::usage("--oms-key signs a WTXT snapshot: it needs --to wtxt"));
    }
    if a.digest.digest.is_some() && !matches!(to, ops::ConvertTo::Wtxt) {
        return Err(Error::usage("--digest says how a WTXT snapshot is hashed: it needs --to wtxt"));
    }
    let opts = ops::SnapshotOptions {
        meta: ops::MetaFields { gen: a.gen, ts: a.ts, ..Default::default() },
        keys: keys(&a.hmac, &a.sign_key, &a.trust)?,
        output: ops::Output { digest: a.digest.digest.unwrap_or_default(), ..output(&a.parts, &a.oms)? },
        ..Default::default()
    };
    let mut notes = Vec::new();
    let r = ops::convert(&a.input, &a.output, to, &opts, &mut notes);
    warn(&notes);
    r?;
    eprintln!("wrote {}", a.output.display());
    Ok(0)
}

fn diff_files(a: cli::DiffArgs) -> Result<u8> {
    let d = ops::diff(&a.old, &a.new, unseal(&a.sealed)?.as_ref())?;
    if a.json {
        emit(&format!("{}\n", serde_json::to_string(&d).expect("diff serializes")))?;
    } else {
        let color = match a.color {
            cli::ColorWhen::Always => true,
            cli::ColorWhen::Never => false,
            cli::ColorWhen::Auto => std::io::stdout().is_terminal(),
        };
        emit(&render::diff_text(&d, &a.old.display().to_string(), &a.new.display().to_string(), color))?;
    }
    // A side that fails a check is a failed check, whatever the diff found.
    for x in &d.damage {
        eprintln!("wtxt: {}: line {}: array {}: {}", x.file, x.line, x.array, crate::error::one_line(&x.message));
    }
    Ok(if !d.damage.is_empty() || (a.exit_code && d.differs()) { 1 } else { 0 })
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
    let exe = command_path()?;
    let here = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    if a.server {
        let hook = install::server(&here, &exe, a.uninstall)?;
        let done = if a.uninstall { "removed" } else { "installed" };
        eprintln!("wtxt: {done} the guard {}", hook.display());
        return Ok(0);
    }
    let plan = install::plan(&here, scope, &a.filter, &a.folder, &exe)?;
    if a.manual {
        emit(&install::describe(&plan))?;
    } else if a.uninstall {
        install::uninstall(&here, &plan)?;
        eprintln!("wtxt: removed the drivers, attributes and hook");
    } else {
        let again = install::install(&here, &plan)?;
        eprintln!("wtxt: installed (attributes in {})", plan.attributes_file.display());
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
                eprintln!(
                    "wtxt: {} holds the model folder {}/: `wtxt git install --folder {}` writes it and keeps it in step",
                    f.snapshot.display(),
                    f.dir.display(),
                    f.dir.display()
                );
            }
        }
        if !plan.folders.is_empty() {
            return hook_checkout();
        }
    }
    Ok(0)
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

fn daemon(a: cli::DaemonArgs) -> Result<u8> {
    use crate::daemon::server::{run as run_daemon, DaemonConfig};
    let apart = a.remote_password_file.is_some() || std::env::var_os("WTXT_REMOTE_PASSWORD").is_some();
    if a.remote.as_deref().is_some_and(|r| crate::git::push::has_secret(r, apart)) {
        return Err(Error::usage(format!(
            "--remote {}: a secret on the command line is shown by `ps` to every user: put the password or token \
             in a file (--remote-password-file), in WTXT_REMOTE_PASSWORD, or in --config's file",
            crate::git::push::redact(a.remote.as_deref().unwrap_or_default())
        )));
    }
    let flags = DaemonConfig {
        repo: a.repo,
        socket: a.socket,
        ring: a.ring,
        keep: a.keep,
        remote: a.remote,
        remote_password_file: a.remote_password_file,
        path_in_repo: a.path_in_repo,
        sign_key: a.sign_key,
        oms_key: a.oms_key,
        hmac_key: a.hmac_key,
        trusted_keys: a.trusted_keys,
        recipients: a.recipients,
        rows_per_chunk: a.rows_per_chunk,
        build: a.build,
        message: a.message,
        part_size: a.parts.part_size,
        digest: a.digest.digest.map(|d| d.name().to_string()),
    };
    let cfg = match &a.config {
        Some(p) => flags.or(DaemonConfig::from_file(p)?),
        None => flags,
    };
    let log: crate::daemon::Log =
        std::sync::Arc::new(|m: &str| eprintln!("wtxt daemon: {}", crate::error::one_line(m)));
    run_daemon(cfg, log)?;
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
            "pre-commit: nothing else was staged, so Git may already have decided there is nothing to commit              (it checks before running this hook): the snapshot stays staged and the same commit again takes it;              `wtxt git folder DIR --stage` before `git commit` does it in one"
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
    let repo = git2::Repository::open_from_env().map_err(crate::git::git_err)?;
    let v = guard::check(&repo, &updates, &Progress::hidden())?;
    for r in &v.refusals {
        let at = if r.commit.is_empty() { String::new() } else { format!(" {} {}:", &r.commit[..10], r.path) };
        eprintln!("wtxt pre-receive: {}:{at} {}", r.refname, crate::error::one_line(&r.reason));
    }
    if !v.refusals.is_empty() {
        eprintln!("wtxt pre-receive: push refused: nothing of it is kept");
        return Ok(1);
    }
    eprintln!("wtxt pre-receive: {} generation(s) in {} new commit(s) verified", v.generations, v.commits);
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

fn merge(a: cli::MergeArgs) -> Result<u8> {
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
    if opts.output.oms_key.is_none() {
        opts.output.oms_key = crate::git::oms_key_around(&here)?;
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
        Some(p) => merge::Decisions::parse(&crate::crypto::mac::read_small_text(p)?)
            .map_err(|m| Error::input(Default::default(), m).in_file(p))?,
        None => Default::default(),
    };
    let key_path = a.sign_key.clone().or_else(|| std::env::var_os("WTXT_SIGN_KEY").map(PathBuf::from));
    let sign = sign_key(&key_path)?;
    // As Git's driver the keys come from `git config wtxt.trustedKeys`.
    let trusted = match trusted_keys(&a.trust)? {
        Some(t) => Some(t),
        None => crate::git::trusted_keys_around(&std::env::current_dir().map_err(|e| Error::io(".", e))?)?,
    };
    let keys = ops::Keys {
        hmac_key: hmac_key(&a.hmac.hmac_key)?,
        sign_key: sign,
        trusted,
        allow_unauthenticated: a.hmac.allow_unauthenticated,
    };
    Ok(ops::MergeOptions { strategy, decisions, ts: a.ts.clone(), keys, output: output(&a.parts, &a.oms)? })
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

fn encrypt(a: cli::EncryptArgs) -> Result<u8> {
    let seal = if a.passphrase || a.passphrase_file.is_some() {
        Seal::Passphrase(armor::passphrase(a.passphrase_file.as_deref())?)
    } else {
        let mut rs = Vec::new();
        for r in &a.recipients {
            rs.push(armor::parse_recipient(r)?);
        }
        for f in &a.recipients_files {
            rs.extend(armor::read_recipients_file(f)?);
        }
        Seal::Recipients(rs)
    };
    ops::encrypt(&a.file, &a.output, seal)?;
    eprintln!("wrote {}", a.output.display());
    Ok(0)
}

fn decrypt(a: cli::DecryptArgs) -> Result<u8> {
    let u = unseal(&a.sealed)?.ok_or_else(|| Error::usage("give -i IDENTITY or -p"))?;
    ops::decrypt(&a.file, &a.output, &u)?;
    eprintln!("wrote {}", a.output.display());
    Ok(0)
}

fn oms_sign(a: cli::OmsSignArgs) -> Result<u8> {
    let key = EcSecretKey::from_file(&a.key)?;
    let trust = InputTrust::new(
        hmac_key(&a.hmac.hmac_key)?.as_ref(),
        trusted_keys(&a.trust)?.as_ref(),
        None,
        a.hmac.allow_unauthenticated,
    );
    let signed = ops::oms_sign(&a.snapshot, a.signature.as_deref(), &key, &trust)?;
    let snapshots = match signed.verified {
        1 => "1 snapshot verified".to_string(),
        n => format!("{n} snapshots verified"),
    };
    eprintln!(
        "{}: {snapshots}; wrote {} listing {} files",
        a.snapshot.display(),
        signed.signature.display(),
        signed.files
    );
    Ok(0)
}

fn oms_verify(a: cli::OmsVerifyArgs) -> Result<u8> {
    let key = EcPublicKey::from_file(&a.public_key)?;
    let m = crate::oms::verify_folder(&crate::oms::FolderCheck {
        dir: &a.dir,
        signature: &a.signature,
        key: &key,
        ignore: a.ignore_paths,
        ignore_git_paths: !a.no_ignore_git_paths,
        ignore_unsigned_files: a.ignore_unsigned_files,
    })?;
    emit(&format!(
        "{}: OMS signature valid ({} files)\n",
        crate::error::one_line(&a.dir.display().to_string()),
        m.resources.len()
    ))?;
    Ok(0)
}

fn keygen(a: cli::KeygenArgs) -> Result<u8> {
    let id = ops::keygen(&a.output, a.force, a.key_type == cli::KeyType::P256)?;
    emit(&format!("{id}\n"))?;
    Ok(0)
}

/// Git's external diff, which never fails (Git treats that as fatal).
fn diff_driver(args: &[String]) -> String {
    let color = std::env::var_os("GIT_PAGER_IN_USE").is_none() && std::io::stdout().is_terminal();
    let here = std::env::current_dir().unwrap_or_default();
    render::driver_text(&ops::diff_driver(args, &here), color)
}
