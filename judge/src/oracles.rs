//! The oracles O1..O12 of MATRIX.md and the liveness oracle O13: independent checks over a
//! run's history and the downstream's ledger. Effects are the ones the harness saw the downstream commit (checked
//! against the ledger at the end), and each belongs to the operation whose request made it
//! ([`crate::attribution`]); what an executor *says* is only ever checked against them, never
//! counted. `docs/oracles.md` defines each oracle and names the behaviours only it can see.

use std::collections::{BTreeMap, BTreeSet};

use fake_downstream::{Disposition, Effect, EffectKind};
use protocol::{ContractSet, NextAction, Outcome, OutcomeStatus, ReasonCode};
pub use reports::Violation;
use serde_json::Value;

use crate::attribution::{tool_effect_kind, Attribution, RequestClass};
use crate::history::{Event, EventKind};
use crate::text::{self, quoted};

/// The oracles, by id and name, in order.
pub const ORACLES: [(&str, &str); 13] = [
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
    ("O12", "no_disowned_effect"),
    ("O13", "resolves_when_it_can"),
];

/// The label prefix of the final poll the runner makes for each operation after settling.
pub const FINAL_POLL_PREFIX: &str = "final-poll:";

/// What the oracles read.
#[derive(Debug)]
pub struct Evidence<'a> {
    /// The ordered history (with every effect as it was committed).
    pub history: &'a [Event],
    /// The downstream's ledger at the end, to check the history against.
    pub ledger: &'a [Effect],
    /// The contracts of the run (effect kinds, capabilities, retention).
    pub contracts: &'a ContractSet,
    /// Whether every request an executor sent carries the tag of the work it was doing (the
    /// simulation tags each task). The process world sees only what a process serves when it
    /// sends: a completion notice sent while it serves nothing, or several things, has no tag,
    /// and the harness cannot tell whose it is.
    pub tags_complete: bool,
    /// Whether the history holds every store commit the executors made (`StoreCommitted`: the
    /// simulation's store gate sees each). A process's store is its own: a claim taken over
    /// there shows only by the new owner's first downstream request, if it sends one.
    pub store_seen: bool,
}

/// What the oracles found: the violations, and which oracles had something to judge.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judgement {
    /// Every violation, in oracle order, then history order.
    pub violations: Vec<Violation>,
    /// The oracles (`O1`..) that had something to judge in this run: an effect to count, a
    /// success claim to check, a changed request, a revocation, ...
    pub exercised: BTreeSet<&'static str>,
    /// What the oracles could not decide, and why (the run is then `unknown` unless something
    /// else failed): a completion notice the harness could not tie to an operation, in a world
    /// whose tags are not complete ([`Evidence::tags_complete`]).
    pub undecided: Vec<String>,
    /// The rules that had something to judge but could not judge it here, each said in a
    /// sentence ([`O13_FINAL_NOT_POLLED`]): a report that lists an oracle among those that
    /// judged says which of its rules did not.
    pub not_judged: BTreeSet<&'static str>,
}

/// O13's rule on the final state of an operation the executor could resolve, where the server
/// is never polled: nothing asks it what the operation came to.
pub const O13_FINAL_NOT_POLLED: &str = "O13's rule that an operation the executor could resolve ends resolved (the server serves no replaylab.poll, so nothing asks it what the operation came to)";

/// A call as the agent sent it.
#[derive(Debug, Clone)]
struct CallFact {
    seq: u64,
    at_ms: u64,
    label: String,
    operation: String,
    actor: String,
    tool: String,
    tool_version: String,
    fingerprint: Option<String>,
    expected_version: Option<u64>,
    content: Option<String>,
}

/// An answer from a worker to a labelled request.
#[derive(Debug, Clone)]
struct AnswerFact {
    seq: u64,
    at_ms: u64,
    label: String,
    outcome: Outcome,
    /// A black-box answer without an outcome: a success claim naming nothing.
    bare: bool,
}

/// A business effect as it was committed, with its operation.
#[derive(Debug, Clone)]
struct EffectFact {
    /// History position of its `effect` event.
    position: u64,
    effect: Effect,
    operation: Option<String>,
    /// History position at which the request that made it left its worker.
    sent_at: Option<u64>,
}

/// A downstream request a worker sent, attributed.
#[derive(Debug, Clone)]
struct SentFact {
    seq: u64,
    operation: Option<String>,
    class: RequestClass,
    serving: Option<String>,
}

/// The facts the oracles share, drawn once from the evidence.
struct Facts<'a> {
    evidence: &'a Evidence<'a>,
    calls: Vec<CallFact>,
    /// label -> (operation, tenant)
    requests: BTreeMap<String, (String, String)>,
    /// label -> the actor a call, poll or reconciliation was made by.
    request_actors: BTreeMap<String, String>,
    answers: Vec<AnswerFact>,
    /// Business effects (human edits are not an operation's effects), as committed.
    effects: Vec<EffectFact>,
    /// Every effect seen committed, human edits included.
    observed: Vec<Effect>,
    /// (history seq, operation, references, whether it was a read) of receipts an executor
    /// saw: answers to state-changing requests, receipt lookups and reads, and completion
    /// webhooks. A read counts only for an operation that creates (see [`Facts::shows`]).
    receipts: Vec<(u64, Option<String>, Vec<String>, bool)>,
    /// (operation, ticket) of updates the downstream found already done (`unchanged`).
    unchanged: Vec<(Option<String>, String)>,
    sent: Vec<SentFact>,
    revocations: Vec<(u64, String, Option<String>)>,
    settled: bool,
    /// The world settled and the harness polled no operation: the server serves no
    /// `replaylab.poll` (the process world), so its last answers are its final word.
    never_polled: bool,
    attribution: Attribution,
    /// Labels of the agent requests a worker acted on: answered, or served by a store call or
    /// a downstream request (one held at a pause point included).
    acted_on: BTreeSet<String>,
    /// (tenant, operation key) of every reconciliation entry an executor filed for people.
    handed_over: BTreeSet<(String, String)>,
    /// When each agent request (call, poll, reconcile) was sent: label -> (seq, is a call).
    asked: BTreeMap<String, (u64, bool)>,
    /// Downstream requests by id: whether each got a clean answer (below 500, no fault fired).
    clean: BTreeMap<String, bool>,
    /// When each agent request was over for the agent (answered, or given up on): label ->
    /// the position of the first such event.
    concluded: BTreeMap<String, u64>,
}

impl<'a> Facts<'a> {
    fn new(evidence: &'a Evidence<'a>) -> Self {
        let attribution = Attribution::build(evidence.history);
        let mut facts = Facts {
            evidence,
            calls: Vec::new(),
            requests: BTreeMap::new(),
            request_actors: BTreeMap::new(),
            answers: Vec::new(),
            effects: Vec::new(),
            observed: Vec::new(),
            receipts: Vec::new(),
            unchanged: Vec::new(),
            sent: Vec::new(),
            revocations: Vec::new(),
            settled: false,
            never_polled: false,
            attribution: Attribution::default(),
            acted_on: BTreeSet::new(),
            handed_over: BTreeSet::new(),
            asked: BTreeMap::new(),
            clean: BTreeMap::new(),
            concluded: BTreeMap::new(),
        };
        let mut sent_at: BTreeMap<&str, u64> = BTreeMap::new();
        // The calls each worker is serving (received, neither answered nor given up on), with
        // their operations.
        let mut serving: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
        let mut call_operations: BTreeMap<&str, &str> = BTreeMap::new();
        for event in evidence.history {
            match &event.kind {
                EventKind::CallSent { label, operation, .. } => {
                    call_operations.insert(label, operation);
                }
                EventKind::CallReceived { label, worker } => {
                    if let Some(operation) = call_operations.get(label.as_str()) {
                        serving.entry(worker).or_default().push((label, operation));
                    }
                }
                EventKind::Answered { label, .. } | EventKind::AgentGotNoAnswer { label, .. } => {
                    for calls in serving.values_mut() {
                        calls.retain(|(served, _)| served != label);
                    }
                }
                // A worker held at a downstream request carrying an operation's content, while
                // it served one call of that operation, acted on that call.
                EventKind::Paused { worker, operations, .. } => {
                    let held: Vec<&str> = serving
                        .get(worker.as_str())
                        .into_iter()
                        .flatten()
                        .filter(|(_, operation)| operations.iter().any(|held| held == operation))
                        .map(|(label, _)| *label)
                        .collect();
                    if let [label] = held[..] {
                        facts.acted_on.insert(label.to_owned());
                    }
                }
                _ => {}
            }
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
                    content,
                    ..
                } => {
                    facts.requests.insert(label.clone(), (operation.clone(), tenant.clone()));
                    facts.request_actors.insert(label.clone(), actor.clone());
                    facts.asked.insert(label.clone(), (event.seq, true));
                    facts.calls.push(CallFact {
                        seq: event.seq,
                        at_ms: event.at_ms,
                        label: label.clone(),
                        operation: operation.clone(),
                        actor: actor.clone(),
                        tool: tool.clone(),
                        tool_version: tool_version.clone(),
                        fingerprint: fingerprint.clone(),
                        expected_version: *expected_version,
                        content: content.clone(),
                    });
                }
                EventKind::OperationQuery { label, operation, tenant, actor, .. } => {
                    facts.requests.insert(label.clone(), (operation.clone(), tenant.clone()));
                    facts.request_actors.insert(label.clone(), actor.clone());
                    facts.asked.insert(label.clone(), (event.seq, false));
                }
                EventKind::StoreCommitted { serving: Some(label), .. } => {
                    facts.acted_on.insert(label.clone());
                }
                EventKind::AgentGotNoAnswer { label, .. } => {
                    facts.concluded.entry(label.clone()).or_insert(event.seq);
                }
                EventKind::Answered { label, outcome, bare, .. } => {
                    facts.concluded.entry(label.clone()).or_insert(event.seq);
                    facts.acted_on.insert(label.clone());
                    facts.answers.push(AnswerFact {
                        seq: event.seq,
                        at_ms: event.at_ms,
                        label: label.clone(),
                        outcome: outcome.clone(),
                        bare: *bare,
                    });
                }
                EventKind::Effect { effect } => {
                    facts.observed.push(effect.clone());
                    if effect.kind != EffectKind::TicketEditedByHuman {
                        facts.effects.push(EffectFact {
                            position: event.seq,
                            effect: effect.clone(),
                            operation: attribution.effect(effect.seq).map(str::to_owned),
                            sent_at: effect.request_id.as_deref().and_then(|id| sent_at.get(id).copied()),
                        });
                    }
                }
                EventKind::DownstreamSent { request_id, origin, serving, method, path, .. } => {
                    sent_at.insert(request_id, event.seq);
                    // Clean until an answer says otherwise; no answer at all is not clean.
                    facts.clean.insert(request_id.clone(), false);
                    if let Some(label) = serving {
                        facts.acted_on.insert(label.clone());
                    }
                    let attributed = attribution.request(request_id);
                    facts.sent.push(SentFact {
                        seq: event.seq,
                        operation: attributed.map_or_else(|| origin.clone(), |a| a.operation.clone()),
                        class: attributed.map_or_else(|| RequestClass::of(method, path), |a| a.class),
                        serving: serving.clone(),
                    });
                }
                EventKind::DownstreamAnswered { request_id, origin, request, status, references, .. } => {
                    if let Some(clean) = facts.clean.get_mut(request_id) {
                        *clean = *status < 500;
                    }
                    let attributed = attribution.request(request_id);
                    let (method, path) = request.split_once(' ').unwrap_or((request.as_str(), ""));
                    let class = attributed.map_or_else(|| RequestClass::of(method, path), |a| a.class);
                    let receipt = matches!(
                        class,
                        RequestClass::Change(_) | RequestClass::ReceiptLookup | RequestClass::Read
                    );
                    if receipt && (200..300).contains(status) {
                        let operation = attributed.map_or_else(|| origin.clone(), |a| a.operation.clone());
                        facts.receipts.push((
                            event.seq,
                            operation,
                            references.clone(),
                            class == RequestClass::Read,
                        ));
                    }
                }
                EventKind::WebhookReceived { references, .. } => {
                    // The webhook reports a job: it is a receipt for the job's operation.
                    let operation = references.iter().find_map(|job| {
                        facts
                            .effects
                            .iter()
                            .find(|e| {
                                e.effect.kind == EffectKind::JobAccepted && &e.effect.effect_reference == job
                            })
                            .and_then(|e| e.operation.clone())
                    });
                    facts.receipts.push((event.seq, operation, references.clone(), false));
                }
                EventKind::DownstreamHandled {
                    request,
                    disposition: Disposition::Unchanged,
                    request_id: Some(request_id),
                    ..
                } => {
                    let ticket = request.rsplit('/').next().unwrap_or_default().to_owned();
                    let operation = attribution.request(request_id).and_then(|a| a.operation.clone());
                    facts.unchanged.push((operation, ticket));
                }
                EventKind::Revoked { actor, tool } => {
                    facts.revocations.push((event.seq, actor.clone(), tool.clone()))
                }
                EventKind::ReconciliationFiled { tenant, operation_key, .. } => {
                    facts.handed_over.insert((tenant.clone(), operation_key.clone()));
                }
                EventKind::SettleStarted => facts.settled = true,
                _ => {}
            }
        }
        facts.attribution = attribution;
        facts.never_polled = facts.settled
            && !evidence.history.iter().any(|event| {
                matches!(&event.kind, EventKind::OperationQuery { label, .. } if label.starts_with(FINAL_POLL_PREFIX))
            });
        facts
    }

    /// The operation's own effects (of any kind), in commit order.
    fn effects_of<'f>(&'f self, operation: &'f str) -> impl Iterator<Item = &'f EffectFact> + 'f {
        self.effects.iter().filter(move |e| e.operation.as_deref() == Some(operation))
    }

    fn request_of(&self, label: &str) -> Option<&(String, String)> {
        self.requests.get(label)
    }

    /// Whether the actor the request `label` was made by lost its permission for the
    /// operation's tool (its first call's) at some point: a refusal for that says nothing of
    /// the operation. (Calls of one operation can come from several actors; a poll is made by
    /// the operation's actor.)
    fn requester_revoked(&self, label: &str, operation: &str) -> bool {
        let tool = self.first_call_of(operation).map(|call| call.tool.as_str());
        self.request_actors.get(label).zip(tool).is_some_and(|(actor, tool)| self.revoked(actor, tool))
    }

    /// The operation's original call: its first valid call that the executor acted on
    /// (answered, or served by a store call or a downstream request) and did not refuse as
    /// invalid or unauthorized (such a call claims nothing), else its first call.
    fn first_call_of(&self, operation: &str) -> Option<&CallFact> {
        let refused = |call: &&CallFact| {
            self.answer_to(&call.label).is_some_and(|a| {
                a.outcome.status == OutcomeStatus::Rejected
                    && matches!(a.outcome.reason, Some(ReasonCode::InvalidRequest | ReasonCode::Unauthorized))
            })
        };
        let mut calls = self.calls.iter().filter(|call| call.operation == operation);
        calls
            .clone()
            .find(|call| call.fingerprint.is_some() && self.acted_on.contains(&call.label) && !refused(call))
            .or_else(|| calls.next())
    }

    /// The effect kind of the operation's own effect: its first call's tool's.
    fn kind_of(&self, operation: &str) -> Option<EffectKind> {
        self.first_call_of(operation).and_then(|call| tool_effect_kind(&call.tool))
    }

    /// The operation's own effects: of its tool's kind (all of them when the tool is unknown).
    fn own_effects<'f>(&'f self, operation: &'f str) -> impl Iterator<Item = &'f EffectFact> + 'f {
        let kind = self.kind_of(operation);
        self.effects_of(operation).filter(move |e| kind.is_none_or(|kind| e.effect.kind == kind))
    }

    fn answer_to(&self, label: &str) -> Option<&AnswerFact> {
        self.answers.iter().find(|answer| answer.label == label)
    }

    /// Whether an answer carrying `reference` (to a state-changing request or a receipt
    /// lookup) reached a worker that was not killed afterwards: the executor holds the proof.
    /// Whether an answer to a request of `class` for `operation` that names an effect is a
    /// receipt for it: an answer to a state-changing request or a receipt lookup always; a read
    /// that names a created object (a vendor's search by the operation's metadata) for an
    /// operation that creates; a read of an updated object never (it shows the object, not
    /// that this update was made).
    fn shows(&self, operation: &str, class: RequestClass) -> bool {
        match class {
            RequestClass::Change(_) | RequestClass::ReceiptLookup => true,
            RequestClass::Read => self.kind_of(operation) != Some(EffectKind::TicketStatusChanged),
            RequestClass::Other => false,
        }
    }

    fn told(&self, operation: &str, reference: &str) -> bool {
        let history = self.evidence.history;
        history.iter().enumerate().any(|(at, event)| match &event.kind {
            EventKind::DownstreamAnswered { worker, request_id, origin, request, status, references }
                if (200..300).contains(status) && references.iter().any(|r| r == reference) =>
            {
                let (method, path) = request.split_once(' ').unwrap_or((request.as_str(), ""));
                let attributed = self.attribution.request(request_id);
                let class = attributed.map_or_else(|| RequestClass::of(method, path), |a| a.class);
                let whose = attributed.map_or_else(|| origin.clone(), |a| a.operation.clone());
                whose.as_deref() == Some(operation)
                    && self.shows(operation, class)
                    && !history[at..].iter().any(|later| {
                        matches!(&later.kind, EventKind::Crashed { worker: crashed, .. } if crashed == worker)
                    })
            }
            _ => false,
        })
    }

    fn final_poll(&self, operation: &str) -> Option<&AnswerFact> {
        self.answer_to(&format!("{FINAL_POLL_PREFIX}{operation}"))
    }

    /// The last answer the agent got for `operation` (a call's, a poll's or a reconcile's).
    fn last_answer(&self, operation: &str) -> Option<&AnswerFact> {
        self.answers
            .iter()
            .filter(|answer| self.request_of(&answer.label).is_some_and(|(of, _)| of == operation))
            .max_by_key(|answer| answer.seq)
    }

    /// Whether the executor filed a reconciliation entry for `operation`: under its tenant and
    /// an operation key the executor's own answers for it named.
    fn handed_over(&self, operation: &str) -> bool {
        self.answers.iter().any(|answer| {
            let Some((answered, tenant)) = self.request_of(&answer.label) else { return false };
            answered == operation
                && answer
                    .outcome
                    .operation_key
                    .as_ref()
                    .is_some_and(|key| self.handed_over.contains(&(tenant.clone(), key.clone())))
        })
    }

    fn operations(&self) -> BTreeSet<&str> {
        self.calls.iter().map(|call| call.operation.as_str()).collect()
    }

    /// Answers that claim the effect exists, with their operation and tenant.
    fn success_claims(&self) -> impl Iterator<Item = (&AnswerFact, &(String, String))> {
        self.answers
            .iter()
            .filter(|answer| answer.outcome.status.claims_success())
            .filter_map(|answer| self.request_of(&answer.label).map(|request| (answer, request)))
    }

    /// Whether `actor` lost its permission for `tool` at some point.
    fn revoked(&self, actor: &str, tool: &str) -> bool {
        self.revocations
            .iter()
            .any(|(_, who, what)| who == actor && what.as_deref().is_none_or(|t| t == tool))
    }
}

/// Runs every oracle; the violations are in oracle order, then history order.
pub fn check(evidence: &Evidence<'_>) -> Vec<Violation> {
    judge(evidence).violations
}

/// Runs every oracle and says which had something to judge.
pub fn judge(evidence: &Evidence<'_>) -> Judgement {
    let facts = Facts::new(evidence);
    let mut judgement = Judgement::default();
    let oracles: [fn(&Facts<'_>, &mut Judgement); 13] = [
        single_effect,
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
        no_disowned_effect,
        resolves_when_it_can,
    ];
    for oracle in oracles {
        oracle(&facts, &mut judgement);
    }
    fold_duplicate_consequences(&mut judgement);
    judgement
}

/// A duplicate is one finding: an operation with more than one effect (O1) also has answers
/// whose result differs from one of its effects (O8), which are its consequences, not a second
/// defect. They are told in the O1 violation (its explanation, and their history positions),
/// and not reported on their own.
fn fold_duplicate_consequences(judgement: &mut Judgement) {
    let duplicated: BTreeSet<String> = judgement
        .violations
        .iter()
        .filter(|violation| violation.oracle == "O1")
        .filter_map(|violation| violation.operation.clone())
        .collect();
    if duplicated.is_empty() {
        return;
    }
    let (consequences, kept): (Vec<Violation>, Vec<Violation>) =
        std::mem::take(&mut judgement.violations).into_iter().partition(|violation| {
            violation.oracle == "O8" && violation.operation.as_ref().is_some_and(|op| duplicated.contains(op))
        });
    judgement.violations = kept;
    for duplicate in judgement.violations.iter_mut().filter(|violation| violation.oracle == "O1") {
        let mine: Vec<&Violation> =
            consequences.iter().filter(|consequence| consequence.operation == duplicate.operation).collect();
        if mine.is_empty() {
            continue;
        }
        let told: Vec<&str> = mine.iter().map(|consequence| consequence.explanation.as_str()).collect();
        duplicate.explanation.push_str(&format!("; as a consequence: {}", told.join("; ")));
        duplicate.positions.extend(mine.iter().flat_map(|consequence| consequence.positions.iter().copied()));
        duplicate.positions.sort_unstable();
        duplicate.positions.dedup();
    }
}

impl Judgement {
    fn exercise(&mut self, oracle: usize) {
        self.exercised.insert(ORACLES[oracle - 1].0);
    }

    fn violate(&mut self, oracle: usize, operation: Option<&str>, positions: Vec<u64>, explanation: String) {
        let (id, name) = ORACLES[oracle - 1];
        self.violations.push(Violation {
            oracle: id.to_owned(),
            name: name.to_owned(),
            operation: operation.map(str::to_owned),
            positions,
            explanation,
            line: None,
        });
    }
}

/// Whether `fact` is a message no operation could be found for, in a world whose tags are not
/// complete: a completion notice (its content is no call's) whose sender's tag is missing. The
/// harness cannot vouch for it either way.
fn untied_notice(facts: &Facts<'_>, fact: &EffectFact) -> bool {
    !facts.evidence.tags_complete && fact.operation.is_none() && fact.effect.kind == EffectKind::MessageSent
}

/// O1: per operation and effect kind, at most one effect (jobs are O10's). An effect no
/// operation can be found for is a violation too (the harness cannot vouch for it), and so is a
/// ledger at the end that differs from the effects the harness saw committed.
fn single_effect(facts: &Facts<'_>, judgement: &mut Judgement) {
    if let Some(difference) = ledger_difference(&facts.observed, facts.evidence.ledger) {
        judgement.violate(
            1,
            None,
            Vec::new(),
            format!(
                "the ledger at the end differs from the effects seen as they were committed: {difference}"
            ),
        );
    }
    let mut groups: BTreeMap<(&str, EffectKind), Vec<&EffectFact>> = BTreeMap::new();
    for fact in &facts.effects {
        judgement.exercise(1);
        match &fact.operation {
            Some(operation) if fact.effect.kind != EffectKind::JobAccepted => {
                groups.entry((operation, fact.effect.kind)).or_default().push(fact);
            }
            Some(_) => {}
            None if untied_notice(facts, fact) => judgement.undecided.push(format!(
                "O1 not decided: the harness could not tell which operation made {} {} (a request with no business content of a call, sent while its process served nothing or several things)",
                fact.effect.kind.as_str(),
                fact.effect.effect_reference
            )),
            None => judgement.violate(
                1,
                None,
                vec![fact.position],
                format!(
                    "the downstream made {} {} that no operation's request carried",
                    fact.effect.kind.as_str(),
                    fact.effect.effect_reference
                ),
            ),
        }
    }
    for ((operation, kind), effects) in groups {
        if effects.len() > 1 {
            let references: Vec<&str> = effects.iter().map(|e| e.effect.effect_reference.as_str()).collect();
            judgement.violate(
                1,
                Some(operation),
                effects.iter().map(|e| e.position).collect(),
                format!(
                    "one operation made {} {} effects in the ledger ({}), where at most one is allowed",
                    effects.len(),
                    kind.as_str(),
                    references.join(", ")
                ),
            );
        }
    }
}

/// The first difference between the effects seen committed and the final ledger.
fn ledger_difference(observed: &[Effect], ledger: &[Effect]) -> Option<String> {
    for (index, (seen, kept)) in observed.iter().zip(ledger).enumerate() {
        if seen != kept {
            return Some(format!(
                "entry {} was {} {} when committed and is {} {} now",
                index + 1,
                seen.kind.as_str(),
                seen.effect_reference,
                kept.kind.as_str(),
                kept.effect_reference
            ));
        }
    }
    (observed.len() != ledger.len())
        .then(|| format!("{} effects were committed, the ledger holds {}", observed.len(), ledger.len()))
}

/// O2: every applied/replayed outcome names an effect in the ledger of that tenant, made by
/// that operation, of the operation's own kind (an update: its own status change, or the
/// downstream's word that the ticket already had that status).
fn no_phantom_success(facts: &Facts<'_>, judgement: &mut Judgement) {
    for (answer, (operation, tenant)) in facts.success_claims() {
        judgement.exercise(2);
        let status = answer.outcome.status.as_str();
        if answer.bare {
            // A server that names no outcome claims only that the operation's effect exists;
            // where a tool map says where its answer names the effect, that effect must be the
            // operation's own.
            if facts.own_effects(operation).next().is_none() {
                judgement.violate(
                    2,
                    Some(operation),
                    vec![answer.seq],
                    format!(
                        "{} was answered as a success (isError false, no outcome), but the ledger has no effect made by this operation",
                        quoted(&answer.label)
                    ),
                );
            } else if let Some(reference) = &answer.outcome.effect_reference {
                if !facts.own_effects(operation).any(|e| &e.effect.effect_reference == reference) {
                    let own: Vec<&str> =
                        facts.own_effects(operation).map(|e| e.effect.effect_reference.as_str()).collect();
                    judgement.violate(
                        2,
                        Some(operation),
                        vec![answer.seq],
                        format!(
                            "{} was answered as a success naming {reference}, but the operation's effect is {}",
                            quoted(&answer.label),
                            own.join(", ")
                        ),
                    );
                }
            }
            continue;
        }
        let Some(reference) = &answer.outcome.effect_reference else {
            judgement.violate(
                2,
                Some(operation),
                vec![answer.seq],
                format!("{} was answered {status} without any effect reference", quoted(&answer.label)),
            );
            continue;
        };
        let kind = facts.kind_of(operation);
        let made = facts.effects_of(operation).any(|e| {
            &e.effect.effect_reference == reference
                && &e.effect.tenant == tenant
                && kind.is_none_or(|kind| e.effect.kind == kind)
        });
        let already_so = kind == Some(EffectKind::TicketStatusChanged)
            && facts
                .unchanged
                .iter()
                .any(|(op, ticket)| op.as_deref() == Some(operation) && ticket == reference);
        if !made && !already_so {
            let what = kind.map_or("effect", EffectKind::as_str);
            judgement.violate(
                2,
                Some(operation),
                vec![answer.seq],
                format!(
                    "{} was answered {status} with {reference}, but the ledger has no {what} {reference} made by this operation for this tenant",
                    quoted(&answer.label)
                ),
            );
        }
    }
}

/// O3: a request whose material content differs from the operation's original one is refused
/// (`rejected`, or `expired` once the key is past retention) and never causes an effect,
/// whether or not the original attempt committed anything. See [`original_calls`] for which
/// call is the original.
fn mismatch_no_effect(facts: &Facts<'_>, judgement: &mut Judgement) {
    let originals = original_calls(facts);
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for call in &facts.calls {
        let answer = facts.answer_to(&call.label);
        let Some(original) = originals.get(call.operation.as_str()).copied() else { continue };
        // Calls sent before the operation's first valid, acted-on call claimed nothing.
        if !seen.contains(call.operation.as_str()) && !qualifies(facts, call) {
            continue;
        }
        seen.insert(&call.operation);
        if call.label == original.label {
            continue;
        }
        let (Some(fingerprint), Some(original_fingerprint)) = (&call.fingerprint, &original.fingerprint)
        else {
            continue;
        };
        if fingerprint == original_fingerprint {
            continue;
        }
        judgement.exercise(3);
        // A newer version may replay the record when the older contract allows it, and only
        // for the same business request: a changed amount is another request in any version.
        let replay_allowed = original.tool_version != call.tool_version
            && call.content.is_some()
            && call.content == original.content
            && facts
                .evidence
                .contracts
                .get(&original.tool, &original.tool_version)
                .is_some_and(|contract| contract.replay_across_versions);
        if let Some(answer) = answer {
            // `expired` refuses too: past retention the key is a tombstone and nothing runs.
            // The same business request under a version allowed to replay the old one may be
            // replayed, or answered `in_flight` while the original is still being made.
            let acceptable =
                matches!(answer.outcome.status, OutcomeStatus::Rejected | OutcomeStatus::Expired)
                    || (replay_allowed
                        && matches!(
                            answer.outcome.status,
                            OutcomeStatus::Replayed | OutcomeStatus::InFlight
                        ));
            if !acceptable {
                judgement.violate(
                    3,
                    Some(&call.operation),
                    vec![call.seq, answer.seq],
                    format!(
                        "{} changed the material request of an existing operation (its original request: {}) but was answered {} instead of rejected",
                        quoted(&call.label),
                        quoted(&original.label),
                        answer.outcome.status.as_str()
                    ),
                );
            }
        }
        // An effect carrying the changed request's content (and not the original's) was made by
        // the changed request, whatever became of the first attempt.
        let Some(content) = &call.content else { continue };
        let carried: Vec<&EffectFact> = facts
            .effects
            .iter()
            .filter(|e| &e.effect.content_digest == content && original.content.as_ref() != Some(content))
            .filter(|e| e.sent_at.unwrap_or(e.position) > call.seq)
            .filter(|e| e.operation.as_deref().is_none_or(|op| op == call.operation))
            .collect();
        if !carried.is_empty() {
            judgement.violate(
                3,
                Some(&call.operation),
                std::iter::once(call.seq).chain(carried.iter().map(|e| e.position)).collect(),
                format!(
                    "the changed request {} was carried out: {} made from its content, under the key of {}",
                    quoted(&call.label),
                    carried.iter().map(|e| e.effect.effect_reference.as_str()).collect::<Vec<_>>().join(", "),
                    quoted(&original.label)
                ),
            );
        }
    }
}

/// Whether `call` can be an operation's original: valid (it has a fingerprint), acted on by
/// the executor (answered, or served by a store call or a downstream request: a call whose
/// worker died before doing anything stored nothing to differ from), and not refused as invalid
/// or unauthorized (such a call claims nothing).
fn qualifies(facts: &Facts<'_>, call: &CallFact) -> bool {
    let refused = facts.answer_to(&call.label).is_some_and(|a| {
        a.outcome.status == OutcomeStatus::Rejected
            && matches!(a.outcome.reason, Some(ReasonCode::InvalidRequest | ReasonCode::Unauthorized))
    });
    call.fingerprint.is_some() && !refused && facts.acted_on.contains(&call.label)
}

/// Each operation's original call, the one the others are compared with, decided from what
/// happened and not from send order alone. The candidates are its first qualifying call (see
/// [`qualifies`]) and every qualifying call sent before that one was over for the agent: calls
/// in flight together, any of which the executor may rightly claim first. Among them, the
/// original is the one whose content the operation's first own effect carries (the downstream
/// committed it); else the first the executor did not refuse as a changed request (its claim
/// won: whichever it took, every other must then be refused and never carried out); else the
/// first sent. A call sent after the first was over is never the original.
fn original_calls<'f>(facts: &'f Facts<'_>) -> BTreeMap<&'f str, &'f CallFact> {
    let mut originals = BTreeMap::new();
    for first in facts.calls.iter().filter(|call| qualifies(facts, call)) {
        if originals.contains_key(first.operation.as_str()) {
            continue;
        }
        let over = facts.concluded.get(&first.label).copied().unwrap_or(u64::MAX);
        let candidates: Vec<&CallFact> = facts
            .calls
            .iter()
            .filter(|call| call.operation == first.operation && call.seq < over && qualifies(facts, call))
            .collect();
        let committed = facts.own_effects(&first.operation).next().map(|e| &e.effect.content_digest);
        let carried = committed.and_then(|content| {
            candidates.iter().copied().find(|call| call.content.as_ref() == Some(content))
        });
        let claimed = || {
            candidates.iter().copied().find(|call| {
                facts.answer_to(&call.label).is_none_or(|a| {
                    !(a.outcome.status == OutcomeStatus::Rejected
                        && matches!(
                            a.outcome.reason,
                            Some(
                                ReasonCode::IdempotencyKeyReusedWithDifferentRequest
                                    | ReasonCode::ToolVersionChanged
                            )
                        ))
                })
            })
        };
        originals.insert(first.operation.as_str(), carried.or_else(claimed).unwrap_or(first));
    }
    originals
}

/// O4: no applied/replayed unless an executor saw a receipt for that effect in that
/// operation before answering: an answer to the state-changing request itself, a receipt
/// lookup, or the downstream's completion webhook. A plain read of the object is no receipt.
fn no_success_from_ambiguity(facts: &Facts<'_>, judgement: &mut Judgement) {
    for (answer, (operation, _)) in facts.success_claims() {
        let Some(reference) = answer.outcome.effect_reference.as_ref() else { continue };
        judgement.exercise(4);
        let seen = facts.receipts.iter().any(|(seq, origin, references, read)| {
            *seq < answer.seq
                && origin.as_deref() == Some(operation.as_str())
                && references.contains(reference)
                && (!read || facts.shows(operation, RequestClass::Read))
        });
        if !seen {
            judgement.violate(
                4,
                Some(operation),
                vec![answer.seq],
                format!(
                    "{} was answered {} with {reference}, but no executor had seen a receipt for it in this operation (an answer to the change itself, a receipt lookup, or a read that names what it created)",
                    quoted(&answer.label),
                    answer.outcome.status.as_str()
                ),
            );
        }
    }
}

/// O5: no effect for an actor whose request left the worker after its permission was
/// revoked, and calls made after the revocation are answered `rejected` (not replayed, not
/// in_flight, not unknown).
fn authorization(facts: &Facts<'_>, judgement: &mut Judgement) {
    for (revoked_at, actor, tool) in &facts.revocations {
        let covers =
            |call: &CallFact| &call.actor == actor && tool.as_ref().is_none_or(|tool| tool == &call.tool);
        // An operation is its first call's: a later call with another tool under the same key
        // is a changed request (O3's business), and never owns the operation's effects.
        let covered: BTreeSet<&str> = facts
            .calls
            .iter()
            .filter(|call| facts.first_call_of(&call.operation).is_some_and(|first| first.seq == call.seq))
            .filter(|call| covers(call))
            .map(|call| call.operation.as_str())
            .collect();
        for operation in &covered {
            for effect in facts.own_effects(operation) {
                judgement.exercise(5);
                // The executor's last chance to check was when the request left the worker: a
                // request already on the wire when the permission was revoked is no violation.
                if effect.sent_at.unwrap_or(effect.position) > *revoked_at {
                    judgement.violate(
                        5,
                        Some(operation),
                        vec![*revoked_at, effect.position],
                        format!(
                            "{} was made for {actor} by a request sent after its permission was revoked",
                            effect.effect.effect_reference
                        ),
                    );
                }
            }
        }
        for call in facts.calls.iter().filter(|call| call.seq > *revoked_at && covers(call)) {
            judgement.exercise(5);
            if let Some(answer) = facts.answer_to(&call.label) {
                if answer.outcome.status != OutcomeStatus::Rejected {
                    judgement.violate(
                        5,
                        Some(&call.operation),
                        vec![*revoked_at, call.seq, answer.seq],
                        format!(
                            "{} by {actor} came after the revocation but was answered {} instead of rejected",
                            quoted(&call.label),
                            answer.outcome.status.as_str()
                        ),
                    );
                }
            }
        }
    }
}

/// O6: once faults heal and the world settles, every operation is terminal at the harness's
/// final poll, or `unknown` pointing at reconciliation after the executor itself looked the
/// effect up downstream (a receipt lookup or a read, sent after the operation's last
/// state-changing request and not while serving that final poll); `unknown` without a lookup
/// is accepted only where the downstream offers none (no receipt lookup, keys ignored).
fn no_orphan_pending(facts: &Facts<'_>, judgement: &mut Judgement) {
    in_flight_names_a_live_owner(facts, judgement);
    if !facts.settled {
        // The run stopped at a limit before the world could settle: that is its verdict.
        return;
    }
    for operation in facts.operations() {
        let label = format!("{FINAL_POLL_PREFIX}{operation}");
        if !facts.asked.contains_key(&label) {
            // An executor that cannot be polled (a black-box server without `replaylab.poll`)
            // was not asked: this oracle cannot judge it.
            continue;
        }
        judgement.exercise(6);
        let Some(answer) = facts.answer_to(&label) else {
            judgement.violate(
                6,
                Some(operation),
                Vec::new(),
                "after the world settled, the final poll of the operation got no answer".into(),
            );
            continue;
        };
        let outcome = &answer.outcome;
        let problem = match outcome.status {
            OutcomeStatus::InFlight => Some("still in_flight".to_owned()),
            OutcomeStatus::Unknown if outcome.next_action != NextAction::Reconcile => Some(format!(
                "unknown with next action {} instead of reconcile",
                outcome.next_action.as_str()
            )),
            OutcomeStatus::Unknown
                if !looked_up(facts, operation, &label) && can_look_up(facts, operation) =>
            {
                Some(
                    "unknown, and the executor never looked the effect up downstream after its last attempt"
                        .into(),
                )
            }
            _ => None,
        };
        if let Some(problem) = problem {
            judgement.violate(
                6,
                Some(operation),
                vec![answer.seq],
                format!("after faults healed and the world settled, the operation is {problem}"),
            );
        }
    }
}

/// O6, answer by answer: `in_flight` says someone is carrying the operation out ("a pending
/// record owned by another live worker returns in_flight"; an expired lease enters recovery).
/// For a tool the executor carries out itself (not queued, not a delayed job), an `in_flight`
/// answer is an orphan presented as progress when, at the answer, no claim on the operation
/// could still be live (nothing was done for it, by any other agent request or by work no
/// agent request waited for, within its contract's lease) and no downstream request for it
/// was still open (sent, and neither answered nor failed). Where tags are not complete, the
/// answering worker's own requests during the call count as possibly another task's; where
/// the store is not seen, a request for the operation within the lease after the answer
/// counts too (a take-over made just before it shows by its first request).
fn in_flight_names_a_live_owner(facts: &Facts<'_>, judgement: &mut Judgement) {
    let history = facts.evidence.history;
    for answer in facts.answers.iter().filter(|a| a.outcome.status == OutcomeStatus::InFlight) {
        if answer.label.starts_with(FINAL_POLL_PREFIX) {
            continue;
        }
        let Some((operation, _)) = facts.request_of(&answer.label) else { continue };
        let Some(first) = facts.first_call_of(operation) else { continue };
        let Some(contract) = facts.evidence.contracts.get(&first.tool, &first.tool_version) else { continue };
        if contract.execution != protocol::Execution::Direct {
            continue;
        }
        judgement.exercise(6);
        let since_ms = answer.at_ms.saturating_sub(contract.lease.as_millis() as u64);
        let before = &history[..history.iter().position(|e| e.seq == answer.seq).unwrap_or(history.len())];
        let ours = |label: &str| facts.request_of(label).is_some_and(|(other, _)| other == operation);
        let theirs = |label: &Option<String>| match label {
            // Where tags are not complete (the process world tags a request with what its worker
            // serves now), a request tagged with this very answer may be the same worker's work
            // no agent request waits for, running beside the call (its own sweep, which took the
            // claim over): it may be the live owner, and the harness cannot tell.
            Some(label) if label == &answer.label => !facts.evidence.tags_complete,
            Some(label) => ours(label),
            // Work no agent request waits for (a sweep, a queue delivery) may be on it.
            None => true,
        };
        let mut open: BTreeSet<&str> = BTreeSet::new();
        let mut live = false;
        for event in before {
            match &event.kind {
                EventKind::DownstreamSent { request_id, origin, serving, .. } => {
                    let whose = facts.attribution.request(request_id).and_then(|a| a.operation.clone());
                    let mine = whose.or_else(|| origin.clone()).is_none_or(|whose| whose == *operation);
                    if mine {
                        open.insert(request_id);
                        live |= event.at_ms >= since_ms && theirs(serving);
                    }
                }
                EventKind::DownstreamAnswered { request_id, .. }
                | EventKind::DownstreamFailed { request_id, .. } => {
                    open.remove(request_id.as_str());
                }
                EventKind::CallReceived { label, .. } if label != &answer.label && ours(label) => {
                    live |= event.at_ms >= since_ms;
                }
                EventKind::StoreCommitted { serving, .. } => {
                    live |= event.at_ms >= since_ms && theirs(serving)
                }
                _ => {}
            }
        }
        if !facts.evidence.store_seen && !live {
            // A take-over is a store write the harness does not see here: the new owner shows by
            // its first request for the operation, which may come just after the answer.
            let answered_at = before.len();
            let until_ms = answer.at_ms.saturating_add(contract.lease.as_millis() as u64);
            live = history[answered_at..].iter().take_while(|event| event.at_ms <= until_ms).any(|event| {
                matches!(&event.kind, EventKind::DownstreamSent { request_id, .. }
                    if facts.attribution.request(request_id).and_then(|a| a.operation.as_deref()) == Some(operation.as_str()))
            });
        }
        if live || !open.is_empty() {
            continue;
        }
        judgement.violate(
            6,
            Some(operation),
            vec![answer.seq],
            format!(
                "{} was answered in_flight, but nobody could be carrying the operation out: nothing was done \
                 for it by anyone else within its {} ms lease, and no downstream request for it was open",
                quoted(&answer.label),
                contract.lease.as_millis()
            ),
        );
    }
}

/// Whether the executor looked the operation's effect up after its last state-changing
/// request, other than while serving the harness's final poll `final_poll`. A lookup no
/// operation can be found for (sent by work serving no operation, for a key no request
/// carried) counts for an operation whose key the harness never saw.
fn looked_up(facts: &Facts<'_>, operation: &str, final_poll: &str) -> bool {
    let keyless = !facts.attribution.keyed(operation);
    let changes = |sent: &&SentFact| sent.operation.as_deref() == Some(operation);
    let mine = |sent: &&SentFact| {
        sent.operation.as_deref() == Some(operation) || (keyless && sent.operation.is_none())
    };
    let last_change = facts
        .sent
        .iter()
        .filter(changes)
        .filter(|sent| sent.class.effect_kind().is_some())
        .map(|s| s.seq)
        .max();
    facts.sent.iter().filter(mine).any(|sent| {
        sent.class.is_lookup()
            && last_change.is_none_or(|last| sent.seq > last)
            && sent.serving.as_deref() != Some(final_poll)
    })
}

/// Whether the downstream gives the executor any way to look the operation's effect up: a
/// receipt lookup, or a key it honours (a resend with it is answered from the first request).
fn can_look_up(facts: &Facts<'_>, operation: &str) -> bool {
    let Some(call) = facts.first_call_of(operation) else { return true };
    facts
        .evidence
        .contracts
        .get(&call.tool, &call.tool_version)
        .is_none_or(|contract| contract.downstream.receipt_lookup || contract.downstream.honours_key)
}

/// O13 (liveness): once faults healed and the world settled, an operation the executor acted
/// on and *can* resolve is resolved. It can when a resend is safe (the downstream honours its
/// key) or when its effect exists and can be found (a receipt lookup finds it, or it is a job
/// whose reference reached the executor in an answer, so that it can poll it), or when the
/// executor was told (an answer carrying the effect's receipt reached a worker that kept
/// running):
/// then the final poll answers `applied`, `replayed` or `rejected` (or `expired`, once
/// retention has run out since its first call). Where neither holds, a receipt lookup that
/// finds nothing does not prove that a request still on its way will not commit, so `unknown`
/// with `reconcile` stays acceptable (O6 asks that the executor looked).
fn resolves_when_it_can(facts: &Facts<'_>, judgement: &mut Judgement) {
    answers_what_it_can_find_out(facts, judgement);
    if !facts.settled {
        return;
    }
    for operation in facts.operations() {
        let mut calls = facts.calls.iter().filter(|call| call.operation == operation);
        if !calls.clone().any(|call| facts.acted_on.contains(&call.label)) {
            continue;
        }
        let Some(first) = facts.first_call_of(operation) else { continue };
        let Some(contract) = facts.evidence.contracts.get(&first.tool, &first.tool_version) else {
            continue;
        };
        let effects: Vec<&str> =
            facts.effects_of(operation).map(|e| e.effect.effect_reference.as_str()).collect();
        // A job whose reference reached the executor in an answer can be polled. A completion
        // webhook alone does not count: without the operation's key in it (a downstream that
        // ignores keys keeps none) the executor cannot tell whose job it is.
        let job_known = effects.iter().any(|reference| {
            facts.evidence.history.iter().any(|event| {
                matches!(&event.kind, EventKind::DownstreamAnswered { references, .. }
                    if references.iter().any(|r| r == reference))
            })
        });
        // The effect's receipt reached a worker that kept running: the executor was told.
        let told = effects.iter().any(|reference| facts.told(operation, reference));
        let Some(means) = means_to_find_out(contract, !effects.is_empty(), job_known, told) else {
            // No way to find out: `unknown` is the honest answer, but only handed over to people.
            // A server that is never polled (it serves no `replaylab.poll`) said its last word
            // to the agent in its last answer for the operation: that is what the hand-over is
            // judged on (nothing it can do later settles what it cannot find out).
            let last = || if facts.never_polled { facts.last_answer(operation) } else { None };
            let Some(answer) = facts.final_poll(operation).or_else(last) else { continue };
            if answer.outcome.status != OutcomeStatus::Unknown {
                continue;
            }
            judgement.exercise(13);
            if !facts.handed_over(operation) {
                judgement.violate(
                    13,
                    Some(operation),
                    vec![answer.seq],
                    "the operation was left unknown, where the downstream offers no way to find out, \
                     but no reconciliation entry was filed for it: nobody will settle it"
                        .to_owned(),
                );
            }
            continue;
        };
        // No answer at all is O6's to report; a server that is never polled is never asked.
        let Some(answer) = facts.final_poll(operation) else {
            if facts.never_polled {
                judgement.not_judged.insert(O13_FINAL_NOT_POLLED);
            }
            continue;
        };
        judgement.exercise(13);
        let first_call_ms = calls.by_ref().map(|call| call.at_ms).min().unwrap_or(first.at_ms);
        let resolved = match answer.outcome.status {
            OutcomeStatus::Applied | OutcomeStatus::Replayed | OutcomeStatus::Rejected => true,
            OutcomeStatus::Expired => {
                answer.at_ms.saturating_sub(first_call_ms) >= contract.retention.as_millis() as u64
            }
            OutcomeStatus::InFlight | OutcomeStatus::Unknown => false,
        };
        if !resolved {
            judgement.violate(
                13,
                Some(operation),
                vec![answer.seq],
                format!(
                    "after faults healed and the world settled, the operation is still {}, though {means}: \
                     the executor could have found out",
                    answer.outcome.status.as_str()
                ),
            );
        }
    }
}

/// O13, answer by answer: an `unknown` answer to a call, poll or reconcile whose own downstream
/// requests were all answered cleanly (below 500, no fault fired on them), while no other
/// request for the operation was being served, is a violation when the executor could have
/// found out then: for a call, the downstream honours the key (a resend is answered from the
/// first request); for any of them, the operation's effect was already in the ledger when the
/// request was sent and the downstream's receipt lookup finds it.
fn answers_what_it_can_find_out(facts: &Facts<'_>, judgement: &mut Judgement) {
    let faulted: BTreeSet<&str> = facts
        .evidence
        .history
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::DownstreamHandled { fault: Some(_), request_id: Some(id), .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    // (label, request id) of every downstream request sent while serving an agent request;
    // the seq of every request sent by work no agent request was waiting for; when each agent
    // request ended for the agent (answered, or given up on); and the seqs of the work done
    // serving each (which may go on after the agent gave up).
    let mut served: Vec<(&str, &str)> = Vec::new();
    let mut unlabelled: Vec<(u64, Option<&str>)> = Vec::new();
    let mut ended: BTreeMap<&str, u64> = BTreeMap::new();
    let mut activity: Vec<(&str, u64)> = Vec::new();
    for event in facts.evidence.history {
        match &event.kind {
            EventKind::DownstreamSent { request_id, serving, origin, .. } => match serving {
                Some(label) => {
                    served.push((label, request_id));
                    activity.push((label, event.seq));
                }
                None => unlabelled.push((event.seq, origin.as_deref())),
            },
            EventKind::StoreCommitted { serving: Some(label), .. } => activity.push((label, event.seq)),
            EventKind::Answered { label, .. }
            | EventKind::AgentReceived { label }
            | EventKind::AgentGotNoAnswer { label, .. } => {
                ended.entry(label).or_insert(event.seq);
            }
            _ => {}
        }
    }
    let clean = |id: &str| facts.clean.get(id).copied().unwrap_or(false) && !faulted.contains(id);
    for answer in facts.answers.iter().filter(|a| a.outcome.status == OutcomeStatus::Unknown) {
        if answer.label.starts_with(FINAL_POLL_PREFIX) {
            continue;
        }
        let (Some((operation, _)), Some(&(asked_seq, is_call))) =
            (facts.request_of(&answer.label), facts.asked.get(&answer.label))
        else {
            continue;
        };
        let Some(first) = facts.first_call_of(operation) else { continue };
        let Some(contract) = facts.evidence.contracts.get(&first.tool, &first.tool_version) else { continue };
        // An actor that lost its permission is answered by O5's rules, not by what can be found.
        let call = facts.calls.iter().find(|c| c.label == answer.label);
        let revoked = facts.revocations.iter().any(|(seq, actor, tool)| {
            *seq < answer.seq
                && call.is_none_or(|c| &c.actor == actor && tool.as_ref().is_none_or(|tool| tool == &c.tool))
        });
        if revoked {
            continue;
        }
        // Only a call that asks for the operation's own request can resend it.
        let same_request = is_call
            && facts.calls.iter().any(|c| c.label == answer.label && c.fingerprint == first.fingerprint);
        let effect_known = contract.downstream.receipt_lookup
            && facts.own_effects(operation).any(|e| e.position < asked_seq);
        let means = if same_request && contract.downstream.honours_key {
            "the downstream honours the key (a resend is answered from the first request)"
        } else if effect_known {
            "the effect was in the ledger and the downstream's receipt lookup finds it"
        } else {
            continue;
        };
        if !served.iter().filter(|(label, _)| *label == answer.label).all(|(_, id)| clean(id)) {
            continue;
        }
        // Another request for the operation being served meanwhile (by another worker, or by
        // work no agent request waits for) may hold the claim: `unknown` may be its doing.
        let within = |seq: u64| seq > asked_seq && seq < answer.seq;
        let busy = |label: &str| {
            facts.asked.get(label).is_some_and(|&(seq, _)| seq < answer.seq)
                && (ended.get(label).is_none_or(|&end| end > asked_seq)
                    || activity.iter().any(|&(other, seq)| other == label && within(seq)))
        };
        let concurrent = facts.requests.iter().any(|(label, (other, _))| {
            other == operation
                && label != &answer.label
                && !label.starts_with(FINAL_POLL_PREFIX)
                && busy(label)
        }) || unlabelled
            .iter()
            .any(|(seq, origin)| within(*seq) && origin.is_none_or(|origin| origin == operation));
        if concurrent {
            continue;
        }
        judgement.exercise(13);
        judgement.violate(
            13,
            Some(operation),
            vec![asked_seq, answer.seq],
            format!(
                "{} was answered unknown though every downstream request made for it was answered cleanly and {means}: \
                 the executor could have found out",
                quoted(&answer.label)
            ),
        );
    }
}

/// How the executor could have resolved an operation, if it could: a resend under a key the
/// downstream honours, an existing effect its receipt lookup finds, or a job whose reference
/// reached it and that it can poll.
fn means_to_find_out(
    contract: &protocol::ToolContract,
    effect_exists: bool,
    job_known: bool,
    told: bool,
) -> Option<&'static str> {
    if contract.downstream.honours_key {
        Some("the downstream honours its key (a resend is answered from the first request)")
    } else if job_known && contract.execution == protocol::Execution::DelayedJob {
        Some("its job exists, the executor saw the job's reference, and it can poll it")
    } else if effect_exists && contract.downstream.receipt_lookup {
        Some("its effect exists and the downstream's receipt lookup finds it")
    } else if told {
        Some("the downstream's answer with the effect's receipt reached a worker that kept running")
    } else {
        None
    }
}

/// O7: after retention, an old key makes no new effect.
fn late_duplicate(facts: &Facts<'_>, judgement: &mut Judgement) {
    for operation in facts.operations() {
        let Some(call) = facts.first_call_of(operation) else { continue };
        let Some(contract) = facts.evidence.contracts.get(&call.tool, &call.tool_version) else { continue };
        let retention_ms = contract.retention.as_millis() as u64;
        let mut own = facts.own_effects(operation);
        let Some(first) = own.next() else { continue };
        let late_call = facts
            .calls
            .iter()
            .any(|c| c.operation == operation && c.at_ms >= first.effect.at_ms + retention_ms);
        if late_call {
            judgement.exercise(7);
        }
        // Reconciling first needs something to ask: the downstream's receipt lookup.
        if contract.late_arrival == protocol::LateArrivalPolicy::ReconcileFirst
            && contract.downstream.receipt_lookup
        {
            late_calls_reconcile_first(facts, judgement, operation, first.effect.at_ms + retention_ms);
        }
        for late in own.filter(|e| e.effect.at_ms >= first.effect.at_ms + retention_ms) {
            judgement.exercise(7);
            judgement.violate(
                7,
                Some(operation),
                vec![first.position, late.position],
                format!(
                    "{} was made {} ms after {}, past the {} ms retention: a late duplicate became a new effect",
                    late.effect.effect_reference,
                    late.effect.at_ms - first.effect.at_ms,
                    first.effect.effect_reference,
                    retention_ms
                ),
            );
        }
    }
}

/// O7, for a contract whose late-arrival policy is `reconcile_first` (and whose downstream
/// offers a receipt lookup): a call that arrives after retention and is answered `expired` was
/// answered after the executor asked the downstream (a receipt lookup or a read for the
/// operation, sent while serving that call).
fn late_calls_reconcile_first(
    facts: &Facts<'_>,
    judgement: &mut Judgement,
    operation: &str,
    late_from_ms: u64,
) {
    let late_calls = facts.calls.iter().filter(|c| c.operation == operation && c.at_ms >= late_from_ms);
    for call in late_calls {
        let Some(answer) = facts.answer_to(&call.label) else { continue };
        if answer.outcome.status != OutcomeStatus::Expired {
            continue;
        }
        let asked = facts.sent.iter().any(|sent| {
            sent.class.is_lookup()
                && sent.serving.as_deref() == Some(call.label.as_str())
                && sent.seq < answer.seq
        });
        if !asked {
            judgement.violate(
                7,
                Some(operation),
                vec![call.seq, answer.seq],
                format!(
                    "{} arrived after retention and was answered expired without asking the downstream, \
                     but the contract's late-arrival policy is reconcile_first",
                    quoted(&call.label)
                ),
            );
        }
    }
}

/// The fields of a committed answer a replay must repeat when it has them: all of them for
/// an immediate effect; for a job only its id (its status moves on after acceptance).
fn comparable_fields(effect: &Effect) -> Vec<(&String, &Value)> {
    let Value::Object(answer) = &effect.answer else { return Vec::new() };
    answer
        .iter()
        .filter(|(field, _)| effect.kind != EffectKind::JobAccepted || field.as_str() == "job_id")
        .collect()
}

/// O8: a replay returns the effect reference and business result the downstream committed
/// for the operation (compared with the committed answer, and with an earlier `applied`).
fn replay_fidelity(facts: &Facts<'_>, judgement: &mut Judgement) {
    for answer in facts.answers.iter().filter(|a| a.outcome.status == OutcomeStatus::Replayed) {
        let Some((operation, _)) = facts.request_of(&answer.label) else { continue };
        if let Some(original) = facts.own_effects(operation).next() {
            judgement.exercise(8);
            let reference = &original.effect.effect_reference;
            if answer.outcome.effect_reference.as_deref() != Some(reference.as_str()) {
                judgement.violate(
                    8,
                    Some(operation),
                    vec![original.position, answer.seq],
                    format!(
                        "{} replayed {}, but the operation's effect is {reference}",
                        quoted(&answer.label),
                        answer.outcome.effect_reference.as_deref().unwrap_or("no reference")
                    ),
                );
                continue;
            }
            if let Some(Value::Object(result)) = &answer.outcome.result {
                let differs: Vec<&str> = comparable_fields(&original.effect)
                    .into_iter()
                    .filter(|(field, value)| result.get(*field).is_some_and(|replayed| replayed != *value))
                    .map(|(field, _)| field.as_str())
                    .collect();
                if !differs.is_empty() {
                    judgement.violate(
                        8,
                        Some(operation),
                        vec![original.position, answer.seq],
                        format!(
                            "{} replayed a business result whose {} differ from what the downstream committed for {reference}",
                            quoted(&answer.label),
                            differs.join(", ")
                        ),
                    );
                    continue;
                }
            }
        }
        let applied = facts.answers.iter().find(|a| {
            a.outcome.status == OutcomeStatus::Applied
                && a.outcome.result.is_some()
                && facts.request_of(&a.label).is_some_and(|(op, _)| op == operation)
        });
        if let Some(applied) = applied {
            judgement.exercise(8);
            if answer.outcome.result != applied.outcome.result {
                judgement.violate(
                    8,
                    Some(operation),
                    vec![applied.seq, answer.seq],
                    format!(
                        "{} replayed a different business result than {} applied",
                        quoted(&answer.label),
                        quoted(&applied.label)
                    ),
                );
            }
        }
    }
    rejections_keep_their_reason(facts, judgement);
    results_carry_what_was_committed(facts, judgement);
}

/// O8, for results: every `applied` or `replayed` answer of an operation with its own effect
/// carries, in its `result`, each field its contract names (`result`) that the downstream
/// committed, with the committed value. A result emptied to `{}` or `null` carries nothing.
/// (A replay's values that differ are reported above; here an `applied` one's too.)
fn results_carry_what_was_committed(facts: &Facts<'_>, judgement: &mut Judgement) {
    // A bare answer claims nothing of the result: there is nothing to hold it to.
    let successes =
        facts.answers.iter().filter(|answer| answer.outcome.status.claims_success() && !answer.bare);
    for answer in successes {
        let Some((operation, _)) = facts.request_of(&answer.label) else { continue };
        let Some(original) = facts.own_effects(operation).next() else { continue };
        let Some(call) = facts.first_call_of(operation) else { continue };
        let Some(contract) = facts.evidence.contracts.get(&call.tool, &call.tool_version) else { continue };
        let committed: BTreeMap<&String, &Value> = comparable_fields(&original.effect).into_iter().collect();
        let named: Vec<(&String, &Value)> = contract
            .result
            .iter()
            .filter_map(|field| committed.get(field).map(|value| (field, *value)))
            .collect();
        if named.is_empty() {
            continue;
        }
        judgement.exercise(8);
        let result = answer.outcome.result.as_ref().and_then(Value::as_object);
        let missing: Vec<&str> = named
            .iter()
            .filter(|(field, _)| result.is_none_or(|result| !result.contains_key(field.as_str())))
            .map(|(field, _)| field.as_str())
            .collect();
        let differs: Vec<&str> = named
            .iter()
            .filter(|(field, value)| {
                answer.outcome.status == OutcomeStatus::Applied
                    && result
                        .and_then(|result| result.get(field.as_str()))
                        .is_some_and(|given| given != *value)
            })
            .map(|(field, _)| field.as_str())
            .collect();
        let mut problems = Vec::new();
        if !missing.is_empty() {
            problems.push(format!("lacks {}", missing.join(", ")));
        }
        if !differs.is_empty() {
            problems.push(format!("differs in {}", differs.join(", ")));
        }
        if !problems.is_empty() {
            judgement.violate(
                8,
                Some(operation),
                vec![original.position, answer.seq],
                format!(
                    "{} answered {}, but its result {} (the fields its contract names, as the downstream \
                     committed them for {})",
                    quoted(&answer.label),
                    answer.outcome.status.as_str(),
                    problems.join(" and "),
                    original.effect.effect_reference
                ),
            );
        }
    }
}

/// O8, for refusals: once an operation was refused for good (`precondition_failed`,
/// `downstream_rejected`), every later answer for the same request that replays a refusal
/// (a retry with the same fingerprint, a poll) gives the same reason. A changed request
/// (another fingerprint), an invalid call (no fingerprint: it is refused as invalid before any
/// record is read) and a revoked actor's call earn answers of their own.
fn rejections_keep_their_reason(facts: &Facts<'_>, judgement: &mut Judgement) {
    let settled_refusal = |reason: Option<ReasonCode>| {
        matches!(reason, Some(ReasonCode::PreconditionFailed | ReasonCode::DownstreamRejected))
    };
    for operation in facts.operations() {
        // A call's fingerprint (`None` for an invalid call); a poll or reconciliation asks for
        // the operation as it stands, the same request as the refused one.
        let fingerprint_of = |label: &str| -> Option<Option<&str>> {
            facts.calls.iter().find(|call| call.label == label).map(|call| call.fingerprint.as_deref())
        };
        let answers: Vec<&AnswerFact> = facts
            .answers
            .iter()
            .filter(|answer| facts.request_of(&answer.label).is_some_and(|(op, _)| op == operation))
            .collect();
        let Some(first) = answers.iter().find(|answer| {
            answer.outcome.status == OutcomeStatus::Rejected && settled_refusal(answer.outcome.reason)
        }) else {
            continue;
        };
        let (reason, request) = (first.outcome.reason, fingerprint_of(&first.label).flatten());
        for later in answers.iter().filter(|answer| answer.seq > first.seq) {
            let same_request = match fingerprint_of(&later.label) {
                None => true,
                Some(fingerprint) => fingerprint.is_some() && fingerprint == request,
            };
            if later.outcome.status != OutcomeStatus::Rejected || !same_request {
                continue;
            }
            judgement.exercise(8);
            let earned = facts.requester_revoked(&later.label, operation)
                && later.outcome.reason == Some(ReasonCode::Unauthorized);
            if later.outcome.reason != reason && !earned {
                judgement.violate(
                    8,
                    Some(operation),
                    vec![first.seq, later.seq],
                    format!(
                        "{} replays the refusal of {} with {} instead of its reason, {}",
                        quoted(&later.label),
                        quoted(&first.label),
                        text::reason(later.outcome.reason),
                        text::reason(reason)
                    ),
                );
            }
        }
    }
}

/// Every string in an outcome that could name an effect: its reference and every string in
/// its result.
fn named_in(outcome: &Outcome) -> Vec<&str> {
    fn strings<'v>(value: &'v Value, into: &mut Vec<&'v str>) {
        match value {
            Value::String(text) => into.push(text),
            Value::Array(items) => items.iter().for_each(|item| strings(item, into)),
            Value::Object(fields) => fields.values().for_each(|item| strings(item, into)),
            _ => {}
        }
    }
    let mut names: Vec<&str> = outcome.effect_reference.iter().map(String::as_str).collect();
    if let Some(result) = &outcome.result {
        strings(result, &mut names);
    }
    names
}

/// O9: no outcome reveals an effect of another tenant, in its reference or anywhere in its
/// result.
fn tenant_isolation(facts: &Facts<'_>, judgement: &mut Judgement) {
    let tenants: BTreeSet<&str> = facts.observed.iter().map(|e| e.tenant.as_str()).collect();
    for answer in &facts.answers {
        let Some((operation, tenant)) = facts.request_of(&answer.label) else { continue };
        let names = named_in(&answer.outcome);
        if names.is_empty() {
            continue;
        }
        if tenants.len() > 1 || tenants.iter().any(|t| t != tenant) {
            judgement.exercise(9);
        }
        let foreign = names.iter().find_map(|name| {
            facts.observed.iter().find(|e| e.effect_reference == *name && &e.tenant != tenant)
        });
        if let Some(foreign) = foreign {
            let position = facts.effects.iter().find(|e| e.effect.seq == foreign.seq).map(|e| e.position);
            judgement.violate(
                9,
                Some(operation),
                position.into_iter().chain([answer.seq]).collect(),
                format!(
                    "{} for tenant {tenant} revealed {}, an effect of tenant {}",
                    quoted(&answer.label),
                    foreign.effect_reference,
                    foreign.tenant
                ),
            );
        }
    }
}

/// O10: at most one downstream job accepted per operation, and a job whose contract names a
/// completion notice is announced once it is settled: an operation the executor finally
/// answers `applied` or `replayed` for (the job finished, by its own account) has its notice in
/// the ledger, or, when the downstream never confirmed it, was handed over to people (a
/// reconciliation entry for the operation). (A second notice is O1's: one effect per operation
/// and kind.)
fn single_job(facts: &Facts<'_>, judgement: &mut Judgement) {
    one_job_per_operation(facts, judgement);
    settled_jobs_are_announced(facts, judgement);
}

fn settled_jobs_are_announced(facts: &Facts<'_>, judgement: &mut Judgement) {
    if !facts.settled {
        return;
    }
    for operation in facts.operations() {
        let Some(first) = facts.first_call_of(operation) else { continue };
        let Some(contract) = facts.evidence.contracts.get(&first.tool, &first.tool_version) else {
            continue;
        };
        if contract.execution != protocol::Execution::DelayedJob || contract.completion_notice_to.is_none() {
            continue;
        }
        let Some(answer) = facts.final_poll(operation) else { continue };
        if !answer.outcome.status.claims_success() {
            continue;
        }
        judgement.exercise(10);
        let notices =
            facts.effects_of(operation).filter(|e| e.effect.kind == EffectKind::MessageSent).count();
        // A notice the downstream never confirmed may be handed over to people instead.
        if notices == 0 && !facts.handed_over(operation) {
            if let Some(untied) = facts.effects.iter().find(|fact| untied_notice(facts, fact)) {
                judgement.undecided.push(format!(
                    "O10 not decided for {operation}: its completion notice may be {}, which the harness could not tie to an operation",
                    untied.effect.effect_reference
                ));
                continue;
            }
            judgement.violate(
                10,
                Some(operation),
                vec![answer.seq],
                format!(
                    "the job settled ({} at the last poll) but its completion notice never reached the downstream",
                    answer.outcome.status.as_str()
                ),
            );
        }
    }
}

fn one_job_per_operation(facts: &Facts<'_>, judgement: &mut Judgement) {
    let mut jobs: BTreeMap<&str, Vec<&EffectFact>> = BTreeMap::new();
    for fact in facts.effects.iter().filter(|e| e.effect.kind == EffectKind::JobAccepted) {
        judgement.exercise(10);
        if let Some(operation) = &fact.operation {
            jobs.entry(operation).or_default().push(fact);
        }
    }
    for (operation, effects) in jobs.into_iter().filter(|(_, effects)| effects.len() > 1) {
        judgement.violate(
            10,
            Some(operation),
            effects.iter().map(|e| e.position).collect(),
            format!(
                "the downstream accepted {} jobs for one operation ({})",
                effects.len(),
                effects.iter().map(|e| e.effect.effect_reference.as_str()).collect::<Vec<_>>().join(", ")
            ),
        );
    }
}

/// O11: no absolute update applies against a newer version than the one it was based on
/// (the version the call that asked for it named).
fn no_stale_overwrite(facts: &Facts<'_>, judgement: &mut Judgement) {
    for fact in facts.effects.iter().filter(|e| e.effect.kind == EffectKind::TicketStatusChanged) {
        let (Some(operation), Some(versions)) = (&fact.operation, fact.effect.versions) else { continue };
        let sent = fact.sent_at.unwrap_or(fact.position);
        // The update is the last call of the operation with its content before it was sent,
        // among those not refused (a refused call is the basis of nothing).
        let refused = |call: &&CallFact| {
            facts.answer_to(&call.label).is_some_and(|answer| {
                matches!(answer.outcome.status, OutcomeStatus::Rejected | OutcomeStatus::Expired)
            })
        };
        let Some(based_on) = facts
            .calls
            .iter()
            .filter(|c| &c.operation == operation && c.seq < sent)
            .filter(|c| c.content.as_deref().is_none_or(|content| content == fact.effect.content_digest))
            .filter(|c| !refused(c))
            .filter_map(|c| c.expected_version)
            .next_back()
        else {
            continue;
        };
        judgement.exercise(11);
        if versions.from != based_on {
            judgement.violate(
                11,
                Some(operation),
                vec![fact.position],
                format!(
                    "a status change was applied to {} at version {} though the update was based on version {based_on}",
                    fact.effect.effect_reference, versions.from
                ),
            );
        }
    }
}

/// O12: an operation whose own effect is in the ledger does not end `rejected` at the
/// harness's final poll: the executor owns what it did. (A final poll refused because its
/// actor's permission was revoked says nothing of the operation, and is not judged; the final
/// poll is made by the operation's actor, which may not be the actor whose call made the
/// effect.)
fn no_disowned_effect(facts: &Facts<'_>, judgement: &mut Judgement) {
    if !facts.settled {
        return;
    }
    for operation in facts.operations() {
        let Some(effect) = facts.own_effects(operation).next() else { continue };
        let Some(answer) = facts.final_poll(operation) else { continue };
        let outcome = &answer.outcome;
        let refused_poll = outcome.reason == Some(ReasonCode::Unauthorized)
            && facts.requester_revoked(&answer.label, operation);
        if refused_poll {
            continue;
        }
        judgement.exercise(12);
        if outcome.status == OutcomeStatus::Rejected {
            judgement.violate(
                12,
                Some(operation),
                vec![effect.position, answer.seq],
                format!(
                    "the operation made {}, but the executor finally answers rejected{}: it disowns an effect that happened",
                    effect.effect.effect_reference,
                    outcome.reason.map(|r| format!(" ({})", r.as_str())).unwrap_or_default()
                ),
            );
        }
    }
}
