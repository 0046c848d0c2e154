//! Calls without faults: replay, new keys, tenants, mismatches, versions, authorization,
//! preconditions, refusals and bad input.

use executor::RecordStatus;
use fake_downstream::EffectKind;
use protocol::{ContractSet, NextAction, OperationRef, OutcomeStatus, ReasonCode, ToolCall};
use serde_json::{json, value::RawValue};

use crate::support::{World, LEASE_MS, TICKET};

#[tokio::test(flavor = "current_thread")]
async fn the_same_step_twice_makes_one_effect_and_replays_it() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "record_issue", TICKET)).await;
    let second = worker.call(world.call("tickets.create", "record_issue", TICKET)).await;

    assert_eq!(first.status, OutcomeStatus::Applied, "{first:?}");
    assert_eq!(second.status, OutcomeStatus::Replayed, "{second:?}");
    assert_eq!(first.operation_key.as_deref(), Some(World::key("record_issue").as_str()));
    assert_eq!(second.effect_reference, first.effect_reference);
    assert_eq!(second.result, first.result);
    assert_eq!(first.result, Some(json!({"ticket_id": "ticket_1", "version": 1, "status": "open"})));
    let ledger = world.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(Some(&ledger[0].effect_reference), first.effect_reference.as_ref());
    assert_eq!(ledger[0].idempotency_key.as_deref(), Some(World::key("record_issue").as_str()));
    assert_eq!(world.record("record_issue").status, RecordStatus::Applied);
    assert!(world.gate.boundaries().contains(&"enter claim".to_owned()));
}

#[tokio::test(flavor = "current_thread")]
async fn a_new_step_with_the_same_arguments_is_a_second_action() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "step_1", TICKET)).await;
    let second = worker.call(world.call("tickets.create", "step_2", TICKET)).await;
    assert_eq!((first.status, second.status), (OutcomeStatus::Applied, OutcomeStatus::Applied));
    assert_ne!(first.effect_reference, second.effect_reference);
    assert_eq!(world.ledger().len(), 2);
    assert_eq!(world.records().len(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn the_same_step_under_two_tenants_is_two_operations_that_reveal_nothing_of_each_other() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let acme = worker.call(world.call("tickets.create", "s", TICKET)).await;
    let globex =
        worker.call(ToolCall { tenant: "globex".into(), ..world.call("tickets.create", "s", TICKET) }).await;
    let globex_again =
        worker.call(ToolCall { tenant: "globex".into(), ..world.call("tickets.create", "s", TICKET) }).await;
    assert_eq!((acme.status, globex.status), (OutcomeStatus::Applied, OutcomeStatus::Applied));
    assert_eq!(globex_again.status, OutcomeStatus::Replayed);
    assert_ne!(acme.effect_reference, globex.effect_reference);
    assert_eq!(globex_again.effect_reference, globex.effect_reference);
    let ledger = world.ledger();
    assert_eq!(ledger.len(), 2);
    let globex_effect = ledger.iter().find(|effect| effect.tenant == "globex").unwrap();
    assert_eq!(Some(&globex_effect.effect_reference), globex.effect_reference.as_ref());
}

#[tokio::test(flavor = "current_thread")]
async fn a_changed_request_under_an_applied_key_is_rejected_and_the_original_stands() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    let fingerprint = world.record("s").request_fingerprint;
    let changed = r#"{"queue":"support","subject":"Refund request","body":"A different body."}"#;
    let mismatch = worker.call(world.call("tickets.create", "s", changed)).await;

    assert_eq!(mismatch.status, OutcomeStatus::Rejected);
    assert_eq!(mismatch.reason, Some(ReasonCode::IdempotencyKeyReusedWithDifferentRequest));
    assert_eq!(mismatch.next_action, NextAction::InspectOperation);
    assert_eq!(mismatch.effect_reference, None, "a mismatch does not hand out the stored result");
    assert_eq!(world.ledger().len(), 1);
    let record = world.record("s");
    assert_eq!(record.request_fingerprint, fingerprint);
    assert_eq!(record.effect_reference, first.effect_reference);
    let again = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(again.status, OutcomeStatus::Replayed);
}

#[tokio::test(flavor = "current_thread")]
async fn a_changed_request_while_the_first_is_in_flight_is_rejected_and_a_same_one_waits() {
    let world = World::new().await;
    let (first_worker, second_worker) = (world.worker("worker-1"), world.worker("worker-2"));
    world.gate.pause_at("leave claim");
    let first = first_worker.call(world.call("tickets.create", "s", TICKET));
    let others = async {
        world.gate.paused().await;
        let changed = r#"{"queue":"billing","subject":"Refund request","body":"b"}"#;
        let mismatch = second_worker.call(world.call("tickets.create", "s", changed)).await;
        let same = second_worker.call(world.call("tickets.create", "s", TICKET)).await;
        let polled = second_worker.poll(world.operation("s")).await;
        world.gate.resume();
        (mismatch, same, polled)
    };
    let (first, (mismatch, same, polled)) = tokio::join!(first, others);

    assert_eq!(mismatch.reason, Some(ReasonCode::IdempotencyKeyReusedWithDifferentRequest), "{mismatch:?}");
    assert_eq!(same.status, OutcomeStatus::InFlight, "{same:?}");
    assert_eq!(same.retry_after_seconds, Some((LEASE_MS / 1_000) as u32));
    assert_eq!(same.next_action, NextAction::Poll);
    assert_eq!(polled.status, OutcomeStatus::InFlight);
    assert_eq!(first.status, OutcomeStatus::Applied);
    assert_eq!(world.ledger().len(), 1);
    assert_eq!(world.ledger()[0].effect_reference, first.effect_reference.unwrap());
}

#[tokio::test(flavor = "current_thread")]
async fn equivalent_requests_replay_and_a_material_change_does_not() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    worker.call(world.call("tickets.create", "s", TICKET)).await;
    let reordered =
        "{ \"body\": \"Customer reports a duplicate charge.\",\n \"subject\" : \"Refund request\" }";
    let traced =
        r#"{"subject":"Refund request","body":"Customer reports a duplicate charge.","trace_id":"t-9"}"#;
    for arguments in [reordered, traced] {
        let outcome = worker.call(world.call("tickets.create", "s", arguments)).await;
        assert_eq!(outcome.status, OutcomeStatus::Replayed, "{arguments}: {outcome:?}");
    }
    let material =
        r#"{"queue":"support","subject":"Refund request!","body":"Customer reports a duplicate charge."}"#;
    let outcome = worker.call(world.call("tickets.create", "s", material)).await;
    assert_eq!(outcome.reason, Some(ReasonCode::IdempotencyKeyReusedWithDifferentRequest));
    assert_eq!(world.ledger().len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_new_tool_version_does_not_rerun_an_old_operation() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let first = worker.call(world.call("tickets.create", "s", TICKET)).await;
    let newer = ToolCall { tool_version: "2026-09-01".into(), ..world.call("tickets.create", "s", TICKET) };
    let outcome = worker.call(newer).await;
    assert_eq!(outcome.reason, Some(ReasonCode::ToolVersionChanged), "{outcome:?}");
    assert_eq!(outcome.next_action, NextAction::InspectOperation);
    assert_eq!(world.ledger().len(), 1);
    assert_eq!(world.record("s").tool_version, "2026-08-18");
    assert_eq!(first.status, OutcomeStatus::Applied);
}

#[tokio::test(flavor = "current_thread")]
async fn a_contract_that_allows_it_replays_an_applied_operation_across_versions() {
    let mut contracts = ContractSet::builtin();
    let mut old = contracts.get("tickets.create", "2026-08-18").unwrap().clone();
    old.replay_across_versions = true;
    contracts.insert(old);
    let world = World::builder().contracts(contracts).build().await;
    let worker = world.worker("worker-1");
    let newer =
        || ToolCall { tool_version: "2026-09-01".into(), ..world.call("tickets.create", "s", TICKET) };

    // Not applied yet (another worker holds the claim): no replay, a refusal.
    world.gate.pause_at("leave claim");
    let first = worker.call(world.call("tickets.create", "s", TICKET));
    let during = async {
        world.gate.paused().await;
        let outcome = world.worker("worker-2").call(newer()).await;
        world.gate.resume();
        outcome
    };
    let (first, during) = tokio::join!(first, during);
    assert_eq!(during.reason, Some(ReasonCode::ToolVersionChanged), "{during:?}");

    let after = worker.call(newer()).await;
    assert_eq!(after.status, OutcomeStatus::Replayed, "{after:?}");
    assert_eq!(after.effect_reference, first.effect_reference);
    assert_eq!(world.ledger().len(), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn an_unauthorized_call_is_rejected_before_any_record_exists() {
    let world = World::new().await;
    world.authorizer.revoke("agent-1");
    let outcome = world.worker("worker-1").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(outcome.reason, Some(ReasonCode::Unauthorized));
    assert_eq!(outcome.operation_key.as_deref(), Some(World::key("s").as_str()));
    assert!(world.records().is_empty());
    assert!(world.ledger().is_empty());
    assert!(!world.gate.boundaries().iter().any(|boundary| boundary.contains("claim")));
}

#[tokio::test(flavor = "current_thread")]
async fn a_permission_revoked_between_claim_and_effect_stops_the_effect() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    world.gate.pause_at("leave claim");
    let call = worker.call(world.call("tickets.create", "s", TICKET));
    let revoke = async {
        world.gate.paused().await;
        world.authorizer.revoke("agent-1");
        world.gate.resume();
    };
    let (outcome, ()) = tokio::join!(call, revoke);

    assert_eq!(outcome.reason, Some(ReasonCode::Unauthorized), "{outcome:?}");
    assert!(world.ledger().is_empty());
    let record = world.record("s");
    assert_eq!(
        (record.status, record.reason.as_deref()),
        (RecordStatus::FailedPermanent, Some("unauthorized"))
    );
    assert_eq!(world.authorizer.asked(), 2, "asked before the claim and again before the effect");

    // Granting again does not resurrect the operation: it failed for good, with no effect.
    world.authorizer.grant("agent-1");
    let retry = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(retry.reason, Some(ReasonCode::Unauthorized));
    assert!(world.ledger().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_stale_absolute_update_is_refused_and_duplicates_of_a_fresh_one_are_harmless() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let created = worker.call(world.call("tickets.create", "create", TICKET)).await;
    let ticket = created.effect_reference.unwrap();
    world.downstream.touch_ticket(&ticket).unwrap();

    let stale = format!(r#"{{"ticket_id":"{ticket}","status":"closed","expected_version":1}}"#);
    let refused = worker.call(world.call("tickets.set_status", "close_stale", &stale)).await;
    assert_eq!(refused.reason, Some(ReasonCode::PreconditionFailed), "{refused:?}");
    let record = world.record("close_stale");
    assert_eq!(
        (record.status, record.reason.as_deref()),
        (RecordStatus::FailedPermanent, Some("precondition_failed"))
    );
    let again = worker.call(world.call("tickets.set_status", "close_stale", &stale)).await;
    assert_eq!(again.reason, Some(ReasonCode::PreconditionFailed));

    let fresh = format!(r#"{{"ticket_id":"{ticket}","status":"closed","expected_version":2}}"#);
    let closed = worker.call(world.call("tickets.set_status", "close", &fresh)).await;
    let duplicate = worker.call(world.call("tickets.set_status", "close", &fresh)).await;
    assert_eq!((closed.status, duplicate.status), (OutcomeStatus::Applied, OutcomeStatus::Replayed));
    assert_eq!(closed.result, Some(json!({"ticket_id": ticket, "version": 3, "status": "closed"})));
    assert_eq!(world.effects_of(EffectKind::TicketStatusChanged).len(), 1);
    assert_eq!(world.effects_of(EffectKind::TicketStatusChanged)[0].versions.unwrap().if_match, Some(2));
    assert_eq!(world.downstream.ticket(&ticket).unwrap().status, "closed");
}

#[tokio::test(flavor = "current_thread")]
async fn a_downstream_refusal_fails_the_operation_for_good_without_an_effect() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let lower_case = r#"{"customer":"cus_1","amount_minor":500,"currency":"eur"}"#;
    let outcome = worker.call(world.call("payments.charge", "charge", lower_case)).await;
    assert_eq!(outcome.reason, Some(ReasonCode::DownstreamRejected), "{outcome:?}");
    assert_eq!(world.record("charge").status, RecordStatus::FailedPermanent);
    let retry = worker.call(world.call("payments.charge", "charge", lower_case)).await;
    assert_eq!(retry.reason, Some(ReasonCode::DownstreamRejected));
    assert_eq!(world.requests_to("POST", "/v1/charges").len(), 1, "a refusal is not retried");
    assert!(world.ledger().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn bad_input_is_rejected_as_invalid_without_a_record_or_an_effect() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    let base = || world.call("tickets.create", "s", TICKET);
    let raw = |text: &str| RawValue::from_string(text.to_owned()).unwrap();
    let cases: Vec<(&str, ToolCall)> = vec![
        ("empty tenant", ToolCall { tenant: String::new(), ..base() }),
        ("long step", ToolCall { step_id: "s".repeat(256), ..base() }),
        ("control character", ToolCall { workflow_id: "run\u{0}1".into(), ..base() }),
        ("empty call id", ToolCall { call_id: String::new(), ..base() }),
        ("arguments not an object", ToolCall { arguments: raw("[1,2]"), ..base() }),
        ("arguments a string", ToolCall { arguments: raw(r#""create a ticket""#), ..base() }),
        (
            "unknown argument",
            ToolCall { arguments: raw(r#"{"subject":"s","body":"b","colour":"red"}"#), ..base() },
        ),
        ("missing argument", ToolCall { arguments: raw(r#"{"subject":"s"}"#), ..base() }),
        ("wrong type", ToolCall { arguments: raw(r#"{"subject":7,"body":"b"}"#), ..base() }),
        ("unknown tool", ToolCall { tool: "tickets.delete".into(), ..base() }),
        ("unknown version", ToolCall { tool_version: "1999-01-01".into(), ..base() }),
    ];
    for (what, call) in cases {
        let outcome = worker.call(call).await;
        assert_eq!(outcome.status, OutcomeStatus::Rejected, "{what}: {outcome:?}");
        assert_eq!(outcome.reason, Some(ReasonCode::InvalidRequest), "{what}: {outcome:?}");
        assert!(outcome.message.is_some(), "{what}");
    }
    let bad_operation = OperationRef { step_id: "\u{1b}[2J".into(), ..world.operation("s") };
    for outcome in [worker.poll(bad_operation.clone()).await, worker.reconcile(bad_operation).await] {
        assert_eq!(outcome.reason, Some(ReasonCode::InvalidRequest), "{outcome:?}");
    }
    let missing = worker.poll(world.operation("never_called")).await;
    assert_eq!(missing.reason, Some(ReasonCode::InvalidRequest));
    assert_eq!(missing.operation_key.as_deref(), Some(World::key("never_called").as_str()));
    assert!(world.records().is_empty());
    assert!(world.downstream.requests().is_empty());
    assert!(world.ledger().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn a_poll_is_no_authorization_bypass() {
    let world = World::new().await;
    let worker = world.worker("worker-1");
    worker.call(world.call("tickets.create", "s", TICKET)).await;
    world.authorizer.revoke("agent-1");
    let polled = worker.poll(world.operation("s")).await;
    assert_eq!(polled.reason, Some(ReasonCode::Unauthorized));
    assert_eq!(polled.effect_reference, None);
    let retried = worker.call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(retried.reason, Some(ReasonCode::Unauthorized));
    assert_eq!(world.ledger().len(), 1);
}

/// A tool whose contract requires a human approval refuses a call without an `approval_id`
/// before anything is claimed or sent, and carries out one with it.
#[tokio::test(flavor = "current_thread")]
async fn a_tool_that_needs_approval_refuses_a_call_without_one() {
    let mut contracts = ContractSet::builtin();
    let mut create = contracts.get("tickets.create", "2026-08-18").unwrap().clone();
    create.approval_required = true;
    create.arguments.insert("approval_id".into(), protocol::ArgumentType::String);
    contracts.insert(create);
    let world = World::builder().contracts(contracts).build().await;
    let worker = world.worker("worker-1");

    let refused = worker.call(world.call("tickets.create", "unapproved", TICKET)).await;
    assert_eq!(
        (refused.status, refused.reason),
        (OutcomeStatus::Rejected, Some(ReasonCode::ApprovalRequired)),
        "{refused:?}"
    );
    assert!(world.records().is_empty(), "nothing is claimed");
    assert!(world.ledger().is_empty());

    let approved = TICKET.replace('{', r#"{"approval_id":"apr_1","#);
    let outcome = worker.call(world.call("tickets.create", "approved", &approved)).await;
    assert_eq!(outcome.status, OutcomeStatus::Applied, "{outcome:?}");
    assert_eq!(world.ledger().len(), 1);
}
