//! replaylab's harness: the simulated world, the oracles, the scenario runner and the
//! `replaylab` command.
//!
//! - [`world`] builds a turmoil simulation with the fake downstream, workers running the
//!   executor under test, and the agent.
//! - [`runner`] plays one scenario with one seed and judges it with [`oracles`].
//! - [`matrix`] runs every scenario for many seeds and rolls verdicts up to the rows of the
//!   source document's two tables.
//!
//! # Testing your own executor
//!
//! Everything a user needs is in [`prelude`]: wrap your [`protocol::ExecutorFactory`] in an
//! [`executors::ExecutorSpec`] (with the [`protocol::ExecutorCapabilities`] it supports),
//! then either give your binary the whole command ([`cli::main_with`]), or call
//! [`matrix::run_and_write`], [`explore_cli::run`] or, in a proptest, [`explore::check_case`].
//!
//! Build with `--cfg tokio_unstable` (in `.cargo/config.toml`: `[build] rustflags = ["--cfg",
//! "tokio_unstable"]`, and the same as `rustdocflags` for doctests): turmoil seeds tokio's
//! scheduler only then, and without it the same seed would not give the same history. The
//! simulated world (`world-sim`), and so the harness, does not compile without it.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

/// What a user testing their own executor needs, in one `use harness::prelude::*;`.
pub mod prelude {
    pub use crate::cli::main_with;
    pub use crate::executors::{ExecutorSpec, MakeFactory};
    pub use crate::explore::{case_strategy, check_case, Case, CaseResult, CaseTool, ServiceChoice};
    pub use crate::explore_cli::ExploreConfig;
    pub use crate::matrix::MatrixConfig;
    pub use crate::verdict::{MatrixResult, RunResult, Verdict, Violation};
    pub use protocol::{
        Consumed, Envelope, Executor, ExecutorCapabilities, ExecutorFactory, LocalBoxFuture, OperationRef,
        Outcome, ToolCall, WebhookAck, WebhookEvent, WorkerEnv,
    };
}

// The judge, under the paths it had before it was a crate of its own.
pub use judge::{attribution, history, operations, oracles, text, timeline, verdict};
// The worlds, under the paths they had before they were crates of their own.
pub use world::clock;
#[cfg(feature = "process")]
pub use world_process as black_box;
// The runner and what it drives, under the paths they had before they were a crate of their own.
pub use ::runner;
pub use runner::{executors, exit, log, matrix};
// Exploration, the same way.
pub use ::explore;
pub use explore::session as explore_cli;
// The fuzzer, the same way.
pub use ::fuzz;
// The reference as an MCP server, an executor (`executor-mcp`), under its old paths.
#[cfg(feature = "process")]
pub use executor_mcp::{real_env, serve};
/// The state every world keeps and the simulated world (`world` and `world-sim`).
pub mod world {
    pub use world::*;
    pub use world_sim::{
        build, builder, parameters, SimWorld, EPOCH_SECONDS, MAX_LATENCY, MAX_SIMULATED, MIN_LATENCY,
        TCP_CAPACITY, TICK,
    };
}

pub mod bench;
pub mod cli;
pub mod init;
pub mod merge;
pub mod mutants;
pub mod verify;
