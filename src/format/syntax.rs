//! The WTXT grammar, one line type at a time. Each line has a struct, a
//! `write` that emits the only canonical spelling, and a strict `parse` beside
//! it that accepts nothing else (docs/FORMAT.md gives the ABNF).
//!
//! Parsers return a [`Reason`] naming what was expected; the caller adds the
//! file and line number.

use std::fmt::Write as _;

use crate::crypto::digest::Hash;
use crate::error::{reason, Reason};
use crate::limits::{MAX_NAME, MAX_RANK};
use crate::model::{byte_size, is_valid_name, Dtype};

/// A parse failure: what was expected.
pub type PResult<T> = std::result::Result<T, Reason>;

/// First line of every WTXT file.
pub const MAGIC: &str = "WTXT 1";
/// Last line of every WTXT file.
pub const END: &str = "endwtxt";
/// `cap ext=` items every file of this profile lists.
pub const CAP_BASE: &str = "crc32c,line_parity,arr_hmac,delta_v2,row_blocking";
/// The extension listed when an array uses f16, bf16 or bool.
pub const CAP_EXT_DTYPES: &str = "ext_dtypes";
/// The `cap` item of the tree digest form (FORMAT.md section 19).
pub const CAP_DIGEST_TREE: &str = "digest_tree";
/// `cap` items that begin so say how the digests are computed: a reader
/// that does not know one refuses the file rather than check it as WTXT 1.1.
pub const CAP_DIGEST_PREFIX: &str = "digest_";

/// How a file's array digests, HMACs and `sha256_all` are computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DigestForm {
    /// WTXT 1.1: SHA-256 and HMAC over each array's raw bytes, `sha256_all`
    /// over every `arr` line and raw byte in name order.
    #[default]
    Sha256,
    /// From the chunks' SHA-256 (`digest_tree`): no digest reads the raw
    /// bytes a second time, so nothing of it is serial.
    Tree,
}

impl DigestForm {
    /// As `--digest` and `digest=` name it.
    pub fn name(self) -> &'static str {
        match self {
            DigestForm::Sha256 => "sha256",
            DigestForm::Tree => "tree",
        }
    }

    /// From `--digest` (`sha256` or `tree`).
    pub fn parse(s: &str) -> PResult<DigestForm> {
        match s {
            "sha256" => Ok(DigestForm::Sha256),
            "tree" => Ok(DigestForm::Tree),
            other => Err(reason!("digest: expected sha256 or tree, found `{}`", lossy(other.as_bytes(), 40))),
        }
    }
}
/// Base64 characters per full line (57 raw bytes).
pub const B64_WIDTH: usize = 76;
/// Raw bytes per full base64 line.
pub const RAW_PER_LINE: usize = 57;

const ZERO32: Hash = [0u8; 32];

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

fn token(v: &[u8], what: &str) -> PResult<String> {
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

/// A UTC timestamp `YYYY-MM-DDTHH:MM:SSZ`, whole seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timestamp(String);

impl Timestamp {
    /// Parses and validates (a real date, zero-padded, `Z`).
    pub fn parse(v: &str) -> PResult<Timestamp> {
        let bad = || reason!("expected a UTC timestamp YYYY-MM-DDTHH:MM:SSZ, found `{}`", lossy(v.as_bytes(), 30));
        if v.len() != 20 {
            return Err(bad());
        }
        let t = chrono::NaiveDateTime::parse_from_str(v, "%Y-%m-%dT%H:%M:%SZ").map_err(|_| bad())?;
        if t.format("%Y-%m-%dT%H:%M:%SZ").to_string() != v {
            return Err(bad());
        }
        Ok(Timestamp(v.to_string()))
    }

    /// From seconds since the Unix epoch.
    pub fn from_epoch(secs: i64) -> PResult<Timestamp> {
        let t = chrono::DateTime::from_timestamp(secs, 0).ok_or_else(|| reason!("epoch {secs} is out of range"))?;
        Timestamp::parse(&t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
    }

    /// The writer's rule: an explicit value, else `SOURCE_DATE_EPOCH`, else the clock.
    pub fn resolve(explicit: Option<&str>) -> PResult<Timestamp> {
        if let Some(v) = explicit {
            return Timestamp::parse(v);
        }
        if let Ok(v) = std::env::var("SOURCE_DATE_EPOCH") {
            let secs: i64 =
                v.trim().parse().map_err(|_| reason!("SOURCE_DATE_EPOCH: expected whole seconds, found `{v}`"))?;
            return Timestamp::from_epoch(secs);
        }
        Timestamp::from_epoch(chrono::Utc::now().timestamp())
    }

    /// As written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The `meta` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// `schema` token.
    pub schema: String,
    /// Generation.
    pub gen: u64,
    /// Timestamp.
    pub ts: Timestamp,
    /// `build` token.
    pub build: String,
    /// `host` token.
    pub host: String,
    /// `cuda` token.
    pub cuda: String,
}

impl Meta {
    /// The writer's defaults for `gen`: schema `weights/v1`, build `none`,
    /// host `cpu`, cuda `off`; `ts` as given, else `SOURCE_DATE_EPOCH`, else the clock.
    pub fn new(gen: u64, ts: Option<&str>) -> crate::Result<Meta> {
        Ok(Meta {
            schema: "weights/v1".into(),
            gen,
            ts: Timestamp::resolve(ts).map_err(|m| crate::Error::usage(format!("ts: {m}")))?,
            build: "none".into(),
            host: "cpu".into(),
            cuda: "off".into(),
        })
    }

    /// Replaces the token fields that are given, each checked.
    pub fn with_tokens(
        mut self,
        schema: Option<&str>,
        build: Option<&str>,
        host: Option<&str>,
        cuda: Option<&str>,
    ) -> crate::Result<Meta> {
        for (slot, v, what) in [
            (&mut self.schema, schema, "schema"),
            (&mut self.build, build, "build"),
            (&mut self.host, host, "host"),
            (&mut self.cuda, cuda, "cuda"),
        ] {
            if let Some(v) = v {
                check_token(v, what).map_err(|m| crate::Error::usage(format!("--{what}: {m}")))?;
                *slot = v.to_string();
            }
        }
        Ok(self)
    }

    /// `gen` as written: zero-padded to at least 6 digits.
    pub fn gen_str(&self) -> String {
        pad(self.gen, 6)
    }

    /// Appends the line (without LF).
    pub fn write(&self, out: &mut String) {
        let _ = write!(
            out,
            "meta schema={} gen={} ts={} build={} endian=LE host={} cuda={}",
            self.schema,
            self.gen_str(),
            self.ts.as_str(),
            self.build,
            self.host,
            self.cuda
        );
    }

    /// Parses the line.
    pub fn parse(line: &[u8]) -> PResult<Meta> {
        let mut f = Fields::new(line, "meta")?;
        let schema = token(f.next("schema")?, "schema")?;
        let gen = padded(f.next("gen")?, 6, "gen")?;
        let ts = Timestamp::parse(std::str::from_utf8(f.next("ts")?).map_err(|_| "ts: not ASCII")?)?;
        let build = token(f.next("build")?, "build")?;
        if f.next("endian")? != b"LE" {
            return Err("endian: expected `LE`".into());
        }
        let host = token(f.next("host")?, "host")?;
        let cuda = token(f.next("cuda")?, "cuda")?;
        f.end()?;
        Ok(Meta { schema, gen, ts, build, host, cuda })
    }
}

/// The `cap` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cap {
    /// Capabilities, in order.
    pub items: Vec<String>,
}

impl Cap {
    /// The profile's list, with `ext_dtypes` when needed, then
    /// `digest_tree` for the tree form.
    pub fn for_profile(ext_dtypes: bool, digest: DigestForm) -> Cap {
        let mut items: Vec<String> = CAP_BASE.split(',').map(String::from).collect();
        if ext_dtypes {
            items.push(CAP_EXT_DTYPES.into());
        }
        if digest == DigestForm::Tree {
            items.push(CAP_DIGEST_TREE.into());
        }
        Cap { items }
    }

    /// The digest form the items announce; an error naming a `digest_`
    /// item this reader does not know (or two forms at once).
    pub fn digest_form(&self) -> PResult<DigestForm> {
        let mut form = None;
        for it in self.items.iter().filter(|i| i.starts_with(CAP_DIGEST_PREFIX)) {
            if it != CAP_DIGEST_TREE {
                return Err(reason!(
                    "cap: `{it}` names a digest form this wtxt does not know: refused rather than checked as WTXT 1.1"
                ));
            }
            if form.replace(DigestForm::Tree).is_some() {
                return Err(reason!("cap: `{it}` listed twice"));
            }
        }
        Ok(form.unwrap_or_default())
    }

    /// True when the file announces an item.
    pub fn has(&self, item: &str) -> bool {
        self.items.iter().any(|i| i == item)
    }

    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        let _ = write!(out, "cap ext={}", self.items.join(","));
    }

    /// Parses the line. Items are `[a-z0-9_]+`; unknown ones are kept and ignored.
    pub fn parse(line: &[u8]) -> PResult<Cap> {
        let mut f = Fields::new(line, "cap")?;
        let v = f.next("ext")?;
        f.end()?;
        let mut items = Vec::new();
        for it in v.split(|&b| b == b',') {
            if it.is_empty() || !it.iter().all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
                return Err(reason!("cap: expected comma-separated items [a-z0-9_]+, found `{}`", lossy(v, 60)));
            }
            items.push(String::from_utf8(it.to_vec()).expect("ASCII"));
        }
        Ok(Cap { items })
    }
}

/// The `root` line, or `root_pending` in a WTXT-S.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Root {
    /// Hashes filled in.
    Final {
        /// Over every `arr` line and raw byte.
        sha256_all: Hash,
        /// The previous generation's `merkle_this`.
        merkle_prev: Hash,
        /// This generation's link.
        merkle_this: Hash,
        /// XOR of the raw bytes as little-endian words.
        fastxor: u64,
    },
    /// A streaming file, to be finalized with a WSUM.
    Pending,
}

/// The exact `root_pending` line of a WTXT-S.
pub const ROOT_PENDING: &str = "root_pending sha256_all=0000000000000000000000000000000000000000000000000000000000000000 note=\"finalize with WSUM\"";

impl Root {
    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        match self {
            Root::Final { sha256_all, merkle_prev, merkle_this, fastxor } => {
                let _ = write!(
                    out,
                    "root sha256_all={} merkle_prev={} merkle_this={} fastxor={:016x}",
                    hex::encode(sha256_all),
                    hex::encode(merkle_prev),
                    hex::encode(merkle_this),
                    fastxor
                );
            }
            Root::Pending => out.push_str(ROOT_PENDING),
        }
    }

    /// Parses either form.
    pub fn parse(line: &[u8]) -> PResult<Root> {
        if line.starts_with(b"root_pending ") {
            return if line == ROOT_PENDING.as_bytes() {
                Ok(Root::Pending)
            } else {
                Err(reason!("expected `{ROOT_PENDING}`"))
            };
        }
        let mut f = Fields::new(line, "root")?;
        let sha256_all = hexn::<32>(f.next("sha256_all")?, "sha256_all")?;
        let merkle_prev = hexn::<32>(f.next("merkle_prev")?, "merkle_prev")?;
        let merkle_this = hexn::<32>(f.next("merkle_this")?, "merkle_this")?;
        let fastxor = u64::from_be_bytes(hexn::<8>(f.next("fastxor")?, "fastxor")?);
        f.end()?;
        Ok(Root::Final { sha256_all, merkle_prev, merkle_this, fastxor })
    }
}

/// The `sign` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignLine {
    /// The Ed25519 signature.
    pub signature: [u8; 64],
    /// The signer's key id.
    pub keyid: [u8; 8],
}

impl SignLine {
    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        let _ = write!(out, "sign ed25519={} keyid={}", b64_strict_encode(&self.signature), hex::encode(self.keyid));
    }

    /// Parses the line: 64 bytes of standard padded base64, 16 hex.
    pub fn parse(line: &[u8]) -> PResult<SignLine> {
        let mut f = Fields::new(line, "sign")?;
        let signature = sig64(f.next("ed25519")?, "ed25519")?;
        let keyid = hexn::<8>(f.next("keyid")?, "keyid")?;
        f.end()?;
        Ok(SignLine { signature, keyid })
    }
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

/// An `arr` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrLine {
    /// WTXT name.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Raw bytes.
    pub bytes: u64,
    /// SHA-256 of the raw bytes.
    pub sha256: Hash,
    /// HMAC-SHA256 (all zeros: none).
    pub hmac: Hash,
    /// The salt the HMAC keys with.
    pub salt: [u8; 8],
}

/// Writes a shape: `()` for rank 0, else comma-separated dims.
pub fn shape_str(shape: &[u64]) -> String {
    if shape.is_empty() {
        return "()".into();
    }
    shape.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// Parses a shape.
pub fn parse_shape(v: &[u8]) -> PResult<Vec<u64>> {
    if v == b"()" {
        return Ok(Vec::new());
    }
    let dims: Vec<&[u8]> = v.split(|&b| b == b',').collect();
    if dims.len() > MAX_RANK {
        return Err(reason!("shape: rank {} exceeds {MAX_RANK}", dims.len()));
    }
    dims.into_iter().map(|d| dec(d, "shape")).collect()
}

impl ArrLine {
    /// True when the array carries no HMAC (unauthenticated).
    pub fn hmac_is_zero(&self) -> bool {
        self.hmac == ZERO32
    }

    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        let _ = write!(
            out,
            "arr name={} dtype={} shape={} order=C bytes={} sha256={} hmac={} salt={}",
            self.name,
            self.dtype,
            shape_str(&self.shape),
            self.bytes,
            hex::encode(self.sha256),
            hex::encode(self.hmac),
            hex::encode(self.salt)
        );
    }

    /// The line as a string.
    pub fn to_line(&self) -> String {
        let mut s = String::with_capacity(256);
        self.write(&mut s);
        s
    }

    /// Parses the line and checks `bytes` against dtype and shape.
    pub fn parse(line: &[u8]) -> PResult<ArrLine> {
        let mut f = Fields::new(line, "arr")?;
        let name_b = f.next("name")?;
        let name = String::from_utf8(name_b.to_vec()).unwrap_or_default();
        if !is_valid_name(&name) {
            return Err(reason!(
                "name: expected [A-Za-z0-9_]+ of at most {MAX_NAME} bytes, found `{}`",
                lossy(name_b, 40)
            ));
        }
        let dt = f.next("dtype")?;
        let dtype = Dtype::parse(dt).ok_or_else(|| reason!("dtype: unknown dtype `{}`", lossy(dt, 16)))?;
        let shape = parse_shape(f.next("shape")?)?;
        if f.next("order")? != b"C" {
            return Err("order: expected `C`".into());
        }
        let bytes = dec(f.next("bytes")?, "bytes")?;
        let want = byte_size(dtype, &shape).ok_or("shape: element count overflows")?;
        if bytes != want {
            return Err(reason!("bytes: expected {want} for {dtype} shape {}, found {bytes}", shape_str(&shape)));
        }
        let sha256 = hexn::<32>(f.next("sha256")?, "sha256")?;
        let hmac = hexn::<32>(f.next("hmac")?, "hmac")?;
        let salt = hexn::<8>(f.next("salt")?, "salt")?;
        f.end()?;
        Ok(ArrLine { name, dtype, shape, bytes, sha256, hmac, salt })
    }
}

/// An `idx` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdxLine {
    /// Rows per chunk.
    pub rows_per_chunk: u64,
    /// Bytes per row.
    pub row_size: u64,
}

impl IdxLine {
    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        let _ = write!(out, "idx rows_per_chunk={} row_size={} row_blocking=on", self.rows_per_chunk, self.row_size);
    }

    /// Parses the line; this profile only writes `row_blocking=on`.
    pub fn parse(line: &[u8]) -> PResult<IdxLine> {
        let mut f = Fields::new(line, "idx")?;
        let rows_per_chunk = dec(f.next("rows_per_chunk")?, "rows_per_chunk")?;
        if rows_per_chunk == 0 {
            return Err("rows_per_chunk: expected at least 1".into());
        }
        let row_size = dec(f.next("row_size")?, "row_size")?;
        if f.next("row_blocking")? != b"on" {
            return Err("row_blocking: expected `on`".into());
        }
        f.end()?;
        Ok(IdxLine { rows_per_chunk, row_size })
    }
}

/// A `ch` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChLine {
    /// Chunk index.
    pub ix: u64,
    /// Offset of its bytes in the array.
    pub off: u64,
    /// Its length in bytes.
    pub len: u64,
    /// SHA-256 of its bytes.
    pub sha256: Hash,
    /// CRC32C of its bytes.
    pub crc32c: u32,
    /// Base64 lines.
    pub lines: u64,
}

/// Number of base64 lines for `len` raw bytes: ceil(len / 57).
pub fn lines_for(len: u64) -> u64 {
    len.div_ceil(RAW_PER_LINE as u64)
}

/// Bytes of the base64 lines of a chunk of `len` raw bytes: 79 for each
/// full line (76 characters, a space, the parity nibble, LF), `4 x
/// ceil(r/3) + 3` for a last line of `r` bytes.
pub fn body_text_len(len: u64) -> u64 {
    let (full, rest) = (len / RAW_PER_LINE as u64, len % RAW_PER_LINE as u64);
    full * (B64_WIDTH as u64 + 3) + if rest > 0 { rest.div_ceil(3) * 4 + 3 } else { 0 }
}

impl ChLine {
    /// Appends the line.
    pub fn write(&self, out: &mut String) {
        let _ = write!(
            out,
            "ch ix={:06} off={:012} len={} sha256={} crc32c={:08x} b64=on width=76 lines={}",
            self.ix,
            self.off,
            self.len,
            hex::encode(self.sha256),
            self.crc32c,
            self.lines
        );
    }

    /// Parses the line and checks `lines` = ceil(len / 57).
    pub fn parse(line: &[u8]) -> PResult<ChLine> {
        let mut f = Fields::new(line, "ch")?;
        let ix = padded(f.next("ix")?, 6, "ix")?;
        let off = padded(f.next("off")?, 12, "off")?;
        let len = dec(f.next("len")?, "len")?;
        let sha256 = hexn::<32>(f.next("sha256")?, "sha256")?;
        let crc32c = u32::from_be_bytes(hexn::<4>(f.next("crc32c")?, "crc32c")?);
        if f.next("b64")? != b"on" {
            return Err("b64: expected `on`".into());
        }
        if f.next("width")? != b"76" {
            return Err("width: expected `76`".into());
        }
        let lines = dec(f.next("lines")?, "lines")?;
        f.end()?;
        if lines != lines_for(len) {
            return Err(reason!("lines: expected {} for len={len}, found {lines}", lines_for(len)));
        }
        Ok(ChLine { ix, off, len, sha256, crc32c, lines })
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_canonical() {
        assert_eq!(dec(b"0", "x"), Ok(0));
        assert!(dec(b"01", "x").is_err());
        assert!(dec(b"+1", "x").is_err());
        assert!(dec(b"99999999999999999999999", "x").is_err());
        assert_eq!(padded(b"000123", 6, "g"), Ok(123));
        assert_eq!(padded(b"1234567", 6, "g"), Ok(1234567));
        assert!(padded(b"0123456", 6, "g").is_err());
        assert!(padded(b"00123", 6, "g").is_err());
    }

    #[test]
    fn fields_demand_single_spaces_and_order() {
        assert!(IdxLine::parse(b"idx rows_per_chunk=1 row_size=4 row_blocking=on").is_ok());
        assert!(IdxLine::parse(b"idx rows_per_chunk=1  row_size=4 row_blocking=on").is_err());
        assert!(IdxLine::parse(b"idx row_size=4 rows_per_chunk=1 row_blocking=on").is_err());
        assert!(IdxLine::parse(b"idx rows_per_chunk=1 row_size=4 row_blocking=on ").is_err());
    }

    #[test]
    fn timestamps_are_strict() {
        assert!(Timestamp::parse("2026-02-02T12:00:00Z").is_ok());
        assert!(Timestamp::parse("2026-02-30T12:00:00Z").is_err());
        assert!(Timestamp::parse("2026-2-02T12:00:00Z").is_err());
        assert!(Timestamp::parse("2026-02-02T12:00:00+00").is_err());
        assert_eq!(Timestamp::from_epoch(1780000000).unwrap().as_str(), "2026-05-28T20:26:40Z");
    }

    #[test]
    fn audit_round_trip() {
        let a = Audit::parse(b"audit loss=0.0123 epoch=9 note=\"warm restart, lr x0.5\"").unwrap();
        assert_eq!(a.pairs.len(), 3);
        let mut s = String::new();
        a.write(&mut s);
        assert_eq!(s, "audit loss=0.0123 epoch=9 note=\"warm restart, lr x0.5\"");
        assert!(Audit::parse(b"audit a=\"x\\y\"").is_err());
        assert!(Audit::parse(b"audit a=b  c=d").is_err());
    }

    #[test]
    fn lines_round_trip() {
        let ch = b"ch ix=000001 off=000000032768 len=432 sha256=469bdb3cc9560a954fe02bfc11248f0a8964a79948e88226506f21859ae628b6 crc32c=8e8022cc b64=on width=76 lines=8";
        let c = ChLine::parse(ch).unwrap();
        let mut s = String::new();
        c.write(&mut s);
        assert_eq!(s.as_bytes(), ch);
        assert!(ChLine::parse(&ch.replace_last(b"lines=8", b"lines=9")).is_err());
    }

    trait ReplaceLast {
        fn replace_last(&self, from: &[u8], to: &[u8]) -> Vec<u8>;
    }
    impl ReplaceLast for [u8] {
        fn replace_last(&self, from: &[u8], to: &[u8]) -> Vec<u8> {
            let i = self.windows(from.len()).rposition(|w| w == from).unwrap();
            [&self[..i], to, &self[i + from.len()..]].concat()
        }
    }
    impl<const N: usize> ReplaceLast for [u8; N] {
        fn replace_last(&self, from: &[u8], to: &[u8]) -> Vec<u8> {
            self[..].replace_last(from, to)
        }
    }
}
