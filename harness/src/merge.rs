//! `replaylab merge`: the `matrix.json` files of a run's shards (`matrix --shard I/N` on N
//! machines) joined back into the whole run's result. Every field of a scenario summary is a
//! sum, a minimum, a maximum, a union or the choice of one shard's run by seed, so the merged
//! result is the unsharded run's, byte for byte once rendered; the rows are rolled up again by
//! [`crate::matrix::assemble`], the one roll-up.

use std::path::{Path, PathBuf};

use reports::{MatrixResult, ScenarioSummary, SCHEMA_VERSION};

use crate::matrix::{assemble, Header};

/// Why shards cannot be merged (bad input: exit 2).
#[derive(Debug)]
pub enum MergeError {
    /// A `matrix.json` could not be read or parsed.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The shards do not make one run.
    Mismatch(String),
    /// A shard contradicts its own evidence (its runs): edited, cut short or forged.
    Inconsistent {
        /// `shard 2/3` (or `the result`, unsharded).
        shard: String,
        /// Every contradiction, naming the scenario and both values.
        problems: Vec<String>,
    },
}

impl std::fmt::Display for MergeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MergeError::Unreadable { path, message } => write!(f, "{}: {message}", path.display()),
            MergeError::Mismatch(message) => f.write_str(message),
            MergeError::Inconsistent { shard, problems } => {
                write!(
                    f,
                    "{shard} contradicts its own runs, so it was edited or cut short ({} problem(s)):",
                    problems.len()
                )?;
                for problem in problems {
                    write!(f, "\n  {problem}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for MergeError {}

/// Reads `DIR/matrix.json` (or the file itself, when `path` is a file), refusing another
/// schema version with a message that says which, and a result that contradicts its own runs
/// ([`check`]).
pub fn read(path: &Path) -> Result<MatrixResult, MergeError> {
    let result = read_unchecked(path)?;
    let file = if path.is_dir() { path.join("matrix.json") } else { path.to_path_buf() };
    check(&result).map_err(|error| MergeError::Unreadable { path: file, message: error.to_string() })?;
    Ok(result)
}

/// Reads `DIR/matrix.json` (or the file) as [`read`] does, without checking it against its own
/// runs (`verify` reports a contradiction as a failed check, not as bad input).
pub fn read_unchecked(path: &Path) -> Result<MatrixResult, MergeError> {
    let file = if path.is_dir() { path.join("matrix.json") } else { path.to_path_buf() };
    let unreadable = |message: String| MergeError::Unreadable { path: file.clone(), message };
    // The message without its leading path: MergeError names the file itself.
    let prefix = format!("{}: ", file.display());
    let text = world::read_regular_file(&file, crate::cli::MAX_REPORT_BYTES)
        .map_err(|error| unreadable(error.strip_prefix(&prefix).unwrap_or(&error).to_owned()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| unreadable(format!("not JSON: {error}")))?;
    match value.get("schema_version").and_then(serde_json::Value::as_u64) {
        Some(version) if version == u64::from(SCHEMA_VERSION) => {}
        Some(version) => {
            return Err(unreadable(format!(
                "schema version {version}; this replaylab reads version {SCHEMA_VERSION} (run the shards and the merge with one replaylab)"
            )))
        }
        None => return Err(unreadable("no schema_version: not a replaylab matrix.json".into())),
    }
    serde_json::from_value(value).map_err(|error| unreadable(format!("not a valid matrix.json: {error}")))
}

/// Merges the results of shards 1..N of one run (each exactly once, in any order) into the
/// whole run's result. A single unsharded result merges into itself.
pub fn merge(parts: Vec<MatrixResult>) -> Result<MatrixResult, MergeError> {
    let mismatch = |message: String| Err(MergeError::Mismatch(message));
    let Some(first) = parts.first() else { return mismatch("nothing to merge".into()) };
    for part in &parts {
        check(part)?;
    }
    match first.shard {
        None if parts.len() == 1 => return Ok(parts.into_iter().next().expect("one part")),
        None => {
            return mismatch("a result that is not a shard (no `shard`) cannot be merged with others".into())
        }
        Some(shard) => {
            let mut indices: Vec<u64> = Vec::new();
            for part in &parts {
                match part.shard {
                    Some(other) if other.count == shard.count => indices.push(other.index),
                    Some(other) => {
                        return mismatch(format!(
                            "shard {other} is of a run split {} ways, shard {shard} of one split {} ways",
                            other.count, shard.count
                        ))
                    }
                    None => {
                        return mismatch("a result that is not a shard cannot be merged with shards".into())
                    }
                }
            }
            indices.sort_unstable();
            let expected: Vec<u64> = (1..=shard.count).collect();
            if indices != expected {
                let have: Vec<String> =
                    indices.iter().map(|index| format!("{index}/{}", shard.count)).collect();
                return mismatch(format!(
                    "the shards must be 1/{n} to {n}/{n}, each once; got {}",
                    have.join(", "),
                    n = shard.count
                ));
            }
        }
    }
    for part in &parts[1..] {
        let world = |result: &MatrixResult| {
            result.black_box.as_ref().map_or("the simulation".to_owned(), |b| {
                format!("{} x{} over {}", b.command, b.workers, b.transport)
            })
        };
        let scenario_ids = |result: &MatrixResult| {
            result.scenarios.iter().map(|s| format!("{} {}", s.id, s.name)).collect::<Vec<_>>().join(", ")
        };
        let values = |result: &MatrixResult| {
            [
                ("harness_version", result.harness_version.clone()),
                ("harness_commit", result.harness_commit.clone().unwrap_or_else(|| "none".into())),
                ("commit", result.commit.clone().unwrap_or_else(|| "none".into())),
                ("parameters", format!("{:?}", result.parameters)),
                ("executor", result.executor.clone()),
                ("executor_version", result.executor_version.clone()),
                ("seeds", format!("{} from {}", result.seeds, result.first_seed)),
                ("determinism_checked", result.determinism_checked.to_string()),
                ("world", world(result)),
                ("scenarios", scenario_ids(result)),
            ]
        };
        for ((what, theirs), (_, ours)) in values(part).into_iter().zip(values(first)) {
            if theirs != ours {
                return mismatch(format!(
                    "the shards differ in {what}: shard {} has {theirs}, shard {} has {ours}; not one run",
                    shard_name(part),
                    shard_name(first)
                ));
            }
        }
    }
    let header = Header {
        commit: first.commit.clone(),
        executor: first.executor.clone(),
        executor_version: first.executor_version.clone(),
        seeds: first.seeds,
        first_seed: first.first_seed,
        determinism_checked: first.determinism_checked,
        shard: None,
        // A selection's shards (`--only`) left out the rows their scenarios do not cover.
        selection: scenarios::Row::all()
            .iter()
            .any(|row| !first.rows.iter().any(|r| r.row == row.to_string())),
        // Shards of a black-box matrix: their real time adds up (the wall time is the
        // longest shard's, as if they ran side by side).
        black_box: first.black_box.clone().map(|mut black_box| {
            black_box.time = parts
                .iter()
                .filter_map(|s| s.black_box.as_ref())
                .fold(reports::RealTime::default(), |sum, shard| sum.plus(shard.time));
            black_box.matrix_wall_ms = parts
                .iter()
                .filter_map(|s| s.black_box.as_ref())
                .map(|b| b.matrix_wall_ms)
                .max()
                .unwrap_or(0);
            let judged: std::collections::BTreeSet<&String> =
                parts.iter().filter_map(|s| s.black_box.as_ref()).flat_map(|b| &b.oracles_judged).collect();
            let mut judged: Vec<String> = judged.into_iter().cloned().collect();
            judged.sort_by_key(|oracle| oracle.trim_start_matches('O').parse::<u32>().unwrap_or(u32::MAX));
            black_box.oracles_judged = judged;
            black_box.hints = reports::ToolHints::merged(
                parts.iter().filter_map(|s| s.black_box.as_ref()).flat_map(|b| &b.hints),
            );
            black_box
        }),
    };
    let (harness_version, harness_commit, parameters) =
        (first.harness_version.clone(), first.harness_commit.clone(), first.parameters.clone());
    let count = first.scenarios.len();
    let mut by_scenario: Vec<Vec<ScenarioSummary>> = vec![Vec::new(); count];
    for part in parts {
        for (index, scenario) in part.scenarios.into_iter().enumerate() {
            by_scenario[index].push(scenario);
        }
    }
    let summaries = by_scenario.into_iter().map(merge_scenario).collect();
    let mut result = assemble(header, summaries);
    result.harness_version = harness_version;
    result.harness_commit = harness_commit;
    result.parameters = parameters;
    check(&result)?;
    Ok(result)
}

/// One scenario's summaries from every shard, as the unsharded run would have summarised it:
/// its runs joined in seed order, and every count recomputed from them.
fn merge_scenario(parts: Vec<ScenarioSummary>) -> ScenarioSummary {
    let mut runs: Vec<reports::RunDigest> = parts.iter().flat_map(|part| part.runs.iter().cloned()).collect();
    runs.sort_by_key(|run| run.seed);
    let mut failures: Vec<reports::FailedRun> =
        parts.iter().flat_map(|part| part.failures.iter().cloned()).collect();
    failures.sort_by_key(|failure| failure.seed);
    // The run shown: the first failing seed's, else the first seed's, as in `matrix::run`.
    let shows = |part: &ScenarioSummary| match part.failures.first() {
        Some(failure) => (0, failure.seed),
        None => (1, part.shown.seed),
    };
    let shown_by = parts.iter().min_by_key(|part| shows(part)).expect("every scenario has a shard");
    let (shown, timeline) = (shown_by.shown.clone(), shown_by.timeline.clone());
    // What every shard says of the scenario alike (its id, file, rows, contract), with the
    // joined runs and what they count.
    let mut merged = parts[0].clone();
    runner::matrix::Tally::of(&runs).apply(&mut merged);
    merged.failures = failures;
    merged.runs = runs;
    merged.shown = shown;
    merged.timeline = timeline;
    merged
}

/// `2/3`, or `(whole run)`.
fn shard_name(result: &MatrixResult) -> String {
    result.shard.map_or("(whole run)".to_owned(), |shard| shard.to_string())
}

/// Refuses a result that contradicts its own runs, naming its shard and every contradiction.
pub fn check(result: &MatrixResult) -> Result<(), MergeError> {
    let problems = runner::evidence::contradictions(result);
    if problems.is_empty() {
        return Ok(());
    }
    let shard = match result.shard {
        Some(shard) => format!("shard {shard}"),
        None => "the result".to_owned(),
    };
    Err(MergeError::Inconsistent { shard, problems })
}
