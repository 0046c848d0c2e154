//! The executor plug-in interface: the [`Executor`] trait, its [`ExecutorFactory`], and the
//! [`WorkerEnv`] through which it does all its I/O.
//!
//! Futures are not `Send`: a simulated worker runs on one thread, and an executor is started
//! afresh on each worker (re)start, so it may keep `RefCell`s and non-`Sync` connections.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use wire::{Clock, HttpRequest, HttpResponse, TransportError};

use crate::call::{Consumed, Envelope, OperationRef, Outcome, ToolCall, WebhookAck, WebhookEvent};
use crate::contract::ContractSet;

/// A boxed future that need not be `Send`.
pub type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// An executor under test. One instance serves one worker until the worker crashes; the
/// harness then starts a new one with [`ExecutorFactory::start`]. Every method must return
/// (the harness bounds every run, and a call that never returns is a liveness failure).
pub trait Executor {
    /// Handles one tool call.
    fn call(&self, call: ToolCall) -> LocalBoxFuture<'_, Outcome>;
    /// Answers the current state of an operation (the agent's status tool). May move an
    /// operation on (e.g. see that a delayed job finished) but never starts a new effect.
    fn poll(&self, operation: OperationRef) -> LocalBoxFuture<'_, Outcome>;
    /// Settles an `unknown` (or abandoned `pending`) operation against the downstream's system
    /// of record, and answers its state.
    fn reconcile(&self, operation: OperationRef) -> LocalBoxFuture<'_, Outcome>;
    /// Consumes one delivery of an envelope this or another worker wrote to the outbox.
    fn consume(&self, envelope: Envelope) -> LocalBoxFuture<'_, Consumed>;
    /// Receives one webhook delivery from the downstream.
    fn webhook(&self, event: WebhookEvent) -> LocalBoxFuture<'_, WebhookAck>;
}

/// Starts executors. One factory lives for a whole run (a scenario and a seed) and is where
/// state that must survive a worker crash lives (a database, for example): a worker crash
/// drops the [`Executor`], never the factory.
pub trait ExecutorFactory {
    /// Starts the executor of one worker (at first start and after each restart).
    fn start(&self, env: WorkerEnv) -> Box<dyn Executor>;
}

/// Sends HTTP requests to the downstream service. The harness's client tags each request with
/// the operation being served and may pause or crash the worker around it; for real use,
/// [`wire::HttpClient`] implements it directly.
pub trait DownstreamClient {
    /// Sends one request. An error after the request may have been sent is an unknown outcome.
    fn send(&self, request: HttpRequest) -> LocalBoxFuture<'_, Result<HttpResponse, TransportError>>;
}

impl DownstreamClient for wire::HttpClient {
    fn send(&self, request: HttpRequest) -> LocalBoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(wire::HttpClient::send(self, request))
    }
}

/// What the executor asks its authorizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthRequest {
    /// Tenant.
    pub tenant: String,
    /// Who acts.
    pub actor: String,
    /// Tool name.
    pub tool: String,
}

/// The authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthDecision {
    /// Allowed now.
    pub allowed: bool,
    /// Why, for the trace.
    pub reason: String,
}

/// Decides whether an actor may use a tool now. Ask it immediately before every effect and
/// before every replay: an existing key is no bypass.
pub trait Authorizer {
    /// The current decision.
    fn authorize(&self, request: AuthRequest) -> LocalBoxFuture<'_, AuthDecision>;
}

/// Why an envelope could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to write to the outbox: {0}")]
pub struct OutboxError(pub String);

/// The queue between an executor that accepts queued work and its consumers. Delivery is at
/// least once: a consumer may see an envelope twice, and again after it crashed before it
/// acknowledged.
pub trait Outbox {
    /// Writes an envelope; it is delivered later to some worker's [`Executor::consume`].
    fn enqueue(&self, envelope: Envelope) -> LocalBoxFuture<'_, Result<(), OutboxError>>;
}

/// A finding an executor hands to people: chiefly an operation it must leave `unknown`
/// because the downstream gives it no way to find out (no key it honours, no receipt lookup),
/// which someone has to settle by hand; also what it noticed while settling one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconciliationEntry {
    /// The operation's tenant.
    pub tenant: String,
    /// The operation key, as the executor's outcomes name it ([`Outcome::operation_key`]).
    pub operation_key: String,
    /// What was found, for a person to act on. No request bodies.
    pub finding: String,
}

/// Where an executor files [`ReconciliationEntry`]s: the operators' queue. An `unknown` that
/// nobody is told about is never settled, so an executor that cannot settle an operation on
/// its own files an entry for it. The harness records each entry in the run's history (it is
/// how O13 tells a handed-over `unknown` from a forgotten one); in production it is a ticket
/// queue, a table people watch, an alert.
pub trait Reconciliations {
    /// Files one entry.
    fn file(&self, entry: ReconciliationEntry) -> LocalBoxFuture<'_, ()>;
}

/// Marks the boundaries of an executor's durable-store calls. Inside the simulation, each
/// boundary costs simulated time (so a read and a later insert can interleave with another
/// worker) and is a point where the harness may pause or crash the worker. Call `enter`
/// before and `leave` after each store call, naming it (`claim`, `complete`, ...).
/// An executor that does not use the gate still runs, but store-level fault points then miss it.
pub trait StoreGate {
    /// Before a store call.
    fn enter<'a>(&'a self, call: &'a str) -> LocalBoxFuture<'a, ()>;
    /// After a store call returned (its effect is durable).
    fn leave<'a>(&'a self, call: &'a str) -> LocalBoxFuture<'a, ()>;
}

/// Randomness (owner tokens, jitter). Seeded inside the simulation.
pub trait Entropy {
    /// The next 64 random bits.
    fn next_u64(&self) -> u64;
}

/// Runs an executor's own background work: a sweeper, a delayed retry, a lease renewal.
///
/// An executor acts when it is called; work it wants done later it starts here, never with
/// `tokio::task::spawn_local` or the like. Inside the simulation the harness counts such work
/// as activity: it never skips idle time while background work is pending, the work stops
/// when its worker crashes, and its panics are caught and reported like any other.
pub trait Background {
    /// Starts `task` on this worker.
    fn spawn(&self, task: LocalBoxFuture<'static, ()>);

    /// Waits `duration` by the environment's clock. Background work waits with this rather
    /// than with tokio's timers: inside the simulation, a task asleep here leaves the world
    /// idle, so the harness skips straight to its wake-up instead of stepping through the
    /// wait; for real, it is an ordinary sleep.
    fn sleep(&self, duration: Duration) -> LocalBoxFuture<'static, ()>;
}

/// Everything a worker's executor may use to reach the world.
#[derive(Clone)]
pub struct WorkerEnv {
    /// The worker's name, e.g. `worker-1`.
    pub worker_id: String,
    /// 0 at first start, then one more at each restart.
    pub incarnation: u32,
    /// The downstream service.
    pub downstream: Rc<dyn DownstreamClient>,
    /// The clock (simulated inside the simulation).
    pub clock: Arc<dyn Clock>,
    /// The authorizer.
    pub authorizer: Rc<dyn Authorizer>,
    /// The outbox queue for queued tools.
    pub outbox: Rc<dyn Outbox>,
    /// The operators' queue for operations the executor cannot settle on its own.
    pub reconciliations: Rc<dyn Reconciliations>,
    /// Store-call boundaries.
    pub store_gate: Rc<dyn StoreGate>,
    /// Randomness.
    pub entropy: Rc<dyn Entropy>,
    /// Where background work starts.
    pub background: Rc<dyn Background>,
    /// The tool contracts, true to this world's downstream.
    pub contracts: Arc<ContractSet>,
}

impl std::fmt::Debug for WorkerEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerEnv")
            .field("worker_id", &self.worker_id)
            .field("incarnation", &self.incarnation)
            .finish_non_exhaustive()
    }
}
