//! Turns bounded by the sidecar's lease (app.proto, `Turn.not_after_unix_ms`): a turn read at or
//! past its not-after is refused without running any code; a handler still running at its
//! not-after, or when the sidecar sends a fence notice, is cancelled (its future is dropped at
//! its next await point). Either way the answer is an error, never `ok`, so another host can
//! take the actor over from the not-after on without two activations running app code at once.
//!
//! The bound is absolute time on the clocks the app and its sidecar share because they share
//! the machine, and that keep running across a VM suspend (the monotonic clock, and every timer
//! on it, stands still then): the wall clock and, where there is one, the boot clock (Linux
//! `CLOCK_BOOTTIME`, `Turn.not_after_boot_ms`). The boot clock is the one a wall-clock step
//! cannot move: with the wall clock stepped back across a suspend, a turn queued before the
//! suspend looks in time by the wall clock at the resume, and only the boot clock refuses it.
//! The wait below polls the clocks rather than trusting one long monotonic sleep.

use sigx_proto::{ErrorKind, v1};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// The wall clock turns are judged by. Injectable so tests can move it; the default is the
/// system's.
pub type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The machine's wall clock.
pub(crate) fn system_wall() -> WallClock {
    // The one place the SDK reads the process wall clock; everything else asks a WallClock.
    #[allow(clippy::disallowed_methods)]
    Arc::new(SystemTime::now)
}

/// The boot clock turns are judged by (`None` where the platform has none). Injectable so
/// tests can move it; the default is the system's.
pub type BootClock = Arc<dyn Fn() -> Option<Duration> + Send + Sync>;

/// The machine's boot clock: `CLOCK_BOOTTIME` on Linux, none elsewhere.
pub(crate) fn system_boot() -> BootClock {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        Arc::new(|| {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
            Some(Duration::new(
                u64::try_from(t.tv_sec).ok()?,
                u32::try_from(t.tv_nsec).ok()?,
            ))
        })
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        Arc::new(|| None)
    }
}

/// The clocks a turn's not-after is judged by.
#[derive(Clone)]
pub(crate) struct TurnClocks {
    pub wall: WallClock,
    pub boot: BootClock,
}

impl TurnClocks {
    pub(crate) fn system() -> Self {
        TurnClocks {
            wall: system_wall(),
            boot: system_boot(),
        }
    }

    /// How far past `not_after` the turn is now, on whichever clock says so first (`None`:
    /// still in time on both).
    pub(crate) fn past(&self, not_after: &NotAfter) -> Option<Duration> {
        let by_wall = not_after
            .wall
            .and_then(|at| (self.wall)().duration_since(at).ok());
        let by_boot = not_after
            .boot
            .and_then(|at| (self.boot)().and_then(|now| now.checked_sub(at)));
        by_wall.max(by_boot)
    }

    /// Time left until `not_after` on the clock that ends it first (`None`: unbounded).
    fn left(&self, not_after: &NotAfter) -> Option<Duration> {
        let by_wall = not_after
            .wall
            .map(|at| at.duration_since((self.wall)()).unwrap_or(Duration::ZERO));
        let by_boot = not_after
            .boot
            .and_then(|at| (self.boot)().map(|now| at.saturating_sub(now)));
        match (by_wall, by_boot) {
            (Some(w), Some(b)) => Some(w.min(b)),
            (w, b) => w.or(b),
        }
    }
}

/// A turn's not-after on each clock the sidecar set it for.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NotAfter {
    pub wall: Option<SystemTime>,
    pub boot: Option<Duration>,
}

/// The longest the not-after wait sleeps before it reads the wall clock again.
const POLL: Duration = Duration::from_millis(100);

/// The turn's not-after, as far as the sidecar set one (older sidecars send 0).
pub(crate) fn not_after_of(turn: &v1::Turn) -> NotAfter {
    NotAfter {
        wall: (turn.not_after_unix_ms > 0)
            .then(|| UNIX_EPOCH + Duration::from_millis(turn.not_after_unix_ms as u64)),
        boot: (turn.not_after_boot_ms > 0).then(|| Duration::from_millis(turn.not_after_boot_ms)),
    }
}

/// How a bounded handler ended.
pub(crate) enum Bounded<T> {
    /// It finished before its not-after.
    Done(T),
    /// Its not-after passed first: cancelled.
    PastNotAfter,
    /// The sidecar fenced first: cancelled.
    Fenced,
}

/// Runs `fut` until it finishes, `not_after` passes on either clock, or `fence` changes.
pub(crate) async fn run_bounded<F: Future>(
    fut: F,
    not_after: NotAfter,
    clocks: &TurnClocks,
    mut fence: watch::Receiver<u64>,
) -> Bounded<F::Output> {
    let expiry = async {
        loop {
            match clocks.left(&not_after) {
                Some(left) if !left.is_zero() => tokio::time::sleep(left.min(POLL)).await,
                Some(_) => return,
                None => std::future::pending().await,
            }
        }
    };
    tokio::select! {
        biased;
        _ = fence.changed() => Bounded::Fenced,
        () = expiry => Bounded::PastNotAfter,
        out = fut => Bounded::Done(out),
    }
}

/// The answer to a turn read at or past its not-after: UNREACHABLE, it never ran.
pub(crate) fn refused(turn_id: u64, late_by: Duration) -> v1::TurnResult {
    error(
        turn_id,
        ErrorKind::Unreachable,
        format!(
            "the turn reached the app {} ms past its not-after: refused, it never ran",
            late_by.as_millis()
        ),
    )
}

/// The answer to a turn cancelled at its not-after or by a fence notice: TIMEOUT, it may have
/// run in part.
pub(crate) fn cancelled(turn_id: u64, why: &str) -> v1::TurnResult {
    error(
        turn_id,
        ErrorKind::Timeout,
        format!("the handler was cancelled {why}: it may have run in part; no result"),
    )
}

fn error(turn_id: u64, kind: ErrorKind, message: String) -> v1::TurnResult {
    v1::TurnResult {
        turn_id,
        outcome: Some(v1::turn_result::Outcome::Error(v1::TurnError {
            kind: kind.to_proto() as i32,
            message,
        })),
        writes: Vec::new(),
    }
}
