//! replaylab reports: a matrix run as release-gate evidence.
//!
//! One [`MatrixResult`] renders to four files, each a pure function of the result (and of
//! [`RenderOptions`], which only carries the optional `SOURCE_DATE_EPOCH` time stamp):
//!
//! - `matrix.json` ([`render_json`]): the canonical record; its JSON Schema is
//!   [`matrix_schema`], checked in at `reports/schema/matrix.schema.json`;
//! - `matrix.md` ([`render_markdown`]): the rows C1..C10 and F1..F9, the scenarios, the
//!   failures in detail (also for `$GITHUB_STEP_SUMMARY`, see [`append_step_summary`]);
//! - `junit.xml` ([`render_junit`]): one test case per scenario (its file and line for CI
//!   annotations), the rows as suite properties, a test case of its own for a row no scenario
//!   decides; valid against the Jenkins `junit-10.xsd` but for `file` and `line`;
//! - `report.html` ([`render_html`]): one self-contained page with a timeline per scenario.
//!
//! Under GitHub Actions, [`matrix_annotations`] gives one `::error` workflow command per failing
//! scenario (its file and line for a user's scenario file).
//!
//! Every text report names the SHA-256 of the `matrix.json` bytes ([`matrix_sha256`]), so
//! a reader can tie it to the canonical record. [`write_reports`] writes the chosen formats.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod annotations;
mod evidence;
mod format;
mod hints;
mod html;
mod json;
mod junit;
mod markdown;
mod model;
mod require;

pub use annotations::{
    annotation_line, error_annotation, github_actions, matrix_annotations, GITHUB_ACTIONS_VARIABLE,
};
pub use evidence::{black_box_text, replaylab_text, rows_applied_text, seed_list};
pub use format::{
    append_matrix_step_summary, append_step_summary, render, write_reports, write_reports_with, Format,
    RenderOptions, ReportError, STEP_SUMMARY_LIMIT_BYTES, STEP_SUMMARY_VARIABLE,
};
pub use hints::hint_lines;
pub use html::render_html;
pub use json::{matrix_schema, matrix_sha256, render_json};
pub use junit::render_junit;
pub use markdown::{render_markdown, render_markdown_capped, MARKDOWN_CAP_BYTES};
pub use model::{
    Answer, Band, BlackBox, FailedRun, Hints, Lane, LedgerEntry, Mark, MarkKind, MatrixResult,
    OperationRecord, RealTime, RequestKind, RowSummary, RunDigest, RunResult, ScenarioSummary, Shard,
    Timeline, ToolHints, Verdict, Violation, WorldParameters, SCHEMA_VERSION,
};
pub use require::{unmet_requirements, SEED_ROWS};
