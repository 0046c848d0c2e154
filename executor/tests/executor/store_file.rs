//! The file store: claims survive a restart, and two connections racing for the same key
//! from two threads get exactly one owner.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use executor::{ClaimStore, Claimed, NewClaim, RecordStatus, StoreLocation};
use protocol::OutcomeStatus;

use crate::support::{World, TICKET};

/// A fresh directory for one test, removed on drop.
struct TempDirectory(PathBuf);

impl TempDirectory {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "replaylab-executor-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn claim(key: &str, owner: &str) -> NewClaim {
    NewClaim {
        tenant: "acme".into(),
        operation_key: key.into(),
        tool_name: "tickets.create".into(),
        tool_version: "2026-08-18".into(),
        request_fingerprint: "jcs-v1:sha256:aa".into(),
        downstream_key: Some(key.into()),
        owner_token: owner.into(),
        now_ms: 0,
        lease_until_ms: 5_000,
        expires_at_ms: 60_000,
        request_json: None,
    }
}

#[test]
fn two_connections_racing_from_two_threads_get_exactly_one_owner_per_key() {
    const KEYS: usize = 200;
    let directory = TempDirectory::new("race");
    let location = StoreLocation::File(directory.file("claims.db"));
    ClaimStore::open(&location).unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let racers: Vec<_> = ["A", "B"]
        .into_iter()
        .map(|owner| {
            let (location, barrier) = (location.clone(), barrier.clone());
            std::thread::spawn(move || {
                let store = ClaimStore::open(&location).unwrap();
                let mut won = Vec::new();
                for index in 0..KEYS {
                    barrier.wait();
                    if let Claimed::New(_) =
                        executor::block_on(store.claim(&claim(&format!("k{index}"), owner))).unwrap()
                    {
                        won.push(index);
                    }
                }
                won
            })
        })
        .collect();
    let winners: Vec<Vec<usize>> = racers.into_iter().map(|racer| racer.join().unwrap()).collect();

    assert_eq!(winners[0].len() + winners[1].len(), KEYS, "every key has exactly one owner");
    assert!(winners[0].iter().all(|index| !winners[1].contains(index)));
    let records = executor::block_on(ClaimStore::open(&location).unwrap().records()).unwrap();
    assert_eq!(records.len(), KEYS);
    for record in records {
        let index: usize = record.operation_key[1..].parse().unwrap();
        let expected = if winners[0].contains(&index) { "A" } else { "B" };
        assert_eq!(record.owner_token.as_deref(), Some(expected), "the stored owner is the winner");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_file_store_survives_a_restart_and_the_retry_replays() {
    let directory = TempDirectory::new("restart");
    let location = StoreLocation::File(directory.file("claims.db"));
    let world = World::builder().store(location.clone()).build().await;
    let first = world.worker("worker-1").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(first.status, OutcomeStatus::Applied);
    let World { downstream, factory, .. } = world;
    drop(factory);

    // A new process: a new factory and connection over the same file and the same downstream.
    let restarted = ClaimStore::open(&location).unwrap();
    let record = executor::block_on(restarted.load("acme", &World::key("s"))).unwrap().unwrap();
    assert_eq!(
        (record.status, record.effect_reference.as_deref()),
        (RecordStatus::Applied, Some("ticket_1"))
    );
    let world = World::builder().store(location).build().await;
    let again = world.worker("worker-1").call(world.call("tickets.create", "s", TICKET)).await;
    assert_eq!(again.status, OutcomeStatus::Replayed, "{again:?}");
    assert_eq!(again.effect_reference, first.effect_reference);
    assert!(world.ledger().is_empty(), "the new downstream saw no second create");
    assert_eq!(downstream.ledger().len(), 1);
}
