"""A payments MCP server as most people write it, on Stripe's official Python SDK.

One tool, `create_payment_intent`, creates and confirms a PaymentIntent and returns it. It
trusts the SDK: `max_network_retries` makes the SDK resend a request whose connection failed,
under an idempotency key the SDK generates for that request. That key lives in this process's
memory: a new tool call (the agent's retry) or a restarted process sends a new one, and Stripe
charges again. It is here to fail, so that the failures can be read: see README.md.
"""

import os

import stripe
from mcp.server.mcpserver import MCPServer

stripe.api_key = os.environ["STRIPE_API_KEY"]
stripe.api_base = os.environ.get("STRIPE_API_BASE", stripe.api_base)
# The SDK's own retries, each request under a key it generates.
stripe.max_network_retries = 2

mcp = MCPServer("payments-naive")


@mcp.tool()
def create_payment_intent(amount: int, currency: str, customer: str) -> dict:
    """Charge a customer: create a PaymentIntent for `amount` (in the currency's smallest
    unit) and confirm it with the customer's card."""
    intent = stripe.PaymentIntent.create(
        amount=amount,
        currency=currency,
        customer=customer,
        payment_method="pm_card_visa",
        confirm=True,
    )
    return {"id": intent.id, "status": intent.status, "amount": intent.amount, "currency": intent.currency}


if __name__ == "__main__":
    mcp.run()
