//! What a failure looks like, stably enough to put one defect's failing cases together: a
//! **signature** is the oracle (its id and name) and the shape of what the violation names.
//!
//! - The shape is the kinds of the effects the violation's history positions name
//!   (`charge_created`, `ticket_created, ticket_status_changed`), in name order;
//! - else, when it names no effect, the statuses of the answers it names (`answered unknown`);
//! - else the kinds of the other events it names (`revocation`), or `the ledger` for a
//!   violation that names no position (O1's check of the final ledger).
//!
//! A crashed run's signature says whether an executor panicked or a run limit was hit.
//!
//! Signatures leave out everything that varies from case to case without changing the defect:
//! references, counts, labels, operation names, tenants, workers, times, and which fault or
//! crash led there (one defect, say a retry that resends blindly, shows after a lost answer,
//! an error answer and a crash alike). They keep apart what a different defect changes: the
//! oracle (and so the rule broken), and the kind of effect (a duplicated charge and a
//! duplicated ticket are two findings, each shrunk once), or the answer given (`answered
//! in_flight` is another defect than `answered unknown`).
//!
//! A known limit: two defects that break the same oracle on the same kind of effect share a
//! signature, and their failing seeds form one group, shrunk once.

use std::collections::BTreeSet;

use judge::history::{Event, EventKind};
use judge::verdict::Verdict;
use reports::Violation;
use runner::RunRecord;

/// The signature of a crashed run: an executor panicked, or a limit of the run was hit.
pub fn of_crash(notes: &[String]) -> String {
    if notes.iter().any(|note| note.contains(" panicked during ")) {
        "crashed (an executor panicked)".to_owned()
    } else {
        "crashed (a run limit)".to_owned()
    }
}

/// The signature of one violation, reading the history its positions point into.
pub fn of_violation(violation: &Violation, history: &[Event]) -> String {
    let events: Vec<&EventKind> = violation
        .positions
        .iter()
        .filter_map(|position| history.iter().find(|event| event.seq == *position))
        .map(|event| &event.kind)
        .collect();
    let effects: BTreeSet<&str> = events
        .iter()
        .filter_map(|kind| match kind {
            EventKind::Effect { effect } => Some(effect.kind.as_str()),
            _ => None,
        })
        .collect();
    let shape = if !effects.is_empty() {
        effects.into_iter().collect::<Vec<_>>().join(", ")
    } else {
        let answers: BTreeSet<&str> = events
            .iter()
            .filter_map(|kind| match kind {
                EventKind::Answered { outcome, .. } => Some(outcome.status.as_str()),
                _ => None,
            })
            .collect();
        if !answers.is_empty() {
            format!("answered {}", answers.into_iter().collect::<Vec<_>>().join(", "))
        } else if events.is_empty() {
            "the ledger".to_owned()
        } else {
            let others: BTreeSet<&str> = events.iter().map(|kind| event_name(kind)).collect();
            others.into_iter().collect::<Vec<_>>().join(", ")
        }
    };
    format!("{} {} ({shape})", violation.oracle, violation.name)
}

/// The signatures of a finished run, one per violation (duplicates left out), in the order of
/// the violations, so that the first is the signature of the failure that names the run; a
/// crashed run's alone; none for a run that did not fail.
pub fn of_run(record: &RunRecord) -> Vec<String> {
    match record.result.verdict {
        Verdict::Crashed => vec![of_crash(&record.result.notes)],
        Verdict::Fail => {
            let mut signatures: Vec<String> = Vec::new();
            for violation in &record.result.violations {
                let signature = of_violation(violation, &record.history);
                if !signatures.contains(&signature) {
                    signatures.push(signature);
                }
            }
            signatures
        }
        Verdict::Pass | Verdict::Unknown | Verdict::NotApplicable => Vec::new(),
    }
}

/// A history event's kind in a word or two, for the shape of violations that name neither an
/// effect nor an answer.
fn event_name(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::CallSent { .. } => "call",
        EventKind::OperationQuery { .. } => "query",
        EventKind::Revoked { .. } => "revocation",
        EventKind::HumanEdit { .. } => "human edit",
        EventKind::DownstreamSent { .. } => "downstream request",
        EventKind::DownstreamAnswered { .. } | EventKind::DownstreamFailed { .. } => "downstream answer",
        EventKind::DownstreamHandled { .. } => "downstream handling",
        EventKind::Crashed { .. } => "crash",
        EventKind::ReconciliationFiled { .. } => "reconciliation entry",
        _ => "another event",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violation(oracle: &str, name: &str, positions: &[u64]) -> Violation {
        Violation {
            oracle: oracle.into(),
            name: name.into(),
            operation: Some("acme/production/run_1/step_0".into()),
            positions: positions.to_vec(),
            explanation: "anything; the signature never reads it".into(),
            line: None,
        }
    }

    #[test]
    fn a_violation_with_no_position_is_about_the_ledger() {
        let signature = of_violation(&violation("O1", "single_effect", &[]), &[]);
        assert_eq!(signature, "O1 single_effect (the ledger)");
    }

    #[test]
    fn a_crash_says_whether_an_executor_panicked() {
        assert_eq!(
            of_crash(&["worker-1 panicked during call: boom".into()]),
            "crashed (an executor panicked)"
        );
        assert_eq!(of_crash(&["the agent never settled \"a\"".into()]), "crashed (a run limit)");
    }
}
