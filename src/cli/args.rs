//! Command-line flags as plain structs (clap derive); no logic lives here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use super::flags::SealedArg;
use crate::options::{DigestChoice, HmacFile, KeyFiles, MetaFields, OmsFile, PartSizeChoice, SignFile, TrustFiles};

/// Deterministic, self-checking ASCII snapshots of ML weights (WTXT 1.1).
#[derive(Parser, Debug)]
#[command(name = "wtxt", version, about, propagate_version = true)]
pub struct Cli {
    /// Threads the hashing pools use (default: WTXT_THREADS, else every core).
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub threads: Option<u64>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write a canonical WTXT from .npy, .npz, .safetensors or WTXT inputs.
    Snapshot(SnapshotArgs),
    /// Verify a WTXT (or a WTXT-S with its WSUM): every check of the profile.
    Verify(VerifyArgs),
    /// Show the header and the arrays of a WTXT.
    Inspect(InspectArgs),
    /// Verify a WTXT, then write its arrays to .npy, .npz or .safetensors.
    Extract(ExtractArgs),
    /// Rescue the intact arrays of a damaged WTXT and report what was lost.
    Recover(RecoverArgs),
    /// Compute the WSUM of a WTXT-S (and optionally rewrite it as a plain WTXT).
    Finalize(FinalizeArgs),
    /// Generate an Ed25519 signing key (PKCS#8 PEM) and its public key.
    Keygen(KeygenArgs),
    /// Add public keys to a trusted-keys file (what --trusted-keys and
    /// wtxt.trustedKeys read).
    Trust(TrustKeysArgs),
    /// DELTA v2 patches: only the chunks that changed between generations.
    #[command(subcommand)]
    Delta(DeltaCommand),
    /// Prove the Merkle chain of a WTXT path through Git history.
    Log(LogArgs),
    /// One self-contained HTML page of a WTXT path's history in Git: a heat
    /// map of each tensor's change per generation, chain and signature
    /// status, sizes.
    Report(ReportArgs),
    /// Convert between WTXT and the containers: npy/npz/safetensors/VOLP in, WTXT/npz/safetensors/VOLP out.
    Convert(ConvertArgs),
    /// Show what changed between two WTXT files, array by array.
    Diff(DiffArgs),
    /// Three-way merge at chunk granularity (also Git's merge driver).
    Merge(MergeArgs),
    /// Git integration: drivers, filters and hooks.
    #[command(subcommand)]
    Git(GitCommand),
    /// Hooks Git runs.
    #[command(subcommand)]
    Hook(HookCommand),
    /// Snapshot daemon: producers send `snapshot PATH` over a Unix socket.
    Daemon(DaemonArgs),
    /// Wrap a WTXT in age encryption with ASCII armor (readable by `age -d`).
    Encrypt(EncryptArgs),
    /// Decrypt an age-encrypted WTXT.
    Decrypt(DecryptArgs),
    /// Store a WTXT as a split snapshot: head at OUT, parts of at most --part-size in OUT.parts/.
    Split(SplitArgs),
    /// Join a split snapshot into one file (the exact inverse of split).
    Join(JoinArgs),
    /// OpenSSF Model Signing: sign a snapshot's folder, check any key-signed folder.
    #[command(subcommand)]
    Oms(OmsCommand),
}

#[derive(Subcommand, Debug)]
pub enum OmsCommand {
    /// Verify a snapshot whole, then sign its folder into `model.sig`
    /// beside it; or sign any model folder as `model_signing sign key` does.
    Sign(OmsSignArgs),
    /// Check a folder against an OMS signature, as `model_signing verify key` does.
    Verify(OmsVerifyArgs),
}

#[derive(Args, Debug)]
pub struct OmsSignArgs {
    /// The snapshot (a single file or the head of a split snapshot), or a
    /// model folder (every WTXT snapshot in it is verified first).
    #[arg(value_name = "SNAPSHOT|DIR")]
    pub snapshot: PathBuf,
    /// EC private key (P-256/384/521, PKCS#8 or SEC1 PEM).
    #[arg(long, value_name = "EC.pem")]
    pub key: PathBuf,
    /// Where a folder's signature goes (default: DIR/model.sig); a
    /// snapshot's is always model.sig beside it.
    #[arg(long, value_name = "model.sig")]
    pub signature: Option<PathBuf>,
    #[command(flatten)]
    pub hmac: HmacFile,
    /// Keys the snapshot must be signed by before it is signed again.
    #[command(flatten)]
    pub trust: TrustFiles,
}

#[derive(Args, Debug)]
pub struct OmsVerifyArgs {
    /// The signed folder.
    pub dir: PathBuf,
    /// The signature file.
    #[arg(long, value_name = "model.sig")]
    pub signature: PathBuf,
    /// EC public key (SPKI PEM).
    #[arg(long = "public-key", alias = "public_key", value_name = "EC.pub")]
    pub public_key: PathBuf,
    /// More paths to leave out; repeatable.
    #[arg(long = "ignore-paths", value_name = "PATH")]
    pub ignore_paths: Vec<PathBuf>,
    /// Do not leave out .git, .gitattributes, .github, .gitignore.
    #[arg(long = "no-ignore-git-paths")]
    pub no_ignore_git_paths: bool,
    /// Check only the files the signature lists.
    #[arg(long = "ignore-unsigned-files", alias = "ignore_unsigned_files")]
    pub ignore_unsigned_files: bool,
}

#[derive(Args, Debug)]
pub struct SplitArgs {
    /// The WTXT (one file, or the head of a split snapshot).
    pub file: PathBuf,
    /// The head to write; parts go to OUT.parts/.
    #[arg(short, long, value_name = "OUT.wtxt")]
    pub output: PathBuf,
    #[command(flatten)]
    pub parts: PartSizeChoice,
    #[command(flatten)]
    pub oms: OmsFile,
}

#[derive(Args, Debug)]
pub struct JoinArgs {
    /// The head of a split snapshot.
    pub file: PathBuf,
    /// The single file to write.
    #[arg(short, long, value_name = "OUT.wtxt")]
    pub output: PathBuf,
    #[command(flatten)]
    pub oms: OmsFile,
}

#[derive(Args, Debug)]
pub struct EncryptArgs {
    /// The WTXT (or delta, or WSUM) to encrypt.
    pub file: PathBuf,
    /// Output: age ASCII armor.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Recipient: an age1... key or an ssh-ed25519 public key line; repeatable.
    #[arg(short = 'r', long = "recipient", value_name = "RECIPIENT")]
    pub recipients: Vec<String>,
    /// A file of recipients, one a line; repeatable.
    #[arg(short = 'R', long = "recipients-file", value_name = "FILE")]
    pub recipients_files: Vec<PathBuf>,
    /// Encrypt with a passphrase from --passphrase-file or $WTXT_PASSPHRASE.
    #[arg(short = 'p', long = "passphrase", conflicts_with_all = ["recipients", "recipients_files"])]
    pub passphrase: bool,
    /// Read the passphrase from this file's first line (implies -p).
    #[arg(long, value_name = "FILE")]
    pub passphrase_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DecryptArgs {
    /// The age-encrypted file.
    pub file: PathBuf,
    /// Output: the plaintext.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    #[command(flatten)]
    pub sealed: SealedArg,
}

#[derive(Subcommand, Debug)]
pub enum DeltaCommand {
    /// Write the delta that turns BASE into TARGET (extended DELTA v2).
    Create(DeltaCreateArgs),
    /// Rebuild the target from BASE and a delta (extended or the seed's minimal form).
    Apply(Box<DeltaApplyArgs>),
}

#[derive(Args, Debug)]
pub struct DeltaCreateArgs {
    /// The base WTXT.
    pub base: PathBuf,
    #[command(flatten)]
    pub sealed: SealedArg,
    /// The target WTXT.
    pub target: PathBuf,
    /// Output delta file.
    #[arg(short, long, value_name = "D.wtxtdelta")]
    pub output: PathBuf,
}

#[derive(Args, Debug)]
pub struct DeltaApplyArgs {
    /// The base WTXT (only read).
    pub base: PathBuf,
    #[command(flatten)]
    pub sealed: SealedArg,
    /// The delta.
    pub delta: PathBuf,
    /// Output WTXT (written only once it verifies).
    #[arg(short, long, value_name = "OUT.wtxt")]
    pub output: PathBuf,
    /// Minimal form: the result's `meta` fields (default: the base's, gen
    /// the base's + 1, ts $SOURCE_DATE_EPOCH, else now).
    #[command(flatten)]
    pub meta: MetaFields,
    /// The keys: a minimal-form result is signed with --sign-key; with
    /// trusted keys the rebuilt target must carry a valid signature by one
    /// of them (a minimal-form delta, which carries none, is then refused).
    #[command(flatten)]
    pub keys: KeyFiles,
    #[command(flatten)]
    pub parts: PartSizeChoice,
}

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// Input files; formats are told by their magic bytes.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Output WTXT file (written atomically).
    #[arg(short, long, value_name = "OUT.wtxt")]
    pub output: PathBuf,
    /// Previous generation: gen = its gen + 1, merkle_prev = its merkle_this.
    #[arg(long, value_name = "PREV.wtxt", conflicts_with = "gen")]
    pub prev: Option<PathBuf>,
    #[command(flatten)]
    pub meta: MetaFields,
    /// Rows per chunk for arrays of rank >= 2 (default 128).
    #[arg(long, value_name = "R")]
    pub rows_per_chunk: Option<u64>,
    /// The keys: WTXT inputs and --prev must be signed by a trusted key.
    #[command(flatten)]
    pub keys: KeyFiles,
    /// Audit line: 'k=v k2="quoted value" ...'.
    #[arg(long, value_name = "'k=v ...'")]
    pub audit: Option<String>,
    /// Write a WTXT-S (root_pending) and its WSUM (needs --wsum).
    #[arg(long, requires = "wsum")]
    pub streaming: bool,
    /// Where the WSUM of a streaming snapshot goes.
    #[arg(long, value_name = "OUT.wsum", requires = "streaming")]
    pub wsum: Option<PathBuf>,
    #[command(flatten)]
    pub parts: PartSizeChoice,
    #[command(flatten)]
    pub digest: DigestChoice,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The WTXT file.
    pub file: PathBuf,
    #[command(flatten)]
    pub sealed: SealedArg,
    /// The WSUM that finalizes a WTXT-S.
    #[arg(long, value_name = "FILE.wsum")]
    pub wsum: Option<PathBuf>,
    #[command(flatten)]
    pub hmac: HmacFile,
    #[command(flatten)]
    pub trust: TrustFiles,
    /// Fail unless a trusted key's valid signature is present.
    #[arg(long)]
    pub require_signature: bool,
    /// Check the chain: gen and merkle_prev must follow this file.
    #[arg(long, value_name = "PREV.wtxt")]
    pub prev: Option<PathBuf>,
    /// Also check the OMS signature (`model.sig` beside the snapshot) with this EC public key.
    #[arg(long, value_name = "EC.pub")]
    pub oms_pubkey: Option<PathBuf>,
    /// The OMS signature to check (default: model.sig in the snapshot's folder).
    #[arg(long, value_name = "PATH", requires = "oms_pubkey")]
    pub oms_sig: Option<PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The WTXT file.
    pub file: PathBuf,
    #[command(flatten)]
    pub sealed: SealedArg,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ExtractArgs {
    /// The WTXT file.
    pub file: PathBuf,
    #[command(flatten)]
    pub sealed: SealedArg,
    /// Output: .npy (one array), .npz, .safetensors, .aero, .fold, .mldf or .volp.
    #[arg(short, long, value_name = "OUT", required_unless_present = "hf", conflicts_with = "hf")]
    pub output: Option<PathBuf>,
    /// Write the Hugging Face folder the snapshot was made from (`wtxt
    /// snapshot DIR`) into this new folder, every file byte for byte.
    #[arg(long, value_name = "OUTDIR", conflicts_with = "array")]
    pub hf: Option<PathBuf>,
    /// Extract only this array (its original or WTXT name); repeat for more.
    #[arg(long, value_name = "NAME")]
    pub array: Vec<String>,
    /// Read FILE (its path in the repository) as revision REV has it: with
    /// --array, a split snapshot of the tree form is read (and, in a
    /// blobless or LFS clone, fetched) only from the parts that hold those
    /// arrays.
    #[arg(long, value_name = "REV", conflicts_with_all = ["hf", "identities", "passphrase"])]
    pub rev: Option<String>,
    /// With --rev: the repository, as `wtxt git export -C` takes it.
    #[arg(short = 'C', value_name = "DIR", default_value = ".", requires = "rev")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub hmac: HmacFile,
    #[command(flatten)]
    pub trust: TrustFiles,
    /// Write nothing unless a trusted key's valid signature is present.
    #[arg(long)]
    pub require_signature: bool,
}

#[derive(Args, Debug)]
pub struct RecoverArgs {
    /// The damaged WTXT file.
    pub file: PathBuf,
    /// Output: a valid WTXT of the arrays that are whole.
    #[arg(short, long, value_name = "OUT.wtxt")]
    pub output: PathBuf,
    /// Write a JSON report of intact and damaged chunks per array.
    #[arg(long, value_name = "JSON")]
    pub report: Option<PathBuf>,
    /// Write what survives of damaged arrays here (.npz or .safetensors):
    /// NAME with its intact chunks (zeros elsewhere) and NAME__intact (u8, 1 per intact chunk).
    #[arg(long, value_name = "PARTIAL.npz")]
    pub partial: Option<PathBuf>,
    #[command(flatten)]
    pub hmac: HmacFile,
    /// --sign-key signs the recovered file (it needs --hmac-key: only
    /// authenticated arrays are signed).
    #[command(flatten)]
    pub sign: SignFile,
    #[command(flatten)]
    pub parts: PartSizeChoice,
    #[command(flatten)]
    pub oms: OmsFile,
}

#[derive(Args, Debug)]
pub struct FinalizeArgs {
    /// The WTXT-S file.
    pub file: PathBuf,
    /// Output WSUM file.
    #[arg(short, long, value_name = "OUT.wsum")]
    pub output: PathBuf,
    /// The keys: --sign-key signs the WSUM (and the rewritten file); with
    /// an HMAC key every array of the WTXT-S must authenticate first; --prev
    /// must be signed by a trusted key.
    #[command(flatten)]
    pub keys: KeyFiles,
    /// Previous generation: merkle_prev = its merkle_this.
    #[arg(long, value_name = "PREV.wtxt")]
    pub prev: Option<PathBuf>,
    /// Also write the finalized plain WTXT here.
    #[arg(long, value_name = "OUT.wtxt")]
    pub rewrite: Option<PathBuf>,
    #[command(flatten)]
    pub parts: PartSizeChoice,
}

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Secret key output (PKCS#8 PEM, mode 0600); the public key goes to OUT.pub.
    #[arg(short, long, value_name = "KEY.pem")]
    pub output: PathBuf,
    /// Replace KEY.pem and KEY.pem.pub when they exist.
    #[arg(long)]
    pub force: bool,
    /// Key type: ed25519 (the `sign` line) or p256 (OMS signatures).
    #[arg(long = "type", value_enum, default_value = "ed25519")]
    pub key_type: KeyType,
    /// Also add the new key's line to this trusted-keys file (created when
    /// missing; ed25519 keys only).
    #[arg(long, value_name = "FILE")]
    pub trusted_keys: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct TrustKeysArgs {
    /// Public keys to trust: SPKI PEM (the `.pub` keygen writes), an
    /// `ssh-ed25519` line, or another trusted-keys file.
    #[arg(required = true, value_name = "KEY.pub")]
    pub keys: Vec<PathBuf>,
    /// The trusted-keys file to add them to (created when missing).
    #[arg(long, value_name = "FILE")]
    pub trusted_keys: PathBuf,
    /// The comment on each new line (default: the key file's name, or the
    /// comment a trusted-keys file gave it).
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    Ed25519,
    P256,
}

#[derive(Args, Debug)]
pub struct LogArgs {
    /// The WTXT path (default: every *.wtxt in HEAD).
    pub path: Option<PathBuf>,
    /// Run as if started in DIR.
    #[arg(short = 'C', value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// Trusted keys (default: the file of `git config wtxt.trustedKeys`).
    #[command(flatten)]
    pub trust: TrustFiles,
    /// Verify every generation's data from its commit, as `wtxt verify`
    /// does (without it only headers and links are checked).
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The WTXT path (a split snapshot by its head).
    pub path: PathBuf,
    /// The page to write (replaced whole, or left as it was).
    #[arg(short, long, value_name = "REPORT.html")]
    pub output: PathBuf,
    /// Run as if started in DIR.
    #[arg(short = 'C', value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// Trusted keys (default: the file of `git config wtxt.trustedKeys`).
    #[command(flatten)]
    pub trust: TrustFiles,
    /// Verify every generation's data from its commit, as `wtxt log --verify` does.
    #[arg(long)]
    pub verify: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The old file, or `REV:PATH` (a revision's snapshot at PATH in a
    /// Git work tree); with PATH given, a revision.
    pub old: PathBuf,
    /// The new file, or `REV:PATH`; with PATH given, a revision.
    pub new: PathBuf,
    /// A snapshot in a Git work tree: OLD and NEW are revisions of it
    /// (`wtxt diff HEAD~1 HEAD model.wtxt`), each read (and in a blobless
    /// or LFS clone fetched) from its commit.
    pub path: Option<PathBuf>,
    /// With revisions: PATH (or a side's `REV:PATH`) in the work tree at DIR.
    #[arg(short = 'C', value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub sealed: SealedArg,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// `markdown`: a review for a pull-request comment (the tensors that
    /// changed and by how much, the config lines, the chain and the
    /// signatures).
    #[arg(long, value_name = "FORMAT", conflicts_with = "json")]
    pub format: Option<DiffFormat>,
    /// Exit 1 when the files differ, like `git diff --exit-code`.
    #[arg(long)]
    pub exit_code: bool,
    /// Show everything: the header's hashes and raw lines, and wtxt's own
    /// arrays (in `git diff`: `WTXT_DIFF_FULL=1`).
    #[arg(long)]
    pub full: bool,
    /// Colour: auto (on a terminal), always, never.
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    pub color: ColorWhen,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffFormat {
    /// Lines for a terminal (the default).
    Text,
    /// One JSON object (as `--json`).
    Json,
    /// GitHub-flavoured Markdown, for a pull request's page.
    Markdown,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand, Debug)]
pub enum GitCommand {
    /// Install the diff and merge drivers, attributes, filters and the pre-commit hook.
    Install(InstallArgs),
    /// Push the current branch's commits the remote lacks one at a time,
    /// oldest first, as the daemon does: no push carries more than one
    /// generation, and a generation that changed in places goes as deltas
    /// against the version the remote has (a plain `git push` sends its
    /// changed parts whole: they carry -delta).
    Push {
        /// A remote's name or URL (default: the branch's remote, else origin).
        remote: Option<String>,
    },
    /// Write the snapshot at PATH in revision REV (head and parts from that commit) to OUT.
    Export {
        /// Run as if started in DIR (the repository, and where OUT is written).
        #[arg(short = 'C', value_name = "DIR", default_value = ".")]
        dir: PathBuf,
        /// A revision: HEAD, MERGE_HEAD, a branch, a commit...
        rev: String,
        /// The snapshot's path in the repository.
        path: PathBuf,
        #[arg(short, long, value_name = "OUT.wtxt")]
        output: PathBuf,
        #[command(flatten)]
        parts: PartSizeChoice,
    },
    /// Settle the snapshot at PATH that a merge, cherry-pick, revert or
    /// rebase in progress left conflicted (Git merges a split snapshot's
    /// files one by one): its three versions are merged whole, written to
    /// PATH and staged.
    Resolve {
        /// The snapshot's path (its head, for a split snapshot).
        path: PathBuf,
        #[command(flatten)]
        how: MergeHow,
    },
    /// A model folder of `wtxt git install --folder`: where it stands
    /// against its snapshot, or bring one side to the other.
    Folder {
        /// The folder, from the work tree's top.
        dir: String,
        /// Write the folder from DIR.wtxt (verified).
        #[arg(long, conflicts_with = "stage")]
        checkout: bool,
        /// Snapshot the folder into DIR.wtxt and stage it.
        #[arg(long)]
        stage: bool,
        /// With --checkout, replace a folder changed by hand; with --stage,
        /// take the folder over a snapshot that changed too.
        #[arg(long)]
        force: bool,
    },
    /// Git's long-running clean/smudge filter (filter.wtxt-FORMAT.process).
    #[command(hide = true)]
    FilterProcess {
        /// The binary format kept in the work tree (safetensors).
        format: String,
    },
    /// Git's smudge filter for a model folder's snapshot
    /// (filter.wtxt-folder.smudge): passes the snapshot through unchanged
    /// and, where the folder is not set up here (a fresh clone), says what
    /// writes it.
    #[command(hide = true)]
    FolderNotice {
        /// The snapshot's path in the work tree (Git's %f).
        path: String,
    },
    /// Git's textconv (diff.wtxt.textconv): one line per header field, array and chunk.
    #[command(hide = true)]
    Textconv {
        /// The file Git hands over.
        file: PathBuf,
    },
    /// Git's diff driver (diff.wtxt.command): PATH OLD OLD-HEX OLD-MODE NEW NEW-HEX NEW-MODE.
    #[command(hide = true)]
    DiffDriver {
        #[arg(num_args = 7, value_names = ["PATH", "OLD", "OLD_HEX", "OLD_MODE", "NEW", "NEW_HEX", "NEW_MODE"])]
        args: Vec<String>,
    },
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The common ancestor (may be empty: no common ancestor).
    pub base: PathBuf,
    /// Our version (its merkle_this becomes the result's merkle_prev).
    pub ours: PathBuf,
    /// Their version.
    pub theirs: PathBuf,
    /// Output (may be OURS, as Git's driver does; untouched on conflict).
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// The path Git merges (for messages).
    #[arg(long, value_name = "PATH")]
    pub path: Option<String>,
    #[command(flatten)]
    pub how: MergeHow,
}

/// How a merge settles conflicts, what its inputs must prove and how its
/// result is written: shared by `merge` and `git resolve`.
#[derive(Args, Debug)]
pub struct MergeHow {
    /// How to settle conflicting chunks (default: $WTXT_MERGE_STRATEGY, else fail).
    #[arg(long, value_name = "fail|ours|theirs|average")]
    pub strategy: Option<String>,
    /// JSON decisions per array or chunk: {"arrays": {"W": "ours"}, "chunks": {"W": {"3": "theirs"}}}.
    #[arg(long, value_name = "FILE")]
    pub decisions: Option<PathBuf>,
    /// Timestamp of the result (default: $SOURCE_DATE_EPOCH, else the later side's).
    #[arg(long, value_name = "TS")]
    pub ts: Option<String>,
    /// The keys: --sign-key signs the result (default: the key file named
    /// by $WTXT_SIGN_KEY); the three inputs must be signed by a trusted key
    /// (default: the file of `git config wtxt.trustedKeys`, when run inside
    /// a repository).
    #[command(flatten)]
    pub keys: KeyFiles,
    #[command(flatten)]
    pub parts: PartSizeChoice,
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// This repository (default): .git/config, .gitattributes and the pre-commit hook.
    #[arg(long, conflicts_with_all = ["global", "system"])]
    pub local: bool,
    /// The user's Git config and attributes file.
    #[arg(long, conflicts_with = "system")]
    pub global: bool,
    /// The system's Git config and /etc/gitattributes.
    #[arg(long)]
    pub system: bool,
    /// Also store FORMAT files (safetensors) as WTXT in the repository.
    #[arg(long, value_name = "FORMAT")]
    pub filter: Vec<String>,
    /// Keep the Hugging Face folder DIR in the work tree (ignored by Git)
    /// and its split snapshot DIR.wtxt in the repository: the pre-commit
    /// hook snapshots the folder when it changed, the hooks after a
    /// checkout, merge, commit or rewrite write it back.
    #[arg(long, value_name = "DIR")]
    pub folder: Vec<String>,
    /// Print what would be written instead of writing it.
    #[arg(long)]
    pub manual: bool,
    /// Remove what install wrote.
    #[arg(long)]
    pub uninstall: bool,
    /// Store the parts of split snapshots as Git LFS objects through the
    /// `git lfs` client (heads stay in Git), for hosts that keep large
    /// files in LFS.
    #[arg(long, conflicts_with_all = ["global", "system", "server"])]
    pub lfs: bool,
    /// In the bare repository a host serves: the pre-receive hook that
    /// refuses a push whose snapshots do not verify, whose chain breaks or
    /// whose signatures are not from wtxt.trustedKeys.
    #[arg(long, conflicts_with_all = ["global", "system", "filter", "folder"])]
    pub server: bool,
    /// With --server: the folder the LFS server beside the repository keeps
    /// its objects in, where the guard reads parts stored in Git LFS
    /// (wtxt.lfsObjects).
    #[arg(long, value_name = "DIR", requires = "server")]
    pub lfs_objects: Option<PathBuf>,
    /// The repository's signing policy: every snapshot its hook, filters,
    /// guard and readers take in must be signed by a key in FILE
    /// (wtxt.trustedKeys, made absolute; wtxt.requireSignature true).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["global", "system", "uninstall", "manual"])]
    pub trusted_keys: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum HookCommand {
    /// Snapshot and stage changed model folders, then check every staged
    /// .wtxt and .wtxtdelta (what hooks/pre-commit runs).
    PreCommit,
    /// Write each model folder from its snapshot where Git changed it (what
    /// hooks/post-checkout runs, also as post-merge, post-commit, post-rewrite).
    Checkout,
    /// In a bare repository: refuse a push whose snapshots do not verify,
    /// whose chain breaks or whose signatures are not by wtxt.trustedKeys
    /// (what hooks/pre-receive runs; Git's OLD NEW REF lines on stdin).
    PreReceive,
}

#[derive(Args, Debug)]
pub struct DaemonArgs {
    #[command(flatten)]
    pub settings: crate::daemon::DaemonConfig,
    /// TOML file with any of these settings, named as the flags are with
    /// `_` for `-` (`recipients = [...]` for --recipient); flags win.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// Input (format told by its magic bytes).
    pub input: PathBuf,
    /// Output file.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Output format: wtxt, or a container of the table that holds many arrays.
    #[arg(long, value_name = "FORMAT", value_parser = clap::builder::PossibleValuesParser::new(crate::convert::formats::convert_targets()))]
    pub to: String,
    /// For --to wtxt: the snapshot's `meta` fields (a container has none:
    /// there they are ignored, so one command line serves every target).
    #[command(flatten)]
    pub meta: MetaFields,
    /// The keys: --sign-key signs a WTXT result; a WTXT input must be
    /// signed by a trusted key.
    #[command(flatten)]
    pub keys: KeyFiles,
    #[command(flatten)]
    pub parts: PartSizeChoice,
    #[command(flatten)]
    pub digest: DigestChoice,
}
