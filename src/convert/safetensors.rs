//! safetensors: read in place from the map (the `safetensors` crate validates
//! the header and offsets) and write.

use std::io::Write;
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::{Dtype as St, SafeTensors};

use crate::error::{input_at, Error, Result};
use crate::limits::MAX_ARRAYS;
use crate::model::{Array, ArrayData, Dtype};

fn from_st(d: St) -> Option<Dtype> {
    Some(match d {
        St::F64 => Dtype::F64,
        St::F32 => Dtype::F32,
        St::F16 => Dtype::F16,
        St::BF16 => Dtype::Bf16,
        St::I64 => Dtype::I64,
        St::I32 => Dtype::I32,
        St::I16 => Dtype::I16,
        St::I8 => Dtype::I8,
        St::U64 => Dtype::U64,
        St::U32 => Dtype::U32,
        St::U16 => Dtype::U16,
        St::U8 => Dtype::U8,
        St::BOOL => Dtype::Bool,
        _ => return None,
    })
}

fn to_st(d: Dtype) -> St {
    match d {
        Dtype::F64 => St::F64,
        Dtype::F32 => St::F32,
        Dtype::F16 => St::F16,
        Dtype::Bf16 => St::BF16,
        Dtype::I64 => St::I64,
        Dtype::I32 => St::I32,
        Dtype::I16 => St::I16,
        Dtype::I8 => St::I8,
        Dtype::U64 => St::U64,
        Dtype::U32 => St::U32,
        Dtype::U16 => St::U16,
        Dtype::U8 => St::U8,
        Dtype::Bool => St::BOOL,
    }
}

/// Reads every tensor, each array named by its tensor name (the caller
/// maps names to WTXT names).
pub fn read(map: &Arc<Mmap>) -> Result<Vec<Array>> {
    let bytes: &[u8] = map;
    let st = SafeTensors::deserialize(bytes).map_err(|e| input_at(0, format!("not a valid safetensors file: {e}")))?;
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("checked by deserialize")) as usize;
    let base = bytes.as_ptr() as usize;
    let tensors = st.tensors();
    if tensors.len() > MAX_ARRAYS {
        return Err(input_at(8, format!("{} tensors exceed the limit of {MAX_ARRAYS}", tensors.len())));
    }
    let mut out = Vec::with_capacity(tensors.len());
    for (name, view) in tensors {
        let dtype = from_st(view.dtype())
            .ok_or_else(|| input_at(8, format!("tensor {name}: dtype {:?} has no WTXT equivalent", view.dtype())))?;
        let data = view.data();
        let start = data.as_ptr() as usize - base;
        let shape = view.shape().iter().map(|&d| d as u64).collect();
        let arr = Array::with_original_name(
            name.clone(),
            dtype,
            shape,
            ArrayData::Mapped(map.clone(), start..start + data.len()),
        )
        .map_err(|e| input_at((8 + n) as u64, format!("tensor {name}: {}", e.message())))?;
        out.push(arr);
    }
    Ok(out)
}

/// Writes arrays as safetensors (names as in WTXT; the crate orders the header).
pub fn write<W: Write>(arrays: &[Array], out: &mut W) -> Result<()> {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = arrays
        .iter()
        .map(|a| {
            let shape = a.shape.iter().map(|&d| d as usize).collect();
            safetensors::tensor::TensorView::new(to_st(a.dtype), shape, a.bytes())
                .map(|v| (a.name.clone(), v))
                .map_err(|e| Error::input(Default::default(), format!("array {}: {e}", a.name)))
        })
        .collect::<Result<_>>()?;
    let bytes = safetensors::serialize(views, None).map_err(|e| Error::input(Default::default(), e.to_string()))?;
    out.write_all(&bytes).map_err(|e| Error::io("output", e))
}
