//! The mutant zoo: thirty-seven executors, each the reference with exactly one defect (M01..M18
//! are MATRIX.md's classic ones, M19..M22 the project's own, each caught only by the scenario
//! that was added for it (M21 also by S32, which plays S22's lost answer for a charge), M23, which only the liveness oracle O13 sees, M24 and M25, which only O8's
//! rules for refusals and results see, M26, which only O10's count of completion notices sees, M27, which only S24's cross-version replay sees, M28, which only O13's hand-over rule sees, M29, which only S26's crash between a job's settlement and its notice sees, M30, which only S27's late answer sees, M31, which only S28's polls of abandoned claims see, M32, which only S29's unconfirmed notice sees, M33, which only S30's failing lookups see, M34, which only S31's retry before the consumer sees, M35, which only S32's crash where keys are honoured and nothing else can tell sees, M36, which only S33's retry where the provider has no key and no receipts sees, and M37, which only S34's redelivered message where the provider has none sees), plugged in through the same public [`protocol::ExecutorFactory`]
//! interface as any user's executor.
//!
//! Every defect is code doing the wrong thing (a read then an insert with a store call in
//! between, a claim table in the worker's private memory, a resend after a timeout without a
//! key, ...), never a flag that tells the harness to fail: a mutant is killed only when a
//! scenario makes its defect produce a wrong outcome or a second effect on the downstream's
//! ledger. Thirty-six of them replace one decision of [`Strategies`] (two fields for
//! `blind_retry` and `process_minted_key`, whose single defects need both; see there); `in_memory_claims` keeps every
//! decision and moves the claim store into the worker's private memory.
//!
//! ```
//! let zoo = executor::mutants::all();
//! assert_eq!(zoo.len(), 37);
//! let blind_retry = executor::mutants::find("blind_retry").expect("in the zoo");
//! assert_eq!((blind_retry.id, blind_retry.caught_by), ("M05", &["S02"][..]));
//! // The harness makes one factory per run (scenario and seed).
//! let factory = (blind_retry.factory)()?;
//! # let _ = factory;
//! # Ok::<(), executor::StoreError>(())
//! ```

use std::rc::Rc;

use protocol::{
    ContractError, ExecutorFactory, Fingerprint, LocalBoxFuture, ToolCall, ToolContract, WorkerEnv,
};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::machine::{ReferenceConfig, ReferenceFactory};
use crate::store::{Claimed, GatedStore, NewClaim, OperationRecord, StoreError, StoreLocation};
use crate::strategy::{
    reference_operation_key, AmbiguityVerdict, AuthPoint, CrossVersionReplay, FindingAbout, JobRetry,
    JobSettlementPlan, KeyInput, MismatchVerdict, RecoveryPlan, RetentionVerdict, StoredCompletion,
    Strategies,
};

/// Makes the executor factory of one run (its store comes empty from the thread's warm pool).
pub type MutantFactoryFn = fn() -> Result<Box<dyn ExecutorFactory + Send + Sync>, StoreError>;

/// One mutant of the zoo.
#[derive(Debug, Clone, Copy)]
pub struct Mutant {
    /// MATRIX.md's id, `M01`..`M18`.
    pub id: &'static str,
    /// MATRIX.md's name; the harness calls it `mutant:<name>`.
    pub name: &'static str,
    /// The defect, in one line.
    pub defect: &'static str,
    /// The scenarios MATRIX.md says must catch it (at least).
    pub caught_by: &'static [&'static str],
    /// Makes the decisions its executors make. For `in_memory_claims` these are the
    /// reference's: its defect is where the claims live, not a decision.
    pub strategies: fn() -> Strategies,
    /// Makes its factory for one run.
    pub factory: MutantFactoryFn,
}

/// The zoo, `M01` to `M18` in MATRIX.md's order.
pub fn all() -> Vec<Mutant> {
    vec![
        Mutant {
            id: "M01",
            name: "args_hash_as_key",
            defect: "the operation key is a hash of the arguments, so a deliberate second action is a duplicate",
            caught_by: &["S07"],
            strategies: args_hash_as_key_strategies,
            factory: || boxed(args_hash_as_key()),
        },
        Mutant {
            id: "M02",
            name: "in_memory_claims",
            defect: "claims live in the worker's private memory: a crash empties them, other workers never see them",
            caught_by: &["S03", "S04", "S05"],
            strategies: Strategies::reference,
            factory: || boxed(in_memory_claims()),
        },
        Mutant {
            id: "M03",
            name: "read_then_insert",
            defect: "the claim is a read followed by a separate insert whose answer is not checked",
            caught_by: &["S05"],
            strategies: read_then_insert_strategies,
            factory: || boxed(read_then_insert()),
        },
        Mutant {
            id: "M04",
            name: "no_fingerprint",
            defect: "the key is trusted without comparing the request: a changed request replays the old result",
            caught_by: &["S06"],
            strategies: no_fingerprint_strategies,
            factory: || boxed(no_fingerprint()),
        },
        Mutant {
            id: "M05",
            name: "blind_retry",
            defect: "resends the downstream call after a timeout or other ambiguous answer, without a downstream key",
            caught_by: &["S02"],
            strategies: blind_retry_strategies,
            factory: || boxed(blind_retry()),
        },
        Mutant {
            id: "M06",
            name: "timeout_is_success",
            defect: "reports applied after a timeout or other ambiguous answer, without a receipt",
            caught_by: &["S02", "S12"],
            strategies: timeout_is_success_strategies,
            factory: || boxed(timeout_is_success()),
        },
        Mutant {
            id: "M07",
            name: "no_auth_recheck",
            defect: "trusts the first authorization decision: an existing key skips authorization",
            caught_by: &["S08"],
            strategies: no_auth_recheck_strategies,
            factory: || boxed(no_auth_recheck()),
        },
        Mutant {
            id: "M08",
            name: "short_ttl_delete",
            defect: "deletes records when their retention runs out and treats a late duplicate as new",
            caught_by: &["S09"],
            strategies: short_ttl_delete_strategies,
            factory: || boxed(short_ttl_delete()),
        },
        Mutant {
            id: "M09",
            name: "pending_means_nothing",
            defect: "after a lease expires, re-executes without asking the downstream for a receipt",
            caught_by: &["S04", "S19"],
            strategies: pending_means_nothing_strategies,
            factory: || boxed(pending_means_nothing()),
        },
        Mutant {
            id: "M10",
            name: "call_id_as_key",
            defect: "uses the model's tool-call id as the operation key",
            caught_by: &["S02", "S03"],
            strategies: call_id_as_key_strategies,
            factory: || boxed(call_id_as_key()),
        },
        Mutant {
            id: "M11",
            name: "boolean_success",
            defect: "stores only that the call succeeded, not the effect reference or result",
            caught_by: &["S01"],
            strategies: boolean_success_strategies,
            factory: || boxed(boolean_success()),
        },
        Mutant {
            id: "M12",
            name: "resubmit_job",
            defect: "resubmits a delayed job that is still running when the call is retried",
            caught_by: &["S10"],
            strategies: resubmit_job_strategies,
            factory: || boxed(resubmit_job()),
        },
        Mutant {
            id: "M13",
            name: "raw_json_fingerprint",
            defect: "fingerprints the raw JSON text, so key order, whitespace and ignored fields count",
            caught_by: &["S14"],
            strategies: raw_json_fingerprint_strategies,
            factory: || boxed(raw_json_fingerprint()),
        },
        Mutant {
            id: "M14",
            name: "newest_payload_wins",
            defect: "on a fingerprint mismatch, replaces the stored operation and applies the newer payload",
            caught_by: &["S06"],
            strategies: newest_payload_wins_strategies,
            factory: || boxed(newest_payload_wins()),
        },
        Mutant {
            id: "M15",
            name: "no_tenant_scope",
            defect: "keys and stores every operation under one tenant: the same key string under two tenants collides",
            caught_by: &["S13"],
            strategies: no_tenant_scope_strategies,
            factory: || boxed(no_tenant_scope()),
        },
        Mutant {
            id: "M16",
            name: "stale_overwrite",
            defect: "sends absolute updates without their version precondition (no If-Match)",
            caught_by: &["S18"],
            strategies: stale_overwrite_strategies,
            factory: || boxed(stale_overwrite()),
        },
        Mutant {
            id: "M17",
            name: "webhook_no_dedupe",
            defect: "processes every webhook delivery: no event-id check, and every delivery settles the job and sends the notice",
            caught_by: &["S17"],
            strategies: webhook_no_dedupe_strategies,
            factory: || boxed(webhook_no_dedupe()),
        },
        Mutant {
            id: "M18",
            name: "consumer_no_claim",
            defect: "the queue consumer acts on every delivery before it claims the operation",
            caught_by: &["S16"],
            strategies: consumer_no_claim_strategies,
            factory: || boxed(consumer_no_claim()),
        },
        Mutant {
            id: "M19",
            name: "optional_fields_unfingerprinted",
            defect: "leaves the fields that have a default out of the fingerprint: a changed currency or queue borrows the old key",
            caught_by: &["S20"],
            strategies: optional_fields_unfingerprinted_strategies,
            factory: || boxed(optional_fields_unfingerprinted()),
        },
        Mutant {
            id: "M20",
            name: "replay_before_auth",
            defect: "serves a stored result before it asks the authorizer: a revoked actor still gets its replays",
            caught_by: &["S21"],
            strategies: replay_before_auth_strategies,
            factory: || boxed(replay_before_auth()),
        },
        Mutant {
            id: "M21",
            name: "fresh_key_resend",
            defect: "when recovery resends a request, it sends it under a new downstream key",
            // S32 plays S22's lost answer for a charge.
            caught_by: &["S22", "S32"],
            strategies: fresh_key_resend_strategies,
            factory: || boxed(fresh_key_resend()),
        },
        Mutant {
            id: "M22",
            name: "impatient_job_poll",
            defect: "gives up on a delayed job that is still running after a few seconds and fails the operation",
            caught_by: &["S23"],
            strategies: impatient_job_poll_strategies,
            factory: || boxed(impatient_job_poll()),
        },
        Mutant {
            id: "M23",
            name: "recovery_never_resends",
            defect: "recovery looks for a receipt but never resends, not even under a key the downstream honours: \
                     what was never sent stays unknown for good",
            caught_by: &["S04", "S12"],
            strategies: recovery_never_resends_strategies,
            factory: || boxed(recovery_never_resends()),
        },
        Mutant {
            id: "M24",
            name: "refusal_reason_forgotten",
            defect: "stores a permanent refusal without its reason: a retry or poll replays it as a generic downstream refusal",
            caught_by: &["S18"],
            strategies: refusal_reason_forgotten_strategies,
            factory: || boxed(refusal_reason_forgotten()),
        },
        Mutant {
            id: "M25",
            name: "result_not_kept",
            defect: "keeps the effect reference but not the business result: a replay answers with an empty result",
            caught_by: &["S03"],
            strategies: result_not_kept_strategies,
            factory: || boxed(result_not_kept()),
        },
        Mutant {
            id: "M26",
            name: "notice_from_the_loser",
            defect: "sends a job's completion notice from the settlement that found the job settled already, \
                     not from the one that settled it: a job settled once is never announced",
            caught_by: &["S10"],
            strategies: notice_from_the_loser_strategies,
            factory: || boxed(notice_from_the_loser()),
        },
        Mutant {
            id: "M27",
            name: "version_replay_any_request",
            defect: "where a contract lets a newer tool version replay an older record, replays it for any request \
                     under the key, a changed amount included",
            caught_by: &["S24"],
            strategies: version_replay_any_request_strategies,
            factory: || boxed(version_replay_any_request()),
        },
        Mutant {
            id: "M28",
            name: "unknown_kept_quiet",
            defect: "leaves an operation it has no way to settle unknown in its own table, and tells no one",
            caught_by: &["S25"],
            strategies: unknown_kept_quiet_strategies,
            factory: || boxed(unknown_kept_quiet()),
        },
        Mutant {
            id: "M29",
            name: "notice_not_owed",
            defect: "sends a settled job's completion notice without recording it as owed: a crash between the \
                     settlement and the notice loses the notice for good",
            caught_by: &["S26"],
            strategies: notice_not_owed_strategies,
            factory: || boxed(notice_not_owed()),
        },
        Mutant {
            id: "M30",
            name: "late_receipt_dropped",
            defect: "drops a receipt that reaches a worker after its claim was taken over and the record left \
                     unknown: the only evidence, where the downstream offers no lookup and no honoured key",
            caught_by: &["S27"],
            strategies: late_receipt_dropped_strategies,
            factory: || boxed(late_receipt_dropped()),
        },
        Mutant {
            id: "M31",
            name: "abandoned_claim_in_flight",
            defect: "answers a status poll of a claim whose owner's lease ran out in_flight, as if the owner were \
                     still at work: the agent waits for a worker that is gone",
            caught_by: &["S28"],
            strategies: abandoned_claim_in_flight_strategies,
            factory: || boxed(abandoned_claim_in_flight()),
        },
        Mutant {
            id: "M32",
            name: "unconfirmed_notice_forgotten",
            defect: "keeps a completion notice the message service did not confirm in its own table: nobody \
                     sends it, nobody is told",
            caught_by: &["S29"],
            strategies: unconfirmed_notice_forgotten_strategies,
            factory: || boxed(unconfirmed_notice_forgotten()),
        },
        Mutant {
            id: "M33",
            name: "reconcile_gives_up_quietly",
            defect: "when every one of its own reconciliation tries failed, leaves the operation unknown in its \
                     own table and tells no one",
            caught_by: &["S30"],
            strategies: reconcile_gives_up_quietly_strategies,
            factory: || boxed(reconcile_gives_up_quietly()),
        },
        Mutant {
            id: "M34",
            name: "queued_taken_over",
            defect: "takes a queued operation that no consumer has picked up yet for an abandoned claim: a retry or \
                     a reconcile takes it over, and where it cannot resend, it is never sent",
            caught_by: &["S31"],
            strategies: queued_taken_over_strategies,
            factory: || boxed(queued_taken_over()),
        },
        Mutant {
            id: "M35",
            name: "process_minted_key",
            defect: "mints the downstream key per process (as an SDK's generated key): a resend after the process \
                     that sent the first request died carries another key",
            caught_by: &["S32"],
            // A process serving the mutant (`executor serve --mutant`) is one worker start:
            // its minted part is its process id.
            strategies: || process_minted_key_strategies(u64::from(std::process::id())),
            factory: || boxed(process_minted_key()),
        },
        Mutant {
            id: "M36",
            name: "unknown_run_again",
            defect: "a retry that finds an operation unknown, where no receipt and no honoured key can tell what \
                     happened, runs the request again",
            caught_by: &["S33"],
            strategies: unknown_run_again_strategies,
            factory: || boxed(unknown_run_again()),
        },
        Mutant {
            id: "M37",
            name: "redelivery_sends_again",
            defect: "a queue consumer that gets an envelope again after the consumer before it vanished sends the \
                     message again, where no receipt and no honoured key can tell whether it went out",
            caught_by: &["S34"],
            strategies: redelivery_sends_again_strategies,
            factory: || boxed(redelivery_sends_again()),
        },
    ]
}

/// The decisions of the mutant below: the reference's, but redelivered_resend.
fn redelivery_sends_again_strategies() -> Strategies {
    Strategies { redelivered_resend: Rc::new(|_| true), ..Strategies::reference() }
}

/// M37 redelivery_sends_again — the project's own (a message provider with no idempotency key
/// and no receipt lookup, Slack's way, behind a queue); caught by S34.
///
/// Difference from the reference: `redelivered_resend` (an envelope the queue delivers again
/// for a claim whose consumer's lease ran out is sent again, where nothing can tell whether the
/// first consumer sent it).
///
/// Plausible because a queue's redelivery reads as "the last consumer failed": at-least-once
/// delivery is there to be retried, and a consumer that died mid-send looks like one that never
/// sent. Where it died after the provider posted the message, the customer gets it twice. With
/// a receipt lookup (S16, S31) the recovery asks first and hides the defect.
pub fn redelivery_sends_again() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(redelivery_sends_again_strategies)
}

/// The decisions of the mutant below: the reference's, but rerun_unknown.
fn unknown_run_again_strategies() -> Strategies {
    Strategies { rerun_unknown: Rc::new(|_| true), ..Strategies::reference() }
}

/// M36 unknown_run_again — the project's own (a provider with no idempotency key and no receipt
/// lookup, GitHub's and Slack's way); caught by S33.
///
/// Difference from the reference: `rerun_unknown` (a retry of an `unknown` operation that the
/// executor cannot find out runs the request again, under the same claim).
///
/// Plausible because the agent asked again, the record says only that nobody knows, and there
/// is nothing to ask: running it looks like the only way forward, and it is what most wrappers
/// do with an error they cannot read. Where the first request made the effect (a lost answer
/// after the commit), the provider makes a second. With a receipt lookup (S02, S03) or an
/// honoured key (S22, S32) recovery asks or resends safely first and hides the defect; an
/// operation abandoned while pending (S27) is recovered, not rerun.
pub fn unknown_run_again() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(unknown_run_again_strategies)
}

/// The decisions of the mutant below, for one worker start whose minted part is `minted`:
/// the reference's, but downstream_key and recovery.
fn process_minted_key_strategies(minted: u64) -> Strategies {
    let minted = format!("{:08x}", minted as u32);
    Strategies {
        downstream_key: Rc::new(move |contract, key| {
            crate::strategy::reference_downstream_key(contract, key).map(|key| format!("{key}:{minted}"))
        }),
        recovery: Rc::new(|contract| RecoveryPlan {
            rederive_key_on_resend: true,
            ..crate::strategy::reference_recovery(contract)
        }),
        ..Strategies::reference()
    }
}

/// M35 process_minted_key — the project's own (a crash after a commit where the downstream
/// honours keys and has no receipt lookup: Stripe's way); caught by S32.
///
/// Difference from the reference: `downstream_key` appends a part drawn once per worker start,
/// and `recovery` sends a resend under the key this worker derives (its client stamps its own
/// key on every request) instead of the one the record kept.
///
/// Plausible because it is what a vendor SDK does for you: the official Stripe clients mint an
/// idempotency key per request and keep it in memory across their own retries, so a lost
/// answer retried inside one process is safe. The key dies with the process: a restarted
/// worker's resend is a new key, and the provider charges again. A receipt lookup by the
/// recorded key (S03, S04) finds the first effect before any resend and hides the defect.
pub fn process_minted_key() -> Result<ReferenceFactory, StoreError> {
    ReferenceFactory::recycled(ReferenceConfig::default(), |env: &WorkerEnv| {
        process_minted_key_strategies(env.entropy.next_u64())
    })
}

/// The mutant called `name` (`blind_retry`, without the harness's `mutant:` prefix).
pub fn find(name: &str) -> Option<Mutant> {
    all().into_iter().find(|mutant| mutant.name == name)
}

fn boxed(
    factory: Result<ReferenceFactory, StoreError>,
) -> Result<Box<dyn ExecutorFactory + Send + Sync>, StoreError> {
    Ok(Box::new(factory?))
}

/// A factory over an empty shared-memory store from the thread's warm pool, like the
/// reference's in the harness ([`ReferenceFactory::recycled`]).
fn on_shared_store(strategies: fn() -> Strategies) -> Result<ReferenceFactory, StoreError> {
    ReferenceFactory::recycled(ReferenceConfig::default(), move |_: &WorkerEnv| strategies())
}

// ------------------------------------------------------------------ the mutants

/// The decisions of the mutant below: the reference's, but operation_key.
fn args_hash_as_key_strategies() -> Strategies {
    Strategies { operation_key: Rc::new(args_hash_key), ..Strategies::reference() }
}

/// M01 args_hash_as_key — MATRIX.md: "the key is a hash of the arguments"; must be caught by
/// S07.
///
/// Difference from the reference: `operation_key: args_hash_key` (the tenant and a SHA-256
/// of the canonical arguments instead of tenant, environment, workflow id and step id).
///
/// Plausible because "the same request is the same action" sounds like idempotency, needs no
/// workflow context, and survives every retry and every new tool-call id. But a user who
/// deliberately asks for a second identical ticket (a new step) gets the first one replayed.
pub fn args_hash_as_key() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(args_hash_as_key_strategies)
}

/// M02 in_memory_claims — MATRIX.md: "claims live in process memory"; must be caught by S03,
/// S04 and S05 (workers on different hosts).
///
/// Difference from the reference: the store is [`StoreLocation::PrivateMemory`] instead of a
/// shared database, so each worker incarnation opens its own empty claim table.
///
/// Plausible because an in-process map of claimed keys is the first thing anyone writes,
/// passes every single-process test, and is fast. But a crash empties it (the restarted
/// worker claims the operation again and repeats the effect) and two workers on two hosts
/// never see each other's claims.
pub fn in_memory_claims() -> Result<ReferenceFactory, StoreError> {
    ReferenceFactory::with_strategies(
        StoreLocation::PrivateMemory,
        ReferenceConfig::default(),
        |_: &WorkerEnv| Strategies::reference(),
    )
}

/// The decisions of the mutant below: the reference's, but claim.
fn read_then_insert_strategies() -> Strategies {
    Strategies { claim: Rc::new(read_then_insert_claim), ..Strategies::reference() }
}

/// M03 read_then_insert — MATRIX.md: "claim is a read followed by a separate insert"; must be
/// caught by S05.
///
/// Difference from the reference: `claim: read_then_insert_claim` (load; if nothing is there,
/// insert and take ownership without checking what the insert said).
///
/// Plausible because "if not exists then insert" reads like a claim and is what most ORMs
/// make easy. But the two statements are two store calls: another worker can read "nothing"
/// in between, and both go on to carry the effect out.
pub fn read_then_insert() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(read_then_insert_strategies)
}

/// The decisions of the mutant below: the reference's, but fingerprint.
fn no_fingerprint_strategies() -> Strategies {
    Strategies { fingerprint: Rc::new(arguments_blind_fingerprint), ..Strategies::reference() }
}

/// M04 no_fingerprint — MATRIX.md: "the key is trusted without comparing the request"; must
/// be caught by S06.
///
/// Difference from the reference: `fingerprint: arguments_blind_fingerprint` (the material
/// request without its arguments: tool, version and tenant only), so the stored and the
/// incoming fingerprints of one operation never differ.
///
/// Plausible because the key already names the operation, so comparing the request looks
/// redundant. But a changed amount under the same key is then answered with the old
/// charge's replay, and the caller believes the new amount was charged.
pub fn no_fingerprint() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(no_fingerprint_strategies)
}

/// The decisions of the mutant below: the reference's, but ambiguity, downstream_key.
fn blind_retry_strategies() -> Strategies {
    Strategies {
        ambiguity: Rc::new(resend_when_ambiguous),
        downstream_key: Rc::new(no_downstream_key),
        ..Strategies::reference()
    }
}

/// M05 blind_retry — MATRIX.md: "retries the downstream call after a timeout, without a
/// downstream key"; must be caught by S02.
///
/// Difference from the reference: `ambiguity: resend_when_ambiguous` (up to
/// [`BLIND_RETRY_REQUESTS`] requests in all) with `downstream_key: no_downstream_key`. One
/// defect in two fields: a resend under a key the downstream honours is exactly what the
/// reference's recovery may do (the downstream replays instead of acting again), so the
/// retry is *blind* only because it carries no key.
///
/// Plausible because retrying a timeout is what every HTTP client library offers, and a
/// request without an `Idempotency-Key` is what a tool call becomes when nobody thought of
/// one. But the first request may have committed before its answer was lost.
pub fn blind_retry() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(blind_retry_strategies)
}

/// The decisions of the mutant below: the reference's, but ambiguity.
fn timeout_is_success_strategies() -> Strategies {
    Strategies { ambiguity: Rc::new(ambiguous_is_applied), ..Strategies::reference() }
}

/// M06 timeout_is_success — MATRIX.md: "reports `applied` after a timeout"; must be caught by
/// S02 and S12.
///
/// Difference from the reference: `ambiguity: ambiguous_is_applied` (a timeout, a closed
/// connection, a 5xx or a garbled body completes the record as `applied`, without a
/// reference).
///
/// Plausible because most timeouts happen after the downstream did the work, and "no error"
/// is easy to read as success. But a request swallowed before it committed is then reported
/// done, and even a committed one is reported without any receipt.
pub fn timeout_is_success() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(timeout_is_success_strategies)
}

/// The decisions of the mutant below: the reference's, but authorize_at.
fn no_auth_recheck_strategies() -> Strategies {
    Strategies { authorize_at: Rc::new(authorize_new_keys_only), ..Strategies::reference() }
}

/// M07 no_auth_recheck — MATRIX.md: "trusts the first authorization decision"; must be
/// caught by S08.
///
/// Difference from the reference: `authorize_at: authorize_new_keys_only` (ask once, right
/// after the claim that created the record; never before the claim, never before an effect).
///
/// Plausible because authorizing the operation when it is created looks sufficient and
/// saves a round trip on every retry. But a permission revoked between the first attempt
/// and the retry is then never seen: the existing key is a bypass.
pub fn no_auth_recheck() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(no_auth_recheck_strategies)
}

/// The decisions of the mutant below: the reference's, but retention.
fn short_ttl_delete_strategies() -> Strategies {
    Strategies { retention: Rc::new(forget_after_retention), ..Strategies::reference() }
}

/// M08 short_ttl_delete — MATRIX.md: "deletes records on a short timer and treats a late
/// duplicate as new"; must be caught by S09.
///
/// Difference from the reference: `retention: forget_after_retention` (a terminal record past
/// its retention is deleted, [`RetentionVerdict::Forget`], instead of becoming a tombstone).
/// The timer is the retention window itself: whatever its length, the key that arrives after
/// it finds nothing and is claimed afresh.
///
/// Plausible because a TTL index that deletes old rows is how key tables are usually kept
/// small. But a duplicate that arrives late (a resumed workflow, a redelivered message) then
/// becomes a new effect.
pub fn short_ttl_delete() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(short_ttl_delete_strategies)
}

/// The decisions of the mutant below: the reference's, but recovery.
fn pending_means_nothing_strategies() -> Strategies {
    Strategies { recovery: Rc::new(re_execute_without_lookup), ..Strategies::reference() }
}

/// M09 pending_means_nothing — MATRIX.md: "after a lease expires, re-executes without asking
/// the downstream"; must be caught by S04 and S19.
///
/// Difference from the reference: `recovery: re_execute_without_lookup` (no receipt lookup;
/// always send again with the same key, whether the downstream honours it or not).
///
/// Plausible because "the owner's lease ran out, so it died before doing anything" is the
/// optimistic reading of a `pending` record. But the owner may have died (or be slow) after
/// the downstream committed, and a downstream that ignores keys acts again.
pub fn pending_means_nothing() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(pending_means_nothing_strategies)
}

/// The decisions of the mutant below: the reference's, but operation_key.
fn call_id_as_key_strategies() -> Strategies {
    Strategies { operation_key: Rc::new(call_id_key), ..Strategies::reference() }
}

/// M10 call_id_as_key — MATRIX.md: "uses the model's tool-call id as the key"; must be caught
/// by S02 and S03.
///
/// Difference from the reference: `operation_key: call_id_key` (the tool-call id when the
/// call has one; polls and reconciliations, which have none, keep the workflow key and so
/// find nothing).
///
/// Plausible because the call id is right there on every call, unique and opaque, which is
/// what a key is supposed to be. But the model mints a new one on every turn, so a retry of
/// the same step is a new operation and the downstream's dedupe never sees the old key.
pub fn call_id_as_key() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(call_id_as_key_strategies)
}

/// The decisions of the mutant below: the reference's, but completion.
fn boolean_success_strategies() -> Strategies {
    Strategies { completion: Rc::new(success_flag_only), ..Strategies::reference() }
}

/// M11 boolean_success — MATRIX.md: "stores only "succeeded", not the effect reference"; must
/// be caught by S01 (O8/O2).
///
/// Difference from the reference: `completion: success_flag_only` (the record keeps
/// `{"succeeded": true}` and no effect reference).
///
/// Plausible because "was it done?" is the question a duplicate check asks, and a flag
/// answers it. But a replay must hand the agent the original effect (which ticket, which
/// charge), and a flag cannot.
pub fn boolean_success() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(boolean_success_strategies)
}

/// The decisions of the mutant below: the reference's, but job_retry.
fn resubmit_job_strategies() -> Strategies {
    Strategies { job_retry: Rc::new(resubmit_running_job), ..Strategies::reference() }
}

/// M12 resubmit_job — MATRIX.md: "resubmits a slow delayed job on retry"; must be caught by
/// S10.
///
/// Difference from the reference: `job_retry: resubmit_running_job` (a retry that finds the
/// operation's job accepted but unfinished submits it again).
///
/// Plausible because a job that has not finished looks stuck, and submitting again is the
/// obvious way to unstick it. But the first job is running, so the downstream now runs two.
pub fn resubmit_job() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(resubmit_job_strategies)
}

/// The decisions of the mutant below: the reference's, but fingerprint.
fn raw_json_fingerprint_strategies() -> Strategies {
    Strategies { fingerprint: Rc::new(raw_text_fingerprint), ..Strategies::reference() }
}

/// M13 raw_json_fingerprint — MATRIX.md: "hashes the raw JSON text"; must be caught by S14.
///
/// Difference from the reference: `fingerprint: raw_text_fingerprint` (SHA-256 over tool,
/// version, tenant and the arguments' text exactly as received, instead of the JCS form of
/// the material fields after defaults).
///
/// Plausible because hashing the body is one line and looks exact. But the same request
/// with its keys reordered, other whitespace, an omitted default or a new trace id is then
/// "a different request", and an honest retry is rejected.
pub fn raw_json_fingerprint() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(raw_json_fingerprint_strategies)
}

/// The decisions of the mutant below: the reference's, but mismatch.
fn newest_payload_wins_strategies() -> Strategies {
    Strategies { mismatch: Rc::new(apply_newest_payload), ..Strategies::reference() }
}

/// M14 newest_payload_wins — MATRIX.md: "on mismatch, applies the newer payload"; must be
/// caught by S06.
///
/// Difference from the reference: `mismatch: apply_newest_payload` (the stored operation is
/// deleted and the newer request claimed and carried out in its place).
///
/// Plausible because "the latest instruction wins" is how most update APIs behave, and the
/// model did change its mind. But the original effect already happened: the key now stands
/// for two effects.
pub fn newest_payload_wins() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(newest_payload_wins_strategies)
}

/// The decisions of the mutant below: the reference's, but tenant_scope.
fn no_tenant_scope_strategies() -> Strategies {
    Strategies { tenant_scope: Rc::new(one_tenant_scope), ..Strategies::reference() }
}

/// M15 no_tenant_scope — MATRIX.md: "the key is not scoped by tenant"; must be caught by S13.
///
/// Difference from the reference: `tenant_scope: one_tenant_scope` (every operation is keyed
/// and stored under the tenant [`SINGLE_TENANT`], so the key and the store's primary key no
/// longer carry the caller's tenant; the downstream request still does).
///
/// Plausible because workflow and step ids look globally unique, and the code was written
/// for one customer first. But two tenants reuse the same workflow and step ids: the second
/// finds the first one's operation (its request differs only by tenant, so it is refused as
/// a changed request, and a poll replays the other tenant's effect reference).
pub fn no_tenant_scope() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(no_tenant_scope_strategies)
}

/// The decisions of the mutant below: the reference's, but version_precondition.
fn stale_overwrite_strategies() -> Strategies {
    Strategies { version_precondition: Rc::new(no_version_precondition), ..Strategies::reference() }
}

/// M16 stale_overwrite — MATRIX.md: "absolute update without a version precondition"; must be
/// caught by S18.
///
/// Difference from the reference: `version_precondition: no_version_precondition` (the
/// `If-Match` header with the version the caller read is not sent).
///
/// Plausible because setting a status is naturally idempotent (closing a closed ticket
/// changes nothing), so the duplicate looks harmless without any check. But an update based
/// on an old read then overwrites a newer human change.
pub fn stale_overwrite() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(stale_overwrite_strategies)
}

/// The decisions of the mutant below: the reference's, but job_settlement.
fn webhook_no_dedupe_strategies() -> Strategies {
    Strategies { job_settlement: Rc::new(settle_every_delivery), ..Strategies::reference() }
}

/// M17 webhook_no_dedupe — MATRIX.md: "processes every webhook delivery"; must be caught by
/// S17.
///
/// Difference from the reference: `job_settlement: settle_every_delivery` (event ids are not
/// recorded, and settling a job is a plain write, so every delivery "makes" the transition
/// and sends the completion notice).
///
/// Plausible because a completion event looks like a fact that can be applied any number of
/// times ("mark the job done"). But the side effects of the transition (the notice to
/// operations) are not, and providers deliver webhooks at least once, sometimes under new
/// event ids.
pub fn webhook_no_dedupe() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(webhook_no_dedupe_strategies)
}

/// The decisions of the mutant below: the reference's, but consumer_claim.
fn consumer_no_claim_strategies() -> Strategies {
    Strategies { consumer_claim: Rc::new(act_before_claiming), ..Strategies::reference() }
}

/// M18 consumer_no_claim — MATRIX.md: "the queue consumer acts without claiming the
/// operation"; must be caught by S16.
///
/// Difference from the reference: `consumer_claim: act_before_claiming` (the consumer sends
/// at once and only afterwards looks the operation up and settles it).
///
/// Plausible because the caller already claimed the operation before it enqueued the
/// envelope, so the consumer seems to hold it by construction. But queues deliver at least
/// once: every redelivery sends the message again.
pub fn consumer_no_claim() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(consumer_no_claim_strategies)
}

/// The decisions of the mutant below: the reference's, but fingerprint.
fn optional_fields_unfingerprinted_strategies() -> Strategies {
    Strategies { fingerprint: Rc::new(required_fields_fingerprint), ..Strategies::reference() }
}

/// M19 optional_fields_unfingerprinted — the project's own (a changed request that differs in
/// one material field only); caught by S20.
///
/// Difference from the reference: `fingerprint: required_fields_fingerprint` (the material
/// fields that have a default in the contract, such as `currency` or `queue`, are left out).
///
/// Plausible because the fields a caller must send feel like "the request", and an optional
/// field that is usually left at its default looks like decoration. But a retry that changes
/// only the currency (or the queue) is then a replay of the old charge (or ticket), and the
/// caller believes the new one was made.
pub fn optional_fields_unfingerprinted() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(optional_fields_unfingerprinted_strategies)
}

/// The decisions of the mutant below: the reference's, but authorize_at.
fn replay_before_auth_strategies() -> Strategies {
    Strategies { authorize_at: Rc::new(authorize_effects_and_recovery_only), ..Strategies::reference() }
}

/// M20 replay_before_auth — the project's own (revocation after an operation was applied);
/// caught by S21.
///
/// Difference from the reference: `authorize_at: authorize_effects_and_recovery_only` (asked
/// for new claims, before effects and before recovering an abandoned or unknown operation,
/// but not before the claim-or-load, so a call that finds its operation applied is answered
/// from the store before any check).
///
/// Plausible because authorization guards effects, and a replay makes none: serving the
/// stored result first looks free. But a replay hands the caller the effect and its result,
/// and a permission revoked after the effect is then no obstacle.
pub fn replay_before_auth() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(replay_before_auth_strategies)
}

/// The decisions of the mutant below: the reference's, but recovery.
fn fresh_key_resend_strategies() -> Strategies {
    Strategies { recovery: Rc::new(resend_under_fresh_key), ..Strategies::reference() }
}

/// M21 fresh_key_resend — the project's own (a lost answer where keys are honoured and there is
/// no receipt lookup); caught by S22, and by S32, which plays the same lost answer for a charge.
///
/// Difference from the reference: `recovery: resend_under_fresh_key` (as the reference, but
/// when recovery resends, the request carries a new downstream key).
///
/// Plausible because a resend is a new HTTP request, and many clients mint a new request id
/// (and idempotency key) per request. With a receipt lookup the executor finds the first
/// effect before it resends, and the defect hides; without one, the downstream sees a new
/// key and acts again.
pub fn fresh_key_resend() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(fresh_key_resend_strategies)
}

/// The decisions of the mutant below: the reference's, but job_patience.
fn impatient_job_poll_strategies() -> Strategies {
    Strategies { job_patience: Rc::new(give_up_after_three_seconds), ..Strategies::reference() }
}

/// M22 impatient_job_poll — the project's own (a delayed job polled many times while still
/// running); caught by S23.
///
/// Difference from the reference: `job_patience: give_up_after_three_seconds` (a poll that
/// finds the job still running three seconds after it was accepted fails the operation).
///
/// Plausible because every client has a timeout, and a job that "takes too long" looks
/// failed. But the downstream accepted it and finishes it later: the effect happens, and the
/// executor has disowned it (`rejected`).
pub fn impatient_job_poll() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(impatient_job_poll_strategies)
}

/// The decisions of the mutant below: the reference's, but recovery.
fn recovery_never_resends_strategies() -> Strategies {
    Strategies { recovery: Rc::new(look_up_only), ..Strategies::reference() }
}

/// M23 recovery_never_resends — the project's own (recovery that must happen: issue 19's
/// liveness oracle O13); caught by S04 and S12.
///
/// Difference from the reference: `recovery: look_up_only` (a taken-over or unknown operation
/// is looked up, and when no receipt is found it stays `unknown`, even where the downstream
/// honours the key and a resend would be answered from the first request).
///
/// Plausible because never resending can never duplicate, and `unknown` is always an honest
/// answer. But a claim abandoned before its request left is then never carried out, though
/// nothing stood in the way: every safety oracle holds, and only liveness sees it.
pub fn recovery_never_resends() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(recovery_never_resends_strategies)
}

/// The decisions of the mutant below: the reference's, but refusal.
fn refusal_reason_forgotten_strategies() -> Strategies {
    Strategies { refusal: Rc::new(no_reason), ..Strategies::reference() }
}

/// M24 refusal_reason_forgotten — the project's own (a replayed rejection keeps its reason:
/// O8); caught by S18.
///
/// Difference from the reference: `refusal: no_reason` (the record of a refusal keeps no
/// reason, so a later answer falls back on `downstream_rejected`).
///
/// Plausible because `rejected` is what the caller acts on and the reason looks like
/// decoration. But the agent decides from it: a precondition failure asks it to read the
/// ticket again, a downstream refusal to give up.
pub fn refusal_reason_forgotten() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(refusal_reason_forgotten_strategies)
}

/// The decisions of the mutant below: the reference's, but completion.
fn result_not_kept_strategies() -> Strategies {
    Strategies { completion: Rc::new(reference_without_result), ..Strategies::reference() }
}

/// M25 result_not_kept — the project's own (results compared with what the downstream
/// committed: O8); caught by S03.
///
/// Difference from the reference: `completion: reference_without_result` (the record keeps
/// the effect reference and an empty result).
///
/// Plausible because the reference is the receipt, and the rest can be read again. But a
/// replay is the agent's only answer: after a crash between effect and record, nothing else
/// ever told it the amount, the status or the version.
pub fn result_not_kept() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(result_not_kept_strategies)
}

/// The decisions of the mutant below: the reference's, but job_settlement.
fn notice_from_the_loser_strategies() -> Strategies {
    Strategies { job_settlement: Rc::new(announce_on_loss), ..Strategies::reference() }
}

/// M26 notice_from_the_loser — the project's own (notices counted: O10); caught by S10.
///
/// Difference from the reference: `job_settlement: announce_on_loss` (the settlement's
/// compare-and-set is read the wrong way round for the notice: the caller whose write changed
/// nothing sends it).
///
/// Plausible because with a redelivered webhook there always is a second settlement, and one
/// notice goes out whichever sends it. But a job settled once, by a single poll, is never
/// announced: the count of notices, not their absence of duplicates, is the contract.
pub fn notice_from_the_loser() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(notice_from_the_loser_strategies)
}

/// The decisions of the mutant below: the reference's, but cross_version.
fn version_replay_any_request_strategies() -> Strategies {
    Strategies { cross_version: Rc::new(replay_any_request), ..Strategies::reference() }
}

/// M27 version_replay_any_request — the project's own (a contract with cross-version replay
/// on, exercised: O3); caught by S24.
///
/// Difference from the reference: `cross_version: replay_any_request` (a call under a newer
/// version replays the older record whenever the older contract allows replay across versions,
/// without reading the call by that contract).
///
/// Plausible because the fingerprint differs across versions anyway (it names the version), so
/// "the contract allows replay" looks like the whole question. But the flag says the new version
/// reads old requests the same way, not that every request under the key is the old one: a
/// changed amount is answered with the old charge, and the agent believes it paid 70 for 50.
pub fn version_replay_any_request() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(version_replay_any_request_strategies)
}

/// The decisions of the mutant below: the reference's, but file_findings.
fn unknown_kept_quiet_strategies() -> Strategies {
    Strategies { file_findings: Rc::new(keep_findings), ..Strategies::reference() }
}

/// M28 unknown_kept_quiet — the project's own (an `unknown` is handed over to people where
/// nothing else can settle it: O13); caught by S25.
///
/// Difference from the reference: `file_findings: keep_findings` (findings about operations go
/// to the store's own reconciliation table only, never to the operators' queue).
///
/// Plausible because the record says `unknown`, the table says why, and `unknown` is the
/// honest answer. But where the downstream offers no key and no receipt, nothing the executor
/// or the agent does will ever settle it: a possible double charge waits in a table nobody
/// reads.
pub fn unknown_kept_quiet() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(unknown_kept_quiet_strategies)
}

/// The decisions of the mutant below: the reference's, but job_settlement.
fn notice_not_owed_strategies() -> Strategies {
    Strategies { job_settlement: Rc::new(notice_unrecorded), ..Strategies::reference() }
}

/// M29 notice_not_owed — the project's own (a crash between a job's settlement and its
/// notice: O10); caught by S26.
///
/// Difference from the reference: `job_settlement: notice_unrecorded` (the settlement does not
/// record the notice as owed; the settling worker sends it straight after).
///
/// Plausible because the notice goes out a few milliseconds after the settlement, from the
/// same worker. But a crash in those milliseconds leaves the job settled, so no later
/// delivery or poll settles it again, and nothing remembers the notice.
pub fn notice_not_owed() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(notice_not_owed_strategies)
}

/// The decisions of the mutant below: the reference's, but late_receipt.
fn late_receipt_dropped_strategies() -> Strategies {
    Strategies { late_receipt: Rc::new(drop_late_receipt), ..Strategies::reference() }
}

/// M30 late_receipt_dropped — the project's own (a late answer is evidence: O13); caught by
/// S27.
///
/// Difference from the reference: `late_receipt: drop_late_receipt` (a receipt whose
/// compare-and-set finds the record `unknown` is not adopted; the worker answers what the
/// record says).
///
/// Plausible because the compare-and-set did its job: the worker lost its claim, and a worker
/// that lost its claim writes nothing. But the record was left `unknown` by a new owner that
/// could not find out, and where the downstream offers no lookup and no honoured key, this
/// answer is the only proof of the charge there will ever be: dropping it leaves a settled
/// charge to people.
pub fn late_receipt_dropped() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(late_receipt_dropped_strategies)
}

/// The decisions of the mutant below: the reference's, but owner_at_work.
fn abandoned_claim_in_flight_strategies() -> Strategies {
    Strategies { owner_at_work: Rc::new(any_owner_at_work), ..Strategies::reference() }
}

/// M31 abandoned_claim_in_flight — the project's own (an `in_flight` names a live owner: O6);
/// caught by S28.
///
/// Difference from the reference: `owner_at_work: any_owner_at_work` (a `pending` record with
/// an owner is described as in progress, whatever its lease).
///
/// Plausible because `pending` with an owner reads as "somebody has it", and checking the
/// lease looks like the retry's business, not a status answer's. But the owner may have died
/// holding the claim: the poll tells the agent to wait for a worker that will never finish,
/// where it should be told to reconcile.
pub fn abandoned_claim_in_flight() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(abandoned_claim_in_flight_strategies)
}

/// The decisions of the mutant below: the reference's, but file_findings.
fn unconfirmed_notice_forgotten_strategies() -> Strategies {
    Strategies { file_findings: Rc::new(keep_notice_findings), ..Strategies::reference() }
}

/// M32 unconfirmed_notice_forgotten — the project's own (a notice is in the ledger or handed
/// over: O10); caught by S29.
///
/// Difference from the reference: `file_findings: keep_notice_findings` (a finding about a
/// completion notice that may not have gone out stays in the executor's own table; findings
/// about operations are filed as the reference files them).
///
/// Plausible because a notification is "best effort" in most code, sent and forgotten, and
/// resending it blind could send it twice. But the job's contract names the notice as part of
/// the effect: a customer who is never told their report is ready is a lost effect, and only
/// people can settle it where the message service does not dedupe.
pub fn unconfirmed_notice_forgotten() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(unconfirmed_notice_forgotten_strategies)
}

/// The decisions of the mutant below: the reference's, but file_findings.
fn reconcile_gives_up_quietly_strategies() -> Strategies {
    Strategies { file_findings: Rc::new(keep_unreconciled_findings), ..Strategies::reference() }
}

/// M33 reconcile_gives_up_quietly — the project's own (an `unknown` nothing will settle is
/// handed over: O13); caught by S30.
///
/// Difference from the reference: `file_findings: keep_unreconciled_findings` (the finding
/// that every reconciliation try was inconclusive stays in the executor's own table).
///
/// Plausible because a bounded retry loop that stops after N failures is good practice, and
/// the failure is logged. But once it stops, nothing looks at the operation again: where the
/// lookup cannot prove a swallowed request will never commit and the provider ignores keys,
/// only people can settle it, and nobody told them.
pub fn reconcile_gives_up_quietly() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(reconcile_gives_up_quietly_strategies)
}

/// The decisions of the mutant below: the reference's, but queued.
fn queued_taken_over_strategies() -> Strategies {
    Strategies { queued: Rc::new(nothing_queued), ..Strategies::reference() }
}

/// M34 queued_taken_over — the project's own (waiting for the queue is not abandonment);
/// caught by S31.
///
/// Difference from the reference: `queued: nothing_queued` (a `pending` record with no owner
/// is read like one whose owner's lease ran out).
///
/// Plausible because "pending, and nobody holds a live lease" is exactly the test for an
/// abandoned claim, and a queued record passes it. But the consumer has not run yet: the retry
/// takes the operation from the queue, and where the provider ignores keys it cannot resend,
/// so it marks it `unknown`, and the consumer, finding it settled, never sends it.
pub fn queued_taken_over() -> Result<ReferenceFactory, StoreError> {
    on_shared_store(queued_taken_over_strategies)
}

// ------------------------------------------------------------------ the defective decisions

/// M34: no record is waiting for the queue.
pub fn nothing_queued(_record: &OperationRecord) -> bool {
    false
}

/// M33: findings of exhausted reconciliation stay in the executor's own table.
pub fn keep_unreconciled_findings(about: FindingAbout) -> bool {
    about != FindingAbout::Unreconciled
}

/// M32: findings about notices stay in the executor's own table.
pub fn keep_notice_findings(about: FindingAbout) -> bool {
    about != FindingAbout::CompletionNotice
}

/// M31: any owner is taken to be at work.
pub fn any_owner_at_work(record: &OperationRecord, _now_ms: u64) -> bool {
    record.owner_token.is_some()
}

/// M30: a late receipt is not adopted.
pub fn drop_late_receipt() -> bool {
    false
}

/// M29: the notice is sent, never owed.
pub fn notice_unrecorded() -> JobSettlementPlan {
    JobSettlementPlan { owe_notice: false, ..crate::strategy::reference_job_settlement() }
}

/// M28: findings stay in the executor's own table.
pub fn keep_findings(about: FindingAbout) -> bool {
    about != FindingAbout::Operation
}

/// M27: any request under the key replays an older version's record.
pub fn replay_any_request(_stored: &ToolContract) -> CrossVersionReplay {
    CrossVersionReplay::AnyRequest
}

/// M26: the settlement that lost sends the completion notice.
pub fn announce_on_loss() -> JobSettlementPlan {
    JobSettlementPlan { announce_on_win: false, ..crate::strategy::reference_job_settlement() }
}

/// M25: the reference is kept, the result is not.
pub fn reference_without_result(effect_reference: &str, _result: &Value) -> StoredCompletion {
    StoredCompletion { effect_reference: Some(effect_reference.to_owned()), response: json!({}) }
}

/// M24: no reason is kept with a refusal.
pub fn no_reason(_reason: protocol::ReasonCode) -> Option<protocol::ReasonCode> {
    None
}

/// M23: the reference's recovery without the resend.
pub fn look_up_only(contract: &ToolContract) -> RecoveryPlan {
    RecoveryPlan { resend_with_same_key: false, ..crate::strategy::reference_recovery(contract) }
}

/// M19: the fingerprint over the material fields that have no default.
pub fn required_fields_fingerprint(
    contract: &ToolContract,
    call: &ToolCall,
) -> Result<Fingerprint, ContractError> {
    let mut arguments = contract.validated_arguments(call)?;
    arguments.retain(|name, _| !contract.defaults.contains_key(name));
    Ok(Fingerprint::of(&contract.material_request(&call.tenant, &arguments)))
}

/// M20: ask for new claims, before effects and before recovery; never before the claim.
pub fn authorize_effects_and_recovery_only(point: AuthPoint) -> bool {
    match point {
        AuthPoint::AfterClaim { new_claim } => new_claim,
        AuthPoint::BeforeEffect | AuthPoint::BeforeRecovery => true,
        AuthPoint::BeforeClaim => false,
    }
}

/// M21: the reference's recovery, resending under a new key.
pub fn resend_under_fresh_key(contract: &ToolContract) -> RecoveryPlan {
    RecoveryPlan { fresh_key_on_resend: true, ..crate::strategy::reference_recovery(contract) }
}

/// M22: three seconds of patience for a delayed job.
pub fn give_up_after_three_seconds(_contract: &ToolContract) -> Option<std::time::Duration> {
    Some(std::time::Duration::from_secs(3))
}

/// How many requests [`resend_when_ambiguous`] sends in all for one effect: the usual
/// "three tries" of an HTTP client's retry policy.
pub const BLIND_RETRY_REQUESTS: u32 = 3;

/// The tenant every operation is stored under by [`one_tenant_scope`].
pub const SINGLE_TENANT: &str = "default";

/// M01: the tenant and a SHA-256 of the arguments' canonical form. Without arguments (polls,
/// reconciliations) it falls back to the workflow key.
pub fn args_hash_key(input: &KeyInput<'_>) -> String {
    match input.arguments {
        Some(arguments) => {
            let digest = Fingerprint::of(&Value::Object(arguments.clone())).digest;
            format!("{}:args:{digest}", input.tenant)
        }
        None => reference_operation_key(input),
    }
}

/// M03: read, and when nothing is there, insert and take ownership, ignoring whether the
/// insert found the key taken in the meantime.
pub fn read_then_insert_claim<'a>(
    store: GatedStore<'a>,
    claim: &'a NewClaim,
) -> LocalBoxFuture<'a, Result<Claimed, StoreError>> {
    Box::pin(async move {
        let seen =
            store.call("load", async |store| store.load(&claim.tenant, &claim.operation_key).await).await?;
        if let Some(record) = seen {
            return Ok(Claimed::Existing(record));
        }
        store.call("insert", async |store| store.claim(claim).await).await?;
        Ok(Claimed::New(claim.to_record()))
    })
}

/// M04: validates the arguments, then fingerprints tool, version and tenant only.
pub fn arguments_blind_fingerprint(
    contract: &ToolContract,
    call: &ToolCall,
) -> Result<Fingerprint, ContractError> {
    contract.validated_arguments(call)?;
    Ok(Fingerprint::of(&contract.material_request(&call.tenant, &Map::new())))
}

/// M05: resend an ambiguous answer's request until [`BLIND_RETRY_REQUESTS`] were sent.
pub fn resend_when_ambiguous(_contract: &ToolContract, requests_sent: u32) -> AmbiguityVerdict {
    if requests_sent < BLIND_RETRY_REQUESTS {
        AmbiguityVerdict::Resend
    } else {
        AmbiguityVerdict::Unknown
    }
}

/// M05: never send an `Idempotency-Key`.
pub fn no_downstream_key(_contract: &ToolContract, _operation_key: &str) -> Option<String> {
    None
}

/// M06: an ambiguous answer is success.
pub fn ambiguous_is_applied(_contract: &ToolContract, _requests_sent: u32) -> AmbiguityVerdict {
    AmbiguityVerdict::Applied
}

/// M07: authorize only right after a claim that created the record.
pub fn authorize_new_keys_only(point: AuthPoint) -> bool {
    matches!(point, AuthPoint::AfterClaim { new_claim: true })
}

/// M08: a terminal record past its retention is deleted.
pub fn forget_after_retention(record: &OperationRecord, now_ms: u64) -> RetentionVerdict {
    if record.status.is_terminal() && now_ms >= record.expires_at_ms {
        RetentionVerdict::Forget
    } else {
        RetentionVerdict::Keep
    }
}

/// M09: recovery never asks for a receipt and always sends again.
pub fn re_execute_without_lookup(_contract: &ToolContract) -> RecoveryPlan {
    RecoveryPlan {
        look_up_receipt: false,
        resend_with_same_key: true,
        fresh_key_on_resend: false,
        rederive_key_on_resend: false,
    }
}

/// M10: the model's tool-call id, when there is one.
pub fn call_id_key(input: &KeyInput<'_>) -> String {
    input.call_id.map_or_else(|| reference_operation_key(input), str::to_owned)
}

/// M11: a success flag, no reference.
pub fn success_flag_only(_effect_reference: &str, _result: &Value) -> StoredCompletion {
    StoredCompletion { effect_reference: None, response: json!({"succeeded": true}) }
}

/// M12: a running job is submitted again.
pub fn resubmit_running_job(_contract: &ToolContract) -> JobRetry {
    JobRetry::Resubmit
}

/// M13: SHA-256 over tool, version, tenant and the arguments' text as received.
pub fn raw_text_fingerprint(contract: &ToolContract, call: &ToolCall) -> Result<Fingerprint, ContractError> {
    contract.validated_arguments(call)?;
    let text = format!("{}\n{}\n{}\n{}", call.tool, call.tool_version, call.tenant, call.arguments.get());
    let digest = Sha256::digest(text.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(Fingerprint { algorithm: "sha256".into(), canonicalization: "raw-text".into(), digest })
}

/// M14: the newer payload replaces the stored operation.
pub fn apply_newest_payload(_contract: &ToolContract) -> MismatchVerdict {
    MismatchVerdict::ApplyNewest
}

/// M15: every tenant is [`SINGLE_TENANT`].
pub fn one_tenant_scope(_tenant: &str) -> &str {
    SINGLE_TENANT
}

/// M16: no `If-Match`.
pub fn no_version_precondition(_contract: &ToolContract) -> bool {
    false
}

/// M17: no event-id check, no compare-and-set.
pub fn settle_every_delivery() -> JobSettlementPlan {
    JobSettlementPlan {
        dedupe_event_ids: false,
        compare_and_set: false,
        announce_on_win: true,
        owe_notice: true,
    }
}

/// M18: the consumer acts first.
pub fn act_before_claiming(_contract: &ToolContract) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use protocol::ContractSet;
    use serde_json::value::RawValue;

    use super::*;
    use crate::store::RecordStatus;
    use crate::strategy::{
        reference_ambiguity, reference_authorize_at, reference_completion, reference_consumer_claim,
        reference_downstream_key, reference_fingerprint, reference_job_retry, reference_job_settlement,
        reference_mismatch, reference_recovery, reference_retention, reference_tenant_scope,
        reference_version_precondition,
    };

    fn contract(name: &str) -> ToolContract {
        ContractSet::builtin().iter().find(|contract| contract.name == name).unwrap().clone()
    }

    fn call(tenant: &str, call_id: &str, arguments: &str) -> ToolCall {
        ToolCall {
            tenant: tenant.into(),
            environment: "production".into(),
            workflow_id: "run_1".into(),
            step_id: "step_1".into(),
            tool: "tickets.create".into(),
            tool_version: "2026-08-18".into(),
            arguments: RawValue::from_string(arguments.into()).unwrap(),
            actor: "agent".into(),
            call_id: call_id.into(),
            trace_id: None,
            attempt: 0,
        }
    }

    /// MATRIX.md's zoo table (M01..M18), then the project's own (M19 onwards, each with the
    /// one scenario added for it): id, name, the scenarios that must catch it.
    const MATRIX_ZOO: [(&str, &str, &[&str]); 37] = [
        ("M01", "args_hash_as_key", &["S07"]),
        ("M02", "in_memory_claims", &["S03", "S04", "S05"]),
        ("M03", "read_then_insert", &["S05"]),
        ("M04", "no_fingerprint", &["S06"]),
        ("M05", "blind_retry", &["S02"]),
        ("M06", "timeout_is_success", &["S02", "S12"]),
        ("M07", "no_auth_recheck", &["S08"]),
        ("M08", "short_ttl_delete", &["S09"]),
        ("M09", "pending_means_nothing", &["S04", "S19"]),
        ("M10", "call_id_as_key", &["S02", "S03"]),
        ("M11", "boolean_success", &["S01"]),
        ("M12", "resubmit_job", &["S10"]),
        ("M13", "raw_json_fingerprint", &["S14"]),
        ("M14", "newest_payload_wins", &["S06"]),
        ("M15", "no_tenant_scope", &["S13"]),
        ("M16", "stale_overwrite", &["S18"]),
        ("M17", "webhook_no_dedupe", &["S17"]),
        ("M18", "consumer_no_claim", &["S16"]),
        ("M19", "optional_fields_unfingerprinted", &["S20"]),
        ("M20", "replay_before_auth", &["S21"]),
        ("M21", "fresh_key_resend", &["S22", "S32"]),
        ("M22", "impatient_job_poll", &["S23"]),
        ("M23", "recovery_never_resends", &["S04", "S12"]),
        ("M24", "refusal_reason_forgotten", &["S18"]),
        ("M25", "result_not_kept", &["S03"]),
        ("M26", "notice_from_the_loser", &["S10"]),
        ("M27", "version_replay_any_request", &["S24"]),
        ("M28", "unknown_kept_quiet", &["S25"]),
        ("M29", "notice_not_owed", &["S26"]),
        ("M30", "late_receipt_dropped", &["S27"]),
        ("M31", "abandoned_claim_in_flight", &["S28"]),
        ("M32", "unconfirmed_notice_forgotten", &["S29"]),
        ("M33", "reconcile_gives_up_quietly", &["S30"]),
        ("M34", "queued_taken_over", &["S31"]),
        ("M35", "process_minted_key", &["S32"]),
        ("M36", "unknown_run_again", &["S33"]),
        ("M37", "redelivery_sends_again", &["S34"]),
    ];

    #[test]
    fn the_zoo_is_matrix_md_in_order() {
        let zoo = all();
        let listed: Vec<_> = zoo.iter().map(|mutant| (mutant.id, mutant.name, mutant.caught_by)).collect();
        assert_eq!(listed, MATRIX_ZOO.to_vec());
        let names: BTreeSet<_> = zoo.iter().map(|mutant| mutant.name).collect();
        assert_eq!(names.len(), zoo.len(), "names are unique");
        assert!(zoo.iter().all(|mutant| !mutant.defect.is_empty()));
        assert_eq!(find("blind_retry").map(|mutant| mutant.id), Some("M05"));
        assert!(find("mutant:blind_retry").is_none(), "the prefix is the harness's");
        assert!(find("reference").is_none());
    }

    #[test]
    fn every_factory_opens_and_can_be_shared_across_threads() {
        fn shareable<T: Send + Sync + ?Sized>(_: &T) {}
        for mutant in all() {
            let factory = (mutant.factory)().unwrap_or_else(|error| panic!("{}: {error}", mutant.name));
            shareable(factory.as_ref());
        }
        let store = in_memory_claims().unwrap().location().clone();
        assert_eq!(store, StoreLocation::PrivateMemory);
        let shared = blind_retry().unwrap().location().clone();
        assert!(matches!(shared, StoreLocation::SharedMemory(_)));
    }

    #[test]
    fn args_hash_and_call_id_keys_ignore_the_workflow_step() {
        let first: Map<String, Value> = serde_json::from_str(r#"{"subject":"s","queue":"q"}"#).unwrap();
        let reordered: Map<String, Value> = serde_json::from_str(r#"{"queue":"q","subject":"s"}"#).unwrap();
        let input = |step_id, call_id, arguments| KeyInput {
            tenant: "acme",
            environment: "production",
            workflow_id: "run_1",
            step_id,
            call_id: Some(call_id),
            arguments: Some(arguments),
        };
        let (a, b) = (input("step_1", "call_1", &first), input("step_2", "call_2", &reordered));
        assert_ne!(reference_operation_key(&a), reference_operation_key(&b));
        assert_eq!(args_hash_key(&a), args_hash_key(&b), "two steps, one key");
        assert!(args_hash_key(&a).starts_with("acme:args:"));
        let c = input("step_1", "call_2", &first);
        assert_eq!(reference_operation_key(&a), reference_operation_key(&c));
        assert_eq!(
            (call_id_key(&a), call_id_key(&c)),
            ("call_1".into(), "call_2".into()),
            "one step, two keys"
        );
        let poll = KeyInput { call_id: None, arguments: None, ..a };
        assert_eq!(args_hash_key(&poll), reference_operation_key(&poll));
        assert_eq!(call_id_key(&poll), reference_operation_key(&poll));
    }

    #[test]
    fn the_defective_fingerprints_miss_or_invent_differences() {
        let tickets = contract("tickets.create");
        let original = call("acme", "c1", r#"{"queue":"support","subject":"s","body":"b"}"#);
        let changed = call("acme", "c2", r#"{"queue":"support","subject":"s","body":"other"}"#);
        let reordered = call("acme", "c3", r#"{ "body": "b", "subject": "s" }"#);
        let fingerprint =
            |function: fn(&ToolContract, &ToolCall) -> Result<Fingerprint, ContractError>,
             call: &ToolCall| { function(&tickets, call).unwrap().to_string() };
        assert_ne!(
            fingerprint(reference_fingerprint, &original),
            fingerprint(reference_fingerprint, &changed)
        );
        assert_eq!(
            fingerprint(arguments_blind_fingerprint, &original),
            fingerprint(arguments_blind_fingerprint, &changed),
            "no_fingerprint misses a changed request"
        );
        assert_eq!(
            fingerprint(reference_fingerprint, &original),
            fingerprint(reference_fingerprint, &reordered)
        );
        assert_ne!(
            fingerprint(raw_text_fingerprint, &original),
            fingerprint(raw_text_fingerprint, &reordered),
            "raw_json_fingerprint invents a difference"
        );
        let invalid = call("acme", "c4", r#"{"queue":"support"}"#);
        for function in [reference_fingerprint, arguments_blind_fingerprint, raw_text_fingerprint] {
            assert!(function(&tickets, &invalid).is_err(), "every fingerprint still validates");
        }
    }

    #[test]
    fn the_defective_decisions_differ_from_the_reference_as_intended() {
        let tickets = contract("tickets.create");
        let (no_dedupe, charges) = (
            {
                let mut messages = contract("messages.send");
                messages.downstream.honours_key = false;
                messages
            },
            contract("payments.charge"),
        );

        assert_eq!(reference_ambiguity(&tickets, 1), AmbiguityVerdict::Unknown);
        assert_eq!(ambiguous_is_applied(&tickets, 1), AmbiguityVerdict::Applied);
        assert_eq!(resend_when_ambiguous(&tickets, 1), AmbiguityVerdict::Resend);
        assert_eq!(resend_when_ambiguous(&tickets, BLIND_RETRY_REQUESTS - 1), AmbiguityVerdict::Resend);
        assert_eq!(
            resend_when_ambiguous(&tickets, BLIND_RETRY_REQUESTS),
            AmbiguityVerdict::Unknown,
            "bounded"
        );
        assert_eq!(reference_downstream_key(&tickets, "k"), Some("k".into()));
        assert_eq!(no_downstream_key(&tickets, "k"), None);

        for point in
            [AuthPoint::BeforeClaim, AuthPoint::BeforeEffect, AuthPoint::AfterClaim { new_claim: false }]
        {
            assert!(!authorize_new_keys_only(point), "{point:?}");
        }
        assert!(authorize_new_keys_only(AuthPoint::AfterClaim { new_claim: true }));
        assert!(reference_authorize_at(AuthPoint::BeforeEffect));

        let record = OperationRecord {
            tenant: "acme".into(),
            operation_key: "k".into(),
            tool_name: "tickets.create".into(),
            tool_version: "2026-08-18".into(),
            request_fingerprint: "f".into(),
            status: RecordStatus::Applied,
            effect_reference: Some("ticket_1".into()),
            response_json: None,
            owner_token: None,
            lease_until_ms: 0,
            job_id: None,
            downstream_key: None,
            reason: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            expires_at_ms: 100,
            request_json: None,
        };
        assert_eq!(reference_retention(&record, 100), RetentionVerdict::Tombstone);
        assert_eq!(forget_after_retention(&record, 100), RetentionVerdict::Forget);
        assert_eq!(forget_after_retention(&record, 99), RetentionVerdict::Keep);
        let pending = OperationRecord { status: RecordStatus::Pending, ..record };
        assert_eq!(forget_after_retention(&pending, 500), RetentionVerdict::Keep);

        for contract in [&no_dedupe, &charges] {
            assert!(reference_recovery(contract).look_up_receipt);
            assert_eq!(
                re_execute_without_lookup(contract),
                RecoveryPlan {
                    look_up_receipt: false,
                    resend_with_same_key: true,
                    fresh_key_on_resend: false,
                    rederive_key_on_resend: false
                }
            );
        }
        assert!(!reference_recovery(&no_dedupe).resend_with_same_key);

        let result = json!({"ticket_id": "ticket_1", "version": 1});
        assert_eq!(
            reference_completion("ticket_1", &result),
            StoredCompletion { effect_reference: Some("ticket_1".into()), response: result.clone() }
        );
        assert_eq!(success_flag_only("ticket_1", &result).effect_reference, None);

        let jobs = contract("jobs.submit");
        assert_eq!(
            (reference_job_retry(&jobs), resubmit_running_job(&jobs)),
            (JobRetry::Poll, JobRetry::Resubmit)
        );
        assert_eq!(
            (reference_mismatch(&tickets), apply_newest_payload(&tickets)),
            (MismatchVerdict::Reject, MismatchVerdict::ApplyNewest)
        );
        assert_eq!((reference_tenant_scope("acme"), reference_tenant_scope("globex")), ("acme", "globex"));
        assert_eq!(one_tenant_scope("acme"), one_tenant_scope("globex"));
        let set_status = contract("tickets.set_status");
        assert!(reference_version_precondition(&set_status) && !no_version_precondition(&set_status));
        assert_eq!(
            reference_job_settlement(),
            JobSettlementPlan {
                dedupe_event_ids: true,
                compare_and_set: true,
                announce_on_win: true,
                owe_notice: true
            }
        );
        assert_eq!(
            settle_every_delivery(),
            JobSettlementPlan {
                dedupe_event_ids: false,
                compare_and_set: false,
                announce_on_win: true,
                owe_notice: true
            }
        );
        let messages = contract("messages.send");
        assert!(reference_consumer_claim(&messages) && !act_before_claiming(&messages));
    }
}
