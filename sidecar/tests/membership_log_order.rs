//! A view is a prefix of the store's change log (DESIGN.md §3, issue 12 hole A), also for the
//! departures an observer judges itself; and an observer whose watch lags still expires a dead
//! peer, and no relist undoes an expiry. On the in-process hub, on paused time.

use sigx_sidecar::clock::ManualClock;
use sigx_sidecar::membership::{
    ChangeBatch, DeleteOutcome, ExpiryCheck, HostDescriptor, HostStatus, LeaseRecord,
    MembershipConfig, MembershipHandle, MembershipProvider, MembershipView, MemoryHub,
    MemoryProvider, ProviderError, start,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

const BEAT: Duration = Duration::from_millis(1000);
const TTL: Duration = Duration::from_millis(3000);
const DRIFT: Duration = Duration::from_millis(200);

fn cfg(expiry_check: ExpiryCheck) -> MembershipConfig {
    MembershipConfig {
        drift_margin: DRIFT,
        expiry_check,
        ..MembershipConfig::with_timing(BEAT, TTL)
    }
}

fn descriptor(id: &str) -> HostDescriptor {
    HostDescriptor::new(
        id,
        format!("{id}:7000"),
        Some(vec!["Counter".to_string()]),
        Some(vec!["Counter".to_string()]),
    )
}

async fn host_on(
    provider: Arc<dyn MembershipProvider>,
    id: &str,
    check: ExpiryCheck,
) -> MembershipHandle {
    let clock = Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    ));
    let h = start(provider, descriptor(id), cfg(check), clock)
        .await
        .expect("join");
    h.set_status(HostStatus::Active).await.expect("active");
    h
}

async fn host(hub: &MemoryHub, id: &str, check: ExpiryCheck) -> MembershipHandle {
    host_on(hub.provider(id), id, check).await
}

fn ids(v: &MembershipView) -> Vec<String> {
    v.hosts().iter().map(|d| d.id.clone()).collect()
}

async fn sees(h: &MembershipHandle, want: &[&str]) {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    h.wait_for_view(Duration::from_secs(2), move |v| ids(v) == want)
        .await
        .unwrap_or_else(|_| panic!("{} sees {:?}", h.self_id(), ids(&h.view())));
}

/// Every view `h` publishes from now on.
fn record_views(h: &MembershipHandle) -> (Arc<Mutex<Vec<Vec<String>>>>, impl Drop) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let sub = h.on_change(move |v| s.lock().unwrap().push(ids(v)));
    (seen, sub)
}

/// Observer `o`'s watch stalls; newcomer `j` joins (only `k` sees it); `k` dies. The log holds
/// j's join before k's deletion, so any view of `o` without `k` must show `j`. Returns every view
/// `o` published and `o` itself.
async fn stalled_watch_newcomer_departure(check: ExpiryCheck) -> (Vec<Vec<String>>, Vec<String>) {
    let hub = MemoryHub::new();
    let o = host(&hub, "o", check).await;
    let k = host(&hub, "k", ExpiryCheck::FreshRead).await;
    sees(&o, &["k", "o"]).await;
    let (views, _sub) = record_views(&o);
    hub.freeze_feed("o", true);
    let j = host(&hub, "j", ExpiryCheck::FreshRead).await;
    sees(&k, &["j", "k", "o"]).await;
    // k dies (kill -9: it never withdraws); o judges it itself, from fresh reads.
    k.abort();
    tokio::time::sleep(TTL * 3).await;
    assert!(hub.record("k").is_none(), "someone expired k");
    assert!(j.fence_state().is_none());
    let views = views.lock().unwrap().clone();
    (views, ids(&o.view()))
}

#[tokio::test(start_paused = true)]
async fn a_departure_the_observer_judges_is_published_in_log_order() {
    let (views, last) = stalled_watch_newcomer_departure(ExpiryCheck::FreshRead).await;
    for v in &views {
        assert!(
            v.iter().any(|h| h == "k") || v.iter().any(|h| h == "j"),
            "o published {v:?}: without k but also without j, which joined before k's \
             deletion (every view o published: {views:?})"
        );
    }
    assert_eq!(last, ["j", "o"], "o read the log up to k's deletion");
}

/// The broken variant (the code before the fix): the departure is published ahead of the feed,
/// and o's view skips the newcomer.
#[tokio::test(start_paused = true)]
async fn broken_variant_publishing_ahead_of_the_feed_skips_a_newcomer() {
    let (views, last) = stalled_watch_newcomer_departure(ExpiryCheck::PublishAheadOfFeed).await;
    assert!(
        views.iter().any(|v| v == &["o"]),
        "expected a view of o alone, got {views:?}"
    );
    assert_eq!(last, ["o"]);
}

/// The observer's watch stalls, the peer renews a few times (the observer's feed does not see
/// it), then dies. The fresh read shows a renewal the feed never delivered; the observer must
/// judge by that renewal and expire the peer, not keep it forever.
#[tokio::test(start_paused = true)]
async fn a_lagging_observer_expires_a_dead_peer_that_renewed_after_its_watch_stalled() {
    let hub = MemoryHub::new();
    let o = host(&hub, "o", ExpiryCheck::FreshRead).await;
    let c = host(&hub, "c", ExpiryCheck::FreshRead).await;
    sees(&o, &["c", "o"]).await;
    hub.freeze_feed("o", true);
    tokio::time::sleep(BEAT * 2).await;
    c.abort();
    let died = tokio::time::Instant::now();
    o.wait_for_view(TTL * 4, |v| v.get("c").is_none())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "o still sees the dead c {:?} after it died: its stale feed keeps it alive",
                TTL * 4
            )
        });
    // One window from the first candidacy (judged by the stale feed) to the fresh read that
    // showed the later renewal, one more from there: at most 2 × (TTL + drift) and a sweep tick.
    let took = died.elapsed();
    assert!(took <= (TTL + DRIFT) * 2 + BEAT, "{took:?}");
    assert_eq!(o.counters().expiries_observed, 1);
    assert!(hub.record("c").is_none());
}

/// A provider whose next feed read can be made to answer a snapshot taken earlier: a relist
/// that was read before a deletion and is applied after it (a list racing the expiry).
struct StaleRelist {
    inner: Arc<MemoryProvider>,
    stale: Mutex<Option<ChangeBatch>>,
    armed: AtomicBool,
}

#[async_trait::async_trait]
impl MembershipProvider for StaleRelist {
    fn kind(&self) -> &'static str {
        "memory-stale-relist"
    }
    fn holder(&self) -> &str {
        self.inner.holder()
    }
    async fn join(&self, d: &HostDescriptor, ttl: Duration) -> Result<u64, ProviderError> {
        self.inner.join(d, ttl).await
    }
    async fn renew(&self, d: &HostDescriptor) -> Result<u64, ProviderError> {
        self.inner.renew(d).await
    }
    async fn withdraw(&self) -> Result<(), ProviderError> {
        self.inner.withdraw().await
    }
    async fn changes_since(&self, c: Option<u64>) -> Result<ChangeBatch, ProviderError> {
        if self.armed.swap(false, Ordering::SeqCst)
            && let Some(b) = self.stale.lock().unwrap().clone()
        {
            return Ok(b);
        }
        self.inner.changes_since(c).await
    }
    fn notifications(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.notifications()
    }
    async fn read(&self, id: &str) -> Result<Option<LeaseRecord>, ProviderError> {
        self.inner.read(id).await
    }
    async fn delete_if(&self, id: &str, v: u64) -> Result<DeleteOutcome, ProviderError> {
        self.inner.delete_if(id, v).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_relist_read_before_an_expiry_does_not_undo_it() {
    let hub = MemoryHub::new();
    let provider = Arc::new(StaleRelist {
        inner: hub.provider("o"),
        stale: Mutex::new(None),
        armed: AtomicBool::new(false),
    });
    let o = host_on(provider.clone(), "o", ExpiryCheck::FreshRead).await;
    let c = host(&hub, "c", ExpiryCheck::FreshRead).await;
    sees(&o, &["c", "o"]).await;
    // A snapshot read while c was alive, delivered only after o expired c.
    *provider.stale.lock().unwrap() = Some(hub.provider("o").changes_since(None).await.unwrap());
    c.abort();
    o.wait_for_view(TTL * 2, |v| v.get("c").is_none())
        .await
        .expect("o expires the dead c");
    let (views, _sub) = record_views(&o);
    provider.armed.store(true, Ordering::SeqCst);
    o.refresh().await.expect("refresh");
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(ids(&o.view()), ["o"]);
    let views = views.lock().unwrap().clone();
    assert!(
        views.iter().all(|v| !v.iter().any(|h| h == "c")),
        "the relist brought the expired c back: {views:?}"
    );
}
