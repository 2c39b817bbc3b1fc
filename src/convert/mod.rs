//! Inputs and outputs other than WTXT: format detection by magic bytes,
//! loading snapshot inputs into the model, and writing extracted arrays.

pub mod aero;
pub mod bytes;
pub mod fold;
pub mod mldf;
pub mod msgpack;
pub mod npy;
pub mod npz;
pub mod pyjson;
pub mod rs;
pub mod safetensors;
pub mod spill;
pub mod volp;

use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use crate::atomic::AtomicFile;
use crate::error::{input_at, Error, Result};
use crate::model::{assign_names, sort_arrays, Array};
use crate::wtxt::verify::VerifyOptions;

/// A file format, told by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Aero,
    Fold,
    Mldf,
    Npy,
    Npz,
    Safetensors,
    Volp,
    Wtxt,
}

/// Detects a format from magic bytes, never from the file name.
pub fn detect(b: &[u8]) -> Option<Format> {
    detect_head(b, b.len() as u64)
}

/// Detects the format of a file from its first bytes `b` and its length.
pub fn detect_head(b: &[u8], file_len: u64) -> Option<Format> {
    if b.starts_with(npy::MAGIC) {
        return Some(Format::Npy);
    }
    if b.starts_with(b"PK\x03\x04") || b.starts_with(b"PK\x05\x06") {
        return Some(Format::Npz);
    }
    if b.starts_with(b"WTXT 1\n") {
        return Some(Format::Wtxt);
    }
    if b.starts_with(volp::MAGIC) {
        return Some(Format::Volp);
    }
    if b.starts_with(fold::MAGIC) {
        return Some(Format::Fold);
    }
    if b.starts_with(aero::MAGIC) {
        return Some(Format::Aero);
    }
    if b.starts_with(mldf::MAGIC) {
        return Some(Format::Mldf);
    }
    // safetensors: u64 LE header length, then a JSON object.
    if b.len() >= 10 {
        let n = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        if b[8] == b'{' && n >= 2 && n <= file_len - 8 {
            return Some(Format::Safetensors);
        }
    }
    None
}

/// Warnings a reader wants the user to see (a repaired chunk, a newer minor
/// version, metadata left out); the library never prints: the command does.
pub type Notes = Vec<String>;

/// Decompresses one zstd payload that must decode to exactly `want` bytes,
/// never inflating past that: a compression bomb stops at the declared
/// size. Large payloads go to a mapped temporary file ([`spill`]), so the
/// heap stays small whatever the file declares.
pub fn zstd_exact(body: &[u8], want: u64) -> std::result::Result<npy::Source, String> {
    use std::io::Read;
    let mut dec = zstd::stream::read::Decoder::with_buffer(body).map_err(|e| e.to_string())?;
    let mut out = spill::Spill::with_expected(want).map_err(|e| e.message().to_string())?;
    let mut piece = vec![0u8; 1 << 20];
    loop {
        let n = dec.read(&mut piece).map_err(|e| format!("not a valid zstd frame: {e}"))?;
        if n == 0 {
            break;
        }
        if out.len() + n as u64 > want {
            return Err(format!("decodes to more than the {want} bytes declared"));
        }
        out.push(&piece[..n]).map_err(|e| e.message().to_string())?;
    }
    if out.len() != want {
        return Err(format!("decodes to {} bytes, {want} declared", out.len()));
    }
    out.finish().map_err(|e| e.message().to_string())
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

/// The metadata arrays a container's writer reads back: a name is its
/// own when it equals one of these or starts with one followed by `_`.
pub fn own_metadata(fmt: OutFormat) -> &'static [&'static str] {
    match fmt {
        OutFormat::Aero => &[aero::META],
        OutFormat::Fold => &[fold::META],
        OutFormat::Mldf => &[mldf::META],
        OutFormat::Npz => &[npz::META],
        OutFormat::Safetensors => &[safetensors::ST_HEADER],
        OutFormat::Volp => &[volp::HEADER],
        OutFormat::Npy => &[],
    }
}

/// Splits off metadata arrays that belong to other containers (their
/// names start with `__`), which a writer of `fmt` has no place for.
pub fn foreign_metadata(arrays: Vec<Array>, fmt: OutFormat) -> (Vec<Array>, Vec<String>) {
    let own = own_metadata(fmt);
    let is_own = |n: &str| own.iter().any(|m| n == *m || n.strip_prefix(m).is_some_and(|r| r.starts_with('_')));
    let (keep, drop): (Vec<Array>, Vec<Array>) =
        arrays.into_iter().partition(|a| !a.name.starts_with("__") || is_own(&a.name));
    (keep, drop.into_iter().map(|a| a.name).collect())
}

/// Maps a whole file read-only.
pub fn map_file(path: &Path) -> Result<Arc<Mmap>> {
    let f = crate::atomic::open_input_file(path)?;
    // SAFETY: the map is read-only; a file truncated under us by another
    // process can fault, which is the accepted cost of not copying weights.
    // Populated up front: one pass of page-table setup instead of a fault per page.
    let m = unsafe { memmap2::MmapOptions::new().populate().map(&f) }.map_err(|e| Error::io(path, e))?;
    Ok(Arc::new(m))
}

/// Reads snapshot inputs into arrays with WTXT names, sorted by name.
/// `.npy` arrays are named after the file stem; other names are mapped with
/// [`crate::model::assign_names`]. WTXT inputs are verified first.
pub fn load_inputs(paths: &[impl AsRef<Path>], verify: &VerifyOptions, notes: &mut Notes) -> Result<Vec<Array>> {
    let mut arrays = Vec::new();
    let mut from: Vec<&Path> = Vec::new();
    for p in paths {
        let p = p.as_ref();
        let got = load_one(p, verify, notes).map_err(|e| e.in_file(p))?;
        from.extend(std::iter::repeat_n(p, got.len()));
        arrays.extend(got);
    }
    let originals: Vec<String> = arrays.iter().map(|a| a.name.clone()).collect();
    for (a, n) in arrays.iter_mut().zip(assign_names(&originals)) {
        a.name = n;
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
/// besides tensors in metadata arrays (`__safetensors_header`,
/// `__volp_header`), so it can be written back as it was.
pub fn load_lossless(path: &Path, verify: &VerifyOptions, notes: &mut Notes) -> Result<Vec<Array>> {
    let fmt = match sniff(path)? {
        (Some(fmt @ (Format::Fold | Format::Aero | Format::Mldf | Format::Npz | Format::Safetensors)), _) => fmt,
        // WTXT, .npy, VOLP: the snapshot loader already keeps everything.
        _ => return load_inputs(&[path], verify, notes),
    };
    let map = map_file(path)?;
    match fmt {
        Format::Npz => {
            let arrays = npz::read(&npy::Source::Mapped(map)).map_err(|e| e.in_file(path))?;
            npz::with_key_names(arrays).map_err(|e| e.in_file(path))
        }
        Format::Safetensors => {
            let mut arrays = safetensors::safetensors_to_arrays_in(&npy::Source::Mapped(map.clone()))
                .map_err(|e| e.in_file(path))?;
            sort_arrays(&mut arrays).map_err(|e| e.in_file(path))?;
            // A file our own writer would produce for these tensors needs no
            // header array to be rebuilt: leave it out, so WTXT -> safetensors
            // -> WTXT gives the same bytes too.
            let tensors: Vec<Array> = arrays.iter().filter(|a| a.name != safetensors::ST_HEADER).cloned().collect();
            Ok(if safetensors::is_ours(&map, &tensors) { tensors } else { arrays })
        }
        _ => {
            let arrays = read_container(fmt, &npy::Source::Mapped(map), path, notes)?;
            Ok(drop_default_meta(fmt, arrays))
        }
    }
}

/// A file's format, from its first 16 bytes, and its length: enough to
/// choose a reader before mapping (or streaming) the whole file.
fn sniff(path: &Path) -> Result<(Option<Format>, u64)> {
    let mut f = crate::atomic::open_input_file(path)?;
    let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut head = [0u8; 16];
    let mut got = 0;
    while got < head.len() {
        match std::io::Read::read(&mut f, &mut head[got..]).map_err(|e| Error::io(path, e))? {
            0 => break,
            n => got += n,
        }
    }
    Ok((detect_head(&head[..got], len), len))
}

/// Reads a FOLD, AERO or MLDF file with its metadata arrays; the reader's
/// notes (repairs, version warnings) join `notes`, naming the file.
fn read_container(fmt: Format, src: &npy::Source, path: &Path, notes: &mut Notes) -> Result<Vec<Array>> {
    let mut found = Notes::new();
    let arrays = match fmt {
        Format::Fold => fold::read(src, &mut found),
        Format::Aero => aero::read(src, &mut found),
        Format::Mldf => mldf::read(src, &mut found),
        _ => unreachable!("only containers with metadata arrays"),
    }
    .map_err(|e| e.in_file(path))?;
    notes.extend(found.into_iter().map(|n| format!("{}: {n}", path.display())));
    let mut arrays = arrays;
    sort_arrays(&mut arrays).map_err(|e| e.in_file(path))?;
    Ok(arrays)
}

/// Leaves out the metadata array when it is exactly what reading back our
/// writer's output for the tensors alone would give (each container
/// predicts that without writing): then nothing is lost, and WTXT ->
/// container -> WTXT gives the same bytes.
fn drop_default_meta(fmt: Format, arrays: Vec<Array>) -> Vec<Array> {
    let (meta, tensors): (Vec<Array>, Vec<Array>) = arrays.into_iter().partition(|a| a.name.starts_with("__"));
    let predicted = match fmt {
        Format::Fold => fold::default_meta(&tensors),
        Format::Aero => aero::default_meta(&tensors),
        Format::Mldf => mldf::default_meta(&tensors),
        _ => unreachable!("only containers with metadata arrays"),
    };
    if let ([m], Some(p)) = (&meta[..], predicted) {
        if m.bytes() == serde_json::to_vec(&p).expect("a JSON value serializes") {
            return tensors;
        }
    }
    let mut all = tensors;
    all.extend(meta);
    sort_arrays(&mut all).expect("names were unique");
    all
}

fn load_one(path: &Path, verify: &VerifyOptions, notes: &mut Notes) -> Result<Vec<Array>> {
    let fmt = match sniff(path)? {
        (_, 0) => {
            return Err(input_at(0, "empty file: expected .npy, .npz, .safetensors, FOLD, AERO, VOLP, MLDF or WTXT"))
        }
        (Some(Format::Wtxt), len) => {
            // Streamed from the file: the decoded arrays are the only copy held.
            let f = crate::atomic::open_input_file(path)?;
            return Ok(crate::wtxt::load(std::io::BufReader::with_capacity(1 << 20, f), len, verify)?.arrays);
        }
        (Some(fmt), _) => fmt,
        (None, _) => return Err(input_at(
            0,
            "unrecognized format: expected .npy, .npz (zip), .safetensors, FOLD, AERO, VOLP, MLDF or WTXT magic bytes",
        )),
    };
    let map = map_file(path)?;
    match fmt {
        Format::Npy => {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let n = map.len();
            Ok(vec![npy::read(&stem, &npy::Source::Mapped(map), 0..n)?])
        }
        Format::Npz => npz::read(&npy::Source::Mapped(map)),
        Format::Safetensors => safetensors::read(&npy::Source::Mapped(map)),
        Format::Volp => volp::read(&map),
        // Snapshots take the tensors; `convert` keeps the metadata too.
        Format::Fold | Format::Aero | Format::Mldf => {
            let arrays = read_container(fmt, &npy::Source::Mapped(map), path, notes)?;
            Ok(arrays.into_iter().filter(|a| !a.name.starts_with("__")).collect())
        }
        Format::Wtxt => unreachable!("streamed above"),
    }
}

/// Formats arrays can be written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutFormat {
    Aero,
    Fold,
    Mldf,
    Npy,
    Npz,
    Safetensors,
    Volp,
}

impl OutFormat {
    /// From an output file's extension (for `extract`).
    pub fn from_path(out: &Path) -> Result<OutFormat> {
        let ext = out.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
        Ok(match ext.as_str() {
            "npy" => OutFormat::Npy,
            "npz" => OutFormat::Npz,
            "safetensors" => OutFormat::Safetensors,
            "volp" => OutFormat::Volp,
            "fold" | "mind" => OutFormat::Fold,
            "aero" => OutFormat::Aero,
            "mldf" => OutFormat::Mldf,
            _ => {
                return Err(Error::usage(format!(
                    "{}: output must end in .npy, .npz, .safetensors, .volp, .fold, .mind, .aero or .mldf",
                    out.display()
                )))
            }
        })
    }
}

/// Writes arrays in the format `extract` picks from the output's extension.
pub fn write_arrays(arrays: &[Array], out: &Path) -> Result<()> {
    write_arrays_as(arrays, out, OutFormat::from_path(out)?)
}

/// Writes arrays to `out` in `fmt`, atomically.
pub fn write_arrays_as(arrays: &[Array], out: &Path, fmt: OutFormat) -> Result<()> {
    write_container(arrays, out, fmt).map_err(|e| e.in_file(out))
}

fn write_container(arrays: &[Array], out: &Path, fmt: OutFormat) -> Result<()> {
    use std::io::Write;
    let mut f = AtomicFile::create(out)?;
    let has = |name: &str| arrays.iter().any(|a| a.name == name);
    let mut write_all = |b: &[u8]| f.file().write_all(b).map_err(|e| Error::io(out, e));
    match fmt {
        OutFormat::Npy => {
            let [a] = arrays else {
                return Err(Error::usage(format!(
                    "a .npy holds one array, this selection has {}: use --array NAME or .npz",
                    arrays.len()
                )));
            };
            let mut w = std::io::BufWriter::new(f.file());
            w.write_all(&npy::header(a)?).map_err(|e| Error::io(out, e))?;
            w.write_all(a.bytes()).map_err(|e| Error::io(out, e))?;
            w.flush().map_err(|e| Error::io(out, e))?;
        }
        // A filter-made WTXT carries the file's exact form: give it back.
        OutFormat::Npz if has(npz::SKELETON) => write_all(&npz::rebuild(arrays)?)?,
        OutFormat::Safetensors if has(safetensors::ST_HEADER) => {
            write_all(&safetensors::arrays_to_safetensors(arrays)?)?
        }
        OutFormat::Npz => {
            npz::write_with_keys(arrays, std::io::BufWriter::new(f.file()))?
                .into_inner()
                .map_err(|e| Error::io(out, e.into_error()))?;
        }
        OutFormat::Safetensors => {
            let mut w = std::io::BufWriter::new(f.file());
            safetensors::write(arrays, &mut w)?;
            w.flush().map_err(|e| Error::io(out, e))?;
        }
        OutFormat::Aero => {
            let mut w = std::io::BufWriter::new(f.file());
            aero::write_to(arrays, &mut w)?;
            w.flush().map_err(|e| Error::io(out, e))?;
        }
        OutFormat::Volp => write_all(&volp::write(arrays)?)?,
        OutFormat::Fold => write_all(&fold::write(arrays)?)?,
        OutFormat::Mldf => write_all(&mldf::write(arrays)?)?,
    }
    f.commit()
}
