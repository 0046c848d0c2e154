use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use fake_downstream::{
    Disposition, Downstream, DownstreamConfig, EffectKind, FaultAction, FaultRule, IdempotencyMode,
    RuleMatch, ServiceConfig, Times, WebhookConfig,
};
use serde_json::{json, Value};
use turmoil::Sim;
use wire::{HttpClient, HttpRequest, HttpResponse, SimAcceptor, SimConnector};

const PATIENCE: Duration = Duration::from_secs(10);

fn world(config: DownstreamConfig, seed: u64) -> (Sim<'static>, Downstream) {
    let sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(20))
        .simulation_duration(Duration::from_secs(120))
        .build();
    let clock = || turmoil::sim_elapsed().map_or(0, |elapsed| elapsed.as_millis() as u64);
    let downstream = Downstream::new(config, Arc::new(clock), Arc::new(SimConnector));
    let mut sim = sim;
    let served = downstream.clone();
    sim.host("downstream", move || {
        let router = served.router();
        async move {
            let listener = turmoil::net::TcpListener::bind(("0.0.0.0", 80)).await?;
            wire::serve(SimAcceptor(listener), router).await?;
            Ok(())
        }
    });
    (sim, downstream)
}

/// Runs `agent` as the simulation's client to the end and returns what it returned.
fn run_agent<T: 'static>(sim: &mut Sim<'static>, agent: impl Future<Output = T> + 'static) -> T {
    let out = Rc::new(RefCell::new(None));
    let slot = out.clone();
    sim.client("agent", async move {
        *slot.borrow_mut() = Some(agent.await);
        Ok(())
    });
    sim.run().expect("the simulation runs to the end");
    let value = out.borrow_mut().take();
    value.expect("the agent finished")
}

fn client() -> HttpClient {
    HttpClient::new(Arc::new(SimConnector), "downstream", 80)
}

/// What the agent saw: a response, a closed connection, or nothing before its timeout.
#[derive(Debug)]
enum Seen {
    Response(HttpResponse),
    Closed,
    TimedOut,
}

impl Seen {
    fn response(self) -> HttpResponse {
        match self {
            Seen::Response(response) => response,
            other => panic!("expected a response, saw {other:?}"),
        }
    }
}

async fn send(request: HttpRequest, patience: Duration) -> Seen {
    match tokio::time::timeout(patience, client().send(request)).await {
        Ok(Ok(response)) => Seen::Response(response),
        Ok(Err(wire::TransportError::ClosedWithoutResponse(_))) => Seen::Closed,
        Ok(Err(other)) => panic!("unexpected transport error: {other}"),
        Err(_) => Seen::TimedOut,
    }
}

fn ticket(subject: &str) -> Value {
    json!({"tenant": "acme", "queue": "support", "subject": subject, "body": "customer text"})
}

fn create(key: Option<&str>, body: &Value) -> HttpRequest {
    let request = HttpRequest::json(http::Method::POST, "/v1/tickets", body)
        .header("X-Replaylab-Origin", "acme/prod/wf-1/step-1");
    match key {
        Some(key) => request.header("Idempotency-Key", key),
        None => request,
    }
}

fn receipt(key: &str, tenant: &str) -> HttpRequest {
    HttpRequest::get(format!("/v1/receipts/{key}?tenant={tenant}&service=tickets"))
}

fn rule(key: &str, action: FaultAction) -> FaultRule {
    FaultRule::once(
        RuleMatch {
            path: Some("/v1/tickets".into()),
            idempotency_key: Some(key.into()),
            ..RuleMatch::default()
        },
        action,
    )
}

fn ignoring_keys() -> DownstreamConfig {
    DownstreamConfig {
        tickets: ServiceConfig { idempotency: IdempotencyMode::Ignored, receipts: true },
        ..DownstreamConfig::default()
    }
}

#[test]
fn honoured_keys_replay_the_first_answer_and_refuse_a_changed_request() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 1);
    let (first, second, changed) = run_agent(&mut sim, async {
        let first = send(create(Some("k1"), &ticket("a")), PATIENCE).await.response();
        let second = send(create(Some("k1"), &ticket("a")), PATIENCE).await.response();
        let changed = send(create(Some("k1"), &ticket("b")), PATIENCE).await.response();
        (first, second, changed)
    });
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(second.status, 201);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(first.body, second.body);
    assert_eq!(changed.status, 422);
    assert_eq!(changed.header("content-type"), Some("application/problem+json"));
    let ledger = downstream.ledger();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0].kind, EffectKind::TicketCreated);
    assert_eq!(ledger[0].idempotency_key.as_deref(), Some("k1"));
    assert_eq!(ledger[0].origin.as_deref(), Some("acme/prod/wf-1/step-1"), "the harness's tag is kept");
    let dispositions: Vec<_> = downstream.requests().iter().map(|r| r.disposition).collect();
    assert_eq!(
        dispositions,
        [Disposition::Committed, Disposition::Replayed, Disposition::KeyReusedWithDifferentRequest]
    );
}

#[test]
fn ignored_keys_make_every_request_a_new_effect() {
    let (mut sim, downstream) = world(ignoring_keys(), 2);
    let (first, second) = run_agent(&mut sim, async {
        let first = send(create(Some("k1"), &ticket("a")), PATIENCE).await.response();
        let second = send(create(Some("k1"), &ticket("a")), PATIENCE).await.response();
        (first, second)
    });
    assert_eq!((first.status, second.status), (201, 201));
    assert_eq!(second.header("idempotent-replayed"), None);
    assert_ne!(first.body, second.body);
    let ledger = downstream.ledger();
    assert_eq!(ledger.len(), 2);
    assert!(ledger.iter().all(|effect| effect.idempotency_key.as_deref() == Some("k1")));
}

#[test]
fn keys_are_scoped_by_tenant() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 3);
    let (a, b, other_receipt) = run_agent(&mut sim, async {
        let a = send(create(Some("same"), &ticket("a")), PATIENCE).await.response();
        let mut globex = ticket("a");
        globex["tenant"] = json!("globex");
        let b = send(create(Some("same"), &globex), PATIENCE).await.response();
        let other_receipt = send(receipt("same", "initech"), PATIENCE).await.response();
        (a, b, other_receipt)
    });
    assert_eq!((a.status, b.status), (201, 201));
    assert_eq!(b.header("idempotent-replayed"), None);
    assert_eq!(other_receipt.status, 404);
    let tenants: Vec<_> = downstream.ledger().into_iter().map(|effect| effect.tenant).collect();
    assert_eq!(tenants, ["acme", "globex"]);
}

#[test]
fn commit_then_drop_loses_the_answer_but_not_the_effect() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 4);
    downstream.install_fault(rule("k3", FaultAction::CommitThenDrop));
    let (lost, found, retry) = run_agent(&mut sim, async {
        let lost = send(create(Some("k3"), &ticket("a")), PATIENCE).await;
        let found = send(receipt("k3", "acme"), PATIENCE).await.response();
        let retry = send(create(Some("k3"), &ticket("a")), PATIENCE).await.response();
        (lost, found, retry)
    });
    assert!(matches!(lost, Seen::Closed), "{lost:?}");
    let ledger = downstream.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(found.status, 200);
    let receipt: Value = found.json().unwrap();
    assert_eq!(receipt["effect_reference"], json!(ledger[0].effect_reference));
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    let journal = downstream.requests();
    assert_eq!(journal[0].fault_action.as_deref(), Some("commit_then_drop"));
    assert_eq!(journal[0].status, None);
    assert_eq!(journal[0].effect_seq, Some(1));
}

#[test]
fn commit_then_drop_with_ignored_keys_lets_a_blind_retry_duplicate() {
    let (mut sim, downstream) = world(ignoring_keys(), 5);
    downstream.install_fault(rule("k3", FaultAction::CommitThenDrop));
    let retry = run_agent(&mut sim, async {
        let _ = send(create(Some("k3"), &ticket("a")), PATIENCE).await;
        send(create(Some("k3"), &ticket("a")), PATIENCE).await.response()
    });
    assert_eq!(retry.status, 201);
    assert_eq!(downstream.ledger().len(), 2, "the fake service must not hide a blind retry");
}

#[test]
fn drop_before_commit_never_answers_and_commits_nothing() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 6);
    downstream.install_fault(rule("k4", FaultAction::DropBeforeCommit));
    let (dropped, retry) = run_agent(&mut sim, async {
        let dropped = send(create(Some("k4"), &ticket("a")), Duration::from_secs(5)).await;
        let retry = send(create(Some("k4"), &ticket("a")), PATIENCE).await.response();
        (dropped, retry)
    });
    assert!(matches!(dropped, Seen::TimedOut), "{dropped:?}");
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), None, "a dropped request leaves the key free");
    assert_eq!(downstream.ledger().len(), 1);
    assert_eq!(downstream.requests()[0].disposition, Disposition::DroppedBeforeCommit);
}

#[test]
fn reset_before_commit_closes_at_once_and_commits_nothing() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 7);
    downstream.install_fault(rule("k5", FaultAction::ResetBeforeCommit));
    let reset = run_agent(&mut sim, async { send(create(Some("k5"), &ticket("a")), PATIENCE).await });
    assert!(matches!(reset, Seen::Closed), "{reset:?}");
    assert!(downstream.ledger().is_empty());
    assert_eq!(downstream.requests()[0].disposition, Disposition::ResetBeforeCommit);
}

#[test]
fn commit_then_delay_commits_first_and_answers_late() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 8);
    let mut late = rule("k6", FaultAction::CommitThenDelay(Duration::from_secs(3)));
    late.times = Times::Count(2);
    downstream.install_fault(late);
    let (impatient, patient) = run_agent(&mut sim, async {
        let impatient = send(create(Some("k6"), &ticket("a")), Duration::from_secs(1)).await;
        let started = tokio::time::Instant::now();
        let patient = send(create(Some("k6"), &ticket("a")), PATIENCE).await.response();
        (impatient, (patient, started.elapsed()))
    });
    assert!(matches!(impatient, Seen::TimedOut), "{impatient:?}");
    let (patient, waited) = patient;
    assert!(waited >= Duration::from_secs(3), "answered after {waited:?}");
    assert_eq!(patient.header("idempotent-replayed"), Some("true"));
    assert_eq!(downstream.ledger().len(), 1);
}

#[test]
fn commit_then_error_answers_5xx_after_the_effect() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 9);
    let mut failing = rule("k7", FaultAction::CommitThenError(503));
    failing.matches.idempotency_key = None;
    downstream.install_fault(failing);
    let answer = run_agent(&mut sim, async { send(create(None, &ticket("a")), PATIENCE).await.response() });
    assert_eq!(answer.status, 503);
    let problem: wire::Problem = answer.json().unwrap();
    assert_eq!(problem.kind, "injected_error");
    assert_eq!(downstream.ledger().len(), 1);
}

#[test]
fn commit_then_malformed_answers_a_truncated_body_after_the_effect() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 10);
    downstream.install_fault(rule("k8", FaultAction::CommitThenMalformed));
    let answer =
        run_agent(&mut sim, async { send(create(Some("k8"), &ticket("a")), PATIENCE).await.response() });
    assert_eq!(answer.status, 201);
    assert!(answer.json::<Value>().is_err(), "body should not parse: {:?}", answer.body);
    assert!(!answer.body.is_empty());
    assert_eq!(downstream.ledger().len(), 1);
}

#[test]
fn delay_before_commit_commits_after_the_delay() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 11);
    downstream.install_fault(rule("k9", FaultAction::DelayBeforeCommit(Duration::from_secs(2))));
    let answer =
        run_agent(&mut sim, async { send(create(Some("k9"), &ticket("a")), PATIENCE).await.response() });
    assert_eq!(answer.status, 201);
    let ledger = downstream.ledger();
    assert_eq!(ledger.len(), 1);
    assert!(ledger[0].at_ms >= 2_000, "committed at {} ms", ledger[0].at_ms);
}

#[test]
fn hold_keeps_the_request_before_commit_until_released() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 12);
    let id = downstream.install_fault(rule("k10", FaultAction::Hold));
    let seen = Rc::new(RefCell::new(Vec::new()));
    let first_seen = seen.clone();
    sim.client("agent", async move {
        let response = send(create(Some("k10"), &ticket("a")), Duration::from_secs(60)).await.response();
        first_seen.borrow_mut().push(("first", response.status));
        Ok(())
    });
    let mut steps = 0;
    while downstream.held(id) == 0 {
        sim.step().unwrap();
        steps += 1;
        assert!(steps < 10_000, "the request never arrived");
    }
    assert!(downstream.ledger().is_empty(), "a held request has not committed");
    let second_seen = seen.clone();
    sim.client("agent-2", async move {
        let response = send(create(Some("k10"), &ticket("a")), PATIENCE).await.response();
        second_seen.borrow_mut().push(("second", response.status));
        Ok(())
    });
    while seen.borrow().is_empty() {
        sim.step().unwrap();
    }
    assert_eq!(*seen.borrow(), [("second", 409)], "the key is in progress while held");
    assert_eq!(downstream.release(id), Ok(1));
    sim.run().unwrap();
    assert_eq!(*seen.borrow(), [("second", 409), ("first", 201)]);
    assert_eq!(downstream.ledger().len(), 1);
    assert_eq!(downstream.held(id), 0);
}

#[test]
fn nth_fires_on_the_nth_matching_request_only() {
    let (mut sim, downstream) = world(ignoring_keys(), 13);
    downstream.install_fault(FaultRule::once(
        RuleMatch {
            method: Some("POST".into()),
            path: Some("/v1/*".into()),
            nth: Some(2),
            ..RuleMatch::default()
        },
        FaultAction::CommitThenError(500),
    ));
    let statuses = run_agent(&mut sim, async {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(send(create(None, &ticket("a")), PATIENCE).await.response().status);
        }
        statuses
    });
    assert_eq!(statuses, [201, 500, 201]);
    assert_eq!(downstream.ledger().len(), 3);
}

#[test]
fn receipt_lookup_can_be_switched_off() {
    let mut config = DownstreamConfig::default();
    config.tickets.receipts = false;
    let (mut sim, downstream) = world(config, 14);
    let (created, lookup) = run_agent(&mut sim, async {
        let created = send(create(Some("r1"), &ticket("a")), PATIENCE).await.response();
        let lookup = send(receipt("r1", "acme"), PATIENCE).await.response();
        (created, lookup)
    });
    assert_eq!(created.status, 201);
    assert_eq!(lookup.status, 501);
    assert_eq!(downstream.ledger().len(), 1);
}

#[test]
fn version_precondition_refuses_a_stale_status_change() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 15);
    let touched = downstream.clone();
    let statuses = run_agent(&mut sim, async move {
        let created: Value = send(create(None, &ticket("a")), PATIENCE).await.response().json().unwrap();
        let id = created["ticket_id"].as_str().unwrap().to_owned();
        let patch = |version: u64, status: &str| {
            HttpRequest::json(
                http::Method::PATCH,
                format!("/v1/tickets/{id}"),
                &json!({"tenant": "acme", "status": status}),
            )
            .header("If-Match", version.to_string())
        };
        let closed = send(patch(1, "closed"), PATIENCE).await.response().status;
        touched.touch_ticket(&id).unwrap();
        let stale = send(patch(2, "open"), PATIENCE).await.response().status;
        let again = send(patch(3, "closed"), PATIENCE).await.response();
        let other_tenant = send(HttpRequest::get(format!("/v1/tickets/{id}?tenant=globex")), PATIENCE).await;
        (
            closed,
            stale,
            again.status,
            again.json::<Value>().unwrap()["version"].clone(),
            other_tenant.response().status,
        )
    });
    assert_eq!(statuses, (200, 412, 200, json!(3), 404));
    let kinds: Vec<_> = downstream.ledger().iter().map(|effect| (effect.kind, effect.versions)).collect();
    assert_eq!(kinds.len(), 3, "create, close, human edit; the stale and the no-op change are not effects");
    assert_eq!(kinds[1].0, EffectKind::TicketStatusChanged);
    assert_eq!(kinds[1].1.unwrap().if_match, Some(1));
    assert_eq!(kinds[2].0, EffectKind::TicketEditedByHuman);
}

#[test]
fn a_delayed_job_completes_later_and_webhooks_arrive_as_configured() {
    let config = DownstreamConfig {
        job_duration: Duration::from_secs(5),
        webhook: Some(WebhookConfig {
            url: "http://hook:9000/webhooks".into(),
            repeat_same_event: 1,
            extra_event_ids: 1,
        }),
        ..DownstreamConfig::default()
    };
    let (mut sim, downstream) = world(config, 16);
    let received = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let inbox = received.clone();
    sim.host("hook", move || {
        let inbox = inbox.clone();
        async move {
            let router = axum::Router::new().route(
                "/webhooks",
                axum::routing::post(move |axum::Json(event): axum::Json<Value>| {
                    inbox.lock().unwrap().push(event);
                    async { http::StatusCode::NO_CONTENT }
                }),
            );
            let listener = turmoil::net::TcpListener::bind(("0.0.0.0", 9000)).await?;
            wire::serve(SimAcceptor(listener), router).await?;
            Ok(())
        }
    });
    let (accepted, early, retry, late) = run_agent(&mut sim, async {
        let job = json!({"tenant": "acme", "job_type": "invoice", "input": {"month": "2026-11"}});
        let submit =
            || HttpRequest::json(http::Method::POST, "/v1/jobs", &job).header("Idempotency-Key", "j1");
        let accepted: Value = send(submit(), PATIENCE).await.response().json().unwrap();
        let id = accepted["job_id"].as_str().unwrap().to_owned();
        let status = || HttpRequest::get(format!("/v1/jobs/{id}?tenant=acme"));
        let early: Value = send(status(), PATIENCE).await.response().json().unwrap();
        let retry = send(submit(), PATIENCE).await.response();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let late: Value = send(status(), PATIENCE).await.response().json().unwrap();
        (accepted, early, retry, late)
    });
    assert_eq!(accepted["status"], "pending");
    assert_eq!(early["status"], "pending");
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(late["status"], "succeeded");
    assert!(late["result"]["output_reference"].is_string());
    assert_eq!(downstream.ledger().len(), 1, "one job accepted");
    let events: Vec<_> =
        received.lock().unwrap().iter().map(|event| event["event_id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(events, ["evt_1", "evt_1", "evt_2"]);
    assert!(received
        .lock()
        .unwrap()
        .iter()
        .all(|event| event["idempotency_key"] == "j1" && event["job_id"] == accepted["job_id"]));
    assert_eq!(downstream.webhook_deliveries().len(), 3);
}

#[test]
fn bad_input_gets_a_problem_answer_and_no_effect() {
    let (mut sim, downstream) = world(DownstreamConfig::default(), 17);
    let answers = run_agent(&mut sim, async {
        let raw = |body: &str| {
            HttpRequest::new(http::Method::POST, "/v1/tickets")
                .header("content-type", "application/json")
                .body(body.to_owned())
        };
        let cases = vec![
            ("malformed json", raw("{\"tenant\": ")),
            (
                "unknown field",
                raw(r#"{"tenant":"acme","queue":"q","subject":"s","body":"b","colour":"red"}"#),
            ),
            ("wrong type", raw(r#"{"tenant":"acme","queue":"q","subject":"s","body":7}"#)),
            ("empty tenant", raw(r#"{"tenant":"","queue":"q","subject":"s","body":"b"}"#)),
            (
                "too large",
                raw(&format!(
                    r#"{{"tenant":"acme","queue":"q","subject":"s","body":"{}"}}"#,
                    "x".repeat(70_000)
                )),
            ),
            ("empty key", create(Some(""), &ticket("a"))),
            ("long key", create(Some(&"k".repeat(256)), &ticket("a"))),
            ("control key", create(Some("a\tb"), &ticket("a"))),
            (
                "zero amount",
                HttpRequest::json(
                    http::Method::POST,
                    "/v1/charges",
                    &json!({"tenant":"acme","customer":"c","amount_minor":0,"currency":"EUR"}),
                ),
            ),
            (
                "bad currency",
                HttpRequest::json(
                    http::Method::POST,
                    "/v1/charges",
                    &json!({"tenant":"acme","customer":"c","amount_minor":5,"currency":"euro"}),
                ),
            ),
            ("missing tenant query", HttpRequest::get("/v1/tickets/ticket_1")),
            (
                "bad if-match",
                HttpRequest::json(
                    http::Method::PATCH,
                    "/v1/tickets/ticket_1",
                    &json!({"tenant":"acme","status":"closed"}),
                )
                .header("If-Match", "soon"),
            ),
            (
                "bad status",
                HttpRequest::json(
                    http::Method::PATCH,
                    "/v1/tickets/ticket_1",
                    &json!({"tenant":"acme","status":"gone"}),
                ),
            ),
            ("unknown route", HttpRequest::get("/v1/nothing")),
        ];
        let mut answers = Vec::new();
        for (name, request) in cases {
            let response = send(request, PATIENCE).await.response();
            let problem: wire::Problem = response.json().unwrap_or_else(|e| panic!("{name}: {e}"));
            answers.push((
                name,
                response.status,
                response.header("content-type").map(str::to_owned),
                problem.kind,
            ));
        }
        answers
    });
    let expected = [
        ("malformed json", 400, "invalid_json"),
        ("unknown field", 400, "invalid_request"),
        ("wrong type", 400, "invalid_request"),
        ("empty tenant", 400, "invalid_request"),
        ("too large", 413, "body_too_large"),
        ("empty key", 400, "invalid_idempotency_key"),
        ("long key", 400, "invalid_idempotency_key"),
        ("control key", 400, "invalid_idempotency_key"),
        ("zero amount", 400, "invalid_request"),
        ("bad currency", 400, "invalid_request"),
        ("missing tenant query", 400, "invalid_query"),
        ("bad if-match", 400, "invalid_if_match"),
        ("bad status", 400, "invalid_request"),
        ("unknown route", 404, "not_found"),
    ];
    for ((name, status, content_type, kind), (want_name, want_status, want_kind)) in
        answers.iter().zip(expected)
    {
        assert_eq!((*name, *status, kind.as_str()), (want_name, want_status, want_kind));
        assert_eq!(content_type.as_deref(), Some("application/problem+json"), "{name}");
    }
    assert_eq!(answers.len(), expected.len());
    assert!(downstream.ledger().is_empty());
    assert!(downstream
        .requests()
        .iter()
        .all(|r| matches!(r.disposition, Disposition::Invalid | Disposition::NotFound)));
}

/// A mixed workload with faults; returns the ledger and journal as JSON.
fn mixed_history(seed: u64) -> String {
    let (mut sim, downstream) = world(DownstreamConfig::default(), seed);
    downstream.install_fault(rule("m2", FaultAction::CommitThenDrop));
    downstream.install_fault(rule("m3", FaultAction::CommitThenDelay(Duration::from_millis(700))));
    for worker in 0..3 {
        sim.client(format!("agent-{worker}"), async move {
            for step in 0..4 {
                let key = format!("m{}", (worker + step) % 5);
                let _ = send(create(Some(&key), &ticket("a")), Duration::from_millis(500)).await;
            }
            Ok(())
        });
    }
    sim.run().unwrap();
    serde_json::to_string(&(downstream.ledger(), downstream.requests())).unwrap()
}

#[test]
fn the_same_seed_gives_the_same_ledger_and_journal() {
    let first = mixed_history(42);
    assert_eq!(first, mixed_history(42));
    assert!(first.contains("commit_then_drop"), "the workload exercised a fault");
}
