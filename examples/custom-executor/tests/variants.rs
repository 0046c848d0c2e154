//! The two variants of the reference written on its public parts are caught by the scenarios
//! that catch their twins in the zoo, and the reference itself passes those scenarios.

use harness::prelude::*;

fn scenario(id: &str) -> scenarios::Scenario {
    scenarios::builtin().into_iter().find(|s| s.id == id).expect("a built-in scenario")
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
