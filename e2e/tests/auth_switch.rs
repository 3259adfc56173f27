//! Switching a running cluster between `--insecure` and a secret on real processes under load
//! (README, "Switching between insecure and a secret"): each direction takes two rolling
//! restarts through `--accept-unsigned` and loses no call; going straight from insecure to a
//! secret splits the mesh, and the strict host refuses its insecure peers (the broken variant).

use sigx_e2e::chaos::ledger::start_load;
use sigx_e2e::chaos::{Fleet, FleetConfig, MeshAuthStep};
use std::time::Duration;

const COUNTERS: usize = 60;

/// How often the sidecar logs of `fleet` contain `needle`.
fn logged(fleet: &Fleet, needle: &str) -> usize {
    fleet.sidecar_logs_matching(needle).iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_to_a_secret_and_back_in_two_rolls_each_refuses_no_call() {
    let mut fleet = Fleet::start(FleetConfig {
        auth: MeshAuthStep::Insecure,
        ..FleetConfig::default()
    })
    .await;
    let load = start_load(fleet.targets.clone(), COUNTERS, 8, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut handoffs = Vec::new();
    for step in [
        // To a secret: sign with it and still accept the insecure hosts, then refuse them.
        MeshAuthStep::SecretAcceptingUnsigned,
        MeshAuthStep::Secret,
        // And back: accept unsigned requests again, then drop the secret.
        MeshAuthStep::SecretAcceptingUnsigned,
        MeshAuthStep::Insecure,
    ] {
        fleet.set_auth(step);
        handoffs.extend(fleet.rolling_restart().await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = fleet
        .judge_load(
            load,
            COUNTERS,
            "auth switch: insecure → secret → insecure, four rolling restarts of 3 pods under load",
            handoffs,
        )
        .await;
    let refused = logged(&fleet, "unauthenticated: ");
    // The first roll's pods met the insecure hosts they replaced, and said so.
    let unsigned = logged(&fleet, "accepted an unsigned mesh request");
    fleet.shutdown().await;
    assert!(report.sent > 100, "the load ran: {}", report.sent);
    assert_eq!(refused, 0, "a host refused a peer during the switch");
    assert!(unsigned > 0, "no host ever took an unsigned request");
    report.assert_clean();
}

/// The broken variant: straight from insecure to a strict secret, without the roll that
/// accepts both. The strict host refuses the insecure hosts' requests (no MAC), naming the way
/// through, and calls whose work crosses the split fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_the_accept_unsigned_roll_splits_the_mesh_and_calls_are_refused() {
    let mut fleet = Fleet::start(FleetConfig {
        auth: MeshAuthStep::Insecure,
        ..FleetConfig::default()
    })
    .await;
    fleet.set_auth(MeshAuthStep::Secret);
    fleet.spawn_pod().await;
    // Every pod's callers: the old hosts' requests to the strict one (directory partitions it
    // now owns, actors placed on it) are refused.
    let mut failed = 0;
    let pods = fleet.pods.len();
    for i in 0..pods {
        failed += fleet
            .failed_gets_through(i, (i..COUNTERS).step_by(pods))
            .await;
    }
    let refusals = logged(&fleet, "--accept-unsigned");
    fleet.shutdown().await;
    assert!(failed > 0, "every call succeeded across a split mesh");
    assert!(
        refusals > 0,
        "the strict host never refused the insecure hosts' requests"
    );
}
