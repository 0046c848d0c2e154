//! The black-box world: the executor is a real process in any language, an MCP server
//! (`docs/mcp.md`), driven by the same runner, scenarios and oracles as the simulated world.
//!
//! - **Workers are processes.** Each worker of a scenario (and more, up to `--workers`) is the
//!   user's command, started with the environment of `docs/mcp.md` section 5 in a process group
//!   of its own. A crash is `SIGKILL` to that group; a restart starts the command again (the
//!   next incarnation) on the same state directory.
//! - **The agent is an MCP client** (`rmcp`) over each process's stdio: a call is `tools/call`
//!   with the operation in `_meta["dev.replaylab/call"]`; the answer's `structuredContent` is the
//!   outcome. A server that answers without it makes a success claim (`isError: false`) or
//!   none (`isError: true`).
//! - **The downstream is in process, on loopback.** Every worker incarnation gets a port of its
//!   own, so the harness knows which process sent each request without asking it. The
//!   boundary on that port records each request (`DownstreamSent`, `DownstreamAnswered`,
//!   `DownstreamFailed`, and the authorizer's decisions) as the simulated client does, and
//!   holds a request before it reaches the downstream or its answer after it (the pause points
//!   `downstream:before` / `downstream:after`): "crash between effect and record" is a commit,
//!   an answer held, a `SIGKILL`.
//! - **Time is real** and short: the harness's contracts (lease, retention, downstream
//!   timeout) go to the process in its environment, and the runner waits them out. Nothing is
//!   deterministic: runs repeat rather than seed, and the reports say so.
//!
//! - **The queue and webhooks are the harness's.** A process's outbox posts envelopes to its
//!   port; the run's at-least-once queue ([`world::Queue`]) hands each delivery to an idle live
//!   worker's `replaylab.consume`, and holds the ack at `queue:before_ack`. The downstream's
//!   completion webhooks go through a relay that records them and passes them on to
//!   `worker-1`'s webhook port.
//!
//! What this world cannot do is said before a run: it sees no store calls (no `store:`
//! pause points); such a scenario is `not applicable` here (see [`lacks`]).
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use protocol::mcp::{
    env, CallMeta, ConsumeAnswer, ConsumeArguments, KeyPlacement, Manifest, WebhookAnswer, CALL_META,
    CONSUME_TOOL, MANIFEST_URI, POLL_TOOL, RECONCILE_TOOL,
};
use protocol::{Consumed, Envelope, ExecutorCapabilities, Outcome, OutcomeStatus};
use rmcp::model::{CallToolRequestParams, CallToolResult, ReadResourceRequestParams, ResourceContents};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use scenarios::{Moment, PausePoint, Scenario};
use tower::ServiceExt as _;

use judge::history::{EventKind, RequestKind};
use judge::text::{duration, quoted};
use world::boundary::{bounded_finding, references_in_answer, tenant_in, ORIGIN_HEADER, REQUEST_ID_HEADER};
use world::clock::WorldClock;
pub use world::process::{lacks, BlackBoxSpec, ListedTool, Probe, Transport, DEFAULT_START_PATIENCE};
use world::toolmap::{Binding, ToolMap};
use world::{AgentCommand, AgentResult, Delivery, PointReached, Reached, Shared, World, AGENT_TIMEOUT};

pub use signals::end_processes_on_signals;

mod signals;

/// How often the runner looks at the real world: the length of one step.
const SLICE: Duration = Duration::from_millis(2);
/// The longest stderr tail a failing run's notes quote, per process.
const STDERR_TAIL_LINES: usize = 6;
/// The operators' queue's path on every worker's port ([`env::OPERATORS_URL`]).
const OPERATORS_PATH: &str = "/v1/reconciliations";
/// The outbox's path on every worker's port ([`env::QUEUE_URL`]).
const QUEUE_PATH: &str = "/v1/queue";
/// The worker the downstream's completion webhooks go to (as in the simulated world).
const WEBHOOK_WORKER: &str = "worker-1";
/// How long the relay waits for a process to answer a webhook: less than the downstream's own
/// patience, so that the relay's answer (a failure) reaches it first.
const WEBHOOK_RELAY_TIMEOUT: Duration = Duration::from_millis(1_500);

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(structured: Option<serde_json::Value>, is_error: bool) -> (AgentResult, bool) {
        let mut answer = CallToolResult::success(vec![rmcp::model::ContentBlock::text("done")]);
        answer.structured_content = structured;
        answer.is_error = Some(is_error);
        outcome_of(&answer, None)
    }

    #[test]
    fn a_server_that_knows_nothing_of_replaylab_makes_a_bare_success_claim() {
        // The MCP SDKs' wrapping of a tool that returns a string, a vendor's own object, nothing.
        for structured in [
            Some(serde_json::json!({"result": "charged pi_1"})),
            Some(serde_json::json!({"id": "pi_1", "object": "payment_intent", "status": "succeeded"})),
            None,
        ] {
            let (result, bare) = answered(structured.clone(), false);
            let AgentResult::Answered(outcome) = result else { panic!("{structured:?}: {result:?}") };
            assert!(bare, "{structured:?}");
            assert_eq!(outcome.status, OutcomeStatus::Applied);
            assert!(
                outcome.effect_reference.is_none() && outcome.result.is_none(),
                "a bare claim names nothing"
            );
            let note = outcome.message.unwrap_or_default();
            if let Some(structured) = structured {
                assert!(note.contains(&structured.to_string()[..20]), "the note says what was read: {note}");
            }
        }
    }

    #[test]
    fn an_outcome_is_read_whole_and_a_broken_one_claims_nothing() {
        let mut replayed = Outcome::new(OutcomeStatus::Replayed);
        replayed.effect_reference = Some("pi_1".into());
        let (result, bare) = answered(serde_json::to_value(&replayed).ok(), false);
        assert!(!bare);
        assert!(
            matches!(result, AgentResult::Answered(outcome) if outcome.status == OutcomeStatus::Replayed)
        );
        let (result, _) = {
            let mut broken = serde_json::to_value(Outcome::new(OutcomeStatus::Unknown)).unwrap_or_default();
            broken["next_action"] = serde_json::json!("pray");
            answered(Some(broken), false)
        };
        assert!(
            matches!(&result, AgentResult::NoAnswer(reason) if reason.starts_with("malformed_answer: ")),
            "{result:?}"
        );
        let (result, _) = answered(Some(serde_json::json!({"result": "x"})), true);
        assert!(
            matches!(&result, AgentResult::NoAnswer(reason) if reason == "tool error: \"done\""),
            "{result:?}"
        );
    }

    fn builtin(id: &str) -> Scenario {
        scenarios::builtin_by_id(id).expect("a built-in scenario")
    }

    #[test]
    fn mcp_ports_never_come_from_the_kernels_ephemeral_range() {
        let ephemeral: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|text| text.split_whitespace().next().and_then(|low| low.parse().ok()))
            .unwrap_or(32_768);
        let ports: BTreeSet<u16> = (0..50).map(|_| free_port()).collect();
        assert_eq!(ports.len(), 50, "each call hands out another port: {ports:?}");
        assert!(ports.iter().all(|port| (20_000..ephemeral).contains(port)), "{ports:?}");
    }

    #[test]
    fn a_run_has_the_scenarios_workers_and_more_up_to_the_flag() {
        let spec = |workers| BlackBoxSpec::new("true", workers);
        assert_eq!(worker_names(&builtin("S02"), &spec(1)), ["worker-1"]);
        assert_eq!(worker_names(&builtin("S02"), &spec(3)), ["worker-1", "worker-2", "worker-3"]);
        let s28 = builtin("S28");
        assert_eq!(worker_names(&s28, &spec(1)), s28.worker_names(), "never fewer than the scenario names");
    }
}

/// The world's worker names: the scenario's (however many it names), then `worker-N` up to
/// `--workers`.
fn worker_names(scenario: &Scenario, spec: &BlackBoxSpec) -> Vec<String> {
    let mut names = scenario.worker_names();
    let mut next = names.len() + 1;
    while names.len() < spec.workers {
        let name = format!("worker-{next}");
        if !names.contains(&name) {
            names.push(name);
        }
        next += 1;
    }
    names
}

/// A pause armed at the boundary.
struct Armed {
    worker: Option<String>,
    point: PausePoint,
    operation: Option<String>,
}

/// The harness's side of every worker's downstream port: it records each request and answer,
/// and holds them at the armed pause points.
struct Boundary {
    shared: Rc<Shared>,
    router: axum::Router,
    armed: RefCell<BTreeMap<String, Armed>>,
    held: RefCell<BTreeMap<String, (PointReached, tokio::sync::oneshot::Sender<()>)>>,
    /// The incarnation of each worker that runs now (none while it is crashed).
    alive: RefCell<BTreeMap<String, u32>>,
    /// What each worker is serving now (agent requests, queue deliveries, webhooks), by a key
    /// of the harness's.
    serving: RefCell<BTreeMap<String, BTreeMap<String, ServingNow>>>,
    /// What each worker served last, while it serves nothing now: work a process goes on with
    /// after it answered (a completion notice sent once the webhook was acknowledged) is taken
    /// to be the last thing's, as a simulated worker's background task keeps the tag of the
    /// work that started it. Forgotten when the worker takes something new.
    lingering: RefCell<BTreeMap<String, ServingNow>>,
    /// The incarnation each worker had when it last started serving something.
    serving_incarnation: RefCell<BTreeMap<String, u32>>,
    /// Each worker's webhook port: the incarnation it was given to, and the port.
    webhook_ports: RefCell<BTreeMap<String, (u32, u16)>>,
    /// Where a process receives webhooks on its port.
    webhook_path: String,
    /// Downstream requests the processes sent that are still open (read, not yet answered, and
    /// not given up by their sender).
    open: Rc<Cell<usize>>,
}

/// One thing a worker is serving: an agent request (its label) or a queue delivery (no label),
/// for an operation when the harness knows it.
#[derive(Debug, Clone)]
struct ServingNow {
    label: Option<String>,
    operation: Option<String>,
}

/// Counts one open downstream request for as long as it lives (its handler may be dropped
/// when the sending process closes the connection).
struct Open(Rc<Cell<usize>>);

impl Open {
    fn new(open: &Rc<Cell<usize>>) -> Open {
        open.set(open.get() + 1);
        Open(open.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

impl Boundary {
    /// Holds the caller while an armed pause stops at `reached`, until it is released.
    async fn pause_at(&self, reached: PointReached) {
        let stopped = {
            let mut armed = self.armed.borrow_mut();
            let name = armed
                .iter()
                .find(|(_, pause)| {
                    reached.stops(pause.worker.as_deref(), &pause.point, pause.operation.as_deref())
                })
                .map(|(name, _)| name.clone());
            name.inspect(|name| {
                armed.remove(name);
            })
        };
        let Some(name) = stopped else { return };
        let (release, released) = tokio::sync::oneshot::channel();
        self.held.borrow_mut().insert(name, (reached, release));
        // A dropped sender (the pause released, or the world gone) lets the request go on.
        let _ = released.await;
    }

    /// What `worker` serves now, when it serves exactly one thing for a known operation: the
    /// agent request's label (none for a queue delivery) and the operation, the origin its
    /// requests are tagged with (it breaks ties between identical calls only).
    fn serving_one(&self, worker: &str) -> Option<(Option<String>, String)> {
        let serving = self.serving.borrow();
        let lingering = self.lingering.borrow();
        let now = match serving.get(worker).filter(|requests| !requests.is_empty()) {
            Some(requests) if requests.len() == 1 => requests.values().next()?,
            Some(_) => return None,
            None => lingering.get(worker)?,
        };
        Some((now.label.clone(), now.operation.clone()?))
    }

    /// The incarnation of `worker` that serves now (its requests' tags are its).
    fn incarnation_serving(&self, worker: &str) -> Option<u32> {
        self.serving_incarnation.borrow().get(worker).copied()
    }

    /// `worker` starts serving `now` under `key`.
    fn start_serving(&self, worker: &str, key: &str, now: ServingNow) {
        self.lingering.borrow_mut().remove(worker);
        if let Some(incarnation) = self.alive.borrow().get(worker) {
            self.serving_incarnation.borrow_mut().insert(worker.to_owned(), *incarnation);
        }
        self.serving.borrow_mut().entry(worker.to_owned()).or_default().insert(key.to_owned(), now);
    }

    /// `worker` is done with `key`; the last thing it served lingers while it serves nothing.
    fn stop_serving(&self, worker: &str, key: &str) {
        let mut serving = self.serving.borrow_mut();
        let Some(requests) = serving.get_mut(worker) else { return };
        let Some(done) = requests.remove(key) else { return };
        let mut lingering = self.lingering.borrow_mut();
        // A killed incarnation's work does not linger into the next one's.
        let alive = self.alive.borrow().get(worker).copied();
        if requests.is_empty() && alive.is_some() && alive == self.incarnation_serving(worker) {
            // The agent's label stays with the call it tagged: lingering work is not the call's.
            lingering.insert(worker.to_owned(), ServingNow { label: None, ..done });
        } else {
            lingering.remove(worker);
        }
    }

    fn is_alive(&self, worker: &str, incarnation: u32) -> bool {
        self.alive.borrow().get(worker) == Some(&incarnation)
    }

    /// Serves one request a worker process sent to its port.
    async fn handle(
        self: Rc<Self>,
        worker: String,
        incarnation: u32,
        request: http::Request<Incoming>,
        control: wire::ConnectionControl,
        current: Rc<RefCell<Option<(String, String)>>>,
    ) -> Result<http::Response<Full<Bytes>>, std::convert::Infallible> {
        let _open = Open::new(&self.open);
        let (mut parts, body) = request.into_parts();
        let body = match Limited::new(body, wire::MAX_BODY_BYTES).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => return Ok(plain(413, "the request body is too large or broken")),
        };
        let method = parts.method.as_str().to_owned();
        let full_path =
            parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |p| p.to_string());
        let path = parts.uri.path().to_owned();
        if path == "/v1/authz" {
            return Ok(self.authorize(&worker, parts, body).await);
        }
        if path == OPERATORS_PATH {
            return Ok(self.file_reconciliation(&worker, &method, &body));
        }
        if path == QUEUE_PATH {
            return Ok(self.enqueue(&worker, &method, &body));
        }
        let shared = self.shared.clone();
        let authorization = parts
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let content = fake_downstream::request_content(&method, &path, authorization.as_deref(), &body);
        let operations = shared.operations_sent(content.as_ref());
        let reached = |moment, committed| {
            PointReached::downstream(&worker, moment, (&method, &path), committed, &operations)
        };
        self.pause_at(reached(Moment::Before, false)).await;
        if !self.is_alive(&worker, incarnation) {
            // Held before it left, and the process was killed meanwhile: the request never
            // reaches the downstream (as a simulated worker's request dies with its host).
            return Ok(plain(503, "the sending process was killed"));
        }
        let request_id = shared.next_request_id(&worker);
        let serving = self.serving_one(&worker);
        let idempotency_key =
            parts.headers.get("idempotency-key").and_then(|value| value.to_str().ok()).map(str::to_owned);
        shared.history.push(EventKind::DownstreamSent {
            worker: worker.clone(),
            request_id: request_id.clone(),
            origin: serving.as_ref().map(|(_, operation)| operation.clone()),
            serving: serving.as_ref().and_then(|(label, _)| label.clone()),
            method: method.clone(),
            path: full_path,
            idempotency_key,
            tenant: tenant_in(&parts.uri.to_string(), authorization.as_deref(), &body),
            content,
        });
        // The harness's own headers cannot be set by the process.
        parts.headers.remove(REQUEST_ID_HEADER);
        parts.headers.remove(ORIGIN_HEADER);
        parts.headers.insert(REQUEST_ID_HEADER, header_value(&request_id));
        if let Some((_, origin)) = &serving {
            parts.headers.insert(ORIGIN_HEADER, header_value(&wire::percent_encode(origin)));
        }
        parts.extensions.insert(control);
        let described = format!("{method} {path}");
        *current.borrow_mut() = Some((request_id.clone(), described.clone()));
        let request = http::Request::from_parts(parts, axum::body::Body::from(body));
        let response = self.router.clone().oneshot(request).await.unwrap_or_else(|never| match never {});
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map(|collected| collected.to_bytes()).unwrap_or_default();
        let committed = shared.history.committed(&request_id);
        self.pause_at(reached(Moment::After, committed)).await;
        *current.borrow_mut() = None;
        if self.is_alive(&worker, incarnation) {
            shared.history.push(EventKind::DownstreamAnswered {
                worker: worker.clone(),
                request_id,
                origin: serving.map(|(_, operation)| operation),
                request: described,
                status: parts.status.as_u16(),
                references: references_in_answer(parts.status.as_u16(), &body),
            });
        } else {
            shared.history.push(EventKind::DownstreamFailed {
                worker: worker.clone(),
                request_id,
                origin: serving.map(|(_, operation)| operation),
                request: described,
                error: "the process was killed before the answer reached it".into(),
            });
        }
        Ok(http::Response::from_parts(parts, Full::new(body)))
    }

    /// `POST /v1/reconciliations`: the operators' queue, the harness's own (not the
    /// downstream's): each entry is recorded in the history as it is filed.
    fn file_reconciliation(&self, worker: &str, method: &str, body: &[u8]) -> http::Response<Full<Bytes>> {
        if method != "POST" {
            return plain(405, "POST an entry: {\"tenant\", \"operation_key\", \"finding\"}");
        }
        let entry: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let text = |field: &str| entry.get(field).and_then(|v| v.as_str()).map(str::to_owned);
        let (Some(tenant), Some(operation_key), Some(finding)) =
            (text("tenant"), text("operation_key"), text("finding"))
        else {
            return plain(400, "an entry is {\"tenant\", \"operation_key\", \"finding\"}, all strings");
        };
        let finding = bounded_finding(finding);
        self.shared.history.push(EventKind::ReconciliationFiled {
            worker: worker.to_owned(),
            tenant,
            operation_key,
            finding,
        });
        plain(202, "filed")
    }

    /// `POST /v1/queue`: the outbox. The envelope goes into the run's queue (twice when the
    /// scenario duplicates deliveries, after its delivery delay), recorded in the history
    /// under the operation the worker is serving, if one.
    fn enqueue(&self, worker: &str, method: &str, body: &[u8]) -> http::Response<Full<Bytes>> {
        if method != "POST" {
            return plain(
                405,
                "POST an envelope: {\"envelope_id\", \"tenant\", \"operation_key\", \"tool\", \"payload\"}",
            );
        }
        let Ok(envelope) = serde_json::from_slice::<Envelope>(body) else {
            return plain(
                400,
                "an envelope is {\"envelope_id\", \"tenant\", \"operation_key\", \"tool\" (strings), \"payload\"}, nothing else",
            );
        };
        let shared = &self.shared;
        let origin = self.serving_one(worker).map(|(_, operation)| operation);
        shared.history.push(EventKind::Enqueued {
            envelope_id: envelope.envelope_id.clone(),
            operation_key: envelope.operation_key.clone(),
            origin: origin.clone(),
            deliveries: shared.queue_copies,
        });
        let visible_at = shared.now_ms().saturating_add(shared.queue_delay_ms);
        shared.queue.borrow_mut().push(envelope, origin, shared.queue_copies, visible_at);
        plain(202, "enqueued")
    }

    /// A completion webhook from the downstream, passed on to [`WEBHOOK_WORKER`]'s webhook
    /// port as it came. Recorded once the process answered (it read the event): received, and
    /// what it said it did. A worker that is down or does not answer gets nothing recorded,
    /// and the downstream hears a failure (it tries again).
    async fn relay_webhook(&self, body: Bytes) -> http::Response<Full<Bytes>> {
        let target = self.webhook_ports.borrow().get(WEBHOOK_WORKER).copied();
        let Some((incarnation, port)) =
            target.filter(|(incarnation, _)| self.is_alive(WEBHOOK_WORKER, *incarnation))
        else {
            return plain(503, "the webhook's worker is down");
        };
        let event: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
        let text = |field: &str| event.as_ref().and_then(|e| e[field].as_str()).map(str::to_owned);
        let (event_id, job) = (text("event_id"), text("job_id"));
        let origin = job.as_deref().and_then(|job| self.shared.origin_of_job(job));
        let client = wire::HttpClient::new(Arc::new(wire::TcpConnector), "127.0.0.1", port);
        let mut request = wire::HttpRequest::new(http::Method::POST, self.webhook_path.clone());
        request.headers.push(("content-type".into(), "application/json".into()));
        request.body = body.clone();
        // While the process handles the event, its requests (a completion notice) are the
        // job's operation's, as a simulated worker's webhook task is tagged.
        let key = format!("webhook {}", event_id.as_deref().unwrap_or("?"));
        self.start_serving(WEBHOOK_WORKER, &key, ServingNow { label: None, operation: origin.clone() });
        let sent = tokio::time::timeout(WEBHOOK_RELAY_TIMEOUT, client.send(request)).await;
        self.stop_serving(WEBHOOK_WORKER, &key);
        let answer = match sent {
            Ok(Ok(answer)) if self.is_alive(WEBHOOK_WORKER, incarnation) => answer,
            Ok(Ok(_)) => return plain(503, "the webhook's worker was killed before it answered"),
            Ok(Err(_)) => return plain(502, "the webhook's worker did not take the delivery"),
            Err(_) => return plain(504, "the webhook's worker did not answer in time"),
        };
        self.shared.history.push(EventKind::WebhookReceived {
            worker: WEBHOOK_WORKER.to_owned(),
            origin,
            event_id: event_id.clone(),
            references: job.into_iter().collect(),
        });
        let ack = match serde_json::from_slice::<WebhookAnswer>(&answer.body) {
            Ok(WebhookAnswer { ack }) if (200..300).contains(&answer.status) => {
                serde_json::to_value(ack).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
            }
            _ if (200..300).contains(&answer.status) => "malformed_answer".to_owned(),
            _ => format!("http_{}", answer.status),
        };
        self.shared.history.push(EventKind::WebhookHandled {
            worker: WEBHOOK_WORKER.to_owned(),
            event_id,
            ack,
        });
        let mut response = http::Response::new(Full::new(answer.body));
        *response.status_mut() =
            http::StatusCode::from_u16(answer.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
        response
    }

    /// `GET /v1/authz`: the downstream's authorizer, its decision recorded as it is made.
    async fn authorize(
        &self,
        worker: &str,
        parts: http::request::Parts,
        body: Bytes,
    ) -> http::Response<Full<Bytes>> {
        let request = http::Request::from_parts(parts, axum::body::Body::from(body));
        let response = self.router.clone().oneshot(request).await.unwrap_or_else(|never| match never {});
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map(|collected| collected.to_bytes()).unwrap_or_default();
        if let Ok(decision) = serde_json::from_slice::<serde_json::Value>(&body) {
            let text =
                |field: &str| decision.get(field).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
            if let Some(allowed) = decision.get("allowed").and_then(serde_json::Value::as_bool) {
                self.shared.history.push(EventKind::Authorization {
                    worker: worker.to_owned(),
                    actor: text("actor"),
                    tool: text("tool"),
                    allowed,
                });
            }
        }
        http::Response::from_parts(parts, Full::new(body))
    }
}

fn header_value(text: &str) -> http::HeaderValue {
    http::HeaderValue::from_str(text).unwrap_or_else(|_| http::HeaderValue::from_static("invalid"))
}

fn plain(status: u16, text: &'static str) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_REQUEST);
    response
}

/// Accepts a worker incarnation's connections on its port until the task is aborted.
async fn accept(boundary: Rc<Boundary>, listener: tokio::net::TcpListener, worker: String, incarnation: u32) {
    while let Ok((stream, _peer)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let boundary = boundary.clone();
        let worker = worker.clone();
        tokio::task::spawn_local(async move {
            let control = wire::ConnectionControl::default();
            let current: Rc<RefCell<Option<(String, String)>>> = Rc::default();
            let service = {
                let (boundary, control, current) = (boundary.clone(), control.clone(), current.clone());
                hyper::service::service_fn(move |request| {
                    boundary.clone().handle(
                        worker.clone(),
                        incarnation,
                        request,
                        control.clone(),
                        current.clone(),
                    )
                })
            };
            let connection =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                biased;
                () = control.closed() => {
                    // The downstream closed the connection without an answer (`commit_then_drop`).
                    if let Some((request_id, request)) = current.borrow_mut().take() {
                        boundary.shared.history.push(EventKind::DownstreamFailed {
                            worker: worker_of(&request_id),
                            request_id,
                            origin: None,
                            request,
                            error: "the connection closed without a response".into(),
                        });
                    }
                }
                _ = connection => {}
            }
        });
    }
}

/// Accepts the downstream's webhook deliveries on the relay's port until the task is aborted.
async fn relay(boundary: Rc<Boundary>, listener: tokio::net::TcpListener) {
    while let Ok((stream, _peer)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let boundary = boundary.clone();
        tokio::task::spawn_local(async move {
            let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
                let boundary = boundary.clone();
                async move {
                    let body = match Limited::new(request.into_body(), wire::MAX_BODY_BYTES).collect().await {
                        Ok(collected) => collected.to_bytes(),
                        Err(_) => {
                            return Ok::<_, std::convert::Infallible>(plain(
                                413,
                                "the body is too large or broken",
                            ))
                        }
                    };
                    Ok(boundary.relay_webhook(body).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// `worker-1` of the request id `worker-1#7`.
fn worker_of(request_id: &str) -> String {
    request_id.split('#').next().unwrap_or_default().to_owned()
}

/// One running worker process.
struct Process {
    pid: u32,
    service: RunningService<RoleClient, ()>,
    listener: tokio::task::JoinHandle<()>,
    /// Over HTTP the harness holds the child itself (over stdio the transport does), so that
    /// it is reaped once killed.
    child: Option<tokio::process::Child>,
}

/// The environment and files of one run: shared by the world and the agent's tasks.
struct Run {
    spec: Arc<BlackBoxSpec>,
    shared: Rc<Shared>,
    boundary: Rc<Boundary>,
    /// The run's directory: `state/` (the processes' `{state}`) and `logs/` (their stderr).
    directory: PathBuf,
    /// The run's name (`{run}`).
    name: String,
    /// The environment every process gets besides its own variables: timing and services.
    timing: [(&'static str, String); 4],
    peers: RefCell<BTreeMap<String, Peer<RoleClient>>>,
    /// The tool and version each operation was last called with (a poll names them too).
    last_tool: RefCell<BTreeMap<String, String>>,
    /// The workers handling a queue delivery now (one at a time each).
    consuming: RefCell<BTreeSet<String>>,
    starting_ms: Cell<u64>,
    /// The tenant of the scenario's first operation: the one a vendor twin's API key names.
    tenant: String,
}

impl Run {
    fn state_dir(&self) -> PathBuf {
        self.directory.join("state")
    }

    fn stderr_path(&self, worker: &str, incarnation: u32) -> PathBuf {
        self.directory.join("logs").join(format!("{worker}.{incarnation}.stderr"))
    }

    /// Starts `worker`'s incarnation `incarnation`: its port, its process, the handshake.
    async fn start(self: &Rc<Self>, worker: &str, incarnation: u32) -> Result<Process, String> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|error| format!("no loopback port for {worker}'s downstream: {error}"))?;
        let port = listener.local_addr().map_err(|error| error.to_string())?.port();
        self.boundary.alive.borrow_mut().insert(worker.to_owned(), incarnation);
        let listening =
            tokio::task::spawn_local(accept(self.boundary.clone(), listener, worker.to_owned(), incarnation));
        let state = self.state_dir();
        let mcp_port = free_port();
        let webhook_port = free_port();
        self.boundary.webhook_ports.borrow_mut().insert(worker.to_owned(), (incarnation, webhook_port));
        let text = self
            .spec
            .command
            .replace("{worker}", worker)
            .replace("{state}", &state.display().to_string())
            .replace("{run}", &self.name)
            .replace("{webhook_port}", &webhook_port.to_string())
            .replace("{port}", &mcp_port.to_string());
        let mut command = tokio::process::Command::new("sh");
        command.arg("-c").arg(&text).process_group(0).kill_on_drop(true);
        for name in env::ALL {
            command.env_remove(name);
        }
        let base = format!("http://127.0.0.1:{port}");
        command
            .env(env::WORKER, worker)
            .env(env::INCARNATION, incarnation.to_string())
            .env(env::STATE_DIR, &state)
            .env(env::DOWNSTREAM_URL, &base)
            .env(env::AUTHZ_URL, format!("{base}/v1/authz"))
            .env(env::OPERATORS_URL, format!("{base}{OPERATORS_PATH}"))
            .env(env::QUEUE_URL, format!("{base}{QUEUE_PATH}"))
            .env(env::WEBHOOK_LISTEN, format!("127.0.0.1:{webhook_port}"));
        for (name, value) in &self.timing {
            command.env(name, value);
        }
        if let Some(map) = &self.spec.tool_map {
            // The vendor twins on the same port: the server's SDK reaches them by its own
            // variables, with the run's tenant's API key.
            for (name, value) in map.vendor_environment(&base, &self.tenant) {
                command.env(name, value);
            }
        }
        let stderr = std::fs::File::create(self.stderr_path(worker, incarnation))
            .map_err(|error| format!("cannot write {worker}'s stderr file: {error}"))?;
        // Recorded as it starts, so that a signal that stops the harness kills it too.
        let ((child, handshake), pid) = signals::register(|| match self.spec.transport {
            Transport::Stdio => {
                let (transport, _) = TokioChildProcess::builder(command)
                    .stderr(stderr)
                    .spawn()
                    .map_err(|error| format!("{worker} did not start ({text}): {error}"))?;
                let pid = transport.id().unwrap_or_default();
                let handshake: std::pin::Pin<Box<dyn std::future::Future<Output = _>>> =
                    Box::pin(async move { ().serve(transport).await.map_err(|error| error.to_string()) });
                Ok(((None, handshake), pid))
            }
            Transport::Http => {
                // The process's stdout is its own business over HTTP: it goes to the log too.
                let stdout =
                    stderr.try_clone().map_err(|error| format!("cannot share {worker}'s log: {error}"))?;
                command.env(env::MCP_LISTEN, format!("127.0.0.1:{mcp_port}"));
                command.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
                let child =
                    command.spawn().map_err(|error| format!("{worker} did not start ({text}): {error}"))?;
                let pid = child.id().unwrap_or_default();
                let handshake: std::pin::Pin<Box<dyn std::future::Future<Output = _>>> =
                    Box::pin(connect_http(mcp_port));
                Ok(((Some(child), handshake), pid))
            }
        })?;
        let service = match tokio::time::timeout(self.spec.start_patience, handshake).await {
            Ok(Ok(service)) => service,
            Ok(Err(error)) => {
                // The process may have forked children before it failed: none outlives it.
                let _ = kill_group(pid);
                listening.abort();
                return Err(format!(
                    "{worker} (incarnation {incarnation}) failed the MCP handshake: {error}{}",
                    self.stderr_tail(worker, incarnation)
                ));
            }
            Err(_) => {
                let _ = kill_group(pid);
                listening.abort();
                return Err(format!(
                    "{worker} (incarnation {incarnation}) did not finish the MCP handshake within {} (--start-timeout){}",
                    duration(self.spec.start_patience),
                    self.stderr_tail(worker, incarnation)
                ));
            }
        };
        self.peers.borrow_mut().insert(worker.to_owned(), service.peer().clone());
        Ok(Process { pid, service, listener: listening, child })
    }

    /// The last lines `worker`'s incarnation wrote to stderr, as a sentence's tail.
    fn stderr_tail(&self, worker: &str, incarnation: u32) -> String {
        let text = std::fs::read_to_string(self.stderr_path(worker, incarnation)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).collect();
        if lines.is_empty() {
            return String::new();
        }
        let tail = &lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..];
        format!("; its stderr ends: {}", tail.join(" / "))
    }

    /// Sends one agent command to its worker and records what came back.
    async fn execute(self: Rc<Self>, command: AgentCommand) {
        let shared = self.shared.clone();
        let (label, worker, operation_path) = match &command {
            AgentCommand::Call { label, worker, call, .. } => {
                let path = call.operation().path();
                (label.clone(), worker.clone(), path)
            }
            AgentCommand::Query { label, worker, operation, .. } => {
                (label.clone(), worker.clone(), operation.path())
            }
        };
        let peer = self.peers.borrow().get(&worker).cloned();
        let result = match peer {
            None => AgentResult::NoAnswer("connection_refused".into()),
            Some(peer) => {
                let (params, lose_answer) = self.params(&command);
                if matches!(command, AgentCommand::Call { .. }) {
                    shared
                        .history
                        .push(EventKind::CallReceived { label: label.clone(), worker: worker.clone() });
                }
                let now = ServingNow { label: Some(label.clone()), operation: Some(operation_path.clone()) };
                self.boundary.start_serving(&worker, &label, now);
                let answer = tokio::time::timeout(AGENT_TIMEOUT, peer.call_tool(params)).await;
                self.boundary.stop_serving(&worker, &label);
                let (result, bare) = match answer {
                    Err(_) => (AgentResult::NoAnswer("timeout".into()), false),
                    Ok(Err(rmcp::ServiceError::TransportClosed)) => {
                        (AgentResult::NoAnswer("connection_closed".into()), false)
                    }
                    Ok(Err(rmcp::ServiceError::McpError(error))) => {
                        (AgentResult::NoAnswer(format!("protocol error: {}", error.message)), false)
                    }
                    Ok(Err(error)) => (AgentResult::NoAnswer(format!("transport: {error}")), false),
                    Ok(Ok(answer)) => outcome_of(&answer, self.binding_of(&command)),
                };
                // A tool error's text is often an SDK's message; what the downstream answered the
                // call's requests says what happened (a 402, a 409, no answer at all).
                let result = match result {
                    AgentResult::NoAnswer(reason) if reason.starts_with("tool error: ") => {
                        AgentResult::NoAnswer(format!("{reason}{}", downstream_answers(&shared, &label)))
                    }
                    other => other,
                };
                if let AgentResult::Answered(outcome) = &result {
                    shared.history.push(EventKind::Answered {
                        label: label.clone(),
                        worker: worker.clone(),
                        outcome: outcome.clone(),
                        bare,
                    });
                }
                match result {
                    AgentResult::Answered(_) if lose_answer => {
                        AgentResult::NoAnswer("lost_by_scenario".into())
                    }
                    other => other,
                }
            }
        };
        match &result {
            AgentResult::Answered(_) => {
                shared.history.push(EventKind::AgentReceived { label: label.clone() })
            }
            AgentResult::NoAnswer(reason) => shared
                .history
                .push(EventKind::AgentGotNoAnswer { label: label.clone(), reason: reason.clone() }),
        }
        shared.agent.outstanding.borrow_mut().remove(&label);
        shared.agent.results.borrow_mut().insert(label, result);
    }

    /// Hands one queue delivery to `worker`'s [`CONSUME_TOOL`], then settles it with the queue
    /// once the `queue:before_ack` pause (if armed) lets it: acknowledged, or back for a later
    /// delivery. A worker killed meanwhile settles nothing: the delivery stays taken until its
    /// visibility timeout runs out, as a consumer's crash leaves it.
    async fn consume(
        self: Rc<Self>,
        worker: String,
        incarnation: u32,
        peer: Peer<RoleClient>,
        delivery: Delivery,
    ) {
        let shared = self.shared.clone();
        let envelope_id = delivery.envelope.envelope_id.clone();
        shared.history.push(EventKind::Delivered {
            envelope_id: envelope_id.clone(),
            attempt: delivery.attempt,
            worker: worker.clone(),
        });
        let key = format!("queue delivery {} attempt {}", delivery.delivery, delivery.attempt);
        let now = ServingNow { label: None, operation: delivery.origin.clone() };
        self.boundary.start_serving(&worker, &key, now);
        let arguments = ConsumeArguments { envelope: delivery.envelope.clone(), attempt: delivery.attempt };
        let arguments = match serde_json::to_value(&arguments) {
            Ok(serde_json::Value::Object(arguments)) => arguments,
            _ => serde_json::Map::new(),
        };
        let params = CallToolRequestParams::new(CONSUME_TOOL).with_arguments(arguments);
        let answer = tokio::time::timeout(AGENT_TIMEOUT, peer.call_tool(params)).await;
        self.boundary.stop_serving(&worker, &key);
        if self.boundary.is_alive(&worker, incarnation) {
            let consumed = match &answer {
                Ok(Ok(answer)) if answer.is_error != Some(true) => answer
                    .structured_content
                    .clone()
                    .and_then(|content| serde_json::from_value::<ConsumeAnswer>(content).ok())
                    .map(|answer| answer.consumed),
                _ => None,
            };
            let result = match (&answer, consumed) {
                (_, Some(Consumed::Ack)) => "ack",
                (_, Some(Consumed::Retry)) => "retry",
                (Err(_), None) => "no answer",
                (Ok(Ok(answer)), None) if answer.is_error == Some(true) => "tool error",
                (Ok(_), None) => "malformed answer",
            };
            shared.history.push(EventKind::Consumed {
                envelope_id,
                worker: worker.clone(),
                result: result.to_owned(),
            });
            let reached = PointReached { worker: worker.clone(), point: Reached::BeforeQueueAck };
            self.boundary.pause_at(reached).await;
            if self.boundary.is_alive(&worker, incarnation) {
                let ack = consumed == Some(Consumed::Ack);
                shared.queue.borrow_mut().settle(delivery.delivery, ack, shared.now_ms());
            }
        }
        self.consuming.borrow_mut().remove(&worker);
    }

    /// Hands the queue's deliverable envelopes to idle live workers, in name order (so that
    /// `worker-1` takes the first, as a scenario that pauses it expects).
    fn deliver_queue(self: &Rc<Self>) {
        if !self.spec.consumes {
            return;
        }
        let peers: Vec<(String, Peer<RoleClient>)> =
            self.peers.borrow().iter().map(|(worker, peer)| (worker.clone(), peer.clone())).collect();
        for (worker, peer) in peers {
            if self.consuming.borrow().contains(&worker) {
                continue;
            }
            let Some(incarnation) = self.boundary.alive.borrow().get(&worker).copied() else { continue };
            let Some(delivery) = self.shared.queue.borrow_mut().take(self.shared.now_ms()) else { return };
            self.consuming.borrow_mut().insert(worker.clone());
            tokio::task::spawn_local(self.clone().consume(worker, incarnation, peer, delivery));
        }
    }

    /// The tool map's binding of the role a call plays, if the map binds it.
    fn binding_of(&self, command: &AgentCommand) -> Option<&Binding> {
        match command {
            AgentCommand::Call { call, .. } => self.spec.tool_map.as_ref()?.binding(&call.tool),
            AgentCommand::Query { .. } => None,
        }
    }

    /// The `tools/call` an agent command is, and whether its answer is to be lost.
    fn params(&self, command: &AgentCommand) -> (CallToolRequestParams, bool) {
        let meta = |operation: &protocol::OperationRef, tool_version: &str, call_id: String, attempt: u32| {
            CallMeta {
                version: protocol::mcp::CONVENTIONS_VERSION,
                tenant: operation.tenant.clone(),
                environment: operation.environment.clone(),
                workflow_id: operation.workflow_id.clone(),
                step_id: operation.step_id.clone(),
                actor: operation.actor.clone(),
                tool_version: tool_version.to_owned(),
                call_id,
                attempt,
                idempotency_key: CallMeta::key_of(
                    &operation.tenant,
                    &operation.environment,
                    &operation.workflow_id,
                    &operation.step_id,
                ),
            }
        };
        let (name, arguments, call_meta, lose_answer) = match command {
            AgentCommand::Call { call, lose_answer, .. } => {
                let operation = call.operation();
                self.last_tool.borrow_mut().insert(operation.path(), call.tool_version.clone());
                let mut arguments = match serde_json::from_str::<serde_json::Value>(call.arguments.get()) {
                    Ok(serde_json::Value::Object(arguments)) => arguments,
                    _ => serde_json::Map::new(),
                };
                let call_meta = meta(&operation, &call.tool_version, call.call_id.clone(), call.attempt);
                if let Some(binding) = self.binding_of(command) {
                    // The role's business arguments, the contract's defaults filled (as the
                    // judge reads them), built into the bound tool's own.
                    let business = self
                        .shared
                        .contracts
                        .get(&call.tool, &call.tool_version)
                        .and_then(|contract| contract.validated_arguments(call).ok())
                        .unwrap_or(arguments);
                    let arguments =
                        binding.arguments_for(&business, &call.call_id, &call_meta.idempotency_key);
                    (binding.tool.clone(), arguments, call_meta, *lose_answer)
                } else {
                    if let KeyPlacement::Argument(argument) = &self.spec.key_placement {
                        arguments.insert(
                            argument.clone(),
                            serde_json::Value::String(call_meta.idempotency_key.clone()),
                        );
                    }
                    (call.tool.clone(), arguments, call_meta, *lose_answer)
                }
            }
            AgentCommand::Query { label, kind, operation, .. } => {
                let tool_version =
                    self.last_tool.borrow().get(&operation.path()).cloned().unwrap_or_default();
                let name = match kind {
                    RequestKind::Reconcile => RECONCILE_TOOL,
                    RequestKind::Poll | RequestKind::Call => POLL_TOOL,
                };
                (
                    name.to_owned(),
                    serde_json::Map::new(),
                    meta(operation, &tool_version, label.clone(), 1),
                    false,
                )
            }
        };
        let mut params = CallToolRequestParams::new(name).with_arguments(arguments);
        let mut meta = serde_json::Map::new();
        meta.insert(CALL_META.into(), serde_json::to_value(call_meta).unwrap_or_default());
        params.meta = Some(meta.into());
        (params, lose_answer)
    }
}

/// What an MCP answer claims (docs/mcp.md, "A server that knows nothing of replaylab"):
/// - `structuredContent` that is an `Outcome` is that outcome;
/// - `structuredContent` whose `status` is an outcome's label but which is no `Outcome`
///   otherwise claims something it does not say whole: no answer, `malformed_answer`;
/// - other `structuredContent` (the MCP SDKs' `{"result": ...}` for a tool returning a string, a
///   vendor's object) and none at all, with `isError: false`, are a bare success claim naming
///   nothing (the `bool`), its note saying what was read;
/// - `isError: true` claims nothing.
///
/// A tool the tool map binds reads further, as the map says: a tool error whose text the map
/// names is that outcome (`unknown`, `in_flight`, `rejected`), and a success names the effect
/// reference found where the map says (the judge holds it to the operation's own effect).
fn outcome_of(answer: &CallToolResult, binding: Option<&Binding>) -> (AgentResult, bool) {
    if answer.is_error == Some(true) {
        let text = text_of(answer);
        if let Some(outcome) = binding.and_then(|binding| binding.read_error(&text)) {
            let mut outcome = outcome;
            outcome.message = outcome.message.map(|note| format!("{note}: {}", quoted(&text)));
            return (AgentResult::Answered(outcome), false);
        }
        return (AgentResult::NoAnswer(format!("tool error: {}", quoted(&text))), false);
    }
    let mut outcome = Outcome::new(OutcomeStatus::Applied);
    match &answer.structured_content {
        Some(structured) => match serde_json::from_value::<Outcome>(structured.clone()) {
            Ok(outcome) => return (AgentResult::Answered(outcome), false),
            Err(error) if claims_an_outcome(structured) => {
                return (AgentResult::NoAnswer(format!("malformed_answer: {error}")), false);
            }
            Err(_) => {
                outcome.effect_reference = binding.and_then(|binding| binding.reference_in(structured));
                outcome.message = Some(format!(
                    "structuredContent without an outcome ({}): isError false taken as a success claim{}",
                    shown(structured),
                    outcome
                        .effect_reference
                        .as_ref()
                        .map(|reference| format!(" naming {reference}"))
                        .unwrap_or_default()
                ));
            }
        },
        None => {
            // A tool returning text (the TypeScript SDK's usual answer) may name its effect in
            // JSON text.
            outcome.effect_reference = binding.and_then(|binding| {
                binding.reference_in(&serde_json::from_str::<serde_json::Value>(&whole_text_of(answer)).ok()?)
            });
            outcome.message = Some(format!(
                "no structuredContent: isError false taken as a success claim{}",
                outcome
                    .effect_reference
                    .as_ref()
                    .map(|reference| format!(" naming {reference}"))
                    .unwrap_or_default()
            ));
        }
    }
    (AgentResult::Answered(outcome), true)
}

/// Whether `structured` names an outcome's label as its `status` (`applied`, `unknown`, ...).
fn claims_an_outcome(structured: &serde_json::Value) -> bool {
    structured
        .get("status")
        .is_some_and(|status| serde_json::from_value::<OutcomeStatus>(status.clone()).is_ok())
}

/// At most [`SHOWN_CONTENT_CHARS`] characters of `value`'s JSON, for a note.
fn shown(value: &serde_json::Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(SHOWN_CONTENT_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// How much of a server's own `structuredContent` a note shows.
const SHOWN_CONTENT_CHARS: usize = 160;

/// What the downstream answered the requests sent while serving `label`, as a sentence's tail
/// (`; the downstream answered POST /v1/payment_intents 402`), or nothing when it sent none.
fn downstream_answers(shared: &Shared, label: &str) -> String {
    let events = shared.history.events();
    let sent: Vec<(&str, String)> = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::DownstreamSent { request_id, serving: Some(serving), method, path, .. }
                if serving == label =>
            {
                Some((
                    request_id.as_str(),
                    format!("{method} {}", path.split('?').next().unwrap_or_default()),
                ))
            }
            _ => None,
        })
        .collect();
    if sent.is_empty() {
        return "; it sent the downstream no request".into();
    }
    let answers: Vec<String> = sent
        .iter()
        .map(|(id, request)| {
            let status = events.iter().find_map(|event| match &event.kind {
                EventKind::DownstreamAnswered { request_id, status, .. } if request_id == id => {
                    Some(status.to_string())
                }
                EventKind::DownstreamFailed { request_id, .. } if request_id == id => {
                    Some("no answer".into())
                }
                _ => None,
            });
            format!("{request} {}", status.as_deref().unwrap_or("no answer yet"))
        })
        .collect();
    format!("; the downstream answered {}", answers.join(", "))
}

fn text_of(answer: &CallToolResult) -> String {
    whole_text_of(answer).chars().take(200).collect()
}

/// Every text content of `answer`, joined, uncut: what a tool map reads a reference from.
fn whole_text_of(answer: &CallToolResult) -> String {
    let text: Vec<String> =
        answer.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect();
    text.join(" ")
}

/// The MCP handshake over streamable HTTP with a server that is starting on `port`: once
/// the port accepts connections (tried every few milliseconds; the caller bounds the wait).
async fn connect_http(port: u16) -> Result<RunningService<RoleClient, ()>, String> {
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        tokio::time::sleep(HTTP_RETRY).await;
    }
    let url = format!("http://127.0.0.1:{port}{}", protocol::mcp::HTTP_PATH);
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.clone());
    ().serve(transport).await.map_err(|error| format!("{error} (at {url})"))
}

/// How often a starting HTTP server's port is tried again.
const HTTP_RETRY: Duration = Duration::from_millis(20);

/// A loopback port free now, for `{port}` (the process binds it a moment later). Chosen below
/// the kernel's ephemeral range: a port the kernel hands out for a `bind(0)` (every worker's
/// downstream port, in this run and the runs beside it) could be handed out again between our
/// check and the process's bind, and the harness would then speak MCP to another worker's
/// downstream. Each harness process starts at its own place in the range and walks on.
fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next().and_then(|low| low.parse::<u32>().ok()))
        .unwrap_or(32_768);
    let (low, high) = (MCP_PORTS_FROM, ephemeral.max(MCP_PORTS_FROM + 1_000));
    let span = high - low;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = low + (start + offset) % span;
        let Ok(port) = u16::try_from(port) else { continue };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr()).map_or(0, |a| a.port())
}

/// The first port [`free_port`] hands out for a process's MCP server.
const MCP_PORTS_FROM: u32 = 20_000;

/// `SIGKILL` to the process group `pid` leads (the command's shell and everything it started),
/// which a signal to the harness then leaves alone ([`signals::forget`]). Says why it failed,
/// if it did.
fn kill_group(pid: u32) -> Result<(), String> {
    let killed = sigkill_group(pid);
    signals::forget(pid);
    killed
}

/// `SIGKILL` to the process group `pid` leads, through procps' `kill` (the workspace forbids
/// `unsafe`, so no `kill(2)` from here; the shell's own `kill` cannot name a group).
fn sigkill_group(pid: u32) -> Result<(), String> {
    if pid == 0 {
        return Err("no process id".into());
    }
    let status = std::process::Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{pid}")])
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|error| format!("kill did not run: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -s KILL -- -{pid} failed ({status})"))
    }
}

/// Whether process `pid` runs no more: gone, or a zombie its parent has not reaped yet.
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// The downstream timeout the processes are given unless a scenario names its own: the
/// reference executor's default (`executor::DEFAULT_DOWNSTREAM_TIMEOUT`; a test in the command's
/// crate checks they agree). It must not be longer than the scenarios' default lease (2 s): an owner still
/// waiting on the downstream when its lease runs out is taken over by another worker, which is
/// not what those scenarios are about (3 s made S12's first call `replayed` by a take-over).
/// S19 and S27, whose 1.5 s late answer must still reach the waiting process, ask for 4 s
/// (`[timing] downstream_timeout`): at 2 s, the 0.5 s of margin was eaten once by a very busy
/// machine (a load of 9 to 13 on 2 cores), and their `told` premise catches what is left.
pub const PROCESS_DOWNSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a killed process may take to die before the crash counts as not having happened.
const KILL_PATIENCE: Duration = Duration::from_secs(5);

/// The black-box world of one run.
pub struct RealWorld {
    runtime: tokio::runtime::Runtime,
    local: tokio::task::LocalSet,
    run: Rc<Run>,
    processes: BTreeMap<String, Process>,
    began: Instant,
    /// A restart that failed: the next step stops the run with it.
    failure: Option<String>,
    /// The deadlines the processes were given.
    given: world::GivenTiming,
}

impl std::fmt::Debug for RealWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealWorld").field("directory", &self.run.directory).finish_non_exhaustive()
    }
}

impl RealWorld {
    /// Builds the world for `scenario`: the downstream, a run directory, and every worker
    /// process started and past its MCP handshake.
    pub fn build(
        scenario: &Scenario,
        seed: u64,
        spec: Arc<BlackBoxSpec>,
    ) -> Result<(RealWorld, Rc<Shared>), String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| format!("no tokio runtime: {error}"))?;
        let local = tokio::task::LocalSet::new();
        let shared =
            Shared::new(scenario, seed, Rc::new(NoFactory), WorldClock::real(), Arc::new(wire::TcpConnector));
        let (directory, name) = run_directory(scenario, seed)?;
        let contract = shared.contracts.iter().next().cloned().ok_or("no contracts")?;
        let given = world::GivenTiming {
            lease: contract.lease,
            retention: contract.retention,
            downstream_timeout: scenario.timing.downstream_timeout.unwrap_or(PROCESS_DOWNSTREAM_TIMEOUT),
        };
        let timing = [
            (env::LEASE_MS, given.lease.as_millis().to_string()),
            (env::RETENTION_MS, given.retention.as_millis().to_string()),
            (env::DOWNSTREAM_TIMEOUT_MS, given.downstream_timeout.as_millis().to_string()),
            (env::SERVICES, services_of(&shared.downstream.config())),
        ];
        let boundary = Rc::new(Boundary {
            shared: shared.clone(),
            router: shared.downstream.business_router(),
            armed: RefCell::default(),
            held: RefCell::default(),
            alive: RefCell::default(),
            serving: RefCell::default(),
            lingering: RefCell::default(),
            serving_incarnation: RefCell::default(),
            webhook_ports: RefCell::default(),
            webhook_path: spec.webhook_path.clone(),
            open: Rc::default(),
        });
        let run = Rc::new(Run {
            spec: spec.clone(),
            shared: shared.clone(),
            boundary,
            directory,
            name,
            timing,
            peers: RefCell::default(),
            last_tool: RefCell::default(),
            consuming: RefCell::default(),
            starting_ms: Cell::new(0),
            tenant: scenario
                .operations
                .values()
                .next()
                .map(|operation| operation.tenant.clone())
                .unwrap_or_default(),
        });
        let mut world = RealWorld {
            runtime,
            local,
            run,
            processes: BTreeMap::new(),
            began: Instant::now(),
            failure: None,
            given,
        };
        // The downstream's completion webhooks go to the relay, which passes them on.
        let mut config = shared.downstream.config();
        if let Some(webhook) = &mut config.webhook {
            let boundary = world.run.boundary.clone();
            let port = world.block_on(async move {
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
                    .await
                    .map_err(|error| format!("no loopback port for the webhook relay: {error}"))?;
                let port = listener.local_addr().map_err(|error| error.to_string())?.port();
                tokio::task::spawn_local(relay(boundary, listener));
                Ok::<u16, String>(port)
            })?;
            webhook.url = format!("http://127.0.0.1:{port}/v1/webhooks");
            shared.downstream.set_config(config);
        }
        let names = worker_names(scenario, &spec);
        let run = world.run.clone();
        // Every process starts at once; a run waits for the slowest handshake only.
        let began = Instant::now();
        let started = world.block_on(async move {
            let starts: Vec<_> = names
                .into_iter()
                .map(|name| {
                    let run = run.clone();
                    tokio::task::spawn_local(async move {
                        let process = run.start(&name, 0).await;
                        (name, process)
                    })
                })
                .collect();
            let mut started = Vec::new();
            for start in starts {
                started.push(start.await.map_err(|error| format!("a process start failed: {error}")));
            }
            started
        });
        world.run.starting_ms.set(began.elapsed().as_millis() as u64);
        // Every process that started belongs to the world before any failure is returned:
        // dropping the world then kills their groups.
        let mut failure = None;
        for start in started {
            match start {
                Ok((name, Ok(process))) => {
                    world.processes.insert(name, process);
                }
                Ok((_, Err(error))) | Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        match failure {
            Some(error) => Err(error),
            None => {
                // The scenario's clock starts now that every process is up: a slow start takes
                // nothing from the time its steps let pass.
                shared.clock.start_real();
                Ok((world, shared))
            }
        }
    }

    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(self.local.run_until(future))
    }

    /// Kills `worker`'s process group and waits until its process is dead; says why not.
    fn kill(&mut self, worker: &str) -> Result<(), String> {
        let Some(process) = self.processes.remove(worker) else { return Ok(()) };
        let killed = kill_group(process.pid).and_then(|()| {
            let deadline = Instant::now() + KILL_PATIENCE;
            while !is_dead(process.pid) {
                if Instant::now() > deadline {
                    return Err(format!(
                        "process {} still runs {} after SIGKILL",
                        process.pid,
                        duration(KILL_PATIENCE)
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        });
        self.run.boundary.alive.borrow_mut().remove(worker);
        self.run.boundary.lingering.borrow_mut().remove(worker);
        self.run.peers.borrow_mut().remove(worker);
        process.listener.abort();
        let _context = self.runtime.enter();
        let _local = self.local.enter();
        drop(process.service);
        if let Some(mut child) = process.child {
            // Already killed with its group; this lets tokio reap it.
            let _ = child.start_kill();
        }
        killed
    }
}

impl Drop for RealWorld {
    fn drop(&mut self) {
        let workers: Vec<String> = self.processes.keys().cloned().collect();
        for worker in workers {
            let _ = self.kill(&worker);
        }
        // Lets the killed children be reaped and the tasks end.
        self.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
        let _ = std::fs::remove_dir_all(&self.run.directory);
    }
}

impl World for RealWorld {
    fn step(&mut self) -> Result<(), String> {
        if let Some(failure) = self.failure.take() {
            return Err(failure);
        }
        let commands: Vec<AgentCommand> = self.run.shared.agent.inbox.borrow_mut().drain(..).collect();
        for command in commands {
            self.local.spawn_local(self.run.clone().execute(command));
        }
        let run = self.run.clone();
        self.block_on(async move {
            run.deliver_queue();
            tokio::time::sleep(SLICE).await;
        });
        Ok(())
    }

    fn stepped(&self) -> Duration {
        self.began.elapsed()
    }

    fn skips_idle_time(&self) -> bool {
        false
    }

    /// A process's requests carry the tag of what it served when it sent them (or served
    /// last, while it serves nothing): not every request has one.
    fn tags_every_request(&self) -> bool {
        false
    }

    fn sees_store(&self) -> bool {
        false
    }

    fn in_flight(&mut self) -> usize {
        0
    }

    fn open_downstream_requests(&self) -> usize {
        self.run.boundary.open.get()
    }

    fn arm(&mut self, name: &str, worker: Option<String>, point: PausePoint, operation: Option<String>) {
        self.run.boundary.armed.borrow_mut().insert(name.to_owned(), Armed { worker, point, operation });
    }

    fn reached(&mut self, name: &str) -> Option<PointReached> {
        self.run.boundary.held.borrow().get(name).map(|(reached, _)| reached.clone())
    }

    fn release(&mut self, name: &str) {
        self.run.boundary.armed.borrow_mut().remove(name);
        let held = self.run.boundary.held.borrow_mut().remove(name);
        drop(held);
    }

    fn crash(&mut self, worker: &str) -> Result<(), String> {
        self.kill(worker)
    }

    fn timing_given(&self) -> Option<world::GivenTiming> {
        Some(self.given)
    }

    fn real_time(&self) -> Option<reports::RealTime> {
        Some(reports::RealTime {
            wall_ms: self.began.elapsed().as_millis() as u64,
            starting_ms: self.run.starting_ms.get(),
            waiting_ms: 0,
        })
    }

    fn failure_notes(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.run.directory.join("logs")) else { return notes };
        let mut files: Vec<PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
        files.sort();
        for file in files {
            let Some(name) = file.file_name().and_then(|n| n.to_str()) else { continue };
            let Some((worker, incarnation)) =
                name.strip_suffix(".stderr").and_then(|stem| stem.rsplit_once('.'))
            else {
                continue;
            };
            let Ok(incarnation) = incarnation.parse() else { continue };
            let tail = self.run.stderr_tail(worker, incarnation);
            if let Some(tail) = tail.strip_prefix("; its stderr ends: ") {
                notes.push(format!("{worker} (incarnation {incarnation}) wrote to stderr: {tail}"));
            }
        }
        notes
    }

    fn restart(&mut self, worker: &str) {
        let incarnation = self.run.shared.incarnations.borrow().get(worker).copied().unwrap_or(0) + 1;
        self.run.shared.incarnations.borrow_mut().insert(worker.to_owned(), incarnation);
        if let Err(error) = self.kill(worker) {
            self.failure = Some(format!("{worker} could not be stopped before its restart: {error}"));
            return;
        }
        let run = self.run.clone();
        let name = worker.to_owned();
        let began = Instant::now();
        let started = self.block_on(async move { run.start(&name, incarnation).await });
        self.run.starting_ms.set(self.run.starting_ms.get() + began.elapsed().as_millis() as u64);
        match started {
            Ok(process) => {
                self.processes.insert(worker.to_owned(), process);
            }
            Err(error) => self.failure = Some(error),
        }
    }
}

/// [`env::SERVICES`] for a downstream configuration: what each service does in this run.
fn services_of(config: &fake_downstream::DownstreamConfig) -> String {
    let services: protocol::mcp::Services = fake_downstream::Service::ALL
        .into_iter()
        .map(|service| {
            let traits = config.service(service);
            let honours_keys = traits.idempotency == fake_downstream::IdempotencyMode::Honoured;
            (
                service.as_str().to_owned(),
                protocol::mcp::ServiceTraits { honours_keys, receipts: traits.receipts },
            )
        })
        .collect();
    serde_json::to_string(&services).unwrap_or_default()
}

/// How a run directory's name starts, before this process's id.
const RUN_DIRECTORY_PREFIX: &str = "replaylab-black-box-";

/// A fresh directory for one run, with `state/` and `logs/`, and the run's name for `{run}`:
/// lowercase letters, digits and `_`, unique on this machine while this process lives (a
/// Postgres schema name, say).
fn run_directory(scenario: &Scenario, seed: u64) -> Result<(PathBuf, String), String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let pid = std::process::id();
    let directory =
        std::env::temp_dir().join(format!("{RUN_DIRECTORY_PREFIX}{pid}-{number}-{}-{seed}", scenario.id));
    let _ = std::fs::remove_dir_all(&directory);
    for sub in ["state", "logs"] {
        std::fs::create_dir_all(directory.join(sub))
            .map_err(|error| format!("cannot create the run directory {}: {error}", directory.display()))?;
    }
    let name = format!("r{pid}_{number}_{}_{seed}", scenario.id.to_ascii_lowercase());
    Ok((directory, name))
}

/// The factory a black-box run's [`Shared`] holds: it is never asked (processes are started
/// instead).
#[derive(Debug)]
struct NoFactory;

impl protocol::ExecutorFactory for NoFactory {
    fn start(&self, _env: protocol::WorkerEnv) -> Box<dyn protocol::Executor> {
        unreachable!("the black-box world starts processes, not executors in process")
    }
}

/// Starts the command once, reads its manifest and tool list, and stops it: what
/// `--executor-cmd` learns before any run (a command that cannot start is bad input).
pub fn probe(spec: &BlackBoxSpec) -> Result<Probe, String> {
    let scenario = scenarios::builtin().into_iter().next().ok_or("no built-in scenario")?;
    let one = Arc::new(BlackBoxSpec { workers: 1, ..spec.clone() });
    let began = Instant::now();
    let (world, _shared) = RealWorld::build(&scenario, 0, one)?;
    let start = began.elapsed();
    let peer = world.run.peers.borrow().get("worker-1").cloned().ok_or("worker-1 did not start")?;
    let server = peer
        .peer_info()
        .and_then(|info| {
            info.server_info.as_ref().map(|server| format!("{} {}", server.name, server.version))
        })
        .unwrap_or_default();
    let (tools, manifest) = world.block_on(async move {
        let tools = tokio::time::timeout(DEFAULT_START_PATIENCE, peer.list_all_tools()).await;
        let manifest = tokio::time::timeout(
            DEFAULT_START_PATIENCE,
            peer.read_resource(ReadResourceRequestParams::new(MANIFEST_URI)),
        )
        .await;
        (tools, manifest)
    });
    let listed: Vec<ListedTool> = match tools {
        Ok(Ok(tools)) => tools
            .into_iter()
            .map(|tool| ListedTool {
                name: tool.name.to_string(),
                description: tool.description.as_ref().map(|text| text.to_string()),
                input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
                annotations: tool.annotations.as_ref().and_then(|a| serde_json::to_value(a).ok()),
            })
            .collect(),
        Ok(Err(error)) => return Err(format!("tools/list failed: {error}")),
        Err(_) => return Err("tools/list was not answered in time".into()),
    };
    let tools: BTreeSet<String> = listed.iter().map(|tool| tool.name.clone()).collect();
    let contract_tools: BTreeSet<String> = match &spec.tool_map {
        Some(map) => {
            let roles = map.served_roles(&tools)?;
            for binding in map.roles.values() {
                if let Some(tool) = listed.iter().find(|tool| tool.name == binding.tool) {
                    check_required(map, binding, tool)?;
                }
            }
            roles
        }
        None => tools
            .iter()
            .filter(|tool| protocol::ContractSet::builtin().iter().any(|contract| &contract.name == *tool))
            .cloned()
            .collect(),
    };
    let manifest = match manifest {
        Ok(Ok(result)) => {
            let text = result.contents.iter().find_map(|contents| match contents {
                ResourceContents::TextResourceContents { text, .. } => Some(text.clone()),
                _ => None,
            });
            match text.map(|text| serde_json::from_str::<Manifest>(&text)) {
                Some(Ok(manifest)) => Some(manifest),
                Some(Err(error)) => return Err(format!("the manifest {MANIFEST_URI} is not valid: {error}")),
                None => None,
            }
        }
        // No manifest (no resources, or not this one): the listed contract tools only.
        Ok(Err(_)) | Err(_) => None,
    };
    let polls = tools.contains(POLL_TOOL);
    let webhook_path = manifest.as_ref().and_then(|manifest| manifest.capabilities.webhook_path.as_deref());
    if let Some(path) =
        webhook_path.filter(|path| !path.starts_with('/') || !path.chars().all(|c| c.is_ascii_graphic()))
    {
        return Err(format!("the manifest's webhook_path {}: a path from `/`, no spaces", quoted(path)));
    }
    if manifest.as_ref().is_some_and(|manifest| manifest.capabilities.queue_consumer)
        && !tools.contains(CONSUME_TOOL)
    {
        return Err(format!(
            "the manifest declares queue_consumer, but tools/list has no {CONSUME_TOOL}: the queue could deliver nothing"
        ));
    }
    let capabilities = match &manifest {
        Some(manifest) => manifest.capabilities.to_capabilities(&contract_tools, polls),
        None => ExecutorCapabilities::tools(contract_tools.clone()).with_poll(polls),
    };
    drop(world);
    Ok(Probe { manifest, tools, listed, capabilities, server, start })
}

/// Refuses a binding that leaves one of the tool's required arguments (its `inputSchema`'s
/// `required`) unbuilt: every call would be refused by the server's own validation.
fn check_required(map: &ToolMap, binding: &Binding, tool: &ListedTool) -> Result<(), String> {
    let required: Vec<&str> = tool
        .input_schema
        .get("required")
        .and_then(|required| required.as_array())
        .map(|names| names.iter().filter_map(|name| name.as_str()).collect())
        .unwrap_or_default();
    let built: BTreeSet<String> = match &binding.arguments {
        Some(table) => table.keys().cloned().collect(),
        None => protocol::ContractSet::builtin()
            .iter()
            .filter(|contract| contract.name == binding.role)
            .flat_map(|contract| contract.arguments.keys().cloned())
            .collect(),
    };
    let missing: Vec<&str> = required
        .into_iter()
        .filter(|name| !built.contains(*name) && binding.key_argument.as_deref() != Some(*name))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}: [tools.{}] builds no {} for {}, which its inputSchema requires: add it under [tools.{}.arguments] (a business argument, a `{{ value = ... }}`, or `{{ per_call = true }}`), or name it key_argument",
        map.path.display(),
        quoted(&binding.role),
        missing.join(", "),
        quoted(&binding.tool),
        quoted(&binding.role)
    ))
}
