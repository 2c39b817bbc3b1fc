//! Shared helpers: fixture paths and running the real binary.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/wtxt")
}

pub fn fixture(rel: &str) -> PathBuf {
    fixtures().join(rel)
}

pub fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(rel)).unwrap()
}

/// The `wtxt` binary, run from the fixtures folder with a clean environment.
pub fn wtxt() -> Command {
    let mut c = Command::cargo_bin("wtxt").unwrap();
    c.current_dir(fixtures()).env_remove("SOURCE_DATE_EPOCH").env_remove("WTXT_HMAC_KEY");
    c
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(args: &[&str]) -> Run {
    let o = wtxt().args(args).output().unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Verifies bytes with the library, as `wtxt verify` would.
pub fn verify_bytes(
    bytes: &[u8],
    opts: &wtxt::wtxt::verify::VerifyOptions,
) -> Result<wtxt::wtxt::verify::Report, wtxt::Error> {
    wtxt::wtxt::verify::verify(bytes, opts, None)
}
