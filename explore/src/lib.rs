//! Random exploration: random workloads under random faults, checked by the same oracles, with
//! failing cases grouped by what failed, shrunk to something a person can read, and replayed by
//! seed.
//!
//! A [`Case`] is a workload (operations over several tenants and tools) and a schedule of
//! actions (calls, races, changed requests (one field or all), faulty calls, crashes before the
//! effect or right after the commit (restarted at once, or staying down while their abandoned
//! operation is polled), slow owners past their lease (writing after the new owner finished, or
//! inside its window), revocations before and after an effect, a second actor retrying (one of
//! the two revoked), a tool version upgraded mid-operation, receipt lookups down, a job's
//! completion notice meeting a fault, retries past retention, polls of running jobs, human edits
//! and stale updates). Each case becomes an ordinary [`Scenario`] without expectations
//! ([`Case::to_scenario`]), so only the oracles judge it. The conversion sends every action that
//! needs a downstream request ahead (a fault, a crash, a race, a slow owner) to an operation
//! not called yet, so that its premise can hold.
//!
//! Generation is a proptest [`Strategy`] ([`case_strategy`]); the mix of action kinds is itself
//! drawn per case (swarm testing), so one case hammers crashes while another hammers changed
//! requests. A failing case has a [`signature`] (its oracle and the shape of what the violation
//! names); [`shrink`] reduces a failing case in passes (whole actions, operations and workers
//! first, then simpler values) while it still fails with the same signature.
//!
//! [`session`] runs many seeds side by side against one executor (the `explore` command):
//! saved regressions first, then fresh cases; failing seeds grouped by signature, one shrink per
//! group, saved; coverage summed. Against real processes (`--executor-cmd`) a finding counts
//! when it fails again at a stated rate.
//!
//! Invariants: a case is judged by the runner and the judge like any scenario (exploration
//! adds no verdicts of its own); it may import the runner and what is below it, never the
//! command.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod coverage;
mod plan;
pub mod record;
pub mod session;
pub mod shrink;
pub mod signature;

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::{Union, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use protocol::ExecutorCapabilities;
use reports::Violation;
use scenarios::Scenario;
use serde::{Deserialize, Serialize};

use judge::verdict::Verdict;
use runner::executors::ExecutorSpec;
use runner::RunCoverage;

pub use shrink::MAX_SHRINK_RUNS;

/// The most operations a case has.
pub const MAX_OPERATIONS: usize = 4;
/// The most actions a case has: each can take up to the agent's timeout in simulated time.
pub const MAX_ACTIONS: usize = 10;
/// The claim lease in explored cases: shorter than the reference's downstream timeout, so that
/// an owner can be alive, waiting on the downstream, past its lease.
pub const CASE_LEASE: Duration = Duration::from_secs(1);
/// The record retention in explored cases.
pub const CASE_RETENTION: Duration = Duration::from_secs(30);
/// How long a poll takes the place of, for an executor that cannot be polled.
const POLL_WAIT_MS: u32 = 100;
/// How long a slow queue holds an envelope before a consumer can take it (S31's delay).
pub const SLOW_QUEUE_DELAY: Duration = Duration::from_secs(2);
/// What one service of the downstream can do in a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceChoice {
    /// Idempotency keys are honoured.
    pub honoured: bool,
    /// Receipt lookup answers.
    pub receipts: bool,
}

/// A tool an operation calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CaseTool {
    /// `tickets.create`.
    Ticket,
    /// `payments.charge`.
    Charge,
    /// `messages.send` (queued).
    Message,
    /// `jobs.submit` (delayed job).
    Job,
    /// `tickets.set_status` on the ticket its tenant's first ticket operation created.
    SetStatus,
}

/// One logical operation of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseOperation {
    /// 0: `acme`, 1: `globex`.
    pub tenant: u8,
    /// The step number: two operations with the same tenant and step are the same operation.
    pub step: u8,
    /// The tool.
    pub tool: CaseTool,
    /// Which arguments: operations with the same tool and content send identical arguments
    /// (a new key with the same arguments).
    pub content: u8,
}

/// How a call's arguments relate to the operation's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Variant {
    /// The operation's arguments, as first written.
    Same,
    /// The same arguments with keys reordered, other whitespace and defaults left out.
    Reordered,
    /// Every material field changed (a different request under the same key).
    Changed,
    /// One material field changed (its index in the tool's material fields, modulo their
    /// number): the smallest difference a fingerprint must see.
    ChangedField(u8),
}

/// A downstream fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CaseFault {
    /// Commit, then close the connection.
    CommitThenDrop,
    /// Commit, answer after this many milliseconds.
    CommitThenDelay(u32),
    /// Commit, answer 503.
    CommitThenError,
    /// Commit, answer a truncated body.
    CommitThenMalformed,
    /// Swallow the request.
    DropBeforeCommit,
    /// Close the connection before commit.
    ResetBeforeCommit,
    /// Wait this many milliseconds, then handle it.
    DelayBeforeCommit(u32),
}

/// Where a crash falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CrashMoment {
    /// Before the request that would make the effect leaves (the claim is made).
    BeforeEffect,
    /// Right after the downstream committed the effect, before the executor saw the answer.
    AfterCommit,
}

/// One thing that happens in a case. Actions that need a downstream request ahead (faults,
/// crashes, races, slow owners) go to an operation not called yet: the one named, or the next
/// such; with none left they become a plain call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CaseAction {
    /// A tool call.
    Call {
        /// Index into the operations.
        operation: u8,
        /// Which worker (modulo the worker count).
        worker: u8,
        /// How its arguments relate to the operation's.
        variant: Variant,
    },
    /// The first call of an operation, sent to every worker at once: a real race.
    Concurrent {
        /// Index into the operations.
        operation: u8,
    },
    /// The first call of an operation, with a fault on its downstream request.
    FaultyCall {
        /// Index into the operations.
        operation: u8,
        /// Which worker.
        worker: u8,
        /// The fault.
        fault: CaseFault,
    },
    /// The first call of an operation, whose worker (the consumer's, for a queued tool) is
    /// crashed at the moment named, and restarted: at once, or (`stays_down`) after its lease
    /// ran out and the agent polled the abandoned operation on another worker (S28).
    CrashDuringCall {
        /// Index into the operations.
        operation: u8,
        /// Which worker.
        worker: u8,
        /// Where the crash falls.
        moment: CrashMoment,
        /// The worker stays down past the lease while another worker is polled.
        #[serde(default)]
        stays_down: bool,
    },
    /// The first call of an operation whose owner stays alive but slow: paused right after the
    /// downstream committed, past its lease; meanwhile another worker gets the retry; then the
    /// owner goes on.
    SlowOwner {
        /// Index into the operations.
        operation: u8,
        /// The owner's worker (the retry goes to the next one).
        worker: u8,
    },
    /// A slow owner (as [`CaseAction::SlowOwner`]) that goes on while the retry's worker still
    /// works on the operation: the retry's first downstream request is held until the owner
    /// has answered, so that the stale owner's writes land inside the new owner's window.
    OverlappingOwner {
        /// Index into the operations.
        operation: u8,
        /// The owner's worker (the retry goes to the next one).
        worker: u8,
    },
    /// Simulated time passes.
    Advance {
        /// Milliseconds.
        ms: u32,
    },
    /// The operation (called first if it was not) is retried after its retention.
    LateRetry {
        /// Index into the operations.
        operation: u8,
    },
    /// The operation (called first if it was not) loses its actor's permission, then is
    /// retried.
    RevokeAndRetry {
        /// Index into the operations.
        operation: u8,
    },
    /// The operation's actor loses its permission for the operation's tool.
    Revoke {
        /// Index into the operations.
        operation: u8,
    },
    /// The agent polls.
    Poll {
        /// Index into the operations.
        operation: u8,
    },
    /// The agent asks for reconciliation.
    Reconcile {
        /// Index into the operations.
        operation: u8,
    },
    /// The agent polls a job four times, 1.2 s apart, submitting it first if it was not (a job
    /// still running is polled many times); a case without a job polls the operation named.
    PollWhileRunning {
        /// Index into the operations.
        operation: u8,
    },
    /// A person edits the ticket the first ticket-creating operation made.
    HumanEdit,
    /// A stale update, the rare sequence that reveals lost updates: the first ticket-creating
    /// operation is called (unless it was already), a person edits its ticket, then the first
    /// `tickets.set_status` operation is called, based on a version that may predate the edit.
    StaleUpdate,
    /// The operation (called first by its own actor if it was not) is called again by the
    /// other actor (`agent-0` and `agent-1` take the steps in turn), after `revoked` lost its
    /// permission for the tool, if anyone did (S08 and S21 with a second actor).
    OtherActor {
        /// Index into the operations.
        operation: u8,
        /// The other actor's worker.
        worker: u8,
        /// Whose permission is revoked first.
        revoked: ActorRevoked,
    },
    /// The operation is called again under its tool's other version (`tickets.create`
    /// 2026-09-01, whose contract forbids replaying 2026-08-18; `payments.charge` 2026-10-01,
    /// which may replay the same request of 2026-08-18), with `variant` arguments: after its
    /// first call was answered (called first if it was not), or (`early`) while its first call
    /// is held before its effect (S15, S24). Tools with one version are retried plainly.
    NewVersion {
        /// Index into the operations.
        operation: u8,
        /// The upgraded call's worker.
        worker: u8,
        /// Its arguments.
        variant: Variant,
        /// Sent while the first call is held before its effect.
        early: bool,
    },
    /// The first call of an operation whose request is swallowed (nothing committed, no
    /// answer) while its tenant's receipt lookups answer 503 until the faults heal; then time
    /// passes for every reconciliation try to fail (S30). Without a receipt lookup in the
    /// tool's service, or for a tool other than `tickets.create` and `payments.charge`, a
    /// faulty call (`drop_before_commit`).
    LookupsDown {
        /// Index into the operations.
        operation: u8,
        /// Which worker.
        worker: u8,
    },
    /// A job (the first not called yet, from `operation` on) whose completion notice meets
    /// `fault` (its tenant's next message request), polled once it finished (S29). Without
    /// such a job, a faulty call.
    NoticeFault {
        /// Index into the operations.
        operation: u8,
        /// The fault on the notice.
        fault: CaseFault,
    },
}

/// Whose permission is revoked before [`CaseAction::OtherActor`]'s call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ActorRevoked {
    /// Nobody's: the other actor simply retries.
    Neither,
    /// The operation's own actor's (after a plain first call): the other actor, still allowed,
    /// retries.
    First,
    /// The other actor's: its retry must be refused.
    Other,
}

/// A random workload and fault schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// The simulation seed.
    pub seed: u64,
    /// Workers, 1 to 3.
    pub workers: u8,
    /// Tickets, charges, messages, jobs.
    pub services: [ServiceChoice; 4],
    /// The queue delivers every envelope twice.
    pub duplicate_deliveries: bool,
    /// Jobs send completion webhooks (twice under one event id, once under another).
    pub webhooks: bool,
    /// Jobs run 6 s instead of 2 s.
    #[serde(default)]
    pub long_jobs: bool,
    /// The queue holds every envelope [`SLOW_QUEUE_DELAY`] before a consumer can take it, so
    /// that a retry can come before any consumer ran (S31).
    #[serde(default)]
    pub slow_queue: bool,
    /// The operations.
    pub operations: Vec<CaseOperation>,
    /// What happens, in order.
    pub actions: Vec<CaseAction>,
}

/// Relative weights of the action kinds in one case (swarm testing).
#[derive(Debug, Clone, Copy)]
struct Mix {
    call: u32,
    concurrent: u32,
    faulty: u32,
    crash: u32,
    slow: u32,
    advance: u32,
    late: u32,
    revoke: u32,
    poll: u32,
    edit: u32,
    actor: u32,
    version: u32,
    lookups: u32,
    notice: u32,
}

fn service_choice() -> impl Strategy<Value = ServiceChoice> {
    (any::<bool>(), prop::bool::weighted(0.65))
        .prop_map(|(honoured, receipts)| ServiceChoice { honoured, receipts })
}

fn operation() -> impl Strategy<Value = CaseOperation> {
    (
        prop::bool::weighted(0.25).prop_map(u8::from),
        0u8..3,
        prop_oneof![
            4 => Just(CaseTool::Ticket),
            3 => Just(CaseTool::Charge),
            2 => Just(CaseTool::Message),
            2 => Just(CaseTool::Job),
            2 => Just(CaseTool::SetStatus),
        ],
        0u8..2,
    )
        .prop_map(|(tenant, step, tool, content)| CaseOperation { tenant, step, tool, content })
}

fn fault() -> impl Strategy<Value = CaseFault> {
    prop_oneof![
        3 => Just(CaseFault::CommitThenDrop),
        2 => (500u32..6_000).prop_map(CaseFault::CommitThenDelay),
        2 => Just(CaseFault::CommitThenError),
        2 => Just(CaseFault::CommitThenMalformed),
        1 => Just(CaseFault::DropBeforeCommit),
        1 => Just(CaseFault::ResetBeforeCommit),
        1 => (100u32..3_000).prop_map(CaseFault::DelayBeforeCommit),
    ]
}

/// A fault on a job's completion notice: mostly one that keeps the message from being stored
/// (S29), so that only a resend or a hand-over can account for it.
fn notice_fault() -> impl Strategy<Value = CaseFault> {
    prop_oneof![
        2 => Just(CaseFault::ResetBeforeCommit),
        2 => Just(CaseFault::DropBeforeCommit),
        1 => Just(CaseFault::CommitThenDrop),
        1 => Just(CaseFault::CommitThenError),
    ]
}

fn variant() -> impl Strategy<Value = Variant> {
    prop_oneof![
        6 => Just(Variant::Same),
        2 => Just(Variant::Reordered),
        1 => Just(Variant::Changed),
        2 => (0u8..3).prop_map(Variant::ChangedField),
    ]
}

fn action(mix: Mix) -> impl Strategy<Value = CaseAction> {
    let operation = || 0u8..MAX_OPERATIONS as u8;
    let worker = || 0u8..3;
    let weighted: Vec<(u32, BoxedStrategy<CaseAction>)> = vec![
        (
            mix.call,
            (operation(), worker(), variant())
                .prop_map(|(operation, worker, variant)| CaseAction::Call { operation, worker, variant })
                .boxed(),
        ),
        (mix.concurrent, operation().prop_map(|operation| CaseAction::Concurrent { operation }).boxed()),
        (
            mix.faulty,
            (operation(), worker(), fault())
                .prop_map(|(operation, worker, fault)| CaseAction::FaultyCall { operation, worker, fault })
                .boxed(),
        ),
        (
            mix.crash,
            (
                operation(),
                worker(),
                prop_oneof![Just(CrashMoment::BeforeEffect), Just(CrashMoment::AfterCommit)],
                prop::bool::weighted(0.3),
            )
                .prop_map(|(operation, worker, moment, stays_down)| CaseAction::CrashDuringCall {
                    operation,
                    worker,
                    moment,
                    stays_down,
                })
                .boxed(),
        ),
        (
            mix.slow,
            prop_oneof![
                (operation(), worker())
                    .prop_map(|(operation, worker)| CaseAction::SlowOwner { operation, worker }),
                (operation(), worker())
                    .prop_map(|(operation, worker)| CaseAction::OverlappingOwner { operation, worker }),
            ]
            .boxed(),
        ),
        (mix.advance, (100u32..4_000).prop_map(|ms| CaseAction::Advance { ms }).boxed()),
        (mix.late, operation().prop_map(|operation| CaseAction::LateRetry { operation }).boxed()),
        (
            mix.revoke,
            prop_oneof![
                operation().prop_map(|operation| CaseAction::RevokeAndRetry { operation }),
                operation().prop_map(|operation| CaseAction::Revoke { operation }),
            ]
            .boxed(),
        ),
        (mix.edit, prop_oneof![1 => Just(CaseAction::HumanEdit), 2 => Just(CaseAction::StaleUpdate)].boxed()),
        (
            mix.poll,
            prop_oneof![
                operation().prop_map(|operation| CaseAction::Poll { operation }),
                operation().prop_map(|operation| CaseAction::Reconcile { operation }),
                operation().prop_map(|operation| CaseAction::PollWhileRunning { operation }),
            ]
            .boxed(),
        ),
        (
            mix.actor,
            (
                operation(),
                worker(),
                prop_oneof![
                    Just(ActorRevoked::Neither),
                    Just(ActorRevoked::First),
                    Just(ActorRevoked::Other)
                ],
            )
                .prop_map(|(operation, worker, revoked)| CaseAction::OtherActor {
                    operation,
                    worker,
                    revoked,
                })
                .boxed(),
        ),
        (
            mix.version,
            (operation(), worker(), variant(), prop::bool::weighted(0.3))
                .prop_map(|(operation, worker, variant, early)| CaseAction::NewVersion {
                    operation,
                    worker,
                    variant,
                    early,
                })
                .boxed(),
        ),
        (
            mix.lookups,
            (operation(), worker())
                .prop_map(|(operation, worker)| CaseAction::LookupsDown { operation, worker })
                .boxed(),
        ),
        (
            mix.notice,
            (operation(), notice_fault())
                .prop_map(|(operation, fault)| CaseAction::NoticeFault { operation, fault })
                .boxed(),
        ),
    ];
    Union::new_weighted(weighted.into_iter().filter(|(weight, _)| *weight > 0).collect())
}

fn mix() -> impl Strategy<Value = Mix> {
    (
        (1u32..10, 0u32..4, 0u32..8, 0u32..5, 0u32..3),
        (0u32..5, 0u32..3, 0u32..3, 0u32..4, 0u32..4),
        (0u32..3, 0u32..3, 0u32..2, 0u32..2),
    )
        .prop_map(
            |(
                (call, concurrent, faulty, crash, slow),
                (advance, late, revoke, poll, edit),
                (actor, version, lookups, notice),
            )| Mix {
                call,
                concurrent,
                faulty,
                crash,
                slow,
                advance,
                late,
                revoke,
                poll,
                edit,
                actor,
                version,
                lookups,
                notice,
            },
        )
}

/// The strategy for random cases: workload, capabilities and a swarm-drawn fault mix.
pub fn case_strategy() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        1u8..=3,
        [service_choice(), service_choice(), service_choice(), service_choice()],
        (
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.5),
            prop::bool::weighted(0.4),
            prop::bool::weighted(0.25),
        ),
        prop::collection::vec(operation(), 1..=MAX_OPERATIONS),
        mix(),
    )
        .prop_flat_map(
            |(
                seed,
                workers,
                services,
                (duplicate_deliveries, webhooks, long_jobs, slow_queue),
                operations,
                mix,
            )| {
                prop::collection::vec(action(mix), 1..=MAX_ACTIONS).prop_map(move |actions| Case {
                    seed,
                    workers,
                    services,
                    duplicate_deliveries,
                    webhooks,
                    long_jobs,
                    slow_queue,
                    operations: operations.clone(),
                    actions,
                })
            },
        )
}

// ----------------------------------------------------------------------- checking

/// What one case did.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseResult {
    /// What the case covered (faults fired, crashes after a commit, oracles exercised).
    pub coverage: RunCoverage,
    /// The run's verdict.
    pub verdict: Verdict,
    /// Oracle violations.
    pub violations: Vec<Violation>,
    /// Why it was unknown or crashed.
    pub notes: Vec<String>,
    /// `sha256:` of the run's history.
    pub history_digest: String,
    /// The signature of each violation (of the crash, for a crashed run), first the one of
    /// the failure that names the case ([`CaseResult::failure`]); empty when it did not fail.
    pub signatures: Vec<String>,
}

impl CaseResult {
    /// The oracle (or `crashed`) that makes this case a failure, if it is one.
    pub fn failure(&self) -> Option<String> {
        match self.verdict {
            Verdict::Fail => self.violations.first().map(|v| v.oracle.clone()),
            Verdict::Crashed => Some("crashed".into()),
            Verdict::Pass | Verdict::Unknown | Verdict::NotApplicable => None,
        }
    }

    /// The signature of the failure that names the case ([`signature`]), if it failed.
    pub fn signature(&self) -> Option<&str> {
        self.failure().and(self.signatures.first().map(String::as_str))
    }

    /// Whether the case failed with a violation of this signature (not necessarily its first).
    pub fn fails_with(&self, signature: &str) -> bool {
        self.failure().is_some() && self.signatures.iter().any(|known| known == signature)
    }
}

/// Runs one case against `executor` and returns what the oracles found.
pub fn check_case(case: &Case, executor: &ExecutorSpec) -> CaseResult {
    let record = runner::run(&case.to_scenario(), case.seed, executor);
    let signatures = signature::of_run(&record);
    CaseResult {
        coverage: record.coverage,
        verdict: record.result.verdict,
        violations: record.result.violations,
        notes: record.result.notes,
        history_digest: record.result.history_digest,
        signatures,
    }
}

/// The runner for seed `seed`: the same seed always draws the same case.
fn runner_for(seed: u64) -> TestRunner {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&0x7265_706c_6179_6c61_u64.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    TestRunner::new_with_rng(Config { failure_persistence: None, ..Config::default() }, rng)
}

impl Case {
    /// The case narrowed to what an executor with `capabilities` supports, so that it
    /// applies: an operation of a tool it cannot take becomes one of the first tool it can
    /// (in [`CaseTool::ALL`]'s order), webhooks are off without a receiver, a reconcile is
    /// a poll without `reconcile`, without every version of a tool the case's operations
    /// use a [`CaseAction::NewVersion`] is a plain call, and without the agent's poll a poll is
    /// time passing, a crashed worker does not stay down to be polled, and a faulty job notice
    /// (settled by a poll) is a faulty call. Unchanged for an executor that
    /// supports everything, and for one that supports none of the tools (the case is then
    /// `not applicable`).
    pub fn narrowed_to(mut self, capabilities: &ExecutorCapabilities) -> Case {
        let Some(fallback) = CaseTool::ALL.into_iter().find(|tool| tool.supported_by(capabilities)) else {
            return self;
        };
        for operation in &mut self.operations {
            if !operation.tool.supported_by(capabilities) {
                operation.tool = fallback;
            }
        }
        self.webhooks &= capabilities.webhooks;
        // A version change may land on any operation the case has (a fresh one is chosen
        // when the case is played): every one's tool must be served at its other version.
        let versions_served = self.operations.iter().all(|operation| {
            operation.tool.new_version().is_none_or(|version| {
                capabilities.versions.get(operation.tool.name()).is_none_or(|served| served.contains(version))
            })
        });
        for action in &mut self.actions {
            match *action {
                CaseAction::Reconcile { operation } if !capabilities.reconcile => {
                    *action = CaseAction::Poll { operation };
                }
                CaseAction::NewVersion { operation, worker, variant, .. } if !versions_served => {
                    *action = CaseAction::Call { operation, worker, variant };
                }
                _ => {}
            }
            if !capabilities.poll {
                *action = match *action {
                    CaseAction::Poll { .. } => CaseAction::Advance { ms: POLL_WAIT_MS },
                    CaseAction::PollWhileRunning { .. } => CaseAction::Advance { ms: 4 * POLL_WAIT_MS },
                    CaseAction::CrashDuringCall { operation, worker, moment, .. } => {
                        CaseAction::CrashDuringCall { operation, worker, moment, stays_down: false }
                    }
                    CaseAction::NoticeFault { operation, fault } => {
                        CaseAction::FaultyCall { operation, worker: 0, fault }
                    }
                    other => other,
                };
            }
        }
        self
    }

    /// The case narrowed to what a world can do, `lacks` saying what it cannot
    /// (`world::process::lacks` for the process world): while the case's scenario still needs
    /// something it lacks, the next of these goes, in order: webhooks; the queue's duplicate
    /// deliveries and delay; queued tools (`messages.send` becomes the first other tool the
    /// case's executor serves, `fallback`); delayed jobs (the same); crashes, slow owners and
    /// early upgrades (their pause points become plain calls). A case the world can run is
    /// unchanged; one it still cannot is `not applicable` when run.
    pub fn narrowed_to_world(
        mut self,
        lacks: impl Fn(&Scenario) -> Vec<String>,
        capabilities: &ExecutorCapabilities,
    ) -> Case {
        let fallback = |taken: CaseTool| {
            CaseTool::ALL
                .into_iter()
                .find(|tool| *tool != taken && *tool != CaseTool::Message && tool.supported_by(capabilities))
        };
        let steps: [&dyn Fn(&mut Case); 5] = [
            &|case| case.webhooks = false,
            &|case| {
                case.duplicate_deliveries = false;
                case.slow_queue = false;
            },
            &|case| {
                for operation in &mut case.operations {
                    if operation.tool == CaseTool::Message {
                        if let Some(tool) = fallback(CaseTool::Message) {
                            operation.tool = tool;
                        }
                    }
                }
            },
            &|case| {
                for operation in &mut case.operations {
                    if operation.tool == CaseTool::Job {
                        if let Some(tool) = fallback(CaseTool::Job) {
                            operation.tool = tool;
                        }
                    }
                }
            },
            &|case| {
                for action in &mut case.actions {
                    *action = match *action {
                        CaseAction::CrashDuringCall { operation, worker, .. }
                        | CaseAction::SlowOwner { operation, worker }
                        | CaseAction::OverlappingOwner { operation, worker } => {
                            CaseAction::Call { operation, worker, variant: Variant::Same }
                        }
                        CaseAction::NewVersion { operation, worker, variant, early: true } => {
                            CaseAction::NewVersion { operation, worker, variant, early: false }
                        }
                        other => other,
                    };
                }
            },
        ];
        for step in steps {
            if lacks(&self.to_scenario()).is_empty() {
                break;
            }
            step(&mut self);
        }
        self
    }
}

/// [`case_strategy`], narrowed to what an executor with `capabilities` supports
/// ([`Case::narrowed_to`]); `replaylab explore` draws from it.
pub fn case_strategy_for(capabilities: ExecutorCapabilities) -> impl Strategy<Value = Case> {
    case_strategy().prop_map(move |case| case.narrowed_to(&capabilities))
}

/// The case seed `seed` draws.
pub fn case_for_seed(seed: u64) -> Case {
    let mut runner = runner_for(seed);
    case_strategy().new_tree(&mut runner).expect("the case strategy never rejects").current()
}

/// A failure found by exploration, shrunk.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The exploration seed that found it.
    pub seed: u64,
    /// The oracle that failed (or `crashed`).
    pub oracle: String,
    /// The failure's [`signature`].
    pub signature: String,
    /// The case as drawn.
    pub original: Case,
    /// The smallest case found that still fails with the same signature.
    pub shrunk: Case,
    /// What the shrunk case does.
    pub result: CaseResult,
    /// Runs spent shrinking.
    pub shrink_runs: u32,
}

/// Explores seed `seed` against an executor in the simulation: draws its case (narrowed to
/// the executor), runs it, and shrinks it if it fails ([`shrink::shrink`], keeping its
/// signature).
pub fn explore_seed(seed: u64, executor: &ExecutorSpec) -> Option<Finding> {
    let original = case_for_seed(seed).narrowed_to(&executor.capabilities);
    let first = check_case(&original, executor);
    let oracle = first.failure()?;
    let signature = first.signature()?.to_owned();
    let shrunk = shrink_in_simulation(original.clone(), first, &signature, executor);
    Some(Finding {
        seed,
        oracle,
        signature,
        original,
        shrunk: shrunk.case,
        result: shrunk.result,
        shrink_runs: shrunk.runs,
    })
}

/// Shrinks a failing case in the simulation: one run per candidate, kept when it still fails
/// with `signature`.
pub fn shrink_in_simulation(
    case: Case,
    result: CaseResult,
    signature: &str,
    executor: &ExecutorSpec,
) -> shrink::Shrunk<CaseResult> {
    shrink::shrink(case, result, MAX_SHRINK_RUNS, 1, |candidates| {
        candidates
            .iter()
            .map(|candidate| {
                let result = check_case(candidate, executor);
                result.fails_with(signature).then_some(result)
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use scenarios::StepKind;

    /// The versions a case's calls use.
    fn versions(case: &Case) -> std::collections::BTreeSet<(String, String)> {
        case.to_scenario()
            .steps
            .iter()
            .filter_map(|step| match &step.kind {
                StepKind::Call(call) => Some((call.tool.clone(), call.version.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_executor_that_lacks_a_version_is_never_sent_it() {
        let old_charges_only =
            ExecutorCapabilities::all().with_versions("payments.charge", [scenarios::DEFAULT_TOOL_VERSION]);
        let upgraded = ("payments.charge".to_owned(), "2026-10-01".to_owned());
        let (mut drawn, mut narrowed_away) = (0, 0);
        for seed in 0..2_000 {
            let case = case_for_seed(seed);
            let narrowed = case.clone().narrowed_to(&old_charges_only);
            let needs = narrowed.to_scenario().needs(&protocol::ContractSet::builtin());
            assert!(
                old_charges_only.lacks(&needs).is_empty(),
                "seed {seed}: {:?}",
                old_charges_only.lacks(&needs)
            );
            assert!(!versions(&narrowed).contains(&upgraded), "seed {seed}");
            if versions(&case).contains(&upgraded) {
                drawn += 1;
                narrowed_away += u32::from(narrowed != case);
            }
        }
        assert!(drawn > 10, "the premise: cases that upgrade a charge are drawn ({drawn})");
        assert_eq!(narrowed_away, drawn, "each of them is narrowed");
    }

    #[test]
    fn every_new_kind_is_drawn() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..500 {
            let case = case_for_seed(seed);
            if case.slow_queue {
                seen.insert("slow queue");
            }
            for action in &case.actions {
                seen.insert(match action {
                    CaseAction::OtherActor { .. } => "other actor",
                    CaseAction::NewVersion { early: true, .. } => "early upgrade",
                    CaseAction::NewVersion { .. } => "upgrade",
                    CaseAction::LookupsDown { .. } => "lookups down",
                    CaseAction::NoticeFault { .. } => "notice fault",
                    CaseAction::CrashDuringCall { stays_down: true, .. } => "stays down",
                    _ => continue,
                });
            }
        }
        assert_eq!(seen.len(), 7, "{seen:?}");
    }

    #[test]
    fn without_a_poll_a_case_asks_for_none() {
        let no_poll = ExecutorCapabilities::all().with_poll(false);
        for seed in 0..300 {
            let narrowed = case_for_seed(seed).narrowed_to(&no_poll);
            let needs = narrowed.to_scenario().needs(&protocol::ContractSet::builtin());
            assert!(!needs.poll, "seed {seed}");
        }
    }

    #[test]
    fn a_world_that_lacks_a_queue_gets_no_queued_tool() {
        // A world without a queue (as the process world said when this was written).
        let no_queue = |scenario: &Scenario| {
            let needs = scenario.needs(&protocol::ContractSet::builtin());
            if needs.queue_consumer {
                vec!["a queue".to_owned()]
            } else {
                Vec::new()
            }
        };
        let mut changed = 0;
        for seed in 0..200 {
            let case = case_for_seed(seed);
            let narrowed = case.clone().narrowed_to_world(no_queue, &ExecutorCapabilities::all());
            assert!(no_queue(&narrowed.to_scenario()).is_empty(), "seed {seed}");
            let sends = narrowed.to_scenario().steps.iter().any(
                |step| matches!(&step.kind, StepKind::Call(call) if call.tool == CaseTool::Message.name()),
            );
            assert!(!sends, "seed {seed}");
            changed += u32::from(narrowed != case);
            // A world that lacks nothing changes nothing.
            assert_eq!(case.clone().narrowed_to_world(|_| Vec::new(), &ExecutorCapabilities::all()), case);
        }
        assert!(changed > 20, "the premise: many cases send messages ({changed})");
    }
}
