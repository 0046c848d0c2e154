//! `replaylab init`: a starting tool map (`replaylab.toml`, docs/toolmap.md) written from what a
//! server's `tools/list` says of its tools: for each role of the scenarios, the tool that seems
//! to play it (by the words of its name and description, and the arguments its `inputSchema`
//! takes), the route, the arguments it can match by name, and a `# DECIDE:` line for each thing
//! the user must settle. A guess is a comment's claim, never a verdict: the file is the user's.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use protocol::ContractSet;
use serde_json::Value;
use world::process::ListedTool;

/// Words in a tool's name or description that suggest each role.
const ROLE_WORDS: [(&str, &[&str]); 5] = [
    ("tickets.create", &["ticket", "issue", "case", "bug", "incident"]),
    ("tickets.set_status", &["status", "close", "resolve", "reopen", "state"]),
    ("payments.charge", &["charge", "payment", "pay", "payment_intent", "invoice", "bill"]),
    ("messages.send", &["message", "send", "notify", "email", "sms", "chat", "post"]),
    ("jobs.submit", &["job", "report", "submit", "export", "batch"]),
];

/// The names a tool's argument often has for each business argument.
const SYNONYMS: [(&str, &[&str]); 11] = [
    ("amount_minor", &["amount", "amount_cents", "amount_minor", "cents", "value"]),
    ("currency", &["currency", "currency_code"]),
    ("customer", &["customer", "customer_id", "customerId", "account"]),
    ("queue", &["queue", "project", "board", "repo", "repository", "team", "category"]),
    ("subject", &["subject", "title", "summary", "name"]),
    ("body", &["body", "description", "text", "content", "details", "message"]),
    ("to", &["to", "recipient", "channel", "email", "phone", "user"]),
    ("job_type", &["job_type", "type", "kind", "report"]),
    ("input", &["input", "params", "parameters", "options"]),
    ("ticket_id", &["ticket_id", "ticketId", "issue_number", "issue_id", "id", "number"]),
    ("status", &["status", "state"]),
];

/// The variables the starting file proposes for each vendor twin: (twin, base URL, API key).
/// `init` starts the server with them set, so that one that reads them as it starts starts.
pub const PROPOSED_VENDORS: [(&str, &str, &str); 1] = [("stripe", "STRIPE_API_BASE", "STRIPE_API_KEY")];

/// Names a tool's argument for the operation's key often has.
const KEY_NAMES: [&str; 7] = [
    "idempotency_key",
    "idempotencyKey",
    "operation_key",
    "operationKey",
    "request_key",
    "dedupe_key",
    "key",
];

/// The starting file for a server whose `tools/list` is `listed`; `command` is how it was
/// started (for the file's header).
pub fn starting_file(listed: &[ListedTool], command: &str) -> String {
    let mut file = String::new();
    let _ = writeln!(file, "# replaylab's tool map for the server started by: {command}");
    let _ = writeln!(
        file,
        "# Written by `replaylab init` from its tools/list; docs/toolmap.md says what each field means."
    );
    let _ = writeln!(file, "# Every `# DECIDE:` line is yours to settle; then run");
    let _ = writeln!(file, "#   replaylab matrix --executor-cmd '...' --workers 2 --repeat 3 --out report");
    let _ = writeln!(file, "#");
    let _ = writeln!(file, "# The server's tools:");
    for tool in listed {
        let _ = writeln!(file, "#   {}{}", tool.name, annotations_of(tool));
    }
    let own: Vec<&ListedTool> = listed.iter().filter(|tool| !tool.name.starts_with("replaylab.")).collect();
    let mut taken = BTreeSet::new();
    let mut stripe = false;
    let contracts = ContractSet::builtin();
    for (role, _) in ROLE_WORDS {
        let Some(contract) = contracts.iter().find(|contract| contract.name == role) else { continue };
        let _ = writeln!(file);
        let _ = writeln!(file, "# The role {role}: {}", contract.purpose);
        if own.iter().any(|tool| tool.name == role) {
            let _ = writeln!(
                file,
                "# The server lists a tool of the role's own name: it plays the role without a binding."
            );
            continue;
        }
        let guess = own
            .iter()
            .filter(|tool| !taken.contains(tool.name.as_str()))
            .map(|tool| (score(role, tool), *tool))
            .filter(|(score, _)| *score >= 3)
            .max_by_key(|(score, tool)| (*score, std::cmp::Reverse(tool.name.clone())));
        let Some((_, tool)) = guess else {
            let _ = writeln!(
                file,
                "# DECIDE: no tool seems to play it; bind one if the server has it, else leave it out"
            );
            let _ = writeln!(file, "# (the scenarios that need it are then `not applicable`).");
            let _ = writeln!(file, "# [tools.\"{role}\"]");
            let _ = writeln!(file, "# tool = \"...\"");
            continue;
        };
        taken.insert(tool.name.as_str());
        let properties = properties_of(tool);
        let on_stripe = role == "payments.charge" && looks_like_stripe(tool);
        stripe |= on_stripe;
        let _ =
            writeln!(file, "# DECIDE: a guess from the tool's name and arguments; check it plays this role.");
        let _ = writeln!(file, "[tools.\"{role}\"]");
        let _ = writeln!(file, "tool = {}", toml_string(&tool.name));
        if on_stripe {
            let _ = writeln!(
                file,
                "# Its name says Stripe: its charge is a payment intent confirmed at creation."
            );
            let _ = writeln!(file, "route = \"stripe POST /v1/payment_intents\"");
        } else {
            let _ = writeln!(
                file,
                "# DECIDE: where its effect goes (`DIALECT METHOD PATH`, docs/vendors.md); the default is"
            );
            let _ = writeln!(file, "# the native route, for a server that calls REPLAYLAB_DOWNSTREAM_URL.");
            let _ = writeln!(file, "# route = \"native POST /v1/...\"");
        }
        let key = KEY_NAMES.iter().find(|name| properties.iter().any(|property| property == *name));
        match key {
            Some(key) => {
                let _ = writeln!(file, "key_argument = {}", toml_string(key));
            }
            None => {
                let _ = writeln!(
                    file,
                    "# DECIDE: no argument looks like it takes the operation's key; without one the key is"
                );
                let _ = writeln!(file, "# only in _meta (docs/mcp.md section 1).");
                let _ = writeln!(file, "# key_argument = \"...\"");
            }
        }
        let _ = writeln!(file);
        let _ = writeln!(file, "[tools.\"{role}\".arguments]");
        let mut built = BTreeSet::new();
        let arguments: BTreeSet<&String> = contract.arguments.keys().collect();
        for argument in arguments {
            let material = contract.material.contains(argument);
            match matching_property(argument, &properties, &built) {
                Some(property) => {
                    built.insert(property.clone());
                    let form = if on_stripe && argument == "currency" {
                        " # Stripe writes currencies in lower case".to_owned()
                    } else {
                        String::new()
                    };
                    let value = if form.is_empty() {
                        toml_string(argument)
                    } else {
                        format!("{{ from = {}, form = \"lower\" }}", toml_string(argument))
                    };
                    let _ = writeln!(file, "{} = {value}{form}", toml_key(&property));
                }
                None if material => {
                    let _ = writeln!(
                        file,
                        "# DECIDE: the material argument {argument} goes to which argument of {}?",
                        tool.name
                    );
                    let _ = writeln!(file, "# ... = {}", toml_string(argument));
                }
                None => {}
            }
        }
        for required in required_of(tool) {
            if !built.contains(&required) && key.is_none_or(|key| *key != required) {
                let _ = writeln!(
                    file,
                    "# DECIDE: {} requires {required}: a constant, or a value new on every delivery",
                    tool.name
                );
                let _ = writeln!(
                    file,
                    "# {} = {{ value = \"...\" }}   # or {{ per_call = true }}",
                    toml_key(&required)
                );
            }
        }
        let _ = writeln!(file);
        if on_stripe {
            let _ = writeln!(
                file,
                "# A Stripe tool usually answers the PaymentIntent: its `id` names the charge."
            );
            let _ = writeln!(file, "[tools.\"{role}\".answers]");
            let _ = writeln!(file, "reference = \"id\"");
        } else {
            let _ = writeln!(file, "# DECIDE: where a success names what it made, if it does (a field of its structuredContent).");
            let _ = writeln!(file, "# [tools.\"{role}\".answers]");
            let _ = writeln!(file, "# reference = \"id\"");
        }
        let _ = writeln!(
            file,
            "# DECIDE: the text of each error that says an outcome (the rest claim nothing), e.g."
        );
        let _ = writeln!(file, "# [[tools.\"{role}\".answers.errors]]");
        let _ = writeln!(file, "# contains = \"may have been\"");
        let _ = writeln!(file, "# status = \"unknown\"");
    }
    if stripe {
        let _ = writeln!(file);
        let _ = writeln!(
            file,
            "# DECIDE: the variables your server reads Stripe's base URL and API key from; replaylab"
        );
        let _ = writeln!(
            file,
            "# sets them on every worker process (stripe.api_base / stripe.api_key in Python)."
        );
        let (name, base, key) = PROPOSED_VENDORS[0];
        let _ = writeln!(file, "[vendor.{name}]");
        let _ = writeln!(file, "base_url_env = {}", toml_string(base));
        let _ = writeln!(file, "api_key_env = {}", toml_string(key));
    }
    file
}

fn score(role: &str, tool: &ListedTool) -> u32 {
    let words =
        ROLE_WORDS.iter().find(|(name, _)| *name == role).map(|(_, words)| *words).unwrap_or_default();
    let name = tool.name.to_lowercase();
    let description = tool.description.as_deref().unwrap_or_default().to_lowercase();
    let mut score = 0;
    for word in words {
        if name.contains(word) {
            score += 3;
        } else if description.contains(word) {
            score += 1;
        }
    }
    let properties = properties_of(tool);
    let contracts = ContractSet::builtin();
    let Some(contract) = contracts.iter().find(|contract| contract.name == role) else { return 0 };
    for argument in &contract.material {
        if matching_property(argument, &properties, &BTreeSet::new()).is_some() {
            score += 1;
        }
    }
    score
}

fn looks_like_stripe(tool: &ListedTool) -> bool {
    let text = format!("{} {}", tool.name, tool.description.as_deref().unwrap_or_default()).to_lowercase();
    text.contains("payment_intent") || text.contains("paymentintent") || text.contains("stripe")
}

fn properties_of(tool: &ListedTool) -> Vec<String> {
    tool.input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().collect())
        .unwrap_or_default()
}

fn required_of(tool: &ListedTool) -> Vec<String> {
    tool.input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(|name| name.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The tool's argument that most likely takes the business argument `argument`.
fn matching_property(argument: &str, properties: &[String], built: &BTreeSet<String>) -> Option<String> {
    let names =
        SYNONYMS.iter().find(|(name, _)| *name == argument).map(|(_, names)| *names).unwrap_or_default();
    std::iter::once(argument)
        .chain(names.iter().copied())
        .find_map(|name| properties.iter().find(|property| *property == name && !built.contains(*property)))
        .cloned()
}

fn annotations_of(tool: &ListedTool) -> String {
    let Some(annotations) = tool.annotations.as_ref().and_then(Value::as_object) else {
        return String::new();
    };
    let hints: Vec<String> = annotations
        .iter()
        .filter(|(name, _)| name.ends_with("Hint"))
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    if hints.is_empty() {
        String::new()
    } else {
        format!(" (declares {})", hints.join(", "))
    }
}

/// `text` as a TOML basic string: quoted, with `"`, `\` and control characters escaped.
fn toml_string(text: &str) -> String {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(quoted, "\\u{:04X}", c as u32);
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

fn toml_key(name: &str) -> String {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        name.to_owned()
    } else {
        toml_string(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str, schema: Value) -> ListedTool {
        ListedTool {
            name: name.into(),
            description: Some(description.into()),
            input_schema: schema,
            annotations: None,
        }
    }

    #[test]
    fn a_stripe_tool_is_bound_whole_and_the_file_is_a_valid_map() {
        let listed = [tool(
            "create_payment_intent",
            "Charge a customer.",
            serde_json::json!({"type": "object", "properties": {"amount": {}, "currency": {}, "customer": {}, "idempotency_key": {}}, "required": ["amount", "currency", "customer", "idempotency_key"]}),
        )];
        let file = starting_file(&listed, "python server.py");
        assert!(file.contains("tool = \"create_payment_intent\""), "{file}");
        assert!(file.contains("route = \"stripe POST /v1/payment_intents\""), "{file}");
        assert!(file.contains("key_argument = \"idempotency_key\""), "{file}");
        assert!(file.contains("amount = \"amount_minor\""), "{file}");
        assert!(file.contains("currency = { from = \"currency\", form = \"lower\" }"), "{file}");
        assert!(file.contains("# [tools.\"tickets.create\"]"), "no ticket tool: commented out\n{file}");
        let map = world::toolmap::ToolMap::parse(&file, std::path::Path::new("replaylab.toml"));
        let map = map.unwrap_or_else(|error| panic!("{error}\n{file}"));
        assert_eq!(map.roles.keys().collect::<Vec<_>>(), ["payments.charge"]);
    }

    #[test]
    fn what_cannot_be_guessed_is_marked_for_the_user() {
        let listed = [tool(
            "create_issue",
            "Open an issue in a repository.",
            serde_json::json!({"type": "object", "properties": {"repo": {}, "title": {}, "labels": {}}, "required": ["repo", "title", "labels"]}),
        )];
        let file = starting_file(&listed, "node server.js");
        assert!(file.contains("[tools.\"tickets.create\"]\ntool = \"create_issue\""), "{file}");
        assert!(file.contains("repo = \"queue\"") && file.contains("title = \"subject\""), "{file}");
        assert!(file.contains("# DECIDE: the material argument body goes to which argument"), "{file}");
        assert!(file.contains("# DECIDE: create_issue requires labels"), "{file}");
        assert!(file.contains("# key_argument"), "{file}");
        // As written it is refused, and the refusal says what to decide.
        let refused = world::toolmap::ToolMap::parse(&file, std::path::Path::new("replaylab.toml"))
            .expect_err("body is material and unmapped");
        assert!(refused.contains("body"), "{refused}");
    }
}
