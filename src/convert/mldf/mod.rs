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

use serde_json::Value;

use crate::convert::common::Notes;
use crate::convert::container::{drop_default_meta, Container, WriteSeek};
use crate::convert::names::{self};
use crate::error::Result;
use crate::model::{Array, ArrayData};

mod layout;
mod read;
mod write;

pub use layout::*;
pub use read::*;
pub use write::*;

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
