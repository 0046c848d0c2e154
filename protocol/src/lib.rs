//! The tool-call protocol and the executor plug-in interface.
//!
//! An *executor* sits between an AI agent and a side-effecting tool. replaylab tests any
//! executor that implements [`Executor`]: the harness starts one per simulated worker through
//! an [`ExecutorFactory`], handing it a [`WorkerEnv`] with everything that does I/O (the
//! downstream HTTP client, the clock, the authorizer, the outbox queue, a store gate that
//! charges simulated time, randomness). An executor that does all its I/O through the
//! environment runs unchanged inside the deterministic simulation and for real.
//!
//! The agent speaks to a worker in [`ToolCall`]s and gets [`Outcome`]s back; it polls and
//! reconciles operations by their workflow context ([`OperationRef`]). Tools are described by
//! versioned [`ToolContract`]s; [`ContractSet::builtin`] ships the five the matrix uses.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod call;
mod capabilities;
mod contract;
mod env;
pub mod mcp;

pub use call::{
    operation_path, Consumed, Envelope, NextAction, OperationRef, Outcome, OutcomeStatus, ReasonCode,
    ToolCall, WebhookAck, WebhookEvent, MAX_ID_CHARS,
};
pub use capabilities::{ExecutorCapabilities, Needs};
pub use contract::{
    check_identifier, ArgumentType, ContractError, ContractSet, DownstreamCapabilities, EffectClass,
    Execution, Fingerprint, LateArrivalPolicy, ToolContract, CANONICALIZATION_VERSION,
};
pub use env::{
    AuthDecision, AuthRequest, Authorizer, Background, DownstreamClient, Entropy, Executor, ExecutorFactory,
    LocalBoxFuture, Outbox, OutboxError, ReconciliationEntry, Reconciliations, StoreGate, WorkerEnv,
};
