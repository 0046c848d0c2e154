//! Target `downstream`: HTTP requests to the fake downstream's whole router, in process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use fake_downstream::{Downstream, DownstreamConfig, WebhookConfig};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::corpus::*;
use crate::gen::*;
use crate::guard::*;
use crate::model::*;

/// One generated HTTP request.
#[derive(Debug, Clone)]
pub(crate) struct RawRequest {
    method: String,
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl RawRequest {
    /// The request as HTTP/1.1 text (what a finding file holds).
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.path).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("content-length: {}\r\n\r\n", self.body.len()).as_bytes());
        out.extend_from_slice(&self.body);
        out
    }

    pub(crate) fn build(&self) -> Option<http::Request<Full<Bytes>>> {
        let method = http::Method::from_bytes(self.method.as_bytes()).ok()?;
        let mut builder =
            http::Request::builder().method(method).uri(self.path.as_str()).header("host", "downstream");
        for (name, value) in &self.headers {
            let name = http::HeaderName::from_bytes(name.as_bytes()).ok()?;
            let value = http::HeaderValue::from_bytes(value).ok()?;
            builder = builder.header(name, value);
        }
        builder.body(Full::new(Bytes::from(self.body.clone()))).ok()
    }
}

/// The routes of `fake-downstream/src/routes.rs`: method, path template.
#[rustfmt::skip]
pub(crate) const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/tickets"), ("GET", "/v1/tickets/{ticket}"), ("PATCH", "/v1/tickets/{ticket}"),
    ("POST", "/v1/charges"), ("POST", "/v1/messages"), ("POST", "/v1/jobs"), ("GET", "/v1/jobs/{job}"),
    ("GET", "/v1/receipts/{key}"), ("POST", "/__admin/faults"), ("GET", "/__admin/faults"),
    ("DELETE", "/__admin/faults"), ("POST", "/__admin/faults/{rule}/release"), ("GET", "/__admin/ledger"),
    ("GET", "/__admin/requests"), ("GET", "/__admin/webhooks"), ("POST", "/__admin/reset"),
    ("POST", "/__admin/tickets/{ticket}/touch"), ("GET", "/__admin/config"), ("PUT", "/__admin/config"),
    ("GET", "/"), ("GET", "/v2/tickets"),
];

#[rustfmt::skip]
pub(crate) const METHODS: &[&str] = &[
    "GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS", "TRACE", "FOO", "get", "PoSt", "M-SEARCH",
    "X",
];

/// Path segments beside the ids the downstream handed out.
#[rustfmt::skip]
pub(crate) const SEGMENTS: &[&str] = &[
    "ticket_1", "ticket_999999", "job_1", "k1", "1", "0", "-1", "18446744073709551616", "%00", "%ff",
    "%FF%FE", "%2F", "%2e%2e", "..", ".", "%C3%A9", "%F0%9D%84%9E", "%ED%A0%80", "%", "%zz", "a%20b", "+",
    "~", "*", "%0A", "%7F", ":", "@", ";a=b",
];

/// Query values.
#[rustfmt::skip]
pub(crate) const QUERY_VALUES: &[&str] = &[
    "acme", "globex", "tickets", "charges", "messages", "jobs", "lasers", "", "%00", "%ff", "%C3%A9", "a+b",
    "a%26b", "%", "ACME", "Tickets",
];

#[rustfmt::skip]
pub(crate) const CONTENT_TYPES: &[&str] = &[
    "application/json", "application/json; charset=utf-8", "text/plain", "application/problem+json",
    "application/x-www-form-urlencoded", "", "application/json, application/json", "*/*",
    "application/json; charset=latin1", "multipart/form-data; boundary=x",
];

pub(crate) const KEYS: &[&str] = &["k1", "k2", "", " ", "a\tb", "%00", "ключ", "k1 ", "\u{e9}"];

pub(crate) struct DownstreamFuzz {
    subject: DownstreamSubject,
    /// The runtime and the downstream, rebuilt every [`DOWNSTREAM_REFRESH`] requests and
    /// after a panic.
    world: Option<(tokio::runtime::Runtime, Downstream, axum::Router)>,
    /// The downstream's clock: it moves only between requests (see [`DownstreamFuzz::check`]).
    clock: Arc<AtomicU64>,
    since_refresh: u64,
    /// Ids and keys the downstream handed out, to aim later requests at real things.
    ids: Vec<String>,
    sent: u64,
    unsendable: u64,
    by_class: [u64; 6],
}

impl DownstreamFuzz {
    pub(crate) fn new(subject: DownstreamSubject) -> Self {
        Self {
            subject,
            world: None,
            clock: Arc::new(AtomicU64::new(1_800_000_000_000)),
            since_refresh: 0,
            ids: Vec::new(),
            sent: 0,
            unsendable: 0,
            by_class: [0; 6],
        }
    }

    pub(crate) fn world(&mut self) -> &(tokio::runtime::Runtime, Downstream, axum::Router) {
        if self.since_refresh >= DOWNSTREAM_REFRESH {
            self.world = None;
        }
        if self.world.is_none() {
            self.since_refresh = 0;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime starts");
            let clock = Self::clock_of(&self.clock);
            let downstream =
                Downstream::new(DownstreamConfig::default(), Arc::new(clock), Arc::new(NoNetwork));
            let router = (self.subject.router)(&downstream);
            self.world = Some((runtime, downstream, router));
        }
        self.since_refresh += 1;
        self.world.as_ref().expect("the world was just built")
    }

    pub(crate) fn clock_of(clock: &Arc<AtomicU64>) -> impl Fn() -> u64 + Send + Sync + 'static {
        let clock = clock.clone();
        move || clock.load(Ordering::Relaxed)
    }

    pub(crate) fn segment(&self, gen: &mut Gen) -> String {
        if !self.ids.is_empty() && gen.chance(50) {
            return self.ids[gen.below(self.ids.len())].clone();
        }
        if gen.chance(5) {
            return "a".repeat(*gen.pick(&[255usize, 256, 4096, 20_000]));
        }
        (*gen.pick(SEGMENTS)).to_owned()
    }

    pub(crate) fn body(&self, gen: &mut Gen, method: &str, template: &str) -> Vec<u8> {
        let text =
            |gen: &mut Gen, usual: &str| if gen.chance(85) { V::s(usual) } else { V::Str(any_string(gen)) };
        let tenant = |gen: &mut Gen| {
            let usual = if gen.chance(50) { "acme" } else { "globex" };
            text(gen, usual)
        };
        let value = match (method, template) {
            ("POST", "/v1/tickets") => V::obj(&[
                ("tenant", tenant(gen)),
                ("queue", text(gen, "support")),
                ("subject", text(gen, "Refund request")),
                ("body", text(gen, "Customer reports a duplicate charge.")),
            ]),
            ("PATCH", _) => {
                let status = *gen.pick(&["open", "pending", "closed"]);
                V::obj(&[("tenant", tenant(gen)), ("status", text(gen, status))])
            }
            ("POST", "/v1/charges") => V::obj(&[
                ("tenant", tenant(gen)),
                ("customer", text(gen, "cus_42")),
                (
                    "amount_minor",
                    if gen.chance(80) { V::n(1 + gen.below(10_000)) } else { V::n(gen.pick(NUMBERS)) },
                ),
                ("currency", text(gen, "EUR")),
            ]),
            ("POST", "/v1/messages") => V::obj(&[
                ("tenant", tenant(gen)),
                ("to", text(gen, "customer-42")),
                ("body", text(gen, "Welcome aboard.")),
            ]),
            ("POST", "/v1/jobs") => {
                let mut fields = vec![("tenant", tenant(gen)), ("job_type", text(gen, "invoice_report"))];
                if gen.chance(60) {
                    fields.push(("input", V::obj(&[("month", V::s("2026-11"))])));
                }
                V::obj(&fields)
            }
            ("POST", "/__admin/faults") => fault_rule_value(gen),
            ("PUT", "/__admin/config") => {
                let service = |gen: &mut Gen| {
                    V::obj(&[
                        ("idempotency", V::s(gen.word(&["honoured", "ignored", "sometimes"]))),
                        ("receipts", V::Bool(gen.chance(70))),
                    ])
                };
                let mut fields = Vec::new();
                for name in ["tickets", "charges", "messages", "jobs"] {
                    if gen.chance(40) {
                        fields.push((name, service(gen)));
                    }
                }
                if gen.chance(50) {
                    fields.push(("job_duration", V::s(gen.word(DURATIONS))));
                }
                if gen.chance(30) {
                    let url = *gen.pick(&[
                        "http://127.0.0.1:9/hooks",
                        "http://hooks/x",
                        "https://hooks/x",
                        "http://:0/",
                        "http://[::1]:65535/a?b",
                        "not a url",
                        "",
                    ]);
                    fields.push((
                        "webhook",
                        V::obj(&[
                            ("url", V::s(url)),
                            ("repeat_same_event", V::n(gen.pick(&["0", "1", "3", "4294967295"]))),
                            ("extra_event_ids", V::n(gen.pick(&["0", "1", "2", "4294967295", "-1"]))),
                        ]),
                    ));
                }
                V::obj(&fields)
            }
            _ => {
                if gen.chance(80) {
                    return Vec::new();
                }
                odd_value(gen)
            }
        };
        let mut value = value;
        if gen.chance(25) {
            value.perturb(gen);
        }
        let mut bytes = value.json().into_bytes();
        if gen.chance(20) {
            bytes = mutate(gen, &bytes, &[]);
        }
        if gen.chance(2) {
            bytes.resize(wire::MAX_BODY_BYTES + gen.below(3), b' ');
        }
        bytes
    }

    pub(crate) fn request(&self, gen: &mut Gen) -> RawRequest {
        let (usual, template) = *gen.pick(ROUTES);
        let method = if gen.chance(80) { usual } else { *gen.pick(METHODS) };
        let mut path = String::new();
        for part in template.split('/').skip(1) {
            path.push('/');
            // An id where the route takes one, and now and then where it does not.
            if part.starts_with('{') || gen.chance(3) {
                path.push_str(&self.segment(gen));
            } else {
                path.push_str(part);
            }
        }
        if gen.chance(3) {
            path.push('/');
        }
        let wants_query = template.starts_with("/v1/") && usual == "GET";
        if (wants_query && gen.chance(90)) || gen.chance(5) {
            let mut pairs = Vec::new();
            for name in ["tenant", "service", "extra", "tenant"] {
                if gen.chance(if name == "extra" { 10 } else { 70 }) {
                    pairs.push(format!("{name}={}", gen.pick(QUERY_VALUES)));
                }
            }
            if gen.chance(5) {
                pairs.push((*gen.pick(&["&", "=", "tenant", "tenant=%", "%=%"])).to_owned());
            }
            path.push('?');
            path.push_str(&pairs.join("&"));
        }
        let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
        if gen.chance(80) {
            let content_type = if gen.chance(70) { CONTENT_TYPES[0] } else { *gen.pick(CONTENT_TYPES) };
            headers.push(("content-type".into(), content_type.as_bytes().to_vec()));
        }
        let key = |gen: &mut Gen| -> Vec<u8> {
            match gen.below(10) {
                0 => "k".repeat(*gen.pick(&[255usize, 256])).into_bytes(),
                1 => vec![0x80, 0xff, b'k'],
                2..=5 if !self.ids.is_empty() => self.ids[gen.below(self.ids.len())].clone().into_bytes(),
                _ => gen.pick(KEYS).as_bytes().to_vec(),
            }
        };
        if gen.chance(50) {
            headers.push(("idempotency-key".into(), key(gen)));
            if gen.chance(10) {
                headers.push(("Idempotency-Key".into(), key(gen)));
            }
        }
        if method == "PATCH" || gen.chance(5) {
            let values =
                ["1", "\"1\"", "2", "W/\"1\"", "*", "-1", "18446744073709551616", "", "\"", "1, 2", " 1 "];
            if gen.chance(60) {
                headers.push(("if-match".into(), gen.pick(&values).as_bytes().to_vec()));
                if gen.chance(10) {
                    headers.push(("If-Match".into(), gen.pick(&values).as_bytes().to_vec()));
                }
            }
        }
        if gen.chance(10) {
            headers.push(("x-replaylab-origin".into(), key(gen)));
        }
        if gen.chance(10) {
            headers.push(("x-replaylab-request-id".into(), key(gen)));
        }
        if gen.chance(3) {
            headers.push(("accept".into(), b"text/html".to_vec()));
        }
        let body = self.body(gen, method, template);
        RawRequest { method: method.to_owned(), path, headers, body }
    }

    /// Remembers the ids and keys a successful answer names.
    pub(crate) fn harvest(&mut self, body: &[u8]) {
        let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else { return };
        for name in ["ticket_id", "job_id", "id", "idempotency_key"] {
            let id = match fields.get(name) {
                Some(Value::String(id)) => id.clone(),
                Some(Value::Number(id)) => id.to_string(),
                _ => continue,
            };
            if self.ids.len() >= 16 {
                self.ids.remove(0);
            }
            self.ids.push(id);
        }
    }
}

/// The deliveries of one finished job under `webhook`, when they are at least
/// [`MAX_WEBHOOK_FANOUT`].
pub(crate) fn webhook_fanout(webhook: Option<&WebhookConfig>) -> Option<u64> {
    let webhook = webhook?;
    let fanout = 1 + u64::from(webhook.repeat_same_event) + u64::from(webhook.extra_event_ids);
    (fanout >= MAX_WEBHOOK_FANOUT).then_some(fanout)
}

/// Webhooks go nowhere: every connection attempt fails at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NoNetwork;

impl wire::Connect for NoNetwork {
    fn connect(
        &self,
        host: &str,
        port: u16,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Box<dyn wire::Io>>> + Send>> {
        let message = format!("the fuzzer's downstream has no network ({host}:{port})");
        Box::pin(async move { Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, message)) })
    }
}

/// A response read whole.
pub(crate) struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

/// Sends `request` over one in-memory connection served by `router`.
async fn exchange(router: axum::Router, request: http::Request<Full<Bytes>>) -> Result<Reply, String> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = wire::serve_connection(server_io, router);
    let client = async move {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(client_io))
            .await
            .map_err(|error| format!("handshake failed: {error}"))?;
        let talk = async move {
            let response = sender
                .send_request(request)
                .await
                .map_err(|error| format!("no complete response: {error}"))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, 8 * 1024 * 1024)
                .collect()
                .await
                .map_err(|error| format!("the body could not be read: {error}"))?
                .to_bytes();
            Ok::<Reply, String>(Reply { status: parts.status.as_u16(), headers: parts.headers, body })
        };
        let (reply, _) = tokio::join!(talk, connection);
        reply
    };
    let (reply, ()) = tokio::join!(client, server);
    reply
}

/// The class index of a status, for the notes: 1xx..5xx, and "no answer".
pub(crate) fn class_of(status: u16) -> usize {
    usize::from(status / 100).clamp(1, 5)
}

/// Rewrites a path to its route's template, so that failures group by route.
pub(crate) fn route_of(path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = path.split('/').collect();
    for (_, template) in ROUTES {
        let parts: Vec<&str> = template.split('/').collect();
        if parts.len() == segments.len()
            && parts.iter().zip(&segments).all(|(part, segment)| part.starts_with('{') || part == segment)
        {
            return (*template).to_owned();
        }
    }
    "(no route)".into()
}

impl Fuzz for DownstreamFuzz {
    type Input = RawRequest;

    fn generate(&mut self, gen: &mut Gen, _n: u64) -> RawRequest {
        self.request(gen)
    }

    fn check(&mut self, raw: &RawRequest) -> Checked {
        let Some(request) = raw.build() else {
            self.unsendable += 1;
            return Checked::Fine;
        };
        self.sent += 1;
        let timeout = self.subject.timeout;
        let clock = self.clock.clone();
        let (runtime, downstream, router) = self.world();
        let router = router.clone();
        // Time passes between requests only, and the jobs it finishes finish before the next
        // request starts: a job reads the configuration checked after the request before.
        clock.fetch_add(CLOCK_STEP_MS, Ordering::Relaxed);
        downstream.clock_moved();
        runtime.block_on(async {
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
        });
        let answer =
            runtime.block_on(async move { tokio::time::timeout(timeout, exchange(router, request)).await });
        // Failures group by route, with the route's own methods apart from any other.
        let template = route_of(&raw.path);
        let known = ROUTES.iter().any(|(method, path)| *method == raw.method && *path == template);
        let route =
            if known { format!("{} {template}", raw.method) } else { format!("(other method) {template}") };
        let request_line = format!("{} {}", raw.method, one_line(&raw.path, 120));
        // Faults a request installed must not hold or drop the next one.
        downstream.clear_faults();
        let config = downstream.config();
        if let Some(fanout) = webhook_fanout(config.webhook.as_ref()) {
            // Put a sane configuration back before any job can finish under this one.
            downstream.set_config(DownstreamConfig { webhook: None, ..config });
            return broken(
                "resources",
                format!("{route} accepted a webhook fan-out of {MAX_WEBHOOK_FANOUT} or more"),
                format!(
                    "{request_line}: the downstream accepted a configuration under which every finishing job \
                     builds {fanout} webhook deliveries in memory at once (the process aborts when they do not fit)"
                ),
            );
        }
        let reply = match answer {
            Err(_) => {
                self.by_class[0] += 1;
                // The connection may still hold the downstream's state: start afresh.
                self.world = None;
                return broken(
                    "hang",
                    format!("no answer in time to {route}"),
                    format!("{request_line}: no answer within {}", judge::text::duration(timeout)),
                );
            }
            Ok(Err(error)) => {
                self.by_class[0] += 1;
                return broken(
                    "malformed",
                    format!("no answer to {route}"),
                    format!("{request_line}: {error}"),
                );
            }
            Ok(Ok(reply)) => reply,
        };
        self.by_class[class_of(reply.status)] += 1;
        let content_type = reply
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let media = content_type
            .as_deref()
            .map(|value| value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
        let is_json = matches!(media.as_deref(), Some("application/json" | "application/problem+json"));
        let parsed = serde_json::from_slice::<Value>(&reply.body);
        let head = raw.method == "HEAD";
        if is_json && !head && !reply.body.is_empty() && parsed.is_err() {
            return broken(
                "malformed",
                format!(
                    "{} with a {} body that is not JSON on {route}",
                    reply.status,
                    media.unwrap_or_default()
                ),
                format!("{request_line}: {} body {}", reply.status, escape(&reply.body, 200)),
            );
        }
        if reply.status >= 400 {
            let described = format!(
                "{} {} on {route}",
                reply.status,
                content_type.as_deref().unwrap_or("(no content type)")
            );
            if !is_json {
                return broken(
                    JSON_ERROR_PROPERTY,
                    described,
                    format!(
                        "{request_line}: {} {} without a JSON problem body: {}",
                        reply.status,
                        content_type.as_deref().unwrap_or("(no content type)"),
                        escape(&reply.body, 200)
                    ),
                );
            }
            if !head {
                match parsed {
                    Ok(Value::Object(problem)) => {
                        let status = problem.get("status").and_then(Value::as_u64);
                        if media.as_deref() == Some("application/problem+json")
                            && status != Some(u64::from(reply.status))
                        {
                            let claimed = status.map_or("missing".to_owned(), |status| status.to_string());
                            return broken(
                                JSON_ERROR_PROPERTY,
                                format!("{described}: problem status {claimed}"),
                                format!(
                                    "{request_line}: {}, but the problem's `status` is {claimed}: {}",
                                    reply.status,
                                    escape(&reply.body, 200)
                                ),
                            );
                        }
                    }
                    _ => {
                        return broken(
                            JSON_ERROR_PROPERTY,
                            format!("{described}: not a JSON object"),
                            format!(
                                "{request_line}: {} with an error body that is not a JSON object: {}",
                                reply.status,
                                escape(&reply.body, 200)
                            ),
                        )
                    }
                }
            }
        } else if (200..300).contains(&reply.status) {
            self.harvest(&reply.body);
        }
        Checked::Fine
    }

    fn bytes(&self, raw: &RawRequest) -> Vec<u8> {
        raw.to_bytes()
    }

    fn recover(&mut self) {
        self.world = None;
    }

    fn notes(&self) -> String {
        let [none, _, ok, redirect, client, server] = self.by_class;
        format!(
            "{} sent ({} could not be built), answers 2xx={ok} 3xx={redirect} 4xx={client} 5xx={server} none={none}",
            self.sent, self.unsendable
        )
    }
}
