//! Keys and secrecy: `wtxt keygen`, `encrypt` and `decrypt` (age).

use crate::crypto::armor::{Seal, Unseal};
use crate::crypto::sign::{PublicKey, SecretKey, TrustedKeys};
use crate::error::{Error, Result};
use crate::fs::{write_file, AtomicFile};
use std::io::{BufReader, Seek, Write};
use std::path::Path;

use super::inputs::open;

/// `wtxt keygen`: a new Ed25519 key (PKCS#8 PEM, mode 0600) and its `.pub`.
/// An existing key (or its `.pub`) is replaced only with `force`: a key
/// silently replaced would orphan every signature made with it.
/// With `p256`, a NIST P-256 key for OMS signatures instead: its id is
/// OMS's key hint (SHA-256 of the public key's PEM).
pub fn keygen(out: &Path, force: bool, p256: bool) -> Result<String> {
    let mut pubpath = out.as_os_str().to_owned();
    pubpath.push(".pub");
    for p in [out, Path::new(&pubpath)] {
        if !force && std::fs::symlink_metadata(p).is_ok() {
            return Err(Error::usage(format!(
                "{}: exists already: keygen does not replace a key (give --force to replace it)",
                p.display()
            )));
        }
    }
    if p256 {
        let k = crate::crypto::ec::EcSecretKey::generate_p256()?;
        write_file(out, k.to_pkcs8_pem().as_bytes(), 0o600)?;
        write_file(Path::new(&pubpath), k.public().to_spki_pem().as_bytes(), 0o644)?;
        return Ok(k.public().hint());
    }
    let k = SecretKey::generate()?;
    write_file(out, k.to_pkcs8_pem().as_bytes(), 0o600)?;
    write_file(Path::new(&pubpath), k.public().to_spki_pem().as_bytes(), 0o644)?;
    Ok(hex::encode(k.public().keyid()))
}

/// `wtxt trust`: adds each key not there yet to the trusted-keys file
/// `file` (created when missing), one `<keyid> <base64> [comment]` line
/// each, the lines already there kept byte for byte. Returns each key's id
/// and whether it was added. The file is rewritten whole (a crash leaves
/// the old one), so a link or anything but a regular file at its name is
/// refused; so is a public key file, which names one key and takes no
/// other line.
pub fn trust(file: &Path, keys: &[(PublicKey, String)]) -> Result<Vec<(String, bool)>> {
    let old = crate::fs::read_small_file(file, crate::limits::MAX_KEY_FILE, crate::fs::Links::Refuse)?;
    let mut text = String::from_utf8(old.unwrap_or_default())
        .map_err(|_| Error::input(Default::default(), "expected text (UTF-8)").in_file(file))?;
    if TrustedKeys::is_one_key_file(&text) {
        return Err(Error::usage(format!(
            "{}: a public key file, not a trusted-keys file: name a new file to hold both keys",
            file.display()
        )));
    }
    let mut trusted = TrustedKeys::parse(&text).map_err(|e| e.in_file(file))?;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let mut done = Vec::new();
    for (key, comment) in keys {
        let id = hex::encode(key.keyid());
        let new = trusted.find(&key.keyid()).is_none();
        if new {
            text.push_str(&TrustedKeys::line(key, comment));
            trusted.add(*key);
        }
        done.push((id, new));
    }
    if done.iter().any(|(_, new)| *new) {
        write_file(file, text.as_bytes(), 0o644)?;
    }
    Ok(done)
}

/// The text formats `encrypt` accepts: WTXT, WTXT-DELTA and WSUM.
fn is_wtxt_text(head: &[u8]) -> bool {
    [&b"WTXT 1\n"[..], b"WTXT-DELTA 2 ", b"WSUM 1 "].iter().any(|m| head.starts_with(m))
}

/// `wtxt encrypt`: wraps a WTXT (or delta, or WSUM) in age ASCII armor.
/// A split snapshot is encrypted file by file: the head to `out`, each part
/// to `out`'s parts folder, so every file stays under the part size and
/// `-i IDENTITY` reads the set as it reads a plain one.
pub fn encrypt(input: &Path, out: &Path, seal: Seal) -> Result<()> {
    let parts = split_parts(input)?;
    for ix in 1..=parts {
        let name = crate::format::split::part_name(ix);
        let dir = crate::store::parts_dir(out);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        encrypt_one(&crate::store::parts_dir(input).join(&name), &dir.join(&name), &seal, true)?;
    }
    encrypt_one(input, out, &seal, false)
}

/// The number of parts when `path` is the head of a split snapshot, else 0.
fn split_parts(path: &Path) -> Result<u64> {
    let (f, _) = open(path)?;
    match crate::format::split::open(Box::new(f)).map_err(|e| e.in_file(path))? {
        crate::format::split::Opened::Split(h) => Ok(h.parts.len() as u64),
        crate::format::split::Opened::Single(_) => Ok(0),
    }
}

fn encrypt_one(input: &Path, out: &Path, seal: &Seal, part: bool) -> Result<()> {
    let (f, _) = open(input)?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let head = std::io::BufRead::fill_buf(&mut r).map_err(|e| Error::io(input, e))?;
    if !(is_wtxt_text(head) || (part && head.starts_with(b"WTXT part "))) {
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

/// `wtxt decrypt`: the plaintext of an age file, written atomically; for an
/// encrypted split snapshot, its parts too (from `input`'s parts folder to
/// `out`'s).
pub fn decrypt(input: &Path, out: &Path, unseal: &Unseal) -> Result<()> {
    let head = decrypt_one(input, out, unseal)?;
    let mut f = head.try_clone()?;
    f.seek(std::io::SeekFrom::Start(0)).map_err(|e| Error::io(out, e))?;
    if let crate::format::split::Opened::Split(h) =
        crate::format::split::open(Box::new(f)).map_err(|e| e.in_file(out))?
    {
        let (from, to) = (crate::store::parts_dir(input), crate::store::parts_dir(out));
        std::fs::create_dir_all(&to).map_err(|e| Error::io(&to, e))?;
        for p in &h.parts {
            let name = crate::format::split::part_name(p.ix);
            decrypt_one(&from.join(&name), &to.join(&name), unseal)?.commit()?;
        }
    }
    head.commit()
}

/// A decrypted file, staged; the caller commits it.
struct Staged(AtomicFile, std::path::PathBuf);

impl Staged {
    fn try_clone(&self) -> Result<std::fs::File> {
        self.0.file_ref().try_clone().map_err(|e| Error::io(&self.1, e))
    }

    fn commit(self) -> Result<()> {
        self.0.commit()
    }
}

fn decrypt_one(input: &Path, out: &Path, unseal: &Unseal) -> Result<Staged> {
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
    Ok(Staged(af, out.to_path_buf()))
}
