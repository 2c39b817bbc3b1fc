//! A hostile repository, pull request or key path: what a cloned work tree
//! or a path a user names cannot make `wtxt` read, write, follow or reset.

use std::path::Path;

use crate::util::{git_cmd, git_ok, wtxt};

fn init(dir: &Path) {
    git_ok(dir, &["init", "-q", "-b", "main"]);
}

/// A committed `.gitattributes` that is a link to a secret (or to a
/// device) is never read by `git install`: refused, exit 2, nothing copied.
#[test]
fn git_install_refuses_a_linked_gitattributes() {
    for target in ["secret", "/dev/zero"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let secret = d.join("secret");
        std::fs::write(&secret, "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
        let repo = d.join("repo");
        std::fs::create_dir(&repo).unwrap();
        init(&repo);
        let to = if target == "secret" { secret.clone() } else { target.into() };
        std::os::unix::fs::symlink(&to, repo.join(".gitattributes")).unwrap();
        git_ok(&repo, &["add", ".gitattributes"]);
        git_ok(&repo, &["-c", "user.name=a", "-c", "user.email=a@a", "commit", "-qm", "attributes"]);
        let o = wtxt().current_dir(&repo).args(["git", "install"]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{target}: {err}");
        assert!(err.contains(".gitattributes") && err.contains("symbolic link"), "{err}");
        assert!(std::fs::symlink_metadata(repo.join(".gitattributes")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "-----BEGIN OPENSSH PRIVATE KEY-----\n");
        assert!(!String::from_utf8_lossy(&o.stdout).contains("installed"));
    }
}

/// `git install --filter` checks out the files it now carries by their
/// index paths, literally: a committed file named `:!x.npz` is that file,
/// not a pattern that resets every modified file to HEAD.
#[test]
fn git_install_hands_git_literal_paths() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path();
    init(repo);
    let text = std::fs::read(crate::util::fixture("expected/defaults.wtxt")).unwrap();
    std::fs::write(repo.join(":!x.npz"), &text).unwrap();
    std::fs::write(repo.join("notes.txt"), "committed\n").unwrap();
    git_ok(repo, &["add", "--", ":(literal):!x.npz", "notes.txt"]);
    let o = git_cmd(repo, &["commit", "-qm", "x"], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(repo.join("notes.txt"), "uncommitted work\n").unwrap();
    let o = wtxt().current_dir(repo).args(["git", "install", "--filter", "npz"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read_to_string(repo.join("notes.txt")).unwrap(), "uncommitted work\n");
    // The filtered file itself was checked out again through the filter.
    assert!(!std::fs::read(repo.join(":!x.npz")).unwrap().starts_with(b"WTXT"), "smudged to its binary form");
}

/// Key, trusted-keys, HMAC and identity files are regular files read
/// through a bounded reader: a device or a FIFO is refused at once (exit
/// 2, the file named), never read without end or waited on.
#[test]
fn key_files_that_are_devices_or_fifos_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let model = crate::util::fixture("inputs/model.npz");
    let out = d.join("o.wtxt");
    let signed = crate::util::fixture("expected/signed_pkcs8.wtxt");
    for bad in ["/dev/zero", fifo.to_str().unwrap()] {
        let cases: Vec<Vec<&std::ffi::OsStr>> = vec![
            vec![
                "snapshot".as_ref(),
                model.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
                "--sign-key".as_ref(),
                bad.as_ref(),
            ],
            vec![
                "snapshot".as_ref(),
                model.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
                "--hmac-key".as_ref(),
                bad.as_ref(),
            ],
            vec!["verify".as_ref(), signed.as_os_str(), "--trusted-keys".as_ref(), bad.as_ref()],
            vec!["verify".as_ref(), signed.as_os_str(), "--pubkey".as_ref(), bad.as_ref()],
            vec!["decrypt".as_ref(), "-i".as_ref(), bad.as_ref(), signed.as_os_str(), "-o".as_ref(), out.as_os_str()],
        ];
        for args in cases {
            let start = std::time::Instant::now();
            let o = wtxt().args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(bad) && err.contains("not a regular file"), "{args:?}: {err}");
            assert!(start.elapsed() < std::time::Duration::from_secs(20), "{args:?} waited");
            assert!(!out.exists());
        }
    }
}
