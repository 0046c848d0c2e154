//! The Postgres claim store under a real race, outside the matrix (issue 17): 8 `replaylab
//! executor serve` processes on one Postgres database, each asked to create the same 500
//! tickets at once (all 8 deliveries of a key are in flight together), against a downstream
//! that ignores idempotency keys, so only the claim store stands between a duplicate delivery
//! and a second ticket. Every key must have exactly one effect in the downstream's ledger, one
//! `applied` answer, and a terminal record: no claim left pending.
//!
//! Needs a Postgres server: `REPLAYLAB_TEST_POSTGRES` (see `executor::test_postgres`); outside
//! CI the test says how to start one and is skipped without it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use executor::{ClaimStore, RecordStatus, StoreLocation};
use fake_downstream::{Downstream, DownstreamConfig, IdempotencyMode, Service, ServiceConfig, SystemClock};
use protocol::mcp::{CallMeta, CALL_META};
use protocol::{Outcome, OutcomeStatus};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use wire::{TcpAcceptor, TcpConnector};

const PROCESSES: usize = 8;
const KEYS: usize = 500;
/// Generous: a debug build on a loaded two-core machine.
const PATIENCE: Duration = Duration::from_secs(120);

async fn start(
    url: &str,
    schema: &str,
    worker: usize,
    port: u16,
    state: &std::path::Path,
) -> RunningService<RoleClient, ()> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaylab"));
    command.args(["executor", "serve", "--transport", "stdio", "--store", url, "--schema", schema]);
    for name in protocol::mcp::env::ALL {
        command.env_remove(name);
    }
    command
        .env(protocol::mcp::env::WORKER, format!("worker-{worker}"))
        .env(protocol::mcp::env::INCARNATION, "0")
        .env(protocol::mcp::env::STATE_DIR, state)
        .env(protocol::mcp::env::DOWNSTREAM_URL, format!("http://127.0.0.1:{port}"))
        .env(protocol::mcp::env::SERVICES, r#"{"tickets": {"honours_keys": false, "receipts": true}}"#)
        // Longer than the test: a claim is lost only if a process stops, and none does.
        .env(protocol::mcp::env::LEASE_MS, "600000")
        .env(protocol::mcp::env::RETENTION_MS, "3600000");
    let transport = TokioChildProcess::new(command).expect("the server starts");
    tokio::time::timeout(PATIENCE, ().serve(transport))
        .await
        .expect("the server initialises in time")
        .expect("the MCP handshake")
}

fn create(key: usize, worker: usize) -> CallToolRequestParams {
    let workflow = format!("race_{key}");
    let call = CallMeta {
        version: 1,
        tenant: "acme".into(),
        environment: "production".into(),
        workflow_id: workflow.clone(),
        step_id: "record_issue".into(),
        actor: "agent-7".into(),
        tool_version: "2026-08-18".into(),
        call_id: format!("call_{key}_{worker}"),
        attempt: 1,
        idempotency_key: CallMeta::key_of("acme", "production", &workflow, "record_issue"),
    };
    let mut meta = serde_json::Map::new();
    meta.insert(CALL_META.into(), serde_json::to_value(call).expect("a CallMeta"));
    let arguments = json!({"queue": "billing", "subject": format!("race {key}"), "body": "Customer reports a duplicate charge."});
    let serde_json::Value::Object(arguments) = arguments else { unreachable!("an object") };
    let mut params = CallToolRequestParams::new("tickets.create").with_arguments(arguments);
    params.meta = Some(meta.into());
    params
}

#[tokio::test(flavor = "current_thread")]
async fn eight_processes_racing_on_every_key_make_one_effect_each_and_leave_no_claim_pending() {
    let test = "eight_processes_racing_on_every_key_make_one_effect_each_and_leave_no_claim_pending";
    let Some(url) = executor::test_postgres(test) else { return };
    let schema = executor::fresh_schema("race");
    let state: PathBuf = std::env::temp_dir().join(format!("replaylab-postgres-race-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).expect("a state directory");

    let mut config = DownstreamConfig::default();
    config.set_service(
        Service::Tickets,
        ServiceConfig { idempotency: IdempotencyMode::Ignored, receipts: true },
    );
    let downstream = Downstream::new(config, Arc::new(SystemClock), Arc::new(TcpConnector));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.router()));

    let mut servers = Vec::new();
    for worker in 0..PROCESSES {
        servers.push(start(&url, &schema, worker, port, &state).await);
    }

    let began = Instant::now();
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    let mut applied_per_key = vec![0usize; KEYS];
    for (key, applied) in applied_per_key.iter_mut().enumerate() {
        let mut calls = tokio::task::JoinSet::new();
        for (worker, server) in servers.iter().enumerate() {
            let peer = server.peer().clone();
            calls.spawn(
                async move { tokio::time::timeout(PATIENCE, peer.call_tool(create(key, worker))).await },
            );
        }
        for answer in calls.join_all().await {
            let result = answer.expect("an answer in time").expect("a tools/call result");
            assert_eq!(result.is_error, Some(false), "{result:?}");
            let outcome: Outcome =
                serde_json::from_value(result.structured_content.clone().expect("structuredContent"))
                    .expect("an Outcome");
            assert!(
                matches!(
                    outcome.status,
                    OutcomeStatus::Applied | OutcomeStatus::Replayed | OutcomeStatus::InFlight
                ),
                "key {key}: a racing delivery is applied once, else replayed or in flight: {outcome:?}"
            );
            *applied += usize::from(outcome.status == OutcomeStatus::Applied);
            *statuses.entry(outcome.status.as_str().to_owned()).or_default() += 1;
        }
    }
    let elapsed = began.elapsed();
    for server in servers {
        let _ = server.cancel().await;
    }

    // The ledger: one effect per key, whichever process sent it.
    let ledger = downstream.ledger();
    let mut effects_per_request: BTreeMap<&str, usize> = BTreeMap::new();
    for effect in &ledger {
        *effects_per_request.entry(effect.request_digest.as_str()).or_default() += 1;
    }
    let duplicated = effects_per_request.values().filter(|count| **count > 1).count();
    // The store: every claim settled, none left pending past its lease or before it.
    let store =
        ClaimStore::open(&StoreLocation::Postgres { url, schema: Some(schema) }).expect("the store opens");
    let records = store.records().await.expect("the records");
    let applied_records = records.iter().filter(|record| record.status == RecordStatus::Applied).count();
    let pending = records.iter().filter(|record| record.status == RecordStatus::Pending).count();
    eprintln!(
        "postgres race: {PROCESSES} processes x {KEYS} keys = {} calls in {:.1} s ({:.0} calls/s); answers {statuses:?}; \
         ledger: {} effects for {} distinct requests, {duplicated} duplicated; store: {} records, {applied_records} applied, \
         {pending} pending",
        PROCESSES * KEYS,
        elapsed.as_secs_f64(),
        (PROCESSES * KEYS) as f64 / elapsed.as_secs_f64(),
        ledger.len(),
        effects_per_request.len(),
        records.len(),
    );
    assert_eq!(duplicated, 0, "a key with two effects");
    assert_eq!((ledger.len(), effects_per_request.len()), (KEYS, KEYS), "one effect for each key");
    let not_once: Vec<usize> = (0..KEYS).filter(|key| applied_per_key[*key] != 1).collect();
    assert!(not_once.is_empty(), "keys not answered applied exactly once: {not_once:?}");
    assert_eq!((records.len(), applied_records, pending), (KEYS, KEYS, 0), "every claim settled");
    let _ = std::fs::remove_dir_all(&state);
}
