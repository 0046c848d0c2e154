//! Keys that arrive after retention meet a tombstone: `expired`, never a new effect.

use std::rc::Rc;

use executor::RecordStatus;
use protocol::{NextAction, OutcomeStatus};

use crate::support::{PausingGate, World, CHARGE, LEASE_MS, RETENTION_MS, TICKET};

#[tokio::test(flavor = "current_thread")]
async fn a_late_duplicate_meets_a_tombstone_and_makes_no_new_effect() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    let fingerprint = world.record("s").request_fingerprint;

    world.advance_ms(RETENTION_MS - 1);
    let still = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(still.status, OutcomeStatus::Replayed, "one millisecond before retention ends");

    world.advance_ms(1);
    let late = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(late.status, OutcomeStatus::Expired, "{late:?}");
    assert_eq!(late.next_action, NextAction::InspectOperation);
    assert_eq!(late.effect_reference, first.effect_reference, "the tombstone keeps the reference");
    let record = world.record("s");
    assert_eq!(record.status, RecordStatus::Tombstone);
    assert_eq!(record.response_json, None);
    assert_eq!(record.request_fingerprint, fingerprint);

    let changed = r#"{"queue":"support","subject":"Another","body":"b"}"#;
    let late_changed = worker.call(world.call("tickets.create", "s", changed)).await;
    assert_eq!(late_changed.status, OutcomeStatus::Expired);
    assert_eq!(worker.poll(world.operation("s")).await.status, OutcomeStatus::Expired);
    assert_eq!(world.ledger().len(), 1);
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_reconcile_first_contract_asks_for_the_receipt_before_answering_expired() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("payments.charge", "charge", CHARGE)).await;
    world.advance_ms(RETENTION_MS);
    let late = worker.call(world.call("payments.charge", "charge", CHARGE)).await;
    assert_eq!(late.status, OutcomeStatus::Expired, "{late:?}");
    assert_eq!(late.effect_reference, first.effect_reference);
    let findings: Vec<String> = world.reconciliations("charge").into_iter().map(|row| row.finding).collect();
    assert_eq!(findings, ["late arrival after retention: the downstream has receipt charge_1"]);
    assert_eq!(world.requests_to("POST", "/v1/charges").len(), 1);
    assert_eq!(world.ledger().len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_operation_past_retention_is_expired_too() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let lower_case = r#"{"customer":"cus_1","amount_minor":500,"currency":"eur"}"#;
    worker.call(world.call("payments.charge", "charge", lower_case)).await;
    world.advance_ms(RETENTION_MS);
    let late = worker.call(world.call("payments.charge", "charge", lower_case)).await;
    assert_eq!(late.status, OutcomeStatus::Expired);
    assert_eq!(world.record("charge").status, RecordStatus::Tombstone);
    assert_eq!(world.requests_to("POST", "/v1/charges").len(), 1);
    assert!(world.ledger().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn an_abandoned_claim_is_not_retired_by_retention() {
    let world = World::new().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at("leave claim");
    let doomed = world.worker_with_gate("worker-1", gate.clone());
    tokio::select! {
        _ = doomed.call(world.call("tickets.create", "s", TICKET)) => panic!("expected a pause"),
        () = gate.paused() => {}
    }
    world.advance_ms(RETENTION_MS + LEASE_MS);
    let recovered = world.worker("worker-2").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(recovered.status, OutcomeStatus::Applied, "pending is not terminal: {recovered:?}");
    assert_eq!(world.ledger().len(), 1);
}
