//! The observer's expiry judgement of its peers: what this host knows of each peer's record
//! ([`Tracked`]), and the sweep that judges them on this host's own monotonic clock, confirms a
//! candidate by a fresh read and a compare-and-swap delete, waits out the deletions it cannot
//! vouch for, and counts the expiries it made. A departure it judges itself is published in log
//! order.

use super::{Inner, Observed, bump};
use crate::membership::config::{DeletionCheck, ExpiryCheck};
use crate::membership::provider::{DeleteOutcome, LeaseRecord};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, info};

/// A record as this host observed it, with when (on its own monotonic clock) it last saw the
/// renewal token change.
pub(super) struct Tracked {
    /// The record as the feed delivered it: what the view shows.
    pub(super) record: LeaseRecord,
    last_change: Instant,
    /// A later state of the record that a fresh read showed while the feed lagged behind it.
    /// The expiry judgement runs on it (a peer that renewed after our watch stalled, then died,
    /// is still judged by its last renewal); the view does not show it until the feed does.
    judged: Option<LeaseRecord>,
    /// This host confirmed the record gone (its fresh read and compare-and-swap delete; a
    /// record found missing once its lease has been waited out, [`Tracked::gone_unseen`]; or, in
    /// the broken `TrustMissingRecord` variant, a fresh read that found nothing) at this record
    /// version. The departure is published only in log order: when the feed (or a snapshot
    /// read after the confirmation) no longer has the record. Until then the record stays in
    /// the view and is not judged again.
    pub(super) departed: Option<u64>,
    /// The record was deleted, at this version, by someone other than its holder (a third
    /// party, or a peer's expiry this host has not judged itself), as the feed delivered or a
    /// read found ([`Tracked::gone_unseen`]). That proves
    /// nothing about turns still running on the host, so the record stays in the view until
    /// its last renewal seen is older than its TTL plus the margin ([`DeletionCheck`]).
    pub(super) deleted: Option<u64>,
    /// When this host found the record gone without its feed showing the deletion (a fresh read
    /// that found nothing, a snapshot without it). The renewals its feed had not delivered by
    /// then are unknown, but all were made before that moment, so the peer's turns are past
    /// their not-after TTL plus the margin after it (seed 6020430). Cleared when the feed
    /// delivers the deletion: in log order, every renewal before it has been delivered too.
    pub(super) gone_unseen: Option<Instant>,
}

impl Tracked {
    pub(super) fn new(record: LeaseRecord, now: Instant) -> Self {
        Tracked {
            record,
            last_change: now,
            judged: None,
            departed: None,
            deleted: None,
            gone_unseen: None,
        }
    }

    /// Whether every turn the host could have handed out under the newest renewal we know of
    /// is past its not-after, on our clock.
    pub(super) fn lapsed(&self, now: Instant, margin: Duration) -> bool {
        let window = self.newest().ttl + margin;
        self.departed.is_some()
            || (now.saturating_duration_since(self.last_change) > window
                && self
                    .gone_unseen
                    .is_none_or(|at| now.saturating_duration_since(at) > window))
    }

    /// The newest state known of the record: the feed's, or a fresher one from a fresh read.
    fn newest(&self) -> &LeaseRecord {
        self.judged.as_ref().unwrap_or(&self.record)
    }

    /// The feed delivered `record` (a later state of the same id, in log order).
    pub(super) fn follow(&mut self, record: LeaseRecord, now: Instant) {
        // A renewal we had already learned by a fresh read (this state or a later one) does
        // not restart the window: it was restarted when we learned it.
        let known = match &self.judged {
            Some(j) if j.version >= record.version => true,
            _ => self.record.renew == record.renew,
        };
        if !known {
            self.last_change = now;
        }
        if self
            .judged
            .as_ref()
            .is_some_and(|j| j.version <= record.version)
        {
            self.judged = None;
        }
        if self.departed.is_some_and(|v| v < record.version) {
            // Written again after the deletion we confirmed (a worker-only host rejoining).
            self.departed = None;
        }
        if self.deleted.is_some_and(|v| v < record.version) {
            // Written again after the deletion (a worker-only host rejoining).
            self.deleted = None;
            self.gone_unseen = None;
        }
        self.record = record;
    }
}

impl Inner {
    /// Removes a peer this host judged expired (or found gone), ahead of the feed: only the
    /// deliberately broken variants ([`ExpiryCheck::TrustLocalJudgement`],
    /// [`ExpiryCheck::PublishAheadOfFeed`]) do this. Returns whether it was still in the view.
    fn remove_expired(&self, id: &str, seen: &LeaseRecord, version: u64) -> bool {
        let mut obs = self.observed.lock().expect("observed lock");
        let still_same = obs
            .records
            .get(id)
            .is_some_and(|t| t.newest().renew == seen.renew);
        if !still_same {
            return false;
        }
        obs.records.remove(id);
        obs.tombstones
            .insert(id.to_string(), version.max(seen.version));
        self.publish(&mut obs);
        true
    }

    fn expired(&self, id: &str) {
        self.observed
            .lock()
            .expect("observed lock")
            .unconfirmed_expiries
            .remove(id);
        self.count_expiry(id);
    }

    fn count_expiry(&self, id: &str) {
        bump(&self.counters.expiries_observed);
        info!(
            peer = id,
            "peer expired: silent past its TTL and confirmed by a fresh read"
        );
    }

    /// An expiry delete whose answer is late or lost (a loaded store) may have landed; the feed
    /// then delivers the deletion before the sweep learns it, and without this the expiry this
    /// host made would go uncounted. A peer still tracked and not deleted stays pending.
    pub(super) fn settle_unconfirmed_expiries(&self, obs: &mut Observed) {
        let records = &obs.records;
        let landed: Vec<String> = obs
            .unconfirmed_expiries
            .keys()
            .filter(|id| records.get(*id).is_none_or(|t| t.deleted.is_some()))
            .cloned()
            .collect();
        for id in landed {
            obs.unconfirmed_expiries.remove(&id);
            self.count_expiry(&id);
        }
    }

    /// Notes an expiry delete about to be sent: until its answer says otherwise, the record's
    /// leaving the view is this host's expiry (see [`Self::settle_unconfirmed_expiries`]).
    fn expiry_in_flight(&self, id: &str, version: u64) {
        self.observed
            .lock()
            .expect("observed lock")
            .unconfirmed_expiries
            .insert(id.to_string(), version);
    }

    /// Takes the in-flight mark off; whether it was still there (the feed had not settled it).
    fn forget_expiry(&self, id: &str) -> bool {
        self.observed
            .lock()
            .expect("observed lock")
            .unconfirmed_expiries
            .remove(id)
            .is_some()
    }

    /// Counts the expiry of an in-flight delete that landed, unless the feed already did.
    fn claim_expiry(&self, id: &str) {
        if self.forget_expiry(id) {
            self.count_expiry(id);
        }
    }

    /// The fresh read proved `seen` gone from the store (we deleted it at `version`, or found
    /// nothing). Marks the record departed and reads the log up to the deletion; the view drops
    /// the peer only once that read shows it gone (DESIGN.md §3: a departure an observer judges
    /// itself is published in log order). Publishing it earlier would let a view skip changes
    /// the feed has not delivered yet — a newcomer the departed host knew and granted claims
    /// to — and own its partitions with an empty wait set. Returns whether this call marked
    /// it (false: the feed had already delivered the deletion, or another sweep marked it).
    async fn confirm_departure(&self, id: &str, seen: &LeaseRecord, version: u64) -> bool {
        if self.cfg.expiry_check == ExpiryCheck::PublishAheadOfFeed {
            return self.remove_expired(id, seen, version);
        }
        let marked = {
            let mut obs = self.observed.lock().expect("observed lock");
            match obs.records.get_mut(id) {
                Some(t) if t.departed.is_none() && t.newest().renew == seen.renew => {
                    t.departed = Some(version.max(seen.version));
                    true
                }
                _ => false,
            }
        };
        self.read_log_to_departures().await;
        marked
    }

    /// Reads the feed; if a departure this host confirmed is still not in it (the watch lags),
    /// reads a snapshot — a consistent prefix of the log taken after the deletion. A provider
    /// whose snapshot lags too (a stalled Kubernetes watch cache) keeps the peer in the view
    /// until its feed catches up: availability waits, the view stays a prefix.
    async fn read_log_to_departures(&self) {
        if self.coalescer().demand(None).await.is_err() || !self.departures_pending() {
            return;
        }
        self.relist.store(true, Ordering::SeqCst);
        if let Err(e) = self.coalescer().demand(None).await {
            debug!(error = %e, "snapshot read after a confirmed departure failed");
        }
    }

    fn departures_pending(&self) -> bool {
        self.observed
            .lock()
            .expect("observed lock")
            .records
            .values()
            .any(|t| t.departed.is_some())
    }

    /// The fresh read found no record: deleted, by whom this host cannot tell (a peer's expiry,
    /// or a third party under a live host), and with this host's feed behind it cannot tell
    /// either whether the peer renewed after the renewal it last saw (seed 6020430: a host whose
    /// feed had stalled 1.1 s before took a record deleted by `kubectl`-like hands as proof of
    /// expiry, dropped a host whose lease still ran and let another host activate its actor).
    /// Every renewal the peer made came before this read, so its turns are past their
    /// not-after TTL plus the margin from now: it stays until then, or until the feed delivers
    /// the deletion and with it every renewal before (then [`Self::drop_lapsed_deletions`]
    /// judges it by the last one, as for any deletion the feed shows).
    fn wait_out_unseen_deletion(&self, id: &str, seen: &LeaseRecord) {
        let now = self.clock.now();
        let mut obs = self.observed.lock().expect("observed lock");
        if let Some(t) = obs.records.get_mut(id)
            && t.departed.is_none()
            && t.deleted.is_none()
        {
            debug!(peer = %id, "expiry candidate's record is gone, by whom unknown; waiting out its lease from now");
            t.gone_unseen = Some(now);
            t.deleted = Some(seen.version);
        }
    }

    /// The fresh read showed the peer alive (our feed lags): restart its window, and judge it
    /// from now on by what the read showed (`fresh`, when known), not by the stale feed — a
    /// peer that renewed after our watch stalled and then died must still expire.
    fn touch(&self, id: &str, fresh: Option<LeaseRecord>) {
        let now = self.clock.now();
        let mut obs = self.observed.lock().expect("observed lock");
        // Renewed or rewritten: whatever our earlier delete did, this peer is not expired.
        obs.unconfirmed_expiries.remove(id);
        if let Some(t) = obs.records.get_mut(id) {
            t.last_change = now;
            if let Some(fresh) = fresh
                && fresh.version > t.newest().version
            {
                t.judged = Some(fresh);
            }
        }
    }

    /// Whether a deletion the feed shows, by anyone but the holder, waits for the peer's lease
    /// to lapse (off only in the broken [`DeletionCheck::TrustDeletion`]).
    pub(super) fn waits_out_feed_deletions(&self) -> bool {
        self.cfg.deletion_check != DeletionCheck::TrustDeletion
    }

    /// Whether a record found missing without the feed showing its deletion waits for the
    /// peer's lease to lapse, counted from the read. Off in the broken variants that trust a
    /// missing record, and in the one that publishes departures ahead of the feed (the schedule
    /// that catches it needs its old handling of a missing record).
    pub(super) fn waits_out_missing_records(&self) -> bool {
        self.cfg.deletion_check == DeletionCheck::WaitForLapse
            && self.cfg.expiry_check != ExpiryCheck::PublishAheadOfFeed
    }

    /// Drops the peers whose deletion ([`Tracked::deleted`]) was waiting for their lease to
    /// lapse and now has.
    /// A deletion this host found without its feed showing it ([`Tracked::gone_unseen`]) is
    /// published in log order, as a confirmed departure is: marked departed here, dropped by
    /// the log read the sweep makes next.
    fn drop_lapsed_deletions(&self, now: Instant) {
        let mut obs = self.observed.lock().expect("observed lock");
        let lapsed: Vec<String> = obs
            .records
            .values()
            .filter(|t| {
                t.deleted.is_some() && t.departed.is_none() && t.lapsed(now, self.cfg.drift_margin)
            })
            .map(|t| t.record.id().to_string())
            .collect();
        let mut dropped = false;
        for id in &lapsed {
            let t = obs.records.get_mut(id).expect("listed above");
            if t.gone_unseen.is_some() {
                debug!(peer = %id, "peer whose record was found gone is past its TTL and margin; reading the log up to its deletion");
                t.departed = t.deleted;
                continue;
            }
            obs.records.remove(id);
            dropped = true;
            info!(peer = %id, "deleted peer dropped: its last renewal is past its TTL and margin");
        }
        if dropped {
            self.publish(&mut obs);
        }
    }

    /// Judges every peer on this host's monotonic clock, by the newest renewal it knows of
    /// (from the feed or an earlier fresh read); candidates are confirmed by a fresh read still
    /// showing that renewal, then deleted by compare-and-swap on the version read (so the peer
    /// learns it is gone and every view converges) and published in log order.
    pub(super) async fn sweep(&self) {
        let now = self.clock.now();
        self.drop_lapsed_deletions(now);
        let (candidates, pending): (Vec<LeaseRecord>, bool) = {
            let obs = self.observed.lock().expect("observed lock");
            let peers = || {
                obs.records
                    .values()
                    .filter(|t| t.record.id() != self.self_id)
            };
            let candidates = peers()
                .filter(|t| t.departed.is_none() && t.deleted.is_none())
                .filter(|t| {
                    now.saturating_duration_since(t.last_change)
                        > t.newest().ttl + self.cfg.drift_margin
                })
                .map(|t| t.newest().clone())
                .collect();
            (candidates, peers().any(|t| t.departed.is_some()))
        };
        if pending {
            // A departure confirmed earlier that the feed has still not delivered.
            self.read_log_to_departures().await;
        }
        // Generous: a confirmation that times out cannot tell whether its delete landed.
        let io_timeout = (self.cfg.ttl / 2).max(self.cfg.beat);
        for seen in candidates {
            let id = seen.id().to_string();
            if self.cfg.expiry_check == ExpiryCheck::TrustLocalJudgement {
                let _ =
                    tokio::time::timeout(io_timeout, self.provider.delete_if(&id, seen.version))
                        .await;
                if self.remove_expired(&id, &seen, seen.version) {
                    self.expired(&id);
                }
                continue;
            }
            let fresh = match tokio::time::timeout(io_timeout, self.provider.read(&id)).await {
                Ok(Ok(fresh)) => fresh,
                Ok(Err(e)) => {
                    debug!(peer = %id, error = %e, "cannot confirm expiry: fresh read failed");
                    continue;
                }
                Err(_) => {
                    debug!(peer = %id, "cannot confirm expiry: fresh read timed out");
                    continue;
                }
            };
            match fresh {
                None if self.waits_out_missing_records() => {
                    self.wait_out_unseen_deletion(&id, &seen);
                }
                None => {
                    if self.confirm_departure(&id, &seen, seen.version).await {
                        self.expired(&id);
                    }
                }
                Some(fresh) if fresh.renew == seen.renew && fresh.holder == seen.holder => {
                    self.expiry_in_flight(&id, fresh.version);
                    let outcome = tokio::time::timeout(
                        io_timeout,
                        self.provider.delete_if(&id, fresh.version),
                    )
                    .await;
                    match outcome {
                        Ok(Ok(DeleteOutcome::Deleted)) => {
                            // We expired it, even if our feed delivered the deletion first
                            // (then the feed counted it).
                            self.claim_expiry(&id);
                            self.confirm_departure(&id, &seen, fresh.version).await;
                        }
                        Ok(Ok(DeleteOutcome::Gone)) => {
                            // Deleted by another party since our read; ours to count only if
                            // the view still held the peer (forgotten first: the log read in
                            // confirm_departure settles marks).
                            let pending = self.forget_expiry(&id);
                            if self.confirm_departure(&id, &seen, fresh.version).await && pending {
                                self.count_expiry(&id);
                            }
                        }
                        Ok(Ok(DeleteOutcome::Changed)) => self.touch(&id, None),
                        // Still in flight as far as we know: the feed settles it.
                        Ok(Err(e)) => debug!(peer = %id, error = %e, "expiry delete failed"),
                        Err(_) => debug!(peer = %id, "expiry delete timed out"),
                    }
                }
                Some(fresh) => {
                    debug!(peer = %id, "expiry candidate renewed: our feed lags; judging it by the fresh read");
                    self.touch(&id, Some(fresh));
                }
            }
        }
    }
}
