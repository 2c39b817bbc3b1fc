//! The snapshot thread's stages, off the hot path: write the canonical WTXT
//! into the ring (temp file, fsync, rename), the DELTA v2 from the previous
//! one, optional age armor, a Git commit with `git2`, a push, and a resend
//! queue on disk for pushes that failed. A write-ahead log records every
//! request and every finished snapshot.
#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::crypto::armor::Seal;
use crate::crypto::digest::Hash;
use crate::error::{Error, Result};
use crate::format::layout::DEFAULT_ROWS_PER_CHUNK;
use crate::format::syntax::Meta;
use crate::format::syntax::Root;
use crate::format::write::WriteOptions;
use crate::model::Array;
use crate::options::Keys;
use crate::progress::Progress;
use crate::store::input::WtxtIn;

/// How the pipeline is set up.
pub struct PipelineConfig {
    /// The ring folder: last `keep` snapshots, their deltas, WAL, resend queue.
    pub ring: PathBuf,
    /// Snapshots kept in the ring (with a repository, the newest whole and
    /// the last `keep` deltas: each commit holds its generation).
    pub keep: usize,
    /// A Git work tree to commit snapshots into (none: ring only).
    pub repo: Option<PathBuf>,
    /// Path of the snapshot inside the repository.
    pub path_in_repo: PathBuf,
    /// Remote to push to after each commit (none: no push).
    pub remote: Option<String>,
    /// The keys: `sign_key` signs every snapshot, `hmac_key` HMACs every
    /// array, `oms_key` signs each committed snapshot's folder with an OMS
    /// `model.sig`; `trusted` is what a WTXT input must be signed by.
    pub keys: Keys,
    /// age recipients: the committed file is armored.
    pub recipients: Vec<String>,
    /// Rows per chunk of arrays of rank >= 2.
    pub rows_per_chunk: u64,
    /// The `build` token of every snapshot.
    pub build: String,
    /// Commit message; `{gen}`, `{sha256_all}` and `{step}` are filled in
    /// (`{step}`: ` step=N` or ` epoch=N` from the metadata the producer
    /// published with the state, `global_step`, `step` or `epoch`; empty
    /// when it published none).
    pub message: String,
    /// Told at once of every background failure (also kept in `last_error`).
    pub log: Option<super::log::Log>,
    /// Largest file of a snapshot (split above it), in the ring and the repository.
    pub part_size: crate::format::split::PartSize,
    /// The digest form of every snapshot.
    pub digest: crate::format::syntax::DigestForm,
    /// Set when the pipeline is shutting down: a push then waits on a
    /// silent remote `git::push::SHUTDOWN_STALL`, not `git::push::PUSH_STALL`.
    pub stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PipelineConfig {
    /// A ring-only pipeline in `ring`.
    pub fn new(ring: impl Into<PathBuf>) -> PipelineConfig {
        PipelineConfig {
            ring: ring.into(),
            keep: 8,
            repo: None,
            path_in_repo: PathBuf::from("snapshot.wtxt"),
            remote: None,
            keys: Keys::default(),
            recipients: Vec::new(),
            rows_per_chunk: DEFAULT_ROWS_PER_CHUNK,
            build: "daemon".into(),
            log: None,
            message: "wtxt snapshot gen={gen}{step} sha256_all={sha256_all}".into(),
            part_size: Default::default(),
            digest: Default::default(),
            stopping: Default::default(),
        }
    }
}

/// What the pipeline reports.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PipelineState {
    /// The newest generation written.
    pub last_gen: Option<u64>,
    /// Its `sha256_all`, hex.
    pub last_sha256_all: Option<String>,
    /// Snapshots written since start.
    pub snapshots_written: u64,
    /// Generations committed but not yet pushed (the resend queue; filled
    /// in from [`crate::daemon::pushes::Pushes`] where a status is read).
    pub resend_queue: Vec<u64>,
    /// The newest generation pushed.
    pub pushed_gen: Option<u64>,
    /// The last background failure, if any.
    pub last_error: Option<String>,
    /// Requests found in the WAL without a `done` whose state could not be had.
    pub lost: Vec<u64>,
    /// The commit of the last snapshot (hex).
    pub last_commit: Option<String>,
    /// Wall seconds each stage of the last snapshot took.
    pub last_stages: Option<Stages>,
}

/// Wall seconds of one snapshot's stages (zero for a stage not run).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Stages {
    /// Writing the WTXT into the ring.
    pub write: f64,
    /// The DELTA v2 from the previous generation.
    pub delta: f64,
    /// age armor.
    pub armor: f64,
    /// Putting it into the work tree and committing it.
    pub commit: f64,
    /// Pushing.
    pub push: f64,
}

impl Stages {
    /// The stages as one JSON object.
    pub fn to_json(self) -> String {
        serde_json::to_string(&self).expect("stages serialize")
    }
}

/// The write-ahead log: one line per request and per finished snapshot.
pub struct Wal {
    file: File,
}

impl Wal {
    /// Opens (creating) `ring/wal.log` for appending.
    pub fn open(ring: &Path) -> Result<Wal> {
        let p = ring.join("wal.log");
        let file = OpenOptions::new().create(true).append(true).open(&p).map_err(|e| Error::io(&p, e))?;
        Ok(Wal { file })
    }

    /// Appends one line with a single `write` (O_APPEND: lines never interleave).
    pub fn append(&self, line: &str) -> std::io::Result<()> {
        let mut b = Vec::with_capacity(line.len() + 1);
        b.extend_from_slice(line.as_bytes());
        b.push(b'\n');
        (&self.file).write_all(&b)
    }

    /// Requests without a `done` line: (gen, source path if any).
    pub fn pending(ring: &Path) -> Vec<(u64, Option<PathBuf>)> {
        let text = std::fs::read(ring.join("wal.log")).unwrap_or_default();
        Wal::parse_pending(&String::from_utf8_lossy(&text))
    }

    /// [`Wal::pending`] of a WAL's text. A torn last line is skipped.
    pub fn parse_pending(text: &str) -> Vec<(u64, Option<PathBuf>)> {
        let mut req: Vec<(u64, Option<PathBuf>)> = Vec::new();
        let mut done = std::collections::BTreeSet::new();
        for l in text.lines() {
            let field = |k: &str| l.split(' ').find_map(|f| f.strip_prefix(k)).map(str::to_string);
            let gen = field("gen=").and_then(|g| g.parse::<u64>().ok());
            // `pathhex=` holds the exact bytes; an older `path=` ran to the end of the line.
            let path = || {
                field("pathhex=")
                    .and_then(|h| hex::decode(h).ok())
                    .map(|b| PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b)))
                    .or_else(|| l.split_once(" path=").map(|(_, p)| PathBuf::from(p)))
            };
            match (l.starts_with("snapshot requested "), l.starts_with("snapshot done "), gen) {
                (true, _, Some(g)) => req.push((g, path())),
                (_, true, Some(g)) => {
                    done.insert(g);
                }
                _ => {}
            }
        }
        // A later snapshot covers earlier requests (the newest wins).
        let last_done = done.iter().next_back().copied();
        req.retain(|(g, _)| !done.contains(g) && last_done.is_none_or(|d| *g > d));
        req.dedup_by_key(|r| r.0);
        req
    }
}

/// The pipeline: owns the ring, the chain and the Git side.
pub struct Pipeline {
    /// Held for the pipeline's life: one writer per ring.
    _ring_lock: crate::fs::FileLock,
    cfg: PipelineConfig,
    wal: std::sync::Arc<Wal>,
    /// What `status` reports.
    pub state: PipelineState,
    merkle_prev: Hash,
    prev_file: Option<PathBuf>,
    /// The chunk digests of `prev_file` when this process wrote it.
    prev_chunks: Vec<(String, Vec<Hash>)>,
    /// The commits waiting for their push, when there is a remote (the
    /// push thread pushes them; see [`crate::daemon::pushes`]).
    pushes: Option<std::sync::Arc<crate::daemon::pushes::Pushes>>,
    /// The repository's newest generation when the pipeline opened: every
    /// ring generation up to it is committed.
    committed_at_open: Option<u64>,
    /// Generations committed since.
    committed: std::collections::HashSet<u64>,
}

fn ring_name(gen: u64, ext: &str) -> String {
    format!("gen-{gen:06}.{ext}")
}

/// Removes generation `g`'s ring files of the given kinds (with parts).
fn remove_ring(ring: &Path, g: u64, exts: &[&str]) {
    for ext in exts {
        let f = ring.join(ring_name(g, ext));
        let _ = std::fs::remove_file(&f);
        let _ = std::fs::remove_dir_all(crate::store::parts_dir(&f));
    }
}

/// The ring's newest snapshot (removing temporary files a crash left).
fn newest_in_ring(ring: &Path) -> Result<Option<(u64, PathBuf)>> {
    let mut newest: Option<(u64, PathBuf)> = None;
    for e in std::fs::read_dir(ring).map_err(|e| Error::io(ring, e))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.ends_with(".tmp") {
            let _ = std::fs::remove_file(e.path()); // a write a crash interrupted
            continue;
        }
        if let Some(g) = name.strip_prefix("gen-").and_then(|r| r.strip_suffix(".wtxt")).and_then(|g| g.parse().ok()) {
            if newest.as_ref().is_none_or(|(n, _)| g > *n) {
                newest = Some((g, e.path()));
            }
        }
    }
    Ok(newest)
}

/// The snapshot committed at `path` in HEAD of `repo`, with its `gen`
/// (`None` without one, or when it is not plain WTXT, e.g. age-armored).
fn committed<'r>(repo: &'r git2::Repository, path: &Path) -> Option<(git2::Blob<'r>, u64)> {
    let tree = repo.head().ok()?.peel_to_tree().ok()?;
    let blob = tree.get_path(path).ok()?.to_object(repo).ok()?.peel_to_blob().ok()?;
    let meta = blob.content().split(|&b| b == b'\n').nth(1)?;
    let gen = crate::format::syntax::Meta::parse(meta).ok()?.gen;
    Some((blob, gen))
}

/// The snapshot at `path` in `repo`'s work tree, once its bytes are
/// `head`'s, what HEAD commits there (for a split snapshot, its head: the
/// head binds its parts, which verifying it reads).
fn checked_out_head(repo: &git2::Repository, path: &Path, head: &git2::Blob) -> Result<PathBuf> {
    let work = repo.workdir().ok_or_else(|| Error::usage("--repo must be a work tree, not a bare repository"))?;
    let file = work.join(path);
    let here = crate::odb::pack::read_whole(&file, head.size() as u64).map_err(|e| {
        Error::usage(format!("HEAD's snapshot is not checked out ({e}): `git checkout -- {}`", path.display()))
    })?;
    if here != head.content() {
        return Err(Error::usage(format!(
            "{}: not what HEAD commits there, and the ring lacks HEAD's generation to continue the chain from: \
             `git checkout -- {}`",
            file.display(),
            path.display()
        )));
    }
    Ok(file)
}

impl Pipeline {
    /// Opens the ring (cleaning temp files a crash left), finds where the
    /// chain stands and reloads the resend queue.
    pub fn open(cfg: PipelineConfig) -> Result<Pipeline> {
        // A ring that is a link is refused, not followed: the pipeline
        // deletes files in its ring.
        if std::fs::symlink_metadata(&cfg.ring).is_ok_and(|m| !m.is_dir()) {
            return Err(
                Error::input(Default::default(), "the ring must be a folder, not a link or a file").in_file(&cfg.ring)
            );
        }
        std::fs::create_dir_all(&cfg.ring).map_err(|e| Error::io(&cfg.ring, e))?;
        let ring_lock = crate::fs::FileLock::take(&cfg.ring.join("lock"), false)?.ok_or_else(|| {
            Error::usage(format!(
                "{}: this ring is in use by another wtxt daemon or Snapshotter: give each its own ring \
                 (--ring, ring=), or one path_in_repo each",
                cfg.ring.display()
            ))
        })?;
        let mut newest = newest_in_ring(&cfg.ring)?;
        let repo = cfg.repo.as_deref().and_then(|r| git2::Repository::open(r).ok());
        let committed = repo.as_ref().and_then(|r| committed(r, &cfg.path_in_repo));
        let committed_at_open = committed.as_ref().map(|c| c.1);
        if let Some(repo) = &repo {
            // Generations a reset or a rewrite dropped go back to `git gc`
            // (once a start, not a generation: it walks the history). Where
            // it cannot be done (no `git` binary), their packs stay kept,
            // costing room, never an object.
            if let Ok(_lock) = crate::git::commit_lock(repo) {
                let _ = crate::odb::objects::release_unreachable(repo.path());
            }
        }
        // A crash between writing a generation to the ring and committing
        // it leaves the ring ahead of the repository: that generation never
        // happened (its request is still pending and is redone), so the
        // chain must not continue from it.
        if let (Some((g, _)), Some(committed)) = (&newest, committed_at_open) {
            if *g > committed {
                remove_ring(&cfg.ring, *g, &["wtxt", "wtxtdelta", "wtxt.age"]);
                newest = newest_in_ring(&cfg.ring)?;
            }
        }
        let mut state = PipelineState::default();
        let mut merkle_prev = [0; 32];
        // The chain continues from the ring's newest file or, when the
        // ring lacks the generation HEAD holds (a reset dropped those it
        // held, or it was emptied), from HEAD's, checked out in the work
        // tree: never from nothing while a generation is committed.
        let behind = committed.as_ref().filter(|(_, c)| newest.as_ref().is_none_or(|(g, _)| g < c));
        let from = match (behind, &repo) {
            (Some((head, c)), Some(repo)) => {
                Some((*c, checked_out_head(repo, &cfg.path_in_repo, head)?, "HEAD's snapshot"))
            }
            _ => newest.as_ref().map(|(g, p)| (*g, p.clone(), "the ring's newest snapshot")),
        };
        if let Some((g, p, what)) = &from {
            // Verified whole; with a sign key, a valid signature by it is
            // required (an unsigned file planted at the top of the ring
            // would otherwise become the chain's base). Its tags are not
            // asked for: an HMAC key added since must not stop a restart.
            let mut trust =
                crate::format::verify::InputTrust::new(None, None, cfg.keys.sign_key.as_ref(), false, false);
            trust.require_signature = cfg.keys.sign_key.is_some();
            let report = WtxtIn::verify_whole(p, &trust.options(), what).map_err(|e| {
                if cfg.keys.sign_key.is_some() && e.kind() == crate::error::Kind::Check {
                    Error::check(
                        Default::default(),
                        format!(
                            "{e} (the chain continues only from a generation signed by the sign key: \
                             with a key newly given, start a new chain in a new ring and path)"
                        ),
                    )
                } else {
                    e
                }
            })?;
            let h = report.header.ok_or_else(|| crate::error::check_at(1, "not a WTXT").in_file(p))?;
            if h.meta.gen != *g {
                return Err(crate::error::check_at(2, format!("{what}: gen {}, expected {g}", h.meta.gen)).in_file(p));
            }
            if let Root::Final { merkle_this, sha256_all, .. } = h.root {
                merkle_prev = merkle_this;
                state.last_sha256_all = Some(hex::encode(sha256_all));
            }
            state.last_gen = Some(*g);
        }
        let newest = if behind.is_some() { None } else { newest };
        let pushes = match (&cfg.remote, &cfg.repo) {
            (Some(remote), Some(repo)) => Some(std::sync::Arc::new(crate::daemon::pushes::Pushes::open(
                &cfg.ring,
                repo.clone(),
                remote.clone(),
                cfg.stopping.clone(),
                cfg.log.clone(),
            ))),
            _ => None,
        };
        let wal = std::sync::Arc::new(Wal::open(&cfg.ring)?);
        Ok(Pipeline {
            _ring_lock: ring_lock,
            prev_file: newest.map(|n| n.1),
            prev_chunks: Vec::new(),
            cfg,
            wal,
            state,
            merkle_prev,
            pushes,
            committed_at_open,
            committed: Default::default(),
        })
    }

    /// The WAL, shared with the hot path.
    pub fn wal(&self) -> std::sync::Arc<Wal> {
        self.wal.clone()
    }

    /// Runs every stage for one pinned generation but the push, which the
    /// push thread makes beside the next generation's writing
    /// ([`Pipeline::pushes`]): a slow remote never holds back writing and
    /// committing, and requests that never stop never hold back pushes.
    ///
    /// Returns the commit that waits for its push, when there is a remote:
    /// the caller hands it to [`Pipeline::pushes`] once it is ready to hear
    /// how the push went.
    pub fn snapshot(&mut self, gen: u64, arrays: &[Array]) -> Result<Option<crate::daemon::pushes::ToPush>> {
        if self.state.last_gen.is_some_and(|g| gen <= g) {
            return Err(Error::usage(format!(
                "gen {gen} is not after the last snapshot's {}",
                self.state.last_gen.unwrap_or(0)
            )));
        }
        // The writer's defaults (schema, host, cuda, ts rule); the build token is checked.
        let meta = Meta::new(gen, None)?.with_tokens(None, Some(&self.cfg.build), None, None)?;
        let opts = WriteOptions {
            merkle_prev: self.merkle_prev,
            hmac_key: self.cfg.keys.hmac_key.as_ref(),
            sign_key: self.cfg.keys.sign_key.as_ref(),
            digest: self.cfg.digest,
            ..WriteOptions::new(meta, self.cfg.rows_per_chunk)
        };
        let mut stages = Stages::default();
        let mut clock = Instant::now();
        let mut lap = || {
            let t = clock.elapsed().as_secs_f64();
            clock = Instant::now();
            t
        };
        let file = self.cfg.ring.join(ring_name(gen, "wtxt"));
        let written = crate::store::write_wtxt(arrays, &opts, &file, self.cfg.part_size, None, &Progress::hidden())?;
        stages.write = lap();
        // The first generation, or one with over half its chunks changed,
        // changed wholly: its delta would be about as large as a copy, and
        // Git finds no delta for its parts either. With a repository its
        // commit holds it whole, so the ring keeps no delta of it.
        let changed_wholly = match &self.prev_file {
            None => true,
            // After a restart the previous digests are not at hand: the
            // delta's size tells.
            Some(prev) if self.prev_chunks.is_empty() => self.delta(prev, &file, gen)?.saturating_mul(2) > written.len,
            Some(prev) => {
                let (changed, total) = crate::format::write::changed_chunks(&self.prev_chunks, &written.chunk_sha256);
                let wholly = changed.saturating_mul(2) > total;
                if !wholly || self.cfg.repo.is_none() {
                    self.delta(prev, &file, gen)?;
                }
                wholly
            }
        };
        stages.delta = lap();
        let committed = match &self.cfg.recipients[..] {
            [] => file.clone(),
            rs => {
                let armored = self.cfg.ring.join(ring_name(gen, "wtxt.age"));
                let seal = Seal::Recipients(
                    rs.iter().map(|r| crate::crypto::armor::parse_recipient(r)).collect::<Result<_>>()?,
                );
                crate::ops::encrypt(&file, &armored, seal)?;
                armored
            }
        };
        stages.armor = lap();
        self.merkle_prev = written.merkle_this;
        self.prev_file = Some(file);
        self.prev_chunks = written.chunk_sha256;
        self.state.last_gen = Some(gen);
        self.state.last_sha256_all = Some(hex::encode(written.sha256_all));
        self.state.snapshots_written += 1;
        let mut to_push = None;
        if let Some(repo) = self.cfg.repo.clone() {
            let msg = self
                .cfg
                .message
                .replace("{gen}", &format!("{gen:06}"))
                .replace("{sha256_all}", &hex::encode(written.sha256_all))
                .replace("{step}", &step_of(arrays));
            let commit = self.commit(&repo, &committed, &msg)?;
            self.state.last_commit = Some(commit.clone());
            self.committed.insert(gen);
            stages.commit = lap();
            if self.pushes.is_some() {
                to_push = Some(crate::daemon::pushes::ToPush { gen, commit, wholly: changed_wholly, len: written.len });
            }
        }
        self.state.last_stages = Some(stages);
        let _ = self.wal.append(&format!("snapshot done gen={gen} sha256_all={}", hex::encode(written.sha256_all)));
        self.prune()?;
        Ok(to_push)
    }

    /// Writes the DELTA v2 from `prev` to `file`; returns its size. Both are
    /// this pipeline's own ring files, read unhashed so that the chunks the
    /// delta does not carry are sought past, not read: the delta names
    /// both by `sha256_all`, and `delta apply` verifies what it makes, so a
    /// part changed on disk since it was written makes a delta that does
    /// not apply, never a wrong snapshot.
    fn delta(&self, prev: &Path, file: &Path, gen: u64) -> Result<u64> {
        let out = self.cfg.ring.join(ring_name(gen, "wtxtdelta"));
        let mut f = crate::fs::AtomicFile::create(&out)?;
        {
            let mut b = crate::store::input::WtxtIn::open_unhashed(prev, None)?;
            let mut t = crate::store::input::WtxtIn::open_unhashed(file, None)?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f.file());
            crate::format::delta::create((b.lines(), prev), (t.lines(), file), &mut w)?;
            w.flush().map_err(|e| Error::io(&out, e))?;
        }
        let len = f.file().metadata().map_err(|e| Error::io(&out, e))?.len();
        f.commit()?;
        Ok(len)
    }

    fn commit(&self, repo_dir: &Path, file: &Path, msg: &str) -> Result<String> {
        let git = crate::odb::git_err;
        let repo = git2::Repository::open(repo_dir).map_err(git)?;
        let work = repo.workdir().ok_or_else(|| Error::usage("--repo must be a work tree, not a bare repository"))?;
        // From the index read to HEAD moved, no other wtxt writer commits:
        // each commit is made on the other's tree, never over it.
        let _lock = crate::git::commit_lock(&repo)?;
        // Every component resolved without following a link (a committed
        // `ckpt -> /elsewhere` would take the snapshot out of the work
        // tree and commit a tree that is not what was written).
        crate::fs::no_links_below(work, &self.cfg.path_in_repo)?;
        let dest = work.join(&self.cfg.path_in_repo);
        if let Some(d) = dest.parent() {
            std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
        }
        crate::fs::no_links_below(work, &self.cfg.path_in_repo)?;
        if let Some(name) = dest.file_name() {
            let mut parts = name.to_os_string();
            parts.push(".parts");
            crate::fs::no_links_below(work, &self.cfg.path_in_repo.with_file_name(parts))?;
        }
        // Atomic in the work tree too; a split snapshot's parts first.
        let parts = crate::store::copy_snapshot(file, &dest)?;
        let mut extra = Vec::new();
        if let Some(sig) = crate::ops::oms_sign_written(&dest, self.cfg.keys.oms_key.as_ref())? {
            let rel = sig.strip_prefix(work).map_err(|_| Error::usage("model.sig outside the work tree"))?;
            extra.push(rel.to_path_buf());
        }
        crate::git::commit::commit_snapshot(&repo, &self.cfg.path_in_repo, parts, &extra, "wtxt daemon", msg)
    }

    /// The commits waiting for their push, when snapshots are pushed to a
    /// remote: the push thread runs `daemon::pushes::Pushes::run`.
    pub fn pushes(&self) -> Option<std::sync::Arc<crate::daemon::pushes::Pushes>> {
        self.pushes.clone()
    }

    /// Records a background failure in `last_error` and tells the log at once.
    pub fn fail(&mut self, message: String) {
        if let Some(log) = &self.cfg.log {
            log(&message);
        }
        self.state.last_error = Some(message);
    }

    /// Keeps the last `keep` snapshots (with their deltas). With a
    /// repository, every committed generation is there whole
    /// ([`Pipeline::prune_committed`]); pushes only read commits.
    fn prune(&self) -> Result<()> {
        let gens = self.ring_gens(".wtxt")?;
        if self.cfg.repo.is_some() {
            return self.prune_committed(&gens);
        }
        let excess = gens.len().saturating_sub(self.cfg.keep.max(1));
        for g in gens.into_iter().take(excess) {
            remove_ring(&self.cfg.ring, g, &["wtxt", "wtxtdelta", "wtxt.age"]);
        }
        Ok(())
    }

    /// The generations the ring holds a file of, `suffix` naming which
    /// (".wtxt", ".wtxtdelta"), oldest first.
    fn ring_gens(&self, suffix: &str) -> Result<Vec<u64>> {
        let mut gens: Vec<u64> = std::fs::read_dir(&self.cfg.ring)
            .map_err(|e| Error::io(&self.cfg.ring, e))?
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.strip_prefix("gen-")?.strip_suffix(suffix)?.parse().ok()
            })
            .collect();
        gens.sort_unstable();
        Ok(gens)
    }

    /// With a repository, every committed generation is there whole (and
    /// rebuilt by `git show`): the ring keeps only the newest whole, which
    /// the next delta starts from and a restart continues the chain from
    /// (a hard link of the work tree's file, so it costs no space of its
    /// own), and the deltas of the last `keep` generations.
    fn prune_committed(&self, gens: &[u64]) -> Result<()> {
        let newest = gens.last().copied();
        for &g in gens.iter().filter(|&&g| Some(g) != newest && self.is_committed(g)) {
            remove_ring(&self.cfg.ring, g, &["wtxt", "wtxt.age"]);
        }
        let deltas = self.ring_gens(".wtxtdelta")?;
        let excess = deltas.len().saturating_sub(self.cfg.keep.max(1));
        for &g in deltas.iter().take(excess).filter(|&&g| self.is_committed(g)) {
            remove_ring(&self.cfg.ring, g, &["wtxtdelta"]);
        }
        Ok(())
    }

    /// True when generation `g` is committed in the repository.
    fn is_committed(&self, g: u64) -> bool {
        self.committed_at_open.is_some_and(|c| g <= c) || self.committed.contains(&g)
    }
}

/// ` step=N` (or ` epoch=N`) from the metadata a producer published with
/// the state (`global_step`, `step`, `epoch`: a Trainer's, Lightning's),
/// for the commit message; empty when there is none or it is not a number.
fn step_of(arrays: &[Array]) -> String {
    let names = crate::convert::names::OriginalNames::of(arrays).ok().flatten().unwrap_or_default();
    let (step, epoch) = names.step_and_epoch();
    let digits = |v: &&str| v.bytes().all(|b| b.is_ascii_digit());
    match (step.filter(digits), epoch.filter(digits)) {
        (Some(s), Some(e)) => format!(" step={s} epoch={e}"),
        (Some(s), None) => format!(" step={s}"),
        (None, Some(e)) => format!(" epoch={e}"),
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_names_the_step_a_producer_published() {
        let with = |pairs: &[(&str, &str)]| {
            let metadata = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let names = crate::convert::names::OriginalNames { metadata: Some(metadata), ..Default::default() };
            step_of(&[names.to_array().unwrap()])
        };
        assert_eq!(with(&[("global_step", "12"), ("epoch", "3")]), " step=12 epoch=3");
        assert_eq!(with(&[("step", "7")]), " step=7");
        assert_eq!(with(&[("global_step", "1\nforged: line"), ("epoch", "")]), "");
        assert_eq!(step_of(&[]), "");
    }

    #[test]
    fn wal_paths_come_back_exactly() {
        let odd = "/tmp/a b/c\nd.npz";
        let text = format!(
            "snapshot requested gen=3 ts=1 pathhex={}\nsnapshot requested gen=4 ts=2 path=/old style/with space.npz\n",
            hex::encode(odd)
        );
        let p = Wal::parse_pending(&text);
        assert_eq!(p[0], (3, Some(PathBuf::from(odd))));
        assert_eq!(p[1], (4, Some(PathBuf::from("/old style/with space.npz"))));
        assert!(Wal::parse_pending("snapshot requested gen=5 ts=1\nsnapshot done gen=5\n").is_empty());
    }
}
