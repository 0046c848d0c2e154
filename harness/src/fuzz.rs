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

use crate::executors::ExecutorSpec;
use crate::runner;
use crate::verdict::Verdict;

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
                    crate::text::quoted(target),
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
            executor: crate::executors::find("reference").expect("the reference executor is registered"),
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

// ----------------------------------------------------------------------- the guarded runner

thread_local! {
    /// Whether this thread is fuzzing (its panics are recorded, not printed).
    static SILENCED: Cell<u32> = const { Cell::new(0) };
    /// The first panic seen on this thread during the current input.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

type Hook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Send + Sync + 'static>;

/// The hook that was installed before the first fuzzing thread silenced panics, and how many
/// threads are fuzzing now.
static HOOK: Mutex<(usize, Option<Arc<Hook>>)> = Mutex::new((0, None));

/// Silences panics on this thread while it lives: the first guard in the process installs a
/// hook that records the panics of fuzzing threads and passes the others' to the previous
/// hook; the last guard dropped puts the previous hook back.
struct Silence;

impl Silence {
    fn new() -> Silence {
        let mut state = HOOK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.0 == 0 {
            let previous: Arc<Hook> = Arc::new(std::panic::take_hook());
            let forward = previous.clone();
            std::panic::set_hook(Box::new(move |info| {
                if SILENCED.with(Cell::get) > 0 {
                    CAUGHT.with(|caught| {
                        let mut caught = caught.borrow_mut();
                        if caught.is_none() {
                            *caught = Some(info.to_string());
                        }
                    });
                } else {
                    forward(info);
                }
            }));
            state.1 = Some(previous);
        }
        state.0 += 1;
        SILENCED.with(|silenced| silenced.set(silenced.get() + 1));
        Silence
    }
}

impl Drop for Silence {
    fn drop(&mut self) {
        SILENCED.with(|silenced| silenced.set(silenced.get().saturating_sub(1)));
        let mut state = HOOK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.0 -= 1;
        if state.0 == 0 {
            // Dropping the recording hook drops its clone of the previous one.
            drop(std::panic::take_hook());
            if let Some(previous) = state.1.take() {
                match Arc::try_unwrap(previous) {
                    Ok(hook) => std::panic::set_hook(hook),
                    Err(shared) => std::panic::set_hook(Box::new(move |info| shared(info))),
                }
            }
        }
    }
}

/// Runs `f` under `catch_unwind` with this thread's panics silenced. `Err` carries the panic's
/// message and location when `f` panicked, or when anything panicked while it ran, even if
/// some inner layer caught it (a spawned task, a runner that turns an executor's panic into a
/// verdict): every panic is a finding.
pub fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let _silence = Silence::new();
    CAUGHT.with(|caught| caught.borrow_mut().take());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let caught = CAUGHT.with(|caught| caught.borrow_mut().take());
    match (result, caught) {
        (Ok(value), None) => Ok(value),
        (Ok(_), Some(message)) => Err(format!("(caught inside) {message}")),
        (Err(_), Some(message)) => Err(message),
        (Err(payload), None) => Err(crate::text::panic_message(payload.as_ref())),
    }
}

/// What one input did.
#[derive(Debug)]
enum Checked {
    /// Nothing wrong.
    Fine,
    /// A property did not hold.
    Broken {
        property: &'static str,
        /// Groups failures of one cause.
        signature: String,
        message: String,
    },
}

fn broken(property: &'static str, signature: impl Into<String>, message: impl Into<String>) -> Checked {
    Checked::Broken { property, signature: signature.into(), message: message.into() }
}

/// One target's generator and checker.
trait Fuzz {
    type Input;
    /// Draws input `n`.
    fn generate(&mut self, gen: &mut Gen, n: u64) -> Self::Input;
    /// Checks it (runs under [`guarded`]).
    fn check(&mut self, input: &Self::Input) -> Checked;
    /// The exact input, as a finding file holds it.
    fn bytes(&self, input: &Self::Input) -> Vec<u8>;
    /// After a panic: drop whatever state the panic may have left broken.
    fn recover(&mut self) {}
    /// The target's own counts, for its line.
    fn notes(&self) -> String {
        String::new()
    }
}

fn drive<F: Fuzz>(target: Target, mut fuzz: F, inputs: u64, seed: u64, out: Option<&Path>) -> TargetReport {
    let started = Instant::now();
    let mut report = TargetReport {
        target,
        inputs,
        panics: 0,
        property_failures: 0,
        failures_by_property: BTreeMap::new(),
        seconds: 0.0,
        notes: String::new(),
        findings: Vec::new(),
    };
    let mut seen: BTreeMap<(FindingKind, String), usize> = BTreeMap::new();
    let mut saved = 0usize;
    for n in 0..inputs {
        let mut gen = Gen::for_input(seed, target, n);
        let input = fuzz.generate(&mut gen, n);
        let (kind, signature, message) = match guarded(|| fuzz.check(&input)) {
            Ok(Checked::Fine) => continue,
            Ok(Checked::Broken { property, signature, message }) => {
                report.property_failures += 1;
                *report.failures_by_property.entry(property.to_owned()).or_insert(0) += 1;
                (FindingKind::Property(property.to_owned()), signature, message)
            }
            Err(message) => {
                report.panics += 1;
                fuzz.recover();
                (FindingKind::Panic, panic_location(&message), message)
            }
        };
        let key = (kind.clone(), signature.clone());
        if let Some(&index) = seen.get(&key) {
            report.findings[index].count += 1;
            continue;
        }
        let bytes = fuzz.bytes(&input);
        let saved_path = match out {
            Some(dir) if saved < MAX_SAVED => {
                saved += 1;
                save(dir, target, n, &bytes)
            }
            _ => None,
        };
        seen.insert(key, report.findings.len());
        report.findings.push(Finding {
            target,
            index: n,
            kind,
            message,
            signature,
            input: bytes,
            saved: saved_path,
            count: 1,
        });
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.notes = fuzz.notes();
    report
}

fn save(dir: &Path, target: Target, n: u64, bytes: &[u8]) -> Option<PathBuf> {
    let path = dir.join(format!("{target}-{n}.txt"));
    let written = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, bytes));
    match written {
        Ok(()) => Some(path),
        Err(error) => {
            eprintln!("replaylab fuzz: failed to write {}: {error}", path.display());
            None
        }
    }
}

/// `panicked at src/x.rs:1:2:` -> `src/x.rs:1:2` (what groups panics of one cause).
fn panic_location(message: &str) -> String {
    let message = message.strip_prefix("(caught inside) ").unwrap_or(message);
    message
        .strip_prefix("panicked at ")
        .and_then(|rest| rest.split_once('\n').map(|(location, _)| location.trim_end_matches(':')))
        .map_or_else(|| one_line(message, 120), str::to_owned)
}

fn one_line(text: &str, max_chars: usize) -> String {
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

// ----------------------------------------------------------------------- randomness

/// The random stream of one input: ChaCha8 seeded from the run's seed, the target and the
/// input's number, so that any input can be drawn again on its own.
#[derive(Debug)]
struct Gen(ChaCha8Rng);

impl Gen {
    fn for_input(seed: u64, target: Target, n: u64) -> Gen {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        bytes[8..16].copy_from_slice(&target.index().to_le_bytes());
        bytes[16..24].copy_from_slice(&n.to_le_bytes());
        bytes[24..].copy_from_slice(b"rl-fuzz!");
        Gen(ChaCha8Rng::from_seed(bytes))
    }

    fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// 0..n (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.u64() % (n.max(1) as u64)) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.u64() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn word<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// 1 + a geometric number of extra steps, at most `max`.
    fn count(&mut self, max: usize) -> usize {
        let mut n = 1;
        while n < max && self.chance(40) {
            n += 1;
        }
        n
    }
}

/// Text tokens worth inserting anywhere.
#[rustfmt::skip]
const TOKENS: &[&str] = &[
    "-1", "0", "-0", "1.5", "1e2", "1e309", "-1e309", "0x10", "4294967295", "4294967296",
    "9223372036854775807", "9223372036854775808", "-9223372036854775809", "18446744073709551615",
    "18446744073709551616", "123456789012345678901234567890", "NaN", "nan", "inf", "-inf", "Infinity",
    "null", "true", "false", "\"\"", "''", "{}", "[]", "[[", "]]", "{", "}", "[", "]", "=", ",", ":", "#",
    "\"", "'", "'''", "\"\"\"", "\\", "\\u0000", "\\ud800", "\\udc00", "\\u00e9", "\\x41", "%00", "%ff",
    "%2F", "%", "\u{0}", "\u{1}", "\u{8}", "\u{1b}", "\u{7f}", "\u{85}", "\u{a0}", "\u{200b}", "\u{202e}",
    "\u{feff}", "\u{fffd}", "\u{10ffff}", "é", "𝄞", "日本", "\r\n", "\r", "\n", "\t", " ", "0s", "1ns", "24h",
    "25h", "1y", "584942417355y", "18446744073709551615s", "1500ms", "-1s", "1 s", "always", "once",
    "${ticket_of:a}", "${", "worker-0", "worker-9", "any", "downstream:after:committed", "store:before:",
    "..", "/", "//", "?", "&",
];

/// JSON number literals worth trying (some are not JSON at all).
#[rustfmt::skip]
const NUMBERS: &[&str] = &[
    "0", "1", "-1", "2", "42", "255", "256", "65535", "65536", "4294967295", "4294967296",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "18446744073709551615", "18446744073709551616", "1e309", "-1e309", "1.5", "-0", "0.0", "1e2", "1E-7",
    "123456789012345678901234567890", "NaN", "Infinity", "01", "+1",
];

/// Strings worth trying.
#[rustfmt::skip]
const STRINGS: &[&str] = &[
    "", " ", "a", "acme", "globex", "support", "EUR", "eur", "EURO", "cus_42", "ticket_1", "job_1", "null",
    "NaN", "-1", "é", "𝄞", "\u{0}", "\u{1b}[31m", "\u{7f}", "\u{202e}abc", "\u{feff}", "\u{fffd}",
    "\u{10ffff}", "a\nb", "\r\n", "\t", "%00", "%ff", "${ticket_of:a}", "\\", "\"", "'", "'''", "k1",
    "open", "closed", "pending",
];

/// A string from [`STRINGS`], or a long one (around the 255-character and 10,000-character
/// limits, or past the 64 KiB body limit).
fn any_string(gen: &mut Gen) -> String {
    if gen.chance(8) {
        let length = *gen.pick(&[255usize, 256, 1000, 10_000, 10_001, 70_000]);
        let c = *gen.pick(&['a', 'é', '𝄞', '\u{0}']);
        return std::iter::repeat_n(c, length).collect();
    }
    (*gen.pick(STRINGS)).to_owned()
}

/// A small JSON-ish value tree, written as JSON or as a TOML inline value.
#[derive(Debug, Clone)]
enum V {
    Str(String),
    /// A number literal as written (may be no valid number at all).
    Num(String),
    Bool(bool),
    Null,
    Arr(Vec<V>),
    Obj(Vec<(String, V)>),
}

impl V {
    fn s(text: &str) -> V {
        V::Str(text.to_owned())
    }

    fn n(number: impl std::fmt::Display) -> V {
        V::Num(number.to_string())
    }

    fn obj(fields: &[(&str, V)]) -> V {
        V::Obj(fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect())
    }

    fn json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    fn write_json(&self, out: &mut String) {
        match self {
            V::Str(text) => out.push_str(&json_string(text)),
            V::Num(number) => out.push_str(number),
            V::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            V::Null => out.push_str("null"),
            V::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_json(out);
                }
                out.push(']');
            }
            V::Obj(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&json_string(key));
                    out.push(':');
                    value.write_json(out);
                }
                out.push('}');
            }
        }
    }

    fn toml(&self) -> String {
        match self {
            V::Str(text) => toml_string(text),
            V::Num(number) => number.clone(),
            V::Bool(b) => b.to_string(),
            V::Null => "\"\"".into(),
            V::Arr(items) => format!("[{}]", items.iter().map(V::toml).collect::<Vec<_>>().join(", ")),
            V::Obj(fields) => format!(
                "{{ {} }}",
                fields
                    .iter()
                    .map(|(k, v)| format!("{} = {}", toml_key(k), v.toml()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Replaces a random scalar somewhere in the tree with an odd value, drops a field, or
    /// duplicates one.
    fn perturb(&mut self, gen: &mut Gen) {
        match self {
            V::Obj(fields) if !fields.is_empty() => {
                let i = gen.below(fields.len());
                match gen.below(6) {
                    0 => {
                        fields.remove(i);
                    }
                    1 => {
                        let copy = fields[i].clone();
                        fields.push(copy);
                    }
                    2 => fields.push((any_string(gen), odd_value(gen))),
                    _ => fields[i].1.perturb(gen),
                }
            }
            V::Arr(items) if !items.is_empty() => {
                let i = gen.below(items.len());
                items[i].perturb(gen);
            }
            _ => *self = odd_value(gen),
        }
    }
}

/// An odd scalar (or a small container) of any type.
fn odd_value(gen: &mut Gen) -> V {
    match gen.below(8) {
        0 | 1 => V::Str(any_string(gen)),
        2 | 3 => V::n(gen.pick(NUMBERS)),
        4 => V::Bool(gen.chance(50)),
        5 => V::Null,
        6 => V::Arr(vec![V::n(gen.pick(NUMBERS)), V::Str(any_string(gen))]),
        _ => V::Obj(vec![(any_string(gen), V::n(gen.pick(NUMBERS)))]),
    }
}

fn json_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

/// A TOML basic string (control characters escaped).
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn toml_key(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        key.to_owned()
    } else {
        toml_string(key)
    }
}

/// Byte-level mutation of `base`: one or more of bit flips, random bytes, deleted or
/// duplicated ranges and lines, swapped lines, truncation, inserted tokens, numbers or quoted
/// strings replaced by tokens, and splices from `others`.
fn mutate(gen: &mut Gen, base: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut data = base.to_vec();
    for _ in 0..gen.count(6) {
        mutate_once(gen, &mut data, others);
        if data.len() > 256 * 1024 {
            data.truncate(256 * 1024);
        }
    }
    data
}

fn mutate_once(gen: &mut Gen, data: &mut Vec<u8>, others: &[Vec<u8>]) {
    let len = data.len();
    let at = |gen: &mut Gen| gen.below(len + 1);
    match gen.below(14) {
        0 if len > 0 => {
            let i = gen.below(len);
            data[i] ^= 1 << gen.below(8);
        }
        1 if len > 0 => {
            let i = gen.below(len);
            data[i] = gen.u64() as u8;
        }
        2 if len > 0 => {
            let start = gen.below(len);
            let end = (start + 1 + gen.below(16)).min(len);
            data.drain(start..end);
        }
        3 => data.truncate(at(gen)),
        4 | 5 => {
            let i = at(gen);
            let token = gen.pick(TOKENS).as_bytes();
            data.splice(i..i, token.iter().copied());
        }
        6 => replace_token(gen, data),
        7 | 8 => {
            // Duplicate a line (a duplicated key, a repeated header, a repeated table).
            let lines = line_spans(data);
            let (start, end) = lines[gen.below(lines.len())];
            let line = data[start..end].to_vec();
            let (to, _) = lines[gen.below(lines.len())];
            data.splice(to..to, line);
        }
        9 => {
            let lines = line_spans(data);
            let (start, end) = lines[gen.below(lines.len())];
            data.drain(start..end);
        }
        10 => {
            let lines = line_spans(data);
            let a = lines[gen.below(lines.len())];
            let b = lines[gen.below(lines.len())];
            let (first, second) = if a.0 <= b.0 { (a, b) } else { (b, a) };
            if first.1 <= second.0 {
                let one = data[first.0..first.1].to_vec();
                let two = data[second.0..second.1].to_vec();
                data.splice(second.0..second.1, one);
                data.splice(first.0..first.1, two);
            }
        }
        11 if len > 0 => {
            let start = gen.below(len);
            let end = (start + 1 + gen.below(64)).min(len);
            let copy = data[start..end].to_vec();
            let to = at(gen);
            data.splice(to..to, copy);
        }
        12 if !others.is_empty() => {
            // Splice: our head, another example's tail.
            let other = &others[gen.below(others.len())];
            let cut = at(gen);
            let from = gen.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        _ => {
            let i = at(gen);
            let long = any_string(gen);
            data.splice(i..i, long.into_bytes());
        }
    }
}

/// `(start, end)` of every line, the newline included; at least one span.
fn line_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < data.len() || spans.is_empty() {
        spans.push((start, data.len()));
    }
    spans
}

/// Replaces one run of digits, or the inside of one quoted string, with a token.
fn replace_token(gen: &mut Gen, data: &mut Vec<u8>) {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < data.len() {
        if data[i].is_ascii_digit() {
            let start = i;
            while i < data.len() && (data[i].is_ascii_digit() || data[i] == b'.') {
                i += 1;
            }
            spans.push((start, i, true));
        } else if data[i] == b'"' {
            let start = i + 1;
            i += 1;
            while i < data.len() && data[i] != b'"' && data[i] != b'\n' {
                i += if data[i] == b'\\' { 2 } else { 1 };
            }
            let end = i.min(data.len());
            spans.push((start, end, false));
            i += 1;
        } else {
            i += 1;
        }
    }
    if spans.is_empty() {
        return;
    }
    let (start, end, number) = spans[gen.below(spans.len())];
    let replacement = if number || gen.chance(30) {
        (*gen.pick(NUMBERS)).to_owned()
    } else {
        any_string(gen).replace('\\', "\\\\").replace('"', "\\\"")
    };
    data.splice(start..end, replacement.into_bytes());
}

// ----------------------------------------------------------------------- corpus

/// The fault rules the documentation and the tests of `fake-downstream` show.
#[rustfmt::skip]
const DOCUMENTED_RULES: &[&str] = &[
    r#"{"match": {"path": "/v1/tickets", "idempotency_key": "k3"}, "action": "commit_then_drop", "times": 1}"#,
    r#"{"match": {...}, "action": "commit_then_delay", "delay": "3s", "times": 1}"#,
    r#"{"match": {"path": "/v1/tickets"}, "action": "commit_then_drop", "times": 1}"#,
    r#"{"match":{"method":"POST","path":"/v1/*","nth":2},"action":"commit_then_delay","delay":"3s","times":"always"}"#,
    r#"{"match":{"tenant":"acme"},"action":"commit_then_error","status":503,"times":2}"#,
    r#"{"match":{},"action":"hold","times":1}"#, r#"{"action":"hold","times":"once"}"#,
    r#"{"match":{"method":"GET","path":"/v1/receipts/*"},"action":"delay_before_commit","delay":"1500ms"}"#,
];

/// Every fault rule of the built-in scenarios, in its JSON form.
fn scenario_rules() -> Vec<String> {
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
const ACTIONS: &[&str] = &[
    "hold", "drop_before_commit", "reset_before_commit", "commit_then_drop", "commit_then_delay",
    "commit_then_error", "commit_then_malformed", "delay_before_commit",
];

#[rustfmt::skip]
const DURATIONS: &[&str] = &[
    "1s", "3s", "1500ms", "0s", "1ns", "1us", "999ms", "24h", "24h 1ns", "25h", "1y", "1year 1ns", "2weeks",
    "584942417355y", "18446744073709551615s", "18446744073709551616s", "1.5s", "-1s", "", " ", "1", "s",
    "1 s", "1S", "1sec", "1min", "1m", "1month", "10000000000000000000000ns", "1s1s", "1s 1s", "NaN s",
];

/// A fault rule built field by field, odd values included.
fn fault_rule_value(gen: &mut Gen) -> V {
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
fn valid_fault_rule(gen: &mut Gen) -> V {
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
fn valid_scenario_text(gen: &mut Gen) -> String {
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
fn valid_arguments(gen: &mut Gen, tool: &str) -> V {
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
fn mutate_gently(gen: &mut Gen, base: &[u8]) -> Vec<u8> {
    let mut data = base.to_vec();
    replace_token(gen, &mut data);
    data
}

// ----------------------------------------------------------------------- scenario

struct ScenarioFuzz {
    subject: ScenarioSubject,
    corpus: Vec<Vec<u8>>,
    parsed: u64,
}

impl ScenarioFuzz {
    fn new(subject: ScenarioSubject) -> Self {
        let mut corpus: Vec<Vec<u8>> =
            scenarios::builtin_texts().iter().map(|(_, text)| text.as_bytes().to_vec()).collect();
        corpus.extend(scenarios::builtin().iter().map(|scenario| scenario.to_toml().into_bytes()));
        corpus.extend(
            (0..8).map(|seed| crate::explore::case_for_seed(seed).to_scenario().to_toml().into_bytes()),
        );
        Self { subject, corpus, parsed: 0 }
    }
}

/// The scenario with what the text does not decide (its source, its lines) blanked.
fn comparable(scenario: &Scenario) -> Scenario {
    let mut copy = scenario.clone();
    copy.source = String::new();
    copy.line = 0;
    for step in &mut copy.steps {
        step.line = 0;
    }
    copy
}

/// The first field in which two scenarios differ.
fn scenario_difference(a: &Scenario, b: &Scenario) -> String {
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

const TOOLS: &[(&str, &str)] = &[
    ("tickets.create", "2026-08-18"),
    ("tickets.create", "2026-09-01"),
    ("tickets.set_status", "2026-08-18"),
    ("payments.charge", "2026-08-18"),
    ("payments.charge", "2026-10-01"),
    ("messages.send", "2026-08-18"),
    ("jobs.submit", "2026-08-18"),
];

/// A whole scenario file, built from odd and ordinary pieces.
fn scenario_text(gen: &mut Gen) -> String {
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

fn call_fields(gen: &mut Gen, id: &str) -> Vec<(String, String)> {
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

fn step_text(gen: &mut Gen) -> String {
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

// ----------------------------------------------------------------------- fault_rule

struct FaultRuleFuzz {
    subject: FaultRuleSubject,
    corpus: Vec<Vec<u8>>,
    accepted: u64,
}

impl FaultRuleFuzz {
    fn new(subject: FaultRuleSubject) -> Self {
        let mut corpus: Vec<Vec<u8>> = DOCUMENTED_RULES.iter().map(|rule| rule.as_bytes().to_vec()).collect();
        corpus.extend(scenario_rules().into_iter().map(String::into_bytes));
        Self { subject, corpus, accepted: 0 }
    }
}

impl Fuzz for FaultRuleFuzz {
    type Input = Vec<u8>;

    fn generate(&mut self, gen: &mut Gen, _n: u64) -> Vec<u8> {
        let base = &self.corpus[gen.below(self.corpus.len())];
        match gen.below(10) {
            0..=2 => mutate(gen, base, &self.corpus),
            3 => mutate_gently(gen, base),
            4 => valid_fault_rule(gen).json().into_bytes(),
            5 => {
                // The same rule, keys in another order, other whitespace and escapes.
                let text = valid_fault_rule(gen).json();
                let value: Value = serde_json::from_str(&text).expect("a generated rule is JSON");
                rewrite(gen, &value).into_bytes()
            }
            6 => {
                let text = valid_fault_rule(gen).json();
                mutate_gently(gen, text.as_bytes())
            }
            7 => fault_rule_value(gen).json().into_bytes(),
            _ => {
                let rule = if gen.chance(50) { fault_rule_value(gen) } else { valid_fault_rule(gen) };
                mutate(gen, rule.json().as_bytes(), &self.corpus)
            }
        }
    }

    fn check(&mut self, bytes: &Vec<u8>) -> Checked {
        let Ok(rule) = (self.subject.parse)(bytes) else { return Checked::Fine };
        self.accepted += 1;
        let written = (self.subject.to_json)(&rule).to_string();
        match (self.subject.parse)(written.as_bytes()) {
            Err(error) => broken(
                "round_trip",
                format!("written form refused: {}", error.chars().take(60).collect::<String>()),
                format!("to_json_value's output {written} is refused: {error}"),
            ),
            Ok(again) if again != rule => broken(
                "round_trip",
                "written form reads as another rule",
                format!("to_json_value's output {written} reads as {again:?}, not {rule:?}"),
            ),
            Ok(_) => Checked::Fine,
        }
    }

    fn bytes(&self, bytes: &Vec<u8>) -> Vec<u8> {
        bytes.clone()
    }

    fn notes(&self) -> String {
        format!("{} accepted", self.accepted)
    }
}

// ----------------------------------------------------------------------- downstream

/// One generated HTTP request.
#[derive(Debug, Clone)]
struct RawRequest {
    method: String,
    path: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl RawRequest {
    /// The request as HTTP/1.1 text (what a finding file holds).
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.path).into_bytes();
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("content-length: {}\r\n\r\n", self.body.len()).as_bytes());
        out.extend_from_slice(&self.body);
        out
    }

    fn build(&self) -> Option<http::Request<Full<Bytes>>> {
        let method = http::Method::from_bytes(self.method.as_bytes()).ok()?;
        let mut builder =
            http::Request::builder().method(method).uri(self.path.as_str()).header("host", "downstream");
        for (name, value) in &self.headers {
            let name = http::HeaderName::from_bytes(name.as_bytes()).ok()?;
            let value = http::HeaderValue::from_bytes(value).ok()?;
            builder = builder.header(name, value);
        }
        builder.body(Full::new(Bytes::from(self.body.clone()))).ok()
    }
}

/// The routes of `fake-downstream/src/routes.rs`: method, path template.
#[rustfmt::skip]
const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/tickets"), ("GET", "/v1/tickets/{ticket}"), ("PATCH", "/v1/tickets/{ticket}"),
    ("POST", "/v1/charges"), ("POST", "/v1/messages"), ("POST", "/v1/jobs"), ("GET", "/v1/jobs/{job}"),
    ("GET", "/v1/receipts/{key}"), ("POST", "/__admin/faults"), ("GET", "/__admin/faults"),
    ("DELETE", "/__admin/faults"), ("POST", "/__admin/faults/{rule}/release"), ("GET", "/__admin/ledger"),
    ("GET", "/__admin/requests"), ("GET", "/__admin/webhooks"), ("POST", "/__admin/reset"),
    ("POST", "/__admin/tickets/{ticket}/touch"), ("GET", "/__admin/config"), ("PUT", "/__admin/config"),
    ("GET", "/"), ("GET", "/v2/tickets"),
];

#[rustfmt::skip]
const METHODS: &[&str] = &[
    "GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS", "TRACE", "FOO", "get", "PoSt", "M-SEARCH",
    "X",
];

/// Path segments beside the ids the downstream handed out.
#[rustfmt::skip]
const SEGMENTS: &[&str] = &[
    "ticket_1", "ticket_999999", "job_1", "k1", "1", "0", "-1", "18446744073709551616", "%00", "%ff",
    "%FF%FE", "%2F", "%2e%2e", "..", ".", "%C3%A9", "%F0%9D%84%9E", "%ED%A0%80", "%", "%zz", "a%20b", "+",
    "~", "*", "%0A", "%7F", ":", "@", ";a=b",
];

/// Query values.
#[rustfmt::skip]
const QUERY_VALUES: &[&str] = &[
    "acme", "globex", "tickets", "charges", "messages", "jobs", "lasers", "", "%00", "%ff", "%C3%A9", "a+b",
    "a%26b", "%", "ACME", "Tickets",
];

#[rustfmt::skip]
const CONTENT_TYPES: &[&str] = &[
    "application/json", "application/json; charset=utf-8", "text/plain", "application/problem+json",
    "application/x-www-form-urlencoded", "", "application/json, application/json", "*/*",
    "application/json; charset=latin1", "multipart/form-data; boundary=x",
];

const KEYS: &[&str] = &["k1", "k2", "", " ", "a\tb", "%00", "ключ", "k1 ", "\u{e9}"];

struct DownstreamFuzz {
    subject: DownstreamSubject,
    /// The runtime and the downstream, rebuilt every [`DOWNSTREAM_REFRESH`] requests and
    /// after a panic.
    world: Option<(tokio::runtime::Runtime, Downstream, axum::Router)>,
    /// The downstream's clock: it moves only between requests (see [`DownstreamFuzz::check`]).
    clock: Arc<AtomicU64>,
    since_refresh: u64,
    /// Ids and keys the downstream handed out, to aim later requests at real things.
    ids: Vec<String>,
    sent: u64,
    unsendable: u64,
    by_class: [u64; 6],
}

impl DownstreamFuzz {
    fn new(subject: DownstreamSubject) -> Self {
        Self {
            subject,
            world: None,
            clock: Arc::new(AtomicU64::new(1_800_000_000_000)),
            since_refresh: 0,
            ids: Vec::new(),
            sent: 0,
            unsendable: 0,
            by_class: [0; 6],
        }
    }

    fn world(&mut self) -> &(tokio::runtime::Runtime, Downstream, axum::Router) {
        if self.since_refresh >= DOWNSTREAM_REFRESH {
            self.world = None;
        }
        if self.world.is_none() {
            self.since_refresh = 0;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a current-thread runtime starts");
            let clock = Self::clock_of(&self.clock);
            let downstream =
                Downstream::new(DownstreamConfig::default(), Arc::new(clock), Arc::new(NoNetwork));
            let router = (self.subject.router)(&downstream);
            self.world = Some((runtime, downstream, router));
        }
        self.since_refresh += 1;
        self.world.as_ref().expect("the world was just built")
    }

    fn clock_of(clock: &Arc<AtomicU64>) -> impl Fn() -> u64 + Send + Sync + 'static {
        let clock = clock.clone();
        move || clock.load(Ordering::Relaxed)
    }

    fn segment(&self, gen: &mut Gen) -> String {
        if !self.ids.is_empty() && gen.chance(50) {
            return self.ids[gen.below(self.ids.len())].clone();
        }
        if gen.chance(5) {
            return "a".repeat(*gen.pick(&[255usize, 256, 4096, 20_000]));
        }
        (*gen.pick(SEGMENTS)).to_owned()
    }

    fn body(&self, gen: &mut Gen, method: &str, template: &str) -> Vec<u8> {
        let text =
            |gen: &mut Gen, usual: &str| if gen.chance(85) { V::s(usual) } else { V::Str(any_string(gen)) };
        let tenant = |gen: &mut Gen| {
            let usual = if gen.chance(50) { "acme" } else { "globex" };
            text(gen, usual)
        };
        let value = match (method, template) {
            ("POST", "/v1/tickets") => V::obj(&[
                ("tenant", tenant(gen)),
                ("queue", text(gen, "support")),
                ("subject", text(gen, "Refund request")),
                ("body", text(gen, "Customer reports a duplicate charge.")),
            ]),
            ("PATCH", _) => {
                let status = *gen.pick(&["open", "pending", "closed"]);
                V::obj(&[("tenant", tenant(gen)), ("status", text(gen, status))])
            }
            ("POST", "/v1/charges") => V::obj(&[
                ("tenant", tenant(gen)),
                ("customer", text(gen, "cus_42")),
                (
                    "amount_minor",
                    if gen.chance(80) { V::n(1 + gen.below(10_000)) } else { V::n(gen.pick(NUMBERS)) },
                ),
                ("currency", text(gen, "EUR")),
            ]),
            ("POST", "/v1/messages") => V::obj(&[
                ("tenant", tenant(gen)),
                ("to", text(gen, "customer-42")),
                ("body", text(gen, "Welcome aboard.")),
            ]),
            ("POST", "/v1/jobs") => {
                let mut fields = vec![("tenant", tenant(gen)), ("job_type", text(gen, "invoice_report"))];
                if gen.chance(60) {
                    fields.push(("input", V::obj(&[("month", V::s("2026-11"))])));
                }
                V::obj(&fields)
            }
            ("POST", "/__admin/faults") => fault_rule_value(gen),
            ("PUT", "/__admin/config") => {
                let service = |gen: &mut Gen| {
                    V::obj(&[
                        ("idempotency", V::s(gen.word(&["honoured", "ignored", "sometimes"]))),
                        ("receipts", V::Bool(gen.chance(70))),
                    ])
                };
                let mut fields = Vec::new();
                for name in ["tickets", "charges", "messages", "jobs"] {
                    if gen.chance(40) {
                        fields.push((name, service(gen)));
                    }
                }
                if gen.chance(50) {
                    fields.push(("job_duration", V::s(gen.word(DURATIONS))));
                }
                if gen.chance(30) {
                    let url = *gen.pick(&[
                        "http://127.0.0.1:9/hooks",
                        "http://hooks/x",
                        "https://hooks/x",
                        "http://:0/",
                        "http://[::1]:65535/a?b",
                        "not a url",
                        "",
                    ]);
                    fields.push((
                        "webhook",
                        V::obj(&[
                            ("url", V::s(url)),
                            ("repeat_same_event", V::n(gen.pick(&["0", "1", "3", "4294967295"]))),
                            ("extra_event_ids", V::n(gen.pick(&["0", "1", "2", "4294967295", "-1"]))),
                        ]),
                    ));
                }
                V::obj(&fields)
            }
            _ => {
                if gen.chance(80) {
                    return Vec::new();
                }
                odd_value(gen)
            }
        };
        let mut value = value;
        if gen.chance(25) {
            value.perturb(gen);
        }
        let mut bytes = value.json().into_bytes();
        if gen.chance(20) {
            bytes = mutate(gen, &bytes, &[]);
        }
        if gen.chance(2) {
            bytes.resize(wire::MAX_BODY_BYTES + gen.below(3), b' ');
        }
        bytes
    }

    fn request(&self, gen: &mut Gen) -> RawRequest {
        let (usual, template) = *gen.pick(ROUTES);
        let method = if gen.chance(80) { usual } else { *gen.pick(METHODS) };
        let mut path = String::new();
        for part in template.split('/').skip(1) {
            path.push('/');
            // An id where the route takes one, and now and then where it does not.
            if part.starts_with('{') || gen.chance(3) {
                path.push_str(&self.segment(gen));
            } else {
                path.push_str(part);
            }
        }
        if gen.chance(3) {
            path.push('/');
        }
        let wants_query = template.starts_with("/v1/") && usual == "GET";
        if (wants_query && gen.chance(90)) || gen.chance(5) {
            let mut pairs = Vec::new();
            for name in ["tenant", "service", "extra", "tenant"] {
                if gen.chance(if name == "extra" { 10 } else { 70 }) {
                    pairs.push(format!("{name}={}", gen.pick(QUERY_VALUES)));
                }
            }
            if gen.chance(5) {
                pairs.push((*gen.pick(&["&", "=", "tenant", "tenant=%", "%=%"])).to_owned());
            }
            path.push('?');
            path.push_str(&pairs.join("&"));
        }
        let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
        if gen.chance(80) {
            let content_type = if gen.chance(70) { CONTENT_TYPES[0] } else { *gen.pick(CONTENT_TYPES) };
            headers.push(("content-type".into(), content_type.as_bytes().to_vec()));
        }
        let key = |gen: &mut Gen| -> Vec<u8> {
            match gen.below(10) {
                0 => "k".repeat(*gen.pick(&[255usize, 256])).into_bytes(),
                1 => vec![0x80, 0xff, b'k'],
                2..=5 if !self.ids.is_empty() => self.ids[gen.below(self.ids.len())].clone().into_bytes(),
                _ => gen.pick(KEYS).as_bytes().to_vec(),
            }
        };
        if gen.chance(50) {
            headers.push(("idempotency-key".into(), key(gen)));
            if gen.chance(10) {
                headers.push(("Idempotency-Key".into(), key(gen)));
            }
        }
        if method == "PATCH" || gen.chance(5) {
            let values =
                ["1", "\"1\"", "2", "W/\"1\"", "*", "-1", "18446744073709551616", "", "\"", "1, 2", " 1 "];
            if gen.chance(60) {
                headers.push(("if-match".into(), gen.pick(&values).as_bytes().to_vec()));
                if gen.chance(10) {
                    headers.push(("If-Match".into(), gen.pick(&values).as_bytes().to_vec()));
                }
            }
        }
        if gen.chance(10) {
            headers.push(("x-replaylab-origin".into(), key(gen)));
        }
        if gen.chance(10) {
            headers.push(("x-replaylab-request-id".into(), key(gen)));
        }
        if gen.chance(3) {
            headers.push(("accept".into(), b"text/html".to_vec()));
        }
        let body = self.body(gen, method, template);
        RawRequest { method: method.to_owned(), path, headers, body }
    }

    /// Remembers the ids and keys a successful answer names.
    fn harvest(&mut self, body: &[u8]) {
        let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else { return };
        for name in ["ticket_id", "job_id", "id", "idempotency_key"] {
            let id = match fields.get(name) {
                Some(Value::String(id)) => id.clone(),
                Some(Value::Number(id)) => id.to_string(),
                _ => continue,
            };
            if self.ids.len() >= 16 {
                self.ids.remove(0);
            }
            self.ids.push(id);
        }
    }
}

/// The deliveries of one finished job under `webhook`, when they are at least
/// [`MAX_WEBHOOK_FANOUT`].
fn webhook_fanout(webhook: Option<&WebhookConfig>) -> Option<u64> {
    let webhook = webhook?;
    let fanout = 1 + u64::from(webhook.repeat_same_event) + u64::from(webhook.extra_event_ids);
    (fanout >= MAX_WEBHOOK_FANOUT).then_some(fanout)
}

/// Webhooks go nowhere: every connection attempt fails at once.
#[derive(Debug, Clone, Copy)]
struct NoNetwork;

impl wire::Connect for NoNetwork {
    fn connect(
        &self,
        host: &str,
        port: u16,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Box<dyn wire::Io>>> + Send>> {
        let message = format!("the fuzzer's downstream has no network ({host}:{port})");
        Box::pin(async move { Err(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, message)) })
    }
}

/// A response read whole.
struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

/// Sends `request` over one in-memory connection served by `router`.
async fn exchange(router: axum::Router, request: http::Request<Full<Bytes>>) -> Result<Reply, String> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = wire::serve_connection(server_io, router);
    let client = async move {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(client_io))
            .await
            .map_err(|error| format!("handshake failed: {error}"))?;
        let talk = async move {
            let response = sender
                .send_request(request)
                .await
                .map_err(|error| format!("no complete response: {error}"))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, 8 * 1024 * 1024)
                .collect()
                .await
                .map_err(|error| format!("the body could not be read: {error}"))?
                .to_bytes();
            Ok::<Reply, String>(Reply { status: parts.status.as_u16(), headers: parts.headers, body })
        };
        let (reply, _) = tokio::join!(talk, connection);
        reply
    };
    let (reply, ()) = tokio::join!(client, server);
    reply
}

/// The class index of a status, for the notes: 1xx..5xx, and "no answer".
fn class_of(status: u16) -> usize {
    usize::from(status / 100).clamp(1, 5)
}

/// Rewrites a path to its route's template, so that failures group by route.
fn route_of(path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = path.split('/').collect();
    for (_, template) in ROUTES {
        let parts: Vec<&str> = template.split('/').collect();
        if parts.len() == segments.len()
            && parts.iter().zip(&segments).all(|(part, segment)| part.starts_with('{') || part == segment)
        {
            return (*template).to_owned();
        }
    }
    "(no route)".into()
}

impl Fuzz for DownstreamFuzz {
    type Input = RawRequest;

    fn generate(&mut self, gen: &mut Gen, _n: u64) -> RawRequest {
        self.request(gen)
    }

    fn check(&mut self, raw: &RawRequest) -> Checked {
        let Some(request) = raw.build() else {
            self.unsendable += 1;
            return Checked::Fine;
        };
        self.sent += 1;
        let timeout = self.subject.timeout;
        let clock = self.clock.clone();
        let (runtime, downstream, router) = self.world();
        let router = router.clone();
        // Time passes between requests only, and the jobs it finishes finish before the next
        // request starts: a job reads the configuration checked after the request before.
        clock.fetch_add(CLOCK_STEP_MS, Ordering::Relaxed);
        downstream.clock_moved();
        runtime.block_on(async {
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
        });
        let answer =
            runtime.block_on(async move { tokio::time::timeout(timeout, exchange(router, request)).await });
        // Failures group by route, with the route's own methods apart from any other.
        let template = route_of(&raw.path);
        let known = ROUTES.iter().any(|(method, path)| *method == raw.method && *path == template);
        let route =
            if known { format!("{} {template}", raw.method) } else { format!("(other method) {template}") };
        let request_line = format!("{} {}", raw.method, one_line(&raw.path, 120));
        // Faults a request installed must not hold or drop the next one.
        downstream.clear_faults();
        let config = downstream.config();
        if let Some(fanout) = webhook_fanout(config.webhook.as_ref()) {
            // Put a sane configuration back before any job can finish under this one.
            downstream.set_config(DownstreamConfig { webhook: None, ..config });
            return broken(
                "resources",
                format!("{route} accepted a webhook fan-out of {MAX_WEBHOOK_FANOUT} or more"),
                format!(
                    "{request_line}: the downstream accepted a configuration under which every finishing job \
                     builds {fanout} webhook deliveries in memory at once (the process aborts when they do not fit)"
                ),
            );
        }
        let reply = match answer {
            Err(_) => {
                self.by_class[0] += 1;
                // The connection may still hold the downstream's state: start afresh.
                self.world = None;
                return broken(
                    "hang",
                    format!("no answer in time to {route}"),
                    format!("{request_line}: no answer within {}", crate::text::duration(timeout)),
                );
            }
            Ok(Err(error)) => {
                self.by_class[0] += 1;
                return broken(
                    "malformed",
                    format!("no answer to {route}"),
                    format!("{request_line}: {error}"),
                );
            }
            Ok(Ok(reply)) => reply,
        };
        self.by_class[class_of(reply.status)] += 1;
        let content_type = reply
            .headers
            .get(http::header::CONTENT_TYPE)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let media = content_type
            .as_deref()
            .map(|value| value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
        let is_json = matches!(media.as_deref(), Some("application/json" | "application/problem+json"));
        let parsed = serde_json::from_slice::<Value>(&reply.body);
        let head = raw.method == "HEAD";
        if is_json && !head && !reply.body.is_empty() && parsed.is_err() {
            return broken(
                "malformed",
                format!(
                    "{} with a {} body that is not JSON on {route}",
                    reply.status,
                    media.unwrap_or_default()
                ),
                format!("{request_line}: {} body {}", reply.status, escape(&reply.body, 200)),
            );
        }
        if reply.status >= 400 {
            let described = format!(
                "{} {} on {route}",
                reply.status,
                content_type.as_deref().unwrap_or("(no content type)")
            );
            if !is_json {
                return broken(
                    JSON_ERROR_PROPERTY,
                    described,
                    format!(
                        "{request_line}: {} {} without a JSON problem body: {}",
                        reply.status,
                        content_type.as_deref().unwrap_or("(no content type)"),
                        escape(&reply.body, 200)
                    ),
                );
            }
            if !head {
                match parsed {
                    Ok(Value::Object(problem)) => {
                        let status = problem.get("status").and_then(Value::as_u64);
                        if media.as_deref() == Some("application/problem+json")
                            && status != Some(u64::from(reply.status))
                        {
                            let claimed = status.map_or("missing".to_owned(), |status| status.to_string());
                            return broken(
                                JSON_ERROR_PROPERTY,
                                format!("{described}: problem status {claimed}"),
                                format!(
                                    "{request_line}: {}, but the problem's `status` is {claimed}: {}",
                                    reply.status,
                                    escape(&reply.body, 200)
                                ),
                            );
                        }
                    }
                    _ => {
                        return broken(
                            JSON_ERROR_PROPERTY,
                            format!("{described}: not a JSON object"),
                            format!(
                                "{request_line}: {} with an error body that is not a JSON object: {}",
                                reply.status,
                                escape(&reply.body, 200)
                            ),
                        )
                    }
                }
            }
        } else if (200..300).contains(&reply.status) {
            self.harvest(&reply.body);
        }
        Checked::Fine
    }

    fn bytes(&self, raw: &RawRequest) -> Vec<u8> {
        raw.to_bytes()
    }

    fn recover(&mut self) {
        self.world = None;
    }

    fn notes(&self) -> String {
        let [none, _, ok, redirect, client, server] = self.by_class;
        format!(
            "{} sent ({} could not be built), answers 2xx={ok} 3xx={redirect} 4xx={client} 5xx={server} none={none}",
            self.sent, self.unsendable
        )
    }
}

// ----------------------------------------------------------------------- fingerprint

/// One call: the contract it names and the call as the worker receives it (JSON).
#[derive(Debug, Clone)]
struct CallInput {
    call: String,
}

struct FingerprintFuzz {
    subject: FingerprintSubject,
    contracts: ContractSet,
    tools: Vec<(String, String)>,
    /// Argument texts the built-in scenarios send, per tool and version.
    examples: BTreeMap<(String, String), Vec<Vec<u8>>>,
    fingerprinted: u64,
    material_checks: u64,
}

impl FingerprintFuzz {
    fn new(subject: FingerprintSubject) -> Self {
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
fn call_json(tenant: &str, tool: &str, version: &str, arguments: &str) -> String {
    format!(
        r#"{{"tenant":{},"environment":"production","workflow_id":"run_1","step_id":"step_1","tool":{},"tool_version":{},"arguments":{arguments},"actor":"agent","call_id":"call_1"}}"#,
        json_string(tenant),
        json_string(tool),
        json_string(version)
    )
}

/// Arguments for `tool`, mostly valid.
fn argument_value(gen: &mut Gen, tool: &str) -> V {
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

fn argument_of(gen: &mut Gen, name: &str) -> V {
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
fn nested_value(gen: &mut Gen, depth: u32) -> V {
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

fn shuffle<T>(gen: &mut Gen, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = gen.below(i + 1);
        items.swap(i, j);
    }
}

/// `value` as JSON text with its object keys in a random order, random whitespace between
/// tokens, and some characters of its strings written as `\u` escapes: the same JSON value.
fn rewrite(gen: &mut Gen, value: &Value) -> String {
    let mut out = String::new();
    write_scrambled(gen, value, &mut out);
    out
}

fn space(gen: &mut Gen, out: &mut String) {
    if gen.chance(40) {
        for _ in 0..gen.count(3) {
            out.push(*gen.pick(&[' ', '\t', '\n', '\r']));
        }
    }
}

fn write_scrambled(gen: &mut Gen, value: &Value, out: &mut String) {
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

fn write_escaped(gen: &mut Gen, text: &str, out: &mut String) {
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
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// A valid value for `name` of type `kind` that differs from `old`.
fn changed_value(kind: ArgumentType, old: &Value) -> Value {
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
    fn fingerprint(&self, contract: &ToolContract, call: &ToolCall) -> Result<Fingerprint, ContractError> {
        (self.subject.fingerprint)(contract, call)
    }

    /// The same call with other argument text.
    fn with_arguments(call: &ToolCall, arguments: &str) -> Option<ToolCall> {
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

// ----------------------------------------------------------------------- case

struct CaseFuzz {
    subject: CaseSubject,
    corpus: Vec<Vec<u8>>,
    parsed: u64,
    runs: u64,
    verdicts: BTreeMap<&'static str, u64>,
    /// Failed runs by the oracles that failed (beside scenario expectations, which mutated
    /// cases often break): for triage, not a property.
    oracles: BTreeMap<String, u64>,
    slowest: f64,
}

impl CaseFuzz {
    fn new(subject: CaseSubject) -> Self {
        let corpus = (0..CASE_CORPUS)
            .map(|seed| {
                let case = crate::explore::case_for_seed(seed * 7919);
                format!(
                    "# Found by `replaylab explore` at seed {}.\n{}",
                    case.seed,
                    case.to_scenario().to_toml()
                )
                .into_bytes()
            })
            .collect();
        Self {
            subject,
            corpus,
            parsed: 0,
            runs: 0,
            verdicts: BTreeMap::new(),
            oracles: BTreeMap::new(),
            slowest: 0.0,
        }
    }
}

impl Fuzz for CaseFuzz {
    type Input = String;

    fn generate(&mut self, gen: &mut Gen, _n: u64) -> String {
        let base = &self.corpus[gen.below(self.corpus.len())];
        let mut bytes = match gen.below(10) {
            0 => base.clone(),
            1..=2 => {
                // Structured: another seed, another step from a fresh generator.
                let mut text = String::from_utf8_lossy(base).into_owned();
                if gen.chance(50) {
                    text = text
                        .lines()
                        .map(|line| {
                            if line.starts_with("seed = ") {
                                format!("seed = {}", gen.pick(NUMBERS))
                            } else {
                                line.to_owned()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join("\n");
                }
                text.push('\n');
                text.push_str(&step_text(gen));
                text.into_bytes()
            }
            _ => mutate(gen, base, &self.corpus),
        };
        if gen.chance(10) {
            bytes = mutate(gen, &bytes, &self.corpus);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn check(&mut self, text: &String) -> Checked {
        // As `replaylab run --case FILE` reads it.
        let Ok(scenario) = (self.subject.parse)(text, "fuzz-case.toml") else { return Checked::Fine };
        let Some(seed) = scenario.seed else { return Checked::Fine };
        self.parsed += 1;
        if !(self.parsed - 1).is_multiple_of(self.subject.run_every.max(1)) {
            return Checked::Fine;
        }
        if let Some(webhook) = scenario.downstream.webhook {
            let config = WebhookConfig {
                url: String::new(),
                repeat_same_event: webhook.repeat_same_event,
                extra_event_ids: webhook.extra_event_ids,
            };
            if let Some(fanout) = webhook_fanout(Some(&config)) {
                // Not run: a finishing job would build every delivery in memory at once.
                return broken(
                    "resources",
                    format!("a case with a webhook fan-out of {MAX_WEBHOOK_FANOUT} or more parses"),
                    format!("the case parses with {fanout} webhook deliveries per finished job (not run)"),
                );
            }
        }
        self.runs += 1;
        let started = Instant::now();
        let record = runner::run(&scenario, seed, &self.subject.executor);
        self.slowest = self.slowest.max(started.elapsed().as_secs_f64());
        let verdict = record.result.verdict;
        let name = verdict.as_str();
        *self.verdicts.entry(name).or_insert(0) += 1;
        if !matches!(name, "pass" | "fail" | "unknown" | "crashed") {
            return broken(
                "verdict",
                format!("unknown verdict {name}"),
                format!("the run's verdict is {name}"),
            );
        }
        for violation in &record.result.violations {
            if violation.oracle != "expect" {
                *self.oracles.entry(violation.oracle.clone()).or_insert(0) += 1;
            }
        }
        if verdict == Verdict::Pass && !record.result.violations.is_empty() {
            return broken(
                "verdict",
                "pass with violations",
                format!(
                    "the run passed with violations: {}",
                    record.result.violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
                ),
            );
        }
        Checked::Fine
    }

    fn bytes(&self, text: &String) -> Vec<u8> {
        text.clone().into_bytes()
    }

    fn notes(&self) -> String {
        let verdicts: Vec<String> =
            self.verdicts.iter().map(|(name, count)| format!("{name} {count}")).collect();
        let oracles: Vec<String> =
            self.oracles.iter().map(|(oracle, count)| format!("{oracle} {count}")).collect();
        format!(
            "{} parsed, {} run ({}; oracle violations: {}; slowest run {:.2}s)",
            self.parsed,
            self.runs,
            if verdicts.is_empty() { "none".to_owned() } else { verdicts.join(", ") },
            if oracles.is_empty() { "none".to_owned() } else { oracles.join(", ") },
            self.slowest
        )
    }
}

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
