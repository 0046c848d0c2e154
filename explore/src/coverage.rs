//! What an exploration covered: faults fired, crashes after a commit, stale writes, unknown
//! cases and why, and the oracles that had something to judge; and the floor it is held to.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use judge::oracles::ORACLES;
use judge::verdict::Verdict;
use runner::RunCoverage;

use crate::CaseTool;

/// The most cases that may end `unknown` (a premise that did not happen) before exploration
/// fails: more would mean the generator asks for things that do not happen.
pub const MAX_UNKNOWN_PERCENT: f64 = 5.0;
/// The fewest installed faults that must fire: a fault that never fires tested nothing.
pub const MIN_FAULTS_FIRED_PERCENT: f64 = 80.0;

/// What an exploration covered, summed over its cases.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Coverage {
    /// Cases run (those `not applicable` to the executor are not run, and not counted here).
    pub cases: u64,
    /// Cases not run: they needed something the executor does not declare.
    pub not_applicable: u64,
    /// Of those, cases whose verdict was `unknown`.
    pub unknown: u64,
    /// Fault rules installed, and fired as often as asked.
    pub faults_installed: u64,
    /// See `faults_installed`.
    pub faults_fired: u64,
    /// Workers crashed, and crashed right after a committed effect.
    pub crashes: u64,
    /// See `crashes`.
    pub crashes_after_commit: u64,
    /// Cases in which a stale owner wrote inside a new owner's window (see
    /// [`runner::stale_writes`]).
    pub stale_writes: u64,
    /// Cases in which each oracle had something to judge.
    #[schemars(extend("propertyNames" = {"pattern": "^O([1-9]|1[0-3])$"}))]
    pub exercised: BTreeMap<String, u64>,
    /// Why cases ended `unknown`: the premise that did not happen, by kind, with a count.
    #[schemars(extend("propertyNames" = {"enum": PREMISE_KINDS}))]
    pub unknown_because: BTreeMap<String, u64>,
    /// Oracles no case can give anything to judge, because the executor does not support what
    /// they judge ([`oracles_beyond`]); not counted as unexercised.
    pub beyond_executor: Vec<String>,
}

/// The oracles that judge only what an executor with `capabilities` cannot do: O10 (one job
/// per operation) without delayed jobs, O11 (no stale overwrite) without `tickets.set_status`,
/// and those that read the harness's final poll (O6, O12, O13) without a poll (an MCP server
/// that does not serve `replaylab.poll`).
pub fn oracles_beyond(capabilities: &protocol::ExecutorCapabilities) -> Vec<String> {
    let mut beyond = Vec::new();
    if !capabilities.poll {
        beyond.push("O6".to_owned());
    }
    if !CaseTool::Job.supported_by(capabilities) {
        beyond.push("O10".to_owned());
    }
    if !CaseTool::SetStatus.supported_by(capabilities) {
        beyond.push("O11".to_owned());
    }
    if !capabilities.poll {
        beyond.extend(["O12".to_owned(), "O13".to_owned()]);
    }
    beyond
}

/// The kind of premise a note of an `unknown` run names.
fn premise_kind(note: &str) -> &'static str {
    let [pause, fault, overlap, ticket, time, other] = PREMISE_KINDS;
    if note.starts_with(runner::timing::TIME_PREMISE) {
        time
    } else if note.contains("reached the pause point") {
        pause
    } else if note.contains("never fired") || note.contains("times: the fault") {
        fault
    } else if note.contains("did not overlap") || note.contains("never reached its worker") {
        overlap
    } else if note.contains("created no ticket") {
        ticket
    } else {
        other
    }
}

/// The kinds of premise that did not happen ([`Coverage::unknown_because`]'s keys).
pub const PREMISE_KINDS: [&str; 6] = [
    "a pause point was never reached",
    "a fault did not fire",
    "concurrent calls did not overlap",
    "a ticket to update or edit did not exist",
    "real time ran out (a time premise)",
    "another premise",
];

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The coverage's shortfalls, none for an exploration that stopped early (it ran too few
/// seeds for its coverage to say anything) or that had no case at all.
pub fn shortfalls_of(coverage: &Coverage, stopped_early: bool) -> Vec<String> {
    if stopped_early || coverage.cases + coverage.not_applicable == 0 {
        Vec::new()
    } else {
        coverage.shortfalls()
    }
}

impl Coverage {
    /// Adds one case (`notes`: why it was unknown, if it was).
    pub fn add(&mut self, verdict: Verdict, run: &RunCoverage, notes: &[String]) {
        if verdict == Verdict::NotApplicable {
            self.not_applicable += 1;
            return;
        }
        self.cases += 1;
        if verdict == Verdict::Unknown {
            self.unknown += 1;
            let kinds: std::collections::BTreeSet<&'static str> =
                notes.iter().map(|note| premise_kind(note)).collect();
            for kind in kinds {
                *self.unknown_because.entry(kind.to_owned()).or_insert(0) += 1;
            }
        }
        self.faults_installed += u64::from(run.faults_installed);
        self.faults_fired += u64::from(run.faults_fired);
        self.crashes += u64::from(run.crashes);
        self.crashes_after_commit += u64::from(run.crashes_after_commit);
        self.stale_writes += u64::from(run.stale_writes > 0);
        for oracle in &run.exercised {
            *self.exercised.entry((*oracle).to_owned()).or_insert(0) += 1;
        }
    }

    /// Adds another part's coverage (a shard's).
    pub fn absorb(&mut self, other: &Coverage) {
        self.cases += other.cases;
        self.not_applicable += other.not_applicable;
        self.unknown += other.unknown;
        self.faults_installed += other.faults_installed;
        self.faults_fired += other.faults_fired;
        self.crashes += other.crashes;
        self.crashes_after_commit += other.crashes_after_commit;
        self.stale_writes += other.stale_writes;
        for (oracle, count) in &other.exercised {
            *self.exercised.entry(oracle.clone()).or_insert(0) += count;
        }
        for (kind, count) in &other.unknown_because {
            *self.unknown_because.entry(kind.clone()).or_insert(0) += count;
        }
    }

    /// The oracles no case gave anything to judge (of those the executor can be judged by).
    pub fn unexercised(&self) -> Vec<&'static str> {
        self.judgeable().into_iter().filter(|id| !self.exercised.contains_key(*id)).collect()
    }

    /// The oracles the executor can be judged by: all but [`Coverage::beyond_executor`].
    fn judgeable(&self) -> Vec<&'static str> {
        ORACLES.iter().map(|(id, _)| *id).filter(|id| !self.beyond_executor.iter().any(|b| b == id)).collect()
    }

    /// `coverage: cases=N unknown=U% faults_fired=F% crashes_after_commit=C% stale_writes=W
    /// oracles_exercised=K/M`, then ` not_applicable=A` when some cases were not run and
    /// ` beyond_executor=O10,O11` when some oracles cannot judge the executor (M counts the
    /// others).
    pub fn line(&self) -> String {
        let mut not_applicable = if self.not_applicable > 0 {
            format!(" not_applicable={}", self.not_applicable)
        } else {
            String::new()
        };
        if !self.beyond_executor.is_empty() {
            not_applicable.push_str(&format!(" beyond_executor={}", self.beyond_executor.join(",")));
        }
        format!(
            "coverage: cases={} unknown={:.1}% faults_fired={:.1}% crashes_after_commit={:.1}% stale_writes={} oracles_exercised={}/{}{not_applicable}",
            self.cases,
            percent(self.unknown, self.cases),
            percent(self.faults_fired, self.faults_installed),
            percent(self.crashes_after_commit, self.crashes),
            self.stale_writes,
            self.judgeable().len() - self.unexercised().len(),
            self.judgeable().len()
        )
    }

    /// Why the coverage is not enough, if it is not.
    pub fn shortfalls(&self) -> Vec<String> {
        let mut shortfalls = Vec::new();
        if self.cases == 0 && self.not_applicable > 0 {
            shortfalls.push(format!(
                "none of the {} cases applied to the executor (each needed something it does not declare)",
                self.not_applicable
            ));
            return shortfalls;
        }
        let unknown = percent(self.unknown, self.cases);
        if unknown > MAX_UNKNOWN_PERCENT {
            shortfalls.push(format!(
                "{unknown:.1}% of the cases ended unknown (a premise did not happen); at most {MAX_UNKNOWN_PERCENT}% may"
            ));
        }
        let fired = percent(self.faults_fired, self.faults_installed);
        if self.faults_installed > 0 && fired < MIN_FAULTS_FIRED_PERCENT {
            shortfalls.push(format!(
                "only {fired:.1}% of the faults installed fired; at least {MIN_FAULTS_FIRED_PERCENT}% must"
            ));
        }
        let unexercised = self.unexercised();
        if !unexercised.is_empty() {
            shortfalls.push(format!("no case gave {} anything to judge", unexercised.join(", ")));
        }
        shortfalls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        faults_installed: u32,
        faults_fired: u32,
        crashes: u32,
        after: u32,
        exercised: &[&'static str],
    ) -> RunCoverage {
        RunCoverage {
            faults_installed,
            faults_fired,
            crashes,
            crashes_after_commit: after,
            exercised: exercised.iter().copied().collect(),
            stale_writes: after,
            ..RunCoverage::default()
        }
    }

    #[test]
    fn the_coverage_line_sums_the_cases() {
        let mut coverage = Coverage::default();
        let every: Vec<&'static str> = ORACLES.iter().map(|(id, _)| *id).collect();
        coverage.add(Verdict::Pass, &run(2, 2, 2, 1, &every), &[]);
        coverage.add(Verdict::Pass, &run(2, 1, 0, 0, &[]), &[]);
        coverage.add(
            Verdict::Unknown,
            &run(0, 0, 0, 0, &[]),
            &["line 3: fault rule 1 (x) never fired: ...".into()],
        );
        coverage.add(Verdict::Fail, &run(0, 0, 2, 2, &[]), &[]);
        assert_eq!(
            coverage.line(),
            "coverage: cases=4 unknown=25.0% faults_fired=75.0% crashes_after_commit=75.0% stale_writes=2 oracles_exercised=13/13"
        );
        assert_eq!(coverage.unknown_because.get("a fault did not fire"), Some(&1));
        let shortfalls = coverage.shortfalls();
        assert_eq!(shortfalls.len(), 2, "{shortfalls:?}");
        assert!(shortfalls[0].contains("25.0% of the cases ended unknown"), "{shortfalls:?}");
        assert!(shortfalls[1].contains("75.0% of the faults"), "{shortfalls:?}");
    }

    #[test]
    fn an_oracle_with_nothing_to_judge_is_a_shortfall() {
        let mut coverage = Coverage::default();
        coverage.add(Verdict::Pass, &run(1, 1, 0, 0, &["O1", "O2"]), &[]);
        assert!(coverage.line().ends_with("oracles_exercised=2/13"), "{}", coverage.line());
        let shortfalls = coverage.shortfalls();
        assert_eq!(shortfalls.len(), 1, "{shortfalls:?}");
        assert!(shortfalls[0].starts_with("no case gave O3, O4"), "{shortfalls:?}");
    }
}

#[cfg(test)]
mod capability_tests {
    use super::*;
    use crate as explore;
    use protocol::ExecutorCapabilities;

    #[test]
    fn oracles_beyond_a_narrow_executor_are_named_not_counted_as_unexercised() {
        assert!(oracles_beyond(&ExecutorCapabilities::all()).is_empty());
        let tickets = ExecutorCapabilities::tools(["tickets.create"]);
        assert_eq!(oracles_beyond(&tickets), ["O10", "O11"]);
        let mut coverage = Coverage { beyond_executor: oracles_beyond(&tickets), ..Coverage::default() };
        let every: std::collections::BTreeSet<&'static str> =
            ORACLES.iter().map(|(id, _)| *id).filter(|id| !["O10", "O11"].contains(id)).collect();
        let run = RunCoverage { exercised: every, ..RunCoverage::default() };
        coverage.add(Verdict::Pass, &run, &[]);
        coverage.add(Verdict::NotApplicable, &RunCoverage::default(), &[]);
        assert!(coverage.shortfalls().is_empty(), "{:?}", coverage.shortfalls());
        assert!(
            coverage.line().ends_with("oracles_exercised=11/11 not_applicable=1 beyond_executor=O10,O11"),
            "{}",
            coverage.line()
        );
        // Nothing applied: that is a shortfall, never a pass.
        let nothing = Coverage { not_applicable: 3, ..Coverage::default() };
        assert_eq!(nothing.shortfalls().len(), 1);
    }

    #[test]
    fn a_case_narrowed_to_a_narrow_executor_applies_to_it() {
        let tickets = ExecutorCapabilities::tools(["tickets.create"]);
        let needs_of = |case: &explore::Case| case.to_scenario().needs(&protocol::ContractSet::builtin());
        let mut narrowed_away = 0;
        for seed in 0..200 {
            let case = explore::case_for_seed(seed);
            let narrowed = case.clone().narrowed_to(&tickets);
            assert!(tickets.lacks(&needs_of(&narrowed)).is_empty(), "seed {seed}: {:?}", needs_of(&narrowed));
            narrowed_away += u32::from(narrowed != case);
            assert_eq!(case.clone().narrowed_to(&ExecutorCapabilities::all()), case, "all narrows nothing");
        }
        assert!(narrowed_away > 100, "most random cases use more than tickets: {narrowed_away}");
    }
}
