//! Git integration: drivers, filters, hooks and the Merkle chain through history.

pub(crate) mod commit;
pub(crate) mod config;
pub(crate) mod diff;
pub(crate) mod files_diff;
pub(crate) mod filter;
pub(crate) mod folders;
pub(crate) mod guard;
pub(crate) mod history;
pub(crate) mod hooks;
pub(crate) mod install;
pub(crate) mod lfs_parts;
pub(crate) mod merge;
pub(crate) mod parts;
pub(crate) mod proof;
pub(crate) mod push;
pub(crate) mod served;
pub(crate) mod shell;
pub(crate) mod textconv;

pub use commit::{commit_lock, commit_written, committed_link};
pub use config::{
    configured_file, configured_hmac_key, configured_keys, configured_output, configured_trusted_keys,
    has_signing_policy, oms_key_around, set_signing_policy, signature_policy, trusted_keys_around, Policy,
    PRIVATE_KEY_SETTINGS,
};
pub use diff::{diff, Names};
pub use filter::{clean, smudge};
pub use hooks::open_for_hook;
pub use lfs_parts::read_lfs_pointers_in_work_trees;
pub use merge::{merge, Strategy};
pub use parts::{check_part, diff_parts, textconv_part};
pub use push::{push, redact, Push};
pub use shell::{command, set_command};
pub use textconv::textconv;
