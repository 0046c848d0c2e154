//! The guarded runner: each input under `catch_unwind` with the panic hook silenced, a finding per panic or broken property, findings printed and saved.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::gen::*;
use crate::model::*;

thread_local! {
    /// Whether this thread is fuzzing (its panics are recorded, not printed).
    static SILENCED: Cell<u32> = const { Cell::new(0) };
    /// The first panic seen on this thread during the current input.
    static CAUGHT: RefCell<Option<String>> = const { RefCell::new(None) };
}

pub(crate) type Hook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Send + Sync + 'static>;

/// The hook that was installed before the first fuzzing thread silenced panics, and how many
/// threads are fuzzing now.
pub(crate) static HOOK: Mutex<(usize, Option<Arc<Hook>>)> = Mutex::new((0, None));

/// Silences panics on this thread while it lives: the first guard in the process installs a
/// hook that records the panics of fuzzing threads and passes the others' to the previous
/// hook; the last guard dropped puts the previous hook back.
pub(crate) struct Silence;

impl Silence {
    pub(crate) fn new() -> Silence {
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
        (Err(payload), None) => Err(judge::text::panic_message(payload.as_ref())),
    }
}

/// What one input did.
#[derive(Debug)]
pub(crate) enum Checked {
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

pub(crate) fn broken(
    property: &'static str,
    signature: impl Into<String>,
    message: impl Into<String>,
) -> Checked {
    Checked::Broken { property, signature: signature.into(), message: message.into() }
}

/// One target's generator and checker.
pub(crate) trait Fuzz {
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

pub(crate) fn drive<F: Fuzz>(
    target: Target,
    mut fuzz: F,
    inputs: u64,
    seed: u64,
    out: Option<&Path>,
) -> TargetReport {
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

pub(crate) fn save(dir: &Path, target: Target, n: u64, bytes: &[u8]) -> Option<PathBuf> {
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
pub(crate) fn panic_location(message: &str) -> String {
    let message = message.strip_prefix("(caught inside) ").unwrap_or(message);
    message
        .strip_prefix("panicked at ")
        .and_then(|rest| rest.split_once('\n').map(|(location, _)| location.trim_end_matches(':')))
        .map_or_else(|| one_line(message, 120), str::to_owned)
}
