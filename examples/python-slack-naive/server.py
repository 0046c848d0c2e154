"""A chat MCP server as most people write it, on Slack's official Python SDK, slack_sdk.

One tool, `post_message(channel, text)`, posts a message and returns where it went. It trusts
the SDK: `WebClient`'s default retry handler sends a request again after a connection error.
Slack's `chat.postMessage` has no idempotency key, so a resend after the message was posted is
a second message; so is the agent's retry of a call whose answer was lost, and a restarted
process's. It is here to fail, so that the failures can be read: see docs/vendors.md, section 7.
"""

import os

from mcp.server.mcpserver import MCPServer
from slack_sdk import WebClient

slack = WebClient(
    token=os.environ["SLACK_BOT_TOKEN"],
    base_url=os.environ.get("SLACK_API_URL", "https://slack.com/api/"),
)

mcp = MCPServer("chat-naive")


@mcp.tool()
def post_message(channel: str, text: str) -> dict:
    """Post a message to a channel."""
    response = slack.chat_postMessage(channel=channel, text=text)
    return {"channel": response["channel"], "ts": response["ts"]}


if __name__ == "__main__":
    mcp.run()
