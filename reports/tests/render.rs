//! The reports of a fixed matrix result: snapshots of every format, the checked-in JSON
//! Schema, HTML self-containment, determinism and the named SHA-256 (JUnit's structure and
//! schema: `junit.rs`).

mod fixture;

use std::path::PathBuf;

use reports::{
    matrix_schema, matrix_sha256, render, render_html, render_json, render_junit, render_markdown,
    write_reports_with, Format, MatrixResult, RenderOptions,
};
use sha2::{Digest, Sha256};

/// 2023-11-14T22:13:20Z.
const FIXED_EPOCH_S: i64 = 1_700_000_000;

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|byte| format!("{byte:02x}")).collect()
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("reports-tests").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn json_snapshot() {
    insta::assert_snapshot!("matrix_json", render_json(&fixture::matrix()));
}

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!("matrix_md", render_markdown(&fixture::matrix(), &RenderOptions::new()));
}

#[test]
fn junit_snapshot() {
    insta::assert_snapshot!("junit_xml", render_junit(&fixture::matrix(), &RenderOptions::new()));
}

#[test]
fn html_snapshot() {
    insta::assert_snapshot!("report_html", render_html(&fixture::matrix(), &RenderOptions::new()));
}

/// CI runs this as a gate: the checked-in schema must be the one the types generate.
#[test]
fn checked_in_schema_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schema/matrix.schema.json");
    let generated = matrix_schema();
    if std::env::var_os("UPDATE_SCHEMA").is_some_and(|value| value == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is stale: the result types changed. Regenerate it with \
         `UPDATE_SCHEMA=1 cargo test -p reports --test render checked_in_schema_is_current`, \
         review the diff, and bump SCHEMA_VERSION on an incompatible change.",
        path.display()
    );
    let schema: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert_eq!(schema["title"], "MatrixResult");
    for field in ["schema_version", "harness_version", "commit", "rows", "scenarios", "verdict"] {
        assert!(schema["properties"].get(field).is_some(), "schema lacks {field}");
    }
}

#[test]
fn json_round_trips_to_the_same_result() {
    let result = fixture::matrix();
    let json = render_json(&result);
    assert!(json.ends_with("}\n"), "pretty JSON with one trailing newline");
    let back: MatrixResult = serde_json::from_str(&json).unwrap();
    assert_eq!(back, result);
}

#[test]
fn every_format_renders_the_same_bytes_twice() {
    let options = RenderOptions::generated_at(FIXED_EPOCH_S);
    for format in Format::ALL {
        let first = render(&fixture::matrix(), format, &options);
        let second = render(&fixture::matrix().clone(), format, &options);
        assert_eq!(first, second, "{format} is not deterministic");
        assert!(first.ends_with('\n'), "{format} ends with a newline");
    }
}

#[test]
fn text_reports_name_the_sha256_of_matrix_json() {
    let result = fixture::matrix();
    let expected = hex_sha256(render_json(&result).as_bytes());
    assert_eq!(matrix_sha256(&result), expected);
    for format in [Format::Markdown, Format::Junit, Format::Html] {
        let text = render(&result, format, &RenderOptions::new());
        assert!(text.contains(&expected), "{format} does not name {expected}");
    }
}

#[test]
fn time_stamps_appear_only_with_source_date_epoch() {
    let result = fixture::matrix();
    for format in Format::ALL {
        let text = render(&result, format, &RenderOptions::new());
        assert!(!text.contains("2023-11-14"), "{format} has a time stamp without SOURCE_DATE_EPOCH");
        assert!(!text.contains("timestamp="), "{format} has a time stamp without SOURCE_DATE_EPOCH");
    }
    let options = RenderOptions::generated_at(FIXED_EPOCH_S);
    assert!(render_markdown(&result, &options).contains("| generated | 2023-11-14T22:13:20Z |"));
    assert!(render_html(&result, &options).contains("2023-11-14T22:13:20Z"));
    assert!(render_junit(&result, &options).contains("timestamp=\"2023-11-14T22:13:20\""), "UTC, no zone");
    assert_eq!(render_json(&result), render(&result, Format::Json, &options), "the record has no time");
}

#[test]
fn html_is_self_contained_and_escapes_labels() {
    let html = render_html(&fixture::matrix(), &RenderOptions::new());
    for forbidden in ["http://", "https://", "src=", "@import", "url(", "<script", "<link", "<img"] {
        assert!(!html.contains(forbidden), "report.html contains {forbidden:?}");
    }
    assert!(!html.contains("<b>drop</b>"), "a label's HTML reached the page");
    assert!(html.contains("fault &lt;b&gt;drop&lt;&#x2f;b&gt; &amp; &quot;close&quot;"), "escaped label");
    assert_eq!(html.matches("<div class=\"tl\"").count(), 2, "one timeline per scenario");
    assert!(html.contains("20.000 s quiet"), "the settle wait is a row of its own, not 20 s of height");
    assert!(html.contains(fixture::REPRODUCE));
    assert!(html.contains("class=\"row-fail\""));
}

#[test]
fn html_puts_failures_first_marks_violations_and_collapses_passes() {
    let html = render_html(&fixture::matrix(), &RenderOptions::new());
    let position = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("report.html lacks {needle:?}"));
    assert!(position("<section class=\"scenario tone-fail\" id=\"S02\">") < position("<h2>Rows</h2>"));
    assert!(position("<details class=\"scenario tone-pass\" id=\"S01\">") > position("<h2>Scenarios</h2>"));
    // The per-operation table comes before the timeline and flags both ledger effects.
    let section = &html[position("id=\"S02\">")..position("<h2>Rows</h2>")];
    let table = section.find("<table class=\"ops\">").expect("S02 has its operations table");
    assert!(table < section.find("<div class=\"tl\"").expect("S02 has its timeline"));
    assert_eq!(section.matches("<li class=\"e-wrong\">ticket_created").count(), 2, "both effects flagged");
    assert!(section.contains("<strong>retry</strong>: applied ticket_2"));
    // The timeline marks the violating positions: their rows and their marks.
    assert_eq!(section.matches("class=\"tc bad\"").count(), 2, "positions 7 and 18");
    assert_eq!(section.matches(" bad\" id=\"S02-e").count(), 2);
    assert!(section.contains("&#9888; O1"));
    // Every seed that did not pass is listed with its oracles and reproduce command.
    assert!(section.contains("Every seed that did not pass: 1</strong>"));
    assert!(section.contains(&format!(
        "<td data-label=\"reproduce\"><code class=\"command\">{}</code>",
        fixture::REPRODUCE
    )));
    assert!(section.contains("<td data-label=\"oracles\">O1, expect</td>"));
    // The fault's window is one band, from the rule to the healing.
    assert_eq!(section.matches("<div class=\"band\"").count(), 1);
}

#[test]
fn markdown_lists_rows_in_document_order_with_failures() {
    let text = render_markdown(&fixture::matrix(), &RenderOptions::new());
    let row_lines: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("| C") || line.starts_with("| F"))
        .map(|line| line.split(" | ").next().unwrap().trim_start_matches("| "))
        .collect();
    let expected: Vec<String> =
        (1..=10).map(|n| format!("C{n}")).chain((1..=9).map(|n| format!("F{n}"))).collect();
    assert_eq!(row_lines, expected);
    assert!(text.contains(&format!("reproduce: `{}`", fixture::REPRODUCE)));
    assert!(text.contains("### S02 lost_response_after_commit: **FAIL**"));
    assert!(text.contains("fingerprints: first = second"));
    assert!(!text.contains("<b>"), "no raw HTML from labels or texts");
}

#[test]
fn write_reports_writes_each_chosen_format_once() {
    let dir = scratch_dir("write");
    let result = fixture::matrix();
    let options = RenderOptions::new();
    let formats = Format::parse_list("html,json,md,junit,json").unwrap();
    let written = write_reports_with(&result, &dir, &formats, &options).unwrap();
    let names: Vec<&str> = written.iter().map(|path| path.file_name().unwrap().to_str().unwrap()).collect();
    assert_eq!(names, ["report.html", "matrix.json", "matrix.md", "junit.xml"]);
    for (path, format) in written.iter().zip([Format::Html, Format::Json, Format::Markdown, Format::Junit]) {
        assert_eq!(std::fs::read_to_string(path).unwrap(), render(&result, format, &options));
    }
}

#[test]
fn write_reports_names_the_file_it_could_not_write() {
    let dir = scratch_dir("blocked");
    std::fs::create_dir_all(dir.join("matrix.json")).unwrap();
    let error =
        write_reports_with(&fixture::matrix(), &dir, &[Format::Json], &RenderOptions::new()).unwrap_err();
    assert!(error.to_string().starts_with("write the report "), "{error}");
    assert!(error.to_string().ends_with("matrix.json"), "{error}");
}

#[test]
fn step_summary_is_appended_only_when_the_variable_is_set() {
    // The only test in this binary that touches GITHUB_STEP_SUMMARY.
    std::env::remove_var(reports::STEP_SUMMARY_VARIABLE);
    assert_eq!(reports::append_step_summary("ignored").unwrap(), None);
    let dir = scratch_dir("summary");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("summary.md");
    std::fs::write(&path, "before\n").unwrap();
    std::env::set_var(reports::STEP_SUMMARY_VARIABLE, &path);
    let text = render_markdown(&fixture::matrix(), &RenderOptions::new());
    let appended = reports::append_step_summary(&text);
    std::env::remove_var(reports::STEP_SUMMARY_VARIABLE);
    assert_eq!(appended.unwrap(), Some(path.clone()));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("before\n{text}"));
}

/// A scenario the executor does not support is shown as not applicable in every format:
/// skipped in JUnit, listed with its reason in Markdown, a grey badge in HTML; never a pass,
/// never a failure.
#[test]
fn a_scenario_not_applicable_is_shown_as_such_in_every_report() {
    let mut result = fixture::matrix();
    let why = "not applicable: the scenario needs tool payments.charge, which executor tiny does not declare";
    let scenario = result.scenarios.iter_mut().find(|s| s.failures.is_empty()).expect("a passing scenario");
    scenario.verdict = reports::Verdict::NotApplicable;
    scenario.counts = [(reports::Verdict::NotApplicable, scenario.seeds_run)].into();
    scenario.shown.verdict = reports::Verdict::NotApplicable;
    scenario.shown.notes = vec![why.to_owned()];
    let title = format!("{} {}", scenario.id, scenario.name);

    let junit = render_junit(&result, &RenderOptions::new());
    let document = roxmltree::Document::parse(&junit).expect("JUnit parses");
    let case = document
        .descendants()
        .find(|node| {
            node.has_tag_name("testcase")
                && node.attribute("name").is_some_and(|name| name.starts_with(&title))
        })
        .expect("the scenario's test case");
    let skipped = case.children().find(|node| node.has_tag_name("skipped")).expect("it is skipped");
    assert_eq!(skipped.attribute("message"), Some(why));
    assert!(!case.children().any(|node| node.has_tag_name("failure") || node.has_tag_name("error")));

    let markdown = render_markdown(&result, &RenderOptions::new());
    assert!(markdown.contains("_not applicable_"), "{markdown}");
    assert!(markdown.contains(&format!("- {title}: {why}")), "{markdown}");
    assert!(!markdown.contains("NOT APPLICABLE"), "not applicable is not shouted as a failure");
    assert!(markdown.contains("; 0 rows and 1 scenario is not applicable to it (not run)."), "{markdown}");

    let html = render_html(&result, &RenderOptions::new());
    assert!(html.contains("<span class=\"badge v-not_applicable\">not applicable</span>"));
    assert!(html.contains(why));
}

/// The headline of every text report says how many rows applied, whatever the verdict; and
/// `--require` names why each required row it did not get failed the gate.
#[test]
fn the_headline_says_how_many_rows_applied_and_requirements_say_why_they_failed() {
    let mut result = fixture::matrix();
    let applied = reports::rows_applied_text(&result);
    assert_eq!(
        applied,
        format!("{} of {} rows applied; 0 not applicable", result.rows.len(), result.rows.len())
    );
    // S01 (C1, F1) not applicable: two rows fewer applied.
    let why = "not applicable: the scenario needs tool tickets.create, which executor tiny does not declare";
    for row in result.rows.iter_mut().filter(|row| row.scenarios == ["S01"]) {
        row.verdict = reports::Verdict::NotApplicable;
    }
    let s01 = result.scenarios.iter_mut().find(|s| s.id == "S01").expect("S01");
    s01.verdict = reports::Verdict::NotApplicable;
    s01.shown.notes = vec![why.to_owned()];
    let total = result.rows.len();
    let applied = reports::rows_applied_text(&result);
    assert_eq!(applied, format!("{} of {total} rows applied; 2 not applicable", total - 2));
    assert!(render_markdown(&result, &RenderOptions::new()).contains(&format!("**{applied}.**")));
    assert!(
        render_html(&result, &RenderOptions::new()).contains(&format!("<p class=\"applied\">{applied}.</p>"))
    );

    let required = |rows: &[&str]| {
        let rows: Vec<String> = rows.iter().map(|row| (*row).to_owned()).collect();
        reports::unmet_requirements(&result, &rows)
    };
    assert_eq!(required(&["C1"]), [format!("C1: not applicable to executor reference: S01: {why}")]);
    let c2 = required(&["C2"]);
    assert_eq!(c2.len(), 1);
    assert!(c2[0].starts_with("C2: fail (S02 seed 1: O1 single_effect"), "{c2:?}");
    assert!(c2[0].ends_with(&format!("; reproduce: {})", fixture::REPRODUCE)), "{c2:?}");
    // C3 has no scenario in the fixture: nothing checked it.
    assert_eq!(required(&["C3"]), ["C3: no scenario covers it"]);
    let mut selected = result.clone();
    selected.rows.retain(|row| row.row != "C3");
    assert_eq!(
        reports::unmet_requirements(&selected, &["C3".to_owned()]),
        ["C3: not run: no scenario of this run covers it"]
    );
    // Only what did not pass is named, in the order required.
    let green = fixture::matrix();
    assert!(reports::unmet_requirements(&green, &["C1".to_owned(), "F1".to_owned()]).is_empty());
    let both = reports::unmet_requirements(&green, &["F2".to_owned(), "C1".to_owned(), "C2".to_owned()]);
    let named: Vec<&str> = both.iter().map(|line| line.split(':').next().unwrap()).collect();
    assert_eq!(named, ["F2", "C2"]);
}

/// A black-box matrix says so in every text report: repeats, not seeds; not deterministic;
/// where the real time went; which oracles judged. A simulated matrix says none of it.
#[test]
fn a_black_box_matrix_says_it_was_real_and_not_deterministic() {
    let simulated = fixture::matrix();
    let mut result = simulated.clone();
    result.black_box = Some(reports::BlackBox {
        command: "python3 server.py".into(),
        workers: 2,
        transport: "stdio".into(),
        server: "my-server 1.0".into(),
        capabilities_from: "manifest".into(),
        deterministic: false,
        time: reports::RealTime { wall_ms: 40_000, starting_ms: 4_000, waiting_ms: 30_000 },
        matrix_wall_ms: 9_000,
        oracles_judged: vec!["O1".into(), "O2".into(), "O13".into()],
        hints: vec![],
        jobs: 0,
        rules_not_judged: vec![],
        out_of_time: 0,
    });
    let said = reports::black_box_text(&result);
    assert_eq!(said.len(), 4, "{said:#?}");
    assert!(
        said[0].contains("\u{201c}python3 server.py\u{201d}, 2 worker process(es) per run over stdio"),
        "{said:#?}"
    );
    assert!(said[1].starts_with("Not deterministic"), "{said:#?}");
    assert!(said[2].contains("4.0 s (10%) starting processes, 30.0 s (75%) waiting"), "{said:#?}");
    assert!(said[2].contains("6.0 s (15%) driving"), "{said:#?}");
    assert!(
        said[3].contains("that had nothing to judge here: O3, O4, O5, O6, O7, O8, O9, O10, O11, O12"),
        "{said:#?}"
    );
    let markdown = render_markdown(&result, &RenderOptions::new());
    assert!(markdown.contains("| repeats |") && markdown.contains("not deterministic"), "{markdown}");
    assert!(markdown.contains("| black box | Not deterministic"), "{markdown}");
    let html = render_html(&result, &RenderOptions::new());
    assert!(html.contains("<th>repeats</th>") && html.contains("Not deterministic"), "black-box HTML");
    let junit = render_junit(&result, &RenderOptions::new());
    assert!(junit.contains("<property name=\"black_box\" value=\"Black-box world:"), "{junit}");
    assert!(!render_junit(&simulated, &RenderOptions::new()).contains("black_box"));
    assert!(reports::black_box_text(&simulated).is_empty());
    // Runs made unknown by real time running out are counted, with fewer runs side by side
    // suggested; none, and nothing is said.
    assert!(!said.iter().any(|line| line.contains("Real time ran out")), "{said:#?}");
    let mut slow = result.clone();
    if let Some(black_box) = slow.black_box.as_mut() {
        black_box.jobs = 8;
        black_box.out_of_time = 3;
    }
    let said_slow = reports::black_box_text(&slow);
    assert!(
        said_slow
            .iter()
            .any(|line| line.starts_with("Real time ran out in 3 run(s): a time premise did not hold")
                && line.ends_with("Run fewer side by side (--jobs 4; 8 ran now).")),
        "{said_slow:#?}"
    );
    assert!(render_markdown(&slow, &RenderOptions::new()).contains("Real time ran out in 3 run(s)"));
    let markdown = render_markdown(&simulated, &RenderOptions::new());
    assert!(!markdown.contains("| repeats |") && !markdown.contains("black box"), "{markdown}");
    // A black-box run is a repeat, not a seed, everywhere: the failure box, the failing runs'
    // lists, the timeline's caption, the rows; the simulated matrix says seed.
    let black_box = [
        render_markdown(&result, &RenderOptions::new()),
        render_html(&result, &RenderOptions::new()),
        render_junit(&result, &RenderOptions::new()),
    ];
    for (text, said) in
        black_box.iter().zip([
            &[
                "- first failing repeat: 1 (fail)",
                "Every repeat that did not pass: 1",
                "| repeat | verdict |",
            ][..],
            &[
                "<strong>Repeat 1</strong> of S02",
                "Every repeat that did not pass: 1",
                "Repeat 1, the first run",
                "<th>repeats run</th>",
            ],
            &["S02_lost_response_after_commit repeat 1: fail", "failing repeat: 1", "history (repeat 1)"],
        ])
    {
        for words in said {
            assert!(text.contains(words), "{words:?} in {text}");
        }
        // The reproduce command's flag is `--seed` in both worlds; the prose says repeat.
        let prose = text.replace("--seed ", "--flag ");
        for seed in ["Seed 1", "seed 1", "Every seed", "seeds run", "first failing seed"] {
            assert!(!prose.contains(seed), "{seed:?} in a black-box report: {text}");
        }
    }
    let simulated_html = render_html(&simulated, &RenderOptions::new());
    assert!(simulated_html.contains("<strong>Seed 1</strong> of S02"));
    // It survives matrix.json and its schema.
    let json = render_json(&result);
    let back: MatrixResult = serde_json::from_str(&json).expect("matrix.json reads back");
    assert_eq!(back, result);
}

/// The executor's events that led to a mark unfold under it in the HTML event table, and are
/// kept in `matrix.json`; marks without any show nothing extra.
#[test]
fn a_marks_executor_events_unfold_in_the_event_table() {
    let mut result = fixture::matrix();
    let scenario = result.scenarios.iter_mut().find(|s| !s.timeline.marks.is_empty()).expect("a timeline");
    let line = "      1437ms  DEBUG executor::machine: the owner's lease ran out key=acme:k";
    scenario.timeline.marks[0].log = vec![line.to_owned()];
    let html = render_html(&result, &RenderOptions::new());
    assert_eq!(html.matches("<details class=\"log\">").count(), 1, "one mark has events");
    assert!(
        html.contains("the executor&#x27;s events before it (1)")
            || html.contains("the executor's events before it (1)")
    );
    assert!(
        html.contains("the owner&#x27;s lease ran out key=acme:k")
            || html.contains("the owner's lease ran out key=acme:k")
    );
    let json = render_json(&result);
    assert_eq!(json.matches("\"log\": [").count(), 1, "only the mark with events carries a log");
}

/// The checked-in schema accepts the fixture's matrix.json and refuses the bad documents a
/// loose schema let through: unknown fields at any depth, another format version, a row or a
/// scenario id that cannot be, a verdict or an oracle outside their sets.
#[test]
fn the_schema_accepts_matrix_json_and_refuses_bad_documents() {
    let schema: serde_json::Value = serde_json::from_str(&matrix_schema()).expect("the schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("the schema is a JSON Schema");
    let json: serde_json::Value = serde_json::from_str(&render_json(&fixture::matrix())).expect("JSON");
    let errors: Vec<String> = validator.iter_errors(&json).map(|error| error.to_string()).collect();
    assert!(errors.is_empty(), "the fixture's matrix.json does not match the schema: {errors:#?}");

    let refused = |change: &dyn Fn(&mut serde_json::Value), what: &str| {
        let mut changed = json.clone();
        change(&mut changed);
        assert!(!validator.is_valid(&changed), "the schema accepts {what}");
    };
    refused(&|v| v["surprise"] = true.into(), "an unknown top-level field");
    refused(&|v| v["scenarios"][1]["surprise"] = true.into(), "an unknown field in a scenario");
    refused(
        &|v| v["scenarios"][1]["timeline"]["marks"][0]["surprise"] = true.into(),
        "an unknown field in a mark",
    );
    refused(
        &|v| v["scenarios"][1]["shown"]["operations"][0]["answers"][0]["surprise"] = true.into(),
        "an unknown field in an answer",
    );
    refused(
        &|v| v["rows"][0]["first_failure"] = serde_json::json!({"scenario": "S02"}),
        "a failure without its fields",
    );
    refused(&|v| v["schema_version"] = 99.into(), "schema_version 99");
    refused(&|v| v["rows"][0]["row"] = "Z9".into(), "row Z9");
    refused(&|v| v["scenarios"][0]["rows"][0] = "C11".into(), "a scenario covering row C11");
    refused(&|v| v["scenarios"][0]["id"] = "s1".into(), "scenario id s1");
    refused(&|v| v["verdict"] = "maybe".into(), "verdict maybe");
    refused(&|v| v["scenarios"][1]["failures"][0]["violations"][0]["oracle"] = "O99".into(), "oracle O99");
    refused(
        &|v| v["scenarios"][1]["shown"]["operations"][0]["answers"][0]["kind"] = "shout".into(),
        "request kind shout",
    );

    // The count maps take only the keys they can hold.
    refused(&|v| v["scenarios"][1]["counts"]["maybe"] = 1.into(), "a count of verdict maybe");
    refused(&|v| v["scenarios"][1]["oracle_counts"]["O99"] = 1.into(), "a count of oracle O99");
    refused(&|v| v["scenarios"][1]["statuses"]["done"] = 1.into(), "a count of status done");
    let mut accepted = json.clone();
    accepted["scenarios"][1]["counts"]["crashed"] = 1.into();
    accepted["scenarios"][1]["oracle_counts"]["O13"] = 1.into();
    accepted["scenarios"][1]["statuses"]["in_flight"] = 1.into();
    assert!(validator.is_valid(&accepted), "the schema refuses keys the maps can hold");
    refused(&|v| v["scenarios"][1]["builtin"] = "yes".into(), "builtin as a string");
    refused(&|v| drop(v["scenarios"][1].as_object_mut().unwrap().remove("time_ms")), "no time_ms");
    refused(&|v| v["schema_version"] = 5.into(), "schema_version 5");

    // What reads matrix.json back (`replaylab merge`) refuses unknown fields too.
    let mut unknown = json.clone();
    unknown["scenarios"][0]["timeline"]["surprise"] = true.into();
    assert!(serde_json::from_value::<MatrixResult>(unknown).is_err());
}
