//! Queued tools: the call writes one envelope; consumers claim the operation before they
//! send, so redelivery (and redelivery after a consumer crash) makes one message.

use std::rc::Rc;

use executor::RecordStatus;
use fake_downstream::{EffectKind, FaultAction, FaultRule, RuleMatch};
use protocol::{Consumed, Envelope, NextAction, OutcomeStatus};
use serde_json::json;

use crate::support::{PausingGate, World, JOB, LEASE_MS, MESSAGE};

fn messages(world: &World) -> usize {
    world.effects_of(EffectKind::MessageSent).len()
}

#[tokio::test(flavor = "current_thread")]
async fn a_queued_message_is_sent_once_however_often_it_is_delivered() {
    let world = World::new().await;
    let caller = world.worker("worker-1");
    let accepted = caller.call(world.call("messages.send", "notify", MESSAGE)).await;
    assert_eq!(
        (accepted.status, accepted.next_action),
        (OutcomeStatus::InFlight, NextAction::Poll),
        "{accepted:?}"
    );
    let again = caller.call(world.call("messages.send", "notify", MESSAGE)).await;
    assert_eq!(again.status, OutcomeStatus::InFlight);
    let envelopes = world.outbox.envelopes();
    assert_eq!(envelopes.len(), 1, "one envelope per operation");
    assert_eq!(envelopes[0].operation_key, World::key("notify"));
    let record = world.record("notify");
    assert_eq!((record.status, record.owner_token), (RecordStatus::Pending, None));
    assert_eq!(messages(&world), 0, "nothing is sent before a consumer acts");

    let consumer = world.worker("worker-2");
    assert_eq!(consumer.consume(envelopes[0].clone()).await, Consumed::Ack);
    assert_eq!(consumer.consume(envelopes[0].clone()).await, Consumed::Ack);
    assert_eq!(world.worker("worker-3").consume(envelopes[0].clone()).await, Consumed::Ack);
    assert_eq!(messages(&world), 1);
    assert_eq!(world.ledger()[0].idempotency_key.as_deref(), Some(World::key("notify").as_str()));

    let polled = caller.poll(world.operation("notify")).await;
    assert_eq!(
        (polled.status, polled.effect_reference.as_deref()),
        (OutcomeStatus::Replayed, Some("message_1"))
    );
    assert_eq!(polled.result, Some(json!({"message_id": "message_1", "status": "sent"})));
}

#[tokio::test(flavor = "current_thread")]
async fn a_consumer_that_crashes_before_acknowledging_is_recovered_from_the_receipt() {
    let world = World::new().await;
    world.worker("worker-1").call(world.call("messages.send", "notify", MESSAGE)).await;
    let envelope = world.outbox.envelopes().remove(0);

    let gate = Rc::new(PausingGate::default());
    gate.pause_at("enter complete");
    let doomed = world.worker_with_gate("worker-2", gate.clone());
    tokio::select! {
        _ = doomed.consume(envelope.clone()) => panic!("expected a pause"),
        () = gate.paused() => {}
    }
    drop(doomed);
    assert_eq!(messages(&world), 1, "sent, never acknowledged");

    let consumer = world.worker("worker-3");
    assert_eq!(consumer.consume(envelope.clone()).await, Consumed::Retry, "the crashed owner's lease holds");
    world.advance_ms(LEASE_MS);
    assert_eq!(consumer.consume(envelope.clone()).await, Consumed::Ack);
    assert_eq!(messages(&world), 1);
    assert_eq!(world.requests_to("POST", "/v1/messages").len(), 1, "recovery found the receipt");
    let record = world.record("notify");
    assert_eq!(
        (record.status, record.effect_reference.as_deref()),
        (RecordStatus::Applied, Some("message_1"))
    );
}

#[tokio::test(flavor = "current_thread")]
async fn an_ambiguous_send_goes_to_reconciliation_and_is_never_resent() {
    let world = World::new().await;
    let rule =
        RuleMatch { method: Some("POST".into()), path: Some("/v1/messages".into()), ..RuleMatch::default() };
    world.downstream.install_fault(FaultRule::once(rule, FaultAction::CommitThenDrop));
    world.worker("worker-1").call(world.call("messages.send", "notify", MESSAGE)).await;
    let envelope = world.outbox.envelopes().remove(0);
    let consumer = world.worker("worker-2");
    assert_eq!(consumer.consume(envelope.clone()).await, Consumed::Ack);
    assert_eq!(world.record("notify").status, RecordStatus::Unknown);
    assert_eq!(consumer.consume(envelope).await, Consumed::Ack, "reconciliation owns it now");
    assert_eq!(world.requests_to("POST", "/v1/messages").len(), 1);

    let reconciled = consumer.reconcile(world.operation("notify")).await;
    assert_eq!(
        (reconciled.status, reconciled.effect_reference.as_deref()),
        (OutcomeStatus::Replayed, Some("message_1"))
    );
    assert_eq!(messages(&world), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn envelopes_that_do_not_match_their_operation_are_dropped_without_an_effect() {
    let world = World::new().await;
    world.worker("worker-1").call(world.call("messages.send", "notify", MESSAGE)).await;
    let envelope = world.outbox.envelopes().remove(0);
    let consumer = world.worker("worker-2");

    let mut tampered = envelope.clone();
    tampered.payload["call"]["arguments"]["to"] = json!("someone-else@example.test");
    let mut other_step = envelope.clone();
    other_step.payload["call"]["step_id"] = json!("another_step");
    let garbage = Envelope { payload: json!({"what": "ever"}), ..envelope.clone() };
    let unknown_operation =
        Envelope { operation_key: "acme:production:run_1:other".into(), ..envelope.clone() };
    for delivery in [tampered, other_step, garbage, unknown_operation] {
        assert_eq!(consumer.consume(delivery).await, Consumed::Ack);
    }
    assert_eq!(messages(&world), 0);
    assert_eq!(world.record("notify").status, RecordStatus::Pending);
    assert_eq!(consumer.consume(envelope).await, Consumed::Ack);
    assert_eq!(messages(&world), 1);
}

/// An envelope the outbox refused was never queued, and nothing will deliver it; but the
/// executor cannot tell that the queue kept nothing, so the operation is `unknown`. Where the
/// message service offers receipts, the executor's own reconciliation can find out; where
/// nothing can, it is handed over to people at once.
#[tokio::test(flavor = "current_thread")]
async fn an_envelope_the_outbox_refused_leaves_the_operation_unknown() {
    for receipts in [true, false] {
        let mut contracts = protocol::ContractSet::builtin();
        contracts.set_capabilities("messages", false, receipts);
        let world = World::builder().contracts(contracts).build().await;
        world.outbox.refuse_next();
        let outcome = world.worker("worker-1").call(world.call("messages.send", "notify", MESSAGE)).await;
        assert_eq!(outcome.status, OutcomeStatus::Unknown, "receipts {receipts}: {outcome:?}");
        assert!(world.outbox.envelopes().is_empty());
        assert_eq!(world.record("notify").status, RecordStatus::Unknown);
        let filed = world.operators.entries();
        assert_eq!(filed.len(), usize::from(!receipts), "receipts {receipts}: {filed:?}");
        assert_eq!(messages(&world), 0);
    }
}

/// A delivery naming a delayed job's operation (misrouted, or forged: jobs are never queued)
/// is acknowledged without an effect: the job the caller submitted is the only one.
#[tokio::test(flavor = "current_thread")]
async fn an_envelope_naming_a_running_job_is_dropped_without_a_second_job() {
    let world = World::new().await;
    let submitted = world.worker("worker-1").call(world.call("jobs.submit", "report", JOB)).await;
    assert_eq!(submitted.status, OutcomeStatus::InFlight, "{submitted:?}");
    let call = world.call("jobs.submit", "report", JOB);
    let envelope = Envelope {
        envelope_id: "envelope-forged".into(),
        tenant: "acme".into(),
        operation_key: World::key("report"),
        tool: "jobs.submit".into(),
        payload: json!({ "call": serde_json::to_value(&call).unwrap() }),
    };
    assert_eq!(world.worker("worker-2").consume(envelope).await, Consumed::Ack);
    assert_eq!(world.requests_to("POST", "/v1/jobs").len(), 1, "one job");
    let record = world.record("report");
    assert_eq!((record.status, record.job_id.as_deref()), (RecordStatus::Pending, Some("job_1")));
}

/// A consumer's send is held at the downstream (before it commits) until the consumer's lease
/// runs out. The redelivery's recovery finds no receipt yet and resends under the same key,
/// which the downstream answers "still in progress": the delivery is not acknowledged but
/// retried. Once the first send commits, the next delivery finds its receipt. One message.
#[tokio::test(flavor = "current_thread")]
async fn a_delivery_whose_send_is_still_in_progress_is_retried_not_acknowledged() {
    let mut contracts = protocol::ContractSet::builtin();
    contracts.set_capabilities("messages", true, true);
    let mut config = World::builder_downstream_config();
    config.messages.idempotency = fake_downstream::IdempotencyMode::Honoured;
    // Real time: the held send must outlast the (manual-clock) lease, not its own timeout.
    let world = World::builder()
        .contracts(contracts)
        .downstream(config)
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .await;
    world.worker("worker-1").call(world.call("messages.send", "notify", MESSAGE)).await;
    let envelope = world.outbox.envelopes().remove(0);
    let on_messages =
        RuleMatch { method: Some("POST".into()), path: Some("/v1/messages".into()), ..RuleMatch::default() };
    let hold = world.downstream.install_fault(FaultRule::once(on_messages, FaultAction::Hold));

    let slow = world.worker("worker-2");
    let first = slow.consume(envelope.clone());
    tokio::pin!(first);
    tokio::select! {
        _ = &mut first => panic!("the send was expected to be held"),
        () = crate::support::eventually("the send is held", || world.downstream.held(hold) == 1) => {}
    }
    world.advance_ms(LEASE_MS);

    let consumer = world.worker("worker-3");
    assert_eq!(
        consumer.consume(envelope.clone()).await,
        Consumed::Retry,
        "the first send is still in progress"
    );
    assert_eq!(messages(&world), 0);
    world.downstream.release(hold).unwrap();
    first.await;
    assert_eq!(messages(&world), 1);
    world.advance_ms(LEASE_MS);
    assert_eq!(consumer.consume(envelope).await, Consumed::Ack);
    assert_eq!(messages(&world), 1);
    assert_eq!(world.record("notify").status, RecordStatus::Applied);
}
