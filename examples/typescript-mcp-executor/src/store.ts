// The durable claim store: one SQLite file in the state directory, shared by every worker
// process of the run. better-sqlite3 is synchronous: each method below runs to its end
// without yielding to the event loop, so no other call of this process can come in between,
// and SQLite's file locks arbitrate between processes.

import Database from "better-sqlite3";

import { nowMs } from "./config.js";

export type Status = "pending" | "applied" | "rejected" | "unknown" | "tombstone";

/** One operation's record, as the table holds it. */
export interface OperationRow {
  tenant: string;
  operation_key: string;
  tool: string;
  tool_version: string;
  fingerprint: string;
  status: Status;
  owner_token: string | null;
  lease_until_ms: number;
  downstream_key: string;
  effect_reference: string | null;
  result_json: string | null;
  reason: string | null;
  request_json: string | null;
  /** When it was filed with the operators' queue (once is enough). */
  handed_over_ms: number | null;
  /** A delayed job's id, once the downstream accepted it. */
  job_id: string | null;
  created_at_ms: number;
  updated_at_ms: number;
  expires_at_ms: number;
}

/** A new claim: the columns a claim inserts. */
export type NewClaim = Omit<OperationRow, "effect_reference" | "result_json" | "reason" | "handed_over_ms" | "job_id">;

/** A completion notice a settled job still owes. */
export interface NoticeRow {
  tenant: string;
  operation_key: string;
  job_id: string;
  /** When its sender took it on (a later one waits for it). */
  claimed_at_ms: number;
}

/** What settling a finished job did: only "processed" made the transition. */
export type Settled = "processed" | "already_settled" | "duplicate_event";

// A `pending` record is one of three things: claimed by an owner at work (owner_token and a
// lease), a job the downstream is running (job_id, no owner), or an envelope waiting in the
// queue for its consumer (neither). Only the first can be abandoned: its owner can die.
const SCHEMA = `
CREATE TABLE IF NOT EXISTS operations (
    tenant           TEXT    NOT NULL,
    operation_key    TEXT    NOT NULL,
    tool             TEXT    NOT NULL,
    tool_version     TEXT    NOT NULL,
    fingerprint      TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN
                         ('pending', 'applied', 'rejected', 'unknown', 'tombstone')),
    owner_token      TEXT,
    lease_until_ms   INTEGER NOT NULL DEFAULT 0,
    downstream_key   TEXT    NOT NULL,
    effect_reference TEXT,
    result_json      TEXT,
    reason           TEXT,
    request_json     TEXT,
    handed_over_ms   INTEGER,  -- when it was filed with the operators' queue (once is enough)
    job_id           TEXT,     -- a delayed job's id, once the downstream accepted it
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    expires_at_ms    INTEGER NOT NULL,
    PRIMARY KEY (tenant, operation_key)
) WITHOUT ROWID;
-- A completion webhook names the job's Idempotency-Key (or only the job): its operation.
CREATE INDEX IF NOT EXISTS operations_by_downstream_key ON operations (tenant, downstream_key);
CREATE INDEX IF NOT EXISTS operations_by_job ON operations (tenant, job_id);
-- Every webhook event id that matched an operation, kept: a redelivery is seen as one.
CREATE TABLE IF NOT EXISTS webhook_events (
    event_id       TEXT    PRIMARY KEY,
    tenant         TEXT    NOT NULL,
    operation_key  TEXT    NOT NULL,
    received_at_ms INTEGER NOT NULL
);
-- The completion notices owed: written with the job's settlement, in its transaction, and
-- deleted once the notice was confirmed or handed over. A crash in between leaves it owed.
CREATE TABLE IF NOT EXISTS notices (
    tenant        TEXT    NOT NULL,
    operation_key TEXT    NOT NULL,
    job_id        TEXT    NOT NULL,
    claimed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (tenant, operation_key)
) WITHOUT ROWID;
`;

/** Any failure of the store (SQLite's own errors). */
export const StoreError = Database.SqliteError;

const BUSY_TIMEOUT_MS = 5_000;

/** Blocks this thread for `ms` (the store's constructor is synchronous, as the rest is). */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

export class Store {
  private readonly db: Database.Database;

  constructor(path: string) {
    // timeout: SQLite's busy timeout; wait for another process's write lock rather than fail.
    this.db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
    // WAL: readers never block the writer, and a committed transaction survives the process
    // being killed (synchronous=NORMAL is durable against a crash of the process, not against a
    // power cut). SQLite answers "database is locked" at once, without waiting, where waiting
    // could deadlock: two processes opening a new file together while one switches it to WAL.
    // Try the switch again for as long as the busy timeout.
    const deadline = Date.now() + BUSY_TIMEOUT_MS;
    for (;;) {
      try {
        const mode = this.db.pragma("journal_mode", { simple: true });
        if (String(mode).toLowerCase() !== "wal") this.db.pragma("journal_mode = WAL");
        break;
      } catch (error) {
        if (!(error instanceof StoreError) || !/locked|busy/i.test(error.message) || Date.now() > deadline) {
          throw error;
        }
        sleepSync(10);
      }
    }
    this.db.pragma("synchronous = NORMAL");
    this.transaction(() => this.db.exec(SCHEMA));
  }

  /** `BEGIN IMMEDIATE` takes the write lock at once: two processes can never both read
   * "absent" and then both insert. */
  private transaction<T>(body: () => T): T {
    return this.db.transaction(body).immediate();
  }

  /** Claims the operation or loads the record that exists, atomically. True: ours. */
  claim(row: NewClaim): [boolean, OperationRow] {
    const columns = Object.keys(row);
    const insert = this.db.prepare(
      `INSERT INTO operations (${columns.join(", ")}) VALUES (${columns.map((c) => "@" + c).join(", ")}) ` +
        "ON CONFLICT (tenant, operation_key) DO NOTHING",
    );
    return this.transaction(() => {
      const inserted = insert.run(row).changes;
      const record = this.load(row.tenant, row.operation_key);
      if (record === undefined) throw new Error("a claimed record is there");
      return [inserted === 1, record];
    });
  }

  load(tenant: string, key: string): OperationRow | undefined {
    return this.db.prepare("SELECT * FROM operations WHERE tenant = ? AND operation_key = ?").get(tenant, key) as
      | OperationRow
      | undefined;
  }

  /** A write on behalf of an owner: compare-and-set on the owner token, so that an owner whose
   * claim was taken over cannot overwrite the new owner's record. */
  private ownedUpdate(tenant: string, key: string, owner: string, assignments: string, values: unknown[]): boolean {
    const changed = this.db
      .prepare(
        `UPDATE operations SET ${assignments ? assignments + ", " : ""}owner_token = NULL, lease_until_ms = 0, ` +
          "updated_at_ms = ? WHERE tenant = ? AND operation_key = ? AND owner_token = ? AND status = 'pending'",
      )
      .run(...values, nowMs(), tenant, key, owner).changes;
    return changed === 1;
  }

  complete(tenant: string, key: string, owner: string, reference: string, result: unknown): boolean {
    // The request is no longer needed once the outcome is known: the business fields are not
    // kept longer than they must be.
    return this.ownedUpdate(
      tenant,
      key,
      owner,
      "status = 'applied', effect_reference = ?, result_json = ?, reason = NULL, request_json = NULL",
      [reference, JSON.stringify(result)],
    );
  }

  fail(tenant: string, key: string, owner: string, reason: string): boolean {
    return this.ownedUpdate(tenant, key, owner, "status = 'rejected', reason = ?, request_json = NULL", [reason]);
  }

  markUnknown(tenant: string, key: string, owner: string, finding: string): boolean {
    return this.ownedUpdate(tenant, key, owner, "status = 'unknown', reason = ?", [finding]);
  }

  /** The downstream accepted the job: the record stays pending, owned by the job (no owner, no
   * lease) until a poll or a webhook hears that it finished. */
  setJob(tenant: string, key: string, owner: string, jobId: string): boolean {
    return this.ownedUpdate(tenant, key, owner, "job_id = ?", [jobId]);
  }

  /** The envelope is in the queue: the record stays pending, without an owner, until a consumer
   * claims it. */
  release(tenant: string, key: string, owner: string): boolean {
    return this.ownedUpdate(tenant, key, owner, "", []);
  }

  /**
   * Settles a finished job, once per operation, whoever heard of it (a poll, a webhook): pending
   * or unknown, with this job or none recorded yet, -> applied. Only the caller that made that
   * transition gets "processed" and owes the completion notice, written in the same transaction
   * (a crash before the notice went out leaves it owed, not forgotten). With a webhook's
   * `eventId`: the event is kept in the same transaction, and an event seen before is
   * "duplicate_event", nothing else done.
   */
  settleJob(tenant: string, key: string, jobId: string, result: unknown, noticeDue: boolean, eventId?: string): Settled {
    const now = nowMs();
    return this.transaction((): Settled => {
      if (eventId !== undefined) {
        const kept = this.db
          .prepare(
            "INSERT INTO webhook_events (event_id, tenant, operation_key, received_at_ms) VALUES (?, ?, ?, ?) " +
              "ON CONFLICT (event_id) DO NOTHING",
          )
          .run(eventId, tenant, key, now).changes;
        if (kept === 0) return "duplicate_event";
      }
      const changed = this.db
        .prepare(
          "UPDATE operations SET status = 'applied', job_id = ?, effect_reference = ?, result_json = ?, " +
            "owner_token = NULL, lease_until_ms = 0, reason = NULL, request_json = NULL, updated_at_ms = ? " +
            "WHERE tenant = ? AND operation_key = ? AND status IN ('pending', 'unknown') " +
            "AND (job_id IS NULL OR job_id = ?)",
        )
        .run(jobId, jobId, JSON.stringify(result), now, tenant, key, jobId).changes;
      if (changed === 0) return "already_settled";
      if (noticeDue) {
        this.db
          .prepare(
            "INSERT INTO notices (tenant, operation_key, job_id, claimed_at_ms) VALUES (?, ?, ?, ?) " +
              "ON CONFLICT (tenant, operation_key) DO UPDATE SET job_id = excluded.job_id, " +
              "claimed_at_ms = excluded.claimed_at_ms",
          )
          .run(tenant, key, jobId, now);
      }
      return "processed";
    });
  }

  loadByDownstreamKey(tenant: string, downstreamKey: string): OperationRow | undefined {
    return this.db
      .prepare("SELECT * FROM operations WHERE tenant = ? AND downstream_key = ?")
      .get(tenant, downstreamKey) as OperationRow | undefined;
  }

  loadByJob(tenant: string, jobId: string): OperationRow | undefined {
    return this.db.prepare("SELECT * FROM operations WHERE tenant = ? AND job_id = ?").get(tenant, jobId) as
      | OperationRow
      | undefined;
  }

  /** The completion notice the operation's settled job still owes, if any. */
  dueNotice(tenant: string, key: string): NoticeRow | undefined {
    return this.db.prepare("SELECT * FROM notices WHERE tenant = ? AND operation_key = ?").get(tenant, key) as
      | NoticeRow
      | undefined;
  }

  /** Takes an owed notice on, by compare-and-set on when it was last taken on (exactly as
   * read): of several pollers that read the same row, one sends it. */
  claimNotice(notice: NoticeRow): boolean {
    const changed = this.db
      .prepare("UPDATE notices SET claimed_at_ms = ? WHERE tenant = ? AND operation_key = ? AND claimed_at_ms = ?")
      .run(nowMs(), notice.tenant, notice.operation_key, notice.claimed_at_ms).changes;
    return changed === 1;
  }

  /** The notice is owed no more: confirmed by the downstream, or handed over to people. */
  noticeDone(tenant: string, key: string): void {
    this.db.prepare("DELETE FROM notices WHERE tenant = ? AND operation_key = ?").run(tenant, key);
  }

  /** Takes an abandoned (lease run out), unknown or queued claim over, exactly as observed: if
   * anyone changed it since we read it, nothing is written and someone else has it. A running
   * job is never taken over: the downstream has it. */
  takeOver(record: OperationRow, newOwner: string, leaseUntilMs: number): boolean {
    const now = nowMs();
    const changed = this.db
      .prepare(
        "UPDATE operations SET status = 'pending', owner_token = ?, lease_until_ms = ?, updated_at_ms = ? " +
          "WHERE tenant = ? AND operation_key = ? AND owner_token IS ? AND lease_until_ms = ? " +
          "AND lease_until_ms <= ? AND status IN ('pending', 'unknown') AND job_id IS NULL",
      )
      .run(
        newOwner,
        leaseUntilMs,
        now,
        record.tenant,
        record.operation_key,
        record.owner_token,
        record.lease_until_ms,
        now,
      ).changes;
    return changed === 1;
  }

  /** Past retention a settled record keeps key, fingerprint and effect reference (so a late
   * duplicate is answered `expired`, never carried out again) and drops the result. */
  tombstone(record: OperationRow): void {
    this.db
      .prepare(
        "UPDATE operations SET status = 'tombstone', result_json = NULL, request_json = NULL, updated_at_ms = ? " +
          "WHERE tenant = ? AND operation_key = ? AND status IN ('applied', 'rejected')",
      )
      .run(nowMs(), record.tenant, record.operation_key);
  }

  noteHandedOver(tenant: string, key: string): void {
    this.db
      .prepare("UPDATE operations SET handed_over_ms = ? WHERE tenant = ? AND operation_key = ?")
      .run(nowMs(), tenant, key);
  }

  /** Records without an outcome that an owner was at work on: unknown, or pending with an owner
   * (at work, or one whose lease ran out: the sweep waits for the lease before it looks). A
   * running job is the downstream's, a queued operation the queue's. */
  unsettled(): OperationRow[] {
    return this.db
      .prepare(
        "SELECT * FROM operations WHERE status = 'unknown' " +
          "OR (status = 'pending' AND owner_token IS NOT NULL AND job_id IS NULL) ORDER BY tenant, operation_key",
      )
      .all() as OperationRow[];
  }
}
