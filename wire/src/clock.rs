//! Time sources. Inside a simulation time must be simulated: the harness supplies a clock
//! over turmoil's virtual time; [`SystemClock`] is for real ports only.

use std::time::Duration;

use tokio::sync::Notify;

/// A clock in milliseconds.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the clock's origin.
    fn now_ms(&self) -> u64;
}

impl<F: Fn() -> u64 + Send + Sync + 'static> Clock for F {
    fn now_ms(&self) -> u64 {
        self()
    }
}

/// Wall-clock time in milliseconds since the Unix epoch. Never use it inside a simulation.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// Waits until `now_ms()` reads `due_ms`, for a clock that can jump ahead of tokio's time (the
/// simulation's world clock skips idle time): sleeps for the rest of the wait, and re-checks
/// whenever `moved` is notified. `moved` is registered before the sleep starts, so a jump
/// between the check and the sleep is not missed.
pub async fn until_clock_reads(now_ms: impl Fn() -> u64, moved: &Notify, due_ms: u64) {
    loop {
        let now = now_ms();
        if now >= due_ms {
            return;
        }
        let jumped = moved.notified();
        tokio::select! {
            biased;
            () = jumped => {}
            () = tokio::time::sleep(Duration::from_millis(due_ms - now)) => {}
        }
    }
}
