"""A careful issue-tracker MCP server on PyGithub, where GitHub has no idempotency key.

One tool, `create_issue(repo, title, body, idempotency_key)`, opens at most one issue per
`idempotency_key`, however often the call is delivered and whichever process gets it. GitHub
makes an issue on every POST and offers no key, so the only way to know what was made is to
read it back:

- a claim in SQLite (`ISSUES_DB`, shared by every worker process) names one owner per key,
  with a lease, and the request's fingerprint: a second delivery waits for the owner ("already
  in progress"), is answered from the record once it is done, and a delivery with other
  parameters under the key is refused;
- every issue carries a label made from the key (`op-` and 24 hex digits of its SHA-256):
  labels are not shown as content, and GitHub lists issues by label from its database at once
  (its search index lags), so a list finds the issue a lost answer made;
- PyGithub's own retries are off (`retry=None`): its default resends a POST after a dropped
  connection or a 5xx, which here is a second issue;
- a request whose answer never came (a dropped connection, a timeout, a 5xx) may have made
  the issue: the call reads back at once; if the issue is not there yet it says so ("the issue
  may have been created") and records it; the next delivery, or the owner's successor once its
  lease ran out, reads back again before it creates anything;
- every refusal is a `ToolError`, whose text the SDK passes on.

One window stays open, as it does against GitHub itself: a request that GitHub is still
processing after its client gave up (more than REQUEST_TIMEOUT_S) is not in the list yet, and
a successor that finds nothing creates. The lease is longer than the request timeout, so the
successor comes only after the first request has ended on this side.

It knows nothing of replaylab: no replaylab names, no `_meta`, no manifest. replaylab.toml
tells the harness how its tool and its answers read.
"""

import hashlib
import json
import os
import sqlite3
import time
import uuid

from github import Auth, Github, GithubException
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

# Every GitHub request gives up within REQUEST_TIMEOUT_S, well inside the lease, so that an
# owner knows how its request ended before anyone may take its claim over.
REQUEST_TIMEOUT_S = 2
LEASE_S = 3.0
github = Github(
    auth=Auth.Token(os.environ["GITHUB_TOKEN"]),
    base_url=os.environ.get("GITHUB_API_URL", "https://api.github.com"),
    timeout=REQUEST_TIMEOUT_S,
    retry=None,
)
OWNER = os.environ.get("GITHUB_OWNER", "acme-support")
DB = os.environ.get("ISSUES_DB", "issues.db")
ME = uuid.uuid4().hex

mcp = MCPServer("issues-careful")


def connect() -> sqlite3.Connection:
    db = sqlite3.connect(DB, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS issues ("
        " key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, state TEXT NOT NULL,"
        " owner TEXT, lease_until REAL NOT NULL, answer TEXT)"
    )
    return db


def fingerprint(repo: str, title: str, body: str) -> str:
    material = json.dumps([repo, title, body], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(material.encode()).hexdigest()


def label_of(key: str) -> str:
    return "op-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def claim(db: sqlite3.Connection, key: str, print_: str) -> tuple[str, dict | None]:
    """Takes the key's claim: ("new", None) for a first delivery, ("recover", None) for a
    claim whose owner may have sent already, ("done", answer) when it is settled."""
    now = time.time()
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute(
            "SELECT fingerprint, state, lease_until, answer FROM issues WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            db.execute("INSERT INTO issues VALUES (?, ?, 'pending', ?, ?, NULL)", (key, print_, ME, now + LEASE_S))
            return "new", None
        stored_print, state, lease_until, answer = row
        if stored_print != print_:
            raise ToolError(
                f"the idempotency key {key} was used with other parameters: no issue was opened for this request"
            )
        if state == "done":
            return "done", json.loads(answer)
        if state == "pending" and lease_until > now:
            raise ToolError(f"an issue for {key} is already in progress; retry in {lease_until - now:.1f} s")
        # An unknown outcome, or an owner whose lease ran out: it may have created the issue.
        db.execute(
            "UPDATE issues SET state = 'pending', owner = ?, lease_until = ? WHERE key = ?",
            (ME, now + LEASE_S, key),
        )
        return "recover", None
    finally:
        db.execute("COMMIT")


def settle(db: sqlite3.Connection, key: str, answer: dict) -> dict:
    db.execute("UPDATE issues SET state = 'done', owner = NULL, answer = ? WHERE key = ?", (json.dumps(answer), key))
    return answer


def unknown(db: sqlite3.Connection, key: str, why: str) -> ToolError:
    db.execute("UPDATE issues SET state = 'unknown', owner = NULL WHERE key = ?", (key,))
    return ToolError(
        f"the issue may have been created ({why}); call again with the same idempotency_key to settle it"
    )


def answer_of(issue) -> dict:
    return {"number": issue.number, "html_url": issue.html_url, "state": issue.state, "title": issue.title}


def find(repository, key: str):
    """The issue made under `key`, if GitHub lists one (by its label, open or closed)."""
    for issue in repository.get_issues(state="all", labels=[label_of(key)]):
        return issue
    return None


@mcp.tool()
def create_issue(repo: str, title: str, body: str, idempotency_key: str) -> dict:
    """Open an issue in one of the organisation's repositories, once per idempotency_key."""
    db = connect()
    try:
        state, answer = claim(db, idempotency_key, fingerprint(repo, title, body))
        if state == "done":
            return answer
        try:
            repository = github.get_repo(f"{OWNER}/{repo}")
            if state == "recover":
                issue = find(repository, idempotency_key)
                if issue is not None:
                    return settle(db, idempotency_key, answer_of(issue))
        except (GithubException, OSError) as error:
            # Nothing was sent: the claim stays as it was found, for the next delivery.
            raise unknown(db, idempotency_key, f"GitHub could not be read: {type(error).__name__}") from None
        try:
            issue = repository.create_issue(title=title, body=body, labels=[label_of(idempotency_key)])
        except GithubException as error:
            if error.status in (400, 401, 403, 404, 410, 422):
                # Refused before anything was made: the claim goes, a corrected call may come.
                db.execute("DELETE FROM issues WHERE key = ?", (idempotency_key,))
                message = error.data.get("message") if isinstance(error.data, dict) else error.data
                raise ToolError(f"GitHub refused the issue ({error.status}): {message}") from None
            ambiguous = f"GitHub answered {error.status}"
        except OSError as error:
            # A dropped connection or a timeout (requests' errors are OSErrors).
            ambiguous = type(error).__name__
        else:
            return settle(db, idempotency_key, answer_of(issue))
        # The request may have made the issue: read back before saying anything else.
        try:
            issue = find(repository, idempotency_key)
        except (GithubException, OSError):
            issue = None
        if issue is not None:
            return settle(db, idempotency_key, answer_of(issue))
        raise unknown(db, idempotency_key, ambiguous)
    finally:
        db.close()


if __name__ == "__main__":
    mcp.run()
