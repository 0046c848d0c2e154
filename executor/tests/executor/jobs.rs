//! Delayed jobs: one job per operation, polling converges, webhooks are deduplicated by event
//! id and by operation, and the completion notice is sent once.

use executor::RecordStatus;
use fake_downstream::{EffectKind, FaultAction, FaultRule, RuleMatch};
use protocol::{NextAction, OutcomeStatus, WebhookAck, WebhookEvent};
use serde_json::{json, Value};

use crate::support::{World, JOB};

fn webhook(event_id: &str, job_id: &str, key: &str) -> WebhookEvent {
    let body = json!({
        "event_id": event_id,
        "type": "job.succeeded",
        "tenant": "acme",
        "job_id": job_id,
        "idempotency_key": key,
        "result": {"output_reference": "output_1"},
    });
    WebhookEvent { body: body.to_string().into_bytes() }
}

fn notices(world: &World) -> Vec<fake_downstream::Effect> {
    world.effects_of(EffectKind::MessageSent)
}

async fn job_done(world: &World, job_id: &str) {
    world.finish_job(job_id).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_delayed_job_is_submitted_once_and_polling_converges_to_its_result() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let accepted = worker.call(world.call("jobs.submit", "report", JOB)).await;
    assert_eq!(accepted.status, OutcomeStatus::InFlight, "{accepted:?}");
    assert_eq!((accepted.next_action, accepted.retry_after_seconds), (NextAction::Poll, Some(1)));
    let record = world.record("report");
    assert_eq!((record.status, record.job_id.as_deref()), (RecordStatus::Pending, Some("job_1")));

    let retried = world.worker("worker-2").call(world.call("jobs.submit", "report", JOB)).await;
    assert_eq!(retried.status, OutcomeStatus::InFlight);
    let early = worker.poll(world.operation("report")).await;
    assert_eq!(early.status, OutcomeStatus::InFlight, "{early:?}");

    job_done(&world, "job_1").await;
    let done = worker.poll(world.operation("report")).await;
    assert_eq!(done.status, OutcomeStatus::Applied, "{done:?}");
    assert_eq!(done.effect_reference.as_deref(), Some("job_1"));
    let result =
        json!({"job_id": "job_1", "status": "succeeded", "result": {"output_reference": "output_1"}});
    assert_eq!(done.result, Some(result.clone()));
    let polled_again = world.worker("worker-2").poll(world.operation("report")).await;
    let called_again = worker.call(world.call("jobs.submit", "report", JOB)).await;
    for outcome in [&polled_again, &called_again] {
        assert_eq!(outcome.status, OutcomeStatus::Replayed, "{outcome:?}");
        assert_eq!(outcome.result, Some(result.clone()));
    }

    assert_eq!(world.effects_of(EffectKind::JobAccepted).len(), 1);
    assert_eq!(world.requests_to("POST", "/v1/jobs").len(), 1, "never resubmitted");
    let notices = notices(&world);
    assert_eq!(notices.len(), 1, "one completion notice");
    assert_eq!(notices[0].idempotency_key, Some(format!("{}:notice", World::key("report"))));
}

#[tokio::test(flavor = "current_thread")]
async fn webhooks_are_deduplicated_by_event_and_by_operation() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    worker.call(world.call("jobs.submit", "report", JOB)).await;
    job_done(&world, "job_1").await;
    let key = World::key("report");

    assert_eq!(worker.webhook(webhook("evt_1", "job_1", &key)).await, WebhookAck::Processed);
    assert_eq!(worker.webhook(webhook("evt_1", "job_1", &key)).await, WebhookAck::DuplicateEvent);
    let other_worker = world.worker("worker-2");
    assert_eq!(other_worker.webhook(webhook("evt_1", "job_1", &key)).await, WebhookAck::DuplicateEvent);
    assert_eq!(other_worker.webhook(webhook("evt_2", "job_1", &key)).await, WebhookAck::AlreadySettled);
    let record = world.record("report");
    assert_eq!((record.status, record.effect_reference.as_deref()), (RecordStatus::Applied, Some("job_1")));

    let polled = worker.poll(world.operation("report")).await;
    assert_eq!(polled.status, OutcomeStatus::Replayed, "the webhook made the transition: {polled:?}");
    assert!(notices(&world).is_empty(), "a webhook's notice goes out beside it, as background work");
    world.run_background().await;
    assert_eq!(notices(&world).len(), 1, "the transition sends the notice, once");
    assert_eq!(world.effects_of(EffectKind::JobAccepted).len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn webhooks_for_no_known_operation_or_that_cannot_be_read_change_nothing() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    worker.call(world.call("jobs.submit", "report", JOB)).await;
    let key = World::key("report");

    assert_eq!(worker.webhook(webhook("evt_1", "job_9", "another-key")).await, WebhookAck::Unmatched);
    assert_eq!(worker.webhook(webhook("evt_2", "job_9", &key)).await, WebhookAck::Unmatched, "wrong job");
    let garbage = WebhookEvent { body: b"{\"event_id\": ".to_vec() };
    assert_eq!(worker.webhook(garbage).await, WebhookAck::Invalid);
    let mut wrong_type: Value = serde_json::from_slice(&webhook("evt_3", "job_1", &key).body).unwrap();
    wrong_type["type"] = json!("job.exploded");
    let wrong_type = WebhookEvent { body: wrong_type.to_string().into_bytes() };
    assert_eq!(worker.webhook(wrong_type).await, WebhookAck::Invalid);
    let empty_id = webhook("", "job_1", &key);
    assert_eq!(worker.webhook(empty_id).await, WebhookAck::Invalid);

    let record = world.record("report");
    assert_eq!((record.status, record.job_id.as_deref()), (RecordStatus::Pending, Some("job_1")));
    assert!(notices(&world).is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_lost_job_acceptance_is_recovered_from_the_receipt_without_a_second_job() {
    let world = World::new().await;
    let rule =
        RuleMatch { method: Some("POST".into()), path: Some("/v1/jobs".into()), ..RuleMatch::default() };
    world.downstream.install_fault(FaultRule::once(rule, FaultAction::CommitThenDrop));
    let worker = world.worker("worker-1");
    let lost = worker.call(world.call("jobs.submit", "report", JOB)).await;
    assert_eq!(lost.status, OutcomeStatus::Unknown, "{lost:?}");

    let retried = worker.call(world.call("jobs.submit", "report", JOB)).await;
    assert_eq!(
        (retried.status, retried.next_action),
        (OutcomeStatus::InFlight, NextAction::Poll),
        "{retried:?}"
    );
    assert_eq!(world.record("report").job_id.as_deref(), Some("job_1"));
    job_done(&world, "job_1").await;
    let done = worker.poll(world.operation("report")).await;
    assert_eq!(done.status, OutcomeStatus::Applied);
    assert_eq!(world.requests_to("POST", "/v1/jobs").len(), 1);
    assert_eq!(world.effects_of(EffectKind::JobAccepted).len(), 1);
}

/// A job settled by a webhook whose worker then crashed, before its background notice went
/// out: the notice is owed in the store, and a later poll of the operation finishes it (after
/// its sender had time), once. Where the message service honours keys it is resent under its
/// key; where it does not, a lookup that finds nothing cannot rule out a late commit, so it is
/// handed over to people instead.
async fn notice_lost_with_its_worker(keys_honoured: bool) -> (World, String) {
    let mut contracts = protocol::ContractSet::builtin();
    contracts.set_capabilities("messages", keys_honoured, true);
    let mut config = World::builder_downstream_config();
    if keys_honoured {
        config.messages.idempotency = fake_downstream::IdempotencyMode::Honoured;
    }
    let world = World::builder().contracts(contracts).downstream(config).build().await;
    let worker = world.worker("worker-1");
    worker.call(world.call("jobs.submit", "report", JOB)).await;
    job_done(&world, "job_1").await;
    let key = World::key("report");
    assert_eq!(worker.webhook(webhook("evt_1", "job_1", &key)).await, WebhookAck::Processed);
    world.drop_background();
    assert!(notices(&world).is_empty());
    let other = world.worker("worker-2");
    other.poll(world.operation("report")).await;
    assert!(notices(&world).is_empty(), "too early: its sender may still be sending it");
    assert!(world.operators.entries().is_empty());
    // Its sender's time is its downstream timeout (2 s here) and a second more: until then the
    // notice is left alone, and from that moment on it is finished.
    world.advance_ms(2_999);
    other.poll(world.operation("report")).await;
    assert!(notices(&world).is_empty() && world.operators.entries().is_empty(), "still its sender's");
    assert!(world.downstream.requests().iter().all(|r| !r.path.contains("notice")), "not even looked up");
    world.advance_ms(1);
    let polled = other.poll(world.operation("report")).await;
    assert_eq!(polled.status, OutcomeStatus::Replayed, "{polled:?}");
    assert!(
        !notices(&world).is_empty() || !world.operators.entries().is_empty(),
        "finished at its sender's deadline"
    );
    // Finished once: later polls find nothing owed.
    world.advance_ms(5_000);
    other.poll(world.operation("report")).await;
    (world, key)
}

#[tokio::test(flavor = "current_thread")]
async fn a_notice_lost_with_its_worker_is_resent_by_a_later_poll_where_keys_are_honoured() {
    let (world, key) = notice_lost_with_its_worker(true).await;
    let sent = notices(&world);
    assert_eq!(sent.len(), 1, "{:?}", world.operators.entries());
    assert_eq!(sent[0].idempotency_key, Some(format!("{key}:notice")));
    assert!(world.operators.entries().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_notice_lost_with_its_worker_is_handed_over_where_keys_are_not_honoured() {
    let (world, key) = notice_lost_with_its_worker(false).await;
    assert!(notices(&world).is_empty(), "never resent blind");
    let lookups = world.requests_to("GET", &format!("/v1/receipts/{}%3Anotice", key.replace(':', "%3A")));
    assert_eq!(lookups.len(), 1, "looked up once, by the notice's own key");
    let filed = world.operators.entries();
    assert_eq!(filed.len(), 1, "{filed:?}");
    assert!(filed[0].finding.contains("completion notice for job_1"), "{filed:?}");
}
