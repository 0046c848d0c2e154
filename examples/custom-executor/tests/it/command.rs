//! The example's binary is the whole `replaylab` command with its executors added: its matrix
//! writes the four reports, with the rows the example cannot support `not applicable`; a
//! failing run of the broken variant prints a reproduce command that, run as printed,
//! reproduces the failure.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The binary as Cargo built it for these tests.
const BIN: &str = env!("CARGO_BIN_EXE_custom-replaylab");

/// The binary, run outside `cargo run` (so its reproduce commands name its path).
fn custom_replaylab() -> Command {
    let mut command = Command::new(BIN);
    command.env_remove("CARGO").env_remove("CARGO_PKG_NAME").env_remove("GITHUB_STEP_SUMMARY");
    command
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("custom-replaylab-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_matrix_writes_every_report_and_marks_what_the_example_cannot_support() {
    let out = scratch("matrix");
    let output = custom_replaylab()
        .args(["matrix", "--executor", "custom", "--seeds", "2", "--jobs", "1", "--out"])
        .arg(&out)
        .output()
        .expect("the binary runs");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        stdout(&output),
        String::from_utf8_lossy(&output.stderr)
    );
    for file in ["matrix.json", "matrix.md", "junit.xml", "report.html"] {
        assert!(out.join(file).is_file(), "{file} was not written");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("matrix.json")).expect("matrix.json reads"))
            .expect("matrix.json parses");
    assert_eq!(json["executor"], "custom");
    let verdict_of = |row: &str| {
        json["rows"].as_array().expect("rows").iter().find(|r| r["row"] == row).expect("the row exists")
            ["verdict"]
            .clone()
    };
    // C9 is delayed jobs, which the example does not declare; C2 is a lost answer, which it must survive.
    assert_eq!(verdict_of("C9"), "not_applicable");
    assert_eq!(verdict_of("C2"), "pass");
    for scenario in json["scenarios"].as_array().expect("scenarios") {
        if scenario["verdict"] == "not_applicable" {
            assert!(
                scenario["counts"].get("pass").is_none(),
                "a scenario not run has no passing run: {scenario}"
            );
        }
    }
    assert!(stdout(&output).contains("not applicable"), "{}", stdout(&output));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_failing_run_prints_a_reproduce_command_that_reproduces_it_as_printed() {
    let out = scratch("keyless");
    let output = custom_replaylab()
        .args(["matrix", "--executor", "custom-keyless", "--seeds", "2", "--jobs", "1", "--out"])
        .arg(&out)
        .output()
        .expect("the binary runs");
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "the keyless variant must fail the matrix:\n{text}");
    let reproduce = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("reproduce: "))
        .unwrap_or_else(|| panic!("no reproduce command in:\n{text}"))
        .to_owned();
    assert!(reproduce.starts_with(BIN), "it names the binary that was run: {reproduce}");
    assert!(reproduce.contains("--executor custom-keyless"), "{reproduce}");
    let again = Command::new("sh").arg("-c").arg(&reproduce).env_remove("CARGO").output().expect("sh runs");
    let again_text = stdout(&again);
    assert_eq!(again.status.code(), Some(1), "`{reproduce}` did not fail:\n{again_text}");
    let violation = |text: &str| text.lines().find(|l| l.trim().starts_with("violation:")).map(str::to_owned);
    let first = violation(&again_text).unwrap_or_else(|| panic!("no violation in:\n{again_text}"));
    assert!(text.contains(first.trim()), "the reproduced run shows another failure: {first}\n{text}");
    let _ = std::fs::remove_dir_all(&out);
}
