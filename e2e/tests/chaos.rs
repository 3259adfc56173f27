//! Real processes on 127.0.0.x under load: a SIGTERM rolling restart loses no call; kill -9
//! never duplicates an activation and its actors come back within TTL + 1 s; a host suspended
//! past its TTL fences itself on resume and never serves a turn again.

use sigx_e2e::chaos::ledger::{read_finals, start_load};
use sigx_e2e::chaos::{Fleet, FleetConfig, Report, client, trace};
use sigx_sdk::ErrorKind;
use std::time::Duration;
use tokio::time::Instant;

const COUNTERS: usize = 60;

fn actors() -> Vec<String> {
    (0..COUNTERS).map(|k| format!("Counter/c{k}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_no_call() {
    let mut fleet = Fleet::start(FleetConfig::default()).await;
    let load = start_load(fleet.targets.clone(), COUNTERS, 8, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let handoffs = fleet.rolling_restart().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ledger = load.stop().await;
    let live = fleet.pods.iter().find(|p| p.alive).unwrap().socket.clone();
    let finals = read_finals(&client(&live), &actors()).await;
    let mut report = Report::judge(
        "rolling restart of 3 pods under load",
        &ledger,
        &finals,
        trace::duplicate_activations(&fleet.trace_file()),
    );
    report.handoffs = handoffs;
    println!("{}", report.render());
    fleet.shutdown().await;
    // How many calls fit depends on the machine (each increment commits to the shared SQLite
    // state file): this only checks that the load ran.
    assert!(report.sent > 100, "the load ran: {}", report.sent);
    report.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_never_duplicates_and_actors_return_within_ttl() {
    let mut fleet = Fleet::start(FleetConfig::default()).await;
    let load = start_load(fleet.targets.clone(), COUNTERS, 8, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(700)).await;
    fleet.kill9(1).await;
    let killed_at = Instant::now();
    // Every actor is callable again within TTL + 1 s: each one probed concurrently, its time
    // taken when its first call after the kill succeeds.
    let c = client(&fleet.pods[0].socket).with_timeout(Duration::from_secs(3));
    let probes: Vec<_> = (0..COUNTERS)
        .map(|k| {
            let c = c.clone();
            tokio::spawn(async move {
                loop {
                    if c.call_json::<(), i64>("Counter", &format!("c{k}"), "get", &())
                        .await
                        .is_ok()
                    {
                        return killed_at.elapsed();
                    }
                    if killed_at.elapsed() > Duration::from_secs(10) {
                        return Duration::MAX;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for p in probes {
        slowest = slowest.max(p.await.unwrap());
    }
    let back = slowest != Duration::MAX;
    let back_after = slowest;
    let fleet_ttl = fleet.ttl();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ledger = load.stop().await;
    let finals = read_finals(&c, &actors()).await;
    let mut report = Report::judge(
        "kill -9 of one of 3 pods under load",
        &ledger,
        &finals,
        trace::duplicate_activations(&fleet.trace_file()),
    );
    report.notes.push(format!(
        "every actor callable again {back_after:?} after the kill"
    ));
    println!("{}", report.render());
    fleet.shutdown().await;
    assert!(
        back && back_after <= fleet_ttl + Duration::from_secs(1),
        "actors not all callable within TTL + 1 s ({back_after:?})"
    );
    assert!(
        report.duplicate_activations.is_empty(),
        "{}",
        report.render()
    );
    // No call fails: a crash only delays the calls that never ran (unreachable is retried once
    // membership drops the host). Only calls in flight on the killed host may end ambiguous.
    assert_eq!(report.failed(), 0, "{}", report.render());
    for kind in report.ambiguous_by_kind.keys() {
        assert_eq!(
            kind,
            &ErrorKind::OutcomeUnknown.to_string(),
            "{}",
            report.render()
        );
    }
    assert!(report.ledger_problems.is_empty(), "{}", report.render());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_suspended_past_its_ttl_fences_on_resume_and_never_serves_again() {
    let mut fleet = Fleet::start(FleetConfig::default()).await;
    let c0 = client(&fleet.pods[0].socket).with_timeout(Duration::from_secs(5));
    for k in 0..COUNTERS {
        let _: i64 = c0
            .call_json("Counter", &format!("c{k}"), "increment", &1)
            .await
            .unwrap();
    }
    let victim = 2;
    let victim_id = fleet.pods[victim].id.clone();
    fleet.sigstop(victim);
    tokio::time::sleep(fleet.ttl() * 3).await;
    // Meanwhile the survivors serve every actor.
    for k in 0..COUNTERS {
        let _: i64 = c0
            .call_json("Counter", &format!("c{k}"), "increment", &1)
            .await
            .unwrap();
    }
    let resumed_ns = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let resumed_ns = resumed_ns.tv_sec as u64 * 1_000_000_000 + resumed_ns.tv_nsec as u64;
    fleet.sigcont(victim);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut live = None;
    while Instant::now() < deadline {
        live = fleet.probe(victim, "/livez").await;
        if live == Some(503) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(live, Some(503), "the resumed host reports fenced on /livez");
    // Its own app's calls answer fenced.
    let cv = client(&fleet.pods[victim].socket).with_timeout(Duration::from_secs(2));
    let e = cv
        .call_json::<_, i64>("Counter", "c1", "increment", &1)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Fenced, "{e}");
    for k in 0..COUNTERS {
        let _: i64 = c0
            .call_json("Counter", &format!("c{k}"), "increment", &1)
            .await
            .unwrap();
    }
    // No turn ran on the victim after it resumed, and no activation was duplicated.
    let text = std::fs::read_to_string(fleet.trace_file()).unwrap();
    let late_turns = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["host"] == victim_id.as_str() && v["event"] == "turn-start")
        .filter(|v| v["t_ns"].as_u64().unwrap_or(0) > resumed_ns)
        .count();
    let dups = trace::duplicate_activations_around(&fleet.trace_file(), fleet.freezes());
    fleet.shutdown().await;
    assert_eq!(late_turns, 0, "the fenced host served turns after resuming");
    assert!(dups.is_empty(), "{dups:?}");
}
