//! `/metrics`: the host's counters as Prometheus counters, its levels as gauges, and latency
//! histograms, in the Prometheus text format.
//!
//! Labels stay low-cardinality: a call's result kind and an actor *type* (bounded by what the
//! app registers), never an actor key or a host id (the scrape target names the host).
//! Durations are measured on the injected monotonic clock by the code that owns the operation
//! and observed here; rendering builds a fresh registry per scrape over shared handles, so a
//! scrape never blocks a turn.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::collections::BTreeMap;
use std::time::Duration;

/// A call's result: `ok` or the error kind (`timeout`, `app`, `fenced`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// The result kind.
    pub kind: String,
}

/// An actor type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    /// The registered actor type.
    pub actor_type: String,
}

/// Histograms by label set, each created on first use.
pub type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Durations by outcome (`ok` / `failed`, `complete` / `restarted` / `failed`), on the latency
/// buckets: a membership renewal's store write, a directory collection round.
#[derive(Debug, Clone)]
pub struct OutcomeHistogram(pub HistogramFamily<ResultLabel>);

impl Default for OutcomeHistogram {
    fn default() -> Self {
        OutcomeHistogram(Family::new_with_constructor(latency_histogram))
    }
}

impl OutcomeHistogram {
    /// Observes one operation of `took` that ended as `outcome`.
    pub fn observe(&self, outcome: &str, took: Duration) {
        self.0
            .get_or_create(&ResultLabel {
                kind: outcome.into(),
            })
            .observe(took.as_secs_f64());
    }
}

/// A directory RPC and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RpcLabel {
    /// `register`, `unregister` or `lookup`.
    pub rpc: String,
    /// `ok`, `retry` (the owner answered recovering / not owner / not converged) or `failed`
    /// (the mesh call failed).
    pub kind: String,
}

/// Directory RPCs this host made to partition owners over the mesh, by RPC and outcome.
#[derive(Debug, Clone)]
pub struct RpcHistogram(pub HistogramFamily<RpcLabel>);

impl Default for RpcHistogram {
    fn default() -> Self {
        RpcHistogram(Family::new_with_constructor(latency_histogram))
    }
}

impl RpcHistogram {
    /// Observes one `rpc` of `took` that ended as `kind`.
    pub fn observe(&self, rpc: &str, kind: &str, took: Duration) {
        self.0
            .get_or_create(&RpcLabel {
                rpc: rpc.into(),
                kind: kind.into(),
            })
            .observe(took.as_secs_f64());
    }
}

/// The cluster's histograms (absent on a single host): membership renewals and directory
/// collection rounds, owned by the membership handle and the directory.
#[derive(Debug, Clone, Default)]
pub struct ClusterHistograms {
    /// Lease renewals: the store write, by `ok` / `failed`.
    pub renewals: OutcomeHistogram,
    /// Directory collection rounds, by `complete` / `restarted` / `failed`.
    pub collection_rounds: OutcomeHistogram,
    /// Directory RPCs to remote partition owners, by RPC and outcome.
    pub directory_rpcs: RpcHistogram,
}

/// 0.5 ms to ~16 s, doubling: from a same-host call to a call deadline.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The host's histograms, shared by the code that observes them and the scrape.
#[derive(Debug, Clone)]
pub struct Histograms {
    /// App API `Call`s, from request to answer, by result kind.
    pub calls: HistogramFamily<ResultLabel>,
    /// Method turns, from hand-out to the app's answer, by actor type.
    pub turns: HistogramFamily<TypeLabel>,
    /// State batches committed to the store.
    pub state_commits: Histogram,
}

/// How late reminders fired after their due time (first deliveries), kept with the reminder
/// counters that own the measurement.
#[derive(Debug, Clone)]
pub struct LatenessHistogram(pub Histogram);

impl Default for LatenessHistogram {
    /// 1 ms to ~33 s, doubling.
    fn default() -> Self {
        LatenessHistogram(Histogram::new(exponential_buckets(0.001, 2.0, 16)))
    }
}

impl Default for Histograms {
    fn default() -> Self {
        Histograms {
            calls: Family::new_with_constructor(latency_histogram),
            turns: Family::new_with_constructor(latency_histogram),
            state_commits: latency_histogram(),
        }
    }
}

impl Histograms {
    /// Records a finished `Call`.
    pub fn call(&self, kind: &str, took: Duration) {
        self.calls
            .get_or_create(&ResultLabel { kind: kind.into() })
            .observe(took.as_secs_f64());
    }

    /// Records a method turn's duration.
    pub fn turn(&self, actor_type: &str, took: Duration) {
        self.turns
            .get_or_create(&TypeLabel {
                actor_type: actor_type.into(),
            })
            .observe(took.as_secs_f64());
    }
}

/// Status names that are levels, not running totals: exported as gauges.
const GAUGES: &[&str] = &[
    "directoryEntries",
    "partitionsRecovering",
    "reminderLatenessMsMax",
];

/// `camelCase` to `snake_case`.
fn snake(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

/// The scrape: every status counter (counters get `_total`), the live activations per type
/// (`sigx_live_activations{actor_type}`, as `Status.activations` says), the host's state, the
/// histograms.
pub fn render(
    counters: BTreeMap<String, u64>,
    live: &[(String, u64)],
    ready: bool,
    fenced: bool,
    histograms: &Histograms,
    lateness: &LatenessHistogram,
    cluster: Option<&ClusterHistograms>,
) -> String {
    let mut registry = Registry::with_prefix("sigx");
    for (name, value) in counters {
        let help = format!("the host's {name} (as reported in Status)");
        if GAUGES.contains(&name.as_str()) {
            registry.register(snake(&name), help, ConstGauge::new(value as i64));
        } else {
            registry.register(snake(&name), help, ConstCounter::new(value));
        }
    }
    let activations: Family<TypeLabel, Gauge> = Family::default();
    for (actor_type, n) in live {
        activations
            .get_or_create(&TypeLabel {
                actor_type: actor_type.clone(),
            })
            .set(*n as i64);
    }
    registry.register(
        "live_activations",
        "activations live on this host now, by actor type",
        activations,
    );
    registry.register(
        "ready",
        "1 while the host is ready",
        ConstGauge::new(ready as i64),
    );
    registry.register(
        "fenced",
        "1 once the host has fenced",
        ConstGauge::new(fenced as i64),
    );
    registry.register_with_unit(
        "call_duration",
        "app API calls from request to answer, by result kind",
        Unit::Seconds,
        histograms.calls.clone(),
    );
    registry.register_with_unit(
        "turn_duration",
        "method turns from hand-out to the app's answer, by actor type",
        Unit::Seconds,
        histograms.turns.clone(),
    );
    registry.register_with_unit(
        "state_commit_duration",
        "state batches committed to the store",
        Unit::Seconds,
        histograms.state_commits.clone(),
    );
    registry.register_with_unit(
        "reminder_lateness",
        "how late reminders fired after their due time",
        Unit::Seconds,
        lateness.0.clone(),
    );
    if let Some(c) = cluster {
        registry.register_with_unit(
            "membership_renewal_duration",
            "lease renewals from the start of the store write to its answer, by ok / failed",
            Unit::Seconds,
            c.renewals.0.clone(),
        );
        registry.register_with_unit(
            "collection_round_duration",
            "directory collection rounds after a view change, by complete / restarted / failed",
            Unit::Seconds,
            c.collection_rounds.0.clone(),
        );
        registry.register_with_unit(
            "directory_rpc_duration",
            "directory RPCs to remote partition owners (register, unregister, lookup), by outcome",
            Unit::Seconds,
            c.directory_rpcs.0.clone(),
        );
    }
    let mut out = String::new();
    let _ = encode(&mut out, &registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_get_total_levels_stay_gauges_and_histograms_count_observations() {
        let h = Histograms::default();
        h.call("ok", Duration::from_millis(3));
        h.call("ok", Duration::from_millis(5));
        h.call("timeout", Duration::from_secs(2));
        let text = render(
            BTreeMap::from([("turns".into(), 7), ("directoryEntries".into(), 3)]),
            &[("Counter".into(), 2)],
            true,
            false,
            &h,
            &LatenessHistogram::default(),
            None,
        );
        assert!(
            !text.contains("renewal"),
            "a single host has no renewals: {text}"
        );
        assert!(
            text.contains("# TYPE sigx_turns counter\nsigx_turns_total 7\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE sigx_directory_entries gauge\nsigx_directory_entries 3\n"),
            "{text}"
        );
        assert!(
            text.contains("sigx_call_duration_seconds_count{kind=\"ok\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("sigx_call_duration_seconds_count{kind=\"timeout\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("sigx_live_activations{actor_type=\"Counter\"} 2\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn cluster_histograms_count_renewals_and_rounds_by_outcome() {
        let c = ClusterHistograms::default();
        c.renewals.observe("ok", Duration::from_millis(4));
        c.renewals.observe("ok", Duration::from_millis(6));
        c.renewals.observe("failed", Duration::from_secs(1));
        c.collection_rounds
            .observe("complete", Duration::from_millis(30));
        c.directory_rpcs
            .observe("lookup", "ok", Duration::from_millis(1));
        let text = render(
            BTreeMap::new(),
            &[],
            true,
            false,
            &Histograms::default(),
            &LatenessHistogram::default(),
            Some(&c),
        );
        for line in [
            "sigx_membership_renewal_duration_seconds_count{kind=\"ok\"} 2\n",
            "sigx_membership_renewal_duration_seconds_count{kind=\"failed\"} 1\n",
            "sigx_collection_round_duration_seconds_count{kind=\"complete\"} 1\n",
            "sigx_directory_rpc_duration_seconds_count{rpc=\"lookup\",kind=\"ok\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
