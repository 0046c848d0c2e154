//! The Stripe twin over the core: the core's fault rules, journal, content digests and
//! idempotency records work for it as for the native dialect. (The twin's wire format is checked
//! by Stripe's own SDKs: `tests/vendor-sdk/`, run by `harness/tests/it/vendor_sdk.rs`.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fake_downstream::{Disposition, Downstream, DownstreamConfig, EffectKind, FaultRule};
use serde_json::{json, Value};
use wire::{HttpClient, HttpRequest, TcpAcceptor, TcpConnector, TransportError};

/// The twin on a loopback port, with a clock the test moves.
async fn twin() -> (Downstream, HttpClient, Arc<AtomicU64>) {
    let now_ms = Arc::new(AtomicU64::new(0));
    let clock = now_ms.clone();
    let downstream = Downstream::new(
        DownstreamConfig::default(),
        Arc::new(move || clock.load(Ordering::SeqCst)),
        Arc::new(TcpConnector),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.router()));
    (downstream, HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", port), now_ms)
}

const INTENT: &str =
    "amount=5000&currency=eur&customer=cus_42&confirm=true&payment_method=pm_card_visa&metadata[order]=1182";

fn form(path: &str, body: &str, tenant: &str, key: Option<&str>) -> HttpRequest {
    let request = HttpRequest::new(http::Method::POST, path)
        .header("Authorization", format!("Bearer sk_test_{tenant}"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body.to_owned());
    match key {
        Some(key) => request.header("Idempotency-Key", key),
        None => request,
    }
}

fn get(path: &str, tenant: &str) -> HttpRequest {
    HttpRequest::get(path).header("Authorization", format!("Bearer sk_test_{tenant}"))
}

#[tokio::test(flavor = "current_thread")]
async fn a_lost_answer_after_the_commit_is_replayed_under_the_key_and_found_by_search() {
    let (downstream, client, _) = twin().await;
    let rule = FaultRule::from_json(
        br#"{"match": {"method": "POST", "path": "/v1/payment_intents"}, "action": "commit_then_drop", "times": 1}"#,
    )
    .expect("a rule on a Stripe route is valid");
    downstream.install_fault(rule);
    let lost = client.send(form("/v1/payment_intents", INTENT, "acme", Some("order-1182"))).await;
    assert!(matches!(lost, Err(TransportError::ClosedWithoutResponse(_))), "{lost:?}");
    assert_eq!(downstream.ledger().len(), 1, "committed before the answer was lost");

    let retry = client.send(form("/v1/payment_intents", INTENT, "acme", Some("order-1182"))).await.unwrap();
    assert_eq!(retry.status, 200);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    let intent: Value = retry.json().unwrap();
    assert_eq!((intent["id"].as_str(), intent["status"].as_str()), (Some("pi_1"), Some("succeeded")));
    assert_eq!(downstream.ledger().len(), 1, "a replay is no effect");

    let query = "/v1/payment_intents/search?query=metadata%5B%27order%27%5D%3A%271182%27";
    let found: Value = client.send(get(query, "acme")).await.unwrap().json().unwrap();
    assert_eq!(found["data"][0]["id"], "pi_1");
    let elsewhere: Value = client.send(get(query, "globex")).await.unwrap().json().unwrap();
    assert_eq!(elsewhere["data"], json!([]), "another tenant's key sees none of it");

    let effect = &downstream.ledger()[0];
    assert_eq!((effect.kind, effect.effect_reference.as_str()), (EffectKind::ChargeCreated, "pi_1"));
    assert_eq!(effect.tenant, "acme");
    let expected = fake_downstream::request_content(
        "POST",
        "/v1/payment_intents",
        Some("Bearer sk_test_acme"),
        INTENT.as_bytes(),
    );
    assert_eq!(Some(effect.content_digest.clone()), expected, "the harness computes the effect's content");
    let native = fake_downstream::content_digest(
        EffectKind::ChargeCreated,
        "acme",
        json!({"customer": "cus_42", "amount_minor": 5000, "currency": "EUR"}).as_object().unwrap(),
    );
    assert_eq!(effect.content_digest, native, "in the core's terms: the native charge of the same content");
    let journal = downstream.requests();
    let dispositions: Vec<Disposition> = journal.iter().map(|record| record.disposition).collect();
    assert_eq!(&dispositions[..2], [Disposition::Committed, Disposition::Replayed]);
}

#[tokio::test(flavor = "current_thread")]
async fn a_key_in_flight_is_a_409_and_other_parameters_under_it_a_400() {
    let (downstream, client, _) = twin().await;
    let rule =
        FaultRule::from_json(br#"{"match": {"path": "/v1/payment_intents"}, "action": "hold", "times": 1}"#)
            .unwrap();
    let held = downstream.install_fault(rule);
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.send(form("/v1/payment_intents", INTENT, "acme", Some("k"))).await }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while downstream.held(held) == 0 {
        assert!(std::time::Instant::now() < deadline, "the first request never reached the hold");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let second = client.send(form("/v1/payment_intents", INTENT, "acme", Some("k"))).await.unwrap();
    let error: Value = second.json().unwrap();
    assert_eq!((second.status, error["error"]["code"].as_str()), (409, Some("idempotency_key_in_use")));
    downstream.release(held).unwrap();
    assert_eq!(first.await.unwrap().unwrap().status, 200);
    let other = INTENT.replace("5000", "5100");
    let mismatch = client.send(form("/v1/payment_intents", &other, "acme", Some("k"))).await.unwrap();
    let error: Value = mismatch.json().unwrap();
    assert_eq!((mismatch.status, error["error"]["type"].as_str()), (400, Some("idempotency_error")));
    // The same key under another tenant is another key.
    let globex = client.send(form("/v1/payment_intents", &other, "globex", Some("k"))).await.unwrap();
    assert_eq!(globex.status, 200);
    assert_eq!(downstream.ledger().len(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn a_key_is_kept_24_hours_and_a_decline_is_replayed_under_it() {
    let (downstream, client, now_ms) = twin().await;
    assert_eq!(
        client.send(form("/v1/payment_intents", INTENT, "acme", Some("day"))).await.unwrap().status,
        200
    );
    now_ms.store(24 * 60 * 60 * 1000 - 1, Ordering::SeqCst);
    let within = client.send(form("/v1/payment_intents", INTENT, "acme", Some("day"))).await.unwrap();
    assert_eq!(within.header("idempotent-replayed"), Some("true"));
    now_ms.store(24 * 60 * 60 * 1000, Ordering::SeqCst);
    let after = client.send(form("/v1/payment_intents", INTENT, "acme", Some("day"))).await.unwrap();
    assert_eq!((after.status, after.header("idempotent-replayed")), (200, None));
    assert_eq!(downstream.ledger().len(), 2, "past retention the key is new: a second charge");

    let declined = INTENT.replace("pm_card_visa", "pm_card_chargeDeclined");
    let first = client.send(form("/v1/payment_intents", &declined, "acme", Some("no"))).await.unwrap();
    let again = client.send(form("/v1/payment_intents", &declined, "acme", Some("no"))).await.unwrap();
    assert_eq!((first.status, again.status), (402, 402));
    assert_eq!(again.header("idempotent-replayed"), Some("true"), "Stripe keeps what began executing");
    // A validation error is not kept: the corrected request under the same key goes through.
    let invalid =
        client.send(form("/v1/payment_intents", "currency=eur", "acme", Some("fix"))).await.unwrap();
    assert_eq!(invalid.status, 400);
    let fixed = client.send(form("/v1/payment_intents", INTENT, "acme", Some("fix"))).await.unwrap();
    assert_eq!((fixed.status, fixed.header("idempotent-replayed")), (200, None));
    assert_eq!(downstream.ledger().len(), 3);
}

#[tokio::test(flavor = "current_thread")]
async fn native_clients_see_the_native_api_alone_and_a_commit_then_error_reads_as_stripe() {
    let (downstream, client, _) = twin().await;
    // Without a Stripe key, the twin's routes are no route; the native charge is served.
    let unkeyed = client.send(HttpRequest::get("/v1/payment_intents/pi_1")).await.unwrap();
    assert_eq!(unkeyed.status, 404);
    let native = json!({"tenant": "acme", "customer": "cus_42", "amount_minor": 5, "currency": "EUR"});
    let charged = client.send(HttpRequest::json(http::Method::POST, "/v1/charges", &native)).await.unwrap();
    assert_eq!(charged.status, 201);
    let rule = FaultRule::from_json(
        br#"{"match": {"path": "/v1/charges"}, "action": "commit_then_error", "status": 503, "times": 1}"#,
    )
    .unwrap();
    downstream.install_fault(rule);
    let failed = client
        .send(form("/v1/charges", "amount=700&currency=usd&source=tok_visa", "acme", None))
        .await
        .unwrap();
    let error: Value = failed.json().unwrap();
    assert_eq!((failed.status, error["error"]["type"].as_str()), (503, Some("api_error")));
    assert_eq!(failed.header("content-type"), Some("application/json"));
    assert!(failed.header("request-id").is_some_and(|id| id.starts_with("req_")));
    let kinds: Vec<EffectKind> = downstream.ledger().iter().map(|effect| effect.kind).collect();
    assert_eq!(kinds, [EffectKind::ChargeCreated, EffectKind::ChargeCreated], "committed, then the error");
}

/// The `(method, path)` rows of docs/vendors.md's route table.
fn documented_routes() -> Vec<(String, String)> {
    let page = include_str!("../../../docs/vendors.md");
    let table =
        page.split("## 2. Routes").nth(1).expect("docs/vendors.md has section 2").split("\n\n").nth(2);
    let rows: Vec<(String, String)> = table
        .expect("the route table follows the comment")
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(|cell| cell.trim().trim_matches('`')).collect();
            (cells[1].to_owned(), cells[2].to_owned())
        })
        .collect();
    assert!(rows.len() >= 7, "too few routes read from docs/vendors.md: {rows:?}");
    rows
}

#[tokio::test(flavor = "current_thread")]
async fn docs_vendors_lists_exactly_the_routes_the_twin_serves() {
    let (_, client, _) = twin().await;
    let documented = documented_routes();
    // Every business path a fault rule may name, as the crate lists them.
    let error = FaultRule::from_json(br#"{"match": {"path": "/nowhere"}, "action": "hold"}"#).unwrap_err();
    let listed = error.split_once("the routes are ").and_then(|(_, rest)| rest.split_once(" (")).unwrap().0;
    let mut paths: Vec<String> = listed.split(", ").map(str::to_owned).collect();
    paths.extend(documented.iter().map(|(_, path)| path.clone()));
    // The native dialect's own paths answer whatever key a request carries (docs/downstream.md
    // holds them); `/v1/charges` is both dialects'.
    // Another twin's paths (in its own table of docs/vendors.md) are that twin's test's.
    let native = include_str!("../../../docs/downstream.md");
    let twins = include_str!("../../../docs/vendors.md");
    let twin_paths: Vec<&str> = documented.iter().map(|(_, path)| path.as_str()).collect();
    paths.retain(|path| {
        let elsewhere =
            native.contains(&format!("| `{path}` |")) || twins.contains(&format!("` | `{path}` |"));
        twin_paths.contains(&path.as_str()) || !elsewhere
    });
    paths.sort();
    paths.dedup();
    for path in &paths {
        let sample = path.replace("{id}", "x").replace("{key}", "x");
        for method in ["GET", "POST", "PATCH", "PUT", "DELETE"] {
            let request = HttpRequest::new(method.parse().unwrap(), sample.clone())
                .header("Authorization", "Bearer sk_test_acme")
                .header("Content-Type", "application/x-www-form-urlencoded");
            let answer = client.send(request).await.unwrap();
            let unserved = answer.status == 405
                || (answer.status == 404
                    && answer.json::<Value>().is_ok_and(|body| body["error"]["code"] != "resource_missing"));
            let listed = documented.contains(&(method.to_owned(), path.clone()));
            assert_eq!(!unserved, listed, "{method} {path} with a Stripe key answers {}", answer.status);
        }
        // A path the fault rules accept is served by some route (the table `paths.rs` is not stale).
        assert!(
            documented.iter().any(|(_, served)| served == path),
            "{path} is a rule's path no route serves"
        );
    }
}
