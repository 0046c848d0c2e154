//! What every text report says about a row or a scenario, in one wording.

use std::collections::BTreeMap;

use crate::model::{MatrixResult, RowFailure, RunResult, ScenarioSummary, Verdict};

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
pub(crate) fn fingerprint_relation(fingerprints: &[(String, String)]) -> Option<String> {
    if fingerprints.len() < 2 {
        return None;
    }
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for (label, fingerprint) in fingerprints {
        match groups.iter_mut().find(|(seen, _)| *seen == fingerprint.as_str()) {
            Some((_, labels)) => labels.push(label),
            None => groups.push((fingerprint, vec![label])),
        }
    }
    let text: Vec<String> = groups.iter().map(|(_, labels)| labels.join(" = ")).collect();
    Some(text.join(" ≠ "))
}

/// The evidence a scenario keeps, one short item each: effects, answers, fingerprints and
/// the sample run's ledger references.
pub(crate) fn scenario_evidence(scenario: &ScenarioSummary) -> Vec<String> {
    if scenario.verdict == Verdict::NotApplicable {
        // Not run: the note says what the scenario needs that the executor does not declare.
        return scenario.sample.notes.iter().take(1).cloned().collect();
    }
    let mut items = vec![
        format!("effects per run: {}", effects_text(scenario)),
        format!("answers: {}", statuses_text(&scenario.statuses)),
    ];
    if let Some(relation) = fingerprint_relation(&scenario.sample.fingerprints) {
        items.push(format!("fingerprints: {relation}"));
    }
    if !scenario.sample.effect_references.is_empty() {
        items.push(format!(
            "ledger (seed {}): {}",
            scenario.sample.seed,
            scenario.sample.effect_references.join(", ")
        ));
    }
    if !scenario.nondeterministic_seeds.is_empty() {
        let seeds: Vec<String> = scenario.nondeterministic_seeds.iter().map(u64::to_string).collect();
        items.push(format!("nondeterministic seeds: {}", seeds.join(", ")));
    }
    items
}

/// The one line that says why a run or row did not pass: the first violation, else the first
/// note, else the verdict.
pub(crate) fn first_reason(failure: &RowFailure) -> String {
    failure
        .violations
        .first()
        .map(ToString::to_string)
        .or_else(|| failure.notes.first().cloned())
        .unwrap_or_else(|| format!("the run's verdict is {}", failure.verdict))
}

/// A failing run as a row failure (same fields), so rows and scenarios share one wording.
pub(crate) fn run_failure(scenario: &ScenarioSummary, run: &RunResult) -> RowFailure {
    RowFailure {
        scenario: format!("{}_{}", scenario.id, scenario.name),
        seed: run.seed,
        verdict: run.verdict,
        violations: run.violations.clone(),
        notes: run.notes.clone(),
        reproduce: run.reproduce.clone(),
    }
}

/// Shortens `text` to at most `limit` characters, ending with `…` when cut.
pub(crate) fn shorten(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(limit.saturating_sub(1)).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_grouped_by_equality_in_order() {
        let check = |pairs: &[(&str, &str)], expected: Option<&str>| {
            let owned: Vec<(String, String)> =
                pairs.iter().map(|(l, f)| (l.to_string(), f.to_string())).collect();
            assert_eq!(fingerprint_relation(&owned).as_deref(), expected, "{pairs:?}");
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
    fn shortening_counts_characters_not_bytes() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("ééééé", 3), "éé…");
    }
}
