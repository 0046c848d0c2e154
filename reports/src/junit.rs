//! `junit.xml`: the matrix for CI test dashboards and annotations.
//!
//! # One failure per defect
//!
//! A scenario is what runs, so a scenario is what fails: the suite `scenarios` has one test
//! case per scenario, and only that test case carries the scenario's failure. A row of the
//! source document's tables (C1..C10, F1..F9) or of its prose (S13 onwards) is a roll-up of
//! the scenarios that cover it; repeating a scenario's failure under each of its rows would
//! show one defect as three. So the rows are shown, not counted:
//!
//! - each scenario test case names the rows it covers (`S02 lost_response_after_commit (C2,
//!   F2)`);
//! - the suite `rows` lists every row with its verdict and scenarios, as suite properties
//!   (`row.C2` = `fail (S02)`) and in its `system-out`;
//! - a row gets a test case of its own only when no scenario test case decides its verdict:
//!   a row no scenario covers (an error: a gate must not go green on a row nothing checked),
//!   or a row whose verdict (fail, crashed, unknown) none of its scenarios shows. A row that
//!   passes, or whose scenarios are all not applicable (skipped), adds no test case.
//!
//! A scenario that passed is a success; one that failed a failure (`type="fail"`); crashed and
//! unknown are errors (a gate must not read them as green); not applicable is skipped, with
//! the reason. A failure's `message` is the first violation on one line; its text is every
//! violation, every note and the command that reproduces the run.
//!
//! # Where to look, when
//!
//! Each scenario test case of a user's scenario file has `file` (the path as it was given on
//! the command line) and `line`, which CI annotation tools read (GitHub annotation actions,
//! GitLab's test report; pytest's `xunit1` flavour writes the same two): the line of the
//! failing `expect` step when the failure shown is an expectation, else the line of the
//! scenario's `id` (an oracle's failure is the scenario's as a whole). A built-in scenario
//! ([`ScenarioSummary::builtin`]) has neither: its file is in replaylab's own tree, not in the
//! user's repository, so an annotation would point at a file that is not there; its
//! `system-out` names it as built in.
//!
//! Every `time` is in seconds: a test case's is the time its scenario's runs spanned
//! ([`ScenarioSummary::time_ms`]), a suite's the sum of its test cases'. For black-box runs
//! that is real (wall) time; for simulated runs it is *simulated* time, so that the same seeds
//! give the same bytes (the host's time would differ from run to run); the suite property
//! `time` says which. A suite has a `timestamp` only when `SOURCE_DATE_EPOCH` is set
//! ([`RenderOptions`]), in UTC and without a zone (`2023-11-14T22:13:20`), as the Ant format
//! asks.
//!
//! # Schema
//!
//! The document follows the Jenkins xUnit plugin's `junit-10.xsd`, the schema pytest's own
//! JUnit output is checked against (it ships in pytest's source distribution;
//! `.ci/junit-xsd` fetches it and validates with `xmllint`), with one extension: `file` and
//! `line` on `testcase`, which that schema does not declare. Strip those two attributes and the
//! document is valid against it as shipped; `reports/tests/junit_xsd.rs` checks exactly that.
//! (The Apache Ant `JUnit.xsd` is stricter still: it requires a `timestamp` and a `hostname`
//! on every suite, which a deterministic report without `SOURCE_DATE_EPOCH` cannot give.)

use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;

use crate::evidence::{
    counts_text, covering, failing_seeds_text, first_reason, not_applicable_reason, oracle_counts_text,
    row_topic, run_unit, scenario_evidence, scenario_title, seeds_text,
};
use crate::format::RenderOptions;
use crate::json::matrix_sha256;
use crate::model::{FailedRun, MatrixResult, RowSummary, ScenarioSummary, Verdict};

/// The `time` of a test case that stands for no runs (a row's own test case).
const NO_TIME_MS: u64 = 0;

/// Milliseconds as JUnit's seconds with three decimals (`4.200`).
fn seconds(time_ms: u64) -> String {
    format!("{}.{:03}", time_ms / 1000, time_ms % 1000)
}

/// Where a scenario's test case points a CI annotation: none for a built-in (its file is not
/// in the user's repository); else its file as given, at the failing `expect`'s line when the
/// failure shown is an expectation, else at its `id` line.
pub(crate) fn scenario_location(scenario: &ScenarioSummary) -> Option<(String, u64)> {
    if scenario.builtin {
        return None;
    }
    let violations = failing_run(scenario).map_or(&[][..], |run| run.violations.as_slice());
    let line = crate::annotations::annotation_line(violations, scenario.line);
    Some((scenario.source.clone(), line))
}

/// `junit.xml`: the suites `rows` (test cases only for rows no scenario decides) and
/// `scenarios` (one test case per scenario), as the module docs describe.
pub fn render_junit(result: &MatrixResult, options: &RenderOptions) -> String {
    let timestamp = options.generated_at_utc().map(|time| time.format("%Y-%m-%dT%H:%M:%S").to_string());
    let properties = matrix_properties(result);

    let mut rows = Suite::new("rows", timestamp.clone());
    rows.properties = properties.clone();
    let mut listing = String::new();
    for row in &result.rows {
        let decided = row_decided_by(result, row);
        rows.properties.push((format!("row.{}", row.row), decided.clone()));
        let topic = row_topic(result, &row.row);
        listing.push_str(&format!("{}{}: {decided}\n", row.row, topic_suffix(&topic)));
        if let Some(status) = row_status(result, row) {
            let name = if topic.is_empty() { row.row.clone() } else { format!("{}: {topic}", row.row) };
            rows.cases.push(Case {
                name,
                classname: "replaylab.rows",
                location: None,
                time_ms: NO_TIME_MS,
                status,
                system_out: None,
            });
        }
    }
    rows.system_out = Some(listing);

    let mut scenarios = Suite::new("scenarios", timestamp);
    scenarios.properties = properties;
    for scenario in &result.scenarios {
        scenarios.cases.push(Case {
            name: format!("{} ({})", scenario_title(scenario), scenario.rows.join(", ")),
            classname: "replaylab.scenarios",
            location: scenario_location(scenario),
            time_ms: scenario.time_ms,
            status: scenario_status(scenario, run_unit(result)),
            system_out: Some(scenario_out(result, scenario)),
        });
    }

    let mut xml = Xml::new();
    let suites = [rows, scenarios];
    let count = |kind: fn(&Status) -> bool| -> usize {
        suites.iter().map(|suite| suite.cases.iter().filter(|case| kind(&case.status)).count()).sum()
    };
    let report_name = format!("replaylab matrix ({})", result.executor);
    xml.start(
        "testsuites",
        &[
            ("name", report_name.as_str()),
            ("tests", &suites.iter().map(|suite| suite.cases.len()).sum::<usize>().to_string()),
            ("failures", &count(Status::is_failure).to_string()),
            ("errors", &count(Status::is_error).to_string()),
            ("time", &seconds(suites.iter().map(Suite::time_ms).sum())),
        ],
    );
    for suite in &suites {
        suite.write(&mut xml);
    }
    xml.end("testsuites");
    xml.finish()
}

/// The properties every suite carries: what ran, where, and the canonical record's digest.
fn matrix_properties(result: &MatrixResult) -> Vec<(String, String)> {
    let commit = result.commit.clone().unwrap_or_else(|| "not recorded".to_owned());
    [
        ("executor", result.executor.clone()),
        ("executor_version", result.executor_version.clone()),
        ("harness_version", result.harness_version.clone()),
        ("harness_commit", result.harness_commit.clone().unwrap_or_else(|| "not recorded".to_owned())),
        ("commit", commit),
        ("seeds", seeds_text(result)),
        ("determinism_checked", result.determinism_checked.to_string()),
        ("matrix_json_sha256", matrix_sha256(result)),
        ("verdict", result.verdict.as_str().to_owned()),
        ("time", time_basis(result).to_owned()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    // A black-box matrix: real processes, not deterministic, and where the time went.
    .chain(
        (!crate::evidence::black_box_text(result).is_empty())
            .then(|| ("black_box".to_owned(), crate::evidence::black_box_text(result).join(" "))),
    )
    .collect()
}

/// What the `time` attributes measure (see the module docs).
fn time_basis(result: &MatrixResult) -> &'static str {
    if result.black_box.is_some() {
        "real: each test case's time is the wall time its scenario's runs took"
    } else {
        "simulated: each test case's time is the simulated time its scenario's runs spanned (deterministic), not the host's"
    }
}

/// ` (topic)` for a row with a topic, else empty.
fn topic_suffix(topic: &str) -> String {
    if topic.is_empty() {
        String::new()
    } else {
        format!(" ({topic})")
    }
}

/// A row's verdict and what decided it: `fail (S02)`, `unknown (no scenario covers it)`.
fn row_decided_by(result: &MatrixResult, row: &RowSummary) -> String {
    let present: Vec<&str> = covering(result, &row.scenarios).iter().map(|s| s.id.as_str()).collect();
    if present.is_empty() {
        format!("{} (no scenario covers it)", row.verdict.as_str())
    } else {
        format!("{} ({})", row.verdict.as_str(), present.join(", "))
    }
}

/// The status of a row's own test case, when it needs one: when no scenario covers it, or
/// when its verdict (other than pass and not applicable) is not the verdict of any of its
/// scenarios, so that no scenario test case shows it. `None`: its scenarios' test cases decide
/// it.
fn row_status(result: &MatrixResult, row: &RowSummary) -> Option<Status> {
    let scenarios = covering(result, &row.scenarios);
    if scenarios.is_empty() {
        // Whatever the verdict says, nothing checked this row.
        let kind = if row.verdict == Verdict::Fail { Kind::Failure } else { Kind::Error };
        let shown = if row.verdict.is_undecided() || row.verdict == Verdict::Pass {
            Verdict::Unknown
        } else {
            row.verdict
        };
        return Some(Status::not_passed(kind, shown, "no scenario covers this row".to_owned(), None));
    }
    if matches!(row.verdict, Verdict::Pass | Verdict::NotApplicable)
        || scenarios.iter().any(|scenario| scenario.verdict == row.verdict)
    {
        return None;
    }
    let ids: Vec<&str> = scenarios.iter().map(|s| s.id.as_str()).collect();
    let message = format!(
        "the row's verdict is {}, which none of its scenarios ({}) shows",
        row.verdict,
        ids.join(", ")
    );
    Some(Status::from_verdict(row.verdict, message, None))
}

/// The run a scenario's test case reports: its first run with the scenario's verdict (the
/// first failing one of a failing scenario, not an earlier unknown), else its first that did
/// not pass.
pub(crate) fn failing_run(scenario: &ScenarioSummary) -> Option<&FailedRun> {
    scenario.failures.iter().find(|run| run.verdict == scenario.verdict).or(scenario.failures.first())
}

/// A scenario's status: its failing run as a failure or an error, else its verdict.
fn scenario_status(scenario: &ScenarioSummary, unit: &str) -> Status {
    if let Some(run) = failing_run(scenario) {
        // The scenario's verdict is the worst over its seeds; the run shown is its first that
        // did not pass.
        let verdict = if matches!(scenario.verdict, Verdict::Pass | Verdict::NotApplicable) {
            run.verdict
        } else {
            scenario.verdict
        };
        return Status::from_verdict(verdict, first_reason(run), Some(run_text(scenario, run, unit)));
    }
    match scenario.verdict {
        Verdict::Pass => Status::Success,
        Verdict::NotApplicable => Status::Skipped { message: not_applicable_reason(scenario).to_owned() },
        verdict => Status::from_verdict(verdict, format!("runs: {}", counts_text(&scenario.counts)), None),
    }
}

/// A failing run in full: every violation, every note, the reproduce command. `unit` is what a
/// run is called (`seed`, or `repeat` in the black-box world).
fn run_text(scenario: &ScenarioSummary, run: &FailedRun, unit: &str) -> String {
    let mut text = format!("{}_{} {unit} {}: {}\n", scenario.id, scenario.name, run.seed, run.verdict);
    for violation in &run.violations {
        text.push_str(&format!("violation: {violation}\n"));
    }
    for note in &run.notes {
        text.push_str(&format!("note: {note}\n"));
    }
    text.push_str(&format!("reproduce: {}\n", run.reproduce));
    if scenario.failures.len() > 1 {
        text.push_str(&format!(
            "{unit}s that did not pass ({} of {}): {}\n",
            scenario.failures.len(),
            scenario.seeds_run,
            failing_seeds_text(&scenario.failures, unit)
        ));
        text.push_str(&format!("oracles: {}\n", oracle_counts_text(&scenario.oracle_counts)));
    }
    text
}

/// What a scenario's test case prints: its contract, rows, runs and evidence.
fn scenario_out(result: &MatrixResult, scenario: &ScenarioSummary) -> String {
    let mut text = format!("{}\n", scenario.expected);
    if scenario.builtin {
        text.push_str(&format!(
            "file: built into replaylab ({} in replaylab's source tree)\n",
            scenario.source
        ));
    }
    text.push_str(&format!("rows: {}\n", scenario.rows.join(", ")));
    let unit = run_unit(result);
    text.push_str(&format!("{unit}s: {}; runs: {}\n", seeds_text(result), counts_text(&scenario.counts)));
    if let Some(run) = failing_run(scenario) {
        text.push_str(&format!("failing {unit}: {}\n", run.seed));
    }
    text.push_str(&format!("history ({unit} {}): {}\n", scenario.shown.seed, scenario.shown.history_digest));
    for item in scenario_evidence(scenario, unit) {
        text.push_str(&item);
        text.push('\n');
    }
    text
}

/// `failure` or `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Failure,
    Error,
}

/// A test case's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Success,
    Skipped { message: String },
    NotPassed { kind: Kind, verdict: Verdict, message: String, text: Option<String> },
}

impl Status {
    /// A verdict other than pass: fail is a failure, anything else an error.
    fn from_verdict(verdict: Verdict, message: String, text: Option<String>) -> Status {
        let kind = if verdict == Verdict::Fail { Kind::Failure } else { Kind::Error };
        Status::not_passed(kind, verdict, message, text)
    }

    fn not_passed(kind: Kind, verdict: Verdict, message: String, text: Option<String>) -> Status {
        Status::NotPassed { kind, verdict, message: one_line(&message), text }
    }

    fn is_failure(&self) -> bool {
        matches!(self, Status::NotPassed { kind: Kind::Failure, .. })
    }

    fn is_error(&self) -> bool {
        matches!(self, Status::NotPassed { kind: Kind::Error, .. })
    }

    fn is_skipped(&self) -> bool {
        matches!(self, Status::Skipped { .. })
    }
}

/// One test case.
struct Case {
    name: String,
    classname: &'static str,
    /// The file and line a CI annotation points at.
    location: Option<(String, u64)>,
    /// The time its runs spanned.
    time_ms: u64,
    status: Status,
    system_out: Option<String>,
}

/// One test suite.
struct Suite {
    name: &'static str,
    timestamp: Option<String>,
    properties: Vec<(String, String)>,
    cases: Vec<Case>,
    system_out: Option<String>,
}

impl Suite {
    fn new(name: &'static str, timestamp: Option<String>) -> Suite {
        Suite { name, timestamp, properties: Vec::new(), cases: Vec::new(), system_out: None }
    }

    /// The sum of its test cases' times.
    fn time_ms(&self) -> u64 {
        self.cases.iter().map(|case| case.time_ms).sum()
    }

    fn write(&self, xml: &mut Xml) {
        let count = |kind: fn(&Status) -> bool| self.cases.iter().filter(|case| kind(&case.status)).count();
        let time = seconds(self.time_ms());
        let (tests, failures, errors, skipped) = (
            self.cases.len().to_string(),
            count(Status::is_failure).to_string(),
            count(Status::is_error).to_string(),
            count(Status::is_skipped).to_string(),
        );
        let mut attributes = vec![
            ("name", self.name),
            ("tests", tests.as_str()),
            ("failures", failures.as_str()),
            ("errors", errors.as_str()),
            ("skipped", skipped.as_str()),
            ("time", time.as_str()),
        ];
        if let Some(timestamp) = &self.timestamp {
            attributes.push(("timestamp", timestamp.as_str()));
        }
        xml.start("testsuite", &attributes);
        if !self.properties.is_empty() {
            xml.start("properties", &[]);
            for (name, value) in &self.properties {
                xml.empty("property", &[("name", name), ("value", value)]);
            }
            xml.end("properties");
        }
        for case in &self.cases {
            case.write(xml);
        }
        if let Some(text) = &self.system_out {
            xml.text_element("system-out", &[], text);
        }
        xml.end("testsuite");
    }
}

impl Case {
    fn write(&self, xml: &mut Xml) {
        let line;
        let time = seconds(self.time_ms);
        let mut attributes =
            vec![("name", self.name.as_str()), ("classname", self.classname), ("time", time.as_str())];
        if let Some((file, at)) = &self.location {
            line = at.to_string();
            attributes.push(("file", file.as_str()));
            attributes.push(("line", &line));
        }
        if self.status == Status::Success && self.system_out.is_none() {
            xml.empty("testcase", &attributes);
            return;
        }
        xml.start("testcase", &attributes);
        match &self.status {
            Status::Success => {}
            Status::Skipped { message } => xml.empty("skipped", &[("message", message)]),
            Status::NotPassed { kind, verdict, message, text } => {
                let tag = match kind {
                    Kind::Failure => "failure",
                    Kind::Error => "error",
                };
                let attributes = [("message", message.as_str()), ("type", verdict.as_str())];
                match text {
                    Some(text) => xml.text_element(tag, &attributes, text),
                    None => xml.empty(tag, &attributes),
                }
            }
        }
        if let Some(text) = &self.system_out {
            xml.text_element("system-out", &[], text);
        }
        xml.end("testcase");
    }
}

/// Text on one line: line breaks (and runs of white space around them) become one space.
fn one_line(text: &str) -> String {
    text.split(['\n', '\r']).map(str::trim).filter(|part| !part.is_empty()).collect::<Vec<_>>().join(" ")
}

/// `text` with every character XML 1.0 does not allow (most control characters, lone
/// surrogates cannot occur in a `str`, U+FFFE and U+FFFF) replaced by U+FFFD, so that any
/// executor's message gives a well-formed document.
fn xml_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let allowed = |c: char| matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..);
    if text.chars().all(allowed) {
        return text.into();
    }
    text.chars().map(|c| if allowed(c) { c } else { '\u{FFFD}' }).collect::<String>().into()
}

/// An indented XML writer over quick-xml: escapes every attribute value and text.
struct Xml {
    writer: Writer<Vec<u8>>,
}

impl Xml {
    fn new() -> Xml {
        let mut writer = Writer::new_with_indent(Vec::new(), b' ', 4);
        writer.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None))).expect(IN_MEMORY);
        Xml { writer }
    }

    fn tag<'a>(name: &'a str, attributes: &[(&str, &str)]) -> BytesStart<'a> {
        let mut tag = BytesStart::new(name);
        for (key, value) in attributes {
            tag.push_attribute((*key, xml_safe(value).as_ref()));
        }
        tag
    }

    fn start(&mut self, name: &str, attributes: &[(&str, &str)]) {
        self.writer.write_event(Event::Start(Xml::tag(name, attributes))).expect(IN_MEMORY);
    }

    fn empty(&mut self, name: &str, attributes: &[(&str, &str)]) {
        self.writer.write_event(Event::Empty(Xml::tag(name, attributes))).expect(IN_MEMORY);
    }

    fn end(&mut self, name: &str) {
        self.writer.write_event(Event::End(BytesEnd::new(name))).expect(IN_MEMORY);
    }

    /// `<name ...>text</name>`, the text as it is (no indentation added inside).
    fn text_element(&mut self, name: &str, attributes: &[(&str, &str)], text: &str) {
        self.start(name, attributes);
        self.writer.write_event(Event::Text(BytesText::new(&xml_safe(text)))).expect(IN_MEMORY);
        self.end(name);
    }

    fn finish(self) -> String {
        let mut bytes = self.writer.into_inner();
        bytes.push(b'\n');
        String::from_utf8(bytes).expect("quick-xml writes the UTF-8 it is given")
    }
}

/// Why writing can never fail: the writer writes into a `Vec`.
const IN_MEMORY: &str = "writing XML into memory cannot fail";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_are_seconds_with_three_decimals() {
        assert_eq!(seconds(0), "0.000");
        assert_eq!(seconds(4_200), "4.200");
        assert_eq!(seconds(61_007), "61.007");
    }

    #[test]
    fn messages_are_one_line() {
        assert_eq!(one_line("a\n  b\r\n\nc "), "a b c");
        assert_eq!(one_line("single"), "single");
    }

    #[test]
    fn characters_xml_forbids_are_replaced() {
        assert_eq!(xml_safe("ok\ttab\nline"), "ok\ttab\nline");
        assert_eq!(xml_safe("bell\u{7}nul\u{0}"), "bell\u{FFFD}nul\u{FFFD}");
        assert_eq!(xml_safe("\u{FFFE}é😀"), "\u{FFFD}é😀");
    }
}
