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

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fake_downstream::{Downstream, DownstreamConfig, FaultRule, WebhookConfig};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use protocol::{ArgumentType, ContractError, ContractSet, Fingerprint, ToolCall, ToolContract};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use scenarios::{Scenario, ScenarioError, StepKind};
use serde_json::Value;

use judge::verdict::Verdict;
use runner::executors::ExecutorSpec;

/// Inputs per target when `--inputs` is not given.
pub const DEFAULT_INPUTS: u64 = 100_000;
/// The most inputs per target one command runs (a longer campaign takes other seeds).
pub const MAX_INPUTS: u64 = 1_000_000_000;
/// How long one downstream request may take before it counts as a hang.
pub const DOWNSTREAM_TIMEOUT: Duration = Duration::from_secs(5);
/// The `case` target runs one in this many of the inputs that parse (a run costs
/// milliseconds, a parse microseconds).
pub const CASE_RUN_EVERY: u64 = 100;
/// Where findings are written by default.
pub const DEFAULT_OUT: &str = "replaylab-fuzz";

/// Property failures of the `downstream` target whose answer was an error without a JSON
/// problem body (counted apart from hangs and malformed answers).
pub const JSON_ERROR_PROPERTY: &str = "json_error";

/// A webhook fan-out (deliveries of one finished job: the first, `repeat_same_event` repeats
/// and `extra_event_ids` new ids) at least this large is a finding: a finishing job builds
/// every delivery in memory at once, so `repeat_same_event = 4294967295` aborts the process.
pub const MAX_WEBHOOK_FANOUT: u64 = 1_000_000;
/// The downstream target's clock moves this far before each request (jobs finish on it).
const CLOCK_STEP_MS: u64 = 250;

/// At most this many distinct findings are printed per target.
const MAX_PRINTED: usize = 25;
/// At most this many finding files are written per target.
const MAX_SAVED: usize = 50;
/// The downstream target starts a fresh downstream (and runtime) after this many requests, so
/// that its journal and its pending jobs stay small.
const DOWNSTREAM_REFRESH: u64 = 1_000;
/// Cases drawn for the `case` target's corpus.
const CASE_CORPUS: u64 = 48;

// ----------------------------------------------------------------------- targets and config

/// A fuzz target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// Scenario files.
    Scenario,
    /// Fault rules (JSON).
    FaultRule,
    /// The fake downstream's HTTP router.
    Downstream,
    /// Argument validation and request fingerprints.
    Fingerprint,
    /// Saved exploration cases.
    Case,
}

impl Target {
    /// Every target, in the order `all` runs them.
    pub const ALL: [Target; 5] =
        [Target::Scenario, Target::FaultRule, Target::Downstream, Target::Fingerprint, Target::Case];

    /// The name `--target` takes.
    pub fn name(self) -> &'static str {
        match self {
            Target::Scenario => "scenario",
            Target::FaultRule => "fault_rule",
            Target::Downstream => "downstream",
            Target::Fingerprint => "fingerprint",
            Target::Case => "case",
        }
    }

    /// Parses [`Target::name`]'s output.
    pub fn parse(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|target| target.name() == name)
    }

    fn index(self) -> u64 {
        Target::ALL.iter().position(|&target| target == self).map_or(0, |index| index as u64)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `replaylab fuzz` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuzzConfig {
    /// The targets, in order.
    pub targets: Vec<Target>,
    /// Inputs per target.
    pub inputs: u64,
    /// The seed every input is drawn from.
    pub seed: u64,
    /// Where findings are written (created at the first finding); `None` writes nothing.
    pub out: Option<PathBuf>,
}

impl FuzzConfig {
    /// Checks the command's flags: `target` is a target's name or `all`, `inputs` is
    /// 1..=[`MAX_INPUTS`], `out` is not a file.
    pub fn from_flags(target: &str, inputs: u64, seed: u64, out: PathBuf) -> anyhow::Result<FuzzConfig> {
        let targets = if target == "all" {
            Target::ALL.to_vec()
        } else {
            let known: Vec<&str> = Target::ALL.iter().map(|target| target.name()).collect();
            vec![Target::parse(target).ok_or_else(|| {
                anyhow::anyhow!(
                    "--target {} is not a target; known: all, {}",
                    judge::text::quoted(target),
                    known.join(", ")
                )
            })?]
        };
        if inputs == 0 {
            anyhow::bail!("--inputs must be at least 1");
        }
        if inputs > MAX_INPUTS {
            anyhow::bail!("--inputs must be at most {MAX_INPUTS} per target; run a longer campaign with other --seed values");
        }
        if out.exists() && !out.is_dir() {
            anyhow::bail!("--out {}: is a file, not a directory", out.display());
        }
        Ok(FuzzConfig { targets, inputs, seed, out: Some(out) })
    }
}

// ----------------------------------------------------------------------- results

/// What kind of finding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum FindingKind {
    /// The code under test panicked (the message says where).
    Panic,
    /// A property did not hold: its name.
    Property(String),
}

/// One distinct finding: the first input that showed it, and how many inputs did.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The target.
    pub target: Target,
    /// The first input's number (from 0).
    pub index: u64,
    /// Panic or property.
    pub kind: FindingKind,
    /// What happened.
    pub message: String,
    /// Groups findings of one cause: a panic's location, a property's short description.
    pub signature: String,
    /// The exact input.
    pub input: Vec<u8>,
    /// Where the input was written, if it was.
    pub saved: Option<PathBuf>,
    /// Inputs with the same kind and signature.
    pub count: u64,
}

/// What fuzzing one target found.
#[derive(Debug, Clone)]
pub struct TargetReport {
    /// The target.
    pub target: Target,
    /// Inputs tried.
    pub inputs: u64,
    /// Inputs during which something panicked.
    pub panics: u64,
    /// Inputs that broke a property.
    pub property_failures: u64,
    /// Property failures by property.
    pub failures_by_property: BTreeMap<String, u64>,
    /// Wall time.
    pub seconds: f64,
    /// Target-specific counts (`N parsed, M run`, ...).
    pub notes: String,
    /// Distinct findings, in the order first seen.
    pub findings: Vec<Finding>,
}

impl TargetReport {
    /// No panic and no broken property.
    pub fn passed(&self) -> bool {
        self.panics == 0 && self.property_failures == 0
    }

    /// `fuzz <target>: <inputs> inputs, <panics> panics, <property failures> property failures, <secs>s`
    /// and the target's own counts.
    pub fn line(&self) -> String {
        let mut line = format!(
            "fuzz {}: {} inputs, {} panics, {} property failures, {:.1}s",
            self.target, self.inputs, self.panics, self.property_failures, self.seconds
        );
        if !self.notes.is_empty() {
            line.push_str(", ");
            line.push_str(&self.notes);
        }
        line
    }

    /// The findings, readable: kind, input number, message, the input (escaped, shortened),
    /// and where it was saved.
    pub fn render_findings(&self) -> String {
        let mut text = String::new();
        for (shown, finding) in self.findings.iter().enumerate() {
            if shown == MAX_PRINTED {
                let _ = writeln!(
                    text,
                    "  ... and {} more distinct findings (inputs saved as {}-<n>.txt in the output directory, up to {MAX_SAVED})",
                    self.findings.len() - MAX_PRINTED,
                    self.target
                );
                break;
            }
            let what = match &finding.kind {
                FindingKind::Panic => "panic".to_owned(),
                FindingKind::Property(property) => format!("property {property}"),
            };
            let _ = writeln!(
                text,
                "  {what} at input {} ({} input{} like it): {}",
                finding.index,
                finding.count,
                if finding.count == 1 { "" } else { "s" },
                one_line(&finding.message, 400)
            );
            let _ = writeln!(text, "    input: {}", escape(&finding.input, 600));
            if let Some(path) = &finding.saved {
                let _ = writeln!(text, "    saved: {}", path.display());
            }
        }
        text
    }
}

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

// ----------------------------------------------------------------------- subjects

/// The code a target exercises. [`Subject::real`] is the project's; tests swap in broken
/// code to check that the fuzzer reports it.
#[derive(Debug)]
pub enum Subject {
    /// `scenario`.
    Scenario(ScenarioSubject),
    /// `fault_rule`.
    FaultRule(FaultRuleSubject),
    /// `downstream`.
    Downstream(DownstreamSubject),
    /// `fingerprint`.
    Fingerprint(FingerprintSubject),
    /// `case`.
    Case(CaseSubject),
}

impl Subject {
    /// The project's own code for `target`.
    pub fn real(target: Target) -> Subject {
        match target {
            Target::Scenario => Subject::Scenario(ScenarioSubject::default()),
            Target::FaultRule => Subject::FaultRule(FaultRuleSubject::default()),
            Target::Downstream => Subject::Downstream(DownstreamSubject::default()),
            Target::Fingerprint => Subject::Fingerprint(FingerprintSubject::default()),
            Target::Case => Subject::Case(CaseSubject::default()),
        }
    }

    fn target(&self) -> Target {
        match self {
            Subject::Scenario(_) => Target::Scenario,
            Subject::FaultRule(_) => Target::FaultRule,
            Subject::Downstream(_) => Target::Downstream,
            Subject::Fingerprint(_) => Target::Fingerprint,
            Subject::Case(_) => Target::Case,
        }
    }
}

/// Parses scenario text, like [`Scenario::from_toml`].
pub type ParseScenarioFn = fn(&str, &str) -> Result<Scenario, ScenarioError>;

/// The code behind the `scenario` target.
#[derive(Debug, Clone, Copy)]
pub struct ScenarioSubject {
    /// The parser.
    pub parse: ParseScenarioFn,
    /// The writer whose output must parse back to an equal scenario.
    pub to_toml: fn(&Scenario) -> String,
}

impl Default for ScenarioSubject {
    fn default() -> Self {
        Self { parse: Scenario::from_toml, to_toml: Scenario::to_toml }
    }
}

/// The code behind the `fault_rule` target.
#[derive(Debug, Clone, Copy)]
pub struct FaultRuleSubject {
    /// The parser.
    pub parse: fn(&[u8]) -> Result<FaultRule, String>,
    /// The writer whose output must parse back to an equal rule.
    pub to_json: fn(&FaultRule) -> Value,
}

impl Default for FaultRuleSubject {
    fn default() -> Self {
        Self { parse: FaultRule::from_json, to_json: FaultRule::to_json_value }
    }
}

/// The code behind the `downstream` target.
#[derive(Debug, Clone, Copy)]
pub struct DownstreamSubject {
    /// The router requests are sent to (the whole router: business API and `/__admin`).
    pub router: fn(&Downstream) -> axum::Router,
    /// How long a request may take.
    pub timeout: Duration,
}

impl Default for DownstreamSubject {
    fn default() -> Self {
        Self { router: Downstream::router, timeout: DOWNSTREAM_TIMEOUT }
    }
}

/// The code behind the `fingerprint` target.
#[derive(Debug, Clone, Copy)]
pub struct FingerprintSubject {
    /// The fingerprint strategy (the reference's by default).
    pub fingerprint: fn(
        &protocol::ToolContract,
        &protocol::ToolCall,
    ) -> Result<protocol::Fingerprint, protocol::ContractError>,
}

impl Default for FingerprintSubject {
    fn default() -> Self {
        Self { fingerprint: executor::reference_fingerprint }
    }
}

/// The code behind the `case` target.
#[derive(Debug, Clone)]
pub struct CaseSubject {
    /// The parser (`replaylab run --case` reads the file with [`Scenario::from_file`]).
    pub parse: ParseScenarioFn,
    /// The executor the cases that parse run against.
    pub executor: ExecutorSpec,
    /// Run one in this many of the inputs that parse.
    pub run_every: u64,
}

impl Default for CaseSubject {
    fn default() -> Self {
        Self {
            parse: Scenario::from_toml,
            executor: runner::executors::find("reference").expect("the reference executor is registered"),
            run_every: CASE_RUN_EVERY,
        }
    }
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

mod case;
mod corpus;
mod downstream;
mod fault_rule;
mod fingerprint;
mod gen;
mod guard;
mod scenario;
#[allow(unused_imports, clippy::wildcard_imports)]
use case::*;
#[allow(unused_imports, clippy::wildcard_imports)]
use corpus::*;
#[allow(unused_imports, clippy::wildcard_imports)]
use downstream::*;
#[allow(unused_imports, clippy::wildcard_imports)]
use fault_rule::*;
#[allow(unused_imports, clippy::wildcard_imports)]
use fingerprint::*;
#[allow(unused_imports, clippy::wildcard_imports)]
use gen::*;
#[allow(unused_imports, clippy::wildcard_imports)]
use guard::*;
pub use guard::{escape, guarded};
#[allow(unused_imports, clippy::wildcard_imports)]
use scenario::*;

#[cfg(test)]
mod tests {
    use super::*;

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
