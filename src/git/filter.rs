//! Binary models in the work tree, WTXT in the repository: Git's long-running
//! `filter-process` protocol (pkt-line, version 2) with clean and smudge.
//!
//! `clean` turns a `.safetensors`, `.npz`, AERO or FOLD file into a
//! canonical WTXT whose metadata arrays (`__safetensors_header`: the header
//! bytes; `__npz_skeleton`: the archive minus the stored tensors' bytes;
//! `__aero` / `__fold` with the original stored bytes of any chunk our
//! writer would not reproduce) let `smudge` give the file back byte for
//! byte; clean checks that before it answers, and refuses a file it cannot
//! rebuild.
//! Clean is chained: when HEAD holds a WTXT version of the path, the new one
//! continues it (gen + 1, merkle_prev = its merkle_this), and if the tensors
//! did not change, HEAD's blob is returned as it is, so an unchanged file
//! never shows as modified. Content that is not of the expected format is
//! passed through untouched.

use std::io::{BufRead, Read, Write};
use std::path::Path;

use crate::crypto::digest::Hash;
use crate::error::{Error, Result};
use crate::model::Array;

use crate::format::syntax::{Meta, Root};
use crate::format::verify::VerifyOptions;
use crate::format::write::{write_snapshot, WriteOptions};

use crate::convert::{formats, Input};
/// Largest pkt-line payload (Git's LARGE_PACKET_DATA_MAX).
const PKT_MAX: usize = 65516;

fn io(e: std::io::Error) -> Error {
    Error::io_in("git filter pipe", e)
}

/// Reads one pkt-line: `None` for a flush packet.
fn read_pkt<R: Read>(r: &mut R) -> Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(io)?;
    let n = std::str::from_utf8(&len)
        .ok()
        .and_then(|s| usize::from_str_radix(s, 16).ok())
        .ok_or_else(|| Error::input(Default::default(), "filter protocol: bad pkt-line length"))?;
    if n == 0 {
        return Ok(None);
    }
    if !(4..=PKT_MAX + 4).contains(&n) {
        return Err(Error::input(Default::default(), format!("filter protocol: pkt-line length {n} out of range")));
    }
    let mut buf = vec![0u8; n - 4];
    r.read_exact(&mut buf).map_err(io)?;
    Ok(Some(buf))
}

/// Reads `key=value` text packets up to a flush.
fn read_list<R: Read>(r: &mut R) -> Result<Vec<String>> {
    let mut out = Vec::new();
    while let Some(p) = read_pkt(r)? {
        out.push(String::from_utf8_lossy(&p).trim_end_matches('\n').to_string());
    }
    Ok(out)
}

fn write_pkt<W: Write>(w: &mut W, data: &[u8]) -> Result<()> {
    for part in data.chunks(PKT_MAX) {
        write!(w, "{:04x}", part.len() + 4).map_err(io)?;
        w.write_all(part).map_err(io)?;
    }
    Ok(())
}

fn write_text<W: Write>(w: &mut W, line: &str) -> Result<()> {
    write_pkt(w, format!("{line}\n").as_bytes())
}

fn flush<W: Write>(w: &mut W) -> Result<()> {
    w.write_all(b"0000").map_err(io)?;
    w.flush().map_err(io)
}

/// Reads a file's content packets up to the flush, keeping the first
/// `keep` bytes. The rest is read and dropped (Git sends it all before it
/// reads an answer), so a file refused for its size costs no memory.
/// Returns the bytes kept and the content's whole length.
fn read_content<R: Read>(r: &mut R, keep: usize) -> Result<(Vec<u8>, u64)> {
    let mut content = Vec::new();
    let mut total = 0u64;
    while let Some(p) = read_pkt(r)? {
        total += p.len() as u64;
        let room = keep.saturating_sub(content.len());
        content.extend_from_slice(&p[..p.len().min(room)]);
    }
    Ok((content, total))
}

/// The content's first packets, until they hold the 7 bytes that tell WTXT
/// (`WTXT 1` LF) or the content ends (an empty packet list stays empty).
fn read_start<R: Read>(r: &mut R) -> Result<Vec<u8>> {
    let mut start = Vec::new();
    while start.len() < 7 {
        match read_pkt(r)? {
            Some(p) => start.extend_from_slice(&p),
            None => return Ok(start),
        }
    }
    Ok(start)
}

/// Answers a smudge of content that is not WTXT with the content itself,
/// streamed packet by packet as it arrives (`start` read already).
fn pass_through<R: Read, W: Write>(start: &[u8], r: &mut R, out: &mut W) -> Result<()> {
    write_text(out, "status=success")?;
    flush(out)?;
    write_pkt(out, start)?;
    if start.len() >= 7 {
        while let Some(p) = read_pkt(r)? {
            write_pkt(out, &p)?;
        }
    }
    flush(out)?;
    flush(out) // status unchanged
}

/// Runs the filter process for `format` on stdin/stdout until Git closes
/// it; why a file was refused goes to `log` (Git shows the filter's stderr).
pub fn serve<R: BufRead, W: Write>(
    format: &str,
    repo_dir: &Path,
    mut input: R,
    mut out: W,
    log: &dyn Fn(&str),
) -> Result<()> {
    use crate::git::install::FILTER_FORMATS;
    if !FILTER_FORMATS.contains(&format) {
        return Err(Error::usage(format!(
            "filter-process: unsupported format {format} (supported: {})",
            FILTER_FORMATS.join(", ")
        )));
    }
    let hello = read_list(&mut input)?;
    if hello.first().map(String::as_str) != Some("git-filter-client") || !hello.iter().any(|l| l == "version=2") {
        return Err(Error::input(Default::default(), "filter protocol: expected git-filter-client version=2"));
    }
    write_text(&mut out, "git-filter-server")?;
    write_text(&mut out, "version=2")?;
    flush(&mut out)?;
    let caps = read_list(&mut input)?;
    for c in ["clean", "smudge"] {
        if caps.iter().any(|l| l == &format!("capability={c}")) {
            write_text(&mut out, &format!("capability={c}"))?;
        }
    }
    flush(&mut out)?;
    // What the repository trusts: a smudge writes into the work tree only
    // what its policy accepts, as the hook takes in only that.
    let policy = git2::Repository::discover(repo_dir).ok().map(|r| super::config::Policy::of(&r)).transpose()?;
    let opts = policy.as_ref().map(super::config::Policy::options).unwrap_or_default();
    loop {
        let mut header = Vec::new();
        match read_pkt(&mut input) {
            Ok(Some(p)) => header.push(String::from_utf8_lossy(&p).trim_end_matches('\n').to_string()),
            Ok(None) => continue,
            // Git closed the pipe: we are done.
            Err(_) => return Ok(()),
        }
        header.extend(read_list(&mut input)?);
        let command = header.iter().find_map(|l| l.strip_prefix("command=")).unwrap_or_default().to_string();
        let path = header.iter().find_map(|l| l.strip_prefix("pathname=")).unwrap_or_default().to_string();
        // Neither side keeps more than a file clean could store: clean
        // refuses more; smudge streams anything that is not WTXT straight
        // back, and a WTXT over the part size is none that clean stored.
        let limit = crate::format::split::DEFAULT_PART_SIZE as usize + 1;
        let (content, total) = if command == "smudge" {
            let start = read_start(&mut input)?;
            if !start.starts_with(b"WTXT 1\n") {
                match raw_refused(&opts) {
                    None => pass_through(&start, &mut input, &mut out)?,
                    Some(e) => {
                        if start.len() >= 7 {
                            read_content(&mut input, 0)?;
                        }
                        log(&e.in_file(&path).to_string());
                        write_text(&mut out, "status=error")?;
                        flush(&mut out)?;
                    }
                }
                continue;
            }
            let (rest, more) = read_content(&mut input, limit.saturating_sub(start.len()))?;
            ([start.clone(), rest].concat(), start.len() as u64 + more)
        } else {
            read_content(&mut input, limit)?
        };
        let result = match command.as_str() {
            "clean" if total > content.len() as u64 => {
                // More than the part size arrived: over it however it is counted.
                Err(over_part_size(&content, total, &path).unwrap_or_else(|| too_large(total, &path)))
            }
            "smudge" if total > content.len() as u64 => Err(Error::input(
                Default::default(),
                format!(
                    "a WTXT blob of {total} bytes, over the {} byte part size: not one the clean filter stored",
                    crate::format::split::DEFAULT_PART_SIZE
                ),
            )),
            "clean" => clean(&content, repo_dir, &path),
            "smudge" => smudge(&content, &opts),
            c => Err(Error::usage(format!("filter protocol: unknown command {c}"))),
        };
        match result {
            Ok(bytes) => {
                write_text(&mut out, "status=success")?;
                flush(&mut out)?;
                write_pkt(&mut out, &bytes)?;
                flush(&mut out)?;
                flush(&mut out)?; // status unchanged
            }
            Err(e) => {
                log(&e.in_file(&path).to_string());
                write_text(&mut out, "status=error")?;
                flush(&mut out)?;
            }
        }
    }
}

/// A file as WTXT: itself when it is one, else what `clean` stores for it
/// (Git hands drivers the smudged work-tree file when it matches a side).
/// A file too large to be stored is refused before it is read.
pub fn as_wtxt(path_on_disk: &Path, repo_dir: &Path, repo_path: &str) -> Result<Vec<u8>> {
    let failed = |e| Error::io(path_on_disk, e);
    let mut f = std::fs::File::open(path_on_disk).map_err(failed)?;
    let len = f.metadata().map_err(failed)?.len();
    let mut bytes = Vec::new();
    (&mut f).take(5).read_to_end(&mut bytes).map_err(failed)?;
    if let Some(e) = over_part_size(&bytes, len, repo_path) {
        return Err(e);
    }
    f.read_to_end(&mut bytes).map_err(failed)?;
    clean(&bytes, repo_dir, repo_path)
}

/// The arrays that rebuild `content` exactly, or `None` when it is not a
/// container the filter carries (it is then stored as it is).
fn carried_arrays(content: &[u8]) -> Result<Option<Vec<Array>>> {
    let Some(Input::Container(c)) = crate::convert::detect(content) else { return Ok(None) };
    let mut notes = Vec::new();
    let Some(arrays) = c.read_exact(content, &mut notes) else { return Ok(None) };
    let mut arrays = arrays?;
    if let Some(n) = notes.first() {
        return Err(Error::input(Default::default(), format!("{n}: fix the file before adding it")));
    }
    crate::model::sort_arrays(&mut arrays)?;
    if rebuild(&arrays)? != content {
        return Err(Error::input(
            Default::default(),
            "this file cannot be rebuilt byte for byte from its tensors and metadata; add it without the filter",
        ));
    }
    Ok(Some(arrays))
}

/// The container file a filter-made WTXT's arrays stand for: the format
/// whose metadata arrays they carry (safetensors, which needs none, else).
fn rebuild(arrays: &[Array]) -> Result<Vec<u8>> {
    let c =
        formats::by_metadata(arrays).or_else(|| formats::by_name("safetensors")).expect("safetensors is a container");
    let mut out = std::io::Cursor::new(Vec::new());
    c.write(arrays, &mut out)?;
    Ok(out.into_inner())
}

/// A safetensors, AERO or FOLD file to a canonical WTXT continuing HEAD's
/// version of `path`; anything else is stored as it is.
pub fn clean(content: &[u8], repo_dir: &Path, path: &str) -> Result<Vec<u8>> {
    if let Some(e) = over_part_size(content, content.len() as u64, path) {
        return Err(e);
    }
    if content.starts_with(b"WTXT ") {
        return Ok(content.to_vec()); // a WTXT, a head or a part: stored as it is
    }
    let limit = crate::format::split::DEFAULT_PART_SIZE;
    let Some(arrays) = carried_arrays(content)? else {
        return Ok(content.to_vec());
    };
    let (gen, merkle_prev) = match head_version(repo_dir, path)? {
        Some(HeadVersion { bytes: Some(blob), .. }) if same_arrays(&blob, &arrays) => return Ok(blob),
        Some(v) => (v.gen + 1, v.merkle_this),
        None => (0, [0; 32]),
    };
    // The writer's defaults (schema, host, cuda, ts rule); the build token is checked.
    let meta = Meta::new(gen, None)?.with_tokens(None, Some("git-filter"), None, None)?;
    let digest = match git2::Repository::open(repo_dir) {
        Ok(repo) => super::config::configured_output(&repo)?.digest,
        Err(_) => Default::default(),
    };
    let opts =
        WriteOptions { merkle_prev, digest, ..WriteOptions::new(meta, crate::format::layout::DEFAULT_ROWS_PER_CHUNK) };
    let mut out = std::io::Cursor::new(Vec::with_capacity(content.len() * 4 / 3 + 4096));
    write_snapshot(&arrays, &opts, &mut out, &crate::progress::Progress::hidden())?;
    let text = out.into_inner();
    if text.len() as u64 > limit {
        return Err(too_large(text.len() as u64, path));
    }
    Ok(text)
}

/// One file is one blob: a WTXT over the part size would be a blob Git
/// stores without deltas and hosts refuse. A file whose content starts
/// with `start` and has `total` bytes is refused when its WTXT (the file
/// itself when it is one; else at least 4/3 of its bytes, so this is known
/// before anything is decoded) would exceed the part size.
fn over_part_size(start: &[u8], total: u64, path: &str) -> Option<Error> {
    let text = if start.starts_with(b"WTXT ") { total } else { total / 3 * 4 };
    (text > crate::format::split::DEFAULT_PART_SIZE).then(|| too_large(text, path))
}

/// Why a filtered file is refused at `git add`, and the workflow that works.
/// (The filter names the file before the message.)
fn too_large(text: u64, path: &str) -> Error {
    Error::input(
        Default::default(),
        format!(
            "its WTXT would be {} MiB, over the {} MiB part size a Git filter may store as one blob; \
             commit it as a split snapshot instead (every file under the part size): \
             `wtxt snapshot {path} -o {path}.wtxt --prev <last>.wtxt`, then `git add {path}.wtxt {path}.wtxt.parts` \
             (and leave {path} out of Git, or untrack it with `git rm --cached {path}`)",
            text >> 20,
            crate::format::split::DEFAULT_PART_SIZE >> 20
        ),
    )
}

/// A WTXT made by `clean` back to the file it came from, verified under
/// `opts` (the repository's trusted keys and whether it requires a signature).
pub fn smudge(content: &[u8], opts: &VerifyOptions) -> Result<Vec<u8>> {
    if !content.starts_with(b"WTXT 1\n") {
        return match raw_refused(opts) {
            Some(e) => Err(e),
            None => Ok(content.to_vec()),
        };
    }
    let loaded = crate::format::load(content, content.len() as u64, opts)?;
    rebuild(&loaded.arrays)
}

/// Why content that is not WTXT may not be smudged into the work tree:
/// where signatures are required, a path the filter owns holds a signed
/// snapshot or nothing (raw bytes staged past the clean filter carry no
/// signature). Elsewhere it passes as it is: a file committed before the
/// filter was installed.
fn raw_refused(opts: &VerifyOptions) -> Option<Error> {
    opts.require_signature.then(|| {
        Error::check(
            Default::default(),
            "not a WTXT snapshot: with wtxt.requireSignature a filtered path must hold a signed snapshot",
        )
    })
}

/// HEAD's WTXT version of a filtered path.
struct HeadVersion {
    /// Its bytes, when a filter could have stored it (at most the part size).
    bytes: Option<Vec<u8>>,
    gen: u64,
    merkle_this: Hash,
}

/// HEAD's WTXT version of `path` (of a blob over the part size only the
/// header is read). Nothing chains from what it did not verify:
/// the header must hold together and its signature satisfy `git config
/// wtxt.trustedKeys` when that is set.
fn head_version(repo_dir: &Path, path: &str) -> Result<Option<HeadVersion>> {
    let Ok(repo) = git2::Repository::discover(repo_dir) else { return Ok(None) };
    let Some(tree) = repo.head().ok().and_then(|h| h.peel_to_tree().ok()) else { return Ok(None) };
    let Some(id) = tree.get_path(Path::new(path)).ok().map(|e| e.id()) else { return Ok(None) };
    let size = crate::odb::blob::size(&repo, id)?;
    let whole = size <= crate::format::split::DEFAULT_PART_SIZE;
    let bytes = crate::odb::blob::prefix(&repo, id, if whole { size } else { crate::format::split::MAX_HEAD + 1 })?;
    let Ok(h) = crate::format::read::read_head(&mut crate::format::read::LineReader::new(&bytes[..])) else {
        return Ok(None);
    };
    let Root::Final { merkle_this, .. } = h.root else { return Ok(None) };
    let trusted = super::config::configured_trusted_keys(&repo)?;
    let opts = VerifyOptions { trusted: trusted.as_ref(), require_signature: trusted.is_some(), ..Default::default() };
    crate::format::verify::check_header(&h, &opts).map_err(|p| {
        Error::check(
            crate::error::Position::Line(p.line),
            format!("HEAD's version fails verification ({}): the new one cannot chain from it", p.message),
        )
        .in_file(path)
    })?;
    Ok(Some(HeadVersion { bytes: whole.then_some(bytes), gen: h.meta.gen, merkle_this }))
}

/// True when `blob` (a WTXT) holds exactly these arrays.
fn same_arrays(blob: &[u8], arrays: &[Array]) -> bool {
    use sha2::{Digest, Sha256};
    let lines: Vec<crate::format::syntax::ArrLine> = blob
        .split(|&b| b == b'\n')
        .filter(|l| l.starts_with(b"arr "))
        .filter_map(|l| crate::format::syntax::ArrLine::parse(l).ok())
        .collect();
    lines.len() == arrays.len()
        && lines.iter().zip(arrays).all(|(l, a)| {
            l.name == a.name
                && l.dtype == a.dtype
                && l.shape == a.shape
                && l.sha256 == <[u8; 32]>::from(Sha256::digest(a.bytes()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn pkt(out: &mut Vec<u8>, data: &[u8]) {
        write_pkt(out, data).unwrap();
    }

    /// Git's side of the handshake, asking for `capability`.
    fn handshake(capability: &str) -> Vec<u8> {
        let mut input = Vec::new();
        for l in ["git-filter-client\n", "version=2\n"] {
            pkt(&mut input, l.as_bytes());
        }
        input.extend_from_slice(b"0000");
        pkt(&mut input, format!("capability={capability}\n").as_bytes());
        input.extend_from_slice(b"0000");
        input
    }

    fn request(out: &mut Vec<u8>, command: &str, content: &[u8]) {
        pkt(out, format!("command={command}\n").as_bytes());
        pkt(out, b"pathname=m.safetensors\n");
        out.extend_from_slice(b"0000");
        pkt(out, content);
        out.extend_from_slice(b"0000");
    }

    /// Files over the part size are refused whether or not they are WTXT,
    /// the refused content is read past (not kept) so the next request is
    /// answered, and a WTXT under the part size passes as it is.
    #[test]
    fn clean_refuses_what_would_be_a_blob_over_the_part_size_and_stays_in_step() {
        let limit = crate::format::split::DEFAULT_PART_SIZE as usize;
        let mut input = handshake("clean");
        let mut wtxt = b"WTXT 1\n".to_vec();
        wtxt.resize(limit + 10, b'x');
        let mut raw = vec![7u8; limit / 4 * 3 + 8]; // its WTXT would be over the limit
        request(&mut input, "clean", &wtxt); // read past: more than is kept
        request(&mut input, "clean", &raw); // refused in memory
        wtxt.truncate(limit - 10);
        request(&mut input, "clean", &wtxt); // under the limit: stored as it is
        raw.truncate(100);
        request(&mut input, "clean", &raw); // not a container: stored as it is
        let (mut out, log) = (Vec::new(), RefCell::new(Vec::new()));
        let dir = tempfile::tempdir().unwrap();
        serve("safetensors", dir.path(), &input[..], &mut out, &|m| log.borrow_mut().push(m.to_string())).unwrap();
        let log = log.into_inner();
        assert_eq!(log.len(), 2, "{log:?}");
        for m in &log {
            assert!(
                m.starts_with("m.safetensors: its WTXT would be ") && m.contains("wtxt snapshot m.safetensors"),
                "{m}"
            );
            assert!(!m.contains("  "), "one line, single spaces: {m}");
        }
        let mut r = &out[..];
        assert_eq!(read_list(&mut r).unwrap(), ["git-filter-server", "version=2"]);
        assert_eq!(read_list(&mut r).unwrap(), ["capability=clean"]);
        for _ in 0..2 {
            assert_eq!(read_list(&mut r).unwrap(), ["status=error"]);
        }
        for expected in [&wtxt, &raw] {
            assert_eq!(read_list(&mut r).unwrap(), ["status=success"]);
            let mut got = Vec::new();
            while let Some(p) = read_pkt(&mut r).unwrap() {
                got.extend_from_slice(&p);
            }
            assert!(got == *expected, "stored as it is");
            assert!(read_list(&mut r).unwrap().is_empty());
        }
        assert!(r.is_empty());
    }

    /// Smudge keeps no more than the part size: a blob that is not WTXT
    /// (of any size) streams straight back, a WTXT over the part size is
    /// refused, and the protocol stays in step after both.
    #[test]
    fn smudge_streams_what_is_not_wtxt_and_refuses_an_oversized_wtxt() {
        let limit = crate::format::split::DEFAULT_PART_SIZE as usize;
        let mut input = handshake("smudge");
        let big: Vec<u8> = (0..limit + 100_000).map(|i| (i % 251) as u8).collect();
        let mut wtxt = b"WTXT 1\n".to_vec();
        wtxt.resize(limit + 10, b'x');
        request(&mut input, "smudge", &big);
        request(&mut input, "smudge", &wtxt);
        request(&mut input, "smudge", b"tiny");
        let (mut out, log) = (Vec::new(), RefCell::new(Vec::new()));
        let dir = tempfile::tempdir().unwrap();
        serve("safetensors", dir.path(), &input[..], &mut out, &|m| log.borrow_mut().push(m.to_string())).unwrap();
        let log = log.into_inner();
        assert!(log.len() == 1 && log[0].contains("not one the clean filter stored"), "{log:?}");
        let mut r = &out[..];
        read_list(&mut r).unwrap();
        assert_eq!(read_list(&mut r).unwrap(), ["capability=smudge"]);
        let content = |r: &mut &[u8]| {
            let mut got = Vec::new();
            while let Some(p) = read_pkt(r).unwrap() {
                got.extend_from_slice(&p);
            }
            assert!(read_list(r).unwrap().is_empty());
            got
        };
        assert_eq!(read_list(&mut r).unwrap(), ["status=success"]);
        assert!(content(&mut r) == big, "streamed back as it is");
        assert_eq!(read_list(&mut r).unwrap(), ["status=error"]);
        assert_eq!(read_list(&mut r).unwrap(), ["status=success"]);
        assert_eq!(content(&mut r), b"tiny");
        assert!(r.is_empty());
    }
}
