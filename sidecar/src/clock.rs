//! Time, injectable. Logic never reads the process clocks directly: it asks a [`Clock`], so the
//! deterministic simulator and unit tests can pause the monotonic clock, jump the wall clock (a
//! suspended VM), or both.
//!
//! The monotonic side is `tokio::time::Instant`, so `tokio::time::pause()` drives it in tests.
//!
//! A third clock, where the platform has one, is the *boot* clock (Linux `CLOCK_BOOTTIME`): it
//! runs on across a suspend like the wall clock, and is never stepped like the monotonic clock.
//! The lease clock reads all three, because each of the other two can miss a suspend: the
//! monotonic clock always does, and the wall clock does when it is stepped back around it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// A source of monotonic and wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic now. Stands still while the machine is suspended.
    fn now(&self) -> Instant;
    /// Wall-clock now. Jumps forward across a suspend (and may jump either way when adjusted).
    fn wall(&self) -> SystemTime;

    /// Boot-clock now: time since an arbitrary origin on a clock that keeps running while the
    /// machine is suspended and is never stepped (Linux `CLOCK_BOOTTIME`). `None` where the
    /// platform has no such clock; then only the wall clock can see a suspend.
    fn boot(&self) -> Option<Duration> {
        None
    }

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
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn boot(&self) -> Option<Duration> {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        Some(Duration::new(
            u64::try_from(t.tv_sec).ok()?,
            u32::try_from(t.tv_nsec).ok()?,
        ))
    }
}

/// The process clocks, shared.
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

/// A clock for tests and the simulator: the monotonic side follows tokio's (paused or not) clock
/// plus a manual offset, the wall side is a base plus the monotonic elapsed time plus its own
/// offset. `suspend(d)` models a VM suspend: the wall clock (and the boot clock, if the clock
/// has one) jumps by `d`, the monotonic clock does not. Without [`ManualClock::with_boot_clock`]
/// it has no boot clock, as on a platform without `CLOCK_BOOTTIME`.
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
    /// The boot clock, if this clock has one: mono elapsed plus every suspend.
    boot: Option<Duration>,
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
                boot: None,
            })),
        }
    }

    /// The same clock with a boot clock (as on Linux), starting at zero now.
    pub fn with_boot_clock(self) -> Self {
        self.inner.lock().expect("clock lock").boot = Some(Duration::ZERO);
        self
    }

    /// Moves both clocks forward by `d` (on top of tokio's own time).
    pub fn advance(&self, d: Duration) {
        let mut s = self.inner.lock().expect("clock lock");
        s.mono_offset += d;
        s.wall_offset += d;
    }

    /// A VM suspend of length `d`: the wall clock and the boot clock jump, the monotonic clock
    /// stands still.
    pub fn suspend(&self, d: Duration) {
        let mut s = self.inner.lock().expect("clock lock");
        s.wall_offset += d;
        if let Some(boot) = s.boot.as_mut() {
            *boot += d;
        }
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
    fn boot(&self) -> Option<Duration> {
        let s = self.inner.lock().expect("clock lock");
        // Every suspend went into `boot`; the monotonic advance (tokio's and `advance`'s) is
        // added here, so the boot clock never runs behind the monotonic one.
        s.boot
            .map(|suspended| suspended + (Instant::now() - s.origin) + s.mono_offset)
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
        assert_eq!(clock.boot(), None, "no boot clock unless asked for");
    }

    #[tokio::test(start_paused = true)]
    async fn the_boot_clock_counts_suspends_and_ignores_wall_steps() {
        let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000)).with_boot_clock();
        let b0 = clock.boot().unwrap();
        clock.step_wall_back(Duration::from_secs(100));
        clock.suspend(Duration::from_secs(30));
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(clock.boot().unwrap() - b0, Duration::from_secs(33));
    }

    #[test]
    fn the_system_boot_clock_never_runs_behind_the_monotonic_one() {
        let clock = SystemClock;
        let linux = cfg!(target_os = "linux");
        let Some(b0) = clock.boot() else {
            // Only where the platform has CLOCK_BOOTTIME; the lease clock then reads two clocks.
            assert!(!linux, "Linux has CLOCK_BOOTTIME");
            return;
        };
        let m0 = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        std::thread::sleep(Duration::from_millis(20));
        let m1 = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let b1 = clock.boot().unwrap();
        let mono = Duration::new(m1.tv_sec as u64, m1.tv_nsec as u32)
            - Duration::new(m0.tv_sec as u64, m0.tv_nsec as u32);
        assert!(
            b1 - b0 >= mono,
            "boot advanced {:?}, monotonic {mono:?}",
            b1 - b0
        );
    }
}
