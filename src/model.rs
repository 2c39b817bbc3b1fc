//! The one in-memory model of a snapshot: named, typed, C-order, little-endian arrays.
//!
//! Every input format is read into this model and every output is written
//! from it. Array bytes are either owned or a window of a memory-mapped file,
//! so a snapshot of a large `.npy` or `.safetensors` never copies the weights.
#![deny(unsafe_code)]

use std::fmt;

pub use crate::buffer::ArrayData;
use crate::error::{Error, Result};
use crate::limits::{MAX_NAME, MAX_RANK};

/// Element types. The first ten are the seed's; `F16`, `Bf16` and `Bool` are
/// the profile's `ext_dtypes` extension, and so are the two float8 types
/// (FORMAT.md section 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// IEEE 754 binary64.
    F64,
    /// IEEE 754 binary32.
    F32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16 (the top half of an f32).
    Bf16,
    /// One byte, 0 or 1.
    Bool,
    /// float8 E4M3 as PyTorch's `float8_e4m3fn` and safetensors' `F8_E4M3`:
    /// 4 exponent bits (bias 7), 3 mantissa bits, no infinities, NaN `0x7f`/`0xff`.
    F8E4m3,
    /// float8 E5M2 (`float8_e5m2`, `F8_E5M2`): the top byte of an IEEE binary16.
    F8E5m2,
}

impl Dtype {
    /// All dtypes, seed ones first.
    pub const ALL: [Dtype; 15] = [
        Dtype::F64,
        Dtype::F32,
        Dtype::I64,
        Dtype::U64,
        Dtype::I32,
        Dtype::U32,
        Dtype::I16,
        Dtype::U16,
        Dtype::I8,
        Dtype::U8,
        Dtype::F16,
        Dtype::Bf16,
        Dtype::Bool,
        Dtype::F8E4m3,
        Dtype::F8E5m2,
    ];

    /// The WTXT spelling (`f64`, `bf16`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F64 => "f64",
            Dtype::F32 => "f32",
            Dtype::I64 => "i64",
            Dtype::U64 => "u64",
            Dtype::I32 => "i32",
            Dtype::U32 => "u32",
            Dtype::I16 => "i16",
            Dtype::U16 => "u16",
            Dtype::I8 => "i8",
            Dtype::U8 => "u8",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
            Dtype::Bool => "bool",
            Dtype::F8E4m3 => "f8e4m3",
            Dtype::F8E5m2 => "f8e5m2",
        }
    }

    /// Parses the WTXT spelling.
    pub fn parse(s: &[u8]) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.as_str().as_bytes() == s)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F64 | Dtype::I64 | Dtype::U64 => 8,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I8 | Dtype::U8 | Dtype::Bool | Dtype::F8E4m3 | Dtype::F8E5m2 => 1,
        }
    }

    /// True for the `ext_dtypes` extension, which a file must announce in `cap`.
    pub fn is_extension(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::Bf16 | Dtype::Bool | Dtype::F8E4m3 | Dtype::F8E5m2)
    }

    /// True for the float types whose values wtxt computes (a merge's
    /// average, [`Dtype::push_f64`]): every float type but float8.
    pub fn is_computed(self) -> bool {
        self.is_float() && !matches!(self, Dtype::F8E4m3 | Dtype::F8E5m2)
    }

    /// True for floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::Bf16 | Dtype::F8E4m3 | Dtype::F8E5m2)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Number of elements of `shape`, or `None` on overflow. Rank 0 has one element.
pub fn element_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// Raw byte size of an array, or `None` on overflow.
pub fn byte_size(dtype: Dtype, shape: &[u64]) -> Option<u64> {
    element_count(shape)?.checked_mul(dtype.size() as u64)
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

impl Dtype {
    /// A float element as f64 (its little-endian bytes), or `None` for an
    /// integer or bool dtype.
    pub fn to_f64(self, b: &[u8]) -> Option<f64> {
        Some(match self {
            Dtype::F64 => f64::from_le_bytes(b.try_into().ok()?),
            Dtype::F32 => f32::from_le_bytes(b.try_into().ok()?) as f64,
            Dtype::F16 => f16_to_f32(u16::from_le_bytes(b.try_into().ok()?)) as f64,
            Dtype::Bf16 => f32::from_bits((u16::from_le_bytes(b.try_into().ok()?) as u32) << 16) as f64,
            Dtype::F8E4m3 => f8e4m3_to_f64(*<&[u8; 1]>::try_from(b).ok()?.first()?),
            Dtype::F8E5m2 => f16_to_f32((*<&[u8; 1]>::try_from(b).ok()?.first()? as u16) << 8) as f64,
            _ => return None,
        })
    }

    /// Appends `v` as one element of this float dtype (rounded to nearest
    /// even); false, and nothing appended, for an integer or bool dtype and
    /// for the float8 types (whose rounding and saturation rules vary by
    /// library: a computed float8 value is not written).
    pub fn push_f64(self, v: f64, out: &mut Vec<u8>) -> bool {
        match self {
            Dtype::F64 => out.extend_from_slice(&v.to_le_bytes()),
            Dtype::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            Dtype::F16 => out.extend_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
            Dtype::Bf16 => out.extend_from_slice(&f32_to_bf16(v as f32).to_le_bytes()),
            _ => return false,
        }
        true
    }
}

/// float8 E4M3 (`fn`: no infinities) to f64.
fn f8e4m3_to_f64(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exp, man) = ((b >> 3) & 0xf, b & 7);
    sign * match (exp, man) {
        (0xf, 7) => f64::NAN,
        (0, m) => m as f64 * (2f64).powi(-9),
        (e, m) => (1.0 + m as f64 / 8.0) * (2f64).powi(e as i32 - 7),
    }
}

/// IEEE binary16 to binary32.
fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalize.
            let shift = m.leading_zeros() - 21;
            let m = (m << shift) & 0x3ff;
            sign | ((127 - 15 + 1 - shift) << 23) | (m << 13)
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// binary32 to bfloat16, round to nearest even (NaN kept quiet).
fn f32_to_bf16(f: f32) -> u16 {
    let bits = f.to_bits();
    if f.is_nan() {
        return ((bits >> 16) as u16) | 0x40;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    ((bits + round) >> 16) as u16
}

/// binary32 to binary16, round to nearest even.
fn f32_to_f16(f: f32) -> u16 {
    let bits = f.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let mut v = m >> shift;
        let rest = m & ((1 << shift) - 1);
        if rest > half || (rest == half && v & 1 == 1) {
            v += 1;
        }
        return sign | v as u16;
    }
    let mut v = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && v & 1 == 1) {
        v += 1;
    }
    sign | v as u16
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
        let want = byte_size(dtype, &shape)
            .ok_or_else(|| Error::input(Default::default(), format!("array {name}: shape {shape:?} overflows")))?;
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
    fn f16_conversion() {
        for (h, f) in [(0x3c00u16, 1.0f32), (0xc000, -2.0), (0x0001, 5.960_464_5e-8), (0x7bff, 65504.0), (0, 0.0)] {
            assert_eq!(f16_to_f32(h), f, "{h:#x}");
        }
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
    }

    #[test]
    fn half_precision_round_trips() {
        for x in [0.0f32, 1.0, -2.5, 65504.0, 6.1035156e-5, 5.9604645e-8, 0.333_251_95] {
            assert_eq!(f16_to_f32(f32_to_f16(x)), x, "{x}");
        }
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_f16(1e9), 0x7c00);
    }

    #[test]
    fn dtype_round_trip() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::parse(d.as_str().as_bytes()), Some(d));
        }
        assert_eq!(Dtype::parse(b"f128"), None);
    }

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
    }

    #[test]
    fn float8_values_decode_as_pytorch_defines_them() {
        let e4m3 = |b: u8| Dtype::F8E4m3.to_f64(&[b]).unwrap();
        assert_eq!(e4m3(0x38), 1.0);
        assert_eq!(e4m3(0x7e), 448.0); // the largest
        assert_eq!(e4m3(0x01), 2f64.powi(-9)); // the smallest subnormal
        assert_eq!(e4m3(0xc0), -2.0);
        assert!(e4m3(0x7f).is_nan() && e4m3(0xff).is_nan());
        let e5m2 = |b: u8| Dtype::F8E5m2.to_f64(&[b]).unwrap();
        assert_eq!(e5m2(0x3c), 1.0);
        assert_eq!(e5m2(0x7b), 57344.0);
        assert!(e5m2(0x7c).is_infinite());
        assert!(!Dtype::F8E4m3.push_f64(1.0, &mut Vec::new()));
    }
}
