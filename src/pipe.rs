//! An in-process byte pipe between threads, so one pass can write a file and
//! feed a verifier at the same time (`delta apply` proves its output while
//! writing it).
#![forbid(unsafe_code)]

use std::io::{Read, Write};

use crossbeam_channel::{bounded, Receiver, Sender};

/// Blocks handed across; bounded so memory stays constant.
const BLOCK: usize = 1 << 20;
const DEPTH: usize = 8;

/// The writing end. A write after the reader has gone fails (`BrokenPipe`),
/// so a copy feeding a verifier that stopped at a problem stops too; the
/// reader's result says why.
pub struct PipeWriter {
    tx: Option<Sender<Vec<u8>>>,
    buf: Vec<u8>,
    /// Blocks the reader is done with, reused to avoid fresh pages.
    spare: Receiver<Vec<u8>>,
}

/// The reading end.
pub struct PipeReader {
    rx: Receiver<Vec<u8>>,
    cur: Vec<u8>,
    pos: usize,
    spare: Sender<Vec<u8>>,
}

/// A connected pair.
pub fn pipe() -> (PipeWriter, PipeReader) {
    let (tx, rx) = bounded(DEPTH);
    let (spare_tx, spare_rx) = bounded(DEPTH + 2);
    (
        PipeWriter { tx: Some(tx), buf: Vec::with_capacity(BLOCK), spare: spare_rx },
        PipeReader { rx, cur: Vec::new(), pos: 0, spare: spare_tx },
    )
}

impl PipeWriter {
    fn send(&mut self) {
        if let Some(tx) = &self.tx {
            let mut next = self.spare.try_recv().unwrap_or_else(|_| Vec::with_capacity(BLOCK));
            next.clear();
            let block = std::mem::replace(&mut self.buf, next);
            if tx.send(block).is_err() {
                self.tx = None; // the reader stopped; its result says why
            }
        }
    }

    /// Whether the reader still takes what is written.
    pub fn is_open(&self) -> bool {
        self.tx.is_some()
    }

    /// Sends what is buffered and closes the pipe (the reader sees EOF).
    pub fn close(mut self) {
        self.send();
        self.tx = None;
    }
}

impl Write for PipeWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.tx.is_none() {
            return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the reading side stopped"));
        }
        self.buf.extend_from_slice(b);
        if self.buf.len() >= BLOCK {
            self.send();
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Read for PipeReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.cur.len() {
            match self.rx.recv() {
                Ok(b) => {
                    let done = std::mem::replace(&mut self.cur, b);
                    let _ = self.spare.try_send(done);
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len() - self.pos);
        out[..n].copy_from_slice(&self.cur[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Writes everything to two writers.
pub struct Tee<A, B>(pub A, pub B);

impl<A: Write, B: Write> Write for Tee<A, B> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(b)?;
        self.1.write_all(b)?;
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()?;
        self.1.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_cross_in_order() {
        let (mut w, mut r) = pipe();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        let t = std::thread::spawn(move || {
            let mut got = Vec::new();
            r.read_to_end(&mut got).unwrap();
            got
        });
        for c in data.chunks(12345) {
            w.write_all(c).unwrap();
        }
        w.close();
        assert_eq!(t.join().unwrap(), data);
    }

    #[test]
    fn writes_after_the_reader_has_gone_fail_and_are_not_kept() {
        let (mut w, r) = pipe();
        drop(r);
        let block = vec![0u8; BLOCK];
        w.write_all(&block).unwrap(); // sent: the reader's absence shows here
        assert!(!w.is_open());
        let e = w.write_all(&block).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
        assert!(w.buf.len() <= BLOCK, "{} bytes kept", w.buf.len());
    }
}
