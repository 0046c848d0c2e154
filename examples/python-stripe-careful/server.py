"""A careful payments MCP server on Stripe's official Python SDK.

One tool, `create_payment_intent(amount, currency, customer, idempotency_key)`, charges a
customer at most once per `idempotency_key`, however often the call is delivered and whichever
process gets it:

- a claim in SQLite (`PAYMENTS_DB`, shared by every worker process) names one owner per key,
  with a lease, and the request's fingerprint: a second delivery waits for the owner
  ("already in progress"), is answered from the record once it is done, and a delivery with
  other parameters under the key is refused;
- the key goes to Stripe as the request's `Idempotency-Key` and into the intent's metadata:
  the key is the operation's, not one the SDK minted in this process, so a resend from any
  process after any crash is answered from the first charge;
- every refusal is a `ToolError`, whose text the SDK passes on (any other exception reads
  "Error executing tool ...", and says nothing);
- a request whose answer never came (a dropped connection, a timeout, a 5xx) may have charged:
  the call says so ("the charge may have been made") and records it; the next delivery, or the
  owner's successor once its lease ran out, finds out with a metadata search, then resends
  under the same key if nothing turned up.

It knows nothing of replaylab: no replaylab names, no `_meta`, no manifest. replaylab.toml
tells the harness how its tool and its answers read.
"""

import hashlib
import json
import os
import sqlite3
import time
import uuid

import stripe
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

stripe.api_key = os.environ["STRIPE_API_KEY"]
stripe.api_base = os.environ.get("STRIPE_API_BASE", stripe.api_base)
# This server decides when to resend, and under which key: never the SDK on its own.
stripe.max_network_retries = 0
# Every Stripe request gives up within REQUEST_TIMEOUT_S, well inside the lease, so that an
# owner knows how its request ended before anyone may take its claim over.
REQUEST_TIMEOUT_S = 2.0
LEASE_S = 3.0
stripe.default_http_client = stripe.RequestsClient(timeout=REQUEST_TIMEOUT_S)

DB = os.environ.get("PAYMENTS_DB", "payments.db")
OWNER = uuid.uuid4().hex

mcp = MCPServer("payments-careful")


def connect() -> sqlite3.Connection:
    db = sqlite3.connect(DB, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS charges ("
        " key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, state TEXT NOT NULL,"
        " owner TEXT, lease_until REAL NOT NULL, answer TEXT)"
    )
    return db


def fingerprint(amount: int, currency: str, customer: str) -> str:
    material = json.dumps([amount, currency.lower(), customer], separators=(",", ":"))
    return hashlib.sha256(material.encode()).hexdigest()


def claim(db: sqlite3.Connection, key: str, print_: str) -> tuple[str, dict | None]:
    """Takes the key's claim: ("new", None) for a first delivery, ("recover", None) for a
    claim whose owner may have sent already, ("done", answer) when it is settled."""
    now = time.time()
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute(
            "SELECT fingerprint, state, owner, lease_until, answer FROM charges WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            db.execute(
                "INSERT INTO charges VALUES (?, ?, 'pending', ?, ?, NULL)", (key, print_, OWNER, now + LEASE_S)
            )
            return "new", None
        stored_print, state, owner, lease_until, answer = row
        if stored_print != print_:
            raise ToolError(
                f"the idempotency key {key} was used with other parameters: nothing was charged for this request"
            )
        if state == "done":
            return "done", json.loads(answer)
        if state == "declined":
            raise ToolError(f"the card was declined for {key}: {json.loads(answer)['message']}")
        if state == "pending" and lease_until > now:
            raise ToolError(
                f"a charge for {key} is already in progress; retry in {lease_until - now:.1f} s"
            )
        # An unknown outcome, or an owner whose lease ran out: it may have charged.
        db.execute(
            "UPDATE charges SET state = 'pending', owner = ?, lease_until = ? WHERE key = ?",
            (OWNER, now + LEASE_S, key),
        )
        return "recover", None
    finally:
        db.execute("COMMIT")


def settle(db: sqlite3.Connection, key: str, state: str, answer: dict) -> None:
    # A late owner's answer is evidence too: the key makes every answer the same charge.
    db.execute("UPDATE charges SET state = ?, owner = NULL, answer = ? WHERE key = ?", (state, json.dumps(answer), key))


def answer_of(intent) -> dict:
    return {
        "id": intent.id,
        "status": intent.status,
        "amount": intent.amount,
        "currency": intent.currency,
        "customer": intent.customer,
    }


def find(key: str):
    """The intent made under `key`, if Stripe has one (the metadata search)."""
    quoted = key.replace("\\", "\\\\").replace("'", "\\'")
    found = stripe.PaymentIntent.search(query=f"metadata['operation']:'{quoted}'", limit=1)
    return found.data[0] if found.data else None


@mcp.tool()
def create_payment_intent(amount: int, currency: str, customer: str, idempotency_key: str) -> dict:
    """Charge a customer once per idempotency_key: create a PaymentIntent for `amount` (in the
    currency's smallest unit) and confirm it with the customer's card."""
    db = connect()
    try:
        state, answer = claim(db, idempotency_key, fingerprint(amount, currency, customer))
        if state == "done":
            return answer
        try:
            if state == "recover":
                intent = find(idempotency_key)
                if intent is not None:
                    answer = answer_of(intent)
                    settle(db, idempotency_key, "done", answer)
                    return answer
            intent = stripe.PaymentIntent.create(
                amount=amount,
                currency=currency,
                customer=customer,
                payment_method="pm_card_visa",
                confirm=True,
                metadata={"operation": idempotency_key},
                idempotency_key=idempotency_key,
            )
        except stripe.CardError as error:
            settle(db, idempotency_key, "declined", {"message": error.user_message or str(error)})
            raise ToolError(f"the card was declined for {idempotency_key}: {error.user_message}") from None
        except stripe.IdempotencyError as error:
            db.execute("UPDATE charges SET state = 'unknown', owner = NULL WHERE key = ?", (idempotency_key,))
            raise ToolError(
                f"the idempotency key {idempotency_key} was used with other parameters at Stripe: {error.user_message}"
            ) from None
        except stripe.InvalidRequestError as error:
            if error.code == "idempotency_key_in_use":
                db.execute("UPDATE charges SET state = 'unknown', owner = NULL WHERE key = ?", (idempotency_key,))
                raise ToolError(f"a charge for {idempotency_key} is already in progress at Stripe; retry") from None
            # Refused before anything was made: the claim goes, a corrected call may come.
            db.execute("DELETE FROM charges WHERE key = ?", (idempotency_key,))
            raise ToolError(f"Stripe refused the request: {error.user_message}") from None
        except (stripe.APIConnectionError, stripe.APIError, stripe.RateLimitError) as error:
            db.execute("UPDATE charges SET state = 'unknown', owner = NULL WHERE key = ?", (idempotency_key,))
            raise ToolError(
                f"the charge may have been made ({type(error).__name__}); call again with the same idempotency_key to settle it"
            ) from None
        answer = answer_of(intent)
        settle(db, idempotency_key, "done", answer)
        return answer
    finally:
        db.close()


if __name__ == "__main__":
    mcp.run()
