//! `replaylab executor serve` as a real process, driven by an MCP client over stdio (issue
//! 14's crash test): the downstream commits a ticket and holds its answer; the server is
//! killed with SIGKILL while it waits; a new process (incarnation 1) on the same claim store
//! is asked again with a new model call id and names the one effect that exists.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_downstream::{Downstream, DownstreamConfig, SystemClock};
use protocol::mcp::{CallMeta, Manifest, CALL_META, MANIFEST_URI, POLL_TOOL, RECONCILE_TOOL};
use protocol::{Outcome, OutcomeStatus};
use rmcp::model::{CallToolRequestParams, CallToolResult, ReadResourceRequestParams, ResourceContents};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use wire::{HttpClient, HttpRequest, TcpAcceptor, TcpConnector};

/// Generous: a debug build on a loaded two-core machine.
const PATIENCE: Duration = Duration::from_secs(60);

struct Server {
    client: RunningService<RoleClient, ()>,
    pid: u32,
}

async fn start_server(state: &Path, port: u16, incarnation: u32) -> Server {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_replaylab"));
    command.args(["executor", "serve", "--transport", "stdio", "--store"]);
    command.arg(format!("sqlite:{}", state.join("claims.db").display()));
    for name in protocol::mcp::env::ALL {
        command.env_remove(name);
    }
    command
        .env(protocol::mcp::env::WORKER, "worker-1")
        .env(protocol::mcp::env::INCARNATION, incarnation.to_string())
        .env(protocol::mcp::env::STATE_DIR, state)
        .env(protocol::mcp::env::DOWNSTREAM_URL, format!("http://127.0.0.1:{port}"))
        .env(protocol::mcp::env::AUTHZ_URL, format!("http://127.0.0.1:{port}/v1/authz"))
        // Short, so that the new process may take the dead one's claim over soon.
        .env(protocol::mcp::env::LEASE_MS, "1000")
        // Longer than the test waits for the commit: the first process is still waiting
        // for its answer when it is killed.
        .env(protocol::mcp::env::DOWNSTREAM_TIMEOUT_MS, "20000");
    let transport = TokioChildProcess::new(command).expect("the server starts");
    let pid = transport.id().expect("a running child has a pid");
    let client = tokio::time::timeout(PATIENCE, ().serve(transport))
        .await
        .expect("the server initialises in time")
        .expect("the MCP handshake");
    Server { client, pid }
}

fn meta(call_id: &str, attempt: u32) -> serde_json::Map<String, serde_json::Value> {
    let call = CallMeta {
        version: 1,
        tenant: "acme".into(),
        environment: "production".into(),
        workflow_id: "run_827".into(),
        step_id: "record_issue".into(),
        actor: "agent-7".into(),
        tool_version: "2026-08-18".into(),
        call_id: call_id.into(),
        attempt,
        idempotency_key: CallMeta::key_of("acme", "production", "run_827", "record_issue"),
    };
    let mut meta = serde_json::Map::new();
    meta.insert(CALL_META.into(), serde_json::to_value(call).expect("a CallMeta"));
    meta
}

fn create(call_id: &str, attempt: u32) -> CallToolRequestParams {
    let arguments = json!({"queue": "billing", "subject": "Duplicate charge on order 1182", "body": "Customer reports a duplicate charge."});
    let serde_json::Value::Object(arguments) = arguments else { unreachable!("an object") };
    let mut params = CallToolRequestParams::new("tickets.create").with_arguments(arguments);
    params.meta = Some(meta(call_id, attempt).into());
    params
}

fn outcome(result: &CallToolResult) -> Outcome {
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let structured = result.structured_content.clone().expect("structuredContent");
    serde_json::from_value(structured).expect("structuredContent is an Outcome")
}

async fn call(peer: &Peer<RoleClient>, params: CallToolRequestParams) -> CallToolResult {
    tokio::time::timeout(PATIENCE, peer.call_tool(params))
        .await
        .expect("an answer in time")
        .expect("a tools/call result")
}

/// Whether the process runs no more: gone, or a zombie nobody has reaped yet.
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A state directory of the test's own (tests of this binary run in parallel).
fn state_dir(test: &str) -> PathBuf {
    let state = std::env::temp_dir().join(format!("replaylab-serve-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).expect("a state directory");
    state
}

#[tokio::test(flavor = "current_thread")]
async fn a_killed_server_restarted_on_its_store_names_the_one_effect() {
    let state = state_dir("crash");
    let downstream =
        Downstream::new(DownstreamConfig::default(), Arc::new(SystemClock), Arc::new(TcpConnector));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.router()));
    let admin = HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", port);

    let first = start_server(&state, port, 0).await;
    let tools = first.client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    for expected in ["tickets.create", "payments.charge", POLL_TOOL, RECONCILE_TOOL] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    assert!(!names.contains(&"messages.send"), "no queue consumer here: {names:?}");
    let read =
        first.client.read_resource(ReadResourceRequestParams::new(MANIFEST_URI)).await.expect("the manifest");
    let Some(ResourceContents::TextResourceContents { text, .. }) = read.contents.first() else {
        panic!("a text resource: {read:?}")
    };
    let manifest: Manifest = serde_json::from_str(text).expect("a Manifest");
    assert!(manifest.capabilities.reconcile, "{manifest:?}");
    assert_eq!(manifest.timing.expect("timing").lease_ms, 1000);

    // A call that does not name its operation is told what is missing.
    let arguments = json!({"queue": "billing", "subject": "s", "body": "b"});
    let serde_json::Value::Object(arguments) = arguments else { unreachable!("an object") };
    let bare =
        call(&first.client, CallToolRequestParams::new("tickets.create").with_arguments(arguments)).await;
    assert_eq!(bare.is_error, Some(true), "{bare:?}");
    let said = serde_json::to_string(&bare.content).expect("content");
    assert!(said.contains("missing _meta") && said.contains(CALL_META), "{said}");
    assert!(downstream.ledger().is_empty());

    // The downstream commits the ticket and holds its answer for 30 s.
    let rule = json!({"match": {"method": "POST", "path": "/v1/tickets"}, "action": "commit_then_delay", "delay": "30s", "times": 1});
    let installed = admin.send(HttpRequest::json(http::Method::POST, "/__admin/faults", &rule)).await;
    assert_eq!(installed.expect("the admin API answers").status, 201);
    let peer = first.client.peer().clone();
    let held = tokio::spawn(async move { peer.call_tool(create("call_1", 1)).await });
    eventually("the downstream commits the ticket", || downstream.ledger().len() == 1 || held.is_finished())
        .await;
    assert!(!held.is_finished(), "the answer is held: {:?}", held.await);

    // SIGKILL while the server waits for the answer.
    let killed = std::process::Command::new("kill").args(["-9", &first.pid.to_string()]).status();
    assert!(killed.expect("kill runs").success());
    eventually("the killed server is gone", || is_dead(first.pid)).await;
    let lost = tokio::time::timeout(PATIENCE, held).await.expect("the held call ends").expect("the task");
    assert!(lost.is_err(), "the killed server answered nothing: {lost:?}");
    let first_pid = first.pid;
    drop(first);

    // A new process, incarnation 1, on the same store; the agent retries with a new call id.
    let second = start_server(&state, port, 1).await;
    assert_ne!(second.pid, first_pid, "a new process");
    let effect = downstream.ledger()[0].effect_reference.clone();
    let deadline = Instant::now() + PATIENCE;
    let mut attempt = 2;
    let settled = loop {
        let answer = outcome(&call(&second.client, create(&format!("call_{attempt}"), attempt)).await);
        if answer.status.claims_success() {
            break answer;
        }
        assert!(
            matches!(answer.status, OutcomeStatus::InFlight | OutcomeStatus::Unknown),
            "only a wait or a reconciliation may come before the answer: {answer:?}"
        );
        assert!(Instant::now() < deadline, "no success claim in time: {answer:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        attempt += 1;
    };
    assert!(matches!(settled.status, OutcomeStatus::Replayed | OutcomeStatus::Applied), "{settled:?}");
    assert_eq!(settled.effect_reference.as_deref(), Some(effect.as_str()), "the effect that exists");
    assert_eq!(downstream.ledger().len(), 1, "one effect, however often delivered");

    // Poll names the same effect.
    let mut poll = CallToolRequestParams::new(POLL_TOOL);
    poll.meta = Some(meta("call_poll", 1).into());
    let polled = outcome(&call(&second.client, poll).await);
    assert_eq!(polled.effect_reference.as_deref(), Some(effect.as_str()), "{polled:?}");

    // Reconcile settles it against the downstream's records: the same effect.
    let mut reconcile = CallToolRequestParams::new(RECONCILE_TOOL);
    reconcile.meta = Some(meta("call_reconcile", 1).into());
    let reconciled = outcome(&call(&second.client, reconcile).await);
    assert!(reconciled.status.claims_success(), "{reconciled:?}");
    assert_eq!(reconciled.effect_reference.as_deref(), Some(effect.as_str()), "{reconciled:?}");

    // A tool the server does not serve is a protocol error, not an outcome.
    let mut queued = CallToolRequestParams::new("messages.send");
    queued.meta = Some(meta("call_queued", 1).into());
    let refused =
        tokio::time::timeout(PATIENCE, second.client.peer().call_tool(queued)).await.expect("in time");
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(downstream.ledger().len(), 1);

    let _ = second.client.cancel().await;
    let _ = std::fs::remove_dir_all(&state);
}

/// The command with none of replaylab's variables inherited from the test's environment.
fn bare_command(args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_replaylab"));
    command.args(args).stdin(std::process::Stdio::null());
    for name in protocol::mcp::env::ALL {
        command.env_remove(name);
    }
    command
}

#[test]
fn bad_flags_and_a_missing_environment_exit_2_before_any_work() {
    let state = state_dir("flags");
    let store = format!("sqlite:{}", state.join("claims.db").display());
    let check = |command: &mut std::process::Command, says: &str| {
        let output = command.output().expect("the command runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{says:?} in {stderr}");
        assert!(output.stdout.is_empty(), "nothing served");
    };
    check(&mut bare_command(&["executor", "serve", "--store", &store]), protocol::mcp::env::WORKER);
    let mut bad_url = bare_command(&["executor", "serve", "--store", &store]);
    bad_url
        .env(protocol::mcp::env::WORKER, "worker-1")
        .env(protocol::mcp::env::INCARNATION, "0")
        .env(protocol::mcp::env::STATE_DIR, &state)
        .env(protocol::mcp::env::DOWNSTREAM_URL, "127.0.0.1:8080");
    check(&mut bad_url, protocol::mcp::env::DOWNSTREAM_URL);
    check(
        &mut bare_command(&["executor", "serve", "--transport", "http", "--store", &store]),
        protocol::mcp::env::MCP_LISTEN,
    );
    check(&mut bare_command(&["executor", "serve", "--store", "claims.db"]), "sqlite:PATH");
    assert!(!state.join("claims.db").exists(), "no store was created");
    let _ = std::fs::remove_dir_all(&state);
}
