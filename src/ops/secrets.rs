//! Keys and secrecy: `wtxt keygen`, `encrypt` and `decrypt` (age).

use crate::atomic::{write_file, AtomicFile};
use crate::crypto::armor::{Seal, Unseal};
use crate::crypto::sign::SecretKey;
use crate::error::{Error, Result};
use std::io::{BufReader, Write};
use std::path::Path;

use super::*;

/// `wtxt keygen`: a new Ed25519 key (PKCS#8 PEM, mode 0600) and its `.pub`.
pub fn keygen(out: &Path) -> Result<String> {
    let k = SecretKey::generate()?;
    let mut pubpath = out.as_os_str().to_owned();
    pubpath.push(".pub");
    write_file(out, k.to_pkcs8_pem().as_bytes(), 0o600)?;
    write_file(Path::new(&pubpath), k.public().to_spki_pem().as_bytes(), 0o644)?;
    Ok(hex::encode(k.public().keyid()))
}

/// The text formats `encrypt` accepts: WTXT, WTXT-DELTA and WSUM.
fn is_wtxt_text(head: &[u8]) -> bool {
    [&b"WTXT 1\n"[..], b"WTXT-DELTA 2 ", b"WSUM 1 "].iter().any(|m| head.starts_with(m))
}

/// `wtxt encrypt`: wraps a WTXT (or delta, or WSUM) in age ASCII armor.
pub fn encrypt(input: &Path, out: &Path, seal: Seal) -> Result<()> {
    let (f, _) = open(input)?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let head = std::io::BufRead::fill_buf(&mut r).map_err(|e| Error::io(input, e))?;
    if !is_wtxt_text(head) {
        return Err(
            Error::input(crate::error::Position::Line(1), "expected a WTXT, WTXT-DELTA or WSUM file").in_file(input)
        );
    }
    let mut af = AtomicFile::create(out)?;
    {
        let w = std::io::BufWriter::new(af.file());
        let mut w = crate::crypto::armor::encrypt(r, seal, w).map_err(|e| e.in_files(input, out))?;
        w.flush().map_err(|e| Error::io(out, e))?;
    }
    af.commit()
}

/// `wtxt decrypt`: the plaintext of an age file, written atomically.
pub fn decrypt(input: &Path, out: &Path, unseal: &Unseal) -> Result<()> {
    let (f, _) = open(input)?;
    let mut plain =
        crate::crypto::armor::decrypt(BufReader::with_capacity(1 << 20, f), unseal).map_err(|e| e.in_file(input))?;
    let mut af = AtomicFile::create(out)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, af.file());
        std::io::copy(&mut plain, &mut w).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => {
                Error::check(Default::default(), format!("age: the ciphertext is damaged: {e}")).in_file(input)
            }
            _ => Error::io(out, e),
        })?;
        w.flush().map_err(|e| Error::io(out, e))?;
    }
    af.commit()
}
