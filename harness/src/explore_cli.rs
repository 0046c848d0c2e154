//! `replaylab explore`: seeds in parallel, regressions replayed first, failures shrunk,
//! printed and saved.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::executors::ExecutorSpec;
use crate::exit;
use crate::explore::{self, Case, Finding};
use crate::verdict::Verdict;

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

/// Runs the exploration and returns the exit code.
pub fn run(config: &ExploreConfig) -> anyhow::Result<u8> {
    let executor = &config.executor;
    let mut failed = false;

    let regressions = read_regressions(&config.regressions)?;
    if !regressions.is_empty() {
        println!("replaying {} saved case(s) from {}", regressions.len(), config.regressions.display());
    }
    for regression in &regressions {
        let result = explore::check_case(&regression.case, executor);
        if let Some(oracle) = result.failure() {
            failed = true;
            println!(
                "saved case (seed {}, found with {}) FAILS: {oracle}",
                regression.seed, regression.executor
            );
            for violation in &result.violations {
                println!("  violation: {violation}");
            }
        }
    }

    let seeds: Vec<u64> = (config.start..config.start.saturating_add(config.seeds))
        .filter(|seed| config.shard.is_none_or(|(index, count)| seed % count == index - 1))
        .collect();
    let progress = indicatif::ProgressBar::with_draw_target(
        Some(seeds.len() as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let findings: Mutex<Vec<Finding>> = Mutex::new(Vec::new());
    let nondeterministic: Mutex<Vec<u64>> = Mutex::new(Vec::new());
    let verdicts: Mutex<std::collections::BTreeMap<Verdict, u64>> =
        Mutex::new(std::collections::BTreeMap::new());
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..config.jobs.max(1) {
            scope.spawn(|| loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let position = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(&seed) = seeds.get(position) else { break };
                let case = explore::case_for_seed(seed);
                let result = explore::check_case(&case, executor);
                if config.check_determinism
                    && explore::check_case(&case, executor).history_digest != result.history_digest
                {
                    nondeterministic.lock().unwrap_or_else(|p| p.into_inner()).push(seed);
                }
                *verdicts.lock().unwrap_or_else(|p| p.into_inner()).entry(result.verdict).or_insert(0) += 1;
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
        "explored {ran} seeds against {} in {:.1}s: {} pass, {} fail, {} unknown, {} crashed",
        executor.name,
        elapsed.as_secs_f64(),
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Unknown),
        count(Verdict::Crashed)
    );
    let mut nondeterministic = nondeterministic.into_inner().unwrap_or_else(|p| p.into_inner());
    nondeterministic.sort_unstable();
    if config.check_determinism {
        if nondeterministic.is_empty() {
            println!("determinism: every case gave the same history twice");
        } else {
            failed = true;
            println!(
                "determinism: {} seed(s) gave different histories: {nondeterministic:?}",
                nondeterministic.len()
            );
        }
    }
    for finding in &findings {
        failed = true;
        let path = write_case(&config.out, finding)?;
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
        println!("  reproduce: replaylab run --case {} --executor {}", path.display(), executor.name);
    }
    Ok(if failed { exit::CHECK_FAILED } else { exit::SUCCESS })
}
