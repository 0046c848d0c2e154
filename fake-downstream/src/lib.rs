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
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod config;
mod content;
mod faults;
mod ledger;
mod routes;
mod service;

pub use config::{
    DownstreamConfig, IdempotencyMode, Service, ServiceConfig, WebhookConfig, MAX_WEBHOOK_REPEATS,
};
pub use content::{content_digest, content_fields, request_content};
pub use faults::{FaultAction, FaultRule, FaultRuleId, InstalledRule, RuleMatch, Times};
pub use ledger::{Disposition, Effect, EffectKind, RequestRecord, VersionChange, WebhookDelivery};
pub use service::{digest_of, Downstream, DownstreamError, Job, Observer, Ticket};
pub use wire::{Clock, SystemClock};
