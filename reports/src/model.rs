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
#[serde(deny_unknown_fields)]
pub struct RunResult {
    /// `S02`.
    #[schemars(regex(pattern = r"^[A-Z][0-9]{2,}$"))]
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
    /// Per operation, what each of its calls was answered beside what the ledger holds for
    /// it (the effects the harness attributes to it from what it controls, never from the
    /// executor's words); effects it could tie to no operation come last, without one.
    pub operations: Vec<OperationRecord>,
    /// One command that reproduces this run.
    pub reproduce: String,
    /// Where the run's real time went: black-box runs only (simulated runs take no real
    /// time worth a report, and their reports stay deterministic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_time: Option<RealTime>,
}

/// Where real time went, in milliseconds: a black-box run's, or the sum of a matrix's runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RealTime {
    /// From the first process start to the verdict.
    pub wall_ms: u64,
    /// Starting worker processes (spawn to the end of the MCP handshake), restarts included.
    pub starting_ms: u64,
    /// Waiting that the scenario asks for in real time: `advance` steps and the settle time
    /// (leases, retention and jobs run out on the clock).
    pub waiting_ms: u64,
}

impl RealTime {
    /// The rest of the wall time: driving calls, faults, crashes and answers.
    pub fn working_ms(&self) -> u64 {
        self.wall_ms.saturating_sub(self.starting_ms).saturating_sub(self.waiting_ms)
    }

    /// The sum of two.
    pub fn plus(self, other: RealTime) -> RealTime {
        RealTime {
            wall_ms: self.wall_ms + other.wall_ms,
            starting_ms: self.starting_ms + other.starting_ms,
            waiting_ms: self.waiting_ms + other.waiting_ms,
        }
    }
}

/// How a matrix of the black-box world ran (`--executor-cmd`): absent for the simulated world.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlackBox {
    /// The command each worker process ran.
    pub command: String,
    /// Worker processes per run.
    pub workers: u64,
    /// `stdio`.
    pub transport: String,
    /// What the MCP handshake named (`replaylab-reference 0.1.0`), if anything.
    pub server: String,
    /// Where the capabilities came from: `manifest` or `tools/list`.
    pub capabilities_from: String,
    /// Always false: real processes on real time; the same repeat can end differently.
    pub deterministic: bool,
    /// Where the runs' real time went, summed over every run.
    pub time: RealTime,
    /// The wall time of the whole matrix, runs in parallel.
    pub matrix_wall_ms: u64,
    /// The oracles that had something to judge in at least one run. An oracle missing here
    /// could not judge this executor in this world (it reads what the server does not say,
    /// or what the harness cannot see of a process).
    pub oracles_judged: Vec<String>,
    /// Per tool the scenarios called: the MCP hints its `tools/list` declares beside those
    /// its results earned (clients decide retries from them). Empty for a server that listed
    /// no tool the scenarios called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<ToolHints>,
    /// Runs side by side (`--jobs`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub jobs: u64,
    /// The rules of the oracles that judged which had something to judge but could not judge
    /// it against this server, each in a sentence (O13's final state, where the server serves
    /// no `replaylab.poll`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules_not_judged: Vec<String>,
    /// Runs made `unknown` because real time ran out: a time premise did not hold (a retry
    /// past retention, an answer past the lease, a downstream answer past the worker's
    /// timeout, on a machine too slow for what the scenario needs). Fewer runs side by side
    /// leave each more of the machine.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub out_of_time: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// What one tool's results earned of MCP's tool hints (`readOnlyHint`, `destructiveHint`,
/// `idempotentHint`), beside what its `tools/list` declares: `matrix --check-annotations` fails
/// on a declared hint the results contradict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolHints {
    /// The role the scenarios called it as (`payments.charge`).
    pub role: String,
    /// The server's tool (`create_payment_intent`).
    pub tool: String,
    /// What its `tools/list` annotations say (absent: not declared).
    pub declared: Hints,
    /// Operations of this role delivered more than once, over the runs.
    pub repeated: u64,
    /// Of the operations, those that made more than one effect.
    pub duplicated: u64,
    /// The effects its operations made, by kind.
    pub effects: BTreeMap<String, u64>,
    /// What its results earned (absent: the runs did not show either way), from the counts
    /// above ([`ToolHints::new`]).
    pub earned: Hints,
    /// What the earned hints rest on, in words.
    pub evidence: String,
    /// The declared hints the results contradict (`idempotentHint`, ...).
    pub contradicted: Vec<String>,
    /// The scenarios that called it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scenarios: Vec<String>,
    /// For a tool a tool map binds to a vendor twin's route: the route and what the twin does
    /// with idempotency keys, which makes the scenarios above strict (a twin with no key: a
    /// resend after a lost answer is a second effect unless the server read back first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
}

/// MCP's tool hints, each known or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hints {
    /// The tool does not change its environment.
    #[serde(rename = "readOnlyHint", default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The tool may update or delete (not only add).
    #[serde(rename = "destructiveHint", default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Calling it again with the same arguments (the same operation, delivered again) has no
    /// further effect.
    #[serde(rename = "idempotentHint", default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
}

impl RunResult {
    /// Every answer of the run, in history order (label, status), `no answer` included.
    pub fn answers(&self) -> Vec<&Answer> {
        let mut answers: Vec<&Answer> = self.operations.iter().flat_map(|op| &op.answers).collect();
        answers.sort_by_key(|answer| answer.seq);
        answers
    }

    /// The oracles (and `expect`) that fired, each once, in the order of their first
    /// violation.
    pub fn oracles(&self) -> Vec<String> {
        let mut oracles: Vec<String> = Vec::new();
        for violation in &self.violations {
            if !oracles.contains(&violation.oracle) {
                oracles.push(violation.oracle.clone());
            }
        }
        oracles
    }

    /// This run as a failure: the one shape a failing (crashed, unknown) run has in rows,
    /// scenarios and every report.
    pub fn failed_run(&self) -> FailedRun {
        FailedRun {
            scenario: self.scenario.clone(),
            scenario_name: self.scenario_name.clone(),
            seed: self.seed,
            verdict: self.verdict,
            oracles: self.oracles(),
            violations: self.violations.clone(),
            notes: self.notes.clone(),
            reproduce: self.reproduce.clone(),
        }
    }
}

/// One operation of a run: what the executor answered for it, and what the ledger holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationRecord {
    /// `tenant/environment/workflow/step`; none for effects the harness could tie to no
    /// operation.
    pub operation: Option<String>,
    /// Its calls, polls and reconciliations, in the order they were sent.
    pub answers: Vec<Answer>,
    /// The ledger's business effects attributed to it, in ledger order.
    pub ledger: Vec<LedgerEntry>,
}

/// What one request of an operation was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The scenario's label for the request.
    pub label: String,
    /// `call`, `poll` or `reconcile`.
    pub kind: RequestKind,
    /// History position of the request.
    pub seq: u64,
    /// History position of the answer, or of the agent giving up on one (none when the run
    /// ended first).
    pub answered_seq: Option<u64>,
    /// The outcome label (`applied`, `replayed`, `unknown`, ...); none when there was no
    /// answer.
    pub status: Option<String>,
    /// Why there was no answer (`timeout`, ...).
    pub no_answer: Option<String>,
    /// The effect reference the answer named.
    pub reference: Option<String>,
    /// `sha256:` (first 16 hex digits) of the business result the answer carried, as
    /// canonical JSON (RFC 8785).
    pub result_digest: Option<String>,
    /// The harness's fingerprint of the material request (calls only).
    pub fingerprint: Option<String>,
    /// The oracles whose violations name this answer's position.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violated: Vec<String>,
}

/// What a request to an executor was: a call, a poll or a reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A tool call.
    Call,
    /// A status poll.
    Poll,
    /// A reconciliation request.
    Reconcile,
}

impl RequestKind {
    /// The snake_case name (as serialised): `call`, `poll`, `reconcile`.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Call => "call",
            RequestKind::Poll => "poll",
            RequestKind::Reconcile => "reconcile",
        }
    }
}

/// One business effect in the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LedgerEntry {
    /// History position of the commit.
    pub seq: u64,
    /// `ticket_created`, `payment_captured`, ...
    pub kind: String,
    /// The effect reference the downstream gave it.
    pub reference: String,
    /// The harness's id of the downstream request that made it (`worker-1#3`), as the
    /// downstream recorded it with the effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// What the sending worker was serving when that request left it, as the harness saw it
    /// (never the executor's words): the label of the agent's call, poll or reconciliation
    /// (`race-2`), else the queue delivery or webhook it was handling, else its own work. It
    /// need not be a request of the operation the effect belongs to (a sweep started by one
    /// call may resend another's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_for: Option<String>,
    /// The oracles whose violations name this effect's position.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violated: Vec<String>,
}

/// A run that did not pass (fail, crashed or unknown), as every report shows one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailedRun {
    /// `S05`.
    #[schemars(regex(pattern = r"^[A-Z][0-9]{2,}$"))]
    pub scenario: String,
    /// `concurrent_first_delivery`.
    pub scenario_name: String,
    /// The seed.
    pub seed: u64,
    /// Fail, crashed or unknown.
    pub verdict: Verdict,
    /// The oracles (and `expect`) that fired, each once, in order.
    pub oracles: Vec<String>,
    /// What broke.
    pub violations: Vec<Violation>,
    /// Why it was unknown or crashed.
    pub notes: Vec<String>,
    /// The command that reproduces it.
    pub reproduce: String,
}

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Violation {
    /// `O1`..`O13`, or `expect` for a scenario expectation.
    #[schemars(regex(pattern = r"^(O([1-9]|1[0-3])|expect)$"))]
    pub oracle: String,
    /// `single_effect`, ... (or the scenario line for expectations).
    pub name: String,
    /// The operation (`tenant/environment/workflow/step`), when there is one.
    pub operation: Option<String>,
    /// History positions that show it.
    pub positions: Vec<u64>,
    /// What went wrong, in one sentence.
    pub explanation: String,
    /// For `expect`: the 1-based line of the failing `expect` step in the scenario's file
    /// (where a CI annotation points); none for an oracle's violation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
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
#[serde(deny_unknown_fields)]
pub struct ScenarioSummary {
    /// `S02`.
    #[schemars(regex(pattern = r"^[A-Z][0-9]{2,}$"))]
    pub id: String,
    /// `lost_response_after_commit`.
    pub name: String,
    /// The scenario's file: relative to the workspace root for a built-in
    /// (`scenarios/matrix/S02_lost_response_after_commit.toml`), as given for a user's file.
    pub source: String,
    /// The 1-based line of the scenario's `id` key in `source` (where a CI annotation points
    /// for an oracle's failure; an `expect`'s failure points at its own line).
    pub line: u64,
    /// A scenario built into replaylab (`source` is then a path in replaylab's own tree, not
    /// in the user's repository: reports and CI annotations name no file for it).
    pub builtin: bool,
    /// Rows it covers (`C1`..`C10`, `F1`..`F9`, or `prose`).
    #[schemars(inner(regex(pattern = r"^(C([1-9]|10)|F[1-9]|prose)$")))]
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
    #[schemars(extend("propertyNames" = {"enum": ["not_applicable", "pass", "unknown", "crashed", "fail"]}))]
    pub counts: BTreeMap<Verdict, u64>,
    /// In how many runs each oracle (or `expect`) fired.
    #[schemars(extend("propertyNames" = {"pattern": "^(O([1-9]|1[0-3])|expect)$"}))]
    pub oracle_counts: BTreeMap<String, u64>,
    /// The time its runs spanned, summed over them, in milliseconds: real (wall) time for
    /// black-box runs; simulated time for simulated runs (from the run's start to its last
    /// event, so that the same seeds give the same number and the reports stay byte-stable).
    pub time_ms: u64,
    /// Effects in the ledger, per seed (min and max).
    pub effects_min: u64,
    /// Effects in the ledger, per seed (max).
    pub effects_max: u64,
    /// Every status the executor answered, with how many times.
    #[schemars(extend("propertyNames" = {"enum": ["applied", "replayed", "in_flight", "rejected", "unknown", "expired"]}))]
    pub statuses: BTreeMap<String, u64>,
    /// Every run that did not pass (fail, crashed, unknown), in seed order.
    pub failures: Vec<FailedRun>,
    /// Every run, in seed order: the evidence every count above is recomputed from (`merge`)
    /// and each run re-run and compared against (`verify`).
    pub runs: Vec<RunDigest>,
    /// The run the reports show: the first that did not pass, else the first seed's.
    pub shown: RunResult,
    /// Seeds whose two runs gave different histories (with `--check-determinism`).
    pub nondeterministic_seeds: Vec<u64>,
    /// The shown run drawn as a timeline.
    pub timeline: Timeline,
}

/// One run of a scenario as evidence: what its summary counts, and the digest of its history,
/// which a re-run of the same seed, scenario, executor and commit gives again (in the
/// simulation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunDigest {
    /// The seed (the repeat, in the black-box world).
    pub seed: u64,
    /// Its verdict (`fail` for a seed whose two runs differed, with `--check-determinism`).
    pub verdict: Verdict,
    /// `sha256:` of the history's JSON lines.
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub history_digest: String,
    /// Business effects in the ledger.
    pub effects: u64,
    /// The oracles (and `expect`) that fired, each once, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = r"^(O([1-9]|1[0-3])|expect)$")))]
    pub oracles: Vec<String>,
    /// The statuses the executor answered, with how many times.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub statuses: BTreeMap<String, u64>,
    /// Whether its two runs gave different histories (with `--check-determinism`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nondeterministic: bool,
    /// The time it spanned, in milliseconds: real (wall) time for a black-box run, simulated
    /// time (to its last event) for a simulated one.
    pub time_ms: u64,
}

impl RunDigest {
    /// A run as evidence; `deterministic` is false when a second run of its seed differed;
    /// `time_ms` as [`RunDigest::time_ms`] says.
    pub fn of(result: &RunResult, deterministic: bool, time_ms: u64) -> Self {
        let mut statuses = BTreeMap::new();
        for answer in result.answers() {
            if let Some(status) = &answer.status {
                *statuses.entry(status.clone()).or_insert(0) += 1;
            }
        }
        Self {
            seed: result.seed,
            verdict: if deterministic { result.verdict } else { Verdict::Fail },
            history_digest: result.history_digest.clone(),
            effects: result.effects,
            oracles: result.oracles(),
            statuses,
            nondeterministic: !deterministic,
            time_ms,
        }
    }
}

/// A row's roll-up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RowSummary {
    /// `C1`..`C10`, `F1`..`F9`, or the id of a scenario from the document's prose (`S13`..).
    #[schemars(regex(pattern = r"^(C([1-9]|10)|F[1-9]|[A-Z][0-9]{2,})$"))]
    pub row: String,
    /// The worst verdict of the scenarios that cover it (unknown when none does).
    pub verdict: Verdict,
    /// The scenarios that decided it.
    #[schemars(inner(regex(pattern = r"^[A-Z][0-9]{2,}$")))]
    pub scenarios: Vec<String>,
    /// Runs behind it (scenarios not applicable to the executor run none).
    pub seeds_run: u64,
    /// The first run among its scenarios that did not pass (scenario order, then seed).
    pub first_failure: Option<FailedRun>,
}

/// The version of the `matrix.json` format; bump it on any incompatible change. 2: the
/// verdict `not_applicable` (a scenario needing what the executor does not declare). 3: every
/// failing seed (`failures`), per-oracle counts, the per-operation answers beside the ledger,
/// violations marked on the timeline, one shape for a failure (`FailedRun`), the shard a
/// partial run covers, and no unknown fields. 4: the black-box world (`black_box`, each run's
/// `real_time`). 5: every run's evidence (`runs`: verdict, history digest, what it counted), from
/// which `merge` recomputes and `verify` re-runs; where CI annotations point (`line` of an
/// `expect` violation, `builtin` scenarios), each scenario's `time_ms`, and count maps whose
/// keys the schema checks; each ledger effect names the downstream request that made it
/// and what its worker was serving (`request_id`, `sent_for`).
/// 7: the black-box world's per-tool hints (`black_box.hints`). 8: per tool, the scenarios that
/// called it and, for a tool a tool map binds to a vendor twin, the route and what the twin does
/// with keys (`black_box.hints[].scenarios`, `vendor`).
pub const SCHEMA_VERSION: u32 = 8;

/// The result of a matrix run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatrixResult {
    /// [`SCHEMA_VERSION`].
    #[schemars(range(min = 8, max = 8))]
    pub schema_version: u32,
    /// The replaylab version that ran it.
    pub harness_version: String,
    /// The commit replaylab was built from, when its build knew it (`replaylab --version`).
    #[schemars(required)]
    pub harness_commit: Option<String>,
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
    /// The shard of the seeds this result covers (`matrix --shard I/N`: the seeds with
    /// `seed % N == I - 1`); none for a whole run, or shards merged back into one.
    pub shard: Option<Shard>,
    /// The black-box world's parameters, when the executor ran as processes
    /// (`--executor-cmd`); then `seeds` counts repeats, and nothing is deterministic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub black_box: Option<BlackBox>,
    /// The rows: C1..C10, F1..F9, then one per scenario from the document's prose.
    pub rows: Vec<RowSummary>,
    /// The scenarios, in order.
    pub scenarios: Vec<ScenarioSummary>,
    /// Pass only when every row and every scenario passes.
    pub verdict: Verdict,
}

/// Shard `index` of `count` (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// From 1.
    #[schemars(range(min = 1))]
    pub index: u64,
    /// How many shards.
    #[schemars(range(min = 1))]
    pub count: u64,
}

impl Shard {
    /// Whether `seed` is in this shard.
    pub fn contains(self, seed: u64) -> bool {
        seed % self.count == self.index - 1
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The fixed parameters of the simulated world a matrix ran in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
    /// The oracles whose violations name this position (a wrong answer, a duplicate effect).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violated: Vec<String>,
}

/// A stretch of a run drawn as a shaded band on one lane (a fault rule from its installation
/// to its healing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Band {
    /// The lane.
    pub lane: Lane,
    /// History position where it begins.
    pub from_seq: u64,
    /// History position where it ends; none when it lasted to the end of the run.
    pub to_seq: Option<u64>,
    /// What it is.
    pub label: String,
}

/// One run drawn as lanes and marks (agent, workers, downstream, store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Timeline {
    /// The seed of the run drawn.
    pub seed: u64,
    /// The lanes, top to bottom.
    pub lanes: Vec<Lane>,
    /// The marks, in history order.
    pub marks: Vec<Mark>,
    /// Shaded stretches (fault windows), in the order they began.
    #[serde(default)]
    pub bands: Vec<Band>,
}
