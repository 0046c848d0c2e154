//! The strategies are pluggable one decision at a time: a defective claim, swapped in
//! through `Strategies`, shows its duplicate effect on the ledger under the same
//! interleaving the reference survives.

use std::rc::Rc;

use executor::{Claimed, GatedStore, NewClaim, StoreError, Strategies};
use fake_downstream::IdempotencyMode;
use protocol::{ContractSet, LocalBoxFuture, OutcomeStatus};

use crate::support::{PausingGate, World, TICKET};

/// The `read_then_insert` defect: read, and if nothing is there, insert and assume ownership
/// (ignoring what the insert said).
fn read_then_insert<'a>(
    store: GatedStore<'a>,
    claim: &'a NewClaim,
) -> LocalBoxFuture<'a, Result<Claimed, StoreError>> {
    Box::pin(async move {
        let seen = store.call("load", |store| store.load(&claim.tenant, &claim.operation_key)).await?;
        if let Some(record) = seen {
            return Ok(Claimed::Existing(record));
        }
        store.call("insert", |store| store.claim(claim)).await?;
        Ok(Claimed::New(claim.to_record()))
    })
}

/// Worker A pauses at `pause_at` in its claim; worker B calls the same step; A goes on.
async fn race(strategies: Strategies, pause_at: &str) -> (World, OutcomeStatus, OutcomeStatus) {
    let mut contracts = ContractSet::builtin();
    contracts.set_capabilities("tickets", false, true);
    let mut config = World::builder_downstream_config();
    config.tickets.idempotency = IdempotencyMode::Ignored;
    let world = World::builder().contracts(contracts).downstream(config).strategies(strategies).build().await;
    let gate = Rc::new(PausingGate::default());
    gate.pause_at(pause_at);
    let first_worker = world.worker_with_gate("worker-a", gate.clone());
    let second_worker = world.worker("worker-b");
    let first = first_worker.call(world.call("tickets.create", "s", TICKET));
    let second = async {
        gate.paused().await;
        let outcome = second_worker.call(world.call("tickets.create", "s", TICKET)).await;
        gate.resume();
        outcome
    };
    let (first, second) = tokio::join!(first, second);
    (world, first.status, second.status)
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_then_insert_claim_makes_two_effects_where_the_atomic_claim_makes_one() {
    let defective = Strategies { claim: read_then_insert, ..Strategies::reference() };
    // A has read "no record" and not inserted yet.
    let (world, first, second) = race(defective, "leave load").await;
    assert_eq!(second, OutcomeStatus::Applied);
    // A's completion loses the compare-and-set to B's record, but only after its second
    // effect happened: the store's CAS cannot undo a claim that was never exclusive.
    assert_eq!(first, OutcomeStatus::Replayed);
    assert_eq!(world.ledger().len(), 2, "the defect is visible on the ledger");

    // The same moment in the reference: right after its one atomic claim.
    let (world, first, second) = race(Strategies::reference(), "leave claim").await;
    assert_eq!(second, OutcomeStatus::InFlight, "B finds A's claim");
    assert_eq!(first, OutcomeStatus::Applied);
    assert_eq!(world.ledger().len(), 1);
}
