//! `docs/downstream.md` held to the code. The page is what authors of executors in other
//! languages read instead of the Rust; these tests fail when the two part:
//!
//! - the route table lists exactly the business routes the service serves (found by probing
//!   the real router with every method on every path `routes.rs` names), and exactly the query
//!   parameters each read requires and accepts;
//! - each `<!-- fields: METHOD PATH -->` table lists exactly the body fields the service
//!   accepts, with the ones it requires;
//! - every `<!-- exchange -->` request, sent in the page's order to one real downstream on a
//!   loopback port, gets the status, headers and body the page shows;
//! - the problem types table lists exactly the types the code can answer, with their statuses;
//! - the tools section has a table for every tool and version in `protocol/contracts`, true to
//!   the contract.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fake_downstream::{Downstream, DownstreamConfig, FaultRule};
use serde_json::{Map, Value};
use wire::{HttpClient, HttpRequest, HttpResponse, TcpAcceptor, TcpConnector, TransportError};

/// The page under test.
const DOC: &str = include_str!("../../../docs/downstream.md");
/// Where the native dialect's routes are declared (its routes, its HTTP plumbing, the admin API
/// and the router): every `"/v1/..."` literal in it is a path to probe.
const ROUTES_RS: &str = concat!(
    include_str!("../../src/routes.rs"),
    include_str!("../../src/native.rs"),
    include_str!("../../src/http.rs"),
    include_str!("../../src/admin.rs"),
);
/// Where the idempotency problems are answered.
const SERVICE_RS: &str = include_str!("../../src/service.rs");
/// Where the page's clock stands at the start (2026-01-01T00:00:00Z).
const START_MS: u64 = 1_767_225_600_000;
/// How long one request may take before the test says the service is stuck.
const PATIENCE: Duration = Duration::from_secs(10);
/// Every method a route is probed with.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
/// What stands for a `{id}` or `{key}` segment in a probe.
const SAMPLE_SEGMENT: &str = "x";

// ------------------------------------------------------------------ a downstream to talk to

/// A fresh downstream serving the business router (what executors reach) on a loopback port,
/// with a clock that moves only when the test moves it.
struct Served {
    downstream: Downstream,
    client: HttpClient,
    clock: Arc<AtomicU64>,
}

async fn serve() -> Served {
    let clock = Arc::new(AtomicU64::new(START_MS));
    let reading = clock.clone();
    let downstream = Downstream::new(
        DownstreamConfig::default(),
        Arc::new(move || reading.load(Ordering::SeqCst)),
        Arc::new(TcpConnector),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds a loopback port");
    let port = listener.local_addr().expect("a bound address").port();
    tokio::spawn(wire::serve(TcpAcceptor(listener), downstream.business_router()));
    Served { downstream, client: HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", port), clock }
}

impl Served {
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let shown = format!("{} {}", request.method, request.path);
        tokio::time::timeout(PATIENCE, self.client.send(request))
            .await
            .unwrap_or_else(|_| panic!("{shown}: no answer within {PATIENCE:?}"))
    }

    async fn answer(&self, request: HttpRequest) -> HttpResponse {
        let shown = format!("{} {}", request.method, request.path);
        self.send(request).await.unwrap_or_else(|error| panic!("{shown}: {error}"))
    }

    /// Moves the clock on and waits until the work that fell due (jobs finishing) is done.
    async fn advance(&self, ms: u64) {
        self.clock.fetch_add(ms, Ordering::SeqCst);
        self.downstream.clock_moved();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !(self.downstream.is_idle()
            && self.downstream.next_due_ms().is_none_or(|due| due > self.clock.load(Ordering::SeqCst)))
        {
            assert!(tokio::time::Instant::now() < deadline, "the downstream's due work did not finish");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

fn method(name: &str) -> http::Method {
    http::Method::from_bytes(name.as_bytes()).unwrap_or_else(|_| panic!("{name:?} is not a method"))
}

fn problem_of(response: &HttpResponse) -> Option<wire::Problem> {
    (response.header("content-type") == Some("application/problem+json"))
        .then(|| response.json::<wire::Problem>().ok())
        .flatten()
}

fn shown(response: &HttpResponse) -> String {
    format!("{} {}", response.status, String::from_utf8_lossy(&response.body))
}

// ------------------------------------------------------------------ reading the page

/// A markdown table: its first line's number (from 1), header cells and rows.
#[derive(Debug)]
struct Table {
    line: usize,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|cell| cell.trim().to_owned()).collect()
}

/// The table that starts at the first non-blank line at or after `start`, if one does.
fn table_at(lines: &[&str], start: usize) -> Option<Table> {
    let first = (start..lines.len()).find(|&i| !lines[i].trim().is_empty())?;
    if !lines[first].trim_start().starts_with('|') {
        return None;
    }
    let separator = lines.get(first + 1)?;
    if !separator.trim_start().starts_with("|---") && !separator.trim_start().starts_with("| ---") {
        return None;
    }
    let rows = lines[first + 2..]
        .iter()
        .take_while(|line| line.trim_start().starts_with('|'))
        .map(|line| cells(line))
        .collect();
    Some(Table { line: first + 1, header: cells(lines[first]), rows })
}

/// Every table on the page.
fn tables(doc: &str) -> Vec<Table> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let previous_is_table = i > 0 && lines[i - 1].trim_start().starts_with('|');
        match table_at(&lines, i).filter(|table| table.line == i + 1 && !previous_is_table) {
            Some(table) => {
                i += 1 + table.rows.len() + 1;
                found.push(table);
            }
            None => i += 1,
        }
    }
    found
}

/// The table right after each `<!-- PREFIX VALUE -->` marker, by VALUE.
fn marked_tables(doc: &str, prefix: &str) -> BTreeMap<String, Table> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut found = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(value) = marker(line, prefix) else { continue };
        let table = table_at(&lines, i + 1)
            .unwrap_or_else(|| panic!("docs/downstream.md:{}: no table after the marker", i + 1));
        assert!(found.insert(value.clone(), table).is_none(), "docs/downstream.md: two markers for {value}");
    }
    found
}

/// `VALUE` of a line `<!-- PREFIX VALUE -->`.
fn marker(line: &str, prefix: &str) -> Option<String> {
    let inner = line.trim().strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    let value = inner.strip_prefix(prefix)?;
    (value.is_empty() || value.starts_with(' ')).then(|| value.trim().to_owned())
}

/// A cell's text without the backticks around it.
fn code(cell: &str) -> &str {
    let cell = cell.trim();
    cell.strip_prefix('`').and_then(|inner| inner.strip_suffix('`')).unwrap_or(cell)
}

/// The backticked names in a cell: `` `tenant`, `service` `` -> [tenant, service].
fn names(cell: &str) -> Vec<String> {
    cell.split(',').map(code).filter(|name| !name.is_empty()).map(str::to_owned).collect()
}

/// A route as the table of section 1 lists it.
#[derive(Debug, Clone)]
struct Route {
    method: String,
    path: String,
    query: Vec<String>,
}

fn documented_routes() -> Vec<Route> {
    let tables: Vec<Table> = tables(DOC)
        .into_iter()
        .filter(|table| table.header.iter().take(3).map(String::as_str).eq(["method", "path", "query"]))
        .collect();
    assert!(!tables.is_empty(), "docs/downstream.md has no route table (| method | path | query | ...)");
    let routes: Vec<Route> = tables
        .iter()
        .flat_map(|table| &table.rows)
        .map(|row| Route {
            method: code(&row[0]).to_owned(),
            path: code(&row[1]).to_owned(),
            query: names(&row[2]),
        })
        .collect();
    for route in &routes {
        assert!(METHODS.contains(&route.method.as_str()), "route table: unknown method {}", route.method);
        assert!(route.path.starts_with('/'), "route table: {} is not a path", route.path);
    }
    routes
}

/// `/v1/tickets/{id}` -> `/v1/tickets/x`.
fn sample_path(template: &str) -> String {
    template
        .split('/')
        .map(
            |segment| {
                if segment.starts_with('{') && segment.ends_with('}') {
                    SAMPLE_SEGMENT
                } else {
                    segment
                }
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether `path` (without its query) fits `template` (`{name}` is any one non-empty segment).
fn fits(template: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or_default();
    let (wanted, given): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    wanted.len() == given.len()
        && wanted.iter().zip(&given).all(|(w, g)| if w.starts_with('{') { !g.is_empty() } else { w == g })
}

// ------------------------------------------------------------------ routes

/// The paths the code names: every `"/v1/..."` literal in `routes.rs`, and the routes a fault
/// rule's error lists (the crate's public word on which business routes exist).
fn paths_in_code() -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for (start, _) in ROUTES_RS.match_indices("\"/v1/") {
        let literal = &ROUTES_RS[start + 1..];
        let end = literal.find('"').expect("a string literal ends");
        paths.insert(literal[..end].to_owned());
    }
    assert!(paths.len() >= 8, "the scan of routes.rs found too few paths: {paths:?}");
    let error = FaultRule::from_json(br#"{"match": {"path": "/nowhere"}, "action": "hold"}"#)
        .expect_err("no route serves /nowhere");
    let listed = error
        .split_once("the routes are ")
        .and_then(|(_, rest)| rest.split_once(" ("))
        .map(|(routes, _)| routes)
        .unwrap_or_else(|| panic!("a fault rule's error no longer lists the routes: {error}"));
    for route in listed.split(", ") {
        paths.insert(route.to_owned());
    }
    paths
}

/// Whether an answer is the router's own "no such route" or "no such method".
fn unserved(response: &HttpResponse) -> bool {
    match response.status {
        405 => true,
        404 => problem_of(response).is_none_or(|problem| problem.detail.starts_with("no route for")),
        _ => false,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_route_table_lists_exactly_the_routes_served() {
    let routes = documented_routes();
    let problems = problem_table();
    let served_by = serve().await;
    let mut candidates = paths_in_code();
    candidates.extend(routes.iter().map(|route| route.path.clone()));
    // A vendor twin's own paths are its test's (docs/vendors.md's tables).
    let twins = include_str!("../../../docs/vendors.md");
    candidates.retain(|path| {
        routes.iter().any(|route| &route.path == path) || !twins.contains(&format!("` | `{path}` |"))
    });

    let mut served = BTreeSet::new();
    for path in &candidates {
        for name in METHODS {
            // No query and no body: a served route refuses it (400); an unserved one is the
            // router's 404 or 405.
            let response = served_by.answer(HttpRequest::new(method(name), sample_path(path))).await;
            if !unserved(&response) {
                served.insert((name.to_owned(), path.clone()));
            }
            check_problem_listed(&problems, &response, &format!("{name} {path}"));
        }
    }
    let mut documented: BTreeSet<(String, String)> =
        routes.iter().map(|route| (route.method.clone(), route.path.clone())).collect();
    assert_eq!(documented.len(), routes.len(), "the route table lists a route twice");
    // The page says every GET route answers HEAD too.
    for route in routes.iter().filter(|route| route.method == "GET") {
        documented.insert(("HEAD".to_owned(), route.path.clone()));
    }
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let not_served: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && not_served.is_empty(),
        "docs/downstream.md section 1 and the router differ.\nserved, not in the table: {undocumented:?}\n\
         in the table (or HEAD beside a GET), not served: {not_served:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn each_read_requires_and_accepts_exactly_the_query_parameters_listed() {
    let served = serve().await;
    for route in documented_routes() {
        let path = sample_path(&route.path);
        let value = |name: &str| if name == "service" { "tickets" } else { "acme" };
        let query = |names: &[&String]| -> String {
            names.iter().map(|name| format!("{name}={}", value(name))).collect::<Vec<_>>().join("&")
        };
        let all: Vec<&String> = route.query.iter().collect();
        let request = |query: String| {
            let target = if query.is_empty() { path.clone() } else { format!("{path}?{query}") };
            HttpRequest::new(method(&route.method), target)
        };
        let what = format!("{} {}", route.method, route.path);
        if route.method != "GET" {
            assert!(route.query.is_empty(), "{what}: only reads take a query");
            continue;
        }
        let whole = served.answer(request(query(&all))).await;
        assert!(
            problem_of(&whole).is_none_or(|problem| problem.kind != "invalid_query"),
            "{what} with {all:?}: the listed parameters are not enough: {}",
            shown(&whole)
        );
        for left_out in &route.query {
            let rest: Vec<&String> = all.iter().copied().filter(|name| *name != left_out).collect();
            let response = served.answer(request(query(&rest))).await;
            let problem = problem_of(&response).unwrap_or_else(|| panic!("{what}: {}", shown(&response)));
            assert_eq!(
                (response.status, problem.kind.as_str()),
                (400, "invalid_query"),
                "{what} without `{left_out}`: the page says it is required: {}",
                shown(&response)
            );
            assert!(
                problem.detail.contains(&format!("missing field `{left_out}`")),
                "{what}: {}",
                problem.detail
            );
        }
        let extra = format!("{}{}zz_extra=1", query(&all), if all.is_empty() { "" } else { "&" });
        let response = served.answer(request(extra)).await;
        let problem = problem_of(&response).unwrap_or_else(|| panic!("{what}: {}", shown(&response)));
        assert_eq!(problem.kind, "invalid_query", "{what}: an unlisted parameter must be refused");
        assert!(problem.detail.contains("unknown field `zz_extra`"), "{what}: {}", problem.detail);
    }
}

// ------------------------------------------------------------------ body fields

/// The field names a service's "unknown field" refusal lists: "expected `a`", "expected `a`
/// or `b`", "expected one of `a`, `b`, `c`".
fn expected_fields(detail: &str) -> BTreeSet<String> {
    let listed = detail.split_once(", expected ").map_or("", |(_, rest)| rest);
    let listed = listed.split(" at line ").next().unwrap_or_default();
    listed.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

#[tokio::test(flavor = "current_thread")]
async fn each_body_field_table_lists_the_fields_the_service_accepts_and_requires() {
    let fields = marked_tables(DOC, "fields:");
    let routes = documented_routes();
    let exchanges = exchanges();
    let bodied: Vec<&Route> =
        routes.iter().filter(|route| matches!(route.method.as_str(), "POST" | "PATCH")).collect();
    let tabled: BTreeSet<String> = fields.keys().cloned().collect();
    let expected: BTreeSet<String> =
        bodied.iter().map(|route| format!("{} {}", route.method, route.path)).collect();
    assert_eq!(tabled, expected, "every route with a body has one `<!-- fields: METHOD PATH -->` table");

    for (route, table) in &fields {
        let (method_name, template) = route.split_once(' ').expect("METHOD PATH");
        assert_eq!(
            table.header.iter().take(3).map(String::as_str).collect::<Vec<_>>(),
            ["field", "type", "required"],
            "{route}: the table's columns"
        );
        let documented: BTreeMap<String, (String, bool)> = table
            .rows
            .iter()
            .map(|row| {
                let required = match row[2].as_str() {
                    "yes" => true,
                    "no" => false,
                    other => panic!("{route}: required is yes or no, not {other:?}"),
                };
                (code(&row[0]).to_owned(), (row[1].clone(), required))
            })
            .collect();

        // The fields accepted: what the service's refusal of an unknown field lists.
        let served = serve().await;
        let probe = HttpRequest::new(method(method_name), sample_path(template))
            .header("content-type", "application/json")
            .body(r#"{"zz_probe": 1}"#);
        let response = served.answer(probe).await;
        let problem = problem_of(&response).unwrap_or_else(|| panic!("{route}: {}", shown(&response)));
        assert!(problem.detail.contains("unknown field `zz_probe`"), "{route}: {}", problem.detail);
        let accepted = expected_fields(&problem.detail);
        let listed: BTreeSet<String> = documented.keys().cloned().collect();
        assert_eq!(listed, accepted, "{route}: the fields the page lists and those the service accepts");

        // The fields required: leave each out of a documented request that succeeded.
        let example = exchanges
            .iter()
            .find(|exchange| {
                exchange.method == method_name
                    && fits(template, &exchange.path)
                    && matches!(exchange.expected, Expected::Answer { status: 200..=299, .. })
            })
            .unwrap_or_else(|| panic!("{route}: no documented exchange succeeds with this route"));
        let Ok(Value::Object(body)) = serde_json::from_str::<Value>(&example.body) else {
            panic!("docs/downstream.md:{}: the request body is not a JSON object", example.line)
        };
        for (field, (kind, required)) in &documented {
            let value = body.get(field).unwrap_or_else(|| {
                panic!("docs/downstream.md:{}: the example leaves out `{field}`", example.line)
            });
            let fits_type = match kind.as_str() {
                "string" => value.is_string(),
                "integer" => value.is_u64() || value.is_i64(),
                "object" => value.is_object(),
                other => panic!("{route}: unknown type {other:?} for `{field}`"),
            };
            assert!(fits_type, "{route}: `{field}` is documented as {kind}, the example sends {value}");
            let mut without = body.clone();
            without.remove(field);
            let request = HttpRequest::new(method(method_name), example.path.clone())
                .header("content-type", "application/json")
                .body(Value::Object(without).to_string());
            let response = serve().await.answer(request).await;
            let missing = problem_of(&response)
                .is_some_and(|problem| problem.detail.contains(&format!("missing field `{field}`")));
            assert_eq!(
                missing,
                *required,
                "{route} without `{field}` (documented required: {required}): {}",
                shown(&response)
            );
        }
    }
}

// ------------------------------------------------------------------ exchanges

/// What an exchange's answer must be.
#[derive(Debug)]
enum Expected {
    /// The connection closes without an answer.
    NoAnswer,
    /// A complete answer.
    Answer { status: u16, headers: Vec<(String, String)>, body: Option<Value> },
}

/// One `<!-- exchange -->`: its options, the request and the answer the page shows.
#[derive(Debug)]
struct Exchange {
    /// The request block's first line's number in the page (from 1).
    line: usize,
    options: Map<String, Value>,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
    expected: Expected,
}

/// The next fenced block at or after `start`: its fence line's index, language and text lines.
fn fenced(lines: &[&str], start: usize) -> Option<(usize, String, Vec<String>)> {
    let open = (start..lines.len()).find(|&i| lines[i].trim_start().starts_with("```"))?;
    let language = lines[open].trim().trim_start_matches('`').to_owned();
    let close = (open + 1..lines.len()).find(|&i| lines[i].trim_start().starts_with("```"))?;
    Some((open, language, lines[open + 1..close].iter().map(|line| (*line).to_owned()).collect()))
}

/// A block's head (first line and headers) and body (after the first blank line).
fn head_and_body(text: &[String]) -> (String, Vec<(String, String)>, String) {
    let blank = text.iter().position(|line| line.trim().is_empty()).unwrap_or(text.len());
    let first = text.first().cloned().unwrap_or_default();
    let headers = text[1.min(blank)..blank]
        .iter()
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap_or_else(|| panic!("not a header: {line:?}"));
            (name.trim().to_owned(), value.trim().to_owned())
        })
        .collect();
    let body = text.get(blank + 1..).map(|rest| rest.join("\n")).unwrap_or_default();
    (first, headers, body.trim().to_owned())
}

fn exchanges() -> Vec<Exchange> {
    let lines: Vec<&str> = DOC.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(options) = marker(line, "exchange") else { continue };
        let options: Map<String, Value> = if options.is_empty() {
            Map::new()
        } else {
            serde_json::from_str(&options)
                .unwrap_or_else(|error| panic!("docs/downstream.md:{}: bad exchange options: {error}", i + 1))
        };
        let at = |n: usize| format!("docs/downstream.md:{}", n + 1);
        let (open, language, request) =
            fenced(&lines, i + 1).unwrap_or_else(|| panic!("{}: no request block", at(i)));
        assert_eq!(language, "http", "{}: the request block is ```http", at(open));
        let request_close = open + request.len() + 1;
        let (answer_open, language, answer) =
            fenced(&lines, request_close + 1).unwrap_or_else(|| panic!("{}: no answer block", at(open)));
        assert_eq!(language, "http", "{}: the answer block is ```http", at(answer_open));

        let (first, headers, body) = head_and_body(&request);
        let mut words = first.split_whitespace();
        let (Some(method), Some(path)) = (words.next(), words.next()) else {
            panic!("{}: the request starts with METHOD PATH, not {first:?}", at(open + 1))
        };
        let expected = if answer.first().is_some_and(|line| line.starts_with("(no answer")) {
            Expected::NoAnswer
        } else {
            let (status_line, headers, body) = head_and_body(&answer);
            let status = status_line
                .split_whitespace()
                .nth(1)
                .and_then(|status| status.parse().ok())
                .unwrap_or_else(|| panic!("{}: not a status line: {status_line:?}", at(answer_open + 1)));
            let body = (!body.is_empty()).then(|| {
                serde_json::from_str(&body).unwrap_or_else(|error| {
                    panic!("{}: the answer body is not JSON: {error}", at(answer_open))
                })
            });
            Expected::Answer { status, headers, body }
        };
        found.push(Exchange {
            line: open + 2,
            options,
            method: method.to_owned(),
            path: path.to_owned(),
            headers,
            body,
            expected,
        });
    }
    found
}

/// Whether `actual` is what the page shows: the same fields (no more, no fewer) with the same
/// values; a shown string ending in `…` stands for any string that begins that way.
fn same(shown: &Value, actual: &Value, at: &str) -> Result<(), String> {
    match (shown, actual) {
        (Value::String(shown), Value::String(actual)) if shown.ends_with('…') => {
            let prefix = shown.trim_end_matches('…');
            actual
                .starts_with(prefix)
                .then_some(())
                .ok_or(format!("{at}: {actual:?} does not begin {prefix:?}"))
        }
        (Value::Object(shown), Value::Object(actual)) => {
            let (s, a): (BTreeSet<&String>, BTreeSet<&String>) =
                (shown.keys().collect(), actual.keys().collect());
            if s != a {
                return Err(format!("{at}: the page shows the fields {s:?}, the service answers {a:?}"));
            }
            shown.iter().try_for_each(|(key, value)| same(value, &actual[key], &format!("{at}.{key}")))
        }
        (Value::Array(shown), Value::Array(actual)) if shown.len() == actual.len() => shown
            .iter()
            .zip(actual)
            .enumerate()
            .try_for_each(|(i, (shown, actual))| same(shown, actual, &format!("{at}[{i}]"))),
        _ if shown == actual => Ok(()),
        _ => Err(format!("{at}: the page shows {shown}, the service answers {actual}")),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_exchange_on_the_page_is_what_the_service_answers() {
    let problems = problem_table();
    let exchanges = exchanges();
    assert!(exchanges.len() >= 10, "the page shows only {} exchanges", exchanges.len());
    let served = serve().await;
    for exchange in &exchanges {
        let at = format!("docs/downstream.md:{} ({} {})", exchange.line, exchange.method, exchange.path);
        for option in exchange.options.keys() {
            assert!(
                ["config", "fault", "advance_ms"].contains(&option.as_str()),
                "{at}: unknown option {option}"
            );
        }
        if let Some(config) = exchange.options.get("config") {
            let config: DownstreamConfig = serde_json::from_value(config.clone())
                .unwrap_or_else(|error| panic!("{at}: bad config: {error}"));
            served.downstream.set_config(config);
        }
        if let Some(rule) = exchange.options.get("fault") {
            let rule = FaultRule::from_json(rule.to_string().as_bytes())
                .unwrap_or_else(|error| panic!("{at}: bad fault rule: {error}"));
            served.downstream.install_fault(rule);
        }
        if let Some(ms) = exchange.options.get("advance_ms") {
            served.advance(ms.as_u64().unwrap_or_else(|| panic!("{at}: advance_ms is a number"))).await;
        }
        let mut request = HttpRequest::new(method(&exchange.method), exchange.path.clone());
        for (name, value) in &exchange.headers {
            request = request.header(name.clone(), value.clone());
        }
        if !exchange.body.is_empty() {
            request = request.body(exchange.body.clone());
        }
        let result = served.send(request).await;
        match &exchange.expected {
            Expected::NoAnswer => {
                assert!(
                    matches!(result, Err(TransportError::ClosedWithoutResponse(_))),
                    "{at}: the page says the connection closes without an answer; got {:?}",
                    result.map(|response| shown(&response))
                );
            }
            Expected::Answer { status, headers, body } => {
                let response = result.unwrap_or_else(|error| panic!("{at}: no answer: {error}"));
                assert_eq!(response.status, *status, "{at}: {}", shown(&response));
                for (name, value) in headers {
                    assert_eq!(response.header(name), Some(value.as_str()), "{at}: header {name}");
                }
                if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("idempotent-replayed")) {
                    assert_eq!(
                        response.header("idempotent-replayed"),
                        None,
                        "{at}: a replay the page does not show"
                    );
                }
                let actual: Option<Value> = (!response.body.is_empty()).then(|| {
                    response.json().unwrap_or_else(|error| {
                        panic!("{at}: the answer is not JSON ({error}): {}", shown(&response))
                    })
                });
                match (body, &actual) {
                    (Some(body), Some(actual)) => {
                        same(body, actual, "body").unwrap_or_else(|why| panic!("{at}: {why}"))
                    }
                    (None, None) => {}
                    _ => panic!("{at}: the page shows body {body:?}, the service answers {actual:?}"),
                }
                check_problem_listed(&problems, &response, &at);
            }
        }
    }
}

// ------------------------------------------------------------------ problem types

/// The problem types table: type -> status as shown (`400`, `5xx`).
fn problem_table() -> BTreeMap<String, String> {
    let tables = marked_tables(DOC, "problem types");
    let table = tables.get("").expect("docs/downstream.md has a `<!-- problem types -->` table");
    assert_eq!(&table.header[..2], ["`type`", "status"], "the problem types table's columns");
    let mut kinds = BTreeMap::new();
    for row in &table.rows {
        let status = row[1].clone();
        assert!(status == "5xx" || status.parse::<u16>().is_ok(), "problem types: a status, not {status:?}");
        assert!(kinds.insert(code(&row[0]).to_owned(), status).is_none(), "problem types: {} twice", row[0]);
    }
    kinds
}

fn status_fits(shown: &str, status: u16) -> bool {
    shown == status.to_string() || (shown == "5xx" && (500..=599).contains(&status))
}

/// A problem answer's type must be in the table, with its status.
fn check_problem_listed(problems: &BTreeMap<String, String>, response: &HttpResponse, at: &str) {
    let Some(problem) = problem_of(response) else { return };
    let listed = problems
        .get(&problem.kind)
        .unwrap_or_else(|| panic!("{at}: problem type {} is not in the page's table", problem.kind));
    assert!(
        status_fits(listed, response.status),
        "{at}: {} is listed as {listed}, answered {}",
        problem.kind,
        response.status
    );
}

/// The arguments of the call that starts at `text` (just after its `(`), split at top-level
/// commas, up to the matching `)`.
fn call_arguments(text: &str) -> Vec<String> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let (mut arguments, mut current) = (Vec::new(), String::new());
    for c in text.chars() {
        if in_string {
            current.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => break,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                arguments.push(current.trim().to_owned());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.trim().is_empty() {
        arguments.push(current.trim().to_owned());
    }
    arguments
}

/// Every problem type the code answers with a literal: (type, status if literal). The
/// constructors: `bad_request(kind, ..)` (400), `Problem::new(status, kind, ..)`,
/// `Processed::problem(status, disposition, kind, ..)`, `single_header(.., kind)` (400).
fn problem_types_in_code() -> BTreeMap<String, Option<u16>> {
    let literal = |argument: &str| {
        argument.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')).map(str::to_owned)
    };
    let mut found = BTreeMap::new();
    for source in [ROUTES_RS, SERVICE_RS] {
        for (call, kind_at, status_at) in [
            ("bad_request(", 0, None),
            ("Problem::new(", 1, Some(0)),
            ("Processed::problem(", 2, Some(0)),
            ("single_header(", 3, None),
        ] {
            for (start, _) in source.match_indices(call) {
                if source[..start].ends_with("fn ") {
                    continue;
                }
                let arguments = call_arguments(&source[start + call.len()..]);
                let Some(kind) = arguments.get(kind_at).and_then(|argument| literal(argument)) else {
                    continue;
                };
                let status = match status_at {
                    None => Some(400),
                    Some(i) => arguments.get(i).and_then(|argument| argument.parse().ok()),
                };
                found.insert(kind, status);
            }
        }
    }
    found
}

#[tokio::test(flavor = "current_thread")]
async fn the_problem_types_table_lists_exactly_the_types_the_code_answers() {
    let documented = problem_table();
    let in_code = problem_types_in_code();
    assert!(in_code.len() >= 10, "the scan of the code found too few problem types: {in_code:?}");
    for (kind, status) in &in_code {
        let listed = documented.get(kind).unwrap_or_else(|| {
            panic!("the code answers problem type {kind}; the page's table does not list it")
        });
        if let Some(status) = status {
            assert!(
                status_fits(listed, *status),
                "{kind}: the code answers {status}, the page says {listed}"
            );
        }
    }
    // Types the scan cannot see (computed ones) must at least be in the code as literals.
    for kind in documented.keys() {
        assert!(
            ROUTES_RS.contains(&format!("\"{kind}\"")) || SERVICE_RS.contains(&format!("\"{kind}\"")),
            "the page lists problem type {kind}, which the code never answers"
        );
    }
}

// ------------------------------------------------------------------ tools

#[test]
fn the_tools_section_has_a_true_table_for_every_tool_and_version() {
    let tables = marked_tables(DOC, "tool:");
    let contracts = protocol::ContractSet::builtin();
    let lines: Vec<&str> = DOC.lines().collect();
    let mut named = BTreeSet::new();
    for contract in contracts.iter() {
        let id = format!("{}@{}", contract.name, contract.version);
        named.insert(id.clone());
        let table = tables.get(&id).unwrap_or_else(|| {
            panic!("docs/downstream.md section 13 has no `<!-- tool: {id} -->` table for protocol/contracts/{id}.toml")
        });
        assert_eq!(
            table.header.iter().map(String::as_str).collect::<Vec<_>>(),
            ["argument", "type", "must be sent", "default", "material"],
            "{id}: the table's columns"
        );
        let rows: BTreeMap<&str, &Vec<String>> = table.rows.iter().map(|row| (code(&row[0]), row)).collect();
        let listed: BTreeSet<&str> = rows.keys().copied().collect();
        let declared: BTreeSet<&str> = contract.arguments.keys().map(String::as_str).collect();
        assert_eq!(listed, declared, "{id}: the arguments");
        for (name, kind) in &contract.arguments {
            let row = rows[name.as_str()];
            let kind = serde_json::to_value(kind).expect("a type serialises");
            assert_eq!(Some(row[1].as_str()), kind.as_str(), "{id}: `{name}`'s type");
            let default = contract.defaults.get(name);
            let must = contract.required.contains(name) && default.is_none();
            assert_eq!(row[2], if must { "yes" } else { "no" }, "{id}: whether `{name}` must be sent");
            let shown_default = default.map(|value| format!("`{value}`")).unwrap_or_default();
            assert_eq!(row[3], shown_default, "{id}: `{name}`'s default");
            let material = if contract.material.contains(name) {
                "yes"
            } else if contract.ignored.contains(name) {
                "no (ignored)"
            } else {
                "no"
            };
            assert_eq!(row[4], material, "{id}: whether `{name}` is material");
        }
        // The heading above the table names the tool and version; the text after it, up to the
        // next heading, the effect class and the execution.
        let heading = lines[..table.line].iter().rev().find(|line| line.starts_with('#')).expect("a heading");
        assert!(
            heading.contains(&contract.name) && heading.contains(&contract.version),
            "{id}: the table sits under {heading:?}"
        );
        let after: Vec<&str> =
            lines[table.line..].iter().take_while(|line| !line.starts_with('#')).copied().collect();
        let after = after.join("\n");
        for (what, value) in [
            ("effect class", serde_json::to_value(contract.effect_class)),
            ("execution", serde_json::to_value(contract.execution)),
        ] {
            let value = value.expect("serialises");
            let value = value.as_str().expect("a name");
            assert!(
                after.contains(&format!("`{value}`")),
                "{id}: the section does not say its {what} `{value}`"
            );
        }
    }
    let stale: Vec<&String> = tables.keys().filter(|id| !named.contains(*id)).collect();
    assert!(stale.is_empty(), "docs/downstream.md has tables for contracts that do not exist: {stale:?}");
}
