//! The `replaylab` command. Everything happens in [`harness::cli`].

fn main() -> std::process::ExitCode {
    harness::cli::main()
}
