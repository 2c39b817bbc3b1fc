//! The pieces every line is made of: `key=value` fields, decimal and hex
//! numbers, tokens, and the base64 a line carries.

use crate::crypto::digest::Hash;
use crate::error::{reason, Reason};

/// A parse failure: what was expected.
pub type PResult<T> = std::result::Result<T, Reason>;

/// Base64 characters per full line (57 raw bytes).
pub const B64_WIDTH: usize = 76;
/// Raw bytes per full base64 line.
pub const RAW_PER_LINE: usize = 57;

pub(super) const ZERO32: Hash = [0u8; 32];

/// Splits a line into its `key=value` fields in the fixed order.
pub struct Fields<'a> {
    rest: &'a [u8],
    what: &'static str,
}

impl<'a> Fields<'a> {
    /// Starts at `keyword` followed by one space.
    pub fn new(line: &'a [u8], keyword: &'static str) -> PResult<Fields<'a>> {
        let rest = line
            .strip_prefix(keyword.as_bytes())
            .and_then(|r| r.strip_prefix(b" "))
            .ok_or_else(|| reason!("expected a `{keyword}` line"))?;
        Ok(Fields { rest, what: keyword })
    }

    /// Fields that follow a prefix the caller has already consumed.
    pub fn new_unkeyed(rest: &'a [u8], what: &'static str) -> Fields<'a> {
        Fields { rest, what }
    }

    /// The value of the next field, which must be `key`. A value runs to the
    /// next space; it is never empty.
    pub fn next(&mut self, key: &str) -> PResult<&'a [u8]> {
        let what = self.what;
        let r = self
            .rest
            .strip_prefix(key.as_bytes())
            .and_then(|r| r.strip_prefix(b"="))
            .ok_or_else(|| reason!("`{what}` line: expected field `{key}=` here"))?;
        let end = r.iter().position(|&b| b == b' ').unwrap_or(r.len());
        let (v, tail) = r.split_at(end);
        if v.is_empty() {
            return Err(reason!("`{what}` line: `{key}=` has an empty value"));
        }
        self.rest = match tail {
            [] => tail,
            [b' ', more @ ..] if !more.is_empty() => more,
            _ => return Err(reason!("`{what}` line: expected exactly one space between fields")),
        };
        Ok(v)
    }

    /// The rest of the line, unparsed (for quoted values).
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// Ends the line: nothing may follow the last field.
    pub fn end(self) -> PResult<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(reason!("`{}` line: unexpected text `{}` after the last field", self.what, lossy(self.rest, 40)))
        }
    }
}

/// A short printable excerpt of bytes for error messages.
pub fn lossy(b: &[u8], max: usize) -> String {
    let s: String = b.iter().take(max).map(|&c| if (0x20..0x7f).contains(&c) { c as char } else { '?' }).collect();
    if b.len() > max {
        s + "..."
    } else {
        s
    }
}

/// A decimal number without sign or leading zeros (`0` itself is fine).
pub fn dec(v: &[u8], what: &str) -> PResult<u64> {
    let ok = !v.is_empty() && v.iter().all(u8::is_ascii_digit) && (v.len() == 1 || v[0] != b'0');
    if !ok {
        return Err(reason!(
            "{what}: expected a decimal number without sign or leading zeros, found `{}`",
            lossy(v, 24)
        ));
    }
    std::str::from_utf8(v).expect("digits").parse().map_err(|_| reason!("{what}: number too large"))
}

/// A decimal zero-padded to at least `width` digits (wider only without a leading zero).
pub fn padded(v: &[u8], width: usize, what: &str) -> PResult<u64> {
    let ok = v.len() >= width && v.iter().all(u8::is_ascii_digit) && (v.len() == width || v[0] != b'0');
    if !ok {
        return Err(reason!("{what}: expected a decimal zero-padded to {width} digits, found `{}`", lossy(v, 24)));
    }
    std::str::from_utf8(v).expect("digits").parse().map_err(|_| reason!("{what}: number too large"))
}

/// Writes `n` zero-padded to at least `width` digits.
pub fn pad(n: u64, width: usize) -> String {
    format!("{n:0width$}")
}

/// Exactly `N` bytes as `2N` lowercase hex digits.
pub fn hexn<const N: usize>(v: &[u8], what: &str) -> PResult<[u8; N]> {
    let ok = v.len() == 2 * N && v.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    if !ok {
        return Err(reason!("{what}: expected {} lowercase hex digits, found `{}`", 2 * N, lossy(v, 70)));
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(v, &mut out).expect("checked hex");
    Ok(out)
}

/// A token: `[A-Za-z0-9._/+-]+`.
pub fn is_token(v: &[u8]) -> bool {
    !v.is_empty() && v.iter().all(|&b| b.is_ascii_alphanumeric() || b".-_/+".contains(&b))
}

pub(super) fn token(v: &[u8], what: &str) -> PResult<String> {
    if is_token(v) {
        Ok(String::from_utf8(v.to_vec()).expect("ASCII"))
    } else {
        Err(reason!("{what}: expected a token [A-Za-z0-9._/+-]+, found `{}`", lossy(v, 40)))
    }
}

/// Checks a command-line value that will be written as a token.
pub fn check_token(v: &str, what: &str) -> PResult<()> {
    token(v.as_bytes(), what).map(|_| ())
}

/// Standard padded base64 of small values (signatures).
pub fn b64_strict_encode(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A 64-byte signature in canonical standard base64 (88 characters).
pub fn sig64(v: &[u8], what: &str) -> PResult<[u8; 64]> {
    use base64::Engine;
    let bad = || reason!("{what}: expected 88 characters of base64 holding a 64-byte signature");
    if v.len() != 88 {
        return Err(bad());
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(v).map_err(|_| bad())?;
    raw.try_into().map_err(|_| bad())
}
