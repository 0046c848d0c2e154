//! The admin API (`/__admin/...`): the harness's, never the executors'. And the authorizer
//! executors ask (`GET /v1/authz`).

use axum::body::Body;
use axum::extract::{Path, State as AxumState};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use wire::Problem;

use crate::config::DownstreamConfig;
use crate::faults::FaultRule;
use crate::http::{bad_request, parse_json, parse_query, path_problem, read_body, Ds, Segment};
use crate::service::Downstream;

pub(crate) fn admin_routes() -> Router<Downstream> {
    Router::new()
        .route("/__admin/faults", post(admin_install_fault).get(admin_list_faults).delete(admin_clear_faults))
        .route("/__admin/faults/{id}/release", post(admin_release))
        .route("/__admin/ledger", get(admin_ledger))
        .route("/__admin/requests", get(admin_requests))
        .route("/__admin/webhooks", get(admin_webhooks))
        .route("/__admin/reset", post(admin_reset))
        .route("/__admin/tickets/{id}/touch", post(admin_touch))
        .route("/__admin/config", get(admin_get_config).put(admin_put_config))
        .route("/__admin/authz/revoke", post(admin_revoke))
        .method_not_allowed_fallback(admin_method_not_allowed)
}

/// `GET /v1/authz?actor=..&tool=..`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthzQuery {
    actor: String,
    tool: String,
}

/// `POST /__admin/authz/revoke`: `tool` absent revokes every tool.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Revocation {
    actor: String,
    #[serde(default)]
    tool: Option<String>,
}

// ------------------------------------------------------------------ admin

/// A method an admin route does not serve: a problem, as on the business API, but not
/// journaled (the journal is the business API's evidence).
async fn admin_method_not_allowed(method: http::Method, uri: http::Uri) -> Response {
    Problem::new(405, "method_not_allowed", format!("{method} is not allowed on {}", uri.path()))
        .into_response()
}

fn json_response(status: u16, value: &impl Serialize) -> Response {
    let status = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    let body = serde_json::to_string(value).expect("admin answers serialise");
    (status, [(http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn admin_install_fault(AxumState(ds): Ds, headers: http::HeaderMap, body: Body) -> Response {
    let bytes = match read_body(&headers, body).await {
        Ok(bytes) => bytes,
        Err(problem) => return problem.into_response(),
    };
    match FaultRule::from_json(&bytes) {
        Ok(rule) => json_response(201, &json!({"id": ds.install_fault(rule)})),
        Err(error) => bad_request("invalid_fault_rule", error).into_response(),
    }
}

async fn admin_list_faults(AxumState(ds): Ds) -> Response {
    let rules: Vec<Value> = ds.faults().iter().map(|rule| rule.to_json_value()).collect();
    json_response(200, &rules)
}

async fn admin_clear_faults(AxumState(ds): Ds) -> Response {
    ds.clear_faults();
    http::StatusCode::NO_CONTENT.into_response()
}

async fn admin_release(AxumState(ds): Ds, id: Segment, uri: http::Uri) -> Response {
    let id = match id {
        Ok(Path(id)) => id,
        Err(rejection) => return path_problem(uri.path(), &rejection).into_response(),
    };
    let Ok(id) = id.parse::<u64>() else {
        return bad_request("invalid_request", "the rule id must be a number").into_response();
    };
    match ds.release(id) {
        Ok(held) => json_response(200, &json!({"id": id, "released": held})),
        Err(error) => Problem::new(404, "not_found", error.to_string()).into_response(),
    }
}

async fn admin_ledger(AxumState(ds): Ds) -> Response {
    json_response(200, &ds.ledger())
}

async fn admin_requests(AxumState(ds): Ds) -> Response {
    json_response(200, &ds.requests())
}

async fn admin_webhooks(AxumState(ds): Ds) -> Response {
    json_response(200, &ds.webhook_deliveries())
}

pub(crate) async fn authorize(AxumState(ds): Ds, uri: http::Uri) -> Response {
    let query: AuthzQuery = match parse_query(&uri) {
        Ok(query) => query,
        Err(problem) => return problem.into_response(),
    };
    if query.actor.is_empty() || query.tool.is_empty() {
        return bad_request("invalid_query", "`actor` and `tool` must not be empty").into_response();
    }
    let allowed = ds.authorize(&query.actor, &query.tool);
    json_response(200, &json!({"actor": query.actor, "tool": query.tool, "allowed": allowed}))
}

async fn admin_revoke(AxumState(ds): Ds, headers: http::HeaderMap, body: Body) -> Response {
    let bytes = match read_body(&headers, body).await {
        Ok(bytes) => bytes,
        Err(problem) => return problem.into_response(),
    };
    let revocation: Revocation = match serde_json::from_slice(&bytes) {
        Ok(revocation) => revocation,
        Err(error) => {
            return bad_request("invalid_body", format!("a revocation is {{\"actor\", \"tool\"?}}: {error}"))
                .into_response()
        }
    };
    if revocation.actor.is_empty() {
        return bad_request("invalid_body", "`actor` must not be empty").into_response();
    }
    ds.revoke(&revocation.actor, revocation.tool.as_deref());
    http::StatusCode::NO_CONTENT.into_response()
}

async fn admin_reset(AxumState(ds): Ds) -> Response {
    ds.reset();
    http::StatusCode::NO_CONTENT.into_response()
}

async fn admin_touch(AxumState(ds): Ds, id: Segment, uri: http::Uri) -> Response {
    let id = match id {
        Ok(Path(id)) => id,
        Err(rejection) => return path_problem(uri.path(), &rejection).into_response(),
    };
    match ds.touch_ticket(&id) {
        Ok(version) => json_response(200, &json!({"ticket_id": id, "version": version})),
        Err(error) => Problem::new(404, "not_found", error.to_string()).into_response(),
    }
}

async fn admin_get_config(AxumState(ds): Ds) -> Response {
    json_response(200, &ds.config())
}

async fn admin_put_config(AxumState(ds): Ds, headers: http::HeaderMap, body: Body) -> Response {
    // Deserializing validates the configuration, naming a bad field.
    let config: DownstreamConfig = match read_body(&headers, body).await.and_then(|bytes| parse_json(&bytes))
    {
        Ok(config) => config,
        Err(problem) => return problem.into_response(),
    };
    ds.set_config(config.clone());
    json_response(200, &config)
}
