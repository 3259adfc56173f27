//! What the Lease membership costs a real API server (`sigx_e2e::controlplane`), read from the
//! server's own metrics rather than counted by the client: Lease PUTs (one renewal per host per
//! beat), watch events sent (every host watches every Lease of its cluster, so N²/beat, plus the
//! garbage collector's watch: N(N+1)/beat on a real server), and no
//! LIST or new WATCH at rest (a watch that keeps breaking would re-list, the costly failure).
//!
//! The hosts are the production membership (`KubernetesProvider` + `membership::start`), many in
//! one process so 50 of them fit on a 2-core machine; their Leases carry no owner (no Pod
//! exists here for the garbage collector to tie them to).
//!
//! `a_fleet_at_rest_costs_one_put_per_host_per_beat_and_n_squared_watch_events` runs in
//! `make test`. The figures for BENCHMARKS.md (10 and 50 hosts at the production beat):
//! `cargo test -p sigx-e2e --test kube_real_membership_load -- --ignored --nocapture`.
//!
//! Needs `make controlplane` (`make test` builds it).

use std::time::Duration;

use sigx_e2e::apiserver_metrics::server_counters;
use sigx_e2e::controlplane::{self, ControlPlane};
use sigx_e2e::lease_fleet::{lease_host, wait_all_see};
use sigx_sidecar::membership::{MembershipConfig, MembershipHandle};
use tokio::time::Instant;

const NS: &str = "apps";

/// `n` hosts of cluster `demo` joined and seeing each other.
async fn fleet(cp: &ControlPlane, n: usize, cfg: &MembershipConfig) -> Vec<MembershipHandle> {
    let mut hosts = Vec::new();
    for i in 0..n {
        let id = format!("h{i:03}");
        hosts.push(lease_host(cp.client(NS).await, NS, &id, cfg, Duration::from_secs(2)).await);
    }
    wait_all_see(&hosts, n, Duration::from_secs(60), || {
        format!("; the control plane's log:\n{}", cp.log_tail(40))
    })
    .await;
    hosts
}

/// One measured window at rest: the server's counters before and after, per second.
struct Rates {
    n: usize,
    beat: Duration,
    puts: f64,
    lists: f64,
    watches: f64,
    watch_events: f64,
    open_watches: f64,
    cpu: f64,
}

impl Rates {
    fn n_squared_per_beat(&self) -> f64 {
        (self.n * self.n) as f64 / self.beat.as_secs_f64()
    }

    /// The hosts' N watches plus the controller manager's: its garbage collector watches the
    /// metadata of every kind, Leases included, so a real server sends each renewal N + 1 times.
    fn with_the_garbage_collector(&self) -> f64 {
        (self.n * (self.n + 1)) as f64 / self.beat.as_secs_f64()
    }
}

async fn measure(n: usize, cfg: MembershipConfig, window: Duration) -> Rates {
    let cp = ControlPlane::start();
    let admin = cp.client(NS).await;
    controlplane::create_namespace(&admin, NS).await;
    let hosts = fleet(&cp, n, &cfg).await;
    // One beat to let the joins' last writes and view catch-up settle.
    tokio::time::sleep(cfg.beat).await;
    let before = server_counters(&admin).await;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let after = server_counters(&admin).await;
    let secs = started.elapsed().as_secs_f64();
    for h in &hosts {
        assert_eq!(h.fence_state(), None, "{} fenced at rest", h.self_id());
        assert_eq!(h.view().len(), n, "{} lost a peer at rest", h.self_id());
    }
    for h in &hosts {
        h.abort();
    }
    let d = after.since(&before);
    Rates {
        n,
        beat: cfg.beat,
        puts: d.verb("PUT") / secs,
        lists: d.verb("LIST") / secs,
        watches: d.verb("WATCH") / secs,
        watch_events: d.lease_watch_events / secs,
        open_watches: d.open_lease_watches,
        cpu: d.cpu_seconds / secs,
    }
}

fn print(r: &Rates) {
    println!(
        "real API server, {} hosts, beat {:?}: {:.1} Lease PUT/s (n/beat = {:.1}), {:.0} watch \
         events/s (N²/beat = {:.0}, N(N+1)/beat = {:.0}), {:.2} LIST/s, {:.2} new WATCH/s, \
         {} Lease watches open, control-plane CPU {:.1} %",
        r.n,
        r.beat,
        r.puts,
        r.n as f64 / r.beat.as_secs_f64(),
        r.watch_events,
        r.n_squared_per_beat(),
        r.with_the_garbage_collector(),
        r.lists,
        r.watches,
        r.open_watches,
        r.cpu * 100.0
    );
}

/// A fleet at rest asks the server for exactly its renewals and nothing else: one PUT per host
/// per beat, each renewal fanned out to every host's watch (and the garbage collector's), and no
/// LIST or new WATCH (a watch that
/// keeps breaking, or a relist on every bookmark, would show here and costs a real API server
/// far more than the renewals do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_at_rest_costs_one_put_per_host_per_beat_and_n_squared_watch_events() {
    let n = 6;
    let cfg = MembershipConfig::with_timing(Duration::from_millis(500), Duration::from_secs(3));
    let r = measure(n, cfg, Duration::from_secs(8)).await;
    print(&r);
    let per_beat = n as f64 / r.beat.as_secs_f64();
    assert!(
        r.puts >= per_beat * 0.8 && r.puts <= per_beat * 1.25,
        "{:.1} Lease PUT/s from {n} hosts at one renewal per {:?} (expected ~{per_beat:.1})",
        r.puts,
        r.beat
    );
    assert!(
        r.watch_events >= r.n_squared_per_beat() * 0.9
            && r.watch_events <= r.with_the_garbage_collector() * 1.15,
        "{:.0} watch events/s for {n} hosts each watching all (expected N²/beat = {:.0} to \
         N(N+1)/beat = {:.0} with the garbage collector's watch)",
        r.watch_events,
        r.n_squared_per_beat(),
        r.with_the_garbage_collector()
    );
    assert_eq!(r.lists, 0.0, "a fleet at rest re-listed Leases");
    assert_eq!(r.watches, 0.0, "a fleet at rest opened new Lease watches");
}

/// The figures for BENCHMARKS.md: 10 and 50 hosts at the production beat and TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement for BENCHMARKS.md; about two minutes"]
async fn watch_fan_out_on_the_real_api_server() {
    for n in [10, 50] {
        let r = measure(n, MembershipConfig::default(), Duration::from_secs(30)).await;
        print(&r);
        assert!(r.watch_events >= r.n_squared_per_beat() * 0.5);
    }
}
