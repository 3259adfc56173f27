//! Membership over the in-process hub, on paused time: joins and views, `expire()` and `kill()`
//! for stateful and worker-only hosts, store isolation and outages, a lagging observer (with a
//! deliberately broken variant that skips the fresh read), a suspended VM, and coalescing.

use sigx_sidecar::clock::{ManualClock, SharedClock};
use sigx_sidecar::membership::{
    DeletionCheck, ExpiryCheck, FenceReason, HostDescriptor, HostStatus, LostCause, MemberFilter,
    MembershipConfig, MembershipHandle, MembershipProvider, MemoryHub, members_memo, start,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};
use tokio::time::Instant;

const BEAT: Duration = Duration::from_millis(1000);
const TTL: Duration = Duration::from_millis(3000);
const DRIFT: Duration = Duration::from_millis(200);

fn cfg() -> MembershipConfig {
    MembershipConfig {
        drift_margin: DRIFT,
        ..MembershipConfig::with_timing(BEAT, TTL)
    }
}

fn descriptor(id: &str, stateful: bool) -> HostDescriptor {
    let (types, st) = if stateful {
        (
            vec!["Counter".to_string(), "Relay".to_string()],
            vec!["Counter".to_string()],
        )
    } else {
        (vec!["Relay".to_string()], vec![])
    };
    HostDescriptor::new(id, format!("{id}:7000"), Some(types), Some(st))
}

fn clock() -> ManualClock {
    ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
}

async fn host_with(
    hub: &MemoryHub,
    id: &str,
    stateful: bool,
    cfg: MembershipConfig,
    clock: SharedClock,
) -> MembershipHandle {
    let h = start(hub.provider(id), descriptor(id, stateful), cfg, clock)
        .await
        .expect("join");
    h.set_status(HostStatus::Active).await.expect("active");
    h
}

async fn host(hub: &MemoryHub, id: &str, stateful: bool) -> MembershipHandle {
    host_with(hub, id, stateful, cfg(), Arc::new(clock())).await
}

fn ids(h: &MembershipHandle) -> Vec<String> {
    h.view().hosts().iter().map(|d| d.id.clone()).collect()
}

async fn wait_gone(h: &MembershipHandle, id: &str, within: Duration) -> Instant {
    let id = id.to_string();
    h.wait_for_view(within, move |v| v.get(&id).is_none())
        .await
        .unwrap_or_else(|_| panic!("{} still sees the host after {within:?}", h.self_id()));
    Instant::now()
}

async fn three(hub: &MemoryHub, stateful_c: bool) -> [MembershipHandle; 3] {
    let a = host(hub, "a", true).await;
    let b = host(hub, "b", true).await;
    let c = host(hub, "c", stateful_c).await;
    for h in [&a, &b, &c] {
        h.wait_for_view(Duration::from_secs(1), |v| {
            v.members(&MemberFilter::active()).len() == 3
        })
        .await
        .expect("all three active");
    }
    [a, b, c]
}

#[tokio::test(start_paused = true)]
async fn hosts_see_each_other_and_a_host_is_active_only_through_its_own_view() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, true).await;
    for h in [&a, &b, &c] {
        assert_eq!(ids(h), ["a", "b", "c"]);
        assert!(h.is_self_active());
        assert_eq!(h.check_lease(), Ok(()));
    }
    // Renewals are not membership changes: the same Arc across many beats.
    let before = a.view();
    tokio::time::sleep(BEAT * 5).await;
    assert!(
        Arc::ptr_eq(&before, &a.view()),
        "renewals must not publish a new view"
    );
    assert!(a.counters().beats >= 5);

    // A status change is: a new Arc and a higher version.
    c.set_status(HostStatus::Leaving).await.unwrap();
    let v = a
        .wait_for_view(Duration::from_secs(1), |v| {
            v.get("c").is_some_and(|d| d.status == HostStatus::Leaving)
        })
        .await
        .unwrap();
    assert!(v.version > before.version);
    assert_eq!(a.view().active_stateful_ids(), ["a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn own_active_wish_does_not_count_until_the_view_shows_it() {
    let hub = MemoryHub::new();
    let a = start(
        hub.provider("a"),
        descriptor("a", true),
        cfg(),
        Arc::new(clock()),
    )
    .await
    .unwrap();
    assert_eq!(a.view().get("a").unwrap().status, HostStatus::Joining);
    hub.freeze_feed("a", true);
    a.set_status(HostStatus::Active).await.unwrap();
    assert_eq!(
        hub.record("a").unwrap().descriptor.status,
        HostStatus::Active
    );
    assert!(
        !a.is_self_active(),
        "the write is done but our own view has not shown it yet"
    );
    hub.freeze_feed("a", false);
    a.wait_for_view(Duration::from_secs(1), |v| {
        v.get("a").unwrap().status == HostStatus::Active
    })
    .await
    .unwrap();
    assert!(a.is_self_active());
}

#[tokio::test(start_paused = true)]
async fn expire_fences_a_stateful_host_and_survivors_drop_it_within_ttl() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, true).await;
    let t0 = Instant::now();
    assert!(hub.expire("c"));
    // c is never told; it finds out at its next write (within one beat) and fences.
    let mut fenced = c.fenced_signal();
    tokio::time::timeout(BEAT * 2, fenced.wait_for(|r| r.is_some()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.fence_state(), Some(FenceReason::Lost(LostCause::Gone)));
    assert!(c.check_lease().is_err());
    assert!(!c.is_self_active());
    assert_eq!(c.counters().self_fences, 1);
    assert_eq!(c.counters().rejoin_attempts, 0);
    // No change-log entry: the survivors judge it themselves, and their fresh read finds
    // nothing. Nothing tells them c made no renewal they missed before the record vanished,
    // so they wait its lease out from that read (seed 6020430), and count no expiry of theirs.
    for s in [&a, &b] {
        let gone_at = wait_gone(s, "c", (TTL + DRIFT) * 2 + BEAT).await;
        assert!(
            gone_at - t0 > TTL + DRIFT,
            "{} dropped c {:?} after its record vanished, without waiting out its lease",
            s.self_id(),
            gone_at - t0
        );
        assert!(
            gone_at - t0 <= (TTL + DRIFT) * 2 + BEAT / 4,
            "{:?}",
            gone_at - t0
        );
        assert_eq!(ids(s), ["a", "b"]);
    }
    assert_eq!(
        a.counters().expiries_observed + b.counters().expiries_observed,
        0
    );
    // Terminal: it does not come back.
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(hub.ids(), ["a", "b"]);
    assert!(c.set_status(HostStatus::Active).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn expire_makes_a_worker_only_host_rejoin_under_the_same_id() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, false).await;
    assert!(!c.is_stateful());
    hub.expire("c");
    tokio::time::sleep(BEAT * 2).await;
    assert_eq!(c.fence_state(), None, "a worker-only host never fences");
    assert_eq!(c.check_lease(), Ok(()));
    let counters = c.counters();
    assert_eq!(
        (
            counters.rejoin_attempts,
            counters.rejoins,
            counters.self_fences
        ),
        (1, 1, 0)
    );
    assert_eq!(
        hub.record("c").unwrap().descriptor.status,
        HostStatus::Active
    );
    for s in [&a, &b, &c] {
        s.wait_for_view(Duration::from_secs(1), |v| {
            v.get("c").is_some_and(|d| d.status == HostStatus::Active)
        })
        .await
        .unwrap();
    }
    // And it stays in.
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(ids(&a), ["a", "b", "c"]);
    assert!(c.is_self_active());
}

/// A third party deletes a live stateful host's record (`kubectl delete lease`, Pod GC): the
/// host learns it from its own feed and fences at once, but the deletion proves nothing about
/// turns it still runs, so survivors keep it in their views until its last renewal is past its
/// TTL plus the margin (issue 12, hole D); with the check deliberately broken they drop it at
/// once.
#[tokio::test(start_paused = true)]
async fn kill_fences_a_stateful_host_at_once_and_survivors_wait_out_its_lease() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, true).await;
    let killed = Instant::now();
    assert!(hub.kill("c"));
    // The deletion comes through c's own feed: proof of loss, no waiting for a beat.
    let mut fenced = c.fenced_signal();
    tokio::time::timeout(Duration::from_millis(50), fenced.wait_for(|r| r.is_some()))
        .await
        .expect("immediate fence")
        .unwrap();
    assert_eq!(c.fence_state(), Some(FenceReason::Lost(LostCause::Deleted)));
    // c renewed at most a beat before the deletion: its turns may run until TTL after that.
    tokio::time::sleep(TTL - BEAT).await;
    for s in [&a, &b] {
        assert!(
            s.view().get("c").is_some(),
            "{} dropped c {:?} after a third-party deletion, before its lease lapsed",
            s.self_id(),
            killed.elapsed()
        );
    }
    for s in [&a, &b] {
        let gone = wait_gone(s, "c", BEAT + DRIFT + BEAT).await;
        assert!(gone.duration_since(killed) <= TTL + DRIFT + BEAT);
    }
    // The hub has no record to expire: nobody counts an expiry.
    assert_eq!(
        a.counters().expiries_observed + b.counters().expiries_observed,
        0
    );
}

#[tokio::test(start_paused = true)]
async fn broken_variant_trusting_a_deletion_drops_a_live_host_at_once() {
    let hub = MemoryHub::new();
    let broken = MembershipConfig {
        deletion_check: DeletionCheck::TrustDeletion,
        ..cfg()
    };
    let a = host_with(&hub, "a", true, broken, Arc::new(clock())).await;
    let _c = host(&hub, "c", true).await;
    a.wait_for_view(Duration::from_secs(1), |v| v.get("c").is_some())
        .await
        .unwrap();
    assert!(hub.kill("c"));
    wait_gone(&a, "c", Duration::from_millis(50)).await;
}

#[tokio::test(start_paused = true)]
async fn kill_makes_a_worker_only_host_rejoin() {
    let hub = MemoryHub::new();
    let [a, _b, c] = three(&hub, false).await;
    let before = hub.record("c").unwrap().version;
    hub.kill("c");
    // Told through its own feed, c rejoins at once (a may never even see it gone).
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        hub.record("c").unwrap().version > before,
        "c wrote its record again"
    );
    a.wait_for_view(BEAT, |v| v.get("c").is_some())
        .await
        .unwrap();
    assert_eq!((c.counters().rejoin_attempts, c.counters().rejoins), (1, 1));
    assert_eq!(c.fence_state(), None);
}

#[tokio::test(start_paused = true)]
async fn an_isolated_stateful_host_fences_before_any_peer_expires_it() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, true).await;
    let fenced_at = Arc::new(std::sync::Mutex::new(None));
    let mut fenced = c.fenced_signal();
    let f = fenced_at.clone();
    tokio::spawn(async move {
        fenced.wait_for(|r| r.is_some()).await.unwrap();
        *f.lock().unwrap() = Some(Instant::now());
    });
    let t0 = Instant::now();
    hub.isolate("c");
    let gone_a = wait_gone(&a, "c", TTL * 2).await;
    let gone_b = wait_gone(&b, "c", TTL * 2).await;
    let fenced_at = fenced_at.lock().unwrap().expect("c fenced");
    assert_eq!(c.fence_state(), Some(FenceReason::SuspectMonotonic));
    // The ordering the single-activation guarantee rests on.
    assert!(
        fenced_at < gone_a.min(gone_b),
        "fenced {:?} after a peer expired it",
        fenced_at - t0
    );
    assert!(fenced_at - t0 <= TTL + BEAT / 4);
    // The peers deleted the record by compare-and-swap.
    assert!(hub.record("c").is_none());
    assert!(a.counters().expiries_observed + b.counters().expiries_observed >= 1);
}

#[tokio::test(start_paused = true)]
async fn an_outage_longer_than_ttl_fences_every_stateful_host_and_a_shorter_one_nothing() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, false).await;
    hub.set_outage(true);
    tokio::time::sleep(TTL - BEAT / 2).await;
    hub.set_outage(false);
    tokio::time::sleep(TTL * 2).await;
    for h in [&a, &b, &c] {
        assert_eq!(
            h.fence_state(),
            None,
            "{} fenced on a short outage",
            h.self_id()
        );
        assert_eq!(h.counters().rejoin_attempts, 0);
    }
    assert_eq!(ids(&a), ["a", "b", "c"]);

    hub.set_outage(true);
    tokio::time::sleep(TTL + BEAT).await;
    assert!(matches!(
        a.fence_state(),
        Some(FenceReason::SuspectMonotonic)
    ));
    assert!(matches!(
        b.fence_state(),
        Some(FenceReason::SuspectMonotonic)
    ));
    // The worker-only host is rejoining, not fenced.
    assert_eq!(c.fence_state(), None);
    assert_eq!(c.counters().rejoin_attempts, 1);
    hub.set_outage(false);
    c.wait_for_view(TTL * 3, |v| {
        v.hosts().iter().map(|h| h.id.as_str()).eq(["c"])
    })
    .await
    .expect("the fenced hosts withdrew or were expired; the worker is back");
    assert_eq!(c.counters().rejoins, 1);
}

/// A lagging observer (its feed frozen) must not expire a live host: the fresh read sees the
/// renewals its feed has not delivered.
#[tokio::test(start_paused = true)]
async fn a_lagging_observer_does_not_expire_a_live_host() {
    let hub = MemoryHub::new();
    let [a, _b, c] = three(&hub, true).await;
    hub.freeze_feed("a", true);
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(ids(&a), ["a", "b", "c"]);
    assert_eq!(c.fence_state(), None);
    assert_eq!(a.counters().expiries_observed, 0);
}

/// Observer `a` under `observer` (the variant a test judges) and a stateful peer `c`, once
/// `a`'s view shows both.
async fn observer_and_peer(
    hub: &MemoryHub,
    observer: MembershipConfig,
) -> (MembershipHandle, MembershipHandle) {
    let a = host_with(hub, "a", true, observer, Arc::new(clock())).await;
    let c = host(hub, "c", true).await;
    a.wait_for_view(Duration::from_secs(1), |v| v.len() == 2)
        .await
        .unwrap();
    (a, c)
}

/// A lagging observer's fresh read finds a peer's record gone: deleted by a third party while
/// the peer, cut off from the store, still holds a lease renewed after the observer's feed
/// stalled. Fed the freeze, the deletion and `c`'s isolation, `a` must keep `c` until `c` has
/// fenced; returns (when `c` fenced, when `a` dropped it), from the freeze.
async fn observer_lags_and_record_vanishes(deletion_check: DeletionCheck) -> (Duration, Duration) {
    let hub = MemoryHub::new();
    let (a, c) = observer_and_peer(
        &hub,
        MembershipConfig {
            deletion_check,
            ..cfg()
        },
    )
    .await;
    let mut fenced = c.fenced_signal();
    let fenced = tokio::spawn(async move {
        fenced.wait_for(|r| r.is_some()).await.unwrap();
        Instant::now()
    });
    let t0 = Instant::now();
    hub.freeze_feed("a", true);
    // c renews twice that a does not see; then it is cut off and its record deleted under it.
    tokio::time::sleep(BEAT * 5 / 2).await;
    hub.isolate("c");
    assert!(hub.kill("c"));
    let gone = wait_gone(&a, "c", TTL * 3).await;
    let fenced = tokio::time::timeout(TTL * 2, fenced)
        .await
        .expect("c fences on its own clock")
        .unwrap();
    assert_eq!(c.fence_state(), Some(FenceReason::SuspectMonotonic));
    (fenced - t0, gone - t0)
}

/// Regression (simulator seed 6020430): the missing record is no proof that the peer's lease
/// lapsed; the observer waits it out from its read, as for a deletion its feed shows.
#[tokio::test(start_paused = true)]
async fn a_record_a_lagging_observer_finds_deleted_is_waited_out() {
    let (fenced, gone) = observer_lags_and_record_vanishes(DeletionCheck::WaitForLapse).await;
    assert!(
        fenced < gone,
        "a dropped c at {gone:?}, before c fenced at {fenced:?}"
    );
    assert!(gone <= TTL * 3, "a kept c too long: {gone:?}");
}

/// The deliberately broken variant: trusting the missing record, the observer drops the peer
/// while the peer still holds its lease and runs turns.
#[tokio::test(start_paused = true)]
async fn broken_variant_trusting_a_missing_record_drops_a_live_host() {
    let (fenced, gone) = observer_lags_and_record_vanishes(DeletionCheck::TrustMissingRecord).await;
    assert!(
        gone < fenced,
        "the broken observer should drop c (at {gone:?}) before c fenced (at {fenced:?})"
    );
}

/// The deliberately broken variant: without the fresh read, the same lagging observer expires a
/// live, unfenced host. This is what the fresh read is for.
#[tokio::test(start_paused = true)]
async fn broken_variant_without_the_fresh_read_expires_a_live_host() {
    let hub = MemoryHub::new();
    let (a, c) = observer_and_peer(
        &hub,
        MembershipConfig {
            expiry_check: ExpiryCheck::TrustLocalJudgement,
            ..cfg()
        },
    )
    .await;
    hub.freeze_feed("a", true);
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(ids(&a), ["a"], "the broken observer dropped c");
    assert_eq!(
        c.fence_state(),
        None,
        "while c is alive and holds its lease"
    );
    assert!(hub.record("c").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_suspended_vm_fences_on_resume_through_the_wall_clock() {
    let hub = MemoryHub::new();
    let clock_c = clock();
    let a = host(&hub, "a", true).await;
    let c = host_with(&hub, "c", true, cfg(), Arc::new(clock_c.clone())).await;
    assert_eq!(c.check_lease(), Ok(()));
    // The monotonic clock stands still while the wall clock jumps: the synchronous check made by
    // the next turn must refuse, before any beat runs.
    clock_c.suspend(TTL * 2);
    assert_eq!(c.check_lease(), Err(FenceReason::SuspectWall));
    assert_eq!(c.fence_state(), Some(FenceReason::SuspectWall));
    wait_gone(&a, "c", Duration::from_millis(100)).await;
}

#[tokio::test(start_paused = true)]
async fn a_suspended_worker_only_host_rejoins() {
    let hub = MemoryHub::new();
    let clock_c = clock();
    let a = host(&hub, "a", true).await;
    let c = host_with(&hub, "c", false, cfg(), Arc::new(clock_c.clone())).await;
    clock_c.suspend(TTL * 2);
    assert_eq!(c.check_lease(), Ok(()), "workers never fence");
    tokio::time::sleep(BEAT).await;
    assert_eq!((c.counters().rejoin_attempts, c.counters().rejoins), (1, 1));
    assert!(a.view().get("c").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_n_notifications_costs_one_re_read() {
    let hub = MemoryHub::new();
    let observer = hub.provider("obs");
    let obs = start(
        observer.clone(),
        descriptor("obs", false),
        cfg(),
        Arc::new(clock()),
    )
    .await
    .unwrap();
    let writers: Vec<_> = (0..20).map(|i| hub.provider(format!("w{i:02}"))).collect();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let before = observer.feed_reads();
    // Twenty joins in one burst: each notifies; the observer's feed task runs after them.
    for (i, w) in writers.iter().enumerate() {
        w.join(&descriptor(&format!("w{i:02}"), false), TTL)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        observer.feed_reads() - before,
        1,
        "20 notifications, one re-read"
    );
    assert_eq!(obs.view().len(), 21);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_subscriber_does_not_take_the_others_down() {
    let hub = MemoryHub::new();
    let a = host(&hub, "a", true).await;
    let seen = Arc::new(AtomicU64::new(0));
    let _bad = a.on_change(|_| panic!("subscriber bug"));
    let s = seen.clone();
    let _good = a.on_change(move |v| {
        s.store(v.len() as u64, Ordering::SeqCst);
    });
    let _b = host(&hub, "b", true).await;
    a.wait_for_view(Duration::from_secs(1), |v| v.len() == 2)
        .await
        .unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 2);
    assert!(a.counters().subscriber_panics >= 1);
    // And membership keeps working.
    let _c = host(&hub, "c", true).await;
    a.wait_for_view(Duration::from_secs(1), |v| v.len() == 3)
        .await
        .unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn members_memo_follows_the_view_arc() {
    let hub = MemoryHub::new();
    let [a, _b, c] = three(&hub, false).await;
    let memo = members_memo(a.clone(), MemberFilter::registering("Counter"));
    assert_eq!(memo.get().len(), 2);
    tokio::time::sleep(BEAT * 3).await;
    assert_eq!(memo.get().len(), 2);
    assert_eq!(memo.recomputes(), 1, "beats do not invalidate the memo");
    c.leave().await.unwrap();
    a.wait_for_view(Duration::from_secs(1), |v| v.len() == 2)
        .await
        .unwrap();
    memo.get();
    assert_eq!(memo.recomputes(), 2);
}

#[tokio::test(start_paused = true)]
async fn leave_withdraws_without_fencing() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, true).await;
    c.leave().await.unwrap();
    assert_eq!(c.fence_state(), None);
    assert_eq!(c.check_lease(), Err(FenceReason::Left));
    for s in [&a, &b] {
        wait_gone(s, "c", Duration::from_millis(50)).await;
    }
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(hub.ids(), ["a", "b"]);
    assert_eq!(a.counters().expiries_observed, 0);
}

#[tokio::test(start_paused = true)]
async fn a_second_host_with_a_live_id_is_refused() {
    let hub = MemoryHub::new();
    let _a = host(&hub, "a", true).await;
    let err = start(
        hub.provider("a-impostor"),
        descriptor("a", true),
        cfg(),
        Arc::new(clock()),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("held by"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn bad_timing_is_a_named_error_before_joining() {
    let hub = MemoryHub::new();
    let err = start(
        hub.provider("a"),
        descriptor("a", true),
        MembershipConfig::with_timing(Duration::from_secs(5), Duration::from_secs(10)),
        Arc::new(clock()),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("must exceed twice"), "{err}");
    assert!(hub.ids().is_empty(), "nothing was written");
}

/// A provider whose join writes take a long time to come back (`delay`), as do its expiry
/// deletes (`delete_delay`), and which notes when each join was tried.
struct SlowJoin {
    inner: Arc<sigx_sidecar::membership::MemoryProvider>,
    delay: Duration,
    delete_delay: Duration,
    joins: std::sync::Mutex<Vec<Instant>>,
}

#[async_trait::async_trait]
impl MembershipProvider for SlowJoin {
    fn kind(&self) -> &'static str {
        "memory-slow-join"
    }
    fn holder(&self) -> &str {
        self.inner.holder()
    }
    async fn join(
        &self,
        d: &HostDescriptor,
        ttl: Duration,
    ) -> Result<u64, sigx_sidecar::membership::ProviderError> {
        self.joins.lock().unwrap().push(Instant::now());
        // The store applies the write at once; the answer is slow to come back.
        let v = self.inner.join(d, ttl).await;
        tokio::time::sleep(self.delay).await;
        v
    }
    async fn renew(
        &self,
        d: &HostDescriptor,
    ) -> Result<u64, sigx_sidecar::membership::ProviderError> {
        self.inner.renew(d).await
    }
    async fn withdraw(&self) -> Result<(), sigx_sidecar::membership::ProviderError> {
        self.inner.withdraw().await
    }
    async fn changes_since(
        &self,
        c: Option<u64>,
    ) -> Result<sigx_sidecar::membership::ChangeBatch, sigx_sidecar::membership::ProviderError>
    {
        self.inner.changes_since(c).await
    }
    fn notifications(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.notifications()
    }
    async fn read(
        &self,
        id: &str,
    ) -> Result<
        Option<sigx_sidecar::membership::LeaseRecord>,
        sigx_sidecar::membership::ProviderError,
    > {
        self.inner.read(id).await
    }
    async fn delete_if(
        &self,
        id: &str,
        v: u64,
    ) -> Result<sigx_sidecar::membership::DeleteOutcome, sigx_sidecar::membership::ProviderError>
    {
        // The store applies the delete at once; the answer is slow to come back.
        let outcome = self.inner.delete_if(id, v).await;
        tokio::time::sleep(self.delete_delay).await;
        outcome
    }
}

/// DESIGN.md §3: the window counts from the start of the join write (`arm()` before it), not
/// from its confirmation. The peer saw the join when the store applied it, so a host whose join
/// answer came back late and which then cannot renew must fence TTL after the join *started*,
/// before the peer expires it. (Stamping the window at the confirmation, as the seed did, would
/// fence it almost a TTL too late.)
#[tokio::test(start_paused = true)]
async fn the_lease_window_starts_before_the_join_write() {
    let hub = MemoryHub::new();
    let peer = host(&hub, "peer", true).await;
    let slow = Arc::new(SlowJoin {
        inner: hub.provider("slow"),
        delay: TTL - BEAT / 2,
        delete_delay: Duration::ZERO,
        joins: Default::default(),
    });
    let t0 = Instant::now();
    let h = start(slow, descriptor("slow", true), cfg(), Arc::new(clock()))
        .await
        .expect("the join came back within the TTL");
    // From the moment the join answer arrived, the host cannot renew.
    hub.isolate("slow");
    let mut fenced = h.fenced_signal();
    tokio::time::timeout(TTL, fenced.wait_for(|r| r.is_some()))
        .await
        .expect("fenced")
        .unwrap();
    let fenced_after = t0.elapsed();
    assert!(
        fenced_after <= TTL + Duration::from_millis(2),
        "{fenced_after:?}"
    );
    assert_eq!(h.fence_state(), Some(FenceReason::SuspectMonotonic));
    let gone = wait_gone(&peer, "slow", TTL * 2).await;
    assert!(
        gone - t0 > fenced_after,
        "the peer expired the host before it fenced"
    );
}

/// A slow join answer alone does not fence: beats are scheduled from the start of the last
/// write, so the first renewal follows at once.
#[tokio::test(start_paused = true)]
async fn a_slow_join_alone_does_not_fence() {
    let hub = MemoryHub::new();
    let slow = Arc::new(SlowJoin {
        inner: hub.provider("slow"),
        delay: TTL - BEAT / 2,
        delete_delay: Duration::ZERO,
        joins: Default::default(),
    });
    let h = start(slow, descriptor("slow", true), cfg(), Arc::new(clock()))
        .await
        .unwrap();
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(h.fence_state(), None);
    assert!(h.counters().beats >= 3);
}

/// A worker-only host cut off past its TTL is expired by its peers (record deleted); once it can
/// reach the store again it rejoins under the same id and the peers take it back (the
/// expiry's tombstone does not hide the new record).
#[tokio::test(start_paused = true)]
async fn an_expired_worker_comes_back_after_the_partition_heals() {
    let hub = MemoryHub::new();
    let [a, b, c] = three(&hub, false).await;
    hub.isolate("c");
    wait_gone(&a, "c", TTL * 2).await;
    wait_gone(&b, "c", TTL * 2).await;
    assert!(hub.record("c").is_none(), "a peer deleted the record");
    assert_eq!(c.fence_state(), None);
    assert_eq!(c.counters().rejoin_attempts, 1);
    assert_eq!(c.counters().rejoins, 0, "the store is still out of reach");
    hub.heal("c");
    for s in [&a, &b, &c] {
        s.wait_for_view(TTL * 2, |v| {
            v.get("c").is_some_and(|d| d.status == HostStatus::Active)
        })
        .await
        .expect("c is back");
    }
    assert_eq!(c.counters().rejoins, 1);
    assert!(c.is_self_active());
}

/// Our record, written by another holder, arrives through our own feed: proof of loss, acted on
/// at once rather than at the next renewal.
#[tokio::test(start_paused = true)]
async fn a_record_taken_over_by_another_holder_fences_at_once() {
    let hub = MemoryHub::new();
    let [a, _b, c] = three(&hub, true).await;
    let beats = c.counters().beats;
    assert!(hub.take_over("c", "impostor"));
    let mut fenced = c.fenced_signal();
    tokio::time::timeout(Duration::from_millis(1), fenced.wait_for(|r| r.is_some()))
        .await
        .expect("fenced before any beat")
        .unwrap();
    assert_eq!(
        c.fence_state(),
        Some(FenceReason::Lost(LostCause::HolderChanged {
            holder: "impostor".into()
        }))
    );
    assert_eq!(
        c.counters().beats,
        beats,
        "no renewal was needed to find out"
    );
    // The fenced host does not delete a record that is not its own.
    tokio::time::sleep(BEAT * 2).await;
    assert_eq!(hub.record("c").unwrap().holder, "impostor");
    assert!(a.view().get("c").is_some());
}

/// A worker-only host cut off from the store for long keeps trying to rejoin, the pause between
/// attempts doubling from half a beat up to `rejoin_backoff_max` and no further (the seed's
/// rejoin backoff cap): no gap between attempts grows past the cap, and it gets back in soon
/// after the store heals.
#[tokio::test(start_paused = true)]
async fn rejoin_attempts_back_off_up_to_the_cap_and_no_further() {
    let hub = MemoryHub::new();
    let a = host(&hub, "a", true).await;
    let cap = Duration::from_secs(2);
    let counted = Arc::new(SlowJoin {
        inner: hub.provider("w"),
        delay: Duration::ZERO,
        delete_delay: Duration::ZERO,
        joins: Default::default(),
    });
    let w = start(
        counted.clone(),
        descriptor("w", false),
        MembershipConfig {
            rejoin_backoff_max: cap,
            ..cfg()
        },
        Arc::new(clock()),
    )
    .await
    .unwrap();
    w.set_status(HostStatus::Active).await.unwrap();
    hub.isolate("w");
    tokio::time::sleep(Duration::from_secs(40)).await;
    let joins = counted.joins.lock().unwrap().clone();
    // The first join, then the rejoin loop's attempts.
    assert!(
        joins.len() > 10,
        "only {} join attempts in 40 s",
        joins.len()
    );
    let gaps: Vec<Duration> = joins[1..].windows(2).map(|p| p[1] - p[0]).collect();
    let widest = *gaps.iter().max().unwrap();
    assert!(
        widest <= cap + Duration::from_millis(50),
        "a pause of {widest:?} between rejoin attempts, past the {cap:?} cap: {gaps:?}"
    );
    assert!(
        gaps.iter()
            .filter(|g| **g + Duration::from_millis(50) >= cap)
            .count()
            >= 10,
        "the backoff never reached the cap: {gaps:?}"
    );
    hub.heal("w");
    a.wait_for_view(cap + TTL, |v| v.get("w").is_some())
        .await
        .expect("w back in after the heal");
}

/// An expiry delete that lands but whose answer comes back after the observer gave up on it
/// (a loaded PostgreSQL server): the feed delivers the deletion first, the view drops the
/// peer, and the expiry is still counted as this host's, once.
#[tokio::test(start_paused = true)]
async fn an_expiry_delete_whose_answer_is_lost_still_counts_once() {
    let hub = MemoryHub::new();
    let observer = start(
        Arc::new(SlowJoin {
            inner: hub.provider("a"),
            delay: Duration::ZERO,
            // Past the sweep's io timeout (max(TTL / 2, beat)).
            delete_delay: TTL * 2,
            joins: Default::default(),
        }),
        descriptor("a", true),
        cfg(),
        Arc::new(clock()),
    )
    .await
    .unwrap();
    observer.set_status(HostStatus::Active).await.unwrap();
    let b = host(&hub, "b", true).await;
    observer
        .wait_for_view(Duration::from_secs(1), |v| v.get("b").is_some())
        .await
        .unwrap();
    b.abort();
    let t0 = Instant::now();
    let gone = wait_gone(&observer, "b", TTL * 3).await;
    assert!(gone - t0 <= TTL * 2 + DRIFT + BEAT, "{:?}", gone - t0);
    assert_eq!(hub.ids(), ["a"], "the delete landed");
    assert_eq!(observer.counters().expiries_observed, 1);
    tokio::time::sleep(TTL * 3).await;
    assert_eq!(observer.counters().expiries_observed, 1, "counted once");
}
