//! `replaylab executor serve`: the reference executor as an MCP server over stdio, speaking
//! replaylab's conventions (`docs/mcp.md`, `protocol::mcp`) in the real world's environment
//! ([`crate::real_env`]).
//!
//! - `tools/list`: the contract tools the reference serves for real (every built-in contract;
//!   `messages.send` only where the world has a queue, [`env::QUEUE_URL`]), each with a
//!   permissive object schema (the reference validates the arguments itself), and
//!   [`POLL_TOOL`], [`RECONCILE_TOOL`] and, with a queue, [`CONSUME_TOOL`].
//! - Webhooks: with [`env::WEBHOOK_LISTEN`], plain HTTP there, at [`WEBHOOK_PATH`], each
//!   completion event handed to the executor and answered `{"ack": ...}`.
//! - `tools/call`: the operation from `_meta["dev.replaylab/call"]` ([`CallMeta`]), the
//!   arguments as the call's raw JSON arguments, answered with the [`Outcome`] as
//!   `structuredContent` and `isError: false`; a request the server cannot read (no or an
//!   invalid `_meta`) is a tool error result saying what is wrong (`isError: true`).
//! - `resources/read` of [`MANIFEST_URI`]: the [`Manifest`].
//!
//! The reference executor is not `Send` (its futures and environment hold `Rc`s), and rmcp's
//! server handler must be: the executor lives on a thread of its own (a current-thread
//! runtime with a `LocalSet`), and the handler sends it each request over a channel with a
//! channel for the answer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use executor::{ReferenceConfig, ReferenceFactory, StoreLocation, DEFAULT_DOWNSTREAM_TIMEOUT};
use protocol::mcp::{
    env, CallMeta, ConsumeAnswer, ConsumeArguments, Manifest, ManifestCapabilities, Timing, WebhookAnswer,
    CALL_META, CONSUME_TOOL, CONVENTIONS_VERSION, MANIFEST_URI, POLL_TOOL, RECONCILE_TOOL,
};
use protocol::{
    Consumed, ContractSet, Executor, ExecutorFactory, OperationRef, Outcome, ToolCall, WebhookAck,
    WebhookEvent,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::{mpsc, oneshot};

use crate::real_env::RealWorld;

/// The contract tools that need a queue: served only where the world has one.
const QUEUED_TOOLS: [&str; 1] = ["messages.send"];
/// Where the server receives webhooks on [`env::WEBHOOK_LISTEN`] (its manifest says so).
pub const WEBHOOK_PATH: &str = "/v1/webhooks";

/// How the server speaks MCP.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// MCP over the process's standard input and output.
    Stdio,
    /// MCP over streamable HTTP at `http://ADDRESS/mcp` ([`env::MCP_LISTEN`]).
    Http(std::net::SocketAddr),
}

/// Everything `executor serve` needs, validated before any work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// How MCP is spoken.
    pub transport: Transport,
    /// The claim store (`--store sqlite:PATH`, or `--store postgres://..` with `--schema`).
    pub store: StoreLocation,
    /// The worker's world: name, incarnation, downstream, state directory.
    pub world: RealWorld,
    /// How long one downstream request may take ([`env::DOWNSTREAM_TIMEOUT_MS`]).
    pub downstream_timeout: Duration,
    /// Every contract's lease, when the environment sets one ([`env::LEASE_MS`]).
    pub lease: Option<Duration>,
    /// Every contract's retention, when the environment sets one ([`env::RETENTION_MS`]).
    pub retention: Option<Duration>,
    /// What each downstream service does, when the environment says ([`env::SERVICES`]).
    pub services: Option<protocol::mcp::Services>,
    /// Where to receive webhooks ([`env::WEBHOOK_LISTEN`]), if anywhere.
    pub webhook_listen: Option<std::net::SocketAddr>,
    /// A mutant of the zoo served instead of the reference (its name, checked by
    /// [`servable_mutant`]).
    pub mutant: Option<String>,
    /// Serve neither [`POLL_TOOL`] nor [`RECONCILE_TOOL`]: a server as most are, which the
    /// agent can only call (`--no-poll`), to see what the black-box world judges of one.
    pub no_poll: bool,
}

/// The mutant of the zoo called `name`, if a process can serve it: its defect is a decision
/// ([`executor::Strategies`]), made over the store it is given. `in_memory_claims` is not: its
/// defect is where the claims live, which the store a process is given decides.
pub fn servable_mutant(name: &str) -> Result<String, String> {
    let Some(mutant) = executor::mutants::find(name) else {
        let known: Vec<&str> = executor::mutants::all().iter().map(|mutant| mutant.name).collect();
        return Err(format!("no such mutant; the zoo has {}", known.join(", ")));
    };
    if mutant.name == "in_memory_claims" {
        return Err(
            "its defect is where the claims live, not a decision: a process serves the store --store names"
                .into(),
        );
    }
    Ok(mutant.name.to_owned())
}

/// `--store` and `--schema`, checked.
fn store_location(store: &str, schema: Option<&str>) -> Result<StoreLocation, String> {
    let expected =
        "expected sqlite:PATH (a SQLite file) or postgres://USER@HOST:PORT/DB (a Postgres database)";
    if store.starts_with("postgres://") || store.starts_with("postgresql://") {
        if let Some(schema) = schema.filter(|schema| !executor::valid_schema_name(schema)) {
            return Err(format!(
                "--schema {schema:?}: expected 1 to 63 of a-z, 0-9 and `_`, not starting with a digit or pg_"
            ));
        }
        return Ok(StoreLocation::Postgres { url: store.to_owned(), schema: schema.map(str::to_owned) });
    }
    if schema.is_some() {
        return Err("--schema is for a postgres:// store".into());
    }
    match store.strip_prefix("sqlite:") {
        Some(path) if !path.is_empty() => Ok(StoreLocation::File(PathBuf::from(path))),
        _ => Err(format!("--store {store:?}: {expected}")),
    }
}

/// The longest lease, retention or downstream timeout the environment may set: a day, the cap
/// the scenario loader puts on every duration (longer ones overflow the store's arithmetic on
/// millisecond timestamps long before they mean anything to a test).
const MAX_SETTING_MS: u64 = 24 * 60 * 60 * 1000;

impl ServeConfig {
    /// The configuration from the flags and the environment (`variable` looks one up); an
    /// error names the flag or the variable and what is wrong with it.
    pub fn from_flags_and_env(
        transport: &str,
        store: &str,
        schema: Option<&str>,
        variable: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let transport = match transport {
            "stdio" => Transport::Stdio,
            "http" => {
                let listen = variable(env::MCP_LISTEN).unwrap_or_default();
                let address = listen.parse().map_err(|_| {
                    format!(
                        "--transport http needs {}=HOST:PORT (an IP address and a port), not {listen:?}",
                        env::MCP_LISTEN
                    )
                })?;
                Transport::Http(address)
            }
            other => return Err(format!("--transport {other:?}: expected stdio or http")),
        };
        let store = store_location(store, schema)?;
        let required = |name: &str| match variable(name) {
            Some(value) if !value.trim().is_empty() => Ok(value),
            Some(_) => Err(format!("{name} is empty (see docs/mcp.md, section 5)")),
            None => Err(format!("{name} is not set (see docs/mcp.md, section 5)")),
        };
        let worker = required(env::WORKER)?;
        let incarnation = required(env::INCARNATION)?;
        let incarnation: u32 = incarnation
            .parse()
            .map_err(|_| format!("{}={incarnation:?}: expected a whole number from 0", env::INCARNATION))?;
        let state_dir = PathBuf::from(required(env::STATE_DIR)?);
        if !state_dir.is_dir() {
            return Err(format!("{}={}: not a directory", env::STATE_DIR, state_dir.display()));
        }
        let url = required(env::DOWNSTREAM_URL)?;
        let downstream = parse_http_url(&url)
            .ok_or_else(|| format!("{}={url:?}: expected http://HOST:PORT", env::DOWNSTREAM_URL))?;
        if let Some(authz) = variable(env::AUTHZ_URL).filter(|value| !value.trim().is_empty()) {
            let expected = format!("{}/v1/authz", url.trim_end_matches('/'));
            if authz != expected {
                return Err(format!(
                    "{}={authz:?}: this server asks the downstream's authorizer only ({expected})",
                    env::AUTHZ_URL
                ));
            }
        }
        let millis = |name: &str| -> Result<Option<Duration>, String> {
            match variable(name) {
                None => Ok(None),
                Some(value) => match value.parse::<u64>() {
                    Ok(ms) if ms > MAX_SETTING_MS => Err(format!(
                        "{name}={value:?}: too large; at most {MAX_SETTING_MS} milliseconds (24 hours)"
                    )),
                    Ok(ms) if ms > 0 => Ok(Some(Duration::from_millis(ms))),
                    Err(error) if *error.kind() == std::num::IntErrorKind::PosOverflow => Err(format!(
                        "{name}={value:?}: too large; at most {MAX_SETTING_MS} milliseconds (24 hours)"
                    )),
                    _ => Err(format!("{name}={value:?}: expected milliseconds, at least 1")),
                },
            }
        };
        let downstream_timeout = millis(env::DOWNSTREAM_TIMEOUT_MS)?.unwrap_or(DEFAULT_DOWNSTREAM_TIMEOUT);
        let lease = millis(env::LEASE_MS)?;
        let retention = millis(env::RETENTION_MS)?;
        let services = match variable(env::SERVICES).filter(|value| !value.trim().is_empty()) {
            None => None,
            Some(text) => {
                let services: protocol::mcp::Services = serde_json::from_str(&text).map_err(|error| {
                    format!("{}: expected {{\"SERVICE\": {{\"honours_keys\": BOOL, \"receipts\": BOOL}}}}: {error}", env::SERVICES)
                })?;
                if let Some(unknown) =
                    services.keys().find(|name| fake_downstream::Service::parse(name).is_none())
                {
                    return Err(format!("{}: no service {unknown:?}", env::SERVICES));
                }
                Some(services)
            }
        };
        let operators =
            match variable(env::OPERATORS_URL).filter(|value| !value.trim().is_empty()) {
                None => None,
                Some(url) => Some(crate::real_env::HttpTarget::parse(&url).ok_or_else(|| {
                    format!("{}={url:?}: expected http://HOST:PORT/PATH", env::OPERATORS_URL)
                })?),
            };
        let queue = match variable(env::QUEUE_URL).filter(|value| !value.trim().is_empty()) {
            None => None,
            Some(url) => Some(
                crate::real_env::HttpTarget::parse(&url)
                    .ok_or_else(|| format!("{}={url:?}: expected http://HOST:PORT/PATH", env::QUEUE_URL))?,
            ),
        };
        let webhook_listen = match variable(env::WEBHOOK_LISTEN).filter(|value| !value.trim().is_empty()) {
            None => None,
            Some(listen) => Some(listen.parse().map_err(|_| {
                format!("{}={listen:?}: expected HOST:PORT (an IP address and a port)", env::WEBHOOK_LISTEN)
            })?),
        };
        Ok(Self {
            transport,
            store,
            webhook_listen,
            mutant: None,
            no_poll: false,
            world: RealWorld { worker, incarnation, downstream, state_dir, operators, queue },
            downstream_timeout,
            lease,
            retention,
            services,
        })
    }

    /// The contracts the executor works with: the built-in ones, with the environment's
    /// lease and retention when it sets them.
    pub fn contracts(&self) -> ContractSet {
        let mut contracts = ContractSet::builtin();
        let changed: Vec<_> = contracts
            .iter()
            .map(|contract| {
                let mut contract = contract.clone();
                contract.lease = self.lease.unwrap_or(contract.lease);
                contract.retention = self.retention.unwrap_or(contract.retention);
                contract
            })
            .collect();
        for contract in changed {
            contracts.insert(contract);
        }
        for (service, traits) in self.services.iter().flatten() {
            contracts.set_capabilities(service, traits.honours_keys, traits.receipts);
        }
        contracts
    }

    /// The contract tools served, by name.
    pub fn tools(&self) -> BTreeSet<String> {
        self.contracts()
            .iter()
            .map(|contract| contract.name.clone())
            .filter(|name| self.world.queue.is_some() || !QUEUED_TOOLS.contains(&name.as_str()))
            .collect()
    }

    /// What the server says of itself at [`MANIFEST_URI`]. Its timing is the longest lease
    /// and the longest retention of any served contract (what the harness must wait for).
    pub fn manifest(&self) -> Manifest {
        let tools = self.tools();
        let contracts = self.contracts();
        let served: Vec<_> = contracts.iter().filter(|contract| tools.contains(&contract.name)).collect();
        let most = |of: &dyn Fn(&protocol::ToolContract) -> Duration| {
            served.iter().map(|contract| of(contract)).max().unwrap_or_default()
        };
        let millis = |duration: Duration| u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1);
        Manifest {
            version: CONVENTIONS_VERSION,
            capabilities: ManifestCapabilities {
                delayed_jobs: tools.contains("jobs.submit"),
                tools: Some(tools),
                queue_consumer: self.world.queue.is_some(),
                webhooks: self.webhook_listen.is_some(),
                webhook_path: self.webhook_listen.is_some().then(|| WEBHOOK_PATH.to_owned()),
                reconcile: true,
                versions: BTreeMap::new(),
            },
            timing: Some(Timing {
                lease_ms: millis(most(&|contract| contract.lease)),
                retention_ms: millis(most(&|contract| contract.retention)),
                downstream_timeout_ms: millis(self.downstream_timeout),
            }),
        }
    }
}

/// `http://HOST:PORT` (a trailing `/` allowed) → host and port.
fn parse_http_url(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("http://")?.trim_end_matches('/');
    let (host, port) = rest.rsplit_once(':')?;
    if host.is_empty() || host.contains('/') || host.contains('@') {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
}

/// Why the server stopped with an error.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// The claim store could not be opened (bad input: nothing was served).
    Store {
        /// Where the store is.
        location: String,
        /// What went wrong.
        message: String,
    },
    /// The runtime, the executor's thread or the transport failed.
    Serving(String),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // The store's own error already says which store and what failed.
            Self::Store { message, .. } => f.write_str(message),
            Self::Serving(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ServeError {}

/// One request for the executor's thread, with where its answer goes.
#[derive(Debug)]
enum Job {
    Call(ToolCall, oneshot::Sender<Outcome>),
    Poll(OperationRef, oneshot::Sender<Outcome>),
    Reconcile(OperationRef, oneshot::Sender<Outcome>),
    Consume(protocol::Envelope, oneshot::Sender<Consumed>),
    Webhook(Vec<u8>, oneshot::Sender<WebhookAck>),
}

/// Serves until the client closes the connection.
pub fn run(config: ServeConfig) -> Result<(), ServeError> {
    let (jobs, receiver) = mpsc::unbounded_channel();
    let (started, ready) = std::sync::mpsc::channel();
    let executor_config = config.clone();
    let executor_thread = std::thread::Builder::new()
        .name("executor".into())
        .spawn(move || run_executor(&executor_config, receiver, &started))
        .map_err(|error| ServeError::Serving(format!("failed to start the executor's thread: {error}")))?;
    match ready.recv() {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return Err(error),
        Err(_) => return Err(ServeError::Serving("the executor's thread stopped before it started".into())),
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| ServeError::Serving(format!("failed to start the async runtime: {error}")))?;
    let server = ReferenceServer::new(&config, jobs.clone());
    let served = runtime.block_on(async move {
        if let Some(address) = config.webhook_listen {
            let listener = tokio::net::TcpListener::bind(address).await.map_err(|error| {
                ServeError::Serving(format!("failed to listen for webhooks on {address}: {error}"))
            })?;
            tokio::spawn(serve_webhooks(listener, jobs));
        }
        match config.transport {
            Transport::Stdio => {
                let running = server.serve(rmcp::transport::stdio()).await.map_err(|error| {
                    ServeError::Serving(format!("failed to start MCP over stdio: {error}"))
                })?;
                running
                    .waiting()
                    .await
                    .map_err(|error| ServeError::Serving(format!("the MCP session failed: {error}")))?;
                Ok(())
            }
            Transport::Http(address) => serve_http(server, address).await,
        }
    });
    // The handler (and with it the channel's sender) is gone: the executor's thread ends.
    drop(runtime);
    let _ = executor_thread.join();
    served
}

/// Serves MCP over streamable HTTP at `http://ADDRESS/mcp` until the process is stopped: each
/// session gets a handler of its own, every handler feeds the one executor.
async fn serve_http(server: ReferenceServer, address: std::net::SocketAddr) -> Result<(), ServeError> {
    use rmcp::transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    };
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        std::sync::Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service(protocol::mcp::HTTP_PATH, service);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| ServeError::Serving(format!("failed to listen on {address}: {error}")))?;
    axum::serve(listener, router)
        .await
        .map_err(|error| ServeError::Serving(format!("serving MCP over HTTP failed: {error}")))
}

/// Receives the downstream's completion webhooks at [`WEBHOOK_PATH`] and hands each to the
/// executor: answered `200 {"ack": ...}`, or `503` when the executor has stopped.
async fn serve_webhooks(listener: tokio::net::TcpListener, jobs: mpsc::UnboundedSender<Job>) {
    let receive = move |body: axum::body::Bytes| {
        let jobs = jobs.clone();
        async move {
            let (answer, ack) = oneshot::channel();
            let ack = match jobs.send(Job::Webhook(body.to_vec(), answer)) {
                Ok(()) => ack.await.ok(),
                Err(_) => None,
            };
            match ack {
                Some(ack) => (http::StatusCode::OK, axum::Json(WebhookAnswer { ack })).into_response(),
                None => (http::StatusCode::SERVICE_UNAVAILABLE, "the executor stopped").into_response(),
            }
        }
    };
    let router = axum::Router::new().route(WEBHOOK_PATH, axum::routing::post(receive));
    if let Err(error) = axum::serve(listener, router).await {
        tracing::error!(%error, "serving webhooks failed");
    }
}

/// The executor's thread: opens the store, says so on `started`, then answers jobs until the
/// server drops its sender, each job as a task of its own (calls run concurrently).
fn run_executor(
    config: &ServeConfig,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    started: &std::sync::mpsc::Sender<Result<(), ServeError>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = started
                .send(Err(ServeError::Serving(format!("failed to start the executor's runtime: {error}"))));
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let strategies = config
            .mutant
            .as_deref()
            .and_then(executor::mutants::find)
            .map_or(executor::Strategies::reference as fn() -> executor::Strategies, |mutant| {
                mutant.strategies
            });
        let factory = match ReferenceFactory::with_strategies(
            config.store.clone(),
            ReferenceConfig::default().with_downstream_timeout(config.downstream_timeout),
            move |_: &protocol::WorkerEnv| strategies(),
        ) {
            Ok(factory) => factory,
            Err(error) => {
                let _ = started.send(Err(ServeError::Store {
                    location: config.store.to_string(),
                    message: error.to_string(),
                }));
                return;
            }
        };
        let mut env = config.world.worker_env();
        env.contracts = Arc::new(config.contracts());
        let executor: Rc<dyn Executor> = Rc::from(factory.start(env));
        let _ = started.send(Ok(()));
        while let Some(job) = jobs.recv().await {
            let executor = Rc::clone(&executor);
            tokio::task::spawn_local(async move {
                // A closed answer channel means the client went away: nothing to tell.
                match job {
                    Job::Call(call, answer) => {
                        let _ = answer.send(executor.call(call).await);
                    }
                    Job::Poll(operation, answer) => {
                        let _ = answer.send(executor.poll(operation).await);
                    }
                    Job::Reconcile(operation, answer) => {
                        let _ = answer.send(executor.reconcile(operation).await);
                    }
                    Job::Consume(envelope, answer) => {
                        let _ = answer.send(executor.consume(envelope).await);
                    }
                    Job::Webhook(body, answer) => {
                        let _ = answer.send(executor.webhook(WebhookEvent { body }).await);
                    }
                }
            });
        }
        drop(executor);
        drop(factory);
    });
}

/// The MCP side: `Send`, it forwards each request to the executor's thread.
#[derive(Debug, Clone)]
struct ReferenceServer {
    jobs: mpsc::UnboundedSender<Job>,
    tools: Arc<Vec<Tool>>,
    contract_tools: Arc<BTreeSet<String>>,
    manifest: Arc<String>,
    /// It serves [`CONSUME_TOOL`] (the world has a queue).
    consumes: bool,
    /// It serves [`POLL_TOOL`] and [`RECONCILE_TOOL`] (not with `--no-poll`).
    polls: bool,
    /// The name its MCP handshake gives: `replaylab-reference`, or `replaylab-mutant-NAME`.
    name: String,
}

impl ReferenceServer {
    fn new(config: &ServeConfig, jobs: mpsc::UnboundedSender<Job>) -> Self {
        let contract_tools = config.tools();
        let contracts = config.contracts();
        let mut tools: Vec<Tool> = contract_tools
            .iter()
            .map(|name| {
                let versions: Vec<&str> = contracts
                    .iter()
                    .filter(|contract| &contract.name == name)
                    .map(|contract| contract.version.as_str())
                    .collect();
                Tool::new(
                    name.clone(),
                    format!(
                        "The contract tool {name} (versions {}), through the reference executor: name the operation in _meta[\"{CALL_META}\"]",
                        versions.join(", ")
                    ),
                    permissive_schema(),
                )
            })
            .collect();
        if !config.no_poll {
            tools.push(Tool::new(
                POLL_TOOL,
                format!("The outcome of the operation named in _meta[\"{CALL_META}\"] (empty arguments)"),
                permissive_schema(),
            ));
        }
        if config.world.queue.is_some() {
            tools.push(Tool::new(
                CONSUME_TOOL,
                "One delivery of a queued envelope (arguments: envelope, attempt): carried out once, answered ack or retry",
                permissive_schema(),
            ));
        }
        if !config.no_poll {
            tools.push(Tool::new(
                RECONCILE_TOOL,
                format!(
                    "Settle the operation named in _meta[\"{CALL_META}\"] against the downstream's records, then answer its outcome"
                ),
                permissive_schema(),
            ));
        }
        let manifest = serde_json::to_string_pretty(&config.manifest()).expect("a manifest serialises");
        Self {
            jobs,
            tools: Arc::new(tools),
            contract_tools: Arc::new(contract_tools),
            manifest: Arc::new(manifest),
            consumes: config.world.queue.is_some(),
            polls: !config.no_poll,
            name: config.mutant.as_ref().map_or_else(
                || "replaylab-reference".to_owned(),
                |mutant| format!("replaylab-mutant-{mutant}"),
            ),
        }
    }

    /// [`CONSUME_TOOL`]: one delivery handed to the executor's consumer, answered
    /// `{"consumed": "ack" | "retry"}`; arguments it cannot read are a tool error.
    async fn consume(&self, request: CallToolRequestParams) -> Result<CallToolResult, McpError> {
        let arguments = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let arguments: ConsumeArguments = match serde_json::from_value(arguments) {
            Ok(arguments) => arguments,
            Err(error) => {
                let message = format!("{CONSUME_TOOL} takes {{\"envelope\", \"attempt\"}}: {error}");
                return Ok(CallToolResult::error(vec![ContentBlock::text(message)]));
            }
        };
        let (answer, consumed) = oneshot::channel();
        let internal = || McpError::internal_error("the executor stopped", None);
        self.jobs.send(Job::Consume(arguments.envelope, answer)).map_err(|_| internal())?;
        let consumed = consumed.await.map_err(|_| internal())?;
        let text = serde_json::to_value(consumed)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content =
            Some(serde_json::to_value(ConsumeAnswer { consumed }).expect("an answer serialises"));
        Ok(result)
    }

    /// `meta` is the request's `_meta`: rmcp moves it out of the params into the request's
    /// context before the handler sees them.
    async fn answer(
        &self,
        request: CallToolRequestParams,
        meta: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallToolResult, McpError> {
        let name = request.name.as_ref();
        if name == CONSUME_TOOL && self.consumes {
            return self.consume(request).await;
        }
        let is_contract_tool = self.contract_tools.contains(name);
        let query = (name == POLL_TOOL || name == RECONCILE_TOOL) && self.polls;
        if !is_contract_tool && !query {
            return Err(McpError::invalid_params(format!("unknown tool {name:?}"), None));
        }
        let meta = match call_meta(Some(meta)) {
            Ok(meta) => meta,
            Err(message) => return Ok(CallToolResult::error(vec![ContentBlock::text(message)])),
        };
        let operation = OperationRef {
            tenant: meta.tenant.clone(),
            environment: meta.environment.clone(),
            workflow_id: meta.workflow_id.clone(),
            step_id: meta.step_id.clone(),
            actor: meta.actor.clone(),
        };
        let (answer, outcome) = oneshot::channel();
        let job = if is_contract_tool {
            let mut arguments = request.arguments.unwrap_or_default();
            // The key as an argument (`--key-argument`) is transport, not business: the
            // operation's key is the one `_meta` names.
            for transport in KEY_ARGUMENTS {
                arguments.remove(transport);
            }
            let arguments = serde_json::Value::Object(arguments);
            let arguments = serde_json::value::to_raw_value(&arguments).expect("JSON values serialise");
            Job::Call(
                ToolCall {
                    tenant: meta.tenant,
                    environment: meta.environment,
                    workflow_id: meta.workflow_id,
                    step_id: meta.step_id,
                    tool: name.to_owned(),
                    tool_version: meta.tool_version,
                    arguments,
                    actor: meta.actor,
                    call_id: meta.call_id,
                    trace_id: None,
                    attempt: meta.attempt,
                },
                answer,
            )
        } else if name == POLL_TOOL {
            Job::Poll(operation, answer)
        } else {
            Job::Reconcile(operation, answer)
        };
        let internal = || McpError::internal_error("the executor stopped", None);
        self.jobs.send(job).map_err(|_| internal())?;
        let outcome = outcome.await.map_err(|_| internal())?;
        Ok(outcome_result(&outcome))
    }
}

/// Arguments that carry the operation's key besides `_meta` (docs/mcp.md section 1), dropped
/// before the contract validates the business arguments.
const KEY_ARGUMENTS: [&str; 2] = ["idempotency_key", "idempotencyKey"];

/// `{"type": "object"}`: any arguments; the executor validates them against the contract.
fn permissive_schema() -> Arc<serde_json::Map<String, serde_json::Value>> {
    let mut schema = serde_json::Map::new();
    schema.insert("type".into(), "object".into());
    Arc::new(schema)
}

/// The call's [`CallMeta`] from a request's `_meta`, or what is wrong with it.
fn call_meta(meta: Option<&serde_json::Map<String, serde_json::Value>>) -> Result<CallMeta, String> {
    let Some(value) = meta.and_then(|meta| meta.get(CALL_META)) else {
        return Err(format!(
            "missing _meta[\"{CALL_META}\"]: name the operation (tenant, environment, workflow_id, step_id, actor, tool_version, call_id, attempt, idempotency_key; docs/mcp.md)"
        ));
    };
    let meta: CallMeta = serde_json::from_value(value.clone())
        .map_err(|error| format!("invalid _meta[\"{CALL_META}\"]: {error}"))?;
    if meta.version != CONVENTIONS_VERSION {
        return Err(format!(
            "invalid _meta[\"{CALL_META}\"]: version {} (this server speaks version {CONVENTIONS_VERSION})",
            meta.version
        ));
    }
    Ok(meta)
}

/// An outcome as a tool result: the outcome as `structuredContent`, a line of text, and
/// `isError: false` (every outcome is an answer, a refusal included).
fn outcome_result(outcome: &Outcome) -> CallToolResult {
    let mut text = outcome.status.as_str().to_owned();
    if let Some(reason) = outcome.reason {
        text.push_str(&format!(" ({})", reason.as_str()));
    }
    if let Some(reference) = &outcome.effect_reference {
        text.push_str(&format!(": {reference}"));
    }
    if let Some(message) = &outcome.message {
        text.push_str(&format!(" ({message})"));
    }
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(serde_json::to_value(outcome).expect("an outcome serialises"));
    result
}

impl ServerHandler for ReferenceServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(rmcp::model::Implementation::new(self.name.clone(), env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "replaylab's reference executor. Name each call's operation in _meta[\"{CALL_META}\"]; its outcome comes back as structuredContent. Read {MANIFEST_URI} for what it supports."
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Should a future rmcp leave `_meta` in the params, it is read there.
        let meta = match &request.meta {
            Some(meta) if !meta.0 .0.is_empty() => meta.0 .0.clone(),
            _ => context.meta.0 .0.clone(),
        };
        self.answer(request, &meta).await.map(CallToolResponse::from)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let manifest = Resource::new(MANIFEST_URI, "executor")
            .with_description("What this executor supports and its timing (replaylab's conventions)")
            .with_mime_type("application/json");
        Ok(ListResourcesResult::with_all_items(vec![manifest]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if request.uri != MANIFEST_URI {
            return Err(McpError::resource_not_found(format!("no resource {:?}", request.uri), None));
        }
        let contents =
            ResourceContents::text(self.manifest.as_str(), MANIFEST_URI).with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> =
            pairs.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect();
        move |name: &str| pairs.iter().find(|(known, _)| known == name).map(|(_, value)| value.clone())
    }

    fn complete() -> Vec<(&'static str, &'static str)> {
        vec![
            (env::WORKER, "worker-1"),
            (env::INCARNATION, "0"),
            (env::STATE_DIR, "/"),
            (env::DOWNSTREAM_URL, "http://127.0.0.1:8080"),
        ]
    }

    #[test]
    fn the_environment_is_read_and_checked() {
        let config =
            ServeConfig::from_flags_and_env("stdio", "sqlite:/tmp/claims.db", None, environment(&complete()))
                .expect("a configuration");
        assert_eq!(config.world.downstream, ("127.0.0.1".to_owned(), 8080));
        assert_eq!(config.downstream_timeout, DEFAULT_DOWNSTREAM_TIMEOUT);
        for missing in [env::WORKER, env::INCARNATION, env::STATE_DIR, env::DOWNSTREAM_URL] {
            let without: Vec<_> = complete().into_iter().filter(|(name, _)| *name != missing).collect();
            let error = ServeConfig::from_flags_and_env("stdio", "sqlite:x.db", None, environment(&without))
                .expect_err("refused");
            assert!(error.contains(missing), "{error}");
        }
        let bad = |name: &'static str, value: &'static str| {
            let mut pairs = complete();
            pairs.retain(|(known, _)| *known != name);
            pairs.push((name, value));
            let error = ServeConfig::from_flags_and_env("stdio", "sqlite:x.db", None, environment(&pairs))
                .expect_err(value);
            assert!(error.contains(name), "{error}");
        };
        // An empty variable is said to be empty, not unset; a number too large says so.
        let said = |name: &'static str, value: &'static str| {
            let mut pairs = complete();
            pairs.retain(|(known, _)| *known != name);
            pairs.push((name, value));
            ServeConfig::from_flags_and_env("stdio", "sqlite:x.db", None, environment(&pairs))
                .expect_err(value)
        };
        assert_eq!(said(env::WORKER, ""), format!("{} is empty (see docs/mcp.md, section 5)", env::WORKER));
        for too_large in ["86400001", "18446744073709551616", "99999999999999999999999"] {
            let error = said(env::LEASE_MS, too_large);
            assert!(error.contains("too large; at most 86400000 milliseconds"), "{error}");
        }
        let mut pairs = complete();
        pairs.push((env::RETENTION_MS, "86400000"));
        ServeConfig::from_flags_and_env("stdio", "sqlite:x.db", None, environment(&pairs))
            .expect("a day is allowed");
        bad(env::INCARNATION, "-1");
        bad(env::DOWNSTREAM_URL, "https://127.0.0.1:8080");
        bad(env::DOWNSTREAM_URL, "http://127.0.0.1");
        bad(env::LEASE_MS, "0");
        bad(env::DOWNSTREAM_TIMEOUT_MS, "soon");
        bad(env::AUTHZ_URL, "http://elsewhere:1/authz");
        bad(env::SERVICES, "keys honoured");
        bad(env::SERVICES, r#"{"payments": {"honours_keys": true, "receipts": true}}"#);
        bad(env::SERVICES, r#"{"charges": {"honours_keys": true}}"#);
        bad(env::OPERATORS_URL, "https://127.0.0.1:8080/v1/reconciliations");
        // What each service does reaches the contracts the executor works with.
        let mut pairs = complete();
        pairs.push((env::SERVICES, r#"{"charges": {"honours_keys": false, "receipts": false}}"#));
        pairs.push((env::OPERATORS_URL, "http://127.0.0.1:8080/v1/reconciliations"));
        let config = ServeConfig::from_flags_and_env("stdio", "sqlite:x.db", None, environment(&pairs))
            .expect("valid");
        let charge = config.contracts().get("payments.charge", "2026-08-18").cloned().expect("a contract");
        assert!(!charge.downstream.honours_key && !charge.downstream.receipt_lookup, "{charge:?}");
        let ticket = config.contracts().get("tickets.create", "2026-08-18").cloned().expect("a contract");
        assert!(ticket.downstream.honours_key && ticket.downstream.receipt_lookup, "untouched: {ticket:?}");
        let operators = config.world.operators.expect("an operators' queue");
        assert_eq!((operators.port, operators.path.as_str()), (8080, "/v1/reconciliations"));
        let flags = |transport: &str, store: &str, schema: Option<&str>| {
            ServeConfig::from_flags_and_env(transport, store, schema, environment(&complete()))
                .expect_err("refused")
        };
        assert!(flags("http", "sqlite:x.db", None).contains(env::MCP_LISTEN), "http needs an address");
        let mut pairs = complete();
        pairs.push((env::MCP_LISTEN, "127.0.0.1:4100"));
        let http =
            ServeConfig::from_flags_and_env("http", "sqlite:x.db", None, environment(&pairs)).expect("valid");
        assert_eq!(http.transport, Transport::Http(([127, 0, 0, 1], 4100).into()));
        assert!(flags("stdio", "mysql://x", None).contains("sqlite:PATH"));
        assert!(flags("stdio", "sqlite:x.db", Some("run_1")).contains("--schema is for a postgres"));
        for bad in ["Run1", "1run", "pg_run", "run-1", "run;drop", ""] {
            let error = flags("stdio", "postgres://u@h/db", Some(bad));
            assert!(error.contains("--schema"), "{bad}: {error}");
        }
        let postgres = |schema: Option<&str>| {
            ServeConfig::from_flags_and_env(
                "stdio",
                "postgres://u@h:5432/db",
                schema,
                environment(&complete()),
            )
            .expect("valid")
            .store
        };
        assert_eq!(
            postgres(Some("run_r12_3_s02_0")),
            StoreLocation::Postgres {
                url: "postgres://u@h:5432/db".into(),
                schema: Some("run_r12_3_s02_0".into())
            }
        );
        assert_eq!(
            postgres(None),
            StoreLocation::Postgres { url: "postgres://u@h:5432/db".into(), schema: None }
        );
    }

    #[test]
    fn the_manifest_names_what_is_served() {
        let mut pairs = complete();
        pairs.push((env::LEASE_MS, "1500"));
        let config = ServeConfig::from_flags_and_env("stdio", "sqlite:x.db", None, environment(&pairs))
            .expect("a configuration");
        let manifest = config.manifest();
        let tools = manifest.capabilities.tools.clone().expect("tools");
        assert!(tools.contains("tickets.create") && !tools.contains("messages.send"), "{tools:?}");
        assert!(manifest.capabilities.reconcile && manifest.capabilities.delayed_jobs);
        assert_eq!(manifest.timing.expect("timing").lease_ms, 1500);
    }

    #[test]
    fn a_call_without_its_operation_is_told_what_is_missing() {
        assert!(call_meta(None).expect_err("missing").contains("missing _meta[\"dev.replaylab/call\"]"));
        let mut meta = serde_json::Map::new();
        meta.insert(CALL_META.into(), serde_json::json!({"version": 1}));
        assert!(call_meta(Some(&meta)).expect_err("invalid").starts_with("invalid _meta"));
    }
}
