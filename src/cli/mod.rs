//! The `wtxt` command line: parses flags, calls the library, prints, and
//! decides the exit code in one place (0 ok, 1 a check failed, 2 unusable
//! input or usage). The `wtxt` binary and the Python package's `wtxt`
//! command both run [`main`]: one code path, whichever way it was installed.

mod args;
mod flags;
mod git;
mod markdown;
mod process;
mod render;
mod report;

use args as cli;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::convert::formats;
use crate::crypto::armor::{self, Seal};
use crate::crypto::ec::{EcPublicKey, EcSecretKey};
use crate::error::{Error, Result};
use crate::format::verify::InputTrust;
use crate::git::history::DataCheck;
use crate::ops;
use crate::options::Output;
use crate::progress::Progress;
use clap::Parser;

use cli::{Cli, Command, DeltaCommand};
use flags::unseal;
use process::{emit, warn};

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
        crate::git::set_command(PathBuf::from(first));
    }
    crate::git::read_lfs_pointers_in_work_trees();
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
        Command::Daemon(a) => daemon(a),
        Command::Git(c) => git::run(c),
        Command::Hook(c) => git::hook(c),
        Command::Merge(a) => git::merge(a),
        Command::Encrypt(a) => encrypt(a),
        Command::Decrypt(a) => decrypt(a),
        Command::Keygen(a) => keygen(a),
        Command::Trust(a) => trust(a),
        Command::Oms(cli::OmsCommand::Sign(a)) => oms_sign(a),
        Command::Oms(cli::OmsCommand::Verify(a)) => oms_verify(a),
        Command::Split(a) => {
            let n = ops::restore(&a.file, &a.output, a.parts.part_size.unwrap_or_default(), a.oms.key()?.as_ref())?;
            eprintln!(
                "wrote {} as {}",
                a.output.display(),
                if n == 0 { "one file (it fits in a part)".into() } else { format!("a head and {n} parts") }
            );
            Ok(0)
        }
        Command::Join(a) => {
            ops::restore(&a.file, &a.output, crate::format::split::PartSize::Whole, a.oms.key()?.as_ref())?;
            eprintln!("wrote {}", a.output.display());
            Ok(0)
        }
    }
}

fn snapshot(a: cli::SnapshotArgs) -> Result<u8> {
    let opts = ops::SnapshotOptions {
        meta: a.meta,
        prev: a.prev.map(ops::Prev::File),
        rows_per_chunk: a.rows_per_chunk,
        audit: a.audit,
        wsum: if a.streaming { a.wsum } else { None },
        keys: a.keys.load()?,
        output: Output::of(a.parts, a.digest),
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
    let (trusted, require_signature) = crate::git::signature_policy(&a.file, a.trust.keys()?, a.require_signature)?;
    let opts = ops::VerifyFiles {
        wsum: a.wsum,
        hmac_key: a.hmac.key()?,
        trusted,
        require_signature,
        prev: a.prev,
        allow_unauthenticated: a.hmac.allow_unauthenticated,
        allow_unbound: a.hmac.allow_unbound,
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
    let key = a.hmac.key()?;
    // By revision, the repository is the one -C names.
    let policy_file = if a.rev.is_some() { a.dir.join(&a.file) } else { a.file.clone() };
    let (trusted, require_signature) =
        crate::git::signature_policy(&policy_file, a.trust.keys()?, a.require_signature)?;
    let checks = crate::format::verify::VerifyOptions {
        hmac_key: key.as_ref(),
        allow_unauthenticated: a.hmac.allow_unauthenticated,
        allow_unbound: a.hmac.allow_unbound,
        trusted: trusted.as_ref(),
        require_signature,
        ..Default::default()
    };
    if let Some(dir) = &a.hf {
        let shards = ops::extract_folder(&a.file, dir, &checks, u.as_ref())?;
        eprintln!("wrote the folder {} ({shards} shard(s))", dir.display());
        return Ok(0);
    }
    let output = a.output.as_deref().ok_or_else(|| Error::usage("give -o OUT or --hf OUTDIR"))?;
    let mut notes = Vec::new();
    let n = match &a.rev {
        Some(rev) => ops::extract_at(&a.dir, rev, &a.file, output, &a.array, &checks, &mut notes),
        None => ops::extract(&a.file, output, &a.array, &checks, u.as_ref(), &mut notes),
    };
    warn(&notes);
    let n = n?;
    eprintln!("wrote {} array(s) to {}", n, output.display());
    Ok(0)
}

fn recover(a: cli::RecoverArgs) -> Result<u8> {
    let opts = ops::RecoverOptions {
        report: a.report,
        partial: a.partial,
        keys: crate::options::KeyFiles { hmac: a.hmac, sign: a.sign, oms: a.oms, ..Default::default() }.load()?,
        output: Output::of(a.parts, Default::default()),
    };
    let r = ops::recover(&a.file, &a.output, &opts)?;
    if r.recovered_arrays == 0 {
        eprintln!("recovered no array (lost {}): {} not written", r.lost_arrays, a.output.display());
        return Ok(1);
    }
    eprintln!("recovered {} array(s), lost {}, into {}", r.recovered_arrays, r.lost_arrays, a.output.display());
    Ok(if r.lost_arrays == 0 && r.header_intact { 0 } else { 1 })
}

fn finalize(a: cli::FinalizeArgs) -> Result<u8> {
    if a.keys.oms.oms_key.is_some() && a.rewrite.is_none() {
        return Err(Error::usage("--oms-key signs the snapshot of --rewrite: give --rewrite OUT.wtxt"));
    }
    let opts = ops::FinalizeOptions {
        keys: a.keys.load()?,
        prev: a.prev,
        rewrite: a.rewrite,
        output: Output::of(a.parts, Default::default()),
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
        meta: a.meta,
        keys: a.keys.load()?,
        unseal: unseal(&a.sealed)?,
        output: Output::of(a.parts, Default::default()),
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
    let chains = ops::log(&a.dir, a.path.as_deref(), a.trust.keys()?, a.verify, &progress)?;
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
    let r = ops::report::report(&a.dir, &a.path, a.trust.keys()?, a.verify, &progress)?;
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
    if a.keys.oms.oms_key.is_some() && !matches!(to, ops::ConvertTo::Wtxt) {
        return Err(Error::usage("--oms-key signs a WTXT snapshot: it needs --to wtxt"));
    }
    if a.digest.digest.is_some() && !matches!(to, ops::ConvertTo::Wtxt) {
        return Err(Error::usage("--digest says how a WTXT snapshot is hashed: it needs --to wtxt"));
    }
    let opts = ops::SnapshotOptions {
        meta: a.meta,
        keys: a.keys.load()?,
        output: Output::of(a.parts, a.digest),
        ..Default::default()
    };
    let mut notes = Vec::new();
    let r = ops::convert(&a.input, &a.output, to, &opts, &mut notes);
    warn(&notes);
    r?;
    eprintln!("wrote {}", a.output.display());
    Ok(0)
}

/// One side of `wtxt diff`: the file read and how it is shown.
struct DiffSide {
    file: PathBuf,
    label: String,
    /// For a revision: what it resolved to, and its temporary copy's folder.
    at: Option<(ops::AtRevision, PathBuf)>,
}

impl DiffSide {
    /// `spec` as a file, or (with `path`, or as `REV:PATH` naming no file)
    /// a revision's snapshot, its path taken in `dir`, copied (when read
    /// whole) into `tmp/which`.
    fn of(spec: &Path, path: Option<&Path>, dir: &Path, tmp: &Path, which: &str) -> Result<DiffSide> {
        let revision = match (path, spec.to_str()) {
            (Some(p), Some(rev)) => Some((rev.to_string(), p.to_path_buf())),
            (None, Some(s)) if std::fs::symlink_metadata(spec).is_err() => s
                .split_once(':')
                .filter(|(r, p)| !r.is_empty() && !p.is_empty())
                .map(|(r, p)| (r.to_string(), p.into())),
            _ => None,
        };
        let Some((rev, path)) = revision else {
            return Ok(DiffSide { file: spec.to_path_buf(), label: spec.display().to_string(), at: None });
        };
        let at = ops::AtRevision::resolve(&dir.join(&path), &rev)?;
        let label = format!("{rev}:{} ({})", path.display(), &at.commit[..12]);
        let name = path.file_name().map_or_else(|| "snapshot.wtxt".into(), |n| n.to_os_string());
        let copy = tmp.join(which);
        Ok(DiffSide { file: copy.join(name), label, at: Some((at, copy)) })
    }

    /// Makes the temporary copy of a revision's snapshot, to be read whole.
    fn copy(&self) -> Result<()> {
        let Some((at, dir)) = &self.at else { return Ok(()) };
        std::fs::create_dir(dir).map_err(|e| Error::io(dir, e))?;
        ops::export_revision(at, &self.file).map(drop)
    }

    /// A path inside this side's temporary copy (its head, a part) as the
    /// revision's own: `REV:DIR/NAME`, `REV:DIR/NAME.parts/PART`.
    fn shown(&self, p: &Path) -> Option<PathBuf> {
        let (at, dir) = self.at.as_ref()?;
        let rest = p.strip_prefix(dir).ok()?;
        let parent = at.rel.parent().map(Path::to_path_buf).unwrap_or_default();
        Some(PathBuf::from(format!("{}:{}", at.rev, parent.join(rest).display())))
    }
}

fn diff_files(a: cli::DiffArgs) -> Result<u8> {
    let sealed = unseal(&a.sealed)?;
    let tmp =
        tempfile::Builder::new().prefix("wtxt-diff-").tempdir().map_err(|e| Error::io_in("a temporary folder", e))?;
    let old = DiffSide::of(&a.old, a.path.as_deref(), &a.dir, tmp.path(), "old")?;
    let new = DiffSide::of(&a.new, a.path.as_deref(), &a.dir, tmp.path(), "new")?;
    let markdown = a.format == Some(cli::DiffFormat::Markdown);
    // Two revisions of a split snapshot of the tree form: only what changed is read.
    let from_commits = match (&old.at, &new.at) {
        (Some((x, _)), Some((y, _))) => ops::review_revisions(x, y, markdown)?,
        _ => None,
    };
    let shown = |p: &Path| old.shown(p).or_else(|| new.shown(p));
    let named = |e: Error| e.renamed(shown);
    let review = match from_commits {
        Some(r) => Some(r),
        None => {
            old.copy()?;
            new.copy()?;
            if markdown {
                Some(ops::review(&old.file, &new.file, sealed.as_ref()).map_err(named)?)
            } else {
                None
            }
        }
    };
    let text = review.as_ref().filter(|_| markdown).map(|r| markdown::diff_markdown(r, &old.label, &new.label, a.full));
    let mut d = match review {
        Some(r) => r.diff,
        None => ops::diff(&old.file, &new.file, sealed.as_ref()).map_err(named)?,
    };
    for x in &mut d.damage {
        if let Some(p) = shown(Path::new(&x.file)) {
            x.file = p.display().to_string();
        }
    }
    if let Some(text) = text {
        emit(&text)?;
    } else if a.json || a.format == Some(cli::DiffFormat::Json) {
        emit(&format!("{}\n", serde_json::to_string(&d).expect("diff serializes")))?;
    } else {
        let color = match a.color {
            cli::ColorWhen::Always => true,
            cli::ColorWhen::Never => false,
            cli::ColorWhen::Auto => std::io::stdout().is_terminal(),
        };
        emit(&render::diff_text(&d, &old.label, &new.label, color, a.full))?;
    }
    // A side that fails a check is a failed check, whatever the diff found.
    for x in &d.damage {
        eprintln!("wtxt: {}: line {}: array {}: {}", x.file, x.line, x.array, crate::error::one_line(&x.message));
    }
    Ok(if !d.damage.is_empty() || (a.exit_code && d.differs()) { 1 } else { 0 })
}

fn daemon(a: cli::DaemonArgs) -> Result<u8> {
    use crate::daemon::server::{run as run_daemon, DaemonConfig};
    let apart = a.settings.remote_password_file.is_some() || std::env::var_os("WTXT_REMOTE_PASSWORD").is_some();
    if a.settings.remote.as_deref().is_some_and(|r| crate::git::push::has_secret(r, apart)) {
        return Err(Error::usage(format!(
            "--remote {}: a secret on the command line is shown by `ps` to every user: put the password or token \
             in a file (--remote-password-file), in WTXT_REMOTE_PASSWORD, or in --config's file",
            crate::git::push::redact(a.settings.remote.as_deref().unwrap_or_default())
        )));
    }
    let flags = a.settings;
    let cfg = match &a.config {
        Some(p) => flags.or(DaemonConfig::from_file(p)?),
        None => flags,
    };
    let log: crate::daemon::Log =
        std::sync::Arc::new(|m: &str| eprintln!("wtxt daemon: {}", crate::error::one_line(m)));
    run_daemon(cfg, log)?;
    Ok(0)
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
        a.hmac.key()?.as_ref(),
        a.trust.keys()?.as_ref(),
        None,
        a.hmac.allow_unauthenticated,
        a.hmac.allow_unbound,
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
    let p256 = a.key_type == cli::KeyType::P256;
    if p256 && a.trusted_keys.is_some() {
        return Err(Error::usage("--trusted-keys holds Ed25519 keys: give it without --type p256"));
    }
    let id = ops::keygen(&a.output, a.force, p256)?;
    emit(&format!("{id}\n"))?;
    if let Some(file) = &a.trusted_keys {
        let mut public = a.output.clone().into_os_string();
        public.push(".pub");
        trust(cli::TrustKeysArgs { keys: vec![public.into()], trusted_keys: file.clone(), comment: None })?;
    }
    Ok(0)
}

/// `wtxt trust`: says on stderr, key by key, whether it was added (stdout
/// stays the keyid `keygen --trusted-keys` prints).
fn trust(a: cli::TrustKeysArgs) -> Result<u8> {
    let mut keys = Vec::new();
    for path in &a.keys {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for (key, given) in crate::crypto::sign::TrustedKeys::from_file(path)?.iter() {
            let comment =
                a.comment.clone().unwrap_or_else(|| if given.is_empty() { name.clone() } else { given.into() });
            keys.push((*key, comment));
        }
    }
    for (id, added) in ops::trust(&a.trusted_keys, &keys)? {
        let what = if added { "now trusted in" } else { "trusted already in" };
        eprintln!("wtxt: {id} {what} {}", a.trusted_keys.display());
    }
    Ok(0)
}
