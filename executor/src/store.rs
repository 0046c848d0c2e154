//! The durable claim store: one table of operations, decided by its primary key, in SQLite
//! (this file) or Postgres (`postgres.rs`, same contract).
//!
//! Every call is an `async fn` that does one short transaction or statement: on SQLite it
//! runs synchronously at its first poll (a local file or memory, like a short computation);
//! on Postgres it awaits the server on the caller's runtime. The executor wraps each call in
//! the worker's [`StoreGate`] ([`GatedStore`]) so that inside the simulation each store call
//! costs simulated time and is a point where a worker can be paused or killed. Code outside
//! a runtime (inspection, tests, tools) waits with [`block_on`].
//!
//! Architecture invariants:
//! - the claim is one `INSERT .. ON CONFLICT DO NOTHING` decided by the primary key
//!   `(tenant, operation_key)`, never a read followed by an insert;
//! - every write made on behalf of an owner (complete, fail, mark unknown, release, set job)
//!   is a compare-and-set on `owner_token`, so a worker whose lease was taken over cannot
//!   overwrite the new owner's record;
//! - a record is never deleted by the reference executor: past retention it becomes a
//!   tombstone that keeps key, fingerprint and effect reference and drops the response.

use std::path::{Path, PathBuf};
use std::time::Duration;

use protocol::StoreGate;

#[cfg(feature = "postgres")]
mod postgres;
mod postgres_names;

pub use postgres_names::{fresh_schema, test_postgres, valid_schema_name, TEST_POSTGRES_ENV};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Row, Transaction, TransactionBehavior};

/// How long a connection to a file store waits for another connection's write lock before
/// it gives up: far longer than any single store call takes, short enough to surface a
/// wedged database as an error rather than a hang.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest shared-memory database name accepted: it becomes part of a SQLite URI and of
/// process-wide shared-cache state, so keep it an ordinary identifier.
const MAX_SHARED_MEMORY_NAME_CHARS: usize = 128;

/// Prepared statements each connection keeps: the store has about two dozen distinct ones.
const STATEMENT_CACHE_CAPACITY: usize = 48;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tool_operations (
    tenant              TEXT    NOT NULL,
    operation_key       TEXT    NOT NULL,
    tool_name           TEXT    NOT NULL,
    tool_version        TEXT    NOT NULL,
    request_fingerprint TEXT    NOT NULL,
    status              TEXT    NOT NULL CHECK (status IN
                            ('pending', 'applied', 'failed_permanent', 'unknown', 'tombstone')),
    effect_reference    TEXT,
    response_json       TEXT,
    owner_token         TEXT,
    lease_until_ms      INTEGER NOT NULL DEFAULT 0,
    job_id              TEXT,
    downstream_key      TEXT,
    reason              TEXT,
    created_at_ms       INTEGER NOT NULL,
    updated_at_ms       INTEGER NOT NULL,
    expires_at_ms       INTEGER NOT NULL,
    request_json        TEXT,
    PRIMARY KEY (tenant, operation_key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tool_operations_by_downstream_key
    ON tool_operations (tenant, downstream_key);
CREATE INDEX IF NOT EXISTS tool_operations_by_job
    ON tool_operations (tenant, job_id);
CREATE TABLE IF NOT EXISTS webhook_events (
    event_id       TEXT    PRIMARY KEY,
    tenant         TEXT    NOT NULL,
    operation_key  TEXT,
    received_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS reconciliations (
    id            INTEGER PRIMARY KEY,
    tenant        TEXT    NOT NULL,
    operation_key TEXT    NOT NULL,
    at_ms         INTEGER NOT NULL,
    finding       TEXT    NOT NULL
);
CREATE TABLE IF NOT EXISTS notices (
    tenant        TEXT    NOT NULL,
    operation_key TEXT    NOT NULL,
    job_id        TEXT    NOT NULL,
    claimed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, operation_key)
) WITHOUT ROWID;
";

const RECORD_COLUMNS: &str = "tenant, operation_key, tool_name, tool_version, request_fingerprint, status, \
     effect_reference, response_json, owner_token, lease_until_ms, job_id, downstream_key, reason, \
     created_at_ms, updated_at_ms, expires_at_ms, request_json";

/// Where the claim store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreLocation {
    /// A database file (WAL journal, `synchronous=NORMAL`): survives process restarts and is
    /// shared by every process that opens the same path.
    File(PathBuf),
    /// A named in-memory database shared by every connection of this process
    /// (`file:NAME?mode=memory&cache=shared`). For the simulation: each worker opens its own
    /// connection; the factory keeps one open so the database outlives worker crashes.
    /// Names must be unique per run (parallel runs in one process would otherwise share it).
    SharedMemory(String),
    /// A private in-memory database per connection: claims die with the worker and are not
    /// shared between workers. The reference never uses it; it exists for the
    /// `in_memory_claims` mutant.
    PrivateMemory,
    /// A Postgres database (`postgres://user@host:port/db`, or libpq's key=value form), shared
    /// by every process that connects to it. With `schema`, the store's tables live in that
    /// schema (created if missing), so that several stores can share one database.
    Postgres {
        /// The connection string.
        url: String,
        /// The schema, a plain lowercase identifier ([`valid_schema_name`]).
        schema: Option<String>,
    },
}

impl StoreLocation {
    /// A shared-memory location whose name no other location made by this function in this
    /// process has: `label` (reduced to identifier characters) and a counter. Use one per run.
    pub fn fresh_shared_memory(label: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
            .take(MAX_SHARED_MEMORY_NAME_CHARS - 24)
            .collect();
        StoreLocation::SharedMemory(format!("{label}-{number}"))
    }
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::File(path) => write!(f, "file {}", path.display()),
            StoreLocation::SharedMemory(name) => write!(f, "shared memory database \"{name}\""),
            StoreLocation::PrivateMemory => write!(f, "private memory database"),
            StoreLocation::Postgres { url, schema } => {
                write!(f, "postgres database {}", postgres_names::without_password(url))?;
                match schema {
                    Some(schema) => write!(f, ", schema {schema}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be opened or its schema created.
    #[error("failed to open the claim store ({location}): {source}")]
    Open {
        /// Where.
        location: String,
        /// Why.
        source: rusqlite::Error,
    },
    /// A shared-memory database name that is not a plain identifier.
    #[error(
        "failed to open the claim store: shared memory name {0:?} must be 1 to \
         {MAX_SHARED_MEMORY_NAME_CHARS} characters of A-Z, a-z, 0-9, `-`, `_` or `.`"
    )]
    InvalidName(String),
    /// A query failed.
    #[error("failed to {operation} in the claim store: {source}")]
    Query {
        /// What was being done (`claim`, `complete`, ...).
        operation: &'static str,
        /// Why.
        source: rusqlite::Error,
    },
    /// A Postgres location, in a build without the `postgres` feature.
    #[error("failed to open the claim store (postgres database {0}): this build has no Postgres support (the executor crate's `postgres` feature)")]
    NoPostgres(String),
    /// The Postgres database could not be reached, or its migrations not applied.
    #[cfg(feature = "postgres")]
    #[error("failed to open the claim store ({location}): {}", with_causes(source))]
    OpenPostgres {
        /// Where (without the password).
        location: String,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// The thread and runtime that apply a Postgres store's migrations at open could not
    /// start (the process is out of threads or file descriptors), or the thread panicked.
    #[error("failed to open the claim store ({location}): the migrations could not run: {reason}")]
    PostgresMigrations {
        /// Where (without the password).
        location: String,
        /// Why.
        reason: String,
    },
    /// A schema name that is not a plain lowercase identifier.
    #[error(
        "failed to open the claim store: schema {0:?} must be 1 to 63 characters of a-z, 0-9 \
         and `_`, not starting with a digit or `pg_`"
    )]
    InvalidSchema(String),
    /// A Postgres statement failed.
    #[cfg(feature = "postgres")]
    #[error("failed to {operation} in the claim store: {}", with_causes(source))]
    PostgresQuery {
        /// What was being done (`claim`, `complete`, ...).
        operation: &'static str,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// A Postgres store was used outside a tokio runtime (its connection needs one).
    #[error("failed to {0} in the claim store: a Postgres store runs on a tokio runtime with I/O enabled")]
    PostgresRuntime(&'static str),
    /// A row holds a value this code never writes (the file was edited by hand).
    #[error("failed to read the claim store: {0}")]
    Corrupt(String),
    /// A temporary file for the benchmark could not be prepared.
    #[error("failed to prepare the benchmark database {path}: {source}")]
    BenchFile {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

impl StoreError {
    /// Whether the location was the problem (a Postgres database that cannot be reached, an
    /// invalid schema, or Postgres in a build without it): the caller's input, not a store
    /// failing while it ran.
    pub fn is_bad_location(&self) -> bool {
        match self {
            StoreError::InvalidSchema(_) | StoreError::NoPostgres(_) => true,
            #[cfg(feature = "postgres")]
            StoreError::OpenPostgres { .. } => true,
            _ => false,
        }
    }
}

#[cfg(feature = "postgres")]
/// `error` and the errors beneath it, `: `-separated (the Postgres client's own text is often
/// only "error connecting to server"; the cause says why).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    text
}

/// The status column of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecordStatus {
    /// Claimed; the outcome is not known yet. With an owner token and a live lease, a worker
    /// is on it; with a job id, the downstream owns a job; with neither owner nor job, an
    /// envelope waits in the outbox for a consumer.
    Pending,
    /// The effect happened and its reference is stored.
    Applied,
    /// The downstream (or the authorizer) refused for good; no effect.
    FailedPermanent,
    /// The effect may have happened; reconciliation owns the record.
    Unknown,
    /// Past retention: key, fingerprint and effect reference remain, the response is gone.
    Tombstone,
}

impl RecordStatus {
    /// The value stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordStatus::Pending => "pending",
            RecordStatus::Applied => "applied",
            RecordStatus::FailedPermanent => "failed_permanent",
            RecordStatus::Unknown => "unknown",
            RecordStatus::Tombstone => "tombstone",
        }
    }

    /// Parses [`RecordStatus::as_str`]'s output.
    pub fn parse(text: &str) -> Option<Self> {
        [
            RecordStatus::Pending,
            RecordStatus::Applied,
            RecordStatus::FailedPermanent,
            RecordStatus::Unknown,
            RecordStatus::Tombstone,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }

    /// `applied` or `failed_permanent`: nothing more will happen to the operation.
    pub fn is_terminal(self) -> bool {
        matches!(self, RecordStatus::Applied | RecordStatus::FailedPermanent)
    }
}

/// One row of `tool_operations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationRecord {
    /// Tenant (first half of the primary key).
    pub tenant: String,
    /// Operation key (second half of the primary key).
    pub operation_key: String,
    /// Tool name.
    pub tool_name: String,
    /// Tool contract version that claimed the operation.
    pub tool_version: String,
    /// [`protocol::Fingerprint`] in its `Display` form.
    pub request_fingerprint: String,
    /// Status.
    pub status: RecordStatus,
    /// The downstream's reference for the effect (`ticket_7`, a job id).
    pub effect_reference: Option<String>,
    /// The safe response (whitelisted fields only) as JSON text.
    pub response_json: Option<String>,
    /// The worker currently owning the claim, if any.
    pub owner_token: Option<String>,
    /// Until when the owner's claim holds, in clock milliseconds (0 when nobody owns it).
    pub lease_until_ms: u64,
    /// The downstream job, for delayed jobs.
    pub job_id: Option<String>,
    /// The `Idempotency-Key` sent downstream (also the receipt and webhook lookup key).
    pub downstream_key: Option<String>,
    /// Why the record is `failed_permanent` (a reason code) or `unknown` (what was ambiguous).
    pub reason: Option<String>,
    /// When it was claimed.
    pub created_at_ms: u64,
    /// Last change.
    pub updated_at_ms: u64,
    /// End of retention.
    pub expires_at_ms: u64,
    /// The request as the executor needs it to send the effect again under the same key
    /// (the reference keeps the validated call), while the outcome is open; cleared once it is
    /// settled.
    pub request_json: Option<String>,
}

impl OperationRecord {
    /// Whether an owner holds a claim that has not run out at `now_ms`.
    pub fn lease_is_live(&self, now_ms: u64) -> bool {
        self.owner_token.is_some() && now_ms < self.lease_until_ms
    }
}

/// What a worker asks to claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewClaim {
    /// Tenant.
    pub tenant: String,
    /// Operation key.
    pub operation_key: String,
    /// Tool name.
    pub tool_name: String,
    /// Tool version.
    pub tool_version: String,
    /// Fingerprint (`Display` form).
    pub request_fingerprint: String,
    /// Key to send downstream, if any.
    pub downstream_key: Option<String>,
    /// The claiming worker's token.
    pub owner_token: String,
    /// Now.
    pub now_ms: u64,
    /// End of the lease.
    pub lease_until_ms: u64,
    /// End of retention.
    pub expires_at_ms: u64,
    /// The request, kept while the outcome is open (see [`OperationRecord::request_json`]).
    pub request_json: Option<String>,
}

impl NewClaim {
    /// The record a successful claim creates.
    pub fn to_record(&self) -> OperationRecord {
        OperationRecord {
            tenant: self.tenant.clone(),
            operation_key: self.operation_key.clone(),
            tool_name: self.tool_name.clone(),
            tool_version: self.tool_version.clone(),
            request_fingerprint: self.request_fingerprint.clone(),
            status: RecordStatus::Pending,
            effect_reference: None,
            response_json: None,
            owner_token: Some(self.owner_token.clone()),
            lease_until_ms: self.lease_until_ms,
            job_id: None,
            downstream_key: self.downstream_key.clone(),
            reason: None,
            created_at_ms: self.now_ms,
            updated_at_ms: self.now_ms,
            expires_at_ms: self.expires_at_ms,
            request_json: self.request_json.clone(),
        }
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// This worker inserted the record and owns it.
    New(OperationRecord),
    /// The record existed; here it is, untouched.
    Existing(OperationRecord),
}

/// A claim held by one worker: what every compare-and-set write names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedClaim {
    /// Tenant.
    pub tenant: String,
    /// Operation key.
    pub operation_key: String,
    /// The owner's token.
    pub owner_token: String,
    /// End of the owner's lease.
    pub lease_until_ms: u64,
}

/// A take-over of a claim whose lease ran out (or of an `unknown` record, or of a queued
/// record waiting for its consumer): it succeeds only if the record is still exactly as
/// observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeOver {
    /// Tenant.
    pub tenant: String,
    /// Operation key.
    pub operation_key: String,
    /// The owner token seen when deciding to take over (`None`: nobody).
    pub observed_owner: Option<String>,
    /// The lease end seen.
    pub observed_lease_until_ms: u64,
    /// The new owner.
    pub new_owner: String,
    /// The new lease end.
    pub lease_until_ms: u64,
    /// Now.
    pub now_ms: u64,
}

/// One row of `reconciliations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciliation {
    /// Row id (insertion order).
    pub id: i64,
    /// Tenant.
    pub tenant: String,
    /// Operation key.
    pub operation_key: String,
    /// When.
    pub at_ms: u64,
    /// What was found or why the outcome is unknown.
    pub finding: String,
}

/// A connection to the claim store: SQLite (a file or memory) or Postgres, by its
/// [`StoreLocation`]. Both backends keep the same contract, checked by one conformance suite
/// (`executor/tests/executor/store_conformance.rs`).
#[derive(Debug)]
pub struct ClaimStore {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Sqlite(SqliteStore),
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::PostgresStore>),
}

/// A SQLite connection.
pub(crate) struct SqliteStore {
    pub(crate) connection: Connection,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.connection.path()).finish_non_exhaustive()
    }
}

impl ClaimStore {
    /// The SQLite connection, for the SQLite-only parts (the benchmark's hand-written
    /// statements, the warm pool, which empties its databases); `None` on Postgres.
    pub(crate) fn sqlite(&self) -> Option<&SqliteStore> {
        match &self.backend {
            Backend::Sqlite(store) => Some(store),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
        }
    }

    /// The Postgres connection, for the benchmark's hand-written statements; `None` on SQLite.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres(&self) -> Option<&postgres::PostgresStore> {
        match &self.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => Some(store),
            Backend::Sqlite(_) => None,
        }
    }
}

/// Milliseconds as SQLite stores them (signed 64 bits; later than year 292 million saturates).
fn sql_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn read_ms(row: &Row<'_>, index: usize) -> rusqlite::Result<u64> {
    let value: i64 = row.get(index)?;
    Ok(u64::try_from(value).unwrap_or(0))
}

fn query(operation: &'static str) -> impl Fn(rusqlite::Error) -> StoreError {
    move |source| StoreError::Query { operation, source }
}

fn valid_shared_memory_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_SHARED_MEMORY_NAME_CHARS
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A raw row before its status is checked.
struct RawRecord {
    record: OperationRecord,
    status_text: String,
}

fn raw_record(row: &Row<'_>) -> rusqlite::Result<RawRecord> {
    let status_text: String = row.get(5)?;
    Ok(RawRecord {
        record: OperationRecord {
            tenant: row.get(0)?,
            operation_key: row.get(1)?,
            tool_name: row.get(2)?,
            tool_version: row.get(3)?,
            request_fingerprint: row.get(4)?,
            status: RecordStatus::Pending,
            effect_reference: row.get(6)?,
            response_json: row.get(7)?,
            owner_token: row.get(8)?,
            lease_until_ms: read_ms(row, 9)?,
            job_id: row.get(10)?,
            downstream_key: row.get(11)?,
            reason: row.get(12)?,
            created_at_ms: read_ms(row, 13)?,
            updated_at_ms: read_ms(row, 14)?,
            expires_at_ms: read_ms(row, 15)?,
            request_json: row.get(16)?,
        },
        status_text,
    })
}

fn reconciliation(row: &Row<'_>) -> rusqlite::Result<Reconciliation> {
    Ok(Reconciliation {
        id: row.get(0)?,
        tenant: row.get(1)?,
        operation_key: row.get(2)?,
        at_ms: read_ms(row, 3)?,
        finding: row.get(4)?,
    })
}

fn checked(raw: RawRecord) -> Result<OperationRecord, StoreError> {
    let status = RecordStatus::parse(&raw.status_text).ok_or_else(|| {
        StoreError::Corrupt(format!(
            "operation \"{}\" has status \"{}\"",
            raw.record.operation_key, raw.status_text
        ))
    })?;
    Ok(OperationRecord { status, ..raw.record })
}

impl ClaimStore {
    /// Opens (and if needed creates) the store at `location`.
    pub fn open(location: &StoreLocation) -> Result<Self, StoreError> {
        match location {
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres { url, schema } => postgres::PostgresStore::open(url, schema.as_deref())
                .map(|store| Self { backend: Backend::Postgres(Box::new(store)) }),
            #[cfg(not(feature = "postgres"))]
            StoreLocation::Postgres { url, .. } => {
                Err(StoreError::NoPostgres(postgres_names::without_password(url)))
            }
            _ => SqliteStore::open(location).map(|store| Self { backend: Backend::Sqlite(store) }),
        }
    }

    /// Claims the operation or loads the existing record, atomically: the insert is decided
    /// by the primary key, and the load happens in the same transaction.
    pub async fn claim(&self, claim: &NewClaim) -> Result<Claimed, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.claim(claim),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.claim(claim).await,
        }
    }

    /// The record of `(tenant, operation_key)`, if any.
    pub async fn load(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.load(tenant, operation_key),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.load(tenant, operation_key).await,
        }
    }

    /// The record that sent `downstream_key` for `tenant`, if any (webhook matching).
    pub async fn load_by_downstream_key(
        &self,
        tenant: &str,
        downstream_key: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.load_by_downstream_key(tenant, downstream_key),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.load_by_downstream_key(tenant, downstream_key).await,
        }
    }

    /// The record that owns downstream job `job_id` for `tenant`, if any (webhook matching
    /// when the event carries no key).
    pub async fn load_by_job(
        &self,
        tenant: &str,
        job_id: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.load_by_job(tenant, job_id),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.load_by_job(tenant, job_id).await,
        }
    }

    /// Every record, by tenant then key (for inspection and tests).
    pub async fn records(&self) -> Result<Vec<OperationRecord>, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.records(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.records().await,
        }
    }

    /// The records whose outcome is still open and that no queue or job will settle: `unknown`
    /// ones, and `pending` ones held by an owner (whose lease may run out) with no downstream
    /// job. By tenant then key. The executor's own reconciliation works through these.
    pub async fn unsettled(&self) -> Result<Vec<OperationRecord>, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.unsettled(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.unsettled().await,
        }
    }

    /// Gives up on operation `operation_key`'s running job `job_id`: `pending` ->
    /// `failed_permanent` with `reason`. False when the record is no longer that pending job.
    /// (No correct executor does this: a job the downstream accepted is an effect the operation
    /// owns. The `impatient_job_poll` mutant does.)
    pub async fn give_up_job(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.give_up_job(tenant, operation_key, job_id, reason, now_ms),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => {
                store.give_up_job(tenant, operation_key, job_id, reason, now_ms).await
            }
        }
    }

    /// Owner `owned` records the effect: `pending` -> `applied`. False when the claim is no
    /// longer `owned`'s (its lease was taken over): nothing is written then. The reference
    /// executor always stores `Some` reference; `None` exists for mutants that keep none.
    pub async fn complete(
        &self,
        owned: &OwnedClaim,
        effect_reference: Option<&str>,
        response_json: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.complete(owned, effect_reference, response_json, now_ms),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.complete(owned, effect_reference, response_json, now_ms).await,
        }
    }

    /// Owner `owned` records a permanent refusal (`reason` is a reason code): `pending` ->
    /// `failed_permanent`. False when the claim is no longer `owned`'s.
    pub async fn fail_permanent(
        &self,
        owned: &OwnedClaim,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.fail_permanent(owned, reason, now_ms),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.fail_permanent(owned, reason, now_ms).await,
        }
    }

    /// Owner `owned` gives the record to reconciliation: `pending` -> `unknown`, and a
    /// `reconciliations` row with `finding`, in one transaction. False (and nothing written)
    /// when the claim is no longer `owned`'s.
    pub async fn mark_unknown(
        &self,
        owned: &OwnedClaim,
        finding: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.mark_unknown(owned, finding, now_ms),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.mark_unknown(owned, finding, now_ms).await,
        }
    }

    /// Owner `owned` hands the record to the queue: it stays `pending` with no owner and no
    /// lease until a consumer claims it. False when the claim is no longer `owned`'s.
    pub async fn release(&self, owned: &OwnedClaim, now_ms: u64) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.release(owned, now_ms),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.release(owned, now_ms).await,
        }
    }

    /// Owner `owned` stores the downstream job id: the record stays `pending`, owned by the
    /// job (no owner token, no lease). False when the claim is no longer `owned`'s.
    pub async fn set_job(&self, owned: &OwnedClaim, job_id: &str, now_ms: u64) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.set_job(owned, job_id, now_ms),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.set_job(owned, job_id, now_ms).await,
        }
    }

    /// Takes over a claim exactly as observed (see [`TakeOver`]): sets a new owner and lease
    /// and the status back to `pending`. Only `pending` (without a job) or `unknown` records
    /// whose lease has run out can be taken over. False when the record changed meanwhile.
    pub async fn take_over(&self, take_over: &TakeOver) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.take_over(take_over),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.take_over(take_over).await,
        }
    }

    /// Settles a delayed job, once per operation: `pending` (or `unknown`) with this job (or
    /// no job recorded yet) -> `applied` with the job id as effect reference. Only the caller
    /// that gets `true` made the transition; with `notice_due`, it owes the job's completion
    /// notice from then on ([`ClaimStore::due_notice`]), in the same transaction.
    pub async fn settle_job(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        response_json: &str,
        now_ms: u64,
        notice_due: bool,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => {
                store.settle_job(tenant, operation_key, job_id, response_json, now_ms, notice_due)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => {
                store.settle_job(tenant, operation_key, job_id, response_json, now_ms, notice_due).await
            }
        }
    }

    /// The completion notice still owed for an operation's settled job: (job id, when its
    /// sender claimed it). The winner of [`ClaimStore::settle_job`] owes it from the
    /// settlement on, in the same transaction, so that a crash before the notice went out
    /// leaves it owed rather than forgotten.
    pub async fn due_notice(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Option<(String, u64)>, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.due_notice(tenant, operation_key),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.due_notice(tenant, operation_key).await,
        }
    }

    /// Claims an owed notice to send it, by compare-and-set on when it was last claimed (as
    /// observed): true for exactly one of several callers that observed the same claim.
    pub async fn claim_notice(
        &self,
        tenant: &str,
        operation_key: &str,
        observed_claimed_at_ms: u64,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => {
                store.claim_notice(tenant, operation_key, observed_claimed_at_ms, now_ms)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => {
                store.claim_notice(tenant, operation_key, observed_claimed_at_ms, now_ms).await
            }
        }
    }

    /// The notice is no longer owed (sent and confirmed, or handed over to people). False when
    /// it was not owed.
    pub async fn notice_done(&self, tenant: &str, operation_key: &str) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.notice_done(tenant, operation_key),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.notice_done(tenant, operation_key).await,
        }
    }

    /// Writes a finished job's result whatever the record's state: -> `applied` with the job
    /// id as effect reference. True whenever the record exists, so every caller believes it
    /// made the transition. The reference executor never does this (a redelivered completion
    /// would settle again and send a second notice); it exists for the `webhook_no_dedupe`
    /// mutant. Use [`ClaimStore::settle_job`].
    pub async fn write_job_result(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        response_json: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => {
                store.write_job_result(tenant, operation_key, job_id, response_json, now_ms)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => {
                store.write_job_result(tenant, operation_key, job_id, response_json, now_ms).await
            }
        }
    }

    /// Turns a terminal record into a tombstone: keeps key, fingerprint and effect reference,
    /// drops the response. False when the record is not terminal (or already a tombstone).
    pub async fn tombstone(
        &self,
        tenant: &str,
        operation_key: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.tombstone(tenant, operation_key, now_ms),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.tombstone(tenant, operation_key, now_ms).await,
        }
    }

    /// Deletes a record. The reference executor never does (a late duplicate would become a
    /// new effect); it exists for the `short_ttl_delete` mutant.
    pub async fn forget(&self, tenant: &str, operation_key: &str) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.forget(tenant, operation_key),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.forget(tenant, operation_key).await,
        }
    }

    /// Records a webhook event id; false when it was recorded before (a redelivery).
    pub async fn record_event(
        &self,
        event_id: &str,
        tenant: &str,
        operation_key: Option<&str>,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.record_event(event_id, tenant, operation_key, now_ms),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.record_event(event_id, tenant, operation_key, now_ms).await,
        }
    }

    /// Appends a reconciliation finding for an operation.
    pub async fn record_reconciliation(
        &self,
        tenant: &str,
        operation_key: &str,
        at_ms: u64,
        finding: &str,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.record_reconciliation(tenant, operation_key, at_ms, finding),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => {
                store.record_reconciliation(tenant, operation_key, at_ms, finding).await
            }
        }
    }

    /// Every reconciliation finding, oldest first.
    pub async fn all_reconciliations(&self) -> Result<Vec<Reconciliation>, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.all_reconciliations(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.all_reconciliations().await,
        }
    }

    /// The reconciliation findings of an operation, oldest first.
    pub async fn reconciliations(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Vec<Reconciliation>, StoreError> {
        match &self.backend {
            Backend::Sqlite(store) => store.reconciliations(tenant, operation_key),
            #[cfg(feature = "postgres")]
            Backend::Postgres(store) => store.reconciliations(tenant, operation_key).await,
        }
    }
}

/// The SQLite backend: see [`ClaimStore`] for what each call promises.
impl SqliteStore {
    pub(crate) fn open(location: &StoreLocation) -> Result<Self, StoreError> {
        let opened = match location {
            StoreLocation::File(path) => Self::open_file(path),
            StoreLocation::SharedMemory(name) => {
                if !valid_shared_memory_name(name) {
                    return Err(StoreError::InvalidName(name.clone()));
                }
                let uri = format!("file:{name}?mode=memory&cache=shared");
                let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
                    | OpenFlags::SQLITE_OPEN_CREATE
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX;
                Connection::open_with_flags(uri, flags).and_then(Self::prepare)
            }
            StoreLocation::PrivateMemory => Connection::open_in_memory().and_then(Self::prepare),
            StoreLocation::Postgres { .. } => unreachable!("ClaimStore::open opens Postgres locations"),
        };
        opened.map_err(|source| StoreError::Open { location: location.to_string(), source })
    }

    /// Opens a file several processes may open at once (worker processes sharing one store):
    /// the switch to WAL and the schema are each done under a write lock taken up front
    /// (`BEGIN IMMEDIATE` waits out the busy timeout; a deferred transaction that turns into a
    /// write while another process writes fails at once with `SQLITE_BUSY`).
    fn open_file(path: &Path) -> rusqlite::Result<Self> {
        // SQLite answers `SQLITE_BUSY` at once, without waiting, where waiting could deadlock
        // (two processes both holding a read lock while one switches the journal to WAL): such
        // an open is tried again, for as long as the busy timeout.
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(2);
        loop {
            match Self::try_open_file(path) {
                Err(rusqlite::Error::SqliteFailure(failure, _))
                    if failure.code == rusqlite::ErrorCode::DatabaseBusy
                        && started.elapsed() < BUSY_TIMEOUT =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                opened => return opened,
            }
        }
    }

    fn try_open_file(path: &Path) -> rusqlite::Result<Self> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(BUSY_TIMEOUT)?;
        let mode: String = connection.query_row("PRAGMA journal_mode", [], |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            connection.pragma_update(None, "journal_mode", "WAL")?;
        }
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        Self::prepare(connection)
    }

    fn prepare(connection: Connection) -> rusqlite::Result<Self> {
        // Room for every statement the store prepares, so none is evicted and prepared again.
        connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        connection.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} COMMIT;"))?;
        Ok(Self { connection })
    }

    fn immediate(&self) -> rusqlite::Result<Transaction<'_>> {
        Transaction::new_unchecked(&self.connection, TransactionBehavior::Immediate)
    }

    pub(crate) fn claim(&self, claim: &NewClaim) -> Result<Claimed, StoreError> {
        let run = || -> rusqlite::Result<Option<RawRecord>> {
            let transaction = self.immediate()?;
            let inserted = transaction
                .prepare_cached(
                    "INSERT INTO tool_operations (tenant, operation_key, tool_name, tool_version, \
                     request_fingerprint, status, owner_token, lease_until_ms, downstream_key, \
                     created_at_ms, updated_at_ms, expires_at_ms, request_json) \
                     VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6, ?7, ?8, ?9, ?9, ?10, ?11) \
                     ON CONFLICT (tenant, operation_key) DO NOTHING",
                )?
                .execute(params![
                    claim.tenant,
                    claim.operation_key,
                    claim.tool_name,
                    claim.tool_version,
                    claim.request_fingerprint,
                    claim.owner_token,
                    sql_ms(claim.lease_until_ms),
                    claim.downstream_key,
                    sql_ms(claim.now_ms),
                    sql_ms(claim.expires_at_ms),
                    claim.request_json,
                ])?;
            let existing = if inserted == 1 {
                None
            } else {
                Some(Self::select_one(&transaction, &claim.tenant, &claim.operation_key)?.ok_or(
                    // The insert conflicted on this very key inside this transaction.
                    rusqlite::Error::QueryReturnedNoRows,
                )?)
            };
            transaction.commit()?;
            Ok(existing)
        };
        match run().map_err(query("claim"))? {
            None => Ok(Claimed::New(claim.to_record())),
            Some(raw) => Ok(Claimed::Existing(checked(raw)?)),
        }
    }

    fn select_one(
        connection: &Connection,
        tenant: &str,
        operation_key: &str,
    ) -> rusqlite::Result<Option<RawRecord>> {
        connection
            .prepare_cached(&format!(
                "SELECT {RECORD_COLUMNS} FROM tool_operations WHERE tenant = ?1 AND operation_key = ?2"
            ))?
            .query_row(params![tenant, operation_key], raw_record)
            .optional()
    }

    pub(crate) fn load(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        Self::select_one(&self.connection, tenant, operation_key)
            .map_err(query("load"))?
            .map(checked)
            .transpose()
    }

    pub(crate) fn load_by_downstream_key(
        &self,
        tenant: &str,
        downstream_key: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        self.connection
            .prepare_cached(&format!(
                "SELECT {RECORD_COLUMNS} FROM tool_operations WHERE tenant = ?1 AND downstream_key = ?2 \
                 ORDER BY operation_key LIMIT 1"
            ))
            .and_then(|mut statement| {
                statement.query_row(params![tenant, downstream_key], raw_record).optional()
            })
            .map_err(query("load by downstream key"))?
            .map(checked)
            .transpose()
    }

    pub(crate) fn load_by_job(
        &self,
        tenant: &str,
        job_id: &str,
    ) -> Result<Option<OperationRecord>, StoreError> {
        self.connection
            .prepare_cached(&format!(
                "SELECT {RECORD_COLUMNS} FROM tool_operations WHERE tenant = ?1 AND job_id = ?2 \
                 ORDER BY operation_key LIMIT 1"
            ))
            .and_then(|mut statement| statement.query_row(params![tenant, job_id], raw_record).optional())
            .map_err(query("load by job"))?
            .map(checked)
            .transpose()
    }

    pub(crate) fn records(&self) -> Result<Vec<OperationRecord>, StoreError> {
        let raws = self
            .connection
            .prepare_cached(&format!(
                "SELECT {RECORD_COLUMNS} FROM tool_operations ORDER BY tenant, operation_key"
            ))
            .and_then(|mut statement| {
                statement.query_map([], raw_record)?.collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(query("list records"))?;
        raws.into_iter().map(checked).collect()
    }

    pub(crate) fn unsettled(&self) -> Result<Vec<OperationRecord>, StoreError> {
        let raws = self
            .connection
            .prepare_cached(&format!(
                "SELECT {RECORD_COLUMNS} FROM tool_operations \
                 WHERE status = 'unknown' \
                    OR (status = 'pending' AND owner_token IS NOT NULL AND job_id IS NULL) \
                 ORDER BY tenant, operation_key"
            ))
            .and_then(|mut statement| {
                statement.query_map([], raw_record)?.collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(query("list unsettled records"))?;
        raws.into_iter().map(checked).collect()
    }

    pub(crate) fn give_up_job(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached(
                "UPDATE tool_operations SET status = 'failed_permanent', reason = ?4, request_json = NULL, \
                 updated_at_ms = ?5 \
                 WHERE tenant = ?1 AND operation_key = ?2 AND job_id = ?3 AND status = 'pending'",
            )
            .and_then(|mut statement| {
                statement.execute(params![tenant, operation_key, job_id, reason, sql_ms(now_ms)])
            })
            .map_err(query("give up a job"))?;
        Ok(changed == 1)
    }

    pub(crate) fn complete(
        &self,
        owned: &OwnedClaim,
        effect_reference: Option<&str>,
        response_json: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached(
                "UPDATE tool_operations SET status = 'applied', effect_reference = ?4, response_json = ?5, \
                 owner_token = NULL, lease_until_ms = 0, reason = NULL, request_json = NULL, updated_at_ms = ?6 \
                 WHERE tenant = ?1 AND operation_key = ?2 AND owner_token = ?3 AND status = 'pending'",
            )
            .and_then(|mut statement| {
                statement.execute(params![
                    owned.tenant,
                    owned.operation_key,
                    owned.owner_token,
                    effect_reference,
                    response_json,
                    sql_ms(now_ms)
                ])
            })
            .map_err(query("complete"))?;
        Ok(changed == 1)
    }

    pub(crate) fn fail_permanent(
        &self,
        owned: &OwnedClaim,
        reason: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached(
                "UPDATE tool_operations SET status = 'failed_permanent', reason = ?4, owner_token = NULL, \
                 lease_until_ms = 0, request_json = NULL, updated_at_ms = ?5 \
                 WHERE tenant = ?1 AND operation_key = ?2 AND owner_token = ?3 AND status = 'pending'",
            )
            .and_then(|mut statement| {
                statement.execute(params![
                    owned.tenant,
                    owned.operation_key,
                    owned.owner_token,
                    reason,
                    sql_ms(now_ms)
                ])
            })
            .map_err(query("fail"))?;
        Ok(changed == 1)
    }

    pub(crate) fn mark_unknown(
        &self,
        owned: &OwnedClaim,
        finding: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let run = || -> rusqlite::Result<bool> {
            let transaction = self.immediate()?;
            let changed = transaction
                .prepare_cached(
                    "UPDATE tool_operations SET status = 'unknown', reason = ?4, owner_token = NULL, \
                     lease_until_ms = 0, updated_at_ms = ?5 \
                     WHERE tenant = ?1 AND operation_key = ?2 AND owner_token = ?3 AND status = 'pending'",
                )?
                .execute(params![
                    owned.tenant,
                    owned.operation_key,
                    owned.owner_token,
                    finding,
                    sql_ms(now_ms)
                ])?;
            if changed == 1 {
                Self::insert_reconciliation(
                    &transaction,
                    &owned.tenant,
                    &owned.operation_key,
                    now_ms,
                    finding,
                )?;
            }
            transaction.commit()?;
            Ok(changed == 1)
        };
        run().map_err(query("mark unknown"))
    }

    pub(crate) fn release(&self, owned: &OwnedClaim, now_ms: u64) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached(
                "UPDATE tool_operations SET owner_token = NULL, lease_until_ms = 0, updated_at_ms = ?4 \
                 WHERE tenant = ?1 AND operation_key = ?2 AND owner_token = ?3 AND status = 'pending'",
            )
            .and_then(|mut statement| {
                statement.execute(params![
                    owned.tenant,
                    owned.operation_key,
                    owned.owner_token,
                    sql_ms(now_ms)
                ])
            })
            .map_err(query("release"))?;
        Ok(changed == 1)
    }

    pub(crate) fn set_job(&self, owned: &OwnedClaim, job_id: &str, now_ms: u64) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached(
                "UPDATE tool_operations SET job_id = ?4, owner_token = NULL, lease_until_ms = 0, \
                 updated_at_ms = ?5 \
                 WHERE tenant = ?1 AND operation_key = ?2 AND owner_token = ?3 AND status = 'pending'",
            )
            .and_then(|mut statement| {
                statement.execute(params![
                    owned.tenant,
                    owned.operation_key,
                    owned.owner_token,
                    job_id,
                    sql_ms(now_ms)
                ])
            })
            .map_err(query("set job"))?;
        Ok(changed == 1)
    }

    pub(crate) fn take_over(&self, take_over: &TakeOver) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached(
                "UPDATE tool_operations SET status = 'pending', owner_token = ?5, lease_until_ms = ?6, \
                 updated_at_ms = ?7 \
                 WHERE tenant = ?1 AND operation_key = ?2 AND owner_token IS ?3 AND lease_until_ms = ?4 \
                 AND lease_until_ms <= ?7 AND job_id IS NULL AND status IN ('pending', 'unknown')",
            )
            .and_then(|mut statement| {
                statement.execute(params![
                    take_over.tenant,
                    take_over.operation_key,
                    take_over.observed_owner,
                    sql_ms(take_over.observed_lease_until_ms),
                    take_over.new_owner,
                    sql_ms(take_over.lease_until_ms),
                    sql_ms(take_over.now_ms),
                ])
            })
            .map_err(query("take over"))?;
        Ok(changed == 1)
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
        let run = || -> rusqlite::Result<bool> {
            let transaction = self.immediate()?;
            let changed = transaction
                .prepare_cached(
                    "UPDATE tool_operations SET status = 'applied', job_id = ?3, effect_reference = ?3, \
                     response_json = ?4, owner_token = NULL, lease_until_ms = 0, reason = NULL, request_json = NULL, \
                     updated_at_ms = ?5 \
                     WHERE tenant = ?1 AND operation_key = ?2 AND status IN ('pending', 'unknown') \
                     AND (job_id IS NULL OR job_id = ?3)",
                )?
                .execute(params![tenant, operation_key, job_id, response_json, sql_ms(now_ms)])?;
            if changed == 1 && notice_due {
                transaction
                    .prepare_cached(
                        "INSERT INTO notices (tenant, operation_key, job_id, claimed_at_ms) VALUES (?1, ?2, ?3, ?4) \
                         ON CONFLICT (tenant, operation_key) DO UPDATE SET job_id = ?3, claimed_at_ms = ?4",
                    )?
                    .execute(params![tenant, operation_key, job_id, sql_ms(now_ms)])?;
            }
            transaction.commit()?;
            Ok(changed == 1)
        };
        run().map_err(query("settle job"))
    }

    pub(crate) fn due_notice(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Option<(String, u64)>, StoreError> {
        self.connection
            .prepare_cached(
                "SELECT job_id, claimed_at_ms FROM notices WHERE tenant = ?1 AND operation_key = ?2",
            )
            .and_then(|mut statement| {
                statement
                    .query_row(params![tenant, operation_key], |row| Ok((row.get(0)?, read_ms(row, 1)?)))
                    .optional()
            })
            .map_err(query("load due notice"))
    }

    pub(crate) fn claim_notice(
        &self,
        tenant: &str,
        operation_key: &str,
        observed_claimed_at_ms: u64,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached(
                "UPDATE notices SET claimed_at_ms = ?4 \
                 WHERE tenant = ?1 AND operation_key = ?2 AND claimed_at_ms = ?3",
            )
            .and_then(|mut statement| {
                statement.execute(params![
                    tenant,
                    operation_key,
                    sql_ms(observed_claimed_at_ms),
                    sql_ms(now_ms)
                ])
            })
            .map_err(query("claim notice"))?;
        Ok(changed == 1)
    }

    pub(crate) fn notice_done(&self, tenant: &str, operation_key: &str) -> Result<bool, StoreError> {
        let deleted = self
            .connection
            .prepare_cached("DELETE FROM notices WHERE tenant = ?1 AND operation_key = ?2")
            .and_then(|mut statement| statement.execute(params![tenant, operation_key]))
            .map_err(query("notice done"))?;
        Ok(deleted == 1)
    }

    pub(crate) fn write_job_result(
        &self,
        tenant: &str,
        operation_key: &str,
        job_id: &str,
        response_json: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached(
                "UPDATE tool_operations SET status = 'applied', job_id = ?3, effect_reference = ?3, \
                 response_json = ?4, owner_token = NULL, lease_until_ms = 0, reason = NULL, request_json = NULL, \
                 updated_at_ms = ?5 \
                 WHERE tenant = ?1 AND operation_key = ?2",
            )
            .and_then(|mut statement| {
                statement.execute(params![tenant, operation_key, job_id, response_json, sql_ms(now_ms)])
            })
            .map_err(query("write job result"))?;
        Ok(changed == 1)
    }

    pub(crate) fn tombstone(
        &self,
        tenant: &str,
        operation_key: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached(
                "UPDATE tool_operations SET status = 'tombstone', response_json = NULL, request_json = NULL, owner_token = NULL, \
                 lease_until_ms = 0, updated_at_ms = ?3 \
                 WHERE tenant = ?1 AND operation_key = ?2 AND status IN ('applied', 'failed_permanent')",
            )
            .and_then(|mut statement| statement.execute(params![tenant, operation_key, sql_ms(now_ms)]))
            .map_err(query("tombstone"))?;
        Ok(changed == 1)
    }

    pub(crate) fn forget(&self, tenant: &str, operation_key: &str) -> Result<bool, StoreError> {
        let changed = self
            .connection
            .prepare_cached("DELETE FROM tool_operations WHERE tenant = ?1 AND operation_key = ?2")
            .and_then(|mut statement| statement.execute(params![tenant, operation_key]))
            .map_err(query("forget"))?;
        Ok(changed == 1)
    }

    pub(crate) fn record_event(
        &self,
        event_id: &str,
        tenant: &str,
        operation_key: Option<&str>,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let inserted = self
            .connection
            .prepare_cached(
                "INSERT INTO webhook_events (event_id, tenant, operation_key, received_at_ms) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (event_id) DO NOTHING",
            )
            .and_then(|mut statement| {
                statement.execute(params![event_id, tenant, operation_key, sql_ms(now_ms)])
            })
            .map_err(query("record event"))?;
        Ok(inserted == 1)
    }

    fn insert_reconciliation(
        connection: &Connection,
        tenant: &str,
        operation_key: &str,
        at_ms: u64,
        finding: &str,
    ) -> rusqlite::Result<usize> {
        connection
            .prepare_cached(
                "INSERT INTO reconciliations (tenant, operation_key, at_ms, finding) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![tenant, operation_key, sql_ms(at_ms), finding])
    }

    pub(crate) fn record_reconciliation(
        &self,
        tenant: &str,
        operation_key: &str,
        at_ms: u64,
        finding: &str,
    ) -> Result<(), StoreError> {
        Self::insert_reconciliation(&self.connection, tenant, operation_key, at_ms, finding)
            .map_err(query("record reconciliation"))?;
        Ok(())
    }

    pub(crate) fn empty_every_table(&self) -> Result<(), StoreError> {
        let run = || -> rusqlite::Result<()> {
            let transaction = self.immediate()?;
            let tables: Vec<String> = transaction
                .prepare_cached(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                )?
                .query_map([], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            for table in tables {
                let sql = format!("DELETE FROM \"{}\"", table.replace('"', "\"\""));
                transaction.prepare_cached(&sql)?.execute([])?;
            }
            transaction.commit()
        };
        run().map_err(query("empty the tables"))
    }

    pub(crate) fn all_reconciliations(&self) -> Result<Vec<Reconciliation>, StoreError> {
        self.connection
            .prepare_cached(
                "SELECT id, tenant, operation_key, at_ms, finding FROM reconciliations ORDER BY id",
            )
            .and_then(|mut statement| statement.query_map([], reconciliation)?.collect())
            .map_err(query("list reconciliations"))
    }

    pub(crate) fn reconciliations(
        &self,
        tenant: &str,
        operation_key: &str,
    ) -> Result<Vec<Reconciliation>, StoreError> {
        self.connection
            .prepare_cached(
                "SELECT id, tenant, operation_key, at_ms, finding FROM reconciliations \
                 WHERE tenant = ?1 AND operation_key = ?2 ORDER BY id",
            )
            .and_then(|mut statement| {
                statement.query_map(params![tenant, operation_key], reconciliation)?.collect()
            })
            .map_err(query("list reconciliations"))
    }
}

/// Waits for `future` (store calls) outside async code: inspection, tests, tools.
///
/// Outside a tokio runtime it runs the future on a new current-thread runtime (a Postgres
/// store connects on it). Inside one it cannot wait: a SQLite store's calls are done at their
/// first poll and are answered, and a future still pending then (a Postgres store's) panics
/// with a message saying to `.await` it instead.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    if tokio::runtime::Handle::try_current().is_err() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|error| panic!("block_on: a tokio runtime cannot start: {error}"));
        return runtime.block_on(future);
    }
    let mut future = std::pin::pin!(future);
    match future.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => {
            panic!("block_on inside a tokio runtime: this store call must wait for the network; `.await` it instead")
        }
    }
}

/// A store connection together with the worker's [`StoreGate`]: every call goes through
/// [`GatedStore::call`], which marks the boundary before and after.
#[derive(Clone, Copy)]
pub struct GatedStore<'a> {
    store: &'a ClaimStore,
    gate: &'a dyn StoreGate,
}

impl std::fmt::Debug for GatedStore<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatedStore").field("store", self.store).finish_non_exhaustive()
    }
}

impl<'a> GatedStore<'a> {
    /// `store` behind `gate`.
    pub fn new(store: &'a ClaimStore, gate: &'a dyn StoreGate) -> Self {
        Self { store, gate }
    }

    /// Runs one store call named `name` (`claim`, `load`, `complete`, ...) between the
    /// gate's `enter` and `leave`.
    pub async fn call<T>(self, name: &'static str, work: impl AsyncFnOnce(&'a ClaimStore) -> T) -> T {
        self.gate.enter(name).await;
        let result = work(self.store).await;
        self.gate.leave(name).await;
        result
    }
}

/// `.wait()`: [`block_on`] as a method, for the unit tests' store calls.
#[cfg(test)]
pub(crate) trait Wait: std::future::Future + Sized {
    fn wait(self) -> Self::Output {
        block_on(self)
    }
}

#[cfg(test)]
impl<F: std::future::Future> Wait for F {}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(tenant: &str, key: &str, owner: &str, now_ms: u64) -> NewClaim {
        NewClaim {
            tenant: tenant.into(),
            operation_key: key.into(),
            tool_name: "tickets.create".into(),
            tool_version: "2026-08-18".into(),
            request_fingerprint: "jcs-v1:sha256:aa".into(),
            downstream_key: Some(key.into()),
            owner_token: owner.into(),
            now_ms,
            lease_until_ms: now_ms + 5_000,
            expires_at_ms: now_ms + 60_000,
            request_json: None,
        }
    }

    fn owned(tenant: &str, key: &str, owner: &str) -> OwnedClaim {
        OwnedClaim {
            tenant: tenant.into(),
            operation_key: key.into(),
            owner_token: owner.into(),
            lease_until_ms: 5_000,
        }
    }

    fn memory() -> ClaimStore {
        ClaimStore::open(&StoreLocation::PrivateMemory).unwrap()
    }

    #[test]
    fn the_first_claim_wins_and_later_claims_load_the_untouched_record() {
        let store = memory();
        let first = store.claim(&claim("acme", "k1", "A", 0)).wait().unwrap();
        assert!(matches!(first, Claimed::New(ref record) if record.owner_token.as_deref() == Some("A")));
        let mut changed = claim("acme", "k1", "B", 10);
        changed.request_fingerprint = "jcs-v1:sha256:bb".into();
        match store.claim(&changed).wait().unwrap() {
            Claimed::Existing(record) => {
                assert_eq!(record.owner_token.as_deref(), Some("A"));
                assert_eq!(record.request_fingerprint, "jcs-v1:sha256:aa");
                assert_eq!(record.status, RecordStatus::Pending);
                assert_eq!(record.created_at_ms, 0);
            }
            other => panic!("expected the existing record, got {other:?}"),
        }
        assert_eq!(store.records().wait().unwrap().len(), 1);
    }

    #[test]
    fn the_same_key_under_two_tenants_is_two_operations() {
        let store = memory();
        assert!(matches!(store.claim(&claim("acme", "k1", "A", 0)).wait().unwrap(), Claimed::New(_)));
        assert!(matches!(store.claim(&claim("globex", "k1", "B", 0)).wait().unwrap(), Claimed::New(_)));
        assert_eq!(store.records().wait().unwrap().len(), 2);
    }

    #[test]
    fn only_the_owner_completes_and_a_taken_over_owner_cannot_overwrite() {
        let store = memory();
        store.claim(&claim("acme", "k1", "A", 0)).wait().unwrap();
        assert!(!store.complete(&owned("acme", "k1", "B"), Some("ticket_9"), "{}", 1).wait().unwrap());

        // The lease has not run out: no take-over.
        let mut take_over = TakeOver {
            tenant: "acme".into(),
            operation_key: "k1".into(),
            observed_owner: Some("A".into()),
            observed_lease_until_ms: 5_000,
            new_owner: "B".into(),
            lease_until_ms: 9_000,
            now_ms: 4_999,
        };
        assert!(!store.take_over(&take_over).wait().unwrap());
        take_over.now_ms = 5_000;
        assert!(store.take_over(&take_over).wait().unwrap());
        // A second take-over of the same observation loses.
        assert!(!store.take_over(&TakeOver { new_owner: "C".into(), ..take_over.clone() }).wait().unwrap());

        assert!(!store
            .complete(&owned("acme", "k1", "A"), Some("ticket_1"), r#"{"a":1}"#, 6_000)
            .wait()
            .unwrap());
        assert!(!store.mark_unknown(&owned("acme", "k1", "A"), "late", 6_000).wait().unwrap());
        assert!(!store.fail_permanent(&owned("acme", "k1", "A"), "unauthorized", 6_000).wait().unwrap());
        let record = store.load("acme", "k1").wait().unwrap().unwrap();
        assert_eq!((record.status, record.owner_token.as_deref()), (RecordStatus::Pending, Some("B")));
        assert!(store.reconciliations("acme", "k1").wait().unwrap().is_empty());

        assert!(store
            .complete(&owned("acme", "k1", "B"), Some("ticket_1"), r#"{"ticket_id":"ticket_1"}"#, 7_000)
            .wait()
            .unwrap());
        let record = store.load("acme", "k1").wait().unwrap().unwrap();
        assert_eq!(record.status, RecordStatus::Applied);
        assert_eq!(record.effect_reference.as_deref(), Some("ticket_1"));
        assert_eq!(record.owner_token, None);
        assert!(!store.complete(&owned("acme", "k1", "B"), Some("ticket_2"), "{}", 8_000).wait().unwrap());
    }

    #[test]
    fn mark_unknown_writes_a_reconciliation_row_in_the_same_transaction() {
        let store = memory();
        store.claim(&claim("acme", "k1", "A", 0)).wait().unwrap();
        assert!(store.mark_unknown(&owned("acme", "k1", "A"), "connection closed", 10).wait().unwrap());
        let record = store.load("acme", "k1").wait().unwrap().unwrap();
        assert_eq!(record.status, RecordStatus::Unknown);
        assert_eq!(record.reason.as_deref(), Some("connection closed"));
        let rows = store.reconciliations("acme", "k1").wait().unwrap();
        assert_eq!(store.all_reconciliations().wait().unwrap(), rows);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].at_ms, rows[0].finding.as_str()), (10, "connection closed"));

        // An unknown record can be taken over by anyone (nobody owns it).
        let take_over = TakeOver {
            tenant: "acme".into(),
            operation_key: "k1".into(),
            observed_owner: None,
            observed_lease_until_ms: 0,
            new_owner: "B".into(),
            lease_until_ms: 5_020,
            now_ms: 20,
        };
        assert!(store.take_over(&take_over).wait().unwrap());
        assert_eq!(store.load("acme", "k1").wait().unwrap().unwrap().status, RecordStatus::Pending);
    }

    #[test]
    fn a_tombstone_keeps_key_fingerprint_and_reference_and_drops_the_response() {
        let store = memory();
        store.claim(&claim("acme", "k1", "A", 0)).wait().unwrap();
        assert!(!store.tombstone("acme", "k1", 1).wait().unwrap(), "a pending record is not terminal");
        store
            .complete(&owned("acme", "k1", "A"), Some("ticket_1"), r#"{"ticket_id":"ticket_1"}"#, 1)
            .wait()
            .unwrap();
        assert!(store.tombstone("acme", "k1", 70_000).wait().unwrap());
        let record = store.load("acme", "k1").wait().unwrap().unwrap();
        assert_eq!(record.status, RecordStatus::Tombstone);
        assert_eq!(record.effect_reference.as_deref(), Some("ticket_1"));
        assert_eq!(record.request_fingerprint, "jcs-v1:sha256:aa");
        assert_eq!(record.response_json, None);
        assert!(!store.tombstone("acme", "k1", 70_001).wait().unwrap());
    }

    #[test]
    fn a_job_is_settled_exactly_once() {
        let store = memory();
        store.claim(&claim("acme", "k1", "A", 0)).wait().unwrap();
        assert!(store.set_job(&owned("acme", "k1", "A"), "job_1", 1).wait().unwrap());
        let record = store.load("acme", "k1").wait().unwrap().unwrap();
        assert_eq!(
            (record.status, record.job_id.as_deref(), record.owner_token),
            (RecordStatus::Pending, Some("job_1"), None)
        );
        assert_eq!(store.load_by_job("acme", "job_1").wait().unwrap().unwrap().operation_key, "k1");
        assert_eq!(store.load_by_downstream_key("acme", "k1").wait().unwrap().unwrap().operation_key, "k1");
        assert!(store.load_by_downstream_key("globex", "k1").wait().unwrap().is_none());
        assert!(
            !store.settle_job("acme", "k1", "job_2", "{}", 2, false).wait().unwrap(),
            "another job does not settle it"
        );
        assert!(store.settle_job("acme", "k1", "job_1", r#"{"job_id":"job_1"}"#, 2, false).wait().unwrap());
        assert!(!store.settle_job("acme", "k1", "job_1", r#"{"job_id":"job_1"}"#, 3, false).wait().unwrap());
        let record = store.load("acme", "k1").wait().unwrap().unwrap();
        assert_eq!(
            (record.status, record.effect_reference.as_deref()),
            (RecordStatus::Applied, Some("job_1"))
        );
    }

    #[test]
    fn webhook_event_ids_are_recorded_once() {
        let store = memory();
        assert!(store.record_event("evt_1", "acme", Some("k1"), 0).wait().unwrap());
        assert!(!store.record_event("evt_1", "acme", Some("k1"), 1).wait().unwrap());
        assert!(store.record_event("evt_2", "acme", None, 2).wait().unwrap());
    }

    #[test]
    fn a_released_record_waits_for_a_consumer_and_forget_deletes() {
        let store = memory();
        store.claim(&claim("acme", "k1", "A", 0)).wait().unwrap();
        assert!(store.release(&owned("acme", "k1", "A"), 1).wait().unwrap());
        let record = store.load("acme", "k1").wait().unwrap().unwrap();
        assert_eq!(
            (record.owner_token, record.lease_until_ms, record.status),
            (None, 0, RecordStatus::Pending)
        );
        assert!(store.forget("acme", "k1").wait().unwrap());
        assert!(store.load("acme", "k1").wait().unwrap().is_none());
    }

    #[test]
    fn shared_memory_databases_are_shared_by_name_and_live_while_a_connection_is_open() {
        let location = StoreLocation::SharedMemory("store-unit-shared-1".into());
        let keeper = ClaimStore::open(&location).unwrap();
        {
            let worker = ClaimStore::open(&location).unwrap();
            worker.claim(&claim("acme", "k1", "A", 0)).wait().unwrap();
        }
        let other = ClaimStore::open(&location).unwrap();
        assert!(other.load("acme", "k1").wait().unwrap().is_some());
        let elsewhere = ClaimStore::open(&StoreLocation::SharedMemory("store-unit-shared-2".into())).unwrap();
        assert!(elsewhere.load("acme", "k1").wait().unwrap().is_none());
        drop(keeper);
    }

    #[test]
    fn a_file_store_uses_wal_with_normal_synchronous_writes() {
        let path = std::env::temp_dir().join(format!("replaylab-store-pragmas-{}.db", std::process::id()));
        let store = ClaimStore::open(&StoreLocation::File(path.clone())).unwrap();
        let mode: String = store
            .sqlite()
            .expect("a SQLite store")
            .connection
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        let synchronous: i64 = store
            .sqlite()
            .expect("a SQLite store")
            .connection
            .query_row("PRAGMA synchronous", [], |row| row.get(0))
            .unwrap();
        assert_eq!((mode.as_str(), synchronous), ("wal", 1), "1 is NORMAL");
        drop(store);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    #[test]
    fn fresh_shared_memory_names_are_valid_and_distinct() {
        let first = StoreLocation::fresh_shared_memory("S05 concurrent/claim seed=7");
        let second = StoreLocation::fresh_shared_memory("S05 concurrent/claim seed=7");
        assert_ne!(first, second);
        let StoreLocation::SharedMemory(name) = &first else { panic!("{first:?}") };
        assert!(name.starts_with("S05_concurrent_claim_seed_7-"), "{name}");
        ClaimStore::open(&first).unwrap();
        ClaimStore::open(&StoreLocation::fresh_shared_memory(&"x".repeat(500))).unwrap();
    }

    #[test]
    fn bad_shared_memory_names_are_refused() {
        for name in ["", "a?mode=rw", "a b", "x/../y", &"n".repeat(MAX_SHARED_MEMORY_NAME_CHARS + 1)] {
            let error = ClaimStore::open(&StoreLocation::SharedMemory(name.into())).unwrap_err();
            assert!(matches!(error, StoreError::InvalidName(_)), "{name:?}: {error}");
        }
    }

    #[test]
    fn a_hand_edited_status_is_reported_not_trusted() {
        let store = memory();
        store.claim(&claim("acme", "k1", "A", 0)).wait().unwrap();
        store
            .sqlite()
            .expect("a SQLite store")
            .connection
            .pragma_update(None, "ignore_check_constraints", true)
            .unwrap();
        store
            .sqlite()
            .expect("a SQLite store")
            .connection
            .execute("UPDATE tool_operations SET status = 'done'", [])
            .unwrap();
        let error = store.load("acme", "k1").wait().unwrap_err();
        assert!(error.to_string().contains("status \"done\""), "{error}");
    }
}
