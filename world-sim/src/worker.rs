//! A worker host: one executor behind the tool-call protocol over simulated HTTP, a queue
//! consumer, and the environment the harness hands the executor (downstream client, clock,
//! authorizer, outbox, store gate, entropy). The environment is where the harness owns the
//! boundaries: it tags downstream requests with the operation being served, records what the
//! executor saw, and offers the pause points scenarios use.

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use protocol::{
    AuthDecision, AuthRequest, Authorizer, Background, Consumed, DownstreamClient, Entropy, Envelope,
    Executor, LocalBoxFuture, OperationRef, Outbox, OutboxError, Outcome, ReconciliationEntry,
    Reconciliations, StoreGate, ToolCall, WebhookEvent, WorkerEnv,
};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use tracing::Instrument;
use wire::{HttpClient, HttpRequest, HttpResponse, Problem, SimConnector, TransportError, MAX_BODY_BYTES};

use judge::history::EventKind;
use scenarios::Moment;
use world::boundary::{
    bounded_finding, references_in_answer, tenant_in, ORIGIN_HEADER, REQUEST_ID_HEADER, REQUEST_LABEL_HEADER,
};
use world::{PointReached, Reached, Shared, PORT};

/// The target of the spans every executor call runs in (they name the worker, incarnation and
/// operation): `harness`, as before the simulated world was a crate of its own, so that a
/// `--log` filter such as `my_executor=debug,harness=info` keeps them.
pub const SPAN_TARGET: &str = "harness";
/// How often an idle queue consumer looks for work.
const QUEUE_POLL: Duration = Duration::from_millis(50);

/// What the current task serves: the operation, and the agent's request.
#[derive(Debug, Clone, Default)]
struct Serving {
    /// The operation (`tenant/environment/workflow/step`).
    origin: Option<String>,
    /// The label of the agent's request (a call, poll or reconcile).
    label: Option<String>,
}

tokio::task_local! {
    /// What the current task serves.
    static SERVING: Serving;
}

/// What the current task serves, as far as the harness set it.
fn current_serving() -> Serving {
    SERVING.try_with(Clone::clone).unwrap_or_default()
}

/// The operation the current task serves, if the harness set one.
fn current_origin() -> Option<String> {
    current_serving().origin
}

/// What one worker incarnation holds.
struct Worker {
    name: String,
    /// How many times this worker started before this incarnation.
    incarnation: u32,
    executor: Rc<dyn Executor>,
    shared: Rc<Shared>,
}

/// The worker host's software: started at first and after each restart.
pub async fn run(shared: Rc<Shared>, name: String) -> turmoil::Result {
    let incarnation = {
        let mut incarnations = shared.incarnations.borrow_mut();
        let count = incarnations.entry(name.clone()).or_insert(0);
        let incarnation = *count;
        *count += 1;
        incarnation
    };
    let env = WorkerEnv {
        worker_id: name.clone(),
        incarnation,
        downstream: Rc::new(SimDownstream {
            worker: name.clone(),
            shared: shared.clone(),
            client: HttpClient::new(Arc::new(SimConnector), "downstream", PORT),
        }),
        clock: Arc::new(shared.clock.clone()),
        authorizer: Rc::new(SimAuthorizer { worker: name.clone(), shared: shared.clone() }),
        outbox: Rc::new(SimOutbox { shared: shared.clone() }),
        reconciliations: Rc::new(SimReconciliations { worker: name.clone(), shared: shared.clone() }),
        store_gate: Rc::new(SimStoreGate { worker: name.clone(), shared: shared.clone() }),
        background: Rc::new(SimBackground { worker: name.clone(), shared: shared.clone() }),
        entropy: Rc::new(SimEntropy(RefCell::new(ChaCha8Rng::seed_from_u64(
            shared.derived_seed(&format!("{name}#{incarnation}")),
        )))),
        contracts: shared.contracts.clone(),
    };
    // A panic in `start` is the executor's: the worker records it and stays down, and the
    // runner stops the run as `crashed`, instead of the panic taking the simulation with it.
    let executor: Rc<dyn Executor> =
        match tracing::info_span!(target: SPAN_TARGET, "start", worker = %name, incarnation)
            .in_scope(|| std::panic::catch_unwind(AssertUnwindSafe(|| shared.factory.start(env))))
        {
            Ok(executor) => Rc::from(executor),
            Err(payload) => {
                shared.history.push(EventKind::ExecutorPanicked {
                    worker: name.clone(),
                    during: "start".into(),
                    message: judge::text::panic_message(payload.as_ref()),
                });
                shared.start_panicked.set(true);
                std::future::pending().await
            }
        };
    let worker = Rc::new(Worker { name, incarnation, executor, shared });
    tokio::task::spawn_local(consume_queue(worker.clone()));
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let worker = worker.clone();
        tokio::task::spawn_local(async move {
            let service = hyper::service::service_fn(move |request| handle(worker.clone(), request));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

// ----------------------------------------------------------------------- tool-call protocol

type Answer = hyper::Response<Full<Bytes>>;

fn json_answer(status: u16, value: &impl serde::Serialize, content_type: &str) -> Answer {
    let body = serde_json::to_vec(value).expect("answers serialise");
    hyper::Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

fn problem(status: u16, kind: &str, detail: impl Into<String>) -> Answer {
    json_answer(status, &Problem::new(status, kind, detail), "application/problem+json")
}

async fn handle(worker: Rc<Worker>, request: hyper::Request<Incoming>) -> Result<Answer, Infallible> {
    let label = request
        .headers()
        .get(REQUEST_LABEL_HEADER)
        .and_then(|value| value.to_str().ok())
        .map_or_else(|| "unlabelled".to_owned(), wire::percent_decode);
    let route = (request.method().clone(), request.uri().path().to_owned());
    let body = match Limited::new(request.into_body(), MAX_BODY_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Ok(problem(413, "body_too_large", "the body is too large or unreadable")),
    };
    let answer = match (route.0.as_str(), route.1.as_str()) {
        ("POST", "/v1/tool-calls") => match serde_json::from_slice::<ToolCall>(&body) {
            Ok(call) => {
                let serving = Serving { origin: Some(call.operation().path()), label: Some(label.clone()) };
                worker
                    .shared
                    .history
                    .push(EventKind::CallReceived { label: label.clone(), worker: worker.name.clone() });
                let executor = worker.executor.clone();
                let outcome = worker.guarded("call", serving, executor.call(call)).await;
                worker.answer(label, outcome)
            }
            Err(error) => problem(400, "invalid_tool_call", error.to_string()),
        },
        ("POST", path @ ("/v1/operations/poll" | "/v1/operations/reconcile")) => {
            match serde_json::from_slice::<OperationRef>(&body) {
                Ok(operation) => {
                    let serving = Serving { origin: Some(operation.path()), label: Some(label.clone()) };
                    let executor = worker.executor.clone();
                    let outcome = if path.ends_with("poll") {
                        worker.guarded("poll", serving, executor.poll(operation)).await
                    } else {
                        worker.guarded("reconcile", serving, executor.reconcile(operation)).await
                    };
                    worker.answer(label, outcome)
                }
                Err(error) => problem(400, "invalid_operation", error.to_string()),
            }
        }
        ("POST", "/v1/webhooks") => {
            let event: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
            let event_id = event.as_ref().and_then(|e| e["event_id"].as_str()).map(str::to_owned);
            let job = event.as_ref().and_then(|e| e["job_id"].as_str()).map(str::to_owned);
            let origin = job.as_deref().and_then(|job| worker.shared.origin_of_job(job));
            worker.shared.history.push(EventKind::WebhookReceived {
                worker: worker.name.clone(),
                origin: origin.clone(),
                event_id: event_id.clone(),
                references: job.into_iter().collect(),
            });
            let executor = worker.executor.clone();
            let serving = Serving { origin, label: None };
            let ack = worker
                .guarded("webhook", serving, executor.webhook(WebhookEvent { body: body.to_vec() }))
                .await;
            let ack_name = ack.map_or("panicked".to_owned(), |ack| snake(&ack));
            worker.shared.history.push(EventKind::WebhookHandled {
                worker: worker.name.clone(),
                event_id,
                ack: ack_name.clone(),
            });
            if ack_name == "panicked" {
                problem(500, "executor_panicked", "the executor panicked")
            } else {
                json_answer(200, &serde_json::json!({ "ack": ack_name }), "application/json")
            }
        }
        (method, path) => problem(404, "not_found", format!("no route for {method} {path}")),
    };
    Ok(answer)
}

fn snake(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

impl Worker {
    /// Runs `future` as the executor's work for `serving`, catching a panic.
    async fn guarded<T>(&self, during: &str, serving: Serving, future: LocalBoxFuture<'_, T>) -> Option<T> {
        let _busy = Busy::new(&self.shared);
        let span = self.span(during, &serving);
        match SERVING.scope(serving, CatchUnwind(AssertUnwindSafe(future))).instrument(span).await {
            Ok(value) => Some(value),
            Err(message) => {
                self.shared.history.push(EventKind::ExecutorPanicked {
                    worker: self.name.clone(),
                    during: during.to_owned(),
                    message,
                });
                None
            }
        }
    }

    /// The `tracing` span of one piece of the executor's work (`during`: call, poll,
    /// reconcile, consume, webhook): the worker, its incarnation, the operation (tenant,
    /// environment, workflow, step) and the agent's label for the request. Its fields are
    /// formatted only when a run captures its log.
    fn span(&self, during: &str, serving: &Serving) -> tracing::Span {
        let (worker, incarnation) = (&self.name, self.incarnation);
        let operation = serving.origin.as_deref().unwrap_or("-");
        let label = serving.label.as_deref().unwrap_or("-");
        match during {
            "call" => {
                tracing::info_span!(target: SPAN_TARGET, "call", worker = %worker, incarnation, operation = %operation, label = %label)
            }
            "poll" => {
                tracing::info_span!(target: SPAN_TARGET, "poll", worker = %worker, incarnation, operation = %operation, label = %label)
            }
            "reconcile" => {
                tracing::info_span!(target: SPAN_TARGET, "reconcile", worker = %worker, incarnation, operation = %operation, label = %label)
            }
            "consume" => {
                tracing::info_span!(target: SPAN_TARGET, "consume", worker = %worker, incarnation, operation = %operation)
            }
            _ => {
                tracing::info_span!(target: SPAN_TARGET, "webhook", worker = %worker, incarnation, operation = %operation)
            }
        }
    }

    fn answer(&self, label: String, outcome: Option<Outcome>) -> Answer {
        match outcome {
            Some(outcome) => {
                self.shared.history.push(EventKind::Answered {
                    label,
                    worker: self.name.clone(),
                    outcome: outcome.clone(),
                    bare: false,
                });
                json_answer(200, &outcome, "application/json")
            }
            None => problem(500, "executor_panicked", "the executor panicked"),
        }
    }
}

/// Polls a future, turning a panic into `Err(message)`.
struct CatchUnwind<F>(AssertUnwindSafe<F>);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut inner.0).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Err(payload) => Poll::Ready(Err(judge::text::panic_message(payload.as_ref()))),
        }
    }
}

/// Counts an executor call or background task in progress in [`Shared::executor_busy`] while
/// it lives; dropped when the work ends, panics, or the worker crashes (turmoil drops the
/// task's future).
struct Busy(Rc<Shared>);

impl Busy {
    fn new(shared: &Rc<Shared>) -> Self {
        shared.executor_busy.set(shared.executor_busy.get() + 1);
        Self(shared.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.executor_busy.set(self.0.executor_busy.get() - 1);
    }
}

// ----------------------------------------------------------------------- queue consumer

async fn consume_queue(worker: Rc<Worker>) {
    loop {
        tokio::time::sleep(QUEUE_POLL).await;
        let now = worker.shared.now_ms();
        let Some(delivery) = worker.shared.queue.borrow_mut().take(now) else { continue };
        worker.shared.history.push(EventKind::Delivered {
            envelope_id: delivery.envelope.envelope_id.clone(),
            attempt: delivery.attempt,
            worker: worker.name.clone(),
        });
        let executor = worker.executor.clone();
        let serving = Serving { origin: delivery.origin.clone(), label: None };
        let result = worker.guarded("consume", serving, executor.consume(delivery.envelope.clone())).await;
        let ack = result == Some(Consumed::Ack);
        worker.shared.history.push(EventKind::Consumed {
            envelope_id: delivery.envelope.envelope_id.clone(),
            worker: worker.name.clone(),
            result: match result {
                Some(Consumed::Ack) => "ack",
                Some(Consumed::Retry) => "retry",
                None => "panicked",
            }
            .to_owned(),
        });
        turmoil::barriers::trigger(PointReached {
            worker: worker.name.clone(),
            point: Reached::BeforeQueueAck,
        })
        .await;
        let now = worker.shared.now_ms();
        worker.shared.queue.borrow_mut().settle(delivery.delivery, ack, now);
    }
}

// ----------------------------------------------------------------------- the environment

struct SimDownstream {
    worker: String,
    shared: Rc<Shared>,
    client: HttpClient,
}

/// The tenant a downstream request names: its JSON body's `tenant`, else its `tenant` query.
fn tenant_of(request: &HttpRequest) -> Option<String> {
    tenant_in(&request.path, authorization_of(request), &request.body)
}

/// The request's `Authorization` header, if any (a Stripe twin's secret key names the tenant).
fn authorization_of(request: &HttpRequest) -> Option<&str> {
    request
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        .map(|(_, value)| value.as_str())
}

/// Effect references a downstream answer carries (receipts the executor has seen).
fn references_in(response: &HttpResponse) -> Vec<String> {
    references_in_answer(response.status, &response.body)
}

impl DownstreamClient for SimDownstream {
    fn send(&self, request: HttpRequest) -> LocalBoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            let serving = current_serving();
            let origin = serving.origin.clone();
            let path = request.path.split('?').next().unwrap_or_default().to_owned();
            let method = request.method.to_string();
            let described = format!("{method} {path}");
            let idempotency_key = request
                .headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("idempotency-key"))
                .map(|(_, value)| value.clone());
            let request_id = self.shared.next_request_id(&self.worker);
            let content =
                fake_downstream::request_content(&method, &path, authorization_of(&request), &request.body);
            let tenant = tenant_of(&request);
            let operations = self.shared.operations_sent(content.as_ref());
            let mut request = request;
            // The harness's own headers cannot be set by the executor.
            request.headers.retain(|(name, _)| {
                !name.eq_ignore_ascii_case(ORIGIN_HEADER) && !name.eq_ignore_ascii_case(REQUEST_ID_HEADER)
            });
            if let Some(origin) = &origin {
                request.headers.push((ORIGIN_HEADER.to_owned(), wire::percent_encode(origin)));
            }
            request.headers.push((REQUEST_ID_HEADER.to_owned(), request_id.clone()));
            let reached = |moment, committed| {
                PointReached::downstream(&self.worker, moment, (&method, &path), committed, &operations)
            };
            turmoil::barriers::trigger(reached(Moment::Before, false)).await;
            self.shared.history.push(EventKind::DownstreamSent {
                worker: self.worker.clone(),
                request_id: request_id.clone(),
                origin: origin.clone(),
                serving: serving.label,
                method: method.clone(),
                path: request.path.clone(),
                idempotency_key,
                tenant,
                content,
            });
            let result = self.client.send(request).await;
            let committed = self.shared.history.committed(&request_id);
            turmoil::barriers::trigger(reached(Moment::After, committed)).await;
            match &result {
                Ok(response) => self.shared.history.push(EventKind::DownstreamAnswered {
                    worker: self.worker.clone(),
                    request_id,
                    origin,
                    request: described,
                    status: response.status,
                    references: references_in(response),
                }),
                Err(error) => self.shared.history.push(EventKind::DownstreamFailed {
                    worker: self.worker.clone(),
                    request_id,
                    origin,
                    request: described,
                    error: error.to_string(),
                }),
            }
            result
        })
    }
}

struct SimAuthorizer {
    worker: String,
    shared: Rc<Shared>,
}

impl Authorizer for SimAuthorizer {
    fn authorize(&self, request: AuthRequest) -> LocalBoxFuture<'_, AuthDecision> {
        Box::pin(async move {
            // The fake downstream's authorizer, asked in process (out-of-process executors ask
            // it over HTTP, `GET /v1/authz`); the decision is recorded here, as it is made.
            let allowed = self.shared.downstream.allows(&request.actor, &request.tool);
            self.shared.history.push(EventKind::Authorization {
                worker: self.worker.clone(),
                actor: request.actor.clone(),
                tool: request.tool.clone(),
                allowed,
            });
            let reason = if allowed { "permitted" } else { "permission revoked" };
            AuthDecision { allowed, reason: reason.to_owned() }
        })
    }
}

struct SimOutbox {
    shared: Rc<Shared>,
}

impl Outbox for SimOutbox {
    fn enqueue(&self, envelope: Envelope) -> LocalBoxFuture<'_, Result<(), OutboxError>> {
        Box::pin(async move {
            let origin = current_origin();
            self.shared.history.push(EventKind::Enqueued {
                envelope_id: envelope.envelope_id.clone(),
                operation_key: envelope.operation_key.clone(),
                origin: origin.clone(),
                deliveries: self.shared.queue_copies,
            });
            let visible_at = self.shared.now_ms().saturating_add(self.shared.queue_delay_ms);
            self.shared.queue.borrow_mut().push(envelope, origin, self.shared.queue_copies, visible_at);
            Ok(())
        })
    }
}

/// The operators' queue: every entry goes into the history, where O13 reads it.
struct SimReconciliations {
    worker: String,
    shared: Rc<Shared>,
}

impl Reconciliations for SimReconciliations {
    fn file(&self, entry: ReconciliationEntry) -> LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            let finding = bounded_finding(entry.finding);
            self.shared.history.push(EventKind::ReconciliationFiled {
                worker: self.worker.clone(),
                tenant: entry.tenant,
                operation_key: entry.operation_key,
                finding,
            });
        })
    }
}

struct SimStoreGate {
    worker: String,
    shared: Rc<Shared>,
}

impl StoreGate for SimStoreGate {
    fn enter<'a>(&'a self, call: &'a str) -> LocalBoxFuture<'a, ()> {
        Box::pin(async move {
            tokio::time::sleep(self.shared.store_latency()).await;
            turmoil::barriers::trigger(PointReached {
                worker: self.worker.clone(),
                point: Reached::BeforeStore(call.to_owned()),
            })
            .await;
        })
    }

    fn leave<'a>(&'a self, call: &'a str) -> LocalBoxFuture<'a, ()> {
        Box::pin(async move {
            self.shared.history.push(EventKind::StoreCommitted {
                worker: self.worker.clone(),
                call: call.to_owned(),
                serving: current_serving().label,
            });
            turmoil::barriers::trigger(PointReached {
                worker: self.worker.clone(),
                point: Reached::AfterStore(call.to_owned()),
            })
            .await;
        })
    }
}

/// Background work runs on the worker's host (it dies with a crash), counts as activity, and
/// keeps the operation tag of the call that started it.
struct SimBackground {
    worker: String,
    shared: Rc<Shared>,
}

impl Background for SimBackground {
    fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        let busy = Busy::new(&self.shared);
        // Background work keeps the operation of the task that started it, but serves no
        // agent request: it goes on after the answer.
        let serving = Serving { origin: current_origin(), label: None };
        let worker = self.worker.clone();
        // It stays in the span of the work that started it (a call, a worker's start).
        let task = task.in_current_span();
        tokio::task::spawn_local(async move {
            let result = SERVING.scope(serving, CatchUnwind(AssertUnwindSafe(Box::pin(task)))).await;
            if let Err(message) = result {
                busy.0.history.push(EventKind::ExecutorPanicked {
                    worker,
                    during: "background".to_owned(),
                    message,
                });
            }
            drop(busy);
        });
    }

    fn sleep(&self, duration: Duration) -> LocalBoxFuture<'static, ()> {
        let shared = self.shared.clone();
        let due_ms = shared.now_ms().saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
        Box::pin(async move {
            let _asleep = Asleep::new(&shared, due_ms);
            wire::until_clock_reads(|| shared.now_ms(), &shared.clock_moved, due_ms).await;
        })
    }
}

/// A background task asleep until `due` by the world clock: registered in
/// [`Shared::sleepers`] while it lives, so that the world counts as idle meanwhile and the
/// runner may skip to its wake-up.
struct Asleep {
    shared: Rc<Shared>,
    number: u64,
}

impl Asleep {
    fn new(shared: &Rc<Shared>, due_ms: u64) -> Self {
        let number = shared.next_sleeper.get();
        shared.next_sleeper.set(number + 1);
        shared.sleepers.borrow_mut().insert(number, due_ms);
        Self { shared: shared.clone(), number }
    }
}

impl Drop for Asleep {
    fn drop(&mut self) {
        self.shared.sleepers.borrow_mut().remove(&self.number);
    }
}

struct SimEntropy(RefCell<ChaCha8Rng>);

impl Entropy for SimEntropy {
    fn next_u64(&self) -> u64 {
        self.0.borrow_mut().next_u64()
    }
}
