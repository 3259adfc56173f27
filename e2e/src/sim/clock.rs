//! A host's clocks in the simulation, with VM suspend and backward wall-clock steps.
//!
//! Turmoil gives every host its own paused tokio runtime, so `tokio::time::Instant` is only
//! comparable within one host. A [`SimClock`] is created inside its host and only read there.
//!
//! Suspend is modelled as a real VM suspend looks to the sidecar: while suspended, *both* clocks
//! stand still (the host observes no time passing); on resume the wall clock jumps to the true
//! time and the monotonic clock carries on from where it stood (it lost the suspended span).
//! The host's tokio timers are not frozen (turmoil cannot stop polling one host), so the rest of
//! the model freezes everything else the host could observe: its network links are held, its
//! membership-store calls hang, its app answers nothing (see `host.rs`).

use sigx_sidecar::clock::Clock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

#[derive(Debug)]
struct State {
    origin: Instant,
    wall_origin: SystemTime,
    suspended_since: Option<Instant>,
    /// Monotonic time lost to suspends so far.
    lost: Duration,
    /// How far the wall clock was stepped back so far (NTP corrections, `date -s`).
    wall_back: Duration,
    /// The host's skew against true time (see [`Skew`]).
    skew: Skew,
    /// Whether the host has a boot clock (Linux `CLOCK_BOOTTIME`): true time since the
    /// clock's start, frozen while suspended like the others and caught up on resume like the
    /// wall clock, but never stepped and never skewed.
    boot: bool,
}

/// How far a host's wall clock is off true time: `offset_ms` at its start (either way) and a
/// rate error of `ppm` parts per million (fast when positive) from then on. Hosts never compare
/// their wall clocks with each other's (expiry is judged on the observer's monotonic clock, a
/// turn's not-after on its own pod's wall clock), so skew between hosts must be harmless.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skew {
    pub offset_ms: i64,
    pub ppm: i64,
}

impl Skew {
    /// How much the skewed clock has added to true time after `elapsed` of true time.
    fn error_ns(self, elapsed: Duration) -> i128 {
        i128::from(self.offset_ms) * 1_000_000
            + elapsed.as_nanos() as i128 * i128::from(self.ppm) / 1_000_000
    }
}

/// One host's monotonic and wall clocks.
#[derive(Debug, Clone)]
pub struct SimClock {
    state: Arc<Mutex<State>>,
}

impl SimClock {
    /// A clock whose wall side reads `wall_origin` now. Call inside the host's runtime.
    pub fn new(wall_origin: SystemTime) -> Self {
        Self::skewed(wall_origin, Skew::default())
    }

    /// A clock whose wall side reads `wall_origin` off by `skew` now, and drifts at its rate.
    pub fn skewed(wall_origin: SystemTime, skew: Skew) -> Self {
        SimClock {
            state: Arc::new(Mutex::new(State {
                origin: Instant::now(),
                wall_origin,
                suspended_since: None,
                lost: Duration::ZERO,
                wall_back: Duration::ZERO,
                skew,
                boot: false,
            })),
        }
    }

    /// The same clock with a boot clock (as on Linux). Without one, only the wall clock can
    /// see a suspend, as on a platform without `CLOCK_BOOTTIME`.
    pub fn with_boot_clock(self) -> Self {
        self.state.lock().expect("clock lock").boot = true;
        self
    }

    /// Freezes both clocks (inside the host's runtime).
    pub fn suspend(&self) {
        let mut s = self.state.lock().expect("clock lock");
        if s.suspended_since.is_none() {
            s.suspended_since = Some(Instant::now());
        }
    }

    /// Resumes: the wall clock jumps to the true time, the monotonic one lost the span.
    pub fn resume(&self) {
        self.resume_stepped_back(Duration::ZERO);
    }

    /// Resumes with the wall clock stepped back by `back` in the same instant, so no reading
    /// falls between the suspend and the step (NTP correcting a clock right after a resume).
    pub fn resume_stepped_back(&self, back: Duration) {
        let mut s = self.state.lock().expect("clock lock");
        if let Some(since) = s.suspended_since.take() {
            s.lost += Instant::now() - since;
        }
        s.wall_back += back;
    }
}

impl SimClock {
    /// Steps the wall clock back by `d`; the monotonic clock does not move.
    pub fn step_wall_back(&self, d: Duration) {
        self.state.lock().expect("clock lock").wall_back += d;
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        let s = self.state.lock().expect("clock lock");
        let t = s.suspended_since.unwrap_or_else(Instant::now);
        t.checked_sub(s.lost).unwrap_or(s.origin)
    }
    fn wall(&self) -> SystemTime {
        let s = self.state.lock().expect("clock lock");
        let t = s.suspended_since.unwrap_or_else(Instant::now);
        let elapsed = t - s.origin;
        let error = s.skew.error_ns(elapsed);
        let wall = s.wall_origin + elapsed - s.wall_back;
        let error_abs = Duration::from_nanos(error.unsigned_abs() as u64);
        if error >= 0 {
            wall + error_abs
        } else {
            wall - error_abs
        }
    }
    fn boot(&self) -> Option<Duration> {
        let s = self.state.lock().expect("clock lock");
        let t = s.suspended_since.unwrap_or_else(Instant::now);
        s.boot.then(|| t - s.origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime on paused time, as turmoil gives each host.
    fn paused() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }

    #[test]
    fn a_skewed_wall_clock_starts_off_by_its_offset_and_drifts_at_its_rate() {
        paused().block_on(async {
            let origin = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
            let ahead = SimClock::skewed(
                origin,
                Skew {
                    offset_ms: 5_000,
                    ppm: 500,
                },
            );
            let behind = SimClock::skewed(
                origin,
                Skew {
                    offset_ms: -5_000,
                    ppm: -500,
                },
            );
            let true_clock = SimClock::new(origin);
            let m0 = ahead.now();
            assert_eq!(ahead.wall(), origin + Duration::from_secs(5));
            assert_eq!(behind.wall(), origin - Duration::from_secs(5));
            tokio::time::sleep(Duration::from_secs(100)).await;
            let t = origin + Duration::from_secs(100);
            assert_eq!(true_clock.wall(), t);
            // 500 ppm of 100 s is 50 ms.
            assert_eq!(ahead.wall(), t + Duration::from_millis(5_050));
            assert_eq!(behind.wall(), t - Duration::from_millis(5_050));
            // The monotonic side is never skewed.
            assert_eq!(ahead.now() - m0, Duration::from_secs(100));
        });
    }

    #[test]
    fn the_boot_clock_sees_a_suspend_that_a_wall_step_hides() {
        paused().block_on(async {
            let origin = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
            let clock = SimClock::new(origin).with_boot_clock();
            assert_eq!(SimClock::new(origin).boot(), None);
            let (m0, w0, b0) = (clock.now(), clock.wall(), clock.boot().unwrap());
            clock.suspend();
            tokio::time::sleep(Duration::from_secs(20)).await;
            assert_eq!(clock.boot().unwrap(), b0, "frozen while suspended");
            assert_eq!(clock.wall(), w0, "frozen while suspended");
            clock.resume_stepped_back(Duration::from_secs(30));
            assert_eq!(clock.now(), m0, "the monotonic clock lost the suspend");
            assert!(
                clock.wall() < w0,
                "the step hides the suspend on the wall side"
            );
            assert_eq!(clock.boot().unwrap() - b0, Duration::from_secs(20));
        });
    }
}
