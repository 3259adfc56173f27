//! Turns bounded by the sidecar's lease (app.proto, `Turn.not_after_unix_ms`): a turn read at or
//! past its not-after is refused without running any code; a handler still running at its
//! not-after, or when the sidecar sends a fence notice, is cancelled (its future is dropped at
//! its next await point). Either way the answer is an error, never `ok`, so another host can
//! take the actor over from the not-after on without two activations running app code at once.
//!
//! The bound is absolute wall-clock time because the app and its sidecar share the machine's
//! wall clock, and it keeps running across a VM suspend (the monotonic clock, and every timer
//! on it, stands still then): the wait below polls the wall clock rather than trusting one
//! long monotonic sleep.

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

/// The longest the not-after wait sleeps before it reads the wall clock again.
const POLL: Duration = Duration::from_millis(100);

/// The turn's not-after, when the sidecar set one (older sidecars send 0).
pub(crate) fn not_after_of(turn: &v1::Turn) -> Option<SystemTime> {
    (turn.not_after_unix_ms > 0)
        .then(|| UNIX_EPOCH + Duration::from_millis(turn.not_after_unix_ms as u64))
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

/// Runs `fut` until it finishes, `not_after` passes on `wall`, or `fence` changes.
pub(crate) async fn run_bounded<F: Future>(
    fut: F,
    not_after: Option<SystemTime>,
    wall: &WallClock,
    mut fence: watch::Receiver<u64>,
) -> Bounded<F::Output> {
    let expiry = async {
        match not_after {
            Some(at) => loop {
                match at.duration_since(wall()) {
                    Ok(left) if !left.is_zero() => tokio::time::sleep(left.min(POLL)).await,
                    _ => return,
                }
            },
            None => std::future::pending().await,
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
