//! Membership timing: heartbeat interval, lease TTL, the observers' drift margin, refresh
//! coalescing, and the worker-only rejoin backoff. Validated before anything binds.

use std::time::Duration;

/// Timing of one host's membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipConfig {
    /// How often the host renews its lease (default 5 s).
    pub beat: Duration,
    /// How long a lease is valid after the start of its last confirmed write (default 15 s).
    /// Must exceed 2× `beat`, so one lost beat never fences a host.
    pub ttl: Duration,
    /// Added to a peer's TTL before this host suspects it, for clock-rate differences between
    /// machines and scheduling jitter (default: a tenth of the TTL, at most 1 s). Peers then
    /// still confirm with a fresh read before expiring.
    pub drift_margin: Duration,
    /// Trailing window of refresh coalescing (default 0 = leading edge only, single-flight).
    pub coalesce: Duration,
    /// Cap of the worker-only rejoin backoff (default 30 s; it starts at half a beat).
    pub rejoin_backoff_max: Duration,
    /// How an expiry candidate is confirmed. Only tests change this, to show what the fresh read
    /// prevents.
    #[doc(hidden)]
    pub expiry_check: ExpiryCheck,
    /// Whether a stateful host fences itself when its own lease runs out. Only tests change
    /// this, to show what self-fencing prevents.
    #[doc(hidden)]
    pub self_fence: SelfFence,
    /// When an observer drops a peer whose record another party deleted. Only tests change
    /// this, to show what waiting out the lease prevents.
    #[doc(hidden)]
    pub deletion_check: DeletionCheck,
}

/// When an observer drops a peer whose record the feed shows deleted by someone other than its
/// holder.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeletionCheck {
    /// A withdrawal by the holder is acted on at once; any other deletion only once the
    /// peer's last renewal this host saw is older than its TTL plus the drift margin, when every
    /// turn it handed out is past its not-after (DESIGN.md §3). A record an expiry check's fresh
    /// read finds missing is waited out the same way, from the read: with its feed behind, the
    /// host cannot know the renewals it missed.
    #[default]
    WaitForLapse,
    /// DELIBERATELY BROKEN, for tests only: drop the peer as soon as the feed shows its record
    /// gone. A third party deleting a live host's record (`kubectl delete lease`, Pod garbage
    /// collection) then lets peers re-activate actors whose turns still run there (issue 12,
    /// hole D).
    TrustDeletion,
    /// DELIBERATELY BROKEN, for tests only: wait out deletions the feed shows, but take a
    /// record an expiry check's fresh read (or a snapshot) finds missing as proof of expiry. An
    /// observer whose feed lags misses the renewals made before a third party's deletion and
    /// drops a peer that still runs turns (simulator seed 6020430).
    TrustMissingRecord,
}

/// Whether a host judges its own lease (the HeartbeatClock) before serving.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SelfFence {
    /// A stateful host whose lease ran out on its own clocks stops serving at once (DESIGN.md
    /// §3): before any peer can expire it and place its actors elsewhere.
    #[default]
    OnExpiry,
    /// DELIBERATELY BROKEN, for tests only: as `OnExpiry`, but elapsed time is judged on two
    /// far-apart readings of each clock instead of the odometer (the rule before issue 12's
    /// clock-step fix). A wall clock stepped back and then a suspend hide each other, and the
    /// host serves turns after its peers expired it.
    TwoReadings,
    /// DELIBERATELY BROKEN, for tests only: never judge the own lease. A host cut off from the
    /// store keeps serving its activations after its peers expired it and re-placed them.
    Never,
}

/// How an observer confirms that a silent peer expired.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExpiryCheck {
    /// A linearizable read must still show the renewal last observed (DESIGN.md §3).
    #[default]
    FreshRead,
    /// DELIBERATELY BROKEN, for tests only: trust the local judgement. A lagging observer then
    /// expires a live host that renewed just before its deadline.
    TrustLocalJudgement,
    /// DELIBERATELY BROKEN, for tests only: confirm by a fresh read and delete by
    /// compare-and-swap as [`ExpiryCheck::FreshRead`] does, but publish the departure at once,
    /// ahead of the feed. The view is then no longer a prefix of the store's change log: an
    /// observer whose watch lags drops the only host that knew a newcomer and owns the
    /// newcomer's partitions with an empty wait set (issue 12, hole A).
    PublishAheadOfFeed,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        MembershipConfig {
            beat: Duration::from_secs(5),
            ttl: Duration::from_secs(15),
            drift_margin: default_drift(Duration::from_secs(15)),
            coalesce: Duration::ZERO,
            rejoin_backoff_max: Duration::from_secs(30),
            expiry_check: ExpiryCheck::FreshRead,
            self_fence: SelfFence::OnExpiry,
            deletion_check: DeletionCheck::WaitForLapse,
        }
    }
}

/// The longest lease TTL a host may publish, and the longest any observer honours.
///
/// Why a bound at all: a peer expires a silent host only after the TTL the host itself wrote
/// into its record, so a record claiming days (a typo, an old writer, a hand-edited Lease) would
/// hold its partitions and actors hostage for days. Ten minutes (the ActorCluster CRD's own bound on `ttlSeconds`) is far past any sensible
/// failover budget, and a host cannot be configured above it, so clamping a longer TTL read from
/// a record only ever shortens a lease no correct sidecar wrote.
pub const MAX_TTL: Duration = Duration::from_secs(600);

/// A TTL read from a published record, bounded by [`MAX_TTL`].
pub(crate) fn published_ttl(ttl: Duration) -> Duration {
    ttl.min(MAX_TTL)
}

/// A membership timing that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipConfigError {
    /// The beat interval is zero.
    #[error("the membership heartbeat interval must be greater than zero (SIGX_HEARTBEAT_MS)")]
    ZeroBeat,
    /// TTL ≤ 2× beat: a single delayed beat would fence the host.
    #[error(
        "the membership TTL ({ttl:?}) must exceed twice the heartbeat interval ({beat:?}), so one \
         lost beat does not fence a host; raise SIGX_TTL_MS or lower SIGX_HEARTBEAT_MS"
    )]
    TtlTooShort {
        /// The configured TTL.
        ttl: Duration,
        /// The configured heartbeat interval.
        beat: Duration,
    },
    /// TTL above [`MAX_TTL`]: a dead host would hold its actors for longer than that.
    #[error(
        "the membership TTL ({ttl:?}) is longer than the 600 s maximum: a dead host's actors \
         would wait that long to move; lower SIGX_TTL_MS"
    )]
    TtlTooLong {
        /// The configured TTL.
        ttl: Duration,
    },
}

impl MembershipConfig {
    /// A config with this beat and TTL, the drift margin scaled to the TTL, and the other
    /// defaults.
    pub fn with_timing(beat: Duration, ttl: Duration) -> Self {
        MembershipConfig {
            beat,
            ttl,
            drift_margin: default_drift(ttl),
            ..Default::default()
        }
    }

    /// Checks the timing; every error names the setting to change.
    pub fn validate(&self) -> Result<(), MembershipConfigError> {
        validate_timing(self.beat, self.ttl)
    }

    /// How long a single lease write may take before it counts as failed.
    pub(crate) fn write_timeout(&self) -> Duration {
        self.ttl
    }

    /// How often the lease and the peers' expiry are checked between beats.
    pub(crate) fn check_interval(&self) -> Duration {
        (self.beat / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// The first rejoin backoff.
    pub(crate) fn rejoin_backoff_initial(&self) -> Duration {
        (self.beat / 2).max(Duration::from_millis(10))
    }
}

/// A tenth of the TTL, at most 1 s: clock-rate error grows with the time measured.
fn default_drift(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_secs(1))
}

/// TTL must exceed 2× beat and beat must be positive.
pub fn validate_timing(beat: Duration, ttl: Duration) -> Result<(), MembershipConfigError> {
    if beat.is_zero() {
        return Err(MembershipConfigError::ZeroBeat);
    }
    if ttl <= beat * 2 {
        return Err(MembershipConfigError::TtlTooShort { ttl, beat });
    }
    if ttl > MAX_TTL {
        return Err(MembershipConfigError::TtlTooLong { ttl });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_bounded_and_published_ttls_are_clamped() {
        assert_eq!(validate_timing(Duration::from_secs(5), MAX_TTL), Ok(()));
        let long = MAX_TTL + Duration::from_millis(1);
        let err = validate_timing(Duration::from_secs(5), long).unwrap_err();
        assert_eq!(err, MembershipConfigError::TtlTooLong { ttl: long });
        assert!(err.to_string().contains("SIGX_TTL_MS"), "{err}");
        assert_eq!(published_ttl(Duration::from_millis(u64::MAX)), MAX_TTL);
        assert_eq!(
            published_ttl(Duration::from_secs(15)),
            Duration::from_secs(15)
        );
    }

    #[test]
    fn ttl_must_exceed_twice_the_beat() {
        let ms = Duration::from_millis;
        assert!(MembershipConfig::default().validate().is_ok());
        assert_eq!(
            validate_timing(ms(500), ms(1000)),
            Err(MembershipConfigError::TtlTooShort {
                ttl: ms(1000),
                beat: ms(500)
            })
        );
        assert!(validate_timing(ms(499), ms(1000)).is_ok());
        assert_eq!(
            validate_timing(ms(0), ms(1000)),
            Err(MembershipConfigError::ZeroBeat)
        );
        let msg = validate_timing(ms(500), ms(1000)).unwrap_err().to_string();
        assert!(msg.contains("twice the heartbeat"), "{msg}");
    }
}
