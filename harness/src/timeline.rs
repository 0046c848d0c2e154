//! Draws a run's history as a timeline for the reports: lanes for the agent, each worker,
//! the downstream and the store, and one mark per event worth seeing.

use reports::{Mark, MarkKind, Timeline};

use crate::history::{Event, EventKind};

/// The timeline of a run with `workers` workers.
pub fn draw(seed: u64, workers: &[String], history: &[Event]) -> Timeline {
    let mut lanes = vec!["agent".to_owned()];
    lanes.extend(workers.iter().cloned());
    lanes.push("downstream".to_owned());
    lanes.push("store".to_owned());
    let marks = history.iter().filter_map(mark).collect();
    Timeline { seed, lanes, marks }
}

fn mark(event: &Event) -> Option<Mark> {
    let make = |lane: &str, to_lane: Option<&str>, kind: MarkKind, label: String| Mark {
        seq: event.seq,
        at_ms: event.at_ms,
        lane: lane.to_owned(),
        to_lane: to_lane.map(str::to_owned),
        kind,
        label,
        log: Vec::new(),
    };
    Some(match &event.kind {
        EventKind::CallSent { label, worker, tool, .. } => {
            make("agent", Some(worker), MarkKind::Request, format!("call {label} ({tool})"))
        }
        EventKind::OperationQuery { label, kind, worker, .. } => {
            make("agent", Some(worker), MarkKind::Request, format!("{} {label}", kind.as_str()))
        }
        EventKind::Answered { label, worker, outcome } => make(
            worker,
            Some("agent"),
            MarkKind::Outcome,
            format!(
                "{label}: {}{}",
                outcome.status.as_str(),
                outcome.effect_reference.as_ref().map(|r| format!(" {r}")).unwrap_or_default()
            ),
        ),
        EventKind::CallReceived { .. } => return None,
        EventKind::AgentReceived { .. } => return None,
        EventKind::AgentGotNoAnswer { label, reason } => {
            make("agent", None, MarkKind::NoAnswer, format!("no answer to {label}: {reason}"))
        }
        EventKind::ExecutorPanicked { worker, during, .. } => {
            make(worker, None, MarkKind::Failure, format!("executor panicked during {during}"))
        }
        EventKind::DownstreamSent { worker, method, path, .. } => make(
            worker,
            Some("downstream"),
            MarkKind::DownstreamRequest,
            format!("{method} {}", path.split('?').next().unwrap_or_default()),
        ),
        EventKind::DownstreamAnswered { worker, status, references, .. } => make(
            "downstream",
            Some(worker),
            MarkKind::DownstreamAnswer,
            format!("{status} {}", references.join(" ")).trim_end().to_owned(),
        ),
        EventKind::DownstreamFailed { worker, error, .. } => {
            make(worker, None, MarkKind::DownstreamLost, format!("no downstream answer: {error}"))
        }
        EventKind::DownstreamHandled { fault: Some(fault), request, .. } => {
            make("downstream", None, MarkKind::Fault, format!("fault {fault} on {request}"))
        }
        EventKind::DownstreamHandled { .. } => return None,
        EventKind::Effect { effect } => make(
            "downstream",
            None,
            MarkKind::Effect,
            format!("ledger: {} {}", effect.kind.as_str(), effect.effect_reference),
        ),
        EventKind::Authorization { worker, actor, allowed, .. } => {
            if *allowed {
                return None;
            }
            make(worker, None, MarkKind::Decision, format!("{actor} not authorized"))
        }
        EventKind::Revoked { actor, .. } => {
            make("agent", None, MarkKind::Decision, format!("revoked {actor}"))
        }
        EventKind::FaultInstalled { rule } => make(
            "downstream",
            None,
            MarkKind::Fault,
            format!("rule: {}", rule.get("action").and_then(|a| a.as_str()).unwrap_or("?")),
        ),
        EventKind::HoldReleased { name } => {
            make("downstream", None, MarkKind::Fault, format!("release {name}"))
        }
        EventKind::FaultsHealed => make("downstream", None, MarkKind::Fault, "faults healed".into()),
        EventKind::Paused { worker, point, .. } => {
            make(worker, None, MarkKind::Pause, format!("paused at {point}"))
        }
        EventKind::Released { name } => make("agent", None, MarkKind::Pause, format!("release {name}")),
        EventKind::Crashed { worker, .. } => make(worker, None, MarkKind::Crash, "crash".into()),
        EventKind::Restarted { worker } => make(worker, None, MarkKind::Restart, "restart".into()),
        EventKind::ClockAdvanced { by_ms } => {
            make("agent", None, MarkKind::Clock, format!("wait {by_ms} ms"))
        }
        EventKind::IdleSkipped { by_ms } => {
            make("agent", None, MarkKind::Clock, format!("idle {by_ms} ms skipped"))
        }
        EventKind::HumanEdit { ticket, version } => {
            make("downstream", None, MarkKind::Decision, format!("human edit {ticket} -> v{version}"))
        }
        EventKind::ReconciliationFiled { worker, .. } => {
            make(worker, None, MarkKind::Decision, "reconciliation filed".into())
        }
        EventKind::Enqueued { envelope_id, .. } => {
            make("store", None, MarkKind::Delivery, format!("outbox {envelope_id}"))
        }
        EventKind::Delivered { worker, attempt, .. } => {
            make("store", Some(worker), MarkKind::Delivery, format!("queue delivery {attempt}"))
        }
        EventKind::Consumed { worker, result, .. } => {
            make(worker, None, MarkKind::Delivery, format!("consumed: {result}"))
        }
        EventKind::WebhookReceived { .. } => return None,
        EventKind::WebhookHandled { worker, event_id, ack } => make(
            "downstream",
            Some(worker),
            MarkKind::Delivery,
            format!("webhook {}: {ack}", event_id.as_deref().unwrap_or("?")),
        ),
        EventKind::StoreCommitted { worker, call, .. } => {
            make(worker, Some("store"), MarkKind::Store, call.clone())
        }
        EventKind::SettleStarted => make("agent", None, MarkKind::Clock, "settle".into()),
        EventKind::LimitReached { what } => make("agent", None, MarkKind::Failure, what.clone()),
    })
}
