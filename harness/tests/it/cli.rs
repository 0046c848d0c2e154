//! The `replaylab` command, run as a process.

use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;
use wire::{HttpClient, HttpRequest, TcpConnector};

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");

#[tokio::test(flavor = "current_thread")]
async fn downstream_serves_on_a_real_port_and_prints_its_address_first() {
    let mut child = tokio::process::Command::new(REPLAYLAB)
        .args(["downstream", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    let port: u16 = first
        .strip_prefix("listening on http://127.0.0.1:")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .parse()
        .unwrap();
    let client = HttpClient::new(Arc::new(TcpConnector), "127.0.0.1", port);
    let ticket = json!({"tenant": "acme", "queue": "support", "subject": "s", "body": "b"});
    for _ in 0..2 {
        let request =
            HttpRequest::json(http::Method::POST, "/v1/tickets", &ticket).header("Idempotency-Key", "cli-1");
        assert_eq!(client.send(request).await.unwrap().status, 201);
    }
    let ledger: Vec<Value> = client.send(HttpRequest::get("/__admin/ledger")).await.unwrap().json().unwrap();
    assert_eq!(ledger.len(), 1, "two creates with one key make one effect");
    child.kill().await.unwrap();
}

fn replaylab(args: &[&str]) -> (i32, String) {
    let output = Command::new(REPLAYLAB).args(args).output().unwrap();
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
}

/// `--version` names the commit replaylab was built from (the checkout's, in a git checkout),
/// and the reports record the same build.
#[test]
fn the_version_names_the_build_commit_and_the_reports_record_it() {
    let output = Command::new(REPLAYLAB).arg("--version").output().unwrap();
    let said = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert_eq!(output.status.code(), Some(0), "{said}");
    let version = env!("CARGO_PKG_VERSION");
    let head =
        Command::new("git").args(["rev-parse", "HEAD"]).current_dir(env!("CARGO_MANIFEST_DIR")).output();
    let head = head
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let commit = match &head {
        // Built in this checkout: the commit is HEAD's (the build script runs again when it moves).
        Some(head) if std::env::var_os("REPLAYLAB_BUILD_COMMIT").is_none() => head.clone(),
        _ => said
            .strip_prefix(&format!("replaylab {version} (commit "))
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{said}"))
            .to_owned(),
    };
    assert_eq!(said, format!("replaylab {version} (commit {})", &commit[..12.min(commit.len())]));
    let out = std::env::temp_dir().join(format!("replaylab-cli-version-{}", std::process::id()));
    let matrix = Command::new(REPLAYLAB)
        .args(["matrix", "--executor", "reference", "--seeds", "1", "--only", "S01", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(matrix.status.code(), Some(0), "{}", String::from_utf8_lossy(&matrix.stderr));
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("matrix.json")).unwrap()).unwrap();
    assert_eq!(result["harness_version"], version);
    if head.is_some() {
        assert_eq!(result["harness_commit"], commit.as_str(), "the build's commit, in full");
        let markdown = std::fs::read_to_string(out.join("matrix.md")).unwrap();
        assert!(
            markdown.contains(&format!("| replaylab | {version} (commit {}) ", &commit[..12])),
            "{markdown}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_usage_exits_2_with_a_message() {
    let check = |args: &[&str], expected: &str| {
        let (code, stderr) = replaylab(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    };
    check(&["downstream", "--listen", "not-an-address"], "not an address");
    check(&["downstream", "--config", "/nonexistent/config.json"], "failed to read");
    check(&["no-such-command"], "unrecognized subcommand");
    let dir = std::env::temp_dir().join(format!("replaylab-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.json");
    std::fs::write(&config, r#"{"tickets": {"idempotency": "sometimes", "receipts": true}}"#).unwrap();
    check(&["downstream", "--config", config.to_str().unwrap()], "invalid downstream configuration");
    // --check-determinism with --executor-cmd is refused by matrix as by run and explore, before
    // the command is started: a server that cannot start does not hide the flag's error.
    for command in ["matrix", "run"] {
        let mut args = vec![command];
        if command == "run" {
            args.extend(["S02", "--seed", "0"]);
        }
        args.extend(["--executor-cmd", "/nonexistent/server", "--check-determinism"]);
        let (code, stderr) = replaylab(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("--check-determinism"), "{args:?}: {stderr}");
        assert!(!stderr.contains("/nonexistent/server"), "{args:?}: the server was started: {stderr}");
    }
    // Upper bounds: a number no machine could finish is refused at once, not run for good.
    check(&["explore", "--seeds", "18446744073709551615"], "--seeds must be at most 10000000");
    check(
        &["bench", "sim", "--runs", "18446744073709551615"],
        "--runs must be at least 1 and at most 1000000",
    );
    // A hint names only flags the command has: --first-seed is a seeded matrix's alone.
    for (args, hint) in [
        (&["matrix", "--seeds", "200000"][..], "--first-seed"),
        (&["matrix", "--executor-cmd", "/nonexistent/server", "--repeat", "200000"], "run several matrices"),
        (&["mutants", "--seeds", "200000"], "needs a new scenario"),
    ] {
        let (code, stderr) = replaylab(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("at most 100000") && stderr.contains(hint), "{args:?}: {stderr}");
        if args[0] != "matrix" || args.contains(&"--repeat") {
            assert!(!stderr.contains("--first-seed"), "{args:?} has no --first-seed: {stderr}");
        }
    }
    // Every flag a run cannot start without is checked before the command is started.
    let server = ["--executor-cmd", "/nonexistent/server"];
    for (flags, expected) in [
        (&["matrix", "--only", "S99"][..], "no scenario \"S99\""),
        (&["matrix", "--jobs", "0"], "--jobs must be at least 1"),
        (&["matrix", "--format", "pdf"], "\"pdf\""),
        (&["matrix", "--out", "/dev/null"], "/dev/null"),
        (&["run", "S99", "--seed", "0"], "no scenario \"S99\""),
    ] {
        let args: Vec<&str> = flags.iter().chain(&server).copied().collect();
        let (code, stderr) = replaylab(&args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("/nonexistent/server"), "{args:?}: the server was started: {stderr}");
    }
}

/// Every input file is refused with exit 2 and its path unless it is a regular file: a FIFO
/// would block for good at its opening, `/dev/zero` would be read until memory ran out.
#[test]
fn a_fifo_or_a_device_as_an_input_file_exits_2_at_once() {
    let dir = scratch("fifo");
    let fifo = dir.join("input");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success());
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    for input in [fifo.to_str().unwrap(), "/dev/zero"] {
        for args in [
            vec!["downstream", "--config", input],
            vec!["matrix", "--scenario-file", input, "--seeds", "1", "--out", out],
            vec!["run", "--case", input],
            vec!["matrix", "--config", input, "--executor-cmd", "/nonexistent/server"],
            vec!["verify", input],
            vec!["explore", "--regressions", input, "--seeds", "1", "--out", out],
        ] {
            // Killed after a minute: a command that blocks fails the test instead of hanging it.
            let output = Command::new("timeout").arg("60").arg(REPLAYLAB).args(&args).output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains(input) && stderr.contains("not a regular file"), "{args:?}: {stderr}");
        }
    }
}

/// A temporary directory that cannot hold the runs' directories (TMPDIR naming a file) is bad
/// input, said as such before any server starts, and never blamed on the server (it was "not
/// an MCP server replaylab can drive").
#[test]
fn a_temporary_directory_that_cannot_hold_runs_exits_2_naming_tmpdir() {
    let dir = scratch("bad_tmpdir");
    let file = dir.join("a-file");
    std::fs::write(&file, "").unwrap();
    let tmpdir = file.to_str().unwrap();
    let server = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let map = dir.join("replaylab.toml");
    let map = map.to_str().unwrap();
    for args in [
        vec!["matrix", "--executor-cmd", &server, "--only", "S01", "--repeat", "1", "--out", out],
        vec!["run", "S01", "--seed", "0", "--executor-cmd", &server],
        vec!["init", "--executor-cmd", &server, "--out", map],
    ] {
        let (code, stdout, stderr) = replaylab_with(&args, &[("TMPDIR", tmpdir)]);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!("the temporary directory {tmpdir} (TMPDIR) cannot hold")),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("not an MCP server"), "{args:?}: {stderr}");
    }
}

/// `bench sim` copies the run's shape for its yardsticks and ends with the issue's one line.
/// Nothing here times anything: the speeds only have to be numbers.
#[test]
fn bench_sim_copies_the_run_shape_and_ends_with_the_sim_line() {
    let s05 = scenarios::builtin().into_iter().find(|s| s.id == "S05").expect("S05 is built in");
    let reference = harness::executors::find("reference").expect("the reference is registered");
    let shape = harness::bench::shape_of(&s05, 0, &reference);
    assert_eq!(shape.hosts, 4, "S05 has the agent, the downstream and two workers");
    assert!(shape.messages >= 4, "two concurrent calls, a downstream request, final queries: {shape:?}");
    assert!(shape.simulated < shape.span, "idle time was skipped: {shape:?}");

    let output =
        Command::new(REPLAYLAB).args(["bench", "sim", "--runs", "2", "--jobs", "1"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().expect("bench sim prints lines");
    let fields: Vec<(&str, f64)> = last
        .strip_prefix("sim: ")
        .unwrap_or_else(|| panic!("the last line is the sim line: {last:?}"))
        .split(' ')
        .filter_map(|field| field.rsplit_once('='))
        .map(|(name, value)| (name, value.parse().unwrap_or_else(|_| panic!("{name}={value} is a number"))))
        .collect();
    let names: Vec<&str> = fields.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["runs/s", "runs/s", "ratio"], "{last}");
    assert!(last.starts_with("sim: harness runs/s=") && last.contains(" turmoil baseline runs/s="), "{last}");
    assert!(fields.iter().all(|(_, value)| *value > 0.0), "{last}");
    let (harness, baseline, ratio) = (fields[0].1, fields[1].1, fields[2].1);
    // The line rounds runs/s to whole numbers and the ratio to two decimals.
    let rounding = 0.005 + (harness / baseline) * (0.5 / harness + 0.5 / baseline) * 1.01;
    assert!((harness / baseline - ratio).abs() <= rounding, "ratio is harness / baseline: {last}");
    assert!(stdout.contains("world's 3 hosts"), "S01 runs on three hosts: {stdout}");
}

#[test]
fn explore_ends_with_its_coverage_and_fails_when_it_is_thin() {
    let dir = std::env::temp_dir().join(format!("replaylab-coverage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let explore = |seeds: &str| {
        let output = Command::new(REPLAYLAB)
            .args(["explore", "--seeds", seeds, "--jobs", "2"])
            .current_dir(&dir)
            .output()
            .unwrap();
        (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let (code, stdout) = explore("300");
    let line =
        stdout.lines().find(|line| line.starts_with("coverage: ")).unwrap_or_else(|| panic!("{stdout}"));
    let fields: Vec<&str> = line["coverage: ".len()..].split(' ').collect();
    let names: Vec<&str> = fields.iter().map(|field| field.split('=').next().unwrap_or_default()).collect();
    assert_eq!(
        names,
        ["cases", "unknown", "faults_fired", "crashes_after_commit", "stale_writes", "oracles_exercised"],
        "{line}"
    );
    assert_eq!(fields[0], "cases=300");
    assert_eq!(code, 0, "300 cases against the reference cover every oracle: {stdout}");
    // One case does not give every oracle something to judge: the coverage is too thin.
    let (code, stdout) = explore("1");
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("coverage too thin: no case gave"), "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `replaylab` with `args` and extra environment; exit code, stdout, stderr.
fn replaylab_with(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let output = Command::new(REPLAYLAB).args(args).envs(env.iter().copied()).output().unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A scratch directory of this test process.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("replaylab-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Bad numbers and outputs that cannot be written are refused with exit 2 and a plain message,
/// before any run (stdout stays empty): no panic, no hang, no verdict followed by a failure.
#[test]
fn bad_numbers_and_unwritable_outputs_exit_2_before_any_work() {
    let dir = scratch("bad-numbers");
    let file = dir.join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let file = file.to_str().unwrap();
    let max = u64::MAX.to_string();
    let near_max = (u64::MAX - 15).to_string();
    let no_dir = dir.join("missing").join("summary.md");
    let check = |args: &[&str], env: &[(&str, &str)], expected: &str| {
        let (code, stdout, stderr) = replaylab_with(args, env);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?} did work first: {stdout}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    };
    check(&["matrix", "--seeds", "1", "--out", file], &[], "is a file, not a directory");
    check(&["mutants", "--seeds", "1", "--out", file], &[], "is a file, not a directory");
    let summary = no_dir.to_str().unwrap();
    let out = dir.join("reports");
    let out = out.to_str().unwrap();
    check(
        &["matrix", "--seeds", "1", "--out", out],
        &[("GITHUB_STEP_SUMMARY", summary)],
        "GITHUB_STEP_SUMMARY",
    );
    check(&["matrix", "--seeds", "2", "--first-seed", &max, "--out", out], &[], "run past the largest seed");
    check(&["matrix", "--seeds", "100001", "--out", out], &[], "at most 100000");
    check(&["matrix", "--seeds", "1", "--jobs", "0", "--out", out], &[], "--jobs must be at least 1");
    let none = dir.join("no-regressions.jsonl");
    check(
        &["explore", "--seeds", "0", "--regressions", none.to_str().unwrap()],
        &[],
        "nothing would be checked",
    );
    check(&["explore", "--seeds", "100", "--start", &near_max], &[], "run past the largest seed");
    check(&["explore", "--seeds", "1", "--jobs", "0"], &[], "--jobs must be at least 1");
    check(&["bench", "store", "--operations", &max], &[], "at most 10000000");
    check(&["bench", "store", "--operations", "4000000000"], &[], "at most 10000000");
    check(&["bench", "sim", "--runs", "1", "--jobs", "0"], &[], "--jobs must be at least 1");
    // A black-box matrix's runs per scenario are --repeat, and the message says so.
    let serve = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    check(
        &["matrix", "--executor-cmd", &serve, "--repeat", "0", "--out", out],
        &[],
        "--repeat must be at least 1",
    );
    // A report file that cannot be written over is found before the run, not after it.
    let blocked = dir.join("blocked");
    std::fs::create_dir_all(blocked.join("matrix.json")).unwrap();
    check(
        &["matrix", "--seeds", "1", "--out", blocked.to_str().unwrap()],
        &[],
        "matrix.json is there and is not a file",
    );
    check(
        &["merge", dir.join("no-such-shard").to_str().unwrap(), "--out", out],
        &[],
        "no-such-shard: no such file or directory",
    );
    // A database that cannot be reached is the caller's input, not a failed measurement.
    check(&["bench", "store", "--store", "postgres://replaylab@127.0.0.1:1/none"], &[], "127.0.0.1:1");
    check(&["run", "S01", "--seed", "1", "--log", "executor=loud"], &[], "log filter \"executor=loud\"");
    check(&["run", "S01", "--seed", "1"], &[("RUST_LOG", "executor=loud")], "RUST_LOG: log filter");
}

/// The last seed there is can be run (the range does not wrap), and a `--jobs` far beyond the
/// work is capped to what helps instead of starting a thread per job.
#[test]
fn the_largest_seed_runs_and_huge_jobs_are_capped() {
    let dir = scratch("largest-seed");
    let out = dir.join("reports");
    let max = u64::MAX.to_string();
    let (code, stdout, stderr) = replaylab_with(
        &["matrix", "--seeds", "1", "--first-seed", &max, "--jobs", &max, "--out", out.to_str().unwrap()],
        &[("GITHUB_STEP_SUMMARY", "")],
    );
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("verdict: pass"), "{stdout}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("matrix.json")).unwrap()).unwrap();
    assert_eq!(report["first_seed"], json!(u64::MAX), "{}", report["first_seed"]);
    let (explore_out, regressions) = (dir.join("explore"), dir.join("regressions.jsonl"));
    let (code, stdout, stderr) = replaylab_with(
        &[
            "explore",
            "--seeds",
            "2",
            "--start",
            &(u64::MAX - 1).to_string(),
            "--jobs",
            &max,
            "--out",
            explore_out.to_str().unwrap(),
            "--regressions",
            regressions.to_str().unwrap(),
        ],
        &[],
    );
    // Two cases cannot reach the coverage floor, which is the only thing allowed to fail here.
    assert!(code == 0 || code == 1, "{stdout}{stderr}");
    assert!(stdout.contains("explored 2 seeds"), "{stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A scenario file with a duration no run can use, or a fault rule firing `-1` times, is
/// refused with its line and a plain message (no type names of the implementation).
#[test]
fn scenario_files_with_impossible_numbers_are_refused_in_plain_words() {
    let dir = scratch("scenario-numbers");
    let write = |name: &str, step: &str| {
        let path = dir.join(name);
        let text = format!(
            "id = \"X01\"\nname = \"x\"\nrows = [\"prose\"]\nsummary = \"s\"\nexpected = \"e\"\n\n\
             [operations.a]\ntenant = \"acme\"\nworkflow = \"w\"\nstep = \"s\"\n\n{step}"
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let huge = write("huge.toml", "[[step]]\naction = \"advance\"\nby = \"18446744073709551615s\"\n");
    let (code, stdout, stderr) =
        replaylab_with(&["run", "X01", "--seed", "1", "--scenario-file", huge.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("huge.toml:12:1") && stderr.contains("at most 24h"), "{stderr}");
    let negative = write(
        "negative.toml",
        "[[step]]\naction = \"fault\"\nrule = { match = { path = \"/v1/tickets\" }, action = \"hold\", times = -1 }\n",
    );
    let (code, stdout, stderr) =
        replaylab_with(&["run", "X01", "--seed", "1", "--scenario-file", negative.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("`times` must be at least 1, not -1"), "{stderr}");
    assert!(!stderr.contains("untagged") && !stderr.contains("TimesSpec"), "{stderr}");
    let nowhere = write(
        "nowhere.toml",
        "[[step]]\naction = \"fault\"\nrule = { match = { path = \"/v1/chargez\" }, action = \"hold\" }\n",
    );
    let (code, stdout, stderr) =
        replaylab_with(&["run", "X01", "--seed", "1", "--scenario-file", nowhere.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("nowhere.toml:12:1") && stderr.contains("no route serves"), "{stderr}");
    // A finishing job builds every webhook delivery at once: billions would exhaust memory.
    let fan_out = write(
        "fan_out.toml",
        "[downstream]\nwebhook = { repeat_same_event = 4294967295 }\n\n[[step]]\naction = \"advance\"\nby = \"1s\"\n",
    );
    let (code, stdout, stderr) =
        replaylab_with(&["run", "X01", "--seed", "1", "--scenario-file", fan_out.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("`webhook.repeat_same_event` must be at most 100, not 4294967295"), "{stderr}");
}

/// `matrix --require`: rows a gate demands. Bad names exit 2 before any work (a black-box
/// command is not even started); a required row that passed keeps the exit code, one that did
/// not run (or did not pass) exits 1 with a line saying why; the headline always says how many
/// rows applied.
#[test]
fn required_rows_gate_the_exit_code_and_bad_names_exit_2_before_any_work() {
    let dir = scratch("require");
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    for (require, expected) in [
        ("C11", "--require: no row \"C11\""),
        ("C1,bogus", "--require: no row \"bogus\""),
        ("S01", "--require: no row \"S01\""),
        ("all,C1", "--require all already requires every row"),
    ] {
        let (code, stdout, stderr) =
            replaylab_with(&["matrix", "--seeds", "1", "--require", require, "--out", out], &[]);
        assert_eq!(code, 2, "{require}: {stdout}{stderr}");
        assert!(stderr.contains(expected), "{require}: {stderr}");
        assert!(stdout.is_empty(), "{require} did work first: {stdout}");
    }
    // With --executor-cmd, before the command is started to read its manifest.
    let (code, stdout, stderr) = replaylab_with(
        &["matrix", "--executor-cmd", "/nonexistent/server", "--require", "Z9", "--out", out],
        &[],
    );
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("--require: no row \"Z9\""), "{stderr}");

    let matrix = |require: &str| {
        replaylab_with(&["matrix", "--seeds", "1", "--only", "S01", "--require", require, "--out", out], &[])
    };
    // S01 covers C1 and F1, and passes.
    let (code, stdout, stderr) = matrix("C1,F1,C1");
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("required rows: all 2 passed"), "{stdout}");
    assert!(stdout.contains("\n2 of 2 rows applied; 0 not applicable\nverdict: pass\n"), "{stdout}");
    // C2 and the rest of the seed rows: not run by this selection, each named with why.
    let (code, stdout, _) = matrix("seed-rows");
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("required rows: 17 of 19 did not pass:"), "{stdout}");
    assert!(stdout.contains("  C2: not run: no scenario of this run covers it\n"), "{stdout}");
    assert!(!stdout.contains("  C1: "), "C1 passed: {stdout}");
    // `all`: every row of the run.
    let (code, stdout, _) = matrix("all");
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("required rows: all 2 passed"), "{stdout}");
    // A prose scenario's row is named by its id.
    let (code, stdout, _) = matrix("S13");
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("  S13: not run: no scenario of this run covers it"), "{stdout}");
}
