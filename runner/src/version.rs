//! The replaylab build: its version and the commit it was built from (`runner/build.rs`),
//! as `replaylab --version` prints them and the reports record them.

use std::sync::OnceLock;

/// replaylab's version (the workspace's; the wheel and the npm package carry the same).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit, or empty (built from a source archive without `REPLAYLAB_BUILD_COMMIT`).
const COMMIT: &str = env!("REPLAYLAB_BUILD_COMMIT");

/// The commit replaylab was built from (40 hex digits), when the build knew it.
pub fn commit() -> Option<&'static str> {
    (!COMMIT.is_empty()).then_some(COMMIT)
}

/// `0.1.0 (commit 1a2b3c4d5e6f)`, or `0.1.0 (commit unknown)`: what `--version` prints after
/// the program's name.
pub fn line() -> &'static str {
    static LINE: OnceLock<String> = OnceLock::new();
    LINE.get_or_init(|| format!("{VERSION} (commit {})", commit().map_or("unknown", |commit| &commit[..12])))
}
