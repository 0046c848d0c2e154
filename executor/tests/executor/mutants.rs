//! The mutant zoo (`executor::mutants`) against the real fake downstream: each experiment runs
//! the reference and one mutant under the same conditions, and the mutant's one defect shows
//! on the ledger (or in its answers) where the reference's does not. The strategies come from
//! the zoo's registry, the same values its factories use.

use std::rc::Rc;

use executor::{mutants, RecordStatus, StoreLocation, Strategies};
use fake_downstream::{
    EffectKind, FaultAction, FaultRule, IdempotencyMode, RuleMatch, Service, ServiceConfig,
};
use protocol::{Consumed, ContractSet, OutcomeStatus, ReasonCode, WebhookAck, WebhookEvent};
use serde_json::json;

use crate::support::{
    PausingGate, World, WorldBuilder, CHARGE, JOB, LEASE_MS, MESSAGE, RETENTION_MS, TICKET,
};

fn zoo(name: &str) -> fn() -> Strategies {
    mutants::find(name).unwrap_or_else(|| panic!("{name} is in the zoo")).strategies
}

/// A world running `strategies` whose `ignoring` services record but ignore idempotency keys
/// (receipts still answer), with contracts that say so.
fn builder(strategies: fn() -> Strategies, ignoring: &[Service]) -> WorldBuilder {
    let mut contracts = ContractSet::builtin();
    let mut config = World::builder_downstream_config();
    for service in ignoring {
        contracts.set_capabilities(service.as_str(), false, true);
        config.set_service(*service, ServiceConfig { idempotency: IdempotencyMode::Ignored, receipts: true });
    }
    World::builder().contracts(contracts).downstream(config).strategies(strategies)
}

fn on(method: &str, path: &str) -> RuleMatch {
    RuleMatch { method: Some(method.into()), path: Some(path.into()), ..RuleMatch::default() }
}

/// Runs `future` until the gate pauses it, then drops it: the worker crashed there.
async fn crash_at<F: std::future::Future>(gate: &PausingGate, future: F) {
    tokio::select! {
        _ = future => panic!("the worker was expected to pause"),
        () = gate.paused() => {}
    }
}

// ----------------------------------------------------------------------------- M01

async fn two_steps_same_arguments(strategies: fn() -> Strategies) -> ((OutcomeStatus, OutcomeStatus), usize) {
    let world = builder(strategies, &[]).build().await;
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "record_issue", TICKET)).await;
    let second = worker.call(world.call("tickets.create", "record_issue_again", TICKET)).await;
    ((first.status, second.status), world.ledger().len())
}

#[tokio::test(flavor = "current_thread")]
async fn m01_args_hash_as_key_replays_a_deliberate_second_action() {
    let applied = OutcomeStatus::Applied;
    assert_eq!(two_steps_same_arguments(Strategies::reference).await, ((applied, applied), 2));
    assert_eq!(
        two_steps_same_arguments(zoo("args_hash_as_key")).await,
        ((applied, OutcomeStatus::Replayed), 1)
    );
}

// ----------------------------------------------------------------------------- M02

async fn charge_from_two_workers(builder: WorldBuilder) -> (Vec<OutcomeStatus>, usize) {
    let world = builder.build().await;
    let mut statuses = Vec::new();
    // worker-1, then worker-2 (another host), then worker-1 again after a restart.
    for name in ["worker-1", "worker-2", "worker-1"] {
        statuses.push(world.worker(name).call(world.call("payments.charge", "charge", CHARGE)).await.status);
    }
    (statuses, world.effects_of(EffectKind::ChargeCreated).len())
}

#[tokio::test(flavor = "current_thread")]
async fn m02_in_memory_claims_are_lost_on_restart_and_invisible_to_other_workers() {
    let replayed = OutcomeStatus::Replayed;
    let reference = charge_from_two_workers(builder(Strategies::reference, &[Service::Charges])).await;
    assert_eq!(reference, (vec![OutcomeStatus::Applied, replayed, replayed], 1));
    let in_memory = builder(zoo("in_memory_claims"), &[Service::Charges]).store(StoreLocation::PrivateMemory);
    let (statuses, charges) = charge_from_two_workers(in_memory).await;
    assert_eq!(statuses, vec![OutcomeStatus::Applied; 3], "every worker incarnation claims afresh");
    assert_eq!(charges, 3);
    let factory = mutants::in_memory_claims().unwrap();
    assert_eq!(factory.location(), &StoreLocation::PrivateMemory, "the registry's factory is the same");
}

// ----------------------------------------------------------------------------- M03

/// Worker A pauses at `pause_at` in its claim; worker B calls the same step; A goes on.
async fn race(strategies: fn() -> Strategies, pause_at: &str) -> (World, OutcomeStatus, OutcomeStatus) {
    let world = builder(strategies, &[Service::Tickets]).build().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at(pause_at);
    let first_worker = world.worker_with_gate("worker-a", gate.clone());
    let second_worker = world.worker("worker-b");
    let first = first_worker.call(world.call("tickets.create", "s", TICKET));
    let second = async {
        gate.paused().await;
        let outcome = second_worker.call(world.call("tickets.create", "s", TICKET)).await;
        gate.resume();
        outcome
    };
    let (first, second) = tokio::join!(first, second);
    (world, first.status, second.status)
}

#[tokio::test(flavor = "current_thread")]
async fn m03_a_read_then_insert_claim_makes_two_effects_where_the_atomic_claim_makes_one() {
    // A has read "no record" and not inserted yet.
    let (world, first, second) = race(zoo("read_then_insert"), "leave load").await;
    assert_eq!(second, OutcomeStatus::Applied);
    // A's completion loses the compare-and-set to B's record, but only after its second
    // effect happened: the store's CAS cannot undo a claim that was never exclusive.
    assert_eq!(first, OutcomeStatus::Replayed);
    assert_eq!(world.ledger().len(), 2, "the defect is visible on the ledger");

    // The same moment in the reference: right after its one atomic claim.
    let (world, first, second) = race(Strategies::reference, "leave claim").await;
    assert_eq!(second, OutcomeStatus::InFlight, "B finds A's claim");
    assert_eq!(first, OutcomeStatus::Applied);
    assert_eq!(world.ledger().len(), 1);
}

// ----------------------------------------------------------------------------- M04, M13, M14

const TICKET_CHANGED: &str =
    r#"{"queue":"support","subject":"Refund request","body":"Customer asks to close the account."}"#;
const TICKET_REORDERED: &str =
    r#"{ "body" : "Customer reports a duplicate charge.", "subject" : "Refund request" }"#;

/// A ticket, then the same step with `again`; the second answer and the tickets made.
async fn same_step_again(strategies: fn() -> Strategies, again: &str) -> (protocol::Outcome, usize) {
    let world = builder(strategies, &[Service::Tickets]).build().await;
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Applied, "{first:?}");
    let second = worker.call(world.call("tickets.create", "s", again)).await;
    (second, world.ledger().len())
}

#[tokio::test(flavor = "current_thread")]
async fn m04_no_fingerprint_replays_a_changed_request_as_if_it_were_done() {
    let (reference, tickets) = same_step_again(Strategies::reference, TICKET_CHANGED).await;
    assert_eq!(
        (reference.status, reference.reason, tickets),
        (OutcomeStatus::Rejected, Some(ReasonCode::IdempotencyKeyReusedWithDifferentRequest), 1)
    );
    let (mutant, tickets) = same_step_again(zoo("no_fingerprint"), TICKET_CHANGED).await;
    assert_eq!(
        (mutant.status, mutant.effect_reference.as_deref(), tickets),
        (OutcomeStatus::Replayed, Some("ticket_1"), 1)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn m13_raw_json_fingerprint_rejects_an_equivalent_request() {
    let (reference, _) = same_step_again(Strategies::reference, TICKET_REORDERED).await;
    assert_eq!(
        (reference.status, reference.effect_reference.as_deref()),
        (OutcomeStatus::Replayed, Some("ticket_1"))
    );
    let (mutant, tickets) = same_step_again(zoo("raw_json_fingerprint"), TICKET_REORDERED).await;
    assert_eq!(
        (mutant.status, mutant.reason, tickets),
        (OutcomeStatus::Rejected, Some(ReasonCode::IdempotencyKeyReusedWithDifferentRequest), 1)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn m14_newest_payload_wins_applies_the_changed_request_under_the_same_key() {
    let (mutant, tickets) = same_step_again(zoo("newest_payload_wins"), TICKET_CHANGED).await;
    assert_eq!(
        (mutant.status, mutant.effect_reference.as_deref()),
        (OutcomeStatus::Applied, Some("ticket_2"))
    );
    assert_eq!(tickets, 2, "one key, two effects");
    let (reference, tickets) = same_step_again(Strategies::reference, TICKET_CHANGED).await;
    assert_eq!((reference.status, tickets), (OutcomeStatus::Rejected, 1));
}

// ----------------------------------------------------------------------------- M05, M06, M10

/// The first ticket request commits and its connection drops (or `fault` happens instead);
/// then the same step is retried. Both answers, the world.
async fn lost_answer_then_retry(
    strategies: fn() -> Strategies,
    fault: FaultAction,
) -> (World, OutcomeStatus, OutcomeStatus) {
    let world = builder(strategies, &[]).build().await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), fault));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    let retry = worker.call(world.call("tickets.create", "s", TICKET)).await;
    (world, first.status, retry.status)
}

#[tokio::test(flavor = "current_thread")]
async fn m05_blind_retry_resends_a_lost_request_without_a_key() {
    let (world, first, retry) =
        lost_answer_then_retry(Strategies::reference, FaultAction::CommitThenDrop).await;
    assert_eq!((first, retry, world.ledger().len()), (OutcomeStatus::Unknown, OutcomeStatus::Replayed, 1));
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 1, "no second request");

    let (world, first, _) = lost_answer_then_retry(zoo("blind_retry"), FaultAction::CommitThenDrop).await;
    assert_eq!(first, OutcomeStatus::Applied, "the resend's answer");
    let ledger = world.ledger();
    assert_eq!(ledger.len(), 2, "the lost request had committed");
    assert!(ledger.iter().all(|effect| effect.idempotency_key.is_none()), "{ledger:?}");
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn m05_blind_retry_gives_up_after_its_retry_budget() {
    let world = builder(zoo("blind_retry"), &[]).build().await;
    let always = FaultRule {
        matches: on("POST", "/v1/tickets"),
        action: FaultAction::ResetBeforeCommit,
        times: fake_downstream::Times::Always,
    };
    world.downstream.install_fault(always);
    let outcome = world.worker("worker-1").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(outcome.status, OutcomeStatus::Unknown, "{outcome:?}");
    assert_eq!(world.requests_to("POST", "/v1/tickets").len(), mutants::BLIND_RETRY_REQUESTS as usize);
}

/// The first ticket request is refused before it commits, its connection reset.
async fn reset_before_commit(strategies: fn() -> Strategies) -> (World, protocol::Outcome) {
    let world = builder(strategies, &[]).build().await;
    world
        .downstream
        .install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::ResetBeforeCommit));
    let first = world.worker("worker-1").call(world.call("tickets.create", "s", TICKET)).await;
    (world, first)
}

#[tokio::test(flavor = "current_thread")]
async fn m06_timeout_is_success_reports_applied_without_a_receipt() {
    let (world, reference) = reset_before_commit(Strategies::reference).await;
    assert_eq!((reference.status, world.ledger().len()), (OutcomeStatus::Unknown, 0));
    assert_eq!(world.record("s").status, RecordStatus::Unknown);

    let (world, first) = reset_before_commit(zoo("timeout_is_success")).await;
    assert_eq!(
        (first.status, first.effect_reference.as_deref()),
        (OutcomeStatus::Applied, None),
        "{first:?}"
    );
    assert!(world.ledger().is_empty(), "applied, yet nothing happened");
    let record = world.record("s");
    assert_eq!((record.status, record.effect_reference), (RecordStatus::Applied, None));
    let retry = world.worker("worker-1").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(retry.status, OutcomeStatus::Replayed, "the retry believes it too");
    assert!(world.ledger().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn m10_call_id_as_key_makes_every_retry_a_new_operation() {
    let (world, first, retry) =
        lost_answer_then_retry(zoo("call_id_as_key"), FaultAction::CommitThenDrop).await;
    assert_eq!((first, retry), (OutcomeStatus::Unknown, OutcomeStatus::Applied));
    let keys: Vec<_> = world.ledger().into_iter().map(|effect| effect.idempotency_key).collect();
    assert_eq!(keys, [Some("call_1".to_owned()), Some("call_2".to_owned())], "the downstream saw two keys");
    let records: Vec<_> = world.records().into_iter().map(|record| record.operation_key).collect();
    assert_eq!(records, ["call_1", "call_2"]);
}

// ----------------------------------------------------------------------------- M07

async fn revoked_between_attempts(strategies: fn() -> Strategies) -> (World, protocol::Outcome) {
    let world = builder(strategies, &[]).build().await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::CommitThenDrop));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown);
    world.authorizer.revoke("agent-1");
    let retry = worker.call(world.call("tickets.create", "s", TICKET)).await;
    (world, retry)
}

#[tokio::test(flavor = "current_thread")]
async fn m07_no_auth_recheck_lets_an_existing_key_bypass_a_revocation() {
    let (_, reference) = revoked_between_attempts(Strategies::reference).await;
    assert_eq!(
        (reference.status, reference.reason),
        (OutcomeStatus::Rejected, Some(ReasonCode::Unauthorized))
    );

    let (world, mutant) = revoked_between_attempts(zoo("no_auth_recheck")).await;
    assert_eq!(
        (mutant.status, mutant.effect_reference.as_deref()),
        (OutcomeStatus::Replayed, Some("ticket_1"))
    );
    // A new key is still refused: only the existing key is trusted.
    let fresh = world.worker("worker-1").call(world.call("tickets.create", "other", TICKET)).await;
    assert_eq!((fresh.status, fresh.reason), (OutcomeStatus::Rejected, Some(ReasonCode::Unauthorized)));
    assert_eq!(world.ledger().len(), 1);
}

// ----------------------------------------------------------------------------- M08

async fn late_duplicate(strategies: fn() -> Strategies) -> (OutcomeStatus, usize) {
    let world = builder(strategies, &[Service::Tickets]).build().await;
    let worker = world.worker("worker-1");
    assert_eq!(worker.call(world.call("tickets.create", "s", TICKET)).await.status, OutcomeStatus::Applied);
    world.advance_ms(RETENTION_MS);
    let late = worker.call(world.call("tickets.create", "s", TICKET)).await;
    (late.status, world.ledger().len())
}

#[tokio::test(flavor = "current_thread")]
async fn m08_short_ttl_delete_turns_a_late_duplicate_into_a_new_effect() {
    assert_eq!(late_duplicate(Strategies::reference).await, (OutcomeStatus::Expired, 1));
    assert_eq!(late_duplicate(zoo("short_ttl_delete")).await, (OutcomeStatus::Applied, 2));
}

// ----------------------------------------------------------------------------- M09

async fn owner_crashed_after_charging(strategies: fn() -> Strategies) -> (World, OutcomeStatus) {
    let world = builder(strategies, &[Service::Charges]).build().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at("enter complete");
    let doomed = world.worker_with_gate("worker-1", gate.clone());
    crash_at(&gate, doomed.call(world.call("payments.charge", "charge", CHARGE))).await;
    drop(doomed);
    world.advance_ms(LEASE_MS);
    let retry = world.worker("worker-2").call(world.call("payments.charge", "charge", CHARGE)).await;
    (world, retry.status)
}

#[tokio::test(flavor = "current_thread")]
async fn m09_pending_means_nothing_charges_again_without_asking() {
    let (world, status) = owner_crashed_after_charging(Strategies::reference).await;
    assert_eq!((status, world.ledger().len()), (OutcomeStatus::Replayed, 1));
    assert_eq!(world.requests_to("GET", "/v1/receipts/*").len(), 1);

    let (world, status) = owner_crashed_after_charging(zoo("pending_means_nothing")).await;
    assert_eq!((status, world.ledger().len()), (OutcomeStatus::Applied, 2));
    assert!(world.requests_to("GET", "/v1/receipts/*").is_empty(), "never asked");
}

// ----------------------------------------------------------------------------- M11

#[tokio::test(flavor = "current_thread")]
async fn m11_boolean_success_replays_without_the_effect_reference() {
    for (strategies, reference, result) in [
        (
            Strategies::reference as fn() -> Strategies,
            Some("ticket_1"),
            json!({"ticket_id": "ticket_1", "version": 1, "status": "open"}),
        ),
        (zoo("boolean_success"), None, json!({"succeeded": true})),
    ] {
        let world = builder(strategies, &[]).build().await;
        let worker = world.worker("worker-1");
        let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
        assert_eq!(
            first.effect_reference.as_deref(),
            Some("ticket_1"),
            "the first answer is right either way"
        );
        let second = worker.call(world.call("tickets.create", "s", TICKET)).await;
        assert_eq!(second.status, OutcomeStatus::Replayed);
        assert_eq!((second.effect_reference.as_deref(), second.result), (reference, Some(result)));
        assert_eq!(world.record("s").effect_reference.as_deref(), reference);
    }
}

// ----------------------------------------------------------------------------- M12

async fn retry_while_the_job_runs(strategies: fn() -> Strategies) -> (OutcomeStatus, usize) {
    let world = builder(strategies, &[Service::Jobs]).build().await;
    let worker = world.worker("worker-1");
    assert_eq!(worker.call(world.call("jobs.submit", "report", JOB)).await.status, OutcomeStatus::InFlight);
    let retry = worker.call(world.call("jobs.submit", "report", JOB)).await;
    (retry.status, world.effects_of(EffectKind::JobAccepted).len())
}

#[tokio::test(flavor = "current_thread")]
async fn m12_resubmit_job_starts_a_second_job() {
    assert_eq!(retry_while_the_job_runs(Strategies::reference).await, (OutcomeStatus::InFlight, 1));
    assert_eq!(retry_while_the_job_runs(zoo("resubmit_job")).await, (OutcomeStatus::InFlight, 2));
}

// ----------------------------------------------------------------------------- M15

/// `acme` and `globex` create a ticket for the same workflow step; then `globex` polls it.
async fn two_tenants_one_step(strategies: fn() -> Strategies) -> (OutcomeStatus, Option<String>, usize) {
    let world = builder(strategies, &[]).build().await;
    let worker = world.worker("worker-1");
    let acme = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!((acme.status, acme.effect_reference.as_deref()), (OutcomeStatus::Applied, Some("ticket_1")));
    let mut globex_call = world.call("tickets.create", "s", TICKET);
    globex_call.tenant = "globex".into();
    let globex = worker.call(globex_call).await;
    let mut globex_operation = world.operation("s");
    globex_operation.tenant = "globex".into();
    let polled = worker.poll(globex_operation).await;
    assert_eq!(polled.status, OutcomeStatus::Replayed, "{polled:?}");
    (globex.status, polled.effect_reference, world.ledger().len())
}

#[tokio::test(flavor = "current_thread")]
async fn m15_no_tenant_scope_collides_two_tenants_and_leaks_a_reference() {
    let reference = two_tenants_one_step(Strategies::reference).await;
    assert_eq!(reference, (OutcomeStatus::Applied, Some("ticket_2".into()), 2));
    let mutant = two_tenants_one_step(zoo("no_tenant_scope")).await;
    assert_eq!(mutant, (OutcomeStatus::Rejected, Some("ticket_1".into()), 1), "globex sees acme's ticket");
}

// ----------------------------------------------------------------------------- M16

async fn stale_reopen(strategies: fn() -> Strategies) -> (World, protocol::Outcome) {
    let world = builder(strategies, &[]).build().await;
    let worker = world.worker("worker-1");
    worker.call(world.call("tickets.create", "create", TICKET)).await;
    let close = r#"{"ticket_id":"ticket_1","status":"closed","expected_version":1}"#;
    assert_eq!(
        worker.call(world.call("tickets.set_status", "close", close)).await.status,
        OutcomeStatus::Applied
    );
    assert_eq!(world.downstream.touch_ticket("ticket_1").unwrap(), 3, "a person edits the ticket");
    let reopen = r#"{"ticket_id":"ticket_1","status":"open","expected_version":2}"#;
    let outcome = worker.call(world.call("tickets.set_status", "reopen", reopen)).await;
    (world, outcome)
}

#[tokio::test(flavor = "current_thread")]
async fn m16_stale_overwrite_applies_an_update_over_a_newer_version() {
    let (world, reference) = stale_reopen(Strategies::reference).await;
    assert_eq!(
        (reference.status, reference.reason),
        (OutcomeStatus::Rejected, Some(ReasonCode::PreconditionFailed))
    );
    assert_eq!(world.downstream.ticket("ticket_1").unwrap().status, "closed");

    let (world, mutant) = stale_reopen(zoo("stale_overwrite")).await;
    assert_eq!(mutant.status, OutcomeStatus::Applied, "{mutant:?}");
    let changes: Vec<_> = world.effects_of(EffectKind::TicketStatusChanged);
    let last = changes.last().and_then(|effect| effect.versions).unwrap();
    assert_eq!((last.from, last.if_match), (3, None), "applied over version 3 without a precondition");
    assert_eq!(world.downstream.ticket("ticket_1").unwrap().status, "open");
}

// ----------------------------------------------------------------------------- M17

fn webhook(event_id: &str) -> WebhookEvent {
    let body = json!({
        "event_id": event_id,
        "type": "job.succeeded",
        "tenant": "acme",
        "job_id": "job_1",
        "idempotency_key": World::key("report"),
        "result": {"output_reference": "output_1"},
    });
    WebhookEvent { body: body.to_string().into_bytes() }
}

async fn deliveries(strategies: fn() -> Strategies) -> (Vec<WebhookAck>, usize) {
    let world = builder(strategies, &[Service::Messages]).build().await;
    let worker = world.worker("worker-1");
    worker.call(world.call("jobs.submit", "report", JOB)).await;
    world.finish_job("job_1").await;
    let mut acks = Vec::new();
    for event_id in ["evt_1", "evt_1", "evt_2"] {
        acks.push(worker.webhook(webhook(event_id)).await);
    }
    // The notices go out as background work, beside the deliveries.
    world.run_background().await;
    assert_eq!(world.record("report").status, RecordStatus::Applied);
    (acks, world.effects_of(EffectKind::MessageSent).len())
}

#[tokio::test(flavor = "current_thread")]
async fn m17_webhook_no_dedupe_settles_every_delivery_and_sends_every_notice() {
    use WebhookAck::{AlreadySettled, DuplicateEvent, Processed};
    assert_eq!(deliveries(Strategies::reference).await, (vec![Processed, DuplicateEvent, AlreadySettled], 1));
    assert_eq!(deliveries(zoo("webhook_no_dedupe")).await, (vec![Processed, Processed, Processed], 3));
}

// ----------------------------------------------------------------------------- M18

async fn delivered_twice(strategies: fn() -> Strategies) -> (Vec<Consumed>, usize) {
    let world = builder(strategies, &[Service::Messages]).build().await;
    world.worker("worker-1").call(world.call("messages.send", "notify", MESSAGE)).await;
    let envelope = world.outbox.envelopes().remove(0);
    let consumer = world.worker("worker-2");
    let mut acks = Vec::new();
    for _ in 0..2 {
        acks.push(consumer.consume(envelope.clone()).await);
    }
    let record = world.record("notify");
    assert_eq!(
        (record.status, record.effect_reference.as_deref()),
        (RecordStatus::Applied, Some("message_1"))
    );
    (acks, world.effects_of(EffectKind::MessageSent).len())
}

#[tokio::test(flavor = "current_thread")]
async fn m18_consumer_no_claim_sends_on_every_delivery() {
    assert_eq!(delivered_twice(Strategies::reference).await, (vec![Consumed::Ack; 2], 1));
    assert_eq!(delivered_twice(zoo("consumer_no_claim")).await, (vec![Consumed::Ack; 2], 2));
}

// ----------------------------------------------------------------------------- M30

/// The charge service ignores keys and offers no receipts. Worker-1's charge commits, but its
/// answer is slow; its lease runs out, and worker-2's retry, with no way to find out, marks the
/// charge `unknown` (and hands it over). Then worker-1's answer arrives: the only proof there
/// will ever be. Returns the record's status and reference once worker-1 is done.
async fn late_answer_after_the_hand_over(strategies: fn() -> Strategies) -> (RecordStatus, Option<String>) {
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities(Service::Charges.as_str(), false, false);
    let mut config = World::builder_downstream_config();
    config.set_service(
        Service::Charges,
        ServiceConfig { idempotency: IdempotencyMode::Ignored, receipts: false },
    );
    // Real time: the answer is late against the (manual-clock) lease, not against its timeout.
    let world = World::builder()
        .contracts(contracts)
        .downstream(config)
        .strategies(strategies)
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .await;
    let slow = FaultAction::CommitThenDelay(std::time::Duration::from_millis(300));
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/charges"), slow));
    let first_worker = world.worker("worker-1");
    let first = first_worker.call(world.call("payments.charge", "charge", CHARGE));
    tokio::pin!(first);
    tokio::select! {
        _ = &mut first => panic!("the answer was expected to be late"),
        () = crate::support::eventually("the charge committed", || world.ledger().len() == 1) => {}
    }
    world.advance_ms(LEASE_MS);
    let retry = world.worker("worker-2").call(world.call("payments.charge", "charge", CHARGE)).await;
    assert_eq!(retry.status, OutcomeStatus::Unknown, "{retry:?}");
    assert_eq!(world.operators.entries().len(), 1, "handed over: nothing can find out");
    first.await;
    assert_eq!(world.ledger().len(), 1);
    let record = world.record("charge");
    (record.status, record.effect_reference)
}

#[tokio::test(flavor = "current_thread")]
async fn m30_late_receipt_dropped_leaves_an_answered_charge_unknown() {
    let (status, reference) = late_answer_after_the_hand_over(Strategies::reference).await;
    assert_eq!((status, reference.as_deref()), (RecordStatus::Applied, Some("charge_1")), "adopted");

    let (status, reference) = late_answer_after_the_hand_over(zoo("late_receipt_dropped")).await;
    assert_eq!((status, reference), (RecordStatus::Unknown, None), "the proof was dropped");
}

// ----------------------------------------------------------------------------- M21

/// The ticket service honours keys but offers no receipts. The first request commits and its
/// answer is lost; the retry's recovery resends. Returns the retry's status and the world.
async fn lost_answer_without_receipts(strategies: fn() -> Strategies) -> (World, OutcomeStatus) {
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities(Service::Tickets.as_str(), true, false);
    let mut config = World::builder_downstream_config();
    config.set_service(
        Service::Tickets,
        ServiceConfig { idempotency: IdempotencyMode::Honoured, receipts: false },
    );
    let world = World::builder().contracts(contracts).downstream(config).strategies(strategies).build().await;
    world.downstream.install_fault(FaultRule::once(on("POST", "/v1/tickets"), FaultAction::CommitThenDrop));
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}");
    let retry = worker.call(world.call("tickets.create", "s", TICKET)).await;
    (world, retry.status)
}

#[tokio::test(flavor = "current_thread")]
async fn m21_fresh_key_resend_makes_a_second_ticket_where_the_same_key_replays() {
    let (world, retry) = lost_answer_without_receipts(Strategies::reference).await;
    assert_eq!((retry, world.ledger().len()), (OutcomeStatus::Replayed, 1));
    let keys: Vec<_> =
        world.requests_to("POST", "/v1/tickets").into_iter().map(|r| r.idempotency_key).collect();
    assert_eq!(keys, [Some(World::key("s")), Some(World::key("s"))], "resent under the same key");

    let (world, retry) = lost_answer_without_receipts(zoo("fresh_key_resend")).await;
    assert_eq!((retry, world.ledger().len()), (OutcomeStatus::Applied, 2), "a new key, a new ticket");
}

// ----------------------------------------------------------------------------- M22

/// A job that runs for a minute, polled one second and four seconds after it was accepted.
async fn polls_of_a_long_job(strategies: fn() -> Strategies) -> (OutcomeStatus, OutcomeStatus) {
    let mut config = World::builder_downstream_config();
    config.job_duration = std::time::Duration::from_secs(60);
    let world = World::builder().downstream(config).strategies(strategies).build().await;
    let worker = world.worker("worker-1");
    assert_eq!(worker.call(world.call("jobs.submit", "report", JOB)).await.status, OutcomeStatus::InFlight);
    world.advance_ms(1_000);
    let early = worker.poll(world.operation("report")).await;
    world.advance_ms(3_000);
    let later = worker.poll(world.operation("report")).await;
    (early.status, later.status)
}

#[tokio::test(flavor = "current_thread")]
async fn m22_impatient_job_poll_fails_a_job_that_is_still_running() {
    let polls = polls_of_a_long_job(Strategies::reference).await;
    assert_eq!(polls, (OutcomeStatus::InFlight, OutcomeStatus::InFlight), "a running job is polled on");
    let polls = polls_of_a_long_job(zoo("impatient_job_poll")).await;
    assert_eq!(polls, (OutcomeStatus::InFlight, OutcomeStatus::Rejected), "patient for three seconds only");
}
