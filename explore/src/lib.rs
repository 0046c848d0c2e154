//! Random exploration: random workloads under random faults, checked by the same oracles, with
//! failing cases shrunk to something a person can read and replayed by seed.
//!
//! A [`Case`] is a workload (operations over several tenants and tools) and a schedule of
//! actions (calls, races, changed requests (one field or all), faulty calls, crashes before the
//! effect or right after the commit, slow owners past their lease (writing after the new owner
//! finished, or inside its window), revocations before and after
//! an effect, retries past retention, polls of running jobs, human edits and stale updates).
//! Each case becomes an ordinary [`Scenario`] without expectations, so only the oracles judge
//! it. The conversion sends every action that needs a downstream request ahead (a fault, a
//! crash, a race, a slow owner) to an operation not called yet, so that its premise can hold.
//!
//! Generation is a proptest [`Strategy`] ([`case_strategy`]); the mix of action kinds is itself
//! drawn per case (swarm testing), so one case hammers crashes while another hammers changed
//! requests. Shrinking is proptest's: a failing case is simplified while the same oracle
//! still fails.
//!
//! [`session`] runs many seeds side by side against one executor (the `explore` command):
//! saved regressions first, then fresh cases, findings shrunk and saved, coverage summed.
//!
//! Invariants: a case is judged by the runner and the judge like any scenario (exploration
//! adds no verdicts of its own); it may import the runner and what is below it, never the
//! command.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod session;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fake_downstream::{FaultAction, FaultRule, IdempotencyMode, RuleMatch, Times};
use proptest::prelude::*;
use proptest::strategy::{Union, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use protocol::ExecutorCapabilities;
use reports::Violation;
use scenarios::{
    CallStep, DownstreamSpec, Moment, OperationSpec, PausePoint, QueueSpec, Row, Scenario, ServiceSpec, Step,
    StepKind, TimingSpec, WebhookSpec, WorkerRef, DEFAULT_TOOL_VERSION,
};
use serde::{Deserialize, Serialize};

use judge::verdict::Verdict;
use runner::executors::ExecutorSpec;
use runner::RunCoverage;

/// The most operations a case has.
pub const MAX_OPERATIONS: usize = 4;
/// The most actions a case has: each can take up to the agent's timeout in simulated time.
pub const MAX_ACTIONS: usize = 10;
/// How many shrink steps at most (each is one run).
pub const MAX_SHRINK_RUNS: u32 = 400;
/// The claim lease in explored cases: shorter than the reference's downstream timeout, so that
/// an owner can be alive, waiting on the downstream, past its lease.
pub const CASE_LEASE: Duration = Duration::from_secs(1);
/// The record retention in explored cases.
pub const CASE_RETENTION: Duration = Duration::from_secs(30);
/// Long enough for a queue consumer to pick a new envelope up and send it downstream.
const QUEUE_MOMENT: Duration = Duration::from_secs(1);

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
    /// crashed at the moment named, and restarted.
    CrashDuringCall {
        /// Index into the operations.
        operation: u8,
        /// Which worker.
        worker: u8,
        /// Where the crash falls.
        moment: CrashMoment,
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
            )
                .prop_map(|(operation, worker, moment)| CaseAction::CrashDuringCall {
                    operation,
                    worker,
                    moment,
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
    ];
    Union::new_weighted(weighted.into_iter().filter(|(weight, _)| *weight > 0).collect())
}

fn mix() -> impl Strategy<Value = Mix> {
    ((1u32..10, 0u32..4, 0u32..8, 0u32..5, 0u32..3), (0u32..5, 0u32..3, 0u32..3, 0u32..4, 0u32..4)).prop_map(
        |((call, concurrent, faulty, crash, slow), (advance, late, revoke, poll, edit))| Mix {
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
        },
    )
}

/// The strategy for random cases: workload, capabilities and a swarm-drawn fault mix.
pub fn case_strategy() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        1u8..=3,
        [service_choice(), service_choice(), service_choice(), service_choice()],
        (prop::bool::weighted(0.3), prop::bool::weighted(0.5), prop::bool::weighted(0.4)),
        prop::collection::vec(operation(), 1..=MAX_OPERATIONS),
        mix(),
    )
        .prop_flat_map(
            |(seed, workers, services, (duplicate_deliveries, webhooks, long_jobs), operations, mix)| {
                prop::collection::vec(action(mix), 1..=MAX_ACTIONS).prop_map(move |actions| Case {
                    seed,
                    workers,
                    services,
                    duplicate_deliveries,
                    webhooks,
                    long_jobs,
                    operations: operations.clone(),
                    actions,
                })
            },
        )
}

// ----------------------------------------------------------------------- case -> scenario

const TENANTS: [&str; 2] = ["acme", "globex"];

impl CaseTool {
    /// Every tool, in the order [`Case::narrowed_to`] prefers them.
    pub const ALL: [CaseTool; 5] =
        [CaseTool::Ticket, CaseTool::Charge, CaseTool::Message, CaseTool::Job, CaseTool::SetStatus];

    /// Whether an executor with `capabilities` can take calls of this tool: it serves the tool,
    /// with a queue consumer for messages and delayed jobs for jobs.
    pub fn supported_by(self, capabilities: &ExecutorCapabilities) -> bool {
        let served = capabilities.tools.as_ref().is_none_or(|tools| tools.contains(self.name()));
        served
            && match self {
                CaseTool::Message => capabilities.queue_consumer,
                CaseTool::Job => capabilities.delayed_jobs,
                CaseTool::Ticket | CaseTool::Charge | CaseTool::SetStatus => true,
            }
    }

    fn name(self) -> &'static str {
        match self {
            CaseTool::Ticket => "tickets.create",
            CaseTool::Charge => "payments.charge",
            CaseTool::Message => "messages.send",
            CaseTool::Job => "jobs.submit",
            CaseTool::SetStatus => "tickets.set_status",
        }
    }

    fn method(self) -> &'static str {
        if self == CaseTool::SetStatus {
            "PATCH"
        } else {
            "POST"
        }
    }

    fn path(self) -> &'static str {
        match self {
            CaseTool::Ticket => "/v1/tickets",
            CaseTool::Charge => "/v1/charges",
            CaseTool::Message => "/v1/messages",
            CaseTool::Job => "/v1/jobs",
            CaseTool::SetStatus => "/v1/tickets/*",
        }
    }

    /// The index of the tool's service in [`Case::services`].
    fn service_index(self) -> usize {
        match self {
            CaseTool::Ticket | CaseTool::SetStatus => 0,
            CaseTool::Charge => 1,
            CaseTool::Message => 2,
            CaseTool::Job => 3,
        }
    }

    /// Whether the effect is carried out by a queue consumer, not the worker that took the call.
    fn queued(self) -> bool {
        self == CaseTool::Message
    }

    /// The arguments for `content`, as (field, value, default) in the contract's order;
    /// `changed` alters every material field, `field` one of them. `ticket` names the ticket a
    /// status update is for.
    fn fields(self, content: u8, variant: Variant, ticket: &str) -> Vec<(&'static str, String, bool)> {
        let n = u32::from(content);
        let changes = |index: usize| match variant {
            Variant::Changed => true,
            Variant::ChangedField(field) => usize::from(field) % self.material_count() == index,
            Variant::Same | Variant::Reordered => false,
        };
        let text = |value: String| serde_json::Value::String(value).to_string();
        let pick = |index: usize, same: String, other: String| if changes(index) { other } else { same };
        match self {
            CaseTool::Ticket => vec![
                ("queue", text(pick(0, "support".into(), "billing".into())), !changes(0)),
                ("subject", text(pick(1, format!("Issue {n}"), format!("Issue {}", n + 100))), false),
                ("body", text(pick(2, format!("Text {n}"), format!("Text {}", n + 100))), false),
            ],
            CaseTool::Charge => vec![
                ("customer", text(pick(0, format!("cus_{n}"), format!("cus_{}", n + 100))), false),
                ("amount_minor", pick(1, (1_000 + n).to_string(), (1_100 + n).to_string()), false),
                ("currency", text(pick(2, "EUR".into(), "USD".into())), !changes(2)),
            ],
            CaseTool::Message => vec![
                ("to", text(pick(0, format!("customer-{n}"), format!("customer-{}", n + 100))), false),
                ("body", text(pick(1, format!("Hello {n}"), format!("Hello {}", n + 100))), false),
            ],
            CaseTool::Job => vec![
                ("job_type", text(pick(0, "report".into(), "export".into())), false),
                (
                    "input",
                    pick(1, format!(r#"{{"month":"m{n}"}}"#), format!(r#"{{"month":"m{}"}}"#, n + 100)),
                    false,
                ),
            ],
            CaseTool::SetStatus => {
                // Based on version 1 or 2 of the ticket; a changed request asks for another
                // status, or names another version.
                let version = 1 + n % 2;
                vec![
                    ("ticket_id", text(ticket.to_owned()), false),
                    ("status", text(pick(0, "closed".into(), "pending".into())), false),
                    ("expected_version", pick(1, version.to_string(), (version + 1).to_string()), false),
                ]
            }
        }
    }

    /// How many material fields a [`Variant::ChangedField`] chooses among.
    fn material_count(self) -> usize {
        match self {
            CaseTool::Ticket | CaseTool::Charge => 3,
            CaseTool::Message | CaseTool::Job | CaseTool::SetStatus => 2,
        }
    }

    /// The arguments as JSON text: canonical, or (reordered) in reverse order with other
    /// whitespace and the fields that equal the contract's default left out.
    fn arguments(self, content: u8, variant: Variant, ticket: &str) -> String {
        let fields = self.fields(content, variant, ticket);
        if variant == Variant::Reordered {
            let parts: Vec<String> = fields
                .iter()
                .rev()
                .filter(|(_, _, default)| !default)
                .map(|(name, value, _)| format!("\"{name}\" : {value}"))
                .collect();
            format!("{{ {} }}", parts.join(",\n  "))
        } else {
            let parts: Vec<String> =
                fields.iter().map(|(name, value, _)| format!("\"{name}\":{value}")).collect();
            format!("{{{}}}", parts.join(","))
        }
    }
}

impl CaseFault {
    fn action(self) -> FaultAction {
        match self {
            CaseFault::CommitThenDrop => FaultAction::CommitThenDrop,
            CaseFault::CommitThenDelay(ms) => {
                FaultAction::CommitThenDelay(Duration::from_millis(u64::from(ms)))
            }
            CaseFault::CommitThenError => FaultAction::CommitThenError(503),
            CaseFault::CommitThenMalformed => FaultAction::CommitThenMalformed,
            CaseFault::DropBeforeCommit => FaultAction::DropBeforeCommit,
            CaseFault::ResetBeforeCommit => FaultAction::ResetBeforeCommit,
            CaseFault::DelayBeforeCommit(ms) => {
                FaultAction::DelayBeforeCommit(Duration::from_millis(u64::from(ms)))
            }
        }
    }
}

/// What [`Case::to_scenario`] knows of the world so far, to send each action where it means
/// something: which operations were called (and whether their first call was a plain one),
/// and whose permission was revoked.
#[derive(Debug, Default)]
struct Plan {
    steps: Vec<Step>,
    labels: u32,
    called: BTreeSet<String>,
    /// Operations whose first call was a plain call (no fault, no crash) by an actor allowed then.
    clean: BTreeSet<String>,
    revoked: BTreeSet<(String, String)>,
}

impl Plan {
    fn push(&mut self, kind: StepKind) {
        self.steps.push(Step { line: 0, kind });
    }

    fn label(&mut self, prefix: &str) -> String {
        self.labels += 1;
        format!("{prefix}{}", self.labels)
    }
}

impl Case {
    fn name_of(operation: &CaseOperation) -> String {
        format!("{}_step_{}", TENANTS[usize::from(operation.tenant % 2)], operation.step)
    }

    fn operation_at(&self, index: u8) -> Option<(String, CaseOperation)> {
        let operation = *self.operations.get(usize::from(index) % self.operations.len().max(1))?;
        Some((Self::name_of(&operation), operation))
    }

    fn actor_of(operation: &CaseOperation) -> String {
        format!("agent-{}", operation.step % 2)
    }

    fn worker(&self, index: u8) -> String {
        format!("worker-{}", 1 + index % self.workers.max(1))
    }

    /// The ticket operation a status update of `tenant` is about: the tenant's first ticket
    /// operation whose step no other tool shares (a shared step is one operation, whose first
    /// call may not be the ticket's), or one made up for it.
    fn creator_for(&self, tenant: u8) -> (String, CaseOperation) {
        let others: BTreeSet<String> =
            self.operations.iter().filter(|op| op.tool != CaseTool::Ticket).map(Self::name_of).collect();
        self.operations
            .iter()
            .find(|operation| {
                operation.tool == CaseTool::Ticket
                    && operation.tenant % 2 == tenant % 2
                    && !others.contains(&Self::name_of(operation))
            })
            .map(|operation| (Self::name_of(operation), *operation))
            .unwrap_or_else(|| {
                let operation = CaseOperation { tenant, step: 9, tool: CaseTool::Ticket, content: 0 };
                (Self::name_of(&operation), operation)
            })
    }

    /// The first operation, from `index` on, that has not been called and whose actor may
    /// still use its tool: where an action that needs a downstream request ahead goes.
    fn fresh(&self, plan: &Plan, index: u8) -> Option<(String, CaseOperation)> {
        let count = self.operations.len() as u8;
        (0..count).filter_map(|offset| self.operation_at(index.wrapping_add(offset))).find(
            |(name, operation)| {
                !plan.called.contains(name)
                    && !plan.revoked.contains(&(Self::actor_of(operation), operation.tool.name().to_owned()))
            },
        )
    }

    /// A call step for `operation`, or `None` when it is a status update whose ticket cannot
    /// be known (its creator's first call was not a plain one). A status update's creator is
    /// called first when it was not yet.
    fn call_step(
        &self,
        plan: &mut Plan,
        name: &str,
        operation: &CaseOperation,
        worker: String,
        variant: Variant,
        wait: bool,
    ) -> Option<CallStep> {
        let mut ticket = String::new();
        if operation.tool == CaseTool::SetStatus {
            let (creator, ticket_operation) = self.creator_for(operation.tenant);
            if !plan.called.contains(&creator) {
                let step =
                    self.call_step(plan, &creator, &ticket_operation, self.worker(0), Variant::Same, true)?;
                self.mark_called(plan, &creator, &ticket_operation, true);
                plan.push(StepKind::Call(step));
            }
            if !plan.clean.contains(&creator) {
                return None;
            }
            ticket = format!("{}{creator}}}", scenarios::TICKET_OF_PLACEHOLDER);
        }
        Some(CallStep {
            id: plan.label("call-"),
            worker,
            operation: name.to_owned(),
            tool: operation.tool.name().to_owned(),
            version: DEFAULT_TOOL_VERSION.to_owned(),
            arguments: operation.tool.arguments(operation.content, variant, &ticket),
            actor: None,
            lose_answer: false,
            wait,
        })
    }

    fn mark_called(&self, plan: &mut Plan, name: &str, operation: &CaseOperation, plain: bool) {
        let allowed = !plan.revoked.contains(&(Self::actor_of(operation), operation.tool.name().to_owned()));
        if plan.called.insert(name.to_owned()) && plain && allowed {
            plan.clean.insert(name.to_owned());
        }
    }

    /// A plain call of `operation` (its first call, or a retry).
    fn plain_call(
        &self,
        plan: &mut Plan,
        name: &str,
        operation: &CaseOperation,
        worker: String,
        variant: Variant,
    ) {
        if let Some(step) = self.call_step(plan, name, operation, worker, variant, true) {
            self.mark_called(plan, name, operation, true);
            plan.push(StepKind::Call(step));
        }
    }

    /// A fault rule on the next downstream request that carries out `operation`'s tool for its
    /// tenant.
    fn fault_rule(operation: &CaseOperation, action: FaultAction) -> FaultRule {
        FaultRule {
            matches: RuleMatch {
                method: Some(operation.tool.method().into()),
                path: Some(operation.tool.path().into()),
                tenant: Some(TENANTS[usize::from(operation.tenant % 2)].into()),
                ..RuleMatch::default()
            },
            action,
            times: Times::Count(1),
        }
    }

    /// The owner of an operation's first call pauses right after the downstream committed,
    /// past its lease; the retry goes to the next worker; then the owner goes on, after the
    /// retry was answered, or (`overlap`) while the retry's first downstream request is held.
    fn slow_owner(&self, plan: &mut Plan, operation: u8, worker: u8, overlap: bool) {
        let Some((name, op)) = self.fresh(plan, operation) else {
            return self.plan_action(plan, CaseAction::Call { operation, worker, variant: Variant::Same });
        };
        // A queued effect is sent by a consumer; a status update may commit nothing.
        if op.tool.queued() || op.tool == CaseTool::SetStatus {
            return self.plain_call(plan, &name, &op, self.worker(worker), Variant::Same);
        }
        // The retry sends something only when it has a way to find out (a lookup or an
        // honoured key): only then can its request be held.
        let service = self.services[op.tool.service_index()];
        let overlap = overlap && (service.receipts || service.honoured);
        let owner = self.worker(worker);
        let Some(first) = self.call_step(plan, &name, &op, owner.clone(), Variant::Same, false) else {
            return;
        };
        let pause = plan.label("pause-");
        let mut point = PausePoint::downstream(Moment::After, true);
        if let PausePoint::Downstream { filter, .. } = &mut point {
            filter.operation = Some(name.clone());
        }
        plan.push(StepKind::Pause { name: pause.clone(), worker: Some(owner), point });
        self.mark_called(plan, &name, &op, false);
        let first_id = first.id.clone();
        plan.push(StepKind::Call(first));
        plan.push(StepKind::WaitPaused { name: pause.clone() });
        // Past the lease, within the owner's own downstream timeout: alive, but late.
        plan.push(StepKind::Advance { by: CASE_LEASE + Duration::from_millis(400), since_request_of: None });
        let Some(mut retry) =
            self.call_step(plan, &name, &op, self.worker(worker.wrapping_add(1)), Variant::Same, !overlap)
        else {
            plan.push(StepKind::Release { name: pause });
            plan.push(StepKind::Await { call: first_id });
            return;
        };
        if !overlap {
            plan.push(StepKind::Call(retry));
            plan.push(StepKind::Release { name: pause });
            plan.push(StepKind::Await { call: first_id });
            return;
        }
        let hold = plan.label("hold-");
        let rule = FaultRule {
            matches: RuleMatch {
                path: Some("/v1/*".into()),
                tenant: Some(TENANTS[usize::from(op.tenant % 2)].into()),
                ..RuleMatch::default()
            },
            action: FaultAction::Hold,
            times: Times::Count(1),
        };
        plan.push(StepKind::Fault { name: Some(hold.clone()), rule });
        retry.wait = false;
        let retry_id = retry.id.clone();
        plan.push(StepKind::Call(retry));
        // Time for the retry to claim, take over and send its first request (held).
        plan.push(StepKind::Advance { by: Duration::from_millis(300), since_request_of: None });
        plan.push(StepKind::Release { name: pause });
        plan.push(StepKind::Await { call: first_id });
        plan.push(StepKind::ReleaseHold { name: hold });
        plan.push(StepKind::Await { call: retry_id });
    }

    fn plan_action(&self, plan: &mut Plan, action: CaseAction) {
        match action {
            CaseAction::Call { operation, worker, variant } => {
                let Some((name, op)) = self.operation_at(operation) else { return };
                self.plain_call(plan, &name, &op, self.worker(worker), variant);
            }
            CaseAction::Concurrent { operation } => {
                let Some((name, op)) = self.fresh(plan, operation) else {
                    return self.plan_action(
                        plan,
                        CaseAction::Call { operation, worker: 0, variant: Variant::Same },
                    );
                };
                // A queued call only writes to the outbox: too quick to race (its consumers race,
                // on duplicate deliveries). A status update needs its ticket first.
                if self.workers < 2 || op.tool == CaseTool::SetStatus || op.tool.queued() {
                    return self.plain_call(plan, &name, &op, self.worker(0), Variant::Same);
                }
                let calls: Option<Vec<CallStep>> = (0..self.workers)
                    .map(|w| self.call_step(plan, &name, &op, self.worker(w), Variant::Same, true))
                    .collect();
                if let Some(calls) = calls {
                    self.mark_called(plan, &name, &op, true);
                    plan.push(StepKind::Concurrent(calls));
                }
            }
            CaseAction::FaultyCall { operation, worker, fault } => {
                let Some((name, op)) = self.fresh(plan, operation) else {
                    return self
                        .plan_action(plan, CaseAction::Call { operation, worker, variant: Variant::Same });
                };
                let Some(step) = self.call_step(plan, &name, &op, self.worker(worker), Variant::Same, true)
                else {
                    return;
                };
                plan.push(StepKind::Fault { name: None, rule: Self::fault_rule(&op, fault.action()) });
                self.mark_called(plan, &name, &op, false);
                plan.push(StepKind::Call(step));
                if op.tool.queued() {
                    // Give the consumer the moment it needs to send, before anything else (a
                    // revocation, say) can keep the faulty request from happening.
                    plan.push(StepKind::Advance { by: QUEUE_MOMENT, since_request_of: None });
                }
            }
            CaseAction::CrashDuringCall { operation, worker, moment } => {
                let Some((name, op)) = self.fresh(plan, operation) else {
                    return self
                        .plan_action(plan, CaseAction::Call { operation, worker, variant: Variant::Same });
                };
                let caller = self.worker(worker);
                let Some(step) = self.call_step(plan, &name, &op, caller.clone(), Variant::Same, false)
                else {
                    return;
                };
                let pause = plan.label("pause-");
                // A status update may be refused (412) or find the status already set: nothing
                // commits, so its crash falls before the request.
                let moment = match moment {
                    CrashMoment::AfterCommit if op.tool != CaseTool::SetStatus => Moment::After,
                    _ => Moment::Before,
                };
                let effect = true;
                let mut point = PausePoint::downstream(moment, effect);
                if let PausePoint::Downstream { filter, .. } = &mut point {
                    filter.operation = Some(name.clone());
                }
                // A queued tool's effect is sent by whichever worker consumes it.
                let paused_worker = (!op.tool.queued()).then(|| caller.clone());
                plan.push(StepKind::Pause { name: pause.clone(), worker: paused_worker, point });
                self.mark_called(plan, &name, &op, false);
                plan.push(StepKind::Call(step));
                plan.push(StepKind::WaitPaused { name: pause.clone() });
                plan.push(StepKind::Crash { worker: WorkerRef::PausedAt(pause.clone()) });
                plan.push(StepKind::Restart { worker: WorkerRef::PausedAt(pause) });
            }
            CaseAction::SlowOwner { operation, worker } => self.slow_owner(plan, operation, worker, false),
            CaseAction::OverlappingOwner { operation, worker } => {
                self.slow_owner(plan, operation, worker, true)
            }
            CaseAction::Advance { ms } => plan
                .push(StepKind::Advance { by: Duration::from_millis(u64::from(ms)), since_request_of: None }),
            CaseAction::LateRetry { operation } => {
                let Some((name, op)) = self.operation_at(operation) else { return };
                if !plan.called.contains(&name) {
                    self.plain_call(plan, &name, &op, self.worker(0), Variant::Same);
                }
                plan.push(StepKind::Advance {
                    by: CASE_RETENTION + Duration::from_secs(1),
                    since_request_of: None,
                });
                self.plain_call(plan, &name, &op, self.worker(1), Variant::Same);
            }
            CaseAction::RevokeAndRetry { operation } => {
                let Some((name, op)) = self.operation_at(operation) else { return };
                if !plan.called.contains(&name) {
                    self.plain_call(plan, &name, &op, self.worker(0), Variant::Same);
                }
                self.plan_action(plan, CaseAction::Revoke { operation });
                self.plain_call(plan, &name, &op, self.worker(1), Variant::Same);
            }
            CaseAction::Revoke { operation } => {
                let Some((_, op)) = self.operation_at(operation) else { return };
                let (actor, tool) = (Self::actor_of(&op), op.tool.name().to_owned());
                plan.revoked.insert((actor.clone(), tool.clone()));
                plan.push(StepKind::Revoke { actor, tool: Some(tool) });
            }
            CaseAction::Poll { operation } | CaseAction::Reconcile { operation } => {
                let Some((name, _)) = self.operation_at(operation) else { return };
                let (id, worker) = (plan.label("query-"), self.worker(0));
                plan.push(if matches!(action, CaseAction::Poll { .. }) {
                    StepKind::Poll { id, operation: name, worker }
                } else {
                    StepKind::Reconcile { id, operation: name, worker }
                });
            }
            CaseAction::PollWhileRunning { operation } => {
                // A job of the case (from `operation` on) if there is one: submitted now if it
                // was not, so that the polls find it running.
                let count = self.operations.len() as u8;
                let job = (0..count)
                    .filter_map(|offset| self.operation_at(operation.wrapping_add(offset)))
                    .find(|(_, op)| op.tool == CaseTool::Job);
                let Some((name, op)) = job.or_else(|| self.operation_at(operation)) else { return };
                if op.tool == CaseTool::Job && !plan.called.contains(&name) {
                    self.plain_call(plan, &name, &op, self.worker(0), Variant::Same);
                }
                for round in 0..4 {
                    if round > 0 {
                        plan.push(StepKind::Advance {
                            by: Duration::from_millis(1_200),
                            since_request_of: None,
                        });
                    }
                    let (id, worker) = (plan.label("query-"), self.worker(round));
                    plan.push(StepKind::Poll { id, operation: name.clone(), worker });
                }
            }
            CaseAction::HumanEdit => {
                let (creator, _) = self.creator_for(self.operations.first().map_or(0, |op| op.tenant));
                if plan.clean.contains(&creator) {
                    plan.push(StepKind::HumanEdit { ticket_of: creator });
                }
            }
            CaseAction::StaleUpdate => {
                let Some(update) = self.operations.iter().find(|op| op.tool == CaseTool::SetStatus).copied()
                else {
                    return;
                };
                let name = Self::name_of(&update);
                let (creator, ticket) = self.creator_for(update.tenant);
                if !plan.called.contains(&creator) {
                    self.plain_call(plan, &creator, &ticket, self.worker(0), Variant::Same);
                }
                if !plan.clean.contains(&creator) {
                    return;
                }
                plan.push(StepKind::HumanEdit { ticket_of: creator });
                self.plain_call(plan, &name, &update, self.worker(0), Variant::Same);
            }
        }
    }

    /// The case as a scenario without expectations: only the oracles judge it.
    pub fn to_scenario(&self) -> Scenario {
        let mut plan = Plan::default();
        for action in &self.actions {
            self.plan_action(&mut plan, *action);
        }
        let mut operations = BTreeMap::new();
        let mut named: Vec<CaseOperation> = self.operations.clone();
        for operation in &self.operations {
            if operation.tool == CaseTool::SetStatus {
                named.push(self.creator_for(operation.tenant).1);
            }
        }
        for operation in named {
            operations.entry(Self::name_of(&operation)).or_insert_with(|| OperationSpec {
                tenant: TENANTS[usize::from(operation.tenant % 2)].to_owned(),
                environment: "production".into(),
                workflow_id: "run_1".into(),
                step_id: format!("step_{}", operation.step),
                actor: Self::actor_of(&operation),
            });
        }
        let mut services = BTreeMap::new();
        for (name, choice) in ["tickets", "charges", "messages", "jobs"].iter().zip(self.services) {
            let idempotency =
                if choice.honoured { IdempotencyMode::Honoured } else { IdempotencyMode::Ignored };
            services.insert((*name).to_owned(), ServiceSpec { idempotency, receipts: choice.receipts });
        }
        Scenario {
            id: "X01".into(),
            name: "explored_case".into(),
            rows: vec![Row::Prose],
            summary: "A random workload and fault schedule found by `replaylab explore`.".into(),
            expected: "Every oracle holds.".into(),
            workers: u32::from(self.workers.max(1)),
            operations,
            downstream: DownstreamSpec {
                services,
                job_duration: Some(Duration::from_secs(if self.long_jobs { 6 } else { 2 })),
                webhook: self.webhooks.then_some(WebhookSpec { repeat_same_event: 1, extra_event_ids: 1 }),
            },
            queue: QueueSpec { duplicate_deliveries: self.duplicate_deliveries, delivery_delay: None },
            timing: TimingSpec {
                lease: Some(CASE_LEASE),
                retention: Some(CASE_RETENTION),
                downstream_timeout: None,
            },
            settle: Duration::from_secs(10),
            seed: Some(self.seed),
            steps: plan.steps,
            source: "explored case".into(),
            // `to_toml` writes the id first.
            line: 1,
        }
    }

    /// Operations, actions and workers: the size a shrunk case is reported by.
    pub fn size(&self) -> usize {
        self.operations.len() + self.actions.len() + usize::from(self.workers)
    }
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
}

/// Runs one case against `executor` and returns what the oracles found.
pub fn check_case(case: &Case, executor: &ExecutorSpec) -> CaseResult {
    let record = runner::run(&case.to_scenario(), case.seed, executor);
    CaseResult {
        coverage: record.coverage,
        verdict: record.result.verdict,
        violations: record.result.violations,
        notes: record.result.notes,
        history_digest: record.result.history_digest,
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
    /// (in [`CaseTool::ALL`]'s order), webhooks are off without a receiver, and a reconcile is
    /// a poll without `reconcile`. Unchanged for an executor that supports everything, and for
    /// one that supports none of the tools (the case is then `not applicable`).
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
        if !capabilities.reconcile {
            for action in &mut self.actions {
                if let CaseAction::Reconcile { operation } = *action {
                    *action = CaseAction::Poll { operation };
                }
            }
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
    /// The case as drawn.
    pub original: Case,
    /// The smallest case found that still fails with the same oracle.
    pub shrunk: Case,
    /// What the shrunk case does.
    pub result: CaseResult,
    /// Runs spent shrinking.
    pub shrink_runs: u32,
}

/// Explores seed `seed`: draws its case, runs it, and shrinks it if it fails.
pub fn explore_seed(seed: u64, executor: &ExecutorSpec) -> Option<Finding> {
    let mut runner = runner_for(seed);
    let strategy = case_strategy_for(executor.capabilities.clone());
    let mut tree = strategy.new_tree(&mut runner).expect("the case strategy never rejects");
    let original = tree.current();
    let first = check_case(&original, executor);
    let oracle = first.failure()?;
    let (shrunk, result, shrink_runs) = shrink(&mut tree, &oracle, executor, original.clone(), first);
    Some(Finding { seed, oracle, original, shrunk, result, shrink_runs })
}

fn shrink(
    tree: &mut impl ValueTree<Value = Case>,
    oracle: &str,
    executor: &ExecutorSpec,
    mut best: Case,
    mut best_result: CaseResult,
) -> (Case, CaseResult, u32) {
    let mut runs = 0;
    if !tree.simplify() {
        return (best, best_result, runs);
    }
    while runs < MAX_SHRINK_RUNS {
        let candidate = tree.current();
        let result = check_case(&candidate, executor);
        runs += 1;
        let still_fails = result.failure().as_deref() == Some(oracle)
            || result.violations.iter().any(|violation| violation.oracle == oracle);
        if still_fails {
            if candidate.size() <= best.size() {
                best = candidate;
                best_result = result;
            }
            if !tree.simplify() {
                break;
            }
        } else if !tree.complicate() {
            break;
        }
    }
    (best, best_result, runs)
}
