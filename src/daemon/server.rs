//! `wtxt daemon`: the snapshot pipeline behind a Unix socket, so producers
//! in any language can feed it.
//!
//! One request per connection, one line each way:
//! `snapshot PATH [gen=N]` -> `ok gen=N queued` | `error <message>`;
//! `flush` -> `ok` once everything queued is written, committed and pushed
//! (or parked in the resend queue); `status` -> one JSON object;
//! `shutdown` -> `ok`, then in-flight work finishes and the process exits 0.
//! SIGTERM does what `shutdown` does.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::convert::load_inputs;
use crate::daemon::pipeline::PipelineConfig;
use crate::daemon::snapshotter::{pending_requests, Generation, Snapshotter};
use crate::error::{Error, Reason, Result};
use crate::format::verify::InputTrust;
use crate::options::{DigestChoice, KeyFiles, PartSizeChoice};

/// The daemon's settings: its flags, the keys of its TOML file (flags win)
/// and the Python `Snapshotter`'s arguments, one struct for all three.
#[derive(clap::Args, Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// Git work tree to commit snapshots into.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Unix socket to listen on (created with mode 0600).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Ring folder (default: REPO/.git/wtxt-ring, or wtxt-ring-NAME for another --path-in-repo).
    #[arg(long, value_name = "DIR")]
    pub ring: Option<PathBuf>,
    /// Snapshots the ring keeps (default 8; unpushed ones are never dropped).
    #[arg(long, value_name = "N")]
    pub keep: Option<usize>,
    /// Remote (name, path or URL) to push to after each commit; a URL with
    /// a secret in it is refused on the command line (`ps` shows it).
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// File holding the remote's password or token (else $WTXT_REMOTE_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub remote_password_file: Option<PathBuf>,
    /// Path of the snapshot inside the repository (default snapshot.wtxt).
    #[arg(long, value_name = "FILE.wtxt")]
    pub path_in_repo: Option<PathBuf>,
    /// The keys: --sign-key signs every snapshot, --oms-key writes an OMS
    /// `model.sig` beside each, a WTXT input must be signed by a trusted
    /// key (default: `git config wtxt.trustedKeys` of the repo).
    #[command(flatten)]
    #[serde(flatten)]
    pub keys: KeyFiles,
    /// Commit age-armored snapshots for this recipient; repeatable.
    #[arg(long = "recipient", value_name = "R")]
    #[serde(default)]
    pub recipients: Vec<String>,
    /// Rows per chunk (default 128).
    #[arg(long, value_name = "R")]
    pub rows_per_chunk: Option<u64>,
    /// Build token written into each snapshot (default daemon).
    #[arg(long, value_name = "TOK")]
    pub build: Option<String>,
    /// Commit message; {gen}, {sha256_all} and {step} are filled in.
    #[arg(long, value_name = "TEMPLATE")]
    pub message: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    /// `--part-size`.
    pub parts: PartSizeChoice,
    #[command(flatten)]
    #[serde(flatten)]
    /// `--digest`.
    pub digest: DigestChoice,
}

impl DaemonConfig {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<DaemonConfig> {
        let text = crate::crypto::mac::read_small_text(path)?;
        toml::from_str(&text).map_err(|e| Error::input(Default::default(), format!("config: {e}")).in_file(path))
    }

    /// `self` with every unset field taken from `other`.
    pub fn or(self, other: DaemonConfig) -> DaemonConfig {
        DaemonConfig {
            repo: self.repo.or(other.repo),
            socket: self.socket.or(other.socket),
            ring: self.ring.or(other.ring),
            keep: self.keep.or(other.keep),
            remote: self.remote.or(other.remote),
            remote_password_file: self.remote_password_file.or(other.remote_password_file),
            path_in_repo: self.path_in_repo.or(other.path_in_repo),
            keys: self.keys.or(other.keys),
            recipients: if self.recipients.is_empty() { other.recipients } else { self.recipients },
            rows_per_chunk: self.rows_per_chunk.or(other.rows_per_chunk),
            build: self.build.or(other.build),
            message: self.message.or(other.message),
            parts: PartSizeChoice { part_size: self.parts.part_size.or(other.parts.part_size) },
            digest: DigestChoice { digest: self.digest.digest.or(other.digest.digest) },
        }
    }
}

impl DaemonConfig {
    /// The pipeline these settings describe (repository, ring, keys, part
    /// size, ...), as the daemon and Python's in-process `Snapshotter` run it,
    /// and the repository opened.
    pub fn pipeline(&self, log: super::log::Log) -> Result<(PipelineConfig, git2::Repository)> {
        let cfg = self;
        let repo = cfg.repo.clone().ok_or_else(|| Error::usage("--repo is required"))?;
        let git = git2::Repository::open(&repo)
            .map_err(|e| Error::usage(format!("--repo {}: {}", repo.display(), e.message())))?;
        let mut pc = PipelineConfig::new(Path::new(""));
        if let Some(p) = &cfg.path_in_repo {
            pc.path_in_repo = checked_path_in_repo(p)?;
        }
        pc.ring = cfg.ring.clone().unwrap_or_else(|| git.path().join(default_ring(&pc.path_in_repo)));
        pc.keep = cfg.keep.unwrap_or(8);
        pc.repo = Some(repo.clone());
        pc.remote = match (&cfg.remote, remote_secret(cfg)?) {
            (Some(r), Some(secret)) => Some(crate::git::push::with_secret(r, "wtxt", &secret)?),
            (None, Some(_)) => return Err(Error::usage("a remote password is given, but no remote")),
            (r, None) => r.clone(),
        };
        pc.log = Some(log.clone());
        pc.keys = cfg.keys.load()?;
        pc.recipients = cfg.recipients.clone();
        if pc.keys.oms_key.is_some() && !pc.recipients.is_empty() {
            return Err(Error::usage("oms_key signs plain snapshots: it cannot be combined with recipients"));
        }
        for r in &pc.recipients {
            crate::crypto::armor::parse_recipient(r)?;
        }
        if let Some(r) = cfg.rows_per_chunk {
            pc.rows_per_chunk = r.max(1);
        }
        if let Some(s) = cfg.parts.part_size {
            pc.part_size = s;
        }
        if let Some(d) = cfg.digest.digest {
            pc.digest = d;
        }
        if let Some(b) = &cfg.build {
            crate::format::syntax::check_token(b, "build").map_err(Error::usage)?;
            pc.build = b.clone();
        }
        if let Some(m) = &cfg.message {
            pc.message = m.clone();
        }
        Ok((pc, git))
    }
}

/// The remote's password or token: from `remote_password_file`, else from
/// `WTXT_REMOTE_PASSWORD` (surrounding whitespace dropped).
fn remote_secret(cfg: &DaemonConfig) -> Result<Option<String>> {
    let secret = match &cfg.remote_password_file {
        Some(p) => crate::crypto::mac::read_small_text(p)?,
        None => match std::env::var("WTXT_REMOTE_PASSWORD") {
            Ok(v) => v,
            Err(_) => return Ok(None),
        },
    };
    let secret = secret.trim();
    if secret.is_empty() {
        return Err(Error::usage("the remote password (file or WTXT_REMOTE_PASSWORD) is empty"));
    }
    Ok(Some(secret.to_string()))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Names Git reads as its own wherever they are (in any case: `.GIT` is
/// `.git` on a case-insensitive file system): never a snapshot's.
const GIT_OWN: [&str; 4] = [".git", ".gitattributes", ".gitignore", ".gitmodules"];

/// `path_in_repo` as given, when it names a file inside the work tree as
/// Git spells it: a relative path of plain names joined by single `/`
/// (an absolute one, or one climbing out, would be written outside the
/// repository before Git could refuse it; `./a.wtxt` or `a//b.wtxt` is
/// another spelling of a path, so another ring and another lock), none of
/// them one of Git's own files.
pub fn checked_path_in_repo(p: &Path) -> Result<PathBuf> {
    use std::path::Component;
    let text = p.to_string_lossy();
    let names: Vec<_> = p.components().collect();
    let plain = names.iter().all(|c| matches!(c, Component::Normal(_)))
        && !names.is_empty()
        && names.iter().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/") == text;
    if !plain {
        return Err(Error::usage(format!(
            "path_in_repo {}: expected a relative path inside the repository, plain names joined by `/` (no `..`, `.` or `//`)",
            crate::error::one_line(&text)
        )));
    }
    if let Some(own) =
        names.iter().find(|c| GIT_OWN.iter().any(|g| c.as_os_str().to_string_lossy().eq_ignore_ascii_case(g)))
    {
        return Err(Error::usage(format!(
            "path_in_repo {}: {} is Git's own, never a snapshot's",
            crate::error::one_line(&text),
            own.as_os_str().to_string_lossy()
        )));
    }
    Ok(p.to_path_buf())
}

/// The ring a pipeline keeps under the repository's `.git` by default: one
/// per path in the repository (`wtxt-ring` for the default
/// `snapshot.wtxt`), so that a model's and an optimizer's Snapshotters, or
/// one per rank, never share one.
pub fn default_ring(path_in_repo: &Path) -> PathBuf {
    if path_in_repo == Path::new("snapshot.wtxt") {
        return PathBuf::from("wtxt-ring");
    }
    let name: String = path_in_repo
        .to_string_lossy()
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' { b as char } else { '_' })
        .collect();
    PathBuf::from(format!("wtxt-ring-{name}"))
}

/// Runs the daemon until `shutdown` or SIGTERM; background failures and
/// warnings go to `log`.
#[allow(unsafe_code)]
pub fn run(cfg: DaemonConfig, log: super::log::Log) -> Result<()> {
    let socket = cfg.socket.clone().ok_or_else(|| Error::usage("--socket is required"))?;
    let (mut pc, git) = cfg.pipeline(log.clone())?;
    if pc.keys.trusted.is_none() {
        pc.keys.trusted = crate::git::configured_trusted_keys(&git)?;
    }
    let ring = pc.ring.clone();
    // WTXT inputs are verified before the pipeline signs or HMACs them.
    let trust = pc.keys.trust();
    let pending = pending_requests(&ring);
    let snap = Snapshotter::start(pc, Generation::default(), crate::daemon::snapshotter::Queue::Coalesce)?;
    let next = snap.next_gen()?;
    let state = Arc::new(Server { snap, trust, log: log.clone(), next_gen: std::sync::Mutex::new(next) });

    // Requests a crash left unfinished: redo those whose input still exists.
    let mut lost = Vec::new();
    for (gen, src) in pending {
        if gen < next {
            // Its snapshot was committed before the crash; only the WAL's
            // `done` line was not written (a push was under way).
            continue;
        }
        match src.filter(|p| p.exists()) {
            Some(p) => {
                if let Err(e) = state.snapshot(&p, Some(gen)) {
                    log(&format!("could not redo gen {gen} from {}: {e}", p.display()));
                    lost.push(gen);
                }
            }
            None => lost.push(gen),
        }
    }
    state.snap.report_lost(&lost);

    let listener = bind(&socket)?;
    // SAFETY: installs a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_term as *const () as libc::sighandler_t);
    }
    listener.set_nonblocking(true).map_err(|e| Error::io(&socket, e))?;
    raise_open_files_limit();
    // A fixed pool answers requests whose line has arrived; the line is read
    // here, as it comes, from every connection at once (poll): an idle or
    // slow client costs a descriptor and a few bytes, never a worker.
    let (conn_tx, conn_rx) = crossbeam_channel::bounded::<(UnixStream, Vec<u8>)>(MAX_QUEUED_CONNECTIONS);
    let mut workers = Vec::new();
    for i in 0..CONNECTION_WORKERS {
        let (s, rx) = (state.clone(), conn_rx.clone());
        let w = std::thread::Builder::new()
            .name(format!("wtxt-conn-{i}"))
            .spawn(move || {
                for (stream, line) in rx {
                    if s.serve(stream, &line) {
                        STOP.store(true, Ordering::SeqCst);
                    }
                }
            })
            .map_err(|e| Error::io_in("connection thread", e))?;
        workers.push(w);
    }
    let mut reading = Reading::default();
    let result = loop {
        if STOP.load(Ordering::SeqCst) {
            break Ok(());
        }
        match reading.poll(&listener) {
            Ok(lines) => {
                for (stream, line) in lines {
                    if let Err(crossbeam_channel::TrySendError::Full((stream, _))) = conn_tx.try_send((stream, line)) {
                        busy(&stream);
                    }
                }
            }
            Err(e) => break Err(Error::io(&socket, e)),
        }
    };
    drop(conn_tx);
    for w in workers {
        let _ = w.join();
    }
    let _ = std::fs::remove_file(&socket);
    result?;
    match Arc::try_unwrap(state) {
        Ok(s) => s.snap.shutdown(),
        Err(s) => s.snap.flush(),
    }
    Ok(())
}

/// Threads that answer requests.
pub const CONNECTION_WORKERS: usize = 4;

/// Requests waiting for a worker; one more is answered `error busy` and closed.
pub const MAX_QUEUED_CONNECTIONS: usize = 64;

/// Connections whose request line is still being read; past this the
/// oldest is closed to make room (it would time out anyway).
pub const MAX_READING: usize = 4096;

/// How long a client may take to send its request line.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Tells a client there is no room, once it has sent its request (closing
/// first would reset the connection before it reads the answer).
fn busy(stream: &UnixStream) {
    let _ = stream.set_nonblocking(true);
    let _ = (&*stream).read(&mut [0u8; MAX_REQUEST]);
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = (&*stream).write_all(b"error busy: too many connections, try again\n");
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Lets the daemon hold as many connections as the system allows it (the
/// soft limit on open files up to the hard one): idle clients cost a
/// descriptor each.
#[allow(unsafe_code)]
fn raise_open_files_limit() {
    // SAFETY: getrlimit/setrlimit on a local struct; only this process's limit changes.
    unsafe {
        let mut l: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 {
            // Raised, never lowered.
            let want = l.rlim_max.min(MAX_READING as libc::rlim_t + 256);
            if l.rlim_cur < want {
                l.rlim_cur = want;
                libc::setrlimit(libc::RLIMIT_NOFILE, &l);
            }
        }
    }
}

/// Connections whose request line is being read, all at once, as data
/// arrives (readiness, not a thread each).
#[derive(Default)]
struct Reading {
    conns: std::collections::VecDeque<(UnixStream, Vec<u8>, std::time::Instant)>,
}

impl Reading {
    /// Waits up to 50 ms for new connections and request bytes; returns the
    /// connections whose line is complete (a newline, the end of their
    /// writing, or [`MAX_REQUEST`] bytes). Silent ones past
    /// [`REQUEST_TIMEOUT`] are closed.
    #[allow(unsafe_code)]
    fn poll(&mut self, listener: &UnixListener) -> std::io::Result<Vec<(UnixStream, Vec<u8>)>> {
        use std::os::fd::AsRawFd;
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(self.conns.iter().map(|(s, _, _)| s.as_raw_fd()))
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
            .collect();
        // SAFETY: `fds` is a live, correctly sized array of pollfd for the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted { Ok(Vec::new()) } else { Err(e) };
        }
        let mut done = Vec::new();
        let mut keep = std::collections::VecDeque::with_capacity(self.conns.len());
        for ((stream, mut line, since), fd) in self.conns.drain(..).zip(&fds[1..]) {
            if fd.revents == 0 {
                if since.elapsed() < REQUEST_TIMEOUT {
                    keep.push_back((stream, line, since));
                }
                continue;
            }
            let mut buf = [0u8; 1024];
            let room = MAX_REQUEST - line.len();
            match (&stream).read(&mut buf[..room.min(1024)]) {
                Ok(0) => done.push((stream, line)),
                Ok(k) => {
                    line.extend_from_slice(&buf[..k]);
                    if line.contains(&b'\n') || line.len() >= MAX_REQUEST {
                        done.push((stream, line));
                    } else {
                        keep.push_back((stream, line, since));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => keep.push_back((stream, line, since)),
                Err(_) => {} // the client went away
            }
        }
        self.conns = keep;
        if fds[0].revents != 0 {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if stream.set_nonblocking(true).is_err() {
                            continue;
                        }
                        if self.conns.len() >= MAX_READING {
                            self.conns.pop_front();
                        }
                        self.conns.push_back((stream, Vec::new(), std::time::Instant::now()));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    // Out of descriptors: the oldest silent connection makes room.
                    Err(e) if e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE) => {
                        if self.conns.pop_front().is_none() {
                            std::thread::sleep(Duration::from_millis(10));
                        }
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
        }
        for (stream, _) in &done {
            let _ = stream.set_nonblocking(false);
        }
        Ok(done)
    }
}

/// Binds the socket with mode 0600, replacing a stale socket (and nothing
/// else). The socket is made in a private 0700 folder beside the final
/// name, set to 0600, then renamed into place: no process-wide umask
/// change while other threads create files.
fn bind(socket: &Path) -> Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(m) = std::fs::symlink_metadata(socket) {
        if !m.file_type().is_socket() {
            return Err(Error::usage(format!(
                "{}: exists and is not a socket; refusing to replace it",
                socket.display()
            )));
        }
        if UnixStream::connect(socket).is_ok() {
            return Err(Error::usage(format!("{}: a daemon is already listening there", socket.display())));
        }
        std::fs::remove_file(socket).map_err(|e| Error::io(socket, e))?;
    }
    let dir = socket.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let private = tempfile::Builder::new().prefix(".wtxt-sock.").tempdir_in(dir).map_err(|e| Error::io(socket, e))?;
    let tmp = private.path().join("s");
    let l = UnixListener::bind(&tmp).map_err(|e| Error::io(socket, e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).map_err(|e| Error::io(socket, e))?;
    std::fs::rename(&tmp, socket).map_err(|e| Error::io(socket, e))?;
    Ok(l)
}

/// Longest request line read from the socket.
pub const MAX_REQUEST: usize = 4096;

/// One request of the socket protocol (docs/DAEMON.md).
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `snapshot PATH [gen=N]`
    Snapshot {
        /// The input file.
        path: PathBuf,
        /// The generation asked for.
        gen: Option<u64>,
    },
    /// `status`
    Status,
    /// `flush`
    Flush,
    /// `shutdown`
    Shutdown,
}

/// Parses one request line (the trailing LF optional). Paths may hold
/// spaces; a last word `gen=N` is the generation.
pub fn parse_request(line: &[u8]) -> std::result::Result<Request, Reason> {
    let line = std::str::from_utf8(line).map_err(|_| "a request is UTF-8 text".to_string())?;
    let line = line.strip_suffix('\n').unwrap_or(line);
    let usage = || Reason::new("expected: snapshot PATH [gen=N] | flush | status | shutdown");
    match line.split_once(' ').unwrap_or((line, "")) {
        ("snapshot", rest) if !rest.is_empty() => {
            let (path, gen) = match rest.rsplit_once(' ') {
                Some((p, g)) if g.starts_with("gen=") => {
                    let n = g["gen=".len()..].parse::<u64>().map_err(|_| "gen= expects a number".to_string())?;
                    (p, Some(n))
                }
                _ => (rest, None),
            };
            if path.is_empty() || path.contains('\0') {
                return Err(usage());
            }
            Ok(Request::Snapshot { path: PathBuf::from(path), gen })
        }
        ("status", "") => Ok(Request::Status),
        ("flush", "") => Ok(Request::Flush),
        ("shutdown", "") => Ok(Request::Shutdown),
        _ => Err(usage()),
    }
}

struct Server {
    snap: Snapshotter,
    /// What a WTXT input must prove before the pipeline signs or HMACs it.
    trust: InputTrust,
    log: super::log::Log,
    next_gen: std::sync::Mutex<u64>,
}

impl Server {
    /// Loads PATH, publishes it as a generation and requests its snapshot.
    fn snapshot(&self, path: &Path, gen: Option<u64>) -> Result<u64> {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_file() && !crate::convert::hf::is_folder(path) {
            return Err(Error::usage(format!("{}: not a readable file or Hugging Face folder", path.display())));
        }
        let mut notes = Vec::new();
        let arrays = load_inputs(&[path], &self.trust.options(), &mut notes)?;
        for n in notes {
            (self.log)(&n);
        }
        let mut next = self.next_gen.lock().map_err(|_| Error::usage("state lock poisoned"))?;
        let gen = match gen {
            Some(g) if g < *next => {
                return Err(Error::usage(format!("gen={g} is not after the last queued generation {}", *next - 1)))
            }
            Some(g) => g,
            None => *next,
        };
        // The generation after this one must exist too: u64::MAX would wrap.
        let after = gen.checked_add(1).ok_or_else(|| Error::usage(format!("gen={gen} is the largest there is")))?;
        self.snap.publish(Arc::new(Generation { gen, arrays }));
        self.snap.request_snapshot_from(&std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()));
        *next = after;
        Ok(gen)
    }

    /// Answers the request `line` read from `stream`; true when it asked
    /// the daemon to stop.
    fn serve(&self, stream: UnixStream, line: &[u8]) -> bool {
        let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
        // The line ends at its newline (what follows is not read).
        let line = line.iter().position(|&b| b == b'\n').map_or(line, |i| &line[..=i]);
        let (reply, stop) = match parse_request(line) {
            Err(m) => (format!("error {m}"), false),
            Ok(Request::Snapshot { path, gen }) => match self.snapshot(&path, gen) {
                Ok(g) => (format!("ok gen={g} queued"), false),
                Err(e) => (format!("error {e}"), false),
            },
            Ok(Request::Status) => (self.snap.status().to_json(), false),
            Ok(Request::Flush) => {
                self.snap.flush();
                ("ok".to_string(), false)
            }
            Ok(Request::Shutdown) => ("ok".to_string(), true),
        };
        let mut w = &stream;
        let _ = w.write_all(format!("{reply}\n").as_bytes());
        let _ = w.flush();
        stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_get_a_reason() {
        let snap = |p: &str, gen| Ok(Request::Snapshot { path: PathBuf::from(p), gen });
        assert_eq!(parse_request(b"snapshot /a b/c.npz gen=7\n"), snap("/a b/c.npz", Some(7)));
        assert_eq!(parse_request(b"snapshot /a.npz"), snap("/a.npz", None));
        assert_eq!(parse_request(b"status\n"), Ok(Request::Status));
        assert_eq!(parse_request(b"flush"), Ok(Request::Flush));
        assert_eq!(parse_request(b"shutdown\n"), Ok(Request::Shutdown));
        assert_eq!(parse_request(b"snapshot /a gen=x"), Err("gen= expects a number".into()));
        for bad in [&b"snapshot"[..], b"snapshot ", b"status now", b"\xff\xfe", b"", b"snapshot a\0b"] {
            assert!(parse_request(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_toml_file_is_read_into_the_option_pieces_and_flags_win() {
        let toml = "repo = \"r\"\nsign_key = \"s.pem\"\ntrusted_keys = \"t\"\nallow_unbound = true\n\
                    part_size = \"1M\"\ndigest = \"tree\"\n";
        let file: DaemonConfig = toml::from_str(toml).unwrap();
        assert_eq!(file.keys.sign.sign_key.as_deref(), Some(Path::new("s.pem")));
        assert_eq!(file.keys.trust.trusted_keys.as_deref(), Some(Path::new("t")));
        assert!(file.keys.hmac.allow_unbound && file.keys.hmac.from_env);
        assert_eq!(file.parts.part_size, Some(crate::format::split::PartSize::Max(1 << 20)));
        assert_eq!(file.digest.digest, Some(crate::format::syntax::DigestForm::Tree));
        let flags = DaemonConfig {
            keys: KeyFiles { sign: crate::options::SignFile { sign_key: Some("f.pem".into()) }, ..Default::default() },
            ..Default::default()
        };
        let both = flags.or(file);
        assert_eq!(both.keys.sign.sign_key.as_deref(), Some(Path::new("f.pem")));
        assert_eq!(both.keys.trust.trusted_keys.as_deref(), Some(Path::new("t")));
        assert_eq!(both.repo.as_deref(), Some(Path::new("r")));
        for bad in ["sign_keys = \"s\"", "digest = \"sha1\"", "part_size = \"12Q\"", "from_env = false"] {
            let e = toml::from_str::<DaemonConfig>(bad).unwrap_err().to_string();
            assert!(e.contains("unknown field") || e.contains("expected"), "{bad}: {e}");
        }
    }
}
