//! What every text report says about a row or a scenario, in one wording.

use std::collections::BTreeMap;

use crate::model::{
    Answer, FailedRun, LedgerEntry, MatrixResult, OperationRecord, RunResult, ScenarioSummary, Verdict,
};

/// What a black-box matrix's reports say of its world, one sentence each; empty for the
/// simulated world.
pub fn black_box_text(result: &MatrixResult) -> Vec<String> {
    let Some(black_box) = &result.black_box else { return Vec::new() };
    let time = &black_box.time;
    let seconds = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    let share = |ms: u64| (ms * 100).checked_div(time.wall_ms).unwrap_or(0);
    let all: Vec<String> = (1..=13).map(|n| format!("O{n}")).collect();
    let missing: Vec<&String> = all.iter().filter(|o| !black_box.oracles_judged.contains(o)).collect();
    let hints =
        crate::hints::hint_lines(&black_box.hints).into_iter().map(|line| format!("MCP hints: {line}."));
    let mut lines = vec![
        format!(
            "Black-box world: {}, {} worker process(es) per run over {}{}; capabilities from {}.",
            quoted_command(&black_box.command),
            black_box.workers,
            black_box.transport,
            if black_box.server.is_empty() { String::new() } else { format!(", server {}", black_box.server) },
            black_box.capabilities_from
        ),
        "Not deterministic: real processes on real time, killed with SIGKILL; a scenario's runs are repeats, not seeds, and the same repeat can end differently.".to_owned(),
        format!(
            "Real time: {} over all runs ({} in parallel took {}): {} ({}%) starting processes, {} ({}%) waiting as the scenarios ask (leases, settling, jobs), {} ({}%) driving calls, faults and crashes.",
            seconds(time.wall_ms),
            result.scenarios.iter().map(|s| s.seeds_run).sum::<u64>(),
            seconds(black_box.matrix_wall_ms),
            seconds(time.starting_ms),
            share(time.starting_ms),
            seconds(time.waiting_ms),
            share(time.waiting_ms),
            seconds(time.working_ms()),
            share(time.working_ms()),
        ),
        if missing.is_empty() {
            "Every oracle had something to judge.".to_owned()
        } else {
            format!(
                "Oracles that judged: {}; that had nothing to judge here: {}.",
                black_box.oracles_judged.join(", "),
                missing.iter().map(|o| o.as_str()).collect::<Vec<_>>().join(", ")
            )
        },
    ];
    for rule in &black_box.rules_not_judged {
        lines.push(format!("Not judged here: {rule}."));
    }
    if black_box.out_of_time > 0 {
        let fewer = if black_box.jobs > 1 {
            format!(
                "Run fewer side by side (--jobs {}; {} ran now).",
                (black_box.jobs / 2).max(1),
                black_box.jobs
            )
        } else {
            "They ran one at a time already: run them on a quieter machine.".to_owned()
        };
        lines.push(format!(
            "Real time ran out in {} run(s): a time premise did not hold (a retry past retention, an answer past the lease, a downstream answer past the worker's timeout), so they are unknown, not judged on what the lost time explains; the machine was too slow for what the scenarios need. {fewer}",
            black_box.out_of_time
        ));
    }
    lines.extend(hints);
    lines
}

/// A command in a sentence: in quotes.
fn quoted_command(command: &str) -> String {
    format!("\u{201c}{command}\u{201d}")
}

/// A few words naming what a row is about (our wording): a row of the source document's
/// tables, or a scenario of its prose, which is a row of its own (named by the scenario).
pub(crate) fn row_topic(result: &MatrixResult, row: &str) -> String {
    let topic = table_row_topic(row);
    if !topic.is_empty() {
        return topic.to_owned();
    }
    result.scenarios.iter().find(|s| s.id == row).map(|s| s.name.replace('_', " ")).unwrap_or_default()
}

/// What a row of the source document's two tables is about; empty for any other row.
fn table_row_topic(row: &str) -> &'static str {
    match row {
        "C1" => "repeat of a call that succeeded",
        "C2" => "reply lost after the commit",
        "C3" => "crash between effect and local record",
        "C4" => "two workers, one key, same moment",
        "C5" => "one key, changed material arguments",
        "C6" => "fresh key, identical arguments",
        "C7" => "permission withdrawn between attempts",
        "C8" => "key returns after retention",
        "C9" => "downstream hands back a job",
        "C10" => "malformed, truncated or missing result",
        "F1" => "exact duplicate delivery",
        "F2" => "reply dropped after the commit",
        "F3" => "crash right after the pending claim",
        "F4" => "concurrent claim race",
        "F5" => "key reused for a different request",
        "F6" => "deliberate repeat under a new key",
        "F7" => "revocation before the retry",
        "F8" => "late arrival past retention",
        "F9" => "slow job, retried meanwhile",
        _ => "",
    }
}

/// The seeds of a matrix: `0`, `0-1`, or `none`.
pub(crate) fn seeds_text(result: &MatrixResult) -> String {
    match result.seeds {
        0 => "none".to_owned(),
        1 => result.first_seed.to_string(),
        count => format!("{}-{}", result.first_seed, result.first_seed.saturating_add(count - 1)),
    }
}

/// The scenarios not run because the executor does not support what they need.
pub(crate) fn not_applicable(result: &MatrixResult) -> Vec<&ScenarioSummary> {
    result.scenarios.iter().filter(|s| s.verdict == Verdict::NotApplicable).collect()
}

/// `; 23 rows and 19 scenarios are not applicable to it (not run)` when some are, else empty.
pub(crate) fn not_applicable_text(result: &MatrixResult) -> String {
    let rows = result.rows.iter().filter(|row| row.verdict == Verdict::NotApplicable).count();
    let scenarios = not_applicable(result).len();
    if rows + scenarios == 0 {
        return String::new();
    }
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let verb = if rows + scenarios == 1 { "is" } else { "are" };
    format!(
        "; {} and {} {verb} not applicable to it (not run)",
        count(rows, "row"),
        count(scenarios, "scenario")
    )
}

/// How many rows applied to the executor, always said (a gate must see how little was
/// checked): `12 of 31 rows applied; 19 not applicable`.
pub fn rows_applied_text(result: &MatrixResult) -> String {
    let not_applicable = result.rows.iter().filter(|row| row.verdict == Verdict::NotApplicable).count();
    format!(
        "{} of {} rows applied; {not_applicable} not applicable",
        result.rows.len() - not_applicable,
        result.rows.len()
    )
}

/// How many rows and scenarios passed: `(rows passed, rows, scenarios passed, scenarios)`.
pub(crate) fn pass_counts(result: &MatrixResult) -> (usize, usize, usize, usize) {
    let rows_passed = result.rows.iter().filter(|row| row.verdict == Verdict::Pass).count();
    let scenarios_passed = result.scenarios.iter().filter(|s| s.verdict == Verdict::Pass).count();
    (rows_passed, result.rows.len(), scenarios_passed, result.scenarios.len())
}

/// The scenario summaries behind a row, in the row's order.
pub(crate) fn covering<'a>(result: &'a MatrixResult, ids: &[String]) -> Vec<&'a ScenarioSummary> {
    ids.iter().filter_map(|id| result.scenarios.iter().find(|s| &s.id == id)).collect()
}

/// `S02 lost_response_after_commit`.
pub(crate) fn scenario_title(scenario: &ScenarioSummary) -> String {
    format!("{} {}", scenario.id, scenario.name)
}

/// Runs per verdict, worst first: `1 fail, 1 pass`.
pub(crate) fn counts_text(counts: &BTreeMap<Verdict, u64>) -> String {
    let parts: Vec<String> = counts
        .iter()
        .rev()
        .filter(|(_, count)| **count > 0)
        .map(|(verdict, count)| format!("{count} {verdict}"))
        .collect();
    if parts.is_empty() {
        "no runs".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Effects per run: `1`, or `1 to 2` when seeds differ.
pub(crate) fn effects_text(scenario: &ScenarioSummary) -> String {
    if scenario.effects_min == scenario.effects_max {
        scenario.effects_min.to_string()
    } else {
        format!("{} to {}", scenario.effects_min, scenario.effects_max)
    }
}

/// Every status answered over all seeds: `replayed x6, unknown x2`.
pub(crate) fn statuses_text(statuses: &BTreeMap<String, u64>) -> String {
    if statuses.is_empty() {
        return "none".to_owned();
    }
    let parts: Vec<String> = statuses.iter().map(|(status, count)| format!("{status} x{count}")).collect();
    parts.join(", ")
}

/// How the calls' fingerprints compare, when there are at least two: labels with equal
/// fingerprints joined by `=`, groups that differ by `≠` (`first = retry ≠ changed`).
pub(crate) fn fingerprint_relation(run: &RunResult) -> Option<String> {
    let fingerprints: Vec<(&str, &str)> = run
        .answers()
        .into_iter()
        .filter_map(|answer| Some((answer.label.as_str(), answer.fingerprint.as_deref()?)))
        .collect();
    group_relation(&fingerprints)
}

/// Labels with equal values joined by `=`, groups that differ by `≠`, for two or more pairs.
fn group_relation(fingerprints: &[(&str, &str)]) -> Option<String> {
    if fingerprints.len() < 2 {
        return None;
    }
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for &(label, fingerprint) in fingerprints {
        match groups.iter_mut().find(|(seen, _)| *seen == fingerprint) {
            Some((_, labels)) => labels.push(label),
            None => groups.push((fingerprint, vec![label])),
        }
    }
    let text: Vec<String> = groups.iter().map(|(_, labels)| labels.join(" = ")).collect();
    Some(text.join(" ≠ "))
}

/// Why a scenario was not run (what it needs that the executor does not declare).
pub(crate) fn not_applicable_reason(scenario: &ScenarioSummary) -> &str {
    scenario.shown.notes.first().map(String::as_str).unwrap_or("not applicable")
}

/// The evidence a scenario keeps, one short item each: effects, answers, fingerprints and
/// the shown run's ledger references.
/// `unit` is what a run is called (`seed`, `repeat`: [`run_unit`]).
pub(crate) fn scenario_evidence(scenario: &ScenarioSummary, unit: &str) -> Vec<String> {
    if scenario.verdict == Verdict::NotApplicable {
        return vec![not_applicable_reason(scenario).to_owned()];
    }
    let mut items = vec![
        format!("effects per run: {}", effects_text(scenario)),
        format!("answers: {}", statuses_text(&scenario.statuses)),
    ];
    if let Some(relation) = fingerprint_relation(&scenario.shown) {
        items.push(format!("fingerprints: {relation}"));
    }
    if !scenario.shown.effect_references.is_empty() {
        items.push(format!(
            "ledger ({unit} {}): {}",
            scenario.shown.seed,
            scenario.shown.effect_references.join(", ")
        ));
    }
    if !scenario.nondeterministic_seeds.is_empty() {
        items
            .push(format!("nondeterministic seeds: {}", seed_list(&scenario.nondeterministic_seeds, "seed")));
    }
    items
}

/// The one line that says why a run or row did not pass: the first violation, else the first
/// note, else the verdict.
pub(crate) fn first_reason(failure: &FailedRun) -> String {
    failure
        .violations
        .first()
        .map(ToString::to_string)
        .or_else(|| failure.notes.first().cloned())
        .unwrap_or_else(|| format!("the run's verdict is {}", failure.verdict))
}

/// How often each oracle fired over a scenario's runs, most first: `O1 in 12 runs, O8 in 2`.
pub(crate) fn oracle_counts_text(counts: &BTreeMap<String, u64>) -> String {
    let mut counts: Vec<(&String, &u64)> = counts.iter().collect();
    counts.sort_by(|a, b| b.1.cmp(a.1).then_with(|| oracle_order(a.0).cmp(&oracle_order(b.0))));
    let parts: Vec<String> = counts
        .iter()
        .map(|(oracle, count)| format!("{oracle} in {count} run{}", if **count == 1 { "" } else { "s" }))
        .collect();
    parts.join(", ")
}

/// `O2` before `O10`; `expect` last.
fn oracle_order(oracle: &str) -> (u64, String) {
    let number = oracle.strip_prefix('O').and_then(|n| n.parse().ok()).unwrap_or(u64::MAX);
    (number, oracle.to_owned())
}

/// What one answer said, in a few words: `applied charge_1 (result sha256:ab12…)`, or
/// `no answer (timeout)`.
pub(crate) fn answer_text(answer: &Answer) -> String {
    let mut text = match (&answer.status, &answer.no_answer) {
        (Some(status), _) => status.clone(),
        (None, Some(reason)) => format!("no answer ({reason})"),
        (None, None) => "not answered".to_owned(),
    };
    if let Some(reference) = &answer.reference {
        text.push(' ');
        text.push_str(reference);
    }
    if let Some(digest) = &answer.result_digest {
        text.push_str(&format!(" (result {digest})"));
    }
    text
}

/// One ledger effect in a few words, with the request that made it when the harness saw one
/// leave: `charge_created charge_2 (#19), sent for race-2`.
pub(crate) fn ledger_text(entry: &LedgerEntry) -> String {
    let mut text = format!("{} {} (#{})", entry.kind, entry.reference, entry.seq);
    if let Some(sent_for) = &entry.sent_for {
        text.push_str(&format!(", sent for {sent_for}"));
    }
    text
}

/// The operation's name for people: its path, or `no known operation`.
pub(crate) fn operation_name(record: &OperationRecord) -> &str {
    record.operation.as_deref().unwrap_or("no known operation")
}

/// How many runs of consecutive numbers [`seed_list`] spells out before it says how many
/// more there are: a list stays one line at 1,000 failing seeds, whatever their pattern.
const SEED_RANGES_SHOWN: usize = 6;

/// The replaylab that made a report: `0.1.0 (commit 89abcdef0123)`, the commit its build was
/// made from (`replaylab --version` prints the same), or `(commit unknown)`.
pub fn replaylab_text(result: &MatrixResult) -> String {
    let commit = result.harness_commit.as_deref().map_or("unknown", |commit| &commit[..commit.len().min(12)]);
    format!("{} (commit {commit})", result.harness_version)
}

/// Seeds (or a black-box matrix's repeats) for people, however many: runs of consecutive
/// numbers as ranges, the first few of them only, and the count. `unit` is `seed` or `repeat`.
///
/// `none`, `4`, `0-3, 7, 9-998 (995 seeds)`, `0, 2, 4, 6, 8, 10 and 494 more (500 seeds)`.
/// Every report (Markdown, HTML, JUnit, the terminal) lists seeds with it.
pub fn seed_list(seeds: &[u64], unit: &str) -> String {
    let mut sorted = seeds.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for seed in sorted.iter().copied() {
        match ranges.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(seed) => *last = seed,
            _ => ranges.push((seed, seed)),
        }
    }
    let shown: Vec<String> = ranges
        .iter()
        .take(SEED_RANGES_SHOWN)
        .map(|&(first, last)| if first == last { first.to_string() } else { format!("{first}-{last}") })
        .collect();
    let listed: u64 = ranges.iter().take(SEED_RANGES_SHOWN).map(|&(first, last)| last - first + 1).sum();
    let count = sorted.len() as u64;
    match count {
        0 => "none".to_owned(),
        1 => shown.join(", "),
        _ if listed < count => {
            format!("{} and {} more ({count} {unit}s)", shown.join(", "), count - listed)
        }
        _ => format!("{} ({count} {unit}s)", shown.join(", ")),
    }
}

/// The failing runs' seeds, as [`seed_list`] shortens them.
pub(crate) fn failing_seeds_text(failures: &[FailedRun], unit: &str) -> String {
    let seeds: Vec<u64> = failures.iter().map(|failure| failure.seed).collect();
    seed_list(&seeds, unit)
}

/// What a run of the matrix is called: `seed` in the simulation, `repeat` in the black-box
/// world (real processes are not seeded; the number counts repeats).
pub(crate) fn run_unit(result: &MatrixResult) -> &'static str {
    if result.black_box.is_some() {
        "repeat"
    } else {
        "seed"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_lists_are_ranges_the_first_few_and_the_count() {
        let check =
            |seeds: &[u64], expected: &str| assert_eq!(seed_list(seeds, "seed"), expected, "{seeds:?}");
        check(&[], "none");
        check(&[4], "4");
        check(&[3, 5, 7], "3, 5, 7 (3 seeds)");
        check(&[0, 1, 2, 3, 7], "0-3, 7 (5 seeds)");
        let mut many: Vec<u64> = (0..=3).chain([7]).chain(9..=998).collect();
        check(&many, "0-3, 7, 9-998 (995 seeds)");
        many.reverse();
        check(&many, "0-3, 7, 9-998 (995 seeds)");
        let even: Vec<u64> = (0..1000).step_by(2).collect();
        check(&even, "0, 2, 4, 6, 8, 10 and 494 more (500 seeds)");
        check(&[u64::MAX - 1, u64::MAX, 1, 1], "1, 18446744073709551614-18446744073709551615 (3 seeds)");
        assert_eq!(seed_list(&[0, 1], "repeat"), "0-1 (2 repeats)");
        let long: Vec<u64> = (0..100_000).step_by(3).collect();
        assert!(seed_list(&long, "seed").len() < 80, "one short line at any count");
    }

    #[test]
    fn fingerprints_are_grouped_by_equality_in_order() {
        let check = |pairs: &[(&str, &str)], expected: Option<&str>| {
            assert_eq!(group_relation(pairs).as_deref(), expected, "{pairs:?}");
        };
        check(&[], None);
        check(&[("first", "a")], None);
        check(&[("first", "a"), ("retry", "a")], Some("first = retry"));
        check(&[("first", "a"), ("changed", "b"), ("retry", "a")], Some("first = retry ≠ changed"));
    }

    #[test]
    fn counts_read_worst_first() {
        let counts = BTreeMap::from([(Verdict::Pass, 3), (Verdict::Fail, 1), (Verdict::Unknown, 0)]);
        assert_eq!(counts_text(&counts), "1 fail, 3 pass");
        assert_eq!(counts_text(&BTreeMap::new()), "no runs");
    }

    #[test]
    fn every_row_has_a_topic() {
        for row in (1..=10).map(|n| format!("C{n}")).chain((1..=9).map(|n| format!("F{n}"))) {
            assert!(!table_row_topic(&row).is_empty(), "{row}");
        }
        assert_eq!(table_row_topic("prose"), "");
    }

    #[test]
    fn oracle_counts_read_most_first_then_by_number() {
        let counts = BTreeMap::from([
            ("O10".to_owned(), 2),
            ("O2".to_owned(), 2),
            ("O1".to_owned(), 5),
            ("expect".to_owned(), 2),
        ]);
        assert_eq!(
            oracle_counts_text(&counts),
            "O1 in 5 runs, O2 in 2 runs, O10 in 2 runs, expect in 2 runs"
        );
        assert_eq!(oracle_counts_text(&BTreeMap::from([("O8".to_owned(), 1)])), "O8 in 1 run");
    }
}
