//! Each oracle fires on a hand-made bad history and stays quiet on a good one.

use fake_downstream::{Effect, EffectKind, Service, VersionChange};
use harness::history::{Event, EventKind, RequestKind};
use harness::oracles::{self, Evidence, FINAL_POLL_PREFIX};
use protocol::{ContractSet, NextAction, Outcome, OutcomeStatus, ReasonCode};

const OP: &str = "acme/production/run_1/step_1";

/// A history and a ledger under construction.
#[derive(Default)]
struct World {
    events: Vec<Event>,
    ledger: Vec<Effect>,
}

impl World {
    fn push(&mut self, kind: EventKind) -> &mut Self {
        let seq = self.events.len() as u64 + 1;
        self.events.push(Event { seq, at_ms: seq * 10, kind });
        self
    }

    fn call_as(
        &mut self,
        label: &str,
        operation: &str,
        tenant: &str,
        actor: &str,
        fingerprint: &str,
    ) -> &mut Self {
        self.push(EventKind::CallSent {
            label: label.into(),
            call_id: format!("call-{label}"),
            worker: "worker-1".into(),
            operation: operation.into(),
            tenant: tenant.into(),
            actor: actor.into(),
            tool: "tickets.create".into(),
            tool_version: "2026-08-18".into(),
            fingerprint: Some(fingerprint.into()),
            expected_version: None,
        })
    }

    fn call(&mut self, label: &str, fingerprint: &str) -> &mut Self {
        self.call_as(label, OP, "acme", "agent", fingerprint)
    }

    fn answer(&mut self, label: &str, status: OutcomeStatus, reference: Option<&str>) -> &mut Self {
        let mut outcome = Outcome::new(status);
        outcome.effect_reference = reference.map(str::to_owned);
        self.answer_with(label, outcome)
    }

    fn answer_with(&mut self, label: &str, outcome: Outcome) -> &mut Self {
        self.push(EventKind::Answered { label: label.into(), worker: "worker-1".into(), outcome })
    }

    fn observed(&mut self, operation: &str, reference: &str) -> &mut Self {
        self.push(EventKind::DownstreamAnswered {
            worker: "worker-1".into(),
            origin: Some(operation.into()),
            request: "POST /v1/tickets".into(),
            status: 201,
            references: vec![reference.into()],
        })
    }

    fn effect_at(
        &mut self,
        operation: Option<&str>,
        tenant: &str,
        kind: EffectKind,
        reference: &str,
        at_ms: u64,
    ) -> &mut Self {
        let seq = self.ledger.len() as u64 + 1;
        let effect = Effect {
            seq,
            service: Service::Tickets,
            kind,
            tenant: tenant.into(),
            idempotency_key: None,
            effect_reference: reference.into(),
            request_digest: "sha256:00".into(),
            versions: None,
            origin: operation.map(str::to_owned),
            at_ms,
        };
        self.ledger.push(effect.clone());
        self.push(EventKind::Effect {
            ledger_seq: seq,
            service: effect.service,
            kind,
            tenant: tenant.into(),
            reference: reference.into(),
            idempotency_key: None,
            origin: effect.origin,
            versions: None,
        })
    }

    fn effect(&mut self, reference: &str) -> &mut Self {
        let at = self.events.len() as u64 * 10;
        self.effect_at(Some(OP), "acme", EffectKind::TicketCreated, reference, at)
    }

    /// The runner's final poll, answered `status`.
    fn settled(&mut self, operation: &str, status: OutcomeStatus, reference: Option<&str>) -> &mut Self {
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
        self.answer(&label, status, reference)
    }

    /// The runner's settle phase begins (once).
    fn settle(&mut self) -> &mut Self {
        if !self.events.iter().any(|event| matches!(event.kind, EventKind::SettleStarted)) {
            self.push(EventKind::SettleStarted);
        }
        self
    }

    /// The oracle ids that fire, in order, without repeats.
    fn fired(&self) -> Vec<String> {
        let contracts = ContractSet::builtin();
        let evidence = Evidence { history: &self.events, ledger: &self.ledger, contracts: &contracts };
        let mut ids: Vec<String> = Vec::new();
        for violation in oracles::check(&evidence) {
            assert!(!violation.explanation.is_empty());
            if !ids.contains(&violation.oracle) {
                ids.push(violation.oracle);
            }
        }
        ids
    }
}

/// One good run of an operation: applied with a receipt, replayed, settled.
fn good() -> World {
    let mut world = World::default();
    world
        .call("first", "fp-1")
        .effect("ticket_1")
        .observed(OP, "ticket_1")
        .answer("first", OutcomeStatus::Applied, Some("ticket_1"))
        .call("second", "fp-1")
        .answer("second", OutcomeStatus::Replayed, Some("ticket_1"))
        .settled(OP, OutcomeStatus::Replayed, Some("ticket_1"));
    world
}

#[test]
fn a_good_history_is_quiet() {
    assert_eq!(good().fired(), Vec::<String>::new());
}

#[test]
fn o1_fires_on_two_effects_for_one_operation_and_on_an_unattributed_effect() {
    let mut world = good();
    world.effect("ticket_2");
    assert_eq!(world.fired(), ["O1"]);
    let mut world = good();
    world.effect_at(None, "acme", EffectKind::TicketCreated, "ticket_9", 5);
    assert_eq!(world.fired(), ["O1"]);
}

#[test]
fn o2_fires_on_success_without_an_effect() {
    let mut world = good();
    world.call_as("other", "acme/production/run_1/step_2", "acme", "agent", "fp-2").answer(
        "other",
        OutcomeStatus::Applied,
        None,
    );
    world.settled("acme/production/run_1/step_2", OutcomeStatus::Replayed, None);
    assert!(world.fired().contains(&"O2".to_owned()), "{:?}", world.fired());
}

#[test]
fn o3_fires_when_a_changed_request_is_not_rejected() {
    let mut world = good();
    world.call("changed", "fp-CHANGED").answer("changed", OutcomeStatus::Replayed, Some("ticket_1"));
    assert_eq!(world.fired(), ["O3"]);
    let mut world = good();
    let mut rejected = Outcome::rejected(ReasonCode::IdempotencyKeyReusedWithDifferentRequest, "mismatch");
    rejected.operation_key = Some("k".into());
    world.call("changed", "fp-CHANGED").answer_with("changed", rejected);
    assert_eq!(world.fired(), Vec::<String>::new(), "a rejected change is right");
    let mut world = good();
    world.call("late-change", "fp-CHANGED").answer("late-change", OutcomeStatus::Expired, Some("ticket_1"));
    assert_eq!(world.fired(), Vec::<String>::new(), "past retention, expired refuses too");
    let mut world = good();
    world.call("changed", "fp-CHANGED").answer("changed", OutcomeStatus::Applied, Some("ticket_1"));
    assert_eq!(world.fired(), ["O3"], "applied is never right for a changed request");
}

#[test]
fn o4_fires_on_success_without_a_receipt() {
    let mut world = World::default();
    world
        .call("first", "fp-1")
        .effect("ticket_1")
        .answer("first", OutcomeStatus::Applied, Some("ticket_1"))
        .settled(OP, OutcomeStatus::Replayed, Some("ticket_1"));
    assert_eq!(world.fired(), ["O4"]);
}

#[test]
fn o5_fires_on_an_effect_or_a_success_after_revocation() {
    let mut world = World::default();
    world
        .call("first", "fp-1")
        .push(EventKind::Revoked { actor: "agent".into(), tool: Some("tickets.create".into()) })
        .effect("ticket_1")
        .observed(OP, "ticket_1")
        .answer("first", OutcomeStatus::Applied, Some("ticket_1"))
        .call("retry", "fp-1")
        .answer("retry", OutcomeStatus::Replayed, Some("ticket_1"))
        .settled(OP, OutcomeStatus::Replayed, Some("ticket_1"));
    assert_eq!(world.fired(), ["O5"]);
}

#[test]
fn o5_judges_an_effect_by_when_its_request_left_the_worker() {
    let sent = |world: &mut World| {
        world.push(EventKind::DownstreamSent {
            worker: "worker-1".into(),
            origin: Some(OP.into()),
            method: "POST".into(),
            path: "/v1/tickets".into(),
            idempotency_key: None,
        });
    };
    let revoke = |world: &mut World| {
        world.push(EventKind::Revoked { actor: "agent".into(), tool: None });
    };
    let mut on_the_wire = World::default();
    on_the_wire.call("first", "fp-1");
    sent(&mut on_the_wire);
    revoke(&mut on_the_wire);
    on_the_wire.effect("ticket_1").settled(OP, OutcomeStatus::Rejected, None);
    assert_eq!(on_the_wire.fired(), Vec::<String>::new(), "a request already sent cannot be recalled");
    let mut sent_after = World::default();
    sent_after.call("first", "fp-1");
    revoke(&mut sent_after);
    sent(&mut sent_after);
    sent_after.effect("ticket_1").settled(OP, OutcomeStatus::Rejected, None);
    assert_eq!(sent_after.fired(), ["O5"]);
}

#[test]
fn o6_fires_when_an_operation_is_still_in_flight_after_settling() {
    let mut world = World::default();
    world.call("first", "fp-1").answer("first", OutcomeStatus::InFlight, None).settled(
        OP,
        OutcomeStatus::InFlight,
        None,
    );
    assert_eq!(world.fired(), ["O6"]);
    let mut world = World::default();
    world.call("first", "fp-1");
    let mut unknown = Outcome::new(OutcomeStatus::Unknown);
    unknown.next_action = NextAction::Poll;
    let label = format!("{FINAL_POLL_PREFIX}{OP}");
    world
        .settle()
        .push(EventKind::OperationQuery {
            label: label.clone(),
            kind: RequestKind::Poll,
            worker: "worker-1".into(),
            operation: OP.into(),
            tenant: "acme".into(),
            actor: "agent".into(),
        })
        .answer_with(&label, unknown);
    assert_eq!(world.fired(), ["O6"], "unknown must point at reconciliation");
    let mut world = World::default();
    world.call("first", "fp-1").settled(OP, OutcomeStatus::Unknown, None);
    assert_eq!(world.fired(), Vec::<String>::new(), "unknown with reconcile is allowed");
    let mut world = World::default();
    world.call("first", "fp-1").settle();
    assert_eq!(world.fired(), ["O6"], "a settled world whose final poll got no answer");
    let mut world = World::default();
    world.call("first", "fp-1");
    assert_eq!(world.fired(), Vec::<String>::new(), "a run stopped before settling is judged by its limit");
}

#[test]
fn o7_fires_on_a_new_effect_past_retention() {
    let mut world = good();
    world.effect_at(Some(OP), "acme", EffectKind::TicketCreated, "ticket_2", 120_000);
    assert_eq!(world.fired(), ["O1", "O7"]);
}

#[test]
fn o8_fires_on_a_replay_of_another_reference_or_result() {
    let mut world = good();
    world.effect_at(Some("acme/production/run_1/step_9"), "acme", EffectKind::TicketCreated, "ticket_5", 5);
    world.call("third", "fp-1").observed(OP, "ticket_5").answer(
        "third",
        OutcomeStatus::Replayed,
        Some("ticket_5"),
    );
    assert!(world.fired().contains(&"O8".to_owned()), "{:?}", world.fired());
    let mut world = World::default();
    let mut applied = Outcome::new(OutcomeStatus::Applied);
    applied.effect_reference = Some("ticket_1".into());
    applied.result = Some(serde_json::json!({"ticket_id": "ticket_1", "version": 1}));
    let mut replayed = applied.clone();
    replayed.status = OutcomeStatus::Replayed;
    replayed.result = Some(serde_json::json!({"succeeded": true}));
    world
        .call("first", "fp-1")
        .effect("ticket_1")
        .observed(OP, "ticket_1")
        .answer_with("first", applied)
        .call("second", "fp-1")
        .answer_with("second", replayed)
        .settled(OP, OutcomeStatus::Applied, Some("ticket_1"));
    assert_eq!(world.fired(), ["O8"]);
}

#[test]
fn o9_fires_when_an_outcome_reveals_another_tenants_effect() {
    let mut world = good();
    let globex = "globex/production/run_1/step_1";
    world
        .call_as("globex", globex, "globex", "agent", "fp-g")
        .observed(globex, "ticket_1")
        .answer("globex", OutcomeStatus::Replayed, Some("ticket_1"))
        .settled(globex, OutcomeStatus::Replayed, Some("ticket_1"));
    assert!(world.fired().contains(&"O9".to_owned()), "{:?}", world.fired());
}

#[test]
fn o10_fires_on_two_jobs_for_one_operation() {
    let mut world = good();
    world.effect_at(Some(OP), "acme", EffectKind::JobAccepted, "job_1", 1);
    world.effect_at(Some(OP), "acme", EffectKind::JobAccepted, "job_2", 2);
    assert_eq!(world.fired(), ["O10"]);
}

#[test]
fn o11_fires_on_an_update_applied_over_a_newer_version() {
    let op = "acme/production/run_1/close";
    let mut world = World::default();
    world.push(EventKind::CallSent {
        label: "close".into(),
        call_id: "call-close".into(),
        worker: "worker-1".into(),
        operation: op.into(),
        tenant: "acme".into(),
        actor: "agent".into(),
        tool: "tickets.set_status".into(),
        tool_version: "2026-08-18".into(),
        fingerprint: Some("fp-c".into()),
        expected_version: Some(1),
    });
    world.effect_at(Some(op), "acme", EffectKind::TicketStatusChanged, "ticket_1", 10);
    if let Some(effect) = world.ledger.last_mut() {
        effect.versions = Some(VersionChange { from: 2, to: 3, if_match: None });
    }
    world.settled(op, OutcomeStatus::Rejected, None);
    assert_eq!(world.fired(), ["O11"]);
    if let Some(effect) = world.ledger.last_mut() {
        effect.versions = Some(VersionChange { from: 1, to: 2, if_match: Some(1) });
    }
    assert_eq!(world.fired(), Vec::<String>::new());
}

#[test]
fn violations_name_oracle_operation_and_positions() {
    let mut world = good();
    world.effect("ticket_2");
    let contracts = ContractSet::builtin();
    let evidence = Evidence { history: &world.events, ledger: &world.ledger, contracts: &contracts };
    let violations = oracles::check(&evidence);
    assert_eq!(violations.len(), 1);
    let text = violations[0].to_string();
    assert!(text.starts_with("O1 single_effect [acme/production/run_1/step_1] at #2,#"), "{text}");
    assert!(text.contains("2 ticket_created effects"), "{text}");
}
