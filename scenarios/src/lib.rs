//! replaylab scenarios: declarative TOML files, one per matrix scenario, and their parser.
//!
//! A scenario names the matrix rows it covers (`C1`..`C10`, `F1`..`F9`, or `prose`), sets up
//! the world (workers, downstream capabilities, queue and webhook behaviour, lease and
//! retention), and lists steps: calls, faults, pauses, crashes, clock advances, revocations,
//! human edits, polls and expectations. Expectations add to the oracles the harness always
//! checks; they never replace them.
//!
//! The 34 scenarios of the matrix (S01..S19 from the source document, S20..S34 the project's own) ship with the crate ([`builtin`]); users add their own files
//! ([`Scenario::from_file`]). Errors name the file, the line and the field.
//! This crate knows nothing of the simulator.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

mod model;
mod parse;

pub use model::{
    ticket_placeholders, CallStep, DownstreamSpec, ExpectOutcome, Moment, OperationSpec, PausePoint,
    QueueSpec, RequestFilter, Row, Scenario, ServiceSpec, Step, StepKind, TimingSpec, WebhookSpec, WorkerRef,
    DEFAULT_SETTLE, DEFAULT_TOOL_VERSION, TICKET_OF_PLACEHOLDER,
};
pub use parse::{ScenarioError, MAX_WORKERS};

/// The `source` of every built-in scenario starts with this.
pub const BUILTIN_SOURCE_PREFIX: &str = "scenarios/matrix/";

/// The built-in scenario files as written (comments, inline tables and all), by file name.
pub fn builtin_texts() -> &'static [(&'static str, &'static str)] {
    BUILTIN
}

/// The scenarios of the matrix (S01..S34), in order.
pub fn builtin() -> Vec<Scenario> {
    BUILTIN
        .iter()
        .map(|(name, text)| {
            Scenario::from_toml(text, &format!("{BUILTIN_SOURCE_PREFIX}{name}"))
                .unwrap_or_else(|error| panic!("built-in scenario {name} is invalid: {error}"))
        })
        .collect()
}

/// The built-in scenario with this id (`S02`), if there is one.
pub fn builtin_by_id(id: &str) -> Option<Scenario> {
    builtin().into_iter().find(|scenario| scenario.id == id)
}

macro_rules! builtin_files {
    ($($name:literal),* $(,)?) => {
        const BUILTIN: &[(&str, &str)] = &[$(($name, include_str!(concat!("../matrix/", $name)))),*];
    };
}

builtin_files!(
    "S01_duplicate_same_key.toml",
    "S02_lost_response_after_commit.toml",
    "S03_crash_after_effect_before_record.toml",
    "S04_crash_after_claim.toml",
    "S05_concurrent_claim.toml",
    "S06_same_key_changed_request.toml",
    "S07_new_key_same_arguments.toml",
    "S08_authorization_revoked.toml",
    "S09_key_after_retention.toml",
    "S10_delayed_job.toml",
    "S11_malformed_result.toml",
    "S12_timeout_is_not_success.toml",
    "S13_tenant_scope.toml",
    "S14_canonical_equivalence.toml",
    "S15_tool_version_change.toml",
    "S16_queue_redelivery.toml",
    "S17_webhook_redelivery.toml",
    "S18_stale_write_precondition.toml",
    "S19_lease_expiry_owner_alive.toml",
    "S20_same_key_one_field_changed.toml",
    "S21_revoked_after_applied.toml",
    "S22_lost_answer_keys_only.toml",
    "S23_long_job_polled.toml",
    "S24_version_upgrade_replays.toml",
    "S25_no_way_to_find_out.toml",
    "S26_crash_after_job_settled.toml",
    "S27_late_answer_settles_unknown.toml",
    "S28_poll_abandoned_claims.toml",
    "S29_notice_not_confirmed.toml",
    "S30_lookups_down.toml",
    "S31_retry_before_consumer.toml",
    "S32_key_survives_a_crash.toml",
    "S33_read_back_after_loss.toml",
    "S34_message_read_back_after_loss.toml",
);
