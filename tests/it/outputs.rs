//! Outputs, names and messages under hostile conditions: devices are written through, not replaced; a killed
//! command leaves no temporary file; reserved names from inputs are
//! refused; messages escape control bytes and name the real file; a file
//! that is not a WTXT is unusable input (exit 2), and a FIFO never blocks.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::util::{fixture, git_cmd, read, run};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn devices_are_written_through_and_outputs_never_collide() {
    let r = run(&["snapshot", "inputs/model.npz", "-o", "/dev/null"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let m = std::fs::metadata("/dev/null").unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()), "/dev/null is still a device");
    // Through a pipe: the WTXT arrives on stdout, whole.
    let o = crate::util::wtxt()
        .args(["snapshot", "inputs/model.npz", "-o", "/dev/stdout", "--ts", "2026-02-02T12:00:00Z"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(o.stdout, read("expected/defaults.wtxt"));
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let r = run(&["finalize", "expected/streaming.wtxt", "-o", s(&a), "--rewrite", s(&a)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!a.exists());
    // A full disk names the output, not "output" or a temporary file.
    for args in [
        &["snapshot", "inputs/model.npz", "-o", "/dev/full"][..],
        &["extract", "expected/defaults.wtxt", "-o", "/dev/full"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        if args[0] == "snapshot" {
            assert!(r.stderr.starts_with("wtxt: /dev/full: No space left"), "{}", r.stderr);
        }
    }
    // A missing folder is named as the user gave it, not as a temporary file.
    let r = run(&["snapshot", "inputs/model.npz", "-o", "/nonexistent/dir/x.wtxt"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.starts_with("wtxt: /nonexistent/dir/x.wtxt: No such file"), "{}", r.stderr);
}

#[test]
fn sigterm_removes_the_temporary_file() {
    // One file, and a split snapshot (its parts wait in a folder of their own).
    for extra in [&["--part-size", "none"][..], &[]] {
        let dir = tempfile::tempdir().unwrap();
        // 256 MiB of f32: long enough to be caught mid-write.
        let big = dir.path().join("big.npy");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&big).unwrap();
            let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (67108864,), }";
            f.write_all(&crate::util::npy_header(dict)).unwrap();
            f.set_len(127 + 1 + (256 << 20)).unwrap();
        }
        let out = dir.path().join("out.wtxt");
        let parts = dir.path().join("out.wtxt.parts");
        let mut child = Command::new(env!("CARGO_BIN_EXE_wtxt"))
            .arg("snapshot")
            .arg(&big)
            .arg("-o")
            .arg(&out)
            .args(extra)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until the temporary files exist, then interrupt.
        let t = std::time::Instant::now();
        let tmp_in = |d: &std::path::Path| {
            std::fs::read_dir(d)
                .is_ok_and(|mut r| r.any(|e| e.unwrap().file_name().to_string_lossy().ends_with(".tmp")))
        };
        let writing = || tmp_in(dir.path()) && (extra.is_empty() == tmp_in(&parts));
        while !writing() {
            assert!(t.elapsed() < Duration::from_secs(20), "no temporary file appeared");
            assert!(child.try_wait().unwrap().is_none(), "finished before it could be interrupted");
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: a plain kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
        assert!(!tmp_in(dir.path()), "the temporary file is gone");
        assert!(!parts.exists(), "the parts folder it made is gone");
        assert!(!out.exists(), "nothing under the final name");
    }
}

#[test]
fn reserved_names_from_inputs_are_refused_never_interpreted() {
    let dir = tempfile::tempdir().unwrap();
    // A safetensors tensor named __npz would steer the npz writer.
    let mut header = br#"{"__npz":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#.to_vec();
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut st = (header.len() as u64).to_le_bytes().to_vec();
    st.extend_from_slice(&header);
    st.extend_from_slice(b"{}");
    let p = dir.path().join("evil.safetensors");
    std::fs::write(&p, st).unwrap();
    let out = dir.path().join("o.wtxt");
    let r = run(&["snapshot", s(&p), "-o", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("reserved"), "{}", r.stderr);
    // An original that begins with `__` but does not fit the name set is
    // refused too (FORMAT.md section 9), never mapped.
    for name in ["__.x", "__\u{e9}", "___weight..1"] {
        // Written under a name of the same length, renamed in the archive's bytes.
        let stand_in = "q".repeat(name.len());
        let a = wtxt::model::Array::new(stand_in.clone(), wtxt::model::Dtype::U8, vec![1], vec![1].into()).unwrap();
        let mut zip = wtxt::convert::npz::write(&[a], std::io::Cursor::new(Vec::new())).unwrap().into_inner();
        let (from, to) = (format!("{stand_in}.npy").into_bytes(), format!("{name}.npy").into_bytes());
        let mut at = 0;
        while let Some(p) = zip[at..].windows(from.len()).position(|w| w == from) {
            zip[at + p..at + p + to.len()].copy_from_slice(&to);
            at += p + to.len();
        }
        let npz = dir.path().join("under.npz");
        std::fs::write(&npz, zip).unwrap();
        let r = run(&["snapshot", s(&npz), "-o", s(&out)]);
        assert_eq!(r.code, 2, "{name}: {}", r.stderr);
        assert!(r.stderr.contains("reserved"), "{name}: {}", r.stderr);
    }
    // A WTXT whose __npz names a member outside the archive's folder.
    use wtxt::model::{Array, Dtype};
    let a = Array::new("a", Dtype::U8, vec![3], vec![1, 2, 3].into()).unwrap();
    let meta = wtxt::convert::meta_array("__npz", &serde_json::json!({"keys": [{"key": "../../evil", "array": "a"}]}))
        .unwrap();
    let w = dir.path().join("keys.wtxt");
    let opts = wtxt::format::WriteOptions::new(wtxt::format::syntax::Meta::new(0, None).unwrap(), 128);
    wtxt::store::write_wtxt(&[meta, a], &opts, &w, Default::default(), None, &wtxt::progress::Progress::hidden())
        .unwrap();
    let npz = dir.path().join("o.npz");
    let r = run(&["convert", s(&w), "--to", "npz", "-o", s(&npz)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("not a safe archive member name"), "{}", r.stderr);
    assert!(!npz.exists());
}

#[test]
fn messages_escape_control_bytes_and_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // An npz member whose name carries ESC: the error shows \x1b, not the byte.
    let p = dir.path().join("esc.npz");
    let w = std::fs::File::create(&p).unwrap();
    let mut z = zip::ZipWriter::new(w);
    z.start_file("\x1b[2Jx.npy", zip::write::SimpleFileOptions::default()).unwrap();
    std::io::Write::write_all(&mut z, b"not an npy").unwrap();
    z.finish().unwrap();
    let r = run(&["snapshot", s(&p), "-o", s(&dir.path().join("o.wtxt"))]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!r.stderr.contains('\x1b'), "raw ESC in {:?}", r.stderr);
    assert!(r.stderr.contains("\\x1b"), "{:?}", r.stderr);
    // Two inputs with one array name: both files are named.
    let r = run(&["snapshot", "inputs/model.npz", "inputs/model.npz", "-o", s(&dir.path().join("o.wtxt"))]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("comes from both inputs/model.npz and inputs/model.npz"), "{}", r.stderr);
}

#[test]
fn not_a_wtxt_is_unusable_input_and_a_fifo_never_blocks() {
    let r = run(&["verify", &fixture("../peers/st_all_dtypes.safetensors").display().to_string()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("not a WTXT file"), "{}", r.stderr);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path in our own temporary folder.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_wtxt"))
        .arg("verify")
        .arg(&fifo)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("verify blocked on a FIFO with no writer");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(2));
}

#[test]
fn textconv_shows_a_file_that_is_not_wtxt_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    let git = |args: &[&str]| git_cmd(repo, args, &[]);
    assert!(git(&["init", "-q", "-b", "main"]).status.success());
    let o = Command::new(env!("CARGO_BIN_EXE_wtxt")).current_dir(repo).args(["git", "install"]).output().unwrap();
    assert!(o.status.success());
    std::fs::write(repo.join("notes.wtxt"), "just some notes\n").unwrap();
    assert!(git(&["add", "notes.wtxt"]).status.success());
    assert!(git(&["commit", "-qm", "x", "--no-verify"]).status.success());
    let o = git(&["show", "HEAD"]);
    assert!(o.status.success(), "git show failed: {}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("just some notes"));
}
