//! The GitHub twin: GitHub's REST API for issues as the official SDKs use it (PyGithub,
//! `@octokit/rest`), one module over the core. JSON bodies, the tenant from the token
//! (`Authorization: token ghp_<tenant>` or `Bearer`), GitHub's error shape (`{"message",
//! "documentation_url", "status"}`, `422 Validation Failed` with `errors`), its secondary rate
//! limit (`403` with `Retry-After`), and **no idempotency key at all**: every `POST` creates.
//! A careful client finds out what it made by reading back (a list filtered by a label, a
//! search for a marker). docs/vendors.md says what it serves and where it differs from GitHub.
//!
//! Effects in the core's terms: an issue is a `ticket_created` (its business content `queue` =
//! the repository's name, `subject` = the title, `body` = the body without its HTML comments,
//! which GitHub does not show), a change of an issue's `state` a `ticket_status_changed`
//! (`ticket_id` = `REPO#NUMBER`, `status` = the state), a comment a `message_sent` (`to` =
//! `REPO#NUMBER`, `body`). An effect's reference is the object's `html_url`.

use axum::extract::{Path, Request, State as AxumState};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Map, Value};

use crate::config::Service;
use crate::content::{content_digest, digest_of};
use crate::http::{check_length, commit, read_exchange, read_limited, split, Ds, Incoming, Made};
use crate::ledger::{Disposition, EffectKind};
use crate::service::{Dialect, Downstream, Exchange, KeyConflict, Owned, Processed, State};

/// Where GitHub's answers point their readers.
const DOCS: &str = "https://docs.github.com/rest";
/// The web address issues' `html_url` names (the reference of an effect).
const WEB: &str = "https://github.com";
/// The longest title and body GitHub accepts, in characters.
const MAX_TITLE_CHARS: usize = 256;
const MAX_BODY_CHARS: usize = 65_536;
/// `per_page`: 1 to 100, default 30.
const MAX_PER_PAGE: usize = 100;
const DEFAULT_PER_PAGE: usize = 30;
/// `created_at` in the simulation, whose clock starts at 0: milliseconds from
/// 2026-01-01T00:00:00Z.
const SIMULATION_EPOCH_MS: u64 = 1_767_225_600_000;

/// The GitHub dialect, as every GitHub request's [`Exchange`] names it.
pub(crate) static GITHUB: GitHub = GitHub;

/// GitHub's error shape; it has no idempotency key, so no key conflict ever arises.
pub(crate) struct GitHub;

impl Dialect for GitHub {
    fn name(&self) -> &'static str {
        "github"
    }

    fn key_conflict(&self, _conflict: KeyConflict) -> Processed {
        // Never asked: a GitHub exchange carries no key.
        GitHubError::new(500, "Server Error").processed(Disposition::Invalid)
    }

    fn injected_error(&self, status: u16) -> Value {
        GitHubError::new(status, "Server Error").body()
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
        let mut error = GitHubError::new(
            403,
            "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
        );
        error.documentation_url = "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits";
        (403, error.body())
    }
}

// ------------------------------------------------------------------ the token

/// The tenant a GitHub token names: `ghp_<tenant>` or `github_pat_<tenant>`, after `token` or
/// `Bearer`. `None` without an `Authorization` header.
pub(crate) fn tenant_of_token(authorization: Option<&str>) -> Option<Result<String, GitHubError>> {
    let value = authorization?;
    let bad = || GitHubError::new(401, "Bad credentials");
    let Some((scheme, token)) = value.trim().split_once(' ') else { return Some(Err(bad())) };
    if !(scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer")) {
        return Some(Err(bad()));
    }
    let token = token.trim();
    let tenant = token.strip_prefix("ghp_").or_else(|| token.strip_prefix("github_pat_"));
    let valid = tenant.filter(|tenant| {
        (1..=200).contains(&tenant.len())
            && tenant.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    });
    Some(valid.map(str::to_owned).ok_or_else(bad))
}

// ------------------------------------------------------------------ errors

/// GitHub's error body: `{"message", "documentation_url", "status"}`, and `errors` for a 422.
#[derive(Debug, Clone)]
pub(crate) struct GitHubError {
    status: u16,
    message: String,
    documentation_url: &'static str,
    errors: Vec<Value>,
}

impl GitHubError {
    fn new(status: u16, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), documentation_url: DOCS, errors: Vec::new() }
    }

    fn not_found() -> Self {
        Self::new(404, "Not Found")
    }

    /// `422 Validation Failed`, naming the resource, the field and GitHub's code
    /// (`missing_field`, `invalid`, `custom` with a message).
    fn invalid(resource: &str, field: &str, code: &str, message: Option<String>) -> Self {
        let mut error = json!({"resource": resource, "field": field, "code": code});
        if let Some(message) = message {
            error["message"] = json!(message);
        }
        Self { errors: vec![error], ..Self::new(422, "Validation Failed") }
    }

    fn body(&self) -> Value {
        let mut body = json!({
            "message": self.message,
            "documentation_url": self.documentation_url,
            "status": self.status.to_string(),
        });
        if !self.errors.is_empty() {
            body["errors"] = Value::Array(self.errors.clone());
        }
        body
    }

    fn disposition(&self) -> Disposition {
        if self.status == 404 {
            Disposition::NotFound
        } else {
            Disposition::Invalid
        }
    }

    fn processed(&self, disposition: Disposition) -> Processed {
        Processed { status: self.status, body: self.body(), disposition, effect_seq: None, started_job: None }
    }
}

// ------------------------------------------------------------------ routes

/// The twin's routes (`paths::GITHUB`).
pub(crate) fn routes() -> Router<Downstream> {
    Router::new()
        .route("/repos/{owner}/{repo}", get(get_repository))
        .route("/repos/{owner}/{repo}/issues", get(list_issues).post(create_issue))
        .route("/repos/{owner}/{repo}/issues/{number}", get(get_issue).patch(update_issue))
        .route("/repos/{owner}/{repo}/issues/{number}/comments", get(list_comments).post(create_comment))
        .route("/search/issues", get(search_issues))
}

/// A request read this far: its parts, its tenant, the API's base as the client reached it,
/// and its JSON body (a `POST` or `PATCH`) or query parameters (a `GET`).
struct Read {
    incoming: Incoming,
    tenant: String,
    api: String,
    params: Map<String, Value>,
}

fn authorization(incoming: &Incoming) -> Option<String> {
    incoming.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Reads a request's tenant and parameters, or answers the refusal (journaled).
async fn read(ds: &Downstream, request: Request) -> Result<Read, Response> {
    let mut incoming = split(request);
    let tenant = match tenant_of_token(authorization(&incoming).as_deref()) {
        Some(Ok(tenant)) => tenant,
        Some(Err(error)) => return Err(refuse(ds, &incoming, None, &error)),
        None => return Err(refuse(ds, &incoming, None, &GitHubError::new(401, "Requires authentication"))),
    };
    let host = incoming.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("localhost");
    let api = format!("http://{host}");
    let params = if incoming.method == "GET" {
        form_urlencoded::parse(incoming.uri.query().unwrap_or_default().as_bytes())
            .map(|(name, value)| (name.into_owned(), Value::String(value.into_owned())))
            .collect()
    } else {
        let body = std::mem::take(&mut incoming.body);
        let bytes = match check_length(&incoming.headers) {
            Ok(()) => read_limited(body).await,
            Err(problem) => Err(problem),
        };
        let bytes = match bytes {
            Ok(bytes) => bytes,
            Err(problem) => {
                return Err(refuse(
                    ds,
                    &incoming,
                    Some(&tenant),
                    &GitHubError::new(problem.status, problem.detail),
                ))
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            Map::new()
        } else {
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(Value::Object(params)) => params,
                _ => {
                    return Err(refuse(
                        ds,
                        &incoming,
                        Some(&tenant),
                        &GitHubError::new(400, "Problems parsing JSON"),
                    ))
                }
            }
        }
    };
    Ok(Read { incoming, tenant, api, params })
}

fn refuse(ds: &Downstream, incoming: &Incoming, tenant: Option<&str>, error: &GitHubError) -> Response {
    ds.journal_refused(incoming, error.disposition(), tenant.map(str::to_owned), None, error.status);
    respond(ds, error.status, &error.body(), None)
}

/// A JSON answer with GitHub's `X-GitHub-Request-Id` (and a `Link` header for a page).
fn respond(ds: &Downstream, status: u16, body: &Value, link: Option<String>) -> Response {
    let status = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut response =
        (status, [(http::header::CONTENT_TYPE, "application/json; charset=utf-8")], body.to_string())
            .into_response();
    with_request_id(ds, &mut response);
    if let Some(value) = link.and_then(|link| http::HeaderValue::from_str(&link).ok()) {
        response.headers_mut().insert(http::header::LINK, value);
    }
    response
}

fn with_request_id(ds: &Downstream, response: &mut Response) {
    let id = ds.lock().next_reference("gh_request");
    if let Ok(value) = http::HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-github-request-id", value);
    }
}

/// Runs `exchange` through the core and adds the request id to the answer.
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

/// A state-changing request's exchange: no key (GitHub has none), its request digest, and its
/// business content in the core's terms when it makes an effect of `kind`.
fn change(read: &Read, service: Service, kind: Option<(EffectKind, Map<String, Value>)>) -> Exchange {
    let digest = digest_of(
        &json!({"method": read.incoming.method, "path": read.incoming.path, "params": read.params}),
    );
    Exchange {
        digest: Some(digest),
        content: kind.map(|(kind, fields)| content_digest(kind, &read.tenant, &fields)),
        ..read_exchange(&GITHUB, &read.incoming, service, &read.tenant)
    }
}

// ------------------------------------------------------------------ parameters

fn check_name(what: &str, name: &str) -> Result<(), GitHubError> {
    let valid = (1..=100).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(GitHubError::invalid("Repository", what, "invalid", None))
    }
}

/// An optional text parameter of at most `max` characters; another type is a 422.
fn text<'a>(
    params: &'a Map<String, Value>,
    resource: &str,
    name: &str,
    max: usize,
) -> Result<Option<&'a str>, GitHubError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.chars().count() <= max => Ok(Some(text)),
        Some(Value::String(_)) => Err(GitHubError::invalid(
            resource,
            name,
            "custom",
            Some(format!("{name} is too long (maximum is {max} characters)")),
        )),
        Some(_) => Err(GitHubError::invalid(resource, name, "invalid", None)),
    }
}

/// `labels`: names, or objects with a `name`.
fn labels(params: &Map<String, Value>) -> Result<Option<Vec<String>>, GitHubError> {
    let Some(value) = params.get("labels") else { return Ok(None) };
    let invalid = || GitHubError::invalid("Label", "name", "invalid", None);
    let list = value.as_array().ok_or_else(invalid)?;
    list.iter()
        .map(|label| {
            let name =
                label.as_str().or_else(|| label.get("name").and_then(Value::as_str)).ok_or_else(invalid)?;
            if name.is_empty() || name.chars().count() > 100 {
                return Err(invalid());
            }
            Ok(name.to_owned())
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `assignees` (logins) or the older `assignee`.
fn assignees(params: &Map<String, Value>) -> Result<Option<Vec<String>>, GitHubError> {
    let invalid = || GitHubError::invalid("Issue", "assignees", "invalid", None);
    if let Some(value) = params.get("assignees") {
        let list = value.as_array().ok_or_else(invalid)?;
        return list
            .iter()
            .map(|login| login.as_str().map(str::to_owned).ok_or_else(invalid))
            .collect::<Result<_, _>>()
            .map(Some);
    }
    match params.get("assignee") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(login)) => Ok(Some(vec![login.clone()])),
        Some(_) => Err(invalid()),
    }
}

/// The body as business content: without its HTML comments (`<!-- ... -->`, which GitHub does
/// not show) and the white space before each, so that a marker a careful server hides there is
/// not content.
fn shown_body(body: &str) -> String {
    let mut shown = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(start) = rest.find("<!--") {
        let Some(end) = rest[start..].find("-->") else { break };
        shown.push_str(rest[..start].trim_end());
        rest = &rest[start + end + 3..];
    }
    shown.push_str(rest);
    shown
}

fn issue_content(repo: &str, title: &str, body: Option<&str>) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("queue".into(), json!(repo));
    fields.insert("subject".into(), json!(title));
    fields.insert("body".into(), body.map_or(Value::Null, |body| json!(shown_body(body))));
    fields
}

fn page_params(params: &Map<String, Value>) -> Result<(usize, usize), GitHubError> {
    let number = |name: &str, default: usize| -> Result<usize, GitHubError> {
        match params.get(name).and_then(Value::as_str) {
            None => Ok(default),
            Some(text) => text.parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                GitHubError::invalid(
                    "Issue",
                    name,
                    "invalid",
                    Some(format!("{name} must be a whole number of at least 1")),
                )
            }),
        }
    };
    Ok((number("per_page", DEFAULT_PER_PAGE)?.min(MAX_PER_PAGE), number("page", 1)?))
}

/// One page of `all`, and the `Link` header naming the previous, next, last and first pages, in
/// GitHub's order (`prev` and `first` after page 1, `next` and `last` before the last page), as
/// the SDKs follow them: PyGithub's `PaginatedList.reversed` walks back by `prev`.
fn page(
    all: Vec<Value>,
    per_page: usize,
    page: usize,
    url: &str,
    params: &Map<String, Value>,
) -> (Vec<Value>, Option<String>) {
    let pages = all.len().div_ceil(per_page).max(1);
    let items: Vec<Value> = all.into_iter().skip((page - 1) * per_page).take(per_page).collect();
    let link_to = |number: usize, rel: &str| {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in params {
            if name != "page" {
                query.append_pair(name, value.as_str().unwrap_or_default());
            }
        }
        query.append_pair("page", &number.to_string());
        format!("<{url}?{}>; rel=\"{rel}\"", query.finish())
    };
    let mut rels = Vec::new();
    if page > 1 {
        rels.push(link_to(page - 1, "prev"));
    }
    if page < pages {
        rels.push(link_to(page + 1, "next"));
        rels.push(link_to(pages, "last"));
    }
    if page > 1 {
        rels.push(link_to(1, "first"));
    }
    let link = (!rels.is_empty()).then(|| rels.join(", "));
    (items, link)
}

// ------------------------------------------------------------------ objects

fn timestamp(now_ms: u64) -> String {
    // A real clock reads milliseconds since the Unix epoch; the simulation's starts at 0.
    let ms = if now_ms > 1_000_000_000_000 { now_ms } else { SIMULATION_EPOCH_MS + now_ms };
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

fn numeric_id(state: &mut State, prefix: &'static str) -> u64 {
    let reference = state.next_reference(prefix);
    reference.rsplit('_').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

fn user(login: &str) -> Value {
    json!({"login": login, "id": 1, "type": "User", "site_admin": false})
}

fn issue_key(owner: &str, repo: &str, number: u64) -> String {
    format!("{WEB}/{owner}/{repo}/issues/{number}")
}

fn label_objects(names: &[String]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|name| json!({"name": name, "color": "ededed", "default": false, "description": null}))
            .collect(),
    )
}

/// The tenant's issue `number` of `owner/repo`, if it has one.
fn issue<'a>(state: &'a State, tenant: &str, owner: &str, repo: &str, number: u64) -> Option<&'a Owned> {
    state.objects.get(&issue_key(owner, repo, number)).filter(|owned| owned.tenant == tenant)
}

/// The tenant's issues of `owner/repo` (or of every repository), oldest first.
fn issues_of<'a>(
    state: &'a State,
    tenant: &'a str,
    repository: Option<&'a str>,
) -> impl Iterator<Item = &'a Owned> {
    let mut found: Vec<&Owned> = state
        .objects
        .values()
        .filter(move |owned| {
            owned.tenant == tenant
                && owned.object.get("pull_request").is_none()
                && owned.object["html_url"].as_str().is_some_and(|url| {
                    url.starts_with(WEB) && url.contains("/issues/") && !url.contains("#issuecomment-")
                })
                && repository.is_none_or(|repository| {
                    owned.object["repository_url"]
                        .as_str()
                        .is_some_and(|url| url.ends_with(&format!("/repos/{repository}")))
                })
        })
        .collect();
    found.sort_by_key(|owned| owned.made);
    found.into_iter()
}

fn keep(state: &mut State, tenant: &str, key: &str, object: Value) {
    let made = state.objects.get(key).map_or(state.objects.len() as u64 + 1, |owned| owned.made);
    state.objects.insert(key.to_owned(), Owned { tenant: tenant.to_owned(), made, object });
}

// ------------------------------------------------------------------ repositories

async fn get_repository(
    AxumState(ds): Ds,
    Path((owner, repo)): Path<(String, String)>,
    request: Request,
) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    if let Err(error) = check_name("owner", &owner).and_then(|()| check_name("name", &repo)) {
        return refuse(&ds, &read.incoming, Some(&read.tenant), &GitHubError { status: 404, ..error });
    }
    let api = read.api.clone();
    let exchange = read_exchange(&GITHUB, &read.incoming, Service::Tickets, &read.tenant);
    run(ds, read.incoming, exchange, move |_, exchange, _| {
        // Every repository a token names exists, and has issues.
        Processed::read(
            200,
            json!({
                "id": 1, "node_id": "R_1", "name": repo, "full_name": format!("{owner}/{repo}"),
                "owner": user(&owner), "private": false, "html_url": format!("{WEB}/{owner}/{repo}"),
                "url": format!("{api}/repos/{owner}/{repo}"), "has_issues": true, "default_branch": "main",
                "permissions": {"admin": true, "push": true, "pull": true}, "viewer": exchange.tenant,
            }),
        )
    })
    .await
}

// ------------------------------------------------------------------ issues

async fn create_issue(
    AxumState(ds): Ds,
    Path((owner, repo)): Path<(String, String)>,
    request: Request,
) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = check_name("owner", &owner).and_then(|()| check_name("name", &repo)).and_then(|()| {
        let title = match read.params.get("title") {
            None | Some(Value::Null) => {
                return Err(GitHubError::invalid("Issue", "title", "missing_field", None))
            }
            Some(Value::Number(number)) => number.to_string(),
            Some(_) => text(&read.params, "Issue", "title", MAX_TITLE_CHARS)?.unwrap_or_default().to_owned(),
        };
        if title.trim().is_empty() {
            return Err(GitHubError::invalid("Issue", "title", "missing_field", None));
        }
        let body = text(&read.params, "Issue", "body", MAX_BODY_CHARS)?.map(str::to_owned);
        Ok((
            title,
            body,
            labels(&read.params)?.unwrap_or_default(),
            assignees(&read.params)?.unwrap_or_default(),
        ))
    });
    let (title, body, labels, assignees) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), &error),
    };
    let content = issue_content(&repo, &title, body.as_deref());
    let exchange = change(&read, Service::Tickets, Some((EffectKind::TicketCreated, content)));
    let api = read.api.clone();
    // Other fields (`milestone`, `type`, ...) are accepted and ignored.
    run(ds, read.incoming, exchange, move |state, exchange, now| {
        let number = issues_of(state, &exchange.tenant, Some(&format!("{owner}/{repo}"))).count() as u64 + 1;
        let id = numeric_id(state, "gh_issue");
        let html_url = issue_key(&owner, &repo, number);
        let at = timestamp(now);
        let url = format!("{api}/repos/{owner}/{repo}/issues/{number}");
        let issue = json!({
            "id": id, "node_id": format!("I_{id}"), "number": number,
            "url": url, "repository_url": format!("{api}/repos/{owner}/{repo}"),
            "labels_url": format!("{url}/labels{{/name}}"), "comments_url": format!("{url}/comments"),
            "events_url": format!("{url}/events"), "html_url": html_url,
            "title": title, "body": body, "state": "open", "state_reason": null,
            "user": user(&exchange.tenant), "labels": label_objects(&labels),
            "assignee": assignees.first().map(|login| user(login)), "assignees": assignees.iter().map(|login| user(login)).collect::<Vec<_>>(),
            "milestone": null, "locked": false, "comments": 0,
            "created_at": at, "updated_at": at, "closed_at": null, "author_association": "OWNER",
        });
        keep(state, &exchange.tenant, &html_url, issue.clone());
        commit(state, exchange, Made { kind: EffectKind::TicketCreated, reference: &html_url, versions: None }, now, 201, issue)
    })
    .await
}

fn number_of(text: &str) -> Result<u64, GitHubError> {
    text.parse::<u64>().ok().filter(|n| *n >= 1).ok_or_else(GitHubError::not_found)
}

async fn get_issue(
    AxumState(ds): Ds,
    Path((owner, repo, number)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let number = match number_of(&number) {
        Ok(number) => number,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), &error),
    };
    let exchange = read_exchange(&GITHUB, &read.incoming, Service::Tickets, &read.tenant);
    run(ds, read.incoming, exchange, move |state, exchange, _| {
        match issue(state, &exchange.tenant, &owner, &repo, number) {
            Some(found) => Processed::read(200, found.object.clone()),
            None => GitHubError::not_found().processed(Disposition::NotFound),
        }
    })
    .await
}

async fn update_issue(
    AxumState(ds): Ds,
    Path((owner, repo, number)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = number_of(&number).and_then(|number| {
        let title = text(&read.params, "Issue", "title", MAX_TITLE_CHARS)?.map(str::to_owned);
        let body = text(&read.params, "Issue", "body", MAX_BODY_CHARS)?.map(str::to_owned);
        let state = text(&read.params, "Issue", "state", 10)?.map(str::to_owned);
        if state.as_deref().is_some_and(|state| !matches!(state, "open" | "closed")) {
            return Err(GitHubError::invalid("Issue", "state", "invalid", None));
        }
        let reason = text(&read.params, "Issue", "state_reason", 20)?.map(str::to_owned);
        if reason.as_deref().is_some_and(|reason| !matches!(reason, "completed" | "not_planned" | "reopened"))
        {
            return Err(GitHubError::invalid("Issue", "state_reason", "invalid", None));
        }
        Ok((number, title, body, state, reason, labels(&read.params)?, assignees(&read.params)?))
    });
    let (number, title, body, new_state, reason, labels, assignees) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), &error),
    };
    let ticket = format!("{repo}#{number}");
    let effect = new_state.as_ref().map(|status| {
        let mut fields = Map::new();
        fields.insert("ticket_id".into(), json!(ticket));
        fields.insert("status".into(), json!(status));
        (EffectKind::TicketStatusChanged, fields)
    });
    let exchange = change(&read, Service::Tickets, effect);
    run(ds, read.incoming, exchange, move |state, exchange, now| {
        let key = issue_key(&owner, &repo, number);
        let Some(found) = issue(state, &exchange.tenant, &owner, &repo, number) else {
            return GitHubError::not_found().processed(Disposition::NotFound);
        };
        let mut updated = found.object.clone();
        if let Some(title) = title {
            updated["title"] = json!(title);
        }
        if let Some(body) = body {
            updated["body"] = json!(body);
        }
        if let Some(labels) = labels {
            updated["labels"] = label_objects(&labels);
        }
        if let Some(assignees) = assignees {
            updated["assignee"] = assignees.first().map_or(Value::Null, |login| user(login));
            updated["assignees"] = assignees.iter().map(|login| user(login)).collect();
        }
        let changes_state = new_state.as_deref().is_some_and(|wanted| updated["state"] != wanted);
        if let Some(wanted) = &new_state {
            updated["state"] = json!(wanted);
            if changes_state {
                let closed = wanted == "closed";
                updated["closed_at"] = if closed { json!(timestamp(now)) } else { Value::Null };
                updated["state_reason"] = match (&reason, closed) {
                    (Some(reason), _) => json!(reason),
                    (None, true) => json!("completed"),
                    (None, false) => json!("reopened"),
                };
            }
        }
        let touched = updated != found.object;
        if touched {
            updated["updated_at"] = json!(timestamp(now));
        }
        keep(state, &exchange.tenant, &key, updated.clone());
        if changes_state {
            let reference = key.clone();
            return commit(
                state,
                exchange,
                Made { kind: EffectKind::TicketStatusChanged, reference: &reference, versions: None },
                now,
                200,
                updated,
            );
        }
        let disposition =
            if new_state.is_some() && !touched { Disposition::Unchanged } else { Disposition::Committed };
        Processed { status: 200, body: updated, disposition, effect_seq: None, started_job: None }
    })
    .await
}

/// `state` (`open`, `closed`, `all`; default `open`), `labels` (comma-separated, all
/// required), `creator`, `since` (an ISO 8601 time: updated at or after), `sort` (`created`,
/// `updated`, `comments`), `direction` (`asc`, `desc`), `per_page`, `page`.
async fn list_issues(
    AxumState(ds): Ds,
    Path((owner, repo)): Path<(String, String)>,
    request: Request,
) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let param = |name: &str| read.params.get(name).and_then(Value::as_str).map(str::to_owned);
    let checked = (|| {
        let state = param("state").unwrap_or_else(|| "open".into());
        if !matches!(state.as_str(), "open" | "closed" | "all") {
            return Err(GitHubError::invalid("Issue", "state", "invalid", None));
        }
        let sort = param("sort").unwrap_or_else(|| "created".into());
        if !matches!(sort.as_str(), "created" | "updated" | "comments") {
            return Err(GitHubError::invalid("Issue", "sort", "invalid", None));
        }
        let direction = param("direction").unwrap_or_else(|| "desc".into());
        if !matches!(direction.as_str(), "asc" | "desc") {
            return Err(GitHubError::invalid("Issue", "direction", "invalid", None));
        }
        let since = match param("since") {
            None => None,
            Some(text) => Some(
                humantime::parse_rfc3339_weak(&text)
                    .map_err(|_| GitHubError::invalid("Issue", "since", "invalid", None))?,
            ),
        };
        let labels: Vec<String> = param("labels")
            .map(|text| text.split(',').map(|l| l.trim().to_owned()).filter(|l| !l.is_empty()).collect())
            .unwrap_or_default();
        let (per_page, page) = page_params(&read.params)?;
        Ok((state, sort, direction, since, labels, param("creator"), per_page, page))
    })();
    let (wanted_state, sort, direction, since, labels, creator, per_page, page_number) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), &error),
    };
    let url = format!("{}/repos/{owner}/{repo}/issues", read.api);
    let params = read.params.clone();
    let exchange = read_exchange(&GITHUB, &read.incoming, Service::Tickets, &read.tenant);
    let mut link = None;
    let link_out = &mut link;
    let response = ds
        .answer(read.incoming, exchange, move |state, exchange, _| {
            let repository = format!("{owner}/{repo}");
            let mut found: Vec<Value> = issues_of(state, &exchange.tenant, Some(&repository))
                .map(|owned| owned.object.clone())
                .filter(|issue| wanted_state == "all" || issue["state"] == wanted_state.as_str())
                .filter(|issue| creator.as_deref().is_none_or(|login| issue["user"]["login"] == login))
                .filter(|issue| {
                    labels.iter().all(|label| {
                        issue["labels"]
                            .as_array()
                            .is_some_and(|have| have.iter().any(|l| l["name"] == label.as_str()))
                    })
                })
                .filter(|issue| {
                    since.is_none_or(|since| {
                        issue["updated_at"]
                            .as_str()
                            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
                            .is_some_and(|at| at >= since)
                    })
                })
                .collect();
            let key = |issue: &Value| match sort.as_str() {
                "comments" => (issue["comments"].as_u64().unwrap_or(0), issue["id"].as_u64().unwrap_or(0)),
                "updated" => (
                    issue["updated_at"].as_str().map_or(0, |t| t.len() as u64),
                    issue["id"].as_u64().unwrap_or(0),
                ),
                _ => (0, issue["id"].as_u64().unwrap_or(0)),
            };
            if sort == "updated" {
                found.sort_by(|a, b| {
                    a["updated_at"].as_str().cmp(&b["updated_at"].as_str()).then(key(a).1.cmp(&key(b).1))
                });
            } else {
                found.sort_by_key(key);
            }
            if direction == "desc" {
                found.reverse();
            }
            let (items, next) = page(found, per_page, page_number, &url, &params);
            *link_out = next;
            Processed::read(200, Value::Array(items))
        })
        .await;
    finish(&ds, response, link)
}

fn finish(ds: &Downstream, mut response: Response, link: Option<String>) -> Response {
    with_request_id(ds, &mut response);
    if let Some(value) = link.and_then(|link| http::HeaderValue::from_str(&link).ok()) {
        response.headers_mut().insert(http::header::LINK, value);
    }
    response
}

// ------------------------------------------------------------------ comments

async fn create_comment(
    AxumState(ds): Ds,
    Path((owner, repo, number)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = number_of(&number).and_then(|number| {
        let body = text(&read.params, "IssueComment", "body", MAX_BODY_CHARS)?
            .filter(|body| !body.trim().is_empty())
            .ok_or_else(|| GitHubError::invalid("IssueComment", "body", "missing_field", None))?;
        Ok((number, body.to_owned()))
    });
    let (number, body) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), &error),
    };
    let mut fields = Map::new();
    fields.insert("to".into(), json!(format!("{repo}#{number}")));
    fields.insert("body".into(), json!(shown_body(&body)));
    let exchange = change(&read, Service::Messages, Some((EffectKind::MessageSent, fields)));
    let api = read.api.clone();
    run(ds, read.incoming, exchange, move |state, exchange, now| {
        let issue_html = issue_key(&owner, &repo, number);
        let Some(found) = issue(state, &exchange.tenant, &owner, &repo, number) else {
            return GitHubError::not_found().processed(Disposition::NotFound);
        };
        let mut parent = found.object.clone();
        let id = numeric_id(state, "gh_comment");
        let html_url = format!("{issue_html}#issuecomment-{id}");
        let at = timestamp(now);
        let comment = json!({
            "id": id, "node_id": format!("IC_{id}"),
            "url": format!("{api}/repos/{owner}/{repo}/issues/comments/{id}"), "html_url": html_url,
            "issue_url": format!("{api}/repos/{owner}/{repo}/issues/{number}"),
            "body": body, "user": user(&exchange.tenant), "created_at": at, "updated_at": at,
            "author_association": "OWNER",
        });
        parent["comments"] = json!(parent["comments"].as_u64().unwrap_or(0) + 1);
        keep(state, &exchange.tenant, &issue_html, parent);
        keep(state, &exchange.tenant, &html_url, comment.clone());
        commit(
            state,
            exchange,
            Made { kind: EffectKind::MessageSent, reference: &html_url, versions: None },
            now,
            201,
            comment,
        )
    })
    .await
}

/// An issue's comments, oldest first: `since`, `per_page`, `page`.
async fn list_comments(
    AxumState(ds): Ds,
    Path((owner, repo, number)): Path<(String, String, String)>,
    request: Request,
) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = number_of(&number).and_then(|number| Ok((number, page_params(&read.params)?)));
    let (number, (per_page, page_number)) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), &error),
    };
    let since =
        read.params.get("since").and_then(Value::as_str).and_then(|t| humantime::parse_rfc3339_weak(t).ok());
    let url = format!("{}/repos/{owner}/{repo}/issues/{number}/comments", read.api);
    let params = read.params.clone();
    let exchange = read_exchange(&GITHUB, &read.incoming, Service::Messages, &read.tenant);
    let mut link = None;
    let link_out = &mut link;
    let response = ds
        .answer(read.incoming, exchange, move |state, exchange, _| {
            if issue(state, &exchange.tenant, &owner, &repo, number).is_none() {
                return GitHubError::not_found().processed(Disposition::NotFound);
            }
            let prefix = format!("{}#issuecomment-", issue_key(&owner, &repo, number));
            let mut found: Vec<&Owned> = state
                .objects
                .iter()
                .filter(|(key, owned)| key.starts_with(&prefix) && owned.tenant == exchange.tenant)
                .map(|(_, owned)| owned)
                .collect();
            found.sort_by_key(|owned| owned.made);
            let found: Vec<Value> = found
                .into_iter()
                .map(|owned| owned.object.clone())
                .filter(|comment| {
                    since.is_none_or(|since| {
                        comment["updated_at"]
                            .as_str()
                            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
                            .is_some_and(|at| at >= since)
                    })
                })
                .collect();
            let (items, next) = page(found, per_page, page_number, &url, &params);
            *link_out = next;
            Processed::read(200, Value::Array(items))
        })
        .await;
    finish(&ds, response, link)
}

// ------------------------------------------------------------------ search

/// A search query: free words and `"phrases"` (each must appear, any case, where `in:` says:
/// the title and the body by default), and the qualifiers `repo:OWNER/NAME`, `is:issue`,
/// `is:pr`, `is:open`, `is:closed`, `state:open|closed`, `in:title|body|comments`,
/// `label:NAME` (quoted if it has spaces), `author:LOGIN`.
#[derive(Debug, Default)]
struct Search {
    words: Vec<String>,
    repository: Option<String>,
    state: Option<String>,
    pull_requests: bool,
    within: Vec<String>,
    labels: Vec<String>,
    author: Option<String>,
}

impl Search {
    fn parse(query: &str) -> Result<Search, GitHubError> {
        let invalid = |why: String| GitHubError::invalid("Search", "q", "invalid", Some(why));
        let mut search = Search::default();
        for token in tokens(query) {
            let Some((qualifier, value)) = token.split_once(':').filter(|(name, _)| !name.contains('"'))
            else {
                search.words.push(token.trim_matches('"').to_lowercase());
                continue;
            };
            let value = value.trim_matches('"').to_owned();
            match (qualifier.to_ascii_lowercase().as_str(), value.as_str()) {
                ("repo", _) => search.repository = Some(value.to_lowercase()),
                ("is", "issue") => {}
                ("is", "pr") | ("type", "pr") => search.pull_requests = true,
                ("type", "issue") => {}
                ("is" | "state", "open" | "closed") => search.state = Some(value),
                ("in", "title" | "body" | "comments") => search.within.push(value),
                ("label", _) => search.labels.push(value),
                ("author", _) => search.author = Some(value),
                _ => return Err(invalid(format!("the twin does not know the qualifier {token:?}"))),
            }
        }
        Ok(search)
    }

    fn matches(&self, issue: &Value, comments: &[String]) -> bool {
        if self.pull_requests {
            return false;
        }
        let within = |field: &str| {
            self.within.is_empty() && field != "comments" || self.within.iter().any(|w| w == field)
        };
        let mut haystack = String::new();
        if within("title") {
            haystack.push_str(&issue["title"].as_str().unwrap_or_default().to_lowercase());
        }
        if within("body") {
            haystack.push('\n');
            haystack.push_str(&issue["body"].as_str().unwrap_or_default().to_lowercase());
        }
        if within("comments") {
            for comment in comments {
                haystack.push('\n');
                haystack.push_str(&comment.to_lowercase());
            }
        }
        self.words.iter().all(|word| haystack.contains(word.as_str()))
            && self.repository.as_deref().is_none_or(|repository| {
                issue["repository_url"]
                    .as_str()
                    .is_some_and(|url| url.to_lowercase().ends_with(&format!("/repos/{repository}")))
            })
            && self.state.as_deref().is_none_or(|state| issue["state"] == state)
            && self.author.as_deref().is_none_or(|author| issue["user"]["login"] == author)
            && self.labels.iter().all(|label| {
                issue["labels"]
                    .as_array()
                    .is_some_and(|have| have.iter().any(|l| l["name"] == label.as_str()))
            })
    }
}

/// Splits a query at spaces outside double quotes.
fn tokens(query: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in query.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !current.is_empty() {
                    tokens.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// `GET /search/issues`: `q` (required), `per_page`, `page`; newest first.
async fn search_issues(AxumState(ds): Ds, request: Request) -> Response {
    let read = match read(&ds, request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let checked = (|| {
        let query = read
            .params
            .get("q")
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| GitHubError::invalid("Search", "q", "missing", None))?;
        Ok((Search::parse(query)?, page_params(&read.params)?))
    })();
    let (search, (per_page, page_number)) = match checked {
        Ok(checked) => checked,
        Err(error) => return refuse(&ds, &read.incoming, Some(&read.tenant), &error),
    };
    let url = format!("{}/search/issues", read.api);
    let params = read.params.clone();
    let exchange = read_exchange(&GITHUB, &read.incoming, Service::Tickets, &read.tenant);
    let mut link = None;
    let link_out = &mut link;
    let response = ds
        .answer(read.incoming, exchange, move |state, exchange, _| {
            let mut found: Vec<Value> = issues_of(state, &exchange.tenant, None)
                .filter(|owned| {
                    let prefix =
                        format!("{}#issuecomment-", owned.object["html_url"].as_str().unwrap_or_default());
                    let comments: Vec<String> = state
                        .objects
                        .range(prefix.clone()..)
                        .take_while(|(key, _)| key.starts_with(&prefix))
                        .filter_map(|(_, comment)| comment.object["body"].as_str().map(str::to_owned))
                        .collect();
                    search.matches(&owned.object, &comments)
                })
                .map(|owned| {
                    let mut item = owned.object.clone();
                    item["score"] = json!(1.0);
                    item
                })
                .collect();
            found.reverse();
            let total = found.len();
            let (items, next) = page(found, per_page, page_number, &url, &params);
            *link_out = next;
            Processed::read(200, json!({"total_count": total, "incomplete_results": false, "items": items}))
        })
        .await;
    finish(&ds, response, link)
}

// ------------------------------------------------------------------ facts

/// The business content of a GitHub request, as the core computes it when it commits one.
pub(crate) fn request_content(
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> Option<String> {
    let tenant = tenant_of_token(authorization)?.ok()?;
    let path = path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let Ok(Value::Object(params)) = serde_json::from_slice::<Value>(body) else { return None };
    let text = |name: &str| params.get(name).and_then(Value::as_str);
    match (method.to_ascii_uppercase().as_str(), segments.as_slice()) {
        ("POST", ["repos", _, repo, "issues"]) => {
            let title = match params.get("title")? {
                Value::Number(number) => number.to_string(),
                Value::String(title) => title.clone(),
                _ => return None,
            };
            Some(content_digest(
                EffectKind::TicketCreated,
                &tenant,
                &issue_content(repo, &title, text("body")),
            ))
        }
        ("PATCH", ["repos", _, repo, "issues", number]) => {
            let mut fields = Map::new();
            fields.insert("ticket_id".into(), json!(format!("{repo}#{number}")));
            fields.insert("status".into(), json!(text("state")?));
            Some(content_digest(EffectKind::TicketStatusChanged, &tenant, &fields))
        }
        ("POST", ["repos", _, repo, "issues", number, "comments"]) => {
            let mut fields = Map::new();
            fields.insert("to".into(), json!(format!("{repo}#{number}")));
            fields.insert("body".into(), json!(shown_body(text("body")?)));
            Some(content_digest(EffectKind::MessageSent, &tenant, &fields))
        }
        _ => None,
    }
}

/// The references an answer of the twin names: an issue's or a comment's `html_url`, and
/// those of every issue a list or a search shows.
pub(crate) fn references_in_answer(body: &Value) -> Vec<String> {
    let named = |object: &Value| {
        object["html_url"]
            .as_str()
            .filter(|url| url.starts_with(WEB) && url.contains("/issues/"))
            .map(str::to_owned)
    };
    match body {
        Value::Array(items) => items.iter().filter_map(named).collect(),
        Value::Object(_) if body.get("items").is_some() && body.get("total_count").is_some() => {
            body["items"].as_array().map(Vec::as_slice).unwrap_or_default().iter().filter_map(named).collect()
        }
        _ => named(body).into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_their_tenant() {
        assert_eq!(tenant_of_token(Some("token ghp_acme")).and_then(Result::ok).as_deref(), Some("acme"));
        assert_eq!(
            tenant_of_token(Some("Bearer github_pat_globex")).and_then(Result::ok).as_deref(),
            Some("globex")
        );
        assert!(tenant_of_token(None).is_none());
        for bad in ["token sk_test_acme", "Basic ghp_acme", "token ghp_", "ghp_acme", "token ghp_a b"] {
            let answer = tenant_of_token(Some(bad)).expect("a header");
            assert_eq!(answer.unwrap_err().status, 401, "{bad}");
        }
    }

    #[test]
    fn html_comments_are_not_content() {
        assert_eq!(shown_body("Refund asked.\n\n<!-- op: acme/1 -->"), "Refund asked.");
        assert_eq!(shown_body("a <!-- x --> b"), "a b");
        assert_eq!(shown_body("  spaced  "), "  spaced  ");
        assert_eq!(shown_body("open <!-- never closed"), "open <!-- never closed");
        let with = request_content(
            "POST",
            "/repos/o/support/issues",
            Some("token ghp_acme"),
            br#"{"title":"T","body":"B\n<!-- k -->"}"#,
        );
        let without = request_content(
            "POST",
            "/repos/o/support/issues",
            Some("token ghp_acme"),
            br#"{"title":"T","body":"B","labels":["op-1"]}"#,
        );
        assert!(with.is_some());
        assert_eq!(with, without);
        let other = request_content(
            "POST",
            "/repos/o/support/issues",
            Some("token ghp_acme"),
            br#"{"title":"T","body":"C"}"#,
        );
        assert_ne!(with, other);
    }

    #[test]
    fn search_queries_parse_and_match() {
        let issue = json!({"title": "Refund", "body": "Customer asks.\n<!-- op-7 -->", "state": "open",
            "repository_url": "http://h/repos/acme/support", "user": {"login": "acme"}, "labels": [{"name": "op-7"}]});
        let matches = |q: &str| Search::parse(q).unwrap().matches(&issue, &["later note".to_owned()]);
        assert!(matches("op-7 in:body repo:acme/support is:issue"));
        assert!(matches("\"customer asks\" state:open label:op-7"));
        assert!(!matches("op-7 in:title"));
        assert!(!matches("op-8"));
        assert!(!matches("repo:acme/other refund"));
        assert!(!matches("is:closed"));
        assert!(!matches("is:pr"));
        assert!(matches("\"later note\" in:comments"));
        assert!(!matches("\"later note\""));
        assert!(Search::parse("sort:updated").is_err());
    }
}
