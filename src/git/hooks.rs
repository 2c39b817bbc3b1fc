//! `wtxt hook pre-commit`: what every staged `.wtxt` and `.wtxtdelta` must
//! satisfy before it enters history.
//!
//! For a `.wtxt`, on the staged blob (not the work tree): strict
//! verification, exactly what `wtxt verify` does with the repository's keys
//! and policy (a split snapshot is its head joined with the staged parts,
//! every part read and hashed); for a single file, canonical form
//! (re-emitting gives the same bytes); a valid
//! signature by a trusted key when `wtxt.requireSignature` is set (keys from
//! `wtxt.trustedKeys`); and, when HEAD has the file, `gen` = HEAD's + 1 and
//! `merkle_prev` = HEAD's `merkle_this`. For a `.wtxtdelta`: its structure and
//! every chunk it carries (parity, CRC32C, SHA-256). A file a `wtxt-*` filter
//! carries is checked as a `.wtxt` from its staged blob (the clean filter's
//! output); its work-tree copy is the smudged binary, never read.

use std::io::{Read, Seek};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use git2::{Repository, Status, StatusOptions, StatusShow};

use crate::crypto::digest::{fingerprint_key, Fingerprint};
use crate::error::{Error, Result};
use crate::format::split::{part_name, Head};
use crate::format::syntax::Root;
use crate::format::verify::{ProblemKind, SigStatus, VerifyOptions};
use crate::git::parts::{classify, Blob, BlobParts};
use crate::odb::git_err;
use crate::progress::Progress;
use crate::store::input::{PartReading, WtxtIn};
use crate::store::parts_dir;

/// A staged file that fails, with what to do about it.
#[derive(Clone, Debug)]
pub struct Refusal {
    /// The staged path.
    pub path: String,
    /// Line of the problem (0: the file as a whole).
    pub line: u64,
    /// What is wrong.
    pub problem: String,
    /// What to do about it.
    pub fix: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.line > 0 { format!("line {}: ", self.line) } else { String::new() };
        write!(f, "{}: {at}{} (fix: {})", self.path, self.problem, self.fix)
    }
}

/// What the hook found: how many staged WTXT files it checked, why some
/// may not be committed, and warnings that do not stop the commit.
pub struct Checked {
    /// Staged snapshots checked.
    pub staged: usize,
    /// What refuses the commit.
    pub refusals: Vec<Refusal>,
    /// Warnings that do not.
    pub notes: Vec<String>,
}

/// Checks every staged WTXT file of the repository around `dir`.
pub fn pre_commit(dir: &Path) -> Result<Checked> {
    let repo = open_for_hook(dir)?;
    let policy = super::config::Policy::of(&repo)?;
    let checks = policy.options();
    let index = repo.index().map_err(git_err)?;
    let head_tree = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
    // What is staged: HEAD's tree against the index only. The work tree is
    // not compared (libgit2 would read and hash every file whose stat
    // changed, whole: a touched 1.4 GB snapshot cost 4 GB and 30 s).
    let mut opts = StatusOptions::new();
    opts.show(StatusShow::Index).include_untracked(false).include_ignored(false);
    let statuses = repo.statuses(Some(&mut opts)).map_err(git_err)?;
    let mut refusals = private_keys_staged(&repo, &index, &statuses)?;
    // Each staged path with the wtxt filter its attributes give (looked up once).
    let with_filter = |p: PathBuf| {
        let filter = wtxt_filter(&repo, &p);
        (p, filter)
    };
    let mut staged: Vec<(PathBuf, Option<String>)> = statuses
        .iter()
        .filter(|e| e.status().intersects(Status::INDEX_NEW | Status::INDEX_MODIFIED | Status::INDEX_RENAMED))
        .filter_map(|e| e.path().ok().map(PathBuf::from))
        .map(with_filter)
        .filter(|(p, filter)| {
            matches!(p.extension().and_then(|e| e.to_str()), Some("wtxt" | "wtxtdelta"))
                || is_part(p)
                || filter.is_some()
        })
        .collect();
    // A staged part is checked with its head, staged or not: a commit that
    // changes a part but not its head fails there.
    let heads_of_parts: Vec<(PathBuf, Option<String>)> =
        staged.iter().filter_map(|(p, _)| crate::git::parts::head_of_part(p)).map(with_filter).collect();
    staged.retain(|(p, _)| !is_part(p));
    staged.extend(heads_of_parts);
    staged.sort();
    staged.dedup();
    let mut notes = Vec::new();
    let part_size = super::config::configured_output(&repo)?.part_size;
    for (path, filter) in &staged {
        let Some(entry) = index.get_path(path, 0) else { continue };
        // The staged blob is streamed, never inflated whole: a single file
        // may hold a whole model.
        let open = || crate::odb::blob::reader(&repo, entry.id).map(std::io::BufReader::new);
        // A single file past the part size (written with `--part-size none`)
        // is the user's choice, but Git and the hosts pay for it: said, not
        // refused. (A head is a few KB: only a single file gets here.)
        let size = crate::odb::blob::size(&repo, entry.id)?;
        let over = part_size.limit().filter(|&limit| size > limit);
        if let (Some(limit), true) = (over, path.extension().is_some_and(|e| e == "wtxt")) {
            notes.push(format!(
                "{}: {size} bytes in one file, over the part size ({limit}): Git stores a file over \
                 core.bigFileThreshold (512 MiB) whole in every version, and GitHub refuses files over 100 MB; \
                 store it split with `wtxt split {} -o {}`",
                path.display(),
                path.display(),
                path.display()
            ));
        }
        let shown = path.display().to_string();
        let names = || repo.workdir().map(|w| crate::convert::names::originals_of(&w.join(path))).unwrap_or_default();
        let refuse = |line: u64, problem: String, fix: &str| Refusal {
            path: shown.clone(),
            line,
            problem,
            fix: fix.to_string(),
        };
        if path.extension().and_then(|e| e.to_str()) == Some("wtxtdelta") {
            if let Err(e) = open().and_then(check_delta) {
                refusals.push(refuse(line_of(&e), e.message().to_string(), "re-create it with `wtxt delta create`"));
            }
            continue;
        }
        // HEAD's version, for the chain: a head whole, of a single file
        // only its start (the header), never a whole large blob.
        let head = head_tree
            .as_ref()
            .and_then(|t| t.get_path(path).ok())
            .filter(|e| e.id() != entry.id)
            .and_then(|e| crate::odb::blob::prefix(&repo, e.id(), crate::format::split::MAX_HEAD + 1).ok());
        // A file a wtxt filter carries: its blob is the clean filter's WTXT,
        // checked as a single file; its work-tree copy is the smudged binary.
        let from_blob = || -> Result<Box<dyn Read + '_>> { Ok(Box::new(open()?)) };
        if let Some(filter) = filter {
            if checks.require_signature {
                refusals.push(refuse(
                    0,
                    format!("wtxt.requireSignature is set, and the {filter} filter does not sign"),
                    "keep signed snapshots as .wtxt files: `wtxt snapshot ... --sign-key KEY.pem`",
                ));
            } else if let Some(r) = check_wtxt(&from_blob, size, head.as_deref(), &checks, &names) {
                let fix = format!(
                    "stage it through the filter: `wtxt git install --filter {}` where it is missing, then `git add {shown}`",
                    filter.strip_prefix("wtxt-").unwrap_or(filter)
                );
                refusals.push(Refusal { path: shown.clone(), fix, ..r });
            }
            continue;
        }
        // A head is told from a single file by its start (a head is whole in it).
        let start = crate::odb::blob::prefix(&repo, entry.id, crate::format::split::MAX_HEAD + 1)?;
        if let Ok(Blob::Head(h)) = classify(&start) {
            let s = Split { repo: &repo, index: &index, path, head_len: size };
            if let Some(r) = s.check(h, head.as_deref(), &checks) {
                refusals.push(Refusal { path: if r.path.is_empty() { shown.clone() } else { r.path.clone() }, ..r });
            }
            continue;
        }
        // The work-tree copy when the index vouches for it before and after
        // it is read, else the blob.
        let rec = Recorded::of(&entry);
        let on_disk = repo.workdir().map(|w| w.join(path)).filter(|p| rec.vouched(p, index_written(&repo)));
        let mut verdict = None;
        if let Some(p) = &on_disk {
            let from_file = || -> Result<Box<dyn Read>> {
                Ok(Box::new(std::io::BufReader::new(std::fs::File::open(p).map_err(|e| Error::io(p, e))?)))
            };
            let v = check_wtxt(&from_file, size, head.as_deref(), &checks, &names);
            verdict = rec.vouched(p, index_written(&repo)).then_some(v);
        }
        let verdict = verdict.unwrap_or_else(|| check_wtxt(&from_blob, size, head.as_deref(), &checks, &names));
        if let Some(r) = verdict {
            refusals.push(Refusal { path: shown.clone(), ..r });
        }
    }
    Ok(Checked { staged: staged.len(), refusals, notes })
}

/// Staged files that are private keys: the path a key setting
/// (`wtxt.signKey`, `wtxt.omsKey`) names, or a small blob holding a PEM,
/// OpenSSH or age private key. A key committed once is in every clone.
fn private_keys_staged(repo: &Repository, index: &git2::Index, statuses: &git2::Statuses) -> Result<Vec<Refusal>> {
    /// Larger blobs are not keys (a key file is a few hundred bytes).
    const MAX_KEY_FILE: u64 = 64 << 10;
    const MARKERS: [&[u8]; 3] = [b"PRIVATE KEY-----", b"AGE-SECRET-KEY-1", b"AGE-PLUGIN-"];
    let work = repo.workdir().map(|w| std::fs::canonicalize(w).unwrap_or_else(|_| w.to_path_buf()));
    let mut named = Vec::new();
    for key in super::config::PRIVATE_KEY_SETTINGS {
        if let (Some(p), Some(w)) = (super::config::configured_file(repo, key)?, &work) {
            let p = std::fs::canonicalize(&p).unwrap_or(p);
            if let Ok(rel) = p.strip_prefix(w) {
                named.push((key, rel.to_path_buf()));
            }
        }
    }
    let mut out = Vec::new();
    let staged = statuses
        .iter()
        .filter(|e| e.status().intersects(Status::INDEX_NEW | Status::INDEX_MODIFIED | Status::INDEX_RENAMED))
        .filter_map(|e| e.path().ok().map(PathBuf::from));
    for path in staged {
        let Some(entry) = index.get_path(&path, 0) else { continue };
        let setting = named.iter().find(|(_, p)| *p == path).map(|(k, _)| *k);
        let is_key = setting.is_some()
            || (crate::odb::blob::size(repo, entry.id)? <= MAX_KEY_FILE && {
                let text = crate::odb::blob::prefix(repo, entry.id, MAX_KEY_FILE)?;
                MARKERS.iter().any(|m| text.windows(m.len()).any(|w| w == *m))
            });
        if is_key {
            let why = match setting {
                Some(k) => format!("the key `git config {k}` names"),
                None => "a private key".into(),
            };
            out.push(Refusal {
                path: path.display().to_string(),
                line: 0,
                problem: format!("{why}: a commit would give it to every clone"),
                fix: format!(
                    "`git rm --cached -- {}`, keep the key outside the work tree and point the setting there",
                    path.display()
                ),
            });
        }
    }
    Ok(out)
}

/// Once the staged snapshots passed: the loose blobs of their staged parts
/// moved into one pack, each stored whole (Huffman-coded) or as a delta
/// against its path's version in HEAD, which `git gc` and `git push` then
/// reuse as they are (docs/PERFORMANCE.md, "Git at 1 GiB"). Nothing when
/// `wtxt.packParts` is false. Returns how many blobs it packed.
pub fn pack_staged(dir: &Path) -> Result<usize> {
    crate::odb::objects::pack_staged_parts(dir)
}

/// A part's file name (in any letter case: a name that differs from a
/// part's only so is checked with its head, which refuses it).
fn is_part(p: &Path) -> bool {
    p.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("wtxtpart"))
}

/// The wtxt format filter (`wtxt-FORMAT`) Git's attributes give `path`, if
/// any (`wtxt-folder`, a folder snapshot's notice, keeps the file as it is).
fn wtxt_filter(repo: &Repository, path: &Path) -> Option<String> {
    let filter = repo.get_attr(path, "filter", git2::AttrCheckFlags::FILE_THEN_INDEX).ok()??;
    let format = filter.strip_prefix("wtxt-")?;
    crate::git::install::FILTER_FORMATS.contains(&format).then(|| filter.to_string())
}

fn line_of(e: &Error) -> u64 {
    match e.position() {
        crate::error::Position::Line(n) => n,
        _ => 0,
    }
}

fn check_delta(input: impl Read) -> Result<()> {
    crate::format::delta::check(input)
}

/// The first reason the staged text `open` gives (`len` bytes) may not be
/// committed, if any.
fn check_wtxt<R: Read>(
    open: &dyn Fn() -> Result<R>,
    len: u64,
    head: Option<&[u8]>,
    opts: &VerifyOptions,
    names: &Names,
) -> Option<Refusal> {
    let refusal =
        |line: u64, problem: String, fix: &str| Some(Refusal { path: String::new(), line, problem, fix: fix.into() });
    let unreadable = "not a readable WTXT: write it with `wtxt snapshot`";
    // Read once, fingerprinted as it is verified; compared below with the
    // writer's text for the same arrays.
    let read = |key: &[u8; 32]| -> Result<(std::result::Result<crate::format::Loaded, _>, blake3::Hash)> {
        let mut staged = Fingerprint::new(open()?, key);
        let loaded = crate::format::Load::default().run_or_report(&mut staged, len, opts)?;
        Ok((loaded, staged.finish_reading().map_err(Error::read_failed)?))
    };
    let key = match fingerprint_key() {
        Ok(k) => k,
        Err(e) => return refusal(0, e.message().to_string(), "try again"),
    };
    let (loaded, staged) = match read(&key) {
        Ok((Ok(l), fp)) => (l, fp),
        Ok((Err(report), _)) => return report_refusal(&report, names),
        Err(e) => return refusal(line_of(&e), e.message().to_string(), unreadable),
    };
    if opts.require_signature && loaded.report.signature != SigStatus::Valid {
        return refusal(
            5,
            format!("signature required, found {:?}", loaded.report.signature).to_lowercase(),
            "sign it with a trusted key",
        );
    }
    match is_canonical(&loaded, &key, staged) {
        Ok(true) => {}
        Ok(false) => {
            return refusal(
                0,
                "not in canonical form (re-emitting changes its bytes)".into(),
                "re-emit it: `wtxt snapshot FILE -o FILE` with the same --gen/--ts/--build",
            )
        }
        Err(e) => return refusal(0, e.message().to_string(), "write it again with `wtxt snapshot`"),
    }
    chain_refusal(&loaded.header, head?)
}

/// The model's names of a staged snapshot's arrays (WTXT name to
/// original), read from its work-tree copy when a message needs them:
/// display only, no decision depends on them.
type Names<'a> = dyn Fn() -> std::collections::BTreeMap<String, String> + 'a;

/// Why a file that failed verification may not be committed (`None`: it did not fail).
fn report_refusal(report: &crate::format::verify::Report, names: &Names) -> Option<Refusal> {
    let mut report = report.clone();
    if report.errors.iter().any(|e| e.array.is_some()) {
        report.name_originals(&names());
    }
    let p = report.first_error()?;
    let problem = if p.array.is_none() { format!("{}{}", p.text(), report.failing_arrays()) } else { p.text() };
    let fix = match p.kind {
        ProblemKind::RootPending => "finalize it first: `wtxt finalize FILE -o FILE.wsum --rewrite FILE`",
        ProblemKind::Signature => "sign it with a trusted key: `wtxt snapshot ... --sign-key KEY.pem`",
        ProblemKind::Binding => "write it again with `wtxt snapshot ... --hmac-key KEY`, which binds it whole",
        _ => "the file is damaged: write it again with `wtxt snapshot`, or `wtxt recover` it",
    };
    let path = p.file.clone().unwrap_or_default();
    Some(Refusal { path, line: p.line, problem, fix: fix.into() })
}

/// Whether the writer re-emits the staged text (fingerprinted as `staged`
/// with `key`) byte for byte. A signature needs the key, so the staged
/// `sign` line is put where the writer would put it. The text goes to an
/// unnamed temporary file: neither side is held whole.
fn is_canonical(loaded: &crate::format::Loaded, key: &[u8; 32], staged: blake3::Hash) -> Result<bool> {
    let tmp = std::env::temp_dir();
    let mut canonical = std::io::BufWriter::new(tempfile::tempfile().map_err(|e| Error::io(&tmp, e))?);
    crate::format::write_canonical(loaded, &mut canonical)?;
    let mut canonical = canonical.into_inner().map_err(|e| Error::io(&tmp, e.into_error()))?;
    canonical.rewind().map_err(|e| Error::io(&tmp, e))?;
    let mut canonical = std::io::BufReader::new(canonical);
    // Lines 1-4, the staged `sign` line, the rest.
    let mut start = vec![0; loaded.header.signed_bytes.len()];
    if canonical.read_exact(&mut start).is_err() {
        return Ok(false);
    }
    let mut sign = String::new();
    if let Some(s) = &loaded.header.sign {
        s.write(&mut sign);
        sign.push('\n');
    }
    let text = std::io::Cursor::new(start).chain(sign.as_bytes()).chain(canonical);
    Ok(Fingerprint::new(text, key).finish_reading().map_err(|e| Error::io(&tmp, e))? == staged)
}

/// Why `header` does not continue HEAD's version `head` (a single file or a head).
fn chain_refusal(header: &crate::format::read::Header, head: &[u8]) -> Option<Refusal> {
    let refusal =
        |line: u64, problem: String, fix: &str| Some(Refusal { path: String::new(), line, problem, fix: fix.into() });
    let Ok(prev) = crate::format::read::read_header(&mut crate::format::read::LineReader::new(head)) else {
        return None; // HEAD's version is not a WTXT: nothing to continue
    };
    let (Root::Final { merkle_this: prev_this, .. }, Root::Final { merkle_prev, .. }) = (&prev.root, &header.root)
    else {
        return None;
    };
    let fix = "write it with `--prev` set to HEAD's version: `git show HEAD:PATH > prev.wtxt; wtxt snapshot ... --prev prev.wtxt`";
    if header.meta.gen <= prev.meta.gen {
        return refusal(
            2,
            format!("gen {} does not follow HEAD's {}", header.meta.gen_str(), prev.meta.gen_str()),
            fix,
        );
    }
    if merkle_prev != prev_this {
        return refusal(4, "merkle_prev is not HEAD's merkle_this".into(), fix);
    }
    None
}

/// A staged split snapshot: its head, and its parts in the index.
struct Split<'r> {
    repo: &'r Repository,
    index: &'r git2::Index,
    path: &'r Path,
    /// The staged head's size.
    head_len: u64,
}

impl Split<'_> {
    /// The whole snapshot, as `wtxt verify` reads it: the head joined with
    /// the parts the index holds (each hashed and framed as the head says,
    /// none missing, none extra), then every chunk, array SHA-256,
    /// `sha256_all`, the root, the signature under the repository's policy;
    /// then the chain to HEAD's version. No part is skipped because HEAD
    /// had it: the signature binds the data only through `sha256_all`,
    /// which needs every byte.
    fn check(&self, h: Head, prev: Option<&[u8]>, opts: &VerifyOptions) -> Option<Refusal> {
        let damaged = "the file is damaged: write it again with `wtxt snapshot`, or `wtxt recover` it";
        let refusal = |e: &Error, fix: &str| {
            let path = e.path().map(|p| p.display().to_string()).unwrap_or_default();
            Some(Refusal { path, line: line_of(e), problem: e.message().to_string(), fix: fix.into() })
        };
        let header = match h.header() {
            Ok(x) => x,
            Err(e) => return refusal(&e, damaged),
        };
        let source = BlobParts::of_index(self.repo, self.index, self.path, &h).with_local(self.work_tree_copies(&h));
        let report = match WtxtIn::joined(h, Box::new(source), self.path, self.head_len, PartReading::Lenient)
            .verify(opts, &Progress::hidden())
        {
            Ok(r) => r,
            Err(e) => return refusal(&e, damaged),
        };
        if let Some(mut r) = report_refusal(&report, &|| crate::convert::names::originals_of(&self.work_path())) {
            if r.path == self.path.display().to_string() {
                r.path.clear();
            }
            if report.first_error().is_some_and(|p| p.kind == ProblemKind::Part) {
                r.fix = format!(
                    "stage the head and its parts together: `git add {} {}`",
                    self.path.display(),
                    parts_dir(self.path).display()
                );
            }
            return Some(r);
        }
        chain_refusal(&header, prev?)
    }

    /// The snapshot's path in the work tree.
    fn work_path(&self) -> PathBuf {
        self.repo.workdir().unwrap_or(Path::new(".")).join(self.path)
    }

    /// The work-tree copy of a staged part, while the index vouches for it
    /// (before and after it is read): it spares inflating the blob.
    fn work_tree_copies(&self, h: &Head) -> crate::git::parts::LocalCopy {
        let Some(workdir) = self.repo.workdir().map(Path::to_path_buf) else { return Box::new(|_, _| None) };
        let dir = parts_dir(self.path);
        let recorded: std::collections::HashMap<u64, Recorded> = h
            .parts
            .iter()
            .filter_map(|p| Some((p.ix, Recorded::of(&self.index.get_path(&dir.join(part_name(p.ix)), 0)?))))
            .collect();
        let index_written = index_written(self.repo);
        Box::new(move |ix, id| {
            let rec = recorded.get(&ix).filter(|r| r.id == id)?;
            let path = workdir.join(&dir).join(part_name(ix));
            if !rec.vouched(&path, index_written) {
                return None;
            }
            let file = crate::fs::open_no_follow(&path).ok()?;
            Some(Box::new(Vouched { file, rec: rec.clone(), path, index_written }))
        })
    }
}

/// A work-tree copy the index vouched for when it was opened; at its end
/// the index must still vouch for it, or the read fails.
struct Vouched {
    file: std::fs::File,
    rec: Recorded,
    path: PathBuf,
    index_written: Option<(i64, i64)>,
}

impl Read for Vouched {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        if n == 0 && !buf.is_empty() && !self.rec.vouched(&self.path, self.index_written) {
            return Err(std::io::Error::other("the work-tree copy changed while it was read: commit again"));
        }
        Ok(n)
    }
}

/// What the index recorded of a work-tree file when it was staged.
#[derive(Clone)]
struct Recorded {
    id: git2::Oid,
    size: u32,
    mtime: (i32, u32),
    ctime: (i32, u32),
    ino: u32,
    dev: u32,
}

impl Recorded {
    fn of(e: &git2::IndexEntry) -> Recorded {
        Recorded {
            id: e.id,
            size: e.file_size,
            mtime: (e.mtime.seconds(), e.mtime.nanoseconds()),
            ctime: (e.ctime.seconds(), e.ctime.nanoseconds()),
            ino: e.ino,
            dev: e.dev,
        }
    }

    /// Whether the work-tree file holds the staged bytes, as `git status`
    /// decides it: the same size, modification and change times (the kernel
    /// sets the change time; no one can put it back), inode (and device,
    /// where recorded) as at `git add`, and modified before the index was
    /// written (not "racily clean"). Reading it spares inflating the blob.
    fn vouched(&self, path: &Path, index_written: Option<(i64, i64)>) -> bool {
        let Ok(m) = std::fs::symlink_metadata(path) else { return false };
        m.is_file()
            && m.size() as u32 == self.size
            && (m.mtime() as i32, m.mtime_nsec() as u32) == self.mtime
            && (m.ctime() as i32, m.ctime_nsec() as u32) == self.ctime
            && m.ino() as u32 == self.ino
            && (self.dev == 0 || m.dev() as u32 == self.dev) // libgit2 records none
            && index_written.is_some_and(|w| (m.mtime(), m.mtime_nsec()) < w)
    }
}

/// When the index being committed was last written (see [`Recorded::vouched`]).
fn index_written(repo: &Repository) -> Option<(i64, i64)> {
    let path = repo.index().ok()?.path()?.to_path_buf();
    std::fs::metadata(path).ok().map(|m| (m.mtime(), m.mtime_nsec()))
}

/// The repository around `dir` as a hook Git runs sees it: with the index
/// Git is committing. `git commit -a` and `git commit PATH` stage into a
/// temporary index named by `GIT_INDEX_FILE`; `.git/index` then holds the
/// previous state, and checking it would pass what is being committed
/// unread.
pub fn open_for_hook(dir: &Path) -> Result<git2::Repository> {
    let repo = git2::Repository::discover(dir).map_err(crate::odb::git_err)?;
    if let Some(file) = std::env::var_os("GIT_INDEX_FILE").filter(|f| !f.is_empty()) {
        // Relative to the directory Git ran the hook in.
        let path = std::path::absolute(Path::new(&file)).map_err(|e| crate::error::Error::io(Path::new(&file), e))?;
        let mut index = git2::Index::open(&path).map_err(crate::odb::git_err)?;
        repo.set_index(&mut index).map_err(crate::odb::git_err)?;
    }
    Ok(repo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_as_one_line_with_or_without_a_line_number() {
        let r = |line| Refusal { path: "m.wtxt".into(), line, problem: "bad".into(), fix: "fix it".into() };
        assert_eq!(r(0).to_string(), "m.wtxt: bad (fix: fix it)");
        assert_eq!(r(7).to_string(), "m.wtxt: line 7: bad (fix: fix it)");
        // A temporary copy's name gives way to what it is a copy of.
        let e = crate::error::check_at(3, "x").in_file("/tmp/t/ours.wtxt");
        let e = e.renamed(|p| (p == Path::new("/tmp/t/ours.wtxt")).then(|| PathBuf::from("abc:m.wtxt")));
        assert_eq!(e.to_string(), "abc:m.wtxt: line 3: x");
    }

    #[test]
    fn the_work_tree_copy_is_used_only_while_the_index_vouches_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let file = dir.path().join("p.wtxtpart");
        std::fs::write(&file, b"staged bytes\n").unwrap();
        // Past the file system's timestamp granularity, so the entry is not racily clean.
        std::thread::sleep(std::time::Duration::from_millis(30));
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("p.wtxtpart")).unwrap();
        index.write().unwrap();
        let written = |repo: &Repository| {
            let m = std::fs::metadata(repo.path().join("index")).unwrap();
            Some((m.mtime(), m.mtime_nsec()))
        };
        let rec = Recorded::of(&index.get_path(Path::new("p.wtxtpart"), 0).unwrap());
        assert!(rec.vouched(&file, written(&repo)));
        // Written again, even with the same bytes: the change time moved, so the blob is read.
        std::fs::write(&file, b"staged bytes\n").unwrap();
        assert!(!rec.vouched(&file, written(&repo)));
        // Racily clean (changed as late as the index was written): the blob is read.
        let rec = Recorded::of(&index.get_path(Path::new("p.wtxtpart"), 0).unwrap());
        let m = std::fs::metadata(&file).unwrap();
        assert!(!rec.vouched(&file, Some((m.mtime(), m.mtime_nsec()))));
    }
}
