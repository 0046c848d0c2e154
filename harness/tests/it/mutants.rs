//! The mutant zoo: each mutant is killed, by the scenario and the oracle expected for it; and
//! exploration finds a mutant's defect and prints a command that reproduces it.

use std::process::Command;

use crate::installed;

use harness::{executors, runner};

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");

/// (mutant, scenario that kills it, oracle that must fire there). `expect` is a scenario
/// expectation (for M13 the defect is a refusal of an equivalent request: no effect-safety
/// oracle can see it, the scenario's expectation does).
const KILLS: [(&str, &str, &str); 37] = [
    ("args_hash_as_key", "S07", "O2"),
    ("in_memory_claims", "S03", "O1"),
    ("read_then_insert", "S05", "O1"),
    ("no_fingerprint", "S06", "O3"),
    ("blind_retry", "S02", "O1"),
    ("timeout_is_success", "S02", "O2"),
    ("no_auth_recheck", "S08", "O5"),
    ("short_ttl_delete", "S09", "O7"),
    ("pending_means_nothing", "S04", "O1"),
    ("call_id_as_key", "S02", "O1"),
    ("boolean_success", "S01", "O2"),
    ("resubmit_job", "S10", "O10"),
    ("raw_json_fingerprint", "S14", "expect"),
    ("newest_payload_wins", "S06", "O3"),
    ("no_tenant_scope", "S13", "O9"),
    ("stale_overwrite", "S18", "O11"),
    ("webhook_no_dedupe", "S17", "O1"),
    ("consumer_no_claim", "S16", "O1"),
    ("optional_fields_unfingerprinted", "S20", "O3"),
    ("replay_before_auth", "S21", "O5"),
    ("fresh_key_resend", "S22", "O1"),
    ("impatient_job_poll", "S23", "O12"),
    ("recovery_never_resends", "S04", "O13"),
    ("refusal_reason_forgotten", "S18", "O8"),
    ("result_not_kept", "S03", "O8"),
    ("notice_from_the_loser", "S10", "O10"),
    ("version_replay_any_request", "S24", "O3"),
    ("unknown_kept_quiet", "S25", "O13"),
    ("notice_not_owed", "S26", "O10"),
    ("late_receipt_dropped", "S27", "O13"),
    ("abandoned_claim_in_flight", "S28", "O6"),
    ("unconfirmed_notice_forgotten", "S29", "O10"),
    ("reconcile_gives_up_quietly", "S30", "O13"),
    ("queued_taken_over", "S31", "expect"),
    ("process_minted_key", "S32", "O1"),
    ("unknown_run_again", "S33", "O1"),
    ("redelivery_sends_again", "S34", "O1"),
];

/// The project's own scenarios (S20 onwards) and the mutant each was added for: the mutant
/// fails that scenario and no other, or the scenario would not be worth its runtime. One
/// exception, named in `SAME_PREMISE`: a scenario that plays another's premise for another role.
const OWN: [(&str, &str); 15] = [
    ("S20", "optional_fields_unfingerprinted"),
    ("S21", "replay_before_auth"),
    ("S22", "fresh_key_resend"),
    ("S23", "impatient_job_poll"),
    ("S24", "version_replay_any_request"),
    ("S25", "unknown_kept_quiet"),
    ("S26", "notice_not_owed"),
    ("S27", "late_receipt_dropped"),
    ("S28", "abandoned_claim_in_flight"),
    ("S29", "unconfirmed_notice_forgotten"),
    ("S30", "reconcile_gives_up_quietly"),
    ("S31", "queued_taken_over"),
    ("S32", "process_minted_key"),
    ("S33", "unknown_run_again"),
    ("S34", "redelivery_sends_again"),
];

/// Scenarios that also fail an own scenario's mutant because they play its premise for another
/// role (each earns its place with a mutant of its own, which fails it alone):
/// - S32's first part is S22's lost answer on a provider that honours keys and keeps no
///   receipts, for a charge (a Stripe server plays no ticket role, a ticket server no charge),
///   so M21 fails both; S32's own is M35.
/// - S33 and S34 lose an answer on a provider with no key and no receipts, S25's premise, for a
///   ticket and a message (a GitHub server plays no charge role, a Slack server neither), so
///   M28, which tells no one of an unknown nothing can settle, fails all three; S34 plays S33's
///   lost answer and retry for a message, so M36 fails both. S33's own is M36, S34's M37.
const SAME_PREMISE: [(&str, &str); 4] = [("S22", "S32"), ("S25", "S33"), ("S25", "S34"), ("S33", "S34")];

#[test]
fn each_scenario_of_the_projects_own_kills_a_mutant_no_other_scenario_kills() {
    for (scenario_id, name) in OWN {
        let spec = executors::find(&format!("mutant:{name}")).expect("registered");
        let failing: Vec<String> = scenarios::builtin()
            .into_iter()
            .filter(|scenario| {
                (0..SEEDS).any(|seed| {
                    runner::run(scenario, seed, &spec).result.verdict == harness::verdict::Verdict::Fail
                })
            })
            .map(|scenario| scenario.id)
            .collect();
        let mut expected = vec![scenario_id.to_owned()];
        expected.extend(
            SAME_PREMISE.iter().filter(|(own, _)| *own == scenario_id).map(|(_, other)| (*other).to_owned()),
        );
        assert_eq!(
            failing, expected,
            "mutant:{name} must fail {scenario_id} and only it (and its premise's twin)"
        );
    }
}

/// Seeds tried per mutant: a race may need a few interleavings.
const SEEDS: u64 = 5;

#[test]
fn every_mutant_is_killed_by_its_scenario_and_oracle() {
    let zoo = executor::mutants::all();
    assert_eq!(zoo.len(), KILLS.len(), "the table covers the whole zoo");
    for (name, scenario_id, oracle) in KILLS {
        let mutant = zoo.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no mutant {name}"));
        assert!(mutant.caught_by.contains(&scenario_id), "{name}: {scenario_id} is one MATRIX.md expects");
        let spec = executors::find(&format!("mutant:{name}")).expect("registered");
        let scenario = scenarios::builtin().into_iter().find(|s| s.id == scenario_id).expect("built-in");
        let fired: Vec<Vec<String>> = (0..SEEDS)
            .map(|seed| {
                let record = runner::run(&scenario, seed, &spec);
                record.result.violations.iter().map(|v| v.oracle.clone()).collect()
            })
            .collect();
        assert!(
            fired.iter().any(|oracles| oracles.iter().any(|o| o == oracle)),
            "mutant:{name} on {scenario_id}: {oracle} never fired in {SEEDS} seeds; fired: {fired:?}"
        );
    }
}

#[test]
fn the_reference_survives_what_kills_the_mutants() {
    let reference = executors::find("reference").expect("registered");
    for (_, scenario_id, _) in KILLS {
        let scenario = scenarios::builtin().into_iter().find(|s| s.id == scenario_id).expect("built-in");
        for seed in 0..SEEDS {
            let record = runner::run(&scenario, seed, &reference);
            assert!(
                record.result.violations.is_empty(),
                "{scenario_id} seed {seed}: {:?}",
                record.result.violations
            );
        }
    }
}

#[test]
fn exploration_finds_a_mutant_and_its_reproduce_command_reproduces_it() {
    let dir = std::env::temp_dir().join(format!("replaylab-explore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let regressions = dir.join("regressions.jsonl");
    let out = dir.join("cases");
    let output = installed::installed(REPLAYLAB, false)
        .args([
            "explore",
            "--executor",
            "mutant:blind_retry",
            "--seeds",
            "200",
            "--stop-at-first",
            "--jobs",
            "1",
        ])
        .arg("--regressions")
        .arg(&regressions)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("replaylab runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    // `group 1 of 1: O1 single_effect (ticket_created)`: the signature starts with the oracle.
    let oracle = stdout
        .lines()
        .find_map(|line| {
            line.strip_prefix("group 1 of 1: ")
                .map(|signature| signature.split(' ').next().unwrap_or_default().to_owned())
        })
        .unwrap_or_else(|| panic!("no group in {stdout}"));
    let command = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("reproduce: "))
        .unwrap_or_else(|| panic!("no reproduce line in {stdout}"))
        .to_owned();
    assert!(command.starts_with("replaylab run --case "), "{command}");
    let saved = std::fs::read_to_string(&regressions).expect("the case was appended to the regressions file");
    assert_eq!(saved.lines().count(), 1);

    let again = installed::installed(REPLAYLAB, true).arg(&command).output().expect("runs");
    let again_stdout = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(1), "{again_stdout}");
    assert!(
        again_stdout.lines().any(|line| line.trim().starts_with(&format!("violation: {oracle} "))),
        "the reproduction did not fail with {oracle}:\n{again_stdout}"
    );

    // Saved cases are replayed first on the next exploration, and still fail.
    let replay = Command::new(REPLAYLAB)
        .args(["explore", "--executor", "mutant:blind_retry", "--seeds", "0"])
        .arg("--regressions")
        .arg(&regressions)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("replaylab runs");
    let replay_stdout = String::from_utf8_lossy(&replay.stdout);
    assert_eq!(replay.status.code(), Some(1), "{replay_stdout}");
    assert!(replay_stdout.contains("replaying 1 saved case(s)"), "{replay_stdout}");
    assert!(replay_stdout.contains(&format!("FAILS: {oracle}")), "{replay_stdout}");
}

#[test]
fn a_stale_update_case_calls_the_creator_edits_then_updates_and_catches_lost_updates() {
    use harness::explore::{check_case, Case, CaseAction, CaseOperation, CaseTool, ServiceChoice};
    let service = ServiceChoice { honoured: true, receipts: true };
    let case = Case {
        seed: 5,
        workers: 1,
        services: [service; 4],
        duplicate_deliveries: false,
        webhooks: false,
        long_jobs: false,
        slow_queue: false,
        operations: vec![
            CaseOperation { tenant: 0, step: 0, tool: CaseTool::Ticket, content: 0 },
            // Content 0: the update is based on version 1, the version before the edit.
            CaseOperation { tenant: 0, step: 1, tool: CaseTool::SetStatus, content: 0 },
        ],
        actions: vec![CaseAction::StaleUpdate],
    };
    let steps: Vec<String> = case
        .to_scenario()
        .steps
        .iter()
        .map(|step| match &step.kind {
            scenarios::StepKind::Call(call) => format!("call {}", call.tool),
            scenarios::StepKind::HumanEdit { .. } => "edit".to_owned(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(steps, ["call tickets.create", "edit", "call tickets.set_status"]);

    let reference = executors::find("reference").expect("registered");
    assert_eq!(check_case(&case, &reference).failure(), None, "the reference refuses the stale update");
    let mutant = executors::find("mutant:stale_overwrite").expect("registered");
    let found = check_case(&case, &mutant).failure();
    assert!(found.as_deref().is_some_and(|oracle| oracle.contains("O11")), "{found:?}");
}

/// CI runs this as a gate: the checked-in schema of `mutants.json` must be the one the types
/// generate.
#[test]
fn checked_in_mutants_schema_is_current() {
    // Strict: every object refuses properties it does not name; verdicts are an enum.
    let schema = crate::support::assert_schema_current(
        "schema/mutants.schema.json",
        &harness::mutants::mutants_schema(),
        "checked_in_mutants_schema_is_current",
        "MUTANTS_SCHEMA_VERSION",
    );
    assert_eq!(schema["title"], "MutantsResult");
    let mut objects = vec![&schema];
    objects.extend(schema["$defs"].as_object().expect("definitions").values());
    let mut strict = 0;
    for object in objects.iter().filter(|o| o["type"] == "object") {
        assert_eq!(object["additionalProperties"], false, "{object}");
        strict += 1;
    }
    assert_eq!(strict, 3, "MutantsResult, MutantRow, Killer");
    let verdicts = schema["$defs"]["Verdict"].to_string();
    for verdict in ["pass", "fail", "unknown", "crashed", "not_applicable"] {
        assert!(verdicts.contains(&format!("\"{verdict}\"")), "{verdicts}");
    }
}

/// A real `replaylab mutants --seeds 1` writes a `mutants.json` the checked-in schema accepts
/// (checked with the `jsonschema` crate), naming the schema version, the replaylab version and
/// the commit, with every expected scenario that killed each mutant; `mutants.md` lists each
/// of those killers with its reproduce command. (One seed is too few to kill every mutant, so
/// the command may exit 1; the format is what is checked here, the kills in the tests above
/// and in CI's mutant gate.)
#[test]
fn mutants_json_of_a_real_run_validates_against_its_schema() {
    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
    let dir = std::env::temp_dir().join(format!("replaylab-mutants-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let output = Command::new(REPLAYLAB)
        .args(["mutants", "--seeds", "1", "--jobs", "2", "--out"])
        .arg(&dir)
        .env("REPLAYLAB_COMMIT", COMMIT)
        .output()
        .expect("replaylab runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let read = |path: std::path::PathBuf| {
        std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
    };
    let json: serde_json::Value = serde_json::from_str(&read(dir.join("mutants.json"))).expect("JSON");
    let schema: serde_json::Value = serde_json::from_str(&read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/mutants.schema.json"),
    ))
    .expect("the schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("the checked-in schema is a JSON Schema");
    let errors: Vec<String> = validator.iter_errors(&json).map(|error| error.to_string()).collect();
    assert!(errors.is_empty(), "mutants.json does not match its schema: {errors:#?}");

    // The schema has teeth: an unknown field anywhere, a verdict outside the enum or another
    // format version is refused.
    let refused = |change: &dyn Fn(&mut serde_json::Value), what: &str| {
        let mut changed = json.clone();
        change(&mut changed);
        assert!(!validator.is_valid(&changed), "the schema accepts {what}");
    };
    refused(&|v| v["surprise"] = true.into(), "an unknown top-level field");
    refused(&|v| v["mutants"][0]["surprise"] = true.into(), "an unknown field in a mutant");
    refused(&|v| v["mutants"][0]["killers"][0]["surprise"] = true.into(), "an unknown field in a killer");
    refused(&|v| v["verdict"] = "green".into(), "a verdict outside the enum");
    refused(&|v| v["schema_version"] = 1.into(), "another schema version");
    refused(&|v| drop(v.as_object_mut().unwrap().remove("commit")), "no commit field");

    let result: harness::mutants::MutantsResult =
        serde_json::from_value(json).expect("the types read it back");
    assert_eq!(result.schema_version, harness::mutants::MUTANTS_SCHEMA_VERSION);
    assert_eq!(result.harness_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(result.commit.as_deref(), Some(COMMIT), "the commit comes from where matrix.json's does");
    assert_eq!(result.seeds, 1);
    assert_eq!(result.mutants.len(), KILLS.len());
    assert_eq!(result.killed, result.mutants.iter().filter(|row| row.killed).count());
    let markdown = read(dir.join("mutants.md"));
    for row in &result.mutants {
        assert_eq!(row.killed, !row.killers.is_empty(), "{}", row.name);
        let ids: Vec<&str> = row.killers.iter().map(|killer| &killer.scenario[..3]).collect();
        // Every expected scenario that failed the mutant is listed, in matrix order.
        let expected_failing: Vec<&str> = row
            .failing_scenarios
            .iter()
            .map(String::as_str)
            .filter(|id| row.expected_scenarios.iter().any(|expected| expected == id))
            .collect();
        assert_eq!(ids, expected_failing, "{}", row.name);
        for killer in &row.killers {
            assert!(!killer.oracles.is_empty(), "{}: {killer:?}", row.name);
            assert!(
                killer.reproduce.contains(&format!("--seed {} --executor mutant:{}", killer.seed, row.name)),
                "{}: {}",
                row.name,
                killer.reproduce
            );
            assert!(
                markdown.contains(&format!("  - reproduce: `{}`\n", killer.reproduce)),
                "{}",
                killer.reproduce
            );
        }
    }
    // At one seed already, mutants that two expected scenarios catch show both.
    assert!(
        result.mutants.iter().any(|row| row.killers.len() >= 2),
        "no mutant with two killers:\n{markdown}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
