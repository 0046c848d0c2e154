//! `report.html`: one self-contained page (inline CSS and SVG, no scripts, nothing loaded
//! from elsewhere) with the summary, the matrix and a timeline per scenario. The page is a
//! minijinja template (`templates/report.html.j2`) over a view model computed here; every
//! text goes through the template's HTML autoescape.

use serde::Serialize;

use crate::evidence::{
    counts_text, covering, effects_text, first_reason, pass_counts, row_topic, run_failure,
    scenario_evidence, seeds_text, shorten, statuses_text,
};
use crate::format::RenderOptions;
use crate::json::matrix_sha256;
use crate::model::{MarkKind, MatrixResult, RowFailure, ScenarioSummary, Timeline, Verdict};

/// The page template; its name ends in `.html`, so autoescape is HTML.
const TEMPLATE_NAME: &str = "report.html";
const TEMPLATE: &str = include_str!("../templates/report.html.j2");

/// Width of the lane names at the left of a timeline, in pixels.
const LANE_NAME_WIDTH_PX: i64 = 104;
/// Horizontal room per mark: marks are placed in time order, one column each, so marks at
/// the same millisecond never overlap.
const COLUMN_WIDTH_PX: i64 = 24;
/// A quiet stretch at least this long between two marks is drawn as a break of fixed width
/// (settle phases wait 20 s of simulated time; drawn to scale they would hide the rest).
const IDLE_BREAK_MS: u64 = 1_000;
/// The width of such a break, in pixels.
const BREAK_WIDTH_PX: i64 = 44;
/// Height of one lane, in pixels.
const LANE_HEIGHT_PX: i64 = 44;
/// Labels are written at a slant above the lanes, cut to this many characters (the full
/// text is in the mark's tooltip and in the table under the timeline).
const LABEL_LIMIT_CHARS: usize = 40;
/// The slant of those labels, in degrees (negative: rising to the right).
const LABEL_ANGLE_DEG: i64 = -50;
/// Vertical and horizontal room per label character at that slant (a bold 11 px character
/// is at most 7 px wide; sin 50° ≈ 0.77, cos 50° ≈ 0.64), in tenths of a pixel.
const LABEL_RISE_PER_CHAR_DECIPX: i64 = 54;
const LABEL_RUN_PER_CHAR_DECIPX: i64 = 45;
/// Room above the longest label and beside the lanes' top, in pixels.
const LABEL_BAND_MARGIN_PX: i64 = 16;
/// Height of the time axis under the lanes, in pixels.
const AXIS_HEIGHT_PX: i64 = 64;
/// Arrowhead length and half width, in pixels.
const ARROW_LENGTH_PX: i64 = 8;
const ARROW_HALF_WIDTH_PX: i64 = 4;

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
    determinism_checked: bool,
    world: String,
    sha256: String,
    generated_at: Option<String>,
    rows_passed: usize,
    rows_total: usize,
    scenarios_passed: usize,
    /// `; N rows and M scenarios are not applicable to it (not run)`, or empty.
    not_applicable: String,
    scenarios_total: usize,
    rows: Vec<RowView>,
    scenarios: Vec<ScenarioView>,
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
    seed: u64,
    verdict: &'static str,
    reason: String,
    violations: Vec<String>,
    notes: Vec<String>,
    reproduce: String,
}

#[derive(Debug, Serialize)]
struct ScenarioView {
    id: String,
    name: String,
    rows: String,
    summary: String,
    expected: String,
    verdict: &'static str,
    runs: String,
    effects: String,
    statuses: String,
    evidence: Vec<String>,
    fingerprints: Vec<(String, String)>,
    effect_references: String,
    history_digest: String,
    sample_seed: u64,
    failure: Option<FailureView>,
    timeline_caption: String,
    timeline: TimelineView,
}

#[derive(Debug, Serialize)]
struct TimelineView {
    seed: u64,
    width: i64,
    height: i64,
    lanes_left: i64,
    label_angle: i64,
    lanes_top: i64,
    lanes_bottom: i64,
    lane_height: i64,
    lanes: Vec<LaneView>,
    marks: Vec<MarkView>,
    breaks: Vec<BreakView>,
    ticks: Vec<TickView>,
}

#[derive(Debug, Serialize)]
struct LaneView {
    name: String,
    top: i64,
    y: i64,
    stripe: bool,
}

#[derive(Debug, Serialize)]
struct MarkView {
    seq: u64,
    at_ms: u64,
    lane: String,
    to_lane: Option<String>,
    kind: &'static str,
    kind_text: &'static str,
    x: i64,
    y: i64,
    /// For messages: the receiving lane's centre.
    y2: Option<i64>,
    /// For messages: the arrowhead's three points.
    head: Option<String>,
    /// The top of the mark (where the guide from its label ends).
    top: i64,
    label: String,
    /// The executor's events that led to it.
    log: Vec<String>,
    short_label: String,
    /// For outcomes: `applied`, `replayed`, `in_flight`, `rejected`, `unknown`, `expired`.
    status: Option<String>,
}

#[derive(Debug, Serialize)]
struct BreakView {
    x: i64,
    width: i64,
    text: String,
}

#[derive(Debug, Serialize)]
struct TickView {
    x: i64,
    text: String,
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
    Page {
        verdict: result.verdict.as_str(),
        executor: result.executor.clone(),
        executor_version: result.executor_version.clone(),
        harness_version: result.harness_version.clone(),
        schema_version: result.schema_version,
        commit: result.commit.clone(),
        seeds: result.seeds,
        seeds_text: seeds_text(result),
        determinism_checked: result.determinism_checked,
        world: format!(
            "tick {} ms, latency {}-{} ms, agent timeout {} ms, run limit {} ms",
            p.tick_ms, p.min_latency_ms, p.max_latency_ms, p.agent_timeout_ms, p.run_limit_ms
        ),
        sha256: matrix_sha256(result),
        generated_at: options.generated_at_text(),
        rows_passed,
        rows_total,
        scenarios_passed,
        not_applicable: crate::evidence::not_applicable_text(result),
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
                    .map(|scenario| format!("{}: {}", scenario.id, scenario_evidence(scenario).join("; ")))
                    .collect(),
                failure: row.first_failure.as_ref().map(failure_view),
            })
            .collect(),
        scenarios: result.scenarios.iter().map(scenario_view).collect(),
        legend: MarkKind::ALL
            .iter()
            .map(|&kind| LegendItem { kind: kind.as_str(), text: kind_text(kind), arrow: is_message(kind) })
            .collect(),
    }
}

fn failure_view(failure: &RowFailure) -> FailureView {
    FailureView {
        scenario: failure.scenario.clone(),
        seed: failure.seed,
        verdict: failure.verdict.as_str(),
        reason: first_reason(failure),
        violations: failure.violations.iter().map(ToString::to_string).collect(),
        notes: failure.notes.clone(),
        reproduce: failure.reproduce.clone(),
    }
}

fn scenario_view(scenario: &ScenarioSummary) -> ScenarioView {
    let failure = scenario.first_failure.as_ref().map(|run| failure_view(&run_failure(scenario, run)));
    let drawn_failing = scenario.first_failure.as_ref().is_some_and(|run| run.seed == scenario.timeline.seed);
    let timeline_caption = if drawn_failing {
        format!("Timeline of seed {}, the first run that did not pass.", scenario.timeline.seed)
    } else if scenario.verdict == Verdict::Pass {
        format!("Timeline of seed {}, the first seed's run.", scenario.timeline.seed)
    } else {
        format!("Timeline of seed {}.", scenario.timeline.seed)
    };
    ScenarioView {
        id: scenario.id.clone(),
        name: scenario.name.clone(),
        rows: scenario.rows.join(", "),
        summary: scenario.summary.clone(),
        expected: scenario.expected.clone(),
        verdict: scenario.verdict.as_str(),
        runs: counts_text(&scenario.counts),
        effects: effects_text(scenario),
        statuses: statuses_text(&scenario.statuses),
        evidence: scenario_evidence(scenario),
        fingerprints: scenario.sample.fingerprints.clone(),
        effect_references: scenario.sample.effect_references.join(", "),
        history_digest: scenario.sample.history_digest.clone(),
        sample_seed: scenario.sample.seed,
        failure,
        timeline_caption,
        timeline: layout(&scenario.timeline),
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
        MarkKind::Fault => "fault rule installed or fired",
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

/// Places a timeline: one lane per entry of `lanes` (plus any lane a mark names that is not
/// listed), one column per mark in (time, history) order, and a fixed-width break for every
/// quiet stretch of at least [`IDLE_BREAK_MS`]. So x grows with simulated time, but is not
/// proportional to it.
fn layout(timeline: &Timeline) -> TimelineView {
    let mut lane_names: Vec<String> = timeline.lanes.clone();
    for mark in &timeline.marks {
        for lane in std::iter::once(&mark.lane).chain(mark.to_lane.as_ref()) {
            if !lane_names.contains(lane) {
                lane_names.push(lane.clone());
            }
        }
    }
    let longest_label_chars = timeline
        .marks
        .iter()
        .map(|mark| mark.label.chars().count().min(LABEL_LIMIT_CHARS))
        .max()
        .unwrap_or(0) as i64;
    let lanes_top = longest_label_chars * LABEL_RISE_PER_CHAR_DECIPX / 10 + LABEL_BAND_MARGIN_PX;
    let label_overhang = longest_label_chars * LABEL_RUN_PER_CHAR_DECIPX / 10 + LABEL_BAND_MARGIN_PX;
    let lane_y = |name: &str| -> i64 {
        let index = lane_names.iter().position(|lane| lane == name).unwrap_or(0) as i64;
        lanes_top + index * LANE_HEIGHT_PX + LANE_HEIGHT_PX / 2
    };
    let lanes: Vec<LaneView> = lane_names
        .iter()
        .enumerate()
        .map(|(index, name)| LaneView {
            name: name.clone(),
            top: lanes_top + index as i64 * LANE_HEIGHT_PX,
            y: lane_y(name),
            stripe: index % 2 == 0,
        })
        .collect();
    let lanes_bottom = lanes_top + lane_names.len() as i64 * LANE_HEIGHT_PX;

    let mut ordered: Vec<&crate::model::Mark> = timeline.marks.iter().collect();
    ordered.sort_by_key(|mark| (mark.at_ms, mark.seq));

    let mut marks = Vec::with_capacity(ordered.len());
    let mut breaks = Vec::new();
    let mut ticks = Vec::new();
    let mut x = LANE_NAME_WIDTH_PX + COLUMN_WIDTH_PX / 2;
    let mut previous_ms: Option<u64> = None;
    for (index, mark) in ordered.iter().enumerate() {
        if index > 0 {
            x += COLUMN_WIDTH_PX;
        }
        if let Some(previous) = previous_ms {
            let quiet_ms = mark.at_ms - previous;
            if quiet_ms >= IDLE_BREAK_MS {
                let start = x - COLUMN_WIDTH_PX / 2;
                breaks.push(BreakView {
                    x: start,
                    width: BREAK_WIDTH_PX,
                    text: format!("{} quiet", seconds_text(quiet_ms)),
                });
                x += BREAK_WIDTH_PX;
            }
        }
        if previous_ms != Some(mark.at_ms) {
            ticks.push(TickView { x, text: seconds_text(mark.at_ms) });
        }
        previous_ms = Some(mark.at_ms);

        let y = lane_y(&mark.lane);
        let y2 = mark.to_lane.as_deref().filter(|to| is_message(mark.kind) && *to != mark.lane).map(lane_y);
        let head = y2.map(|y2| {
            let direction = if y2 > y { 1 } else { -1 };
            let base = y2 - direction * ARROW_LENGTH_PX;
            format!("{},{} {},{} {},{}", x - ARROW_HALF_WIDTH_PX, base, x + ARROW_HALF_WIDTH_PX, base, x, y2)
        });
        let top = y2.map_or(y, |y2| y.min(y2)) - 8;
        marks.push(MarkView {
            seq: mark.seq,
            at_ms: mark.at_ms,
            lane: mark.lane.clone(),
            to_lane: mark.to_lane.clone(),
            kind: mark.kind.as_str(),
            kind_text: kind_text(mark.kind),
            x,
            y,
            y2,
            head,
            top,
            label: mark.label.clone(),
            log: mark.log.clone(),
            short_label: shorten(&mark.label, LABEL_LIMIT_CHARS),
            status: (mark.kind == MarkKind::Outcome).then(|| outcome_status(&mark.label)).flatten(),
        });
    }
    let width = x + COLUMN_WIDTH_PX / 2 + label_overhang;
    TimelineView {
        seed: timeline.seed,
        width,
        height: lanes_bottom + AXIS_HEIGHT_PX,
        lanes_left: LANE_NAME_WIDTH_PX - 4,
        label_angle: LABEL_ANGLE_DEG,
        lanes_top,
        lanes_bottom,
        lane_height: LANE_HEIGHT_PX,
        lanes,
        marks,
        breaks,
        ticks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Mark;

    fn mark(seq: u64, at_ms: u64, lane: &str, to_lane: Option<&str>, kind: MarkKind) -> Mark {
        Mark {
            seq,
            at_ms,
            lane: lane.into(),
            to_lane: to_lane.map(Into::into),
            kind,
            label: format!("m{seq}"),
            log: Vec::new(),
        }
    }

    #[test]
    fn columns_follow_time_and_long_quiet_stretches_become_fixed_breaks() {
        let timeline = Timeline {
            seed: 0,
            lanes: vec!["agent".into(), "worker-1".into(), "downstream".into()],
            marks: vec![
                mark(1, 0, "agent", Some("worker-1"), MarkKind::Request),
                mark(2, 0, "downstream", None, MarkKind::Fault),
                mark(3, 10, "downstream", None, MarkKind::Effect),
                mark(4, 20_010, "worker-1", Some("agent"), MarkKind::Outcome),
            ],
        };
        let view = layout(&timeline);
        let xs: Vec<i64> = view.marks.iter().map(|m| m.x).collect();
        assert_eq!(xs[1] - xs[0], COLUMN_WIDTH_PX, "same millisecond: next column");
        assert_eq!(xs[2] - xs[1], COLUMN_WIDTH_PX);
        assert_eq!(xs[3] - xs[2], COLUMN_WIDTH_PX + BREAK_WIDTH_PX, "20 s quiet: one fixed break");
        assert_eq!(view.breaks.len(), 1);
        assert_eq!(view.breaks[0].text, "20.000 s quiet");
        assert_eq!(view.ticks.len(), 3, "one tick per distinct time");
        assert!(view.marks[3].y2.is_some_and(|y2| y2 < view.marks[3].y), "outcome arrow points up");
        assert_eq!(view.marks[3].status, None, "label m4 has no status word");
    }

    #[test]
    fn lanes_named_only_by_marks_are_added_below() {
        let timeline = Timeline {
            seed: 0,
            lanes: vec!["agent".into()],
            marks: vec![mark(1, 0, "agent", Some("worker-9"), MarkKind::Request)],
        };
        let view = layout(&timeline);
        let names: Vec<&str> = view.lanes.iter().map(|lane| lane.name.as_str()).collect();
        assert_eq!(names, ["agent", "worker-9"]);
        assert_eq!(view.marks[0].y2, Some(view.lanes[1].y));
    }

    #[test]
    fn outcome_status_is_the_word_after_the_last_colon() {
        assert_eq!(outcome_status("retry: replayed ticket_1").as_deref(), Some("replayed"));
        assert_eq!(outcome_status("final-poll:acme/x: in_flight").as_deref(), Some("in_flight"));
        assert_eq!(outcome_status("first: weird"), None);
    }
}
