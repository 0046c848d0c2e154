//! The one ordered history of a run: every call, answer, downstream exchange, fault, pause,
//! crash and effect, with simulated time. Oracles read it (and the ledger); the report's
//! timelines draw it. It is deterministic: the same seed gives the same bytes.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use fake_downstream::{Disposition, Effect, RequestRecord};
use protocol::Outcome;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::text::quoted;

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

/// Whether a request to a worker was a call, a poll or a reconciliation (the reports' type:
/// the history and the reports name it alike).
pub use reports::RequestKind;

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
        /// The business content of the downstream request this call asks for
        /// ([`fake_downstream::content_digest`] of its validated arguments), when the call is
        /// valid: how the harness tells which call a downstream request carries out.
        content: Option<String>,
    },
    /// A worker began handling a tool call (the executor was called).
    CallReceived {
        /// The call's label.
        label: String,
        /// The worker.
        worker: String,
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
        /// A black-box server answered without an outcome (no `structuredContent`, `isError:
        /// false`): `outcome` is only its success claim, naming no effect and no result.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        bare: bool,
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
        /// The harness's name for this one request (`worker-1#3`), carried to the downstream.
        request_id: String,
        /// The operation the worker's task was serving (harness tag).
        origin: Option<String>,
        /// The label of the agent request the worker was serving (`None` for queue
        /// deliveries, webhooks and work started outside any request).
        serving: Option<String>,
        /// Method.
        method: String,
        /// Path.
        path: String,
        /// Idempotency key sent, if any.
        idempotency_key: Option<String>,
        /// The tenant the request names (its body's `tenant`, or its `tenant` query).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
        /// Its business content, for a state-changing request
        /// ([`fake_downstream::request_content`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
    },
    /// A downstream answer reached the worker's executor.
    DownstreamAnswered {
        /// The worker.
        worker: String,
        /// The request's id.
        request_id: String,
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
        /// The request's id.
        request_id: String,
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
        /// The fault rule that fired, if any.
        fault_rule: Option<u64>,
        /// Operation tag.
        origin: Option<String>,
        /// The request's id, when a worker sent it.
        request_id: Option<String>,
        /// The tenant the request named.
        tenant: Option<String>,
        /// The idempotency key it carried.
        idempotency_key: Option<String>,
        /// Its business content, for a state-changing request read whole.
        content: Option<String>,
        /// The ledger entry it made, if any.
        effect_seq: Option<u64>,
    },
    /// The downstream committed an effect, seen as it was committed: the ground truth the
    /// oracles count from (and check against the ledger at the end).
    Effect {
        /// The ledger entry, whole.
        effect: Effect,
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
        /// At a downstream point: the operations whose calls carried the held request's
        /// business content (`tenant/environment/workflow/step`). A worker that reached it
        /// while serving a call of one of them acted on that call, though it may have left no
        /// other trace (a process's claim is in its own store).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        operations: Vec<String>,
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
        /// The pause point it was stopped at when it was killed, if any.
        paused_at: Option<String>,
        /// Whether that point came right after a request the downstream committed an effect
        /// for: the crash fell between the effect and anything the executor could record.
        after_commit: bool,
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
    /// instead of stepping through it (the simulated world's clock counts the skip).
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
    /// An executor filed a reconciliation entry for people (an operation it cannot settle on
    /// its own, or a finding about one).
    ReconciliationFiled {
        /// Worker.
        worker: String,
        /// The operation's tenant.
        tenant: String,
        /// The operation key the executor named.
        operation_key: String,
        /// What it found (the executor's words).
        finding: String,
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
        /// The label of the agent request the worker was serving, if any.
        serving: Option<String>,
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
#[derive(Debug, Clone)]
pub struct History {
    inner: Arc<HistoryInner>,
}

struct HistoryInner {
    events: Mutex<Vec<Event>>,
    /// Ids of the requests that made an effect, as the downstream committed them.
    committed: Mutex<BTreeSet<String>>,
    /// What every event is timed by.
    clock: Arc<dyn wire::Clock>,
}

impl std::fmt::Debug for HistoryInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryInner").field("events", &self.events).finish_non_exhaustive()
    }
}

impl Default for History {
    /// A history whose clock always reads 0 (for tests and records built by hand).
    fn default() -> Self {
        Self::new(|| 0)
    }
}

impl History {
    fn lock(&self) -> MutexGuard<'_, Vec<Event>> {
        self.inner.events.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A history timed by `clock` (the world's: simulated or real time).
    pub fn new(clock: impl wire::Clock) -> Self {
        Self {
            inner: Arc::new(HistoryInner {
                events: Mutex::default(),
                committed: Mutex::default(),
                clock: Arc::new(clock),
            }),
        }
    }

    /// Whether the request `request_id` made an effect.
    pub fn committed(&self, request_id: &str) -> bool {
        self.inner.committed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).contains(request_id)
    }

    /// Appends an event at the world clock's current time.
    pub fn push(&self, kind: EventKind) {
        let at_ms = self.inner.clock.now_ms();
        let mut events = self.lock();
        let seq = events.len() as u64 + 1;
        events.push(Event { seq, at_ms, kind });
    }

    /// When the agent request `label` got its worker's first downstream request sent, if it
    /// did yet.
    pub fn first_request_for(&self, label: &str) -> Option<u64> {
        self.lock().iter().find_map(|event| match &event.kind {
            EventKind::DownstreamSent { serving: Some(serving), .. } if serving == label => Some(event.at_ms),
            _ => None,
        })
    }

    /// How many events there are so far (the latest one's `seq`).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether there is none yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

/// `sha256:<hex>` of [`to_json_lines`], hashed line by line (without building the text).
pub fn digest(events: &[Event]) -> String {
    let mut hasher = Sha256::new();
    let mut line = Vec::with_capacity(512);
    for event in events {
        line.clear();
        serde_json::to_writer(&mut line, event).expect("events serialise");
        line.push(b'\n');
        hasher.update(&line);
    }
    let mut text = String::with_capacity(7 + 64);
    text.push_str("sha256:");
    for byte in hasher.finalize() {
        text.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        text.push(char::from(b"0123456789abcdef"[usize::from(byte & 0x0f)]));
    }
    text
}

/// Feeds the downstream's effects and journal into the history.
impl fake_downstream::Observer for History {
    fn effect(&self, effect: &Effect) {
        if let Some(request_id) = &effect.request_id {
            self.inner
                .committed
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .insert(request_id.clone());
        }
        self.push(EventKind::Effect { effect: effect.clone() });
    }

    fn request(&self, record: &RequestRecord) {
        self.push(EventKind::DownstreamHandled {
            journal_seq: record.seq,
            request: format!("{} {}", record.method, record.path),
            disposition: record.disposition,
            status: record.status,
            fault: record.fault_action.clone(),
            fault_rule: record.fault_rule,
            origin: record.origin.clone(),
            request_id: record.request_id.clone(),
            tenant: record.tenant.clone(),
            idempotency_key: record.idempotency_key.clone(),
            content: record.content_digest.clone(),
            effect_seq: record.effect_seq,
        });
    }
}

impl Event {
    /// One readable line: `   812ms  #14 worker-1 -> downstream POST /v1/tickets (origin ...)`.
    pub fn to_line(&self) -> String {
        let what = match &self.kind {
            EventKind::CallSent { label, worker, operation, tool, tool_version, call_id, actor, .. } => {
                format!(
                    "agent -> {worker}: call {} {tool}@{tool_version} for {operation} by {actor} (call id {call_id})",
                    quoted(label)
                )
            }
            EventKind::OperationQuery { label, kind, worker, operation, .. } => {
                format!("agent -> {worker}: {} {} for {operation}", kind.as_str(), quoted(label))
            }
            EventKind::Answered { label, worker, outcome, bare } => format!(
                "{worker} -> agent: {} {}{}{}{}",
                quoted(label),
                outcome.status.as_str(),
                outcome.reason.map(|r| format!(" ({})", r.as_str())).unwrap_or_default(),
                outcome.effect_reference.as_ref().map(|r| format!(" ref={r}")).unwrap_or_default(),
                // A bare claim's note says what the harness read in its place.
                outcome
                    .message
                    .as_ref()
                    .filter(|_| *bare)
                    .map(|note| format!(": {note}"))
                    .unwrap_or_default()
            ),
            EventKind::CallReceived { label, worker } => format!("{worker}: handling call {}", quoted(label)),
            EventKind::AgentReceived { label } => format!("agent received {}", quoted(label)),
            EventKind::AgentGotNoAnswer { label, reason } => {
                format!("agent got no answer to {}: {reason}", quoted(label))
            }
            EventKind::ExecutorPanicked { worker, during, message } => {
                format!("{worker}: executor PANICKED during {during}: {message}")
            }
            EventKind::DownstreamSent {
                worker, request_id, origin, method, path, idempotency_key, ..
            } => format!(
                "{worker} -> downstream: {method} {path} ({request_id}){}{}",
                idempotency_key.as_ref().map(|k| format!(" key={k}")).unwrap_or_default(),
                origin.as_ref().map(|o| format!(" [{o}]")).unwrap_or_default()
            ),
            EventKind::DownstreamAnswered { worker, request, status, references, .. } => {
                format!("downstream -> {worker}: {status} to {request}{}", naming(references))
            }
            EventKind::DownstreamFailed { worker, request, error, .. } => {
                format!("downstream -> {worker}: no answer to {request}: {error}")
            }
            EventKind::DownstreamHandled { journal_seq, request, disposition, status, fault, .. } => format!(
                "downstream: request #{journal_seq} {request} -> {}, answer {}{}",
                disposition.as_str(),
                status.map_or("none".to_owned(), |s| s.to_string()),
                fault.as_ref().map(|f| format!(" (fault {f})")).unwrap_or_default()
            ),
            EventKind::Effect { effect } => {
                format!(
                    "LEDGER #{}: {} {} for {}{}{}{}",
                    effect.seq,
                    effect.kind.as_str(),
                    effect.effect_reference,
                    effect.tenant,
                    effect.idempotency_key.as_ref().map(|k| format!(" key={k}")).unwrap_or_default(),
                    effect.request_id.as_ref().map(|r| format!(" by {r}")).unwrap_or_default(),
                    effect
                        .origin
                        .as_ref()
                        .map(|o| format!(" [{o}]"))
                        .unwrap_or_else(|| " [no origin]".into())
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
            EventKind::HoldReleased { name } => format!("held requests of {} released", quoted(name)),
            EventKind::FaultsHealed => "all faults healed".to_owned(),
            EventKind::Paused { name, worker, point, .. } => {
                format!("{worker} PAUSED at {point} ({})", quoted(name))
            }
            EventKind::Released { name } => format!("pause {} released", quoted(name)),
            EventKind::Crashed { worker, paused_at, after_commit } => format!(
                "{worker} CRASHED{}{}",
                paused_at.as_ref().map(|point| format!(" while paused at {point}")).unwrap_or_default(),
                if *after_commit { " (after a committed effect)" } else { "" }
            ),
            EventKind::Restarted { worker } => format!("{worker} restarted"),
            EventKind::ClockAdvanced { by_ms } => format!("clock advanced by {by_ms} ms"),
            EventKind::IdleSkipped { by_ms } => format!("idle: skipped {by_ms} ms"),
            EventKind::HumanEdit { ticket, version } => {
                format!("a person edited {ticket} (now version {version})")
            }
            EventKind::ReconciliationFiled { worker, tenant, operation_key, finding } => {
                format!("{worker} -> operators: {tenant}/{operation_key}: {finding}")
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
                    "downstream -> {worker}: webhook {}{}",
                    event_id.as_deref().unwrap_or("?"),
                    naming(references)
                )
            }
            EventKind::WebhookHandled { worker, event_id, ack } => {
                format!("{worker}: webhook {} -> {ack}", event_id.as_deref().unwrap_or("?"))
            }
            EventKind::StoreCommitted { worker, call, .. } => format!("{worker}: store {call} committed"),
            EventKind::SettleStarted => "steps done: faults healed, settling".to_owned(),
            EventKind::LimitReached { what } => format!("LIMIT: {what}"),
        };
        format!("{:>8}ms #{:<4} {what}", self.at_ms, self.seq)
    }
}

/// `: ticket_1, charge_2` for the effect references an answer or a webhook named; nothing
/// for none.
fn naming(references: &[String]) -> String {
    if references.is_empty() {
        String::new()
    } else {
        format!(": {}", references.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_the_sha256_of_the_json_lines() {
        let events = vec![
            Event { seq: 1, at_ms: 0, kind: EventKind::SettleStarted },
            Event {
                seq: 2,
                at_ms: 10,
                kind: EventKind::Crashed { worker: "worker-1".into(), paused_at: None, after_commit: false },
            },
        ];
        let expected = Sha256::digest(to_json_lines(&events).as_bytes());
        let hex: String = expected.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(digest(&events), format!("sha256:{hex}"));
        assert_ne!(digest(&events[..1]), digest(&events));
    }
}
