//! Quoting for the shell: the commands wtxt writes into hooks and the
//! commands its messages tell a user to run.

/// `s` as one word of a POSIX shell command line.
pub(crate) fn shell_word(s: &str) -> String {
    if s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
