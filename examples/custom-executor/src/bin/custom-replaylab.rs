//! The whole `replaylab` command, with this crate's executors added:
//!
//! ```text
//! cargo run --release -p custom-executor --bin custom-replaylab -- matrix --executor custom --seeds 5 --out DIR
//! ```

fn main() -> std::process::ExitCode {
    harness::cli::main_with(custom_executor::executors())
}
