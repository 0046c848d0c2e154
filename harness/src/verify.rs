//! `replaylab verify DIR`: a reviewer re-derives a matrix report instead of trusting it.
//!
//! Three checks, in order, each stopping the next when it fails:
//! 1. the report agrees with its own evidence (`runner::evidence`: every count recomputed from
//!    the runs, the failures and the run shown matched to them, the rows rolled up again);
//! 2. it was made by this replaylab, at this commit, with an executor of this version (a report
//!    of another commit is stale: its runs would not be the runs of this code);
//! 3. a sample of its runs, run again (the simulation is deterministic), gives the same history
//!    digests and verdicts. The run each scenario shows is always in the sample; the others are
//!    drawn from a seed the output names, so another reviewer can draw the same.
//!
//! A black-box report (real processes on real time) cannot be re-run to the same history: it is
//! held to checks 1 and 2, and the output says so.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use reports::{MatrixResult, RunDigest};
use runner::executors::ExecutorSpec;
use scenarios::Scenario;

/// How many of a report's runs to run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// Every run.
    All,
    /// This many, drawn at random, besides the run each scenario shows.
    Count(u64),
}

impl Sample {
    /// `all` or a count.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "all" => Ok(Sample::All),
            _ => text
                .parse()
                .map(Sample::Count)
                .map_err(|_| format!("--sample {}: a number of runs, or all", judge::text::quoted(text))),
        }
    }
}

/// What makes a report stale for this replaylab: another version or build of replaylab (when
/// both builds know their commit), another commit, another version of the executor. Each line
/// names both values.
pub fn provenance_mismatches(
    result: &MatrixResult,
    (harness_version, harness_commit): (&str, Option<&str>),
    commit: Option<&str>,
    executor: &ExecutorSpec,
) -> Vec<String> {
    let mut found = Vec::new();
    if result.harness_version != harness_version {
        found.push(format!(
            "the report was made by replaylab {}; this is replaylab {harness_version}",
            result.harness_version
        ));
    }
    if let (Some(theirs), Some(ours)) = (result.harness_commit.as_deref(), harness_commit) {
        if theirs != ours {
            found.push(format!(
                "the report was made by replaylab built at commit {theirs}; this replaylab was built at commit {ours}"
            ));
        }
    }
    match (result.commit.as_deref(), commit) {
        (Some(theirs), Some(ours)) if theirs != ours => found.push(format!(
            "the report is of commit {theirs}; this checkout is commit {ours} (check out {theirs} and verify there)"
        )),
        (Some(theirs), None) => found.push(format!(
            "the report is of commit {theirs}; this checkout's commit is unknown (set REPLAYLAB_COMMIT, or verify in a git checkout)"
        )),
        _ => {}
    }
    if result.executor_version != executor.version {
        found.push(format!(
            "the report's executor {} is version {}; here it is version {}",
            result.executor, result.executor_version, executor.version
        ));
    }
    found
}

/// One run to run again.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Index into the report's scenarios.
    pub scenario: usize,
    /// What the report holds of it.
    pub recorded: RunDigest,
}

/// The runs to run again: each scenario's shown run, then `sample` more drawn with `seed`
/// (without repeats), in report order.
pub fn plan(result: &MatrixResult, sample: Sample, seed: u64) -> Vec<Planned> {
    let all: Vec<Planned> = result
        .scenarios
        .iter()
        .enumerate()
        .flat_map(|(scenario, summary)| {
            summary.runs.iter().map(move |run| Planned { scenario, recorded: run.clone() })
        })
        .collect();
    let Sample::Count(count) = sample else { return all };
    let shown = |planned: &Planned| result.scenarios[planned.scenario].shown.seed == planned.recorded.seed;
    let mut chosen: Vec<bool> = all.iter().map(shown).collect();
    let mut rest: Vec<usize> = (0..all.len()).filter(|&index| !chosen[index]).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..count.min(rest.len() as u64) {
        let pick = (rng.next_u64() % rest.len() as u64) as usize;
        chosen[rest.swap_remove(pick)] = true;
    }
    all.into_iter().zip(chosen).filter_map(|(planned, chosen)| chosen.then_some(planned)).collect()
}

/// A run whose re-run did not give what the report holds.
#[derive(Debug, Clone)]
pub struct Mismatch {
    /// What the report holds.
    pub recorded: RunDigest,
    /// What the run gave again.
    pub again: RunDigest,
    /// The scenario's id.
    pub scenario: String,
    /// One command that runs it again.
    pub reproduce: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let describe = |run: &RunDigest| {
            let oracles =
                if run.oracles.is_empty() { String::new() } else { format!(" ({})", run.oracles.join(", ")) };
            format!(
                "{}{oracles}, {} effect(s), history {}",
                run.verdict.label(),
                run.effects,
                run.history_digest
            )
        };
        write!(
            f,
            "{} seed {}: the report says {}; run again it gives {}\n    reproduce: {}",
            self.scenario,
            self.recorded.seed,
            describe(&self.recorded),
            describe(&self.again),
            self.reproduce
        )
    }
}

/// Runs `planned` again on `jobs` threads and returns those that differ from the report, in
/// plan order. `scenarios[i]` is the report's scenario `i`.
pub fn rerun(
    planned: &[Planned],
    scenarios: &[Scenario],
    executor: &ExecutorSpec,
    jobs: usize,
    determinism_checked: bool,
) -> Vec<Mismatch> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let found: std::sync::Mutex<Vec<(usize, Mismatch)>> = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(planned) = planned.get(index) else { break };
                let scenario = &scenarios[planned.scenario];
                let seed = planned.recorded.seed;
                let record = runner::run(scenario, seed, executor);
                // A seed the report found nondeterministic is run twice, as the matrix did.
                let deterministic = !(determinism_checked && planned.recorded.nondeterministic)
                    || runner::run(scenario, seed, executor).result.history_digest
                        == record.result.history_digest;
                let again = RunDigest::of(&record.result, deterministic, runner::time_ms(&record));
                if again != planned.recorded {
                    let mismatch = Mismatch {
                        recorded: planned.recorded.clone(),
                        again,
                        scenario: scenario.id.clone(),
                        reproduce: runner::reproduce_command(scenario, seed, executor),
                    };
                    found.lock().unwrap_or_else(|p| p.into_inner()).push((index, mismatch));
                }
            });
        }
    });
    let mut found = found.into_inner().unwrap_or_else(|p| p.into_inner());
    found.sort_by_key(|(index, _)| *index);
    found.into_iter().map(|(_, mismatch)| mismatch).collect()
}

/// The scenarios of a report, as this checkout has them: a built-in by its id, a user's file
/// from the path the report names (run verify where the matrix ran). The error names what is
/// missing.
pub fn scenarios_of(result: &MatrixResult) -> Result<Vec<Scenario>, String> {
    let builtin = scenarios::builtin();
    result
        .scenarios
        .iter()
        .map(|summary| {
            let scenario = match builtin.iter().find(|s| s.id == summary.id && s.source == summary.source) {
                Some(scenario) => scenario.clone(),
                None => Scenario::from_file(std::path::Path::new(&summary.source)).map_err(|error| {
                    format!(
                        "scenario {} is from {}, which cannot be read here ({error}); run verify where the matrix ran",
                        summary.id, summary.source
                    )
                })?,
            };
            if scenario.id != summary.id || scenario.name != summary.name {
                return Err(format!(
                    "{} holds scenario {} {}; the report's is {} {}",
                    summary.source, scenario.id, scenario.name, summary.id, summary.name
                ));
            }
            Ok(scenario)
        })
        .collect()
}
