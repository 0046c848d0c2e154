//! A run's operations as the reports show them: what each request of an operation was answered
//! (the executor's words) beside the business effects the ledger holds for it (the ground
//! truth, tied to the operation by [`Attribution`] from what the harness controls, never from
//! the executor's key). Positions named by a violation are marked on both sides.

use std::collections::{BTreeMap, BTreeSet};

use protocol::Fingerprint;
use reports::{Answer, LedgerEntry, OperationRecord, RequestKind, Violation};

use crate::attribution::{effect_causes, Attribution};
use crate::history::{Event, EventKind};

/// How many hex digits of a result's SHA-256 a report shows: enough to tell results apart at
/// a glance, short enough for a table cell.
const RESULT_DIGEST_HEX: usize = 16;

/// The operations of `history` in the order their first request was sent, then the effects
/// that belong to no operation (`operation: None`), if any.
pub fn records(history: &[Event], violations: &[Violation]) -> Vec<OperationRecord> {
    let violated = violated_positions(violations);
    let marks = |seq: u64| violated.get(&seq).cloned().unwrap_or_default();
    let mut order: Vec<Option<String>> = Vec::new();
    let mut by_operation: BTreeMap<Option<String>, OperationRecord> = BTreeMap::new();
    let mut label_to: BTreeMap<&str, (Option<String>, usize)> = BTreeMap::new();
    let mut attribution = None;
    let mut causes = None;
    for event in history {
        let (label, operation, kind, fingerprint) = match &event.kind {
            EventKind::CallSent { label, operation, fingerprint, .. } => {
                (label, operation, RequestKind::Call, fingerprint.clone())
            }
            EventKind::OperationQuery { label, operation, kind, .. } => (label, operation, *kind, None),
            EventKind::Answered { label, outcome, .. } => {
                if let Some((operation, index)) = label_to.get(label.as_str()) {
                    if let Some(answer) =
                        by_operation.get_mut(operation).and_then(|record| record.answers.get_mut(*index))
                    {
                        answer.answered_seq = Some(event.seq);
                        answer.status = Some(outcome.status.as_str().to_owned());
                        answer.reference = outcome.effect_reference.clone();
                        answer.result_digest = outcome.result.as_ref().map(result_digest);
                        answer.violated = merged(&answer.violated, &marks(event.seq));
                    }
                }
                continue;
            }
            EventKind::AgentGotNoAnswer { label, reason } => {
                if let Some((operation, index)) = label_to.get(label.as_str()) {
                    if let Some(answer) =
                        by_operation.get_mut(operation).and_then(|record| record.answers.get_mut(*index))
                    {
                        answer.answered_seq = Some(event.seq);
                        answer.no_answer = Some(reason.clone());
                        answer.violated = merged(&answer.violated, &marks(event.seq));
                    }
                }
                continue;
            }
            EventKind::Effect { effect } => {
                if effect.kind == fake_downstream::EffectKind::TicketEditedByHuman {
                    continue;
                }
                let attribution = attribution.get_or_insert_with(|| Attribution::build(history));
                let operation = attribution.effect(effect.seq).map(str::to_owned);
                ensure(&mut by_operation, &mut order, &operation);
                let kind = serde_json::to_value(effect.kind)
                    .ok()
                    .and_then(|value| value.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let cause = causes.get_or_insert_with(|| effect_causes(history)).get(&effect.seq);
                if let Some(record) = by_operation.get_mut(&operation) {
                    record.ledger.push(LedgerEntry {
                        seq: event.seq,
                        kind,
                        reference: effect.effect_reference.clone(),
                        request_id: cause.map(|cause| cause.request_id.clone()),
                        sent_for: cause.and_then(|cause| cause.sent_for.clone()),
                        violated: marks(event.seq),
                    });
                }
                continue;
            }
            _ => continue,
        };
        let operation = Some(operation.clone());
        ensure(&mut by_operation, &mut order, &operation);
        if let Some(record) = by_operation.get_mut(&operation) {
            label_to.insert(label.as_str(), (operation.clone(), record.answers.len()));
            record.answers.push(Answer {
                label: label.clone(),
                kind,
                seq: event.seq,
                answered_seq: None,
                status: None,
                no_answer: None,
                reference: None,
                result_digest: None,
                fingerprint,
                violated: marks(event.seq),
            });
        }
    }
    // Effects of no operation last.
    order.sort_by_key(Option::is_none);
    order.into_iter().filter_map(|operation| by_operation.remove(&operation)).collect()
}

/// Makes room for `operation`, remembering the order operations first appeared in.
fn ensure(
    by_operation: &mut BTreeMap<Option<String>, OperationRecord>,
    order: &mut Vec<Option<String>>,
    operation: &Option<String>,
) {
    if !by_operation.contains_key(operation) {
        order.push(operation.clone());
        let record =
            OperationRecord { operation: operation.clone(), answers: Vec::new(), ledger: Vec::new() };
        by_operation.insert(operation.clone(), record);
    }
}

/// History position -> the oracles whose violations name it, each once, in violation order.
pub fn violated_positions(violations: &[Violation]) -> BTreeMap<u64, Vec<String>> {
    let mut marks: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for violation in violations {
        for position in &violation.positions {
            let oracles = marks.entry(*position).or_default();
            if !oracles.contains(&violation.oracle) {
                oracles.push(violation.oracle.clone());
            }
        }
    }
    marks
}

fn merged(first: &[String], second: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    first.iter().chain(second).filter(|oracle| seen.insert(oracle.as_str())).cloned().collect()
}

/// `sha256:` and the first [`RESULT_DIGEST_HEX`] hex digits of the result's canonical JSON.
fn result_digest(result: &serde_json::Value) -> String {
    let digest = Fingerprint::of(result).digest;
    format!("sha256:{}", &digest[..RESULT_DIGEST_HEX.min(digest.len())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_collect_each_oracle_once_in_order() {
        let violation = |oracle: &str, positions: &[u64]| Violation {
            oracle: oracle.into(),
            name: "n".into(),
            operation: None,
            positions: positions.to_vec(),
            explanation: "e".into(),
            line: None,
        };
        let marks =
            violated_positions(&[violation("O1", &[3, 7]), violation("O8", &[7]), violation("O1", &[7])]);
        assert_eq!(marks[&3], vec!["O1"]);
        assert_eq!(marks[&7], vec!["O1", "O8"]);
        assert!(!marks.contains_key(&4));
    }

    #[test]
    fn result_digests_ignore_key_order_and_are_short() {
        let one = result_digest(&serde_json::json!({"a": 1, "b": [1, 2]}));
        let two = result_digest(&serde_json::json!({"b": [1, 2], "a": 1}));
        assert_eq!(one, two);
        assert_eq!(one.len(), "sha256:".len() + RESULT_DIGEST_HEX);
        assert_ne!(one, result_digest(&serde_json::json!({"a": 2, "b": [1, 2]})));
    }
}
