//! OpenSSF Model Signing (OMS): the detached `model.sig` that
//! `model_signing sign key` writes and `model_signing verify key` checks,
//! written for a snapshot from the hashes its head already holds, checked
//! beside `wtxt verify`, and checked for any folder as the reference does.
//! docs/SECURITY.md says what it proves next to the in-file signature.

pub(crate) mod bundle;

pub use bundle::{sign_manifest, HashType, Manifest, Resource};
pub(crate) mod folder;

use std::collections::HashSet;
use std::io::Read;

use sha2::Digest;
use std::path::{Path, PathBuf};

use crate::crypto::digest::Hash;
use crate::crypto::ec::{EcPublicKey, EcSecretKey};
use crate::error::{Error, Result};
use crate::format::split;
use bundle::Refusal;

/// The signature's name in the snapshot's folder, OMS's default.
pub const SIGNATURE_NAME: &str = "model.sig";

/// What `model_signing` leaves out unless told `--no-ignore-git-paths`.
pub const GIT_PATHS: [&str; 4] = [".git", ".gitattributes", ".github", ".gitignore"];

/// Where a snapshot's signature lives: `model.sig` in the head's folder.
pub fn signature_path(head: &Path) -> PathBuf {
    folder_of(head).join(SIGNATURE_NAME)
}

fn folder_of(head: &Path) -> &Path {
    head.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// A snapshot's files and their SHA-256s: the head's own, hashed as it is
/// read, and each part's from the head's `part` lines (the writer computed
/// them; `wtxt verify` proves them against the files).
pub struct SnapshotFiles {
    head: PathBuf,
    head_sha256: Hash,
    parts: Vec<Hash>,
}

impl SnapshotFiles {
    /// Reads the head at `head` once (a single file whole), hashing it.
    /// Each part file's size is checked against its `part` line, so a
    /// signature never lists a part that is plainly not there.
    pub fn read(head: &Path) -> Result<SnapshotFiles> {
        let f = crate::fs::open_input_file(head)?;
        let mut r = Hashing { inner: f, sha: sha2::Sha256::new() };
        let parts = match split::open(Box::new(&mut r)).map_err(|e| e.in_file(head))? {
            split::Opened::Split(h) => h.parts,
            split::Opened::Single(mut rest) => {
                std::io::copy(&mut rest, &mut std::io::sink()).map_err(|e| Error::io(head, e))?;
                Vec::new()
            }
        };
        std::io::copy(&mut r, &mut std::io::sink()).map_err(|e| Error::io(head, e))?;
        let dir = crate::store::parts_dir(head);
        for p in &parts {
            let path = dir.join(split::part_name(p.ix));
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
            if !meta.is_file() || meta.len() != p.bytes {
                return Err(
                    Error::check(Default::default(), format!("expected a part of {} bytes", p.bytes)).in_file(&path)
                );
            }
        }
        // A head that binds its parts by every byte gives their SHA-256
        // (a full verify proved them); one that binds them by their frames
        // does not, and OMS lists each file's own SHA-256: one pass over
        // the parts, on every core.
        let listed: Option<Vec<Hash>> = parts
            .iter()
            .map(|p| match p.hash {
                split::PartHash::File(h) => Some(h),
                split::PartHash::Frame(_) => None,
            })
            .collect();
        let digests = match listed {
            Some(d) => d,
            None => {
                let paths: Vec<PathBuf> = parts.iter().map(|p| dir.join(split::part_name(p.ix))).collect();
                crate::crypto::digest::sha256_files(&paths, |path| {
                    crate::fs::open_no_follow(path).map_err(|e| Error::io(path, e))
                })?
            }
        };
        Ok(SnapshotFiles { head: head.to_path_buf(), head_sha256: r.sha.finalize().into(), parts: digests })
    }

    fn head_name(&self) -> Result<String> {
        self.head.file_name().and_then(|n| n.to_str()).map(str::to_string).ok_or_else(|| {
            Error::usage(format!("{}: a snapshot's name must be UTF-8 to be signed", self.head.display()))
        })
    }

    /// The snapshot's files as OMS names them, relative to its folder.
    fn resources(&self) -> Result<Vec<Resource>> {
        let head = self.head_name()?;
        let mut out = vec![Resource { name: head.clone(), digest: self.head_sha256 }];
        for (i, sha) in self.parts.iter().enumerate() {
            out.push(Resource { name: format!("{head}.parts/{}", split::part_name(i as u64 + 1)), digest: *sha });
        }
        Ok(out)
    }
}

struct Hashing<R> {
    inner: R,
    sha: sha2::Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        Ok(n)
    }
}

/// Writes `model.sig` beside the snapshot at `head` (atomically), signed
/// with `key`: the signature of the snapshot's whole folder
/// ([`sign_folder`]), the head and every part listed with their SHA-256
/// (the parts' from the head), every other regular file below the folder
/// hashed here. Returns the signature's path and how many files it lists.
pub fn sign_snapshot(files: &SnapshotFiles, key: &EcSecretKey) -> Result<(PathBuf, usize)> {
    sign_folder(folder_of(&files.head), files.resources()?, &signature_path(&files.head), key)
}

/// Signs the folder `dir` as `model_signing sign key DIR --signature
/// SIGNATURE` does: every regular file below it is listed with its SHA-256
/// (`known` gives those the caller already has; the others are hashed on
/// every core), only OMS's default Git paths and the signature itself (when
/// it lies in the folder) left out, so a file that changes, appears or
/// goes away fails every verifier (docs/SECURITY.md). A link or special
/// file in the folder is refused, never followed. Written atomically;
/// returns the signature's path and how many files it lists.
pub fn sign_folder(dir: &Path, known: Vec<Resource>, signature: &Path, key: &EcSecretKey) -> Result<(PathBuf, usize)> {
    let mut ignore: Vec<String> = GIT_PATHS.iter().map(|s| s.to_string()).collect();
    ignore.extend(inside(dir, signature));
    ignore.sort();
    ignore.dedup();
    let listed: HashSet<&str> = known.iter().map(|r| r.name.as_str()).collect();
    let others: Vec<String> =
        folder::list(dir, &ignore)?.into_iter().filter(|n| !listed.contains(n.as_str())).collect();
    let digests = folder::digests(dir, &others, HashType::Sha256)?;
    let mut resources = known;
    resources.extend(others.into_iter().zip(digests).map(|(name, digest)| Resource { name, digest }));
    let count = resources.len();
    let mut manifest = Manifest {
        model_name: model_name(dir),
        hash_type: HashType::Sha256,
        allow_symlinks: false,
        ignore_paths: ignore,
        resources,
    };
    manifest.sort();
    crate::fs::write_file(signature, &bundle::sign_manifest(&manifest, key), 0o644)?;
    Ok((signature.to_path_buf(), count))
}

/// `path` relative to `dir` when it lies below it (the folder resolved,
/// and the path's own folder: the file itself need not exist yet).
fn inside(dir: &Path, path: &Path) -> Option<String> {
    let root = std::fs::canonicalize(dir).ok()?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let abs = std::fs::canonicalize(parent).ok()?.join(path.file_name()?);
    abs.strip_prefix(&root).ok()?.to_str().map(str::to_string)
}

fn model_name(dir: &Path) -> String {
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().and_then(|n| n.to_str()).map(str::to_string))
        .unwrap_or_else(|| "model".into())
}

/// Reads a signature file, bounded: `None` when there is none. `links`:
/// follow a link only at a path the user named.
fn read_signature(path: &Path, links: crate::fs::Links) -> Result<Option<Vec<u8>>> {
    crate::fs::read_small_file(path, bundle::MAX_BUNDLE, links)
}

/// What an OMS check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The signature holds.
    Valid,
    /// It does not, and why.
    Invalid(String),
    /// There is none.
    Absent,
}

impl Verdict {
    /// As `verify --json` reports it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Invalid(_) => "invalid",
            Verdict::Absent => "absent",
        }
    }
}

/// Checks the OMS signature of a snapshot whose data `wtxt verify` has
/// proven: the bundle under `key`, every file of the snapshot listed with
/// its SHA-256 (the head's as read, the parts' as the head records them),
/// any other listed file hashed and compared, and no regular file below
/// the folder left out (whatever the signature's own `ignore_paths` say,
/// only Git's paths and the signature may be unsigned: what sits beside a
/// snapshot is what a user loads with it). `sig` is the user's path (a
/// link there is followed), or `None` for `model.sig` in the snapshot's
/// folder (a link there is refused: the folder may be anyone's).
pub fn check_snapshot(files: &SnapshotFiles, sig: Option<&Path>, key: &EcPublicKey) -> Result<Verdict> {
    let (path, links) = match sig {
        Some(p) => (p.to_path_buf(), crate::fs::Links::Follow),
        None => (signature_path(&files.head), crate::fs::Links::Refuse),
    };
    let Some(bytes) = read_signature(&path, links)? else { return Ok(Verdict::Absent) };
    let m = match bundle::open(&bytes, key) {
        Ok(m) => m,
        Err(Refusal(why)) => return Ok(Verdict::Invalid(why)),
    };
    let ours = files.resources()?;
    let dir = folder_of(&files.head);
    // By name: a snapshot may have 100,000 parts, a bundle list 40,000 files.
    let by_name: std::collections::HashMap<&str, &Resource> =
        m.resources.iter().map(|r| (r.name.as_str(), r)).collect();
    let our_names: HashSet<&str> = ours.iter().map(|r| r.name.as_str()).collect();
    let mut others = Vec::new();
    for r in &ours {
        let Some(listed) = by_name.get(r.name.as_str()) else {
            return Ok(Verdict::Invalid(format!("{} is not listed in the signature", r.name)));
        };
        if m.hash_type == HashType::Sha256 && listed.digest != r.digest {
            return Ok(Verdict::Invalid(format!("{}: its SHA-256 is not the one signed", r.name)));
        }
        if m.hash_type != HashType::Sha256 {
            others.push((*listed).clone());
        }
    }
    others.extend(m.resources.iter().filter(|l| !our_names.contains(l.name.as_str())).cloned());
    let mut ignore: Vec<String> = GIT_PATHS.iter().map(|s| s.to_string()).collect();
    ignore.push(SIGNATURE_NAME.into());
    ignore.extend(sig.and_then(|p| inside(dir, p)));
    let unsigned: Vec<String> =
        folder::list(dir, &ignore)?.into_iter().filter(|n| !by_name.contains_key(n.as_str())).collect();
    if !unsigned.is_empty() {
        let names: Vec<&str> = unsigned.iter().map(String::as_str).collect();
        return Ok(Verdict::Invalid(format!("unsigned files beside the snapshot: {}", some_of(&names))));
    }
    Ok(compare_listed(dir, &others, m.hash_type)?.map_or(Verdict::Valid, Verdict::Invalid))
}

/// Hashes each listed file and names the first that is missing or differs.
fn compare_listed(dir: &Path, listed: &[Resource], hash: HashType) -> Result<Option<String>> {
    for r in listed {
        if std::fs::symlink_metadata(dir.join(&r.name)).is_err() {
            return Ok(Some(format!("{} is listed but missing", r.name)));
        }
    }
    let names: Vec<String> = listed.iter().map(|r| r.name.clone()).collect();
    let got = folder::digests(dir, &names, hash)?;
    Ok(listed.iter().zip(got).find(|(r, d)| r.digest != *d).map(|(r, _)| format!("hash mismatch for {}", r.name)))
}

/// How `wtxt oms verify` reads a folder, as `model_signing verify key`'s flags.
pub struct FolderCheck<'a> {
    /// The signed folder.
    pub dir: &'a Path,
    /// The signature file.
    pub signature: &'a Path,
    /// The public key.
    pub key: &'a EcPublicKey,
    /// More paths to leave out (`--ignore-paths`), relative to `dir` or not.
    pub ignore: Vec<PathBuf>,
    /// Leave out `.git`, `.gitattributes`, `.github`, `.gitignore` (default).
    pub ignore_git_paths: bool,
    /// Check only the files the signature lists.
    pub ignore_unsigned_files: bool,
}

/// Checks a folder against its OMS signature as `model_signing verify key`
/// does: an error of kind check (exit 1) says what differs; a signature
/// that cannot be read at all is unusable input (exit 2).
pub fn verify_folder(c: &FolderCheck) -> Result<Manifest> {
    let bytes = read_signature(c.signature, crate::fs::Links::Follow)?
        .ok_or_else(|| Error::io(c.signature, std::io::Error::from(std::io::ErrorKind::NotFound)))?;
    let m = bundle::open(&bytes, c.key).map_err(|r| Error::check(Default::default(), r.0).in_file(c.signature))?;
    let root = std::fs::canonicalize(c.dir).map_err(|e| Error::io(c.dir, e))?;
    let mut ignore = m.ignore_paths.clone();
    let relative = |p: &Path| {
        let abs = if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir().ok()?.join(p) };
        let abs = std::fs::canonicalize(&abs).unwrap_or(abs);
        abs.strip_prefix(&root).ok().and_then(|r| r.to_str()).map(str::to_string)
    };
    ignore.extend(c.ignore.iter().chain([&c.signature.to_path_buf()]).filter_map(|p| relative(p)));
    if c.ignore_git_paths {
        ignore.extend(GIT_PATHS.iter().map(|s| s.to_string()));
    }
    let found = if c.ignore_unsigned_files {
        m.resources.iter().map(|r| r.name.clone()).filter(|n| !folder::is_ignored(n, &ignore)).collect()
    } else {
        folder::list(c.dir, &ignore)?
    };
    let listed: HashSet<&str> = m.resources.iter().map(|r| r.name.as_str()).collect();
    let present: HashSet<&str> = found.iter().map(String::as_str).collect();
    let mut problems = Vec::new();
    let extra: Vec<&str> = found.iter().map(String::as_str).filter(|f| !listed.contains(f)).collect();
    if !extra.is_empty() {
        problems.push(format!("extra files: {}", some_of(&extra)));
    }
    let missing: Vec<&str> = m.resources.iter().map(|r| r.name.as_str()).filter(|n| !present.contains(n)).collect();
    if !missing.is_empty() {
        problems.push(format!("missing files: {}", some_of(&missing)));
    }
    let both: Vec<Resource> = m.resources.iter().filter(|r| present.contains(r.name.as_str())).cloned().collect();
    if let Some(bad) = compare_listed(c.dir, &both, m.hash_type)? {
        problems.push(bad);
    }
    if !problems.is_empty() {
        return Err(Error::check(Default::default(), format!("does not match its signature: {}", problems.join("; ")))
            .in_file(c.dir));
    }
    Ok(m)
}

/// The first few names of a list, and how many more: a message stays one
/// readable line however many files differ.
fn some_of(names: &[&str]) -> String {
    const SHOWN: usize = 8;
    let mut out = names.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        out.push_str(&format!(" ... ({} more)", names.len() - SHOWN));
    }
    out
}
