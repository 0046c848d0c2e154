//! What every world gives the runner, simulated or real: the state one run keeps ([`Shared`]:
//! the world clock, the history, the fake downstream, the contracts, the queue, the agent's
//! mailbox), the pause points a worker reaches, and the [`World`] trait the runner drives.
//!
//! Two worlds implement it: `world-sim` (a turmoil simulation; executors in process) and
//! `world-process` (real processes over MCP, real time, SIGKILL). One runner drives both, and
//! one judge (`judge`) reads what they recorded.
//!
//! Invariants: nothing here starts a host or a process; every world records into the same
//! history with the same events, at the same boundaries ([`boundary`]). It may import the
//! judge (the history it fills), `fake-downstream`, `protocol`, `scenarios`, `wire`; never a
//! world, the runner or the command.
//!
//! Everything here runs on one thread. State that must survive a worker crash (the executor
//! factory, the queue, the history) lives in [`Shared`], outside the workers.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod boundary;
pub mod clock;
pub mod process;
pub mod toolmap;

/// Reads `path` whole if it is a regular file of at most `limit` bytes: a FIFO, a device or a
/// directory is refused before any read (a FIFO would block for good). Every input file of
/// replaylab's commands is read through here (scenario files check the same themselves).
pub fn read_regular_file(path: &std::path::Path, limit: u64) -> Result<String, String> {
    use std::io::Read;
    let metadata = std::fs::metadata(path).map_err(|error| format!("{}: {error}", path.display()))?;
    if !metadata.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if metadata.len() > limit {
        return Err(format!(
            "{}: {} bytes, more than the {limit} a file of this kind may have",
            path.display(),
            metadata.len()
        ));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(limit + 1).read_to_string(&mut text))
        .map_err(|error| format!("{}: {error}", path.display()))?;
    Ok(text)
}

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use fake_downstream::{Downstream, DownstreamConfig, Service, ServiceConfig, WebhookConfig};
use protocol::{ContractSet, Envelope, ExecutorFactory, OperationRef, Outcome, ToolCall};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use scenarios::{Moment, PausePoint, Scenario};

use judge::attribution::{tool_effect_kind, RequestClass};
use judge::history::{EventKind, History, RequestKind};

use crate::clock::WorldClock;

/// How long the agent waits for a worker's answer, in either world.
pub const AGENT_TIMEOUT: Duration = Duration::from_secs(10);

/// The port every simulated server listens on (and that webhook URLs name).
pub const PORT: u16 = 80;
/// Store-call latency through the store gate: one to three ticks.
const MAX_STORE_LATENCY_MS: u64 = 25;
/// The lease every contract gets in the simulation unless the scenario sets one: short, so
/// that recovery happens within a short settle (real contracts say seconds to minutes).
pub const SIMULATED_LEASE: Duration = Duration::from_secs(2);

/// Where a worker reached a pause point: the value turmoil barriers match on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointReached {
    /// The worker.
    pub worker: String,
    /// The point, with what the harness knows of it there.
    pub point: Reached,
}

/// A pause point as a worker reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reached {
    /// Around a downstream request.
    Downstream {
        /// Before it left, or after its answer (or failure).
        moment: Moment,
        /// Its method.
        method: String,
        /// Its path, without the query.
        path: String,
        /// After: the downstream committed an effect for it.
        committed: bool,
        /// The operations whose calls carried the request's business content.
        operations: Vec<String>,
    },
    /// Before a store call.
    BeforeStore(String),
    /// After a store call.
    AfterStore(String),
    /// A consumer finished a delivery, before the queue hears the ack.
    BeforeQueueAck,
}

impl PointReached {
    /// `worker` at a downstream request's `moment`.
    pub fn downstream(
        worker: &str,
        moment: Moment,
        request: (&str, &str),
        committed: bool,
        operations: &[String],
    ) -> PointReached {
        let (method, path) = request;
        PointReached {
            worker: worker.to_owned(),
            point: Reached::Downstream {
                moment,
                method: method.to_owned(),
                path: path.to_owned(),
                committed,
                operations: operations.to_vec(),
            },
        }
    }

    /// Whether a pause at `point` (on `worker`, or on any worker) stops here; `operation` is
    /// the path (`tenant/environment/workflow/step`) of the operation the point's filter names.
    pub fn stops(&self, worker: Option<&str>, point: &PausePoint, operation: Option<&str>) -> bool {
        if worker.is_some_and(|worker| worker != self.worker) {
            return false;
        }
        match (point, &self.point) {
            (
                PausePoint::Downstream { moment, filter },
                Reached::Downstream { moment: reached, method, path, committed, operations },
            ) => {
                let class = RequestClass::of(method, path);
                let qualified = match moment {
                    Moment::Before => class.effect_kind().is_some(),
                    Moment::After => *committed,
                };
                moment == reached
                    && (!filter.effect || qualified)
                    && filter.method.as_deref().is_none_or(|wanted| wanted.eq_ignore_ascii_case(method))
                    && filter.path.as_deref().is_none_or(|wanted| fake_downstream::path_selects(wanted, path))
                    && filter.tool.as_deref().is_none_or(|tool| {
                        tool_effect_kind(tool).is_some_and(|kind| class.effect_kind() == Some(kind))
                    })
                    && operation.is_none_or(|operation| operations.iter().any(|op| op == operation))
            }
            (PausePoint::BeforeStore(wanted), Reached::BeforeStore(name))
            | (PausePoint::AfterStore(wanted), Reached::AfterStore(name)) => wanted == name,
            (PausePoint::BeforeQueueAck, Reached::BeforeQueueAck) => true,
            _ => false,
        }
    }

    /// Whether this is the moment right after a request the downstream committed an effect for.
    pub fn after_commit(&self) -> bool {
        matches!(self.point, Reached::Downstream { moment: Moment::After, committed: true, .. })
    }

    /// `downstream:after POST /v1/charges (committed)`, `store:before:claim`, ...
    pub fn describe(&self) -> String {
        match &self.point {
            Reached::Downstream { moment, method, path, committed, .. } => format!(
                "downstream:{} {method} {path}{}",
                if *moment == Moment::Before { "before" } else { "after" },
                if *committed { " (committed)" } else { "" }
            ),
            Reached::BeforeStore(name) => format!("store:before:{name}"),
            Reached::AfterStore(name) => format!("store:after:{name}"),
            Reached::BeforeQueueAck => "queue:before_ack".to_owned(),
        }
    }
}

/// What the agent got back for a request.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentResult {
    /// The worker's answer.
    Answered(Outcome),
    /// No usable answer (timeout, closed connection, lost on purpose, malformed).
    NoAnswer(String),
}

/// A request for the agent to make.
#[derive(Debug, Clone)]
pub enum AgentCommand {
    /// A tool call.
    Call {
        /// The scenario's label.
        label: String,
        /// The worker.
        worker: String,
        /// The call.
        call: ToolCall,
        /// Drop the answer on the way back.
        lose_answer: bool,
    },
    /// A poll or reconciliation.
    Query {
        /// The scenario's label.
        label: String,
        /// Poll or reconcile.
        kind: RequestKind,
        /// The worker.
        worker: String,
        /// The operation.
        operation: OperationRef,
    },
}

/// The simulated at-least-once queue between outboxes and consumers.
#[derive(Debug, Default)]
pub struct Queue {
    entries: Vec<QueueEntry>,
    next_delivery: u64,
}

#[derive(Debug, Clone)]
struct QueueEntry {
    delivery: u64,
    envelope: Envelope,
    origin: Option<String>,
    attempt: u32,
    visible_at_ms: u64,
    in_flight_until_ms: Option<u64>,
}

/// A delivery handed to a consumer.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Identifies this queue entry.
    pub delivery: u64,
    /// The envelope.
    pub envelope: Envelope,
    /// The operation tag it was written under.
    pub origin: Option<String>,
    /// Which delivery of the entry (from 1).
    pub attempt: u32,
}

/// How long a delivery may stay unacknowledged before it is delivered again.
pub const VISIBILITY_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a consumer's `retry` postpones the next delivery.
const RETRY_DELAY: Duration = Duration::from_secs(1);

impl Queue {
    /// Adds an envelope, `copies` times (2 when the scenario duplicates deliveries), to be
    /// delivered from `visible_at_ms` on.
    pub fn push(&mut self, envelope: Envelope, origin: Option<String>, copies: u32, visible_at_ms: u64) {
        for _ in 0..copies {
            self.next_delivery += 1;
            self.entries.push(QueueEntry {
                delivery: self.next_delivery,
                envelope: envelope.clone(),
                origin: origin.clone(),
                attempt: 0,
                visible_at_ms,
                in_flight_until_ms: None,
            });
        }
    }

    /// The next deliverable entry, marked in flight.
    pub fn take(&mut self, now_ms: u64) -> Option<Delivery> {
        let entry = self.entries.iter_mut().find(|entry| {
            entry.visible_at_ms <= now_ms && entry.in_flight_until_ms.is_none_or(|until| until <= now_ms)
        })?;
        entry.attempt += 1;
        entry.in_flight_until_ms = Some(now_ms + VISIBILITY_TIMEOUT.as_millis() as u64);
        Some(Delivery {
            delivery: entry.delivery,
            envelope: entry.envelope.clone(),
            origin: entry.origin.clone(),
            attempt: entry.attempt,
        })
    }

    /// Records a consumer's answer for `delivery`.
    pub fn settle(&mut self, delivery: u64, ack: bool, now_ms: u64) {
        if ack {
            self.entries.retain(|entry| entry.delivery != delivery);
        } else if let Some(entry) = self.entries.iter_mut().find(|entry| entry.delivery == delivery) {
            entry.in_flight_until_ms = None;
            entry.visible_at_ms = now_ms + RETRY_DELAY.as_millis() as u64;
        }
    }

    /// When the queue next needs a consumer: `Some(now_ms)` or earlier when an entry is
    /// deliverable now, the earliest time one becomes deliverable (a retry delay or a
    /// visibility timeout running out), or `None` when the queue is empty.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.entries.iter().map(|entry| entry.visible_at_ms.max(entry.in_flight_until_ms.unwrap_or(0))).min()
    }

    /// When the last envelope never delivered yet becomes deliverable (a queue's delivery delay):
    /// work that is legitimately still on its way until then.
    pub fn last_first_delivery_ms(&self) -> Option<u64> {
        self.entries.iter().filter(|entry| entry.attempt == 0).map(|entry| entry.visible_at_ms).max()
    }

    /// How many entries are not yet acknowledged.
    pub fn pending(&self) -> usize {
        self.entries.len()
    }
}

/// The agent's mailbox and results.
#[derive(Debug, Default)]
pub struct AgentState {
    /// Commands not yet picked up.
    pub inbox: RefCell<VecDeque<AgentCommand>>,
    /// Wakes the agent when a command arrives.
    pub wake: tokio::sync::Notify,
    /// What each labelled request got, once it is settled.
    pub results: RefCell<BTreeMap<String, AgentResult>>,
    /// Labels sent but not settled.
    pub outstanding: RefCell<BTreeSet<String>>,
    /// For each request on its way, the world time at which the agent gives up waiting.
    pub deadlines: RefCell<BTreeMap<String, u64>>,
    /// Notified when the runner skipped idle time, so that waits on the world clock re-check.
    pub clock_moved: tokio::sync::Notify,
}

/// State shared by the hosts of one run (and the runner).
pub struct Shared {
    /// The run's seed.
    pub seed: u64,
    /// The world clock every host and the runner read.
    pub clock: WorldClock,
    /// Executor calls (tool calls, polls, deliveries, webhooks) and background tasks in
    /// progress on any worker.
    pub executor_busy: Cell<usize>,
    /// Background tasks asleep in [`protocol::Background::sleep`], by number: when each wakes,
    /// by the world clock. A task asleep there does not keep the world busy.
    pub sleepers: RefCell<BTreeMap<u64, u64>>,
    /// Numbers sleepers.
    pub next_sleeper: Cell<u64>,
    /// Set when an executor panicked in [`protocol::ExecutorFactory::start`]: the runner stops
    /// the run, which is `crashed`.
    pub start_panicked: Cell<bool>,
    /// Notified when the runner skipped idle time, so that sleepers re-check the world clock.
    pub clock_moved: tokio::sync::Notify,
    /// The ordered history.
    pub history: History,
    /// The fake downstream.
    pub downstream: Downstream,
    /// The tool contracts, true to this world's downstream.
    pub contracts: Arc<ContractSet>,
    /// The queue.
    pub queue: RefCell<Queue>,
    /// Deliveries per envelope (2 when the scenario duplicates).
    pub queue_copies: u32,
    /// How long an envelope waits before a consumer can take it.
    pub queue_delay_ms: u64,
    /// Store-call latency and other harness randomness.
    pub rng: RefCell<ChaCha8Rng>,
    /// The agent.
    pub agent: AgentState,
    /// Starts executors.
    pub factory: Rc<dyn ExecutorFactory>,
    /// Starts per worker so far.
    pub incarnations: RefCell<BTreeMap<String, u32>>,
    /// Downstream requests sent so far by every worker (numbers request ids).
    pub requests_sent: Cell<u64>,
    /// The operations each business content was sent for by the agent's calls (what a pause
    /// point that names an operation recognises a request by).
    pub call_contents: RefCell<BTreeMap<String, BTreeSet<String>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("seed", &self.seed).finish_non_exhaustive()
    }
}

impl Shared {
    /// Simulated milliseconds since the start, by the world clock.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// A seed for something named `what` (a worker's entropy, ...), derived from the run seed.
    pub fn derived_seed(&self, what: &str) -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ self.seed;
        for byte in what.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        hash
    }

    /// Whether any executor call or background task is active (not asleep).
    pub fn executors_active(&self) -> bool {
        self.executor_busy.get() > self.sleepers.borrow().len()
    }

    /// A new request id for a request `worker` sends downstream: `worker-1#7`.
    pub fn next_request_id(&self, worker: &str) -> String {
        let number = self.requests_sent.get() + 1;
        self.requests_sent.set(number);
        format!("{worker}#{number}")
    }

    /// The operations whose calls were sent with this business content (what a pause point
    /// that names an operation recognises a downstream request by), in order.
    pub fn operations_sent(&self, content: Option<&String>) -> Vec<String> {
        content
            .and_then(|content| self.call_contents.borrow().get(content).cloned())
            .map(|operations| operations.into_iter().collect())
            .unwrap_or_default()
    }

    /// A store-call latency, 1 to `MAX_STORE_LATENCY_MS` ms.
    pub fn store_latency(&self) -> Duration {
        Duration::from_millis(1 + self.rng.borrow_mut().next_u64() % MAX_STORE_LATENCY_MS)
    }
}

/// The contracts for a scenario: the built-ins, with capabilities true to its downstream and
/// its lease and retention.
pub fn contracts_for(scenario: &Scenario, downstream: &DownstreamConfig) -> ContractSet {
    let mut contracts = ContractSet::builtin();
    for service in Service::ALL {
        let config = downstream.service(service);
        contracts.set_capabilities(
            service.as_str(),
            config.idempotency == fake_downstream::IdempotencyMode::Honoured,
            config.receipts,
        );
    }
    let sample = contracts.iter().next().expect("built-in contracts exist").clone();
    contracts.set_timing(
        scenario.timing.lease.unwrap_or(SIMULATED_LEASE),
        scenario.timing.retention.unwrap_or(sample.retention),
    );
    contracts
}

/// The downstream's configuration for a scenario.
pub fn downstream_config(scenario: &Scenario) -> DownstreamConfig {
    let mut config = DownstreamConfig::default();
    for (name, spec) in &scenario.downstream.services {
        let service = Service::parse(name).expect("scenarios validate service names");
        config.set_service(service, ServiceConfig { idempotency: spec.idempotency, receipts: spec.receipts });
    }
    if let Some(duration) = scenario.downstream.job_duration {
        config.job_duration = duration;
    }
    if let Some(webhook) = scenario.downstream.webhook {
        config.webhook = Some(WebhookConfig {
            url: format!("http://worker-1:{PORT}/v1/webhooks"),
            repeat_same_event: webhook.repeat_same_event,
            extra_event_ids: webhook.extra_event_ids,
        });
    }
    config
}

impl Shared {
    /// The state of one run in either world: the clock, the history, the fake downstream (its
    /// observer the history), the contracts, the queue, the agent's mailbox; `factory` starts
    /// the executors of the simulated world (the black-box world starts processes instead).
    pub fn new(
        scenario: &Scenario,
        seed: u64,
        factory: Rc<dyn ExecutorFactory>,
        clock: WorldClock,
        connector: Arc<dyn wire::Connect>,
    ) -> Rc<Shared> {
        let history = History::new(clock.clone());
        let config = downstream_config(scenario);
        let contracts = Arc::new(contracts_for(scenario, &config));
        let downstream = Downstream::new(config, Arc::new(clock.clone()), connector);
        downstream.set_observer(Arc::new(history.clone()));
        Rc::new(Shared {
            seed,
            clock,
            executor_busy: Cell::new(0),
            sleepers: RefCell::new(BTreeMap::new()),
            next_sleeper: Cell::new(0),
            start_panicked: Cell::new(false),
            clock_moved: tokio::sync::Notify::new(),
            history,
            downstream,
            contracts,
            queue: RefCell::new(Queue::default()),
            queue_copies: if scenario.queue.duplicate_deliveries { 2 } else { 1 },
            queue_delay_ms: scenario.queue.delivery_delay.map_or(0, |delay| delay.as_millis() as u64),
            rng: RefCell::new(ChaCha8Rng::seed_from_u64(seed)),
            agent: AgentState::default(),
            factory,
            incarnations: RefCell::new(BTreeMap::new()),
            requests_sent: Cell::new(0),
            call_contents: RefCell::new(BTreeMap::new()),
        })
    }
}

/// The real-time deadlines a world on real time hands the executors' processes (as
/// `REPLAYLAB_LEASE_MS`, `REPLAYLAB_RETENTION_MS`, `REPLAYLAB_DOWNSTREAM_TIMEOUT_MS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GivenTiming {
    /// How long a claim is its owner's.
    pub lease: Duration,
    /// How long a key is remembered.
    pub retention: Duration,
    /// How long a process waits for a downstream answer.
    pub downstream_timeout: Duration,
}

/// What the runner needs of a world beyond [`Shared`]: moving it on, pausing a worker at a
/// point, crashing and restarting workers. The simulated world (`world-sim`'s `SimWorld`) does it with
/// turmoil; the process world (`world-process`'s `RealWorld`) with real processes, real
/// time and requests held at the downstream. One runner drives both.
pub trait World {
    /// Moves the world on by one step: a turmoil tick, or a short slice of real time.
    fn step(&mut self) -> Result<(), String>;
    /// The world time stepped through so far (for the simulation, turmoil's elapsed time; the
    /// rest of a run's span was idle time skipped).
    fn stepped(&self) -> Duration;
    /// Whether the runner may skip idle time (only a simulated clock can jump).
    fn skips_idle_time(&self) -> bool;
    /// Whether every downstream request carries the tag of the work that sent it (the
    /// judge's [`judge::oracles::Evidence::tags_complete`]): true where each task is tagged, as
    /// in the simulation.
    fn tags_every_request(&self) -> bool {
        true
    }
    /// Whether the world sees every store commit an executor makes (the judge's
    /// [`judge::oracles::Evidence::store_seen`]): true where the harness gates the store, as in
    /// the simulation.
    fn sees_store(&self) -> bool {
        true
    }
    /// Messages on the network (between hosts of the simulation); `0` where nothing can tell.
    fn in_flight(&mut self) -> usize;
    /// Downstream requests an executor sent that are still open, where the world can tell
    /// and they do not end on their own in world time (a real process's request, bounded by
    /// its own downstream timeout): the settle phase waits for them.
    fn open_downstream_requests(&self) -> usize {
        0
    }
    /// Arms the pause `name`: the next time `worker` (any worker for `None`) reaches `point`
    /// (for an operation's requests only, when `operation` names one), it waits there.
    fn arm(&mut self, name: &str, worker: Option<String>, point: PausePoint, operation: Option<String>);
    /// Where the pause `name` holds a worker, once it was reached (it stays held until
    /// [`World::release`]).
    fn reached(&mut self, name: &str) -> Option<PointReached>;
    /// Lets the worker the pause `name` holds go on, and disarms it.
    fn release(&mut self, name: &str);
    /// Kills `worker` (its executor dies; state outside it survives); an error says why the
    /// crash did not happen.
    fn crash(&mut self, worker: &str) -> Result<(), String>;
    /// Starts `worker` again after a crash: its next incarnation.
    fn restart(&mut self, worker: &str);
    /// Where the run's real time went, in a world on real time (the waiting the runner adds).
    fn real_time(&self) -> Option<reports::RealTime> {
        None
    }
    /// The lease, retention and downstream timeout the world asked the executors' processes
    /// to use, in a world on real time (`None` where executors keep their own clocks, as
    /// simulated ones do): the runner's time premises measure a run against them.
    fn timing_given(&self) -> Option<GivenTiming> {
        None
    }
    /// What a run that did not pass should say of the world besides its history (a
    /// process's last words on stderr).
    fn failure_notes(&mut self) -> Vec<String> {
        Vec::new()
    }
}

impl Shared {
    /// Records a history event from the runner (outside any host).
    pub fn record(&self, kind: EventKind) {
        self.history.push(kind);
    }

    /// The operation whose request made the job `job_id` (its `job_accepted` effect), as
    /// attribution tells from the history so far: the origin of that job's completion webhooks.
    pub fn origin_of_job(&self, job_id: &str) -> Option<String> {
        let history = self.history.events();
        let attribution = judge::attribution::Attribution::build(&history);
        history.iter().find_map(|event| match &event.kind {
            EventKind::Effect { effect }
                if effect.effect_reference == job_id
                    && effect.kind == fake_downstream::EffectKind::JobAccepted =>
            {
                attribution.effect(effect.seq).map(str::to_owned)
            }
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use scenarios::RequestFilter;

    use super::*;

    fn at(moment: Moment, method: &str, path: &str, committed: bool) -> PointReached {
        PointReached {
            worker: "worker-1".into(),
            point: Reached::Downstream {
                moment,
                method: method.into(),
                path: path.into(),
                committed,
                operations: vec!["acme/production/run_1/step_1".into()],
            },
        }
    }

    #[test]
    fn qualified_downstream_points_stop_only_at_their_moment() {
        let after_commit = PausePoint::downstream(Moment::After, true);
        assert!(at(Moment::After, "POST", "/v1/tickets", true).stops(Some("worker-1"), &after_commit, None));
        assert!(!at(Moment::After, "POST", "/v1/tickets", false).stops(
            Some("worker-1"),
            &after_commit,
            None
        ));
        assert!(!at(Moment::After, "GET", "/v1/receipts/k", false).stops(None, &after_commit, None));
        assert!(!at(Moment::Before, "POST", "/v1/tickets", true).stops(None, &after_commit, None));
        assert!(!at(Moment::After, "POST", "/v1/tickets", true).stops(Some("worker-2"), &after_commit, None));

        let before_effect = PausePoint::downstream(Moment::Before, true);
        assert!(at(Moment::Before, "PATCH", "/v1/tickets/ticket_1", false).stops(None, &before_effect, None));
        assert!(!at(Moment::Before, "GET", "/v1/tickets/ticket_1", false).stops(None, &before_effect, None));
        assert!(!at(Moment::Before, "GET", "/v1/receipts/k", false).stops(None, &before_effect, None));
        // Unqualified, any request will do.
        assert!(at(Moment::Before, "GET", "/v1/receipts/k", false).stops(
            None,
            &PausePoint::downstream(Moment::Before, false),
            None
        ));
    }

    #[test]
    fn downstream_points_filter_by_method_path_and_tool() {
        let point = |filter: RequestFilter| PausePoint::Downstream { moment: Moment::Before, filter };
        let charge = at(Moment::Before, "POST", "/v1/charges", false);
        let by_tool =
            point(RequestFilter { tool: Some("payments.charge".into()), ..RequestFilter::default() });
        assert!(charge.stops(None, &by_tool, None));
        assert!(!at(Moment::Before, "POST", "/v1/tickets", false).stops(None, &by_tool, None));
        let by_prefix =
            point(RequestFilter { path: Some("/v1/tickets/*".into()), ..RequestFilter::default() });
        assert!(at(Moment::Before, "PATCH", "/v1/tickets/ticket_2", false).stops(None, &by_prefix, None));
        assert!(!charge.stops(None, &by_prefix, None));
        let by_method = point(RequestFilter { method: Some("get".into()), ..RequestFilter::default() });
        assert!(!charge.stops(None, &by_method, None));
        assert!(at(Moment::Before, "GET", "/v1/jobs/job_1", false).stops(None, &by_method, None));
        let any = PausePoint::downstream(Moment::Before, false);
        assert!(charge.stops(None, &any, Some("acme/production/run_1/step_1")));
        assert!(
            !charge.stops(None, &any, Some("acme/production/run_1/step_2")),
            "another operation's content"
        );
    }
}
