//! Each oracle fires on a hand-made bad history and stays quiet on a good one; each blind spot
//! the oracles once had (docs/oracles.md) has a history that now fires, next to a quiet one.
//!
//! The histories are built the way a run records them: the agent's calls (with the content
//! digest of their arguments), each downstream request a worker sends (its id, the operation
//! tag of the task that sent it, what the downstream did with it), the effects as committed,
//! and the answers.

use std::time::Duration;

use fake_downstream::{content_digest, Disposition, Effect, EffectKind, Service, VersionChange};
use harness::history::{Event, EventKind, RequestKind};
use harness::oracles::{self, Evidence, FINAL_POLL_PREFIX};
use protocol::{ContractSet, NextAction, Outcome, OutcomeStatus, ReasonCode};
use serde_json::{json, Value};

const OP: &str = "acme/production/run_1/step_1";
const OTHER: &str = "acme/production/run_1/step_2";
/// The idempotency key the executor derived for `OP`.
const KEY: &str = "acme:production:run_1:step_1";
const TICKET: &str = r#"{"queue": "support", "subject": "Refund", "body": "Twice charged"}"#;
const CHARGE: &str = r#"{"customer": "cus_42", "amount_minor": 5000, "currency": "EUR"}"#;
const OTHER_TICKET: &str = r#"{"queue": "support", "subject": "Invoice", "body": "Copy please"}"#;

/// What the downstream did with one request.
enum Handling<'a> {
    /// Made an effect: (reference, the answer it committed with); the answer reaches the worker.
    Commit(&'a str, Value),
    /// Made an effect, but the connection closed before the answer.
    CommitThenDrop(&'a str, Value),
    /// Answered without an effect (a read, a lookup, a refusal).
    Answer(Disposition, u16, Value),
}

/// A history and a ledger under construction.
#[derive(Default)]
struct World {
    events: Vec<Event>,
    ledger: Vec<Effect>,
    requests: u64,
    /// Simulated time let pass on top of 10 ms per event.
    skipped_ms: u64,
}

impl World {
    fn push(&mut self, kind: EventKind) -> &mut Self {
        let seq = self.events.len() as u64 + 1;
        self.events.push(Event { seq, at_ms: seq * 10 + self.skipped_ms, kind });
        self
    }

    fn now_ms(&self) -> u64 {
        (self.events.len() as u64 + 1) * 10 + self.skipped_ms
    }

    fn advance(&mut self, ms: u64) -> &mut Self {
        self.skipped_ms += ms;
        self
    }

    /// The agent calls `operation` with `tool` and `arguments` (JSON text) as `actor`.
    fn call_full(
        &mut self,
        label: &str,
        operation: &str,
        actor: &str,
        tool: &str,
        arguments: &str,
    ) -> &mut Self {
        let tenant = operation.split('/').next().unwrap_or_default();
        let parsed: serde_json::Map<String, Value> =
            serde_json::from_str(arguments).expect("test arguments parse");
        let kind = harness::attribution::tool_effect_kind(tool).expect("a built-in tool");
        self.push(EventKind::CallSent {
            label: label.into(),
            call_id: format!("call-{label}"),
            worker: "worker-1".into(),
            operation: operation.into(),
            tenant: tenant.into(),
            actor: actor.into(),
            tool: tool.into(),
            tool_version: "2026-08-18".into(),
            fingerprint: Some(format!("fp:{}", Value::Object(parsed.clone()))),
            expected_version: parsed.get("expected_version").and_then(Value::as_u64),
            content: Some(content_digest(kind, tenant, &parsed)),
        })
    }

    /// The agent calls `OP` with `payments.charge` and `arguments`; the downstream commits
    /// `charge_1` and the call is answered `applied`.
    fn charge_applied(&mut self, label: &str, arguments: &str) -> &mut Self {
        self.call_full(label, OP, "agent", "payments.charge", arguments);
        let content = self.content_of(label);
        let committed =
            json!({"charge_id": "charge_1", "amount_minor": 5000, "currency": "EUR", "status": "succeeded"});
        self.request_full(
            Some(OP),
            Some(label),
            "POST",
            "/v1/charges",
            Some(KEY),
            content,
            Handling::Commit("charge_1", committed),
        );
        self.answer(label, OutcomeStatus::Applied, Some("charge_1"))
    }

    /// The last call was made under `version` of its tool (a fingerprint names the version).
    fn under_version(&mut self, version: &str) -> &mut Self {
        if let Some(EventKind::CallSent { tool_version, fingerprint, .. }) =
            self.events.last_mut().map(|event| &mut event.kind)
        {
            *tool_version = version.into();
            *fingerprint = fingerprint.as_ref().map(|fingerprint| format!("{fingerprint}@{version}"));
        }
        self
    }

    fn call_on(&mut self, label: &str, operation: &str, arguments: &str) -> &mut Self {
        self.call_full(label, operation, "agent", "tickets.create", arguments)
    }

    fn call(&mut self, label: &str) -> &mut Self {
        self.call_on(label, OP, TICKET)
    }

    /// A worker's task serving `tag` (`None`: no agent request) sends `method path` carrying
    /// `content` (the business content of a state-changing request) and `key`, while serving
    /// the agent request `serving`; the downstream handles it as `handling`.
    #[allow(clippy::too_many_arguments)]
    fn request_full(
        &mut self,
        tag: Option<&str>,
        serving: Option<&str>,
        method: &str,
        path: &str,
        key: Option<&str>,
        content: Option<String>,
        handling: Handling<'_>,
    ) -> &mut Self {
        self.requests += 1;
        let request_id = format!("worker-1#{}", self.requests);
        let tenant = tag.map_or("acme", |tag| tag.split('/').next().unwrap_or_default()).to_owned();
        self.push(EventKind::DownstreamSent {
            worker: "worker-1".into(),
            request_id: request_id.clone(),
            origin: tag.map(str::to_owned),
            serving: serving.map(str::to_owned),
            method: method.into(),
            path: path.into(),
            idempotency_key: key.map(str::to_owned),
            tenant: Some(tenant.clone()),
            content: content.clone(),
        });
        let dropped = matches!(handling, Handling::CommitThenDrop(..));
        let (disposition, status, body, effect_seq, dropped) = match handling {
            Handling::Commit(reference, answer) | Handling::CommitThenDrop(reference, answer) => {
                let kind =
                    harness::attribution::RequestClass::of(method, path).effect_kind().expect("a change");
                let seq = self.commit(Effect {
                    seq: 0,
                    service: service_of(kind),
                    kind,
                    tenant: tenant.clone(),
                    idempotency_key: key.map(str::to_owned),
                    effect_reference: reference.into(),
                    request_digest: "sha256:00".into(),
                    versions: (kind == EffectKind::TicketStatusChanged).then_some(VersionChange {
                        from: 1,
                        to: 2,
                        if_match: Some(1),
                    }),
                    origin: tag.map(str::to_owned),
                    request_id: Some(request_id.clone()),
                    content_digest: content.clone().unwrap_or_default(),
                    answer: answer.clone(),
                    at_ms: 0,
                });
                (Disposition::Committed, 201, answer, Some(seq), dropped)
            }
            Handling::Answer(disposition, status, body) => (disposition, status, body, None, false),
        };
        self.push(EventKind::DownstreamHandled {
            journal_seq: self.requests,
            request: format!("{method} {}", path.split('?').next().unwrap_or_default()),
            disposition,
            status: (!dropped).then_some(status),
            fault: dropped.then(|| "commit_then_drop".to_owned()),
            fault_rule: dropped.then_some(1),
            origin: tag.map(str::to_owned),
            request_id: Some(request_id.clone()),
            tenant: Some(tenant),
            idempotency_key: key.map(str::to_owned),
            content,
            effect_seq,
        });
        let described = format!("{method} {}", path.split('?').next().unwrap_or_default());
        if dropped {
            self.push(EventKind::DownstreamFailed {
                worker: "worker-1".into(),
                request_id,
                origin: tag.map(str::to_owned),
                request: described,
                error: "the connection closed without an answer".into(),
            })
        } else {
            let references = ["ticket_id", "charge_id", "message_id", "job_id", "effect_reference"]
                .iter()
                .filter_map(|field| body.get(*field).and_then(Value::as_str).map(str::to_owned))
                .filter(|_| (200..300).contains(&status))
                .collect();
            self.push(EventKind::DownstreamAnswered {
                worker: "worker-1".into(),
                request_id,
                origin: tag.map(str::to_owned),
                request: described,
                status,
                references,
            })
        }
    }

    /// The content digest of the call `label`.
    fn content_of(&self, label: &str) -> Option<String> {
        self.events.iter().find_map(|event| match &event.kind {
            EventKind::CallSent { label: l, content, .. } if l == label => content.clone(),
            _ => None,
        })
    }

    /// The downstream commits an effect of `kind` for the worker serving `tag`, from `content`.
    fn commit(&mut self, mut effect: Effect) -> u64 {
        effect.seq = self.ledger.len() as u64 + 1;
        effect.at_ms = self.now_ms();
        self.ledger.push(effect.clone());
        self.push(EventKind::Effect { effect });
        self.ledger.len() as u64
    }

    /// Serving `tag`, a worker creates a ticket from call `label`'s content and gets the answer.
    fn create(&mut self, tag: &str, label: &str, reference: &str) -> &mut Self {
        let content = self.content_of(label);
        let answer = json!({"ticket_id": reference, "version": 1, "status": "open"});
        let key = tag.replace('/', ":");
        self.request_full(
            Some(tag),
            Some(label),
            "POST",
            "/v1/tickets",
            Some(&key),
            content,
            Handling::Commit(reference, answer),
        )
    }

    /// The agent calls `label` (a ticket for `OP`) and a worker sends its create under `KEY`,
    /// handled as `handling`.
    fn attempt(&mut self, label: &str, handling: Handling<'_>) -> &mut Self {
        self.call(label);
        let content = self.content_of(label);
        self.request_full(Some(OP), Some(label), "POST", "/v1/tickets", Some(KEY), content, handling)
    }

    /// A receipt lookup for key `key`, finding `reference` (or nothing).
    fn lookup(
        &mut self,
        tag: Option<&str>,
        serving: Option<&str>,
        key: &str,
        found: Option<&str>,
    ) -> &mut Self {
        let handling = match found {
            Some(reference) => Handling::Answer(
                Disposition::Read,
                200,
                json!({"tenant": "acme", "idempotency_key": key, "effect_reference": reference}),
            ),
            None => Handling::Answer(Disposition::NotFound, 404, json!({"title": "not found"})),
        };
        self.request_full(
            tag,
            serving,
            "GET",
            &format!("/v1/receipts/{key}?tenant=acme&service=tickets"),
            None,
            None,
            handling,
        )
    }

    /// An answer naming `reference`, with the result a faithful executor gives: the answer the
    /// downstream committed for that effect, when there is one (tests about results use
    /// [`World::answer_with`]).
    fn answer(&mut self, label: &str, status: OutcomeStatus, reference: Option<&str>) -> &mut Self {
        let outcome = self.outcome_naming(status, reference);
        self.answer_with(label, outcome)
    }

    fn outcome_naming(&self, status: OutcomeStatus, reference: Option<&str>) -> Outcome {
        let mut outcome = Outcome::new(status);
        outcome.effect_reference = reference.map(str::to_owned);
        if status.claims_success() {
            outcome.result = reference
                .and_then(|reference| self.ledger.iter().find(|e| e.effect_reference == reference))
                .map(|effect| effect.answer.clone());
        }
        outcome
    }

    fn answer_with(&mut self, label: &str, outcome: Outcome) -> &mut Self {
        self.push(EventKind::Answered {
            label: label.into(),
            worker: "worker-1".into(),
            outcome,
            bare: false,
        })
    }

    /// A black-box server's answer without `structuredContent`: `isError: false`, nothing named.
    fn answer_bare(&mut self, label: &str) -> &mut Self {
        let outcome = Outcome::new(OutcomeStatus::Applied);
        self.push(EventKind::Answered { label: label.into(), worker: "worker-1".into(), outcome, bare: true })
    }

    fn revoke(&mut self, actor: &str) -> &mut Self {
        self.push(EventKind::Revoked { actor: actor.into(), tool: None })
    }

    /// The executor files a reconciliation entry for `operation` (under the key its answers
    /// name: the operation's parts joined by `:`).
    fn hand_over(&mut self, operation: &str) -> &mut Self {
        self.push(EventKind::ReconciliationFiled {
            worker: "worker-1".into(),
            tenant: operation.split('/').next().unwrap_or_default().into(),
            operation_key: operation.replace('/', ":"),
            finding: "no way to find out".into(),
        })
    }

    /// The runner's final poll of `operation`, answered `outcome` (naming the operation key,
    /// as the reference's answers do, when the test did not name one).
    fn settled_with(&mut self, operation: &str, mut outcome: Outcome) -> &mut Self {
        outcome.operation_key.get_or_insert_with(|| operation.replace('/', ":"));
        self.settle();
        let label = format!("{FINAL_POLL_PREFIX}{operation}");
        self.push(EventKind::OperationQuery {
            label: label.clone(),
            kind: RequestKind::Poll,
            worker: "worker-1".into(),
            operation: operation.into(),
            tenant: operation.split('/').next().unwrap_or_default().into(),
            actor: "agent".into(),
        });
        self.answer_with(&label, outcome)
    }

    fn settled(&mut self, operation: &str, status: OutcomeStatus, reference: Option<&str>) -> &mut Self {
        let outcome = self.outcome_naming(status, reference);
        self.settled_with(operation, outcome)
    }

    /// The runner's settle phase begins (once).
    fn settle(&mut self) -> &mut Self {
        if !self.events.iter().any(|event| matches!(event.kind, EventKind::SettleStarted)) {
            self.push(EventKind::SettleStarted);
        }
        self
    }

    fn fired_with(&self, contracts: &ContractSet) -> Vec<String> {
        let evidence = Evidence {
            history: &self.events,
            ledger: &self.ledger,
            contracts,
            tags_complete: true,
            store_seen: true,
        };
        let mut ids: Vec<String> = Vec::new();
        for violation in oracles::check(&evidence) {
            assert!(!violation.explanation.is_empty());
            if !ids.contains(&violation.oracle) {
                ids.push(violation.oracle);
            }
        }
        ids
    }

    /// The oracle ids that fire, in order, without repeats.
    fn fired(&self) -> Vec<String> {
        self.fired_with(&ContractSet::builtin())
    }
}

/// Contracts whose ticket service does not dedupe on keys but offers a receipt lookup: a
/// `unknown` left where nothing was committed is then all an executor can say (O13 is silent).
fn receipts_only() -> ContractSet {
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities("tickets", false, true);
    contracts
}

fn service_of(kind: EffectKind) -> Service {
    match kind {
        EffectKind::ChargeCreated => Service::Charges,
        EffectKind::MessageSent => Service::Messages,
        EffectKind::JobAccepted => Service::Jobs,
        _ => Service::Tickets,
    }
}

fn none() -> Vec<String> {
    Vec::new()
}

/// One good run of an operation: applied with a receipt, replayed, settled.
fn good() -> World {
    let mut world = World::default();
    world
        .call("first")
        .create(OP, "first", "ticket_1")
        .answer("first", OutcomeStatus::Applied, Some("ticket_1"))
        .call("second")
        .answer("second", OutcomeStatus::Replayed, Some("ticket_1"))
        .settled(OP, OutcomeStatus::Replayed, Some("ticket_1"));
    world
}

#[test]
fn a_good_history_is_quiet() {
    assert_eq!(good().fired(), none());
}

#[test]
fn o1_fires_on_two_effects_for_one_operation_and_on_an_unattributed_effect() {
    let mut world = good();
    world.create(OP, "first", "ticket_2");
    assert_eq!(world.fired(), ["O1"]);
    let mut world = good();
    world.request_full(
        None,
        None,
        "POST",
        "/v1/tickets",
        None,
        Some("sha256:nobody-asked".into()),
        Handling::Commit("ticket_9", json!({"ticket_id": "ticket_9"})),
    );
    assert_eq!(world.fired(), ["O1"], "an effect no call asked for, sent outside any operation");
}

#[test]
fn o1_fires_when_the_ledger_is_not_what_was_committed() {
    let mut world = good();
    world.ledger.clear();
    assert_eq!(world.fired(), ["O1"], "the ledger was emptied after the effects were seen");
    let mut world = good();
    world.ledger[0].effect_reference = "ticket_7".into();
    assert_eq!(world.fired(), ["O1"], "an entry was rewritten");
}

#[test]
fn o2_fires_on_success_without_an_effect() {
    let mut world = good();
    world.call_on("other", OTHER, OTHER_TICKET).answer("other", OutcomeStatus::Applied, None);
    world.settled(OTHER, OutcomeStatus::Replayed, None);
    assert!(world.fired().contains(&"O2".to_owned()), "{:?}", world.fired());
}

/// A server that knows nothing of the conventions answers `isError: false` and names nothing:
/// its success claim holds when the operation has its effect, and names no reference or
/// result to hold against the ledger (O2 only asks that the effect exists; O8 has nothing).
#[test]
fn o2_holds_a_bare_success_claim_to_the_operations_effect_only() {
    let mut world = World::default();
    world.call("first").create(OP, "first", "ticket_1").answer_bare("first");
    assert_eq!(world.fired(), none(), "one effect, and the server said it worked");
    let mut world = World::default();
    world.call("first").answer_bare("first");
    assert_eq!(world.fired(), ["O2"], "a success claim without any effect");
    let mut world = World::default();
    world.call("first").create(OP, "first", "ticket_1").answer_bare("first").call("again");
    world.create(OP, "again", "ticket_2").answer_bare("again");
    assert_eq!(world.fired(), ["O1"], "two effects: O1, not O2");
}

#[test]
fn o3_fires_when_a_changed_request_is_not_rejected() {
    let changed = r#"{"queue": "support", "subject": "Refund", "body": "Close my account"}"#;
    let mut world = good();
    world.call_on("changed", OP, changed).answer("changed", OutcomeStatus::Replayed, Some("ticket_1"));
    assert_eq!(world.fired(), ["O3"]);
    let mut world = good();
    let mut rejected = Outcome::rejected(ReasonCode::IdempotencyKeyReusedWithDifferentRequest, "mismatch");
    rejected.operation_key = Some("k".into());
    world.call_on("changed", OP, changed).answer_with("changed", rejected);
    assert_eq!(world.fired(), none(), "a rejected change is right");
    let mut world = good();
    world.call_on("late-change", OP, changed).answer("late-change", OutcomeStatus::Expired, Some("ticket_1"));
    assert_eq!(world.fired(), none(), "past retention, expired refuses too");
}

#[test]
fn o4_fires_on_success_without_a_receipt() {
    let mut world = World::default();
    world
        .attempt("first", Handling::CommitThenDrop("ticket_1", json!({"ticket_id": "ticket_1"})))
        .answer("first", OutcomeStatus::Applied, Some("ticket_1"))
        .settled(OP, OutcomeStatus::Replayed, Some("ticket_1"));
    assert_eq!(world.fired(), ["O4"], "the answer was lost: nothing told the executor ticket_1 exists");
}

#[test]
fn o5_judges_an_effect_by_when_its_request_left_the_worker() {
    let mut on_the_wire = World::default();
    on_the_wire.call("first");
    let content = on_the_wire.content_of("first");
    // The request leaves, the permission is revoked while it is on the wire, then it commits.
    on_the_wire.requests += 1;
    let request_id = format!("worker-1#{}", on_the_wire.requests);
    on_the_wire.push(EventKind::DownstreamSent {
        worker: "worker-1".into(),
        request_id: request_id.clone(),
        origin: Some(OP.into()),
        serving: Some("first".into()),
        method: "POST".into(),
        path: "/v1/tickets".into(),
        idempotency_key: None,
        tenant: Some("acme".into()),
        content: content.clone(),
    });
    on_the_wire.revoke("agent");
    let seq = on_the_wire.commit(Effect {
        seq: 0,
        service: Service::Tickets,
        kind: EffectKind::TicketCreated,
        tenant: "acme".into(),
        idempotency_key: None,
        effect_reference: "ticket_1".into(),
        request_digest: "sha256:00".into(),
        versions: None,
        origin: Some(OP.into()),
        request_id: Some(request_id.clone()),
        content_digest: content.clone().unwrap_or_default(),
        answer: json!({"ticket_id": "ticket_1"}),
        at_ms: 0,
    });
    on_the_wire.push(EventKind::DownstreamHandled {
        journal_seq: 1,
        request: "POST /v1/tickets".into(),
        disposition: Disposition::Committed,
        status: Some(201),
        fault: None,
        fault_rule: None,
        origin: Some(OP.into()),
        request_id: Some(request_id),
        tenant: Some("acme".into()),
        idempotency_key: None,
        content,
        effect_seq: Some(seq),
    });
    on_the_wire.settled_with(OP, Outcome::rejected(ReasonCode::Unauthorized, "revoked"));
    assert_eq!(on_the_wire.fired(), none(), "a request already sent cannot be recalled");

    let mut sent_after = World::default();
    sent_after.call("first").revoke("agent").create(OP, "first", "ticket_1").settled(
        OP,
        OutcomeStatus::Replayed,
        Some("ticket_1"),
    );
    assert_eq!(sent_after.fired(), ["O5"]);
}

#[test]
fn o6_fires_when_an_operation_is_still_in_flight_after_settling() {
    let mut world = World::default();
    world.call("first").answer("first", OutcomeStatus::InFlight, None).settled(
        OP,
        OutcomeStatus::InFlight,
        None,
    );
    assert_eq!(world.fired_with(&receipts_only()), ["O6"]);
    let mut world = World::default();
    let mut unknown = Outcome::new(OutcomeStatus::Unknown);
    unknown.next_action = NextAction::Poll;
    world.call("first").settled_with(OP, unknown);
    assert_eq!(world.fired_with(&receipts_only()), ["O6"], "unknown must point at reconciliation");
    let mut world = World::default();
    world.call("first").settle().push(EventKind::OperationQuery {
        label: format!("{FINAL_POLL_PREFIX}{OP}"),
        kind: RequestKind::Poll,
        worker: "worker-1".into(),
        operation: OP.into(),
        tenant: "acme".into(),
        actor: "agent".into(),
    });
    assert_eq!(world.fired(), ["O6"], "a settled world whose final poll got no answer");
    let mut world = World::default();
    world.call("first").settle();
    assert_eq!(
        world.fired(),
        none(),
        "never polled (a black-box server without replaylab.poll): O6 cannot judge"
    );
    let mut world = World::default();
    world.call("first");
    assert_eq!(world.fired(), none(), "a run stopped before settling is judged by its limit");
}

#[test]
fn o7_fires_on_a_new_effect_past_retention() {
    let mut world = good();
    world.advance(120_000).call("late").create(OP, "late", "ticket_2");
    assert_eq!(world.fired(), ["O1", "O7"]);
}

#[test]
fn o8_fires_on_a_replay_of_another_reference_or_result() {
    let mut world = good();
    world.call("third").answer("third", OutcomeStatus::Replayed, Some("ticket_5"));
    assert!(world.fired().contains(&"O8".to_owned()), "{:?}", world.fired());
    let mut world = World::default();
    let mut applied = Outcome::new(OutcomeStatus::Applied);
    applied.effect_reference = Some("ticket_1".into());
    applied.result = Some(json!({"ticket_id": "ticket_1", "version": 1}));
    let mut replayed = applied.clone();
    replayed.status = OutcomeStatus::Replayed;
    replayed.result = Some(json!({"succeeded": true}));
    world
        .call("first")
        .create(OP, "first", "ticket_1")
        .answer_with("first", applied)
        .call("second")
        .answer_with("second", replayed)
        .settled(OP, OutcomeStatus::Applied, Some("ticket_1"));
    assert_eq!(world.fired(), ["O8"]);
}

#[test]
fn o9_fires_when_an_outcome_reveals_another_tenants_effect() {
    let mut world = good();
    let globex = "globex/production/run_1/step_1";
    world
        .call_on("globex", globex, TICKET)
        .answer("globex", OutcomeStatus::Replayed, Some("ticket_1"))
        .settled(globex, OutcomeStatus::Replayed, Some("ticket_1"));
    assert!(world.fired().contains(&"O9".to_owned()), "{:?}", world.fired());
}

#[test]
fn o10_fires_on_two_jobs_for_one_operation() {
    let job = r#"{"job_type": "report", "input": {}}"#;
    let mut world = World::default();
    world.call_full("submit", OP, "agent", "jobs.submit", job);
    let content = world.content_of("submit");
    for reference in ["job_1", "job_2"] {
        world.request_full(
            Some(OP),
            Some("submit"),
            "POST",
            "/v1/jobs",
            None,
            content.clone(),
            Handling::Commit(reference, json!({"job_id": reference, "status": "pending"})),
        );
    }
    assert_eq!(world.fired(), ["O10"]);
}

fn close(expected_version: u64) -> String {
    format!(r#"{{"ticket_id": "ticket_1", "status": "closed", "expected_version": {expected_version}}}"#)
}

#[test]
fn o11_fires_on_an_update_applied_over_a_newer_version() {
    let mut world = World::default();
    world.call_full("close", OP, "agent", "tickets.set_status", &close(1));
    let content = world.content_of("close");
    world.request_full(
        Some(OP),
        Some("close"),
        "PATCH",
        "/v1/tickets/ticket_1",
        None,
        content,
        Handling::Commit("ticket_1", json!({"ticket_id": "ticket_1", "version": 3, "status": "closed"})),
    );
    world.ledger[0].versions = Some(VersionChange { from: 2, to: 3, if_match: None });
    if let Some(EventKind::Effect { effect }) =
        world.events.iter_mut().map(|e| &mut e.kind).find(|k| matches!(k, EventKind::Effect { .. }))
    {
        effect.versions = Some(VersionChange { from: 2, to: 3, if_match: None });
    }
    world.settled(OP, OutcomeStatus::Applied, Some("ticket_1"));
    assert_eq!(world.fired(), ["O11"]);
}

#[test]
fn o12_fires_when_an_operation_disowns_its_effect() {
    let mut world = World::default();
    world.call("first").create(OP, "first", "ticket_1").answer(
        "first",
        OutcomeStatus::Applied,
        Some("ticket_1"),
    );
    world.settled_with(OP, Outcome::rejected(ReasonCode::DownstreamRejected, "failed"));
    assert_eq!(world.fired(), ["O12"]);
}

#[test]
fn violations_name_oracle_operation_and_positions() {
    let mut world = good();
    world.create(OP, "first", "ticket_2");
    let contracts = ContractSet::builtin();
    let evidence = Evidence {
        history: &world.events,
        ledger: &world.ledger,
        contracts: &contracts,
        tags_complete: true,
        store_seen: true,
    };
    let violations = oracles::check(&evidence);
    assert_eq!(violations.len(), 1);
    let text = violations[0].to_string();
    assert!(text.starts_with("O1 single_effect [acme/production/run_1/step_1] at #"), "{text}");
    assert!(text.contains("2 ticket_created effects"), "{text}");
}

// ------------------------------------------------------------------ the nine blind spots

/// 1. An absolute update the downstream refused (412), answered `applied` with the ticket id
///    the executor read in a plain GET. O2 sees that no status change of this operation exists;
///    O4 that a read is no receipt.
#[test]
fn blind_spot_1_a_refused_update_answered_applied_from_a_plain_read() {
    let refused = |answer: OutcomeStatus| {
        let mut world = World::default();
        world.call_on("create", OTHER, TICKET).create(OTHER, "create", "ticket_1").answer(
            "create",
            OutcomeStatus::Applied,
            Some("ticket_1"),
        );
        world.call_full("close", OP, "agent", "tickets.set_status", &close(1));
        let content = world.content_of("close");
        world
            .request_full(
                Some(OP),
                Some("close"),
                "GET",
                "/v1/tickets/ticket_1?tenant=acme",
                None,
                None,
                Handling::Answer(Disposition::Read, 200, json!({"ticket_id": "ticket_1", "version": 2})),
            )
            .request_full(
                Some(OP),
                Some("close"),
                "PATCH",
                "/v1/tickets/ticket_1",
                None,
                content,
                Handling::Answer(
                    Disposition::PreconditionFailed,
                    412,
                    json!({"title": "precondition failed"}),
                ),
            );
        if answer == OutcomeStatus::Applied {
            world.answer("close", answer, Some("ticket_1")).settled(
                OP,
                OutcomeStatus::Replayed,
                Some("ticket_1"),
            );
        } else {
            let stale = Outcome::rejected(ReasonCode::PreconditionFailed, "stale");
            world.answer_with("close", stale.clone()).settled_with(OP, stale);
        }
        world.settled(OTHER, OutcomeStatus::Replayed, Some("ticket_1"));
        world
    };
    assert_eq!(refused(OutcomeStatus::Applied).fired(), ["O2", "O4"]);
    assert_eq!(refused(OutcomeStatus::Rejected).fired(), none());
}

/// 2. A recovery sweep serving operation X re-creates operation Y's ticket: the effect belongs
///    to Y (its content is Y's call's), not to X, whose task sent it. Only O1 can see it.
#[test]
fn blind_spot_2_an_effect_belongs_to_the_request_not_to_the_task_that_sent_it() {
    let sweep = |recreate: bool| {
        let mut world = World::default();
        world.call_on("y", OTHER, OTHER_TICKET).create(OTHER, "y", "ticket_1").answer(
            "y",
            OutcomeStatus::Applied,
            Some("ticket_1"),
        );
        world.call_full(
            "x",
            OP,
            "agent",
            "payments.charge",
            r#"{"customer": "c", "amount_minor": 5, "currency": "EUR"}"#,
        );
        let charge = world.content_of("x");
        if recreate {
            // While serving X, a sweep re-creates Y's ticket.
            let y_content = world.content_of("y");
            world.request_full(
                Some(OP),
                Some("x"),
                "POST",
                "/v1/tickets",
                None,
                y_content,
                Handling::Commit("ticket_2", json!({"ticket_id": "ticket_2"})),
            );
        }
        world
            .request_full(
                Some(OP),
                Some("x"),
                "POST",
                "/v1/charges",
                Some(KEY),
                charge,
                Handling::Commit("charge_1", json!({"charge_id": "charge_1", "amount_minor": 5})),
            )
            .answer("x", OutcomeStatus::Applied, Some("charge_1"))
            .settled(OP, OutcomeStatus::Replayed, Some("charge_1"))
            .settled(OTHER, OutcomeStatus::Replayed, Some("ticket_1"));
        world
    };
    assert_eq!(sweep(true).fired(), ["O1"]);
    assert_eq!(sweep(false).fired(), none());
}

/// 3. A replay whose business result differs from what the downstream committed, with no
///    earlier `applied` answer to compare with (the first answer was lost). Only O8 sees it.
#[test]
fn blind_spot_3_a_replay_is_compared_with_what_the_downstream_committed() {
    let replay = |result: Value| {
        let mut world = World::default();
        world.call("first");
        let content = world.content_of("first");
        let committed = json!({"ticket_id": "ticket_1", "version": 1, "status": "open"});
        world
            .request_full(
                Some(OP),
                Some("first"),
                "POST",
                "/v1/tickets",
                Some(KEY),
                content,
                Handling::CommitThenDrop("ticket_1", committed),
            )
            .answer("first", OutcomeStatus::Unknown, None)
            .call("retry")
            .lookup(Some(OP), Some("retry"), KEY, Some("ticket_1"));
        let mut outcome = Outcome::new(OutcomeStatus::Replayed);
        outcome.effect_reference = Some("ticket_1".into());
        outcome.result = Some(result);
        world.answer_with("retry", outcome).settled(OP, OutcomeStatus::Replayed, Some("ticket_1"));
        world
    };
    assert_eq!(replay(json!({"ticket_id": "ticket_1", "status": "closed"})).fired(), ["O8"]);
    assert_eq!(
        replay(json!({"ticket_id": "ticket_1", "version": 1, "status": "open"})).fired(),
        none(),
        "a subset from the receipt is faithful"
    );
}

/// 4. A retry after the revocation answered `in_flight` or `unknown` instead of `rejected`.
///    Only O5 sees it.
#[test]
fn blind_spot_4_a_retry_after_revocation_must_be_rejected() {
    for (status, fires) in
        [(OutcomeStatus::InFlight, true), (OutcomeStatus::Unknown, true), (OutcomeStatus::Rejected, false)]
    {
        let mut world = World::default();
        world
            .attempt("first", Handling::CommitThenDrop("ticket_1", json!({"ticket_id": "ticket_1"})))
            .answer("first", OutcomeStatus::Unknown, None)
            .lookup(None, None, KEY, Some("ticket_1"))
            .revoke("agent")
            .call("retry");
        let outcome = if status == OutcomeStatus::Rejected {
            Outcome::rejected(ReasonCode::Unauthorized, "revoked")
        } else {
            Outcome::new(status)
        };
        world.answer_with("retry", outcome);
        world.settled_with(OP, Outcome::rejected(ReasonCode::Unauthorized, "revoked"));
        assert_eq!(world.fired(), if fires { vec!["O5".to_owned()] } else { none() }, "{status:?}");
    }
}

/// 5. An outcome whose own reference is right, but whose result embeds another tenant's
///    reference. Only O9 sees it.
#[test]
fn blind_spot_5_a_result_that_embeds_another_tenants_reference() {
    let leak = |result: Value| {
        let globex = "globex/production/run_1/step_1";
        let mut world = World::default();
        world.call_on("g", globex, TICKET).create(globex, "g", "ticket_1").answer(
            "g",
            OutcomeStatus::Applied,
            Some("ticket_1"),
        );
        world.call("a").create(OP, "a", "ticket_2");
        let mut outcome = Outcome::new(OutcomeStatus::Applied);
        outcome.effect_reference = Some("ticket_2".into());
        outcome.result = Some(result);
        let mut replayed = outcome.clone();
        replayed.status = OutcomeStatus::Replayed;
        world.answer_with("a", outcome).settled_with(OP, replayed).settled(
            globex,
            OutcomeStatus::Replayed,
            Some("ticket_1"),
        );
        world
    };
    let own = |extra: Option<Value>| {
        let mut result = json!({"ticket_id": "ticket_2", "version": 1, "status": "open"});
        if let Some(extra) = extra {
            result["related"] = extra;
        }
        result
    };
    assert_eq!(leak(own(Some(json!(["ticket_1"])))).fired(), ["O9"]);
    assert_eq!(leak(own(None)).fired(), none());
}

/// 6. An operation left `unknown` ("reconcile later") that the executor never looked up
///    itself: its only lookup was made while serving the harness's final poll. Only O6 sees it.
#[test]
fn blind_spot_6_unknown_needs_the_executors_own_lookup() {
    let left =
        |own_lookup: bool| {
            let mut world = World::default();
            world
                .attempt("first", Handling::Answer(Disposition::DroppedBeforeCommit, 504, json!({})))
                .answer("first", OutcomeStatus::Unknown, None);
            if own_lookup {
                // The executor's own reconciliation, outside any agent request.
                world.lookup(None, None, KEY, None);
            }
            // No way left to find out: handed over to people (O13's other half, tested below).
            world.hand_over(OP);
            world.settle();
            let final_poll = format!("{FINAL_POLL_PREFIX}{OP}");
            world.lookup(Some(OP), Some(&final_poll), KEY, None).settled(OP, OutcomeStatus::Unknown, None);
            world
        };
    // (Without key dedupe: where the downstream honours the key, O13 asks for more than a look.)
    assert_eq!(left(false).fired_with(&receipts_only()), ["O6"]);
    assert_eq!(left(true).fired_with(&receipts_only()), none());
    // Where the downstream offers no lookup at all, `unknown` without one is all there is.
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities("tickets", false, false);
    assert_eq!(left(false).fired_with(&contracts), none());
}

/// 7. `jobs.submit` answered `applied` with the reference of the job's completion message.
///    O2 sees it (the message is the job operation's, but not its own kind of effect), and now
///    O8 too (the result carries the message's fields, not the job's id).
#[test]
fn blind_spot_7_a_job_answered_with_its_completion_message() {
    let job = |reference: &str| {
        let mut world = World::default();
        world.call_full("submit", OP, "agent", "jobs.submit", r#"{"job_type": "report", "input": {}}"#);
        let content = world.content_of("submit");
        world.request_full(
            Some(OP),
            Some("submit"),
            "POST",
            "/v1/jobs",
            Some(KEY),
            content,
            Handling::Commit("job_1", json!({"job_id": "job_1", "status": "pending"})),
        );
        // The completion notice, sent while settling the job (no call carries its content).
        world.request_full(
            Some(OP),
            None,
            "POST",
            "/v1/messages",
            None,
            Some("sha256:notice".into()),
            Handling::Commit("message_1", json!({"message_id": "message_1", "status": "sent"})),
        );
        world.answer("submit", OutcomeStatus::Applied, Some(reference)).settled(
            OP,
            OutcomeStatus::Replayed,
            Some("job_1"),
        );
        world
    };
    // O8's result rule sees it too now: the result is the message's, without the job's id.
    assert_eq!(job("message_1").fired(), ["O2", "O8"]);
    assert_eq!(job("job_1").fired(), none());
}

/// 8. A changed request carried out under a key whose first attempt committed nothing and
///    whose answer was lost. Only O3 sees it (nothing was there to compare with before).
#[test]
fn blind_spot_8_a_changed_request_after_a_first_attempt_that_committed_nothing() {
    let changed = r#"{"queue": "support", "subject": "Refund", "body": "Close my account"}"#;
    let attempt = |carried_out: bool| {
        let mut world = World::default();
        world
            .attempt("first", Handling::Answer(Disposition::DroppedBeforeCommit, 504, json!({})))
            .answer("first", OutcomeStatus::Unknown, None)
            .call_on("changed", OP, changed);
        if carried_out {
            world.create(OP, "changed", "ticket_1").answer("changed", OutcomeStatus::Rejected, None);
            world.settled(OP, OutcomeStatus::Replayed, Some("ticket_1"));
        } else {
            world.answer_with(
                "changed",
                Outcome::rejected(ReasonCode::IdempotencyKeyReusedWithDifferentRequest, "mismatch"),
            );
            world.lookup(None, None, KEY, None).hand_over(OP).settled(OP, OutcomeStatus::Unknown, None);
        }
        world
    };
    assert_eq!(attempt(true).fired_with(&receipts_only()), ["O3"]);
    assert_eq!(attempt(false).fired_with(&receipts_only()), none());
}

/// 9. An operation whose effect is in the ledger finally answered `rejected` (an executor that
///    deleted its claim on an error, then refuses). Only O12 sees it; a final poll refused
///    because the actor lost its permission is not judged.
#[test]
fn blind_spot_9_an_effect_the_executor_disowns() {
    let disowned = |final_answer: Outcome, revoked: bool| {
        let mut world = World::default();
        world
            .attempt("first", Handling::CommitThenDrop("ticket_1", json!({"ticket_id": "ticket_1"})))
            .answer("first", OutcomeStatus::Unknown, None)
            .lookup(None, None, KEY, Some("ticket_1"));
        if revoked {
            world.revoke("agent");
        }
        world.settled_with(OP, final_answer);
        world
    };
    let failed = Outcome::rejected(ReasonCode::DownstreamRejected, "the downstream failed");
    assert_eq!(disowned(failed, false).fired(), ["O12"]);
    let mut replayed = Outcome::new(OutcomeStatus::Replayed);
    replayed.effect_reference = Some("ticket_1".into());
    replayed.result = Some(json!({"ticket_id": "ticket_1"}));
    assert_eq!(disowned(replayed, false).fired(), none());
    let unauthorized = Outcome::rejected(ReasonCode::Unauthorized, "revoked");
    assert_eq!(disowned(unauthorized, true).fired(), none(), "the poll was refused, not the operation");
}

// ------------------------------------------------------------------ O13, liveness

/// O13: once the world settled, an operation the executor could resolve is resolved. Safety
/// alone lets an executor leave everything `unknown`; only O13 objects.
#[test]
fn o13_an_operation_the_executor_could_resolve_must_not_stay_unknown() {
    // Nothing committed; the executor looked (so O6 holds) and left it `unknown`.
    let never_sent =
        || {
            let mut world = World::default();
            world
                .attempt("first", Handling::Answer(Disposition::DroppedBeforeCommit, 504, json!({})))
                .answer("first", OutcomeStatus::Unknown, None);
            world.lookup(None, None, KEY, None).hand_over(OP).settled(OP, OutcomeStatus::Unknown, None);
            world
        };
    // The downstream honours the key: a resend is answered from the first request, so the
    // executor could have carried it out (handing it over does not excuse that).
    assert_eq!(never_sent().fired(), ["O13"]);
    // No key dedupe, and nothing to find: a receipt lookup that finds nothing does not prove
    // that a request still on its way will not commit, so `unknown`, handed over, is acceptable.
    assert_eq!(never_sent().fired_with(&receipts_only()), none());
    // An effect committed and its answer lost: the receipt lookup would find it.
    let mut lost = World::default();
    lost.attempt("first", Handling::CommitThenDrop("ticket_1", json!({"ticket_id": "ticket_1"}))).answer(
        "first",
        OutcomeStatus::Unknown,
        None,
    );
    lost.lookup(None, None, KEY, Some("ticket_1")).settled(OP, OutcomeStatus::Unknown, None);
    assert_eq!(lost.fired_with(&receipts_only()), ["O13"]);
    // Resolved: quiet.
    let mut resolved = World::default();
    resolved.attempt("first", Handling::CommitThenDrop("ticket_1", json!({"ticket_id": "ticket_1"}))).answer(
        "first",
        OutcomeStatus::Unknown,
        None,
    );
    resolved.lookup(None, None, KEY, Some("ticket_1")).settled(OP, OutcomeStatus::Replayed, Some("ticket_1"));
    assert_eq!(resolved.fired_with(&receipts_only()), none());
    // `expired` is an answer only once retention has run out since the first call.
    let mut early = World::default();
    early.attempt("first", Handling::Commit("ticket_1", json!({"ticket_id": "ticket_1"}))).answer(
        "first",
        OutcomeStatus::Applied,
        Some("ticket_1"),
    );
    early.settled(OP, OutcomeStatus::Expired, Some("ticket_1"));
    assert_eq!(early.fired(), ["O13"]);
}

/// O8, for refusals: a poll (or a retry of the same request) replays a refusal with the
/// reason it was refused for. Before, no oracle read a replayed rejection's reason.
#[test]
fn o8_a_replayed_refusal_keeps_its_reason() {
    let replayed = |reason: ReasonCode| {
        let mut world = World::default();
        world.call("first").answer_with("first", Outcome::rejected(ReasonCode::PreconditionFailed, "stale"));
        world.settled_with(OP, Outcome::rejected(reason, "replayed"));
        world
    };
    assert_eq!(replayed(ReasonCode::DownstreamRejected).fired(), ["O8"]);
    assert_eq!(replayed(ReasonCode::PreconditionFailed).fired(), none());
}

/// O8, for results: a success carries the fields its contract names (`result`), as the
/// downstream committed them. Before, a result emptied to `{}` or `null` passed every oracle
/// when no earlier `applied` answer was there to compare with.
#[test]
fn o8_a_success_carries_the_result_the_downstream_committed() {
    let committed = json!({"ticket_id": "ticket_1", "version": 1, "status": "open"});
    let replay = |result: Option<Value>| {
        let mut world = World::default();
        // The first attempt's answer was lost after the commit; a retry found the receipt.
        world.attempt("first", Handling::CommitThenDrop("ticket_1", committed.clone()));
        world.lookup(Some(OP), None, KEY, Some("ticket_1"));
        let mut outcome = Outcome::new(OutcomeStatus::Replayed);
        outcome.effect_reference = Some("ticket_1".into());
        outcome.result = result;
        world.settled_with(OP, outcome);
        world
    };
    assert_eq!(replay(Some(json!({}))).fired(), ["O8"]);
    assert_eq!(replay(None).fired(), ["O8"]);
    assert_eq!(
        replay(Some(json!({"ticket_id": "ticket_1"}))).fired(),
        ["O8"],
        "version and status are missing"
    );
    assert_eq!(replay(Some(committed.clone())).fired(), none());
    // An `applied` answer whose values differ from the committed ones.
    let mut world = World::default();
    world.attempt("first", Handling::Commit("ticket_1", committed.clone()));
    let mut applied = Outcome::new(OutcomeStatus::Applied);
    applied.effect_reference = Some("ticket_1".into());
    applied.result = Some(json!({"ticket_id": "ticket_1", "version": 7, "status": "open"}));
    world.answer_with("first", applied);
    assert_eq!(world.fired(), ["O8"]);
}

/// A job submitted for `OP` by call "submit", accepted as `job_1`, answered `in_flight`.
fn job_submitted() -> World {
    let mut world = World::default();
    world.call_full("submit", OP, "agent", "jobs.submit", r#"{"job_type": "report", "input": {}}"#);
    let content = world.content_of("submit");
    world.request_full(
        Some(OP),
        Some("submit"),
        "POST",
        "/v1/jobs",
        Some(KEY),
        content,
        Handling::Commit("job_1", json!({"job_id": "job_1", "status": "pending"})),
    );
    world.answer("submit", OutcomeStatus::InFlight, None);
    world
}

/// O10, for completion notices: a job the executor finally answers `applied`/`replayed` for
/// has the notice its contract names in the ledger. Before, nothing counted notices: a job
/// settled by a single poll and never announced passed every oracle.
#[test]
fn o10_a_settled_job_is_announced() {
    let job = |announced: bool, final_status: OutcomeStatus| {
        let mut world = job_submitted();
        if announced {
            world.request_full(
                Some(OP),
                None,
                "POST",
                "/v1/messages",
                None,
                Some("sha256:notice".into()),
                Handling::Commit("message_1", json!({"message_id": "message_1", "status": "sent"})),
            );
        }
        let reference = (final_status != OutcomeStatus::InFlight).then_some("job_1");
        world.settled(OP, final_status, reference);
        world
    };
    assert_eq!(job(false, OutcomeStatus::Replayed).fired(), ["O10"]);
    assert_eq!(job(true, OutcomeStatus::Replayed).fired(), none());
    // A notice the downstream never confirmed, handed over to people instead.
    let mut handed_over = job(false, OutcomeStatus::Replayed);
    handed_over.hand_over(OP);
    assert_eq!(handed_over.fired(), none());
    // Still running by the executor's account: nothing to announce yet (liveness is O13's).
    assert_eq!(job(false, OutcomeStatus::InFlight).fired(), ["O6", "O13"]);
}

/// A completion notice sent with no tag (a process sends it while it serves nothing or
/// several things): where every task is tagged (the simulation) it is an effect nobody asked
/// for, O1; where tags are not complete (the process world) the harness cannot tell whose it
/// is, and neither O1 nor O10 may fail the run on it: both are undecided, and the run unknown.
#[test]
fn an_untagged_notice_is_undecided_where_tags_are_not_complete() {
    let mut world = job_submitted();
    world.request_full(
        None,
        None,
        "POST",
        "/v1/messages",
        None,
        Some("sha256:notice".into()),
        Handling::Commit("message_1", json!({"message_id": "message_1", "status": "sent"})),
    );
    world.settled(OP, OutcomeStatus::Replayed, Some("job_1"));
    let contracts = ContractSet::builtin();
    let judged = |tags_complete| {
        oracles::judge(&Evidence {
            history: &world.events,
            ledger: &world.ledger,
            contracts: &contracts,
            tags_complete,
            store_seen: tags_complete,
        })
    };
    let simulated = judged(true);
    let fired: Vec<&str> = simulated.violations.iter().map(|v| v.oracle.as_str()).collect();
    assert_eq!(fired, ["O1", "O10"], "{:#?}", simulated.violations);
    assert!(simulated.undecided.is_empty());
    let process = judged(false);
    assert!(process.violations.is_empty(), "{:#?}", process.violations);
    assert_eq!(process.undecided.len(), 2, "{:#?}", process.undecided);
    assert!(process.undecided[0].starts_with("O1 not decided") && process.undecided[0].contains("message_1"));
    assert!(
        process.undecided[1].starts_with("O10 not decided") && process.undecided[1].contains("message_1")
    );
}

/// O3, across versions: a contract that lets a newer version replay its records allows the
/// replay of the same business request only. Before, any request under the key could be
/// answered with the old effect once the versions differed.
#[test]
fn o3_a_newer_version_replays_only_the_same_request() {
    let upgraded = |arguments: &str| {
        let mut world = World::default();
        world.charge_applied("first", CHARGE);
        world.call_full("upgraded", OP, "agent", "payments.charge", arguments).under_version("2026-10-01");
        world.answer("upgraded", OutcomeStatus::Replayed, Some("charge_1"));
        world.settled(OP, OutcomeStatus::Replayed, Some("charge_1"));
        world
    };
    assert_eq!(upgraded(CHARGE).fired(), none());
    let changed = r#"{"customer": "cus_42", "amount_minor": 7000, "currency": "EUR"}"#;
    assert_eq!(upgraded(changed).fired(), ["O3"]);
}

/// O13's other half: where the downstream gives the executor no way to find out, `unknown` is
/// the honest final answer only when the executor handed the operation over to people (filed a
/// reconciliation entry the harness sees). Before, an executor could leave it in a table nobody
/// reads.
#[test]
fn o13_an_unknown_nothing_can_settle_is_handed_over() {
    let lost = |handed_over: bool, key: Option<&str>| {
        let mut world = World::default();
        world
            .attempt("first", Handling::CommitThenDrop("ticket_1", json!({"ticket_id": "ticket_1"})))
            .answer("first", OutcomeStatus::Unknown, None);
        if handed_over {
            world.hand_over(OP);
        }
        let mut unknown = Outcome::new(OutcomeStatus::Unknown);
        unknown.next_action = NextAction::Reconcile;
        unknown.operation_key = key.map(str::to_owned);
        world.settled_with(OP, unknown);
        world
    };
    let mut blind = ContractSet::builtin();
    blind.set_capabilities("tickets", false, false);
    assert_eq!(lost(false, None).fired_with(&blind), ["O13"]);
    assert_eq!(lost(true, None).fired_with(&blind), none());
    // An entry under a key the executor never named for the operation is not its entry.
    assert_eq!(lost(true, Some("acme:production:run_1:another_step")).fired_with(&blind), ["O13"]);
}

/// O13, the told rule: where the downstream offers no lookup and no honoured key, an answer
/// with the effect's receipt that reached a worker (which then kept running) is proof the
/// executor holds. Before, such an operation could end `unknown` and handed over although the
/// executor had been told its receipt (M30, S27: a late answer to a worker whose claim was
/// taken over and the record left `unknown`).
#[test]
fn o13_an_answer_the_executor_was_told_settles_the_operation() {
    let told = |crashed_after: bool, final_status: OutcomeStatus| {
        let mut world = World::default();
        world
            .attempt("first", Handling::Commit("ticket_1", json!({"ticket_id": "ticket_1"})))
            .answer("first", OutcomeStatus::Unknown, None)
            .hand_over(OP);
        if crashed_after {
            world.push(EventKind::Crashed {
                worker: "worker-1".into(),
                paused_at: None,
                after_commit: false,
            });
        }
        let mut last =
            world.outcome_naming(final_status, Some("ticket_1").filter(|_| final_status.claims_success()));
        if final_status == OutcomeStatus::Unknown {
            last.next_action = NextAction::Reconcile;
        }
        world.settled_with(OP, last);
        world
    };
    let mut blind = ContractSet::builtin();
    blind.set_capabilities("tickets", false, false);
    assert_eq!(told(false, OutcomeStatus::Unknown).fired_with(&blind), ["O13"]);
    assert_eq!(told(false, OutcomeStatus::Replayed).fired_with(&blind), none());
    // A worker killed after the answer may have lost it before writing it down.
    assert_eq!(told(true, OutcomeStatus::Unknown).fired_with(&blind), none());
}

/// The agent polls the operation on worker-2, which answers `in_flight`.
fn polled_in_flight(world: &mut World) {
    world.push(EventKind::OperationQuery {
        label: "status".into(),
        kind: RequestKind::Poll,
        worker: "worker-2".into(),
        operation: OP.into(),
        tenant: "acme".into(),
        actor: "agent".into(),
    });
    world.answer("status", OutcomeStatus::InFlight, None);
}

/// O6, answer by answer: an `in_flight` answer names an owner at work. A poll answered
/// `in_flight` after the only owner claimed the operation and died, once its lease ran out and
/// with no downstream request of it open, tells the agent to wait for nobody (M31, S28).
/// Before, only the final poll's `in_flight` was judged.
#[test]
fn o6_an_in_flight_answer_needs_an_owner_who_may_still_be_at_work() {
    let polled_after = |ms: u64| {
        let mut world = World::default();
        world.call("first");
        world.push(EventKind::CallReceived { label: "first".into(), worker: "worker-1".into() });
        world.push(EventKind::StoreCommitted {
            worker: "worker-1".into(),
            call: "claim".into(),
            serving: Some("first".into()),
        });
        world.push(EventKind::Crashed { worker: "worker-1".into(), paused_at: None, after_commit: false });
        world.advance(ms);
        polled_in_flight(&mut world);
        world
    };
    let mut contracts = ContractSet::builtin();
    contracts.set_timing(Duration::from_secs(3), Duration::from_secs(60));
    // Within the dead owner's lease, nobody can tell it is dead: in_flight is right.
    assert_eq!(polled_after(1_000).fired_with(&contracts), none());
    assert_eq!(polled_after(5_000).fired_with(&contracts), ["O6"]);
}

/// O6 where tags are not complete: a worker process answers a retry `in_flight` after a
/// receipt lookup it sent while serving the retry. In the simulation the lookup is the retry's
/// own (every task is tagged), so nobody else is at work and O6 fires. A process tags a request
/// with what it serves now: the lookup may be its own sweep's, which took the claim over and is
/// the live owner the answer names (S03 as 4 Postgres-backed processes on a busy machine was a
/// false `fail`), so O6 may not fire there.
#[test]
fn o6_counts_a_processs_own_request_during_the_call_as_possibly_another_tasks() {
    let mut world = World::default();
    world.call("first");
    world.push(EventKind::CallReceived { label: "first".into(), worker: "worker-1".into() });
    world.push(EventKind::Crashed { worker: "worker-1".into(), paused_at: None, after_commit: false });
    world.advance(5_000);
    world.call("retry");
    world.lookup(Some(OP), Some("retry"), KEY, Some("ticket_1"));
    world.answer("retry", OutcomeStatus::InFlight, None);
    let mut contracts = ContractSet::builtin();
    contracts.set_timing(Duration::from_secs(3), Duration::from_secs(60));
    let judged = |tags_complete| {
        let verdict = oracles::judge(&Evidence {
            history: &world.events,
            ledger: &world.ledger,
            contracts: &contracts,
            tags_complete,
            store_seen: tags_complete,
        });
        verdict.violations.iter().map(|v| v.oracle.clone()).filter(|o| o == "O6").count()
    };
    assert_eq!(judged(true), 1, "simulated: the lookup is the retry's own");
    assert_eq!(judged(false), 0, "a process: the lookup may be its sweep's");

    // A poll answered in_flight with nothing sent for the operation before it, and a sweep's
    // lookup just after: in the simulation the store gate would have seen a take-over before
    // the answer, and there was none (O6); a process's take-over shows only by that lookup.
    let mut world = World::default();
    world.call("first");
    world.push(EventKind::CallReceived { label: "first".into(), worker: "worker-1".into() });
    world.push(EventKind::Crashed { worker: "worker-1".into(), paused_at: None, after_commit: false });
    world.advance(5_000);
    polled_in_flight(&mut world);
    world.advance(200);
    world.lookup(Some(OP), None, KEY, Some("ticket_1"));
    let judged = |store_seen| {
        let verdict = oracles::judge(&Evidence {
            history: &world.events,
            ledger: &world.ledger,
            contracts: &contracts,
            tags_complete: store_seen,
            store_seen,
        });
        verdict.violations.iter().filter(|v| v.oracle == "O6").count()
    };
    assert_eq!(judged(true), 1, "simulated: nobody took it over before the answer");
    assert_eq!(judged(false), 0, "a process: the sweep's lookup names the owner the answer did");
}

/// O7, for `reconcile_first` (payments.charge): a call after retention answered `expired` is
/// answered after the executor asked the downstream while serving it. Before, the contract's
/// late-arrival policy was never checked: only the absence of a new effect was.
#[test]
fn o7_a_late_call_under_reconcile_first_asks_the_downstream_first() {
    let late = |asked: bool| {
        let mut world = World::default();
        world.charge_applied("first", CHARGE);
        world.advance(61_000);
        world.call_full("late", OP, "agent", "payments.charge", CHARGE);
        if asked {
            world.lookup(Some(OP), Some("late"), KEY, Some("charge_1"));
        }
        world.answer("late", OutcomeStatus::Expired, Some("charge_1"));
        world
    };
    assert_eq!(late(false).fired(), ["O7"]);
    assert_eq!(late(true).fired(), none());
}

/// O13, answer by answer: a retry answered `unknown` though every downstream request made for
/// it was answered cleanly, nobody else was working on the operation, and the executor could
/// have found out then (the downstream honours the key). Before, only the final poll was
/// judged, and a restarted worker's sweep could settle what the retry had given up on.
#[test]
fn o13_a_retry_that_could_find_out_does_not_answer_unknown() {
    let retry = |lookup: Option<Handling<'static>>, busy: bool, contracts: &ContractSet| {
        let mut world = World::default();
        // The first attempt's worker crashed after claiming: no request left, no answer.
        world.call("first");
        world.push(EventKind::AgentGotNoAnswer { label: "first".into(), reason: "connection_closed".into() });
        world.call("retry");
        if busy {
            // Work nobody waits for (a sweep) touches the operation meanwhile.
            world.lookup(Some(OP), None, KEY, None);
        }
        if let Some(handling) = lookup {
            world.request_full(
                Some(OP),
                Some("retry"),
                "GET",
                &format!("/v1/receipts/{KEY}?tenant=acme&service=tickets"),
                None,
                None,
                handling,
            );
        }
        world.answer("retry", OutcomeStatus::Unknown, None);
        let evidence = Evidence {
            history: &world.events,
            ledger: &world.ledger,
            contracts,
            tags_complete: true,
            store_seen: true,
        };
        // Only this rule's verdict on the retry (the final poll is judged apart).
        oracles::check(&evidence)
            .iter()
            .any(|v| v.oracle == "O13" && v.explanation.contains("\"retry\" was answered unknown"))
    };
    let builtin = ContractSet::builtin();
    let not_found = || Handling::Answer(Disposition::NotFound, 404, json!({"title": "not found"}));
    // A key the downstream honours: the retry could have resent it.
    assert!(retry(None, false, &builtin));
    assert!(retry(Some(not_found()), false, &builtin));
    // Its own lookup failed (503): `unknown` is what it knew.
    let failed = Handling::Answer(Disposition::Read, 503, json!({"title": "unavailable"}));
    assert!(!retry(Some(failed), false, &builtin));
    // Someone else was at work on the operation: `unknown` may be theirs.
    assert!(!retry(None, true, &builtin));
    // No way to find out (no key dedupe, nothing committed): `unknown` it is.
    let mut blind = ContractSet::builtin();
    blind.set_capabilities("tickets", false, false);
    assert!(!retry(None, false, &blind));
}

/// Attribution ties: two operations sent identical content; the first's only call was refused
/// (unauthorized), the second's worker crashed, and a sweep with no operation tag made the
/// effect later. The refused operation claimed nothing, so the effect is the second's (before,
/// it went to the first called, and the second's replay looked like a phantom).
#[test]
fn a_refused_operation_is_no_candidate_in_an_attribution_tie() {
    let mut world = World::default();
    world.call_full("refused", OP, "agent", "tickets.create", TICKET);
    world.answer_with("refused", Outcome::rejected(ReasonCode::Unauthorized, "revoked"));
    world.call_full("crashed", OTHER, "agent", "tickets.create", TICKET);
    world.push(EventKind::AgentGotNoAnswer { label: "crashed".into(), reason: "connection_closed".into() });
    let content = world.content_of("crashed");
    world.request_full(
        None,
        None,
        "POST",
        "/v1/tickets",
        // A key no answer names yet (the crashed call never answered).
        Some("k-other"),
        content,
        Handling::Commit("ticket_1", json!({"ticket_id": "ticket_1"})),
    );
    let attribution = harness::attribution::Attribution::build(&world.events);
    assert_eq!(attribution.effect(world.ledger[0].seq), Some(OTHER));
    world.settled(OTHER, OutcomeStatus::Replayed, Some("ticket_1"));
    world.settled_with(OP, Outcome::rejected(ReasonCode::InvalidRequest, "no operation with this key"));
    assert_eq!(world.fired(), none());
}

/// A worker held at a downstream pause point with a request carrying its call's content, and
/// killed there, had acted on that call, though it left no other trace (a process's claim is
/// in its own store): the call is the operation's original, so a later changed request is the
/// one refused, and the original request, resent by the executor's recovery and replayed, is
/// no changed request carried out (O3). Without the operation on the pause, the changed call
/// was taken for the original, and the reference over MCP failed O3 in exploration.
#[test]
fn a_call_held_at_a_pause_point_was_acted_on() {
    let changed = r#"{"queue": "billing", "subject": "Refund", "body": "Twice charged"}"#;
    let held_then_killed = |operations: Vec<String>| {
        let mut world = World::default();
        world.call("first");
        world.push(EventKind::CallReceived { label: "first".into(), worker: "worker-1".into() });
        world.push(EventKind::Paused {
            name: "held".into(),
            worker: "worker-1".into(),
            point: "downstream:before POST /v1/tickets".into(),
            operations,
        });
        world.push(EventKind::Crashed {
            worker: "worker-1".into(),
            paused_at: Some("downstream:before POST /v1/tickets".into()),
            after_commit: false,
        });
        world.push(EventKind::AgentGotNoAnswer { label: "first".into(), reason: "connection_closed".into() });
        world.call_on("changed", OP, changed).answer_with(
            "changed",
            Outcome::rejected(ReasonCode::IdempotencyKeyReusedWithDifferentRequest, "mismatch"),
        );
        // The restarted worker's recovery resends the first call's request under its key.
        let content = world.content_of("first");
        let committed = json!({"ticket_id": "ticket_1", "version": 1, "status": "open"});
        world.request_full(
            None,
            None,
            "POST",
            "/v1/tickets",
            Some(KEY),
            content,
            Handling::Commit("ticket_1", committed),
        );
        world.call("again").answer("again", OutcomeStatus::Replayed, Some("ticket_1"));
        world.settled(OP, OutcomeStatus::Replayed, Some("ticket_1"));
        world
    };
    assert_eq!(held_then_killed(vec![OP.to_owned()]).fired(), none());
    assert!(held_then_killed(Vec::new()).fired().contains(&"O3".to_owned()), "the premise of the test");
    // Held with another operation's content: that says nothing of this call.
    assert!(held_then_killed(vec![OTHER.to_owned()]).fired().contains(&"O3".to_owned()));
}
