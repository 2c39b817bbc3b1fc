//! The `wtxt` binary: the command line of [`wtxt::cli`].

fn main() -> std::process::ExitCode {
    wtxt::cli::main(std::env::args_os())
}
