//! The Postgres backend of the claim store: the same table, the same statements' meaning, the
//! same compare-and-set writes as SQLite (see the module above), on a database that several
//! processes on several machines share.
//!
//! **Isolation: READ COMMITTED**, set on every session and relied on as follows. Every decision
//! is one single-row statement whose `WHERE` clause carries the whole condition (the primary
//! key, and for an owner's write the owner token and status; for a take-over the observed owner
//! and lease). Postgres runs such an `UPDATE` against the newest committed version of the row,
//! waiting for a concurrent writer of that row and checking the condition again after it
//! commits, so exactly one of several racing compare-and-sets changes the row. The claim is an
//! `INSERT .. ON CONFLICT DO NOTHING` decided by the primary key; one that meets an
//! uncommitted insert of the same key waits for it. The following `SELECT` takes a new snapshot
//! (READ COMMITTED takes one per statement) and so sees the winner's row. Stricter levels would
//! add serialization failures to retry and protect no invariant these statements do not
//! already keep. The two writes that touch two tables (`mark_unknown` with its
//! reconciliation row, `settle_job` with its notice) run in one transaction so that neither
//! half is seen alone.
//!
//! **Asynchronous, on the caller's runtime.** The store uses `tokio-postgres` on the tokio
//! runtime of the task that calls it: its connection (a session) is made on the runtime that
//! opened the store (else at the first call) and driven by a task on that runtime, so a call costs the round trips to the server and
//! no hand-over to another thread. One call runs at a time on a session (the calls of a
//! worker take turns, as on SQLite's single connection), so the statements of a transaction
//! never interleave with another call's. A session is made again when the runtime that drove
//! it is gone, or when a call was dropped inside a transaction. Statements are prepared once
//! per session and every value is a parameter.
//!
//! **Migrations** are applied at open, under a transaction-scoped advisory lock, so that
//! processes starting together do not race to create the same tables; each applied version
//! is recorded in `replaylab_schema_migrations`.
//!
//! Compiled with the `postgres` feature; the names and helpers every build has (schema names,
//! the test server's variable) are in `postgres_names.rs`.

use std::collections::HashMap;

use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Row, Statement};

use super::postgres_names::{valid_schema_name, without_password};
use super::{
    Claimed, NewClaim, OperationRecord, OwnedClaim, RawRecord, Reconciliation, StoreError, TakeOver,
};

/// `SELECT` of a whole record (the columns in [`super::RECORD_COLUMNS`]' order) followed by
/// `$tail`, as one literal: statements are cached by their text.
macro_rules! select_records {
    ($tail:literal) => {
        concat!(
            "SELECT tenant, operation_key, tool_name, tool_version, request_fingerprint, status, \
             effect_reference, response_json, owner_token, lease_until_ms, job_id, downstream_key, reason, \
             created_at_ms, updated_at_ms, expires_at_ms, request_json FROM tool_operations ",
            $tail
        )
    };
}

/// The schema, in order: version `n` is `MIGRATIONS[n - 1]`. Append; never edit an applied one.
const MIGRATIONS: &[&str] = &["
CREATE TABLE tool_operations (
    tenant              TEXT   NOT NULL,
    operation_key       TEXT   NOT NULL,
    tool_name           TEXT   NOT NULL,
    tool_version        TEXT   NOT NULL,
    request_fingerprint TEXT   NOT NULL,
    status              TEXT   NOT NULL CHECK (status IN
                            ('pending', 'applied', 'failed_permanent', 'unknown', 'tombstone')),
    effect_reference    TEXT,
    response_json       TEXT,
    owner_token         TEXT,
    lease_until_ms      BIGINT NOT NULL DEFAULT 0,
    job_id              TEXT,
    downstream_key      TEXT,
    reason              TEXT,
    created_at_ms       BIGINT NOT NULL,
    updated_at_ms       BIGINT NOT NULL,
    expires_at_ms       BIGINT NOT NULL,
    request_json        TEXT,
    PRIMARY KEY (tenant, operation_key)
);
-- Partial indexes: besides being smaller, a lookup by key cannot use them, so the planner
-- never prefers one of them (scanning a whole tenant) over the primary key; a generic plan
-- made while the table is empty and unanalysed did exactly that.
CREATE INDEX tool_operations_by_downstream_key ON tool_operations (tenant, downstream_key)
    WHERE downstream_key IS NOT NULL;
CREATE INDEX tool_operations_by_job ON tool_operations (tenant, job_id)
    WHERE job_id IS NOT NULL;
CREATE INDEX tool_operations_unsettled ON tool_operations (tenant, operation_key)
    WHERE status IN ('pending', 'unknown');
CREATE TABLE webhook_events (
    event_id       TEXT   PRIMARY KEY,
    tenant         TEXT   NOT NULL,
    operation_key  TEXT,
    received_at_ms BIGINT NOT NULL
);
CREATE TABLE reconciliations (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant        TEXT   NOT NULL,
    operation_key TEXT   NOT NULL,
    at_ms         BIGINT NOT NULL,
    finding       TEXT   NOT NULL
);
CREATE TABLE notices (
    tenant        TEXT   NOT NULL,
    operation_key TEXT   NOT NULL,
    job_id        TEXT   NOT NULL,
    claimed_at_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, operation_key)
);
"];

/// The advisory lock key that serialises migrations ("replaylb" in ASCII).
const MIGRATION_LOCK: i64 = 0x7265_706c_6179_6c62;

/// Milliseconds as the store keeps them (BIGINT; later than year 292 million saturates).
fn sql_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn read_ms(row: &Row, index: usize) -> u64 {
    u64::try_from(row.get::<_, i64>(index)).unwrap_or(0)
}

fn raw_record(row: &Row) -> RawRecord {
    RawRecord {
        record: OperationRecord {
            tenant: row.get(0),
            operation_key: row.get(1),
            tool_name: row.get(2),
            tool_version: row.get(3),
            request_fingerprint: row.get(4),
            status: super::RecordStatus::Pending,
            effect_reference: row.get(6),
            response_json: row.get(7),
            owner_token: row.get(8),
            lease_until_ms: read_ms(row, 9),
            job_id: row.get(10),
            downstream_key: row.get(11),
            reason: row.get(12),
            created_at_ms: read_ms(row, 13),
            updated_at_ms: read_ms(row, 14),
            expires_at_ms: read_ms(row, 15),
            request_json: row.get(16),
        },
        status_text: row.get(5),
    }
}

fn reconciliation(row: &Row) -> Reconciliation {
    Reconciliation {
        id: row.get(0),
        tenant: row.get(1),
        operation_key: row.get(2),
        at_ms: read_ms(row, 3),
        finding: row.get(4),
    }
}

/// A connection to the server, driven by a task on the runtime that made it, with the
/// statements prepared on it.
pub(crate) struct Session {
    pub(crate) client: Client,
    statements: HashMap<&'static str, Statement>,
    /// Set between `BEGIN` and its `COMMIT` or `ROLLBACK`: a call dropped in between leaves
    /// it set, and the session is then closed (the server rolls the transaction back).
    in_transaction: bool,
}

impl Session {
    /// `sql`, prepared once per session.
    async fn prepared(&mut self, sql: &'static str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Runs prepared `sql`; the number of rows it changed.
    async fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let statement = self.prepared(sql).await?;
        self.client.execute(&statement, params).await
    }

    async fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.prepared(sql).await?;
        self.client.query(&statement, params).await
    }

    async fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        let statement = self.prepared(sql).await?;
        self.client.query_opt(&statement, params).await
    }

    async fn begin(&mut self) -> Result<(), tokio_postgres::Error> {
        self.in_transaction = true;
        self.client.batch_execute("BEGIN").await
    }

    /// Ends the transaction `begin` opened: `COMMIT` after `Ok`, `ROLLBACK` after `Err`.
    async fn end<T>(
        &mut self,
        outcome: Result<T, tokio_postgres::Error>,
    ) -> Result<T, tokio_postgres::Error> {
        let ended = match &outcome {
            Ok(_) => self.client.batch_execute("COMMIT").await,
            // The connection may be gone; the error that matters is the first.
            Err(_) => self.client.batch_execute("ROLLBACK").await.or(Ok(())),
        };
        ended?;
        self.in_transaction = false;
        outcome
    }
}

/// A Postgres database (and schema) holding the store.
pub(crate) struct PostgresStore {
    config: Config,
    schema: Option<String>,
    location: String,
    /// The session, made at open when that is on a runtime (else at the first call); a call
    /// holds it until it is done.
    session: std::sync::Arc<Mutex<Option<Session>>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("location", &self.location).finish_non_exhaustive()
    }
}

/// Connects on the current runtime (which then drives the connection) and sets the session
/// up: READ COMMITTED, and the schema as the search path.
async fn connect(config: &Config, schema: Option<&str>) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    // The connection ends with an error when the server goes; the calls waiting on it see
    // the error themselves, and the next call connects again.
    tokio::spawn(async move { drop(connection.await) });
    let mut setup = String::from("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED");
    if let Some(schema) = schema {
        // The name was checked to be a plain identifier: it cannot be a parameter here.
        setup.push_str(&format!("; SET search_path TO {schema}"));
    }
    client.batch_execute(&setup).await?;
    Ok(client)
}

/// Creates the schema if needed and applies the migrations the database lacks, under the
/// migration lock.
async fn migrate(config: &Config, schema: Option<&str>) -> Result<(), tokio_postgres::Error> {
    let mut client = connect(config, None).await?;
    let transaction = client.transaction().await?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
    if let Some(schema) = schema {
        transaction
            .batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS {schema}; SET LOCAL search_path TO {schema}"
            ))
            .await?;
    }
    transaction
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS replaylab_schema_migrations (
                 version    INTEGER PRIMARY KEY,
                 applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             )",
        )
        .await?;
    let applied: i32 = transaction
        .query_one("SELECT COALESCE(MAX(version), 0) FROM replaylab_schema_migrations", &[])
        .await?
        .get(0);
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
        if version > applied {
            transaction.batch_execute(migration).await?;
            transaction
                .execute("INSERT INTO replaylab_schema_migrations (version) VALUES ($1)", &[&version])
                .await?;
        }
    }
    transaction.commit().await
}

impl PostgresStore {
    /// Connects to `url` (in `schema`, if given) and applies the migrations, on a thread and
    /// runtime of its own (the caller may be inside a runtime or not); the sessions that run
    /// the calls are made later, on the callers' runtime.
    pub(crate) fn open(url: &str, schema: Option<&str>) -> Result<Self, StoreError> {
        if let Some(schema) = schema.filter(|schema| !valid_schema_name(schema)) {
            return Err(StoreError::InvalidSchema(schema.to_owned()));
        }
        let location = match schema {
            Some(schema) => format!("postgres database {}, schema {schema}", without_password(url)),
            None => format!("postgres database {}", without_password(url)),
        };
        let failed = |source| StoreError::OpenPostgres { location: location.clone(), source };
        let config: Config = url.parse().map_err(failed)?;
        let migrated = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                    Ok::<_, std::io::Error>(runtime.block_on(migrate(&config, schema)))
                })
                .join()
        });
        match migrated {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(source))) => return Err(failed(source)),
            Ok(Err(error)) => {
                return Err(StoreError::PostgresMigrations {
                    location,
                    reason: format!("no runtime: {error}"),
                })
            }
            Err(_) => {
                return Err(StoreError::PostgresMigrations {
                    location,
                    reason: "their thread panicked".into(),
                })
            }
        }
        let schema = schema.map(str::to_owned);
        let session = std::sync::Arc::new(Mutex::new(None));
        if tokio::runtime::Handle::try_current().is_ok() {
            // Opened on a runtime (a worker's): connect on it now, so that the worker's first
            // calls (its start-up reconciliation) find the session ready, as they find a
            // SQLite connection. The slot stays locked until then; a failure leaves it empty
            // and the first call tries again.
            let mut slot = session.clone().try_lock_owned().expect("nobody else holds a new store's session");
            let (config, schema) = (config.clone(), schema.clone());
            tokio::spawn(async move {
                if let Ok(client) = connect(&config, schema.as_deref()).await {
                    *slot = Some(Session { client, statements: HashMap::new(), in_transaction: false });
                }
            });
        }
        Ok(Self { config, schema, location, session })
    }

    /// The session, for one call (`operation`): connected now if there is none, or if the
    /// one there can no longer serve (its runtime is gone, or a call was dropped inside a
    /// transaction). Must be called on a tokio runtime with I/O enabled.
    pub(crate) async fn session(
        &self,
        operation: &'static str,
    ) -> Result<MappedMutexGuard<'_, Session>, StoreError> {
        let mut slot = self.session.lock().await;
        if slot.as_ref().is_some_and(|session| session.client.is_closed() || session.in_transaction) {
            *slot = None;
        }
        if slot.is_none() {
            if tokio::runtime::Handle::try_current().is_err() {
                return Err(StoreError::PostgresRuntime(operation));
            }
            let client = connect(&self.config, self.schema.as_deref())
                .await
                .map_err(|source| StoreError::PostgresQuery { operation, source })?;
            *slot = Some(Session { client, statements: HashMap::new(), in_transaction: false });
        }
        Ok(MutexGuard::map(slot, |slot| slot.as_mut().expect("a session was just made")))
    }

    pub(crate) async fn claim(&self, claim: &NewClaim) -> Result<Claimed, StoreError> {
        let operation = "claim";
        let mut session = self.session(operation).await?;
        let failed = |source| StoreError::PostgresQuery { operation, source };
        loop {
            let inserted = session
                .execute(
                    "INSERT INTO tool_operations (tenant, operation_key, tool_name, tool_version, \
                     request_fingerprint, status, owner_token, lease_until_ms, downstream_key, \
                     created_at_ms, updated_at_ms, expires_at_ms, request_json) \
                     VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $9, $9, $10, $11) \
                     ON CONFLICT (tenant, operation_key) DO NOTHING",
                    &[
                        &claim.tenant,
                        &claim.operation_key,
                        &claim.tool_name,
                        &claim.tool_version,
                        &claim.request_fingerprint,
                        &claim.owner_token,
                        &sql_ms(claim.lease_until_ms),
                        &claim.downstream_key,
                        &sql_ms(claim.now_ms),
                        &sql_ms(claim.expires_at_ms),
                        &claim.request_json,
                    ],
                )
                .await
                .map_err(failed)?;
            if inserted == 1 {
                return Ok(Claimed::New(claim.to_record()));
            }
            // A new statement, a new snapshot: the row that won the conflict is visible. Only
            // a deletion in between (a mutant's `forget`) leaves none: then claim again.
            let found = session
                .query_opt(
                    select_records!("WHERE tenant = $1 AND operation_key = $2"),
                    &[&claim.tenant, &claim.operation_key],
                )
                .await
                .map_err(failed)?;
            if let Some(row) = found {
                return Ok(Claimed::Existing(super::checked(raw_record(&row))?));
            }
        }
    }

    pub(crate) async fn load(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let sql = select_records!("WHERE tenant = $1 AND operation_key = $2");
        self.one_of_tenant("load", sql, tenant, operation_key).await
    }

    pub(crate) async fn load_by_downstream_key(
        &self,
        tenant: &str,
        downstream_key: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let sql = select_records!("WHERE tenant = $1 AND downstream_key = $2 ORDER BY operation_key LIMIT 1");
        self.one_of_tenant("load by downstream key", sql, tenant, downstream_key).await
    }

    pub(crate) async fn load_by_job(
        &self,
        tenant: &str,
        job_id: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let sql = select_records!("WHERE tenant = $1 AND job_id = $2 ORDER BY operation_key LIMIT 1");
        self.one_of_tenant("load by job", sql, tenant, job_id).await
    }

    /// The record `sql` selects with `$1` = `tenant` and `$2` = `value`, if any.
    async fn one_of_tenant(
        &self,
        operation: &'static str,
        sql: &'static str,
        tenant: &str,
        value: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let mut session = self.session(operation).await?;
        let row = session
            .query_opt(sql, &[&tenant, &value])
            .await
            .map_err(|source| StoreError::PostgresQuery { operation, source })?;
        row.map(|row| super::checked(raw_record(&row))).transpose()
    }

    /// The records `sql` selects (no parameters).
    async fn all_records(
        &self,
        operation: &'static str,
        sql: &'static str,
    ) -> Result<Vec<OperationRecord>, StoreError> {
        let mut session = self.session(operation).await?;
        let rows = session
            .query(sql, &[])
            .await
            .map_err(|source| StoreError::PostgresQuery { operation, source })?;
        rows.iter().map(|row| super::checked(raw_record(row))).collect()
    }

    pub(crate) async fn records(&self) -> Result<Vec<OperationRecord>, StoreError> {
        self.all_records("list records", select_records!("ORDER BY tenant, operation_key")).await
    }

    pub(crate) async fn unsettled(&self) -> Result<Vec<OperationRecord>, StoreError> {
        let sql = select_records!(
            "WHERE status = 'unknown' \
                OR (status = 'pending' AND owner_token IS NOT NULL AND job_id IS NULL) \
             ORDER BY tenant, operation_key"
        );
        self.all_records("list unsettled records", sql).await
    }

    pub(crate) async fn give_up_job(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            "give up a job",
            "UPDATE tool_operations SET status = 'failed_permanent', reason = $4, request_json = NULL, \
             updated_at_ms = $5 \
             WHERE tenant = $1 AND operation_key = $2 AND job_id = $3 AND status = 'pending'",
            &[&tenant, &operation_key, &job_id, &reason, &sql_ms(now_ms)],
        )
        .await
    }

    pub(crate) async fn complete(
        &self,
        owned: &OwnedClaim,
        effect_reference: Option<&str>,
        response_json: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            "complete",
            "UPDATE tool_operations SET status = 'applied', effect_reference = $4, response_json = $5, \
             owner_token = NULL, lease_until_ms = 0, reason = NULL, request_json = NULL, updated_at_ms = $6 \
             WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
            &[
                &owned.tenant,
                &owned.operation_key,
                &owned.owner_token,
                &effect_reference,
                &response_json,
                &sql_ms(now_ms),
            ],
        )
        .await
    }

    pub(crate) async fn fail_permanent(
        &self,
        owned: &OwnedClaim,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            "fail",
            "UPDATE tool_operations SET status = 'failed_permanent', reason = $4, owner_token = NULL, \
             lease_until_ms = 0, request_json = NULL, updated_at_ms = $5 \
             WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
            &[&owned.tenant, &owned.operation_key, &owned.owner_token, &reason, &sql_ms(now_ms)],
        )
        .await
    }

    pub(crate) async fn mark_unknown(
        &self,
        owned: &OwnedClaim,
        finding: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let operation = "mark unknown";
        let mut session = self.session(operation).await?;
        let failed = |source| StoreError::PostgresQuery { operation, source };
        session.begin().await.map_err(failed)?;
        let outcome = async {
            let changed = session
                .execute(
                    "UPDATE tool_operations SET status = 'unknown', reason = $4, owner_token = NULL, \
                     lease_until_ms = 0, updated_at_ms = $5 \
                     WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
                    &[&owned.tenant, &owned.operation_key, &owned.owner_token, &finding, &sql_ms(now_ms)],
                )
                .await?;
            if changed == 1 {
                insert_reconciliation(&mut session, &owned.tenant, &owned.operation_key, now_ms, finding)
                    .await?;
            }
            Ok(changed == 1)
        }
        .await;
        session.end(outcome).await.map_err(failed)
    }

    pub(crate) async fn release(&self, owned: &OwnedClaim, now_ms: u64) -> Result<bool, StoreError> {
        self.changed_one(
            "release",
            "UPDATE tool_operations SET owner_token = NULL, lease_until_ms = 0, updated_at_ms = $4 \
             WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
            &[&owned.tenant, &owned.operation_key, &owned.owner_token, &sql_ms(now_ms)],
        )
        .await
    }

    pub(crate) async fn set_job(
        &self,
        owned: &OwnedClaim,
        job_id: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            "set job",
            "UPDATE tool_operations SET job_id = $4, owner_token = NULL, lease_until_ms = 0, \
             updated_at_ms = $5 \
             WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
            &[&owned.tenant, &owned.operation_key, &owned.owner_token, &job_id, &sql_ms(now_ms)],
        )
        .await
    }

    pub(crate) async fn take_over(&self, t: &TakeOver) -> Result<bool, StoreError> {
        self.changed_one(
            "take over",
            "UPDATE tool_operations SET status = 'pending', owner_token = $5, lease_until_ms = $6, \
             updated_at_ms = $7 \
             WHERE tenant = $1 AND operation_key = $2 AND owner_token IS NOT DISTINCT FROM $3 \
             AND lease_until_ms = $4 AND lease_until_ms <= $7 AND job_id IS NULL \
             AND status IN ('pending', 'unknown')",
            &[
                &t.tenant,
                &t.operation_key,
                &t.observed_owner,
                &sql_ms(t.observed_lease_until_ms),
                &t.new_owner,
                &sql_ms(t.lease_until_ms),
                &sql_ms(t.now_ms),
            ],
        )
        .await
    }

    pub(crate) async fn settle_job(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        response_json: &str,
        now_ms: u64,
        notice_due: bool,
    ) -> Result<bool, StoreError> {
        let operation = "settle job";
        let mut session = self.session(operation).await?;
        let failed = |source| StoreError::PostgresQuery { operation, source };
        session.begin().await.map_err(failed)?;
        let outcome = async {
            let changed = session
                .execute(
                    "UPDATE tool_operations SET status = 'applied', job_id = $3, effect_reference = $3, \
                     response_json = $4, owner_token = NULL, lease_until_ms = 0, reason = NULL, \
                     request_json = NULL, updated_at_ms = $5 \
                     WHERE tenant = $1 AND operation_key = $2 AND status IN ('pending', 'unknown') \
                     AND (job_id IS NULL OR job_id = $3)",
                    &[&tenant, &operation_key, &job_id, &response_json, &sql_ms(now_ms)],
                )
                .await?;
            if changed == 1 && notice_due {
                session
                    .execute(
                        "INSERT INTO notices (tenant, operation_key, job_id, claimed_at_ms) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (tenant, operation_key) DO UPDATE SET job_id = $3, claimed_at_ms = $4",
                        &[&tenant, &operation_key, &job_id, &sql_ms(now_ms)],
                    )
                    .await?;
            }
            Ok(changed == 1)
        }
        .await;
        session.end(outcome).await.map_err(failed)
    }

    pub(crate) async fn due_notice(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Option<(String, u64)>, StoreError> {
        let operation = "load due notice";
        let mut session = self.session(operation).await?;
        let row = session
            .query_opt(
                "SELECT job_id, claimed_at_ms FROM notices WHERE tenant = $1 AND operation_key = $2",
                &[&tenant, &operation_key],
            )
            .await
            .map_err(|source| StoreError::PostgresQuery { operation, source })?;
        Ok(row.map(|row| (row.get(0), read_ms(&row, 1))))
    }

    pub(crate) async fn claim_notice(
        &self,
        tenant: &str,
        operation_key: &str,
        observed_claimed_at_ms: u64,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            "claim notice",
            "UPDATE notices SET claimed_at_ms = $4 \
             WHERE tenant = $1 AND operation_key = $2 AND claimed_at_ms = $3",
            &[&tenant, &operation_key, &sql_ms(observed_claimed_at_ms), &sql_ms(now_ms)],
        )
        .await
    }

    pub(crate) async fn notice_done(&self, tenant: &str, operation_key: &str) -> Result<bool, StoreError> {
        self.changed_one(
            "notice done",
            "DELETE FROM notices WHERE tenant = $1 AND operation_key = $2",
            &[&tenant, &operation_key],
        )
        .await
    }

    pub(crate) async fn write_job_result(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        response_json: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            "write job result",
            "UPDATE tool_operations SET status = 'applied', job_id = $3, effect_reference = $3, \
             response_json = $4, owner_token = NULL, lease_until_ms = 0, reason = NULL, request_json = NULL, \
             updated_at_ms = $5 \
             WHERE tenant = $1 AND operation_key = $2",
            &[&tenant, &operation_key, &job_id, &response_json, &sql_ms(now_ms)],
        )
        .await
    }

    pub(crate) async fn tombstone(
        &self,
        tenant: &str,
        operation_key: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            "tombstone",
            "UPDATE tool_operations SET status = 'tombstone', response_json = NULL, request_json = NULL, \
             owner_token = NULL, lease_until_ms = 0, updated_at_ms = $3 \
             WHERE tenant = $1 AND operation_key = $2 AND status IN ('applied', 'failed_permanent')",
            &[&tenant, &operation_key, &sql_ms(now_ms)],
        )
        .await
    }

    pub(crate) async fn forget(&self, tenant: &str, operation_key: &str) -> Result<bool, StoreError> {
        self.changed_one(
            "forget",
            "DELETE FROM tool_operations WHERE tenant = $1 AND operation_key = $2",
            &[&tenant, &operation_key],
        )
        .await
    }

    pub(crate) async fn record_event(
        &self,
        event_id: &str,
        tenant: &str,
        operation_key: Option<&str>,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            "record event",
            "INSERT INTO webhook_events (event_id, tenant, operation_key, received_at_ms) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO NOTHING",
            &[&event_id, &tenant, &operation_key, &sql_ms(now_ms)],
        )
        .await
    }

    pub(crate) async fn record_reconciliation(
        &self,
        tenant: &str,
        operation_key: &str,
        at_ms: u64,
        finding: &str,
    ) -> Result<(), StoreError> {
        let operation = "record reconciliation";
        let mut session = self.session(operation).await?;
        insert_reconciliation(&mut session, tenant, operation_key, at_ms, finding)
            .await
            .map(|_| ())
            .map_err(|source| StoreError::PostgresQuery { operation, source })
    }

    pub(crate) async fn all_reconciliations(&self) -> Result<Vec<Reconciliation>, StoreError> {
        self.reconciliations_of(
            "SELECT id, tenant, operation_key, at_ms, finding FROM reconciliations ORDER BY id",
            &[],
        )
        .await
    }

    pub(crate) async fn reconciliations(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Vec<Reconciliation>, StoreError> {
        self.reconciliations_of(
            "SELECT id, tenant, operation_key, at_ms, finding FROM reconciliations \
             WHERE tenant = $1 AND operation_key = $2 ORDER BY id",
            &[&tenant, &operation_key],
        )
        .await
    }

    async fn reconciliations_of(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Reconciliation>, StoreError> {
        let operation = "list reconciliations";
        let mut session = self.session(operation).await?;
        let rows = session
            .query(sql, params)
            .await
            .map_err(|source| StoreError::PostgresQuery { operation, source })?;
        Ok(rows.iter().map(reconciliation).collect())
    }

    /// Drops `schema` and everything in it (the benchmark's own schemas).
    pub(crate) async fn drop_schema(&self, schema: &str) -> Result<(), StoreError> {
        if !valid_schema_name(schema) {
            return Err(StoreError::InvalidSchema(schema.to_owned()));
        }
        self.batch("drop a schema", &format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await
    }

    /// Runs `sql` as a simple query (no parameters, nothing prepared).
    async fn batch(&self, operation: &'static str, sql: &str) -> Result<(), StoreError> {
        let session = self.session(operation).await?;
        session
            .client
            .batch_execute(sql)
            .await
            .map_err(|source| StoreError::PostgresQuery { operation, source })
    }

    /// Runs one write and answers whether it changed exactly one row.
    async fn changed_one(
        &self,
        operation: &'static str,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<bool, StoreError> {
        let mut session = self.session(operation).await?;
        let changed = session
            .execute(sql, params)
            .await
            .map_err(|source| StoreError::PostgresQuery { operation, source })?;
        Ok(changed == 1)
    }
}

async fn insert_reconciliation(
    session: &mut Session,
    tenant: &str,
    operation_key: &str,
    at_ms: u64,
    finding: &str,
) -> Result<u64, tokio_postgres::Error> {
    session
        .execute(
            "INSERT INTO reconciliations (tenant, operation_key, at_ms, finding) VALUES ($1, $2, $3, $4)",
            &[&tenant, &operation_key, &sql_ms(at_ms), &finding],
        )
        .await
}
