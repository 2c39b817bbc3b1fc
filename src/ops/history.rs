//! Git-side commands: `wtxt log`, `diff` and `merge`.

use crate::convert::OriginalNames;
use crate::crypto::armor::Unseal;
use crate::crypto::sign::TrustedKeys;
use crate::error::{Error, Result};
use crate::format::layout::DEFAULT_ROWS_PER_CHUNK;
use crate::format::read::Header;
use crate::format::syntax::{Audit, Meta, Root};
use crate::format::verify::VerifyOptions;
use crate::format::write::{WriteOptions, Written};
use crate::options::{Keys, Output};
use crate::progress::Progress;
use std::path::{Path, PathBuf};

use super::check::{inspect_reader, Inspection};
use super::oms::oms_sign_written;
use super::parts::export;
use crate::store::input::WtxtIn;
use crate::store::write_wtxt;

/// `wtxt log`: the chain of each path (or of every `*.wtxt` in HEAD).
/// Trusted keys default to the file named by `git config wtxt.trustedKeys`.
/// With `verify`, every generation's data is verified from its commit.
pub fn log(
    dir: &Path,
    path: Option<&Path>,
    trusted: Option<TrustedKeys>,
    verify: bool,
    progress: &Progress,
) -> Result<Vec<crate::git::history::Chain>> {
    use crate::git::history;
    let (repo, rel) = history::open(dir, path)?;
    let trusted = match trusted {
        Some(t) => Some(t),
        None => crate::git::configured_trusted_keys(&repo)?,
    };
    let paths = match rel {
        Some(p) => vec![p],
        None => history::wtxt_paths(&repo)?,
    };
    // The HMAC key checks data: read only for a log that verifies it.
    let hmac = if verify { crate::git::configured_hmac_key(&repo)? } else { None };
    let opts = history::LogOptions { trusted, verify, hmac };
    paths.iter().map(|p| history::chain(&repo, p, &opts, progress)).collect()
}

/// `wtxt diff`: the semantic difference of two WTXT files (either may be age-encrypted).
pub fn diff(old: &Path, new: &Path, unseal: Option<&Unseal>) -> Result<crate::git::diff::FileDiff> {
    diff_with(old, new, unseal, false)
}

/// [`diff`] with every float array's norm (`report`'s relative change):
/// the new file's unchanged chunks are decoded too.
pub fn diff_norms(old: &Path, new: &Path) -> Result<crate::git::diff::FileDiff> {
    diff_with(old, new, None, true)
}

/// What a review of a change shows beside the difference: each side's
/// generation, time and signer, and whether the new side continues the
/// old one's chain.
pub struct Review {
    /// The difference, every changed float array's relative change included.
    pub diff: crate::git::diff::FileDiff,
    /// The old side's header facts.
    pub old: Side,
    /// The new side's.
    pub new: Side,
    /// The new side's `gen` is the old one's plus one and its `merkle_prev`
    /// the old one's `merkle_this`.
    pub continues: bool,
}

/// One side of a [`Review`].
pub struct Side {
    /// Its generation.
    pub gen: u64,
    /// Its timestamp.
    pub ts: String,
    /// The key id its `sign` line names (its signature is checked by
    /// `verify` under trusted keys, not here).
    pub keyid: Option<String>,
    /// The training step and epoch its producer recorded (a Trainer's
    /// `global_step`, `epoch`), as written.
    pub step: Option<String>,
    /// See `step`.
    pub epoch: Option<String>,
}

/// `wtxt diff --format markdown`: [`diff`] with relative changes, and the
/// two headers' facts.
pub fn review(old: &Path, new: &Path, unseal: Option<&Unseal>) -> Result<Review> {
    let diff = diff_with(old, new, unseal, true)?;
    let header = |p: &Path| -> Result<crate::format::read::Header> {
        let mut w = WtxtIn::open(p, unseal)?;
        crate::format::read::read_head(&mut w.lines()).map_err(|e| e.in_file(p))
    };
    let (a, b) = (header(old)?, header(new)?);
    // The step is read unverified, from the metadata: the diff itself
    // reports a side whose check fails.
    let names = |p: &Path| super::check::named_outline(p).ok().flatten().map(|o| o.names).unwrap_or_default();
    Ok(review_of(diff, [(&a, &names(old)), (&b, &names(new))]))
}

/// The review of `diff` between two sides of these headers and producer's names.
pub(super) fn review_of(diff: crate::git::diff::FileDiff, sides: [(&Header, &OriginalNames); 2]) -> Review {
    let [(a, _), (b, _)] = sides;
    let continues = match (&a.root, &b.root) {
        (Root::Final { merkle_this, .. }, Root::Final { merkle_prev, .. }) => {
            merkle_prev == merkle_this && b.meta.gen == a.meta.gen.saturating_add(1)
        }
        _ => false,
    };
    let side = |(h, names): (&Header, &OriginalNames)| -> Side {
        let (step, epoch) = names.step_and_epoch();
        Side {
            gen: h.meta.gen,
            ts: h.meta.ts.as_str().to_string(),
            keyid: h.sign.as_ref().map(|s| hex::encode(s.keyid)),
            step: step.map(str::to_string),
            epoch: epoch.map(str::to_string),
        }
    };
    Review { old: side(sides[0]), new: side(sides[1]), continues, diff }
}

fn diff_with(old: &Path, new: &Path, unseal: Option<&Unseal>, norms: bool) -> Result<crate::git::diff::FileDiff> {
    let (mut a, mut b) = (WtxtIn::open(old, unseal)?, WtxtIn::open(new, unseal)?);
    let names = crate::git::diff::Names { old, new };
    let mut d = if norms {
        crate::git::diff::diff_norms(a.text(), b.text(), names)?
    } else {
        crate::git::diff::diff(a.text(), b.text(), names)?
    };
    let check =
        |p: &Path| WtxtIn::verify_path(p, unseal, &Default::default()).ok()?.errors.first().map(|p| p.to_error());
    crate::git::diff::explain(&mut d, names, &check);
    d.name_originals(&crate::convert::names::originals_of(old), &crate::convert::names::originals_of(new));
    Ok(d)
}

/// Options of `wtxt merge`.
pub struct MergeOptions {
    /// What settles a conflict by default.
    pub strategy: crate::git::merge::Strategy,
    /// What settles given arrays and chunks.
    pub decisions: crate::git::merge::Decisions,
    /// Timestamp of the result; default `SOURCE_DATE_EPOCH`, else the later
    /// of the two sides (so a merge is deterministic).
    pub ts: Option<String>,
    /// What the three inputs must prove (HMAC key, trusted keys, signer's
    /// key); the result is HMAC'd and signed with them.
    pub keys: Keys,
    /// How the result is stored.
    pub output: Output,
}

/// What `merge` did.
pub struct MergeOutcome {
    /// Every conflict, settled or not.
    pub conflicts: Vec<crate::git::merge::Conflict>,
    /// Written only when every conflict was settled.
    pub written: Option<Written>,
    /// The result's generation.
    pub gen: u64,
}

/// One side of a merge, verified whole; arrays equal to one of `known`'s
/// (by verified SHA-256) are shared with it, not held again.
fn load_side(
    path: &Path,
    opts: &VerifyOptions,
    known: &[&crate::format::Loaded],
) -> Result<Option<crate::format::Loaded>> {
    let mut input = WtxtIn::open(path, None)?;
    if input.len == 0 {
        return Ok(None); // Git passes an empty base when there is no common ancestor.
    }
    crate::format::Load { known, ..Default::default() }
        .run(input.text(), input.len, opts)
        .map(Some)
        .map_err(|e| input.blame(e))
}

/// `wtxt merge`: three-way at chunk granularity. The result is a canonical
/// WTXT with gen = max + 1 and merkle_prev = ours' merkle_this; nothing is
/// written while a conflict is unsettled.
pub fn merge(base: &Path, ours: &Path, theirs: &Path, out: &Path, o: &MergeOptions) -> Result<MergeOutcome> {
    // Nothing is signed or HMACed that was not verified first: the three
    // inputs must satisfy the trust policy.
    // Each side is held once: most arrays of three generations are equal.
    let trust = o.keys.trust();
    let vopts = trust.options();
    let empty = |p: &Path| Error::input(Default::default(), "empty file").in_file(p);
    let ours_l = load_side(ours, &vopts, &[])?.ok_or_else(|| empty(ours))?;
    let theirs_l = load_side(theirs, &vopts, &[&ours_l])?.ok_or_else(|| empty(theirs))?;
    let b = load_side(base, &vopts, &[&ours_l, &theirs_l])?;
    let (Root::Final { merkle_this: ours_this, sha256_all: ours_all, .. }, Root::Final { sha256_all: theirs_all, .. }) =
        (&ours_l.header.root, &theirs_l.header.root)
    else {
        return Err(Error::check(Default::default(), "cannot merge a WTXT-S: finalize it first"));
    };
    let rows = ours_l.rows_per_chunk.or(theirs_l.rows_per_chunk).unwrap_or(DEFAULT_ROWS_PER_CHUNK);
    let base_arrays = b.as_ref().map_or(&[][..], |l| &l.arrays[..]);
    // Conflicts are shown, and decisions may be given, by the model's names.
    let names = crate::convert::names::OriginalNames::of(&ours_l.arrays)?.unwrap_or_default().names;
    let decisions = o.decisions.by_wtxt_name(&names);
    let mut merged =
        crate::git::merge::merge(base_arrays, &ours_l.arrays, &theirs_l.arrays, rows, o.strategy, &decisions)?;
    for c in &mut merged.conflicts {
        c.original = names.get(&c.array).cloned();
    }
    let (om, tm) = (&ours_l.header.meta, &theirs_l.header.meta);
    let gen = om.gen.max(tm.gen).checked_add(1).ok_or_else(|| Error::usage("gen overflows"))?;
    if merged.unsettled().next().is_some() {
        return Ok(MergeOutcome { conflicts: merged.conflicts, written: None, gen });
    }
    let ts = match (&o.ts, std::env::var_os("SOURCE_DATE_EPOCH")) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(_)) => None,
        (None, None) => Some(om.ts.as_str().max(tm.ts.as_str()).to_string()),
    };
    let meta = Meta { gen, ts: Meta::new(gen, ts.as_deref())?.ts, ..om.clone() };
    let settled = merged.conflicts.len();
    let audit = Audit {
        pairs: vec![
            ("merge_ours".into(), hex::encode(&ours_all[..8])),
            ("merge_theirs".into(), hex::encode(&theirs_all[..8])),
            ("settled_conflicts".into(), settled.to_string()),
        ],
    };
    let opts = WriteOptions {
        merkle_prev: *ours_this,
        hmac_key: o.keys.hmac_key.as_ref(),
        sign_key: o.keys.sign_key.as_ref(),
        audit: Some(audit),
        digest: ours_l.header.digest(),
        ..WriteOptions::new(meta, rows)
    };
    let written = write_wtxt(&merged.arrays, &opts, out, o.output.part_size, None, &Progress::hidden())?;
    oms_sign_written(out, o.keys.oms_key.as_ref())?;
    Ok(MergeOutcome { conflicts: merged.conflicts, written: Some(written), gen })
}

/// What `wtxt git resolve` merged, and from where.
pub struct Resolved {
    /// What the merge did.
    pub outcome: MergeOutcome,
    /// `merge`, `cherry-pick`, `revert` or `rebase`.
    pub operation: &'static str,
    /// The other side's commit, abbreviated.
    pub theirs: String,
}

/// `wtxt git resolve PATH`: Git merges a split snapshot's head and parts
/// file by file, which cannot merge the model. The snapshot's three
/// versions (head and parts from the commits of the operation in
/// progress) are exported, merged whole by [`merge`] (the same checks,
/// strategies and signing), written to PATH and staged with `git add`.
/// Nothing is written or staged while a conflict is unsettled.
pub fn resolve(dir: &Path, path: &Path, o: &MergeOptions) -> Result<Resolved> {
    use crate::git::history;
    let (repo, rel) = history::open(dir, Some(path))?;
    let rel = rel.expect("a path was given");
    let work =
        repo.workdir().ok_or_else(|| Error::usage("a bare repository: resolve a merge in a work tree"))?.to_path_buf();
    let op = history::in_progress(&repo)?;
    let tmp = tempfile::Builder::new()
        .prefix("wtxt-resolve")
        .tempdir_in(repo.path())
        .map_err(|e| Error::io(repo.path(), e))?;
    let has = |c: git2::Oid| repo.find_commit(c).and_then(|c| c.tree()).is_ok_and(|t| t.get_path(&rel).is_ok());
    let side = |c: Option<git2::Oid>, name: &str| -> Result<PathBuf> {
        let out = tmp.path().join(format!("{name}.wtxt"));
        match c.filter(|&c| has(c)) {
            Some(c) => {
                export(&work, &c.to_string(), &rel, &out, crate::format::split::PartSize::Whole)?;
            }
            // No common version: an empty base, as Git gives its drivers.
            None if name == "base" => crate::fs::write_file(&out, b"", 0o600)?,
            None => return Err(Error::usage(format!("{}: not in {name}'s commit: nothing to merge", rel.display()))),
        }
        Ok(out)
    };
    let head = repo.head().and_then(|h| h.peel_to_commit()).map_err(crate::odb::git_err)?;
    let (base, ours, theirs) =
        (side(op.base, "base")?, side(Some(head.id()), "ours")?, side(Some(op.theirs), "theirs")?);
    let target = work.join(&rel);
    // A problem in a side is named by its commit and path, not by the
    // temporary copy (gone once this returns).
    let short = |c: Option<git2::Oid>| c.map_or("(none)".to_string(), |c| c.to_string()[..10].to_string());
    let sides = [(&base, short(op.base)), (&ours, short(Some(head.id()))), (&theirs, short(Some(op.theirs)))];
    let named = |p: &Path| {
        let (_, commit) = sides.iter().find(|(s, _)| s.as_path() == p)?;
        Some(PathBuf::from(format!("{commit}:{}", rel.display())))
    };
    let outcome = merge(&base, &ours, &theirs, &target, o).map_err(|e| e.renamed(named))?;
    if outcome.written.is_some() {
        crate::git::commit::stage_snapshot(&repo, &rel, o.keys.oms_key.is_some())?;
    }
    let theirs = op.theirs.to_string()[..10].to_string();
    Ok(Resolved { outcome, operation: op.operation, theirs })
}

/// What Git's `textconv` shows for `file` (`git log -p`, `git show`): the
/// listing of a WTXT (a single file, a head, a part). Git passes no blob
/// name here, and in a filter repository `file` is the smudged container:
/// cleaning it gives the committed arrays and chunks (clean is canonical)
/// but a header of its own (gen, ts, hashes) that is in no commit, so
/// that header is left out and a line says so.
pub fn textconv(file: &Path, here: &Path) -> Result<String> {
    use crate::git::parts::open_text;
    if let Some(f) = open_text(file)? {
        return crate::git::parts::textconv_part(&f, file);
    }
    let wtxt = crate::git::filter::as_wtxt(file, here, &file.to_string_lossy())?;
    let arrays = crate::git::textconv::textconv_arrays(&wtxt[..]).map_err(|e| e.in_file(file))?;
    Ok(format!("(a filter's file: the committed header is not shown; `wtxt log` or `git diff` show it)\n{arrays}"))
}

/// What Git's external diff shows, for the binary to render: `args` are Git's `PATH OLD OLD-HEX
/// OLD-MODE NEW NEW-HEX NEW-MODE` (a side that does not exist is
/// /dev/null). Each side is the blob Git names when the repository around
/// `here` has it: in a filter repository the work-tree file is the smudged
/// container, and cleaning it again would invent a header (a new gen, a new
/// ts) that is in no commit. Otherwise (an uncommitted work-tree side) the
/// file, cleaned if a filter made it. Problems are part of the view, never
/// an error: Git treats a failing external diff as fatal.
pub fn diff_driver(args: &[String], here: &Path) -> DriverView {
    use crate::git::diff::Names;
    use crate::git::parts::{classify, diff_heads, diff_parts, open_text, Blob};
    use crate::odb::blob::Text;
    let [path, old, old_hex, _, new, new_hex, _] = args else {
        return DriverView { path: String::new(), shown: Shown::BadArguments(args.len()) };
    };
    let repo = git2::Repository::discover(here).ok();
    // Both sides' blobs from one reader: the older one is usually a delta
    // on the newer, whose base it then keeps.
    let blobs = repo.as_ref().map(|r| std::cell::RefCell::new(crate::odb::blob::Blobs::new(r)));
    // A side is the file Git wrote when it holds WTXT text (read as a
    // stream, so a part or a single file is never held whole), else the
    // blob it names (a filter smudged the file into a container).
    let side = |file: &str, hex: &str| -> Result<Box<dyn Text>> {
        if let Ok(Some(f)) = open_text(Path::new(file)) {
            return Ok(Box::new(f));
        }
        let blob = repo.as_ref().zip(blobs.as_ref()).and_then(|(r, b)| {
            let oid = git2::Oid::from_str(hex).ok().filter(|o| !o.is_zero())?;
            crate::odb::blob::size(r, oid).is_ok().then_some((b, oid))
        });
        match blob {
            Some((b, oid)) => b.borrow_mut().text(oid),
            None => Ok(Box::new(crate::git::filter::as_wtxt(Path::new(file), here, path)?)),
        }
    };
    let one = |file: &str, hex: &str| side(file, hex).and_then(|t| inspect_reader(t.stream()));
    let view = |shown| DriverView { path: path.clone(), shown };
    if old == "/dev/null" {
        return view(Shown::Added(one(new, new_hex)));
    }
    if new == "/dev/null" {
        return view(Shown::Deleted(one(old, old_hex)));
    }
    let (a, b) = (format!("a/{path}"), format!("b/{path}"));
    let d = side(old, old_hex).and_then(|x| {
        let y = side(new, new_hex)?;
        let names = Names { old: Path::new(&a), new: Path::new(&b) };
        // A split snapshot's head and parts are Git files of their own, each diffed from its blob.
        // A head or part holds no `__names`: the model's names come from the
        // snapshot at this path in the work tree (display only).
        let snapshot_names = |head: &Path| {
            let work = repo.as_ref().and_then(|r| r.workdir().map(Path::to_path_buf)).unwrap_or_default();
            crate::convert::names::originals_of(&work.join(head))
        };
        match (classify(&*x)?, classify(&*y)?) {
            (Blob::Head(hx), Blob::Head(hy)) => {
                let n = snapshot_names(Path::new(path));
                let mut d = diff_heads(&hx, &hy, names, &n)?;
                d.name_originals(&n, &n);
                Ok(d)
            }
            (Blob::Part, Blob::Part) => {
                let mut d = diff_parts(&*x, &*y, names)?;
                if let Some(head) = crate::git::parts::head_of_part(Path::new(path)) {
                    let n = snapshot_names(&head);
                    d.name_originals(&n, &n);
                }
                Ok(d)
            }
            _ => {
                let mut d = crate::git::diff::diff(x.stream(), y.stream(), names)?;
                let check = |p: &Path| {
                    let t = if p == names.old { &x } else { &y };
                    let report = crate::format::verify::verify(t.stream(), &Default::default(), None).ok()?;
                    report.errors.first().map(|p| p.to_error())
                };
                crate::git::diff::explain(&mut d, names, &check);
                d.name_originals(
                    &crate::convert::names::originals_of(Path::new(old)),
                    &crate::convert::names::originals_of(Path::new(new)),
                );
                Ok(d)
            }
        }
    });
    view(match d {
        Ok(d) => Shown::Diff(d),
        Err(e) => Shown::Failed(e.to_string()),
    })
}

/// What the diff driver found for one path.
pub struct DriverView {
    /// The path in the repository.
    pub path: String,
    /// What to show.
    pub shown: Shown,
}

/// What the diff driver shows.
pub enum Shown {
    /// A new file: what it holds, or why it cannot be read.
    Added(Result<Inspection>),
    /// A deleted file: what it held, or why it cannot be read.
    Deleted(Result<Inspection>),
    /// Both sides: their difference (sides named `a/PATH`, `b/PATH`).
    Diff(crate::git::diff::FileDiff),
    /// The diff could not be made, and why.
    Failed(String),
    /// Git gave this many arguments, not 7 (there is no path to name).
    BadArguments(usize),
}
