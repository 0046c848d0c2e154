//! How much the claim store's safety costs: its claim-and-complete path against the plain
//! hand-written statements that do the same writes, on the same kind of database file.
//!
//! Benchmarks never run inside a simulation, so wall-clock time ([`std::time::Instant`]) is
//! fine here.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::params;

use crate::store::{ClaimStore, Claimed, NewClaim, OwnedClaim, StoreError, StoreLocation};

/// The two paths run in this many alternating rounds, each first in half of them, so that
/// neither gets all the warm caches or all the disk noise.
const ROUNDS: u64 = 4;

/// Operations run on each path before measuring (statement caches, page cache, WAL file).
const WARM_UP_OPERATIONS: u64 = 200;

/// What [`store_bench`] measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreBench {
    /// Operations per path.
    pub operations: u64,
    /// Claim + complete through [`ClaimStore`], per second.
    pub claims_per_second: f64,
    /// Hand-written `INSERT .. ON CONFLICT DO NOTHING` + `UPDATE` of the same rows, per second.
    pub raw_inserts_per_second: f64,
    /// `claims_per_second / raw_inserts_per_second` (the target is at least 0.8).
    pub ratio: f64,
}

/// Where [`store_bench`] measures.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BenchStore {
    /// Two temporary SQLite files (WAL, `synchronous=NORMAL`), removed afterwards.
    SqliteFiles,
    /// Two fresh schemas in this Postgres database (the URL), dropped afterwards.
    Postgres(String),
}

/// Runs `operations` claim-and-complete operations through the store and the same number of
/// hand-written insert-and-update pairs, each on its own database of the same kind (`on`),
/// and compares their rates. Both paths run as a task on a current-thread tokio runtime's
/// `LocalSet`, as a worker of `executor serve` runs its calls: the store's calls are awaited
/// like the hand-written ones.
pub fn store_bench(operations: u64, on: &BenchStore) -> Result<StoreBench, StoreError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| StoreError::BenchFile { path: "(the benchmark's tokio runtime)".into(), source })?;
    let on = on.clone();
    let local = tokio::task::LocalSet::new();
    let measured =
        local.block_on(&runtime, async move { tokio::task::spawn_local(bench_on(operations, on)).await });
    measured.unwrap_or_else(|panicked| std::panic::resume_unwind(panicked.into_panic()))
}

async fn bench_on(operations: u64, on: BenchStore) -> Result<StoreBench, StoreError> {
    match on {
        BenchStore::SqliteFiles => {
            let directory = BenchDirectory::create()?;
            let store = ClaimStore::open(&StoreLocation::File(directory.file("store.db")))?;
            let raw = ClaimStore::open(&StoreLocation::File(directory.file("raw.db")))?;
            measure(operations, &store, &raw).await
        }
        BenchStore::Postgres(url) => {
            let schemas =
                [crate::store::fresh_schema("bench_store"), crate::store::fresh_schema("bench_raw")];
            let open = |schema: &str| {
                ClaimStore::open(&StoreLocation::Postgres {
                    url: url.clone(),
                    schema: Some(schema.to_owned()),
                })
            };
            let (store, raw) = (open(&schemas[0])?, open(&schemas[1])?);
            let measured = measure(operations, &store, &raw).await;
            #[cfg(feature = "postgres")]
            for (connection, schema) in [(&store, &schemas[0]), (&raw, &schemas[1])] {
                if let Some(postgres) = connection.postgres() {
                    // A schema left behind is harmless; the measurement is what counts.
                    let _ = postgres.drop_schema(schema).await;
                }
            }
            measured
        }
    }
}

async fn measure(operations: u64, store: &ClaimStore, raw: &ClaimStore) -> Result<StoreBench, StoreError> {
    let operations = operations.max(ROUNDS);
    store_path(store, &claims("warm", WARM_UP_OPERATIONS)).await?;
    raw_path(raw, &claims("warm", WARM_UP_OPERATIONS)).await?;
    let per_round = operations / ROUNDS;
    let (mut store_time, mut raw_time) = (Duration::ZERO, Duration::ZERO);
    for round in 0..ROUNDS {
        // Each path goes first in half the rounds: the one after meets the database busy
        // with what the first left behind (dirty pages, WAL to write).
        let batch = claims(&format!("round{round}"), per_round);
        if round % 2 == 0 {
            raw_time += raw_path(raw, &batch).await?;
            store_time += store_path(store, &batch).await?;
        } else {
            store_time += store_path(store, &batch).await?;
            raw_time += raw_path(raw, &batch).await?;
        }
    }
    let measured = (per_round * ROUNDS) as f64;
    let claims_per_second = measured / store_time.as_secs_f64().max(f64::EPSILON);
    let raw_inserts_per_second = measured / raw_time.as_secs_f64().max(f64::EPSILON);
    Ok(StoreBench {
        operations: per_round * ROUNDS,
        claims_per_second,
        raw_inserts_per_second,
        ratio: claims_per_second / raw_inserts_per_second,
    })
}

/// The hand-written path on `raw`'s backend.
async fn raw_path(raw: &ClaimStore, claims: &[NewClaim]) -> Result<Duration, StoreError> {
    #[cfg(feature = "postgres")]
    if raw.postgres().is_some() {
        return raw_path_postgres(raw, claims).await;
    }
    raw_path_sqlite(raw, claims)
}

fn claims(prefix: &str, count: u64) -> Vec<NewClaim> {
    (0..count)
        .map(|index| NewClaim {
            tenant: "bench".into(),
            operation_key: format!("bench:production:{prefix}:step_{index}"),
            tool_name: "tickets.create".into(),
            tool_version: "2026-08-18".into(),
            request_fingerprint:
                "jcs-v1:sha256:0000000000000000000000000000000000000000000000000000000000000000".into(),
            downstream_key: Some(format!("bench:production:{prefix}:step_{index}")),
            owner_token: format!("bench-0-{index:016x}"),
            now_ms: index,
            lease_until_ms: index + 5_000,
            expires_at_ms: index + 60_000,
            request_json: Some(format!(
                r#"{{"tenant":"bench","environment":"production","workflow_id":"{prefix}","step_id":"step_{index}","tool":"tickets.create","tool_version":"2026-08-18","arguments":{{"queue":"support","subject":"Refund request","body":"Customer reports a duplicate charge."}},"actor":"agent","call_id":"call_{index}","attempt":1}}"#
            )),
        })
        .collect()
}

fn response(claim: &NewClaim) -> String {
    format!(r#"{{"ticket_id":"ticket_{}","version":1,"status":"open"}}"#, claim.now_ms)
}

async fn store_path(store: &ClaimStore, claims: &[NewClaim]) -> Result<Duration, StoreError> {
    let started = Instant::now();
    for claim in claims {
        let Claimed::New(record) = store.claim(claim).await? else {
            panic!("benchmark keys are fresh, yet {} was already claimed", claim.operation_key)
        };
        let owned = OwnedClaim {
            tenant: record.tenant,
            operation_key: record.operation_key,
            owner_token: claim.owner_token.clone(),
            lease_until_ms: claim.lease_until_ms,
        };
        let reference = format!("ticket_{}", claim.now_ms);
        assert!(
            store.complete(&owned, Some(&reference), &response(claim), claim.now_ms + 1).await?,
            "the owner completes"
        );
    }
    Ok(started.elapsed())
}

fn raw_path_sqlite(raw: &ClaimStore, claims: &[NewClaim]) -> Result<Duration, StoreError> {
    let failed =
        |source| StoreError::Query { operation: "run the hand-written benchmark statements", source };
    let connection = &raw.sqlite().expect("the raw path's store is a SQLite file").connection;
    let started = Instant::now();
    for claim in claims {
        connection
            .prepare_cached(
                "INSERT INTO tool_operations (tenant, operation_key, tool_name, tool_version, \
                 request_fingerprint, status, owner_token, lease_until_ms, downstream_key, \
                 created_at_ms, updated_at_ms, expires_at_ms, request_json) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7, ?8, ?9, ?9, ?10, ?11) \
                 ON CONFLICT (tenant, operation_key) DO NOTHING",
            )
            .and_then(|mut insert| {
                insert.execute(params![
                    claim.tenant,
                    claim.operation_key,
                    claim.tool_name,
                    claim.tool_version,
                    claim.request_fingerprint,
                    claim.owner_token,
                    claim.lease_until_ms as i64,
                    claim.downstream_key,
                    claim.now_ms as i64,
                    claim.expires_at_ms as i64,
                    claim.request_json,
                ])
            })
            .map_err(failed)?;
        connection
            .prepare_cached(
                "UPDATE tool_operations SET status = 'applied', effect_reference = ?4, response_json = ?5, \
                 owner_token = NULL, lease_until_ms = 0, request_json = NULL, updated_at_ms = ?6 \
                 WHERE tenant = ?1 AND operation_key = ?2 AND owner_token = ?3",
            )
            .and_then(|mut update| {
                update.execute(params![
                    claim.tenant,
                    claim.operation_key,
                    claim.owner_token,
                    format!("ticket_{}", claim.now_ms),
                    response(claim),
                    (claim.now_ms + 1) as i64,
                ])
            })
            .map_err(failed)?;
    }
    Ok(started.elapsed())
}

#[cfg(feature = "postgres")]
/// The hand-written statements on Postgres: the same insert and update, prepared once, on a
/// connection of the store's own (made on this runtime, as a program owning its connection
/// would).
async fn raw_path_postgres(raw: &ClaimStore, claims: &[NewClaim]) -> Result<Duration, StoreError> {
    let operation = "run the hand-written benchmark statements";
    let failed = |source| StoreError::PostgresQuery { operation, source };
    let postgres = raw.postgres().expect("the raw path's store is a Postgres schema");
    let session = postgres.session(operation).await?;
    let client = &session.client;
    let insert = client
        .prepare(
            "INSERT INTO tool_operations (tenant, operation_key, tool_name, tool_version, \
             request_fingerprint, status, owner_token, lease_until_ms, downstream_key, \
             created_at_ms, updated_at_ms, expires_at_ms, request_json) \
             VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $9, $9, $10, $11) \
             ON CONFLICT (tenant, operation_key) DO NOTHING",
        )
        .await
        .map_err(failed)?;
    let update = client
        .prepare(
            "UPDATE tool_operations SET status = 'applied', effect_reference = $4, response_json = $5, \
             owner_token = NULL, lease_until_ms = 0, request_json = NULL, updated_at_ms = $6 \
             WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3",
        )
        .await
        .map_err(failed)?;
    let started = Instant::now();
    for claim in claims {
        client
            .execute(
                &insert,
                &[
                    &claim.tenant,
                    &claim.operation_key,
                    &claim.tool_name,
                    &claim.tool_version,
                    &claim.request_fingerprint,
                    &claim.owner_token,
                    &(claim.lease_until_ms as i64),
                    &claim.downstream_key,
                    &(claim.now_ms as i64),
                    &(claim.expires_at_ms as i64),
                    &claim.request_json,
                ],
            )
            .await
            .map_err(failed)?;
        client
            .execute(
                &update,
                &[
                    &claim.tenant,
                    &claim.operation_key,
                    &claim.owner_token,
                    &format!("ticket_{}", claim.now_ms),
                    &response(claim),
                    &((claim.now_ms + 1) as i64),
                ],
            )
            .await
            .map_err(failed)?;
    }
    Ok(started.elapsed())
}

/// A fresh directory under the system's temporary directory, removed on drop.
struct BenchDirectory {
    path: PathBuf,
}

impl BenchDirectory {
    fn create() -> Result<Self, StoreError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name =
            format!("replaylab-store-bench-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(name);
        let failed = |source| StoreError::BenchFile { path: path.display().to_string(), source };
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(failed)?;
        }
        std::fs::create_dir_all(&path).map_err(failed)?;
        Ok(Self { path })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BenchDirectory {
    fn drop(&mut self) {
        // Leftover temporary files are harmless; failing to remove them is not an error.
        let _ = std::fs::remove_dir_all(self.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_measures_both_paths_and_cleans_up() {
        let bench = store_bench(400, &BenchStore::SqliteFiles).unwrap();
        assert_eq!(bench.operations, 400);
        assert!(bench.claims_per_second > 0.0 && bench.raw_inserts_per_second > 0.0, "{bench:?}");
        assert!((bench.ratio - bench.claims_per_second / bench.raw_inserts_per_second).abs() < 1e-9);
    }
}
