//! The one in-memory model of a snapshot: named, typed, C-order, little-endian arrays.
//!
//! Every input format is read into this model and every output is written
//! from it. Array bytes are either owned or a window of a memory-mapped file,
//! so a snapshot of a large `.npy` or `.safetensors` never copies the weights.
#![deny(unsafe_code)]

mod dtype;

pub use crate::buffer::ArrayData;
use crate::error::{Error, Result};
use crate::limits::{MAX_NAME, MAX_RANK};
pub use dtype::{Block, Dtype, Value};

/// Number of elements of `shape`, or `None` on overflow. Rank 0 has one element.
pub fn element_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// Raw byte size of an array, or `None` on overflow or a shape that
/// [`shape_bytes`] refuses.
pub fn byte_size(dtype: Dtype, shape: &[u64]) -> Option<u64> {
    shape_bytes(dtype, shape).ok()
}

/// Raw byte size of an array, or why the shape has none: the element count
/// overflows, or a sub-byte dtype's innermost dimension is not whole
/// [`Block`]s (a scalar of them is half a byte). Every row, chunk and
/// partial read of such an array is then whole bytes.
pub fn shape_bytes(dtype: Dtype, shape: &[u64]) -> std::result::Result<u64, String> {
    let block = dtype.block();
    if block.elems > 1 && shape.last().is_none_or(|d| d % block.elems != 0) {
        return Err(format!(
            "{dtype} shape {shape:?}: the innermost dimension must be a multiple of {} ({} elements are {} whole bytes)",
            block.elems,
            block.elems,
            block.bytes
        ));
    }
    let n = element_count(shape).ok_or("shape: element count overflows")?;
    (n / block.elems).checked_mul(block.bytes).ok_or_else(|| "shape: byte count overflows".into())
}

/// True when `name` is a valid WTXT array name: `[A-Za-z0-9_]+`, at most 255 bytes.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// True for the names of wtxt's metadata arrays (`__npz`,
/// `__safetensors_header`, ...): those beginning with `__`. Writers
/// interpret them; they are not tensors. The one place this rule is spelled.
pub fn is_metadata_name(name: &str) -> bool {
    name.starts_with("__")
}

/// A tensor read from a container may not take a metadata name: it would
/// steer a writer (member names, header bytes) instead of being data.
pub fn check_tensor_name(name: &str) -> Result<()> {
    if is_metadata_name(name) {
        return Err(Error::input(
            Default::default(),
            format!("tensor {name:?}: names beginning with `__` are reserved for wtxt's metadata arrays; rename it"),
        ));
    }
    Ok(())
}

/// Maps a container's tensor name to a WTXT name: every byte outside
/// `[A-Za-z0-9_]` becomes `_`, an empty name becomes `_`, a name that would
/// begin with `__` (reserved for metadata arrays: JAX's `['params']['w']`,
/// `_.y`, `../x`) gets an `x` in front, and a name over 255 bytes is cut.
/// Collisions are resolved by [`assign_names`].
pub fn sanitize_name(name: &str) -> String {
    let mut out: String =
        name.bytes().map(|b| if b.is_ascii_alphanumeric() || b == b'_' { b as char } else { '_' }).collect();
    if out.is_empty() {
        out.push('_');
    }
    if is_metadata_name(&out) {
        out.insert(0, 'x');
    }
    out.truncate(MAX_NAME);
    out
}

/// The first name that occurs twice in `originals`, if any (a container
/// that names two things alike cannot be mapped one to one).
pub fn first_duplicate(originals: &[String]) -> Option<&str> {
    let mut seen = std::collections::HashSet::with_capacity(originals.len());
    originals.iter().find(|n| !seen.insert(n.as_str())).map(String::as_str)
}

/// `base` with the suffix `_n`, cut to fit 255 bytes. A base of `_` (the
/// empty name, `.`, `-`) would make `__n`, a metadata name that writers
/// drop: it takes an `x` in front, as [`sanitize_name`] does (`x__2`).
fn suffixed(base: &str, n: u64) -> String {
    let suffix = format!("_{n}");
    let mut b = base.to_string();
    b.truncate(MAX_NAME - suffix.len());
    let candidate = b + &suffix;
    // A sanitized base never begins with `__`, so only the base `_` gets
    // here, and `x__n` is far below the limit.
    if is_metadata_name(&candidate) {
        return format!("x{candidate}");
    }
    candidate
}

/// Gives every original name a unique WTXT name. Names that are already valid
/// keep their spelling; the others are sanitized and, where that collides,
/// get the smallest suffix `_2`, `_3`, ... that is free. Originals are taken
/// in byte-wise order, so the result does not depend on input order.
pub fn assign_names(originals: &[String]) -> Vec<String> {
    use std::collections::BTreeSet;
    let mut taken: BTreeSet<String> = originals.iter().filter(|n| is_valid_name(n)).cloned().collect();
    let mut order: Vec<usize> = (0..originals.len()).collect();
    order.sort_by(|&a, &b| originals[a].as_bytes().cmp(originals[b].as_bytes()));
    let mut out = vec![String::new(); originals.len()];
    for i in order {
        let orig = &originals[i];
        if is_valid_name(orig) {
            out[i] = orig.clone();
            continue;
        }
        let base = sanitize_name(orig);
        let mut candidate = base.clone();
        let mut n = 2u64;
        while taken.contains(&candidate) {
            candidate = suffixed(&base, n);
            n += 1;
        }
        taken.insert(candidate.clone());
        out[i] = candidate;
    }
    out
}

/// One named array: dtype, shape and raw little-endian C-order bytes.
#[derive(Clone, Debug)]
pub struct Array {
    /// WTXT name, `[A-Za-z0-9_]+`.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions; empty for rank 0.
    pub shape: Vec<u64>,
    /// Raw bytes, exactly `byte_size(dtype, shape)` of them.
    pub data: ArrayData,
}

impl Array {
    /// True for wtxt's metadata arrays, false for tensors ([`is_metadata_name`]).
    pub fn is_metadata(&self) -> bool {
        is_metadata_name(&self.name)
    }

    /// Builds an array, checking the name, the rank and that the byte count
    /// matches dtype and shape.
    pub fn new(name: impl Into<String>, dtype: Dtype, shape: Vec<u64>, data: ArrayData) -> Result<Array> {
        let name = name.into();
        if !is_valid_name(&name) {
            return Err(Error::input(
                Default::default(),
                format!("array name {name:?} is not [A-Za-z0-9_]+ of at most {MAX_NAME} bytes"),
            ));
        }
        Array::build(name, dtype, shape, data)
    }

    /// Like [`Array::new`] but keeps a container's name as it is, for
    /// readers; [`assign_names`] gives it a WTXT name before writing. A
    /// name wtxt reserves for its metadata arrays is refused.
    pub fn with_original_name(name: String, dtype: Dtype, shape: Vec<u64>, data: ArrayData) -> Result<Array> {
        check_tensor_name(&name)?;
        Array::build(name, dtype, shape, data)
    }

    /// The same array under a container's own name (a writer's view; the
    /// bytes are shared, not copied).
    pub fn renamed(&self, name: &str) -> Array {
        Array { name: name.to_string(), ..self.clone() }
    }

    fn build(name: String, dtype: Dtype, shape: Vec<u64>, data: ArrayData) -> Result<Array> {
        if shape.len() > MAX_RANK {
            return Err(Error::input(
                Default::default(),
                format!("array {name}: rank {} exceeds {MAX_RANK}", shape.len()),
            ));
        }
        let want =
            shape_bytes(dtype, &shape).map_err(|e| Error::input(Default::default(), format!("array {name}: {e}")))?;
        let have = data.as_bytes().len() as u64;
        if want != have {
            return Err(Error::input(
                Default::default(),
                format!("array {name}: {dtype} shape {shape:?} needs {want} bytes, have {have}"),
            ));
        }
        Ok(Array { name, dtype, shape, data })
    }

    /// The raw bytes.
    pub fn bytes(&self) -> &[u8] {
        self.data.as_bytes()
    }
}

/// Sorts arrays into WTXT order (byte-wise by name) and rejects duplicate names.
pub fn sort_arrays(arrays: &mut [Array]) -> Result<()> {
    arrays.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    if let Some(w) = arrays.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::input(Default::default(), format!("two arrays are named {}", w[0].name)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_mapped_without_collisions() {
        let orig: Vec<String> = ["a.b", "a_b", "a-b", "ok", ""].iter().map(|s| s.to_string()).collect();
        let got = assign_names(&orig);
        assert_eq!(got, vec!["a_b_3", "a_b", "a_b_2", "ok", "_"]);
    }

    /// Issue 50.4: `_` taken, the empty name, `.`, `/` and `-` map to `_`
    /// plus a suffix, which must never be a metadata name (`__2`).
    #[test]
    fn a_suffixed_underscore_is_never_a_metadata_name() {
        let orig: Vec<String> = ["_", "", ".", "/", "-"].iter().map(|s| s.to_string()).collect();
        let got = assign_names(&orig);
        assert!(got.iter().all(|n| is_valid_name(n) && !is_metadata_name(n)), "{got:?}");
        let unique: std::collections::HashSet<_> = got.iter().collect();
        assert_eq!(unique.len(), got.len(), "{got:?}");
        // In byte order of the originals: "" "-" "." "/".
        assert_eq!(got, ["_", "x__2", "x__4", "x__5", "x__3"]);
    }

    #[test]
    fn byte_size_overflow_is_none() {
        assert_eq!(byte_size(Dtype::F64, &[u64::MAX, 2]), None);
        assert_eq!(byte_size(Dtype::F32, &[]), Some(4));
        assert_eq!(byte_size(Dtype::F32, &[0, 7]), Some(0));
        assert_eq!(byte_size(Dtype::C64, &[3]), Some(24));
    }

    #[test]
    fn a_sub_byte_shape_needs_an_innermost_dimension_of_whole_bytes() {
        assert_eq!(byte_size(Dtype::F4E2m1, &[3, 4]), Some(6));
        assert_eq!(byte_size(Dtype::F6E2m3, &[2, 8]), Some(12));
        assert_eq!(byte_size(Dtype::F4E2m1, &[0, 2]), Some(0));
        let e = shape_bytes(Dtype::F4E2m1, &[4, 3]).unwrap_err();
        assert!(e.contains("f4e2m1 shape [4, 3]: the innermost dimension must be a multiple of 2"), "{e}");
        assert!(shape_bytes(Dtype::F6E3m2, &[6]).is_err());
        assert!(shape_bytes(Dtype::F4E2m1, &[]).is_err(), "a scalar is half a byte");
    }
}
