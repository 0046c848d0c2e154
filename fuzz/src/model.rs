//! The fuzzer's model: its targets and configuration, its findings and reports, the subjects
//! (the real code behind each target, or a stand-in a test plants a defect in), and its limits.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use fake_downstream::{Downstream, FaultRule};
use scenarios::{Scenario, ScenarioError};
use serde_json::Value;

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
pub(crate) const CLOCK_STEP_MS: u64 = 250;

/// At most this many distinct findings are printed per target.
pub(crate) const MAX_PRINTED: usize = 25;
/// At most this many finding files are written per target.
pub(crate) const MAX_SAVED: usize = 50;
/// The downstream target starts a fresh downstream (and runtime) after this many requests, so
/// that its journal and its pending jobs stay small.
pub(crate) const DOWNSTREAM_REFRESH: u64 = 1_000;
/// Cases drawn for the `case` target's corpus.
pub(crate) const CASE_CORPUS: u64 = 48;

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

    pub(crate) fn index(self) -> u64 {
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

    pub(crate) fn target(&self) -> Target {
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

pub(crate) fn one_line(text: &str, max_chars: usize) -> String {
    let flat = text.replace('\n', " | ");
    if flat.chars().count() <= max_chars {
        flat
    } else {
        flat.chars().take(max_chars).collect::<String>() + "..."
    }
}

/// The bytes as a quoted Rust-like string literal: printable ASCII as is, everything else
/// escaped; at most `max_chars` characters of input, then the length.
pub fn escape(bytes: &[u8], max_chars: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let valid = std::str::from_utf8(bytes).is_ok();
    let mut out = String::from("\"");
    for (shown, c) in text.chars().enumerate() {
        if shown == max_chars {
            let _ = write!(out, "\"... ({} bytes)", bytes.len());
            return out;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            _ => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    out.push('"');
    if !valid {
        out.push_str(" (not UTF-8; invalid bytes shown as \\u{fffd})");
    }
    out
}
