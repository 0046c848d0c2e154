//! The two variants of the reference written on its public parts are caught by the scenarios
//! that catch their twins in the zoo, and the reference itself passes those scenarios.

use harness::prelude::*;

fn scenario(id: &str) -> scenarios::Scenario {
    scenarios::builtin_by_id(id).expect("a built-in scenario")
}

/// The verdicts of seeds 0..5 of scenario `id` against `executor`.
fn verdicts(id: &str, executor: &ExecutorSpec) -> Vec<Verdict> {
    (0..5).map(|seed| harness::runner::run(&scenario(id), seed, executor).result.verdict).collect()
}

fn variant(name: &str) -> ExecutorSpec {
    custom_executor::executors().into_iter().find(|spec| spec.name == name).expect("the variant is listed")
}

#[test]
fn each_variant_is_caught_where_its_zoo_twin_is() {
    let reference = harness::executors::reference();
    for (name, twin, caught_by) in [
        ("reference-timeout-is-success", "mutant:timeout_is_success", "S12"),
        ("reference-short-ttl-delete", "mutant:short_ttl_delete", "S09"),
    ] {
        assert!(
            verdicts(caught_by, &reference).iter().all(|v| *v == Verdict::Pass),
            "the reference passes {caught_by}"
        );
        let twin = harness::executors::find(twin).expect("the zoo twin");
        assert!(verdicts(caught_by, &twin).contains(&Verdict::Fail), "{caught_by} catches the zoo's twin");
        let found = verdicts(caught_by, &variant(name));
        assert!(found.contains(&Verdict::Fail), "{caught_by} must catch {name}: {found:?}");
    }
}

/// A decision made per worker may keep state (here shared by every worker of the run) and see
/// its worker's environment; the run is the reference's otherwise, and passes.
#[test]
fn a_decision_keeps_state_and_sees_its_worker() {
    use std::rc::Rc;
    use std::sync::{Arc, Mutex};

    use executor::{reference_ambiguity, ReferenceConfig, ReferenceFactory, Strategies};

    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let spec = ExecutorSpec::new("reference-noting-ambiguity", move |_run: &str| {
        let log = log.clone();
        let factory = ReferenceFactory::recycled(ReferenceConfig::default(), move |env: &WorkerEnv| {
            let (log, worker) = (log.clone(), format!("{}#{}", env.worker_id, env.incarnation));
            Strategies {
                ambiguity: Rc::new(move |contract, requests_sent| {
                    log.lock().unwrap_or_else(|p| p.into_inner()).push(worker.clone());
                    reference_ambiguity(contract, requests_sent)
                }),
                ..Strategies::reference()
            }
        });
        Ok(Rc::new(factory.map_err(|error| error.to_string())?) as Rc<dyn ExecutorFactory>)
    });
    // S02: the downstream commits the first ticket and drops the answer: one ambiguous answer.
    let record = harness::runner::run(&scenario("S02"), 0, &spec);
    assert_eq!(record.result.verdict, Verdict::Pass, "{:?}", record.result.violations);
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(seen, ["worker-1#0"], "the decision ran once, on the worker that got the ambiguous answer");
}

/// The executor's own `tracing` events are captured per run with no set-up on its side, in
/// the span of the worker and the call they happened in.
#[test]
fn the_executors_own_tracing_events_are_captured() {
    // This crate's events, in the harness's spans (which name the worker and the call). The
    // target is the crate's name, whatever the crate is called (`.ci/outside-crate` renames it).
    let target = env!("CARGO_PKG_NAME").replace('-', "_");
    let filter = harness::log::LogFilter::parse(&format!("{target}=debug,harness=info")).expect("a filter");
    let spec = variant("custom");
    let record = harness::runner::run_logged(&scenario("S02"), 0, &spec, Some(&filter));
    assert_eq!(record.result.verdict, Verdict::Pass);
    let ours: Vec<&harness::log::LogLine> =
        record.log.iter().filter(|line| line.text.starts_with("recovering a create")).collect();
    assert!(!ours.is_empty(), "{:#?}", record.log);
    assert!(record.log.iter().all(|line| line.target.starts_with(&target)), "the filter holds");
    assert!(ours[0].spans.iter().any(|span| span.contains("worker=worker-1")), "{:?}", ours[0].spans);
}
