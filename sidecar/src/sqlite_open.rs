//! Opening a SQLite file that other processes may be opening at the same moment.
//!
//! The hosts of `sigx dev up` start together and open the same fresh membership and state
//! files. Turning a new file to WAL, and the first schema transaction, upgrade a shared lock to
//! an exclusive one; when two connections both hold the shared lock, SQLite refuses one of them
//! with `SQLITE_BUSY` at once, *without* calling the busy handler, because waiting could
//! deadlock. The refused opener must drop what it holds and start again: these errors are
//! retried here, with the whole open, for a bounded time. Any other error is returned at once.

use rusqlite::ErrorCode;
use std::time::Duration;

/// How many times an open is retried; with [`pause`] this bounds the wait to about 5 s.
const ATTEMPTS: u32 = 200;

/// Whether `e` is a lock conflict that a fresh attempt can get past.
pub(crate) fn is_lock_conflict(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Pause before attempt `n` (1-based): short first, so the common two-opener race costs a few
/// milliseconds; capped so the bound stays predictable.
fn pause(n: u32) -> Duration {
    Duration::from_millis(u64::from(n.min(25)))
}

/// Runs `open` until it succeeds, fails with an error `conflict` does not accept, or the
/// attempts run out (then the last error is returned, naming the lock).
pub(crate) fn retry_on_lock_conflict<T, E>(
    mut open: impl FnMut() -> Result<T, E>,
    conflict: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let mut n = 0;
    loop {
        match open() {
            Err(e) if conflict(&e) && n < ATTEMPTS => {
                n += 1;
                tracing::debug!(
                    attempt = n,
                    "sqlite file locked by another opener; retrying"
                );
                std::thread::sleep(pause(n));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_is_retried_and_other_errors_are_not() {
        let mut calls = 0;
        let r: Result<u32, &str> = retry_on_lock_conflict(
            || {
                calls += 1;
                if calls < 3 { Err("busy") } else { Ok(calls) }
            },
            |e| *e == "busy",
        );
        assert_eq!(r, Ok(3));

        let mut calls = 0;
        let r: Result<u32, &str> = retry_on_lock_conflict(
            || {
                calls += 1;
                Err("corrupt")
            },
            |e| *e == "busy",
        );
        assert_eq!((r, calls), (Err("corrupt"), 1));
    }

    #[test]
    fn a_conflict_that_never_clears_ends_with_the_last_error() {
        let mut calls = 0;
        let r: Result<(), &str> = retry_on_lock_conflict(
            || {
                calls += 1;
                Err("busy")
            },
            |e| *e == "busy",
        );
        assert_eq!((r, calls), (Err("busy"), ATTEMPTS + 1));
    }
}
