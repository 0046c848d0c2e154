//! Property test: random workloads under random faults, judged by replaylab's oracles.
//!
//! This is the pattern for your own executor: wrap your factory in an `ExecutorSpec`, draw
//! cases from `harness::explore::case_strategy()` (narrowed to what your executor supports),
//! and assert that `check_case` finds no violation. A failure is shrunk by proptest and
//! printed; `replaylab run --case FILE` replays a case saved as a scenario file.

use harness::prelude::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

/// The example's executor, as its binary names it (`custom`).
fn spec() -> ExecutorSpec {
    custom_executor::executors()
        .into_iter()
        .find(|spec| spec.name == "custom")
        .expect("the example has `custom`")
}

/// The example's broken variant (`custom-keyless`).
fn keyless() -> ExecutorSpec {
    custom_executor::executors()
        .into_iter()
        .find(|spec| spec.name == "custom-keyless")
        .expect("the example has `custom-keyless`")
}

/// Cases this executor is built for: tickets only (any downstream: keys honoured or not,
/// receipts or not).
fn tickets_only() -> impl Strategy<Value = Case> {
    case_strategy().prop_map(|mut case| {
        for operation in &mut case.operations {
            operation.tool = CaseTool::Ticket;
        }
        case
    })
}

proptest! {
    // A fixed seed, so that CI sees the same cases on every run (each case is itself
    // deterministic); set `PROPTEST_CASES` higher, or change the seed, to look further.
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x7265_706c_6179),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_tiny_executor_never_duplicates_a_ticket(case in tickets_only()) {
        let result = check_case(&case, &spec());
        // Narrowed to what the executor declares, every case applies: none passes unrun.
        prop_assert_ne!(result.verdict, Verdict::NotApplicable, "{:?}", result.notes);
        prop_assert!(result.violations.is_empty(), "{:#?}", result.violations);
    }
}

/// The same harness catches a real defect: the keyless variant resends after an ambiguous
/// answer without an `Idempotency-Key`, and some random case shows the second ticket, even on
/// a downstream that honours keys.
#[test]
fn the_harness_finds_the_keyless_variants_second_ticket() {
    let honoured = tickets_only().prop_map(|mut case| {
        case.services[0] = ServiceChoice { honoured: true, receipts: false };
        case
    });
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let found = (0..200).any(|_| {
        let case = honoured.new_tree(&mut runner).expect("cases generate").current();
        check_case(&case, &keyless()).violations.iter().any(|violation| violation.oracle == "O1")
    });
    assert!(found, "200 random cases never made the keyless variant duplicate a ticket");
}
