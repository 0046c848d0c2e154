//! The executor's own reconciliation: an operation left `unknown`, or a claim whose owner
//! crashed, is looked up in the downstream's system of record without waiting for the agent,
//! a bounded number of times, and never resent without the request.

use std::rc::Rc;

use executor::RecordStatus;
use fake_downstream::{FaultAction, FaultRule, IdempotencyMode, RuleMatch, Service, ServiceConfig, Times};
use protocol::{ContractSet, OutcomeStatus};

use crate::support::{eventually, PausingGate, World, LEASE_MS, TICKET};

fn on(method: &str, path: &str) -> RuleMatch {
    RuleMatch { method: Some(method.into()), path: Some(path.into()), ..RuleMatch::default() }
}

fn receipt_lookups(world: &World) -> usize {
    world.downstream.requests().iter().filter(|request| request.path.starts_with("/v1/receipts/")).count()
}

#[tokio::test(flavor = "current_thread")]
async fn an_unknown_operation_is_settled_from_the_receipt_without_the_agent() {
    let world = World::new().await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::CommitThenDrop));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");
    assert_eq!(receipt_lookups(&world), 0, "nothing is looked up while answering");

    world.run_background().await;

    let record = world.record("s");
    assert_eq!(record.status, RecordStatus::Applied, "{record:?}");
    assert_eq!(record.effect_reference.as_deref(), Some("ticket_1"));
    assert_eq!(receipt_lookups(&world), 1);
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 1, "found, not resent");
    // It slept until the record was due, instead of reading the store again and again.
    let reads = world.gate.boundaries().iter().filter(|b| *b == "enter unsettled").count();
    assert!(reads <= 4, "the sweep read the store {reads} times to wait a second");
    let polled = worker.poll(world.operation("s")).await;
    assert_eq!(polled.status, OutcomeStatus::Replayed, "{polled:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_crashed_owners_claim_is_looked_up_once_its_lease_ran_out() {
    let world = World::new().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at("enter complete");
    let doomed = world.worker_with_gate("worker-1", gate.clone());
    tokio::select! {
        _ = doomed.call(world.call("tickets.create", "s", TICKET)) => panic!("the worker was expected to pause"),
        () = gate.paused() => {}
    }
    drop(doomed);
    // The earlier incarnation's background work died with it.
    world.drop_background();
    assert_eq!(world.record("s").status, RecordStatus::Pending);

    let _restarted = world.worker("worker-1");
    let started_at = world.now_ms();
    world.run_background().await;

    assert!(world.now_ms() >= started_at + LEASE_MS - 1_000, "it waited for the lease");
    let record = world.record("s");
    assert_eq!(
        (record.status, record.effect_reference.as_deref()),
        (RecordStatus::Applied, Some("ticket_1"))
    );
    assert_eq!(world.ledger().len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn without_a_receipt_an_honoured_key_lets_it_resend_the_kept_request() {
    // The request is swallowed and never answered: a short downstream timeout.
    let world = World::builder().timeout(std::time::Duration::from_millis(200)).build().await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::DropBeforeCommit));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");
    assert!(world.record("s").request_json.is_some(), "the request is kept while the outcome is open");

    world.run_background().await;

    assert_eq!(receipt_lookups(&world), 1, "asked first");
    let posts = world.requests_to("POST", "/v1/tickets");
    assert_eq!(posts.len(), 2, "then resent");
    assert_eq!(posts[1].idempotency_key.as_deref(), Some(World::key("s").as_str()), "under the same key");
    let record = world.record("s");
    assert_eq!(
        (record.status, record.effect_reference.as_deref()),
        (RecordStatus::Applied, Some("ticket_1"))
    );
    assert_eq!(record.request_json, None, "a settled operation keeps no request");
    assert_eq!(world.ledger().len(), 1);
}

/// A call whose downstream answer is slower than its lease still owns its claim as far as its
/// own worker is concerned: the worker's reconciliation (running for another operation) does
/// not take it over, look it up or resend it while the call waits, and the call records the
/// answer itself. Taking it over raced the call's own outcome in real time (CI saw S12's
/// swallowed call answered `replayed`, its resend committed before the answer).
#[tokio::test(flavor = "current_thread")]
async fn its_own_reconciliation_leaves_a_claim_alone_while_its_call_still_waits() {
    let world = World::builder().timeout(std::time::Duration::from_secs(10)).build().await;
    // "a" is left unknown, which starts the worker's reconciliation.
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::CommitThenDrop));
    let worker = world.worker("worker-1");
    let a = worker.call(world.call("tickets.create", "a", TICKET)).await;
    assert_eq!(a.status, OutcomeStatus::Unknown, "{a:?}");
    // "s" is held at the downstream, before its commit, past its lease.
    let hold = world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::Hold));
    let slow = worker.call(world.call("tickets.create", "s", TICKET));
    let meanwhile = async {
        eventually("the call's request is held", || world.downstream.held(hold) == 1).await;
        let owner = world.record("s").owner_token;
        world.advance_ms(LEASE_MS + 1);
        world.run_background().await;
        let after_sweep = world.record("s");
        world.downstream.release(hold).unwrap();
        (owner, after_sweep)
    };
    let (s, (owner, after_sweep)) = tokio::join!(slow, meanwhile);

    assert_eq!(world.record("a").status, RecordStatus::Applied, "the sweep did run: it settled a");
    assert_eq!(after_sweep.status, RecordStatus::Pending, "{after_sweep:?}");
    assert_eq!(after_sweep.owner_token, owner, "the sweep did not take the call's claim over");
    let key = World::key("s");
    let s_lookups = world.requests_to("GET", &format!("/v1/receipts/{}*", key.replace(':', "%3A")));
    assert!(s_lookups.is_empty(), "nothing looked s up while its call waited: {s_lookups:?}");
    let s_posts: Vec<_> = world
        .requests_to("POST", "/v1/tickets")
        .into_iter()
        .filter(|r| r.idempotency_key.as_deref() == Some(key.as_str()))
        .collect();
    assert_eq!(s_posts.len(), 1, "s was sent once, by its call");
    assert_eq!(
        (s.status, s.effect_reference.as_deref()),
        (OutcomeStatus::Applied, Some("ticket_2")),
        "{s:?}"
    );
    assert_eq!(world.ledger().len(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn with_an_ignored_key_it_gives_up_after_three_lookups_and_never_resends() {
    let mut config = World::builder_downstream_config();
    config.set_service(
        Service::Tickets,
        ServiceConfig { idempotency: IdempotencyMode::Ignored, receipts: true },
    );
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities("tickets", false, true);
    let world = World::builder()
        .downstream(config)
        .contracts(contracts)
        .timeout(std::time::Duration::from_millis(200))
        .build()
        .await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::DropBeforeCommit));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");

    world.run_background().await;

    assert_eq!(receipt_lookups(&world), 3, "three tries, then it is the agent's or an operator's");
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 1, "an ignored key is never resent");
    assert_eq!(world.record("s").status, RecordStatus::Unknown);
    assert!(world.ledger().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn an_operation_without_any_lookup_is_left_to_the_agent() {
    let mut config = World::builder_downstream_config();
    config.set_service(
        Service::Tickets,
        ServiceConfig { idempotency: IdempotencyMode::Ignored, receipts: false },
    );
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities("tickets", false, false);
    let world = World::builder().downstream(config).contracts(contracts).build().await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::CommitThenDrop));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");

    world.run_background().await;

    assert_eq!(world.downstream.requests().len(), 1, "nothing to ask: no request after the first");
    assert_eq!(world.record("s").status, RecordStatus::Unknown);
}

/// Lookups that keep failing (the receipt service is down) settle nothing: each operation is
/// tried three times and then handed over to people, once. Two operations half a
/// try apart keep the sweep running after the first one was handed over, so a sweep that
/// counts its tries wrongly tries again or files again.
#[tokio::test(flavor = "current_thread")]
async fn each_operation_the_lookups_cannot_settle_is_tried_three_times_and_handed_over_once() {
    let mut config = World::builder_downstream_config();
    config.set_service(
        Service::Tickets,
        ServiceConfig { idempotency: IdempotencyMode::Ignored, receipts: true },
    );
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities("tickets", false, true);
    let world = World::builder()
        .downstream(config)
        .contracts(contracts)
        .timeout(std::time::Duration::from_millis(200))
        .build()
        .await;
    let swallowed = FaultRule {
        times: Times::Count(2),
        ..FaultRule::once(on("POST", "/v1/tickets"), FaultAction::DropBeforeCommit)
    };
    world.downstream.install_fault(swallowed);
    world.downstream.install_fault(FaultRule {
        times: Times::Always,
        ..FaultRule::once(on("GET", "/v1/receipts/*"), FaultAction::CommitThenError(503))
    });
    let worker = world.worker("worker-1");
    assert_eq!(worker.call(world.call("tickets.create", "a", TICKET)).await.status, OutcomeStatus::Unknown);
    world.advance_ms(500);
    assert_eq!(worker.call(world.call("tickets.create", "b", TICKET)).await.status, OutcomeStatus::Unknown);

    // A sweep that never stops trying is caught here rather than hanging the test.
    let bound = std::time::Duration::from_secs(30);
    tokio::time::timeout(bound, world.run_background())
        .await
        .expect("the sweep ends once it has handed both over");

    let filed = world.operators.entries();
    for step in ["a", "b"] {
        let key = World::key(step);
        let lookups = world.requests_to("GET", &format!("/v1/receipts/{}*", key.replace(':', "%3A")));
        assert_eq!(lookups.len(), 3, "step {step}: three tries, no more");
        let handed_over = filed.iter().filter(|entry| entry.operation_key == key).count();
        assert_eq!(handed_over, 1, "step {step} is handed over once: {filed:?}");
        assert_eq!(world.record(step).status, RecordStatus::Unknown);
    }
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 2, "an ignored key is never resent");
}

/// Where the downstream offers no way to find out, the operation is handed over when it is
/// marked `unknown`, and that hand-over stands: the agent's retry and the worker's own sweep
/// answer `unknown` again without filing it a second time (or taking it over to try).
#[tokio::test(flavor = "current_thread")]
async fn with_no_way_to_find_out_a_retry_does_not_hand_the_operation_over_again() {
    let mut config = World::builder_downstream_config();
    config.set_service(
        Service::Tickets,
        ServiceConfig { idempotency: IdempotencyMode::Ignored, receipts: false },
    );
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities("tickets", false, false);
    let world = World::builder().downstream(config).contracts(contracts).build().await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::CommitThenDrop));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");
    assert_eq!(world.operators.entries().len(), 1, "handed over when it was marked");
    let marked_at = world.record("s").updated_at_ms;

    world.advance_ms(LEASE_MS);
    let retry = world.worker("worker-2").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(retry.status, OutcomeStatus::Unknown, "{retry:?}");
    world.run_background().await;

    assert_eq!(world.operators.entries().len(), 1, "{:?}", world.operators.entries());
    assert_eq!(world.record("s").updated_at_ms, marked_at, "nobody took it over to try again");
    assert_eq!(world.downstream.requests().len(), 1);
}

/// The request a record kept is resent only while it is still the request the record was made
/// for. Here the tool's contract changed under the record (a redeployment under the same
/// version that fingerprints the call differently): the kept call still derives the record's
/// key, but no longer its fingerprint, so the sweep looks the receipt up and does not resend.
#[tokio::test(flavor = "current_thread")]
async fn a_kept_request_that_no_longer_matches_its_record_is_not_resent() {
    let mut world = World::builder().timeout(std::time::Duration::from_millis(200)).build().await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::DropBeforeCommit));
    let first = world.worker("worker-1").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");
    // Worker-1 is gone with its background work; the next worker runs under changed contracts.
    world.drop_background();
    let mut contracts = ContractSet::builtin();
    let mut create = contracts.get("tickets.create", "2026-08-18").unwrap().clone();
    create.material.retain(|field| field != "body");
    contracts.insert(create);
    world.contracts = std::sync::Arc::new(contracts);

    let _restarted = world.worker("worker-2");
    world.run_background().await;

    assert!(receipt_lookups(&world) >= 1, "it looked the receipt up");
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 1, "the kept request was not resent");
    assert!(world.ledger().is_empty());
    assert_eq!(world.record("s").status, RecordStatus::Unknown);
}
