//! Running the built `replaylab` the way a user who installed it does.

/// A shell (or a program, with `sh = false`) run as after `cargo install`: the built
/// `replaylab` on `PATH`, outside `cargo run` (so the reproduce commands it prints name
/// `replaylab`, and work as printed in the same environment).
pub fn installed(replaylab: &str, sh: bool) -> std::process::Command {
    let bin = std::path::Path::new(replaylab).parent().expect("the binary lies in a directory");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin.to_owned()).chain(std::env::split_paths(&path)))
        .expect("PATH joins");
    let mut command = std::process::Command::new(if sh { "sh" } else { "replaylab" });
    command.env("PATH", path).env_remove("CARGO").env_remove("CARGO_PKG_NAME");
    if sh {
        command.arg("-c");
    }
    command
}
