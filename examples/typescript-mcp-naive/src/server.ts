#!/usr/bin/env node
/**
 * A deliberately naive MCP tool server: the way most tools are written today.
 *
 * Each tool calls the ticket or payment API and returns what it answered. There is no
 * idempotency key, no claim store, no request fingerprint and no receipt lookup, and the
 * server knows nothing of replaylab's conventions: it ignores `_meta`, answers with text only,
 * and `isError: false` is its only claim ("it worked").
 *
 * It is here to fail, so that you can see why (README.md): when the answer to a committed
 * request is lost, the agent's retry creates a second ticket or a second charge.
 *
 * It speaks MCP over stdio, or with `--transport http` over streamable HTTP at
 * `http://$REPLAYLAB_MCP_LISTEN/mcp`.
 *
 * Do not copy this one; copy ../typescript-mcp-executor/.
 */

import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

import { createMcpExpressApp } from "@modelcontextprotocol/sdk/server/express.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { type CallToolResult, isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import type { Request, Response } from "express";
import * as z from "zod";

// The account this server's API credential belongs to: a typical tool server is configured for
// one customer account and never sees who the agent works for.
const TENANT = process.env.TENANT ?? "acme";
const DOWNSTREAM = process.env.REPLAYLAB_DOWNSTREAM_URL ?? "http://127.0.0.1:8080";
const TIMEOUT_MS = Number(process.env.REPLAYLAB_DOWNSTREAM_TIMEOUT_MS ?? "10000");

/** Calls the API; its status and answer. */
async function api(
  method: string,
  path: string,
  body: object,
  headers: Record<string, string> = {},
): Promise<[number, string]> {
  const response = await fetch(new URL(path, DOWNSTREAM), {
    method,
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  return [response.status, await response.text()];
}

/** The API's answer as the tool's result: a success when it said 2xx. */
async function run(call: () => Promise<[number, string]>): Promise<CallToolResult> {
  try {
    const [status, text] = await call();
    return { content: [{ type: "text", text }], isError: !(status >= 200 && status < 300) };
  } catch (error) {
    // A timeout, a dropped connection: "failed".
    return { content: [{ type: "text", text: `the API did not answer: ${String(error)}` }], isError: true };
  }
}

function buildServer(): McpServer {
  const server = new McpServer({ name: "typescript-mcp-naive", version: "0.1.0" });
  server.registerTool(
    "tickets.create",
    {
      description: "Calls the API for tickets.create",
      inputSchema: { queue: z.string().default("support"), subject: z.string(), body: z.string() },
    },
    async ({ queue, subject, body }) => run(() => api("POST", "/v1/tickets", { tenant: TENANT, queue, subject, body })),
  );
  server.registerTool(
    "tickets.set_status",
    {
      description: "Calls the API for tickets.set_status",
      inputSchema: { ticket_id: z.string(), status: z.string(), expected_version: z.number().int() },
    },
    async ({ ticket_id, status, expected_version }) =>
      run(() =>
        api(
          "PATCH",
          `/v1/tickets/${encodeURIComponent(ticket_id)}`,
          { tenant: TENANT, status },
          { "If-Match": `"${expected_version}"` },
        ),
      ),
  );
  server.registerTool(
    "payments.charge",
    {
      description: "Calls the API for payments.charge",
      inputSchema: { customer: z.string(), amount_minor: z.number().int(), currency: z.string().default("EUR") },
    },
    async ({ customer, amount_minor, currency }) =>
      run(() => api("POST", "/v1/charges", { tenant: TENANT, customer, amount_minor, currency })),
  );
  return server;
}

/** Streamable HTTP at http://HOST:PORT/mcp, HOST:PORT from REPLAYLAB_MCP_LISTEN; a session per
 * client, each with a server of its own. */
function serveHttp(listen: string | undefined): void {
  const match = /^(.+):([0-9]+)$/.exec((listen ?? "").trim());
  const port = match ? Number(match[2]) : 0;
  if (!match || port < 1 || port > 65535) {
    const given = listen === undefined ? "is not set" : `is ${JSON.stringify(listen)}`;
    process.stderr.write(`error: --transport http needs REPLAYLAB_MCP_LISTEN=HOST:PORT; it ${given}\n`);
    process.exit(2);
  }
  const host = match[1];
  const app = createMcpExpressApp({ host });
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  app.all("/mcp", async (request: Request, response: Response) => {
    const sessionId = request.header("mcp-session-id");
    let transport = sessionId === undefined ? undefined : sessions.get(sessionId);
    if (transport === undefined) {
      if (sessionId !== undefined || !isInitializeRequest(request.body)) {
        response.status(sessionId === undefined ? 400 : 404).json({
          jsonrpc: "2.0",
          error: { code: -32000, message: "no such session" },
          id: null,
        });
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
      await buildServer().connect(created);
      transport = created;
    }
    await transport.handleRequest(request, response, request.body);
  });
  app.listen(port, host).on("error", (error) => {
    process.stderr.write(`error: cannot listen on ${host}:${port}: ${error.message}\n`);
    process.exit(1);
  });
}

const { values } = parseArgs({ options: { transport: { type: "string", default: "stdio" } } });
process.stderr.write(`naive tool server for tenant ${TENANT} at ${DOWNSTREAM}\n`);
if (values.transport === "http") {
  serveHttp(process.env.REPLAYLAB_MCP_LISTEN);
} else if (values.transport === "stdio") {
  process.stdin.on("end", () => process.exit(0));
  await buildServer().connect(new StdioServerTransport());
} else {
  process.stderr.write(`error: --transport ${values.transport}: stdio or http\n`);
  process.exit(2);
}
