//! Verdicts and results: the types live in the `reports` crate (the lowest crate that needs
//! them); the harness fills them.

pub use reports::{FailedRun, MatrixResult, RowSummary, RunResult, ScenarioSummary, Verdict, Violation};
