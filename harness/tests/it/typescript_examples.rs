//! The TypeScript MCP examples (Node.js, the official `@modelcontextprotocol/sdk` from npm) as
//! real processes:
//!
//! - `examples/typescript-mcp-executor` (careful) over stdio: its manifest, an answer and a call
//!   without `_meta` held to the checked-in conventions schema; then the whole black-box
//!   matrix (two worker processes per run, SIGKILLed between commit and answer): every
//!   applicable scenario passes.
//! - the same server over streamable HTTP (`--transport http`): the lost answer (S02), the crash
//!   between effect and record (S03) and the concurrent claim (S05) pass.
//! - `examples/typescript-mcp-naive` (the tool as most people write it) fails the rows of lost
//!   answers (C2) and crashes after commit (C3), and the reproduce command it prints fails
//!   again as printed.
//!
//! The examples are installed and built by `.ci/typescript-examples` (`npm ci`, `tsc` into each
//! example's `dist/`), which prints the node binary that runs them: `REPLAYLAB_NODE`, or `node`
//! on the PATH. Without a build the tests say how to make one and pass, except under `CI`,
//! where they fail. The matrices here run one at a time (they start many processes each).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fake_downstream::{Downstream, DownstreamConfig, SystemClock};
use protocol::mcp::{CallMeta, Manifest, CALL_META, MANIFEST_URI};
use protocol::{Outcome, OutcomeStatus};
use rmcp::model::{CallToolRequestParams, CallToolResult, ReadResourceRequestParams, ResourceContents};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use wire::{TcpAcceptor, TcpConnector};

use crate::black_box::{matrix_json, replaylab, row, scenario, text};

/// Generous: a loaded two-core machine starting Node.js.
const PATIENCE: Duration = Duration::from_secs(60);

const CAREFUL: &str = "typescript-mcp-executor";
const NAIVE: &str = "typescript-mcp-naive";

/// One matrix at a time: each starts dozens of processes.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `examples/<example>/dist/server.js`, the built entry point.
fn entry(example: &str) -> PathBuf {
    root().join("examples").join(example).join("dist/server.js")
}

/// The newest modification time of the files under `dir` (recursively).
fn newest(dir: &Path) -> Option<SystemTime> {
    let items = std::fs::read_dir(dir).ok()?.flatten();
    items
        .filter_map(|item| {
            let path = item.path();
            if path.is_dir() {
                newest(&path)
            } else {
                path.metadata().ok()?.modified().ok()
            }
        })
        .max()
}

/// Why `example` is not ready to run (not built, or built before its sources last changed).
fn not_ready(example: &str) -> Option<String> {
    let built = entry(example);
    let Some(built_at) = built.metadata().ok().and_then(|meta| meta.modified().ok()) else {
        return Some(format!("{} is not built", built.display()));
    };
    let sources = root().join("examples").join(example).join("src");
    match newest(&sources) {
        Some(changed) if changed > built_at => {
            Some(format!("{} is older than its sources in {}", built.display(), sources.display()))
        }
        _ => None,
    }
}

/// The node binary that runs both built examples, or `None` (after saying how to build them)
/// when they are not ready. Under `CI` that fails the test.
fn node() -> Option<PathBuf> {
    let node = std::env::var_os("REPLAYLAB_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from);
    // Node.js 20 or newer, and the careful example's native SQLite driver loads.
    let check = "if (Number(process.versions.node.split('.')[0]) < 20) process.exit(3); \
                 new (require('better-sqlite3'))(':memory:').prepare('select 1').get()";
    let runs = Command::new(&node)
        .args(["-e", check])
        .current_dir(root().join("examples").join(CAREFUL))
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|output| output.status.success());
    let problem = if runs {
        not_ready(CAREFUL).or_else(|| not_ready(NAIVE))
    } else {
        Some(format!(
            "{} (Node.js 20 or newer) cannot load examples/{CAREFUL}/node_modules/better-sqlite3",
            node.display()
        ))
    };
    let Some(problem) = problem else { return Some(node) };
    let how = format!(
        "the TypeScript examples are not ready ({problem}): run `.ci/typescript-examples` from the \
         repository root (npm ci and tsc in each example), and set REPLAYLAB_NODE to the node it \
         prints if that is not the `node` on the PATH"
    );
    assert!(std::env::var_os("CI").is_none(), "{how}");
    eprintln!("SKIPPED: {how}");
    None
}

/// A scratch directory of this test's own.
fn scratch(test: &str) -> PathBuf {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("typescript-examples").join(test);
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("a scratch directory");
    directory
}

/// A JSON Schema checked in under the repository root.
fn validator(schema: &str) -> jsonschema::Validator {
    let path = root().join(schema);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    jsonschema::validator_for(&schema).expect("a JSON Schema")
}

/// The checked-in matrix.json schema accepts `matrix`.
fn assert_valid(matrix: &Value) {
    let validator = validator("reports/schema/matrix.schema.json");
    let errors: Vec<String> =
        validator.iter_errors(matrix).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "matrix.json breaks its schema: {errors:#?}");
}

/// Holds `document` to the conventions schema's `call_meta`, `outcome` or `manifest`.
fn conforms(validator: &jsonschema::Validator, name: &str, document: &Value) {
    let wrapped = json!({ name: document });
    let errors: Vec<String> = validator.iter_errors(&wrapped).map(|error| error.to_string()).collect();
    assert!(errors.is_empty(), "{name} breaks the conventions: {errors:#?}\n{document:#}");
}

/// A black-box matrix of `command` (two workers, one repeat), its output and matrix.json.
fn matrix(out: &Path, command: &str, extra: &[&str]) -> (Output, Value) {
    let out_dir = out.display().to_string();
    let mut arguments =
        vec!["matrix", "--executor-cmd", command, "--workers", "2", "--repeat", "1", "--out", &out_dir];
    arguments.extend_from_slice(extra);
    let output = replaylab(&arguments);
    let matrix = matrix_json(out);
    assert_valid(&matrix);
    (output, matrix)
}

/// Every scenario passed or did not apply, and the rows of lost answers and crashes after
/// commit passed.
fn assert_passes(output: &Output, matrix: &Value) {
    let said = text(output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert_eq!(matrix["verdict"], "pass", "{said}");
    let black_box = &matrix["black_box"];
    assert_eq!(black_box["capabilities_from"], "manifest", "{black_box:#}");
    assert_eq!(black_box["deterministic"], false);
    for summary in matrix["scenarios"].as_array().expect("scenarios") {
        let verdict = summary["verdict"].as_str().expect("a verdict");
        assert!(verdict == "pass" || verdict == "not_applicable", "{}: {summary:#}", summary["id"]);
    }
    for id in ["C2", "C3"] {
        assert_eq!(row(matrix, id)["verdict"], "pass", "{id}: {:#}", row(matrix, id));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_careful_typescript_executor_follows_the_conventions() {
    let Some(node) = node() else { return };
    let validator = validator("protocol/schema/mcp.schema.json");
    let state = scratch("conventions");
    let downstream =
        Downstream::new(DownstreamConfig::default(), Arc::new(SystemClock), Arc::new(TcpConnector));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.router()));

    let mut command = tokio::process::Command::new(&node);
    command.arg(entry(CAREFUL));
    for name in protocol::mcp::env::ALL {
        command.env_remove(name);
    }
    command
        .env(protocol::mcp::env::WORKER, "worker-1")
        .env(protocol::mcp::env::INCARNATION, "0")
        .env(protocol::mcp::env::STATE_DIR, &state)
        .env(protocol::mcp::env::DOWNSTREAM_URL, format!("http://127.0.0.1:{port}"))
        .env(protocol::mcp::env::LEASE_MS, "1000");
    let log = std::fs::File::create(state.join("server.log")).expect("a log file");
    let (transport, _) = TokioChildProcess::builder(command).stderr(log).spawn().expect("the server starts");
    let logs = || std::fs::read_to_string(state.join("server.log")).unwrap_or_default();
    let client = match tokio::time::timeout(PATIENCE, ().serve(transport)).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => panic!("the MCP handshake: {error}\n{}", logs()),
        Err(_) => panic!("the server initialises in time\n{}", logs()),
    };
    let peer = client.peer().clone();

    // The manifest follows the conventions and names the tools, the lease of the environment.
    let read = peer.read_resource(ReadResourceRequestParams::new(MANIFEST_URI)).await.expect("the manifest");
    let Some(ResourceContents::TextResourceContents { text, .. }) = read.contents.first() else {
        panic!("a text resource: {read:?}")
    };
    let document: Value = serde_json::from_str(text).expect("the manifest is JSON");
    conforms(&validator, "manifest", &document);
    let manifest: Manifest = serde_json::from_value(document).expect("a Manifest");
    let declared = manifest.capabilities.tools.clone().expect("the manifest names its tools");
    assert_eq!(
        declared.into_iter().collect::<Vec<_>>(),
        ["jobs.submit", "messages.send", "payments.charge", "tickets.create", "tickets.set_status"],
        "{manifest:?}"
    );
    let capabilities = &manifest.capabilities;
    assert!(
        capabilities.reconcile
            && capabilities.delayed_jobs
            && capabilities.queue_consumer
            && capabilities.webhooks,
        "{manifest:?}"
    );
    assert_eq!(manifest.timing.expect("timing").lease_ms, 1000, "the lease of the environment");

    // A call that does not name its operation is told what is missing, and nothing happens.
    let arguments =
        json!({"queue": "billing", "subject": "Refund", "body": "Customer reports a duplicate charge."});
    let Value::Object(arguments) = arguments else { unreachable!("an object") };
    let call = |params: CallToolRequestParams| {
        let peer = peer.clone();
        async move {
            tokio::time::timeout(PATIENCE, peer.call_tool(params))
                .await
                .expect("an answer in time")
                .expect("a tools/call result")
        }
    };
    let bare: CallToolResult =
        call(CallToolRequestParams::new("tickets.create").with_arguments(arguments.clone())).await;
    assert_eq!(bare.is_error, Some(true), "{bare:?}");
    let said = serde_json::to_string(&bare.content).expect("content");
    assert!(said.contains("missing _meta") && said.contains(CALL_META), "{said}");
    assert!(downstream.ledger().is_empty());

    // Named in `_meta` (reached through McpServer's `extra._meta`): applied, with the ledger's
    // effect; a changed request under the same operation is refused. Both outcomes conform.
    let ask = |arguments: serde_json::Map<String, Value>, call_id: &str| {
        let meta = CallMeta {
            version: 1,
            tenant: "acme".into(),
            environment: "production".into(),
            workflow_id: "run_827".into(),
            step_id: "record_issue".into(),
            actor: "agent-7".into(),
            tool_version: "2026-08-18".into(),
            call_id: call_id.into(),
            attempt: 1,
            idempotency_key: CallMeta::key_of("acme", "production", "run_827", "record_issue"),
        };
        let meta = serde_json::to_value(meta).expect("a CallMeta");
        conforms(&validator, "call_meta", &meta);
        let mut params = CallToolRequestParams::new("tickets.create").with_arguments(arguments);
        let mut map = serde_json::Map::new();
        map.insert(CALL_META.into(), meta);
        params.meta = Some(map.into());
        params
    };
    let outcome = |result: &CallToolResult| -> Outcome {
        assert_eq!(result.is_error, Some(false), "{result:?}");
        let structured = result.structured_content.clone().expect("structuredContent");
        conforms(&validator, "outcome", &structured);
        serde_json::from_value(structured).expect("structuredContent is an Outcome")
    };
    let applied = outcome(&call(ask(arguments.clone(), "call_1")).await);
    assert_eq!(applied.status, OutcomeStatus::Applied, "{applied:?}\n{}", logs());
    let effects = downstream.ledger();
    assert_eq!(effects.len(), 1);
    assert_eq!(applied.effect_reference.as_deref(), Some(effects[0].effect_reference.as_str()));
    assert_eq!(effects[0].idempotency_key.as_deref(), Some("acme/production/run_827/record_issue"));
    let mut changed = arguments;
    changed.insert("subject".into(), json!("Refund!"));
    let refused = outcome(&call(ask(changed, "call_2")).await);
    assert_eq!(refused.status, OutcomeStatus::Rejected, "{refused:?}");
    assert_eq!(downstream.ledger().len(), 1, "a refused request makes no effect");

    let _ = client.cancel().await;
    let _ = std::fs::remove_dir_all(&state);
}

/// The scenarios of lost answers, crashes after commit, races, late answers and abandoned
/// claims (CI's black-box gate runs the whole matrix, 3 repeats, beside a busy loop).
#[test]
fn the_careful_typescript_executor_passes_the_black_box_matrix() {
    let Some(node) = node() else { return };
    let _one = one_at_a_time();
    let out = scratch("careful");
    let command = format!("{} {}", node.display(), entry(CAREFUL).display());
    let (output, matrix) = matrix(&out, &command, &["--only", "S02,S03,S05,S19,S27,S28"]);
    assert_passes(&output, &matrix);
    assert!(text(&output).contains("Not deterministic: real processes on real time"), "{}", text(&output));
    for id in ["S02", "S03", "S05"] {
        assert_eq!(scenario(&matrix, id)["verdict"], "pass", "{id}");
    }
    let judged: Vec<&str> = matrix["black_box"]["oracles_judged"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for oracle in ["O1", "O4", "O6", "O13"] {
        assert!(judged.contains(&oracle), "{oracle} judged the careful server: {judged:?}");
    }
}

#[test]
fn the_careful_typescript_executor_passes_over_streamable_http() {
    let Some(node) = node() else { return };
    let _one = one_at_a_time();
    let out = scratch("careful-http");
    let command = format!("{} {} --transport http", node.display(), entry(CAREFUL).display());
    let (output, matrix) = matrix(&out, &command, &["--transport", "http", "--only", "S02,S03,S05"]);
    assert_passes(&output, &matrix);
    assert_eq!(matrix["black_box"]["transport"], "http", "{:#}", matrix["black_box"]);
    for id in ["S02", "S03", "S05"] {
        assert_eq!(scenario(&matrix, id)["verdict"], "pass", "{id}");
    }
}

#[test]
fn the_naive_typescript_server_fails_lost_answers_and_its_reproduce_command_fails_again() {
    let Some(node) = node() else { return };
    let _one = one_at_a_time();
    let out = scratch("naive");
    let command = format!("{} {}", node.display(), entry(NAIVE).display());
    let (output, matrix) = matrix(&out, &command, &["--only", "S02,S03"]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert_eq!(matrix["black_box"]["capabilities_from"], "tools/list", "the naive server has no manifest");
    for id in ["C2", "C3"] {
        assert_eq!(row(&matrix, id)["verdict"], "fail", "{id}: {:#}", row(&matrix, id));
    }
    let failure = &scenario(&matrix, "S02")["failures"][0];
    let oracles: Vec<&str> =
        failure["oracles"].as_array().expect("oracles").iter().filter_map(Value::as_str).collect();
    assert!(oracles.contains(&"O1"), "a second ticket for one operation: {failure:#}");
    assert!(
        !oracles.contains(&"O2") && !oracles.contains(&"O8"),
        "a bare success claim names nothing to hold against the ledger: {failure:#}"
    );
    // The reproduce command works as printed.
    let reproduce = failure["reproduce"].as_str().expect("a reproduce command");
    assert!(reproduce.contains("run S02") && reproduce.contains("--executor-cmd"), "{reproduce}");
    let again = Command::new("sh").arg("-c").arg(reproduce).current_dir(root()).stdin(Stdio::null()).output();
    let again = again.expect("the reproduce command runs");
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("single_effect"), "{}", text(&again));
}
