//! The reference executor in the real world's environment (`harness::real_env`): the fake
//! downstream on a loopback port, real time, a claim store in a file, the authorizer asked
//! over HTTP. The answer to a create is lost after the commit; the worker is dropped and
//! started again on the same store (a restart, as after a crash); the retry is told the
//! effect that exists, and the ledger holds one. A revocation at the downstream reaches the
//! executor.

use std::sync::Arc;
use std::time::Duration;

use executor::{ReferenceConfig, ReferenceFactory, StoreLocation};
use fake_downstream::{Downstream, DownstreamConfig, SystemClock};
use protocol::{ExecutorFactory, OutcomeStatus, ReasonCode, ToolCall};
use serde_json::json;
use wire::{HttpClient, HttpRequest, TcpAcceptor, TcpConnector};

fn call(step: &str, call_id: &str) -> ToolCall {
    let arguments = json!({"queue": "billing", "subject": "Duplicate charge", "body": "Customer reports a duplicate charge."});
    ToolCall {
        tenant: "acme".into(),
        environment: "production".into(),
        workflow_id: "run_1".into(),
        step_id: step.into(),
        tool: "tickets.create".into(),
        tool_version: "2026-08-18".into(),
        arguments: serde_json::value::to_raw_value(&arguments).expect("arguments"),
        actor: "agent-1".into(),
        call_id: call_id.into(),
        trace_id: None,
        attempt: 1,
    }
}

#[test]
fn the_reference_survives_a_lost_answer_and_a_restart_for_real() {
    let state = std::env::temp_dir().join(format!("replaylab-real-env-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).expect("a state directory");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let downstream =
            Downstream::new(DownstreamConfig::default(), Arc::new(SystemClock), Arc::new(TcpConnector));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("an address").port();
        tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.router()));
        let admin = HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", port);
        let world = |incarnation| harness::real_env::RealWorld {
            worker: "worker-1".into(),
            incarnation,
            downstream: ("127.0.0.1".into(), port),
            state_dir: state.clone(),
            operators: None,
            queue: None,
        };
        let factory = ReferenceFactory::new(
            StoreLocation::File(state.join("claims.db")),
            ReferenceConfig::default().with_downstream_timeout(Duration::from_millis(1_000)),
        )
        .expect("a claim store");

        // The first answer is lost after the downstream committed.
        let rule = json!({"match": {"path": "/v1/tickets"}, "action": "commit_then_drop", "times": 1});
        let installed = admin.send(HttpRequest::json(http::Method::POST, "/__admin/faults", &rule)).await;
        assert_eq!(installed.expect("the admin API answers").status, 201);
        let first = factory.start(world(0).worker_env());
        let answer = first.call(call("record_issue", "call_1")).await;
        assert_eq!(downstream.ledger().len(), 1, "the premise: the downstream committed ({answer:?})");
        assert!(
            matches!(answer.status, OutcomeStatus::Applied | OutcomeStatus::Unknown),
            "the lost answer is settled by a lookup or left unknown, never denied: {answer:?}"
        );
        drop(first);

        // A restart on the same store; the agent retries with a new model call id.
        let second = factory.start(world(1).worker_env());
        let retry = second.call(call("record_issue", "call_2")).await;
        assert!(retry.status.claims_success(), "{retry:?}");
        let reference = downstream.ledger()[0].effect_reference.clone();
        assert_eq!(retry.effect_reference.as_deref(), Some(reference.as_str()), "the effect that exists");
        assert_eq!(downstream.ledger().len(), 1, "one effect, however often delivered");

        // Revoked at the downstream's authorizer: the next call is refused, the replay too.
        let revoke = json!({"actor": "agent-1"});
        let revoked =
            admin.send(HttpRequest::json(http::Method::POST, "/__admin/authz/revoke", &revoke)).await;
        assert_eq!(revoked.expect("the admin API answers").status, 204);
        for (step, call_id) in [("another_issue", "call_3"), ("record_issue", "call_4")] {
            let refused = second.call(call(step, call_id)).await;
            assert_eq!(refused.status, OutcomeStatus::Rejected, "{step}: {refused:?}");
            assert_eq!(refused.reason, Some(ReasonCode::Unauthorized), "{step}");
        }
        assert_eq!(downstream.ledger().len(), 1);
    });
    let _ = std::fs::remove_dir_all(&state);
}
