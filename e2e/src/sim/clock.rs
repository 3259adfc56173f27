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
}

/// One host's monotonic and wall clocks.
#[derive(Debug, Clone)]
pub struct SimClock {
    state: Arc<Mutex<State>>,
}

impl SimClock {
    /// A clock whose wall side reads `wall_origin` now. Call inside the host's runtime.
    pub fn new(wall_origin: SystemTime) -> Self {
        SimClock {
            state: Arc::new(Mutex::new(State {
                origin: Instant::now(),
                wall_origin,
                suspended_since: None,
                lost: Duration::ZERO,
                wall_back: Duration::ZERO,
            })),
        }
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
        let mut s = self.state.lock().expect("clock lock");
        if let Some(since) = s.suspended_since.take() {
            s.lost += Instant::now() - since;
        }
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
        s.wall_origin + (t - s.origin) - s.wall_back
    }
}
