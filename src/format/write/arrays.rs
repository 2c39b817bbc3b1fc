//! Each array as the writer plans it (its layout, salt and first chunk)
//! and the lines that describe it: what the plan (`mod.rs`) and the work
//! shared between threads (`work.rs`) both build on; and the options a
//! write takes.

use crate::crypto::digest::Hash;
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::SecretKey;
use crate::format::layout::Layout;
use crate::format::syntax::{lines_for, ArrLine, Audit, ChLine, DigestForm, Meta};
use crate::model::Array;

/// What the writer needs besides the arrays.
pub struct WriteOptions<'a> {
    /// The `meta` line's values.
    pub meta: Meta,
    /// The previous generation's `merkle_this` (zeros for the first).
    pub merkle_prev: Hash,
    /// Rows per chunk for arrays of rank >= 2.
    pub rows_per_chunk: u64,
    /// Key for per-array HMACs; zeros are written without one.
    pub hmac_key: Option<&'a HmacKey>,
    /// Key for the `sign` line (or the WSUM's signature when streaming).
    pub sign_key: Option<&'a SecretKey>,
    /// The optional `audit` line.
    pub audit: Option<Audit>,
    /// Write a WTXT-S (`root_pending`, no `sign`) and return its WSUM.
    pub streaming: bool,
    /// HMACs to carry over unchanged when no key is given, by array name
    /// (recovery keeps a damaged file's tags for the arrays it rescues).
    pub carried_hmacs: Vec<(String, Hash)>,
    /// How the digests are computed: WTXT 1.1 (the default) or the tree form.
    pub digest: DigestForm,
    /// The key of the keyed tag when it is not `hmac_key`: a writer that
    /// carries tags it computed itself (recovery) binds with it.
    pub bind_key: Option<&'a HmacKey>,
}

impl<'a> WriteOptions<'a> {
    /// Options for `meta` with no keys, chain, audit or carried tags.
    pub fn new(meta: Meta, rows_per_chunk: u64) -> WriteOptions<'a> {
        WriteOptions {
            meta,
            merkle_prev: [0; 32],
            rows_per_chunk,
            hmac_key: None,
            sign_key: None,
            audit: None,
            streaming: false,
            carried_hmacs: Vec::new(),
            digest: DigestForm::Sha256,
            bind_key: None,
        }
    }

    /// The key the keyed tag is computed with, if any.
    pub(super) fn tag_key(&self) -> Option<&'a HmacKey> {
        self.hmac_key.or(self.bind_key)
    }
}

pub(super) struct ChunkSum {
    pub(super) sha256: Hash,
    pub(super) crc32c: u32,
}

pub(super) struct Plan<'a> {
    pub(super) array: &'a Array,
    pub(super) layout: Layout,
    pub(super) salt: [u8; 8],
    pub(super) first_chunk: usize,
}

/// The `arr` line of an array whose bytes give `sha256` and `hmac` (a
/// carried tag, or zeros, without a key).
pub(super) fn final_arr(p: &Plan, opts: &WriteOptions, sha256: Hash, hmac: Option<Hash>) -> ArrLine {
    let carried = opts.carried_hmacs.iter().find(|(n, _)| *n == p.array.name).map(|(_, h)| *h);
    ArrLine { sha256, hmac: hmac.or(carried).unwrap_or([0; 32]), ..placeholder_arr(p) }
}

/// A placeholder `arr` line: same width as the final one.
pub(super) fn placeholder_arr(p: &Plan) -> ArrLine {
    ArrLine {
        name: p.array.name.clone(),
        dtype: p.array.dtype,
        shape: p.array.shape.clone(),
        bytes: p.layout.bytes,
        sha256: [0; 32],
        hmac: [0; 32],
        salt: p.salt,
    }
}

pub(super) fn ch_line(p: &Plan, ix: u64, sum: Option<&ChunkSum>) -> ChLine {
    let (off, len) = p.layout.chunk_range(ix);
    let (sha256, crc32c) = sum.map_or(([0; 32], 0), |s| (s.sha256, s.crc32c));
    ChLine { ix, off, len, sha256, crc32c, lines: lines_for(len) }
}

/// Raw bytes encoded at a time: whole base64 lines (a multiple of 57), about 1 MiB.
pub(super) const ENCODE_PIECE: usize = crate::format::syntax::RAW_PER_LINE * 18396;
