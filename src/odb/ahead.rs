//! Blobs read ahead of their reader. Git inflates a packed part on one
//! core (about 200 MB/s of Huffman-coded text here), and a generation is
//! read part after part: while one part is checked, the next few are
//! inflated by `git cat-file` processes of their own, so the check runs at
//! the speed of the cores together rather than of one inflater.
//!
//! What is held is bounded: at most [`ReadAhead::depth`] blobs at a time,
//! each at most [`INFLATE_WHOLE`] bytes, the most a blob is ever held whole
//! (a larger one is streamed when it is opened). A blob read ahead is the same bytes Git gives a stream; one
//! that fails or does not have the size expected is not given, and its
//! reader opens it as usual (where the error is then reported).

use std::collections::VecDeque;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use git2::Oid;

use crate::odb::blob::INFLATE_WHOLE;

/// Blobs of one repository to be read in a known order, keyed by the
/// caller (a part's number).
pub struct ReadAhead {
    git_dir: PathBuf,
    /// Not begun yet: key, blob, size.
    queue: VecDeque<(u64, Oid, u64)>,
    /// Begun, in order.
    running: VecDeque<Running>,
    depth: usize,
}

/// A blob being read: its key, the thread, and the flag that tells it
/// nobody will take it.
struct Running {
    key: u64,
    thread: JoinHandle<Option<Vec<u8>>>,
    stop: Arc<AtomicBool>,
}

impl ReadAhead {
    /// Reads `order`'s blobs (key, blob, size) from the repository at
    /// `git_dir`, up to [`ReadAhead::depth`] of them ahead; blobs over
    /// [`INFLATE_WHOLE`] are left to their reader.
    pub fn new(git_dir: PathBuf, order: impl IntoIterator<Item = (u64, Oid, u64)>) -> ReadAhead {
        let queue = order.into_iter().filter(|&(_, _, size)| size <= INFLATE_WHOLE).collect();
        let depth = Self::depth();
        let mut r = ReadAhead { git_dir, queue, running: VecDeque::new(), depth };
        r.top_up();
        r
    }

    /// How many blobs are read ahead at once: one a core, at most four
    /// (four parts of 44 MB held; the checker needs cores too).
    pub fn depth() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4)
    }

    /// The bytes of `key`'s blob when they were read ahead; `None`: the
    /// caller opens it as usual. Blobs planned before `key` and not taken
    /// are dropped (the reader went another way).
    pub fn take(&mut self, key: u64) -> Option<Vec<u8>> {
        let got = if let Some(at) = self.running.iter().position(|r| r.key == key) {
            let mut begun: Vec<Running> = self.running.drain(..=at).collect();
            let mine = begun.pop().expect("found");
            // Those passed over stop at their next read, not waited for.
            for r in begun {
                r.stop.store(true, Ordering::Relaxed);
            }
            mine.thread.join().ok().flatten()
        } else {
            if let Some(at) = self.queue.iter().position(|(k, _, _)| *k == key) {
                self.queue.drain(..=at);
            }
            None
        };
        self.top_up();
        got
    }

    fn top_up(&mut self) {
        while self.running.len() < self.depth {
            let Some((key, blob, size)) = self.queue.pop_front() else { return };
            let git_dir = self.git_dir.clone();
            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            let read = move || read_whole(&git_dir, blob, size, &flag);
            match std::thread::Builder::new().name("wtxt-read-ahead".into()).spawn(read) {
                Ok(thread) => self.running.push_back(Running { key, thread, stop }),
                // No thread to be had: the rest is read as it is opened.
                Err(_) => {
                    self.queue.clear();
                    return;
                }
            }
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        for r in &self.running {
            r.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Blob `blob` whole when Git gives exactly `size` bytes; `None` when it
/// fails, gives another size, or nobody will take it any more.
fn read_whole(git_dir: &std::path::Path, blob: Oid, size: u64, stop: &AtomicBool) -> Option<Vec<u8>> {
    let mut r = crate::odb::blob::stream(git_dir, blob).ok()?;
    let mut buf = Vec::new();
    // One byte past `size` tells a longer blob; the room holds it too, so
    // the buffer never grows. Read a MiB at a time, so that a stop is seen.
    buf.try_reserve_exact(size as usize + 1).ok()?;
    while !stop.load(Ordering::Relaxed) {
        let room = (size + 1 - buf.len() as u64).min(1 << 20);
        if (&mut r).take(room).read_to_end(&mut buf).ok()? == 0 {
            return (buf.len() as u64 == size).then_some(buf);
        }
        if buf.len() as u64 > size {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_with(blobs: &[Vec<u8>]) -> (tempfile::TempDir, Vec<Oid>) {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init_bare(dir.path()).unwrap();
        let ids = blobs.iter().map(|b| repo.blob(b).unwrap()).collect();
        (dir, ids)
    }

    #[test]
    fn blobs_taken_in_order_are_the_blobs_and_others_are_left_to_their_reader() {
        let blobs: Vec<Vec<u8>> = (0..6u8).map(|i| vec![b'a' + i; 1000 + i as usize]).collect();
        let (dir, ids) = repo_with(&blobs);
        let order = (0..6).map(|i| (i as u64 + 1, ids[i], blobs[i].len() as u64));
        let mut ahead = ReadAhead::new(dir.path().to_path_buf(), order);
        assert_eq!(ahead.take(1).unwrap(), blobs[0]);
        assert_eq!(ahead.take(2).unwrap(), blobs[1]);
        // Part 3 passed over: 4 is still given, 3 no longer.
        assert_eq!(ahead.take(4).unwrap(), blobs[3]);
        assert!(ahead.take(3).is_none(), "passed over");
        assert!(ahead.take(9).is_none(), "never planned");
        assert_eq!(ahead.take(5).unwrap(), blobs[4]);
        assert_eq!(ahead.take(6).unwrap(), blobs[5]);
        assert!(ahead.take(6).is_none(), "taken once");
    }

    #[test]
    fn a_blob_of_another_size_or_missing_is_not_given() {
        let blobs = vec![b"twelve bytes".to_vec(), b"x".to_vec()];
        let (dir, ids) = repo_with(&blobs);
        let missing = Oid::from_str("0123456789012345678901234567890123456789").unwrap();
        let order = [(1, ids[0], 11), (2, ids[1], 2), (3, missing, 5), (4, ids[0], INFLATE_WHOLE + 1)];
        let mut ahead = ReadAhead::new(dir.path().to_path_buf(), order);
        for key in 1..=4 {
            assert!(ahead.take(key).is_none(), "key {key}");
        }
    }
}
