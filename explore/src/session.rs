//! `replaylab explore`: regressions replayed first, then seeds side by side; failing seeds
//! grouped by signature, each group shrunk once, printed and saved.
//!
//! In the simulation a case is deterministic: one run decides it, and shrinking keeps a
//! candidate when one run of it fails with the group's signature. Against real processes
//! (`--executor-cmd`) it is not: a group counts only when its case fails again
//! ([`CONFIRM_RUNS`] reruns, the rate shown), a candidate is kept when [`SHRINK_MIN_FAILS`] of
//! [`SHRINK_RERUNS`] reruns fail with the signature, and the saved case's own rate is measured
//! and written into its file and its reproduce command.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use judge::text::shell_quote;
use judge::verdict::Verdict;
use runner::executors::ExecutorSpec;
use runner::exit;

pub use crate::coverage::{
    oracles_beyond, shortfalls_of, Coverage, MAX_UNKNOWN_PERCENT, MIN_FAULTS_FIRED_PERCENT,
};
pub use crate::record::{
    explore_schema, merge_records, record_annotations, record_verdict, render_record, seeds_text,
    write_record, ExploreRecord, ExploreWorld, FailingSavedCase, GroupRecord, Rate, SavedCases,
    EXPLORE_RECORD, EXPLORE_SCHEMA_VERSION,
};
use crate::{self as explore, Case, CaseResult};

/// Real processes: how many times a failing case is run again to confirm it (and its shrunk
/// case to state its rate).
pub const CONFIRM_RUNS: u64 = 10;
/// Real processes: how many times each shrinking candidate runs.
pub const SHRINK_RERUNS: u64 = 3;
/// Real processes: how many of a candidate's [`SHRINK_RERUNS`] must fail with the group's
/// signature for shrinking to keep it.
pub const SHRINK_MIN_FAILS: u64 = 2;
/// Real processes: how many candidates one shrink tries at most (each is [`SHRINK_RERUNS`]
/// real runs of several seconds).
pub const MAX_PROCESS_SHRINK_CANDIDATES: u32 = 60;

/// What `replaylab explore` was asked.
#[derive(Debug, Clone)]
pub struct ExploreConfig {
    /// The executor under test (a black-box one runs in the process world).
    pub executor: ExecutorSpec,
    /// How many seeds (before sharding).
    pub seeds: u64,
    /// The first seed.
    pub start: u64,
    /// Shard (1-based index, count).
    pub shard: Option<(u64, u64)>,
    /// Runs side by side.
    pub jobs: usize,
    /// The regressions file.
    pub regressions: PathBuf,
    /// Where shrunk cases are written.
    pub out: PathBuf,
    /// Stop at the first failing seed.
    pub stop_at_first: bool,
    /// Run every case twice and fail on any history difference (the simulation only).
    pub check_determinism: bool,
    /// The source commit, for `explore.json`.
    pub commit: Option<String>,
}

impl ExploreConfig {
    /// Explores `executor` with the command's defaults: seeds 0..100 on every core, the
    /// regressions file `replaylab-regressions.jsonl`, shrunk cases into `replaylab-explore/`.
    ///
    /// ```no_run
    /// use explore::session::ExploreConfig;
    ///
    /// let config = ExploreConfig { seeds: 500, ..ExploreConfig::new(runner::executors::reference()) };
    /// let code = explore::session::run(&config)?; // prints like `replaylab explore`
    /// assert_eq!(code, runner::exit::SUCCESS);
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn new(executor: ExecutorSpec) -> Self {
        Self {
            executor,
            seeds: 100,
            start: 0,
            shard: None,
            jobs: std::thread::available_parallelism().map_or(1, usize::from),
            regressions: PathBuf::from("replaylab-regressions.jsonl"),
            out: PathBuf::from("replaylab-explore"),
            stop_at_first: false,
            check_determinism: false,
            commit: None,
        }
    }
}

/// One line of the regressions file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Regression {
    /// The executor it was found against.
    pub executor: String,
    /// The oracle that failed.
    pub oracle: String,
    /// The failure's signature (absent in cases saved before signatures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The exploration seed.
    pub seed: u64,
    /// The shrunk case.
    pub case: Case,
}

/// The largest regressions file read: a saved case is a line of a few kilobytes, so this holds
/// thousands; `/dev/zero` or a runaway file is refused rather than read into memory.
pub const MAX_REGRESSIONS_BYTES: u64 = 64 << 20;

/// Reads the regressions file (missing: none; not a regular file or too large: an error). A malformed line is an error naming its line.
pub fn read_regressions(path: &Path) -> anyhow::Result<Vec<Regression>> {
    if matches!(std::fs::symlink_metadata(path), Err(error) if error.kind() == std::io::ErrorKind::NotFound) {
        return Ok(Vec::new());
    }
    let text = world::read_regular_file(path, MAX_REGRESSIONS_BYTES)
        .map_err(|error| anyhow::anyhow!("failed to read {error}"))?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .map(|(index, line)| {
            serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not a saved case", path.display(), index + 1))
        })
        .collect()
}

fn append_regression(path: &Path, regression: &Regression) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("failed to open {}", path.display()))?;
    let line = serde_json::to_string(regression).expect("a regression serialises");
    writeln!(file, "{line}").with_context(|| format!("failed to write {}", path.display()))
}

/// Writes `case` as a scenario file named `name` into `out`, `header` as comment lines above
/// it, and returns its path.
fn write_case(out: &Path, name: &str, header: &[String], case: &Case) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("failed to create {}", out.display()))?;
    let path = out.join(name);
    let mut text = String::new();
    for line in header {
        text.push_str(&format!("# {line}\n"));
    }
    text.push_str(&case.to_scenario().to_toml());
    std::fs::write(&path, text).with_context(|| format!("failed to write {}", path.display()))?;
    Ok(path)
}

/// The one command that runs a saved case file against `executor`: with the process world's
/// arguments and `--repeat` for a black box (its rate is what reproduces, not one run).
fn reproduce_case(executor: &ExecutorSpec, path: &Path) -> String {
    let file = shell_quote(&path.display().to_string());
    reproduce_with(executor, &file)
}

/// [`reproduce_case`] with the case file already quoted.
fn reproduce_with(executor: &ExecutorSpec, file: &str) -> String {
    match &executor.black_box {
        Some(spec) => format!(
            "{} run --case {file} {} --repeat {CONFIRM_RUNS}",
            executor.program,
            spec.reproduce_arguments()
        ),
        None => format!("{} run --case {file} --executor {}", executor.program, shell_quote(&executor.name)),
    }
}

/// The seeds an exploration covers: `seeds` from `start` (none past the largest seed), of
/// those only shard I of N's (`seed % N == I - 1`); computed when asked, not listed, so that
/// a long range costs no memory.
struct SeedRange {
    first: u64,
    step: u64,
    len: u64,
}

impl SeedRange {
    fn new(start: u64, seeds: u64, shard: Option<(u64, u64)>) -> Self {
        let (index, count) = shard.unwrap_or((1, 1));
        if seeds == 0 {
            return Self { first: start, step: count, len: 0 };
        }
        let last = u128::from(start) + u128::from(seeds) - 1;
        let last = last.min(u128::from(u64::MAX));
        // The first seed at or after `start` that is in the shard.
        let skip =
            (u128::from(index - 1) + u128::from(count) - u128::from(start % count)) % u128::from(count);
        let first = u128::from(start) + skip;
        let len = if first > last { 0 } else { (last - first) / u128::from(count) + 1 };
        Self {
            first: u64::try_from(first).unwrap_or(u64::MAX),
            step: count,
            len: u64::try_from(len).unwrap_or(u64::MAX),
        }
    }

    fn get(&self, position: u64) -> Option<u64> {
        (position < self.len).then(|| self.first + position * self.step)
    }
}

/// How many unknown seeds the terminal names, with the premise that did not happen.
const UNKNOWN_SHOWN: usize = 5;

/// The oracles that cannot judge `executor` ([`oracles_beyond`]) and, for an MCP server
/// without the `replaylab://executor` manifest (its capabilities read from its tool list: it
/// speaks none of replaylab's conventions, so its answers are bare success claims, naming no
/// label, reference or result), those that need an outcome to hold the answer to: O4, O8, O9.
pub fn oracles_beyond_executor(executor: &ExecutorSpec) -> Vec<String> {
    let mut beyond = oracles_beyond(&executor.capabilities);
    let conventions = executor.black_box.as_ref().is_none_or(|spec| spec.capabilities_from == "manifest");
    if !conventions {
        beyond.extend(["O4", "O8", "O9"].map(str::to_owned));
    }
    beyond.sort_by_key(|oracle| oracle.trim_start_matches('O').parse::<u32>().unwrap_or(u32::MAX));
    beyond.dedup();
    beyond
}

/// A seed whose case failed, as first run.
struct Failing {
    seed: u64,
    case: Case,
    result: CaseResult,
}

/// The file of the findings so far, in `--out` while an exploration runs: each signature's
/// first failing case as it is found (its case file, its oracle, its reproduce command), not
/// confirmed and not shrunk yet. An exploration stopped by a signal leaves it (and says so); one that ends
/// removes it, `explore.json` and the shrunk cases being the record.
const FOUND_SO_FAR: &str = "found-so-far.txt";

/// The findings so far ([`FOUND_SO_FAR`]).
struct FoundSoFar<'a> {
    out: &'a Path,
    executor: &'a ExecutorSpec,
    /// The file's entries (one per signature: its first failing seed), the case files written
    /// for them, and the signatures.
    entries: Mutex<(Vec<String>, Vec<PathBuf>, BTreeSet<String>)>,
}

impl<'a> FoundSoFar<'a> {
    fn new(out: &'a Path, executor: &'a ExecutorSpec) -> Self {
        Self { out, executor, entries: Mutex::new((Vec::new(), Vec::new(), BTreeSet::new())) }
    }

    /// Writes `case`, found failing at `seed` with a signature not found before, and the file
    /// of every finding so far (through a temporary file: a signal never leaves half of it).
    fn add(&self, seed: u64, case: &Case, result: &CaseResult) -> anyhow::Result<()> {
        let oracle = result.failure().unwrap_or_default();
        let signature = result.signature().unwrap_or("a failure with no signature");
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if !entries.2.insert(signature.to_owned()) {
            return Ok(());
        }
        let name = format!("found-seed-{seed}-{oracle}.toml");
        let header = [format!(
            "Found by `replaylab explore` against {} at seed {seed}: {signature}. NOT CONFIRMED: the exploration was still running (not rerun, not shrunk).",
            self.executor.name
        )];
        let path = write_case(self.out, &name, &header, case)?;
        let mut entry = format!(
            "seed {seed}: {oracle}, NOT CONFIRMED: {signature}\n  case: {name}\n  reproduce, from this directory: {}",
            reproduce_case(self.executor, Path::new(&name))
        );
        for violation in &result.violations {
            entry.push_str(&format!("\n  violation: {violation}"));
        }
        entries.0.push(entry);
        entries.1.push(path);
        let text = format!(
            "# Findings so far of `replaylab explore` against {}, as they were found: not confirmed, not shrunk.\n# When the exploration ends, explore.json and the shrunk case files are the record, and this file goes.\n\n{}\n",
            self.executor.name,
            entries.0.join("\n\n")
        );
        let file = self.out.join(FOUND_SO_FAR);
        let partial = self.out.join(format!(".{FOUND_SO_FAR}.partial"));
        std::fs::write(&partial, text).with_context(|| format!("failed to write {}", partial.display()))?;
        std::fs::rename(&partial, &file).with_context(|| format!("failed to write {}", file.display()))?;
        world::process::leave_behind(Some(format!(
            "the {} finding(s) so far (not confirmed) are in {}",
            entries.0.len(),
            file.display()
        )));
        Ok(())
    }

    /// The exploration ended with its record: the findings so far go.
    fn remove(self) {
        world::process::leave_behind(None);
        let (entries, paths, _) = self.entries.into_inner().unwrap_or_else(|p| p.into_inner());
        if entries.is_empty() {
            return;
        }
        for path in paths {
            let _ = std::fs::remove_file(path);
        }
        let _ = std::fs::remove_file(self.out.join(FOUND_SO_FAR));
    }
}

/// What a group of failing seeds came to: its case shrunk (and, with real processes, how often
/// it failed again).
struct GroupOutcome {
    signature: String,
    oracle: String,
    seeds: Vec<u64>,
    shrunk_seed: u64,
    original: Case,
    shrunk: Case,
    result: CaseResult,
    shrink_runs: u32,
    confirmation: Option<Rate>,
    reproduced: Option<Rate>,
    confirmed: bool,
}

/// Room for real runs side by side: each run of a black box takes a slot while it runs, so
/// that confirming and shrinking several groups at once never runs more than `--jobs`.
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

/// A taken slot, given back when dropped (also when the run panics).
struct Slot<'a>(&'a Slots);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

impl Slots {
    fn new(count: usize) -> Self {
        Self { free: Mutex::new(count.max(1)), freed: Condvar::new() }
    }

    fn take(&self) -> Slot<'_> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        Slot(self)
    }
}

/// The case seed `seed` draws for `executor`: narrowed to what it declares, and for a black
/// box to what the process world can do.
fn draw(seed: u64, executor: &ExecutorSpec) -> Case {
    let case = explore::case_for_seed(seed).narrowed_to(&executor.capabilities);
    if executor.black_box.is_some() {
        case.narrowed_to_world(world::process::lacks, &executor.capabilities)
    } else {
        case
    }
}

/// Runs `case` `times` times side by side, each run in a slot.
fn reruns(case: &Case, times: u64, executor: &ExecutorSpec, slots: &Slots) -> Vec<CaseResult> {
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..times)
            .map(|_| {
                scope.spawn(|| {
                    let _slot = slots.take();
                    explore::check_case(case, executor)
                })
            })
            .collect();
        runs.into_iter().map(|run| run.join().expect("a case run does not panic")).collect()
    })
}

/// Whether a shrinking candidate still fails with `signature` against real processes: when
/// [`SHRINK_MIN_FAILS`] of [`SHRINK_RERUNS`] runs do. The first [`SHRINK_MIN_FAILS`] run side by
/// side, and the rest only while they can still change the answer. Returns a failing run.
fn still_fails(
    candidate: &Case,
    signature: &str,
    executor: &ExecutorSpec,
    slots: &Slots,
) -> Option<CaseResult> {
    let mut results = reruns(candidate, SHRINK_MIN_FAILS, executor, slots);
    for _ in SHRINK_MIN_FAILS..SHRINK_RERUNS {
        let failed = rate(&results, signature).failed;
        let left = SHRINK_RERUNS - results.len() as u64;
        if failed >= SHRINK_MIN_FAILS || failed + left < SHRINK_MIN_FAILS {
            break;
        }
        results.extend(reruns(candidate, 1, executor, slots));
    }
    let kept = rate(&results, signature).failed >= SHRINK_MIN_FAILS;
    results.into_iter().find(|result| kept && result.fails_with(signature))
}

/// How many of `results` failed with `signature`.
fn rate(results: &[CaseResult], signature: &str) -> Rate {
    Rate {
        failed: results.iter().filter(|result| result.fails_with(signature)).count() as u64,
        runs: results.len() as u64,
    }
}

/// Shrinks one group's case: the smallest drawn case of the group (the first seed among
/// equals). In the simulation one run decides each candidate; with real processes (`slots`)
/// the drawn case must first fail again, and each candidate is run [`SHRINK_RERUNS`] times,
/// `batch` candidates at once.
fn settle_group(
    signature: String,
    failing: Vec<Failing>,
    executor: &ExecutorSpec,
    slots: Option<&Slots>,
    batch: usize,
    progress: &runner::progress::Progress,
) -> GroupOutcome {
    let mut seeds: Vec<u64> = failing.iter().map(|failing| failing.seed).collect();
    seeds.sort_unstable();
    let drawn = failing
        .into_iter()
        .min_by_key(|failing| (failing.case.size(), failing.seed))
        .expect("a group has a failing seed");
    let oracle = drawn.result.failure().unwrap_or_default();
    let outcome =
        |shrunk: Case, result: CaseResult, shrink_runs, confirmation, reproduced, confirmed| GroupOutcome {
            signature: signature.clone(),
            oracle: oracle.clone(),
            seeds: seeds.clone(),
            shrunk_seed: drawn.seed,
            original: drawn.case.clone(),
            shrunk,
            result,
            shrink_runs,
            confirmation,
            reproduced,
            confirmed,
        };
    let Some(slots) = slots else {
        let shrunk =
            explore::shrink_in_simulation(drawn.case.clone(), drawn.result.clone(), &signature, executor);
        return outcome(shrunk.case, shrunk.result, shrunk.runs, None, None, true);
    };
    let group = format!("explore: the group of seed {} ({oracle})", drawn.seed);
    progress.say(&format!("{group}: confirming: {CONFIRM_RUNS} reruns of its case"));
    progress.running(format!("confirming seed {}", drawn.seed));
    let again = reruns(&drawn.case, CONFIRM_RUNS, executor, slots);
    let confirmation = rate(&again, &signature);
    if confirmation.failed == 0 {
        progress.say(&format!("{group}: NOT CONFIRMED: it failed again in {confirmation} reruns"));
        return outcome(
            drawn.case.clone(),
            drawn.result.clone(),
            0,
            Some(confirmation),
            Some(confirmation),
            false,
        );
    }
    progress.say(&format!(
        "{group}: failed again in {confirmation} reruns; shrinking it (at most {MAX_PROCESS_SHRINK_CANDIDATES} candidates, {SHRINK_MIN_FAILS} to {SHRINK_RERUNS} runs each)"
    ));
    progress.running(format!("shrinking seed {}", drawn.seed));
    let mut tried = 0usize;
    let mut said = Instant::now();
    let shrunk = crate::shrink::shrink(
        drawn.case.clone(),
        drawn.result.clone(),
        MAX_PROCESS_SHRINK_CANDIDATES,
        batch,
        |candidates| {
            tried += candidates.len();
            if said.elapsed() >= runner::progress::PLAIN_EVERY {
                said = Instant::now();
                progress.say(&format!(
                    "{group}: shrinking: {tried} of at most {MAX_PROCESS_SHRINK_CANDIDATES} candidates tried"
                ));
            }
            std::thread::scope(|scope| {
                let checks: Vec<_> = candidates
                    .iter()
                    .map(|candidate| {
                        let signature = &signature;
                        scope.spawn(move || still_fails(candidate, signature, executor, slots))
                    })
                    .collect();
                checks.into_iter().map(|check| check.join().expect("a shrink check does not panic")).collect()
            })
        },
    );
    let (reproduced, result) = if shrunk.case == drawn.case {
        (confirmation, shrunk.result)
    } else {
        let again = reruns(&shrunk.case, CONFIRM_RUNS, executor, slots);
        let reproduced = rate(&again, &signature);
        let failing = again.into_iter().find(|result| result.fails_with(&signature));
        (reproduced, failing.unwrap_or(shrunk.result))
    };
    progress.say(&format!(
        "{group}: shrunk from {} to {} in {} candidates; the shrunk case failed again in {reproduced} reruns",
        drawn.case.size(),
        shrunk.case.size(),
        shrunk.runs
    ));
    outcome(shrunk.case, result, shrunk.runs, Some(confirmation), Some(reproduced), true)
}

/// Settles every group, several at once: in the simulation on `jobs` threads; with real
/// processes all groups at once, their runs sharing `jobs` slots.
fn settle_groups(
    groups: BTreeMap<String, Vec<Failing>>,
    executor: &ExecutorSpec,
    jobs: usize,
) -> Vec<GroupOutcome> {
    let real = executor.black_box.is_some();
    let count = groups.len();
    let slots = Slots::new(jobs);
    let threads = if real { count } else { jobs.clamp(1, count.max(1)) };
    // Candidates tried at once per group, each run SHRINK_MIN_FAILS times at first.
    let batch = (jobs / (SHRINK_MIN_FAILS as usize * count.clamp(1, jobs.max(1)))).max(1);
    let queue = Mutex::new(groups.into_iter().collect::<Vec<_>>());
    let outcomes = Mutex::new(Vec::new());
    let progress = if real {
        runner::progress::Progress::new("explore: confirm and shrink", count as u64, "group(s)", true)
    } else {
        runner::progress::Progress::hidden()
    };
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let Some((signature, failing)) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop() else {
                    break;
                };
                let outcome =
                    settle_group(signature, failing, executor, real.then_some(&slots), batch, &progress);
                outcomes.lock().unwrap_or_else(|p| p.into_inner()).push(outcome);
                progress.done(String::new);
            });
        }
    });
    progress.finish();
    let mut outcomes = outcomes.into_inner().unwrap_or_else(|p| p.into_inner());
    outcomes.sort_by(|a, b| (a.seeds.first(), &a.signature).cmp(&(b.seeds.first(), &b.signature)));
    outcomes
}

/// Runs the exploration and returns the exit code.
pub fn run(config: &ExploreConfig) -> anyhow::Result<u8> {
    let executor = &config.executor;
    let real = executor.black_box.is_some();
    if real && config.check_determinism {
        anyhow::bail!(
            "--check-determinism needs the simulated world: real processes on real time are not deterministic, so no two runs could be compared"
        );
    }
    let mut failed = false;

    let regressions = read_regressions(&config.regressions)?;
    if config.seeds == 0 && regressions.is_empty() {
        anyhow::bail!(
            "--seeds 0 replays only the saved cases, and {} holds none: nothing would be checked",
            config.regressions.display()
        );
    }
    if !regressions.is_empty() {
        println!("replaying {} saved case(s) from {}", regressions.len(), config.regressions.display());
    }
    let mut saved_failing = Vec::new();
    for regression in &regressions {
        let result = explore::check_case(&regression.case, executor);
        // Named by the oracle it was saved for while that still fails (shrinking kept it
        // failing, not necessarily first).
        let saved_oracle = result.violations.iter().any(|violation| violation.oracle == regression.oracle);
        let failure =
            result.failure().map(|first| if saved_oracle { regression.oracle.clone() } else { first });
        if let Some(oracle) = failure {
            failed = true;
            let name = format!("saved-case-seed-{}-{oracle}.toml", regression.seed);
            let header = [format!(
                "A saved case (found at seed {} with {}) that fails again: {oracle}.",
                regression.seed, regression.executor
            )];
            let path = write_case(&config.out, &name, &header, &regression.case)?;
            println!(
                "saved case (seed {}, found with {}) FAILS: {oracle}",
                regression.seed, regression.executor
            );
            for violation in &result.violations {
                println!("  violation: {violation}");
            }
            println!("  reproduce: {}", reproduce_case(executor, &path));
            saved_failing.push(FailingSavedCase {
                seed: regression.seed,
                found_with: regression.executor.clone(),
                oracle,
                reproduce: reproduce_case(executor, Path::new(&name)),
                case_file: name,
            });
        }
    }

    let seeds = SeedRange::new(config.start, config.seeds, config.shard);
    let progress = runner::progress::Progress::new("explore", seeds.len, "cases", real);
    let found = FoundSoFar::new(&config.out, executor);
    let found_failed: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failing: Mutex<Vec<Failing>> = Mutex::new(Vec::new());
    let nondeterministic: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    let verdicts: Mutex<BTreeMap<Verdict, u64>> = Mutex::new(BTreeMap::new());
    let unknown: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    let coverage: Mutex<Coverage> =
        Mutex::new(Coverage { beyond_executor: oracles_beyond_executor(executor), ..Coverage::default() });
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..config.jobs.max(1) {
            scope.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let position = next.fetch_add(1, Ordering::Relaxed);
                let Some(seed) = seeds.get(position) else { break };
                let case = draw(seed, executor);
                let result = explore::check_case(&case, executor);
                if config.check_determinism
                    && explore::check_case(&case, executor).history_digest != result.history_digest
                {
                    nondeterministic.lock().unwrap_or_else(|p| p.into_inner()).push(seed);
                }
                *verdicts.lock().unwrap_or_else(|p| p.into_inner()).entry(result.verdict).or_insert(0) += 1;
                if result.verdict == Verdict::Unknown {
                    let note = result.notes.first().cloned().unwrap_or_default();
                    unknown.lock().unwrap_or_else(|p| p.into_inner()).push((seed, note));
                }
                coverage.lock().unwrap_or_else(|p| p.into_inner()).add(
                    result.verdict,
                    &result.coverage,
                    &result.notes,
                );
                if result.failure().is_some() {
                    if let Err(error) = found.add(seed, &case, &result) {
                        found_failed.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(error);
                    }
                    failing.lock().unwrap_or_else(|p| p.into_inner()).push(Failing { seed, case, result });
                    if config.stop_at_first {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                progress.running(format!("seed {seed}"));
                progress.done(|| {
                    let failing = failing.lock().unwrap_or_else(|p| p.into_inner()).len();
                    if failing == 0 {
                        String::new()
                    } else {
                        format!("{failing} failing so far")
                    }
                });
            });
        }
    });
    progress.finish();
    if let Some(error) = found_failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(error);
    }
    let elapsed = started.elapsed();
    let verdicts = verdicts.into_inner().unwrap_or_else(|p| p.into_inner());
    let ran: u64 = verdicts.values().sum();
    let count = |verdict| verdicts.get(&verdict).copied().unwrap_or(0);
    println!(
        "explored {ran} seeds against {} in {:.1}s ({:.2} cases/s{}): {} pass, {} fail, {} unknown, {} crashed, {} not applicable",
        executor.name,
        elapsed.as_secs_f64(),
        ran as f64 / elapsed.as_secs_f64().max(f64::EPSILON),
        if real { format!(", {} side by side, real processes", config.jobs) } else { String::new() },
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Unknown),
        count(Verdict::Crashed),
        count(Verdict::NotApplicable)
    );
    let coverage = coverage.into_inner().unwrap_or_else(|p| p.into_inner());
    if coverage.cases + coverage.not_applicable > 0 {
        println!("{}", coverage.line());
        if !coverage.unknown_because.is_empty() {
            let reasons: Vec<String> =
                coverage.unknown_because.iter().map(|(kind, count)| format!("{kind} ({count})")).collect();
            println!("unknown because: {}", reasons.join(", "));
            let mut unknown = unknown.into_inner().unwrap_or_else(|p| p.into_inner());
            unknown.sort_unstable();
            for (seed, note) in unknown.iter().take(UNKNOWN_SHOWN) {
                println!("  unknown: seed {seed}: {note}");
            }
            if unknown.len() > UNKNOWN_SHOWN {
                println!("  unknown: and {} more", unknown.len() - UNKNOWN_SHOWN);
            }
        }
    }
    let shortfalls = shortfalls_of(&coverage, config.stop_at_first && stop.load(Ordering::Relaxed));
    for shortfall in &shortfalls {
        failed = true;
        println!("coverage too thin: {shortfall}");
    }
    let mut nondeterministic = nondeterministic.into_inner().unwrap_or_else(|p| p.into_inner());
    nondeterministic.sort_unstable();
    if config.check_determinism {
        if nondeterministic.is_empty() {
            println!("determinism: every case gave the same history twice");
        } else {
            failed = true;
            println!(
                "determinism: {} seed(s) gave different histories: {}",
                nondeterministic.len(),
                nondeterministic.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            );
        }
    }

    let mut groups: BTreeMap<String, Vec<Failing>> = BTreeMap::new();
    for failing in failing.into_inner().unwrap_or_else(|p| p.into_inner()) {
        let signature = failing.result.signature().unwrap_or("a failure with no signature").to_owned();
        groups.entry(signature).or_default().push(failing);
    }
    let failing_seeds: usize = groups.values().map(Vec::len).sum();
    if !groups.is_empty() {
        println!(
            "\n{failing_seeds} failing seed(s) in {} group(s) by signature (oracle and the shape of what failed); one shrink per group{}",
            groups.len(),
            if real {
                format!(
                    ", confirmed by {CONFIRM_RUNS} reruns; a shrinking step is kept when {SHRINK_MIN_FAILS} of {SHRINK_RERUNS} reruns fail"
                )
            } else {
                String::new()
            }
        );
    }
    let settling = Instant::now();
    let outcomes = settle_groups(groups, executor, config.jobs);
    found.remove();
    if !outcomes.is_empty() {
        let runs: u64 = outcomes.iter().map(|outcome| u64::from(outcome.shrink_runs)).sum();
        println!(
            "shrank {} group(s) in {:.1}s ({runs} candidates{})",
            outcomes.len(),
            settling.elapsed().as_secs_f64(),
            if real { format!(", {SHRINK_MIN_FAILS} to {SHRINK_RERUNS} runs each") } else { String::new() }
        );
    }
    let mut group_records = Vec::new();
    for (index, outcome) in outcomes.iter().enumerate() {
        let name = format!("case-seed-{}-{}.toml", outcome.shrunk_seed, outcome.oracle);
        let path = config.out.join(&name);
        let reproduce = reproduce_case(executor, &path);
        let mut header = vec![
            format!(
                "Found by `replaylab explore` against {} at seed {}: {}.",
                executor.name, outcome.shrunk_seed, outcome.signature
            ),
            format!(
                "Shrunk from {} to {} (operations + actions + workers), {} candidates tried.",
                outcome.original.size(),
                outcome.shrunk.size(),
                outcome.shrink_runs
            ),
        ];
        if let Some(reproduced) = outcome.reproduced {
            header.push(format!(
                "Real processes on real time, not deterministic: this case failed again with this signature in {reproduced} reruns."
            ));
            header.push(format!(
                "Reproduce, from this file's directory: {}",
                reproduce_case(executor, Path::new(&name))
            ));
        }
        write_case(&config.out, &name, &header, &outcome.shrunk)?;
        if outcome.confirmed {
            failed = true;
            append_regression(
                &config.regressions,
                &Regression {
                    executor: executor.name.clone(),
                    oracle: outcome.oracle.clone(),
                    signature: Some(outcome.signature.clone()),
                    seed: outcome.shrunk_seed,
                    case: outcome.shrunk.clone(),
                },
            )?;
        }
        println!(
            "\ngroup {} of {}: {}\n  {} failing seed(s): {}",
            index + 1,
            outcomes.len(),
            outcome.signature,
            outcome.seeds.len(),
            seeds_text(&outcome.seeds)
        );
        if let Some(confirmation) = outcome.confirmation.filter(|_| !outcome.confirmed) {
            println!(
                "  NOT CONFIRMED: seed {}'s case failed again in {confirmation} reruns; not counted as a finding (a failure that does not repeat, on real time)",
                outcome.shrunk_seed
            );
        } else {
            println!(
                "  seed {}'s case shrunk from {} to {} (operations + actions + workers) in {} candidate runs{}",
                outcome.shrunk_seed,
                outcome.original.size(),
                outcome.shrunk.size(),
                outcome.shrink_runs,
                if real {
                    format!(" (each kept when {SHRINK_MIN_FAILS} of {SHRINK_RERUNS} runs failed)")
                } else {
                    String::new()
                }
            );
        }
        if let (Some(confirmation), Some(reproduced)) = (outcome.confirmation, outcome.reproduced) {
            println!(
                "  failed again: the drawn case in {confirmation} reruns, the saved case in {reproduced} reruns"
            );
        }
        for violation in &outcome.result.violations {
            println!("  violation: {violation}");
        }
        for note in &outcome.result.notes {
            println!("  note: {note}");
        }
        println!("{}", outcome.shrunk.to_scenario().to_toml().trim_end());
        println!("  saved: {}", path.display());
        match outcome.reproduced {
            Some(reproduced) => println!("  reproduce (it failed again in {reproduced} reruns): {reproduce}"),
            None => println!("  reproduce: {reproduce}"),
        }
        group_records.push(GroupRecord {
            signature: outcome.signature.clone(),
            oracle: outcome.oracle.clone(),
            count: outcome.seeds.len() as u64,
            seeds: outcome.seeds.clone(),
            shrunk_seed: outcome.shrunk_seed,
            original_size: outcome.original.size() as u64,
            shrunk_size: outcome.shrunk.size() as u64,
            shrink_runs: u64::from(outcome.shrink_runs),
            reproduce: reproduce_case(executor, Path::new(&name)),
            case_file: name,
            violations: outcome.result.violations.clone(),
            notes: outcome.result.notes.clone(),
            confirmation: outcome.confirmation,
            reproduced: outcome.reproduced,
            confirmed: outcome.confirmed,
        });
    }
    let record = ExploreRecord {
        schema_version: EXPLORE_SCHEMA_VERSION,
        harness_version: runner::version::VERSION.to_owned(),
        harness_commit: runner::version::commit().map(str::to_owned),
        commit: config.commit.clone(),
        executor: executor.name.clone(),
        executor_version: executor.version.clone(),
        world: if real { ExploreWorld::Process } else { ExploreWorld::Simulated },
        deterministic: !real,
        seeds: config.seeds,
        start: config.start,
        shard: config.shard.map(|(index, count)| reports::Shard { index, count }),
        check_determinism: config.check_determinism,
        stopped_early: config.stop_at_first && stop.load(Ordering::Relaxed),
        verdicts,
        coverage,
        shortfalls,
        nondeterministic_seeds: nondeterministic,
        groups: group_records,
        saved_cases: SavedCases { replayed: regressions.len() as u64, failing: saved_failing },
        verdict: if failed { Verdict::Fail } else { Verdict::Pass },
    };
    let path = write_record(&config.out, &record)?;
    println!("wrote {}", path.display());
    if reports::github_actions() {
        for line in record_annotations(&record, &config.out) {
            println!("{line}");
        }
    }
    Ok(if failed { exit::CHECK_FAILED } else { exit::SUCCESS })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_ranges_follow_their_shard_and_stop_at_the_largest_seed() {
        let all = |range: SeedRange| (0..).map_while(|position| range.get(position)).collect::<Vec<_>>();
        assert_eq!(all(SeedRange::new(5, 4, None)), [5, 6, 7, 8]);
        assert_eq!(all(SeedRange::new(0, 0, None)), Vec::<u64>::new());
        assert_eq!(all(SeedRange::new(0, 10, Some((2, 4)))), [1, 5, 9]);
        assert_eq!(all(SeedRange::new(6, 10, Some((1, 4)))), [8, 12]);
        assert_eq!(all(SeedRange::new(u64::MAX, 1, None)), [u64::MAX]);
        assert_eq!(all(SeedRange::new(u64::MAX - 1, 1, Some((2, 2)))), Vec::<u64>::new());
        let long = SeedRange::new(0, u64::MAX, Some((3, 3)));
        assert_eq!((long.len, long.get(0), long.get(1)), (u64::MAX / 3, Some(2), Some(5)));
    }
}
