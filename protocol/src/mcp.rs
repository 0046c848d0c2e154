//! replaylab's conventions for an executor that is an MCP server (version
//! [`CONVENTIONS_VERSION`]; `docs/mcp.md` says them in prose, and
//! `protocol/schema/mcp.schema.json`, generated from these types, is the contract a test
//! holds the examples to).
//!
//! - The agent calls the tool by its contract name (`tickets.create`) with the business
//!   arguments, and names the operation in the request's `_meta` under [`CALL_META`]
//!   ([`CallMeta`]): tenant, environment, workflow, step, actor, tool version, the model's
//!   call id, and the operation's idempotency key. Optionally the key is also passed as an
//!   argument ([`KeyPlacement`]), the way tools written for SEP-3182 or commerce protocols
//!   expect it.
//! - The executor answers with `structuredContent` holding an [`Outcome`] (the label, the
//!   effect reference, the business result, the next action). An answer without it is still
//!   judged: `isError: false` claims success, `isError: true` claims nothing.
//! - The executor describes itself in the resource [`MANIFEST_URI`] ([`Manifest`]): what it
//!   supports (else: the tools `tools/list` names, nothing more) and its timing.
//! - Optional tools [`POLL_TOOL`] and [`RECONCILE_TOOL`] answer for an operation named in
//!   `_meta` as a call is.
//! - The process learns where the downstream, the authorizer, its state directory and its
//!   timing are from the environment ([`env`]).

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::call::Outcome;
use crate::capabilities::ExecutorCapabilities;

/// The version of these conventions; it is in every [`CallMeta`] and [`Manifest`].
pub const CONVENTIONS_VERSION: u32 = 1;
/// The `_meta` key of a `tools/call` request under which the agent names the operation
/// (a reverse-DNS prefix, as MCP asks of `_meta` keys).
pub const CALL_META: &str = "dev.replaylab/call";
/// The resource an executor describes itself in.
pub const MANIFEST_URI: &str = "replaylab://executor";
/// The tool that answers a poll of an operation (optional).
pub const POLL_TOOL: &str = "replaylab.poll";
/// The tool that answers a reconciliation of an operation (optional).
pub const RECONCILE_TOOL: &str = "replaylab.reconcile";
/// The tool a queue consumer serves: the harness hands it one delivery of a queued envelope
/// ([`ConsumeArguments`]) and it answers [`ConsumeAnswer`] (declared by
/// `capabilities.queue_consumer`).
pub const CONSUME_TOOL: &str = "replaylab.consume";
/// Where on [`env::WEBHOOK_LISTEN`] a server receives webhooks unless its manifest names
/// another path (`capabilities.webhook_path`).
pub const DEFAULT_WEBHOOK_PATH: &str = "/webhooks";

/// The arguments of [`CONSUME_TOOL`]: one delivery of a queued envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumeArguments {
    /// The envelope, as a server's outbox wrote it ([`env::QUEUE_URL`]).
    pub envelope: crate::Envelope,
    /// Which delivery of it this is, from 1: the queue delivers at least once.
    #[schemars(range(min = 1))]
    pub attempt: u32,
}

/// The `structuredContent` of a [`CONSUME_TOOL`] answer. `ack` removes the envelope from the
/// queue; `retry` (and any other answer, an error, no answer) leaves it there, delivered again
/// later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumeAnswer {
    /// What the consumer did with the delivery.
    pub consumed: crate::Consumed,
}

/// The JSON body a webhook receiver answers with (any `2xx`): what it did with the event. Any
/// other answer (another status, no answer) makes the downstream deliver the event again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookAnswer {
    /// What the receiver did.
    pub ack: crate::WebhookAck,
}

/// What the agent says about the operation a `tools/call` (or a poll, or a reconcile)
/// belongs to, in `_meta` under [`CALL_META`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallMeta {
    /// [`CONVENTIONS_VERSION`].
    #[schemars(range(min = 1, max = 1))]
    pub version: u32,
    /// The tenant the call acts for.
    pub tenant: String,
    /// `production`, `staging`, ...
    pub environment: String,
    /// The workflow run.
    pub workflow_id: String,
    /// The logical step inside the run.
    pub step_id: String,
    /// Who asks (the authorizer decides per actor).
    pub actor: String,
    /// The tool contract's version (`2026-08-18`).
    pub tool_version: String,
    /// The model's tool-call id: new on every model turn, never an operation's identity.
    pub call_id: String,
    /// Delivery attempt as the agent counts it, from 1 (transport only).
    #[schemars(range(min = 1))]
    pub attempt: u32,
    /// The operation's idempotency key, the same on every delivery and retry of one
    /// operation: `tenant/environment/workflow_id/step_id`, with `%` and `/` inside each part
    /// written `%25` and `%2F`, so that distinct operations never share a key.
    pub idempotency_key: String,
}

impl CallMeta {
    /// The conventions' idempotency key of an operation: `tenant/environment/workflow/step`,
    /// each part escaped ([`crate::operation_path`]).
    pub fn key_of(tenant: &str, environment: &str, workflow_id: &str, step_id: &str) -> String {
        crate::call::operation_path(tenant, environment, workflow_id, step_id)
    }
}

/// Where, besides `_meta`, the agent puts the idempotency key of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyPlacement {
    /// Only in `_meta` ([`CallMeta::idempotency_key`]).
    Meta,
    /// Also as this argument (`idempotency_key`, or SEP-3182's `idempotencyKey`).
    Argument(String),
}

/// What an executor says of itself, as the JSON text of the resource [`MANIFEST_URI`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`CONVENTIONS_VERSION`].
    #[schemars(range(min = 1, max = 1))]
    pub version: u32,
    /// What it supports.
    pub capabilities: ManifestCapabilities,
    /// The durations it works with, when it cannot take the harness's ([`env`]): the harness
    /// waits accordingly. Absent: it follows the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
}

/// [`ExecutorCapabilities`] as a manifest states them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ManifestCapabilities {
    /// The contract tools it serves; absent: every tool its `tools/list` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<BTreeSet<String>>,
    /// It consumes queued envelopes.
    #[serde(default)]
    pub queue_consumer: bool,
    /// It settles delayed jobs.
    #[serde(default)]
    pub delayed_jobs: bool,
    /// It receives completion webhooks: `POST`s to `http://{WEBHOOK_LISTEN}{webhook_path}`
    /// ([`env::WEBHOOK_LISTEN`]).
    #[serde(default)]
    pub webhooks: bool,
    /// Where it receives webhooks on [`env::WEBHOOK_LISTEN`]: a path from `/`; absent:
    /// [`DEFAULT_WEBHOOK_PATH`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^/[!-~]*$"))]
    pub webhook_path: Option<String>,
    /// It serves [`RECONCILE_TOOL`].
    #[serde(default)]
    pub reconcile: bool,
    /// The versions it serves of the tools named here (`{"tickets.create": ["2026-08-18"]}`);
    /// a tool not named is served at every version the harness sends. A scenario that calls
    /// another version is `not applicable`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, BTreeSet<String>>,
}

impl ManifestCapabilities {
    /// The capabilities, given the tools `tools/list` names (the contract tools, used when the
    /// manifest names none) and whether it lists [`POLL_TOOL`].
    pub fn to_capabilities(&self, listed: &BTreeSet<String>, polls: bool) -> ExecutorCapabilities {
        let mut capabilities =
            ExecutorCapabilities::tools(self.tools.clone().unwrap_or_else(|| listed.clone()))
                .with_queue_consumer(self.queue_consumer)
                .with_delayed_jobs(self.delayed_jobs)
                .with_webhooks(self.webhooks)
                .with_reconcile(self.reconcile)
                .with_poll(polls);
        capabilities.versions = self.versions.clone();
        capabilities
    }
}

/// The durations an executor works with, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    /// How long a claim's lease lasts before another worker may take it over.
    #[schemars(range(min = 1))]
    pub lease_ms: u64,
    /// How long a key is kept (after it, a tombstone answers `expired`).
    #[schemars(range(min = 1))]
    pub retention_ms: u64,
    /// How long it waits for the downstream before the answer is ambiguous.
    #[schemars(range(min = 1))]
    pub downstream_timeout_ms: u64,
}

/// The environment a worker process starts with.
pub mod env {
    /// The worker's name (`worker-1`).
    pub const WORKER: &str = "REPLAYLAB_WORKER";
    /// How many times this worker was started before (0 first).
    pub const INCARNATION: &str = "REPLAYLAB_INCARNATION";
    /// A directory for the worker's durable state; it survives the process's crashes and is
    /// shared by the run's workers (`{state}` in the command).
    pub const STATE_DIR: &str = "REPLAYLAB_STATE_DIR";
    /// The business API's base URL (`http://127.0.0.1:PORT`).
    pub const DOWNSTREAM_URL: &str = "REPLAYLAB_DOWNSTREAM_URL";
    /// The authorizer: `GET {URL}?actor=..&tool=..` answers `{"allowed": bool}`.
    pub const AUTHZ_URL: &str = "REPLAYLAB_AUTHZ_URL";
    /// The lease to use, in milliseconds.
    pub const LEASE_MS: &str = "REPLAYLAB_LEASE_MS";
    /// The retention to use, in milliseconds.
    pub const RETENTION_MS: &str = "REPLAYLAB_RETENTION_MS";
    /// The downstream timeout to use, in milliseconds.
    pub const DOWNSTREAM_TIMEOUT_MS: &str = "REPLAYLAB_DOWNSTREAM_TIMEOUT_MS";
    /// For the streamable HTTP transport: the address to serve MCP on, `127.0.0.1:PORT` (the
    /// port is `{port}` in the command); MCP is served at [`super::HTTP_PATH`] there.
    pub const MCP_LISTEN: &str = "REPLAYLAB_MCP_LISTEN";
    /// For an executor that receives webhooks: the address to receive them on,
    /// `127.0.0.1:PORT` (`{webhook_port}` in the command is the same port).
    pub const WEBHOOK_LISTEN: &str = "REPLAYLAB_WEBHOOK_LISTEN";
    /// The queue between outboxes and consumers: `POST` a [`crate::Envelope`] as JSON to
    /// enqueue it (answered `202`); the harness delivers it at least once to a worker's
    /// [`super::CONSUME_TOOL`].
    pub const QUEUE_URL: &str = "REPLAYLAB_QUEUE_URL";
    /// What the downstream's services do in this run, as JSON ([`super::Services`]): whether
    /// each honours idempotency keys and keeps receipts. A real tool's author knows this of
    /// their API; the fake downstream changes it from scenario to scenario.
    pub const SERVICES: &str = "REPLAYLAB_SERVICES";
    /// The operators' queue: `POST` a [`crate::ReconciliationEntry`] as JSON to hand an
    /// operation nothing can settle over to people (answered `202`).
    pub const OPERATORS_URL: &str = "REPLAYLAB_OPERATORS_URL";

    /// Every variable, in the order `docs/mcp.md` lists them.
    pub const ALL: [&str; 13] = [
        WORKER,
        INCARNATION,
        STATE_DIR,
        DOWNSTREAM_URL,
        AUTHZ_URL,
        LEASE_MS,
        RETENTION_MS,
        DOWNSTREAM_TIMEOUT_MS,
        MCP_LISTEN,
        WEBHOOK_LISTEN,
        SERVICES,
        OPERATORS_URL,
        QUEUE_URL,
    ];
}

/// Where a server on the streamable HTTP transport serves MCP: `http://{MCP_LISTEN}/mcp`.
pub const HTTP_PATH: &str = "/mcp";

/// What one downstream service does, as [`env::SERVICES`] says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceTraits {
    /// A repeated request with the same `Idempotency-Key` is answered from the first one.
    pub honours_keys: bool,
    /// `GET /v1/receipts/{key}` says what was made with a key.
    pub receipts: bool,
}

/// Every service's traits, by service name (`tickets`, `charges`, `messages`, `jobs`).
pub type Services = BTreeMap<String, ServiceTraits>;

/// The JSON Schema of the conventions' documents: the `_meta` of a call ([`CallMeta`]), the
/// `structuredContent` of an answer ([`Outcome`]) and the manifest ([`Manifest`]), under
/// `$defs`, checked in at `protocol/schema/mcp.schema.json`.
pub fn conventions_schema() -> String {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let call_meta = generator.subschema_for::<CallMeta>();
    let outcome = generator.subschema_for::<Outcome>();
    let manifest = generator.subschema_for::<Manifest>();
    let services = generator.subschema_for::<Services>();
    let consume_arguments = generator.subschema_for::<ConsumeArguments>();
    let consume_answer = generator.subschema_for::<ConsumeAnswer>();
    let webhook_answer = generator.subschema_for::<WebhookAnswer>();
    let mut defs = serde_json::Map::new();
    for (name, schema) in generator.take_definitions(true) {
        defs.insert(name, schema);
    }
    let document = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "replaylab MCP conventions",
        "description": format!(
            "Version {CONVENTIONS_VERSION}. `call_meta`: a tools/call request's `_meta[\"{CALL_META}\"]`; \
             `outcome`: an answer's `structuredContent`; `manifest`: the text of the resource {MANIFEST_URI}; \
             `services`: the value of {}; `consume_arguments` and `consume_answer`: a {CONSUME_TOOL} call's \
             arguments and its answer's `structuredContent`; `webhook_answer`: a webhook receiver's answer body.",
            env::SERVICES
        ),
        "properties": {
            "call_meta": call_meta,
            "outcome": outcome,
            "manifest": manifest,
            "services": services,
            "consume_arguments": consume_arguments,
            "consume_answer": consume_answer,
            "webhook_answer": webhook_answer,
        },
        "additionalProperties": false,
        "$defs": defs,
    });
    let mut text = serde_json::to_string_pretty(&document).expect("a schema serialises");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_without_tools_serves_what_tools_list_names() {
        let manifest: Manifest =
            serde_json::from_str(r#"{"version": 1, "capabilities": {"reconcile": true}}"#)
                .expect("a manifest");
        let listed: BTreeSet<String> = ["tickets.create".to_owned()].into();
        let capabilities = manifest.capabilities.to_capabilities(&listed, true);
        assert_eq!(capabilities, ExecutorCapabilities::tools(["tickets.create"]).with_reconcile(true));
        let without_poll = manifest.capabilities.to_capabilities(&listed, false);
        assert!(!without_poll.poll);
        let versioned: Manifest = serde_json::from_str(
            r#"{"version": 1, "capabilities": {"versions": {"tickets.create": ["2026-08-18"]}}}"#,
        )
        .expect("a manifest naming versions");
        let capabilities = versioned.capabilities.to_capabilities(&listed, true);
        assert_eq!(capabilities.versions["tickets.create"], ["2026-08-18".to_owned()].into());
        assert!(
            serde_json::from_str::<Manifest>(r#"{"version": 1, "capabilities": {}, "extra": 1}"#).is_err()
        );
    }

    #[test]
    fn the_key_names_the_operation_not_the_call() {
        assert_eq!(
            CallMeta::key_of("acme", "production", "run_827", "record_issue"),
            "acme/production/run_827/record_issue"
        );
        // Where a `/` sits inside the parts changes the key.
        assert_ne!(
            CallMeta::key_of("acme", "prod", "x/w", "s"),
            CallMeta::key_of("acme", "prod/x", "w", "s")
        );
        assert_eq!(CallMeta::key_of("a%2F", "p", "w", "s"), "a%252F/p/w/s");
        assert_eq!(CallMeta::key_of("a/", "p", "w", "s"), "a%2F/p/w/s");
    }
}
