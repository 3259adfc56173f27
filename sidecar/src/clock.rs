//! Time, injectable. Logic never reads the process clocks directly: it asks a [`Clock`], so the
//! deterministic simulator and unit tests can pause the monotonic clock, jump the wall clock (a
//! suspended VM), or both.
//!
//! The monotonic side is `tokio::time::Instant`, so `tokio::time::pause()` drives it in tests.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// A source of monotonic and wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic now. Stands still while the machine is suspended.
    fn now(&self) -> Instant;
    /// Wall-clock now. Jumps forward across a suspend (and may jump either way when adjusted).
    fn wall(&self) -> SystemTime;

    /// Wall-clock now in Unix milliseconds (0 before the epoch).
    fn wall_unix_ms(&self) -> i64 {
        self.wall()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// The process clocks: tokio's monotonic clock and the system wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    // The one place logic's wall clock comes from the process; everything else asks a Clock.
    #[allow(clippy::disallowed_methods)]
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// The process clocks, shared.
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

/// A clock for tests and the simulator: the monotonic side follows tokio's (paused or not) clock
/// plus a manual offset, the wall side is a base plus the monotonic elapsed time plus its own
/// offset. `suspend(d)` models a VM suspend: the wall clock jumps by `d`, the monotonic clock
/// does not.
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<Mutex<ManualState>>,
}

#[derive(Debug)]
struct ManualState {
    origin: Instant,
    wall_origin: SystemTime,
    mono_offset: Duration,
    wall_offset: Duration,
    wall_back: Duration,
}

impl ManualClock {
    /// A clock whose wall side starts at `wall_origin` now.
    pub fn new(wall_origin: SystemTime) -> Self {
        ManualClock {
            inner: Arc::new(Mutex::new(ManualState {
                origin: Instant::now(),
                wall_origin,
                mono_offset: Duration::ZERO,
                wall_offset: Duration::ZERO,
                wall_back: Duration::ZERO,
            })),
        }
    }

    /// Moves both clocks forward by `d` (on top of tokio's own time).
    pub fn advance(&self, d: Duration) {
        let mut s = self.inner.lock().expect("clock lock");
        s.mono_offset += d;
        s.wall_offset += d;
    }

    /// A VM suspend of length `d`: the wall clock jumps, the monotonic clock stands still.
    pub fn suspend(&self, d: Duration) {
        self.inner.lock().expect("clock lock").wall_offset += d;
    }

    /// The wall clock is stepped back by `d` (an NTP correction, an operator's `date -s`); the
    /// monotonic clock does not move.
    pub fn step_wall_back(&self, d: Duration) {
        self.inner.lock().expect("clock lock").wall_back += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        let s = self.inner.lock().expect("clock lock");
        Instant::now() + s.mono_offset
    }
    fn wall(&self) -> SystemTime {
        let s = self.inner.lock().expect("clock lock");
        s.wall_origin + (Instant::now() - s.origin) + s.wall_offset - s.wall_back
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn suspend_moves_wall_but_not_monotonic() {
        let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000));
        let (m0, w0) = (clock.now(), clock.wall());
        clock.suspend(Duration::from_secs(30));
        assert_eq!(clock.now(), m0);
        assert_eq!(
            clock.wall().duration_since(w0).unwrap(),
            Duration::from_secs(30)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(clock.now() - m0, Duration::from_secs(2));
        assert_eq!(
            clock.wall().duration_since(w0).unwrap(),
            Duration::from_secs(32)
        );
    }
}
