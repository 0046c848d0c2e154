// The fake service's business API over plain HTTP (fake-downstream/src/routes.rs): one request
// per connection, every unclear answer ambiguous.

import http from "node:http";

import type { Address, Config } from "./config.js";
import type { Contract, Service } from "./contracts.js";

/** A JSON object, as parsed. */
export type Json = Record<string, unknown>;

export function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export interface Response {
  readonly status: number;
  /** Header names in lower case. */
  readonly headers: Readonly<Record<string, string>>;
  /** The parsed JSON body, or null (none, or not JSON). */
  readonly body: unknown;
}

/** No usable answer: the request may or may not have had its effect. */
export class Ambiguous extends Error {}

export class Downstream {
  private readonly address: Address;
  private readonly timeoutMs: number;

  constructor(config: Config) {
    this.address = config.downstream;
    this.timeoutMs = config.timeoutMs;
  }

  /**
   * One request on a fresh connection; rejects with Ambiguous on any transport failure.
   *
   * The timeout bounds each wait on the socket (connecting, and every read): an answer held
   * past it counts as none.
   */
  request(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
    host: Address = this.address,
  ): Promise<Response> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const sent: Record<string, string | number> = { ...headers };
    if (payload !== undefined) {
      sent["Content-Type"] = "application/json";
      sent["Content-Length"] = payload.length;
    }
    return new Promise<Response>((resolve, reject) => {
      let settled = false;
      const fail = (error: Error) => {
        if (settled) return;
        settled = true;
        reject(new Ambiguous(`no answer from the downstream (${error.name}: ${error.message})`));
      };
      // agent: false: a connection of its own, closed after the answer (no pooled socket that
      // the other side may have closed meanwhile).
      const request = http.request(
        { host: host.host, port: host.port, method, path, headers: sent, agent: false, timeout: this.timeoutMs },
        (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("error", fail);
          response.on("aborted", () => fail(new Error("the connection closed before the answer ended")));
          response.on("end", () => {
            if (settled) return;
            if (!response.complete) {
              fail(new Error("the connection closed before the answer ended"));
              return;
            }
            settled = true;
            const raw = Buffer.concat(chunks).toString("utf8");
            let parsed: unknown = null;
            if (raw !== "") {
              try {
                parsed = JSON.parse(raw);
              } catch {
                parsed = null;
              }
            }
            const lower: Record<string, string> = {};
            for (const [name, value] of Object.entries(response.headers)) {
              if (value !== undefined) lower[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : value;
            }
            resolve({ status: response.statusCode ?? 0, headers: lower, body: parsed });
          });
        },
      );
      request.on("timeout", () => {
        const error = new Error(`timed out after ${this.timeoutMs} ms`);
        error.name = "TimeoutError";
        request.destroy(error);
      });
      request.on("error", fail);
      request.end(payload);
    });
  }
}

/** Like Python's `urllib.parse.quote(text, safe="-._~")`: all but unreserved characters escaped. */
export function quote(text: string): string {
  return encodeURIComponent(text).replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

/** The HTTP request a tool call becomes (executor/src/downstream.rs): method, path, body,
 * extra headers. Only the business fields go downstream, never trace ids or keys. */
export function effectRequest(
  contract: Contract,
  tenant: string,
  args: Json,
): { method: string; path: string; body: Json; headers: Record<string, string> } {
  switch (contract.name) {
    case "tickets.create":
      return {
        method: "POST",
        path: "/v1/tickets",
        body: { tenant, queue: args.queue, subject: args.subject, body: args.body },
        headers: {},
      };
    case "tickets.set_status":
      // An absolute update carries the version it was based on: it must not overwrite a change
      // a human made meanwhile (412 if the ticket moved on).
      return {
        method: "PATCH",
        path: "/v1/tickets/" + quote(args.ticket_id as string),
        body: { tenant, status: args.status },
        headers: { "If-Match": `"${String(args.expected_version)}"` },
      };
    case "payments.charge":
      return {
        method: "POST",
        path: "/v1/charges",
        body: { tenant, customer: args.customer, amount_minor: args.amount_minor, currency: args.currency },
        headers: {},
      };
    case "jobs.submit":
      return { method: "POST", path: "/v1/jobs", body: { tenant, job_type: args.job_type, input: args.input }, headers: {} };
    case "messages.send":
      return { method: "POST", path: "/v1/messages", body: { tenant, to: args.to, body: args.body }, headers: {} };
    default:
      throw new Error(`no mapping for ${contract.name}`);
  }
}

/** A finished job's completion notice: one message to the contract's address, under a key of
 * its own (the operation's key plus `:notice`), so that its receipt can be looked up and,
 * where the message service honours keys, a resend cannot send it twice. */
export function noticeRequest(
  contract: Contract,
  tenant: string,
  jobId: string,
  downstreamKey: string,
): { method: string; path: string; body: Json; headers: Record<string, string> } {
  return {
    method: "POST",
    path: "/v1/messages",
    body: { tenant, to: contract.completionNoticeTo, body: `job ${jobId} finished` },
    headers: { "Idempotency-Key": `${downstreamKey}:notice` },
  };
}

/** What `GET /v1/jobs/{id}` says of a job: succeeded (with its result), running, or unreadable
 * (no answer, an error, a body we do not know: ask again later). */
export type Job = { state: "succeeded"; result: unknown } | { state: "running" } | { state: "unreadable"; why: string };

export async function readJob(downstream: Downstream, tenant: string, jobId: string): Promise<Job> {
  let response: Response;
  try {
    response = await downstream.request("GET", `/v1/jobs/${quote(jobId)}?tenant=${quote(tenant)}`);
  } catch (error) {
    if (error instanceof Ambiguous) return { state: "unreadable", why: error.message };
    throw error;
  }
  if (response.status !== 200 || !isObject(response.body)) {
    return { state: "unreadable", why: `the job read answered ${response.status}` };
  }
  const status = response.body.status;
  if (status === "succeeded") return { state: "succeeded", result: response.body.result ?? null };
  if (status === "pending" || status === "running") return { state: "running" };
  return { state: "unreadable", why: `the job's status ${JSON.stringify(status)} is not one this executor knows` };
}

/** The contract's whitelisted result fields (never subjects, bodies or customers). */
export function safeResult(contract: Contract, answer: Json): Json {
  const result: Json = {};
  for (const name of contract.resultFields) {
    if (name in answer) result[name] = answer[name];
  }
  return result;
}

/** What the answer to an effect request means. */
export type Answer =
  | { kind: "receipt"; reference: string; result: Json; replayed: boolean }
  | { kind: "precondition_failed" | "refused" | "in_progress" | "ambiguous"; why: string };

/** Sends an effect request and classifies the answer. Only a 2xx whose body names the effect
 * is a receipt; everything unclear is ambiguous (the effect may exist). */
export async function classify(contract: Contract, send: () => Promise<Response>): Promise<Answer> {
  let response: Response;
  try {
    response = await send();
  } catch (error) {
    if (error instanceof Ambiguous) return { kind: "ambiguous", why: error.message };
    throw error;
  }
  const status = response.status;
  if (status >= 200 && status < 300) {
    const body = isObject(response.body) ? response.body : {};
    const reference = body[contract.referenceField];
    if (typeof reference === "string" && reference !== "") {
      return {
        kind: "receipt",
        reference,
        result: safeResult(contract, body),
        replayed: response.headers["idempotent-replayed"] === "true",
      };
    }
    return { kind: "ambiguous", why: `the downstream answered ${status} without \`${contract.referenceField}\`` };
  }
  if (status === 409) return { kind: "in_progress", why: "the downstream is still processing a request with this key" };
  if (status === 412) return { kind: "precondition_failed", why: "the target changed since the caller read it" };
  if (status >= 400 && status < 500) return { kind: "refused", why: `the downstream refused the request (${status})` };
  return { kind: "ambiguous", why: `the downstream answered ${status}` };
}

/** What a receipt lookup found. */
export type Lookup =
  | { kind: "found"; reference: string; answer: Json }
  | { kind: "not_found" }
  | { kind: "unsupported" | "failed"; why: string };

/** `GET /v1/receipts/{key}?tenant=..&service=..`: the downstream's system of record. Receipts
 * are found by the Idempotency-Key the effect request carried. */
export async function lookUpReceipt(
  downstream: Downstream,
  service: Service,
  tenant: string,
  downstreamKey: string,
): Promise<Lookup> {
  const path = `/v1/receipts/${quote(downstreamKey)}?tenant=${quote(tenant)}&service=${quote(service)}`;
  let response: Response;
  try {
    response = await downstream.request("GET", path);
  } catch (error) {
    if (error instanceof Ambiguous) return { kind: "failed", why: error.message };
    throw error;
  }
  if (response.status === 200 && isObject(response.body)) {
    const reference = response.body.effect_reference;
    if (typeof reference === "string" && reference !== "") {
      const answer = response.body.answer;
      return { kind: "found", reference, answer: isObject(answer) ? answer : {} };
    }
    return { kind: "failed", why: "the receipt names no effect" };
  }
  if (response.status === 404) return { kind: "not_found" };
  // This service keeps no receipts: asking again will not help.
  if (response.status === 501) return { kind: "unsupported", why: "the service has no receipt lookup" };
  return { kind: "failed", why: `the receipt lookup answered ${response.status}` };
}

/** The result the downstream committed, as its receipt tells it. */
export function receiptResult(contract: Contract, found: { reference: string; answer: Json }): Json {
  const result = safeResult(contract, found.answer);
  result[contract.referenceField] = found.reference;
  return result;
}

/** A short description of a lookup, for the log. */
export function describeLookup(found: Lookup): string {
  if (found.kind === "found") return `found ${found.reference}`;
  if (found.kind === "not_found") return "not_found";
  return `${found.kind} ${found.why}`;
}
