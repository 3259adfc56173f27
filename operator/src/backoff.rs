//! Per-object exponential backoff for failed reconciliations: one object that keeps failing
//! (say, an API outage for its namespace) backs off on its own, without slowing the others.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Failure counts per object key, and the delay they earn.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a failure and returns how long to wait: base, 2×base, 4×base, … capped at max.
    pub fn failed(&self, key: &str) -> Duration {
        let mut failures = self.failures();
        let n = failures.entry(key.to_owned()).or_default();
        *n = n.saturating_add(1);
        let factor = 2u32.saturating_pow(n.saturating_sub(1).min(20));
        self.base.saturating_mul(factor).min(self.max)
    }

    /// A success resets the object's backoff.
    pub fn succeeded(&self, key: &str) {
        self.failures().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_object_caps_and_resets() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(b.failed("a"), Duration::from_millis(100));
        assert_eq!(b.failed("a"), Duration::from_millis(200));
        assert_eq!(
            b.failed("b"),
            Duration::from_millis(100),
            "objects back off independently"
        );
        assert_eq!(b.failed("a"), Duration::from_millis(400));
        for _ in 0..10 {
            b.failed("a");
        }
        assert_eq!(b.failed("a"), Duration::from_secs(1));
        b.succeeded("a");
        assert_eq!(b.failed("a"), Duration::from_millis(100));
    }
}

/// Backoff of the operator's watches after an error: exponential from `base` to `max`.
///
/// kube-runtime puts one backoff around *all* trigger watches of a controller, so after an
/// outage every stale error that drains from a watch stretches the pause of all of them; the
/// cap bounds how long the operator can stay deaf after the API comes back. The default
/// (0.8 s to 30 s) follows client-go.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    base: Duration,
    max: Duration,
    next: Duration,
}

impl WatchBackoff {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            next: base,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        Some(now.min(self.max))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = self.base;
    }
}

#[cfg(test)]
mod watch_tests {
    use super::*;
    use kube::runtime::utils::Backoff as _;

    #[test]
    fn watch_backoff_doubles_caps_and_resets() {
        let mut b = WatchBackoff::new(Duration::from_millis(100), Duration::from_millis(300));
        let got: Vec<_> = (&mut b).take(4).collect();
        assert_eq!(got, [100, 200, 300, 300].map(Duration::from_millis));
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }
}
