//! The OMS signature file: a Sigstore bundle (v0.3, JSON) holding a DSSE
//! envelope whose payload is an in-toto Statement v1 with OMS's predicate
//! (`https://model_signing/signature/v1.0`): every file of the folder with
//! its digest. Written and read here; the signature is over DSSE's PAE of
//! the payload, made and checked with an EC key ([`crate::crypto::ec`]).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::crypto::digest::Hash;
use crate::crypto::ec::{EcPublicKey, EcSecretKey};

/// The bundle's media type, as `model_signing` 1.x writes it.
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// Earlier bundle versions: the envelope is the same.
const OLDER_MEDIA_TYPES: [&str; 2] =
    ["application/vnd.dev.sigstore.bundle+json;version=0.1", "application/vnd.dev.sigstore.bundle+json;version=0.2"];
/// DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// OMS's predicate type.
pub const PREDICATE_TYPE: &str = "https://model_signing/signature/v1.0";
const PREDICATE_TYPE_V01: &str = "https://model_signing/Digests/v0.1";

/// Largest signature file read (a bundle listing a million files is about
/// 200 MB; one of 8 MiB lists some 40,000): the heap stays within a few
/// times this, whatever the file declares.
pub const MAX_BUNDLE: u64 = 8 << 20;

/// How each file was hashed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HashType {
    /// SHA-256.
    Sha256,
    /// BLAKE3.
    Blake3,
}

impl HashType {
    fn name(self) -> &'static str {
        match self {
            HashType::Sha256 => "sha256",
            HashType::Blake3 => "blake3",
        }
    }
}

/// One file of the folder and its digest.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Resource {
    /// POSIX path relative to the folder.
    pub name: String,
    /// Its digest.
    pub digest: Hash,
}

/// What a signature says about a folder: OMS's "files" serialization.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Manifest {
    /// The folder's name (informative: renaming a folder keeps it valid).
    pub model_name: String,
    /// How each file was hashed.
    pub hash_type: HashType,
    /// Whether the signer followed links (wtxt never does).
    pub allow_symlinks: bool,
    /// Paths relative to the folder left out of the signature.
    pub ignore_paths: Vec<String>,
    /// Sorted as OMS sorts them: by path components.
    pub resources: Vec<Resource>,
}

impl Manifest {
    /// SHA-256 over every resource digest in order: the statement's subject.
    fn root_digest(&self) -> Hash {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for r in &self.resources {
            h.update(r.digest);
        }
        h.finalize().into()
    }

    /// Puts resources in OMS's order (path components compared in turn).
    pub fn sort(&mut self) {
        self.resources.sort_by(|a, b| a.name.split('/').cmp(b.name.split('/')));
    }
}

#[derive(Serialize, Deserialize)]
struct Bundle {
    #[serde(rename = "mediaType")]
    media_type: String,
    #[serde(rename = "verificationMaterial")]
    verification_material: Material,
    #[serde(rename = "dsseEnvelope")]
    dsse_envelope: Option<Envelope>,
}

#[derive(Serialize, Deserialize)]
struct Material {
    #[serde(rename = "publicKey")]
    public_key: Option<KeyHint>,
    /// Key-signed bundles carry none; read ones are skipped unparsed.
    #[serde(rename = "tlogEntries", default, skip_deserializing)]
    tlog_entries: Vec<()>,
}

#[derive(Serialize, Deserialize)]
struct KeyHint {
    #[serde(default)]
    hint: String,
}

#[derive(Serialize, Deserialize)]
struct Envelope {
    payload: String,
    #[serde(rename = "payloadType")]
    payload_type: String,
    signatures: Vec<DsseSig>,
}

#[derive(Serialize, Deserialize)]
struct DsseSig {
    sig: String,
    #[serde(default)]
    keyid: String,
}

#[derive(Serialize, Deserialize)]
struct Statement {
    #[serde(rename = "_type")]
    ty: String,
    subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    predicate_type: String,
    predicate: Predicate,
}

#[derive(Serialize, Deserialize)]
struct Subject {
    name: String,
    digest: SubjectDigest,
}

#[derive(Serialize, Deserialize)]
struct SubjectDigest {
    sha256: String,
}

#[derive(Serialize, Deserialize)]
struct Predicate {
    serialization: SerializationArgs,
    resources: Vec<ResourceDesc>,
}

#[derive(Serialize, Deserialize)]
struct SerializationArgs {
    method: String,
    hash_type: String,
    allow_symlinks: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shard_size: Option<u64>,
    #[serde(default)]
    ignore_paths: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct ResourceDesc {
    algorithm: String,
    name: String,
    digest: String,
}

/// DSSE's pre-authentication encoding of an in-toto payload.
fn pae(payload: &[u8]) -> Vec<u8> {
    let mut m = format!("DSSEv1 {} {} {} ", PAYLOAD_TYPE.len(), PAYLOAD_TYPE, payload.len()).into_bytes();
    m.extend_from_slice(payload);
    m
}

/// The signature file for `manifest`, signed with `key`. Deterministic:
/// the same manifest and key give the same bytes (RFC 6979 nonces).
pub fn sign_manifest(manifest: &Manifest, key: &EcSecretKey) -> Vec<u8> {
    let statement = Statement {
        ty: STATEMENT_TYPE.into(),
        subject: vec![Subject {
            name: manifest.model_name.clone(),
            digest: SubjectDigest { sha256: hex::encode(manifest.root_digest()) },
        }],
        predicate_type: PREDICATE_TYPE.into(),
        predicate: Predicate {
            serialization: SerializationArgs {
                method: "files".into(),
                hash_type: manifest.hash_type.name().into(),
                allow_symlinks: manifest.allow_symlinks,
                shard_size: None,
                ignore_paths: manifest.ignore_paths.clone(),
            },
            resources: manifest
                .resources
                .iter()
                .map(|r| ResourceDesc {
                    algorithm: manifest.hash_type.name().into(),
                    name: r.name.clone(),
                    digest: hex::encode(r.digest),
                })
                .collect(),
        },
    };
    let payload = serde_json::to_vec_pretty(&statement).expect("a statement serializes");
    let bundle = Bundle {
        media_type: BUNDLE_MEDIA_TYPE.into(),
        verification_material: Material {
            public_key: Some(KeyHint { hint: key.public().hint() }),
            tlog_entries: Vec::new(),
        },
        dsse_envelope: Some(Envelope {
            payload: B64.encode(&payload),
            payload_type: PAYLOAD_TYPE.into(),
            signatures: vec![DsseSig { sig: B64.encode(key.sign(&pae(&payload))), keyid: String::new() }],
        }),
    };
    let mut out = serde_json::to_vec_pretty(&bundle).expect("a bundle serializes");
    out.push(b'\n');
    out
}

/// Why a signature file does not vouch for anything.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn refuse<T>(m: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal(m.into()))
}

/// Checks a signature file with `key` and gives the manifest it signs:
/// media and payload types, key hint, the ECDSA signature over the PAE, the
/// statement's types, its subject's digest over the resources, and every
/// resource name (relative, inside the folder, listed once).
pub fn open(bytes: &[u8], key: &EcPublicKey) -> Result<Manifest, Refusal> {
    let bundle: Bundle =
        serde_json::from_slice(bytes).or_else(|e| refuse(format!("not a Sigstore bundle (JSON): {e}")))?;
    if bundle.media_type != BUNDLE_MEDIA_TYPE && !OLDER_MEDIA_TYPES.contains(&bundle.media_type.as_str()) {
        return refuse(format!("media type {:?} is not a Sigstore bundle's", bundle.media_type));
    }
    let Some(env) = bundle.dsse_envelope else { return refuse("the bundle holds no DSSE envelope") };
    if env.payload_type != PAYLOAD_TYPE {
        return refuse(format!("payload type {:?}, expected {PAYLOAD_TYPE:?}", env.payload_type));
    }
    if let Some(hint) = bundle.verification_material.public_key.map(|k| k.hint).filter(|h| !h.is_empty()) {
        if hint != key.hint() {
            return refuse("signed by another key (the bundle's key hint does not match the public key)");
        }
    }
    let [sig] = &env.signatures[..] else {
        return refuse(format!("expected one signature in the envelope, found {}", env.signatures.len()));
    };
    let payload = B64.decode(&env.payload).or_else(|_| refuse("the envelope's payload is not base64"))?;
    let der = B64.decode(&sig.sig).or_else(|_| refuse("the envelope's signature is not base64"))?;
    if !key.verify(&pae(&payload), &der) {
        return refuse("the signature over the statement does not verify with this public key");
    }
    let st: Statement = serde_json::from_slice(&payload)
        .or_else(|e| refuse(format!("the payload is not an in-toto statement: {e}")))?;
    if st.predicate_type == PREDICATE_TYPE_V01 {
        return refuse("predicate type v0.1 (model_signing before 1.0) is not read: re-sign with model_signing 1.x");
    }
    if st.ty != STATEMENT_TYPE || st.predicate_type != PREDICATE_TYPE {
        return refuse(format!("statement {:?} / predicate {:?} is not an OMS signature", st.ty, st.predicate_type));
    }
    let [subject] = &st.subject[..] else {
        return refuse(format!("expected one subject, found {}", st.subject.len()));
    };
    let ser = &st.predicate.serialization;
    let hash_type = match (ser.method.as_str(), ser.hash_type.as_str()) {
        ("files", "sha256") => HashType::Sha256,
        ("files", "blake3") => HashType::Blake3,
        ("files", other) => return refuse(format!("hash type {other:?} is not supported (sha256 and blake3 are)")),
        (other, _) => return refuse(format!("serialization {other:?} is not supported (\"files\" is)")),
    };
    let mut resources = Vec::with_capacity(st.predicate.resources.len());
    for r in st.predicate.resources {
        check_name(&r.name)?;
        if r.algorithm != ser.hash_type {
            return refuse(format!("{}: algorithm {:?}, expected {:?}", r.name, r.algorithm, ser.hash_type));
        }
        let mut digest = [0u8; 32];
        hex::decode_to_slice(&r.digest, &mut digest)
            .or_else(|_| refuse(format!("{}: expected a 64-digit hex digest", r.name)))?;
        resources.push(Resource { name: r.name, digest });
    }
    let m = Manifest {
        model_name: subject.name.clone(),
        hash_type,
        allow_symlinks: ser.allow_symlinks,
        ignore_paths: ser.ignore_paths.clone(),
        resources,
    };
    if hex::encode(m.root_digest()) != subject.digest.sha256 {
        return refuse("the subject's digest does not match the resources listed");
    }
    let mut names: Vec<&str> = m.resources.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return refuse(format!("{} is listed twice", w[0]));
    }
    Ok(m)
}

/// A resource name must stay inside the folder: relative, no `..`, `.` or
/// empty component, no backslash or control character.
fn check_name(name: &str) -> Result<(), Refusal> {
    let bad = name.is_empty()
        || name.starts_with('/')
        || name.split('/').any(|c| c.is_empty() || c == "." || c == "..")
        || name.chars().any(|c| c == '\\' || c.is_control());
    if bad {
        return refuse(format!("resource name {name:?} is not a path inside the folder"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        Manifest {
            model_name: "m".into(),
            hash_type: HashType::Sha256,
            allow_symlinks: false,
            ignore_paths: vec!["model.sig".into()],
            resources: vec![Resource { name: "a.bin".into(), digest: [7; 32] }],
        }
    }

    #[test]
    fn signs_and_opens() {
        let k = EcSecretKey::generate_p256().unwrap();
        let sig = sign_manifest(&manifest(), &k);
        assert_eq!(sig, sign_manifest(&manifest(), &k));
        assert_eq!(open(&sig, &k.public()).unwrap(), manifest());
        let other = EcSecretKey::generate_p256().unwrap();
        assert!(open(&sig, &other.public()).unwrap_err().0.contains("another key"));
    }

    #[test]
    fn refuses_names_outside_and_tampering() {
        let k = EcSecretKey::generate_p256().unwrap();
        for name in ["../x", "/etc/passwd", "a//b", "a/./b", ""] {
            let mut m = manifest();
            m.resources[0].name = name.into();
            assert!(open(&sign_manifest(&m, &k), &k.public()).unwrap_err().0.contains("inside the folder"), "{name}");
        }
        let text = String::from_utf8(sign_manifest(&manifest(), &k)).unwrap();
        let wrong = text.replace(BUNDLE_MEDIA_TYPE, "application/json");
        assert!(open(wrong.as_bytes(), &k.public()).unwrap_err().0.contains("media type"));
        assert!(open(b"[[[[", &k.public()).unwrap_err().0.contains("JSON"));
        let deep = "[".repeat(100_000);
        assert!(open(deep.as_bytes(), &k.public()).is_err());
    }
}
