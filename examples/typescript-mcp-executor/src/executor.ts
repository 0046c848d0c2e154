// The executor: claims, the effect, recovery, poll and reconcile, the process's own background
// reconciliation, delayed jobs and their webhooks, and the queue's consumer. It follows the
// REPLAY state machine of the Rust reference (executor/src/machine.rs), as the Python example
// does, step by step.

import { createHash, randomBytes } from "node:crypto";
import path from "node:path";

import { canonicalJson } from "./canonical.js";
import { type Address, type Config, lease, nowMs, retention, serviceTraits, traits } from "./config.js";
import { type Contract, CONTRACTS, contractOf, NOTICE, TOOLS } from "./contracts.js";
import {
  Ambiguous,
  type Answer,
  classify,
  describeLookup,
  Downstream,
  effectRequest,
  isObject,
  type Json,
  lookUpReceipt,
  noticeRequest,
  readJob,
  receiptResult,
} from "./downstream.js";
import { log } from "./log.js";
import { type OperationRow, type Settled, Store, StoreError } from "./store.js";

export const CONVENTIONS_VERSION = 1;
export const CALL_META = "dev.replaylab/call";
export const MANIFEST_URI = "replaylab://executor";
export const POLL_TOOL = "replaylab.poll";
export const RECONCILE_TOOL = "replaylab.reconcile";
export const CONSUME_TOOL = "replaylab.consume";
// Where completion webhooks are received on REPLAYLAB_WEBHOOK_LISTEN: the conventions' default,
// so the manifest need not name it (capabilities.webhook_path).
export const WEBHOOK_PATH = "/webhooks";

// The key may also arrive as an argument (docs/mcp.md, "KeyPlacement"). It is transport, not
// business content: it never enters the fingerprint and is never sent downstream.
const KEY_ARGUMENTS = ["idempotency_key", "idempotencyKey"];

// Argument limits, as the contracts' validation has them (protocol/src/contract.rs).
const MAX_ARGUMENT_CHARS = 10_000;
const MAX_ID_CHARS = 255;
// RFC 8785 writes numbers as IEEE doubles: integers beyond 2^53 could share a fingerprint.
const MAX_EXACT_INTEGER = 2 ** 53;

// Keys sent downstream must be short visible ASCII; longer or other keys are sent hashed.
const MAX_DOWNSTREAM_KEY_CHARS = 200;

// The executor's own reconciliation: how long after a record last changed it first looks (a
// moment for a slow answer to land, and for the agent's own retry to come first), how far apart
// its tries are, and how many it makes per process for one operation before handing it over to
// people.
const RECONCILE_AFTER_MS = 1_000;
const RECONCILE_ATTEMPTS = 3;

// When to poll again: a running job (the fake's take a few seconds), and a queued operation (a
// consumer usually picks an envelope up within a second of it being written).
const JOB_POLL_AFTER_SECONDS = 1;
const QUEUE_POLL_AFTER_SECONDS = 1;

// --------------------------------------------------------------------------- outcomes

export type OutcomeStatus = "applied" | "replayed" | "in_flight" | "rejected" | "unknown" | "expired";

/** An `Outcome` (protocol/schema/mcp.schema.json), as `structuredContent` carries it. */
export interface Outcome {
  status: OutcomeStatus;
  safe_to_repeat: boolean;
  next_action: string;
  reason?: string;
  message?: string;
  operation_key?: string;
  effect_reference?: string;
  result?: unknown;
  retry_after_seconds?: number;
  [field: string]: unknown;
}

/** status -> (safe_to_repeat, next_action), as protocol::Outcome::new has them. */
const DEFAULTS: Record<OutcomeStatus, [boolean, string]> = {
  applied: [true, "none"],
  replayed: [true, "none"],
  in_flight: [true, "poll"],
  rejected: [false, "none"],
  unknown: [false, "reconcile"],
  expired: [false, "inspect_operation"],
};

interface OutcomeFields {
  reason?: string;
  message?: string;
  reference?: string | null;
  result?: unknown;
  retryAfter?: number;
  nextAction?: string;
}

/** An outcome; absent fields are left out. */
export function outcome(status: OutcomeStatus, key: string | undefined, fields: OutcomeFields = {}): Outcome {
  const [safe, defaultNext] = DEFAULTS[status];
  const answer: Outcome = { status, safe_to_repeat: safe, next_action: fields.nextAction ?? defaultNext };
  const optional: [string, unknown][] = [
    ["reason", fields.reason],
    ["message", fields.message],
    ["operation_key", key],
    ["effect_reference", fields.reference],
    ["result", fields.result],
    ["retry_after_seconds", fields.retryAfter],
  ];
  for (const [name, value] of optional) {
    if (value !== undefined && value !== null) answer[name] = value;
  }
  return answer;
}

function invalid(key: string | undefined, message: string): Outcome {
  return outcome("rejected", key, { reason: "invalid_request", message });
}

function unauthorized(key: string): Outcome {
  return outcome("rejected", key, { reason: "unauthorized", message: "the actor may not use this tool now" });
}

// --------------------------------------------------------------------------- the call

/** `_meta["dev.replaylab/call"]`, checked. */
export interface CallMeta {
  version: number;
  tenant: string;
  environment: string;
  workflow_id: string;
  step_id: string;
  actor: string;
  tool_version: string;
  call_id: string;
  attempt: number;
  idempotency_key: string;
}

/** A request the server cannot read (no or a malformed `_meta`): a tool error. */
export class CallError extends Error {}

const TEXT_FIELDS = [
  "tenant",
  "environment",
  "workflow_id",
  "step_id",
  "actor",
  "tool_version",
  "call_id",
  "idempotency_key",
] as const;

/** `_meta["dev.replaylab/call"]` checked against the conventions; throws CallError. */
export function readCallMeta(meta: unknown): CallMeta {
  const call = isObject(meta) ? meta[CALL_META] : undefined;
  if (call === undefined || call === null) {
    throw new CallError(
      `missing _meta["${CALL_META}"]: name the operation (tenant, environment, workflow_id, step_id, actor, ` +
        "tool_version, call_id, attempt, idempotency_key; docs/mcp.md)",
    );
  }
  if (!isObject(call)) throw new CallError(`invalid _meta["${CALL_META}"]: expected an object`);
  const expected = ["version", "attempt", ...TEXT_FIELDS].sort();
  const given = Object.keys(call).sort();
  if (given.join("\u0000") !== expected.join("\u0000")) {
    throw new CallError(`invalid _meta["${CALL_META}"]: expected exactly the fields ${JSON.stringify(expected)}`);
  }
  if (call.version !== CONVENTIONS_VERSION) {
    throw new CallError(
      `invalid _meta["${CALL_META}"]: version ${JSON.stringify(call.version)} ` +
        `(this server speaks version ${CONVENTIONS_VERSION})`,
    );
  }
  if (typeof call.attempt !== "number" || !Number.isInteger(call.attempt) || call.attempt < 1) {
    throw new CallError(`invalid _meta["${CALL_META}"]: attempt must be a whole number from 1`);
  }
  for (const name of TEXT_FIELDS) {
    if (typeof call[name] !== "string") throw new CallError(`invalid _meta["${CALL_META}"]: ${name} must be a string`);
  }
  return call as unknown as CallMeta;
}

/** Characters counted as Unicode code points, as the contracts count them. */
function length(text: string): number {
  let count = 0;
  for (const _ of text) count += 1;
  return count;
}

/** 1 to 255 characters without control characters. */
function isIdentifier(value: unknown): value is string {
  if (typeof value !== "string") return false;
  const control = [...value].some((c) => {
    const code = c.codePointAt(0) ?? 0;
    return code < 32 || (code >= 127 && code < 160);
  });
  // A lone surrogate has no UTF-8 form: it could be neither hashed nor sent.
  return value !== "" && length(value) <= MAX_ID_CHARS && !control && value.isWellFormed();
}

function checkIdentifiers(call: CallMeta): string | undefined {
  for (const name of ["tenant", "environment", "workflow_id", "step_id", "actor", "call_id"] as const) {
    if (!isIdentifier(call[name])) {
      return `\`${name}\` must be 1 to ${MAX_ID_CHARS} characters without control characters`;
    }
  }
  return undefined;
}

/** `tenant/environment/workflow_id/step_id` (docs/mcp.md): the operation, never the call. `%`
 * and `/` inside a part are escaped so that parts cannot run into each other. */
export function operationKey(call: CallMeta): string {
  return [call.tenant, call.environment, call.workflow_id, call.step_id]
    .map((part) => part.replaceAll("%", "%25").replaceAll("/", "%2F"))
    .join("/");
}

/** The Idempotency-Key header: the operation key when it is short visible ASCII. */
function downstreamKeyOf(key: string): string {
  if (key.length <= MAX_DOWNSTREAM_KEY_CHARS && /^[\x21-\x7e]*$/.test(key)) return key;
  return "sha256:" + createHash("sha256").update(key, "utf8").digest("hex");
}

/** The arguments checked against the contract, defaults filled in; throws an Error saying why. */
function validatedArguments(contract: Contract, args: Json): Json {
  const checked: Json = {};
  for (const [name, value] of Object.entries(args)) {
    if (!KEY_ARGUMENTS.includes(name)) checked[name] = value;
  }
  for (const [name, value] of Object.entries(contract.defaults)) {
    if (!(name in checked)) checked[name] = value;
  }
  for (const [name, value] of Object.entries(checked)) {
    const kind = Object.hasOwn(contract.arguments, name) ? contract.arguments[name] : undefined;
    if (kind === undefined) throw new Error(`unknown argument \`${name}\` for ${contract.name}`);
    let fits: boolean;
    if (kind === "string") {
      fits = typeof value === "string" && value !== "" && length(value) <= MAX_ARGUMENT_CHARS;
    } else if (kind === "integer") {
      fits = typeof value === "number" && Number.isInteger(value) && Math.abs(value) <= MAX_EXACT_INTEGER;
    } else {
      fits = isObject(value);
    }
    if (!fits) {
      throw new Error(
        `argument \`${name}\` must be a ${kind}` +
          (kind === "string" ? ` (non-empty, at most ${MAX_ARGUMENT_CHARS} characters)` : ""),
      );
    }
  }
  for (const name of contract.required) {
    if (!(name in checked)) throw new Error(`argument \`${name}\` is required`);
  }
  return checked;
}

/** SHA-256 of the RFC 8785 canonical form of what the effect depends on: tool, version, tenant
 * and the material arguments after defaults. Key order, whitespace, an omitted default or a
 * trace id never change it; any material value does. */
function fingerprint(contract: Contract, tenant: string, args: Json): string {
  const material: Json = {};
  for (const name of contract.material) {
    if (name in args) material[name] = args[name];
  }
  const canonical = canonicalJson({
    tool: contract.name,
    tool_version: contract.version,
    tenant,
    arguments: material,
  });
  return "jcs-v1:sha256:" + createHash("sha256").update(canonical, "utf8").digest("hex");
}

/** A validated call: what an owner needs to carry the effect out (or out again). */
interface Request {
  contract: Contract;
  tenant: string;
  actor: string;
  key: string;
  downstreamKey: string;
  fingerprint: string;
  arguments: Json;
  /** The call's _meta as the agent sent it: what a queued call's envelope carries. Undefined
   * for a request rebuilt from a record. */
  call?: CallMeta;
}

/** Wakes the background reconciliation: a flag, and the sweeps waiting on it. */
class Wake {
  private flag = false;
  private waiters: (() => void)[] = [];

  set(): void {
    this.flag = true;
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  clear(): void {
    this.flag = false;
  }

  /** Resolves once set (true), or after `timeoutMs` with the flag as it is then. */
  wait(timeoutMs?: number): Promise<boolean> {
    if (this.flag) return Promise.resolve(true);
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const woken = () => {
        if (timer !== undefined) clearTimeout(timer);
        resolve(true);
      };
      this.waiters.push(woken);
      if (timeoutMs !== undefined) {
        timer = setTimeout(
          () => {
            this.waiters = this.waiters.filter((waiter) => waiter !== woken);
            resolve(this.flag);
          },
          Math.max(0, timeoutMs),
        );
      }
    });
  }
}

const ident = (tenant: string, key: string): string => JSON.stringify([tenant, key]);

function storeFailed(key: string | undefined, error: unknown): Outcome {
  return outcome("unknown", key, {
    message: `the claim store failed, so the outcome is not known: ${(error as Error).message}`,
  });
}

export class Executor {
  private readonly store: Store;
  private readonly downstream: Downstream;
  /** Wakes this process's own reconciliation (`reconcileForever`): set at start, so that a
   * (re)started worker looks at what earlier incarnations left open, and whenever this process
   * leaves an operation unknown. It is not a timer: a sweep that finds nothing left to try goes
   * back to sleep, and never takes over claims it was not told about. */
  private readonly wake = new Wake();
  /** The operations a call of this process is carrying out right now (as owner), with how many
   * are at it. A lease that runs out while its owner still waits for the downstream looks
   * abandoned to everyone else, and the compare-and-set keeps that safe; this process, though,
   * knows its owner is alive, and its own reconciliation never takes such a claim from it (its
   * answer is on the way). */
  private readonly atWork = new Map<string, number>();

  constructor(readonly config: Config) {
    this.store = new Store(path.join(config.stateDir, "claims.db"));
    this.downstream = new Downstream(config);
    this.wake.set();
  }

  // ------------------------------------------------------------------ helpers

  private ownerToken(): string {
    return `${this.config.worker}-${this.config.incarnation}-${randomBytes(8).toString("hex")}`;
  }

  /** Runs `body` with the operation marked as being carried out by this process. */
  private async working<T>(tenant: string, key: string, body: () => Promise<T>): Promise<T> {
    const id = ident(tenant, key);
    this.atWork.set(id, (this.atWork.get(id) ?? 0) + 1);
    try {
      return await body();
    } finally {
      const left = (this.atWork.get(id) ?? 1) - 1;
      if (left === 0) this.atWork.delete(id);
      else this.atWork.set(id, left);
    }
  }

  private isAtWork(tenant: string, key: string): boolean {
    return this.atWork.has(ident(tenant, key));
  }

  /**
   * Files an operation nothing here can settle with the operators' queue
   * (REPLAYLAB_OPERATORS_URL): people must find out whether the effect exists. An `unknown`
   * that nobody is told about is never settled: this is the executor's last duty to it. One
   * entry per operation: filed at least once (marked only after the queue took it, so a crash
   * in between files it again rather than never), and not again by later tries.
   */
  private async handOver(tenant: string, key: string, finding: string): Promise<void> {
    const record = this.store.load(tenant, key);
    if (record !== undefined && record.handed_over_ms !== null) {
      log.info(`${key} was handed over to people already; still: ${finding}`);
      return;
    }
    log.warning(`handing ${key} over to people: ${finding}`);
    if (await this.fileWithOperators(tenant, key, finding)) this.store.noteHandedOver(tenant, key);
  }

  /** One entry on the operators' queue; true once the queue took it. */
  private async fileWithOperators(tenant: string, key: string, finding: string): Promise<boolean> {
    if (this.config.operators === undefined) {
      log.error(`no REPLAYLAB_OPERATORS_URL: ${key} (${finding}) is only in this log`);
      return false;
    }
    return this.post(this.config.operators, { tenant, operation_key: key, finding }, "the operators' queue");
  }

  /** POSTs a JSON document to one of the harness's queues; true once it was taken (2xx). */
  private async post(where: Address, body: Json, what: string): Promise<boolean> {
    let status: number;
    try {
      status = (await this.downstream.request("POST", where.path, body, {}, where)).status;
    } catch (error) {
      if (!(error instanceof Ambiguous)) throw error;
      log.error(`${what} did not take the document: ${error.message}`);
      return false;
    }
    if (status < 200 || status >= 300) {
      log.error(`${what} refused the document: ${status}`);
      return false;
    }
    return true;
  }

  /** Asked on every delivery: permissions can be revoked between attempts. An authorizer that
   * cannot be asked denies: an effect without permission is worse than a refusal. */
  private async authorized(actor: string, tool: string): Promise<boolean> {
    const query = new URLSearchParams({ actor, tool }).toString();
    const authz = this.config.authz;
    try {
      const response = await this.downstream.request("GET", `${authz.path}?${query}`, undefined, {}, authz);
      return response.status === 200 && isObject(response.body) && response.body.allowed === true;
    } catch (error) {
      if (error instanceof Ambiguous) return false;
      throw error;
    }
  }

  /** A record's state as an outcome, without acting. */
  private describe(record: OperationRow): Outcome {
    const key = record.operation_key;
    switch (record.status) {
      case "applied":
        return outcome("replayed", key, {
          reference: record.effect_reference,
          result: record.result_json ? JSON.parse(record.result_json) : undefined,
        });
      case "rejected":
        return outcome("rejected", key, {
          reason: record.reason ?? undefined,
          message: "the operation was refused for good",
        });
      case "tombstone":
        return outcome("expired", key, {
          reference: record.effect_reference,
          message: "the operation is past its retention; a new action needs a new operation",
        });
      case "unknown":
        return outcome("unknown", key, { message: "the effect may have happened; reconcile before anything else" });
      case "pending": {
        if (record.job_id !== null) {
          return outcome("in_flight", key, {
            retryAfter: JOB_POLL_AFTER_SECONDS,
            message: `the downstream is running job ${record.job_id}; poll`,
          });
        }
        if (record.owner_token === null) {
          return outcome("in_flight", key, {
            retryAfter: QUEUE_POLL_AFTER_SECONDS,
            message: "queued; a consumer will carry it out; poll",
          });
        }
        const remaining = record.lease_until_ms - nowMs();
        if (remaining > 0) {
          return outcome("in_flight", key, {
            retryAfter: Math.max(1, Math.ceil(remaining / 1000)),
            message: "another worker owns the operation; poll",
          });
        }
        // Nobody is at work on it: its owner died or gave up. Never `in_flight` here.
        return outcome("unknown", key, {
          message: "the owner's lease ran out before it recorded an outcome; reconcile",
        });
      }
    }
  }

  private reload(tenant: string, key: string): Outcome {
    const record = this.store.load(tenant, key);
    return record ? this.describe(record) : invalid(key, "no operation with this key");
  }

  /** Applies retention: a settled record past it becomes a tombstone. */
  private retire(record: OperationRow): OperationRow {
    if ((record.status === "applied" || record.status === "rejected") && nowMs() >= record.expires_at_ms) {
      this.store.tombstone(record);
      return this.store.load(record.tenant, record.operation_key) ?? record;
    }
    return record;
  }

  // ------------------------------------------------------------------ a call

  private prepare(tool: string, args: Json, call: CallMeta): Request | Outcome {
    const key = operationKey(call);
    const problem = checkIdentifiers(call);
    if (problem) return invalid(undefined, problem);
    const contract = contractOf(tool, call.tool_version);
    if (contract === undefined) return invalid(key, `unknown tool ${tool} at version ${call.tool_version}`);
    let checked: Json;
    try {
      checked = validatedArguments(contract, args);
    } catch (error) {
      return invalid(key, (error as Error).message);
    }
    return {
      contract,
      tenant: call.tenant,
      actor: call.actor,
      key,
      downstreamKey: downstreamKeyOf(key),
      fingerprint: fingerprint(contract, call.tenant, checked),
      arguments: checked,
      call,
    };
  }

  /** A contract tool's call: the operation's outcome. */
  async call(tool: string, args: Json, call: CallMeta): Promise<Outcome> {
    const prepared = this.prepare(tool, args, call);
    if ("status" in prepared) return prepared as Outcome;
    const request = prepared as Request;
    if (request.contract.execution === "queued" && this.config.queue === undefined) {
      return invalid(request.key, `${tool} is queued, and this process has no outbox (REPLAYLAB_QUEUE_URL)`);
    }
    try {
      // Before the claim: an unauthorized call leaves no record, and a revoked actor is refused
      // even where a replay is ready.
      if (!(await this.authorized(request.actor, tool))) return unauthorized(request.key);
      return await this.claimAndAnswer(request);
    } catch (error) {
      if (error instanceof StoreError) return storeFailed(request.key, error);
      throw error;
    }
  }

  private async claimAndAnswer(request: Request): Promise<Outcome> {
    const contract = request.contract;
    const now = nowMs();
    const owner = this.ownerToken();
    const [ours, record] = this.store.claim({
      tenant: request.tenant,
      operation_key: request.key,
      tool: contract.name,
      tool_version: contract.version,
      fingerprint: request.fingerprint,
      status: "pending",
      owner_token: owner,
      lease_until_ms: now + lease(this.config, contract),
      downstream_key: request.downstreamKey,
      // Kept while the outcome is open, so that recovery can resend it under the same key.
      request_json: JSON.stringify({ actor: request.actor, arguments: request.arguments }),
      created_at_ms: now,
      updated_at_ms: now,
      expires_at_ms: now + retention(this.config, contract),
    });
    if (ours) {
      log.info(`claim won: ${request.key}`);
      return contract.execution === "queued" ? this.enqueue(owner, request) : this.execute(owner, request);
    }
    log.info(`claim found an existing record: ${request.key} (${record.status})`);
    return this.answerExisting(this.retire(record), request);
  }

  private async answerExisting(record: OperationRow, request: Request): Promise<Outcome> {
    if (record.status === "tombstone") return this.lateArrival(record);
    if (record.fingerprint !== request.fingerprint) return this.mismatch(record, request);
    const status = record.status;
    if (status === "applied") {
      await this.finishNotice(record, request.contract);
      return this.describe(record);
    }
    if (status === "rejected") return this.describe(record);
    // A running job (never a second one), or an envelope waiting for its consumer: in_flight,
    // and nothing to do but wait.
    if (status === "pending" && (record.job_id !== null || record.owner_token === null)) return this.describe(record);
    if (status === "pending" && record.lease_until_ms > nowMs()) return this.describe(record); // in_flight
    if (status === "unknown" && !traits(this.config, request.contract).canFindOut) {
      // No receipts and no honoured key: a retry can neither look it up nor resend it safely.
      // It was handed over to people when it was marked; it stays unknown.
      return this.describe(record);
    }
    // Abandoned (its owner's lease ran out) or unknown: take it over, then find out.
    const owner = this.ownerToken();
    if (!this.store.takeOver(record, owner, nowMs() + lease(this.config, request.contract))) {
      return this.reload(request.tenant, request.key);
    }
    log.info(`took over ${request.key} (was ${status}, owner ${record.owner_token})`);
    return this.recover(owner, record, request.contract, request);
  }

  /** The same operation with another request: never carried out, never replaced. A newer tool
   * version may replay an applied record only where the record's contract allows it and the
   * call, read by that contract, is the very request the record was made for. */
  private mismatch(record: OperationRow, request: Request): Outcome {
    const key = record.operation_key;
    const contract = request.contract;
    const otherVersion = record.tool === contract.name && record.tool_version !== contract.version;
    let sameRequest: boolean | undefined;
    const stored = contractOf(record.tool, record.tool_version);
    if (otherVersion && stored !== undefined && stored.replayAcrossVersions) {
      try {
        const asMade = validatedArguments(stored, request.arguments);
        sameRequest = fingerprint(stored, request.tenant, asMade) === record.fingerprint;
      } catch {
        sameRequest = false;
      }
    }
    if (sameRequest === true && record.status === "applied") return this.describe(record);
    if (otherVersion && sameRequest !== false) {
      return outcome("rejected", key, {
        reason: "tool_version_changed",
        nextAction: "inspect_operation",
        message:
          `this operation was made by ${record.tool} version ${record.tool_version}; ` +
          `version ${contract.version} may not re-run it`,
      });
    }
    return outcome("rejected", key, {
      reason: "idempotency_key_reused_with_different_request",
      nextAction: "inspect_operation",
      message: "this operation was started with a different request; the original stands",
    });
  }

  /** A key past retention. Where the contract says reconcile_first, the downstream's receipts
   * are asked before answering (and the finding logged for operators). */
  private async lateArrival(record: OperationRow): Promise<Outcome> {
    const contract = contractOf(record.tool, record.tool_version);
    if (contract !== undefined && contract.lateArrival === "reconcile_first" && traits(this.config, contract).receipts) {
      const found = await lookUpReceipt(this.downstream, contract.service, record.tenant, record.downstream_key);
      log.warning(`late arrival after retention for ${record.operation_key}: receipt lookup ${describeLookup(found)}`);
    }
    return this.describe(record);
  }

  // ------------------------------------------------------------------ the effect (we own the claim)

  private async execute(owner: string, request: Request): Promise<Outcome> {
    const contract = request.contract;
    // Again right before the effect: the permission may have been revoked since the claim.
    if (!(await this.authorized(request.actor, contract.name))) {
      return this.fail(owner, request, "unauthorized", "the actor may not use this tool now");
    }
    const { method, path: where, body, headers } = effectRequest(contract, request.tenant, request.arguments);
    // Sent even to a service that ignores it: its receipts are found by it.
    headers["Idempotency-Key"] = request.downstreamKey;
    return this.working(request.tenant, request.key, async () => {
      log.info(`sending ${method} ${where} for ${request.key}`);
      const answer = await classify(contract, () => this.downstream.request(method, where, body, headers));
      return this.recordAnswer(owner, request, answer);
    });
  }

  private async recordAnswer(owner: string, request: Request, answer: Answer): Promise<Outcome> {
    switch (answer.kind) {
      case "receipt":
        return this.recordReceipt(
          owner,
          request.tenant,
          request.key,
          request.contract,
          answer.reference,
          answer.result,
          answer.replayed,
        );
      case "precondition_failed":
        return this.fail(owner, request, "precondition_failed", answer.why);
      case "refused":
        return this.fail(owner, request, "downstream_rejected", answer.why);
      case "in_progress":
        // Our claim stays pending while the downstream finishes the first request; once our
        // lease runs out, the reconciliation (or a retry) asks again.
        this.wake.set();
        return outcome("in_flight", request.key, {
          retryAfter: Math.max(1, Math.ceil(lease(this.config, request.contract) / 1000)),
          message: answer.why + "; poll",
        });
      case "ambiguous":
        // The effect may exist. Where the service neither keeps receipts nor honours keys,
        // nothing will ever tell (a resend could charge twice): people are told now.
        return this.markUnknown(
          owner,
          request.tenant,
          request.key,
          answer.why,
          !traits(this.config, request.contract).canFindOut,
        );
    }
  }

  /** Completes the record by compare-and-set on our claim. If the claim was taken over
   * meanwhile and left unknown, this receipt is the proof nobody else has: take the claim back
   * (compare-and-set again) and record it. A delayed job's receipt is its id: the record keeps
   * it and waits for the job to finish (polls read it). */
  private recordReceipt(
    owner: string,
    tenant: string,
    key: string,
    contract: Contract,
    reference: string,
    result: Json,
    replayed: boolean,
  ): Outcome {
    let adopted = false;
    for (;;) {
      if (contract.execution === "delayed_job") {
        if (this.store.setJob(tenant, key, owner, reference)) {
          log.info(`the downstream accepted job ${reference} for ${key}`);
          return outcome("in_flight", key, {
            retryAfter: JOB_POLL_AFTER_SECONDS,
            message: `the downstream accepted job ${reference}; poll`,
          });
        }
      } else if (this.store.complete(tenant, key, owner, reference, result)) {
        log.info(`completed ${key}: ${reference}`);
        return outcome(replayed ? "replayed" : "applied", key, { reference, result });
      }
      const record = this.store.load(tenant, key);
      if (record === undefined) return invalid(key, "no operation with this key");
      if (record.status !== "unknown" || adopted) return this.describe(record);
      owner = this.ownerToken();
      if (!this.store.takeOver(record, owner, nowMs() + lease(this.config, contract))) return this.reload(tenant, key);
      log.info(`a late answer carried receipt ${reference}: settling the unknown record ${key}`);
      adopted = true;
    }
  }

  private fail(owner: string, request: Request, reason: string, message: string): Outcome {
    if (this.store.fail(request.tenant, request.key, owner, reason)) {
      return outcome("rejected", request.key, { reason, message });
    }
    return this.reload(request.tenant, request.key);
  }

  /** The effect may or may not exist. Never a success claim: the record is left for a receipt
   * lookup (ours in the background, the agent's reconcile, or a retry), or, with `handOver`
   * (nothing here can ever find out), filed for people before answering. */
  private async markUnknown(
    owner: string,
    tenant: string,
    key: string,
    finding: string,
    handOver = false,
  ): Promise<Outcome> {
    if (this.store.markUnknown(tenant, key, owner, finding)) {
      log.info(`marked unknown: ${key} (${finding})`);
      if (handOver) await this.handOver(tenant, key, finding);
      this.wake.set();
      return outcome("unknown", key, { message: `the effect may have happened (${finding}); reconcile` });
    }
    log.info(`${key}: ${finding}; the claim was taken over meanwhile, its record stands`);
    return this.reload(tenant, key);
  }

  /**
   * A queued tool's call: the envelope goes to the outbox, then the claim is released to the
   * queue (the record stays pending, without an owner, until a consumer claims it). In this
   * order: a crash between the two leaves a claim whose lease runs out, which the consumer or
   * the reconciliation takes over like any abandoned claim; the other order could leave an
   * operation waiting for an envelope that was never written.
   */
  private async enqueue(owner: string, request: Request): Promise<Outcome> {
    if (!(await this.authorized(request.actor, request.contract.name))) {
      return this.fail(owner, request, "unauthorized", "the actor may not use this tool now");
    }
    // The consumer gets the call itself, and derives key and fingerprint from it again rather
    // than trusting the envelope's word.
    const envelope = {
      envelope_id: `env_${randomBytes(8).toString("hex")}`,
      tenant: request.tenant,
      operation_key: request.key,
      tool: request.contract.name,
      payload: { tool: request.contract.name, arguments: request.arguments, call: request.call },
    };
    if (!(await this.post(this.config.queue as Address, envelope, "the outbox"))) {
      // The queue may or may not have it: as ambiguous as a lost downstream answer.
      return this.markUnknown(
        owner,
        request.tenant,
        request.key,
        "the outbox did not confirm the envelope",
        !traits(this.config, request.contract).canFindOut,
      );
    }
    if (!this.store.release(request.tenant, request.key, owner)) return this.reload(request.tenant, request.key);
    log.info(`queued ${request.key} (${envelope.envelope_id})`);
    return outcome("in_flight", request.key, {
      retryAfter: QUEUE_POLL_AFTER_SECONDS,
      message: "queued; a consumer will carry it out; poll",
    });
  }

  // ------------------------------------------------------------------ recovery

  /**
   * We took over a claim whose previous owner may have reached the downstream.
   *
   * 1. Where the service keeps receipts, ask them first: the earlier owner may have committed.
   *    Found: the effect is recorded and replayed. Lookup failed: unknown, worth another try
   *    later (nothing is resent while the answer is unclear).
   * 2. No receipt (or none kept): resend the request under the same key, but only where the
   *    service honours keys, so that a request still on its way cannot make a second effect;
   *    and only with the request at hand (a reconcile by reference never resends).
   * 3. Otherwise unknown. Where the service does not honour keys, "no receipt" proves nothing
   *    (the lost request may still commit) and no retry can ever settle it: it is handed over
   *    to people now.
   */
  private recover(
    owner: string,
    record: OperationRow,
    contract: Contract,
    request: Request | undefined,
  ): Promise<Outcome> {
    const tenant = record.tenant;
    const key = record.operation_key;
    const service = traits(this.config, contract);
    return this.working(tenant, key, async () => {
      let finding: string;
      if (service.receipts) {
        const found = await lookUpReceipt(this.downstream, contract.service, tenant, record.downstream_key);
        log.info(`receipt lookup for ${key}: ${describeLookup(found)}`);
        if (found.kind === "found") {
          return this.recordReceipt(owner, tenant, key, contract, found.reference, receiptResult(contract, found), true);
        }
        if (found.kind === "failed") return this.markUnknown(owner, tenant, key, `receipt lookup failed: ${found.why}`);
        finding = found.kind === "not_found" ? "no receipt for the key" : found.why;
      } else {
        finding = "the service keeps no receipts";
      }
      if (request !== undefined && service.honoursKeys) {
        log.info(`${finding} for ${key}: resending under the same key, which the service honours`);
        return this.execute(owner, request);
      }
      return this.markUnknown(
        owner,
        tenant,
        key,
        `${finding}; the effect cannot be proved or safely repeated here`,
        !service.honoursKeys,
      );
    });
  }

  /** The request a record kept, when it still derives the record's fingerprint. */
  private keptRequest(record: OperationRow, contract: Contract): Request | undefined {
    if (!record.request_json) return undefined;
    const kept = JSON.parse(record.request_json) as { actor: string; arguments: Json };
    if (fingerprint(contract, record.tenant, kept.arguments) !== record.fingerprint) return undefined;
    return {
      contract,
      tenant: record.tenant,
      actor: kept.actor,
      key: record.operation_key,
      downstreamKey: record.downstream_key,
      fingerprint: record.fingerprint,
      arguments: kept.arguments,
    };
  }

  /**
   * This process's own reconciliation, a loop of its own beside the calls. It sleeps until
   * woken (at start, and whenever this process leaves an operation unknown), then sweeps until
   * nothing is left to try. A (re)started worker thus settles what its earlier incarnation, or
   * a crashed peer, left open; between sweeps it leaves other workers' claims to them and to
   * the agent's retries. Tries are counted per process, so that an operation nobody can settle
   * is not looked up forever.
   */
  async reconcileForever(): Promise<never> {
    const tries = new Map<string, number>();
    for (;;) {
      await this.wake.wait();
      // Cleared before the sweep reads the store: an operation marked unknown after this line
      // sets the flag again and gets a sweep of its own.
      this.wake.clear();
      try {
        await this.sweep(tries);
      } catch (error) {
        if (error instanceof StoreError) {
          log.warning(`background reconciliation: the claim store failed: ${error.message}`);
        } else {
          log.error(`background reconciliation failed: ${(error as Error).stack ?? String(error)}`);
        }
      }
    }
  }

  /**
   * Every unknown record, and every pending one whose lease ran out (its owner died, or is too
   * slow), is taken over and recovered as a retry would (`recover`), at most RECONCILE_ATTEMPTS
   * times per process, RECONCILE_AFTER_MS after the record last changed and as long again
   * between tries. An unknown record that every try left unknown (the lookups kept failing) is
   * handed over to people. Where the service offers no way to find out, an unknown record was
   * handed over when it was marked and is left alone; an abandoned claim is taken over only to
   * be marked and handed over in turn.
   */
  private async sweep(tries: Map<string, number>): Promise<void> {
    const notBefore = new Map<string, number>();
    for (;;) {
      const now = nowMs();
      const due: [OperationRow, Contract][] = [];
      let nextWake: number | undefined;
      const records = this.store.unsettled();
      // Forget what is settled: its record can never be unsettled again.
      const open = new Set(records.map((r) => ident(r.tenant, r.operation_key)));
      for (const id of [...tries.keys()]) {
        if (!open.has(id)) tries.delete(id);
      }
      for (const record of records) {
        const contract = contractOf(record.tool, record.tool_version);
        if (contract === undefined) continue;
        if (record.status === "unknown" && !traits(this.config, contract).canFindOut) continue;
        const id = ident(record.tenant, record.operation_key);
        const count = tries.get(id) ?? 0;
        if (count >= RECONCILE_ATTEMPTS) {
          if (count === RECONCILE_ATTEMPTS && record.status === "unknown") {
            tries.set(id, count + 1); // handed over once
            await this.handOver(
              record.tenant,
              record.operation_key,
              `${RECONCILE_ATTEMPTS} reconciliation attempts settled nothing (last: ${record.reason})`,
            );
          }
          continue;
        }
        let readyAt = Math.max(notBefore.get(id) ?? 0, record.updated_at_ms + RECONCILE_AFTER_MS);
        if (record.status === "pending") readyAt = Math.max(readyAt, record.lease_until_ms);
        if (readyAt <= now && this.isAtWork(record.tenant, record.operation_key)) {
          // A call of our own still waits for the downstream: not abandoned, whatever the lease
          // says. Look again once it has answered (or a moment later).
          readyAt = now + RECONCILE_AFTER_MS;
          notBefore.set(id, readyAt);
        }
        if (readyAt <= now) {
          tries.set(id, count + 1);
          notBefore.set(id, now + RECONCILE_AFTER_MS);
          due.push([record, contract]);
        } else {
          nextWake = nextWake === undefined ? readyAt : Math.min(nextWake, readyAt);
        }
      }
      if (due.length === 0) {
        if (nextWake === undefined) return;
        // A new unknown record (the flag) ends the wait early; the loop reads it.
        if (await this.wake.wait(nextWake - now)) this.wake.clear();
        continue;
      }
      for (const [record, contract] of due) {
        const owner = this.ownerToken();
        if (this.store.takeOver(record, owner, nowMs() + lease(this.config, contract))) {
          log.info(
            `reconciling ${record.operation_key} in the background (try ${tries.get(ident(record.tenant, record.operation_key))})`,
          );
          await this.recover(owner, record, contract, this.keptRequest(record, contract));
        }
      }
    }
  }

  // ------------------------------------------------------------------ poll and reconcile

  /** `replaylab.poll` (reconcile false) and `replaylab.reconcile` (true). */
  async lookup(call: CallMeta, reconcile: boolean): Promise<Outcome> {
    const problem = checkIdentifiers(call);
    if (problem) return invalid(undefined, problem);
    const tenant = call.tenant;
    const key = operationKey(call);
    try {
      let record = this.store.load(tenant, key);
      if (record === undefined) return invalid(key, "no operation with this key");
      // A status answer can replay a result: it is no way around authorization either.
      if (!(await this.authorized(call.actor, record.tool))) return unauthorized(key);
      record = this.retire(record);
      const contract = contractOf(record.tool, record.tool_version);
      if (contract === undefined) return this.describe(record);
      if (record.status === "pending" && record.job_id !== null) return await this.checkJob(record, contract);
      if (record.status === "applied") await this.finishNotice(record, contract);
      // Only a claim an owner was at work on can be abandoned: a queued operation is the
      // queue's (in_flight until its consumer has carried it out).
      const abandoned =
        record.status === "unknown" ||
        (record.status === "pending" && record.owner_token !== null && record.lease_until_ms <= nowMs());
      if (!abandoned) return this.describe(record);
      if (reconcile) {
        const owner = this.ownerToken();
        if (!this.store.takeOver(record, owner, nowMs() + lease(this.config, contract))) return this.reload(tenant, key);
        return await this.recover(owner, record, contract, undefined);
      }
      // A poll only reads: a receipt settles the record, nothing is ever resent. An abandoned
      // claim without one is `unknown` (its owner is gone), never `in_flight`.
      if (!traits(this.config, contract).receipts) return this.describe(record);
      const found = await lookUpReceipt(this.downstream, contract.service, tenant, record.downstream_key);
      if (found.kind !== "found") return this.describe(record);
      const owner = this.ownerToken();
      if (!this.store.takeOver(record, owner, nowMs() + lease(this.config, contract))) return this.reload(tenant, key);
      return this.recordReceipt(owner, tenant, key, contract, found.reference, receiptResult(contract, found), true);
    } catch (error) {
      if (error instanceof StoreError) return storeFailed(key, error);
      throw error;
    }
  }

  // ------------------------------------------------------------------ delayed jobs

  /** A poll of a running job reads it: while it runs, `in_flight` (a job is never given up on,
   * and never submitted again); once it succeeded, the operation is settled with its result. */
  private async checkJob(record: OperationRow, contract: Contract): Promise<Outcome> {
    const key = record.operation_key;
    const jobId = record.job_id as string;
    const job = await readJob(this.downstream, record.tenant, jobId);
    if (job.state === "running") return this.describe(record);
    if (job.state === "unreadable") {
      return outcome("in_flight", key, {
        retryAfter: JOB_POLL_AFTER_SECONDS,
        message: `job ${jobId} could not be read (${job.why}); poll`,
      });
    }
    const [settled, result] = await this.settleJob(record, contract, jobId, job.result);
    if (settled === "processed") return outcome("applied", key, { reference: jobId, result });
    return this.reload(record.tenant, key); // someone else settled it first: replayed
  }

  /**
   * Settles the operation's finished job once (the store's compare-and-set decides who does),
   * and then, only for that one, sends the completion notice its contract names, before
   * answering: the caller (a poll, or the provider's webhook delivery) waits for it, so the
   * notice is never work that nobody waits for and a crash can cut short unnoticed (a notice
   * left owed is finished by a later poll: finishNotice).
   */
  private async settleJob(
    record: OperationRow,
    contract: Contract,
    jobId: string,
    jobResult: unknown,
    eventId?: string,
  ): Promise<[Settled, Json]> {
    const tenant = record.tenant;
    const key = record.operation_key;
    const result = { job_id: jobId, status: "succeeded", result: jobResult };
    const notice = contract.completionNoticeTo !== undefined;
    const settled = this.store.settleJob(tenant, key, jobId, result, notice, eventId);
    if (settled === "processed") {
      log.info(`job ${jobId} of ${key} succeeded: settled`);
      if (notice) await this.announce(tenant, key, contract, jobId, record.downstream_key);
    }
    return [settled, result];
  }

  /** Sends a settled job's completion notice, and owes it no more once the downstream confirmed
   * it. A notice it did not confirm is not resent blind (the message service may not dedupe: a
   * resend could send it twice): it is handed over to people. */
  private async announce(tenant: string, key: string, contract: Contract, jobId: string, downstreamKey: string) {
    const { method, path: where, body, headers } = noticeRequest(contract, tenant, jobId, downstreamKey);
    const answer = await classify(NOTICE, () => this.downstream.request(method, where, body, headers));
    if (answer.kind === "receipt") {
      log.info(`completion notice for ${key} sent: ${answer.reference}`);
    } else {
      const finding = `the completion notice for ${jobId} was not confirmed: ${answer.why}`;
      log.warning(`handing the completion notice of ${key} over to people: ${finding}`);
      if (!(await this.fileWithOperators(tenant, key, finding))) return; // still owed: a later poll finishes it
    }
    this.store.noticeDone(tenant, key);
  }

  /**
   * Finishes a notice a settled job still owes because its sender crashed (or could not hand it
   * over), from a poll or a retry, once that sender had time to finish (its downstream timeout
   * and a moment more). It may have gone out: its receipt is looked up first; without one it
   * is resent under its own key only where the message service honours keys, and otherwise
   * handed over to people.
   */
  private async finishNotice(record: OperationRow, contract: Contract): Promise<void> {
    const tenant = record.tenant;
    const key = record.operation_key;
    const notice = this.store.dueNotice(tenant, key);
    if (notice === undefined || contract.completionNoticeTo === undefined) return;
    if (nowMs() < notice.claimed_at_ms + this.config.timeoutMs + RECONCILE_AFTER_MS) return;
    if (!this.store.claimNotice(notice)) return; // another poll took it on
    const messages = serviceTraits(this.config, NOTICE.service);
    if (messages.receipts) {
      const found = await lookUpReceipt(this.downstream, NOTICE.service, tenant, `${record.downstream_key}:notice`);
      if (found.kind === "found") {
        this.store.noticeDone(tenant, key);
        return;
      }
      if (found.kind === "failed") return; // a later poll looks again
    }
    if (messages.honoursKeys) {
      await this.announce(tenant, key, contract, notice.job_id, record.downstream_key);
      return;
    }
    const finding =
      `the completion notice for ${notice.job_id} may not have gone out, and cannot be resent safely (the ` +
      "message service does not honour keys, and no receipt of it was found or can be looked up)";
    if (await this.fileWithOperators(tenant, key, finding)) this.store.noticeDone(tenant, key);
  }

  /**
   * One completion webhook delivery (docs/mcp.md section 4): the `ack` to answer. The event is
   * matched to its operation (by the job's Idempotency-Key, else by the job id), its id kept (a
   * redelivery of it is a `duplicate_event`, nothing done), and the job settled, once,
   * whichever of its events (or polls) comes first: the others are `already_settled`. A webhook
   * is a receipt: an operation left `unknown` by a lost submission answer is settled by it too.
   * Throws StoreError when the store fails (the provider delivers again).
   */
  async webhook(body: string): Promise<Settled | "unmatched" | "invalid"> {
    let event: unknown;
    try {
      event = JSON.parse(body);
    } catch {
      return "invalid";
    }
    if (!isObject(event) || event.type !== "job.succeeded") return "invalid";
    const submittedWith = event.idempotency_key ?? null;
    const { event_id: eventId, tenant, job_id: jobId } = event;
    if (!isIdentifier(eventId) || !isIdentifier(tenant) || !isIdentifier(jobId)) return "invalid";
    if (submittedWith !== null && !isIdentifier(submittedWith)) return "invalid";
    const record =
      submittedWith !== null ? this.store.loadByDownstreamKey(tenant, submittedWith) : this.store.loadByJob(tenant, jobId);
    const contract = record === undefined ? undefined : contractOf(record.tool, record.tool_version);
    // Only a delayed job's operation, and only its own job (when the job is known).
    if (
      record === undefined ||
      contract === undefined ||
      contract.execution !== "delayed_job" ||
      (record.job_id !== null && record.job_id !== jobId)
    ) {
      log.info(`webhook event ${eventId} (job ${jobId}) matches no operation`);
      return "unmatched";
    }
    const [settled] = await this.settleJob(record, contract, jobId, event.result ?? null, eventId);
    log.info(`webhook event ${eventId} for ${record.operation_key}: ${settled}`);
    return settled;
  }

  // ------------------------------------------------------------------ the queue's consumer

  /**
   * One delivery of a queued envelope (`replaylab.consume`): `ack` once the operation is
   * carried out, was before, or never can be; `retry` while another worker owns it. The queue
   * delivers at least once: the claim, not the delivery, decides who acts.
   */
  async consume(args: Json): Promise<"ack" | "retry"> {
    const envelope = isObject(args.envelope) ? args.envelope : undefined;
    const payload = envelope !== undefined && isObject(envelope.payload) ? envelope.payload : undefined;
    let call: CallMeta;
    try {
      if (payload === undefined || !isObject(payload.arguments)) throw new CallError("the envelope carries no call");
      call = readCallMeta({ [CALL_META]: payload.call });
    } catch (error) {
      if (!(error instanceof CallError)) throw error;
      // No delivery of it will ever be readable: acknowledged, without an effect.
      log.warning(`an envelope this executor cannot read (${error.message}): acknowledged`);
      return "ack";
    }
    // The key and fingerprint are derived from the call again, not taken on trust.
    const prepared = this.prepare(String(payload.tool), payload.arguments as Json, call);
    if ("status" in prepared || prepared.key !== envelope?.operation_key || prepared.tenant !== envelope?.tenant) {
      log.warning("an envelope whose call is not its operation's: acknowledged");
      return "ack";
    }
    const request = prepared as Request;
    try {
      let record = this.store.load(request.tenant, request.key);
      if (record === undefined) return "ack";
      record = this.retire(record);
      if (record.fingerprint !== request.fingerprint || record.status !== "pending" || record.job_id !== null) {
        return "ack"; // carried out already (a duplicate delivery), or settled otherwise
      }
      if (record.owner_token !== null && record.lease_until_ms > nowMs()) {
        return "retry"; // another consumer (or the caller, still writing) is at it
      }
      const owner = this.ownerToken();
      if (!this.store.takeOver(record, owner, nowMs() + lease(this.config, request.contract))) return "retry";
      let answer: Outcome;
      if (record.owner_token === null) {
        log.info(`consuming ${request.key}`);
        answer = await this.execute(owner, request);
      } else {
        // A consumer (or the caller) died holding it: it may have sent already.
        log.info(`consuming ${request.key}, whose previous owner's lease ran out`);
        answer = await this.recover(owner, record, request.contract, request);
      }
      return answer.status === "in_flight" ? "retry" : "ack";
    } catch (error) {
      if (!(error instanceof StoreError)) throw error;
      log.warning(`consuming ${request.key}: the claim store failed: ${error.message}`);
      return "retry";
    }
  }

  // ------------------------------------------------------------------ the manifest

  manifest(): Json {
    return {
      version: CONVENTIONS_VERSION,
      capabilities: {
        tools: TOOLS,
        // webhook_path is left out: the default, WEBHOOK_PATH.
        queue_consumer: true,
        delayed_jobs: true,
        webhooks: true,
        reconcile: true,
      },
      // The longest lease and retention of any served tool: what the harness waits for.
      timing: {
        lease_ms: Math.max(...CONTRACTS.map((c) => lease(this.config, c))),
        retention_ms: Math.max(...CONTRACTS.map((c) => retention(this.config, c))),
        downstream_timeout_ms: this.config.timeoutMs,
      },
    };
  }
}
