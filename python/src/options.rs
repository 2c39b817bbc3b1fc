//! The option dicts the Python side builds (`wtxt._trust`, `wtxt._writing`),
//! mapped onto the library's option pieces.

use std::path::PathBuf;

use pyo3::prelude::*;
use wtxt::crypto::{HmacKey, TrustedKeys};
use wtxt::options::{DigestChoice, HmacFile, KeyFiles, OmsFile, Output, PartSizeChoice, SignFile, TrustFiles};

/// What a reader of a snapshot demands of it, as paths: the dict
/// `wtxt._trust` builds, one key per field.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct Trust {
    hmac_key: Option<PathBuf>,
    pubkey: Option<PathBuf>,
    trusted_keys: Option<PathBuf>,
    /// A signing key whose public half is the one key trusted, when
    /// neither `pubkey` nor `trusted_keys` names one (a writer's loads).
    signer: Option<PathBuf>,
    require_signature: bool,
    allow_unbound: bool,
    /// The snapshot whose repository's signing policy (`wtxt.trustedKeys`,
    /// `wtxt.requireSignature`) holds when no key is named, as `wtxt
    /// verify` holds it; a revision's temporary copy names the work tree's file.
    policy: Option<PathBuf>,
}

/// [`Trust`] with its keys read.
#[derive(Default)]
pub(crate) struct TrustKeys {
    pub(crate) hmac_key: Option<HmacKey>,
    pub(crate) trusted: Option<TrustedKeys>,
    pub(crate) require_signature: bool,
    pub(crate) allow_unbound: bool,
}

impl Trust {
    pub(crate) fn keys(self) -> Result<TrustKeys, wtxt::Error> {
        let files = KeyFiles {
            hmac: HmacFile { hmac_key: self.hmac_key, ..HmacFile::default() },
            trust: TrustFiles { pubkey: self.pubkey, trusted_keys: self.trusted_keys },
            ..KeyFiles::default()
        };
        let (trusted, require_signature) = match (files.trust.keys()?, self.signer, &self.policy) {
            (None, Some(signer), _) => (
                Some(TrustedKeys::single(wtxt::crypto::SecretKey::from_file(&signer)?.public())),
                self.require_signature,
            ),
            (None, None, Some(file)) => wtxt::git::signature_policy(file, None, self.require_signature)?,
            (trusted, _, _) => (trusted, self.require_signature),
        };
        Ok(TrustKeys { hmac_key: files.hmac.key()?, trusted, require_signature, allow_unbound: self.allow_unbound })
    }
}

impl TrustKeys {
    pub(crate) fn verify_options(&self) -> wtxt::format::VerifyOptions<'_> {
        wtxt::format::VerifyOptions {
            hmac_key: self.hmac_key.as_ref(),
            trusted: self.trusted.as_ref(),
            require_signature: self.require_signature,
            allow_unbound: self.allow_unbound,
            ..Default::default()
        }
    }
}

/// The options every Python writer of a snapshot takes, as paths and
/// values: the dict `wtxt._writing` builds, one key per field.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct Writing {
    prev: Option<PathBuf>,
    sign_key: Option<PathBuf>,
    hmac_key: Option<PathBuf>,
    gen: Option<u64>,
    ts: Option<String>,
    part_size: Option<String>,
    oms_key: Option<PathBuf>,
    /// `"sha256"` (WTXT 1.1) or `"tree"`.
    digest: Option<String>,
}

impl Writing {
    /// The key files named (no trust: a writer's inputs are arrays; no
    /// key from the environment: Python names its keys).
    pub(crate) fn key_files(&self) -> KeyFiles {
        KeyFiles {
            hmac: HmacFile { hmac_key: self.hmac_key.clone(), ..HmacFile::default() },
            sign: SignFile { sign_key: self.sign_key.clone() },
            oms: OmsFile { oms_key: self.oms_key.clone() },
            ..KeyFiles::default()
        }
    }

    /// The part size and digest form asked for, as said (unset: the defaults).
    pub(crate) fn choices(&self) -> Result<(PartSizeChoice, DigestChoice), wtxt::Error> {
        let part_size =
            self.part_size.as_deref().map(|s| s.parse().map_err(|m| wtxt::Error::usage(format!("part_size: {m}"))));
        let digest = self.digest.as_deref().map(|d| d.parse().map_err(wtxt::Error::usage));
        Ok((PartSizeChoice { part_size: part_size.transpose()? }, DigestChoice { digest: digest.transpose()? }))
    }

    /// How the snapshot is stored.
    pub(crate) fn output(&self) -> Result<Output, wtxt::Error> {
        let (parts, digest) = self.choices()?;
        Ok(Output::of(parts, digest))
    }

    /// Refuses what says where a generation goes for a writer whose
    /// generations follow its repository.
    pub(crate) fn no_generation(&self, who: &str) -> Result<(), wtxt::Error> {
        if self.prev.is_some() || self.gen.is_some() || self.ts.is_some() {
            return Err(wtxt::Error::usage(format!("{who}: prev, gen and ts are not given here")));
        }
        Ok(())
    }

    /// The snapshot options they give (keys read now).
    pub(crate) fn options(self) -> Result<wtxt::ops::SnapshotOptions, wtxt::Error> {
        let output = self.output()?;
        let keys = self.key_files().load()?;
        Ok(wtxt::ops::SnapshotOptions {
            meta: wtxt::options::MetaFields { gen: self.gen, ts: self.ts, ..Default::default() },
            prev: self.prev.map(wtxt::ops::Prev::File),
            keys,
            output,
            ..Default::default()
        })
    }
}
