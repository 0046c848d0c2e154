//! `replaylab mutants`: the matrix against the reference and every mutant of the zoo. The
//! harness is only as good as the defects it catches: every mutant must be killed by a scenario
//! MATRIX.md expects to kill it (a failure elsewhere does not count: it would hide that the
//! expected scenario lost its edge), naming the oracle, while the reference passes every row.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::executors::{self, ExecutorSpec};
use crate::matrix::{self, MatrixConfig};
use crate::verdict::{FailedRun, MatrixResult, ScenarioSummary, Verdict};

/// The version of the `mutants.json` format; bump it on any incompatible change. 1: the first
/// with a schema (`harness/schema/mutants.schema.json`), every killer listed.
pub const MUTANTS_SCHEMA_VERSION: u32 = 2;

/// One expected scenario that killed a mutant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Killer {
    /// `S02_lost_response_after_commit`.
    pub scenario: String,
    /// The oracles (and `expect`, for scenario expectations) that fired on its failing run,
    /// in order, each once.
    pub oracles: Vec<String>,
    /// Its first failing seed.
    pub seed: u64,
    /// The first violation there, on one line.
    pub violation: String,
    /// One command that reproduces the kill.
    pub reproduce: String,
}

/// How one mutant fared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MutantRow {
    /// `M05`.
    pub id: String,
    /// `blind_retry` (run it as `mutant:blind_retry`).
    pub name: String,
    /// The defect, in one line.
    pub defect: String,
    /// The scenarios MATRIX.md says must catch it.
    pub expected_scenarios: Vec<String>,
    /// Killed: at least one of the expected scenarios failed it (`killers` is not empty).
    pub killed: bool,
    /// Every scenario that failed it, expected or not, in matrix order.
    pub failing_scenarios: Vec<String>,
    /// Every expected scenario that failed it, in matrix order.
    pub killers: Vec<Killer>,
}

/// The result of `replaylab mutants` (`mutants.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MutantsResult {
    /// The format's version ([`MUTANTS_SCHEMA_VERSION`]); the schema admits only its own.
    #[schemars(extend("const" = MUTANTS_SCHEMA_VERSION))]
    pub schema_version: u32,
    /// The replaylab version that ran it.
    pub harness_version: String,
    /// The commit replaylab was built from, when its build knew it.
    #[schemars(required)]
    pub harness_commit: Option<String>,
    /// The source commit, when known (`REPLAYLAB_COMMIT`, `GITHUB_SHA` or `git rev-parse`, as
    /// for `matrix.json`); `null` when not.
    #[schemars(required)]
    pub commit: Option<String>,
    /// Seeds per scenario.
    pub seeds: u64,
    /// The reference's verdict over every row and scenario.
    pub reference_verdict: Verdict,
    /// The mutants, M01..M37.
    pub mutants: Vec<MutantRow>,
    /// How many were killed.
    pub killed: usize,
    /// Pass only when the reference passes and every mutant is killed.
    pub verdict: Verdict,
}

/// Runs the zoo. `base` gives scenarios, seeds, threads and the commit; of its executor only
/// the program its reproduce commands name (`cli::program_name`: the binary as invoked), which
/// every mutant's reproduce command names too.
pub fn run(base: &MatrixConfig) -> MutantsResult {
    let program = base.executor.program.clone();
    let reference =
        matrix::run(&MatrixConfig { executor: reference_spec().program(program.clone()), ..base.clone() });
    let mut rows = Vec::new();
    for mutant in executor::mutants::all() {
        let spec = executors::find(&format!("mutant:{}", mutant.name))
            .expect("every mutant is registered")
            .program(program.clone());
        let result = matrix::run(&MatrixConfig { executor: spec, ..base.clone() });
        rows.push(row(&mutant, &result));
    }
    let killed = rows.iter().filter(|row| row.killed).count();
    let verdict = if reference.verdict == Verdict::Pass && killed == rows.len() {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    MutantsResult {
        schema_version: MUTANTS_SCHEMA_VERSION,
        harness_version: runner::version::VERSION.to_owned(),
        harness_commit: runner::version::commit().map(str::to_owned),
        commit: base.commit.clone(),
        seeds: base.seeds,
        reference_verdict: reference.verdict,
        mutants: rows,
        killed,
        verdict,
    }
}

/// `mutants.json`: the result as pretty JSON with a trailing newline.
pub fn render_json(result: &MutantsResult) -> String {
    let mut text = serde_json::to_string_pretty(result).expect("the zoo result serialises");
    text.push('\n');
    text
}

/// The JSON Schema of `mutants.json`, generated from the types, as pretty JSON with a
/// trailing newline (the bytes of `harness/schema/mutants.schema.json`).
pub fn mutants_schema() -> String {
    let schema = schemars::schema_for!(MutantsResult);
    let mut text = serde_json::to_string_pretty(&schema).expect("a JSON Schema serialises");
    text.push('\n');
    text
}

fn reference_spec() -> ExecutorSpec {
    executors::find("reference").expect("the reference executor is registered")
}

/// The first run of a scenario that failed (not one that was only unknown or crashed).
fn failing_run(scenario: &ScenarioSummary) -> Option<&FailedRun> {
    scenario.failures.iter().find(|failure| failure.verdict == Verdict::Fail)
}

fn row(mutant: &executor::mutants::Mutant, result: &MatrixResult) -> MutantRow {
    let expected: Vec<String> = mutant.caught_by.iter().map(|s| (*s).to_owned()).collect();
    let failing: Vec<&ScenarioSummary> =
        result.scenarios.iter().filter(|s| s.verdict == Verdict::Fail).collect();
    let killers: Vec<Killer> = failing
        .iter()
        .filter(|s| expected.contains(&s.id))
        .filter_map(|s| failing_run(s).map(|run| killer(s, run)))
        .collect();
    MutantRow {
        id: mutant.id.to_owned(),
        name: mutant.name.to_owned(),
        defect: mutant.defect.to_owned(),
        killed: !killers.is_empty(),
        failing_scenarios: failing.iter().map(|s| s.id.clone()).collect(),
        expected_scenarios: expected,
        killers,
    }
}

fn killer(scenario: &ScenarioSummary, run: &FailedRun) -> Killer {
    let mut oracles: Vec<String> = Vec::new();
    for violation in &run.violations {
        let name = if violation.oracle == "expect" {
            "expect".to_owned()
        } else {
            format!("{} {}", violation.oracle, violation.name)
        };
        if !oracles.contains(&name) {
            oracles.push(name);
        }
    }
    let violation = run
        .violations
        .first()
        .map(ToString::to_string)
        .or_else(|| run.notes.first().cloned())
        .unwrap_or_else(|| format!("the run's verdict is {}", run.verdict));
    Killer {
        scenario: format!("{}_{}", scenario.id, scenario.name),
        oracles,
        seed: run.seed,
        violation: violation.split_whitespace().collect::<Vec<_>>().join(" "),
        reproduce: run.reproduce.clone(),
    }
}

/// `mutants.md`: a table of every mutant with the expected scenarios that killed it, then, per
/// killed mutant, every killer with its oracles, first failing seed, first violation and
/// reproduce command.
pub fn render_markdown(result: &MutantsResult) -> String {
    let mut text = format!(
        "# replaylab mutant zoo: {}\n\n{} of {} mutants killed, {} seeds per scenario; the reference executor: {}.\n\n",
        if result.verdict == Verdict::Pass { "pass".to_owned() } else { format!("**{}**", result.verdict.label().to_uppercase()) },
        result.killed,
        result.mutants.len(),
        result.seeds,
        result.reference_verdict
    );
    text.push_str("| | |\n|---|---|\n");
    text.push_str(&format!(
        "| replaylab | {} (commit {}; mutants.json schema {}) |\n",
        cell(&result.harness_version),
        result.harness_commit.as_deref().map_or("unknown", |commit| &commit[..commit.len().min(12)]),
        result.schema_version
    ));
    match &result.commit {
        Some(commit) => text.push_str(&format!("| commit | `{}` |\n\n", commit.replace('`', "'"))),
        None => text.push_str("| commit | not recorded |\n\n"),
    }
    text.push_str("| mutant | defect | status | killed by (oracles, first failing seed) | expected |\n");
    text.push_str("|---|---|---|---|---|\n");
    for row in &result.mutants {
        let by = if row.killed {
            let killers: Vec<String> = row
                .killers
                .iter()
                .map(|killer| {
                    format!("{} ({}; seed {})", killer.scenario, killer.oracles.join(", "), killer.seed)
                })
                .collect();
            killers.join("<br>")
        } else if row.failing_scenarios.is_empty() {
            "— (no scenario failed it)".to_owned()
        } else {
            format!("— (only {} failed it)", row.failing_scenarios.join(", "))
        };
        text.push_str(&format!(
            "| {} {} | {} | {} | {} | {} |\n",
            row.id,
            row.name,
            cell(&row.defect),
            if row.killed { "killed" } else { "**survived**" },
            cell(&by),
            row.expected_scenarios.join(", ")
        ));
    }
    if result.mutants.iter().any(|row| row.killed) {
        text.push_str("\n## Kills\n");
    }
    for row in result.mutants.iter().filter(|row| row.killed) {
        text.push_str(&format!("\n### {} {}\n\n", row.id, row.name));
        for killer in &row.killers {
            text.push_str(&format!(
                "- {}, first failing seed {}: {}\n  - {}\n  - reproduce: `{}`\n",
                killer.scenario,
                killer.seed,
                killer.oracles.join(", "),
                killer.violation,
                killer.reproduce
            ));
        }
    }
    text.push_str(&format!("\nverdict: {}\n", result.verdict));
    text
}

/// Text for a table cell: pipes escaped, line breaks as spaces.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The table for the terminal.
pub fn render_terminal(result: &MutantsResult) -> String {
    let mut text = format!("reference executor: {}\n\n", result.reference_verdict);
    let width = result.mutants.iter().map(|row| row.id.len() + 1 + row.name.len()).max().unwrap_or(0).max(6);
    text.push_str(&format!("{:<width$} {:<9} {}\n", "mutant", "status", "caught by (oracles)"));
    for row in &result.mutants {
        let by = if row.killed {
            let killers: Vec<String> = row
                .killers
                .iter()
                .map(|killer| format!("{} ({})", killer.scenario, killer.oracles.join(", ")))
                .collect();
            killers.join("; ")
        } else if row.failing_scenarios.is_empty() {
            "-".to_owned()
        } else {
            format!("- (only unexpected scenarios failed it: {})", row.failing_scenarios.join(", "))
        };
        text.push_str(&format!(
            "{:<width$} {:<9} {by}\n",
            format!("{} {}", row.id, row.name),
            if row.killed { "killed" } else { "SURVIVED" },
        ));
    }
    for row in result.mutants.iter().filter(|row| row.killed) {
        text.push_str(&format!("\n{} {}\n", row.id, row.name));
        for killer in &row.killers {
            text.push_str(&format!(
                "  {} seed {}: {}\n    reproduce: {}\n",
                killer.scenario, killer.seed, killer.violation, killer.reproduce
            ));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `mutants.json`'s reproduce commands name the program the zoo was run with (a user's
    /// own binary, `cargo run ... --`), as every other reproduce command does, not a bare
    /// `replaylab`.
    #[test]
    fn reproduce_commands_name_the_program_as_invoked() {
        let program = "cargo run -p my-executor --bin my-replaylab --";
        let base = MatrixConfig {
            executor: reference_spec().program(program),
            scenarios: vec![scenarios::builtin_by_id("S02").expect("S02 is built in")],
            seeds: 1,
            jobs: 1,
            ..MatrixConfig::default()
        };
        let result = run(&base);
        let killers: Vec<&Killer> = result.mutants.iter().flat_map(|row| &row.killers).collect();
        assert!(killers.len() >= 3, "S02 kills several mutants: {:#?}", result.mutants);
        for killer in killers {
            assert!(
                killer.reproduce.starts_with(&format!("{program} run S02 --seed 0 ")),
                "{}",
                killer.reproduce
            );
        }
    }

    fn killer(scenario: &str, oracle: &str, seed: u64) -> Killer {
        Killer {
            scenario: scenario.to_owned(),
            oracles: vec![oracle.to_owned(), "expect".to_owned()],
            seed,
            violation: format!("{oracle} broke | badly"),
            reproduce: format!("replaylab run {} --seed {seed} --executor mutant:two", &scenario[..3]),
        }
    }

    fn result() -> MutantsResult {
        let two = MutantRow {
            id: "M01".into(),
            name: "two".into(),
            defect: "killed | twice".into(),
            expected_scenarios: vec!["S02".into(), "S12".into()],
            killed: true,
            failing_scenarios: vec!["S01".into(), "S02".into(), "S12".into()],
            killers: vec![
                killer("S02_lost", "O1 single_effect", 0),
                killer("S12_timeout", "O2 no_phantom_success", 3),
            ],
        };
        let survivor = MutantRow {
            id: "M02".into(),
            name: "survivor".into(),
            defect: "only elsewhere".into(),
            expected_scenarios: vec!["S05".into()],
            killed: false,
            failing_scenarios: vec!["S01".into()],
            killers: vec![],
        };
        MutantsResult {
            schema_version: MUTANTS_SCHEMA_VERSION,
            harness_version: "0.1.0".into(),
            harness_commit: Some("fedcba9876543210fedcba9876543210fedcba98".into()),
            commit: Some("0123abc".into()),
            seeds: 5,
            reference_verdict: Verdict::Pass,
            mutants: vec![two, survivor],
            killed: 1,
            verdict: Verdict::Fail,
        }
    }

    #[test]
    fn markdown_lists_every_killer_with_its_oracles_seed_and_command() {
        let text = render_markdown(&result());
        assert!(text.starts_with("# replaylab mutant zoo: **FAIL**\n"), "{text}");
        assert!(
            text.contains("| replaylab | 0.1.0 (commit fedcba987654; mutants.json schema 2) |"),
            "{text}"
        );
        assert!(text.contains("| commit | `0123abc` |"), "{text}");
        assert!(
            text.contains(
                "| M01 two | killed \\| twice | killed | S02_lost (O1 single_effect, expect; seed 0)<br>\
                 S12_timeout (O2 no_phantom_success, expect; seed 3) | S02, S12 |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| M02 survivor | only elsewhere | **survived** | — (only S01 failed it) | S05 |")
        );
        for (scenario, seed, oracle, command) in [
            ("S02_lost", 0, "O1 single_effect", "replaylab run S02 --seed 0 --executor mutant:two"),
            ("S12_timeout", 3, "O2 no_phantom_success", "replaylab run S12 --seed 3 --executor mutant:two"),
        ] {
            let item = format!(
                "- {scenario}, first failing seed {seed}: {oracle}, expect\n  - {oracle} broke | badly\n  - reproduce: `{command}`\n"
            );
            assert!(text.contains(&item), "{item}\nnot in\n{text}");
        }
        assert!(!text.contains("### M02"), "a survivor has no kills");
        assert!(text.ends_with("\nverdict: fail\n"));
    }

    #[test]
    fn the_terminal_names_every_killer() {
        let text = render_terminal(&result());
        assert!(
            text.contains("S02_lost (O1 single_effect, expect); S12_timeout (O2 no_phantom_success, expect)")
        );
        assert!(text.contains(
            "  S12_timeout seed 3: O2 no_phantom_success broke | badly\n    reproduce: replaylab run S12"
        ));
        assert!(text.contains("SURVIVED  - (only unexpected scenarios failed it: S01)"), "{text}");
    }

    #[test]
    fn mutants_json_round_trips_and_refuses_unknown_fields() {
        let json = render_json(&result());
        let back: MutantsResult = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, result());
        let extra = json.replacen("\"seeds\": 5,", "\"seeds\": 5, \"surprise\": 1,", 1);
        assert!(serde_json::from_str::<MutantsResult>(&extra).is_err());
    }
}
