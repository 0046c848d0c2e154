//! `matrix --require`: the rows a release gate demands, and why each one it did not get
//! failed the gate.

use crate::evidence::{covering, first_reason, not_applicable_reason};
use crate::model::{MatrixResult, Verdict};

/// The rows of the source document's two tables: `--require seed-rows`.
pub const SEED_ROWS: [&str; 19] = [
    "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "F1", "F2", "F3", "F4", "F5", "F6", "F7",
    "F8", "F9",
];

/// One line per required row that did not pass, in the order required, saying why (not run,
/// not applicable and why, no scenario covers it, or its verdict and first failure); empty when
/// every required row passed.
pub fn unmet_requirements(result: &MatrixResult, required: &[String]) -> Vec<String> {
    let mut unmet = Vec::new();
    for id in required {
        let Some(row) = result.rows.iter().find(|row| &row.row == id) else {
            unmet.push(format!("{id}: not run: no scenario of this run covers it"));
            continue;
        };
        let scenarios = covering(result, &row.scenarios);
        let why = match row.verdict {
            Verdict::Pass if !scenarios.is_empty() => continue,
            _ if scenarios.is_empty() => "no scenario covers it".to_owned(),
            Verdict::NotApplicable => {
                let reasons: Vec<String> = scenarios
                    .iter()
                    .map(|scenario| format!("{}: {}", scenario.id, not_applicable_reason(scenario)))
                    .collect();
                format!("not applicable to executor {}: {}", result.executor, reasons.join("; "))
            }
            verdict => match &row.first_failure {
                Some(run) => format!(
                    "{verdict} ({} seed {}: {}; reproduce: {})",
                    run.scenario,
                    run.seed,
                    first_reason(run),
                    run.reproduce
                ),
                None => format!("{verdict}"),
            },
        };
        unmet.push(format!("{id}: {why}"));
    }
    unmet
}
