//! replaylab's harness: the simulated world, the oracles, the scenario runner and the
//! `replaylab` command.
//!
//! - [`world`] builds a turmoil simulation with the fake downstream, workers running the
//!   executor under test, and the agent.
//! - [`runner`] plays one scenario with one seed and judges it with [`oracles`].
//! - [`matrix`] runs every scenario for many seeds and rolls verdicts up to the rows of the
//!   source document's two tables.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod agent;
pub mod attribution;
pub mod bench;
pub mod cli;
pub mod clock;
pub mod executors;
pub mod exit;
pub mod explore;
pub mod explore_cli;
pub mod fuzz;
pub mod history;
pub mod matrix;
pub mod mutants;
pub mod oracles;
pub mod runner;
pub mod timeline;
pub mod verdict;
mod worker;
pub mod world;
