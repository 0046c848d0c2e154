//! HTTP plumbing every dialect shares: a request split into its parts, the checks of headers
//! and bodies, the exchange handed to the core, and turning the core's answer into a response.

use axum::body::{Body, HttpBody};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use wire::{ConnectionControl, Problem, MAX_BODY_BYTES};

use crate::config::Service;
use crate::content::content_digest;
use crate::ledger::{Disposition, EffectKind, RequestRecord, VersionChange};
use crate::service::{push_effect, Answer, Dialect, Downstream, Exchange, NewEffect, Processed, State};

/// Longest tenant, key, id or short text field accepted, in characters.
pub(crate) const MAX_ID_CHARS: usize = 255;

pub(crate) type Ds = AxumState<Downstream>;

/// A route's `{id}` segment, or why axum could not extract it (answered as a problem by the
/// handler: see [`path_problem`]).
pub(crate) type Segment = Result<Path<String>, PathRejection>;

// ------------------------------------------------------------------ input checks

/// A refused request: the problem to answer and what to journal.
pub(crate) struct Refusal {
    pub(crate) problem: Problem,
    pub(crate) disposition: Disposition,
    pub(crate) tenant: Option<String>,
    pub(crate) idempotency_key: Option<String>,
}

impl From<Problem> for Refusal {
    fn from(problem: Problem) -> Self {
        let disposition = if problem.status == 404 { Disposition::NotFound } else { Disposition::Invalid };
        Self { problem, disposition, tenant: None, idempotency_key: None }
    }
}

pub(crate) fn bad_request(kind: &str, detail: impl Into<String>) -> Problem {
    Problem::new(400, kind, detail)
}

pub(crate) fn check_text(field: &str, value: &str, max_chars: usize) -> Result<(), Problem> {
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

pub(crate) fn check_id(field: &str, value: &str) -> Result<(), Problem> {
    check_text(field, value, MAX_ID_CHARS)?;
    if value.chars().any(char::is_control) {
        return Err(bad_request("invalid_request", format!("`{field}` contains control characters")));
    }
    Ok(())
}

/// The harness's `X-Replaylab-Origin` tag (percent-encoded, as the harness sends it), decoded,
/// when it is a sane operation name: four identifiers with `%` and `/` escaped
/// (`protocol::operation_path`). It is transport metadata: a bad one is ignored, never refused.
pub(crate) fn origin(headers: &http::HeaderMap) -> Option<String> {
    const MAX_ORIGIN_CHARS: usize = 4 * 3 * MAX_ID_CHARS + 3;
    let text = wire::percent_decode(headers.get("x-replaylab-origin")?.to_str().ok()?);
    let sane = !text.is_empty()
        && text.chars().count() <= MAX_ORIGIN_CHARS
        && !text.chars().any(|c| c.is_control() || c == char::REPLACEMENT_CHARACTER);
    sane.then_some(text)
}

/// The harness's `X-Replaylab-Request-Id`, when it is a sane identifier (transport metadata,
/// like the origin tag).
pub(crate) fn request_id(headers: &http::HeaderMap) -> Option<String> {
    let text = headers.get("x-replaylab-request-id")?.to_str().ok()?;
    let sane = !text.is_empty() && text.len() <= MAX_ID_CHARS && !text.chars().any(char::is_control);
    sane.then(|| text.to_owned())
}

/// The one value of header `name` (shown as `shown`), if any. A header sent more than once is
/// refused with a `kind` problem: a strict service cannot know which one the client meant.
pub(crate) fn single_header<'a>(
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

pub(crate) fn idempotency_key(headers: &http::HeaderMap) -> Result<Option<String>, Problem> {
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

pub(crate) fn body_too_large(detail: String) -> Problem {
    Problem::new(413, "body_too_large", detail)
}

/// Refuses a body announced (`Content-Length`) longer than [`MAX_BODY_BYTES`] before any of it
/// is read. (hyper has already refused a `Content-Length` that is not a number.)
pub(crate) fn check_length(headers: &http::HeaderMap) -> Result<(), Problem> {
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
pub(crate) fn check_json_body(headers: &http::HeaderMap, body: &Body) -> Result<(), Problem> {
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
pub(crate) async fn read_body(headers: &http::HeaderMap, body: Body) -> Result<bytes::Bytes, Problem> {
    check_length(headers)?;
    read_limited(body).await
}

/// Reads a whole body, refusing it once it is longer than [`MAX_BODY_BYTES`].
pub(crate) async fn read_limited(body: Body) -> Result<bytes::Bytes, Problem> {
    match http_body_util::Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => {
            Err(body_too_large(format!("the body is longer than {MAX_BODY_BYTES} bytes")))
        }
        Err(error) => Err(bad_request("unreadable_body", format!("the body could not be read: {error}"))),
    }
}

pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Problem> {
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
pub(crate) fn path_problem(path: &str, rejection: &PathRejection) -> Problem {
    bad_request("invalid_path", format!("the path {path} does not decode: {}", rejection.body_text()))
}

/// A business request's `{id}` segment, or the refusal to journal.
pub(crate) fn segment(segment: Segment, incoming: &Incoming) -> Result<String, Refusal> {
    segment.map(|Path(id)| id).map_err(|rejection| path_problem(&incoming.path, &rejection).into())
}

pub(crate) fn parse_query<T: DeserializeOwned>(uri: &http::Uri) -> Result<T, Problem> {
    Query::<T>::try_from_uri(uri)
        .map(|Query(query)| query)
        .map_err(|rejection| bad_request("invalid_query", rejection.body_text()))
}

/// The parts every business request starts with.
pub(crate) struct Incoming {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) uri: http::Uri,
    pub(crate) headers: http::HeaderMap,
    pub(crate) control: ConnectionControl,
    pub(crate) body: Body,
}

pub(crate) fn split(request: Request) -> Incoming {
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

// ------------------------------------------------------------------ answering

impl Downstream {
    pub(crate) async fn answer(
        &self,
        incoming: Incoming,
        exchange: Exchange,
        process: impl FnOnce(&mut State, &Exchange, u64) -> Processed,
    ) -> Response {
        let dialect = exchange.dialect;
        match self.handle(exchange, process).await {
            Answer::Json { status, body, replayed } => {
                let content_type = dialect.content_type(status);
                let status =
                    http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
                let mut response =
                    (status, [(http::header::CONTENT_TYPE, content_type)], body.to_string()).into_response();
                if replayed {
                    response
                        .headers_mut()
                        .insert("idempotent-replayed", http::HeaderValue::from_static("true"));
                }
                response
            }
            Answer::RateLimited { status, body, retry_after_s } => {
                let content_type = dialect.content_type(status);
                let status =
                    http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::TOO_MANY_REQUESTS);
                let retry_after = http::HeaderValue::from(retry_after_s);
                (
                    status,
                    [
                        (http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type)),
                        (http::header::RETRY_AFTER, retry_after),
                    ],
                    body.to_string(),
                )
                    .into_response()
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

    pub(crate) fn refuse(&self, incoming: &Incoming, refusal: Refusal) -> Response {
        let Refusal { problem, disposition, tenant, idempotency_key } = refusal;
        self.journal_refused(incoming, disposition, tenant, idempotency_key, problem.status);
        problem.into_response()
    }

    /// Journals a request refused before it reached the core (nothing was decided on it).
    pub(crate) fn journal_refused(
        &self,
        incoming: &Incoming,
        disposition: Disposition,
        tenant: Option<String>,
        idempotency_key: Option<String>,
        status: u16,
    ) {
        self.push_journal(RequestRecord {
            seq: 0,
            at_ms: 0,
            method: incoming.method.clone(),
            path: incoming.path.clone(),
            tenant,
            idempotency_key,
            origin: origin(&incoming.headers),
            request_id: request_id(&incoming.headers),
            content_digest: None,
            disposition,
            effect_seq: None,
            fault_rule: None,
            fault_action: None,
            status: Some(status),
        });
    }
}

/// A read (no key, no digest, no content).
pub(crate) fn read_exchange(
    dialect: &'static dyn Dialect,
    incoming: &Incoming,
    service: Service,
    tenant: &str,
) -> Exchange {
    Exchange {
        dialect,
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
#[allow(clippy::too_many_arguments)]
pub(crate) fn change_exchange(
    dialect: &'static dyn Dialect,
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
        ..read_exchange(dialect, incoming, service, tenant)
    }
}

pub(crate) fn committed(status: u16, body: Value, effect_seq: u64) -> Processed {
    Processed {
        status,
        body,
        disposition: Disposition::Committed,
        effect_seq: Some(effect_seq),
        started_job: None,
    }
}

/// What a request made: the effect's kind, its reference, and for a ticket change the versions.
pub(crate) struct Made<'a> {
    pub(crate) kind: EffectKind,
    pub(crate) reference: &'a str,
    pub(crate) versions: Option<VersionChange>,
}

/// Records the effect `exchange` made and answers `status` with `body` (the committed answer).
pub(crate) fn commit(
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

pub(crate) async fn not_found(AxumState(ds): Ds, request: Request) -> Response {
    let incoming = split(request);
    let problem =
        Problem::new(404, "not_found", format!("no route for {} {}", incoming.method, incoming.path));
    ds.refuse(&incoming, problem.into())
}

pub(crate) async fn method_not_allowed(AxumState(ds): Ds, request: Request) -> Response {
    let incoming = split(request);
    let problem = Problem::new(
        405,
        "method_not_allowed",
        format!("{} is not allowed on {}", incoming.method, incoming.path),
    );
    ds.refuse(&incoming, Refusal { disposition: Disposition::Invalid, ..problem.into() })
}
