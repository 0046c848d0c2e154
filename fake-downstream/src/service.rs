//! The core every dialect runs on: the service's state (ledger, journal, fault rules, pause
//! points, idempotency records, receipts, jobs), the one request pipeline ([`Downstream::handle`])
//! and the in-process handle, [`Downstream`]. A dialect (`native.rs`, `stripe.rs`) turns a
//! vendor's wire format into an [`Exchange`] and a commit under the state lock, and says
//! through [`Dialect`] how its idempotency records behave and how its refusals read. The core
//! imports no dialect.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::Notify;
use wire::{Clock, Connect};

use crate::config::{split_url, DownstreamConfig, IdempotencyMode, Service};
use crate::content::digest_of;
use crate::faults::{FaultAction, FaultRule, FaultRuleId, InstalledRule, RequestFacts};
use crate::ledger::{Disposition, Effect, EffectKind, RequestRecord, VersionChange, WebhookDelivery};

/// Attempts per webhook delivery before the service gives up on it.
const WEBHOOK_ATTEMPTS: u32 = 3;
/// How long the service waits for a webhook receiver's answer.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between webhook attempts.
const WEBHOOK_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Errors of the in-process API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DownstreamError {
    /// No fault rule has this id.
    #[error("no fault rule with id {0}")]
    UnknownRule(FaultRuleId),
    /// No ticket has this id.
    #[error("no ticket with id {0:?}")]
    UnknownTicket(String),
}

/// A ticket as the service stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ticket {
    /// `ticket_<n>`.
    pub ticket_id: String,
    /// Owner tenant.
    pub tenant: String,
    /// Queue.
    pub queue: String,
    /// Subject line.
    pub subject: String,
    /// `open`, `pending` or `closed`.
    pub status: String,
    /// Bumped by every change, from 1.
    pub version: u64,
}

/// A delayed job as the service stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Job {
    /// `job_<n>`.
    pub job_id: String,
    /// Owner tenant.
    pub tenant: String,
    /// The key it was submitted with.
    pub idempotency_key: Option<String>,
    /// `pending` until it completes, then `succeeded`.
    pub status: String,
    /// The job's output once it succeeded.
    pub result: Option<Value>,
}

/// An object a dialect keeps, with the tenant that owns it and its place in the order of making.
#[derive(Debug, Clone)]
pub(crate) struct Owned {
    pub tenant: String,
    pub made: u64,
    pub object: Value,
}

#[derive(Debug, Clone)]
enum KeyRecord {
    InProgress {
        digest: String,
    },
    /// The first answer under the key, kept from `at_ms` on.
    Done {
        digest: String,
        status: u16,
        body: Value,
        at_ms: u64,
    },
}

/// An idempotency record's scope: the dialect's name, the service, the tenant and the key.
type KeyScope = (&'static str, Service, String, String);

/// Why a request under a key it shares with an earlier one is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyConflict {
    /// The first request with the key is still being processed.
    InProgress,
    /// The key was first used with another request.
    ReusedWithDifferentRequest,
}

/// What the core asks of the dialect a request is written in.
pub(crate) trait Dialect: Send + Sync + 'static {
    /// The dialect's name; it scopes idempotency keys too (one dialect's key is not another's).
    fn name(&self) -> &'static str;
    /// The answer to a request refused for its key.
    fn key_conflict(&self, conflict: KeyConflict) -> Processed;
    /// The body of an error a fault rule injects after the commit (`commit_then_error`).
    fn injected_error(&self, status: u16) -> Value;
    /// Whether an answer that is no success is kept under its key and replayed (Stripe keeps
    /// every answer of a request that began executing); otherwise the key is free again.
    fn keeps_failures(&self) -> bool;
    /// How long a key's record is kept after its first answer, in milliseconds; `None`: as long
    /// as the service lives.
    fn key_retention_ms(&self) -> Option<u64>;
    /// The `Content-Type` of an answer with `status`.
    fn content_type(&self, status: u16) -> &'static str;
    /// The status and body of a refusal over the rate limit (a `rate_limited` fault rule; the
    /// answer carries `Retry-After: retry_after_s`). By default a `429` problem.
    fn rate_limited(&self, retry_after_s: u64) -> (u16, Value) {
        let problem = wire::Problem::new(
            429,
            "rate_limited",
            format!("too many requests: retry after {retry_after_s} s"),
        );
        (429, serde_json::to_value(problem).expect("a problem serialises"))
    }
}

/// Sees every effect and every journaled request as it happens (the harness keeps one
/// ordered history of a run with it). Called under the service's lock: it must not call back
/// into the [`Downstream`].
pub trait Observer: Send + Sync + 'static {
    /// An effect was appended to the ledger.
    fn effect(&self, effect: &Effect);
    /// A request was journaled.
    fn request(&self, record: &RequestRecord);
    /// The authorizer answered whether `actor` may use `tool` (`GET /v1/authz`).
    fn authorization(&self, actor: &str, tool: &str, allowed: bool) {
        let _ = (actor, tool, allowed);
    }
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) config: DownstreamConfig,
    observer: Option<Arc<dyn Observer>>,
    ledger: Vec<Effect>,
    journal: Vec<RequestRecord>,
    deliveries: Vec<WebhookDelivery>,
    rules: Vec<InstalledRule>,
    next_rule_id: FaultRuleId,
    held: BTreeMap<FaultRuleId, u32>,
    pub(crate) tickets: BTreeMap<String, Ticket>,
    pub(crate) jobs: BTreeMap<String, Job>,
    /// The objects a dialect keeps by id (the Stripe twin's payment intents, charges and
    /// refunds), each with the tenant that owns it, in the order they were made.
    pub(crate) objects: BTreeMap<String, Owned>,
    keys: BTreeMap<KeyScope, KeyRecord>,
    /// Revoked permissions: (actor, tool), tool `None` meaning every tool.
    revoked: BTreeSet<(String, Option<String>)>,
    counters: BTreeMap<&'static str, u64>,
    /// Bumped by `reset`, so that work started before it (job completions) does nothing.
    generation: u64,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("effects", &self.ledger.len()).finish_non_exhaustive()
    }
}

impl State {
    pub(crate) fn next_reference(&mut self, prefix: &'static str) -> String {
        let counter = self.counters.entry(prefix).or_insert(0);
        *counter += 1;
        format!("{prefix}_{counter}")
    }

    pub(crate) fn effects(&self) -> &[Effect] {
        &self.ledger
    }
}

/// The facts of one request that the pipeline needs.
#[derive(Clone)]
pub(crate) struct Exchange {
    /// The dialect the request is written in.
    pub dialect: &'static dyn Dialect,
    pub method: String,
    pub path: String,
    pub tenant: String,
    pub idempotency_key: Option<String>,
    pub origin: Option<String>,
    /// The harness's `X-Replaylab-Request-Id`, if any.
    pub request_id: Option<String>,
    pub service: Service,
    /// `Some` for requests that change state (they take part in idempotency).
    pub digest: Option<String>,
    /// `Some` for requests that change state: their business content ([`crate::content_digest`]).
    pub content: Option<String>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("dialect", &self.dialect.name())
            .field("method", &self.method)
            .field("path", &self.path)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// What handling a request produced.
#[derive(Debug)]
pub(crate) struct Processed {
    pub status: u16,
    pub body: Value,
    pub disposition: Disposition,
    pub effect_seq: Option<u64>,
    /// A job to run to completion in the background.
    pub started_job: Option<String>,
}

impl Processed {
    pub fn read(status: u16, body: Value) -> Self {
        Self { status, body, disposition: Disposition::Read, effect_seq: None, started_job: None }
    }

    pub fn problem(status: u16, disposition: Disposition, kind: &str, detail: impl Into<String>) -> Self {
        let problem = wire::Problem::new(status, kind, detail);
        let body = serde_json::to_value(problem).expect("a problem serialises");
        Self { status, body, disposition, effect_seq: None, started_job: None }
    }
}

/// What the client gets in the end.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A JSON body (problem bodies included), with `Idempotent-Replayed: true` when replayed.
    Json { status: u16, body: Value, replayed: bool },
    /// A body cut short, so that it is not valid JSON.
    Malformed { status: u16, bytes: Vec<u8> },
    /// A refusal over the rate limit, answered with `Retry-After: retry_after_s`.
    RateLimited { status: u16, body: Value, retry_after_s: u64 },
    /// Close the connection without answering.
    Close,
    /// Never answer.
    Silence,
}

pub(crate) struct Inner {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    connector: Arc<dyn Connect>,
    released: Notify,
    /// Requests being processed, plus jobs finishing and delivering their webhooks.
    active: AtomicUsize,
    /// Jobs waiting for their finishing time: job number -> due time by the clock.
    waiting: Mutex<BTreeMap<u64, u64>>,
    /// Numbers the waiting jobs.
    next_wait: AtomicU64,
    /// Notified when the clock moved on by more than real or simulated time passing (a
    /// simulation skipping idle time), so that waiting jobs re-check it.
    clock_moved: Notify,
}

/// Registers a job in [`Inner::waiting`] while it lives.
struct Waiting {
    inner: Arc<Inner>,
    number: u64,
}

impl Waiting {
    fn new(inner: &Arc<Inner>, due_ms: u64) -> Self {
        let number = inner.next_wait.fetch_add(1, Ordering::SeqCst);
        inner.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(number, due_ms);
        Self { inner: inner.clone(), number }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.inner.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&self.number);
    }
}

/// Counts one piece of work in [`Inner::active`] while it lives.
struct Active(Arc<Inner>);

impl Active {
    fn new(inner: &Arc<Inner>) -> Self {
        inner.active.fetch_add(1, Ordering::SeqCst);
        Self(inner.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The fake downstream: shared state behind the HTTP router ([`Downstream::router`]) and the
/// in-process API the harness uses. Clones share the state.
#[derive(Clone)]
pub struct Downstream {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Downstream")
            .field("effects", &state.ledger.len())
            .field("requests", &state.journal.len())
            .finish_non_exhaustive()
    }
}

impl Downstream {
    /// A service with `config`, telling time by `clock` and sending webhooks through
    /// `connector`.
    pub fn new(config: DownstreamConfig, clock: Arc<dyn Clock>, connector: Arc<dyn Connect>) -> Self {
        let state = State { config, next_rule_id: 1, ..State::default() };
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                clock,
                connector,
                released: Notify::new(),
                active: AtomicUsize::new(0),
                waiting: Mutex::new(BTreeMap::new()),
                next_wait: AtomicU64::new(0),
                clock_moved: Notify::new(),
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock is held is a bug in this crate; the state is still usable
        // for reading what happened, so poisoning is ignored.
        self.inner.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }

    /// Whether nothing is in progress: no request being processed (held, delayed, or between
    /// commit and answer) and no job finishing or delivering its webhooks. Jobs waiting for
    /// their finishing time do not count: see [`Downstream::next_due_ms`]. A simulation may
    /// skip idle time only then, and only up to that time.
    pub fn is_idle(&self) -> bool {
        self.inner.active.load(Ordering::SeqCst) == 0
    }

    /// When the earliest waiting job is due to finish, by the clock.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.waiting().values().min().copied()
    }

    /// When the last waiting job is due to finish, by the clock: the downstream's own work
    /// that is legitimately still running until then.
    pub fn last_due_ms(&self) -> Option<u64> {
        self.waiting().values().max().copied()
    }

    /// Tells waiting jobs that the clock moved on without time passing for the runtime (a
    /// simulation skipped idle time): they re-check whether they are due.
    pub fn clock_moved(&self) {
        self.inner.clock_moved.notify_waiters();
    }

    fn waiting(&self) -> MutexGuard<'_, BTreeMap<u64, u64>> {
        self.inner.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The current configuration.
    pub fn config(&self) -> DownstreamConfig {
        self.lock().config.clone()
    }

    /// Installs the observer that sees every effect and journaled request from now on.
    pub fn set_observer(&self, observer: Arc<dyn Observer>) {
        self.lock().observer = Some(observer);
    }

    /// Replaces the configuration (effects, tickets and keys stay).
    pub fn set_config(&self, config: DownstreamConfig) {
        self.lock().config = config;
    }

    /// Installs a fault rule after the existing ones and returns its id.
    pub fn install_fault(&self, rule: FaultRule) -> FaultRuleId {
        let mut state = self.lock();
        let id = state.next_rule_id;
        state.next_rule_id += 1;
        state.rules.push(InstalledRule { id, rule, matched: 0, fired: 0, released: false });
        id
    }

    /// The installed rules with their counters, in install order.
    pub fn faults(&self) -> Vec<InstalledRule> {
        self.lock().rules.clone()
    }

    /// Removes every fault rule and lets every held request go on.
    pub fn clear_faults(&self) {
        self.lock().rules.clear();
        self.inner.released.notify_waiters();
    }

    /// Lets the requests held by rule `id` go on; the rule fires no more. Returns how many
    /// requests were held.
    pub fn release(&self, id: FaultRuleId) -> Result<u32, DownstreamError> {
        let held = {
            let mut state = self.lock();
            let rule =
                state.rules.iter_mut().find(|rule| rule.id == id).ok_or(DownstreamError::UnknownRule(id))?;
            rule.released = true;
            state.held.get(&id).copied().unwrap_or(0)
        };
        self.inner.released.notify_waiters();
        Ok(held)
    }

    /// How many requests rule `id` holds right now.
    pub fn held(&self, id: FaultRuleId) -> u32 {
        self.lock().held.get(&id).copied().unwrap_or(0)
    }

    /// The effect ledger, in order.
    pub fn ledger(&self) -> Vec<Effect> {
        self.lock().ledger.clone()
    }

    /// The request journal, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.lock().journal.clone()
    }

    /// Webhook delivery attempts, in order.
    pub fn webhook_deliveries(&self) -> Vec<WebhookDelivery> {
        self.lock().deliveries.clone()
    }

    /// A ticket by id.
    pub fn ticket(&self, ticket_id: &str) -> Option<Ticket> {
        self.lock().tickets.get(ticket_id).cloned()
    }

    /// A job by id.
    pub fn job(&self, job_id: &str) -> Option<Job> {
        self.lock().jobs.get(job_id).cloned()
    }

    /// Clears the ledger, journal, deliveries, fault rules, tickets, jobs and keys; keeps the
    /// configuration. Requests in progress go on against the cleared state.
    pub fn reset(&self) {
        {
            let mut state = self.lock();
            let config = std::mem::take(&mut state.config);
            let observer = state.observer.take();
            let generation = state.generation + 1;
            *state = State { config, observer, next_rule_id: 1, generation, ..State::default() };
        }
        self.inner.released.notify_waiters();
    }

    /// Revokes `actor`'s permission to use `tool` (every tool when `None`), until a reset. The
    /// authorizer (`GET /v1/authz`, [`Downstream::allows`]) says so from now on.
    pub fn revoke(&self, actor: &str, tool: Option<&str>) {
        self.lock().revoked.insert((actor.to_owned(), tool.map(str::to_owned)));
    }

    /// Whether `actor` may use `tool` now (the authorizer's decision; not reported to the
    /// observer: see [`Downstream::authorize`]).
    pub fn allows(&self, actor: &str, tool: &str) -> bool {
        let state = self.lock();
        !state.revoked.contains(&(actor.to_owned(), None))
            && !state.revoked.contains(&(actor.to_owned(), Some(tool.to_owned())))
    }

    /// The authorizer's decision for `actor` and `tool`, reported to the observer (what
    /// `GET /v1/authz` answers).
    pub fn authorize(&self, actor: &str, tool: &str) -> bool {
        let allowed = self.allows(actor, tool);
        let observer = self.lock().observer.clone();
        if let Some(observer) = observer {
            observer.authorization(actor, tool, allowed);
        }
        allowed
    }

    /// A person edits ticket `ticket_id` outside the API: its version goes up by one, and the
    /// ledger records it. Returns the new version.
    pub fn touch_ticket(&self, ticket_id: &str) -> Result<u64, DownstreamError> {
        let now = self.now_ms();
        let mut state = self.lock();
        let ticket = state
            .tickets
            .get_mut(ticket_id)
            .ok_or_else(|| DownstreamError::UnknownTicket(ticket_id.to_owned()))?;
        let from = ticket.version;
        ticket.version += 1;
        let (tenant, to) = (ticket.tenant.clone(), ticket.version);
        let digest = digest_of(&json!({"method": "TOUCH", "path": ticket_id}));
        let mut fields = serde_json::Map::new();
        fields.insert("ticket_id".into(), Value::String(ticket_id.to_owned()));
        let content_digest =
            crate::content::content_digest(EffectKind::TicketEditedByHuman, &tenant, &fields);
        push_effect(
            &mut state,
            NewEffect {
                service: Service::Tickets,
                kind: EffectKind::TicketEditedByHuman,
                tenant: &tenant,
                idempotency_key: None,
                origin: None,
                request_id: None,
                effect_reference: ticket_id,
                request_digest: digest,
                content_digest,
                answer: json!({"ticket_id": ticket_id, "version": to}),
                versions: Some(VersionChange { from, to, if_match: None }),
                at_ms: now,
            },
        );
        Ok(to)
    }

    /// Appends `record` to the journal, numbering and timing it.
    pub(crate) fn push_journal(&self, mut record: RequestRecord) {
        record.at_ms = self.now_ms();
        let mut state = self.lock();
        record.seq = state.journal.len() as u64 + 1;
        if let Some(observer) = &state.observer {
            observer.request(&record);
        }
        state.journal.push(record);
    }

    /// Runs one request through fault rules, idempotency and `process`, and says what to
    /// answer. `process` runs under the state lock and is where effects are committed.
    pub(crate) async fn handle(
        &self,
        exchange: Exchange,
        process: impl FnOnce(&mut State, &Exchange, u64) -> Processed,
    ) -> Answer {
        let _active = Active::new(&self.inner);
        // 1. Fault rule and idempotency decision, atomically.
        let (fault, decision) = {
            let mut state = self.lock();
            let facts = RequestFacts {
                method: &exchange.method,
                path: &exchange.path,
                tenant: Some(&exchange.tenant),
                idempotency_key: exchange.idempotency_key.as_deref(),
            };
            let fault = state
                .rules
                .iter_mut()
                .find_map(|rule| rule.offer(&facts).then_some((rule.id, rule.rule.action)));
            let now = self.now_ms();
            let decision = decide(&mut state, &exchange, now);
            (fault, decision)
        };
        let mut reservation = match decision {
            Decision::Fresh { reserved: true } => Some(Reservation::new(self, &exchange)),
            _ => None,
        };

        // 2. Before commit.
        match fault.map(|(_, action)| action) {
            Some(FaultAction::Hold) => {
                let (id, _) = fault.expect("matched above");
                self.wait_for_release(id).await;
            }
            Some(FaultAction::DelayBeforeCommit(delay)) => tokio::time::sleep(delay).await,
            Some(FaultAction::DropBeforeCommit) => {
                drop(reservation.take());
                self.journal(&exchange, Disposition::DroppedBeforeCommit, None, fault, None);
                return Answer::Silence;
            }
            Some(FaultAction::ResetBeforeCommit) => {
                drop(reservation.take());
                self.journal(&exchange, Disposition::ResetBeforeCommit, None, fault, None);
                return Answer::Close;
            }
            Some(FaultAction::RateLimited(wait)) => {
                drop(reservation.take());
                let retry_after_s = wait.as_secs();
                let (status, body) = exchange.dialect.rate_limited(retry_after_s);
                self.journal(&exchange, Disposition::RateLimited, None, fault, Some(status));
                return Answer::RateLimited { status, body, retry_after_s };
            }
            _ => {}
        }

        // 3. Commit (or replay, or refuse).
        let now = self.now_ms();
        let (processed, replayed, started_job) = {
            let mut state = self.lock();
            let (processed, replayed) = match decision {
                Decision::Refuse(processed) => (processed, false),
                Decision::Replay { status, body } => (
                    Processed {
                        status,
                        body,
                        disposition: Disposition::Replayed,
                        effect_seq: None,
                        started_job: None,
                    },
                    true,
                ),
                Decision::Fresh { .. } => {
                    let processed = process(&mut state, &exchange, now);
                    if let Some(reservation) = reservation.take() {
                        reservation.settle(&mut state, &processed, now);
                    }
                    (processed, false)
                }
            };
            let started_job = processed.started_job.clone();
            (processed, replayed, started_job)
        };
        if let Some(job_id) = started_job {
            self.start_job(job_id);
        }

        // 4. After commit.
        let answer = match fault.map(|(_, action)| action) {
            Some(FaultAction::CommitThenDrop) => Answer::Close,
            Some(FaultAction::CommitThenError(status)) => {
                Answer::Json { status, body: exchange.dialect.injected_error(status), replayed: false }
            }
            Some(FaultAction::CommitThenMalformed) => {
                let bytes = serde_json::to_vec(&processed.body).expect("a value serialises");
                Answer::Malformed { status: processed.status, bytes: bytes[..bytes.len() / 2].to_vec() }
            }
            _ => Answer::Json { status: processed.status, body: processed.body.clone(), replayed },
        };
        let status = match &answer {
            Answer::Json { status, .. }
            | Answer::Malformed { status, .. }
            | Answer::RateLimited { status, .. } => Some(*status),
            Answer::Close | Answer::Silence => None,
        };
        self.journal(&exchange, processed.disposition, processed.effect_seq, fault, status);
        if let Some(FaultAction::CommitThenDelay(delay)) = fault.map(|(_, action)| action) {
            tokio::time::sleep(delay).await;
        }
        answer
    }

    fn journal(
        &self,
        exchange: &Exchange,
        disposition: Disposition,
        effect_seq: Option<u64>,
        fault: Option<(FaultRuleId, FaultAction)>,
        status: Option<u16>,
    ) {
        self.push_journal(RequestRecord {
            seq: 0,
            at_ms: 0,
            method: exchange.method.clone(),
            path: exchange.path.clone(),
            tenant: Some(exchange.tenant.clone()),
            idempotency_key: exchange.idempotency_key.clone(),
            origin: exchange.origin.clone(),
            request_id: exchange.request_id.clone(),
            content_digest: exchange.content.clone(),
            disposition,
            effect_seq,
            fault_rule: fault.map(|(id, _)| id),
            fault_action: fault.map(|(_, action)| action.name().to_owned()),
            status,
        });
    }

    async fn wait_for_release(&self, id: FaultRuleId) {
        let _held = HeldGuard::new(self, id);
        loop {
            let notified = self.inner.released.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let released =
                self.lock().rules.iter().find(|rule| rule.id == id).is_none_or(|rule| rule.released);
            if released {
                return;
            }
            notified.await;
        }
    }

    fn start_job(&self, job_id: String) {
        let downstream = self.clone();
        let (generation, duration) = {
            let state = self.lock();
            (state.generation, state.config.job_duration)
        };
        // The job is registered as waiting before this returns, so that at no moment is it
        // neither waiting nor active.
        let due_ms = self.now_ms() + duration.as_millis() as u64;
        let wait = Waiting::new(&self.inner, due_ms);
        tokio::spawn(async move {
            downstream.until(due_ms).await;
            let active = Active::new(&downstream.inner);
            drop(wait);
            downstream.run_job(generation, job_id).await;
            drop(active);
        });
    }

    /// Waits until the clock reads `due_ms`: sleeps, and re-checks whenever
    /// [`Downstream::clock_moved`] says the clock jumped.
    async fn until(&self, due_ms: u64) {
        wire::until_clock_reads(|| self.now_ms(), &self.inner.clock_moved, due_ms).await;
    }

    async fn run_job(&self, generation: u64, job_id: String) {
        let (events, webhook) = {
            let mut state = self.lock();
            if state.generation != generation {
                return;
            }
            let output = state.next_reference("output");
            let Some(job) = state.jobs.get_mut(&job_id) else { return };
            job.status = "succeeded".into();
            job.result = Some(json!({ "output_reference": output }));
            let job = job.clone();
            let Some(webhook) = state.config.webhook.clone() else { return };
            let mut events = Vec::new();
            let first = state.next_reference("evt");
            for _ in 0..=webhook.repeat_same_event {
                events.push(first.clone());
            }
            for _ in 0..webhook.extra_event_ids {
                events.push(state.next_reference("evt"));
            }
            let events: Vec<(String, Value)> = events
                .into_iter()
                .map(|event_id| {
                    let body = json!({
                        "event_id": event_id,
                        "type": "job.succeeded",
                        "tenant": job.tenant,
                        "job_id": job.job_id,
                        "idempotency_key": job.idempotency_key,
                        "result": job.result,
                    });
                    (event_id, body)
                })
                .collect();
            (events, webhook)
        };
        let Some((host, port, path)) = split_url(&webhook.url) else { return };
        let client = wire::HttpClient::new(self.inner.connector.clone(), host, port);
        for (event_id, body) in events {
            for attempt in 1..=WEBHOOK_ATTEMPTS {
                let request = wire::HttpRequest::json(http::Method::POST, path.clone(), &body);
                let status = match tokio::time::timeout(WEBHOOK_TIMEOUT, client.send(request)).await {
                    Ok(Ok(response)) => Some(response.status),
                    Ok(Err(_)) | Err(_) => None,
                };
                let now = self.now_ms();
                {
                    let mut state = self.lock();
                    if state.generation != generation {
                        return;
                    }
                    let seq = state.deliveries.len() as u64 + 1;
                    state.deliveries.push(WebhookDelivery {
                        seq,
                        at_ms: now,
                        event_id: event_id.clone(),
                        job_id: job_id.clone(),
                        attempt,
                        status,
                    });
                }
                if status.is_some_and(|status| (200..300).contains(&status)) {
                    break;
                }
                tokio::time::sleep(WEBHOOK_RETRY_PAUSE).await;
            }
        }
    }
}

enum Decision {
    /// Process it; `reserved` when an in-progress key record was written for it.
    Fresh {
        reserved: bool,
    },
    Replay {
        status: u16,
        body: Value,
    },
    Refuse(Processed),
}

fn decide(state: &mut State, exchange: &Exchange, now_ms: u64) -> Decision {
    let (Some(key), Some(digest)) = (&exchange.idempotency_key, &exchange.digest) else {
        return Decision::Fresh { reserved: false };
    };
    if state.config.service(exchange.service).idempotency == IdempotencyMode::Ignored {
        return Decision::Fresh { reserved: false };
    }
    let scope = scope_of(exchange, key);
    // A record past its retention is gone: the key is new again.
    let retention = exchange.dialect.key_retention_ms();
    if let (Some(KeyRecord::Done { at_ms, .. }), Some(retention)) = (state.keys.get(&scope), retention) {
        if now_ms >= at_ms.saturating_add(retention) {
            state.keys.remove(&scope);
        }
    }
    match state.keys.get(&scope) {
        None => {
            state.keys.insert(scope, KeyRecord::InProgress { digest: digest.clone() });
            Decision::Fresh { reserved: true }
        }
        Some(KeyRecord::Done { digest: first, status, body, .. }) if first == digest => {
            Decision::Replay { status: *status, body: body.clone() }
        }
        Some(KeyRecord::InProgress { digest: first }) if first == digest => {
            Decision::Refuse(exchange.dialect.key_conflict(KeyConflict::InProgress))
        }
        Some(_) => Decision::Refuse(exchange.dialect.key_conflict(KeyConflict::ReusedWithDifferentRequest)),
    }
}

fn scope_of(exchange: &Exchange, key: &str) -> KeyScope {
    (exchange.dialect.name(), exchange.service, exchange.tenant.clone(), key.to_owned())
}

/// An in-progress key record; removed again unless settled (a dropped request, a client that
/// went away while held, or an answer that is not a success leaves the key free).
struct Reservation {
    downstream: Downstream,
    scope: KeyScope,
    keeps_failures: bool,
    armed: bool,
}

impl Reservation {
    fn new(downstream: &Downstream, exchange: &Exchange) -> Self {
        let key = exchange.idempotency_key.as_deref().expect("reserved requests carry a key");
        Self {
            downstream: downstream.clone(),
            scope: scope_of(exchange, key),
            keeps_failures: exchange.dialect.keeps_failures(),
            armed: true,
        }
    }

    fn settle(mut self, state: &mut State, processed: &Processed, now_ms: u64) {
        self.armed = false;
        let digest = match state.keys.get(&self.scope) {
            Some(KeyRecord::InProgress { digest }) => digest.clone(),
            _ => return,
        };
        if (200..300).contains(&processed.status) || self.keeps_failures {
            let record = KeyRecord::Done {
                digest,
                status: processed.status,
                body: processed.body.clone(),
                at_ms: now_ms,
            };
            state.keys.insert(self.scope.clone(), record);
        } else {
            state.keys.remove(&self.scope);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.armed {
            let mut state = self.downstream.lock();
            if matches!(state.keys.get(&self.scope), Some(KeyRecord::InProgress { .. })) {
                state.keys.remove(&self.scope);
            }
        }
    }
}

struct HeldGuard {
    downstream: Downstream,
    id: FaultRuleId,
}

impl HeldGuard {
    fn new(downstream: &Downstream, id: FaultRuleId) -> Self {
        *downstream.lock().held.entry(id).or_insert(0) += 1;
        Self { downstream: downstream.clone(), id }
    }
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        let mut state = self.downstream.lock();
        if let Some(count) = state.held.get_mut(&self.id) {
            *count = count.saturating_sub(1);
        }
    }
}

/// What an effect is made of, before the ledger numbers it.
pub(crate) struct NewEffect<'a> {
    pub service: Service,
    pub kind: EffectKind,
    pub tenant: &'a str,
    pub idempotency_key: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub effect_reference: &'a str,
    pub request_digest: String,
    pub content_digest: String,
    pub answer: Value,
    pub versions: Option<VersionChange>,
    pub at_ms: u64,
}

/// Appends an effect to the ledger (telling the observer first) and returns its number.
pub(crate) fn push_effect(state: &mut State, new: NewEffect<'_>) -> u64 {
    let seq = state.ledger.len() as u64 + 1;
    let effect = Effect {
        seq,
        service: new.service,
        kind: new.kind,
        tenant: new.tenant.to_owned(),
        idempotency_key: new.idempotency_key.map(str::to_owned),
        origin: new.origin.map(str::to_owned),
        request_id: new.request_id.map(str::to_owned),
        effect_reference: new.effect_reference.to_owned(),
        request_digest: new.request_digest,
        content_digest: new.content_digest,
        answer: new.answer,
        versions: new.versions,
        at_ms: new.at_ms,
    };
    if let Some(observer) = &state.observer {
        observer.effect(&effect);
    }
    state.ledger.push(effect);
    seq
}
