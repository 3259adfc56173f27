//! The membership engine of one host, provider-independent: the join, the heartbeat task, the
//! ordered change feed and the views built from it, the observer's expiry judgement (own
//! monotonic clock, then a fresh read, then a compare-and-swap delete), and the lapse policy
//! (stateful hosts fence, worker-only hosts rejoin). The rest of the sidecar holds a cloneable
//! [`MembershipHandle`].

use super::MembershipError;
use super::coalesce::{ReadFn, RefreshCoalescer};
use super::config::{MembershipConfig, SelfFence};
use super::descriptor::{HostDescriptor, HostStatus};
use super::heartbeat::{ElapsedRule, FenceReason, HeartbeatClock, LostCause};
use super::load::{LoadBoard, LoadPolicy, LoadPublisher, LoadSource};
use super::provider::{MembershipProvider, ProviderError};
use super::view::{MembershipView, ViewSource};
use crate::clock::SharedClock;
use futures::FutureExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{Instrument, info, info_span, warn};

mod expiry;
mod feed;
mod lapse;

use expiry::Tracked;

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
