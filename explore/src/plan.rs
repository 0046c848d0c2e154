//! A case as a scenario: [`Case::to_scenario`] plays each action where its premise can hold,
//! knowing which operations were called (and whether plainly), and whose permission was
//! revoked.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fake_downstream::{FaultAction, FaultRule, IdempotencyMode, RuleMatch, Times};
use protocol::ExecutorCapabilities;
use scenarios::{
    CallStep, DownstreamSpec, Moment, OperationSpec, PausePoint, QueueSpec, Row, Scenario, ServiceSpec, Step,
    StepKind, TimingSpec, WebhookSpec, WorkerRef, DEFAULT_TOOL_VERSION,
};

use crate::{
    ActorRevoked, Case, CaseAction, CaseFault, CaseOperation, CaseTool, CrashMoment, Variant, CASE_LEASE,
    CASE_RETENTION, SLOW_QUEUE_DELAY,
};

/// Long enough for a queue consumer to pick a new envelope up and send it downstream.
const QUEUE_MOMENT: Duration = Duration::from_secs(1);
/// How long a lookups-down case lets pass after its swallowed call: long enough for every
/// reconciliation try to fail (S30).
const LOOKUPS_DOWN_WAIT: Duration = Duration::from_secs(10);
/// How long a crashed worker that stays down waits before the agent polls its operation on
/// another worker: past the lease, so the claim is abandoned (S28).
const STAYS_DOWN_WAIT: Duration = Duration::from_millis(2_000);
/// How long a job runs, and a long one.
const JOB_DURATION: Duration = Duration::from_secs(2);
/// See [`JOB_DURATION`].
const LONG_JOB_DURATION: Duration = Duration::from_secs(6);
/// The settle time of every case: past the lease and the reference's reconciliation tries.
const CASE_SETTLE: Duration = Duration::from_secs(10);

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

    /// The tool's name.
    pub fn name(self) -> &'static str {
        match self {
            CaseTool::Ticket => "tickets.create",
            CaseTool::Charge => "payments.charge",
            CaseTool::Message => "messages.send",
            CaseTool::Job => "jobs.submit",
            CaseTool::SetStatus => "tickets.set_status",
        }
    }

    /// The tool's other version a [`CaseAction::NewVersion`] upgrades to, if it has one.
    pub fn new_version(self) -> Option<&'static str> {
        match self {
            CaseTool::Ticket => Some("2026-09-01"),
            CaseTool::Charge => Some("2026-10-01"),
            CaseTool::Message | CaseTool::Job | CaseTool::SetStatus => None,
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

    /// The actor of the operations of the other steps' parity: the second actor of
    /// [`CaseAction::OtherActor`].
    fn other_actor_of(operation: &CaseOperation) -> String {
        format!("agent-{}", (operation.step + 1) % 2)
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
        let point = effect_point(Moment::After, &name);
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

    /// A fresh operation's first call held before its effect (the claim is made, nothing
    /// sent), while the same operation arrives under its tool's other version on the next
    /// worker (S24's early upgrade); then the first call goes on.
    fn early_new_version(
        &self,
        plan: &mut Plan,
        name: &str,
        op: &CaseOperation,
        worker: u8,
        variant: Variant,
    ) {
        let Some(version) = op.tool.new_version() else { return };
        let owner = self.worker(worker);
        let Some(first) = self.call_step(plan, name, op, owner.clone(), Variant::Same, false) else {
            return;
        };
        let pause = plan.label("pause-");
        let point = effect_point(Moment::Before, name);
        plan.push(StepKind::Pause { name: pause.clone(), worker: Some(owner), point });
        self.mark_called(plan, name, op, false);
        let first_id = first.id.clone();
        plan.push(StepKind::Call(first));
        plan.push(StepKind::WaitPaused { name: pause.clone() });
        if let Some(mut upgraded) =
            self.call_step(plan, name, op, self.worker(worker.wrapping_add(1)), variant, true)
        {
            upgraded.version = version.to_owned();
            plan.push(StepKind::Call(upgraded));
        }
        plan.push(StepKind::Release { name: pause });
        plan.push(StepKind::Await { call: first_id });
    }

    /// How long jobs run in this case.
    fn job_duration(&self) -> Duration {
        if self.long_jobs {
            LONG_JOB_DURATION
        } else {
            JOB_DURATION
        }
    }

    /// Long enough for a consumer to take a new envelope and send it: the queue's delay, if
    /// any, and a moment more.
    fn queue_moment(&self) -> Duration {
        if self.slow_queue {
            SLOW_QUEUE_DELAY + QUEUE_MOMENT
        } else {
            QUEUE_MOMENT
        }
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
                    plan.push(StepKind::Advance { by: self.queue_moment(), since_request_of: None });
                }
            }
            CaseAction::CrashDuringCall { operation, worker, moment, stays_down } => {
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
                let point = effect_point(moment, &name);
                // A queued tool's effect is sent by whichever worker consumes it.
                let paused_worker = (!op.tool.queued()).then(|| caller.clone());
                plan.push(StepKind::Pause { name: pause.clone(), worker: paused_worker, point });
                self.mark_called(plan, &name, &op, false);
                plan.push(StepKind::Call(step));
                plan.push(StepKind::WaitPaused { name: pause.clone() });
                plan.push(StepKind::Crash { worker: WorkerRef::PausedAt(pause.clone()) });
                // A worker that stays down: its lease runs out, and the agent asks another
                // worker how the abandoned operation stands (a queued tool's consumer is any
                // worker, so there is no other to be sure of).
                if stays_down && self.workers > 1 && !op.tool.queued() {
                    plan.push(StepKind::Advance { by: STAYS_DOWN_WAIT, since_request_of: None });
                    let id = plan.label("query-");
                    plan.push(StepKind::Poll {
                        id,
                        operation: name,
                        worker: self.worker(worker.wrapping_add(1)),
                    });
                }
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
            CaseAction::OtherActor { operation, worker, revoked } => {
                let Some((name, op)) = self.operation_at(operation) else { return };
                if !plan.called.contains(&name) {
                    self.plain_call(plan, &name, &op, self.worker(0), Variant::Same);
                }
                let tool = op.tool.name().to_owned();
                let other = Self::other_actor_of(&op);
                // The first actor loses its permission only after a plain first call: an
                // operation whose first attempt may still commit belongs to its first actor,
                // and a retry by another could make its effect after the revocation.
                let revoke = match revoked {
                    ActorRevoked::First if plan.clean.contains(&name) => Some(Self::actor_of(&op)),
                    ActorRevoked::Other => Some(other.clone()),
                    ActorRevoked::First | ActorRevoked::Neither => None,
                };
                if let Some(actor) = revoke {
                    plan.revoked.insert((actor.clone(), tool.clone()));
                    plan.push(StepKind::Revoke { actor, tool: Some(tool) });
                }
                if let Some(mut step) =
                    self.call_step(plan, &name, &op, self.worker(worker), Variant::Same, true)
                {
                    step.actor = Some(other);
                    plan.push(StepKind::Call(step));
                }
            }
            CaseAction::NewVersion { operation, worker, variant, early } => {
                if early {
                    let fresh = self.fresh(plan, operation).filter(|(_, op)| op.tool.new_version().is_some());
                    if let Some((name, op)) = fresh {
                        return self.early_new_version(plan, &name, &op, worker, variant);
                    }
                }
                let Some((name, op)) = self.operation_at(operation) else { return };
                let Some(version) = op.tool.new_version() else {
                    return self.plan_action(plan, CaseAction::Call { operation, worker, variant });
                };
                if !plan.called.contains(&name) {
                    self.plain_call(plan, &name, &op, self.worker(0), Variant::Same);
                }
                if let Some(mut step) = self.call_step(plan, &name, &op, self.worker(worker), variant, true) {
                    step.version = version.to_owned();
                    plan.push(StepKind::Call(step));
                }
            }
            CaseAction::LookupsDown { operation, worker } => {
                let Some((name, op)) = self.fresh(plan, operation) else {
                    return self
                        .plan_action(plan, CaseAction::Call { operation, worker, variant: Variant::Same });
                };
                let looks_up = self.services[op.tool.service_index()].receipts;
                if !looks_up || !matches!(op.tool, CaseTool::Ticket | CaseTool::Charge) {
                    return self.plan_action(
                        plan,
                        CaseAction::FaultyCall { operation, worker, fault: CaseFault::DropBeforeCommit },
                    );
                }
                let Some(step) = self.call_step(plan, &name, &op, self.worker(worker), Variant::Same, true)
                else {
                    return;
                };
                plan.push(StepKind::Fault {
                    name: None,
                    rule: Self::fault_rule(&op, FaultAction::DropBeforeCommit),
                });
                let lookups = FaultRule {
                    matches: RuleMatch {
                        method: Some("GET".into()),
                        path: Some("/v1/receipts/*".into()),
                        tenant: Some(TENANTS[usize::from(op.tenant % 2)].into()),
                        ..RuleMatch::default()
                    },
                    action: FaultAction::CommitThenError(503),
                    times: Times::Always,
                };
                plan.push(StepKind::Fault { name: None, rule: lookups });
                self.mark_called(plan, &name, &op, false);
                plan.push(StepKind::Call(step));
                plan.push(StepKind::Advance { by: LOOKUPS_DOWN_WAIT, since_request_of: None });
            }
            CaseAction::NoticeFault { operation, fault } => {
                let count = self.operations.len() as u8;
                let job = (0..count)
                    .filter_map(|offset| self.fresh(plan, operation.wrapping_add(offset)))
                    .find(|(_, op)| op.tool == CaseTool::Job);
                let Some((name, op)) = job else {
                    return self.plan_action(plan, CaseAction::FaultyCall { operation, worker: 0, fault });
                };
                let Some(step) = self.call_step(plan, &name, &op, self.worker(0), Variant::Same, true) else {
                    return;
                };
                let notice = CaseOperation { tool: CaseTool::Message, ..op };
                plan.push(StepKind::Fault { name: None, rule: Self::fault_rule(&notice, fault.action()) });
                self.mark_called(plan, &name, &op, true);
                plan.push(StepKind::Call(step));
                plan.push(StepKind::Advance {
                    by: self.job_duration() + QUEUE_MOMENT,
                    since_request_of: None,
                });
                let id = plan.label("query-");
                plan.push(StepKind::Poll { id, operation: name, worker: self.worker(0) });
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
                job_duration: Some(self.job_duration()),
                webhook: self.webhooks.then_some(WebhookSpec { repeat_same_event: 1, extra_event_ids: 1 }),
            },
            queue: QueueSpec {
                duplicate_deliveries: self.duplicate_deliveries,
                delivery_delay: self.slow_queue.then_some(SLOW_QUEUE_DELAY),
            },
            timing: TimingSpec {
                lease: Some(CASE_LEASE),
                retention: Some(CASE_RETENTION),
                downstream_timeout: None,
            },
            settle: CASE_SETTLE,
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

/// The pause point `moment` a request that can commit an effect for `operation`.
fn effect_point(moment: Moment, operation: &str) -> PausePoint {
    let mut point = PausePoint::downstream(moment, true);
    if let PausePoint::Downstream { filter, .. } = &mut point {
        filter.operation = Some(operation.to_owned());
    }
    point
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServiceChoice;

    fn case(tools: &[CaseTool], actions: Vec<CaseAction>) -> Case {
        Case {
            seed: 1,
            workers: 2,
            services: [ServiceChoice { honoured: true, receipts: true }; 4],
            duplicate_deliveries: false,
            webhooks: false,
            long_jobs: false,
            slow_queue: false,
            operations: tools
                .iter()
                .enumerate()
                .map(|(step, tool)| CaseOperation { tenant: 0, step: step as u8, tool: *tool, content: 0 })
                .collect(),
            actions,
        }
    }

    /// The steps in a few words: `call tool@version by actor`, `revoke actor`, ...
    fn steps(case: &Case) -> Vec<String> {
        case.to_scenario()
            .steps
            .iter()
            .map(|step| match &step.kind {
                StepKind::Call(call) => format!(
                    "call {}@{} on {}{}",
                    call.tool,
                    call.version,
                    call.worker,
                    call.actor.as_ref().map(|actor| format!(" by {actor}")).unwrap_or_default()
                ),
                StepKind::Revoke { actor, .. } => format!("revoke {actor}"),
                StepKind::Fault { rule, .. } => {
                    format!("fault {} {}", rule.matches.path.as_deref().unwrap_or("*"), rule.action.name())
                }
                StepKind::Pause { point, .. } => format!("pause {point}"),
                StepKind::WaitPaused { .. } => "wait".into(),
                StepKind::Release { .. } => "release".into(),
                StepKind::Await { .. } => "await".into(),
                StepKind::Crash { .. } => "crash".into(),
                StepKind::Restart { .. } => "restart".into(),
                StepKind::Advance { by, .. } => format!("advance {}ms", by.as_millis()),
                StepKind::Poll { worker, .. } => format!("poll on {worker}"),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_second_actor_retries_after_the_revocation_it_names() {
        let other = |revoked| {
            case(&[CaseTool::Ticket], vec![CaseAction::OtherActor { operation: 0, worker: 1, revoked }])
        };
        // Step 0's own actor is agent-0; the other is agent-1.
        assert_eq!(
            steps(&other(ActorRevoked::Neither)),
            [
                "call tickets.create@2026-08-18 on worker-1",
                "call tickets.create@2026-08-18 on worker-2 by agent-1"
            ]
        );
        assert_eq!(
            steps(&other(ActorRevoked::First)),
            [
                "call tickets.create@2026-08-18 on worker-1",
                "revoke agent-0",
                "call tickets.create@2026-08-18 on worker-2 by agent-1"
            ]
        );
        assert_eq!(steps(&other(ActorRevoked::Other))[1], "revoke agent-1");
        // After a faulty first call, the first actor is not revoked: its request may still commit.
        let faulty = case(
            &[CaseTool::Ticket],
            vec![
                CaseAction::FaultyCall { operation: 0, worker: 0, fault: CaseFault::CommitThenDrop },
                CaseAction::OtherActor { operation: 0, worker: 1, revoked: ActorRevoked::First },
            ],
        );
        assert!(!steps(&faulty).iter().any(|step| step.starts_with("revoke")), "{:?}", steps(&faulty));
    }

    #[test]
    fn a_version_upgrade_calls_the_tools_other_version() {
        let upgrade = |tool, early| {
            case(
                &[tool],
                vec![CaseAction::NewVersion { operation: 0, worker: 1, variant: Variant::Same, early }],
            )
        };
        assert_eq!(
            steps(&upgrade(CaseTool::Ticket, false)),
            ["call tickets.create@2026-08-18 on worker-1", "call tickets.create@2026-09-01 on worker-2"]
        );
        assert_eq!(
            steps(&upgrade(CaseTool::Charge, true)),
            [
                "pause downstream:before:effect",
                "call payments.charge@2026-08-18 on worker-2",
                "wait",
                "call payments.charge@2026-10-01 on worker-1",
                "release",
                "await"
            ],
            "early: while the first call is held before its effect (S24)"
        );
        // A tool with one version is retried plainly.
        assert_eq!(
            steps(&upgrade(CaseTool::Message, false)),
            ["call messages.send@2026-08-18 on worker-2"],
            "a plain call"
        );
    }

    #[test]
    fn lookups_down_swallow_the_request_and_fail_every_lookup_until_healed() {
        let down = case(&[CaseTool::Charge], vec![CaseAction::LookupsDown { operation: 0, worker: 0 }]);
        assert_eq!(
            steps(&down),
            [
                "fault /v1/charges drop_before_commit",
                "fault /v1/receipts/* commit_then_error",
                "call payments.charge@2026-08-18 on worker-1",
                "advance 10000ms"
            ]
        );
        let scenario = down.to_scenario();
        let lookups = scenario.steps.iter().find_map(|step| match &step.kind {
            StepKind::Fault { rule, .. } if rule.matches.method.as_deref() == Some("GET") => Some(rule.times),
            _ => None,
        });
        assert_eq!(lookups, Some(Times::Always));
        // Without a receipt lookup there is nothing to take down: a faulty call.
        let mut blind = down.clone();
        blind.services[1].receipts = false;
        assert_eq!(
            steps(&blind),
            ["fault /v1/charges drop_before_commit", "call payments.charge@2026-08-18 on worker-1"]
        );
    }

    #[test]
    fn a_faulty_notice_submits_a_job_and_polls_it_once_finished() {
        let notice = case(
            &[CaseTool::Ticket, CaseTool::Job],
            vec![CaseAction::NoticeFault { operation: 0, fault: CaseFault::ResetBeforeCommit }],
        );
        assert_eq!(
            steps(&notice),
            [
                "fault /v1/messages reset_before_commit",
                "call jobs.submit@2026-08-18 on worker-1",
                "advance 3000ms",
                "poll on worker-1"
            ]
        );
    }

    #[test]
    fn a_crashed_worker_that_stays_down_has_its_operation_polled_elsewhere_first() {
        let crash = |stays_down| {
            case(
                &[CaseTool::Ticket],
                vec![CaseAction::CrashDuringCall {
                    operation: 0,
                    worker: 0,
                    moment: CrashMoment::BeforeEffect,
                    stays_down,
                }],
            )
        };
        assert_eq!(
            steps(&crash(true)),
            [
                "pause downstream:before:effect",
                "call tickets.create@2026-08-18 on worker-1",
                "wait",
                "crash",
                "advance 2000ms",
                "poll on worker-2",
                "restart"
            ]
        );
        assert_eq!(steps(&crash(false))[4], "restart");
    }

    #[test]
    fn a_slow_queue_delays_every_delivery() {
        let mut slow = case(
            &[CaseTool::Message],
            vec![CaseAction::Call { operation: 0, worker: 0, variant: Variant::Same }],
        );
        assert_eq!(slow.to_scenario().queue.delivery_delay, None);
        slow.slow_queue = true;
        assert_eq!(slow.to_scenario().queue.delivery_delay, Some(SLOW_QUEUE_DELAY));
    }

    #[test]
    fn cases_saved_before_the_new_kinds_still_read() {
        let old = r#"{"seed":5,"workers":1,"services":[{"honoured":true,"receipts":true},{"honoured":true,"receipts":true},{"honoured":true,"receipts":true},{"honoured":true,"receipts":true}],"duplicate_deliveries":false,"webhooks":false,"operations":[{"tenant":0,"step":0,"tool":"Ticket","content":0}],"actions":[{"CrashDuringCall":{"operation":0,"worker":0,"moment":"AfterCommit"}}]}"#;
        let case: Case = serde_json::from_str(old).expect("an old saved case reads");
        assert!(!case.slow_queue && !case.long_jobs);
        assert_eq!(
            case.actions,
            [CaseAction::CrashDuringCall {
                operation: 0,
                worker: 0,
                moment: CrashMoment::AfterCommit,
                stays_down: false
            }]
        );
    }
}
