//! Reports sized for CI: a matrix whose 31 scenarios each fail at 1,000 seeds (built here
//! from the fixture, not run) gives a `matrix.md` under its cap (GitHub shows at most 1 MiB of
//! a step summary) that puts failures first and still names the first failure, lists seeds as
//! ranges with their count, and says what it left out and where to find it; the HTML says
//! the same in a line per scenario, not a thousand numbers.

mod fixture;

use std::collections::BTreeMap;

use reports::{
    render_html, render_junit, render_markdown, render_markdown_capped, FailedRun, MatrixResult,
    RenderOptions, ScenarioSummary, Verdict, MARKDOWN_CAP_BYTES, STEP_SUMMARY_LIMIT_BYTES,
};

const SCENARIOS: usize = 31;
const SEEDS: u64 = 1_000;

/// The fixture's failing scenario copied to S01..S31, each failing at every one of 1,000
/// seeds with its own reproduce command.
fn failing_at_scale() -> MatrixResult {
    let mut result = fixture::matrix();
    let template: ScenarioSummary =
        result.scenarios.iter().find(|s| s.verdict == Verdict::Fail).cloned().expect("a failing scenario");
    let first = template.failures[0].clone();
    result.scenarios = (1..=SCENARIOS)
        .map(|n| {
            let id = format!("S{n:02}");
            let mut scenario = template.clone();
            scenario.id.clone_from(&id);
            scenario.name = format!("scenario_number_{n}");
            scenario.seeds_run = SEEDS;
            scenario.counts = BTreeMap::from([(Verdict::Fail, SEEDS)]);
            scenario.oracle_counts = BTreeMap::from([("O1".to_owned(), SEEDS)]);
            scenario.failures = (0..SEEDS)
                .map(|seed| FailedRun {
                    scenario: id.clone(),
                    scenario_name: scenario.name.clone(),
                    seed,
                    reproduce: format!("replaylab run {id} --seed {seed} --executor mutant:blind_retry"),
                    ..first.clone()
                })
                .collect();
            scenario.shown.scenario.clone_from(&id);
            scenario.shown.seed = 0;
            scenario.timeline.seed = 0;
            scenario
        })
        .collect();
    result.seeds = SEEDS;
    result
}

#[test]
fn markdown_at_a_thousand_failing_seeds_stays_under_its_cap_with_failures_first() {
    let result = failing_at_scale();
    let text = render_markdown(&result, &RenderOptions::new());
    assert!(text.len() <= MARKDOWN_CAP_BYTES, "{} bytes", text.len());
    let position = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("matrix.md lacks {needle:?}"));
    assert!(position("## Failures") < position("## Rows"), "failures come before the full tables");
    assert!(position("### S01 scenario_number_1: **FAIL**") < position("### S31 scenario_number_31"));
    assert!(text.contains("replaylab run S01 --seed 0 --executor mutant:blind_retry"), "the first failure");
    assert_eq!(
        text.matches("Every seed that did not pass: 0-999 (1000 seeds)").count(),
        SCENARIOS,
        "each scenario's failing seeds as one range with their count"
    );
    assert_eq!(
        text.matches("| and 995 more |").count(),
        SCENARIOS,
        "five seeds listed, the count of the rest"
    );
    assert!(!text.contains("--seed 5 "), "no seed past the fifth is listed");
}

#[test]
fn a_cut_falls_between_sections_and_says_how_many_failing_runs_it_left_out() {
    let result = failing_at_scale();
    let whole = render_markdown(&result, &RenderOptions::new());
    let cap = 20 * 1024;
    let text = render_markdown_capped(&result, &RenderOptions::new(), cap);
    assert!(text.len() <= cap, "{} bytes", text.len());
    assert!(text.contains("replaylab run S01 --seed 0 --executor mutant:blind_retry"), "the first failure");
    let kept = text.matches("\n### S").count();
    assert!((1..SCENARIOS).contains(&kept), "{kept} failing scenarios kept");
    let note = text.lines().last().expect("a last line");
    let left_out = (SCENARIOS - kept) as u64 * SEEDS;
    assert_eq!(
        note,
        format!(
            "**This summary stops here** to stay under 20 KiB: and {left_out} more failing runs ({} scenarios) \
             and the rows and scenarios tables: see report.html (or matrix.json).",
            SCENARIOS - kept
        )
    );
    // Cut between sections: what is kept is the whole report's beginning, to a section's end.
    let kept_text = &text[..text.len() - note.len() - 1];
    assert!(whole.starts_with(kept_text));
    assert!(whole[kept_text.len()..].starts_with("### S"), "the next section starts where the cut fell");
    // However small the cap, the headline stays.
    let tiny = render_markdown_capped(&result, &RenderOptions::new(), 10);
    assert!(tiny.starts_with("# replaylab matrix: **FAIL**"), "{tiny}");
    assert!(tiny.contains("and 31000 more failing runs (31 scenarios)"), "{tiny}");
}

#[test]
fn html_and_junit_list_a_thousand_failing_seeds_as_ranges() {
    let result = failing_at_scale();
    let html = render_html(&result, &RenderOptions::new());
    let header = "<summary><strong>Every seed that did not pass: 0-999 (1000 seeds)</strong></summary>";
    assert_eq!(html.matches(header).count(), SCENARIOS, "one short header per failing scenario");
    assert!(!html.contains("0, 1, 2, 3"), "no list of every seed");
    let junit = render_junit(&result, &RenderOptions::new());
    assert!(junit.contains("seeds that did not pass (1000 of 1000): 0-999 (1000 seeds)"));
}

/// The only test in this binary that touches `GITHUB_STEP_SUMMARY`: appended to a summary
/// that already holds 700 KiB, the matrix is cut so that the file stays under GitHub's 1 MiB,
/// and it still begins with the headline and the first failure.
#[test]
fn the_step_summary_stays_under_githubs_limit_with_what_it_already_holds() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("reports-size");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("summary.md");
    let before = "earlier step\n".repeat(700 * 1024 / 13);
    std::fs::write(&path, &before).unwrap();
    let mut result = failing_at_scale();
    // Long contracts, so that the whole matrix.md would not fit beside it.
    for scenario in &mut result.scenarios {
        scenario.expected = "x".repeat(12 * 1024);
    }
    assert!(render_markdown(&result, &RenderOptions::new()).len() > 400 * 1024);
    std::env::set_var(reports::STEP_SUMMARY_VARIABLE, &path);
    let appended = reports::append_matrix_step_summary(&result, &RenderOptions::new());
    let long_line = "y".repeat(200 * 1024) + "\n";
    let text_appended = reports::append_step_summary(&format!("a line\n{long_line}"));
    std::env::remove_var(reports::STEP_SUMMARY_VARIABLE);
    assert_eq!(appended.unwrap(), Some(path.clone()));
    assert_eq!(text_appended.unwrap(), Some(path.clone()));
    let summary = std::fs::read_to_string(&path).unwrap();
    assert!(summary.len() <= STEP_SUMMARY_LIMIT_BYTES, "{} bytes", summary.len());
    let matrix = &summary[before.len()..];
    assert!(matrix.starts_with("# replaylab matrix: **FAIL**"));
    assert!(matrix.contains("replaylab run S01 --seed 0 --executor mutant:blind_retry"));
    assert!(matrix.contains("**This summary stops here** to stay under "));
    assert!(
        summary.ends_with("a line\n\n**The rest is cut** to keep the step summary under GitHub's 1 MiB.\n"),
        "a text that does not fit is cut at a line that does"
    );
}
