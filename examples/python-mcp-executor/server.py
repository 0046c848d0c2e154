#!/usr/bin/env python3
"""A careful executor: an MCP server that turns duplicate delivery into one effect.

It sits between an AI agent and replaylab's fake ticket and payment service and follows
replaylab's MCP conventions (docs/mcp.md) to the letter:

- every ``tools/call`` names its operation in ``_meta["dev.replaylab/call"]``; the operation
  (tenant, environment, workflow_id, step_id) is the identity, never the model's call_id;
- the answer is an ``Outcome`` in ``structuredContent`` (``applied``, ``replayed``,
  ``in_flight``, ``rejected``, ``unknown``, ``expired``) with ``isError: false``;
- the manifest resource ``replaylab://executor`` says what it supports and its timing;
- ``replaylab.poll`` and ``replaylab.reconcile`` answer for an operation named in ``_meta``.

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

Run it as replaylab does: ``python server.py`` with the environment of docs/mcp.md section 5
serves MCP over stdio; ``python server.py --transport http`` serves it over streamable HTTP at
``http://$REPLAYLAB_MCP_LISTEN/mcp``. Either way one process is one worker: one executor, one
claim store connection and one background reconciliation, whatever the number of sessions.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
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


TICKET = {"queue": "string", "subject": "string", "body": "string", "trace_id": "string"}
CHARGE = {"customer": "string", "amount_minor": "integer", "currency": "string", "trace_id": "string"}
STATUS = {"ticket_id": "string", "status": "string", "expected_version": "integer", "trace_id": "string"}

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
    ]
}
# jobs.submit (a delayed job with a completion notice) and messages.send (a queued tool) are
# not served: the manifest says so, and the scenarios that need them are "not applicable".
TOOLS = sorted({name for name, _ in CONTRACTS})

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

    def traits(self, contract: Contract) -> ServiceTraits:
        return self.services.get(contract.service, ServiceTraits())

    def lease(self, contract: Contract) -> int:
        return self.lease_ms or contract.lease_ms

    def retention(self, contract: Contract) -> int:
        return self.retention_ms or contract.retention_ms


def parse_http_url(url: str) -> tuple[str, int] | None:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http" or not parsed.hostname or parsed.port is None:
        return None
    return parsed.hostname, parsed.port


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
    operators = None
    operators_url = env.get("REPLAYLAB_OPERATORS_URL", "").strip()
    if operators_url:
        where = parse_http_url(operators_url)
        if where is None:
            fail(f"REPLAYLAB_OPERATORS_URL={operators_url!r}: expected http://HOST:PORT/PATH")
        operators = (*where, urllib.parse.urlsplit(operators_url).path or "/")
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
        operators=operators,  # type: ignore[arg-type]
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
    raise ValueError(f"no mapping for {contract.name}")


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


def look_up_receipt(downstream: Downstream, contract: Contract, tenant: str, downstream_key: str) -> Lookup:
    """``GET /v1/receipts/{key}?tenant=..&service=..``: the downstream's system of record.
    Receipts are found by the Idempotency-Key the effect request carried."""
    path = (f"/v1/receipts/{quote(downstream_key)}?tenant={quote(tenant)}"
            f"&service={quote(contract.service)}")
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


# --------------------------------------------------------------------------- the claim store

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
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    expires_at_ms    INTEGER NOT NULL,
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
            db.execute(SCHEMA)

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
            f"UPDATE operations SET {assignments}, owner_token = NULL, lease_until_ms = 0, "
            "updated_at_ms = ? WHERE tenant = ? AND operation_key = ? AND owner_token = ? "
            "AND status = 'pending'",
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

    def take_over(self, record: sqlite3.Row, new_owner: str, lease_until_ms: int) -> bool:
        """Takes an abandoned (lease run out) or unknown claim over, exactly as observed: if
        anyone changed it since we read it, nothing is written and someone else has it."""
        now = now_ms()
        changed = self.connection().execute(
            "UPDATE operations SET status = 'pending', owner_token = ?, lease_until_ms = ?, "
            "updated_at_ms = ? WHERE tenant = ? AND operation_key = ? AND owner_token IS ? "
            "AND lease_until_ms = ? AND lease_until_ms <= ? AND status IN ('pending', 'unknown')",
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
        """Records without an outcome: unknown, or pending (an owner at work, or one whose
        lease ran out: the sweep waits for the lease before it looks)."""
        return self.connection().execute(
            "SELECT * FROM operations WHERE status IN ('unknown', 'pending') ORDER BY tenant, operation_key"
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


def check_identifiers(call: dict[str, Any]) -> str | None:
    for name in ("tenant", "environment", "workflow_id", "step_id", "actor", "call_id"):
        value = call[name]
        if not value or len(value) > MAX_ID_CHARS or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
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
        if self.config.operators is None:
            log.error("no REPLAYLAB_OPERATORS_URL: %s stays unknown and only this log says so", key)
            return
        host, port, path = self.config.operators
        entry = {"tenant": tenant, "operation_key": key, "finding": finding}
        try:
            response = self.downstream.request("POST", path, entry, host=(host, port))
        except Ambiguous as error:
            log.error("the operators' queue did not take %s: %s", key, error)
            return
        if not 200 <= response.status < 300:
            log.error("the operators' queue refused %s: %s", key, response.status)
            return
        self.store.note_handed_over(tenant, key)

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
                       fingerprint(contract, call["tenant"], checked), checked)

    def call(self, tool: str, arguments: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
        prepared = self.prepare(tool, arguments, call)
        if isinstance(prepared, dict):
            return prepared
        request = prepared
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
            return self.execute(owner, request)
        log.info("claim found an existing record: %s (%s)", request.key, record["status"])
        return self.answer_existing(self.retire(record), request)

    def answer_existing(self, record: sqlite3.Row, request: Request) -> dict[str, Any]:
        if record["status"] == "tombstone":
            return self.late_arrival(record)
        if record["fingerprint"] != request.fingerprint:
            return self.mismatch(record, request)
        status = record["status"]
        if status in ("applied", "rejected"):
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
            found = look_up_receipt(self.downstream, contract, record["tenant"], record["downstream_key"])
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
        back (compare-and-set again) and record it."""
        adopted = False
        while True:
            if self.store.complete(tenant, key, owner, reference, result):
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
                found = look_up_receipt(self.downstream, contract, tenant, record["downstream_key"])
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
            abandoned = record["status"] == "unknown" or (
                record["status"] == "pending" and record["lease_until_ms"] <= now_ms())
            if contract is None or not abandoned:
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
            found = look_up_receipt(self.downstream, contract, tenant, record["downstream_key"])
            if found.kind != "found":
                return self.describe(record)
            owner = self.owner_token()
            if not self.store.take_over(record, owner, now_ms() + self.config.lease(contract)):
                return self.reload(tenant, key)
            return self.record_receipt(owner, tenant, key, contract, found.reference,
                                       receipt_result(contract, found), True)
        except sqlite3.Error as error:
            return outcome("unknown", key, message=f"the claim store failed, so the outcome is not known: {error}")

    # ------------------------------------------------------------------ the manifest

    def manifest(self) -> dict[str, Any]:
        served = list(CONTRACTS.values())
        return {
            "version": CONVENTIONS_VERSION,
            "capabilities": {"tools": TOOLS, "queue_consumer": False, "delayed_jobs": False,
                             "webhooks": False, "reconcile": True},
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

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        name = params.name
        if name not in TOOLS and name not in (POLL_TOOL, RECONCILE_TOOL):
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {name!r}")
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
    host, _, port = value.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # an IPv6 address: [::1]:8765
    if (not host or any(c.isspace() or c in "/[]@" for c in host)
            or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536):
        fail(f"REPLAYLAB_MCP_LISTEN={value!r}: expected HOST:PORT, such as 127.0.0.1:8765")
    return host, int(port)


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
    if address is None:
        anyio.run(serve_stdio, executor)
    else:
        anyio.run(serve_http, executor, *address)


if __name__ == "__main__":
    main()
