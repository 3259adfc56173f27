//! A join that finds our host id held by another incarnation (DESIGN.md §4 Rule 3: one identity,
//! one process).
//!
//! The default host id carries a random incarnation suffix, so this happens only with an
//! explicit `--host-id`: either a second live process was started with the same id (a
//! configuration error, which must stop the new process loudly instead of retrying forever), or
//! an earlier process with that id died and its record has not lapsed yet. The record itself
//! tells them apart: a live holder renews it, so its version moves within its TTL. A record that
//! stays at one version for its TTL plus the drift margin, measured on our own monotonic clock
//! from our first fresh read, is a dead holder's, and is expired exactly as observers expire a
//! peer's (compare-and-swap delete at that version); then the join is tried again. Nobody else
//! may expire it: with a single host, there is no observer at all.

use super::provider::{DeleteOutcome, MembershipProvider, ProviderError};
use crate::clock::SharedClock;
use std::time::Duration;

/// What watching a record held by another incarnation showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldIdentity {
    /// The record is gone, or lapsed and was expired by us: join again.
    Free,
    /// Another process renews it: this id is in use.
    Live {
        /// The holder that renewed it.
        holder: String,
    },
}

/// Watches the record `id` (held by someone else) until it is renewed, vanishes, or lapses for
/// its TTL plus `margin`. Store errors are returned; the caller retries.
pub async fn judge_held_record(
    provider: &dyn MembershipProvider,
    id: &str,
    margin: Duration,
    clock: &SharedClock,
) -> Result<HeldIdentity, ProviderError> {
    let Some(first) = provider.read(id).await? else {
        return Ok(HeldIdentity::Free);
    };
    let since = clock.now();
    let wait = first.ttl + margin;
    // Poll well inside a beat: a live holder beats several times per TTL, so one renewal is
    // seen long before the record could be judged lapsed.
    let poll = (first.ttl / 8).clamp(Duration::from_millis(10), Duration::from_millis(500));
    tracing::info!(%id, holder = %first.holder, version = first.version, ttl = ?first.ttl,
        "our host id is held by another incarnation; watching whether it is still renewed");
    loop {
        tokio::time::sleep(poll).await;
        match provider.read(id).await? {
            None => return Ok(HeldIdentity::Free),
            Some(r) if r.version != first.version || r.holder != first.holder => {
                return Ok(HeldIdentity::Live { holder: r.holder });
            }
            Some(_) if clock.now().duration_since(since) >= wait => {
                return match provider.delete_if(id, first.version).await? {
                    DeleteOutcome::Deleted | DeleteOutcome::Gone => {
                        tracing::info!(%id, holder = %first.holder,
                            "the earlier incarnation's record lapsed; expired it");
                        Ok(HeldIdentity::Free)
                    }
                    DeleteOutcome::Changed => match provider.read(id).await? {
                        None => Ok(HeldIdentity::Free),
                        Some(r) => Ok(HeldIdentity::Live { holder: r.holder }),
                    },
                };
            }
            Some(_) => {}
        }
    }
}
