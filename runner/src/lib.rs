//! The runner: drives a [`world::World`] through a scenario and hands what it recorded to the
//! judge. One runner over both worlds: the simulated one (`world-sim`) for an executor in
//! process, the process world (`world-process`) for an MCP server in any language.
//!
//! - [`run`] and [`run_logged`]: one scenario, one seed (or repeat), one executor → a
//!   [`RunRecord`]: steps played, premises checked, faults healed, the world settled, every
//!   operation polled, the oracles and the expectations judged.
//! - [`executors`]: the executors a command can name (the reference, the mutant zoo, a user's).
//! - [`matrix`]: scenarios × seeds on threads, summarised per scenario and rolled up to rows.
//! - [`log`]: an executor's `tracing` events captured on the world's clock.
//! - [`exit`]: the exit codes every command returns (0, 1, 2).
//! - [`version`]: replaylab's version and the commit it was built from.
//!
//! Invariants: a verdict comes from the judge over the history and the ledger, never from
//! what the executor says of itself; a run whose premise did not hold is `unknown`. It may
//! import the worlds, the judge and the crates below them; never exploration or the command.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod evidence;
pub mod executors;
pub mod exit;
pub mod log;
pub mod matrix;
pub mod progress;
mod run;
pub mod timing;
pub mod version;

pub use run::*;
