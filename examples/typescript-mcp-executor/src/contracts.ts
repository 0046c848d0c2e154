// The tool contracts this executor serves (protocol/contracts/*.toml), the parts it needs,
// and what each downstream service does.

/** An argument's JSON type, as the contract declares it. */
export type ArgumentKind = "string" | "integer" | "object";

/** What to do with a key that arrives after retention. */
export type LateArrival = "tombstone_expired" | "reconcile_first";

/** direct: the call makes the effect; delayed_job: the call submits a job the downstream
 * finishes later; queued: the call writes an envelope to the outbox, a consumer acts. */
export type Execution = "direct" | "delayed_job" | "queued";

/** One tool contract: a tool at one version. */
export interface Contract {
  readonly name: string;
  readonly version: string;
  readonly arguments: Readonly<Record<string, ArgumentKind>>;
  readonly required: readonly string[];
  /** What the effect depends on: the fingerprint's arguments. */
  readonly material: readonly string[];
  /** The downstream service, for receipt lookups. */
  readonly service: Service;
  /** The answer field naming the effect. */
  readonly referenceField: string;
  /** The safe business result kept and replayed. */
  readonly resultFields: readonly string[];
  readonly leaseMs: number;
  readonly retentionMs: number;
  readonly defaults: Readonly<Record<string, unknown>>;
  /** `reconcile_first`: a key arriving after retention is looked up downstream first. */
  readonly lateArrival: LateArrival;
  /** A newer version of this tool may replay what this version made (same request only). */
  readonly replayAcrossVersions: boolean;
  readonly execution: Execution;
  /** A delayed job's completion notice: one message to this address once the job succeeded. */
  readonly completionNoticeTo?: string;
}

const TICKET: Record<string, ArgumentKind> = { queue: "string", subject: "string", body: "string", trace_id: "string" };
const CHARGE: Record<string, ArgumentKind> = {
  customer: "string",
  amount_minor: "integer",
  currency: "string",
  trace_id: "string",
};
const STATUS: Record<string, ArgumentKind> = {
  ticket_id: "string",
  status: "string",
  expected_version: "integer",
  trace_id: "string",
};

const JOB: Record<string, ArgumentKind> = { job_type: "string", input: "object", trace_id: "string" };
const MESSAGE: Record<string, ArgumentKind> = { to: "string", body: "string", trace_id: "string" };

const TICKET_RESULT = ["ticket_id", "version", "status"];
const CHARGE_RESULT = ["charge_id", "amount_minor", "currency", "status"];

function contract(
  fields: Omit<Contract, "defaults" | "lateArrival" | "replayAcrossVersions" | "execution"> & Partial<Contract>,
): Contract {
  return { defaults: {}, lateArrival: "tombstone_expired", replayAcrossVersions: false, execution: "direct", ...fields };
}

const ALL: Contract[] = [
  contract({
    name: "tickets.create", version: "2026-08-18", arguments: TICKET, required: ["queue", "subject", "body"],
    material: ["queue", "subject", "body"], service: "tickets", referenceField: "ticket_id",
    resultFields: TICKET_RESULT, leaseMs: 5_000, retentionMs: 60_000, defaults: { queue: "support" },
  }),
  // The new version routes tickets without a queue to triage: the same arguments mean another
  // effect, so an operation made under 2026-08-18 is not re-run under it.
  contract({
    name: "tickets.create", version: "2026-09-01", arguments: TICKET, required: ["queue", "subject", "body"],
    material: ["queue", "subject", "body"], service: "tickets", referenceField: "ticket_id",
    resultFields: TICKET_RESULT, leaseMs: 5_000, retentionMs: 60_000, defaults: { queue: "triage" },
  }),
  contract({
    name: "tickets.set_status", version: "2026-08-18", arguments: STATUS,
    required: ["ticket_id", "status", "expected_version"], material: ["ticket_id", "status", "expected_version"],
    service: "tickets", referenceField: "ticket_id", resultFields: TICKET_RESULT, leaseMs: 5_000, retentionMs: 60_000,
  }),
  contract({
    name: "payments.charge", version: "2026-08-18", arguments: CHARGE, required: ["customer", "amount_minor", "currency"],
    material: ["customer", "amount_minor", "currency"], service: "charges", referenceField: "charge_id",
    resultFields: CHARGE_RESULT, leaseMs: 5_000, retentionMs: 60_000, defaults: { currency: "EUR" },
    lateArrival: "reconcile_first", replayAcrossVersions: true,
  }),
  contract({
    name: "payments.charge", version: "2026-10-01", arguments: CHARGE, required: ["customer", "amount_minor", "currency"],
    material: ["customer", "amount_minor", "currency"], service: "charges", referenceField: "charge_id",
    resultFields: CHARGE_RESULT, leaseMs: 5_000, retentionMs: 90_000, defaults: { currency: "EUR" },
    lateArrival: "reconcile_first",
  }),
  // A job's status changes after it is accepted: the result names only its id.
  contract({
    name: "jobs.submit", version: "2026-08-18", arguments: JOB, required: ["job_type", "input"],
    material: ["job_type", "input"], service: "jobs", referenceField: "job_id", resultFields: ["job_id"],
    leaseMs: 5_000, retentionMs: 60_000, defaults: { input: {} }, execution: "delayed_job",
    completionNoticeTo: "ops@example.test",
  }),
  contract({
    name: "messages.send", version: "2026-08-18", arguments: MESSAGE, required: ["to", "body"],
    material: ["to", "body"], service: "messages", referenceField: "message_id", resultFields: ["message_id", "status"],
    leaseMs: 5_000, retentionMs: 60_000, execution: "queued",
  }),
];

const BY_TOOL_AND_VERSION = new Map(ALL.map((c) => [`${c.name}@${c.version}`, c]));

/** The contract of `tool` at `version`, if this executor serves it. */
export function contractOf(tool: string, version: string): Contract | undefined {
  return BY_TOOL_AND_VERSION.get(`${tool}@${version}`);
}

/** Every served contract. */
export const CONTRACTS: readonly Contract[] = ALL;

export const TOOLS: readonly string[] = [...new Set(ALL.map((c) => c.name))].sort();

/** A job's completion notice is a message: its answer is read as messages.send's. */
export const NOTICE: Contract = contractOf("messages.send", "2026-08-18") as Contract;

/** Each tool's latest contract: what tools/list describes. */
export function latestContract(tool: string): Contract {
  const versions = ALL.filter((c) => c.name === tool).sort((a, b) => (a.version < b.version ? -1 : 1));
  return versions[versions.length - 1];
}

/** The downstream's services (fake-downstream/src/config.rs), as REPLAYLAB_SERVICES names them. */
export const SERVICES = ["tickets", "charges", "messages", "jobs"] as const;
export type Service = (typeof SERVICES)[number];

/**
 * What one downstream service does: the two facts every recovery decision rests on.
 *
 * A real tool's author knows this of the API they wrap; replaylab's fake service changes it
 * from scenario to scenario and says so in REPLAYLAB_SERVICES. Without that variable the
 * contracts' promise holds (keys honoured, receipts kept).
 */
export class ServiceTraits {
  constructor(
    /** A repeated Idempotency-Key is answered from the first request instead of acting again:
     * only then is a resend under the same key safe. */
    readonly honoursKeys = true,
    /** `GET /v1/receipts/{key}` says what was made with a key: the only way to find out whether
     * a request whose answer was lost had its effect. */
    readonly receipts = true,
  ) {}

  /** Whether an effect in doubt can ever be settled here: a receipt lookup, or a resend the
   * service dedupes. Without either, only people can (they are handed it). */
  get canFindOut(): boolean {
    return this.honoursKeys || this.receipts;
  }
}
