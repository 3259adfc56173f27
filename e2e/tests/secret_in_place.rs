//! Rotating the mesh secret in place on real processes under load (README, "Rotating the mesh
//! secret in place"): with an accepted second secret configured, two edits of the secret files —
//! the accepted one gets the new key, then the signing one — rotate a running fleet with no
//! restart and no refused call, and a pod holding only the new key then joins. Without the
//! reload (`--secret-reload-ms 0`, the broken variant) the edit never takes effect and that pod
//! is refused.

use sigx_e2e::chaos::ledger::start_load;
use sigx_e2e::chaos::{Fleet, FleetConfig};
use std::time::Duration;

const COUNTERS: usize = 60;

/// Calls through the last pod started: how many of `COUNTERS / 4` failed.
async fn failed_through_newest(fleet: &Fleet) -> usize {
    fleet
        .failed_gets_through(fleet.pods.len() - 1, 0..COUNTERS / 4)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_in_place_under_load_restarts_nothing_and_refuses_no_call() {
    let mut fleet = Fleet::start(FleetConfig {
        secret_reload_ms: 200,
        ..FleetConfig::default()
    })
    .await;
    let old = fleet.secret();
    let new = format!("{old}-next");
    // The setup an in-place rotation needs, once: an accepted second secret, holding the
    // current key while no rotation runs (on Kubernetes, `spec.auth.acceptSecretRef`: a roll).
    fleet.set_secrets(&old, Some(&old));
    fleet.rolling_restart().await;
    let running: Vec<String> = fleet
        .pods
        .iter()
        .filter(|p| p.alive)
        .map(|p| p.id.clone())
        .collect();
    let load = start_load(fleet.targets.clone(), COUNTERS, 8, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(500)).await;
    // 1. Every host accepts the new key (an edit of the accepted Secret).
    fleet.edit_secrets_in_place(&old, Some(&new));
    tokio::time::sleep(Duration::from_secs(1)).await;
    // 2. Every host signs with it (an edit of the signing Secret); hosts that reloaded first
    //    still accept the old key of those that have not.
    fleet.edit_secrets_in_place(&new, None);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = fleet
        .judge_load(
            load,
            COUNTERS,
            "secret rotation in place: two file edits under load, no restart",
            Vec::new(),
        )
        .await;
    let still: Vec<String> = fleet
        .pods
        .iter()
        .filter(|p| p.alive)
        .map(|p| p.id.clone())
        .collect();
    let reloaded = fleet.sidecar_logs_matching("signing with the edited key");
    // A pod that only knows the new key joins the rotated fleet.
    fleet.set_secrets(&new, None);
    fleet.spawn_pod().await;
    let failed = failed_through_newest(&fleet).await;
    let refused: usize = fleet
        .sidecar_logs_matching("unauthenticated: ")
        .iter()
        .sum();
    fleet.shutdown().await;
    assert_eq!(still, running, "a pod restarted");
    let live_reloads: Vec<usize> = fleet
        .pods
        .iter()
        .zip(&reloaded)
        .filter(|(p, _)| running.contains(&p.id))
        .map(|(_, n)| *n)
        .collect();
    assert_eq!(
        live_reloads,
        vec![1; running.len()],
        "each live host reloaded once"
    );
    assert_eq!(failed, 0, "the pod with only the new key was refused");
    assert_eq!(refused, 0, "a host refused a peer during the rotation");
    assert!(report.sent > 100, "the load ran: {}", report.sent);
    report.assert_clean();
}

/// The broken variant: the same edit with the reload off. The fleet keeps signing with the old
/// key, and a pod holding only the new one is refused (a wrong MAC) and its calls fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_reload_an_edited_secret_never_takes_effect() {
    let mut fleet = Fleet::start(FleetConfig {
        secret_reload_ms: 0,
        ..FleetConfig::default()
    })
    .await;
    let new = format!("{}-next", fleet.secret());
    fleet.edit_secrets_in_place(&new, None);
    tokio::time::sleep(Duration::from_secs(1)).await;
    fleet.set_secrets(&new, None);
    fleet.spawn_pod().await;
    let failed = failed_through_newest(&fleet).await;
    let wrong_mac: usize = fleet
        .sidecar_logs_matching("carries a wrong MAC")
        .iter()
        .sum();
    fleet.shutdown().await;
    assert!(failed > 0, "every call succeeded across a split mesh");
    assert!(wrong_mac > 0, "no host refused the new pod's key");
}
