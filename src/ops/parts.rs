//! `wtxt split`, `wtxt join` and `git export`: copies of a snapshot in
//! either form, and the helpers that copy a text while it is verified.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::split::{self, PartSize};
use crate::store::SnapshotOut;

/// `wtxt split` and `wtxt join`: the same snapshot stored in the other form
/// (split by `size`, or one file with [`PartSize::Whole`]). The bytes are
/// copied, never changed: joining then splitting again gives back the very
/// same files. Each part is checked against its head on the way, and the
/// text is verified as it is copied (on the other core): a damaged
/// snapshot is refused, not given fresh part hashes under a new name
/// (`wtxt recover` takes either form as it is).
pub fn restore(
    input: &Path,
    out: &Path,
    size: PartSize,
    oms: Option<&crate::crypto::ec::EcSecretKey>,
) -> Result<usize> {
    use crate::format::verify::ProblemKind;
    let mut src = crate::store::input::WtxtIn::open(input, None)?;
    let mut w = SnapshotOut::create(out, size)?;
    let mut text = src.text();
    let mut report = write_verified(&mut w, &Default::default(), |o| {
        copy_text(&mut text, o).map(|_| ()).map_err(|e| e.either(|e| src.blame(e), |e| e.in_file(out)))
    })?;
    src.locate_report(&mut report);
    // A WTXT-S is copied as it is: its root is for `finalize` to give.
    if let Some(p) = report.errors.iter().find(|p| p.kind != ProblemKind::RootPending) {
        return Err(p.to_error().in_file(input));
    }
    let parts = w.finish()?;
    super::oms::oms_sign_written(out, oms)?;
    Ok(parts)
}

/// `wtxt git export REV PATH -o OUT`: the snapshot at PATH in revision REV
/// of the repository around `dir`, head and parts read from that commit,
/// written to OUT (split by `size`): what a merge of split snapshots, which
/// Git's drivers see only file by file, starts from.
pub fn export(dir: &Path, rev: &str, path: &Path, out: &Path, size: PartSize) -> Result<usize> {
    let repo = git2::Repository::discover(dir).map_err(crate::odb::git_err)?;
    let (tree, _, blob) = crate::git::history::version_at(&repo, rev, path)?;
    let shown = PathBuf::from(format!("{rev}:{}", path.display()));
    if crate::odb::blob::prefix(&repo, blob, 13)? == b"WTXT part ix=" {
        return Err(Error::usage(format!(
            "{}: a part of a split snapshot, not a snapshot: export its head (the path before `.parts/`)",
            shown.display()
        )));
    }
    let mut w = SnapshotOut::create(out, size)?;
    // Streamed: a single file may hold a whole model.
    let input = crate::odb::blob::reader(&repo, blob).map_err(|e| e.in_file(&shown))?;
    let opened = split::open(input).map_err(|e| e.in_file(&shown))?;
    let copied = match opened {
        split::Opened::Single(mut r) => copy_text(&mut r, &mut w),
        split::Opened::Split(head) => {
            // In a blobless partial clone: every part in one fetch; parts
            // kept in Git LFS: their objects in one `git lfs fetch`.
            crate::git::history::fetch_version(&repo, &tree, path, &head)?;
            let parts = crate::git::parts::BlobParts::of_tree(&repo, &tree, path, &head);
            copy_text(&mut split::Joined::new(head, Box::new(parts), None), &mut w)
        }
    };
    copied.map_err(|e| e.either(|e| e.in_file(&shown), |e| e.in_file(out)))?;
    w.finish()
}

/// [`export`] of the snapshot at `path`, a file in a Git work tree (which
/// need not hold it now): its repository and its path there found from
/// `path`, as a caller that holds a checkpoint's path names it.
pub fn export_path(path: &Path, rev: &str, out: &Path) -> Result<usize> {
    let (_, work, rel, _) = crate::git::commit::in_work_tree(path)?;
    export(&work, rev, &rel, out, PartSize::default())
}

/// Which side of a copy failed.
pub enum CopyError {
    /// Reading the input failed.
    Read(Error),
    /// Writing the output failed.
    Write(Error),
}

impl CopyError {
    /// Names the side that failed.
    pub fn either(self, read: impl FnOnce(Error) -> Error, write: impl FnOnce(Error) -> Error) -> Error {
        match self {
            CopyError::Read(e) => read(e),
            CopyError::Write(e) => write(e),
        }
    }
}

/// Copies a text into a snapshot being written, telling a failed read
/// (the input's fault, named by the caller) from a failed write.
pub fn copy_text(r: &mut dyn Read, w: &mut dyn Write) -> std::result::Result<u64, CopyError> {
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0;
    loop {
        let got = match r.read(&mut buf) {
            Ok(0) => return Ok(n),
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(Error::read_failed(e))),
        };
        w.write_all(&buf[..got]).map_err(|e| CopyError::Write(Error::write_failed(e)))?;
        n += got as u64;
    }
}

/// Writes a snapshot while the strict verifier reads the very same bytes on
/// another thread, so what is put in place is what was proven, not only the
/// input it was made from (`delta apply`). The caller
/// judges the report before [`SnapshotOut::finish`].
pub fn write_verified(
    out: &mut SnapshotOut,
    opts: &crate::format::verify::VerifyOptions,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<crate::format::verify::Report> {
    let (pw, pr) = crate::pipe::pipe();
    let (wrote, stopped, report) = std::thread::scope(|s| {
        let checker = s.spawn(|| crate::format::verify::verify(pr, opts, None));
        let mut tee = crate::pipe::Tee(&mut *out, pw);
        let wrote = write(&mut tee);
        let stopped = !tee.1.is_open();
        tee.1.close();
        (wrote, stopped, checker.join().expect("verifier thread"))
    });
    match wrote {
        Ok(()) => report,
        // The writer failed on its own: its error.
        Err(e) if !stopped => Err(e),
        // The verifier stopped reading at a problem, so the copy stopped:
        // what the verifier found is the answer.
        Err(e) => match report {
            Ok(r) if r.first_error().is_none() => Err(e),
            found => found,
        },
    }
}
