//! Time premises, in a world on real time: what a scenario's steps mean often depends on real
//! time (a retry within retention, an answer decided inside the lease, a downstream answer
//! within the worker's downstream timeout), and a slow machine can break that without any
//! executor's doing. Each premise is measured from the history against the deadlines the
//! processes were given ([`world::GivenTiming`]); where real time ran out, the run is
//! `unknown`, with a note naming the premise and the measured times, and the oracle findings
//! that the lost time explains are not judged (the rest still are: one effect per operation
//! holds whatever the timing). The simulated world has no load: its time is the scenario's,
//! so none of this applies there.
//!
//! - **A retry within retention**: a later call of an operation, where the scenario's own
//!   waits since the operation's first call (its `advance` steps) are shorter than retention,
//!   must be answered before retention ran out since that first call. If not, its expectations
//!   and O7's late-arrival rule on it are not judged (S03 under load: a restart that took 78 s).
//! - **An answer within the lease**: an `in_flight` answer that O6 finds naming no live owner,
//!   where the scenario's own waits from the operation's last work to the call are shorter than
//!   the lease, and O6 accepts it judged at the time the scenario meant (that work plus those
//!   waits, or the call's sending if earlier): the harness itself was slow between the steps
//!   (S04: pause, crash, call took 3.4 s), or the answer travelled late. O6 is not judged on it.
//! - **A downstream answer within the downstream timeout**: a call, poll or reconciliation
//!   answered `unknown` at least the worker's downstream timeout after it was sent, with no
//!   fault or pause of the scenario on it: the worker may have stopped waiting before it read
//!   the downstream's answer, and the downstream saw its requests late, out of the order they
//!   were sent in. Where that matters (an expectation failed, or O13 found the answer one the
//!   executor could have avoided), they are not judged, nor O6's rules on that answer (at the
//!   final poll: a lookup after the last attempt, by the order the downstream saw them in).

use std::collections::BTreeMap;

use judge::history::{Event, EventKind};
use judge::oracles::{Violation, FINAL_POLL_PREFIX};
use judge::text::quoted;
use protocol::OutcomeStatus;
use world::GivenTiming;

/// How every time premise's note begins (the matrix counts the runs they made `unknown`).
pub const TIME_PREMISE: &str = "time premise";

/// A time premise that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broken {
    /// What did not hold, with the measured times.
    pub note: String,
    /// The oracle findings it leaves unjudged: (oracle, a history position the finding names).
    pub excuses: Vec<(&'static str, u64)>,
}

impl Broken {
    /// Whether `violation` is one of the findings this premise leaves unjudged.
    pub fn excuses(&self, violation: &Violation) -> bool {
        self.excuses
            .iter()
            .any(|(oracle, seq)| violation.oracle == *oracle && violation.positions.contains(seq))
    }
}

/// A restart as the runner measured it: the worker, when it began (world clock) and how long
/// its process took to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Restart {
    pub worker: String,
    pub at_ms: u64,
    pub took_ms: u64,
}

/// A request the harness sent (a call, poll or reconciliation) and its answer.
struct Asked<'h> {
    label: &'h str,
    worker: &'h str,
    operation: &'h str,
    seq: u64,
    at_ms: u64,
    answer: Option<&'h Event>,
}

fn asked(history: &[Event]) -> Vec<Asked<'_>> {
    let mut answers: BTreeMap<&str, &Event> = BTreeMap::new();
    for event in history {
        if let EventKind::Answered { label, .. } = &event.kind {
            answers.entry(label).or_insert(event);
        }
    }
    history
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::CallSent { label, worker, operation, .. }
            | EventKind::OperationQuery { label, worker, operation, .. } => Some(Asked {
                label,
                worker,
                operation,
                seq: event.seq,
                at_ms: event.at_ms,
                answer: answers.get(label.as_str()).copied(),
            }),
            _ => None,
        })
        .collect()
}

fn status_of(answer: &Event) -> Option<OutcomeStatus> {
    match &answer.kind {
        EventKind::Answered { outcome, .. } => Some(outcome.status),
        _ => None,
    }
}

/// The time the scenario's own `advance` steps let pass between history positions `from` and
/// `to` (both excluded).
fn waits_between(history: &[Event], from: u64, to: u64) -> u64 {
    history
        .iter()
        .filter(|e| e.seq > from && e.seq < to)
        .map(|e| match e.kind {
            EventKind::ClockAdvanced { by_ms } => by_ms,
            _ => 0,
        })
        .sum()
}

/// `12,345 ms`.
fn ms(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    format!("{out} ms")
}

/// Every time premise of the run that did not hold. `violations` are the run's findings so
/// far (oracles and expectations); `rejudge` judges a history again (O6's counterfactual).
pub(crate) fn broken(
    history: &[Event],
    given: GivenTiming,
    restarts: &[Restart],
    violations: &[Violation],
    rejudge: &dyn Fn(&[Event]) -> Vec<Violation>,
) -> Vec<Broken> {
    let asked = asked(history);
    let mut broken = within_retention(history, &asked, given, restarts);
    broken.extend(answered_within_lease(history, &asked, given, violations, rejudge));
    broken.extend(heard_within_timeout(history, &asked, given, violations));
    broken
}

/// A retry within retention (see the module's documentation).
fn within_retention(
    history: &[Event],
    asked: &[Asked<'_>],
    given: GivenTiming,
    restarts: &[Restart],
) -> Vec<Broken> {
    let retention_ms = given.retention.as_millis() as u64;
    let calls: Vec<&Asked<'_>> = asked
        .iter()
        .filter(|a| history.iter().any(|e| e.seq == a.seq && matches!(e.kind, EventKind::CallSent { .. })))
        .collect();
    let mut first: BTreeMap<&str, &Asked<'_>> = BTreeMap::new();
    let mut broken = Vec::new();
    for call in calls {
        let Some(&original) = first.get(call.operation) else {
            first.insert(call.operation, call);
            continue;
        };
        let Some(answer) = call.answer else { continue };
        let planned = waits_between(history, original.seq, call.seq);
        let measured = answer.at_ms.saturating_sub(original.at_ms);
        if planned >= retention_ms || measured < retention_ms {
            continue;
        }
        let slow: Vec<String> = restarts
            .iter()
            .filter(|r| r.at_ms >= original.at_ms && r.at_ms <= answer.at_ms)
            .map(|r| format!("{}'s restart took {} to start", r.worker, ms(r.took_ms)))
            .collect();
        let slow = if slow.is_empty() { String::new() } else { format!(" ({})", slow.join(", ")) };
        broken.push(Broken {
            note: format!(
                "{TIME_PREMISE} `a retry within retention` did not hold: {} was answered {} after {}, the operation's first call, past the {} retention its workers were given, where the scenario's own waits between the two come to {}: real time ran out on a slow machine{slow}; its expectations and O7's late-arrival rule on it are not judged",
                quoted(call.label),
                ms(measured),
                quoted(original.label),
                ms(retention_ms),
                ms(planned),
            ),
            excuses: vec![("O7", call.seq), ("O7", answer.seq)],
        });
    }
    broken
}

/// An answer within the lease (see the module's documentation).
fn answered_within_lease(
    history: &[Event],
    asked: &[Asked<'_>],
    given: GivenTiming,
    violations: &[Violation],
    rejudge: &dyn Fn(&[Event]) -> Vec<Violation>,
) -> Vec<Broken> {
    let attribution = judge::attribution::Attribution::build(history);
    let mut broken = Vec::new();
    for request in asked {
        let Some(answer) = request.answer else { continue };
        if status_of(answer) != Some(OutcomeStatus::InFlight) || request.label.starts_with(FINAL_POLL_PREFIX)
        {
            continue;
        }
        let found = |violations: &[Violation]| {
            violations.iter().any(|v| v.oracle == "O6" && v.positions == [answer.seq])
        };
        if !found(violations) {
            continue;
        }
        // The last work done for the operation before the call (a request for it, another
        // call of it), and the time the scenario lets pass from there to the call: where that
        // is shorter than the lease, the scenario meant the call inside the owner's lease.
        let mut worked = history.iter().filter(|e| e.seq < request.seq).filter(|e| match &e.kind {
            EventKind::DownstreamSent { request_id, .. } => {
                attribution.request(request_id).and_then(|a| a.operation.as_deref())
                    == Some(request.operation)
            }
            EventKind::CallReceived { label, .. } => {
                label != request.label
                    && asked.iter().any(|a| a.label == label && a.operation == request.operation)
            }
            _ => false,
        });
        let Some(last) = worked.next_back() else { continue };
        let planned = waits_between(history, last.seq, request.seq);
        let lease_ms = given.lease.as_millis() as u64;
        if planned >= lease_ms {
            continue;
        }
        // The executor decided somewhere between the call's sending and its answer, and the
        // call was meant `planned` after that work: judged as if it had come then and been
        // answered at once.
        let meant_ms = request.at_ms.min(last.at_ms + planned);
        let mut earlier = history.to_vec();
        if let Some(event) = earlier.iter_mut().find(|e| e.seq == answer.seq) {
            event.at_ms = meant_ms;
        }
        if found(&rejudge(&earlier)) {
            continue;
        }
        broken.push(Broken {
            note: format!(
                "{TIME_PREMISE} `an answer within the lease` did not hold: {} was answered in_flight {} after the operation's last work before it, where the scenario's own waits between the two come to {} (the call was sent {} after that work, and answered {} after it was sent); O6 finds no live owner within the {} lease before the answer, but finds one at the time the scenario meant, so real time ran out on a slow machine: O6 is not judged on it",
                quoted(request.label),
                ms(answer.at_ms.saturating_sub(last.at_ms)),
                ms(planned),
                ms(request.at_ms.saturating_sub(last.at_ms)),
                ms(answer.at_ms.saturating_sub(request.at_ms)),
                ms(lease_ms),
            ),
            excuses: vec![("O6", answer.seq)],
        });
    }
    broken
}

/// A downstream answer within the downstream timeout (see the module's documentation).
fn heard_within_timeout(
    history: &[Event],
    asked: &[Asked<'_>],
    given: GivenTiming,
    violations: &[Violation],
) -> Vec<Broken> {
    let timeout_ms = given.downstream_timeout.as_millis() as u64;
    let expectation_failed = violations.iter().any(|v| v.oracle == "expect");
    let mut broken = Vec::new();
    for request in asked {
        let Some(answer) = request.answer else { continue };
        if status_of(answer) != Some(OutcomeStatus::Unknown) {
            continue;
        }
        let span = answer.at_ms.saturating_sub(request.at_ms);
        if span < timeout_ms {
            continue;
        }
        let o13 = violations.iter().any(|v| v.oracle == "O13" && v.positions.contains(&answer.seq));
        if !expectation_failed && !o13 {
            continue;
        }
        let during = |e: &&Event| e.seq > request.seq && e.seq < answer.seq;
        // The scenario's own delays explain a slow answer: a pause that held the worker, a
        // fault that fired on one of its requests, or a request still unhandled while a fault
        // rule was installed (a hold, a delay).
        let paused = history
            .iter()
            .filter(during)
            .any(|e| matches!(&e.kind, EventKind::Paused { worker, .. } if worker == request.worker));
        let sent: Vec<(&str, &str, &str, u64)> = history
            .iter()
            .filter(during)
            .filter_map(|e| match &e.kind {
                EventKind::DownstreamSent { request_id, serving: Some(serving), method, path, .. }
                    if serving == request.label =>
                {
                    Some((request_id.as_str(), method.as_str(), path.as_str(), e.at_ms))
                }
                _ => None,
            })
            .collect();
        let handled = |id: &str| {
            history.iter().filter(|e| e.seq < answer.seq).find_map(|e| match &e.kind {
                EventKind::DownstreamHandled { request_id: Some(handled), fault, .. } if handled == id => {
                    Some(fault.is_some())
                }
                _ => None,
            })
        };
        let rules_installed =
            history.iter().any(|e| e.seq < answer.seq && matches!(e.kind, EventKind::FaultInstalled { .. }));
        let faulted = sent.iter().any(|(id, ..)| match handled(id) {
            Some(fault) => fault,
            None => rules_installed,
        });
        if paused || faulted {
            continue;
        }
        let answered_at = |id: &str| {
            history.iter().filter(|e| e.seq < answer.seq).find_map(|e| match &e.kind {
                EventKind::DownstreamAnswered { request_id, .. } if request_id == id => Some(e.at_ms),
                _ => None,
            })
        };
        let requests = if sent.is_empty() {
            "; it sent no request downstream before answering".to_owned()
        } else {
            let each: Vec<String> = sent
                .iter()
                .map(|(id, method, path, at)| {
                    let answered = answered_at(id).map_or_else(
                        || "not answered before the call was".to_owned(),
                        |answered| {
                            format!("answered {} after the call was sent", ms(answered - request.at_ms))
                        },
                    );
                    format!(
                        "{method} {path} reached the downstream {} after the call was sent, {answered}",
                        ms(at - request.at_ms)
                    )
                })
                .collect();
            format!("; {}", each.join("; "))
        };
        broken.push(Broken {
            note: format!(
                "{TIME_PREMISE} `a downstream answer within the downstream timeout` did not hold: {} was answered unknown {} after it was sent, past the {} downstream timeout its worker was given, with no fault or pause of the scenario on it{requests}: the worker may have stopped waiting before it read the downstream's answer, on a slow machine; the expectations, and O6 and O13 on it, are not judged",
                quoted(request.label),
                ms(span),
                ms(timeout_ms),
            ),
            excuses: vec![("O6", answer.seq), ("O13", answer.seq)],
        });
    }
    broken
}

#[cfg(test)]
mod tests {
    use super::ms;

    #[test]
    fn milliseconds_are_grouped_by_thousands() {
        assert_eq!(ms(0), "0 ms");
        assert_eq!(ms(999), "999 ms");
        assert_eq!(ms(1_000), "1,000 ms");
        assert_eq!(ms(78_412), "78,412 ms");
        assert_eq!(ms(1_234_567), "1,234,567 ms");
    }
}
