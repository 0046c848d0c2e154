//! A small world for the executor: the real fake downstream on a loopback port, a manual
//! clock, a revocable authorizer, an in-memory outbox, a store gate that can pause a worker at
//! a named store call, and a counter for entropy.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use executor::{
    OperationRecord, Reconciliation, ReferenceConfig, ReferenceFactory, StoreLocation, Strategies,
};
use fake_downstream::{Downstream, DownstreamConfig, Effect, EffectKind, RequestRecord};
use protocol::{
    AuthDecision, AuthRequest, Authorizer, ContractSet, Entropy, Envelope, Executor, ExecutorFactory,
    LocalBoxFuture, OperationRef, Outbox, OutboxError, ReconciliationEntry, Reconciliations, StoreGate,
    ToolCall, WorkerEnv,
};
use serde_json::value::RawValue;
use tokio::sync::Notify;
use wire::{HttpClient, TcpAcceptor, TcpConnector};

/// Where the manual clock starts (ms): far from zero so that "lease 0" means "long ago".
pub const START_MS: u64 = 1_000_000;
/// The built-in contracts' lease.
pub const LEASE_MS: u64 = 5_000;
/// The built-in contracts' retention.
pub const RETENTION_MS: u64 = 60_000;

pub const TICKET: &str =
    r#"{"queue":"support","subject":"Refund request","body":"Customer reports a duplicate charge."}"#;
pub const CHARGE: &str = r#"{"customer":"cus_1","amount_minor":500,"currency":"EUR"}"#;
pub const MESSAGE: &str = r#"{"to":"customer@example.test","body":"Your refund is on its way."}"#;
pub const JOB: &str = r#"{"job_type":"report","input":{"month":"2026-08"}}"#;

/// Records every gate boundary and can pause the first worker that reaches one.
#[derive(Default)]
pub struct PausingGate {
    boundaries: RefCell<Vec<String>>,
    pause_at: RefCell<Option<String>>,
    paused: Notify,
    resume: Notify,
}

impl PausingGate {
    /// The next worker to reach `boundary` (`"enter complete"`, `"leave claim"`, ...) waits
    /// there until [`PausingGate::resume`].
    pub fn pause_at(&self, boundary: &str) {
        *self.pause_at.borrow_mut() = Some(boundary.to_owned());
    }

    /// Waits until a worker is paused; fails the test when none is within 5 s (real time): a
    /// worker that never reaches the boundary would otherwise hang it.
    pub async fn paused(&self) {
        let waited = tokio::time::timeout(Duration::from_secs(5), self.paused.notified()).await;
        assert!(waited.is_ok(), "no worker reached the pause point within 5 s: {:?}", self.boundaries());
    }

    /// Lets the paused worker go on.
    pub fn resume(&self) {
        self.resume.notify_one();
    }

    /// Every boundary passed so far.
    pub fn boundaries(&self) -> Vec<String> {
        self.boundaries.borrow().clone()
    }

    async fn pass(&self, boundary: String) {
        self.boundaries.borrow_mut().push(boundary.clone());
        let hit = self.pause_at.borrow().as_deref() == Some(boundary.as_str());
        if hit {
            self.pause_at.borrow_mut().take();
            self.paused.notify_one();
            self.resume.notified().await;
        }
    }
}

impl StoreGate for PausingGate {
    fn enter<'a>(&'a self, call: &'a str) -> LocalBoxFuture<'a, ()> {
        Box::pin(self.pass(format!("enter {call}")))
    }

    fn leave<'a>(&'a self, call: &'a str) -> LocalBoxFuture<'a, ()> {
        Box::pin(self.pass(format!("leave {call}")))
    }
}

/// Allows every actor that was not revoked.
#[derive(Default)]
pub struct Revocable {
    revoked: RefCell<BTreeSet<String>>,
    asked: Cell<u32>,
}

impl Revocable {
    pub fn revoke(&self, actor: &str) {
        self.revoked.borrow_mut().insert(actor.to_owned());
    }

    pub fn grant(&self, actor: &str) {
        self.revoked.borrow_mut().remove(actor);
    }

    pub fn asked(&self) -> u32 {
        self.asked.get()
    }
}

impl Authorizer for Revocable {
    fn authorize(&self, request: AuthRequest) -> LocalBoxFuture<'_, AuthDecision> {
        self.asked.set(self.asked.get() + 1);
        let allowed = !self.revoked.borrow().contains(&request.actor);
        let reason = if allowed { "granted" } else { "revoked" };
        Box::pin(std::future::ready(AuthDecision { allowed, reason: reason.into() }))
    }
}

/// Keeps envelopes in a list; can be told to refuse the next one.
#[derive(Default)]
pub struct Queue {
    envelopes: RefCell<Vec<Envelope>>,
    refuse_next: Cell<bool>,
}

impl Queue {
    pub fn envelopes(&self) -> Vec<Envelope> {
        self.envelopes.borrow().clone()
    }

    /// The next enqueue fails (and keeps nothing).
    pub fn refuse_next(&self) {
        self.refuse_next.set(true);
    }
}

/// The operators' queue: what the executors handed over, in order.
#[derive(Default)]
pub struct Operators {
    entries: RefCell<Vec<ReconciliationEntry>>,
}

impl Operators {
    pub fn entries(&self) -> Vec<ReconciliationEntry> {
        self.entries.borrow().clone()
    }
}

impl Reconciliations for Operators {
    fn file(&self, entry: ReconciliationEntry) -> LocalBoxFuture<'_, ()> {
        self.entries.borrow_mut().push(entry);
        Box::pin(std::future::ready(()))
    }
}

impl Outbox for Queue {
    fn enqueue(&self, envelope: Envelope) -> LocalBoxFuture<'_, Result<(), OutboxError>> {
        if self.refuse_next.replace(false) {
            return Box::pin(std::future::ready(Err(OutboxError("the queue is unavailable".into()))));
        }
        self.envelopes.borrow_mut().push(envelope);
        Box::pin(std::future::ready(Ok(())))
    }
}

/// 1, 2, 3, ...
#[derive(Default)]
pub struct Counter(Cell<u64>);

impl Entropy for Counter {
    fn next_u64(&self) -> u64 {
        self.0.set(self.0.get() + 1);
        self.0.get()
    }
}

/// How to build a [`World`].
pub struct WorldBuilder {
    contracts: ContractSet,
    downstream: DownstreamConfig,
    timeout: Duration,
    location: Option<StoreLocation>,
    strategies: fn() -> Strategies,
}

impl WorldBuilder {
    pub fn strategies(mut self, strategies: fn() -> Strategies) -> Self {
        self.strategies = strategies;
        self
    }

    pub fn contracts(mut self, contracts: ContractSet) -> Self {
        self.contracts = contracts;
        self
    }

    pub fn downstream(mut self, config: DownstreamConfig) -> Self {
        self.downstream = config;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn store(mut self, location: StoreLocation) -> Self {
        self.location = Some(location);
        self
    }

    pub async fn build(self) -> World {
        let clock = Arc::new(AtomicU64::new(START_MS));
        let ticking = clock.clone();
        let downstream = Downstream::new(
            self.downstream,
            Arc::new(move || ticking.load(Ordering::SeqCst)),
            Arc::new(TcpConnector),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.router()));
        let location = self.location.unwrap_or_else(unique_memory);
        let config = ReferenceConfig::default().with_downstream_timeout(self.timeout);
        let make = self.strategies;
        let factory =
            ReferenceFactory::with_strategies(location, config, move |_: &protocol::WorkerEnv| make())
                .unwrap();
        let background = Rc::new(QueuedBackground {
            tasks: RefCell::default(),
            clock: clock.clone(),
            slept_ms: Cell::new(0),
        });
        World {
            downstream,
            port,
            clock,
            authorizer: Rc::default(),
            outbox: Rc::default(),
            operators: Rc::default(),
            gate: Rc::default(),
            entropy: Rc::default(),
            contracts: Arc::new(self.contracts),
            factory,
            background,
            starts: Cell::new(0),
            calls: Cell::new(0),
        }
    }
}

/// A fresh shared-memory store name (tests run in parallel in one process).
pub fn unique_memory() -> StoreLocation {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    StoreLocation::SharedMemory(format!("executor-it-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
}

pub struct World {
    pub downstream: Downstream,
    pub port: u16,
    pub clock: Arc<AtomicU64>,
    pub authorizer: Rc<Revocable>,
    pub outbox: Rc<Queue>,
    pub operators: Rc<Operators>,
    pub gate: Rc<PausingGate>,
    pub entropy: Rc<Counter>,
    pub contracts: Arc<ContractSet>,
    pub factory: ReferenceFactory,
    /// The executors' background work, run only when a test asks ([`World::run_background`]).
    pub background: Rc<QueuedBackground>,
    starts: Cell<u32>,
    calls: Cell<u32>,
}

impl World {
    /// The downstream configuration worlds start with: jobs finish after 100 ms.
    pub fn builder_downstream_config() -> DownstreamConfig {
        DownstreamConfig { job_duration: Duration::from_millis(100), ..DownstreamConfig::default() }
    }

    pub fn builder() -> WorldBuilder {
        WorldBuilder {
            contracts: ContractSet::builtin(),
            downstream: Self::builder_downstream_config(),
            timeout: Duration::from_secs(2),
            location: None,
            strategies: Strategies::reference,
        }
    }

    pub async fn new() -> World {
        Self::builder().build().await
    }

    /// A worker sharing the world's gate.
    pub fn worker(&self, name: &str) -> Box<dyn Executor> {
        self.worker_with_gate(name, self.gate.clone())
    }

    /// A worker with its own gate.
    pub fn worker_with_gate(&self, name: &str, gate: Rc<PausingGate>) -> Box<dyn Executor> {
        let incarnation = self.starts.get();
        self.starts.set(incarnation + 1);
        let clock = self.clock.clone();
        self.factory.start(WorkerEnv {
            worker_id: name.to_owned(),
            incarnation,
            downstream: Rc::new(HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", self.port)),
            clock: Arc::new(move || clock.load(Ordering::SeqCst)),
            authorizer: self.authorizer.clone(),
            outbox: self.outbox.clone(),
            reconciliations: self.operators.clone(),
            store_gate: gate,
            entropy: self.entropy.clone(),
            background: self.background.clone(),
            contracts: self.contracts.clone(),
        })
    }

    /// Runs the background work the executors started (and the work that starts), one task
    /// after another, until none is left; their sleeps move the manual clock on.
    pub async fn run_background(&self) {
        loop {
            let tasks = std::mem::take(&mut *self.background.tasks.borrow_mut());
            if tasks.is_empty() {
                return;
            }
            for task in tasks {
                task.await;
            }
        }
    }

    /// Drops the background work started so far (its worker crashed).
    pub fn drop_background(&self) {
        self.background.tasks.borrow_mut().clear();
    }

    /// The manual clock.
    pub fn now_ms(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// Moves the manual clock on, and tells the downstream (its jobs finish by this clock).
    pub fn advance_ms(&self, ms: u64) {
        self.clock.fetch_add(ms, Ordering::SeqCst);
        self.downstream.clock_moved();
    }

    /// Lets a submitted job finish: moves the clock past the job duration and waits (real
    /// time, bounded) until the downstream says `job_id` succeeded.
    pub async fn finish_job(&self, job_id: &str) {
        let duration = self.downstream.config().job_duration;
        self.advance_ms(duration.as_millis() as u64);
        eventually("the job succeeded", || {
            self.downstream.job(job_id).is_some_and(|job| job.status == "succeeded")
        })
        .await;
    }

    /// A call of `tool` for step `step` of workflow `run_1`, tenant `acme`; every call gets a
    /// new call id, as a model would give it.
    pub fn call(&self, tool: &str, step: &str, arguments: &str) -> ToolCall {
        self.calls.set(self.calls.get() + 1);
        ToolCall {
            tenant: "acme".into(),
            environment: "production".into(),
            workflow_id: "run_1".into(),
            step_id: step.into(),
            tool: tool.into(),
            tool_version: "2026-08-18".into(),
            arguments: RawValue::from_string(arguments.to_owned()).unwrap(),
            actor: "agent-1".into(),
            call_id: format!("call_{}", self.calls.get()),
            trace_id: None,
            attempt: 0,
        }
    }

    pub fn operation(&self, step: &str) -> OperationRef {
        OperationRef {
            tenant: "acme".into(),
            environment: "production".into(),
            workflow_id: "run_1".into(),
            step_id: step.into(),
            actor: "agent-1".into(),
        }
    }

    pub fn key(step: &str) -> String {
        format!("acme:production:run_1:{step}")
    }

    pub fn ledger(&self) -> Vec<Effect> {
        self.downstream.ledger()
    }

    pub fn effects_of(&self, kind: EffectKind) -> Vec<Effect> {
        self.ledger().into_iter().filter(|effect| effect.kind == kind).collect()
    }

    /// Requests the downstream journaled for `method path` (`path` may end in `*`: a prefix).
    pub fn requests_to(&self, method: &str, path: &str) -> Vec<RequestRecord> {
        let matches = |seen: &str| match path.strip_suffix('*') {
            Some(prefix) => seen.starts_with(prefix),
            None => seen == path,
        };
        self.downstream.requests().into_iter().filter(|r| r.method == method && matches(&r.path)).collect()
    }

    pub fn records(&self) -> Vec<OperationRecord> {
        self.factory.with_store(async |store| store.records().await).unwrap()
    }

    pub fn record(&self, step: &str) -> OperationRecord {
        self.factory
            .with_store(async |store| store.load("acme", &Self::key(step)).await)
            .unwrap()
            .unwrap_or_else(|| panic!("no record for step {step}"))
    }

    pub fn reconciliations(&self, step: &str) -> Vec<Reconciliation> {
        self.factory.with_store(async |store| store.reconciliations("acme", &Self::key(step)).await).unwrap()
    }
}

/// Waits (real time, bounded) until `condition` holds.
pub async fn eventually(what: &str, condition: impl Fn() -> bool) {
    for _ in 0..500 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Background work (the reference's own reconciliation) kept until a test runs it with
/// [`World::run_background`], so that tests decide when it happens; a sleep moves the manual
/// clock on instead of waiting.
pub struct QueuedBackground {
    tasks: RefCell<Vec<LocalBoxFuture<'static, ()>>>,
    clock: Arc<AtomicU64>,
    slept_ms: Cell<u64>,
}

/// More manual-clock sleep than any test's background work needs: beyond it, the work would
/// never end (a loop that does not see time pass), and the test fails instead of hanging.
const BACKGROUND_SLEEP_LIMIT_MS: u64 = 24 * 60 * 60 * 1_000;

impl protocol::Background for QueuedBackground {
    fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        self.tasks.borrow_mut().push(task);
    }

    fn sleep(&self, duration: Duration) -> LocalBoxFuture<'static, ()> {
        let slept = self.slept_ms.get().saturating_add(duration.as_millis() as u64);
        self.slept_ms.set(slept);
        assert!(slept <= BACKGROUND_SLEEP_LIMIT_MS, "background work slept {slept} ms and has not ended");
        let clock = self.clock.clone();
        Box::pin(async move {
            clock.fetch_add(duration.as_millis() as u64, Ordering::SeqCst);
        })
    }
}
