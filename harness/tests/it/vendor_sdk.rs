//! The vendor twins (docs/vendors.md) driven by the vendors' own SDKs as their clients: the Stripe
//! twin by `stripe` from PyPI and `stripe` from npm, the GitHub twin by PyGithub, the Slack twin
//! by `slack_sdk`; each script goes through every route its twin serves and every error it
//! answers, each error arriving as the SDK's own exception. The scripts are in
//! `fake-downstream/tests/vendor-sdk/`; `.ci/vendor-sdks` installs the SDKs (a venv and `npm
//! ci`) and prints the venv's python and the node folder. Here each script runs against
//! `replaylab downstream` on a real port. Under `CI` a missing environment fails the test.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `replaylab downstream` on a free loopback port, killed when dropped.
struct Twin {
    child: Child,
    url: String,
}

impl Twin {
    fn start() -> Twin {
        let mut child = Command::new(REPLAYLAB)
            .args(["downstream", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("replaylab downstream starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("it says where it listens");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected: {line:?}"))
            .to_owned();
        Twin { child, url }
    }
}

impl Drop for Twin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Skips (or, under CI, fails) when the SDKs are not installed.
fn missing(what: &str) -> bool {
    let how = format!("{what} is not set up: run `.ci/vendor-sdks` from the repository root");
    assert!(std::env::var_os("CI").is_none(), "{how}");
    eprintln!("SKIPPED: {how}");
    true
}

/// Runs `command` against a fresh twin, whose address it reads from the variable `url_var`, and
/// holds it to its own tally: exit 0, and a closing `N passed, 0 failed` (the Python scripts')
/// or TAP's `# pass N` and `# fail 0` (node's), with N at least `at_least`.
fn passes(mut command: Command, url_var: &str, at_least: usize) {
    let twin = Twin::start();
    let output = command.env(url_var, &twin.url).stdin(Stdio::null()).output().expect("the script runs");
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the SDK script failed against the twin:\n{text}");
    let tally = text
        .lines()
        .rev()
        .find_map(|line| {
            let (passed, failed) = line.trim().split_once(" passed, ")?;
            let passed: usize = passed.rsplit(' ').next()?.parse().ok()?;
            let failed: usize = failed.split(' ').next()?.parse().ok()?;
            Some((passed, failed))
        })
        .or_else(|| {
            let count = |prefix: &str| {
                text.lines()
                    .rev()
                    .find_map(|line| line.strip_prefix(prefix).and_then(|n| n.trim().parse().ok()))
            };
            Some((count("# pass ")?, count("# fail ")?))
        })
        .unwrap_or_else(|| panic!("no `N passed, N failed` line nor TAP counts:\n{text}"));
    assert_eq!(tally.1, 0, "{text}");
    assert!(tally.0 >= at_least, "only {} SDK checks ran (expected at least {at_least}):\n{text}", tally.0);
}

/// Runs the Python script `script` of `fake-downstream/tests/vendor-sdk/python` with the venv's
/// python (`REPLAYLAB_VENDOR_PYTHON`, or `target/vendor-sdk-venv`), which must import `module`
/// (the SDK), as [`passes`] does.
fn python_passes(script: &str, module: &str, url_var: &str, at_least: usize) {
    let python = std::env::var_os("REPLAYLAB_VENDOR_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/vendor-sdk-venv/bin/python"));
    let ready = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready && missing(&format!("{} with the {module} package", python.display())) {
        return;
    }
    let mut command = Command::new(python);
    command.arg(root().join("fake-downstream/tests/vendor-sdk/python").join(script));
    passes(command, url_var, at_least);
}

#[test]
fn the_python_sdk_drives_every_route_and_error_of_the_stripe_twin() {
    python_passes("test_stripe_twin.py", "stripe", "STRIPE_TWIN_URL", 15);
}

#[test]
fn pygithub_drives_every_route_and_error_of_the_github_twin() {
    // 23: every check of test_github_twin.py.
    python_passes("test_github_twin.py", "github", "GITHUB_TWIN_URL", 23);
}

#[test]
fn slack_sdk_drives_every_method_and_error_of_the_slack_twin() {
    // 15: every check of test_slack_twin.py.
    python_passes("test_slack_twin.py", "slack_sdk", "SLACK_TWIN_URL", 15);
}

#[test]
fn the_node_sdk_drives_every_route_and_error_of_the_stripe_twin() {
    let folder = std::env::var_os("REPLAYLAB_VENDOR_NODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("fake-downstream/tests/vendor-sdk/node"));
    if !folder.join("node_modules/stripe").is_dir()
        && missing(&format!("{}/node_modules/stripe", folder.display()))
    {
        return;
    }
    let node = std::env::var_os("REPLAYLAB_NODE").unwrap_or_else(|| "node".into());
    let mut command = Command::new(node);
    command.current_dir(&folder).args(["--test", "--test-reporter=tap", "stripe_twin.test.mjs"]);
    passes(command, "STRIPE_TWIN_URL", 11);
}
