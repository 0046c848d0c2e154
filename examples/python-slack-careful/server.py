"""A careful chat MCP server on slack_sdk, where Slack has no idempotency key.

One tool, `post_message(channel, text, idempotency_key)`, posts at most one message per
`idempotency_key`, however often the call is delivered and whichever process gets it. Slack
posts a message on every `chat.postMessage` and offers no key, so the only way to know what
was posted is to read the channel back:

- a claim in SQLite (`MESSAGES_DB`, shared by every worker process) names one owner per key,
  with a lease, and the request's fingerprint: a second delivery waits for the owner ("already
  in progress"), is answered from the record once it is done, and a delivery with other
  parameters under the key is refused;
- every message carries the key in its message metadata (`event_type` `operation_posted`,
  `event_payload.operation`), which Slack does not show in the channel and returns from
  `conversations.history` with `include_all_metadata`;
- slack_sdk's own retries are off (`retry_handlers=[]`): its default sends a request again
  after a connection error, which here is a second message;
- a request whose answer never came (a dropped connection, a timeout, a 5xx) may have posted:
  the call reads the channel back at once; if the message is not there it says so ("the
  message may have been posted") and records it; the next delivery, or the owner's successor
  once its lease ran out, reads back again before it posts anything;
- every refusal is a `ToolError`, whose text the SDK passes on.

One window stays open, as against Slack itself: a request Slack is still processing after
its client gave up (more than REQUEST_TIMEOUT_S) is not in the history yet, and a successor
that finds nothing posts. The lease is longer than the request timeout.

It knows nothing of replaylab: no replaylab names, no `_meta`, no manifest. replaylab.toml
tells the harness how its tool and its answers read.
"""

import hashlib
import json
import os
import sqlite3
import time
import uuid

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

REQUEST_TIMEOUT_S = 2
LEASE_S = 3.0
slack = WebClient(
    token=os.environ["SLACK_BOT_TOKEN"],
    base_url=os.environ.get("SLACK_API_URL", "https://slack.com/api/"),
    timeout=REQUEST_TIMEOUT_S,
    retry_handlers=[],
)
DB = os.environ.get("MESSAGES_DB", "messages.db")
ME = uuid.uuid4().hex
EVENT_TYPE = "operation_posted"

mcp = MCPServer("chat-careful")


def connect() -> sqlite3.Connection:
    db = sqlite3.connect(DB, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS messages ("
        " key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, state TEXT NOT NULL,"
        " owner TEXT, lease_until REAL NOT NULL, answer TEXT)"
    )
    return db


def fingerprint(channel: str, text: str) -> str:
    material = json.dumps([channel, text], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(material.encode()).hexdigest()


def claim(db: sqlite3.Connection, key: str, print_: str) -> tuple[str, dict | None]:
    """Takes the key's claim: ("new", None) for a first delivery, ("recover", None) for a
    claim whose owner may have posted already, ("done", answer) when it is settled."""
    now = time.time()
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute(
            "SELECT fingerprint, state, lease_until, answer FROM messages WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            db.execute("INSERT INTO messages VALUES (?, ?, 'pending', ?, ?, NULL)", (key, print_, ME, now + LEASE_S))
            return "new", None
        stored_print, state, lease_until, answer = row
        if stored_print != print_:
            raise ToolError(
                f"the idempotency key {key} was used with other parameters: nothing was posted for this request"
            )
        if state == "done":
            return "done", json.loads(answer)
        if state == "pending" and lease_until > now:
            raise ToolError(f"a message for {key} is already in progress; retry in {lease_until - now:.1f} s")
        # An unknown outcome, or an owner whose lease ran out: it may have posted.
        db.execute(
            "UPDATE messages SET state = 'pending', owner = ?, lease_until = ? WHERE key = ?",
            (ME, now + LEASE_S, key),
        )
        return "recover", None
    finally:
        db.execute("COMMIT")


def settle(db: sqlite3.Connection, key: str, answer: dict) -> dict:
    db.execute("UPDATE messages SET state = 'done', owner = NULL, answer = ? WHERE key = ?", (json.dumps(answer), key))
    return answer


def unknown(db: sqlite3.Connection, key: str, why: str) -> ToolError:
    db.execute("UPDATE messages SET state = 'unknown', owner = NULL WHERE key = ?", (key,))
    return ToolError(
        f"the message may have been posted ({why}); call again with the same idempotency_key to settle it"
    )


def find(channel: str, key: str) -> dict | None:
    """The message posted under `key` in `channel`, if the history shows one (by its metadata)."""
    cursor = None
    while True:
        page = slack.conversations_history(channel=channel, include_all_metadata=True, limit=200, cursor=cursor)
        for message in page["messages"]:
            metadata = message.get("metadata") or {}
            if metadata.get("event_type") == EVENT_TYPE and (metadata.get("event_payload") or {}).get("operation") == key:
                return {"channel": channel, "ts": message["ts"]}
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if not page.get("has_more") or not cursor:
            return None


@mcp.tool()
def post_message(channel: str, text: str, idempotency_key: str) -> dict:
    """Post a message to a channel, once per idempotency_key."""
    db = connect()
    try:
        state, answer = claim(db, idempotency_key, fingerprint(channel, text))
        if state == "done":
            return answer
        if state == "recover":
            try:
                found = find(channel, idempotency_key)
            except (SlackApiError, OSError) as error:
                raise unknown(db, idempotency_key, f"the channel could not be read: {type(error).__name__}") from None
            if found is not None:
                return settle(db, idempotency_key, found)
        try:
            response = slack.chat_postMessage(
                channel=channel,
                text=text,
                metadata={"event_type": EVENT_TYPE, "event_payload": {"operation": idempotency_key}},
            )
        except SlackApiError as error:
            status = error.response.status_code
            if status < 500:
                # Refused (`ok: false`, or over the rate limit): nothing was posted.
                db.execute("DELETE FROM messages WHERE key = ?", (idempotency_key,))
                raise ToolError(f"Slack refused the message: {error.response.get('error')}") from None
            ambiguous = f"Slack answered {status}"
        except OSError as error:
            # A dropped connection or a timeout (urllib's errors are OSErrors).
            ambiguous = type(error).__name__
        else:
            return settle(db, idempotency_key, {"channel": response["channel"], "ts": response["ts"]})
        # The request may have posted the message: read back before saying anything else.
        try:
            found = find(channel, idempotency_key)
        except (SlackApiError, OSError):
            found = None
        if found is not None:
            return settle(db, idempotency_key, found)
        raise unknown(db, idempotency_key, ambiguous)
    finally:
        db.close()


if __name__ == "__main__":
    mcp.run()
