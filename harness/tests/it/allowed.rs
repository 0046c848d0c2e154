//! No scenario allows an answer that an oracle forbids (issue 31). For every built-in scenario,
//! a run of the reference is taken, and each answer an `expect` step judges is replaced, in turn,
//! by every other status the step allows; the oracles then judge the changed history. An oracle
//! that names the changed answer forbids what the scenario allows: an executor giving that
//! answer would pass the expectation and fail the run.
//!
//! A replaced answer keeps what the reference's answer named (effect reference, result) when the
//! new status claims success, and names nothing otherwise; `rejected` takes the step's reason, or
//! the reason a changed request is refused for.
//!
//! Two oracles judge an answer against what the executor could know in that very history, and
//! are left out: O13's answer-by-answer rule (an `unknown` where every request for it was
//! answered cleanly and the executor could have found out) and O6's rule on `in_flight` answers
//! (an owner at work). The reference's history is one where everything it asked was answered;
//! a scenario rightly allows `unknown` for a retry whose own requests failed (on a busy machine,
//! a real process's downstream timeout), and the oracles judge that history then.

use harness::executors;
use harness::history::{Event, EventKind};
use harness::runner;
use harness::verdict::Verdict;
use protocol::{NextAction, Outcome, OutcomeStatus, ReasonCode};
use scenarios::StepKind;

/// The seeds each scenario's reference run is taken from.
const SEEDS: u64 = 3;

/// `outcome` as an answer with status `status` would be.
fn replaced(outcome: &Outcome, status: OutcomeStatus, reason: Option<ReasonCode>) -> Outcome {
    let mut answer = Outcome::new(status);
    answer.operation_key = outcome.operation_key.clone();
    match status {
        OutcomeStatus::Applied | OutcomeStatus::Replayed => {
            answer.effect_reference = outcome.effect_reference.clone();
            answer.result = outcome.result.clone();
        }
        OutcomeStatus::Rejected => {
            answer.reason = Some(reason.unwrap_or(ReasonCode::IdempotencyKeyReusedWithDifferentRequest));
        }
        OutcomeStatus::InFlight => {
            answer.next_action = NextAction::Poll;
            answer.retry_after_seconds = Some(1);
        }
        OutcomeStatus::Unknown => answer.next_action = NextAction::Reconcile,
        OutcomeStatus::Expired => {}
    }
    answer
}

#[test]
fn no_scenario_allows_an_answer_an_oracle_forbids() {
    let reference = executors::find("reference").expect("the reference executor");
    let mut forbidden = Vec::new();
    let mut checked = 0;
    for scenario in scenarios::builtin() {
        let config = harness::world::downstream_config(&scenario);
        let contracts = harness::world::contracts_for(&scenario, &config);
        for seed in 0..SEEDS {
            let record = runner::run(&scenario, seed, &reference);
            if record.result.verdict != Verdict::Pass {
                continue;
            }
            for step in &scenario.steps {
                let StepKind::Expect(expect) = &step.kind else { continue };
                let Some(at) = record.history.iter().position(
                    |event| matches!(&event.kind, EventKind::Answered { label, .. } if *label == expect.call),
                ) else {
                    continue;
                };
                let EventKind::Answered { outcome, .. } = &record.history[at].kind else { continue };
                let success = outcome.status.claims_success();
                for status in expect.status.iter().copied().filter(|status| *status != outcome.status) {
                    // A success claim needs an effect reference to name: only one the reference's
                    // own answer had.
                    if status.claims_success() && !success {
                        continue;
                    }
                    let mut history: Vec<Event> = record.history.clone();
                    let answer = replaced(outcome, status, expect.reason);
                    if let EventKind::Answered { outcome, .. } = &mut history[at].kind {
                        *outcome = answer;
                    }
                    let evidence = harness::oracles::Evidence {
                        history: &history,
                        ledger: &record.ledger,
                        contracts: &contracts,
                        tags_complete: true,
                        store_seen: true,
                    };
                    checked += 1;
                    let seq = history[at].seq;
                    for violation in harness::oracles::check(&evidence) {
                        let contextual = matches!(violation.oracle.as_str(), "O6" | "O13");
                        if violation.positions.contains(&seq) && !contextual {
                            forbidden.push(format!(
                                "{} line {} allows {} for {:?} (seed {seed}), but {violation}",
                                scenario.full_name(),
                                step.line,
                                status.as_str(),
                                expect.call
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} allowed answers were checked");
    forbidden.sort();
    forbidden.dedup();
    assert!(
        forbidden.is_empty(),
        "{} allowed answer(s) an oracle forbids:\n{}",
        forbidden.len(),
        forbidden.join("\n")
    );
}
