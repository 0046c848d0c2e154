//! `replaylab fuzz`: every target runs clean on a few hundred inputs, and each target reports
//! a known-bad subject (a panic, a broken property, a hang) with its input.

use std::path::PathBuf;
use std::process::Command;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::IntoResponse;
use fake_downstream::{Downstream, FaultRule, Times};
use harness::fuzz::{
    guarded, run_subject, run_target, CaseSubject, DownstreamSubject, FaultRuleSubject, FindingKind,
    FingerprintSubject, ScenarioSubject, Subject, Target, TargetReport, JSON_ERROR_PROPERTY,
};
use protocol::{ContractError, Fingerprint, ToolCall, ToolContract};
use scenarios::{Scenario, ScenarioError};

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");
const INPUTS: u64 = 300;

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("replaylab-fuzz-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn describe(report: &TargetReport) -> String {
    format!("{}\n{}", report.line(), report.render_findings())
}

#[test]
fn every_target_runs_clean_on_a_few_hundred_inputs() {
    for target in Target::ALL {
        let report = run_target(target, INPUTS, 0, None);
        assert_eq!(report.inputs, INPUTS);
        assert_eq!(report.panics, 0, "{}", describe(&report));
        // Every finding counts: the two this fuzzer found first (admin 405s without a problem
        // body; whole numbers past 2^53 sharing a fingerprint) are fixed where they were.
        let unexpected = &report.findings;
        assert!(unexpected.is_empty(), "{}", describe(&report));
    }
}

#[test]
fn the_same_seed_finds_the_same_things() {
    for target in Target::ALL {
        let first = run_target(target, 200, 7, None);
        let again = run_target(target, 200, 7, None);
        let counts =
            |report: &TargetReport| report.notes.split("; slowest").next().unwrap_or_default().to_owned();
        assert_eq!(counts(&first), counts(&again), "{target}");
        let inputs =
            |report: &TargetReport| report.findings.iter().map(|f| f.input.clone()).collect::<Vec<_>>();
        assert_eq!(inputs(&first), inputs(&again), "{target}");
        assert_eq!(first.property_failures, again.property_failures, "{target}");
    }
}

#[test]
fn guarded_reports_panics_even_when_caught_inside() {
    assert_eq!(guarded(|| 41 + 1), Ok(42));
    let message = guarded::<()>(|| panic!("deliberate fuzz test panic")).unwrap_err();
    assert!(message.contains("deliberate fuzz test panic"), "{message}");
    assert!(message.contains("tests/it/fuzz.rs"), "the location is kept: {message}");
    let caught = guarded(|| std::panic::catch_unwind(|| -> u8 { panic!("swallowed") }).is_err()).unwrap_err();
    assert!(caught.contains("caught inside") && caught.contains("swallowed"), "{caught}");
    // Panics outside a guard still reach the previous hook (nothing to assert on stderr, but
    // a guard must not leave the hook silenced): a second guard still works.
    assert!(guarded::<()>(|| panic!("again")).is_err());
}

/// The first finding of `kind`, with its saved file checked to hold the exact input.
fn first_finding(report: &TargetReport, kind: &FindingKind) -> harness::fuzz::Finding {
    let finding = report
        .findings
        .iter()
        .find(|finding| &finding.kind == kind)
        .unwrap_or_else(|| panic!("no {kind:?} finding:\n{}", describe(report)))
        .clone();
    if let Some(path) = &finding.saved {
        assert_eq!(std::fs::read(path).unwrap(), finding.input, "{}", path.display());
        assert!(path.file_name().unwrap().to_str().unwrap().starts_with(report.target.name()));
    }
    finding
}

// ------------------------------------------------------------------------ scenario

fn parse_panicking_on_steps(text: &str, source: &str) -> Result<Scenario, ScenarioError> {
    assert!(!text.contains("action = \"advance\""), "deliberate fuzz test panic: an advance step");
    Scenario::from_toml(text, source)
}

fn to_toml_losing_the_last_step(scenario: &Scenario) -> String {
    let mut copy = scenario.clone();
    copy.steps.pop();
    copy.to_toml()
}

#[test]
fn scenario_target_reports_a_panicking_parser_and_a_lossy_writer() {
    let out = out_dir("scenario");
    let subject = ScenarioSubject { parse: parse_panicking_on_steps, ..ScenarioSubject::default() };
    let report = run_subject(Subject::Scenario(subject), INPUTS, 0, Some(out.as_path()));
    assert!(report.panics > 0, "{}", describe(&report));
    assert!(!report.passed());
    let finding = first_finding(&report, &FindingKind::Panic);
    assert!(String::from_utf8_lossy(&finding.input).contains("action = \"advance\""));
    assert!(finding.message.contains("deliberate fuzz test panic"), "{}", finding.message);
    assert!(finding.saved.is_some());

    let subject = ScenarioSubject { to_toml: to_toml_losing_the_last_step, ..ScenarioSubject::default() };
    let report = run_subject(Subject::Scenario(subject), INPUTS, 0, None);
    assert_eq!(report.panics, 0, "{}", describe(&report));
    assert!(report.failures_by_property.get("round_trip").copied().unwrap_or(0) > 0, "{}", describe(&report));
    let _ = std::fs::remove_dir_all(out);
}

// ------------------------------------------------------------------------ fault_rule

fn parse_panicking_on_hold(bytes: &[u8]) -> Result<FaultRule, String> {
    let rule = FaultRule::from_json(bytes)?;
    assert!(rule.action.name() != "hold", "deliberate fuzz test panic: a hold rule");
    Ok(rule)
}

fn to_json_forgetting_times(rule: &FaultRule) -> serde_json::Value {
    let mut copy = rule.clone();
    copy.times = Times::Count(1);
    copy.to_json_value()
}

#[test]
fn fault_rule_target_reports_a_panicking_parser_and_a_lossy_writer() {
    let subject = FaultRuleSubject { parse: parse_panicking_on_hold, ..FaultRuleSubject::default() };
    let report = run_subject(Subject::FaultRule(subject), INPUTS, 0, None);
    let finding = first_finding(&report, &FindingKind::Panic);
    let rule = FaultRule::from_json(&finding.input).expect("the panicking input is a valid rule");
    assert_eq!(rule.action.name(), "hold");

    let subject = FaultRuleSubject { to_json: to_json_forgetting_times, ..FaultRuleSubject::default() };
    let report = run_subject(Subject::FaultRule(subject), INPUTS, 0, None);
    let finding = first_finding(&report, &FindingKind::Property("round_trip".into()));
    let rule = FaultRule::from_json(&finding.input).expect("the input is a valid rule");
    assert_ne!(rule.times, Times::Count(1), "only rules that fire other than once lose something");
}

// ------------------------------------------------------------------------ downstream

fn json_answer() -> axum::response::Response {
    (http::StatusCode::OK, [(http::header::CONTENT_TYPE, "application/json")], "{}").into_response()
}

fn router_panicking_on_charges(_downstream: &Downstream) -> axum::Router {
    async fn boom() -> &'static str {
        panic!("deliberate fuzz test panic: a charge")
    }
    axum::Router::new().route("/v1/charges", axum::routing::post(boom)).fallback(|| async { json_answer() })
}

fn router_answering_plain_text_errors(_downstream: &Downstream) -> axum::Router {
    axum::Router::new().fallback(|| async { (http::StatusCode::BAD_REQUEST, "no").into_response() })
}

fn router_that_never_answers_patches(_downstream: &Downstream) -> axum::Router {
    axum::Router::new().fallback(|request: Request| async move {
        if request.method() == http::Method::PATCH {
            std::future::pending::<()>().await;
        }
        json_answer()
    })
}

#[test]
fn downstream_target_reports_panics_plain_errors_and_hangs() {
    let subject = DownstreamSubject { router: router_panicking_on_charges, ..DownstreamSubject::default() };
    let report = run_subject(Subject::Downstream(subject), INPUTS, 0, None);
    let finding = first_finding(&report, &FindingKind::Panic);
    assert!(String::from_utf8_lossy(&finding.input).starts_with("POST /v1/charges"), "{}", describe(&report));
    assert!(finding.message.contains("deliberate fuzz test panic"), "{}", finding.message);

    let subject =
        DownstreamSubject { router: router_answering_plain_text_errors, ..DownstreamSubject::default() };
    let report = run_subject(Subject::Downstream(subject), 50, 0, None);
    assert_eq!(report.failures_by_property.get(JSON_ERROR_PROPERTY), Some(&50), "{}", describe(&report));

    let subject =
        DownstreamSubject { router: router_that_never_answers_patches, timeout: Duration::from_millis(50) };
    let report = run_subject(Subject::Downstream(subject), 100, 0, None);
    let finding = first_finding(&report, &FindingKind::Property("hang".into()));
    assert!(String::from_utf8_lossy(&finding.input).starts_with("PATCH "), "{}", describe(&report));
}

// ------------------------------------------------------------------------ fingerprint

/// Hashes the argument text as sent: key order and whitespace change it.
fn fingerprint_of_the_raw_text(
    contract: &ToolContract,
    call: &ToolCall,
) -> Result<Fingerprint, ContractError> {
    contract.validated_arguments(call)?;
    Ok(Fingerprint::of(&serde_json::Value::String(call.arguments.get().to_owned())))
}

/// Leaves the amount out (like mutant M19 leaves optional fields out).
fn fingerprint_without_the_amount(
    contract: &ToolContract,
    call: &ToolCall,
) -> Result<Fingerprint, ContractError> {
    let mut arguments = contract.validated_arguments(call)?;
    arguments.remove("amount_minor");
    Ok(Fingerprint::of(&contract.material_request(&call.tenant, &arguments)))
}

fn fingerprint_panicking_on_jobs(
    contract: &ToolContract,
    call: &ToolCall,
) -> Result<Fingerprint, ContractError> {
    assert!(contract.name != "jobs.submit", "deliberate fuzz test panic: a job");
    contract.fingerprint(call)
}

#[test]
fn fingerprint_target_reports_order_sensitive_lossy_and_panicking_fingerprints() {
    let report = run_subject(
        Subject::Fingerprint(FingerprintSubject { fingerprint: fingerprint_of_the_raw_text }),
        INPUTS,
        0,
        None,
    );
    assert!(report.failures_by_property.get("canonical").copied().unwrap_or(0) > 0, "{}", describe(&report));

    let report = run_subject(
        Subject::Fingerprint(FingerprintSubject { fingerprint: fingerprint_without_the_amount }),
        INPUTS,
        0,
        None,
    );
    let finding = report
        .findings
        .iter()
        .find(|finding| finding.signature == "payments.charge: `amount_minor` changed, same fingerprint")
        .unwrap_or_else(|| panic!("{}", describe(&report)));
    let call: ToolCall = serde_json::from_slice(&finding.input).expect("the input is a tool call");
    assert_eq!(call.tool, "payments.charge");

    let report = run_subject(
        Subject::Fingerprint(FingerprintSubject { fingerprint: fingerprint_panicking_on_jobs }),
        INPUTS,
        0,
        None,
    );
    let finding = first_finding(&report, &FindingKind::Panic);
    let call: ToolCall = serde_json::from_slice(&finding.input).expect("the input is a tool call");
    assert_eq!(call.tool, "jobs.submit");
}

// ------------------------------------------------------------------------ case

#[test]
fn case_target_reports_an_executor_that_panics() {
    let mut executor = harness::executors::find("reference").expect("the reference is registered");
    executor.name = "panics".into();
    executor.factory = Arc::new(|_run: &str| -> Result<Rc<dyn protocol::ExecutorFactory>, String> {
        panic!("deliberate fuzz test panic: the factory")
    });
    let subject = CaseSubject { executor, run_every: 10, ..CaseSubject::default() };
    let report = run_subject(Subject::Case(subject), 200, 0, None);
    let finding = first_finding(&report, &FindingKind::Panic);
    assert!(finding.message.contains("deliberate fuzz test panic"), "{}", finding.message);
    // The runner itself caught it (the run is `crashed`); the fuzzer saw it all the same.
    assert!(finding.message.contains("caught inside"), "{}", finding.message);
    let case = Scenario::from_toml(&String::from_utf8_lossy(&finding.input), "case.toml").expect("it parsed");
    assert!(case.seed.is_some());
    assert!(report.notes.contains(" run (crashed "), "{}", report.notes);
}

// ------------------------------------------------------------------------ the command

#[test]
fn the_command_refuses_bad_flags_before_any_work_and_prints_one_line_per_target() {
    let run = |args: &[&str]| {
        let output = Command::new(REPLAYLAB).arg("fuzz").args(args).output().unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let out = out_dir("cli");
    let out_arg = out.to_str().unwrap();
    for (args, expected) in [
        (vec!["--target", "nope"], "known: all, scenario, fault_rule, downstream, fingerprint, case"),
        (vec!["--inputs", "0"], "--inputs must be at least 1"),
        (vec!["--inputs", "1000000001"], "at most"),
        (vec!["--inputs=-1"], "invalid value"),
        (vec!["--seed", "x"], "invalid value"),
    ] {
        let (code, stdout, stderr) = run(&[args.as_slice(), &["--out", out_arg]].concat());
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: nothing ran: {stdout}");
    }
    std::fs::write(&out, "a file").unwrap();
    let (code, _, stderr) = run(&["--target", "scenario", "--out", out_arg]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("is a file"), "{stderr}");
    std::fs::remove_file(&out).unwrap();

    let (code, stdout, stderr) =
        run(&["--target", "fault_rule", "--inputs", "200", "--seed", "3", "--out", out_arg]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let line = stdout.lines().next().unwrap();
    assert!(line.starts_with("fuzz fault_rule: 200 inputs, 0 panics, 0 property failures, "), "{line}");
    assert!(!out.exists(), "nothing found, nothing written");
}
