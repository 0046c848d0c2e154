//! Records the commit replaylab was built from, for `replaylab --version` and the reports
//! (`harness_commit`): `REPLAYLAB_BUILD_COMMIT` when it is set (a build from a source archive
//! that has no `.git`), else `git rev-parse HEAD` in this checkout, else none. The script runs
//! again when `HEAD` moves (a commit, a checkout), so a binary never names an older commit
//! than the one it was built at. Changes not yet committed are not recorded.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).current_dir(dir).output().ok()?;
    output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn is_commit(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|byte| byte.is_ascii_hexdigit())
}

fn main() {
    println!("cargo:rerun-if-env-changed=REPLAYLAB_BUILD_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let given = std::env::var("REPLAYLAB_BUILD_COMMIT").ok().filter(|commit| !commit.is_empty());
    if let Some(commit) = &given {
        assert!(
            is_commit(commit),
            "REPLAYLAB_BUILD_COMMIT must be a full commit hash (40 hex digits), not {commit:?}"
        );
    }
    let commit = given.or_else(|| git(&dir, &["rev-parse", "HEAD"]).filter(|commit| is_commit(commit)));
    if commit.is_some() {
        // Where git reads HEAD from: HEAD itself, the branch it names, and packed refs.
        let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
        watched.extend(git(&dir, &["symbolic-ref", "-q", "HEAD"]));
        for name in watched {
            if let Some(path) = git(&dir, &["rev-parse", "--git-path", &name]) {
                let path = dir.join(path);
                // A file that does not exist would make cargo run the script on every build.
                if path.exists() {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
        }
    }
    println!("cargo:rustc-env=REPLAYLAB_BUILD_COMMIT={}", commit.unwrap_or_default());
}
