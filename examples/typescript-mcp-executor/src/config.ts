// The process's world (docs/mcp.md, section 5), read once at start. A bad variable exits 2
// naming it: a service we would misjudge is worse than no start.

import { statSync } from "node:fs";

import { type Contract, SERVICES, type Service, ServiceTraits } from "./contracts.js";

/** Where to send HTTP requests: host, port, and a path (the path only where one matters). */
export interface Address {
  readonly host: string;
  readonly port: number;
  readonly path: string;
}

export interface Config {
  readonly worker: string;
  readonly incarnation: number;
  readonly stateDir: string;
  readonly downstream: Address;
  readonly authz: Address;
  readonly leaseMs: number | undefined;
  readonly retentionMs: number | undefined;
  readonly timeoutMs: number;
  readonly services: ReadonlyMap<Service, ServiceTraits>;
  /** The operators' queue: where an operation nothing can settle is handed over to people.
   * Undefined: only the log says so. */
  readonly operators: Address | undefined;
  /** The outbox of queued tools. Undefined: queued tools are refused. */
  readonly queue: Address | undefined;
  /** Where to receive completion webhooks (path unused). Undefined: no listener; polls alone
   * settle jobs. */
  readonly webhookListen: Address | undefined;
}

/** What `contract`'s service does (the contracts' promise where REPLAYLAB_SERVICES is silent). */
export function traits(config: Config, contract: Contract): ServiceTraits {
  return serviceTraits(config, contract.service);
}

export function serviceTraits(config: Config, service: Service): ServiceTraits {
  return config.services.get(service) ?? new ServiceTraits();
}

/** `HOST:PORT` (`127.0.0.1:8765`, `[::1]:8765`), or undefined. */
export function parseListen(value: string): Address | undefined {
  const text = value.trim();
  const colon = text.lastIndexOf(":");
  let host = colon < 0 ? "" : text.slice(0, colon);
  const port = colon < 0 ? "" : text.slice(colon + 1);
  if (host.startsWith("[") && host.endsWith("]")) host = host.slice(1, -1); // an IPv6 address: [::1]:8765
  if (host === "" || /[\s/[\]@]/.test(host) || !/^[0-9]+$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
    return undefined;
  }
  return { host, port: Number(port), path: "/" };
}

export function lease(config: Config, contract: Contract): number {
  return config.leaseMs ?? contract.leaseMs;
}

export function retention(config: Config, contract: Contract): number {
  return config.retentionMs ?? contract.retentionMs;
}

/** `http://HOST:PORT[/PATH]`, with the port written out; undefined for anything else. */
export function parseHttpUrl(text: string): Address | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  // The URL parser drops a default port (":80"); the text must still name one.
  const port = url.port !== "" ? Number(url.port) : /^http:\/\/[^/?#]*:80(?:[/?#]|$)/i.test(text) ? 80 : undefined;
  if (url.protocol !== "http:" || url.hostname === "" || port === undefined || url.username !== "") {
    return undefined;
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  return { host, port, path: url.pathname || "/" };
}

/** REPLAYLAB_SERVICES: `{"charges": {"honours_keys": false, "receipts": true}, ...}`; throws
 * an Error that says what is wrong. */
export function parseServices(text: string): Map<Service, ServiceTraits> {
  const document: unknown = JSON.parse(text);
  if (typeof document !== "object" || document === null || Array.isArray(document)) {
    throw new Error("expected an object of services");
  }
  const services = new Map<Service, ServiceTraits>();
  for (const [name, value] of Object.entries(document)) {
    if (!(SERVICES as readonly string[]).includes(name)) {
      throw new Error(`no service ${JSON.stringify(name)} (known: ${SERVICES.join(", ")})`);
    }
    const fields = typeof value === "object" && value !== null && !Array.isArray(value) ? value : undefined;
    const keys = fields ? Object.keys(fields).sort() : [];
    if (
      !fields ||
      keys.join(",") !== "honours_keys,receipts" ||
      !Object.values(fields).every((flag) => typeof flag === "boolean")
    ) {
      throw new Error(`${name}: expected {"honours_keys": BOOL, "receipts": BOOL}`);
    }
    const { honours_keys, receipts } = fields as { honours_keys: boolean; receipts: boolean };
    services.set(name as Service, new ServiceTraits(honours_keys, receipts));
  }
  return services;
}

/** Prints `message` and exits 2, as a bad variable of section 5 does. */
export function exitWithUsageError(message: string): never {
  process.stderr.write(`error: ${message} (see docs/mcp.md, section 5)\n`);
  process.exit(2);
}

/** The process's world from `env` (docs/mcp.md section 5); exits 2 naming a bad variable. */
export function configFromEnv(env: NodeJS.ProcessEnv): Config {
  const fail: (message: string) => never = exitWithUsageError;
  const required = (name: string): string => {
    const value = (env[name] ?? "").trim();
    if (value === "") fail(`${name} is not set`);
    return value;
  };
  const millis = (name: string): number | undefined => {
    const value = env[name];
    if (value === undefined || value.trim() === "") return undefined;
    if (!/^[0-9]+$/.test(value) || Number(value) < 1) {
      fail(`${name}=${JSON.stringify(value)}: expected milliseconds, at least 1`);
    }
    return Number(value);
  };

  const worker = required("REPLAYLAB_WORKER");
  const incarnation = required("REPLAYLAB_INCARNATION");
  if (!/^[0-9]+$/.test(incarnation)) {
    fail(`REPLAYLAB_INCARNATION=${JSON.stringify(incarnation)}: expected a whole number from 0`);
  }
  const stateDir = required("REPLAYLAB_STATE_DIR");
  let isDirectory = false;
  try {
    isDirectory = statSync(stateDir).isDirectory();
  } catch {
    isDirectory = false;
  }
  if (!isDirectory) fail(`REPLAYLAB_STATE_DIR=${JSON.stringify(stateDir)}: not a directory`);
  const url = required("REPLAYLAB_DOWNSTREAM_URL");
  const downstream = parseHttpUrl(url);
  if (downstream === undefined) fail(`REPLAYLAB_DOWNSTREAM_URL=${JSON.stringify(url)}: expected http://HOST:PORT`);
  const authzUrl = (env.REPLAYLAB_AUTHZ_URL ?? "").trim() || url.replace(/\/+$/, "") + "/v1/authz";
  const authz = parseHttpUrl(authzUrl);
  if (authz === undefined) fail(`REPLAYLAB_AUTHZ_URL=${JSON.stringify(authzUrl)}: expected http://HOST:PORT/PATH`);
  let services = new Map<Service, ServiceTraits>();
  if ((env.REPLAYLAB_SERVICES ?? "").trim() !== "") {
    try {
      services = parseServices(env.REPLAYLAB_SERVICES as string);
    } catch (error) {
      fail(`REPLAYLAB_SERVICES: ${(error as Error).message}`);
    }
  }
  const endpoint = (name: string): Address | undefined => {
    const url = (env[name] ?? "").trim();
    if (url === "") return undefined;
    const where = parseHttpUrl(url);
    if (where === undefined) fail(`${name}=${JSON.stringify(url)}: expected http://HOST:PORT/PATH`);
    return where;
  };
  let webhookListen: Address | undefined;
  const listen = (env.REPLAYLAB_WEBHOOK_LISTEN ?? "").trim();
  if (listen !== "") {
    webhookListen = parseListen(listen);
    if (webhookListen === undefined) fail(`REPLAYLAB_WEBHOOK_LISTEN=${JSON.stringify(listen)}: expected HOST:PORT`);
  }
  return {
    worker,
    incarnation: Number(incarnation),
    stateDir,
    downstream,
    authz,
    leaseMs: millis("REPLAYLAB_LEASE_MS"),
    retentionMs: millis("REPLAYLAB_RETENTION_MS"),
    // Best shorter than a lease, so that an owner that timed out still holds its claim when it
    // records the ambiguity. Where it is not (replaylab runs with both at 2 s), the
    // compare-and-set on the owner token keeps a late owner from overwriting a new one.
    timeoutMs: millis("REPLAYLAB_DOWNSTREAM_TIMEOUT_MS") ?? 2_000,
    services,
    operators: endpoint("REPLAYLAB_OPERATORS_URL"),
    queue: endpoint("REPLAYLAB_QUEUE_URL"),
    webhookListen,
  };
}

/** Wall-clock milliseconds: leases are compared across processes, which share no monotonic clock. */
export function nowMs(): number {
  return Date.now();
}
