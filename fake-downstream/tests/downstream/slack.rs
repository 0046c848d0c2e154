//! The Slack twin over the core: no idempotency key (a resend after a lost answer is a second
//! message), `conversations.history` that finds what was posted by its metadata, content
//! digests in the core's terms, errors as `200 ok: false`, the rate-limit rule. (Its wire
//! format is checked by slack_sdk: `tests/vendor-sdk/`, run by `harness/tests/it/vendor_sdk.rs`.)

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use fake_downstream::{Disposition, Downstream, DownstreamConfig, EffectKind, FaultRule};
use serde_json::{json, Value};
use wire::{HttpClient, HttpRequest, TcpAcceptor, TcpConnector, TransportError};

async fn twin() -> (Downstream, HttpClient) {
    let now_ms = Arc::new(AtomicU64::new(0));
    let clock = now_ms.clone();
    let downstream = Downstream::new(
        DownstreamConfig::default(),
        Arc::new(move || clock.load(std::sync::atomic::Ordering::SeqCst)),
        Arc::new(TcpConnector),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.router()));
    (downstream, HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", port))
}

fn post(method: &str, tenant: &str, body: Value) -> HttpRequest {
    HttpRequest::new(http::Method::POST, format!("/api/{method}"))
        .header("Authorization", format!("Bearer xoxb-{tenant}"))
        .header("Content-Type", "application/json;charset=utf-8")
        .body(body.to_string())
}

fn history(tenant: &str, query: &str) -> HttpRequest {
    HttpRequest::get(format!("/api/conversations.history?{query}"))
        .header("Authorization", format!("Bearer xoxb-{tenant}"))
}

#[tokio::test(flavor = "current_thread")]
async fn a_resend_after_a_lost_answer_is_a_second_message_and_the_history_finds_the_first() {
    let (downstream, client) = twin().await;
    let rule = FaultRule::from_json(
        br#"{"match": {"method": "POST", "path": "/api/chat.postMessage"}, "action": "commit_then_drop", "times": 1}"#,
    )
    .expect("a rule on a Slack method is valid");
    downstream.install_fault(rule);
    let message = json!({"channel": "C0-refunds", "text": "Refund for order 1182 approved.",
        "metadata": {"event_type": "operation_posted", "event_payload": {"operation": "acme/run_1/notify"}}});
    let lost =
        client.send(post("chat.postMessage", "acme", message.clone()).header("Idempotency-Key", "k1")).await;
    assert!(downstream.requests()[0].idempotency_key.is_none(), "an Idempotency-Key header is ignored");
    assert!(matches!(lost, Err(TransportError::ClosedWithoutResponse(_))), "{lost:?}");
    assert_eq!(downstream.ledger().len(), 1, "posted before the answer was lost");

    // Read back first: the careful way. Metadata only with include_all_metadata.
    let bare: Value = client.send(history("acme", "channel=C0-refunds")).await.unwrap().json().unwrap();
    assert_eq!(bare["messages"][0].get("metadata"), None, "{bare}");
    let found = client.send(history("acme", "channel=C0-refunds&include_all_metadata=true")).await.unwrap();
    assert_eq!(found.status, 200);
    let found: Value = found.json().unwrap();
    assert_eq!(found["ok"], true);
    assert_eq!(found["messages"][0]["metadata"]["event_payload"]["operation"], "acme/run_1/notify");
    let ts = found["messages"][0]["ts"].as_str().expect("a ts").to_owned();
    assert_eq!(
        fake_downstream::answer_references(200, found.to_string().as_bytes()),
        std::slice::from_ref(&ts)
    );
    let other: Value = client.send(history("globex", "channel=C0-refunds")).await.unwrap().json().unwrap();
    assert_eq!(other["messages"], json!([]), "another tenant's token sees none of it");

    // The blind resend: the same key, and still a second message.
    let again: Value = client
        .send(post("chat.postMessage", "acme", message.clone()).header("Idempotency-Key", "k1"))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(again["ok"], true);
    assert_eq!(again["message"]["metadata"], message["metadata"], "the post's answer shows its metadata");
    assert_ne!(again["ts"].as_str(), Some(ts.as_str()), "every message has its own ts");
    let ledger = downstream.ledger();
    assert_eq!(ledger.len(), 2, "Slack has no idempotency key");
    assert!(ledger
        .iter()
        .all(|effect| effect.kind == EffectKind::MessageSent && effect.idempotency_key.is_none()));
    assert_eq!(ledger[0].effect_reference, ts, "a message's reference is its ts");

    // In the core's terms: the native message to the channel with the text; metadata is not
    // content.
    let native = fake_downstream::content_digest(
        EffectKind::MessageSent,
        "acme",
        json!({"to": "C0-refunds", "body": "Refund for order 1182 approved."}).as_object().unwrap(),
    );
    assert_eq!(ledger[0].content_digest, native);
    assert_eq!(
        fake_downstream::request_content(
            "POST",
            "/api/chat.postMessage",
            Some("Bearer xoxb-acme"),
            message.to_string().as_bytes()
        ),
        Some(native)
    );
    assert_eq!(
        fake_downstream::request_tenant("/api/chat.postMessage", Some("Bearer xoxb-acme"), b"{}").as_deref(),
        Some("acme")
    );
    let dispositions: Vec<Disposition> =
        downstream.requests().iter().map(|record| record.disposition).collect();
    assert_eq!(
        dispositions,
        [
            Disposition::Committed,
            Disposition::Read,
            Disposition::Read,
            Disposition::Read,
            Disposition::Committed
        ]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_rate_limited_rule_is_a_429_ratelimited_with_retry_after_and_no_effect() {
    let (downstream, client) = twin().await;
    let rule = FaultRule::from_json(
        br#"{"match": {"path": "/api/chat.postMessage"}, "action": "rate_limited", "delay": "3s"}"#,
    )
    .unwrap();
    downstream.install_fault(rule);
    let answer =
        client.send(post("chat.postMessage", "acme", json!({"channel": "C1", "text": "t"}))).await.unwrap();
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-after"), Some("3"));
    assert_eq!(answer.json::<Value>().unwrap(), json!({"ok": false, "error": "ratelimited"}));
    assert!(downstream.ledger().is_empty());
    assert_eq!(downstream.requests()[0].disposition, Disposition::RateLimited);
    let answer =
        client.send(post("chat.postMessage", "acme", json!({"channel": "C1", "text": "t"}))).await.unwrap();
    assert_eq!(answer.json::<Value>().unwrap()["ok"], true, "the rule fired once");
}

#[tokio::test(flavor = "current_thread")]
async fn errors_are_ok_false_on_http_200_and_make_nothing() {
    let (downstream, client) = twin().await;
    let cases: Vec<(HttpRequest, &str)> = vec![
        (
            HttpRequest::new(http::Method::POST, "/api/chat.postMessage")
                .body("channel=C1&text=t".to_owned()),
            "not_authed",
        ),
        (
            HttpRequest::new(http::Method::POST, "/api/chat.postMessage")
                .header("Authorization", "Bearer ghp_acme")
                .body("channel=C1&text=t".to_owned()),
            "invalid_auth",
        ),
        (post("chat.postMessage", "acme", json!({"channel": "", "text": "t"})), "channel_not_found"),
        (post("chat.postMessage", "acme", json!({"channel": "C 1", "text": "t"})), "channel_not_found"),
        (post("chat.postMessage", "acme", json!({"channel": "C1"})), "no_text"),
        (
            post("chat.postMessage", "acme", json!({"channel": "C1", "text": "x".repeat(40_001)})),
            "msg_too_long",
        ),
        (post("chat.postMessage", "acme", json!({"channel": "C1", "text": 7})), "invalid_arguments"),
        (
            post(
                "chat.postMessage",
                "acme",
                json!({"channel": "C1", "text": "t", "metadata": {"event_type": "x"}}),
            ),
            "invalid_metadata_format",
        ),
        (
            HttpRequest::new(http::Method::POST, "/api/chat.postMessage")
                .header("Authorization", "Bearer xoxb-acme")
                .header("Content-Type", "application/json")
                .body("{not json".to_owned()),
            "invalid_json",
        ),
        (history("acme", "channel=C1&limit=0"), "invalid_limit"),
        (history("acme", "channel=C1&limit=1000"), "invalid_limit"),
        (history("acme", "channel=C1&cursor=bogus"), "invalid_cursor"),
        (
            HttpRequest::new(http::Method::POST, "/api/chat.postMessage")
                .header("Authorization", "Bearer xoxb-acme")
                .header("Content-Type", "application/json")
                .body(r#"["channel", "C1"]"#.to_owned()),
            "invalid_json",
        ),
        (post("chat.delete", "acme", json!({"channel": "C1", "ts": "1.000001"})), "unknown_method"),
        (HttpRequest::get("/api/users.list"), "unknown_method"),
    ];
    for (request, code) in cases {
        let answer = client.send(request).await.unwrap();
        assert_eq!(answer.status, 200, "{code}");
        assert_eq!(answer.json::<Value>().unwrap(), json!({"ok": false, "error": code}));
    }
    assert!(downstream.ledger().is_empty());
    let dispositions: Vec<Disposition> =
        downstream.requests().iter().rev().take(2).map(|record| record.disposition).collect();
    assert_eq!(dispositions, [Disposition::NotFound, Disposition::NotFound], "an unknown method");
    // No method, or a nested path, is no Slack method: the native 404.
    for path in ["/api/", "/api/chat.postMessage/x"] {
        let answer = client.send(HttpRequest::get(path)).await.unwrap();
        assert_eq!(answer.status, 404, "{path}");
    }
    // A form body and a token parameter work as a JSON body and a header do.
    let form = HttpRequest::new(http::Method::POST, "/api/chat.postMessage")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("token=xoxb-acme&channel=C1&text=Hello".to_owned());
    assert_eq!(client.send(form).await.unwrap().json::<Value>().unwrap()["ok"], true);
    // Pages: newest first, a cursor to the next.
    for n in 0..3 {
        client
            .send(post("chat.postMessage", "acme", json!({"channel": "C9", "text": format!("m{n}")})))
            .await
            .unwrap();
    }
    let first: Value = client.send(history("acme", "channel=C9&limit=2")).await.unwrap().json().unwrap();
    assert_eq!(
        (first["messages"][0]["text"].as_str(), first["has_more"].as_bool()),
        (Some("m2"), Some(true))
    );
    let cursor = first["response_metadata"]["next_cursor"].as_str().unwrap().to_owned();
    let rest: Value = client
        .send(history("acme", &format!("channel=C9&limit=2&cursor={cursor}")))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!((rest["messages"][0]["text"].as_str(), rest["has_more"].as_bool()), (Some("m0"), Some(false)));
    let who: Value = client.send(post("auth.test", "acme", json!({}))).await.unwrap().json().unwrap();
    assert_eq!((who["ok"].as_bool(), who["team"].as_str()), (Some(true), Some("acme")));
}

/// The `(method, path)` rows of docs/vendors.md's Slack route table.
fn documented_routes() -> Vec<(String, String)> {
    let page = include_str!("../../../docs/vendors.md");
    let table = page
        .split("<!-- Every route the Slack twin serves")
        .nth(1)
        .expect("docs/vendors.md has the Slack route table")
        .split("\n\n")
        .nth(1)
        .expect("the route table follows the comment");
    let rows: Vec<(String, String)> = table
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(|cell| cell.trim().trim_matches('`')).collect();
            (cells[1].to_owned(), cells[2].to_owned())
        })
        .collect();
    assert!(rows.len() >= 5, "too few routes read: {rows:?}");
    rows
}

#[tokio::test(flavor = "current_thread")]
async fn docs_vendors_lists_exactly_the_routes_the_twin_serves() {
    let (_, client) = twin().await;
    let documented = documented_routes();
    let mut paths: Vec<String> = documented.iter().map(|(_, path)| path.clone()).collect();
    paths.sort();
    paths.dedup();
    for path in &paths {
        for method in ["GET", "POST", "PATCH", "PUT", "DELETE"] {
            let request = HttpRequest::new(method.parse().unwrap(), path.clone())
                .header("Authorization", "Bearer xoxb-acme")
                .header("Content-Type", "application/json")
                .body("{}".to_owned());
            let answer = client.send(request).await.unwrap();
            let served = !matches!(answer.status, 404 | 405);
            let listed = documented.contains(&(method.to_owned(), path.clone()));
            assert_eq!(served, listed, "{method} {path} answers {}", answer.status);
        }
    }
    let error = FaultRule::from_json(br#"{"match": {"path": "/nowhere"}, "action": "hold"}"#).unwrap_err();
    let listed = error.split_once("the routes are ").and_then(|(_, rest)| rest.split_once(" (")).unwrap().0;
    for path in listed.split(", ").filter(|path| path.starts_with("/api/")) {
        assert!(paths.iter().any(|served| served == path), "{path} is a rule's path the table does not list");
    }
}
