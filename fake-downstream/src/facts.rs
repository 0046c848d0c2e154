//! What whoever watches the service from outside reads of a request and its answer, in the
//! core's terms whatever the dialect: the harness's boundaries (a simulated worker's client,
//! a process's port) and the judge. The one place that knows which dialect a request is in.

use serde_json::Value;

use crate::ledger::EffectKind;
use crate::{github, native, slack, stripe};

/// What a request to the service is, in the core's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestEffect {
    /// A state-changing business request that makes an effect of this kind when it commits.
    Change(EffectKind),
    /// The native dialect's `GET /v1/receipts/{key}`: what was made with a key.
    ReceiptLookup,
    /// A read of objects (`GET /v1/tickets/{id}`, Stripe's `GET /v1/payment_intents/{id}`,
    /// its search, ...): a way to find out what exists.
    Read,
    /// Anything else (an unknown route).
    Other,
}

/// Classifies a request by its method and path (a query is ignored).
pub fn request_effect(method: &str, path: &str) -> RequestEffect {
    let path = path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = method.to_ascii_uppercase();
    match (method.as_str(), segments.as_slice()) {
        ("POST", ["v1", "tickets"]) => RequestEffect::Change(EffectKind::TicketCreated),
        ("PATCH", ["v1", "tickets", _]) => RequestEffect::Change(EffectKind::TicketStatusChanged),
        ("POST", ["v1", "charges"]) => RequestEffect::Change(EffectKind::ChargeCreated),
        ("POST", ["v1", "messages"]) => RequestEffect::Change(EffectKind::MessageSent),
        ("POST", ["v1", "jobs"]) => RequestEffect::Change(EffectKind::JobAccepted),
        // Stripe: a payment intent confirmed at creation charges (one that is not makes no
        // effect, and its content is none: nothing is attributed to it).
        ("POST", ["v1", "payment_intents"]) => RequestEffect::Change(EffectKind::ChargeCreated),
        ("POST", ["v1", "refunds"]) => RequestEffect::Change(EffectKind::RefundCreated),
        // GitHub: an issue, a change of its state, a comment.
        ("POST", ["repos", _, _, "issues"]) => RequestEffect::Change(EffectKind::TicketCreated),
        ("PATCH", ["repos", _, _, "issues", _]) => RequestEffect::Change(EffectKind::TicketStatusChanged),
        ("POST", ["repos", _, _, "issues", _, "comments"]) => RequestEffect::Change(EffectKind::MessageSent),
        ("GET", ["repos", _, _, "issues", ..] | ["search", "issues"]) => RequestEffect::Read,
        // Slack: a message; reading a channel back.
        ("POST", ["api", "chat.postMessage"]) => RequestEffect::Change(EffectKind::MessageSent),
        (_, ["api", "conversations.history"]) => RequestEffect::Read,
        ("GET", ["v1", "receipts", _, ..]) => RequestEffect::ReceiptLookup,
        ("GET", ["v1", "tickets" | "jobs" | "payment_intents" | "charges" | "refunds", _]) => {
            RequestEffect::Read
        }
        _ => RequestEffect::Other,
    }
}

/// The business content digest of a raw request, as the service computes it when it reads one
/// ([`crate::content_digest`] over the dialect's fields in the core's terms): `None` unless it
/// is a state-changing business request that names its tenant (the native dialect's body
/// field, Stripe's secret key in `authorization`, the `Authorization` header's value). For
/// whoever sees a request before the service does (the harness, pausing a worker around the
/// request that carries a given call).
pub fn request_content(method: &str, path: &str, authorization: Option<&str>, body: &[u8]) -> Option<String> {
    if stripe::speaks(authorization) {
        stripe::request_content(method, path, authorization, body)
    } else if path.starts_with("/repos/") {
        github::request_content(method, path, authorization, body)
    } else if path.starts_with("/api/") {
        slack::request_content(method, path, authorization, body)
    } else {
        native::request_content(method, path, body)
    }
}

/// The tenant a request names: Stripe's secret key, a Slack token under `/api/` (its header or
/// its `token` parameter), a GitHub token, else a `tenant` body field, else a `tenant=` query
/// parameter of `path_and_query`.
pub fn request_tenant(path_and_query: &str, authorization: Option<&str>, body: &[u8]) -> Option<String> {
    if stripe::speaks(authorization) {
        return stripe::tenant_of_key(authorization).ok();
    }
    if path_and_query.starts_with("/api/") {
        // Slack: the token, in the header or as a `token` parameter.
        return slack::request_tenant(path_and_query, authorization, body);
    }
    if let Some(tenant) = github::tenant_of_token(authorization) {
        return tenant.ok();
    }
    let from_body = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|body| body.get("tenant").and_then(|tenant| tenant.as_str()).map(str::to_owned));
    from_body.or_else(|| {
        let query = path_and_query.split_once('?')?.1;
        query.split('&').find_map(|pair| pair.strip_prefix("tenant=")).map(str::to_owned)
    })
}

/// Effect references an answer with `status` and `body` carries (a 2xx only): the native
/// dialect's `ticket_id`, `charge_id`, `message_id`, `job_id`, `effect_reference`; a Stripe
/// object's `id` (and a payment intent's `latest_charge`).
pub fn answer_references(status: u16, body: &[u8]) -> Vec<String> {
    if !(200..300).contains(&status) {
        return Vec::new();
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else { return Vec::new() };
    if body.is_array() {
        // A GitHub list.
        return github::references_in_answer(&body);
    }
    let mut references: Vec<String> = ["ticket_id", "charge_id", "message_id", "job_id", "effect_reference"]
        .iter()
        .filter_map(|field| body.get(*field).and_then(|value| value.as_str()).map(str::to_owned))
        .collect();
    references.extend(stripe::references_in_answer(&body));
    references.extend(github::references_in_answer(&body));
    references.extend(slack::references_in_answer(&body));
    references
}

/// What a tool map (`replaylab.toml`) needs to know of a dialect to bind a scenario's role to
/// one of its routes: which routes make which effect, and what the dialect does whatever the
/// scenario's `[downstream]` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DialectFacts {
    /// `native`, `stripe`.
    pub name: &'static str,
    /// A vendor's twin: its clients reach it by a base URL and an API key of their own (the
    /// tool map's `[vendor.NAME]`), not by `REPLAYLAB_DOWNSTREAM_URL`.
    pub vendor: bool,
    /// Which idempotency keys it honours, whatever the scenario's `[downstream]` says.
    pub keys: KeyPolicy,
    /// It serves receipt lookups (`GET /v1/receipts/{key}`).
    pub receipts: bool,
    /// How long it keeps a key, when the dialect says so (Stripe: 24 h) rather than the
    /// contract's retention.
    pub key_retention_ms: Option<u64>,
    /// The tenant comes from the client's API key: one tenant per process.
    pub tenant_from_key: bool,
}

/// Which idempotency keys a dialect honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPolicy {
    /// As the scenario's `[downstream]` configures the service (the native dialect).
    AsConfigured,
    /// Every key (Stripe): a scenario's `idempotency = "ignored"` cannot hold.
    Every,
    /// None: the vendor has no idempotency key at all (GitHub, Slack); a scenario's
    /// `idempotency = "honoured"` cannot hold.
    None,
}

/// Every dialect the service speaks, the native one first.
pub const DIALECTS: [DialectFacts; 4] = [
    DialectFacts {
        name: "native",
        vendor: false,
        keys: KeyPolicy::AsConfigured,
        receipts: true,
        key_retention_ms: None,
        tenant_from_key: false,
    },
    DialectFacts {
        name: "stripe",
        vendor: true,
        keys: KeyPolicy::Every,
        receipts: false,
        key_retention_ms: stripe::KEY_RETENTION_MS_FACT,
        tenant_from_key: true,
    },
    DialectFacts {
        name: "github",
        vendor: true,
        keys: KeyPolicy::None,
        receipts: false,
        key_retention_ms: None,
        tenant_from_key: true,
    },
    DialectFacts {
        name: "slack",
        vendor: true,
        keys: KeyPolicy::None,
        receipts: false,
        key_retention_ms: None,
        tenant_from_key: true,
    },
];

/// The dialect named `name`.
pub fn dialect(name: &str) -> Option<DialectFacts> {
    DIALECTS.into_iter().find(|facts| facts.name == name)
}

/// The effect a dialect's route makes when it commits: `None` unless `dialect` serves
/// `method path` and it changes state.
pub fn route_effect(dialect: &str, method: &str, path: &str) -> Option<EffectKind> {
    let served = match dialect {
        "native" => crate::paths::NATIVE.as_slice(),
        "stripe" => crate::paths::STRIPE.as_slice(),
        "github" => crate::paths::GITHUB.as_slice(),
        "slack" => crate::paths::SLACK.as_slice(),
        _ => return None,
    };
    served.contains(&path).then_some(())?;
    match request_effect(method, path) {
        RequestEffect::Change(kind) => Some(kind),
        _ => None,
    }
}

/// The native dialect's route that makes `kind`: what scenarios' fault rules and pause points
/// name, and what a tool map moves to the route it binds the role to.
pub fn native_route(kind: EffectKind) -> Option<(&'static str, &'static str)> {
    match kind {
        EffectKind::TicketCreated => Some(("POST", "/v1/tickets")),
        EffectKind::TicketStatusChanged => Some(("PATCH", "/v1/tickets/{id}")),
        EffectKind::ChargeCreated => Some(("POST", "/v1/charges")),
        EffectKind::MessageSent => Some(("POST", "/v1/messages")),
        EffectKind::JobAccepted => Some(("POST", "/v1/jobs")),
        _ => None,
    }
}
