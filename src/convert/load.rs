//! Inputs opened by what their first bytes say, read into arrays (WTXT
//! verified first), and arrays written to the container a path names.

use std::path::Path;

use crate::convert::container::Container;
use crate::error::{input_at, Error, Result};
use crate::format::verify::VerifyOptions;
use crate::model::{assign_names, sort_arrays, Array};

use crate::convert::common::{map_open, Notes};
use crate::convert::{container, formats, hf, names};

/// What an input file is, told by its first bytes.
#[derive(Clone, Copy)]
pub enum Input {
    /// A WTXT snapshot.
    Wtxt,
    /// A binary container of the table.
    Container(&'static dyn Container),
}

/// Detects a format from magic bytes, never from the file name.
pub fn detect(b: &[u8]) -> Option<Input> {
    detect_head(b, b.len() as u64)
}

/// Detects the format of a file from its first bytes `b` and its length.
pub fn detect_head(b: &[u8], file_len: u64) -> Option<Input> {
    if b.starts_with(b"WTXT 1\n") {
        return Some(Input::Wtxt);
    }
    formats::sniff(b, file_len).map(Input::Container)
}

/// Reads snapshot inputs into arrays with WTXT names, sorted by name.
/// `.npy` arrays are named after the file stem; other names are mapped with
/// [`crate::model::assign_names`]. WTXT inputs are verified first.
pub fn load_inputs(paths: &[impl AsRef<Path>], verify: &VerifyOptions, notes: &mut Notes) -> Result<Vec<Array>> {
    let mut loaded = Vec::with_capacity(paths.len());
    for p in paths {
        let p = p.as_ref();
        loaded.push((p, load_one(p, verify, notes).map_err(|e| e.in_file(p))?));
    }
    gather(loaded, notes)
}

/// The arrays of loaded inputs as one snapshot's: original names merged
/// and WTXT names given, sorted, no name twice.
pub fn gather(loaded: Vec<(&Path, Vec<Array>)>, notes: &mut Notes) -> Result<Vec<Array>> {
    let mut arrays = Vec::new();
    let mut from: Vec<&Path> = Vec::new();
    let mut kept = names::OriginalNames::default();
    // Each tensor's own name in its input (a WTXT input's `__names` gives
    // its originals): two tensors of one name, from two inputs or the
    // same input twice, cannot both be given back under it.
    let mut originals: std::collections::HashMap<String, &Path> = std::collections::HashMap::new();
    for (p, got) in loaded {
        let own = names::OriginalNames::of(&got).map_err(|e| e.in_file(p))?;
        for a in got.iter().filter(|a| a.name != names::NAMES) {
            let original = own.as_ref().map_or(a.name.as_str(), |n| n.original(&a.name));
            if let Some(q) = originals.insert(original.to_string(), p) {
                return Err(Error::input(
                    Default::default(),
                    format!("tensor {original:?} comes from both {} and {}", q.display(), p.display()),
                ));
            }
        }
        if let Some(n) = own {
            if let Some(why) = kept.merge(n) {
                notes.push(format!("{}: {why}", p.display()));
            }
        }
        let got: Vec<Array> = got.into_iter().filter(|a| a.name != names::NAMES).collect();
        from.extend(std::iter::repeat_n(p, got.len()));
        arrays.extend(got);
    }
    if names::give_wtxt_names(&mut arrays, &mut kept)? {
        from.push(Path::new("(the inputs' names)"));
    }
    // Two inputs with an array of one name: say which files.
    let mut seen: std::collections::HashMap<&str, &Path> = std::collections::HashMap::new();
    for (a, p) in arrays.iter().zip(&from) {
        if let Some(q) = seen.insert(a.name.as_str(), p) {
            return Err(Error::input(
                Default::default(),
                format!("array {} comes from both {} and {}", a.name, q.display(), p.display()),
            ));
        }
    }
    sort_arrays(&mut arrays)?;
    Ok(arrays)
}

/// Like `load_inputs` for one file, but keeping what the container carries
/// besides tensors in metadata arrays (`__safetensors_header`, `__aero`,
/// ...), so it can be written back as it was.
pub fn load_lossless(path: &Path, verify: &VerifyOptions, notes: &mut Notes) -> Result<Vec<Array>> {
    load_for(path, None, verify, notes)
}

/// What `convert` writes as `to` (`None`: WTXT): everything, from a file of
/// that very format or a WTXT ([`load_lossless`]); from a container of
/// another format, its tensors under WTXT names with their own names kept
/// in `__names`, as a snapshot takes them, since the other format's exact
/// form is of no use to `to` but the names are.
pub fn load_for(
    path: &Path,
    to: Option<&dyn container::Container>,
    verify: &VerifyOptions,
    notes: &mut Notes,
) -> Result<Vec<Array>> {
    load_source_for(path, Source::open(path).map_err(|e| e.in_file(path))?, to, verify, notes)
}

/// [`load_for`] of `source`, the input at `path` opened already.
pub fn load_source_for(
    path: &Path,
    source: Source,
    to: Option<&dyn container::Container>,
    verify: &VerifyOptions,
    notes: &mut Notes,
) -> Result<Vec<Array>> {
    match source {
        Source::Container { kind, file, len } if len > 0 && to.is_none_or(|t| t.name() == kind.name()) => {
            let src = crate::buffer::ArrayData::from_map(map_open(&file, path)?);
            let mut arrays = noted(path, notes, |n| kind.read(&src, &stem_of(path), n)).map_err(|e| e.in_file(path))?;
            let originals: Vec<String> = arrays.iter().map(|a| a.name.clone()).collect();
            for (a, n) in arrays.iter_mut().zip(assign_names(&originals)) {
                a.name = n;
            }
            sort_arrays(&mut arrays).map_err(|e| e.in_file(path))?;
            Ok(arrays)
        }
        source => {
            let got = load_source(path, source, verify, notes).map_err(|e| e.in_file(path))?;
            gather(vec![(path, got)], notes)
        }
    }
}

/// An input path, opened once: what it is, told by its first bytes (never
/// its name), and the open file every reader of it then uses, so a path
/// replaced between the look and the read cannot swap what is read.
pub enum Source {
    /// A folder (a Hugging Face folder, if anything).
    Folder,
    /// A WTXT snapshot (or its head).
    Wtxt {
        /// The file, at its start.
        file: std::fs::File,
        /// Its length.
        len: u64,
    },
    /// A binary container of the table.
    Container {
        /// Which one.
        kind: &'static dyn Container,
        /// The file.
        file: std::fs::File,
        /// Its length.
        len: u64,
    },
    /// An empty file, or one no format claims.
    Unknown {
        /// Its length.
        len: u64,
    },
}

impl Source {
    /// Opens `path`: a real folder, or a regular file (a link the user
    /// named is followed; a device, FIFO or socket is refused before a byte
    /// is read) whose first 128 bytes are read in place.
    pub fn open(path: &Path) -> Result<Source> {
        if crate::fs::is_real_dir(path) {
            return Ok(Source::Folder);
        }
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            return Err(Error::input(
                Default::default(),
                "a symbolic link to a folder: give the folder's own path (wtxt does not follow links into folders)",
            ));
        }
        let file = crate::fs::open_input_file(path)?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return Err(Error::input(
                Default::default(),
                "not a regular file (a device, FIFO or socket): inputs are mapped or read more than once; \
                 save it to a file first",
            ));
        }
        let len = meta.len();
        let mut head = [0u8; 128];
        let got =
            crate::fs::read_full(&mut crate::fs::ReadAt::new(&file), &mut head).map_err(|e| Error::io(path, e))?;
        let detected = detect_head(&head[..got], len);
        if let Some(what) = torch_file(&head[..got], path, detected.is_some()) {
            return Err(input_at(0, what));
        }
        Ok(match detected {
            Some(Input::Wtxt) => Source::Wtxt { file, len },
            Some(Input::Container(kind)) => Source::Container { kind, file, len },
            None => Source::Unknown { len },
        })
    }
}

/// What a PyTorch file given as a snapshot input is, and what to use
/// instead: `torch.save`'s zip (its first member `NAME/data.pkl`), its
/// older pickle, or a DCP shard (raw bytes in a folder with `.metadata`).
/// A file a format's magic already `recognized` is never taken for a
/// pickle: a safetensors header length of 640 (mod 65536) begins with the
/// bytes of pickle protocol 2.
fn torch_file(head: &[u8], path: &Path, recognized: bool) -> Option<String> {
    let instead = "load it with torch and save the state dict with `wtxt.torch.save_state_dict` \
                   (or `save_pretrained(..., safe_serialization=True)` and snapshot the .safetensors)";
    let first_member = head.starts_with(b"PK\x03\x04").then(|| {
        let n = u16::from_le_bytes([*head.get(26)?, *head.get(27)?]) as usize;
        head.get(30..30 + n)
    });
    if first_member.flatten().is_some_and(|name| name.ends_with(b"/data.pkl")) {
        return Some(format!("a PyTorch `torch.save` file (a zip of pickles), not a tensor container: {instead}"));
    }
    if !recognized && (head.starts_with(&[0x80, 0x02]) || head.starts_with(&[0x80, 0x04])) {
        return Some(format!("a Python pickle (`torch.save`'s older format), which wtxt never unpickles: {instead}"));
    }
    let dcp =
        path.extension().is_some_and(|e| e == "distcp") || path.parent().is_some_and(|d| d.join(".metadata").is_file());
    (dcp && !recognized).then(|| {
        "a PyTorch DCP checkpoint shard (`torch.distributed.checkpoint`): load the checkpoint with `dcp.load` \
         and save the state dict with `wtxt.torch.save_state_dict`"
            .to_string()
    })
}

/// Runs a reader, its notes joining `notes` with the file's name.
fn noted<T>(path: &Path, notes: &mut Notes, read: impl FnOnce(&mut Notes) -> T) -> T {
    let mut found = Notes::new();
    let r = read(&mut found);
    notes.extend(found.into_iter().map(|n| format!("{}: {n}", path.display())));
    r
}

fn stem_of(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

fn load_one(path: &Path, verify: &VerifyOptions, notes: &mut Notes) -> Result<Vec<Array>> {
    load_source(path, Source::open(path)?, verify, notes)
}

/// The arrays of an input opened as `source`: a WTXT's verified, a
/// container's tensors, a Hugging Face folder's.
fn load_source(path: &Path, source: Source, verify: &VerifyOptions, notes: &mut Notes) -> Result<Vec<Array>> {
    match source {
        Source::Folder if !hf::is_folder(path) => Err(Error::input(
            Default::default(),
            format!("a folder without {} or {}: not a Hugging Face folder", hf::INDEX, hf::SINGLE),
        )),
        Source::Folder => hf::read_folder(path, notes),
        Source::Wtxt { len: 0, .. } | Source::Container { len: 0, .. } | Source::Unknown { len: 0 } => {
            Err(input_at(0, "empty file: expected .npy, .npz, .safetensors, FOLD, AERO, VOLP, MLDF or WTXT"))
        }
        Source::Wtxt { file, len } => {
            // Streamed (a split snapshot joined): the decoded arrays are the only copy held.
            let mut input = crate::store::WtxtIn::from_file(&file, len, path, None)?;
            Ok(crate::format::load(input.text(), input.len, verify).map_err(|e| input.blame(e))?.arrays)
        }
        Source::Container { kind, file, .. } => {
            let src = crate::buffer::ArrayData::from_map(map_open(&file, path)?);
            noted(path, notes, |n| kind.read_tensors(&src, &stem_of(path), n))
        }
        Source::Unknown { .. } => Err(input_at(
            0,
            "unrecognized format: expected .npy, .npz (zip), .safetensors, FOLD, AERO, VOLP, MLDF or WTXT magic bytes",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dtype;

    fn npy(values: &[u8]) -> Vec<u8> {
        let a = Array::new("x", Dtype::U8, vec![values.len() as u64], values.to_vec().into()).unwrap();
        let mut b = crate::convert::npy::header(&a).unwrap();
        b.extend_from_slice(values);
        b
    }

    #[test]
    fn what_is_read_is_the_file_that_was_looked_at() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.npy");
        std::fs::write(&path, npy(&[1, 2, 3])).unwrap();
        let source = Source::open(&path).unwrap();
        assert!(matches!(source, Source::Container { len, .. } if len > 0));
        // The path now names another file: the open source still reads the first.
        let other = dir.path().join("y.npy");
        std::fs::write(&other, npy(&[9, 9, 9, 9])).unwrap();
        std::fs::rename(&other, &path).unwrap();
        let got = load_source(&path, source, &VerifyOptions::default(), &mut Notes::new()).unwrap();
        assert_eq!(got[0].bytes(), &[1, 2, 3]);
    }

    #[test]
    fn links_devices_and_empty_files_are_told_apart_before_any_read() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("link")).unwrap();
        let e = Source::open(&dir.path().join("link")).err().unwrap();
        assert!(e.to_string().contains("symbolic link to a folder"), "{e}");
        assert!(Source::open(Path::new("/dev/zero")).is_err());
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        let empty = Source::open(&dir.path().join("empty")).unwrap();
        let e = load_source(&dir.path().join("empty"), empty, &VerifyOptions::default(), &mut Notes::new());
        assert!(e.err().unwrap().to_string().contains("empty file"));
    }
}
