//! The GitHub twin over the core: no idempotency key (a resend after a lost answer is a second
//! issue), reads that find what was made, content digests in the core's terms, the rate-limit
//! rule. (Its wire format is checked by PyGithub: `tests/vendor-sdk/`, run by
//! `harness/tests/it/vendor_sdk.rs`.)

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

fn send(method: &str, path: &str, tenant: &str, body: Option<Value>) -> HttpRequest {
    let request = HttpRequest::new(method.parse().unwrap(), path)
        .header("Authorization", format!("token ghp_{tenant}"));
    match body {
        Some(body) => request.header("Content-Type", "application/json").body(body.to_string()),
        None => request,
    }
}

const ISSUES: &str = "/repos/acme-org/support/issues";

#[tokio::test(flavor = "current_thread")]
async fn a_resend_after_a_lost_answer_is_a_second_issue_and_a_list_by_label_finds_the_first() {
    let (downstream, client) = twin().await;
    let rule = FaultRule::from_json(
        br#"{"match": {"method": "POST", "path": "/repos/{owner}/{repo}/issues"}, "action": "commit_then_drop", "times": 1}"#,
    )
    .expect("a rule with {name} segments on a GitHub route is valid");
    downstream.install_fault(rule);
    let issue = json!({"title": "Refund", "body": "Customer asks.\n\n<!-- op: acme/run_1/step -->", "labels": ["op-1"]});
    let lost =
        client.send(send("POST", ISSUES, "acme", Some(issue.clone())).header("Idempotency-Key", "k1")).await;
    assert!(matches!(lost, Err(TransportError::ClosedWithoutResponse(_))), "{lost:?}");
    assert_eq!(downstream.ledger().len(), 1, "committed before the answer was lost");

    // Read back first: the careful way.
    let listed =
        client.send(send("GET", &format!("{ISSUES}?labels=op-1&state=all"), "acme", None)).await.unwrap();
    assert_eq!(listed.status, 200);
    let listed: Value = listed.json().unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(listed[0]["html_url"], "https://github.com/acme-org/support/issues/1");
    assert_eq!(
        fake_downstream::answer_references(200, listed.to_string().as_bytes()),
        ["https://github.com/acme-org/support/issues/1"],
        "a list shows the server the issue it made"
    );
    let other: Value = client
        .send(send("GET", &format!("{ISSUES}?labels=op-1&state=all"), "globex", None))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(other, json!([]), "another tenant's token sees none of it");

    // The blind resend: the same key, and still a second issue.
    let again = client
        .send(send("POST", ISSUES, "acme", Some(issue.clone())).header("Idempotency-Key", "k1"))
        .await
        .unwrap();
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), None);
    let second: Value = again.json().unwrap();
    assert_eq!(second["number"], 2);
    let ledger = downstream.ledger();
    assert_eq!(ledger.len(), 2, "GitHub has no idempotency key");
    assert!(ledger
        .iter()
        .all(|effect| effect.kind == EffectKind::TicketCreated && effect.idempotency_key.is_none()));

    // In the core's terms: the native ticket of the repository's name, the title and the body
    // as GitHub shows it.
    let native = fake_downstream::content_digest(
        EffectKind::TicketCreated,
        "acme",
        json!({"queue": "support", "subject": "Refund", "body": "Customer asks."}).as_object().unwrap(),
    );
    assert_eq!(ledger[0].content_digest, native);
    assert_eq!(
        fake_downstream::request_content(
            "POST",
            ISSUES,
            Some("token ghp_acme"),
            issue.to_string().as_bytes()
        ),
        Some(native)
    );
    assert_eq!(
        fake_downstream::request_tenant(ISSUES, Some("Bearer ghp_acme"), b"{}").as_deref(),
        Some("acme")
    );
    let dispositions: Vec<Disposition> =
        downstream.requests().iter().map(|record| record.disposition).collect();
    assert_eq!(
        dispositions,
        [Disposition::Committed, Disposition::Read, Disposition::Read, Disposition::Committed]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_rate_limited_rule_is_a_403_with_retry_after_and_no_effect() {
    let (downstream, client) = twin().await;
    let rule = FaultRule::from_json(
        br#"{"match": {"method": "POST", "path": "/repos/*"}, "action": "rate_limited", "delay": "2s"}"#,
    )
    .unwrap();
    downstream.install_fault(rule);
    let answer = client.send(send("POST", ISSUES, "acme", Some(json!({"title": "T"})))).await.unwrap();
    assert_eq!(answer.status, 403);
    assert_eq!(answer.header("retry-after"), Some("2"));
    let body: Value = answer.json().unwrap();
    assert!(
        body["message"].as_str().unwrap().starts_with("You have exceeded a secondary rate limit"),
        "{body}"
    );
    assert!(downstream.ledger().is_empty());
    assert_eq!(downstream.requests()[0].disposition, Disposition::RateLimited);
    let answer = client.send(send("POST", ISSUES, "acme", Some(json!({"title": "T"})))).await.unwrap();
    assert_eq!(answer.status, 201, "the rule fired once");
    for bad in ["1.5s", "0s"] {
        let text =
            format!(r#"{{"match": {{"path": "/repos/*"}}, "action": "rate_limited", "delay": "{bad}"}}"#);
        assert!(FaultRule::from_json(text.as_bytes()).unwrap_err().contains("whole seconds"), "{bad}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_state_change_is_an_effect_an_edit_is_not_and_a_comment_is_a_message() {
    let (downstream, client) = twin().await;
    let made =
        client.send(send("POST", ISSUES, "acme", Some(json!({"title": "T", "body": "B"})))).await.unwrap();
    assert_eq!(made.status, 201);
    let one = format!("{ISSUES}/1");
    let edit = client.send(send("PATCH", &one, "acme", Some(json!({"title": "T2"})))).await.unwrap();
    assert_eq!(edit.status, 200);
    let closed = client.send(send("PATCH", &one, "acme", Some(json!({"state": "closed"})))).await.unwrap();
    let closed: Value = closed.json().unwrap();
    assert_eq!(
        (closed["state"].as_str(), closed["state_reason"].as_str()),
        (Some("closed"), Some("completed"))
    );
    let again = client.send(send("PATCH", &one, "acme", Some(json!({"state": "closed"})))).await.unwrap();
    assert_eq!(again.status, 200);
    let comment = client
        .send(send("POST", &format!("{one}/comments"), "acme", Some(json!({"body": "Done."}))))
        .await
        .unwrap();
    assert_eq!(comment.status, 201);
    let kinds: Vec<EffectKind> = downstream.ledger().iter().map(|effect| effect.kind).collect();
    assert_eq!(kinds, [EffectKind::TicketCreated, EffectKind::TicketStatusChanged, EffectKind::MessageSent]);
    let dispositions: Vec<Disposition> =
        downstream.requests().iter().map(|record| record.disposition).collect();
    assert_eq!(&dispositions[1..4], [Disposition::Committed, Disposition::Committed, Disposition::Unchanged]);
    let comments: Value =
        client.send(send("GET", &format!("{one}/comments"), "acme", None)).await.unwrap().json().unwrap();
    assert_eq!(comments[0]["body"], "Done.");
    let found: Value = client
        .send(send(
            "GET",
            "/search/issues?q=%22Done.%22+in%3Acomments+repo%3Aacme-org%2Fsupport",
            "acme",
            None,
        ))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(found["total_count"], 1);
    let missing = client.send(send("GET", &format!("{ISSUES}/9"), "acme", None)).await.unwrap();
    assert_eq!(
        (missing.status, missing.json::<Value>().unwrap()["message"].clone()),
        (404, json!("Not Found"))
    );
    let invalid = client.send(send("POST", ISSUES, "acme", Some(json!({"body": "no title"})))).await.unwrap();
    let body: Value = invalid.json().unwrap();
    assert_eq!((invalid.status, body["errors"][0]["code"].as_str()), (422, Some("missing_field")));
    let unauthenticated = client.send(HttpRequest::new(http::Method::GET, ISSUES)).await.unwrap();
    assert_eq!(unauthenticated.status, 401);
    let stripe_key =
        client.send(HttpRequest::get(ISSUES).header("Authorization", "Bearer sk_test_acme")).await.unwrap();
    assert_eq!(
        (stripe_key.status, stripe_key.json::<Value>().unwrap()["message"].clone()),
        (401, json!("Bad credentials"))
    );
}

/// The `(method, path)` rows of docs/vendors.md's GitHub route table.
fn documented_routes() -> Vec<(String, String)> {
    let page = include_str!("../../../docs/vendors.md");
    let table = page
        .split("<!-- Every route the GitHub twin serves")
        .nth(1)
        .expect("docs/vendors.md has the GitHub route table")
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
    assert!(rows.len() >= 8, "too few routes read: {rows:?}");
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
        let sample = path.replace("{owner}", "o").replace("{repo}", "r").replace("{number}", "1");
        for method in ["GET", "POST", "PATCH", "PUT", "DELETE"] {
            let request = send(method, &sample, "acme", (method != "GET").then(|| json!({})));
            let answer = client.send(request).await.unwrap();
            let served = answer.status != 405
                && !(answer.status == 404
                    && answer.json::<Value>().is_ok_and(|body| body["message"] != "Not Found"));
            let listed = documented.contains(&(method.to_owned(), path.clone()));
            assert_eq!(served, listed, "{method} {path} answers {}", answer.status);
        }
    }
    // Every path of the twin a fault rule may name is in the table.
    let error = FaultRule::from_json(br#"{"match": {"path": "/nowhere"}, "action": "hold"}"#).unwrap_err();
    let listed = error.split_once("the routes are ").and_then(|(_, rest)| rest.split_once(" (")).unwrap().0;
    for path in listed.split(", ").filter(|path| path.starts_with("/repos") || path.starts_with("/search")) {
        assert!(paths.iter().any(|served| served == path), "{path} is a rule's path the table does not list");
    }
}

/// The `(rel, page)` pairs of a list page's `Link` header, in order.
async fn links(client: &HttpClient, page: usize) -> Vec<(String, String)> {
    let path = format!("{ISSUES}?state=all&per_page=2&page={page}");
    let answer = client.send(send("GET", &path, "acme", None)).await.unwrap();
    assert_eq!(answer.status, 200);
    answer
        .header("link")
        .unwrap_or_default()
        .split(", ")
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (url, rel) = part.split_once("; ").expect("<url>; rel=\"...\"");
            let page = url.rsplit("page=").next().unwrap().trim_end_matches('>');
            (rel.trim_start_matches("rel=").trim_matches('"').to_owned(), page.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_page_links_its_neighbours_and_both_ends_as_github_does() {
    let (_, client) = twin().await;
    for n in 1..=5 {
        let made = client.send(send("POST", ISSUES, "acme", Some(json!({"title": format!("T{n}")})))).await;
        assert_eq!(made.unwrap().status, 201);
    }
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter().map(|(rel, page)| ((*rel).to_owned(), (*page).to_owned())).collect()
    };
    assert_eq!(links(&client, 1).await, pairs(&[("next", "2"), ("last", "3")]));
    // PyGithub's PaginatedList.reversed starts at `last` and walks back by `prev`.
    assert_eq!(
        links(&client, 2).await,
        pairs(&[("prev", "1"), ("next", "3"), ("last", "3"), ("first", "1")])
    );
    assert_eq!(links(&client, 3).await, pairs(&[("prev", "2"), ("first", "1")]));
}
