//! What the reports say of real simulated runs reads true: each effect names the request whose
//! downstream request made it (from what the harness saw leave the worker), and the timeline's
//! position column follows the history even where a host's clock ran ahead within a step.

use harness::executors;
use harness::history::{Event, EventKind};
use harness::runner;

fn scenario(id: &str) -> scenarios::Scenario {
    scenarios::builtin_by_id(id).expect("a built-in scenario")
}

/// The label of the agent request the worker was serving when it sent `request_id`, read
/// straight from the history.
fn serving(history: &[Event], request_id: &str) -> Option<String> {
    history.iter().find_map(|event| match &event.kind {
        EventKind::DownstreamSent { request_id: id, serving, .. } if id == request_id => serving.clone(),
        _ => None,
    })
}

/// S05's two racing calls, each on its own worker: a mutant that lets both charge makes two
/// charges for the one operation, and each names the call its worker was serving when it sent
/// the charge (it once said "for race-1" of both, the operation's first label).
#[test]
fn each_of_two_racing_charges_names_the_call_that_sent_it() {
    let mutant = executors::find("mutant:read_then_insert").expect("the mutant is registered");
    let scenario = scenario("S05");
    let mut checked = 0;
    for seed in 0..10 {
        let record = runner::run(&scenario, seed, &mutant);
        let Some(race) = record
            .result
            .operations
            .iter()
            .find(|op| op.operation.as_deref() == Some("acme/production/run_900/charge_order"))
        else {
            continue;
        };
        if race.ledger.len() < 2 {
            continue;
        }
        let mut sent_for: Vec<&str> = Vec::new();
        for entry in &race.ledger {
            let request_id = entry.request_id.as_deref().expect("a charge has its request's id");
            assert_eq!(entry.sent_for, serving(&record.history, request_id), "seed {seed}: {entry:?}");
            sent_for.push(entry.sent_for.as_deref().expect("a charge sent while serving a call"));
        }
        sent_for.sort_unstable();
        assert_eq!(sent_for, ["race-1", "race-2"], "seed {seed}: one charge for each racing call");
        let timeline = harness::timeline::draw(
            seed,
            &scenario.worker_names(),
            &record.history,
            &record.result.violations,
        );
        let labels: Vec<&str> = timeline
            .marks
            .iter()
            .filter(|mark| mark.label.starts_with("ledger: charge_created"))
            .filter(|mark| mark.label.contains(" for acme/production/run_900/charge_order"))
            .map(|mark| mark.label.as_str())
            .collect();
        assert_eq!(labels.len(), race.ledger.len(), "seed {seed}: {labels:?}");
        for (label, entry) in labels.iter().zip(race.ledger.iter()) {
            let sent_for = entry.sent_for.as_deref().unwrap_or_default();
            assert!(
                label.ends_with(&format!("for acme/production/run_900/charge_order, sent for {sent_for}")),
                "seed {seed}: {label}"
            );
        }
        checked += 1;
    }
    assert!(checked > 0, "the mutant charged twice in none of 10 seeds of S05");
}

/// Within one simulation step each host runs a whole tick on its own clock, so the history
/// can carry a later position with an earlier time (the cause of a position column out of
/// order when the timeline was sorted by time). The report's timeline follows the positions.
#[test]
fn the_timelines_position_column_follows_the_history() {
    let reference = executors::find("reference").expect("the reference executor is registered");
    let mut earlier_times = 0;
    for id in ["S05", "S16", "S19"] {
        let scenario = scenario(id);
        for seed in 0..5 {
            let record = runner::run(&scenario, seed, &reference);
            let timeline = harness::timeline::draw(
                seed,
                &scenario.worker_names(),
                &record.history,
                &record.result.violations,
            );
            // Marks drawn in history order whose time runs back: sorted by time, they swapped.
            earlier_times += timeline.marks.windows(2).filter(|pair| pair[1].at_ms < pair[0].at_ms).count();
            let result = reports_fixture(&record.result, timeline);
            let html = reports::render_html(&result, &reports::RenderOptions::new());
            let positions = positions_column(&html);
            assert!(positions.len() > 10, "{id} seed {seed}: a timeline was drawn");
            assert!(
                positions.windows(2).all(|pair| pair[0] <= pair[1]),
                "{id} seed {seed}: the position column runs {positions:?}"
            );
        }
    }
    assert!(earlier_times > 0, "some drawn event carries a later position and an earlier time");
}

/// The positions in the timeline's `#` column, top to bottom.
fn positions_column(html: &str) -> Vec<u64> {
    html.split("<div class=\"sc")
        .skip(1)
        .filter_map(|cell| cell.split_once('>')?.1.split_once('<')?.0.parse().ok())
        .collect()
}

/// A one-scenario matrix that shows `run` with `timeline`.
fn reports_fixture(run: &reports::RunResult, timeline: reports::Timeline) -> reports::MatrixResult {
    let summary = reports::ScenarioSummary {
        id: run.scenario.clone(),
        name: run.scenario_name.clone(),
        source: String::new(),
        line: 1,
        rows: Vec::new(),
        summary: String::new(),
        expected: String::new(),
        verdict: run.verdict,
        seeds_run: 1,
        counts: [(run.verdict, 1)].into(),
        oracle_counts: Default::default(),
        effects_min: run.effects,
        effects_max: run.effects,
        statuses: Default::default(),
        builtin: false,
        time_ms: 0,
        failures: Vec::new(),
        runs: vec![reports::RunDigest::of(run, true, 0)],
        shown: run.clone(),
        nondeterministic_seeds: Vec::new(),
        timeline,
    };
    reports::MatrixResult {
        schema_version: reports::SCHEMA_VERSION,
        harness_version: String::new(),
        harness_commit: None,
        commit: None,
        parameters: reports::WorldParameters {
            tick_ms: 10,
            min_latency_ms: 1,
            max_latency_ms: 5,
            agent_timeout_ms: 2_000,
            run_limit_ms: 120_000,
            epoch_seconds: 0,
        },
        executor: run.executor.clone(),
        executor_version: String::new(),
        seeds: 1,
        first_seed: run.seed,
        determinism_checked: false,
        shard: None,
        black_box: None,
        rows: Vec::new(),
        scenarios: vec![summary],
        verdict: run.verdict,
    }
}
