//! Premises before verdicts: a run whose fault never fired, whose pause point was never reached
//! or whose concurrent calls never overlapped is `unknown`, names the premise, and never
//! passes. And the ground truth is out of the executor's reach.

use crate::support;

use std::cell::Cell;

use harness::executors::{self, ExecutorSpec};
use harness::history::EventKind;
use harness::runner;
use harness::verdict::Verdict;
use protocol::{LocalBoxFuture, Outcome, OutcomeStatus, ToolCall, WorkerEnv};
use wire::HttpRequest;

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");

fn scenario(id: &str) -> scenarios::Scenario {
    scenarios::builtin_by_id(id).expect("a built-in scenario")
}

fn reference() -> ExecutorSpec {
    executors::find("reference").expect("the reference executor is registered")
}

fn builtin_text(id: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/matrix");
    let entry = std::fs::read_dir(&dir)
        .expect("the scenarios folder")
        .filter_map(Result::ok)
        .find(|entry| entry.file_name().to_string_lossy().starts_with(id))
        .expect("the scenario file");
    std::fs::read_to_string(entry.path()).expect("readable")
}

#[test]
fn a_fault_that_never_fires_makes_the_run_unknown_and_names_it() {
    let text = builtin_text("S12")
        .replacen(r#"path = "/v1/tickets" }"#, r#"path = "/v1/tickets", tenant = "nobody" }"#, 1)
        .replace(r#"id = "S12""#, r#"id = "S91""#);
    assert!(text.contains(r#"tenant = "nobody""#), "the rule was rewritten");
    let dir = std::env::temp_dir().join(format!("replaylab-premise-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("S12_nobody.toml");
    std::fs::write(&path, &text).expect("written");

    let nobody = scenarios::Scenario::from_file(&path).expect("valid");
    for seed in 1..=3 {
        let record = runner::run(&nobody, seed, &reference());
        assert_eq!(record.result.verdict, Verdict::Unknown, "seed {seed}: {:?}", record.result);
        assert!(
            record.result.notes.iter().any(|note| note
                .contains("fault rule 1 (POST /v1/tickets tenant nobody, commit_then_delay) never fired")),
            "{:?}",
            record.result.notes
        );
    }
    // The whole matrix with that file: the row cannot pass, and the command says so.
    let out = dir.join("report");
    let output = std::process::Command::new(REPLAYLAB)
        .args(["matrix", "--seeds", "3", "--scenario-file"])
        .arg(&path)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("replaylab runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("never fired"), "{stdout}");
    assert!(stdout.contains("verdict: unknown"), "{stdout}");
    // The unchanged scenario's fault fires, and it passes.
    let record = runner::run(&scenario("S12"), 1, &reference());
    assert_eq!(record.result.verdict, Verdict::Pass, "{:?}", record.result);
}

#[test]
fn crashes_fall_at_the_named_moment() {
    // S03 crashes the worker right after the request that committed the ticket.
    let record = runner::run(&scenario("S03"), 4, &reference());
    assert_eq!(record.result.verdict, Verdict::Pass, "{:?}", record.result);
    let crash = record
        .history
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Crashed { paused_at, after_commit, .. } => Some((paused_at.clone(), *after_commit)),
            _ => None,
        })
        .expect("S03 crashes a worker");
    assert_eq!(crash, (Some("downstream:after POST /v1/tickets (committed)".into()), true));
    assert_eq!(record.coverage.crashes_after_commit, 1);

    // S04's first crash falls before the ticket request leaves: no effect yet.
    let record = runner::run(&scenario("S04"), 4, &reference());
    let crashes: Vec<(Option<String>, bool)> = record
        .history
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Crashed { paused_at, after_commit, .. } => Some((paused_at.clone(), *after_commit)),
            _ => None,
        })
        .collect();
    assert_eq!(
        crashes,
        [
            (Some("downstream:before POST /v1/tickets".into()), false),
            (Some("downstream:after POST /v1/charges (committed)".into()), true)
        ]
    );
}

/// Looks the receipt up before every create, then creates: shaped unlike the reference.
fn lookup_first(env: WorkerEnv, call: ToolCall) -> LocalBoxFuture<'static, Outcome> {
    Box::pin(async move {
        let key = format!("{}:{}:{}", call.tenant, call.workflow_id, call.step_id);
        let lookup = HttpRequest::get(format!("/v1/receipts/{key}?tenant={}&service=tickets", call.tenant));
        let _ = env.downstream.send(lookup).await;
        let body: serde_json::Value = serde_json::from_str(call.arguments.get()).unwrap_or_default();
        let mut ticket = body.as_object().cloned().unwrap_or_default();
        ticket.insert("tenant".into(), call.tenant.clone().into());
        let request =
            HttpRequest::json(http::Method::POST, "/v1/tickets", &ticket).header("Idempotency-Key", &key);
        let mut outcome = Outcome::new(OutcomeStatus::Unknown);
        if let Ok(response) = env.downstream.send(request).await {
            if let Ok(answer) = response.json::<serde_json::Value>() {
                outcome = Outcome::new(OutcomeStatus::Applied);
                outcome.effect_reference = answer["ticket_id"].as_str().map(str::to_owned);
            }
        }
        outcome
    })
}

#[test]
fn a_qualified_pause_point_skips_requests_that_are_not_the_moment() {
    // An executor that looks the receipt up first is still crashed after the create commits,
    // not after its lookup.
    let lookup_first =
        support::scripted("lookup-first", lookup_first, || Outcome::new(OutcomeStatus::Unknown));
    let record = runner::run(&scenario("S03"), 2, &lookup_first);
    let paused = record
        .history
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Paused { point, .. } => Some(point.clone()),
            _ => None,
        })
        .expect("the pause was reached");
    assert_eq!(paused, "downstream:after POST /v1/tickets (committed)");
    let lookup_before = record.history.iter().position(|event| {
        matches!(&event.kind, EventKind::DownstreamSent { path, .. } if path.starts_with("/v1/receipts/"))
    });
    let pause = record.history.iter().position(|event| matches!(event.kind, EventKind::Paused { .. }));
    assert!(lookup_before < pause, "the lookup went by without pausing");
}

/// Answers every call at once, without touching anything: two calls to it never overlap. (It
/// refuses them: an `in_flight` from an executor that claimed nothing would be an orphan, O6.)
fn instant(_env: WorkerEnv, _call: ToolCall) -> LocalBoxFuture<'static, Outcome> {
    Box::pin(async { Outcome::new(OutcomeStatus::Rejected) })
}

#[test]
fn concurrent_calls_that_never_overlapped_are_no_race() {
    let scenario = scenarios::Scenario::from_toml(
        r#"
id = "S90"
name = "race"
rows = ["C4"]
summary = "Two workers get the same call at once."
expected = "One owner."
workers = 2

[operations.race]
tenant = "acme"
workflow = "run_1"
step = "charge"

[[step]]
action = "concurrent"
calls = [
  { id = "one", worker = "worker-1", operation = "race", tool = "payments.charge", arguments = '{"customer": "c", "amount_minor": 1, "currency": "EUR"}' },
  { id = "two", worker = "worker-2", operation = "race", tool = "payments.charge", arguments = '{"customer": "c", "amount_minor": 1, "currency": "EUR"}' },
]
"#,
        "race.toml",
    )
    .expect("valid");
    let mut overlapped = 0;
    for seed in 0..20 {
        let spec = support::scripted("instant", instant, || Outcome::new(OutcomeStatus::Rejected));
        let instant = runner::run(&scenario, seed, &spec);
        if instant.result.verdict != Verdict::Unknown {
            overlapped += 1;
            continue;
        }
        assert!(
            instant.result.notes.iter().any(|note| note.contains("did not overlap")),
            "{:?}",
            instant.result.notes
        );
    }
    assert_eq!(overlapped, 0, "an executor that answers at once never races with itself");
    // The reference's calls take store and network time: they always overlap.
    for seed in 0..20 {
        let record = runner::run(&scenario, seed, &reference());
        assert_eq!(record.result.verdict, Verdict::Pass, "seed {seed}: {:?}", record.result);
    }
}

thread_local! {
    /// How many `/__admin` requests the tamperer had refused.
    static REFUSED: Cell<u32> = const { Cell::new(0) };
}

/// Makes two tickets for every call, then tries to erase the evidence through `/__admin`.
fn tamperer(env: WorkerEnv, call: ToolCall) -> LocalBoxFuture<'static, Outcome> {
    Box::pin(async move {
        let mut ticket: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(call.arguments.get()).unwrap_or_default();
        ticket.insert("tenant".into(), call.tenant.clone().into());
        let mut reference = None;
        for _ in 0..2 {
            let request = HttpRequest::json(http::Method::POST, "/v1/tickets", &ticket);
            if let Ok(response) = env.downstream.send(request).await {
                let answer: serde_json::Value = response.json().unwrap_or_default();
                reference = answer["ticket_id"].as_str().map(str::to_owned);
            }
        }
        for (method, path) in
            [(http::Method::POST, "/__admin/reset"), (http::Method::DELETE, "/__admin/faults")]
        {
            let request = HttpRequest::json(method, path, &serde_json::json!({}));
            if let Ok(response) = env.downstream.send(request).await {
                if response.status == 404 {
                    REFUSED.with(|refused| refused.set(refused.get() + 1));
                }
            }
        }
        let mut outcome = Outcome::new(OutcomeStatus::Applied);
        outcome.effect_reference = reference;
        outcome
    })
}

#[test]
fn an_executor_cannot_erase_the_evidence() {
    let spec = support::scripted("tamperer", tamperer, || Outcome::new(OutcomeStatus::Applied));
    let record = runner::run(&scenario("S01"), 3, &spec);
    assert!(REFUSED.with(|refused| refused.get()) >= 2, "the admin requests were refused (404)");
    assert_eq!(record.result.verdict, Verdict::Fail);
    assert!(
        record
            .result
            .violations
            .iter()
            .any(|v| v.oracle == "O1" && v.explanation.contains("ticket_created effects")),
        "{:?}",
        record.result.violations
    );
    assert!(
        !record.result.violations.iter().any(|v| v.explanation.contains("differs from the effects seen")),
        "nothing could change the ledger: {:?}",
        record.result.violations
    );
    assert!(record.ledger.len() >= 2, "the duplicate is still in the ledger");
}

/// The reference, taking each call up 800 ms late on the workers named (as a real process on a
/// busy machine may): the scenario's timings must still hold, or be judged `unknown`, never
/// `fail`.
struct LateStart {
    env: WorkerEnv,
    late: bool,
    inner: Box<dyn protocol::Executor>,
}

impl protocol::Executor for LateStart {
    fn call(&self, call: ToolCall) -> LocalBoxFuture<'_, Outcome> {
        Box::pin(async move {
            if self.late {
                self.env.background.sleep(std::time::Duration::from_millis(800)).await;
            }
            self.inner.call(call).await
        })
    }
    fn poll(&self, operation: protocol::OperationRef) -> LocalBoxFuture<'_, Outcome> {
        self.inner.poll(operation)
    }
    fn reconcile(&self, operation: protocol::OperationRef) -> LocalBoxFuture<'_, Outcome> {
        self.inner.reconcile(operation)
    }
    fn consume(&self, envelope: protocol::Envelope) -> LocalBoxFuture<'_, protocol::Consumed> {
        self.inner.consume(envelope)
    }
    fn webhook(&self, event: protocol::WebhookEvent) -> LocalBoxFuture<'_, protocol::WebhookAck> {
        self.inner.webhook(event)
    }
}

struct LateStartFactory {
    inner: std::rc::Rc<dyn protocol::ExecutorFactory>,
    late: &'static [&'static str],
}

impl protocol::ExecutorFactory for LateStartFactory {
    fn start(&self, env: WorkerEnv) -> Box<dyn protocol::Executor> {
        let late = self.late.contains(&env.worker_id.as_str());
        Box::new(LateStart { inner: self.inner.start(env.clone()), late, env })
    }
}

fn late_reference(late: &'static [&'static str]) -> ExecutorSpec {
    ExecutorSpec::new("late", move |run: &str| {
        let inner = (reference().factory)(run)?;
        Ok(std::rc::Rc::new(LateStartFactory { inner, late }) as std::rc::Rc<dyn protocol::ExecutorFactory>)
    })
}

/// S19 and S27 let the first owner's 1 s lease run out before the retry. Timed from the call,
/// a first owner that claimed 800 ms late still held a live lease at the retry: `in_flight` was
/// the right answer, and the run was `fail`. Timed from its downstream request (by then it had
/// claimed), the lease has run out whenever the claim came, and the late reference passes.
#[test]
fn a_lease_the_scenario_lets_run_out_runs_out_however_late_the_call_was_taken_up() {
    let late = late_reference(&["worker-1"]);
    for id in ["S19", "S27"] {
        for seed in 0..5 {
            let record = runner::run(&scenario(id), seed, &late);
            let result = &record.result;
            assert_eq!(
                result.verdict,
                Verdict::Pass,
                "{id} seed {seed}: {:?} {:?}",
                result.notes,
                result.violations
            );
        }
    }
}

/// When every worker takes calls up late, the first owner's answer, held until the retry is
/// under way, is held longer than the simulated reference waits for the downstream (2 s): it
/// stops waiting and is never told, which S19 and S27 need. The runs say so as `unknown`,
/// never `fail`.
#[test]
fn a_timing_premise_that_did_not_hold_is_unknown_not_fail() {
    let late = late_reference(&["worker-1", "worker-2"]);
    let premise = "stopped waiting (its downstream timeout ran out first)";
    for id in ["S19", "S27"] {
        for seed in 0..5 {
            let record = runner::run(&scenario(id), seed, &late);
            let notes = record.result.notes.join("\n");
            assert_ne!(
                record.result.verdict,
                Verdict::Fail,
                "{id} seed {seed}: {notes} {:?}",
                record.result.violations
            );
            if record.result.verdict == Verdict::Unknown {
                assert!(notes.contains(premise), "{id} seed {seed}: {notes}");
            }
        }
    }
}

/// A run whose premise did not hold (here a fault that never fired) is `unknown`: its
/// expectations, written for what did not happen, are not judged, and say so in the notes.
#[test]
fn expectations_are_not_judged_when_a_premise_did_not_hold() {
    let scenario = scenarios::Scenario::from_toml(
        r#"
id = "S90"
name = "unfired"
rows = ["C2"]
summary = "A lookup fault that never fires; an expectation the executor cannot meet without it."
expected = "unknown"

[operations.create]
tenant = "acme"
workflow = "run_1"
step = "create"

[[step]]
action = "fault"
rule = { match = { method = "GET", path = "/v1/receipts/*" }, action = "commit_then_error", status = 503, times = 1 }

[[step]]
action = "call"
id = "create"
worker = "worker-1"
operation = "create"
tool = "tickets.create"
arguments = '{"subject": "s", "body": "b"}'

[[step]]
action = "expect"
call = "create"
status = "unknown"
"#,
        "unfired.toml",
    )
    .expect("a valid scenario");
    let record = runner::run(&scenario, 0, &reference());
    assert_eq!(record.result.verdict, Verdict::Unknown, "{:?}", record.result);
    assert!(record.result.violations.is_empty(), "{:?}", record.result.violations);
    let notes = record.result.notes.join("\n");
    assert!(notes.contains("never fired"), "{notes}");
    assert!(notes.contains("not judged, as a premise did not hold: expect"), "{notes}");
}

/// Another worker taking the operation up on its own while the call's worker still waits (a
/// restarted worker-2's start-up sweep finds worker-1's claim past its 1 s lease, looks the
/// ticket up and resends it under its key: right, and one ticket) settles what the scenario
/// wrote its expectations for worker-1 alone about. With `alone`, the run is `unknown`, naming
/// the sweep's request; without it, the same run was `fail` (as S12 was, run as 4 processes on
/// Postgres on a busy machine: a fourth worker's sweep came before worker-1's timeout).
#[test]
fn a_sweep_before_the_answer_makes_an_alone_expectation_unknown_not_fail() {
    let text = r#"id = "S93"
name = "swept_while_waiting"
rows = ["C10"]
summary = "worker-1's ticket request is swallowed; worker-2, restarted meanwhile, finds the claim's lease run out and takes it over while worker-1 still waits."
expected = "worker-1 alone would answer unknown or in_flight with no ticket: worker-2's sweep makes that expectation moot."
workers = 2

[timing]
lease = "1s"

[operations.swallowed]
tenant = "acme"
workflow = "run_828"
step = "record_issue"

[[step]]
action = "advance"
by = "200ms"

[[step]]
action = "fault"
rule = { match = { method = "POST", path = "/v1/tickets" }, action = "drop_before_commit", times = 1 }

[[step]]
action = "call"
id = "swallowed"
worker = "worker-1"
operation = "swallowed"
tool = "tickets.create"
arguments = '{"queue": "billing", "subject": "Invoice copy", "body": "Customer asks for an invoice copy."}'
wait = false

[[step]]
action = "advance"
by = "100ms"

[[step]]
action = "crash"
worker = "worker-2"

[[step]]
action = "restart"
worker = "worker-2"

[[step]]
action = "await"
call = "swallowed"

[[step]]
action = "expect"
call = "swallowed"
status = ["unknown", "in_flight"]
alone = true

[[step]]
action = "expect_effects"
operation = "swallowed"
count = 0
"#;
    let with = scenarios::Scenario::from_toml(text, "swept.toml").expect("a valid scenario");
    let without = scenarios::Scenario::from_toml(&text.replace("alone = true\n", ""), "swept.toml")
        .expect("a valid scenario");
    assert!(!without.to_toml().contains("alone = "), "the premise was taken out");
    for seed in 0..3 {
        let record = runner::run(&with, seed, &reference());
        let notes = record.result.notes.join("\n");
        assert_eq!(
            record.result.verdict,
            Verdict::Unknown,
            "seed {seed}: {notes} {:?}",
            record.result.violations
        );
        assert!(
            notes.contains("worker-2 took acme/production/run_828/record_issue up on its own (worker-2#"),
            "seed {seed}: {notes}"
        );
        assert!(notes.contains("not judged, as a premise did not hold: expect"), "seed {seed}: {notes}");
        assert_eq!(runner::run(&without, seed, &reference()).result.verdict, Verdict::Fail, "seed {seed}");
    }
}

/// S19 and S27 rely on worker-1 hearing its late answer (1.5 s). A simulated executor whose
/// own downstream timeout is 1 s gives up first and rightly answers `unknown`: it was never
/// told, so the scenario's expectation on that call is not judged and the run is `unknown`
/// naming the premise, never `fail`. The reference (2 s) is told, and passes.
#[test]
fn a_late_answer_the_worker_stopped_waiting_for_makes_the_run_unknown_not_fail() {
    let impatient = ExecutorSpec::new("impatient", |_run: &str| {
        let factory = executor::ReferenceFactory::recycled(
            executor::ReferenceConfig::default().with_downstream_timeout(std::time::Duration::from_secs(1)),
            |_: &WorkerEnv| executor::Strategies::reference(),
        )
        .map_err(|error| error.to_string())?;
        Ok(std::rc::Rc::new(factory) as std::rc::Rc<dyn protocol::ExecutorFactory>)
    });
    for id in ["S19", "S27"] {
        for seed in 0..3 {
            let record = runner::run(&scenario(id), seed, &impatient);
            let notes = record.result.notes.join("\n");
            assert_eq!(
                record.result.verdict,
                Verdict::Unknown,
                "{id} seed {seed}: {notes} {:?}",
                record.result.violations
            );
            assert!(
                notes.contains("stopped waiting (its downstream timeout ran out first)"),
                "{id} seed {seed}: {notes}"
            );
            assert!(
                notes.contains("worker-1 answered \"a\" before its request worker-1#"),
                "{id} seed {seed}: {notes}"
            );
            let record = runner::run(&scenario(id), seed, &reference());
            assert_eq!(record.result.verdict, Verdict::Pass, "{id} seed {seed}: {:?}", record.result);
        }
    }
}
