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
    let values = |k: usize| (0..96 * 1024).map(|i| ((i * 7 + k) % 251) as u8).collect::<Vec<u8>>();
    let arrays: Vec<ArraySpec> = names.iter().enumerate().map(|(k, n)| (*n, "u8", vec![64, 1536], values(k))).collect();
    let npz = write_npz(npz_dir, "in", &arrays);
    let args = ["--part-size", "64K", "--digest", "tree", "--rows-per-chunk", "8", "--ts", "2026-03-01T00:00:00Z"];
    let o = wtxt().arg("snapshot").arg(&npz).arg("-o").arg(out).args(args).output().unwrap();
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
