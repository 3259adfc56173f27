//! The membership engine of one host, provider-independent: the join, the heartbeat task, the
//! ordered change feed and the views built from it, the observer's expiry judgement (own
//! monotonic clock, then a fresh read, then a compare-and-swap delete), and the lapse policy
//! (stateful hosts fence, worker-only hosts rejoin). The rest of the sidecar holds a cloneable
//! [`MembershipHandle`].

use super::MembershipError;
use super::coalesce::{ReadFn, RefreshCoalescer};
use super::config::{DeletionCheck, ExpiryCheck, MembershipConfig, SelfFence};
use super::descriptor::{HostDescriptor, HostStatus};
use super::heartbeat::{ElapsedRule, FenceReason, HeartbeatClock, LostCause};
use super::load::{LoadBoard, LoadPolicy, LoadPublisher, LoadSource};
use super::provider::{
    Change, ChangeBatch, DeleteOutcome, LeaseRecord, MembershipProvider, ProviderError,
};
use super::view::{MembershipView, ViewSource};
use crate::clock::SharedClock;
use futures::FutureExt;
use std::collections::{BTreeMap, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, debug, info, info_span, warn};

/// Where the host stands with its own record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Holding the lease and renewing it.
    Serving,
    /// Worker-only host whose lease lapsed: rejoining under the same id.
    Lapsed,
    /// Stateful host that lost or suspects its lease: terminal.
    Fenced,
    /// Withdrew deliberately.
    Left,
}

/// The membership counters of one host (names in [`MembershipCounters::named`] are stable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MembershipCounters {
    /// Times this host fenced itself (0 or 1: fencing is terminal).
    pub self_fences: u64,
    /// Lease lapses answered by rejoining (worker-only hosts), counted at the decision.
    pub rejoin_attempts: u64,
    /// Rejoins that got back in. `rejoin_attempts - rejoins` is the rejoin loops still running.
    pub rejoins: u64,
    /// Lease writes confirmed.
    pub beats: u64,
    /// Lease writes that failed or timed out.
    pub beat_failures: u64,
    /// Peers this host expired (after the fresh read confirmed it).
    pub expiries_observed: u64,
    /// Reads of the store's change feed.
    pub feed_reads: u64,
    /// `on_change` subscribers that panicked (and were contained).
    pub subscriber_panics: u64,
}

impl MembershipCounters {
    /// The counters under their stable names, as `Status.counters` and metrics report them.
    pub fn named(&self) -> [(&'static str, u64); 8] {
        [
            ("selfFences", self.self_fences),
            ("rejoinAttempts", self.rejoin_attempts),
            ("rejoins", self.rejoins),
            ("membershipBeats", self.beats),
            ("membershipBeatFailures", self.beat_failures),
            ("membershipExpiriesObserved", self.expiries_observed),
            ("membershipFeedReads", self.feed_reads),
            ("membershipSubscriberPanics", self.subscriber_panics),
        ]
    }
}

#[derive(Default)]
struct Counters {
    self_fences: AtomicU64,
    rejoin_attempts: AtomicU64,
    rejoins: AtomicU64,
    beats: AtomicU64,
    beat_failures: AtomicU64,
    expiries_observed: AtomicU64,
    feed_reads: AtomicU64,
    subscriber_panics: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A record as this host observed it, with when (on its own monotonic clock) it last saw the
/// renewal token change.
struct Tracked {
    /// The record as the feed delivered it: what the view shows.
    record: LeaseRecord,
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
    departed: Option<u64>,
    /// The record was deleted, at this version, by someone other than its holder (a third
    /// party, or a peer's expiry this host has not judged itself), as the feed delivered or a
    /// read found ([`Tracked::gone_unseen`]). That proves
    /// nothing about turns still running on the host, so the record stays in the view until
    /// its last renewal seen is older than its TTL plus the margin ([`DeletionCheck`]).
    deleted: Option<u64>,
    /// When this host found the record gone without its feed showing the deletion (a fresh read
    /// that found nothing, a snapshot without it). The renewals its feed had not delivered by
    /// then are unknown, but all were made before that moment, so the peer's turns are past
    /// their not-after TTL plus the margin after it (seed 6020430). Cleared when the feed
    /// delivers the deletion: in log order, every renewal before it has been delivered too.
    gone_unseen: Option<Instant>,
}

impl Tracked {
    fn new(record: LeaseRecord, now: Instant) -> Self {
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
    fn lapsed(&self, now: Instant, margin: Duration) -> bool {
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
    fn follow(&mut self, record: LeaseRecord, now: Instant) {
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

struct Observed {
    records: BTreeMap<String, Tracked>,
    cursor: Option<u64>,
    /// Records removed ahead of the feed by the deliberately broken expiry variants, with the
    /// version removed: an older upsert still in the feed must not resurrect them.
    tombstones: HashMap<String, u64>,
    /// Peers whose expiry delete this host sent and has no answer to (in flight, timed out or
    /// failed), with the record version the delete was conditional on: if the record leaves the
    /// view meanwhile, the delete landed and the expiry was ours. Counted once, by whichever of
    /// the answer and the feed comes first; a newer record of the peer cancels it.
    unconfirmed_expiries: HashMap<String, u64>,
    version: u64,
}

type Subscriber = Arc<dyn Fn(&Arc<MembershipView>) + Send + Sync>;

/// What a fenced host awaits before it withdraws its record (see
/// [`MembershipHandle::hold_withdrawal_until`]).
type WithdrawHold = Arc<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

struct Inner {
    self_id: String,
    cfg: MembershipConfig,
    clock: SharedClock,
    provider: Arc<dyn MembershipProvider>,
    stateful: bool,
    hb: HeartbeatClock,
    desired: Mutex<HostDescriptor>,
    observed: Mutex<Observed>,
    view_tx: watch::Sender<Arc<MembershipView>>,
    fence_tx: watch::Sender<Option<FenceReason>>,
    phase: Mutex<Phase>,
    wake: Notify,
    subscribers: Mutex<(u64, Vec<(u64, Subscriber)>)>,
    counters: Counters,
    /// Serializes writes of our own record (beats, status changes, rejoin, withdraw).
    writer: tokio::sync::Mutex<()>,
    /// The version of our record as we last wrote it.
    own_version: AtomicU64,
    coalescer: OnceLock<RefreshCoalescer<MembershipError>>,
    /// The next feed read is a snapshot (`changes_since(None)`): after this host confirmed a
    /// departure its feed has not delivered, it reads the log up to the deletion that way.
    relist: std::sync::atomic::AtomicBool,
    /// This host has asked to be `active` before (the next time is a new active epoch).
    was_active: std::sync::atomic::AtomicBool,
    withdraw_hold: OnceLock<WithdrawHold>,
    /// Decides when our record's load changes (sampled at each of our writes).
    load_publisher: Mutex<LoadPublisher>,
    /// The peers' loads as their records say, beside the view (not in it).
    loads: Arc<LoadBoard>,
}

/// Aborts the background tasks when the last handle is dropped.
struct Tasks(Mutex<Vec<JoinHandle<()>>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in self.0.lock().expect("tasks lock").drain(..) {
            t.abort();
        }
    }
}

/// A host's membership: its view of the fleet, its lease, and its fencing state. Cheap to clone.
#[derive(Clone)]
pub struct MembershipHandle {
    inner: Arc<Inner>,
    tasks: Arc<Tasks>,
}

impl std::fmt::Debug for MembershipHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MembershipHandle")
            .field("self_id", &self.inner.self_id)
            .field("provider", &self.inner.provider.kind())
            .field("phase", &*self.inner.phase.lock().expect("phase lock"))
            .finish()
    }
}

/// Keeps an [`MembershipHandle::on_change`] callback registered; dropping it unsubscribes.
pub struct Subscription {
    inner: Weak<Inner>,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner
                .subscribers
                .lock()
                .expect("subscribers lock")
                .1
                .retain(|(id, _)| *id != self.id);
        }
    }
}

/// Joins membership as `joining` and starts the heartbeat, feed and expiry tasks.
///
/// The HeartbeatClock is armed *before* the join write, so the window counts from the start of
/// that write. Returns once the join is confirmed and a first view has been read.
pub async fn start(
    provider: Arc<dyn MembershipProvider>,
    descriptor: HostDescriptor,
    cfg: MembershipConfig,
    clock: SharedClock,
) -> Result<MembershipHandle, MembershipError> {
    cfg.validate()?;
    let mut descriptor = descriptor.normalized();
    if descriptor.id.is_empty() {
        return Err(super::DescriptorError::EmptyId.into());
    }
    descriptor.status = HostStatus::Joining;
    let span = info_span!("membership", host = %descriptor.id, provider = provider.kind());
    let inner = Arc::new(Inner {
        self_id: descriptor.id.clone(),
        stateful: descriptor.is_stateful(),
        hb: HeartbeatClock::with_rule(
            clock.clone(),
            cfg.ttl,
            if cfg.self_fence == SelfFence::TwoReadings {
                ElapsedRule::TwoReadings
            } else {
                ElapsedRule::Odometer
            },
        ),
        desired: Mutex::new(descriptor.clone()),
        observed: Mutex::new(Observed {
            records: BTreeMap::new(),
            cursor: None,
            tombstones: HashMap::new(),
            unconfirmed_expiries: HashMap::new(),
            version: 0,
        }),
        view_tx: watch::channel(Arc::new(MembershipView::empty())).0,
        fence_tx: watch::channel(None).0,
        phase: Mutex::new(Phase::Serving),
        wake: Notify::new(),
        subscribers: Mutex::new((0, Vec::new())),
        counters: Counters::default(),
        writer: tokio::sync::Mutex::new(()),
        own_version: AtomicU64::new(0),
        coalescer: OnceLock::new(),
        relist: std::sync::atomic::AtomicBool::new(false),
        was_active: std::sync::atomic::AtomicBool::new(false),
        withdraw_hold: OnceLock::new(),
        load_publisher: Mutex::new(LoadPublisher::new(LoadPolicy::default())),
        loads: Arc::new(LoadBoard::default()),
        cfg,
        clock,
        provider,
    });
    let weak = Arc::downgrade(&inner);
    let read: ReadFn<MembershipError> = Arc::new(move || {
        let weak = weak.clone();
        async move {
            match weak.upgrade() {
                Some(inner) => inner.read_feed().await,
                None => Err(MembershipError::Left),
            }
        }
        .boxed()
    });
    let _ = inner
        .coalescer
        .set(RefreshCoalescer::new(read, inner.cfg.coalesce));

    let join_started = Instant::now();
    async {
        // arm() before the join write: the window starts when the write starts.
        inner.hb.arm();
        inner.hb.beat();
        let timeout = inner.cfg.write_timeout();
        match tokio::time::timeout(timeout, inner.provider.join(&descriptor, inner.cfg.ttl)).await {
            Err(_) => {
                inner.hb.disarm();
                return Err(MembershipError::Timeout {
                    op: "join",
                    after: timeout,
                });
            }
            Ok(Err(e)) => {
                inner.hb.disarm();
                return Err(e.into());
            }
            Ok(Ok(version)) => {
                inner.own_version.store(version, Ordering::SeqCst);
                if let Err(reason) = inner.hb.check() {
                    let _ = inner.provider.withdraw().await;
                    return Err(MembershipError::Fenced(reason));
                }
                inner.hb.confirmed();
                bump(&inner.counters.beats);
            }
        }
        if let Err(e) = inner.coalescer().demand(None).await {
            let _ = inner.provider.withdraw().await;
            inner.hb.disarm();
            return Err(e);
        }
        info!(stateful = inner.stateful, "joined membership");
        Ok(())
    }
    .instrument(span.clone())
    .await?;

    let tasks = vec![
        tokio::spawn(feed_task(inner.clone()).instrument(span.clone())),
        tokio::spawn(beat_task(inner.clone(), join_started).instrument(span.clone())),
        tokio::spawn(guard_task(inner.clone()).instrument(span.clone())),
        tokio::spawn(sweep_task(inner.clone()).instrument(span)),
    ];
    Ok(MembershipHandle {
        inner,
        tasks: Arc::new(Tasks(Mutex::new(tasks))),
    })
}

impl Inner {
    fn coalescer(&self) -> &RefreshCoalescer<MembershipError> {
        self.coalescer.get().expect("coalescer set at start")
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().expect("phase lock")
    }

    /// The lease lapsed (suspicion or proof of loss): fence a stateful host, send a worker-only
    /// host into the rejoin loop.
    fn lapse(&self, reason: FenceReason) {
        let mut phase = self.phase.lock().expect("phase lock");
        if *phase != Phase::Serving {
            return;
        }
        if self.stateful {
            *phase = Phase::Fenced;
            drop(phase);
            bump(&self.counters.self_fences);
            warn!(%reason, "fenced: this host can no longer prove its membership; terminal");
            self.fence_tx.send_replace(Some(reason));
        } else {
            *phase = Phase::Lapsed;
            drop(phase);
            bump(&self.counters.rejoin_attempts);
            info!(%reason, "membership lapsed; worker-only host rejoins under the same id");
        }
        self.wake.notify_one();
    }

    /// One write of our own record (a beat or a status change), judged by the HeartbeatClock.
    async fn write_lease(&self) -> Result<(), MembershipError> {
        match self.phase() {
            Phase::Fenced => return Err(self.fenced_error()),
            Phase::Left => return Err(MembershipError::Left),
            Phase::Serving | Phase::Lapsed => {}
        }
        let _w = self.writer.lock().await;
        match self.phase() {
            Phase::Serving => {}
            Phase::Fenced => return Err(self.fenced_error()),
            Phase::Left => return Err(MembershipError::Left),
            // The rejoin publishes the desired descriptor.
            Phase::Lapsed => return Ok(()),
        }
        let descriptor = {
            let mut desired = self.desired.lock().expect("desired lock");
            // Load rides on this write, changed only when it moved materially (load.rs).
            let load = self
                .load_publisher
                .lock()
                .expect("load publisher lock")
                .next(Instant::now());
            if let Some(load) = load {
                desired.load = Some(load);
            }
            desired.clone()
        };
        self.hb.beat();
        let timeout = self.cfg.write_timeout();
        let result = tokio::time::timeout(timeout, self.provider.renew(&descriptor)).await;
        match result {
            Ok(Ok(version)) => {
                self.own_version.store(version, Ordering::SeqCst);
                // A write confirmed after the old deadline does not save the host.
                if let Err(reason) = self.hb.check() {
                    self.lapse(reason.clone());
                    return Err(self.lapse_error(reason));
                }
                self.hb.confirmed();
                bump(&self.counters.beats);
                Ok(())
            }
            Ok(Err(ProviderError::Lost { cause, .. })) => {
                bump(&self.counters.beat_failures);
                self.hb.lost(cause.clone());
                self.lapse(FenceReason::Lost(cause.clone()));
                Err(self.lapse_error(FenceReason::Lost(cause)))
            }
            Ok(Err(e)) => {
                bump(&self.counters.beat_failures);
                self.hb.failed();
                warn!(error = %e, "lease write failed");
                self.check_and_lapse();
                Err(e.into())
            }
            Err(_) => {
                bump(&self.counters.beat_failures);
                self.hb.failed();
                warn!(after = ?timeout, "lease write timed out");
                self.check_and_lapse();
                Err(MembershipError::Timeout {
                    op: "renew",
                    after: timeout,
                })
            }
        }
    }

    /// What a write that ran into a lapse reports: a stateful host fenced, a worker-only one
    /// is rejoining.
    fn lapse_error(&self, reason: FenceReason) -> MembershipError {
        if self.stateful {
            MembershipError::Fenced(reason)
        } else {
            MembershipError::Rejoining(reason)
        }
    }

    fn check_and_lapse(&self) {
        if self.phase() == Phase::Serving
            && self.cfg.self_fence != SelfFence::Never
            && let Err(reason) = self.hb.check()
        {
            self.lapse(reason);
        }
    }

    fn fenced_error(&self) -> MembershipError {
        MembershipError::Fenced(
            self.fence_tx
                .borrow()
                .clone()
                .unwrap_or(FenceReason::Lost(LostCause::Gone)),
        )
    }

    /// The coalesced read: the feed after our cursor, applied in order.
    async fn read_feed(self: Arc<Self>) -> Result<u64, MembershipError> {
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
    fn publish(&self, obs: &mut Observed) {
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
    fn settle_unconfirmed_expiries(&self, obs: &mut Observed) {
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
    fn waits_out_feed_deletions(&self) -> bool {
        self.cfg.deletion_check != DeletionCheck::TrustDeletion
    }

    /// Whether a record found missing without the feed showing its deletion waits for the
    /// peer's lease to lapse, counted from the read. Off in the broken variants that trust a
    /// missing record, and in the one that publishes departures ahead of the feed (the schedule
    /// that catches it needs its old handling of a missing record).
    fn waits_out_missing_records(&self) -> bool {
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
    async fn sweep(&self) {
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

    async fn withdraw_after_fence(&self) {
        // Peers sweep our claims once the record is gone, so the turns we handed out must be
        // over first. Every not-after is at most TTL past its hand-out, and hand-outs stopped at
        // the fence: the cap only guards against a wall clock stepped far back.
        if let Some(hold) = self.withdraw_hold.get() {
            let cap = self.cfg.ttl + self.cfg.drift_margin;
            if tokio::time::timeout(cap, hold()).await.is_err() {
                warn!(
                    ?cap,
                    "turns still outstanding past the longest possible not-after; withdrawing"
                );
            }
        }
        let _w = self.writer.lock().await;
        let mut backoff = self.cfg.rejoin_backoff_initial();
        for _ in 0..8 {
            match tokio::time::timeout(self.cfg.write_timeout(), self.provider.withdraw()).await {
                Ok(Ok(())) => {
                    info!("fenced host withdrew its record");
                    return;
                }
                Ok(Err(e)) => debug!(error = %e, "withdraw after fence failed"),
                Err(_) => debug!("withdraw after fence timed out"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.cfg.rejoin_backoff_max);
        }
        warn!("fenced host could not withdraw its record; peers will expire it");
    }

    async fn rejoin(&self) {
        let mut backoff = self.cfg.rejoin_backoff_initial();
        loop {
            {
                let _w = self.writer.lock().await;
                if self.phase() != Phase::Lapsed {
                    return;
                }
                let descriptor = self.desired.lock().expect("desired lock").clone();
                // A fresh window, started before the write (as at the first join).
                self.hb.arm();
                self.hb.beat();
                let result = tokio::time::timeout(
                    self.cfg.write_timeout(),
                    self.provider.join(&descriptor, self.cfg.ttl),
                )
                .await;
                match result {
                    Ok(Ok(version)) => {
                        self.own_version.store(version, Ordering::SeqCst);
                        self.hb.confirmed();
                        let mut phase = self.phase.lock().expect("phase lock");
                        if *phase == Phase::Lapsed {
                            *phase = Phase::Serving;
                        }
                        drop(phase);
                        bump(&self.counters.rejoins);
                        info!("rejoined membership under the same id");
                        self.coalescer().nudge(None);
                        return;
                    }
                    Ok(Err(e)) => {
                        self.hb.failed();
                        debug!(error = %e, ?backoff, "rejoin failed");
                    }
                    Err(_) => {
                        self.hb.failed();
                        debug!(?backoff, "rejoin timed out");
                    }
                }
            }
            tokio::select! {
                biased;
                _ = tokio::time::sleep(backoff) => {}
                _ = self.wake.notified() => {}
            }
            backoff = (backoff * 2).min(self.cfg.rejoin_backoff_max);
        }
    }
}

async fn feed_task(inner: Arc<Inner>) {
    let mut rx = inner.provider.notifications();
    loop {
        let hint = *rx.borrow_and_update();
        inner.coalescer().nudge(Some(hint));
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Renews every beat, counted from the *start* of the previous write (so a slow write is
/// followed by the next one at once rather than a whole beat later); half a beat after a
/// failure.
async fn beat_task(inner: Arc<Inner>, join_started: Instant) {
    let mut next = join_started + inner.cfg.beat;
    loop {
        match inner.phase() {
            Phase::Left => return,
            Phase::Fenced => {
                inner.withdraw_after_fence().await;
                return;
            }
            Phase::Lapsed => {
                inner.rejoin().await;
                next = Instant::now() + inner.cfg.beat;
                continue;
            }
            Phase::Serving => {}
        }
        tokio::select! {
            biased;
            _ = tokio::time::sleep_until(next) => {
                let started = Instant::now();
                let ok = inner.write_lease().await.is_ok();
                next = if ok {
                    started + inner.cfg.beat
                } else {
                    Instant::now() + (inner.cfg.beat / 2).max(Duration::from_millis(5))
                };
            }
            _ = inner.wake.notified() => {}
        }
    }
}

/// Asks the HeartbeatClock between beats, so an idle host fences (or rejoins) on time even when
/// no activation asks: at the monotonic deadline exactly (the fence must come before any peer
/// can expire the host), and every check interval for the wall clock (a suspend).
async fn guard_task(inner: Arc<Inner>) {
    loop {
        let mut next = Instant::now() + inner.cfg.check_interval();
        if let Some(deadline) = inner.hb.deadline() {
            // The clock's monotonic side may run ahead of tokio's (an injected clock): translate.
            let until = deadline.saturating_duration_since(inner.clock.now());
            next = next.min(Instant::now() + until + Duration::from_millis(1));
        }
        tokio::time::sleep_until(next).await;
        match inner.phase() {
            Phase::Serving => inner.check_and_lapse(),
            Phase::Left | Phase::Fenced => return,
            Phase::Lapsed => {}
        }
    }
}

async fn sweep_task(inner: Arc<Inner>) {
    let mut tick = tokio::time::interval(inner.cfg.check_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if inner.phase() == Phase::Left {
            return;
        }
        inner.sweep().await;
    }
}

impl ViewSource for MembershipHandle {
    fn current_view(&self) -> Arc<MembershipView> {
        self.view()
    }
}

impl MembershipHandle {
    /// This host's id.
    pub fn self_id(&self) -> &str {
        &self.inner.self_id
    }

    /// The provider kind (`memory`, `sqlite`, `kubernetes`).
    pub fn provider_kind(&self) -> &'static str {
        self.inner.provider.kind()
    }

    /// Whether this host registers a stateful type (and so fences instead of rejoining).
    pub fn is_stateful(&self) -> bool {
        self.inner.stateful
    }

    /// Where this host's load is sampled at each of its lease writes (the runtime's activation
    /// and turn counts, in production); until set, the record carries no load.
    pub fn set_load_source(&self, source: LoadSource) {
        self.inner
            .load_publisher
            .lock()
            .expect("load publisher lock")
            .set_source(source);
    }

    /// How long this host's lease writes took, by outcome (`/metrics`).
    pub fn renewal_histogram(&self) -> crate::metrics::OutcomeHistogram {
        self.inner.hb.renewals().clone()
    }

    /// The peers' loads, as their records last said, for the `least-loaded` placement policy.
    pub fn loads(&self) -> Arc<LoadBoard> {
        self.inner.loads.clone()
    }

    /// The descriptor this host publishes (with the status it wants).
    pub fn descriptor(&self) -> HostDescriptor {
        self.inner.desired.lock().expect("desired lock").clone()
    }

    /// The current view: the same `Arc` until the next observed change.
    pub fn view(&self) -> Arc<MembershipView> {
        self.inner.view_tx.borrow().clone()
    }

    /// A receiver of every new view.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MembershipView>> {
        self.inner.view_tx.subscribe()
    }

    /// Runs `f` with every new view, synchronously on the path that observed the change. Keep it
    /// short; a panic is contained (and counted) and does not reach the other subscribers.
    pub fn on_change(
        &self,
        f: impl Fn(&Arc<MembershipView>) + Send + Sync + 'static,
    ) -> Subscription {
        let mut subs = self.inner.subscribers.lock().expect("subscribers lock");
        subs.0 += 1;
        let id = subs.0;
        subs.1.push((id, Arc::new(f)));
        Subscription {
            inner: Arc::downgrade(&self.inner),
            id,
        }
    }

    /// May this host serve turns right now? Synchronous: asks the HeartbeatClock on both clocks
    /// at this instant, so a turn or `Collect` that wakes after a suspend finds the host already
    /// fenced. Always `Ok` for a worker-only host (it never fences) until it leaves.
    pub fn check_lease(&self) -> Result<(), FenceReason> {
        match self.inner.phase() {
            Phase::Fenced => {
                return Err(self
                    .fence_state()
                    .unwrap_or(FenceReason::Lost(LostCause::Gone)));
            }
            Phase::Left => return Err(FenceReason::Left),
            Phase::Serving | Phase::Lapsed => {}
        }
        if !self.inner.stateful || self.inner.cfg.self_fence == SelfFence::Never {
            return Ok(());
        }
        match self.inner.hb.check() {
            Ok(()) => Ok(()),
            Err(reason) => {
                self.inner.lapse(reason.clone());
                Err(reason)
            }
        }
    }

    /// [`MembershipHandle::check_lease`], and until when a turn handed to the app now may run:
    /// the lease's validity on the wall clock (HeartbeatClock) minus the drift margin, the
    /// margin covering the rate drift between this host's clocks and its peers'. `None` when no
    /// lease bounds this host's turns (worker-only, or self-fencing switched off).
    pub fn turn_bound(&self) -> Result<Option<std::time::SystemTime>, FenceReason> {
        self.check_lease()?;
        if !self.inner.stateful || self.inner.cfg.self_fence == SelfFence::Never {
            return Ok(None);
        }
        Ok(self.inner.hb.valid_until().map(|v| {
            v.checked_sub(self.inner.cfg.drift_margin)
                .unwrap_or(std::time::UNIX_EPOCH)
        }))
    }

    /// A fenced host withdraws its record only after `hold` resolves (bounded by TTL + margin):
    /// the runtime's "every turn handed out was answered or is past its not-after". Set once.
    pub fn hold_withdrawal_until(
        &self,
        hold: impl Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync + 'static,
    ) {
        let _ = self.inner.withdraw_hold.set(Arc::new(hold));
    }

    /// Why this host fenced, once it has (latched; `/livez` fails while it is `Some`).
    pub fn fence_state(&self) -> Option<FenceReason> {
        self.inner.fence_tx.borrow().clone()
    }

    /// A receiver that changes to `Some(reason)` when the host fences.
    pub fn fenced_signal(&self) -> watch::Receiver<Option<FenceReason>> {
        self.inner.fence_tx.subscribe()
    }

    /// Whether this host is active to itself: its own view shows its own `active` record (its
    /// wish to be active does not count), and it has not fenced or left.
    pub fn is_self_active(&self) -> bool {
        matches!(self.inner.phase(), Phase::Serving | Phase::Lapsed)
            && self.fence_state().is_none()
            && self
                .view()
                .get(&self.inner.self_id)
                .is_some_and(|h| h.status == HostStatus::Active)
    }

    /// This host's own record as it last asked for it (status and active epoch): what its next
    /// lease write carries, which its view shows only once the feed delivers it.
    pub fn own_record(&self) -> (HostStatus, u64) {
        let desired = self.inner.desired.lock().expect("desired lock");
        (desired.status, desired.active_epoch)
    }

    /// Publishes a new status (a lease write), then refreshes the view.
    ///
    /// Becoming `active` again after having been active (an app that detached and came back)
    /// bumps the descriptor's `active_epoch`: the re-activation is a new record version every
    /// peer can tell from the earlier one, so a peer whose feed still shows the earlier
    /// `active` record disagrees on the directory fingerprint until it has seen this one.
    pub async fn set_status(&self, status: HostStatus) -> Result<(), MembershipError> {
        {
            let mut desired = self.inner.desired.lock().expect("desired lock");
            // (`swap` only when becoming active: the first time marks it, later ones bump.)
            if status == HostStatus::Active
                && desired.status != HostStatus::Active
                && self.inner.was_active.swap(true, Ordering::SeqCst)
            {
                desired.active_epoch += 1;
                info!(
                    epoch = desired.active_epoch,
                    "active again under the same id: a new active epoch"
                );
            }
            desired.status = status;
        }
        self.inner.write_lease().await?;
        self.refresh().await.map(|_| ())
    }

    /// Withdraws this host's record and stops the heartbeat. Not a fence.
    pub async fn leave(&self) -> Result<(), MembershipError> {
        {
            let mut phase = self.inner.phase.lock().expect("phase lock");
            match *phase {
                Phase::Left => return Ok(()),
                // A fenced host already withdrew (or is withdrawing).
                Phase::Fenced => {
                    *phase = Phase::Left;
                    return Ok(());
                }
                Phase::Serving | Phase::Lapsed => *phase = Phase::Left,
            }
        }
        self.inner.wake.notify_one();
        let _w = self.inner.writer.lock().await;
        self.inner.hb.disarm();
        let timeout = self.inner.cfg.write_timeout();
        match tokio::time::timeout(timeout, self.inner.provider.withdraw()).await {
            Ok(Ok(())) => {
                info!("left membership");
                drop(_w);
                let _ = self.refresh().await;
                Ok(())
            }
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(MembershipError::Timeout {
                op: "withdraw",
                after: timeout,
            }),
        }
    }

    /// A view read from the store after this call started (single-flight with every other
    /// refresh and notification).
    pub async fn refresh(&self) -> Result<Arc<MembershipView>, MembershipError> {
        self.inner.coalescer().demand(None).await?;
        Ok(self.view())
    }

    /// The trailing window of this host's refresh coalescer (`coalesceMs`), as configured.
    pub fn coalesce_window(&self) -> Duration {
        self.inner.coalescer().window()
    }

    /// Waits until the view satisfies `pred`, or `timeout` passes.
    pub async fn wait_for_view(
        &self,
        timeout: Duration,
        pred: impl Fn(&MembershipView) -> bool,
    ) -> Result<Arc<MembershipView>, MembershipError> {
        let mut rx = self.subscribe();
        let wait = async {
            loop {
                let view = rx.borrow_and_update().clone();
                if pred(&view) {
                    return view;
                }
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| MembershipError::Timeout {
                op: "wait for view",
                after: timeout,
            })
    }

    /// The counters.
    pub fn counters(&self) -> MembershipCounters {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MembershipCounters {
            self_fences: get(&c.self_fences),
            rejoin_attempts: get(&c.rejoin_attempts),
            rejoins: get(&c.rejoins),
            beats: get(&c.beats),
            beat_failures: get(&c.beat_failures),
            expiries_observed: get(&c.expiries_observed),
            feed_reads: get(&c.feed_reads),
            subscriber_panics: get(&c.subscriber_panics),
        }
    }

    /// Stops the background tasks now (as dropping the last handle does), without withdrawing:
    /// a crash, for tests and the simulator.
    pub fn abort(&self) {
        for t in self.tasks.0.lock().expect("tasks lock").drain(..) {
            t.abort();
        }
    }
}
