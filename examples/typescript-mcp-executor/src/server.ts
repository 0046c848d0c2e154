#!/usr/bin/env node
/**
 * A careful executor: an MCP server that turns duplicate delivery into one effect.
 *
 * It sits between an AI agent and replaylab's fake ticket and payment service and follows
 * replaylab's MCP conventions (docs/mcp.md) to the letter:
 *
 * - every `tools/call` names its operation in `_meta["dev.replaylab/call"]`; the operation
 *   (tenant, environment, workflow_id, step_id) is the identity, never the model's call_id;
 * - the answer is an `Outcome` in `structuredContent` (`applied`, `replayed`, `in_flight`,
 *   `rejected`, `unknown`, `expired`) with `isError: false`;
 * - the manifest resource `replaylab://executor` says what it supports and its timing;
 * - `replaylab.poll` and `replaylab.reconcile` answer for an operation named in `_meta`;
 * - a delayed job (`jobs.submit`) is submitted once and settled by a poll or by the provider's
 *   completion webhook, which this process receives on its own HTTP port;
 * - a queued tool (`messages.send`) is written to the outbox and carried out once by the
 *   consumer, `replaylab.consume`, however often the queue delivers it.
 *
 * How it stays correct (executor.ts): a claim in a SQLite file shared by the worker processes,
 * a request fingerprint, the authorizer asked on every delivery, the effect sent under the
 * operation's Idempotency-Key, completion by compare-and-set on the owner token, recovery by
 * receipt lookup first, a resend only where the service honours keys, `unknown` for what is
 * not known, and a hand-over to the operators' queue for what nothing can settle. What is
 * carried out later is owned by what carries it out: a job by the downstream (polls read it; a
 * compare-and-set settles it once, and only that settlement sends its completion notice), a
 * queued operation by the queue (its consumer claims it before it acts).
 *
 * Run it as replaylab does: `node dist/server.js` with the environment of docs/mcp.md section
 * 5 serves MCP over stdio; `node dist/server.js --transport http` serves it over streamable
 * HTTP at `http://$REPLAYLAB_MCP_LISTEN/mcp`. Either way one process is one worker: one
 * executor, one claim store connection and one background reconciliation, whatever the number
 * of sessions, and one webhook listener at `http://$REPLAYLAB_WEBHOOK_LISTEN/webhooks`.
 *
 * This file is the MCP layer, on the SDK's high-level `McpServer`: a tool callback gets the
 * request's `_meta` as `extra._meta`.
 */

import { randomUUID } from "node:crypto";
import http from "node:http";
import { parseArgs } from "node:util";

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { type CallToolResult, isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import type { Request as HttpRequest, Response as HttpResponse } from "express";
import * as z from "zod";

import { type Address, configFromEnv, parseListen } from "./config.js";
import { type Contract, latestContract, TOOLS } from "./contracts.js";
import {
  CALL_META,
  CallError,
  type CallMeta,
  CONSUME_TOOL,
  Executor,
  MANIFEST_URI,
  type Outcome,
  POLL_TOOL,
  readCallMeta,
  RECONCILE_TOOL,
  WEBHOOK_PATH,
} from "./executor.js";
import type { Json } from "./downstream.js";
import { log } from "./log.js";
import { StoreError } from "./store.js";

const NAME = "replaylab-typescript-executor";
const VERSION = "0.1.0";

/** One line for the text content: the outcome as a person reads it. */
function summary(answer: Outcome): string {
  let text = answer.status;
  if (answer.reason !== undefined) text += ` (${answer.reason})`;
  if (answer.effect_reference !== undefined) text += `: ${answer.effect_reference}`;
  if (answer.message !== undefined) text += ` (${answer.message})`;
  return text;
}

/**
 * A tool's input schema, permissive on purpose: every argument optional and of any type, and
 * others allowed. The executor validates the arguments itself and answers a bad one with
 * `rejected`/`invalid_request`, which the agent can read; had the SDK checked them, a wrong
 * type would come back as a bare tool error, and an unknown argument would be dropped without
 * a word (and never reach the fingerprint). `meta({type})` still shows each argument's type
 * in tools/list.
 */
function argumentsSchema(contract: Contract) {
  const shape: Record<string, z.ZodType> = {};
  for (const [name, kind] of Object.entries(contract.arguments)) {
    shape[name] = z.unknown().optional().meta({ type: kind });
  }
  return z.looseObject(shape);
}

/** The tool result for an outcome, or for a call whose `_meta` cannot be read. */
async function answer(meta: unknown, act: (call: CallMeta) => Promise<Outcome>): Promise<CallToolResult> {
  let call: CallMeta;
  try {
    call = readCallMeta(meta);
  } catch (error) {
    if (!(error instanceof CallError)) throw error;
    return { content: [{ type: "text", text: error.message }], isError: true };
  }
  // The call goes on and records its outcome even if the agent stops waiting (a cancellation
  // aborts `extra.signal`, which is not passed on).
  const outcome = await act(call);
  return { content: [{ type: "text", text: summary(outcome) }], structuredContent: outcome, isError: false };
}

/** An MCP server whose tools and manifest are served by `executor`. Over HTTP each session gets
 * one of its own, all of them on the same executor. */
function buildServer(executor: Executor): McpServer {
  const server = new McpServer(
    { name: NAME, version: VERSION },
    { instructions: `Name each call's operation in _meta["${CALL_META}"]; read ${MANIFEST_URI}.` },
  );
  for (const tool of TOOLS) {
    server.registerTool(
      tool,
      {
        description: `${tool}: name the operation in _meta["${CALL_META}"]; the outcome comes back as structuredContent`,
        inputSchema: argumentsSchema(latestContract(tool)),
      },
      // `extra._meta` is the request's `params._meta`, as the agent sent it.
      async (args, extra) => answer(extra._meta, (call) => executor.call(tool, args, call)),
    );
  }
  // Without an input schema the callback gets `extra` alone; any arguments are ignored.
  server.registerTool(
    POLL_TOOL,
    { description: `The outcome of the operation named in _meta["${CALL_META}"]` },
    async (extra) => answer(extra._meta, (call) => executor.lookup(call, false)),
  );
  server.registerTool(
    RECONCILE_TOOL,
    {
      description: `Settle the operation named in _meta["${CALL_META}"] against the downstream's receipts, then answer its outcome`,
    },
    async (extra) => answer(extra._meta, (call) => executor.lookup(call, true)),
  );
  // The queue's call, not the agent's: no _meta; the operation is in the envelope.
  server.registerTool(
    CONSUME_TOOL,
    {
      description: 'One delivery of a queued envelope, by the queue (no _meta): answers {"consumed": "ack"} or {"consumed": "retry"}',
      inputSchema: z.looseObject({
        envelope: z.unknown().optional().meta({ type: "object" }),
        attempt: z.unknown().optional().meta({ type: "integer" }),
      }),
    },
    async (args) => {
      const consumed = await executor.consume(args);
      return { content: [{ type: "text", text: consumed }], structuredContent: { consumed }, isError: false };
    },
  );
  server.registerResource(
    "executor",
    MANIFEST_URI,
    {
      mimeType: "application/json",
      description: "What this executor supports and its timing (replaylab's conventions)",
    },
    async () => ({
      contents: [{ uri: MANIFEST_URI, mimeType: "application/json", text: JSON.stringify(executor.manifest()) }],
    }),
  );
  return server;
}

/** The most of a webhook body read: a completion event is a few hundred bytes. */
const MAX_WEBHOOK_BYTES = 65_536;

/**
 * Receives completion webhooks at `http://HOST:PORT/webhooks`, beside MCP: `POST`, answered
 * `200` with `{"ack": ...}` (docs/mcp.md section 4); a claim store that fails answers `500`, so
 * that the provider delivers the event again. Resolves once it listens: a delivery may come as
 * soon as the run starts, so MCP is served only after.
 */
function serveWebhooks(executor: Executor, address: Address): Promise<void> {
  const reply = (response: http.ServerResponse, status: number, document: Json) => {
    response.writeHead(status, { "Content-Type": "application/json", Connection: "close" });
    response.end(JSON.stringify(document));
  };
  const server = http.createServer((request, response) => {
    if (new URL(request.url ?? "/", "http://webhooks").pathname !== WEBHOOK_PATH) {
      reply(response, 404, { error: `webhooks are received at ${WEBHOOK_PATH}` });
      return;
    }
    if (request.method !== "POST") {
      reply(response, 405, { error: "POST a completion event" });
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    request.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_WEBHOOK_BYTES) chunks.push(chunk);
    });
    request.on("end", () => {
      const body = size <= MAX_WEBHOOK_BYTES ? Buffer.concat(chunks).toString("utf8") : "";
      executor.webhook(body).then(
        (ack) => reply(response, 200, { ack }),
        (error: unknown) => {
          if (!(error instanceof StoreError)) log.error(`a webhook delivery failed: ${(error as Error).stack ?? error}`);
          else log.warning(`a webhook delivery: the claim store failed: ${error.message}`);
          reply(response, 500, { error: "not processed; deliver again" });
        },
      );
    });
  });
  return new Promise((resolve) => {
    server.on("error", (error) => {
      process.stderr.write(
        `error: cannot receive webhooks at ${address.host}:${address.port} (REPLAYLAB_WEBHOOK_LISTEN): ${error.message}\n`,
      );
      process.exit(1);
    });
    server.listen(address.port, address.host, () => {
      log.info(`receiving webhooks at http://${address.host}:${address.port}${WEBHOOK_PATH}`);
      resolve();
    });
  });
}

async function serveStdio(executor: Executor): Promise<void> {
  // The agent closing our stdin ends the session, and so the process (as Python's stdio
  // server does); a closed stdout too.
  process.stdin.on("end", () => process.exit(0));
  process.stdout.on("error", () => process.exit(0));
  await buildServer(executor).connect(new StdioServerTransport());
}

/**
 * MCP over streamable HTTP at `http://HOST:PORT/mcp`. Every session (an agent may open
 * several, one after another or at once) gets a transport and an McpServer of its own, all on
 * the same executor: the claims are in the shared store, never in a session. The SDK's Express
 * app checks the Host header for a loopback address (DNS rebinding protection). Express and
 * the HTTP transport are loaded here, not at start: a stdio server starts sooner without them.
 */
async function serveHttp(executor: Executor, host: string, port: number): Promise<void> {
  const { createMcpExpressApp } = await import("@modelcontextprotocol/sdk/server/express.js");
  const { StreamableHTTPServerTransport } = await import("@modelcontextprotocol/sdk/server/streamableHttp.js");
  const app = createMcpExpressApp({ host });
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  const refuse = (response: HttpResponse, status: number, message: string) =>
    response.status(status).json({ jsonrpc: "2.0", error: { code: -32000, message }, id: null });

  app.all("/mcp", async (request: HttpRequest, response: HttpResponse) => {
    try {
      const sessionId = request.header("mcp-session-id");
      let transport = sessionId === undefined ? undefined : sessions.get(sessionId);
      if (transport === undefined) {
        if (sessionId !== undefined) {
          refuse(response, 404, "no such session");
          return;
        }
        if (request.method !== "POST" || !isInitializeRequest(request.body)) {
          refuse(response, 400, "no session: start one with an initialize request");
          return;
        }
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => {
            sessions.set(id, created);
          },
        });
        created.onclose = () => {
          if (created.sessionId !== undefined) sessions.delete(created.sessionId);
        };
        await buildServer(executor).connect(created);
        transport = created;
      }
      await transport.handleRequest(request, response, request.body);
    } catch (error) {
      log.error(`serving an MCP request failed: ${(error as Error).stack ?? String(error)}`);
      if (!response.headersSent) refuse(response, 500, "internal error");
    }
  });

  const listener = app.listen(port, host);
  listener.on("listening", () => log.info(`serving MCP over streamable HTTP at http://${host}:${port}/mcp`));
  listener.on("error", (error) => {
    log.error(`cannot serve MCP at ${host}:${port}: ${error.message}`);
    process.exit(1);
  });
}

/** REPLAYLAB_MCP_LISTEN, `HOST:PORT` (`127.0.0.1:8765`); exits 2 when missing or malformed. */
function listenAddress(value: string | undefined): [string, number] {
  const fail = (message: string): never => {
    process.stderr.write(`error: --transport http: ${message} (see docs/mcp.md, section 5)\n`);
    process.exit(2);
  };
  if (value === undefined || value.trim() === "") {
    fail("REPLAYLAB_MCP_LISTEN is not set; it names the address to serve MCP at, HOST:PORT");
  }
  const address = parseListen(value as string);
  if (address === undefined) {
    return fail(`REPLAYLAB_MCP_LISTEN=${JSON.stringify(value)}: expected HOST:PORT, such as 127.0.0.1:8765`);
  }
  return [address.host, address.port];
}

function main(): void {
  let transport: string;
  try {
    const { values } = parseArgs({ options: { transport: { type: "string", default: "stdio" } }, strict: true });
    transport = values.transport as string;
    if (transport !== "stdio" && transport !== "http") throw new Error(`--transport ${transport}: stdio or http`);
  } catch (error) {
    process.stderr.write(
      `usage: server.js [--transport stdio|http]\n` +
        `  stdio (the default): MCP on stdin/stdout; http: streamable HTTP at http://$REPLAYLAB_MCP_LISTEN/mcp\n` +
        `error: ${(error as Error).message}\n`,
    );
    process.exit(2);
  }
  // Checked before anything starts: a bad address exits 2 like a bad variable of section 5.
  const address = transport === "http" ? listenAddress(process.env.REPLAYLAB_MCP_LISTEN) : undefined;
  const config = configFromEnv(process.env);
  const executor = new Executor(config);
  // A (re)started worker settles what earlier incarnations left open, in the background.
  void executor.reconcileForever();
  const webhooks = config.webhookListen === undefined ? Promise.resolve() : serveWebhooks(executor, config.webhookListen);
  if (address === undefined) {
    webhooks
      .then(() => serveStdio(executor))
      .catch((error: unknown) => {
        log.error(`serving MCP over stdio failed: ${(error as Error).stack ?? String(error)}`);
        process.exit(1);
      });
  } else {
    webhooks
      .then(() => serveHttp(executor, ...address))
      .catch((error: unknown) => {
        log.error(`serving MCP over streamable HTTP failed: ${(error as Error).stack ?? String(error)}`);
        process.exit(1);
      });
  }
}

main();
