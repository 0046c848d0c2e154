//! The simulated world: a turmoil `Sim` with the `downstream` host, the worker hosts
//! ([`worker`]: the executor under test in process) and the `agent` client ([`agent`]), over
//! the state every world keeps ([`world::Shared`]).
//!
//! Invariants: the same seed gives the same history, byte for byte (fixed epoch, seeded
//! latencies and host order, seeded tokio scheduler under `--cfg tokio_unstable`); nothing
//! here reads the wall clock. It may import `world`, the judge, `protocol`, `wire` (with
//! turmoil), `fake-downstream`, `scenarios`; never the process world, the runner or the command.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

#[cfg(not(tokio_unstable))]
compile_error!(
    "replaylab's harness must be built with `--cfg tokio_unstable`, or runs are not deterministic \
     (turmoil seeds tokio's scheduler only then). Add to `.cargo/config.toml` beside your \
     Cargo.toml (rustdocflags for doctests):\n\n[build]\nrustflags = [\"--cfg\", \"tokio_unstable\"]\nrustdocflags = [\"--cfg\", \"tokio_unstable\"]\n\n\
     Installing the replaylab command with `cargo install --git` (which reads no \
     `.cargo/config.toml` of the repository's): RUSTFLAGS=\"--cfg tokio_unstable\" cargo install \
     --locked --git <the repository> harness\n"
);

pub mod agent;
pub mod worker;

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use protocol::ExecutorFactory;
use scenarios::{PausePoint, Scenario};
use turmoil::Sim;
use world::clock::WorldClock;
use world::{PointReached, Shared, World, PORT};

/// Simulated time per step. Each step costs the same wall time whatever happens in it, so
/// coarser ticks make runs cheaper; latencies span several ticks so that the seed still
/// decides the order in which messages and store calls land.
pub const TICK: Duration = Duration::from_millis(10);
/// The longest a run may last in simulated time before it is stopped as a liveness failure.
pub const MAX_SIMULATED: Duration = Duration::from_secs(600);

/// Connections a simulated host may have waiting to be accepted (and segments in flight on one
/// connection): room for every operation of a large scenario polled at once (the final polls
/// of 1,000 operations reach one worker together). turmoil's channels grow as they fill, so
/// room that is not used costs nothing.
pub const TCP_CAPACITY: usize = 16_384;
/// The fixed epoch of every simulation (the default would leak wall-clock time).
pub const EPOCH_SECONDS: u64 = 1_767_225_600;
/// Message latency on the simulated network: one to four ticks.
pub const MIN_LATENCY: Duration = Duration::from_millis(1);
/// See [`MIN_LATENCY`].
pub const MAX_LATENCY: Duration = Duration::from_millis(40);

/// The fixed parameters of every simulated world, for the reports.
pub fn parameters() -> reports::WorldParameters {
    reports::WorldParameters {
        tick_ms: TICK.as_millis() as u64,
        min_latency_ms: MIN_LATENCY.as_millis() as u64,
        max_latency_ms: MAX_LATENCY.as_millis() as u64,
        agent_timeout_ms: world::AGENT_TIMEOUT.as_millis() as u64,
        run_limit_ms: MAX_SIMULATED.as_millis() as u64,
        epoch_seconds: EPOCH_SECONDS,
    }
}

/// The turmoil builder every simulated world (and the benchmark's yardstick) starts from:
/// fixed epoch, the seed, the tick, the latencies, the run limit, seeded host order.
pub fn builder(seed: u64) -> turmoil::Builder {
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_secs(EPOCH_SECONDS))
        .tick_duration(TICK)
        .min_message_latency(MIN_LATENCY)
        .max_message_latency(MAX_LATENCY)
        .simulation_duration(MAX_SIMULATED)
        // turmoil panics when a listener's backlog is full (64 by default): a scenario's final
        // polls all reach one worker at once, one connection each.
        .tcp_capacity(TCP_CAPACITY)
        // Hosts run in a seeded random order each tick, so the seed also decides which of two
        // workers acts first within a tick.
        .enable_random_order();
    builder
}

/// The simulated world: a turmoil `Sim` and the barriers of its pause points.
pub struct SimWorld {
    sim: Sim<'static>,
    armed: BTreeMap<String, turmoil::barriers::Barrier<PointReached>>,
    held: BTreeMap<String, turmoil::barriers::Triggered<PointReached>>,
}

impl std::fmt::Debug for SimWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimWorld")
            .field("armed", &self.armed.keys())
            .field("held", &self.held.keys())
            .finish()
    }
}

impl SimWorld {
    /// Builds the simulation for `scenario` and `seed`: hosts started, nothing sent yet.
    pub fn build(scenario: &Scenario, seed: u64, factory: Rc<dyn ExecutorFactory>) -> (SimWorld, Rc<Shared>) {
        let (sim, shared) = build(scenario, seed, factory);
        (SimWorld { sim, armed: BTreeMap::new(), held: BTreeMap::new() }, shared)
    }
}

impl World for SimWorld {
    fn step(&mut self) -> Result<(), String> {
        self.sim.step().map(|_| ()).map_err(|error| error.to_string())
    }

    fn stepped(&self) -> Duration {
        self.sim.elapsed()
    }

    fn skips_idle_time(&self) -> bool {
        true
    }

    fn in_flight(&mut self) -> usize {
        let mut in_flight = 0;
        self.sim.links(|links| {
            for link in links {
                in_flight += link.count();
            }
        });
        in_flight
    }

    fn arm(&mut self, name: &str, worker: Option<String>, point: PausePoint, operation: Option<String>) {
        use turmoil::barriers::{Barrier, Reaction};
        let barrier = Barrier::build(Reaction::Suspend, move |reached: &PointReached| {
            reached.stops(worker.as_deref(), &point, operation.as_deref())
        });
        self.armed.insert(name.to_owned(), barrier);
    }

    fn reached(&mut self, name: &str) -> Option<PointReached> {
        if let Some(triggered) = self.held.get(name) {
            return Some((**triggered).clone());
        }
        let barrier = self.armed.get_mut(name)?;
        let triggered = poll_barrier(barrier)?;
        // A pause stops one worker once: its barrier goes as soon as it is reached.
        self.armed.remove(name);
        let reached = (*triggered).clone();
        self.held.insert(name.to_owned(), triggered);
        Some(reached)
    }

    fn release(&mut self, name: &str) {
        self.held.remove(name);
        self.armed.remove(name);
    }

    fn crash(&mut self, worker: &str) -> Result<(), String> {
        self.sim.crash(worker);
        Ok(())
    }

    fn restart(&mut self, worker: &str) {
        self.sim.bounce(worker);
    }
}

/// Polls a barrier once without blocking.
fn poll_barrier(
    barrier: &mut turmoil::barriers::Barrier<PointReached>,
) -> Option<turmoil::barriers::Triggered<PointReached>> {
    use std::future::Future;
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let mut wait = Box::pin(barrier.wait());
    match wait.as_mut().poll(&mut context) {
        std::task::Poll::Ready(triggered) => triggered,
        std::task::Poll::Pending => None,
    }
}

/// Builds the simulation for `scenario` and `seed`: hosts started, nothing sent yet.
pub fn build(scenario: &Scenario, seed: u64, factory: Rc<dyn ExecutorFactory>) -> (Sim<'static>, Rc<Shared>) {
    let sim = builder(seed).build();
    let shared = Shared::new(scenario, seed, factory, WorldClock::default(), Arc::new(wire::SimConnector));
    let mut sim = sim;
    let served = shared.downstream.clone();
    sim.host("downstream", move || {
        // Workers reach the business API only: `/__admin` is the harness's, in process.
        let router = served.business_router();
        async move {
            let listener = turmoil::net::TcpListener::bind(("0.0.0.0", PORT)).await?;
            wire::serve(wire::SimAcceptor(listener), router).await?;
            Ok(())
        }
    });
    for name in scenario.worker_names() {
        let shared = shared.clone();
        let host = name.clone();
        sim.host(host.as_str(), move || worker::run(shared.clone(), name.clone()));
    }
    let agent_shared = shared.clone();
    sim.client("agent", agent::run(agent_shared));
    (sim, shared)
}
