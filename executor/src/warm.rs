//! Warm claim-store databases, reused by the runs one thread makes one after another.
//!
//! A simulated run needs its own empty shared-memory database. Creating one costs more than
//! the rest of the run's store work: five DDL statements, and on every new connection a
//! parse of the schema and a fresh statement cache. A [`WarmDatabase`] keeps all of that: the
//! keeper connection, the connections workers have given back, and their prepared
//! statements. When its run ends the database is emptied (every table listed in
//! `sqlite_master`, so a table added to the schema later is emptied too) and put in this
//! thread's pool for the next run.
//!
//! Emptied is the same as new for everything the executor can observe: the same schema, no
//! rows, and `INTEGER PRIMARY KEY` ids that start again at 1 (the schema has no
//! `AUTOINCREMENT`). Tests check it: below, the ids a new and a reused database assign; in
//! `harness/tests/it/runs.rs`, that a run on a reused database gives the history of the same run
//! on a new one.

use std::cell::RefCell;
use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};

use crate::store::{ClaimStore, StoreError, StoreLocation};

/// The most warm databases one thread keeps: a thread runs one simulation at a time, so one
/// is normally enough; the rest cover a caller holding a few factories at once.
const MAX_WARM_PER_THREAD: usize = 4;

/// Connections to one database that no worker is using.
pub(crate) type Idle = Arc<Mutex<Vec<ClaimStore>>>;

/// A shared-memory claim store with its schema, its keeper connection (which keeps the
/// database alive) and its idle worker connections.
pub(crate) struct WarmDatabase {
    pub(crate) location: StoreLocation,
    pub(crate) keeper: ClaimStore,
    pub(crate) idle: Idle,
}

thread_local! {
    static POOL: RefCell<Vec<WarmDatabase>> = const { RefCell::new(Vec::new()) };
}

impl WarmDatabase {
    /// An empty database from this thread's pool, or a new one.
    pub(crate) fn take() -> Result<Self, StoreError> {
        if let Some(warm) = POOL.try_with(|pool| pool.borrow_mut().pop()).ok().flatten() {
            return Ok(warm);
        }
        let location = StoreLocation::fresh_shared_memory("warm");
        let keeper = ClaimStore::open(&location)?;
        Ok(Self { location, keeper, idle: Idle::default() })
    }

    /// Empties the database and puts it in this thread's pool. It is closed instead when it
    /// cannot be emptied (it is never handed out with rows in it), or when a worker still
    /// holds one of its connections (that worker would write into the next run's database).
    pub(crate) fn give_back(self) {
        if Arc::strong_count(&self.idle) > 1
            || self.keeper.sqlite().is_none_or(|store| store.empty_every_table().is_err())
        {
            return;
        }
        // During thread exit the pool may be gone: the database then simply closes.
        let _ = POOL.try_with(|pool| {
            let mut pool = pool.borrow_mut();
            if pool.len() < MAX_WARM_PER_THREAD {
                pool.push(self);
            }
        });
    }
}

/// A worker's connection: goes back to its database's idle list when the worker is dropped
/// (or crashes), where a plain connection would close. It holds no transaction across
/// calls (every store call runs to its end synchronously), so nothing carries over.
pub struct WorkerStore {
    store: Option<ClaimStore>,
    home: Option<Idle>,
}

impl WorkerStore {
    /// A connection that closes when dropped.
    pub(crate) fn owned(store: ClaimStore) -> Self {
        Self { store: Some(store), home: None }
    }

    /// An idle connection of `idle`, or a new one to `location`; it returns to `idle`.
    pub(crate) fn lent(idle: &Idle, location: &StoreLocation) -> Result<Self, StoreError> {
        let reused = idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let store = match reused {
            Some(store) => store,
            None => ClaimStore::open(location)?,
        };
        Ok(Self { store: Some(store), home: Some(Arc::clone(idle)) })
    }
}

impl Deref for WorkerStore {
    type Target = ClaimStore;

    fn deref(&self) -> &ClaimStore {
        self.store.as_ref().expect("a worker's connection is present until it is dropped")
    }
}

impl Drop for WorkerStore {
    fn drop(&mut self) {
        if let (Some(store), Some(home)) = (self.store.take(), self.home.take()) {
            home.lock().unwrap_or_else(PoisonError::into_inner).push(store);
        }
    }
}

impl std::fmt::Debug for WorkerStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerStore").field("lent", &self.home.is_some()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewClaim;
    use crate::store::Wait;

    fn claim(key: &str) -> NewClaim {
        NewClaim {
            tenant: "t".into(),
            operation_key: key.into(),
            tool_name: "create_ticket".into(),
            tool_version: "1".into(),
            request_fingerprint: "f".into(),
            downstream_key: None,
            owner_token: "w1".into(),
            now_ms: 10,
            lease_until_ms: 100,
            expires_at_ms: 1_000,
            request_json: None,
        }
    }

    #[test]
    fn a_database_given_back_comes_back_empty_with_its_idle_connections() {
        let warm = WarmDatabase::take().unwrap();
        let location = warm.location.clone();
        warm.keeper.claim(&claim("k1")).wait().unwrap();
        warm.keeper.record_reconciliation("t", "k1", 5, "found").wait().unwrap();
        {
            let worker = WorkerStore::lent(&warm.idle, &location).unwrap();
            assert_eq!(worker.records().wait().unwrap().len(), 1, "the worker sees the keeper's database");
        }
        assert_eq!(warm.idle.lock().unwrap().len(), 1, "a dropped worker's connection is idle, not closed");
        warm.give_back();

        let again = WarmDatabase::take().unwrap();
        assert_eq!(again.location, location, "the thread's pool hands the same database out again");
        assert!(again.keeper.records().wait().unwrap().is_empty());
        assert!(again.keeper.all_reconciliations().wait().unwrap().is_empty());
        let worker = WorkerStore::lent(&again.idle, &again.location).unwrap();
        assert!(again.idle.lock().unwrap().is_empty(), "the idle connection was lent again");
        assert!(worker.records().wait().unwrap().is_empty());
        drop(worker);
        again.give_back();
    }

    #[test]
    fn a_reused_database_assigns_the_same_ids_as_a_new_one() {
        fn ids(warm: &WarmDatabase) -> Vec<i64> {
            warm.keeper.record_reconciliation("t", "a", 1, "one").wait().unwrap();
            warm.keeper.record_reconciliation("t", "b", 2, "two").wait().unwrap();
            warm.keeper.all_reconciliations().wait().unwrap().iter().map(|found| found.id).collect()
        }
        let new = WarmDatabase::take().unwrap();
        let first = ids(&new);
        new.give_back();
        let reused = WarmDatabase::take().unwrap();
        assert_eq!(ids(&reused), first);
        reused.give_back();
    }

    #[test]
    fn a_database_a_worker_still_uses_is_not_reused() {
        let warm = WarmDatabase::take().unwrap();
        let location = warm.location.clone();
        let worker = WorkerStore::lent(&warm.idle, &location).unwrap();
        warm.give_back();
        let next = WarmDatabase::take().unwrap();
        assert_ne!(next.location, location, "the pool must not hand out a database a worker still writes to");
        worker.claim(&claim("late")).wait().unwrap();
        assert!(next.keeper.records().wait().unwrap().is_empty(), "the late write landed elsewhere");
        drop(worker);
        next.give_back();
    }

    #[test]
    fn an_owned_connection_is_not_given_back() {
        let warm = WarmDatabase::take().unwrap();
        let owned = WorkerStore::owned(ClaimStore::open(&warm.location).unwrap());
        drop(owned);
        assert!(warm.idle.lock().unwrap().is_empty());
        warm.give_back();
    }
}
