//! `replaylab fuzz`: fuzzing on stable Rust, as a habit.
//!
//! Five targets, each fed inputs drawn deterministically from a seed (ChaCha8, one stream per
//! target and input: the same seed gives the same inputs). Every target mixes structured
//! generation with byte-level mutation of valid examples (bit flips, truncation, deleted and
//! duplicated lines, spliced examples, interesting tokens: huge numbers, `-1`, NaN-ish strings,
//! unicode, control characters):
//!
//! - `scenario`: text into [`Scenario::from_toml`]; an accepted scenario's
//!   [`Scenario::to_toml`] reads back to an equal scenario.
//! - `fault_rule`: bytes into [`FaultRule::from_json`]; an accepted rule's
//!   [`FaultRule::to_json_value`] is accepted again and equal.
//! - `downstream`: HTTP requests to the fake downstream's whole router, in process (one
//!   in-memory connection per request, served by [`wire::serve_connection`]): every request
//!   is answered within the timeout, every answer is well-formed, and every 4xx/5xx answer
//!   carries a JSON problem body; no request leaves a configuration under which a finishing
//!   job builds [`MAX_WEBHOOK_FANOUT`] or more webhook deliveries at once. The downstream's
//!   clock moves a fixed step between requests only (jobs finish, deterministically), faults a
//!   request installs are cleared before the next, and a fresh downstream is started every
//!   thousand requests. (The timeout catches a request left waiting forever; a handler that
//!   loops without yielding would stop the fuzzer itself.)
//! - `fingerprint`: argument objects for every built-in tool contract, through the
//!   reference's fingerprint strategy and argument validation: the fingerprint ignores key
//!   order, whitespace and string escapes (RFC 8785), ignores `ignored` arguments, and changes
//!   when a material argument changes.
//! - `case`: mutated exploration cases parsed as `replaylab run --case` parses them; one in
//!   [`CASE_RUN_EVERY`] of those that parse is run against the reference executor, and its
//!   verdict must be coherent (a case whose webhook fan-out is [`MAX_WEBHOOK_FANOUT`] or more
//!   is reported instead of run).
//!
//! Each input runs under [`guarded`] (`catch_unwind`, with the panic hook silenced on the
//! fuzzing thread while it runs). A panic anywhere during an input, even one some inner layer
//! caught, is a finding, as is a broken property; findings are printed with their input and
//! written to `<out>/<target>-<n>.txt` (the exact input) to become regression tests.
//!
//! One module per target (`scenario`, `fault_rule`, `downstream`, `fingerprint`, `case`), over
//! the guarded runner (`guard`), the seeded randomness (`gen`) and the valid examples
//! (`corpus`). It may import the runner (the `case` target runs cases) and what is below it.
#![deny(missing_docs)]
#![warn(clippy::unwrap_used)]

use std::path::Path;

mod case;
mod corpus;
mod downstream;
mod fault_rule;
mod fingerprint;
mod gen;
mod guard;
mod model;
mod scenario;

use case::CaseFuzz;
use downstream::DownstreamFuzz;
use fault_rule::FaultRuleFuzz;
use fingerprint::FingerprintFuzz;
use guard::drive;
use scenario::ScenarioFuzz;

pub use guard::guarded;
pub use model::*;

/// Fuzzes every target of `config` in turn, printing each target's line and findings as it
/// finishes; returns the reports.
pub fn run(config: &FuzzConfig) -> Vec<TargetReport> {
    let mut reports = Vec::new();
    for &target in &config.targets {
        let report = run_target(target, config.inputs, config.seed, config.out.as_deref());
        println!("{}", report.line());
        print!("{}", report.render_findings());
        reports.push(report);
    }
    reports
}

/// Fuzzes the real code behind `target` with `inputs` inputs drawn from `seed`, writing
/// findings under `out` (if given).
pub fn run_target(target: Target, inputs: u64, seed: u64, out: Option<&Path>) -> TargetReport {
    run_subject(Subject::real(target), inputs, seed, out)
}

/// Fuzzes `subject` with `inputs` inputs drawn from `seed`.
pub fn run_subject(subject: Subject, inputs: u64, seed: u64, out: Option<&Path>) -> TargetReport {
    let target = subject.target();
    match subject {
        Subject::Scenario(subject) => drive(target, ScenarioFuzz::new(subject), inputs, seed, out),
        Subject::FaultRule(subject) => drive(target, FaultRuleFuzz::new(subject), inputs, seed, out),
        Subject::Downstream(subject) => drive(target, DownstreamFuzz::new(subject), inputs, seed, out),
        Subject::Fingerprint(subject) => drive(target, FingerprintFuzz::new(subject), inputs, seed, out),
        Subject::Case(subject) => drive(target, CaseFuzz::new(subject), inputs, seed, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downstream::*;
    use crate::gen::*;
    use crate::guard::*;
    use serde_json::Value;

    #[test]
    fn the_same_seed_draws_the_same_inputs() {
        let draw = |seed| {
            let mut fuzz = ScenarioFuzz::new(ScenarioSubject::default());
            (0..20)
                .map(|n| fuzz.generate(&mut Gen::for_input(seed, Target::Scenario, n), n))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn panic_locations_group_panics() {
        assert_eq!(panic_location("panicked at src/a.rs:1:2:\nboom"), "src/a.rs:1:2");
        assert_eq!(panic_location("(caught inside) panicked at src/a.rs:1:2:\nboom"), "src/a.rs:1:2");
    }

    #[test]
    fn escape_shows_control_characters_and_cuts_long_inputs() {
        assert_eq!(escape(b"a\"b\n\x00", 100), "\"a\\\"b\\n\\u{0}\"");
        assert!(escape(&[b'a'; 50], 10).ends_with("\"... (50 bytes)"));
    }

    #[test]
    fn rewritten_json_is_the_same_value() {
        let value: Value =
            serde_json::from_str(r#"{"b":[1,"x/y"],"a":{"é":"\u0000","z":1.5}}"#).expect("json");
        for n in 0..50 {
            let mut gen = Gen::for_input(0, Target::Fingerprint, n);
            let text = rewrite(&mut gen, &value);
            assert_eq!(serde_json::from_str::<Value>(&text).expect("rewritten JSON parses"), value, "{text}");
        }
    }

    #[test]
    fn routes_group_paths() {
        assert_eq!(route_of("/v1/tickets/ticket_3?x=1"), "/v1/tickets/{ticket}");
        assert_eq!(route_of("/v1/nothing/here/at/all"), "(no route)");
    }
}
