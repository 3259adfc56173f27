//! The chaos scenarios at benchmark size, with real release binaries on 127.0.0.x: a rolling
//! restart of every pod under continuous load (at least 100k calls), kill -9 under load, and a
//! SIGSTOP past the TTL. Prints one report per scenario for BENCHMARKS.md.
//!
//! Run: `make bench-chaos` (builds the release binaries, then
//! `cargo bench -p sigx-e2e --bench chaos`). `CHAOS_CALLS` sets the rolling restart's minimum
//! call count (default 100000).

use sigx_e2e::chaos::ledger::{read_finals, start_load};
use sigx_e2e::chaos::{Fleet, FleetConfig, Report, client, trace};
use std::time::Duration;
use tokio::time::Instant;

const COUNTERS: usize = 200;

fn actors() -> Vec<String> {
    (0..COUNTERS).map(|k| format!("Counter/c{k}")).collect()
}

async fn finish(fleet: &mut Fleet, name: &str, ledger: &sigx_e2e::chaos::Ledger) -> Report {
    let live = fleet.pods.iter().find(|p| p.alive).unwrap().socket.clone();
    let finals = read_finals(&client(&live), &actors()).await;
    Report::judge(
        name,
        ledger,
        &finals,
        trace::duplicate_activations_around(&fleet.trace_file(), fleet.freezes()),
    )
}

async fn rolling_restart(min_calls: usize) -> Report {
    let mut fleet = Fleet::start(FleetConfig::default()).await;
    let load = start_load(fleet.targets.clone(), COUNTERS, 32, Duration::from_secs(10));
    let t = Instant::now();
    let mut handoffs = Vec::new();
    let mut rounds = 0;
    // Restart every pod in turn, again and again, until the load has made enough calls.
    while load.ledger.len() < min_calls || rounds == 0 {
        handoffs.extend(fleet.rolling_restart().await);
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let ledger = load.stop().await;
    let mut r = finish(
        &mut fleet,
        &format!("rolling restart of all 3 pods, {rounds} full rollout(s), under continuous load (32 callers)"),
        &ledger,
    )
    .await;
    r.handoffs = handoffs;
    r.notes
        .push(format!("elapsed {:.1} s", t.elapsed().as_secs_f64()));
    fleet.shutdown().await;
    r
}

async fn kill9() -> Report {
    let mut fleet = Fleet::start(FleetConfig::default()).await;
    let load = start_load(fleet.targets.clone(), COUNTERS, 32, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(3)).await;
    fleet.kill9(1).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    fleet.spawn_pod().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ledger = load.stop().await;
    let r = finish(
        &mut fleet,
        "kill -9 of one of 3 pods under load, then a replacement joins",
        &ledger,
    )
    .await;
    fleet.shutdown().await;
    r
}

async fn sigstop() -> Report {
    let mut fleet = Fleet::start(FleetConfig::default()).await;
    let load = start_load(fleet.targets.clone(), COUNTERS, 32, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet.sigstop(2);
    tokio::time::sleep(fleet.ttl() * 3).await;
    fleet.sigcont(2);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let livez = fleet.probe(2, "/livez").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ledger = load.stop().await;
    let mut r = finish(
        &mut fleet,
        "SIGSTOP of one of 3 pods for 3x TTL under load, then SIGCONT",
        &ledger,
    )
    .await;
    r.notes.push(format!(
        "the resumed host's /livez answers {livez:?} (503 = fenced)"
    ));
    fleet.shutdown().await;
    r
}

fn main() {
    let min_calls: usize = std::env::var("CHAOS_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for report in [
            rolling_restart(min_calls).await,
            kill9().await,
            sigstop().await,
        ] {
            println!("{}", report.render());
        }
    });
}
