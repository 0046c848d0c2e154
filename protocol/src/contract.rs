//! Tool contracts: what a tool's effect is, what identifies it, and how retries behave.
//!
//! A contract is a versioned file (TOML or JSON) kept next to the tool. The built-in set
//! ([`ContractSet::builtin`]) describes the fake downstream's five tools.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::call::{ToolCall, MAX_ID_CHARS};

/// The canonicalisation a [`Fingerprint`] is computed with: RFC 8785 (JCS) over the material
/// fields after defaults are filled and ignored fields removed. Bump it when that changes.
pub const CANONICALIZATION_VERSION: &str = "jcs-v1";

/// Longest string argument accepted, in characters.
const MAX_ARGUMENT_CHARS: usize = 10_000;

/// The tool's effect class, which decides the retry design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectClass {
    /// No effect.
    Read,
    /// Repeating the same target and value changes nothing (an absolute update).
    NaturalIdempotentUpdate,
    /// A create or command that needs a key, a fingerprint, a claim and a receipt.
    KeyedCreate,
    /// An increment or append: must be redesigned as a keyed command.
    IncrementAppend,
    /// Irreversible or externally visible (a message, a deletion).
    Irreversible,
}

/// How the tool's effect is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// The executor calls the downstream while the agent waits.
    Direct,
    /// The executor writes an envelope to the outbox and answers `in_flight`; a consumer acts.
    Queued,
    /// The downstream accepts a job that completes later; poll (or a webhook) settles it.
    DelayedJob,
}

/// What happens when a key arrives after its retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LateArrivalPolicy {
    /// A tombstone remembers key, fingerprint and effect reference: answer `expired`.
    TombstoneExpired,
    /// Query the downstream's receipts before deciding.
    ReconcileFirst,
}

/// What the downstream behind the tool can do. The harness keeps it true to the simulated
/// downstream of each run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DownstreamCapabilities {
    /// The fake downstream's service (`tickets`, `charges`, `messages`, `jobs`).
    pub service: String,
    /// A repeated `Idempotency-Key` replays instead of acting again.
    pub honours_key: bool,
    /// `GET /v1/receipts/{key}` answers for this service.
    pub receipt_lookup: bool,
}

/// The type of one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgumentType {
    /// A JSON string.
    String,
    /// A JSON integer (no fraction, no exponent).
    Integer,
    /// A JSON object.
    Object,
}

/// A tool contract. Load one with [`ToolContract::from_toml`] or take the built-ins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolContract {
    /// Tool name, e.g. `tickets.create`.
    pub name: String,
    /// Contract version, e.g. `2026-08-18`.
    pub version: String,
    /// What it does.
    pub purpose: String,
    /// Effect class.
    pub effect_class: EffectClass,
    /// How it is carried out.
    pub execution: Execution,
    /// Which workflow fields make the operation key (always tenant, environment, workflow
    /// id and step id, in that order; never the call id or the arguments).
    pub key_scope: Vec<String>,
    /// Every argument the tool accepts, with its type.
    pub arguments: BTreeMap<String, ArgumentType>,
    /// Arguments that must be present (after defaults are filled).
    #[serde(default)]
    pub required: Vec<String>,
    /// Values for omitted arguments.
    #[serde(default)]
    pub defaults: Map<String, Value>,
    /// Arguments that define the effect; they, the tool, its version and the tenant make the
    /// fingerprint.
    pub material: Vec<String>,
    /// Arguments that never count (trace ids and the like).
    #[serde(default)]
    pub ignored: Vec<String>,
    /// The downstream.
    pub downstream: DownstreamCapabilities,
    /// How long a claim is owned before another worker may recover it.
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// How long the full record is kept; a tombstone remains after.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// What a key arriving after retention gets.
    pub late_arrival: LateArrivalPolicy,
    /// Whether a human approval must accompany the call (argument `approval_id`).
    #[serde(default)]
    pub approval_required: bool,
    /// The fields of the downstream's answer that every success's `result` carries, with the
    /// values the downstream committed: the safe business result (never subjects, bodies or
    /// recipients). A job's status changes after it is accepted, so a job names only its id.
    #[serde(default)]
    pub result: Vec<String>,
    /// For delayed jobs: send a completion notice (a message to this address) once the job
    /// succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_notice_to: Option<String>,
    /// Whether a newer version of this tool may replay a record made by this version.
    #[serde(default)]
    pub replay_across_versions: bool,
}

/// Why a contract file or a call's arguments were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The contract file does not parse or is inconsistent.
    #[error("invalid contract: {0}")]
    InvalidContract(String),
    /// The call's arguments do not fit the contract.
    #[error("{0}")]
    InvalidArguments(String),
}

/// A request fingerprint, tagged with how it was computed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Fingerprint {
    /// `sha256`.
    pub algorithm: String,
    /// [`CANONICALIZATION_VERSION`].
    pub canonicalization: String,
    /// Lower-case hex digest.
    pub digest: String,
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.canonicalization, self.algorithm, self.digest)
    }
}

impl Fingerprint {
    /// SHA-256 over the RFC 8785 canonical form of `value`.
    pub fn of(value: &Value) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let canonical = serde_json_canonicalizer::to_vec(value).expect("a JSON value canonicalises");
        let mut digest = String::with_capacity(64);
        for byte in Sha256::digest(&canonical) {
            digest.push(char::from(HEX[usize::from(byte >> 4)]));
            digest.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
        Self { algorithm: "sha256".into(), canonicalization: CANONICALIZATION_VERSION.into(), digest }
    }

    /// Parses [`Fingerprint`]'s `Display` form.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, ':');
        let (canonicalization, algorithm, digest) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Self {
            algorithm: algorithm.into(),
            canonicalization: canonicalization.into(),
            digest: digest.into(),
        })
    }
}

impl ToolContract {
    /// Parses a contract from TOML and checks it is consistent.
    pub fn from_toml(text: &str) -> Result<Self, ContractError> {
        let contract: ToolContract =
            toml::from_str(text).map_err(|error| ContractError::InvalidContract(error.to_string()))?;
        contract.check()?;
        Ok(contract)
    }

    /// Parses a contract from JSON and checks it is consistent.
    pub fn from_json(text: &str) -> Result<Self, ContractError> {
        let contract: ToolContract =
            serde_json::from_str(text).map_err(|error| ContractError::InvalidContract(error.to_string()))?;
        contract.check()?;
        Ok(contract)
    }

    fn check(&self) -> Result<(), ContractError> {
        let invalid =
            |message: String| Err(ContractError::InvalidContract(format!("{}: {message}", self.name)));
        if self.key_scope != ["tenant", "environment", "workflow_id", "step_id"] {
            return invalid("key_scope must be [tenant, environment, workflow_id, step_id]".into());
        }
        for field in
            self.required.iter().chain(&self.material).chain(&self.ignored).chain(self.defaults.keys())
        {
            if !self.arguments.contains_key(field) {
                return invalid(format!("`{field}` is not a declared argument"));
            }
        }
        if let Some(field) = self.material.iter().find(|field| self.ignored.contains(field)) {
            return invalid(format!("`{field}` cannot be both material and ignored"));
        }
        if self.lease.is_zero() || self.retention <= self.lease {
            return invalid("retention must be longer than a non-zero lease".into());
        }
        Ok(())
    }

    /// The operation key for a call or an operation reference: tenant, environment, workflow
    /// id and step id, each percent-escaped so that the separator cannot be forged.
    pub fn operation_key(tenant: &str, environment: &str, workflow_id: &str, step_id: &str) -> String {
        [tenant, environment, workflow_id, step_id].map(escape_key_part).join(":")
    }

    /// Checks `call`'s arguments against the contract and returns them with defaults filled,
    /// in canonical key order.
    pub fn validated_arguments(&self, call: &ToolCall) -> Result<Map<String, Value>, ContractError> {
        let invalid = |message: String| Err(ContractError::InvalidArguments(message));
        let parsed: Value = match serde_json::from_str(call.arguments.get()) {
            Ok(value) => value,
            Err(error) => return invalid(format!("arguments are not JSON: {error}")),
        };
        let Value::Object(mut arguments) = parsed else {
            return invalid("arguments must be a JSON object".into());
        };
        for (name, value) in &self.defaults {
            arguments.entry(name.clone()).or_insert_with(|| value.clone());
        }
        for (name, value) in &arguments {
            let Some(expected) = self.arguments.get(name) else {
                return invalid(format!("unknown argument `{name}` for {}", self.name));
            };
            let fits = match expected {
                ArgumentType::String => value
                    .as_str()
                    .is_some_and(|text| !text.is_empty() && text.chars().count() <= MAX_ARGUMENT_CHARS),
                ArgumentType::Integer => value.as_i64().is_some() || value.as_u64().is_some(),
                ArgumentType::Object => value.is_object(),
            };
            if fits && !exact_in_canonical_json(value) {
                return invalid(format!(
                    "argument `{name}` holds a number beyond ±{MAX_EXACT_INTEGER}: canonical JSON (RFC 8785) \
                     writes numbers as doubles, so two such numbers could share one fingerprint"
                ));
            }
            if !fits {
                return invalid(format!(
                    "argument `{name}` must be a {} (non-empty, at most {MAX_ARGUMENT_CHARS} characters for text)",
                    match expected {
                        ArgumentType::String => "string",
                        ArgumentType::Integer => "whole number",
                        ArgumentType::Object => "object",
                    }
                ));
            }
        }
        if let Some(missing) = self.required.iter().find(|name| !arguments.contains_key(*name)) {
            return invalid(format!("argument `{missing}` is required"));
        }
        Ok(arguments)
    }

    /// The material request of a call, ready to canonicalise: tool, version, tenant and the
    /// material arguments after defaults (ignored and transport fields left out).
    pub fn material_request(&self, tenant: &str, arguments: &Map<String, Value>) -> Value {
        let material: Map<String, Value> = self
            .material
            .iter()
            .filter_map(|name| arguments.get(name).map(|value| (name.clone(), value.clone())))
            .collect();
        serde_json::json!({
            "tool": self.name,
            "tool_version": self.version,
            "tenant": tenant,
            "arguments": material,
        })
    }

    /// The call's fingerprint (validates the arguments first).
    pub fn fingerprint(&self, call: &ToolCall) -> Result<Fingerprint, ContractError> {
        let arguments = self.validated_arguments(call)?;
        Ok(Fingerprint::of(&self.material_request(&call.tenant, &arguments)))
    }
}

/// Percent-escapes `%` and `:` so that key parts cannot run into each other.
fn escape_key_part(part: &str) -> String {
    part.replace('%', "%25").replace(':', "%3A")
}

/// Checks an identifier field of a call: non-empty, at most [`MAX_ID_CHARS`], no control
/// characters.
pub fn check_identifier(field: &str, value: &str) -> Result<(), ContractError> {
    if value.is_empty() {
        return Err(ContractError::InvalidArguments(format!("`{field}` must not be empty")));
    }
    if value.chars().count() > MAX_ID_CHARS {
        return Err(ContractError::InvalidArguments(format!(
            "`{field}` is longer than {MAX_ID_CHARS} characters"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(ContractError::InvalidArguments(format!("`{field}` contains control characters")));
    }
    Ok(())
}

impl crate::call::OperationRef {
    /// Checks the identifier fields (tenant, environment, workflow, step, actor) by the same
    /// rules as a [`ToolCall`]'s.
    pub fn check_identifiers(&self) -> Result<(), ContractError> {
        for (field, value) in [
            ("tenant", &self.tenant),
            ("environment", &self.environment),
            ("workflow_id", &self.workflow_id),
            ("step_id", &self.step_id),
            ("actor", &self.actor),
        ] {
            check_identifier(field, value)?;
        }
        Ok(())
    }
}

impl ToolCall {
    /// Checks the identifier fields (tenant, environment, workflow, step, actor, tool,
    /// version, call id).
    pub fn check_identifiers(&self) -> Result<(), ContractError> {
        self.operation().check_identifiers()?;
        for (field, value) in
            [("tool", &self.tool), ("tool_version", &self.tool_version), ("call_id", &self.call_id)]
        {
            check_identifier(field, value)?;
        }
        Ok(())
    }
}

/// The contracts an executor knows, by name and version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContractSet {
    contracts: BTreeMap<(String, String), ToolContract>,
}

const BUILTIN: [&str; 7] = [
    include_str!("../contracts/tickets.create@2026-08-18.toml"),
    include_str!("../contracts/tickets.create@2026-09-01.toml"),
    include_str!("../contracts/tickets.set_status@2026-08-18.toml"),
    include_str!("../contracts/payments.charge@2026-08-18.toml"),
    include_str!("../contracts/payments.charge@2026-10-01.toml"),
    include_str!("../contracts/messages.send@2026-08-18.toml"),
    include_str!("../contracts/jobs.submit@2026-08-18.toml"),
];

/// The largest whole number a double holds exactly (2^53 - 1): canonical JSON (RFC 8785)
/// writes every number as a double, so beyond it two different numbers can look the same.
pub const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// Whether every number in `value` (at any depth) survives canonical JSON unchanged: whole
/// numbers within ±[`MAX_EXACT_INTEGER`]; fractions are left to the canonicaliser.
fn exact_in_canonical_json(value: &Value) -> bool {
    match value {
        Value::Number(number) => {
            number.as_u64().is_none_or(|n| n <= MAX_EXACT_INTEGER)
                && number.as_i64().is_none_or(|n| n.unsigned_abs() <= MAX_EXACT_INTEGER)
        }
        Value::Array(items) => items.iter().all(exact_in_canonical_json),
        Value::Object(fields) => fields.values().all(exact_in_canonical_json),
        Value::Null | Value::Bool(_) | Value::String(_) => true,
    }
}

impl ContractSet {
    /// The shipped contracts: tickets.create (two versions), tickets.set_status,
    /// payments.charge (two versions, the older replayable by the newer), messages.send
    /// (queued) and jobs.submit (delayed job).
    pub fn builtin() -> Self {
        // Parsed once per process: every simulated run starts from a copy.
        static PARSED: std::sync::OnceLock<ContractSet> = std::sync::OnceLock::new();
        PARSED
            .get_or_init(|| {
                let mut set = Self::default();
                for text in BUILTIN {
                    set.insert(ToolContract::from_toml(text).expect("built-in contracts are valid"));
                }
                set
            })
            .clone()
    }

    /// Adds or replaces a contract.
    pub fn insert(&mut self, contract: ToolContract) {
        self.contracts.insert((contract.name.clone(), contract.version.clone()), contract);
    }

    /// The contract for `name` at `version`.
    pub fn get(&self, name: &str, version: &str) -> Option<&ToolContract> {
        self.contracts.get(&(name.to_owned(), version.to_owned()))
    }

    /// Every contract, by name then version.
    pub fn iter(&self) -> impl Iterator<Item = &ToolContract> {
        self.contracts.values()
    }

    /// Sets what the downstream `service` can do, in every contract that uses it.
    pub fn set_capabilities(&mut self, service: &str, honours_key: bool, receipt_lookup: bool) {
        for contract in self.contracts.values_mut().filter(|c| c.downstream.service == service) {
            contract.downstream.honours_key = honours_key;
            contract.downstream.receipt_lookup = receipt_lookup;
        }
    }

    /// Changes every contract's lease and retention (scenarios keep them short).
    pub fn set_timing(&mut self, lease: Duration, retention: Duration) {
        for contract in self.contracts.values_mut() {
            contract.lease = lease;
            contract.retention = retention;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(arguments: &str) -> ToolCall {
        ToolCall {
            tenant: "acme".into(),
            environment: "production".into(),
            workflow_id: "run_827".into(),
            step_id: "record_issue".into(),
            tool: "tickets.create".into(),
            tool_version: "2026-08-18".into(),
            arguments: serde_json::value::RawValue::from_string(arguments.into()).unwrap(),
            actor: "agent-1".into(),
            call_id: "call_1".into(),
            trace_id: None,
            attempt: 0,
        }
    }

    fn tickets() -> ToolContract {
        ContractSet::builtin().get("tickets.create", "2026-08-18").unwrap().clone()
    }

    /// Found by `replaylab fuzz`: 9223372036854775807 and ...806 are one double, so they had
    /// one fingerprint, and a changed charge would have been replayed as the same request.
    #[test]
    fn numbers_a_double_cannot_hold_exactly_are_refused_before_any_fingerprint() {
        let charge = ContractSet::builtin().get("payments.charge", "2026-08-18").unwrap().clone();
        let mut charge_call = call(r#"{"customer":"c","amount_minor":9007199254740991,"currency":"EUR"}"#);
        charge_call.tool = "payments.charge".into();
        assert!(charge.validated_arguments(&charge_call).is_ok(), "2^53 - 1 is exact");
        for amount in ["9007199254740992", "9223372036854775807", "-9007199254740992"] {
            let mut beyond = charge_call.clone();
            beyond.arguments = serde_json::value::RawValue::from_string(format!(
                r#"{{"customer":"c","amount_minor":{amount},"currency":"EUR"}}"#
            ))
            .unwrap();
            let error = charge.validated_arguments(&beyond).unwrap_err().to_string();
            assert!(error.contains("beyond ±9007199254740991"), "{amount}: {error}");
        }
        let jobs = ContractSet::builtin().get("jobs.submit", "2026-08-18").unwrap().clone();
        let mut nested = call(r#"{"job_type":"r","input":{"rows":[1,18446744073709551615]}}"#);
        nested.tool = "jobs.submit".into();
        assert!(jobs.validated_arguments(&nested).is_err(), "nested numbers are checked too");
    }

    #[test]
    fn a_fingerprint_is_the_sha256_of_the_rfc8785_bytes_in_lowercase_hex() {
        // Members out of order, a float, a non-ASCII string: RFC 8785 sorts the members and
        // writes the rest as `{"a":"x","b":[1,2.5,true,null],"c":{"d":"é"}}`, whose SHA-256
        // (`printf '%s' ... | sha256sum`) is below.
        let value = serde_json::json!({"c": {"d": "é"}, "b": [1, 2.50, true, null], "a": "x"});
        let fingerprint = Fingerprint::of(&value);
        assert_eq!(fingerprint.digest, "adf52b4ac96c48633c1e15da44336be73a980cd0eec3a6d038ffba55a86b8fa4");
        assert_eq!(fingerprint.algorithm, "sha256");
    }

    #[test]
    fn equivalent_requests_share_a_fingerprint() {
        let contract = tickets();
        let base =
            contract.fingerprint(&call(r#"{"queue":"support","subject":"Refund","body":"b"}"#)).unwrap();
        let reordered = contract
            .fingerprint(&call("{ \"body\" : \"b\",\n  \"subject\":\"Refund\", \"queue\":\"support\" }"))
            .unwrap();
        let defaulted = contract.fingerprint(&call(r#"{"subject":"Refund","body":"b"}"#)).unwrap();
        let traced =
            contract.fingerprint(&call(r#"{"subject":"Refund","body":"b","trace_id":"t-9"}"#)).unwrap();
        assert_eq!(base, reordered);
        assert_eq!(base, defaulted);
        assert_eq!(base, traced);
        let changed = contract.fingerprint(&call(r#"{"subject":"Refund","body":"c"}"#)).unwrap();
        assert_ne!(base, changed);
        assert_eq!(base.canonicalization, CANONICALIZATION_VERSION);
        assert_eq!(Fingerprint::parse(&base.to_string()), Some(base));
    }

    #[test]
    fn a_new_version_with_a_new_default_changes_the_fingerprint() {
        let set = ContractSet::builtin();
        let old = set.get("tickets.create", "2026-08-18").unwrap();
        let new = set.get("tickets.create", "2026-09-01").unwrap();
        let arguments = r#"{"subject":"Refund","body":"b"}"#;
        assert_ne!(old.fingerprint(&call(arguments)).unwrap(), new.fingerprint(&call(arguments)).unwrap());
    }

    #[test]
    fn bad_arguments_are_refused_with_a_reason() {
        let contract = tickets();
        let check = |arguments: &str, expected: &str| {
            let error = contract.validated_arguments(&call(arguments)).unwrap_err().to_string();
            assert!(error.contains(expected), "{arguments}: {error}");
        };
        check("[1,2]", "must be a JSON object");
        check(r#"{"subject":"s","body":"b","colour":"red"}"#, "unknown argument `colour`");
        check(r#"{"subject":7,"body":"b"}"#, "`subject` must be a string");
        check(r#"{"subject":"","body":"b"}"#, "`subject` must be a string");
        check(r#"{"body":"b"}"#, "`subject` is required");
    }

    #[test]
    fn operation_keys_come_from_workflow_context_and_cannot_be_forged() {
        assert_eq!(
            ToolContract::operation_key("acme", "production", "run_827", "step_03"),
            "acme:production:run_827:step_03"
        );
        assert_ne!(
            ToolContract::operation_key("a:b", "c", "d", "e"),
            ToolContract::operation_key("a", "b:c", "d", "e")
        );
    }

    #[test]
    fn inconsistent_contracts_are_refused() {
        let text =
            BUILTIN[0].replace("material = [\"queue\", \"subject\", \"body\"]", "material = [\"colour\"]");
        let error = ToolContract::from_toml(&text).unwrap_err().to_string();
        assert!(error.contains("`colour` is not a declared argument"), "{error}");
        let error = ToolContract::from_toml("name = 3").unwrap_err().to_string();
        assert!(error.contains("invalid contract"), "{error}");
    }

    #[test]
    fn every_builtin_contract_loads_and_round_trips_through_json() {
        let set = ContractSet::builtin();
        assert_eq!(set.iter().count(), 7);
        for contract in set.iter() {
            let json = serde_json::to_string(contract).unwrap();
            assert_eq!(&ToolContract::from_json(&json).unwrap(), contract);
        }
    }
}
