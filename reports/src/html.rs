//! `report.html`: one self-contained page (inline CSS and SVG, no scripts, nothing loaded
//! from elsewhere). Failures come first, each explaining itself: the failing seeds with their
//! oracles and reproduce commands, what every operation was answered beside what the ledger
//! holds, and the run drawn as a sequence diagram whose violating events are marked. Then the
//! rows and scenarios, then the passing scenarios, collapsed. The page is a minijinja template
//! (`templates/report.html.j2`) over a view model computed here; every text goes through the
//! template's HTML autoescape.
//!
//! A timeline is a CSS grid, not a picture: time runs down, one row per event, one column per
//! participant (agent, workers, downstream, store). A message spans the columns from its
//! sender to its receiver with an arrow; every label is whole and wraps. A narrow column at the
//! left draws each request as a bar from the moment it was sent to its answer (Jepsen's
//! timeline, turned on its side), coloured by how it ended. Fault windows are shaded bands on
//! the downstream's column. The lane names stay visible while the timeline scrolls.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::evidence::{
    answer_text, counts_text, covering, effects_text, failing_seeds_text, first_reason, ledger_text,
    operation_name, oracle_counts_text, pass_counts, row_topic, run_unit, scenario_evidence, seeds_text,
    statuses_text,
};
use crate::format::RenderOptions;
use crate::json::matrix_sha256;
use crate::model::{FailedRun, MarkKind, MatrixResult, RunResult, ScenarioSummary, Timeline, Verdict};

/// The page template; its name ends in `.html`, so autoescape is HTML.
const TEMPLATE_NAME: &str = "report.html";
const TEMPLATE: &str = include_str!("../templates/report.html.j2");

/// A quiet stretch at least this long between two events gets a row of its own saying so
/// (settle phases wait 20 s of simulated time).
const IDLE_BREAK_MS: u64 = 1_000;
/// The grid's first columns: time, history position, request bars; lanes follow.
const FIRST_LANE_COLUMN: usize = 4;
/// How many failing seeds a scenario lists before saying how many more there are (the JSON
/// lists them all).
const FAILING_SEEDS_SHOWN: usize = 50;

/// `report.html`: a self-contained page with the summary, the rows, the scenarios and one
/// timeline per scenario.
pub fn render_html(result: &MatrixResult, options: &RenderOptions) -> String {
    let page = page(result, options);
    let mut environment = minijinja::Environment::new();
    environment.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    environment.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    environment.add_template(TEMPLATE_NAME, TEMPLATE).expect("the report template is valid minijinja");
    let template = environment.get_template(TEMPLATE_NAME).expect("the report template was just added");
    let mut text = template
        .render(minijinja::Value::from(minijinja::value::Serde(&page)))
        .expect("the report template renders every page view (its variables are all defined)");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[derive(Debug, Serialize)]
struct Page {
    verdict: &'static str,
    executor: String,
    executor_version: String,
    harness_version: String,
    schema_version: u32,
    commit: Option<String>,
    seeds: u64,
    seeds_text: String,
    /// What a run is called: `seed`, or `repeat` in the black-box world.
    unit: &'static str,
    shard: Option<String>,
    determinism_checked: bool,
    black_box: Vec<String>,
    world: String,
    sha256: String,
    generated_at: Option<String>,
    rows_passed: usize,
    rows_total: usize,
    scenarios_passed: usize,
    /// `; N rows and M scenarios are not applicable to it (not run)`, or empty.
    not_applicable: String,
    /// `12 of 31 rows applied; 19 not applicable`.
    rows_applied: String,
    scenarios_total: usize,
    rows: Vec<RowView>,
    /// Every scenario, in matrix order (the index table).
    scenarios: Vec<ScenarioView>,
    /// The scenarios that did not pass, worst first (fail, crashed, unknown), shown open.
    failing: Vec<ScenarioView>,
    /// The passing scenarios, then those not applicable, collapsed.
    settled: Vec<ScenarioView>,
    legend: Vec<LegendItem>,
}

#[derive(Debug, Serialize)]
struct RowView {
    row: String,
    topic: String,
    verdict: &'static str,
    scenarios: Vec<String>,
    seeds_run: u64,
    evidence: Vec<String>,
    failure: Option<FailureView>,
}

#[derive(Debug, Serialize)]
struct FailureView {
    scenario: String,
    /// `Seed`, or `Repeat` in the black-box world.
    unit_title: &'static str,
    seed: u64,
    verdict: &'static str,
    oracles: String,
    reason: String,
    violations: Vec<String>,
    notes: Vec<String>,
    reproduce: String,
}

#[derive(Debug, Serialize)]
struct ScenarioView {
    /// What a run is called: `seed`, or `repeat` in the black-box world.
    unit: &'static str,
    id: String,
    name: String,
    rows: String,
    summary: String,
    expected: String,
    verdict: &'static str,
    /// `fail`, `undecided` (unknown, not applicable), `crashed` or `pass`: how it is styled.
    tone: &'static str,
    runs: String,
    effects: String,
    statuses: String,
    evidence: Vec<String>,
    oracle_counts: String,
    /// Every seed that did not pass (up to [`FAILING_SEEDS_SHOWN`]).
    failures: Vec<FailureView>,
    /// How many more there are than listed.
    failures_more: usize,
    failing_seeds: String,
    /// The shown run's first failure, with every violation and note.
    failure: Option<FailureView>,
    operations: Vec<OperationView>,
    history_digest: String,
    shown_seed: u64,
    timeline_caption: String,
    timeline: TimelineView,
}

#[derive(Debug, Serialize)]
struct OperationView {
    operation: String,
    answers: Vec<EntryView>,
    ledger: Vec<EntryView>,
    /// Whether an oracle names anything of it.
    violated: bool,
}

#[derive(Debug, Serialize)]
struct EntryView {
    /// The request's label (answers only).
    label: String,
    text: String,
    seq: u64,
    violated: String,
    /// `ok`, `undecided`, `none` for answers; `effect` for ledger entries; `wrong` when an
    /// oracle names it.
    tone: &'static str,
}

#[derive(Debug, Serialize)]
struct TimelineView {
    seed: u64,
    /// `grid-template-columns`.
    columns: String,
    lanes: Vec<LaneView>,
    /// Grid rows: 1 is the header; events and quiet stretches follow.
    rows: Vec<GridRow>,
    marks: Vec<MarkView>,
    bars: Vec<BarView>,
    bands: Vec<BandView>,
    /// The last grid row.
    last_row: usize,
}

#[derive(Debug, Serialize)]
struct LaneView {
    name: String,
    column: usize,
    stripe: bool,
}

#[derive(Debug, Serialize)]
struct GridRow {
    row: usize,
    /// `0.050 s` when the time changed since the row above, else empty.
    time: String,
    seq: Option<u64>,
    /// For a quiet stretch: `20.000 s quiet`.
    quiet: Option<String>,
    violated: bool,
}

#[derive(Debug, Serialize)]
struct MarkView {
    seq: u64,
    at_ms: u64,
    row: usize,
    lane: String,
    to_lane: Option<String>,
    kind: &'static str,
    kind_text: &'static str,
    /// First and last grid column it spans (a message spans sender to receiver).
    column_start: usize,
    column_end: usize,
    /// `right` or `left` for a message, else empty.
    direction: &'static str,
    /// How many lanes a message spans (its arrow starts and ends on their centres).
    span: usize,
    label: String,
    /// The executor's events that led to it.
    log: Vec<String>,
    /// For outcomes: `applied`, `replayed`, `in_flight`, `rejected`, `unknown`, `expired`.
    status: Option<String>,
    /// The oracles whose violations name it (`O1, O8`), else empty.
    violated: String,
}

#[derive(Debug, Serialize)]
struct BarView {
    track: usize,
    row_start: usize,
    row_end: usize,
    /// `ok`, `undecided`, `none` (no answer) or `wrong`.
    tone: &'static str,
    title: String,
}

#[derive(Debug, Serialize)]
struct BandView {
    column: usize,
    row_start: usize,
    row_end: usize,
    label: String,
}

#[derive(Debug, Serialize)]
struct LegendItem {
    kind: &'static str,
    text: &'static str,
    arrow: bool,
}

fn page(result: &MatrixResult, options: &RenderOptions) -> Page {
    let (rows_passed, rows_total, scenarios_passed, scenarios_total) = pass_counts(result);
    let p = &result.parameters;
    let badness = |verdict: Verdict| match verdict {
        Verdict::Fail => 0,
        Verdict::Crashed => 1,
        Verdict::Unknown => 2,
        Verdict::Pass => 3,
        Verdict::NotApplicable => 4,
    };
    let mut order: Vec<&ScenarioSummary> = result.scenarios.iter().collect();
    order.sort_by_key(|scenario| badness(scenario.verdict));
    let (failing, settled): (Vec<&ScenarioSummary>, Vec<&ScenarioSummary>) =
        order.into_iter().partition(|scenario| badness(scenario.verdict) < badness(Verdict::Pass));
    Page {
        verdict: result.verdict.as_str(),
        executor: result.executor.clone(),
        executor_version: result.executor_version.clone(),
        harness_version: crate::replaylab_text(result),
        schema_version: result.schema_version,
        commit: result.commit.clone(),
        seeds: result.seeds,
        seeds_text: seeds_text(result),
        unit: run_unit(result),
        shard: result.shard.map(|shard| shard.to_string()),
        determinism_checked: result.determinism_checked,
        world: format!(
            "tick {} ms, latency {}-{} ms, agent timeout {} ms, run limit {} ms",
            p.tick_ms, p.min_latency_ms, p.max_latency_ms, p.agent_timeout_ms, p.run_limit_ms
        ),
        sha256: matrix_sha256(result),
        black_box: crate::evidence::black_box_text(result),
        generated_at: options.generated_at_text(),
        rows_passed,
        rows_total,
        scenarios_passed,
        not_applicable: crate::evidence::not_applicable_text(result),
        rows_applied: crate::evidence::rows_applied_text(result),
        scenarios_total,
        rows: result
            .rows
            .iter()
            .map(|row| RowView {
                row: row.row.clone(),
                topic: row_topic(result, &row.row),
                verdict: row.verdict.as_str(),
                scenarios: row.scenarios.clone(),
                seeds_run: row.seeds_run,
                evidence: covering(result, &row.scenarios)
                    .into_iter()
                    .map(|scenario| {
                        format!(
                            "{}: {}",
                            scenario.id,
                            scenario_evidence(scenario, run_unit(result)).join("; ")
                        )
                    })
                    .collect(),
                failure: row.first_failure.as_ref().map(|failure| failure_view(failure, run_unit(result))),
            })
            .collect(),
        scenarios: result.scenarios.iter().map(|scenario| index_view(scenario, run_unit(result))).collect(),
        failing: failing.into_iter().map(|scenario| scenario_view(scenario, run_unit(result))).collect(),
        settled: settled.into_iter().map(|scenario| scenario_view(scenario, run_unit(result))).collect(),
        legend: MarkKind::ALL
            .iter()
            .map(|&kind| LegendItem { kind: kind.as_str(), text: kind_text(kind), arrow: is_message(kind) })
            .collect(),
    }
}

fn failure_view(failure: &FailedRun, unit: &str) -> FailureView {
    FailureView {
        scenario: failure.scenario.clone(),
        unit_title: if unit == "repeat" { "Repeat" } else { "Seed" },
        seed: failure.seed,
        verdict: failure.verdict.as_str(),
        oracles: failure.oracles.join(", "),
        reason: first_reason(failure),
        violations: failure.violations.iter().map(ToString::to_string).collect(),
        notes: failure.notes.clone(),
        reproduce: failure.reproduce.clone(),
    }
}

fn tone(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Fail => "fail",
        Verdict::Crashed => "crashed",
        Verdict::Unknown | Verdict::NotApplicable => "undecided",
        Verdict::Pass => "pass",
    }
}

/// A scenario for the index table only (no timeline).
fn index_view(scenario: &ScenarioSummary, unit: &'static str) -> ScenarioView {
    let mut view = scenario_view_with(scenario, unit, false);
    view.failures.clear();
    view
}

fn scenario_view(scenario: &ScenarioSummary, unit: &'static str) -> ScenarioView {
    scenario_view_with(scenario, unit, true)
}

fn scenario_view_with(scenario: &ScenarioSummary, unit: &'static str, draw: bool) -> ScenarioView {
    let drawn_failing = scenario.failures.first().is_some_and(|run| run.seed == scenario.timeline.seed);
    let title = if unit == "repeat" { "Repeat" } else { "Seed" };
    let seed = scenario.timeline.seed;
    let timeline_caption = if drawn_failing {
        format!("{title} {seed}, the first run that did not pass, as a sequence diagram.")
    } else if scenario.verdict == Verdict::Pass {
        format!("{title} {seed}, the first {unit}'s run, as a sequence diagram.")
    } else {
        format!("{title} {seed}, as a sequence diagram.")
    };
    let shown = &scenario.shown;
    let empty =
        Timeline { seed: scenario.timeline.seed, lanes: Vec::new(), marks: Vec::new(), bands: Vec::new() };
    ScenarioView {
        unit,
        id: scenario.id.clone(),
        name: scenario.name.clone(),
        rows: scenario.rows.join(", "),
        summary: scenario.summary.clone(),
        expected: scenario.expected.clone(),
        verdict: scenario.verdict.as_str(),
        tone: tone(scenario.verdict),
        runs: counts_text(&scenario.counts),
        effects: effects_text(scenario),
        statuses: statuses_text(&scenario.statuses),
        evidence: scenario_evidence(scenario, unit),
        oracle_counts: oracle_counts_text(&scenario.oracle_counts),
        failures: scenario
            .failures
            .iter()
            .take(FAILING_SEEDS_SHOWN)
            .map(|failure| failure_view(failure, unit))
            .collect(),
        failures_more: scenario.failures.len().saturating_sub(FAILING_SEEDS_SHOWN),
        failing_seeds: failing_seeds_text(&scenario.failures, unit),
        failure: scenario.failures.first().map(|failure| failure_view(failure, unit)),
        operations: if scenario.verdict == Verdict::NotApplicable {
            Vec::new()
        } else {
            operations_view(shown)
        },
        history_digest: shown.history_digest.clone(),
        shown_seed: shown.seed,
        timeline_caption,
        timeline: layout(
            if draw { &scenario.timeline } else { &empty },
            if draw { Some(shown) } else { None },
        ),
    }
}

fn operations_view(run: &RunResult) -> Vec<OperationView> {
    run.operations
        .iter()
        .map(|record| {
            let answers: Vec<EntryView> = record
                .answers
                .iter()
                .map(|answer| EntryView {
                    label: answer.label.clone(),
                    text: answer_text(answer),
                    seq: answer.answered_seq.unwrap_or(answer.seq),
                    violated: answer.violated.join(", "),
                    tone: answer_tone(answer.status.as_deref(), !answer.violated.is_empty()),
                })
                .collect();
            let ledger: Vec<EntryView> = record
                .ledger
                .iter()
                .map(|entry| EntryView {
                    label: String::new(),
                    text: ledger_text(entry),
                    seq: entry.seq,
                    violated: entry.violated.join(", "),
                    tone: if entry.violated.is_empty() { "effect" } else { "wrong" },
                })
                .collect();
            let violated = answers.iter().chain(&ledger).any(|entry| !entry.violated.is_empty());
            OperationView { operation: operation_name(record).to_owned(), answers, ledger, violated }
        })
        .collect()
}

/// How an answer is drawn: `wrong` when an oracle names it, `none` without an answer,
/// `undecided` for `unknown` and `in_flight`, else `ok`.
fn answer_tone(status: Option<&str>, violated: bool) -> &'static str {
    match status {
        _ if violated => "wrong",
        None => "none",
        Some("unknown" | "in_flight") => "undecided",
        Some(_) => "ok",
    }
}

/// Whether a kind is drawn as an arrow between two lanes (when it names a second lane).
fn is_message(kind: MarkKind) -> bool {
    matches!(
        kind,
        MarkKind::Request
            | MarkKind::Outcome
            | MarkKind::DownstreamRequest
            | MarkKind::DownstreamAnswer
            | MarkKind::Store
            | MarkKind::Delivery
    )
}

/// The legend's words for a kind.
fn kind_text(kind: MarkKind) -> &'static str {
    match kind {
        MarkKind::Request => "agent calls, polls or reconciles",
        MarkKind::Outcome => "worker answers the agent",
        MarkKind::NoAnswer => "agent got no answer",
        MarkKind::DownstreamRequest => "worker calls the downstream",
        MarkKind::DownstreamAnswer => "downstream answer arrives",
        MarkKind::DownstreamLost => "downstream answer lost",
        MarkKind::Effect => "effect committed (ledger)",
        MarkKind::Fault => "fault rule installed, fired or healed",
        MarkKind::Pause => "worker paused or released",
        MarkKind::Crash => "worker crashed",
        MarkKind::Restart => "worker restarted",
        MarkKind::Store => "durable store call committed",
        MarkKind::Decision => "authorization, revocation or human edit",
        MarkKind::Delivery => "queue or webhook delivery",
        MarkKind::Clock => "time let pass, settle phase",
        MarkKind::Failure => "panic or run limit",
    }
}

/// `20.075 s` for 20075 ms.
fn seconds_text(at_ms: u64) -> String {
    format!("{}.{:03} s", at_ms / 1000, at_ms % 1000)
}

/// The status word of an outcome label such as `retry: replayed ticket_1`.
fn outcome_status(label: &str) -> Option<String> {
    let (_, answer) = label.rsplit_once(": ")?;
    let word = answer.split_whitespace().next()?;
    ["applied", "replayed", "in_flight", "rejected", "unknown", "expired"]
        .contains(&word)
        .then(|| word.to_owned())
}

/// Lays a timeline out on a grid: one column per entry of `lanes` (plus any lane a mark names
/// that is not listed), one row per mark in history order, a row saying so for every quiet
/// stretch of at least [`IDLE_BREAK_MS`], a bar per request of `run` (the run drawn) from its
/// row to its answer's, and a band per fault window.
///
/// Rows follow the history's positions, not the marks' times: the history is the order things
/// happened in (what the oracles and every `#position` name), while a mark's time is the clock
/// of the host that recorded it, and within one simulation step each host runs a whole tick on
/// its own clock (hosts in a seeded random order), so a later position can carry an earlier
/// time by up to a tick (real processes' events are timed just before they are appended).
/// Sorted by time, the position column ran out of order and request bars ended before they
/// began. The time column shows the time the run had reached (the latest so far); each mark's
/// own time stays in its title.
fn layout(timeline: &Timeline, run: Option<&RunResult>) -> TimelineView {
    let mut lane_names: Vec<String> = timeline.lanes.clone();
    for mark in &timeline.marks {
        for lane in std::iter::once(&mark.lane).chain(mark.to_lane.as_ref()) {
            if !lane_names.contains(lane) {
                lane_names.push(lane.clone());
            }
        }
    }
    let column_of = |name: &str| -> usize {
        FIRST_LANE_COLUMN + lane_names.iter().position(|lane| lane == name).unwrap_or(0)
    };
    let mut ordered: Vec<&crate::model::Mark> = timeline.marks.iter().collect();
    // Stable: marks of one position (a fault healed and the settle) keep their order.
    ordered.sort_by_key(|mark| mark.seq);

    let mut rows = Vec::with_capacity(ordered.len());
    let mut marks = Vec::with_capacity(ordered.len());
    let mut row_of_seq: BTreeMap<u64, usize> = BTreeMap::new();
    let mut row = 1;
    let mut previous_ms: Option<u64> = None;
    for mark in &ordered {
        // The time the run had reached: never earlier than a row above.
        let reached_ms = previous_ms.map_or(mark.at_ms, |previous| previous.max(mark.at_ms));
        if let Some(previous) = previous_ms {
            let quiet_ms = reached_ms - previous;
            if quiet_ms >= IDLE_BREAK_MS {
                row += 1;
                rows.push(GridRow {
                    row,
                    time: String::new(),
                    seq: None,
                    quiet: Some(format!("{} quiet", seconds_text(quiet_ms))),
                    violated: false,
                });
            }
        }
        row += 1;
        rows.push(GridRow {
            row,
            time: if previous_ms == Some(reached_ms) { String::new() } else { seconds_text(reached_ms) },
            seq: Some(mark.seq),
            quiet: None,
            violated: !mark.violated.is_empty(),
        });
        previous_ms = Some(reached_ms);
        row_of_seq.insert(mark.seq, row);

        let from = column_of(&mark.lane);
        let to =
            mark.to_lane.as_deref().filter(|to| is_message(mark.kind) && *to != mark.lane).map(column_of);
        let (column_start, column_end, direction) = match to {
            Some(to) if to > from => (from, to, "right"),
            Some(to) => (to, from, "left"),
            None => (from, from, ""),
        };
        marks.push(MarkView {
            seq: mark.seq,
            at_ms: mark.at_ms,
            row,
            lane: mark.lane.clone(),
            to_lane: mark.to_lane.clone(),
            kind: mark.kind.as_str(),
            kind_text: kind_text(mark.kind),
            column_start,
            column_end,
            direction,
            span: column_end - column_start + 1,
            label: mark.label.clone(),
            log: mark.log.clone(),
            status: (mark.kind == MarkKind::Outcome).then(|| outcome_status(&mark.label)).flatten(),
            violated: mark.violated.join(", "),
        });
    }
    let last_row = row;
    // The row at or after a history position (marks not drawn fall to the next one drawn).
    let row_at = |seq: u64| row_of_seq.range(seq..).next().map_or(last_row, |(_, row)| *row);

    let mut bars = Vec::new();
    let mut track_free_after: Vec<usize> = Vec::new();
    if let Some(run) = run.filter(|run| run.seed == timeline.seed && !marks.is_empty()) {
        for answer in run.answers() {
            let row_start = row_at(answer.seq);
            let row_end = answer.answered_seq.map_or(last_row, row_at).max(row_start);
            let track = match track_free_after.iter().position(|free| *free < row_start) {
                Some(track) => track,
                None => {
                    track_free_after.push(0);
                    track_free_after.len() - 1
                }
            };
            track_free_after[track] = row_end;
            bars.push(BarView {
                track: track + 1,
                row_start,
                row_end,
                tone: answer_tone(answer.status.as_deref(), !answer.violated.is_empty()),
                title: format!("{}: {}", answer.label, answer_text(answer)),
            });
        }
    }
    let bands = timeline
        .bands
        .iter()
        .filter(|_| !marks.is_empty())
        .map(|band| BandView {
            column: column_of(&band.lane),
            row_start: row_at(band.from_seq),
            row_end: band.to_seq.map_or(last_row, row_at),
            label: band.label.clone(),
        })
        .collect();
    let tracks = track_free_after.len().max(1);
    TimelineView {
        seed: timeline.seed,
        columns: format!(
            "5.2em 3em max(3.4em, {}px) repeat({}, minmax(9.5em, 1fr))",
            tracks * 9 + 6,
            lane_names.len().max(1)
        ),
        lanes: lane_names
            .iter()
            .enumerate()
            .map(|(index, name)| LaneView {
                name: name.clone(),
                column: FIRST_LANE_COLUMN + index,
                stripe: index % 2 == 0,
            })
            .collect(),
        rows,
        marks,
        bars,
        bands,
        last_row,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Band, Mark};

    fn mark(seq: u64, at_ms: u64, lane: &str, to_lane: Option<&str>, kind: MarkKind) -> Mark {
        Mark {
            seq,
            at_ms,
            lane: lane.into(),
            to_lane: to_lane.map(Into::into),
            kind,
            label: format!("m{seq}"),
            log: Vec::new(),
            violated: Vec::new(),
        }
    }

    fn timeline(marks: Vec<Mark>, bands: Vec<Band>) -> Timeline {
        Timeline {
            seed: 0,
            lanes: vec!["agent".into(), "worker-1".into(), "downstream".into()],
            marks,
            bands,
        }
    }

    #[test]
    fn rows_follow_time_and_long_quiet_stretches_get_a_row_of_their_own() {
        let view = layout(
            &timeline(
                vec![
                    mark(1, 0, "agent", Some("worker-1"), MarkKind::Request),
                    mark(2, 0, "downstream", None, MarkKind::Fault),
                    mark(3, 10, "downstream", None, MarkKind::Effect),
                    mark(4, 20_010, "worker-1", Some("agent"), MarkKind::Outcome),
                ],
                Vec::new(),
            ),
            None,
        );
        let rows: Vec<usize> = view.marks.iter().map(|m| m.row).collect();
        assert_eq!(rows, [2, 3, 4, 6], "row 1 is the header; row 5 says the 20 s were quiet");
        assert_eq!(view.rows[3].quiet.as_deref(), Some("20.000 s quiet"));
        let times: Vec<&str> = view.rows.iter().map(|row| row.time.as_str()).collect();
        assert_eq!(times, ["0.000 s", "", "0.010 s", "", "20.010 s"], "a time only when it changes");
        assert_eq!(view.last_row, 6);
    }

    /// Within one simulation step each host reads its own clock, so a later history position
    /// can carry an earlier time: rows still follow the positions, the time column never runs
    /// backwards, and a request's bar runs down from its row to its answer's.
    #[test]
    fn rows_follow_history_positions_when_a_later_event_carries_an_earlier_time() {
        let timeline = timeline(
            vec![
                mark(1, 100, "agent", Some("worker-1"), MarkKind::Request),
                mark(2, 109, "worker-1", Some("downstream"), MarkKind::DownstreamRequest),
                mark(3, 102, "downstream", None, MarkKind::Fault),
                mark(4, 110, "downstream", None, MarkKind::Effect),
                mark(5, 2_115, "worker-1", Some("agent"), MarkKind::Outcome),
            ],
            Vec::new(),
        );
        let run = RunResult {
            scenario: "S01".into(),
            scenario_name: "s".into(),
            seed: 0,
            executor: "e".into(),
            verdict: Verdict::Pass,
            violations: Vec::new(),
            notes: Vec::new(),
            history_digest: String::new(),
            effects: 1,
            effect_references: Vec::new(),
            operations: vec![crate::model::OperationRecord {
                operation: Some("a/b/c/d".into()),
                answers: vec![crate::model::Answer {
                    label: "first".into(),
                    kind: crate::model::RequestKind::Call,
                    seq: 2,
                    answered_seq: Some(5),
                    status: Some("applied".into()),
                    no_answer: None,
                    reference: None,
                    result_digest: None,
                    fingerprint: None,
                    violated: Vec::new(),
                }],
                ledger: Vec::new(),
            }],
            reproduce: String::new(),
            real_time: None,
        };
        let view = layout(&timeline, Some(&run));
        let positions: Vec<u64> = view.rows.iter().filter_map(|row| row.seq).collect();
        assert_eq!(positions, [1, 2, 3, 4, 5], "the position column is in history order");
        let times: Vec<&str> = view.rows.iter().map(|row| row.time.as_str()).collect();
        assert_eq!(times, ["0.100 s", "0.109 s", "", "0.110 s", "", "2.115 s"], "time never runs back");
        assert_eq!(view.rows[4].quiet.as_deref(), Some("2.005 s quiet"));
        let rows: Vec<usize> = view.marks.iter().map(|m| m.row).collect();
        assert_eq!(rows, [2, 3, 4, 5, 7]);
        assert_eq!((view.bars[0].row_start, view.bars[0].row_end), (3, 7), "the bar runs down");
    }

    #[test]
    fn messages_span_from_sender_to_receiver_in_either_direction() {
        let view = layout(
            &timeline(
                vec![
                    mark(1, 0, "agent", Some("downstream"), MarkKind::Request),
                    mark(2, 1, "downstream", Some("agent"), MarkKind::Outcome),
                    mark(3, 2, "worker-1", Some("worker-1"), MarkKind::Store),
                    mark(4, 3, "worker-1", None, MarkKind::Crash),
                ],
                Vec::new(),
            ),
            None,
        );
        let spans: Vec<(usize, usize, &str, usize)> =
            view.marks.iter().map(|m| (m.column_start, m.column_end, m.direction, m.span)).collect();
        assert_eq!(
            spans,
            [(4, 6, "right", 3), (4, 6, "left", 3), (5, 5, "", 1), (5, 5, "", 1)],
            "a message to its own lane is drawn in place"
        );
    }

    #[test]
    fn lanes_named_only_by_marks_are_added_at_the_right() {
        let timeline = Timeline {
            seed: 0,
            lanes: vec!["agent".into()],
            marks: vec![mark(1, 0, "agent", Some("worker-9"), MarkKind::Request)],
            bands: Vec::new(),
        };
        let view = layout(&timeline, None);
        let names: Vec<&str> = view.lanes.iter().map(|lane| lane.name.as_str()).collect();
        assert_eq!(names, ["agent", "worker-9"]);
        assert_eq!((view.marks[0].column_start, view.marks[0].column_end), (4, 5));
    }

    #[test]
    fn bands_cover_their_window_and_an_open_one_runs_to_the_end() {
        let band =
            |from_seq, to_seq| Band { lane: "downstream".into(), from_seq, to_seq, label: "fault".into() };
        let view = layout(
            &timeline(
                vec![
                    mark(1, 0, "downstream", None, MarkKind::Fault),
                    mark(5, 1, "downstream", None, MarkKind::Effect),
                    mark(9, 2, "downstream", None, MarkKind::Fault),
                ],
                vec![band(1, Some(9)), band(4, None)],
            ),
            None,
        );
        let windows: Vec<(usize, usize, usize)> =
            view.bands.iter().map(|b| (b.column, b.row_start, b.row_end)).collect();
        assert_eq!(
            windows,
            [(6, 2, 4), (6, 3, 4)],
            "position 4 is not drawn: its band starts at the next row"
        );
    }

    #[test]
    fn outcome_status_is_the_word_after_the_last_colon() {
        assert_eq!(outcome_status("retry: replayed ticket_1").as_deref(), Some("replayed"));
        assert_eq!(outcome_status("final-poll:acme/x: in_flight").as_deref(), Some("in_flight"));
        assert_eq!(outcome_status("first: weird"), None);
    }

    #[test]
    fn an_answer_an_oracle_names_is_wrong_whatever_it_said() {
        assert_eq!(answer_tone(Some("replayed"), true), "wrong");
        assert_eq!(answer_tone(Some("replayed"), false), "ok");
        assert_eq!(answer_tone(Some("unknown"), false), "undecided");
        assert_eq!(answer_tone(None, false), "none");
    }
}
