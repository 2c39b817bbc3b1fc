//! MLDF, the format of the header-design seed: PNG-style magic, a 64-byte
//! header, 208-byte field descriptors, a per-sample metadata table, a data
//! region and an allocation table of (pointer, size) pairs.
//!
//! The seed leaves the per-type records and arguments open; docs/FORMAT.md
//! ("MLDF") fixes them. Each field becomes WTXT arrays: INT -> i64 `[n]`,
//! FLOAT -> f64 `[n]`, NDARRAY -> `[n, *shape]` of its dtype, BYTES and JSON
//! -> u8 (every sample's bytes, in order) plus u64 `NAME__sizes` `[n]`. The
//! header and descriptors are kept in the JSON array `__mldf`.
#![forbid(unsafe_code)]

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::buffer::Spill;
use crate::convert::bytes::{align, each_zero_piece, le_u16, le_u32, le_u64};
use crate::convert::common::{meta_array, meta_typed, Notes};
use crate::convert::container::{drop_default_meta, Container, WriteSeek};
use crate::convert::names::{self, OriginalNames};
use crate::error::{input_at, reason, Error, Reason, Result};
use crate::model::{assign_names, Array, ArrayData, Dtype};

mod read;
mod write;

pub use read::*;
pub use write::*;

/// The magic bytes: the seed's literal `b'\x89MLDF\r\n\x1a\n'`, which is 9
/// bytes (its comment says 8; its code writes and reads all 9).
pub const MAGIC: &[u8] = b"\x89MLDF\r\n\x1a\n";
/// Where the header starts: right after the magic.
const H: usize = MAGIC.len();
/// Name of the metadata array.
pub const META: &str = "__mldf";
const HEADER: usize = 64;

/// What `__mldf` keeps of a file that its arrays do not say: the header
/// fields and each field's descriptor, with the arrays holding its values.
/// Fields serialize in this order (the bytes of a snapshot depend on it).
#[derive(Serialize, Deserialize)]
struct MldfMeta {
    #[serde(default = "MldfMeta::version")]
    version: [u16; 2],
    #[serde(default = "MldfMeta::flags")]
    flags: u32,
    #[serde(default = "MldfMeta::page_size")]
    page_size: u32,
    #[serde(default)]
    num_samples: u64,
    #[serde(default)]
    fields: Vec<FieldMeta>,
}

/// One field's descriptor in `__mldf`.
#[derive(Serialize, Deserialize, Default)]
struct FieldMeta {
    /// The field's own name in the file (its original name).
    name: String,
    type_id: u16,
    #[serde(default)]
    flags: u16,
    /// The WTXT array holding the values.
    array: String,
    /// For BYTES and JSON: the array of per-sample sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sizes: Option<String>,
    /// The descriptor's 128 argument bytes as hex, when any is not zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    arguments: Option<String>,
}

impl MldfMeta {
    fn version() -> [u16; 2] {
        [VERSION_MAJOR, VERSION_MINOR]
    }
    fn flags() -> u32 {
        LITTLE_ENDIAN
    }
    fn page_size() -> u32 {
        PAGE as u32
    }
    fn of(arrays: &[Array]) -> Result<Option<MldfMeta>> {
        meta_typed(arrays, META)
    }
    fn array(&self) -> Result<Array> {
        meta_array(META, &serde_json::to_value(self).expect("the metadata serializes"))
    }
}
const DESC: u64 = 208;
const ALLOC: u64 = 16;
const VERSION_MAJOR: u16 = 1;
const VERSION_MINOR: u16 = 0;
const LITTLE_ENDIAN: u32 = 0x1;
const UNSUPPORTED_FLAGS: [(u32, &str); 3] = [(0x2, "compressed"), (0x4, "checksummed"), (0x8, "encrypted")];
const MAX_NDIM: usize = 14;
/// Our writer's page size (the data region starts on a page boundary).
const PAGE: u64 = 4096;

/// Field types this reader and writer handle.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Int = 1,
    Float = 2,
    Bytes = 3,
    Ndarray = 4,
    Json = 5,
}

impl Kind {
    fn from_id(id: u16) -> Option<Kind> {
        Some(match id {
            1 => Kind::Int,
            2 => Kind::Float,
            3 => Kind::Bytes,
            4 => Kind::Ndarray,
            5 => Kind::Json,
            _ => return None,
        })
    }

    /// Size of the field's record in a metadata row.
    fn record(self) -> u64 {
        match self {
            Kind::Int | Kind::Float => 8,
            _ => 16,
        }
    }
}

/// NDARRAY arguments: dtype (8 bytes, NUL-padded WTXT spelling), ndim (1
/// byte), 7 zero bytes, then ndim little-endian u64 dims.
fn parse_ndarray_args(a: &[u8]) -> std::result::Result<(Dtype, Vec<u64>), Reason> {
    let name: Vec<u8> = a[..8].iter().copied().take_while(|&c| c != 0).collect();
    let dtype = Dtype::parse(&name)
        .ok_or_else(|| reason!("NDARRAY dtype {:?} is not a WTXT dtype", String::from_utf8_lossy(&name)))?;
    let ndim = a[8] as usize;
    if ndim > MAX_NDIM {
        return Err(reason!("NDARRAY ndim {ndim} exceeds {MAX_NDIM}"));
    }
    Ok((dtype, (0..ndim).map(|i| le_u64(a, 16 + 8 * i)).collect()))
}

fn ndarray_args(dtype: Dtype, dims: &[u64]) -> Result<[u8; 128]> {
    if dims.len() > MAX_NDIM {
        return Err(Error::input(Default::default(), format!("MLDF: a sample has at most {MAX_NDIM} dims")));
    }
    let mut a = [0u8; 128];
    a[..dtype.as_str().len()].copy_from_slice(dtype.as_str().as_bytes());
    a[8] = dims.len() as u8;
    for (i, d) in dims.iter().enumerate() {
        a[16 + 8 * i..24 + 8 * i].copy_from_slice(&d.to_le_bytes());
    }
    Ok(a)
}

struct Field {
    name: String,
    kind: Kind,
    flags: u16,
    args: [u8; 128],
}

/// The `__mldf` that reading back [`write()`]'s output for `tensors` alone
/// gives (every array an NDARRAY field), or `None` when it cannot write them.
pub fn default_meta(tensors: &[Array]) -> Option<Value> {
    let n = match tensors.first() {
        None => 0,
        Some(a) => *a.shape.first()?,
    };
    if tensors.iter().any(|a| a.shape.first() != Some(&n)) {
        return None;
    }
    let field = |a: &Array| FieldMeta {
        name: a.name.clone(),
        type_id: Kind::Ndarray as u16,
        array: a.name.clone(),
        ..Default::default()
    };
    let meta = MldfMeta {
        version: [1, 0],
        flags: LITTLE_ENDIAN,
        page_size: PAGE as u32,
        num_samples: n,
        fields: tensors.iter().map(field).collect(),
    };
    serde_json::to_value(meta).ok()
}

/// The mldf row of the container table.
pub struct Mldf;
impl Container for Mldf {
    fn original_names(&self, arrays: &[Array]) -> Result<Option<names::OriginalNames>> {
        kept_names(arrays)
    }
    /// Samples interleave fields: a tensor's bytes are not in one place.
    fn stores_tensors_verbatim(&self) -> bool {
        false
    }
    fn name(&self) -> &'static str {
        "mldf"
    }
    fn extensions(&self) -> &'static [&'static str] {
        &["mldf"]
    }
    fn sniff(&self, head: &[u8], _: u64) -> bool {
        head.starts_with(MAGIC)
    }
    fn read(&self, src: &ArrayData, _: &str, notes: &mut Notes) -> Result<Vec<Array>> {
        drop_default_meta(read(src, notes)?, default_meta)
    }
    fn write(&self, arrays: &[Array], out: &mut dyn WriteSeek) -> Result<()> {
        write_to(arrays, out)
    }
    /// A record per sample, however small: refuses a few bytes that
    /// declare a trillion samples.
    fn check_sizes(&self, arrays: &[Array]) -> Result<()> {
        check_sizes(arrays)
    }
    fn metadata(&self) -> &'static [&'static str] {
        &[META, names::NAMES]
    }
}
