//! Skipping idle time: the runner skips stretches in which nothing is active, every clock
//! agrees about the skipped time, and an executor's background work is waited for rather than
//! skipped over.

use crate::support;

use std::time::Duration;

use harness::executors;
use harness::history::EventKind;
use harness::runner;
use harness::verdict::Verdict;
use protocol::{LocalBoxFuture, Outcome, OutcomeStatus, ToolCall, WorkerEnv};
use wire::HttpRequest;

fn builtin(id: &str) -> scenarios::Scenario {
    scenarios::builtin_by_id(id).expect("a built-in scenario")
}

/// A scenario with one `tickets.create` call labelled `only` on `worker-1`, after `before`
/// (more `[[step]]`s in TOML).
fn one_ticket_call(before: &str) -> scenarios::Scenario {
    let text = format!(
        r#"
id = "T01"
name = "one_call"
rows = ["C1"]
summary = "One call, then the world settles."
expected = "Whatever the oracles allow."

[operations.ticket]
tenant = "acme"
workflow = "run_1"
step = "record_issue"

{before}
[[step]]
action = "call"
id = "only"
worker = "worker-1"
operation = "ticket"
tool = "tickets.create"
arguments = '{{"queue": "support", "subject": "s", "body": "b"}}'
"#
    );
    scenarios::Scenario::from_toml(&text, "idle-test.toml").expect("the test scenario parses")
}

fn skipped_ms(history: &[harness::history::Event]) -> u64 {
    history
        .iter()
        .map(|event| match event.kind {
            EventKind::IdleSkipped { by_ms } => by_ms,
            _ => 0,
        })
        .sum()
}

#[test]
fn idle_time_is_skipped_and_the_world_clock_counts_it() {
    let reference = executors::find("reference").expect("registered");
    // S09 lets a key outlive its retention: a long wait with nothing in flight.
    let record = runner::run(&builtin("S09"), 3, &reference);
    assert_eq!(record.result.verdict, Verdict::Pass, "{:?}", record.result);
    let skipped = skipped_ms(&record.history);
    let span = record.history.last().expect("events").at_ms;
    assert!(skipped > 0, "nothing was skipped");
    let total = record.stepped.as_millis() as u64 + skipped;
    let tick = harness::world::TICK.as_millis() as u64;
    assert!(
        span <= total && total - span <= tick,
        "the span by the world clock ({span} ms) is the stepped time plus the skipped time ({total} ms), \
         to within the last tick"
    );
    assert!(record.stepped < Duration::from_millis(span / 4), "stepped {:?} of {span} ms", record.stepped);
    // The late call of S09 came after the retention window by the executor's clock too: it
    // was answered `expired`, which the scenario's expectations check; the run passing says so.
}

#[test]
fn a_skip_stops_when_a_downstream_job_is_due() {
    let reference = executors::find("reference").expect("registered");
    // S10: the downstream finishes a job some seconds after accepting it; the world is idle
    // meanwhile, so the runner skips, but only up to the job's finishing time.
    let scenario = builtin("S10");
    let record = runner::run(&scenario, 0, &reference);
    assert_eq!(record.result.verdict, Verdict::Pass, "{:?}", record.result);
    let accepted = record
        .ledger
        .iter()
        .find(|effect| effect.kind == fake_downstream::EffectKind::JobAccepted)
        .expect("the job was accepted");
    let job_duration = scenario.downstream.job_duration.expect("S10 sets a job duration").as_millis() as u64;
    let due = accepted.at_ms + job_duration;
    let skips: Vec<(u64, u64)> = record
        .history
        .iter()
        .filter_map(|event| match event.kind {
            EventKind::IdleSkipped { by_ms } => Some((event.at_ms, event.at_ms + by_ms)),
            _ => None,
        })
        .collect();
    assert!(
        skips.iter().all(|&(from, to)| !(from < due && to > due)),
        "a skip crossed the job's finishing time {due} ms: {skips:?}"
    );
    assert!(
        skips.iter().any(|&(_, to)| to == due),
        "no skip ended at the job's finishing time {due} ms: {skips:?}"
    );
}

/// Creates the ticket once, answers `applied`, then, as background work, creates it again two
/// seconds later without a key: a late duplicate that only waiting can reveal.
fn late_duplicate(env: WorkerEnv, call: ToolCall) -> LocalBoxFuture<'static, Outcome> {
    Box::pin(async move {
        let Some(ticket) = create_ticket(&env, &call).await else {
            return Outcome::new(OutcomeStatus::Unknown);
        };
        let again = create_ticket(&env, &call);
        env.background.spawn(Box::pin(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            again.await;
        }));
        let mut outcome = Outcome::new(OutcomeStatus::Applied);
        outcome.effect_reference = Some(ticket);
        outcome
    })
}

fn create_ticket(env: &WorkerEnv, call: &ToolCall) -> LocalBoxFuture<'static, Option<String>> {
    let downstream = env.downstream.clone();
    let body = serde_json::json!({
        "tenant": call.tenant,
        "queue": "support",
        "subject": "late duplicate",
        "body": "created twice",
    });
    Box::pin(async move {
        let request = HttpRequest::json(http::Method::POST, "/v1/tickets", &body);
        let response = downstream.send(request).await.ok()?;
        let body: serde_json::Value = response.json().ok()?;
        body["ticket_id"].as_str().map(str::to_owned)
    })
}

#[test]
fn background_work_is_waited_for_so_a_late_duplicate_is_caught() {
    let spec = support::scripted("late-duplicate", late_duplicate, || Outcome::new(OutcomeStatus::Unknown));
    let scenario = one_ticket_call("");
    let record = runner::run(&scenario, 0, &spec);
    let created = record
        .ledger
        .iter()
        .filter(|effect| effect.kind == fake_downstream::EffectKind::TicketCreated)
        .count();
    assert_eq!(created, 2, "the background duplicate ran before the run ended: {:?}", record.ledger);
    assert_eq!(record.result.verdict, Verdict::Fail, "{:?}", record.result);
    assert!(
        record.result.violations.iter().any(|violation| violation.oracle == "O1"),
        "{:?}",
        record.result.violations
    );
}

#[test]
fn an_agent_waiting_on_a_crashed_worker_times_out_by_the_world_clock() {
    let reference = executors::find("reference").expect("registered");
    // The worker is down when the call arrives: the agent's wait can only end by its timeout,
    // which the runner skips to instead of stepping through.
    let scenario = one_ticket_call("[[step]]\naction = \"crash\"\nworker = \"worker-1\"\n");
    let record = runner::run(&scenario, 0, &reference);
    assert_eq!(record.result.verdict, Verdict::Pass, "{:?}", record.result);
    let at = |wanted: &dyn Fn(&EventKind) -> bool| {
        record.history.iter().find(|event| wanted(&event.kind)).map(|event| event.at_ms)
    };
    let sent = at(&|kind| matches!(kind, EventKind::CallSent { label, .. } if label == "only"));
    let timed_out = at(
        &|kind| matches!(kind, EventKind::AgentGotNoAnswer { label, reason } if label == "only" && reason == "timeout"),
    );
    let (Some(sent), Some(timed_out)) = (sent, timed_out) else {
        panic!("the call was sent and timed out: {:#?}", record.history)
    };
    let timeout = harness::world::parameters().agent_timeout_ms;
    assert_eq!(timed_out - sent, timeout, "the agent gave up after its timeout by the world clock");
    assert!(
        record.stepped < Duration::from_millis(timeout / 2),
        "the wait was stepped through ({:?} stepped)",
        record.stepped
    );
}
