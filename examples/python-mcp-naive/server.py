#!/usr/bin/env python3
"""A deliberately naive MCP tool server: the way most tools are written today.

Each tool calls the ticket or payment API and returns what it answered. There is no
idempotency key, no claim store, no request fingerprint and no receipt lookup, and the
server knows nothing of replaylab's conventions: it ignores ``_meta``, answers with text
only, and ``isError: false`` is its only claim ("it worked").

It is here to fail, so that you can see why (README.md): when the answer to a committed
request is lost, the agent's retry creates a second ticket or a second charge.

It speaks MCP over stdio, or with ``--transport http`` over streamable HTTP at
``http://$REPLAYLAB_MCP_LISTEN/mcp``.

Do not copy this one; copy ../python-mcp-executor/.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import urllib.parse

import anyio
import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

# The account this server's API credential belongs to: a typical tool server is configured
# for one customer account and never sees who the agent works for.
TENANT = os.environ.get("TENANT", "acme")
DOWNSTREAM = urllib.parse.urlsplit(os.environ.get("REPLAYLAB_DOWNSTREAM_URL", "http://127.0.0.1:8080"))
TIMEOUT_SECONDS = int(os.environ.get("REPLAYLAB_DOWNSTREAM_TIMEOUT_MS", "10000")) / 1000

TOOLS = {
    "tickets.create": {"queue": "string", "subject": "string", "body": "string"},
    "tickets.set_status": {"ticket_id": "string", "status": "string", "expected_version": "integer"},
    "payments.charge": {"customer": "string", "amount_minor": "integer", "currency": "string"},
}


def api(method: str, path: str, body: dict, headers: dict | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection(DOWNSTREAM.hostname, DOWNSTREAM.port, timeout=TIMEOUT_SECONDS)
    try:
        connection.request(method, path, body=json.dumps(body),
                           headers={"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


def run_tool(name: str, arguments: dict) -> tuple[bool, str]:
    """Calls the API; True and its answer when it said 2xx."""
    if name == "tickets.create":
        status, text = api("POST", "/v1/tickets", {
            "tenant": TENANT, "queue": arguments.get("queue", "support"),
            "subject": arguments.get("subject"), "body": arguments.get("body")})
    elif name == "tickets.set_status":
        ticket = urllib.parse.quote(str(arguments.get("ticket_id")), safe="")
        status, text = api("PATCH", f"/v1/tickets/{ticket}",
                           {"tenant": TENANT, "status": arguments.get("status")},
                           {"If-Match": f'"{arguments.get("expected_version")}"'})
    else:
        status, text = api("POST", "/v1/charges", {
            "tenant": TENANT, "customer": arguments.get("customer"),
            "amount_minor": arguments.get("amount_minor"), "currency": arguments.get("currency", "EUR")})
    return 200 <= status < 300, text


def build_server() -> Server:
    tools = [types.Tool(name=name, description=f"Calls the API for {name}",
                        input_schema={"type": "object",
                                      "properties": {arg: {"type": kind} for arg, kind in args.items()}})
             for name, args in TOOLS.items()]

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in TOOLS:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}")
        try:
            ok, text = await anyio.to_thread.run_sync(run_tool, params.name, dict(params.arguments or {}))
        except (OSError, http.client.HTTPException) as error:  # a timeout, a dropped connection: "failed"
            ok, text = False, f"the API did not answer: {error}"
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=not ok)

    return Server("python-mcp-naive", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio() -> None:
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(listen: str | None) -> None:
    """Streamable HTTP at http://HOST:PORT/mcp, HOST:PORT from REPLAYLAB_MCP_LISTEN."""
    host, _, port = (listen or "").strip().rpartition(":")
    if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        given = "is not set" if listen is None else f"is {listen!r}"
        print(f"error: --transport http needs REPLAYLAB_MCP_LISTEN=HOST:PORT; it {given}", file=sys.stderr)
        raise SystemExit(2)
    app = build_server().streamable_http_app(host=host)  # serves /mcp
    uvicorn.run(app, host=host, port=int(port), access_log=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A deliberately naive MCP tool server")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    transport = parser.parse_args().transport
    print(f"naive tool server for tenant {TENANT} at {DOWNSTREAM.geturl()}", file=sys.stderr)
    if transport == "http":
        serve_http(os.environ.get("REPLAYLAB_MCP_LISTEN"))
    else:
        anyio.run(serve_stdio)
