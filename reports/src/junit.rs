//! `junit.xml`: one test case per row (suite `rows`) and per scenario (suite `scenarios`),
//! for CI dashboards. Pass is a success, fail a failure, crashed and unknown are errors (a
//! gate must not read them as green). No durations; a time stamp only from
//! `SOURCE_DATE_EPOCH`.

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use crate::evidence::{
    counts_text, covering, first_reason, not_applicable_reason, row_topic, scenario_evidence, scenario_title,
    seeds_text,
};
use crate::format::RenderOptions;
use crate::json::matrix_sha256;
use crate::model::{FailedRun, MatrixResult, Verdict};

/// `junit.xml` with the suites `rows` (19 test cases, C1..C10 then F1..F9) and `scenarios`.
pub fn render_junit(result: &MatrixResult, options: &RenderOptions) -> String {
    let sha256 = matrix_sha256(result);
    let commit = result.commit.clone().unwrap_or_else(|| "not recorded".to_owned());
    let seeds = seeds_text(result);
    let timestamp = options.generated_at_utc().map(|time| time.fixed_offset());
    let suite_properties = [
        Property::new("executor", result.executor.as_str()),
        Property::new("executor_version", result.executor_version.as_str()),
        Property::new("harness_version", result.harness_version.as_str()),
        Property::new("commit", commit.as_str()),
        Property::new("seeds", seeds.as_str()),
        Property::new("determinism_checked", result.determinism_checked.to_string()),
        Property::new("matrix_json_sha256", sha256.as_str()),
        Property::new("verdict", result.verdict.as_str()),
    ];
    let case_properties = |seeds_run: u64| {
        vec![
            Property::new("seeds", seeds.as_str()),
            Property::new("seeds_run", seeds_run.to_string()),
            Property::new("executor", result.executor.as_str()),
            Property::new("commit", commit.as_str()),
        ]
    };

    let mut rows = TestSuite::new("rows");
    rows.add_properties(suite_properties.clone());
    for row in &result.rows {
        let status = match &row.first_failure {
            Some(failure) => failure_status(row.verdict, failure),
            None if row.verdict == Verdict::Pass => TestCaseStatus::success(),
            None => no_run_status(
                row.verdict,
                if row.scenarios.is_empty() {
                    "no scenario covers this row".to_owned()
                } else if row.verdict == Verdict::NotApplicable {
                    "not applicable: none of the row's scenarios applies to the executor".to_owned()
                } else {
                    format!("the row's verdict is {}", row.verdict)
                },
            ),
        };
        let topic = row_topic(result, &row.row);
        let mut case = TestCase::new(
            if topic.is_empty() { row.row.clone() } else { format!("{}: {topic}", row.row) },
            status,
        );
        case.set_classname("replaylab.rows");
        case.add_properties(case_properties(row.seeds_run));
        case.add_property(Property::new("row", row.row.as_str()));
        case.add_property(Property::new("scenarios", row.scenarios.join(",")));
        let evidence: Vec<String> = covering(result, &row.scenarios)
            .into_iter()
            .map(|scenario| format!("{}: {}", scenario.id, scenario_evidence(scenario).join("; ")))
            .collect();
        if !evidence.is_empty() {
            case.set_system_out(evidence.join("\n") + "\n");
        }
        rows.add_test_case(case);
    }
    if let Some(timestamp) = timestamp {
        rows.set_timestamp(timestamp);
    }

    let mut scenarios = TestSuite::new("scenarios");
    scenarios.add_properties(suite_properties);
    for scenario in &result.scenarios {
        let status = match scenario.failures.first() {
            Some(failure) => failure_status(scenario.verdict, failure),
            None if scenario.verdict == Verdict::Pass => TestCaseStatus::success(),
            None if scenario.verdict == Verdict::NotApplicable => {
                no_run_status(scenario.verdict, not_applicable_reason(scenario).to_owned())
            }
            None => no_run_status(scenario.verdict, format!("runs: {}", counts_text(&scenario.counts))),
        };
        let mut case = TestCase::new(scenario_title(scenario), status);
        case.set_classname("replaylab.scenarios");
        case.add_properties(case_properties(scenario.seeds_run));
        case.add_property(Property::new("rows", scenario.rows.join(",")));
        case.add_property(Property::new("sample_history", scenario.shown.history_digest.as_str()));
        if let Some(run) = scenario.failures.first() {
            case.add_property(Property::new("failing_seed", run.seed.to_string()));
        }
        case.set_system_out(format!(
            "{}\nruns: {}\n{}\n",
            scenario.expected,
            counts_text(&scenario.counts),
            scenario_evidence(scenario).join("\n")
        ));
        scenarios.add_test_case(case);
    }
    if let Some(timestamp) = timestamp {
        scenarios.set_timestamp(timestamp);
    }

    let mut report = Report::new(format!("replaylab matrix ({})", result.executor));
    if let Some(timestamp) = timestamp {
        report.set_timestamp(timestamp);
    }
    report.add_test_suites([rows, scenarios]);
    let mut text = report.to_string().expect("serialising a report into memory cannot fail");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// A failure (verdict fail) or an error (crashed, unknown) carrying every violation, every
/// note and the reproduce command.
fn failure_status(verdict: Verdict, failure: &FailedRun) -> TestCaseStatus {
    let kind = if verdict == Verdict::Fail { NonSuccessKind::Failure } else { NonSuccessKind::Error };
    let mut status = TestCaseStatus::non_success(kind);
    status.set_type(verdict.as_str());
    status.set_message(first_reason(failure));
    let mut description = format!("{} seed {}: {}\n", failure.scenario, failure.seed, failure.verdict);
    for violation in &failure.violations {
        description.push_str(&format!("violation: {violation}\n"));
    }
    for note in &failure.notes {
        description.push_str(&format!("note: {note}\n"));
    }
    description.push_str(&format!("reproduce: {}\n", failure.reproduce));
    status.set_description(description);
    status
}

/// A verdict other than pass without a failing run behind it (an uncovered row, a scenario
/// not applicable to the executor: skipped, neither passed nor failed).
fn no_run_status(verdict: Verdict, message: String) -> TestCaseStatus {
    if verdict == Verdict::NotApplicable {
        let mut status = TestCaseStatus::skipped();
        status.set_type(verdict.as_str());
        status.set_message(message);
        return status;
    }
    let kind = if verdict == Verdict::Fail { NonSuccessKind::Failure } else { NonSuccessKind::Error };
    let mut status = TestCaseStatus::non_success(kind);
    status.set_type(verdict.as_str());
    status.set_message(message);
    status
}
