//! The HeartbeatClock: a host's own, synchronous answer to "is my lease still valid?"
//!
//! DESIGN.md §3 and the seed's "Writing a provider": `arm()` once before the first lease write,
//! `beat()` before every write, `confirmed()` / `failed()` after it, `lost()` on proof that the
//! record is gone. Suspicion is "the start of the last confirmed write is more than TTL ago" on
//! the monotonic clock *or* the wall (or boot) clock: a suspended VM's monotonic clock stands
//! still (and so do the timers riding it), so only the wall and boot clocks notice the suspend.
//!
//! Elapsed time is read off an *odometer*, not off any clock alone: every time the clock is
//! asked, the distance since the previous reading is added as the largest of the monotonic, the
//! wall-clock and the boot-clock advance (a wall clock that stepped back adds nothing). Comparing
//! two far-apart readings of each clock is not enough: a wall clock stepped back by 30 s and then
//! a 20 s suspend leave the wall side 10 s *behind* and the monotonic side unmoved, while 20 s
//! really passed. The guard task asks the clock every check interval, so a step and a later
//! suspend land in different readings. A step and a suspend inside *one* interval still cancel
//! on the wall side; the boot clock (Linux `CLOCK_BOOTTIME`, see [`crate::clock`]) counts the
//! suspend whatever the wall clock did, so only a platform without one keeps that blind spot.
//! The price is on the safe side: a wall clock stepped back and then forward again inside one
//! window counts the forward step as elapsed, and the host may fence early.
//!
//! Why the window counts from the *start* of a write: peers expire a host TTL (plus a drift
//! margin) after they *observed* its write, which is never earlier than the write's start, so a
//! host that fences at TTL after the start always fences before any peer can expire it.

use crate::clock::SharedClock;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Why a host can no longer prove its place in membership.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FenceReason {
    /// The monotonic clock says the last confirmed write started more than TTL ago.
    SuspectMonotonic,
    /// The wall clock or the boot clock says so while the monotonic clock may not (a suspended
    /// VM). The short name stays `suspect-wall`, which dashboards and alerts already match.
    SuspectWall,
    /// Proof that the record is gone or held by someone else.
    Lost(LostCause),
    /// Not a fence: the host withdrew its record deliberately and serves no more turns.
    Left,
}

/// What proves that a host's record is gone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LostCause {
    /// A write found no record (expired and deleted by a peer, or by the store).
    Gone,
    /// The record is held by someone else now.
    HolderChanged {
        /// The holder the store names.
        holder: String,
    },
    /// The host's own change stream showed its record being deleted.
    Deleted,
    /// The record was deleted and created again by someone else: same name, new identity (a
    /// Kubernetes Lease with another `metadata.uid`). A write we did not make is loss even when
    /// the new record names our holder.
    Replaced,
}

impl FenceReason {
    /// The stable short name (`StatusResponse.fence_reason`, metrics labels, logs).
    pub fn as_str(&self) -> &'static str {
        match self {
            FenceReason::SuspectMonotonic => "suspect-monotonic",
            FenceReason::SuspectWall => "suspect-wall",
            FenceReason::Lost(_) => "lost",
            FenceReason::Left => "left",
        }
    }
}

impl fmt::Display for FenceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceReason::SuspectMonotonic => {
                f.write_str("suspect-monotonic: no lease write confirmed within the TTL")
            }
            FenceReason::SuspectWall => f.write_str(
                "suspect-wall: the wall clock or the boot clock passed the TTL since the last \
                 confirmed lease write (the machine was probably suspended)",
            ),
            FenceReason::Lost(LostCause::Gone) => f.write_str("lost: the lease record is gone"),
            FenceReason::Lost(LostCause::HolderChanged { holder }) => {
                write!(f, "lost: the lease record is now held by {holder:?}")
            }
            FenceReason::Lost(LostCause::Deleted) => {
                f.write_str("lost: the change stream showed the lease record deleted")
            }
            FenceReason::Lost(LostCause::Replaced) => f.write_str(
                "lost: the lease record was deleted and re-created by someone else (its uid changed)",
            ),
            FenceReason::Left => f.write_str("left: the host withdrew from membership"),
        }
    }
}

impl std::error::Error for FenceReason {}

#[derive(Debug, Clone, Copy)]
struct Stamp {
    mono: Instant,
    wall: SystemTime,
    /// The boot clock, where the platform has one.
    boot: Option<Duration>,
    /// The odometer at this reading: elapsed time since the clock was created, each step the
    /// largest of the monotonic, the (forward) wall-clock and the boot-clock advance.
    odo: Duration,
}

impl Stamp {
    /// How far the odometer ran from `self` to `later`.
    fn elapsed_to(&self, later: &Stamp) -> Duration {
        later.odo.saturating_sub(self.odo)
    }
}

#[derive(Debug, Default)]
struct State {
    /// The last reading of the clocks, for the next odometer step.
    last: Option<Stamp>,
    armed: bool,
    /// The start of the last confirmed write (or the arm).
    confirmed: Option<Stamp>,
    /// The start of the write in flight.
    pending: Option<Stamp>,
    latched: Option<FenceReason>,
}

/// How a [`HeartbeatClock`] measures elapsed time.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ElapsedRule {
    /// The odometer (module docs).
    #[default]
    Odometer,
    /// DELIBERATELY BROKEN, for tests only: two far-apart readings of each clock (the rule
    /// before issue 12's clock-step fix), so a backward wall step hides a later suspend.
    TwoReadings,
}

/// The lease-validity clock of one host. Cheap and synchronous: ask it before every activation,
/// turn dispatch and directory `Collect` answer.
pub struct HeartbeatClock {
    clock: SharedClock,
    ttl: Duration,
    rule: ElapsedRule,
    state: Mutex<State>,
    /// How long each lease write took, by outcome (`/metrics`).
    renewals: crate::metrics::OutcomeHistogram,
}

impl fmt::Debug for HeartbeatClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeartbeatClock")
            .field("ttl", &self.ttl)
            .field("state", &*self.state.lock().expect("heartbeat lock"))
            .finish()
    }
}

impl HeartbeatClock {
    /// A disarmed clock for a lease of `ttl`.
    pub fn new(clock: SharedClock, ttl: Duration) -> Self {
        Self::with_rule(clock, ttl, ElapsedRule::Odometer)
    }

    /// A disarmed clock measuring elapsed time by `rule` (tests of the broken variant).
    #[doc(hidden)]
    pub fn with_rule(clock: SharedClock, ttl: Duration, rule: ElapsedRule) -> Self {
        HeartbeatClock {
            clock,
            ttl,
            rule,
            state: Mutex::new(State::default()),
            renewals: Default::default(),
        }
    }

    /// The durations of the lease writes this clock has seen, by `ok` / `failed`.
    pub fn renewals(&self) -> &crate::metrics::OutcomeHistogram {
        &self.renewals
    }

    fn observe(&self, pending: Option<Stamp>, outcome: &str) {
        if let Some(p) = pending {
            let took = self.clock.now().saturating_duration_since(p.mono);
            self.renewals.observe(outcome, took);
        }
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Elapsed time from `start` to `now` as this clock's rule measures it.
    fn elapsed(&self, start: &Stamp, now: &Stamp) -> Duration {
        match self.rule {
            ElapsedRule::Odometer => start.elapsed_to(now),
            ElapsedRule::TwoReadings => {
                let by_mono = now.mono.saturating_duration_since(start.mono);
                let by_wall = now
                    .wall
                    .duration_since(start.wall)
                    .unwrap_or(Duration::ZERO);
                by_mono.max(by_wall)
            }
        }
    }

    /// Reads the clocks and runs the odometer forward. Called with the state locked, so
    /// readings are ordered.
    fn stamp(&self, s: &mut State) -> Stamp {
        let mono = self.clock.now();
        let wall = self.clock.wall();
        let boot = self.clock.boot();
        let odo = match s.last {
            None => Duration::ZERO,
            Some(last) => {
                let by_mono = mono.saturating_duration_since(last.mono);
                let by_wall = wall.duration_since(last.wall).unwrap_or(Duration::ZERO);
                let by_boot = match (last.boot, boot) {
                    (Some(then), Some(now)) => now.saturating_sub(then),
                    _ => Duration::ZERO,
                };
                last.odo + by_mono.max(by_wall).max(by_boot)
            }
        };
        let now = Stamp {
            mono,
            wall,
            boot,
            odo,
        };
        s.last = Some(now);
        now
    }

    /// Starts the window now, before the first lease write is attempted (the join included).
    /// Re-arming (a worker-only host rejoining) starts a fresh window and clears the latch.
    pub fn arm(&self) {
        let mut s = self.state.lock().expect("heartbeat lock");
        let now = self.stamp(&mut s);
        *s = State {
            last: Some(now),
            armed: true,
            confirmed: Some(now),
            pending: None,
            latched: None,
        };
    }

    /// Stops judging (after a deliberate leave): silent again, as before `arm()`.
    pub fn disarm(&self) {
        let mut s = self.state.lock().expect("heartbeat lock");
        *s = State {
            last: s.last,
            ..State::default()
        };
    }

    /// Whether `arm()` was called (and not undone by `disarm()`).
    pub fn is_armed(&self) -> bool {
        self.state.lock().expect("heartbeat lock").armed
    }

    /// A lease write is about to start: remember when.
    pub fn beat(&self) {
        let mut s = self.state.lock().expect("heartbeat lock");
        let now = self.stamp(&mut s);
        s.pending = Some(now);
    }

    /// The write started by the last `beat()` succeeded: the window now counts from its start.
    /// Clears the latch and returns what was latched, if anything: a caller whose policy is
    /// terminal (a stateful host) must call [`HeartbeatClock::check`] *before* this, because a
    /// write confirmed after its deadline does not save the host.
    pub fn confirmed(&self) -> Option<FenceReason> {
        let mut s = self.state.lock().expect("heartbeat lock");
        let pending = s.pending.take();
        if let Some(p) = pending {
            s.confirmed = Some(p);
        }
        let latched = s.latched.take();
        drop(s);
        self.observe(pending, "ok");
        latched
    }

    /// The write started by the last `beat()` failed. The window keeps counting from the last
    /// confirmed start.
    pub fn failed(&self) {
        let pending = self.state.lock().expect("heartbeat lock").pending.take();
        self.observe(pending, "failed");
    }

    /// Proof that the record is gone: latches immediately, whatever the clocks say (the next
    /// write might succeed promptly and look healthy). Silent before `arm()`.
    pub fn lost(&self, cause: LostCause) {
        let mut s = self.state.lock().expect("heartbeat lock");
        if s.armed && s.latched.is_none() {
            s.latched = Some(FenceReason::Lost(cause));
        }
    }

    /// Is the lease still valid right now, on both clocks? Latches the first reason it finds.
    pub fn check(&self) -> Result<(), FenceReason> {
        let mut s = self.state.lock().expect("heartbeat lock");
        let now = self.stamp(&mut s);
        if !s.armed {
            return Ok(());
        }
        if let Some(r) = &s.latched {
            return Err(r.clone());
        }
        let Some(start) = s.confirmed else {
            return Ok(());
        };
        let reason = if now.mono.saturating_duration_since(start.mono) > self.ttl {
            Some(FenceReason::SuspectMonotonic)
        } else if self.elapsed(&start, &now) > self.ttl {
            // The odometer ran past the TTL while the monotonic clock did not: the wall or the
            // boot clock saw time the monotonic clock missed (a suspend), even if the wall
            // clock was stepped back too.
            Some(FenceReason::SuspectWall)
        } else {
            None
        };
        match reason {
            Some(r) => {
                s.latched = Some(r.clone());
                Err(r)
            }
            None => Ok(()),
        }
    }

    /// Until when (wall clock) the lease is valid unless a write is confirmed first: the start
    /// of the last confirmed write plus TTL, on whichever clock ends it sooner — the monotonic
    /// side is translated to the wall clock at `now`, so a wall clock that lags (stepped back, or
    /// a suspend the wall side has not caught up with) never stretches the answer. Read-only: it
    /// neither judges nor latches (ask [`HeartbeatClock::check`] for that). `None` before
    /// `arm()`; the instant of the latch's cause is not kept, so a latched clock answers `now`.
    ///
    /// Why wall time: the bound travels to the app as an absolute not-after on the pod's wall
    /// clock, the one clock app and sidecar share that keeps running across a VM suspend.
    pub fn valid_until(&self) -> Option<SystemTime> {
        let mut s = self.state.lock().expect("heartbeat lock");
        let now = self.stamp(&mut s);
        if !s.armed {
            return None;
        }
        if s.latched.is_some() {
            return Some(now.wall);
        }
        let start = s.confirmed?;
        // The odometer is never behind either clock's own advance, so this is the earlier of the
        // wall and the monotonic ends, and a wall clock stepped back stretches nothing.
        let elapsed = self.elapsed(&start, &now);
        Some(match self.ttl.checked_sub(elapsed) {
            Some(left) => now.wall + left,
            None => now.wall.checked_sub(elapsed - self.ttl).unwrap_or(now.wall),
        })
    }

    /// The monotonic instant at which the lease lapses unless a write is confirmed first (None
    /// before `arm()`). The wall-clock side cannot be slept on; callers also poll `check()`.
    pub fn deadline(&self) -> Option<Instant> {
        let s = self.state.lock().expect("heartbeat lock");
        let start = s.confirmed.filter(|_| s.armed)?;
        // Whatever the odometer gained over the monotonic clock since the start (a suspend)
        // brings the monotonic deadline forward.
        let ahead = s.last.map_or(Duration::ZERO, |last| {
            self.elapsed(&start, &last)
                .saturating_sub(last.mono.saturating_duration_since(start.mono))
        });
        Some(
            (start.mono + self.ttl)
                .checked_sub(ahead)
                .unwrap_or(start.mono),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    const TTL: Duration = Duration::from_secs(15);

    fn fixture() -> (ManualClock, HeartbeatClock) {
        let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000_000));
        let hb = HeartbeatClock::new(Arc::new(clock.clone()), TTL);
        (clock, hb)
    }

    #[tokio::test(start_paused = true)]
    async fn silent_before_arm() {
        let (clock, hb) = fixture();
        clock.advance(TTL * 10);
        hb.lost(LostCause::Gone);
        assert_eq!(hb.check(), Ok(()));
        assert_eq!(hb.deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn window_starts_at_arm_not_at_the_join_write() {
        let (clock, hb) = fixture();
        hb.arm();
        hb.beat(); // the join write starts right after arm
        clock.advance(TTL - Duration::from_millis(1));
        hb.confirmed(); // a slow join, confirmed just inside the window
        assert_eq!(hb.check(), Ok(()));
        clock.advance(Duration::from_millis(2));
        // The window counted from arm (= the join write's start), not from its confirmation.
        assert_eq!(hb.check(), Err(FenceReason::SuspectMonotonic));
    }

    #[tokio::test(start_paused = true)]
    async fn confirmed_beats_keep_it_valid_and_failed_ones_do_not() {
        let (clock, hb) = fixture();
        hb.arm();
        for _ in 0..10 {
            clock.advance(Duration::from_secs(5));
            hb.beat();
            hb.confirmed();
            assert_eq!(hb.check(), Ok(()));
        }
        for _ in 0..3 {
            hb.beat();
            clock.advance(Duration::from_secs(5));
            hb.failed();
        }
        assert_eq!(
            hb.check(),
            Ok(()),
            "exactly TTL since the last confirmed start is not past it"
        );
        clock.advance(Duration::from_millis(1));
        assert_eq!(hb.check(), Err(FenceReason::SuspectMonotonic));
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_counts_from_the_start_of_the_confirmed_write() {
        let (clock, hb) = fixture();
        hb.arm();
        clock.advance(Duration::from_secs(5));
        hb.beat();
        clock.advance(Duration::from_secs(9)); // a slow write
        hb.confirmed();
        clock.advance(Duration::from_secs(10)); // 19 s after arm, 15 s + 4 s after the write began
        assert!(
            hb.check().is_err(),
            "validity is measured from the write's start"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn wall_jump_with_frozen_monotonic_is_a_suspend() {
        let (clock, hb) = fixture();
        hb.arm();
        hb.beat();
        hb.confirmed();
        clock.suspend(Duration::from_secs(60));
        // The monotonic clock did not move: only the wall side can notice.
        assert_eq!(hb.deadline().unwrap() - clock.now(), TTL);
        assert_eq!(hb.check(), Err(FenceReason::SuspectWall));
    }

    /// A clock whose wall side is set by hand (to step it backwards, as NTP may).
    struct SteppedWall(Mutex<SystemTime>);
    impl crate::clock::Clock for SteppedWall {
        fn now(&self) -> Instant {
            Instant::now()
        }
        fn wall(&self) -> SystemTime {
            *self.0.lock().unwrap()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn wall_clock_stepping_backwards_is_not_suspicion() {
        let wall = Arc::new(SteppedWall(Mutex::new(
            UNIX_EPOCH + Duration::from_secs(1_000),
        )));
        let hb = HeartbeatClock::new(wall.clone(), TTL);
        hb.arm();
        *wall.0.lock().unwrap() = UNIX_EPOCH + Duration::from_secs(10);
        assert_eq!(hb.check(), Ok(()));
        // The monotonic side still judges.
        tokio::time::sleep(TTL + Duration::from_millis(1)).await;
        assert_eq!(hb.check(), Err(FenceReason::SuspectMonotonic));
    }

    /// Regression (issue 12, found by the simulator's clock-step faults): a wall clock stepped
    /// back inside a lease window, then a suspend longer than what is left of it. Judged on two
    /// far-apart readings, the wall side is behind where it started and the monotonic side has
    /// not moved, so the host kept serving turns after peers had expired it.
    #[tokio::test(start_paused = true)]
    async fn a_suspend_after_a_backward_wall_step_is_still_a_suspend() {
        let (clock, hb) = fixture();
        hb.arm();
        hb.beat();
        hb.confirmed();
        clock.advance(Duration::from_secs(2));
        clock.step_wall_back(Duration::from_secs(30));
        assert_eq!(hb.check(), Ok(()), "a step back alone is not suspicion");
        clock.suspend(TTL);
        // The wall side now reads 17 s *before* the confirmed start; 17 s really passed.
        assert!(hb.valid_until().unwrap() < clock.wall());
        assert!(hb.deadline().unwrap() <= clock.now());
        assert_eq!(hb.check(), Err(FenceReason::SuspectWall));

        // The rule before the fix, on the same clocks, misses it: this test can fail.
        let (clock, _) = fixture();
        let hb = HeartbeatClock::with_rule(Arc::new(clock.clone()), TTL, ElapsedRule::TwoReadings);
        hb.arm();
        clock.advance(Duration::from_secs(2));
        clock.step_wall_back(Duration::from_secs(30));
        assert_eq!(hb.check(), Ok(()));
        clock.suspend(TTL);
        assert_eq!(hb.check(), Ok(()), "the broken rule sees no suspend");
    }

    /// A wall clock stepped back and a suspend inside *one* reading interval cancel on the wall
    /// side: the odometer's blind spot with two clocks. The boot clock (Linux `CLOCK_BOOTTIME`)
    /// counts the suspend however the wall clock moved.
    #[tokio::test(start_paused = true)]
    async fn a_suspend_hidden_by_a_wall_step_in_one_reading_is_seen_by_the_boot_clock() {
        /// Arms, then steps the wall back 30 s and suspends for longer than the TTL, with no
        /// reading between.
        fn step_and_suspend_unread(clock: &ManualClock) -> HeartbeatClock {
            let hb = HeartbeatClock::new(Arc::new(clock.clone()), TTL);
            hb.arm();
            hb.beat();
            hb.confirmed();
            clock.step_wall_back(Duration::from_secs(30));
            clock.suspend(TTL + Duration::from_secs(1));
            hb
        }

        let linux = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000_000)).with_boot_clock();
        let hb = step_and_suspend_unread(&linux);
        assert_eq!(hb.check(), Err(FenceReason::SuspectWall));
        assert!(hb.valid_until().unwrap() <= linux.wall());
        assert!(hb.deadline().unwrap() <= linux.now());

        // Without a boot clock the same fault goes unseen: the blind spot this clock closes.
        let (bootless, _) = fixture();
        let hb = step_and_suspend_unread(&bootless);
        assert_eq!(hb.check(), Ok(()), "two clocks cannot see this suspend");
    }

    /// The boot clock adds nothing while the machine runs: it advances with the monotonic clock,
    /// so the lease window is the TTL, no shorter.
    #[tokio::test(start_paused = true)]
    async fn a_running_boot_clock_does_not_shorten_the_window() {
        let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_000_000)).with_boot_clock();
        let hb = HeartbeatClock::new(Arc::new(clock.clone()), TTL);
        hb.arm();
        tokio::time::sleep(TTL - Duration::from_millis(1)).await;
        assert_eq!(hb.check(), Ok(()));
        assert_eq!(
            hb.deadline().unwrap() - clock.now(),
            Duration::from_millis(1)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(hb.check(), Err(FenceReason::SuspectMonotonic));
    }

    /// The deadline the guard task sleeps on comes forward by a suspend the clock has seen, so
    /// the guard does not sleep past a lapse it could already know about.
    #[tokio::test(start_paused = true)]
    async fn a_seen_suspend_brings_the_monotonic_deadline_forward() {
        let (clock, hb) = fixture();
        hb.arm();
        let full = hb.deadline().unwrap();
        clock.suspend(Duration::from_secs(5));
        assert_eq!(
            hb.valid_until(),
            Some(clock.wall() + TTL - Duration::from_secs(5))
        );
        assert_eq!(hb.deadline(), Some(full - Duration::from_secs(5)));
        assert_eq!(hb.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn latched_until_the_next_confirmed_write() {
        let (clock, hb) = fixture();
        hb.arm();
        clock.advance(TTL + Duration::from_secs(1));
        assert_eq!(hb.check(), Err(FenceReason::SuspectMonotonic));
        // Still latched even though nothing else happens.
        assert_eq!(hb.check(), Err(FenceReason::SuspectMonotonic));
        hb.beat();
        assert_eq!(hb.confirmed(), Some(FenceReason::SuspectMonotonic));
        assert_eq!(hb.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn lost_fires_immediately_whatever_the_clocks_say() {
        let (_clock, hb) = fixture();
        hb.arm();
        hb.lost(LostCause::HolderChanged {
            holder: "other".into(),
        });
        assert_eq!(
            hb.check(),
            Err(FenceReason::Lost(LostCause::HolderChanged {
                holder: "other".into()
            }))
        );
        assert_eq!(hb.check().unwrap_err().as_str(), "lost");
    }

    #[tokio::test(start_paused = true)]
    async fn valid_until_is_the_confirmed_start_plus_ttl_on_the_wall_clock() {
        let (clock, hb) = fixture();
        assert_eq!(hb.valid_until(), None, "silent before arm");
        let armed_at = clock.wall();
        hb.arm();
        assert_eq!(hb.valid_until(), Some(armed_at + TTL));
        clock.advance(Duration::from_secs(4));
        let write_started = clock.wall();
        hb.beat();
        clock.advance(Duration::from_secs(3)); // a slow write
        assert_eq!(
            hb.valid_until(),
            Some(armed_at + TTL),
            "a write in flight extends nothing"
        );
        hb.confirmed();
        assert_eq!(
            hb.valid_until(),
            Some(write_started + TTL),
            "counted from the start of the confirmed write, not its confirmation"
        );
        hb.beat();
        hb.failed();
        assert_eq!(hb.valid_until(), Some(write_started + TTL));
        // Read-only: asking past the end neither latches nor fences.
        clock.advance(TTL * 2);
        assert!(hb.valid_until().unwrap() < clock.wall());
        hb.beat();
        hb.confirmed();
        assert_eq!(hb.valid_until(), Some(clock.wall() + TTL));
    }

    #[tokio::test(start_paused = true)]
    async fn valid_until_after_a_suspend_is_already_past() {
        let (clock, hb) = fixture();
        hb.arm();
        let armed_at = clock.wall();
        clock.suspend(Duration::from_secs(60));
        // The monotonic side alone would say "TTL left"; the wall side knows better.
        assert_eq!(hb.valid_until(), Some(armed_at + TTL));
        assert!(hb.valid_until().unwrap() < clock.wall());
    }

    #[tokio::test(start_paused = true)]
    async fn valid_until_never_trusts_a_wall_clock_stepped_backwards() {
        let wall = Arc::new(SteppedWall(Mutex::new(
            UNIX_EPOCH + Duration::from_secs(1_000),
        )));
        let hb = HeartbeatClock::new(wall.clone(), TTL);
        hb.arm();
        tokio::time::sleep(Duration::from_secs(5)).await;
        // Stepped back by 100 s after the arm: the wall side would allow 115 s more.
        *wall.0.lock().unwrap() = UNIX_EPOCH + Duration::from_secs(900);
        assert_eq!(
            hb.valid_until(),
            Some(UNIX_EPOCH + Duration::from_secs(900) + TTL - Duration::from_secs(5)),
            "the monotonic side's 10 s left, expressed on the wall clock now"
        );
        tokio::time::sleep(TTL).await;
        assert!(hb.valid_until().unwrap() < UNIX_EPOCH + Duration::from_secs(900));
    }

    #[tokio::test(start_paused = true)]
    async fn valid_until_of_a_latched_clock_is_now() {
        let (clock, hb) = fixture();
        hb.arm();
        hb.lost(LostCause::Gone);
        assert_eq!(hb.valid_until(), Some(clock.wall()));
    }

    #[tokio::test(start_paused = true)]
    async fn driven_by_tokio_time() {
        let (_clock, hb) = fixture();
        hb.arm();
        tokio::time::sleep(TTL).await;
        assert_eq!(hb.check(), Ok(()));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(hb.check(), Err(FenceReason::SuspectMonotonic));
    }
}
