//! The `replaylab` command. Everything happens in [`harness::cli`].

/// A simulated run allocates and frees many small objects (tasks, buffers, history events);
/// mimalloc does that faster than the system allocator (see `replaylab bench sim`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    harness::cli::main()
}
