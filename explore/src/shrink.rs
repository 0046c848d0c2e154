//! Shrinking a failing case to something a person can read, while it still fails the same way.
//!
//! Delta debugging over the case's parts, then over its values, in passes:
//!
//! 1. **actions**, in chunks: half of them at a time, then quarters, ... down to one at a time
//!    (ddmin's granularity);
//! 2. **operations**, one at a time, with every action that names it;
//! 3. **workers**, down to one;
//! 4. **switches**: duplicate deliveries, webhooks, long jobs, the slow queue, each off;
//! 5. **actions made simpler**: each action into a plainer kind (a faulty call into a call, a
//!    slow owner into a call, ...) and its values into the plainest (the first worker and
//!    operation, the same arguments, the plainest fault, shorter delays);
//! 6. **operations and services made plainer**: a ticket, the first content, tenant and step;
//!    every service honouring keys and keeping receipts.
//!
//! Each pass tries its candidates in order and keeps the first that still fails (`check`
//! decides: one run in the simulation, a rate over reruns against real processes), then goes
//! on from there. A round is all six passes; rounds repeat until one makes no progress, or the
//! budget of candidates is spent. Every candidate kept is strictly smaller than the case it
//! replaces, by (size, kinds, values), so shrinking always ends.
//!
//! proptest's own value-tree simplification is not used: its tree belongs to the case as it
//! was drawn, and no longer fits once a pass has removed parts of it.

use crate::{
    ActorRevoked, Case, CaseAction, CaseFault, CaseOperation, CaseTool, CrashMoment, ServiceChoice, Variant,
};

/// How many candidates one shrink may try at most (each is one run in the simulation).
pub const MAX_SHRINK_RUNS: u32 = 400;

/// A shrunk case and what it does.
#[derive(Debug, Clone)]
pub struct Shrunk<R> {
    /// The smallest case found that still fails.
    pub case: Case,
    /// What `check` said of it.
    pub result: R,
    /// Candidates tried.
    pub runs: u32,
}

/// Shrinks `case` (which fails, with `result`) with at most `budget` candidates; `check` is
/// given up to `batch` candidates at a time (it may run them side by side) and says, for each,
/// what it did if it still fails, else `None`.
pub fn shrink<R>(
    case: Case,
    result: R,
    budget: u32,
    batch: usize,
    check: impl FnMut(&[Case]) -> Vec<Option<R>>,
) -> Shrunk<R> {
    let mut shrinker = Shrinker { current: case, result, tried: 0, budget, batch: batch.max(1), check };
    loop {
        let before = rank(&shrinker.current);
        let mut size = shrinker.current.actions.len().div_ceil(2);
        loop {
            shrinker.pass(&|case: &Case| without_action_chunks(case, size));
            if size <= 1 {
                break;
            }
            size = size.div_ceil(2).min(shrinker.current.actions.len().div_ceil(2)).max(1);
        }
        shrinker.pass(&without_each_operation);
        shrinker.pass(&fewer_workers);
        shrinker.pass(&switches_off);
        shrinker.pass(&simpler_actions);
        shrinker.pass(&plainer_operations_and_services);
        if rank(&shrinker.current) == before || shrinker.tried >= shrinker.budget {
            break;
        }
    }
    Shrunk { case: shrinker.current, result: shrinker.result, runs: shrinker.tried }
}

struct Shrinker<R, F> {
    current: Case,
    result: R,
    tried: u32,
    budget: u32,
    batch: usize,
    check: F,
}

impl<R, F: FnMut(&[Case]) -> Vec<Option<R>>> Shrinker<R, F> {
    /// Tries `candidates` of the current case, in order, keeping the first that still fails,
    /// and goes on from there (past the candidates that did not), until none does.
    fn pass(&mut self, candidates: &dyn Fn(&Case) -> Vec<Case>) {
        let mut skip = 0;
        loop {
            let rank_now = rank(&self.current);
            let list: Vec<Case> = candidates(&self.current)
                .into_iter()
                .filter(|case| rank(case) < rank_now)
                .skip(skip)
                .collect();
            let mut kept = None;
            let mut offset = 0;
            for chunk in list.chunks(self.batch) {
                let room = self.budget.saturating_sub(self.tried) as usize;
                if room == 0 {
                    return;
                }
                let chunk = &chunk[..chunk.len().min(room)];
                let results = (self.check)(chunk);
                self.tried += chunk.len() as u32;
                if let Some((index, result)) =
                    results.into_iter().enumerate().find_map(|(index, result)| result.map(|r| (index, r)))
                {
                    kept = Some((offset + index, chunk[index].clone(), result));
                    break;
                }
                offset += chunk.len();
            }
            let Some((index, case, result)) = kept else { return };
            self.current = case;
            self.result = result;
            skip += index;
        }
    }
}

/// What shrinking makes smaller: the size (operations + actions + workers), then how elaborate
/// the action kinds are, then the values.
fn rank(case: &Case) -> (usize, u64, u64) {
    let kinds = case.actions.iter().map(|action| u64::from(kind_weight(action))).sum();
    let values = case.actions.iter().map(value_weight).sum::<u64>()
        + case.operations.iter().map(operation_weight).sum::<u64>()
        + [case.duplicate_deliveries, case.webhooks, case.long_jobs, case.slow_queue]
            .iter()
            .map(|on| u64::from(*on))
            .sum::<u64>()
        + case.services.iter().map(|service| u64::from(*service != PLAIN_SERVICE)).sum::<u64>();
    (case.size(), kinds, values)
}

/// The plainest service: keys honoured, receipts kept (the scenario format's default).
const PLAIN_SERVICE: ServiceChoice = ServiceChoice { honoured: true, receipts: true };

/// How elaborate an action's kind is: each simplification goes to a lower weight.
fn kind_weight(action: &CaseAction) -> u32 {
    match action {
        CaseAction::Advance { .. } => 10,
        CaseAction::Poll { .. } | CaseAction::Revoke { .. } | CaseAction::HumanEdit => 20,
        CaseAction::Reconcile { .. } => 21,
        CaseAction::PollWhileRunning { .. } => 22,
        CaseAction::Call { .. } => 30,
        CaseAction::LateRetry { .. } => 31,
        CaseAction::RevokeAndRetry { .. } | CaseAction::StaleUpdate => 32,
        CaseAction::OtherActor { .. } => 33,
        CaseAction::Concurrent { .. } => 34,
        CaseAction::NewVersion { .. } => 35,
        CaseAction::FaultyCall { .. } => 40,
        CaseAction::LookupsDown { .. } => 41,
        CaseAction::NoticeFault { .. } => 42,
        CaseAction::CrashDuringCall { .. } => 43,
        CaseAction::SlowOwner { .. } => 44,
        CaseAction::OverlappingOwner { .. } => 45,
    }
}

fn variant_weight(variant: Variant) -> u64 {
    match variant {
        Variant::Same => 0,
        Variant::Reordered => 1,
        Variant::ChangedField(_) => 2,
        Variant::Changed => 3,
    }
}

fn fault_weight(fault: CaseFault) -> u64 {
    match fault {
        CaseFault::CommitThenDrop => 0,
        CaseFault::CommitThenError | CaseFault::CommitThenMalformed => 1,
        CaseFault::DropBeforeCommit | CaseFault::ResetBeforeCommit => 1,
        CaseFault::CommitThenDelay(ms) | CaseFault::DelayBeforeCommit(ms) => 1 + u64::from(ms),
    }
}

/// How far an action's values are from the plainest.
fn value_weight(action: &CaseAction) -> u64 {
    let operation = operation_of(action).map_or(0, u64::from);
    let worker = worker_of(action).map_or(0, u64::from);
    operation
        + worker
        + match *action {
            CaseAction::Call { variant, .. } => variant_weight(variant),
            CaseAction::FaultyCall { fault, .. } | CaseAction::NoticeFault { fault, .. } => {
                fault_weight(fault)
            }
            CaseAction::CrashDuringCall { moment, stays_down, .. } => {
                u64::from(moment == CrashMoment::AfterCommit) + u64::from(stays_down)
            }
            CaseAction::Advance { ms } => u64::from(ms),
            CaseAction::OtherActor { revoked, .. } => u64::from(revoked != ActorRevoked::Neither),
            CaseAction::NewVersion { variant, early, .. } => variant_weight(variant) + u64::from(early),
            _ => 0,
        }
}

fn operation_weight(operation: &CaseOperation) -> u64 {
    let tool = CaseTool::ALL.iter().position(|tool| *tool == operation.tool).unwrap_or(0) as u64;
    tool + u64::from(operation.content) + u64::from(operation.tenant) + u64::from(operation.step)
}

/// The operation an action names, where it can be read or changed; `None` for an action that
/// names none.
fn operation_slot(action: &mut CaseAction) -> Option<&mut u8> {
    match action {
        CaseAction::Call { operation, .. }
        | CaseAction::Concurrent { operation }
        | CaseAction::FaultyCall { operation, .. }
        | CaseAction::CrashDuringCall { operation, .. }
        | CaseAction::SlowOwner { operation, .. }
        | CaseAction::OverlappingOwner { operation, .. }
        | CaseAction::LateRetry { operation }
        | CaseAction::RevokeAndRetry { operation }
        | CaseAction::Revoke { operation }
        | CaseAction::Poll { operation }
        | CaseAction::Reconcile { operation }
        | CaseAction::PollWhileRunning { operation }
        | CaseAction::OtherActor { operation, .. }
        | CaseAction::NewVersion { operation, .. }
        | CaseAction::LookupsDown { operation, .. }
        | CaseAction::NoticeFault { operation, .. } => Some(operation),
        CaseAction::Advance { .. } | CaseAction::HumanEdit | CaseAction::StaleUpdate => None,
    }
}

/// The operation an action names, if it names one.
fn operation_of(action: &CaseAction) -> Option<u8> {
    let mut action = *action;
    operation_slot(&mut action).copied()
}

/// The worker an action names, where it can be read or changed; `None` for an action that
/// names none.
fn worker_slot(action: &mut CaseAction) -> Option<&mut u8> {
    match action {
        CaseAction::Call { worker, .. }
        | CaseAction::FaultyCall { worker, .. }
        | CaseAction::CrashDuringCall { worker, .. }
        | CaseAction::SlowOwner { worker, .. }
        | CaseAction::OverlappingOwner { worker, .. }
        | CaseAction::OtherActor { worker, .. }
        | CaseAction::NewVersion { worker, .. }
        | CaseAction::LookupsDown { worker, .. } => Some(worker),
        _ => None,
    }
}

/// The worker an action names, if it names one.
fn worker_of(action: &CaseAction) -> Option<u8> {
    let mut action = *action;
    worker_slot(&mut action).copied()
}

/// The action naming another operation.
fn with_operation(action: CaseAction, to: u8) -> CaseAction {
    let mut action = action;
    if let Some(operation) = operation_slot(&mut action) {
        *operation = to;
    }
    action
}

/// The action sent to another worker.
fn with_worker(action: CaseAction, to: u8) -> CaseAction {
    let mut action = action;
    if let Some(worker) = worker_slot(&mut action) {
        *worker = to;
    }
    action
}

/// The case without each run of `size` actions in turn (never without every action).
fn without_action_chunks(case: &Case, size: usize) -> Vec<Case> {
    let len = case.actions.len();
    if size == 0 || size >= len {
        return Vec::new();
    }
    (0..len)
        .step_by(size)
        .map(|start| {
            let mut smaller = case.clone();
            smaller.actions.drain(start..(start + size).min(len));
            smaller
        })
        .collect()
}

/// The case without each operation in turn, and without the actions that name it; the
/// others' actions name them where they are now.
fn without_each_operation(case: &Case) -> Vec<Case> {
    let len = case.operations.len();
    if len <= 1 {
        return Vec::new();
    }
    (0..len)
        .filter_map(|removed| {
            let mut smaller = case.clone();
            smaller.operations.remove(removed);
            smaller.actions = case
                .actions
                .iter()
                .filter_map(|action| match operation_of(action) {
                    None => Some(*action),
                    Some(named) => {
                        let at = usize::from(named) % len;
                        (at != removed)
                            .then(|| with_operation(*action, (at - usize::from(at > removed)) as u8))
                    }
                })
                .collect();
            (!smaller.actions.is_empty()).then_some(smaller)
        })
        .collect()
}

fn fewer_workers(case: &Case) -> Vec<Case> {
    let mut fewer = Vec::new();
    for workers in [1, case.workers.saturating_sub(1)] {
        if workers >= 1 && workers < case.workers && !fewer.iter().any(|c: &Case| c.workers == workers) {
            fewer.push(Case { workers, ..case.clone() });
        }
    }
    fewer
}

fn switches_off(case: &Case) -> Vec<Case> {
    let mut off = Vec::new();
    if case.duplicate_deliveries {
        off.push(Case { duplicate_deliveries: false, ..case.clone() });
    }
    if case.webhooks {
        off.push(Case { webhooks: false, ..case.clone() });
    }
    if case.long_jobs {
        off.push(Case { long_jobs: false, ..case.clone() });
    }
    if case.slow_queue {
        off.push(Case { slow_queue: false, ..case.clone() });
    }
    off
}

/// Plainer versions of one action: a plainer kind first, then plainer values.
fn simpler(action: CaseAction) -> Vec<CaseAction> {
    let call = |operation: u8, worker: u8| CaseAction::Call { operation, worker, variant: Variant::Same };
    let mut simpler = match action {
        CaseAction::FaultyCall { operation, worker, .. }
        | CaseAction::CrashDuringCall { operation, worker, .. }
        | CaseAction::SlowOwner { operation, worker }
        | CaseAction::OtherActor { operation, worker, .. } => vec![call(operation, worker)],
        CaseAction::OverlappingOwner { operation, worker } => {
            vec![call(operation, worker), CaseAction::SlowOwner { operation, worker }]
        }
        CaseAction::Concurrent { operation } | CaseAction::LateRetry { operation } => {
            vec![call(operation, 0)]
        }
        CaseAction::NewVersion { operation, worker, variant, .. } => {
            vec![CaseAction::Call { operation, worker, variant }]
        }
        CaseAction::LookupsDown { operation, worker } => {
            vec![CaseAction::FaultyCall { operation, worker, fault: CaseFault::DropBeforeCommit }]
        }
        CaseAction::NoticeFault { operation, fault } => {
            vec![CaseAction::FaultyCall { operation, worker: 0, fault }]
        }
        CaseAction::RevokeAndRetry { operation } => vec![CaseAction::Revoke { operation }],
        CaseAction::StaleUpdate => vec![CaseAction::HumanEdit],
        CaseAction::PollWhileRunning { operation } | CaseAction::Reconcile { operation } => {
            vec![CaseAction::Poll { operation }]
        }
        CaseAction::Call { .. }
        | CaseAction::Advance { .. }
        | CaseAction::Revoke { .. }
        | CaseAction::Poll { .. }
        | CaseAction::HumanEdit => Vec::new(),
    };
    if operation_of(&action).is_some_and(|operation| operation > 0) {
        simpler.push(with_operation(action, 0));
    }
    if worker_of(&action).is_some_and(|worker| worker > 0) {
        simpler.push(with_worker(action, 0));
    }
    let plainer_fault = |fault: CaseFault| match fault {
        CaseFault::CommitThenDrop => Vec::new(),
        CaseFault::CommitThenDelay(ms) if ms > 1 => {
            vec![CaseFault::CommitThenDrop, CaseFault::CommitThenDelay(ms / 2)]
        }
        CaseFault::DelayBeforeCommit(ms) if ms > 1 => {
            vec![CaseFault::CommitThenDrop, CaseFault::DelayBeforeCommit(ms / 2)]
        }
        _ => vec![CaseFault::CommitThenDrop],
    };
    match action {
        CaseAction::Call { operation, worker, variant } if variant != Variant::Same => {
            simpler.push(CaseAction::Call { operation, worker, variant: Variant::Same });
        }
        CaseAction::FaultyCall { operation, worker, fault } => {
            simpler.extend(plainer_fault(fault).into_iter().map(|fault| CaseAction::FaultyCall {
                operation,
                worker,
                fault,
            }));
        }
        CaseAction::NoticeFault { operation, fault } => {
            simpler.extend(
                plainer_fault(fault).into_iter().map(|fault| CaseAction::NoticeFault { operation, fault }),
            );
        }
        CaseAction::CrashDuringCall { operation, worker, moment, stays_down } => {
            if stays_down {
                simpler.push(CaseAction::CrashDuringCall { operation, worker, moment, stays_down: false });
            }
            if moment == CrashMoment::AfterCommit {
                simpler.push(CaseAction::CrashDuringCall {
                    operation,
                    worker,
                    moment: CrashMoment::BeforeEffect,
                    stays_down,
                });
            }
        }
        CaseAction::Advance { ms } if ms > 1 => simpler.push(CaseAction::Advance { ms: ms / 2 }),
        CaseAction::OtherActor { operation, worker, revoked } if revoked != ActorRevoked::Neither => {
            simpler.push(CaseAction::OtherActor { operation, worker, revoked: ActorRevoked::Neither });
        }
        CaseAction::NewVersion { operation, worker, variant, early } => {
            if early {
                simpler.push(CaseAction::NewVersion { operation, worker, variant, early: false });
            }
            if variant != Variant::Same {
                simpler.push(CaseAction::NewVersion { operation, worker, variant: Variant::Same, early });
            }
        }
        _ => {}
    }
    simpler
}

fn simpler_actions(case: &Case) -> Vec<Case> {
    let mut candidates = Vec::new();
    for (index, action) in case.actions.iter().enumerate() {
        for plainer in simpler(*action) {
            let mut candidate = case.clone();
            candidate.actions[index] = plainer;
            candidates.push(candidate);
        }
    }
    candidates
}

fn plainer_operations_and_services(case: &Case) -> Vec<Case> {
    let mut candidates = Vec::new();
    for (index, operation) in case.operations.iter().enumerate() {
        let plainer = [
            CaseOperation { tool: CaseTool::Ticket, ..*operation },
            CaseOperation { content: 0, ..*operation },
            CaseOperation { tenant: 0, ..*operation },
            CaseOperation { step: 0, ..*operation },
        ];
        for plainer in plainer.into_iter().filter(|plainer| plainer != operation) {
            let mut candidate = case.clone();
            candidate.operations[index] = plainer;
            candidates.push(candidate);
        }
    }
    for index in 0..case.services.len() {
        if case.services[index] != PLAIN_SERVICE {
            let mut candidate = case.clone();
            candidate.services[index] = PLAIN_SERVICE;
            candidates.push(candidate);
        }
    }
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(actions: Vec<CaseAction>, operations: usize) -> Case {
        Case {
            seed: 1,
            workers: 3,
            services: [ServiceChoice { honoured: false, receipts: true }; 4],
            duplicate_deliveries: true,
            webhooks: true,
            long_jobs: false,
            slow_queue: false,
            operations: (0..operations)
                .map(|step| CaseOperation { tenant: 0, step: step as u8, tool: CaseTool::Charge, content: 1 })
                .collect(),
            actions,
        }
    }

    /// A check that "fails" while the case still has a faulty call of operation index 0's
    /// charge: shrinking must keep exactly that and drop everything else.
    #[test]
    fn shrinking_keeps_only_what_the_failure_needs_and_stops_when_nothing_helps() {
        let mut actions = vec![
            CaseAction::Advance { ms: 900 },
            CaseAction::Call { operation: 1, worker: 2, variant: Variant::Changed },
            CaseAction::FaultyCall { operation: 0, worker: 1, fault: CaseFault::CommitThenDelay(3_000) },
        ];
        actions.extend((0..7).map(|step| CaseAction::Poll { operation: step % 3 }));
        let original = case(actions, 3);
        let fails = |case: &Case| {
            case.actions.iter().any(|action| matches!(action, CaseAction::FaultyCall { operation: 0, .. }))
                && case.operations.first().is_some_and(|operation| operation.tool == CaseTool::Charge)
        };
        let mut checked = 0;
        let shrunk = shrink(original.clone(), (), MAX_SHRINK_RUNS, 1, |candidates| {
            checked += candidates.len();
            candidates.iter().map(|candidate| fails(candidate).then_some(())).collect()
        });
        assert_eq!(
            shrunk.case.actions,
            [CaseAction::FaultyCall { operation: 0, worker: 0, fault: CaseFault::CommitThenDrop }]
        );
        assert_eq!(shrunk.case.operations.len(), 1);
        assert_eq!(shrunk.case.workers, 1);
        assert!(!shrunk.case.duplicate_deliveries && !shrunk.case.webhooks);
        assert_eq!(shrunk.case.size(), 3, "from {}", original.size());
        assert_eq!(shrunk.runs as usize, checked);
        assert!(shrunk.runs < 150, "stopped once no pass helped, not at the budget: {}", shrunk.runs);
    }

    #[test]
    fn the_budget_bounds_the_candidates_and_batches_are_tried_in_order() {
        let original = case((0..10).map(|_| CaseAction::Poll { operation: 0 }).collect(), 1);
        let mut batches = Vec::new();
        let shrunk = shrink(original, 0usize, 7, 3, |candidates| {
            batches.push(candidates.len());
            // The second of each batch "fails": the first kept is always the second tried.
            candidates.iter().enumerate().map(|(index, _)| (index == 1).then_some(index)).collect()
        });
        assert_eq!(shrunk.runs, 7);
        assert!(batches.iter().all(|&size| size <= 3), "{batches:?}");
        assert_eq!(batches.iter().sum::<usize>(), 7);
    }
}
