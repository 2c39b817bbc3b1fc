//! MLDF's layout: its constants, the fields and their descriptors as `__mldf` keeps them, and NDARRAY's arguments.

use crate::convert::bytes::le_u64;
use crate::convert::common::{meta_array, meta_typed};
use crate::error::{reason, Error, Reason, Result};
use crate::model::{Array, Dtype};
use serde::{Deserialize, Serialize};

/// The magic bytes: the seed's literal `b'\x89MLDF\r\n\x1a\n'`, which is 9
/// bytes (its comment says 8; its code writes and reads all 9).
pub const MAGIC: &[u8] = b"\x89MLDF\r\n\x1a\n";
/// Where the header starts: right after the magic.
pub(super) const H: usize = MAGIC.len();
/// Name of the metadata array.
pub const META: &str = "__mldf";
pub(super) const HEADER: usize = 64;

/// What `__mldf` keeps of a file that its arrays do not say: the header
/// fields and each field's descriptor, with the arrays holding its values.
/// Fields serialize in this order (the bytes of a snapshot depend on it).
#[derive(Serialize, Deserialize)]
pub(super) struct MldfMeta {
    #[serde(default = "MldfMeta::version")]
    pub(super) version: [u16; 2],
    #[serde(default = "MldfMeta::flags")]
    pub(super) flags: u32,
    #[serde(default = "MldfMeta::page_size")]
    pub(super) page_size: u32,
    #[serde(default)]
    pub(super) num_samples: u64,
    #[serde(default)]
    pub(super) fields: Vec<FieldMeta>,
}

/// One field's descriptor in `__mldf`.
#[derive(Serialize, Deserialize, Default)]
pub(super) struct FieldMeta {
    /// The field's own name in the file (its original name).
    pub(super) name: String,
    pub(super) type_id: u16,
    #[serde(default)]
    pub(super) flags: u16,
    /// The WTXT array holding the values.
    pub(super) array: String,
    /// For BYTES and JSON: the array of per-sample sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) sizes: Option<String>,
    /// The descriptor's 128 argument bytes as hex, when any is not zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) arguments: Option<String>,
}

impl MldfMeta {
    pub(super) fn version() -> [u16; 2] {
        [VERSION_MAJOR, VERSION_MINOR]
    }
    pub(super) fn flags() -> u32 {
        LITTLE_ENDIAN
    }
    pub(super) fn page_size() -> u32 {
        PAGE as u32
    }
    pub(super) fn of(arrays: &[Array]) -> Result<Option<MldfMeta>> {
        meta_typed(arrays, META)
    }
    pub(super) fn array(&self) -> Result<Array> {
        meta_array(META, &serde_json::to_value(self).expect("the metadata serializes"))
    }
}
pub(super) const DESC: u64 = 208;
pub(super) const ALLOC: u64 = 16;
pub(super) const VERSION_MAJOR: u16 = 1;
pub(super) const VERSION_MINOR: u16 = 0;
pub(super) const LITTLE_ENDIAN: u32 = 0x1;
pub(super) const UNSUPPORTED_FLAGS: [(u32, &str); 3] = [(0x2, "compressed"), (0x4, "checksummed"), (0x8, "encrypted")];
pub(super) const MAX_NDIM: usize = 14;
/// Our writer's page size (the data region starts on a page boundary).
pub(super) const PAGE: u64 = 4096;

/// Field types this reader and writer handle.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    Int = 1,
    Float = 2,
    Bytes = 3,
    Ndarray = 4,
    Json = 5,
}

impl Kind {
    pub(super) fn from_id(id: u16) -> Option<Kind> {
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
    pub(super) fn record(self) -> u64 {
        match self {
            Kind::Int | Kind::Float => 8,
            _ => 16,
        }
    }
}

/// NDARRAY arguments: dtype (8 bytes, NUL-padded WTXT spelling), ndim (1
/// byte), 7 zero bytes, then ndim little-endian u64 dims.
pub(super) fn parse_ndarray_args(a: &[u8]) -> std::result::Result<(Dtype, Vec<u64>), Reason> {
    let name: Vec<u8> = a[..8].iter().copied().take_while(|&c| c != 0).collect();
    let dtype = Dtype::parse(&name)
        .ok_or_else(|| reason!("NDARRAY dtype {:?} is not a WTXT dtype", String::from_utf8_lossy(&name)))?;
    let ndim = a[8] as usize;
    if ndim > MAX_NDIM {
        return Err(reason!("NDARRAY ndim {ndim} exceeds {MAX_NDIM}"));
    }
    Ok((dtype, (0..ndim).map(|i| le_u64(a, 16 + 8 * i)).collect()))
}

pub(super) fn ndarray_args(dtype: Dtype, dims: &[u64]) -> Result<[u8; 128]> {
    if dims.len() > MAX_NDIM {
        return Err(Error::input(Default::default(), format!("MLDF: a sample has at most {MAX_NDIM} dims")));
    }
    let name = dtype.as_str().as_bytes();
    if name.len() > 8 {
        return Err(Error::usage(format!(
            "MLDF: an NDARRAY dtype is 8 bytes and `{dtype}` is {} (use safetensors)",
            name.len()
        )));
    }
    let mut a = [0u8; 128];
    a[..name.len()].copy_from_slice(name);
    a[8] = dims.len() as u8;
    for (i, d) in dims.iter().enumerate() {
        a[16 + 8 * i..24 + 8 * i].copy_from_slice(&d.to_le_bytes());
    }
    Ok(a)
}

pub(super) struct Field {
    pub(super) name: String,
    pub(super) kind: Kind,
    pub(super) flags: u16,
    pub(super) args: [u8; 128],
}
