//! The domain types of a scenario (validated; the file form lives in `parse`).

use std::collections::BTreeMap;
use std::time::Duration;

use fake_downstream::{FaultRule, IdempotencyMode};
use protocol::{ContractSet, Execution, Needs, OutcomeStatus, ReasonCode};

/// The tool version a call uses when its step names none.
pub const DEFAULT_TOOL_VERSION: &str = "2026-08-18";
/// How long the world runs after the last step, with every fault healed, before the final
/// polls and the oracles: longer than any lease, so that recovery can happen.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(5);

/// A row of the source document's tables that a scenario covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    /// The release checklist, `C1`..`C10`.
    Checklist(u8),
    /// The fault/race matrix, `F1`..`F9`.
    FaultMatrix(u8),
    /// The document's prose (queues, webhooks, tenants, versions, ...).
    Prose,
}

impl Row {
    /// Every row of the two tables, in the document's order: C1..C10 then F1..F9.
    pub fn all() -> Vec<Row> {
        (1..=10).map(Row::Checklist).chain((1..=9).map(Row::FaultMatrix)).collect()
    }

    /// Parses `C3`, `F4` or `prose`.
    pub fn parse(text: &str) -> Option<Row> {
        if text == "prose" {
            return Some(Row::Prose);
        }
        let (table, number) = text.split_at_checked(1)?;
        let number: u8 = number.parse().ok()?;
        match table {
            "C" if (1..=10).contains(&number) => Some(Row::Checklist(number)),
            "F" if (1..=9).contains(&number) => Some(Row::FaultMatrix(number)),
            _ => None,
        }
    }
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Row::Checklist(n) => write!(f, "C{n}"),
            Row::FaultMatrix(n) => write!(f, "F{n}"),
            Row::Prose => f.write_str("prose"),
        }
    }
}

/// A logical operation the agent works on: a workflow step of a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationSpec {
    /// Tenant.
    pub tenant: String,
    /// Environment.
    pub environment: String,
    /// Workflow run id.
    pub workflow_id: String,
    /// Step id.
    pub step_id: String,
    /// The actor that calls.
    pub actor: String,
}

/// One downstream service's capabilities in this scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Whether idempotency keys are honoured.
    pub idempotency: IdempotencyMode,
    /// Whether receipt lookup answers.
    pub receipts: bool,
}

/// Completion webhooks to the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookSpec {
    /// Extra deliveries under the same event id.
    pub repeat_same_event: u32,
    /// Extra deliveries under new event ids.
    pub extra_event_ids: u32,
}

/// The downstream's setup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DownstreamSpec {
    /// Per service (`tickets`, `charges`, `messages`, `jobs`); absent ones keep the defaults
    /// (keys honoured, receipts on).
    pub services: BTreeMap<String, ServiceSpec>,
    /// How long a job runs.
    pub job_duration: Option<Duration>,
    /// Webhooks, if any.
    pub webhook: Option<WebhookSpec>,
}

/// The simulated queue's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueSpec {
    /// Every envelope is delivered twice.
    pub duplicate_deliveries: bool,
    /// How long an envelope waits in the queue before a consumer can take it (queues have
    /// latency; `None`: at once).
    pub delivery_delay: Option<Duration>,
}

/// Contract timing overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimingSpec {
    /// Claim lease.
    pub lease: Option<Duration>,
    /// Record retention.
    pub retention: Option<Duration>,
    /// The downstream timeout the harness asks a worker process to use
    /// (`REPLAYLAB_DOWNSTREAM_TIMEOUT_MS`; 2 s when unset). Simulated executors keep their own:
    /// simulated time has no load to leave margin for, and an `expect` with `told = true`
    /// checks that a late answer the scenario relies on reached its worker.
    pub downstream_timeout: Option<Duration>,
}

/// When a downstream pause point stops a worker, relative to its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Moment {
    /// Before the request leaves the worker.
    Before,
    /// After the downstream answered (or the connection failed), before the executor sees it.
    After,
}

/// Which downstream requests a downstream pause point stops at. Every field that is set must
/// hold; the default stops at any request.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestFilter {
    /// Before: only a request that can commit an effect (a state-changing business request:
    /// `POST /v1/tickets`, `PATCH /v1/tickets/{id}`, `POST /v1/charges`, `POST /v1/messages`,
    /// `POST /v1/jobs`), never a read or a receipt lookup. After: only a request for which the
    /// downstream committed an effect, whatever answer (if any) came back.
    pub effect: bool,
    /// Only this HTTP method (`POST`, case-insensitive).
    pub method: Option<String>,
    /// Only this path: exact, or a prefix ending in `*` (`/v1/tickets/*`); no query.
    pub path: Option<String>,
    /// Only requests that carry out this tool's effect (`payments.charge` is
    /// `POST /v1/charges`, `tickets.set_status` is `PATCH /v1/tickets/{id}`, ...).
    pub tool: Option<String>,
    /// Only requests that carry the business content of a call made for this operation (a key
    /// of the scenario's `[operations]`), whichever worker or task sends them.
    pub operation: Option<String>,
}

impl RequestFilter {
    /// The request part as scenarios write it: `POST /v1/charges`, `POST`, `/v1/charges`.
    pub fn request_text(&self) -> Option<String> {
        match (&self.method, &self.path) {
            (None, None) => None,
            (Some(method), None) => Some(method.clone()),
            (None, Some(path)) => Some(path.clone()),
            (Some(method), Some(path)) => Some(format!("{method} {path}")),
        }
    }
}

/// Where a worker can be paused: boundaries the harness owns.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PausePoint {
    /// Around a downstream request that passes the filter.
    Downstream {
        /// Before it leaves or after its answer.
        moment: Moment,
        /// Which requests.
        filter: RequestFilter,
    },
    /// Before the named store call (executors that use the store gate).
    BeforeStore(String),
    /// After the named store call committed.
    AfterStore(String),
    /// After a queue consumer finished an envelope, before the queue hears the ack.
    BeforeQueueAck,
}

impl PausePoint {
    /// A downstream point with only the effect qualifier.
    pub fn downstream(moment: Moment, effect: bool) -> PausePoint {
        PausePoint::Downstream { moment, filter: RequestFilter { effect, ..RequestFilter::default() } }
    }

    /// Parses `downstream:before`, `downstream:before:effect` (before a request that can
    /// commit an effect), `downstream:after`, `downstream:after:committed` (after a request the
    /// downstream committed an effect for), `store:before:NAME`, `store:after:NAME` or
    /// `queue:before_ack`. Method, path and tool filters are given beside the point.
    pub fn parse(text: &str) -> Option<PausePoint> {
        match text {
            "downstream:before" => Some(PausePoint::downstream(Moment::Before, false)),
            "downstream:before:effect" => Some(PausePoint::downstream(Moment::Before, true)),
            "downstream:after" => Some(PausePoint::downstream(Moment::After, false)),
            "downstream:after:committed" => Some(PausePoint::downstream(Moment::After, true)),
            "queue:before_ack" => Some(PausePoint::BeforeQueueAck),
            _ => {
                if let Some(name) = text.strip_prefix("store:before:") {
                    (!name.is_empty()).then(|| PausePoint::BeforeStore(name.to_owned()))
                } else if let Some(name) = text.strip_prefix("store:after:") {
                    (!name.is_empty()).then(|| PausePoint::AfterStore(name.to_owned()))
                } else {
                    None
                }
            }
        }
    }

    /// The filter of a downstream point.
    pub fn filter(&self) -> Option<&RequestFilter> {
        match self {
            PausePoint::Downstream { filter, .. } => Some(filter),
            _ => None,
        }
    }

    /// The point with its filters, for messages: `downstream:after:committed POST /v1/charges`,
    /// `downstream:before:effect for payments.charge`.
    pub fn describe(&self) -> String {
        let mut text = self.to_string();
        if let Some(filter) = self.filter() {
            if let Some(request) = filter.request_text() {
                text.push(' ');
                text.push_str(&request);
            }
            if let Some(tool) = &filter.tool {
                text.push_str(&format!(" for {tool}"));
            }
            if let Some(operation) = &filter.operation {
                text.push_str(&format!(" of operation {operation}"));
            }
        }
        text
    }
}

/// The point alone, as scenarios write it in `point` (filters are separate fields).
impl std::fmt::Display for PausePoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PausePoint::Downstream { moment: Moment::Before, filter } if filter.effect => {
                f.write_str("downstream:before:effect")
            }
            PausePoint::Downstream { moment: Moment::Before, .. } => f.write_str("downstream:before"),
            PausePoint::Downstream { moment: Moment::After, filter } if filter.effect => {
                f.write_str("downstream:after:committed")
            }
            PausePoint::Downstream { moment: Moment::After, .. } => f.write_str("downstream:after"),
            PausePoint::BeforeStore(name) => write!(f, "store:before:{name}"),
            PausePoint::AfterStore(name) => write!(f, "store:after:{name}"),
            PausePoint::BeforeQueueAck => f.write_str("queue:before_ack"),
        }
    }
}

/// Which worker a crash or restart step means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerRef {
    /// `worker-2`.
    Named(String),
    /// The worker that reached the named pause (a pause on any worker).
    PausedAt(String),
}

impl std::fmt::Display for WorkerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerRef::Named(name) => f.write_str(name),
            WorkerRef::PausedAt(pause) => write!(f, "the worker paused at \"{pause}\""),
        }
    }
}

/// The placeholder a call's arguments may hold for the ticket an operation created:
/// `${ticket_of:NAME}` becomes that ticket's id (read from the ledger) when the call is sent.
pub const TICKET_OF_PLACEHOLDER: &str = "${ticket_of:";

/// The operations `arguments` names in `${ticket_of:NAME}` placeholders, in order.
pub fn ticket_placeholders(arguments: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = arguments;
    while let Some(start) = rest.find(TICKET_OF_PLACEHOLDER) {
        let after = &rest[start + TICKET_OF_PLACEHOLDER.len()..];
        let Some(end) = after.find('}') else { break };
        let name = &after[..end];
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            names.push(name.to_owned());
        }
        rest = &after[end + 1..];
    }
    names
}

/// One tool call the agent makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallStep {
    /// Names the call for later steps (`expect`, `await`).
    pub id: String,
    /// The worker it goes to.
    pub worker: String,
    /// The operation (a key of the scenario's `[operations]`).
    pub operation: String,
    /// Tool name.
    pub tool: String,
    /// Tool version.
    pub version: String,
    /// The arguments, as the exact JSON text to send (after `${ticket_of:NAME}` placeholders
    /// are replaced).
    pub arguments: String,
    /// Overrides the operation's actor.
    pub actor: Option<String>,
    /// The worker's answer is lost on the way back: the agent never sees it.
    pub lose_answer: bool,
    /// Whether the runner waits for the answer before the next step.
    pub wait: bool,
}

/// An expectation on what the agent saw for one call, poll or reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectOutcome {
    /// The call, poll or reconcile id.
    pub call: String,
    /// The acceptable statuses.
    pub status: Vec<OutcomeStatus>,
    /// The reason code, when rejected.
    pub reason: Option<ReasonCode>,
    /// The effect reference must equal that of this other call's outcome.
    pub same_reference_as: Option<String>,
    /// A premise: this other call was still outstanding (its worker had not answered it) when
    /// this one was answered. When it was not (a real process took this call up too late), the
    /// expectation is not judged and the run is `unknown`.
    pub while_outstanding: Option<String>,
    /// A premise: the call's worker was told. Every downstream request it sent while serving
    /// the call got its answer (or its transport failure) before the call was answered: none
    /// was given up at the worker's own timeout. When one was (a late answer the scenario
    /// relies on came after the worker stopped waiting), the expectation is not judged and the
    /// run is `unknown`.
    pub told: bool,
    /// A premise: the call's worker was alone on the call's operation. No worker took the
    /// operation up on its own (a sweep or a recovery no agent call, queue delivery or webhook
    /// asked for: a request for the operation sent while its worker handled none of them) before
    /// the call was answered. When one did (on a busy machine, or beside workers the scenario
    /// does not name, a lease can run out and a sweep come before the agent does), the
    /// expectation, written for the call's worker alone, is not judged and the run is `unknown`.
    pub alone: bool,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKind {
    /// One tool call.
    Call(CallStep),
    /// Several tool calls sent at once.
    Concurrent(Vec<CallStep>),
    /// Wait for a call sent with `wait = false` to be answered (or given up).
    Await {
        /// The call id.
        call: String,
    },
    /// The agent polls an operation.
    Poll {
        /// Names the poll for `expect`.
        id: String,
        /// The operation.
        operation: String,
        /// The worker asked.
        worker: String,
    },
    /// The agent asks for reconciliation of an operation.
    Reconcile {
        /// Names it for `expect`.
        id: String,
        /// The operation.
        operation: String,
        /// The worker asked.
        worker: String,
    },
    /// Install a fault rule in the downstream.
    Fault {
        /// A name for `release_hold`.
        name: Option<String>,
        /// The rule.
        rule: FaultRule,
    },
    /// Let the requests held by a `hold` rule go on.
    ReleaseHold {
        /// The fault's name.
        name: String,
    },
    /// Pause `worker` (or whichever worker gets there first) the next time it reaches `point`.
    Pause {
        /// Names the pause for `wait_paused` and `release`.
        name: String,
        /// The worker, or `None` for any worker.
        worker: Option<String>,
        /// Where.
        point: PausePoint,
    },
    /// Run until the named pause is reached.
    WaitPaused {
        /// The pause.
        name: String,
    },
    /// Let a paused worker go on.
    Release {
        /// The pause.
        name: String,
    },
    /// Kill a worker (its process state is lost; its store is not).
    Crash {
        /// The worker.
        worker: WorkerRef,
    },
    /// Start a crashed worker again.
    Restart {
        /// The worker.
        worker: WorkerRef,
    },
    /// Let simulated time pass.
    Advance {
        /// How long.
        by: Duration,
        /// Timed from when this call's worker first sent a request downstream (it had claimed
        /// the operation by then), not from the step: a lease that must run out does so
        /// however slowly a real process took the call up.
        since_request_of: Option<String>,
    },
    /// Revoke an actor's permission (for one tool, or all).
    Revoke {
        /// The actor.
        actor: String,
        /// The tool, or every tool.
        tool: Option<String>,
    },
    /// A person edits the ticket an operation created (its version goes up).
    HumanEdit {
        /// The operation whose ticket is edited.
        ticket_of: String,
    },
    /// Check what the agent saw.
    Expect(ExpectOutcome),
    /// Check the ledger: how many effects an operation (or the whole run) made.
    ExpectEffects {
        /// The operation, or every operation.
        operation: Option<String>,
        /// Only effects of this kind (`ticket_created`, `message_sent`, ...).
        kind: Option<String>,
        /// The exact count.
        count: u32,
    },
}

/// A step and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// 1-based line in the file.
    pub line: usize,
    /// What it does.
    pub kind: StepKind,
}

/// A validated scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// `S01`.
    pub id: String,
    /// `duplicate_same_key`.
    pub name: String,
    /// The rows it covers.
    pub rows: Vec<Row>,
    /// One sentence: what it does.
    pub summary: String,
    /// The contract it checks, in one sentence.
    pub expected: String,
    /// How many workers (`worker-1`..).
    pub workers: u32,
    /// The operations, by name.
    pub operations: BTreeMap<String, OperationSpec>,
    /// The downstream's setup.
    pub downstream: DownstreamSpec,
    /// The queue's behaviour.
    pub queue: QueueSpec,
    /// Lease and retention overrides.
    pub timing: TimingSpec,
    /// How long the healed world runs after the steps.
    pub settle: Duration,
    /// The seed a case was found with (exploration writes it; `replaylab run --case` uses it).
    pub seed: Option<u64>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Where it was read from.
    pub source: String,
    /// The 1-based line of its `id` key in `source`: where a report points a reader (a CI
    /// annotation) at the scenario as a whole.
    pub line: usize,
}

impl Scenario {
    /// `S01_duplicate_same_key`.
    pub fn full_name(&self) -> String {
        format!("{}_{}", self.id, self.name)
    }

    /// The names of the workers, `worker-1`..`worker-N`.
    pub fn worker_names(&self) -> Vec<String> {
        (1..=self.workers).map(|n| format!("worker-{n}")).collect()
    }

    /// Every tool call the scenario makes, in step order (those of `concurrent` steps
    /// included).
    pub fn calls(&self) -> impl Iterator<Item = &CallStep> {
        self.steps.iter().flat_map(|step| match &step.kind {
            StepKind::Call(call) => std::slice::from_ref(call),
            StepKind::Concurrent(calls) => calls.as_slice(),
            _ => &[],
        })
    }

    /// What the scenario needs of the executor under test: the tools it calls, a queue
    /// consumer for a queued tool and delayed jobs for a delayed-job tool (as `contracts` say),
    /// a webhook receiver when the downstream sends webhooks for its jobs, and `reconcile` when the agent
    /// reconciles. An executor that lacks one of them cannot take part: the run is `not
    /// applicable`.
    pub fn needs(&self, contracts: &ContractSet) -> Needs {
        let mut needs = Needs {
            reconcile: self.steps.iter().any(|step| matches!(step.kind, StepKind::Reconcile { .. })),
            poll: self.steps.iter().any(|step| matches!(step.kind, StepKind::Poll { .. })),
            ..Needs::default()
        };
        for call in self.calls() {
            needs.tools.insert(call.tool.clone());
            needs.versions.insert((call.tool.clone(), call.version.clone()));
            match contracts.get(&call.tool, &call.version).map(|contract| contract.execution) {
                Some(Execution::Queued) => needs.queue_consumer = true,
                Some(Execution::DelayedJob) => needs.delayed_jobs = true,
                Some(Execution::Direct) | None => {}
            }
        }
        // The downstream's webhooks announce finished jobs: without a job there are none.
        needs.webhooks = self.downstream.webhook.is_some() && needs.delayed_jobs;
        needs
    }

    /// The line of the step that names `call` as a call, poll or reconcile id.
    pub fn call_ids(&self) -> Vec<(String, usize)> {
        let mut ids = Vec::new();
        for step in &self.steps {
            match &step.kind {
                StepKind::Call(call) => ids.push((call.id.clone(), step.line)),
                StepKind::Concurrent(calls) => ids.extend(calls.iter().map(|c| (c.id.clone(), step.line))),
                StepKind::Poll { id, .. } | StepKind::Reconcile { id, .. } => {
                    ids.push((id.clone(), step.line))
                }
                _ => {}
            }
        }
        ids
    }
}
