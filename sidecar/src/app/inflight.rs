//! The app API's calls in flight (`Call`, `DispatchOn`), so that a graceful stop lets the calls
//! already made through this socket finish before it closes it. A call cut off mid-flight is
//! `outcome-unknown` to its caller (it may have run on another host), which is what a rolling
//! restart must never cause.
//!
//! A stop waits only for the calls that were in flight when it began ([`CallsInFlight::mark`]):
//! an app that keeps calling while its sidecar stops cannot hold the stop open to its deadline.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::time::Instant;

/// The tickets of the calls in flight; each call takes the next ticket when it starts.
#[derive(Debug)]
pub struct CallsInFlight {
    open: Mutex<Open>,
    /// Bumped whenever a call ends, for [`CallsInFlight::settled_before`].
    ended: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Open {
    next: u64,
    tickets: BTreeSet<u64>,
}

/// A call's place in [`CallsInFlight`]; dropping it (the call answered, failed or cancelled by
/// its caller) ends the call.
#[derive(Debug)]
pub struct CallGuard {
    calls: Arc<CallsInFlight>,
    ticket: u64,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.calls
            .open
            .lock()
            .expect("calls-in-flight lock")
            .tickets
            .remove(&self.ticket);
        self.calls.ended.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl CallsInFlight {
    /// No calls yet.
    pub fn new() -> Arc<Self> {
        Arc::new(CallsInFlight {
            open: Mutex::new(Open::default()),
            ended: watch::channel(0).0,
        })
    }

    /// A call starts; it ends when the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> CallGuard {
        let mut open = self.open.lock().expect("calls-in-flight lock");
        let ticket = open.next;
        open.next += 1;
        open.tickets.insert(ticket);
        CallGuard {
            calls: self.clone(),
            ticket,
        }
    }

    /// The ticket the next call will take: the calls before it are those in flight now.
    pub fn mark(&self) -> u64 {
        self.open.lock().expect("calls-in-flight lock").next
    }

    /// How many calls that started before `mark` are still in flight.
    pub fn open_before(&self, mark: u64) -> usize {
        self.open
            .lock()
            .expect("calls-in-flight lock")
            .tickets
            .range(..mark)
            .count()
    }

    /// Waits until every call that started before `mark` has ended, or `deadline`; answers
    /// how many were still in flight then (0: all ended).
    pub async fn settled_before(&self, mark: u64, deadline: Instant) -> usize {
        let mut ended = self.ended.subscribe();
        loop {
            let open = self.open_before(mark);
            if open == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, ended.changed())
                .await
                .is_err()
            {
                return self.open_before(mark);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_stop_waits_for_the_calls_before_its_mark_only() {
        let calls = CallsInFlight::new();
        let first = calls.enter();
        let second = calls.enter();
        let mark = calls.mark();
        let later = calls.enter();
        assert_eq!(calls.open_before(mark), 2);
        let waiter = {
            let calls = calls.clone();
            tokio::spawn(async move {
                calls
                    .settled_before(mark, Instant::now() + Duration::from_secs(5))
                    .await
            })
        };
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "one call before the mark is open");
        drop(second);
        assert_eq!(
            waiter.await.unwrap(),
            0,
            "a call after the mark is not waited for"
        );
        assert_eq!(calls.open_before(calls.mark()), 1);
        drop(later);
        assert_eq!(calls.open_before(calls.mark()), 0);
    }

    #[tokio::test]
    async fn the_wait_ends_at_its_deadline_with_what_is_still_open() {
        let calls = CallsInFlight::new();
        let _stuck = calls.enter();
        let mark = calls.mark();
        let t = Instant::now();
        let open = calls
            .settled_before(mark, t + Duration::from_millis(50))
            .await;
        assert_eq!(open, 1);
        assert!(t.elapsed() >= Duration::from_millis(50));
    }
}
