//! The business content of a request: what an effect is about (the ticket's queue, subject and
//! body; the charge's customer, amount and currency; ...), reduced to a digest.
//!
//! The service records the content digest of every state-changing request it reads whole, and
//! of every effect. Whoever knows what a request was meant to contain (the harness knows each
//! tool call's arguments) computes the same digest with [`content_digest`] and so can tell which
//! call a request or an effect came from, without trusting any key the sender chose and without
//! keeping the body itself.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::ledger::EffectKind;

/// The fields of a request that make up its business content, for a request that makes an
/// effect of `kind`. The tenant is always part of it too.
///
/// | kind | request | fields |
/// |---|---|---|
/// | `ticket_created` | `POST /v1/tickets` | `queue`, `subject`, `body` |
/// | `ticket_status_changed` | `PATCH /v1/tickets/{ticket_id}` | `ticket_id`, `status` |
/// | `charge_created` | `POST /v1/charges` | `customer`, `amount_minor`, `currency` |
/// | `message_sent` | `POST /v1/messages` | `to`, `body` |
/// | `job_accepted` | `POST /v1/jobs` | `job_type`, `input` |
/// | `refund_created` | Stripe's `POST /v1/refunds` | `refunded` (the charge or payment intent), `amount_minor` |
///
/// A status change's `If-Match` precondition is not content: an update that drops it is still
/// the same business request (and the precondition's absence is judged on its own).
pub fn content_fields(kind: EffectKind) -> &'static [&'static str] {
    match kind {
        EffectKind::TicketCreated => &["queue", "subject", "body"],
        EffectKind::TicketStatusChanged => &["ticket_id", "status"],
        EffectKind::ChargeCreated => &["customer", "amount_minor", "currency"],
        EffectKind::MessageSent => &["to", "body"],
        EffectKind::JobAccepted => &["job_type", "input"],
        EffectKind::RefundCreated => &["refunded", "amount_minor"],
        EffectKind::TicketEditedByHuman => &["ticket_id"],
    }
}

/// `sha256:<hex>` of the business content of a request that makes an effect of `kind` for
/// `tenant`: the RFC 8785 form of `{"effect": kind, "tenant": tenant, <field>: value, ...}` over
/// [`content_fields`], a missing field counting as `null`. Other fields in `fields` are ignored.
pub fn content_digest(kind: EffectKind, tenant: &str, fields: &Map<String, Value>) -> String {
    let mut content = Map::new();
    content.insert("effect".into(), serde_json::to_value(kind).expect("an effect kind serialises"));
    content.insert("tenant".into(), Value::String(tenant.to_owned()));
    for field in content_fields(kind) {
        content.insert((*field).to_owned(), fields.get(*field).cloned().unwrap_or(Value::Null));
    }
    digest_of(&Value::Object(content))
}

/// `sha256:<hex>` of the RFC 8785 canonical form of `value`.
pub fn digest_of(value: &Value) -> String {
    let canonical = serde_json_canonicalizer::to_vec(value).expect("a JSON value canonicalises");
    let hash = Sha256::digest(&canonical);
    let mut text = String::with_capacity(7 + 64);
    text.push_str("sha256:");
    for byte in hash {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn the_same_business_request_has_the_same_digest_whatever_else_it_carries() {
        let one = content_digest(
            EffectKind::ChargeCreated,
            "acme",
            &fields(json!({"customer": "c", "amount_minor": 5, "currency": "EUR"})),
        );
        let reordered_with_extra = content_digest(
            EffectKind::ChargeCreated,
            "acme",
            &fields(json!({"trace_id": "t", "currency": "EUR", "amount_minor": 5, "customer": "c"})),
        );
        assert_eq!(one, reordered_with_extra);
    }

    #[test]
    fn a_raw_request_has_the_content_the_service_computes() {
        let job = crate::native::request_content(
            "POST",
            "/v1/jobs",
            br#"{"tenant": "acme", "job_type": "report"}"#,
        );
        let expected = content_digest(
            EffectKind::JobAccepted,
            "acme",
            &fields(json!({"job_type": "report", "input": {}})),
        );
        assert_eq!(job.as_deref(), Some(expected.as_str()));
        let patch = crate::native::request_content(
            "PATCH",
            "/v1/tickets/ticket_3",
            br#"{"tenant": "acme", "status": "closed"}"#,
        );
        let expected = content_digest(
            EffectKind::TicketStatusChanged,
            "acme",
            &fields(json!({"ticket_id": "ticket_3", "status": "closed"})),
        );
        assert_eq!(patch.as_deref(), Some(expected.as_str()));
        assert_eq!(crate::native::request_content("GET", "/v1/tickets/ticket_3", b"{}"), None);
        assert_eq!(crate::native::request_content("POST", "/v1/tickets", b"not json"), None);
        assert_eq!(
            crate::native::request_content("POST", "/v1/tickets", br#"{"queue": "q"}"#),
            None,
            "no tenant"
        );
    }

    #[test]
    fn any_business_field_tenant_or_kind_changes_the_digest() {
        let base = json!({"customer": "c", "amount_minor": 5, "currency": "EUR"});
        let digest = |kind, tenant: &str, value: &Value| content_digest(kind, tenant, &fields(value.clone()));
        let original = digest(EffectKind::ChargeCreated, "acme", &base);
        for (field, other) in
            [("customer", json!("d")), ("amount_minor", json!(6)), ("currency", json!("USD"))]
        {
            let mut changed = base.clone();
            changed[field] = other;
            assert_ne!(digest(EffectKind::ChargeCreated, "acme", &changed), original, "{field}");
        }
        assert_ne!(digest(EffectKind::ChargeCreated, "globex", &base), original);
        assert_ne!(digest(EffectKind::MessageSent, "acme", &base), original);
    }
}
