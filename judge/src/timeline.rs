//! Draws a run's history as a timeline for the reports: lanes for the agent, each worker,
//! the downstream and the store, and one mark per event worth seeing.

use std::collections::BTreeMap;

use reports::{Band, Mark, MarkKind, Timeline, Violation};

use crate::attribution::{effect_causes, Attribution};
use crate::history::{Event, EventKind};
use crate::operations::violated_positions;

/// The timeline of a run with `workers` workers; the positions `violations` name are marked
/// with their oracles.
pub fn draw(seed: u64, workers: &[String], history: &[Event], violations: &[Violation]) -> Timeline {
    let mut lanes = vec!["agent".to_owned()];
    lanes.extend(workers.iter().cloned());
    lanes.push("downstream".to_owned());
    lanes.push("store".to_owned());
    let context = Context::of(history);
    let violated = violated_positions(violations);
    let mut marks: Vec<Mark> = Vec::new();
    let mut bands: Vec<Band> = Vec::new();
    for event in history {
        match &event.kind {
            EventKind::FaultInstalled { rule } => bands.push(Band {
                lane: "downstream".to_owned(),
                from_seq: event.seq,
                to_seq: None,
                label: format!("fault: {}", rule.get("action").and_then(|a| a.as_str()).unwrap_or("?")),
            }),
            EventKind::FaultsHealed => {
                for band in bands.iter_mut().filter(|band| band.to_seq.is_none()) {
                    band.to_seq = Some(event.seq);
                }
            }
            _ => {}
        }
        if let Some(mut mark) = mark(event, &context) {
            mark.violated = violated.get(&event.seq).cloned().unwrap_or_default();
            marks.push(mark);
        }
    }
    Timeline { seed, lanes, marks, bands }
}

/// What a mark's lane or label needs from elsewhere in the history.
struct Context<'a> {
    /// Pause name -> the worker it paused.
    paused: BTreeMap<&'a str, &'a str>,
    /// Whether any fault rule was installed (else "faults healed" says nothing).
    any_fault: bool,
    /// Ledger position -> the operation it belongs to (its attribution).
    effect_operation: BTreeMap<u64, String>,
    /// Ledger position -> what the worker that sent the effect's request was serving
    /// (`race-2`).
    effect_sent_for: BTreeMap<u64, String>,
}

impl<'a> Context<'a> {
    fn of(history: &'a [Event]) -> Context<'a> {
        let mut paused = BTreeMap::new();
        let mut any_fault = false;
        let mut effects = Vec::new();
        for event in history {
            match &event.kind {
                EventKind::Paused { name, worker, .. } => {
                    paused.insert(name.as_str(), worker.as_str());
                }
                EventKind::FaultInstalled { .. } => any_fault = true,
                EventKind::Effect { effect } => effects.push(effect.seq),
                _ => {}
            }
        }
        let mut effect_operation = BTreeMap::new();
        let mut effect_sent_for = BTreeMap::new();
        if !effects.is_empty() {
            let attribution = Attribution::build(history);
            for &seq in &effects {
                if let Some(operation) = attribution.effect(seq) {
                    effect_operation.insert(seq, operation.to_owned());
                }
            }
            for (seq, cause) in effect_causes(history) {
                if let Some(sent_for) = cause.sent_for {
                    effect_sent_for.insert(seq, sent_for);
                }
            }
        }
        Context { paused, any_fault, effect_operation, effect_sent_for }
    }
}

fn mark(event: &Event, context: &Context<'_>) -> Option<Mark> {
    let make = |lane: &str, to_lane: Option<&str>, kind: MarkKind, label: String| Mark {
        seq: event.seq,
        at_ms: event.at_ms,
        lane: lane.to_owned(),
        to_lane: to_lane.map(str::to_owned),
        kind,
        label,
        log: Vec::new(),
        violated: Vec::new(),
    };
    Some(match &event.kind {
        EventKind::CallSent { label, worker, tool, .. } => {
            make("agent", Some(worker), MarkKind::Request, format!("call {label} ({tool})"))
        }
        EventKind::OperationQuery { label, kind, worker, .. } => {
            make("agent", Some(worker), MarkKind::Request, format!("{} {label}", kind.as_str()))
        }
        EventKind::Answered { label, worker, outcome, .. } => make(
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
            format!(
                "ledger: {} {}{}{}",
                effect.kind.as_str(),
                effect.effect_reference,
                match context.effect_operation.get(&effect.seq) {
                    Some(operation) => format!(" for {operation}"),
                    None if effect.kind == fake_downstream::EffectKind::TicketEditedByHuman => String::new(),
                    None => " for no known operation".to_owned(),
                },
                context
                    .effect_sent_for
                    .get(&effect.seq)
                    .map(|sent_for| format!(", sent for {sent_for}"))
                    .unwrap_or_default()
            ),
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
        EventKind::FaultsHealed if !context.any_fault => return None,
        EventKind::FaultsHealed => make("downstream", None, MarkKind::Fault, "faults healed".into()),
        EventKind::Paused { worker, point, .. } => {
            make(worker, None, MarkKind::Pause, format!("paused at {point}"))
        }
        EventKind::Released { name } => make(
            context.paused.get(name.as_str()).copied().unwrap_or("agent"),
            None,
            MarkKind::Pause,
            format!("released from {name}"),
        ),
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
