//! `matrix.md`: the matrix as Markdown tables (GitHub flavour), for a pull request, a
//! release page or `$GITHUB_STEP_SUMMARY`.

use std::fmt::Write as _;

use crate::evidence::{
    answer_text, counts_text, covering, effects_text, first_reason, ledger_text, not_applicable_reason,
    operation_name, oracle_counts_text, pass_counts, row_topic, scenario_evidence, scenario_title,
    seeds_text, statuses_text,
};
use crate::format::RenderOptions;
use crate::json::matrix_sha256;
use crate::model::{FailedRun, MatrixResult, RunResult, Verdict};

/// `matrix.md`: a summary, the rows C1..C10 then F1..F9 with their evidence, the
/// scenarios, then every failure in detail with the command that reproduces it.
pub fn render_markdown(result: &MatrixResult, options: &RenderOptions) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail: the `fmt::Result`s below are always `Ok`.
    let _ = write_markdown(&mut out, result, options);
    out
}

fn write_markdown(out: &mut String, result: &MatrixResult, options: &RenderOptions) -> std::fmt::Result {
    let (rows_passed, rows, scenarios_passed, scenarios) = pass_counts(result);
    writeln!(out, "# replaylab matrix: {}", verdict_cell(result.verdict))?;
    writeln!(out)?;
    writeln!(
        out,
        "{rows_passed} of {rows} rows and {scenarios_passed} of {scenarios} scenarios pass \
         for executor `{}`{}.",
        code(&result.executor),
        crate::evidence::not_applicable_text(result)
    )?;
    writeln!(out)?;
    writeln!(out, "**{}.**", crate::evidence::rows_applied_text(result))?;
    writeln!(out)?;
    writeln!(out, "| | |")?;
    writeln!(out, "|---|---|")?;
    writeln!(out, "| executor | `{}` {} |", code(&result.executor), text(&result.executor_version))?;
    writeln!(
        out,
        "| replaylab | {} (matrix.json schema {}) |",
        text(&result.harness_version),
        result.schema_version
    )?;
    match &result.commit {
        Some(commit) => writeln!(out, "| commit | `{}` |", code(commit))?,
        None => writeln!(out, "| commit | not recorded |")?,
    }
    if result.black_box.is_some() {
        writeln!(
            out,
            "| repeats | {} per scenario ({}); not deterministic (real processes on real time) |",
            result.seeds,
            seeds_text(result)
        )?;
    } else {
        writeln!(
            out,
            "| seeds | {} per scenario ({}); determinism {} |",
            result.seeds,
            seeds_text(result),
            if result.determinism_checked { "checked (each seed run twice)" } else { "not checked" }
        )?;
    }
    let p = &result.parameters;
    writeln!(
        out,
        "| world | tick {} ms, latency {}-{} ms, agent timeout {} ms, run limit {} ms |",
        p.tick_ms, p.min_latency_ms, p.max_latency_ms, p.agent_timeout_ms, p.run_limit_ms
    )?;
    for line in crate::evidence::black_box_text(result) {
        writeln!(out, "| black box | {} |", text(&line))?;
    }
    writeln!(out, "| matrix.json SHA-256 | `{}` |", matrix_sha256(result))?;
    if let Some(generated) = options.generated_at_text() {
        writeln!(out, "| generated | {generated} |")?;
    }
    writeln!(out)?;

    writeln!(out, "## Rows")?;
    writeln!(out)?;
    writeln!(
        out,
        "The release checklist (C1..C10), the fault and race matrix (F1..F9), then one row per scenario \
         from the document's prose."
    )?;
    writeln!(out)?;
    writeln!(out, "| row | about | verdict | decided by | seeds run | evidence |")?;
    writeln!(out, "|---|---|---|---|---|---|")?;
    for row in &result.rows {
        let scenarios = covering(result, &row.scenarios);
        let decided_by = if row.scenarios.is_empty() {
            "no scenario covers it".to_owned()
        } else {
            row.scenarios.join(", ")
        };
        let mut evidence: Vec<String> = Vec::new();
        for scenario in &scenarios {
            let prefix = if scenarios.len() > 1 { format!("{}: ", scenario.id) } else { String::new() };
            evidence.push(format!("{prefix}{}", text(&scenario_evidence(scenario).join("; "))));
        }
        if let Some(failure) = &row.first_failure {
            evidence.push(failure_cell(failure));
        }
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            text(&row.row),
            row_topic(result, &row.row),
            verdict_cell(row.verdict),
            text(&decided_by),
            row.seeds_run,
            if evidence.is_empty() { "none".to_owned() } else { evidence.join("<br>") }
        )?;
    }
    writeln!(out)?;

    writeln!(out, "## Scenarios")?;
    writeln!(out)?;
    writeln!(out, "| scenario | rows | verdict | runs | effects per run | answers | fingerprints |")?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    for scenario in &result.scenarios {
        let fingerprints =
            crate::evidence::fingerprint_relation(&scenario.shown).unwrap_or_else(|| "-".to_owned());
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            text(&scenario_title(scenario)),
            text(&scenario.rows.join(", ")),
            verdict_cell(scenario.verdict),
            counts_text(&scenario.counts),
            effects_text(scenario),
            text(&statuses_text(&scenario.statuses)),
            text(&fingerprints)
        )?;
    }
    writeln!(out)?;

    writeln!(out, "## Failures")?;
    writeln!(out)?;
    let failing: Vec<_> = result
        .scenarios
        .iter()
        .filter(|s| !matches!(s.verdict, Verdict::Pass | Verdict::NotApplicable))
        .collect();
    let uncovered: Vec<&str> =
        result.rows.iter().filter(|row| row.scenarios.is_empty()).map(|row| row.row.as_str()).collect();
    if failing.is_empty() && uncovered.is_empty() {
        if crate::evidence::not_applicable(result).is_empty() {
            writeln!(out, "None: every row and every scenario passed.")?;
        } else {
            writeln!(out, "None: every scenario that applied passed.")?;
        }
        writeln!(out)?;
    }
    if !uncovered.is_empty() {
        writeln!(out, "No scenario covers {}, so their verdict is unknown.", uncovered.join(", "))?;
        writeln!(out)?;
    }
    let skipped = crate::evidence::not_applicable(result);
    if !skipped.is_empty() {
        writeln!(out, "Not applicable to `{}` (not run, not passed):", code(&result.executor))?;
        writeln!(out)?;
        for scenario in skipped {
            writeln!(
                out,
                "- {}: {}",
                text(&scenario_title(scenario)),
                text(not_applicable_reason(scenario))
            )?;
        }
        writeln!(out)?;
    }
    for scenario in failing {
        writeln!(out, "### {}: {}", text(&scenario_title(scenario)), verdict_cell(scenario.verdict))?;
        writeln!(out)?;
        writeln!(out, "- rows: {}", text(&scenario.rows.join(", ")))?;
        writeln!(out, "- setup: {}", text(&scenario.summary))?;
        writeln!(out, "- expected: {}", text(&scenario.expected))?;
        writeln!(out, "- runs: {}", counts_text(&scenario.counts))?;
        if !scenario.oracle_counts.is_empty() {
            writeln!(out, "- oracles: {}", text(&oracle_counts_text(&scenario.oracle_counts)))?;
        }
        if let Some(failure) = scenario.failures.first() {
            let run = &scenario.shown;
            writeln!(out, "- first failing seed: {} ({})", failure.seed, failure.verdict)?;
            writeln!(out)?;
            write_operations(out, run)?;
            for violation in &failure.violations {
                writeln!(out, "- violation: `{}`", code(&violation.to_string()))?;
            }
            for note in &failure.notes {
                writeln!(out, "- note: {}", text(note))?;
            }
            writeln!(out, "- history: `{}`", code(&run.history_digest))?;
            writeln!(out)?;
            writeln!(out, "Reproduce:")?;
            writeln!(out)?;
            writeln!(out, "```sh")?;
            writeln!(out, "{}", failure.reproduce)?;
            writeln!(out, "```")?;
            writeln!(out)?;
            writeln!(out, "Every seed that did not pass ({}):", scenario.failures.len())?;
            writeln!(out)?;
            writeln!(out, "| seed | verdict | oracles | reproduce |")?;
            writeln!(out, "|---|---|---|---|")?;
            for failure in &scenario.failures {
                writeln!(
                    out,
                    "| {} | {} | {} | `{}` |",
                    failure.seed,
                    verdict_cell(failure.verdict),
                    if failure.oracles.is_empty() { "-".to_owned() } else { failure.oracles.join(", ") },
                    code(&failure.reproduce)
                )?;
            }
            writeln!(out)?;
        }
        if !scenario.nondeterministic_seeds.is_empty() {
            let seeds: Vec<String> = scenario.nondeterministic_seeds.iter().map(u64::to_string).collect();
            writeln!(out, "- seeds whose two runs differed: {}", seeds.join(", "))?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// What each operation of the run was answered, beside what the ledger holds for it; entries
/// an oracle names are marked with it (**⚠ O1**).
fn write_operations(out: &mut String, run: &RunResult) -> std::fmt::Result {
    writeln!(out, "| operation | answered (executor's words) | ledger (ground truth) |")?;
    writeln!(out, "|---|---|---|")?;
    for record in &run.operations {
        let answers: Vec<String> = record
            .answers
            .iter()
            .map(|answer| {
                format!("{}: {}{}", text(&answer.label), text(&answer_text(answer)), flag(&answer.violated))
            })
            .collect();
        let ledger: Vec<String> = record
            .ledger
            .iter()
            .map(|entry| format!("{}{}", text(&ledger_text(entry)), flag(&entry.violated)))
            .collect();
        writeln!(
            out,
            "| {} | {} | {} |",
            text(operation_name(record)),
            if answers.is_empty() { "-".to_owned() } else { answers.join("<br>") },
            if ledger.is_empty() { "no effect".to_owned() } else { ledger.join("<br>") }
        )?;
    }
    writeln!(out)
}

/// ` **⚠ O1, O8**` after an entry the oracles name, else nothing.
fn flag(oracles: &[String]) -> String {
    if oracles.is_empty() {
        String::new()
    } else {
        format!(" **⚠ {}**", oracles.join(", "))
    }
}

/// A row's failure in one table cell: the first reason and the reproduce command.
fn failure_cell(failure: &FailedRun) -> String {
    format!(
        "**first failure** {} seed {}: `{}`<br>reproduce: `{}`",
        text(&failure.scenario),
        failure.seed,
        code(&first_reason(failure)),
        code(&failure.reproduce)
    )
}

/// A verdict, loud when it is not a pass; `not applicable` (nothing was run) in italics.
fn verdict_cell(verdict: crate::model::Verdict) -> String {
    match verdict {
        Verdict::Pass => "pass".to_owned(),
        Verdict::NotApplicable => "_not applicable_".to_owned(),
        other => format!("**{}**", other.label().to_uppercase()),
    }
}

/// Plain text for a table cell: no line breaks, no cell separators, no HTML.
fn text(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for character in value.chars() {
        match character {
            '|' => escaped.push_str("\\|"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '&' => escaped.push_str("&amp;"),
            '\n' | '\r' => escaped.push(' '),
            other => escaped.push(other),
        }
    }
    escaped
}

/// Text for a code span inside a table cell: no backticks, no cell separators, one line.
fn code(value: &str) -> String {
    value.replace('`', "'").replace('|', "\\|").replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_cannot_break_the_table() {
        assert_eq!(text("a|b\n<c> & d"), "a\\|b &lt;c&gt; &amp; d");
        assert_eq!(code("x `y` | z\n"), "x 'y' \\| z ");
    }
}
