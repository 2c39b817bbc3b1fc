//! `git push` of a repository's current branch to any remote Git takes,
//! the way the user's own `git` authenticates; a stalled push is stopped
//! with its transport. The daemon and Python's Snapshotter push through it.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// `remote` without the userinfo of a `scheme://user:secret@host/...` URL,
/// and that user and secret (a token alone is the user, as GitHub takes it).
fn split_credentials(remote: &str) -> (String, Option<(String, String)>) {
    let Some((scheme, rest)) = remote.split_once("://") else { return (remote.to_string(), None) };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else { return (remote.to_string(), None) };
    let info = &rest[..at];
    if scheme.starts_with("ssh") && !info.contains(':') {
        return (remote.to_string(), None); // ssh://git@host: a user name, no secret
    }
    let (user, password) = info.split_once(':').unwrap_or((info, ""));
    (format!("{scheme}://{}", &rest[at + 1..]), Some((user.to_string(), password.to_string())))
}

/// `text` with the userinfo of every URL in it replaced by `***`: a remote's
/// token never reaches a log or `status`.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail.find(|c: char| c == '/' || c.is_whitespace() || c == '\'' || c == '"').unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(at) => {
                out.push_str("***");
                out.push_str(&tail[at..end]);
            }
            None => out.push_str(&tail[..end]),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// How long a push may go without a word from git (no progress at all)
/// before it is given up and retried later. A large first push takes many
/// minutes (GBs to pack and send), so the limit is on silence, not on the
/// whole push: git reports progress every second while it works.
pub const PUSH_STALL: Duration = Duration::from_secs(600);

/// [`PUSH_STALL`] while shutting down: a remote silent this long is given
/// up, the generation stays in the resend queue (on disk) for the next
/// start, and `shutdown` returns.
pub const SHUTDOWN_STALL: Duration = Duration::from_secs(10);

/// What one push carries and how Git should pack it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Push<'a> {
    /// The commit to push to HEAD's branch (`None`: HEAD itself).
    pub commit: Option<&'a str>,
    /// Most of the snapshot's chunks changed since the generation before
    /// (over half of them): Git's delta search over the
    /// parts would find nothing and is skipped (`pack.window=0`), unless
    /// the user's configuration sets the window.
    pub changed_wholly: bool,
}

/// How a push that Git ran to its end came out.
#[derive(Debug)]
pub enum Outcome {
    /// The remote's branch now holds the commit.
    Pushed,
    /// The remote refused the commit as not a fast-forward: its branch has
    /// commits this one lacks (another writer pushed first). Git's words,
    /// as any other failed push gives them.
    Behind(Error),
}

impl Outcome {
    /// `Ok` once pushed; a refusal as the error it is.
    pub fn done(self) -> Result<()> {
        match self {
            Outcome::Pushed => Ok(()),
            Outcome::Behind(e) => Err(e),
        }
    }
}

/// Whether Git's `--porcelain` report on stdout (which Git never
/// translates, unlike its messages) refuses a ref as not a fast-forward:
/// a line `!<TAB>from:to<TAB>[rejected] (reason)`. A hook's refusal is
/// `[remote rejected]`, which a retry cannot mend.
fn refused_as_behind(porcelain: &str) -> bool {
    porcelain.lines().any(|l| {
        let mut fields = l.split('\t');
        fields.next() == Some("!") && fields.nth(1).is_some_and(|summary| summary.starts_with("[rejected]"))
    })
}

/// `remote` as `git` takes it, its credentials (a `scheme://user:secret@`
/// URL's) handed to `cmd` through the environment and a credential helper,
/// never on its command line (`ps` shows that); never a prompt.
/// The helper answers only Git's question about the remote's own origin:
/// a remote that redirects elsewhere (`http.followRedirects`) gets nothing.
fn with_credentials(cmd: &mut std::process::Command, remote: &str) -> String {
    let (url, credentials) = split_credentials(remote);
    if let (Some((user, password)), Some((protocol, host))) = (credentials, credential_origin(&url)) {
        cmd.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "credential.helper")
            .env("GIT_CONFIG_VALUE_0", CREDENTIAL_HELPER)
            .env("WTXT_PUSH_PROTOCOL", protocol)
            .env("WTXT_PUSH_HOST", host)
            .env("WTXT_PUSH_USER", user)
            .env("WTXT_PUSH_PASSWORD", password);
    }
    cmd.env("GIT_TERMINAL_PROMPT", "0").stdin(std::process::Stdio::null());
    url
}

/// Git's credential helper for a push: on `get`, reads Git's description of
/// what it asks about (`protocol=`, `host=` with its port) and answers only
/// when both are the remote's own.
const CREDENTIAL_HELPER: &str = "!f() { test \"$1\" = get || exit 0; p=; h=; \
     while IFS= read -r l; do case \"$l\" in protocol=*) p=\"${l#protocol=}\";; host=*) h=\"${l#host=}\";; esac; done; \
     test \"$p\" = \"$WTXT_PUSH_PROTOCOL\" && test \"$h\" = \"$WTXT_PUSH_HOST\" && \
     printf 'username=%s\\npassword=%s\\n' \"$WTXT_PUSH_USER\" \"$WTXT_PUSH_PASSWORD\"; }; f";

/// Where `url` (`scheme://[userinfo@]host[:port]/path`) points, as Git's
/// credential protocol names it: the protocol, and the host with its port.
fn credential_origin(url: &str) -> Option<(String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    Some((scheme.to_ascii_lowercase(), host.to_string()))
}

/// True when `remote` is a URL that carries a secret: `user:secret@`, or a
/// lone `user@` of an http(s) URL (a token given as the user, as GitHub
/// takes it) unless `user_is_a_name` (the secret is given apart). What
/// must never be on a command line: `ps` shows it to every user.
pub fn has_secret(remote: &str, user_is_a_name: bool) -> bool {
    match split_credentials(remote).1 {
        None => false,
        Some((_, password)) => !password.is_empty() || !user_is_a_name,
    }
}

/// `remote` with `secret` (and the URL's user, or `user` when it names
/// none) put in its userinfo, for [`push`] to hand to Git through the
/// environment; the URL must be `scheme://host/...` without a secret.
pub fn with_secret(remote: &str, user: &str, secret: &str) -> Result<String> {
    let bad = || Error::usage(format!("{}: a secret goes with an https:// or ssh:// URL", redact(remote)));
    let (scheme, rest) = remote.split_once("://").ok_or_else(bad)?;
    if has_secret(remote, true) {
        return Err(Error::usage(format!("{}: the URL carries a secret already", redact(remote))));
    }
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (name, host_and_path) = match rest[..authority_end].rfind('@') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (user, rest),
    };
    let enc = |s: &str| s.bytes().all(|b| b.is_ascii_graphic() && !b"@:/%".contains(&b));
    if !enc(name) || !enc(secret) {
        return Err(Error::usage("the remote's user and secret may not hold spaces, '@', ':', '/' or '%'"));
    }
    Ok(format!("{scheme}://{name}:{secret}@{host_and_path}"))
}

/// Pushes a commit (HEAD by default) to HEAD's branch on `remote` with the
/// `git` binary: any transport `git push` knows (ssh://, user@host:path,
/// https://, git://, paths), with the user's own authentication (ssh agent
/// and keys, `core.sshCommand`, credential helpers, `insteadOf`). It never
/// prompts (no terminal, no stdin); a failure returns git's own words.
pub fn push(
    repo_dir: &Path,
    remote: &str,
    what: Push<'_>,
    stopping: &std::sync::atomic::AtomicBool,
) -> Result<Outcome> {
    let failed = |m: String| Error::io_in("git push", std::io::Error::other(m));
    let repo =
        git2::Repository::open(repo_dir).map_err(|e| failed(format!("cannot open the repository: {}", e.message())))?;
    let branch = repo
        .head()
        .and_then(|h| h.name().map(String::from))
        .map_err(|e| failed(format!("cannot read HEAD: {}", e.message())))?;
    let mut cmd = std::process::Command::new("git");
    cmd.arg("-C").arg(repo_dir);
    for (key, value) in pack_settings(&repo, what.changed_wholly) {
        cmd.arg("-c").arg(format!("{key}={value}"));
    }
    // A generation that changed in places: attributes from an empty tree,
    // so that the committed `-delta` of parts (which keeps `git gc` from
    // searching) does not keep this push from finding each changed part's
    // delta against the version the remote has (a thin pack of a few MB,
    // not the changed parts whole).
    if !what.changed_wholly {
        let empty = repo.treebuilder(None).and_then(|t| t.write()).map_err(|e| failed(e.message().to_string()))?;
        cmd.env("GIT_ATTR_SOURCE", empty.to_string());
    }
    let url = with_credentials(&mut cmd, remote);
    // Its own process group: a stalled push is stopped with its transport
    // (`ssh`, a remote helper), which would otherwise hold the pipe open.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .args(["push", "--progress", "--porcelain", "--", &url, &format!("{}:{branch}", what.commit.unwrap_or("HEAD"))])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::io_in("cannot run git", e))?;
    // The porcelain report: a line a ref, kept up to 64 KiB.
    let out = child.stdout.take().expect("piped");
    let porcelain = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        let mut out = out;
        while let Ok(n) = std::io::Read::read(&mut out, &mut buf) {
            if n == 0 {
                break;
            }
            let room = (64usize << 10).saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        String::from_utf8_lossy(&kept).into_owned()
    });
    // Read stderr on its own thread so a chatty git never blocks on a full
    // pipe; every byte (progress included) says git is still working.
    let mut err = child.stderr.take().expect("piped");
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Instant::now()));
    let heard_by_reader = heard.clone();
    let reader = std::thread::spawn(move || {
        let mut said = Said::default();
        let mut buf = [0u8; 8192];
        while let Ok(n) = std::io::Read::read(&mut err, &mut buf) {
            if n == 0 {
                break;
            }
            *heard_by_reader.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
            said.take(&buf[..n]);
        }
        said.finish()
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None)
                if heard.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
                    > if stopping.load(std::sync::atomic::Ordering::Relaxed) { SHUTDOWN_STALL } else { PUSH_STALL } =>
            {
                crate::odb::child::kill_group(&mut child);
                let silent = heard.lock().unwrap_or_else(|p| p.into_inner()).elapsed().as_secs();
                break Err(failed(format!("said nothing for {silent} s: stopped")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break Err(Error::io_in("git push", e)),
        }
    };
    let stderr = reader.join().unwrap_or_default();
    let porcelain = porcelain.join().unwrap_or_default();
    match status {
        Ok(s) if s.success() => Ok(Outcome::Pushed),
        Ok(s) => {
            // Git's whole answer (the cause usually comes first), on one line.
            let said: Vec<&str> = stderr.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect();
            let mut said = crate::error::one_line(&said.join(" / ")).into_owned();
            if said.len() > 1000 {
                let cut = (0..=1000).rev().find(|&i| said.is_char_boundary(i)).unwrap_or(0);
                said.truncate(cut);
                said.push_str(" ...");
            }
            let e = Error::io_in(&format!("git push exited {}", s.code().unwrap_or(-1)), std::io::Error::other(said));
            if refused_as_behind(&porcelain) {
                return Ok(Outcome::Behind(e));
            }
            Err(e)
        }
        Err(m) => Err(m),
    }
}

/// The top of the repository around `dir` (its work tree, else the
/// repository itself): where [`push`] and [`backlog`] run.
pub fn repository_top(dir: &Path) -> Result<std::path::PathBuf> {
    let repo = git2::Repository::discover(dir).map_err(crate::odb::git_err)?;
    Ok(repo.workdir().unwrap_or(repo.path()).to_path_buf())
}

/// The remote `wtxt git push` sends to when none is named: the current
/// branch's (`branch.<name>.remote`), else `origin`.
pub fn default_remote(repo_dir: &Path) -> Result<String> {
    let repo = git2::Repository::discover(repo_dir).map_err(crate::odb::git_err)?;
    let head = repo.head().map_err(crate::odb::git_err)?;
    let branch = head.shorthand().unwrap_or_default();
    let cfg = repo.config().map_err(crate::odb::git_err)?;
    Ok(cfg.get_string(&format!("branch.{branch}.remote")).unwrap_or_else(|_| "origin".to_string()))
}

/// The commits of HEAD's first-parent line that `remote`'s branch of the
/// same name lacks, oldest first, each as the [`Push`] that carries it:
/// what `wtxt git push` sends, one push a generation, as the daemon does.
/// A commit whose parts mostly start as their previous versions did
/// (their first 64 KiB compared in place, as the pre-commit hook compares
/// them) is pushed with Git's delta search
/// over them, and one with no parent, or whose changed parts mostly do
/// not, without. Empty when the remote's branch is HEAD or holds it; when
/// the remote's branch is not in this repository's history (another writer
/// pushed first) HEAD alone, for Git to refuse.
pub fn backlog(repo_dir: &Path, remote: &str) -> Result<Vec<(git2::Oid, bool)>> {
    let repo = git2::Repository::discover(repo_dir).map_err(crate::odb::git_err)?;
    let head = repo.head().map_err(crate::odb::git_err)?;
    let branch = head.name().map_err(|_| Error::usage("HEAD's branch name is not UTF-8"))?.to_string();
    let tip = head.peel_to_commit().map_err(crate::odb::git_err)?;
    let theirs = remote_tip(repo_dir, remote, &branch)?;
    if theirs == Some(tip.id()) || theirs.is_some_and(|t| repo.graph_descendant_of(t, tip.id()).unwrap_or(false)) {
        return Ok(Vec::new());
    }
    // A commit this repository lacks is no ancestor (libgit2 answers an error).
    let known = theirs.filter(|&t| repo.graph_descendant_of(tip.id(), t).unwrap_or(false));
    if theirs.is_some() && known.is_none() {
        return Ok(vec![(tip.id(), false)]);
    }
    let mut walk = repo.revwalk().map_err(crate::odb::git_err)?;
    walk.simplify_first_parent().map_err(crate::odb::git_err)?;
    walk.push(tip.id()).map_err(crate::odb::git_err)?;
    if let Some(t) = known {
        walk.hide(t).map_err(crate::odb::git_err)?;
    }
    let objects = repo.path().join("objects");
    let mut out = Vec::new();
    for id in walk {
        let commit = repo.find_commit(id.map_err(crate::odb::git_err)?).map_err(crate::odb::git_err)?;
        out.push((commit.id(), changed_wholly(&repo, &objects, &commit)?));
    }
    out.reverse();
    Ok(out)
}

/// Whether `commit` has no parent, or most of the parts it changes do not
/// start as their previous versions did.
fn changed_wholly(repo: &git2::Repository, objects: &Path, commit: &git2::Commit) -> Result<bool> {
    let Ok(parent) = commit.parent(0) else { return Ok(true) };
    let (old, new) = (parent.tree().map_err(crate::odb::git_err)?, commit.tree().map_err(crate::odb::git_err)?);
    let diff = repo.diff_tree_to_tree(Some(&old), Some(&new), None).map_err(crate::odb::git_err)?;
    let (mut changed, mut alike) = (0usize, 0usize);
    for d in diff.deltas().filter(|d| d.status() == git2::Delta::Modified) {
        if d.new_file().path().is_some_and(|p| p.extension().is_some_and(|x| x == "wtxtpart")) {
            changed += 1;
            alike += usize::from(crate::odb::objects::starts_as(objects, d.old_file().id(), d.new_file().id()));
        }
    }
    Ok(changed > 0 && alike * 2 <= changed)
}

/// The commit `remote`'s `branch` (a full ref name) points at, `None` when
/// it has no such branch (`git ls-remote`).
fn remote_tip(repo_dir: &Path, remote: &str, branch: &str) -> Result<Option<git2::Oid>> {
    let mut cmd = std::process::Command::new("git");
    cmd.arg("-C").arg(repo_dir);
    let url = with_credentials(&mut cmd, remote);
    let out = cmd
        .args(["ls-remote", "--", &url, branch])
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| Error::io_in("cannot run git", e))?;
    if !out.status.success() {
        let said = redact(String::from_utf8_lossy(&out.stderr).trim());
        return Err(Error::io_in("git ls-remote", std::io::Error::other(crate::error::one_line(&said).into_owned())));
    }
    let listed = String::from_utf8_lossy(&out.stdout);
    let tip =
        listed.lines().find_map(|l| l.split_once('\t').filter(|(_, r)| *r == branch).map(|(id, _)| id.to_string()));
    tip.map(|t| git2::Oid::from_str(&t).map_err(|_| Error::usage(format!("git ls-remote: {t}: not a commit id"))))
        .transpose()
}

/// What git said on stderr, less its progress meters: a line ended by a
/// lone carriage return is redrawn in place, so only lines ended by a line
/// feed (or CR LF, as ssh ends its own) are kept, the last [`Said::KEEP`].
#[derive(Default)]
struct Said {
    lines: std::collections::VecDeque<String>,
    cur: Vec<u8>,
    /// A carriage return was read: a line feed next ends the line, anything
    /// else means the line was a progress meter, redrawn.
    cr: bool,
}

impl Said {
    const KEEP: usize = 200;

    fn take(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if std::mem::take(&mut self.cr) && b != b'\n' {
                self.cur.clear();
            }
            match b {
                b'\r' => self.cr = true,
                b'\n' => {
                    if self.lines.len() == Self::KEEP {
                        self.lines.pop_front();
                    }
                    self.lines.push_back(String::from_utf8_lossy(&self.cur).into_owned());
                    self.cur.clear();
                }
                _ if self.cur.len() < 4096 => self.cur.push(b),
                _ => {}
            }
        }
    }

    fn finish(mut self) -> Vec<String> {
        if !self.cur.is_empty() {
            let last = String::from_utf8_lossy(&self.cur).into_owned();
            self.lines.push_back(last);
        }
        self.lines.into()
    }
}

/// Pack settings for pushing snapshot text, each used only where the
/// user's Git configuration does not set it. `pack.window=2`: parts are
/// random-looking text of 45 MiB that only delta well against their own
/// previous version, which Git's delta search sorts right next to them (same
/// path); the default window of 10 tries 8 more hopeless candidates per
/// part at about a second each. Measured at 1 GiB: the first push 535 s ->
/// 160 s, the next generation's thin pack the same 1.55 MB (docs/DAEMON.md).
/// `pack.compression=1`: base64 deflates to about 75% at any level, and
/// level 1 costs 4.9 s where Git's default costs 6.7 s per 180 MB of text
/// (what `wtxt git install` sets too).
const PACK_DEFAULTS: [(&str, &str); 2] = [("pack.window", "2"), ("pack.compression", "1")];

/// The [`PACK_DEFAULTS`] the user's configuration leaves unset, with no
/// delta search when the snapshot changed wholly (a full fine-tuning
/// step: 6.5 of 13.2 s of packing 180 MB went to finding no delta).
fn pack_settings(repo: &git2::Repository, changed_wholly: bool) -> Vec<(&'static str, &'static str)> {
    let cfg = repo.config().ok();
    PACK_DEFAULTS
        .iter()
        .map(|&(k, v)| if k == "pack.window" && changed_wholly { (k, "0") } else { (k, v) })
        .filter(|(k, _)| cfg.as_ref().is_none_or(|c| c.get_entry(k).is_err()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_leave_the_url_and_every_message() {
        let (url, c) = split_credentials("https://user:tok3n@example.com/x.git");
        assert_eq!((url.as_str(), c), ("https://example.com/x.git", Some(("user".into(), "tok3n".into()))));
        assert_eq!(split_credentials("https://tok3n@h/x").1, Some(("tok3n".into(), String::new())));
        assert_eq!(split_credentials("ssh://git@h/x"), ("ssh://git@h/x".to_string(), None));
        assert_eq!(split_credentials("/srv/x.git"), ("/srv/x.git".to_string(), None));
        let m = "push to https://user:tok3n@example.com/x.git: fatal: unable to access 'https://user:tok3n@example.com/x.git/'";
        assert!(!redact(m).contains("tok3n") && redact(m).contains("https://***@example.com/x.git"), "{}", redact(m));
        assert_eq!(redact("no url here"), "no url here");
    }

    #[test]
    fn a_commit_behind_the_remote_s_branch_comes_back_as_behind_in_any_language() {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        git(&["init", "-q", "-b", "main", "work"]);
        git(&["init", "-q", "--bare", "-b", "main", "remote.git"]);
        let work = dir.path().join("work");
        let remote = dir.path().join("remote.git").display().to_string();
        git(&["-C", "work", "commit", "-q", "--allow-empty", "-m", "one"]);
        let first = git(&["-C", "work", "rev-parse", "HEAD"]);
        git(&["-C", "work", "commit", "-q", "--allow-empty", "-m", "two"]);
        let never = std::sync::atomic::AtomicBool::new(false);
        assert!(matches!(push(&work, &remote, Push::default(), &never).unwrap(), Outcome::Pushed));
        let older = Push { commit: Some(&first), changed_wholly: true };
        assert!(matches!(push(&work, &remote, older, &never).unwrap(), Outcome::Behind(_)));
        // Not a refusal of that kind: an error.
        assert!(push(&work, &dir.path().join("none.git").display().to_string(), Push::default(), &never).is_err());
        assert!(refused_as_behind("To /r\n!\trefs/heads/main:refs/heads/main\t[rejected] (fetch first)\nDone\n"));
        assert!(!refused_as_behind("To /r\n!\tHEAD:refs/heads/main\t[remote rejected] (hook declined)\nDone\n"));
        assert!(!refused_as_behind("To /r\n=\tHEAD:refs/heads/main\t[up to date]\nDone\n"));
    }

    #[test]
    fn pack_defaults_yield_to_the_users_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        // Unless this machine's own configuration sets it already.
        if repo.config().unwrap().get_entry("pack.window").is_err() {
            assert!(pack_settings(&repo, false).contains(&("pack.window", "2")));
            assert!(pack_settings(&repo, true).contains(&("pack.window", "0")));
        }
        let mut local = repo.config().unwrap().open_level(git2::ConfigLevel::Local).unwrap();
        local.set_i32("pack.window", 7).unwrap();
        local.set_i32("pack.compression", 9).unwrap();
        assert!(pack_settings(&repo, true).is_empty(), "the repository's own setting wins");
    }

    #[test]
    fn progress_meters_are_left_out_of_what_git_said() {
        let mut s = Said::default();
        s.take(
            b"Writing objects:  10% (1/10)\rWriting objects: 100% (10/10), done.\nerror: failed to push some refs\n",
        );
        s.take(b"ssh: connect to host 127.0.0.1 port 9: Connection refused\r");
        s.take(b"\nremote: oops\r");
        assert_eq!(
            s.finish(),
            vec![
                "Writing objects: 100% (10/10), done.",
                "error: failed to push some refs",
                "ssh: connect to host 127.0.0.1 port 9: Connection refused",
                "remote: oops",
            ]
        );
    }
}
