//! Hugging Face checkpoint folders, as `save_pretrained` writes them: the
//! weights in `model.safetensors`, or sharded in `model-0000K-of-0000N.safetensors`
//! with `model.safetensors.index.json` mapping each tensor to its shard,
//! beside `config.json`, tokenizer files and the rest. A folder is read into
//! the tensors (under their own names) plus what writes the same folder
//! back byte for byte (FORMAT.md section 14, `__hf`): each shard's header
//! bytes, and every other file's bytes, covered by the snapshot's hashes
//! and signature like the weights.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::convert::common::Notes;
use crate::convert::names::OriginalNames;
use crate::error::{Error, Result};
use crate::model::{Array, ArrayData, Dtype};

/// The table: which files the folder had and where their bytes are.
pub const HF: &str = "__hf";
/// Every file of the folder but the shards, one after the other.
pub const HF_FILES: &str = "__hf_files";
/// Every shard's header (its first `8 + n` bytes), one after the other.
pub const HF_HEADERS: &str = "__hf_headers";

/// The index `save_pretrained` writes beside sharded weights.
pub const INDEX: &str = "model.safetensors.index.json";
/// The one file of unsharded weights.
pub const SINGLE: &str = "model.safetensors";

/// Most bytes the folder's other files may hold together: they are kept
/// in memory (a tokenizer is tens of MB), and `extract --hf` plans from
/// them before it decodes a tensor, within the outline's budget for
/// metadata arrays ([`crate::limits::MAX_METADATA`]).
const MAX_OTHER_FILES: u64 = 48 << 20;

/// What `__hf` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Folder {
    /// The files that are not shards, by path (relative, `/`-separated), in
    /// path order: their bytes in [`HF_FILES`] one after the other.
    pub files: Vec<Piece>,
    /// The shards, by path, in path order: their headers in [`HF_HEADERS`].
    pub shards: Vec<Piece>,
}

/// A file's place in one of the byte arrays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Piece {
    /// Its path in the folder.
    pub path: String,
    /// Where its bytes begin in the array.
    pub offset: u64,
    /// How many.
    pub len: u64,
}

/// True when `dir` is a folder of Hugging Face weights (it holds the index
/// or `model.safetensors`).
pub fn is_folder(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
        && [INDEX, SINGLE].iter().any(|f| std::fs::symlink_metadata(dir.join(f)).is_ok_and(|m| m.is_file()))
}

fn bad(path: impl AsRef<Path>, message: impl Into<String>) -> Error {
    Error::input(Default::default(), message.into()).in_file(path.as_ref())
}

/// What the index says: the shards it names (sorted), which shard holds
/// each tensor, and `total_size` when it gives one.
struct Index {
    shards: Vec<String>,
    weight_map: HashMap<String, String>,
    total: Option<u64>,
}

fn read_index(dir: &Path) -> Result<Index> {
    let path = dir.join(INDEX);
    let text = crate::fs::read_small_file(&path, crate::limits::MAX_METADATA, crate::fs::Links::Refuse)?
        .ok_or_else(|| bad(&path, "missing"))?;
    let v: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(&path, format!("not JSON: {e}")))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad(&path, "expected a \"weight_map\" object of tensor names to shard files"))?;
    let mut weight_map = HashMap::with_capacity(map.len());
    let mut shards: Vec<String> = Vec::new();
    for (tensor, shard) in map {
        let shard = shard
            .as_str()
            .filter(|s| is_plain_name(s))
            .ok_or_else(|| bad(&path, format!("tensor {tensor}: expected the file name of a shard in this folder")))?;
        if !shards.iter().any(|s| s == shard) {
            shards.push(shard.to_string());
        }
        weight_map.insert(tensor.clone(), shard.to_string());
    }
    shards.sort();
    let total = v.get("metadata").and_then(|m| m.get("total_size")).and_then(|t| t.as_u64());
    Ok(Index { shards, weight_map, total })
}

/// A file name with no folder in it (what an index may name).
fn is_plain_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains('/') && !s.contains('\\')
}

/// Reads the folder `dir`: its tensors (original names) and the metadata
/// arrays that give the folder back. Every shard is checked against the
/// index: a shard it does not name, one it names that is missing, a tensor
/// in two shards or in a shard the index does not say, a `total_size` that
/// is not the tensors' bytes: each refused, naming the file and tensor.
pub fn read_folder(dir: &Path, notes: &mut Notes) -> Result<Vec<Array>> {
    let all = crate::fs::list_files(dir, &[])?;
    let hidden = |p: &str| p.split('/').any(|c| c.starts_with('.'));
    let (skipped, files): (Vec<String>, Vec<String>) = all.into_iter().partition(|p| hidden(p));
    if !skipped.is_empty() {
        notes.push(format!("{}: left out hidden files: {}", dir.display(), skipped.join(", ")));
    }
    let has = |name: &str| files.iter().any(|f| f == name);
    let (shards, weight_map, total) = match (has(INDEX), has(SINGLE)) {
        (true, true) => return Err(bad(dir, format!("holds both {SINGLE} and {INDEX}: which are the weights?"))),
        (true, false) => {
            let i = read_index(dir)?;
            (i.shards, Some(i.weight_map), i.total)
        }
        (false, true) => (vec![SINGLE.to_string()], None, None),
        (false, false) => return Err(bad(dir, format!("neither {INDEX} nor {SINGLE}: not a Hugging Face folder"))),
    };
    for s in &shards {
        if !has(s) {
            return Err(bad(dir.join(s), format!("missing: {INDEX} names it")));
        }
    }
    if let Some(extra) = files.iter().find(|f| f.ends_with(".safetensors") && !shards.contains(f)) {
        return Err(bad(dir.join(extra), format!("a shard {INDEX} does not name")));
    }
    let mut tensors: Vec<Array> = Vec::new();
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut headers = Vec::new();
    let mut folder = Folder::default();
    for s in &shards {
        let path = dir.join(s);
        let src = ArrayData::from_map(crate::convert::common::map_file(&path)?);
        let got = crate::convert::safetensors::read(&src).map_err(|e| e.in_file(&path))?;
        let bytes = src.as_bytes();
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("read checked the header")) as usize;
        folder.shards.push(Piece { path: s.clone(), offset: headers.len() as u64, len: (8 + n) as u64 });
        headers.extend_from_slice(&bytes[..8 + n]);
        for a in got {
            if let Some(other) = seen.insert(a.name.clone(), s.clone()) {
                return Err(bad(&path, format!("tensor {} is also in {other}", a.name)));
            }
            if let Some(map) = &weight_map {
                match map.get(&a.name) {
                    Some(listed) if listed == s => {}
                    Some(listed) => return Err(bad(&path, format!("tensor {}: {INDEX} puts it in {listed}", a.name))),
                    None => return Err(bad(&path, format!("tensor {}: {INDEX} does not list it", a.name))),
                }
            }
            tensors.push(a);
        }
    }
    if let Some(map) = &weight_map {
        let mut missing: Vec<&String> = map.keys().filter(|t| !seen.contains_key(*t)).collect();
        missing.sort();
        if let Some(t) = missing.first() {
            return Err(bad(dir.join(&map[*t]), format!("tensor {t}: {INDEX} puts it here, the shard lacks it")));
        }
    }
    let bytes: u64 = tensors.iter().map(|a| a.bytes().len() as u64).sum();
    if let Some(t) = total.filter(|&t| t != bytes) {
        return Err(bad(dir.join(INDEX), format!("total_size {t}, but the shards' tensors hold {bytes} bytes")));
    }
    let mut others = Vec::new();
    for f in files.iter().filter(|f| !shards.contains(f)) {
        let path = dir.join(f);
        let room = MAX_OTHER_FILES - others.len() as u64;
        if std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?.len() > room {
            return Err(bad(
                &path,
                format!("the folder's files other than shards hold more than {MAX_OTHER_FILES} bytes"),
            ));
        }
        let b = crate::fs::read_small_file(&path, room, crate::fs::Links::Refuse)?
            .ok_or_else(|| bad(&path, "vanished while read"))?;
        folder.files.push(Piece { path: f.clone(), offset: others.len() as u64, len: b.len() as u64 });
        others.extend_from_slice(&b);
    }
    tensors.push(crate::convert::common::meta_array(HF, &serde_json::to_value(&folder).expect("a table serializes"))?);
    tensors.push(Array::new(HF_FILES, Dtype::U8, vec![others.len() as u64], others.into())?);
    tensors.push(Array::new(HF_HEADERS, Dtype::U8, vec![headers.len() as u64], headers.into())?);
    Ok(tensors)
}

/// The bytes of `p` in `b`.
fn slice<'a>(b: &'a [u8], p: &Piece) -> Result<&'a [u8]> {
    let end = p.offset.checked_add(p.len).filter(|&e| e <= b.len() as u64);
    end.map(|e| &b[p.offset as usize..e as usize])
        .ok_or_else(|| Error::input(Default::default(), format!("{HF}: {} lies past its array", p.path)))
}

/// The folder table among `arrays`, if they came from a folder.
pub fn folder_of(arrays: &[Array]) -> Result<Option<Folder>> {
    let Some(v) = crate::convert::common::meta_json(arrays, HF)? else { return Ok(None) };
    serde_json::from_value(v).map(Some).map_err(|e| Error::input(Default::default(), format!("{HF}: {e}")))
}

/// Where each shard's tensors go: for each shard, its path, header, and
/// its tensors in file order as (WTXT name, offset in the file, bytes).
struct Shards<'a> {
    folder: Folder,
    files: &'a [u8],
    headers: &'a [u8],
    shards: Vec<Vec<(String, u64, u64)>>,
}

impl<'a> Shards<'a> {
    /// Plans the folder from the metadata arrays among `metas`; `tensor`
    /// gives an original name's (WTXT name, length in bytes). Every tensor
    /// a header lists must be there, as long as its offsets say, right
    /// after the one before; every tensor must be in a shard.
    fn plan(metas: &'a [Array], tensors: &[(String, u64)], out: &Path) -> Result<Shards<'a>> {
        let folder = folder_of(metas)?.ok_or_else(|| {
            Error::usage(format!(
                "{}: the snapshot was not made from a Hugging Face folder (it has no {HF})",
                out.display()
            ))
        })?;
        let part = |name: &str| -> Result<&'a [u8]> {
            metas
                .iter()
                .find(|a| a.name == name)
                .map(|a| a.bytes())
                .ok_or_else(|| Error::input(Default::default(), format!("{HF} without {name}")))
        };
        let (files, headers) = (part(HF_FILES)?, part(HF_HEADERS)?);
        let mut paths = std::collections::HashSet::new();
        for p in folder.files.iter().chain(&folder.shards) {
            if p.path.split('/').any(|c| !is_plain_name(c) || c.starts_with('.')) {
                return Err(Error::input(
                    Default::default(),
                    format!("{HF}: {:?} is not a path inside a folder", p.path),
                ));
            }
            if !paths.insert(p.path.as_str()) {
                return Err(Error::input(Default::default(), format!("{HF}: {:?} is listed twice", p.path)));
            }
        }
        // A path that is also another's folder (`a` and `a/b`) cannot be written.
        for p in &paths {
            let mut at = 0;
            while let Some(i) = p[at..].find('/') {
                if paths.contains(&p[..at + i]) {
                    return Err(Error::input(
                        Default::default(),
                        format!("{HF}: {:?} is both a file and the folder of {p:?}", &p[..at + i]),
                    ));
                }
                at += i + 1;
            }
        }
        let kept = OriginalNames::of(metas)?.unwrap_or_default();
        let by_name: HashMap<&str, (&str, u64)> =
            tensors.iter().map(|(n, len)| (kept.original(n), (n.as_str(), *len))).collect();
        let mut placed = std::collections::HashSet::new();
        let mut shards = Vec::with_capacity(folder.shards.len());
        for p in &folder.shards {
            let header = slice(headers, p)?;
            let (_, order) = crate::convert::safetensors::layout(header)
                .map_err(|e| Error::input(Default::default(), format!("{HF}: {}: {}", p.path, e.message())))?;
            let mut at = 0u64;
            let mut list = Vec::with_capacity(order.len());
            for (start, end, name) in order {
                let bad = |why: &str| Error::input(Default::default(), format!("{}: tensor {name}: {why}", p.path));
                let &(wtxt_name, len) = by_name.get(name.as_str()).ok_or_else(|| bad("not in the snapshot"))?;
                if start != at || len != end - start {
                    return Err(bad("its offsets do not match its bytes"));
                }
                at = end;
                if !placed.insert(wtxt_name) {
                    return Err(bad("listed twice (in this shard's header or another's)"));
                }
                list.push((wtxt_name.to_string(), header.len() as u64 + start, len));
            }
            shards.push(list);
        }
        if placed.len() != tensors.len() {
            return Err(Error::input(
                Default::default(),
                format!("{} tensors are in no shard of {HF}", tensors.len() - placed.len()),
            ));
        }
        Ok(Shards { folder, files, headers, shards })
    }

    /// Writes the files that are not shards into `dir`, and each shard's
    /// header, sized for its tensors; returns the shard files, open.
    fn start(&self, dir: &Path) -> Result<Vec<(std::path::PathBuf, std::fs::File)>> {
        // A file's place in the new folder, its folders made.
        let place = |p: &Piece| -> Result<std::path::PathBuf> {
            let dest = dir.join(&p.path);
            if let Some(d) = dest.parent() {
                std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
            }
            Ok(dest)
        };
        for p in &self.folder.files {
            crate::fs::write_file(&place(p)?, slice(self.files, p)?, 0o644)?;
        }
        let mut out = Vec::with_capacity(self.shards.len());
        for (p, list) in self.folder.shards.iter().zip(&self.shards) {
            let dest = place(p)?;
            let header = slice(self.headers, p)?;
            let f = std::fs::File::create(&dest).map_err(|e| Error::io(&dest, e))?;
            let end = list.last().map_or(header.len() as u64, |&(_, at, len)| at + len);
            use std::os::unix::fs::FileExt;
            f.write_all_at(header, 0).and_then(|()| f.set_len(end)).map_err(|e| Error::io(&dest, e))?;
            out.push((dest, f));
        }
        Ok(out)
    }
}

/// `wtxt extract --hf`: the folder the snapshot at `path` was made from,
/// verified (every check under `opts`) as it is written into `out`, a new
/// folder that appears whole or not at all; every file byte for byte. One
/// pass: each tensor is decoded straight to its place in its shard, so the
/// heap holds only the folder's small files. Returns the number of shards.
pub fn extract(path: &Path, opts: &crate::format::verify::VerifyOptions, out: &Path) -> Result<usize> {
    // Opened once: the outline, the strict read and any error come from this file.
    let input = crate::fs::open_input_file(path)?;
    let meta = input.metadata().map_err(|e| Error::io(path, e))?;
    let outlined = meta
        .is_file()
        .then(|| {
            crate::store::outline::outline_of(
                &input,
                path,
                &crate::model::is_metadata_name,
                crate::limits::MAX_METADATA,
            )
        })
        .flatten()
        .ok_or_else(|| {
            // Not canonical, damaged or not a WTXT: the strict reader says which.
            match crate::store::WtxtIn::from_file(&input, meta.len(), path, None).and_then(|mut i| {
                crate::format::Load { keep: crate::format::Keep::Metadata, ..Default::default() }
                    .run(i.text(), i.len, opts)
                    .map_err(|e| i.blame(e))
            }) {
                Err(e) => e,
                Ok(_) => {
                    Error::input(Default::default(), "its metadata arrays are too large to plan from").in_file(path)
                }
            }
        })?;
    let metas: Vec<Array> = outlined
        .iter()
        .filter_map(|o| {
            o.data.as_ref().map(|d| Array::new(o.arr.name.clone(), o.arr.dtype, o.arr.shape.clone(), d.clone().into()))
        })
        .collect::<Result<_>>()?;
    let tensors: Vec<(String, u64)> =
        outlined.iter().filter(|o| o.data.is_none()).map(|o| (o.arr.name.clone(), o.arr.bytes)).collect();
    let plan = Shards::plan(&metas, &tensors, out).map_err(|e| e.in_file(path))?;
    let dir = crate::fs::NewFolder::create(out)?;
    let files = plan.start(dir.path())?;
    let place: HashMap<String, (usize, u64)> = plan
        .shards
        .iter()
        .enumerate()
        .flat_map(|(k, list)| list.iter().map(move |(n, at, _)| (n.clone(), (k, *at))))
        .collect();
    let targets: Vec<(&Path, &std::fs::File)> = files.iter().map(|(p, f)| (p.as_path(), f)).collect();
    crate::convert::direct::decode_into(&input, path, opts, &outlined, &targets, &place)?;
    dir.commit()?;
    Ok(plan.shards.len())
}

/// Like [`extract`], from arrays already loaded and verified (an
/// age-encrypted snapshot, which cannot be outlined): each shard written
/// from its tensors' bytes.
pub fn write_folder(arrays: &[Array], out: &Path) -> Result<usize> {
    let metas: Vec<Array> = arrays.iter().filter(|a| a.is_metadata()).cloned().collect();
    let tensors: Vec<(String, u64)> =
        arrays.iter().filter(|a| !a.is_metadata()).map(|a| (a.name.clone(), a.bytes().len() as u64)).collect();
    let plan = Shards::plan(&metas, &tensors, out)?;
    let dir = crate::fs::NewFolder::create(out)?;
    let files = plan.start(dir.path())?;
    let by_name: HashMap<&str, &Array> = arrays.iter().map(|a| (a.name.as_str(), a)).collect();
    for ((dest, f), list) in files.iter().zip(&plan.shards) {
        use std::os::unix::fs::FileExt;
        for (name, at, _) in list {
            let mut pos = *at;
            by_name[name.as_str()].data.each_window(&mut |b| {
                f.write_all_at(b, pos).map_err(|e| Error::io(dest, e))?;
                pos += b.len() as u64;
                Ok(())
            })?;
        }
    }
    dir.commit()?;
    Ok(plan.shards.len())
}
