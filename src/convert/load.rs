//! Inputs opened by what their first bytes say, read into arrays (WTXT
//! verified first), and arrays written to the container a path names.

use std::path::Path;

use crate::convert::container::Container;
use crate::error::{input_at, Error, Result};
use crate::format::verify::VerifyOptions;
use crate::model::{assign_names, sort_arrays, Array};

use crate::convert::common::{map_file, Notes};
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
    if crate::fs::is_real_dir(path) {
        return load_inputs(&[path], verify, notes);
    }
    match sniff(path)? {
        (Some(Input::Container(c)), len) if len > 0 && to.is_none_or(|t| t.name() == c.name()) => {
            let src = crate::buffer::ArrayData::from_map(map_file(path)?);
            let mut arrays = noted(path, notes, |n| c.read(&src, &stem_of(path), n)).map_err(|e| e.in_file(path))?;
            let originals: Vec<String> = arrays.iter().map(|a| a.name.clone()).collect();
            for (a, n) in arrays.iter_mut().zip(assign_names(&originals)) {
                a.name = n;
            }
            sort_arrays(&mut arrays).map_err(|e| e.in_file(path))?;
            Ok(arrays)
        }
        _ => load_inputs(&[path], verify, notes),
    }
}

/// A file's format, from its first 16 bytes, and its length: enough to
/// choose a reader before mapping (or streaming) the whole file.
fn sniff(path: &Path) -> Result<(Option<Input>, u64)> {
    let mut f = crate::fs::open_input_file(path)?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut head = [0u8; 128];
    let mut got = 0;
    while got < head.len() {
        match std::io::Read::read(&mut f, &mut head[got..]).map_err(|e| Error::io(path, e))? {
            0 => break,
            n => got += n,
        }
    }
    let detected = detect_head(&head[..got], len);
    if let Some(what) = torch_file(&head[..got], path, detected.is_some()) {
        return Err(input_at(0, what));
    }
    Ok((detected, len))
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
    if !crate::fs::is_real_dir(path) && std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err(Error::input(
            Default::default(),
            "a symbolic link to a folder: give the folder's own path (wtxt does not follow links into folders)",
        ));
    }
    if crate::fs::is_real_dir(path) {
        if !hf::is_folder(path) {
            return Err(Error::input(
                Default::default(),
                format!("a folder without {} or {}: not a Hugging Face folder", hf::INDEX, hf::SINGLE),
            ));
        }
        return hf::read_folder(path, notes);
    }
    match sniff(path)? {
        (_, 0) => Err(input_at(0, "empty file: expected .npy, .npz, .safetensors, FOLD, AERO, VOLP, MLDF or WTXT")),
        (Some(Input::Wtxt), _) => {
            // Streamed (a split snapshot joined): the decoded arrays are the only copy held.
            let mut input = crate::store::input::WtxtIn::open(path, None)?;
            Ok(crate::format::load(input.text(), input.len, verify).map_err(|e| input.blame(e))?.arrays)
        }
        (Some(Input::Container(c)), _) => {
            let src = crate::buffer::ArrayData::from_map(map_file(path)?);
            noted(path, notes, |n| c.read_tensors(&src, &stem_of(path), n))
        }
        (None, _) => Err(input_at(
            0,
            "unrecognized format: expected .npy, .npz (zip), .safetensors, FOLD, AERO, VOLP, MLDF or WTXT magic bytes",
        )),
    }
}
