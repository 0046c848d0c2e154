//! A matrix result checked against its own evidence: every count of a scenario recomputed from
//! its runs (`runs`: each run's verdict, history digest and what it counted), every failure and
//! the run shown matched to its run, the timeline's flags matched to the shown run's
//! violations, the seeds matched to the shard, and the rows rolled up again. `merge` refuses a
//! shard that fails any of it; `verify` starts with it before it re-runs anything.
//!
//! This finds a report that was edited by hand without care, or cut short; one forged with
//! care, every count made to agree, is caught only by running the runs again (`verify`).

use std::collections::BTreeMap;

use reports::{MatrixResult, RunDigest, ScenarioSummary, Verdict};

use crate::matrix::{assemble, Header, Tally};

/// The seeds a result (or its shard) must hold a run of, per scenario.
pub fn expected_seeds(result: &MatrixResult) -> Vec<u64> {
    (0..result.seeds)
        .map_while(|offset| result.first_seed.checked_add(offset))
        .filter(|seed| result.shard.is_none_or(|shard| shard.contains(*seed)))
        .collect()
}

/// The header a result was assembled from (the inverse of [`assemble`]'s).
pub fn header_of(result: &MatrixResult) -> Header {
    Header {
        commit: result.commit.clone(),
        executor: result.executor.clone(),
        executor_version: result.executor_version.clone(),
        seeds: result.seeds,
        first_seed: result.first_seed,
        determinism_checked: result.determinism_checked,
        shard: result.shard,
        // A selection (`--only`) left out the rows its scenarios do not cover.
        selection: scenarios::Row::all()
            .iter()
            .any(|row| !result.rows.iter().any(|r| r.row == row.to_string())),
        black_box: result.black_box.clone(),
    }
}

/// Everything in `result` that its own evidence contradicts, one sentence each naming the
/// scenario and both values; empty when it agrees with itself.
pub fn contradictions(result: &MatrixResult) -> Vec<String> {
    let mut found = Vec::new();
    let seeds = expected_seeds(result);
    for scenario in &result.scenarios {
        for problem in scenario_contradictions(scenario, &seeds) {
            found.push(format!("{}: {problem}", scenario.id));
        }
    }
    let again = assemble(header_of(result), result.scenarios.clone());
    for (row, recomputed) in result.rows.iter().zip(&again.rows) {
        if row != recomputed {
            found.push(format!(
                "row {}: says {} over {} run(s) but its scenarios give {} over {}",
                row.row, row.verdict, row.seeds_run, recomputed.verdict, recomputed.seeds_run
            ));
        }
    }
    let rows = |result: &MatrixResult| result.rows.iter().map(|row| row.row.clone()).collect::<Vec<_>>();
    if rows(result) != rows(&again) {
        found.push(format!(
            "the rows are {} but the scenarios cover {}",
            rows(result).join(", "),
            rows(&again).join(", ")
        ));
    }
    if result.verdict != again.verdict {
        found.push(format!(
            "the verdict says {} but the rows and scenarios give {}",
            result.verdict, again.verdict
        ));
    }
    found
}

fn scenario_contradictions(scenario: &ScenarioSummary, seeds: &[u64]) -> Vec<String> {
    let mut found = Vec::new();
    let run_seeds: Vec<u64> = scenario.runs.iter().map(|run| run.seed).collect();
    if run_seeds != seeds {
        found.push(format!(
            "its runs are of seeds {} but it should hold {}",
            seed_list(&run_seeds),
            seed_list(seeds)
        ));
    }
    let tally = Tally::of(&scenario.runs);
    let runs = scenario.runs.len();
    let mut differs = |what: &str, says: String, gives: String| {
        if says != gives {
            found.push(format!("{what} says {says} but its {runs} run(s) give {gives}"));
        }
    };
    differs("the verdict", scenario.verdict.to_string(), tally.verdict.to_string());
    differs("seeds_run", scenario.seeds_run.to_string(), tally.seeds_run.to_string());
    differs("counts", counts(&scenario.counts), counts(&tally.counts));
    differs("oracle_counts", counts(&scenario.oracle_counts), counts(&tally.oracle_counts));
    differs(
        "effects",
        format!("{}..{}", scenario.effects_min, scenario.effects_max),
        format!("{}..{}", tally.effects_min, tally.effects_max),
    );
    differs("statuses", counts(&scenario.statuses), counts(&tally.statuses));
    differs("time_ms", scenario.time_ms.to_string(), tally.time_ms.to_string());
    differs(
        "nondeterministic_seeds",
        seed_list(&scenario.nondeterministic_seeds),
        seed_list(&tally.nondeterministic_seeds),
    );
    let failing: Vec<&RunDigest> = scenario
        .runs
        .iter()
        .filter(|run| !matches!(run.verdict, Verdict::Pass | Verdict::NotApplicable))
        .collect();
    let failure_seeds: Vec<u64> = scenario.failures.iter().map(|failure| failure.seed).collect();
    let failing_seeds: Vec<u64> = failing.iter().map(|run| run.seed).collect();
    if failure_seeds != failing_seeds {
        found.push(format!(
            "failures lists seeds {} but its runs that did not pass are {}",
            seed_list(&failure_seeds),
            seed_list(&failing_seeds)
        ));
    }
    for (failure, run) in scenario.failures.iter().zip(&failing) {
        if failure.seed == run.seed && (failure.verdict != run.verdict || failure.oracles != run.oracles) {
            found.push(format!(
                "the failure of seed {} says {} ({}) but its run says {} ({})",
                failure.seed,
                failure.verdict,
                oracle_list(&failure.oracles),
                run.verdict,
                oracle_list(&run.oracles)
            ));
        }
    }
    found.extend(shown_contradictions(scenario));
    found
}

/// The run a scenario shows, against its run, its failure and its own timeline.
fn shown_contradictions(scenario: &ScenarioSummary) -> Vec<String> {
    let mut found = Vec::new();
    let shown = &scenario.shown;
    let should_show =
        scenario.failures.first().map(|failure| failure.seed).or(scenario.runs.first().map(|run| run.seed));
    if should_show.is_some_and(|seed| seed != shown.seed) {
        found.push(format!(
            "it shows seed {} but should show seed {} (its first run that did not pass, else its first)",
            shown.seed,
            should_show.unwrap_or_default()
        ));
    }
    if let Some(run) = scenario.runs.iter().find(|run| run.seed == shown.seed) {
        let says = (shown.verdict, &shown.history_digest, shown.effects, shown.oracles());
        let gives = (run.verdict, &run.history_digest, run.effects, run.oracles.clone());
        if says != gives {
            found.push(format!(
                "the run shown (seed {}) says {}, history {}, {} effect(s), {} but its run says {}, history {}, {} effect(s), {}",
                shown.seed,
                says.0,
                says.1,
                says.2,
                oracle_list(&says.3),
                gives.0,
                gives.1,
                gives.2,
                oracle_list(&gives.3)
            ));
        }
    }
    if let Some(failure) = scenario.failures.first() {
        if failure.seed == shown.seed && *failure != shown.failed_run() {
            found.push(format!(
                "the run shown (seed {}) differs from its failure in the failures list",
                shown.seed
            ));
        }
    }
    if scenario.timeline.seed != shown.seed {
        found.push(format!(
            "the timeline is of seed {} but the run shown is seed {}",
            scenario.timeline.seed, shown.seed
        ));
    }
    let violated = judge::operations::violated_positions(&shown.violations);
    let flagged = |seq: u64| violated.get(&seq).cloned().unwrap_or_default();
    let timeline =
        scenario.timeline.marks.iter().map(|mark| ("the timeline flags event", mark.seq, &mark.violated));
    let ledger = shown
        .operations
        .iter()
        .flat_map(|operation| &operation.ledger)
        .map(|entry| ("the ledger flags the effect at", entry.seq, &entry.violated));
    for (place, seq, violated) in timeline.chain(ledger) {
        if *violated != flagged(seq) {
            found.push(format!(
                "{place} #{seq} with {} but the run shown's violations name {} there",
                oracle_list(violated),
                oracle_list(&flagged(seq))
            ));
        }
    }
    found
}

/// `{fail: 1, pass: 9}`, or `{}`.
fn counts<K: std::fmt::Display>(map: &BTreeMap<K, u64>) -> String {
    let entries: Vec<String> = map.iter().map(|(key, n)| format!("{key}: {n}")).collect();
    format!("{{{}}}", entries.join(", "))
}

/// `O1, O8`, or `none`.
fn oracle_list(oracles: &[String]) -> String {
    if oracles.is_empty() {
        "none".to_owned()
    } else {
        oracles.join(", ")
    }
}

/// Seeds as ranges: `0-3, 7, 9-11` (`none` for no seed).
pub fn seed_list(seeds: &[u64]) -> String {
    if seeds.is_empty() {
        return "none".to_owned();
    }
    let mut parts: Vec<String> = Vec::new();
    let mut start = seeds[0];
    let mut end = seeds[0];
    let mut push = |start: u64, end: u64| {
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
    };
    for &seed in &seeds[1..] {
        if end.checked_add(1) == Some(seed) {
            end = seed;
        } else {
            push(start, end);
            start = seed;
            end = seed;
        }
    }
    push(start, end);
    parts.join(", ")
}
