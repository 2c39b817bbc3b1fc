//! The one error type of the crate.
//!
//! Every error carries where it happened (file, and a 1-based line or a byte
//! offset) and says what was expected, so the CLI can print it as one line.
//! The kind decides the exit code in one place: a failed check is 1, unusable
//! input or bad usage is 2.
#![forbid(unsafe_code)]

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in a file an error was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Position {
    /// The whole file (or no file at all).
    #[default]
    None,
    /// A 1-based line number, for text formats.
    Line(u64),
    /// A 0-based byte offset, for binary formats.
    Byte(u64),
}

/// What went wrong, which decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A verification check failed: the input is a snapshot but not a sound one (exit 1).
    Check,
    /// The input cannot be used: wrong format, malformed container, unsupported content (exit 2).
    Input,
    /// The command line or an option value is wrong (exit 2).
    Usage,
    /// The operating system refused a read or write (exit 2).
    Io,
}

/// Which way an unnamed I/O error went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

#[derive(Debug)]
struct Inner {
    kind: Kind,
    side: Option<Side>,
    path: Option<PathBuf>,
    pos: Position,
    message: String,
    source: Option<std::io::Error>,
}

/// An error with its kind, file and position. Boxed so `Result<T>` stays small.
#[derive(Debug)]
pub struct Error(Box<Inner>);

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    fn new(kind: Kind, pos: Position, message: impl Into<String>) -> Self {
        Error(Box::new(Inner { kind, side: None, path: None, pos, message: message.into(), source: None }))
    }

    /// A failed integrity or format check at `pos`.
    pub fn check(pos: Position, message: impl Into<String>) -> Self {
        Self::new(Kind::Check, pos, message)
    }

    /// Unusable input at `pos`.
    pub fn input(pos: Position, message: impl Into<String>) -> Self {
        Self::new(Kind::Input, pos, message)
    }

    /// A wrong option or argument.
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Kind::Usage, Position::None, message)
    }

    /// An I/O failure on `path`.
    pub fn io(path: impl AsRef<Path>, err: std::io::Error) -> Self {
        let mut e = Self::new(Kind::Io, Position::None, err.to_string());
        e.0.path = Some(path.as_ref().to_path_buf());
        e.0.source = Some(err);
        e
    }

    /// A read failed on a stream whose file the caller names (with
    /// [`Error::in_file`] or [`Error::in_files`]): a reader does not know the path.
    pub fn read_failed(err: std::io::Error) -> Self {
        Self::unnamed_io(err, Side::Read)
    }

    /// A write failed on a stream whose file the caller names.
    pub fn write_failed(err: std::io::Error) -> Self {
        Self::unnamed_io(err, Side::Write)
    }

    fn unnamed_io(err: std::io::Error, side: Side) -> Self {
        // A reader of ours that fails with an `Error` of its own (a split
        // snapshot's part that does not match its head) gives that back.
        if err.get_ref().is_some_and(|e| e.is::<Error>()) {
            if let Some(Ok(e)) = err.into_inner().map(|b| b.downcast::<Error>()) {
                return *e;
            }
            unreachable!("checked to hold an Error");
        }
        let mut e = Self::new(Kind::Io, Position::None, err.to_string());
        e.0.source = Some(err);
        e.0.side = Some(side);
        e
    }

    /// Names `input` or `output`, by the side an unnamed I/O error came
    /// from; any other unnamed error is about `input`.
    pub fn in_files(self, input: impl AsRef<Path>, output: impl AsRef<Path>) -> Self {
        self.in_input(input).in_file(output)
    }

    /// Names `input` unless this is a failed write (which is about the
    /// output, named by whoever knows it).
    pub fn in_input(self, input: impl AsRef<Path>) -> Self {
        match self.0.side {
            Some(Side::Write) => self,
            _ => self.in_file(input),
        }
    }

    /// An I/O failure of something that is not a file (a thread, a pipe, a
    /// codec): `what` leads the message; a file can still be named later.
    pub fn io_in(what: &str, err: std::io::Error) -> Self {
        let mut e = Self::new(Kind::Io, Position::None, format!("{what}: {err}"));
        e.0.source = Some(err);
        e
    }

    /// Names the file the error is about, unless one is named already.
    pub fn in_file(mut self, path: impl AsRef<Path>) -> Self {
        if self.0.path.is_none() {
            self.0.path = Some(path.as_ref().to_path_buf());
        }
        self
    }

    /// Renames the file the error names when `rename` gives it another
    /// name (a temporary copy shown as what it is a copy of).
    pub fn renamed(mut self, rename: impl FnOnce(&Path) -> Option<PathBuf>) -> Self {
        if let Some(to) = self.0.path.as_deref().and_then(rename) {
            self.0.path = Some(to);
        }
        self
    }

    /// Moves an error on line `n` of a text that was joined from several
    /// files (a split snapshot) to the file and line it came from:
    /// `locate(n)` gives the file (`None`: the first one) and its line.
    pub fn relocated(mut self, locate: impl Fn(u64) -> Option<(Option<PathBuf>, u64)>) -> Self {
        if let (Position::Line(n), None) = (self.0.pos, &self.0.path) {
            if let Some((file, line)) = locate(n) {
                self.0.pos = Position::Line(line);
                self.0.path = file;
            }
        }
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> Kind {
        self.0.kind
    }

    /// Where in the file.
    pub fn position(&self) -> Position {
        self.0.pos
    }

    /// The file, when known.
    pub fn path(&self) -> Option<&Path> {
        self.0.path.as_deref()
    }

    /// What was expected, without file or position.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// The process exit code for this error: 1 for a failed check, 2 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self.0.kind {
            Kind::Check => 1,
            Kind::Input | Kind::Usage | Kind::Io => 2,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.0.path {
            write!(f, "{}: ", one_line(&p.display().to_string()))?;
        }
        match self.0.pos {
            Position::None => {}
            Position::Line(n) => write!(f, "line {n}: ")?,
            Position::Byte(n) => write!(f, "byte {n}: ")?,
        }
        write!(f, "{}", one_line(&self.0.message))
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source.as_ref().map(|e| e as _)
    }
}

/// What was wrong with a piece of input, before the caller knows where it
/// was. Line and field parsers return it; whoever holds the file and the
/// position makes it an [`Error`] of the right kind ([`check_at`],
/// [`input_at`], or any constructor taking a message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason(String);

impl Reason {
    /// A reason with this text.
    pub fn new(message: impl Into<String>) -> Self {
        Reason(message.into())
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The same reason behind a prefix (the field or part it was found in).
    pub fn context(self, what: impl fmt::Display) -> Self {
        Reason(format!("{what}: {}", self.0))
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Reason {}

impl From<String> for Reason {
    fn from(message: String) -> Self {
        Reason(message)
    }
}

impl From<&str> for Reason {
    fn from(message: &str) -> Self {
        Reason(message.to_string())
    }
}

impl From<Reason> for String {
    fn from(r: Reason) -> Self {
        r.0
    }
}

/// `reason!("...", args)`: a [`Reason`] from a format string.
macro_rules! reason {
    ($($arg:tt)*) => {
        $crate::error::Reason::new(format!($($arg)*))
    };
}
pub(crate) use reason;

/// Shorthand for a failed check on a line (0: the whole file, as a
/// [`Problem`](crate::format::verify::Problem) without a line has it).
pub fn check_at(line: u64, message: impl Into<String>) -> Error {
    Error::check(if line == 0 { Position::None } else { Position::Line(line) }, message)
}

/// Shorthand for a failed check at a byte offset (a hash or CRC of a
/// binary container that does not match).
pub fn check_byte(byte: u64, message: impl Into<String>) -> Error {
    Error::check(Position::Byte(byte), message)
}

/// A libgit2 failure as unusable input, naming Git.
pub fn git_err(e: git2::Error) -> Error {
    Error::input(Default::default(), format!("git: {}", e.message()))
}

/// Shorthand for unusable input at a byte offset.
pub fn input_at(byte: u64, message: impl Into<String>) -> Error {
    Error::input(Position::Byte(byte), message)
}

/// A message as one printable line: newlines become spaces and other
/// control bytes (ESC, CR, DEL, ...) `\xNN`, whatever a file put in a name.
pub fn one_line(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return text.into();
    }
    text.chars()
        .map(|c| match c {
            '\n' => " ".to_string(),
            c if c.is_control() => format!("\\x{:02x}", c as u32),
            c if is_bidi_control(c) => format!("\\u{{{:04x}}}", c as u32),
            c => c.to_string(),
        })
        .collect::<String>()
        .into()
}

/// The characters that reorder text around them on a terminal (Unicode's
/// bidirectional controls): a file name holding one could show another
/// name than its own (`evil\u{202e}txt.py`).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}
