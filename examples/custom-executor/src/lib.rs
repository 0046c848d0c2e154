//! A small custom executor, to show how to plug your own into replaylab and test it with the
//! whole `replaylab` command (`src/bin/custom-replaylab.rs`) and with proptest.
//!
//! `TinyExecutor` handles one tool, `tickets.create`. Its claims live in a map owned by the
//! factory: the factory outlives worker crashes and is shared by every worker of a run, like
//! an external database would be. Within one simulation everything runs on one thread and the
//! map is checked and written without an `.await` in between, so a claim is atomic.
//!
//! What it does, in order: look up the contract, validate and fingerprint the arguments,
//! derive the operation key from the workflow context, ask the authorizer, claim or load,
//! compare fingerprints, then call the downstream with the key as `Idempotency-Key`. An
//! ambiguous answer (timeout, closed connection, 5xx, unreadable body) is `unknown`; the
//! executor does not wait for the agent to find out: it keeps the arguments of that one
//! operation and, in the background (`env.background`), recovers it: it looks the receipt up
//! where the downstream offers that, else resends with the same key where the downstream
//! honours keys, else leaves it `unknown` (a blind resend could make a second ticket). A later
//! call, poll or reconcile of an abandoned operation recovers it the same way.
//!
//! It is deliberately narrow, and says so in its [`executors`]' capabilities: one tool, called
//! directly; no queue consumer, delayed jobs or webhooks.
#![deny(missing_docs)]

pub mod variants;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use executor::downstream::{read_receipt, receipt_request, send, ReceiptLookup};
use harness::prelude::{ExecutorCapabilities, ExecutorSpec};
use protocol::{
    AuthRequest, Consumed, Envelope, Executor, ExecutorFactory, LocalBoxFuture, NextAction, OperationRef,
    Outcome, OutcomeStatus, ReasonCode, ReconciliationEntry, ToolCall, ToolContract, WebhookAck,
    WebhookEvent, WorkerEnv,
};
use wire::HttpRequest;

/// The executors this crate adds to replaylab's command (`src/bin/custom-replaylab.rs`):
///
/// - `custom`, the [`TinyFactory`] executor;
/// - `custom-keyless`, its deliberately broken variant ([`TinyFactory::keyless`]);
/// - `reference-timeout-is-success` and `reference-short-ttl-delete`, two variants of the
///   reference executor made of its public parts ([`variants`]).
///
/// The first two declare what they support: `tickets.create`, called directly, and `reconcile`; no
/// queue consumer, no delayed jobs, no webhooks. Scenarios that need more are `not
/// applicable` to them.
pub fn executors() -> Vec<ExecutorSpec> {
    let supports = ExecutorCapabilities::tools([TOOL]).with_reconcile(true);
    vec![
        ExecutorSpec::new("custom", |_run: &str| {
            Ok(Rc::new(TinyFactory::default()) as Rc<dyn ExecutorFactory>)
        })
        .version(env!("CARGO_PKG_VERSION"))
        .description("the custom-executor example: tickets.create over an in-memory claim map")
        .capabilities(supports.clone()),
        ExecutorSpec::new("custom-keyless", |_run: &str| {
            Ok(Rc::new(TinyFactory::keyless()) as Rc<dyn ExecutorFactory>)
        })
        .version(env!("CARGO_PKG_VERSION"))
        .description("the example, broken on purpose: it sends no Idempotency-Key")
        .capabilities(supports),
        variants::timeout_is_success().version(env!("CARGO_PKG_VERSION")).description(
            "the reference, but an ambiguous answer is taken as done (the zoo's M06, on the public parts)",
        ),
        variants::short_ttl_delete().version(env!("CARGO_PKG_VERSION")).description(
            "the reference, but a record past retention is deleted (the zoo's M08, on the public parts)",
        ),
    ]
}

/// The one tool this executor knows.
pub const TOOL: &str = "tickets.create";
/// How long one downstream request may take before its outcome is unknown.
const DOWNSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// How long after an ambiguous answer the executor resends on its own (then twice, three
/// times as long).
const RESEND_AFTER: Duration = Duration::from_secs(1);
/// How many times the executor resends on its own before it leaves the operation `unknown`.
const RESEND_ATTEMPTS: u32 = 3;

#[derive(Debug, Clone, PartialEq)]
enum State {
    /// Owned by a worker until `lease_until_ms`.
    Pending { owner: String, lease_until_ms: u64 },
    /// Done: the downstream's ticket.
    Applied { ticket_id: String, result: serde_json::Value },
    /// The downstream may have created it: resend with the same key to find out.
    Unknown,
}

#[derive(Debug, Clone)]
struct Record {
    fingerprint: String,
    tool_version: String,
    state: State,
    /// The validated arguments, kept until the ticket exists: what a resend needs after an
    /// ambiguous answer or a crash.
    arguments: Option<Arguments>,
    /// Who asked: a resend is authorized again, like any effect.
    actor: String,
    /// Filed with the operators: nothing this executor can do will settle it.
    handed_over: bool,
}

type Arguments = serde_json::Map<String, serde_json::Value>;

type Claims = Rc<RefCell<BTreeMap<(String, String), Record>>>;

/// Starts [`TinyExecutor`]s that share one claim map.
#[derive(Debug)]
pub struct TinyFactory {
    claims: Claims,
    /// Whether the operation key goes downstream as `Idempotency-Key` (always, but in
    /// [`TinyFactory::keyless`]).
    send_key: bool,
}

impl Default for TinyFactory {
    fn default() -> Self {
        Self { claims: Claims::default(), send_key: true }
    }
}

impl TinyFactory {
    /// A deliberately broken variant: it sends no `Idempotency-Key`, so its resend after an
    /// ambiguous answer makes a second ticket when the first request had committed. The
    /// matrix catches it (see the README).
    pub fn keyless() -> Self {
        Self { send_key: false, ..Self::default() }
    }
}

impl ExecutorFactory for TinyFactory {
    fn start(&self, env: WorkerEnv) -> Box<dyn Executor> {
        let owner = format!("{}#{}", env.worker_id, env.incarnation);
        // Operations an earlier incarnation (of any worker) left unknown or pending: resend them
        // with their key (pending ones once their leases run out).
        let abandoned: Vec<(String, String)> = self
            .claims
            .borrow()
            .iter()
            .filter(|(_, record)| {
                !matches!(record.state, State::Applied { .. }) && record.arguments.is_some()
            })
            .map(|(scope, _)| scope.clone())
            .collect();
        for scope in abandoned {
            let (task_env, claims, task_owner) = (env.clone(), self.claims.clone(), owner.clone());
            let send_key = self.send_key;
            env.background.spawn(Box::pin(async move {
                resend_later(task_env, claims, task_owner, scope, send_key).await
            }));
        }
        Box::new(TinyExecutor { env, owner, claims: self.claims.clone(), send_key: self.send_key })
    }
}

/// The executor of one worker.
pub struct TinyExecutor {
    env: WorkerEnv,
    owner: String,
    claims: Claims,
    send_key: bool,
}

impl std::fmt::Debug for TinyExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TinyExecutor").field("owner", &self.owner).finish_non_exhaustive()
    }
}

fn outcome(status: OutcomeStatus, key: &str) -> Outcome {
    let mut outcome = Outcome::new(status);
    outcome.operation_key = Some(key.to_owned());
    outcome
}

fn rejected(reason: ReasonCode, message: &str, key: Option<&str>) -> Outcome {
    let mut outcome = Outcome::rejected(reason, message);
    outcome.operation_key = key.map(str::to_owned);
    outcome
}

impl TinyExecutor {
    fn contract(&self, version: &str) -> Option<&ToolContract> {
        self.env.contracts.get(TOOL, version)
    }

    async fn authorized(&self, tenant: &str, actor: &str) -> bool {
        let request =
            AuthRequest { tenant: tenant.to_owned(), actor: actor.to_owned(), tool: TOOL.to_owned() };
        self.env.authorizer.authorize(request).await.allowed
    }

    fn answer(&self, record: &Record, key: &str) -> Outcome {
        match &record.state {
            State::Applied { ticket_id, result } => {
                let mut replayed = outcome(OutcomeStatus::Replayed, key);
                replayed.effect_reference = Some(ticket_id.clone());
                replayed.result = Some(result.clone());
                replayed
            }
            State::Pending { lease_until_ms, .. } => {
                let mut in_flight = outcome(OutcomeStatus::InFlight, key);
                let remaining_ms = lease_until_ms.saturating_sub(self.env.clock.now_ms());
                in_flight.retry_after_seconds =
                    Some(u32::try_from(remaining_ms.div_ceil(1000)).unwrap_or(1).max(1));
                in_flight
            }
            State::Unknown => outcome(OutcomeStatus::Unknown, key),
        }
    }

    /// Sends the ticket with the operation key and records what came back.
    async fn effect(&self, tenant: &str, key: &str, arguments: &Arguments) -> Outcome {
        send_ticket(&self.env, &self.claims, &self.owner, (tenant, key), arguments, self.send_key).await
    }

    /// Takes a record over when it is unknown or its owner's lease ran out; says whether
    /// this worker now owns it.
    fn take_over(&self, scope: &(String, String)) -> bool {
        take_over(&self.env, &self.claims, &self.owner, scope)
    }

    async fn settle(&self, operation: &OperationRef) -> Outcome {
        let key = ToolContract::operation_key(
            &operation.tenant,
            &operation.environment,
            &operation.workflow_id,
            &operation.step_id,
        );
        if !self.authorized(&operation.tenant, &operation.actor).await {
            return rejected(ReasonCode::Unauthorized, "the actor may not use this tool", Some(&key));
        }
        let scope = (operation.tenant.clone(), key.clone());
        let Some(record) = self.claims.borrow().get(&scope).cloned() else {
            return rejected(ReasonCode::InvalidRequest, "no operation with this key", Some(&key));
        };
        if !self.take_over(&scope) {
            return self.answer(&record, &key);
        }
        recover(&self.env, &self.claims, &self.owner, &scope, self.send_key).await
    }
}

/// The contract version this example was written against.
fn protocol_version() -> &'static str {
    "2026-08-18"
}

/// Recovers an operation this worker has just taken over (its answer was ambiguous, or its
/// owner's lease ran out): the create may have been committed, or not.
///
/// 1. Where the downstream offers receipt lookup (the contract says so), ask it by key: a
///    receipt settles the operation as `replayed`.
/// 2. Where the downstream honours idempotency keys, send the create again with the same key:
///    it answers from the first request if that one committed.
/// 3. Else nothing can tell: the operation stays `unknown` (a blind resend could make a second
///    ticket).
async fn recover(
    env: &WorkerEnv,
    claims: &Claims,
    owner: &str,
    scope: &(String, String),
    send_key: bool,
) -> Outcome {
    let (tenant, key) = (scope.0.as_str(), scope.1.as_str());
    let kept =
        claims.borrow().get(scope).map(|record| (record.tool_version.clone(), record.arguments.clone()));
    let Some((tool_version, arguments)) = kept else { return outcome(OutcomeStatus::Unknown, key) };
    let service = env.contracts.get(TOOL, &tool_version).map(|contract| contract.downstream.clone());
    let (receipts, honoured) = service.map_or((false, false), |s| (s.receipt_lookup, s.honours_key));
    // An executor's own `tracing` events: replaylab captures them per run, on simulated time
    // (`custom-replaylab run S02 --seed 0 --log debug --trace`).
    tracing::debug!(key, receipts, honoured, "recovering a create that may have happened");
    let mut not_found = false;
    if receipts {
        match look_up_ticket(env, tenant, key).await {
            ReceiptLookup::Found(ticket_id, answer) => {
                // The safe result: the fields the contract names, never the subject or body.
                let result = serde_json::json!({
                    "ticket_id": ticket_id,
                    "version": answer.get("version"),
                    "status": answer.get("status"),
                });
                if let Some(record) = claims.borrow_mut().get_mut(scope) {
                    record.state = State::Applied { ticket_id: ticket_id.clone(), result: result.clone() };
                    record.arguments = None;
                }
                let mut replayed = outcome(OutcomeStatus::Replayed, key);
                replayed.effect_reference = Some(ticket_id);
                replayed.result = Some(result);
                return replayed;
            }
            ReceiptLookup::NotFound => not_found = true,
            ReceiptLookup::Failed(_) => {}
        }
    }
    if let (true, Some(arguments)) = (honoured, arguments) {
        return send_ticket(env, claims, owner, (tenant, key), &arguments, send_key).await;
    }
    if let Some(record) = claims.borrow_mut().get_mut(scope) {
        record.state = State::Unknown;
    }
    if not_found || !receipts {
        // No receipt (yet) and no key the downstream honours: a resend could make a second
        // ticket if the first request is still on its way, and nothing else can tell.
        hand_over(env, claims, scope, "no receipt was found and the ticket service ignores keys").await;
    }
    let mut unknown = outcome(OutcomeStatus::Unknown, key);
    unknown.next_action = NextAction::Reconcile;
    unknown
}

/// Files the operation with the operators, once: an `unknown` nobody is told about is never
/// settled.
async fn hand_over(env: &WorkerEnv, claims: &Claims, scope: &(String, String), why: &str) {
    let first = match claims.borrow_mut().get_mut(scope) {
        Some(record) if !record.handed_over => {
            record.handed_over = true;
            true
        }
        _ => false,
    };
    if first {
        let finding =
            format!("tickets.create may or may not have made its ticket: {why}; a person must look");
        let entry = ReconciliationEntry { tenant: scope.0.clone(), operation_key: scope.1.clone(), finding };
        env.reconciliations.file(entry).await;
    }
}

/// Asks the downstream for the ticket made with `key`, with the reference executor's
/// receipt mapping (`executor::downstream`): the same request, the same reading of its answer.
async fn look_up_ticket(env: &WorkerEnv, tenant: &str, key: &str) -> ReceiptLookup {
    read_receipt(send(env, receipt_request(key, tenant, "tickets"), DOWNSTREAM_TIMEOUT).await)
}

/// Takes a record over when it is unknown or its owner's lease ran out; says whether `owner`
/// now owns it.
fn take_over(env: &WorkerEnv, claims: &Claims, owner: &str, scope: &(String, String)) -> bool {
    let now_ms = env.clock.now_ms();
    let lease_ms = env.contracts.get(TOOL, protocol_version()).map_or(2_000, |c| c.lease.as_millis() as u64);
    let mut claims = claims.borrow_mut();
    let Some(record) = claims.get_mut(scope) else { return false };
    let abandoned = match &record.state {
        State::Unknown => true,
        State::Pending { lease_until_ms, .. } => *lease_until_ms <= now_ms,
        State::Applied { .. } => false,
    };
    if abandoned {
        record.state = State::Pending { owner: owner.to_owned(), lease_until_ms: now_ms + lease_ms };
    }
    abandoned
}

/// Sends the ticket with the operation key and records what came back. An ambiguous answer
/// leaves the record `unknown`, with its arguments, and starts the background resend.
async fn send_ticket(
    env: &WorkerEnv,
    claims: &Claims,
    owner: &str,
    (tenant, key): (&str, &str),
    arguments: &Arguments,
    send_key: bool,
) -> Outcome {
    let body = serde_json::json!({
        "tenant": tenant,
        "queue": arguments.get("queue"),
        "subject": arguments.get("subject"),
        "body": arguments.get("body"),
    });
    let mut request = HttpRequest::json(http::Method::POST, "/v1/tickets", &body);
    if send_key {
        request = request.header("Idempotency-Key", key);
    }
    let answer = tokio::time::timeout(DOWNSTREAM_TIMEOUT, env.downstream.send(request)).await;
    let ticket = match &answer {
        Ok(Ok(response)) if (200..300).contains(&response.status) => response
            .json::<serde_json::Value>()
            .ok()
            .and_then(|body| body["ticket_id"].as_str().map(|id| (id.to_owned(), body.clone()))),
        _ => None,
    };
    let scope = (tenant.to_owned(), key.to_owned());
    let mut all = claims.borrow_mut();
    let Some(record) = all.get_mut(&scope) else { return outcome(OutcomeStatus::Unknown, key) };
    match ticket {
        Some((ticket_id, body)) => {
            // The safe result: the fields the contract names (`result`), as the downstream
            // answered them; never the subject or body.
            let result = serde_json::json!({
                "ticket_id": ticket_id,
                "version": body["version"],
                "status": body["status"],
            });
            record.state = State::Applied { ticket_id: ticket_id.clone(), result: result.clone() };
            record.arguments = None;
            // The downstream says when its answer is the one an earlier request made.
            let replayed =
                matches!(&answer, Ok(Ok(response)) if response.header("idempotent-replayed") == Some("true"));
            let status = if replayed { OutcomeStatus::Replayed } else { OutcomeStatus::Applied };
            let mut applied = outcome(status, key);
            applied.effect_reference = Some(ticket_id);
            applied.result = Some(result);
            applied
        }
        None => {
            let refused = matches!(&answer, Ok(Ok(response)) if (400..500).contains(&response.status) && response.status != 409);
            if refused {
                all.remove(&scope);
                return rejected(
                    ReasonCode::DownstreamRejected,
                    "the ticket service refused the request",
                    Some(key),
                );
            }
            record.state = State::Unknown;
            drop(all);
            let (task_env, claims, owner) = (env.clone(), claims.clone(), owner.to_owned());
            env.background
                .spawn(Box::pin(async move { resend_later(task_env, claims, owner, scope, send_key).await }));
            let mut unknown = outcome(OutcomeStatus::Unknown, key);
            unknown.next_action = NextAction::Reconcile;
            unknown
        }
    }
}

/// The executor's own recovery of an ambiguous or abandoned create: once the record is
/// unknown or its owner's lease ran out, it takes the record over and [`recover`]s it,
/// waiting a little longer each time,
/// until the ticket is known or [`RESEND_ATTEMPTS`] are spent. The first resend that gets an
/// answer settles it; the others find the record settled and stop.
async fn resend_later(
    env: WorkerEnv,
    claims: Claims,
    owner: String,
    scope: (String, String),
    send_key: bool,
) {
    for attempt in 1..=RESEND_ATTEMPTS {
        let lease_until_ms = match claims.borrow().get(&scope).map(|record| &record.state) {
            Some(State::Pending { lease_until_ms, .. }) => *lease_until_ms,
            Some(State::Unknown) => 0,
            Some(State::Applied { .. }) | None => return,
        };
        let wait_ms = lease_until_ms.saturating_sub(env.clock.now_ms());
        env.background.sleep((RESEND_AFTER * attempt).max(Duration::from_millis(wait_ms))).await;
        // Settled meanwhile (its arguments are dropped once the ticket is known): nothing to do.
        let kept =
            claims.borrow().get(&scope).filter(|record| record.arguments.is_some()).map(|r| r.actor.clone());
        let Some(actor) = kept else { return };
        // An idempotency hit is no authorization bypass: a resend is asked for again.
        let request = AuthRequest { tenant: scope.0.clone(), actor, tool: TOOL.to_owned() };
        if !env.authorizer.authorize(request).await.allowed {
            return;
        }
        if !take_over(&env, &claims, &owner, &scope) {
            continue;
        }
        let outcome = Box::pin(recover(&env, &claims, &owner, &scope, send_key)).await;
        if outcome.status != OutcomeStatus::Unknown {
            return;
        }
    }
    let unsettled = claims.borrow().get(&scope).is_some_and(|record| record.state == State::Unknown);
    if unsettled {
        hand_over(&env, &claims, &scope, "every recovery attempt of the executor was left unknown").await;
    }
}

impl Executor for TinyExecutor {
    fn call(&self, call: ToolCall) -> LocalBoxFuture<'_, Outcome> {
        Box::pin(async move {
            if call.tool != TOOL {
                return rejected(ReasonCode::InvalidRequest, "this executor only knows tickets.create", None);
            }
            let Some(contract) = self.contract(&call.tool_version) else {
                return rejected(ReasonCode::InvalidRequest, "unknown tool version", None);
            };
            if let Err(error) = call.check_identifiers() {
                return rejected(ReasonCode::InvalidRequest, &error.to_string(), None);
            }
            let (arguments, fingerprint) =
                match (contract.validated_arguments(&call), contract.fingerprint(&call)) {
                    (Ok(arguments), Ok(fingerprint)) => (arguments, fingerprint.to_string()),
                    (Err(error), _) | (_, Err(error)) => {
                        return rejected(ReasonCode::InvalidRequest, &error.to_string(), None)
                    }
                };
            let key = ToolContract::operation_key(
                &call.tenant,
                &call.environment,
                &call.workflow_id,
                &call.step_id,
            );
            if !self.authorized(&call.tenant, &call.actor).await {
                return rejected(ReasonCode::Unauthorized, "the actor may not use this tool", Some(&key));
            }
            let scope = (call.tenant.clone(), key.clone());
            // The claim is a store call: the gate marks it, so that the harness can pause or
            // crash a worker right before or after it, and knows the call was acted on.
            self.env.store_gate.enter("claim").await;
            let now_ms = self.env.clock.now_ms();
            let existing = {
                let mut claims = self.claims.borrow_mut();
                match claims.get(&scope) {
                    Some(record) => Some(record.clone()),
                    None => {
                        let lease_until_ms = now_ms + contract.lease.as_millis() as u64;
                        let record = Record {
                            fingerprint: fingerprint.clone(),
                            tool_version: call.tool_version.clone(),
                            state: State::Pending { owner: self.owner.clone(), lease_until_ms },
                            arguments: Some(arguments.clone()),
                            actor: call.actor.clone(),
                            handed_over: false,
                        };
                        claims.insert(scope.clone(), record);
                        None
                    }
                }
            };
            self.env.store_gate.leave("claim").await;
            if let Some(record) = existing {
                if record.fingerprint != fingerprint {
                    let reason = if record.tool_version == call.tool_version {
                        ReasonCode::IdempotencyKeyReusedWithDifferentRequest
                    } else {
                        ReasonCode::ToolVersionChanged
                    };
                    return rejected(reason, "the key was used with a different request", Some(&key));
                }
                if !self.take_over(&scope) {
                    return self.answer(&record, &key);
                }
                return recover(&self.env, &self.claims, &self.owner, &scope, self.send_key).await;
            }
            self.effect(&call.tenant, &key, &arguments).await
        })
    }

    fn poll(&self, operation: OperationRef) -> LocalBoxFuture<'_, Outcome> {
        Box::pin(async move { self.settle(&operation).await })
    }

    fn reconcile(&self, operation: OperationRef) -> LocalBoxFuture<'_, Outcome> {
        Box::pin(async move { self.settle(&operation).await })
    }

    fn consume(&self, _envelope: Envelope) -> LocalBoxFuture<'_, Consumed> {
        Box::pin(async { Consumed::Ack })
    }

    fn webhook(&self, _event: WebhookEvent) -> LocalBoxFuture<'_, WebhookAck> {
        Box::pin(async { WebhookAck::Unmatched })
    }
}
