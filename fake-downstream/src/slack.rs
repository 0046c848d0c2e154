//! The Slack twin: Slack's Web API for messages as the official SDKs use it (`slack_sdk` on
//! PyPI, `@slack/web-api` on npm), one module over the core. Methods under `/api/`, JSON or
//! form bodies (or the query), the tenant from the token (`Authorization: Bearer
//! xoxb-<tenant>`), Slack's errors as `200 {"ok": false, "error": CODE}`, its rate limit
//! (`429 {"ok": false, "error": "ratelimited"}` with `Retry-After`), and **no idempotency key
//! at all**: every `chat.postMessage` posts. A careful client finds out what it posted by
//! reading the channel back (`conversations.history`, with the metadata it tagged its message
//! with). docs/vendors.md says what it serves and where it differs from Slack.
//!
//! Effects in the core's terms: a message is a `message_sent` whose business content is `to` =
//! the channel as given and `body` = the text (message metadata is not content); its reference
//! is the message's `ts`.

use axum::extract::{Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::Router;
use serde_json::{json, Map, Value};

use crate::config::Service;
use crate::content::{content_digest, digest_of};
use crate::http::{check_length, commit, read_exchange, read_limited, split, Ds, Incoming, Made};
use crate::ledger::{Disposition, EffectKind};
use crate::service::{Dialect, Downstream, Exchange, KeyConflict, Owned, Processed, State};

/// The longest text `chat.postMessage` takes, in characters (Slack truncates at 40,000).
const MAX_TEXT_CHARS: usize = 40_000;
/// The longest channel name or id accepted, in characters.
const MAX_CHANNEL_CHARS: usize = 80;
/// `conversations.history`'s `limit`: 1 to 999, default 100.
const MAX_LIMIT: usize = 999;
const DEFAULT_LIMIT: usize = 100;
/// Seconds from the Unix epoch at the simulation's clock's 0 (2026-01-01T00:00:00Z).
const SIMULATION_EPOCH_S: u64 = 1_767_225_600;
/// Where the twin keeps a message in the core's object store: `slack:<channel>:<ts>`.
const KEY_PREFIX: &str = "slack:";

/// The Slack dialect, as every Slack request's [`Exchange`] names it.
pub(crate) static SLACK: Slack = Slack;

/// Slack's errors; it has no idempotency key, so no key conflict ever arises.
pub(crate) struct Slack;

impl Dialect for Slack {
    fn name(&self) -> &'static str {
        "slack"
    }

    fn key_conflict(&self, _conflict: KeyConflict) -> Processed {
        // Never asked: a Slack exchange carries no key.
        refusal("internal_error").processed(Disposition::Invalid)
    }

    fn injected_error(&self, _status: u16) -> Value {
        json!({"ok": false, "error": "internal_error"})
    }

    fn keeps_failures(&self) -> bool {
        false
    }

    fn key_retention_ms(&self) -> Option<u64> {
        None
    }

    fn content_type(&self, _status: u16) -> &'static str {
        "application/json; charset=utf-8"
    }

    fn rate_limited(&self, _retry_after_s: u64) -> (u16, Value) {
        (429, json!({"ok": false, "error": "ratelimited"}))
    }
}

// ------------------------------------------------------------------ errors

/// A Slack error code, answered `200 {"ok": false, "error": CODE}` (the SDKs raise on it).
#[derive(Debug, Clone)]
pub(crate) struct SlackError {
    code: &'static str,
}

fn refusal(code: &'static str) -> SlackError {
    SlackError { code }
}

impl SlackError {
    fn body(&self) -> Value {
        json!({"ok": false, "error": self.code})
    }

    fn processed(&self, disposition: Disposition) -> Processed {
        Processed { status: 200, body: self.body(), disposition, effect_seq: None, started_job: None }
    }

    fn disposition(&self) -> Disposition {
        if self.code == "channel_not_found" || self.code == "unknown_method" {
            Disposition::NotFound
        } else {
            Disposition::Invalid
        }
    }
}

// ------------------------------------------------------------------ the token

/// The tenant a Slack token names: `xoxb-<tenant>` or `xoxp-<tenant>`, after `Bearer` (or as
/// a `token` parameter). `None` without one.
pub(crate) fn tenant_of_token(token: Option<&str>) -> Option<Result<String, SlackError>> {
    let token = token?.trim();
    let token =
        token.strip_prefix("Bearer ").or_else(|| token.strip_prefix("bearer ")).unwrap_or(token).trim();
    let tenant = token.strip_prefix("xoxb-").or_else(|| token.strip_prefix("xoxp-"));
    let valid = tenant.filter(|tenant| {
        (1..=200).contains(&tenant.len())
            && tenant.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    });
    Some(valid.map(str::to_owned).ok_or_else(|| refusal("invalid_auth")))
}

// ------------------------------------------------------------------ routes

/// The twin's routes (`paths::SLACK`), and Slack's answer to any other method under `/api/`
/// (`unknown_method`; a static route wins over the `{method}` segment in axum's router).
pub(crate) fn routes() -> Router<Downstream> {
    Router::new()
        .route("/api/chat.postMessage", post(post_message))
        .route("/api/conversations.history", get(history).post(history))
        .route("/api/auth.test", get(auth_test).post(auth_test))
        .route("/api/{method}", any(unknown_method))
}

/// Any other method: `200 {"ok": false, "error": "unknown_method"}`, whatever the token (Slack
/// answers it before it reads the token), journaled as not found.
async fn unknown_method(AxumState(ds): Ds, request: Request) -> Response {
    let incoming = split(request);
    let header =
        incoming.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let tenant = tenant_of_token(header.as_deref()).and_then(Result::ok);
    refuse(&ds, &incoming, tenant.as_deref(), &refusal("unknown_method"))
}

/// A request read this far: its parts, its tenant and its parameters (the query, then a JSON
/// or form body over it).
struct Read {
    incoming: Incoming,
    tenant: String,
    params: Map<String, Value>,
}

/// Reads a request's parameters and tenant, or answers the refusal (journaled).
async fn read(ds: &Downstream, request: Request) -> Result<Read, Response> {
    let mut incoming = split(request);
    let mut params: Map<String, Value> =
        form_urlencoded::parse(incoming.uri.query().unwrap_or_default().as_bytes())
            .map(|(name, value)| (name.into_owned(), Value::String(value.into_owned())))
            .collect();
    if incoming.method == "POST" {
        let body = std::mem::take(&mut incoming.body);
        let bytes = match check_length(&incoming.headers) {
            Ok(()) => read_limited(body).await,
            Err(problem) => Err(problem),
        };
        let Ok(bytes) = bytes else { return Err(refuse(ds, &incoming, None, &refusal("invalid_arguments"))) };
        let json = incoming
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|text| {
                text.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/json")
            });
        if json {
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(Value::Object(body)) => params.extend(body),
                _ if bytes.iter().all(u8::is_ascii_whitespace) => {}
                _ => return Err(refuse(ds, &incoming, None, &refusal("invalid_json"))),
            }
        } else {
            params.extend(
                form_urlencoded::parse(&bytes)
                    .map(|(name, value)| (name.into_owned(), Value::String(value.into_owned()))),
            );
        }
    }
    let header =
        incoming.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let token = header.or_else(|| params.get("token").and_then(Value::as_str).map(str::to_owned));
    match tenant_of_token(token.as_deref()) {
        Some(Ok(tenant)) => Ok(Read { incoming, tenant, params }),
        Some(Err(error)) => Err(refuse(ds, &incoming, None, &error)),
        None => Err(refuse(ds, &incoming, None, &refusal("not_authed"))),
    }
}

fn refuse(ds: &Downstream, incoming: &Incoming, tenant: Option<&str>, error: &SlackError) -> Response {
    ds.journal_refused(incoming, error.disposition(), tenant.map(str::to_owned), None, 200);
    (
        http::StatusCode::OK,
        [(http::header::CONTENT_TYPE, "application/json; charset=utf-8")],
        error.body().to_string(),
    )
        .into_response()
}

/// A state-changing request's exchange: no key (Slack has none), its request digest, and its
/// business content in the core's terms.
fn change(read: &Read, fields: &Map<String, Value>) -> Exchange {
    let mut params = read.params.clone();
    params.remove("token");
    let digest =
        digest_of(&json!({"method": read.incoming.method, "path": read.incoming.path, "params": params}));
    Exchange {
        digest: Some(digest),
        content: Some(content_digest(EffectKind::MessageSent, &read.tenant, fields)),
        ..read_exchange(&SLACK, &read.incoming, Service::Messages, &read.tenant)
    }
}

// ------------------------------------------------------------------ parameters

/// A text parameter; another type is `invalid_arguments`.
fn text<'a>(params: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, SlackError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(refusal("invalid_arguments")),
    }
}

fn channel(params: &Map<String, Value>) -> Result<String, SlackError> {
    let channel = text(params, "channel")?.unwrap_or_default();
    let valid = !channel.is_empty()
        && channel.chars().count() <= MAX_CHANNEL_CHARS
        && channel.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '#' | '_' | '-' | '.'));
    if valid {
        Ok(channel.to_owned())
    } else {
        Err(refusal("channel_not_found"))
    }
}

/// Message metadata: an object `{event_type, event_payload}`, or that object as JSON text (a
/// form body).
fn metadata(params: &Map<String, Value>) -> Result<Option<Value>, SlackError> {
    let value = match params.get("metadata") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) => {
            serde_json::from_str::<Value>(text).map_err(|_| refusal("invalid_metadata_format"))?
        }
        Some(other) => other.clone(),
    };
    let valid = value.get("event_type").and_then(Value::as_str).is_some_and(|kind| !kind.is_empty())
        && value.get("event_payload").is_some_and(Value::is_object);
    if valid {
        Ok(Some(value))
    } else {
        Err(refusal("invalid_metadata_format"))
    }
}

/// The business content of a message in the core's terms.
fn message_content(channel: &str, text: Option<&str>) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("to".into(), json!(channel));
    fields.insert("body".into(), text.map_or(Value::Null, |text| json!(text)));
    fields
}

fn seconds(now_ms: u64) -> u64 {
    // A real clock reads milliseconds since the Unix epoch; the simulation's starts at 0.
    if now_ms > 1_000_000_000_000 {
        now_ms / 1000
    } else {
        SIMULATION_EPOCH_S + now_ms / 1000
    }
}

/// A message's `ts`: the clock's seconds and a counter, so that every ts is the twin's own.
fn next_ts(state: &mut State, now_ms: u64) -> String {
    let reference = state.next_reference("slack_ts");
    let counter: u64 = reference.rsplit('_').next().and_then(|n| n.parse().ok()).unwrap_or(0);
    format!("{}.{:06}", seconds(now_ms), counter % 1_000_000)
}

// ------------------------------------------------------------------ methods

async fn post_message(AxumState(ds): Ds, request: Request) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = (|| {
        let channel = channel(&read.params)?;
        let text = text(&read.params, "text")?.map(str::to_owned);
        let has_blocks = read.params.get("blocks").is_some_and(|value| !value.is_null())
            || read.params.get("attachments").is_some_and(|value| !value.is_null());
        if text.as_deref().is_none_or(str::is_empty) && !has_blocks {
            return Err(refusal("no_text"));
        }
        if text.as_deref().is_some_and(|text| text.chars().count() > MAX_TEXT_CHARS) {
            return Err(refusal("msg_too_long"));
        }
        let thread = text_param(&read.params, "thread_ts")?;
        Ok((channel, text, thread, metadata(&read.params)?))
    })();
    let (channel, text, thread, metadata) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), &error),
    };
    let exchange = change(&read, &message_content(&channel, text.as_deref()));
    // Blocks and attachments as the message shows them (a form body carries them as JSON text).
    let shown: Vec<(&'static str, Value)> = ["blocks", "attachments"]
        .into_iter()
        .filter_map(|name| match read.params.get(name)? {
            Value::Null => None,
            Value::String(text) => Some((name, serde_json::from_str(text).unwrap_or_else(|_| json!(text)))),
            other => Some((name, other.clone())),
        })
        .collect();
    ds.answer(read.incoming, exchange, move |state, exchange, now| {
        let ts = next_ts(state, now);
        let mut message = json!({
            "type": "message", "user": format!("U_{}", exchange.tenant), "bot_id": format!("B_{}", exchange.tenant),
            "text": text.clone().unwrap_or_default(), "ts": ts, "team": format!("T_{}", exchange.tenant),
        });
        if let Some(thread) = &thread {
            message["thread_ts"] = json!(thread);
        }
        for (name, value) in &shown {
            message[*name] = value.clone();
        }
        if let Some(metadata) = &metadata {
            message["metadata"] = metadata.clone();
        }
        let key = format!("{KEY_PREFIX}{channel}:{ts}");
        let made = state.objects.len() as u64 + 1;
        state.objects.insert(key, Owned { tenant: exchange.tenant.clone(), made, object: message.clone() });
        let body = json!({"ok": true, "channel": channel, "ts": ts, "message": message});
        commit(state, exchange, Made { kind: EffectKind::MessageSent, reference: &ts, versions: None }, now, 200, body)
    })
    .await
}

fn text_param(params: &Map<String, Value>, name: &str) -> Result<Option<String>, SlackError> {
    text(params, name).map(|found| found.map(str::to_owned))
}

/// A number parameter given as a number or as text (`limit=50`).
fn number(params: &Map<String, Value>, name: &str) -> Result<Option<f64>, SlackError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => Ok(number.as_f64()),
        Some(Value::String(text)) if text.is_empty() => Ok(None),
        Some(Value::String(text)) => text.parse::<f64>().map(Some).map_err(|_| refusal("invalid_arguments")),
        Some(_) => Err(refusal("invalid_arguments")),
    }
}

/// A flag given as `true`, `1` or `"true"`.
fn flag(params: &Map<String, Value>, name: &str) -> bool {
    match params.get(name) {
        Some(Value::Bool(value)) => *value,
        Some(Value::Number(number)) => number.as_u64() == Some(1),
        Some(Value::String(text)) => matches!(text.as_str(), "1" | "true" | "True"),
        _ => false,
    }
}

/// `conversations.history`: the tenant's messages in a channel, newest first: `channel`,
/// `limit`, `cursor`, `oldest`, `latest`, `inclusive`, `include_all_metadata`.
async fn history(AxumState(ds): Ds, request: Request) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = (|| {
        let channel = channel(&read.params)?;
        let limit = match number(&read.params, "limit").map_err(|_| refusal("invalid_limit"))? {
            None => DEFAULT_LIMIT,
            Some(limit) if limit.fract() == 0.0 && (1.0..=MAX_LIMIT as f64).contains(&limit) => {
                limit as usize
            }
            Some(_) => return Err(refusal("invalid_limit")),
        };
        let offset = match text(&read.params, "cursor")? {
            None | Some("") => 0,
            Some(cursor) => cursor
                .strip_prefix("offset:")
                .and_then(|offset| offset.parse::<usize>().ok())
                .ok_or_else(|| refusal("invalid_cursor"))?,
        };
        let oldest = number(&read.params, "oldest")?;
        let latest = number(&read.params, "latest")?;
        Ok((channel, limit, offset, oldest, latest))
    })();
    let (channel, limit, offset, oldest, latest) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), &error),
    };
    let inclusive = flag(&read.params, "inclusive");
    let with_metadata = flag(&read.params, "include_all_metadata");
    let exchange = read_exchange(&SLACK, &read.incoming, Service::Messages, &read.tenant);
    ds.answer(read.incoming, exchange, move |state, exchange, _| {
        let prefix = format!("{KEY_PREFIX}{channel}:");
        let within = |ts: f64| {
            let after = oldest.is_none_or(|oldest| if inclusive { ts >= oldest } else { ts > oldest });
            let before = latest.is_none_or(|latest| if inclusive { ts <= latest } else { ts < latest });
            after && before
        };
        let mut found: Vec<&Owned> = state
            .objects
            .range(prefix.clone()..)
            .take_while(|(key, _)| key.starts_with(&prefix))
            .map(|(_, owned)| owned)
            .filter(|owned| owned.tenant == exchange.tenant)
            .filter(|owned| {
                owned.object["ts"].as_str().and_then(|ts| ts.parse::<f64>().ok()).is_some_and(within)
            })
            .collect();
        found.sort_by_key(|owned| std::cmp::Reverse(owned.made));
        let has_more = found.len() > offset + limit;
        let messages: Vec<Value> = found
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|owned| {
                let mut message = owned.object.clone();
                if !with_metadata {
                    if let Some(object) = message.as_object_mut() {
                        object.remove("metadata");
                    }
                }
                message
            })
            .collect();
        let next_cursor = if has_more { format!("offset:{}", offset + limit) } else { String::new() };
        Processed::read(
            200,
            json!({"ok": true, "messages": messages, "has_more": has_more, "pin_count": 0,
                       "response_metadata": {"next_cursor": next_cursor}}),
        )
    })
    .await
}

/// `auth.test`: who the token is.
async fn auth_test(AxumState(ds): Ds, request: Request) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let exchange = read_exchange(&SLACK, &read.incoming, Service::Messages, &read.tenant);
    ds.answer(read.incoming, exchange, move |_, exchange, _| {
        let tenant = &exchange.tenant;
        Processed::read(
            200,
            json!({"ok": true, "url": format!("https://{tenant}.slack.com/"), "team": tenant, "user": "bot",
                   "team_id": format!("T_{tenant}"), "user_id": format!("U_{tenant}"), "bot_id": format!("B_{tenant}"),
                   "is_enterprise_install": false}),
        )
    })
    .await
}

// ------------------------------------------------------------------ facts

/// A raw request's parameters as [`read`] takes them: the query's, then a JSON object body's
/// (one that starts with `{`) or a form body's over them. `None` for a JSON body that is not
/// an object.
fn raw_params(path_and_query: &str, body: &[u8]) -> Option<Map<String, Value>> {
    let query = path_and_query.split_once('?').map(|(_, query)| query).unwrap_or_default();
    let mut params: Map<String, Value> = form_urlencoded::parse(query.as_bytes())
        .map(|(name, value)| (name.into_owned(), Value::String(value.into_owned())))
        .collect();
    if body.trim_ascii_start().starts_with(b"{") || body.trim_ascii_start().starts_with(b"[") {
        match serde_json::from_slice::<Value>(body).ok()? {
            Value::Object(body) => params.extend(body),
            _ => return None,
        }
    } else {
        params.extend(
            form_urlencoded::parse(body)
                .map(|(name, value)| (name.into_owned(), Value::String(value.into_owned()))),
        );
    }
    Some(params)
}

/// The tenant a raw request's token names: the `Authorization` header's, else a `token`
/// parameter's (the query, a JSON or form body).
pub(crate) fn request_tenant(
    path_and_query: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> Option<String> {
    if let Some(tenant) = tenant_of_token(authorization) {
        return tenant.ok();
    }
    let params = raw_params(path_and_query, body)?;
    tenant_of_token(params.get("token").and_then(Value::as_str))?.ok()
}

/// The business content of a Slack request, as the core computes it when it commits one.
pub(crate) fn request_content(
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> Option<String> {
    if !method.eq_ignore_ascii_case("POST") || path.split('?').next() != Some("/api/chat.postMessage") {
        return None;
    }
    let params = raw_params(path, body)?;
    let tenant = request_tenant(path, authorization, body)?;
    let channel = channel(&params).ok()?;
    let text = text(&params, "text").ok()?;
    Some(content_digest(EffectKind::MessageSent, &tenant, &message_content(&channel, text)))
}

/// The references an answer of the twin names: a posted message's `ts`, and those of every
/// message a history shows. Only an `ok: true` answer of Slack's shape names any.
pub(crate) fn references_in_answer(body: &Value) -> Vec<String> {
    if body.get("ok") != Some(&Value::Bool(true)) {
        return Vec::new();
    }
    if let Some(messages) = body.get("messages").and_then(Value::as_array) {
        return messages.iter().filter_map(|message| message["ts"].as_str().map(str::to_owned)).collect();
    }
    match (body.get("ts").and_then(Value::as_str), body.get("channel")) {
        (Some(ts), Some(_)) => vec![ts.to_owned()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_their_tenant() {
        assert_eq!(tenant_of_token(Some("Bearer xoxb-acme")).and_then(Result::ok).as_deref(), Some("acme"));
        assert_eq!(tenant_of_token(Some("xoxp-globex")).and_then(Result::ok).as_deref(), Some("globex"));
        assert!(tenant_of_token(None).is_none());
        for bad in ["Bearer ghp_acme", "Bearer xoxb-", "xoxa-acme", "Bearer xoxb-a b"] {
            let answer = tenant_of_token(Some(bad)).expect("a token");
            assert_eq!(answer.unwrap_err().code, "invalid_auth", "{bad}");
        }
    }

    #[test]
    fn metadata_is_not_content_and_form_and_json_bodies_read_alike() {
        let json_body = br#"{"channel":"C1","text":"Refund approved.","metadata":{"event_type":"op","event_payload":{"operation":"k"}}}"#;
        let with = request_content("POST", "/api/chat.postMessage", Some("Bearer xoxb-acme"), json_body);
        let form = request_content(
            "POST",
            "/api/chat.postMessage",
            None,
            b"token=xoxb-acme&channel=C1&text=Refund+approved.",
        );
        assert!(with.is_some());
        assert_eq!(with, form);
        let native = content_digest(
            EffectKind::MessageSent,
            "acme",
            json!({"to": "C1", "body": "Refund approved."}).as_object().expect("object"),
        );
        assert_eq!(with.as_deref(), Some(native.as_str()));
        let other = request_content(
            "POST",
            "/api/chat.postMessage",
            Some("Bearer xoxb-acme"),
            br#"{"channel":"C2","text":"Refund approved."}"#,
        );
        assert_ne!(with, other);
        assert_eq!(
            request_content("POST", "/api/conversations.history", Some("Bearer xoxb-acme"), b"channel=C1"),
            None
        );
    }

    #[test]
    fn a_token_parameter_names_the_tenant_and_the_query_is_read_as_the_body_is() {
        let tenant =
            |path: &str, authorization: Option<&str>, body: &[u8]| request_tenant(path, authorization, body);
        assert_eq!(
            tenant("/api/chat.postMessage", None, b"token=xoxb-acme&channel=C1").as_deref(),
            Some("acme")
        );
        assert_eq!(tenant("/api/auth.test?token=xoxp-globex", None, b"").as_deref(), Some("globex"));
        assert_eq!(
            tenant("/api/chat.postMessage", None, br#"{"token":"xoxb-initech"}"#).as_deref(),
            Some("initech")
        );
        assert_eq!(
            tenant("/api/chat.postMessage", Some("Bearer xoxb-acme"), b"token=xoxb-globex").as_deref(),
            Some("acme"),
            "the header wins"
        );
        assert_eq!(tenant("/api/chat.postMessage", Some("Bearer ghp_acme"), b""), None);
        assert_eq!(tenant("/api/chat.postMessage", None, b"channel=C1"), None);
        let in_query = request_content(
            "POST",
            "/api/chat.postMessage?channel=C1&text=Hi",
            Some("Bearer xoxb-acme"),
            b"",
        );
        let in_body =
            request_content("POST", "/api/chat.postMessage", Some("Bearer xoxb-acme"), b"channel=C1&text=Hi");
        assert!(in_query.is_some());
        assert_eq!(in_query, in_body);
        assert_eq!(request_content("POST", "/api/chat.postMessage", Some("Bearer xoxb-acme"), b"[1]"), None);
    }

    #[test]
    fn only_slack_answers_name_messages() {
        assert_eq!(
            references_in_answer(&json!({"ok": true, "channel": "C1", "ts": "1.000001"})),
            ["1.000001"]
        );
        assert_eq!(
            references_in_answer(&json!({"ok": true, "messages": [{"ts": "2.000002"}, {"ts": "1.000001"}]})),
            ["2.000002", "1.000001"]
        );
        assert!(references_in_answer(&json!({"ok": false, "error": "channel_not_found"})).is_empty());
        assert!(references_in_answer(&json!({"ticket_id": "ticket_1", "ts": "1"})).is_empty());
    }
}
