//! `junit.xml`: one failure per defect, rows shown without being counted twice, `file` and
//! `line` for CI annotations (none for a built-in), the runs' times, GitHub annotations, and
//! validity against the Jenkins xUnit
//! plugin's `junit-10.xsd` (with `xmllint`, when the schema is at hand).

mod fixture;

use std::path::{Path, PathBuf};
use std::process::Command;

use reports::{render_junit, MatrixResult, RenderOptions, Verdict};

/// 2023-11-14T22:13:20Z.
const FIXED_EPOCH_S: i64 = 1_700_000_000;

/// The variable naming the schema file (`.ci/junit-xsd fetch` prints a path for it).
const XSD_VARIABLE: &str = "REPLAYLAB_JUNIT_XSD";

fn parse(xml: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse(xml).unwrap_or_else(|error| panic!("junit.xml does not parse: {error}\n{xml}"))
}

fn elements<'a>(document: &'a roxmltree::Document<'a>, tag: &str) -> Vec<roxmltree::Node<'a, 'a>> {
    document.descendants().filter(|node| node.has_tag_name(tag)).collect()
}

fn cases<'a>(suite: roxmltree::Node<'a, 'a>) -> Vec<roxmltree::Node<'a, 'a>> {
    suite.children().filter(|node| node.has_tag_name("testcase")).collect()
}

fn suite<'a>(document: &'a roxmltree::Document<'a>, name: &str) -> roxmltree::Node<'a, 'a> {
    elements(document, "testsuite")
        .into_iter()
        .find(|suite| suite.attribute("name") == Some(name))
        .unwrap_or_else(|| panic!("no suite {name}"))
}

fn properties(node: roxmltree::Node<'_, '_>) -> Vec<(String, String)> {
    node.children()
        .filter(|child| child.has_tag_name("properties"))
        .flat_map(|properties| properties.children().filter(|p| p.has_tag_name("property")))
        .map(|p| (p.attribute("name").unwrap().to_owned(), p.attribute("value").unwrap().to_owned()))
        .collect()
}

/// The fixture with only its passing scenario (S01) and the rows it covers: a green matrix.
fn passing() -> MatrixResult {
    let mut result = fixture::matrix();
    result.scenarios.retain(|scenario| scenario.id == "S01");
    result.rows.retain(|row| row.scenarios == ["S01"]);
    assert_eq!(result.rows.len(), 2, "C1 and F1");
    assert!(result.rows.iter().all(|row| row.verdict == Verdict::Pass));
    result.verdict = Verdict::Pass;
    result
}

#[test]
fn one_defect_is_one_failure_on_its_scenario() {
    let result = fixture::matrix();
    let xml = render_junit(&result, &RenderOptions::new());
    let document = parse(&xml);
    let names: Vec<&str> =
        elements(&document, "testsuite").iter().filter_map(|s| s.attribute("name")).collect();
    assert_eq!(names, ["rows", "scenarios"]);

    // S02 fails (rows C2 and F2): one failure in the whole document, on S02's test case.
    let failures = elements(&document, "failure");
    assert_eq!(failures.len(), 1, "one defect, one failure:\n{xml}");
    let case = failures[0].parent().unwrap();
    assert_eq!(case.attribute("name"), Some("S02 lost_response_after_commit (C2, F2)"));
    let message = failures[0].attribute("message").unwrap();
    assert!(message.starts_with("O1 single_effect [acme/production/run_827/record_issue] at #7,#18: "));
    assert!(!message.contains('\n'), "the message is one line");
    assert_eq!(failures[0].attribute("type"), Some("fail"));
    let body = failures[0].text().unwrap();
    assert_eq!(body.matches("violation: ").count(), 2, "every violation:\n{body}");
    assert!(body.contains("violation: expect scenarios/matrix/S02_lost_response_after_commit.toml:40"));
    assert!(body.contains(&format!("reproduce: {}", fixture::REPRODUCE)));

    let scenarios = suite(&document, "scenarios");
    let scenario_names: Vec<&str> = cases(scenarios).iter().filter_map(|c| c.attribute("name")).collect();
    assert_eq!(
        scenario_names,
        ["S01 duplicate_same_key (C1, F1)", "S02 lost_response_after_commit (C2, F2)"]
    );
    assert_eq!(scenarios.attribute("failures"), Some("1"));
    assert_eq!(scenarios.attribute("errors"), Some("0"));

    // The rows: the 15 no scenario covers are errors (nothing checked them); C1, F1 (S01
    // passes) and C2, F2 (S02's failure decides them) add no test case.
    let rows = suite(&document, "rows");
    let row_cases = cases(rows);
    let row_ids: Vec<&str> =
        row_cases.iter().map(|c| c.attribute("name").unwrap().split(':').next().unwrap()).collect();
    let uncovered: Vec<String> =
        (3..=10).map(|n| format!("C{n}")).chain((3..=9).map(|n| format!("F{n}"))).collect();
    assert_eq!(row_ids, uncovered);
    for case in &row_cases {
        let error = case.children().find(|n| n.has_tag_name("error")).expect("an error");
        assert_eq!(error.attribute("message"), Some("no scenario covers this row"));
        assert_eq!(error.attribute("type"), Some("unknown"));
    }
    assert_eq!(rows.attribute("errors"), Some("15"));
    assert_eq!(rows.attribute("failures"), Some("0"));
    let root = document.root_element();
    assert_eq!(
        (root.attribute("tests"), root.attribute("failures"), root.attribute("errors")),
        (Some("17"), Some("1"), Some("15"))
    );

    // Every row is still shown, with its verdict and what decided it.
    let shown = properties(rows);
    let rows_shown: Vec<&str> = shown.iter().filter_map(|(name, _)| name.strip_prefix("row.")).collect();
    let all_rows: Vec<String> =
        (1..=10).map(|n| format!("C{n}")).chain((1..=9).map(|n| format!("F{n}"))).collect();
    assert_eq!(rows_shown, all_rows);
    for (row, value) in
        [("row.C1", "pass (S01)"), ("row.C2", "fail (S02)"), ("row.C3", "unknown (no scenario covers it)")]
    {
        assert!(shown.contains(&(row.to_owned(), value.to_owned())), "{row}={value} in {shown:?}");
    }
    let listing = rows.children().find(|n| n.has_tag_name("system-out")).unwrap().text().unwrap();
    assert!(listing.contains("C2 (reply lost after the commit): fail (S02)\n"), "{listing}");

    // The matrix's own properties are on each suite, never inside a test case.
    for suite in elements(&document, "testsuite") {
        let properties = properties(suite);
        for (name, value) in [
            ("seeds", "0-1"),
            ("executor", "reference"),
            ("commit", "0123456789abcdef0123456789abcdef01234567"),
        ] {
            assert!(properties.contains(&(name.into(), value.into())), "{name}={value}");
        }
    }
    for case in elements(&document, "testcase") {
        assert!(!case.children().any(|n| n.has_tag_name("properties")), "properties in a test case");
    }
}

/// A row whose verdict no scenario test case shows gets a test case of its own, so a gate
/// reading only test cases cannot go green on it.
#[test]
fn a_row_no_scenario_decides_is_an_error_of_its_own() {
    let mut result = passing();
    result.rows[0].verdict = Verdict::Crashed;
    let xml = render_junit(&result, &RenderOptions::new());
    let document = parse(&xml);
    let row_cases = cases(suite(&document, "rows"));
    assert_eq!(row_cases.len(), 1, "{xml}");
    assert!(row_cases[0].attribute("name").unwrap().starts_with("C1: "));
    let error = row_cases[0].children().find(|n| n.has_tag_name("error")).expect("an error");
    assert_eq!(error.attribute("type"), Some("crashed"));
    assert_eq!(
        error.attribute("message"),
        Some("the row's verdict is crashed, which none of its scenarios (S01) shows")
    );

    // A row that claims to pass with no scenario behind it is an error too.
    let mut result = passing();
    result.rows[1].scenarios.clear();
    let xml = render_junit(&result, &RenderOptions::new());
    let document = parse(&xml);
    let row_cases = cases(suite(&document, "rows"));
    assert_eq!(row_cases.len(), 1, "{xml}");
    assert!(row_cases[0].attribute("name").unwrap().starts_with("F1: "));
    let error = row_cases[0].children().find(|n| n.has_tag_name("error")).expect("an error");
    assert_eq!(error.attribute("message"), Some("no scenario covers this row"));

    // Green: no row test case at all, every scenario a success.
    let green = render_junit(&passing(), &RenderOptions::new());
    let document = parse(&green);
    assert!(cases(suite(&document, "rows")).is_empty());
    for tag in ["failure", "error", "skipped"] {
        assert!(elements(&document, tag).is_empty(), "{tag} in a green matrix:\n{green}");
    }
}

/// The fixture with its scenarios read from a user's files (as given on the command line),
/// rather than built in.
fn from_user_files(mut result: MatrixResult) -> MatrixResult {
    for scenario in &mut result.scenarios {
        scenario.builtin = false;
        scenario.source = format!("ci/scenarios/{}.toml", scenario.id);
    }
    result
}

fn location<'a>(case: roxmltree::Node<'a, 'a>) -> (Option<&'a str>, Option<&'a str>) {
    (case.attribute("file"), case.attribute("line"))
}

#[test]
fn a_users_scenario_points_at_its_file_and_the_failing_line_and_a_builtin_at_none() {
    // Built in: the file is in replaylab's tree, not the user's repository: no file, no line,
    // and the test case says where it is.
    let builtin = fixture::matrix();
    let xml = render_junit(&builtin, &RenderOptions::new());
    let document = parse(&xml);
    for case in cases(suite(&document, "scenarios")) {
        assert_eq!(location(case), (None, None), "{xml}");
        let out = case.children().find(|n| n.has_tag_name("system-out")).unwrap().text().unwrap();
        assert!(out.contains("file: built into replaylab (scenarios/matrix/S0"), "{out}");
    }

    // A user's file: its path as given. S02's first violation is an oracle's (O1): the
    // scenario's `id` line; S01 passes: its `id` line.
    let mut result = from_user_files(fixture::matrix());
    result.scenarios[1].line = 7;
    let xml = render_junit(&result, &RenderOptions::new());
    let document = parse(&xml);
    let scenario_cases = cases(suite(&document, "scenarios"));
    assert_eq!(location(scenario_cases[0]), (Some("ci/scenarios/S01.toml"), Some("1")));
    assert_eq!(location(scenario_cases[1]), (Some("ci/scenarios/S02.toml"), Some("7")));
    assert!(!xml.contains("built into replaylab"), "{xml}");

    // When the failure shown is an expectation, the line is the failing `expect`'s.
    for failure in &mut result.scenarios[1].failures {
        failure.violations.retain(|violation| violation.oracle == "expect");
    }
    let xml = render_junit(&result, &RenderOptions::new());
    let document = parse(&xml);
    let case = cases(suite(&document, "scenarios"))[1];
    assert_eq!(location(case), (Some("ci/scenarios/S02.toml"), Some("40")), "{xml}");
    let failure = case.children().find(|n| n.has_tag_name("failure")).unwrap();
    assert!(failure.attribute("message").unwrap().starts_with("expect "), "{xml}");
}

#[test]
fn times_are_the_runs_time_and_the_timestamp_is_utc_without_a_zone() {
    let result = fixture::matrix();
    let plain = render_junit(&result, &RenderOptions::new());
    let document = parse(&plain);
    let scenario_cases = cases(suite(&document, "scenarios"));
    let times: Vec<&str> = scenario_cases.iter().filter_map(|case| case.attribute("time")).collect();
    let expected: Vec<String> = result
        .scenarios
        .iter()
        .map(|scenario| format!("{}.{:03}", scenario.time_ms / 1000, scenario.time_ms % 1000))
        .collect();
    assert_eq!(times, expected);
    assert!(result.scenarios.iter().all(|scenario| scenario.time_ms > 0), "the fixture has times");
    let total_ms: u64 = result.scenarios.iter().map(|scenario| scenario.time_ms).sum();
    let total = format!("{}.{:03}", total_ms / 1000, total_ms % 1000);
    assert_eq!(suite(&document, "scenarios").attribute("time"), Some(total.as_str()));
    assert_eq!(suite(&document, "rows").attribute("time"), Some("0.000"), "a row's case stands for no runs");
    assert_eq!(document.root_element().attribute("time"), Some(total.as_str()));
    for node in elements(&document, "testsuite") {
        assert_eq!(node.attribute("timestamp"), None, "no time stamp without SOURCE_DATE_EPOCH");
    }
    // The suites say what the times measure: simulated time here, real time for black-box runs.
    let basis = |result: &MatrixResult| {
        let xml = render_junit(result, &RenderOptions::new());
        let document = parse(&xml);
        let properties = properties(suite(&document, "scenarios"));
        properties
            .into_iter()
            .find(|(name, _)| name == "time")
            .map(|(_, value)| value)
            .expect("a time property")
    };
    assert!(basis(&result).starts_with("simulated: "), "{}", basis(&result));
    let mut black_box = fixture::matrix();
    black_box.black_box = Some(reports::BlackBox {
        command: "python3 server.py".into(),
        workers: 2,
        transport: "stdio".into(),
        server: "server 1.0".into(),
        capabilities_from: "manifest".into(),
        deterministic: false,
        time: reports::RealTime::default(),
        matrix_wall_ms: 0,
        oracles_judged: vec![],
        hints: vec![],
        jobs: 0,
        rules_not_judged: vec![],
        out_of_time: 0,
    });
    assert!(basis(&black_box).starts_with("real: "), "{}", basis(&black_box));

    let dated = render_junit(&result, &RenderOptions::generated_at(FIXED_EPOCH_S));
    let document = parse(&dated);
    for suite in elements(&document, "testsuite") {
        assert_eq!(suite.attribute("timestamp"), Some("2023-11-14T22:13:20"));
    }
    assert_eq!(document.root_element().attribute("timestamp"), None, "junit-10.xsd has none on testsuites");
    assert_eq!(dated.matches("timestamp=").count(), 2);
}

/// Under GitHub Actions, one `::error` line per scenario that did not pass: at the user's file
/// and the line junit.xml names, with the reproduce command; a built-in names no file.
#[test]
fn annotations_name_the_failing_scenario_its_line_and_its_reproduce_command() {
    let builtin = reports::matrix_annotations(&fixture::matrix());
    assert_eq!(builtin.len(), 1, "S02 fails, S01 passes: {builtin:?}");
    assert!(
        builtin[0].starts_with("::error title=replaylab%3A S02 lost_response_after_commit fail (C2%2C F2)::")
    );
    assert!(!builtin[0].contains("file="), "{}", builtin[0]);
    assert!(builtin[0].contains(&format!("%0Areproduce: {}", fixture::REPRODUCE)), "{}", builtin[0]);
    assert!(!builtin[0].contains('\n'), "one line: {}", builtin[0]);

    let mut result = from_user_files(fixture::matrix());
    for failure in &mut result.scenarios[1].failures {
        failure.violations.retain(|violation| violation.oracle == "expect");
    }
    let user = reports::matrix_annotations(&result);
    assert_eq!(user.len(), 1, "{user:?}");
    assert!(user[0].starts_with("::error file=ci/scenarios/S02.toml,line=40,title="), "{}", user[0]);
    let xml = render_junit(&result, &RenderOptions::new());
    assert!(xml.contains(" file=\"ci/scenarios/S02.toml\" line=\"40\""), "junit.xml agrees: {xml}");

    // A green matrix has nothing to annotate.
    assert!(reports::matrix_annotations(&passing()).is_empty());
}

#[test]
fn text_xml_cannot_carry_is_replaced_and_the_rest_escaped() {
    let mut result = fixture::matrix();
    result.executor = "odd\u{7}<\"&>".into();
    result.scenarios[1].expected = "the executor said \u{1b}[31mno\u{0} <b>&</b>".into();
    let xml = render_junit(&result, &RenderOptions::new());
    let document = parse(&xml);
    assert_eq!(document.root_element().attribute("name"), Some("replaylab matrix (odd\u{FFFD}<\"&>)"));
    let case = cases(suite(&document, "scenarios"))[1];
    let out = case.children().find(|n| n.has_tag_name("system-out")).unwrap().text().unwrap();
    assert!(out.starts_with("the executor said \u{FFFD}[31mno\u{FFFD} <b>&</b>\n"), "{out}");
}

/// `file="…"` and `line="…"` removed from every `<testcase …>` start tag: the one extension
/// junit.xml makes to junit-10.xsd (attribute values are escaped, so a value holds no `"`).
fn strip_locations(xml: &str) -> String {
    let mut out = String::with_capacity(xml.len());
    for line in xml.split_inclusive('\n') {
        if !line.trim_start().starts_with("<testcase ") {
            out.push_str(line);
            continue;
        }
        let mut rest = line;
        let mut kept = String::new();
        while let Some(at) = [" file=\"", " line=\""].iter().filter_map(|key| rest.find(key)).min() {
            kept.push_str(&rest[..at]);
            let value_start = at + " file=\"".len();
            let value_end = value_start + rest[value_start..].find('"').expect("a closing quote");
            rest = &rest[value_end + 1..];
        }
        kept.push_str(rest);
        out.push_str(&kept);
    }
    out
}

#[test]
fn stripping_locations_removes_exactly_file_and_line() {
    let xml = render_junit(&from_user_files(fixture::matrix()), &RenderOptions::new());
    assert!(xml.contains(" file=\""), "{xml}");
    let stripped = strip_locations(&xml);
    let (before, after) = (parse(&xml), parse(&stripped));
    let (cases_before, cases_after) = (elements(&before, "testcase"), elements(&after, "testcase"));
    assert_eq!(cases_before.len(), cases_after.len());
    for (old, new) in cases_before.iter().zip(&cases_after) {
        let kept: Vec<(&str, &str)> = old
            .attributes()
            .filter(|a| !matches!(a.name(), "file" | "line"))
            .map(|a| (a.name(), a.value()))
            .collect();
        let now: Vec<(&str, &str)> = new.attributes().map(|a| (a.name(), a.value())).collect();
        assert_eq!(kept, now);
    }
    assert!(!stripped.contains(" file=\"") && !stripped.contains(" line=\""), "{stripped}");
    assert_eq!(xml.lines().count(), stripped.lines().count());
}

/// Validates a failing and a passing matrix's junit.xml (with and without a time stamp)
/// against the Jenkins xUnit plugin's `junit-10.xsd` with `xmllint --schema`.
///
/// `junit-10.xsd` declares no `file` or `line` on `testcase`; junit.xml adds those two for CI
/// annotations. So the document with them removed must be valid, and the document as written
/// may fail on nothing else.
///
/// The schema is not in this repository: `.ci/junit-xsd fetch` takes it from pytest's source
/// distribution on PyPI (pinned by version and SHA-256), installs `xmllint` (Debian's
/// `libxml2-utils`) and prints the schema's path; `.ci/run` exports it as
/// `REPLAYLAB_JUNIT_XSD` before the tests. Without that variable the test cannot check
/// anything: under CI (`CI` set) it fails; elsewhere it says how to get the schema and passes.
#[test]
fn junit_validates_against_junit_10_xsd() {
    let Some(xsd) = std::env::var_os(XSD_VARIABLE).filter(|value| !value.is_empty()).map(PathBuf::from)
    else {
        let how = format!(
            "{XSD_VARIABLE} is not set, so junit.xml was not validated against junit-10.xsd. \
             Get the schema and run the test again:\n  \
             export {XSD_VARIABLE}=\"$(.ci/junit-xsd fetch)\"\n  \
             cargo test -p reports --test junit"
        );
        assert!(std::env::var_os("CI").is_none(), "{how}");
        eprintln!("SKIPPED (not under CI): {how}");
        return;
    };
    assert!(xsd.is_file(), "{XSD_VARIABLE}={} is not a file", xsd.display());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("junit-xsd");
    std::fs::create_dir_all(&dir).unwrap();
    let options = [("plain", RenderOptions::new()), ("dated", RenderOptions::generated_at(FIXED_EPOCH_S))];
    let matrices = [
        ("failing", from_user_files(fixture::matrix())),
        ("passing", from_user_files(passing())),
        ("builtin", fixture::matrix()),
    ];
    for (matrix, result) in matrices {
        for (kind, options) in &options {
            let xml = render_junit(&result, options);
            if matrix != "builtin" {
                assert!(xml.contains(" file=\"ci/scenarios/S01.toml\" line=\"1\""), "{xml}");
            }
            let stripped = dir.join(format!("{matrix}-{kind}-stripped.xml"));
            std::fs::write(&stripped, strip_locations(&xml)).unwrap();
            let (valid, errors) = xmllint(&xsd, &stripped);
            assert!(valid, "{matrix} {kind}: not valid against {}:\n{errors}", xsd.display());

            let written = dir.join(format!("{matrix}-{kind}.xml"));
            std::fs::write(&written, &xml).unwrap();
            let (valid, errors) = xmllint(&xsd, &written);
            let complaints: Vec<&str> =
                errors.lines().filter(|line| line.contains("validity error")).collect();
            assert!(valid || !complaints.is_empty(), "{errors}");
            for complaint in complaints {
                assert!(
                    complaint.contains("Element 'testcase', attribute 'file'")
                        || complaint.contains("Element 'testcase', attribute 'line'"),
                    "{matrix} {kind}: junit.xml departs from junit-10.xsd in more than testcase file/line: \
                     {complaint}"
                );
            }
        }
    }
}

/// `xmllint --noout --schema XSD FILE`: whether it is valid, and what xmllint said.
fn xmllint(xsd: &Path, file: &Path) -> (bool, String) {
    let output = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(xsd)
        .arg(file)
        .output()
        .unwrap_or_else(|error| panic!("cannot run xmllint ({error}); install Debian's libxml2-utils"));
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}
