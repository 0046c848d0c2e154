//! The business paths every dialect serves, in axum's syntax (`{id}` is any one segment): a
//! leaf table, so that fault rules (`faults.rs`) can be checked against the routes without
//! importing a dialect. Each dialect's router is checked to serve exactly its list.

/// The native dialect (`native.rs`).
pub(crate) const NATIVE: [&str; 7] = [
    "/v1/tickets",
    "/v1/tickets/{id}",
    "/v1/charges",
    "/v1/messages",
    "/v1/jobs",
    "/v1/jobs/{id}",
    "/v1/receipts/{key}",
];

/// The Stripe twin (`stripe.rs`; `tests/downstream/stripe.rs` checks that it serves these).
/// `/v1/charges` is both dialects': a request with Stripe's `Authorization: Bearer sk_...` is
/// Stripe's, any other the native one's.
pub(crate) const STRIPE: [&str; 7] = [
    "/v1/payment_intents",
    "/v1/payment_intents/search",
    "/v1/payment_intents/{id}",
    "/v1/charges",
    "/v1/charges/{id}",
    "/v1/refunds",
    "/v1/refunds/{id}",
];

/// The GitHub twin (`github.rs`; `tests/downstream/github.rs` checks that it serves these).
pub(crate) const GITHUB: [&str; 5] = [
    "/repos/{owner}/{repo}",
    "/repos/{owner}/{repo}/issues",
    "/repos/{owner}/{repo}/issues/{number}",
    "/repos/{owner}/{repo}/issues/{number}/comments",
    "/search/issues",
];

/// The Slack twin (`slack.rs`; `tests/downstream/slack.rs` checks that it serves these).
pub(crate) const SLACK: [&str; 3] = ["/api/chat.postMessage", "/api/conversations.history", "/api/auth.test"];

/// Every business path, each once.
pub(crate) fn business_paths() -> impl Iterator<Item = &'static str> {
    let stripe_only = STRIPE.into_iter().filter(|path| !NATIVE.contains(path));
    NATIVE.into_iter().chain(stripe_only).chain(GITHUB).chain(SLACK)
}
