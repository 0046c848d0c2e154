//! `replaylab mutants`: the matrix against the reference and every mutant of the zoo. The
//! harness is only as good as the defects it catches: every mutant must be killed by a scenario
//! MATRIX.md expects to kill it (a failure elsewhere does not count: it would hide that the
//! expected scenario lost its edge), naming the oracle, while the reference passes every row.

use serde::{Deserialize, Serialize};

use crate::executors::{self, ExecutorSpec};
use crate::matrix::{self, MatrixConfig};
use crate::verdict::{MatrixResult, Verdict};

/// How one mutant fared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MutantRow {
    /// `M05`.
    pub id: String,
    /// `blind_retry` (run it as `mutant:blind_retry`).
    pub name: String,
    /// The defect, in one line.
    pub defect: String,
    /// The scenarios MATRIX.md says must catch it.
    pub expected_scenarios: Vec<String>,
    /// Killed: one of the expected scenarios failed it.
    pub killed: bool,
    /// Every scenario that failed it, expected or not.
    pub failing_scenarios: Vec<String>,
    /// The expected scenario that killed it (the first, in matrix order).
    pub scenario: Option<String>,
    /// The oracles (and expectations) that fired there, in order.
    pub oracles: Vec<String>,
    /// The first failing seed there.
    pub seed: Option<u64>,
    /// The first violation there, in one line.
    pub violation: Option<String>,
    /// One command that reproduces the kill.
    pub reproduce: Option<String>,
}

/// The result of `replaylab mutants`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MutantsResult {
    /// Seeds per scenario.
    pub seeds: u64,
    /// The reference's verdict over every row and scenario.
    pub reference_verdict: Verdict,
    /// The mutants, M01..M34.
    pub mutants: Vec<MutantRow>,
    /// How many were killed.
    pub killed: usize,
    /// Pass only when the reference passes and every mutant is killed.
    pub verdict: Verdict,
}

/// Runs the zoo. `base` gives scenarios, seeds and threads; its executor is ignored.
pub fn run(base: &MatrixConfig) -> MutantsResult {
    let reference = matrix::run(&MatrixConfig { executor: reference_spec(), ..base.clone() });
    let mut rows = Vec::new();
    for mutant in executor::mutants::all() {
        let spec = executors::find(&format!("mutant:{}", mutant.name)).expect("every mutant is registered");
        let result = matrix::run(&MatrixConfig { executor: spec, ..base.clone() });
        rows.push(row(&mutant, &result));
    }
    let killed = rows.iter().filter(|row| row.killed).count();
    let verdict = if reference.verdict == Verdict::Pass && killed == rows.len() {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    MutantsResult { seeds: base.seeds, reference_verdict: reference.verdict, mutants: rows, killed, verdict }
}

fn reference_spec() -> ExecutorSpec {
    executors::find("reference").expect("the reference executor is registered")
}

fn row(mutant: &executor::mutants::Mutant, result: &MatrixResult) -> MutantRow {
    let expected: Vec<String> = mutant.caught_by.iter().map(|s| (*s).to_owned()).collect();
    let failing: Vec<&reports::ScenarioSummary> =
        result.scenarios.iter().filter(|s| s.verdict == Verdict::Fail).collect();
    let chosen = failing.iter().find(|s| expected.contains(&s.id)).copied();
    let failure = chosen.and_then(|s| s.failures.first());
    let mut oracles: Vec<String> = Vec::new();
    for violation in failure.map(|f| f.violations.as_slice()).unwrap_or_default() {
        let name = if violation.oracle == "expect" {
            "expect".to_owned()
        } else {
            format!("{} {}", violation.oracle, violation.name)
        };
        if !oracles.contains(&name) {
            oracles.push(name);
        }
    }
    MutantRow {
        id: mutant.id.to_owned(),
        name: mutant.name.to_owned(),
        defect: mutant.defect.to_owned(),
        killed: chosen.is_some(),
        failing_scenarios: failing.iter().map(|s| s.id.clone()).collect(),
        expected_scenarios: expected,
        scenario: chosen.map(|s| format!("{}_{}", s.id, s.name)),
        oracles,
        seed: failure.map(|f| f.seed),
        violation: failure.and_then(|f| f.violations.first()).map(ToString::to_string),
        reproduce: failure.map(|f| f.reproduce.clone()),
    }
}

/// The table as Markdown.
pub fn render_markdown(result: &MutantsResult) -> String {
    let mut text = format!(
        "# replaylab mutant zoo\n\n{} of {} mutants killed, {} seeds per scenario; the reference executor: {}.\n\n",
        result.killed,
        result.mutants.len(),
        result.seeds,
        result.reference_verdict
    );
    text.push_str("| mutant | defect | killed | by (expected) | oracles | seed | reproduce |\n");
    text.push_str("|---|---|---|---|---|---|---|\n");
    for row in &result.mutants {
        let by = match &row.scenario {
            Some(scenario) => format!("{scenario} (expected: {})", row.expected_scenarios.join(", ")),
            None if row.failing_scenarios.is_empty() => {
                format!("— (expected: {})", row.expected_scenarios.join(", "))
            }
            None => format!(
                "— (expected: {}; only {} failed it)",
                row.expected_scenarios.join(", "),
                row.failing_scenarios.join(", ")
            ),
        };
        text.push_str(&format!(
            "| {} {} | {} | {} | {} | {} | {} | {} |\n",
            row.id,
            row.name,
            row.defect.replace('|', "\\|"),
            if row.killed { "killed" } else { "**survived**" },
            by,
            row.oracles.join(", "),
            row.seed.map(|s| s.to_string()).unwrap_or_default(),
            row.reproduce.as_ref().map(|r| format!("`{r}`")).unwrap_or_default()
        ));
    }
    text.push_str(&format!("\nverdict: {}\n", result.verdict));
    text
}

/// The table for the terminal.
pub fn render_terminal(result: &MutantsResult) -> String {
    let mut text = format!("reference executor: {}\n\n", result.reference_verdict);
    let width = result.mutants.iter().map(|row| row.id.len() + 1 + row.name.len()).max().unwrap_or(0).max(6);
    text.push_str(&format!("{:<width$} {:<9} {:<38} {}\n", "mutant", "status", "caught by", "oracles"));
    for row in &result.mutants {
        let by = row.scenario.clone().unwrap_or_else(|| "-".into());
        let mark = if !row.killed && !row.failing_scenarios.is_empty() {
            format!(" (only unexpected scenarios failed it: {})", row.failing_scenarios.join(", "))
        } else {
            String::new()
        };
        text.push_str(&format!(
            "{:<width$} {:<9} {:<38} {}{mark}\n",
            format!("{} {}", row.id, row.name),
            if row.killed { "killed" } else { "SURVIVED" },
            by,
            row.oracles.join(", ")
        ));
    }
    for row in result.mutants.iter().filter(|row| row.killed) {
        if let (Some(violation), Some(reproduce)) = (&row.violation, &row.reproduce) {
            text.push_str(&format!("\n{} {}: {violation}\n  reproduce: {reproduce}\n", row.id, row.name));
        }
    }
    text.push_str(&format!(
        "\n{} of {} mutants killed; verdict: {}\n",
        result.killed,
        result.mutants.len(),
        result.verdict
    ));
    text
}
