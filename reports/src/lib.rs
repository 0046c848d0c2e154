//! replaylab reports: a matrix run as release-gate evidence.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod model;

pub use model::{
    Lane, Mark, MarkKind, MatrixResult, RowFailure, RowSummary, RunResult, ScenarioSummary, Timeline,
    Verdict, Violation, WorldParameters, SCHEMA_VERSION,
};
