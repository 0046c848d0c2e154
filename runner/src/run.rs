//! Runs one scenario with one seed against one executor: builds the world, plays the steps,
//! heals every fault and lets the world settle, polls every operation one last time, then
//! checks the oracles and the scenario's expectations. Every run is bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use fake_downstream::{Effect, FaultRule, Times};
use protocol::{ContractSet, OperationRef, ToolCall};
use scenarios::{CallStep, PausePoint, Scenario, StepKind, WorkerRef, TICKET_OF_PLACEHOLDER};
use serde_json::value::RawValue;

use crate::executors::ExecutorSpec;
use judge::attribution::tool_effect_kind;
use judge::history::{self, Event, EventKind, RequestKind};
use judge::oracles::{self, Violation, FINAL_POLL_PREFIX};
use judge::text::{self, panic_message, quoted, quoted_all, shell_quote};
use judge::verdict::{RunResult, Verdict};
use world::AGENT_TIMEOUT;
use world::{AgentCommand, AgentResult, PointReached, Shared, World};

/// How long a `wait_paused` step runs the world before it gives up (the point was never
/// reached: the run cannot decide).
const PAUSE_PATIENCE: Duration = Duration::from_secs(30);
/// Extra simulated time, beyond the agent's own timeout, that the runner waits for a call.
const CALL_SLACK: Duration = Duration::from_secs(5);
/// After settling, how long the final polls may take.
const FINAL_QUERY_PATIENCE: Duration = Duration::from_secs(30);
/// How much simulated time the settle phase may add for work still running (jobs, queue
/// delivery delays), past the loader's 24 h cap on each.
const SIMULATED_WORK_PATIENCE: Duration = Duration::from_secs(49 * 3600);
/// How much real time the settle phase may add for work still running.
const REAL_WORK_PATIENCE: Duration = Duration::from_secs(60);
/// When the steps are done but a fault rule has not fired yet (a queued request still on its
/// way), how long the world runs on, faults armed, before the premise is judged.
const FAULT_GRACE: Duration = Duration::from_secs(3);
/// How long the world must have been idle, in stepped time, before the runner skips ahead: a
/// few ticks, so that every host has run whatever the last activity left ready to run
/// (closing connections, finishing tasks), and that shows up as activity again if it is.
pub const QUIET_WINDOW: Duration = Duration::from_millis(30);

/// Everything a finished run leaves behind.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// The verdict and its reasons.
    pub result: RunResult,
    /// The ordered history.
    pub history: Vec<Event>,
    /// The downstream's ledger.
    pub ledger: Vec<Effect>,
    /// Simulated time turmoil stepped through; the rest of the run's span was idle time
    /// skipped (see [`world::clock`]). What a run costs grows with this.
    pub stepped: Duration,
    /// What the run's premises and oracles covered (exploration sums it up).
    pub coverage: RunCoverage,
    /// The executor's `tracing` events, when the run was asked to log ([`run_logged`]).
    pub log: Vec<crate::log::LogLine>,
}

/// What one run covered: the faults and crashes it asked for and got, and the oracles that
/// had something to judge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCoverage {
    /// Fault rules installed.
    pub faults_installed: u32,
    /// Of those, rules that fired as often as they were meant to.
    pub faults_fired: u32,
    /// Workers crashed.
    pub crashes: u32,
    /// Of those, crashes right after a request the downstream committed an effect for.
    pub crashes_after_commit: u32,
    /// The oracles (`O1`..) that had something to judge.
    pub exercised: BTreeSet<&'static str>,
    /// The rules that had something to judge but could not here
    /// ([`judge::oracles::Judgement::not_judged`]).
    pub not_judged: BTreeSet<&'static str>,
    /// Store writes a worker made for a call while another worker, called for the same
    /// operation after the first call's lease had run out, was still working on it: a stale
    /// owner writing inside the new owner's window ([`stale_writes`]).
    pub stale_writes: u32,
}

/// Counts the store writes a worker made, serving a call, while another worker was serving a
/// later call for the same operation that arrived after the first call's lease had run out
/// (and had not been answered yet). Judged from what the harness sees: the calls, their
/// workers and times, the contract's lease, and the store calls through the gate.
pub fn stale_writes(history: &[Event], contracts: &ContractSet) -> u32 {
    struct Call<'a> {
        worker: &'a str,
        operation: &'a str,
        sent_ms: u64,
        lease_ms: u64,
        answered_ms: u64,
    }
    let mut calls: BTreeMap<&str, Call<'_>> = BTreeMap::new();
    for event in history {
        match &event.kind {
            EventKind::CallSent { label, worker, operation, tool, tool_version, .. } => {
                let lease_ms = contracts.get(tool, tool_version).map_or(u64::MAX, |contract| {
                    u64::try_from(contract.lease.as_millis()).unwrap_or(u64::MAX)
                });
                calls.insert(
                    label,
                    Call { worker, operation, sent_ms: event.at_ms, lease_ms, answered_ms: u64::MAX },
                );
            }
            EventKind::Answered { label, .. } => {
                if let Some(call) = calls.get_mut(label.as_str()) {
                    call.answered_ms = call.answered_ms.min(event.at_ms);
                }
            }
            _ => {}
        }
    }
    let mut count = 0;
    for event in history {
        let EventKind::StoreCommitted { worker, serving: Some(label), .. } = &event.kind else { continue };
        let Some(stale) = calls.get(label.as_str()).filter(|call| call.worker == worker) else { continue };
        let window = calls.values().any(|newer| {
            newer.operation == stale.operation
                && newer.worker != stale.worker
                && newer.sent_ms >= stale.sent_ms.saturating_add(stale.lease_ms)
                && newer.sent_ms < event.at_ms
                && event.at_ms < newer.answered_ms
        });
        count += u32::from(window);
    }
    count
}

/// A fault a scenario installed, for its premise.
struct InstalledFault {
    line: usize,
    id: fake_downstream::FaultRuleId,
    rule: FaultRule,
}

/// Why a run stopped early.
enum Stop {
    /// The run could not decide (a pause point never reached, a step that cannot apply).
    Undecided(String),
    /// A run limit was hit.
    Limit(String),
}

struct Runner {
    world: Box<dyn World>,
    shared: Rc<Shared>,
    scenario: Scenario,
    /// The pauses armed and not reached yet: the worker and point each waits for.
    barriers: BTreeMap<String, (Option<String>, PausePoint)>,
    /// The pauses that hold a worker now, with where.
    paused: BTreeMap<String, PointReached>,
    /// Which worker reached each pause (kept after release, for `crash paused = NAME`).
    reached: BTreeMap<String, String>,
    crashed: Vec<String>,
    calls: usize,
    attempts: BTreeMap<String, u32>,
    /// The arguments each operation's calls were sent with, placeholders resolved, by the text
    /// the scenario wrote: a retry sends exactly what the first call did.
    resolved: BTreeMap<(String, String), String>,
    faults: BTreeMap<String, fake_downstream::FaultRuleId>,
    installed: Vec<InstalledFault>,
    coverage: RunCoverage,
    expectation_failures: Vec<Violation>,
    undecided: Vec<String>,
    /// Real time the scenario asked to wait (`advance`, the settle time), in a world whose
    /// clock cannot skip: where a black-box run's time went.
    waited: Duration,
    /// Whether the executor can be polled at the end (every in-process executor; a black-box
    /// server only if it serves `replaylab.poll`).
    final_polls: bool,
    /// Every restart, with how long its process took to start (the time premises name them).
    restarts: Vec<crate::timing::Restart>,
}

/// Why a scenario is not applicable to a black-box server that lacks what it needs: a tool
/// it needs is one the server neither lists under the role's name nor has bound to the role in
/// its tool map, and the note says where to bind it.
fn not_served(lacks: &[String], spec: &world::process::BlackBoxSpec) -> String {
    let tools: Vec<&str> = lacks
        .iter()
        .filter_map(|lack| lack.strip_prefix("tool ").filter(|tool| !tool.contains(' ')))
        .collect();
    let mut note =
        format!("not applicable: the scenario needs {}, which the server does not serve", lacks.join(", "));
    if !tools.is_empty() {
        let file = spec
            .tool_map
            .as_ref()
            .map(|map| map.path.display().to_string())
            .unwrap_or_else(|| world::toolmap::FILE_NAME.to_owned());
        note.push_str(&format!(
            ": its tools/list names no {}, and {file} binds none of its tools to {} (write [tools.\"{}\"] there; `replaylab init` writes a starting file)",
            tools.join(" or "),
            if tools.len() == 1 { "that role" } else { "those roles" },
            tools[0]
        ));
    }
    note
}

/// What `scenario` needs of the executor (`Scenario::needs`), against a server whose tool map
/// is `map`: a queued role (`messages.send`) bound to a vendor twin's route is the server's own
/// call to the vendor, with no queue of replaylab's between, so it needs no queue consumer,
/// unless the scenario pauses at the queue (`queue:before_ack`) or a queued role is not bound so.
fn needs_of(scenario: &Scenario, map: Option<&world::toolmap::ToolMap>) -> protocol::Needs {
    let contracts = ContractSet::builtin();
    let mut needs = scenario.needs(&contracts);
    let Some(map) = map else { return needs };
    let pauses_at_the_queue = scenario
        .steps
        .iter()
        .any(|step| matches!(&step.kind, StepKind::Pause { point: PausePoint::BeforeQueueAck, .. }));
    let queued_elsewhere = scenario.calls().any(|call| {
        let queued = contracts
            .get(&call.tool, &call.version)
            .is_some_and(|contract| contract.execution == protocol::Execution::Queued);
        queued && !map.binding(&call.tool).is_some_and(|binding| binding.dialect.vendor)
    });
    if !pauses_at_the_queue && !queued_elsewhere {
        needs.queue_consumer = false;
    }
    needs
}

/// Runs `scenario` with `seed` against `executor`.
pub fn run(scenario: &Scenario, seed: u64, executor: &ExecutorSpec) -> RunRecord {
    run_logged(scenario, seed, executor, None)
}

/// [`run`], capturing the `tracing` events `log` lets through (the executor's and the
/// harness's) into [`RunRecord::log`], on simulated time (see [`crate::log`]). With `None`
/// nothing is captured, as in [`run`].
pub fn run_logged(
    scenario: &Scenario,
    seed: u64,
    executor: &ExecutorSpec,
    log: Option<&crate::log::LogFilter>,
) -> RunRecord {
    let mapped = executor.black_box.as_ref().and_then(|spec| spec.tool_map.as_ref());
    let lacks = executor.capabilities.lacks(&needs_of(scenario, mapped.map(|map| map.as_ref())));
    if !lacks.is_empty() {
        let note = match &executor.black_box {
            Some(spec) => not_served(&lacks, spec),
            None => format!(
                "not applicable: the scenario needs {}, which executor {} does not declare",
                lacks.join(", "),
                executor.name
            ),
        };
        return not_run(scenario, seed, executor, Verdict::NotApplicable, note);
    }
    // Against a server with a tool map, the scenario's fault rules and pause points on a bound
    // role's native route move to the bound route; what the bound dialects cannot do whatever
    // the scenario says makes it not applicable.
    if let Some(map) = mapped {
        let lacks = map.lacks(scenario);
        if !lacks.is_empty() {
            let note = format!(
                "not applicable: the scenario needs {}, which the tool map's dialects cannot give",
                lacks.join(", ")
            );
            return not_run(scenario, seed, executor, Verdict::NotApplicable, note);
        }
    }
    let moved = mapped.map(|map| map.scenario_for(scenario));
    let scenario = moved.as_ref().unwrap_or(scenario);
    let (world, shared): (Box<dyn World>, Rc<Shared>) = match &executor.black_box {
        Some(spec) => {
            let lacks = world::process::lacks(scenario);
            if !lacks.is_empty() {
                let note = format!(
                    "not applicable: the scenario needs {}, which the black-box world cannot give",
                    lacks.join(", ")
                );
                return not_run(scenario, seed, executor, Verdict::NotApplicable, note);
            }
            match build_process_world(scenario, seed, spec.clone()) {
                Ok((world, shared)) => (world, shared),
                Err(error) => {
                    let note = crate::log::redact(
                        &format!("the worker processes did not start: {error}"),
                        &crate::log::Secrets::of(scenario),
                    );
                    return not_run(scenario, seed, executor, Verdict::Crashed, note);
                }
            }
        }
        None => {
            let run_id = format!("{}-{seed}", scenario.full_name());
            let started =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (executor.factory)(&run_id)));
            let factory = match started {
                Ok(Ok(factory)) => factory,
                Ok(Err(error)) => return not_started(scenario, seed, executor, error),
                Err(payload) => {
                    return not_started(scenario, seed, executor, panic_message(payload.as_ref()))
                }
            };
            let (world, shared) = world_sim::SimWorld::build(scenario, seed, factory);
            (Box::new(world), shared)
        }
    };
    let lines = crate::log::Lines::default();
    let dispatch = log.map(|filter| {
        let secrets = crate::log::Secrets::of(scenario);
        crate::log::dispatch(filter, shared.history.clone(), shared.clock.clone(), lines.clone(), secrets)
    });
    let _logging = dispatch.as_ref().map(tracing::dispatcher::set_default);
    let mut runner = Runner {
        world,
        shared,
        scenario: scenario.clone(),
        barriers: BTreeMap::new(),
        paused: BTreeMap::new(),
        reached: BTreeMap::new(),
        crashed: Vec::new(),
        calls: 0,
        attempts: BTreeMap::new(),
        resolved: BTreeMap::new(),
        faults: BTreeMap::new(),
        installed: Vec::new(),
        coverage: RunCoverage::default(),
        expectation_failures: Vec::new(),
        undecided: Vec::new(),
        waited: Duration::ZERO,
        final_polls: executor.black_box.as_ref().is_none_or(|spec| spec.polls),
        restarts: Vec::new(),
    };
    // A failure of the simulation itself (a panic in the simulator or the harness's own code,
    // such as a turmoil buffer overflowing) ends this run as `crashed`, with its note and
    // reproduce command; it never aborts the matrix the run is part of.
    let played = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let stopped = match runner.play() {
            Err(Stop::Limit(reason)) => Some(Stop::Limit(reason)),
            Err(Stop::Undecided(reason)) => {
                runner.undecided.push(reason);
                runner.settle().err()
            }
            Ok(()) => runner.settle().err(),
        };
        runner.finish(scenario, seed, executor, stopped)
    }));
    let mut record = match played {
        Ok(record) => record,
        Err(payload) => {
            let note = format!(
                "crashed: the simulation itself failed, a limit of the harness and not the executor's doing: {}",
                panic_message(payload.as_ref())
            );
            not_run(scenario, seed, executor, Verdict::Crashed, note)
        }
    };
    drop(_logging);
    record.log = std::mem::take(&mut *lines.lock().unwrap_or_else(|p| p.into_inner()));
    record
}

impl Runner {
    /// Now by the world clock (turmoil's time plus skipped idle time).
    fn now_ms(&self) -> u64 {
        self.shared.clock.now_ms()
    }

    /// One simulation step; a turmoil error (time limit, a host's software failing) or an
    /// executor that panicked in `start` stops the run.
    fn step(&mut self) -> Result<(), Stop> {
        let stepped = self.world.step();
        self.shared.clock.set_simulated_ms(self.world.stepped().as_millis() as u64);
        match stepped {
            Ok(()) if self.shared.start_panicked.get() => {
                Err(Stop::Limit("the run stopped: an executor could not start".into()))
            }
            Ok(()) => Ok(()),
            Err(error) => Err(Stop::Limit(format!("the simulation stopped: {error}"))),
        }
    }

    /// Lets `duration` of world time pass.
    fn run_for(&mut self, duration: Duration) -> Result<(), Stop> {
        if !self.world.skips_idle_time() {
            self.waited += duration;
        }
        let until = self.now_ms() + duration.as_millis() as u64;
        self.advance(until, |_| false)?;
        Ok(())
    }

    /// Runs until `done` or `patience` of world time passed; says whether `done`.
    fn run_until(&mut self, patience: Duration, done: impl FnMut(&mut Self) -> bool) -> Result<bool, Stop> {
        let until = self.now_ms() + patience.as_millis() as u64;
        self.advance(until, done)
    }

    /// Moves the world on until `done` or the world clock reads `until`; says whether `done`.
    /// Steps while anything is active; once the world has been idle for [`QUIET_WINDOW`], skips
    /// to the next time something is due (see [`Runner::idle_until`]): nothing can happen
    /// before then, so `done` cannot change either.
    fn advance(&mut self, until: u64, mut done: impl FnMut(&mut Self) -> bool) -> Result<bool, Stop> {
        let mut quiet_since = None;
        loop {
            if done(self) {
                return Ok(true);
            }
            let now = self.now_ms();
            if now >= until {
                return Ok(false);
            }
            match self.idle_until(until).filter(|_| self.world.skips_idle_time()) {
                Some(next) if next > now => {
                    let since = *quiet_since.get_or_insert(now);
                    if now - since >= QUIET_WINDOW.as_millis() as u64 {
                        self.record(EventKind::IdleSkipped { by_ms: next - now });
                        self.shared.clock.skip(next - now);
                        self.shared.agent.clock_moved.notify_waiters();
                        self.shared.clock_moved.notify_waiters();
                        self.shared.downstream.clock_moved();
                        quiet_since = None;
                        continue;
                    }
                }
                _ => quiet_since = None,
            }
            self.step()?;
        }
    }

    /// When nothing the harness can see is active — the agent has no command waiting, no
    /// executor call or background task is in progress on any worker (other than asleep in
    /// `Background::sleep`), no worker is paused, the downstream has no request or job in
    /// progress, and no message is on the network — the world time up to which nothing is due:
    /// the queue's next delivery, an agent's timeout (a request whose worker crashed waits for
    /// nothing else), a downstream job's finishing time or a sleeper's wake-up, capped at
    /// `until`.
    /// `None` while anything is active.
    ///
    /// Executors act only when called or through [`protocol::Background`], so this is
    /// everything that can happen; the caller still waits [`QUIET_WINDOW`] of stepped time
    /// before it skips.
    fn idle_until(&mut self, until: u64) -> Option<u64> {
        let agent = &self.shared.agent;
        let busy = !agent.inbox.borrow().is_empty()
            || self.shared.executors_active()
            || !self.paused.is_empty()
            || !self.shared.downstream.is_idle();
        if busy {
            return None;
        }
        if self.world.in_flight() > 0 {
            return None;
        }
        let queue_due = self.shared.queue.borrow().next_due_ms();
        let agent_due = agent.deadlines.borrow().values().min().copied();
        let job_due = self.shared.downstream.next_due_ms();
        let sleeper_due = self.shared.sleepers.borrow().values().min().copied();
        Some(
            [Some(until), queue_due, agent_due, job_due, sleeper_due]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(until),
        )
    }

    fn record(&self, kind: EventKind) {
        self.shared.record(kind);
    }

    fn operation(&self, name: &str, actor: Option<&str>) -> OperationRef {
        let spec = &self.scenario.operations[name];
        OperationRef {
            tenant: spec.tenant.clone(),
            environment: spec.environment.clone(),
            workflow_id: spec.workflow_id.clone(),
            step_id: spec.step_id.clone(),
            actor: actor.unwrap_or(&spec.actor).to_owned(),
        }
    }

    fn send(&mut self, command: AgentCommand) {
        let label = match &command {
            AgentCommand::Call { label, .. } | AgentCommand::Query { label, .. } => label.clone(),
        };
        self.shared.agent.outstanding.borrow_mut().insert(label);
        self.shared.agent.inbox.borrow_mut().push_back(command);
        self.shared.agent.wake.notify_one();
    }

    fn settled(&self, label: &str) -> bool {
        self.shared.agent.results.borrow().contains_key(label)
    }

    fn wait_for(&mut self, labels: &[String]) -> Result<(), Stop> {
        let labels = labels.to_vec();
        let answered = self.run_until(AGENT_TIMEOUT + CALL_SLACK, |runner| {
            labels.iter().all(|label| runner.settled(label))
        })?;
        if answered {
            Ok(())
        } else {
            Err(Stop::Limit(format!("the agent never settled {}", quoted_all(&labels))))
        }
    }

    /// The ticket operation `name` created, from the ledger.
    fn ticket_of(&self, name: &str) -> Option<String> {
        let origin = self.operation(name, None).path();
        let attribution = judge::attribution::Attribution::build(&self.shared.history.events());
        self.shared
            .downstream
            .ledger()
            .into_iter()
            .find(|e| {
                e.kind == fake_downstream::EffectKind::TicketCreated
                    && attribution.effect(e.seq) == Some(&origin)
            })
            .map(|e| e.effect_reference)
    }

    /// The call's arguments with `${ticket_of:NAME}` placeholders resolved (once per
    /// operation and text, so that a retry sends what the first call sent); `None` when a
    /// named operation created no ticket.
    fn arguments_of(&mut self, step: &CallStep, line: usize) -> Option<String> {
        if !step.arguments.contains(TICKET_OF_PLACEHOLDER) {
            return Some(step.arguments.clone());
        }
        let cache_key = (step.operation.clone(), step.arguments.clone());
        if let Some(resolved) = self.resolved.get(&cache_key) {
            return Some(resolved.clone());
        }
        let mut text = step.arguments.clone();
        for name in scenarios::ticket_placeholders(&step.arguments) {
            let Some(ticket) = self.ticket_of(&name) else {
                self.undecided.push(format!(
                    "line {line}: call {} updates the ticket of {}, which created no ticket",
                    quoted(&step.id),
                    quoted(&name)
                ));
                return None;
            };
            text = text.replace(&format!("{TICKET_OF_PLACEHOLDER}{name}}}"), &ticket);
        }
        self.resolved.insert(cache_key, text.clone());
        Some(text)
    }

    fn call(&mut self, step: &CallStep, line: usize) -> Result<bool, Stop> {
        let Some(arguments) = self.arguments_of(step, line) else { return Ok(false) };
        self.calls += 1;
        let operation = self.operation(&step.operation, step.actor.as_deref());
        let attempt = self.attempts.entry(operation.path()).or_insert(0);
        *attempt += 1;
        let arguments = RawValue::from_string(arguments)
            .map_err(|error| Stop::Undecided(format!("call {}: arguments: {error}", quoted(&step.id))))?;
        let call = ToolCall {
            tenant: operation.tenant.clone(),
            environment: operation.environment.clone(),
            workflow_id: operation.workflow_id.clone(),
            step_id: operation.step_id.clone(),
            tool: step.tool.clone(),
            tool_version: step.version.clone(),
            arguments,
            actor: operation.actor.clone(),
            call_id: format!("call_{}", self.calls),
            trace_id: Some(format!("trace-{}-{}", self.shared.seed, self.calls)),
            attempt: *attempt,
        };
        let contract = self.shared.contracts.get(&call.tool, &call.tool_version);
        let validated = contract.and_then(|c| c.validated_arguments(&call).ok());
        // The contract's fingerprint, from the arguments validated once.
        let fingerprint = contract.zip(validated.as_ref()).map(|(c, arguments)| {
            protocol::Fingerprint::of(&c.material_request(&call.tenant, arguments)).to_string()
        });
        let expected_version = validated
            .as_ref()
            .and_then(|arguments| arguments.get("expected_version").and_then(serde_json::Value::as_u64));
        let content = validated
            .as_ref()
            .zip(tool_effect_kind(&call.tool))
            .map(|(arguments, kind)| fake_downstream::content_digest(kind, &call.tenant, arguments));
        if let Some(content) = &content {
            self.shared
                .call_contents
                .borrow_mut()
                .entry(content.clone())
                .or_default()
                .insert(operation.path());
        }
        self.record(EventKind::CallSent {
            label: step.id.clone(),
            call_id: call.call_id.clone(),
            worker: step.worker.clone(),
            operation: operation.path(),
            tenant: operation.tenant.clone(),
            actor: operation.actor.clone(),
            tool: call.tool.clone(),
            tool_version: call.tool_version.clone(),
            fingerprint,
            expected_version,
            content,
        });
        self.send(AgentCommand::Call {
            label: step.id.clone(),
            worker: step.worker.clone(),
            call,
            lose_answer: step.lose_answer,
        });
        Ok(true)
    }

    fn query(&mut self, label: &str, kind: RequestKind, operation: &str, worker: &str) {
        let operation = self.operation(operation, None);
        self.record(EventKind::OperationQuery {
            label: label.to_owned(),
            kind,
            worker: worker.to_owned(),
            operation: operation.path(),
            tenant: operation.tenant.clone(),
            actor: operation.actor.clone(),
        });
        self.send(AgentCommand::Query {
            label: label.to_owned(),
            kind,
            worker: worker.to_owned(),
            operation,
        });
    }

    fn play(&mut self) -> Result<(), Stop> {
        for step in self.scenario.steps.clone() {
            self.play_step(&step.kind, step.line)?;
        }
        Ok(())
    }

    fn play_step(&mut self, kind: &StepKind, line: usize) -> Result<(), Stop> {
        match kind {
            StepKind::Call(call) => {
                if self.call(call, line)? && call.wait {
                    self.wait_for(std::slice::from_ref(&call.id))?;
                }
            }
            StepKind::Concurrent(calls) => {
                let mut labels = Vec::new();
                for call in calls {
                    if self.call(call, line)? {
                        labels.push(call.id.clone());
                    }
                }
                self.wait_for(&labels)?;
                if let Some(premise) = self.overlap_premise(&labels) {
                    self.undecided.push(format!("line {line}: {premise}"));
                }
            }
            StepKind::Await { call } => {
                if self.shared.agent.outstanding.borrow().contains(call) || self.settled(call) {
                    self.wait_for(std::slice::from_ref(call))?;
                }
            }
            StepKind::Poll { id, operation, worker } => {
                self.query(id, RequestKind::Poll, operation, worker);
                self.wait_for(std::slice::from_ref(id))?;
            }
            StepKind::Reconcile { id, operation, worker } => {
                self.query(id, RequestKind::Reconcile, operation, worker);
                self.wait_for(std::slice::from_ref(id))?;
            }
            StepKind::Fault { name, rule } => {
                self.record(EventKind::FaultInstalled { rule: rule.to_json_value() });
                let id = self.shared.downstream.install_fault(rule.clone());
                self.installed.push(InstalledFault { line, id, rule: rule.clone() });
                if let Some(name) = name {
                    self.faults.insert(name.clone(), id);
                }
            }
            StepKind::ReleaseHold { name } => {
                let id = self.faults[name];
                self.record(EventKind::HoldReleased { name: name.clone() });
                let _ = self.shared.downstream.release(id);
            }
            StepKind::Pause { name, worker, point } => {
                let (target_worker, target_point) = (worker.clone(), point.clone());
                let operation = point
                    .filter()
                    .and_then(|f| f.operation.as_deref())
                    .map(|op| self.operation(op, None).path());
                self.world.arm(name, target_worker, target_point, operation);
                self.barriers.insert(name.clone(), (worker.clone(), point.clone()));
            }
            StepKind::WaitPaused { name } => {
                let (worker, point) =
                    self.barriers.remove(name).expect("scenarios validate that pauses are declared first");
                let mut triggered = None;
                let reached = self.run_until(PAUSE_PATIENCE, |runner| {
                    if triggered.is_none() {
                        triggered = runner.world.reached(name);
                    }
                    triggered.is_some()
                })?;
                let Some(triggered) = triggered.filter(|_| reached) else {
                    self.world.release(name);
                    // The scenario's premise did not happen (the executor never got there). The
                    // run goes on, so every oracle still judges it, but cannot pass.
                    self.undecided.push(format!(
                        "line {line}: {} the pause point {} of {} within {}",
                        worker
                            .as_deref()
                            .map_or("no worker reached".to_string(), |w| format!("{w} never reached")),
                        point.describe(),
                        quoted(name),
                        text::duration(PAUSE_PATIENCE)
                    ));
                    return Ok(());
                };
                let operations = match &triggered.point {
                    world::Reached::Downstream { operations, .. } => operations.clone(),
                    _ => Vec::new(),
                };
                self.record(EventKind::Paused {
                    name: name.clone(),
                    worker: triggered.worker.clone(),
                    point: triggered.describe(),
                    operations,
                });
                self.reached.insert(name.clone(), triggered.worker.clone());
                self.paused.insert(name.clone(), triggered);
            }
            StepKind::Release { name } => {
                self.record(EventKind::Released { name: name.clone() });
                self.paused.remove(name);
                self.barriers.remove(name);
                self.world.release(name);
            }
            StepKind::Crash { worker } => {
                let Some(worker) = self.worker_of(worker) else { return Ok(()) };
                let at = self.paused.values().find(|paused| paused.worker == worker);
                let paused_at = at.map(|paused| paused.describe());
                let after_commit = at.is_some_and(|paused| paused.after_commit());
                self.coverage.crashes += 1;
                self.coverage.crashes_after_commit += u32::from(after_commit);
                self.record(EventKind::Crashed { worker: worker.clone(), paused_at, after_commit });
                if let Err(error) = self.world.crash(worker.as_str()) {
                    self.undecided
                        .push(format!("line {line}: the crash of {worker} did not happen: {error}"));
                }
                let held: Vec<String> = self
                    .paused
                    .iter()
                    .filter(|(_, paused)| paused.worker == worker)
                    .map(|(name, _)| name.clone())
                    .collect();
                for name in held {
                    self.paused.remove(&name);
                    self.world.release(&name);
                }
                if !self.crashed.contains(&worker) {
                    self.crashed.push(worker);
                }
            }
            StepKind::Restart { worker } => {
                let Some(worker) = self.worker_of(worker) else { return Ok(()) };
                self.record(EventKind::Restarted { worker: worker.clone() });
                let (at_ms, began) = (self.now_ms(), std::time::Instant::now());
                self.world.restart(worker.as_str());
                let took_ms = began.elapsed().as_millis() as u64;
                self.restarts.push(crate::timing::Restart { worker: worker.clone(), at_ms, took_ms });
                self.crashed.retain(|crashed| crashed != &worker);
            }
            StepKind::Advance { by, since_request_of: None } => {
                self.record(EventKind::ClockAdvanced { by_ms: by.as_millis() as u64 });
                self.run_for(*by)?;
            }
            StepKind::Advance { by, since_request_of: Some(call) } => {
                let history = self.shared.history.clone();
                let sent = self.run_until(PAUSE_PATIENCE, |_| history.first_request_for(call).is_some())?;
                let Some(sent_ms) = history.first_request_for(call).filter(|_| sent) else {
                    self.undecided.push(format!(
                        "line {line}: {} sent no request downstream within {}, so the time the scenario lets pass from it never began",
                        quoted(call),
                        judge::text::duration(PAUSE_PATIENCE)
                    ));
                    return Ok(());
                };
                let until_ms = sent_ms + by.as_millis() as u64;
                let left = Duration::from_millis(until_ms.saturating_sub(self.now_ms()));
                self.record(EventKind::ClockAdvanced { by_ms: left.as_millis() as u64 });
                self.run_for(left)?;
            }
            StepKind::Revoke { actor, tool } => {
                self.record(EventKind::Revoked { actor: actor.clone(), tool: tool.clone() });
                self.shared.downstream.revoke(actor, tool.as_deref());
            }
            StepKind::HumanEdit { ticket_of } => {
                let Some(ticket) = self.ticket_of(ticket_of) else {
                    self.undecided.push(format!(
                        "line {line}: operation {} created no ticket to edit",
                        quoted(ticket_of)
                    ));
                    return Ok(());
                };
                let version = self
                    .shared
                    .downstream
                    .touch_ticket(&ticket)
                    .map_err(|e| Stop::Undecided(e.to_string()))?;
                self.record(EventKind::HumanEdit { ticket, version });
            }
            StepKind::Expect(expect) => {
                if let Some(premise) = self
                    .outstanding_premise(expect, line)
                    .or_else(|| self.told_premise(expect, line))
                    .or_else(|| self.alone_premise(expect, line))
                    .or_else(|| self.hidden_owner_premise(expect, line))
                {
                    self.undecided.push(premise);
                } else if let Some(failure) = self.check_expectation(expect, line) {
                    self.expectation_failures.push(failure);
                }
            }
            StepKind::ExpectEffects { operation, kind, count } => {
                if let Some(failure) = self.check_effects(operation.as_deref(), kind.as_deref(), *count, line)
                {
                    self.expectation_failures.push(failure);
                }
            }
        }
        Ok(())
    }

    /// The worker a crash or restart step means; `None` when it names a pause that was never
    /// reached (that premise is already recorded).
    fn worker_of(&self, worker: &WorkerRef) -> Option<String> {
        match worker {
            WorkerRef::Named(name) => Some(name.clone()),
            WorkerRef::PausedAt(pause) => self.reached.get(pause).cloned(),
        }
    }

    /// The premise of concurrent calls: each was being handled by its worker while at least one
    /// other was too, by the world clock (it reached its worker before that other was
    /// answered, and the other reached its worker before it was answered). `Some(why)` when
    /// one of them ran alone.
    fn overlap_premise(&self, labels: &[String]) -> Option<String> {
        let history = self.shared.history.events();
        let moment = |label: &String, received: bool| {
            history.iter().find_map(|event| match &event.kind {
                EventKind::CallReceived { label: l, .. } if received && l == label => Some(event.at_ms),
                EventKind::Answered { label: l, .. } if !received && l == label => Some(event.at_ms),
                _ => None,
            })
        };
        let spans: Vec<(&String, Option<u64>, u64)> = labels
            .iter()
            .map(|label| (label, moment(label, true), moment(label, false).unwrap_or(u64::MAX)))
            .collect();
        for (label, received, answered) in &spans {
            let Some(received) = received else {
                return Some(format!("the concurrent call {} never reached its worker", quoted(label)));
            };
            let overlapped = spans.iter().any(|(other, other_received, other_answered)| {
                other != label && other_received.is_some_and(|r| r < *answered) && *received < *other_answered
            });
            if !overlapped {
                return Some(format!(
                    "the concurrent calls did not overlap: {} was handled while no other one was",
                    quoted(label)
                ));
            }
        }
        None
    }
}

impl Runner {
    fn outcome_of(&self, label: &str) -> Option<AgentResult> {
        self.shared.agent.results.borrow().get(label).cloned()
    }

    fn expectation(&self, line: usize, explanation: String) -> Violation {
        Violation {
            oracle: "expect".into(),
            name: format!("{}:{line}", self.scenario.source),
            operation: None,
            positions: Vec::new(),
            explanation,
            line: Some(line as u64),
        }
    }

    /// Why an expectation's `while_outstanding` premise did not hold, if it did not: the other
    /// call was answered by its worker before this one was.
    fn outstanding_premise(&self, expect: &scenarios::ExpectOutcome, line: usize) -> Option<String> {
        let other = expect.while_outstanding.as_ref()?;
        let history = self.shared.history.events();
        let answered = |label: &str| {
            history.iter().find_map(|event| match &event.kind {
                EventKind::Answered { label: answered, .. } if answered == label => Some(event.seq),
                _ => None,
            })
        };
        let (this, before) = (answered(&expect.call)?, answered(other)?);
        (before < this).then(|| {
            format!(
                "line {line}: {} was answered after {} was, where the scenario needs it answered while {} was still outstanding: the expectation is not judged",
                quoted(&expect.call),
                quoted(other),
                quoted(other)
            )
        })
    }

    /// Why an expectation's `told` premise did not hold, if it did not: a downstream request
    /// the call's worker sent while serving it got neither an answer nor a transport failure
    /// before the call was answered, so the worker stopped waiting for it (its own timeout)
    /// and never heard what the scenario relies on it hearing.
    fn told_premise(&self, expect: &scenarios::ExpectOutcome, line: usize) -> Option<String> {
        if !expect.told {
            return None;
        }
        let history = self.shared.history.events();
        let answered_at = history.iter().position(
            |event| matches!(&event.kind, EventKind::Answered { label, .. } if label == &expect.call),
        )?;
        let before = &history[..answered_at];
        let heard = |id: &str| {
            before.iter().any(|event| {
                matches!(&event.kind,
                    EventKind::DownstreamAnswered { request_id, .. } | EventKind::DownstreamFailed { request_id, .. }
                        if request_id == id)
            })
        };
        before.iter().find_map(|event| match &event.kind {
            EventKind::DownstreamSent { worker, request_id, serving: Some(serving), method, path, .. }
                if serving == &expect.call && !heard(request_id) =>
            {
                Some(format!(
                    "line {line}: {worker} answered {} before its request {request_id} ({method} {path}) was answered: it stopped waiting (its downstream timeout ran out first), where the scenario needs it told: the expectation is not judged",
                    quoted(&expect.call)
                ))
            }
            _ => None,
        })
    }

    /// Why an expectation's `alone` premise did not hold, if it did not: before the call was
    /// answered, a worker sent a request for the call's operation while it handled nothing the
    /// harness gave it (no call, poll or reconciliation of the agent's, no queue delivery, no
    /// webhook): it took the operation up on its own, which the expectation was not written for.
    /// Whose operation a request is, is attribution's (what the harness controls); whether its
    /// worker handled anything, the history's (the process world tags a request with what its
    /// worker served last, so the tag alone cannot tell).
    fn alone_premise(&self, expect: &scenarios::ExpectOutcome, line: usize) -> Option<String> {
        if !expect.alone {
            return None;
        }
        let history = self.shared.history.events();
        let answered_at = history.iter().position(
            |event| matches!(&event.kind, EventKind::Answered { label, .. } if label == &expect.call),
        )?;
        let operation = history.iter().find_map(|event| match &event.kind {
            EventKind::CallSent { label, operation, .. }
            | EventKind::OperationQuery { label, operation, .. }
                if label == &expect.call =>
            {
                Some(operation.clone())
            }
            _ => None,
        })?;
        let attribution = judge::attribution::Attribution::build(&history);
        // What each worker handles now: (worker, what), from when it was sent to when it ended.
        let mut handling: BTreeSet<(&str, String)> = BTreeSet::new();
        for event in &history[..answered_at] {
            match &event.kind {
                EventKind::CallSent { label, worker, .. }
                | EventKind::OperationQuery { label, worker, .. } => {
                    handling.insert((worker, format!("call {label}")));
                }
                EventKind::Answered { label, worker, .. } => {
                    handling.remove(&(worker.as_str(), format!("call {label}")));
                }
                EventKind::Delivered { envelope_id, worker, .. } => {
                    handling.insert((worker, format!("envelope {envelope_id}")));
                }
                EventKind::Consumed { envelope_id, worker, .. } => {
                    handling.remove(&(worker.as_str(), format!("envelope {envelope_id}")));
                }
                EventKind::WebhookReceived { worker, event_id, .. } => {
                    handling.insert((worker, format!("webhook {}", event_id.as_deref().unwrap_or_default())));
                }
                EventKind::WebhookHandled { worker, event_id, .. } => {
                    handling.remove(&(
                        worker.as_str(),
                        format!("webhook {}", event_id.as_deref().unwrap_or_default()),
                    ));
                }
                EventKind::Crashed { worker, .. } => handling.retain(|(busy, _)| busy != worker),
                EventKind::DownstreamSent { worker, request_id, method, path, .. } => {
                    let idle = !handling.iter().any(|(busy, _)| busy == worker);
                    let of_operation = attribution
                        .request(request_id)
                        .and_then(|request| request.operation.as_deref())
                        .is_some_and(|of| of == operation);
                    if idle && of_operation {
                        return Some(format!(
                            "line {line}: {worker} took {operation} up on its own ({request_id}: {method} {path}, sent while it handled nothing the harness gave it) before {} was answered, where the scenario needs the call's worker alone on it: the expectation is not judged",
                            quoted(&expect.call)
                        ));
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// Why an expectation cannot be judged in a world that does not see the executors' store,
    /// if it cannot: the call was answered `in_flight` (another owner is at work) where the
    /// scenario expects a settled answer. A take-over (a sweep, another worker's recovery) is a
    /// store write inside a process, which the harness does not see; whether the owner the
    /// answer names was really at work is O6's, judged from what the harness does see.
    fn hidden_owner_premise(&self, expect: &scenarios::ExpectOutcome, line: usize) -> Option<String> {
        if self.world.sees_store() || expect.status.contains(&protocol::OutcomeStatus::InFlight) {
            return None;
        }
        let Some(AgentResult::Answered(outcome)) = self.outcome_of(&expect.call) else { return None };
        (outcome.status == protocol::OutcomeStatus::InFlight).then(|| {
            let wanted: Vec<&str> = expect.status.iter().map(|status| status.as_str()).collect();
            format!(
                "line {line}: {} was answered in_flight, naming another owner at work, where the scenario expects {}: a take-over is a store write inside a process, which this world does not see, so the expectation is not judged",
                quoted(&expect.call),
                wanted.join(" or ")
            )
        })
    }

    /// Whether the call labelled `label` was answered with a bare success claim.
    fn answered_bare(&self, label: &str) -> bool {
        self.shared.history.events().iter().any(|event| {
            matches!(&event.kind, EventKind::Answered { label: answered, bare: true, .. } if answered == label)
        })
    }

    fn check_expectation(&self, expect: &scenarios::ExpectOutcome, line: usize) -> Option<Violation> {
        let wanted: Vec<&str> = expect.status.iter().map(|status| status.as_str()).collect();
        let outcome = match self.outcome_of(&expect.call) {
            None => {
                return Some(self.expectation(line, format!("{} was never answered", quoted(&expect.call))))
            }
            Some(AgentResult::NoAnswer(reason)) => {
                return Some(self.expectation(
                    line,
                    format!(
                        "{} got no answer ({reason}); expected {}",
                        quoted(&expect.call),
                        wanted.join(" or ")
                    ),
                ))
            }
            Some(AgentResult::Answered(outcome)) => outcome,
        };
        // A bare success claim (a server that names no outcome: docs/mcp.md) says only that
        // the effect exists, never whether this call made it or an earlier one did: it meets an
        // expectation of either success, and the oracles judge the ledger behind it.
        let bare = self.answered_bare(&expect.call);
        let bare_success = bare
            && outcome.status.claims_success()
            && expect.status.iter().any(|status| status.claims_success());
        if !expect.status.contains(&outcome.status) && !bare_success {
            return Some(self.expectation(
                line,
                format!(
                    "{} was answered {}; expected {}",
                    quoted(&expect.call),
                    outcome.status.as_str(),
                    wanted.join(" or ")
                ),
            ));
        }
        if let Some(reason) = expect.reason {
            if outcome.reason != Some(reason) {
                return Some(self.expectation(
                    line,
                    format!(
                        "{} was rejected for {}; expected {}",
                        quoted(&expect.call),
                        text::reason(outcome.reason),
                        reason.as_str()
                    ),
                ));
            }
        }
        // A bare claim that names no reference has nothing to compare.
        let names_nothing = bare && outcome.effect_reference.is_none();
        if let Some(other) = expect.same_reference_as.as_ref().filter(|_| !names_nothing) {
            let other_reference = match self.outcome_of(other) {
                Some(AgentResult::Answered(other)) => other.effect_reference,
                _ => None,
            };
            if outcome.effect_reference.is_none() || outcome.effect_reference != other_reference {
                return Some(self.expectation(
                    line,
                    format!(
                        "{} named {}, but {} named {}; expected the same effect reference",
                        quoted(&expect.call),
                        text::effect_reference(outcome.effect_reference.as_deref()),
                        quoted(other),
                        text::effect_reference(other_reference.as_deref())
                    ),
                ));
            }
        }
        None
    }

    fn check_effects(
        &self,
        operation: Option<&str>,
        kind: Option<&str>,
        count: u32,
        line: usize,
    ) -> Option<Violation> {
        let origin = operation.map(|name| self.operation(name, None).path());
        // Whose effect is the oracles' attribution (what the harness controls), never a header
        // that had to survive the trip.
        let attribution = judge::attribution::Attribution::build(&self.shared.history.events());
        let found = self
            .shared
            .downstream
            .ledger()
            .into_iter()
            .filter(|effect| effect.kind != fake_downstream::EffectKind::TicketEditedByHuman)
            .filter(|effect| origin.is_none() || attribution.effect(effect.seq) == origin.as_deref())
            .filter(|effect| kind.is_none_or(|kind| effect.kind.as_str() == kind))
            .count() as u32;
        (found != count).then(|| {
            self.expectation(
                line,
                format!(
                    "the ledger has {found} {}effect(s) for {}; expected {count}",
                    kind.map(|k| format!("{k} ")).unwrap_or_default(),
                    origin.as_deref().unwrap_or("the run")
                ),
            )
        })
    }

    /// Heals every fault, restarts crashed workers, lets the world run past every lease, then
    /// polls each operation one last time (what O6 and O12 read). The harness asks nothing
    /// else: recovering an abandoned or unknown operation is the executor's own work.
    fn settle(&mut self) -> Result<(), Stop> {
        if !self.unfired_faults().is_empty() {
            self.run_until(FAULT_GRACE, |runner| runner.unfired_faults().is_empty())?;
        }
        self.check_fault_premises();
        self.record(EventKind::SettleStarted);
        self.shared.downstream.clear_faults();
        self.record(EventKind::FaultsHealed);
        for name in std::mem::take(&mut self.paused).into_keys() {
            self.record(EventKind::Released { name: name.clone() });
            self.world.release(&name);
        }
        for name in std::mem::take(&mut self.barriers).into_keys() {
            self.world.release(&name);
        }
        for worker in std::mem::take(&mut self.crashed) {
            self.record(EventKind::Restarted { worker: worker.clone() });
            self.world.restart(worker.as_str());
        }
        let outstanding: Vec<String> = self.shared.agent.outstanding.borrow().iter().cloned().collect();
        self.wait_for(&outstanding)?;
        self.settle_after_running_work()?;
        let called: BTreeSet<String> = self
            .shared
            .history
            .events()
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::CallSent { operation, .. } => Some(operation.clone()),
                _ => None,
            })
            .collect();
        let names: Vec<String> = self
            .scenario
            .operations
            .keys()
            .filter(|name| called.contains(&self.operation(name, None).path()))
            .cloned()
            .collect();
        if !self.final_polls {
            return Ok(());
        }
        let first_worker = self.scenario.worker_names().into_iter().next().expect("a scenario has a worker");
        let labels: Vec<String> = names
            .iter()
            .map(|name| format!("{FINAL_POLL_PREFIX}{}", self.operation(name, None).path()))
            .collect();
        // A world on real time tells which agent request a worker's downstream request serves
        // only while the worker serves one (the process world's origin tag): there, the final
        // polls go one at a time, so that what a poll makes the executor send (a job's
        // completion notice, a resend) belongs to its operation. The simulation tags the
        // sending task itself, and polls all at once.
        if self.world.skips_idle_time() {
            for (name, label) in names.iter().zip(&labels) {
                self.query(label, RequestKind::Poll, name, &first_worker);
            }
            return self.wait_within(&labels, FINAL_QUERY_PATIENCE);
        }
        for (name, label) in names.iter().zip(&labels) {
            self.query(label, RequestKind::Poll, name, &first_worker);
            self.wait_within(std::slice::from_ref(label), FINAL_QUERY_PATIENCE)?;
        }
        Ok(())
    }

    /// Lets the scenario's settle time pass after the last work that is legitimately still
    /// running is due: a job the downstream is still running, an envelope whose queue delivery
    /// delay has not run out. A final poll before then would find an operation rightly in
    /// flight, and O6 and O13 would blame the executor. A simulation skips to that time; the
    /// real world also waits for downstream requests its processes still have open (their
    /// downstream timeout may be longer than the agent's), at most [`REAL_WORK_PATIENCE`]
    /// more, and work still running then makes the run `unknown`.
    fn settle_after_running_work(&mut self) -> Result<(), Stop> {
        let settle = self.scenario.settle;
        let start_ms = self.now_ms();
        let limit_ms = if self.world.skips_idle_time() {
            start_ms + SIMULATED_WORK_PATIENCE.as_millis() as u64
        } else {
            start_ms + (settle + REAL_WORK_PATIENCE).as_millis() as u64
        };
        let mut end_ms = start_ms + settle.as_millis() as u64;
        loop {
            self.run_for(Duration::from_millis(end_ms.saturating_sub(self.now_ms())))?;
            if self.world.open_downstream_requests() > 0 {
                // A process still waits on the downstream (its timeout may be longer than the
                // agent's): the settle time runs from when it is answered or gives up.
                let patience = Duration::from_millis(limit_ms.saturating_sub(self.now_ms()));
                if !self.run_until(patience, |runner| runner.world.open_downstream_requests() == 0)? {
                    break;
                }
                end_ms = self.now_ms() + settle.as_millis() as u64;
                continue;
            }
            let Some(due) = self.running_work_due_ms() else { return Ok(()) };
            end_ms = due + settle.as_millis() as u64;
            if end_ms > limit_ms {
                break;
            }
        }
        self.run_for(Duration::from_millis(limit_ms.saturating_sub(self.now_ms())))?;
        let open = self.world.open_downstream_requests();
        if open > 0 {
            self.undecided.push(format!(
                "{open} downstream request(s) of the executor were still open at the final poll, {} s into the settle phase: \
                 the final poll would judge an operation the executor is still working on",
                (self.now_ms() - start_ms) / 1000
            ));
        } else if let Some(due) = self.running_work_due_ms() {
            self.undecided.push(format!(
                "work was still legitimately running at the final poll (due at {due} ms, the settle ended at {} ms): \
                 the scenario's settle ({} ms) is shorter than its jobs or queue delays",
                self.now_ms(),
                settle.as_millis()
            ));
        }
        Ok(())
    }

    /// When the last work that is legitimately still running is due, if any is running now.
    fn running_work_due_ms(&self) -> Option<u64> {
        let now = self.now_ms();
        let job = self.shared.downstream.last_due_ms();
        let queued = self.shared.queue.borrow().last_first_delivery_ms();
        [job, queued].into_iter().flatten().filter(|due| *due > now).max()
    }

    /// The installed faults that have not fired as often as they should, with how often they
    /// fired and should have.
    fn unfired_faults(&self) -> Vec<(&InstalledFault, u32, u32)> {
        if self.installed.is_empty() {
            return Vec::new();
        }
        let fired: BTreeMap<u64, u32> =
            self.shared.downstream.faults().into_iter().map(|rule| (rule.id, rule.fired)).collect();
        self.installed
            .iter()
            .map(|fault| {
                let wanted = match fault.rule.times {
                    Times::Count(count) => count,
                    Times::Always => 1,
                };
                (fault, fired.get(&fault.id).copied().unwrap_or(0), wanted)
            })
            .filter(|(_, fired, wanted)| fired < wanted)
            .collect()
    }

    /// The premise of every fault a step installed: it fired (as many times as `times` says,
    /// at least once for `always`), read before the settle phase clears the rules.
    fn check_fault_premises(&mut self) {
        let unfired: Vec<String> = self
            .unfired_faults()
            .into_iter()
            .map(|(fault, fired, wanted)| {
                let times = if fired == 0 {
                    "never fired".to_owned()
                } else {
                    format!("fired {fired} of {wanted} times")
                };
                let line = if fault.line > 0 { format!("line {}: ", fault.line) } else { String::new() };
                format!(
                    "{line}fault rule {} ({}) {times}: the fault the scenario is about did not happen",
                    fault.id,
                    describe_rule(&fault.rule)
                )
            })
            .collect();
        self.coverage.faults_installed += self.installed.len() as u32;
        self.coverage.faults_fired += (self.installed.len() - unfired.len()) as u32;
        self.undecided.extend(unfired);
    }

    fn wait_within(&mut self, labels: &[String], patience: Duration) -> Result<(), Stop> {
        let labels = labels.to_vec();
        let done = self.run_until(patience, |runner| labels.iter().all(|label| runner.settled(label)))?;
        if done {
            Ok(())
        } else {
            Err(Stop::Limit(format!("the agent never settled {}", quoted_all(&labels))))
        }
    }

    fn finish(
        mut self,
        scenario: &Scenario,
        seed: u64,
        executor: &ExecutorSpec,
        stopped: Option<Stop>,
    ) -> RunRecord {
        let history = self.shared.history.events();
        let ledger = self.shared.downstream.ledger();
        let evidence = oracles::Evidence {
            history: &history,
            ledger: &ledger,
            contracts: &self.shared.contracts,
            tags_complete: self.world.tags_every_request(),
            store_seen: self.world.sees_store(),
        };
        let judgement = oracles::judge(&evidence);
        let mut coverage = self.coverage.clone();
        coverage.exercised = judgement.exercised;
        coverage.not_judged = judgement.not_judged;
        coverage.stale_writes = stale_writes(&history, &self.shared.contracts);
        let mut violations = judgement.violations;
        violations.extend(self.expectation_failures.iter().cloned());
        let mut notes = Vec::new();
        let mut verdict = Verdict::Pass;
        // On real time, a slow machine can break what the steps meant (crate::timing): the
        // findings the lost time explains are not judged, and the run cannot pass.
        if let Some(given) = self.world.timing_given() {
            let rejudge =
                |history: &[Event]| oracles::judge(&oracles::Evidence { history, ..evidence }).violations;
            let broken = crate::timing::broken(&history, given, &self.restarts, &violations, &rejudge);
            for premise in &broken {
                notes.push(premise.note.clone());
                verdict = verdict.worst(Verdict::Unknown);
            }
            violations.retain(|violation| {
                let excused = broken.iter().any(|premise| premise.excuses(violation));
                if excused {
                    notes.push(format!("not judged, as a time premise did not hold: {violation}"));
                }
                !excused
            });
        }
        for event in &history {
            if let EventKind::ExecutorPanicked { worker, during, message } = &event.kind {
                notes.push(format!("{worker} panicked during {during}: {message}"));
                verdict = verdict.worst(Verdict::Crashed);
            }
        }
        for reason in self.undecided.iter().chain(&judgement.undecided) {
            notes.push(reason.clone());
            verdict = verdict.worst(Verdict::Unknown);
        }
        match stopped {
            Some(Stop::Limit(reason)) => {
                notes.push(reason);
                verdict = verdict.worst(Verdict::Crashed);
            }
            Some(Stop::Undecided(reason)) => {
                notes.push(reason);
                verdict = verdict.worst(Verdict::Unknown);
            }
            None => {}
        }
        // An oracle violation is always a failure: the invariants hold whatever the timing. A
        // failed expectation is one too, unless the executor panicked or a limit was hit (the
        // run is `crashed`), or a premise of the scenario did not hold (`unknown`): then the
        // expectations were written for something that did not happen, and are not judged.
        let oracle_violated = violations.iter().any(|violation| violation.oracle != "expect");
        if !oracle_violated && verdict == Verdict::Unknown {
            for violation in violations.drain(..) {
                notes.push(format!("not judged, as a premise did not hold: {violation}"));
            }
        }
        if oracle_violated || (!violations.is_empty() && verdict != Verdict::Crashed) {
            verdict = Verdict::Fail;
        }
        if verdict != Verdict::Pass {
            notes.extend(self.world.failure_notes());
        }
        // A note may quote what a process wrote to stderr (the black-box world), and a process
        // may log what it was sent: notes are redacted as a captured log is.
        if !notes.is_empty() {
            let secrets = crate::log::Secrets::of(scenario);
            notes = notes.iter().map(|note| crate::log::redact(note, &secrets)).collect();
        }
        let real_time = self.world.real_time().map(|mut time| {
            time.waiting_ms = self.waited.as_millis() as u64;
            time
        });
        let business: Vec<&Effect> =
            ledger.iter().filter(|e| e.kind != fake_downstream::EffectKind::TicketEditedByHuman).collect();
        let operations = judge::operations::records(&history, &violations);
        let result = RunResult {
            scenario: scenario.id.clone(),
            scenario_name: scenario.name.clone(),
            seed,
            executor: executor.name.clone(),
            verdict,
            violations,
            notes,
            history_digest: history::digest(&history),
            effects: business.len() as u64,
            effect_references: business.iter().map(|e| e.effect_reference.clone()).collect(),
            operations,
            reproduce: reproduce_command(scenario, seed, executor),
            real_time,
        };
        RunRecord { result, history, ledger, stepped: self.world.stepped(), coverage, log: Vec::new() }
    }
}

/// The record of a run whose executor factory failed (or panicked) before anything ran: it is
/// `crashed`, and its note carries the factory's error.
fn not_started(scenario: &Scenario, seed: u64, executor: &ExecutorSpec, error: String) -> RunRecord {
    let note = format!("the executor's factory failed to start: {error}");
    not_run(scenario, seed, executor, Verdict::Crashed, note)
}

/// The record of a run that never started, with its verdict and the note saying why.
fn not_run(
    scenario: &Scenario,
    seed: u64,
    executor: &ExecutorSpec,
    verdict: Verdict,
    note: String,
) -> RunRecord {
    let result = RunResult {
        scenario: scenario.id.clone(),
        scenario_name: scenario.name.clone(),
        seed,
        executor: executor.name.clone(),
        verdict,
        violations: Vec::new(),
        notes: vec![note],
        history_digest: history::digest(&[]),
        effects: 0,
        effect_references: Vec::new(),
        operations: Vec::new(),
        reproduce: reproduce_command(scenario, seed, executor),
        real_time: None,
    };
    RunRecord {
        result,
        history: Vec::new(),
        ledger: Vec::new(),
        stepped: Duration::ZERO,
        coverage: RunCoverage::default(),
        log: Vec::new(),
    }
}

/// The process world of one run: real worker processes for `spec`'s command.
#[cfg(feature = "process")]
fn build_process_world(
    scenario: &Scenario,
    seed: u64,
    spec: std::sync::Arc<world::process::BlackBoxSpec>,
) -> Result<(Box<dyn World>, Rc<Shared>), String> {
    let (world, shared) = world_process::RealWorld::build(scenario, seed, spec)?;
    Ok((Box::new(world), shared))
}

/// Without the `process` feature there is no process world: a black-box executor cannot run.
#[cfg(not(feature = "process"))]
fn build_process_world(
    _scenario: &Scenario,
    _seed: u64,
    _spec: std::sync::Arc<world::process::BlackBoxSpec>,
) -> Result<(Box<dyn World>, Rc<Shared>), String> {
    Err("this build has no process world (the runner's `process` feature is off)".to_owned())
}

/// `POST /v1/charges, commit_then_drop`: a fault rule in a few words.
fn describe_rule(rule: &FaultRule) -> String {
    let matches = &rule.matches;
    let mut parts: Vec<String> = Vec::new();
    let request = [matches.method.clone(), matches.path.clone()].into_iter().flatten().collect::<Vec<_>>();
    parts.push(if request.is_empty() { "any request".to_owned() } else { request.join(" ") });
    if let Some(tenant) = &matches.tenant {
        parts.push(format!("tenant {tenant}"));
    }
    if let Some(key) = &matches.idempotency_key {
        parts.push(format!("key {key}"));
    }
    if let Some(nth) = matches.nth {
        parts.push(format!("from match {nth}"));
    }
    format!("{}, {}", parts.join(" "), rule.action.name())
}

/// The time a run spanned, in milliseconds: its real (wall) time for a black-box run; the
/// simulated time of its last event for a simulated one, so that the same seed gives the same
/// number and the reports stay byte-stable.
pub fn time_ms(record: &RunRecord) -> u64 {
    match record.result.real_time {
        Some(real) => real.wall_ms,
        None => record.history.last().map_or(0, |event| event.at_ms),
    }
}

/// The one command that reproduces a run, with the program that runs `executor`
/// ([`ExecutorSpec::program`]).
pub fn reproduce_command(scenario: &Scenario, seed: u64, executor: &ExecutorSpec) -> String {
    let (program, name) = (&executor.program, shell_quote(&executor.name));
    if let Some(spec) = &executor.black_box {
        // A saved case (a scenario file with its seed) is run from its file.
        if scenario.seed.is_some() {
            return format!(
                "{program} run --case {} {}",
                shell_quote(&scenario.source),
                spec.reproduce_arguments()
            );
        }
        let mut command =
            format!("{program} run {} --seed {seed} {}", scenario.id, spec.reproduce_arguments());
        if !scenario.source.starts_with(scenarios::BUILTIN_SOURCE_PREFIX) {
            command.push_str(&format!(" --scenario-file {}", shell_quote(&scenario.source)));
        }
        return command;
    }
    if scenario.seed.is_some() {
        return format!("{program} run --case {} --executor {name}", shell_quote(&scenario.source));
    }
    let mut command = format!("{program} run {} --seed {seed} --executor {name}", scenario.id);
    if !scenario.source.starts_with(scenarios::BUILTIN_SOURCE_PREFIX) {
        command.push_str(&format!(" --scenario-file {}", shell_quote(&scenario.source)));
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_role_bound_to_a_twin_needs_no_queue_consumer_unless_the_scenario_pauses_there() {
        let slack = world::toolmap::ToolMap::parse(
            "[tools.\"messages.send\"]\ntool = \"post_message\"\nroute = \"slack POST /api/chat.postMessage\"\n\
             [tools.\"messages.send\".arguments]\nchannel = \"to\"\ntext = \"body\"\n\
             [vendor.slack]\nbase_url_env = \"SLACK_API_URL\"\napi_key_env = \"SLACK_BOT_TOKEN\"\n",
            std::path::Path::new("/work/replaylab.toml"),
        )
        .expect("a valid map");
        let s34 = scenarios::builtin_by_id("S34").expect("built in");
        assert!(needs_of(&s34, None).queue_consumer, "the contract queues messages.send");
        assert!(!needs_of(&s34, Some(&slack)).queue_consumer, "the server posts to Slack itself");
        // S16 pauses at the queue: only a server with a queue consumer can take part.
        let s16 = scenarios::builtin_by_id("S16").expect("built in");
        assert!(needs_of(&s16, Some(&slack)).queue_consumer);
        // A map that binds the role to the native route leaves the queue to the server.
        let native = world::toolmap::ToolMap::parse(
            "[tools.\"messages.send\"]\ntool = \"send\"\n",
            std::path::Path::new("/work/replaylab.toml"),
        )
        .expect("a valid map");
        assert!(needs_of(&s34, Some(&native)).queue_consumer);
    }
}
