use std::sync::Arc;

use fake_downstream::{Downstream, DownstreamConfig, SystemClock};
use serde_json::{json, Value};
use wire::{HttpClient, HttpRequest, TcpAcceptor, TcpConnector, TransportError};

pub(crate) async fn serve_on_loopback() -> (Downstream, HttpClient) {
    let downstream =
        Downstream::new(DownstreamConfig::default(), Arc::new(SystemClock), Arc::new(TcpConnector));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.router()));
    (downstream, HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", port))
}

fn create(key: &str) -> HttpRequest {
    let ticket = json!({"tenant": "acme", "queue": "support", "subject": "s", "body": "b"});
    HttpRequest::json(http::Method::POST, "/v1/tickets", &ticket).header("Idempotency-Key", key)
}

#[tokio::test(flavor = "current_thread")]
async fn two_creates_with_one_key_make_one_effect_on_a_real_port() {
    let (downstream, client) = serve_on_loopback().await;
    let first = client.send(create("real-1")).await.unwrap();
    let second = client.send(create("real-1")).await.unwrap();
    assert_eq!((first.status, second.status), (201, 201));
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(downstream.ledger().len(), 1);
    let ledger: Vec<Value> = client.send(HttpRequest::get("/__admin/ledger")).await.unwrap().json().unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0]["idempotency_key"], "real-1");
}

#[tokio::test(flavor = "current_thread")]
async fn an_admin_commit_then_drop_rule_loses_the_answer_but_the_ledger_grows() {
    let (downstream, client) = serve_on_loopback().await;
    let rule = json!({"match": {"path": "/v1/tickets", "idempotency_key": "k3"}, "action": "commit_then_drop", "times": 1});
    let installed =
        client.send(HttpRequest::json(http::Method::POST, "/__admin/faults", &rule)).await.unwrap();
    assert_eq!(installed.status, 201);
    let lost = client.send(create("k3")).await;
    assert!(matches!(lost, Err(TransportError::ClosedWithoutResponse(_))), "{lost:?}");
    assert_eq!(downstream.ledger().len(), 1);
    let receipt = client.send(HttpRequest::get("/v1/receipts/k3?tenant=acme&service=tickets")).await.unwrap();
    assert_eq!(receipt.status, 200);

    let bad_rule = client
        .send(HttpRequest::json(http::Method::POST, "/__admin/faults", &json!({"action": "explode"})))
        .await
        .unwrap();
    assert_eq!(bad_rule.status, 400);
    let reset = client.send(HttpRequest::new(http::Method::POST, "/__admin/reset")).await.unwrap();
    assert_eq!(reset.status, 204);
    assert!(downstream.ledger().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn the_business_router_has_no_admin_api() {
    let downstream =
        Downstream::new(DownstreamConfig::default(), Arc::new(SystemClock), Arc::new(TcpConnector));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.business_router()));
    let client = HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", port);
    assert_eq!(client.send(create("k1")).await.unwrap().status, 201);
    for (method, path) in [
        (http::Method::POST, "/__admin/reset"),
        (http::Method::DELETE, "/__admin/faults"),
        (http::Method::GET, "/__admin/ledger"),
    ] {
        let answer = client.send(HttpRequest::json(method, path, &json!({}))).await.unwrap();
        assert_eq!(answer.status, 404, "{path}");
    }
    assert_eq!(downstream.ledger().len(), 1, "the ledger is untouched");
}

#[tokio::test(flavor = "current_thread")]
async fn requests_and_effects_carry_the_content_a_client_computes() {
    let (downstream, client) = serve_on_loopback().await;
    let charge = json!({"tenant": "acme", "customer": "c", "amount_minor": 5, "currency": "EUR"});
    let job = json!({"tenant": "acme", "job_type": "report"});
    for (path, body) in [("/v1/charges", &charge), ("/v1/jobs", &job)] {
        let request =
            HttpRequest::json(http::Method::POST, path, body).header("X-Replaylab-Request-Id", "w#1");
        let expected = fake_downstream::request_content("POST", path, None, &request.body);
        client.send(request).await.unwrap();
        let journaled = downstream.requests().last().cloned().expect("journaled");
        assert_eq!(journaled.content_digest, expected, "{path}");
        assert_eq!(journaled.request_id.as_deref(), Some("w#1"));
        let effect = downstream.ledger().last().cloned().expect("an effect");
        assert_eq!(Some(effect.content_digest), expected, "{path}");
        assert_eq!(effect.request_id.as_deref(), Some("w#1"));
        assert!(effect.answer.is_object(), "the committed answer is kept: {:?}", effect.answer);
    }
}

/// The authorizer out-of-process executors ask: `GET /v1/authz` answers per actor and tool; an
/// admin revocation (of one tool, or of every tool) changes its answer; a reset forgets it;
/// the observer hears every decision; bad queries and bodies are problems, not panics.
#[tokio::test(flavor = "current_thread")]
async fn the_authorizer_answers_what_revocations_say() {
    #[derive(Default)]
    struct Decisions(std::sync::Mutex<Vec<(String, String, bool)>>);
    impl fake_downstream::Observer for Decisions {
        fn effect(&self, _: &fake_downstream::Effect) {}
        fn request(&self, _: &fake_downstream::RequestRecord) {}
        fn authorization(&self, actor: &str, tool: &str, allowed: bool) {
            self.0.lock().unwrap().push((actor.to_owned(), tool.to_owned(), allowed));
        }
    }
    let (downstream, client) = serve_on_loopback().await;
    let decisions = Arc::new(Decisions::default());
    downstream.set_observer(decisions.clone());
    let allowed = |actor: &'static str, tool: &'static str| {
        let client = client.clone();
        async move {
            let answer =
                client.send(HttpRequest::get(format!("/v1/authz?actor={actor}&tool={tool}"))).await.unwrap();
            assert_eq!(answer.status, 200);
            let body: Value = answer.json().unwrap();
            body["allowed"].as_bool().expect("a decision")
        }
    };
    assert!(allowed("agent-7", "tickets.create").await);
    let revoke =
        |body: Value| client.send(HttpRequest::json(http::Method::POST, "/__admin/authz/revoke", &body));
    assert_eq!(revoke(json!({"actor": "agent-7", "tool": "tickets.create"})).await.unwrap().status, 204);
    assert!(!allowed("agent-7", "tickets.create").await);
    assert!(allowed("agent-7", "payments.charge").await, "only that tool");
    assert!(allowed("agent-8", "tickets.create").await, "only that actor");
    assert_eq!(revoke(json!({"actor": "agent-8"})).await.unwrap().status, 204);
    assert!(!allowed("agent-8", "payments.charge").await, "every tool");
    assert_eq!(
        *decisions.0.lock().unwrap(),
        [
            ("agent-7".to_owned(), "tickets.create".to_owned(), true),
            ("agent-7".to_owned(), "tickets.create".to_owned(), false),
            ("agent-7".to_owned(), "payments.charge".to_owned(), true),
            ("agent-8".to_owned(), "tickets.create".to_owned(), true),
            ("agent-8".to_owned(), "payments.charge".to_owned(), false),
        ]
    );
    assert!(downstream.requests().is_empty(), "authorization is not a business request");

    for bad in ["/v1/authz", "/v1/authz?actor=a", "/v1/authz?actor=&tool=t", "/v1/authz?actor=a&tool=t&x=1"] {
        assert_eq!(client.send(HttpRequest::get(bad)).await.unwrap().status, 400, "{bad}");
    }
    for bad in [json!({}), json!({"actor": ""}), json!({"actor": "a", "scope": "all"})] {
        assert_eq!(revoke(bad.clone()).await.unwrap().status, 400, "{bad}");
    }
    client.send(HttpRequest::new(http::Method::POST, "/__admin/reset")).await.unwrap();
    assert!(allowed("agent-8", "payments.charge").await, "a reset forgets revocations");
}
