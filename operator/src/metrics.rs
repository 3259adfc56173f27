//! The operator's Prometheus metrics, served on `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// Which controller a sample belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Counters and gauges of one operator process.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<KindLabel, Counter>,
    pub failures: Family<KindLabel, Counter>,
    pub duration: Family<KindLabel, Histogram, fn() -> Histogram>,
    /// 1 while this replica holds the leader Lease.
    pub leader: Gauge,
    /// Secrets generated (one per cluster, unless a user deletes it).
    pub secrets_generated: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sigx_operator");
        let reconciles = Family::<KindLabel, Counter>::default();
        let failures = Family::<KindLabel, Counter>::default();
        let duration = Family::<KindLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            reconcile_histogram as fn() -> Histogram,
        );
        let leader = Gauge::default();
        let secrets_generated = Counter::default();
        registry.register("reconciles", "Reconciliations run", reconciles.clone());
        registry.register(
            "reconcile_failures",
            "Reconciliations that failed",
            failures.clone(),
        );
        // With its unit, as OpenMetrics wants: `# UNIT ... seconds`, the name ending `_seconds`.
        registry.register_with_unit(
            "reconcile_duration",
            "Time spent in one reconciliation",
            Unit::Seconds,
            duration.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease",
            leader.clone(),
        );
        registry.register(
            "secrets_generated",
            "Cluster secrets generated",
            secrets_generated.clone(),
        );
        Self {
            registry,
            reconciles,
            failures,
            duration,
            leader,
            secrets_generated,
        }
    }

    /// Reconciliations run so far for `kind` (`ActorCluster` or `ActorRole`).
    pub fn reconcile_count(&self, kind: &'static str) -> u64 {
        self.reconciles.get_or_create(&KindLabel { kind }).get()
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
