//! Membership benchmarks (`cargo bench -p sigx-sidecar --bench membership`, part of `make bench`).
//!
//! * View rebuild cost at 10/100/1000 hosts: building the immutable view from the observed
//!   records (what every observed membership change costs), the derived reads placement makes
//!   (`active_stateful_ids`, `fingerprint`, `members(registers)`), and one change travelling the
//!   whole engine path (store write → notification → coalesced feed read → new view) on the
//!   in-process hub.
//! * Store writes per host per second each provider puts on its store, counted (not assumed)
//!   over a run: the memory hub on paused time at the default timing, and a real SQLite file at
//!   a short beat, plus the SQLite renewal latency.
//!
//! Output is one line per figure: `name<TAB>value<TAB>unit`.

use sigx_sidecar::clock;
use sigx_sidecar::membership::{
    HostDescriptor, HostStatus, MemberFilter, MembershipConfig, MembershipProvider, MembershipView,
    MemoryHub, SqliteOptions, SqliteProvider, start,
};
use std::hint::black_box;
use std::time::Duration;
use tokio::time::Instant;

fn descriptor(i: usize) -> HostDescriptor {
    let stateful = !i.is_multiple_of(3);
    let mut d = HostDescriptor::new(
        format!("engine-{i:04}-a1b2c3"),
        format!("10.0.{}.{}:7400", i / 250, i % 250),
        Some(vec!["Counter".into(), "Relay".into(), "Report".into()]),
        Some(if stateful {
            vec!["Counter".into(), "Report".into()]
        } else {
            vec![]
        }),
    );
    d.meta.insert("node".into(), format!("node-{}", i % 16));
    d.status = HostStatus::Active;
    d
}

fn report(name: &str, value: f64, unit: &str) {
    println!("{name}\t{value:.3}\t{unit}");
}

/// Runs `f` `iters` times and returns the mean time per call in microseconds.
fn time_us(iters: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters.min(10) {
        f();
    }
    let t0 = Instant::now();
    for _ in 0..iters {
        f();
    }
    t0.elapsed().as_secs_f64() * 1e6 / f64::from(iters)
}

fn view_costs() {
    for n in [10usize, 100, 1000] {
        let hosts: Vec<HostDescriptor> = (0..n).rev().map(descriptor).collect();
        let iters = (200_000 / n as u32).max(50);
        let build = time_us(iters, || {
            black_box(MembershipView::new(1, black_box(hosts.clone())));
        });
        report(&format!("view_rebuild_us/{n}_hosts"), build, "us");
        let view = MembershipView::new(1, hosts.clone());
        let ids = time_us(iters, || {
            black_box(view.active_stateful_ids());
        });
        report(&format!("active_stateful_ids_us/{n}_hosts"), ids, "us");
        let fp = time_us(iters, || {
            black_box(view.fingerprint());
        });
        report(&format!("fingerprint_us/{n}_hosts"), fp, "us");
        let filter = MemberFilter::registering("Report");
        let members = time_us(iters, || {
            black_box(view.members(&filter));
        });
        report(&format!("members_registers_us/{n}_hosts"), members, "us");
    }
}

/// One status change of one peer, through the engine, as seen by an observer holding N hosts.
fn change_to_view(rt: &tokio::runtime::Runtime) {
    for n in [10usize, 100, 1000] {
        let per_change = rt.block_on(async {
            let hub = MemoryHub::new();
            let peers: Vec<_> = (0..n)
                .map(|i| (hub.provider(descriptor(i).id), descriptor(i)))
                .collect();
            for (p, d) in &peers {
                p.join(d, Duration::from_secs(15)).await.unwrap();
            }
            let observer = start(
                hub.provider("observer"),
                HostDescriptor::new("observer", "127.0.0.1:1", Some(vec![]), Some(vec![])),
                MembershipConfig::default(),
                clock::system(),
            )
            .await
            .unwrap();
            let (p, d) = &peers[n / 2];
            let mut d = d.clone();
            let rounds = 200u32;
            let t0 = Instant::now();
            for r in 0..rounds {
                d.status = if r % 2 == 0 {
                    HostStatus::Leaving
                } else {
                    HostStatus::Active
                };
                let before = observer.view().version;
                p.renew(&d).await.unwrap();
                observer
                    .wait_for_view(Duration::from_secs(5), |v| v.version > before)
                    .await
                    .unwrap();
            }
            t0.elapsed().as_secs_f64() * 1e6 / f64::from(rounds)
        });
        report(&format!("change_to_view_us/{n}_hosts"), per_change, "us");
    }
}

fn memory_write_rate() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let hub = MemoryHub::new();
        let cfg = MembershipConfig::default();
        let hosts = 10;
        let mut handles = Vec::new();
        for i in 0..hosts {
            handles.push(
                start(
                    hub.provider(descriptor(i).id),
                    descriptor(i),
                    cfg.clone(),
                    clock::system(),
                )
                .await
                .unwrap(),
            );
        }
        let before = hub.writes();
        let window = Duration::from_secs(600);
        tokio::time::sleep(window).await;
        let per_host_s = (hub.writes() - before) as f64 / hosts as f64 / window.as_secs_f64();
        report(
            "memory_writes_per_host_per_s/beat_5s",
            per_host_s,
            "writes/s",
        );
    });
}

fn sqlite_write_rate(rt: &tokio::runtime::Runtime) {
    let dir = std::env::temp_dir().join(format!("sigx-membership-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("membership.db");
    rt.block_on(async {
        let beat = Duration::from_millis(100);
        let cfg = MembershipConfig {
            drift_margin: Duration::from_millis(200),
            ..MembershipConfig::with_timing(beat, beat * 5)
        };
        let opts = SqliteOptions {
            poll_interval: Duration::from_millis(50),
            ..SqliteOptions::new(&db)
        };
        let hosts = 5;
        let mut handles = Vec::new();
        for i in 0..hosts {
            let p = SqliteProvider::open(&opts, descriptor(i).id).unwrap();
            handles.push(
                start(p, descriptor(i), cfg.clone(), clock::system())
                    .await
                    .unwrap(),
            );
        }
        let count = |db: &std::path::Path| -> i64 {
            let c = rusqlite::Connection::open(db).unwrap();
            c.query_row("SELECT COALESCE(MAX(seq), 0) FROM sigx_changes", [], |r| {
                r.get(0)
            })
            .unwrap()
        };
        let before = count(&db);
        let window = Duration::from_secs(3);
        tokio::time::sleep(window).await;
        let writes = count(&db) - before;
        report(
            "sqlite_writes_per_host_per_s/beat_100ms",
            writes as f64 / hosts as f64 / window.as_secs_f64(),
            "writes/s",
        );
        let failures: u64 = handles.iter().map(|h| h.counters().beat_failures).sum();
        report("sqlite_beat_failures", failures as f64, "count");
        // Renewal latency: one provider renewing back to back.
        let p = SqliteProvider::open(&opts, "latency").unwrap();
        let d = HostDescriptor::new("latency", "127.0.0.1:1", Some(vec![]), Some(vec![]));
        p.join(&d, Duration::from_secs(1)).await.unwrap();
        let rounds = 500u32;
        let t0 = Instant::now();
        for _ in 0..rounds {
            p.renew(&d).await.unwrap();
        }
        report(
            "sqlite_renew_latency_us",
            t0.elapsed().as_secs_f64() * 1e6 / f64::from(rounds),
            "us",
        );
        for h in &handles {
            let _ = h.leave().await;
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument selects groups by substring.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wants = |name: &str| filter.as_deref().is_none_or(|f| name.contains(f));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if wants("view") {
        view_costs();
    }
    if wants("change") {
        change_to_view(&rt);
    }
    if wants("memory") {
        memory_write_rate();
    }
    if wants("sqlite") {
        sqlite_write_rate(&rt);
    }
}
