//! Where a line of the joined text comes from: a split snapshot's readers
//! ([`super::Joined`], [`super::Sparse`]) fill the map in as they open
//! parts, and errors are moved to the part and line they are about.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Where a line of the joined text comes from, for messages.
#[derive(Default, Debug)]
pub struct LineMap {
    pub(super) prefix_lines: u64,
    /// (first joined line, body lines, part file, its line of the first body line)
    pub(super) parts: Vec<(u64, u64, PathBuf, u64)>,
    /// (joined line, head line) of each `arr` line put in for a `begin` line.
    pub(super) arrs: Vec<(u64, u64)>,
    pub(super) head_lines_before_tail: u64,
    pub(super) total_parts: usize,
    /// The joined line the head's tail starts on, where the text does not
    /// give every part's lines ([`super::Sparse`]).
    pub(super) tail_at: Option<u64>,
}

impl LineMap {
    /// The part file (`None`: the head) and its line for line `n` of the
    /// joined text; `None` when `n` is the head's line `n`.
    pub fn locate(&self, n: u64) -> Option<(Option<PathBuf>, u64)> {
        if n <= self.prefix_lines {
            return None;
        }
        if let Ok(i) = self.arrs.binary_search_by_key(&n, |&(j, _)| j) {
            return Some((None, self.arrs[i].1));
        }
        if let Some(t) = self.tail_at.filter(|&t| n >= t) {
            return Some((None, self.head_lines_before_tail + (n - t) + 1));
        }
        for (start, count, path, local) in &self.parts {
            if n >= *start && n < start + count {
                return Some((Some(path.clone()), local + (n - start)));
            }
        }
        let after = self.parts.last().map_or(self.prefix_lines + 1, |(s, c, _, _)| s + c);
        if self.parts.len() == self.total_parts && n >= after {
            // The head's tail: its lines follow the part lines.
            return Some((None, self.head_lines_before_tail + (n - after) + 1));
        }
        None
    }
}

/// A shared [`LineMap`], filled in as parts are opened.
pub type SharedMap = Arc<Mutex<LineMap>>;
