//! `explore.json`: what an exploration (or one shard of it) ran and found, its failing seeds
//! grouped by signature, each group with its shrunk case; shards' records merge into the whole
//! exploration's ([`merge_records`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use judge::text::shell_quote;
use judge::verdict::Verdict;

use crate::coverage::{shortfalls_of, Coverage};

/// The version of `explore.json`'s format; bump it on any incompatible change. Version 2:
/// failing seeds in groups by signature (`groups`, each shrunk once), the world the cases ran
/// in, failing saved cases with their case files and reproduce commands.
pub const EXPLORE_SCHEMA_VERSION: u32 = 3;

/// The name `explore` gives its record, in its `--out` directory.
pub const EXPLORE_RECORD: &str = "explore.json";

/// Where an exploration's cases ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExploreWorld {
    /// The simulation: deterministic, a seed gives the same history every time.
    Simulated,
    /// Real processes on real time (`--executor-cmd`): not deterministic; a finding counts
    /// when it fails again.
    Process,
}

/// `explore.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExploreRecord {
    /// [`EXPLORE_SCHEMA_VERSION`].
    #[schemars(range(min = 3, max = 3))]
    pub schema_version: u32,
    /// The replaylab version that ran it.
    pub harness_version: String,
    /// The commit replaylab was built from, when its build knew it.
    #[schemars(required)]
    pub harness_commit: Option<String>,
    /// The source commit, when known.
    pub commit: Option<String>,
    /// The executor's name.
    pub executor: String,
    /// Its version.
    pub executor_version: String,
    /// Where the cases ran.
    pub world: ExploreWorld,
    /// Whether a seed gives the same history every time (the simulation), so that a finding
    /// reproduces from its seed alone.
    pub deterministic: bool,
    /// Seeds asked for (before sharding).
    pub seeds: u64,
    /// The first seed.
    pub start: u64,
    /// The shard run, if any.
    pub shard: Option<reports::Shard>,
    /// Whether every case ran twice.
    pub check_determinism: bool,
    /// Whether it stopped at its first failing seed (then it did not run every seed).
    pub stopped_early: bool,
    /// Cases per verdict (of each seed's first run).
    #[schemars(extend("propertyNames" = {"enum": ["not_applicable", "pass", "unknown", "crashed", "fail"]}))]
    pub verdicts: BTreeMap<Verdict, u64>,
    /// What the cases covered.
    pub coverage: Coverage,
    /// Why the coverage is not enough (empty when it is).
    pub shortfalls: Vec<String>,
    /// Seeds whose two runs differed.
    pub nondeterministic_seeds: Vec<u64>,
    /// The failing seeds, in groups by signature, each group shrunk once; in the order of
    /// their first seed.
    pub groups: Vec<GroupRecord>,
    /// The saved cases replayed first.
    pub saved_cases: SavedCases,
    /// Pass, or fail on a (confirmed) group, a failing saved case, a nondeterministic seed or
    /// thin coverage.
    pub verdict: Verdict,
}

/// How often a case failed again, with the same signature, when it was run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    /// Runs that failed with the signature.
    pub failed: u64,
    /// Runs.
    pub runs: u64,
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {}", self.failed, self.runs)
    }
}

/// The failing seeds of one signature, and the one shrunk case that stands for them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupRecord {
    /// The oracle and the shape of what failed (`explore::signature`).
    pub signature: String,
    /// The oracle (or `crashed`).
    pub oracle: String,
    /// How many seeds failed with this signature.
    pub count: u64,
    /// Those seeds, in order.
    pub seeds: Vec<u64>,
    /// The seed whose case was shrunk: the smallest case of the group, the first seed among
    /// equals.
    pub shrunk_seed: u64,
    /// Its size as drawn (operations + actions + workers).
    pub original_size: u64,
    /// Its size shrunk.
    pub shrunk_size: u64,
    /// Candidates shrinking tried.
    pub shrink_runs: u64,
    /// The shrunk case's scenario file, beside `explore.json`.
    pub case_file: String,
    /// The shrunk case's violations.
    pub violations: Vec<reports::Violation>,
    /// Its notes.
    pub notes: Vec<String>,
    /// One command that runs the shrunk case, its file named as it is beside `explore.json`
    /// (run it from that directory; the terminal shows it with the whole path).
    pub reproduce: String,
    /// Real processes only: how often the drawn case failed again with the signature.
    pub confirmation: Option<Rate>,
    /// Real processes only: how often the saved (shrunk) case failed again with it.
    pub reproduced: Option<Rate>,
    /// Whether the group counts as a finding: always in the simulation; with real processes,
    /// when the drawn case failed again.
    pub confirmed: bool,
}

/// One saved case that fails again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailingSavedCase {
    /// The seed it was found at.
    pub seed: u64,
    /// The executor it was found with.
    pub found_with: String,
    /// The oracle that fails now.
    pub oracle: String,
    /// Its scenario file, beside `explore.json`.
    pub case_file: String,
    /// One command that runs it, its file named as it is beside `explore.json` (run it from
    /// that directory; the terminal shows it with the whole path).
    pub reproduce: String,
}

/// The saved cases an exploration replayed before its seeds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SavedCases {
    /// How many were replayed.
    pub replayed: u64,
    /// Those that still fail.
    pub failing: Vec<FailingSavedCase>,
}

/// The JSON Schema of `explore.json`, generated from the types, as pretty JSON with a trailing
/// newline (the bytes of `explore/schema/explore.schema.json`).
pub fn explore_schema() -> String {
    let schema = schemars::schema_for!(ExploreRecord);
    let mut text = serde_json::to_string_pretty(&schema).expect("a JSON Schema serialises");
    text.push('\n');
    text
}

/// Merges the records of shards 1..N of one exploration (each once) into the whole
/// exploration's: counts summed, the coverage floor judged again over the sum, groups joined by
/// signature (their seeds together, the shrunk case of the smallest drawn case, the first seed
/// among equals: the one the whole exploration shrinks, so that the merged record does not
/// depend on how the seeds were sharded). Shards that do not make one exploration are an error.
pub fn merge_records(parts: Vec<ExploreRecord>) -> Result<ExploreRecord, String> {
    let first = parts.first().ok_or("nothing to merge")?.clone();
    for part in &parts {
        check_record(part)?;
    }
    let count = match first.shard {
        None if parts.len() == 1 => return Ok(first),
        None => return Err("an exploration that is not a shard cannot be merged with others".into()),
        Some(shard) => shard.count,
    };
    let mut indices: Vec<u64> =
        parts.iter().filter_map(|part| part.shard.filter(|s| s.count == count)).map(|s| s.index).collect();
    indices.sort_unstable();
    if indices != (1..=count).collect::<Vec<_>>() || parts.len() as u64 != count {
        let have: Vec<String> =
            parts.iter().map(|part| part.shard.map_or("whole".into(), |s| s.to_string())).collect();
        return Err(format!(
            "the exploration shards must be 1/{count} to {count}/{count}, each once; got {}",
            have.join(", ")
        ));
    }
    if let Some(part) = parts.iter().find(|part| part.stopped_early) {
        return Err(format!(
            "exploration shard {} stopped at its first failure (--stop-at-first): it did not run all its seeds",
            part.shard.map_or("?".into(), |s| s.to_string())
        ));
    }
    for part in &parts[1..] {
        let same = [
            ("harness_version", part.harness_version == first.harness_version),
            ("harness_commit", part.harness_commit == first.harness_commit),
            ("commit", part.commit == first.commit),
            ("executor", part.executor == first.executor && part.executor_version == first.executor_version),
            ("world", part.world == first.world),
            ("seeds", part.seeds == first.seeds && part.start == first.start),
            ("check_determinism", part.check_determinism == first.check_determinism),
            ("saved cases replayed", part.saved_cases == first.saved_cases),
            (
                "coverage's oracles beyond the executor",
                part.coverage.beyond_executor == first.coverage.beyond_executor,
            ),
        ];
        if let Some((what, _)) = same.iter().find(|(_, same)| !same) {
            return Err(format!("the exploration shards differ in {what}: not one exploration"));
        }
    }
    let mut merged = ExploreRecord {
        shard: None,
        verdicts: BTreeMap::new(),
        coverage: Coverage { beyond_executor: first.coverage.beyond_executor.clone(), ..Coverage::default() },
        nondeterministic_seeds: Vec::new(),
        groups: Vec::new(),
        ..first
    };
    let mut groups: BTreeMap<String, GroupRecord> = BTreeMap::new();
    for part in &parts {
        for (verdict, n) in &part.verdicts {
            *merged.verdicts.entry(*verdict).or_insert(0) += n;
        }
        merged.coverage.absorb(&part.coverage);
        merged.nondeterministic_seeds.extend(&part.nondeterministic_seeds);
        for group in &part.groups {
            match groups.get_mut(&group.signature) {
                None => {
                    groups.insert(group.signature.clone(), group.clone());
                }
                Some(joined) => {
                    let mut seeds = joined.seeds.clone();
                    seeds.extend(&group.seeds);
                    seeds.sort_unstable();
                    let smaller =
                        (group.original_size, group.shrunk_seed) < (joined.original_size, joined.shrunk_seed);
                    if smaller {
                        *joined = group.clone();
                    }
                    joined.count = seeds.len() as u64;
                    joined.seeds = seeds;
                }
            }
        }
    }
    merged.nondeterministic_seeds.sort_unstable();
    merged.groups = groups.into_values().collect();
    sort_groups(&mut merged.groups);
    merged.shortfalls = shortfalls_of(&merged.coverage, merged.stopped_early);
    merged.verdict = record_verdict(&merged);
    Ok(merged)
}

/// Refuses a record that contradicts itself, naming its shard and every contradiction.
pub fn check_record(record: &ExploreRecord) -> Result<(), String> {
    let problems = contradictions(record);
    if problems.is_empty() {
        return Ok(());
    }
    let which =
        record.shard.map_or("the exploration".to_owned(), |shard| format!("exploration shard {shard}"));
    Err(format!(
        "{which} contradicts itself, so it was edited or cut short ({} problem(s)):\n  {}",
        problems.len(),
        problems.join("\n  ")
    ))
}

/// What in an exploration's record its own numbers contradict, one sentence each with the
/// values. A record holds no per-seed evidence (an exploration runs thousands of seeds), so this
/// checks what must hold between its counts: the seeds it ran, the fractions no more than
/// whole, the groups' seeds in its shard, the verdict judged again.
pub fn contradictions(record: &ExploreRecord) -> Vec<String> {
    let mut found = Vec::new();
    let seeds: Vec<u64> = (0..record.seeds)
        .map_while(|offset| record.start.checked_add(offset))
        .filter(|seed| record.shard.is_none_or(|shard| shard.contains(*seed)))
        .collect();
    let count = |verdict| record.verdicts.get(&verdict).copied().unwrap_or(0);
    let ran: u64 = record.verdicts.values().sum();
    let coverage = &record.coverage;
    if record.stopped_early {
        if ran > seeds.len() as u64 {
            found.push(format!("verdicts count {ran} case(s) but its seeds are {}", seeds.len()));
        }
    } else if ran != seeds.len() as u64 {
        found.push(format!("verdicts count {ran} case(s) but it ran {} seed(s)", seeds.len()));
    }
    let mut must = |what: String, holds: bool| {
        if !holds {
            found.push(what);
        }
    };
    must(
        format!(
            "coverage counts {} case(s) and {} not applicable but verdicts count {} and {}",
            coverage.cases,
            coverage.not_applicable,
            ran - count(Verdict::NotApplicable),
            count(Verdict::NotApplicable)
        ),
        coverage.cases == ran - count(Verdict::NotApplicable)
            && coverage.not_applicable == count(Verdict::NotApplicable),
    );
    must(
        format!(
            "coverage counts {} unknown case(s) but verdicts count {}",
            coverage.unknown,
            count(Verdict::Unknown)
        ),
        coverage.unknown == count(Verdict::Unknown),
    );
    must(
        format!("faults_fired is {} of {} installed", coverage.faults_fired, coverage.faults_installed),
        coverage.faults_fired <= coverage.faults_installed,
    );
    must(
        format!("crashes_after_commit is {} of {} crashes", coverage.crashes_after_commit, coverage.crashes),
        coverage.crashes_after_commit <= coverage.crashes,
    );
    must(
        format!("stale_writes counts {} case(s) of {}", coverage.stale_writes, coverage.cases),
        coverage.stale_writes <= coverage.cases,
    );
    for (oracle, n) in &coverage.exercised {
        must(format!("{oracle} is exercised in {n} case(s) of {}", coverage.cases), *n <= coverage.cases);
    }
    let in_shard = |seed: &u64| seeds.binary_search(seed).is_ok();
    let mut grouped: Vec<u64> = Vec::new();
    for group in &record.groups {
        must(
            format!(
                "group {} counts {} seed(s) but lists {}",
                group.signature,
                group.count,
                group.seeds.len()
            ),
            group.count == group.seeds.len() as u64,
        );
        let outside: Vec<u64> = group.seeds.iter().copied().filter(|seed| !in_shard(seed)).collect();
        must(
            format!("group {} lists seed(s) {} that it did not run", group.signature, seeds_text(&outside)),
            outside.is_empty(),
        );
        must(
            format!(
                "group {} was shrunk from seed {}, which is not among its seeds",
                group.signature, group.shrunk_seed
            ),
            group.seeds.contains(&group.shrunk_seed),
        );
        grouped.extend(&group.seeds);
    }
    let failed = count(Verdict::Fail) + count(Verdict::Crashed) + count(Verdict::Unknown);
    must(
        format!("its groups hold {} seed(s) but only {failed} case(s) did not pass", grouped.len()),
        grouped.len() as u64 <= failed,
    );
    grouped.sort_unstable();
    let before = grouped.len();
    grouped.dedup();
    must(format!("{} seed(s) are in more than one group", before - grouped.len()), before == grouped.len());
    let outside: Vec<u64> =
        record.nondeterministic_seeds.iter().copied().filter(|seed| !in_shard(seed)).collect();
    must(
        format!("nondeterministic_seeds lists seed(s) {} that it did not run", seeds_text(&outside)),
        outside.is_empty(),
    );
    let shortfalls = shortfalls_of(&record.coverage, record.stopped_early);
    must(
        format!("its shortfalls say {:?} but its coverage gives {:?}", record.shortfalls, shortfalls),
        record.shortfalls == shortfalls,
    );
    let verdict = record_verdict(record);
    must(
        format!("its verdict says {} but its groups and coverage give {verdict}", record.verdict),
        record.verdict == verdict,
    );
    found
}

/// Groups in the order of their first seed (then by signature): an order that does not depend
/// on how the seeds were sharded.
pub fn sort_groups(groups: &mut [GroupRecord]) {
    groups.sort_by(|a, b| (a.seeds.first(), &a.signature).cmp(&(b.seeds.first(), &b.signature)));
}

/// Pass, or fail on a confirmed group, a failing saved case, a nondeterministic seed or thin
/// coverage.
pub fn record_verdict(record: &ExploreRecord) -> Verdict {
    let failed = record.groups.iter().any(|group| group.confirmed)
        || !record.saved_cases.failing.is_empty()
        || !record.nondeterministic_seeds.is_empty()
        || !record.shortfalls.is_empty();
    if failed {
        Verdict::Fail
    } else {
        Verdict::Pass
    }
}

/// The most seeds a line lists before it says how many more there are.
pub const SEEDS_SHOWN: usize = 8;

/// `3, 17, 25` or `3, 17, 25, ... and 22 more`.
pub fn seeds_text(seeds: &[u64]) -> String {
    let shown: Vec<String> = seeds.iter().take(SEEDS_SHOWN).map(u64::to_string).collect();
    match seeds.len().saturating_sub(SEEDS_SHOWN) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// A reproduce command of the record, whose case file it names as it is beside the record,
/// with that file's path in `dir` instead: a command that works from anywhere.
fn command_in(dir: &Path, reproduce: &str, case_file: &str) -> String {
    let relative = format!("--case {}", shell_quote(case_file));
    let whole = format!("--case {}", shell_quote(&dir.join(case_file).display().to_string()));
    reproduce.replacen(&relative, &whole, 1)
}

/// GitHub annotations (`::error` workflow commands, printed under `GITHUB_ACTIONS=true`): one
/// per confirmed group and per failing saved case, at its case file in `dir` (as `--out` was
/// given; explore wrote it there), with its reproduce command; and one, at no file, for thin
/// coverage or nondeterministic seeds.
pub fn record_annotations(record: &ExploreRecord, dir: &Path) -> Vec<String> {
    let file = |case_file: &str| dir.join(case_file).display().to_string();
    let mut lines = Vec::new();
    for group in record.groups.iter().filter(|group| group.confirmed) {
        let case = file(&group.case_file);
        let mut message = format!(
            "{} failing seed(s): {}; seed {} shrunk from {} to {}",
            group.count,
            seeds_text(&group.seeds),
            group.shrunk_seed,
            group.original_size,
            group.shrunk_size
        );
        if let Some(violation) = group.violations.first() {
            message.push_str(&format!("\n{violation}"));
        }
        message.push_str(&format!("\nreproduce: {}", command_in(dir, &group.reproduce, &group.case_file)));
        let title = format!("replaylab explore: {}", group.signature);
        lines.push(reports::error_annotation(Some((&case, None)), &title, &message));
    }
    for failing in &record.saved_cases.failing {
        let case = file(&failing.case_file);
        let title =
            format!("replaylab explore: saved case (seed {}) fails: {}", failing.seed, failing.oracle);
        let message = format!(
            "found with {}; reproduce: {}",
            failing.found_with,
            command_in(dir, &failing.reproduce, &failing.case_file)
        );
        lines.push(reports::error_annotation(Some((&case, None)), &title, &message));
    }
    let mut other: Vec<String> =
        record.shortfalls.iter().map(|shortfall| format!("coverage too thin: {shortfall}")).collect();
    if !record.nondeterministic_seeds.is_empty() {
        other.push(format!(
            "seeds whose two runs gave different histories: {}",
            seeds_text(&record.nondeterministic_seeds)
        ));
    }
    if !other.is_empty() {
        lines.push(reports::error_annotation(None, "replaylab explore", &other.join("\n")));
    }
    lines
}

/// The record as text for the terminal: the counts, the coverage, its shortfalls and every
/// group with its reproduce command (its case file in `dir`, where the record is).
pub fn render_record(record: &ExploreRecord, dir: &Path) -> String {
    let count = |verdict| record.verdicts.get(&verdict).copied().unwrap_or(0);
    let mut text = format!(
        "exploration of {} seeds against {}: {} pass, {} fail, {} unknown, {} crashed, {} not applicable\n{}\n",
        record.verdicts.values().sum::<u64>(),
        record.executor,
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Unknown),
        count(Verdict::Crashed),
        count(Verdict::NotApplicable),
        record.coverage.line()
    );
    for shortfall in &record.shortfalls {
        text.push_str(&format!("coverage too thin: {shortfall}\n"));
    }
    if !record.nondeterministic_seeds.is_empty() {
        let seeds: Vec<String> = record.nondeterministic_seeds.iter().map(u64::to_string).collect();
        text.push_str(&format!("determinism: seeds whose histories differed: {}\n", seeds.join(", ")));
    }
    for failing in &record.saved_cases.failing {
        text.push_str(&format!(
            "saved case (seed {}, found with {}) FAILS: {}; reproduce: {}\n",
            failing.seed,
            failing.found_with,
            failing.oracle,
            command_in(dir, &failing.reproduce, &failing.case_file)
        ));
    }
    if !record.groups.is_empty() {
        let seeds: u64 = record.groups.iter().map(|group| group.count).sum();
        text.push_str(&format!("{seeds} failing seed(s) in {} group(s):\n", record.groups.len()));
    }
    for group in &record.groups {
        let rate =
            group.reproduced.map(|rate| format!(", failed again in {rate} reruns")).unwrap_or_default();
        let unconfirmed = if group.confirmed { "" } else { " (not confirmed: it did not fail again)" };
        text.push_str(&format!(
            "{}: {} seed(s) ({}); shrunk from {} to {}{rate}{unconfirmed} ({}); reproduce: {}\n",
            group.signature,
            group.count,
            seeds_text(&group.seeds),
            group.original_size,
            group.shrunk_size,
            group.case_file,
            command_in(dir, &group.reproduce, &group.case_file)
        ));
    }
    text.push_str(&format!("verdict: {}\n", record.verdict));
    text
}

/// Writes `explore.json` into `out`.
pub fn write_record(out: &Path, record: &ExploreRecord) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("failed to create {}", out.display()))?;
    let path = out.join(EXPLORE_RECORD);
    let mut text = serde_json::to_string_pretty(record).expect("an exploration record serialises");
    text.push('\n');
    std::fs::write(&path, text).with_context(|| format!("failed to write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(signature: &str, seeds: &[u64], original_size: u64) -> GroupRecord {
        GroupRecord {
            signature: signature.into(),
            oracle: signature.split(' ').next().unwrap_or_default().into(),
            count: seeds.len() as u64,
            seeds: seeds.to_vec(),
            shrunk_seed: seeds[0],
            original_size,
            shrunk_size: 3,
            shrink_runs: 20,
            case_file: format!("case-seed-{}.toml", seeds[0]),
            violations: Vec::new(),
            notes: Vec::new(),
            reproduce: format!("replaylab run --case case-seed-{}.toml", seeds[0]),
            confirmation: None,
            reproduced: None,
            confirmed: true,
        }
    }

    /// Shard `index` of 2 of seeds 0..10 (five seeds each), its numbers agreeing with its groups.
    fn shard(index: u64, groups: Vec<GroupRecord>) -> ExploreRecord {
        let failed: u64 = groups.iter().map(|g| g.count).sum();
        let exercised = judge::oracles::ORACLES.iter().map(|(oracle, _)| (oracle.to_string(), 5)).collect();
        let coverage = Coverage { cases: 5, exercised, ..Coverage::default() };
        let mut record = ExploreRecord {
            schema_version: EXPLORE_SCHEMA_VERSION,
            harness_version: "0".into(),
            harness_commit: None,
            commit: None,
            executor: "mutant:x".into(),
            executor_version: "0".into(),
            world: ExploreWorld::Simulated,
            deterministic: true,
            seeds: 10,
            start: 0,
            shard: Some(reports::Shard { index, count: 2 }),
            check_determinism: false,
            stopped_early: false,
            verdicts: BTreeMap::from([(Verdict::Fail, failed), (Verdict::Pass, 5 - failed)]),
            shortfalls: shortfalls_of(&coverage, false),
            coverage,
            nondeterministic_seeds: Vec::new(),
            groups,
            saved_cases: SavedCases::default(),
            verdict: Verdict::Fail,
        };
        record.verdict = record_verdict(&record);
        assert!(contradictions(&record).is_empty(), "{:?}", contradictions(&record));
        record
    }

    #[test]
    fn groups_merge_by_signature_keeping_the_smallest_drawn_case() {
        let one = shard(
            1,
            vec![
                group("O1 single_effect (charge_created)", &[0, 4], 9),
                group("O6 x (answered unknown)", &[2], 5),
            ],
        );
        let two = shard(2, vec![group("O1 single_effect (charge_created)", &[1, 3], 7)]);
        let merged = merge_records(vec![two, one]).expect("one exploration");
        let signatures: Vec<&str> = merged.groups.iter().map(|g| g.signature.as_str()).collect();
        assert_eq!(
            signatures,
            ["O1 single_effect (charge_created)", "O6 x (answered unknown)"],
            "by first seed"
        );
        let charges = &merged.groups[0];
        assert_eq!((charges.count, charges.seeds.clone()), (4, vec![0, 1, 3, 4]));
        assert_eq!(
            (charges.shrunk_seed, charges.original_size),
            (1, 7),
            "the smaller drawn case stands for them"
        );
        assert_eq!(merged.verdicts[&Verdict::Fail], 5);
        assert_eq!(merged.verdict, Verdict::Fail);
    }

    #[test]
    fn an_unconfirmed_group_alone_does_not_fail_the_record() {
        let mut record = shard(2, vec![group("O1 single_effect (ticket_created)", &[3], 4)]);
        record.groups[0].confirmed = false;
        assert_eq!(record_verdict(&record), Verdict::Pass);
        record.groups[0].confirmed = true;
        assert_eq!(record_verdict(&record), Verdict::Fail);
    }

    #[test]
    fn reproduce_commands_name_the_case_file_where_the_record_is() {
        let mut record = shard(2, vec![group("O1 single_effect (ticket_created)", &[3], 4)]);
        record.groups[0].reproduce = "replaylab run --case case-seed-3.toml --executor x".into();
        let text = render_record(&record, Path::new("/tmp/merged dir"));
        assert!(
            text.contains("reproduce: replaylab run --case '/tmp/merged dir/case-seed-3.toml' --executor x"),
            "{text}"
        );
    }

    #[test]
    fn long_seed_lists_are_shortened() {
        assert_eq!(seeds_text(&[1, 2, 3]), "1, 2, 3");
        let many: Vec<u64> = (0..30).collect();
        assert_eq!(seeds_text(&many), "0, 1, 2, 3, 4, 5, 6, 7 and 22 more");
    }

    #[test]
    fn the_record_round_trips_through_json_and_refuses_unknown_fields() {
        let record = shard(2, vec![group("O1 single_effect (ticket_created)", &[3, 5], 4)]);
        let text = serde_json::to_string_pretty(&record).expect("serialises");
        let back: ExploreRecord = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back, record);
        let mut value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        value["groups"][0]["surprise"] = true.into();
        assert!(serde_json::from_value::<ExploreRecord>(value).is_err(), "deny_unknown_fields in groups");
        assert!(text.contains("\"world\": \"simulated\""), "{text}");
    }
}
