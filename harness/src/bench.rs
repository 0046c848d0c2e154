//! `replaylab bench`: the harness's speed against a raw turmoil yardstick, and the claim
//! store's speed against hand-written SQL. Benchmarks measure; tests never time anything.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use scenarios::Scenario;

use crate::executors::ExecutorSpec;
use crate::history::EventKind;
use crate::runner;
use crate::world::{self, PORT};

/// What one harness run looked like, for the yardstick to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunShape {
    /// HTTP exchanges in the run (agent to worker, worker to downstream, webhooks).
    pub messages: u64,
    /// Simulated time the run stepped through (idle time it skipped costs nothing and is
    /// not counted: the yardstick steps through all of its span).
    pub simulated: Duration,
    /// The run's whole span by the world clock, skipped idle time included.
    pub span: Duration,
    /// Simulated hosts in the run's world: the agent, the downstream and each worker.
    pub hosts: u64,
}

/// The result of `bench sim`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimBench {
    /// Harness runs per second (all threads).
    pub harness_runs_per_second: f64,
    /// Raw turmoil runs per second with the same messages over the harness's stepped time
    /// (all threads): the yardstick for the harness's own cost per simulated exchange.
    pub baseline_runs_per_second: f64,
    /// Raw turmoil runs per second with the same messages stepping through the run's whole
    /// span (all threads): what raw turmoil, which cannot skip idle time, pays to simulate as
    /// much time.
    pub whole_span_runs_per_second: f64,
    /// Raw turmoil runs per second with the same messages over the same stepped time, with as
    /// many hosts as the harness's world (the extra ones idle; all threads): turmoil's cost
    /// per host per tick is then the same on both sides. Context, not the yardstick.
    pub same_hosts_runs_per_second: f64,
    /// The shape each baseline run copied.
    pub shape: RunShape,
}

impl SimBench {
    /// harness / baseline.
    pub fn ratio(&self) -> f64 {
        self.harness_runs_per_second / self.baseline_runs_per_second
    }
}

/// The shape of `scenario`'s run with `seed`.
pub fn shape_of(scenario: &Scenario, seed: u64, executor: &ExecutorSpec) -> RunShape {
    let record = runner::run(scenario, seed, executor);
    let messages = record
        .history
        .iter()
        .filter(|event| {
            matches!(
                event.kind,
                EventKind::CallSent { .. }
                    | EventKind::OperationQuery { .. }
                    | EventKind::DownstreamSent { .. }
                    | EventKind::WebhookReceived { .. }
            )
        })
        .count() as u64;
    let span = Duration::from_millis(record.history.last().map_or(0, |event| event.at_ms));
    let hosts = 2 + u64::from(scenario.workers);
    RunShape { messages, simulated: record.stepped, span, hosts }
}

/// Runs `runs` harness runs of `scenario` and `runs` raw turmoil runs of the same shape, each
/// spread over `jobs` threads, in this process.
pub fn sim(scenario: &Scenario, executor: &ExecutorSpec, runs: u64, jobs: usize) -> SimBench {
    let shape = shape_of(scenario, 0, executor);
    let harness_seconds = parallel(runs, jobs, |seed| {
        runner::run(scenario, seed, executor);
    });
    let baseline_seconds =
        parallel(runs, jobs, |seed| baseline_run(seed, shape.messages, shape.simulated, 0));
    let whole_span_seconds = parallel(runs, jobs, |seed| baseline_run(seed, shape.messages, shape.span, 0));
    let idle_hosts = shape.hosts.saturating_sub(2);
    let same_hosts_seconds =
        parallel(runs, jobs, |seed| baseline_run(seed, shape.messages, shape.simulated, idle_hosts));
    SimBench {
        whole_span_runs_per_second: runs as f64 / whole_span_seconds,
        same_hosts_runs_per_second: runs as f64 / same_hosts_seconds,
        harness_runs_per_second: runs as f64 / harness_seconds,
        baseline_runs_per_second: runs as f64 / baseline_seconds,
        shape,
    }
}

fn parallel(runs: u64, jobs: usize, work: impl Fn(u64) + Sync) -> f64 {
    let next = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= runs {
                    break;
                }
                work(seed);
            });
        }
    });
    started.elapsed().as_secs_f64()
}

/// A raw turmoil program: one axum server, one client sending `messages` HTTP requests one
/// after another, then idling until `span` has passed (turmoil's cost grows with simulated
/// time, so the yardstick covers a given span), and `idle_hosts` hosts that wait for nothing
/// but are ticked like any host; built like every simulated world (`world::builder`: same
/// tick, latencies and host order).
pub fn baseline_run(seed: u64, messages: u64, span: Duration, idle_hosts: u64) {
    let mut sim = world::builder(seed).build();
    for index in 0..idle_hosts {
        sim.host(format!("idle-{index}"), std::future::pending::<turmoil::Result>);
    }
    sim.host("server", || async {
        let router = axum::Router::new()
            .route("/echo", axum::routing::post(|body: axum::body::Bytes| async move { body }));
        let listener = turmoil::net::TcpListener::bind((IpAddr::from(Ipv4Addr::UNSPECIFIED), PORT)).await?;
        wire::serve(wire::SimAcceptor(listener), router).await?;
        Ok(())
    });
    sim.client("client", async move {
        let client = wire::HttpClient::new(Arc::new(wire::SimConnector), "server", PORT);
        let started = tokio::time::Instant::now();
        for index in 0..messages {
            let request =
                wire::HttpRequest::json(http::Method::POST, "/echo", &serde_json::json!({ "n": index }));
            let response = client.send(request).await?;
            assert_eq!(response.status, 200, "the echo server answers");
        }
        let rest = span.saturating_sub(started.elapsed());
        tokio::time::sleep(rest).await;
        Ok(())
    });
    sim.run().expect("the baseline simulation runs");
}
