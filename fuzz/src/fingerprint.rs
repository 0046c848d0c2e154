//! Target `fingerprint`: argument objects through the reference's fingerprint and validation.

use std::collections::BTreeMap;

use protocol::{ArgumentType, ContractError, ContractSet, Fingerprint, ToolCall, ToolContract};
use scenarios::StepKind;
use serde_json::Value;

use crate::gen::*;
use crate::guard::*;
use crate::model::*;

/// One call: the contract it names and the call as the worker receives it (JSON).
#[derive(Debug, Clone)]
pub(crate) struct CallInput {
    call: String,
}

pub(crate) struct FingerprintFuzz {
    subject: FingerprintSubject,
    contracts: ContractSet,
    tools: Vec<(String, String)>,
    /// Argument texts the built-in scenarios send, per tool and version.
    examples: BTreeMap<(String, String), Vec<Vec<u8>>>,
    fingerprinted: u64,
    material_checks: u64,
}

impl FingerprintFuzz {
    pub(crate) fn new(subject: FingerprintSubject) -> Self {
        let contracts = ContractSet::builtin();
        let tools: Vec<(String, String)> =
            contracts.iter().map(|contract| (contract.name.clone(), contract.version.clone())).collect();
        let mut examples: BTreeMap<(String, String), Vec<Vec<u8>>> = BTreeMap::new();
        for scenario in scenarios::builtin() {
            for step in &scenario.steps {
                let calls = match &step.kind {
                    StepKind::Call(call) => vec![call.clone()],
                    StepKind::Concurrent(calls) => calls.clone(),
                    _ => continue,
                };
                for call in calls {
                    examples.entry((call.tool, call.version)).or_default().push(call.arguments.into_bytes());
                }
            }
        }
        Self { subject, contracts, tools, examples, fingerprinted: 0, material_checks: 0 }
    }
}

/// A call to `tool` at `version` with `arguments` (any text), as JSON.
pub(crate) fn call_json(tenant: &str, tool: &str, version: &str, arguments: &str) -> String {
    format!(
        r#"{{"tenant":{},"environment":"production","workflow_id":"run_1","step_id":"step_1","tool":{},"tool_version":{},"arguments":{arguments},"actor":"agent","call_id":"call_1"}}"#,
        json_string(tenant),
        json_string(tool),
        json_string(version)
    )
}

/// FNV-1a: a stable seed from an input, so that checking it draws the same rewrites.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// A valid value for `name` of type `kind` that differs from `old`.
pub(crate) fn changed_value(kind: ArgumentType, old: &Value) -> Value {
    match kind {
        ArgumentType::String => {
            let text = old.as_str().unwrap_or("a");
            let mut chars: Vec<char> = text.chars().collect();
            if chars.is_empty() {
                return Value::String("a".into());
            }
            chars[0] = if chars[0] == 'a' { 'b' } else { 'a' };
            Value::String(chars.into_iter().collect())
        }
        ArgumentType::Integer => match (old.as_i64(), old.as_u64()) {
            (Some(n), _) if n < i64::MAX => Value::from(n + 1),
            (_, Some(n)) if n > 0 => Value::from(n - 1),
            _ => Value::from(0),
        },
        ArgumentType::Object => {
            let mut fields = old.as_object().cloned().unwrap_or_default();
            let next = fields.len();
            fields.insert(format!("fuzz_changed_{next}"), Value::from(1));
            Value::Object(fields)
        }
    }
}

impl FingerprintFuzz {
    pub(crate) fn fingerprint(
        &self,
        contract: &ToolContract,
        call: &ToolCall,
    ) -> Result<Fingerprint, ContractError> {
        (self.subject.fingerprint)(contract, call)
    }

    /// The same call with other argument text.
    pub(crate) fn with_arguments(call: &ToolCall, arguments: &str) -> Option<ToolCall> {
        let mut copy = call.clone();
        copy.arguments = serde_json::value::RawValue::from_string(arguments.to_owned()).ok()?;
        Some(copy)
    }
}

impl Fuzz for FingerprintFuzz {
    type Input = CallInput;

    fn generate(&mut self, gen: &mut Gen, _n: u64) -> CallInput {
        let (tool, version) = self.tools[gen.below(self.tools.len())].clone();
        let tenant =
            if gen.chance(95) { (*gen.pick(&["acme", "globex"])).to_owned() } else { any_string(gen) };
        let arguments = match (gen.below(10), self.examples.get(&(tool.clone(), version.clone()))) {
            (0..=2, Some(examples)) => {
                let base = &examples[gen.below(examples.len())];
                String::from_utf8_lossy(&mutate(gen, base, examples)).into_owned()
            }
            (3, _) => {
                let text = argument_value(gen, &tool).json();
                String::from_utf8_lossy(&mutate(gen, text.as_bytes(), &[])).into_owned()
            }
            _ => argument_value(gen, &tool).json(),
        };
        let (tool, version) = if gen.chance(3) {
            (tool, (*gen.pick(&["1999-01-01", "", "2026-08-18"])).to_owned())
        } else {
            (tool, version)
        };
        CallInput { call: call_json(&tenant, &tool, &version, &arguments) }
    }

    fn check(&mut self, input: &CallInput) -> Checked {
        // What the worker's tool-call endpoint does first: read the call.
        let Ok(call) = serde_json::from_str::<ToolCall>(&input.call) else { return Checked::Fine };
        // Then what `prepare` does: identifiers, the contract, the fingerprint, the arguments.
        if call.check_identifiers().is_err() {
            return Checked::Fine;
        }
        let Some(contract) = self.contracts.get(&call.tool, &call.tool_version).cloned() else {
            return Checked::Fine;
        };
        let first = self.fingerprint(&contract, &call);
        let validated = contract.validated_arguments(&call);
        let (fingerprint, arguments) = match (first, validated) {
            (Ok(fingerprint), Ok(arguments)) => (fingerprint, arguments),
            (Err(_), Err(_)) => return Checked::Fine,
            (Ok(_), Err(error)) => {
                return broken(
                    "validation",
                    "fingerprinted arguments the contract refuses",
                    format!("the fingerprint accepted arguments validation refuses: {error}"),
                )
            }
            (Err(error), Ok(_)) => {
                return broken(
                    "validation",
                    "refused valid arguments",
                    format!("the fingerprint refused arguments validation accepts: {error}"),
                )
            }
        };
        self.fingerprinted += 1;
        let sent: Value = match serde_json::from_str(call.arguments.get()) {
            Ok(value) => value,
            Err(error) => {
                return broken("validation", "accepted arguments that are not JSON", error.to_string())
            }
        };
        // The same value, written otherwise.
        let mut gen = Gen::for_input(fnv(input.call.as_bytes()), Target::Fingerprint, u64::MAX);
        for _ in 0..2 {
            let text = rewrite(&mut gen, &sent);
            let Some(again) = Self::with_arguments(&call, &text) else {
                return broken("canonical", "rewritten text is not JSON", format!("rewrote to {text}"));
            };
            match self.fingerprint(&contract, &again) {
                Ok(other) if other == fingerprint => {}
                Ok(other) => {
                    return broken(
                        "canonical",
                        format!("{}: key order or whitespace changed the fingerprint", contract.name),
                        format!("{} became {other} when the arguments were rewritten as {text}", fingerprint),
                    )
                }
                Err(error) => {
                    return broken(
                        "canonical",
                        format!("{}: rewritten arguments refused", contract.name),
                        format!("the arguments rewritten as {text} were refused: {error}"),
                    )
                }
            }
        }
        // Each material argument changed: a new fingerprint. Each ignored one: the same.
        let Value::Object(sent_fields) = &sent else { return Checked::Fine };
        let names: Vec<(String, bool)> = contract
            .material
            .iter()
            .map(|name| (name.clone(), true))
            .chain(contract.ignored.iter().map(|name| (name.clone(), false)))
            .collect();
        for (name, material) in names {
            let Some(kind) = contract.arguments.get(&name).copied() else { continue };
            let old = arguments.get(&name).cloned().unwrap_or(Value::Null);
            if !material && old.is_null() {
                continue;
            }
            let mut fields = sent_fields.clone();
            let new = changed_value(kind, &old);
            // RFC 8785 writes numbers as IEEE doubles: whole numbers past 2^53 lose digits.
            let beyond_doubles = [&old, &new].into_iter().any(|value| {
                value
                    .as_u64()
                    .map(|n| n > 1 << 53)
                    .or_else(|| value.as_i64().map(|n| n.unsigned_abs() > 1 << 53))
                    == Some(true)
            });
            fields.insert(name.clone(), new);
            let text = Value::Object(fields).to_string();
            let Some(changed) = Self::with_arguments(&call, &text) else { continue };
            self.material_checks += 1;
            match (self.fingerprint(&contract, &changed), material) {
                (Ok(other), true) if other == fingerprint => {
                    return broken(
                        "material",
                        if beyond_doubles {
                            format!("{}: `{name}` changed beyond 2^53, same fingerprint", contract.name)
                        } else {
                            format!("{}: `{name}` changed, same fingerprint", contract.name)
                        },
                        format!("material argument `{name}` changed ({text}) but the fingerprint stayed {fingerprint}"),
                    )
                }
                (Ok(other), false) if other != fingerprint => {
                    return broken(
                        "material",
                        format!("{}: ignored `{name}` changed the fingerprint", contract.name),
                        format!("ignored argument `{name}` changed ({text}) and the fingerprint became {other}"),
                    )
                }
                (Ok(_), _) => {}
                (Err(error), _) => {
                    return broken(
                        "material",
                        format!("{}: `{name}` changed to a valid value, refused", contract.name),
                        format!("the arguments {text} were refused: {error}"),
                    )
                }
            }
        }
        Checked::Fine
    }

    fn bytes(&self, input: &CallInput) -> Vec<u8> {
        input.call.clone().into_bytes()
    }

    fn notes(&self) -> String {
        format!("{} fingerprinted, {} argument changes checked", self.fingerprinted, self.material_checks)
    }
}
