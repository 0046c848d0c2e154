//! The one ordered history of a run: every call, answer, downstream exchange, fault, pause,
//! crash and effect, with simulated time. Oracles read it (and the ledger); the report's
//! timelines draw it. It is deterministic: the same seed gives the same bytes.

use std::sync::{Arc, Mutex, MutexGuard};

use fake_downstream::{Disposition, Effect, EffectKind, RequestRecord, Service, VersionChange};
use protocol::Outcome;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::WorldClock;

/// One entry of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position, from 1.
    pub seq: u64,
    /// Simulated milliseconds since the run started.
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// Whether a request to a worker was a call, a poll or a reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A tool call.
    Call,
    /// A status poll.
    Poll,
    /// A reconciliation request.
    Reconcile,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// The agent sent a tool call.
    CallSent {
        /// The scenario's name for it.
        label: String,
        /// The model's call id (new per call).
        call_id: String,
        /// To which worker.
        worker: String,
        /// `tenant/environment/workflow/step`.
        operation: String,
        /// Tenant.
        tenant: String,
        /// Actor.
        actor: String,
        /// Tool.
        tool: String,
        /// Tool version.
        tool_version: String,
        /// The harness's own fingerprint of the material request (from the tool contract),
        /// when the call is valid.
        fingerprint: Option<String>,
        /// For absolute updates: the version the update is based on.
        expected_version: Option<u64>,
    },
    /// The agent sent a poll or a reconciliation request.
    OperationQuery {
        /// The scenario's name for it.
        label: String,
        /// Poll or reconcile.
        kind: RequestKind,
        /// To which worker.
        worker: String,
        /// `tenant/environment/workflow/step`.
        operation: String,
        /// Tenant.
        tenant: String,
        /// Actor.
        actor: String,
    },
    /// A worker's executor answered (what the executor says; oracles never count effects
    /// from it).
    Answered {
        /// The request's label.
        label: String,
        /// The worker.
        worker: String,
        /// The outcome.
        outcome: Outcome,
    },
    /// The agent received the answer.
    AgentReceived {
        /// The request's label.
        label: String,
    },
    /// The agent did not get an answer.
    AgentGotNoAnswer {
        /// The request's label.
        label: String,
        /// `timeout`, `connection_closed`, `lost_by_scenario`, `malformed_answer`, ...
        reason: String,
    },
    /// The executor panicked.
    ExecutorPanicked {
        /// The worker.
        worker: String,
        /// What it was doing.
        during: String,
        /// The panic message.
        message: String,
    },
    /// A worker sent a request to the downstream.
    DownstreamSent {
        /// The worker.
        worker: String,
        /// The operation the worker was serving (harness tag).
        origin: Option<String>,
        /// Method.
        method: String,
        /// Path.
        path: String,
        /// Idempotency key sent, if any.
        idempotency_key: Option<String>,
    },
    /// A downstream answer reached the worker's executor.
    DownstreamAnswered {
        /// The worker.
        worker: String,
        /// The operation tag.
        origin: Option<String>,
        /// Method and path of the request.
        request: String,
        /// Status.
        status: u16,
        /// Effect references the answer carried (a 2xx only): receipts the executor saw.
        references: Vec<String>,
    },
    /// A downstream request failed at the transport (no answer reached the executor).
    DownstreamFailed {
        /// The worker.
        worker: String,
        /// The operation tag.
        origin: Option<String>,
        /// Method and path.
        request: String,
        /// Why.
        error: String,
    },
    /// The downstream decided what to do with a request (its journal).
    DownstreamHandled {
        /// Journal position.
        journal_seq: u64,
        /// Method and path.
        request: String,
        /// What it did.
        disposition: Disposition,
        /// Answer status, `None` when no answer was sent.
        status: Option<u16>,
        /// The fault action that fired, if any.
        fault: Option<String>,
        /// Operation tag.
        origin: Option<String>,
    },
    /// The downstream committed an effect (the ledger: ground truth).
    Effect {
        /// Ledger position.
        ledger_seq: u64,
        /// Service.
        service: Service,
        /// Kind.
        kind: EffectKind,
        /// Tenant.
        tenant: String,
        /// Reference.
        reference: String,
        /// Key sent with it.
        idempotency_key: Option<String>,
        /// Operation tag.
        origin: Option<String>,
        /// Ticket versions, for ticket changes.
        versions: Option<VersionChange>,
    },
    /// The authorizer decided.
    Authorization {
        /// The worker that asked.
        worker: String,
        /// Actor.
        actor: String,
        /// Tool.
        tool: String,
        /// Decision.
        allowed: bool,
    },
    /// A scenario revoked a permission.
    Revoked {
        /// Actor.
        actor: String,
        /// Tool, or every tool.
        tool: Option<String>,
    },
    /// A fault rule was installed.
    FaultInstalled {
        /// Its JSON form.
        rule: serde_json::Value,
    },
    /// Held requests were let go.
    HoldReleased {
        /// The fault's name.
        name: String,
    },
    /// Every fault was cleared (settle phase).
    FaultsHealed,
    /// A worker reached a pause point and is suspended.
    Paused {
        /// The pause's name.
        name: String,
        /// The worker.
        worker: String,
        /// The point.
        point: String,
    },
    /// A paused worker was let go.
    Released {
        /// The pause's name.
        name: String,
    },
    /// A worker was killed.
    Crashed {
        /// The worker.
        worker: String,
    },
    /// A worker was started again.
    Restarted {
        /// The worker.
        worker: String,
    },
    /// Simulated time was let pass.
    ClockAdvanced {
        /// How much.
        by_ms: u64,
    },
    /// Nothing in the world was active, so the runner skipped this much simulated time
    /// instead of stepping through it (see [`crate::clock`]).
    IdleSkipped {
        /// How much.
        by_ms: u64,
    },
    /// A person edited a ticket.
    HumanEdit {
        /// The ticket.
        ticket: String,
        /// Its new version.
        version: u64,
    },
    /// An executor wrote an envelope to the outbox.
    Enqueued {
        /// Envelope id.
        envelope_id: String,
        /// Its operation key.
        operation_key: String,
        /// Operation tag.
        origin: Option<String>,
        /// Deliveries scheduled (2 when the queue duplicates).
        deliveries: u32,
    },
    /// The queue handed an envelope to a consumer.
    Delivered {
        /// Envelope id.
        envelope_id: String,
        /// Which delivery of it (from 1).
        attempt: u32,
        /// The consumer.
        worker: String,
    },
    /// A consumer finished a delivery.
    Consumed {
        /// Envelope id.
        envelope_id: String,
        /// The consumer.
        worker: String,
        /// `ack` or `retry`.
        result: String,
    },
    /// A webhook reached a worker.
    WebhookReceived {
        /// The worker.
        worker: String,
        /// The operation the webhook's job belongs to (harness tag, from the ledger).
        origin: Option<String>,
        /// The event id it carried.
        event_id: Option<String>,
        /// Effect references it carried (the job id): a receipt the executor has seen.
        references: Vec<String>,
    },
    /// A worker's executor handled a webhook.
    WebhookHandled {
        /// The worker.
        worker: String,
        /// The event id it carried.
        event_id: Option<String>,
        /// What the executor did with it.
        ack: String,
    },
    /// A store call of an executor that uses the store gate committed.
    StoreCommitted {
        /// The worker.
        worker: String,
        /// The call's name (`claim`, `complete`, ...).
        call: String,
    },
    /// The scenario's steps are done; faults healed, the world settles.
    SettleStarted,
    /// A run limit was hit.
    LimitReached {
        /// Which.
        what: String,
    },
}

/// The shared, append-only history of one run. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct History {
    inner: Arc<HistoryInner>,
}

#[derive(Debug, Default)]
struct HistoryInner {
    events: Mutex<Vec<Event>>,
    /// What every event is timed by.
    clock: WorldClock,
}

impl History {
    fn lock(&self) -> MutexGuard<'_, Vec<Event>> {
        self.inner.events.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A history timed by `clock`.
    pub fn new(clock: WorldClock) -> Self {
        Self { inner: Arc::new(HistoryInner { events: Mutex::default(), clock }) }
    }

    /// Appends an event at the world clock's current time.
    pub fn push(&self, kind: EventKind) {
        let at_ms = self.inner.clock.now_ms();
        let mut events = self.lock();
        let seq = events.len() as u64 + 1;
        events.push(Event { seq, at_ms, kind });
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.lock().clone()
    }
}

/// The history as text, one JSON object a line: the bytes the determinism check compares.
pub fn to_json_lines(events: &[Event]) -> String {
    let mut text = String::new();
    for event in events {
        text.push_str(&serde_json::to_string(event).expect("events serialise"));
        text.push('\n');
    }
    text
}

/// `sha256:<hex>` of [`to_json_lines`].
pub fn digest(events: &[Event]) -> String {
    let hash = Sha256::digest(to_json_lines(events).as_bytes());
    format!("sha256:{}", hash.iter().map(|byte| format!("{byte:02x}")).collect::<String>())
}

/// Feeds the downstream's effects and journal into the history.
impl fake_downstream::Observer for History {
    fn effect(&self, effect: &Effect) {
        self.push(EventKind::Effect {
            ledger_seq: effect.seq,
            service: effect.service,
            kind: effect.kind,
            tenant: effect.tenant.clone(),
            reference: effect.effect_reference.clone(),
            idempotency_key: effect.idempotency_key.clone(),
            origin: effect.origin.clone(),
            versions: effect.versions,
        });
    }

    fn request(&self, record: &RequestRecord) {
        self.push(EventKind::DownstreamHandled {
            journal_seq: record.seq,
            request: format!("{} {}", record.method, record.path),
            disposition: record.disposition,
            status: record.status,
            fault: record.fault_action.clone(),
            origin: record.origin.clone(),
        });
    }
}

impl Event {
    /// One readable line: `   812ms  #14 worker-1 -> downstream POST /v1/tickets (origin ...)`.
    pub fn to_line(&self) -> String {
        let what = match &self.kind {
            EventKind::CallSent { label, worker, operation, tool, tool_version, call_id, actor, .. } => {
                format!("agent -> {worker}: call {label:?} {tool}@{tool_version} for {operation} by {actor} (call id {call_id})")
            }
            EventKind::OperationQuery { label, kind, worker, operation, .. } => {
                format!("agent -> {worker}: {kind:?} {label:?} for {operation}").to_lowercase()
            }
            EventKind::Answered { label, worker, outcome } => format!(
                "{worker} -> agent: {label:?} {}{}{}",
                outcome.status.as_str(),
                outcome
                    .reason
                    .map(|r| format!(
                        " ({})",
                        serde_json::to_string(&r).unwrap_or_default().trim_matches('"')
                    ))
                    .unwrap_or_default(),
                outcome.effect_reference.as_ref().map(|r| format!(" ref={r}")).unwrap_or_default()
            ),
            EventKind::AgentReceived { label } => format!("agent received {label:?}"),
            EventKind::AgentGotNoAnswer { label, reason } => {
                format!("agent got no answer to {label:?}: {reason}")
            }
            EventKind::ExecutorPanicked { worker, during, message } => {
                format!("{worker}: executor PANICKED during {during}: {message}")
            }
            EventKind::DownstreamSent { worker, origin, method, path, idempotency_key } => format!(
                "{worker} -> downstream: {method} {path}{}{}",
                idempotency_key.as_ref().map(|k| format!(" key={k}")).unwrap_or_default(),
                origin.as_ref().map(|o| format!(" [{o}]")).unwrap_or_default()
            ),
            EventKind::DownstreamAnswered { worker, request, status, references, .. } => {
                format!("downstream -> {worker}: {status} to {request} {references:?}")
            }
            EventKind::DownstreamFailed { worker, request, error, .. } => {
                format!("downstream -> {worker}: no answer to {request}: {error}")
            }
            EventKind::DownstreamHandled { journal_seq, request, disposition, status, fault, .. } => format!(
                "downstream: request #{journal_seq} {request} -> {disposition:?}, answer {}{}",
                status.map_or("none".to_owned(), |s| s.to_string()),
                fault.as_ref().map(|f| format!(" (fault {f})")).unwrap_or_default()
            ),
            EventKind::Effect { ledger_seq, kind, tenant, reference, idempotency_key, origin, .. } => {
                format!(
                    "LEDGER #{ledger_seq}: {kind:?} {reference} for {tenant}{}{}",
                    idempotency_key.as_ref().map(|k| format!(" key={k}")).unwrap_or_default(),
                    origin.as_ref().map(|o| format!(" [{o}]")).unwrap_or_else(|| " [no origin]".into())
                )
            }
            EventKind::Authorization { worker, actor, tool, allowed } => {
                format!(
                    "{worker}: authorizer says {actor} {} use {tool}",
                    if *allowed { "may" } else { "may NOT" }
                )
            }
            EventKind::Revoked { actor, tool } => {
                format!("permission revoked: {actor} for {}", tool.as_deref().unwrap_or("every tool"))
            }
            EventKind::FaultInstalled { rule } => format!("fault installed: {rule}"),
            EventKind::HoldReleased { name } => format!("held requests of {name:?} released"),
            EventKind::FaultsHealed => "all faults healed".to_owned(),
            EventKind::Paused { name, worker, point } => format!("{worker} PAUSED at {point} ({name:?})"),
            EventKind::Released { name } => format!("pause {name:?} released"),
            EventKind::Crashed { worker } => format!("{worker} CRASHED"),
            EventKind::Restarted { worker } => format!("{worker} restarted"),
            EventKind::ClockAdvanced { by_ms } => format!("clock advanced by {by_ms} ms"),
            EventKind::IdleSkipped { by_ms } => format!("idle: skipped {by_ms} ms"),
            EventKind::HumanEdit { ticket, version } => {
                format!("a person edited {ticket} (now version {version})")
            }
            EventKind::Enqueued { envelope_id, operation_key, deliveries, .. } => {
                format!("outbox: envelope {envelope_id} for {operation_key} ({deliveries} deliveries)")
            }
            EventKind::Delivered { envelope_id, attempt, worker } => {
                format!("queue -> {worker}: envelope {envelope_id} (delivery {attempt})")
            }
            EventKind::Consumed { envelope_id, worker, result } => {
                format!("{worker}: envelope {envelope_id} -> {result}")
            }
            EventKind::WebhookReceived { worker, event_id, references, .. } => {
                format!(
                    "downstream -> {worker}: webhook {} {references:?}",
                    event_id.as_deref().unwrap_or("?")
                )
            }
            EventKind::WebhookHandled { worker, event_id, ack } => {
                format!("{worker}: webhook {} -> {ack}", event_id.as_deref().unwrap_or("?"))
            }
            EventKind::StoreCommitted { worker, call } => format!("{worker}: store {call} committed"),
            EventKind::SettleStarted => "steps done: faults healed, settling".to_owned(),
            EventKind::LimitReached { what } => format!("LIMIT: {what}"),
        };
        format!("{:>8}ms #{:<4} {what}", self.at_ms, self.seq)
    }
}
