//! The head's lines: magic, `meta`, `cap`, the root line and the signature.

use std::fmt::Write as _;

use crate::crypto::digest::Hash;
use crate::error::reason;

use super::fields::{b64_strict_encode, check_token, hexn, lossy, pad, padded, sig64, token, Fields, PResult};

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
}

impl std::str::FromStr for DigestForm {
    type Err = crate::error::Reason;

    /// As `--digest`, `digest =` and `wtxt.digest` name it: `sha256` or
    /// `tree` (the one place a digest form is read from text).
    fn from_str(s: &str) -> PResult<DigestForm> {
        match s {
            "sha256" => Ok(DigestForm::Sha256),
            "tree" => Ok(DigestForm::Tree),
            other => Err(reason!("digest: expected sha256 or tree, found `{}`", lossy(other.as_bytes(), 40))),
        }
    }
}

impl<'de> serde::Deserialize<'de> for DigestForm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<DigestForm, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
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
