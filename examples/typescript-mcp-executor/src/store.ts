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
  created_at_ms: number;
  updated_at_ms: number;
  expires_at_ms: number;
}

/** A new claim: the columns a claim inserts. */
export type NewClaim = Omit<OperationRow, "effect_reference" | "result_json" | "reason" | "handed_over_ms">;

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
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    expires_at_ms    INTEGER NOT NULL,
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
        `UPDATE operations SET ${assignments}, owner_token = NULL, lease_until_ms = 0, updated_at_ms = ? ` +
          "WHERE tenant = ? AND operation_key = ? AND owner_token = ? AND status = 'pending'",
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

  /** Takes an abandoned (lease run out) or unknown claim over, exactly as observed: if anyone
   * changed it since we read it, nothing is written and someone else has it. */
  takeOver(record: OperationRow, newOwner: string, leaseUntilMs: number): boolean {
    const now = nowMs();
    const changed = this.db
      .prepare(
        "UPDATE operations SET status = 'pending', owner_token = ?, lease_until_ms = ?, updated_at_ms = ? " +
          "WHERE tenant = ? AND operation_key = ? AND owner_token IS ? AND lease_until_ms = ? " +
          "AND lease_until_ms <= ? AND status IN ('pending', 'unknown')",
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

  /** Records without an outcome: unknown, or pending (an owner at work, or one whose lease ran
   * out: the sweep waits for the lease before it looks). */
  unsettled(): OperationRow[] {
    return this.db
      .prepare("SELECT * FROM operations WHERE status IN ('unknown', 'pending') ORDER BY tenant, operation_key")
      .all() as OperationRow[];
  }
}
