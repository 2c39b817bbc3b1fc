//! age encryption with ASCII armor: a WTXT stays pure text while secret.
//! Files interoperate with the standard `age` tool both ways.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::str::FromStr;

use age::armor::{ArmoredReader, ArmoredWriter, Format};
use age::secrecy::SecretString;

use crate::crypto::mac::read_small_text;
use crate::error::{Error, Result};

/// First line of an armored age file.
pub const ARMOR_BEGIN: &[u8] = b"-----BEGIN AGE ENCRYPTED FILE-----";
/// First line of a binary age file.
pub const BINARY_BEGIN: &[u8] = b"age-encryption.org/v1";

/// Environment variable holding a passphrase for `-p`.
pub const PASSPHRASE_ENV: &str = "WTXT_PASSPHRASE";

/// True when `head` starts an age file (armored or binary).
pub fn is_age(head: &[u8]) -> bool {
    head.starts_with(ARMOR_BEGIN) || head.starts_with(BINARY_BEGIN)
}

/// Parses one recipient: `age1...` (X25519) or an SSH public key line
/// (`ssh-ed25519 ...`, `ssh-rsa ...`).
pub fn parse_recipient(s: &str) -> Result<Box<dyn age::Recipient + Send>> {
    let s = s.trim();
    if s.starts_with("age1") {
        return age::x25519::Recipient::from_str(s)
            .map(|r| Box::new(r) as _)
            .map_err(|e| Error::usage(format!("recipient {s}: {e}")));
    }
    if s.starts_with("ssh-") {
        return age::ssh::Recipient::from_str(s)
            .map(|r| Box::new(r) as _)
            .map_err(|e| Error::usage(format!("recipient {}: {e:?}", s.split(' ').next().unwrap_or(s))));
    }
    Err(Error::usage(format!("recipient `{s}`: expected an age1... key or an ssh-ed25519/ssh-rsa public key")))
}

/// Reads a recipients file: one recipient a line, `#` comments, blank lines.
pub fn read_recipients_file(path: &Path) -> Result<Vec<Box<dyn age::Recipient + Send>>> {
    let text = read_small_text(path)?;
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| parse_recipient(l).map_err(|e| e.in_file(path)))
        .collect()
}

/// Reads identities from a file: age identity files (`AGE-SECRET-KEY-1...`)
/// or unencrypted OpenSSH private keys.
pub fn read_identities(path: &Path) -> Result<Vec<Box<dyn age::Identity + Send + Sync>>> {
    let text = read_small_text(path)?;
    if text.contains("AGE-SECRET-KEY-") {
        let file = age::IdentityFile::from_buffer(text.as_bytes())
            .map_err(|e| Error::input(Default::default(), format!("age identity file: {e}")).in_file(path))?;
        return file
            .into_identities()
            .map_err(|e| Error::input(Default::default(), format!("age identity file: {e}")).in_file(path));
    }
    let id = age::ssh::Identity::from_buffer(text.as_bytes(), Some(path.display().to_string())).map_err(|e| {
        Error::input(Default::default(), format!("expected an age identity file or an OpenSSH private key: {e}"))
            .in_file(path)
    })?;
    match id {
        age::ssh::Identity::Unencrypted(_) => Ok(vec![Box::new(id)]),
        age::ssh::Identity::Encrypted(_) => Err(Error::input(
            Default::default(),
            "passphrase-protected SSH keys are not supported: decrypt with `age -d -i`",
        )
        .in_file(path)),
        age::ssh::Identity::Unsupported(_) => {
            Err(Error::input(Default::default(), "unsupported SSH key type for age").in_file(path))
        }
    }
}

/// The passphrase for `-p`: from a file (first line) or `WTXT_PASSPHRASE`.
pub fn passphrase(file: Option<&Path>) -> Result<SecretString> {
    let p = match file {
        Some(f) => read_small_text(f)?.lines().next().unwrap_or_default().to_string(),
        None => std::env::var(PASSPHRASE_ENV).map_err(|_| {
            Error::usage(format!("-p needs a passphrase: set {PASSPHRASE_ENV} or give --passphrase-file"))
        })?,
    };
    if p.is_empty() {
        return Err(Error::usage("the passphrase is empty"));
    }
    Ok(SecretString::from(p))
}

/// How to encrypt.
pub enum Seal {
    /// age recipients (X25519 or SSH keys).
    Recipients(Vec<Box<dyn age::Recipient + Send>>),
    /// A scrypt passphrase.
    Passphrase(SecretString),
}

/// The scrypt work factor of passphrase files we write: `N = 2^18`, what
/// the `age` tool writes, 256 MiB of memory to open.
pub const SCRYPT_LOG_N: u8 = 18;

/// The highest work factor `age` itself accepts (its default maximum).
pub const AGE_MAX_LOG_N: u8 = 22;

/// Environment variable that raises the accepted work factor, up to [`AGE_MAX_LOG_N`].
pub const SCRYPT_MAX_ENV: &str = "WTXT_SCRYPT_MAX_LOG_N";

/// The highest scrypt work factor a passphrase file may ask for: 18 (256
/// MiB, the heap cap) unless `WTXT_SCRYPT_MAX_LOG_N` says more, never above
/// the 22 (4 GiB) that `age` accepts. A header asking for more is refused
/// before any work, instead of making a 600-byte file cost gigabytes.
pub fn max_scrypt_log_n() -> Result<u8> {
    match std::env::var(SCRYPT_MAX_ENV) {
        Err(_) => Ok(SCRYPT_LOG_N),
        Ok(v) => v.trim().parse::<u8>().ok().filter(|n| (1..=AGE_MAX_LOG_N).contains(n)).ok_or_else(|| {
            Error::usage(format!("{SCRYPT_MAX_ENV}: expected a number from 1 to {AGE_MAX_LOG_N}, found {v:?}"))
        }),
    }
}

/// Encrypts `input` to `out` as ASCII-armored age.
pub fn encrypt<R: Read, W: Write>(mut input: R, seal: &Seal, out: W) -> Result<W> {
    let enc = match seal {
        Seal::Recipients(rs) => {
            if rs.is_empty() {
                return Err(Error::usage("no recipients: give -r, -R or -p"));
            }
            age::Encryptor::with_recipients(rs.iter().map(|r| r.as_ref() as &dyn age::Recipient))
                .map_err(|e| Error::usage(format!("age: {e}")))?
        }
        Seal::Passphrase(p) => {
            // The work factor the `age` tool writes, not rage's "1 second on
            // this machine": a faster machine must not make files that
            // others (and our own default limit) refuse.
            let mut r = age::scrypt::Recipient::new(p.clone());
            r.set_work_factor(SCRYPT_LOG_N);
            age::Encryptor::with_recipients(std::iter::once(&r as &dyn age::Recipient))
                .map_err(|e| Error::usage(format!("age: {e}")))?
        }
    };
    let io = |e: std::io::Error| Error::write_failed(e);
    let armored = ArmoredWriter::wrap_output(out, Format::AsciiArmor).map_err(io)?;
    let mut w = enc.wrap_output(armored).map_err(io)?;
    std::io::copy(&mut input, &mut w).map_err(io)?;
    w.finish().and_then(|a| a.finish()).map_err(io)
}

/// How to decrypt.
pub enum Unseal {
    /// age identities (X25519 or SSH keys).
    Identities(Vec<Box<dyn age::Identity + Send + Sync>>),
    /// A scrypt passphrase.
    Passphrase(SecretString),
}

/// A reader of the plaintext of an age file (armored or binary).
pub fn decrypt<'a, R: BufRead + 'a>(input: R, unseal: &Unseal) -> Result<Box<dyn Read + 'a>> {
    let dec = age::Decryptor::new_buffered(ArmoredReader::new(input))
        .map_err(|e| Error::input(Default::default(), format!("not a readable age file: {e}")))?;
    let fail = |e: age::DecryptError| Error::check(Default::default(), format!("age: cannot decrypt: {e}"));
    let reader = match unseal {
        Unseal::Identities(ids) => {
            if dec.is_scrypt() {
                return Err(Error::usage("this file is passphrase-encrypted: use -p"));
            }
            dec.decrypt(ids.iter().map(|i| i.as_ref() as &dyn age::Identity)).map_err(fail)?
        }
        Unseal::Passphrase(p) => {
            let mut id = age::scrypt::Identity::new(p.clone());
            id.set_max_work_factor(max_scrypt_log_n()?);
            dec.decrypt(std::iter::once(&id as &dyn age::Identity)).map_err(|e| match e {
                age::DecryptError::ExcessiveWork { required, .. } => Error::input(
                    Default::default(),
                    format!(
                        "age: the passphrase's scrypt work factor 2^{required} is over the accepted 2^{} \
                         (raise {SCRYPT_MAX_ENV}, at most {AGE_MAX_LOG_N} as age allows)",
                        max_scrypt_log_n().unwrap_or(SCRYPT_LOG_N)
                    ),
                ),
                e => fail(e),
            })?
        }
    };
    Ok(Box::new(reader))
}

/// Opens `path` for reading through a buffer of `buffer` bytes (reads of
/// at least that many go straight to the file), decrypting it when it is
/// an age file and `unseal` is given; an age file without it is unusable
/// input. A plain file can be passed over unread ([`crate::fs::Skip`]); a
/// decrypted one is read through.
pub fn open_maybe_sealed(path: &Path, unseal: Option<&Unseal>, buffer: usize) -> Result<Box<dyn crate::fs::Skip>> {
    Ok(match unsealed(BufReader::with_capacity(buffer, crate::fs::open_input_file(path)?), path, unseal)? {
        Unsealed::Decrypted(r) => Box::new(crate::fs::Streamed(r)),
        Unsealed::Plain(r) => Box::new(r),
    })
}

/// [`open_maybe_sealed`] of `f`, an input already open, named `path`.
pub fn read_maybe_sealed<'a>(f: impl Read + 'a, path: &Path, unseal: Option<&Unseal>) -> Result<Box<dyn Read + 'a>> {
    Ok(match unsealed(BufReader::with_capacity(1 << 20, f), path, unseal)? {
        Unsealed::Decrypted(r) => r,
        Unsealed::Plain(r) => Box::new(r),
    })
}

/// An input as read: decrypted, or as it is.
enum Unsealed<'a, R> {
    Decrypted(Box<dyn Read + 'a>),
    Plain(BufReader<R>),
}

/// `r` decrypted with `unseal` when its first bytes are an age file's.
fn unsealed<'a, R: Read + 'a>(mut r: BufReader<R>, path: &Path, unseal: Option<&Unseal>) -> Result<Unsealed<'a, R>> {
    let head = r.fill_buf().map_err(|e| Error::io(path, e))?;
    if !is_age(head) {
        return Ok(Unsealed::Plain(r));
    }
    match unseal {
        Some(u) => decrypt(r, u).map(Unsealed::Decrypted).map_err(|e| e.in_file(path)),
        None => {
            Err(Error::input(crate::error::Position::Line(1), "the file is age-encrypted: give -i IDENTITY (or -p)")
                .in_file(path))
        }
    }
}
