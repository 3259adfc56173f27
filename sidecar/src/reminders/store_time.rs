//! The clock reminders are due by: the store's own, where it has one (PostgreSQL's server
//! clock), read at most once a second and carried forward on the timer clock in between.
//!
//! Why not the host's wall clock: a reminder is set on one host and fired by another (its
//! shard's owner), so each host's error lands on someone else's reminders. A shard owner whose
//! wall clock was stepped back 30 s fired every reminder of its shards 30 s late; one stepped
//! forward fired them early; and a `due_in_ms` set through a skewed host was stored off by the
//! skew. On the store's clock every host agrees when a reminder is due, and a claim's lapse
//! (`claim_until_ms`, judged by whichever host claims next) is on that one clock too.
//!
//! A store that shares the host's machine (SQLite, memory) has no clock of its own: the host's
//! wall clock *is* the store's, and every host of that store reads the same one.

use super::ReminderStore;
use crate::clock::SharedClock;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How long a reading of the store's clock is carried forward before it is read again.
const REFRESH: Duration = Duration::from_secs(1);
/// How far the host's wall clock may disagree with the timer clock since the last reading
/// before the store's clock is read again at once: a step (NTP, `date -s`) or a suspend the
/// timer clock did not count.
const DISAGREEMENT_MS: i64 = 100;

/// One reading of the store's clock.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    /// The store's clock, Unix ms.
    store_ms: i64,
    /// When it was read on the timer clock (the middle of the round trip).
    at: Instant,
    /// The host's wall clock then, Unix ms (to notice a step or a suspend since).
    wall_ms: i64,
}

/// Now on the store's clock, as this host knows it. One per host, shared by its reminder owner
/// and its `SetReminder` path.
#[derive(Debug, Default)]
pub struct StoreTime {
    anchor: Mutex<Option<Anchor>>,
}

impl StoreTime {
    /// Now, Unix ms, on the store's clock: the last reading carried forward on the timer clock,
    /// or the host's wall clock when the store has no clock of its own (or was not read yet).
    pub fn now_unix_ms(&self, clock: &SharedClock) -> i64 {
        match *self.anchor.lock().expect("store time lock") {
            Some(a) => a.store_ms + Instant::now().duration_since(a.at).as_millis() as i64,
            None => clock.wall_unix_ms(),
        }
    }

    /// Reads the store's clock again if the last reading is older than a second, or if the
    /// host's wall clock moved apart from the timer clock since (a step or a suspend). A store
    /// that cannot answer keeps the last reading carried forward.
    pub async fn refresh(&self, store: &dyn ReminderStore, clock: &SharedClock) {
        let last = *self.anchor.lock().expect("store time lock");
        if let Some(a) = last {
            let by_timer = Instant::now().duration_since(a.at).as_millis() as i64;
            let by_wall = clock.wall_unix_ms() - a.wall_ms;
            if by_timer < REFRESH.as_millis() as i64
                && (by_wall - by_timer).abs() <= DISAGREEMENT_MS
            {
                return;
            }
        }
        let sent = Instant::now();
        match store.clock_unix_ms().await {
            Ok(Some(store_ms)) => {
                let back = Instant::now();
                let anchor = Anchor {
                    store_ms,
                    at: sent + back.duration_since(sent) / 2,
                    wall_ms: clock.wall_unix_ms(),
                };
                let skew = store_ms - anchor.wall_ms;
                if skew.abs() > 1_000
                    && last.is_none_or(|l| (l.store_ms - l.wall_ms - skew).abs() > 1_000)
                {
                    tracing::warn!(
                        skew_ms = skew,
                        "this host's wall clock is {skew} ms off the state store's; reminders \
                         are due by the store's clock, but check this host's time sync (NTP)"
                    );
                }
                *self.anchor.lock().expect("store time lock") = Some(anchor);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "cannot read the state store's clock; carrying the last reading forward");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::reminders::{ClaimRequest, ReminderRow, ReminderSpec, Settlement};
    use crate::runtime::ActorId;
    use crate::state::StateError;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
    use std::time::UNIX_EPOCH;

    /// A store whose clock reads `clock_ms` plus the timer clock's advance since it was made.
    struct ClockedStore {
        base_ms: Option<i64>,
        since: Instant,
        reads: AtomicU32,
        fail: AtomicI64,
    }

    impl ClockedStore {
        fn new(base_ms: Option<i64>) -> Self {
            ClockedStore {
                base_ms,
                since: Instant::now(),
                reads: AtomicU32::new(0),
                fail: AtomicI64::new(0),
            }
        }
    }

    #[async_trait::async_trait]
    impl ReminderStore for ClockedStore {
        async fn set_reminder(
            &self,
            _: &ActorId,
            _: u32,
            _: &ReminderSpec,
            _: Option<u64>,
        ) -> Result<(), StateError> {
            unreachable!("not used by the clock")
        }
        async fn delete_reminder(
            &self,
            _: &ActorId,
            _: &str,
            _: Option<u64>,
        ) -> Result<bool, StateError> {
            unreachable!("not used by the clock")
        }
        async fn list_reminders(&self, _: &ActorId) -> Result<Vec<ReminderRow>, StateError> {
            unreachable!("not used by the clock")
        }
        async fn claim_due(&self, _: &ClaimRequest<'_>) -> Result<Vec<ReminderRow>, StateError> {
            unreachable!("not used by the clock")
        }
        async fn settle(&self, _: &[Settlement]) -> Result<(), StateError> {
            unreachable!("not used by the clock")
        }
        async fn holds(&self, _: &ActorId, _: &str, _: i64) -> Result<bool, StateError> {
            unreachable!("not used by the clock")
        }
        async fn clock_unix_ms(&self) -> Result<Option<i64>, StateError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            if self.fail.load(Ordering::SeqCst) != 0 {
                return Err(StateError::Unavailable {
                    store: "test",
                    message: "down".into(),
                });
            }
            Ok(self
                .base_ms
                .map(|b| b + self.since.elapsed().as_millis() as i64))
        }
    }

    fn host_clock(unix_ms: u64) -> (Arc<ManualClock>, SharedClock) {
        let manual = Arc::new(ManualClock::new(
            UNIX_EPOCH + Duration::from_millis(unix_ms),
        ));
        (manual.clone(), manual)
    }

    /// The host's wall clock is 30 s behind the store's: due times follow the store. (A
    /// `ManualClock` moves with tokio's paused time, so `advance` moves both.)
    #[tokio::test(start_paused = true)]
    async fn a_host_whose_wall_clock_is_off_tells_time_by_the_store() {
        let store = ClockedStore::new(Some(1_000_000));
        let (_, clock) = host_clock(970_000);
        let t = StoreTime::default();
        assert_eq!(
            t.now_unix_ms(&clock),
            970_000,
            "not read yet: the host's own"
        );
        t.refresh(&store, &clock).await;
        assert_eq!(t.now_unix_ms(&clock), 1_000_000);
        // Carried forward on the timer clock, not re-read within the second.
        tokio::time::advance(Duration::from_millis(400)).await;
        t.refresh(&store, &clock).await;
        assert_eq!(store.reads.load(Ordering::SeqCst), 1);
        assert_eq!(t.now_unix_ms(&clock), 1_000_400);
        // A second later it is read again.
        tokio::time::advance(Duration::from_millis(700)).await;
        t.refresh(&store, &clock).await;
        assert_eq!(store.reads.load(Ordering::SeqCst), 2);
        assert_eq!(t.now_unix_ms(&clock), 1_001_100);
    }

    /// A step of the host's wall clock changes nothing it judges, and triggers a fresh reading.
    #[tokio::test(start_paused = true)]
    async fn a_wall_step_is_ignored_and_prompts_a_reading() {
        let store = ClockedStore::new(Some(1_000_000));
        let (manual, clock) = host_clock(1_000_000);
        let t = StoreTime::default();
        t.refresh(&store, &clock).await;
        manual.step_wall_back(Duration::from_secs(30));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert_eq!(t.now_unix_ms(&clock), 1_000_200, "the step is not seen");
        t.refresh(&store, &clock).await;
        assert_eq!(store.reads.load(Ordering::SeqCst), 2, "read again at once");
        assert_eq!(t.now_unix_ms(&clock), 1_000_200);
    }

    /// A store without a clock leaves the host's wall clock in charge; one that cannot answer
    /// leaves the last reading carried forward.
    #[tokio::test(start_paused = true)]
    async fn without_a_store_clock_the_host_wall_clock_rules_and_an_outage_keeps_the_reading() {
        let (manual, clock) = host_clock(5_000);
        let t = StoreTime::default();
        t.refresh(&ClockedStore::new(None), &clock).await;
        manual.advance(Duration::from_millis(50));
        assert_eq!(t.now_unix_ms(&clock), 5_050);

        let store = ClockedStore::new(Some(9_000));
        t.refresh(&store, &clock).await;
        assert_eq!(t.now_unix_ms(&clock), 9_000);
        store.fail.store(1, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(3)).await;
        t.refresh(&store, &clock).await;
        assert_eq!(t.now_unix_ms(&clock), 12_000);
    }
}
