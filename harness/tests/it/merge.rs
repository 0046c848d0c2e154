//! `matrix --shard I/N` on N machines, then `replaylab merge`: the merged reports are the
//! unsharded run's, byte for byte, and shards that do not make one run are refused (exit 2).

use crate::installed;

use std::path::{Path, PathBuf};

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");
/// Fixed report time stamps, so that every run writes the same bytes.
const EPOCH: &str = "1700000000";
/// A mutant that fails some seeds of S05 and passes others: failing seeds fall in every shard.
const EXECUTOR: &str = "mutant:read_then_insert";
const SEEDS: &str = "7";

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("merge").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn replaylab(args: &[&str]) -> (i32, String, String) {
    let output = installed::installed(REPLAYLAB, false)
        .args(args)
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("REPLAYLAB_COMMIT", "0123456789abcdef")
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .expect("replaylab runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn matrix(out: &Path, shard: Option<&str>) {
    let out = out.to_str().expect("a UTF-8 path");
    let mut args = vec!["matrix", "--executor", EXECUTOR, "--seeds", SEEDS, "--out", out, "--jobs", "2"];
    if let Some(shard) = shard {
        args.extend(["--shard", shard]);
    }
    let (code, stdout, stderr) = replaylab(&args);
    // A shard whose seeds all pass exits 0; the whole run fails S05.
    let expected: &[i32] = if shard.is_some() { &[0, 1] } else { &[1] };
    assert!(expected.contains(&code), "exit {code}\n{stdout}\n{stderr}");
}

fn read(dir: &Path, file: &str) -> Vec<u8> {
    std::fs::read(dir.join(file)).unwrap_or_else(|error| panic!("{}/{file}: {error}", dir.display()))
}

#[test]
fn merged_shards_equal_the_unsharded_run_byte_for_byte() {
    let root = scratch("bytes");
    let whole = root.join("whole");
    matrix(&whole, None);
    let whole_json: serde_json::Value = serde_json::from_slice(&read(&whole, "matrix.json")).expect("JSON");
    // A real run's matrix.json, with failures, logs and bands, matches the checked-in schema.
    let schema: serde_json::Value =
        serde_json::from_str(&reports::matrix_schema()).expect("the schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("a JSON Schema");
    let errors: Vec<String> = validator.iter_errors(&whole_json).map(|error| error.to_string()).collect();
    assert!(errors.is_empty(), "matrix.json does not match its schema: {errors:#?}");
    // Every seed that did not pass is listed, with its oracles and reproduce command.
    for scenario in whole_json["scenarios"].as_array().expect("scenarios") {
        let counts = &scenario["counts"];
        let not_passed: u64 = ["fail", "crashed", "unknown"].iter().filter_map(|v| counts[v].as_u64()).sum();
        let failures = scenario["failures"].as_array().expect("failures");
        assert_eq!(failures.len() as u64, not_passed, "{}: every seed that did not pass", scenario["id"]);
        for failure in failures {
            let seed = failure["seed"].as_u64().expect("a seed");
            let reproduce = failure["reproduce"].as_str().expect("a reproduce command");
            assert!(reproduce.contains(&format!("--seed {seed} ")), "{reproduce}");
            assert!(
                !failure["oracles"].as_array().expect("oracles").is_empty() || failure["verdict"] != "fail"
            );
        }
    }
    let s05 = whole_json["scenarios"]
        .as_array()
        .expect("scenarios")
        .iter()
        .find(|s| s["id"] == "S05")
        .expect("S05");
    let failing: Vec<u64> = s05["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| f["seed"].as_u64().expect("a seed"))
        .collect();
    assert!(failing.len() >= 2, "the premise: S05 fails on several seeds ({failing:?})");
    assert!(failing.len() < 7, "and passes on some ({failing:?})");

    for count in [2_u64, 3] {
        let dirs: Vec<PathBuf> =
            (1..=count).map(|index| root.join(format!("shard-{index}-of-{count}"))).collect();
        for (index, dir) in dirs.iter().enumerate() {
            matrix(dir, Some(&format!("{}/{count}", index + 1)));
        }
        // The premise: the shards really split the seeds (each ran a part, none all of them).
        let shard_failing: Vec<usize> = dirs
            .iter()
            .map(|dir| {
                let json: serde_json::Value =
                    serde_json::from_slice(&read(dir, "matrix.json")).expect("JSON");
                let s05 = json["scenarios"]
                    .as_array()
                    .expect("scenarios")
                    .iter()
                    .find(|s| s["id"] == "S05")
                    .cloned();
                s05.expect("S05")["failures"].as_array().expect("failures").len()
            })
            .collect();
        assert_eq!(shard_failing.iter().sum::<usize>(), failing.len(), "{count} shards: {shard_failing:?}");
        assert!(shard_failing.iter().all(|n| *n < failing.len()), "{count} shards: {shard_failing:?}");

        let merged = root.join(format!("merged-{count}"));
        let mut args: Vec<String> = vec!["merge".into()];
        // In reverse order: the order of the shards on the command line does not matter.
        args.extend(dirs.iter().rev().map(|dir| dir.display().to_string()));
        args.extend(["--out".into(), merged.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = replaylab(&args);
        assert_eq!(code, 1, "the merged run fails as the whole run does\n{stdout}\n{stderr}");
        for file in ["matrix.json", "matrix.md", "junit.xml", "report.html"] {
            assert!(
                read(&merged, file) == read(&whole, file),
                "{count} shards merged: {file} differs from the unsharded run's"
            );
        }
    }
}

#[test]
fn shards_that_do_not_make_one_run_are_refused_with_exit_2() {
    let root = scratch("refused");
    let one = root.join("one");
    let two = root.join("two");
    let out = root.join("out");
    matrix(&one, Some("1/2"));
    matrix(&two, Some("2/2"));
    let path = |dir: &Path| dir.display().to_string();
    let merge = |dirs: &[&Path]| {
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(dirs.iter().map(|dir| path(dir)));
        args.extend(["--out".into(), path(&out)]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        replaylab(&args)
    };

    let (code, _, stderr) = merge(&[&one]);
    assert_eq!(code, 2);
    assert!(stderr.contains("the shards must be 1/2 to 2/2, each once; got 1/2"), "{stderr}");
    let (code, _, stderr) = merge(&[&one, &one]);
    assert_eq!(code, 2);
    assert!(stderr.contains("got 1/2, 1/2"), "{stderr}");

    // Shard 2 of a run against another executor.
    let other = root.join("other");
    let (code, ..) = replaylab(&[
        "matrix",
        "--executor",
        "reference",
        "--seeds",
        SEEDS,
        "--shard",
        "2/2",
        "--out",
        &path(&other),
    ]);
    assert_eq!(code, 0);
    let (code, _, stderr) = merge(&[&one, &other]);
    assert_eq!(code, 2);
    assert!(stderr.contains("the shards differ in executor"), "{stderr}");

    // Another schema version, and a file that is not a matrix.json.
    let old = root.join("old");
    std::fs::create_dir_all(&old).expect("a directory");
    let mut json: serde_json::Value = serde_json::from_slice(&read(&two, "matrix.json")).expect("JSON");
    json["schema_version"] = 99.into();
    std::fs::write(old.join("matrix.json"), json.to_string()).expect("written");
    let (code, _, stderr) = merge(&[&one, &old]);
    assert_eq!(code, 2);
    let version = reports::SCHEMA_VERSION;
    assert!(
        stderr.contains(&format!("schema version 99; this replaylab reads version {version}")),
        "{stderr}"
    );
    std::fs::write(old.join("matrix.json"), format!("{{\"schema_version\": {version}}}")).expect("written");
    let (code, _, stderr) = merge(&[&one, &old]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a valid matrix.json"), "{stderr}");
    assert!(!out.join("matrix.json").exists(), "nothing is written when the input is bad");

    // More shards than seeds: some shard would run nothing.
    let (code, _, stderr) = replaylab(&["matrix", "--seeds", "2", "--shard", "3/3", "--out", &path(&out)]);
    assert_eq!(code, 2);
    assert!(stderr.contains("use at most 2 shards"), "{stderr}");
}

/// `explore --shard I/N` too: the merged `explore.json` is the unsharded exploration's, byte
/// for byte, whether the seeds were split in two shards or three (counts summed, failing seeds
/// grouped by signature across the shards, each group's shrunk case the one of its smallest
/// drawn case, the coverage floor judged over the sum), with the shrunk cases its groups name
/// beside it.
#[test]
fn merged_exploration_shards_equal_the_unsharded_exploration() {
    const EXPLORER: &str = "mutant:blind_retry";
    let root = scratch("explore");
    let explore = |name: &str, shard: Option<&str>| {
        let out = root.join(name);
        let regressions = root.join(format!("{name}.jsonl"));
        let mut args = vec![
            "explore".to_owned(),
            "--executor".into(),
            EXPLORER.into(),
            "--seeds".into(),
            "60".into(),
            "--jobs".into(),
            "2".into(),
            "--out".into(),
            out.display().to_string(),
            "--regressions".into(),
            regressions.display().to_string(),
        ];
        if let Some(shard) = shard {
            args.extend(["--shard".into(), shard.into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = replaylab(&args);
        assert!(code == 0 || code == 1, "exit {code}\n{stdout}\n{stderr}");
        out
    };
    let whole = explore("whole", None);
    let record: serde_json::Value = serde_json::from_slice(&read(&whole, "explore.json")).expect("JSON");
    let groups = record["groups"].as_array().expect("groups");
    assert!(groups.len() >= 2, "the premise: several groups ({})", groups.len());
    assert!(
        groups.iter().any(|group| group["count"].as_u64().is_some_and(|count| count >= 3)),
        "the premise: a group of several seeds, which the shards split: {groups:#?}"
    );
    for count in [2, 3] {
        let shards: Vec<PathBuf> = (1..=count)
            .map(|index| explore(&format!("{index}-of-{count}"), Some(&format!("{index}/{count}"))))
            .collect();
        let merged = root.join(format!("merged-{count}"));
        let mut args: Vec<String> = vec!["merge".into()];
        // In another order than the shards' own: the merge does not depend on it.
        args.extend(shards.iter().rev().map(|shard| shard.display().to_string()));
        args.extend(["--out".into(), merged.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = replaylab(&args);
        assert_eq!(code, 1, "the groups fail the merged exploration\n{stdout}\n{stderr}");
        assert!(
            read(&merged, "explore.json") == read(&whole, "explore.json"),
            "{count} shards: explore.json differs from the unsharded one\n{stdout}"
        );
        for group in groups {
            let file = group["case_file"].as_str().expect("a case file");
            assert!(
                read(&merged, file) == read(&whole, file),
                "{count} shards: {file}: the shrunk case beside the merged record"
            );
        }
    }
    // A shard alone does not make the exploration.
    let merged = root.join("merged-2");
    let one = root.join("1-of-2");
    let (code, _, stderr) =
        replaylab(&["merge", &one.display().to_string(), "--out", &merged.display().to_string()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("the exploration shards must be 1/2 to 2/2, each once"), "{stderr}");
}
