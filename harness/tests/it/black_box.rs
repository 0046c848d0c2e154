//! The black-box world through the whole command (issue 14): `--executor-cmd` starts real
//! MCP server processes, kills them with SIGKILL between a commit and its answer, and judges
//! them with the same scenarios and oracles as the simulated world.
//!
//! - The reference served as an MCP server (`replaylab executor serve`) passes the lost
//!   answer (S02), the crash between effect and record (S03) and the concurrent claim (S05)
//!   with two worker processes on one SQLite file; the report says the run was black-box and
//!   not deterministic, and where the time went.
//! - The naive Python example fails the rows of lost answers and crashes after commit, and
//!   the reproduce command it prints fails again as printed.
//! - Bad input exits 2 before any run.
//!
//! Real processes on real time: the assertions are about verdicts and premises, never about
//! how long anything took.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs the binary as a user would, outside Cargo: its reproduce commands then name the
/// binary itself (under `cargo test` they would say `cargo run ...`, and running one would
/// build the harness again in the middle of the test).
pub(crate) fn replaylab(arguments: &[&str]) -> Output {
    Command::new(REPLAYLAB)
        .env_remove("CARGO")
        .env_remove("CARGO_PKG_NAME")
        .args(arguments)
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .expect("replaylab runs")
}

pub(crate) fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// A scratch directory of this test's own.
pub(crate) fn scratch(test: &str) -> PathBuf {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("black-box").join(test);
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("a scratch directory");
    directory
}

pub(crate) fn matrix_json(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("matrix.json")).expect("matrix.json was written");
    serde_json::from_str(&text).expect("matrix.json is JSON")
}

pub(crate) fn scenario<'a>(matrix: &'a Value, id: &str) -> &'a Value {
    matrix["scenarios"].as_array().expect("scenarios").iter().find(|s| s["id"] == id).expect("the scenario")
}

pub(crate) fn row<'a>(matrix: &'a Value, id: &str) -> &'a Value {
    matrix["rows"].as_array().expect("rows").iter().find(|r| r["row"] == id).expect("the row")
}

/// The checked-in matrix.json schema accepts `matrix`.
pub(crate) fn assert_valid(matrix: &Value) {
    let path = root().join("reports/schema/matrix.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the schema")).expect("JSON");
    let validator = jsonschema::validator_for(&schema).expect("a JSON Schema");
    let errors: Vec<String> =
        validator.iter_errors(matrix).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "matrix.json breaks its schema: {errors:#?}");
}

/// The black-box matrix of the reference over MCP (two processes on one SQLite file), one
/// repeat of the scenarios `only` names, its reports in `out`.
fn reference_matrix(out: &Path, only: &str) -> Output {
    let command = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let out = out.display().to_string();
    let arguments = ["matrix", "--executor-cmd", &command, "--workers", "2", "--repeat", "1", "--only", only];
    replaylab(&[&arguments[..], &["--out", &out]].concat())
}

#[test]
fn the_reference_as_an_mcp_server_passes_lost_answers_and_crashes_after_commit() {
    let out = scratch("reference");
    let output = reference_matrix(&out, "S02,S03,S05");
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains("Not deterministic: real processes on real time"), "{said}");
    let matrix = matrix_json(&out);
    assert_valid(&matrix);
    for id in ["S02", "S03", "S05"] {
        let summary = scenario(&matrix, id);
        assert_eq!(summary["verdict"], "pass", "{id}: {summary:#}");
        assert_eq!(summary["seeds_run"], 1, "{id}");
    }
    // S03's premise: the worker was killed while the downstream held the answer to a request
    // it had committed; the restarted process answered the retry from the one effect.
    let shown = &scenario(&matrix, "S03")["shown"];
    assert_eq!(shown["effect_references"], serde_json::json!(["ticket_1"]), "{shown:#}");
    let marks = scenario(&matrix, "S03")["timeline"]["marks"].as_array().expect("marks").clone();
    let labels: Vec<&str> = marks.iter().filter_map(|mark| mark["label"].as_str()).collect();
    let paused = labels
        .iter()
        .position(|label| label.starts_with("paused at downstream:after") && label.ends_with("(committed)"));
    let crash = labels.iter().position(|label| *label == "crash");
    assert!(
        paused.zip(crash).is_some_and(|(paused, crash)| paused < crash),
        "the timeline shows the answer held after the commit, then the crash: {labels:#?}"
    );
    let black_box = &matrix["black_box"];
    assert_eq!(black_box["deterministic"], false);
    assert_eq!(black_box["workers"], 2);
    assert_eq!(black_box["capabilities_from"], "manifest");
    assert!(black_box["time"]["wall_ms"].as_u64().is_some_and(|ms| ms > 0), "{black_box:#}");
    let judged: Vec<&str> =
        black_box["oracles_judged"].as_array().expect("a list").iter().filter_map(Value::as_str).collect();
    assert!(judged.contains(&"O1") && judged.contains(&"O4"), "{judged:?}");
    let run = &scenario(&matrix, "S02")["shown"];
    assert!(
        run["real_time"]["wall_ms"].as_u64().is_some(),
        "each black-box run says where its time went: {run:#}"
    );
    assert!(run["reproduce"].as_str().is_some_and(|command| command.contains("--executor-cmd")), "{run:#}");
}

/// The same server over streamable HTTP: the process serves MCP at
/// `http://127.0.0.1:{port}/mcp`, and the black-box world drives it there.
#[test]
fn the_reference_passes_over_streamable_http_too() {
    let command = format!("{REPLAYLAB} executor serve --transport http --store sqlite:{{state}}/claims.db");
    let output = replaylab(&["run", "S03", "--seed", "0", "--executor-cmd", &command, "--transport", "http"]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains(": pass"), "{said}");
    // A server that does not serve HTTP is bad input before any run. Its port never opens, so
    // the probe waits out its patience (120 s unless told: a short one here).
    let stdio_only = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let output = replaylab(&[
        "run",
        "S03",
        "--seed",
        "0",
        "--executor-cmd",
        &stdio_only,
        "--transport",
        "http",
        "--start-timeout",
        "5s",
    ]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("not an MCP server replaylab can drive"), "{said}");
}

/// `--key-argument idempotency_key` puts the operation's key among the arguments as well; the
/// reference takes it as transport (it validates the business arguments only) and passes.
#[test]
fn the_key_as_an_argument_is_transport_to_the_reference() {
    let command = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let output = replaylab(&[
        "run",
        "S06",
        "--seed",
        "0",
        "--executor-cmd",
        &command,
        "--key-argument",
        "idempotency_key",
    ]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains(": pass"), "{said}");
}

/// A server whose downstream timeout (30 s) is longer than the agent's (10 s) still waits on a
/// delayed ticket POST when the agent gives up. The final poll used to come 5 s later, while the
/// request was open: `unknown`, and false O6 and O13 against the reference. The settle phase
/// now runs from when the processes' open downstream requests end.
#[test]
fn the_settle_waits_for_a_downstream_request_the_server_still_waits_on() {
    let directory = scratch("slow_downstream");
    let file = directory.join("slow_downstream.toml");
    std::fs::write(
        &file,
        r#"id = "S92"
name = "slow_downstream"
rows = ["prose"]
summary = "A ticket POST is delayed 20 s before it commits; the server waits up to 30 s."
expected = "The server records the ticket when the answer comes; the final poll replays it."

[timing]
lease = "2s"

[downstream.tickets]
idempotency = "honoured"
receipts = true

[operations.create]
tenant = "acme"
workflow = "run_827"
step = "record_issue"

[[step]]
action = "fault"
rule = { match = { method = "POST", path = "/v1/tickets" }, action = "delay_before_commit", delay = "20s", times = 1 }

[[step]]
action = "call"
id = "create"
worker = "worker-1"
operation = "create"
tool = "tickets.create"
arguments = '{"subject": "s", "body": "b"}'
"#,
    )
    .expect("the scenario is written");
    let command = format!(
        "REPLAYLAB_DOWNSTREAM_TIMEOUT_MS=30000 {REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db"
    );
    let file = file.display().to_string();
    let output = replaylab(&[
        "run",
        "S92",
        "--seed",
        "0",
        "--scenario-file",
        &file,
        "--executor-cmd",
        &command,
        "--workers",
        "1",
    ]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains(": pass"), "{said}");
    assert!(said.contains("effects in the ledger: 1 (ticket_1)"), "{said}");
}

/// The venv's python with the examples' packages, or `None` (outside CI) after saying how
/// to set it up.
pub(crate) fn python() -> Option<PathBuf> {
    let python = std::env::var_os("REPLAYLAB_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/python-venv/bin/python"));
    let ready = Command::new(&python)
        .args(["-c", "import mcp"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|output| output.status.success());
    if ready {
        return Some(python);
    }
    let how = format!(
        "{} cannot import mcp: run `.ci/python-examples` (or set REPLAYLAB_PYTHON)",
        python.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{how}");
    eprintln!("SKIPPED: {how}");
    None
}

#[test]
fn the_naive_python_server_fails_lost_answers_and_its_reproduce_command_fails_again() {
    let Some(python) = python() else { return };
    let out = scratch("naive");
    let command =
        format!("{} {}", python.display(), root().join("examples/python-mcp-naive/server.py").display());
    let output = replaylab(&[
        "matrix",
        "--executor-cmd",
        &command,
        "--repeat",
        "1",
        "--only",
        "S02,S03",
        "--out",
        &out.display().to_string(),
    ]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    let matrix = matrix_json(&out);
    assert_valid(&matrix);
    assert_eq!(matrix["black_box"]["capabilities_from"], "tools/list", "the naive server has no manifest");
    for id in ["C2", "C3"] {
        assert_eq!(row(&matrix, id)["verdict"], "fail", "{id}: {:#}", row(&matrix, id));
    }
    let failure = &scenario(&matrix, "S02")["failures"][0];
    let oracles: Vec<&str> =
        failure["oracles"].as_array().expect("oracles").iter().filter_map(Value::as_str).collect();
    assert!(oracles.contains(&"O1"), "a second ticket for one operation: {failure:#}");
    assert!(
        !oracles.contains(&"O2") && !oracles.contains(&"O8"),
        "a bare success claim names nothing to hold against the ledger: {failure:#}"
    );
    // The reproduce command works as printed.
    let reproduce = failure["reproduce"].as_str().expect("a reproduce command");
    assert!(reproduce.contains("run S02") && reproduce.contains("--executor-cmd"), "{reproduce}");
    let again = Command::new("sh").arg("-c").arg(reproduce).current_dir(root()).stdin(Stdio::null()).output();
    let again = again.expect("the reproduce command runs");
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("single_effect"), "{}", text(&again));
}

#[test]
fn bad_black_box_input_exits_2_before_any_run() {
    let out = scratch("bad");
    let out = out.display().to_string();
    let serve = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let cases: [(Vec<&str>, &str); 7] = [
        (vec!["matrix", "--executor-cmd", "true", "--out", &out], "not an MCP server replaylab can drive"),
        (vec!["matrix", "--executor-cmd", "  ", "--out", &out], "--executor-cmd is empty"),
        (
            vec!["matrix", "--executor-cmd", &serve, "--workers", "0", "--out", &out],
            "--workers must be 1 to 16",
        ),
        (vec!["matrix", "--executor-cmd", &serve, "--transport", "smoke", "--out", &out], "must be stdio"),
        (vec!["matrix", "--repeat", "2", "--out", &out], "--executor-cmd"),
        (
            vec!["matrix", "--executor-cmd", &serve, "--key-argument", "a b", "--out", &out],
            "letters, digits and _",
        ),
        (
            vec!["run", "S02", "--seed", "0", "--executor-cmd", &serve, "--check-determinism"],
            "need the simulated world",
        ),
    ];
    for (arguments, expected) in cases {
        let output = replaylab(&arguments);
        let said = text(&output);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {said}");
        assert!(said.contains(expected), "{arguments:?}: {said}");
    }
    assert!(!Path::new(&out).join("matrix.json").exists(), "nothing was written");
    let output = replaylab(&["matrix", "--only", "S99", "--out", &out]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("--only: no scenario"), "{}", text(&output));
}

/// Whether process `pid` is gone (or a zombie, dead and waiting to be reaped), within 5 s.
fn dies(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next()))
            .flatten();
        if state.is_none_or(|state| state == 'Z') {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A server command that forks a child (writing its pid to `DIR/child-{worker}-{incarnation}`),
/// then does `then`.
fn forking(directory: &Path, then: &str) -> String {
    format!(
        "sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {}/child-{{worker}}-$REPLAYLAB_INCARNATION; {then}",
        directory.display()
    )
}

/// The children a test's server forked: every pid file in `directory`.
fn children(directory: &Path) -> Vec<(String, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(directory).expect("the scratch directory").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("child-") {
            let pid = std::fs::read_to_string(entry.path()).expect("a pid file");
            found.push((name, pid.trim().parse().expect("a pid")));
        }
    }
    found
}

/// The children a test's server forked whose pid file is written already.
fn written_children(directory: &Path) -> Vec<(String, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(directory).expect("the scratch directory").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if let (true, Ok(pid)) = (name.starts_with("child-"), pid.trim().parse()) {
            found.push((name, pid));
        }
    }
    found
}

/// Every way a server process can fail to start kills its process group: a child it forked
/// does not outlive it (before, a failed handshake left it running).
#[test]
fn a_server_that_fails_to_start_leaves_no_child_behind() {
    let refuse = r#"read line; printf '{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"refused"}}\n'; sleep 300"#;
    let serve = format!("exec {REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let cases: [(&str, String, &str); 4] = [
        ("refuses_initialize", refuse.to_owned(), "refused"),
        ("exits", "exit 3".to_owned(), "failed the MCP handshake"),
        ("never_answers", "sleep 300".to_owned(), "did not finish the MCP handshake within 2 s"),
        (
            "fails_its_restart",
            format!("if [ \"$REPLAYLAB_INCARNATION\" = 0 ]; then {serve}; else exit 3; fi"),
            "incarnation 1",
        ),
    ];
    for (case, then, said) in cases {
        let directory = scratch(&format!("orphans_{case}"));
        let command = forking(&directory, &then);
        // S03 kills worker-1 after the commit; the settle phase starts it again.
        let output =
            replaylab(&["run", "S03", "--seed", "0", "--executor-cmd", &command, "--start-timeout", "2s"]);
        let text = text(&output);
        assert!(text.contains(said), "{case}: {text}");
        let children = children(&directory);
        assert!(!children.is_empty(), "{case}: the server forked no child: {text}");
        for (name, pid) in children {
            assert!(dies(pid), "{case}: {name} (pid {pid}) outlived its server: {text}");
        }
    }
}

/// A harness stopped by a signal (Ctrl-C's `SIGINT`, a CI runner's `SIGTERM` at its timeout)
/// kills every server it started and what they forked, removes its run directories, and
/// exits 128 + the signal's number. Before, the servers lived on: each leads a process group of
/// its own, which Ctrl-C never reaches, and an HTTP server (or a child a stdio server forked)
/// does not stop when the harness's end of a pipe closes.
#[test]
fn a_signal_that_stops_the_harness_ends_every_server_it_started() {
    for (signal, code, transport) in [("INT", 130, "stdio"), ("TERM", 143, "http")] {
        let directory = scratch(&format!("stopped_by_sig{signal}"));
        let serve = format!(
            "exec {REPLAYLAB} executor serve --transport {transport} --store sqlite:{{state}}/claims.db"
        );
        let command = forking(&directory, &serve);
        let out = directory.join("report").display().to_string();
        let mut harness = Command::new(REPLAYLAB)
            .env_remove("CARGO")
            .env_remove("CARGO_PKG_NAME")
            .args(["matrix", "--executor-cmd", &command, "--transport", transport])
            .args(["--workers", "2", "--repeat", "50", "--only", "S02,S03", "--out", &out])
            .current_dir(root())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("replaylab starts");
        // The probe's process and two of the runs' (each forks a child) are up: the matrix runs.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while written_children(&directory).len() < 3 {
            assert!(std::time::Instant::now() < deadline, "SIG{signal}: no run started within 120 s");
            assert!(
                harness.try_wait().expect("waits").is_none(),
                "SIG{signal}: replaylab ended before the signal"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let pid = harness.id();
        let sent = Command::new("kill").args(["-s", signal, &pid.to_string()]).status().expect("kill runs");
        assert!(sent.success(), "SIG{signal} was not sent");
        let output = harness.wait_with_output().expect("replaylab ends");
        let said = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(output.status.code(), Some(code), "SIG{signal}: {said}");
        assert!(said.contains(&format!("stopped by SIG{signal}: killed the ")), "SIG{signal}: {said}");
        // (A shell killed between creating its pid file and writing it leaves it empty: its
        // child was in its group too, but has no pid to check.)
        let children = written_children(&directory);
        assert!(children.len() >= 3, "SIG{signal}: {children:?}");
        for (name, pid) in children {
            assert!(dies(pid), "SIG{signal}: {name} (pid {pid}) outlived the harness: {said}");
        }
        let prefix = format!("replaylab-black-box-{pid}-");
        let left: Vec<String> = std::fs::read_dir(std::env::temp_dir())
            .expect("the temporary directory")
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "SIG{signal}: run directories left behind: {left:?}");
        assert!(
            !Path::new(&out).join("matrix.json").exists(),
            "SIG{signal}: a report of an unfinished matrix"
        );
    }
}

/// A server that is never polled (no `replaylab.poll`: `executor serve --no-poll`) is judged on
/// what the harness sees (issue 45). Where the downstream offers no way to find out (S25), its
/// last answer is its final word: `unknown` with no hand-over to the operators' queue fails O13
/// (M28 unknown_kept_quiet: it passed before, no poll ever asking), and the reference, which
/// hands it over, passes. Where the executor could resolve the operation (S12: the key is
/// honoured), whether it did is never asked: the report says that rule was not judged.
#[test]
fn a_server_that_is_never_polled_is_judged_on_its_last_answer_or_says_what_was_not_judged() {
    let serve = |extra: &str| {
        format!("{REPLAYLAB} executor serve --no-poll {extra} --store sqlite:{{state}}/claims.db")
    };
    let output =
        replaylab(&["run", "S25", "--seed", "0", "--executor-cmd", &serve("--mutant unknown_kept_quiet")]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(said.contains("violation: O13") && said.contains("no reconciliation entry was filed"), "{said}");
    let output = replaylab(&["run", "S25", "--seed", "0", "--executor-cmd", &serve("")]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let out = scratch("never_polled");
    let out_text = out.display().to_string();
    let command = serve("");
    let output = replaylab(&[
        "matrix",
        "--executor-cmd",
        &command,
        "--repeat",
        "1",
        "--only",
        "S12",
        "--out",
        &out_text,
    ]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(
        said.contains(
            "Not judged here: O13's rule that an operation the executor could resolve ends resolved"
        ),
        "{said}"
    );
    let matrix = matrix_json(&out);
    assert_eq!(
        matrix["black_box"]["rules_not_judged"].as_array().map(Vec::len),
        Some(1),
        "{}",
        matrix["black_box"]
    );
    assert_valid(&matrix);
}

/// An exploration of real processes stopped by Ctrl-C after its first finding leaves a record
/// of it (issue 46): `found-so-far.txt` in `--out` names each finding's oracle, its case file
/// (written too) and the command that reproduces it, marked not confirmed; the harness says
/// where the record is and exits 130. Before, a stopped exploration kept nothing.
#[test]
fn an_exploration_stopped_after_a_finding_leaves_its_record() {
    let directory = scratch("explore_stopped");
    let out = directory.join("out");
    let command =
        format!("{REPLAYLAB} executor serve --mutant blind_retry --store sqlite:{{state}}/claims.db");
    let mut harness = Command::new(REPLAYLAB)
        .env_remove("CARGO")
        .env_remove("CARGO_PKG_NAME")
        .args(["explore", "--executor-cmd", &command, "--seeds", "2000", "--jobs", "4", "--out"])
        .arg(&out)
        .current_dir(&directory)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("replaylab starts");
    let found = out.join("found-so-far.txt");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !found.exists() {
        assert!(std::time::Instant::now() < deadline, "no finding within 300 s");
        assert!(harness.try_wait().expect("waits").is_none(), "explore ended before the signal");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let sent =
        Command::new("kill").args(["-s", "INT", &harness.id().to_string()]).status().expect("kill runs");
    assert!(sent.success(), "SIGINT was not sent");
    let output = harness.wait_with_output().expect("replaylab ends");
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(130), "{said}");
    assert!(said.contains("finding(s) so far (not confirmed) are in"), "{said}");
    assert!(said.contains("found-so-far.txt"), "{said}");
    let record = std::fs::read_to_string(&found).expect("the record");
    let first = record.lines().find(|line| line.starts_with("seed ")).expect("a finding");
    // `seed 14: O1, NOT CONFIRMED: O1 single_effect (ticket_created)`
    let (seed, rest) = first.trim_start_matches("seed ").split_once(": ").expect("seed: oracle");
    let oracle = rest.split(',').next().expect("an oracle");
    assert!(oracle.starts_with('O') && rest.contains("NOT CONFIRMED"), "{record}");
    let case = format!("found-seed-{seed}-{oracle}.toml");
    assert!(out.join(&case).is_file(), "{case} was not written: {record}");
    let reproduce = record
        .lines()
        .find_map(|line| line.trim().strip_prefix("reproduce, from this directory: "))
        .expect("a reproduce command");
    assert!(reproduce.contains(&format!("run --case {case} --executor-cmd")), "{reproduce}");
    assert!(reproduce.ends_with("--workers 2 --repeat 10"), "{reproduce}");
    assert!(!out.join("explore.json").exists(), "a record of an exploration that did not end");
    // (Run as printed, it fails again: 10 repeats of a drawn case, up to 40 s each, measured
    // by hand in the closing note of issue 46; too long for a test.)
}

/// A server that burns 1.5 s of CPU before it answers `initialize` (the careful Python example
/// behind a busy loop, as a server importing heavy libraries is) passes at the default settings:
/// no run is `crashed` for its start (every run was, at a fixed 30 s handshake limit and eight
/// runs side by side on two cores).
#[test]
fn a_slow_starting_server_passes_at_the_default_settings() {
    let Some(python) = python() else { return };
    let python = python.display().to_string();
    let server = root().join("examples/python-mcp-executor/server.py");
    let burn = "import time; t = time.process_time(); [0 for _ in iter(lambda: time.process_time() - t < 1.5, False)]";
    let command = format!("{python} -c '{burn}' && exec {python} {}", server.display());
    let out = scratch("slow_starter");
    let out = out.display().to_string();
    let output = replaylab(&[
        "matrix",
        "--executor-cmd",
        &command,
        "--repeat",
        "1",
        "--only",
        "S02,S03,S27",
        "--out",
        &out,
    ]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains("run(s) side by side: the server's one process started in"), "{said}");
    let matrix = matrix_json(Path::new(&out));
    for id in ["S02", "S03", "S27"] {
        let scenario = scenario(&matrix, id);
        assert_eq!(scenario["verdict"], "pass", "{id}: {scenario}");
    }
}

/// The black-box world sees a process give up on a late answer too: the process closes its
/// connection at its timeout, before the answer is written, and the boundary never records
/// the answer. The reference told (against S27's 4 s) to wait only 1 s answers `unknown`, as it
/// should; the run is `unknown` naming the `told` premise, never `fail`. Then, as asked, it
/// passes.
#[test]
fn a_process_that_stopped_waiting_for_the_late_answer_makes_the_run_unknown() {
    let impatient = format!(
        "env REPLAYLAB_DOWNSTREAM_TIMEOUT_MS=1000 {REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db"
    );
    let output = replaylab(&["run", "S27", "--seed", "0", "--executor-cmd", &impatient]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(said.contains(": unknown"), "{said}");
    assert!(said.contains("stopped waiting (its downstream timeout ran out first)"), "{said}");
    assert!(!said.contains(": fail"), "{said}");
    let patient = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let output = replaylab(&["run", "S27", "--seed", "0", "--executor-cmd", &patient]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
}

/// The process world gives processes the reference's default downstream timeout unless a
/// scenario names one: the same 2 s the simulated reference waits (the process world does not
/// depend on the executor crate, so this test keeps the two numbers together).
#[test]
fn processes_get_the_references_default_downstream_timeout() {
    assert_eq!(world_process::PROCESS_DOWNSTREAM_TIMEOUT, executor::DEFAULT_DOWNSTREAM_TIMEOUT);
}

/// The queue and webhooks are the harness's in the process world too: the reference over MCP
/// serves `messages.send` and `replaylab.consume` and receives webhooks, and the scenarios that
/// need them (and delayed jobs: C9, F9) apply and pass. S16's premise, a consumer killed after
/// it acted but before the queue heard its ack, happens: the timeline shows the pause, then
/// the crash, then the redelivery. S17's duplicate and extra webhook events reach the process.
#[test]
fn the_queue_and_webhooks_reach_processes_and_their_scenarios_pass() {
    let out = scratch("queue_webhooks");
    let output = reference_matrix(&out, "S10,S16,S17,S23,S31");
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let matrix = matrix_json(&out);
    for id in ["S10", "S16", "S17", "S23", "S31"] {
        assert_eq!(scenario(&matrix, id)["verdict"], "pass", "{id}: {:#}", scenario(&matrix, id));
    }
    for id in ["C9", "F9"] {
        assert_eq!(row(&matrix, id)["verdict"], "pass", "{id}");
    }
    let labels = |id: &str| -> Vec<String> {
        scenario(&matrix, id)["timeline"]["marks"]
            .as_array()
            .expect("marks")
            .iter()
            .filter_map(|mark| mark["label"].as_str().map(str::to_owned))
            .collect()
    };
    let s16 = labels("S16");
    let paused = s16.iter().position(|label| label == "paused at queue:before_ack");
    let crash = s16.iter().position(|label| label == "crash");
    let redelivered = s16.iter().rposition(|label| label == "queue delivery 2");
    assert!(
        paused.zip(crash).zip(redelivered).is_some_and(|((p, c), r)| p < c && c < r),
        "S16: held before the ack, killed, delivered again: {s16:#?}"
    );
    let s17 = labels("S17");
    for ack in ["processed", "duplicate_event", "already_settled"] {
        assert!(s17.iter().any(|label| label.ends_with(&format!(": {ack}"))), "S17 {ack}: {s17:#?}");
    }
}

/// The zoo's defects in the queue, the webhooks and delayed jobs, served as processes
/// (`executor serve --mutant`), fail the scenario the simulation catches them with: the
/// process world judges the new parts, it does not just pass them.
#[test]
fn mutants_of_the_queue_webhooks_and_jobs_fail_as_processes_too() {
    for (mutant, id, oracle) in [
        ("consumer_no_claim", "S16", "O1"),
        ("webhook_no_dedupe", "S17", "O1"),
        ("resubmit_job", "S10", "O10"),
        ("queued_taken_over", "S31", "expect"),
        // And a key minted per process, which only a real restart shows.
        ("process_minted_key", "S32", "O1"),
        // And a rerun where the provider has no key and no receipts (S33, GitHub's way).
        ("unknown_run_again", "S33", "O1"),
    ] {
        let command =
            format!("{REPLAYLAB} executor serve --mutant {mutant} --store sqlite:{{state}}/claims.db");
        let output = replaylab(&["run", id, "--seed", "0", "--executor-cmd", &command, "--workers", "2"]);
        let said = text(&output);
        assert_eq!(output.status.code(), Some(1), "{mutant} {id}: {said}");
        assert!(said.contains(": fail"), "{mutant} {id}: {said}");
        assert!(said.contains(&format!("violation: {oracle}")), "{mutant} {id}: {said}");
        assert!(said.contains(&format!("replaylab-mutant-{mutant}")), "{mutant}: {said}");
    }
    // A mutant whose defect is not a decision cannot be served.
    let output =
        replaylab(&["executor", "serve", "--mutant", "in_memory_claims", "--store", "sqlite:/tmp/x.db"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("where the claims live"), "{}", text(&output));
}

/// `matrix --require` gates a black-box matrix too, and its junit.xml times each scenario by
/// the real (wall) time of its runs, saying so.
#[test]
fn a_black_box_matrix_requires_rows_and_times_junit_by_real_time() {
    let out = scratch("require");
    let command = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let out_text = out.display().to_string();
    let output = replaylab(&[
        "matrix",
        "--executor-cmd",
        &command,
        "--repeat",
        "1",
        "--only",
        "S01",
        "--require",
        "C1,C2",
        "--out",
        &out_text,
    ]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "C2 was required and not run: {said}");
    assert!(
        said.contains(
            "required rows: 1 of 2 did not pass:\n  C2: not run: no scenario of this run covers it\n"
        ),
        "{said}"
    );
    assert!(said.contains("\n2 of 2 rows applied; 0 not applicable\nverdict: pass\n"), "{said}");
    let matrix = matrix_json(&out);
    assert_valid(&matrix);
    let s01 = scenario(&matrix, "S01");
    let time_ms = s01["time_ms"].as_u64().expect("time_ms");
    assert_eq!(Some(time_ms), s01["shown"]["real_time"]["wall_ms"].as_u64(), "one run: its wall time");
    assert!(time_ms > 0);
    let junit = std::fs::read_to_string(out.join("junit.xml")).expect("junit.xml");
    let seconds = format!("{}.{:03}", time_ms / 1000, time_ms % 1000);
    assert!(
        junit.contains(&format!("classname=\"replaylab.scenarios\" time=\"{seconds}\"")),
        "S01's test case takes its runs' real time: {junit}"
    );
    assert!(junit.contains("<property name=\"time\" value=\"real: "), "{junit}");
}

/// A server as the official Python SDK writes one by default (`MCPServer`, a tool returning
/// `str`) whose call fails downstream: its `isError` text is the SDK's, which says nothing of
/// what happened; the run's notes add what the downstream answered the call's requests.
#[test]
fn a_tool_error_says_what_the_downstream_answered() {
    let Some(python) = python() else { return };
    let out = scratch("tool-error");
    let server = out.join("server.py");
    std::fs::write(
        &server,
        r#"import json, os, urllib.request
from mcp.server.mcpserver import MCPServer
mcp = MCPServer("refused")
@mcp.tool(name="tickets.create")
def create(queue: str, subject: str, body: str) -> str:
    fields = {"tenant": "acme", "queue": queue, "subject": subject, "body": body, "colour": "red"}
    request = urllib.request.Request(os.environ["REPLAYLAB_DOWNSTREAM_URL"] + "/v1/tickets",
        data=json.dumps(fields).encode(), headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(request)
    return "created"
mcp.run()
"#,
    )
    .expect("the server is written");
    let command = format!("{} {}", python.display(), server.display());
    let output = replaylab(&["run", "S07", "--seed", "1", "--trace", "--executor-cmd", &command]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(
        said.contains("tool error: \"Error executing tool tickets.create\"; the downstream answered POST /v1/tickets 400"),
        "{said}"
    );
}

/// The most common Python server: the official SDK's `MCPServer` with a tool returning `str`,
/// which the SDK answers as `structuredContent: {"result": "..."}`. That is a bare success
/// claim, not a malformed answer: S07 (a new key, the same arguments: two tickets) passes.
#[test]
fn a_server_whose_tools_return_str_passes_s07() {
    let Some(python) = python() else { return };
    let out = scratch("returns-str");
    let server = out.join("server.py");
    std::fs::write(
        &server,
        r#"import json, os, urllib.request
from mcp.server.mcpserver import MCPServer
mcp = MCPServer("plain")
@mcp.tool(name="tickets.create")
def create(queue: str, subject: str, body: str) -> str:
    fields = {"tenant": "acme", "queue": queue, "subject": subject, "body": body}
    request = urllib.request.Request(os.environ["REPLAYLAB_DOWNSTREAM_URL"] + "/v1/tickets",
        data=json.dumps(fields).encode(), headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request) as answer:
        return "created " + json.load(answer)["ticket_id"]
mcp.run()
"#,
    )
    .expect("the server is written");
    let command = format!("{} {}", python.display(), server.display());
    let output = replaylab(&["run", "S07", "--seed", "1", "--trace", "--executor-cmd", &command]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains(": pass"), "{said}");
    assert!(
        said.contains("structuredContent without an outcome ({\"result\":\"created ticket_1\"})"),
        "{said}"
    );
}
