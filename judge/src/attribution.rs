//! Which operation each downstream request (and so each effect) belongs to, decided from what
//! the harness controls, never from the key an executor chose to send.
//!
//! The facts, in the order they count:
//!
//! 1. **Business content.** Every tool call the agent sends has a content digest
//!    ([`fake_downstream::content_digest`] of its validated arguments); the downstream computes
//!    the same digest of every state-changing request it reads. A request carries out the call
//!    whose content it carries, whichever task, sweep or worker sent it.
//! 2. When several operations were sent the same content (a deliberate second action with the
//!    same arguments): the operation that already sent that idempotency key with that content;
//!    then the operation whose answers named that key as its operation key; then the operation
//!    the sending task was serving (the harness's `X-Replaylab-Origin` tag: background work
//!    keeps the tag of the call that started it, which need not be the operation it works on);
//!    a key never seen before goes to the first of them that has sent no key yet; else to the
//!    one called first. An operation whose every such call was refused (unauthorized, invalid)
//!    claimed nothing, and is a candidate only when no other is. (These ties are the only place an executor's own words count, and they
//!    can only move an effect between operations whose calls were identical.)
//! 3. Requests without business content: a receipt lookup belongs to the operation whose
//!    state-changing request carried that key (tenant and key), else to the one whose answers
//!    named it, else to the sending task's unless that operation is known by another key; a job
//!    read to the operation that submitted the job; anything else (a ticket read, a completion
//!    notice, whose content is no call's) to the operation the sending task was serving.
//!
//! An effect belongs to the operation of the request that made it (the downstream records the
//! harness's request id with it).

use std::collections::{BTreeMap, BTreeSet};

use fake_downstream::{Effect, EffectKind};
use protocol::{ContractSet, EffectClass, ToolContract};

use wire::percent_decode;

use crate::history::{Event, EventKind};

/// What kind of downstream request a method and path are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    /// A state-changing business request that makes an effect of this kind when it commits.
    Change(EffectKind),
    /// `GET /v1/receipts/{key}`: what was made with a key.
    ReceiptLookup,
    /// A plain read of an object (`GET /v1/tickets/{id}`, `GET /v1/jobs/{id}`).
    Read,
    /// Anything else (an unknown route).
    Other,
}

impl RequestClass {
    /// Classifies a request of the fake downstream's API, in whatever dialect
    /// ([`fake_downstream::request_effect`]: the judge knows no dialect).
    pub fn of(method: &str, path: &str) -> RequestClass {
        match fake_downstream::request_effect(method, path) {
            fake_downstream::RequestEffect::Change(kind) => RequestClass::Change(kind),
            fake_downstream::RequestEffect::ReceiptLookup => RequestClass::ReceiptLookup,
            fake_downstream::RequestEffect::Read => RequestClass::Read,
            _ => RequestClass::Other,
        }
    }

    /// The effect a state-changing request makes.
    pub fn effect_kind(self) -> Option<EffectKind> {
        match self {
            RequestClass::Change(kind) => Some(kind),
            _ => None,
        }
    }

    /// Whether the request looks an effect up (a receipt lookup or a read).
    pub fn is_lookup(self) -> bool {
        matches!(self, RequestClass::ReceiptLookup | RequestClass::Read)
    }
}

/// The kind of effect a contract's tool makes (its own effect: a job's completion notice is
/// not the job's).
pub fn contract_effect_kind(contract: &ToolContract) -> Option<EffectKind> {
    match (contract.downstream.service.as_str(), contract.effect_class) {
        (_, EffectClass::Read) => None,
        ("tickets", EffectClass::NaturalIdempotentUpdate) => Some(EffectKind::TicketStatusChanged),
        ("tickets", _) => Some(EffectKind::TicketCreated),
        ("charges", _) => Some(EffectKind::ChargeCreated),
        ("messages", _) => Some(EffectKind::MessageSent),
        ("jobs", _) => Some(EffectKind::JobAccepted),
        _ => None,
    }
}

/// The kind of effect the tool `tool` makes (any version of its built-in contract).
pub fn tool_effect_kind(tool: &str) -> Option<EffectKind> {
    // Looked up for every call and answer: the table is made once per process.
    static KINDS: std::sync::OnceLock<BTreeMap<String, EffectKind>> = std::sync::OnceLock::new();
    KINDS
        .get_or_init(|| {
            let mut kinds = BTreeMap::new();
            for contract in ContractSet::builtin().iter() {
                if let Some(kind) = contract_effect_kind(contract) {
                    kinds.entry(contract.name.clone()).or_insert(kind);
                }
            }
            kinds
        })
        .get(tool)
        .copied()
}

/// What the harness concluded about one downstream request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributed {
    /// The operation it belongs to (`tenant/environment/workflow/step`), if any can be found.
    pub operation: Option<String>,
    /// What kind of request it was.
    pub class: RequestClass,
    /// The business content it carried (state-changing requests read whole).
    pub content: Option<String>,
}

/// One call as attribution needs it.
#[derive(Debug)]
struct CallContent<'a> {
    operation: &'a str,
    content: &'a str,
    /// Answered `rejected` as unauthorized or invalid: such a call claims nothing.
    refused: bool,
}

/// The operations of a run's downstream requests and effects.
#[derive(Debug, Default)]
pub struct Attribution {
    requests: BTreeMap<String, Attributed>,
    effects: BTreeMap<u64, Option<String>>,
    /// Operations some state-changing request carried a key for.
    keyed: BTreeSet<String>,
}

/// What is known of one request: what the downstream journaled, or, for a request it never
/// handled (the client gave up before the service read it), what the worker sent.
struct Handled<'a> {
    request: std::borrow::Cow<'a, str>,
    origin: Option<&'a str>,
    request_id: Option<&'a str>,
    tenant: &'a str,
    idempotency_key: Option<&'a str>,
    content: Option<&'a str>,
    effect_seq: Option<u64>,
}

impl<'a> Handled<'a> {
    fn of(event: &'a Event) -> Option<Handled<'a>> {
        match &event.kind {
            EventKind::DownstreamHandled {
                request,
                origin,
                request_id,
                tenant,
                idempotency_key,
                content,
                effect_seq,
                ..
            } => Some(Handled {
                request: std::borrow::Cow::Borrowed(request),
                origin: origin.as_deref(),
                request_id: request_id.as_deref(),
                tenant: tenant.as_deref().unwrap_or_default(),
                idempotency_key: idempotency_key.as_deref(),
                content: content.as_deref(),
                effect_seq: *effect_seq,
            }),
            EventKind::DownstreamSent {
                request_id,
                origin,
                method,
                path,
                idempotency_key,
                tenant,
                content,
                ..
            } => Some(Handled {
                request: std::borrow::Cow::Owned(format!(
                    "{method} {}",
                    path.split('?').next().unwrap_or_default()
                )),
                origin: origin.as_deref(),
                request_id: Some(request_id),
                tenant: tenant.as_deref().unwrap_or_default(),
                idempotency_key: idempotency_key.as_deref(),
                content: content.as_deref(),
                effect_seq: None,
            }),
            _ => None,
        }
    }
}

/// What attribution learns as it goes.
#[derive(Default)]
struct Learned<'a> {
    calls: Vec<CallContent<'a>>,
    /// (tenant, key) -> the operation whose state-changing request carried it first.
    keys: BTreeMap<(String, String), String>,
    /// job id -> the operation that submitted it.
    jobs: BTreeMap<String, String>,
}

impl Attribution {
    /// Attributes every downstream request and effect of `history`. Requests are taken in the
    /// order they left their workers (a slow request can be journaled after a later one).
    pub fn build(history: &[Event]) -> Attribution {
        let mut attribution = Attribution::default();
        // First what does not depend on order: the effects, the journal by request id, and the
        // keys the executor's answers named, (tenant, operation key) -> operation.
        let mut effects: BTreeMap<u64, &Effect> = BTreeMap::new();
        let mut journal: BTreeMap<&str, Handled<'_>> = BTreeMap::new();
        let mut labels: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
        let mut named: BTreeMap<(String, String), String> = BTreeMap::new();
        let mut sent: BTreeSet<&str> = BTreeSet::new();
        let mut refused: BTreeSet<&str> = BTreeSet::new();
        for event in history {
            match &event.kind {
                EventKind::CallSent { label, operation, tenant, .. }
                | EventKind::OperationQuery { label, operation, tenant, .. } => {
                    labels.insert(label, (operation, tenant));
                }
                EventKind::Answered { label, outcome, .. } => {
                    if outcome.status == protocol::OutcomeStatus::Rejected
                        && matches!(
                            outcome.reason,
                            Some(protocol::ReasonCode::Unauthorized | protocol::ReasonCode::InvalidRequest)
                        )
                    {
                        refused.insert(label);
                    }
                    if let (Some((operation, tenant)), Some(key)) =
                        (labels.get(label.as_str()), &outcome.operation_key)
                    {
                        named
                            .entry(((*tenant).to_owned(), key.clone()))
                            .or_insert_with(|| (*operation).to_owned());
                    }
                }
                EventKind::Effect { effect } => {
                    effects.insert(effect.seq, effect);
                }
                EventKind::DownstreamSent { request_id, .. } => {
                    sent.insert(request_id);
                }
                EventKind::DownstreamHandled { request_id: Some(request_id), .. } => {
                    if let Some(handled) = Handled::of(event) {
                        journal.entry(request_id).or_insert(handled);
                    }
                }
                _ => {}
            }
        }
        let mut learned = Learned::default();
        for event in history {
            let handled = match &event.kind {
                EventKind::CallSent { label, operation, content: Some(content), .. } => {
                    let refused = refused.contains(label.as_str());
                    learned.calls.push(CallContent { operation, content, refused });
                    continue;
                }
                // What the worker was serving is the harness's own record of the request; the
                // tag the downstream journaled is the same fact carried through a header.
                EventKind::DownstreamSent { request_id, origin, .. } => journal
                    .remove(request_id.as_str())
                    .map(|handled| Handled { origin: origin.as_deref(), ..handled })
                    .or_else(|| Handled::of(event)),
                // A request the downstream saw but no worker is known to have sent.
                EventKind::DownstreamHandled { request_id, .. }
                    if request_id.as_deref().is_none_or(|id| !sent.contains(id)) =>
                {
                    Handled::of(event)
                }
                _ => None,
            };
            if let Some(handled) = handled {
                attribution.attribute(&handled, &mut learned, &named, &effects);
            }
        }
        let keys = learned.keys;
        attribution.keyed = keys.values().cloned().collect();
        // An effect whose request was never journaled (it cannot happen with the fake
        // downstream, which journals every request it handles) is attributed on its own.
        for (seq, effect) in effects {
            attribution.effects.entry(seq).or_insert_with(|| {
                by_content(
                    &learned.calls,
                    &effect.content_digest,
                    effect.origin.as_deref(),
                    &effect.tenant,
                    effect.idempotency_key.as_deref(),
                    Keys { sent: &keys, named: &named },
                )
                .or_else(|| effect.origin.clone())
            });
        }
        attribution
    }

    /// Attributes one journaled request (see the module docs) and learns from it.
    fn attribute(
        &mut self,
        handled: &Handled<'_>,
        learned: &mut Learned<'_>,
        named: &BTreeMap<(String, String), String>,
        effects: &BTreeMap<u64, &Effect>,
    ) {
        let (method, path) = handled.request.split_once(' ').unwrap_or((&handled.request, ""));
        let class = RequestClass::of(method, path);
        let tenant = handled.tenant;
        let origin = || handled.origin.map(str::to_owned);
        let by_content = handled.content.and_then(|content| {
            let keys = Keys { sent: &learned.keys, named };
            by_content(&learned.calls, content, handled.origin, tenant, handled.idempotency_key, keys)
        });
        let operation = match class {
            RequestClass::Change(_) => by_content.clone().or_else(origin),
            RequestClass::ReceiptLookup => {
                let scoped = (
                    tenant.to_owned(),
                    percent_decode(path.strip_prefix("/v1/receipts/").unwrap_or_default()),
                );
                // The key's operation; else the one whose answers named the key; else the
                // sending task's, unless that operation is known by another key.
                let tagged = handled.origin.filter(|op| !learned.keys.values().any(|known| known == op));
                learned
                    .keys
                    .get(&scoped)
                    .or_else(|| named.get(&scoped))
                    .cloned()
                    .or_else(|| tagged.map(str::to_owned))
            }
            RequestClass::Read if path.starts_with("/v1/jobs/") => {
                let job = path.rsplit('/').next().unwrap_or_default();
                learned.jobs.get(job).cloned().or_else(origin)
            }
            RequestClass::Read | RequestClass::Other => origin(),
        };
        if let (Some(operation), Some(key), Some(_)) = (&by_content, handled.idempotency_key, handled.content)
        {
            learned.keys.entry((tenant.to_owned(), key.to_owned())).or_insert_with(|| operation.clone());
        }
        if let Some(seq) = handled.effect_seq {
            self.effects.insert(seq, operation.clone());
            if let (Some(effect), Some(operation)) = (effects.get(&seq), &operation) {
                if effect.kind == EffectKind::JobAccepted {
                    learned.jobs.entry(effect.effect_reference.clone()).or_insert_with(|| operation.clone());
                }
            }
        }
        if let Some(request_id) = handled.request_id {
            let attributed = Attributed { operation, class, content: handled.content.map(str::to_owned) };
            self.requests.entry(request_id.to_owned()).or_insert(attributed);
        }
    }

    /// What request `request_id` was and whose, if the downstream saw it.
    pub fn request(&self, request_id: &str) -> Option<&Attributed> {
        self.requests.get(request_id)
    }

    /// Whether a state-changing request of `operation` carried an idempotency key (so that a
    /// receipt lookup for it can be told apart).
    pub fn keyed(&self, operation: &str) -> bool {
        self.keyed.contains(operation)
    }

    /// The operation effect number `seq` (its ledger position) belongs to.
    pub fn effect(&self, seq: u64) -> Option<&str> {
        self.effects.get(&seq).and_then(|operation| operation.as_deref())
    }
}

/// What sent the downstream request that made an effect, as the harness saw it leave its
/// worker (never from the executor's words): the request's id, which the downstream records
/// with the effect, and what the sending worker was serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectCause {
    /// The harness's id of the downstream request (`worker-1#3`).
    pub request_id: String,
    /// What the sending worker was serving when the request left it: the label of the agent's
    /// call, poll or reconciliation (`race-2`); else the one queue delivery
    /// (`queue delivery 1 of env_3`) or webhook (`webhook evt_1`) it was handling; else
    /// `worker-1's own work (no request)`. `None` when no worker is known to have sent it.
    pub sent_for: Option<String>,
}

/// Ledger position -> what sent the request that made that effect: the effect's request id,
/// the downstream request with that id in the history, and the agent request (or queue
/// delivery, or webhook) the sending worker was serving then. Effects without a request id
/// (a person's edit) are left out.
pub fn effect_causes(history: &[Event]) -> BTreeMap<u64, EffectCause> {
    // Per worker, the queue deliveries and webhooks it is handling, in the order they began.
    let mut handling: BTreeMap<&str, Vec<(String, String)>> = BTreeMap::new();
    // Request id -> what its worker was serving when it was sent.
    let mut sent_for: BTreeMap<&str, String> = BTreeMap::new();
    let mut causes = BTreeMap::new();
    for event in history {
        match &event.kind {
            EventKind::Delivered { envelope_id, attempt, worker } => handling
                .entry(worker)
                .or_default()
                .push((envelope_id.clone(), format!("queue delivery {attempt} of {envelope_id}"))),
            EventKind::Consumed { envelope_id, worker, .. } => {
                if let Some(open) = handling.get_mut(worker.as_str()) {
                    open.retain(|(id, _)| id != envelope_id);
                }
            }
            EventKind::WebhookReceived { worker, event_id, .. } => {
                let id = event_id.clone().unwrap_or_default();
                let text = format!("webhook {}", event_id.as_deref().unwrap_or("without an event id"));
                handling.entry(worker).or_default().push((id, text));
            }
            EventKind::WebhookHandled { worker, event_id, .. } => {
                if let Some(open) = handling.get_mut(worker.as_str()) {
                    let id = event_id.clone().unwrap_or_default();
                    if let Some(index) = open.iter().position(|(open_id, _)| *open_id == id) {
                        open.remove(index);
                    }
                }
            }
            EventKind::Crashed { worker, .. } => {
                handling.remove(worker.as_str());
            }
            EventKind::DownstreamSent { worker, request_id, serving, .. } => {
                let open = handling.get(worker.as_str()).map_or(&[][..], Vec::as_slice);
                let text = match (serving, open) {
                    (Some(label), _) => label.clone(),
                    (None, [(_, one)]) => one.clone(),
                    (None, _) => format!("{worker}'s own work (no request)"),
                };
                sent_for.entry(request_id).or_insert(text);
            }
            EventKind::Effect { effect } => {
                if let Some(request_id) = &effect.request_id {
                    let cause = EffectCause {
                        request_id: request_id.clone(),
                        sent_for: sent_for.get(request_id.as_str()).cloned(),
                    };
                    causes.insert(effect.seq, cause);
                }
            }
            _ => {}
        }
    }
    causes
}

/// What the harness knows of keys: (tenant, key) -> the operation whose state-changing request
/// carried it first, and the operation whose answer named it as its operation key.
#[derive(Clone, Copy)]
struct Keys<'a> {
    sent: &'a BTreeMap<(String, String), String>,
    named: &'a BTreeMap<(String, String), String>,
}

/// The operation whose call carried `content`, among the calls sent so far (see the module
/// docs for ties).
fn by_content(
    calls: &[CallContent<'_>],
    content: &str,
    origin: Option<&str>,
    tenant: &str,
    key: Option<&str>,
    keys: Keys<'_>,
) -> Option<String> {
    let mut candidates: Vec<&str> = Vec::new();
    for call in calls.iter().filter(|call| call.content == content) {
        if !candidates.contains(&call.operation) {
            candidates.push(call.operation);
        }
    }
    // Among several, an operation whose every call with this content was refused (unauthorized,
    // invalid) claimed nothing: it is a candidate only when no other is.
    if candidates.len() > 1 {
        let claimed: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|operation| {
                calls
                    .iter()
                    .any(|call| call.operation == *operation && call.content == content && !call.refused)
            })
            .collect();
        if !claimed.is_empty() {
            candidates = claimed;
        }
    }
    match candidates.as_slice() {
        [] => None,
        [one] => Some((*one).to_owned()),
        _ => {
            let tagged = origin.filter(|origin| candidates.contains(origin));
            let scoped = key.map(|key| (tenant.to_owned(), key.to_owned()));
            let known = scoped.as_ref().and_then(|scoped| keys.sent.get(scoped)).map(String::as_str);
            let keyed = known.filter(|operation| candidates.contains(operation));
            let named = scoped
                .as_ref()
                .and_then(|scoped| keys.named.get(scoped))
                .map(String::as_str)
                .filter(|operation| candidates.contains(operation));
            // A key never seen before is a first request: of an operation that sent none yet.
            let unkeyed = || {
                (key.is_some() && known.is_none())
                    .then(|| {
                        candidates
                            .iter()
                            .copied()
                            .find(|candidate| !keys.sent.values().any(|op| op == candidate))
                    })
                    .flatten()
            };
            Some(keyed.or(named).or(tagged).or_else(unkeyed).unwrap_or(candidates[0]).to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_classified_by_method_and_path() {
        let check = |method: &str, path: &str, expected: RequestClass| {
            assert_eq!(RequestClass::of(method, path), expected, "{method} {path}");
        };
        check("POST", "/v1/tickets", RequestClass::Change(EffectKind::TicketCreated));
        check("patch", "/v1/tickets/ticket_3", RequestClass::Change(EffectKind::TicketStatusChanged));
        check("POST", "/v1/charges", RequestClass::Change(EffectKind::ChargeCreated));
        check("POST", "/v1/messages", RequestClass::Change(EffectKind::MessageSent));
        check("POST", "/v1/jobs", RequestClass::Change(EffectKind::JobAccepted));
        check("GET", "/v1/receipts/k?tenant=acme&service=tickets", RequestClass::ReceiptLookup);
        check("GET", "/v1/receipts/a/key/with/slashes", RequestClass::ReceiptLookup);
        check("GET", "/v1/tickets/ticket_3?tenant=acme", RequestClass::Read);
        check("GET", "/v1/jobs/job_1", RequestClass::Read);
        check("POST", "/__admin/reset", RequestClass::Other);
        check("GET", "/v1/tickets", RequestClass::Other);
    }

    #[test]
    fn every_builtin_tool_has_its_own_effect_kind() {
        assert_eq!(tool_effect_kind("tickets.create"), Some(EffectKind::TicketCreated));
        assert_eq!(tool_effect_kind("tickets.set_status"), Some(EffectKind::TicketStatusChanged));
        assert_eq!(tool_effect_kind("payments.charge"), Some(EffectKind::ChargeCreated));
        assert_eq!(tool_effect_kind("messages.send"), Some(EffectKind::MessageSent));
        assert_eq!(tool_effect_kind("jobs.submit"), Some(EffectKind::JobAccepted));
        assert_eq!(tool_effect_kind("nothing.here"), None);
    }

    #[test]
    fn keys_in_receipt_paths_are_decoded() {
        assert_eq!(percent_decode("acme%3Aproduction%3Arun_1"), "acme:production:run_1");
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("bad%zz"), "bad%zz");
    }
}
