//! What travels between the agent and a worker: tool calls, outcomes, operation references,
//! queue envelopes and webhook events.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// Longest tenant, environment, workflow id, step id, actor or call id accepted, in characters.
pub const MAX_ID_CHARS: usize = 255;

/// One tool call as the model (through the agent runtime) proposes it.
///
/// `arguments` keeps the exact JSON text the agent sent, so that an executor can be judged on
/// how it canonicalises (key order, whitespace and omitted defaults are visible).
/// `call_id`, `trace_id` and `attempt` are transport fields: they change between deliveries
/// of the same operation and are never part of its identity.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The tenant the call acts for.
    pub tenant: String,
    /// `production`, `staging`, ...
    pub environment: String,
    /// The workflow run.
    pub workflow_id: String,
    /// The logical step inside the run.
    pub step_id: String,
    /// Tool name, e.g. `tickets.create`.
    pub tool: String,
    /// Tool contract version, e.g. `2026-08-18`.
    pub tool_version: String,
    /// The arguments, as the exact JSON text received.
    pub arguments: Box<RawValue>,
    /// Who asks (checked by the authorizer).
    pub actor: String,
    /// The model's tool-call id: new on every model turn, never an operation identity.
    pub call_id: String,
    /// Tracing id (transport).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Delivery attempt as counted by the sender (transport).
    #[serde(default)]
    pub attempt: u32,
}

impl ToolCall {
    /// The operation this call belongs to.
    pub fn operation(&self) -> OperationRef {
        OperationRef {
            tenant: self.tenant.clone(),
            environment: self.environment.clone(),
            workflow_id: self.workflow_id.clone(),
            step_id: self.step_id.clone(),
            actor: self.actor.clone(),
        }
    }
}

/// Names an operation by its workflow context, for polling and reconciliation. The executor
/// derives the operation key from it exactly as it does for a call.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationRef {
    /// Tenant.
    pub tenant: String,
    /// Environment.
    pub environment: String,
    /// Workflow run.
    pub workflow_id: String,
    /// Step inside the run.
    pub step_id: String,
    /// Who asks.
    pub actor: String,
}

impl OperationRef {
    /// `tenant/environment/workflow_id/step_id`: the harness's own name for the operation,
    /// with `%` and `/` inside each part escaped (see [`operation_path`]).
    pub fn path(&self) -> String {
        operation_path(&self.tenant, &self.environment, &self.workflow_id, &self.step_id)
    }
}

/// The harness's name of an operation: `tenant/environment/workflow_id/step_id`, each part with
/// `%` written `%25` and `/` written `%2F`. Distinct operations always have distinct names,
/// whatever their parts hold (`prod` + `x/w` is `prod/x%2Fw`, `prod/x` + `w` is `prod%2Fx/w`),
/// and a name without `%` or `/` in its parts reads as the parts joined.
pub fn operation_path(tenant: &str, environment: &str, workflow_id: &str, step_id: &str) -> String {
    [tenant, environment, workflow_id, step_id]
        .map(|part| part.replace('%', "%25").replace('/', "%2F"))
        .join("/")
}

/// The outcome label returned to the agent.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeStatus {
    /// This executor performed the effect and recorded the result.
    Applied,
    /// The operation was already applied; the stored result, no new effect.
    Replayed,
    /// Another worker owns the claim, or a job is still running: poll or wait.
    InFlight,
    /// Validation, authorization, precondition or fingerprint mismatch.
    Rejected,
    /// The effect may have happened; reconcile before retrying.
    Unknown,
    /// The key is past retention (a tombstone remains): a new reviewed operation is needed.
    Expired,
}

impl OutcomeStatus {
    /// `applied` or `replayed`: the outcome claims the effect exists.
    pub fn claims_success(self) -> bool {
        matches!(self, OutcomeStatus::Applied | OutcomeStatus::Replayed)
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeStatus::Applied => "applied",
            OutcomeStatus::Replayed => "replayed",
            OutcomeStatus::InFlight => "in_flight",
            OutcomeStatus::Rejected => "rejected",
            OutcomeStatus::Unknown => "unknown",
            OutcomeStatus::Expired => "expired",
        }
    }
}

/// Why a call was rejected.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReasonCode {
    /// The call is malformed: ids, arguments, unknown tool or version.
    InvalidRequest,
    /// The key exists with a different request fingerprint.
    IdempotencyKeyReusedWithDifferentRequest,
    /// The key exists under another tool version whose effect differs.
    ToolVersionChanged,
    /// The actor may not do this (now).
    Unauthorized,
    /// The tool needs an approval the call does not carry.
    ApprovalRequired,
    /// A version precondition failed (the target changed since the caller read it).
    PreconditionFailed,
    /// The downstream refused the request for good (4xx).
    DownstreamRejected,
}

impl ReasonCode {
    /// The snake_case name (as serialised): `unauthorized`, `precondition_failed`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::InvalidRequest => "invalid_request",
            ReasonCode::IdempotencyKeyReusedWithDifferentRequest => {
                "idempotency_key_reused_with_different_request"
            }
            ReasonCode::ToolVersionChanged => "tool_version_changed",
            ReasonCode::Unauthorized => "unauthorized",
            ReasonCode::ApprovalRequired => "approval_required",
            ReasonCode::PreconditionFailed => "precondition_failed",
            ReasonCode::DownstreamRejected => "downstream_rejected",
        }
    }
}

/// What the agent may do next.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NextAction {
    /// Nothing: the outcome is final.
    None,
    /// Poll the operation later.
    Poll,
    /// Reconcile against the system of record before anything else.
    Reconcile,
    /// Ask a human for approval.
    AskForApproval,
    /// Look at the existing operation (mismatch, version change).
    InspectOperation,
}

impl NextAction {
    /// The snake_case name (as serialised): `none`, `poll`, `reconcile`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            NextAction::None => "none",
            NextAction::Poll => "poll",
            NextAction::Reconcile => "reconcile",
            NextAction::AskForApproval => "ask_for_approval",
            NextAction::InspectOperation => "inspect_operation",
        }
    }
}

/// What a worker answers to a call, a poll or a reconciliation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// The label.
    pub status: OutcomeStatus,
    /// Why, when `rejected`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ReasonCode>,
    /// A sentence for humans; never request bodies or secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The operation key the executor derived (absent when the call was invalid before that).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
    /// The downstream's reference for the effect (`ticket_7`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect_reference: Option<String>,
    /// The safe business result (no bodies, no secrets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Whether repeating the same call unchanged is harmless.
    pub safe_to_repeat: bool,
    /// What to do next.
    pub next_action: NextAction,
    /// When to poll or retry, for `in_flight`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u32>,
}

impl Outcome {
    /// An outcome with `status` and nothing else; `safe_to_repeat` and `next_action` follow
    /// from the status and can be changed after.
    pub fn new(status: OutcomeStatus) -> Self {
        let (safe_to_repeat, next_action) = match status {
            OutcomeStatus::Applied | OutcomeStatus::Replayed => (true, NextAction::None),
            OutcomeStatus::InFlight => (true, NextAction::Poll),
            OutcomeStatus::Rejected => (false, NextAction::None),
            OutcomeStatus::Unknown => (false, NextAction::Reconcile),
            OutcomeStatus::Expired => (false, NextAction::InspectOperation),
        };
        Self {
            status,
            reason: None,
            message: None,
            operation_key: None,
            effect_reference: None,
            result: None,
            safe_to_repeat,
            next_action,
            retry_after_seconds: None,
        }
    }

    /// A `rejected` outcome with `reason` and `message`.
    pub fn rejected(reason: ReasonCode, message: impl Into<String>) -> Self {
        let mut outcome = Self::new(OutcomeStatus::Rejected);
        outcome.reason = Some(reason);
        outcome.message = Some(message.into());
        if matches!(
            reason,
            ReasonCode::IdempotencyKeyReusedWithDifferentRequest | ReasonCode::ToolVersionChanged
        ) {
            outcome.next_action = NextAction::InspectOperation;
        }
        if reason == ReasonCode::ApprovalRequired {
            outcome.next_action = NextAction::AskForApproval;
        }
        outcome
    }
}

/// A unit of asynchronous work, written to the outbox by an executor that accepted a queued
/// tool call, and delivered (at least once) to a consumer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// Unique per envelope written (not per delivery).
    pub envelope_id: String,
    /// The tenant.
    pub tenant: String,
    /// The operation key the executor derived: the consumer claims this record.
    pub operation_key: String,
    /// Tool name.
    pub tool: String,
    /// Whatever the consumer needs, in the executor's own format.
    pub payload: Value,
}

/// What a consumer says about one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Consumed {
    /// Done (or already done): remove the envelope from the queue.
    Ack,
    /// Not now (another worker owns it, the outcome is unknown): deliver again later.
    Retry,
}

/// A webhook delivery from the downstream: the raw body, parsed by the executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEvent {
    /// The body as received.
    pub body: Vec<u8>,
}

/// What a webhook receiver did with one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookAck {
    /// A new event: the operation moved on.
    Processed,
    /// This event id was seen before; nothing done.
    DuplicateEvent,
    /// A new event id for an operation that had already moved on; nothing done.
    AlreadySettled,
    /// The event names no operation this executor knows.
    Unmatched,
    /// The body could not be read.
    Invalid,
}

#[cfg(test)]
mod tests {
    #[test]
    fn operation_paths_are_distinct_for_distinct_operations() {
        let parts = [
            ["acme", "prod", "x/w", "s"],
            ["acme", "prod/x", "w", "s"],
            ["acme%2F", "p", "w", "s"],
            ["acme/", "p", "w", "s"],
            ["acme%", "2F", "w", "s"],
            ["acme", "%", "w", "s"],
        ];
        let paths: std::collections::BTreeSet<String> =
            parts.iter().map(|[t, e, w, s]| operation_path(t, e, w, s)).collect();
        assert_eq!(paths.len(), parts.len(), "{paths:?}");
        assert_eq!(operation_path("acme", "prod", "run_1", "step"), "acme/prod/run_1/step");
    }

    use super::*;

    fn serialised<T: Serialize>(value: T) -> String {
        serde_json::to_value(value).expect("serialises").as_str().expect("a string").to_owned()
    }

    #[test]
    fn the_names_people_read_are_the_serialised_ones() {
        use OutcomeStatus as S;
        for status in [S::Applied, S::Replayed, S::InFlight, S::Rejected, S::Unknown, S::Expired] {
            assert_eq!(status.as_str(), serialised(status));
        }
        use ReasonCode as R;
        let reasons = [
            R::InvalidRequest,
            R::IdempotencyKeyReusedWithDifferentRequest,
            R::ToolVersionChanged,
            R::Unauthorized,
            R::ApprovalRequired,
            R::PreconditionFailed,
            R::DownstreamRejected,
        ];
        for reason in reasons {
            assert_eq!(reason.as_str(), serialised(reason));
        }
        use NextAction as N;
        for action in [N::None, N::Poll, N::Reconcile, N::AskForApproval, N::InspectOperation] {
            assert_eq!(action.as_str(), serialised(action));
        }
    }
}
