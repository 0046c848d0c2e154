//! The Python MCP examples as real processes, driven by an MCP client over stdio (and, once,
//! over streamable HTTP) against the fake downstream on a loopback port:
//!
//! - `examples/python-mcp-executor` (careful): its manifest and every answer follow the
//!   checked-in conventions schema; a ticket is `applied` with the ledger's effect; a
//!   changed request under the same operation is refused; the downstream commits a ticket
//!   and holds the answer, the process is killed with SIGKILL, a new process (incarnation 1)
//!   on the same state directory is asked again with a new call id and names the one effect.
//! - the same server over streamable HTTP (`--transport http`, `REPLAYLAB_MCP_LISTEN`): its
//!   manifest and a ticket `applied`, then a second session with the same process asking
//!   again gets `replayed`, one effect.
//! - the same server where the charge service ignores keys and keeps no receipts
//!   (`REPLAYLAB_SERVICES`): a charge whose answer is lost after it committed is `unknown`,
//!   handed over to the operators' queue (`REPLAYLAB_OPERATORS_URL`) by the call itself, once,
//!   and neither a retry, a poll nor a reconcile resends it or claims success.
//! - `examples/python-mcp-naive`: the same lost answer and retry make a second ticket (the
//!   ledger holds two): why it fails the matrix.
//!
//! The Python environment comes from `.ci/python-examples` (`REPLAYLAB_PYTHON`, or
//! `target/python-venv/bin/python`). Without it the tests say how to set it up and pass,
//! except under `CI`, where they fail.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_downstream::{Downstream, DownstreamConfig, IdempotencyMode, ServiceConfig, SystemClock};
use protocol::mcp::{CallMeta, Manifest, CALL_META, MANIFEST_URI, POLL_TOOL, RECONCILE_TOOL};
use protocol::{Outcome, OutcomeStatus, ReasonCode};
use rmcp::model::{CallToolRequestParams, CallToolResult, ReadResourceRequestParams, ResourceContents};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use wire::{HttpClient, HttpRequest, TcpAcceptor, TcpConnector};

/// Generous: a loaded two-core machine starting Python.
const PATIENCE: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv's python, or `None` (after saying how to set it up) when there is none. Under
/// `CI` a missing environment fails the test.
fn python() -> Option<PathBuf> {
    let python = match std::env::var_os("REPLAYLAB_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => root().join("target/python-venv/bin/python"),
    };
    let ready = std::process::Command::new(&python)
        .args(["-c", "import mcp, rfc8785"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|output| output.status.success());
    if ready {
        return Some(python);
    }
    let how = format!(
        "the Python examples' environment is not set up ({} cannot import mcp and rfc8785): run \
         `.ci/python-examples` from the repository root (it creates target/python-venv), or set \
         REPLAYLAB_PYTHON to a python that has examples/python-mcp-executor/requirements.lock installed",
        python.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{how}");
    eprintln!("SKIPPED: {how}");
    None
}

/// The checked-in conventions schema (not the generated one: the files users read).
fn validator() -> jsonschema::Validator {
    let path = root().join("protocol/schema/mcp.schema.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    jsonschema::validator_for(&schema).expect("the schema is a JSON Schema")
}

/// Holds `document` to the schema's `call_meta`, `outcome` or `manifest`.
fn conforms(validator: &jsonschema::Validator, name: &str, document: &Value) {
    let wrapped = json!({ name: document });
    let errors: Vec<String> = validator.iter_errors(&wrapped).map(|error| error.to_string()).collect();
    assert!(errors.is_empty(), "{name} breaks the conventions: {errors:#?}\n{document:#}");
}

/// A fake downstream on a loopback port (business API and `/__admin`), and a client for it.
struct Service {
    downstream: Downstream,
    port: u16,
    admin: HttpClient,
}

async fn service() -> Service {
    service_with(DownstreamConfig::default()).await
}

async fn service_with(config: DownstreamConfig) -> Service {
    let downstream = Downstream::new(config, Arc::new(SystemClock), Arc::new(TcpConnector));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.router()));
    let admin = HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", port);
    Service { downstream, port, admin }
}

impl Service {
    /// The next `POST /v1/tickets` is committed and its answer held for 30 s.
    async fn hold_next_ticket_answer(&self) {
        let rule = json!({"match": {"method": "POST", "path": "/v1/tickets"}, "action": "commit_then_delay", "delay": "30s", "times": 1});
        self.install(&rule).await;
    }

    /// The next `POST /v1/charges` is committed, then its connection dropped: no answer.
    async fn drop_next_charge_answer(&self) {
        let rule = json!({"match": {"method": "POST", "path": "/v1/charges"}, "action": "commit_then_drop", "times": 1});
        self.install(&rule).await;
    }

    async fn install(&self, rule: &Value) {
        let installed = self.admin.send(HttpRequest::json(http::Method::POST, "/__admin/faults", rule)).await;
        assert_eq!(installed.expect("the admin API answers").status, 201);
    }
}

/// An operators' queue on a loopback port: its URL, and the entries filed with it.
async fn operators() -> (String, Arc<Mutex<Vec<Value>>>) {
    let filed = Arc::new(Mutex::new(Vec::new()));
    let keep = filed.clone();
    let router = axum::Router::new().route(
        "/v1/reconciliations",
        axum::routing::post(move |body: axum::body::Bytes| {
            let keep = keep.clone();
            async move {
                let entry: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                keep.lock().expect("the entries").push(entry);
                http::StatusCode::ACCEPTED
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), router));
    (format!("http://127.0.0.1:{port}/v1/reconciliations"), filed)
}

struct Server {
    client: RunningService<RoleClient, ()>,
    pid: u32,
}

/// `examples/<example>/server.py` as a worker process with the environment of docs/mcp.md
/// section 5 (and `extra` variables).
fn command(
    python: &Path,
    example: &str,
    state: &Path,
    port: u16,
    incarnation: u32,
    extra: &[(&str, &str)],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(python);
    command.arg(root().join("examples").join(example).join("server.py"));
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
        .env(protocol::mcp::env::RETENTION_MS, "60000")
        // Longer than the test waits for the commit: the first process is still waiting for
        // its answer when it is killed.
        .env(protocol::mcp::env::DOWNSTREAM_TIMEOUT_MS, "20000")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    for (name, value) in extra {
        command.env(name, value);
    }
    command
}

/// Starts `examples/<example>/server.py` (see `command`) over stdio; its stderr goes to
/// `server-<incarnation>.log` in the state dir.
async fn start(
    python: &Path,
    example: &str,
    state: &Path,
    port: u16,
    incarnation: u32,
    extra: &[(&str, &str)],
) -> Server {
    let command = command(python, example, state, port, incarnation, extra);
    let log = std::fs::File::create(state.join(format!("server-{incarnation}.log"))).expect("a log file");
    let (transport, _) = TokioChildProcess::builder(command).stderr(log).spawn().expect("the server starts");
    let pid = transport.id().expect("a running child has a pid");
    let client = match tokio::time::timeout(PATIENCE, ().serve(transport)).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => panic!("the MCP handshake: {error}\n{}", logs(state)),
        Err(_) => panic!("the server initialises in time\n{}", logs(state)),
    };
    Server { client, pid }
}

/// What the servers wrote on stderr, for a failure's message.
fn logs(state: &Path) -> String {
    let mut text = String::new();
    for incarnation in 0..2 {
        if let Ok(log) = std::fs::read_to_string(state.join(format!("server-{incarnation}.log"))) {
            text.push_str(&format!("--- server-{incarnation}.log\n{log}"));
        }
    }
    text
}

fn meta(step: &str, call_id: &str, attempt: u32, tool_version: &str) -> CallMeta {
    CallMeta {
        version: 1,
        tenant: "acme".into(),
        environment: "production".into(),
        workflow_id: "run_827".into(),
        step_id: step.into(),
        actor: "agent-7".into(),
        tool_version: tool_version.into(),
        call_id: call_id.into(),
        attempt,
        idempotency_key: CallMeta::key_of("acme", "production", "run_827", step),
    }
}

/// A `tools/call` of `tool` naming the operation in `_meta`, whose `_meta` is first held to
/// the schema.
fn request(
    validator: &jsonschema::Validator,
    tool: &str,
    arguments: Value,
    meta: &CallMeta,
) -> CallToolRequestParams {
    let meta = serde_json::to_value(meta).expect("a CallMeta");
    conforms(validator, "call_meta", &meta);
    let Value::Object(arguments) = arguments else { panic!("arguments are an object") };
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let mut map = serde_json::Map::new();
    map.insert(CALL_META.into(), meta);
    params.meta = Some(map.into());
    params
}

fn ticket(subject: &str) -> Value {
    json!({"queue": "billing", "subject": subject, "body": "Customer reports a duplicate charge."})
}

async fn call(peer: &Peer<RoleClient>, params: CallToolRequestParams) -> CallToolResult {
    tokio::time::timeout(PATIENCE, peer.call_tool(params))
        .await
        .expect("an answer in time")
        .expect("a tools/call result")
}

/// The answer's outcome: `isError: false`, and `structuredContent` that follows the schema.
fn outcome(validator: &jsonschema::Validator, result: &CallToolResult) -> Outcome {
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let structured = result.structured_content.clone().expect("structuredContent");
    conforms(validator, "outcome", &structured);
    serde_json::from_value(structured).expect("structuredContent is an Outcome")
}

/// Whether the process runs no more: gone, or a zombie nobody has reaped yet.
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Sends `request` (whose answer the downstream will hold), waits until `committed`, kills the
/// server `pid` with SIGKILL while the answer is still held, and checks that the call got no
/// answer.
async fn kill_while_the_answer_is_held(
    peer: &Peer<RoleClient>,
    request: CallToolRequestParams,
    pid: u32,
    mut committed: impl FnMut() -> bool,
) {
    let peer = peer.clone();
    let held = tokio::spawn(async move { peer.call_tool(request).await });
    eventually("the downstream commits the ticket", || committed() || held.is_finished()).await;
    assert!(!held.is_finished(), "the answer is held: {:?}", held.await);
    kill(pid);
    eventually("the killed server is gone", || is_dead(pid)).await;
    let lost = tokio::time::timeout(PATIENCE, held).await.expect("the held call ends").expect("the task");
    assert!(lost.is_err(), "the killed server answered nothing: {lost:?}");
}

/// Calls `tool` with `arguments` and `meta` (both checked against the schema), and reads the
/// answer's outcome (checked too).
async fn ask(
    validator: &jsonschema::Validator,
    peer: &Peer<RoleClient>,
    tool: &str,
    arguments: Value,
    meta: &CallMeta,
) -> Outcome {
    outcome(validator, &call(peer, request(validator, tool, arguments, meta)).await)
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn kill(pid: u32) {
    let killed = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
    assert!(killed.expect("kill runs").success());
}

/// A state directory of the test's own (the tests of this file run in parallel).
fn state_dir(test: &str) -> PathBuf {
    let state = std::env::temp_dir().join(format!("replaylab-python-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).expect("a state directory");
    state
}

/// Every field a success's result shares with what the downstream committed has its value.
fn faithful(result: Option<&Value>, committed: &Value) {
    let Some(Value::Object(result)) = result else { panic!("a success carries its result: {result:?}") };
    assert!(!result.is_empty(), "a result with the contract's fields");
    for (field, value) in result {
        assert_eq!(Some(value), committed.get(field), "{field}: {result:?} vs committed {committed}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_careful_executor_survives_a_kill_between_commit_and_answer() {
    let Some(python) = python() else { return };
    let started = Instant::now();
    let validator = validator();
    let state = state_dir("careful");
    let service = service().await;
    let ledger = || service.downstream.ledger();

    let first = start(&python, "python-mcp-executor", &state, service.port, 0, &[]).await;
    let tools = first.client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    for expected in [
        "tickets.create",
        "tickets.set_status",
        "payments.charge",
        "messages.send",
        "jobs.submit",
        POLL_TOOL,
        RECONCILE_TOOL,
        protocol::mcp::CONSUME_TOOL,
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }

    // The manifest follows the conventions and says what the server does.
    let read =
        first.client.read_resource(ReadResourceRequestParams::new(MANIFEST_URI)).await.expect("the manifest");
    let Some(ResourceContents::TextResourceContents { text, .. }) = read.contents.first() else {
        panic!("a text resource: {read:?}")
    };
    let document: Value = serde_json::from_str(text).expect("the manifest is JSON");
    conforms(&validator, "manifest", &document);
    let manifest: Manifest = serde_json::from_value(document).expect("a Manifest");
    let capabilities = &manifest.capabilities;
    assert!(
        capabilities.reconcile
            && capabilities.delayed_jobs
            && capabilities.queue_consumer
            && capabilities.webhooks,
        "{manifest:?}"
    );
    let declared = capabilities.tools.clone().expect("the manifest names its tools");
    assert_eq!(
        declared.into_iter().collect::<Vec<_>>(),
        ["jobs.submit", "messages.send", "payments.charge", "tickets.create", "tickets.set_status"]
    );
    assert_eq!(manifest.timing.expect("timing").lease_ms, 1000, "the lease of the environment");

    // A call that does not name its operation is told what is missing, and nothing happens.
    let Value::Object(arguments) = ticket("s") else { unreachable!("an object") };
    let bare =
        call(first.client.peer(), CallToolRequestParams::new("tickets.create").with_arguments(arguments))
            .await;
    assert_eq!(bare.is_error, Some(true), "{bare:?}");
    let said = serde_json::to_string(&bare.content).expect("content");
    assert!(said.contains("missing _meta") && said.contains(CALL_META), "{said}");
    assert!(ledger().is_empty());

    // A ticket: applied, with the effect the ledger holds and the result it committed.
    let version = "2026-08-18";
    let peer = first.client.peer().clone();
    let applied = ask(
        &validator,
        &peer,
        "tickets.create",
        ticket("Refund"),
        &meta("record_issue", "call_1", 1, version),
    )
    .await;
    assert_eq!(applied.status, OutcomeStatus::Applied, "{applied:?}\n{}", logs(&state));
    let effects = ledger();
    assert_eq!(effects.len(), 1);
    assert_eq!(applied.effect_reference.as_deref(), Some(effects[0].effect_reference.as_str()));
    assert_eq!(
        effects[0].idempotency_key.as_deref(),
        Some("acme/production/run_827/record_issue"),
        "the operation key goes downstream as the Idempotency-Key"
    );
    faithful(applied.result.as_ref(), &effects[0].answer);

    // Delivered again (a new model call id, the key also as an argument): replayed, no new effect.
    let mut again = ticket("Refund");
    again["idempotency_key"] = json!("acme/production/run_827/record_issue");
    let replayed =
        ask(&validator, &peer, "tickets.create", again, &meta("record_issue", "call_2", 2, version)).await;
    assert_eq!(replayed.status, OutcomeStatus::Replayed, "{replayed:?}");
    assert_eq!(replayed.effect_reference, applied.effect_reference);
    assert_eq!(replayed.result, applied.result, "a replay returns what was committed");

    // A changed request under the same operation is refused, and so is another version whose
    // effect differs.
    let changed = ask(
        &validator,
        &peer,
        "tickets.create",
        ticket("Refund!"),
        &meta("record_issue", "call_3", 1, version),
    )
    .await;
    assert_eq!(changed.status, OutcomeStatus::Rejected, "{changed:?}");
    assert_eq!(changed.reason, Some(ReasonCode::IdempotencyKeyReusedWithDifferentRequest), "{changed:?}");
    let upgraded = ask(
        &validator,
        &peer,
        "tickets.create",
        ticket("Refund"),
        &meta("record_issue", "call_4", 1, "2026-09-01"),
    )
    .await;
    assert_eq!(upgraded.reason, Some(ReasonCode::ToolVersionChanged), "{upgraded:?}");
    assert_eq!(ledger().len(), 1, "a refused request makes no effect");

    // The downstream commits the next ticket and holds its answer; the process is killed.
    service.hold_next_ticket_answer().await;
    let held_request = request(
        &validator,
        "tickets.create",
        ticket("Lost answer"),
        &meta("lost_answer", "call_5", 1, version),
    );
    kill_while_the_answer_is_held(&peer, held_request, first.pid, || ledger().len() == 2).await;
    let first_pid = first.pid;
    drop(first);

    // A new process, incarnation 1, on the same state; the agent retries with a new call id.
    let second = start(&python, "python-mcp-executor", &state, service.port, 1, &[]).await;
    assert_ne!(second.pid, first_pid, "a new process");
    let effect = ledger()[1].clone();
    let deadline = Instant::now() + PATIENCE;
    let mut attempt = 2;
    let settled = loop {
        let retry = request(
            &validator,
            "tickets.create",
            ticket("Lost answer"),
            &meta("lost_answer", &format!("call_{}", 4 + attempt), attempt, version),
        );
        let answer = outcome(&validator, &call(second.client.peer(), retry).await);
        if answer.status != OutcomeStatus::InFlight {
            break answer;
        }
        assert!(Instant::now() < deadline, "still in flight: {answer:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        attempt += 1;
    };
    assert_eq!(settled.status, OutcomeStatus::Replayed, "{settled:?}\n{}", logs(&state));
    assert_eq!(
        settled.effect_reference.as_deref(),
        Some(effect.effect_reference.as_str()),
        "the effect that exists"
    );
    faithful(settled.result.as_ref(), &effect.answer);
    assert_eq!(ledger().len(), 2, "one effect per operation, however often delivered");

    // Poll and reconcile name the same effect.
    for tool in [POLL_TOOL, RECONCILE_TOOL] {
        let asked = request(&validator, tool, json!({}), &meta("lost_answer", "call_ask", 1, version));
        let answer = outcome(&validator, &call(second.client.peer(), asked).await);
        assert_eq!(answer.status, OutcomeStatus::Replayed, "{tool}: {answer:?}");
        assert_eq!(answer.effect_reference.as_deref(), Some(effect.effect_reference.as_str()), "{tool}");
    }
    assert_eq!(ledger().len(), 2);

    let _ = second.client.cancel().await;
    let _ = std::fs::remove_dir_all(&state);
    eprintln!("careful executor: {:.1} s", started.elapsed().as_secs_f64());
}

/// A loopback port free now, for the server to bind (the black-box runner's `{port}`).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("an address").port()
}

/// An MCP session over streamable HTTP with the server starting at `listen`: once its port
/// accepts connections, the handshake at `http://{listen}/mcp` (as the black-box runner does).
async fn connect_http(listen: &str, state: &Path) -> RunningService<RoleClient, ()> {
    let url = format!("http://{listen}{}", protocol::mcp::HTTP_PATH);
    let connect = async {
        while tokio::net::TcpStream::connect(listen).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ().serve(StreamableHttpClientTransport::from_uri(url.clone())).await
    };
    match tokio::time::timeout(PATIENCE, connect).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => panic!("the MCP handshake at {url}: {error}\n{}", logs(state)),
        Err(_) => panic!("the server at {url} initialises in time\n{}", logs(state)),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_careful_executor_serves_streamable_http() {
    let Some(python) = python() else { return };
    let started = Instant::now();
    let validator = validator();
    let state = state_dir("http");
    let service = service().await;
    let ledger = || service.downstream.ledger();

    // `--transport http`, the address in REPLAYLAB_MCP_LISTEN; stdout and stderr to the log.
    let listen = format!("127.0.0.1:{}", free_port());
    let mut command = command(
        &python,
        "python-mcp-executor",
        &state,
        service.port,
        0,
        &[(protocol::mcp::env::MCP_LISTEN, &listen)],
    );
    let log = std::fs::File::create(state.join("server-0.log")).expect("a log file");
    let stdout = log.try_clone().expect("the log file, shared");
    command.args(["--transport", "http"]).stdin(Stdio::null()).stdout(stdout).stderr(log).kill_on_drop(true);
    let mut process = command.spawn().expect("the server starts");

    // The manifest, over HTTP, follows the conventions.
    let first = connect_http(&listen, &state).await;
    let read =
        first.peer().read_resource(ReadResourceRequestParams::new(MANIFEST_URI)).await.expect("the manifest");
    let Some(ResourceContents::TextResourceContents { text, .. }) = read.contents.first() else {
        panic!("a text resource: {read:?}")
    };
    let document: Value = serde_json::from_str(text).expect("the manifest is JSON");
    conforms(&validator, "manifest", &document);

    // A ticket: applied, with the effect the ledger holds and the result it committed.
    let version = "2026-08-18";
    let create = |call_id: &str, attempt| {
        request(
            &validator,
            "tickets.create",
            ticket("Over HTTP"),
            &meta("over_http", call_id, attempt, version),
        )
    };
    let applied = outcome(&validator, &call(first.peer(), create("call_1", 1)).await);
    assert_eq!(applied.status, OutcomeStatus::Applied, "{applied:?}\n{}", logs(&state));
    let effects = ledger();
    assert_eq!(effects.len(), 1);
    assert_eq!(applied.effect_reference.as_deref(), Some(effects[0].effect_reference.as_str()));
    faithful(applied.result.as_ref(), &effects[0].answer);

    // A second session with the same process, the first still open: the same executor
    // answers it, so the operation is replayed, not carried out again.
    let second = connect_http(&listen, &state).await;
    let replayed = outcome(&validator, &call(second.peer(), create("call_2", 2)).await);
    assert_eq!(replayed.status, OutcomeStatus::Replayed, "{replayed:?}\n{}", logs(&state));
    assert_eq!(replayed.effect_reference, applied.effect_reference);
    assert_eq!(replayed.result, applied.result, "a replay returns what was committed");
    assert_eq!(ledger().len(), 1, "one effect per operation, whichever session asks");

    let _ = first.cancel().await;
    let _ = second.cancel().await;
    assert!(process.try_wait().expect("the process's state").is_none(), "a session's end ends no process");
    process.kill().await.expect("the server is stopped");
    let _ = std::fs::remove_dir_all(&state);
    eprintln!("careful executor over HTTP: {:.1} s", started.elapsed().as_secs_f64());
}

#[tokio::test(flavor = "current_thread")]
async fn the_careful_executor_hands_over_what_nothing_can_settle() {
    let Some(python) = python() else { return };
    let started = Instant::now();
    let validator = validator();
    let state = state_dir("hand-over");
    let config = DownstreamConfig {
        charges: ServiceConfig { idempotency: IdempotencyMode::Ignored, receipts: false },
        ..DownstreamConfig::default()
    };
    let service = service_with(config).await;
    let ledger = || service.downstream.ledger();
    let (operators_url, filed) = operators().await;
    let filed = || filed.lock().expect("the entries").clone();
    let services = r#"{"tickets": {"honours_keys": true, "receipts": true},
        "charges": {"honours_keys": false, "receipts": false}}"#;
    let server = start(
        &python,
        "python-mcp-executor",
        &state,
        service.port,
        0,
        &[("REPLAYLAB_SERVICES", services), ("REPLAYLAB_OPERATORS_URL", &operators_url)],
    )
    .await;
    let peer = server.client.peer().clone();
    let version = "2026-08-18";
    let charge = || json!({"customer": "cus_42", "amount_minor": 5000, "currency": "EUR"});
    let key = "acme/production/run_827/charge_fee";

    // The charge commits and its answer is lost: nothing can tell whether it happened.
    service.drop_next_charge_answer().await;
    let first =
        ask(&validator, &peer, "payments.charge", charge(), &meta("charge_fee", "call_1", 1, version)).await;
    assert_eq!(first.status, OutcomeStatus::Unknown, "{first:?}\n{}", logs(&state));
    assert_eq!(first.operation_key.as_deref(), Some(key));
    assert_eq!(ledger().len(), 1, "the charge committed");
    // Handed over by the call itself, before its answer: under the key the answer names.
    let entries = filed();
    assert_eq!(entries.len(), 1, "{entries:?}\n{}", logs(&state));
    assert_eq!(entries[0]["tenant"], "acme", "{entries:?}");
    assert_eq!(entries[0]["operation_key"], key, "{entries:?}");
    assert!(entries[0]["finding"].as_str().is_some_and(|finding| !finding.is_empty()), "{entries:?}");

    // A retry (a new model call id), a poll and a reconcile: still unknown, nothing resent,
    // and the operation is not filed again.
    let retry = request(&validator, "payments.charge", charge(), &meta("charge_fee", "call_2", 2, version));
    let again = outcome(&validator, &call(&peer, retry).await);
    assert_eq!(again.status, OutcomeStatus::Unknown, "{again:?}");
    for tool in [POLL_TOOL, RECONCILE_TOOL] {
        let asked = request(&validator, tool, json!({}), &meta("charge_fee", "call_ask", 1, version));
        let answer = outcome(&validator, &call(&peer, asked).await);
        assert_eq!(answer.status, OutcomeStatus::Unknown, "{tool}: {answer:?}");
    }
    // Longer than the background reconciliation's first look (a second after the record
    // last changed): it leaves the operation alone too.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(ledger().len(), 1, "never resent to a service that ignores keys\n{}", logs(&state));
    assert_eq!(filed().len(), 1, "one entry per operation: {:?}", filed());

    let _ = server.client.cancel().await;
    let _ = std::fs::remove_dir_all(&state);
    eprintln!("hand-over: {:.1} s", started.elapsed().as_secs_f64());
}

#[tokio::test(flavor = "current_thread")]
async fn the_naive_server_makes_a_second_effect_when_an_answer_is_lost() {
    let Some(python) = python() else { return };
    let started = Instant::now();
    let validator = validator();
    let state = state_dir("naive");
    let service = service().await;
    let ledger = || service.downstream.ledger();
    let version = "2026-08-18";

    let first = start(&python, "python-mcp-naive", &state, service.port, 0, &[]).await;
    let tools = first.client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|tool| tool.name == "tickets.create"), "{tools:?}");

    // The downstream commits the ticket and holds its answer; the process is killed.
    service.hold_next_ticket_answer().await;
    let peer = first.client.peer().clone();
    let held_request = request(
        &validator,
        "tickets.create",
        ticket("Lost answer"),
        &meta("lost_answer", "call_1", 1, version),
    );
    kill_while_the_answer_is_held(&peer, held_request, first.pid, || ledger().len() == 1).await;
    drop(first);

    // Restarted, asked again: it knows nothing of the first ticket and makes another. It
    // claims success (`isError: false`) with text alone.
    let second = start(&python, "python-mcp-naive", &state, service.port, 1, &[]).await;
    let retry = request(
        &validator,
        "tickets.create",
        ticket("Lost answer"),
        &meta("lost_answer", "call_2", 2, version),
    );
    let answer = call(second.client.peer(), retry).await;
    assert_eq!(answer.is_error, Some(false), "{answer:?}\n{}", logs(&state));
    assert!(answer.structured_content.is_none(), "the naive server knows no outcomes: {answer:?}");
    let effects = ledger();
    assert_eq!(effects.len(), 2, "two tickets for one operation: what the matrix's O1 fails it for");
    assert_ne!(effects[0].effect_reference, effects[1].effect_reference);
    assert!(effects.iter().all(|effect| effect.idempotency_key.is_none()), "it sends no key");

    let _ = second.client.cancel().await;
    let _ = std::fs::remove_dir_all(&state);
    eprintln!("naive server: {:.1} s", started.elapsed().as_secs_f64());
}
