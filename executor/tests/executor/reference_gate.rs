//! The reference executor's gate: the matrix and exploration that it must pass, as CI's gates
//! ask, at a size that fits one mutant's test run.
//!
//! `cargo mutants -p executor` uses these two tests as the executor crate's tests (see
//! `.cargo/mutants.toml` and ARCHITECTURE.md, "Mutation testing"): a source mutant of the
//! reference is caught when a row stops passing or exploration finds a failing case. Sizes
//! can be raised with `REPLAYLAB_GATE_SEEDS` (matrix seeds, default 20) and
//! `REPLAYLAB_GATE_CASES` (exploration cases, default 500).

use std::path::PathBuf;

use harness::executors::{self, ExecutorSpec};
use harness::explore_cli::{self, ExploreConfig};
use harness::matrix::{self, MatrixConfig};
use harness::verdict::Verdict;

fn reference() -> ExecutorSpec {
    executors::find("reference").expect("the reference executor is registered")
}

fn size(variable: &str, default: u64) -> u64 {
    match std::env::var(variable) {
        Ok(text) => text.parse().unwrap_or_else(|_| panic!("{variable}={text:?} is not a number")),
        Err(_) => default,
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("replaylab-gate-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

#[test]
fn the_reference_passes_every_run_of_the_matrix() {
    let config = MatrixConfig {
        executor: reference(),
        scenarios: scenarios::builtin(),
        seeds: size("REPLAYLAB_GATE_SEEDS", 20),
        first_seed: 0,
        shard: None,
        check_determinism: false,
        jobs: 2,
        commit: None,
        log: None,
        selection: false,
        progress: false,
    };
    let result = matrix::run(&config);
    assert_eq!(result.scenarios.len(), config.scenarios.len(), "every scenario ran");
    let failed: Vec<String> = result
        .scenarios
        .iter()
        .filter(|scenario| scenario.verdict != Verdict::Pass || scenario.seeds_run != config.seeds)
        .map(|scenario| {
            let first = scenario.failures.first().map_or_else(String::new, |run| {
                let why: Vec<&str> = run
                    .violations
                    .iter()
                    .map(|violation| violation.explanation.as_str())
                    .chain(run.notes.iter().map(String::as_str))
                    .collect();
                format!(
                    "\n  {} seed {}: {}\n  reproduce: {}",
                    run.verdict,
                    run.seed,
                    why.join("; "),
                    run.reproduce
                )
            });
            format!("{} {}: {:?}{first}", scenario.id, scenario.verdict, scenario.counts)
        })
        .collect();
    assert!(failed.is_empty(), "{} scenario(s) did not pass:\n{}", failed.len(), failed.join("\n"));
}

#[test]
fn the_reference_passes_exploration_with_its_coverage_floor() {
    let dir = scratch("explore");
    let config = ExploreConfig {
        executor: reference(),
        seeds: size("REPLAYLAB_GATE_CASES", 500),
        start: 0,
        shard: None,
        jobs: 2,
        regressions: dir.join("regressions.jsonl"),
        out: dir.join("cases"),
        // One failing case decides the gate; shrinking every one would only cost time.
        stop_at_first: true,
        check_determinism: false,
        commit: None,
    };
    let code = explore_cli::run(&config).expect("exploration runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, harness::exit::SUCCESS, "exploration failed: its output above says which case and why");
}
