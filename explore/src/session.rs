//! `replaylab explore`: seeds in parallel, regressions replayed first, failures shrunk,
//! printed and saved.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use judge::oracles::ORACLES;
use judge::verdict::Verdict;
use runner::executors::ExecutorSpec;
use runner::exit;
use runner::RunCoverage;

use crate::{self as explore, Case, Finding};

/// The most cases that may end `unknown` (a premise that did not happen) before exploration
/// fails: more would mean the generator asks for things that do not happen.
pub const MAX_UNKNOWN_PERCENT: f64 = 5.0;
/// The fewest installed faults that must fire: a fault that never fires tested nothing.
pub const MIN_FAULTS_FIRED_PERCENT: f64 = 80.0;

/// What an exploration covered, summed over its cases.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Coverage {
    /// Cases run (those `not applicable` to the executor are not run, and not counted here).
    pub cases: u64,
    /// Cases not run: they needed something the executor does not declare.
    pub not_applicable: u64,
    /// Of those, cases whose verdict was `unknown`.
    pub unknown: u64,
    /// Fault rules installed, and fired as often as asked.
    pub faults_installed: u64,
    /// See `faults_installed`.
    pub faults_fired: u64,
    /// Workers crashed, and crashed right after a committed effect.
    pub crashes: u64,
    /// See `crashes`.
    pub crashes_after_commit: u64,
    /// Cases in which a stale owner wrote inside a new owner's window (see
    /// [`runner::stale_writes`]).
    pub stale_writes: u64,
    /// Cases in which each oracle had something to judge.
    pub exercised: std::collections::BTreeMap<String, u64>,
    /// Why cases ended `unknown`: the premise that did not happen, by kind, with a count.
    pub unknown_because: std::collections::BTreeMap<String, u64>,
    /// Oracles no case can give anything to judge, because the executor does not support what
    /// they judge ([`oracles_beyond`]); not counted as unexercised.
    pub beyond_executor: Vec<String>,
}

/// The oracles that judge only what an executor with `capabilities` cannot do: O10 (one job
/// per operation) without delayed jobs, O11 (no stale overwrite) without `tickets.set_status`.
pub fn oracles_beyond(capabilities: &protocol::ExecutorCapabilities) -> Vec<String> {
    let mut beyond = Vec::new();
    if !explore::CaseTool::Job.supported_by(capabilities) {
        beyond.push("O10".to_owned());
    }
    if !explore::CaseTool::SetStatus.supported_by(capabilities) {
        beyond.push("O11".to_owned());
    }
    beyond
}

/// The kind of premise a note of an `unknown` run names.
fn premise_kind(note: &str) -> &'static str {
    if note.contains("never reached the pause point") {
        "a pause point was never reached"
    } else if note.contains("never fired") || note.contains("times: the fault") {
        "a fault did not fire"
    } else if note.contains("did not overlap") || note.contains("never reached its worker") {
        "concurrent calls did not overlap"
    } else if note.contains("created no ticket") {
        "a ticket to update or edit did not exist"
    } else {
        "another premise"
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

impl Coverage {
    /// Adds one case (`notes`: why it was unknown, if it was).
    pub fn add(&mut self, verdict: Verdict, run: &RunCoverage, notes: &[String]) {
        if verdict == Verdict::NotApplicable {
            self.not_applicable += 1;
            return;
        }
        self.cases += 1;
        if verdict == Verdict::Unknown {
            self.unknown += 1;
            let kinds: std::collections::BTreeSet<&'static str> =
                notes.iter().map(|note| premise_kind(note)).collect();
            for kind in kinds {
                *self.unknown_because.entry(kind.to_owned()).or_insert(0) += 1;
            }
        }
        self.faults_installed += u64::from(run.faults_installed);
        self.faults_fired += u64::from(run.faults_fired);
        self.crashes += u64::from(run.crashes);
        self.crashes_after_commit += u64::from(run.crashes_after_commit);
        self.stale_writes += u64::from(run.stale_writes > 0);
        for oracle in &run.exercised {
            *self.exercised.entry((*oracle).to_owned()).or_insert(0) += 1;
        }
    }

    /// Adds another part's coverage (a shard's).
    pub fn absorb(&mut self, other: &Coverage) {
        self.cases += other.cases;
        self.not_applicable += other.not_applicable;
        self.unknown += other.unknown;
        self.faults_installed += other.faults_installed;
        self.faults_fired += other.faults_fired;
        self.crashes += other.crashes;
        self.crashes_after_commit += other.crashes_after_commit;
        self.stale_writes += other.stale_writes;
        for (oracle, count) in &other.exercised {
            *self.exercised.entry(oracle.clone()).or_insert(0) += count;
        }
        for (kind, count) in &other.unknown_because {
            *self.unknown_because.entry(kind.clone()).or_insert(0) += count;
        }
    }

    /// The oracles no case gave anything to judge (of those the executor can be judged by).
    pub fn unexercised(&self) -> Vec<&'static str> {
        self.judgeable().into_iter().filter(|id| !self.exercised.contains_key(*id)).collect()
    }

    /// The oracles the executor can be judged by: all but [`Coverage::beyond_executor`].
    fn judgeable(&self) -> Vec<&'static str> {
        ORACLES.iter().map(|(id, _)| *id).filter(|id| !self.beyond_executor.iter().any(|b| b == id)).collect()
    }

    /// `coverage: cases=N unknown=U% faults_fired=F% crashes_after_commit=C% stale_writes=W
    /// oracles_exercised=K/M`, then ` not_applicable=A` when some cases were not run and
    /// ` beyond_executor=O10,O11` when some oracles cannot judge the executor (M counts the
    /// others).
    pub fn line(&self) -> String {
        let mut not_applicable = if self.not_applicable > 0 {
            format!(" not_applicable={}", self.not_applicable)
        } else {
            String::new()
        };
        if !self.beyond_executor.is_empty() {
            not_applicable.push_str(&format!(" beyond_executor={}", self.beyond_executor.join(",")));
        }
        format!(
            "coverage: cases={} unknown={:.1}% faults_fired={:.1}% crashes_after_commit={:.1}% stale_writes={} oracles_exercised={}/{}{not_applicable}",
            self.cases,
            percent(self.unknown, self.cases),
            percent(self.faults_fired, self.faults_installed),
            percent(self.crashes_after_commit, self.crashes),
            self.stale_writes,
            self.judgeable().len() - self.unexercised().len(),
            self.judgeable().len()
        )
    }

    /// Why the coverage is not enough, if it is not.
    pub fn shortfalls(&self) -> Vec<String> {
        let mut shortfalls = Vec::new();
        if self.cases == 0 && self.not_applicable > 0 {
            shortfalls.push(format!(
                "none of the {} cases applied to the executor (each needed something it does not declare)",
                self.not_applicable
            ));
            return shortfalls;
        }
        let unknown = percent(self.unknown, self.cases);
        if unknown > MAX_UNKNOWN_PERCENT {
            shortfalls.push(format!(
                "{unknown:.1}% of the cases ended unknown (a premise did not happen); at most {MAX_UNKNOWN_PERCENT}% may"
            ));
        }
        let fired = percent(self.faults_fired, self.faults_installed);
        if self.faults_installed > 0 && fired < MIN_FAULTS_FIRED_PERCENT {
            shortfalls.push(format!(
                "only {fired:.1}% of the faults installed fired; at least {MIN_FAULTS_FIRED_PERCENT}% must"
            ));
        }
        let unexercised = self.unexercised();
        if !unexercised.is_empty() {
            shortfalls.push(format!("no case gave {} anything to judge", unexercised.join(", ")));
        }
        shortfalls
    }
}

/// The version of `explore.json`'s format; bump it on any incompatible change.
pub const EXPLORE_SCHEMA_VERSION: u32 = 1;

/// `explore.json`: what an exploration (or one shard of it) ran and found, written beside the
/// shrunk cases; shards' records merge into the whole exploration's ([`merge_records`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExploreRecord {
    /// [`EXPLORE_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The replaylab version that ran it.
    pub harness_version: String,
    /// The source commit, when known.
    pub commit: Option<String>,
    /// The executor's name.
    pub executor: String,
    /// Its version.
    pub executor_version: String,
    /// Seeds asked for (before sharding).
    pub seeds: u64,
    /// The first seed.
    pub start: u64,
    /// The shard run, if any.
    pub shard: Option<reports::Shard>,
    /// Whether every case ran twice.
    pub check_determinism: bool,
    /// Whether it stopped at its first failing seed (then it did not run every seed).
    pub stopped_early: bool,
    /// Cases per verdict.
    pub verdicts: std::collections::BTreeMap<Verdict, u64>,
    /// What the cases covered.
    pub coverage: Coverage,
    /// Why the coverage is not enough (empty when it is).
    pub shortfalls: Vec<String>,
    /// Seeds whose two runs differed.
    pub nondeterministic_seeds: Vec<u64>,
    /// Failing seeds, shrunk, in seed order.
    pub findings: Vec<FindingRecord>,
    /// The saved cases replayed first.
    pub saved_cases: SavedCases,
    /// Pass, or fail on a finding, a failing saved case, a nondeterministic seed or thin
    /// coverage.
    pub verdict: Verdict,
}

/// One failing seed of an exploration, shrunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindingRecord {
    /// The exploration seed.
    pub seed: u64,
    /// The oracle it fails.
    pub oracle: String,
    /// The shrunk case's scenario file, beside `explore.json`.
    pub case_file: String,
    /// The shrunk case's violations.
    pub violations: Vec<reports::Violation>,
    /// Its notes.
    pub notes: Vec<String>,
    /// One command that finds it again from its seed (it needs no file).
    pub reproduce: String,
}

/// The saved cases an exploration replayed before its seeds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedCases {
    /// How many were replayed.
    pub replayed: u64,
    /// Those that still fail: (the seed they were found at, the executor they were found
    /// with, the oracle that fails now).
    pub failing: Vec<(u64, String, String)>,
}

/// The name `explore` gives its record, in its `--out` directory.
pub const EXPLORE_RECORD: &str = "explore.json";

/// Merges the records of shards 1..N of one exploration (each once) into the whole
/// exploration's: counts summed, seeds and findings in seed order, the coverage floor judged
/// again over the sum. Shards that do not make one exploration are an error.
pub fn merge_records(parts: Vec<ExploreRecord>) -> Result<ExploreRecord, String> {
    let first = parts.first().ok_or("nothing to merge")?.clone();
    let count = match first.shard {
        None if parts.len() == 1 => return Ok(first),
        None => return Err("an exploration that is not a shard cannot be merged with others".into()),
        Some(shard) => shard.count,
    };
    let mut indices: Vec<u64> =
        parts.iter().filter_map(|part| part.shard.filter(|s| s.count == count)).map(|s| s.index).collect();
    indices.sort_unstable();
    if indices != (1..=count).collect::<Vec<_>>() || parts.len() as u64 != count {
        let have: Vec<String> =
            parts.iter().map(|part| part.shard.map_or("whole".into(), |s| s.to_string())).collect();
        return Err(format!(
            "the exploration shards must be 1/{count} to {count}/{count}, each once; got {}",
            have.join(", ")
        ));
    }
    if let Some(part) = parts.iter().find(|part| part.stopped_early) {
        return Err(format!(
            "exploration shard {} stopped at its first failure (--stop-at-first): it did not run all its seeds",
            part.shard.map_or("?".into(), |s| s.to_string())
        ));
    }
    for part in &parts[1..] {
        let same = [
            ("harness_version", part.harness_version == first.harness_version),
            ("commit", part.commit == first.commit),
            ("executor", part.executor == first.executor && part.executor_version == first.executor_version),
            ("seeds", part.seeds == first.seeds && part.start == first.start),
            ("check_determinism", part.check_determinism == first.check_determinism),
            ("saved cases replayed", part.saved_cases == first.saved_cases),
            (
                "coverage's oracles beyond the executor",
                part.coverage.beyond_executor == first.coverage.beyond_executor,
            ),
        ];
        if let Some((what, _)) = same.iter().find(|(_, same)| !same) {
            return Err(format!("the exploration shards differ in {what}: not one exploration"));
        }
    }
    let mut merged = ExploreRecord {
        shard: None,
        verdicts: std::collections::BTreeMap::new(),
        coverage: Coverage { beyond_executor: first.coverage.beyond_executor.clone(), ..Coverage::default() },
        nondeterministic_seeds: Vec::new(),
        findings: Vec::new(),
        ..first
    };
    for part in &parts {
        for (verdict, n) in &part.verdicts {
            *merged.verdicts.entry(*verdict).or_insert(0) += n;
        }
        merged.coverage.absorb(&part.coverage);
        merged.nondeterministic_seeds.extend(&part.nondeterministic_seeds);
        merged.findings.extend(part.findings.iter().cloned());
    }
    merged.nondeterministic_seeds.sort_unstable();
    merged.findings.sort_by_key(|finding| finding.seed);
    merged.shortfalls = shortfalls_of(&merged.coverage, merged.stopped_early);
    merged.verdict = record_verdict(&merged);
    Ok(merged)
}

/// The coverage's shortfalls, none for an exploration that stopped early (it ran too few
/// seeds for its coverage to say anything) or that had no case at all.
fn shortfalls_of(coverage: &Coverage, stopped_early: bool) -> Vec<String> {
    if stopped_early || coverage.cases + coverage.not_applicable == 0 {
        Vec::new()
    } else {
        coverage.shortfalls()
    }
}

fn record_verdict(record: &ExploreRecord) -> Verdict {
    let failed = !record.findings.is_empty()
        || !record.saved_cases.failing.is_empty()
        || !record.nondeterministic_seeds.is_empty()
        || !record.shortfalls.is_empty();
    if failed {
        Verdict::Fail
    } else {
        Verdict::Pass
    }
}

/// The record as text for the terminal: the counts, the coverage, its shortfalls and every
/// finding with its reproduce command.
pub fn render_record(record: &ExploreRecord) -> String {
    let count = |verdict| record.verdicts.get(&verdict).copied().unwrap_or(0);
    let mut text = format!(
        "exploration of {} seeds against {}: {} pass, {} fail, {} unknown, {} crashed, {} not applicable\n{}\n",
        record.verdicts.values().sum::<u64>(),
        record.executor,
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Unknown),
        count(Verdict::Crashed),
        count(Verdict::NotApplicable),
        record.coverage.line()
    );
    for shortfall in &record.shortfalls {
        text.push_str(&format!("coverage too thin: {shortfall}\n"));
    }
    if !record.nondeterministic_seeds.is_empty() {
        let seeds: Vec<String> = record.nondeterministic_seeds.iter().map(u64::to_string).collect();
        text.push_str(&format!("determinism: seeds whose histories differed: {}\n", seeds.join(", ")));
    }
    for (seed, found_with, oracle) in &record.saved_cases.failing {
        text.push_str(&format!("saved case (seed {seed}, found with {found_with}) FAILS: {oracle}\n"));
    }
    for finding in &record.findings {
        text.push_str(&format!(
            "seed {} fails {} ({}); reproduce: {}\n",
            finding.seed, finding.oracle, finding.case_file, finding.reproduce
        ));
    }
    text.push_str(&format!("verdict: {}\n", record.verdict));
    text
}

/// What `replaylab explore` was asked.
#[derive(Debug, Clone)]
pub struct ExploreConfig {
    /// The executor under test.
    pub executor: ExecutorSpec,
    /// How many seeds (before sharding).
    pub seeds: u64,
    /// The first seed.
    pub start: u64,
    /// Shard (1-based index, count).
    pub shard: Option<(u64, u64)>,
    /// Threads.
    pub jobs: usize,
    /// The regressions file.
    pub regressions: PathBuf,
    /// Where shrunk cases are written.
    pub out: PathBuf,
    /// Stop at the first failing seed.
    pub stop_at_first: bool,
    /// Run every case twice and fail on any history difference.
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
    /// The exploration seed.
    pub seed: u64,
    /// The shrunk case.
    pub case: Case,
}

/// Reads the regressions file (missing: none). A malformed line is an error naming its line.
pub fn read_regressions(path: &Path) -> anyhow::Result<Vec<Regression>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).with_context(|| format!("failed to read {}", path.display())),
    };
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

/// Writes the shrunk case as a scenario file and returns its path.
fn write_case(out: &Path, finding: &Finding) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("failed to create {}", out.display()))?;
    let path = out.join(format!("case-seed-{}-{}.toml", finding.seed, finding.oracle));
    let text = format!(
        "# Found by `replaylab explore` at seed {} ({}), shrunk in {} runs.\n{}",
        finding.seed,
        finding.oracle,
        finding.shrink_runs,
        finding.shrunk.to_scenario().to_toml()
    );
    std::fs::write(&path, text).with_context(|| format!("failed to write {}", path.display()))?;
    Ok(path)
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

/// Runs the exploration and returns the exit code.
pub fn run(config: &ExploreConfig) -> anyhow::Result<u8> {
    let executor = &config.executor;
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
            println!(
                "saved case (seed {}, found with {}) FAILS: {oracle}",
                regression.seed, regression.executor
            );
            saved_failing.push((regression.seed, regression.executor.clone(), oracle.clone()));
            for violation in &result.violations {
                println!("  violation: {violation}");
            }
        }
    }

    let seeds = SeedRange::new(config.start, config.seeds, config.shard);
    let progress =
        indicatif::ProgressBar::with_draw_target(Some(seeds.len), indicatif::ProgressDrawTarget::stderr());
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let findings: Mutex<Vec<Finding>> = Mutex::new(Vec::new());
    let nondeterministic: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    let verdicts: Mutex<std::collections::BTreeMap<Verdict, u64>> =
        Mutex::new(std::collections::BTreeMap::new());
    let coverage: Mutex<Coverage> = Mutex::new(Coverage {
        beyond_executor: oracles_beyond(&executor.capabilities),
        ..Coverage::default()
    });
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..config.jobs.max(1) {
            scope.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let position = next.fetch_add(1, Ordering::Relaxed);
                let Some(seed) = seeds.get(position) else { break };
                let case = explore::case_for_seed(seed).narrowed_to(&executor.capabilities);
                let result = explore::check_case(&case, executor);
                if config.check_determinism
                    && explore::check_case(&case, executor).history_digest != result.history_digest
                {
                    nondeterministic.lock().unwrap_or_else(|p| p.into_inner()).push(seed);
                }
                *verdicts.lock().unwrap_or_else(|p| p.into_inner()).entry(result.verdict).or_insert(0) += 1;
                coverage.lock().unwrap_or_else(|p| p.into_inner()).add(
                    result.verdict,
                    &result.coverage,
                    &result.notes,
                );
                if result.failure().is_some() {
                    if let Some(finding) = explore::explore_seed(seed, executor) {
                        findings.lock().unwrap_or_else(|p| p.into_inner()).push(finding);
                        if config.stop_at_first {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
                progress.inc(1);
            });
        }
    });
    progress.finish_and_clear();
    let elapsed = started.elapsed();
    let mut findings = findings.into_inner().unwrap_or_else(|p| p.into_inner());
    findings.sort_by_key(|finding| finding.seed);
    let verdicts = verdicts.into_inner().unwrap_or_else(|p| p.into_inner());
    let ran: u64 = verdicts.values().sum();
    let count = |verdict| verdicts.get(&verdict).copied().unwrap_or(0);
    println!(
        "explored {ran} seeds against {} in {:.1}s: {} pass, {} fail, {} unknown, {} crashed, {} not applicable",
        executor.name,
        elapsed.as_secs_f64(),
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
        }
    }
    let shortfalls = shortfalls_of(&coverage, config.stop_at_first);
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
    let mut finding_records = Vec::new();
    for finding in &findings {
        failed = true;
        let path = write_case(&config.out, finding)?;
        finding_records.push(FindingRecord {
            seed: finding.seed,
            oracle: finding.oracle.clone(),
            case_file: path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default(),
            violations: finding.result.violations.clone(),
            notes: finding.result.notes.clone(),
            reproduce: format!(
                "{} explore --start {} --seeds 1 --executor {}",
                executor.program,
                finding.seed,
                judge::text::shell_quote(&executor.name)
            ),
        });
        append_regression(
            &config.regressions,
            &Regression {
                executor: executor.name.clone(),
                oracle: finding.oracle.clone(),
                seed: finding.seed,
                case: finding.shrunk.clone(),
            },
        )?;
        println!(
            "\nseed {} fails {}; shrunk from {} to {} (operations + actions + workers) in {} runs:",
            finding.seed,
            finding.oracle,
            finding.original.size(),
            finding.shrunk.size(),
            finding.shrink_runs
        );
        for violation in &finding.result.violations {
            println!("  violation: {violation}");
        }
        for note in &finding.result.notes {
            println!("  note: {note}");
        }
        println!("{}", finding.shrunk.to_scenario().to_toml().trim_end());
        println!("  saved: {}", path.display());
        println!(
            "  reproduce: {} run --case {} --executor {}",
            executor.program,
            judge::text::shell_quote(&path.display().to_string()),
            judge::text::shell_quote(&executor.name)
        );
    }
    let record = ExploreRecord {
        schema_version: EXPLORE_SCHEMA_VERSION,
        harness_version: env!("CARGO_PKG_VERSION").to_owned(),
        commit: config.commit.clone(),
        executor: executor.name.clone(),
        executor_version: executor.version.clone(),
        seeds: config.seeds,
        start: config.start,
        shard: config.shard.map(|(index, count)| reports::Shard { index, count }),
        check_determinism: config.check_determinism,
        stopped_early: config.stop_at_first && stop.load(Ordering::Relaxed),
        verdicts,
        coverage,
        shortfalls,
        nondeterministic_seeds: nondeterministic,
        findings: finding_records,
        saved_cases: SavedCases { replayed: regressions.len() as u64, failing: saved_failing },
        verdict: if failed { Verdict::Fail } else { Verdict::Pass },
    };
    let path = write_record(&config.out, &record)?;
    println!("wrote {}", path.display());
    Ok(if failed { exit::CHECK_FAILED } else { exit::SUCCESS })
}

/// Writes `explore.json` into `out`.
pub fn write_record(out: &Path, record: &ExploreRecord) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("failed to create {}", out.display()))?;
    let path = out.join(EXPLORE_RECORD);
    let mut text = serde_json::to_string_pretty(record).expect("an exploration record serialises");
    text.push('\n');
    std::fs::write(&path, text).with_context(|| format!("failed to write {}", path.display()))?;
    Ok(path)
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

    fn run(
        faults_installed: u32,
        faults_fired: u32,
        crashes: u32,
        after: u32,
        exercised: &[&'static str],
    ) -> RunCoverage {
        RunCoverage {
            faults_installed,
            faults_fired,
            crashes,
            crashes_after_commit: after,
            exercised: exercised.iter().copied().collect(),
            stale_writes: after,
        }
    }

    #[test]
    fn the_coverage_line_sums_the_cases() {
        let mut coverage = Coverage::default();
        let every: Vec<&'static str> = ORACLES.iter().map(|(id, _)| *id).collect();
        coverage.add(Verdict::Pass, &run(2, 2, 2, 1, &every), &[]);
        coverage.add(Verdict::Pass, &run(2, 1, 0, 0, &[]), &[]);
        coverage.add(
            Verdict::Unknown,
            &run(0, 0, 0, 0, &[]),
            &["line 3: fault rule 1 (x) never fired: ...".into()],
        );
        coverage.add(Verdict::Fail, &run(0, 0, 2, 2, &[]), &[]);
        assert_eq!(
            coverage.line(),
            "coverage: cases=4 unknown=25.0% faults_fired=75.0% crashes_after_commit=75.0% stale_writes=2 oracles_exercised=13/13"
        );
        assert_eq!(coverage.unknown_because.get("a fault did not fire"), Some(&1));
        let shortfalls = coverage.shortfalls();
        assert_eq!(shortfalls.len(), 2, "{shortfalls:?}");
        assert!(shortfalls[0].contains("25.0% of the cases ended unknown"), "{shortfalls:?}");
        assert!(shortfalls[1].contains("75.0% of the faults"), "{shortfalls:?}");
    }

    #[test]
    fn an_oracle_with_nothing_to_judge_is_a_shortfall() {
        let mut coverage = Coverage::default();
        coverage.add(Verdict::Pass, &run(1, 1, 0, 0, &["O1", "O2"]), &[]);
        assert!(coverage.line().ends_with("oracles_exercised=2/13"), "{}", coverage.line());
        let shortfalls = coverage.shortfalls();
        assert_eq!(shortfalls.len(), 1, "{shortfalls:?}");
        assert!(shortfalls[0].starts_with("no case gave O3, O4"), "{shortfalls:?}");
    }
}

#[cfg(test)]
mod capability_tests {
    use super::*;
    use protocol::ExecutorCapabilities;

    #[test]
    fn oracles_beyond_a_narrow_executor_are_named_not_counted_as_unexercised() {
        assert!(oracles_beyond(&ExecutorCapabilities::all()).is_empty());
        let tickets = ExecutorCapabilities::tools(["tickets.create"]);
        assert_eq!(oracles_beyond(&tickets), ["O10", "O11"]);
        let mut coverage = Coverage { beyond_executor: oracles_beyond(&tickets), ..Coverage::default() };
        let every: std::collections::BTreeSet<&'static str> =
            ORACLES.iter().map(|(id, _)| *id).filter(|id| !["O10", "O11"].contains(id)).collect();
        let run = RunCoverage { exercised: every, ..RunCoverage::default() };
        coverage.add(Verdict::Pass, &run, &[]);
        coverage.add(Verdict::NotApplicable, &RunCoverage::default(), &[]);
        assert!(coverage.shortfalls().is_empty(), "{:?}", coverage.shortfalls());
        assert!(
            coverage.line().ends_with("oracles_exercised=11/11 not_applicable=1 beyond_executor=O10,O11"),
            "{}",
            coverage.line()
        );
        // Nothing applied: that is a shortfall, never a pass.
        let nothing = Coverage { not_applicable: 3, ..Coverage::default() };
        assert_eq!(nothing.shortfalls().len(), 1);
    }

    #[test]
    fn a_case_narrowed_to_a_narrow_executor_applies_to_it() {
        let tickets = ExecutorCapabilities::tools(["tickets.create"]);
        let needs_of = |case: &explore::Case| case.to_scenario().needs(&protocol::ContractSet::builtin());
        let mut narrowed_away = 0;
        for seed in 0..200 {
            let case = explore::case_for_seed(seed);
            let narrowed = case.clone().narrowed_to(&tickets);
            assert!(tickets.lacks(&needs_of(&narrowed)).is_empty(), "seed {seed}: {:?}", needs_of(&narrowed));
            narrowed_away += u32::from(narrowed != case);
            assert_eq!(case.clone().narrowed_to(&ExecutorCapabilities::all()), case, "all narrows nothing");
        }
        assert!(narrowed_away > 100, "most random cases use more than tickets: {narrowed_away}");
    }
}
