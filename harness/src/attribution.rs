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
//!    same arguments): the operation the sending task was serving (the harness's
//!    `X-Replaylab-Origin` tag), then the operation that already sent that idempotency key,
//!    then the operation whose answers named that key as its operation key; a key never seen
//!    before goes to the first of them that has sent no key yet; else the one called first.
//!    (These ties are the only place an executor's own words count, and they can only move an
//!    effect between operations whose calls were identical.)
//! 3. Requests without business content: a receipt lookup belongs to the operation whose
//!    state-changing request carried that key (tenant and key); a job read to the operation that
//!    submitted the job; anything else (a ticket read, a completion notice, whose content is no
//!    call's) to the operation the sending task was serving.
//!
//! An effect belongs to the operation of the request that made it (the downstream records the
//! harness's request id with it).

use std::collections::BTreeMap;

use fake_downstream::{Effect, EffectKind};
use protocol::{ContractSet, EffectClass, ToolContract};

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
    /// Classifies a request of the fake downstream's API.
    pub fn of(method: &str, path: &str) -> RequestClass {
        let path = path.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let method = method.to_ascii_uppercase();
        match (method.as_str(), segments.as_slice()) {
            ("POST", ["v1", "tickets"]) => RequestClass::Change(EffectKind::TicketCreated),
            ("PATCH", ["v1", "tickets", _]) => RequestClass::Change(EffectKind::TicketStatusChanged),
            ("POST", ["v1", "charges"]) => RequestClass::Change(EffectKind::ChargeCreated),
            ("POST", ["v1", "messages"]) => RequestClass::Change(EffectKind::MessageSent),
            ("POST", ["v1", "jobs"]) => RequestClass::Change(EffectKind::JobAccepted),
            ("GET", ["v1", "receipts", _, ..]) => RequestClass::ReceiptLookup,
            ("GET", ["v1", "tickets" | "jobs", _]) => RequestClass::Read,
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
    ContractSet::builtin().iter().find(|contract| contract.name == tool).and_then(contract_effect_kind)
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
}

/// The operations of a run's downstream requests and effects.
#[derive(Debug, Default)]
pub struct Attribution {
    requests: BTreeMap<String, Attributed>,
    effects: BTreeMap<u64, Option<String>>,
}

impl Attribution {
    /// Attributes every downstream request and effect of `history`.
    pub fn build(history: &[Event]) -> Attribution {
        let mut calls: Vec<CallContent<'_>> = Vec::new();
        let mut attribution = Attribution::default();
        // (tenant, key) -> the operation whose state-changing request carried it first.
        let mut keys: BTreeMap<(String, String), String> = BTreeMap::new();
        // job id -> the operation that submitted it.
        let mut jobs: BTreeMap<String, String> = BTreeMap::new();
        // The effects seen committed, by ledger position.
        let mut effects: BTreeMap<u64, &Effect> = BTreeMap::new();
        // label -> operation, and (tenant, operation key an answer named) -> operation.
        let mut labels: BTreeMap<&str, &str> = BTreeMap::new();
        let mut named: BTreeMap<(String, String), String> = BTreeMap::new();
        for event in history {
            match &event.kind {
                EventKind::CallSent { label, operation, content, .. } => {
                    labels.insert(label, operation);
                    if let Some(content) = content {
                        calls.push(CallContent { operation, content });
                    }
                }
                EventKind::OperationQuery { label, operation, .. } => {
                    labels.insert(label, operation);
                }
                EventKind::Answered { label, outcome, .. } => {
                    if let (Some(operation), Some(key)) = (labels.get(label.as_str()), &outcome.operation_key)
                    {
                        let tenant = operation.split('/').next().unwrap_or_default().to_owned();
                        named.entry((tenant, key.clone())).or_insert_with(|| (*operation).to_owned());
                    }
                }
                EventKind::Effect { effect } => {
                    effects.insert(effect.seq, effect);
                }
                EventKind::DownstreamHandled {
                    request,
                    origin,
                    request_id,
                    tenant,
                    idempotency_key,
                    content,
                    effect_seq,
                    ..
                } => {
                    let (method, path) = request.split_once(' ').unwrap_or((request.as_str(), ""));
                    let class = RequestClass::of(method, path);
                    let tenant = tenant.as_deref().unwrap_or_default();
                    let keys_known = Keys { sent: &keys, named: &named };
                    let by_content = content.as_deref().and_then(|content| {
                        by_content(
                            &calls,
                            content,
                            origin.as_deref(),
                            tenant,
                            idempotency_key.as_deref(),
                            keys_known,
                        )
                    });
                    let operation = match class {
                        RequestClass::Change(_) => by_content.clone().or_else(|| origin.clone()),
                        RequestClass::ReceiptLookup => {
                            let key = percent_decode(path.strip_prefix("/v1/receipts/").unwrap_or_default());
                            keys.get(&(tenant.to_owned(), key)).cloned().or_else(|| origin.clone())
                        }
                        RequestClass::Read if path.starts_with("/v1/jobs/") => {
                            let job = path.rsplit('/').next().unwrap_or_default();
                            jobs.get(job).cloned().or_else(|| origin.clone())
                        }
                        RequestClass::Read | RequestClass::Other => origin.clone(),
                    };
                    if let (Some(operation), Some(key), Some(_)) = (&by_content, idempotency_key, content) {
                        keys.entry((tenant.to_owned(), key.clone())).or_insert_with(|| operation.clone());
                    }
                    if let Some(seq) = effect_seq {
                        attribution.effects.insert(*seq, operation.clone());
                        if let (Some(effect), Some(operation)) = (effects.get(seq), &operation) {
                            if effect.kind == EffectKind::JobAccepted {
                                jobs.entry(effect.effect_reference.clone())
                                    .or_insert_with(|| operation.clone());
                            }
                        }
                    }
                    if let Some(request_id) = request_id {
                        let attributed = Attributed { operation, class, content: content.clone() };
                        attribution.requests.entry(request_id.clone()).or_insert(attributed);
                    }
                }
                _ => {}
            }
        }
        // An effect whose request was never journaled (it cannot happen with the fake
        // downstream, which journals every request it handles) is attributed on its own.
        for (seq, effect) in effects {
            attribution.effects.entry(seq).or_insert_with(|| {
                by_content(
                    &calls,
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

    /// What request `request_id` was and whose, if the downstream saw it.
    pub fn request(&self, request_id: &str) -> Option<&Attributed> {
        self.requests.get(request_id)
    }

    /// The operation effect number `seq` (its ledger position) belongs to.
    pub fn effect(&self, seq: u64) -> Option<&str> {
        self.effects.get(&seq).and_then(|operation| operation.as_deref())
    }
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
            Some(tagged.or(keyed).or(named).or_else(unkeyed).unwrap_or(candidates[0]).to_owned())
        }
    }
}

/// Decodes `%XX` escapes (receipt lookups percent-encode the key in the path).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|byte| (*byte as char).to_digit(16));
        match (bytes[index], hex(index + 1), hex(index + 2)) {
            (b'%', Some(high), Some(low)) => {
                decoded.push((high * 16 + low) as u8);
                index += 3;
            }
            (byte, _, _) => {
                decoded.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
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
