//! Workers that stop at the worst moments: after the claim, after the effect and before the
//! record, or too slowly. Recovery asks the downstream before acting, and a taken-over owner
//! cannot overwrite the new owner's record.

use std::rc::Rc;

use executor::RecordStatus;
use fake_downstream::{Disposition, IdempotencyMode};
use protocol::{ContractSet, NextAction, OutcomeStatus};
use serde_json::json;

use crate::support::{PausingGate, World, LEASE_MS, TICKET};

/// Runs `future` until the gate pauses it, then drops it: the worker crashed there.
async fn crash_at<F: std::future::Future>(gate: &PausingGate, future: F) {
    tokio::select! {
        _ = future => panic!("the worker was expected to pause"),
        () = gate.paused() => {}
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_crash_after_the_claim_is_recovered_by_resending_under_the_same_key() {
    let world = World::new().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at("leave claim");
    let doomed = world.worker_with_gate("worker-1", gate.clone());
    crash_at(&gate, doomed.call(world.call("tickets.create", "s", TICKET))).await;
    drop(doomed);
    assert_eq!(world.record("s").status, RecordStatus::Pending);
    assert!(world.ledger().is_empty());

    let survivor = world.worker("worker-2");
    let early = survivor.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(early.status, OutcomeStatus::InFlight, "the lease still holds: {early:?}");
    assert!(world.downstream.requests().is_empty(), "nothing is sent while the lease holds");

    world.advance_ms(LEASE_MS);
    let recovered = survivor.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(recovered.status, OutcomeStatus::Applied, "{recovered:?}");
    let ledger = world.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].idempotency_key.as_deref(), Some(World::key("s").as_str()));
    let journal = world.downstream.requests();
    assert!(journal[0].path.starts_with("/v1/receipts/"), "asked before acting: {journal:?}");
    assert_eq!(journal[1].path, "/v1/tickets");
    let findings: Vec<String> = world.reconciliations("s").into_iter().map(|row| row.finding).collect();
    assert_eq!(findings, ["no receipt for the key; resending with the same key"]);
}

#[tokio::test(flavor = "current_thread")]
async fn reconciling_an_abandoned_claim_without_a_receipt_marks_it_unknown() {
    let world = World::new().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at("leave claim");
    let doomed = world.worker_with_gate("worker-1", gate.clone());
    crash_at(&gate, doomed.call(world.call("tickets.create", "s", TICKET))).await;
    world.advance_ms(LEASE_MS);

    let worker = world.worker("worker-2");
    let polled = worker.poll(world.operation("s")).await;
    assert_eq!((polled.status, polled.next_action), (OutcomeStatus::Unknown, NextAction::Reconcile));
    assert_eq!(world.record("s").status, RecordStatus::Pending, "a poll changes nothing without a receipt");
    let reconciled = worker.reconcile(world.operation("s")).await;
    assert_eq!(reconciled.status, OutcomeStatus::Unknown, "{reconciled:?}");
    let record = world.record("s");
    assert_eq!((record.status, record.owner_token), (RecordStatus::Unknown, None));
    assert_eq!(world.reconciliations("s").len(), 1);
    assert!(world.operators.entries().is_empty(), "a retry can still resend it: not handed over");
    let mutating = world.downstream.requests().into_iter().filter(|request| request.method != "GET").count();
    assert_eq!(mutating, 0, "neither poll nor reconcile sent the request (it is not kept)");

    // The agent retries the step with its arguments: now the request can be resent safely.
    let retried = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(retried.status, OutcomeStatus::Applied, "{retried:?}");
    assert_eq!(world.ledger().len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_crash_after_the_effect_and_before_the_record_is_replayed_from_the_receipt() {
    let world = World::new().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at("enter complete");
    let doomed = world.worker_with_gate("worker-1", gate.clone());
    crash_at(&gate, doomed.call(world.call("tickets.create", "s", TICKET))).await;
    drop(doomed);
    assert_eq!(world.ledger().len(), 1);
    assert_eq!(world.record("s").status, RecordStatus::Pending);

    world.advance_ms(LEASE_MS);
    let recovered = world.worker("worker-2").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(recovered.status, OutcomeStatus::Replayed, "{recovered:?}");
    assert_eq!(recovered.effect_reference.as_deref(), Some("ticket_1"));
    assert_eq!(world.ledger().len(), 1);
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 1, "recovery did not send again");
    assert_eq!(world.record("s").status, RecordStatus::Applied);
}

#[tokio::test(flavor = "current_thread")]
async fn a_taken_over_owner_cannot_overwrite_the_new_owners_record() {
    let world = World::new().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at("enter complete");
    let slow = world.worker_with_gate("worker-a", gate.clone());
    let late = slow.call(world.call("tickets.create", "s", TICKET));
    let takeover = async {
        gate.paused().await;
        world.advance_ms(LEASE_MS + 1);
        let recovered = world.worker("worker-b").call(world.call("tickets.create", "s", TICKET)).await;
        let after_b = world.record("s");
        gate.resume();
        (recovered, after_b)
    };
    let (late, (recovered, after_b)) = tokio::join!(late, takeover);

    assert_eq!(recovered.status, OutcomeStatus::Replayed, "{recovered:?}");
    assert_eq!(late.status, OutcomeStatus::Replayed, "A lost the compare-and-set: {late:?}");
    assert_eq!(late.effect_reference, recovered.effect_reference);
    let record = world.record("s");
    assert_eq!(record, after_b, "A's completion changed nothing");
    // B completed from the receipt, which carries the answer the downstream committed; A
    // answers from B's record.
    assert_eq!(
        record.response_json.as_deref(),
        Some(r#"{"status":"open","ticket_id":"ticket_1","version":1}"#)
    );
    assert_eq!(late.result, Some(json!({"ticket_id": "ticket_1", "version": 1, "status": "open"})));
    assert_eq!(world.ledger().len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn without_an_honoured_key_an_abandoned_claim_is_never_resent() {
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities("tickets", false, true);
    let mut config = World::builder_downstream_config();
    config.tickets.idempotency = IdempotencyMode::Ignored;
    let world = World::builder().contracts(contracts).downstream(config).build().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at("leave claim");
    let doomed = world.worker_with_gate("worker-1", gate.clone());
    crash_at(&gate, doomed.call(world.call("tickets.create", "s", TICKET))).await;
    world.advance_ms(LEASE_MS);

    let outcome = world.worker("worker-2").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(
        (outcome.status, outcome.next_action),
        (OutcomeStatus::Unknown, NextAction::Reconcile),
        "{outcome:?}"
    );
    assert!(world.ledger().is_empty());
    assert!(world.requests_to("POST", "/v1/tickets").is_empty(), "no blind resend");
    let findings: Vec<String> = world.reconciliations("s").into_iter().map(|row| row.finding).collect();
    assert_eq!(findings, ["no receipt for the key; the effect cannot be proved or safely repeated"]);
    assert_eq!(world.record("s").status, RecordStatus::Unknown);
    // Nothing the executor or the agent can do settles it: handed over to people, once.
    let filed = world.operators.entries();
    assert_eq!(filed.len(), 1, "{filed:?}");
    assert_eq!(
        (filed[0].tenant.as_str(), filed[0].operation_key.as_str()),
        ("acme", World::key("s").as_str())
    );
    assert_eq!(filed[0].finding, findings[0]);
    // A retry looks again (the effect may have committed since), finds nothing again, and
    // hands over again: each entry is one inconclusive look.
    let again = world.worker("worker-2").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(again.status, OutcomeStatus::Unknown);
    assert!(world.requests_to("POST", "/v1/tickets").is_empty(), "still no blind resend");
    assert_eq!(world.operators.entries().len(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn without_receipts_an_honoured_key_lets_recovery_resend_and_the_downstream_replays() {
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities("tickets", true, false);
    let mut config = World::builder_downstream_config();
    config.tickets.receipts = false;
    let world = World::builder().contracts(contracts).downstream(config).build().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at("enter complete");
    let doomed = world.worker_with_gate("worker-1", gate.clone());
    crash_at(&gate, doomed.call(world.call("tickets.create", "s", TICKET))).await;
    world.advance_ms(LEASE_MS);

    let outcome = world.worker("worker-2").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(outcome.status, OutcomeStatus::Replayed, "{outcome:?}");
    assert_eq!(outcome.result, Some(json!({"ticket_id": "ticket_1", "version": 1, "status": "open"})));
    assert_eq!(world.ledger().len(), 1);
    let creates = world.requests_to("POST", "/v1/tickets");
    assert_eq!(creates.len(), 2);
    assert_eq!(creates[1].disposition, Disposition::Replayed);
    assert!(world.requests_to("GET", "/v1/receipts/*").is_empty());
}
