//! The world clock of one run: turmoil's simulated time plus the idle time the runner skipped.
//!
//! turmoil costs the same wall time for every tick, busy or idle, and most of a run's
//! simulated time is waiting (a settle, a lease running out, a retention window). When nothing
//! in the world is active, the runner skips ahead instead of stepping (see
//! `runner::Runner::run_for`): it adds the skipped span here. Every clock the harness hands
//! out (the executor's, the downstream's, the queue's, the history's) reads this one, so a skip
//! looks to everybody like time that passed with nothing happening.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Simulated milliseconds since the start of the run, skips included. Clones share the time.
#[derive(Debug, Clone, Default)]
pub struct WorldClock {
    inner: Arc<ClockInner>,
}

#[derive(Debug, Default)]
struct ClockInner {
    /// For the black-box world: real time since the run's processes were up (set then by
    /// [`WorldClock::start_real`]; the clock reads 0 until then), instead of turmoil's.
    real: Option<std::sync::OnceLock<std::time::Instant>>,
    /// turmoil's elapsed time as the runner last saw it, for readings outside any host.
    outside_ms: AtomicU64,
    /// Idle time skipped so far.
    skipped_ms: AtomicU64,
}

impl WorldClock {
    /// A clock of the real world (the black-box world): milliseconds of real time since
    /// [`WorldClock::start_real`] is called (0 before: starting the processes is off the
    /// scenario's clock). Nothing is ever skipped on it.
    pub fn real() -> Self {
        Self {
            inner: Arc::new(ClockInner { real: Some(std::sync::OnceLock::new()), ..ClockInner::default() }),
        }
    }

    /// Starts a real clock (once; later calls and simulated clocks are unchanged).
    pub fn start_real(&self) {
        if let Some(real) = &self.inner.real {
            real.get_or_init(std::time::Instant::now);
        }
    }

    /// Now: on a real clock, real time since it started; inside a simulated host, that host's
    /// turmoil time; outside (the runner), the time the runner last set; plus every skip so far.
    pub fn now_ms(&self) -> u64 {
        if let Some(real) = &self.inner.real {
            return real
                .get()
                .map_or(0, |started| u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        }
        let simulated = match turmoil::sim_elapsed() {
            Some(elapsed) => u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            None => self.inner.outside_ms.load(Ordering::Relaxed),
        };
        simulated.saturating_add(self.skipped_ms())
    }

    /// Sets turmoil's elapsed time, for readings outside a simulated host (the runner calls
    /// this after every step).
    pub fn set_simulated_ms(&self, simulated_ms: u64) {
        self.inner.outside_ms.store(simulated_ms, Ordering::Relaxed);
    }

    /// Moves the clock on by `by_ms` without stepping the simulation.
    pub fn skip(&self, by_ms: u64) {
        self.inner.skipped_ms.fetch_add(by_ms, Ordering::Relaxed);
    }

    /// Idle time skipped so far.
    pub fn skipped_ms(&self) -> u64 {
        self.inner.skipped_ms.load(Ordering::Relaxed)
    }
}

impl wire::Clock for WorldClock {
    fn now_ms(&self) -> u64 {
        WorldClock::now_ms(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_host_the_clock_reads_the_runners_time_plus_skips() {
        let clock = WorldClock::default();
        let reader = clock.clone();
        clock.set_simulated_ms(120);
        assert_eq!(reader.now_ms(), 120);
        clock.skip(5_000);
        assert_eq!(reader.now_ms(), 5_120);
        clock.set_simulated_ms(130);
        clock.skip(70);
        assert_eq!(reader.now_ms(), 5_200);
        assert_eq!(reader.skipped_ms(), 5_070);
    }

    #[test]
    fn a_real_clock_reads_zero_until_it_starts() {
        let clock = WorldClock::real();
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(clock.now_ms(), 0);
        clock.start_real();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let read = clock.now_ms();
        assert!((30..30_000).contains(&read), "{read}");
        clock.start_real();
        assert!(clock.now_ms() >= read, "a second start does not restart it");
    }
}
