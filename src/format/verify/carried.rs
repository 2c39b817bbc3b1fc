//! Arrays a verification need not read again (see [`Carried`]).

use std::collections::HashMap;

use crate::crypto::digest::Hash;
use crate::format::syntax::ArrLine;

/// Arrays of a tree-form file that need not be read again: the same bytes,
/// in the same parts, verified whole as part of an earlier generation
/// (what `wtxt log --verify` and the server's guard find between two
/// generations of a split snapshot, docs/STORAGE.md, "Checking what changed"). Each is named with its
/// tree digest and its `fastxor` share (its bytes' value as if they stood alone).
/// The verifier passes over an array listed here whose `arr` line carries
/// that digest, as a load passes over the arrays it does not keep: its
/// `arr` line is bound by the root, its chunks by its digest, and its
/// share stands in for its bytes in `fastxor`, so every check a full read
/// makes still holds. Only sound where the caller proved that the text
/// left out is the text that was verified.
#[derive(Debug, Default, Clone)]
pub struct Carried {
    shares: HashMap<String, (Hash, u64)>,
}

impl Carried {
    /// Array `name`, whose digest is `sha256` and `fastxor` share `share`, is carried.
    pub fn insert(&mut self, name: String, sha256: Hash, share: u64) {
        self.shares.insert(name, (sha256, share));
    }

    /// The share of the array of `arr`, when it is carried with that digest.
    pub fn share(&self, arr: &ArrLine) -> Option<u64> {
        self.shares.get(&arr.name).filter(|(sha, _)| *sha == arr.sha256).map(|&(_, s)| s)
    }

    /// How many arrays are carried.
    pub fn len(&self) -> usize {
        self.shares.len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }
}
