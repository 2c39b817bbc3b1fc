//! The strict verifier, in the seed's Restore/Verify order: line rules and
//! structure, parity, CRC32C, chunk SHA-256, array SHA-256, HMAC, `sha256_all`,
//! `merkle_this`, `fastxor`, then the signature and the chain.
//!
//! The reader decodes on the calling thread; two workers share the decoded
//! blocks: one computes each array's digest paired with `sha256_all`, and
//! `fastxor`; the other the chunks' digests, two chunks at a time, or each
//! paired with the array's HMAC ([`crate::crypto::sha_pair`]: two
//! digests cost little more than one). From four threads on, the chunks
//! are decoded and hashed on the others, and the first worker computes
//! `sha256_all` alone ([`crate::threads::STREAMS_ALONE_FROM`]). Blocks
//! come from a small recycled pool over bounded channels, so memory stays
//! constant whatever the file size.

use std::io::Read;

use crossbeam_channel::{bounded, unbounded};

use crate::crypto::digest::{merkle_this, Hash};
use crate::crypto::mac::HmacKey;
use crate::crypto::sign::{SecretKey, TrustedKeys};
use crate::error::{Kind, Result};
use crate::format::read::{read_on, Header, LineReader};
use crate::format::syntax::{Root, SignLine, Wsum};
use crate::limits::PIPELINE_DEPTH;

mod carried;
mod hashing;
mod report;

pub use carried::Carried;
use hashing::{ChunkDigests, ChunkWork, Expect, Hashers, Hashing, Msg, RootDigests, RootWork};
pub use report::{ArrayReport, Binding, Problem, ProblemKind, Report, SigStatus, Sink};

/// What to check besides the file itself.
#[derive(Default, Clone)]
pub struct VerifyOptions<'a> {
    /// Checks per-array HMACs when given.
    pub hmac_key: Option<&'a HmacKey>,
    /// Keys whose signatures count as valid.
    pub trusted: Option<&'a TrustedKeys>,
    /// Fails unless a trusted key's valid signature is present.
    pub require_signature: bool,
    /// The WSUM that finalizes a WTXT-S.
    pub wsum: Option<&'a Wsum>,
    /// The previous generation's header: gen must follow it and
    /// `merkle_prev` must equal its `merkle_this`.
    pub prev: Option<&'a Header>,
    /// With an HMAC key, accept arrays whose `hmac` is all zeros (reported
    /// unauthenticated). Without it, every array must authenticate: an
    /// attacker without the key could otherwise change an array and zero its tag.
    pub allow_unauthenticated: bool,
    /// With an HMAC key, accept a file without the keyed tag that binds it
    /// whole (FORMAT.md section 5): a 1.1 file from a writer that binds
    /// nothing. Without it such a file fails: stripping the tag would
    /// otherwise undo what it binds.
    pub allow_unbound: bool,
    /// Fails a signature by a key not in `trusted`: a command about to sign
    /// must not pass on what it cannot check.
    pub refuse_untrusted: bool,
    /// Arrays of a tree-form file whose bytes were proven before (see
    /// [`Carried`]); the reader must leave their chunks out.
    pub carried: Option<&'a Carried>,
}

/// What a command that signs, HMACs or chains its output demands of its
/// WTXT inputs (cli.md "Signing what was not verified"): every array
/// authenticated when an HMAC key is given; a valid signature by a trusted
/// key when trusted keys are configured; and, when it signs, no signature
/// it cannot check (the signer's own key counts as trusted, so a stale
/// signature of its own is caught as invalid).
#[derive(Clone, Default)]
pub struct InputTrust {
    /// Every array must authenticate with this key.
    pub hmac_key: Option<HmacKey>,
    /// The configured trusted keys plus, when signing, the signer's own.
    pub trusted: Option<TrustedKeys>,
    /// Fail unless a trusted key signed.
    pub require_signature: bool,
    /// Fail on a signature by a key not trusted.
    pub refuse_untrusted: bool,
    /// With a key: accept all-zero tags (reported unauthenticated).
    pub allow_unauthenticated: bool,
    /// With a key: accept a file without the keyed tag (reported unbound).
    pub allow_unbound: bool,
}

impl InputTrust {
    /// The demands for a command with these keys.
    pub fn new(
        hmac_key: Option<&HmacKey>,
        trusted: Option<&TrustedKeys>,
        sign_key: Option<&SecretKey>,
        allow_unauthenticated: bool,
        allow_unbound: bool,
    ) -> InputTrust {
        let require_signature = trusted.is_some_and(|t| !t.is_empty());
        let mut keys = trusted.cloned();
        if let Some(k) = sign_key {
            keys.get_or_insert_with(TrustedKeys::default).add(k.public());
        }
        InputTrust {
            hmac_key: hmac_key.cloned(),
            trusted: keys,
            require_signature,
            refuse_untrusted: sign_key.is_some(),
            allow_unauthenticated,
            allow_unbound,
        }
    }

    /// The verifier's options that enforce these demands.
    pub fn options(&self) -> VerifyOptions<'_> {
        VerifyOptions {
            hmac_key: self.hmac_key.as_ref(),
            trusted: self.trusted.as_ref(),
            require_signature: self.require_signature,
            allow_unauthenticated: self.allow_unauthenticated,
            allow_unbound: self.allow_unbound,
            refuse_untrusted: self.refuse_untrusted,
            ..Default::default()
        }
    }
}

/// What a header alone proves, for a file chained from without reading its
/// arrays (`--prev`, HEAD's blob in the Git filter): `merkle_this` agrees
/// with its own fields, and the signature holds under `opts`' keys and
/// policy. The first failure is returned with its line.
pub fn check_header(h: &Header, opts: &VerifyOptions) -> std::result::Result<SigStatus, Problem> {
    let mut problems = Vec::new();
    let status = match &h.root {
        Root::Final { .. } => {
            check_merkle_this(h, &mut problems);
            signature_status(h.sign.as_ref(), &h.signed_bytes, 5, opts, &mut problems)
        }
        Root::Pending => {
            problems.push(Problem::at(ProblemKind::RootPending, ROOT_LINE, "root pending: finalize it first"));
            SigStatus::Absent
        }
    };
    match problems.into_iter().next() {
        Some(p) => Err(p),
        None => Ok(status),
    }
}

/// The first problem the signature policy of `opts` finds in a file from
/// its header alone (and its WSUM): for a reader that decodes into memory
/// the caller keeps, before any of it is written. A WTXT-S with no WSUM is
/// refused here as it would be once read.
fn policy_of_header(h: &Header, opts: &VerifyOptions) -> Option<Problem> {
    let mut problems = Vec::new();
    match (&h.root, opts.wsum) {
        (Root::Final { .. }, _) => {
            signature_status(h.sign.as_ref(), &h.signed_bytes, 5, opts, &mut problems);
        }
        (Root::Pending, Some(w)) => {
            signature_status(w.sign.as_ref(), w.signed_part().as_bytes(), ROOT_LINE, opts, &mut problems);
        }
        (Root::Pending, None) => {
            problems.push(Problem::at(ProblemKind::RootPending, ROOT_LINE, "root pending: give --wsum"));
        }
    }
    problems.into_iter().next()
}

/// The status of a signature (or its absence) under `opts`, with the
/// problems the policy finds in it.
fn signature_status(
    sign: Option<&SignLine>,
    signed: &[u8],
    line: u64,
    opts: &VerifyOptions,
    problems: &mut Vec<Problem>,
) -> SigStatus {
    let status = match sign {
        None => SigStatus::Absent,
        Some(s) => match opts.trusted.and_then(|t| t.find(&s.keyid)) {
            None => SigStatus::Untrusted,
            Some(k) if k.verify(signed, &s.signature) => SigStatus::Valid,
            Some(_) => {
                let m = format!("signature by keyid {} does not verify", hex::encode(s.keyid));
                problems.push(Problem::at(ProblemKind::Signature, line, m));
                SigStatus::Invalid
            }
        },
    };
    let keyid = sign.map(|s| hex::encode(s.keyid)).unwrap_or_default();
    if opts.require_signature && matches!(status, SigStatus::Absent | SigStatus::Untrusted) {
        let why = match status {
            SigStatus::Absent => "the file is not signed".to_string(),
            _ => format!("keyid {keyid} is not a trusted key"),
        };
        problems.push(Problem::at(ProblemKind::Signature, line, format!("signature required: {why}")));
    } else if opts.refuse_untrusted && status == SigStatus::Untrusted {
        let m = format!(
            "signed by keyid {keyid}, which no trusted key checks: nothing is signed that was not verified first \
             (give --trusted-keys or --pubkey)"
        );
        problems.push(Problem::at(ProblemKind::Signature, line, m));
    } else if opts.trusted.is_some() && status == SigStatus::Untrusted {
        // Keys named are the ones that may sign: another key's signature is
        // refused whether or not a signature is required (an unsigned file
        // is the policy's to allow).
        let m = format!("signed by keyid {keyid}, which is not among the trusted keys");
        problems.push(Problem::at(ProblemKind::Signature, line, m));
    }
    status
}

/// Verifies a WTXT (or WTXT-S with its WSUM) read from `input`. Returns an
/// error only when reading fails; every failed check is in the report.
pub fn verify<R: Read>(input: R, opts: &VerifyOptions, sink: Option<&mut dyn Sink>) -> Result<Report> {
    verify_lines(LineReader::new(input), opts, sink)
}

/// [`verify`] of the text `lines` reads (one that passes over the chunks
/// `sink` does not want, [`LineReader::skipping`]).
pub fn verify_lines<R: Read>(
    lines: LineReader<R>,
    opts: &VerifyOptions,
    sink: Option<&mut dyn Sink>,
) -> Result<Report> {
    let (pool_tx, pool_rx) = unbounded::<Vec<u8>>();
    let key = opts.hmac_key;
    let policy = |h: &Header| policy_of_header(h, opts);
    let vis = |hashers| Hashing {
        hashers,
        pool_rx,
        pool_tx,
        arrays: Vec::new(),
        expected: Vec::new(),
        problems: Vec::new(),
        sink,
        key_given: key.is_some(),
        tree: false,
        header: None,
        carried: opts.carried,
        audit: None,
        audit_line: 0,
        skipped: 0,
        policy: &policy,
        refused: false,
    };
    // One thread of work (`--threads 1`): the hashing runs on the reading
    // thread as each block is decoded; more: on two threads beside it, and
    // from four on, the chunks are decoded (and hashed) on the others, and
    // `sha256_all` runs alone on its thread.
    let threads = crate::threads::threads();
    let decoders = threads.saturating_sub(3);
    let alone = threads >= crate::threads::STREAMS_ALONE_FROM;
    let (read_result, vis, roots, chunks) = if threads == 1 {
        let mut vis = vis(Hashers::Inline(Box::default(), Box::new(ChunkWork::new(key, false))));
        let r = read_on(lines, &mut vis, 0);
        let Hashers::Inline(root, chunk) = std::mem::replace(&mut vis.hashers, Hashers::Threads(Vec::new())) else {
            unreachable!("set above")
        };
        (r, vis, root.finish(), chunk.finish())
    } else {
        std::thread::scope(|s| {
            let (tx_a, rx_a) = bounded::<Msg>(PIPELINE_DEPTH);
            let (tx_b, rx_b) = bounded::<Msg>(PIPELINE_DEPTH);
            let wa = s.spawn(move || {
                let mut w = RootWork { alone, ..Default::default() };
                rx_a.into_iter().for_each(|m| w.take(m));
                w.finish()
            });
            let wb = s.spawn(move || {
                let mut w = ChunkWork::new(key, alone);
                rx_b.into_iter().for_each(|m| w.take(m));
                w.finish()
            });
            let mut vis = vis(Hashers::Threads(vec![tx_a, tx_b]));
            let r = read_on(lines, &mut vis, decoders);
            vis.hashers = Hashers::Threads(Vec::new());
            let a = wa.join().expect("array and root hashing thread");
            let b = wb.join().expect("chunk hashing thread");
            (r, vis, a, b)
        })
    };
    let Hashing {
        mut arrays,
        expected,
        mut problems,
        header: seen_header,
        audit,
        audit_line,
        tree,
        skipped,
        refused,
        ..
    } = vis;
    // Arrays passed over unread, with no share to stand in for their bytes.
    let passed_over = expected.iter().filter(|e| e.passed_over && e.share.is_none()).count() as u64;
    let (mut roots, mut chunks) = (roots, chunks);
    if let Some((arrays, fastxor, shares)) = chunks.alone.take() {
        roots.arrays = arrays;
        roots.shares = shares;
        if let Some((_, fx)) = roots.root.as_mut() {
            *fx = fastxor;
        }
    }
    if tree {
        tree_digests(&expected, key, &mut roots, &mut chunks);
    }
    for (ai, ix, line) in std::mem::take(&mut chunks.bad_chunks) {
        let m = format!("chunk {ix} of array {}: sha256 does not match its bytes", arrays[ai].name);
        problems.push(Problem::at(ProblemKind::Chunk, line, m).in_array(&arrays[ai].name));
        arrays[ai].bad_chunks.push(ix);
    }
    let header = match read_result {
        Ok(h) => Some(h),
        // Its problem is already among the others.
        Err(_) if refused => None,
        Err(e) if e.kind() == Kind::Io || e.kind() == Kind::Input => return Err(e),
        Err(e) => {
            // A reader's own failure (a split snapshot's part) names its file.
            let kind = if e.path().is_some() { ProblemKind::Part } else { ProblemKind::Structure };
            problems.push(Problem::from_error(kind, e));
            None
        }
    };
    // Errors come in the seed's verification order, each stage in file
    // order, so the first one names the root cause, not its consequences.
    problems.sort_by_key(|p| p.line);
    let complete = header.is_some();
    judge_arrays(&mut arrays, &expected, &roots.arrays, &chunks.macs, opts, &mut problems);

    let mut report = Report {
        ok: false,
        gen: 0,
        ts: String::new(),
        build: String::new(),
        streaming: false,
        arrays,
        signature: SigStatus::Absent,
        keyid: None,
        sha256_all: None,
        merkle_prev: None,
        merkle_this: None,
        fastxor: None,
        errors: Vec::new(),
        oms: None,
        header: header.clone().or(seen_header.clone()),
        audit,
        binding: Binding::NotChecked,
        keyed: key.is_some(),
        skipped_chunks: skipped,
        arrays_passed_over: passed_over,
        fastxor_shares: std::mem::take(&mut roots.shares),
    };
    if let (Some(h), Some((sha_all, fastxor))) = (header.as_ref(), roots.root.filter(|_| complete)) {
        // `fastxor` covers every byte: not known when some went undecoded.
        let fastxor = (skipped == 0 && passed_over == 0).then_some(fastxor);
        check_root(h, &sha_all, fastxor, opts, &mut report, &mut problems);
        report.binding = check_binding(h, &report, audit_line, &expected, opts, &mut problems);
    }
    if let Some(h) = header.as_ref().or(seen_header.as_ref()) {
        report.gen = h.meta.gen;
        report.ts = h.meta.ts.as_str().to_string();
        report.build = h.meta.build.clone();
    }
    report.ok = complete && problems.is_empty();
    report.errors = problems;
    Ok(report)
}

/// The keyed tag that binds the file whole (FORMAT.md section 5), checked
/// against the root as verified: with a key it must be there (unless
/// `allow_unbound`) and hold; wherever it is, every salt must derive from
/// `gen` and the array's name, so that no array of another generation
/// stands in one of this.
fn check_binding(
    h: &Header,
    report: &Report,
    audit_line: u64,
    expected: &[Expect],
    opts: &VerifyOptions,
    problems: &mut Vec<Problem>,
) -> Binding {
    let found = match report.audit.as_ref().map(crate::format::bind::find) {
        None | Some(Ok(None)) => None,
        Some(Err(m)) => {
            problems.push(Problem::at(ProblemKind::Binding, audit_line, m));
            return Binding::Absent;
        }
        Some(Ok(Some((tag, before)))) => Some((tag, before)),
    };
    if found.is_some() {
        let gen = h.meta.gen_str();
        for (a, exp) in report.arrays.iter().zip(expected) {
            if crate::crypto::digest::derive_salt(&gen, &a.name) != exp.salt {
                let m = format!(
                    "array {}: salt {} is not the one gen {gen} and its name derive, in a file whose keyed tag binds them",
                    a.name,
                    hex::encode(exp.salt)
                );
                problems.push(Problem::at(ProblemKind::Binding, a.line, m).in_array(&a.name));
            }
        }
    }
    let (Some(key), Some(sha256_all), Some(merkle_prev), Some(merkle_this)) =
        (opts.hmac_key, report.sha256_all.as_ref(), report.merkle_prev.as_ref(), report.merkle_this.as_ref())
    else {
        return if found.is_some() { Binding::NotChecked } else { Binding::Absent };
    };
    let Some((tag, before)) = found else {
        if !opts.allow_unbound {
            let m = "the HMAC key was given, but the file carries no keyed tag (`wtxt.bind` on its audit line): \
                     its generation, names and set of arrays are not bound by the key; --allow-unbound accepts a \
                     file from a writer that binds nothing";
            problems.push(Problem::at(ProblemKind::Binding, 0, m));
        }
        return Binding::Absent;
    };
    let bound = crate::format::bind::Bound { meta: &h.meta, cap: &h.cap, sha256_all, merkle_prev, merkle_this };
    if key.verify_bind_tag(&bound.message(before), &tag) {
        Binding::Bound
    } else {
        let m = "keyed tag does not match (wrong key, or the file's generation, names, set of arrays or audit \
                 pairs are not what the key holder wrote)";
        problems.push(Problem::at(ProblemKind::Binding, audit_line, m));
        Binding::Invalid
    }
}

/// The tree form: each array's digest from its chunks' (as the chunks'
/// bytes hashed, in order), and each tag checked against it.
fn tree_digests(expected: &[Expect], key: Option<&HmacKey>, roots: &mut RootDigests, chunks: &mut ChunkDigests) {
    let mut kept = std::mem::take(&mut chunks.kept);
    kept.sort_unstable_by_key(|&(a, ix, _, _)| (a, ix));
    let mut by_array: Vec<Vec<(u64, Hash)>> = vec![Vec::new(); expected.len()];
    for (a, _, len, sha) in kept {
        if let Some(v) = by_array.get_mut(a) {
            v.push((len, sha));
        }
    }
    roots.arrays.clear();
    chunks.macs.clear();
    for (chunks_of, exp) in by_array.iter().zip(expected) {
        let digest = match exp.passed_over {
            true => exp.sha256,
            false => crate::crypto::digest::tree_array(chunks_of.iter().map(|(len, _)| len).sum(), chunks_of),
        };
        chunks.macs.push(exp.hmac.zip(key).map(|(want, k)| k.verify_tree_tag(&exp.salt, &digest, &want)));
        roots.arrays.push(digest);
    }
}

/// Each array's verdict from its recomputed SHA-256 and HMAC against what
/// its `arr` line says, and from its chunks' faults.
fn judge_arrays(
    arrays: &mut [ArrayReport],
    expected: &[Expect],
    digests: &[Hash],
    macs: &[Option<bool>],
    opts: &VerifyOptions,
    problems: &mut Vec<Problem>,
) {
    let mut fail = |a: &mut ArrayReport, kind: ProblemKind, message: String| {
        problems.push(Problem::at(kind, a.line, message).in_array(&a.name));
        a.ok = false;
    };
    for (i, (a, exp)) in arrays.iter_mut().zip(expected).enumerate() {
        a.bad_chunks.sort_unstable();
        let Some(sha) = digests.get(i) else {
            a.ok = false;
            continue;
        };
        if *sha != exp.sha256 {
            let m = format!("array {}: sha256 does not match its bytes", a.name);
            fail(a, ProblemKind::Array, m);
        }
        match macs.get(i).copied().flatten() {
            Some(true) => a.authenticated = true,
            Some(false) => {
                let m = format!("array {}: hmac does not match (wrong key or altered data)", a.name);
                fail(a, ProblemKind::Hmac, m);
            }
            None if opts.hmac_key.is_some() && !opts.allow_unauthenticated => {
                let m = format!(
                    "array {}: not authenticated (hmac is all zeros) although an HMAC key was given; \
                     --allow-unauthenticated accepts it",
                    a.name
                );
                fail(a, ProblemKind::Hmac, m);
            }
            None => {}
        }
        if !a.bad_chunks.is_empty() {
            a.ok = false;
        }
    }
}

/// Root, Merkle link, fastxor, WSUM, signature and chain checks.
fn check_root(
    h: &Header,
    sha_all: &Hash,
    fastxor: Option<u64>,
    opts: &VerifyOptions,
    report: &mut Report,
    problems: &mut Vec<Problem>,
) {
    report.sha256_all = Some(*sha_all);
    report.fastxor = fastxor.map(u64::to_be_bytes);
    let (merkle_prev, signed, sign) = match (&h.root, opts.wsum) {
        (Root::Final { .. }, _) => check_final_root(h, sha_all, fastxor, opts.wsum, problems),
        (Root::Pending, None) => {
            report.streaming = true;
            problems.push(Problem::at(ProblemKind::RootPending, ROOT_LINE, "root pending: give --wsum"));
            return;
        }
        (Root::Pending, Some(w)) => {
            report.streaming = true;
            check_pending_root(h, sha_all, w, problems)
        }
    };
    let (ts, gen) = (h.meta.ts.as_str(), h.meta.gen_str());
    report.merkle_prev = Some(merkle_prev);
    report.merkle_this = Some(merkle_this(&merkle_prev, sha_all, ts, &gen, &h.meta.build));
    let sign_line = if report.streaming { ROOT_LINE } else { 5 };
    report.keyid = sign.as_ref().map(|s| s.keyid);
    report.signature = signature_status(sign.as_ref(), &signed, sign_line, opts, problems);
    if let Some(p) = opts.prev {
        check_chain(h, &merkle_prev, p, problems);
    }
}

/// The `root` line's number.
const ROOT_LINE: u64 = 4;

/// What the signature covers, and the chain value, of a checked root.
type RootParts = (Hash, Vec<u8>, Option<SignLine>);

/// A plain WTXT's `root` line against what its arrays give (and its WSUM, if one is given).
fn check_final_root(
    h: &Header,
    sha_all: &Hash,
    fastxor: Option<u64>,
    wsum: Option<&Wsum>,
    problems: &mut Vec<Problem>,
) -> RootParts {
    let Root::Final { sha256_all, merkle_prev, merkle_this: mt, fastxor: fx } = &h.root else {
        unreachable!("called for a final root")
    };
    if sha256_all != sha_all {
        let m = format!("sha256_all is {}, the arrays give {}", hex::encode(sha256_all), hex::encode(sha_all));
        problems.push(Problem::at(ProblemKind::Root, ROOT_LINE, m));
    }
    check_merkle_this(h, problems);
    if let Some(fastxor) = fastxor.filter(|f| f != fx) {
        let m = format!("fastxor is {fx:016x}, the arrays give {fastxor:016x}");
        problems.push(Problem::at(ProblemKind::Root, ROOT_LINE, m));
    }
    if wsum.is_some_and(|w| w.sha256_all != *sha256_all || w.merkle_this != *mt || w.merkle_prev != *merkle_prev) {
        problems.push(Problem::at(ProblemKind::Wsum, ROOT_LINE, "the WSUM does not match this file's root"));
    }
    (*merkle_prev, h.signed_bytes.clone(), h.sign.clone())
}

/// A final `root` line's `merkle_this` against its own fields.
fn check_merkle_this(h: &Header, problems: &mut Vec<Problem>) {
    let Root::Final { sha256_all, merkle_prev, merkle_this: mt, .. } = &h.root else { return };
    let want = merkle_this(merkle_prev, sha256_all, h.meta.ts.as_str(), &h.meta.gen_str(), &h.meta.build);
    if *mt != want {
        let m = format!("merkle_this is {}, expected {}", hex::encode(mt), hex::encode(want));
        problems.push(Problem::at(ProblemKind::Root, ROOT_LINE, m));
    }
}

/// A WTXT-S's WSUM against what its arrays give.
fn check_pending_root(h: &Header, sha_all: &Hash, w: &Wsum, problems: &mut Vec<Problem>) -> RootParts {
    if w.sha256_all != *sha_all {
        let m = format!("WSUM sha256_all is {}, the arrays give {}", hex::encode(w.sha256_all), hex::encode(sha_all));
        problems.push(Problem::at(ProblemKind::Wsum, ROOT_LINE, m));
    }
    let want = merkle_this(&w.merkle_prev, &w.sha256_all, h.meta.ts.as_str(), &h.meta.gen_str(), &h.meta.build);
    if w.merkle_this != want {
        let m = format!("WSUM merkle_this is {}, expected {}", hex::encode(w.merkle_this), hex::encode(want));
        problems.push(Problem::at(ProblemKind::Wsum, ROOT_LINE, m));
    }
    (w.merkle_prev, w.signed_part().into_bytes(), w.sign.clone())
}

/// The link to the previous generation `p` (`--prev`).
fn check_chain(h: &Header, merkle_prev: &Hash, p: &Header, problems: &mut Vec<Problem>) {
    let Root::Final { merkle_this: prev_this, .. } = &p.root else {
        let m = "--prev: the previous file is a WTXT-S; finalize it first";
        problems.push(Problem::at(ProblemKind::Chain, 0, m));
        return;
    };
    if h.meta.gen <= p.meta.gen {
        let m = format!("gen {} does not follow the previous generation's {}", h.meta.gen_str(), p.meta.gen_str());
        problems.push(Problem::at(ProblemKind::Chain, 2, m));
    }
    if merkle_prev != prev_this {
        let m = format!(
            "merkle_prev is {}, the previous generation's merkle_this is {}",
            hex::encode(merkle_prev),
            hex::encode(prev_this)
        );
        problems.push(Problem::at(ProblemKind::Chain, ROOT_LINE, m));
    }
}

#[cfg(test)]
mod tests;
