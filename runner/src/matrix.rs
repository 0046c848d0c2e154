//! The matrix: every scenario for many seeds, rolled up per scenario and per row of the
//! source document's tables (C1..C10, F1..F9).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use scenarios::{Row, Scenario};

use crate::executors::ExecutorSpec;
use judge::timeline;
use judge::verdict::{MatrixResult, RowSummary, RunResult, ScenarioSummary, Verdict};

use crate::run as runner;
use reports::{Shard, Timeline};

/// What to run.
#[derive(Debug, Clone)]
pub struct MatrixConfig {
    /// The executor under test.
    pub executor: ExecutorSpec,
    /// The scenarios.
    pub scenarios: Vec<Scenario>,
    /// Seeds `first_seed .. first_seed + seeds` (none past the largest seed).
    pub seeds: u64,
    /// The first seed.
    pub first_seed: u64,
    /// Run only the seeds of this shard (`seed % count == index - 1`); `None`: every seed.
    /// Shards' results merge back into the whole run's ([`merge`]).
    pub shard: Option<Shard>,
    /// Run each seed twice and fail on any history difference.
    pub check_determinism: bool,
    /// Threads (each runs one simulation at a time).
    pub jobs: usize,
    /// The source commit, for the report.
    pub commit: Option<String>,
    /// Which `tracing` events the failing run each scenario shows is re-run to capture, for
    /// the reports' event tables (`None`: none).
    pub log: Option<crate::log::LogFilter>,
    /// `scenarios` is a selection (`--only`): rows none of them covers are left out.
    pub selection: bool,
    /// Show progress on stderr ([`crate::progress`]): the `matrix` command does.
    pub progress: bool,
}

impl Default for MatrixConfig {
    /// The reference executor, every built-in scenario, seeds 0..20, no determinism check, one
    /// thread per core, no commit. Change what you need:
    ///
    /// ```no_run
    /// use runner::matrix::MatrixConfig;
    ///
    /// let config = MatrixConfig { seeds: 5, ..MatrixConfig::default() };
    /// let (result, written) = runner::matrix::run_and_write(&config, "replaylab-report".as_ref())?;
    /// assert_eq!(written.len(), 4, "matrix.json, matrix.md, junit.xml, matrix.html");
    /// println!("{}", result.verdict);
    /// # Ok::<(), reports::ReportError>(())
    /// ```
    fn default() -> Self {
        Self {
            executor: crate::executors::reference(),
            scenarios: scenarios::builtin(),
            seeds: 20,
            first_seed: 0,
            shard: None,
            check_determinism: false,
            jobs: std::thread::available_parallelism().map_or(1, usize::from),
            commit: None,
            log: Some(crate::log::LogFilter::default_for_reports()),
            selection: false,
            progress: false,
        }
    }
}

/// Runs the matrix and writes all four reports (`matrix.json`, `matrix.md`, `junit.xml`,
/// `matrix.html`) into `out`, with a time stamp only from `SOURCE_DATE_EPOCH`; returns the
/// result and the files written.
pub fn run_and_write(
    config: &MatrixConfig,
    out: &std::path::Path,
) -> Result<(MatrixResult, Vec<std::path::PathBuf>), reports::ReportError> {
    let options = reports::RenderOptions::from_env()?;
    let result = run(config);
    let written = reports::write_reports_with(&result, out, &reports::Format::ALL, &options)?;
    Ok((result, written))
}

/// How much time a scenario lets pass on purpose: its `advance` steps and its settle time (a
/// run in the real world lasts at least that long).
fn real_time_span(scenario: &Scenario) -> std::time::Duration {
    let advanced: std::time::Duration = scenario
        .steps
        .iter()
        .filter_map(|step| match &step.kind {
            scenarios::StepKind::Advance { by, .. } => Some(*by),
            _ => None,
        })
        .sum();
    advanced + scenario.settle
}

/// Runs the matrix.
pub fn run(config: &MatrixConfig) -> MatrixResult {
    let began = std::time::Instant::now();
    let in_shard = |seed: &u64| config.shard.is_none_or(|shard| shard.contains(*seed));
    let mut work: Vec<(usize, u64)> = (0..config.scenarios.len())
        .flat_map(|index| {
            (0..config.seeds)
                .map_while(move |offset| config.first_seed.checked_add(offset))
                .filter(in_shard)
                .map(move |seed| (index, seed))
        })
        .collect();
    if config.executor.black_box.is_some() {
        // Real runs mostly wait as their scenarios ask: the longest start first, so that the
        // last to finish is not a long one started late (the results are sorted back below).
        work.sort_by_key(|&(index, seed)| {
            (std::cmp::Reverse(real_time_span(&config.scenarios[index])), index, seed)
        });
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Finished>> = Mutex::new(Vec::with_capacity(work.len()));
    let real = config.executor.black_box.is_some();
    let progress = if config.progress {
        crate::progress::Progress::new("matrix", work.len() as u64, "runs", real)
    } else {
        crate::progress::Progress::hidden()
    };
    let tally: Mutex<BTreeMap<Verdict, u64>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|scope| {
        for _ in 0..config.jobs.max(1) {
            scope.spawn(|| loop {
                let position = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(index, seed)) = work.get(position) else { break };
                let scenario = &config.scenarios[index];
                progress.running(format!("{} {} {seed}", scenario.id, if real { "repeat" } else { "seed" }));
                let record = runner::run(scenario, seed, &config.executor);
                let verdict = record.result.verdict;
                let deterministic = !config.check_determinism
                    || runner::run(scenario, seed, &config.executor).result.history_digest
                        == record.result.history_digest;
                let keep_timeline =
                    record.result.verdict != Verdict::Pass || !deterministic || first_in(config, seed);
                let timeline = keep_timeline.then(|| {
                    timeline::draw(seed, &scenario.worker_names(), &record.history, &record.result.violations)
                });
                let time_ms = runner::time_ms(&record);
                let judged =
                    matches!(record.result.verdict, Verdict::Pass | Verdict::Fail | Verdict::Unknown);
                let uses = if judged && config.executor.black_box.is_some() {
                    tool_uses(&record.history, &record.result)
                } else {
                    BTreeMap::new()
                };
                let finished = Finished {
                    index,
                    seed,
                    time_ms,
                    result: record.result,
                    deterministic,
                    timeline,
                    exercised: record.coverage.exercised,
                    not_judged: record.coverage.not_judged,
                    uses,
                };
                results.lock().unwrap_or_else(|p| p.into_inner()).push(finished);
                let mut tally = tally.lock().unwrap_or_else(|p| p.into_inner());
                *tally.entry(verdict).or_insert(0) += 1;
                progress.done(|| {
                    let said: Vec<String> = tally
                        .iter()
                        .filter(|(verdict, _)| !matches!(verdict, Verdict::Pass | Verdict::NotApplicable))
                        .map(|(verdict, count)| format!("{count} {verdict}"))
                        .collect();
                    said.join(", ")
                });
            });
        }
    });
    progress.finish();
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|finished| (finished.index, finished.seed));

    let mut summaries = Vec::new();
    for (index, scenario) in config.scenarios.iter().enumerate() {
        let runs: Vec<&Finished> = results.iter().filter(|r| r.index == index).collect();
        let mut summary = summarise(scenario, &runs);
        if let (Some(filter), false) = (&config.log, summary.failures.is_empty()) {
            let shown = summary.shown.clone();
            attach_log(&mut summary.timeline, scenario, &shown, &config.executor, filter);
        }
        summaries.push(summary);
    }
    let header = Header {
        commit: config.commit.clone(),
        executor: config.executor.name.clone(),
        executor_version: config.executor.version.clone(),
        seeds: config.seeds,
        first_seed: config.first_seed,
        determinism_checked: config.check_determinism,
        shard: config.shard,
        selection: config.selection,
        black_box: config.executor.black_box.as_ref().map(|spec| reports::BlackBox {
            command: spec.command.clone(),
            workers: spec.workers as u64,
            transport: spec.transport.as_str().to_owned(),
            server: spec.server.clone(),
            capabilities_from: spec.capabilities_from.clone(),
            deterministic: false,
            time: results
                .iter()
                .filter_map(|finished| finished.result.real_time)
                .fold(reports::RealTime::default(), reports::RealTime::plus),
            matrix_wall_ms: began.elapsed().as_millis() as u64,
            jobs: config.jobs as u64,
            rules_not_judged: {
                let rules: std::collections::BTreeSet<&str> =
                    results.iter().flat_map(|finished| finished.not_judged.iter().copied()).collect();
                rules.into_iter().map(str::to_owned).collect()
            },
            out_of_time: results
                .iter()
                .filter(|finished| {
                    finished.result.verdict == Verdict::Unknown
                        && finished
                            .result
                            .notes
                            .iter()
                            .any(|note| note.starts_with(crate::timing::TIME_PREMISE))
                })
                .count() as u64,
            oracles_judged: {
                let judged: std::collections::BTreeSet<&str> =
                    results.iter().flat_map(|finished| finished.exercised.iter().copied()).collect();
                let mut judged: Vec<String> = judged.into_iter().map(str::to_owned).collect();
                judged
                    .sort_by_key(|oracle| oracle.trim_start_matches('O').parse::<u32>().unwrap_or(u32::MAX));
                judged
            },
            hints: {
                let mut summed: BTreeMap<String, ToolUse> = BTreeMap::new();
                for finished in &results {
                    for (role, use_) in &finished.uses {
                        summed.entry(role.clone()).or_default().add(use_);
                    }
                }
                hints(spec, &summed)
            },
        }),
    };
    assemble(header, summaries)
}

/// Whether `seed` is the first seed the run (or its shard) runs: that run's timeline is kept
/// to be shown when every seed passes.
fn first_in(config: &MatrixConfig, seed: u64) -> bool {
    match config.shard {
        None => seed == config.first_seed,
        Some(shard) => shard.contains(seed) && seed - config.first_seed < shard.count,
    }
}

/// What a matrix result says about its run, besides the scenarios.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The source commit.
    pub commit: Option<String>,
    /// The executor's name.
    pub executor: String,
    /// Its version.
    pub executor_version: String,
    /// Seeds per scenario (before sharding).
    pub seeds: u64,
    /// The first seed.
    pub first_seed: u64,
    /// Whether each seed ran twice.
    pub determinism_checked: bool,
    /// The shard run, if any.
    pub shard: Option<Shard>,
    /// The black-box world's parameters and time, for an executor run as processes.
    pub black_box: Option<reports::BlackBox>,
    /// The scenarios are a selection (`matrix --only`): the rows none of them covers are left
    /// out, rather than reported `unknown` (which a whole run's uncovered row is).
    pub selection: bool,
}

/// The matrix result of these scenario summaries: the rows rolled up from them, and the
/// verdict. The one roll-up behind [`run`] and [`merge`].
pub fn assemble(header: Header, summaries: Vec<ScenarioSummary>) -> MatrixResult {
    // The two tables' rows, then each scenario of the prose as a row of its own, so that a
    // failing scenario always shows as a failing row.
    let table_rows = Row::all().into_iter().map(|row| row.to_string());
    let prose_rows =
        summaries.iter().filter(|s| s.rows.iter().any(|row| row == "prose")).map(|s| s.id.clone());
    let rows: Vec<RowSummary> = table_rows
        .chain(prose_rows)
        .filter(|row| !header.selection || summaries.iter().any(|s| s.rows.contains(row) || &s.id == row))
        .map(|row| {
            let covering: Vec<&ScenarioSummary> =
                summaries.iter().filter(|s| s.rows.contains(&row) || s.id == row).collect();
            let verdict = if covering.is_empty() {
                Verdict::Unknown
            } else {
                covering.iter().fold(Verdict::NotApplicable, |worst, s| worst.worst(s.verdict))
            };
            RowSummary {
                row,
                verdict,
                scenarios: covering.iter().map(|s| s.id.clone()).collect(),
                seeds_run: covering.iter().map(|s| s.seeds_run).sum(),
                first_failure: covering.iter().find_map(|s| s.failures.first().cloned()),
            }
        })
        .collect();
    let verdict = rows
        .iter()
        .map(|row| row.verdict)
        .chain(summaries.iter().map(|s| s.verdict))
        .fold(Verdict::NotApplicable, Verdict::worst);
    MatrixResult {
        schema_version: reports::SCHEMA_VERSION,
        harness_version: crate::version::VERSION.to_owned(),
        harness_commit: crate::version::commit().map(str::to_owned),
        commit: header.commit,
        parameters: world_sim::parameters(),
        executor: header.executor,
        executor_version: header.executor_version,
        seeds: header.seeds,
        first_seed: header.first_seed,
        determinism_checked: header.determinism_checked,
        shard: header.shard,
        black_box: header.black_box,
        rows,
        scenarios: summaries,
        verdict,
    }
}

/// Runs the failing run a scenario shows again, capturing its log, and gives each mark of its
/// timeline the lines that led to it (emitted after the previous mark). Runs are
/// deterministic, so the run again is the run shown; if its history differs all the same, no
/// log is attached. The capture has redacted the scenario's call arguments from the lines.
fn attach_log(
    timeline: &mut Timeline,
    scenario: &Scenario,
    failure: &RunResult,
    executor: &crate::executors::ExecutorSpec,
    filter: &crate::log::LogFilter,
) {
    if timeline.seed != failure.seed || timeline.marks.is_empty() {
        return;
    }
    let again = runner::run_logged(scenario, failure.seed, executor, Some(filter));
    if again.result.history_digest != failure.history_digest {
        return;
    }
    let last = timeline.marks.len() - 1;
    for line in &again.log {
        let at = timeline.marks.iter().position(|mark| mark.seq > line.after_seq).unwrap_or(last);
        timeline.marks[at].log.push(line.to_line());
    }
}

/// One finished run, with its timeline when the summary may need it.
struct Finished {
    index: usize,
    seed: u64,
    /// The time the run spanned: real for a process's run, simulated otherwise.
    time_ms: u64,
    result: RunResult,
    deterministic: bool,
    timeline: Option<Timeline>,
    /// The oracles that had something to judge.
    exercised: std::collections::BTreeSet<&'static str>,
    /// The rules that could not judge what they had.
    not_judged: std::collections::BTreeSet<&'static str>,
    /// What each role's operations did in the run (for the black-box hints).
    uses: BTreeMap<String, ToolUse>,
}

/// What one role's operations did in one run, or summed over runs: what its MCP hints are
/// earned from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ToolUse {
    /// Operations delivered more than once (a retry, a duplicate).
    repeated: u64,
    /// Of the operations, those that made more than one effect.
    duplicated: u64,
    /// Effects its operations made, by kind.
    kinds: BTreeMap<String, u64>,
    /// The scenarios whose runs called it.
    scenarios: std::collections::BTreeSet<String>,
}

impl ToolUse {
    fn add(&mut self, other: &ToolUse) {
        self.repeated += other.repeated;
        self.duplicated += other.duplicated;
        for (kind, count) in &other.kinds {
            *self.kinds.entry(kind.clone()).or_default() += count;
        }
        self.scenarios.extend(other.scenarios.iter().cloned());
    }
}

/// What each role's operations did in one run: the role of an operation is its first call's
/// tool; its calls are counted from the history, its effects are the ledger's, as attributed.
fn tool_uses(history: &[judge::history::Event], result: &RunResult) -> BTreeMap<String, ToolUse> {
    let mut roles: BTreeMap<&str, &str> = BTreeMap::new();
    let mut calls: BTreeMap<&str, u64> = BTreeMap::new();
    for event in history {
        if let judge::history::EventKind::CallSent { operation, tool, .. } = &event.kind {
            roles.entry(operation.as_str()).or_insert(tool.as_str());
            *calls.entry(operation.as_str()).or_default() += 1;
        }
    }
    let mut uses: BTreeMap<String, ToolUse> = BTreeMap::new();
    for (operation, role) in &roles {
        let use_ = uses.entry((*role).to_owned()).or_default();
        use_.scenarios.insert(result.scenario.clone());
        if calls.get(operation).copied().unwrap_or_default() > 1 {
            use_.repeated += 1;
        }
        let ledger = result
            .operations
            .iter()
            .find(|record| record.operation.as_deref() == Some(*operation))
            .map(|record| record.ledger.as_slice())
            .unwrap_or_default();
        if ledger.len() > 1 {
            use_.duplicated += 1;
        }
        for entry in ledger {
            *use_.kinds.entry(entry.kind.clone()).or_default() += 1;
        }
    }
    uses
}

/// The hints each role's tool declares (its `tools/list` annotations) and earned over `uses`.
fn hints(spec: &world::process::BlackBoxSpec, uses: &BTreeMap<String, ToolUse>) -> Vec<reports::ToolHints> {
    let mut hints = Vec::new();
    for (role, use_) in uses {
        let tool = spec.tool_of(role);
        let annotations = spec
            .listed
            .iter()
            .find(|listed| listed.name == tool)
            .and_then(|listed| listed.annotations.clone());
        let declared_hint =
            |name: &str| annotations.as_ref().and_then(|a| a.get(name)).and_then(serde_json::Value::as_bool);
        let declared = reports::Hints {
            read_only: declared_hint("readOnlyHint"),
            destructive: declared_hint("destructiveHint"),
            idempotent: declared_hint("idempotentHint"),
        };
        hints.push(reports::ToolHints {
            scenarios: use_.scenarios.iter().cloned().collect(),
            vendor: spec
                .tool_map
                .as_ref()
                .and_then(|map| map.binding(role))
                .and_then(|binding| binding.vendor_note()),
            ..reports::ToolHints::new(
                role,
                &tool,
                declared,
                use_.repeated,
                use_.duplicated,
                use_.kinds.clone(),
            )
        });
    }
    hints
}

fn summarise(scenario: &Scenario, runs: &[&Finished]) -> ScenarioSummary {
    let mut failures = Vec::new();
    let mut shown: Option<(RunResult, Option<Timeline>)> = None;
    let mut digests = Vec::new();
    for finished in runs {
        let mut result = finished.result.clone();
        if !finished.deterministic {
            result.verdict = Verdict::Fail;
            result.notes.push("two runs of this seed gave different histories".into());
        }
        digests.push(reports::RunDigest::of(&finished.result, finished.deterministic, finished.time_ms));
        if !matches!(result.verdict, Verdict::Pass | Verdict::NotApplicable) {
            failures.push(result.failed_run());
            if failures.len() == 1 {
                shown = Some((result, finished.timeline.clone()));
            }
        }
    }
    let first = runs.first().expect("at least one seed runs");
    let (shown, timeline) = shown.unwrap_or_else(|| (first.result.clone(), first.timeline.clone()));
    let timeline = timeline.unwrap_or(Timeline {
        seed: shown.seed,
        lanes: Vec::new(),
        marks: Vec::new(),
        bands: Vec::new(),
    });
    let tally = Tally::of(&digests);
    ScenarioSummary {
        id: scenario.id.clone(),
        name: scenario.name.clone(),
        source: scenario.source.clone(),
        line: scenario.line as u64,
        builtin: scenario.source.starts_with(scenarios::BUILTIN_SOURCE_PREFIX),
        rows: scenario.rows.iter().map(ToString::to_string).collect(),
        summary: scenario.summary.clone(),
        expected: scenario.expected.clone(),
        verdict: tally.verdict,
        seeds_run: tally.seeds_run,
        counts: tally.counts,
        oracle_counts: tally.oracle_counts,
        effects_min: tally.effects_min,
        effects_max: tally.effects_max,
        statuses: tally.statuses,
        time_ms: tally.time_ms,
        failures,
        runs: digests,
        shown,
        nondeterministic_seeds: tally.nondeterministic_seeds,
        timeline,
    }
}

/// What a scenario's summary counts, computed from its runs' evidence alone: the one
/// computation behind [`run`]'s summaries and `merge`'s and `verify`'s checks of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// The worst verdict.
    pub verdict: Verdict,
    /// Runs that applied.
    pub seeds_run: u64,
    /// Runs per verdict.
    pub counts: BTreeMap<Verdict, u64>,
    /// Runs per oracle that fired.
    pub oracle_counts: BTreeMap<String, u64>,
    /// The fewest effects of a run.
    pub effects_min: u64,
    /// The most.
    pub effects_max: u64,
    /// Answers per status.
    pub statuses: BTreeMap<String, u64>,
    /// Seeds whose two runs differed.
    pub nondeterministic_seeds: Vec<u64>,
    /// The time the runs spanned, summed.
    pub time_ms: u64,
}

impl Tally {
    /// Writes these counts into `summary` (what `merge` recomputes of a scenario's shards).
    pub fn apply(self, summary: &mut ScenarioSummary) {
        summary.verdict = self.verdict;
        summary.seeds_run = self.seeds_run;
        summary.counts = self.counts;
        summary.oracle_counts = self.oracle_counts;
        summary.effects_min = self.effects_min;
        summary.effects_max = self.effects_max;
        summary.statuses = self.statuses;
        summary.time_ms = self.time_ms;
        summary.nondeterministic_seeds = self.nondeterministic_seeds;
    }

    /// The counts of these runs.
    pub fn of(runs: &[reports::RunDigest]) -> Self {
        let mut tally = Tally {
            verdict: Verdict::NotApplicable,
            seeds_run: 0,
            counts: BTreeMap::new(),
            oracle_counts: BTreeMap::new(),
            effects_min: runs.iter().map(|run| run.effects).min().unwrap_or(0),
            effects_max: runs.iter().map(|run| run.effects).max().unwrap_or(0),
            statuses: BTreeMap::new(),
            nondeterministic_seeds: Vec::new(),
            time_ms: runs.iter().map(|run| run.time_ms).sum(),
        };
        for run in runs {
            tally.verdict = tally.verdict.worst(run.verdict);
            tally.seeds_run += u64::from(run.verdict != Verdict::NotApplicable);
            *tally.counts.entry(run.verdict).or_insert(0) += 1;
            for oracle in &run.oracles {
                *tally.oracle_counts.entry(oracle.clone()).or_insert(0) += 1;
            }
            for (status, n) in &run.statuses {
                *tally.statuses.entry(status.clone()).or_insert(0) += n;
            }
            if run.nondeterministic {
                tally.nondeterministic_seeds.push(run.seed);
            }
        }
        tally
    }
}
