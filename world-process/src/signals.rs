//! No process outlives the harness that started it, however the harness is stopped.
//!
//! Every worker is the leader of a process group of its own (so that a crash kills what it
//! forked too), which is also why the terminal's Ctrl-C, sent to the foreground group, never
//! reaches it: a harness stopped by a signal (Ctrl-C, a CI runner's `SIGTERM` at its timeout,
//! a closed terminal's `SIGHUP`) used to leave its servers running, an HTTP server listening on
//! its port for good, a stdio server's children too. Here the harness keeps the groups it
//! started ([`register`] when one starts, [`forget`] when it is killed) and, once
//! [`end_processes_on_signals`] was called, a signal kills them all, removes the runs'
//! directories and ends the harness with `128 + the signal's number`, as a shell reports a
//! process a signal ended.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard, Once};

/// What a shell adds to a signal's number for the exit status of a process it ended.
const SIGNALLED: i32 = 128;

/// The process groups started and not killed yet, by their leader's process id.
static LIVE: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

fn live() -> MutexGuard<'static, BTreeSet<u32>> {
    // A thread that panicked holding the set left it whole: every change is one insert or remove.
    LIVE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `spawn` (which starts one process group and returns its leader's id, 0 if it has none)
/// and records the group, with no signal handled in between: a group started while the
/// signal's handler ends the others waits for it, and is never started.
pub(crate) fn register<T>(spawn: impl FnOnce() -> Result<(T, u32), String>) -> Result<(T, u32), String> {
    let mut live = live();
    let (started, pid) = spawn()?;
    if pid != 0 {
        live.insert(pid);
    }
    Ok((started, pid))
}

/// The group `pid` leads was killed (or never started): a signal leaves it alone.
pub(crate) fn forget(pid: u32) {
    live().remove(&pid);
}

/// From now on, `SIGINT`, `SIGTERM` or `SIGHUP` kills every process group this process started
/// and has not killed yet (`SIGKILL`, as a crash), removes the runs' directories, says so on
/// stderr and exits with `128 + the signal's number` (130, 143, 129). The command calls this
/// once it is to start processes; calling it again does nothing. Without it, a signal ends the
/// harness as it ends any program, and its processes live on.
pub fn end_processes_on_signals() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let (installed, done) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("replaylab-signals".into()).spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build();
            let Ok(runtime) = runtime else {
                let _ = installed.send(());
                return;
            };
            runtime.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let listeners = (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                    signal(SignalKind::hangup()),
                );
                let _ = installed.send(());
                let (Ok(mut interrupt), Ok(mut terminate), Ok(mut hangup)) = listeners else { return };
                let (name, number) = tokio::select! {
                    _ = interrupt.recv() => ("SIGINT", 2),
                    _ = terminate.recv() => ("SIGTERM", 15),
                    _ = hangup.recv() => ("SIGHUP", 1),
                };
                end_everything(name, number);
            });
        });
        // The handlers are in place before the first process starts.
        if spawned.is_ok() {
            let _ = done.recv();
        }
    });
}

/// Kills every live group, removes this process's run directories and exits; holds the set
/// until the end so that no group starts meanwhile.
fn end_everything(name: &str, number: i32) -> ! {
    let live = live();
    let mut survivors = Vec::new();
    for &pid in live.iter() {
        if super::sigkill_group(pid).is_err() && !super::is_dead(pid) {
            survivors.push(pid);
        }
    }
    let removed = remove_run_directories();
    let mut said = format!(
        "replaylab: stopped by {name}: killed the {} process group(s) it had started (SIGKILL) and removed {removed} run director{}; {}",
        live.len(),
        if removed == 1 { "y" } else { "ies" },
        world::process::left_behind().unwrap_or_else(|| "no report was written".to_owned()),
    );
    if !survivors.is_empty() {
        let pids: Vec<String> = survivors.iter().map(u32::to_string).collect();
        said.push_str(&format!("; could not kill the group(s) of {}", pids.join(", ")));
    }
    eprintln!("{said}");
    std::process::exit(SIGNALLED + number);
}

/// Removes the run directories this process made ([`super::run_directory`]'s prefix and this
/// process's id); returns how many.
fn remove_run_directories() -> usize {
    let prefix = format!("{}{}-", super::RUN_DIRECTORY_PREFIX, std::process::id());
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return 0 };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|entry| std::fs::remove_dir_all(entry.path()).is_ok())
        .count()
}
