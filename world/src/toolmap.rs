//! A user's tool map (`replaylab.toml`, `docs/toolmap.md`): the roles the scenarios play
//! (`payments.charge`, `tickets.create`, ...) bound to a black-box server's own tools.
//!
//! A binding says which of the server's tools plays a role, on which dialect's route its
//! effect goes (`stripe POST /v1/payment_intents`), how its arguments are built from the
//! scenario's business arguments (renames, constants, value forms, a value new on every
//! delivery for an argument that is not material), which argument carries the operation's key,
//! and how its answers read as outcomes (where a success names its effect; which tool-error
//! texts mean `unknown`, `in_flight` or `rejected`). The harness then plays every scenario
//! written for the role against the bound tool: fault rules and pause points on the role's
//! native route move to the bound route ([`ToolMap::scenario_for`]), and what the bound
//! dialect cannot do whatever a scenario says makes that scenario `not applicable`
//! ([`ToolMap::lacks`]). The judge is untouched: it reads effects, requests and answers in the
//! core's terms, whatever the dialect.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use fake_downstream::{DialectFacts, EffectKind, FaultRule, IdempotencyMode, KeyPolicy};
use judge::attribution::tool_effect_kind;
use judge::text::quoted;
use protocol::{ContractSet, Outcome, OutcomeStatus, ReasonCode};
use scenarios::{PausePoint, Scenario, StepKind};
use serde_json::{Map, Value};

/// The file's name, looked for in the working directory when `--config` names none.
pub const FILE_NAME: &str = "replaylab.toml";
/// The largest tool map read: a megabyte (a map is a few dozen lines).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A tool map, checked: every role a built-in contract, every route one its dialect serves
/// and that makes the role's effect, every material argument passed.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolMap {
    /// The file it was read from, absolute: reproduce commands name it.
    pub path: PathBuf,
    /// The bindings, by role (the contract's tool name).
    pub roles: BTreeMap<String, Binding>,
    /// How the server reaches each vendor twin a route names: the environment variables the
    /// harness sets on every worker process.
    pub vendors: BTreeMap<String, VendorEnv>,
}

/// One role bound to one of the server's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The role: a built-in contract's tool name (`payments.charge`).
    pub role: String,
    /// The server's tool that plays it (`create_payment_intent`).
    pub tool: String,
    /// The dialect of the route its effect goes to.
    pub dialect: DialectFacts,
    /// The route's method (`POST`).
    pub method: String,
    /// The route's path, as the dialect serves it (`/v1/payment_intents`).
    pub path: String,
    /// The argument that carries the operation's key (`tenant/environment/workflow/step`,
    /// docs/mcp.md section 1), if the tool takes one.
    pub key_argument: Option<String>,
    /// How each of the tool's arguments is built; `None`: the scenario's business arguments
    /// as they are (the contract's names).
    pub arguments: Option<BTreeMap<String, Source>>,
    /// How its answers read.
    pub answers: Answers,
}

/// Where one of the tool's arguments comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A business argument of the scenario's call (after the contract's defaults), in a form.
    From {
        /// The contract's argument (`amount_minor`).
        argument: String,
        /// The form the tool takes it in.
        form: Form,
    },
    /// The same value on every call.
    Value(Value),
    /// A value new on every delivery (the agent's call id): an argument the tool must not
    /// count as material, such as a trace id. A server that fingerprints it refuses a retry.
    PerCall,
}

/// The form of a passed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// As the scenario wrote it.
    AsIs,
    /// Text in lower case (`eur`, as Stripe writes currencies).
    Lower,
    /// Text in upper case.
    Upper,
    /// Written as text (`1200` becomes `"1200"`).
    Text,
    /// Read as a whole number (`"1200"` becomes `1200`).
    Integer,
}

/// How a bound tool's answers read as outcomes (docs/mcp.md, "A server that knows nothing of
/// replaylab", says how they read without this).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answers {
    /// Where a success's `structuredContent` names the effect it made or found (`id`, or a
    /// dotted path such as `result.id`): the success claim then names that reference, and the
    /// judge holds it to the operation's own effect.
    pub reference: Option<String>,
    /// Tool-error texts (`isError: true`) that say an outcome: the first whose `contains` is
    /// in the text is the answer; any other tool error claims nothing.
    pub errors: Vec<ErrorReading>,
}

/// A tool-error text that says an outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorReading {
    /// A piece of the error's text.
    pub contains: String,
    /// What it says: `unknown`, `in_flight`, `rejected` or `expired` (a tool error never
    /// claims a success).
    pub status: OutcomeStatus,
    /// For `rejected`: why.
    pub reason: Option<ReasonCode>,
}

/// The environment variables through which a server reaches a vendor twin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VendorEnv {
    /// Set to the twin's base URL (`http://127.0.0.1:PORT`, the worker's own port).
    pub base_url_env: String,
    /// Set to the API key of the run's tenant (Stripe: `sk_test_<tenant>`; GitHub: `ghp_<tenant>`; Slack: `xoxb-<tenant>`).
    pub api_key_env: String,
}

/// The file as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    tools: BTreeMap<String, ToolSpec>,
    #[serde(default)]
    vendor: BTreeMap<String, VendorSpec>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolSpec {
    tool: String,
    route: Option<String>,
    key_argument: Option<String>,
    arguments: Option<BTreeMap<String, toml::Value>>,
    answers: Option<AnswersSpec>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswersSpec {
    reference: Option<String>,
    #[serde(default)]
    errors: Vec<ErrorSpec>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorSpec {
    contains: String,
    status: OutcomeStatus,
    reason: Option<ReasonCode>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct VendorSpec {
    base_url_env: String,
    api_key_env: String,
}

impl ToolMap {
    /// Reads and checks the tool map at `path`.
    pub fn load(path: &Path) -> Result<ToolMap, String> {
        let text = crate::read_regular_file(path, MAX_FILE_BYTES)?;
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        ToolMap::parse(&text, &path).map_err(|error| format!("{}: {error}", path.display()))
    }

    /// Parses and checks a tool map's text; `path` is where it says it came from.
    pub fn parse(text: &str, path: &Path) -> Result<ToolMap, String> {
        let file: FileSpec = toml::from_str(text).map_err(|error| error.to_string().trim_end().to_owned())?;
        if file.tools.is_empty() {
            return Err(
                "it binds no role: write a [tools.\"ROLE\"] table for each role your server plays (replaylab init writes a starting file)"
                    .into(),
            );
        }
        let mut vendors = BTreeMap::new();
        for (name, spec) in file.vendor {
            let facts = fake_downstream::dialect(&name).filter(|facts| facts.vendor).ok_or_else(|| {
                format!(
                    "[vendor.{name}]: no vendor twin is called {}; the twins are {}",
                    quoted(&name),
                    vendor_names()
                )
            })?;
            for (field, value) in [("base_url_env", &spec.base_url_env), ("api_key_env", &spec.api_key_env)] {
                check_env_name(value).map_err(|error| format!("[vendor.{name}] {field}: {error}"))?;
            }
            vendors.insert(
                facts.name.to_owned(),
                VendorEnv { base_url_env: spec.base_url_env, api_key_env: spec.api_key_env },
            );
        }
        let mut roles = BTreeMap::new();
        for (role, spec) in file.tools {
            let binding =
                Binding::check(&role, spec).map_err(|error| format!("[tools.{}]: {error}", quoted(&role)))?;
            if binding.dialect.vendor && !vendors.contains_key(binding.dialect.name) {
                return Err(format!(
                    "[tools.{}]: its route is the {} twin's, and no [vendor.{}] says how the server reaches it: add\n  [vendor.{}]\n  base_url_env = \"...\"   # the variable your SDK's base URL is read from\n  api_key_env = \"...\"    # the variable its API key is read from",
                    quoted(&role),
                    binding.dialect.name,
                    binding.dialect.name,
                    binding.dialect.name
                ));
            }
            roles.insert(role, binding);
        }
        Ok(ToolMap { path: path.to_owned(), roles, vendors })
    }

    /// The binding of `role`, if the map has one.
    pub fn binding(&self, role: &str) -> Option<&Binding> {
        self.roles.get(role)
    }

    /// The roles the server plays, given the tools its `tools/list` names: every bound role
    /// (its tool must be listed, or the map is wrong: an error naming what is listed), and
    /// every contract tool it lists under the contract's own name that the map does not bind.
    pub fn served_roles(&self, listed: &BTreeSet<String>) -> Result<BTreeSet<String>, String> {
        let mut roles = BTreeSet::new();
        for binding in self.roles.values() {
            if !listed.contains(&binding.tool) {
                let names: Vec<&str> = listed.iter().map(String::as_str).collect();
                return Err(format!(
                    "{}: [tools.{}] binds the tool {}, which the server's tools/list does not name (it names {})",
                    self.path.display(),
                    quoted(&binding.role),
                    quoted(&binding.tool),
                    if names.is_empty() { "no tool".to_owned() } else { names.join(", ") }
                ));
            }
            roles.insert(binding.role.clone());
        }
        let bound_tools: BTreeSet<&str> = self.roles.values().map(|binding| binding.tool.as_str()).collect();
        for contract in ContractSet::builtin().iter() {
            if listed.contains(&contract.name) && !bound_tools.contains(contract.name.as_str()) {
                roles.insert(contract.name.clone());
            }
        }
        Ok(roles)
    }

    /// What the bound dialects cannot do that `scenario` needs of them: the reasons it is
    /// `not applicable` to this server, whatever its tools.
    pub fn lacks(&self, scenario: &Scenario) -> Vec<String> {
        let mut lacks = BTreeSet::new();
        let mut tenants: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for call in scenario_calls(scenario) {
            let Some(binding) = self.binding(&call.tool) else { continue };
            let service = ContractSet::builtin()
                .iter()
                .find(|contract| contract.name == binding.role)
                .map(|contract| contract.downstream.service.clone())
                .unwrap_or_default();
            // The service as the scenario runs it: its `[downstream]`, else the defaults.
            let Some(kind) = fake_downstream::Service::parse(&service) else { continue };
            let config = crate::downstream_config(scenario).service(kind);
            let honoured = config.idempotency == IdempotencyMode::Honoured;
            let (twin, role, file) = (binding.dialect.name, &binding.role, self.path.display());
            match binding.dialect.keys {
                KeyPolicy::Every if !honoured => {
                    lacks.insert(format!(
                        "a {service} service that ignores idempotency keys, where {role} is bound to the {twin} twin, which honours every key ({file})"
                    ));
                }
                KeyPolicy::None if honoured => {
                    lacks.insert(format!(
                        "a {service} service that honours idempotency keys, where {role} is bound to the {twin} twin, which has no idempotency key at all ({file})"
                    ));
                }
                _ => {}
            }
            if config.receipts && !binding.dialect.receipts {
                lacks.insert(format!(
                    "a {service} service with receipt lookups by key, where {role} is bound to the {twin} twin, which has none ({file})"
                ));
            }
            if binding.dialect.tenant_from_key {
                if let Some(operation) = scenario.operations.get(&call.operation) {
                    tenants.entry(binding.dialect.name).or_default().insert(operation.tenant.as_str());
                }
            }
        }
        for (dialect, tenants) in tenants {
            if tenants.len() > 1 {
                let named: Vec<&str> = tenants.into_iter().collect();
                lacks.insert(format!(
                    "operations of {} tenants ({}) on the {dialect} twin, whose tenant is the one API key a process is given",
                    named.len(),
                    named.join(", ")
                ));
            }
        }
        lacks.into_iter().collect()
    }

    /// `scenario` as it runs against this server: each fault rule and pause point that names a
    /// bound role's native route (`POST /v1/charges`) names the bound route instead
    /// (`POST /v1/payment_intents`). Everything else is as written.
    pub fn scenario_for(&self, scenario: &Scenario) -> Scenario {
        let mut moved = scenario.clone();
        for step in &mut moved.steps {
            match &mut step.kind {
                StepKind::Fault { rule, .. } => self.move_rule(rule),
                StepKind::Pause { point: PausePoint::Downstream { filter, .. }, .. } => {
                    if let Some((method, path)) = self.moved(filter.method.as_deref(), filter.path.as_deref())
                    {
                        filter.method = method.map(str::to_owned);
                        filter.path = Some(path.to_owned());
                    }
                }
                _ => {}
            }
        }
        moved
    }

    fn move_rule(&self, rule: &mut FaultRule) {
        if let Some((method, path)) = self.moved(rule.matches.method.as_deref(), rule.matches.path.as_deref())
        {
            rule.matches.method = method.map(str::to_owned);
            rule.matches.path = Some(path.to_owned());
        }
    }

    /// Where a request filter's `method path` goes: the bound route of the role whose native
    /// route it names exactly, if that route is another.
    fn moved(&self, method: Option<&str>, path: Option<&str>) -> Option<(Option<&str>, &str)> {
        let path = path?;
        let binding = self.roles.values().find(|binding| {
            let Some(kind) = tool_effect_kind(&binding.role) else { return false };
            let Some((native_method, native_path)) = fake_downstream::native_route(kind) else {
                return false;
            };
            native_path == path
                && method.is_none_or(|method| method.eq_ignore_ascii_case(native_method))
                && (binding.dialect.name != "native" || binding.path != native_path)
        })?;
        Some((method.map(|_| binding.method.as_str()), binding.path.as_str()))
    }

    /// The environment a worker process gets for the vendor twins: each vendor's base URL
    /// (`base`, the worker's own port) and the API key of `tenant`.
    pub fn vendor_environment(&self, base: &str, tenant: &str) -> Vec<(String, String)> {
        let mut environment = Vec::new();
        for (name, env) in &self.vendors {
            environment.push((env.base_url_env.clone(), base_url(name, base)));
            environment.push((env.api_key_env.clone(), api_key(name, tenant)));
        }
        environment
    }
}

/// The base URL a vendor's SDK takes for the twin served at `base` (`http://127.0.0.1:PORT`):
/// Slack's SDKs take the API's folder (`https://slack.com/api/`), the others the host.
pub fn base_url(vendor: &str, base: &str) -> String {
    match vendor {
        "slack" => format!("{}/api/", base.trim_end_matches('/')),
        _ => base.to_owned(),
    }
}

/// The API key a vendor twin reads `tenant` from.
pub fn api_key(vendor: &str, tenant: &str) -> String {
    match vendor {
        "stripe" => format!("sk_test_{tenant}"),
        "github" => format!("ghp_{tenant}"),
        "slack" => format!("xoxb-{tenant}"),
        _ => format!("{vendor}_{tenant}"),
    }
}

fn vendor_names() -> String {
    let names: Vec<&str> =
        fake_downstream::DIALECTS.iter().filter(|facts| facts.vendor).map(|facts| facts.name).collect();
    names.join(", ")
}

fn check_env_name(name: &str) -> Result<(), String> {
    let valid = name.chars().next().is_some_and(|first| first.is_ascii_uppercase() || first == '_')
        && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        return Err(format!(
            "{} is no environment variable's name (upper-case letters, digits and _)",
            quoted(name)
        ));
    }
    if name.starts_with("REPLAYLAB_") {
        return Err(format!(
            "{} is the harness's own (docs/mcp.md section 5): name your SDK's variable",
            quoted(name)
        ));
    }
    Ok(())
}

/// Every call a scenario makes (its `call` steps and the calls of its `concurrent` steps).
fn scenario_calls(scenario: &Scenario) -> impl Iterator<Item = &scenarios::CallStep> {
    scenario.steps.iter().flat_map(|step| match &step.kind {
        StepKind::Call(call) => std::slice::from_ref(call),
        StepKind::Concurrent(calls) => calls.as_slice(),
        _ => &[],
    })
}

impl Binding {
    /// For a binding to a vendor twin's route: the route and what the twin does with
    /// idempotency keys, in words, for the reports (`None` for the native dialect).
    pub fn vendor_note(&self) -> Option<String> {
        let facts = self.dialect;
        if !facts.vendor {
            return None;
        }
        let route = format!("{} {} {}", facts.name, self.method, self.path);
        let receipts = if facts.receipts { "" } else { " and has no receipt lookup" };
        let what = match facts.keys {
            KeyPolicy::None => format!(
                "the {} twin honours no idempotency key{receipts}: after a lost answer or a crash, a resend is a second effect unless the server read back what it made first",
                facts.name
            ),
            KeyPolicy::Every => format!(
                "the {} twin honours every idempotency key{}{receipts}: a resend under the first request's key is answered from the first effect, under a key minted anew (another process, another SDK call) it is a second effect",
                facts.name,
                facts.key_retention_ms.map(|ms| format!(" (kept {} h)", ms / 3_600_000)).unwrap_or_default()
            ),
            KeyPolicy::AsConfigured => format!("the {} twin honours keys as each scenario configures it", facts.name),
        };
        Some(format!("{route}: {what}"))
    }

    fn check(role: &str, spec: ToolSpec) -> Result<Binding, String> {
        let contracts: Vec<_> =
            ContractSet::builtin().iter().filter(|contract| contract.name == role).cloned().collect();
        if contracts.is_empty() {
            let roles: BTreeSet<String> =
                ContractSet::builtin().iter().map(|contract| contract.name.clone()).collect();
            let roles: Vec<String> = roles.into_iter().collect();
            return Err(format!(
                "no scenario plays a role called {}; the roles are {}",
                quoted(role),
                roles.join(", ")
            ));
        }
        let kind = tool_effect_kind(role)
            .ok_or_else(|| format!("{} makes no effect a route could be bound to", quoted(role)))?;
        if spec.tool.trim().is_empty() {
            return Err("`tool` is empty: name the server's tool that plays this role".into());
        }
        let (dialect, method, path) = match &spec.route {
            None => {
                let (method, path) =
                    fake_downstream::native_route(kind).ok_or("no native route makes this effect")?;
                (fake_downstream::DIALECTS[0], method.to_owned(), path.to_owned())
            }
            Some(route) => parse_route(route, kind)?,
        };
        let mut arguments_of_role = BTreeSet::new();
        let mut material = BTreeSet::new();
        for contract in &contracts {
            arguments_of_role.extend(contract.arguments.keys().cloned());
            material.extend(contract.material.iter().cloned());
        }
        if let Some(key) = &spec.key_argument {
            if key.trim().is_empty() {
                return Err("`key_argument` is empty: name the argument that takes the operation's key, or leave it out".into());
            }
        }
        let arguments = match spec.arguments {
            None => None,
            Some(table) => {
                let mut built = BTreeMap::new();
                for (name, value) in table {
                    if spec.key_argument.as_deref() == Some(name.as_str()) {
                        return Err(format!(
                            "arguments.{name}: it is the key_argument too; the harness fills it with the operation's key"
                        ));
                    }
                    let source = parse_source(&value, &arguments_of_role)
                        .map_err(|error| format!("arguments.{name}: {error}"))?;
                    built.insert(name, source);
                }
                let passed: BTreeSet<&str> = built
                    .values()
                    .filter_map(|source| match source {
                        Source::From { argument, .. } => Some(argument.as_str()),
                        _ => None,
                    })
                    .collect();
                let missing: Vec<&str> =
                    material.iter().map(String::as_str).filter(|name| !passed.contains(name)).collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "the role's material argument{} {} {} passed to no argument of {}: the scenarios vary {} to tell one request from another, so map {} (e.g. `{} = \"{}\"`)",
                        if missing.len() == 1 { "" } else { "s" },
                        missing.join(", "),
                        if missing.len() == 1 { "is" } else { "are" },
                        quoted(&spec.tool),
                        if missing.len() == 1 { "it" } else { "them" },
                        if missing.len() == 1 { "it" } else { "each" },
                        missing[0],
                        missing[0]
                    ));
                }
                Some(built)
            }
        };
        let answers = match spec.answers {
            None => Answers::default(),
            Some(answers) => {
                if answers
                    .reference
                    .as_deref()
                    .is_some_and(|reference| reference.is_empty() || reference.split('.').any(str::is_empty))
                {
                    return Err("answers.reference: a field of structuredContent (`id`) or a dotted path (`result.id`)".into());
                }
                let mut errors = Vec::new();
                for (index, error) in answers.errors.into_iter().enumerate() {
                    if error.contains.is_empty() {
                        return Err(format!(
                            "answers.errors[{index}]: `contains` is empty (it would match every error)"
                        ));
                    }
                    if error.status.claims_success() {
                        return Err(format!(
                            "answers.errors[{index}]: a tool error cannot claim {}: a success is answered with isError false",
                            error.status.as_str()
                        ));
                    }
                    if error.reason.is_some() && error.status != OutcomeStatus::Rejected {
                        return Err(format!("answers.errors[{index}]: a `reason` is for `rejected` only"));
                    }
                    errors.push(ErrorReading {
                        contains: error.contains,
                        status: error.status,
                        reason: error.reason,
                    });
                }
                Answers { reference: answers.reference, errors }
            }
        };
        Ok(Binding {
            role: role.to_owned(),
            tool: spec.tool,
            dialect,
            method,
            path,
            key_argument: spec.key_argument,
            arguments,
            answers,
        })
    }

    /// The tool's arguments for a call whose business arguments (the contract's defaults
    /// filled) are `business`; `call_id` is the delivery's own id; `key` the operation's key.
    pub fn arguments_for(
        &self,
        business: &Map<String, Value>,
        call_id: &str,
        key: &str,
    ) -> Map<String, Value> {
        let mut arguments = match &self.arguments {
            None => business.clone(),
            Some(table) => {
                let mut built = Map::new();
                for (name, source) in table {
                    let value = match source {
                        Source::From { argument, form } => {
                            business.get(argument).map(|value| in_form(value, *form))
                        }
                        Source::Value(value) => Some(value.clone()),
                        Source::PerCall => Some(Value::String(call_id.to_owned())),
                    };
                    if let Some(value) = value {
                        built.insert(name.clone(), value);
                    }
                }
                built
            }
        };
        if let Some(name) = &self.key_argument {
            arguments.insert(name.clone(), Value::String(key.to_owned()));
        }
        arguments
    }

    /// What a tool error's `text` says, if the map reads it as an outcome.
    pub fn read_error(&self, text: &str) -> Option<Outcome> {
        let reading = self.answers.errors.iter().find(|reading| text.contains(&reading.contains))?;
        let mut outcome = Outcome::new(reading.status);
        outcome.reason = reading.reason;
        outcome.message = Some(format!(
            "tool error read as {} (its text has {}, {})",
            reading.status.as_str(),
            quoted(&reading.contains),
            FILE_NAME
        ));
        Some(outcome)
    }

    /// The effect reference a success's `structuredContent` names, where the map says where.
    /// The MCP SDKs wrap a tool's plain return value as `{"result": ...}`; a reference written
    /// `id` is looked for under `result` too, and inside a `result` that is JSON text.
    pub fn reference_in(&self, structured: &Value) -> Option<String> {
        let reference = self.answers.reference.as_deref()?;
        let at = |value: &Value| {
            reference.split('.').try_fold(value, |value, field| value.get(field)).and_then(
                |found| match found {
                    Value::String(text) => Some(text.clone()),
                    Value::Number(number) => Some(number.to_string()),
                    _ => None,
                },
            )
        };
        at(structured).or_else(|| match structured.get("result")? {
            Value::String(text) => at(&serde_json::from_str::<Value>(text).ok()?),
            inner => at(inner),
        })
    }
}

fn parse_route(route: &str, kind: EffectKind) -> Result<(DialectFacts, String, String), String> {
    let parts: Vec<&str> = route.split_whitespace().collect();
    let [dialect, method, path] = parts.as_slice() else {
        return Err(format!(
            "route {}: write it `DIALECT METHOD PATH` (`stripe POST /v1/payment_intents`)",
            quoted(route)
        ));
    };
    let facts = fake_downstream::dialect(dialect).ok_or_else(|| {
        let names: Vec<&str> = fake_downstream::DIALECTS.iter().map(|facts| facts.name).collect();
        format!(
            "route {}: no dialect is called {}; the dialects are {}",
            quoted(route),
            quoted(dialect),
            names.join(", ")
        )
    })?;
    let method = method.to_ascii_uppercase();
    match fake_downstream::route_effect(facts.name, &method, path) {
        Some(made) if made == kind => Ok((facts, method, (*path).to_owned())),
        Some(made) => Err(format!(
            "route {}: it makes a {} effect, and the role makes a {} one (docs/vendors.md lists each route's effect)",
            quoted(route),
            made.as_str(),
            kind.as_str()
        )),
        None => Err(format!(
            "route {}: the {} dialect serves no state-changing {method} {path} (docs/vendors.md lists its routes)",
            quoted(route),
            facts.name
        )),
    }
}

fn parse_source(value: &toml::Value, arguments: &BTreeSet<String>) -> Result<Source, String> {
    let from = |argument: &str, form: Form| {
        if arguments.contains(argument) {
            Ok(Source::From { argument: argument.to_owned(), form })
        } else {
            let names: Vec<&str> = arguments.iter().map(String::as_str).collect();
            Err(format!(
                "the role has no argument {}; its arguments are {}",
                quoted(argument),
                names.join(", ")
            ))
        }
    };
    match value {
        toml::Value::String(argument) => from(argument, Form::AsIs),
        toml::Value::Table(table) => {
            let keys: BTreeSet<&str> = table.keys().map(String::as_str).collect();
            let shape = "write `\"ARGUMENT\"`, `{ from = \"ARGUMENT\", form = \"lower\" }`, `{ value = ... }` or `{ per_call = true }`";
            if keys == BTreeSet::from(["value"]) {
                let value = serde_json::to_value(&table["value"]).map_err(|error| error.to_string())?;
                return Ok(Source::Value(value));
            }
            if keys == BTreeSet::from(["per_call"]) {
                return match table["per_call"] {
                    toml::Value::Boolean(true) => Ok(Source::PerCall),
                    _ => Err(format!("`per_call` is `true` or left out; {shape}")),
                };
            }
            if keys.contains("from") && keys.iter().all(|key| *key == "from" || *key == "form") {
                let Some(argument) = table["from"].as_str() else {
                    return Err(format!("`from` names a business argument as text; {shape}"));
                };
                let form = match table.get("form").map(|form| form.as_str()) {
                    None => Form::AsIs,
                    Some(Some("lower")) => Form::Lower,
                    Some(Some("upper")) => Form::Upper,
                    Some(Some("text")) => Form::Text,
                    Some(Some("integer")) => Form::Integer,
                    Some(other) => {
                        return Err(format!(
                            "form {}: the forms are lower, upper, text and integer",
                            other.map(quoted).unwrap_or_else(|| "that is not text".into())
                        ))
                    }
                };
                return from(argument, form);
            }
            Err(shape.to_owned())
        }
        _ => Err("write `\"ARGUMENT\"`, `{ from = \"ARGUMENT\", form = \"lower\" }`, `{ value = ... }` or `{ per_call = true }`".into()),
    }
}

fn in_form(value: &Value, form: Form) -> Value {
    match (form, value) {
        (Form::AsIs, value) => value.clone(),
        (Form::Lower, Value::String(text)) => Value::String(text.to_lowercase()),
        (Form::Upper, Value::String(text)) => Value::String(text.to_uppercase()),
        (Form::Text, Value::String(text)) => Value::String(text.clone()),
        (Form::Text, other) => Value::String(other.to_string()),
        (Form::Integer, Value::String(text)) => {
            text.trim().parse::<i64>().map(Value::from).unwrap_or_else(|_| Value::String(text.clone()))
        }
        (_, other) => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRIPE: &str = r#"
[tools."payments.charge"]
tool = "create_payment_intent"
route = "stripe POST /v1/payment_intents"
key_argument = "idempotency_key"

[tools."payments.charge".arguments]
amount = "amount_minor"
currency = { from = "currency", form = "lower" }
customer = "customer"
confirm = { value = true }
request_id = { per_call = true }

[tools."payments.charge".answers]
reference = "id"

[[tools."payments.charge".answers.errors]]
contains = "may have been made"
status = "unknown"

[[tools."payments.charge".answers.errors]]
contains = "other parameters"
status = "rejected"
reason = "idempotency_key_reused_with_different_request"

[vendor.stripe]
base_url_env = "STRIPE_API_BASE"
api_key_env = "STRIPE_API_KEY"
"#;

    fn parse(text: &str) -> Result<ToolMap, String> {
        ToolMap::parse(text, Path::new("/work/replaylab.toml"))
    }

    fn builtin(id: &str) -> Scenario {
        scenarios::builtin_by_id(id).expect("a built-in scenario")
    }

    #[test]
    fn a_binding_builds_the_tools_arguments_from_the_business_ones() {
        let map = parse(STRIPE).expect("valid");
        let binding = map.binding("payments.charge").expect("bound");
        assert_eq!(
            (binding.dialect.name, binding.method.as_str(), binding.path.as_str()),
            ("stripe", "POST", "/v1/payment_intents")
        );
        let business = serde_json::json!({"customer": "cus_7", "amount_minor": 2500, "currency": "EUR", "trace_id": "t-1"});
        let built = binding.arguments_for(
            business.as_object().expect("object"),
            "call_3",
            "acme/production/run_1/charge",
        );
        assert_eq!(
            Value::Object(built),
            serde_json::json!({
                "amount": 2500, "currency": "eur", "customer": "cus_7", "confirm": true,
                "request_id": "call_3", "idempotency_key": "acme/production/run_1/charge"
            }),
            "renamed, lower-cased, constant, per call, the key; the ignored trace_id not passed"
        );
        // Without an arguments table, the business arguments go as they are.
        let plain = parse("[tools.\"tickets.create\"]\ntool = \"create_issue\"\n").expect("valid");
        let binding = plain.binding("tickets.create").expect("bound");
        assert_eq!((binding.dialect.name, binding.path.as_str()), ("native", "/v1/tickets"));
        let business = serde_json::json!({"queue": "q", "subject": "s", "body": "b"});
        assert_eq!(
            Value::Object(binding.arguments_for(business.as_object().expect("object"), "c", "k")),
            business
        );
    }

    #[test]
    fn answers_read_as_the_map_says() {
        let map = parse(STRIPE).expect("valid");
        let binding = map.binding("payments.charge").expect("bound");
        let unknown = binding.read_error("Error: the charge may have been made (timeout)").expect("read");
        assert_eq!((unknown.status, unknown.reason), (OutcomeStatus::Unknown, None));
        let refused = binding.read_error("key used with other parameters").expect("read");
        assert_eq!(refused.reason, Some(ReasonCode::IdempotencyKeyReusedWithDifferentRequest));
        assert_eq!(
            binding.read_error("card declined"),
            None,
            "an error the map does not name claims nothing"
        );
        assert_eq!(
            binding.reference_in(&serde_json::json!({"id": "pi_3", "status": "succeeded"})),
            Some("pi_3".into())
        );
        assert_eq!(binding.reference_in(&serde_json::json!({"result": {"id": "pi_4"}})), Some("pi_4".into()));
        assert_eq!(
            binding.reference_in(&serde_json::json!({"result": "{\"id\": \"pi_5\"}"})),
            Some("pi_5".into())
        );
        assert_eq!(binding.reference_in(&serde_json::json!({"result": "created"})), None);
    }

    #[test]
    fn fault_rules_and_pause_points_move_to_the_bound_route() {
        let map = parse(STRIPE).expect("valid");
        let moved = map.scenario_for(&builtin("S32"));
        let rule = moved
            .steps
            .iter()
            .find_map(|step| match &step.kind {
                StepKind::Fault { rule, .. } => Some(rule.clone()),
                _ => None,
            })
            .expect("S32 installs a rule");
        assert_eq!(
            (rule.matches.method.as_deref(), rule.matches.path.as_deref()),
            (Some("POST"), Some("/v1/payment_intents"))
        );
        // A ticket rule stays where it was: no binding moves tickets.
        let tickets = map.scenario_for(&builtin("S02"));
        assert_eq!(tickets.steps, builtin("S02").steps);
        // A binding to the native route moves nothing.
        let native = parse("[tools.\"payments.charge\"]\ntool = \"charge\"\n").expect("valid");
        assert_eq!(native.scenario_for(&builtin("S32")).steps, builtin("S32").steps);
    }

    #[test]
    fn what_a_twin_cannot_do_makes_a_scenario_not_applicable() {
        let map = parse(STRIPE).expect("valid");
        assert_eq!(map.lacks(&builtin("S32")), Vec::<String>::new(), "keys honoured, one tenant");
        let s05 = map.lacks(&builtin("S05"));
        assert_eq!(s05.len(), 2, "{s05:?}");
        assert!(s05[0].contains("ignores idempotency keys") && s05[0].contains("stripe twin"), "{s05:?}");
        assert!(s05[1].contains("receipt lookups by key") && s05[1].contains("has none"), "{s05:?}");
        // Roles the map does not bind are not its business.
        assert_eq!(map.lacks(&builtin("S03")), Vec::<String>::new());
        let two_tenants = scenarios::Scenario::from_toml(
            &builtin_text("S32").replace(
                "[operations.crashed]\ntenant = \"acme\"",
                "[operations.crashed]\ntenant = \"globex\"",
            ),
            "two-tenants.toml",
        )
        .expect("valid");
        let lacks = map.lacks(&two_tenants);
        assert!(lacks.iter().any(|lack| lack.contains("2 tenants (acme, globex)")), "{lacks:?}");
    }

    fn builtin_text(id: &str) -> String {
        scenarios::builtin_texts()
            .iter()
            .find(|(name, _)| name.starts_with(id))
            .map(|(_, text)| (*text).to_owned())
            .expect("a built-in file")
    }

    #[test]
    fn the_roles_a_server_plays_are_its_bound_tools_and_its_contract_names() {
        let map = parse(STRIPE).expect("valid");
        let listed: BTreeSet<String> =
            ["create_payment_intent", "tickets.create", "replaylab.poll"].map(str::to_owned).into();
        assert_eq!(
            map.served_roles(&listed).expect("served"),
            BTreeSet::from(["payments.charge".to_owned(), "tickets.create".to_owned()])
        );
        let missing = map.served_roles(&BTreeSet::from(["charge".to_owned()])).expect_err("not listed");
        assert!(
            missing.contains("create_payment_intent") && missing.contains("it names charge"),
            "{missing}"
        );
    }

    #[test]
    fn a_wrong_map_is_refused_with_what_is_wrong() {
        let wrong = |text: &str, says: &str| {
            let error = parse(text).expect_err(text);
            assert!(error.contains(says), "{text}\n-> {error}\n(wanted {says:?})");
        };
        wrong("", "binds no role");
        wrong("[tools.\"payments.refund\"]\ntool = \"refund\"\n", "no scenario plays a role called");
        wrong("[tools.\"payments.charge\"]\ntool = \"\"\n", "`tool` is empty");
        wrong(
            "[tools.\"payments.charge\"]\ntool = \"c\"\nroute = \"stripe /v1/payment_intents\"\n",
            "DIALECT METHOD PATH",
        );
        wrong(
            "[tools.\"payments.charge\"]\ntool = \"c\"\nroute = \"paypal POST /v1/x\"\n",
            "no dialect is called",
        );
        wrong(
            "[tools.\"payments.charge\"]\ntool = \"c\"\nroute = \"stripe POST /v1/refunds\"\n",
            "makes a refund_created effect",
        );
        wrong(
            "[tools.\"payments.charge\"]\ntool = \"c\"\nroute = \"stripe GET /v1/charges\"\n",
            "serves no state-changing GET",
        );
        wrong(
            "[tools.\"payments.charge\"]\ntool = \"c\"\nroute = \"stripe POST /v1/payment_intents\"\n",
            "no [vendor.stripe]",
        );
        wrong("[tools.\"payments.charge\"]\ntool = \"c\"\n[tools.\"payments.charge\".arguments]\namount = \"amount_minor\"\n", "currency, customer are passed to no argument");
        wrong("[tools.\"payments.charge\"]\ntool = \"c\"\n[tools.\"payments.charge\".arguments]\namount = \"amount\"\n", "the role has no argument");
        wrong(
            "[tools.\"payments.charge\"]\ntool = \"c\"\n[tools.\"payments.charge\".arguments]\ncurrency = { from = \"currency\", form = \"title\" }\n",
            "the forms are lower",
        );
        wrong(
            "[tools.\"payments.charge\"]\ntool = \"c\"\nkey_argument = \"k\"\n[tools.\"payments.charge\".arguments]\nk = \"customer\"\n",
            "it is the key_argument too",
        );
        wrong("[tools.\"payments.charge\"]\ntool = \"c\"\ncolour = 1\n", "unknown field");
        wrong(
            "[tools.\"payments.charge\"]\ntool = \"c\"\n[[tools.\"payments.charge\".answers.errors]]\ncontains = \"ok\"\nstatus = \"applied\"\n",
            "cannot claim applied",
        );
        wrong(
            "[tools.\"payments.charge\"]\ntool = \"c\"\n[vendor.stripe]\nbase_url_env = \"REPLAYLAB_X\"\napi_key_env = \"K\"\n",
            "the harness's own",
        );
        wrong("[tools.\"payments.charge\"]\ntool = \"c\"\n[vendor.gitlab]\nbase_url_env = \"B\"\napi_key_env = \"K\"\n", "no vendor twin is called");
    }

    const GITHUB: &str = r#"
[tools."tickets.create"]
tool = "create_issue"
route = "github POST /repos/{owner}/{repo}/issues"
key_argument = "idempotency_key"

[tools."tickets.create".arguments]
repo = "queue"
title = "subject"
body = "body"

[vendor.github]
base_url_env = "GITHUB_API_URL"
api_key_env = "GITHUB_TOKEN"
"#;

    #[test]
    fn a_twin_with_no_key_runs_only_the_scenarios_whose_service_honours_none_and_keeps_no_receipts() {
        let map = parse(GITHUB).expect("valid");
        // S02: keys honoured and receipts (the contract's defaults).
        let lacks = map.lacks(&builtin("S02"));
        assert!(
            lacks
                .iter()
                .any(|why| why.contains("honours idempotency keys")
                    && why.contains("no idempotency key at all")),
            "{lacks:?}"
        );
        assert!(lacks.iter().any(|why| why.contains("receipt lookups")), "{lacks:?}");
        // S03: keys ignored, but receipts.
        let lacks = map.lacks(&builtin("S03"));
        assert_eq!(lacks.len(), 1, "{lacks:?}");
        assert!(lacks[0].contains("receipt lookups"), "{lacks:?}");
        // S33: no key, no receipts: it runs, with the rule moved to the bound route.
        assert_eq!(map.lacks(&builtin("S33")), Vec::<String>::new());
        let moved = map.scenario_for(&builtin("S33"));
        let rule = moved.steps.iter().find_map(|step| match &step.kind {
            StepKind::Fault { rule, .. } => Some(rule.clone()),
            _ => None,
        });
        assert_eq!(rule.and_then(|rule| rule.matches.path).as_deref(), Some("/repos/{owner}/{repo}/issues"));
        assert_eq!(api_key("github", "acme"), "ghp_acme");
        let note = map.binding("tickets.create").and_then(Binding::vendor_note).expect("a twin's binding");
        assert!(note.starts_with("github POST /repos/{owner}/{repo}/issues: the github twin honours no idempotency key and has no receipt lookup"), "{note}");
        let stripe = parse(STRIPE).expect("valid");
        let note =
            stripe.binding("payments.charge").and_then(Binding::vendor_note).expect("a twin's binding");
        assert!(
            note.contains("honours every idempotency key (kept 24 h) and has no receipt lookup"),
            "{note}"
        );
        let native = parse("[tools.\"tickets.create\"]\ntool = \"create_issue\"\n").expect("valid");
        assert_eq!(native.binding("tickets.create").and_then(Binding::vendor_note), None);
    }

    #[test]
    fn only_a_regular_file_is_read() {
        let directory = std::env::temp_dir();
        let error = ToolMap::load(&directory).expect_err("a directory");
        assert!(error.contains("not a regular file"), "{error}");
        let error = ToolMap::load(Path::new("/no/such/replaylab.toml")).expect_err("missing");
        assert!(error.contains("/no/such/replaylab.toml"), "{error}");
    }
}
