//! The HTTP face of the service: business endpoints and `/__admin`.

use axum::body::{Body, HttpBody};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use wire::{ConnectionControl, Problem, MAX_BODY_BYTES};

use crate::config::{DownstreamConfig, Service};
use crate::content::content_digest;
use crate::faults::FaultRule;
use crate::ledger::{Disposition, EffectKind, RequestRecord, VersionChange};
use crate::service::{
    digest_of, push_effect, Answer, Downstream, Exchange, Job, NewEffect, Processed, State, Ticket,
};

/// Longest tenant, key, id or short text field accepted, in characters.
const MAX_ID_CHARS: usize = 255;
/// Ticket statuses a `PATCH` may set.
const TICKET_STATUSES: [&str; 3] = ["open", "pending", "closed"];

impl Downstream {
    /// The service's whole HTTP router: the business API and `/__admin`, on one port, as a
    /// stand-alone fake service is used (like WireMock). Serve it with [`wire::serve`] so that
    /// the connection-level faults (`commit_then_drop`, `reset_before_commit`) can close
    /// connections.
    pub fn router(&self) -> Router {
        thread_local! {
            static ROUTES: Router<Downstream> = business_routes().merge(admin_routes());
        }
        ROUTES.with(|routes| routes.clone().with_state(self.clone()))
    }

    /// The business API alone (`/v1/...`), for the port the executors under test reach: there
    /// `/__admin` answers 404, so an executor can neither read nor erase the evidence (the
    /// ledger, the journal) nor disarm the faults. Whoever judges uses the in-process API.
    pub fn business_router(&self) -> Router {
        // The routes are the same for every instance; a simulation builds one downstream per
        // run, so each thread builds the table once and clones it.
        thread_local! {
            static ROUTES: Router<Downstream> = business_routes();
        }
        ROUTES.with(|routes| routes.clone().with_state(self.clone()))
    }
}

/// The business API's routes, in one place: the router serves exactly these, and a fault
/// rule's path must select one of them (`faults.rs`, through [`business_paths`]).
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

/// The paths the business API serves, in axum's syntax (`{id}` is any one segment).
pub(crate) fn business_paths() -> impl Iterator<Item = &'static str> {
    Route::ALL.into_iter().map(Route::path)
}

fn business_routes() -> Router<Downstream> {
    Route::ALL
        .into_iter()
        .fold(Router::new(), |router, route| router.route(route.path(), route.handlers()))
        // The authorizer executors ask (not a business service: no faults, not journaled;
        // its decisions go to the observer).
        .route("/v1/authz", get(authorize))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

fn admin_routes() -> Router<Downstream> {
    Router::new()
        .route("/__admin/faults", post(admin_install_fault).get(admin_list_faults).delete(admin_clear_faults))
        .route("/__admin/faults/{id}/release", post(admin_release))
        .route("/__admin/ledger", get(admin_ledger))
        .route("/__admin/requests", get(admin_requests))
        .route("/__admin/webhooks", get(admin_webhooks))
        .route("/__admin/reset", post(admin_reset))
        .route("/__admin/tickets/{id}/touch", post(admin_touch))
        .route("/__admin/config", get(admin_get_config).put(admin_put_config))
        .route("/__admin/authz/revoke", post(admin_revoke))
        .method_not_allowed_fallback(admin_method_not_allowed)
}

type Ds = AxumState<Downstream>;

/// A route's `{id}` segment, or why axum could not extract it (answered as a problem by the
/// handler: see [`path_problem`]).
type Segment = Result<Path<String>, PathRejection>;

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

/// `GET /v1/authz?actor=..&tool=..`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthzQuery {
    actor: String,
    tool: String,
}

/// `POST /__admin/authz/revoke`: `tool` absent revokes every tool.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Revocation {
    actor: String,
    #[serde(default)]
    tool: Option<String>,
}

// ------------------------------------------------------------------ input checks

/// A refused request: the problem to answer and what to journal.
struct Refusal {
    problem: Problem,
    disposition: Disposition,
    tenant: Option<String>,
    idempotency_key: Option<String>,
}

impl From<Problem> for Refusal {
    fn from(problem: Problem) -> Self {
        let disposition = if problem.status == 404 { Disposition::NotFound } else { Disposition::Invalid };
        Self { problem, disposition, tenant: None, idempotency_key: None }
    }
}

fn bad_request(kind: &str, detail: impl Into<String>) -> Problem {
    Problem::new(400, kind, detail)
}

fn check_text(field: &str, value: &str, max_chars: usize) -> Result<(), Problem> {
    if value.is_empty() {
        return Err(bad_request("invalid_request", format!("`{field}` must not be empty")));
    }
    if value.chars().count() > max_chars {
        return Err(bad_request(
            "invalid_request",
            format!("`{field}` is longer than {max_chars} characters"),
        ));
    }
    Ok(())
}

fn check_id(field: &str, value: &str) -> Result<(), Problem> {
    check_text(field, value, MAX_ID_CHARS)?;
    if value.chars().any(char::is_control) {
        return Err(bad_request("invalid_request", format!("`{field}` contains control characters")));
    }
    Ok(())
}

/// The harness's `X-Replaylab-Origin` tag (percent-encoded, as the harness sends it), decoded,
/// when it is a sane operation name: four identifiers with `%` and `/` escaped
/// (`protocol::operation_path`). It is transport metadata: a bad one is ignored, never refused.
fn origin(headers: &http::HeaderMap) -> Option<String> {
    const MAX_ORIGIN_CHARS: usize = 4 * 3 * MAX_ID_CHARS + 3;
    let text = wire::percent_decode(headers.get("x-replaylab-origin")?.to_str().ok()?);
    let sane = !text.is_empty()
        && text.chars().count() <= MAX_ORIGIN_CHARS
        && !text.chars().any(|c| c.is_control() || c == char::REPLACEMENT_CHARACTER);
    sane.then_some(text)
}

/// The harness's `X-Replaylab-Request-Id`, when it is a sane identifier (transport metadata,
/// like the origin tag).
fn request_id(headers: &http::HeaderMap) -> Option<String> {
    let text = headers.get("x-replaylab-request-id")?.to_str().ok()?;
    let sane = !text.is_empty() && text.len() <= MAX_ID_CHARS && !text.chars().any(char::is_control);
    sane.then(|| text.to_owned())
}

/// The one value of header `name` (shown as `shown`), if any. A header sent more than once is
/// refused with a `kind` problem: a strict service cannot know which one the client meant.
fn single_header<'a>(
    headers: &'a http::HeaderMap,
    name: &http::HeaderName,
    shown: &str,
    kind: &str,
) -> Result<Option<&'a http::HeaderValue>, Problem> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    match values.count() {
        0 => Ok(first),
        more => {
            Err(bad_request(kind, format!("the {shown} header is sent {} times; send it once", more + 1)))
        }
    }
}

fn idempotency_key(headers: &http::HeaderMap) -> Result<Option<String>, Problem> {
    const IDEMPOTENCY_KEY: http::HeaderName = http::HeaderName::from_static("idempotency-key");
    let value = single_header(headers, &IDEMPOTENCY_KEY, "Idempotency-Key", "invalid_idempotency_key")?;
    let Some(value) = value else { return Ok(None) };
    let invalid = |detail: &str| bad_request("invalid_idempotency_key", detail);
    let text = value.to_str().map_err(|_| invalid("the Idempotency-Key header is not visible ASCII"))?;
    if text.is_empty() {
        return Err(invalid("the Idempotency-Key header is empty"));
    }
    if text.chars().count() > MAX_ID_CHARS {
        return Err(invalid("the Idempotency-Key header is longer than 255 characters"));
    }
    if text.chars().any(char::is_control) {
        return Err(invalid("the Idempotency-Key header contains control characters"));
    }
    Ok(Some(text.to_owned()))
}

fn body_too_large(detail: String) -> Problem {
    Problem::new(413, "body_too_large", detail)
}

/// Refuses a body announced (`Content-Length`) longer than [`MAX_BODY_BYTES`] before any of it
/// is read. (hyper has already refused a `Content-Length` that is not a number.)
fn check_length(headers: &http::HeaderMap) -> Result<(), Problem> {
    let announced = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<u64>().ok());
    match announced {
        Some(length) if length > MAX_BODY_BYTES as u64 => Err(body_too_large(format!(
            "the body is announced as {length} bytes (Content-Length), longer than the {MAX_BODY_BYTES} accepted"
        ))),
        _ => Ok(()),
    }
}

/// Refuses a body whose `Content-Type` is not `application/json` (any parameters, e.g.
/// `charset=utf-8`). A request without a body passes: parsing says what is missing.
fn check_json_body(headers: &http::HeaderMap, body: &Body) -> Result<(), Problem> {
    if body.is_end_stream() {
        return Ok(());
    }
    let declared =
        headers.get(http::header::CONTENT_TYPE).map(|value| String::from_utf8_lossy(value.as_bytes()));
    let essence = declared.as_deref().map(|text| text.split(';').next().unwrap_or_default().trim());
    if essence.is_some_and(|essence| essence.eq_ignore_ascii_case("application/json")) {
        return Ok(());
    }
    let detail = match declared {
        None => "the body has no Content-Type; send it as application/json".to_owned(),
        Some(declared) => format!("the body is sent as {declared:?}; send it as application/json"),
    };
    Err(Problem::new(415, "unsupported_media_type", detail))
}

/// Reads a whole body of at most [`MAX_BODY_BYTES`] (checked first against `Content-Length`,
/// then while reading, for a body sent without one).
async fn read_body(headers: &http::HeaderMap, body: Body) -> Result<bytes::Bytes, Problem> {
    check_length(headers)?;
    read_limited(body).await
}

/// Reads a whole body, refusing it once it is longer than [`MAX_BODY_BYTES`].
async fn read_limited(body: Body) -> Result<bytes::Bytes, Problem> {
    match http_body_util::Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(body_too_large(format!("the body is longer than {MAX_BODY_BYTES} bytes")))
        }
        Err(error) => Err(bad_request("unreadable_body", format!("the body could not be read: {error}"))),
    }
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
    serde_json::from_slice(bytes).map_err(|error| {
        let kind = match error.classify() {
            serde_json::error::Category::Data => "invalid_request",
            _ => "invalid_json",
        };
        bad_request(kind, format!("the body is not a valid request: {error}"))
    })
}

/// The problem for a path whose `{id}` segment axum could not extract (it does not
/// percent-decode to UTF-8 text); axum's own answer would be plain text.
fn path_problem(path: &str, rejection: &PathRejection) -> Problem {
    bad_request("invalid_path", format!("the path {path} does not decode: {}", rejection.body_text()))
}

/// A business request's `{id}` segment, or the refusal to journal.
fn segment(segment: Segment, incoming: &Incoming) -> Result<String, Refusal> {
    segment.map(|Path(id)| id).map_err(|rejection| path_problem(&incoming.path, &rejection).into())
}

fn parse_query<T: DeserializeOwned>(uri: &http::Uri) -> Result<T, Problem> {
    Query::<T>::try_from_uri(uri)
        .map(|Query(query)| query)
        .map_err(|rejection| bad_request("invalid_query", rejection.body_text()))
}

/// The parts every business request starts with.
struct Incoming {
    method: String,
    path: String,
    uri: http::Uri,
    headers: http::HeaderMap,
    control: ConnectionControl,
    body: Body,
}

fn split(request: Request) -> Incoming {
    let (parts, body) = request.into_parts();
    Incoming {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        control: parts.extensions.get::<ConnectionControl>().cloned().unwrap_or_default(),
        uri: parts.uri,
        headers: parts.headers,
        body,
    }
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

// ------------------------------------------------------------------ answering

impl Downstream {
    async fn answer(
        &self,
        incoming: Incoming,
        exchange: Exchange,
        process: impl FnOnce(&mut State, &Exchange, u64) -> Processed,
    ) -> Response {
        match self.handle(exchange, process).await {
            Answer::Json { status, body, replayed } => {
                let status =
                    http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
                let content_type =
                    if status.is_success() { "application/json" } else { "application/problem+json" };
                let mut response =
                    (status, [(http::header::CONTENT_TYPE, content_type)], body.to_string()).into_response();
                if replayed {
                    response
                        .headers_mut()
                        .insert("idempotent-replayed", http::HeaderValue::from_static("true"));
                }
                response
            }
            Answer::Malformed { status, bytes } => {
                let status = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
                (status, [(http::header::CONTENT_TYPE, "application/json")], bytes).into_response()
            }
            Answer::Close => {
                incoming.control.close();
                std::future::pending().await
            }
            Answer::Silence => std::future::pending().await,
        }
    }

    fn refuse(&self, incoming: &Incoming, refusal: Refusal) -> Response {
        self.push_journal(RequestRecord {
            seq: 0,
            at_ms: 0,
            method: incoming.method.clone(),
            path: incoming.path.clone(),
            tenant: refusal.tenant,
            idempotency_key: refusal.idempotency_key,
            origin: origin(&incoming.headers),
            request_id: request_id(&incoming.headers),
            content_digest: None,
            disposition: refusal.disposition,
            effect_seq: None,
            fault_rule: None,
            fault_action: None,
            status: Some(refusal.problem.status),
        });
        refusal.problem.into_response()
    }
}

/// A read (no key, no digest, no content).
fn read_exchange(incoming: &Incoming, service: Service, tenant: &str) -> Exchange {
    Exchange {
        method: incoming.method.clone(),
        path: incoming.path.clone(),
        tenant: tenant.to_owned(),
        idempotency_key: None,
        origin: origin(&incoming.headers),
        request_id: request_id(&incoming.headers),
        service,
        digest: None,
        content: None,
    }
}

/// A request that can change state and was read whole; `kind` is the effect it would make.
fn change_exchange(
    incoming: &Incoming,
    service: Service,
    kind: EffectKind,
    tenant: &str,
    key: Option<String>,
    digest: String,
    fields: &serde_json::Map<String, Value>,
) -> Exchange {
    Exchange {
        idempotency_key: key,
        digest: Some(digest),
        content: Some(content_digest(kind, tenant, fields)),
        ..read_exchange(incoming, service, tenant)
    }
}

fn committed(status: u16, body: Value, effect_seq: u64) -> Processed {
    Processed {
        status,
        body,
        disposition: Disposition::Committed,
        effect_seq: Some(effect_seq),
        started_job: None,
    }
}

/// What a request made: the effect's kind, its reference, and for a ticket change the versions.
struct Made<'a> {
    kind: EffectKind,
    reference: &'a str,
    versions: Option<VersionChange>,
}

/// Records the effect `exchange` made and answers `status` with `body` (the committed answer).
fn commit(
    state: &mut State,
    exchange: &Exchange,
    made: Made<'_>,
    now: u64,
    status: u16,
    body: Value,
) -> Processed {
    let Made { kind, reference, versions } = made;
    let seq = push_effect(
        state,
        NewEffect {
            service: exchange.service,
            kind,
            tenant: &exchange.tenant,
            idempotency_key: exchange.idempotency_key.as_deref(),
            origin: exchange.origin.as_deref(),
            request_id: exchange.request_id.as_deref(),
            effect_reference: reference,
            request_digest: exchange.digest.clone().unwrap_or_default(),
            content_digest: exchange.content.clone().unwrap_or_default(),
            answer: body.clone(),
            versions,
            at_ms: now,
        },
    );
    committed(status, body, seq)
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
    let exchange = read_exchange(&incoming, Service::Tickets, &query.tenant);
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

async fn create_charge(AxumState(ds): Ds, request: Request) -> Response {
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
    let exchange = read_exchange(&incoming, Service::Jobs, &query.tenant);
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
    let exchange = read_exchange(&incoming, service, &query.tenant);
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

async fn not_found(AxumState(ds): Ds, request: Request) -> Response {
    let incoming = split(request);
    let problem =
        Problem::new(404, "not_found", format!("no route for {} {}", incoming.method, incoming.path));
    ds.refuse(&incoming, problem.into())
}

async fn method_not_allowed(AxumState(ds): Ds, request: Request) -> Response {
    let incoming = split(request);
    let problem = Problem::new(
        405,
        "method_not_allowed",
        format!("{} is not allowed on {}", incoming.method, incoming.path),
    );
    ds.refuse(&incoming, Refusal { disposition: Disposition::Invalid, ..problem.into() })
}

// ------------------------------------------------------------------ admin

/// A method an admin route does not serve: a problem, as on the business API, but not
/// journaled (the journal is the business API's evidence).
async fn admin_method_not_allowed(method: http::Method, uri: http::Uri) -> Response {
    Problem::new(405, "method_not_allowed", format!("{method} is not allowed on {}", uri.path()))
        .into_response()
}

fn json_response(status: u16, value: &impl Serialize) -> Response {
    let status = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    let body = serde_json::to_string(value).expect("admin answers serialise");
    (status, [(http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn admin_install_fault(AxumState(ds): Ds, headers: http::HeaderMap, body: Body) -> Response {
    let bytes = match read_body(&headers, body).await {
        Ok(bytes) => bytes,
        Err(problem) => return problem.into_response(),
    };
    match FaultRule::from_json(&bytes) {
        Ok(rule) => json_response(201, &json!({"id": ds.install_fault(rule)})),
        Err(error) => bad_request("invalid_fault_rule", error).into_response(),
    }
}

async fn admin_list_faults(AxumState(ds): Ds) -> Response {
    let rules: Vec<Value> = ds.faults().iter().map(|rule| rule.to_json_value()).collect();
    json_response(200, &rules)
}

async fn admin_clear_faults(AxumState(ds): Ds) -> Response {
    ds.clear_faults();
    http::StatusCode::NO_CONTENT.into_response()
}

async fn admin_release(AxumState(ds): Ds, id: Segment, uri: http::Uri) -> Response {
    let id = match id {
        Ok(Path(id)) => id,
        Err(rejection) => return path_problem(uri.path(), &rejection).into_response(),
    };
    let Ok(id) = id.parse::<u64>() else {
        return bad_request("invalid_request", "the rule id must be a number").into_response();
    };
    match ds.release(id) {
        Ok(held) => json_response(200, &json!({"id": id, "released": held})),
        Err(error) => Problem::new(404, "not_found", error.to_string()).into_response(),
    }
}

async fn admin_ledger(AxumState(ds): Ds) -> Response {
    json_response(200, &ds.ledger())
}

async fn admin_requests(AxumState(ds): Ds) -> Response {
    json_response(200, &ds.requests())
}

async fn admin_webhooks(AxumState(ds): Ds) -> Response {
    json_response(200, &ds.webhook_deliveries())
}

async fn authorize(AxumState(ds): Ds, uri: http::Uri) -> Response {
    let query: AuthzQuery = match parse_query(&uri) {
        Ok(query) => query,
        Err(problem) => return problem.into_response(),
    };
    if query.actor.is_empty() || query.tool.is_empty() {
        return bad_request("invalid_query", "`actor` and `tool` must not be empty").into_response();
    }
    let allowed = ds.authorize(&query.actor, &query.tool);
    json_response(200, &json!({"actor": query.actor, "tool": query.tool, "allowed": allowed}))
}

async fn admin_revoke(AxumState(ds): Ds, headers: http::HeaderMap, body: Body) -> Response {
    let bytes = match read_body(&headers, body).await {
        Ok(bytes) => bytes,
        Err(problem) => return problem.into_response(),
    };
    let revocation: Revocation = match serde_json::from_slice(&bytes) {
        Ok(revocation) => revocation,
        Err(error) => {
            return bad_request("invalid_body", format!("a revocation is {{\"actor\", \"tool\"?}}: {error}"))
                .into_response()
        }
    };
    if revocation.actor.is_empty() {
        return bad_request("invalid_body", "`actor` must not be empty").into_response();
    }
    ds.revoke(&revocation.actor, revocation.tool.as_deref());
    http::StatusCode::NO_CONTENT.into_response()
}

async fn admin_reset(AxumState(ds): Ds) -> Response {
    ds.reset();
    http::StatusCode::NO_CONTENT.into_response()
}

async fn admin_touch(AxumState(ds): Ds, id: Segment, uri: http::Uri) -> Response {
    let id = match id {
        Ok(Path(id)) => id,
        Err(rejection) => return path_problem(uri.path(), &rejection).into_response(),
    };
    match ds.touch_ticket(&id) {
        Ok(version) => json_response(200, &json!({"ticket_id": id, "version": version})),
        Err(error) => Problem::new(404, "not_found", error.to_string()).into_response(),
    }
}

async fn admin_get_config(AxumState(ds): Ds) -> Response {
    json_response(200, &ds.config())
}

async fn admin_put_config(AxumState(ds): Ds, headers: http::HeaderMap, body: Body) -> Response {
    // Deserializing validates the configuration, naming a bad field.
    let config: DownstreamConfig = match read_body(&headers, body).await.and_then(|bytes| parse_json(&bytes))
    {
        Ok(config) => config,
        Err(problem) => return problem.into_response(),
    };
    ds.set_config(config.clone());
    json_response(200, &config)
}
