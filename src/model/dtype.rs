//! Element types: their WTXT spelling, how their elements pack into bytes,
//! and the values a diff decodes from them.
//!
//! Every dtype but the sub-byte floats has whole-byte elements. `f4e2m1`
//! packs two elements a byte and `f6e2m3` / `f6e3m2` four elements in three
//! bytes ([`Block`]); an array of them must have an innermost dimension of
//! whole blocks, so that every row, chunk and partial read is whole bytes
//! (FORMAT.md section 4).

use std::fmt;

/// Element types. The first ten are the seed's; the others are the
/// profile's `ext_dtypes` extension (FORMAT.md section 4).
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
    /// float8 E4M3 FNUZ (`float8_e4m3fnuz`, `F8_E4M3FNUZ`): bias 8, no
    /// infinities, no negative zero, NaN `0x80` only.
    F8E4m3fnuz,
    /// float8 E5M2 FNUZ (`float8_e5m2fnuz`, `F8_E5M2FNUZ`): bias 16, no
    /// infinities, no negative zero, NaN `0x80` only.
    F8E5m2fnuz,
    /// OCP MX scale E8M0 (`float8_e8m0fnu`, `F8_E8M0`): the power of two
    /// `2^(b - 127)`, no sign, no zero, NaN `0xff`.
    F8E8m0,
    /// Complex of two binary32 (`complex64`, `C64`): real part first.
    C64,
    /// Complex of two binary64 (`complex128`): real part first.
    C128,
    /// OCP MX FP4 E2M1 (`F4`; torch's `float4_e2m1fn_x2` is a byte of two):
    /// bias 1, no infinities or NaN; element `2i` in the low nibble of byte `i`.
    F4E2m1,
    /// OCP MX FP6 E2M3 (`F6_E2M3`): bias 1, no infinities or NaN; four
    /// elements in three bytes, element `j` at bits `6j..6j+6` of their
    /// little-endian 24-bit word.
    F6E2m3,
    /// OCP MX FP6 E3M2 (`F6_E3M2`): bias 3, packed as [`Dtype::F6E2m3`].
    F6E3m2,
}

/// The smallest run of whole bytes that holds whole elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Elements in the run: 1, or 2 for `f4e2m1`, 4 for the f6 types.
    pub elems: u64,
    /// Bytes in the run.
    pub bytes: u64,
}

/// A decoded element: real and imaginary part (0 for a real dtype).
pub type Value = [f64; 2];

impl Dtype {
    /// All dtypes, seed ones first.
    pub const ALL: [Dtype; 23] = [
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
        Dtype::F8E4m3fnuz,
        Dtype::F8E5m2fnuz,
        Dtype::F8E8m0,
        Dtype::C64,
        Dtype::C128,
        Dtype::F4E2m1,
        Dtype::F6E2m3,
        Dtype::F6E3m2,
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
            Dtype::F8E4m3fnuz => "f8e4m3fnuz",
            Dtype::F8E5m2fnuz => "f8e5m2fnuz",
            Dtype::F8E8m0 => "f8e8m0",
            Dtype::C64 => "c64",
            Dtype::C128 => "c128",
            Dtype::F4E2m1 => "f4e2m1",
            Dtype::F6E2m3 => "f6e2m3",
            Dtype::F6E3m2 => "f6e3m2",
        }
    }

    /// Parses the WTXT spelling.
    pub fn parse(s: &[u8]) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.as_str().as_bytes() == s)
    }

    /// Bits per element.
    pub fn bits(self) -> u64 {
        match self {
            Dtype::F4E2m1 => 4,
            Dtype::F6E2m3 | Dtype::F6E3m2 => 6,
            Dtype::C128 => 128,
            Dtype::F64 | Dtype::I64 | Dtype::U64 | Dtype::C64 => 64,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 32,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::Bf16 => 16,
            Dtype::I8
            | Dtype::U8
            | Dtype::Bool
            | Dtype::F8E4m3
            | Dtype::F8E5m2
            | Dtype::F8E4m3fnuz
            | Dtype::F8E5m2fnuz
            | Dtype::F8E8m0 => 8,
        }
    }

    /// The smallest whole-byte run of whole elements: one element for every
    /// dtype but the sub-byte floats.
    pub fn block(self) -> Block {
        match self {
            Dtype::F4E2m1 => Block { elems: 2, bytes: 1 },
            Dtype::F6E2m3 | Dtype::F6E3m2 => Block { elems: 4, bytes: 3 },
            d => Block { elems: 1, bytes: d.bits() / 8 },
        }
    }

    /// The bytes of `elems` elements; `None` where they end inside a byte
    /// (a sub-byte dtype) or the count overflows.
    pub fn bytes_of(self, elems: u64) -> Option<u64> {
        let bits = elems as u128 * self.bits() as u128;
        if !bits.is_multiple_of(8) {
            return None;
        }
        u64::try_from(bits / 8).ok()
    }

    /// True for the `ext_dtypes` extension, which a file must announce in `cap`.
    pub fn is_extension(self) -> bool {
        self > Dtype::U8
    }

    /// True for the float types whose values wtxt computes (a merge's
    /// average, [`Dtype::push_f64`]): `f64 f32 f16 bf16`. The float8, MX
    /// and complex types are stored and compared, never computed: their
    /// rounding and saturation rules vary by library.
    pub fn is_computed(self) -> bool {
        matches!(self, Dtype::F64 | Dtype::F32 | Dtype::F16 | Dtype::Bf16)
    }

    /// True for the types whose elements have numeric values a diff
    /// decodes: every float type, complex included.
    pub fn is_float(self) -> bool {
        !matches!(
            self,
            Dtype::I64
                | Dtype::U64
                | Dtype::I32
                | Dtype::U32
                | Dtype::I16
                | Dtype::U16
                | Dtype::I8
                | Dtype::U8
                | Dtype::Bool
        )
    }

    /// A real float element of a whole-byte dtype as f64 (its
    /// little-endian bytes); `None` for an integer, bool, complex or
    /// sub-byte dtype.
    pub fn to_f64(self, b: &[u8]) -> Option<f64> {
        let byte = || b.first().copied().filter(|_| b.len() == 1);
        Some(match self {
            Dtype::F64 => f64::from_le_bytes(b.try_into().ok()?),
            Dtype::F32 => f32::from_le_bytes(b.try_into().ok()?) as f64,
            Dtype::F16 => f16_to_f32(u16::from_le_bytes(b.try_into().ok()?)) as f64,
            Dtype::Bf16 => f32::from_bits((u16::from_le_bytes(b.try_into().ok()?) as u32) << 16) as f64,
            Dtype::F8E4m3 => match byte()? {
                v if v & 0x7f == 0x7f => f64::NAN,
                v => minifloat(v as u32, 4, 3, 7),
            },
            Dtype::F8E5m2 => f16_to_f32((byte()? as u16) << 8) as f64,
            Dtype::F8E4m3fnuz => match byte()? {
                0x80 => f64::NAN,
                v => minifloat(v as u32, 4, 3, 8),
            },
            Dtype::F8E5m2fnuz => match byte()? {
                0x80 => f64::NAN,
                v => minifloat(v as u32, 5, 2, 16),
            },
            Dtype::F8E8m0 => match byte()? {
                0xff => f64::NAN,
                v => 2f64.powi(v as i32 - 127),
            },
            _ => return None,
        })
    }

    /// Decodes one [`Block`] (`block().bytes` bytes) into its elements'
    /// values, returning how many; `None` for an integer or bool dtype or
    /// a run of the wrong length.
    pub fn decode(self, b: &[u8], out: &mut [Value; 4]) -> Option<usize> {
        match self {
            Dtype::C64 if b.len() == 8 => {
                out[0] = [Dtype::F32.to_f64(&b[..4])?, Dtype::F32.to_f64(&b[4..])?];
                Some(1)
            }
            Dtype::C128 if b.len() == 16 => {
                out[0] = [Dtype::F64.to_f64(&b[..8])?, Dtype::F64.to_f64(&b[8..])?];
                Some(1)
            }
            Dtype::F4E2m1 if b.len() == 1 => {
                out[0] = [minifloat(b[0] as u32 & 0xf, 2, 1, 1), 0.0];
                out[1] = [minifloat(b[0] as u32 >> 4, 2, 1, 1), 0.0];
                Some(2)
            }
            Dtype::F6E2m3 | Dtype::F6E3m2 if b.len() == 3 => {
                let word = b[0] as u32 | (b[1] as u32) << 8 | (b[2] as u32) << 16;
                let (exp, man, bias) = if self == Dtype::F6E2m3 { (2, 3, 1) } else { (3, 2, 3) };
                for (j, v) in out.iter_mut().enumerate() {
                    *v = [minifloat(word >> (6 * j) & 0x3f, exp, man, bias), 0.0];
                }
                Some(4)
            }
            _ => {
                out[0] = [self.to_f64(b)?, 0.0];
                Some(1)
            }
        }
    }

    /// Appends `v` as one element of this float dtype (rounded to nearest
    /// even); false, and nothing appended, for every dtype that is not
    /// [`Dtype::is_computed`].
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

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A sign-magnitude minifloat without infinities or NaN (the caller takes
/// those out first): a sign bit above `exp` exponent bits above `man`
/// mantissa bits, exponent field 0 subnormal.
fn minifloat(v: u32, exp: u32, man: u32, bias: i32) -> f64 {
    let sign = if (v >> (exp + man)) & 1 == 1 { -1.0 } else { 1.0 };
    let e = (v >> man) & ((1 << exp) - 1);
    let m = (v & ((1 << man) - 1)) as f64 / (1u32 << man) as f64;
    sign * if e == 0 { m * 2f64.powi(1 - bias) } else { (1.0 + m) * 2f64.powi(e as i32 - bias) }
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
            let b = d.block();
            assert_eq!(b.elems * d.bits(), b.bytes * 8, "{d}");
        }
        assert_eq!(Dtype::parse(b"f128"), None);
        assert!(Dtype::ALL[..10].iter().all(|d| !d.is_extension()));
        assert!(Dtype::ALL[10..].iter().all(|d| d.is_extension()));
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

    /// The figures torch 2.15 gives for the same bytes (`torch.tensor([b],
    /// dtype=torch.uint8).view(dtype).float()`).
    #[test]
    fn fnuz_and_e8m0_decode_as_torch_does() {
        let v = |d: Dtype, b: u8| d.to_f64(&[b]).unwrap();
        assert_eq!(v(Dtype::F8E4m3fnuz, 0x40), 1.0);
        assert_eq!(v(Dtype::F8E4m3fnuz, 0x7f), 240.0);
        assert_eq!(v(Dtype::F8E4m3fnuz, 0x01), 2f64.powi(-10));
        assert_eq!(v(Dtype::F8E4m3fnuz, 0xc0), -1.0);
        assert!(v(Dtype::F8E4m3fnuz, 0x80).is_nan() && !v(Dtype::F8E4m3fnuz, 0xff).is_nan());
        assert_eq!(v(Dtype::F8E5m2fnuz, 0x40), 1.0);
        assert_eq!(v(Dtype::F8E5m2fnuz, 0x7f), 57344.0);
        assert_eq!(v(Dtype::F8E5m2fnuz, 0x01), 2f64.powi(-17));
        assert!(v(Dtype::F8E5m2fnuz, 0x80).is_nan());
        assert_eq!(v(Dtype::F8E8m0, 127), 1.0);
        assert_eq!(v(Dtype::F8E8m0, 0), 2f64.powi(-127));
        assert_eq!(v(Dtype::F8E8m0, 0xfe), 2f64.powi(127));
        assert!(v(Dtype::F8E8m0, 0xff).is_nan());
    }

    #[test]
    fn sub_byte_and_complex_blocks_decode_element_by_element() {
        let mut out = [[0.0; 2]; 4];
        // f4e2m1: 0x72 is element 0 = 0b0010 (1.0), element 1 = 0b0111 (6.0).
        assert_eq!(Dtype::F4E2m1.decode(&[0x72], &mut out), Some(2));
        assert_eq!((out[0][0], out[1][0]), (1.0, 6.0));
        assert_eq!(Dtype::F4E2m1.decode(&[0x9f], &mut out), Some(2));
        assert_eq!((out[0][0], out[1][0]), (-6.0, -0.5));
        // f6e2m3: elements 0x08 (1.0), 0x1f (7.5), 0x01 (0.125), 0x28 (-1.0).
        let word: u32 = 0x08 | 0x1f << 6 | 0x01 << 12 | 0x28 << 18;
        let b = word.to_le_bytes();
        assert_eq!(Dtype::F6E2m3.decode(&b[..3], &mut out), Some(4));
        assert_eq!(out.map(|v| v[0]), [1.0, 7.5, 0.125, -1.0]);
        // f6e3m2: 0x0c (1.0), 0x1f (28.0), 0x01 (0.0625), 0x2c (-1.0).
        let word: u32 = 0x0c | 0x1f << 6 | 0x01 << 12 | 0x2c << 18;
        assert_eq!(Dtype::F6E3m2.decode(&word.to_le_bytes()[..3], &mut out), Some(4));
        assert_eq!(out.map(|v| v[0]), [1.0, 28.0, 0.0625, -1.0]);
        let z: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(Dtype::C64.decode(&z, &mut out), Some(1));
        assert_eq!(out[0], [1.5, -2.0]);
        assert_eq!(Dtype::I8.decode(&[1], &mut out), None);
        assert_eq!(Dtype::F4E2m1.decode(&[1, 2], &mut out), None);
    }
}
