//! The corpus of unusual but valid scenarios (issue 30, "no false verdicts"):
//! `scenarios/corpus/*.toml`. Each file's first line says what is expected of it:
//!
//! - `# corpus: pass`: the file loads, and the reference executor passes it at every seed of
//!   0..SEEDS (a verdict of pass; unknown, not applicable, crashed or fail are failures);
//! - `# corpus: refused "<substring>"`: loading it fails with a message containing the
//!   substring (the limit it breaks).
//!
//! Then 1 to 3 comment lines say what the file is about. Every failure of every file and seed
//! is collected, and the test fails once at the end with all of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use harness::executors;
use harness::runner;
use harness::verdict::Verdict;
use scenarios::{Scenario, StepKind};

/// Seeds every `pass` file is run at: 0..SEEDS.
const SEEDS: u64 = 20;
/// Threads the runs are spread over (the CI machine has two cores).
const THREADS: usize = 2;
/// At most this many violations are shown per failing run (the rest are counted).
const VIOLATIONS_SHOWN: usize = 4;
/// A violation or note longer than this is cut (a scenario of 1,000 operations can name many).
const LINE_CHARS: usize = 400;

/// What a corpus file's first line expects.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expectation {
    Pass,
    Refused(String),
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/corpus")
}

/// The corpus files, sorted by name.
fn corpus_files() -> Vec<PathBuf> {
    let dir = corpus_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    files
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The expectation line and the description comment after it, or why they are malformed.
fn expectation_of(text: &str) -> Result<Expectation, String> {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let expectation = if first == "# corpus: pass" {
        Expectation::Pass
    } else if let Some(rest) = first.strip_prefix("# corpus: refused \"") {
        match rest.strip_suffix('"') {
            Some(substring) if !substring.is_empty() => Expectation::Refused(substring.to_owned()),
            _ => return Err(format!("malformed expectation line {first:?}")),
        }
    } else {
        return Err(format!(
            "the first line must be `# corpus: pass` or `# corpus: refused \"<substring>\"`, not {first:?}"
        ));
    };
    let described = lines.take_while(|line| line.starts_with('#')).count();
    if !(1..=3).contains(&described) {
        return Err(format!(
            "the expectation line must be followed by 1 to 3 comment lines on what the file is about, not {described}"
        ));
    }
    Ok(expectation)
}

fn cut(text: &str) -> String {
    if text.chars().count() <= LINE_CHARS {
        text.to_owned()
    } else {
        format!("{}...", text.chars().take(LINE_CHARS).collect::<String>())
    }
}

/// One failing run, in one line per violation or note.
fn describe_run(file: &str, seed: u64, result: &harness::verdict::RunResult) -> String {
    let mut text = format!("{file} seed {seed}: {}", result.verdict.as_str());
    let oracles: std::collections::BTreeSet<&str> =
        result.violations.iter().map(|violation| violation.oracle.as_str()).collect();
    if !oracles.is_empty() {
        text.push_str(&format!(" ({})", oracles.into_iter().collect::<Vec<_>>().join(", ")));
    }
    for note in &result.notes {
        text.push_str(&format!("\n    note: {}", cut(note)));
    }
    for violation in result.violations.iter().take(VIOLATIONS_SHOWN) {
        text.push_str(&format!("\n    violation: {}", cut(&violation.to_string())));
    }
    if result.violations.len() > VIOLATIONS_SHOWN {
        text.push_str(&format!("\n    (+{} more violations)", result.violations.len() - VIOLATIONS_SHOWN));
    }
    text
}

#[test]
fn every_corpus_file_meets_its_expectation() {
    let started = Instant::now();
    let files = corpus_files();
    assert!(files.len() >= 55, "the corpus has {} files, fewer than 55", files.len());
    let builtin_ids: BTreeMap<String, String> = scenarios::builtin()
        .into_iter()
        .map(|scenario| (scenario.id.clone(), scenario.full_name()))
        .collect();

    // Load and check every file; collect the runs the `pass` files need.
    let mut failures: Vec<String> = Vec::new();
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    let mut to_run: Vec<(String, Scenario)> = Vec::new();
    let mut refused = 0;
    for path in &files {
        let name = file_name(path);
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) => {
                failures.push(format!("{name}: cannot be read: {error}"));
                continue;
            }
        };
        let expectation = match expectation_of(&text) {
            Ok(expectation) => expectation,
            Err(why) => {
                failures.push(format!("{name}: {why}"));
                continue;
            }
        };
        let loaded = Scenario::from_file(path);
        match (expectation, loaded) {
            (Expectation::Refused(substring), Err(error)) => {
                if error.message.contains(&substring) {
                    refused += 1;
                } else {
                    failures.push(format!(
                        "{name}: refused, but the message does not contain {substring:?}: {error}"
                    ));
                }
            }
            (Expectation::Refused(substring), Ok(_)) => {
                failures.push(format!("{name}: expected to be refused ({substring:?}), but it loaded"));
            }
            (Expectation::Pass, Err(error)) => {
                failures.push(format!("{name}: expected to load, refused: {error}"))
            }
            (Expectation::Pass, Ok(scenario)) => {
                if let Some(builtin) = builtin_ids.get(&scenario.id) {
                    failures.push(format!("{name}: id {} clashes with the built-in {builtin}", scenario.id));
                }
                if let Some(other) = ids.insert(scenario.id.clone(), name.clone()) {
                    failures.push(format!("{name}: id {} is also the id of {other}", scenario.id));
                }
                let expects = scenario
                    .steps
                    .iter()
                    .any(|step| matches!(step.kind, StepKind::Expect(_) | StepKind::ExpectEffects { .. }));
                if !expects {
                    failures.push(format!("{name}: a `pass` file needs `expect` or `expect_effects` steps"));
                }
                to_run.push((name, scenario));
            }
        }
    }

    // Every (file, seed) run, the largest scenarios first so that no thread is left with a
    // long one at the end; two threads take them in turn.
    let mut jobs: Vec<(usize, u64)> =
        (0..to_run.len()).flat_map(|index| (0..SEEDS).map(move |seed| (index, seed))).collect();
    jobs.sort_by_key(|&(index, seed)| (std::cmp::Reverse(to_run[index].1.steps.len()), seed, index));
    let next = AtomicUsize::new(0);
    let run_failures: Mutex<Vec<(usize, u64, String)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                let reference = executors::find("reference").expect("the reference executor is registered");
                loop {
                    let job = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(index, seed)) = jobs.get(job) else { break };
                    let (name, scenario) = &to_run[index];
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        runner::run(scenario, seed, &reference)
                    }));
                    let failure = match outcome {
                        Ok(record) if record.result.verdict == Verdict::Pass => None,
                        Ok(record) => Some(describe_run(name, seed, &record.result)),
                        Err(panic) => {
                            let message = panic
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
                                .unwrap_or_default();
                            Some(format!("{name} seed {seed}: the run panicked: {}", cut(&message)))
                        }
                    };
                    if let Some(failure) = failure {
                        run_failures
                            .lock()
                            .expect("no thread panicked holding it")
                            .push((index, seed, failure));
                    }
                }
            });
        }
    });
    let mut run_failures = run_failures.into_inner().expect("no thread panicked holding it");
    run_failures.sort();
    let failed_runs = run_failures.len();
    failures.extend(run_failures.into_iter().map(|(_, _, failure)| failure));

    let elapsed = started.elapsed();
    let summary = format!(
        "corpus: {} files ({} pass files x {SEEDS} seeds = {} runs, {refused} refused as expected) in {:.1}s on {THREADS} threads; {failed_runs} runs failed",
        files.len(),
        to_run.len(),
        to_run.len() as u64 * SEEDS,
        elapsed.as_secs_f64()
    );
    println!("{summary}");
    assert!(failures.is_empty(), "{summary}; {} failures:\n{}", failures.len(), failures.join("\n"));
}
