//! Time sources. Inside a simulation time must be simulated: the harness supplies a clock
//! over turmoil's virtual time; [`SystemClock`] is for real ports only.

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
