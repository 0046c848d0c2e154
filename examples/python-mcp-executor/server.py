#!/usr/bin/env python3
"""A careful executor: an MCP server that turns duplicate delivery into one effect.

It sits between an AI agent and replaylab's fake service (tickets, charges, messages and
delayed jobs) and follows replaylab's MCP conventions (docs/mcp.md) to the letter:

- every ``tools/call`` names its operation in ``_meta["dev.replaylab/call"]``; the operation
  (tenant, environment, workflow_id, step_id) is the identity, never the model's call_id;
- the answer is an ``Outcome`` in ``structuredContent`` (``applied``, ``replayed``,
  ``in_flight``, ``rejected``, ``unknown``, ``expired``) with ``isError: false``;
- the manifest resource ``replaylab://executor`` says what it supports and its timing;
- ``replaylab.poll`` and ``replaylab.reconcile`` answer for an operation named in ``_meta``;
- a delayed job (``jobs.submit``) is submitted once and settled by a poll or by the
  provider's completion webhook, which this process receives on its own HTTP port;
- a queued tool (``messages.send``) is written to the outbox and carried out once by the
  consumer, ``replaylab.consume``, however often the queue delivers it.

How it stays correct (the REPLAY state machine of the Rust reference, executor/src/machine.rs):

1. Claim the operation in a durable SQLite store shared by every worker process: one
   ``INSERT .. ON CONFLICT DO NOTHING`` decided by the primary key, inside ``BEGIN IMMEDIATE``.
   The winner owns the claim (an owner token) for a lease; everyone else reads the record.
2. Fingerprint the request (tool, version, tenant, material arguments, RFC 8785 canonical
   JSON): the same operation with a different request is refused, never carried out.
3. Ask the authorizer on every delivery, a replay included, and again right before the effect.
4. Send the effect with ``Idempotency-Key: <operation key>``: a downstream that honours keys
   replays instead of acting twice, and its receipts can be looked up by that key.
5. Record the answer by compare-and-set on the owner token. No answer (a timeout, a dropped
   connection, a 5xx, a body without the effect's reference) is never success: the record
   becomes ``unknown`` and is settled later by a receipt lookup.
6. A claim whose owner died (its lease ran out) is taken over by compare-and-set, and the
   downstream's receipts are asked first: the dead owner may have committed the effect.
   Without a receipt, the request is resent under the same key only where the service
   honours keys (REPLAYLAB_SERVICES says which do, and which keep receipts).
7. What nothing can settle (no receipts and no honoured key, or lookups that keep failing) is
   answered ``unknown`` and handed over to people: an entry on the operators' queue
   (REPLAYLAB_OPERATORS_URL). An ``unknown`` nobody is told about is never settled.
8. What is carried out later is owned by what carries it out: a job by the downstream (the
   record keeps the job id; polls read the job), a queued operation by the queue (the record
   waits without an owner until a consumer claims it). Neither is ever abandoned, and neither
   is done twice: a finished job is settled by one compare-and-set, whoever hears of it first
   (a poll, or a webhook, whose event ids are kept), and only that settlement sends the job's
   completion notice.

Run it as replaylab does: ``python server.py`` with the environment of docs/mcp.md section 5
serves MCP over stdio; ``python server.py --transport http`` serves it over streamable HTTP at
``http://$REPLAYLAB_MCP_LISTEN/mcp``. Either way one process is one worker: one executor, one
claim store connection and one background reconciliation, whatever the number of sessions,
and one webhook listener at ``http://$REPLAYLAB_WEBHOOK_LISTEN/webhooks``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import http.server
import json
import logging
import math
import os
import secrets
import sqlite3
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
import rfc8785
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

log = logging.getLogger("replaylab-python-executor")

CONVENTIONS_VERSION = 1
CALL_META = "dev.replaylab/call"
MANIFEST_URI = "replaylab://executor"
POLL_TOOL = "replaylab.poll"
RECONCILE_TOOL = "replaylab.reconcile"
CONSUME_TOOL = "replaylab.consume"
# Where completion webhooks are received on REPLAYLAB_WEBHOOK_LISTEN: the conventions' default,
# so the manifest need not name it (capabilities.webhook_path).
WEBHOOK_PATH = "/webhooks"

# The key may also arrive as an argument (docs/mcp.md, "KeyPlacement"). It is transport, not
# business content: it never enters the fingerprint and is never sent downstream.
KEY_ARGUMENTS = ("idempotency_key", "idempotencyKey")

# Argument limits, as the contracts' validation has them (protocol/src/contract.rs).
MAX_ARGUMENT_CHARS = 10_000
MAX_ID_CHARS = 255
# RFC 8785 writes numbers as IEEE doubles: integers beyond 2^53 could share a fingerprint.
MAX_EXACT_INTEGER = 2**53

# Keys sent downstream must be short visible ASCII; longer or other keys are sent hashed.
MAX_DOWNSTREAM_KEY_CHARS = 200

# The executor's own reconciliation: how long after a record last changed it first looks (a
# moment for a slow answer to land, and for the agent's own retry to come first), how far
# apart its tries are, and how many it makes per process for one operation before handing it
# over to people.
RECONCILE_AFTER_MS = 1_000
RECONCILE_ATTEMPTS = 3

# When to poll again: a running job (the fake's take a few seconds), and a queued operation (a
# consumer usually picks an envelope up within a second of it being written).
JOB_POLL_AFTER_SECONDS = 1
QUEUE_POLL_AFTER_SECONDS = 1

# The most of a webhook body read: a completion event is a few hundred bytes.
MAX_WEBHOOK_BYTES = 65_536


# --------------------------------------------------------------------------- the contracts


@dataclass(frozen=True)
class Contract:
    """One tool contract (protocol/contracts/*.toml), the parts this executor needs."""

    name: str
    version: str
    arguments: dict[str, str]  # name -> "string" | "integer" | "object"
    required: tuple[str, ...]
    material: tuple[str, ...]  # what the effect depends on: the fingerprint's arguments
    service: str  # the downstream service, for receipt lookups
    reference_field: str  # the answer field naming the effect
    result_fields: tuple[str, ...]  # the safe business result kept and replayed
    lease_ms: int
    retention_ms: int
    defaults: dict[str, Any] = field(default_factory=dict)
    # reconcile_first: a key arriving after retention is looked up downstream first.
    late_arrival: str = "tombstone_expired"
    # A newer version of this tool may replay what this version made (same request only).
    replay_across_versions: bool = False
    # direct: the call makes the effect; delayed_job: the call submits a job the downstream
    # finishes later; queued: the call writes an envelope to the outbox, a consumer acts.
    execution: str = "direct"
    # A delayed job's completion notice: one message to this address once the job succeeded.
    completion_notice_to: str | None = None


TICKET = {"queue": "string", "subject": "string", "body": "string", "trace_id": "string"}
CHARGE = {"customer": "string", "amount_minor": "integer", "currency": "string", "trace_id": "string"}
STATUS = {"ticket_id": "string", "status": "string", "expected_version": "integer", "trace_id": "string"}
JOB = {"job_type": "string", "input": "object", "trace_id": "string"}
MESSAGE = {"to": "string", "body": "string", "trace_id": "string"}

CONTRACTS: dict[tuple[str, str], Contract] = {
    (c.name, c.version): c
    for c in [
        Contract("tickets.create", "2026-08-18", TICKET, ("queue", "subject", "body"),
                 ("queue", "subject", "body"), "tickets", "ticket_id", ("ticket_id", "version", "status"),
                 5_000, 60_000, defaults={"queue": "support"}),
        # The new version routes tickets without a queue to triage: the same arguments mean
        # another effect, so an operation made under 2026-08-18 is not re-run under it.
        Contract("tickets.create", "2026-09-01", TICKET, ("queue", "subject", "body"),
                 ("queue", "subject", "body"), "tickets", "ticket_id", ("ticket_id", "version", "status"),
                 5_000, 60_000, defaults={"queue": "triage"}),
        Contract("tickets.set_status", "2026-08-18", STATUS, ("ticket_id", "status", "expected_version"),
                 ("ticket_id", "status", "expected_version"), "tickets", "ticket_id",
                 ("ticket_id", "version", "status"), 5_000, 60_000),
        Contract("payments.charge", "2026-08-18", CHARGE, ("customer", "amount_minor", "currency"),
                 ("customer", "amount_minor", "currency"), "charges", "charge_id",
                 ("charge_id", "amount_minor", "currency", "status"), 5_000, 60_000,
                 defaults={"currency": "EUR"}, late_arrival="reconcile_first", replay_across_versions=True),
        Contract("payments.charge", "2026-10-01", CHARGE, ("customer", "amount_minor", "currency"),
                 ("customer", "amount_minor", "currency"), "charges", "charge_id",
                 ("charge_id", "amount_minor", "currency", "status"), 5_000, 90_000,
                 defaults={"currency": "EUR"}, late_arrival="reconcile_first"),
        # A job's status changes after it is accepted: the result names only its id.
        Contract("jobs.submit", "2026-08-18", JOB, ("job_type", "input"), ("job_type", "input"), "jobs",
                 "job_id", ("job_id",), 5_000, 60_000, defaults={"input": {}}, execution="delayed_job",
                 completion_notice_to="ops@example.test"),
        Contract("messages.send", "2026-08-18", MESSAGE, ("to", "body"), ("to", "body"), "messages",
                 "message_id", ("message_id", "status"), 5_000, 60_000, execution="queued"),
    ]
}
TOOLS = sorted({name for name, _ in CONTRACTS})
# A job's completion notice is a message: its answer is read as messages.send's.
NOTICE = CONTRACTS[("messages.send", "2026-08-18")]

# The downstream's services (fake-downstream/src/config.rs), as REPLAYLAB_SERVICES names them.
SERVICES = ("tickets", "charges", "messages", "jobs")


@dataclass(frozen=True)
class ServiceTraits:
    """What one downstream service does: the two facts every recovery decision rests on.

    A real tool's author knows this of the API they wrap; replaylab's fake service changes it
    from scenario to scenario and says so in REPLAYLAB_SERVICES. Without that variable the
    contracts' promise holds (``honours_key = true``, ``receipt_lookup = true``)."""

    # A repeated Idempotency-Key is answered from the first request instead of acting again:
    # only then is a resend under the same key safe.
    honours_keys: bool = True
    # ``GET /v1/receipts/{key}`` says what was made with a key: the only way to find out
    # whether a request whose answer was lost had its effect.
    receipts: bool = True

    @property
    def can_find_out(self) -> bool:
        """Whether an effect in doubt can ever be settled here: a receipt lookup, or a resend
        the service dedupes. Without either, only people can (they are handed it)."""
        return self.honours_keys or self.receipts


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class Config:
    worker: str
    incarnation: int
    state_dir: str
    downstream: tuple[str, int]
    authz_url: str
    lease_ms: int | None
    retention_ms: int | None
    timeout_ms: int
    services: dict[str, ServiceTraits]
    # The operators' queue (host, port, path): where an operation nothing can settle is
    # handed over to people. None: only the log says so.
    operators: tuple[str, int, str] | None
    # The outbox of queued tools (host, port, path). None: queued tools are refused.
    queue: tuple[str, int, str] | None
    # Where to receive completion webhooks (host, port). None: no listener; polls alone
    # settle jobs.
    webhook_listen: tuple[str, int] | None

    def traits(self, contract: Contract) -> ServiceTraits:
        return self.service(contract.service)

    def service(self, name: str) -> ServiceTraits:
        return self.services.get(name, ServiceTraits())

    def lease(self, contract: Contract) -> int:
        return self.lease_ms or contract.lease_ms

    def retention(self, contract: Contract) -> int:
        return self.retention_ms or contract.retention_ms


def parse_http_url(url: str) -> tuple[str, int] | None:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http" or not parsed.hostname or parsed.port is None:
        return None
    return parsed.hostname, parsed.port


def parse_listen(value: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``127.0.0.1:8765``, ``[::1]:8765``), or None."""
    host, _, port = value.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 address: [::1]:8765
    if (not host or any(c.isspace() or c in "/[]@" for c in host)
            or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536):
        return None
    return host, int(port)


def parse_services(text: str) -> dict[str, ServiceTraits]:
    """REPLAYLAB_SERVICES: ``{"charges": {"honours_keys": false, "receipts": true}, ...}``.
    ValueError says what is wrong: a service we would misjudge is worse than no start."""
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError("expected an object of services")
    services = {}
    for name, traits in document.items():
        if name not in SERVICES:
            raise ValueError(f"no service {name!r} (known: {', '.join(SERVICES)})")
        if (not isinstance(traits, dict) or set(traits) != {"honours_keys", "receipts"}
                or not all(isinstance(value, bool) for value in traits.values())):
            raise ValueError(f"{name}: expected {{\"honours_keys\": BOOL, \"receipts\": BOOL}}")
        services[name] = ServiceTraits(traits["honours_keys"], traits["receipts"])
    return services


def config_from_env(env: dict[str, str]) -> Config:
    """The process's world (docs/mcp.md section 5); SystemExit(2) names a bad variable."""

    def fail(message: str) -> None:
        print(f"error: {message} (see docs/mcp.md, section 5)", file=sys.stderr)
        raise SystemExit(2)

    def required(name: str) -> str:
        value = env.get(name, "").strip()
        if not value:
            fail(f"{name} is not set")
        return value

    def millis(name: str) -> int | None:
        value = env.get(name)
        if value is None or value.strip() == "":
            return None
        if not value.isdigit() or int(value) < 1:
            fail(f"{name}={value!r}: expected milliseconds, at least 1")
        return int(value)

    worker = required("REPLAYLAB_WORKER")
    incarnation = required("REPLAYLAB_INCARNATION")
    if not incarnation.isdigit():
        fail(f"REPLAYLAB_INCARNATION={incarnation!r}: expected a whole number from 0")
    state_dir = required("REPLAYLAB_STATE_DIR")
    if not os.path.isdir(state_dir):
        fail(f"REPLAYLAB_STATE_DIR={state_dir!r}: not a directory")
    url = required("REPLAYLAB_DOWNSTREAM_URL")
    downstream = parse_http_url(url)
    if downstream is None:
        fail(f"REPLAYLAB_DOWNSTREAM_URL={url!r}: expected http://HOST:PORT")
    authz_url = env.get("REPLAYLAB_AUTHZ_URL", "").strip() or url.rstrip("/") + "/v1/authz"
    if parse_http_url(authz_url) is None:
        fail(f"REPLAYLAB_AUTHZ_URL={authz_url!r}: expected http://HOST:PORT/PATH")
    services: dict[str, ServiceTraits] = {}
    if env.get("REPLAYLAB_SERVICES", "").strip():
        try:
            services = parse_services(env["REPLAYLAB_SERVICES"])
        except ValueError as error:  # json.JSONDecodeError is a ValueError
            fail(f"REPLAYLAB_SERVICES: {error}")

    def endpoint(name: str) -> tuple[str, int, str] | None:
        url = env.get(name, "").strip()
        if not url:
            return None
        where = parse_http_url(url)
        if where is None:
            fail(f"{name}={url!r}: expected http://HOST:PORT/PATH")
        return (*where, urllib.parse.urlsplit(url).path or "/")  # type: ignore[misc]

    webhook_listen = None
    if env.get("REPLAYLAB_WEBHOOK_LISTEN", "").strip():
        webhook_listen = parse_listen(env["REPLAYLAB_WEBHOOK_LISTEN"])
        if webhook_listen is None:
            fail(f"REPLAYLAB_WEBHOOK_LISTEN={env['REPLAYLAB_WEBHOOK_LISTEN']!r}: expected HOST:PORT")
    return Config(
        worker=worker,
        incarnation=int(incarnation),
        state_dir=state_dir,
        downstream=downstream,  # type: ignore[arg-type]
        authz_url=authz_url,
        lease_ms=millis("REPLAYLAB_LEASE_MS"),
        retention_ms=millis("REPLAYLAB_RETENTION_MS"),
        # Best shorter than a lease, so that an owner that timed out still holds its claim when
        # it records the ambiguity. Where it is not (replaylab runs with both at 2 s), the
        # compare-and-set on the owner token keeps a late owner from overwriting a new one.
        timeout_ms=millis("REPLAYLAB_DOWNSTREAM_TIMEOUT_MS") or 2_000,
        services=services,
        operators=endpoint("REPLAYLAB_OPERATORS_URL"),
        queue=endpoint("REPLAYLAB_QUEUE_URL"),
        webhook_listen=webhook_listen,
    )


def now_ms() -> int:
    # Wall-clock time: leases are compared across processes, which share no monotonic clock.
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- outcomes

DEFAULTS = {  # status -> (safe_to_repeat, next_action), as protocol::Outcome::new has them
    "applied": (True, "none"),
    "replayed": (True, "none"),
    "in_flight": (True, "poll"),
    "rejected": (False, "none"),
    "unknown": (False, "reconcile"),
    "expired": (False, "inspect_operation"),
}


def outcome(status: str, key: str | None, *, reason: str | None = None, message: str | None = None,
            reference: str | None = None, result: Any = None, retry_after: int | None = None,
            next_action: str | None = None) -> dict[str, Any]:
    """An ``Outcome`` (protocol/schema/mcp.schema.json): absent fields are left out."""
    safe, default_next = DEFAULTS[status]
    answer: dict[str, Any] = {"status": status, "safe_to_repeat": safe, "next_action": next_action or default_next}
    for name, value in [("reason", reason), ("message", message), ("operation_key", key),
                        ("effect_reference", reference), ("result", result),
                        ("retry_after_seconds", retry_after)]:
        if value is not None:
            answer[name] = value
    return answer


def invalid(key: str | None, message: str) -> dict[str, Any]:
    return outcome("rejected", key, reason="invalid_request", message=message)


def unauthorized(key: str) -> dict[str, Any]:
    return outcome("rejected", key, reason="unauthorized", message="the actor may not use this tool now")


# --------------------------------------------------------------------------- the downstream


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: Any  # parsed JSON, or None


class Ambiguous(Exception):
    """No usable answer: the request may or may not have had its effect."""


class Downstream:
    """The fake service's business API over plain HTTP (fake-downstream/src/routes.rs)."""

    def __init__(self, config: Config):
        self.host, self.port = config.downstream
        self.timeout = config.timeout_ms / 1000

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                host: tuple[str, int] | None = None) -> Response:
        """One request on a fresh connection; raises Ambiguous on any transport failure.

        The timeout bounds each wait on the socket: an answer held past it counts as none.
        """
        connection = http.client.HTTPConnection(*(host or (self.host, self.port)), timeout=self.timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            sent = dict(headers or {})
            if payload is not None:
                sent["Content-Type"] = "application/json"
            connection.request(method, path, body=payload, headers=sent)
            answer = connection.getresponse()
            raw = answer.read()
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = None
            return Response(answer.status, {k.lower(): v for k, v in answer.getheaders()}, parsed)
        except (OSError, http.client.HTTPException) as error:  # timeouts are OSErrors
            raise Ambiguous(f"no answer from the downstream ({type(error).__name__}: {error})") from error
        finally:
            connection.close()


def quote(text: str) -> str:
    return urllib.parse.quote(text, safe="-._~")


def effect_request(contract: Contract, tenant: str, arguments: dict[str, Any]) -> tuple[str, str, dict, dict]:
    """The HTTP request a tool call becomes (executor/src/downstream.rs): method, path, body,
    extra headers. Only the business fields go downstream, never trace ids or keys."""
    if contract.name == "tickets.create":
        body = {"tenant": tenant, **{k: arguments[k] for k in ("queue", "subject", "body")}}
        return "POST", "/v1/tickets", body, {}
    if contract.name == "tickets.set_status":
        # An absolute update carries the version it was based on: it must not overwrite a
        # change a human made meanwhile (412 if the ticket moved on).
        path = "/v1/tickets/" + quote(arguments["ticket_id"])
        return "PATCH", path, {"tenant": tenant, "status": arguments["status"]}, {
            "If-Match": f'"{arguments["expected_version"]}"'}
    if contract.name == "payments.charge":
        body = {"tenant": tenant, **{k: arguments[k] for k in ("customer", "amount_minor", "currency")}}
        return "POST", "/v1/charges", body, {}
    if contract.name == "jobs.submit":
        body = {"tenant": tenant, "job_type": arguments["job_type"], "input": arguments["input"]}
        return "POST", "/v1/jobs", body, {}
    if contract.name == "messages.send":
        return "POST", "/v1/messages", {"tenant": tenant, "to": arguments["to"], "body": arguments["body"]}, {}
    raise ValueError(f"no mapping for {contract.name}")


def notice_request(contract: Contract, tenant: str, job_id: str, downstream_key: str) -> tuple[str, str, dict, dict]:
    """A finished job's completion notice: one message to the contract's address, under a key
    of its own (the operation's key plus ``:notice``), so that its receipt can be looked up
    and, where the message service honours keys, a resend cannot send it twice."""
    body = {"tenant": tenant, "to": contract.completion_notice_to, "body": f"job {job_id} finished"}
    return "POST", "/v1/messages", body, {"Idempotency-Key": f"{downstream_key}:notice"}


def safe_result(contract: Contract, answer: dict[str, Any]) -> dict[str, Any]:
    """The contract's whitelisted result fields (never subjects, bodies or customers)."""
    return {name: answer[name] for name in contract.result_fields if name in answer}


@dataclass
class Answer:
    """What the answer to an effect request means."""

    kind: str  # receipt | precondition_failed | refused | in_progress | ambiguous
    reference: str | None = None
    result: dict[str, Any] | None = None
    replayed: bool = False
    why: str = ""


def classify(contract: Contract, send) -> Answer:
    """Sends an effect request and classifies the answer. Only a 2xx whose body names the
    effect is a receipt; everything unclear is ambiguous (the effect may exist)."""
    try:
        response: Response = send()
    except Ambiguous as error:
        return Answer("ambiguous", why=str(error))
    status = response.status
    if 200 <= status < 300:
        body = response.body if isinstance(response.body, dict) else {}
        reference = body.get(contract.reference_field)
        if isinstance(reference, str) and reference:
            return Answer("receipt", reference=reference, result=safe_result(contract, body),
                          replayed=response.headers.get("idempotent-replayed") == "true")
        return Answer("ambiguous", why=f"the downstream answered {status} without `{contract.reference_field}`")
    if status == 409:
        return Answer("in_progress", why="the downstream is still processing a request with this key")
    if status == 412:
        return Answer("precondition_failed", why="the target changed since the caller read it")
    if 400 <= status < 500:
        return Answer("refused", why=f"the downstream refused the request ({status})")
    return Answer("ambiguous", why=f"the downstream answered {status}")


@dataclass
class Lookup:
    """What a receipt lookup found: found | not_found | unsupported | failed."""

    kind: str
    reference: str | None = None
    answer: dict[str, Any] | None = None
    why: str = ""


def look_up_receipt(downstream: Downstream, service: str, tenant: str, downstream_key: str) -> Lookup:
    """``GET /v1/receipts/{key}?tenant=..&service=..``: the downstream's system of record.
    Receipts are found by the Idempotency-Key the effect request carried."""
    path = f"/v1/receipts/{quote(downstream_key)}?tenant={quote(tenant)}&service={quote(service)}"
    try:
        response = downstream.request("GET", path)
    except Ambiguous as error:
        return Lookup("failed", why=str(error))
    if response.status == 200 and isinstance(response.body, dict):
        reference = response.body.get("effect_reference")
        if isinstance(reference, str) and reference:
            answer = response.body.get("answer")
            return Lookup("found", reference=reference, answer=answer if isinstance(answer, dict) else {})
        return Lookup("failed", why="the receipt names no effect")
    if response.status == 404:
        return Lookup("not_found")
    if response.status == 501:
        # This service keeps no receipts: asking again will not help.
        return Lookup("unsupported", why="the service has no receipt lookup")
    return Lookup("failed", why=f"the receipt lookup answered {response.status}")


def receipt_result(contract: Contract, lookup: Lookup) -> dict[str, Any]:
    """The result the downstream committed, as its receipt tells it."""
    result = safe_result(contract, lookup.answer or {})
    result[contract.reference_field] = lookup.reference
    return result


@dataclass
class Job:
    """What ``GET /v1/jobs/{id}`` says of a job: succeeded (with its result), running, or
    unreadable (no answer, an error, a body we do not know: ask again later)."""

    state: str
    result: Any = None
    why: str = ""


def read_job(downstream: Downstream, tenant: str, job_id: str) -> Job:
    try:
        response = downstream.request("GET", f"/v1/jobs/{quote(job_id)}?tenant={quote(tenant)}")
    except Ambiguous as error:
        return Job("unreadable", why=str(error))
    if response.status != 200 or not isinstance(response.body, dict):
        return Job("unreadable", why=f"the job read answered {response.status}")
    status = response.body.get("status")
    if status == "succeeded":
        return Job("succeeded", result=response.body.get("result"))
    if status in ("pending", "running"):
        return Job("running")
    return Job("unreadable", why=f"the job's status {status!r} is not one this executor knows")


# --------------------------------------------------------------------------- the claim store

# A `pending` record is one of three things: claimed by an owner at work (owner_token and a
# lease), a job the downstream is running (job_id, no owner), or an envelope waiting in the
# queue for its consumer (neither). Only the first can be abandoned: its owner can die.
SCHEMA = """
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
    claimed_at_ms INTEGER NOT NULL,  -- when its sender took it on (a later one waits for it)
    PRIMARY KEY (tenant, operation_key)
) WITHOUT ROWID;
"""


class Store:
    """The durable claim store: one SQLite file in the state directory, shared by every worker
    process of the run. Each thread has its own connection (sqlite3 connections are not
    shared between threads); SQLite's file locks arbitrate between processes."""

    def __init__(self, path: str):
        self.path = path
        self.local = threading.local()
        with self.transaction() as db:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)

    def connection(self) -> sqlite3.Connection:
        db = getattr(self.local, "db", None)
        if db is None:
            # isolation_level=None: no implicit transactions; we say BEGIN IMMEDIATE ourselves.
            db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
            db.row_factory = sqlite3.Row
            # WAL: readers never block the writer, and a committed transaction survives the
            # process being killed (synchronous=NORMAL is durable against a crash of the
            # process, not against a power cut). busy_timeout: wait for another process's
            # write lock rather than fail.
            db.execute("PRAGMA busy_timeout = 5000")
            # SQLite answers "database is locked" at once, without waiting, where waiting could
            # deadlock: two processes opening a new file together while one switches it to WAL.
            # Try the switch again for as long as the busy timeout.
            deadline = time.monotonic() + 5.0
            while True:
                try:
                    if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                        db.execute("PRAGMA journal_mode = WAL")
                    break
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            db.execute("PRAGMA synchronous = NORMAL")
            self.local.db = db
        return db

    @contextlib.contextmanager
    def transaction(self):
        """``BEGIN IMMEDIATE`` takes the write lock at once: two processes can never both read
        "absent" and then both insert."""
        db = self.connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def claim(self, row: dict[str, Any]) -> tuple[bool, sqlite3.Row]:
        """Claims the operation or loads the record that exists, atomically. True: ours."""
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self.transaction() as db:
            inserted = db.execute(
                f"INSERT INTO operations ({columns}) VALUES ({marks}) "
                "ON CONFLICT (tenant, operation_key) DO NOTHING",
                list(row.values()),
            ).rowcount
            record = db.execute(
                "SELECT * FROM operations WHERE tenant = ? AND operation_key = ?",
                (row["tenant"], row["operation_key"]),
            ).fetchone()
        return inserted == 1, record

    def load(self, tenant: str, key: str) -> sqlite3.Row | None:
        return self.connection().execute(
            "SELECT * FROM operations WHERE tenant = ? AND operation_key = ?", (tenant, key)
        ).fetchone()

    def owned_update(self, tenant: str, key: str, owner: str, assignments: str, values: list[Any]) -> bool:
        """A write on behalf of an owner: compare-and-set on the owner token, so that an owner
        whose claim was taken over cannot overwrite the new owner's record."""
        changed = self.connection().execute(
            f"UPDATE operations SET {assignments + ', ' if assignments else ''}owner_token = NULL, "
            "lease_until_ms = 0, updated_at_ms = ? WHERE tenant = ? AND operation_key = ? "
            "AND owner_token = ? AND status = 'pending'",
            [*values, now_ms(), tenant, key, owner],
        ).rowcount
        return changed == 1

    def complete(self, tenant: str, key: str, owner: str, reference: str, result: Any) -> bool:
        # The request is no longer needed once the outcome is known: the business fields are
        # not kept longer than they must be.
        return self.owned_update(tenant, key, owner,
                                 "status = 'applied', effect_reference = ?, result_json = ?, "
                                 "reason = NULL, request_json = NULL",
                                 [reference, json.dumps(result)])

    def fail(self, tenant: str, key: str, owner: str, reason: str) -> bool:
        return self.owned_update(tenant, key, owner,
                                 "status = 'rejected', reason = ?, request_json = NULL", [reason])

    def mark_unknown(self, tenant: str, key: str, owner: str, finding: str) -> bool:
        return self.owned_update(tenant, key, owner, "status = 'unknown', reason = ?", [finding])

    def set_job(self, tenant: str, key: str, owner: str, job_id: str) -> bool:
        """The downstream accepted the job: the record stays pending, owned by the job (no
        owner, no lease) until a poll or a webhook hears that it finished."""
        return self.owned_update(tenant, key, owner, "job_id = ?", [job_id])

    def release(self, tenant: str, key: str, owner: str) -> bool:
        """The envelope is in the queue: the record stays pending, without an owner, until a
        consumer claims it."""
        return self.owned_update(tenant, key, owner, "", [])

    def settle_job(self, tenant: str, key: str, job_id: str, result: Any, notice_due: bool,
                   event_id: str | None = None) -> str:
        """Settles a finished job, once per operation, whoever heard of it (a poll, a webhook):
        pending or unknown, with this job or none recorded yet, -> applied. Only the caller
        that made that transition gets "processed" and owes the completion notice, written
        in the same transaction (a crash before the notice went out leaves it owed, not
        forgotten). With a webhook's ``event_id``: the event is kept in the same transaction,
        and an event seen before is "duplicate_event", nothing else done."""
        now = now_ms()
        with self.transaction() as db:
            if event_id is not None and not db.execute(
                    "INSERT INTO webhook_events (event_id, tenant, operation_key, received_at_ms) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING",
                    (event_id, tenant, key, now)).rowcount:
                return "duplicate_event"
            if not db.execute(
                    "UPDATE operations SET status = 'applied', job_id = ?, effect_reference = ?, "
                    "result_json = ?, owner_token = NULL, lease_until_ms = 0, reason = NULL, "
                    "request_json = NULL, updated_at_ms = ? WHERE tenant = ? AND operation_key = ? "
                    "AND status IN ('pending', 'unknown') AND (job_id IS NULL OR job_id = ?)",
                    (job_id, job_id, json.dumps(result), now, tenant, key, job_id)).rowcount:
                return "already_settled"
            if notice_due:
                db.execute("INSERT INTO notices (tenant, operation_key, job_id, claimed_at_ms) "
                           "VALUES (?, ?, ?, ?) ON CONFLICT (tenant, operation_key) DO UPDATE "
                           "SET job_id = excluded.job_id, claimed_at_ms = excluded.claimed_at_ms",
                           (tenant, key, job_id, now))
            return "processed"

    def load_by_downstream_key(self, tenant: str, downstream_key: str) -> sqlite3.Row | None:
        return self.connection().execute(
            "SELECT * FROM operations WHERE tenant = ? AND downstream_key = ?", (tenant, downstream_key)
        ).fetchone()

    def load_by_job(self, tenant: str, job_id: str) -> sqlite3.Row | None:
        return self.connection().execute(
            "SELECT * FROM operations WHERE tenant = ? AND job_id = ?", (tenant, job_id)
        ).fetchone()

    def due_notice(self, tenant: str, key: str) -> sqlite3.Row | None:
        """The completion notice the operation's settled job still owes, if any."""
        return self.connection().execute(
            "SELECT * FROM notices WHERE tenant = ? AND operation_key = ?", (tenant, key)
        ).fetchone()

    def claim_notice(self, notice: sqlite3.Row) -> bool:
        """Takes an owed notice on, by compare-and-set on when it was last taken on (exactly
        as read): of several pollers that read the same row, one sends it."""
        return self.connection().execute(
            "UPDATE notices SET claimed_at_ms = ? WHERE tenant = ? AND operation_key = ? AND claimed_at_ms = ?",
            (now_ms(), notice["tenant"], notice["operation_key"], notice["claimed_at_ms"]),
        ).rowcount == 1

    def notice_done(self, tenant: str, key: str) -> None:
        """The notice is owed no more: confirmed by the downstream, or handed over to people."""
        self.connection().execute("DELETE FROM notices WHERE tenant = ? AND operation_key = ?", (tenant, key))

    def take_over(self, record: sqlite3.Row, new_owner: str, lease_until_ms: int) -> bool:
        """Takes an abandoned (lease run out), unknown or queued claim over, exactly as
        observed: if anyone changed it since we read it, nothing is written and someone else
        has it. A running job is never taken over: the downstream has it."""
        now = now_ms()
        changed = self.connection().execute(
            "UPDATE operations SET status = 'pending', owner_token = ?, lease_until_ms = ?, "
            "updated_at_ms = ? WHERE tenant = ? AND operation_key = ? AND owner_token IS ? "
            "AND lease_until_ms = ? AND lease_until_ms <= ? AND status IN ('pending', 'unknown') "
            "AND job_id IS NULL",
            (new_owner, lease_until_ms, now, record["tenant"], record["operation_key"],
             record["owner_token"], record["lease_until_ms"], now),
        ).rowcount
        return changed == 1

    def tombstone(self, record: sqlite3.Row) -> None:
        """Past retention a settled record keeps key, fingerprint and effect reference (so a
        late duplicate is answered `expired`, never carried out again) and drops the result."""
        self.connection().execute(
            "UPDATE operations SET status = 'tombstone', result_json = NULL, request_json = NULL, "
            "updated_at_ms = ? WHERE tenant = ? AND operation_key = ? AND status IN ('applied', 'rejected')",
            (now_ms(), record["tenant"], record["operation_key"]),
        )

    def note_handed_over(self, tenant: str, key: str) -> None:
        self.connection().execute(
            "UPDATE operations SET handed_over_ms = ? WHERE tenant = ? AND operation_key = ?",
            (now_ms(), tenant, key),
        )

    def unsettled(self) -> list[sqlite3.Row]:
        """Records without an outcome that an owner was at work on: unknown, or pending with an
        owner (at work, or one whose lease ran out: the sweep waits for the lease before it
        looks). A running job is the downstream's, a queued operation the queue's."""
        return self.connection().execute(
            "SELECT * FROM operations WHERE status = 'unknown' "
            "OR (status = 'pending' AND owner_token IS NOT NULL AND job_id IS NULL) "
            "ORDER BY tenant, operation_key"
        ).fetchall()


# --------------------------------------------------------------------------- the executor


@dataclass
class Request:
    """A validated call: what an owner needs to carry the effect out (or out again)."""

    contract: Contract
    tenant: str
    actor: str
    key: str
    downstream_key: str
    fingerprint: str
    arguments: dict[str, Any]
    # The call's _meta as the agent sent it: what a queued call's envelope carries. None for a
    # request rebuilt from a record.
    call: dict[str, Any] | None = None


class CallError(Exception):
    """A request the server cannot read (no or a malformed ``_meta``): a tool error."""


def operation_key(meta: dict[str, Any]) -> str:
    """``tenant/environment/workflow_id/step_id`` (docs/mcp.md): the operation, never the call.
    ``%`` and ``/`` inside a part are escaped so that parts cannot run into each other."""
    parts = [meta[name] for name in ("tenant", "environment", "workflow_id", "step_id")]
    return "/".join(part.replace("%", "%25").replace("/", "%2F") for part in parts)


def downstream_key_of(key: str) -> str:
    """The Idempotency-Key header: the operation key when it is short visible ASCII."""
    if len(key) <= MAX_DOWNSTREAM_KEY_CHARS and all(0x21 <= ord(c) <= 0x7E for c in key):
        return key
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def read_call_meta(meta: Any) -> dict[str, Any]:
    """``_meta["dev.replaylab/call"]`` checked against the conventions, or CallError."""
    call = meta.get(CALL_META) if isinstance(meta, dict) else None
    if call is None:
        raise CallError(f'missing _meta["{CALL_META}"]: name the operation (tenant, environment, workflow_id, '
                        "step_id, actor, tool_version, call_id, attempt, idempotency_key; docs/mcp.md)")
    if not isinstance(call, dict):
        raise CallError(f'invalid _meta["{CALL_META}"]: expected an object')
    text_fields = ("tenant", "environment", "workflow_id", "step_id", "actor", "tool_version", "call_id",
                   "idempotency_key")
    expected = {"version", "attempt", *text_fields}
    if set(call) != expected:
        raise CallError(f'invalid _meta["{CALL_META}"]: expected exactly the fields {sorted(expected)}')
    if call["version"] != CONVENTIONS_VERSION or type(call["version"]) is not int:
        raise CallError(f'invalid _meta["{CALL_META}"]: version {call["version"]!r} '
                        f"(this server speaks version {CONVENTIONS_VERSION})")
    if type(call["attempt"]) is not int or call["attempt"] < 1:
        raise CallError(f'invalid _meta["{CALL_META}"]: attempt must be a whole number from 1')
    for name in text_fields:
        if not isinstance(call[name], str):
            raise CallError(f'invalid _meta["{CALL_META}"]: {name} must be a string')
    return call


def is_identifier(value: Any) -> bool:
    """1 to 255 characters without control characters."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS
            and not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value))


def check_identifiers(call: dict[str, Any]) -> str | None:
    for name in ("tenant", "environment", "workflow_id", "step_id", "actor", "call_id"):
        if not is_identifier(call[name]):
            return f"`{name}` must be 1 to {MAX_ID_CHARS} characters without control characters"
    return None


def validated_arguments(contract: Contract, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments checked against the contract, defaults filled in; ValueError says why."""
    checked = {name: value for name, value in arguments.items() if name not in KEY_ARGUMENTS}
    for name, value in contract.defaults.items():
        checked.setdefault(name, value)
    for name, value in checked.items():
        kind = contract.arguments.get(name)
        if kind is None:
            raise ValueError(f"unknown argument `{name}` for {contract.name}")
        if kind == "string":
            fits = isinstance(value, str) and 0 < len(value) <= MAX_ARGUMENT_CHARS
        elif kind == "integer":
            # bool is an int in Python; JSON true is not a number.
            fits = type(value) is int and abs(value) <= MAX_EXACT_INTEGER
        else:
            fits = isinstance(value, dict)
        if not fits:
            raise ValueError(f"argument `{name}` must be a {kind}"
                             + (f" (non-empty, at most {MAX_ARGUMENT_CHARS} characters)" if kind == "string" else ""))
    for name in contract.required:
        if name not in checked:
            raise ValueError(f"argument `{name}` is required")
    return checked


def fingerprint(contract: Contract, tenant: str, arguments: dict[str, Any]) -> str:
    """SHA-256 of the RFC 8785 canonical form of what the effect depends on: tool, version,
    tenant and the material arguments after defaults. Key order, whitespace, an omitted
    default or a trace id never change it; any material value does."""
    material = {name: arguments[name] for name in contract.material if name in arguments}
    canonical = rfc8785.dumps({"tool": contract.name, "tool_version": contract.version,
                               "tenant": tenant, "arguments": material})
    return "jcs-v1:sha256:" + hashlib.sha256(canonical).hexdigest()


class Executor:
    def __init__(self, config: Config):
        self.config = config
        self.store = Store(os.path.join(config.state_dir, "claims.db"))
        self.downstream = Downstream(config)
        self.authz = parse_http_url(config.authz_url)
        authz_split = urllib.parse.urlsplit(config.authz_url)
        self.authz_path = authz_split.path or "/"
        # Wakes this process's own reconciliation (reconcile_forever): set at start, so that a
        # (re)started worker looks at what earlier incarnations left open, and whenever this
        # process leaves an operation unknown. It is not a timer: a sweep that finds nothing
        # left to try goes back to sleep, and never takes over claims it was not told about.
        self.wake = threading.Event()
        self.wake.set()
        # The operations a thread of this process is carrying out right now (as owner), by
        # (tenant, key), with how many threads are at it. A lease that runs out while its owner
        # still waits for the downstream looks abandoned to everyone else, and the compare-and-
        # set keeps that safe; this process, though, knows its owner is alive, and its own
        # reconciliation never takes such a claim from it (its answer is on the way).
        self.at_work: dict[tuple[str, str], int] = {}
        self.at_work_lock = threading.Lock()

    # ------------------------------------------------------------------ helpers

    def owner_token(self) -> str:
        return f"{self.config.worker}-{self.config.incarnation}-{secrets.token_hex(8)}"

    @contextlib.contextmanager
    def working(self, tenant: str, key: str):
        """Marks the operation as being carried out by a thread of this process."""
        ident = (tenant, key)
        with self.at_work_lock:
            self.at_work[ident] = self.at_work.get(ident, 0) + 1
        try:
            yield
        finally:
            with self.at_work_lock:
                self.at_work[ident] -= 1
                if not self.at_work[ident]:
                    del self.at_work[ident]

    def is_at_work(self, tenant: str, key: str) -> bool:
        with self.at_work_lock:
            return (tenant, key) in self.at_work

    def hand_over(self, tenant: str, key: str, finding: str) -> None:
        """Files an operation nothing here can settle with the operators' queue
        (REPLAYLAB_OPERATORS_URL): people must find out whether the effect exists. An `unknown`
        that nobody is told about is never settled: this is the executor's last duty to it.
        One entry per operation: filed at least once (marked only after the queue took it, so
        a crash in between files it again rather than never), and not again by later tries."""
        record = self.store.load(tenant, key)
        if record is not None and record["handed_over_ms"] is not None:
            log.info("%s was handed over to people already; still: %s", key, finding)
            return
        log.warning("handing %s over to people: %s", key, finding)
        if self.file_with_operators(tenant, key, finding):
            self.store.note_handed_over(tenant, key)

    def file_with_operators(self, tenant: str, key: str, finding: str) -> bool:
        """One entry on the operators' queue; True once the queue took it."""
        if self.config.operators is None:
            log.error("no REPLAYLAB_OPERATORS_URL: %s (%s) is only in this log", key, finding)
            return False
        entry = {"tenant": tenant, "operation_key": key, "finding": finding}
        return self.post(self.config.operators, entry, "the operators' queue")

    def post(self, where: tuple[str, int, str], body: dict[str, Any], what: str) -> bool:
        """POSTs a JSON document to one of the harness's queues; True once it was taken (2xx)."""
        host, port, path = where
        try:
            response = self.downstream.request("POST", path, body, host=(host, port))
        except Ambiguous as error:
            log.error("%s did not take the document: %s", what, error)
            return False
        if not 200 <= response.status < 300:
            log.error("%s refused the document: %s", what, response.status)
            return False
        return True

    def authorized(self, actor: str, tool: str) -> bool:
        """Asked on every delivery: permissions can be revoked between attempts. An authorizer
        that cannot be asked denies: an effect without permission is worse than a refusal."""
        query = urllib.parse.urlencode({"actor": actor, "tool": tool})
        try:
            response = self.downstream.request("GET", f"{self.authz_path}?{query}", host=self.authz)
        except Ambiguous:
            return False
        return response.status == 200 and isinstance(response.body, dict) and response.body.get("allowed") is True

    def describe(self, record: sqlite3.Row) -> dict[str, Any]:
        """A record's state as an outcome, without acting."""
        key, status = record["operation_key"], record["status"]
        if status == "applied":
            return outcome("replayed", key, reference=record["effect_reference"],
                           result=json.loads(record["result_json"]) if record["result_json"] else None)
        if status == "rejected":
            return outcome("rejected", key, reason=record["reason"], message="the operation was refused for good")
        if status == "tombstone":
            return outcome("expired", key, reference=record["effect_reference"],
                           message="the operation is past its retention; a new action needs a new operation")
        if status == "unknown":
            return outcome("unknown", key, message="the effect may have happened; reconcile before anything else")
        if record["job_id"] is not None:
            return outcome("in_flight", key, retry_after=JOB_POLL_AFTER_SECONDS,
                           message=f"the downstream is running job {record['job_id']}; poll")
        if record["owner_token"] is None:
            return outcome("in_flight", key, retry_after=QUEUE_POLL_AFTER_SECONDS,
                           message="queued; a consumer will carry it out; poll")
        remaining = record["lease_until_ms"] - now_ms()
        if remaining > 0:
            return outcome("in_flight", key, retry_after=max(1, math.ceil(remaining / 1000)),
                           message="another worker owns the operation; poll")
        # Nobody is at work on it: its owner died or gave up. Never `in_flight` here.
        return outcome("unknown", key, message="the owner's lease ran out before it recorded an outcome; reconcile")

    def reload(self, tenant: str, key: str) -> dict[str, Any]:
        record = self.store.load(tenant, key)
        return self.describe(record) if record else invalid(key, "no operation with this key")

    def retire(self, record: sqlite3.Row) -> sqlite3.Row:
        """Applies retention: a settled record past it becomes a tombstone."""
        if record["status"] in ("applied", "rejected") and now_ms() >= record["expires_at_ms"]:
            self.store.tombstone(record)
            return self.store.load(record["tenant"], record["operation_key"]) or record
        return record

    # ------------------------------------------------------------------ a call

    def prepare(self, tool: str, arguments: dict[str, Any], call: dict[str, Any]) -> Request | dict[str, Any]:
        key = operation_key(call)
        problem = check_identifiers(call)
        if problem:
            return invalid(None, problem)
        contract = CONTRACTS.get((tool, call["tool_version"]))
        if contract is None:
            return invalid(key, f"unknown tool {tool} at version {call['tool_version']}")
        try:
            checked = validated_arguments(contract, arguments)
        except ValueError as error:
            return invalid(key, str(error))
        return Request(contract, call["tenant"], call["actor"], key, downstream_key_of(key),
                       fingerprint(contract, call["tenant"], checked), checked, call)

    def call(self, tool: str, arguments: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
        prepared = self.prepare(tool, arguments, call)
        if isinstance(prepared, dict):
            return prepared
        request = prepared
        if request.contract.execution == "queued" and self.config.queue is None:
            return invalid(request.key, f"{tool} is queued, and this process has no outbox (REPLAYLAB_QUEUE_URL)")
        try:
            # Before the claim: an unauthorized call leaves no record, and a revoked actor is
            # refused even where a replay is ready.
            if not self.authorized(request.actor, tool):
                return unauthorized(request.key)
            return self.claim_and_answer(request)
        except sqlite3.Error as error:
            return outcome("unknown", request.key, message=f"the claim store failed, so the outcome is not known: {error}")

    def claim_and_answer(self, request: Request) -> dict[str, Any]:
        contract, now = request.contract, now_ms()
        owner = self.owner_token()
        ours, record = self.store.claim({
            "tenant": request.tenant, "operation_key": request.key, "tool": contract.name,
            "tool_version": contract.version, "fingerprint": request.fingerprint, "status": "pending",
            "owner_token": owner, "lease_until_ms": now + self.config.lease(contract),
            "downstream_key": request.downstream_key,
            # Kept while the outcome is open, so that recovery can resend it under the same key.
            "request_json": json.dumps({"actor": request.actor, "arguments": request.arguments}),
            "created_at_ms": now, "updated_at_ms": now, "expires_at_ms": now + self.config.retention(contract),
        })
        if ours:
            log.info("claim won: %s", request.key)
            if contract.execution == "queued":
                return self.enqueue(owner, request)
            return self.execute(owner, request)
        log.info("claim found an existing record: %s (%s)", request.key, record["status"])
        return self.answer_existing(self.retire(record), request)

    def answer_existing(self, record: sqlite3.Row, request: Request) -> dict[str, Any]:
        if record["status"] == "tombstone":
            return self.late_arrival(record)
        if record["fingerprint"] != request.fingerprint:
            return self.mismatch(record, request)
        status = record["status"]
        if status == "applied":
            self.finish_notice(record, request.contract)
            return self.describe(record)
        if status == "rejected":
            return self.describe(record)
        if status == "pending" and (record["job_id"] is not None or record["owner_token"] is None):
            # A running job (never a second one), or an envelope waiting for its consumer:
            # in_flight, and nothing to do but wait.
            return self.describe(record)
        if status == "pending" and record["lease_until_ms"] > now_ms():
            return self.describe(record)  # its owner is at work: in_flight
        if status == "unknown" and not self.config.traits(request.contract).can_find_out:
            # No receipts and no honoured key: a retry can neither look it up nor resend it
            # safely. It was handed over to people when it was marked; it stays unknown.
            return self.describe(record)
        # Abandoned (its owner's lease ran out) or unknown: take it over, then find out.
        owner = self.owner_token()
        if not self.store.take_over(record, owner, now_ms() + self.config.lease(request.contract)):
            return self.reload(request.tenant, request.key)
        log.info("took over %s (was %s, owner %s)", request.key, status, record["owner_token"])
        return self.recover(owner, record, request.contract, request)

    def mismatch(self, record: sqlite3.Row, request: Request) -> dict[str, Any]:
        """The same operation with another request: never carried out, never replaced. A newer
        tool version may replay an applied record only where the record's contract allows it
        and the call, read by that contract, is the very request the record was made for."""
        key, contract = record["operation_key"], request.contract
        other_version = record["tool"] == contract.name and record["tool_version"] != contract.version
        same_request = None
        stored = CONTRACTS.get((record["tool"], record["tool_version"]))
        if other_version and stored is not None and stored.replay_across_versions:
            try:
                as_made = validated_arguments(stored, request.arguments)
                same_request = fingerprint(stored, request.tenant, as_made) == record["fingerprint"]
            except ValueError:
                same_request = False
        if same_request and record["status"] == "applied":
            return self.describe(record)
        if other_version and same_request is not False:
            return outcome("rejected", key, reason="tool_version_changed", next_action="inspect_operation",
                           message=f"this operation was made by {record['tool']} version {record['tool_version']}; "
                                   f"version {contract.version} may not re-run it")
        return outcome("rejected", key, reason="idempotency_key_reused_with_different_request",
                       next_action="inspect_operation",
                       message="this operation was started with a different request; the original stands")

    def late_arrival(self, record: sqlite3.Row) -> dict[str, Any]:
        """A key past retention. Where the contract says reconcile_first, the downstream's
        receipts are asked before answering (and the finding logged for operators)."""
        contract = CONTRACTS.get((record["tool"], record["tool_version"]))
        if (contract is not None and contract.late_arrival == "reconcile_first"
                and self.config.traits(contract).receipts):
            found = look_up_receipt(self.downstream, contract.service, record["tenant"], record["downstream_key"])
            log.warning("late arrival after retention for %s: receipt lookup %s %s",
                        record["operation_key"], found.kind, found.reference or found.why)
        return self.describe(record)

    # ------------------------------------------------------------------ the effect (we own the claim)

    def execute(self, owner: str, request: Request) -> dict[str, Any]:
        contract = request.contract
        # Again right before the effect: the permission may have been revoked since the claim.
        if not self.authorized(request.actor, contract.name):
            return self.fail(owner, request, "unauthorized", "the actor may not use this tool now")
        method, path, body, headers = effect_request(contract, request.tenant, request.arguments)
        # Sent even to a service that ignores it: its receipts are found by it.
        headers["Idempotency-Key"] = request.downstream_key
        with self.working(request.tenant, request.key):
            log.info("sending %s %s for %s", method, path, request.key)
            answer = classify(contract, lambda: self.downstream.request(method, path, body, headers))
            return self.record_answer(owner, request, answer)

    def record_answer(self, owner: str, request: Request, answer: Answer) -> dict[str, Any]:
        if answer.kind == "receipt":
            return self.record_receipt(owner, request.tenant, request.key, request.contract,
                                       answer.reference, answer.result, answer.replayed)
        if answer.kind == "precondition_failed":
            return self.fail(owner, request, "precondition_failed", answer.why)
        if answer.kind == "refused":
            return self.fail(owner, request, "downstream_rejected", answer.why)
        if answer.kind == "in_progress":
            # Our claim stays pending while the downstream finishes the first request; once
            # our lease runs out, the reconciliation (or a retry) asks again.
            self.wake.set()
            return outcome("in_flight", request.key, retry_after=max(1, math.ceil(self.config.lease(request.contract) / 1000)),
                           message=answer.why + "; poll")
        # Ambiguous: the effect may exist. Where the service neither keeps receipts nor honours
        # keys, nothing will ever tell (a resend could charge twice): people are told now.
        return self.mark_unknown(owner, request.tenant, request.key, answer.why,
                                 hand_over=not self.config.traits(request.contract).can_find_out)

    def record_receipt(self, owner: str, tenant: str, key: str, contract: Contract, reference: str,
                       result: dict[str, Any], replayed: bool) -> dict[str, Any]:
        """Completes the record by compare-and-set on our claim. If the claim was taken over
        meanwhile and left unknown, this receipt is the proof nobody else has: take the claim
        back (compare-and-set again) and record it. A delayed job's receipt is its id: the
        record keeps it and waits for the job to finish (polls read it)."""
        adopted = False
        while True:
            if contract.execution == "delayed_job":
                if self.store.set_job(tenant, key, owner, reference):
                    log.info("the downstream accepted job %s for %s", reference, key)
                    return outcome("in_flight", key, retry_after=JOB_POLL_AFTER_SECONDS,
                                   message=f"the downstream accepted job {reference}; poll")
            elif self.store.complete(tenant, key, owner, reference, result):
                log.info("completed %s: %s", key, reference)
                return outcome("replayed" if replayed else "applied", key, reference=reference, result=result)
            record = self.store.load(tenant, key)
            if record is None:
                return invalid(key, "no operation with this key")
            if record["status"] != "unknown" or adopted:
                return self.describe(record)
            owner = self.owner_token()
            if not self.store.take_over(record, owner, now_ms() + self.config.lease(contract)):
                return self.reload(tenant, key)
            log.info("a late answer carried receipt %s: settling the unknown record %s", reference, key)
            adopted = True

    def fail(self, owner: str, request: Request, reason: str, message: str) -> dict[str, Any]:
        if self.store.fail(request.tenant, request.key, owner, reason):
            return outcome("rejected", request.key, reason=reason, message=message)
        return self.reload(request.tenant, request.key)

    def mark_unknown(self, owner: str, tenant: str, key: str, finding: str,
                     hand_over: bool = False) -> dict[str, Any]:
        """The effect may or may not exist. Never a success claim: the record is left for a
        receipt lookup (ours in the background, the agent's reconcile, or a retry), or, with
        ``hand_over`` (nothing here can ever find out), filed for people before answering."""
        if self.store.mark_unknown(tenant, key, owner, finding):
            log.info("marked unknown: %s (%s)", key, finding)
            if hand_over:
                self.hand_over(tenant, key, finding)
            self.wake.set()
            return outcome("unknown", key, message=f"the effect may have happened ({finding}); reconcile")
        return self.reload(tenant, key)

    def enqueue(self, owner: str, request: Request) -> dict[str, Any]:
        """A queued tool's call: the envelope goes to the outbox, then the claim is released to
        the queue (the record stays pending, without an owner, until a consumer claims it).
        In this order: a crash between the two leaves a claim whose lease runs out, which the
        consumer or the reconciliation takes over like any abandoned claim; the other order
        could leave an operation waiting for an envelope that was never written."""
        if not self.authorized(request.actor, request.contract.name):
            return self.fail(owner, request, "unauthorized", "the actor may not use this tool now")
        # The consumer gets the call itself, and derives key and fingerprint from it again
        # rather than trusting the envelope's word.
        envelope = {"envelope_id": f"env_{secrets.token_hex(8)}", "tenant": request.tenant,
                    "operation_key": request.key, "tool": request.contract.name,
                    "payload": {"tool": request.contract.name, "arguments": request.arguments,
                                "call": request.call}}
        if not self.post(self.config.queue, envelope, "the outbox"):  # type: ignore[arg-type]
            # The queue may or may not have it: as ambiguous as a lost downstream answer.
            return self.mark_unknown(owner, request.tenant, request.key, "the outbox did not confirm the envelope",
                                     hand_over=not self.config.traits(request.contract).can_find_out)
        if not self.store.release(request.tenant, request.key, owner):
            return self.reload(request.tenant, request.key)
        log.info("queued %s (%s)", request.key, envelope["envelope_id"])
        return outcome("in_flight", request.key, retry_after=QUEUE_POLL_AFTER_SECONDS,
                       message="queued; a consumer will carry it out; poll")

    # ------------------------------------------------------------------ recovery

    def recover(self, owner: str, record: sqlite3.Row, contract: Contract, request: Request | None) -> dict[str, Any]:
        """We took over a claim whose previous owner may have reached the downstream.

        1. Where the service keeps receipts, ask them first: the earlier owner may have
           committed. Found: the effect is recorded and replayed. Lookup failed: unknown, worth
           another try later (nothing is resent while the answer is unclear).
        2. No receipt (or none kept): resend the request under the same key, but only where
           the service honours keys, so that a request still on its way cannot make a second
           effect; and only with the request at hand (a reconcile by reference never resends).
        3. Otherwise unknown. Where the service does not honour keys, "no receipt" proves
           nothing (the lost request may still commit) and no retry can ever settle it: it is
           handed over to people now."""
        tenant, key = record["tenant"], record["operation_key"]
        traits = self.config.traits(contract)
        with self.working(tenant, key):
            if traits.receipts:
                found = look_up_receipt(self.downstream, contract.service, tenant, record["downstream_key"])
                log.info("receipt lookup for %s: %s %s", key, found.kind, found.reference or found.why)
                if found.kind == "found":
                    return self.record_receipt(owner, tenant, key, contract, found.reference,
                                               receipt_result(contract, found), True)
                if found.kind == "failed":
                    return self.mark_unknown(owner, tenant, key, f"receipt lookup failed: {found.why}")
                finding = "no receipt for the key" if found.kind == "not_found" else found.why
            else:
                finding = "the service keeps no receipts"
            if request is not None and traits.honours_keys:
                log.info("%s for %s: resending under the same key, which the service honours", finding, key)
                return self.execute(owner, request)
            return self.mark_unknown(owner, tenant, key,
                                     f"{finding}; the effect cannot be proved or safely repeated here",
                                     hand_over=not traits.honours_keys)

    def kept_request(self, record: sqlite3.Row, contract: Contract) -> Request | None:
        """The request a record kept, when it still derives the record's fingerprint."""
        if not record["request_json"]:
            return None
        kept = json.loads(record["request_json"])
        request = Request(contract, record["tenant"], kept["actor"], record["operation_key"],
                          record["downstream_key"], record["fingerprint"], kept["arguments"])
        if fingerprint(contract, record["tenant"], kept["arguments"]) != record["fingerprint"]:
            return None
        return request

    def reconcile_forever(self) -> None:
        """This process's own reconciliation, on a thread of its own. It sleeps until woken
        (at start, and whenever this process leaves an operation unknown), then sweeps until
        nothing is left to try. A (re)started worker thus settles what its earlier
        incarnation, or a crashed peer, left open; between sweeps it leaves other workers'
        claims to them and to the agent's retries. Tries are counted per process, so that an
        operation nobody can settle is not looked up forever."""
        tries: dict[tuple[str, str], int] = {}
        while True:
            self.wake.wait()
            # Cleared before the sweep reads the store: an operation marked unknown after this
            # line sets the event again and gets a sweep of its own.
            self.wake.clear()
            try:
                self.sweep(tries)
            except sqlite3.Error as error:
                log.warning("background reconciliation: the claim store failed: %s", error)

    def sweep(self, tries: dict[tuple[str, str], int]) -> None:
        """Every unknown record, and every pending one whose lease ran out (its owner died, or
        is too slow), is taken over and recovered as a retry would (``recover``), at most
        RECONCILE_ATTEMPTS times per process, RECONCILE_AFTER_MS after the record last
        changed and as long again between tries. An unknown record that every try left
        unknown (the lookups kept failing) is handed over to people. Where the service offers
        no way to find out, an unknown record was handed over when it was marked and is left
        alone; an abandoned claim is taken over only to be marked and handed over in turn."""
        not_before: dict[tuple[str, str], int] = {}
        while True:
            now = now_ms()
            due: list[tuple[sqlite3.Row, Contract]] = []
            next_wake: int | None = None
            records = self.store.unsettled()
            # Forget what is settled: its record can never be unsettled again.
            for gone in set(tries) - {(r["tenant"], r["operation_key"]) for r in records}:
                del tries[gone]
            for record in records:
                contract = CONTRACTS.get((record["tool"], record["tool_version"]))
                if contract is None:
                    continue
                if record["status"] == "unknown" and not self.config.traits(contract).can_find_out:
                    continue
                ident = (record["tenant"], record["operation_key"])
                count = tries.get(ident, 0)
                if count >= RECONCILE_ATTEMPTS:
                    if count == RECONCILE_ATTEMPTS and record["status"] == "unknown":
                        tries[ident] = count + 1  # handed over once
                        self.hand_over(ident[0], ident[1],
                                       f"{RECONCILE_ATTEMPTS} reconciliation attempts settled nothing "
                                       f"(last: {record['reason']})")
                    continue
                ready_at = max(not_before.get(ident, 0), record["updated_at_ms"] + RECONCILE_AFTER_MS)
                if record["status"] == "pending":
                    ready_at = max(ready_at, record["lease_until_ms"])
                if ready_at <= now and self.is_at_work(*ident):
                    # Our own thread still waits for the downstream: not abandoned, whatever
                    # the lease says. Look again once it has answered (or a moment later).
                    ready_at = now + RECONCILE_AFTER_MS
                    not_before[ident] = ready_at
                if ready_at <= now:
                    tries[ident] = count + 1
                    not_before[ident] = now + RECONCILE_AFTER_MS
                    due.append((record, contract))
                else:
                    next_wake = ready_at if next_wake is None else min(next_wake, ready_at)
            if not due:
                if next_wake is None:
                    return
                # A new unknown record (the event) ends the wait early; the loop reads it.
                if self.wake.wait((next_wake - now) / 1000):
                    self.wake.clear()
                continue
            for record, contract in due:
                owner = self.owner_token()
                if self.store.take_over(record, owner, now_ms() + self.config.lease(contract)):
                    log.info("reconciling %s in the background (try %d)", record["operation_key"],
                             tries[(record["tenant"], record["operation_key"])])
                    self.recover(owner, record, contract, self.kept_request(record, contract))

    # ------------------------------------------------------------------ poll and reconcile

    def lookup(self, call: dict[str, Any], reconcile: bool) -> dict[str, Any]:
        problem = check_identifiers(call)
        if problem:
            return invalid(None, problem)
        tenant, key = call["tenant"], operation_key(call)
        try:
            record = self.store.load(tenant, key)
            if record is None:
                return invalid(key, "no operation with this key")
            # A status answer can replay a result: it is no way around authorization either.
            if not self.authorized(call["actor"], record["tool"]):
                return unauthorized(key)
            record = self.retire(record)
            contract = CONTRACTS.get((record["tool"], record["tool_version"]))
            if contract is None:
                return self.describe(record)
            if record["status"] == "pending" and record["job_id"] is not None:
                return self.check_job(record, contract)
            if record["status"] == "applied":
                self.finish_notice(record, contract)
            # Only a claim an owner was at work on can be abandoned: a queued operation is
            # the queue's (in_flight until its consumer has carried it out).
            abandoned = record["status"] == "unknown" or (
                record["status"] == "pending" and record["owner_token"] is not None
                and record["lease_until_ms"] <= now_ms())
            if not abandoned:
                return self.describe(record)
            if reconcile:
                owner = self.owner_token()
                if not self.store.take_over(record, owner, now_ms() + self.config.lease(contract)):
                    return self.reload(tenant, key)
                return self.recover(owner, record, contract, None)
            # A poll only reads: a receipt settles the record, nothing is ever resent. An
            # abandoned claim without one is `unknown` (its owner is gone), never `in_flight`.
            if not self.config.traits(contract).receipts:
                return self.describe(record)
            found = look_up_receipt(self.downstream, contract.service, tenant, record["downstream_key"])
            if found.kind != "found":
                return self.describe(record)
            owner = self.owner_token()
            if not self.store.take_over(record, owner, now_ms() + self.config.lease(contract)):
                return self.reload(tenant, key)
            return self.record_receipt(owner, tenant, key, contract, found.reference,
                                       receipt_result(contract, found), True)
        except sqlite3.Error as error:
            return outcome("unknown", key, message=f"the claim store failed, so the outcome is not known: {error}")

    # ------------------------------------------------------------------ delayed jobs

    def check_job(self, record: sqlite3.Row, contract: Contract) -> dict[str, Any]:
        """A poll of a running job reads it: while it runs, `in_flight` (a job is never given
        up on, and never submitted again); once it succeeded, the operation is settled with
        its result."""
        tenant, key, job_id = record["tenant"], record["operation_key"], record["job_id"]
        job = read_job(self.downstream, tenant, job_id)
        if job.state == "running":
            return self.describe(record)
        if job.state == "unreadable":
            return outcome("in_flight", key, retry_after=JOB_POLL_AFTER_SECONDS,
                           message=f"job {job_id} could not be read ({job.why}); poll")
        settled, result = self.settle_job(record, contract, job_id, job.result)
        if settled == "processed":
            return outcome("applied", key, reference=job_id, result=result)
        return self.reload(tenant, key)  # someone else settled it first: replayed

    def settle_job(self, record: sqlite3.Row, contract: Contract, job_id: str, job_result: Any,
                   event_id: str | None = None) -> tuple[str, dict[str, Any]]:
        """Settles the operation's finished job once (the store's compare-and-set decides who
        does), and then, only for that one, sends the completion notice its contract names,
        before answering: the caller (a poll, or the provider's webhook delivery) waits for
        it, so the notice is never work that nobody waits for and a crash can cut short
        unnoticed (a notice left owed is finished by a later poll: finish_notice)."""
        tenant, key = record["tenant"], record["operation_key"]
        result = {"job_id": job_id, "status": "succeeded", "result": job_result}
        notice = contract.completion_notice_to is not None
        settled = self.store.settle_job(tenant, key, job_id, result, notice, event_id)
        if settled == "processed":
            log.info("job %s of %s succeeded: settled", job_id, key)
            if notice:
                self.announce(tenant, key, contract, job_id, record["downstream_key"])
        return settled, result

    def announce(self, tenant: str, key: str, contract: Contract, job_id: str, downstream_key: str) -> None:
        """Sends a settled job's completion notice, and owes it no more once the downstream
        confirmed it. A notice it did not confirm is not resent blind (the message service
        may not dedupe: a resend could send it twice): it is handed over to people."""
        method, path, body, headers = notice_request(contract, tenant, job_id, downstream_key)
        answer = classify(NOTICE, lambda: self.downstream.request(method, path, body, headers))
        if answer.kind == "receipt":
            log.info("completion notice for %s sent: %s", key, answer.reference)
        else:
            finding = f"the completion notice for {job_id} was not confirmed: {answer.why}"
            log.warning("handing the completion notice of %s over to people: %s", key, finding)
            if not self.file_with_operators(tenant, key, finding):
                return  # still owed: a later poll finishes it
        self.store.notice_done(tenant, key)

    def finish_notice(self, record: sqlite3.Row, contract: Contract) -> None:
        """Finishes a notice a settled job still owes because its sender crashed (or could not
        hand it over), from a poll or a retry, once that sender had time to finish (its
        downstream timeout and a moment more). It may have gone out: its receipt is looked
        up first; without one it is resent under its own key only where the message service
        honours keys, and otherwise handed over to people."""
        notice = self.store.due_notice(record["tenant"], record["operation_key"])
        if notice is None or contract.completion_notice_to is None:
            return
        if now_ms() < notice["claimed_at_ms"] + self.config.timeout_ms + RECONCILE_AFTER_MS:
            return
        if not self.store.claim_notice(notice):
            return  # another poll took it on
        tenant, key, job_id = record["tenant"], record["operation_key"], notice["job_id"]
        messages = self.config.service(NOTICE.service)
        if messages.receipts:
            found = look_up_receipt(self.downstream, NOTICE.service, tenant, f"{record['downstream_key']}:notice")
            if found.kind == "found":
                self.store.notice_done(tenant, key)
                return
            if found.kind == "failed":
                return  # a later poll looks again
        if messages.honours_keys:
            self.announce(tenant, key, contract, job_id, record["downstream_key"])
            return
        finding = (f"the completion notice for {job_id} may not have gone out, and cannot be resent "
                   "safely (the message service does not honour keys, and no receipt of it was "
                   "found or can be looked up)")
        if self.file_with_operators(tenant, key, finding):
            self.store.notice_done(tenant, key)

    def webhook(self, body: bytes) -> str:
        """One completion webhook delivery (docs/mcp.md section 4): the `ack` to answer. The
        event is matched to its operation (by the job's Idempotency-Key, else by the job id),
        its id kept (a redelivery of it is a `duplicate_event`, nothing done), and the job
        settled, once, whichever of its events (or polls) comes first: the others are
        `already_settled`. A webhook is a receipt: an operation left `unknown` by a lost
        submission answer is settled by it too."""
        try:
            event = json.loads(body)
        except ValueError:
            return "invalid"
        if not isinstance(event, dict) or event.get("type") != "job.succeeded":
            return "invalid"
        submitted_with = event.get("idempotency_key")
        if not all(is_identifier(event.get(name)) for name in ("event_id", "tenant", "job_id")) or not (
                submitted_with is None or is_identifier(submitted_with)):
            return "invalid"
        tenant, job_id = event["tenant"], event["job_id"]
        if submitted_with is not None:
            record = self.store.load_by_downstream_key(tenant, submitted_with)
        else:
            record = self.store.load_by_job(tenant, job_id)
        contract = CONTRACTS.get((record["tool"], record["tool_version"])) if record else None
        # Only a delayed job's operation, and only its own job (when the job is known).
        if (record is None or contract is None or contract.execution != "delayed_job"
                or record["job_id"] not in (None, job_id)):
            log.info("webhook event %s (job %s) matches no operation", event["event_id"], job_id)
            return "unmatched"
        settled, _ = self.settle_job(record, contract, job_id, event.get("result"), event_id=event["event_id"])
        log.info("webhook event %s for %s: %s", event["event_id"], record["operation_key"], settled)
        return settled

    # ------------------------------------------------------------------ the queue's consumer

    def consume(self, arguments: dict[str, Any]) -> str:
        """One delivery of a queued envelope (``replaylab.consume``): ``ack`` once the operation
        is carried out, was before, or never can be; ``retry`` while another worker owns it.
        The queue delivers at least once: the claim, not the delivery, decides who acts."""
        envelope = arguments.get("envelope")
        payload = envelope.get("payload") if isinstance(envelope, dict) else None
        try:
            if not isinstance(payload, dict) or not isinstance(payload.get("arguments"), dict):
                raise CallError("the envelope carries no call")
            call = read_call_meta({CALL_META: payload.get("call")})
        except CallError as error:
            # No delivery of it will ever be readable: acknowledged, without an effect.
            log.warning("an envelope this executor cannot read (%s): acknowledged", error)
            return "ack"
        # The key and fingerprint are derived from the call again, not taken on trust.
        request = self.prepare(str(payload.get("tool")), payload["arguments"], call)
        if (isinstance(request, dict) or request.key != envelope.get("operation_key")
                or request.tenant != envelope.get("tenant")):
            log.warning("an envelope whose call is not its operation's: acknowledged")
            return "ack"
        try:
            record = self.store.load(request.tenant, request.key)
            if record is None:
                return "ack"
            record = self.retire(record)
            if (record["fingerprint"] != request.fingerprint or record["status"] != "pending"
                    or record["job_id"] is not None):
                # Carried out already (a duplicate delivery), or settled otherwise.
                return "ack"
            if record["owner_token"] is not None and record["lease_until_ms"] > now_ms():
                return "retry"  # another consumer (or the caller, still writing) is at it
            owner = self.owner_token()
            if not self.store.take_over(record, owner, now_ms() + self.config.lease(request.contract)):
                return "retry"
            if record["owner_token"] is None:
                log.info("consuming %s", request.key)
                answer = self.execute(owner, request)
            else:
                # A consumer (or the caller) died holding it: it may have sent already.
                log.info("consuming %s, whose previous owner's lease ran out", request.key)
                answer = self.recover(owner, record, request.contract, request)
            return "retry" if answer["status"] == "in_flight" else "ack"
        except sqlite3.Error as error:
            log.warning("consuming %s: the claim store failed: %s", request.key, error)
            return "retry"

    # ------------------------------------------------------------------ the manifest

    def manifest(self) -> dict[str, Any]:
        served = list(CONTRACTS.values())
        return {
            "version": CONVENTIONS_VERSION,
            # webhook_path is left out: the default, WEBHOOK_PATH.
            "capabilities": {"tools": TOOLS, "queue_consumer": True, "delayed_jobs": True,
                             "webhooks": True, "reconcile": True},
            # The longest lease and retention of any served tool: what the harness waits for.
            "timing": {"lease_ms": max(self.config.lease(c) for c in served),
                       "retention_ms": max(self.config.retention(c) for c in served),
                       "downstream_timeout_ms": self.config.timeout_ms},
        }


# --------------------------------------------------------------------------- MCP


def summary(answer: dict[str, Any]) -> str:
    text = answer["status"]
    if "reason" in answer:
        text += f" ({answer['reason']})"
    if "effect_reference" in answer:
        text += f": {answer['effect_reference']}"
    if "message" in answer:
        text += f" ({answer['message']})"
    return text


def build_server(executor: Executor) -> Server:
    def schema(contract: Contract | None) -> dict[str, Any]:
        # Permissive on purpose: the executor validates the arguments itself and answers a bad
        # one with `rejected`/`invalid_request`, which the agent can read.
        properties = {name: {"type": kind} for name, kind in (contract.arguments if contract else {}).items()}
        return {"type": "object", "properties": properties}

    latest = {c.name: c for c in sorted(CONTRACTS.values(), key=lambda c: c.version)}
    tools = [types.Tool(name=name, description=f"{latest[name].name}: name the operation in "
                        f'_meta["{CALL_META}"]; the outcome comes back as structuredContent',
                        input_schema=schema(latest[name])) for name in TOOLS]
    tools.append(types.Tool(name=POLL_TOOL, input_schema=schema(None),
                            description=f'The outcome of the operation named in _meta["{CALL_META}"]'))
    tools.append(types.Tool(name=RECONCILE_TOOL, input_schema=schema(None),
                            description=f'Settle the operation named in _meta["{CALL_META}"] against '
                                        "the downstream's receipts, then answer its outcome"))
    tools.append(types.Tool(name=CONSUME_TOOL, input_schema={"type": "object", "properties": {
        "envelope": {"type": "object"}, "attempt": {"type": "integer"}}},
        description='One delivery of a queued envelope, by the queue (no _meta): answers '
                    '{"consumed": "ack"} or {"consumed": "retry"}'))

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        if name not in TOOLS and name not in (POLL_TOOL, RECONCILE_TOOL, CONSUME_TOOL):
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {name!r}")
        if name == CONSUME_TOOL:
            # The queue's call, not the agent's: no _meta; the operation is in the envelope.
            consumed = await anyio.to_thread.run_sync(executor.consume, dict(params.arguments or {}))
            return types.CallToolResult(content=[types.TextContent(text=consumed)],
                                        structured_content={"consumed": consumed}, is_error=False)
        try:
            call = read_call_meta(params.meta if params.meta is not None else ctx.meta)
        except CallError as error:
            return types.CallToolResult(content=[types.TextContent(text=str(error))], is_error=True)
        arguments = dict(params.arguments or {})
        # The store and the HTTP client block: run in a thread so that calls overlap. The
        # thread finishes and records its outcome even if the agent stops waiting.
        if name == POLL_TOOL:
            answer = await anyio.to_thread.run_sync(executor.lookup, call, False)
        elif name == RECONCILE_TOOL:
            answer = await anyio.to_thread.run_sync(executor.lookup, call, True)
        else:
            answer = await anyio.to_thread.run_sync(executor.call, name, arguments, call)
        return types.CallToolResult(content=[types.TextContent(text=summary(answer))],
                                    structured_content=answer, is_error=False)

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(
            uri=MANIFEST_URI, name="executor", mime_type="application/json",
            description="What this executor supports and its timing (replaylab's conventions)")])

    async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        if str(params.uri) != MANIFEST_URI:
            raise MCPError(types.INVALID_PARAMS, f"no resource {params.uri!r}")
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=MANIFEST_URI, mime_type="application/json", text=json.dumps(executor.manifest()))])

    return Server("replaylab-python-executor", version="0.1.0",
                  instructions=f'Name each call\'s operation in _meta["{CALL_META}"]; read {MANIFEST_URI}.',
                  on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=list_resources, on_read_resource=read_resource)


class WebhookHandler(http.server.BaseHTTPRequestHandler):
    """The completion webhooks' receiver: ``POST`` at WEBHOOK_PATH, answered ``200`` with
    ``{"ack": ...}`` (docs/mcp.md section 4). A claim store that fails answers ``500``: the
    provider delivers the event again."""

    executor: Executor  # set on the class made by serve_webhooks
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        if urllib.parse.urlsplit(self.path).path != WEBHOOK_PATH:
            self.reply(404, {"error": f"webhooks are received at {WEBHOOK_PATH}"})
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_WEBHOOK_BYTES:
            self.reply(200, {"ack": "invalid"})
            return
        body = self.rfile.read(int(length))
        try:
            ack = self.executor.webhook(body)
        except sqlite3.Error as error:
            log.warning("a webhook delivery: the claim store failed: %s", error)
            self.reply(500, {"error": "the claim store failed; deliver again"})
            return
        self.reply(200, {"ack": ack})

    def do_GET(self) -> None:  # noqa: N802
        self.reply(405, {"error": "POST a completion event"})

    def reply(self, status: int, document: dict[str, Any]) -> None:
        payload = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's naming)
        log.debug("webhook listener: " + format, *args)


def serve_webhooks(executor: Executor, host: str, port: int) -> None:
    """Receives completion webhooks at ``http://HOST:PORT/webhooks``, beside MCP, each delivery
    on a thread of its own (the handlers block on the store and the downstream, as the tool
    calls do). Bound before MCP is served: a delivery may come as soon as the run starts."""
    handler = type("Handler", (WebhookHandler,), {"executor": executor})
    try:
        server = http.server.ThreadingHTTPServer((host, port), handler)
    except OSError as error:
        print(f"error: cannot receive webhooks at {host}:{port} (REPLAYLAB_WEBHOOK_LISTEN): {error}",
              file=sys.stderr)
        raise SystemExit(1) from error
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="webhooks", daemon=True).start()
    log.info("receiving webhooks at http://%s:%d%s", host, port, WEBHOOK_PATH)


async def serve_stdio(executor: Executor) -> None:
    server = build_server(executor)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(executor: Executor, host: str, port: int) -> None:
    """MCP over streamable HTTP at ``http://HOST:PORT/mcp``, the SDK's session manager behind
    uvicorn. Every session (an agent may open several, one after another or at once) is served
    by the same handlers and so by the same executor: the claims are in the shared store, never
    in a session."""
    server = build_server(executor)
    # For a loopback host the SDK also checks the Host and Origin headers (DNS rebinding).
    app = server.streamable_http_app(streamable_http_path="/mcp", host=host)
    # log_config=None: uvicorn's own lines go through this process's logging (stderr); one
    # line per HTTP request would bury the executor's decisions, so there is no access log.
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False)
    log.info("serving MCP over streamable HTTP at http://%s:%d/mcp", host, port)
    await uvicorn.Server(config).serve()


def listen_address(value: str | None) -> tuple[str, int]:
    """REPLAYLAB_MCP_LISTEN, ``HOST:PORT`` (``127.0.0.1:8765``); SystemExit(2) when it is
    missing or malformed."""

    def fail(message: str) -> None:
        print(f"error: --transport http: {message} (see docs/mcp.md, section 5)", file=sys.stderr)
        raise SystemExit(2)

    if not value or not value.strip():
        fail("REPLAYLAB_MCP_LISTEN is not set; it names the address to serve MCP at, HOST:PORT")
    address = parse_listen(value)
    if address is None:
        fail(f"REPLAYLAB_MCP_LISTEN={value!r}: expected HOST:PORT, such as 127.0.0.1:8765")
    return address  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                        help="stdio (the default): MCP on stdin/stdout; http: streamable HTTP "
                             "at http://$REPLAYLAB_MCP_LISTEN/mcp")
    transport = parser.parse_args().transport
    # Over stdio, stdout is the MCP channel: every log line goes to stderr (over HTTP too).
    logging.basicConfig(stream=sys.stderr, level=os.environ.get("LOG_LEVEL", "INFO").upper(),
                        format=f"%(asctime)s {os.environ.get('REPLAYLAB_WORKER', '?')} %(levelname)s %(message)s")
    # Checked before anything starts: a bad address exits 2 like a bad variable of section 5.
    address = listen_address(os.environ.get("REPLAYLAB_MCP_LISTEN")) if transport == "http" else None
    config = config_from_env(dict(os.environ))
    executor = Executor(config)
    # A (re)started worker settles what earlier incarnations left open, in the background.
    threading.Thread(target=executor.reconcile_forever, name="reconcile", daemon=True).start()
    if config.webhook_listen is not None:
        serve_webhooks(executor, *config.webhook_listen)
    if address is None:
        anyio.run(serve_stdio, executor)
    else:
        anyio.run(serve_http, executor, *address)


if __name__ == "__main__":
    main()
