//! The result of a matrix run, as every report renders it. The harness fills these types;
//! this crate knows nothing of the simulator.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A run's, scenario's or row's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Not run: the scenario needs something the executor does not declare it supports (a
    /// tool, a queue consumer, webhooks, ...). Never a pass; a row none of whose scenarios
    /// applied is not applicable too.
    NotApplicable,
    /// Every oracle and expectation held.
    Pass,
    /// The run could not decide (a pause point was never reached, a step could not apply).
    Unknown,
    /// The executor panicked or a run limit was hit.
    Crashed,
    /// An oracle or an expectation failed.
    Fail,
}

impl Verdict {
    /// `pass`, `fail`, `unknown`, `crashed`, `not_applicable` (as in `matrix.json`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::NotApplicable => "not_applicable",
            Verdict::Pass => "pass",
            Verdict::Unknown => "unknown",
            Verdict::Crashed => "crashed",
            Verdict::Fail => "fail",
        }
    }

    /// For people: `not applicable`, else as [`Verdict::as_str`].
    pub fn label(self) -> &'static str {
        match self {
            Verdict::NotApplicable => "not applicable",
            other => other.as_str(),
        }
    }

    /// The worse of two verdicts (fail > crashed > unknown > pass); `not applicable` counts
    /// for nothing: combined with another verdict it gives that verdict, so a roll-up started
    /// from `NotApplicable` stays so only when nothing in it applied.
    pub fn worst(self, other: Verdict) -> Verdict {
        match (self, other) {
            (Verdict::NotApplicable, verdict) | (verdict, Verdict::NotApplicable) => verdict,
            _ => self.max(other),
        }
    }

    /// Whether the verdict is undecided: `unknown` or `not applicable` (neither a pass nor a
    /// failure of the executor).
    pub fn is_undecided(self) -> bool {
        matches!(self, Verdict::Unknown | Verdict::NotApplicable)
    }
}

impl std::fmt::Display for Verdict {
    /// [`Verdict::label`], padded to the formatter's width.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.label())
    }
}

/// The result of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunResult {
    /// `S02`.
    pub scenario: String,
    /// `lost_response_after_commit`.
    pub scenario_name: String,
    /// The seed.
    pub seed: u64,
    /// The executor's name.
    pub executor: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Oracle violations and failed expectations.
    pub violations: Vec<Violation>,
    /// Why the run was unknown or crashed, if it was.
    pub notes: Vec<String>,
    /// `sha256:` of the history's JSON lines.
    pub history_digest: String,
    /// Business effects in the ledger.
    pub effects: u64,
    /// Effect references in the ledger, in order.
    pub effect_references: Vec<String>,
    /// What each labelled request was answered (label, status).
    pub statuses: Vec<(String, String)>,
    /// The harness's fingerprints of the calls (label, fingerprint).
    pub fingerprints: Vec<(String, String)>,
    /// One command that reproduces this run.
    pub reproduce: String,
}

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Violation {
    /// `O1`..`O12`, or `expect` for a scenario expectation.
    pub oracle: String,
    /// `single_effect`, ... (or the scenario line for expectations).
    pub name: String,
    /// The operation (`tenant/environment/workflow/step`), when there is one.
    pub operation: Option<String>,
    /// History positions that show it.
    pub positions: Vec<u64>,
    /// What went wrong, in one sentence.
    pub explanation: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.oracle, self.name)?;
        if let Some(operation) = &self.operation {
            write!(f, " [{operation}]")?;
        }
        if !self.positions.is_empty() {
            let positions: Vec<String> = self.positions.iter().map(|p| format!("#{p}")).collect();
            write!(f, " at {}", positions.join(","))?;
        }
        write!(f, ": {}", self.explanation)
    }
}

/// A scenario's roll-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScenarioSummary {
    /// `S02`.
    pub id: String,
    /// `lost_response_after_commit`.
    pub name: String,
    /// The scenario's file: relative to the workspace root for a built-in
    /// (`scenarios/matrix/S02_lost_response_after_commit.toml`), as given for a user's file.
    pub source: String,
    /// The 1-based line of the scenario's `id` key in `source` (where a CI annotation points).
    pub line: u64,
    /// Rows it covers.
    pub rows: Vec<String>,
    /// What it does.
    pub summary: String,
    /// The contract it checks.
    pub expected: String,
    /// The worst verdict over its seeds.
    pub verdict: Verdict,
    /// Seeds run (a scenario not applicable to the executor runs none).
    pub seeds_run: u64,
    /// Runs per verdict.
    pub counts: BTreeMap<Verdict, u64>,
    /// Effects in the ledger, per seed (min and max).
    pub effects_min: u64,
    /// Effects in the ledger, per seed (max).
    pub effects_max: u64,
    /// Every status the executor answered, with how many times.
    pub statuses: BTreeMap<String, u64>,
    /// The first seed's run, as evidence (effect references, fingerprints, statuses).
    pub sample: RunResult,
    /// The first failing (or crashed, or unknown) run, if any.
    pub first_failure: Option<RunResult>,
    /// Seeds whose two runs gave different histories (with `--check-determinism`).
    pub nondeterministic_seeds: Vec<u64>,
    /// The first failing run drawn as a timeline, or the first seed's run when all passed.
    pub timeline: Timeline,
}

/// A row's roll-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RowSummary {
    /// `C1`..`C10`, `F1`..`F9`, or the id of a scenario from the document's prose (`S13`..).
    pub row: String,
    /// The worst verdict of the scenarios that cover it (unknown when none does).
    pub verdict: Verdict,
    /// The scenarios that decided it.
    pub scenarios: Vec<String>,
    /// Runs behind it (scenarios not applicable to the executor run none).
    pub seeds_run: u64,
    /// The first failing run among its scenarios.
    pub first_failure: Option<RowFailure>,
}

/// Where a row failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RowFailure {
    /// The scenario.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// Its verdict.
    pub verdict: Verdict,
    /// What broke.
    pub violations: Vec<Violation>,
    /// Why it was unknown or crashed.
    pub notes: Vec<String>,
    /// The command that reproduces it.
    pub reproduce: String,
}

/// The version of the `matrix.json` format; bump it on any incompatible change. 2: the
/// verdict `not_applicable` (a scenario needing what the executor does not declare).
pub const SCHEMA_VERSION: u32 = 2;

/// The result of a matrix run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MatrixResult {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The replaylab version that ran it.
    pub harness_version: String,
    /// The source commit, when known (`REPLAYLAB_COMMIT`, `GITHUB_SHA` or `git rev-parse`).
    pub commit: Option<String>,
    /// The simulated world's fixed parameters.
    pub parameters: WorldParameters,
    /// The executor's name.
    pub executor: String,
    /// Its version.
    pub executor_version: String,
    /// Seeds per scenario.
    pub seeds: u64,
    /// The first seed.
    pub first_seed: u64,
    /// Whether each seed was run twice and compared.
    pub determinism_checked: bool,
    /// The rows: C1..C10, F1..F9, then one per scenario from the document's prose.
    pub rows: Vec<RowSummary>,
    /// The scenarios, in order.
    pub scenarios: Vec<ScenarioSummary>,
    /// Pass only when every row and every scenario passes.
    pub verdict: Verdict,
}

/// The fixed parameters of the simulated world a matrix ran in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorldParameters {
    /// Simulated time per step, in milliseconds.
    pub tick_ms: u64,
    /// Message latency on the simulated network, in milliseconds.
    pub min_latency_ms: u64,
    /// Message latency on the simulated network, in milliseconds.
    pub max_latency_ms: u64,
    /// How long the agent waits for a worker's answer, in milliseconds.
    pub agent_timeout_ms: u64,
    /// The longest a run may last in simulated time, in milliseconds.
    pub run_limit_ms: u64,
    /// The fixed epoch of every simulation, in seconds since 1970.
    pub epoch_seconds: u64,
}

/// A lane of a timeline: who did something.
pub type Lane = String;

/// What a timeline mark shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    /// The agent sent a call, poll or reconciliation (agent -> worker).
    Request,
    /// A worker answered with an outcome label (worker -> agent).
    Outcome,
    /// The agent got no answer.
    NoAnswer,
    /// A worker sent a request downstream (worker -> downstream).
    DownstreamRequest,
    /// A downstream answer reached a worker (downstream -> worker).
    DownstreamAnswer,
    /// A downstream request got no answer (lost, reset, timed out).
    DownstreamLost,
    /// The downstream committed an effect (the ledger).
    Effect,
    /// A fault rule fired or was installed.
    Fault,
    /// A worker was paused or released.
    Pause,
    /// A worker crashed.
    Crash,
    /// A worker restarted.
    Restart,
    /// A durable store call committed.
    Store,
    /// An authorization decision, a revocation, or a human edit.
    Decision,
    /// The queue or a webhook moved.
    Delivery,
    /// Simulated time was let pass, or the settle phase began.
    Clock,
    /// The executor panicked or a limit was hit.
    Failure,
}

impl MarkKind {
    /// Every kind, in declaration order (the legend's order).
    pub const ALL: [MarkKind; 16] = [
        MarkKind::Request,
        MarkKind::Outcome,
        MarkKind::NoAnswer,
        MarkKind::DownstreamRequest,
        MarkKind::DownstreamAnswer,
        MarkKind::DownstreamLost,
        MarkKind::Effect,
        MarkKind::Fault,
        MarkKind::Pause,
        MarkKind::Crash,
        MarkKind::Restart,
        MarkKind::Store,
        MarkKind::Decision,
        MarkKind::Delivery,
        MarkKind::Clock,
        MarkKind::Failure,
    ];

    /// The serialised name: `request`, `downstream_lost`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            MarkKind::Request => "request",
            MarkKind::Outcome => "outcome",
            MarkKind::NoAnswer => "no_answer",
            MarkKind::DownstreamRequest => "downstream_request",
            MarkKind::DownstreamAnswer => "downstream_answer",
            MarkKind::DownstreamLost => "downstream_lost",
            MarkKind::Effect => "effect",
            MarkKind::Fault => "fault",
            MarkKind::Pause => "pause",
            MarkKind::Crash => "crash",
            MarkKind::Restart => "restart",
            MarkKind::Store => "store",
            MarkKind::Decision => "decision",
            MarkKind::Delivery => "delivery",
            MarkKind::Clock => "clock",
            MarkKind::Failure => "failure",
        }
    }
}

/// One mark on a timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Mark {
    /// History position.
    pub seq: u64,
    /// Simulated milliseconds since the run started.
    pub at_ms: u64,
    /// Where it happened.
    pub lane: Lane,
    /// For messages, where it went.
    pub to_lane: Option<Lane>,
    /// What it is.
    pub kind: MarkKind,
    /// A short text (no request bodies, ever).
    pub label: String,
    /// The executor's `tracing` events that led to it (emitted after the previous mark), as
    /// text; only for the failing run a scenario shows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<String>,
}

/// One run drawn as lanes and marks (agent, workers, downstream, store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Timeline {
    /// The seed of the run drawn.
    pub seed: u64,
    /// The lanes, top to bottom.
    pub lanes: Vec<Lane>,
    /// The marks, in history order.
    pub marks: Vec<Mark>,
}
