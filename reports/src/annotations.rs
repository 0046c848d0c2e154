//! GitHub Actions annotations: one `::error file=...,line=...,title=...::message` workflow
//! command per failing scenario, printed to stdout when `GITHUB_ACTIONS=true`, so that a
//! failure shows on the run's summary page (and on the scenario file's line in a pull
//! request's diff, for a user's scenario file).
//!
//! A built-in scenario names no file or line: its file is in replaylab's own tree, not in the
//! user's repository (see `junit.rs`). The message carries the failure and the command that
//! reproduces it. Escaping follows GitHub's runner (`ActionCommand`): in the message `%`,
//! `\r` and `\n` become `%25`, `%0D` and `%0A`; in a property value `:` and `,` also become
//! `%3A` and `%2C`.

use crate::evidence::{first_reason, scenario_title};
use crate::junit::{failing_run, scenario_location};
use crate::model::{MatrixResult, Verdict, Violation};

/// The variable GitHub Actions sets to `true` on its runners.
pub const GITHUB_ACTIONS_VARIABLE: &str = "GITHUB_ACTIONS";

/// Whether annotations should be printed: `GITHUB_ACTIONS` is `true`.
pub fn github_actions() -> bool {
    std::env::var(GITHUB_ACTIONS_VARIABLE).is_ok_and(|value| value == "true")
}

/// One `::error` workflow command: at `location` (a file as the user gave it and a 1-based
/// line; none for a file not in the user's repository), with a title and a message (which may
/// span lines), escaped as GitHub's runner reads them.
pub fn error_annotation(location: Option<(&str, Option<u64>)>, title: &str, message: &str) -> String {
    let mut properties = Vec::new();
    if let Some((file, line)) = location {
        properties.push(format!("file={}", escape_property(file)));
        if let Some(line) = line {
            properties.push(format!("line={line}"));
        }
    }
    properties.push(format!("title={}", escape_property(title)));
    format!("::error {}::{}", properties.join(","), escape_data(message))
}

/// The line a failure points at in its scenario file: the failing `expect`'s line when the
/// first violation (the one a report's message shows) is an expectation, else `id_line` (an
/// oracle's failure, or a run with no violation, is the scenario's as a whole).
pub fn annotation_line(violations: &[Violation], id_line: u64) -> u64 {
    violations
        .first()
        .filter(|violation| violation.oracle == "expect")
        .and_then(|violation| violation.line)
        .unwrap_or(id_line)
}

/// One annotation per scenario that did not pass (fail, crashed, unknown), in scenario order;
/// each names the rows, the verdict, the first reason and the reproduce command.
pub fn matrix_annotations(result: &MatrixResult) -> Vec<String> {
    result
        .scenarios
        .iter()
        .filter(|scenario| !matches!(scenario.verdict, Verdict::Pass | Verdict::NotApplicable))
        .map(|scenario| {
            let title = format!(
                "replaylab: {} {} ({})",
                scenario_title(scenario),
                scenario.verdict,
                scenario.rows.join(", ")
            );
            let mut message = format!("{} {}", scenario.id, scenario.verdict);
            if let Some(run) = failing_run(scenario) {
                message = format!(
                    "{} seed {} {}: {}\nreproduce: {}",
                    scenario.id,
                    run.seed,
                    run.verdict,
                    first_reason(run),
                    run.reproduce
                );
                if scenario.failures.len() > 1 {
                    message.push_str(&format!(
                        "\n{} of {} runs did not pass",
                        scenario.failures.len(),
                        scenario.seeds_run
                    ));
                }
            }
            let location = scenario_location(scenario);
            error_annotation(
                location.as_ref().map(|(file, line)| (file.as_str(), Some(*line))),
                &title,
                &message,
            )
        })
        .collect()
}

/// A message as GitHub reads a command's data: `%`, `\r`, `\n` escaped.
fn escape_data(text: &str) -> String {
    text.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// A property value as GitHub reads it: as data, and `:` and `,` escaped too.
fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_and_properties_are_escaped_as_github_reads_them() {
        assert_eq!(escape_data("100% a\r\nb: c, d"), "100%25 a%0D%0Ab: c, d");
        assert_eq!(escape_property("a:b,c%\n"), "a%3Ab%2Cc%25%0A");
        assert_eq!(
            error_annotation(Some(("dir,x/s:1.toml", Some(12))), "T: 1, 2", "line one\nline two"),
            "::error file=dir%2Cx/s%3A1.toml,line=12,title=T%3A 1%2C 2::line one%0Aline two"
        );
        assert_eq!(error_annotation(None, "t", "m"), "::error title=t::m");
        assert_eq!(error_annotation(Some(("f", None)), "t", "m"), "::error file=f,title=t::m");
    }
}
