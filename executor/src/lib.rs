//! The reference executor: the REPLAY state machine over a real SQLite claim store.
//!
//! An executor sits between an agent and a side-effecting tool and turns duplicate delivery
//! into one business effect, or stops and says `unknown`. This crate is the one replaylab
//! ships to pass every row of the matrix, to read and to copy. It is written only against
//! the public plug-in interface ([`protocol::Executor`], [`protocol::WorkerEnv`]): all time
//! comes from the environment's clock, all randomness from its entropy, all I/O through its
//! downstream client, authorizer, outbox and store gate, so it runs unchanged inside the
//! deterministic simulation and for real.
//!
//! # Using it
//!
//! ```no_run
//! use executor::{ReferenceConfig, ReferenceFactory, StoreLocation};
//!
//! // One factory per run; the shared-memory name must be unique within the process.
//! let factory = ReferenceFactory::new(
//!     StoreLocation::SharedMemory("run-S01-seed-7".into()),
//!     ReferenceConfig::default(),
//! )?;
//! // The harness calls `factory.start(env)` (protocol::ExecutorFactory) at each worker
//! // (re)start, and can inspect the store afterwards:
//! let records = factory.with_store(async |store| store.records().await)?;
//! # Ok::<(), executor::StoreError>(())
//! ```
//!
//! # The state machine
//!
//! A call is validated (contract, identifiers, arguments, fingerprint), its operation key is
//! derived from tenant + environment + workflow id + step id, the actor is authorized, and
//! the operation is claimed or loaded in one atomic statement. Then:
//!
//! | record found | answer |
//! |---|---|
//! | none (we claimed it) | recheck authorization, then the effect: `applied` with a receipt; `rejected` for 412/4xx (`failed_permanent`); `in_flight` for a 409; `unknown` + a reconciliation row for a timeout, a closed connection, a 5xx or a garbled body |
//! | fingerprint differs | `rejected`: `tool_version_changed` if the version differs (or `replayed` when the old contract allows it and the record is applied), else `idempotency_key_reused_with_different_request`; the stored request is never replaced |
//! | `applied` | `replayed` with the stored effect reference and safe result |
//! | `pending` with a job id | `in_flight`, poll (the job is never resubmitted) |
//! | `pending`, no owner (queued) | `in_flight`, poll (a consumer will claim it) |
//! | `pending`, live lease | `in_flight`, retry after the rest of the lease |
//! | `pending`, lease run out, or `unknown` | recovery: take over by compare-and-set, look the receipt up (`replayed`), resend only with an honoured key, else `unknown` + a reconciliation row |
//! | `failed_permanent` | `rejected` with the stored reason |
//! | terminal and past retention, or `tombstone` | `expired` (tombstone keeps key, fingerprint, effect reference); `reconcile_first` contracts look the receipt up first and note it |
//!
//! Queued tools (`messages.send`) write an envelope to the outbox and release the record; the
//! consumer ([`protocol::Executor::consume`]) claims it by compare-and-set before it sends.
//! Delayed jobs (`jobs.submit`) store the downstream job id; polling or the completion webhook
//! settles the job exactly once (only the winner of that transition sends the completion
//! notice, and owes it in the store from the settlement on: a notice its sender did not get
//! confirmed is finished by a later poll or call, which looks the notice up before it resends,
//! and hands it over to people when it cannot check). Webhook deliveries are deduplicated by
//! event id, then matched to the operation by its downstream key.
//!
//! A poll or reconcile of an operation answers from the record: a `pending` claim whose lease
//! ran out is only looked up (a receipt settles it; the restarted workers' own reconciliation
//! takes it over); an `unknown` one is recovered as a retry would (take over, look the receipt
//! up, resend its kept request where the downstream honours the key), however long ago the
//! worker's own reconciliation gave up and handed it over: once the world heals, the next look
//! settles it. The same finding about the same operation is handed over once per worker start.
//!
//! # Parts to build your own
//!
//! Each REPLAY decision (key derivation, fingerprinting, claim, lease recovery,
//! authorization recheck, retention, downstream key, what an ambiguous answer means, what is
//! stored on completion, what a retry of a running job does, what a fingerprint mismatch
//! does, the tenant scope, the version precondition, webhook settlement, the consumer's
//! claim) is one small function in [`Strategies`]. A variant of the reference replaces one of
//! them: [`ReferenceFactory::with_strategies`] and [`ReferenceFactory::recycled`] take a
//! function that makes each worker's `Strategies` at its start, from its
//! [`protocol::WorkerEnv`], so a decision may keep state and see the worker's clock and
//! identity. [`mutants`] is the zoo of MATRIX.md built that way: thirty-five executors with
//! one defect each (M01..M18 from MATRIX.md, M19..M34 the project's own). The claim store
//! ([`ClaimStore`]: claim, lease, compare-and-set completion, tombstones) and the downstream
//! mapping ([`downstream`]: requests, receipts, what an answer means) are public too, for an
//! executor of your own (`examples/custom-executor` looks receipts up with it).
//!
//! [`bench::store_bench`] measures the claim path against hand-written SQL.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod bench;
pub mod downstream;
mod machine;
pub mod mutants;
mod store;
mod strategy;
mod warm;

pub use machine::{ReferenceConfig, ReferenceExecutor, ReferenceFactory, DEFAULT_DOWNSTREAM_TIMEOUT};
pub use store::{
    block_on, fresh_schema, test_postgres, valid_schema_name, ClaimStore, Claimed, GatedStore, NewClaim,
    OperationRecord, OwnedClaim, Reconciliation, RecordStatus, StoreError, StoreLocation, TakeOver,
    TEST_POSTGRES_ENV,
};
pub use strategy::{
    downstream_key_for, reference_ambiguity, reference_authorize_at, reference_claim, reference_completion,
    reference_consumer_claim, reference_cross_version, reference_downstream_key, reference_file_findings,
    reference_fingerprint, reference_job_patience, reference_job_retry, reference_job_settlement,
    reference_late_receipt, reference_mismatch, reference_operation_key, reference_owner_at_work,
    reference_queued, reference_recovery, reference_redelivered_resend, reference_rerun_unknown,
    reference_retention, reference_tenant_scope, reference_version_precondition, AmbiguityFn,
    AmbiguityVerdict, AuthPoint, AuthorizeAtFn, ClaimFn, CompletionFn, ConsumerClaimFn, CrossVersionFn,
    CrossVersionReplay, DownstreamKeyFn, FileFindingsFn, FindingAbout, FingerprintFn, JobPatienceFn,
    JobRetry, JobRetryFn, JobSettlementFn, JobSettlementPlan, KeyInput, LateReceiptFn, MakeStrategies,
    MismatchFn, MismatchVerdict, OperationKeyFn, OwnerAtWorkFn, QueuedFn, RecoveryFn, RecoveryPlan,
    RedeliveredResendFn, RerunUnknownFn, RetentionFn, RetentionVerdict, StoredCompletion, Strategies,
    TenantScopeFn, VersionPreconditionFn, MAX_DOWNSTREAM_KEY_CHARS,
};
