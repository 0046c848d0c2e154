//! replaylab's harness: the simulated world, the oracles, the scenario runner and the
//! `replaylab` command.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod cli;
pub mod exit;
