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
//! **Synchronous, on its own thread.** The store's interface is synchronous (each call is
//! one short statement, run between the worker's gate points). The `postgres` client blocks
//! on its own runtime, which may not run inside the worker's; so one thread per store holds
//! the connection and runs each call, and the caller waits for the answer (as it waits for
//! SQLite). Statements are prepared once per connection and every value is a parameter.
//!
//! **Migrations** are applied at open, under a transaction-scoped advisory lock, so that
//! processes starting together do not race to create the same tables; each applied version
//! is recorded in `replaylab_schema_migrations`.

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread::JoinHandle;

use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement};

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

/// Whether `name` can be a schema of the store: 1 to 63 of `a-z`, `0-9`, `_`, not starting
/// with a digit or `pg_` (it is written into `CREATE SCHEMA` and `search_path` as is).
pub fn valid_schema_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && !name.starts_with("pg_")
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The environment variable that names a Postgres server for the tests that need one.
pub const TEST_POSTGRES_ENV: &str = "REPLAYLAB_TEST_POSTGRES";

/// The Postgres server tests should use (`REPLAYLAB_TEST_POSTGRES`). Unset, a test that needs
/// it says so on stderr, with how to start one, and is skipped by returning `None`; but under
/// CI (`CI` set) it panics: CI never skips them.
pub fn test_postgres(test: &str) -> Option<String> {
    match std::env::var(TEST_POSTGRES_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{test}: {TEST_POSTGRES_ENV} is not set; CI must run the Postgres tests (.ci/run starts a cluster)")
        }
        _ => {
            eprintln!(
                "{test}: skipped, no Postgres: start one with `.ci/postgres start /tmp/replaylab-pg` and set \
                 {TEST_POSTGRES_ENV}=\"$(cat /tmp/replaylab-pg/url)\""
            );
            None
        }
    }
}

/// A schema name no other call in this process made: `prefix`, the process id and a counter.
pub fn fresh_schema(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let prefix: String = prefix
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .take(32)
        .collect();
    format!("{prefix}_{}_{number}", std::process::id())
}

/// `url` with any password replaced by `***`, for messages.
pub(crate) fn without_password(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((credentials, host)) = rest.rsplit_once('@') {
            if let Some((user, _)) = credentials.split_once(':') {
                return format!("{scheme}://{user}:***@{host}");
            }
        }
        return url.to_owned();
    }
    // libpq's key=value form.
    url.split_whitespace()
        .map(|pair| if pair.starts_with("password=") { "password=***" } else { pair })
        .collect::<Vec<_>>()
        .join(" ")
}

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

fn records(rows: Vec<Row>) -> Result<Vec<OperationRecord>, StoreError> {
    rows.iter().map(|row| super::checked(raw_record(row))).collect()
}

fn one_record(row: Option<Row>) -> Result<Option<OperationRecord>, StoreError> {
    row.map(|row| super::checked(raw_record(&row))).transpose()
}

/// The connection and its prepared statements, owned by the store's thread.
pub(crate) struct Connection {
    client: Client,
    statements: HashMap<&'static str, Statement>,
}

impl Connection {
    /// `sql`, prepared once per connection.
    fn prepared(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Runs prepared `sql`; the number of rows it changed.
    pub(crate) fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        let statement = self.prepared(sql)?;
        self.client.execute(&statement, params)
    }

    fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let statement = self.prepared(sql)?;
        self.client.query(&statement, params)
    }

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        let statement = self.prepared(sql)?;
        self.client.query_opt(&statement, params)
    }

    /// Runs `work` in one transaction (READ COMMITTED), committed when it returns `Ok`.
    fn in_transaction<T>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        self.client.batch_execute("BEGIN")?;
        match work(self) {
            Ok(value) => {
                self.client.batch_execute("COMMIT")?;
                Ok(value)
            }
            Err(error) => {
                // The connection may be gone; the error that matters is the first.
                let _ = self.client.batch_execute("ROLLBACK");
                Err(error)
            }
        }
    }
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// A Postgres connection on its own thread.
pub(crate) struct PostgresStore {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    location: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("location", &self.location).finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // Closing the channel ends the thread, which closes the connection.
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Connects, sets the session up and applies the migrations this database lacks.
fn connect(url: &str, schema: Option<&str>) -> Result<Connection, postgres::Error> {
    let config: postgres::Config = url.parse()?;
    let mut client = config.connect(NoTls)?;
    client.batch_execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED")?;
    let mut transaction = client.transaction()?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    if let Some(schema) = schema {
        // The name was checked to be a plain identifier: it cannot be a parameter here.
        transaction
            .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path TO {schema}"))?;
    }
    transaction.batch_execute(
        "CREATE TABLE IF NOT EXISTS replaylab_schema_migrations (
             version    INTEGER PRIMARY KEY,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )?;
    let applied: i32 = transaction
        .query_one("SELECT COALESCE(MAX(version), 0) FROM replaylab_schema_migrations", &[])?
        .get(0);
    for (index, migration) in MIGRATIONS.iter().enumerate() {
        let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
        if version > applied {
            transaction.batch_execute(migration)?;
            transaction
                .execute("INSERT INTO replaylab_schema_migrations (version) VALUES ($1)", &[&version])?;
        }
    }
    transaction.commit()?;
    if let Some(schema) = schema {
        // `SET` inside the transaction lasts beyond it only when not `LOCAL`; set it again to
        // be plain about the session's search path.
        client.batch_execute(&format!("SET search_path TO {schema}"))?;
    }
    Ok(Connection { client, statements: HashMap::new() })
}

impl PostgresStore {
    /// Connects to `url` (in `schema`, if given) and applies the migrations.
    pub(crate) fn open(url: &str, schema: Option<&str>) -> Result<Self, StoreError> {
        if let Some(schema) = schema.filter(|schema| !valid_schema_name(schema)) {
            return Err(StoreError::InvalidSchema(schema.to_owned()));
        }
        let location = match schema {
            Some(schema) => format!("postgres database {}, schema {schema}", without_password(url)),
            None => format!("postgres database {}", without_password(url)),
        };
        let (url, schema) = (url.to_owned(), schema.map(str::to_owned));
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, opened) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("claim-store-postgres".into())
            .spawn(move || {
                let mut connection = match connect(&url, schema.as_deref()) {
                    Ok(connection) => {
                        let _ = ready.send(Ok(()));
                        connection
                    }
                    Err(error) => {
                        let _ = ready.send(Err(error));
                        return;
                    }
                };
                for job in queue {
                    job(&mut connection);
                }
            })
            .map_err(|_| StoreError::PostgresGone("start the connection thread"))?;
        match opened.recv() {
            Ok(Ok(())) => Ok(Self { jobs: Some(jobs), thread: Some(thread), location }),
            Ok(Err(source)) => {
                let _ = thread.join();
                Err(StoreError::OpenPostgres { location, source })
            }
            Err(_) => Err(StoreError::PostgresGone("connect")),
        }
    }

    /// Runs `work` on the connection's thread and waits for its answer.
    pub(crate) fn run<T: Send + 'static>(
        &self,
        operation: &'static str,
        work: impl FnOnce(&mut Connection) -> Result<T, postgres::Error> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (answer, answered) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |connection| {
            let _ = answer.send(work(connection));
        });
        let jobs = self.jobs.as_ref().ok_or(StoreError::PostgresGone(operation))?;
        jobs.send(job).map_err(|_| StoreError::PostgresGone(operation))?;
        answered
            .recv()
            .map_err(|_| StoreError::PostgresGone(operation))?
            .map_err(|source| StoreError::PostgresQuery { operation, source })
    }

    pub(crate) fn claim(&self, claim: &NewClaim) -> Result<Claimed, StoreError> {
        let new = claim.clone();
        let raw = self.run("claim", move |connection| loop {
            let inserted = connection.execute(
                "INSERT INTO tool_operations (tenant, operation_key, tool_name, tool_version, \
                 request_fingerprint, status, owner_token, lease_until_ms, downstream_key, \
                 created_at_ms, updated_at_ms, expires_at_ms, request_json) \
                 VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8, $9, $9, $10, $11) \
                 ON CONFLICT (tenant, operation_key) DO NOTHING",
                &[
                    &new.tenant,
                    &new.operation_key,
                    &new.tool_name,
                    &new.tool_version,
                    &new.request_fingerprint,
                    &new.owner_token,
                    &sql_ms(new.lease_until_ms),
                    &new.downstream_key,
                    &sql_ms(new.now_ms),
                    &sql_ms(new.expires_at_ms),
                    &new.request_json,
                ],
            )?;
            if inserted == 1 {
                return Ok(None);
            }
            // A new statement, a new snapshot: the row that won the conflict is visible. Only
            // a deletion in between (a mutant's `forget`) leaves none: then claim again.
            let found = connection.query_opt(
                select_records!("WHERE tenant = $1 AND operation_key = $2"),
                &[&new.tenant, &new.operation_key],
            )?;
            if let Some(row) = found {
                return Ok(Some(raw_record(&row)));
            }
        })?;
        match raw {
            None => Ok(Claimed::New(claim.to_record())),
            Some(raw) => Ok(Claimed::Existing(super::checked(raw)?)),
        }
    }

    pub(crate) fn load(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        self.one_of_tenant(
            "load",
            select_records!("WHERE tenant = $1 AND operation_key = $2"),
            tenant,
            operation_key,
        )
    }

    pub(crate) fn load_by_downstream_key(
        &self,
        tenant: &str,
        downstream_key: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let sql = select_records!("WHERE tenant = $1 AND downstream_key = $2 ORDER BY operation_key LIMIT 1");
        self.one_of_tenant("load by downstream key", sql, tenant, downstream_key)
    }

    pub(crate) fn load_by_job(
        &self,
        tenant: &str,
        job_id: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let sql = select_records!("WHERE tenant = $1 AND job_id = $2 ORDER BY operation_key LIMIT 1");
        self.one_of_tenant("load by job", sql, tenant, job_id)
    }

    /// The record `sql` selects with `$1` = `tenant` and `$2` = `value`, if any.
    fn one_of_tenant(
        &self,
        operation: &'static str,
        sql: &'static str,
        tenant: &str,
        value: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        let (tenant, value) = (tenant.to_owned(), value.to_owned());
        one_record(self.run(operation, move |c| c.query_opt(sql, &[&tenant, &value]))?)
    }

    pub(crate) fn records(&self) -> Result<Vec<OperationRecord>, StoreError> {
        records(
            self.run("list records", |c| c.query(select_records!("ORDER BY tenant, operation_key"), &[]))?,
        )
    }

    pub(crate) fn unsettled(&self) -> Result<Vec<OperationRecord>, StoreError> {
        records(self.run("list unsettled records", |c| {
            c.query(
                select_records!(
                    "WHERE status = 'unknown' \
                        OR (status = 'pending' AND owner_token IS NOT NULL AND job_id IS NULL) \
                     ORDER BY tenant, operation_key"
                ),
                &[],
            )
        })?)
    }

    pub(crate) fn give_up_job(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let values = (tenant.to_owned(), operation_key.to_owned(), job_id.to_owned(), reason.to_owned());
        self.changed_one("give up a job", move |c| {
            let (tenant, key, job_id, reason) = &values;
            c.execute(
                "UPDATE tool_operations SET status = 'failed_permanent', reason = $4, request_json = NULL, \
                 updated_at_ms = $5 \
                 WHERE tenant = $1 AND operation_key = $2 AND job_id = $3 AND status = 'pending'",
                &[tenant, key, job_id, reason, &sql_ms(now_ms)],
            )
        })
    }

    pub(crate) fn complete(
        &self,
        owned: &OwnedClaim,
        effect_reference: Option<&str>,
        response_json: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let owned = owned.clone();
        let (reference, response) = (effect_reference.map(str::to_owned), response_json.to_owned());
        self.changed_one("complete", move |c| {
            c.execute(
                "UPDATE tool_operations SET status = 'applied', effect_reference = $4, response_json = $5, \
                 owner_token = NULL, lease_until_ms = 0, reason = NULL, request_json = NULL, updated_at_ms = $6 \
                 WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
                &[&owned.tenant, &owned.operation_key, &owned.owner_token, &reference, &response, &sql_ms(now_ms)],
            )
        })
    }

    pub(crate) fn fail_permanent(
        &self,
        owned: &OwnedClaim,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let (owned, reason) = (owned.clone(), reason.to_owned());
        self.changed_one("fail", move |c| {
            c.execute(
                "UPDATE tool_operations SET status = 'failed_permanent', reason = $4, owner_token = NULL, \
                 lease_until_ms = 0, request_json = NULL, updated_at_ms = $5 \
                 WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
                &[&owned.tenant, &owned.operation_key, &owned.owner_token, &reason, &sql_ms(now_ms)],
            )
        })
    }

    pub(crate) fn mark_unknown(
        &self,
        owned: &OwnedClaim,
        finding: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let (owned, finding) = (owned.clone(), finding.to_owned());
        self.run("mark unknown", move |c| {
            c.in_transaction(|c| {
                let changed = c.execute(
                    "UPDATE tool_operations SET status = 'unknown', reason = $4, owner_token = NULL, \
                     lease_until_ms = 0, updated_at_ms = $5 \
                     WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
                    &[&owned.tenant, &owned.operation_key, &owned.owner_token, &finding, &sql_ms(now_ms)],
                )?;
                if changed == 1 {
                    insert_reconciliation(c, &owned.tenant, &owned.operation_key, now_ms, &finding)?;
                }
                Ok(changed == 1)
            })
        })
    }

    pub(crate) fn release(&self, owned: &OwnedClaim, now_ms: u64) -> Result<bool, StoreError> {
        let owned = owned.clone();
        self.changed_one("release", move |c| {
            c.execute(
                "UPDATE tool_operations SET owner_token = NULL, lease_until_ms = 0, updated_at_ms = $4 \
                 WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
                &[&owned.tenant, &owned.operation_key, &owned.owner_token, &sql_ms(now_ms)],
            )
        })
    }

    pub(crate) fn set_job(&self, owned: &OwnedClaim, job_id: &str, now_ms: u64) -> Result<bool, StoreError> {
        let (owned, job_id) = (owned.clone(), job_id.to_owned());
        self.changed_one("set job", move |c| {
            c.execute(
                "UPDATE tool_operations SET job_id = $4, owner_token = NULL, lease_until_ms = 0, \
                 updated_at_ms = $5 \
                 WHERE tenant = $1 AND operation_key = $2 AND owner_token = $3 AND status = 'pending'",
                &[&owned.tenant, &owned.operation_key, &owned.owner_token, &job_id, &sql_ms(now_ms)],
            )
        })
    }

    pub(crate) fn take_over(&self, take_over: &TakeOver) -> Result<bool, StoreError> {
        let t = take_over.clone();
        self.changed_one("take over", move |c| {
            c.execute(
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
        })
    }

    pub(crate) fn settle_job(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        response_json: &str,
        now_ms: u64,
        notice_due: bool,
    ) -> Result<bool, StoreError> {
        let values =
            (tenant.to_owned(), operation_key.to_owned(), job_id.to_owned(), response_json.to_owned());
        self.run("settle job", move |c| {
            let (tenant, key, job_id, response) = &values;
            c.in_transaction(|c| {
                let changed = c.execute(
                    "UPDATE tool_operations SET status = 'applied', job_id = $3, effect_reference = $3, \
                     response_json = $4, owner_token = NULL, lease_until_ms = 0, reason = NULL, \
                     request_json = NULL, updated_at_ms = $5 \
                     WHERE tenant = $1 AND operation_key = $2 AND status IN ('pending', 'unknown') \
                     AND (job_id IS NULL OR job_id = $3)",
                    &[tenant, key, job_id, response, &sql_ms(now_ms)],
                )?;
                if changed == 1 && notice_due {
                    c.execute(
                        "INSERT INTO notices (tenant, operation_key, job_id, claimed_at_ms) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (tenant, operation_key) DO UPDATE SET job_id = $3, claimed_at_ms = $4",
                        &[tenant, key, job_id, &sql_ms(now_ms)],
                    )?;
                }
                Ok(changed == 1)
            })
        })
    }

    pub(crate) fn due_notice(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Option<(String, u64)>, StoreError> {
        let (tenant, key) = (tenant.to_owned(), operation_key.to_owned());
        self.run("load due notice", move |c| {
            let row = c.query_opt(
                "SELECT job_id, claimed_at_ms FROM notices WHERE tenant = $1 AND operation_key = $2",
                &[&tenant, &key],
            )?;
            Ok(row.map(|row| (row.get(0), read_ms(&row, 1))))
        })
    }

    pub(crate) fn claim_notice(
        &self,
        tenant: &str,
        operation_key: &str,
        observed_claimed_at_ms: u64,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let (tenant, key) = (tenant.to_owned(), operation_key.to_owned());
        self.changed_one("claim notice", move |c| {
            c.execute(
                "UPDATE notices SET claimed_at_ms = $4 \
                 WHERE tenant = $1 AND operation_key = $2 AND claimed_at_ms = $3",
                &[&tenant, &key, &sql_ms(observed_claimed_at_ms), &sql_ms(now_ms)],
            )
        })
    }

    pub(crate) fn notice_done(&self, tenant: &str, operation_key: &str) -> Result<bool, StoreError> {
        let (tenant, key) = (tenant.to_owned(), operation_key.to_owned());
        self.changed_one("notice done", move |c| {
            c.execute("DELETE FROM notices WHERE tenant = $1 AND operation_key = $2", &[&tenant, &key])
        })
    }

    pub(crate) fn write_job_result(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        response_json: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let values =
            (tenant.to_owned(), operation_key.to_owned(), job_id.to_owned(), response_json.to_owned());
        self.changed_one("write job result", move |c| {
            let (tenant, key, job_id, response) = &values;
            c.execute(
                "UPDATE tool_operations SET status = 'applied', job_id = $3, effect_reference = $3, \
                 response_json = $4, owner_token = NULL, lease_until_ms = 0, reason = NULL, request_json = NULL, \
                 updated_at_ms = $5 \
                 WHERE tenant = $1 AND operation_key = $2",
                &[tenant, key, job_id, response, &sql_ms(now_ms)],
            )
        })
    }

    pub(crate) fn tombstone(
        &self,
        tenant: &str,
        operation_key: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let (tenant, key) = (tenant.to_owned(), operation_key.to_owned());
        self.changed_one("tombstone", move |c| {
            c.execute(
                "UPDATE tool_operations SET status = 'tombstone', response_json = NULL, request_json = NULL, \
                 owner_token = NULL, lease_until_ms = 0, updated_at_ms = $3 \
                 WHERE tenant = $1 AND operation_key = $2 AND status IN ('applied', 'failed_permanent')",
                &[&tenant, &key, &sql_ms(now_ms)],
            )
        })
    }

    pub(crate) fn forget(&self, tenant: &str, operation_key: &str) -> Result<bool, StoreError> {
        let (tenant, key) = (tenant.to_owned(), operation_key.to_owned());
        self.changed_one("forget", move |c| {
            c.execute(
                "DELETE FROM tool_operations WHERE tenant = $1 AND operation_key = $2",
                &[&tenant, &key],
            )
        })
    }

    pub(crate) fn record_event(
        &self,
        event_id: &str,
        tenant: &str,
        operation_key: Option<&str>,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let values = (event_id.to_owned(), tenant.to_owned(), operation_key.map(str::to_owned));
        self.changed_one("record event", move |c| {
            let (event_id, tenant, key) = &values;
            c.execute(
                "INSERT INTO webhook_events (event_id, tenant, operation_key, received_at_ms) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO NOTHING",
                &[event_id, tenant, key, &sql_ms(now_ms)],
            )
        })
    }

    pub(crate) fn record_reconciliation(
        &self,
        tenant: &str,
        operation_key: &str,
        at_ms: u64,
        finding: &str,
    ) -> Result<(), StoreError> {
        let values = (tenant.to_owned(), operation_key.to_owned(), finding.to_owned());
        self.run("record reconciliation", move |c| {
            let (tenant, key, finding) = &values;
            insert_reconciliation(c, tenant, key, at_ms, finding).map(|_| ())
        })
    }

    /// Empties every table of the store's schema (the migrations' own table aside).
    pub(crate) fn empty_every_table(&self) -> Result<(), StoreError> {
        self.run("empty the tables", |c| {
            c.client.batch_execute("TRUNCATE tool_operations, webhook_events, reconciliations, notices")
        })
    }

    pub(crate) fn all_reconciliations(&self) -> Result<Vec<Reconciliation>, StoreError> {
        let rows = self.run("list reconciliations", |c| {
            c.query("SELECT id, tenant, operation_key, at_ms, finding FROM reconciliations ORDER BY id", &[])
        })?;
        Ok(rows.iter().map(reconciliation).collect())
    }

    pub(crate) fn reconciliations(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Vec<Reconciliation>, StoreError> {
        let (tenant, key) = (tenant.to_owned(), operation_key.to_owned());
        let rows = self.run("list reconciliations", move |c| {
            c.query(
                "SELECT id, tenant, operation_key, at_ms, finding FROM reconciliations \
                 WHERE tenant = $1 AND operation_key = $2 ORDER BY id",
                &[&tenant, &key],
            )
        })?;
        Ok(rows.iter().map(reconciliation).collect())
    }

    /// Drops `schema` and everything in it (the benchmark's own schemas).
    pub(crate) fn drop_schema(&self, schema: &str) -> Result<(), StoreError> {
        if !valid_schema_name(schema) {
            return Err(StoreError::InvalidSchema(schema.to_owned()));
        }
        let sql = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
        self.run("drop a schema", move |c| c.client.batch_execute(&sql))
    }

    /// Runs a write and answers whether it changed exactly one row.
    fn changed_one(
        &self,
        operation: &'static str,
        work: impl FnOnce(&mut Connection) -> Result<u64, postgres::Error> + Send + 'static,
    ) -> Result<bool, StoreError> {
        Ok(self.run(operation, work)? == 1)
    }
}

fn insert_reconciliation(
    c: &mut Connection,
    tenant: &str,
    operation_key: &str,
    at_ms: u64,
    finding: &str,
) -> Result<u64, postgres::Error> {
    c.execute(
        "INSERT INTO reconciliations (tenant, operation_key, at_ms, finding) VALUES ($1, $2, $3, $4)",
        &[&tenant, &operation_key, &sql_ms(at_ms), &finding],
    )
}
