//! The walk that makes a DELTA v2 of two snapshots (`format::delta::create`),
//! without the verification `wtxt delta create` does first: the parts read
//! hashed (what the command reads), or unhashed with `--unhashed`, as the
//! snapshot pipeline reads its own ring files, the chunks the delta does
//! not carry sought past. Prints what the delta carries and the wall time;
//! the delta itself goes nowhere.
//!
//! Run: `cargo run --release --example delta_pass -- BASE.wtxt TARGET.wtxt [--unhashed]`

use std::path::Path;

use wtxt::store::WtxtIn;

fn main() -> wtxt::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [base, target, rest @ ..] = &args[..] else {
        eprintln!("usage: delta_pass BASE.wtxt TARGET.wtxt [--unhashed]");
        std::process::exit(2);
    };
    let open = if rest.iter().any(|a| a == "--unhashed") { WtxtIn::open_unhashed } else { WtxtIn::open };
    let (base, target) = (Path::new(base), Path::new(target));
    let started = std::time::Instant::now();
    let (mut b, mut t) = (open(base, None)?, open(target, None)?);
    let stats = wtxt::format::delta::create((b.lines(), base), (t.lines(), target), &mut std::io::sink())?;
    println!(
        "{} of {} chunks changed ({} bytes of chunk text), {:.2} s",
        stats.changed_chunks,
        stats.target_chunks,
        stats.changed_text_bytes,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
