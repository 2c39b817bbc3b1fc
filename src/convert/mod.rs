//! Inputs and outputs other than WTXT: format detection by magic bytes,
//! loading snapshot inputs into the model, and writing extracted arrays.

pub mod aero;
pub(crate) mod bytes;
pub(crate) mod common;
pub(crate) mod container;
pub(crate) mod direct;
pub mod fold;
pub(crate) mod formats;
pub(crate) mod hf;
mod load;
pub mod mldf;
pub(crate) mod msgpack;
pub(crate) mod names;
pub mod npy;
pub mod npz;
pub(crate) mod pyjson;
pub(crate) mod rs;
pub mod safetensors;
pub(crate) mod unseek;
pub mod volp;
mod write;

pub use common::{in_memory, map_file, meta_array, meta_json, meta_typed, zstd_exact, Notes};
pub use direct::{write_direct, Route};
pub use formats::{by_name, foreign_metadata, sniff, CONTAINERS};
pub use hf::is_folder;
pub use load::{detect, detect_head, gather, load_for, load_inputs, load_lossless, load_source_for, Input, Source};
pub use names::{give_wtxt_names, objects_array, objects_of, OriginalNames};
pub use write::{write_arrays, write_arrays_as};
