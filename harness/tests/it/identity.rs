//! Unusual but valid scenarios the reference must pass (issue 30): operation identity is
//! structured (no two operations share a name, whatever their parts hold), and any identifier
//! the loader accepts works end to end (nothing depends on a header surviving the trip).

use harness::executors;
use harness::runner;
use harness::verdict::Verdict;

const SEEDS: u64 = 20;

fn reference() -> executors::ExecutorSpec {
    executors::find("reference").expect("the reference executor is registered")
}

/// Runs `text` at seeds 0..SEEDS against the reference; every seed must pass.
fn passes_every_seed(text: &str, source: &str) {
    let scenario = scenarios::Scenario::from_toml(text, source).expect("a valid scenario");
    let mut failures = Vec::new();
    for seed in 0..SEEDS {
        let record = runner::run(&scenario, seed, &reference());
        if record.result.verdict != Verdict::Pass {
            failures.push(format!("seed {seed}: {:?} {:?}", record.result.verdict, record.result.notes));
        }
    }
    assert!(failures.is_empty(), "{source}: {} of {SEEDS} seeds failed:\n{}", failures.len(), failures.join("\n"));
}

const HEADER: &str = "id = \"S90\"\nname = \"identity\"\nrows = [\"C1\"]\nsummary = \"s\"\nexpected = \"e\"\n";

/// Two calls (a delivery and its duplicate) of `operation`, and its one effect.
fn called_twice(operation: &str, subject: &str) -> String {
    format!(
        r#"
[[step]]
action = "call"
id = "{operation}-1"
worker = "worker-1"
operation = "{operation}"
tool = "tickets.create"
arguments = '{{"subject": "{subject}", "body": "b"}}'

[[step]]
action = "call"
id = "{operation}-2"
worker = "worker-1"
operation = "{operation}"
tool = "tickets.create"
arguments = '{{"subject": "{subject}", "body": "b"}}'

[[step]]
action = "expect"
call = "{operation}-1"
status = "applied"

[[step]]
action = "expect"
call = "{operation}-2"
status = "replayed"

[[step]]
action = "expect_effects"
operation = "{operation}"
count = 1
"#
    )
}

/// `prod` + `x/w` and `prod/x` + `w` are two operations; joined as text they were one, and
/// the oracles saw two effects (O1), a changed request (O3) and a different result (O8).
#[test]
fn operations_whose_parts_hold_the_separator_are_kept_apart() {
    let text = format!(
        "{HEADER}
[operations.a]
tenant = \"acme\"
environment = \"prod\"
workflow = \"x/w\"
step = \"s\"

[operations.b]
tenant = \"acme\"
environment = \"prod/x\"
workflow = \"w\"
step = \"s\"

[operations.c]
tenant = \"acme%2F\"
environment = \"p\"
workflow = \"w\"
step = \"s\"

[operations.d]
tenant = \"acme/\"
environment = \"p\"
workflow = \"w\"
step = \"s\"
{}{}{}{}",
        called_twice("a", "first"),
        called_twice("b", "second"),
        called_twice("c", "third"),
        called_twice("d", "fourth")
    );
    passes_every_seed(&text, "separators.toml");
}

/// Non-ASCII identifiers, spaces at either end and identifiers of the executor's own limit of
/// 255 characters: the request label, the origin tag and the final poll all carry them.
#[test]
fn unicode_spaced_and_longest_identifiers_work_end_to_end() {
    let long = "ж".repeat(protocol::MAX_ID_CHARS);
    let text = format!(
        "{HEADER}
[operations.u]
tenant = \"東京テナント\"
environment = \"prod ünïcode\"
workflow = \"🦀-run\"
step = \"שלב\"
actor = \"agent-é\"

[operations.s]
tenant = \" acme \"
environment = \" prod\"
workflow = \"w \"
step = \" s \"

[operations.l]
tenant = \"{long}\"
environment = \"{long}\"
workflow = \"{long}\"
step = \"{long}\"
actor = \"{long}\"
{}{}{}",
        called_twice("u", "ünïcode"),
        called_twice("s", "spaced"),
        called_twice("l", "long")
    );
    passes_every_seed(&text, "identifiers.toml");
}
