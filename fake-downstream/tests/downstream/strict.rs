//! What a strict real API refuses, on a real loopback port: fault rules that would disturb
//! every request or a path nothing serves, a webhook URL that is not one, a body announced too
//! long, a path that does not decode, a header sent twice, a body that is not JSON. Every
//! refusal is `application/problem+json` and makes no effect.

use std::time::Duration;

use fake_downstream::{Disposition, DownstreamConfig};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire::{HttpClient, HttpRequest, HttpResponse};

use crate::real_port::serve_on_loopback;

/// How long a raw exchange may take before the test says the server is waiting for something.
const PATIENCE: Duration = Duration::from_secs(5);

fn ticket() -> Value {
    json!({"tenant": "acme", "queue": "support", "subject": "s", "body": "b"})
}

/// The problem a response carries, after checking that it is one with `status`.
fn problem(response: &HttpResponse, status: u16, what: &str) -> wire::Problem {
    assert_eq!(response.status, status, "{what}: {}", String::from_utf8_lossy(&response.body));
    assert_eq!(response.header("content-type"), Some("application/problem+json"), "{what}");
    let problem: wire::Problem =
        response.json().unwrap_or_else(|error| panic!("{what}: not a problem body ({error})"));
    assert_eq!(problem.status, status, "{what}");
    problem
}

async fn send(client: &HttpClient, request: HttpRequest) -> HttpResponse {
    tokio::time::timeout(PATIENCE, client.send(request))
        .await
        .expect("the downstream answers in time")
        .expect("the downstream answers")
}

/// Writes `request` as it is on a new connection to `authority` and reads one response:
/// status, content type and body. Panics when no complete response arrives in [`PATIENCE`].
async fn raw(authority: &str, request: &[u8]) -> (u16, Option<String>, Vec<u8>) {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await.expect("connects");
        stream.write_all(request).await.expect("writes");
        let mut received = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&received[..end]).into_owned();
                let header = |name: &str| {
                    head.lines().skip(1).find_map(|line| {
                        let (key, value) = line.split_once(':')?;
                        key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
                    })
                };
                let length: usize = header("content-length").map_or(0, |n| n.parse().expect("a length"));
                if received.len() >= end + 4 + length {
                    let status = head.split(' ').nth(1).expect("a status").parse().expect("a number");
                    return (status, header("content-type"), received[end + 4..end + 4 + length].to_vec());
                }
            }
            let read = stream.read(&mut buffer).await.expect("reads");
            assert!(read > 0, "the connection closed before a complete response: {received:?}");
            received.extend_from_slice(&buffer[..read]);
        }
    };
    tokio::time::timeout(PATIENCE, exchange).await.unwrap_or_else(|_| {
        panic!("no answer within {PATIENCE:?}: the server is still waiting for the body it was promised")
    })
}

#[tokio::test(flavor = "current_thread")]
async fn a_fault_rule_with_an_empty_match_is_refused() {
    let (downstream, client) = serve_on_loopback().await;
    for rule in [json!({"action": "hold"}), json!({"match": {}, "action": "commit_then_drop", "times": 1})] {
        let answer = send(&client, HttpRequest::json(http::Method::POST, "/__admin/faults", &rule)).await;
        let refused = problem(&answer, 400, &rule.to_string());
        assert_eq!(refused.kind, "invalid_fault_rule");
        assert!(refused.detail.contains("empty `match` would disturb every request"), "{}", refused.detail);
    }
    assert!(downstream.faults().is_empty(), "nothing was installed");
    // A read goes through untouched.
    let read = send(&client, HttpRequest::get("/v1/jobs/job_1?tenant=acme")).await;
    assert_eq!(read.status, 404);
}

#[tokio::test(flavor = "current_thread")]
async fn a_fault_rule_for_a_path_no_route_serves_is_refused() {
    let (downstream, client) = serve_on_loopback().await;
    for path in
        ["/v1/ticket", "/v1/tickets/", "/v1/tickets/t1/close", "/v2/*", "/__admin/ledger", "v1/tickets"]
    {
        let rule = json!({"match": {"method": "POST", "path": path}, "action": "commit_then_drop"});
        let answer = send(&client, HttpRequest::json(http::Method::POST, "/__admin/faults", &rule)).await;
        let refused = problem(&answer, 400, path);
        assert_eq!(refused.kind, "invalid_fault_rule");
        assert!(refused.detail.contains("no route serves"), "{path}: {}", refused.detail);
        assert!(refused.detail.contains("/v1/tickets/{id}"), "the routes are named: {}", refused.detail);
    }
    assert!(downstream.faults().is_empty(), "nothing was installed");
    for path in
        ["/v1/tickets", "/v1/tickets/ticket_7", "/v1/tickets/*", "/v1/*", "/v1/rec*", "/v1/receipts/k1"]
    {
        let rule = json!({"match": {"path": path}, "action": "commit_then_drop"});
        let answer = send(&client, HttpRequest::json(http::Method::POST, "/__admin/faults", &rule)).await;
        assert_eq!(answer.status, 201, "{path}: {}", String::from_utf8_lossy(&answer.body));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_webhook_url_that_is_not_a_url_is_refused_when_the_config_is_loaded() {
    let error = serde_json::from_str::<DownstreamConfig>(r#"{"webhook": {"url": "not a url at all"}}"#)
        .expect_err("the config is refused");
    assert!(error.to_string().contains("`webhook.url`"), "the field is named: {error}");
    assert!(error.to_string().contains("not a url at all"), "the value is quoted: {error}");

    let (downstream, client) = serve_on_loopback().await;
    let bad = json!({"webhook": {"url": "https://example.com/hooks"}});
    let answer = send(&client, HttpRequest::json(http::Method::PUT, "/__admin/config", &bad)).await;
    let refused = problem(&answer, 400, "https webhook");
    assert!(refused.detail.contains("`webhook.url`"), "{}", refused.detail);
    assert_eq!(downstream.config(), DownstreamConfig::default(), "the configuration is unchanged");
}

#[tokio::test(flavor = "current_thread")]
async fn an_oversized_content_length_is_refused_before_the_body_is_read() {
    let (downstream, client) = serve_on_loopback().await;
    let authority = client.authority();
    for path in ["/v1/tickets", "/__admin/faults"] {
        // The body is announced but never sent: only an answer from the header can come back.
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
             Idempotency-Key: big-1\r\nContent-Length: 1000000\r\n\r\n"
        );
        let (status, content_type, body) = raw(&authority, head.as_bytes()).await;
        assert_eq!(status, 413, "{path}: {}", String::from_utf8_lossy(&body));
        assert_eq!(content_type.as_deref(), Some("application/problem+json"), "{path}");
        let refused: wire::Problem = serde_json::from_slice(&body).expect("a problem body");
        assert_eq!(refused.kind, "body_too_large");
        assert!(refused.detail.contains("1000000"), "the announced length is named: {}", refused.detail);
    }
    assert!(downstream.ledger().is_empty());
    let journal = downstream.requests();
    assert_eq!(journal.len(), 1, "the business refusal is journaled, the admin one is not");
    assert_eq!((journal[0].status, journal[0].disposition), (Some(413), Disposition::Invalid));
    assert_eq!(journal[0].idempotency_key.as_deref(), Some("big-1"));
}

#[tokio::test(flavor = "current_thread")]
async fn a_path_that_does_not_decode_is_a_problem_on_every_route() {
    let (downstream, client) = serve_on_loopback().await;
    let patch = json!({"tenant": "acme", "status": "closed"});
    let cases = [
        HttpRequest::get("/v1/tickets/%00%ff?tenant=acme"),
        HttpRequest::json(http::Method::PATCH, "/v1/tickets/%00%ff", &patch),
        HttpRequest::get("/v1/jobs/%ff?tenant=acme"),
        HttpRequest::get("/v1/receipts/%ff?tenant=acme&service=tickets"),
        HttpRequest::new(http::Method::POST, "/__admin/faults/%ff/release"),
        HttpRequest::new(http::Method::POST, "/__admin/tickets/%ff/touch"),
    ];
    let business = cases.iter().filter(|request| request.path.starts_with("/v1/")).count();
    for request in cases {
        let what = format!("{} {}", request.method, request.path);
        let refused = problem(&send(&client, request).await, 400, &what);
        assert_eq!(refused.kind, "invalid_path", "{what}");
        assert!(refused.detail.contains("does not decode"), "{what}: {}", refused.detail);
    }
    assert!(downstream.ledger().is_empty());
    let journal = downstream.requests();
    assert_eq!(journal.len(), business, "every business refusal is journaled");
    assert!(journal.iter().all(|r| (r.status, r.disposition) == (Some(400), Disposition::Invalid)));
}

#[tokio::test(flavor = "current_thread")]
async fn an_idempotency_key_or_if_match_sent_twice_is_refused() {
    let (downstream, client) = serve_on_loopback().await;
    let created = send(&client, HttpRequest::json(http::Method::POST, "/v1/tickets", &ticket())).await;
    assert_eq!(created.status, 201);
    for (first, second) in [("k1", "k2"), ("k1", "k1")] {
        let twice = HttpRequest::json(http::Method::POST, "/v1/tickets", &ticket())
            .header("Idempotency-Key", first)
            .header("Idempotency-Key", second);
        let refused = problem(&send(&client, twice).await, 400, "two keys");
        assert_eq!(refused.kind, "invalid_idempotency_key");
        assert!(refused.detail.contains("Idempotency-Key header is sent 2 times"), "{}", refused.detail);
    }
    let patch = json!({"tenant": "acme", "status": "closed"});
    let twice = HttpRequest::json(http::Method::PATCH, "/v1/tickets/ticket_1", &patch)
        .header("If-Match", "\"1\"")
        .header("If-Match", "\"2\"");
    let refused = problem(&send(&client, twice).await, 400, "two preconditions");
    assert_eq!(refused.kind, "invalid_if_match");
    assert!(refused.detail.contains("If-Match header is sent 2 times"), "{}", refused.detail);
    assert_eq!(downstream.ledger().len(), 1, "only the first create made an effect");

    // If-Match stays optional: a PATCH without it changes the ticket (the lost update the
    // bench must be able to show).
    let unconditional = HttpRequest::json(http::Method::PATCH, "/v1/tickets/ticket_1", &patch);
    assert_eq!(send(&client, unconditional).await.status, 200);
    assert_eq!(downstream.ledger().len(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn a_body_that_is_not_declared_json_is_refused() {
    let (downstream, client) = serve_on_loopback().await;
    let body = serde_json::to_vec(&ticket()).unwrap();
    let patch = serde_json::to_vec(&json!({"tenant": "acme", "status": "closed"})).unwrap();
    let refused_cases = [
        ("no content type", HttpRequest::new(http::Method::POST, "/v1/tickets").body(body.clone())),
        (
            "text/plain",
            HttpRequest::new(http::Method::POST, "/v1/tickets")
                .header("content-type", "text/plain")
                .body(body.clone()),
        ),
        (
            "form",
            HttpRequest::new(http::Method::POST, "/v1/charges")
                .header("content-type", "application/x-www-form-urlencoded")
                .body("tenant=acme"),
        ),
        (
            "patch as text",
            HttpRequest::new(http::Method::PATCH, "/v1/tickets/ticket_1")
                .header("content-type", "text/plain")
                .body(patch.clone()),
        ),
    ];
    for (what, request) in refused_cases {
        let refused = problem(&send(&client, request).await, 415, what);
        assert_eq!(refused.kind, "unsupported_media_type", "{what}");
        assert!(refused.detail.contains("application/json"), "{what}: {}", refused.detail);
    }
    assert!(downstream.ledger().is_empty());
    assert!(downstream.requests().iter().all(|r| r.status == Some(415)));

    for content_type in ["application/json; charset=utf-8", "Application/JSON"] {
        let request = HttpRequest::new(http::Method::POST, "/v1/tickets")
            .header("content-type", content_type)
            .body(body.clone());
        assert_eq!(send(&client, request).await.status, 201, "{content_type}");
    }
    // The admin API is the bench's own, like WireMock's: it takes JSON without the header
    // (`curl -d`).
    let rule = br#"{"match": {"path": "/v1/tickets"}, "action": "commit_then_drop"}"#.to_vec();
    let installed = send(&client, HttpRequest::new(http::Method::POST, "/__admin/faults").body(rule)).await;
    assert_eq!(installed.status, 201);
}

/// A method an `/__admin` route does not serve is a problem+json 405 there too, as on the
/// business API (found by `replaylab fuzz`: the admin routes answered an empty 405).
#[tokio::test(flavor = "current_thread")]
async fn a_method_an_admin_route_does_not_serve_is_a_problem() {
    let (downstream, client) = serve_on_loopback().await;
    for (method, path) in [
        (http::Method::DELETE, "/__admin/ledger"),
        (http::Method::PUT, "/__admin/tickets/ticket_1/touch"),
        (http::Method::POST, "/__admin/webhooks"),
        (http::Method::from_bytes(b"FOO").unwrap(), "/__admin/faults"),
    ] {
        let what = format!("{method} {path}");
        let refused = problem(&send(&client, HttpRequest::new(method, path)).await, 405, &what);
        assert_eq!(refused.kind, "method_not_allowed", "{what}");
    }
    assert!(downstream.requests().is_empty(), "admin refusals are not business evidence");
}
