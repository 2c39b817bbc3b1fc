//! Inputs and outputs other than WTXT: format detection by magic bytes,
//! loading snapshot inputs into the model, and writing extracted arrays.

pub mod aero;
pub(crate) mod bytes;
pub(crate) mod container;
pub mod direct;
pub mod fold;
pub mod formats;
pub mod hf;
pub mod mldf;
pub(crate) mod msgpack;
pub mod names;
pub mod npy;
pub mod npz;
pub(crate) mod pyjson;
pub(crate) mod rs;
pub mod safetensors;
pub(crate) mod unseek;
pub mod volp;

use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use crate::convert::container::Container;
use crate::error::{input_at, reason, Error, Reason, Result};
use crate::format::verify::VerifyOptions;
use crate::fs::AtomicFile;
use crate::model::{assign_names, sort_arrays, Array};

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

/// Warnings a reader wants the user to see (a repaired chunk, a newer minor
/// version, metadata left out); the library never prints: the command does.
pub type Notes = Vec<String>;

/// How a container reader that maps names (AERO, FOLD) reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadAs {
    /// Tensors under WTXT names, the file's own kept in its metadata array.
    Mapped,
    /// As `Mapped`, also keeping stored bytes our encoders would not
    /// reproduce (the Git filter's exact form).
    Pinned,
    /// Tensors under the file's own names, for a snapshot to map and keep
    /// in `__names`.
    OwnNames,
}

/// Decompresses one zstd payload that must decode to exactly `want` bytes,
/// never inflating past that: a compression bomb stops at the declared
/// size. Large payloads go to a mapped temporary file ([`crate::buffer::Spill`]), so the
/// heap stays small whatever the file declares.
pub fn zstd_exact(body: impl std::io::Read, want: u64) -> std::result::Result<crate::buffer::ArrayData, Reason> {
    use std::io::Read;
    let mut dec = zstd::stream::read::Decoder::new(body).map_err(|e| e.to_string())?;
    let mut out = crate::buffer::Spill::with_expected(want).map_err(|e| e.message().to_string())?;
    let mut piece = vec![0u8; 1 << 20];
    loop {
        let n = dec.read(&mut piece).map_err(|e| reason!("not a valid zstd frame: {e}"))?;
        if n == 0 {
            break;
        }
        if out.len() + n as u64 > want {
            return Err(reason!("decodes to more than the {want} bytes declared"));
        }
        out.push(&piece[..n]).map_err(|e| e.message().to_string())?;
    }
    if out.len() != want {
        return Err(reason!("decodes to {} bytes, {want} declared", out.len()));
    }
    out.finish().map_err(|e| Reason::new(e.message()))
}

/// A metadata array: `name` (beginning with `__`) holding `v` as UTF-8 JSON.
pub fn meta_array(name: &str, v: &serde_json::Value) -> Result<Array> {
    let bytes = serde_json::to_vec(v).expect("a JSON value serializes");
    Array::new(name, crate::model::Dtype::U8, vec![bytes.len() as u64], bytes.into())
}

/// The JSON held by metadata array `name`, if there is one.
pub fn meta_json(arrays: &[Array], name: &str) -> Result<Option<serde_json::Value>> {
    let Some(a) = arrays.iter().find(|a| a.name == name) else { return Ok(None) };
    if a.dtype != crate::model::Dtype::U8 || a.shape.len() != 1 {
        return Err(Error::input(Default::default(), format!("{name}: expected a rank-1 u8 array of JSON")));
    }
    serde_json::from_slice(a.bytes())
        .map(Some)
        .map_err(|e| Error::input(Default::default(), format!("{name}: not JSON: {e}")))
}

/// A streaming writer's output collected in memory (tests, fuzzing).
pub fn in_memory(write: impl FnOnce(&mut dyn std::io::Write) -> Result<()>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    write(&mut out)?;
    Ok(out)
}

/// A metadata array parsed into its serde shape (`None` when absent).
pub fn meta_typed<T: serde::de::DeserializeOwned>(arrays: &[Array], name: &str) -> Result<Option<T>> {
    meta_json(arrays, name)?
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| Error::input(Default::default(), format!("{name}: {e}")))
}

/// Maps a whole file read-only.
#[allow(unsafe_code)]
pub fn map_file(path: &Path) -> Result<Arc<Mmap>> {
    let f = crate::fs::open_input_file(path)?;
    // SAFETY: the map is read-only; a file truncated under us by another
    // process can fault, which is the accepted cost of not copying weights.
    // Not populated up front: that made every input wholly resident (a
    // 4.2 GiB safetensors held 4.4 GB of RSS through a snapshot), where the
    // WTXT writer drops the pages it is done with; faulting them in as read
    // costs about as much (docs/PERFORMANCE.md).
    let m = unsafe { memmap2::MmapOptions::new().map(&f) }.map_err(|e| Error::io(path, e))?;
    Ok(Arc::new(m))
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

/// Refuses arrays too large for `writer`, which builds its file in memory
/// (MLDF, VOLP): the heap stays bounded whatever the input holds.
pub(crate) fn fits_in_memory(arrays: &[Array], writer: &str) -> Result<()> {
    let total: u64 = arrays.iter().map(|a| a.bytes().len() as u64).sum();
    if total > crate::limits::MAX_IN_MEMORY_OUTPUT {
        return Err(Error::input(
            Default::default(),
            format!(
                "{total} bytes of tensors: the {} writer builds the file in memory and takes at most {} \
                 (the heap cap); write .safetensors, .npz, .aero or .fold, which stream",
                writer,
                crate::limits::MAX_IN_MEMORY_OUTPUT
            ),
        ));
    }
    Ok(())
}

/// Writes arrays in the format `extract` picks from the output's extension.
pub fn write_arrays(arrays: &[Array], out: &Path) -> Result<()> {
    write_arrays_as(arrays, out, formats::by_extension(out)?)
}

/// Writes arrays to `out` as `to`, atomically.
pub fn write_arrays_as(arrays: &[Array], out: &Path, to: &dyn Container) -> Result<()> {
    to.check_sizes(arrays).map_err(|e| e.in_file(out))?;
    let mut f = AtomicFile::create(out)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f.file());
        to.write(arrays, &mut w).map_err(|e| e.in_file(out))?;
        std::io::Write::flush(&mut w).map_err(|e| Error::io(out, e))?;
    }
    f.commit()
}
