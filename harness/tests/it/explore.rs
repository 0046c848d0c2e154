//! Exploration (issue 33): failing seeds grouped by signature with one shrink per group, the
//! action kinds that reach what only the matrix reached before (a second actor, a tool version
//! upgrade, lookups down, a faulty job notice, a crashed worker that stays down), and
//! exploration of real processes (`--executor-cmd`): its refusals and a few real cases.
//!
//! Real processes on real time: the assertions are about verdicts, groups and premises, never
//! about how long anything took.

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::executors;
use harness::explore::{
    check_case, ActorRevoked, Case, CaseAction, CaseFault, CaseOperation, CaseTool, CrashMoment,
    ServiceChoice, Variant,
};
use serde_json::Value;

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");

fn scratch(test: &str) -> PathBuf {
    let directory = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("explore").join(test);
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).expect("a scratch directory");
    directory
}

/// Runs `replaylab` outside Cargo (reproduce commands then name the binary): exit code, stdout,
/// stderr.
fn replaylab(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(REPLAYLAB)
        .env_remove("CARGO")
        .env_remove("CARGO_PKG_NAME")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("replaylab runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn record(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("explore.json")).expect("explore.json was written");
    serde_json::from_str(&text).expect("explore.json is JSON")
}

/// Every failing seed of a mutant lands in the group of its own signature (the seed's case,
/// run again, fails with exactly that signature), different signatures stay apart, and each
/// group's one shrunk case is small.
#[test]
fn failing_seeds_are_grouped_by_signature_and_each_group_is_shrunk_once() {
    const MUTANT: &str = "mutant:blind_retry";
    let dir = scratch("groups");
    let (out, regressions) = (dir.join("out"), dir.join("regressions.jsonl"));
    let (code, stdout, stderr) = replaylab(&[
        "explore",
        "--executor",
        MUTANT,
        "--seeds",
        "120",
        "--jobs",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--regressions",
        regressions.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let record = record(&out);
    assert_eq!(record["schema_version"], 3);
    assert_eq!(
        (record["world"].as_str(), record["deterministic"].as_bool()),
        (Some("simulated"), Some(true))
    );
    let groups = record["groups"].as_array().expect("groups");
    assert!(groups.len() >= 2, "blind_retry fails in several ways: {groups:#?}");
    let failing = record["verdicts"]["fail"].as_u64().unwrap_or(0)
        + record["verdicts"]["crashed"].as_u64().unwrap_or(0);
    let counted: u64 = groups.iter().map(|group| group["count"].as_u64().expect("a count")).sum();
    assert_eq!(counted, failing, "every failing seed is in exactly one group");
    let mut signatures: Vec<&str> =
        groups.iter().map(|group| group["signature"].as_str().expect("a signature")).collect();
    signatures.sort_unstable();
    signatures.dedup();
    assert_eq!(signatures.len(), groups.len(), "one group per signature");

    let mutant = executors::find(MUTANT).expect("in the zoo");
    let mut grouped_seeds = Vec::new();
    for group in groups {
        let signature = group["signature"].as_str().unwrap();
        let seeds: Vec<u64> =
            group["seeds"].as_array().unwrap().iter().map(|seed| seed.as_u64().unwrap()).collect();
        assert_eq!(group["count"].as_u64(), Some(seeds.len() as u64));
        assert!(seeds.windows(2).all(|pair| pair[0] < pair[1]), "in order: {seeds:?}");
        assert!(seeds.contains(&group["shrunk_seed"].as_u64().unwrap()), "{group:#}");
        for seed in seeds.iter().take(3) {
            let case = harness::explore::case_for_seed(*seed).narrowed_to(&mutant.capabilities);
            let result = check_case(&case, &mutant);
            assert_eq!(result.signature(), Some(signature), "seed {seed} is in its own signature's group");
        }
        grouped_seeds.extend(seeds);
        let (original, shrunk) =
            (group["original_size"].as_u64().unwrap(), group["shrunk_size"].as_u64().unwrap());
        assert!(shrunk <= original, "{group:#}");
        assert!(shrunk <= 5, "a shrunk case is small (operations + actions + workers): {group:#}");
        assert!(
            group["shrink_runs"].as_u64().unwrap() < u64::from(harness::explore::MAX_SHRINK_RUNS),
            "{group:#}"
        );
        let file = out.join(group["case_file"].as_str().unwrap());
        assert!(file.is_file(), "{}", file.display());
        assert_eq!(group["confirmed"], true);
    }
    // A seed in no group did not fail.
    let passing = (0..120).find(|seed| !grouped_seeds.contains(seed)).expect("some seed passes");
    let case = harness::explore::case_for_seed(passing).narrowed_to(&mutant.capabilities);
    assert_eq!(check_case(&case, &mutant).failure(), None, "seed {passing}");
    // One saved case per group, and the terminal names each group with its seeds.
    let saved = std::fs::read_to_string(&regressions).expect("the regressions file");
    assert_eq!(saved.lines().count(), groups.len());
    assert!(stdout.contains(&format!("1 of {}: ", groups.len())), "{stdout}");
    let big = groups.iter().find(|group| group["count"].as_u64().unwrap() > 8);
    if let Some(big) = big {
        let more = big["count"].as_u64().unwrap() - 8;
        assert!(stdout.contains(&format!(" and {more} more")), "long seed lists are shortened: {stdout}");
    }
    // Each printed reproduce command runs the shrunk case and fails it again.
    let command = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("reproduce: "))
        .unwrap_or_else(|| panic!("no reproduce command in {stdout}"));
    let again = Command::new("sh").arg("-c").arg(command).output().expect("the command runs");
    assert_eq!(again.status.code(), Some(1), "{command}: {}", String::from_utf8_lossy(&again.stdout));
}

fn service(honoured: bool, receipts: bool) -> ServiceChoice {
    ServiceChoice { honoured, receipts }
}

fn one_operation(
    tool: CaseTool,
    workers: u8,
    services: [ServiceChoice; 4],
    actions: Vec<CaseAction>,
) -> Case {
    Case {
        seed: 7,
        workers,
        services,
        duplicate_deliveries: false,
        webhooks: false,
        long_jobs: false,
        slow_queue: false,
        operations: vec![CaseOperation { tenant: 0, step: 0, tool, content: 0 }],
        actions,
    }
}

/// Each new kind of action reaches a defect of the zoo that exploration never found before
/// (only the matrix scenario written for it did): the reference passes the case, the mutant
/// fails it with the oracle named.
#[test]
fn the_new_action_kinds_kill_mutants_only_the_matrix_killed_before() {
    let plain = service(true, true);
    let cases = [
        (
            "version_replay_any_request",
            "O3",
            one_operation(
                CaseTool::Charge,
                2,
                [plain; 4],
                vec![
                    CaseAction::Call { operation: 0, worker: 0, variant: Variant::Same },
                    // The amount changed under the new version: replayed by M27.
                    CaseAction::NewVersion {
                        operation: 0,
                        worker: 1,
                        variant: Variant::ChangedField(1),
                        early: false,
                    },
                ],
            ),
        ),
        (
            "replay_before_auth",
            "O5",
            one_operation(
                CaseTool::Ticket,
                2,
                [plain; 4],
                vec![CaseAction::OtherActor { operation: 0, worker: 1, revoked: ActorRevoked::Other }],
            ),
        ),
        (
            "abandoned_claim_in_flight",
            "O6",
            one_operation(
                CaseTool::Ticket,
                2,
                [plain; 4],
                vec![CaseAction::CrashDuringCall {
                    operation: 0,
                    worker: 0,
                    moment: CrashMoment::BeforeEffect,
                    stays_down: true,
                }],
            ),
        ),
        (
            "reconcile_gives_up_quietly",
            "O13",
            one_operation(
                CaseTool::Charge,
                1,
                [plain, service(false, true), plain, plain],
                vec![CaseAction::LookupsDown { operation: 0, worker: 0 }],
            ),
        ),
        (
            "unconfirmed_notice_forgotten",
            "O10",
            one_operation(
                CaseTool::Job,
                1,
                [plain, plain, service(false, false), plain],
                vec![CaseAction::NoticeFault { operation: 0, fault: CaseFault::ResetBeforeCommit }],
            ),
        ),
    ];
    let reference = executors::find("reference").expect("registered");
    for (name, oracle, case) in cases {
        let passed = check_case(&case, &reference);
        assert_eq!(
            (passed.failure(), passed.verdict),
            (None, harness::verdict::Verdict::Pass),
            "the reference passes {name}'s case: {:?} {:?}",
            passed.violations,
            passed.notes
        );
        let mutant = executors::find(&format!("mutant:{name}")).expect("in the zoo");
        let failed = check_case(&case, &mutant);
        assert!(
            failed.violations.iter().any(|violation| violation.oracle == oracle),
            "{name} fails {oracle}: {:?} {:?}",
            failed.violations,
            failed.notes
        );
    }
}

/// `--executor-cmd` exploration refuses what it cannot do before starting anything (exit 2,
/// nothing on stdout), and `run --repeat` only repeats real runs.
#[test]
fn black_box_exploration_refuses_bad_input_before_any_work() {
    let dir = scratch("refusals");
    let out = dir.join("out");
    let out = out.to_str().unwrap();
    let serve = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let refused = |args: &[&str], expected: &str| {
        let (code, stdout, stderr) = replaylab(args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?} did work first: {stdout}");
    };
    refused(
        &["explore", "--executor-cmd", &serve, "--check-determinism", "--out", out],
        "--check-determinism needs the simulated world",
    );
    refused(&["explore", "--executor-cmd", " ", "--out", out], "--executor-cmd is empty");
    refused(
        &["explore", "--executor-cmd", &serve, "--transport", "pigeon", "--out", out],
        "must be stdio or http",
    );
    refused(&["explore", "--executor-cmd", &serve, "--jobs", "0", "--out", out], "--jobs must be at least 1");
    refused(&["explore", "--executor-cmd", "true", "--seeds", "1", "--out", out], "not an MCP server");
    refused(&["explore", "--executor", "reference", "--executor-cmd", &serve], "cannot be used with");
    refused(&["explore", "--transport", "http"], "--executor-cmd");
    refused(&["run", "S01", "--seed", "1", "--repeat", "2"], "--executor-cmd");
    refused(
        &["run", "S01", "--seed", "1", "--executor-cmd", &serve, "--repeat", "0"],
        "--repeat must be at least 1",
    );
}

/// A few random cases against the reference served as an MCP server over stdio: real worker
/// processes, the same oracles; none fails, and `explore.json` says the world was real.
#[test]
fn black_box_exploration_runs_real_processes_against_the_reference() {
    let dir = scratch("reference");
    let (out, regressions) = (dir.join("out"), dir.join("regressions.jsonl"));
    let serve = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let (code, stdout, stderr) = replaylab(&[
        "explore",
        "--executor-cmd",
        &serve,
        "--seeds",
        "3",
        "--jobs",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--regressions",
        regressions.to_str().unwrap(),
    ]);
    let record = record(&out);
    assert_eq!((record["world"].as_str(), record["deterministic"].as_bool()), (Some("process"), Some(false)));
    assert!(record["groups"].as_array().expect("groups").is_empty(), "{stdout}{stderr}");
    assert_eq!(record["verdicts"]["fail"].as_u64().unwrap_or(0), 0, "{stdout}");
    assert_eq!(record["verdicts"]["crashed"].as_u64().unwrap_or(0), 0, "{stdout}");
    let ran = record["coverage"]["cases"].as_u64().unwrap()
        + record["coverage"]["not_applicable"].as_u64().unwrap();
    assert_eq!(ran, 3, "{stdout}");
    assert!(stdout.contains("cases/s, 3 side by side, real processes"), "{stdout}");
    // Three cases are too few for the coverage floor: that alone may fail the exploration.
    let thin = !record["shortfalls"].as_array().expect("shortfalls").is_empty();
    assert_eq!(code, if thin { 1 } else { 0 }, "{stdout}{stderr}");
    assert!(!regressions.exists(), "nothing failed, nothing was saved");
}

/// `run --case FILE --executor-cmd ...` runs a saved case against real processes, and
/// `--repeat N` runs it N times and says how many failed. The case is one exploration found:
/// a job and a ticket, both polled at the end; the job's completion notice goes out while the
/// job's final poll is served, and belongs to the job's operation only because the final polls
/// go one at a time (at once, it failed O1 and O10 in 8 of 10 runs).
#[test]
fn a_saved_case_runs_against_real_processes_and_repeats() {
    let dir = scratch("run-case");
    let mut case = one_operation(
        CaseTool::Job,
        1,
        [service(true, true); 4],
        vec![
            CaseAction::Call { operation: 0, worker: 0, variant: Variant::Same },
            CaseAction::Call { operation: 1, worker: 0, variant: Variant::Same },
        ],
    );
    case.operations.push(CaseOperation { tenant: 0, step: 2, tool: CaseTool::Ticket, content: 0 });
    let file = dir.join("case.toml");
    std::fs::write(&file, case.to_scenario().to_toml()).expect("the case is written");
    let serve = format!("{REPLAYLAB} executor serve --store sqlite:{{state}}/claims.db");
    let (code, stdout, stderr) =
        replaylab(&["run", "--case", file.to_str().unwrap(), "--executor-cmd", &serve, "--repeat", "2"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("run 1 of 2: pass") && stdout.contains("run 2 of 2: pass"), "{stdout}");
    assert!(stdout.contains("failed 0 of 2 runs (2 pass, 0 fail, 0 unknown, 0 crashed)"), "{stdout}");
}

/// `explore --out DIR` takes a directory like `matrix`; the README's `--out DIR/explore.json`
/// names the record itself (written into DIR, beside the shrunk cases); any other `.json` path
/// is refused before any work. Under GitHub Actions each confirmed group is an `::error` line
/// at its case file with its reproduce command. The record written validates against the
/// checked-in schema, which refuses keys its count maps cannot hold.
#[test]
fn explore_out_takes_a_directory_or_its_explore_json_and_the_record_meets_its_schema() {
    let dir = scratch("out");
    let regressions = dir.join("regressions.jsonl");
    let refused = dir.join("record.json");
    let (code, stdout, stderr) = replaylab(&["explore", "--seeds", "1", "--out", refused.to_str().unwrap()]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("explore takes a directory"), "{stderr}");
    assert!(stdout.is_empty() && !refused.exists(), "nothing was done: {stdout}");

    let given = dir.join("reports").join("explore.json");
    let output = Command::new(REPLAYLAB)
        .env_remove("CARGO")
        .env_remove("CARGO_PKG_NAME")
        .env("GITHUB_ACTIONS", "true")
        .args(["explore", "--executor", "mutant:blind_retry", "--seeds", "2", "--jobs", "2"])
        .args(["--out", given.to_str().unwrap(), "--regressions", regressions.to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("replaylab runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "blind_retry fails: {stdout}");
    assert!(given.is_file(), "{} is the record, not a directory", given.display());
    let record = record(&dir.join("reports"));
    let groups = record["groups"].as_array().expect("groups");
    assert!(!groups.is_empty(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().filter(|line| line.starts_with("::error ")).collect();
    let confirmed = groups.iter().filter(|group| group["confirmed"] == true).count();
    assert!(lines.len() >= confirmed, "one line per confirmed group (and one for thin coverage): {stdout}");
    for (group, line) in groups.iter().zip(&lines) {
        let case = dir.join("reports").join(group["case_file"].as_str().expect("a case file"));
        assert!(case.is_file(), "{}", case.display());
        let file = case.display().to_string().replace(':', "%3A").replace(',', "%2C");
        assert!(line.starts_with(&format!("::error file={file},title=replaylab explore%3A ")), "{line}");
        let reproduce = format!(" run --case {} --executor mutant:blind_retry", case.display());
        assert!(line.contains("%0Areproduce: ") && line.ends_with(&reproduce), "{line}");
    }

    let schema_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../explore/schema/explore.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(&schema_path).expect("the checked-in schema"))
            .expect("JSON");
    let validator = jsonschema::validator_for(&schema).expect("a JSON Schema");
    let errors: Vec<String> = validator.iter_errors(&record).map(|error| error.to_string()).collect();
    assert!(errors.is_empty(), "explore.json does not match its schema: {errors:#?}");
    let refused = |change: &dyn Fn(&mut Value), what: &str| {
        let mut changed = record.clone();
        change(&mut changed);
        assert!(!validator.is_valid(&changed), "the schema accepts {what}");
    };
    refused(&|v| v["surprise"] = true.into(), "an unknown field");
    refused(&|v| v["schema_version"] = 2.into(), "schema_version 2");
    refused(&|v| v["verdicts"]["maybe"] = 1.into(), "a count of verdict maybe");
    refused(&|v| v["coverage"]["exercised"]["O14"] = 1.into(), "oracle O14 exercised");
    refused(&|v| v["coverage"]["unknown_because"]["bad luck"] = 1.into(), "an unknown premise kind");
    refused(&|v| v["groups"][0]["surprise"] = true.into(), "an unknown field in a group");
    let mut accepted = record.clone();
    accepted["coverage"]["unknown_because"]["a fault did not fire"] = 1.into();
    accepted["coverage"]["exercised"]["O13"] = 1.into();
    accepted["verdicts"]["crashed"] = 1.into();
    assert!(validator.is_valid(&accepted), "the schema refuses keys the maps hold");

    // Outside GitHub Actions: no annotations; `--out DIR` is that directory.
    let plain = dir.join("plain");
    let output = Command::new(REPLAYLAB)
        .env_remove("GITHUB_ACTIONS")
        .args([
            "explore",
            "--executor",
            "mutant:blind_retry",
            "--seeds",
            "1",
            "--out",
            plain.to_str().unwrap(),
        ])
        .args(["--regressions", dir.join("other.jsonl").to_str().unwrap()])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("replaylab runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(plain.join("explore.json").is_file(), "{stdout}");
    assert!(!stdout.lines().any(|line| line.starts_with("::")), "{stdout}");
}

/// CI runs this as a gate: the checked-in schema of `explore.json` is the one the types
/// generate.
#[test]
fn checked_in_explore_schema_is_current() {
    let schema = crate::support::assert_schema_current(
        "../explore/schema/explore.schema.json",
        &harness::explore_cli::explore_schema(),
        "checked_in_explore_schema_is_current",
        "EXPLORE_SCHEMA_VERSION",
    );
    assert_eq!(schema["title"], "ExploreRecord");
    let mut objects = vec![&schema];
    objects.extend(schema["$defs"].as_object().expect("definitions").values());
    for object in objects.iter().filter(|o| o["type"] == "object" && o.get("properties").is_some()) {
        assert_eq!(
            object["additionalProperties"], false,
            "every record type refuses unknown fields: {object}"
        );
    }
}
