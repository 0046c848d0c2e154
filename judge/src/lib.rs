//! The judge: what a run's verdict is read from, and how.
//!
//! It reads a finished run and knows no world: the same history, whether a turmoil
//! simulation or real processes made it, gets the same verdict.
//!
//! - [`history`]: the one ordered record of a run (calls, answers, downstream exchanges,
//!   faults, crashes, effects), and its digest.
//! - [`attribution`]: which operation each downstream request and effect belongs to, from
//!   what the harness saw, never from what the executor says.
//! - [`oracles`]: the invariants (O1..O14) judged against the history and the downstream's
//!   ledger, the ground truth.
//! - [`operations`] and [`timeline`]: the per-operation view and the timeline the reports draw.
//! - [`verdict`]: the result types (they live in `reports`, which renders them).
//! - [`text`]: quoting and durations for messages.
//!
//! Invariants: nothing here runs an executor, a simulation or a process, or reads a clock of
//! its own (the history is timed by the clock its world gives it). It may import `protocol`,
//! `fake-downstream` (the ledger's types), `reports` and `wire`'s `Clock`; never a world, the
//! runner or the command.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

pub mod attribution;
pub mod history;
pub mod operations;
pub mod oracles;
pub mod text;
pub mod timeline;
pub mod verdict;
