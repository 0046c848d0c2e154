//! Talking to the downstream: which request a tool call becomes, and what an answer means.
//! The reference executor's mapping, public so that a variant or an executor of your own
//! reuses it instead of copying it: [`send`] a request with a timeout, [`classify`] the
//! answer to an effect, look a receipt up ([`receipt_request`], [`read_receipt`]), poll a job
//! ([`job_request`], [`read_job`]).
//!
//! Architecture invariant: an answer is a receipt only when it is a 2xx whose body parses
//! and carries the effect reference. A timeout, a closed connection, a 5xx or a garbled
//! body is *ambiguous*: the effect may have happened, so it is never reported as applied.
//!
//! ```no_run
//! use executor::downstream::{read_receipt, receipt_request, send, ReceiptLookup};
//! # async fn example(env: protocol::WorkerEnv) {
//! let request = receipt_request("acme:production:run_827:record_issue", "acme", "tickets");
//! match read_receipt(send(&env, request, std::time::Duration::from_secs(2)).await) {
//!     ReceiptLookup::Found(ticket_id, _answer) => println!("made: {ticket_id}"),
//!     ReceiptLookup::NotFound => println!("no ticket with that key (so far)"),
//!     ReceiptLookup::Failed(why) => println!("cannot tell: {why}"),
//! }
//! # }
//! ```

use protocol::ToolContract;
use serde_json::{json, Map, Value};
use wire::{HttpRequest, HttpResponse};

/// The tools the reference executor knows how to carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// `tickets.create` -> `POST /v1/tickets`.
    TicketsCreate,
    /// `tickets.set_status` -> `PATCH /v1/tickets/{id}` with `If-Match`.
    TicketsSetStatus,
    /// `payments.charge` -> `POST /v1/charges`.
    PaymentsCharge,
    /// `messages.send` -> `POST /v1/messages`.
    MessagesSend,
    /// `jobs.submit` -> `POST /v1/jobs`.
    JobsSubmit,
}

impl ToolKind {
    /// The kind of the tool called `tool`, if the reference can carry it out.
    pub fn of(tool: &str) -> Option<Self> {
        match tool {
            "tickets.create" => Some(ToolKind::TicketsCreate),
            "tickets.set_status" => Some(ToolKind::TicketsSetStatus),
            "payments.charge" => Some(ToolKind::PaymentsCharge),
            "messages.send" => Some(ToolKind::MessagesSend),
            "jobs.submit" => Some(ToolKind::JobsSubmit),
            _ => None,
        }
    }

    /// The answer field that names the effect.
    pub fn reference_field(self) -> &'static str {
        match self {
            ToolKind::TicketsCreate | ToolKind::TicketsSetStatus => "ticket_id",
            ToolKind::PaymentsCharge => "charge_id",
            ToolKind::MessagesSend => "message_id",
            ToolKind::JobsSubmit => "job_id",
        }
    }

    /// The answer fields kept as the safe result (never subjects, bodies or recipients).
    fn result_fields(self) -> &'static [&'static str] {
        match self {
            ToolKind::TicketsCreate | ToolKind::TicketsSetStatus => &["ticket_id", "version", "status"],
            ToolKind::PaymentsCharge => &["charge_id", "amount_minor", "currency", "status"],
            ToolKind::MessagesSend => &["message_id", "status"],
            ToolKind::JobsSubmit => &["job_id", "status"],
        }
    }
}

/// The downstream request a validated tool call becomes (without its key).
#[derive(Debug, Clone, PartialEq)]
pub struct DownstreamPlan {
    /// The tool it carries out.
    pub kind: ToolKind,
    method: http::Method,
    path: String,
    body: Value,
    if_match: Option<i64>,
}

fn text<'a>(arguments: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    arguments.get(name).and_then(Value::as_str).ok_or_else(|| format!("argument `{name}` is missing"))
}

fn integer(arguments: &Map<String, Value>, name: &str) -> Result<i64, String> {
    arguments.get(name).and_then(Value::as_i64).ok_or_else(|| format!("argument `{name}` is missing"))
}

impl DownstreamPlan {
    /// Maps a validated call to its request. Fails for a tool this executor cannot carry out
    /// or arguments the mapping needs but the contract does not require.
    pub fn build(
        contract: &ToolContract,
        tenant: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Self, String> {
        let kind = ToolKind::of(&contract.name)
            .ok_or_else(|| format!("the executor cannot carry out tool {}", contract.name))?;
        let post = |path: &str, body: Value| Self {
            kind,
            method: http::Method::POST,
            path: path.to_owned(),
            body,
            if_match: None,
        };
        Ok(match kind {
            ToolKind::TicketsCreate => post(
                "/v1/tickets",
                json!({
                    "tenant": tenant,
                    "queue": text(arguments, "queue")?,
                    "subject": text(arguments, "subject")?,
                    "body": text(arguments, "body")?,
                }),
            ),
            ToolKind::TicketsSetStatus => Self {
                kind,
                method: http::Method::PATCH,
                path: format!("/v1/tickets/{}", percent_encode(text(arguments, "ticket_id")?)),
                body: json!({"tenant": tenant, "status": text(arguments, "status")?}),
                if_match: Some(integer(arguments, "expected_version")?),
            },
            ToolKind::PaymentsCharge => post(
                "/v1/charges",
                json!({
                    "tenant": tenant,
                    "customer": text(arguments, "customer")?,
                    "amount_minor": integer(arguments, "amount_minor")?,
                    "currency": text(arguments, "currency")?,
                }),
            ),
            ToolKind::MessagesSend => post(
                "/v1/messages",
                json!({"tenant": tenant, "to": text(arguments, "to")?, "body": text(arguments, "body")?}),
            ),
            ToolKind::JobsSubmit => post(
                "/v1/jobs",
                json!({
                    "tenant": tenant,
                    "job_type": text(arguments, "job_type")?,
                    "input": arguments.get("input").cloned().unwrap_or_else(|| json!({})),
                }),
            ),
        })
    }

    /// The same request without its version precondition (no `If-Match`). The reference
    /// never sends an absolute update without it; it exists for the `stale_overwrite` mutant.
    pub fn without_precondition(mut self) -> Self {
        self.if_match = None;
        self
    }

    /// The request, carrying `Idempotency-Key: key` when there is one.
    pub fn request(&self, key: Option<&str>) -> HttpRequest {
        let mut request = HttpRequest::json(self.method.clone(), self.path.clone(), &self.body);
        if let Some(version) = self.if_match {
            request = request.header("If-Match", format!("\"{version}\""));
        }
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request
    }
}

/// Sends `request` through the worker's downstream client and waits at most `timeout` (in
/// the worker's time) for the whole answer.
pub async fn send(env: &protocol::WorkerEnv, request: HttpRequest, timeout: std::time::Duration) -> Sent {
    match tokio::time::timeout(timeout, env.downstream.send(request)).await {
        Ok(Ok(response)) => Sent::Response(response),
        Ok(Err(error)) => Sent::Transport(error.to_string()),
        Err(_elapsed) => Sent::TimedOut,
    }
}

/// What came back from one downstream request.
#[derive(Debug)]
pub enum Sent {
    /// A complete response.
    Response(HttpResponse),
    /// The transport failed (after the request may have been sent).
    Transport(String),
    /// No complete answer within the timeout.
    TimedOut,
}

impl Sent {
    /// Why it is not a clean answer, in a few words.
    pub fn why(&self) -> String {
        match self {
            Sent::Response(response) => format!("the downstream answered {}", response.status),
            Sent::Transport(error) => format!("the transport failed: {error}"),
            Sent::TimedOut => "the downstream did not answer in time".into(),
        }
    }
}

/// What the answer to a mutating request means.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The effect exists: its reference and the safe result. `replayed` when the downstream
    /// said `Idempotent-Replayed: true` (an earlier request made it).
    Receipt {
        /// The effect reference (`ticket_1`).
        reference: String,
        /// The safe result: the contract's whitelisted fields of the answer.
        result: Value,
        /// The downstream answered from an earlier request with the same key.
        replayed: bool,
    },
    /// 412: the target changed since the caller read it. No effect.
    PreconditionFailed,
    /// Another 4xx (not 409): refused for good. No effect.
    Refused {
        /// The HTTP status.
        status: u16,
    },
    /// 409: the downstream is still processing a request with this key.
    KeyInProgress,
    /// The effect may or may not have happened.
    Ambiguous(String),
}

impl Answer {
    /// What the answer says, in a few words: `the downstream refused the request with 422`.
    pub fn describe(&self) -> String {
        match self {
            Answer::Receipt { reference, replayed: false, .. } => {
                format!("the downstream confirmed {reference}")
            }
            Answer::Receipt { reference, replayed: true, .. } => {
                format!("the downstream confirmed {reference} (replayed from an earlier request)")
            }
            Answer::PreconditionFailed => "the downstream answered 412: the target changed".into(),
            Answer::Refused { status } => format!("the downstream refused the request with {status}"),
            Answer::KeyInProgress => {
                "the downstream answered 409: a request with this key is still being processed".into()
            }
            Answer::Ambiguous(why) => why.clone(),
        }
    }
}

/// Classifies the answer to a mutating request of `kind`.
pub fn classify(kind: ToolKind, sent: Sent) -> Answer {
    let Sent::Response(response) = sent else { return Answer::Ambiguous(sent.why()) };
    match response.status {
        200..=299 => match receipt_of(kind, &response) {
            Some((reference, result)) => Answer::Receipt {
                reference,
                result,
                replayed: response.header("idempotent-replayed") == Some("true"),
            },
            None => Answer::Ambiguous(format!(
                "the downstream answered {} with a body that does not carry `{}`",
                response.status,
                kind.reference_field()
            )),
        },
        409 => Answer::KeyInProgress,
        412 => Answer::PreconditionFailed,
        status @ 400..=499 => Answer::Refused { status },
        status => Answer::Ambiguous(format!("the downstream answered {status}")),
    }
}

fn receipt_of(kind: ToolKind, response: &HttpResponse) -> Option<(String, Value)> {
    let body: Map<String, Value> = response.json().ok()?;
    let reference = body.get(kind.reference_field())?.as_str().filter(|text| !text.is_empty())?.to_owned();
    Some((reference, safe_result(kind, &body)))
}

/// The whitelisted fields of an answer.
fn safe_result(kind: ToolKind, body: &Map<String, Value>) -> Value {
    let kept: Map<String, Value> = kind
        .result_fields()
        .iter()
        .filter_map(|field| body.get(*field).map(|value| ((*field).to_owned(), value.clone())))
        .collect();
    Value::Object(kept)
}

/// The safe result known from a receipt (the original answer was never seen): the
/// whitelisted fields of the answer the receipt says the downstream committed, and the
/// reference.
pub fn receipt_result(kind: ToolKind, reference: &str, answer: &Map<String, Value>) -> Value {
    let mut result = match safe_result(kind, answer) {
        Value::Object(result) => result,
        _ => Map::new(),
    };
    result.insert(kind.reference_field().to_owned(), Value::String(reference.to_owned()));
    Value::Object(result)
}

/// What a receipt lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptLookup {
    /// An effect was made with the key: its reference, and the answer the downstream
    /// committed for it (empty when the receipt does not carry it).
    Found(String, Map<String, Value>),
    /// No effect was made with the key (so far).
    NotFound,
    /// The lookup did not answer usefully.
    Failed(String),
}

/// `GET /v1/receipts/{key}?tenant=..&service=..`.
pub fn receipt_request(key: &str, tenant: &str, service: &str) -> HttpRequest {
    HttpRequest::get(format!(
        "/v1/receipts/{}?tenant={}&service={}",
        percent_encode(key),
        percent_encode(tenant),
        percent_encode(service)
    ))
}

/// What the answer to a [`receipt_request`] says: found (a 200 naming the effect), not found
/// (404), or nothing clear (anything else, including a transport failure).
pub fn read_receipt(sent: Sent) -> ReceiptLookup {
    let Sent::Response(response) = sent else { return ReceiptLookup::Failed(sent.why()) };
    match response.status {
        200 => {
            let body: Result<Map<String, Value>, _> = response.json();
            let body = body.unwrap_or_default();
            let answer = body.get("answer").and_then(Value::as_object).cloned().unwrap_or_default();
            match body.get("effect_reference").and_then(Value::as_str) {
                Some(reference) if !reference.is_empty() => {
                    ReceiptLookup::Found(reference.to_owned(), answer)
                }
                _ => ReceiptLookup::Failed("the receipt does not carry an effect reference".into()),
            }
        }
        404 => ReceiptLookup::NotFound,
        status => ReceiptLookup::Failed(format!("the receipt lookup answered {status}")),
    }
}

/// A delayed job's state.
#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    /// Done, with its result.
    Succeeded(Value),
    /// Still running.
    Running,
    /// Could not be read.
    Unreadable(String),
}

/// `GET /v1/jobs/{id}?tenant=..`.
pub fn job_request(job_id: &str, tenant: &str) -> HttpRequest {
    HttpRequest::get(format!("/v1/jobs/{}?tenant={}", percent_encode(job_id), percent_encode(tenant)))
}

/// What the answer to a [`job_request`] says about the job.
pub fn read_job(sent: Sent) -> JobState {
    let Sent::Response(response) = sent else { return JobState::Unreadable(sent.why()) };
    if response.status != 200 {
        return JobState::Unreadable(format!("the job status answered {}", response.status));
    }
    let Ok(body) = response.json::<Map<String, Value>>() else {
        return JobState::Unreadable("the job status body does not parse".into());
    };
    match body.get("status").and_then(Value::as_str) {
        Some("succeeded") => JobState::Succeeded(body.get("result").cloned().unwrap_or(Value::Null)),
        Some("pending" | "running") => JobState::Running,
        _ => JobState::Unreadable("the job status is not one this executor knows".into()),
    }
}

/// The completion notice of a delayed job: one message to `to`.
pub fn notice_request(tenant: &str, to: &str, job_id: &str, key: Option<&str>) -> HttpRequest {
    let body = json!({"tenant": tenant, "to": to, "body": format!("job {job_id} finished")});
    let request = HttpRequest::json(http::Method::POST, "/v1/messages", &body);
    match key {
        Some(key) => request.header("Idempotency-Key", format!("{key}:notice")),
        None => request,
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters (for path segments and
/// query values).
pub use wire::percent_encode;

#[cfg(test)]
mod tests {
    use protocol::ContractSet;

    use super::*;

    fn response(status: u16, body: &str, replayed: bool) -> Sent {
        let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        if replayed {
            headers.push(("idempotent-replayed".into(), "true".into()));
        }
        Sent::Response(HttpResponse { status, headers, body: body.as_bytes().to_vec().into() })
    }

    #[test]
    fn answers_are_classified_and_ambiguity_is_never_a_receipt() {
        let kind = ToolKind::TicketsCreate;
        assert_eq!(
            classify(
                kind,
                response(201, r#"{"ticket_id":"ticket_1","version":1,"status":"open","subject":"s"}"#, false)
            ),
            Answer::Receipt {
                reference: "ticket_1".into(),
                result: json!({"ticket_id": "ticket_1", "version": 1, "status": "open"}),
                replayed: false
            }
        );
        assert!(matches!(
            classify(kind, response(201, r#"{"ticket_id":"ticket_1"}"#, true)),
            Answer::Receipt { replayed: true, .. }
        ));
        assert_eq!(classify(kind, response(409, "{}", false)), Answer::KeyInProgress);
        assert_eq!(classify(kind, response(412, "{}", false)), Answer::PreconditionFailed);
        assert_eq!(classify(kind, response(422, "{}", false)), Answer::Refused { status: 422 });
        assert_eq!(classify(kind, response(400, "{}", false)), Answer::Refused { status: 400 });
        for ambiguous in [
            response(503, "{}", false),
            response(500, "", false),
            response(201, r#"{"ticket_id":"tick"#, false),
            response(201, r#"{"id":"ticket_1"}"#, false),
            response(201, r#"{"ticket_id":""}"#, false),
            response(201, r#"["ticket_1"]"#, false),
            response(302, "", false),
            Sent::Transport("connection closed".into()),
            Sent::TimedOut,
        ] {
            let shown = format!("{ambiguous:?}");
            assert!(matches!(classify(kind, ambiguous), Answer::Ambiguous(_)), "{shown}");
        }
    }

    #[test]
    fn an_answer_is_described_in_words() {
        let receipt =
            |replayed| Answer::Receipt { reference: "message_1".into(), result: json!({}), replayed };
        let described = [
            (receipt(false), "the downstream confirmed message_1"),
            (receipt(true), "the downstream confirmed message_1 (replayed from an earlier request)"),
            (Answer::PreconditionFailed, "the downstream answered 412: the target changed"),
            (Answer::Refused { status: 422 }, "the downstream refused the request with 422"),
            (
                Answer::KeyInProgress,
                "the downstream answered 409: a request with this key is still being processed",
            ),
            (Answer::Ambiguous("the downstream answered 503".into()), "the downstream answered 503"),
        ];
        for (answer, text) in described {
            assert_eq!(answer.describe(), text);
        }
    }

    #[test]
    fn a_receipt_lookup_finds_only_a_receipt_that_names_its_effect() {
        let found = read_receipt(response(
            200,
            r#"{"effect_reference":"ticket_1","answer":{"status":"open"}}"#,
            false,
        ));
        assert_eq!(
            found,
            ReceiptLookup::Found("ticket_1".into(), json!({"status": "open"}).as_object().unwrap().clone())
        );
        assert_eq!(read_receipt(response(404, "{}", false)), ReceiptLookup::NotFound);
        for unproven in [
            response(200, r#"{"effect_reference":""}"#, false),
            response(200, r#"{"answer":{}}"#, false),
            response(200, "not json", false),
            response(501, "{}", false),
            response(503, "{}", false),
            Sent::TimedOut,
        ] {
            let shown = format!("{unproven:?}");
            assert!(matches!(read_receipt(unproven), ReceiptLookup::Failed(_)), "{shown}");
        }
    }

    #[test]
    fn every_builtin_tool_maps_to_its_endpoint_without_leaking_transport_fields() {
        let contracts = ContractSet::builtin();
        let check = |tool: &str, arguments: Value, method: &str, path: &str, body: Value| {
            let contract = contracts.iter().find(|contract| contract.name == tool).unwrap();
            let Value::Object(arguments) = arguments else { unreachable!() };
            let plan = DownstreamPlan::build(contract, "acme", &arguments).unwrap();
            let request = plan.request(Some("acme:p:r:s"));
            assert_eq!((request.method.as_str(), request.path.as_str()), (method, path), "{tool}");
            assert_eq!(serde_json::from_slice::<Value>(&request.body).unwrap(), body, "{tool}");
            assert!(request.headers.contains(&("Idempotency-Key".into(), "acme:p:r:s".into())));
        };
        check(
            "tickets.create",
            json!({"queue": "support", "subject": "s", "body": "b", "trace_id": "t"}),
            "POST",
            "/v1/tickets",
            json!({"tenant": "acme", "queue": "support", "subject": "s", "body": "b"}),
        );
        check(
            "tickets.set_status",
            json!({"ticket_id": "ticket 1/2", "status": "closed", "expected_version": 3}),
            "PATCH",
            "/v1/tickets/ticket%201%2F2",
            json!({"tenant": "acme", "status": "closed"}),
        );
        check(
            "payments.charge",
            json!({"customer": "c", "amount_minor": 500, "currency": "EUR"}),
            "POST",
            "/v1/charges",
            json!({"tenant": "acme", "customer": "c", "amount_minor": 500, "currency": "EUR"}),
        );
        check(
            "messages.send",
            json!({"to": "x@example.test", "body": "hi"}),
            "POST",
            "/v1/messages",
            json!({"tenant": "acme", "to": "x@example.test", "body": "hi"}),
        );
        check(
            "jobs.submit",
            json!({"job_type": "report"}),
            "POST",
            "/v1/jobs",
            json!({"tenant": "acme", "job_type": "report", "input": {}}),
        );
        let set_status = contracts.get("tickets.set_status", "2026-08-18").unwrap();
        let Value::Object(arguments) = json!({"ticket_id": "t", "status": "closed", "expected_version": 3})
        else {
            unreachable!()
        };
        let request = DownstreamPlan::build(set_status, "acme", &arguments).unwrap().request(None);
        assert!(request.headers.contains(&("If-Match".into(), "\"3\"".into())));
        assert!(!request.headers.iter().any(|(name, _)| name == "Idempotency-Key"));
    }

    #[test]
    fn an_unknown_tool_has_no_mapping() {
        let mut contract = ContractSet::builtin().get("tickets.create", "2026-08-18").unwrap().clone();
        contract.name = "tickets.delete".into();
        let error = DownstreamPlan::build(&contract, "acme", &Map::new()).unwrap_err();
        assert!(error.contains("cannot carry out tool tickets.delete"), "{error}");
    }

    #[test]
    fn receipts_and_jobs_are_read_strictly() {
        assert_eq!(
            read_receipt(response(200, r#"{"effect_reference":"ticket_4"}"#, false)),
            ReceiptLookup::Found("ticket_4".into(), Map::new())
        );
        let committed =
            r#"{"effect_reference":"ticket_4","answer":{"ticket_id":"ticket_4","version":1,"subject":"x"}}"#;
        let ReceiptLookup::Found(reference, answer) = read_receipt(response(200, committed, false)) else {
            panic!("a receipt with its answer is found")
        };
        // Only the safe fields are kept (never the subject).
        assert_eq!(
            receipt_result(ToolKind::TicketsCreate, &reference, &answer),
            json!({"ticket_id": "ticket_4", "version": 1})
        );
        assert_eq!(read_receipt(response(404, "{}", false)), ReceiptLookup::NotFound);
        assert!(matches!(read_receipt(response(501, "{}", false)), ReceiptLookup::Failed(_)));
        assert!(matches!(read_receipt(response(200, "{", false)), ReceiptLookup::Failed(_)));
        assert!(matches!(read_receipt(Sent::TimedOut), ReceiptLookup::Failed(_)));
        assert_eq!(
            read_job(response(
                200,
                r#"{"status":"succeeded","result":{"output_reference":"output_1"}}"#,
                false
            )),
            JobState::Succeeded(json!({"output_reference": "output_1"}))
        );
        assert_eq!(read_job(response(200, r#"{"status":"pending"}"#, false)), JobState::Running);
        assert!(matches!(read_job(response(404, "{}", false)), JobState::Unreadable(_)));
    }

    #[test]
    fn keys_and_ids_are_percent_encoded_in_urls() {
        assert_eq!(percent_encode("acme:prod:run_1:step-2.~"), "acme%3Aprod%3Arun_1%3Astep-2.~");
        assert_eq!(percent_encode("a b/c?d&e=é"), "a%20b%2Fc%3Fd%26e%3D%C3%A9");
        assert_eq!(
            receipt_request("k:1", "acme", "tickets").path,
            "/v1/receipts/k%3A1?tenant=acme&service=tickets"
        );
        assert_eq!(job_request("job_1", "a&b").path, "/v1/jobs/job_1?tenant=a%26b");
    }
}
