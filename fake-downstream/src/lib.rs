//! The fake downstream: a ticket, payment, message and delayed-job service whose **effect
//! ledger** is the ground truth of a replaylab run.
//!
//! One axum router ([`Downstream::router`]), served inside a turmoil simulation or on a real
//! port with [`wire::serve`]. Fault rules ([`FaultRule`]) make it hold a request before
//! commit, commit and then lose, delay, fail or garble the answer, deterministically.
//! Per service, idempotency keys are honoured or ignored and receipt lookup is on or off
//! ([`DownstreamConfig`]), because real downstreams differ.
//!
//! The ledger records every business effect where it happens; a replayed answer is not an
//! effect. Nothing here knows about executors.
//!
//! **Layout: one core, several dialects.** `service.rs` is the core (state, ledger, journal,
//! fault rules, pause points, idempotency records, receipts, jobs, the request pipeline) and
//! imports no dialect; `http.rs` is the HTTP plumbing dialects share; each dialect is one
//! module over them: `native.rs` (replaylab's own JSON API), `stripe.rs` (the Stripe twin),
//! `github.rs` (the GitHub twin) and `slack.rs` (the Slack twin).
//! `routes.rs` assembles their routers with `admin.rs`; `facts.rs` is what the harness and the
//! judge read of a request in the core's terms; `paths.rs` is the leaf table of business paths
//! that fault rules are checked against. Imports run one way: routes, facts -> dialects ->
//! http -> core -> faults, ledger, config, paths.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod admin;
mod config;
mod content;
mod facts;
mod faults;
mod github;
mod http;
mod ledger;
mod native;
mod paths;
mod routes;
mod service;
mod slack;
mod stripe;

pub use config::{
    DownstreamConfig, IdempotencyMode, Service, ServiceConfig, WebhookConfig, MAX_WEBHOOK_REPEATS,
};
pub use content::{content_digest, content_fields, digest_of};
pub use facts::{
    answer_references, dialect, native_route, request_content, request_effect, request_tenant, route_effect,
    DialectFacts, KeyPolicy, RequestEffect, DIALECTS,
};
pub use faults::{path_selects, FaultAction, FaultRule, FaultRuleId, InstalledRule, RuleMatch, Times};
pub use ledger::{Disposition, Effect, EffectKind, RequestRecord, VersionChange, WebhookDelivery};
pub use service::{Downstream, DownstreamError, Job, Observer, Ticket};
pub use wire::{Clock, SystemClock};
