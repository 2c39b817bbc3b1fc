//! What the verifier found: each problem with its kind and line, each
//! array's figures, and the report's JSON form.

use serde::Serialize;

use crate::crypto::digest::Hash;
use crate::format::read::{ArrayStart, Header};
use crate::format::syntax::{ArrLine, ChLine};

/// The outcome for a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SigStatus {
    /// Signed by a trusted key, and the signature holds.
    Valid,
    /// The trusted key named by `keyid` does not accept the signature.
    Invalid,
    /// No signature.
    Absent,
    /// Signed, but by no key the verifier was told to trust.
    Untrusted,
}

/// What the keyed tag that binds the file whole ([`crate::format::bind`]) showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Binding {
    /// The tag holds under the key given.
    Bound,
    /// The tag does not hold.
    Invalid,
    /// No tag: the key (if one was given) authenticated each array alone,
    /// not the generation, the names or the set of arrays.
    Absent,
    /// A tag, but no key to check it with.
    NotChecked,
}

/// Which check a problem failed; callers match on it, never on the text.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// Line rules, grammar, order, layout: the file is not well formed.
    Structure,
    /// A chunk's parity, base64, CRC32C or SHA-256.
    Chunk,
    /// An array's SHA-256.
    Array,
    /// An array's HMAC: wrong, or missing although a key was given.
    Hmac,
    /// `sha256_all`, `merkle_this` or `fastxor` of the `root` line.
    Root,
    /// A WTXT-S verified without its WSUM.
    RootPending,
    /// The WSUM does not match the file.
    Wsum,
    /// The keyed tag that binds the file: missing although a key was
    /// given, wrong, or a salt it binds that is not derived.
    Binding,
    /// A signature that fails, is missing or is not checkable as required.
    Signature,
    /// The link to the previous generation.
    Chain,
    /// A part of a split snapshot: missing, or not the one its head lists.
    Part,
    /// The OpenSSF Model Signing signature beside the snapshot.
    Oms,
}

/// One problem, on a 1-based line.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Problem {
    /// What kind of check failed.
    pub kind: ProblemKind,
    /// Its line (0: the file as a whole).
    pub line: u64,
    /// What was expected.
    pub message: String,
    /// The part file of a split snapshot the line is in (`None`: the file given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The array it is in, by its WTXT name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    /// That array's name in the model (`__names`), set by the caller
    /// ([`Report::name_originals`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
}

impl Problem {
    /// A problem of `kind` on `line`.
    pub fn at(kind: ProblemKind, line: u64, message: impl Into<String>) -> Problem {
        Problem { kind, line, message: message.into(), file: None, array: None, original: None }
    }

    /// The same problem, in `array`.
    pub fn in_array(self, array: &str) -> Problem {
        Problem { array: Some(array.to_string()), ..self }
    }

    /// What was expected, with the array's name in the model where it has one.
    pub fn text(&self) -> String {
        match &self.original {
            Some(o) => format!("{} (in the model: {o})", self.message),
            None => self.message.clone(),
        }
    }

    /// The problem as an error of kind check, naming its part file if any.
    pub fn to_error(&self) -> crate::Error {
        let e = crate::error::check_at(self.line, self.text());
        match &self.file {
            Some(f) => e.in_file(f),
            None => e,
        }
    }

    /// A failed check as a problem of `kind`, keeping its file and line.
    pub fn from_error(kind: ProblemKind, e: crate::Error) -> Problem {
        let line = match e.position() {
            crate::error::Position::Line(n) => n,
            _ => 0,
        };
        let file = e.path().map(|p| p.display().to_string());
        Problem { file, ..Problem::at(kind, line, e.message()) }
    }
}

/// The outcome for one array.
#[derive(Clone, Debug, Serialize)]
pub struct ArrayReport {
    /// WTXT name.
    pub name: String,
    /// The model's own name, when the snapshot maps it (`__names`); filled
    /// by the caller, which reads `__names` ([`Report::name_originals`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// Element type.
    pub dtype: String,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Raw bytes.
    pub bytes: u64,
    /// True when every check of the array passed.
    pub ok: bool,
    /// True only when the HMAC was present, a key was given and it matched.
    pub authenticated: bool,
    /// `ix` of chunks that failed a check.
    pub bad_chunks: Vec<u64>,
    /// Line of the `arr` line.
    pub line: u64,
}

/// The outcome of a verification (`verify --json` prints it).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// True when every check passed.
    pub ok: bool,
    /// Generation.
    pub gen: u64,
    /// Timestamp.
    pub ts: String,
    /// `build` token.
    pub build: String,
    /// True for a WTXT-S.
    pub streaming: bool,
    /// Every array.
    pub arrays: Vec<ArrayReport>,
    /// The signature's status.
    pub signature: SigStatus,
    /// Key id of the signature.
    #[serde(serialize_with = "as_hex")]
    pub keyid: Option<[u8; 8]>,
    /// `sha256_all` recomputed.
    #[serde(serialize_with = "as_hex")]
    pub sha256_all: Option<Hash>,
    /// `merkle_prev`.
    #[serde(serialize_with = "as_hex")]
    pub merkle_prev: Option<Hash>,
    /// `merkle_this` recomputed.
    #[serde(serialize_with = "as_hex")]
    pub merkle_this: Option<Hash>,
    /// `fastxor` recomputed.
    #[serde(serialize_with = "as_hex")]
    pub fastxor: Option<[u8; 8]>,
    /// Every problem, in verification order.
    pub errors: Vec<Problem>,
    /// The OMS signature's verdict ("valid", "invalid", "absent"), when
    /// one was asked for (`--oms-pubkey`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oms: Option<&'static str>,
    /// The keyed tag's verdict.
    pub binding: Binding,
    /// Whether an HMAC key was given (else no array can be authenticated).
    pub keyed: bool,
    /// The parsed header, when the file got that far.
    #[serde(skip)]
    pub header: Option<Header>,
    /// The `audit` line's pairs, if any.
    #[serde(skip)]
    pub audit: Option<crate::format::syntax::Audit>,
    /// Chunks read past undecoded, because the sink did not want them (a
    /// load of some rows of a tree-form file, `format::Load::rows`): their
    /// bytes were not checked, nor `fastxor`, which covers every byte. 0
    /// for `wtxt verify`.
    #[serde(skip)]
    pub skipped_chunks: u64,
    /// Arrays passed over whole, nothing of them read but their `arr`
    /// line (a load of some arrays of a tree-form file): as unchecked as
    /// the chunks above, and not counted among them.
    #[serde(skip)]
    pub arrays_passed_over: u64,
    /// Each array's `fastxor` share, in order (meaningful when the report
    /// is ok and `fastxor` was checked): what [`super::Carried`] takes.
    #[serde(skip)]
    pub fastxor_shares: Vec<u64>,
}

/// Hashes and ids are bytes in the report and lowercase hex in its JSON.
fn as_hex<S: serde::Serializer, T: AsRef<[u8]>>(v: &Option<T>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match v {
        Some(b) => s.serialize_str(&hex::encode(b)),
        None => s.serialize_none(),
    }
}

impl Report {
    /// The report as `verify --json` prints it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }

    /// `fastxor` as the number the `root` line shows.
    pub fn fastxor_value(&self) -> Option<u64> {
        self.fastxor.map(u64::from_be_bytes)
    }

    /// Gives each array the model's own name from `names` (WTXT name to
    /// original, as `__names` holds them).
    pub fn name_originals(&mut self, names: &std::collections::BTreeMap<String, String>) {
        for a in &mut self.arrays {
            a.original = names.get(&a.name).cloned();
        }
        for p in &mut self.errors {
            p.original = p.array.as_ref().and_then(|a| names.get(a)).cloned();
        }
    }

    /// The arrays that fail, by the model's names where known, as a clause
    /// for a one-line message (`, in a, b and 4 more array(s)`; empty when
    /// none): a part or root problem names no array itself.
    pub fn failing_arrays(&self) -> String {
        let mut failing: Vec<&str> = Vec::new();
        for e in &self.errors {
            if let Some(n) = e.original.as_deref().or(e.array.as_deref()) {
                if !failing.contains(&n) {
                    failing.push(n);
                }
            }
        }
        match failing.len() {
            0 => String::new(),
            n if n <= 3 => format!(", in {}", failing.join(", ")),
            n => format!(", in {} and {} more array(s)", failing[..3].join(", "), n - 3),
        }
    }

    /// The first error in verification order (the root cause), for one-line messages.
    pub fn first_error(&self) -> Option<&Problem> {
        self.errors.first()
    }
}

/// Receives the decoded arrays of a file while it is verified (extract uses it).
pub trait Sink {
    /// An array begins.
    fn array(&mut self, a: &ArrayStart);
    /// Its next bytes, in order.
    fn data(&mut self, bytes: &[u8]);
    /// Whether the bytes of chunk `ch` of `a` are wanted. Only in the tree
    /// form may an unwanted chunk go undecoded (its `ch` line's digest, bound
    /// to the root through its array's, stands in for it); the 1.1 form's
    /// digests read every byte, so there every chunk is decoded. Asked
    /// when the chunk is read, which may be before [`Sink::array`] of `a`.
    fn wants(&self, _a: &ArrayStart, _ch: &ChLine) -> bool {
        true
    }
    /// Whether any byte of the array of `arr` is wanted. When none is, the
    /// tree form passes over it whole ([`crate::format::read::Visitor::passes_over`]):
    /// its `arr` line, bound by the root, is all that is read of it.
    fn wants_array(&self, _arr: &ArrLine) -> bool {
        true
    }
    /// A chunk of the current array begins; the data that follows starts
    /// at its `off` (a chunk not decoded has none).
    fn chunk(&mut self, _ch: &ChLine) {}
    /// Whether the bytes go straight into memory the caller keeps (a
    /// failure leaves it written). The signature policy, which the header
    /// decides, is then applied before the first array is read, so a file
    /// the policy refuses never reaches that memory.
    fn in_place(&self) -> bool {
        false
    }
}
