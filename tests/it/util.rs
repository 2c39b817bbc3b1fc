//! Shared helpers: fixture paths and running the real binary.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wtxt")
}

pub fn fixture(rel: &str) -> PathBuf {
    fixtures().join(rel)
}

pub fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(rel)).unwrap()
}

/// The `wtxt` binary, run from the fixtures folder with a clean environment.
pub fn wtxt() -> Command {
    let mut c = Command::cargo_bin("wtxt").unwrap();
    c.current_dir(fixtures()).env_remove("SOURCE_DATE_EPOCH").env_remove("WTXT_HMAC_KEY");
    c
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(args: &[&str]) -> Run {
    let o = wtxt().args(args).output().unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Verifies bytes with the library, as `wtxt verify` would.
pub fn verify_bytes(bytes: &[u8], opts: &wtxt::format::VerifyOptions) -> Result<wtxt::format::Report, wtxt::Error> {
    wtxt::format::verify(bytes, opts, None)
}

/// An array to snapshot: name, dtype, shape, bytes.
pub type ArraySpec<'a> = (&'a str, &'a str, Vec<u64>, Vec<u8>);

/// Writes `arrays` as `dir/NAME.npz`.
pub fn write_npz(dir: &Path, name: &str, arrays: &[ArraySpec]) -> std::path::PathBuf {
    let list: Vec<wtxt::model::Array> = arrays
        .iter()
        .map(|(n, d, s, b)| {
            let dt = wtxt::model::Dtype::parse(d.as_bytes()).unwrap();
            wtxt::model::Array::new(*n, dt, s.clone(), b.clone().into()).unwrap()
        })
        .collect();
    let npz = dir.join(format!("{name}.npz"));
    let f = std::fs::File::create(&npz).unwrap();
    wtxt::convert::npz::write(&list, f).unwrap();
    npz
}

/// Writes `arrays` as an .npz in `dir` and snapshots it to `dir/NAME.wtxt`.
pub fn snapshot(dir: &Path, name: &str, arrays: &[ArraySpec], extra: &[&str]) -> std::path::PathBuf {
    let npz = write_npz(dir, name, arrays);
    let out = dir.join(format!("{name}.wtxt"));
    let r = wtxt()
        .arg("snapshot")
        .arg(&npz)
        .arg("-o")
        .arg(&out)
        .args(["--ts", "2026-03-01T00:00:00Z"])
        .args(extra)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    out
}

/// Runs the real `git` in `dir` with a fixed identity, no pager and no
/// inherited wtxt settings; `env` adds variables.
pub fn git_cmd(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = std::process::Command::new("git");
    c.current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .env("GIT_PAGER", "cat")
        .env("WTXT", env!("CARGO_BIN_EXE_wtxt"))
        .env_remove("WTXT_MERGE_STRATEGY")
        .env_remove("SOURCE_DATE_EPOCH");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// `git_cmd` that must succeed; its stdout.
pub fn git_ok(dir: &Path, args: &[&str]) -> String {
    let o = git_cmd(dir, args, &[]);
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `git mktree` (with `--missing`) of `listing` in the repository at `dir`:
/// the tree's id, empty when Git refuses the listing.
pub fn mktree(dir: &Path, listing: &str) -> String {
    let mut mktree = std::process::Command::new("git");
    mktree.current_dir(dir).args(["mktree", "--missing"]).stdin(std::process::Stdio::piped());
    let mut child = mktree.stdout(std::process::Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), listing.as_bytes()).unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap().trim().to_string()
}

/// A `.npy` v1 header of 128 bytes for the dict `dict` (data follows it).
pub fn npy_header(dict: &str) -> Vec<u8> {
    let mut v = b"\x93NUMPY\x01\x00\x76\x00".to_vec();
    v.extend_from_slice(dict.as_bytes());
    v.resize(128, b' ');
    v[127] = b'\n';
    v
}

/// A free TCP port on 127.0.0.1 (bound, then released for the server).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A server this test started; stopped however the test ends.
pub struct Server(pub std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn wait_for_port(port: u16) {
    let t = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < std::time::Duration::from_secs(10), "no server on 127.0.0.1:{port}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A real `git daemon` on 127.0.0.1 serving (and taking pushes into) every
/// repository under `served`; stopped when the returned server drops.
pub fn git_daemon(served: &Path) -> (Server, u16) {
    let port = free_port();
    // `git daemon` runs `git-daemon` as a child: start that one directly,
    // so stopping the server stops the process that listens.
    let exec = std::process::Command::new("git").arg("--exec-path").output().unwrap();
    let exec_path = String::from_utf8(exec.stdout).unwrap().trim().to_string();
    let server = Server(
        std::process::Command::new(Path::new(&exec_path).join("git-daemon"))
            .args(["--reuseaddr", "--export-all", "--enable=receive-pack", "--listen=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", served.display()))
            .arg(served)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port);
    (server, port)
}

/// A bare repository `served/models.git` under `d` set up by `wtxt git
/// install --server` (the guard and the settings a host needs): the
/// folder to serve and the repository.
pub fn served_repository(d: &Path) -> (PathBuf, PathBuf) {
    let served = d.join("served");
    std::fs::create_dir_all(&served).unwrap();
    git_ok(&served, &["init", "-q", "--bare", "-b", "main", "models.git"]);
    let bare = served.join("models.git");
    let o = wtxt().current_dir(&bare).args(["git", "install", "--server"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (served, bare)
}

/// A real Git LFS server (giftless, set up by `scripts/lfs-server.sh
/// install`) on 127.0.0.1, keeping objects under `store`: the server and
/// the LFS URL of repository `repo` on it (`lfs.url`). Objects land in
/// `store/wtxt/REPO/OID`.
pub fn lfs_server(store: &Path, repo: &str) -> (Server, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = std::env::var_os("WTXT_LFS_SERVER").map_or(root.join("target/lfs-server"), PathBuf::from);
    assert!(venv.join("bin/flask").exists(), "no LFS server in {}: run scripts/lfs-server.sh install", venv.display());
    std::fs::create_dir_all(store).unwrap();
    let port = free_port();
    let server = Server(
        std::process::Command::new(root.join("scripts/lfs-server.sh"))
            .arg("serve")
            .arg(store)
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port);
    (server, format!("http://127.0.0.1:{port}/wtxt/{repo}.git/info/lfs"))
}

/// Five u8 arrays of 96 KiB named `names`, written as `npz_dir/in.npz` and
/// snapshot to `out` in the tree form, split in parts of 64 KiB (each array
/// spans about three parts); their bytes, in order.
pub fn spanning_snapshot(npz_dir: &Path, out: &Path, names: [&str; 5]) -> Vec<Vec<u8>> {
    spanning_generation(npz_dir, out, names, None)
}

/// [`spanning_snapshot`]'s snapshot, or with `changed` its next generation
/// (`--prev`, the snapshot at `out`) where only that array's first row moved.
pub fn spanning_generation(npz_dir: &Path, out: &Path, names: [&str; 5], changed: Option<usize>) -> Vec<Vec<u8>> {
    let values = |k: usize| {
        let moved = if changed == Some(k) { 1 } else { 0 };
        (0..96 * 1024).map(|i| ((i * 7 + k) % 251) as u8 + u8::from(i < 1536) * moved).collect::<Vec<u8>>()
    };
    let arrays: Vec<ArraySpec> = names.iter().enumerate().map(|(k, n)| (*n, "u8", vec![64, 1536], values(k))).collect();
    let npz = write_npz(npz_dir, "in", &arrays);
    let ts = if changed.is_some() { "2026-03-01T00:00:01Z" } else { "2026-03-01T00:00:00Z" };
    let args = ["--part-size", "64K", "--digest", "tree", "--rows-per-chunk", "8", "--ts", ts];
    let mut c = wtxt();
    c.arg("snapshot").arg(&npz).arg("-o").arg(out).args(args);
    if changed.is_some() {
        c.arg("--prev").arg(out);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    arrays.into_iter().map(|a| a.3).collect()
}

/// `wtxt extract m.wtxt --rev HEAD --array NAME -o ../NAME.npy` in `repo`
/// succeeds and gives `want`.
pub fn extract_at_head(repo: &Path, name: &str, want: &[u8]) {
    let out = repo.parent().unwrap().join(format!("{name}.npy"));
    let mut c = wtxt();
    let o = c.current_dir(repo).args(["extract", "m.wtxt", "--rev", "HEAD", "--array", name, "-o"]).arg(&out);
    let o = o.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = std::fs::read(&out).unwrap();
    assert!(got.starts_with(b"\x93NUMPY") && got.ends_with(want), "the full read's bytes");
}

/// A Git LFS server on 127.0.0.1 that answers the batch call as a server
/// does and then sends each object a byte a second: a stalled transfer
/// that no timeout of git-lfs's catches. Stopped when it drops.
pub struct TricklingLfs {
    pub url: String,
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl TricklingLfs {
    pub fn start() -> TricklingLfs {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s, t) = (stop.clone(), sent.clone());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let (s, t) = (s.clone(), t.clone());
                if let Ok(conn) = conn {
                    std::thread::spawn(move || {
                        let _ = trickle(conn, port, &s, &t);
                    });
                }
            }
        });
        let url = format!("http://127.0.0.1:{port}/wtxt/models.git/info/lfs");
        TricklingLfs { url, port, stop, sent, accept: Some(accept) }
    }

    /// How many bytes of objects it has sent.
    pub fn served_bytes(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for TricklingLfs {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
    }
}

/// One connection of [`TricklingLfs`]: requests until it closes.
fn trickle(
    conn: std::net::TcpStream,
    port: u16,
    stop: &std::sync::atomic::AtomicBool,
    sent: &std::sync::atomic::AtomicU64,
) -> std::io::Result<()> {
    use std::io::{BufRead, Read, Write};
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    let mut reader = std::io::BufReader::new(conn.try_clone()?);
    let mut out = conn;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request)? == 0 {
            return Ok(());
        }
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            if h.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; length.min(1 << 20)];
        reader.read_exact(&mut body)?;
        let target = request.split(' ').nth(1).unwrap_or_default().to_string();
        if target.ends_with("/objects/batch") {
            let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let objects: Vec<serde_json::Value> = asked["objects"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|o| {
                    let href = format!("http://127.0.0.1:{port}/o/{}/{}", o["oid"].as_str().unwrap_or(""), o["size"]);
                    serde_json::json!({"oid": o["oid"], "size": o["size"], "authenticated": true,
                        "actions": {"download": {"href": href}}})
                })
                .collect();
            let answer = serde_json::json!({"transfer": "basic", "objects": objects}).to_string();
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.git-lfs+json\r\nContent-Length: {}\r\n\r\n{answer}",
                answer.len()
            )?;
        } else if let Some(size) = target.strip_prefix("/o/").and_then(|t| t.rsplit('/').next()?.parse::<u64>().ok()) {
            write!(out, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n")?;
            for _ in 0..size {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return Ok(());
                }
                out.write_all(b"\0")?;
                out.flush()?;
                sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            return Ok(());
        } else {
            write!(out, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
        }
    }
}
