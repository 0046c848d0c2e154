//! The native dialect: replaylab's own ticket, charge, message and job API (`/v1/tickets`,
//! `/v1/charges`, ...: JSON bodies naming a tenant, RFC 9457 problems, receipts by key), one
//! module over the core (`service.rs`).

use axum::extract::{Request, State as AxumState};
use axum::response::Response;
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use wire::{Problem, MAX_BODY_BYTES};

use crate::config::Service;
use crate::content::{content_digest, digest_of};
use crate::http::{
    bad_request, change_exchange, check_id, check_json_body, check_length, check_text, commit,
    idempotency_key, parse_json, parse_query, read_exchange, read_limited, segment, single_header, split, Ds,
    Incoming, Made, Refusal, Segment,
};
use crate::ledger::{Disposition, EffectKind, VersionChange};
use crate::service::{Dialect, Downstream, Job, KeyConflict, Processed, Ticket};

/// Ticket statuses a `PATCH` may set.
const TICKET_STATUSES: [&str; 3] = ["open", "pending", "closed"];

/// The native dialect's routes, in one place: the router serves exactly these, the paths
/// `paths::NATIVE` lists (checked by a test), which a fault rule's path must select.
#[derive(Debug, Clone, Copy)]
enum Route {
    Tickets,
    Ticket,
    Charges,
    Messages,
    Jobs,
    Job,
    Receipt,
}

impl Route {
    const ALL: [Route; 7] = [
        Route::Tickets,
        Route::Ticket,
        Route::Charges,
        Route::Messages,
        Route::Jobs,
        Route::Job,
        Route::Receipt,
    ];

    /// The path, in axum's syntax (`{id}` is any one segment).
    fn path(self) -> &'static str {
        match self {
            Route::Tickets => "/v1/tickets",
            Route::Ticket => "/v1/tickets/{id}",
            Route::Charges => "/v1/charges",
            Route::Messages => "/v1/messages",
            Route::Jobs => "/v1/jobs",
            Route::Job => "/v1/jobs/{id}",
            Route::Receipt => "/v1/receipts/{key}",
        }
    }

    fn handlers(self) -> MethodRouter<Downstream> {
        match self {
            Route::Tickets => post(create_ticket),
            Route::Ticket => get(get_ticket).patch(patch_ticket),
            Route::Charges => post(create_charge),
            Route::Messages => post(create_message),
            Route::Jobs => post(create_job),
            Route::Job => get(get_job),
            Route::Receipt => get(get_receipt),
        }
    }
}

/// The native dialect's routes but `POST /v1/charges`, which it shares with Stripe's
/// (`routes.rs` sends each request there to the dialect it is written in).
pub(crate) fn routes() -> Router<Downstream> {
    Route::ALL
        .into_iter()
        .filter(|route| !matches!(route, Route::Charges))
        .fold(Router::new(), |router, route| router.route(route.path(), route.handlers()))
}

/// The native dialect's idempotency and refusals (docs/downstream.md): keys kept as long as the
/// service lives, a failure frees its key, RFC 9457 problems.
pub(crate) struct Native;

/// The native dialect, as every native request's [`Exchange`] names it.
pub(crate) static NATIVE: Native = Native;

impl Dialect for Native {
    fn name(&self) -> &'static str {
        "native"
    }

    fn key_conflict(&self, conflict: KeyConflict) -> Processed {
        match conflict {
            KeyConflict::InProgress => Processed::problem(
                409,
                Disposition::KeyInProgress,
                "idempotency_key_in_progress",
                "a request with this idempotency key is still being processed",
            ),
            KeyConflict::ReusedWithDifferentRequest => Processed::problem(
                422,
                Disposition::KeyReusedWithDifferentRequest,
                "idempotency_key_reused_with_different_request",
                "this idempotency key was used with a different request",
            ),
        }
    }

    fn injected_error(&self, status: u16) -> Value {
        let problem = wire::Problem::new(status, "injected_error", "the service failed after committing");
        serde_json::to_value(problem).expect("a problem serialises")
    }

    fn keeps_failures(&self) -> bool {
        false
    }

    fn key_retention_ms(&self) -> Option<u64> {
        None
    }

    fn content_type(&self, status: u16) -> &'static str {
        if (200..300).contains(&status) {
            "application/json"
        } else {
            "application/problem+json"
        }
    }
}

/// The content digest of a raw request as the service computes it when it reads one: `None`
/// unless `method path` is a state-changing business request (`POST /v1/tickets`,
/// `PATCH /v1/tickets/{id}`, `POST /v1/charges`, `POST /v1/messages`, `POST /v1/jobs`) whose
/// body is a JSON object naming a tenant. For whoever sees a request before the service does
/// (the harness, pausing a worker around the request that carries a given call).
pub(crate) fn request_content(method: &str, path: &str, body: &[u8]) -> Option<String> {
    let path = path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (kind, ticket) = match (method.to_ascii_uppercase().as_str(), segments.as_slice()) {
        ("POST", ["v1", "tickets"]) => (EffectKind::TicketCreated, None),
        ("PATCH", ["v1", "tickets", id]) => (EffectKind::TicketStatusChanged, Some(*id)),
        ("POST", ["v1", "charges"]) => (EffectKind::ChargeCreated, None),
        ("POST", ["v1", "messages"]) => (EffectKind::MessageSent, None),
        ("POST", ["v1", "jobs"]) => (EffectKind::JobAccepted, None),
        _ => return None,
    };
    let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(body) else { return None };
    let tenant = fields.get("tenant")?.as_str()?.to_owned();
    if let Some(ticket) = ticket {
        fields.insert("ticket_id".into(), Value::String(ticket.to_owned()));
    }
    if kind == EffectKind::JobAccepted {
        // The service reads a job without `input` as one with an empty input.
        fields.entry("input").or_insert_with(|| Value::Object(Map::new()));
    }
    Some(content_digest(kind, &tenant, &fields))
}

// ------------------------------------------------------------------ request bodies

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTicket {
    tenant: String,
    queue: String,
    subject: String,
    body: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchTicket {
    tenant: String,
    status: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateCharge {
    tenant: String,
    customer: String,
    amount_minor: u64,
    currency: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateMessage {
    tenant: String,
    to: String,
    body: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateJob {
    tenant: String,
    job_type: String,
    #[serde(default)]
    input: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantQuery {
    tenant: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiptQuery {
    tenant: String,
    service: String,
}

/// A request read whole: the parsed body, the key, the request digest and the body as JSON.
struct ReadRequest<T> {
    request: T,
    key: Option<String>,
    digest: String,
    fields: serde_json::Map<String, Value>,
}

/// Reads and checks a JSON body: one valid `Idempotency-Key` at most, a `Content-Length`
/// within bounds, a JSON `Content-Type`, then the body itself.
async fn read_request<T: DeserializeOwned + Serialize>(
    incoming: &mut Incoming,
    tenant_of: impl Fn(&T) -> &str,
) -> Result<ReadRequest<T>, Refusal> {
    let key = idempotency_key(&incoming.headers)?;
    let body = std::mem::take(&mut incoming.body);
    let checked = check_length(&incoming.headers).and_then(|()| check_json_body(&incoming.headers, &body));
    let bytes = match checked {
        Ok(()) => read_limited(body).await,
        Err(problem) => Err(problem),
    }
    .map_err(|problem| Refusal { idempotency_key: key.clone(), ..problem.into() })?;
    let request: T =
        parse_json(&bytes).map_err(|problem| Refusal { idempotency_key: key.clone(), ..problem.into() })?;
    let tenant = tenant_of(&request).to_owned();
    check_id("tenant", &tenant)
        .map_err(|problem| Refusal { idempotency_key: key.clone(), ..problem.into() })?;
    let body = serde_json::to_value(&request).expect("a request serialises");
    let digest = digest_of(&json!({
        "method": incoming.method,
        "path": incoming.path,
        "body": body,
    }));
    let fields = match body {
        Value::Object(fields) => fields,
        _ => serde_json::Map::new(),
    };
    Ok(ReadRequest { request, key, digest, fields })
}

// ------------------------------------------------------------------ business endpoints

async fn create_ticket(AxumState(ds): Ds, request: Request) -> Response {
    let mut incoming = split(request);
    let read = match read_request::<CreateTicket>(&mut incoming, |t| &t.tenant).await {
        Ok(read) => read,
        Err(refusal) => return ds.refuse(&incoming, refusal),
    };
    let (ticket, key) = (read.request, read.key);
    let checks = check_id("queue", &ticket.queue)
        .and_then(|()| check_text("subject", &ticket.subject, 1_000))
        .and_then(|()| check_text("body", &ticket.body, MAX_BODY_BYTES));
    if let Err(problem) = checks {
        return ds.refuse(
            &incoming,
            Refusal { tenant: Some(ticket.tenant), idempotency_key: key, ..problem.into() },
        );
    }
    let exchange = change_exchange(
        &NATIVE,
        &incoming,
        Service::Tickets,
        EffectKind::TicketCreated,
        &ticket.tenant,
        key,
        read.digest,
        &read.fields,
    );
    ds.answer(incoming, exchange, move |state, exchange, now| {
        let ticket_id = state.next_reference("ticket");
        state.tickets.insert(
            ticket_id.clone(),
            Ticket {
                ticket_id: ticket_id.clone(),
                tenant: ticket.tenant.clone(),
                queue: ticket.queue,
                subject: ticket.subject,
                status: "open".into(),
                version: 1,
            },
        );
        let body = json!({"ticket_id": ticket_id, "version": 1, "status": "open"});
        commit(
            state,
            exchange,
            Made { kind: EffectKind::TicketCreated, reference: &ticket_id, versions: None },
            now,
            201,
            body,
        )
    })
    .await
}

async fn get_ticket(AxumState(ds): Ds, id: Segment, request: Request) -> Response {
    let incoming = split(request);
    let id = match segment(id, &incoming) {
        Ok(id) => id,
        Err(refusal) => return ds.refuse(&incoming, refusal),
    };
    let query: TenantQuery = match parse_query(&incoming.uri) {
        Ok(query) => query,
        Err(problem) => return ds.refuse(&incoming, problem.into()),
    };
    let exchange = read_exchange(&NATIVE, &incoming, Service::Tickets, &query.tenant);
    ds.answer(incoming, exchange, move |state, exchange, _| match state.tickets.get(&id) {
        Some(ticket) if ticket.tenant == exchange.tenant => {
            Processed::read(200, serde_json::to_value(ticket).expect("a ticket serialises"))
        }
        _ => not_found_problem(&format!("no ticket {id} for this tenant")),
    })
    .await
}

fn not_found_problem(detail: &str) -> Processed {
    Processed::problem(404, Disposition::NotFound, "not_found", detail)
}

async fn patch_ticket(AxumState(ds): Ds, id: Segment, request: Request) -> Response {
    let mut incoming = split(request);
    let id = match segment(id, &incoming) {
        Ok(id) => id,
        Err(refusal) => return ds.refuse(&incoming, refusal),
    };
    let if_match = match parse_if_match(&incoming.headers) {
        Ok(version) => version,
        Err(problem) => return ds.refuse(&incoming, problem.into()),
    };
    let read = match read_request::<PatchTicket>(&mut incoming, |t| &t.tenant).await {
        Ok(read) => read,
        Err(refusal) => return ds.refuse(&incoming, refusal),
    };
    let (patch, key) = (read.request, read.key);
    if !TICKET_STATUSES.contains(&patch.status.as_str()) {
        let problem = bad_request("invalid_request", format!("`status` must be one of {TICKET_STATUSES:?}"));
        return ds.refuse(
            &incoming,
            Refusal { tenant: Some(patch.tenant), idempotency_key: key, ..problem.into() },
        );
    }
    // The precondition is part of the request's identity (not of its business content).
    let digest = digest_of(&json!({"digest": read.digest, "if_match": if_match}));
    let mut fields = read.fields;
    fields.insert("ticket_id".into(), Value::String(id.clone()));
    let exchange = change_exchange(
        &NATIVE,
        &incoming,
        Service::Tickets,
        EffectKind::TicketStatusChanged,
        &patch.tenant,
        key,
        digest,
        &fields,
    );
    ds.answer(incoming, exchange, move |state, exchange, now| {
        let Some(ticket) = state.tickets.get_mut(&id).filter(|ticket| ticket.tenant == exchange.tenant)
        else {
            return not_found_problem(&format!("no ticket {id} for this tenant"));
        };
        if let Some(expected) = if_match {
            if expected != ticket.version {
                return Processed::problem(
                    412,
                    Disposition::PreconditionFailed,
                    "precondition_failed",
                    format!("the ticket is at version {}, not {expected}", ticket.version),
                );
            }
        }
        if ticket.status == patch.status {
            let body = json!({"ticket_id": id, "version": ticket.version, "status": ticket.status});
            return Processed {
                status: 200,
                body,
                disposition: Disposition::Unchanged,
                effect_seq: None,
                started_job: None,
            };
        }
        let from = ticket.version;
        ticket.version += 1;
        ticket.status = patch.status.clone();
        let body = json!({"ticket_id": id, "version": ticket.version, "status": ticket.status});
        let versions = VersionChange { from, to: ticket.version, if_match };
        commit(
            state,
            exchange,
            Made { kind: EffectKind::TicketStatusChanged, reference: &id, versions: Some(versions) },
            now,
            200,
            body,
        )
    })
    .await
}

fn parse_if_match(headers: &http::HeaderMap) -> Result<Option<u64>, Problem> {
    let value = single_header(headers, &http::header::IF_MATCH, "If-Match", "invalid_if_match")?;
    let Some(value) = value else { return Ok(None) };
    let text = value.to_str().unwrap_or_default().trim();
    let text = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(text);
    text.parse::<u64>()
        .map(Some)
        .map_err(|_| bad_request("invalid_if_match", "If-Match must be a ticket version number, e.g. \"3\""))
}

pub(crate) async fn create_charge(AxumState(ds): Ds, request: Request) -> Response {
    let mut incoming = split(request);
    let read = match read_request::<CreateCharge>(&mut incoming, |c| &c.tenant).await {
        Ok(read) => read,
        Err(refusal) => return ds.refuse(&incoming, refusal),
    };
    let (charge, key) = (read.request, read.key);
    let checks = check_id("customer", &charge.customer).and_then(|()| {
        if charge.amount_minor == 0 {
            Err(bad_request("invalid_request", "`amount_minor` must be at least 1"))
        } else if charge.currency.len() != 3 || !charge.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            Err(bad_request("invalid_request", "`currency` must be three upper-case letters, e.g. EUR"))
        } else {
            Ok(())
        }
    });
    if let Err(problem) = checks {
        return ds.refuse(
            &incoming,
            Refusal { tenant: Some(charge.tenant), idempotency_key: key, ..problem.into() },
        );
    }
    let exchange = change_exchange(
        &NATIVE,
        &incoming,
        Service::Charges,
        EffectKind::ChargeCreated,
        &charge.tenant,
        key,
        read.digest,
        &read.fields,
    );
    ds.answer(incoming, exchange, move |state, exchange, now| {
        let charge_id = state.next_reference("charge");
        let body = json!({"charge_id": charge_id, "amount_minor": charge.amount_minor, "currency": charge.currency, "status": "succeeded"});
        commit(state, exchange, Made { kind: EffectKind::ChargeCreated, reference: &charge_id, versions: None }, now, 201, body)
    })
    .await
}

async fn create_message(AxumState(ds): Ds, request: Request) -> Response {
    let mut incoming = split(request);
    let read = match read_request::<CreateMessage>(&mut incoming, |m| &m.tenant).await {
        Ok(read) => read,
        Err(refusal) => return ds.refuse(&incoming, refusal),
    };
    let (message, key) = (read.request, read.key);
    let checks = check_id("to", &message.to).and_then(|()| check_text("body", &message.body, MAX_BODY_BYTES));
    if let Err(problem) = checks {
        return ds.refuse(
            &incoming,
            Refusal { tenant: Some(message.tenant), idempotency_key: key, ..problem.into() },
        );
    }
    let exchange = change_exchange(
        &NATIVE,
        &incoming,
        Service::Messages,
        EffectKind::MessageSent,
        &message.tenant,
        key,
        read.digest,
        &read.fields,
    );
    ds.answer(incoming, exchange, move |state, exchange, now| {
        let message_id = state.next_reference("message");
        let body = json!({"message_id": message_id, "status": "sent"});
        commit(
            state,
            exchange,
            Made { kind: EffectKind::MessageSent, reference: &message_id, versions: None },
            now,
            201,
            body,
        )
    })
    .await
}

async fn create_job(AxumState(ds): Ds, request: Request) -> Response {
    let mut incoming = split(request);
    let read = match read_request::<CreateJob>(&mut incoming, |j| &j.tenant).await {
        Ok(read) => read,
        Err(refusal) => return ds.refuse(&incoming, refusal),
    };
    let (job, key) = (read.request, read.key);
    if let Err(problem) = check_id("job_type", &job.job_type) {
        return ds
            .refuse(&incoming, Refusal { tenant: Some(job.tenant), idempotency_key: key, ..problem.into() });
    }
    let exchange = change_exchange(
        &NATIVE,
        &incoming,
        Service::Jobs,
        EffectKind::JobAccepted,
        &job.tenant,
        key,
        read.digest,
        &read.fields,
    );
    ds.answer(incoming, exchange, move |state, exchange, now| {
        let job_id = state.next_reference("job");
        state.jobs.insert(
            job_id.clone(),
            Job {
                job_id: job_id.clone(),
                tenant: exchange.tenant.clone(),
                idempotency_key: exchange.idempotency_key.clone(),
                status: "pending".into(),
                result: None,
            },
        );
        let body = json!({"job_id": job_id, "status": "pending"});
        Processed {
            started_job: Some(job_id.clone()),
            ..commit(
                state,
                exchange,
                Made { kind: EffectKind::JobAccepted, reference: &job_id, versions: None },
                now,
                202,
                body,
            )
        }
    })
    .await
}

async fn get_job(AxumState(ds): Ds, id: Segment, request: Request) -> Response {
    let incoming = split(request);
    let id = match segment(id, &incoming) {
        Ok(id) => id,
        Err(refusal) => return ds.refuse(&incoming, refusal),
    };
    let query: TenantQuery = match parse_query(&incoming.uri) {
        Ok(query) => query,
        Err(problem) => return ds.refuse(&incoming, problem.into()),
    };
    let exchange = read_exchange(&NATIVE, &incoming, Service::Jobs, &query.tenant);
    ds.answer(incoming, exchange, move |state, exchange, _| match state.jobs.get(&id) {
        Some(job) if job.tenant == exchange.tenant => {
            Processed::read(200, json!({"job_id": job.job_id, "status": job.status, "result": job.result}))
        }
        _ => not_found_problem(&format!("no job {id} for this tenant")),
    })
    .await
}

async fn get_receipt(AxumState(ds): Ds, key: Segment, request: Request) -> Response {
    let incoming = split(request);
    let key = match segment(key, &incoming) {
        Ok(key) => key,
        Err(refusal) => return ds.refuse(&incoming, refusal),
    };
    let query: ReceiptQuery = match parse_query(&incoming.uri) {
        Ok(query) => query,
        Err(problem) => return ds.refuse(&incoming, problem.into()),
    };
    let Some(service) = Service::parse(&query.service) else {
        let problem = bad_request("invalid_query", "`service` must be tickets, charges, messages or jobs");
        return ds.refuse(&incoming, problem.into());
    };
    let exchange = read_exchange(&NATIVE, &incoming, service, &query.tenant);
    ds.answer(incoming, exchange, move |state, exchange, _| {
        if !state.config.service(service).receipts {
            return Processed::problem(
                501,
                Disposition::Unsupported,
                "receipt_lookup_unsupported",
                format!("the {} service has no receipt lookup", service.as_str()),
            );
        }
        let made: Vec<_> = state
            .effects()
            .iter()
            .filter(|e| e.service == service && e.tenant == exchange.tenant && e.idempotency_key.as_deref() == Some(&key))
            .collect();
        let effects: Vec<Value> = made
            .iter()
            .map(|e| json!({"seq": e.seq, "kind": e.kind, "effect_reference": e.effect_reference, "at_ms": e.at_ms}))
            .collect();
        match made.first() {
            None => not_found_problem("no effect was made with this idempotency key"),
            // An authoritative receipt: the first effect, and the answer the downstream
            // committed for it (what a provider's idempotent replay would return).
            Some(first) => Processed::read(
                200,
                json!({
                    "tenant": exchange.tenant,
                    "idempotency_key": key,
                    "service": service,
                    "effect_reference": first.effect_reference,
                    "answer": first.answer,
                    "effects": effects,
                }),
            ),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_routes_are_the_paths_the_table_lists() {
        let served: Vec<&str> = Route::ALL.into_iter().map(Route::path).collect();
        assert_eq!(served, crate::paths::NATIVE);
    }
}
