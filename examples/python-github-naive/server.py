"""An issue-tracker MCP server as most people write it, on PyGithub.

One tool, `create_issue(repo, title, body)`, opens an issue in one of the organisation's
repositories and returns it. It trusts the SDK: PyGithub's default `GithubRetry` resends a
request whose connection failed or that got a 5xx, POSTs included. GitHub has no idempotency
key, so a resend after the issue was made is a second issue; so is the agent's retry of a call
whose answer was lost, and a restarted process's. It is here to fail, so that the failures can
be read: see docs/vendors.md, section 6.
"""

import os

from github import Auth, Github
from mcp.server.mcpserver import MCPServer

github = Github(
    auth=Auth.Token(os.environ["GITHUB_TOKEN"]),
    base_url=os.environ.get("GITHUB_API_URL", "https://api.github.com"),
)
OWNER = os.environ.get("GITHUB_OWNER", "acme-support")

mcp = MCPServer("issues-naive")


@mcp.tool()
def create_issue(repo: str, title: str, body: str) -> dict:
    """Open an issue in one of the organisation's repositories."""
    issue = github.get_repo(f"{OWNER}/{repo}").create_issue(title=title, body=body)
    return {"number": issue.number, "html_url": issue.html_url, "state": issue.state, "title": issue.title}


if __name__ == "__main__":
    mcp.run()
