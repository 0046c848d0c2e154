//! The Stripe twin: Stripe's API as the official SDKs use it (`stripe` on PyPI and npm), one
//! module over the core. Form bodies with nested keys (`metadata[order]=1182`), the tenant
//! from the secret key (`Authorization: Bearer sk_test_<tenant>`), ids `pi_`, `ch_`, `re_`,
//! Stripe's error envelope with the statuses the SDKs map to their typed exceptions, and
//! Stripe's idempotency (replay with `Idempotent-Replayed: true`, 400 `idempotency_error` on
//! other parameters, 409 while in flight, every answer of a request that began executing
//! kept, 24 hours). docs/vendors.md says what it serves and where it differs from Stripe.
//!
//! Effects in the core's terms: a confirmed payment intent or a charge is a `charge_created`
//! (its business content `customer`, `amount_minor`, upper-case `currency`, as the native
//! dialect's), a refund a `refund_created`.

use axum::extract::{Path, Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Map, Value};

use crate::config::Service;
use crate::content::{content_digest, digest_of};
use crate::http::{
    check_length, commit, idempotency_key, not_found, read_exchange, read_limited, split, Ds, Incoming, Made,
};
use crate::ledger::{Disposition, EffectKind};
use crate::service::{Dialect, Downstream, Exchange, KeyConflict, Owned, Processed, State};

/// How long Stripe keeps an idempotency key: 24 hours from its first answer.
const KEY_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;
/// The key retention as `facts::DIALECTS` states it.
pub(crate) const KEY_RETENTION_MS_FACT: Option<u64> = Some(KEY_RETENTION_MS);
/// The most metadata keys an object may have (Stripe's limit).
const MAX_METADATA_KEYS: usize = 50;
/// The longest metadata key and value, in characters (Stripe's limits).
const MAX_METADATA_KEY_CHARS: usize = 40;
const MAX_METADATA_VALUE_CHARS: usize = 500;
/// The longest text parameter accepted, in characters.
const MAX_TEXT_CHARS: usize = 5_000;
/// The most search results one page holds (Stripe's `limit` range is 1 to 100, default 10).
const MAX_SEARCH_LIMIT: usize = 100;
const DEFAULT_SEARCH_LIMIT: usize = 10;
/// `created` in the simulation, whose clock starts at 0: seconds from 2026-01-01T00:00:00Z.
const SIMULATION_EPOCH_S: u64 = 1_767_225_600;
/// Payment methods and card tokens that Stripe's test mode declines.
const DECLINED: [&str; 3] = ["pm_card_chargeDeclined", "pm_card_visa_chargeDeclined", "tok_chargeDeclined"];

/// The Stripe dialect, as every Stripe request's [`Exchange`] names it.
pub(crate) static STRIPE: Stripe = Stripe;

/// Stripe's idempotency and error envelope.
pub(crate) struct Stripe;

impl Dialect for Stripe {
    fn name(&self) -> &'static str {
        "stripe"
    }

    fn key_conflict(&self, conflict: KeyConflict) -> Processed {
        let (error, disposition) = match conflict {
            KeyConflict::InProgress => (
                StripeError::new(
                    409,
                    "invalid_request_error",
                    "There is currently another in-progress request using this Idempotent Key (that probably \
                     means you submitted twice, and the other request is still going through). Please try again later.",
                )
                .code("idempotency_key_in_use"),
                Disposition::KeyInProgress,
            ),
            KeyConflict::ReusedWithDifferentRequest => (
                StripeError::new(
                    400,
                    "idempotency_error",
                    "Keys for idempotent requests can only be used with the same parameters they were first used \
                     with. Try using a key other than this one if you meant to execute a different request.",
                ),
                Disposition::KeyReusedWithDifferentRequest,
            ),
        };
        error.processed(disposition)
    }

    fn injected_error(&self, status: u16) -> Value {
        StripeError::new(status, "api_error", "An unknown error occurred (injected after the commit).").body()
    }

    fn keeps_failures(&self) -> bool {
        true
    }

    fn key_retention_ms(&self) -> Option<u64> {
        Some(KEY_RETENTION_MS)
    }

    fn content_type(&self, _status: u16) -> &'static str {
        "application/json"
    }

    fn rate_limited(&self, _retry_after_s: u64) -> (u16, Value) {
        let error = StripeError::new(
            429,
            "invalid_request_error",
            "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
        )
        .code("rate_limit");
        (429, error.body())
    }
}

/// Whether a request is written in Stripe's dialect: it carries a Stripe secret key.
pub(crate) fn speaks(authorization: Option<&str>) -> bool {
    authorization.is_some_and(|value| bearer(value).is_some_and(|key| key.starts_with("sk_")))
}

fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// The tenant a secret key names: `sk_test_<tenant>`.
pub(crate) fn tenant_of_key(authorization: Option<&str>) -> Result<String, StripeError> {
    let missing = || {
        StripeError::new(
            401,
            "invalid_request_error",
            "You did not provide an API key. Send it as `Authorization: Bearer sk_test_<tenant>`.",
        )
    };
    let key = bearer(authorization.ok_or_else(missing)?).ok_or_else(missing)?;
    let invalid = |why: &str| {
        StripeError::new(
            401,
            "invalid_request_error",
            format!("Invalid API Key provided: {}; {why}", masked(key)),
        )
    };
    if key.starts_with("sk_live_") {
        return Err(invalid("the twin serves test mode only (sk_test_<tenant>)"));
    }
    let tenant = key.strip_prefix("sk_test_").ok_or_else(|| invalid("a key is sk_test_<tenant>"))?;
    let sane = !tenant.is_empty()
        && tenant.len() <= 200
        && tenant.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !sane {
        return Err(invalid("the tenant after sk_test_ is 1 to 200 letters, digits, `_` or `-`"));
    }
    Ok(tenant.to_owned())
}

/// A key as Stripe shows it in an error: its start and its last four characters.
fn masked(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 12 {
        return "****".into();
    }
    let start: String = chars[..8].iter().collect();
    let end: String = chars[chars.len() - 4..].iter().collect();
    format!("{start}****{end}")
}

// ------------------------------------------------------------------ errors

/// Stripe's error envelope: `{"error": {"type", "code", "message", "param", ...}}`.
#[derive(Debug, Clone)]
pub(crate) struct StripeError {
    status: u16,
    kind: &'static str,
    code: Option<&'static str>,
    message: String,
    param: Option<String>,
    extra: Map<String, Value>,
}

impl StripeError {
    fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, kind, code: None, message: message.into(), param: None, extra: Map::new() }
    }

    fn invalid(code: &'static str, param: &str, message: impl Into<String>) -> Self {
        Self {
            code: Some(code),
            param: Some(param.to_owned()),
            ..Self::new(400, "invalid_request_error", message)
        }
    }

    fn missing(param: &str) -> Self {
        Self::invalid("parameter_missing", param, format!("Missing required param: {param}."))
    }

    fn no_such(object: &str, id: &str, param: &str, status: u16) -> Self {
        Self { status, ..Self::invalid("resource_missing", param, format!("No such {object}: '{id}'")) }
    }

    fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    fn body(&self) -> Value {
        let mut error = Map::new();
        error.insert("type".into(), Value::String(self.kind.to_owned()));
        if let Some(code) = self.code {
            error.insert("code".into(), Value::String(code.to_owned()));
        }
        error.insert("message".into(), Value::String(self.message.clone()));
        if let Some(param) = &self.param {
            error.insert("param".into(), Value::String(param.clone()));
        }
        error.extend(self.extra.clone());
        json!({ "error": error })
    }

    fn processed(&self, disposition: Disposition) -> Processed {
        Processed { status: self.status, body: self.body(), disposition, effect_seq: None, started_job: None }
    }

    fn disposition(&self) -> Disposition {
        if self.status == 404 {
            Disposition::NotFound
        } else {
            Disposition::Invalid
        }
    }
}

// ------------------------------------------------------------------ routes

/// The twin's routes but `POST /v1/charges`, which it shares with the native dialect
/// (`routes.rs` sends a request with a Stripe key here, [`create_charge`]).
pub(crate) fn routes() -> Router<Downstream> {
    Router::new()
        .route("/v1/payment_intents", post(create_payment_intent))
        .route("/v1/payment_intents/search", get(search_payment_intents))
        .route("/v1/payment_intents/{id}", get(get_payment_intent))
        .route("/v1/charges/{id}", get(get_charge))
        .route("/v1/refunds", post(create_refund))
        .route("/v1/refunds/{id}", get(get_refund))
}

/// A request read this far: its parts, its tenant, its key, its parameters.
struct Read {
    incoming: Incoming,
    tenant: String,
    key: Option<String>,
    params: Map<String, Value>,
}

fn authorization(incoming: &Incoming) -> Option<String> {
    incoming.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Reads a request's tenant, key and parameters (a form body for a POST, the query for a GET),
/// or answers the refusal (journaled; never kept under a key: it did not begin executing).
/// A request without a Stripe secret key is not the twin's: it gets the native dialect's "no
/// route" (so a native client sees the native API alone).
async fn read(ds: &Downstream, request: Request) -> Result<Read, Response> {
    let key = request.headers().get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if !speaks(key) {
        return Err(not_found(AxumState(ds.clone()), request).await);
    }
    let mut incoming = split(request);
    let authorization = authorization(&incoming);
    let tenant = match tenant_of_key(authorization.as_deref()) {
        Ok(tenant) => tenant,
        Err(error) => return Err(refuse(ds, &incoming, None, None, &error)),
    };
    let key = if incoming.method == "POST" {
        match idempotency_key(&incoming.headers) {
            Ok(key) => key,
            Err(problem) => {
                let error = StripeError::new(400, "invalid_request_error", problem.detail.clone());
                return Err(refuse(ds, &incoming, Some(&tenant), None, &error));
            }
        }
    } else {
        None
    };
    let raw = if incoming.method == "POST" {
        let body = std::mem::take(&mut incoming.body);
        let form = is_form(&incoming.headers);
        let read = match check_length(&incoming.headers) {
            Ok(()) => read_limited(body).await,
            Err(problem) => Err(problem),
        };
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(problem) => {
                let error = StripeError::new(problem.status, "invalid_request_error", problem.detail.clone());
                return Err(refuse(ds, &incoming, Some(&tenant), key.as_deref(), &error));
            }
        };
        if !bytes.is_empty() && !form {
            let error = StripeError::new(
                400,
                "invalid_request_error",
                "Invalid request: send the parameters form-encoded (application/x-www-form-urlencoded), as Stripe's v1 API takes them.",
            );
            return Err(refuse(ds, &incoming, Some(&tenant), key.as_deref(), &error));
        }
        bytes.to_vec()
    } else {
        incoming.uri.query().unwrap_or_default().as_bytes().to_vec()
    };
    match parse_form(&raw) {
        Ok(params) => Ok(Read { incoming, tenant, key, params }),
        Err(error) => Err(refuse(ds, &incoming, Some(&tenant), key.as_deref(), &error)),
    }
}

fn is_form(headers: &http::HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"))
}

fn refuse(
    ds: &Downstream,
    incoming: &Incoming,
    tenant: Option<&str>,
    key: Option<&str>,
    error: &StripeError,
) -> Response {
    ds.journal_refused(
        incoming,
        error.disposition(),
        tenant.map(str::to_owned),
        key.map(str::to_owned),
        error.status,
    );
    respond(ds, error.status, &error.body())
}

/// A JSON answer with Stripe's `Request-Id` header.
fn respond(ds: &Downstream, status: u16, body: &Value) -> Response {
    let status = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut response =
        (status, [(http::header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
    with_request_id(ds, &mut response);
    response
}

fn with_request_id(ds: &Downstream, response: &mut Response) {
    let id = ds.lock().next_reference("req");
    if let Ok(value) = http::HeaderValue::from_str(&id) {
        response.headers_mut().insert("request-id", value);
    }
}

/// Runs `exchange` through the core and adds Stripe's `Request-Id` to the answer.
async fn run(
    ds: Downstream,
    incoming: Incoming,
    exchange: Exchange,
    process: impl FnOnce(&mut State, &Exchange, u64) -> Processed,
) -> Response {
    let mut response = ds.answer(incoming, exchange, process).await;
    with_request_id(&ds, &mut response);
    response
}

/// A state-changing request's exchange: its request digest over the decoded parameters, and its
/// business content in the core's terms when it makes an effect of `kind`.
fn change(read: &Read, kind: Option<(EffectKind, Map<String, Value>)>) -> Exchange {
    let digest = digest_of(&json!({
        "method": read.incoming.method,
        "path": read.incoming.path,
        "params": read.params,
    }));
    Exchange {
        idempotency_key: read.key.clone(),
        digest: Some(digest),
        content: kind.map(|(kind, fields)| content_digest(kind, &read.tenant, &fields)),
        ..read_exchange(&STRIPE, &read.incoming, Service::Charges, &read.tenant)
    }
}

// ------------------------------------------------------------------ parameters

/// A parameter's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Integer,
    Boolean,
    Text,
    /// `metadata[k]=v`.
    Metadata,
    /// `x[k]=v`, any keys.
    Hash,
    /// `x[]=v`.
    List,
}

const PAYMENT_INTENT_PARAMS: [(&str, Form); 15] = [
    ("amount", Form::Integer),
    ("currency", Form::Text),
    ("customer", Form::Text),
    ("payment_method", Form::Text),
    ("confirm", Form::Boolean),
    ("metadata", Form::Metadata),
    ("description", Form::Text),
    ("automatic_payment_methods", Form::Hash),
    ("payment_method_types", Form::List),
    ("capture_method", Form::Text),
    ("receipt_email", Form::Text),
    ("statement_descriptor", Form::Text),
    ("return_url", Form::Text),
    ("off_session", Form::Boolean),
    ("expand", Form::List),
];

const CHARGE_PARAMS: [(&str, Form); 9] = [
    ("amount", Form::Integer),
    ("currency", Form::Text),
    ("customer", Form::Text),
    ("source", Form::Text),
    ("description", Form::Text),
    ("metadata", Form::Metadata),
    ("capture", Form::Boolean),
    ("receipt_email", Form::Text),
    ("expand", Form::List),
];

const REFUND_PARAMS: [(&str, Form); 6] = [
    ("payment_intent", Form::Text),
    ("charge", Form::Text),
    ("amount", Form::Integer),
    ("reason", Form::Text),
    ("metadata", Form::Metadata),
    ("expand", Form::List),
];

const SEARCH_PARAMS: [(&str, Form); 3] =
    [("query", Form::Text), ("limit", Form::Integer), ("expand", Form::List)];

const RETRIEVE_PARAMS: [(&str, Form); 1] = [("expand", Form::List)];

/// Decodes a form (`a=1&metadata[order]=1182&expand[]=x`) into nested JSON: strings, objects
/// for `x[k]`, arrays for `x[]` and `x[0]`.
fn parse_form(raw: &[u8]) -> Result<Map<String, Value>, StripeError> {
    let mut params = Map::new();
    for (name, value) in form_urlencoded::parse(raw) {
        let (root, path) = split_name(&name).ok_or_else(|| {
            StripeError::invalid("parameter_unknown", &name, format!("Invalid parameter name: {name}"))
        })?;
        insert(&mut params, root, &path, value.into_owned()).map_err(|why| {
            StripeError::invalid("parameter_invalid_empty", root, format!("Invalid {root}: {why}"))
        })?;
    }
    Ok(params)
}

/// `metadata[order]` -> (`metadata`, [`order`]); `expand[]` -> (`expand`, [``]).
fn split_name(name: &str) -> Option<(&str, Vec<&str>)> {
    let Some(open) = name.find('[') else { return (!name.is_empty()).then(|| (name, Vec::new())) };
    let root = &name[..open];
    let mut rest = &name[open..];
    let mut path = Vec::new();
    while !rest.is_empty() {
        let inner = rest.strip_prefix('[')?;
        let close = inner.find(']')?;
        path.push(&inner[..close]);
        rest = &inner[close + 1..];
    }
    (!root.is_empty()).then_some((root, path))
}

fn insert(map: &mut Map<String, Value>, name: &str, path: &[&str], value: String) -> Result<(), String> {
    let Some((first, rest)) = path.split_first() else {
        map.insert(name.to_owned(), Value::String(value));
        return Ok(());
    };
    let is_index = first.is_empty() || first.parse::<usize>().is_ok();
    let entry = map.entry(name.to_owned()).or_insert_with(|| {
        if is_index {
            Value::Array(Vec::new())
        } else {
            Value::Object(Map::new())
        }
    });
    match entry {
        Value::Array(items) if is_index && rest.is_empty() => {
            match first.parse::<usize>() {
                Ok(index) if index < items.len() => items[index] = Value::String(value),
                Ok(index) if index == items.len() => items.push(Value::String(value)),
                Ok(index) => return Err(format!("index {index} skips {} entries", index - items.len())),
                Err(_) => items.push(Value::String(value)),
            }
            Ok(())
        }
        Value::Object(inner) if !is_index => insert(inner, first, rest, value),
        _ => Err("a parameter given both as a list and as a hash, or a list of hashes (not served)".into()),
    }
}

/// Checks the parameters against `allowed`: each known and of its form.
fn check_params(params: &Map<String, Value>, allowed: &[(&str, Form)]) -> Result<(), StripeError> {
    for (name, value) in params {
        let Some((_, form)) = allowed.iter().find(|(known, _)| known == name) else {
            return Err(StripeError::invalid(
                "parameter_unknown",
                name,
                format!("Received unknown parameter: {name}"),
            ));
        };
        let bad = |code: &'static str, what: String| Err(StripeError::invalid(code, name, what));
        match (form, value) {
            (Form::Integer, Value::String(text)) if text.parse::<i64>().is_err() => {
                return bad("parameter_invalid_integer", format!("Invalid integer: {text}"));
            }
            (Form::Boolean, Value::String(text)) if text != "true" && text != "false" => {
                return bad("parameter_invalid_boolean", format!("Invalid boolean: {text}"));
            }
            (Form::Text, Value::String(text)) if text.chars().count() > MAX_TEXT_CHARS => {
                return bad(
                    "parameter_invalid_string",
                    format!("{name} is longer than {MAX_TEXT_CHARS} characters"),
                );
            }
            (Form::Integer | Form::Boolean | Form::Text, Value::String(_)) => {}
            (Form::Metadata, Value::Object(entries)) => check_metadata(name, entries)?,
            (Form::Hash, Value::Object(_)) | (Form::List, Value::Array(_)) => {}
            (Form::Metadata | Form::Hash, _) => {
                return bad(
                    "parameter_invalid_empty",
                    format!("Invalid object: {name} is a hash ({name}[key]=value)"),
                );
            }
            (Form::List, _) => {
                return bad(
                    "parameter_invalid_empty",
                    format!("Invalid array: {name} is a list ({name}[]=value)"),
                )
            }
            _ => return bad("parameter_invalid_string", format!("Invalid string: {name} is one value")),
        }
    }
    Ok(())
}

fn check_metadata(name: &str, entries: &Map<String, Value>) -> Result<(), StripeError> {
    if entries.len() > MAX_METADATA_KEYS {
        return Err(StripeError::invalid(
            "parameter_invalid_empty",
            name,
            format!("Invalid {name}: at most {MAX_METADATA_KEYS} keys"),
        ));
    }
    for (key, value) in entries {
        let Value::String(value) = value else {
            return Err(StripeError::invalid(
                "parameter_invalid_string",
                name,
                format!("Invalid {name}[{key}]: a value is text"),
            ));
        };
        if key.chars().count() > MAX_METADATA_KEY_CHARS || value.chars().count() > MAX_METADATA_VALUE_CHARS {
            return Err(StripeError::invalid(
                "parameter_invalid_string",
                name,
                format!("Invalid {name}[{key}]: keys are at most {MAX_METADATA_KEY_CHARS} characters, values at most {MAX_METADATA_VALUE_CHARS}"),
            ));
        }
    }
    Ok(())
}

fn text<'a>(params: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    params.get(name).and_then(Value::as_str)
}

fn integer(params: &Map<String, Value>, name: &str) -> Option<i64> {
    text(params, name).and_then(|text| text.parse().ok())
}

fn flag(params: &Map<String, Value>, name: &str) -> bool {
    text(params, name) == Some("true")
}

/// `amount` (required, at least 1) and `currency` (three letters), as Stripe checks them.
fn amount_and_currency(params: &Map<String, Value>) -> Result<(i64, String), StripeError> {
    let amount = integer(params, "amount").ok_or_else(|| StripeError::missing("amount"))?;
    if amount < 1 {
        return Err(StripeError::invalid(
            "amount_too_small",
            "amount",
            "Amount must be at least 1 (in the currency's smallest unit).",
        ));
    }
    let currency = text(params, "currency").ok_or_else(|| StripeError::missing("currency"))?;
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(StripeError::invalid(
            "parameter_invalid_string",
            "currency",
            format!("Invalid currency: {currency}"),
        ));
    }
    Ok((amount, currency.to_ascii_lowercase()))
}

/// A charge's business content in the core's terms (as the native dialect's `POST /v1/charges`).
fn charge_content(params: &Map<String, Value>, amount: i64, currency: &str) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("customer".into(), params.get("customer").cloned().unwrap_or(Value::Null));
    fields.insert("amount_minor".into(), json!(amount));
    fields.insert("currency".into(), Value::String(currency.to_ascii_uppercase()));
    fields
}

fn metadata(params: &Map<String, Value>) -> Value {
    let mut entries = params.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
    // Stripe unsets a key given an empty value.
    entries.retain(|_, value| value.as_str().is_some_and(|text| !text.is_empty()));
    Value::Object(entries)
}

fn created(now_ms: u64) -> u64 {
    // A real clock reads milliseconds since the Unix epoch; the simulation's starts at 0.
    if now_ms > 1_000_000_000_000 {
        now_ms / 1000
    } else {
        SIMULATION_EPOCH_S + now_ms / 1000
    }
}

fn keep(state: &mut State, tenant: &str, id: &str, object: Value) {
    let made = state.objects.len() as u64 + 1;
    state.objects.insert(id.to_owned(), Owned { tenant: tenant.to_owned(), made, object });
}

/// The tenant's object `id` of type `object`, if it has one.
fn owned<'a>(state: &'a State, tenant: &str, id: &str, object: &str) -> Option<&'a Value> {
    state
        .objects
        .get(id)
        .filter(|owned| owned.tenant == tenant && owned.object["object"] == object)
        .map(|owned| &owned.object)
}

// ------------------------------------------------------------------ payment intents

async fn create_payment_intent(AxumState(ds): Ds, request: Request) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = check_params(&read.params, &PAYMENT_INTENT_PARAMS).and_then(|()| {
        let (amount, currency) = amount_and_currency(&read.params)?;
        let confirm = flag(&read.params, "confirm");
        if confirm && text(&read.params, "payment_method").is_none() {
            return Err(StripeError::missing("payment_method"));
        }
        if text(&read.params, "capture_method").is_some_and(|method| method != "automatic") {
            return Err(StripeError::invalid(
                "parameter_invalid_string",
                "capture_method",
                "The twin captures automatically only (capture_method=automatic).",
            ));
        }
        Ok((amount, currency, confirm))
    });
    let (amount, currency, confirm) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), read.key.as_deref(), &error),
    };
    let effect =
        confirm.then(|| (EffectKind::ChargeCreated, charge_content(&read.params, amount, &currency)));
    let exchange = change(&read, effect);
    let params = read.params;
    run(ds, read.incoming, exchange, move |state, exchange, now| {
        let id = state.next_reference("pi");
        let payment_method = params.get("payment_method").cloned().unwrap_or(Value::Null);
        let mut intent = json!({
            "id": id,
            "object": "payment_intent",
            "amount": amount,
            "amount_received": 0,
            "currency": currency,
            "customer": params.get("customer").cloned().unwrap_or(Value::Null),
            "description": params.get("description").cloned().unwrap_or(Value::Null),
            "metadata": metadata(&params),
            "payment_method": payment_method,
            "capture_method": "automatic",
            "confirmation_method": "automatic",
            "client_secret": format!("{id}_secret_{}", exchange.tenant),
            "created": created(now),
            "latest_charge": Value::Null,
            "last_payment_error": Value::Null,
            "livemode": false,
            "status": if payment_method.is_null() { "requires_payment_method" } else { "requires_confirmation" },
        });
        if !confirm {
            keep(state, &exchange.tenant, &id, intent.clone());
            // A state change, no business effect: no money moved.
            return Processed { status: 200, body: intent, disposition: Disposition::Committed, effect_seq: None, started_job: None };
        }
        let method = payment_method.as_str().unwrap_or_default();
        if DECLINED.contains(&method) {
            let error = declined(state, exchange, &id, &mut intent);
            return error.processed(Disposition::Invalid);
        }
        let charge_id = state.next_reference("ch");
        let charge = charge_object(&charge_id, amount, &currency, &params, Some(&id), now);
        keep(state, &exchange.tenant, &charge_id, charge);
        intent["status"] = json!("succeeded");
        intent["amount_received"] = json!(amount);
        intent["latest_charge"] = json!(charge_id);
        keep(state, &exchange.tenant, &id, intent.clone());
        commit(state, exchange, Made { kind: EffectKind::ChargeCreated, reference: &id, versions: None }, now, 200, intent)
    })
    .await
}

/// A declined confirmation: the intent is kept as `requires_payment_method` with its error,
/// and the 402 names it, as Stripe's does.
fn declined(state: &mut State, exchange: &Exchange, id: &str, intent: &mut Value) -> StripeError {
    let mut error = StripeError::new(402, "card_error", "Your card was declined.").code("card_declined");
    error.extra.insert("decline_code".into(), json!("generic_decline"));
    intent["status"] = json!("requires_payment_method");
    intent["last_payment_error"] = error.body()["error"].clone();
    keep(state, &exchange.tenant, id, intent.clone());
    error.extra.insert("payment_intent".into(), intent.clone());
    error
}

async fn get_payment_intent(ds: Ds, id: Path<String>, request: Request) -> Response {
    retrieve(ds, id, request, "payment_intent").await
}

async fn get_charge(ds: Ds, id: Path<String>, request: Request) -> Response {
    retrieve(ds, id, request, "charge").await
}

async fn get_refund(ds: Ds, id: Path<String>, request: Request) -> Response {
    retrieve(ds, id, request, "refund").await
}

async fn retrieve(
    AxumState(ds): Ds,
    Path(id): Path<String>,
    request: Request,
    object: &'static str,
) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    if let Err(error) = check_params(&read.params, &RETRIEVE_PARAMS) {
        return refuse(&ds, &read.incoming, Some(&read.tenant), None, &error);
    }
    let exchange = read_exchange(&STRIPE, &read.incoming, Service::Charges, &read.tenant);
    run(ds, read.incoming, exchange, move |state, exchange, _| {
        match owned(state, &exchange.tenant, &id, object) {
            Some(found) => Processed::read(200, found.clone()),
            None => StripeError::no_such(object, &id, "id", 404).processed(Disposition::NotFound),
        }
    })
    .await
}

async fn search_payment_intents(AxumState(ds): Ds, request: Request) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let parsed = check_params(&read.params, &SEARCH_PARAMS).and_then(|()| {
        let query = text(&read.params, "query").ok_or_else(|| StripeError::missing("query"))?;
        let search = Search::parse(query)?;
        let limit = match integer(&read.params, "limit") {
            None => DEFAULT_SEARCH_LIMIT,
            Some(limit) if (1..=MAX_SEARCH_LIMIT as i64).contains(&limit) => limit as usize,
            Some(_) => {
                return Err(StripeError::invalid(
                    "parameter_invalid_integer",
                    "limit",
                    "limit must be between 1 and 100.",
                ))
            }
        };
        Ok((search, limit))
    });
    let (search, limit) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), None, &error),
    };
    let exchange = read_exchange(&STRIPE, &read.incoming, Service::Charges, &read.tenant);
    run(ds, read.incoming, exchange, move |state, exchange, _| {
        let mut found: Vec<&Owned> = state
            .objects
            .values()
            .filter(|owned| owned.tenant == exchange.tenant && owned.object["object"] == "payment_intent")
            .filter(|owned| search.matches(&owned.object))
            .collect();
        // Newest first, as Stripe sorts search results.
        found.sort_by_key(|owned| std::cmp::Reverse(owned.made));
        let has_more = found.len() > limit;
        let data: Vec<Value> = found.into_iter().take(limit).map(|owned| owned.object.clone()).collect();
        Processed::read(
            200,
            json!({
                "object": "search_result",
                "url": "/v1/payment_intents/search",
                "has_more": has_more,
                "next_page": Value::Null,
                "data": data,
            }),
        )
    })
    .await
}

/// A search query: clauses joined all by `AND` or all by `OR`.
#[derive(Debug, Clone, PartialEq)]
struct Search {
    any: bool,
    clauses: Vec<Clause>,
}

#[derive(Debug, Clone, PartialEq)]
struct Clause {
    field: Field,
    op: char,
    value: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Field {
    Metadata(String),
    Customer,
    Status,
    Currency,
    Amount,
}

impl Search {
    fn parse(query: &str) -> Result<Search, StripeError> {
        let bad = |why: String| {
            StripeError::invalid("parameter_invalid_string", "query", format!("Invalid search query: {why}"))
        };
        let (any, parts): (bool, Vec<&str>) = match (query.contains(" AND "), query.contains(" OR ")) {
            (true, true) => return Err(bad("AND and OR cannot be mixed in one query".into())),
            (false, true) => (true, query.split(" OR ").collect()),
            _ => (false, query.split(" AND ").collect()),
        };
        let clauses = parts
            .into_iter()
            .map(|part| Clause::parse(part.trim()).map_err(bad))
            .collect::<Result<_, _>>()?;
        Ok(Search { any, clauses })
    }

    fn matches(&self, intent: &Value) -> bool {
        let mut results = self.clauses.iter().map(|clause| clause.matches(intent));
        if self.any {
            results.any(|matched| matched)
        } else {
            results.all(|matched| matched)
        }
    }
}

impl Clause {
    fn parse(text: &str) -> Result<Clause, String> {
        let (field, rest) = if let Some(after) = text.strip_prefix("metadata[") {
            let close = after.find(']').ok_or("metadata['key'] is not closed")?;
            let key = unquote(&after[..close]).ok_or("a metadata key is quoted: metadata['key']")?;
            (Field::Metadata(key), &after[close + 1..])
        } else {
            let end = text.find([':', '>', '<']).ok_or_else(|| format!("{text:?} has no `:`, `>` or `<`"))?;
            let field = match &text[..end] {
                "customer" => Field::Customer,
                "status" => Field::Status,
                "currency" => Field::Currency,
                "amount" => Field::Amount,
                other => {
                    return Err(format!(
                        "the twin searches metadata, customer, status, currency and amount, not {other:?}"
                    ))
                }
            };
            (field, &text[end..])
        };
        let op = rest.chars().next().ok_or("a clause ends without a value")?;
        let value = rest[op.len_utf8()..].trim();
        let value = match (&field, op) {
            (Field::Amount, ':' | '>' | '<') => {
                value.parse::<i64>().map_err(|_| format!("amount compares with a number, not {value:?}"))?;
                value.to_owned()
            }
            (_, ':') => unquote(value).ok_or_else(|| format!("a value is quoted, e.g. '{value}'"))?,
            _ => return Err(format!("`{op}` compares amounts only")),
        };
        Ok(Clause { field, op, value })
    }

    fn matches(&self, intent: &Value) -> bool {
        let field = match &self.field {
            Field::Metadata(key) => &intent["metadata"][key],
            Field::Customer => &intent["customer"],
            Field::Status => &intent["status"],
            Field::Currency => &intent["currency"],
            Field::Amount => {
                let (Some(amount), Ok(value)) = (intent["amount"].as_i64(), self.value.parse::<i64>()) else {
                    return false;
                };
                return match self.op {
                    '>' => amount > value,
                    '<' => amount < value,
                    _ => amount == value,
                };
            }
        };
        field.as_str() == Some(self.value.as_str())
    }
}

fn unquote(text: &str) -> Option<String> {
    let text = text.trim();
    ['\'', '"'].into_iter().find_map(|quote| {
        let inner = text.strip_prefix(quote)?.strip_suffix(quote)?;
        (!inner.contains(quote)).then(|| inner.to_owned())
    })
}

// ------------------------------------------------------------------ charges and refunds

fn charge_object(
    id: &str,
    amount: i64,
    currency: &str,
    params: &Map<String, Value>,
    intent: Option<&str>,
    now: u64,
) -> Value {
    json!({
        "id": id,
        "object": "charge",
        "amount": amount,
        "amount_captured": amount,
        "amount_refunded": 0,
        "captured": true,
        "currency": currency,
        "customer": params.get("customer").cloned().unwrap_or(Value::Null),
        "description": params.get("description").cloned().unwrap_or(Value::Null),
        "metadata": if intent.is_some() { json!({}) } else { metadata(params) },
        "payment_intent": intent,
        "paid": true,
        "refunded": false,
        "created": created(now),
        "livemode": false,
        "status": "succeeded",
    })
}

/// `POST /v1/charges` with a Stripe key (the route is shared: `routes.rs`).
pub(crate) async fn create_charge(AxumState(ds): Ds, request: Request) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = check_params(&read.params, &CHARGE_PARAMS).and_then(|()| {
        let (amount, currency) = amount_and_currency(&read.params)?;
        if text(&read.params, "source").is_none() && text(&read.params, "customer").is_none() {
            return Err(StripeError::missing("source"));
        }
        Ok((amount, currency))
    });
    let (amount, currency) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), read.key.as_deref(), &error),
    };
    let exchange =
        change(&read, Some((EffectKind::ChargeCreated, charge_content(&read.params, amount, &currency))));
    let params = read.params;
    run(ds, read.incoming, exchange, move |state, exchange, now| {
        if text(&params, "source").is_some_and(|source| DECLINED.contains(&source)) {
            let mut error =
                StripeError::new(402, "card_error", "Your card was declined.").code("card_declined");
            error.extra.insert("decline_code".into(), json!("generic_decline"));
            return error.processed(Disposition::Invalid);
        }
        let id = state.next_reference("ch");
        let charge = charge_object(&id, amount, &currency, &params, None, now);
        keep(state, &exchange.tenant, &id, charge.clone());
        commit(
            state,
            exchange,
            Made { kind: EffectKind::ChargeCreated, reference: &id, versions: None },
            now,
            200,
            charge,
        )
    })
    .await
}

async fn create_refund(AxumState(ds): Ds, request: Request) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = check_params(&read.params, &REFUND_PARAMS).and_then(|()| {
        let target = match (text(&read.params, "charge"), text(&read.params, "payment_intent")) {
            (Some(_), Some(_)) => {
                return Err(StripeError::invalid(
                    "parameter_unknown",
                    "payment_intent",
                    "Give either charge or payment_intent, not both.",
                ))
            }
            (None, None) => return Err(StripeError::missing("charge")),
            (Some(charge), None) => ("charge", charge.to_owned()),
            (None, Some(intent)) => ("payment_intent", intent.to_owned()),
        };
        let amount = integer(&read.params, "amount");
        if amount.is_some_and(|amount| amount < 1) {
            return Err(StripeError::invalid(
                "amount_too_small",
                "amount",
                "Refund amount must be at least 1.",
            ));
        }
        Ok((target, amount))
    });
    let ((param, target), amount) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), read.key.as_deref(), &error),
    };
    let mut fields = Map::new();
    fields.insert("refunded".into(), Value::String(target.clone()));
    fields.insert("amount_minor".into(), amount.map_or(Value::Null, |amount| json!(amount)));
    let exchange = change(&read, Some((EffectKind::RefundCreated, fields)));
    let params = read.params;
    run(ds, read.incoming, exchange, move |state, exchange, now| {
        let charge_id = if param == "charge" {
            owned(state, &exchange.tenant, &target, "charge").map(|_| target.clone())
        } else {
            owned(state, &exchange.tenant, &target, "payment_intent")
                .and_then(|intent| intent["latest_charge"].as_str().map(str::to_owned))
        };
        let Some(charge_id) = charge_id else {
            let object = if param == "charge" { "charge" } else { "payment_intent" };
            return StripeError::no_such(object, &target, param, 400).processed(Disposition::NotFound);
        };
        let charge = owned(state, &exchange.tenant, &charge_id, "charge").cloned().unwrap_or_default();
        let left = charge["amount"].as_i64().unwrap_or(0) - charge["amount_refunded"].as_i64().unwrap_or(0);
        let amount = amount.unwrap_or(left);
        if amount > left || left == 0 {
            let error = StripeError::invalid(
                "amount_too_large",
                "amount",
                format!("Refund amount ({amount}) is greater than unrefunded amount on charge ({left})."),
            );
            return error.processed(Disposition::Invalid);
        }
        let id = state.next_reference("re");
        let refund = json!({
            "id": id,
            "object": "refund",
            "amount": amount,
            "charge": charge_id,
            "currency": charge["currency"],
            "metadata": metadata(&params),
            "payment_intent": charge["payment_intent"],
            "reason": params.get("reason").cloned().unwrap_or(Value::Null),
            "created": created(now),
            "status": "succeeded",
        });
        keep(state, &exchange.tenant, &id, refund.clone());
        if let Some(owned) = state.objects.get_mut(&charge_id) {
            let refunded = owned.object["amount_refunded"].as_i64().unwrap_or(0) + amount;
            owned.object["amount_refunded"] = json!(refunded);
            owned.object["refunded"] = json!(refunded >= owned.object["amount"].as_i64().unwrap_or(0));
        }
        commit(
            state,
            exchange,
            Made { kind: EffectKind::RefundCreated, reference: &id, versions: None },
            now,
            200,
            refund,
        )
    })
    .await
}

// ------------------------------------------------------------------ what the harness reads

/// The business content of a Stripe request, as the core computes it when it commits one
/// (`None` for a request that makes no effect, e.g. a payment intent not confirmed).
pub(crate) fn request_content(
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> Option<String> {
    if !method.eq_ignore_ascii_case("POST") {
        return None;
    }
    let tenant = tenant_of_key(authorization).ok()?;
    let params = parse_form(body).ok()?;
    match path.split('?').next().unwrap_or_default() {
        "/v1/payment_intents" if flag(&params, "confirm") => {
            let (amount, currency) = amount_and_currency(&params).ok()?;
            Some(content_digest(
                EffectKind::ChargeCreated,
                &tenant,
                &charge_content(&params, amount, &currency),
            ))
        }
        "/v1/charges" => {
            let (amount, currency) = amount_and_currency(&params).ok()?;
            Some(content_digest(
                EffectKind::ChargeCreated,
                &tenant,
                &charge_content(&params, amount, &currency),
            ))
        }
        "/v1/refunds" => {
            let target = text(&params, "charge").or_else(|| text(&params, "payment_intent"))?;
            let mut fields = Map::new();
            fields.insert("refunded".into(), Value::String(target.to_owned()));
            fields.insert(
                "amount_minor".into(),
                integer(&params, "amount").map_or(Value::Null, |amount| json!(amount)),
            );
            Some(content_digest(EffectKind::RefundCreated, &tenant, &fields))
        }
        _ => None,
    }
}

/// The ids an answer of the twin names: the object's own, and a payment intent's charge.
pub(crate) fn references_in_answer(body: &Value) -> Vec<String> {
    let object = body["object"].as_str().unwrap_or_default();
    if matches!(object, "search_result" | "list") {
        // A search (or a list) shows the server each object it found.
        let found = body["data"].as_array().map(Vec::as_slice).unwrap_or_default();
        return found.iter().flat_map(references_in_answer).collect();
    }
    if !matches!(object, "payment_intent" | "charge" | "refund") {
        return Vec::new();
    }
    ["id", "latest_charge"].iter().filter_map(|field| body[*field].as_str().map(str::to_owned)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_into_nested_parameters() {
        let params = parse_form(b"amount=1500&metadata[order]=1182&metadata[note]=a%20b&expand[]=latest_charge&expand[]=customer&automatic_payment_methods[enabled]=true").unwrap();
        assert_eq!(
            Value::Object(params),
            json!({
                "amount": "1500",
                "metadata": {"order": "1182", "note": "a b"},
                "expand": ["latest_charge", "customer"],
                "automatic_payment_methods": {"enabled": "true"},
            })
        );
        assert!(parse_form(b"a[]=1&a[k]=2").is_err());
        assert!(parse_form(b"a[3]=1").is_err());
        assert!(parse_form(b"[x]=1").is_err());
    }

    #[test]
    fn keys_name_their_tenant() {
        assert_eq!(tenant_of_key(Some("Bearer sk_test_acme")).unwrap(), "acme");
        for bad in [
            None,
            Some("Bearer sk_live_acme"),
            Some("Bearer pk_test_acme"),
            Some("Bearer sk_test_"),
            Some("Basic abc"),
            Some("Bearer sk_test_a b"),
        ] {
            assert_eq!(tenant_of_key(bad).unwrap_err().status, 401, "{bad:?}");
        }
        assert!(speaks(Some("Bearer sk_test_acme")));
        assert!(!speaks(Some("Bearer something")));
        assert!(!speaks(None));
    }

    #[test]
    fn search_queries_parse_and_match() {
        let intent = json!({"object": "payment_intent", "metadata": {"order": "1182"}, "customer": "cus_42", "status": "succeeded", "currency": "eur", "amount": 1500});
        let check = |query: &str, expected: bool| {
            assert_eq!(Search::parse(query).unwrap().matches(&intent), expected, "{query}");
        };
        check("metadata['order']:'1182'", true);
        check("metadata[\"order\"]:\"1182\"", true);
        check("metadata['order']:'1183'", false);
        check("metadata['order']:'1182' AND customer:'cus_42'", true);
        check("metadata['order']:'1182' AND customer:'cus_43'", false);
        check("metadata['order']:'9' OR customer:'cus_42'", true);
        check("amount>1000 AND amount<2000", true);
        check("amount:1500 AND status:'succeeded' AND currency:'eur'", true);
        check("amount>1500", false);
        for bad in [
            "metadata['order']:1182",
            "a:'b'",
            "customer>'x'",
            "x AND y OR z",
            "metadata[order]:'1'",
            "amount:'x'",
            "",
        ] {
            assert!(Search::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_and_malformed_parameters_are_refused_naming_them() {
        let check = |form: &[u8], code: &str, param: &str| {
            let params = parse_form(form).unwrap();
            let error = check_params(&params, &PAYMENT_INTENT_PARAMS).unwrap_err();
            assert_eq!(
                (error.code, error.param.as_deref()),
                (Some(code), Some(param)),
                "{}",
                String::from_utf8_lossy(form)
            );
        };
        check(b"amount=1&currency=eur&colour=red", "parameter_unknown", "colour");
        check(b"amount=ten&currency=eur", "parameter_invalid_integer", "amount");
        check(b"amount=1&confirm=yes", "parameter_invalid_boolean", "confirm");
        check(b"amount=1&metadata=x", "parameter_invalid_empty", "metadata");
        let missing = amount_and_currency(&parse_form(b"currency=eur").unwrap()).unwrap_err();
        assert_eq!((missing.code, missing.param.as_deref()), (Some("parameter_missing"), Some("amount")));
    }

    #[test]
    fn a_charge_reads_as_the_native_dialect_charge_of_the_same_business_content() {
        let native = content_digest(
            EffectKind::ChargeCreated,
            "acme",
            json!({"customer": "cus_42", "amount_minor": 5000, "currency": "EUR"}).as_object().unwrap(),
        );
        let auth = Some("Bearer sk_test_acme");
        let intent = b"amount=5000&currency=eur&customer=cus_42&confirm=true&payment_method=pm_card_visa&metadata[order]=7";
        assert_eq!(request_content("POST", "/v1/payment_intents", auth, intent), Some(native.clone()));
        assert_eq!(
            request_content("POST", "/v1/charges", auth, b"amount=5000&currency=EUR&customer=cus_42"),
            Some(native.clone())
        );
        // Not confirmed: no money moves, no content; another tenant's key: another content.
        assert_eq!(
            request_content("POST", "/v1/payment_intents", auth, b"amount=5000&currency=eur&customer=cus_42"),
            None
        );
        assert_ne!(
            request_content("POST", "/v1/payment_intents", Some("Bearer sk_test_globex"), intent),
            Some(native)
        );
    }
}
