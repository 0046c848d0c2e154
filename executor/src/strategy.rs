//! The REPLAY decisions, one small named function each, gathered in [`Strategies`].
//!
//! The reference executor calls these through a [`Strategies`] value so that a mutant
//! executor can replace exactly one decision with a defective version and keep everything
//! else. [`Strategies::reference`] holds the correct ones; read them here, in one place.

use std::rc::Rc;
use std::time::Duration;

use protocol::{ContractError, Fingerprint, LocalBoxFuture, ReasonCode, ToolCall, ToolContract};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::store::{Claimed, GatedStore, NewClaim, OperationRecord, StoreError};

/// Longest operation key sent downstream as it is; longer keys are sent as
/// `sha256:<hex>`. The fake downstream (like many providers) accepts keys up to 255
/// characters, and the completion notice appends `:notice` to the key, so 200 leaves room.
pub const MAX_DOWNSTREAM_KEY_CHARS: usize = 200;

/// What an operation key may be derived from. The reference uses only the workflow context;
/// `call_id` and `arguments` are here so that a mutant can (wrongly) use them. They are
/// `None` when the executor names an operation by [`protocol::OperationRef`] (poll,
/// reconcile).
#[derive(Debug, Clone, Copy)]
pub struct KeyInput<'a> {
    /// Tenant.
    pub tenant: &'a str,
    /// Environment.
    pub environment: &'a str,
    /// Workflow run.
    pub workflow_id: &'a str,
    /// Step inside the run.
    pub step_id: &'a str,
    /// The model's tool-call id (calls only).
    pub call_id: Option<&'a str>,
    /// The validated arguments (calls only).
    pub arguments: Option<&'a Map<String, Value>>,
}

/// Where authorization may be asked (see [`Strategies::authorize_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthPoint {
    /// Before the claim: an unauthorized call creates no record.
    BeforeClaim,
    /// Right after claim-or-load; `new_claim` tells whether this call created the record.
    AfterClaim {
        /// This call inserted the record.
        new_claim: bool,
    },
    /// Immediately before a downstream effect (or the hand-off to the outbox).
    BeforeEffect,
    /// Before a call takes over an abandoned or `unknown` operation to recover it (the
    /// reference has already asked before the claim).
    BeforeRecovery,
}

/// What recovery does with a claim whose owner vanished (lease expired) or whose outcome is
/// unknown, after it has taken the claim over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// Ask the downstream for a receipt by key first.
    pub look_up_receipt: bool,
    /// When no receipt was found (or none could be asked for), send the request again with
    /// the same downstream key. Safe only when the downstream honours the key.
    pub resend_with_same_key: bool,
    /// Send that request under a new downstream key instead (a resend as a new provider
    /// request). Never safe: the first request may have committed.
    pub fresh_key_on_resend: bool,
    /// Derive the resend's downstream key again with this worker's `downstream_key` instead
    /// of sending the one the record kept (a client that stamps its own key on every request it
    /// sends). The reference's derivation gives the kept key again; a key minted per process
    /// does not survive the process.
    pub rederive_key_on_resend: bool,
}

/// What retention makes of a record at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionVerdict {
    /// Keep it as it is.
    Keep,
    /// Past retention: turn it into a tombstone.
    Tombstone,
    /// Delete it (never chosen by the reference: a late duplicate would become a new effect).
    Forget,
}

/// What an ambiguous answer to an effect request (a timeout, a closed connection, a 5xx, a
/// body that does not carry the effect reference) is taken to mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmbiguityVerdict {
    /// The effect may or may not have happened: record `unknown` and leave it to
    /// reconciliation (the reference).
    Unknown,
    /// Take it as done, without a receipt (never chosen by the reference: success inferred
    /// from silence).
    Applied,
    /// Send the request again now (never chosen by the reference: a resend is only safe with
    /// a key the downstream honours, and recovery decides that after a receipt lookup).
    Resend,
}

/// What the claim store keeps when an effect completes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCompletion {
    /// The effect reference to store (`None`: the record keeps no reference).
    pub effect_reference: Option<String>,
    /// The safe result to store, replayed to later duplicates.
    pub response: Value,
}

/// What a retry does when it finds the operation's delayed job accepted and unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobRetry {
    /// Answer `in_flight` and let polling (or the webhook) settle the job (the reference).
    Poll,
    /// Submit the job again (never chosen by the reference: a second job).
    Resubmit,
}

/// What a call does when the operation's record holds a different request fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchVerdict {
    /// Refuse it; the stored request stands (the reference).
    Reject,
    /// Replace the stored operation by the newer request and carry that out (never chosen by
    /// the reference: one key, two different effects).
    ApplyNewest,
}

/// Which calls under a newer tool version may replay a record made under an older one whose
/// contract allows replay across versions (`replay_across_versions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrossVersionReplay {
    /// Only a call that, read by the old contract, is the request the record was made for (the
    /// reference): the new version may not re-interpret the old effect, nor replay it for other
    /// arguments.
    SameRequestOnly,
    /// Any call with the operation's key (never chosen by the reference: a changed amount
    /// under the new version is answered with the old charge).
    AnyRequest,
}

/// How finished delayed jobs are settled, by the completion webhook or by polling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSettlementPlan {
    /// Record each webhook event id and ignore a redelivered one.
    pub dedupe_event_ids: bool,
    /// Settle by compare-and-set (`pending|unknown -> applied`), so that only the first
    /// settlement wins and sends the completion notice.
    pub compare_and_set: bool,
    /// The completion notice is sent by the settlement that changed the record (the
    /// reference); when false, by one that found it settled already (a mutant).
    pub announce_on_win: bool,
    /// The settlement records the notice as owed, in the same transaction, so that a crash
    /// before it went out leaves it to a later poll (the reference); when false, a crash in
    /// between loses it (a mutant).
    pub owe_notice: bool,
}

/// R: the operation key.
pub type OperationKeyFn = Rc<dyn Fn(&KeyInput<'_>) -> String>;
/// E: the request fingerprint (validates the arguments).
pub type FingerprintFn = Rc<dyn Fn(&ToolContract, &ToolCall) -> Result<Fingerprint, ContractError>>;
/// P: claim the operation or load the existing record, through the gated store.
pub type ClaimFn =
    Rc<dyn for<'a> Fn(GatedStore<'a>, &'a NewClaim) -> LocalBoxFuture<'a, Result<Claimed, StoreError>>>;
/// Y: what recovery of an abandoned or unknown claim does.
pub type RecoveryFn = Rc<dyn Fn(&ToolContract) -> RecoveryPlan>;
/// A: whether to ask the authorizer at a point.
pub type AuthorizeAtFn = Rc<dyn Fn(AuthPoint) -> bool>;
/// Retention: what to do with a record at `now_ms`.
pub type RetentionFn = Rc<dyn Fn(&OperationRecord, u64) -> RetentionVerdict>;
/// The `Idempotency-Key` to send downstream for an operation key (`None`: send none).
pub type DownstreamKeyFn = Rc<dyn Fn(&ToolContract, &str) -> Option<String>>;

/// What an ambiguous answer means, given the contract and how many requests this attempt
/// has sent so far (1 after the first).
pub type AmbiguityFn = Rc<dyn Fn(&ToolContract, u32) -> AmbiguityVerdict>;
/// What is stored on completion, from the downstream's effect reference and safe result.
pub type CompletionFn = Rc<dyn Fn(&str, &Value) -> StoredCompletion>;
/// What a retry of an operation whose delayed job is still running does.
pub type JobRetryFn = Rc<dyn Fn(&ToolContract) -> JobRetry>;
/// How long a delayed job may run before the executor gives up on it (`None`: it waits for
/// the job, however long it runs).
pub type JobPatienceFn = Rc<dyn Fn(&ToolContract) -> Option<Duration>>;
/// What a fingerprint mismatch does (the contract is the incoming call's).
pub type MismatchFn = Rc<dyn Fn(&ToolContract) -> MismatchVerdict>;
/// The tenant value under which the operation is keyed and stored, from the call's tenant.
pub type TenantScopeFn = Rc<dyn for<'a> Fn(&'a str) -> &'a str>;
/// Whether an absolute update sends the version it was based on (`If-Match`).
pub type VersionPreconditionFn = Rc<dyn Fn(&ToolContract) -> bool>;
/// Which newer-version calls may replay an older version's record (given the record's contract).
pub type CrossVersionFn = Rc<dyn Fn(&ToolContract) -> CrossVersionReplay>;
/// What a finding the executor cannot settle on its own is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingAbout {
    /// An operation left `unknown` that nothing the executor can do will settle.
    Operation,
    /// An operation every reconciliation try of a worker left `unknown` (the lookups
    /// failed): the executor's own recovery has given up on it.
    Unreconciled,
    /// A settled job's completion notice that may not have gone out.
    CompletionNotice,
}

impl FindingAbout {
    /// The snake_case name, for logs: `operation`, `unreconciled`, `completion_notice`.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingAbout::Operation => "operation",
            FindingAbout::Unreconciled => "unreconciled",
            FindingAbout::CompletionNotice => "completion_notice",
        }
    }
}

/// Whether findings about `FindingAbout` are filed to the operators' queue as well as kept in
/// the executor's own table.
pub type FileFindingsFn = Rc<dyn Fn(FindingAbout) -> bool>;
/// Whether a receipt that reaches a worker after its claim was taken over and the record left
/// `unknown` settles the record (by taking the claim over again), or is dropped.
pub type LateReceiptFn = Rc<dyn Fn() -> bool>;
/// Whether a `pending` record with an owner is described as that owner's work in progress
/// (`in_flight`) at `now_ms`, or as abandoned (`unknown`: reconcile).
pub type OwnerAtWorkFn = Rc<dyn Fn(&OperationRecord, u64) -> bool>;
/// Whether a `pending` record is waiting for the queue's consumer (so that a retry, a poll or
/// a reconcile leaves it alone), or abandoned.
pub type QueuedFn = Rc<dyn Fn(&OperationRecord) -> bool>;
/// Whether a retry that finds an operation `unknown`, where the executor has no way to find it
/// out (no receipt lookup, no honoured key), runs the request again (`true`) or answers what the
/// record says (`false`, the reference).
pub type RerunUnknownFn = Rc<dyn Fn(&ToolContract) -> bool>;
/// Whether a queue consumer that gets an envelope again for a claim whose owner's lease ran
/// out, where the executor has no way to find it out (no receipt lookup, no honoured key), sends
/// it again (`true`) or recovers it (`false`, the reference: it may have been sent).
pub type RedeliveredResendFn = Rc<dyn Fn(&ToolContract) -> bool>;
/// How finished jobs are settled (webhook deduplication and the settling transition).
pub type JobSettlementFn = Rc<dyn Fn() -> JobSettlementPlan>;
/// Whether the queue consumer claims the operation before it acts on a delivery.
pub type ConsumerClaimFn = Rc<dyn Fn(&ToolContract) -> bool>;
/// The reason stored with a permanent refusal, which every later answer replays (`None`:
/// none is stored).
pub type RefusalFn = Rc<dyn Fn(ReasonCode) -> Option<ReasonCode>>;

/// The REPLAY decisions an executor is made of, one shared function each. Start from
/// [`Strategies::reference`], replace a field, and hand a function that makes them to
/// [`crate::ReferenceFactory::with_strategies`] or [`crate::ReferenceFactory::recycled`]: it
/// runs at each worker's (re)start with the worker's [`protocol::WorkerEnv`], so a decision
/// may keep state (per worker in the closure, across workers in something the maker
/// captures) and see the worker's clock, identity and contracts.
///
/// ```
/// use std::rc::Rc;
/// use executor::{AmbiguityVerdict, ReferenceConfig, ReferenceFactory, Strategies};
///
/// // The reference, but an ambiguous answer is taken as done (the zoo's M06).
/// let factory = ReferenceFactory::recycled(ReferenceConfig::default(), |_env: &protocol::WorkerEnv| {
///     Strategies { ambiguity: Rc::new(|_contract, _sent| AmbiguityVerdict::Applied), ..Strategies::reference() }
/// })?;
/// # drop(factory);
///
/// // A decision with state that sees its worker: each worker counts the ambiguous answers it
/// // got, and from its third one on gives up resending at once (the reference's choice is
/// // `Unknown` anyway; this shows the shape).
/// let factory = ReferenceFactory::recycled(ReferenceConfig::default(), |env: &protocol::WorkerEnv| {
///     let (seen, worker) = (std::cell::Cell::new(0u32), env.worker_id.clone());
///     Strategies {
///         ambiguity: Rc::new(move |contract, sent| {
///             seen.set(seen.get() + 1);
///             if seen.get() >= 3 {
///                 eprintln!("{worker}: {} ambiguous answers so far", seen.get());
///             }
///             executor::reference_ambiguity(contract, sent)
///         }),
///         ..Strategies::reference()
///     }
/// })?;
/// # Ok::<(), executor::StoreError>(())
/// ```
#[derive(Clone)]
pub struct Strategies {
    /// R: operation key derivation.
    pub operation_key: OperationKeyFn,
    /// E: fingerprinting.
    pub fingerprint: FingerprintFn,
    /// P: the claim.
    pub claim: ClaimFn,
    /// Y: lease recovery.
    pub recovery: RecoveryFn,
    /// A: authorization (re)checks.
    pub authorize_at: AuthorizeAtFn,
    /// Retention and tombstones.
    pub retention: RetentionFn,
    /// Downstream key choice.
    pub downstream_key: DownstreamKeyFn,
    /// What an ambiguous downstream answer means.
    pub ambiguity: AmbiguityFn,
    /// What is stored when an effect completes.
    pub completion: CompletionFn,
    /// What a retry of a running delayed job does.
    pub job_retry: JobRetryFn,
    /// How long a delayed job may run before the executor gives up on it.
    pub job_patience: JobPatienceFn,
    /// What a fingerprint mismatch does.
    pub mismatch: MismatchFn,
    /// Which calls under a newer version may replay an older version's record.
    pub cross_version: CrossVersionFn,
    /// The tenant scope of keys and store records.
    pub tenant_scope: TenantScopeFn,
    /// Whether absolute updates carry their version precondition.
    pub version_precondition: VersionPreconditionFn,
    /// Webhook deduplication and the job-settling transition.
    pub job_settlement: JobSettlementFn,
    /// Whether the queue consumer claims before it acts.
    pub consumer_claim: ConsumerClaimFn,
    /// The reason a permanent refusal is stored with.
    pub refusal: RefusalFn,
    /// Whether findings reach the operators' queue.
    pub file_findings: FileFindingsFn,
    /// Whether a late receipt settles a record left `unknown` meanwhile.
    pub late_receipt: LateReceiptFn,
    /// Whether a status answer reads an owned `pending` record as work in progress.
    pub owner_at_work: OwnerAtWorkFn,
    /// Whether a `pending` record is waiting for the queue's consumer.
    pub queued: QueuedFn,
    /// U: a retry of an `unknown` operation nothing can settle.
    pub rerun_unknown: RerunUnknownFn,
    /// Q: a redelivered envelope of an abandoned claim nothing can settle.
    pub redelivered_resend: RedeliveredResendFn,
}

impl Strategies {
    /// The correct decisions.
    pub fn reference() -> Self {
        Self {
            operation_key: Rc::new(reference_operation_key),
            fingerprint: Rc::new(reference_fingerprint),
            claim: Rc::new(reference_claim),
            recovery: Rc::new(reference_recovery),
            authorize_at: Rc::new(reference_authorize_at),
            retention: Rc::new(reference_retention),
            downstream_key: Rc::new(reference_downstream_key),
            ambiguity: Rc::new(reference_ambiguity),
            completion: Rc::new(reference_completion),
            job_retry: Rc::new(reference_job_retry),
            job_patience: Rc::new(reference_job_patience),
            mismatch: Rc::new(reference_mismatch),
            cross_version: Rc::new(reference_cross_version),
            tenant_scope: Rc::new(reference_tenant_scope),
            version_precondition: Rc::new(reference_version_precondition),
            job_settlement: Rc::new(reference_job_settlement),
            consumer_claim: Rc::new(reference_consumer_claim),
            refusal: Rc::new(reference_refusal),
            file_findings: Rc::new(reference_file_findings),
            late_receipt: Rc::new(reference_late_receipt),
            owner_at_work: Rc::new(reference_owner_at_work),
            queued: Rc::new(reference_queued),
            rerun_unknown: Rc::new(reference_rerun_unknown),
            redelivered_resend: Rc::new(reference_redelivered_resend),
        }
    }
}

impl std::fmt::Debug for Strategies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Strategies").finish_non_exhaustive()
    }
}

/// Makes a worker's [`Strategies`] at its (re)start, from its environment (see
/// [`Strategies`]).
pub type MakeStrategies = std::sync::Arc<dyn Fn(&protocol::WorkerEnv) -> Strategies + Send + Sync>;

impl Default for Strategies {
    fn default() -> Self {
        Self::reference()
    }
}

/// R: tenant, environment, workflow id and step id — never the call id, never the arguments.
pub fn reference_operation_key(input: &KeyInput<'_>) -> String {
    ToolContract::operation_key(input.tenant, input.environment, input.workflow_id, input.step_id)
}

/// A delayed job runs as long as it runs: the executor polls it, never gives up on it (a job
/// the downstream accepted is an effect the operation owns).
pub fn reference_job_patience(_contract: &ToolContract) -> Option<Duration> {
    None
}

/// E: SHA-256 over the JCS form of the material fields, after defaults (the contract's).
pub fn reference_fingerprint(contract: &ToolContract, call: &ToolCall) -> Result<Fingerprint, ContractError> {
    contract.fingerprint(call)
}

/// P: one atomic insert-or-load decided by the primary key.
pub fn reference_claim<'a>(
    store: GatedStore<'a>,
    claim: &'a NewClaim,
) -> LocalBoxFuture<'a, Result<Claimed, StoreError>> {
    Box::pin(store.call("claim", async move |store| store.claim(claim).await))
}

/// Y: ask for a receipt when the downstream has receipts; resend with the same key only when
/// the downstream honours it (then a duplicate is replayed, or refused while in progress).
pub fn reference_recovery(contract: &ToolContract) -> RecoveryPlan {
    RecoveryPlan {
        look_up_receipt: contract.downstream.receipt_lookup,
        resend_with_same_key: contract.downstream.honours_key,
        fresh_key_on_resend: false,
        rederive_key_on_resend: false,
    }
}

/// A: before the claim (so an unauthorized call leaves no record) and again immediately
/// before the effect (permissions can be revoked between the two).
pub fn reference_authorize_at(point: AuthPoint) -> bool {
    match point {
        AuthPoint::BeforeClaim | AuthPoint::BeforeEffect => true,
        AuthPoint::AfterClaim { .. } | AuthPoint::BeforeRecovery => false,
    }
}

/// Retention: a terminal record past its `expires_at_ms` becomes a tombstone; nothing is
/// ever deleted.
pub fn reference_retention(record: &OperationRecord, now_ms: u64) -> RetentionVerdict {
    if record.status.is_terminal() && now_ms >= record.expires_at_ms {
        RetentionVerdict::Tombstone
    } else {
        RetentionVerdict::Keep
    }
}

/// Downstream key: sent when the downstream honours keys or can look receipts up by key (a
/// key the service ignores still names the receipt). The operation key itself when it is
/// short visible ASCII, else `sha256:` and its hex digest.
pub fn reference_downstream_key(contract: &ToolContract, operation_key: &str) -> Option<String> {
    let useful = contract.downstream.honours_key || contract.downstream.receipt_lookup;
    useful.then(|| downstream_key_for(operation_key))
}

/// Ambiguity: the effect may have happened, so the record becomes `unknown` with a
/// reconciliation row, whatever the tool; never success, never an immediate resend.
pub fn reference_ambiguity(_contract: &ToolContract, _requests_sent: u32) -> AmbiguityVerdict {
    AmbiguityVerdict::Unknown
}

/// Completion: the downstream's effect reference and the safe result, so that a replay
/// returns exactly what the first answer did.
pub fn reference_completion(effect_reference: &str, result: &Value) -> StoredCompletion {
    StoredCompletion { effect_reference: Some(effect_reference.to_owned()), response: result.clone() }
}

/// Job retry: the job id is stored and the job is never submitted again; the retry is told
/// to poll.
pub fn reference_job_retry(_contract: &ToolContract) -> JobRetry {
    JobRetry::Poll
}

/// Findings are filed to the operators' queue (and kept in the store's table): an `unknown`
/// nobody is told about is never settled.
pub fn reference_file_findings(_about: FindingAbout) -> bool {
    true
}

/// A receipt is evidence whenever it arrives: an answer that reaches a worker after its claim
/// was taken over and the record left `unknown` settles the record. Where the downstream
/// offers no receipt lookup and no honoured key, it is the only evidence there will ever be.
pub fn reference_late_receipt() -> bool {
    true
}

/// An owner is at work only while its lease is live: "a pending record owned by another live
/// worker returns in_flight"; once the lease ran out, nobody is, and the answer says
/// `unknown` (reconcile) until someone takes the claim over.
pub fn reference_owner_at_work(record: &OperationRecord, now_ms: u64) -> bool {
    record.lease_is_live(now_ms)
}

/// U: an `unknown` operation the executor cannot find out (no receipt lookup, no honoured key)
/// was handed over to people when it was marked; a retry answers `unknown` again and never runs
/// the request a second time: the first may have made the effect, and nothing would tell.
pub fn reference_rerun_unknown(_contract: &ToolContract) -> bool {
    false
}

/// Q: a queue delivers at least once; an envelope delivered again for a claim whose consumer
/// vanished (its lease ran out) is recovered like any abandoned claim: where nothing can tell
/// whether the first consumer sent, it is marked `unknown` and handed over, never sent again.
pub fn reference_redelivered_resend(_contract: &ToolContract) -> bool {
    false
}

/// A `pending` record with no owner (and no job) was handed to the queue: it waits for the
/// consumer, which claims it by compare-and-set. Nobody else takes it over.
pub fn reference_queued(record: &OperationRecord) -> bool {
    record.owner_token.is_none()
}

/// Cross-version replay: only the same request, read by the contract that made the record.
pub fn reference_cross_version(_stored: &ToolContract) -> CrossVersionReplay {
    CrossVersionReplay::SameRequestOnly
}

/// Same key, different request: refuse; the stored request stands.
pub fn reference_mismatch(_contract: &ToolContract) -> MismatchVerdict {
    MismatchVerdict::Reject
}

/// Tenant scope: the call's own tenant, so that the same key string under two tenants is
/// two operations (it is the first part of both the operation key and the store's primary
/// key).
pub fn reference_tenant_scope(tenant: &str) -> &str {
    tenant
}

/// Version precondition: always sent where the tool has one (`If-Match` with the version the
/// caller read), so that a stale absolute update is refused instead of applied.
pub fn reference_version_precondition(_contract: &ToolContract) -> bool {
    true
}

/// Job settlement: webhook event ids are recorded and a redelivery ignored, and the
/// `pending -> applied` transition is a compare-and-set whose only winner sends the
/// completion notice.
pub fn reference_job_settlement() -> JobSettlementPlan {
    JobSettlementPlan {
        dedupe_event_ids: true,
        compare_and_set: true,
        announce_on_win: true,
        owe_notice: true,
    }
}

/// Consumer claim: a queue consumer takes the operation over by compare-and-set before it
/// acts, because the queue delivers at least once.
pub fn reference_consumer_claim(_contract: &ToolContract) -> bool {
    true
}

/// A permanent refusal keeps its own reason: a later retry or poll replays it as it was.
pub fn reference_refusal(reason: ReasonCode) -> Option<ReasonCode> {
    Some(reason)
}

/// The operation key as a header-safe downstream key (see [`reference_downstream_key`]).
pub fn downstream_key_for(operation_key: &str) -> String {
    let sendable = operation_key.len() <= MAX_DOWNSTREAM_KEY_CHARS
        && operation_key.bytes().all(|byte| (0x21..=0x7e).contains(&byte));
    if sendable {
        return operation_key.to_owned();
    }
    let digest = Sha256::digest(operation_key.as_bytes());
    let mut key = String::with_capacity(7 + 64);
    key.push_str("sha256:");
    for byte in digest {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

#[cfg(test)]
mod tests {
    use protocol::ContractSet;

    use super::*;
    use crate::store::RecordStatus;

    fn contract(name: &str) -> ToolContract {
        ContractSet::builtin().iter().find(|contract| contract.name == name).unwrap().clone()
    }

    #[test]
    fn the_operation_key_ignores_call_id_and_arguments() {
        let arguments: Map<String, Value> = serde_json::from_str(r#"{"subject":"s"}"#).unwrap();
        let mut input = KeyInput {
            tenant: "acme",
            environment: "production",
            workflow_id: "run_1",
            step_id: "step_1",
            call_id: Some("call_1"),
            arguments: Some(&arguments),
        };
        let first = reference_operation_key(&input);
        input.call_id = Some("call_2");
        input.arguments = None;
        assert_eq!(reference_operation_key(&input), first);
        assert_eq!(first, "acme:production:run_1:step_1");
    }

    #[test]
    fn long_or_unusual_keys_are_hashed_for_the_downstream() {
        assert_eq!(downstream_key_for("acme:production:run_1:s"), "acme:production:run_1:s");
        let exactly = "k".repeat(MAX_DOWNSTREAM_KEY_CHARS);
        assert_eq!(downstream_key_for(&exactly), exactly);
        for key in ["k".repeat(MAX_DOWNSTREAM_KEY_CHARS + 1), "acme:prod:run 1:s".into(), "acmé:p:r:s".into()]
        {
            let sent = downstream_key_for(&key);
            assert!(sent.starts_with("sha256:") && sent.len() == 71, "{key:?} -> {sent}");
            assert_eq!(sent, downstream_key_for(&key), "stable");
        }
        assert_ne!(downstream_key_for(&"a".repeat(201)), downstream_key_for(&"b".repeat(201)));
    }

    #[test]
    fn a_key_is_sent_only_where_the_downstream_can_use_it() {
        let mut tickets = contract("tickets.create");
        assert_eq!(reference_downstream_key(&tickets, "k"), Some("k".into()));
        tickets.downstream.honours_key = false;
        assert_eq!(reference_downstream_key(&tickets, "k"), Some("k".into()), "receipts need it");
        tickets.downstream.receipt_lookup = false;
        assert_eq!(reference_downstream_key(&tickets, "k"), None);
    }

    #[test]
    fn recovery_asks_for_receipts_and_resends_only_with_an_honoured_key() {
        let mut messages = contract("messages.send");
        assert_eq!(
            reference_recovery(&messages),
            RecoveryPlan {
                look_up_receipt: true,
                resend_with_same_key: false,
                fresh_key_on_resend: false,
                rederive_key_on_resend: false
            }
        );
        messages.downstream.receipt_lookup = false;
        assert_eq!(
            reference_recovery(&messages),
            RecoveryPlan {
                look_up_receipt: false,
                resend_with_same_key: false,
                fresh_key_on_resend: false,
                rederive_key_on_resend: false
            }
        );
        assert_eq!(
            reference_recovery(&contract("payments.charge")),
            RecoveryPlan {
                look_up_receipt: true,
                resend_with_same_key: true,
                fresh_key_on_resend: false,
                rederive_key_on_resend: false
            }
        );
    }

    #[test]
    fn only_terminal_records_past_retention_become_tombstones() {
        let record = |status, expires_at_ms| OperationRecord {
            tenant: "acme".into(),
            operation_key: "k".into(),
            tool_name: "tickets.create".into(),
            tool_version: "2026-08-18".into(),
            request_fingerprint: "f".into(),
            status,
            effect_reference: None,
            response_json: None,
            owner_token: None,
            lease_until_ms: 0,
            job_id: None,
            downstream_key: None,
            reason: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            expires_at_ms,
            request_json: None,
        };
        let check = |status, now_ms, expected| {
            assert_eq!(reference_retention(&record(status, 100), now_ms), expected, "{status:?} at {now_ms}");
        };
        check(RecordStatus::Applied, 99, RetentionVerdict::Keep);
        check(RecordStatus::Applied, 100, RetentionVerdict::Tombstone);
        check(RecordStatus::FailedPermanent, 500, RetentionVerdict::Tombstone);
        check(RecordStatus::Pending, 500, RetentionVerdict::Keep);
        check(RecordStatus::Unknown, 500, RetentionVerdict::Keep);
        check(RecordStatus::Tombstone, 500, RetentionVerdict::Keep);
    }

    #[test]
    fn authorization_is_asked_before_the_claim_and_before_the_effect() {
        assert!(reference_authorize_at(AuthPoint::BeforeClaim));
        assert!(reference_authorize_at(AuthPoint::BeforeEffect));
        assert!(!reference_authorize_at(AuthPoint::AfterClaim { new_claim: true }));
    }
}
