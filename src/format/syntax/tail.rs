//! The tail's lines: `audit` and `wsum`.

use std::fmt::Write as _;

use crate::crypto::digest::Hash;
use crate::error::reason;

use super::fields::{b64_strict_encode, hexn, is_token, lossy, sig64, Fields, PResult};
use super::head::SignLine;

/// The optional `audit` line: `key=value` pairs, values tokens or `"..."`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Audit {
    /// Keys and values as written (quoted values keep their quotes).
    pub pairs: Vec<(String, String)>,
}

impl Audit {
    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        out.push_str("audit");
        for (k, v) in &self.pairs {
            let _ = write!(out, " {k}={v}");
        }
    }

    /// Parses the pairs after `audit ` (also used for `--audit`).
    pub fn parse_pairs(mut s: &[u8]) -> PResult<Audit> {
        let mut pairs = Vec::new();
        loop {
            let eq = s.iter().position(|&b| b == b'=').ok_or("audit: expected key=value")?;
            let key = &s[..eq];
            if !is_token(key) {
                return Err(reason!("audit: expected a key [A-Za-z0-9._/+-]+, found `{}`", lossy(key, 30)));
            }
            let rest = &s[eq + 1..];
            let vlen = if rest.first() == Some(&b'"') {
                let close = rest[1..]
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b))
                    .ok_or("audit: unterminated quoted value")?;
                if rest[1 + close] != b'"' {
                    return Err("audit: quoted values hold printable ASCII without `\"` or `\\`".into());
                }
                close + 2
            } else {
                let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
                if !is_token(&rest[..end]) {
                    return Err(reason!(
                        "audit: expected a token or a quoted value, found `{}`",
                        lossy(&rest[..end], 30)
                    ));
                }
                end
            };
            let value = &rest[..vlen];
            pairs.push((
                String::from_utf8(key.to_vec()).expect("ASCII"),
                String::from_utf8(value.to_vec()).expect("ASCII"),
            ));
            s = &rest[vlen..];
            match s {
                [] => return Ok(Audit { pairs }),
                [b' ', more @ ..] if !more.is_empty() && more[0] != b' ' => s = more,
                _ => return Err("audit: expected exactly one space between pairs".into()),
            }
        }
    }

    /// Parses the whole line.
    pub fn parse(line: &[u8]) -> PResult<Audit> {
        let rest = line.strip_prefix(b"audit ").ok_or("expected an `audit` line")?;
        Audit::parse_pairs(rest)
    }
}

/// The WSUM line that finalizes a WTXT-S.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wsum {
    /// `sha256_all` the WSUM finalizes with.
    pub sha256_all: Hash,
    /// `merkle_prev` of the file.
    pub merkle_prev: Hash,
    /// `merkle_this` it gives.
    pub merkle_this: Hash,
    /// The signature over it, if any.
    pub sign: Option<SignLine>,
}

impl Wsum {
    /// The part of the line a signature covers (before ` sign=`).
    pub fn signed_part(&self) -> String {
        format!(
            "WSUM 1 sha256_all={} merkle_prev={} merkle_this={}",
            hex::encode(self.sha256_all),
            hex::encode(self.merkle_prev),
            hex::encode(self.merkle_this)
        )
    }

    /// The whole file: the line and its LF.
    pub fn to_file(&self) -> String {
        let mut s = self.signed_part();
        if let Some(sg) = &self.sign {
            let _ = write!(s, " sign={} keyid={}", b64_strict_encode(&sg.signature), hex::encode(sg.keyid));
        }
        s.push('\n');
        s
    }

    /// Parses the file's bytes: exactly one line ending in LF.
    pub fn parse_file(bytes: &[u8]) -> PResult<Wsum> {
        let line = bytes.strip_suffix(b"\n").ok_or("expected one line ending in LF")?;
        if line.contains(&b'\n') {
            return Err("expected exactly one line".into());
        }
        let mut f = Fields::new(line, "WSUM").map_err(|_| "expected `WSUM 1 ...`".to_string())?;
        if !f.rest().starts_with(b"1 ") {
            return Err("expected `WSUM 1`".into());
        }
        f = Fields::new_unkeyed(&f.rest()[2..], "WSUM");
        let sha256_all = hexn::<32>(f.next("sha256_all")?, "sha256_all")?;
        let merkle_prev = hexn::<32>(f.next("merkle_prev")?, "merkle_prev")?;
        let merkle_this = hexn::<32>(f.next("merkle_this")?, "merkle_this")?;
        let sign = if f.rest().is_empty() {
            None
        } else {
            let signature = sig64(f.next("sign")?, "sign")?;
            let keyid = hexn::<8>(f.next("keyid")?, "keyid")?;
            Some(SignLine { signature, keyid })
        };
        f.end()?;
        Ok(Wsum { sha256_all, merkle_prev, merkle_this, sign })
    }
}
