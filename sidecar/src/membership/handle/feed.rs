//! The ordered change feed: how this host learns the other hosts' lease records, in log order.
//! The coalesced read of the feed after this host's cursor (or a snapshot), each change applied
//! to what it observed (proof of its own loss among them), and each changed membership
//! published as a new view to the subscribers.

use super::expiry::Tracked;
use super::{Inner, Observed, Phase, Subscriber, bump};
use crate::membership::MembershipError;
use crate::membership::descriptor::HostDescriptor;
use crate::membership::heartbeat::{FenceReason, LostCause};
use crate::membership::provider::{Change, ChangeBatch};
use crate::membership::view::MembershipView;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::time::Instant;
use tracing::{debug, warn};

impl Inner {
    /// The coalesced read: the feed after our cursor, applied in order.
    pub(super) async fn read_feed(self: Arc<Self>) -> Result<u64, MembershipError> {
        bump(&self.counters.feed_reads);
        let cursor = self.observed.lock().expect("observed lock").cursor;
        let relist = self.relist.swap(false, Ordering::SeqCst);
        let batch = self
            .provider
            .changes_since(if relist { None } else { cursor })
            .await?;
        let now = self.clock.now();
        let mut obs = self.observed.lock().expect("observed lock");
        let mut changed = false;
        let new_cursor = batch.cursor();
        if let (ChangeBatch::Snapshot { .. }, Some(at)) = (&batch, obs.cursor)
            && new_cursor < at
        {
            // Older than what the view already shows: applying it would move the view back
            // (re-adding a departure already published). The next read catches up.
            debug!(
                snapshot = new_cursor,
                cursor = at,
                "ignoring a stale snapshot"
            );
            return Ok(at);
        }
        match batch {
            ChangeBatch::Snapshot { records, .. } => {
                let mut old = std::mem::take(&mut obs.records);
                let before: Vec<(String, HostDescriptor)> = old
                    .iter()
                    .map(|(id, t)| (id.clone(), t.record.descriptor.clone()))
                    .collect();
                let mut next = BTreeMap::new();
                for record in records {
                    self.loads.observe(&record.descriptor);
                    let tracked = match old.remove(record.id()) {
                        // A snapshot at or after our position: the same record carries on, and
                        // so does what we judged of it (a confirmed departure the snapshot
                        // still precedes stays confirmed: a relist never undoes an expiry).
                        Some(mut t) => {
                            t.follow(record, now);
                            t
                        }
                        None => Tracked::new(record, now),
                    };
                    next.insert(tracked.record.id().to_string(), tracked);
                }
                // Records gone from the snapshot: a deletion this host did not see, by whom it
                // cannot tell, nor which renewals came before it. Peers stay until their lease
                // would have lapsed, counted from now unless the feed showed the deletion.
                let margin = self.cfg.drift_margin;
                for (id, mut t) in old {
                    if id != self.self_id && self.waits_out_feed_deletions() && t.departed.is_none()
                    {
                        if t.deleted.is_none() && self.waits_out_missing_records() {
                            t.gone_unseen.get_or_insert(now);
                        }
                        t.deleted.get_or_insert(new_cursor);
                        if !t.lapsed(now, margin) {
                            next.insert(id, t);
                        }
                    }
                }
                changed = before.len() != next.len()
                    || before.iter().zip(next.iter()).any(|((a, da), (b, tb))| {
                        a != b || !da.same_membership(&tb.record.descriptor)
                    });
                self.loads.retain(|id| next.contains_key(id));
                obs.records = next;
                obs.tombstones.clear();
            }
            ChangeBatch::Changes { changes, .. } => {
                for change in changes {
                    changed |= self.apply(&mut obs, change, now);
                }
            }
        }
        obs.cursor = Some(new_cursor);
        self.settle_unconfirmed_expiries(&mut obs);
        if changed {
            self.publish(&mut obs);
        }
        Ok(new_cursor)
    }

    fn apply(&self, obs: &mut Observed, change: Change, now: Instant) -> bool {
        match change {
            Change::Upsert(record) => {
                let id = record.id().to_string();
                // Our record naming any holder but our own incarnation is a write we did not
                // make (another process with our id, an operator): loss.
                if id == self.self_id
                    && record.holder != self.provider.holder()
                    && record.version >= self.own_version.load(Ordering::SeqCst)
                    && self.phase() == Phase::Serving
                {
                    // Our record, now held by someone else: proof of loss, at once.
                    let cause = LostCause::HolderChanged {
                        holder: record.holder.clone(),
                    };
                    self.hb.lost(cause.clone());
                    self.lapse(FenceReason::Lost(cause));
                }
                if let Some(&gone_at) = obs.tombstones.get(&id) {
                    if record.version <= gone_at {
                        return false;
                    }
                    obs.tombstones.remove(&id);
                }
                if obs
                    .unconfirmed_expiries
                    .get(&id)
                    .is_some_and(|&v| record.version > v)
                {
                    // Renewed or rejoined after the version our delete was conditional on.
                    obs.unconfirmed_expiries.remove(&id);
                }
                self.loads.observe(&record.descriptor);
                match obs.records.get_mut(&id) {
                    Some(t) => {
                        // A record whose only change is its load is a renewal: no new view.
                        let changed = !t.record.descriptor.same_membership(&record.descriptor);
                        t.follow(record, now);
                        changed
                    }
                    None => {
                        obs.records.insert(id, Tracked::new(record, now));
                        true
                    }
                }
            }
            Change::Delete {
                id,
                version,
                withdrawn,
            } => {
                if obs.tombstones.get(&id).is_some_and(|&v| version <= v) {
                    obs.tombstones.remove(&id);
                    return false;
                }
                obs.tombstones.remove(&id);
                if id == self.self_id
                    && version >= self.own_version.load(Ordering::SeqCst)
                    && self.phase() == Phase::Serving
                {
                    // Proof that our record is gone: fire at once, whatever the clocks say.
                    self.hb.lost(LostCause::Deleted);
                    self.lapse(FenceReason::Lost(LostCause::Deleted));
                }
                if let Some(t) = obs.records.get_mut(&id) {
                    // In log order: every renewal before the deletion has been delivered, so
                    // the last one seen bounds the peer's turns exactly.
                    t.gone_unseen = None;
                }
                if id != self.self_id
                    && !withdrawn
                    && self.waits_out_feed_deletions()
                    && let Some(t) = obs.records.get_mut(&id)
                    && !t.lapsed(now, self.cfg.drift_margin)
                {
                    // Deleted under a host that may still be running turns: keep it until
                    // they are all past their not-after (the sweep drops it then).
                    debug!(peer = %id, "peer's record deleted by another party; waiting out its lease");
                    t.deleted = Some(version);
                    return false;
                }
                self.loads.remove(&id);
                obs.records.remove(&id).is_some()
            }
        }
    }

    /// Builds and publishes a new view (under the observed lock, so views leave in order) and
    /// runs the subscribers, each contained so that a panicking one cannot take the others down.
    pub(super) fn publish(&self, obs: &mut Observed) {
        obs.version += 1;
        let hosts = obs
            .records
            .values()
            .map(|t| HostDescriptor {
                // Loads live on the board, which is always newer: a view does not show a
                // stale copy.
                load: None,
                ..t.record.descriptor.clone()
            })
            .collect();
        let view = Arc::new(MembershipView::new(obs.version, hosts));
        self.view_tx.send_replace(view.clone());
        let subscribers: Vec<Subscriber> = self
            .subscribers
            .lock()
            .expect("subscribers lock")
            .1
            .iter()
            .map(|(_, s)| s.clone())
            .collect();
        for s in subscribers {
            if catch_unwind(AssertUnwindSafe(|| s(&view))).is_err() {
                bump(&self.counters.subscriber_panics);
                warn!(
                    version = view.version,
                    "a membership on_change subscriber panicked"
                );
            }
        }
    }
}
