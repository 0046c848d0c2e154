//! The oracles O1..O11 of MATRIX.md: independent checks over a run's history and the
//! downstream's ledger. Effects come from the ledger only; what an executor *says* is only
//! ever checked against it, never counted.

use std::collections::{BTreeMap, BTreeSet};

use fake_downstream::{Effect, EffectKind};
use protocol::{ContractSet, Outcome, OutcomeStatus, ReasonCode};
pub use reports::Violation;

use crate::history::{Event, EventKind};

/// The oracles, by id and name, in order.
pub const ORACLES: [(&str, &str); 11] = [
    ("O1", "single_effect"),
    ("O2", "no_phantom_success"),
    ("O3", "mismatch_no_effect"),
    ("O4", "no_success_from_ambiguity"),
    ("O5", "authorization"),
    ("O6", "no_orphan_pending"),
    ("O7", "late_duplicate"),
    ("O8", "replay_fidelity"),
    ("O9", "tenant_isolation"),
    ("O10", "single_job"),
    ("O11", "no_stale_overwrite"),
];

/// The label prefix of the final poll the runner makes for each operation after settling.
pub const FINAL_POLL_PREFIX: &str = "final-poll:";

/// What the oracles read.
#[derive(Debug)]
pub struct Evidence<'a> {
    /// The ordered history.
    pub history: &'a [Event],
    /// The downstream's ledger.
    pub ledger: &'a [Effect],
    /// The contracts of the run (for retention).
    pub contracts: &'a ContractSet,
}

/// A call as the agent sent it.
#[derive(Debug, Clone)]
struct CallFact {
    seq: u64,
    label: String,
    operation: String,
    actor: String,
    tool: String,
    tool_version: String,
    fingerprint: Option<String>,
    expected_version: Option<u64>,
}

/// An answer from a worker to a labelled request.
#[derive(Debug, Clone)]
struct AnswerFact {
    seq: u64,
    label: String,
    outcome: Outcome,
}

/// The facts the oracles share, drawn once from the evidence.
struct Facts<'a> {
    evidence: &'a Evidence<'a>,
    calls: Vec<CallFact>,
    /// label -> (operation, tenant)
    requests: BTreeMap<String, (String, String)>,
    answers: Vec<AnswerFact>,
    /// ledger seq -> history seq of its `effect` event
    effect_positions: BTreeMap<u64, u64>,
    /// (history seq, origin, references) of downstream answers the executors saw
    observed: Vec<(u64, Option<String>, Vec<String>)>,
    /// (history seq, origin, method, path) of requests workers sent downstream
    sent: Vec<(u64, Option<String>, String, String)>,
    revocations: Vec<(u64, String, Option<String>)>,
}

impl<'a> Facts<'a> {
    fn new(evidence: &'a Evidence<'a>) -> Self {
        let mut facts = Facts {
            evidence,
            calls: Vec::new(),
            requests: BTreeMap::new(),
            answers: Vec::new(),
            effect_positions: BTreeMap::new(),
            observed: Vec::new(),
            sent: Vec::new(),
            revocations: Vec::new(),
        };
        for event in evidence.history {
            match &event.kind {
                EventKind::CallSent {
                    label,
                    operation,
                    tenant,
                    actor,
                    tool,
                    tool_version,
                    fingerprint,
                    expected_version,
                    ..
                } => {
                    facts.requests.insert(label.clone(), (operation.clone(), tenant.clone()));
                    facts.calls.push(CallFact {
                        seq: event.seq,
                        label: label.clone(),
                        operation: operation.clone(),
                        actor: actor.clone(),
                        tool: tool.clone(),
                        tool_version: tool_version.clone(),
                        fingerprint: fingerprint.clone(),
                        expected_version: *expected_version,
                    });
                }
                EventKind::OperationQuery { label, operation, tenant, .. } => {
                    facts.requests.insert(label.clone(), (operation.clone(), tenant.clone()));
                }
                EventKind::Answered { label, outcome, .. } => {
                    facts.answers.push(AnswerFact {
                        seq: event.seq,
                        label: label.clone(),
                        outcome: outcome.clone(),
                    });
                }
                EventKind::Effect { ledger_seq, .. } => {
                    facts.effect_positions.insert(*ledger_seq, event.seq);
                }
                EventKind::DownstreamAnswered { origin, references, .. }
                | EventKind::WebhookReceived { origin, references, .. } => {
                    facts.observed.push((event.seq, origin.clone(), references.clone()));
                }
                EventKind::DownstreamSent { origin, method, path, .. } => {
                    facts.sent.push((event.seq, origin.clone(), method.clone(), path.clone()));
                }
                EventKind::Revoked { actor, tool } => {
                    facts.revocations.push((event.seq, actor.clone(), tool.clone()))
                }
                _ => {}
            }
        }
        facts
    }

    fn position(&self, effect: &Effect) -> u64 {
        self.effect_positions.get(&effect.seq).copied().unwrap_or(0)
    }

    /// Business effects (human edits are not an operation's effects).
    fn business_effects(&self) -> impl Iterator<Item = &'a Effect> {
        self.evidence.ledger.iter().filter(|effect| effect.kind != EffectKind::TicketEditedByHuman)
    }

    fn effects_of(&self, operation: &str) -> Vec<&'a Effect> {
        self.business_effects().filter(|effect| effect.origin.as_deref() == Some(operation)).collect()
    }

    fn request_of(&self, label: &str) -> Option<&(String, String)> {
        self.requests.get(label)
    }

    /// When the request that made `effect` left its worker: the last mutating request of the
    /// same operation to the same service before the effect.
    fn sent_at(&self, effect: &Effect) -> Option<u64> {
        let prefix = format!("/v1/{}", effect.service.as_str());
        let position = self.position(effect);
        self.sent
            .iter()
            .filter(|(seq, origin, method, path)| {
                *seq < position && origin == &effect.origin && method != "GET" && path.starts_with(&prefix)
            })
            .map(|(seq, ..)| *seq)
            .next_back()
    }

    fn first_call_of(&self, operation: &str) -> Option<&CallFact> {
        self.calls.iter().find(|call| call.operation == operation)
    }
}

/// Runs every oracle; the violations are in oracle order, then history order.
pub fn check(evidence: &Evidence<'_>) -> Vec<Violation> {
    let facts = Facts::new(evidence);
    let mut violations = Vec::new();
    for oracle in [
        single_effect as fn(&Facts<'_>) -> Vec<Violation>,
        no_phantom_success,
        mismatch_no_effect,
        no_success_from_ambiguity,
        authorization,
        no_orphan_pending,
        late_duplicate,
        replay_fidelity,
        tenant_isolation,
        single_job,
        no_stale_overwrite,
    ] {
        violations.extend(oracle(&facts));
    }
    violations
}

fn violation(oracle: usize, operation: Option<&str>, positions: Vec<u64>, explanation: String) -> Violation {
    let (id, name) = ORACLES[oracle - 1];
    Violation {
        oracle: id.to_owned(),
        name: name.to_owned(),
        operation: operation.map(str::to_owned),
        positions,
        explanation,
    }
}

/// The effect kind a tool's own effect has (a job's completion notice is not the job's call).
fn kind_of_tool(tool: &str) -> Option<EffectKind> {
    match tool {
        "tickets.create" => Some(EffectKind::TicketCreated),
        "tickets.set_status" => Some(EffectKind::TicketStatusChanged),
        "payments.charge" => Some(EffectKind::ChargeCreated),
        "messages.send" => Some(EffectKind::MessageSent),
        "jobs.submit" => Some(EffectKind::JobAccepted),
        _ => None,
    }
}

fn kind_name(kind: EffectKind) -> String {
    serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// O1: per operation and effect kind, at most one effect (jobs are O10's). An effect no
/// operation can be found for is a violation too: the harness cannot vouch for it.
fn single_effect(facts: &Facts<'_>) -> Vec<Violation> {
    let mut groups: BTreeMap<(String, String, EffectKind), Vec<&Effect>> = BTreeMap::new();
    let mut violations = Vec::new();
    for effect in facts.business_effects() {
        match &effect.origin {
            Some(origin) if effect.kind != EffectKind::JobAccepted => {
                groups.entry((effect.tenant.clone(), origin.clone(), effect.kind)).or_default().push(effect);
            }
            Some(_) => {}
            None => violations.push(violation(
                1,
                None,
                vec![facts.position(effect)],
                format!(
                    "the downstream made {} {} that no operation sent (the request carried no operation tag)",
                    kind_name(effect.kind),
                    effect.effect_reference
                ),
            )),
        }
    }
    for ((_, origin, kind), effects) in groups {
        if effects.len() > 1 {
            let references: Vec<&str> = effects.iter().map(|e| e.effect_reference.as_str()).collect();
            violations.push(violation(
                1,
                Some(&origin),
                effects.iter().map(|e| facts.position(e)).collect(),
                format!(
                    "one operation made {} {} effects in the ledger ({}), where at most one is allowed",
                    effects.len(),
                    kind_name(kind),
                    references.join(", ")
                ),
            ));
        }
    }
    violations
}

/// O2: every applied/replayed outcome names an effect that exists in the ledger for that
/// tenant and operation (for absolute updates, the target's tenant).
fn no_phantom_success(facts: &Facts<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    for answer in &facts.answers {
        if !answer.outcome.status.claims_success() {
            continue;
        }
        let Some((operation, tenant)) = facts.request_of(&answer.label) else { continue };
        let status = answer.outcome.status.as_str();
        let Some(reference) = &answer.outcome.effect_reference else {
            violations.push(violation(
                2,
                Some(operation),
                vec![answer.seq],
                format!("{:?} was answered {status} without any effect reference", answer.label),
            ));
            continue;
        };
        let is_update =
            facts.calls.iter().any(|call| &call.operation == operation && call.tool == "tickets.set_status");
        let exists = facts.evidence.ledger.iter().any(|effect| {
            &effect.effect_reference == reference
                && &effect.tenant == tenant
                && (is_update || effect.origin.as_deref() == Some(operation.as_str()))
        });
        if !exists {
            violations.push(violation(
                2,
                Some(operation),
                vec![answer.seq],
                format!(
                    "{:?} was answered {status} with {reference}, but the ledger has no such effect for this tenant and operation",
                    answer.label
                ),
            ));
        }
    }
    violations
}

/// O3: a request whose material content differs from the operation's first one is refused
/// (`rejected`, or `expired` once the key is past retention) and makes no effect.
fn mismatch_no_effect(facts: &Facts<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut first: BTreeMap<&str, &CallFact> = BTreeMap::new();
    for call in &facts.calls {
        let answer = facts.answers.iter().find(|a| a.label == call.label);
        let invalid = answer.is_some_and(|a| {
            a.outcome.status == OutcomeStatus::Rejected
                && matches!(a.outcome.reason, Some(ReasonCode::InvalidRequest | ReasonCode::Unauthorized))
        });
        let Some(original) = first.get(call.operation.as_str()).copied() else {
            if call.fingerprint.is_some() && !invalid {
                first.insert(&call.operation, call);
            }
            continue;
        };
        let (Some(fingerprint), Some(original_fingerprint)) = (&call.fingerprint, &original.fingerprint)
        else {
            continue;
        };
        if fingerprint == original_fingerprint {
            continue;
        }
        let replay_allowed = original.tool_version != call.tool_version
            && facts
                .evidence
                .contracts
                .get(&original.tool, &original.tool_version)
                .is_some_and(|contract| contract.replay_across_versions);
        if let Some(answer) = answer {
            // `expired` refuses too: past retention the key is a tombstone and nothing runs.
            let acceptable =
                matches!(answer.outcome.status, OutcomeStatus::Rejected | OutcomeStatus::Expired)
                    || (replay_allowed && answer.outcome.status == OutcomeStatus::Replayed);
            if !acceptable {
                violations.push(violation(
                    3,
                    Some(&call.operation),
                    vec![call.seq, answer.seq],
                    format!(
                        "{:?} changed the material request of an existing operation (first sent as {:?}) but was answered {} instead of rejected",
                        call.label,
                        original.label,
                        answer.outcome.status.as_str()
                    ),
                ));
            }
        }
        // Only effects of the kind the changed request asks for: a job's completion notice
        // after a rejected change is the original job's follow-up, not the change's effect.
        let kind = kind_of_tool(&call.tool);
        let own = |effect: &&Effect| kind.is_none_or(|kind| effect.kind == kind);
        let earlier = facts
            .effects_of(&call.operation)
            .into_iter()
            .filter(own)
            .filter(|e| facts.position(e) < call.seq)
            .count();
        let later: Vec<&Effect> = facts
            .effects_of(&call.operation)
            .into_iter()
            .filter(own)
            .filter(|e| facts.position(e) > call.seq)
            .collect();
        if earlier > 0 && !later.is_empty() {
            violations.push(violation(
                3,
                Some(&call.operation),
                std::iter::once(call.seq).chain(later.iter().map(|e| facts.position(e))).collect(),
                format!(
                    "after the changed request {:?}, the operation made another effect ({})",
                    call.label,
                    later.iter().map(|e| e.effect_reference.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    violations
}

/// O4: no applied/replayed unless an executor saw a receipt for that effect (a downstream
/// answer carrying the reference) for that operation, before answering.
fn no_success_from_ambiguity(facts: &Facts<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    for answer in &facts.answers {
        if !answer.outcome.status.claims_success() {
            continue;
        }
        let (Some((operation, _)), Some(reference)) =
            (facts.request_of(&answer.label), answer.outcome.effect_reference.as_ref())
        else {
            continue;
        };
        let seen = facts.observed.iter().any(|(seq, origin, references)| {
            *seq < answer.seq
                && origin.as_deref() == Some(operation.as_str())
                && references.contains(reference)
        });
        if !seen {
            violations.push(violation(
                4,
                Some(operation),
                vec![answer.seq],
                format!(
                    "{:?} was answered {} with {reference}, but no executor had seen a downstream receipt for it in this operation",
                    answer.label,
                    answer.outcome.status.as_str()
                ),
            ));
        }
    }
    violations
}

/// O5: no effect for an actor whose request left the worker after its permission was
/// revoked, and calls made after the revocation are not answered applied/replayed.
fn authorization(facts: &Facts<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (revoked_at, actor, tool) in &facts.revocations {
        let covers =
            |call: &CallFact| &call.actor == actor && tool.as_ref().is_none_or(|tool| tool == &call.tool);
        // An operation is the first call's: a later call with another tool under the same key
        // is a changed request (O3's business), and never owns the operation's effects.
        let covered: BTreeSet<(&str, Option<EffectKind>)> = facts
            .calls
            .iter()
            .filter(|call| facts.first_call_of(&call.operation).is_some_and(|first| first.seq == call.seq))
            .filter(|call| covers(call))
            .map(|call| (call.operation.as_str(), kind_of_tool(&call.tool)))
            .collect();
        for (operation, kind) in &covered {
            for effect in facts.effects_of(operation) {
                let same_tool = kind.is_none_or(|kind| effect.kind == kind);
                // The executor's last chance to check was when the request left the worker: a
                // request already on the wire when the permission was revoked is no violation.
                let sent_after =
                    facts.sent_at(effect).unwrap_or_else(|| facts.position(effect)) > *revoked_at;
                if same_tool && sent_after {
                    violations.push(violation(
                        5,
                        Some(operation),
                        vec![*revoked_at, facts.position(effect)],
                        format!(
                            "{} was made for {actor} after its permission was revoked",
                            effect.effect_reference
                        ),
                    ));
                }
            }
        }
        for call in facts.calls.iter().filter(|call| call.seq > *revoked_at && covers(call)) {
            if let Some(answer) = facts.answers.iter().find(|a| a.label == call.label) {
                if answer.outcome.status.claims_success() {
                    violations.push(violation(
                        5,
                        Some(&call.operation),
                        vec![*revoked_at, call.seq, answer.seq],
                        format!(
                            "{:?} by {actor} came after the revocation but was answered {} instead of rejected",
                            call.label,
                            answer.outcome.status.as_str()
                        ),
                    ));
                }
            }
        }
    }
    violations
}

/// O6: after faults heal and the world settles, every operation is terminal, or `unknown`
/// pointing at reconciliation. Read from the final poll the runner makes.
fn no_orphan_pending(facts: &Facts<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    let settled = facts.evidence.history.iter().any(|event| matches!(event.kind, EventKind::SettleStarted));
    if !settled {
        // The run stopped at a limit before the world could settle: that is its verdict.
        return violations;
    }
    let operations: BTreeSet<&str> = facts.calls.iter().map(|call| call.operation.as_str()).collect();
    for operation in operations {
        let label = format!("{FINAL_POLL_PREFIX}{operation}");
        match facts.answers.iter().find(|answer| answer.label == label) {
            None => violations.push(violation(
                6,
                Some(operation),
                Vec::new(),
                "after the world settled, the final poll of the operation got no answer".into(),
            )),
            Some(answer) => {
                let outcome = &answer.outcome;
                let orphan = match outcome.status {
                    OutcomeStatus::InFlight => true,
                    OutcomeStatus::Unknown => outcome.next_action != protocol::NextAction::Reconcile,
                    _ => false,
                };
                if orphan {
                    violations.push(violation(
                        6,
                        Some(operation),
                        vec![answer.seq],
                        format!(
                            "after faults healed and the world settled, the operation is still {} (next action {:?})",
                            outcome.status.as_str(),
                            outcome.next_action
                        ),
                    ));
                }
            }
        }
    }
    violations
}

/// O7: after retention, an old key makes no new effect.
fn late_duplicate(facts: &Facts<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    let operations: BTreeSet<&str> = facts.calls.iter().map(|call| call.operation.as_str()).collect();
    for operation in operations {
        let Some(call) = facts.first_call_of(operation) else { continue };
        let Some(contract) = facts.evidence.contracts.get(&call.tool, &call.tool_version) else { continue };
        let retention_ms = contract.retention.as_millis() as u64;
        let effects = facts.effects_of(operation);
        let Some(first) = effects.first() else { continue };
        for late in
            effects.iter().skip(1).filter(|e| e.kind == first.kind && e.at_ms >= first.at_ms + retention_ms)
        {
            violations.push(violation(
                7,
                Some(operation),
                vec![facts.position(first), facts.position(late)],
                format!(
                    "{} was made {} ms after {}, past the {} ms retention: a late duplicate became a new effect",
                    late.effect_reference,
                    late.at_ms - first.at_ms,
                    first.effect_reference,
                    retention_ms
                ),
            ));
        }
    }
    violations
}

/// O8: a replay returns the original effect reference and business result.
fn replay_fidelity(facts: &Facts<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    for answer in facts.answers.iter().filter(|a| a.outcome.status == OutcomeStatus::Replayed) {
        let Some((operation, _)) = facts.request_of(&answer.label) else { continue };
        let original = facts.effects_of(operation).into_iter().next();
        if let Some(original) = original {
            if answer.outcome.effect_reference.as_deref() != Some(original.effect_reference.as_str()) {
                violations.push(violation(
                    8,
                    Some(operation),
                    vec![facts.position(original), answer.seq],
                    format!(
                        "{:?} replayed {:?}, but the operation's effect is {}",
                        answer.label, answer.outcome.effect_reference, original.effect_reference
                    ),
                ));
                continue;
            }
        }
        let applied = facts.answers.iter().find(|a| {
            a.outcome.status == OutcomeStatus::Applied
                && a.outcome.result.is_some()
                && facts.request_of(&a.label).is_some_and(|(op, _)| op == operation)
        });
        if let Some(applied) = applied {
            if answer.outcome.result != applied.outcome.result {
                violations.push(violation(
                    8,
                    Some(operation),
                    vec![applied.seq, answer.seq],
                    format!(
                        "{:?} replayed a different business result than {:?} applied",
                        answer.label, applied.label
                    ),
                ));
            }
        }
    }
    violations
}

/// O9: no outcome names an effect of another tenant.
fn tenant_isolation(facts: &Facts<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    for answer in &facts.answers {
        let (Some((operation, tenant)), Some(reference)) =
            (facts.request_of(&answer.label), answer.outcome.effect_reference.as_ref())
        else {
            continue;
        };
        if let Some(foreign) =
            facts.evidence.ledger.iter().find(|e| &e.effect_reference == reference && &e.tenant != tenant)
        {
            violations.push(violation(
                9,
                Some(operation),
                vec![facts.position(foreign), answer.seq],
                format!(
                    "{:?} for tenant {tenant} revealed {reference}, an effect of tenant {}",
                    answer.label, foreign.tenant
                ),
            ));
        }
    }
    violations
}

/// O10: at most one job accepted per operation.
fn single_job(facts: &Facts<'_>) -> Vec<Violation> {
    let mut jobs: BTreeMap<&str, Vec<&Effect>> = BTreeMap::new();
    for effect in facts.business_effects().filter(|e| e.kind == EffectKind::JobAccepted) {
        if let Some(origin) = &effect.origin {
            jobs.entry(origin).or_default().push(effect);
        }
    }
    jobs.into_iter()
        .filter(|(_, effects)| effects.len() > 1)
        .map(|(operation, effects)| {
            violation(
                10,
                Some(operation),
                effects.iter().map(|e| facts.position(e)).collect(),
                format!(
                    "the downstream accepted {} jobs for one operation ({})",
                    effects.len(),
                    effects.iter().map(|e| e.effect_reference.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )
        })
        .collect()
}

/// O11: no absolute update applies against a newer version than the one it was based on.
fn no_stale_overwrite(facts: &Facts<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    for effect in facts.business_effects().filter(|e| e.kind == EffectKind::TicketStatusChanged) {
        let (Some(origin), Some(versions)) = (&effect.origin, effect.versions) else { continue };
        let Some(based_on) =
            facts.calls.iter().find(|c| &c.operation == origin).and_then(|c| c.expected_version)
        else {
            continue;
        };
        if versions.from != based_on {
            violations.push(violation(
                11,
                Some(origin),
                vec![facts.position(effect)],
                format!(
                    "a status change was applied to {} at version {} though the update was based on version {based_on}",
                    effect.effect_reference, versions.from
                ),
            ));
        }
    }
    violations
}
