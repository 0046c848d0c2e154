//! Ambiguous answers: lost, failed, garbled and missing responses after (or before) the
//! downstream committed. Never `applied` without a receipt; recovery replays from the
//! downstream's receipt or resends only under the same honoured key.

use std::time::Duration;

use executor::RecordStatus;
use fake_downstream::{FaultAction, FaultRule, RuleMatch};
use protocol::{NextAction, OutcomeStatus};

use crate::support::{eventually, World, CHARGE, LEASE_MS, TICKET};

fn on(method: &str, path: &str) -> RuleMatch {
    RuleMatch { method: Some(method.into()), path: Some(path.into()), ..RuleMatch::default() }
}

#[tokio::test(flavor = "current_thread")]
async fn a_response_lost_after_commit_is_unknown_then_replayed_from_the_receipt() {
    let world = World::new().await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::CommitThenDrop));
    let worker = world.worker("worker-1");

    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");
    assert_eq!(first.next_action, NextAction::Reconcile);
    assert!(!first.safe_to_repeat);
    assert_eq!(world.ledger().len(), 1, "the downstream committed");
    assert_eq!(world.record("s").status, RecordStatus::Unknown);
    assert_eq!(world.reconciliations("s").len(), 1);

    let retry = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(retry.status, OutcomeStatus::Replayed, "{retry:?}");
    assert_eq!(retry.effect_reference.as_deref(), Some(world.ledger()[0].effect_reference.as_str()));
    assert_eq!(world.ledger().len(), 1);
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 1, "no blind second call");
    let findings: Vec<String> = world.reconciliations("s").into_iter().map(|row| row.finding).collect();
    assert!(findings.iter().any(|finding| finding == "receipt found: ticket_1"), "{findings:?}");
    assert_eq!(world.record("s").status, RecordStatus::Applied);
}

#[tokio::test(flavor = "current_thread")]
async fn a_5xx_after_commit_is_unknown_and_reconcile_settles_it() {
    let world = World::new().await;
    world
        .downstream
        .install_fault(FaultRule::once(on("POST", "/v1/charges"), FaultAction::CommitThenError(503)));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("payments.charge", "charge", CHARGE)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");

    let reconciled = world.worker("worker-2").reconcile(world.operation("charge")).await;
    assert_eq!(reconciled.status, OutcomeStatus::Replayed, "{reconciled:?}");
    assert_eq!(reconciled.effect_reference.as_deref(), Some("charge_1"));
    assert_eq!(world.ledger().len(), 1);
    assert_eq!(world.requests_to("POST", "/v1/charges").len(), 1);
    let again = worker.call(world.call("payments.charge", "charge", CHARGE)).await;
    assert_eq!(
        (again.status, again.effect_reference.as_deref()),
        (OutcomeStatus::Replayed, Some("charge_1"))
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_garbled_body_is_unknown_and_a_poll_settles_it_without_resending() {
    let world = World::new().await;
    world
        .downstream
        .install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::CommitThenMalformed));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");
    assert_eq!(first.effect_reference, None);

    let polled = worker.poll(world.operation("s")).await;
    assert_eq!(
        (polled.status, polled.effect_reference.as_deref()),
        (OutcomeStatus::Replayed, Some("ticket_1"))
    );
    assert_eq!(world.ledger().len(), 1);
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_timeout_is_never_success_and_recovery_makes_exactly_one_effect() {
    let world = World::builder().timeout(Duration::from_millis(200)).build().await;
    let hold = world.downstream.install_fault(FaultRule::once(on("POST", "/v1/charges"), FaultAction::Hold));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("payments.charge", "charge", CHARGE)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");
    assert!(world.ledger().is_empty(), "held before commit");
    world.downstream.release(hold).unwrap();
    // The held request may still commit after its client went away; give it the chance.
    tokio::time::sleep(Duration::from_millis(50)).await;

    let retry = worker.call(world.call("payments.charge", "charge", CHARGE)).await;
    assert!(retry.status.claims_success(), "{retry:?}");
    let ledger = world.ledger();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(retry.effect_reference.as_deref(), Some(ledger[0].effect_reference.as_str()));
}

#[tokio::test(flavor = "current_thread")]
async fn a_slow_owner_loses_its_claim_but_not_the_single_effect() {
    // Owner A's request is held at the downstream past A's lease. B recovers: no receipt yet,
    // so it resends under the same key and the downstream answers 409 (still in progress).
    // A's late answer cannot complete a claim it no longer owns; C later finds the receipt.
    let world = World::builder().timeout(Duration::from_secs(10)).build().await;
    let hold = world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::Hold));
    let slow = world.worker("worker-a");
    let first = slow.call(world.call("tickets.create", "s", TICKET));
    let others = async {
        eventually("the first request is held", || world.downstream.held(hold) == 1).await;
        world.advance_ms(LEASE_MS + 1);
        let recovering = world.worker("worker-b").call(world.call("tickets.create", "s", TICKET)).await;
        let owner_b = world.record("s").owner_token;
        world.downstream.release(hold).unwrap();
        (recovering, owner_b)
    };
    let (first, (recovering, owner_b)) = tokio::join!(first, others);

    assert_eq!(recovering.status, OutcomeStatus::InFlight, "{recovering:?}");
    assert!(owner_b.as_deref().is_some_and(|owner| owner.starts_with("worker-b-")), "{owner_b:?}");
    assert_eq!(first.status, OutcomeStatus::InFlight, "A lost its claim: {first:?}");
    let record = world.record("s");
    assert_eq!((record.status, record.owner_token), (RecordStatus::Pending, owner_b));
    assert_eq!(world.ledger().len(), 1);
    let key = World::key("s");
    let conflicts: Vec<_> =
        world.requests_to("POST", "/v1/tickets").into_iter().filter(|r| r.status == Some(409)).collect();
    assert_eq!(conflicts.len(), 1, "B's resend carried the same key");
    assert_eq!(conflicts[0].idempotency_key.as_deref(), Some(key.as_str()));

    world.advance_ms(LEASE_MS + 1);
    let settled = world.worker("worker-c").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(
        (settled.status, settled.effect_reference.as_deref()),
        (OutcomeStatus::Replayed, Some("ticket_1"))
    );
    assert_eq!(world.ledger().len(), 1);
}

/// The downstream timeout the executor was configured with is the one that counts: an answer
/// that comes later is `unknown`, even one the default timeout would have waited for.
#[tokio::test(flavor = "current_thread")]
async fn the_configured_downstream_timeout_decides_when_an_answer_is_too_late() {
    let world = World::builder().timeout(Duration::from_millis(200)).build().await;
    let late = FaultAction::CommitThenDelay(Duration::from_secs(1));
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), late));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");
    assert_eq!(world.ledger().len(), 1, "it committed; the answer was late");
}
