//! Whole runs through the library and the `replaylab` binary: determinism, reproduce
//! commands, bad scenario files.

use crate::installed;
use crate::support;

use std::path::{Path, PathBuf};

use harness::executors;
use harness::runner;

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");

fn scenario(id: &str) -> scenarios::Scenario {
    scenarios::builtin_by_id(id).expect("a built-in scenario")
}

fn reference() -> executors::ExecutorSpec {
    executors::find("reference").expect("the reference executor is registered")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("replaylab-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn replaylab(args: &[&str]) -> (i32, String, String) {
    let output = installed::installed(REPLAYLAB, false).args(args).output().expect("replaylab runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_same_seed_gives_byte_identical_histories() {
    for id in ["S03", "S05", "S16", "S17"] {
        let scenario = scenario(id);
        let first = runner::run(&scenario, 7, &reference());
        let second = runner::run(&scenario, 7, &reference());
        assert_eq!(
            harness::history::to_json_lines(&first.history),
            harness::history::to_json_lines(&second.history),
            "{id}: two runs of seed 7 differ"
        );
        assert_eq!(first.result.history_digest, second.result.history_digest);
        assert!(first.history.len() > 10, "{id}: the run did something");
    }
}

/// The reference's claim store comes from the thread's warm pool, emptied between runs: a
/// run on a reused database must give the history of a run on a new one.
#[test]
fn a_reused_claim_store_gives_the_history_of_a_new_one() {
    // A new thread has no warm database yet: its first run creates one, the later runs reuse
    // it after other scenarios left rows (records, reconciliations, webhook events) behind.
    std::thread::spawn(|| {
        for id in ["S02", "S16", "S17"] {
            let first = runner::run(&scenario(id), 11, &reference());
            for other in ["S05", "S10"] {
                runner::run(&scenario(other), 11, &reference());
            }
            let again = runner::run(&scenario(id), 11, &reference());
            assert_eq!(
                harness::history::to_json_lines(&first.history),
                harness::history::to_json_lines(&again.history),
                "{id}: the run on a reused store differs"
            );
        }
    })
    .join()
    .expect("the runs finish");
}

#[test]
fn different_seeds_explore_different_interleavings() {
    let scenario = scenario("S05");
    let digests: std::collections::BTreeSet<String> =
        (0..8).map(|seed| runner::run(&scenario, seed, &reference()).result.history_digest).collect();
    assert!(digests.len() > 1, "eight seeds gave one history: the seed reaches nothing");
}

#[test]
fn the_reference_executor_passes_every_scenario() {
    for scenario in scenarios::builtin() {
        for seed in 0..3 {
            let record = runner::run(&scenario, seed, &reference());
            assert_eq!(
                record.result.verdict,
                harness::verdict::Verdict::Pass,
                "{} seed {seed}: {:?} {:?}",
                scenario.full_name(),
                record.result.violations,
                record.result.notes
            );
        }
    }
}

/// S01 with one expectation the reference cannot meet (two effects), as a user file.
fn failing_scenario_file(dir: &Path) -> PathBuf {
    let text = include_str!("../../../scenarios/matrix/S01_duplicate_same_key.toml")
        .replace("id = \"S01\"", "id = \"S91\"")
        .replace("name = \"duplicate_same_key\"", "name = \"impossible_expectation\"")
        .replace("operation = \"ticket\"\ncount = 1", "operation = \"ticket\"\ncount = 2");
    assert!(text.contains("count = 2"), "the fixture edit applied");
    let path = dir.join("S91 impossible.toml");
    std::fs::write(&path, text).expect("write the scenario");
    path
}

#[test]
fn a_failing_run_prints_a_command_that_reproduces_it() {
    let dir = temp_dir("reproduce");
    let file = failing_scenario_file(&dir);
    let (code, stdout, _) =
        replaylab(&["run", "S91", "--seed", "3", "--scenario-file", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    let command = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("reproduce: "))
        .unwrap_or_else(|| panic!("no reproduce line in {stdout}"))
        .to_owned();
    assert!(
        command.starts_with("replaylab run S91 --seed 3 --executor reference --scenario-file '"),
        "{command}"
    );
    let violation =
        stdout.lines().find(|line| line.contains("violation:")).expect("a violation line").to_owned();
    assert!(violation.contains("expected 2"), "{violation}");

    let output =
        installed::installed(REPLAYLAB, true).arg(&command).output().expect("the reproduce command runs");
    let again = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{again}");
    assert!(again.contains(&violation), "the reproduction failed differently:\n{again}");
}

#[test]
fn the_matrix_reports_a_failing_row_with_its_reproduce_command() {
    let dir = temp_dir("matrix-fail");
    let file = failing_scenario_file(&dir);
    let out = dir.join("out");
    let (code, stdout, stderr) = replaylab(&[
        "matrix",
        "--seeds",
        "2",
        "--scenario-file",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("S91_impossible_expectation first fail at seed 0"), "{stdout}");
    assert!(stdout.contains("reproduce: replaylab run S91 --seed 0"), "{stdout}");
    let matrix: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("matrix.json")).expect("matrix.json"))
            .expect("json");
    let rows = matrix["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().filter_map(|row| row["row"].as_str()).collect();
    assert_eq!(names.len(), 19 + 19, "C1..C10, F1..F9, and the prose scenarios S13..S31: {names:?}");
    assert_eq!(
        &names[19..],
        [
            "S13", "S14", "S15", "S16", "S17", "S18", "S19", "S20", "S21", "S22", "S23", "S24", "S25", "S26",
            "S27", "S28", "S29", "S30", "S31"
        ]
    );
    let c1 = rows.iter().find(|row| row["row"] == "C1").expect("C1");
    assert_eq!(c1["verdict"], "fail", "S91 covers C1 and fails");
    assert!(c1["first_failure"]["reproduce"].as_str().expect("reproduce").contains("--scenario-file"));
}

#[test]
fn bad_scenario_files_exit_2_with_file_and_line() {
    let dir = temp_dir("bad-scenarios");
    let base = include_str!("../../../scenarios/matrix/S01_duplicate_same_key.toml");
    let cases = [
        (
            "unknown-field.toml",
            base.replace("tool = \"tickets.create\"", "tool = \"tickets.create\"\ncolour = \"red\""),
            "colour",
        ),
        ("wrong-type.toml", base.replace("rows = [\"C1\", \"F1\"]", "rows = 3"), "invalid type"),
        (
            "unknown-step.toml",
            base.replace("action = \"expect_effects\"", "action = \"teleport\""),
            "teleport",
        ),
    ];
    for (name, text, expected) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        let (code, _, stderr) =
            replaylab(&["run", "S01", "--seed", "1", "--scenario-file", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {stderr}");
        let location = format!("{}:", path.display());
        assert!(stderr.contains(&location), "{name}: no file:line in {stderr}");
        let after = &stderr[stderr.find(&location).expect("location") + location.len()..];
        assert!(after.chars().next().is_some_and(|c| c.is_ascii_digit()), "{name}: no line number: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
    }
}

#[test]
fn bad_usage_exits_2() {
    for (args, expected) in [
        (vec!["run", "S01", "--seed", "minus-one"], "invalid value"),
        (vec!["run", "S99", "--seed", "1"], "no scenario"),
        (vec!["run", "S01", "--seed", "1", "--executor", "nobody"], "unknown executor"),
        (vec!["matrix", "--seeds", "0"], "at least 1"),
    ] {
        let (code, _, stderr) = replaylab(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// An executor that panics on every call (and, having claimed nothing, knows no operation).
fn panicking(
    _env: protocol::WorkerEnv,
    _call: protocol::ToolCall,
) -> protocol::LocalBoxFuture<'static, protocol::Outcome> {
    Box::pin(async { panic!("the executor under test fell over") })
}

fn no_such_operation() -> protocol::Outcome {
    protocol::Outcome::rejected(protocol::ReasonCode::InvalidRequest, "no operation with this key")
}

#[test]
fn an_executor_panic_is_caught_and_the_run_is_crashed_not_aborted() {
    let spec = support::scripted("panicking", panicking, no_such_operation);
    let record = runner::run(&scenario("S01"), 1, &spec);
    assert_eq!(record.result.verdict, harness::verdict::Verdict::Crashed, "{:?}", record.result);
    assert!(
        record.result.notes.iter().any(|note| note.contains("the executor under test fell over")),
        "{:?}",
        record.result.notes
    );
    assert!(record.ledger.is_empty());
    let final_polls = record
        .history
        .iter()
        .filter(|event| matches!(event.kind, harness::history::EventKind::OperationQuery { .. }))
        .count();
    assert!(final_polls > 0, "the run went on to its final polls after the panics");
}

/// A factory that refuses to start, one that panics, and an executor whose `start` panics:
/// each run is `crashed` with the error in its notes, and nothing panics out of the harness.
#[test]
fn an_executor_that_cannot_start_makes_the_run_crashed() {
    use std::rc::Rc;
    use std::sync::Arc;

    struct PanicsOnStart;
    impl protocol::ExecutorFactory for PanicsOnStart {
        fn start(&self, _env: protocol::WorkerEnv) -> Box<dyn protocol::Executor> {
            panic!("no config file")
        }
    }
    let spec = |name: &str, factory: executors::MakeFactory| executors::ExecutorSpec {
        factory,
        ..executors::ExecutorSpec::new(name, |_run: &str| Err("replaced".to_owned()))
    };
    let refuses = spec("refuses", Arc::new(|_run: &str| Err("the store is locked".to_owned())));
    let panics = spec("panics", Arc::new(|_run: &str| panic!("factory exploded")));
    let start_panics = spec(
        "start-panics",
        Arc::new(|_run: &str| Ok(Rc::new(PanicsOnStart) as Rc<dyn protocol::ExecutorFactory>)),
    );
    for (executor, expected) in [
        (refuses, "the executor's factory failed to start: the store is locked"),
        (panics, "the executor's factory failed to start: factory exploded"),
        (start_panics, "worker-1 panicked during start: no config file"),
    ] {
        let record = runner::run(&scenario("S01"), 1, &executor);
        assert_eq!(
            record.result.verdict,
            harness::verdict::Verdict::Crashed,
            "{}: {:?}",
            executor.name,
            record.result.violations
        );
        assert!(
            record.result.notes.iter().any(|note| note == expected),
            "{}: {:?}",
            executor.name,
            record.result.notes
        );
        assert_eq!(
            record.result.reproduce,
            format!("replaylab run S01 --seed 1 --executor {}", executor.name)
        );
    }
}

/// S19 draws what its expectation is about: worker-1's late write lands while worker-2, called
/// after worker-1's lease ran out, still works on the operation. S01 (one worker, no lease
/// running out) draws none.
#[test]
fn s19_lands_the_stale_owners_write_inside_the_new_owners_window() {
    let stale = runner::run(&scenario("S19"), 0, &reference());
    assert_eq!(stale.result.verdict, harness::verdict::Verdict::Pass, "{:?}", stale.result);
    assert!(stale.coverage.stale_writes >= 1, "{:?}", stale.coverage);
    assert_eq!(runner::run(&scenario("S01"), 0, &reference()).coverage.stale_writes, 0);
}

/// A scenario that needs what the executor does not declare is not run: `not applicable`,
/// with the reason, in runs and in the matrix; a row none of whose scenarios applied is not
/// applicable (never a pass), and a matrix where nothing applied is not a pass either.
#[test]
fn scenarios_an_executor_cannot_support_are_not_applicable_never_pass() {
    let tickets_only = reference().capabilities(protocol::ExecutorCapabilities::tools(["tickets.create"]));
    // S10 submits a delayed job; S16 sends a queued message; S01 creates tickets.
    let jobs = runner::run(&scenario("S10"), 1, &tickets_only);
    assert_eq!(jobs.result.verdict, reports::Verdict::NotApplicable);
    assert!(jobs.history.is_empty(), "nothing ran");
    assert_eq!(
        jobs.result.notes,
        ["not applicable: the scenario needs tool jobs.submit, delayed jobs, which executor reference does not declare"]
    );
    let queue = runner::run(&scenario("S16"), 1, &tickets_only);
    assert!(
        queue.result.notes[0].contains("tool messages.send, a queue consumer"),
        "{:?}",
        queue.result.notes
    );
    assert_eq!(runner::run(&scenario("S01"), 1, &tickets_only).result.verdict, reports::Verdict::Pass);

    let config = harness::matrix::MatrixConfig {
        executor: tickets_only.clone(),
        scenarios: vec![scenario("S01"), scenario("S10")],
        seeds: 2,
        jobs: 1,
        ..harness::matrix::MatrixConfig::default()
    };
    let result = harness::matrix::run(&config);
    let row = |name: &str| result.rows.iter().find(|row| row.row == name).expect("the row").verdict;
    assert_eq!(row("C1"), reports::Verdict::Pass);
    assert_eq!(row("C9"), reports::Verdict::NotApplicable, "S10 is C9's only scenario here");
    let s10 = result.scenarios.iter().find(|s| s.id == "S10").expect("S10");
    assert_eq!(s10.verdict, reports::Verdict::NotApplicable);
    assert_eq!(s10.counts.get(&reports::Verdict::NotApplicable), Some(&2));
    assert_eq!(s10.seeds_run, 0, "nothing ran");
    assert!(s10.failures.is_empty());
    for covered in result.rows.iter().filter(|row| !row.scenarios.is_empty()) {
        assert!(
            matches!(covered.verdict, reports::Verdict::Pass | reports::Verdict::NotApplicable),
            "{covered:?}"
        );
    }

    // Every built-in scenario that calls a tool other than tickets.create: nothing applies.
    let nothing =
        harness::matrix::MatrixConfig { scenarios: vec![scenario("S10"), scenario("S16")], ..config };
    let result = harness::matrix::run(&nothing);
    assert_ne!(result.verdict, reports::Verdict::Pass);
    assert!(result.scenarios.iter().all(|s| s.verdict == reports::Verdict::NotApplicable));
    for covered in result.rows.iter().filter(|row| !row.scenarios.is_empty()) {
        assert_eq!(covered.verdict, reports::Verdict::NotApplicable, "{covered:?}");
    }
}

/// The executor's `tracing` events, captured on simulated time: the same seed gives the same
/// log, byte for byte, and S19 shows the new owner's reasoning in order (lease expired,
/// claim taken over, receipt found, replayed), interleaved with the history.
#[test]
fn a_runs_log_is_deterministic_and_tells_the_executors_decisions_in_order() {
    let filter = harness::log::LogFilter::parse("debug").expect("a filter");
    let run = || runner::run_logged(&scenario("S19"), 1, &reference(), Some(&filter));
    let (first, second) = (run(), run());
    assert_eq!(first.result.verdict, reports::Verdict::Pass);
    let text = |record: &runner::RunRecord| harness::cli::trace_text(record);
    assert_eq!(text(&first), text(&second), "two runs of one seed must give the same log");
    assert_eq!(first.log, second.log);

    let worker_2: Vec<&str> = first
        .log
        .iter()
        .filter(|line| line.spans.iter().any(|span| span.starts_with("call{worker=worker-2")))
        .map(|line| line.text.as_str())
        .collect();
    let position = |needle: &str| {
        worker_2
            .iter()
            .position(|text| text.starts_with(needle))
            .unwrap_or_else(|| panic!("{needle:?} in {worker_2:#?}"))
    };
    let lease = position("the owner's lease ran out");
    let taken = position("took the claim over");
    let found = position("receipt lookup: found");
    let replayed = position("completed by compare-and-set on our claim");
    assert!(lease < taken && taken < found && found < replayed, "{worker_2:#?}");
    assert!(worker_2[replayed].contains("status=replayed"), "{}", worker_2[replayed]);

    // In the trace, each line follows the history event it came after.
    let trace = text(&first);
    let lookup_answer =
        trace.find("downstream -> worker-2: 200 to GET /v1/receipts/").expect("the lookup's answer");
    let found_line = trace.find("receipt lookup: found").expect("the executor's line");
    assert!(lookup_answer < found_line, "{trace}");

    // Off (the default), nothing is captured.
    assert!(runner::run(&scenario("S19"), 1, &reference()).log.is_empty());
}

/// A filter keeps only what it names: the executor's crate at debug shows no harness or
/// turmoil line.
#[test]
fn a_log_filter_keeps_only_the_targets_it_names() {
    let filter = harness::log::LogFilter::parse("executor=debug").expect("a filter");
    let record = runner::run_logged(&scenario("S19"), 1, &reference(), Some(&filter));
    assert!(!record.log.is_empty());
    assert!(record.log.iter().all(|line| line.target.starts_with("executor")), "{:#?}", record.log);
    let warn_only = harness::log::LogFilter::parse("executor=warn").expect("a filter");
    assert!(runner::run_logged(&scenario("S19"), 1, &reference(), Some(&warn_only)).log.is_empty());
}

/// A scenario with 1,000 operations, each created once: every final poll reaches one worker at
/// once (1,000 connections waiting to be accepted, where turmoil's default backlog of 64 made
/// the simulator panic and abort the whole matrix). It runs, and the reference passes it.
#[test]
fn a_scenario_of_a_thousand_operations_runs_and_passes() {
    use std::fmt::Write;
    const OPERATIONS: usize = 1_000;
    let mut text = String::from(
        "id = \"S90\"\nname = \"a_thousand_operations\"\nrows = [\"C1\"]\nsummary = \"s\"\nexpected = \"e\"\n",
    );
    for n in 0..OPERATIONS {
        let _ = write!(
            text,
            "\n[operations.op{n}]\ntenant = \"acme\"\nworkflow = \"run_{n}\"\nstep = \"create\"\n"
        );
    }
    for n in 0..OPERATIONS {
        let _ = write!(
            text,
            "\n[[step]]\naction = \"call\"\nid = \"c{n}\"\nworker = \"worker-1\"\noperation = \"op{n}\"\ntool = \"tickets.create\"\narguments = '{{\"subject\": \"s{n}\", \"body\": \"b\"}}'\n"
        );
    }
    let scenario = scenarios::Scenario::from_toml(&text, "thousand.toml").expect("a valid scenario");
    let record = runner::run(&scenario, 0, &reference());
    assert_eq!(record.result.verdict, harness::verdict::Verdict::Pass, "{:?}", record.result.notes);
    assert_eq!(record.ledger.len(), OPERATIONS, "one ticket per operation");
}

/// `replaylab` with `GITHUB_ACTIONS` set to `true` or removed: exit code, stdout.
fn replaylab_on_github(args: &[&str], github: bool) -> (i32, String) {
    let mut command = installed::installed(REPLAYLAB, false);
    if github {
        command.env("GITHUB_ACTIONS", "true");
    } else {
        command.env_remove("GITHUB_ACTIONS");
    }
    let output = command.args(args).output().expect("replaylab runs");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into_owned())
}

fn annotations(stdout: &str) -> Vec<&str> {
    stdout.lines().filter(|line| line.starts_with("::")).collect()
}

/// Under GitHub Actions (`GITHUB_ACTIONS=true`), `run` and `matrix` print one `::error` line
/// per failing scenario: a user's file as given, at the failing `expect`'s line (the line the
/// parser read it from), with the reproduce command; a built-in scenario at no file. Without
/// the variable, none. junit.xml points at the same file and line.
#[test]
fn github_annotations_point_at_the_failing_expect_line_only_under_github_actions() {
    let dir = temp_dir("annotations");
    let file = failing_scenario_file(&dir);
    let path = file.to_str().unwrap();
    let parsed = scenarios::Scenario::from_file(&file).expect("the scenario parses");
    let expect_line = parsed
        .steps
        .iter()
        .find(|step| matches!(step.kind, scenarios::StepKind::ExpectEffects { count: 2, .. }))
        .expect("the failing expectation")
        .line;
    assert_ne!(expect_line, parsed.line, "the expectation is not on the id line");
    // GitHub's escaping of a property value: `:` and `,` (and `%`) are escaped.
    let file_property = path.replace('%', "%25").replace(':', "%3A").replace(',', "%2C");

    let run = ["run", "S91", "--seed", "3", "--scenario-file", path];
    let (code, stdout) = replaylab_on_github(&run, true);
    assert_eq!(code, 1, "{stdout}");
    let lines = annotations(&stdout);
    assert_eq!(lines.len(), 1, "{stdout}");
    let prefix = format!("::error file={file_property},line={expect_line},title=replaylab%3A S91_impossible_expectation seed 3%3A fail::expect ");
    assert!(lines[0].starts_with(&prefix), "{}\nwanted {prefix}", lines[0]);
    assert!(
        lines[0].contains("%0Areproduce: replaylab run S91 --seed 3 --executor reference --scenario-file "),
        "{}",
        lines[0]
    );
    let (code, stdout) = replaylab_on_github(&run, false);
    assert_eq!(code, 1);
    assert!(annotations(&stdout).is_empty(), "no annotations outside GitHub Actions: {stdout}");

    let out = dir.join("annotated");
    let matrix = [
        "matrix",
        "--seeds",
        "2",
        "--only",
        "S01,S91",
        "--scenario-file",
        path,
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, stdout) = replaylab_on_github(&matrix, true);
    assert_eq!(code, 1, "{stdout}");
    let lines = annotations(&stdout);
    assert_eq!(lines.len(), 1, "S91 fails, S01 passes: {stdout}");
    let prefix = format!(
        "::error file={file_property},line={expect_line},title=replaylab%3A S91 impossible_expectation fail (C1%2C F1)::S91 seed 0 fail: expect "
    );
    assert!(lines[0].starts_with(&prefix), "{}\nwanted {prefix}", lines[0]);
    assert!(lines[0].contains("%0Areproduce: replaylab run S91 --seed 0 "), "{}", lines[0]);
    assert!(lines[0].ends_with("%0A2 of 2 runs did not pass"), "{}", lines[0]);
    let junit = std::fs::read_to_string(out.join("junit.xml")).expect("junit.xml");
    let xml_path =
        path.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;");
    assert!(junit.contains(&format!(" file=\"{xml_path}\" line=\"{expect_line}\"")), "{junit}");
    assert!(
        junit.contains("file: built into replaylab (scenarios/matrix/S01_duplicate_same_key.toml"),
        "{junit}"
    );
    let (code, stdout) = replaylab_on_github(&matrix, false);
    assert_eq!(code, 1);
    assert!(annotations(&stdout).is_empty(), "{stdout}");

    // A built-in scenario: no file (it is not in the user's repository), no line.
    let (code, stdout) =
        replaylab_on_github(&["run", "S02", "--seed", "0", "--executor", "mutant:blind_retry"], true);
    assert_eq!(code, 1, "{stdout}");
    let lines = annotations(&stdout);
    assert_eq!(lines.len(), 1, "{stdout}");
    assert!(
        lines[0].starts_with("::error title=replaylab%3A S02_lost_response_after_commit seed 0%3A fail::O"),
        "{}",
        lines[0]
    );
}

/// A scenario's `time_ms` in matrix.json is the simulated time its runs spanned: the same
/// seeds give the same number (the reports stay byte-stable), and it is not zero.
#[test]
fn a_simulated_scenarios_time_is_simulated_and_the_same_for_the_same_seeds() {
    let config = harness::matrix::MatrixConfig {
        scenarios: vec![scenario("S02")],
        seeds: 2,
        jobs: 2,
        log: None,
        ..harness::matrix::MatrixConfig::default()
    };
    let first = harness::matrix::run(&config);
    let again = harness::matrix::run(&config);
    let time = first.scenarios[0].time_ms;
    assert!(time > 0, "S02's runs span simulated time");
    assert_eq!(time, again.scenarios[0].time_ms);
    let spans: u64 = (0..2)
        .map(|seed| runner::run(&scenario("S02"), seed, &reference()).history.last().expect("events").at_ms)
        .sum();
    assert_eq!(time, spans, "the sum of the runs' last events' simulated times");
    assert!(first.scenarios[0].builtin, "S02 is built in");
    assert_eq!(reports::render_json(&first), reports::render_json(&again));
}
