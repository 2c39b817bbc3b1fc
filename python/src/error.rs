//! The library's errors as Python's `WtxtError`.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use wtxt::{ErrorKind, Position};

pyo3::create_exception!(_rust, WtxtError, PyException, "kind, line (or None), message");

/// A library error as `WtxtError(kind, line, message)`.
pub(crate) fn raise(e: wtxt::Error) -> PyErr {
    let kind = match e.kind() {
        ErrorKind::Check => "check",
        ErrorKind::Input => "input",
        ErrorKind::Usage => "usage",
        ErrorKind::Io => "io",
    };
    let line = match e.position() {
        Position::Line(n) => Some(n),
        _ => None,
    };
    WtxtError::new_err((kind, line, e.to_string()))
}
