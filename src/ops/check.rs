//! `wtxt verify`, `inspect` and `extract`: reading a WTXT and saying what it holds.

use crate::convert::{write_arrays, Notes};
use crate::crypto::armor::Unseal;
use crate::crypto::ec::EcPublicKey;
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::TrustedKeys;
use crate::error::{check_at, Error, Result};
use crate::format::read::{read, ArrayStart, Visitor};
use crate::format::syntax::{ArrLine, Audit, ChLine, DigestForm, Root, Wsum};
use crate::format::verify::{Problem, ProblemKind, Report, VerifyOptions};
use crate::format::Loaded;
use crate::model::Array;
use crate::progress::Progress;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::inputs::read_header_file;
use crate::store::input::WtxtIn;

/// Options of `wtxt verify` as files.
#[derive(Default)]
pub struct VerifyFiles {
    /// The WSUM that finalizes a WTXT-S.
    pub wsum: Option<PathBuf>,
    /// Every array must authenticate with this key.
    pub hmac_key: Option<HmacKey>,
    /// Keys whose signatures count.
    pub trusted: Option<TrustedKeys>,
    /// Fail unless a trusted key signed.
    pub require_signature: bool,
    /// The previous generation: the chain must follow it.
    pub prev: Option<PathBuf>,
    /// With an HMAC key, accept arrays whose hmac is all zeros.
    pub allow_unauthenticated: bool,
    /// With an HMAC key, accept a file without the keyed tag that binds it.
    pub allow_unbound: bool,
    /// Decrypts an age-encrypted input.
    pub unseal: Option<Unseal>,
    /// Also check the OMS signature with this key (at this path, else
    /// `model.sig` beside the snapshot).
    pub oms: Option<(EcPublicKey, Option<PathBuf>)>,
}

/// `wtxt verify`: the report, or an error when a file cannot be read at all.
pub fn verify_file(path: &Path, o: &VerifyFiles, progress: &Progress) -> Result<Report> {
    let wsum = match &o.wsum {
        Some(p) => {
            let b = crate::fs::read_small_file(p, 4096, crate::fs::Links::Follow)?
                .ok_or_else(|| Error::io(p, std::io::Error::from(std::io::ErrorKind::NotFound)))?;
            Some(Wsum::parse_file(&b).map_err(|m| check_at(1, m).in_file(p))?)
        }
        None => None,
    };
    let prev = o.prev.as_deref().map(read_header_file).transpose()?;
    let opts = VerifyOptions {
        hmac_key: o.hmac_key.as_ref(),
        trusted: o.trusted.as_ref(),
        require_signature: o.require_signature,
        wsum: wsum.as_ref(),
        prev: prev.as_ref(),
        allow_unauthenticated: o.allow_unauthenticated,
        allow_unbound: o.allow_unbound,
        refuse_untrusted: false,
        carried: None,
    };
    if o.oms.is_some() && o.unseal.is_some() {
        return Err(Error::usage("--oms-pubkey checks the files on disk: give the plaintext snapshot, not -i"));
    }
    // A split snapshot's faulty parts are reported with the rest, first.
    let mut report = WtxtIn::open_lenient(path, o.unseal.as_ref())?.verify(&opts, progress)?;
    if o.unseal.is_none() {
        report.name_originals(&crate::convert::names::originals_of(path));
    }
    if let Some((key, sig)) = &o.oms {
        // Files that do not match their head already failed above; the
        // signature is then reported invalid beside them.
        let verdict = match crate::oms::SnapshotFiles::read(path) {
            Ok(files) => crate::oms::check_snapshot(&files, sig.as_deref(), key)?,
            Err(e) => crate::oms::Verdict::Invalid(e.to_string()),
        };
        report.oms = Some(verdict.as_str());
        let why = match verdict {
            crate::oms::Verdict::Valid => None,
            crate::oms::Verdict::Invalid(why) => Some(why),
            crate::oms::Verdict::Absent => Some("no OMS signature (expected one: --oms-pubkey)".into()),
        };
        if let Some(why) = why {
            report.ok = false;
            let file = sig.clone().unwrap_or_else(|| crate::oms::signature_path(path)).display().to_string();
            report.errors.push(Problem {
                file: Some(file),
                ..Problem::at(ProblemKind::Oms, 0, format!("OMS signature: {why}"))
            });
        }
    }
    Ok(report)
}

/// One array as `inspect` shows it.
#[derive(Serialize, Clone, Debug)]
pub struct ArrayInfo {
    /// WTXT name.
    pub name: String,
    /// Element type.
    pub dtype: String,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Raw bytes.
    pub bytes: u64,
    /// Chunks.
    pub chunks: u64,
    /// Rows per chunk (rank >= 2).
    pub rows_per_chunk: Option<u64>,
    /// SHA-256 of the raw bytes, hex.
    pub sha256: String,
    /// True when the array carries an HMAC.
    pub hmac: bool,
    /// Line of its `arr` line.
    pub line: u64,
    /// The input's own name, when it had to be mapped (kept in `__names`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
}

/// What `inspect` shows.
#[derive(Serialize, Clone, Debug)]
pub struct Inspection {
    /// `schema` of `meta`.
    pub schema: String,
    /// Generation.
    pub gen: u64,
    /// Timestamp.
    pub ts: String,
    /// `build` token.
    pub build: String,
    /// `host` token.
    pub host: String,
    /// `cuda` token.
    pub cuda: String,
    /// Capabilities (`cap ext=`).
    pub cap: Vec<String>,
    /// The digest form: `sha256` (WTXT 1.1) or `tree` (`digest_tree`).
    pub digest: &'static str,
    /// True for a WTXT-S.
    pub streaming: bool,
    /// `sha256_all`, hex.
    pub sha256_all: Option<String>,
    /// `merkle_prev`, hex.
    pub merkle_prev: Option<String>,
    /// `merkle_this`, hex.
    pub merkle_this: Option<String>,
    /// `fastxor`, hex.
    pub fastxor: Option<String>,
    /// Key id of the signature, hex.
    pub keyid: Option<String>,
    /// Every array.
    pub arrays: Vec<ArrayInfo>,
    /// The `audit` line's pairs.
    pub audit: Vec<(String, String)>,
    /// Raw bytes of every array.
    pub total_bytes: u64,
    /// A safetensors input's `__metadata__`, as `__names` keeps it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
}

struct InspectVisitor {
    arrays: Vec<ArrayInfo>,
    audit: Vec<(String, String)>,
    problems: Vec<(u64, String)>,
    /// The decoded `__names`, when it is no larger than [`NAMES_SHOWN`].
    names: Vec<u8>,
    in_names: bool,
}

/// The largest `__names` whose original names `inspect` shows (a million
/// mapped names of 60 bytes; a larger one is skipped, not held).
const NAMES_SHOWN: u64 = 64 << 20;

impl Visitor for InspectVisitor {
    fn array(&mut self, a: &ArrayStart) -> Result<()> {
        self.arrays.push(ArrayInfo {
            name: a.arr.name.clone(),
            dtype: a.arr.dtype.to_string(),
            shape: a.arr.shape.clone(),
            bytes: a.arr.bytes,
            chunks: a.layout.chunk_count(),
            rows_per_chunk: a.layout.idx.map(|i| i.rows_per_chunk),
            sha256: hex::encode(a.arr.sha256),
            hmac: !a.arr.hmac_is_zero(),
            line: a.line,
            original: None,
        });
        self.in_names = a.arr.name == crate::convert::names::NAMES && a.arr.bytes <= NAMES_SHOWN;
        Ok(())
    }
    fn chunk(&mut self, _line: u64, _ch: &ChLine) {}
    fn data(&mut self, buf: Vec<u8>) {
        if self.in_names {
            self.names.extend_from_slice(&buf);
        }
    }
    fn problem(&mut self, line: u64, message: String) {
        self.problems.push((line, message));
    }
    fn audit(&mut self, _line: u64, a: &Audit) {
        self.audit = a.pairs.clone();
    }
}

/// `wtxt inspect`: header and array table. The structure, parity and CRC
/// are checked on the way (digests are `verify`'s work).
pub fn inspect(path: &Path, unseal: Option<&Unseal>) -> Result<Inspection> {
    let mut input = WtxtIn::open(path, unseal)?;
    inspect_reader(input.text()).map_err(|e| input.blame(e))
}

/// [`inspect`] of a WTXT read from `input` (a Git blob, say).
pub fn inspect_reader<R: std::io::Read>(input: R) -> Result<Inspection> {
    let mut v = InspectVisitor {
        arrays: Vec::new(),
        audit: Vec::new(),
        problems: Vec::new(),
        names: Vec::new(),
        in_names: false,
    };
    let h = read(input, &mut v)?;
    if let Some((line, m)) = v.problems.first() {
        return Err(check_at(*line, m.clone()));
    }
    // Damaged or malformed `__names` shows no names here; `extract` and
    // `verify` say what is wrong with it.
    let kept: crate::convert::names::OriginalNames = serde_json::from_slice(&v.names).unwrap_or_default();
    for a in &mut v.arrays {
        a.original = kept.names.get(&a.name).cloned();
    }
    let (sha, prev, this, fx) = match &h.root {
        Root::Final { sha256_all, merkle_prev, merkle_this, fastxor } => (
            Some(hex::encode(sha256_all)),
            Some(hex::encode(merkle_prev)),
            Some(hex::encode(merkle_this)),
            Some(format!("{fastxor:016x}")),
        ),
        Root::Pending => (None, None, None, None),
    };
    Ok(Inspection {
        schema: h.meta.schema.clone(),
        gen: h.meta.gen,
        ts: h.meta.ts.as_str().to_string(),
        build: h.meta.build.clone(),
        host: h.meta.host.clone(),
        cuda: h.meta.cuda.clone(),
        cap: h.cap.items.clone(),
        digest: h.digest().name(),
        streaming: h.root == Root::Pending,
        sha256_all: sha,
        merkle_prev: prev,
        merkle_this: this,
        fastxor: fx,
        keyid: h.sign.as_ref().map(|s| hex::encode(s.keyid)),
        total_bytes: v.arrays.iter().map(|a| a.bytes).sum(),
        arrays: v.arrays,
        audit: v.audit,
        metadata: kept.metadata,
    })
}

/// `wtxt extract --hf`: the Hugging Face folder a snapshot was made from,
/// written into `out` (a new folder, whole or not at all) byte for byte.
/// Returns the number of shards.
pub fn extract_folder(path: &Path, out: &Path, opts: &VerifyOptions, unseal: Option<&Unseal>) -> Result<usize> {
    if unseal.is_none() {
        return crate::convert::hf::extract(path, opts, out);
    }
    let mut input = WtxtIn::open(path, unseal)?;
    let loaded = crate::format::load(input.text(), input.len, opts).map_err(|e| input.blame(e))?;
    crate::convert::hf::write_folder(&loaded.arrays, out)
}

/// `wtxt extract`: verifies the file under `opts`, then writes its arrays (or one).
///
/// The output gets the inputs' own names (and a safetensors file's
/// `__metadata__`) back where the snapshot kept them; `--array` takes the
/// WTXT name or the original one. Metadata arrays the output format has no
/// place for are left out, and said so in `notes`.
pub fn extract(
    path: &Path,
    out: &Path,
    array: &[String],
    opts: &VerifyOptions,
    unseal: Option<&Unseal>,
    notes: &mut Notes,
) -> Result<usize> {
    let to = crate::convert::formats::by_extension(out)?;
    // The same choice for the decoded arrays and, first, for the stand-ins
    // the direct path plans with: it depends on names and metadata only.
    let choose = |all: Vec<Array>| chosen(path, array, to, all);
    // Some arrays: a load that keeps only them (in the tree form it decodes
    // only their chunks, and opens only the parts that hold them; in 1.1 it
    // still checks every byte).
    if let (false, None, Some(rows)) = (array.is_empty(), unseal, rows_of_arrays(path, array)?) {
        let mut input = WtxtIn::open_for_arrays(path, &|n| crate::format::keeps_array(&rows, n))?;
        let load = crate::format::Load { keep: crate::format::Keep::InMemory, rows: Some(&rows), ..Default::default() };
        let loaded = load.run_lines(input.lines(), input.len, opts).map_err(|e| input.blame_load(e))?;
        let (arrays, (count, dropped)) = choose(loaded.arrays)?;
        write_arrays(&arrays, out)?;
        note_dropped(&dropped, to, notes);
        return Ok(count);
    }
    let direct = match unseal {
        None => crate::convert::direct::write_direct(path, None, opts, to, out, &choose)?,
        Some(_) => None,
    };
    let (count, dropped) = match direct {
        Some((chosen, _)) => chosen,
        None => {
            let mut input = WtxtIn::open(path, unseal)?;
            let loaded = crate::format::load(input.text(), input.len, opts).map_err(|e| input.blame(e))?;
            let (arrays, chosen) = choose(loaded.arrays)?;
            write_arrays(&arrays, out)?;
            chosen
        }
    };
    note_dropped(&dropped, to, notes);
    Ok(count)
}

/// What `extract` writes of the verified arrays `all` of `path`: those
/// `array` names (WTXT or original names; all when empty) and the metadata
/// an output of format `to` has a place for; with how many arrays that is
/// and the metadata left out.
fn chosen(
    path: &Path,
    array: &[String],
    to: &dyn crate::convert::container::Container,
    all: Vec<Array>,
) -> crate::convert::direct::Chosen<(usize, Vec<String>)> {
    use crate::convert::names::{OriginalNames, NAMES};
    let kept = OriginalNames::of(&all).map_err(|e| e.in_file(path))?.unwrap_or_default();
    let arrays: Vec<Array> = if array.is_empty() {
        all
    } else {
        let mut picked = Vec::with_capacity(array.len() + 1);
        for n in array {
            let want = kept.wtxt_name(n).map_err(|e| e.in_file(path))?;
            let a = all.iter().find(|a| a.name == *n || a.name == want).cloned();
            let a = a.ok_or_else(|| Error::usage(format!("{}: no array named {n}", path.display())))?;
            if !picked.iter().any(|p: &Array| p.name == a.name) {
                picked.push(a);
            }
        }
        picked.extend(all.into_iter().filter(|x| x.name == NAMES));
        picked
    };
    let (arrays, dropped) = crate::convert::formats::foreign_metadata(arrays, to)?;
    let count = arrays.iter().filter(|a| !a.is_metadata()).count();
    Ok((arrays, (count, dropped)))
}

/// `wtxt extract PATH --rev REV [-C DIR]`: [`extract`] of the snapshot at
/// PATH in revision REV of the repository around `dir`, read from that
/// commit's objects ([`load_at`]).
pub fn extract_at(
    dir: &Path,
    rev: &str,
    path: &Path,
    out: &Path,
    array: &[String],
    opts: &VerifyOptions,
    notes: &mut Notes,
) -> Result<usize> {
    let to = crate::convert::formats::by_extension(out)?;
    let loaded = load_at(dir, rev, path, array, opts)?;
    let shown = PathBuf::from(format!("{rev}:{}", path.display()));
    let (arrays, (count, dropped)) = chosen(&shown, array, to, loaded.arrays)?;
    write_arrays(&arrays, out)?;
    note_dropped(&dropped, to, notes);
    Ok(count)
}

/// The snapshot at PATH in revision REV of the repository around `dir`,
/// read from that commit's objects and verified under `opts`: the arrays
/// `array` names (WTXT or original names) and the metadata arrays, or,
/// `array` empty, every array. Asked for some arrays, a split snapshot of
/// the tree form is read from the parts that hold them alone (in a
/// blobless clone or an LFS repository only those are fetched, in one
/// round trip), and what it returns is proven by the root as a full read
/// proves it; any other snapshot is read whole (a split one with every
/// part fetched in one round trip), and may hold more arrays than asked.
pub fn load_at(dir: &Path, rev: &str, path: &Path, array: &[String], opts: &VerifyOptions) -> Result<Loaded> {
    use crate::format::split::{self, Opened};
    use crate::format::{Keep, Load};
    let repo = git2::Repository::discover(dir).map_err(crate::odb::git_err)?;
    let (tree, _, blob) = crate::git::history::version_at(&repo, rev, path)?;
    let shown = PathBuf::from(format!("{rev}:{}", path.display()));
    let len = crate::odb::blob::size(&repo, blob)?;
    let text = crate::odb::blob::reader(&repo, blob).map_err(|e| e.in_file(&shown))?;
    let whole = |mut input: WtxtIn| -> Result<Loaded> {
        let loaded = Load { keep: Keep::InMemory, ..Default::default() }.run(input.text(), input.len, opts);
        loaded.map_err(|e| input.blame(e))
    };
    let loaded = match split::open(text).map_err(|e| e.in_file(&shown))? {
        Opened::Single(r) => whole(WtxtIn::single(r, len, &shown)),
        Opened::Split(head) if array.is_empty() || !head.header().is_ok_and(|h| h.digest() == DigestForm::Tree) => {
            crate::git::history::fetch_version(&repo, &tree, path, &head)?;
            let parts = Box::new(crate::git::parts::BlobParts::of_tree(&repo, &tree, path, &head));
            whole(WtxtIn::joined(head, parts, &shown, len, crate::store::PartReading::Lenient))
        }
        Opened::Split(head) => {
            // The arrays asked and the metadata, from the parts that hold them.
            let load = |rows: &BTreeMap<String, (u64, u64)>| -> Result<Loaded> {
                let keep = |n: &str| crate::format::keeps_array(rows, n);
                crate::git::history::fetch_parts(&repo, &tree, path, &head, &split::parts_for(&head, &keep))?;
                let parts = crate::git::parts::BlobParts::of_tree(&repo, &tree, path, &head).fetching();
                let mut input = WtxtIn::sparse(head.clone(), Box::new(parts), &shown, len, &keep)?;
                let load = Load { keep: Keep::InMemory, rows: Some(rows), ..Default::default() };
                load.run_lines(input.lines(), input.len, opts).map_err(|e| input.blame(e))
            };
            // The original names first (metadata arrays only), then the rows
            // of the arrays they name, from the head's `arr` lines.
            let names = crate::convert::OriginalNames::of(&load(&BTreeMap::new())?.arrays)?.unwrap_or_default();
            let mut rows = BTreeMap::new();
            for a in head.arrs.iter().flatten().filter_map(|a| ArrLine::parse(a).ok()) {
                if array.iter().any(|n| *n == a.name || n.as_str() == names.original(&a.name)) {
                    rows.insert(a.name.clone(), (0, a.shape.first().copied().unwrap_or(1)));
                }
            }
            load(&rows)
        }
    };
    loaded
}

/// [`load_at`] of the snapshot at `path`, a file in a Git work tree (which
/// need not hold it now): its repository and its path there found from
/// `path`, as [`crate::ops::export_path`] finds them.
pub fn load_path_at(path: &Path, rev: &str, array: &[String], opts: &VerifyOptions) -> Result<Loaded> {
    let (_, work, rel, _) = crate::git::commit::in_work_tree(path)?;
    load_at(&work, rev, &rel, array, opts)
}

/// Says which metadata arrays an output of format `to` had no place for.
fn note_dropped(dropped: &[String], to: &dyn crate::convert::container::Container, notes: &mut Notes) {
    if dropped.iter().any(|d| d != crate::convert::names::NAMES) {
        notes.push(format!("left out metadata a .{} has no place for: {}", to.extensions()[0], dropped.join(", ")));
    }
}

/// What a snapshot holds, from its `arr` lines and metadata arrays alone,
/// nothing verified: for planning a load whose every byte is verified after.
pub struct NamedOutline {
    /// The metadata arrays, decoded.
    pub metas: Vec<Array>,
    /// The original names they give.
    pub names: crate::convert::OriginalNames,
    /// (stored name, dtype, shape) of every other array, in file order.
    pub tensors: Vec<(String, crate::model::Dtype, Vec<u64>)>,
}

/// The [`NamedOutline`] of the WTXT at `path`; `None` when the text does not
/// outline cleanly (the load then says why).
pub fn named_outline(path: &Path) -> Result<Option<NamedOutline>> {
    use crate::model::{is_metadata_name, ArrayData};
    let Some(all) = crate::store::outline(path, &is_metadata_name, crate::limits::MAX_METADATA) else {
        return Ok(None);
    };
    let (metas, tensors): (Vec<_>, Vec<_>) = all.into_iter().partition(|o| is_metadata_name(&o.arr.name));
    let metas = metas
        .into_iter()
        .map(|o| Array::new(o.arr.name, o.arr.dtype, o.arr.shape, ArrayData::from(o.data.unwrap_or_default())))
        .collect::<Result<Vec<_>>>()?;
    let names = crate::convert::OriginalNames::of(&metas)?.unwrap_or_default();
    let tensors = tensors.into_iter().map(|o| (o.arr.name, o.arr.dtype, o.arr.shape)).collect();
    Ok(Some(NamedOutline { metas, names, tensors }))
}

/// The rows that hold the arrays `names` (WTXT or original names) whole,
/// by stored name, from the snapshot's outline: what
/// [`crate::format::Load::rows`] takes to keep only them. Nothing here is
/// verified: the load checks what it keeps against the verified `arr`
/// lines and names, and a name the outline lacks is one the load does not
/// keep either. `None` when the text does not outline cleanly.
pub fn rows_of_arrays(path: &Path, names: &[String]) -> Result<Option<std::collections::BTreeMap<String, (u64, u64)>>> {
    let Some(o) = named_outline(path)? else { return Ok(None) };
    let rows = o
        .tensors
        .into_iter()
        .filter(|(stored, ..)| names.iter().any(|n| n == stored || n == o.names.original(stored)))
        .map(|(stored, _, shape)| (stored, (0, shape.first().copied().unwrap_or(1))))
        .collect();
    Ok(Some(rows))
}
