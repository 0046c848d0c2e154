//! Random exploration: random workloads under random faults, checked by the same oracles, with
//! failing cases shrunk to something a person can read and replayed by seed.
//!
//! A [`Case`] is a workload (operations over several tenants and tools) and a schedule of
//! actions (calls, concurrent calls, changed requests, faults, crashes at pause points,
//! revocations, clock jumps past leases and retention, polls, reconciliations). Each case
//! becomes an ordinary [`Scenario`] without expectations, so only the oracles judge it.
//!
//! Generation is a proptest [`Strategy`] ([`case_strategy`]); the mix of action kinds is itself
//! drawn per case (swarm testing), so one case hammers crashes while another hammers changed
//! requests. Shrinking is proptest's: a failing case is simplified while the same oracle
//! still fails.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fake_downstream::{FaultAction, FaultRule, IdempotencyMode, RuleMatch, Times};
use proptest::prelude::*;
use proptest::strategy::{Union, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reports::Violation;
use scenarios::{
    CallStep, DownstreamSpec, Moment, OperationSpec, PausePoint, QueueSpec, Row, Scenario, ServiceSpec, Step,
    StepKind, TimingSpec, WebhookSpec, WorkerRef, DEFAULT_TOOL_VERSION,
};
use serde::{Deserialize, Serialize};

use crate::executors::ExecutorSpec;
use crate::runner;
use crate::verdict::Verdict;

/// The most operations a case has.
pub const MAX_OPERATIONS: usize = 4;
/// The most actions a case has: each can take up to the agent's timeout in simulated time.
pub const MAX_ACTIONS: usize = 10;
/// How many shrink steps at most (each is one run).
pub const MAX_SHRINK_RUNS: u32 = 400;

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
    /// `tickets.set_status` on `ticket_1` (the run's first ticket), based on a version.
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
    /// The same arguments with keys reordered and other whitespace.
    Reordered,
    /// A material field changed (a different request under the same key).
    Changed,
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

/// One thing that happens in a case.
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
    /// The same call to every worker at once.
    Concurrent {
        /// Index into the operations.
        operation: u8,
    },
    /// A fault on the next request to the operation's service.
    Fault {
        /// Index into the operations (its tool picks the path).
        operation: u8,
        /// The fault.
        fault: CaseFault,
    },
    /// A call whose worker is crashed (and restarted) at a pause point.
    CrashDuringCall {
        /// Index into the operations.
        operation: u8,
        /// Which worker.
        worker: u8,
        /// `true`: after the downstream answered; `false`: before the request left.
        after_downstream: bool,
    },
    /// Simulated time passes.
    Advance {
        /// Milliseconds.
        ms: u32,
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
    fault: u32,
    crash: u32,
    advance: u32,
    revoke: u32,
    poll: u32,
    edit: u32,
}

fn service_choice() -> impl Strategy<Value = ServiceChoice> {
    (any::<bool>(), prop::bool::weighted(0.8))
        .prop_map(|(honoured, receipts)| ServiceChoice { honoured, receipts })
}

fn operation() -> impl Strategy<Value = CaseOperation> {
    (
        prop::bool::weighted(0.2).prop_map(u8::from),
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
    prop_oneof![6 => Just(Variant::Same), 2 => Just(Variant::Reordered), 1 => Just(Variant::Changed)]
}

fn action(mix: Mix) -> impl Strategy<Value = CaseAction> {
    let operation = || 0u8..MAX_OPERATIONS as u8;
    let weighted: Vec<(u32, BoxedStrategy<CaseAction>)> = vec![
        (
            mix.call,
            (operation(), 0u8..3, variant())
                .prop_map(|(operation, worker, variant)| CaseAction::Call { operation, worker, variant })
                .boxed(),
        ),
        (mix.concurrent, operation().prop_map(|operation| CaseAction::Concurrent { operation }).boxed()),
        (
            mix.fault,
            (operation(), fault())
                .prop_map(|(operation, fault)| CaseAction::Fault { operation, fault })
                .boxed(),
        ),
        (
            mix.crash,
            (operation(), 0u8..3, any::<bool>())
                .prop_map(|(operation, worker, after_downstream)| CaseAction::CrashDuringCall {
                    operation,
                    worker,
                    after_downstream,
                })
                .boxed(),
        ),
        (
            mix.advance,
            prop_oneof![8 => 100u32..4_000, 1 => 30_000u32..40_000]
                .prop_map(|ms| CaseAction::Advance { ms })
                .boxed(),
        ),
        (mix.revoke, operation().prop_map(|operation| CaseAction::Revoke { operation }).boxed()),
        (mix.edit, prop_oneof![Just(CaseAction::HumanEdit), Just(CaseAction::StaleUpdate)].boxed()),
        (
            mix.poll,
            prop_oneof![
                operation().prop_map(|operation| CaseAction::Poll { operation }),
                operation().prop_map(|operation| CaseAction::Reconcile { operation }),
            ]
            .boxed(),
        ),
    ];
    Union::new_weighted(weighted.into_iter().filter(|(weight, _)| *weight > 0).collect())
}

fn mix() -> impl Strategy<Value = Mix> {
    (1u32..10, 0u32..4, 0u32..8, 0u32..5, 0u32..6, 0u32..2, 0u32..4, 0u32..4).prop_map(
        |(call, concurrent, fault, crash, advance, revoke, poll, edit)| Mix {
            call,
            concurrent,
            fault,
            crash,
            advance,
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
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.5),
        prop::collection::vec(operation(), 1..=MAX_OPERATIONS),
        mix(),
    )
        .prop_flat_map(|(seed, workers, services, duplicate_deliveries, webhooks, operations, mix)| {
            prop::collection::vec(action(mix), 1..=MAX_ACTIONS).prop_map(move |actions| Case {
                seed,
                workers,
                services,
                duplicate_deliveries,
                webhooks,
                operations: operations.clone(),
                actions,
            })
        })
}

// ----------------------------------------------------------------------- case -> scenario

const TENANTS: [&str; 2] = ["acme", "globex"];

impl CaseTool {
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

    /// The arguments for `content`, written canonically or reordered; `changed` alters a
    /// material field.
    fn arguments(self, content: u8, variant: Variant) -> String {
        let changed = if variant == Variant::Changed { 100 } else { 0 };
        let n = u32::from(content) + changed;
        let reordered = variant == Variant::Reordered;
        match (self, reordered) {
            (CaseTool::Ticket, false) => {
                format!(r#"{{"queue":"support","subject":"Issue {n}","body":"Text {n}"}}"#)
            }
            (CaseTool::Ticket, true) => {
                format!("{{ \"body\": \"Text {n}\",\n \"subject\" : \"Issue {n}\" }}")
            }
            (CaseTool::Charge, false) => {
                format!(r#"{{"customer":"cus_{n}","amount_minor":{},"currency":"EUR"}}"#, 1_000 + n)
            }
            (CaseTool::Charge, true) => {
                format!(
                    "{{\"currency\": \"EUR\", \"amount_minor\": {},\n  \"customer\": \"cus_{n}\"}}",
                    1_000 + n
                )
            }
            (CaseTool::Message, false) => format!(r#"{{"to":"customer-{n}","body":"Hello {n}"}}"#),
            (CaseTool::Message, true) => format!("{{ \"body\":\"Hello {n}\", \"to\":\"customer-{n}\" }}"),
            (CaseTool::Job, false) => format!(r#"{{"job_type":"report","input":{{"month":"m{n}"}}}}"#),
            (CaseTool::Job, true) => {
                format!("{{\"input\": {{ \"month\": \"m{n}\" }}, \"job_type\": \"report\"}}")
            }
            (CaseTool::SetStatus, reordered) => {
                // Based on version 1 or 2 of the run's first ticket; a changed request asks for
                // another status.
                let version = 1 + u32::from(content % 2);
                let status = if variant == Variant::Changed { "pending" } else { "closed" };
                if reordered {
                    format!(
                        "{{ \"expected_version\": {version}, \"status\": \"{status}\", \"ticket_id\": \"ticket_1\" }}"
                    )
                } else {
                    format!(r#"{{"ticket_id":"ticket_1","status":"{status}","expected_version":{version}}}"#)
                }
            }
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

impl Case {
    fn operation_name(&self, index: u8) -> Option<(String, &CaseOperation)> {
        let operation = self.operations.get(usize::from(index) % self.operations.len().max(1))?;
        Some((format!("{}_step_{}", TENANTS[usize::from(operation.tenant % 2)], operation.step), operation))
    }

    /// The first operation using `tool`, with its name.
    fn first_of(&self, tool: CaseTool) -> Option<(String, &CaseOperation)> {
        (0..self.operations.len() as u8)
            .filter_map(|index| self.operation_name(index))
            .find(|(_, operation)| operation.tool == tool)
    }

    fn worker(&self, index: u8) -> String {
        format!("worker-{}", 1 + index % self.workers.max(1))
    }

    /// The case as a scenario without expectations: only the oracles judge it.
    pub fn to_scenario(&self) -> Scenario {
        let mut operations = BTreeMap::new();
        for (index, operation) in self.operations.iter().enumerate() {
            let Some((name, _)) = self.operation_name(index as u8) else { continue };
            operations.entry(name).or_insert_with(|| OperationSpec {
                tenant: TENANTS[usize::from(operation.tenant % 2)].to_owned(),
                environment: "production".into(),
                workflow_id: "run_1".into(),
                step_id: format!("step_{}", operation.step),
                actor: format!("agent-{}", operation.step % 2),
            });
        }
        let mut services = BTreeMap::new();
        for (name, choice) in ["tickets", "charges", "messages", "jobs"].iter().zip(self.services) {
            let idempotency =
                if choice.honoured { IdempotencyMode::Honoured } else { IdempotencyMode::Ignored };
            services.insert((*name).to_owned(), ServiceSpec { idempotency, receipts: choice.receipts });
        }
        let mut steps = Vec::new();
        let mut push = |kind: StepKind| steps.push(Step { line: 0, kind });
        let mut labels = 0;
        let mut next_label = |prefix: &str| {
            labels += 1;
            format!("{prefix}{labels}")
        };
        let call = |id: String,
                    worker: String,
                    name: &str,
                    operation: &CaseOperation,
                    variant: Variant,
                    wait: bool| {
            CallStep {
                id,
                worker,
                operation: name.to_owned(),
                tool: operation.tool.name().to_owned(),
                version: DEFAULT_TOOL_VERSION.to_owned(),
                arguments: operation.tool.arguments(operation.content, variant),
                actor: None,
                lose_answer: false,
                wait,
            }
        };
        // Operations called so far (a stale update calls its ticket's creator first if not).
        let mut called = BTreeSet::new();
        for action in &self.actions {
            if let CaseAction::Call { operation, .. }
            | CaseAction::Concurrent { operation }
            | CaseAction::CrashDuringCall { operation, .. } = *action
            {
                if let Some((name, _)) = self.operation_name(operation) {
                    called.insert(name);
                }
            }
            match *action {
                CaseAction::Call { operation, worker, variant } => {
                    let Some((name, op)) = self.operation_name(operation) else { continue };
                    push(StepKind::Call(call(
                        next_label("call-"),
                        self.worker(worker),
                        &name,
                        op,
                        variant,
                        true,
                    )));
                }
                CaseAction::Concurrent { operation } => {
                    let Some((name, op)) = self.operation_name(operation) else { continue };
                    if self.workers < 2 {
                        push(StepKind::Call(call(
                            next_label("call-"),
                            self.worker(0),
                            &name,
                            op,
                            Variant::Same,
                            true,
                        )));
                        continue;
                    }
                    let calls = (0..self.workers)
                        .map(|w| call(next_label("call-"), self.worker(w), &name, op, Variant::Same, true))
                        .collect();
                    push(StepKind::Concurrent(calls));
                }
                CaseAction::Fault { operation, fault } => {
                    let Some((_, op)) = self.operation_name(operation) else { continue };
                    let rule = FaultRule {
                        matches: RuleMatch {
                            method: Some(op.tool.method().into()),
                            path: Some(op.tool.path().into()),
                            ..RuleMatch::default()
                        },
                        action: fault.action(),
                        times: Times::Count(1),
                    };
                    push(StepKind::Fault { name: None, rule });
                }
                CaseAction::CrashDuringCall { operation, worker, after_downstream } => {
                    let Some((name, op)) = self.operation_name(operation) else { continue };
                    let worker = self.worker(worker);
                    let pause = next_label("pause-");
                    let point = if after_downstream {
                        PausePoint::downstream(Moment::After, true)
                    } else {
                        PausePoint::downstream(Moment::Before, true)
                    };
                    push(StepKind::Pause { name: pause.clone(), worker: Some(worker.clone()), point });
                    push(StepKind::Call(call(
                        next_label("call-"),
                        worker.clone(),
                        &name,
                        op,
                        Variant::Same,
                        false,
                    )));
                    push(StepKind::WaitPaused { name: pause });
                    push(StepKind::Crash { worker: WorkerRef::Named(worker.clone()) });
                    push(StepKind::Restart { worker: WorkerRef::Named(worker) });
                }
                CaseAction::Advance { ms } => {
                    push(StepKind::Advance { by: Duration::from_millis(u64::from(ms)) })
                }
                CaseAction::Revoke { operation } => {
                    let Some((name, op)) = self.operation_name(operation) else { continue };
                    let actor = operations.get(&name).map(|spec| spec.actor.clone()).unwrap_or_default();
                    push(StepKind::Revoke { actor, tool: Some(op.tool.name().to_owned()) });
                }
                CaseAction::HumanEdit => {
                    if let Some((name, _)) = self.first_of(CaseTool::Ticket) {
                        push(StepKind::HumanEdit { ticket_of: name });
                    }
                }
                CaseAction::StaleUpdate => {
                    let (Some((creator, ticket)), Some((name, update))) =
                        (self.first_of(CaseTool::Ticket), self.first_of(CaseTool::SetStatus))
                    else {
                        continue;
                    };
                    if called.insert(creator.clone()) {
                        let id = next_label("call-");
                        push(StepKind::Call(call(id, self.worker(0), &creator, ticket, Variant::Same, true)));
                    }
                    called.insert(name.clone());
                    push(StepKind::HumanEdit { ticket_of: creator });
                    push(StepKind::Call(call(
                        next_label("call-"),
                        self.worker(0),
                        &name,
                        update,
                        Variant::Same,
                        true,
                    )));
                }
                CaseAction::Poll { operation } | CaseAction::Reconcile { operation } => {
                    let Some((name, _)) = self.operation_name(operation) else { continue };
                    let id = next_label("query-");
                    let worker = self.worker(0);
                    push(if matches!(action, CaseAction::Poll { .. }) {
                        StepKind::Poll { id, operation: name, worker }
                    } else {
                        StepKind::Reconcile { id, operation: name, worker }
                    });
                }
            }
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
                job_duration: Some(Duration::from_secs(2)),
                webhook: self.webhooks.then_some(WebhookSpec { repeat_same_event: 1, extra_event_ids: 1 }),
            },
            queue: QueueSpec { duplicate_deliveries: self.duplicate_deliveries },
            timing: TimingSpec {
                lease: Some(Duration::from_secs(2)),
                retention: Some(Duration::from_secs(30)),
            },
            settle: Duration::from_secs(10),
            seed: Some(self.seed),
            steps,
            source: "explored case".into(),
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
            Verdict::Pass | Verdict::Unknown => None,
        }
    }
}

/// Runs one case against `executor` and returns what the oracles found.
pub fn check_case(case: &Case, executor: &ExecutorSpec) -> CaseResult {
    let record = runner::run(&case.to_scenario(), case.seed, executor);
    CaseResult {
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
    let mut tree = case_strategy().new_tree(&mut runner).expect("the case strategy never rejects");
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
