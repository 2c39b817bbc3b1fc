//! Every size limit the readers enforce, in one place, with the reason for each.
//!
//! A reader checks a length taken from a file against these before it
//! allocates anything, so a hostile file can neither crash the process nor make
//! it eat memory.
#![forbid(unsafe_code)]

/// Longest WTXT line accepted, LF excluded. The profile's DoS limit; the
/// longest line a canonical writer emits is an `arr` line with a 255-byte name
/// and a long shape, well below it.
pub const MAX_LINE: usize = 4096;

/// Longest array name (profile: names are at most 255 bytes).
pub const MAX_NAME: usize = 255;

/// Most dimensions in a shape. NumPy's own limit is 64.
pub const MAX_RANK: usize = 64;

/// Largest array held in memory when a command needs whole arrays (extract,
/// snapshot from WTXT, recover). 64 GiB; the real bound is always the file's
/// own size, checked first.
pub const MAX_ARRAY_BYTES: u64 = 64 << 30;

/// Largest `.npy` header. NumPy writes at most a few hundred bytes; v2/v3
/// allow 4 GiB, which no honest file needs.
pub const MAX_NPY_HEADER: usize = 1 << 20;

/// Largest number of tensors in an `.npz`, a safetensors file, an AERO
/// index or a snapshot (131,072). Each array costs about 1.2 KB of heap
/// while a snapshot is read and written (its lines, hashes, name and
/// report), so the cap keeps that under 256 MiB; the largest public
/// checkpoints (mixture-of-experts models with a tensor per expert) hold
/// under 100,000.
pub const MAX_ARRAYS: usize = 1 << 17;

/// The most bytes of metadata arrays an outline decodes ahead of the
/// strict reader (a converter's plan, the DCP reader's metadata).
pub const MAX_METADATA: u64 = 64 << 20;

/// Metadata arrays (`__names`, `__safetensors_header`, ...) a snapshot may
/// hold beside [`MAX_ARRAYS`] tensors.
pub const MAX_METADATA_ARRAYS: usize = 64;

/// Largest decompressed `.npz` member. Checked against the zip's declared
/// size, and the inflater is capped at the declared size, so a compression
/// bomb is refused rather than inflated.
pub const MAX_NPZ_MEMBER: u64 = 64 << 30;

/// Size of the decoded blocks the verifier hands to its hashing threads, and
/// how many may be in flight: bounds the verifier's memory whatever the file
/// size (2 channels x `PIPELINE_DEPTH` x `BLOCK`).
pub const BLOCK: usize = 1 << 20;

/// See [`BLOCK`].
pub const PIPELINE_DEPTH: usize = 8;

/// Largest key or trusted-keys file read into memory.
pub const MAX_KEY_FILE: u64 = 1 << 20;

/// Largest audit line accepted on the command line (it must fit a WTXT line).
pub const MAX_AUDIT: usize = MAX_LINE - "audit ".len() - " wtxt.bind=".len() - 64;

/// Most tensor bytes a writer that builds its whole output in memory
/// (VOLP) may take: the heap cap. Larger outputs are refused with a pointer
/// to the formats that stream (safetensors, npz, AERO, FOLD).
pub const MAX_IN_MEMORY_OUTPUT: u64 = 256 << 20;

/// Decoded data (an inflated npz member, a zstd chunk, an array read from a
/// WTXT) larger than this goes to an unnamed temporary file that is mapped,
/// not to the heap: a file that really holds gigabytes costs file-backed
/// pages, and the heap stays bounded whatever a file declares.
pub const SPILL_AT: u64 = 32 << 20;
