//! Target `fingerprint`: argument objects through the reference's fingerprint and validation.

#[allow(clippy::wildcard_imports)]
use super::*;

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

/// Arguments for `tool`, mostly valid.
pub(crate) fn argument_value(gen: &mut Gen, tool: &str) -> V {
    let names: &[&str] = match tool {
        "tickets.create" => &["queue", "subject", "body", "trace_id"],
        "tickets.set_status" => &["ticket_id", "status", "expected_version", "trace_id"],
        "payments.charge" => &["customer", "amount_minor", "currency", "trace_id"],
        "messages.send" => &["to", "body", "trace_id"],
        _ => &["job_type", "input", "trace_id"],
    };
    let mut fields = Vec::new();
    for &name in names {
        if gen.chance(if name == "trace_id" { 30 } else { 90 }) {
            fields.push((name.to_owned(), argument_of(gen, name)));
        }
    }
    if gen.chance(5) {
        fields.push((any_string(gen), odd_value(gen)));
    }
    shuffle(gen, &mut fields);
    let mut value = V::Obj(fields);
    if gen.chance(20) {
        value.perturb(gen);
    }
    value
}

pub(crate) fn argument_of(gen: &mut Gen, name: &str) -> V {
    match name {
        "amount_minor" | "expected_version" => {
            if gen.chance(70) {
                V::n(gen.below(100_000))
            } else {
                V::n(gen.pick(NUMBERS))
            }
        }
        "input" => nested_value(gen, 3),
        "currency" => V::s(gen.word(&["EUR", "USD", "eur", "EURO", "€"])),
        "status" => V::s(gen.word(&["open", "pending", "closed", "reopened"])),
        "ticket_id" => V::s(gen.word(&["ticket_1", "${ticket_of:a}", "ticket_2"])),
        _ => {
            if gen.chance(60) {
                let words =
                    ["cus_42", "support", "Refund request", "Welcome aboard.", "invoice_report", "t-1"];
                V::s(gen.word(&words))
            } else {
                V::Str(any_string(gen))
            }
        }
    }
}

/// A JSON object with nested objects, arrays, floats, unicode keys.
pub(crate) fn nested_value(gen: &mut Gen, depth: u32) -> V {
    let mut fields = Vec::new();
    for _ in 0..gen.below(5) {
        let key = if gen.chance(70) {
            (*gen.pick(&["month", "a", "b", "é", "𝄞", "", "A", "aa", "\u{0}", "10", "9", "_"])).to_owned()
        } else {
            any_string(gen)
        };
        let value = match gen.below(7) {
            0 if depth > 0 => nested_value(gen, depth - 1),
            1 => V::Arr((0..gen.below(3)).map(|_| odd_value(gen)).collect()),
            2 => V::n(gen.pick(&[
                "1",
                "1.0",
                "1e2",
                "100",
                "-0",
                "0.1",
                "1e-7",
                "5e-324",
                "1.7976931348623157e308",
                "123456789012345678",
            ])),
            _ => odd_value(gen),
        };
        fields.push((key, value));
    }
    V::Obj(fields)
}

pub(crate) fn shuffle<T>(gen: &mut Gen, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = gen.below(i + 1);
        items.swap(i, j);
    }
}

/// `value` as JSON text with its object keys in a random order, random whitespace between
/// tokens, and some characters of its strings written as `\u` escapes: the same JSON value.
pub(crate) fn rewrite(gen: &mut Gen, value: &Value) -> String {
    let mut out = String::new();
    write_scrambled(gen, value, &mut out);
    out
}

pub(crate) fn space(gen: &mut Gen, out: &mut String) {
    if gen.chance(40) {
        for _ in 0..gen.count(3) {
            out.push(*gen.pick(&[' ', '\t', '\n', '\r']));
        }
    }
}

pub(crate) fn write_scrambled(gen: &mut Gen, value: &Value, out: &mut String) {
    space(gen, out);
    match value {
        Value::Object(fields) => {
            let mut entries: Vec<(&String, &Value)> = fields.iter().collect();
            shuffle(gen, &mut entries);
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                space(gen, out);
                write_escaped(gen, key, out);
                space(gen, out);
                out.push(':');
                write_scrambled(gen, value, out);
            }
            space(gen, out);
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_scrambled(gen, item, out);
            }
            space(gen, out);
            out.push(']');
        }
        Value::String(text) => write_escaped(gen, text, out),
        other => out.push_str(&other.to_string()),
    }
    space(gen, out);
}

pub(crate) fn write_escaped(gen: &mut Gen, text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        let must = matches!(c, '"' | '\\') || u32::from(c) < 0x20;
        if must || gen.chance(10) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else if c == '/' && gen.chance(50) {
            out.push_str("\\/");
        } else {
            out.push(c);
        }
    }
    out.push('"');
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
