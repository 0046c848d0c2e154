//! Valid examples to start from: fault rules, scenario texts, tool arguments.

use std::fmt::Write as _;

use scenarios::StepKind;

use crate::gen::*;

/// The fault rules the documentation and the tests of `fake-downstream` show.
#[rustfmt::skip]
pub(crate) const DOCUMENTED_RULES: &[&str] = &[
    r#"{"match": {"path": "/v1/tickets", "idempotency_key": "k3"}, "action": "commit_then_drop", "times": 1}"#,
    r#"{"match": {...}, "action": "commit_then_delay", "delay": "3s", "times": 1}"#,
    r#"{"match": {"path": "/v1/tickets"}, "action": "commit_then_drop", "times": 1}"#,
    r#"{"match":{"method":"POST","path":"/v1/*","nth":2},"action":"commit_then_delay","delay":"3s","times":"always"}"#,
    r#"{"match":{"tenant":"acme"},"action":"commit_then_error","status":503,"times":2}"#,
    r#"{"match":{},"action":"hold","times":1}"#, r#"{"action":"hold","times":"once"}"#,
    r#"{"match":{"method":"GET","path":"/v1/receipts/*"},"action":"delay_before_commit","delay":"1500ms"}"#,
];

/// Every fault rule of the built-in scenarios, in its JSON form.
pub(crate) fn scenario_rules() -> Vec<String> {
    let mut rules = Vec::new();
    for scenario in scenarios::builtin() {
        for step in &scenario.steps {
            if let StepKind::Fault { rule, .. } = &step.kind {
                rules.push(rule.to_json_value().to_string());
            }
        }
    }
    rules
}

#[rustfmt::skip]
pub(crate) const ACTIONS: &[&str] = &[
    "hold", "drop_before_commit", "reset_before_commit", "commit_then_drop", "commit_then_delay",
    "commit_then_error", "commit_then_malformed", "delay_before_commit",
];

#[rustfmt::skip]
pub(crate) const DURATIONS: &[&str] = &[
    "1s", "3s", "1500ms", "0s", "1ns", "1us", "999ms", "24h", "24h 1ns", "25h", "1y", "1year 1ns", "2weeks",
    "584942417355y", "18446744073709551615s", "18446744073709551616s", "1.5s", "-1s", "", " ", "1", "s",
    "1 s", "1S", "1sec", "1min", "1m", "1month", "10000000000000000000000ns", "1s1s", "1s 1s", "NaN s",
];

/// A fault rule built field by field, odd values included.
pub(crate) fn fault_rule_value(gen: &mut Gen) -> V {
    let mut matches = Vec::new();
    let methods = ["POST", "GET", "post", "PATCH", "DELETE", "", "P OST", "ü"];
    let paths =
        ["/v1/tickets", "/v1/charges", "/v1/*", "/v1/receipts/*", "*", "", "/", "/v1/tickets/*/x", "v1"];
    if gen.chance(60) {
        matches.push(("method".to_owned(), V::s(gen.word(&methods))));
    }
    if gen.chance(70) {
        matches.push(("path".to_owned(), V::s(gen.word(&paths))));
    }
    if gen.chance(30) {
        matches.push(("tenant".to_owned(), V::Str(any_string(gen))));
    }
    if gen.chance(30) {
        matches.push(("idempotency_key".to_owned(), V::Str(any_string(gen))));
    }
    if gen.chance(30) {
        matches.push(("nth".to_owned(), V::n(gen.pick(NUMBERS))));
    }
    let mut fields = Vec::new();
    if gen.chance(90) {
        fields.push(("match".to_owned(), V::Obj(matches)));
    }
    let action =
        if gen.chance(90) { *gen.pick(ACTIONS) } else { *gen.pick(&["explode", "", "Hold", "HOLD"]) };
    fields.push(("action".to_owned(), V::s(action)));
    let wants_delay = matches!(action, "commit_then_delay" | "delay_before_commit");
    if (wants_delay && gen.chance(90)) || gen.chance(5) {
        fields.push(("delay".to_owned(), V::s(gen.word(DURATIONS))));
    }
    if (action == "commit_then_error" && gen.chance(90)) || gen.chance(5) {
        let status =
            *gen.pick(&["500", "503", "599", "600", "499", "0", "-1", "65535", "65536", "1.5", "\"503\""]);
        fields.push(("status".to_owned(), V::Num(status.to_owned())));
    }
    if gen.chance(80) {
        let times = match gen.below(4) {
            0 => V::s(gen.word(&["always", "once", "ALWAYS", "twice", ""])),
            1 => V::n(gen.pick(NUMBERS)),
            2 => odd_value(gen),
            _ => V::n(1 + gen.below(5)),
        };
        fields.push(("times".to_owned(), times));
    }
    let mut rule = V::Obj(fields);
    if gen.chance(15) {
        rule.perturb(gen);
    }
    rule
}

/// A fault rule every field of which is valid.
pub(crate) fn valid_fault_rule(gen: &mut Gen) -> V {
    let mut matches = Vec::new();
    if gen.chance(80) {
        matches.push(("method".to_owned(), V::s(gen.word(&["POST", "GET", "PATCH"]))));
    }
    if gen.chance(80) {
        let paths =
            ["/v1/tickets", "/v1/charges", "/v1/messages", "/v1/jobs", "/v1/receipts/*", "/v1/tickets/*"];
        matches.push(("path".to_owned(), V::s(gen.word(&paths))));
    }
    if gen.chance(20) {
        matches.push(("tenant".to_owned(), V::s(gen.word(&["acme", "globex"]))));
    }
    if gen.chance(20) {
        matches.push(("idempotency_key".to_owned(), V::s(gen.word(&["k1", "k2"]))));
    }
    if gen.chance(20) {
        matches.push(("nth".to_owned(), V::n(1 + gen.below(3))));
    }
    let action = gen.word(ACTIONS);
    let mut fields = vec![("match".to_owned(), V::Obj(matches)), ("action".to_owned(), V::s(action))];
    if matches!(action, "commit_then_delay" | "delay_before_commit") {
        fields
            .push(("delay".to_owned(), V::s(gen.word(&["1s", "3s", "1500ms", "2m", "1h 2m 3s 4ms", "1ns"]))));
    }
    if action == "commit_then_error" {
        fields.push(("status".to_owned(), V::n(500 + gen.below(100))));
    }
    if gen.chance(80) {
        let times = if gen.chance(70) { V::n(1 + gen.below(3)) } else { V::s(gen.word(&["always", "once"])) };
        fields.push(("times".to_owned(), times));
    }
    shuffle(gen, &mut fields);
    V::Obj(fields)
}

/// A scenario file that should be valid: defined operations and workers, valid tools,
/// arguments, durations and rules, expectations about calls made before.
pub(crate) fn valid_scenario_text(gen: &mut Gen) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "id = \"S{:02}\"\nname = \"fuzz_case_{}\"", gen.below(100), gen.below(10));
    let rows = ["C1", "C2", "C5", "C10", "F1", "F4", "F9", "prose"];
    let first = gen.below(rows.len());
    let mut chosen = vec![rows[first]];
    if gen.chance(30) {
        let second = rows[gen.below(rows.len())];
        if second != rows[first] {
            chosen.push(second);
        }
    }
    let _ =
        writeln!(t, "rows = [{}]", chosen.iter().map(|row| toml_string(row)).collect::<Vec<_>>().join(", "));
    let _ = writeln!(t, "summary = \"A generated case.\"\nexpected = \"Every oracle holds.\"");
    let workers = 1 + gen.below(3);
    let _ = writeln!(t, "workers = {workers}");
    if gen.chance(30) {
        let _ = writeln!(t, "settle = {}", toml_string(gen.word(&["1s", "10s", "500ms", "2m"])));
    }
    if gen.chance(40) {
        let _ = writeln!(t, "seed = {}", gen.u64() % 1000);
    }
    if gen.chance(25) {
        let _ =
            writeln!(t, "\n[timing]\nlease = \"1s\"\nretention = {}", toml_string(gen.word(&["10s", "60s"])));
    }
    if gen.chance(20) {
        let _ = writeln!(t, "\n[queue]\nduplicate_deliveries = {}", gen.chance(50));
    }
    if gen.chance(20) {
        let _ =
            writeln!(t, "\n[downstream]\njob_duration = {}", toml_string(gen.word(&["2s", "6s", "100ms"])));
    }
    for service in ["tickets", "charges", "messages", "jobs"] {
        if gen.chance(15) {
            let mode = gen.word(&["honoured", "ignored"]);
            let _ = writeln!(
                t,
                "\n[downstream.{service}]\nidempotency = \"{mode}\"\nreceipts = {}",
                gen.chance(50)
            );
        }
    }
    let operations: &[&str] = if gen.chance(50) { &["a"] } else { &["a", "b"] };
    for (i, name) in operations.iter().enumerate() {
        let tenant = gen.word(&["acme", "globex"]);
        let _ = writeln!(
            t,
            "\n[operations.{name}]\ntenant = \"{tenant}\"\nworkflow = \"run_1\"\nstep = \"step_{i}\""
        );
    }
    let mut calls: Vec<String> = Vec::new();
    let mut holds: Vec<String> = Vec::new();
    let worker = |gen: &mut Gen| format!("worker-{}", 1 + gen.below(workers));
    for step in 0..gen.count(8) {
        t.push_str("\n[[step]]\n");
        match gen.below(9) {
            0..=2 => {
                let (tool, version) = *gen.pick(TOOLS);
                let id = format!("c{step}");
                let arguments = valid_arguments(gen, tool).json();
                let _ = writeln!(
                    t,
                    "action = \"call\"\nid = \"{id}\"\nworker = \"{}\"\noperation = \"{}\"\ntool = \"{tool}\"\nversion = \"{version}\"\narguments = {}",
                    worker(gen),
                    gen.word(operations),
                    toml_string(&arguments)
                );
                calls.push(id);
            }
            3 => {
                let _ = writeln!(
                    t,
                    "action = \"advance\"\nby = {}",
                    toml_string(gen.word(&["200ms", "1s", "5s", "1m"]))
                );
            }
            4 => {
                let _ = writeln!(t, "action = \"fault\"");
                let rule = valid_fault_rule(gen);
                if gen.chance(50) {
                    let name = format!("f{step}");
                    let _ = writeln!(t, "name = \"{name}\"");
                    if rule.json().contains("\"hold\"") {
                        holds.push(name);
                    }
                }
                let _ = writeln!(t, "rule = {}", rule.toml());
            }
            5 if !holds.is_empty() => {
                let name = holds.remove(0);
                let _ = writeln!(t, "action = \"release_hold\"\nname = \"{name}\"");
            }
            6 if !calls.is_empty() => {
                let call = &calls[gen.below(calls.len())];
                let statuses = ["applied", "replayed", "in_flight", "unknown", "rejected"];
                let status: Vec<String> =
                    (0..1 + gen.below(2)).map(|_| toml_string(gen.word(&statuses))).collect();
                let _ =
                    writeln!(t, "action = \"expect\"\ncall = \"{call}\"\nstatus = [{}]", status.join(", "));
            }
            7 => {
                let action = gen.word(&["crash", "restart"]);
                let _ = writeln!(t, "action = \"{action}\"\nworker = \"{}\"", worker(gen));
            }
            _ => {
                let _ = writeln!(
                    t,
                    "action = \"expect_effects\"\noperation = \"{}\"\ncount = {}",
                    gen.word(operations),
                    gen.below(3)
                );
            }
        }
    }
    t
}

/// Valid arguments for `tool`.
pub(crate) fn valid_arguments(gen: &mut Gen, tool: &str) -> V {
    let word = |gen: &mut Gen| {
        V::s(gen.word(&["cus_42", "support", "Refund request", "Welcome aboard.", "é𝄞", "a b"]))
    };
    let mut fields: Vec<(String, V)> = match tool {
        "tickets.create" => {
            vec![("subject".into(), word(gen)), ("body".into(), word(gen)), ("queue".into(), word(gen))]
        }
        "tickets.set_status" => vec![
            ("ticket_id".into(), V::s(gen.word(&["ticket_1", "${ticket_of:a}"]))),
            ("status".into(), V::s(gen.word(&["open", "pending", "closed"]))),
            ("expected_version".into(), V::n(1 + gen.below(3))),
        ],
        "payments.charge" => vec![
            ("customer".into(), word(gen)),
            ("amount_minor".into(), V::n(1 + gen.below(100_000))),
            ("currency".into(), V::s(gen.word(&["EUR", "USD"]))),
        ],
        "messages.send" => vec![("to".into(), word(gen)), ("body".into(), word(gen))],
        _ => vec![("job_type".into(), word(gen)), ("input".into(), nested_value(gen, 1))],
    };
    if gen.chance(30) {
        fields.push(("trace_id".into(), V::s(gen.word(&["t-1", "t-2"]))));
    }
    if gen.chance(30) && fields.len() > 1 {
        // Optional fields (defaults) may be left out.
        fields.remove(gen.below(fields.len()));
    }
    shuffle(gen, &mut fields);
    V::Obj(fields)
}

/// One gentle mutation: a number or a quoted string's inside replaced, the syntax kept.
pub(crate) fn mutate_gently(gen: &mut Gen, base: &[u8]) -> Vec<u8> {
    let mut data = base.to_vec();
    replace_token(gen, &mut data);
    data
}

pub(crate) const TOOLS: &[(&str, &str)] = &[
    ("tickets.create", "2026-08-18"),
    ("tickets.create", "2026-09-01"),
    ("tickets.set_status", "2026-08-18"),
    ("payments.charge", "2026-08-18"),
    ("payments.charge", "2026-10-01"),
    ("messages.send", "2026-08-18"),
    ("jobs.submit", "2026-08-18"),
];
