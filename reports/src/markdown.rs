//! `matrix.md`: the matrix as Markdown tables (GitHub flavour), for a pull request, a
//! release page or `$GITHUB_STEP_SUMMARY`: failures first, seeds listed as ranges, and never
//! more than [`MARKDOWN_CAP_BYTES`] (GitHub shows at most 1 MiB of a step summary).

use std::fmt::Write as _;

use crate::evidence::{
    answer_text, counts_text, covering, effects_text, failing_seeds_text, first_reason, ledger_text,
    not_applicable_reason, operation_name, oracle_counts_text, pass_counts, row_topic, run_unit,
    scenario_evidence, scenario_title, seed_list, seeds_text, statuses_text,
};
use crate::format::RenderOptions;
use crate::json::matrix_sha256;
use crate::model::{FailedRun, MatrixResult, RunResult, ScenarioSummary, Verdict};

/// The most `matrix.md` holds, in bytes: GitHub shows at most 1 MiB of a step's summary
/// (`$GITHUB_STEP_SUMMARY`) and refuses the whole summary past it, so the file stays well
/// under, with room left for what a job's other steps write there.
pub const MARKDOWN_CAP_BYTES: usize = 900 * 1024;

/// How many failing seeds a scenario's table in `matrix.md` lists before it says how many
/// more there are (`matrix.json` lists every one, `report.html` more).
const FAILING_SEEDS_LISTED: usize = 5;

/// Room kept below the cap for the line that says where the cut fell.
const CUT_NOTE_BYTES: usize = 512;

/// `matrix.md`: a summary, every failure in detail with the command that reproduces it, then
/// the rows C1..C10 then F1..F9 with their evidence, then the scenarios; at most
/// [`MARKDOWN_CAP_BYTES`] (see [`render_markdown_capped`]).
pub fn render_markdown(result: &MatrixResult, options: &RenderOptions) -> String {
    render_markdown_capped(result, options, MARKDOWN_CAP_BYTES)
}

/// `matrix.md` in at most `cap_bytes` (the summary's first lines always, even past a cap too
/// small for them). It is cut only between sections (the summary, each failing scenario, the
/// rows, the scenarios), and then says how many failing runs and which tables it left out,
/// and where they are (`report.html`, `matrix.json`).
pub fn render_markdown_capped(result: &MatrixResult, options: &RenderOptions, cap_bytes: usize) -> String {
    let sections = sections(result, options);
    let mut out = String::new();
    let mut left_out: Vec<&Section> = Vec::new();
    for (index, section) in sections.iter().enumerate() {
        let fits = out.len() + section.text.len() + CUT_NOTE_BYTES <= cap_bytes;
        if index == 0 || (left_out.is_empty() && fits) {
            out.push_str(&section.text);
        } else {
            left_out.push(section);
        }
    }
    if !left_out.is_empty() {
        out.push_str(&cut_note(&left_out, cap_bytes));
    }
    out
}

/// One part of `matrix.md` that is kept or left out whole.
struct Section {
    text: String,
    /// The failing runs it details (a failing scenario's section).
    failing_runs: usize,
    /// A table it holds (`the rows table`), named when it is left out.
    table: Option<&'static str>,
}

/// `**This summary stops here** to stay under 900 KiB: and 12000 more failing runs (12
/// scenarios) and the rows and scenarios tables: see report.html (or matrix.json).`
fn cut_note(left_out: &[&Section], cap_bytes: usize) -> String {
    let runs: usize = left_out.iter().map(|section| section.failing_runs).sum();
    let scenarios = left_out.iter().filter(|section| section.failing_runs > 0).count();
    let mut parts: Vec<String> = Vec::new();
    if runs > 0 {
        parts.push(format!(
            "{runs} more failing run{} ({scenarios} scenario{})",
            if runs == 1 { "" } else { "s" },
            if scenarios == 1 { "" } else { "s" }
        ));
    }
    let tables: Vec<&str> = left_out.iter().filter_map(|section| section.table).collect();
    if !tables.is_empty() {
        parts.push(format!("the {} table{}", tables.join(" and "), if tables.len() == 1 { "" } else { "s" }));
    }
    format!(
        "**This summary stops here** to stay under {} KiB: and {}: see report.html (or matrix.json).\n",
        cap_bytes / 1024,
        parts.join(" and ")
    )
}

fn sections(result: &MatrixResult, options: &RenderOptions) -> Vec<Section> {
    let mut sections = Vec::new();
    let mut section = |text: String, failing_runs: usize, table: Option<&'static str>| {
        sections.push(Section { text, failing_runs, table });
    };
    let mut text = String::new();
    // Writing into a String cannot fail: the `fmt::Result`s below are always `Ok`.
    let _ = write_summary(&mut text, result, options);
    section(text, 0, None);
    let failing: Vec<&ScenarioSummary> = result
        .scenarios
        .iter()
        .filter(|s| !matches!(s.verdict, Verdict::Pass | Verdict::NotApplicable))
        .collect();
    let mut text = String::new();
    let _ = write_failures_intro(&mut text, result, failing.is_empty());
    section(text, 0, None);
    for scenario in failing {
        let mut text = String::new();
        let _ = write_failure(&mut text, result, scenario);
        section(text, scenario.failures.len(), None);
    }
    let mut text = String::new();
    let _ = write_rows(&mut text, result);
    section(text, 0, Some("rows"));
    let mut text = String::new();
    let _ = write_scenarios(&mut text, result);
    section(text, 0, Some("scenarios"));
    sections
}

/// The headline and the facts: what ran, where, and the canonical record's digest.
fn write_summary(out: &mut String, result: &MatrixResult, options: &RenderOptions) -> std::fmt::Result {
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
        text(&crate::replaylab_text(result)),
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
    writeln!(out, "| re-derive | `replaylab verify DIR`: every count from the runs matrix.json records, and a sample of them run again |")?;
    if let Some(generated) = options.generated_at_text() {
        writeln!(out, "| generated | {generated} |")?;
    }
    writeln!(out)
}

/// The failures' heading, the rows no scenario covers and the scenarios not applicable.
fn write_failures_intro(out: &mut String, result: &MatrixResult, none_failed: bool) -> std::fmt::Result {
    writeln!(out, "## Failures")?;
    writeln!(out)?;
    let uncovered: Vec<&str> =
        result.rows.iter().filter(|row| row.scenarios.is_empty()).map(|row| row.row.as_str()).collect();
    if none_failed && uncovered.is_empty() {
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
    Ok(())
}

/// One scenario that did not pass: its contract, its first failing run in detail, the command
/// that reproduces it, and its failing seeds (the first few in a table, all as ranges).
fn write_failure(out: &mut String, result: &MatrixResult, scenario: &ScenarioSummary) -> std::fmt::Result {
    let unit = run_unit(result);
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
        writeln!(out, "- first failing {unit}: {} ({})", failure.seed, failure.verdict)?;
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
        writeln!(
            out,
            "Every {unit} that did not pass: {}",
            text(&failing_seeds_text(&scenario.failures, unit))
        )?;
        writeln!(out)?;
        writeln!(out, "| {unit} | verdict | oracles | reproduce |")?;
        writeln!(out, "|---|---|---|---|")?;
        for failure in scenario.failures.iter().take(FAILING_SEEDS_LISTED) {
            writeln!(
                out,
                "| {} | {} | {} | `{}` |",
                failure.seed,
                verdict_cell(failure.verdict),
                if failure.oracles.is_empty() { "-".to_owned() } else { failure.oracles.join(", ") },
                code(&failure.reproduce)
            )?;
        }
        let more = scenario.failures.len().saturating_sub(FAILING_SEEDS_LISTED);
        if more > 0 {
            writeln!(out, "| and {more} more | | | see report.html (matrix.json lists every one) |")?;
        }
        writeln!(out)?;
    }
    if !scenario.nondeterministic_seeds.is_empty() {
        writeln!(
            out,
            "- seeds whose two runs differed: {}",
            seed_list(&scenario.nondeterministic_seeds, "seed")
        )?;
    }
    writeln!(out)
}

/// The rows table: C1..C10, F1..F9, then the prose's scenarios, with their evidence.
fn write_rows(out: &mut String, result: &MatrixResult) -> std::fmt::Result {
    let unit = run_unit(result);
    writeln!(out, "## Rows")?;
    writeln!(out)?;
    writeln!(
        out,
        "The release checklist (C1..C10), the fault and race matrix (F1..F9), then one row per scenario \
         from the document's prose."
    )?;
    writeln!(out)?;
    writeln!(out, "| row | about | verdict | decided by | {unit}s run | evidence |")?;
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
            evidence.push(format!("{prefix}{}", text(&scenario_evidence(scenario, unit).join("; "))));
        }
        if let Some(failure) = &row.first_failure {
            evidence.push(failure_cell(failure, unit));
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
    writeln!(out)
}

/// The scenarios table: one line each.
fn write_scenarios(out: &mut String, result: &MatrixResult) -> std::fmt::Result {
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
    writeln!(out)
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
fn failure_cell(failure: &FailedRun, unit: &str) -> String {
    format!(
        "**first failure** {} {unit} {}: `{}`<br>reproduce: `{}`",
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
