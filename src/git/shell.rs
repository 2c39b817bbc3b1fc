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
