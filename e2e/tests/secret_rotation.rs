//! Rotating the mesh secret on real processes under load (README, "Rotating the mesh secret"):
//! three rolling restarts — accept the new secret, sign with it while accepting the old, drop
//! the old — lose no call and never refuse a peer; skipping the first roll splits the mesh, and
//! the calls that cross the split are refused as `unauthenticated` (the broken variant).

use sigx_e2e::chaos::ledger::start_load;
use sigx_e2e::chaos::{Fleet, FleetConfig};
use std::time::Duration;

const COUNTERS: usize = 60;

fn rotating_sidecars(fleet: &Fleet) -> usize {
    fleet
        .sidecar_logs_matching("mesh secret rotation in progress")
        .iter()
        .filter(|&&n| n > 0)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_in_three_rolls_under_load_refuses_no_call() {
    let mut fleet = Fleet::start(FleetConfig::default()).await;
    let old = fleet.secret();
    let new = format!("{old}-next");
    let load = start_load(fleet.targets.clone(), COUNTERS, 8, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut handoffs = Vec::new();
    // 1. Accept the new secret, still sign with the old.
    fleet.set_secrets(&old, Some(&new));
    handoffs.extend(fleet.rolling_restart().await);
    // 2. Sign with the new secret, still accept the old.
    fleet.set_secrets(&new, Some(&old));
    handoffs.extend(fleet.rolling_restart().await);
    // 3. The old secret is gone.
    fleet.set_secrets(&new, None);
    handoffs.extend(fleet.rolling_restart().await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = fleet
        .judge_load(
            load,
            COUNTERS,
            "secret rotation: three rolling restarts of 3 pods under load",
            handoffs,
        )
        .await;
    // The six pods of rolls 1 and 2 ran with two secrets, the three of roll 3 with one.
    assert_eq!(rotating_sidecars(&fleet), 6);
    fleet.shutdown().await;
    assert!(report.sent > 100, "the load ran: {}", report.sent);
    report.assert_clean();
}

/// The broken variant: straight to "sign with the new secret" without the roll that makes
/// every host accept it first. The old hosts refuse the new one's requests (logged as a wrong
/// MAC) and calls through it fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_the_accept_roll_splits_the_mesh_and_calls_are_refused() {
    let mut fleet = Fleet::start(FleetConfig::default()).await;
    let old = fleet.secret();
    fleet.set_secrets(&format!("{old}-next"), Some(&old));
    let new_pod = fleet.spawn_pod().await;
    // Calls through the new pod need the directory, whose partitions are spread over every
    // host: the new pod cannot reach the old ones, nor they it.
    let failed = fleet.failed_gets_through(new_pod, 0..COUNTERS / 4).await;
    let new_id = fleet.pods[new_pod].id.clone();
    let refusals: usize = fleet
        .pods
        .iter()
        .zip(fleet.sidecar_logs_matching("carries a wrong MAC"))
        .filter(|(p, _)| p.id != new_id)
        .map(|(_, n)| n)
        .sum();
    fleet.shutdown().await;
    assert!(failed > 0, "every call succeeded across a split mesh");
    assert!(
        refusals > 0,
        "the old hosts never refused the new one's requests"
    );
}
