//! What people read is plain text: no violation explanation, note or timeline label of any
//! run the matrix keeps (the reference's and every mutant's of the zoo) shows Rust's `Debug`
//! formatting: `Some(..)`, `None`, escaped quotes or characters, or an enum variant's Rust
//! name where its serialised name is snake_case.

use harness::executors;
use harness::matrix::{self, MatrixConfig};
use reports::MatrixResult;

/// Rust variant names whose serialised forms are snake_case: none of them may reach a report.
const RUST_NAMES: [&str; 7] = [
    // protocol::ReasonCode
    "InvalidRequest",
    "IdempotencyKeyReusedWithDifferentRequest",
    "ToolVersionChanged",
    "Unauthorized",
    "ApprovalRequired",
    "PreconditionFailed",
    "DownstreamRejected",
];

/// The artefacts of `{:?}` in `text`, if any.
fn artefacts(text: &str) -> Vec<String> {
    let mut found: Vec<String> = ["Some(", "None", "\\\"", "\\u{"]
        .into_iter()
        .filter(|artefact| text.contains(artefact))
        .map(str::to_owned)
        .collect();
    for word in text.split(|c: char| !c.is_ascii_alphanumeric()) {
        let camel = word
            .chars()
            .zip(word.chars().skip(1))
            .any(|(a, b)| a.is_ascii_lowercase() && b.is_ascii_uppercase());
        if RUST_NAMES.contains(&word) || camel {
            found.push(word.to_owned());
        }
    }
    found
}

/// Every explanation, note and timeline label `result` holds, with where it came from.
fn texts(result: &MatrixResult) -> Vec<(String, String)> {
    let mut texts = Vec::new();
    let executor = &result.executor;
    for scenario in &result.scenarios {
        let shown = scenario.shown.failed_run();
        for run in std::iter::once(&shown).chain(&scenario.failures) {
            let at = format!("{executor} {} seed {}", run.scenario, run.seed);
            texts.extend(run.violations.iter().map(|v| (format!("{at} violation"), v.explanation.clone())));
            texts.extend(run.notes.iter().map(|note| (format!("{at} note"), note.clone())));
        }
        let at = format!("{executor} {} seed {} timeline", scenario.id, scenario.timeline.seed);
        texts.extend(scenario.timeline.marks.iter().map(|mark| (at.clone(), mark.label.clone())));
    }
    for row in &result.rows {
        if let Some(failure) = &row.first_failure {
            let at = format!("{executor} row {} ({} seed {})", row.row, failure.scenario, failure.seed);
            texts.extend(
                failure.violations.iter().map(|v| (format!("{at} violation"), v.explanation.clone())),
            );
            texts.extend(failure.notes.iter().map(|note| (format!("{at} note"), note.clone())));
        }
    }
    texts
}

#[test]
fn reports_show_no_rust_debug_formatting_for_the_reference_or_any_mutant() {
    let jobs = std::thread::available_parallelism().map_or(1, usize::from);
    let names = std::iter::once("reference".to_owned())
        .chain(executor::mutants::all().into_iter().map(|mutant| format!("mutant:{}", mutant.name)));
    let mut offending = Vec::new();
    let mut seen = 0;
    for name in names {
        let spec = executors::find(&name).expect("registered");
        let config = MatrixConfig { executor: spec, seeds: 2, jobs, log: None, ..MatrixConfig::default() };
        let result = matrix::run(&config);
        for (at, text) in texts(&result) {
            seen += 1;
            let found = artefacts(&text);
            if !found.is_empty() {
                offending.push(format!("{at}: {found:?} in: {text}"));
            }
        }
    }
    offending.sort();
    offending.dedup();
    assert!(seen > 1000, "only {seen} texts collected");
    assert!(
        offending.is_empty(),
        "{} messages show Debug formatting:\n{}",
        offending.len(),
        offending.join("\n")
    );
}

#[test]
fn the_check_sees_debug_formatting() {
    assert!(!artefacts(r#"the retry named Some("charge_2")"#).is_empty());
    assert!(!artefacts("named None").is_empty());
    assert!(!artefacts("rejected for Unauthorized").is_empty());
    assert!(!artefacts("rejected for IdempotencyKeyReusedWithDifferentRequest").is_empty());
    assert!(!artefacts(r#""caf\u{e9}""#).is_empty());
    assert!(!artefacts(r#""a \"b\"""#).is_empty());
    assert!(artefacts(r#""retry" named charge_2, but "first" named no effect reference"#).is_empty());
    assert!(artefacts("rejected for unauthorized (X-Replaylab-Origin, SQLite, O13)").is_empty());
}

/// A call id with quotes, a backslash and a letter outside ASCII, as S01's first call.
const ODD_LABEL: &str = r#"première "un" \ a"#;

#[test]
fn labels_are_quoted_as_written_in_explanations_timelines_and_the_history() {
    let (_, text) = scenarios::builtin_texts().iter().find(|(name, _)| name.starts_with("S01")).expect("S01");
    let text = text.replace(r#""first""#, &format!("'{ODD_LABEL}'"));
    let scenario = scenarios::Scenario::from_toml(&text, "odd_label.toml").expect("a valid scenario");
    let quoted = format!("\"{ODD_LABEL}\"");
    let spec = executors::find("mutant:boolean_success").expect("registered");
    let record = harness::runner::run(&scenario, 0, &spec);
    let explanations: Vec<&str> = record.result.violations.iter().map(|v| v.explanation.as_str()).collect();
    assert!(
        explanations.iter().any(|text| text.contains(&format!("but {quoted} named ticket_1;"))),
        "{explanations:#?}"
    );
    let timeline =
        harness::timeline::draw(0, &scenario.worker_names(), &record.history, &record.result.violations);
    let lines: Vec<String> = record.history.iter().map(|event| event.to_line()).collect();
    assert!(lines.iter().any(|line| line.contains(&format!("call {quoted} tickets.create"))), "{lines:#?}");
    let texts = explanations
        .iter()
        .map(|text| text.to_string())
        .chain(record.result.notes.iter().cloned())
        .chain(timeline.marks.iter().map(|mark| mark.label.clone()))
        .chain(lines);
    for text in texts {
        assert!(artefacts(&text.replace(ODD_LABEL, "label")).is_empty(), "{text}");
        assert!(!text.contains(r#"\"un\""#), "{text}");
    }
}
