//! Reports never carry request bodies: a real matrix run whose ticket body holds a sentinel
//! string writes every report format, and the sentinel is in none of them.

use std::path::PathBuf;

use harness::matrix::{self, MatrixConfig};
use reports::{Format, MatrixResult, Verdict};

const SENTINEL: &str = "SENTINEL-7f3a9c";

/// S01's shape (two calls for one step), plus one expectation that is meant to fail, so the
/// reports also render their failure sections (violations, reproduce command).
fn scenario_text(body: &str) -> String {
    format!(
        r#"id = "S90"
name = "privacy"
rows = ["C1"]
summary = "Two calls for the same step whose ticket body holds a secret."
expected = "One effect; no report repeats the body."

[operations.ticket]
tenant = "acme"
workflow = "run_827"
step = "record_issue"

[[step]]
action = "call"
id = "first"
worker = "worker-1"
operation = "ticket"
tool = "tickets.create"
arguments = '{{"queue": "support", "subject": "Refund request", "body": "{body}"}}'

[[step]]
action = "call"
id = "second"
worker = "worker-1"
operation = "ticket"
tool = "tickets.create"
arguments = '{{"queue": "support", "subject": "Refund request", "body": "{body}"}}'

[[step]]
action = "expect"
call = "second"
status = "applied"

[[step]]
action = "expect_effects"
operation = "ticket"
count = 1
"#
    )
}

fn run(body: &str) -> MatrixResult {
    let scenario = scenarios::Scenario::from_toml(&scenario_text(body), "privacy.toml")
        .expect("the privacy scenario is valid");
    let executor = harness::executors::find("reference").expect("the reference executor is registered");
    matrix::run(&MatrixConfig {
        executor,
        scenarios: vec![scenario],
        seeds: 2,
        first_seed: 0,
        shard: None,
        check_determinism: false,
        jobs: 1,
        commit: None,
        // The failing run shown carries the executor's log: it must not repeat the body either.
        log: Some(harness::log::LogFilter::parse("trace").expect("a filter")),
        selection: false,
    })
}

fn first_fingerprint(result: &MatrixResult) -> String {
    result.scenarios[0]
        .shown
        .answers()
        .into_iter()
        .find(|answer| answer.label == "first")
        .and_then(|answer| answer.fingerprint.clone())
        .expect("a fingerprint of the first call")
}

#[test]
fn no_report_contains_a_request_body() {
    let body = format!("Customer secret {SENTINEL} must stay out of reports.");
    let result = run(&body);

    // The run is real: the body reached the executor (it changes the request's fingerprint)
    // and the deliberately wrong expectation failed, so failure sections are rendered too.
    let control = run("Customer reports a duplicate charge.");
    assert_ne!(first_fingerprint(&result), first_fingerprint(&control), "the body is material");
    assert_eq!(result.verdict, Verdict::Fail);
    assert!(!result.scenarios[0].failures.is_empty());
    assert!(!result.scenarios[0].timeline.marks.is_empty());

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("reports-privacy");
    let _ = std::fs::remove_dir_all(&dir);
    let written = reports::write_reports(&result, &dir, &Format::ALL).expect("the reports are written");
    assert_eq!(written.len(), Format::ALL.len());

    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the report directory exists")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).expect("a report is UTF-8 text");
        assert!(text.contains("S90"), "{} does not describe the run", path.display());
        assert!(!text.contains(SENTINEL), "{} contains the ticket body", path.display());
        assert!(!text.contains("must stay out of reports"), "{} contains the ticket body", path.display());
    }
}
