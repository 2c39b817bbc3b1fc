//! Quoting for the shell: the commands wtxt writes into hooks and the
//! commands its messages tell a user to run; and which `wtxt` command
//! those hooks and drivers call.

use std::path::PathBuf;

use crate::error::{Error, Result};

/// How this process was started: the command line's first word, or the
/// `wtxt` script a library user's package installed beside it.
static INVOKED_AS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Records the `wtxt` command this process stands for (the first call
/// wins): the command line's first word, or the Python package's `wtxt`
/// script, whose process is Python's.
pub fn set_command(path: PathBuf) {
    let _ = INVOKED_AS.set(path);
}

/// The command Git should run for wtxt's hooks and drivers: this binary, or,
/// when wtxt runs inside another program (the Python package), the command
/// recorded by [`set_command`], made absolute (a bare name: the first on
/// PATH), so that Git finds it whatever its own PATH.
pub fn command() -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| Error::io("wtxt", e))?;
    if exe.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("wtxt")) {
        return Ok(exe);
    }
    let invoked = INVOKED_AS.get().cloned().unwrap_or_default();
    let found = if invoked.components().count() > 1 {
        Some(std::path::absolute(&invoked).map_err(|e| Error::io(&invoked, e))?)
    } else {
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(&invoked)).find(|c| c.is_file()))
    };
    found.filter(|p| p.is_file()).ok_or_else(|| {
        Error::usage(format!("cannot tell where the wtxt command is (started as {})", invoked.display()))
    })
}

/// `s` as one word of a POSIX shell command line.
pub(crate) fn shell_word(s: &str) -> String {
    if s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `s` as one word a person types at a shell: as [`shell_word`], but a
/// word with control characters is written `$'...'` with escapes (bash,
/// zsh and POSIX.1-2024 `sh` read it), so a message that suggests a
/// command stays one line and the command still names the right path.
pub(crate) fn typed_word(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return shell_word(s);
    }
    let mut out = String::from("$'");
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() => {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_as_a_shell_reads_them() {
        assert_eq!(shell_word("models/llama-3"), "models/llama-3");
        assert_eq!(shell_word("my model's"), "'my model'\\''s'");
        assert_eq!(typed_word("my model"), "'my model'");
        assert_eq!(typed_word("a\nb\x1bc'd\\"), "$'a\\nb\\x1bc\\'d\\\\'");
    }
}
