//! The effect ledger (ground truth) and the request journal.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Service;

/// What kind of business change an effect is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectKind {
    /// A ticket was created.
    TicketCreated,
    /// A ticket's status was changed by an API call.
    TicketStatusChanged,
    /// A person edited a ticket outside the API (`/__admin/tickets/{id}/touch`).
    TicketEditedByHuman,
    /// A card was charged.
    ChargeCreated,
    /// A message was sent.
    MessageSent,
    /// A job was accepted for processing.
    JobAccepted,
    /// A payment was refunded (the Stripe twin's `POST /v1/refunds`).
    RefundCreated,
}

impl EffectKind {
    /// The snake_case name (as serialised): `ticket_created`, `charge_created`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            EffectKind::TicketCreated => "ticket_created",
            EffectKind::TicketStatusChanged => "ticket_status_changed",
            EffectKind::TicketEditedByHuman => "ticket_edited_by_human",
            EffectKind::ChargeCreated => "charge_created",
            EffectKind::MessageSent => "message_sent",
            EffectKind::JobAccepted => "job_accepted",
            EffectKind::RefundCreated => "refund_created",
        }
    }
}

/// One business effect. The ledger is append-only and numbered from 1. A replayed
/// response is not an effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effect {
    /// Position in the ledger, from 1.
    pub seq: u64,
    /// The service that made it.
    pub service: Service,
    /// What happened.
    pub kind: EffectKind,
    /// The tenant it belongs to.
    pub tenant: String,
    /// The `Idempotency-Key` the request carried, if any.
    pub idempotency_key: Option<String>,
    /// The business reference (`ticket_1`, `charge_3`, ...).
    pub effect_reference: String,
    /// `sha256:<hex>` of the canonical (RFC 8785) request: method, path and body.
    pub request_digest: String,
    /// For ticket changes: the ticket version before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<VersionChange>,
    /// The `X-Replaylab-Origin` header of the request that made it: the harness's own tag of
    /// the logical operation a worker was serving, independent of any key the executor chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The `X-Replaylab-Request-Id` header of the request that made it: the harness's name for
    /// that one request, so that an effect is tied to the exact request (and worker) that
    /// produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// `sha256:<hex>` of the request's business content ([`crate::content_digest`]): what
    /// the effect is about, without the body itself. The same business request always has the
    /// same content digest, whatever its key, headers or JSON spelling.
    pub content_digest: String,
    /// The answer the service committed with: the body it produced when it made the effect,
    /// whether or not that answer reached the client.
    pub answer: Value,
    /// When, in milliseconds on the service clock.
    pub at_ms: u64,
}

/// A ticket version transition, with the precondition the request carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionChange {
    /// Version before the change.
    pub from: u64,
    /// Version after the change.
    pub to: u64,
    /// The `If-Match` version the request carried, if any. `None` is an absolute update
    /// without a precondition.
    pub if_match: Option<u64>,
}

/// What the service did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposition {
    /// A new effect was committed (the effect's sequence number is in `effect_seq`).
    Committed,
    /// The first response for this idempotency key was replayed; no effect.
    Replayed,
    /// A read or a receipt lookup was answered.
    Read,
    /// An update found the ticket already in the requested state; no effect.
    Unchanged,
    /// 409: the first request with this key is still being processed.
    KeyInProgress,
    /// 422: the key was used before with a different request.
    KeyReusedWithDifferentRequest,
    /// 412: the `If-Match` version was stale.
    PreconditionFailed,
    /// 400 or 413: the request was malformed.
    Invalid,
    /// 404: the resource or route does not exist (or belongs to another tenant).
    NotFound,
    /// 501: receipt lookup is switched off for the service.
    Unsupported,
    /// A fault rule swallowed the request before commit; it is never answered.
    DroppedBeforeCommit,
    /// A fault rule closed the connection before commit.
    ResetBeforeCommit,
    /// A fault rule refused the request before commit as over the rate limit (`Retry-After`).
    RateLimited,
    /// An admin endpoint.
    Admin,
}

impl Disposition {
    /// The snake_case name (as serialised): `committed`, `key_in_progress`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::Committed => "committed",
            Disposition::Replayed => "replayed",
            Disposition::Read => "read",
            Disposition::Unchanged => "unchanged",
            Disposition::KeyInProgress => "key_in_progress",
            Disposition::KeyReusedWithDifferentRequest => "key_reused_with_different_request",
            Disposition::PreconditionFailed => "precondition_failed",
            Disposition::Invalid => "invalid",
            Disposition::RateLimited => "rate_limited",
            Disposition::NotFound => "not_found",
            Disposition::Unsupported => "unsupported",
            Disposition::DroppedBeforeCommit => "dropped_before_commit",
            Disposition::ResetBeforeCommit => "reset_before_commit",
            Disposition::Admin => "admin",
        }
    }
}

/// One request received, journaled when the service decided what to do with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Position in the journal, from 1.
    pub seq: u64,
    /// When the decision was made, in milliseconds on the service clock.
    pub at_ms: u64,
    /// HTTP method.
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// Tenant named by the request, if it could be read.
    pub tenant: Option<String>,
    /// `Idempotency-Key` header, if valid.
    pub idempotency_key: Option<String>,
    /// `X-Replaylab-Origin` header, if any (see [`Effect::origin`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// `X-Replaylab-Request-Id` header, if any (see [`Effect::request_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// For a business request that could change state and was read whole: the digest of its
    /// business content ([`crate::content_digest`]), whether or not it made an effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_digest: Option<String>,
    /// What was done.
    pub disposition: Disposition,
    /// The ledger entry it created, if any.
    pub effect_seq: Option<u64>,
    /// The fault rule that fired on it, if any.
    pub fault_rule: Option<u64>,
    /// That rule's action name.
    pub fault_action: Option<String>,
    /// The status answered, or `None` when no answer was (or will be) sent.
    pub status: Option<u16>,
}

/// One attempt to deliver a completion webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    /// Position among deliveries, from 1.
    pub seq: u64,
    /// When the attempt ended, in milliseconds on the service clock.
    pub at_ms: u64,
    /// The provider event id the body carried.
    pub event_id: String,
    /// The job it reports.
    pub job_id: String,
    /// 1 for the first attempt of this delivery, then 2, 3 on retries.
    pub attempt: u32,
    /// The status the receiver answered, or `None` when it did not answer.
    pub status: Option<u16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serialised<T: Serialize>(value: T) -> String {
        serde_json::to_value(value).expect("serialises").as_str().expect("a string").to_owned()
    }

    #[test]
    fn the_names_people_read_are_the_serialised_ones() {
        use EffectKind as K;
        let kinds = [
            K::TicketCreated,
            K::TicketStatusChanged,
            K::TicketEditedByHuman,
            K::ChargeCreated,
            K::MessageSent,
            K::JobAccepted,
        ];
        for kind in kinds {
            assert_eq!(kind.as_str(), serialised(kind));
        }
        use Disposition as D;
        let dispositions = [
            D::Committed,
            D::Replayed,
            D::Read,
            D::Unchanged,
            D::KeyInProgress,
            D::KeyReusedWithDifferentRequest,
            D::PreconditionFailed,
            D::Invalid,
            D::NotFound,
            D::Unsupported,
            D::DroppedBeforeCommit,
            D::ResetBeforeCommit,
            D::Admin,
        ];
        for disposition in dispositions {
            assert_eq!(disposition.as_str(), serialised(disposition));
        }
    }
}
