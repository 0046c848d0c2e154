//! The REPLAY state machine: [`ReferenceExecutor`] and its [`ReferenceFactory`].

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::{Rc, Weak};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use protocol::{
    AuthRequest, Consumed, Envelope, Execution, ExecutorFactory, LateArrivalPolicy, LocalBoxFuture,
    OperationRef, Outcome, OutcomeStatus, ReasonCode, ReconciliationEntry, ToolCall, ToolContract,
    WebhookAck, WebhookEvent, WorkerEnv,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::downstream::{
    classify, job_request, notice_request, read_job, read_receipt, receipt_request, receipt_result, Answer,
    DownstreamPlan, JobState, ReceiptLookup, Sent, ToolKind,
};
use crate::store::{
    ClaimStore, Claimed, GatedStore, NewClaim, OperationRecord, OwnedClaim, RecordStatus, StoreError,
    StoreLocation, TakeOver,
};
use crate::strategy::{
    AmbiguityVerdict, AuthPoint, CrossVersionReplay, FindingAbout, JobRetry, KeyInput, MakeStrategies,
    MismatchVerdict, RetentionVerdict, Strategies,
};
use crate::warm::{Idle, WarmDatabase, WorkerStore};

/// How long the executor waits for the downstream by default: longer than a healthy answer
/// takes in the simulation (tens of milliseconds). It may outlast a short lease (the
/// simulation's is 2 s): then another worker may take the claim over while the owner waits
/// (the compare-and-set decides who records), but this worker's own reconciliation never does
/// (see `Machine::at_work`).
pub const DEFAULT_DOWNSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// How long after a claim's lease ran out the background reconciliation waits before it takes
/// the claim over: an owner whose downstream timeout ends as its lease does (the simulation's
/// lease and timeout are both 2 s) records its own `unknown` in that time, rather than racing
/// another worker's take-over (which would answer its agent `in_flight`, or resend first).
const LEASE_GRACE: Duration = Duration::from_millis(250);

/// When to poll a delayed job again: the fake's jobs take about two seconds, so polling every
/// second converges quickly without hammering the service.
const JOB_POLL_AFTER_SECONDS: u32 = 1;

/// When to poll a queued operation again: a consumer usually picks an envelope up within a
/// second of it being written.
const QUEUE_POLL_AFTER_SECONDS: u32 = 1;

/// How long after an operation became `unknown` the executor's own reconciliation first looks
/// it up: a moment for a slow answer to land, and for the agent's own retry to come first.
const RECONCILE_AFTER: Duration = Duration::from_secs(1);

/// How many times the executor's own reconciliation tries one operation per worker start,
/// [`RECONCILE_AFTER`] apart, before leaving it to the agent's retry or to an operator: a few
/// seconds in all, so that the operation is settled, or plainly `unknown`, soon after the
/// world heals.
const RECONCILE_ATTEMPTS: u32 = 3;

/// The executor's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReferenceConfig {
    /// How long one downstream request may take before its outcome counts as unknown.
    pub downstream_timeout: Duration,
}

impl Default for ReferenceConfig {
    fn default() -> Self {
        Self { downstream_timeout: DEFAULT_DOWNSTREAM_TIMEOUT }
    }
}

impl ReferenceConfig {
    /// The settings with another downstream timeout.
    #[must_use]
    pub fn with_downstream_timeout(mut self, downstream_timeout: Duration) -> Self {
        self.downstream_timeout = downstream_timeout;
        self
    }
}

/// Starts [`ReferenceExecutor`]s over one claim store. Keep one factory per run: for a
/// [`StoreLocation::SharedMemory`] store it holds the connection that keeps the database
/// alive while workers crash and restart.
pub struct ReferenceFactory {
    location: StoreLocation,
    config: ReferenceConfig,
    /// Makes each worker's decisions at its start.
    strategies: MakeStrategies,
    /// The factory's own connection; `None` only while the factory is dropped.
    keeper: Mutex<Option<ClaimStore>>,
    /// For a recycled factory ([`ReferenceFactory::recycled`]): the connections workers gave
    /// back, lent to the next workers, and with the keeper returned to the thread's pool.
    idle: Option<Idle>,
}

impl std::fmt::Debug for ReferenceFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceFactory")
            .field("location", &self.location)
            .field("config", &self.config)
            .field("recycled", &self.idle.is_some())
            .finish_non_exhaustive()
    }
}

impl ReferenceFactory {
    /// A factory for the reference executor; opens (and creates) the store now.
    pub fn new(location: StoreLocation, config: ReferenceConfig) -> Result<Self, StoreError> {
        Self::with_strategies(location, config, |_: &WorkerEnv| Strategies::reference())
    }

    /// A factory whose executors decide with the [`Strategies`] `strategies` makes for each
    /// worker at its (re)start (a variant of the reference; the mutants).
    pub fn with_strategies(
        location: StoreLocation,
        config: ReferenceConfig,
        strategies: impl Fn(&WorkerEnv) -> Strategies + Send + Sync + 'static,
    ) -> Result<Self, StoreError> {
        let keeper = Mutex::new(Some(ClaimStore::open(&location)?));
        Ok(Self { location, config, strategies: Arc::new(strategies), keeper, idle: None })
    }

    /// A factory over an empty shared-memory store taken from this thread's pool of warm
    /// databases (schema created, connections open, statements prepared), which goes back to
    /// the pool, emptied, when the factory is dropped. Worker connections are lent from it and
    /// given back when a worker stops or crashes. For many short runs one after another on a
    /// thread, as in the simulation; see `warm.rs` for why an emptied database is as good as
    /// a new one. Drop the factory after its executors: a database one of them still holds
    /// is closed rather than reused.
    pub fn recycled(
        config: ReferenceConfig,
        strategies: impl Fn(&WorkerEnv) -> Strategies + Send + Sync + 'static,
    ) -> Result<Self, StoreError> {
        let warm = WarmDatabase::take()?;
        Ok(Self {
            location: warm.location,
            config,
            strategies: Arc::new(strategies),
            keeper: Mutex::new(Some(warm.keeper)),
            idle: Some(warm.idle),
        })
    }

    /// Where the store lives.
    pub fn location(&self) -> &StoreLocation {
        &self.location
    }

    /// A new connection to the store, to inspect records and reconciliation findings.
    pub fn open_store(&self) -> Result<ClaimStore, StoreError> {
        ClaimStore::open(&self.location)
    }

    /// Runs `inspect` on the factory's own connection (no new connection needed) and waits
    /// for it ([`crate::block_on`]: outside a runtime, or inside one on a SQLite store).
    pub fn with_store<T>(&self, inspect: impl AsyncFnOnce(&ClaimStore) -> T) -> T {
        let keeper = self.keeper.lock().unwrap_or_else(PoisonError::into_inner);
        let store = keeper.as_ref().expect("the keeper connection is present until the factory is dropped");
        crate::store::block_on(inspect(store))
    }
}

impl ExecutorFactory for ReferenceFactory {
    fn start(&self, env: WorkerEnv) -> Box<dyn protocol::Executor> {
        let store = match &self.idle {
            Some(idle) => WorkerStore::lent(idle, &self.location),
            None => ClaimStore::open(&self.location).map(WorkerStore::owned),
        };
        // The factory opened this store when it was made; failing to open it again is a
        // broken environment, not an outcome.
        let store = store
            .unwrap_or_else(|error| panic!("worker {} cannot reach the claim store: {error}", env.worker_id));
        let strategies = (self.strategies)(&env);
        let machine = Rc::new_cyclic(|this| Machine {
            env,
            store,
            config: self.config.clone(),
            strategies,
            this: this.clone(),
            reconciling: Cell::new(false),
            again: Cell::new(false),
            at_work: RefCell::default(),
            filed: RefCell::default(),
        });
        // A worker (re)start picks up what earlier incarnations left open.
        machine.reconcile_in_background();
        Box::new(ReferenceExecutor { machine })
    }
}

impl Drop for ReferenceFactory {
    fn drop(&mut self) {
        let keeper = self.keeper.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let (Some(idle), Some(keeper)) = (self.idle.take(), keeper) {
            WarmDatabase { location: self.location.clone(), keeper, idle }.give_back();
        }
    }
}

/// The reference executor of one worker: the REPLAY state machine (see the crate docs).
pub struct ReferenceExecutor {
    machine: Rc<Machine>,
}

/// The state machine of one worker, shared with its own background reconciliation.
struct Machine {
    env: WorkerEnv,
    store: WorkerStore,
    config: ReferenceConfig,
    strategies: Strategies,
    /// The machine itself, for the background work it starts.
    this: Weak<Machine>,
    /// Whether this worker's reconciliation is running.
    reconciling: Cell<bool>,
    /// Set when something may have become due while the reconciliation was reading the store
    /// (an operation marked `unknown`, a claim this worker stopped working on): it reads again
    /// instead of ending.
    again: Cell<bool>,
    /// The owner tokens of the claims this worker's own calls are still working on (between
    /// claiming and recording an outcome). Its reconciliation leaves them alone, whatever their
    /// lease says: the owner is alive, in this very process, and records the outcome itself.
    at_work: RefCell<BTreeSet<String>>,
    /// (tenant, operation key, finding) of every entry this worker filed for people: the same
    /// finding about the same operation is filed once, however often a look repeats it.
    filed: RefCell<BTreeSet<(String, String, String)>>,
}

/// A claim this worker is working on, for as long as the guard lives: see
/// [`Machine::at_work`].
struct AtWork<'a> {
    machine: &'a Machine,
    owner_token: String,
}

impl Drop for AtWork<'_> {
    fn drop(&mut self) {
        self.machine.at_work.borrow_mut().remove(&self.owner_token);
        // A reconciliation that skipped this claim looks at it again.
        if self.machine.reconciling.get() {
            self.machine.again.set(true);
        }
    }
}

impl std::fmt::Debug for ReferenceExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceExecutor").field("env", &self.machine.env).finish_non_exhaustive()
    }
}

impl protocol::Executor for ReferenceExecutor {
    fn call(&self, call: ToolCall) -> LocalBoxFuture<'_, Outcome> {
        Box::pin(self.machine.handle_call(call))
    }

    fn poll(&self, operation: OperationRef) -> LocalBoxFuture<'_, Outcome> {
        Box::pin(self.machine.handle_lookup(operation, Lookup::Poll))
    }

    fn reconcile(&self, operation: OperationRef) -> LocalBoxFuture<'_, Outcome> {
        Box::pin(self.machine.handle_lookup(operation, Lookup::Reconcile))
    }

    fn consume(&self, envelope: Envelope) -> LocalBoxFuture<'_, Consumed> {
        Box::pin(self.machine.handle_envelope(envelope))
    }

    fn webhook(&self, event: WebhookEvent) -> LocalBoxFuture<'_, WebhookAck> {
        Box::pin(self.machine.handle_webhook(event))
    }
}

/// A validated call, ready to be carried out: what an owner needs to perform or resend the
/// effect.
struct Request {
    call: ToolCall,
    /// The tenant the operation is keyed and stored under (the call's tenant, through
    /// [`Strategies::tenant_scope`]).
    tenant: String,
    key: String,
    fingerprint: String,
    plan: DownstreamPlan,
}

/// What a queued envelope carries (in [`Envelope::payload`]): the call itself, so that the
/// consumer re-derives key and fingerprint exactly as the caller did instead of trusting them.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueuedPayload {
    call: ToolCall,
}

/// A job-completion webhook body.
#[derive(Debug, Deserialize)]
struct JobEvent {
    event_id: String,
    #[serde(rename = "type")]
    kind: String,
    tenant: String,
    job_id: String,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    result: Value,
}

/// When a settled job's completion notice is sent: before the settling request is answered
/// (a poll: its caller waits for it), or beside it, as background work (a webhook delivery,
/// which the provider may give up on while the notice is on its way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Announce {
    Before,
    Beside,
}

/// Poll answers without acting on the downstream; reconcile may take over and settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    Poll,
    Reconcile,
}

// ------------------------------------------------------------------ outcomes

fn with_key(mut outcome: Outcome, operation_key: &str) -> Outcome {
    outcome.operation_key = Some(operation_key.to_owned());
    outcome
}

fn invalid(operation_key: Option<&str>, message: impl Into<String>) -> Outcome {
    let mut outcome = Outcome::rejected(ReasonCode::InvalidRequest, message);
    outcome.operation_key = operation_key.map(str::to_owned);
    outcome
}

fn rejected(operation_key: &str, reason: ReasonCode, message: impl Into<String>) -> Outcome {
    with_key(Outcome::rejected(reason, message), operation_key)
}

fn unauthorized(operation_key: &str) -> Outcome {
    rejected(operation_key, ReasonCode::Unauthorized, "the actor may not use this tool now")
}

fn in_flight(operation_key: &str, retry_after_seconds: u32, message: &str) -> Outcome {
    let mut outcome = with_key(Outcome::new(OutcomeStatus::InFlight), operation_key);
    outcome.retry_after_seconds = Some(retry_after_seconds.max(1));
    outcome.message = Some(message.to_owned());
    outcome
}

fn unknown(operation_key: &str, message: impl Into<String>) -> Outcome {
    let mut outcome = with_key(Outcome::new(OutcomeStatus::Unknown), operation_key);
    outcome.message = Some(message.into());
    outcome
}

fn store_failure(operation_key: Option<&str>, error: &StoreError) -> Outcome {
    let mut outcome = Outcome::new(OutcomeStatus::Unknown);
    outcome.operation_key = operation_key.map(str::to_owned);
    outcome.message = Some(format!("the claim store failed, so the outcome is not known: {error}"));
    outcome
}

fn stored_result(record: &OperationRecord) -> Option<Value> {
    record.response_json.as_deref().and_then(|text| serde_json::from_str(text).ok())
}

fn succeeded(status: OutcomeStatus, record_key: &str, reference: &str, result: Option<Value>) -> Outcome {
    let mut outcome = with_key(Outcome::new(status), record_key);
    outcome.effect_reference = Some(reference.to_owned());
    outcome.result = result;
    outcome
}

fn replayed(record: &OperationRecord) -> Outcome {
    let mut outcome = with_key(Outcome::new(OutcomeStatus::Replayed), &record.operation_key);
    outcome.effect_reference = record.effect_reference.clone();
    outcome.result = stored_result(record);
    outcome
}

fn expired(record: &OperationRecord) -> Outcome {
    let mut outcome = with_key(Outcome::new(OutcomeStatus::Expired), &record.operation_key);
    outcome.effect_reference = record.effect_reference.clone();
    outcome.message =
        Some("the operation is past its retention; a new action needs a new, reviewed operation".into());
    outcome
}

fn stored_reason(record: &OperationRecord) -> ReasonCode {
    record
        .reason
        .as_deref()
        .and_then(|reason| serde_json::from_value(Value::String(reason.to_owned())).ok())
        .unwrap_or(ReasonCode::DownstreamRejected)
}

fn reason_text(reason: ReasonCode) -> String {
    reason.as_str().to_owned()
}

fn seconds_until(now_ms: u64, until_ms: u64) -> u32 {
    let remaining_ms = until_ms.saturating_sub(now_ms);
    u32::try_from(remaining_ms.div_ceil(1_000)).unwrap_or(u32::MAX).max(1)
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Checks an [`OperationRef`]'s identifiers by the protocol's rules (those of a call).
fn check_operation(operation: &OperationRef) -> Result<(), String> {
    operation.check_identifiers().map_err(|error| error.to_string())
}

impl Machine {
    // -------------------------------------------------------------- environment

    fn now_ms(&self) -> u64 {
        self.env.clock.now_ms()
    }

    fn gated(&self) -> GatedStore<'_> {
        GatedStore::new(&self.store, self.env.store_gate.as_ref())
    }

    async fn authorized(&self, tenant: &str, actor: &str, tool: &str) -> bool {
        let request =
            AuthRequest { tenant: tenant.to_owned(), actor: actor.to_owned(), tool: tool.to_owned() };
        self.env.authorizer.authorize(request).await.allowed
    }

    /// Asks the authorizer at `point` if the strategy says so; true when allowed or not asked.
    async fn allowed_at(&self, point: AuthPoint, tenant: &str, actor: &str, tool: &str) -> bool {
        !(self.strategies.authorize_at)(point) || self.authorized(tenant, actor, tool).await
    }

    fn owner_token(&self) -> String {
        format!("{}-{}-{:016x}", self.env.worker_id, self.env.incarnation, self.env.entropy.next_u64())
    }

    /// Marks the claim `owner_token` as worked on by one of this worker's calls until the
    /// guard is dropped.
    fn at_work(&self, owner_token: &str) -> AtWork<'_> {
        self.at_work.borrow_mut().insert(owner_token.to_owned());
        AtWork { machine: self, owner_token: owner_token.to_owned() }
    }

    /// Whether one of this worker's calls is still working on the claim `record` holds.
    fn worked_on_here(&self, record: &OperationRecord) -> bool {
        record.owner_token.as_ref().is_some_and(|token| self.at_work.borrow().contains(token))
    }

    async fn send(&self, request: wire::HttpRequest) -> Sent {
        crate::downstream::send(&self.env, request, self.config.downstream_timeout).await
    }

    async fn load(&self, tenant: &str, operation_key: &str) -> Result<Option<OperationRecord>, StoreError> {
        self.gated().call("load", async |store| store.load(tenant, operation_key).await).await
    }

    /// The current record, described (after a lost compare-and-set, and for poll).
    async fn reload_and_describe(&self, tenant: &str, operation_key: &str) -> Outcome {
        match self.load(tenant, operation_key).await {
            Ok(Some(record)) => self.describe(&record),
            Ok(None) => invalid(Some(operation_key), "no operation with this key"),
            Err(error) => store_failure(Some(operation_key), &error),
        }
    }

    /// A record's state as an outcome, without acting.
    fn describe(&self, record: &OperationRecord) -> Outcome {
        let key = &record.operation_key;
        match record.status {
            RecordStatus::Applied => replayed(record),
            RecordStatus::Tombstone => expired(record),
            RecordStatus::FailedPermanent => {
                rejected(key, stored_reason(record), "the operation failed for good; nothing was done")
            }
            RecordStatus::Unknown => {
                unknown(key, "the effect may have happened; reconcile before doing anything else")
            }
            RecordStatus::Pending if record.job_id.is_some() => {
                in_flight(key, JOB_POLL_AFTER_SECONDS, "the downstream job is still running; poll")
            }
            RecordStatus::Pending if record.owner_token.is_none() => {
                in_flight(key, QUEUE_POLL_AFTER_SECONDS, "queued; a consumer will carry it out; poll")
            }
            RecordStatus::Pending if (self.strategies.owner_at_work)(record, self.now_ms()) => in_flight(
                key,
                seconds_until(self.now_ms(), record.lease_until_ms),
                "another worker owns the operation; poll",
            ),
            RecordStatus::Pending => {
                unknown(key, "the owner's lease ran out before it recorded an outcome; reconcile")
            }
        }
    }

    /// Applies retention to a loaded record: tombstones are written here. `None` when the
    /// record was forgotten (mutants only).
    async fn retire(&self, record: OperationRecord) -> Result<Option<OperationRecord>, StoreError> {
        match (self.strategies.retention)(&record, self.now_ms()) {
            RetentionVerdict::Keep => Ok(Some(record)),
            RetentionVerdict::Tombstone => {
                let (tenant, key, now) = (&record.tenant, &record.operation_key, self.now_ms());
                self.gated().call("tombstone", async |store| store.tombstone(tenant, key, now).await).await?;
                self.load(tenant, key).await
            }
            RetentionVerdict::Forget => {
                let (tenant, key) = (&record.tenant, &record.operation_key);
                self.gated().call("forget", async |store| store.forget(tenant, key).await).await?;
                Ok(None)
            }
        }
    }

    /// Keeps a finding about an operation in the store's reconciliation table (the
    /// executor's own reconciliation trace).
    async fn note(&self, tenant: &str, operation_key: &str, finding: &str) {
        let now = self.now_ms();
        // A finding that cannot be written is not worth failing an answer for: the record's
        // status already says what matters.
        let _ = self
            .gated()
            .call("record_reconciliation", async |store| {
                store.record_reconciliation(tenant, operation_key, now, finding).await
            })
            .await;
    }

    /// Hands an operation the executor cannot settle on its own to people: files `finding`
    /// (already kept in the store's table) to the operators' queue.
    async fn hand_over(&self, tenant: &str, operation_key: &str, about: FindingAbout, finding: &str) {
        let filed = (tenant.to_owned(), operation_key.to_owned(), finding.to_owned());
        if !self.filed.borrow_mut().insert(filed) {
            tracing::debug!(key = operation_key, finding, "already handed over to people");
            return;
        }
        tracing::info!(key = operation_key, about = about.as_str(), finding, "handing over to people");
        if (self.strategies.file_findings)(about) {
            let entry = ReconciliationEntry {
                tenant: tenant.to_owned(),
                operation_key: operation_key.to_owned(),
                finding: finding.to_owned(),
            };
            self.env.reconciliations.file(entry).await;
        }
    }

    // -------------------------------------------------------------- call

    /// Validates a call and derives its key and fingerprint: (a) contract, (b) identifiers,
    /// arguments and fingerprint, (c) the operation key. Nothing is stored yet.
    fn prepare(&self, call: ToolCall) -> Result<(&ToolContract, Request), Outcome> {
        if let Err(error) = call.check_identifiers() {
            return Err(invalid(None, error.to_string()));
        }
        let Some(contract) = self.env.contracts.get(&call.tool, &call.tool_version) else {
            return Err(invalid(
                None,
                format!("unknown tool {} at version {}", call.tool, call.tool_version),
            ));
        };
        let fingerprint = (self.strategies.fingerprint)(contract, &call)
            .map_err(|error| invalid(None, error.to_string()))?
            .to_string();
        let arguments =
            contract.validated_arguments(&call).map_err(|error| invalid(None, error.to_string()))?;
        let tenant = (self.strategies.tenant_scope)(&call.tenant).to_owned();
        let key = (self.strategies.operation_key)(&KeyInput {
            tenant: &tenant,
            environment: &call.environment,
            workflow_id: &call.workflow_id,
            step_id: &call.step_id,
            call_id: Some(&call.call_id),
            arguments: Some(&arguments),
        });
        if contract.approval_required && !arguments.contains_key("approval_id") {
            return Err(rejected(&key, ReasonCode::ApprovalRequired, "this tool needs an `approval_id`"));
        }
        let mut plan = DownstreamPlan::build(contract, &call.tenant, &arguments)
            .map_err(|message| invalid(Some(&key), message))?;
        if !(self.strategies.version_precondition)(contract) {
            plan = plan.without_precondition();
        }
        Ok((contract, Request { call, tenant, key, fingerprint, plan }))
    }

    async fn handle_call(&self, call: ToolCall) -> Outcome {
        let (contract, request) = match self.prepare(call) {
            Ok(prepared) => prepared,
            Err(outcome) => return outcome,
        };
        let call = &request.call;
        if !self.allowed_at(AuthPoint::BeforeClaim, &call.tenant, &call.actor, &call.tool).await {
            return unauthorized(&request.key);
        }
        self.claim_and_answer(contract, &request).await
    }

    fn new_claim(&self, contract: &ToolContract, request: &Request) -> NewClaim {
        let (now, call, key) = (self.now_ms(), &request.call, &request.key);
        NewClaim {
            tenant: request.tenant.clone(),
            operation_key: key.clone(),
            tool_name: call.tool.clone(),
            tool_version: call.tool_version.clone(),
            request_fingerprint: request.fingerprint.clone(),
            downstream_key: (self.strategies.downstream_key)(contract, key),
            owner_token: self.owner_token(),
            now_ms: now,
            lease_until_ms: now.saturating_add(duration_ms(contract.lease)),
            expires_at_ms: now.saturating_add(duration_ms(contract.retention)),
            // Kept while the outcome is open, so that recovery without the agent can resend it.
            request_json: serde_json::to_string(call).ok(),
        }
    }

    async fn claim_and_answer(&self, contract: &ToolContract, request: &Request) -> Outcome {
        let (call, key) = (&request.call, request.key.as_str());
        let claim = self.new_claim(contract, request);
        let claimed = match (self.strategies.claim)(self.gated(), &claim).await {
            Ok(claimed) => claimed,
            Err(error) => return store_failure(Some(key), &error),
        };
        let new_claim = matches!(claimed, Claimed::New(_));
        match &claimed {
            Claimed::New(_) => tracing::debug!(key, "claim won: a new record, ours"),
            Claimed::Existing(record) => {
                tracing::debug!(key, status = record.status.as_str(), "claim found an existing record")
            }
        }
        if !self.allowed_at(AuthPoint::AfterClaim { new_claim }, &call.tenant, &call.actor, &call.tool).await
        {
            if let Claimed::New(record) = &claimed {
                let owned = owned_claim(record);
                return self
                    .fail(&owned, ReasonCode::Unauthorized, "the actor may not use this tool now")
                    .await;
            }
            return unauthorized(key);
        }
        match claimed {
            Claimed::New(record) => {
                let owned = owned_claim(&record);
                let _at_work = self.at_work(&owned.owner_token);
                self.perform(&owned, &record, contract, request).await
            }
            Claimed::Existing(record) => match self.retire(record).await {
                Ok(Some(record)) => self.answer_existing(record, contract, request).await,
                // Only a mutant forgets records: the late duplicate is then claimed afresh.
                Ok(None) => self.claim_afresh(contract, request).await,
                Err(error) => store_failure(Some(key), &error),
            },
        }
    }

    /// Claims the operation again after its record was deleted (mutants only: the reference
    /// never deletes a record).
    async fn claim_afresh(&self, contract: &ToolContract, request: &Request) -> Outcome {
        let claim = self.new_claim(contract, request);
        match (self.strategies.claim)(self.gated(), &claim).await {
            Ok(Claimed::New(record)) => self.perform(&owned_claim(&record), &record, contract, request).await,
            Ok(Claimed::Existing(record)) => self.describe(&record),
            Err(error) => store_failure(Some(&request.key), &error),
        }
    }

    /// The existing-record branch of a call.
    async fn answer_existing(
        &self,
        record: OperationRecord,
        contract: &ToolContract,
        request: &Request,
    ) -> Outcome {
        let key = record.operation_key.clone();
        if record.status == RecordStatus::Tombstone {
            return self.late_arrival(&record).await;
        }
        if record.request_fingerprint != request.fingerprint {
            tracing::debug!(key, "the request's fingerprint differs from the record's");
            return match (self.strategies.mismatch)(contract) {
                MismatchVerdict::Reject => self.mismatch(&record, &request.call),
                MismatchVerdict::ApplyNewest => self.replace_with_newest(&record, contract, request).await,
            };
        }
        match record.status {
            RecordStatus::Applied => {
                self.finish_notice(&record, contract).await;
                replayed(&record)
            }
            RecordStatus::FailedPermanent | RecordStatus::Tombstone => self.describe(&record),
            RecordStatus::Pending if record.job_id.is_some() => match (self.strategies.job_retry)(contract) {
                JobRetry::Poll => self.describe(&record),
                JobRetry::Resubmit => self.resubmit_job(&record, contract, request).await,
            },
            RecordStatus::Pending if (self.strategies.queued)(&record) => self.describe(&record),
            RecordStatus::Pending if record.lease_is_live(self.now_ms()) => self.describe(&record),
            // Handed over to people when it was marked: nothing a retry does can settle it.
            RecordStatus::Unknown
                if !self.can_find_out(contract) && !(self.strategies.rerun_unknown)(contract) =>
            {
                self.describe(&record)
            }
            RecordStatus::Unknown if !self.can_find_out(contract) => {
                // Mutants only: the retry runs the request again.
                let Some(owned) = self.take_over(&record, contract).await else {
                    return self.reload_and_describe(&record.tenant, &key).await;
                };
                let _at_work = self.at_work(&owned.owner_token);
                self.note(
                    &owned.tenant,
                    &owned.operation_key,
                    "unknown, and nothing can tell: running it again",
                )
                .await;
                self.execute(&owned, &record, contract, request).await
            }
            RecordStatus::Pending | RecordStatus::Unknown => {
                tracing::debug!(
                    key,
                    owner = record.owner_token.as_deref().unwrap_or("-"),
                    lease_until_ms = record.lease_until_ms,
                    "{}",
                    if record.status == RecordStatus::Pending {
                        "the owner's lease ran out: the claim is abandoned"
                    } else {
                        "the record is unknown: recovering it"
                    }
                );
                let call = &request.call;
                if !self.allowed_at(AuthPoint::BeforeRecovery, &call.tenant, &call.actor, &call.tool).await {
                    return unauthorized(&key);
                }
                let Some(owned) = self.take_over(&record, contract).await else {
                    tracing::debug!(key, "another worker changed the record first");
                    return self.reload_and_describe(&record.tenant, &key).await;
                };
                let _at_work = self.at_work(&owned.owner_token);
                self.recover(&owned, &record, contract, Some(request)).await
            }
        }
    }

    /// Same key, different request: never replaced, never executed. A newer version of the
    /// tool replays an applied record when the record's contract allows replay across versions
    /// and the call, read by that contract, is the request the record was made for.
    fn mismatch(&self, record: &OperationRecord, call: &ToolCall) -> Outcome {
        let key = &record.operation_key;
        let other_version = record.tool_name == call.tool && record.tool_version != call.tool_version;
        let replayable = self
            .env
            .contracts
            .get(&record.tool_name, &record.tool_version)
            .filter(|stored| other_version && stored.replay_across_versions);
        let same_request = replayable.map(|stored| match (self.strategies.cross_version)(stored) {
            CrossVersionReplay::SameRequestOnly => self.same_request_under(stored, call, record),
            CrossVersionReplay::AnyRequest => true,
        });
        match same_request {
            Some(true) if record.status == RecordStatus::Applied => replayed(record),
            // `Some(false)`: the version may replay the record, but this is another request.
            None | Some(true) if other_version => rejected(
                key,
                ReasonCode::ToolVersionChanged,
                format!(
                    "this operation was made by {} version {}; version {} may not re-run it",
                    record.tool_name, record.tool_version, call.tool_version
                ),
            ),
            _ => rejected(
                key,
                ReasonCode::IdempotencyKeyReusedWithDifferentRequest,
                "this operation key was used with a different request; the original stands",
            ),
        }
    }

    /// Whether `call`, read by the older contract `stored` (its arguments validated and
    /// fingerprinted as if it had been made under that version), is the request `record` was
    /// made for. A call the old contract cannot read (an argument only the new version knows)
    /// is not.
    fn same_request_under(&self, stored: &ToolContract, call: &ToolCall, record: &OperationRecord) -> bool {
        let mut as_made = call.clone();
        as_made.tool_version = stored.version.clone();
        (self.strategies.fingerprint)(stored, &as_made)
            .is_ok_and(|fingerprint| fingerprint.to_string() == record.request_fingerprint)
    }

    /// [`MismatchVerdict::ApplyNewest`] (mutants only): the stored operation is deleted and the
    /// newer request claimed and carried out in its place.
    async fn replace_with_newest(
        &self,
        record: &OperationRecord,
        contract: &ToolContract,
        request: &Request,
    ) -> Outcome {
        let (tenant, key) = (&record.tenant, &record.operation_key);
        if let Err(error) = self.gated().call("forget", async |store| store.forget(tenant, key).await).await {
            return store_failure(Some(key), &error);
        }
        self.claim_afresh(contract, request).await
    }

    /// [`JobRetry::Resubmit`] (mutants only): the job is still running, so it is submitted
    /// again; the record keeps the first job.
    async fn resubmit_job(
        &self,
        record: &OperationRecord,
        contract: &ToolContract,
        request: &Request,
    ) -> Outcome {
        let call = &request.call;
        if !self.allowed_at(AuthPoint::BeforeEffect, &call.tenant, &call.actor, &contract.name).await {
            return unauthorized(&record.operation_key);
        }
        let sent = self.send(request.plan.request(record.downstream_key.as_deref())).await;
        match classify(request.plan.kind, sent) {
            Answer::Receipt { reference, .. } => in_flight(
                &record.operation_key,
                JOB_POLL_AFTER_SECONDS,
                &format!("the job was submitted again as {reference}; poll"),
            ),
            _ => self.describe(record),
        }
    }

    /// A key arriving after retention: the late-arrival policy of the contract that made it.
    async fn late_arrival(&self, record: &OperationRecord) -> Outcome {
        let contract = self.env.contracts.get(&record.tool_name, &record.tool_version);
        if let Some(contract) = contract.filter(|c| c.late_arrival == LateArrivalPolicy::ReconcileFirst) {
            let finding = match self.look_up_receipt(record, contract).await {
                ReceiptLookup::Found(reference, _) => {
                    format!("late arrival after retention: the downstream has receipt {reference}")
                }
                ReceiptLookup::NotFound => {
                    "late arrival after retention: the downstream has no receipt".into()
                }
                ReceiptLookup::Failed(why) => {
                    format!("late arrival after retention: receipt lookup failed: {why}")
                }
            };
            self.note(&record.tenant, &record.operation_key, &finding).await;
        }
        expired(record)
    }

    // -------------------------------------------------------------- effect path (we own the claim)

    /// We own a fresh claim: recheck authorization, then carry the effect out.
    async fn perform(
        &self,
        owned: &OwnedClaim,
        record: &OperationRecord,
        contract: &ToolContract,
        request: &Request,
    ) -> Outcome {
        match contract.execution {
            Execution::Queued => {
                if !self
                    .allowed_at(
                        AuthPoint::BeforeEffect,
                        &request.call.tenant,
                        &request.call.actor,
                        &contract.name,
                    )
                    .await
                {
                    return self
                        .fail(owned, ReasonCode::Unauthorized, "the actor may not use this tool now")
                        .await;
                }
                self.enqueue(owned, contract, request).await
            }
            Execution::Direct | Execution::DelayedJob => self.execute(owned, record, contract, request).await,
        }
    }

    /// Rechecks authorization, sends the request with the downstream key, records the answer.
    async fn execute(
        &self,
        owned: &OwnedClaim,
        record: &OperationRecord,
        contract: &ToolContract,
        request: &Request,
    ) -> Outcome {
        let call = &request.call;
        if !self.allowed_at(AuthPoint::BeforeEffect, &call.tenant, &call.actor, &contract.name).await {
            return self.fail(owned, ReasonCode::Unauthorized, "the actor may not use this tool now").await;
        }
        let mut requests_sent = 0;
        loop {
            tracing::debug!(
                key = %owned.operation_key,
                attempt = requests_sent + 1,
                with_key = record.downstream_key.is_some(),
                "sending the effect downstream"
            );
            let sent = self.send(request.plan.request(record.downstream_key.as_deref())).await;
            requests_sent += 1;
            let answer = classify(request.plan.kind, sent);
            if let Answer::Ambiguous(why) = &answer {
                tracing::debug!(key = %owned.operation_key, why = %why, "the answer is ambiguous");
                match (self.strategies.ambiguity)(contract, requests_sent) {
                    AmbiguityVerdict::Unknown => {}
                    AmbiguityVerdict::Resend => continue,
                    AmbiguityVerdict::Applied => return self.record_assumed_success(owned, why).await,
                }
            }
            return self.record_answer(owned, contract, answer).await;
        }
    }

    /// [`AmbiguityVerdict::Applied`] (mutants only): the ambiguous answer is taken as success.
    /// There is no receipt, so there is no effect reference to store or to answer with.
    async fn record_assumed_success(&self, owned: &OwnedClaim, why: &str) -> Outcome {
        let (now, key) = (self.now_ms(), &owned.operation_key);
        match self.gated().call("complete", async |store| store.complete(owned, None, "{}", now).await).await
        {
            Ok(true) => {
                let mut outcome = with_key(Outcome::new(OutcomeStatus::Applied), key);
                outcome.message = Some(format!("taken as done ({why})"));
                outcome
            }
            Ok(false) => self.reload_and_describe(&owned.tenant, key).await,
            Err(error) => store_failure(Some(key), &error),
        }
    }

    /// Stores what the downstream answered, by compare-and-set on our claim.
    async fn record_answer(&self, owned: &OwnedClaim, contract: &ToolContract, answer: Answer) -> Outcome {
        match answer {
            Answer::Receipt { reference, result, replayed } => {
                self.record_receipt(owned, contract, &reference, result, replayed).await
            }
            Answer::PreconditionFailed => {
                self.fail(
                    owned,
                    ReasonCode::PreconditionFailed,
                    "the target changed since the caller read it",
                )
                .await
            }
            Answer::Refused { status } => {
                let message = format!("the downstream refused the request ({status})");
                self.fail(owned, ReasonCode::DownstreamRejected, &message).await
            }
            Answer::KeyInProgress => {
                // Our claim stays pending while the downstream finishes the first request: once
                // the lease runs out, this worker's reconciliation asks again.
                self.reconcile_in_background();
                in_flight(
                    &owned.operation_key,
                    seconds_until(self.now_ms(), owned.lease_until_ms),
                    "the downstream is still processing this operation; poll",
                )
            }
            Answer::Ambiguous(why) => {
                // Nothing will settle it on its own where the downstream offers no way to find out.
                let hand_over = !self.can_find_out(contract);
                self.mark_unknown(owned, &why, hand_over).await
            }
        }
    }

    /// Records a receipt the downstream gave `owned`'s request. When the claim was taken over
    /// meanwhile and the record was left `unknown` (nobody owns it, nobody will find out
    /// otherwise), the receipt is new evidence: the claim is taken over again, by the same
    /// compare-and-set as a reconciliation, and the receipt recorded.
    async fn record_receipt(
        &self,
        owned: &OwnedClaim,
        contract: &ToolContract,
        reference: &str,
        result: Value,
        replayed: bool,
    ) -> Outcome {
        let mut owned = owned.clone();
        let mut adopted = false;
        loop {
            match self.write_receipt(&owned, contract, reference, &result).await {
                Ok(true) if contract.execution == Execution::DelayedJob => {
                    let message = "the downstream accepted the job; poll";
                    return in_flight(&owned.operation_key, JOB_POLL_AFTER_SECONDS, message);
                }
                Ok(true) => {
                    let status = if replayed { OutcomeStatus::Replayed } else { OutcomeStatus::Applied };
                    tracing::debug!(
                        key = %owned.operation_key,
                        reference,
                        status = status.as_str(),
                        "completed by compare-and-set on our claim"
                    );
                    return succeeded(status, &owned.operation_key, reference, Some(result));
                }
                Ok(false) => {
                    tracing::debug!(
                        key = %owned.operation_key,
                        reference,
                        "compare-and-set lost: the claim is no longer ours"
                    );
                    match self.load(&owned.tenant, &owned.operation_key).await {
                        Ok(Some(record))
                            if record.status == RecordStatus::Unknown
                                && !adopted
                                && (self.strategies.late_receipt)() =>
                        {
                            let Some(again) = self.take_over(&record, contract).await else {
                                return self.reload_and_describe(&owned.tenant, &owned.operation_key).await;
                            };
                            let note = format!(
                                "a late answer carried receipt {reference}; settling the unknown record"
                            );
                            self.note(&again.tenant, &again.operation_key, &note).await;
                            owned = again;
                            adopted = true;
                        }
                        Ok(Some(record)) => return self.describe(&record),
                        Ok(None) => return invalid(Some(&owned.operation_key), "no operation with this key"),
                        Err(error) => return store_failure(Some(&owned.operation_key), &error),
                    }
                }
                Err(error) => return store_failure(Some(&owned.operation_key), &error),
            }
        }
    }

    /// Owner `owned` stores a receipt: a job's id, or the effect and its result. False when
    /// the claim is no longer `owned`'s.
    async fn write_receipt(
        &self,
        owned: &OwnedClaim,
        contract: &ToolContract,
        reference: &str,
        result: &Value,
    ) -> Result<bool, StoreError> {
        let now = self.now_ms();
        if contract.execution == Execution::DelayedJob {
            return self
                .gated()
                .call("set_job", async |store| store.set_job(owned, reference, now).await)
                .await;
        }
        let stored = (self.strategies.completion)(reference, result);
        let (stored_reference, response_json) =
            (stored.effect_reference.as_deref(), stored.response.to_string());
        self.gated()
            .call("complete", async |store| {
                store.complete(owned, stored_reference, &response_json, now).await
            })
            .await
    }

    async fn fail(&self, owned: &OwnedClaim, reason: ReasonCode, message: &str) -> Outcome {
        let stored = (self.strategies.refusal)(reason).map(reason_text).unwrap_or_default();
        let (now, key, reason_code) = (self.now_ms(), &owned.operation_key, stored);
        match self
            .gated()
            .call("fail", async |store| store.fail_permanent(owned, &reason_code, now).await)
            .await
        {
            Ok(true) => rejected(key, reason, message),
            Ok(false) => self.reload_and_describe(&owned.tenant, key).await,
            Err(error) => store_failure(Some(key), &error),
        }
    }

    /// Records that the effect may or may not have happened. `hand_over`: the executor has
    /// no way left to find out, so the operation is filed for people to settle.
    async fn mark_unknown(&self, owned: &OwnedClaim, finding: &str, hand_over: bool) -> Outcome {
        let (now, key) = (self.now_ms(), &owned.operation_key);
        match self
            .gated()
            .call("mark_unknown", async |store| store.mark_unknown(owned, finding, now).await)
            .await
        {
            Ok(true) => {
                tracing::debug!(key, finding, hand_over, "marked unknown");
                if hand_over {
                    self.hand_over(&owned.tenant, key, FindingAbout::Operation, finding).await;
                }
                self.reconcile_in_background();
                unknown(key, format!("the effect may have happened ({finding}); reconcile"))
            }
            Ok(false) => self.reload_and_describe(&owned.tenant, key).await,
            Err(error) => store_failure(Some(key), &error),
        }
    }

    /// Queued tools: write the envelope, then hand the record to the queue.
    async fn enqueue(&self, owned: &OwnedClaim, contract: &ToolContract, request: &Request) -> Outcome {
        let payload = QueuedPayload { call: request.call.clone() };
        let envelope = Envelope {
            envelope_id: format!("envelope-{:016x}", self.env.entropy.next_u64()),
            tenant: owned.tenant.clone(),
            operation_key: owned.operation_key.clone(),
            tool: contract.name.clone(),
            payload: serde_json::to_value(&payload).unwrap_or_else(|error| {
                unreachable!("a queued payload is plain JSON and serialises: {error}")
            }),
        };
        if let Err(error) = self.env.outbox.enqueue(envelope).await {
            let hand_over = !self.can_find_out(contract);
            return self.mark_unknown(owned, &error.to_string(), hand_over).await;
        }
        let (now, key) = (self.now_ms(), &owned.operation_key);
        match self.gated().call("release", async |store| store.release(owned, now).await).await {
            Ok(true) => {
                in_flight(key, QUEUE_POLL_AFTER_SECONDS, "queued; a consumer will carry it out; poll")
            }
            Ok(false) => self.reload_and_describe(&owned.tenant, key).await,
            Err(error) => store_failure(Some(key), &error),
        }
    }

    // -------------------------------------------------------------- recovery

    /// Takes over an abandoned (`pending`, lease run out), `unknown` or queued-and-unowned
    /// record exactly as observed; `None` when someone else changed it first.
    async fn take_over(&self, record: &OperationRecord, contract: &ToolContract) -> Option<OwnedClaim> {
        let now = self.now_ms();
        let take_over = TakeOver {
            tenant: record.tenant.clone(),
            operation_key: record.operation_key.clone(),
            observed_owner: record.owner_token.clone(),
            observed_lease_until_ms: record.lease_until_ms,
            new_owner: self.owner_token(),
            lease_until_ms: now.saturating_add(duration_ms(contract.lease)),
            now_ms: now,
        };
        match self.gated().call("take_over", async |store| store.take_over(&take_over).await).await {
            Ok(true) => {
                tracing::debug!(
                    key = %take_over.operation_key,
                    from = take_over.observed_owner.as_deref().unwrap_or("-"),
                    to = %take_over.new_owner,
                    "took the claim over by compare-and-set"
                );
                Some(OwnedClaim {
                    tenant: take_over.tenant,
                    operation_key: take_over.operation_key,
                    owner_token: take_over.new_owner,
                    lease_until_ms: take_over.lease_until_ms,
                })
            }
            Ok(false) | Err(_) => None,
        }
    }

    /// We took over a claim whose first owner may or may not have reached the downstream:
    /// ask for a receipt, resend only with an honoured key, otherwise hand it to
    /// reconciliation. `request` is `None` when the original request is not at hand
    /// (reconcile by reference): then nothing is resent.
    async fn recover(
        &self,
        owned: &OwnedClaim,
        record: &OperationRecord,
        contract: &ToolContract,
        request: Option<&Request>,
    ) -> Outcome {
        let plan = (self.strategies.recovery)(contract);
        let kind = ToolKind::of(&contract.name);
        let lookup =
            if plan.look_up_receipt { Some(self.look_up_receipt(record, contract).await) } else { None };
        match &lookup {
            Some(ReceiptLookup::Found(reference, _)) => {
                tracing::debug!(key = %owned.operation_key, reference = %reference, "receipt lookup: found")
            }
            Some(ReceiptLookup::NotFound) => {
                tracing::debug!(key = %owned.operation_key, "receipt lookup: none")
            }
            Some(ReceiptLookup::Failed(why)) => {
                tracing::debug!(key = %owned.operation_key, why = %why, "receipt lookup: failed")
            }
            None => tracing::debug!(key = %owned.operation_key, "no receipt lookup for this downstream"),
        }
        let finding = match lookup {
            Some(ReceiptLookup::Found(reference, answer)) => {
                self.note(&owned.tenant, &owned.operation_key, &format!("receipt found: {reference}")).await;
                let result =
                    kind.map(|kind| receipt_result(kind, &reference, &answer)).unwrap_or(Value::Null);
                return self.record_receipt(owned, contract, &reference, result, true).await;
            }
            // An honoured key makes a resend safe whatever the lookup said: the downstream
            // answers it from the first request if that one committed. Without lookups (down
            // for as long as recovery tries) the operation is still settled.
            Some(ReceiptLookup::Failed(why)) if request.is_some() && plan.resend_with_same_key => {
                format!("receipt lookup failed ({why}), and the downstream honours the key")
            }
            Some(ReceiptLookup::Failed(why)) => {
                // Worth another try (the agent's retry, or this worker's reconciliation).
                return self.mark_unknown(owned, &format!("receipt lookup failed: {why}"), false).await;
            }
            Some(ReceiptLookup::NotFound) => "no receipt for the key".to_owned(),
            None => "no receipt lookup for this downstream".to_owned(),
        };
        match request {
            Some(request) if plan.resend_with_same_key && plan.fresh_key_on_resend => {
                // Mutants only: the resend goes out as a new provider request.
                let mut fresh = record.clone();
                let suffix = format!("resend-{:08x}", self.env.entropy.next_u64() as u32);
                fresh.downstream_key = record.downstream_key.as_ref().map(|key| format!("{key}:{suffix}"));
                self.note(&owned.tenant, &owned.operation_key, &format!("{finding}; resending")).await;
                self.execute(owned, &fresh, contract, request).await
            }
            Some(request) if plan.resend_with_same_key && plan.rederive_key_on_resend => {
                // Mutants only: the resend carries the key this worker derives now.
                let mut again = record.clone();
                again.downstream_key = (self.strategies.downstream_key)(contract, &owned.operation_key);
                self.note(&owned.tenant, &owned.operation_key, &format!("{finding}; resending")).await;
                self.execute(owned, &again, contract, request).await
            }
            Some(request) if plan.resend_with_same_key => {
                let note = format!("{finding}; resending with the same key");
                self.note(&owned.tenant, &owned.operation_key, &note).await;
                self.execute(owned, record, contract, request).await
            }
            _ => {
                let finding = format!("{finding}; the effect cannot be proved or safely repeated");
                // With an honoured key and only the request missing (a reconcile by reference),
                // the agent's retry or this worker's reconciliation can still resend it.
                self.mark_unknown(owned, &finding, !plan.resend_with_same_key).await
            }
        }
    }

    // -------------------------------------------------------------- own reconciliation

    /// Starts this worker's own reconciliation unless it is running: see
    /// [`Machine::reconcile_unsettled`].
    fn reconcile_in_background(&self) {
        if self.reconciling.replace(true) {
            self.again.set(true);
            return;
        }
        let Some(machine) = self.this.upgrade() else {
            self.reconciling.set(false);
            return;
        };
        self.env.background.spawn(Box::pin(async move {
            machine.reconcile_unsettled().await;
            machine.reconciling.set(false);
        }));
    }

    /// The executor's own Y (yield to reconciliation), without waiting for the agent: every
    /// `unknown` record, and every `pending` one whose owner's lease ran out, is taken over and
    /// looked up in the downstream's system of record, [`RECONCILE_ATTEMPTS`] times at most per
    /// worker start, [`RECONCILE_AFTER`] after the record last changed and as long again
    /// between tries. A receipt settles it; without one, the request the record kept is
    /// resent under the same key where the downstream honours it (as a retry would); otherwise
    /// it stays `unknown`, and once every try was inconclusive it is handed over to people.
    /// A queued operation waiting for its consumer (no owner) is the queue's, and a running job
    /// the poller's. Where the downstream offers no way to find out, an abandoned claim is
    /// taken over, marked `unknown` and handed over at once, and an `unknown` record is left
    /// alone (it was handed over when it was marked). A consumer's abandoned claim is taken over
    /// like any other (the queue may deliver it again too: the compare-and-set decides). Ends
    /// when nothing is left to try.
    async fn reconcile_unsettled(&self) {
        let mut tried: BTreeMap<(String, String), (u32, u64)> = BTreeMap::new();
        loop {
            self.again.set(false);
            let Ok(records) = self.gated().call("unsettled", async |store| store.unsettled().await).await
            else {
                return;
            };
            let now = self.now_ms();
            let mut due = Vec::new();
            let mut next_wake: Option<u64> = None;
            for record in records {
                let Some(contract) = self.env.contracts.get(&record.tool_name, &record.tool_version) else {
                    continue;
                };
                // Where the downstream offers no way to find out, an `unknown` record was handed
                // to people when it was marked; an abandoned claim is taken over only to be
                // marked and handed over in turn.
                if !self.can_find_out(contract) && record.status == RecordStatus::Unknown {
                    continue;
                }
                // One of this worker's calls still waits on it (its lease may have run out
                // while the downstream is slow): that call records the outcome, and a claim it
                // leaves open is looked at again then (`again`).
                if self.worked_on_here(&record) {
                    continue;
                }
                let id = (record.tenant.clone(), record.operation_key.clone());
                let first_try = record.updated_at_ms.saturating_add(duration_ms(RECONCILE_AFTER));
                let (attempts, not_before) = tried.get(&id).copied().unwrap_or((0, first_try));
                if attempts >= RECONCILE_ATTEMPTS {
                    if attempts == RECONCILE_ATTEMPTS && record.status == RecordStatus::Unknown {
                        // Every try was inconclusive (lookups failed): people take it from here.
                        // The agent's next retry, poll or reconcile still looks again.
                        tried.insert(id, (attempts + 1, not_before));
                        let finding = format!("{RECONCILE_ATTEMPTS} reconciliation attempts settled nothing");
                        self.note(&record.tenant, &record.operation_key, &finding).await;
                        self.hand_over(
                            &record.tenant,
                            &record.operation_key,
                            FindingAbout::Unreconciled,
                            &finding,
                        )
                        .await;
                    }
                    continue;
                }
                let ready_at = match record.status {
                    // An owner may still be finishing when its lease runs out (its downstream
                    // timeout can end at the very moment): it gets `LEASE_GRACE` to record.
                    RecordStatus::Pending => {
                        not_before.max(record.lease_until_ms.saturating_add(duration_ms(LEASE_GRACE)))
                    }
                    _ => not_before,
                };
                if ready_at <= now {
                    tried.insert(id, (attempts + 1, now.saturating_add(duration_ms(RECONCILE_AFTER))));
                    due.push((record, contract));
                } else {
                    next_wake = Some(next_wake.map_or(ready_at, |wake| wake.min(ready_at)));
                }
            }
            if due.is_empty() {
                if self.again.get() {
                    continue;
                }
                let Some(wake) = next_wake else { return };
                self.env.background.sleep(Duration::from_millis(wake - now)).await;
                continue;
            }
            for (record, contract) in due {
                tracing::debug!(key = %record.operation_key, status = record.status.as_str(), "reconciling in the background");
                let request = self.kept_request(&record);
                if let Some(owned) = self.take_over(&record, contract).await {
                    self.recover(&owned, &record, contract, request.as_ref()).await;
                }
            }
        }
    }

    /// Whether the executor has a way to find an operation of `contract` out on its own: a
    /// receipt lookup, or a resend under a key the downstream honours.
    fn can_find_out(&self, contract: &ToolContract) -> bool {
        let plan = (self.strategies.recovery)(contract);
        plan.look_up_receipt || plan.resend_with_same_key
    }

    /// The request a record kept, validated again, when it still derives the record's key and
    /// fingerprint.
    fn kept_request(&self, record: &OperationRecord) -> Option<Request> {
        let call: ToolCall = serde_json::from_str(record.request_json.as_deref()?).ok()?;
        let (_, request) = self.prepare(call).ok()?;
        (request.key == record.operation_key && request.fingerprint == record.request_fingerprint)
            .then_some(request)
    }

    async fn look_up_receipt(&self, record: &OperationRecord, contract: &ToolContract) -> ReceiptLookup {
        let Some(key) = record.downstream_key.as_deref() else {
            return ReceiptLookup::Failed(
                "no downstream key was sent, so there is nothing to look up".into(),
            );
        };
        let sent = self.send(receipt_request(key, &record.tenant, &contract.downstream.service)).await;
        read_receipt(sent)
    }

    // -------------------------------------------------------------- poll and reconcile

    async fn handle_lookup(&self, operation: OperationRef, lookup: Lookup) -> Outcome {
        if let Err(message) = check_operation(&operation) {
            return invalid(None, message);
        }
        let tenant = (self.strategies.tenant_scope)(&operation.tenant);
        let key = (self.strategies.operation_key)(&KeyInput {
            tenant,
            environment: &operation.environment,
            workflow_id: &operation.workflow_id,
            step_id: &operation.step_id,
            call_id: None,
            arguments: None,
        });
        let record = match self.load(tenant, &key).await {
            Ok(Some(record)) => record,
            Ok(None) => return invalid(Some(&key), "no operation with this key"),
            Err(error) => return store_failure(Some(&key), &error),
        };
        // A status answer can replay a result: it is no authorization bypass either.
        if !self.authorized(&operation.tenant, &operation.actor, &record.tool_name).await {
            return unauthorized(&key);
        }
        let record = match self.retire(record).await {
            Ok(Some(record)) => record,
            Ok(None) => return invalid(Some(&key), "no operation with this key"),
            Err(error) => return store_failure(Some(&key), &error),
        };
        let Some(contract) = self.env.contracts.get(&record.tool_name, &record.tool_version) else {
            return self.describe(&record);
        };
        match record.status {
            RecordStatus::Pending if record.job_id.is_some() => self.check_job(&record, contract).await,
            RecordStatus::Pending
                if (self.strategies.queued)(&record) || record.lease_is_live(self.now_ms()) =>
            {
                self.describe(&record)
            }
            RecordStatus::Pending | RecordStatus::Unknown => {
                // An `unknown` operation's kept request, where a resend under its key is safe
                // (the downstream honours the key): then a poll or a reconcile settles it as a
                // retry would, however long ago every other try gave up (an operation handed
                // over is still settled once the world heals). A claim abandoned before its
                // outcome was known is the restarted workers' reconciliation's: a poll of it
                // stays read-only.
                let resendable = record.status == RecordStatus::Unknown
                    && (self.strategies.recovery)(contract).resend_with_same_key;
                let request = self.kept_request(&record).filter(|_| resendable);
                match (lookup, request) {
                    (Lookup::Poll, None) => self.settle_from_receipt(&record, contract).await,
                    (_, request) => match self.take_over(&record, contract).await {
                        Some(owned) => {
                            let _at_work = self.at_work(&owned.owner_token);
                            self.recover(&owned, &record, contract, request.as_ref()).await
                        }
                        None => self.reload_and_describe(&record.tenant, &key).await,
                    },
                }
            }
            RecordStatus::Applied => {
                self.finish_notice(&record, contract).await;
                self.describe(&record)
            }
            RecordStatus::FailedPermanent | RecordStatus::Tombstone => self.describe(&record),
        }
    }

    /// Poll's read-only reconciliation, where no resend would be safe: a receipt settles the
    /// record; nothing is resent.
    async fn settle_from_receipt(&self, record: &OperationRecord, contract: &ToolContract) -> Outcome {
        if !(self.strategies.recovery)(contract).look_up_receipt {
            return self.describe(record);
        }
        let ReceiptLookup::Found(reference, answer) = self.look_up_receipt(record, contract).await else {
            return self.describe(record);
        };
        let Some(owned) = self.take_over(record, contract).await else {
            return self.reload_and_describe(&record.tenant, &record.operation_key).await;
        };
        self.note(&owned.tenant, &owned.operation_key, &format!("receipt found: {reference}")).await;
        let result = ToolKind::of(&contract.name)
            .map(|kind| receipt_result(kind, &reference, &answer))
            .unwrap_or(Value::Null);
        self.record_receipt(&owned, contract, &reference, result, true).await
    }

    // -------------------------------------------------------------- delayed jobs

    async fn check_job(&self, record: &OperationRecord, contract: &ToolContract) -> Outcome {
        let key = &record.operation_key;
        let Some(job_id) = record.job_id.as_deref() else { return self.describe(record) };
        match read_job(self.send(job_request(job_id, &record.tenant)).await) {
            JobState::Succeeded(job_result) => {
                match self.settle_job(record, contract, job_id, job_result, Announce::Before).await {
                    Ok(Some(result)) => succeeded(OutcomeStatus::Applied, key, job_id, Some(result)),
                    Ok(None) => self.reload_and_describe(&record.tenant, key).await,
                    Err(error) => store_failure(Some(key), &error),
                }
            }
            JobState::Running => {
                let running_ms = self.now_ms().saturating_sub(record.updated_at_ms);
                let gave_up = (self.strategies.job_patience)(contract)
                    .is_some_and(|patience| running_ms >= duration_ms(patience));
                if gave_up {
                    // Mutants only: a job that runs longer than the executor's patience is
                    // taken for failed.
                    let (tenant, now) = (&record.tenant, self.now_ms());
                    let reason = reason_text(ReasonCode::DownstreamRejected);
                    let given_up = self
                        .gated()
                        .call("give_up_job", async |store| {
                            store.give_up_job(tenant, key, job_id, &reason, now).await
                        })
                        .await;
                    if matches!(given_up, Ok(true)) {
                        return rejected(
                            key,
                            ReasonCode::DownstreamRejected,
                            "the job ran too long; given up",
                        );
                    }
                }
                in_flight(key, JOB_POLL_AFTER_SECONDS, "the downstream job is still running; poll")
            }
            JobState::Unreadable(why) => in_flight(
                key,
                JOB_POLL_AFTER_SECONDS,
                &format!("the job status could not be read ({why}); poll"),
            ),
        }
    }

    /// Settles a finished job, exactly once per operation: only the caller that makes the
    /// `pending -> applied` transition gets `Some(result)` and sends the completion notice.
    async fn settle_job(
        &self,
        record: &OperationRecord,
        contract: &ToolContract,
        job_id: &str,
        job_result: Value,
        announce_when: Announce,
    ) -> Result<Option<Value>, StoreError> {
        let result = json!({"job_id": job_id, "status": "succeeded", "result": job_result});
        let (response_json, now) = (result.to_string(), self.now_ms());
        let (tenant, key) = (&record.tenant, &record.operation_key);
        let plan = (self.strategies.job_settlement)();
        // The winner owes the notice (when it is the one to send it) from the settlement on.
        let notice_due = plan.owe_notice && plan.announce_on_win && contract.completion_notice_to.is_some();
        let won = if plan.compare_and_set {
            self.gated()
                .call("settle_job", async |store| {
                    store.settle_job(tenant, key, job_id, &response_json, now, notice_due).await
                })
                .await?
        } else {
            self.gated()
                .call("write_job_result", async |store| {
                    store.write_job_result(tenant, key, job_id, &response_json, now).await
                })
                .await?
        };
        tracing::debug!(key, job_id, won, "the finished job settled (won: this worker changed the record)");
        let announce = won == plan.announce_on_win;
        if let Some(to) = contract.completion_notice_to.as_ref().filter(|_| announce) {
            let request = notice_request(tenant, to, job_id, record.downstream_key.as_deref());
            match announce_when {
                Announce::Before => self.announce(tenant, key, job_id, request).await,
                Announce::Beside => self.announce_in_background(tenant, key, job_id, request),
            }
        }
        Ok(won.then_some(result))
    }

    /// Sends a settled job's completion notice, and then owes it no more. A notice the
    /// downstream does not confirm is not resent blind (the message service may not dedupe):
    /// it is handed over to people.
    async fn announce(&self, tenant: &str, key: &str, job_id: &str, request: wire::HttpRequest) {
        let answer = classify(ToolKind::MessagesSend, self.send(request).await);
        if !matches!(answer, Answer::Receipt { .. }) {
            let finding =
                format!("the completion notice for {job_id} was not confirmed: {}", answer.describe());
            self.note(tenant, key, &finding).await;
            self.hand_over(tenant, key, FindingAbout::CompletionNotice, &finding).await;
        }
        self.notice_done(tenant, key).await;
    }

    async fn notice_done(&self, tenant: &str, key: &str) {
        // A notice still marked owed after this is finished again by a later poll: it looks
        // before it resends.
        let _ = self.gated().call("notice_done", async |store| store.notice_done(tenant, key).await).await;
    }

    /// Finishes a completion notice a settled job still owes (its sender crashed, or gave up,
    /// before the notice was confirmed), from a poll or a call of the operation, once its
    /// sender had time to finish (its downstream timeout, and [`RECONCILE_AFTER`] more): the
    /// notice's own receipt is looked up
    /// first; without one it is resent under its key where the message service honours keys,
    /// and otherwise handed over to people.
    async fn finish_notice(&self, record: &OperationRecord, contract: &ToolContract) {
        let (tenant, key, now) = (&record.tenant, &record.operation_key, self.now_ms());
        let (Some(to), Some(downstream_key)) = (&contract.completion_notice_to, &record.downstream_key)
        else {
            return;
        };
        let Ok(Some((job_id, claimed_at_ms))) =
            self.gated().call("due_notice", async |store| store.due_notice(tenant, key).await).await
        else {
            return;
        };
        let patience = self.config.downstream_timeout.saturating_add(RECONCILE_AFTER);
        if now < claimed_at_ms.saturating_add(duration_ms(patience)) {
            return;
        }
        let claimed = self
            .gated()
            .call("claim_notice", async |store| store.claim_notice(tenant, key, claimed_at_ms, now).await)
            .await;
        if !matches!(claimed, Ok(true)) {
            return;
        }
        let notice_key = format!("{downstream_key}:notice");
        let messages = self.env.contracts.iter().find(|contract| contract.name == "messages.send");
        let plan = messages.map(|messages| (self.strategies.recovery)(messages));
        if plan.is_some_and(|plan| plan.look_up_receipt) {
            match read_receipt(self.send(receipt_request(&notice_key, tenant, "messages")).await) {
                ReceiptLookup::Found(..) => return self.notice_done(tenant, key).await,
                // Another poll tries again once the claim is old enough.
                ReceiptLookup::Failed(_) => return,
                ReceiptLookup::NotFound => {}
            }
        }
        if plan.is_some_and(|plan| plan.resend_with_same_key) {
            let request = notice_request(tenant, to, &job_id, Some(downstream_key));
            return self.announce(tenant, key, &job_id, request).await;
        }
        let finding = format!(
            "the completion notice for {job_id} may not have gone out, and cannot be resent safely \
             (the message service does not honour keys, and no receipt of it was found or can be looked up)"
        );
        self.note(tenant, key, &finding).await;
        self.hand_over(tenant, key, FindingAbout::CompletionNotice, &finding).await;
        self.notice_done(tenant, key).await;
    }

    /// [`Machine::announce`] as this worker's own background work, for a settlement made while
    /// handling a webhook delivery: the settlement is durable, and the notice must not be lost
    /// because the provider gave up on the delivery (its connection closed) before the notice
    /// was confirmed. (A crash between the settlement and the notice loses it.)
    fn announce_in_background(&self, tenant: &str, key: &str, job_id: &str, request: wire::HttpRequest) {
        let Some(machine) = self.this.upgrade() else { return };
        let (tenant, key, job_id) = (tenant.to_owned(), key.to_owned(), job_id.to_owned());
        self.env.background.spawn(Box::pin(async move {
            machine.announce(&tenant, &key, &job_id, request).await;
        }));
    }

    async fn handle_webhook(&self, event: WebhookEvent) -> WebhookAck {
        let Ok(event) = serde_json::from_slice::<JobEvent>(&event.body) else { return WebhookAck::Invalid };
        let ids_fit = [&event.event_id, &event.tenant, &event.job_id]
            .into_iter()
            .chain(event.idempotency_key.as_ref())
            .all(|value| protocol::check_identifier("id", value).is_ok());
        if !ids_fit || event.kind != "job.succeeded" {
            return WebhookAck::Invalid;
        }
        let tenant = (self.strategies.tenant_scope)(&event.tenant);
        let found = match event.idempotency_key.as_deref() {
            Some(key) => {
                self.gated()
                    .call("load_by_downstream_key", async |store| {
                        store.load_by_downstream_key(tenant, key).await
                    })
                    .await
            }
            None => {
                self.gated()
                    .call("load_by_job", async |store| store.load_by_job(tenant, &event.job_id).await)
                    .await
            }
        };
        let Ok(found) = found else { return WebhookAck::Unmatched };
        // The event must be about this operation's job (when the job is known).
        let record = found.filter(|record| record.job_id.as_deref().is_none_or(|job| job == event.job_id));
        let (now, operation_key) =
            (self.now_ms(), record.as_ref().map(|record| record.operation_key.as_str()));
        if (self.strategies.job_settlement)().dedupe_event_ids {
            let recorded = self
                .gated()
                .call("record_event", async |store| {
                    store.record_event(&event.event_id, tenant, operation_key, now).await
                })
                .await;
            match recorded {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(key = operation_key, event = %event.event_id, "webhook event seen before: ignored");
                    return WebhookAck::DuplicateEvent;
                }
                Err(_) => return WebhookAck::Unmatched,
            }
        }
        let Some(record) = record else { return WebhookAck::Unmatched };
        let Some(contract) = self.env.contracts.get(&record.tool_name, &record.tool_version) else {
            return WebhookAck::Unmatched;
        };
        match self.settle_job(&record, contract, &event.job_id, event.result, Announce::Beside).await {
            Ok(Some(_)) => WebhookAck::Processed,
            Ok(None) | Err(_) => WebhookAck::AlreadySettled,
        }
    }

    // -------------------------------------------------------------- queue consumer

    async fn handle_envelope(&self, envelope: Envelope) -> Consumed {
        // An envelope this executor cannot read, or whose call does not derive the operation
        // it names, cannot be acted on by any retry either: acknowledge it without an effect.
        let Ok(payload) = serde_json::from_str::<QueuedPayload>(&envelope.payload.to_string()) else {
            return Consumed::Ack;
        };
        let Ok((contract, request)) = self.prepare(payload.call) else { return Consumed::Ack };
        if request.key != envelope.operation_key || request.tenant != envelope.tenant {
            return Consumed::Ack;
        }
        if !(self.strategies.consumer_claim)(contract) {
            return self.consume_unclaimed(contract, &request).await;
        }
        let record = match self.load(&envelope.tenant, &envelope.operation_key).await {
            Ok(Some(record)) => record,
            Ok(None) => return Consumed::Ack,
            Err(_) => return Consumed::Retry,
        };
        let record = match self.retire(record).await {
            Ok(Some(record)) => record,
            Ok(None) => return Consumed::Ack,
            Err(_) => return Consumed::Retry,
        };
        if record.request_fingerprint != request.fingerprint {
            return Consumed::Ack;
        }
        match record.status {
            RecordStatus::Pending if record.job_id.is_some() => Consumed::Ack,
            RecordStatus::Pending if record.lease_is_live(self.now_ms()) => Consumed::Retry,
            RecordStatus::Pending => {
                let Some(owned) = self.take_over(&record, contract).await else { return Consumed::Retry };
                let outcome = if record.owner_token.is_none() {
                    // Waiting for us: the first consumer to claim it carries it out.
                    self.execute(&owned, &record, contract, &request).await
                } else if !self.can_find_out(contract) && (self.strategies.redelivered_resend)(contract) {
                    // Mutants only: the redelivered envelope is sent again.
                    self.execute(&owned, &record, contract, &request).await
                } else {
                    // A previous owner's lease ran out: it may have sent already.
                    self.recover(&owned, &record, contract, Some(&request)).await
                };
                match outcome.status {
                    OutcomeStatus::InFlight => Consumed::Retry,
                    _ => Consumed::Ack,
                }
            }
            RecordStatus::Applied
            | RecordStatus::FailedPermanent
            | RecordStatus::Unknown
            | RecordStatus::Tombstone => Consumed::Ack,
        }
    }
}

impl Machine {
    /// `consumer_claim` false (mutants only): the delivery is acted on at once; only then is
    /// the operation looked at, and settled if it is still waiting for a consumer.
    async fn consume_unclaimed(&self, contract: &ToolContract, request: &Request) -> Consumed {
        let call = &request.call;
        if !self.allowed_at(AuthPoint::BeforeEffect, &call.tenant, &call.actor, &contract.name).await {
            return Consumed::Ack;
        }
        let downstream_key = (self.strategies.downstream_key)(contract, &request.key);
        let answer =
            classify(request.plan.kind, self.send(request.plan.request(downstream_key.as_deref())).await);
        let record = match self.load(&request.tenant, &request.key).await {
            Ok(Some(record)) => record,
            Ok(None) => return Consumed::Ack,
            Err(_) => return Consumed::Retry,
        };
        if record.status != RecordStatus::Pending || record.job_id.is_some() {
            return Consumed::Ack;
        }
        let Some(owned) = self.take_over(&record, contract).await else { return Consumed::Ack };
        match self.record_answer(&owned, contract, answer).await.status {
            OutcomeStatus::InFlight => Consumed::Retry,
            _ => Consumed::Ack,
        }
    }
}

fn owned_claim(record: &OperationRecord) -> OwnedClaim {
    OwnedClaim {
        tenant: record.tenant.clone(),
        operation_key: record.operation_key.clone(),
        owner_token: record
            .owner_token
            .clone()
            .unwrap_or_else(|| unreachable!("a record this worker just claimed carries its owner token")),
        lease_until_ms: record.lease_until_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_factory_can_be_shared_across_threads() {
        fn shareable<T: Send + Sync + 'static>(_: &T) {}
        let factory =
            ReferenceFactory::new(StoreLocation::PrivateMemory, ReferenceConfig::default()).unwrap();
        shareable(&factory);
        assert_eq!(factory.location(), &StoreLocation::PrivateMemory);
    }

    #[test]
    fn retry_hints_round_up_and_are_at_least_a_second() {
        assert_eq!(seconds_until(0, 5_000), 5);
        assert_eq!(seconds_until(0, 4_001), 5);
        assert_eq!(seconds_until(4_999, 5_000), 1);
        assert_eq!(seconds_until(6_000, 5_000), 1);
    }

    #[test]
    fn reason_codes_round_trip_through_the_reason_column() {
        for reason in
            [ReasonCode::Unauthorized, ReasonCode::PreconditionFailed, ReasonCode::DownstreamRejected]
        {
            let record = OperationRecord {
                tenant: "acme".into(),
                operation_key: "k".into(),
                tool_name: "t".into(),
                tool_version: "v".into(),
                request_fingerprint: "f".into(),
                status: RecordStatus::FailedPermanent,
                effect_reference: None,
                response_json: None,
                owner_token: None,
                lease_until_ms: 0,
                job_id: None,
                downstream_key: None,
                reason: Some(reason_text(reason)),
                created_at_ms: 0,
                updated_at_ms: 0,
                expires_at_ms: 0,
                request_json: None,
            };
            assert_eq!(stored_reason(&record), reason);
        }
        assert_eq!(reason_text(ReasonCode::PreconditionFailed), "precondition_failed");
    }

    #[test]
    fn operation_references_are_checked_like_calls() {
        let operation = |step: &str| OperationRef {
            tenant: "acme".into(),
            environment: "production".into(),
            workflow_id: "run".into(),
            step_id: step.into(),
            actor: "agent".into(),
        };
        assert!(check_operation(&operation("s1")).is_ok());
        assert!(check_operation(&operation("")).unwrap_err().contains("must not be empty"));
        assert!(check_operation(&operation("a\u{7}")).unwrap_err().contains("control characters"));
        let long = "x".repeat(protocol::MAX_ID_CHARS + 1);
        assert!(check_operation(&operation(&long)).unwrap_err().contains("longer than"));
    }
}
