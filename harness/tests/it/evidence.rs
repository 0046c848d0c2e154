//! Evidence a reviewer can re-derive: `merge` recomputes every count of its shards from the
//! runs they record and refuses each forgery, naming the shard and the values (exit 2);
//! `replaylab verify` passes a genuine report (exit 0) and fails a forged, edited or stale one
//! (exit 1), re-running its runs in the simulation.

use crate::installed;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");
/// Fails some seeds of S05 and passes others (as in `merge.rs`).
const EXECUTOR: &str = "mutant:read_then_insert";
const COMMIT: &str = "0123456789abcdef";

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("evidence").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn replaylab_at(commit: &str, args: &[&str]) -> (i32, String, String) {
    let output = installed::installed(REPLAYLAB, false)
        .args(args)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .env("REPLAYLAB_COMMIT", commit)
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_ACTIONS")
        .output()
        .expect("replaylab runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn replaylab(args: &[&str]) -> (i32, String, String) {
    replaylab_at(COMMIT, args)
}

/// `matrix.json` of S01 and S05 against the mutant, seeds 0..7 (or one shard of them).
fn matrix(out: &Path, shard: Option<&str>) -> Value {
    let dir = out.display().to_string();
    let mut args = vec![
        "matrix",
        "--executor",
        EXECUTOR,
        "--only",
        "S01,S05",
        "--seeds",
        "7",
        "--format",
        "json",
        "--out",
        &dir,
    ];
    if let Some(shard) = shard {
        args.extend(["--shard", shard]);
    }
    let (code, stdout, stderr) = replaylab(&args);
    assert!(code == 0 || code == 1, "exit {code}\n{stdout}\n{stderr}");
    read(out)
}

fn read(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("matrix.json")).expect("matrix.json")).expect("JSON")
}

fn write(dir: &Path, value: &Value) -> PathBuf {
    std::fs::create_dir_all(dir).expect("a directory");
    std::fs::write(dir.join("matrix.json"), serde_json::to_string_pretty(value).expect("JSON"))
        .expect("written");
    dir.to_owned()
}

fn s05(result: &mut Value) -> &mut Value {
    result["scenarios"].as_array_mut().expect("scenarios").iter_mut().find(|s| s["id"] == "S05").expect("S05")
}

fn failing_seeds(result: &mut Value) -> Vec<u64> {
    s05(result)["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| f["seed"].as_u64().expect("seed"))
        .collect()
}

#[test]
fn merge_refuses_each_forgery_naming_the_shard_and_the_values() {
    let root = scratch("merge");
    let shards: Vec<PathBuf> = (1..=3).map(|index| root.join(format!("shard-{index}"))).collect();
    let genuine: Vec<Value> = shards
        .iter()
        .enumerate()
        .map(|(index, dir)| matrix(dir, Some(&format!("{}/3", index + 1))))
        .collect();
    let out = root.join("out");
    let merge = |dirs: &[PathBuf]| {
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(dirs.iter().map(|dir| dir.display().to_string()));
        args.extend(["--out".into(), out.display().to_string(), "--format".into(), "json".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        replaylab(&args)
    };
    let (code, stdout, stderr) = merge(&shards);
    assert_eq!(code, 1, "the genuine shards merge (and S05 fails)\n{stdout}\n{stderr}");
    // Which shard holds a failing seed of S05 (the premise of the forgeries below).
    let with_failure = (0..3)
        .find(|&index| !failing_seeds(&mut genuine[index].clone()).is_empty())
        .expect("the premise: S05 fails on some seed");
    let name = |index: usize| format!("shard {}/3", index + 1);

    // Each forgery: what it does to the shard that has a failure, and what the refusal says.
    type Forgery = (&'static str, Box<dyn Fn(&mut Value)>, Vec<&'static str>);
    let forgeries: Vec<Forgery> = vec![
        (
            "a pass count of 999",
            Box::new(|r: &mut Value| s05(r)["counts"]["pass"] = 999.into()),
            vec!["S05: counts says {pass: 999", "but its"],
        ),
        (
            "a dropped failure",
            Box::new(|r: &mut Value| {
                s05(r)["failures"].as_array_mut().expect("failures").pop();
            }),
            vec!["S05: failures lists seeds", "but its runs that did not pass are"],
        ),
        (
            "a failure dropped with its run and its counts",
            Box::new(|r: &mut Value| {
                let scenario = s05(r);
                let seed = scenario["failures"][0]["seed"].clone();
                scenario["failures"].as_array_mut().expect("failures").remove(0);
                scenario["runs"].as_array_mut().expect("runs").retain(|run| run["seed"] != seed);
                let fail = scenario["counts"]["fail"].as_u64().expect("a fail count");
                scenario["counts"]["fail"] = (fail - 1).into();
            }),
            vec!["S05: its runs are of seeds", "but it should hold"],
        ),
        (
            "a failing seed moved into another shard's range",
            Box::new(|r: &mut Value| {
                let scenario = s05(r);
                let seed = scenario["failures"][0]["seed"].as_u64().expect("seed");
                let moved = (seed + 1) % 7;
                scenario["failures"][0]["seed"] = moved.into();
                for run in scenario["runs"].as_array_mut().expect("runs") {
                    if run["seed"] == seed {
                        run["seed"] = moved.into();
                    }
                }
            }),
            vec!["S05: its runs are of seeds"],
        ),
        (
            "every run forged to pass",
            Box::new(|r: &mut Value| {
                for scenario in r["scenarios"].as_array_mut().expect("scenarios") {
                    let runs = scenario["runs"].as_array_mut().expect("runs");
                    for run in runs.iter_mut() {
                        run["verdict"] = "pass".into();
                        run.as_object_mut().expect("a run").remove("oracles");
                    }
                    let n = runs.len();
                    scenario["counts"] = json!({ "pass": n });
                    scenario["oracle_counts"] = json!({});
                    scenario["failures"] = json!([]);
                    scenario["verdict"] = "pass".into();
                    scenario["shown"]["verdict"] = "pass".into();
                    scenario["shown"]["violations"] = json!([]);
                }
                for row in r["rows"].as_array_mut().expect("rows") {
                    row["verdict"] = "pass".into();
                    row["first_failure"] = Value::Null;
                }
                r["verdict"] = "pass".into();
            }),
            vec!["S05: the timeline flags event #", "but the run shown's violations name none there"],
        ),
    ];
    for (what, forge, says) in &forgeries {
        let mut dirs = shards.clone();
        let mut forged = genuine[with_failure].clone();
        forge(&mut forged);
        dirs[with_failure] = write(&root.join("forged").join(what.replace(' ', "-")), &forged);
        let _ = std::fs::remove_dir_all(&out);
        let (code, stdout, stderr) = merge(&dirs);
        assert_eq!(code, 2, "{what}: refused as bad input\n{stdout}\n{stderr}");
        assert!(stderr.contains(&name(with_failure)), "{what}: the message names the shard\n{stderr}");
        assert!(stderr.contains(&dirs[with_failure].display().to_string()), "{what}: and its file\n{stderr}");
        for text in says {
            assert!(stderr.contains(text), "{what}: says {text:?}\n{stderr}");
        }
        assert!(!out.join("matrix.json").exists(), "{what}: nothing is written");
    }

    // Three shards forged to pass: each refused on its own evidence.
    let forge_all = &forgeries.last().expect("the pass forgery").1;
    let all: Vec<PathBuf> = (0..3)
        .map(|index| {
            let mut forged = genuine[index].clone();
            forge_all(&mut forged);
            write(&root.join(format!("all-pass-{}", index + 1)), &forged)
        })
        .collect();
    let (code, _, stderr) = merge(&all);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(&name(with_failure)), "{stderr}");

    // Swapped shard numbers: each shard's runs are not its new number's seeds.
    let mut swapped = [genuine[0].clone(), genuine[1].clone()];
    swapped[0]["shard"]["index"] = 2.into();
    swapped[1]["shard"]["index"] = 1.into();
    let dirs = vec![
        write(&root.join("swapped-1"), &swapped[0]),
        write(&root.join("swapped-2"), &swapped[1]),
        shards[2].clone(),
    ];
    let (code, _, stderr) = merge(&dirs);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("shard 2/3") && stderr.contains("its runs are of seeds 0, 3, 6"), "{stderr}");

    // Shards that differ say which shard holds which value.
    let mut other = genuine[1].clone();
    other["executor_version"] = "9.9.9".into();
    let dirs = vec![shards[0].clone(), write(&root.join("other-version"), &other), shards[2].clone()];
    let (code, _, stderr) = merge(&dirs);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("the shards differ in executor_version: shard 2/3 has 9.9.9, shard 1/3 has"),
        "{stderr}"
    );
}

#[test]
fn verify_passes_a_genuine_report_and_fails_forged_edited_and_stale_ones() {
    let root = scratch("verify");
    let genuine_dir = root.join("genuine");
    let genuine = matrix(&genuine_dir, None);
    let verify = |dir: &Path, commit: &str| {
        replaylab_at(commit, &["verify", &dir.display().to_string(), "--sample", "all", "--jobs", "2"])
    };
    let (code, stdout, stderr) = verify(&genuine_dir, COMMIT);
    assert_eq!(code, 0, "a genuine report verifies\n{stdout}\n{stderr}");
    assert!(stdout.contains("VERIFIED: 14 run(s) of 2 scenario(s)"), "{stdout}");

    // A sample: the runs shown plus the drawn ones, and the seed that draws them again.
    let (code, stdout, _) =
        replaylab(&["verify", &genuine_dir.display().to_string(), "--sample", "3", "--sample-seed", "5"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("running 5 of 14 run(s) again") && stdout.contains("--sample-seed 5"),
        "{stdout}"
    );

    // Forged with care, every count made to agree: a failing seed of S05 turned into a pass.
    // Only running it again finds it.
    let mut forged = genuine.clone();
    let seeds = failing_seeds(&mut forged);
    assert!(seeds.len() >= 2, "the premise: S05 fails on several seeds ({seeds:?})");
    let seed = seeds[seeds.len() - 1];
    let scenario = s05(&mut forged);
    scenario["failures"].as_array_mut().expect("failures").retain(|f| f["seed"] != seed);
    let mut fired: Vec<String> = Vec::new();
    let mut verdict = String::new();
    for run in scenario["runs"].as_array_mut().expect("runs") {
        if run["seed"] == seed {
            verdict = run["verdict"].as_str().expect("a verdict").to_owned();
            fired = run["oracles"]
                .as_array()
                .expect("oracles")
                .iter()
                .map(|o| o.as_str().expect("oracle").to_owned())
                .collect();
            run["verdict"] = "pass".into();
            run.as_object_mut().expect("a run").remove("oracles");
        }
    }
    let counts = &mut scenario["counts"];
    match counts[&verdict].as_u64().expect("a count") {
        1 => {
            counts.as_object_mut().expect("counts").remove(&verdict);
        }
        n => counts[&verdict] = (n - 1).into(),
    }
    counts["pass"] = (counts["pass"].as_u64().unwrap_or(0) + 1).into();
    for oracle in fired {
        let count = scenario["oracle_counts"][&oracle].as_u64().expect("a count");
        if count == 1 {
            scenario["oracle_counts"].as_object_mut().expect("counts").remove(&oracle);
        } else {
            scenario["oracle_counts"][&oracle] = (count - 1).into();
        }
    }
    let forged_dir = write(&root.join("forged"), &forged);
    let (code, stdout, stderr) = verify(&forged_dir, COMMIT);
    assert_eq!(code, 1, "a carefully forged report fails\n{stdout}\n{stderr}");
    assert!(stdout.contains("consistent: every count"), "the forgery agrees with itself\n{stdout}");
    assert!(stdout.contains("NOT RE-DERIVED: 1 of 14"), "{stdout}");
    assert!(stdout.contains(&format!("S05 seed {seed}: the report says pass")), "{stdout}");
    assert!(
        stdout.contains(&format!("replaylab run S05 --seed {seed} ")),
        "with a reproduce command\n{stdout}"
    );

    // A digest edited where the run shows it too.
    let mut edited = genuine.clone();
    let s01 = edited["scenarios"]
        .as_array_mut()
        .expect("scenarios")
        .iter_mut()
        .find(|s| s["id"] == "S01")
        .expect("S01");
    let fake = format!("sha256:{}", "0".repeat(64));
    s01["runs"][0]["history_digest"] = fake.clone().into();
    s01["shown"]["history_digest"] = fake.into();
    let (code, stdout, _) = verify(&write(&root.join("digest"), &edited), COMMIT);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("S01 seed 0: the report says pass") && stdout.contains("history sha256:0000"),
        "{stdout}"
    );

    // Edited without care: the report contradicts itself.
    let mut careless = genuine.clone();
    s05(&mut careless)["counts"]["pass"] = 999.into();
    let (code, stdout, _) = verify(&write(&root.join("careless"), &careless), COMMIT);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("FORGED OR EDITED") && stdout.contains("S05: counts says {pass: 999"),
        "{stdout}"
    );

    // A report of another commit is stale here.
    let (code, stdout, _) = verify(&genuine_dir, "fedcba9876543210");
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("STALE")
            && stdout.contains(&format!(
                "the report is of commit {COMMIT}; this checkout is commit fedcba9876543210"
            )),
        "{stdout}"
    );

    // A report made by another build of replaylab is stale too (its own build knows its commit).
    let built_at = genuine["harness_commit"].as_str().expect("this build knows its commit").to_owned();
    let mut rebuilt = genuine.clone();
    rebuilt["harness_commit"] = "0123456789abcdef0123456789abcdef01234567".into();
    let (code, stdout, _) = verify(&write(&root.join("rebuilt"), &rebuilt), COMMIT);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("STALE")
            && stdout.contains(&format!(
                "the report was made by replaylab built at commit 0123456789abcdef0123456789abcdef01234567; this replaylab was built at commit {built_at}"
            )),
        "{stdout}"
    );

    // Bad input: exit 2 before any run.
    for (args, says) in [
        (vec!["verify", "/nonexistent/report"], "/nonexistent/report"),
        (vec!["verify", &genuine_dir.display().to_string(), "--sample", "many"], "--sample \"many\""),
    ] {
        let (code, _, stderr) = replaylab(&args);
        assert_eq!(code, 2, "{args:?}\n{stderr}");
        assert!(stderr.contains(says), "{args:?}\n{stderr}");
    }
}

/// An exploration's shards hold no per-seed runs (thousands of seeds), but what must hold
/// between their numbers is checked: a forged fraction, group or verdict is refused by name.
#[test]
fn merge_refuses_an_exploration_shard_that_contradicts_its_numbers() {
    let root = scratch("explore");
    let shards: Vec<PathBuf> = (1..=2)
        .map(|index| {
            let out = root.join(format!("shard-{index}"));
            let regressions = root.join(format!("shard-{index}.jsonl"));
            let (code, stdout, stderr) = replaylab(&[
                "explore",
                "--executor",
                "mutant:blind_retry",
                "--seeds",
                "16",
                "--jobs",
                "2",
                "--shard",
                &format!("{index}/2"),
                "--out",
                &out.display().to_string(),
                "--regressions",
                &regressions.display().to_string(),
            ]);
            assert!(code == 0 || code == 1, "exit {code}\n{stdout}\n{stderr}");
            out
        })
        .collect();
    let out = root.join("merged");
    let merge = |dirs: &[PathBuf]| {
        let mut args: Vec<String> = vec!["merge".into()];
        args.extend(dirs.iter().map(|dir| dir.display().to_string()));
        args.extend(["--out".into(), out.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        replaylab(&args)
    };
    let (code, stdout, stderr) = merge(&shards);
    assert!(code == 0 || code == 1, "the genuine shards merge\n{stdout}\n{stderr}");
    let genuine: Value =
        serde_json::from_slice(&std::fs::read(shards[0].join("explore.json")).expect("explore.json"))
            .expect("JSON");
    assert!(
        genuine["coverage"]["faults_installed"].as_u64().is_some_and(|n| n > 0),
        "the premise: faults were installed"
    );
    type Forgery = (&'static str, Box<dyn Fn(&mut Value)>, &'static str);
    let forgeries: Vec<Forgery> = vec![
        (
            "faults fired beyond those installed",
            Box::new(|r: &mut Value| {
                let installed = r["coverage"]["faults_installed"].as_u64().expect("installed");
                r["coverage"]["faults_fired"] = (installed * 2 + 1).into();
            }),
            "faults_fired is",
        ),
        (
            "a pass count of 999",
            Box::new(|r: &mut Value| r["verdicts"]["pass"] = 999.into()),
            "verdicts count",
        ),
        (
            "a verdict forged to pass",
            Box::new(|r: &mut Value| {
                r["verdict"] = if r["verdict"] == "pass" { "fail" } else { "pass" }.into();
            }),
            "its verdict says",
        ),
    ];
    for (what, forge, says) in &forgeries {
        let mut forged = genuine.clone();
        forge(&mut forged);
        let dir = root.join("forged").join(what.replace(' ', "-"));
        std::fs::create_dir_all(&dir).expect("a directory");
        std::fs::write(dir.join("explore.json"), serde_json::to_string_pretty(&forged).expect("JSON"))
            .expect("written");
        let (code, _, stderr) = merge(&[dir.clone(), shards[1].clone()]);
        assert_eq!(code, 2, "{what}\n{stderr}");
        assert!(
            stderr.contains("exploration shard 1/2 contradicts itself") && stderr.contains(says),
            "{what}\n{stderr}"
        );
        assert!(stderr.contains(&dir.display().to_string()), "{what}: names the file\n{stderr}");
    }
}
