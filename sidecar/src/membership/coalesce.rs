//! Refresh coalescing (seed: `coalesceMs`, `refreshCoalescer()`): the first demand after a quiet
//! period reads at once (leading edge); while a read is in flight, every further demand shares
//! one follow-up read (single-flight); a notification whose feed position the last read already
//! covered costs nothing (version-gated). A burst of N notifications costs one re-read, not N.
//!
//! `demand()` keeps `refresh()`'s contract: it resolves with a read that *started* at or after
//! the call. The read runs in its own task, so a demander that gives up never wedges the others.

use futures::future::BoxFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The read being coalesced: returns the feed position it reached.
pub type ReadFn<E> = Arc<dyn Fn() -> BoxFuture<'static, Result<u64, E>> + Send + Sync>;

#[derive(Debug, Clone)]
struct Done<E> {
    generation: u64,
    result: Result<u64, E>,
}

struct State {
    running: bool,
    /// Reads started so far; read number `started + 1` is the next to start.
    started: u64,
    /// The highest read number someone waits for.
    wanted: u64,
    /// Someone needs a real read (not satisfiable by a version gate).
    explicit: bool,
    /// The highest notified feed position not yet known to be read.
    hint: u64,
    /// The feed position the last successful read reached.
    cursor: u64,
    last_start: Option<Instant>,
}

/// A single-flight, leading-edge, version-gated refresher around one read function.
pub struct RefreshCoalescer<E: Clone + Send + Sync + 'static> {
    inner: Arc<Inner<E>>,
}

impl<E: Clone + Send + Sync + 'static> Clone for RefreshCoalescer<E> {
    fn clone(&self) -> Self {
        RefreshCoalescer {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<E> {
    read: ReadFn<E>,
    window: Duration,
    state: Mutex<State>,
    done: watch::Sender<Option<Done<E>>>,
    /// Whether a read is running or waiting out the trailing window.
    busy: watch::Sender<bool>,
    reads: AtomicU64,
}

impl<E: Clone + Send + Sync + 'static> RefreshCoalescer<E> {
    /// Coalesces calls of `read`; `window` is the trailing window (`coalesce_ms`, 0 = none).
    pub fn new(read: ReadFn<E>, window: Duration) -> Self {
        RefreshCoalescer {
            inner: Arc::new(Inner {
                read,
                window,
                state: Mutex::new(State {
                    running: false,
                    started: 0,
                    wanted: 0,
                    explicit: false,
                    hint: 0,
                    cursor: 0,
                    last_start: None,
                }),
                done: watch::channel(None).0,
                busy: watch::channel(false).0,
                reads: AtomicU64::new(0),
            }),
        }
    }

    /// The trailing window this coalescer waits out after a read.
    pub fn window(&self) -> Duration {
        self.inner.window
    }

    /// How many reads actually ran.
    pub fn reads(&self) -> u64 {
        self.inner.reads.load(Ordering::Relaxed)
    }

    /// Demands a read that starts at or after now, and waits for it. `hint` is the feed position
    /// a notification announced: if a read already reached it, nothing is read.
    pub async fn demand(&self, hint: Option<u64>) -> Result<(), E> {
        let Some((target, mut rx)) = self.register(hint) else {
            return Ok(());
        };
        loop {
            if let Some(d) = rx.borrow_and_update().as_ref()
                && d.generation >= target
            {
                return d.result.clone().map(|_| ());
            }
            if rx.changed().await.is_err() {
                return Ok(());
            }
        }
    }

    /// Like [`RefreshCoalescer::demand`] without waiting: for notification loops.
    pub fn nudge(&self, hint: Option<u64>) {
        let _ = self.register(hint);
    }

    /// Resolves once no read is running or wanted (teardown).
    pub async fn settled(&self) {
        let mut rx = self.inner.busy.subscribe();
        let _ = rx.wait_for(|busy| !busy).await;
    }

    fn register(&self, hint: Option<u64>) -> Option<(u64, watch::Receiver<Option<Done<E>>>)> {
        let mut s = self.inner.state.lock().expect("coalescer lock");
        match hint {
            // Version-gated: a completed read already covered this position.
            Some(h) if h <= s.cursor => return None,
            Some(h) => s.hint = s.hint.max(h),
            None => s.explicit = true,
        }
        let target = s.started + 1;
        s.wanted = s.wanted.max(target);
        let rx = self.inner.done.subscribe();
        if !s.running {
            s.running = true;
            self.inner.busy.send_replace(true);
            let inner = self.inner.clone();
            tokio::spawn(run(inner));
        }
        Some((target, rx))
    }
}

async fn run<E: Clone + Send + Sync + 'static>(inner: Arc<Inner<E>>) {
    loop {
        let wait_until = {
            let s = inner.state.lock().expect("coalescer lock");
            s.last_start.map(|t| t + inner.window)
        };
        if !inner.window.is_zero()
            && let Some(t) = wait_until
        {
            tokio::time::sleep_until(t).await;
        }
        let generation = {
            let mut s = inner.state.lock().expect("coalescer lock");
            let generation = s.started + 1;
            if s.wanted < generation {
                s.running = false;
                inner.busy.send_replace(false);
                return;
            }
            if !s.explicit && s.hint <= s.cursor {
                // Version-gated: the last read already covered every notified position.
                s.started = generation;
                s.running = false;
                inner.busy.send_replace(false);
                let cursor = s.cursor;
                drop(s);
                inner.done.send_replace(Some(Done {
                    generation,
                    result: Ok(cursor),
                }));
                return;
            }
            s.started = generation;
            s.explicit = false;
            s.last_start = Some(Instant::now());
            generation
        };
        inner.reads.fetch_add(1, Ordering::Relaxed);
        let result = (inner.read)().await;
        if let Ok(c) = &result {
            let mut s = inner.state.lock().expect("coalescer lock");
            s.cursor = s.cursor.max(*c);
        }
        inner.done.send_replace(Some(Done { generation, result }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// A read that takes 10 ms and reaches the "store position" at its start.
    fn fixture(window: Duration) -> (RefreshCoalescer<String>, Arc<AtomicU64>) {
        let position = Arc::new(AtomicU64::new(0));
        let p = position.clone();
        let read: ReadFn<String> = Arc::new(move || {
            let p = p.clone();
            async move {
                let at = p.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok(at)
            }
            .boxed()
        });
        (RefreshCoalescer::new(read, window), position)
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_notifications_costs_one_read() {
        let (c, pos) = fixture(Duration::ZERO);
        for n in 1..=100 {
            pos.store(n, Ordering::SeqCst);
            c.nudge(Some(n));
        }
        c.settled().await;
        assert_eq!(
            c.reads(),
            1,
            "100 notifications before the read started: one read"
        );
        // Notifications for positions already read cost nothing.
        for n in 1..=100 {
            c.nudge(Some(n));
        }
        c.settled().await;
        assert_eq!(c.reads(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn notifications_during_a_read_share_one_follow_up() {
        let (c, pos) = fixture(Duration::ZERO);
        pos.store(1, Ordering::SeqCst);
        c.nudge(Some(1));
        tokio::time::sleep(Duration::from_millis(1)).await; // the leading read is in flight
        for n in 2..=50 {
            pos.store(n, Ordering::SeqCst);
            c.nudge(Some(n));
        }
        c.settled().await;
        assert_eq!(c.reads(), 2, "leading edge + one single-flight follow-up");
    }

    #[tokio::test(start_paused = true)]
    async fn demand_waits_for_a_read_started_after_it() {
        let (c, pos) = fixture(Duration::ZERO);
        pos.store(1, Ordering::SeqCst);
        c.nudge(Some(1));
        tokio::time::sleep(Duration::from_millis(1)).await;
        pos.store(2, Ordering::SeqCst);
        // The in-flight read started before this demand: it must not satisfy it.
        let (a, b) = tokio::join!(c.demand(None), c.demand(None));
        a.unwrap();
        b.unwrap();
        assert_eq!(c.reads(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn trailing_window_spaces_reads() {
        let (c, pos) = fixture(Duration::from_millis(50));
        let start = Instant::now();
        for n in 1..=40 {
            pos.store(n, Ordering::SeqCst);
            c.nudge(Some(n));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        c.settled().await;
        // Leading read at 0 ms, one trailing read at 50 ms; nothing more.
        assert_eq!(c.reads(), 2);
        assert!(Instant::now() - start >= Duration::from_millis(50));
    }

    #[tokio::test(start_paused = true)]
    async fn errors_reach_the_demanders() {
        let read: ReadFn<String> = Arc::new(|| async { Err("store down".to_string()) }.boxed());
        let c = RefreshCoalescer::new(read, Duration::ZERO);
        assert_eq!(c.demand(None).await, Err("store down".to_string()));
    }
}
