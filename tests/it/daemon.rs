//! The snapshot daemon: the library API under load, and the real `wtxt
//! daemon` binary as a child process with real Git repositories and a real
//! bare remote: a remote that fails then recovers, `kill -9` mid-snapshot,
//! and the Python example end to end.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wtxt::daemon::PipelineConfig;
use wtxt::daemon::{Generation, Queue, Snapshotter};
use wtxt::model::{Array, ArrayData, Dtype};

use crate::util::{free_port, git_daemon, git_ok, wait_for_port, Server};

/// A generation whose arrays are all filled with its own number.
fn uniform(gen: u64) -> Generation {
    let a = vec![gen as u32; 64 * 32].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let b = vec![gen as f64; 100].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    Generation {
        gen,
        arrays: vec![
            Array::new("a", Dtype::U32, vec![64, 32], ArrayData::from(a)).unwrap(),
            Array::new("b", Dtype::F64, vec![100], ArrayData::from(b)).unwrap(),
        ],
    }
}

#[test]
fn no_torn_state_under_load() {
    let (st, gen) = snapshot_under_load(Queue::Coalesce);
    assert!(st.coalesced > 0, "a producer this fast makes requests coalesce: {st:?}");
    assert!(st.snapshots_written > 1, "{st:?}");
    assert_eq!(st.requested, gen);
}

#[test]
fn every_requested_generation_is_written_unless_coalescing_was_chosen() {
    let (st, gen) = snapshot_under_load(Queue::Every { max_pending: 2 });
    assert_eq!(st.coalesced, 0, "{st:?}");
    assert_eq!(st.requested, gen);
    // gen 0 is the empty initial state, never requested.
    assert_eq!(st.snapshots_written, gen, "every requested generation has its snapshot: {st:?}");
}

/// Publishes and requests as fast as it can for 1.5 s, flushes, and checks
/// that every snapshot in the ring holds one generation's values (no torn
/// state) and that the newest was written. Returns the status and the
/// last generation published.
fn snapshot_under_load(queue: Queue) -> (wtxt::daemon::Status, u64) {
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("ring");
    let mut cfg = PipelineConfig::new(&ring);
    cfg.keep = 100_000;
    let snap = Snapshotter::start(cfg, Generation::default(), queue).unwrap();
    let start = Instant::now();
    let mut gen = 0;
    while start.elapsed() < Duration::from_millis(1500) {
        gen += 1;
        snap.publish(Arc::new(uniform(gen)));
        snap.request_snapshot();
    }
    snap.flush();
    let st = snap.status();
    snap.shutdown();
    let mut checked = 0;
    let mut last = 0;
    for e in std::fs::read_dir(&ring).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("wtxt") {
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        let l = wtxt::format::load(&bytes[..], bytes.len() as u64, &Default::default()).unwrap();
        let g = l.header.meta.gen;
        let a: Vec<u32> = l.arrays[0].bytes().chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        let b: Vec<f64> = l.arrays[1].bytes().chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect();
        assert!(a.iter().all(|x| *x as u64 == g) && b.iter().all(|x| *x as u64 == g), "torn state in gen {g}");
        checked += 1;
        last = last.max(g);
    }
    assert_eq!(checked as u64, st.snapshots_written);
    assert_eq!(last, gen, "the newest generation was snapshotted");
    (st, gen)
}

/// Issue 50.16: requests that never stop never hold pushes back. A
/// producer requests without pause; the first generations are pushed (and
/// their futures told) while it still does, and pushes carry several
/// commits each when they come faster than the remote takes them.
#[test]
fn pushes_go_on_while_requests_never_stop() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "-b", "main", "repo"]);
    git_ok(d, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
    // Each push is one entry in the remote's reflog.
    git_ok(&d.join("remote.git"), &["config", "core.logAllRefUpdates", "always"]);
    // A remote slower than the commits: each push takes at least half a
    // second, so commits wait for it whatever the machine's load.
    let hook = d.join("remote.git/hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\ncat >/dev/null\nsleep 0.5\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cfg = PipelineConfig::new(d.join("ring"));
    cfg.repo = Some(d.join("repo"));
    cfg.remote = Some(d.join("remote.git").display().to_string());
    let snap = Arc::new(Snapshotter::start(cfg, Generation::default(), Queue::Every { max_pending: 2 }).unwrap());
    let outcomes = snap.outcomes();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (snap, stop) = (snap.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut gen = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                gen += 1;
                snap.publish(Arc::new(uniform(gen)));
                snap.request_snapshot();
            }
            gen
        })
    };
    let told = outcomes.wait_for(2, Some(Duration::from_secs(60)));
    let still_requesting = !producer.is_finished();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let last = producer.join().unwrap();
    let told = told.expect("generation 2 was told while requests went on");
    assert!(told.pushed && told.error.is_none(), "{told:?}");
    assert!(still_requesting);
    snap.flush();
    let st = snap.status();
    assert_eq!((st.last_gen, st.pushed_gen, st.resend_queue), (Some(last), Some(last), 0), "{st:?}");
    let pushed: u64 = git_ok(&d.join("remote.git"), &["rev-list", "--count", "main"]).trim().parse().unwrap();
    assert_eq!(pushed, last, "one commit per generation");
    let pushes = git_ok(&d.join("remote.git"), &["reflog", "show", "main"]).lines().count() as u64;
    assert!(pushes < last, "{pushes} pushes carried {last} generations");
    match Arc::try_unwrap(snap) {
        Ok(s) => s.shutdown(),
        Err(_) => panic!("the producer holds no Snapshotter any more"),
    }
}

struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Daemon {
    fn start(repo: &Path, socket: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_with(repo, socket, extra, &[], Stdio::null())
    }

    /// With extra environment (how `git` reaches a remote) and stderr going to `stderr`.
    fn start_with(repo: &Path, socket: &Path, extra: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_wtxt"))
            .arg("daemon")
            .arg("--repo")
            .arg(repo)
            .arg("--socket")
            .arg(socket)
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let t = Instant::now();
        while UnixStream::connect(socket).is_err() {
            assert!(t.elapsed() < Duration::from_secs(10), "daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, socket: socket.to_path_buf() }
    }

    fn ask(&self, line: &str) -> String {
        let mut s = UnixStream::connect(&self.socket).unwrap();
        s.write_all(format!("{line}\n").as_bytes()).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out.trim().to_string()
    }

    fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.ask("status")).unwrap()
    }

    fn stop(mut self) {
        assert_eq!(self.ask("shutdown"), "ok");
        let status = self.child.wait().unwrap();
        assert!(status.success());
    }
}

/// A test that fails midway still stops its daemon.
impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A temporary folder holding a fresh repository `repo` (branch `main`).
fn new_repo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    git_ok(dir.path(), &["init", "-q", "-b", "main", "repo"]);
    let repo = dir.path().join("repo");
    (dir, repo)
}

/// `wtxt log --verify` of the daemon's snapshot in `repo`.
fn log_verified(repo: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_wtxt"))
        .args(["log", "--verify", "-C"])
        .arg(repo)
        .arg("snapshot.wtxt")
        .output()
        .unwrap()
}

fn model(dir: &Path, gen: u64) -> PathBuf {
    let p = dir.join(format!("state{gen}.npz"));
    let g = uniform(gen);
    wtxt::convert::npz::write(&g.arrays, std::fs::File::create(&p).unwrap()).unwrap();
    p
}

/// Generation `gen` of a model of which only `a` and `b` change: 2 of its
/// 6 chunks, so each generation has a delta in the ring.
fn partial_model(dir: &Path, gen: u64) -> PathBuf {
    let p = dir.join(format!("partial{gen}.npz"));
    let mut arrays = uniform(gen).arrays;
    for name in ["c", "d", "e", "f"] {
        arrays.push(Array::new(name, Dtype::U8, vec![16], ArrayData::from(vec![7u8; 16])).unwrap());
    }
    wtxt::convert::npz::write(&arrays, std::fs::File::create(&p).unwrap()).unwrap();
    p
}

#[test]
fn a_failing_remote_parks_pushes_until_it_recovers() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    let remote = d.join("remote.git"); // does not exist yet: pushes fail
    let daemon = Daemon::start(
        &repo,
        &d.join("s.sock"),
        &["--remote", remote.to_str().unwrap(), "--path-in-repo", "models/m.wtxt"],
    );
    for g in 1..=3 {
        assert_eq!(
            daemon.ask(&format!("snapshot {} gen={g}", partial_model(d, g).display())),
            format!("ok gen={g} queued")
        );
        assert_eq!(daemon.ask("flush"), "ok");
    }
    let st = daemon.status();
    assert_eq!(st["last_gen"], 3);
    assert_eq!(st["resend_queue"], 3, "{st}");
    assert!(st["last_error"].as_str().unwrap().contains("push"), "{st}");
    // Its own ring, named for its path in the repository: the newest whole,
    // the others as deltas (each commit holds its generation whole).
    let ring = repo.join(".git/wtxt-ring-models_m.wtxt");
    assert!(ring.join("gen-000003.wtxt").exists() && !ring.join("gen-000001.wtxt").exists());
    assert!(ring.join("gen-000002.wtxtdelta").exists() && ring.join("gen-000003.wtxtdelta").exists());
    git_ok(d, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
    let t = Instant::now();
    loop {
        let st = daemon.status();
        if st["resend_queue"] == 0 {
            assert_eq!(st["pushed_gen"], 3);
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "the resend queue did not drain: {st}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(git_ok(&remote, &["rev-list", "--count", "main"]).trim(), "3", "nothing lost");
    daemon.stop();
    let log =
        Command::new(env!("CARGO_BIN_EXE_wtxt")).args(["log", "-C"]).arg(&repo).arg("models/m.wtxt").output().unwrap();
    assert!(log.status.success(), "{}", String::from_utf8_lossy(&log.stdout));
}

/// The crash window `kill_9_mid_snapshot_then_restart` hits only by luck:
/// the generation reached the ring, not the repository. The restart must
/// redo it from its input and commit it, not chain on from the ring's copy.
#[test]
fn a_generation_in_the_ring_but_not_committed_is_redone_after_a_crash() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    let sock = d.join("s.sock");
    let daemon = Daemon::start(&repo, &sock, &[]);
    assert_eq!(daemon.ask(&format!("snapshot {} gen=1", model(d, 1).display())), "ok gen=1 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    daemon.stop();
    // What the crash left: gen 2 requested and written to the ring, no commit.
    let ring = repo.join(".git/wtxt-ring");
    let input = model(d, 2);
    let o = crate::util::wtxt()
        .arg("snapshot")
        .arg(&input)
        .arg("-o")
        .arg(ring.join("gen-000002.wtxt"))
        .arg("--prev")
        .arg(ring.join("gen-000001.wtxt"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut wal = std::fs::OpenOptions::new().append(true).open(ring.join("wal.log")).unwrap();
    let path = std::fs::canonicalize(&input).unwrap();
    writeln!(wal, "snapshot requested gen=2 ts=1 pathhex={}", hex::encode(path.as_os_str().as_encoded_bytes()))
        .unwrap();
    drop(wal);
    let daemon = Daemon::start(&repo, &sock, &[]);
    assert_eq!(daemon.ask("flush"), "ok");
    let st = daemon.status();
    assert_eq!((&st["last_gen"], &st["lost"]), (&serde_json::json!(2), &serde_json::json!([])), "{st}");
    daemon.stop();
    assert_eq!(git_ok(&repo, &["rev-list", "--count", "main"]).trim(), "2");
    let log = log_verified(&repo);
    assert!(String::from_utf8_lossy(&log.stdout).contains("2 generation(s), chain OK"), "{:?}", log);
}

#[test]
fn kill_9_mid_snapshot_then_restart() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    // A model big enough that the kill lands while it is being written; its
    // name has a space, which the WAL must keep (the replay once cut it there).
    let big = d.join("big model.npy");
    {
        let mut f = std::fs::File::create(&big).unwrap();
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (16384, 1024), }";
        f.write_all(&crate::util::npy_header(dict)).unwrap();
        let row: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        for _ in 0..16384 {
            f.write_all(&row).unwrap();
        }
    }
    let sock = d.join("s.sock");
    let daemon = Daemon::start(&repo, &sock, &[]);
    assert_eq!(daemon.ask(&format!("snapshot {} gen=1", model(d, 1).display())), "ok gen=1 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    assert_eq!(daemon.ask(&format!("snapshot {} gen=2", big.display())), "ok gen=2 queued");
    std::thread::sleep(Duration::from_millis(150));
    let mut daemon = daemon;
    daemon.child.kill().unwrap(); // SIGKILL
    daemon.child.wait().unwrap();
    // No partial file under a final name; the repository is sound.
    let ring = repo.join(".git/wtxt-ring");
    for e in std::fs::read_dir(&ring).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".wtxt") {
            // A 64 MiB model is kept split (head and parts) when its
            // snapshot finished before the kill: verify reads either form.
            let v = crate::util::wtxt().arg("verify").arg(&p).output().unwrap();
            assert!(v.status.success(), "{name} is whole: {}", String::from_utf8_lossy(&v.stderr));
        }
    }
    git_ok(&repo, &["fsck", "--no-progress"]);
    // Restart: the unfinished request is redone from its input.
    let daemon = Daemon::start(&repo, &sock, &[]);
    assert_eq!(daemon.ask("flush"), "ok");
    let st = daemon.status();
    assert_eq!(st["last_gen"], 2, "{st}");
    assert_eq!(st["lost"], serde_json::json!([]));
    daemon.stop();
    git_ok(&repo, &["fsck", "--no-progress"]);
    let log = log_verified(&repo);
    assert!(log.status.success(), "{}", String::from_utf8_lossy(&log.stdout));
    assert!(String::from_utf8_lossy(&log.stdout).contains("2 generation(s), chain OK"));
}

#[test]
fn the_python_example_runs_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "-b", "main", "repo"]);
    git_ok(d, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
    let repo = d.join("repo");
    let sock = d.join("s.sock");
    let cfg = d.join("daemon.toml");
    std::fs::write(
        &cfg,
        format!("remote = \"{}\"\nkeep = 3\nbuild = \"py-example\"\n", d.join("remote.git").display()),
    )
    .unwrap();
    let daemon = Daemon::start(&repo, &sock, &["--config", cfg.to_str().unwrap()]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python/socket_client.py");
    let o = Command::new("python3")
        .arg(script)
        .args(["--socket", sock.to_str().unwrap(), "--steps", "30", "--every", "5", "--dir"])
        .arg(d.join("states"))
        .output()
        .expect("python3 is needed");
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let st = daemon.status();
    assert_eq!(st["last_gen"], 30);
    assert_eq!(st["pushed_gen"], 30);
    assert_eq!(st["requested"], 6);
    // Requests made while a snapshot runs fold into the next one.
    let written = st["snapshots_written"].as_u64().unwrap();
    assert_eq!(written + st["coalesced"].as_u64().unwrap(), 6, "{st}");
    daemon.stop();
    assert_eq!(
        git_ok(&d.join("remote.git"), &["rev-list", "--count", "main"]).trim(),
        written.to_string(),
        "every snapshot pushed"
    );
    let ring: Vec<String> = std::fs::read_dir(repo.join(".git/wtxt-ring"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // The repository holds every generation whole: the ring keeps the
    // newest whole and the deltas of at most the last 3 (none of a
    // generation that changed over half its chunks, which depends on the
    // steps the example's requests landed on).
    let whole: Vec<&String> = ring.iter().filter(|n| n.ends_with(".wtxt")).collect();
    assert_eq!(whole, [&"gen-000030.wtxt".to_string()], "{ring:?}");
    let deltas = ring.iter().filter(|n| n.ends_with(".wtxtdelta")).count() as u64;
    assert!(deltas <= (written - 1).min(3), "{ring:?}");
    let log = log_verified(&repo);
    assert!(log.status.success(), "{}", String::from_utf8_lossy(&log.stdout));
}

#[test]
fn sigterm_finishes_in_flight_work_and_armored_commits_decrypt_with_age() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "-b", "main", "repo"]);
    let repo = d.join("repo");
    let key = d.join("key.txt");
    assert!(Command::new("age-keygen")
        .arg("-o")
        .arg(&key)
        .output()
        .expect("age-keygen (Debian package age)")
        .status
        .success());
    let r = Command::new("age-keygen").arg("-y").arg(&key).output().unwrap();
    let recipient = String::from_utf8(r.stdout).unwrap().trim().to_string();
    let daemon = Daemon::start(
        &repo,
        &d.join("s.sock"),
        &["--recipient", &recipient, "--path-in-repo", "m.wtxt.age", "--message", "train step {gen} ({sha256_all})"],
    );
    assert_eq!(daemon.ask(&format!("snapshot {} gen=7", model(d, 7).display())), "ok gen=7 queued");
    // SIGTERM right away: the queued snapshot is still written and committed.
    let mut daemon = daemon;
    unsafe { libc::kill(daemon.child.id() as i32, libc::SIGTERM) };
    let status = daemon.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let msg = git_ok(&repo, &["log", "-1", "--format=%s"]);
    assert!(msg.starts_with("train step 000007 ("), "{msg}");
    let armored = std::fs::read(repo.join("m.wtxt.age")).unwrap();
    assert!(armored.starts_with(b"-----BEGIN AGE ENCRYPTED FILE-----"));
    let plain = Command::new("age").arg("-d").arg("-i").arg(&key).arg(repo.join("m.wtxt.age")).output().unwrap();
    assert!(plain.status.success());
    let l = wtxt::format::load(&plain.stdout[..], plain.stdout.len() as u64, &Default::default()).unwrap();
    assert_eq!(l.header.meta.gen, 7);
}

#[test]
fn idle_floods_huge_gens_and_regular_files_do_not_break_the_daemon() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    // --socket naming a regular file: refused, and the file is left alone.
    let precious = d.join("precious.txt");
    std::fs::write(&precious, "keep me").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_wtxt"))
        .args(["daemon", "--repo"])
        .arg(&repo)
        .arg("--socket")
        .arg(&precious)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");

    let sock = d.join("s.sock");
    // Under a 400 MB address-space limit. glibc reserves 64 MiB of address
    // space (not heap) per thread arena, so at --threads 8 the arenas alone
    // would pass the limit; two arenas keep the limit a bound on the heap.
    let child = Command::new("sh")
        .env("MALLOC_ARENA_MAX", "2")
        .args(["-c", "ulimit -v 400000 && exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_wtxt"), "daemon", "--repo"])
        .arg(&repo)
        .arg("--socket")
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10), "daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let daemon = Daemon { child, socket: sock.clone() };
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&sock).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the socket is the user's alone");
    // 600 clients that connect and say nothing cost no worker: a request
    // from another client is answered at once while they are held, and
    // again seconds later (silent clients are not waited on one by one).
    let idle: Vec<UnixStream> = (0..600).map(|_| UnixStream::connect(&sock).unwrap()).collect();
    for _ in 0..2 {
        let t = Instant::now();
        let reply = daemon.ask("status");
        assert!(reply.starts_with('{'), "{reply}");
        // A liveness bound, not a figure: workers that waited on each silent
        // connection in turn took over a minute here.
        assert!(t.elapsed() < Duration::from_secs(4), "status took {:?} beside 600 idle connections", t.elapsed());
        std::thread::sleep(Duration::from_secs(6));
    }
    drop(idle);
    let t = Instant::now();
    while !daemon.ask("status").starts_with('{') {
        assert!(t.elapsed() < Duration::from_secs(20), "the daemon did not recover from the flood");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The largest gen would wrap the next one: refused, and nothing wedges.
    let m = model(d, 1);
    let r = daemon.ask(&format!("snapshot {} gen={}", m.display(), u64::MAX));
    assert!(r.starts_with("error") && r.contains("largest"), "{r}");
    assert_eq!(daemon.ask(&format!("snapshot {}", m.display())), "ok gen=0 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    daemon.stop();
    assert!(!sock.exists(), "the socket is removed on shutdown");
}

/// Snapshots two generations through the daemon to `remote` and checks
/// they arrived; `env` tells `git` how to reach it.
fn pushes_arrive(d: &Path, remote_url: &str, bare: &Path, env: &[(&str, &str)]) {
    let repo = d.join("repo");
    git_ok(d, &["init", "-q", "-b", "main", "repo"]);
    let daemon = Daemon::start_with(&repo, &d.join("s.sock"), &["--remote", remote_url], env, Stdio::null());
    for g in 1..=2 {
        assert_eq!(daemon.ask(&format!("snapshot {} gen={g}", model(d, g).display())), format!("ok gen={g} queued"));
        assert_eq!(daemon.ask("flush"), "ok");
    }
    let st = daemon.status();
    assert_eq!(st["resend_queue"], 0, "{st}");
    assert_eq!(st["pushed_gen"], 2, "{st}");
    assert!(st["last_error"].is_null(), "{st}");
    daemon.stop();
    assert_eq!(git_ok(bare, &["rev-list", "--count", "main"]).trim(), "2");
}

/// The daemon pushes over ssh with the user's own key, through a
/// real `sshd` on loopback.
#[test]
fn pushes_over_ssh_to_a_real_sshd_on_loopback() {
    let sshd = Path::new("/usr/sbin/sshd");
    assert!(sshd.exists(), "this test needs Debian's openssh-server (.ci/run installs it)");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let keygen = |p: &Path| {
        let o = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(p).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    keygen(&d.join("host_key"));
    keygen(&d.join("user_key"));
    std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
    let port = free_port();
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap().trim().to_string();
    let config = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {h}\nAuthorizedKeysFile {a}\nPidFile {p}\nStrictModes no\n\
         UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
         AllowUsers {user}\n",
        h = d.join("host_key").display(),
        a = d.join("authorized_keys").display(),
        p = d.join("sshd.pid").display(),
    );
    std::fs::write(d.join("sshd_config"), config).unwrap();
    // sshd wants its privilege-separation folder.
    let _ = std::fs::create_dir_all("/run/sshd");
    let _server = Server(
        Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port);
    let bare = d.join("remote.git");
    git_ok(d, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
    let ssh = format!(
        "ssh -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR",
        d.join("user_key").display()
    );
    let url = format!("ssh://{user}@127.0.0.1:{port}{}", bare.display());
    pushes_arrive(d, &url, &bare, &[("GIT_SSH_COMMAND", &ssh)]);
}

/// The daemon pushes over git:// to a real `git daemon` on loopback.
#[test]
fn pushes_over_git_protocol_to_a_real_git_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let served = d.join("served");
    std::fs::create_dir_all(&served).unwrap();
    git_ok(&served, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
    let (_server, port) = git_daemon(&served);
    pushes_arrive(d, &format!("git://127.0.0.1:{port}/remote.git"), &served.join("remote.git"), &[]);
}

/// The daemon pushes over https, to real `git http-backend` behind TLS and
/// Basic authentication: the daemon's `git push` trusts the certificate and
/// finds the password the way the user's git does (`GIT_SSL_CAINFO`, and a
/// credential helper from its config).
#[test]
fn pushes_over_https_with_the_users_credential_helper() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let served = d.join("served");
    std::fs::create_dir_all(&served).unwrap();
    git_ok(&served, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
    git_ok(&served.join("remote.git"), &["config", "http.receivepack", "true"]);
    let o = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(d.join("key.pem"))
        .arg("-out")
        .arg(d.join("cert.pem"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let port = free_port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/https_git_server.py");
    let _server = Server(
        Command::new("python3")
            .arg(script)
            .arg(port.to_string())
            .arg(&served)
            .arg(d.join("cert.pem"))
            .arg(d.join("key.pem"))
            .arg("pusher:s3cret")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_port(port);
    let creds = d.join("credentials");
    std::fs::write(&creds, format!("https://pusher:s3cret@127.0.0.1:{port}\n")).unwrap();
    let (ca, helper) = (d.join("cert.pem").display().to_string(), format!("store --file={}", creds.display()));
    let env = [
        ("GIT_SSL_CAINFO", ca.as_str()),
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "credential.helper"),
        ("GIT_CONFIG_VALUE_0", helper.as_str()),
    ];
    pushes_arrive(d, &format!("https://127.0.0.1:{port}/remote.git"), &served.join("remote.git"), &env);

    // A secret on the daemon's command line is refused (`ps` shows it),
    // named without the secret.
    let o = Command::new(env!("CARGO_BIN_EXE_wtxt"))
        .args(["daemon", "--repo"])
        .arg(d.join("repo"))
        .arg("--socket")
        .arg(d.join("refused.sock"))
        .args(["--remote", &format!("https://pusher:s3cret@127.0.0.1:{port}/remote.git")])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{said}");
    assert!(said.contains("--remote-password-file") && !said.contains("s3cret"), "{said}");
    // The secret from the environment (or a file) reaches git through its
    // environment, never its command line; a wrong one fails with the
    // secret left out of every message.
    let d2 = d.join("with-credentials");
    std::fs::create_dir(&d2).unwrap();
    git_ok(&served, &["init", "-q", "--bare", "-b", "main", "second.git"]);
    git_ok(&served.join("second.git"), &["config", "http.receivepack", "true"]);
    let url = format!("https://pusher@127.0.0.1:{port}/second.git");
    pushes_arrive(&d2, &url, &served.join("second.git"), &[env[0], ("WTXT_REMOTE_PASSWORD", "s3cret")]);
    let d3 = d.join("wrong");
    std::fs::create_dir(&d3).unwrap();
    let repo = d3.join("repo");
    git_ok(&d3, &["init", "-q", "-b", "main", "repo"]);
    let log = d3.join("daemon.err");
    let secret = d3.join("token");
    std::fs::write(&secret, "wr0ng-t0ken\n").unwrap();
    let daemon = Daemon::start_with(
        &repo,
        &d3.join("s.sock"),
        &["--remote", &url, "--remote-password-file", secret.to_str().unwrap()],
        &env[..1],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    assert_eq!(daemon.ask(&format!("snapshot {} gen=1", model(&d3, 1).display())), "ok gen=1 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    let st = daemon.status();
    daemon.stop();
    let said = format!("{st} {}", std::fs::read_to_string(&log).unwrap());
    assert!(st["last_error"].is_string() && !said.contains("wr0ng-t0ken"), "{said}");
}

/// Issue 50.10: a remote that redirects to another origin is handed no
/// credential (plain `git push` sends it nothing either): the helper
/// answers only for the remote's own protocol, host and port.
#[test]
fn a_redirect_to_another_origin_gets_no_credential() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let served = d.join("served");
    std::fs::create_dir_all(&served).unwrap();
    git_ok(&served, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
    git_ok(&served.join("remote.git"), &["config", "http.receivepack", "true"]);
    let o = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(d.join("key.pem"))
        .arg("-out")
        .arg(d.join("cert.pem"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/https_git_server.py");
    let (front, elsewhere) = (free_port(), free_port());
    let heard = d.join("heard");
    let serve = |port: u16, extra: &[String]| {
        Server(
            Command::new("python3")
                .arg(&script)
                .arg(port.to_string())
                .arg(&served)
                .arg(d.join("cert.pem"))
                .arg(d.join("key.pem"))
                .arg("pusher:s3cret")
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let _front = serve(front, &["--redirect-to".into(), format!("https://127.0.0.1:{elsewhere}")]);
    let _elsewhere = serve(elsewhere, &["--log-auth".into(), heard.display().to_string()]);
    wait_for_port(front);
    wait_for_port(elsewhere);
    let repo = d.join("repo");
    git_ok(d, &["init", "-q", "-b", "main", "repo"]);
    let ca = d.join("cert.pem").display().to_string();
    let daemon = Daemon::start_with(
        &repo,
        &d.join("s.sock"),
        &["--remote", &format!("https://pusher@127.0.0.1:{front}/remote.git")],
        &[("GIT_SSL_CAINFO", ca.as_str()), ("WTXT_REMOTE_PASSWORD", "s3cret")],
        Stdio::null(),
    );
    assert_eq!(daemon.ask(&format!("snapshot {} gen=1", model(d, 1).display())), "ok gen=1 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    let st = daemon.status();
    daemon.stop();
    assert!(st["last_error"].is_string(), "the push cannot succeed: {st}");
    let got = std::fs::read_to_string(&heard).unwrap_or_default();
    assert!(got.is_empty(), "the other origin was sent a credential: {got}");
}

/// A push that fails is said at once on stderr, with the remote's
/// answer, and in `status.last_error`; the generation waits in the queue.
#[test]
fn a_failing_push_is_logged_at_once_with_the_remotes_answer() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    let log = d.join("daemon.err");
    let url = format!("ssh://nobody@127.0.0.1:{}/nowhere.git", free_port());
    let ssh = "ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5";
    let daemon = Daemon::start_with(
        &repo,
        &d.join("s.sock"),
        &["--remote", &url],
        &[("GIT_SSH_COMMAND", ssh)],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    assert_eq!(daemon.ask(&format!("snapshot {} gen=1", model(d, 1).display())), "ok gen=1 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    let st = daemon.status();
    assert_eq!(st["resend_queue"], 1, "{st}");
    let err = st["last_error"].as_str().unwrap().to_string();
    assert!(err.contains("push to ssh://") && err.contains("git push exited"), "{err}");
    assert!(err.contains("Connection refused") || err.contains("connect"), "the remote's answer: {err}");
    daemon.stop();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("wtxt daemon: push to ssh://"), "stderr: {logged}");
}

/// A generation that changed over half its chunks gets no delta in the
/// ring of a repository: the delta would be a second copy of what its
/// commit holds whole. One that changed less gets its delta.
#[test]
fn a_generation_that_changed_wholly_has_no_delta_beside_its_commit() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    let daemon = Daemon::start_with(&repo, &d.join("s.sock"), &[], &[], Stdio::null());
    for g in 1..=3 {
        assert_eq!(daemon.ask(&format!("snapshot {} gen={g}", model(d, g).display())), format!("ok gen={g} queued"));
        assert_eq!(daemon.ask("flush"), "ok");
    }
    let ring = repo.join(".git/wtxt-ring");
    let names = || -> Vec<String> {
        let mut n: Vec<String> =
            std::fs::read_dir(&ring).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        n.retain(|n| n.starts_with("gen-"));
        n.sort();
        n
    };
    assert_eq!(names(), ["gen-000003.wtxt"], "every chunk changed: no deltas");
    assert_eq!(daemon.ask(&format!("snapshot {} gen=4", partial_model(d, 4).display())), "ok gen=4 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    assert_eq!(daemon.ask(&format!("snapshot {} gen=5", partial_model(d, 5).display())), "ok gen=5 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    // gen 4 added four arrays (six chunks, four new); gen 5 changed two of six.
    assert_eq!(names(), ["gen-000005.wtxt", "gen-000005.wtxtdelta"]);
    daemon.stop();
    // Each commit's files went into a pack of its own (none loose), which
    // Git reads back whole.
    let counts = git_ok(&repo, &["count-objects", "-v"]);
    assert!(counts.contains("packs: 5\n"), "{counts}");
    git_ok(&repo, &["fsck", "--full", "--strict"]);
}

/// wtxt's keep files in `repo`'s pack folder, sorted.
fn kept(repo: &Path) -> Vec<String> {
    let mut k: Vec<String> = std::fs::read_dir(repo.join(".git/objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".keep"))
        .collect();
    k.sort();
    k
}

/// A generation dropped by a reset, once no reflog names it, loses its
/// pack's keep file when the daemon next starts, so that `git gc` prunes
/// it; the generations still reached keep theirs. The chain goes on from
/// HEAD's generation, which the ring no longer holds.
#[test]
fn a_restart_releases_the_kept_pack_of_a_generation_a_reset_dropped() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    let sock = d.join("s.sock");
    let daemon = Daemon::start(&repo, &sock, &[]);
    let mut packs = Vec::new();
    for g in 1..=2 {
        assert_eq!(daemon.ask(&format!("snapshot {} gen={g}", model(d, g).display())), format!("ok gen={g} queued"));
        assert_eq!(daemon.ask("flush"), "ok");
        packs.push(kept(&repo));
    }
    daemon.stop();
    let dropped: Vec<&String> = packs[1].iter().filter(|k| !packs[0].contains(k)).collect();
    assert_eq!((packs[0].len(), dropped.len()), (1, 1), "every chunk changed each time: both packs kept");
    git_ok(&repo, &["reset", "-q", "--hard", "HEAD~1"]);
    // Still named by the reflog: kept through a restart.
    Daemon::start(&repo, &sock, &[]).stop();
    assert_eq!(kept(&repo), packs[1]);
    git_ok(&repo, &["reflog", "expire", "--expire=now", "--all"]);
    // The ring no longer holds HEAD's generation: the chain goes on from
    // the work tree's copy only while it is HEAD's.
    let head = repo.join("snapshot.wtxt");
    let committed = std::fs::read(&head).unwrap();
    std::fs::write(&head, [&committed[..], b"\n"].concat()).unwrap();
    let mut cfg = PipelineConfig::new(repo.join(".git/wtxt-ring"));
    cfg.repo = Some(repo.clone());
    cfg.path_in_repo = "snapshot.wtxt".into();
    let refused = wtxt::daemon::Pipeline::open(cfg).err().expect("a work tree that is not HEAD's refused");
    assert!(refused.to_string().contains("git checkout -- snapshot.wtxt"), "{refused}");
    git_ok(&repo, &["checkout", "--", "snapshot.wtxt"]);
    let daemon = Daemon::start(&repo, &sock, &[]);
    assert_eq!(kept(&repo), packs[0], "the dropped generation's pack released");
    assert_eq!(daemon.ask(&format!("snapshot {} gen=3", model(d, 3).display())), "ok gen=3 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    daemon.stop();
    git_ok(&repo, &["gc", "-q", "--prune=now"]);
    let pack = repo.join(".git/objects/pack").join(dropped[0].replace(".keep", ".pack"));
    assert!(!pack.exists(), "the dropped generation pruned");
    git_ok(&repo, &["fsck", "--full", "--strict"]);
    let log = log_verified(&repo);
    assert!(String::from_utf8_lossy(&log.stdout).contains("2 generation(s), chain OK"), "{:?}", log);
}

/// While pushes fail, the ring keeps deltas, not a full copy per
/// generation (each commit holds its generation whole); each rebuilds
/// exactly from the one before and its delta, and once the remote is back
/// everything arrives.
#[test]
fn an_unreachable_remote_leaves_deltas_in_the_ring_not_copies() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    let remote = d.join("later.git");
    let daemon =
        Daemon::start_with(&repo, &d.join("s.sock"), &["--remote", remote.to_str().unwrap()], &[], Stdio::null());
    for g in 1..=4 {
        assert_eq!(
            daemon.ask(&format!("snapshot {} gen={g}", partial_model(d, g).display())),
            format!("ok gen={g} queued")
        );
        assert_eq!(daemon.ask("flush"), "ok");
    }
    assert_eq!(daemon.status()["resend_queue"], 4);
    let ring = repo.join(".git/wtxt-ring");
    let has = |f: &str| ring.join(f).exists();
    assert!(has("gen-000004.wtxt"), "the newest stays whole");
    for g in 1..=3 {
        assert!(!has(&format!("gen-00000{g}.wtxt")), "gen {g}: no full copy beside its commit");
    }
    for g in 2..=4 {
        assert!(has(&format!("gen-00000{g}.wtxtdelta")), "gen {g}: its delta");
    }
    // The generations rebuild exactly from the first commit and the deltas.
    let mut prev = d.join("gen1.wtxt");
    std::fs::write(&prev, git_ok(&repo, &["show", "HEAD~3:snapshot.wtxt"])).unwrap();
    for g in 2..=3 {
        let out = d.join(format!("rebuilt{g}.wtxt"));
        let o = crate::util::wtxt()
            .args(["delta", "apply"])
            .arg(&prev)
            .arg(ring.join(format!("gen-00000{g}.wtxtdelta")))
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let committed = git_ok(&repo, &["show", &format!("HEAD~{}:snapshot.wtxt", 4 - g)]);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), committed, "gen {g}");
        prev = out;
    }
    git_ok(d, &["init", "-q", "--bare", "-b", "main", "later.git"]);
    assert_eq!(daemon.ask("flush"), "ok");
    let st = daemon.status();
    assert_eq!(st["resend_queue"], 0, "{st}");
    daemon.stop();
    assert_eq!(git_ok(&remote, &["rev-list", "--count", "main"]).trim(), "4");
}

/// Nothing chains from what it did not verify: on restart the daemon
/// verifies the ring's newest snapshot whole before continuing its chain,
/// so a forged header and a damaged data line below an intact one both stop it.
#[test]
fn a_tampered_ring_file_stops_the_restart() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    let key = crate::util::fixture("keys/sign.pem");
    let sock = d.join("s.sock");
    let daemon = Daemon::start(&repo, &sock, &["--sign-key", key.to_str().unwrap()]);
    assert_eq!(daemon.ask(&format!("snapshot {} gen=1", model(d, 1).display())), "ok gen=1 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    daemon.stop();
    let ring_file = repo.join(".git/wtxt-ring/gen-000001.wtxt");
    let text = std::fs::read_to_string(&ring_file).unwrap();
    // A character changed for another of its kind (hex digit, base64).
    let flip = |i: usize, (a, b): (&str, &str)| {
        let mut bad = text.clone();
        bad.replace_range(i..i + 1, if &text[i..i + 1] == a { b } else { a });
        bad
    };
    let root = text.find("merkle_this=").unwrap() + "merkle_this=".len();
    let data = text.find("\nch ").map(|i| i + 1 + text[i + 1..].find('\n').unwrap() + 4).unwrap();
    for (bad, expected) in [(flip(root, ("0", "1")), "line 4"), (flip(data, ("A", "B")), "parity")] {
        std::fs::write(&ring_file, bad).unwrap();
        // A daemon that starts anyway is stopped (exit 124), not waited for.
        let o = Command::new("timeout")
            .args(["30", env!("CARGO_BIN_EXE_wtxt"), "daemon", "--repo"])
            .arg(&repo)
            .arg("--socket")
            .arg(&sock)
            .args(["--sign-key", key.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("the ring's newest snapshot") && err.contains(expected), "{err}");
    }
}

/// A remote that accepts the connection and never answers does not keep
/// `shutdown` waiting for the 600 s push stall: the push is given up after
/// 10 s of silence once the daemon is stopping, and its generation stays
/// in the resend queue on disk.
#[test]
fn a_silent_remote_does_not_hold_up_shutdown() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let url = format!("ssh://nobody@127.0.0.1:{port}/silent.git");
    let ssh = "ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null";
    let daemon =
        Daemon::start_with(&repo, &d.join("s.sock"), &["--remote", &url], &[("GIT_SSH_COMMAND", ssh)], Stdio::null());
    assert_eq!(daemon.ask(&format!("snapshot {} gen=1", model(d, 1).display())), "ok gen=1 queued");
    let _silent = held.join().unwrap().unwrap(); // the push is connected, and hears nothing
    let t = Instant::now();
    daemon.stop();
    // A liveness bound: the stall limit outside shutdown is 600 s.
    assert!(t.elapsed() < Duration::from_secs(60), "shutdown took {:?}", t.elapsed());
    let queue = std::fs::read_to_string(repo.join(".git/wtxt-ring/resend.queue")).unwrap();
    let head = git_ok(&repo, &["rev-parse", "HEAD"]);
    assert_eq!(queue.trim(), format!("gen=1 commit={}", head.trim()), "the queue names the commit to push");
}

#[test]
fn the_daemon_snapshots_a_hugging_face_folder_and_commits_it() {
    let (dir, repo) = new_repo();
    let m = crate::hf::folder(dir.path());
    let sock = dir.path().join("s.sock");
    let daemon = Daemon::start(&repo, &sock, &[]);
    assert_eq!(daemon.ask(&format!("snapshot {}", m.display())), "ok gen=0 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    daemon.stop();
    // The committed snapshot gives the folder back.
    let out = dir.path().join("back");
    let o = Command::new(env!("CARGO_BIN_EXE_wtxt"))
        .args(["extract"])
        .arg(repo.join("snapshot.wtxt"))
        .arg("--hf")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(crate::hf::files(&out), crate::hf::files(&m));
    assert!(log_verified(&repo).status.success());
    // Its commit set up the diff driver, calling this very binary.
    let driver = git_ok(&repo, &["config", "--local", "diff.wtxt.command"]);
    assert_eq!(driver.trim(), format!("{} git diff-driver", env!("CARGO_BIN_EXE_wtxt")));
}

/// Issue 50.11: the snapshot's path in the repository is resolved without
/// following a link: a committed `ckpt -> /elsewhere` is refused (nothing
/// written there, nothing committed), and a path into `.git` never passes.
#[test]
fn a_path_in_the_repository_through_a_link_or_into_git_is_refused() {
    use wtxt::daemon::DaemonConfig;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git_ok(d, &["init", "-q", "-b", "main", "repo"]);
    let repo = d.join("repo");
    for bad in [".git/config", "sub/.GIT/x.wtxt", "../out.wtxt"] {
        let cfg = DaemonConfig { repo: Some(repo.clone()), path_in_repo: Some(bad.into()), ..Default::default() };
        assert!(cfg.pipeline(Arc::new(|_: &str| {})).is_err(), "{bad}");
    }
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, repo.join("ckpt")).unwrap();
    let cfg =
        DaemonConfig { repo: Some(repo.clone()), path_in_repo: Some("ckpt/model.wtxt".into()), ..Default::default() };
    let (pc, _) = cfg.pipeline(Arc::new(|_: &str| {})).unwrap();
    let snap = Snapshotter::start(pc, Generation::default(), Queue::default()).unwrap();
    let outcomes = snap.outcomes();
    snap.publish(Arc::new(uniform(1)));
    snap.request_snapshot();
    let o = outcomes.wait_for(1, Some(Duration::from_secs(60))).unwrap();
    assert!(o.error.as_deref().is_some_and(|e| e.contains("symbolic link")), "{o:?}");
    snap.shutdown();
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");
    assert!(!git_cmd_ok(&repo, &["rev-parse", "HEAD"]), "nothing committed");
}

/// Issue 50.15: with a sign key, the chain continues only from a
/// generation it signed (an unsigned one planted at the top of the ring is
/// refused); a lock that is a FIFO, or a ring that is a link, is refused
/// at once, never waited on or followed.
#[test]
fn the_ring_is_taken_only_as_the_pipeline_left_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = || Some(wtxt::crypto::SecretKey::from_file(&crate::util::fixture("keys/sign.pem")).unwrap());
    let ring = d.join("ring");
    let start = |ring: &Path, key: Option<wtxt::crypto::SecretKey>| {
        let mut cfg = PipelineConfig::new(ring);
        cfg.keys.sign_key = key;
        Snapshotter::start(cfg, Generation::default(), Queue::default())
    };
    let snap = start(&ring, key()).unwrap();
    snap.publish(Arc::new(uniform(1)));
    snap.request_snapshot();
    snap.flush();
    snap.shutdown();
    // An unsigned generation 2 at the top of the ring.
    let forged = d.join("forged.wtxt");
    let g = uniform(2);
    let opts = wtxt::format::WriteOptions::new(wtxt::format::syntax::Meta::new(2, None).unwrap(), 128);
    wtxt::store::write_wtxt(&g.arrays, &opts, &forged, Default::default(), None, &wtxt::progress::Progress::hidden())
        .unwrap();
    std::fs::rename(&forged, ring.join("gen-000002.wtxt")).unwrap();
    let err = start(&ring, key()).err().expect("an unsigned chain base is refused").to_string();
    assert!(err.contains("signature"), "{err}");
    std::fs::remove_file(ring.join("gen-000002.wtxt")).unwrap();
    assert!(start(&ring, key()).is_ok(), "its own signed generation is taken");
    // A FIFO where the lock goes.
    let fifo_ring = d.join("fifo-ring");
    std::fs::create_dir(&fifo_ring).unwrap();
    assert!(std::process::Command::new("mkfifo").arg(fifo_ring.join("lock")).status().unwrap().success());
    let t = Instant::now();
    let err = start(&fifo_ring, None).err().expect("a FIFO lock is refused").to_string();
    assert!(t.elapsed() < Duration::from_secs(10) && err.contains("regular file"), "{err}");
    // A ring that is a link: refused, nothing deleted where it points.
    let target = d.join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join(".keep.tmp"), "x").unwrap();
    std::os::unix::fs::symlink(&target, d.join("linked-ring")).unwrap();
    assert!(start(&d.join("linked-ring"), None).is_err());
    assert!(target.join(".keep.tmp").exists());
}

fn git_cmd_ok(dir: &Path, args: &[&str]) -> bool {
    crate::util::git_cmd(dir, args, &[]).status.success()
}

/// The daemon snapshots a checkpoint of MXFP4 blocks, E8M0 scales, the FNUZ
/// float8s and complex64 as `wtxt snapshot` does: what it commits extracts
/// to the file it was given, byte for byte.
#[test]
fn the_daemon_keeps_every_dtype_bit_for_bit() {
    let (dir, repo) = new_repo();
    let d = dir.path();
    let st = d.join("mx.safetensors");
    crate::dtypes::torch_checkpoint(&st, 0x72, 127);
    let daemon = Daemon::start(&repo, &d.join("s.sock"), &[]);
    assert_eq!(daemon.ask(&format!("snapshot {} gen=1", st.display())), "ok gen=1 queued");
    assert_eq!(daemon.ask("flush"), "ok");
    daemon.stop();
    let o = log_verified(&repo);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let back = d.join("back.safetensors");
    let r = crate::util::run(&["extract", repo.join("snapshot.wtxt").to_str().unwrap(), "-o", back.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(std::fs::read(&st).unwrap() == std::fs::read(&back).unwrap());
}
