//! Target `scenario`: text into `Scenario::from_toml`; what is accepted round-trips through `to_toml`.

use std::fmt::Write as _;

use scenarios::Scenario;

use crate::corpus::*;
use crate::gen::*;
use crate::guard::*;
use crate::model::*;

pub(crate) struct ScenarioFuzz {
    subject: ScenarioSubject,
    corpus: Vec<Vec<u8>>,
    parsed: u64,
}

impl ScenarioFuzz {
    pub(crate) fn new(subject: ScenarioSubject) -> Self {
        let mut corpus: Vec<Vec<u8>> =
            scenarios::builtin_texts().iter().map(|(_, text)| text.as_bytes().to_vec()).collect();
        corpus.extend(scenarios::builtin().iter().map(|scenario| scenario.to_toml().into_bytes()));
        corpus.extend((0..8).map(|seed| explore::case_for_seed(seed).to_scenario().to_toml().into_bytes()));
        Self { subject, corpus, parsed: 0 }
    }
}

/// The scenario with what the text does not decide (its source, its lines) blanked.
pub(crate) fn comparable(scenario: &Scenario) -> Scenario {
    let mut copy = scenario.clone();
    copy.source = String::new();
    copy.line = 0;
    for step in &mut copy.steps {
        step.line = 0;
    }
    copy
}

/// The first field in which two scenarios differ.
pub(crate) fn scenario_difference(a: &Scenario, b: &Scenario) -> String {
    macro_rules! field {
        ($($name:ident),*) => {
            $(if a.$name != b.$name {
                return format!("`{}` differs: {:?} then {:?}", stringify!($name), a.$name, b.$name);
            })*
        };
    }
    field!(id, name, rows, summary, expected, workers, operations, downstream, queue, timing, settle, seed);
    if a.steps.len() != b.steps.len() {
        return format!("{} steps then {}", a.steps.len(), b.steps.len());
    }
    for (i, (x, y)) in a.steps.iter().zip(&b.steps).enumerate() {
        if x.kind != y.kind {
            return format!("step {} differs: {:?} then {:?}", i + 1, x.kind, y.kind);
        }
    }
    "no field differs".into()
}

impl Fuzz for ScenarioFuzz {
    type Input = String;

    fn generate(&mut self, gen: &mut Gen, _n: u64) -> String {
        let base = &self.corpus[gen.below(self.corpus.len())];
        let bytes = match gen.below(10) {
            0..=3 => mutate(gen, base, &self.corpus),
            4 => mutate_gently(gen, base),
            5..=6 => valid_scenario_text(gen).into_bytes(),
            7 => {
                let text = valid_scenario_text(gen);
                mutate_gently(gen, text.as_bytes())
            }
            8 => scenario_text(gen).into_bytes(),
            _ => {
                let text = if gen.chance(50) { scenario_text(gen) } else { valid_scenario_text(gen) };
                mutate(gen, text.as_bytes(), &self.corpus)
            }
        };
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn check(&mut self, text: &String) -> Checked {
        let Ok(scenario) = (self.subject.parse)(text, "fuzz") else { return Checked::Fine };
        self.parsed += 1;
        let written = (self.subject.to_toml)(&scenario);
        match (self.subject.parse)(&written, "fuzz") {
            Err(error) => broken(
                "round_trip",
                format!("written form refused: {}", error.message.chars().take(60).collect::<String>()),
                format!("to_toml's output does not parse: {error}\nwritten:\n{written}"),
            ),
            Ok(again) if comparable(&again) != comparable(&scenario) => {
                let difference = scenario_difference(&scenario, &again);
                broken(
                    "round_trip",
                    format!("changed: {}", difference.split(' ').take(2).collect::<Vec<_>>().join(" ")),
                    format!("to_toml's output parses to another scenario: {difference}\nwritten:\n{written}"),
                )
            }
            Ok(_) => Checked::Fine,
        }
    }

    fn bytes(&self, text: &String) -> Vec<u8> {
        text.clone().into_bytes()
    }

    fn notes(&self) -> String {
        format!("{} parsed", self.parsed)
    }
}

/// A whole scenario file, built from odd and ordinary pieces.
pub(crate) fn scenario_text(gen: &mut Gen) -> String {
    let mut t = String::new();
    let pick_str = |gen: &mut Gen, usual: &[&str]| -> String {
        if gen.chance(85) {
            toml_string(gen.word(usual))
        } else {
            toml_string(&any_string(gen))
        }
    };
    let _ = writeln!(t, "id = {}", pick_str(gen, &["S01", "X01", "S99", "S0", "s1", "S", "SS1", "S0001"]));
    let _ = writeln!(t, "name = {}", pick_str(gen, &["fuzz_case", "a", "x_1", "Fuzz", "a-b", "_"]));
    let rows: Vec<String> =
        (0..gen.below(4)).map(|_| pick_str(gen, &["C1", "C10", "F9", "prose", "F0", "C11", "c1"])).collect();
    let _ = writeln!(t, "rows = [{}]", rows.join(", "));
    let _ = writeln!(t, "summary = {}", pick_str(gen, &["s", "A summary."]));
    let _ = writeln!(t, "expected = {}", pick_str(gen, &["e", "Every oracle holds."]));
    if gen.chance(70) {
        let _ = writeln!(
            t,
            "workers = {}",
            gen.pick(&["1", "2", "3", "8", "9", "0", "-1", "4294967296", "\"2\""])
        );
    }
    if gen.chance(40) {
        let _ = writeln!(t, "settle = {}", toml_string(gen.word(DURATIONS)));
    }
    if gen.chance(40) {
        let _ = writeln!(t, "seed = {}", gen.pick(NUMBERS));
    }
    if gen.chance(30) {
        let _ = writeln!(t, "\n[timing]");
        for key in ["lease", "retention"] {
            if gen.chance(60) {
                let _ = writeln!(t, "{key} = {}", toml_string(gen.word(DURATIONS)));
            }
        }
    }
    if gen.chance(25) {
        let _ = writeln!(t, "\n[queue]\nduplicate_deliveries = {}", gen.chance(50));
        if gen.chance(50) {
            let _ = writeln!(t, "delivery_delay = {}", toml_string(gen.word(DURATIONS)));
        }
    }
    if gen.chance(30) {
        let _ = writeln!(t, "\n[downstream]");
        if gen.chance(50) {
            let _ = writeln!(t, "job_duration = {}", toml_string(gen.word(DURATIONS)));
        }
        if gen.chance(30) {
            let _ = writeln!(
                t,
                "webhook = {{ repeat_same_event = {}, extra_event_ids = {} }}",
                gen.pick(&["0", "1", "3", "-1", "4294967295"]),
                gen.pick(&["0", "1", "2"])
            );
        }
    }
    for service in ["tickets", "charges", "messages", "jobs", "lasers"] {
        if gen.chance(15) {
            let _ = writeln!(
                t,
                "\n[downstream.{service}]\nidempotency = {}\nreceipts = {}",
                pick_str(gen, &["honoured", "ignored", "sometimes"]),
                gen.pick(&["true", "false", "1"])
            );
        }
    }
    let operations = ["a", "b", "charge"];
    for name in &operations[..1 + gen.below(operations.len())] {
        let _ = writeln!(t, "\n[operations.{name}]");
        let _ = writeln!(t, "tenant = {}", pick_str(gen, &["acme", "globex"]));
        let _ = writeln!(t, "workflow = {}", pick_str(gen, &["run_1", "run_2"]));
        let _ = writeln!(t, "step = {}", pick_str(gen, &["step_1", "step_2"]));
        if gen.chance(20) {
            let _ = writeln!(t, "environment = {}", pick_str(gen, &["production", "staging"]));
        }
        if gen.chance(20) {
            let _ = writeln!(t, "actor = {}", pick_str(gen, &["agent", "intern"]));
        }
    }
    for _ in 0..gen.count(10) {
        t.push('\n');
        t.push_str(&step_text(gen));
    }
    t
}

pub(crate) fn call_fields(gen: &mut Gen, id: &str) -> Vec<(String, String)> {
    let (tool, version) = *gen.pick(TOOLS);
    let mut fields = vec![
        ("id".to_owned(), toml_string(id)),
        ("worker".to_owned(), toml_string(gen.word(&["worker-1", "worker-2", "worker-9", "any"]))),
        ("operation".to_owned(), toml_string(gen.word(&["a", "b", "charge", "nope"]))),
        ("tool".to_owned(), toml_string(if gen.chance(90) { tool } else { "lasers.fire" })),
    ];
    if gen.chance(40) {
        fields.push(("version".to_owned(), toml_string(if gen.chance(80) { version } else { "1999-01-01" })));
    }
    let arguments = argument_value(gen, tool);
    let written = if gen.chance(70) { toml_string(&arguments.json()) } else { arguments.toml() };
    fields.push(("arguments".to_owned(), written));
    if gen.chance(15) {
        fields.push(("actor".to_owned(), toml_string(gen.word(&["agent", "intern", ""]))));
    }
    if gen.chance(15) {
        fields.push(("lose_answer".to_owned(), gen.chance(50).to_string()));
    }
    if gen.chance(20) {
        fields.push(("wait".to_owned(), gen.chance(50).to_string()));
    }
    fields
}

pub(crate) fn step_text(gen: &mut Gen) -> String {
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut field = |key: &str, value: String| fields.push((key.to_owned(), value));
    let action = *gen.pick(&[
        "call",
        "call",
        "call",
        "concurrent",
        "await",
        "poll",
        "reconcile",
        "fault",
        "fault",
        "release_hold",
        "pause",
        "wait_paused",
        "release",
        "crash",
        "restart",
        "advance",
        "revoke",
        "human_edit",
        "expect",
        "expect",
        "expect_effects",
        "explode",
    ]);
    field("action", toml_string(action));
    let call_id = *gen.pick(&["c1", "c2", "c3"]);
    match action {
        "call" => {
            let mut step = String::from("[[step]]\naction = \"call\"\n");
            for (key, value) in call_fields(gen, call_id) {
                let _ = writeln!(step, "{key} = {value}");
            }
            return step;
        }
        "concurrent" => {
            let calls: Vec<String> = (0..1 + gen.below(3))
                .map(|i| {
                    let fields = call_fields(gen, &format!("r{i}"));
                    format!(
                        "{{ {} }}",
                        fields.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ")
                    )
                })
                .collect();
            field("calls", format!("[\n  {},\n]", calls.join(",\n  ")));
        }
        "await" => field("call", toml_string(call_id)),
        "poll" | "reconcile" => {
            field("id", toml_string(gen.word(&["p1", "c1"])));
            field("operation", toml_string(gen.word(&["a", "b", "nope"])));
            field("worker", toml_string(gen.word(&["worker-1", "worker-2"])));
        }
        "fault" => {
            if gen.chance(50) {
                field("name", toml_string(gen.word(&["f1", "f2"])));
            }
            field("rule", fault_rule_value(gen).toml());
        }
        "release_hold" => field("name", toml_string(gen.word(&["f1", "f2", "nope"]))),
        "pause" => {
            field("name", toml_string(gen.word(&["p1", "p2"])));
            field("worker", toml_string(gen.word(&["worker-1", "worker-2", "any", "worker-0"])));
            field(
                "point",
                toml_string(gen.word(&[
                    "downstream:before",
                    "downstream:after",
                    "downstream:before:effect",
                    "downstream:after:committed",
                    "downstream:after:effect",
                    "store:before:claim",
                    "store:after:complete",
                    "store:before:",
                    "queue:before_ack",
                    "nowhere",
                ])),
            );
            if gen.chance(30) {
                field(
                    "request",
                    toml_string(gen.word(&[
                        "POST /v1/charges",
                        "GET /v1/receipts/*",
                        "POST",
                        "/v1/tickets",
                        "",
                    ])),
                );
            }
            if gen.chance(20) {
                field("tool", toml_string(gen.word(&["payments.charge", "nope"])));
            }
            if gen.chance(20) {
                field("operation", toml_string(gen.word(&["a", "nope"])));
            }
        }
        "wait_paused" | "release" => field("name", toml_string(gen.word(&["p1", "p2"]))),
        "crash" | "restart" => {
            if gen.chance(70) {
                field("worker", toml_string(gen.word(&["worker-1", "worker-2", "worker-9"])));
            }
            if gen.chance(40) {
                field("paused", toml_string(gen.word(&["p1", "p2"])));
            }
        }
        "advance" => field("by", toml_string(gen.word(DURATIONS))),
        "revoke" => {
            field("actor", toml_string(gen.word(&["agent", "intern", ""])));
            if gen.chance(50) {
                field("tool", toml_string(gen.word(&["payments.charge", "nope"])));
            }
        }
        "human_edit" => field("ticket_of", toml_string(gen.word(&["a", "b", "nope"]))),
        "expect" => {
            field("call", toml_string(call_id));
            let statuses =
                ["applied", "replayed", "in_flight", "unknown", "rejected", "failed", "accepted", "nope"];
            let status = if gen.chance(50) {
                toml_string(gen.word(&statuses))
            } else {
                let list: Vec<String> = (0..gen.below(4)).map(|_| toml_string(gen.word(&statuses))).collect();
                format!("[{}]", list.join(", "))
            };
            field("status", status);
            if gen.chance(20) {
                field(
                    "reason",
                    toml_string(gen.word(&["unauthorized", "request_mismatch", "approval_required", "nope"])),
                );
            }
            if gen.chance(10) {
                field("same_reference_as", toml_string(gen.word(&["c1", "c2", "nope"])));
            }
        }
        "expect_effects" => {
            if gen.chance(60) {
                field("operation", toml_string(gen.word(&["a", "b", "nope"])));
            }
            if gen.chance(30) {
                field("kind", toml_string(gen.word(&["ticket_created", "charge_created", "nope"])));
            }
            field("count", (*gen.pick(&["0", "1", "2", "-1", "4294967296"])).to_owned());
        }
        _ => field("colour", toml_string("red")),
    }
    let mut step = String::from("[[step]]\n");
    for (key, value) in fields {
        let _ = writeln!(step, "{key} = {value}");
    }
    step
}
