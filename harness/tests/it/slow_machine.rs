//! A machine too slow for the scenario (issue 46): real time that ran out is `unknown`, never
//! `fail`. The reference served over MCP, wrapped in `tests/fixtures/stall.py`, a worker that
//! stalls its own restart, its downstream requests or its answers by seconds, as a heavily
//! loaded machine does. Each time premise (runner::timing) is broken on purpose, and the run
//! names it, with its measured times, as `unknown`; the same scenario without the stall
//! passes, so the premise is what made the difference.

use std::path::{Path, PathBuf};

use crate::black_box::{replaylab, root, scratch, text};

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");

fn stall() -> PathBuf {
    root().join("harness/tests/fixtures/stall.py")
}

/// The reference over MCP on one SQLite file per run, behind the stalling wrapper.
fn stalled(options: &str) -> String {
    format!(
        "python3 {} {options} -- {REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db",
        stall().display()
    )
}

/// `replaylab run ID --seed 0` against `command`, with `files` as extra scenario files: the
/// exit code and what it printed.
fn run(id: &str, command: &str, files: &[&Path]) -> (Option<i32>, String) {
    let mut arguments = vec!["run".to_owned(), id.to_owned(), "--seed".into(), "0".into()];
    for file in files {
        arguments.extend(["--scenario-file".to_owned(), file.display().to_string()]);
    }
    arguments.extend(["--executor-cmd".to_owned(), command.to_owned()]);
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    let output = replaylab(&arguments);
    (output.status.code(), text(&output))
}

fn assert_unknown_naming(said: &str, premise: &str) {
    assert!(said.contains(": unknown"), "{said}");
    assert!(!said.contains(": fail"), "{said}");
    assert!(said.contains(&format!("time premise `{premise}` did not hold")), "{said}");
}

/// S03 with an 8 s retention: the crashed worker's restart takes 10 s more than it should, so
/// the retry (6 s after the restart, by the scenario's own wait) reaches the executor past
/// retention, and is rightly answered `expired`. The scenario meant a retry within retention:
/// the run is `unknown`, naming the retry's measured time and the restart's; with a restart
/// that does not stall, it passes.
#[test]
fn a_restart_slower_than_retention_is_unknown_not_fail() {
    let dir = scratch("slow_restart");
    let s03 =
        std::fs::read_to_string(root().join("scenarios/matrix/S03_crash_after_effect_before_record.toml"))
            .expect("S03");
    let short = s03
        .replace("id = \"S03\"", "id = \"S91\"")
        .replace("name = \"crash_after_effect_before_record\"", "name = \"short_retention_restart\"")
        .replace("[timing]\nlease = \"3s\"", "[timing]\nlease = \"3s\"\nretention = \"8s\"");
    assert!(short.contains("retention = \"8s\""), "S03's [timing] moved: {short}");
    let file = dir.join("S91.toml");
    std::fs::write(&file, short).expect("the scenario");
    let (code, said) = run("S91", &stalled("--restart-stall 10"), &[&file]);
    assert_eq!(code, Some(1), "{said}");
    assert_unknown_naming(&said, "a retry within retention");
    assert!(said.contains("past the 8,000 ms retention its workers were given"), "{said}");
    assert!(said.contains("worker-1's restart took"), "{said}");
    let (code, said) = run("S91", &stalled(""), &[&file]);
    assert_eq!(code, Some(0), "without the stall: {said}");
}

/// S01 with the first downstream request held 3 s before it reaches the downstream, past the
/// 2 s downstream timeout the worker was given: the reference rightly answers `unknown` where
/// the scenario expects `applied`. No fault or pause of the scenario explains it: the run is
/// `unknown`, naming the call and its measured time, never `fail`. (Every request held, the
/// reference's own recovery is still at work at the final poll: see docs/oracles.md, "Known
/// limits".)
#[test]
fn downstream_answers_past_the_workers_timeout_are_unknown_not_fail() {
    let (code, said) = run("S01", &stalled("--downstream-delay 3 --delayed-requests 1"), &[]);
    assert_eq!(code, Some(1), "{said}");
    assert_unknown_naming(&said, "a downstream answer within the downstream timeout");
    assert!(said.contains("past the 2,000 ms downstream timeout its worker was given"), "{said}");
    assert!(said.contains("not judged"), "{said}");
    let (code, said) = run("S01", &stalled(""), &[]);
    assert_eq!(code, Some(0), "without the stall: {said}");
    // The matrix counts the run, says why, and suggests fewer runs side by side.
    let out = scratch("slow_downstream_matrix");
    let command = stalled("--downstream-delay 3 --delayed-requests 1");
    let out_text = out.display().to_string();
    let output = replaylab(&[
        "matrix",
        "--executor-cmd",
        &command,
        "--repeat",
        "2",
        "--only",
        "S01",
        "--jobs",
        "2",
        "--out",
        &out_text,
    ]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(said.contains("Real time ran out in 2 run(s): a time premise did not hold"), "{said}");
    assert!(said.contains("Run fewer side by side (--jobs 1; 2 ran now)."), "{said}");
    let matrix = crate::black_box::matrix_json(&out);
    assert_eq!(matrix["black_box"]["out_of_time"], 2, "{}", matrix["black_box"]);
    assert_eq!(crate::black_box::scenario(&matrix, "S01")["verdict"], "unknown");
    crate::black_box::assert_valid(&matrix);
}

/// S04: worker-2 rightly answers `in_flight` while the crashed worker-1's claim is inside its
/// 3 s lease, but its answer reaches the harness 4 s later, past the lease: judged at the
/// answer, nobody could be at work (O6); judged when the call was sent, worker-1 was. The run
/// is `unknown`, naming the lease, never `fail`.
#[test]
fn an_answer_delivered_past_the_lease_is_unknown_not_fail() {
    let (code, said) = run("S04", &stalled("--answer-delay 4 --worker worker-2"), &[]);
    assert_eq!(code, Some(1), "{said}");
    assert_unknown_naming(&said, "an answer within the lease");
    assert!(said.contains("not judged, as a time premise did not hold: O6"), "{said}");
}
