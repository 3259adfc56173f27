//! Turns bounded by the lease, on the membership side (DESIGN.md §8): the bound a host gives its
//! turns (lease validity minus the drift margin), and a fenced host keeping its record until
//! every turn it handed out is over — peers sweep its claims once the record is gone.

use futures::FutureExt;
use sigx_sidecar::clock::{Clock, ManualClock};
use sigx_sidecar::membership::{
    FenceReason, HostDescriptor, HostStatus, MembershipConfig, MembershipHandle, MemoryHub, start,
};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use tokio::time::Instant;

const BEAT: Duration = Duration::from_millis(1000);
const TTL: Duration = Duration::from_millis(3000);
const DRIFT: Duration = Duration::from_millis(200);

async fn host(hub: &MemoryHub, id: &str, stateful: bool, clock: &ManualClock) -> MembershipHandle {
    let types = Some(vec!["Counter".to_string()]);
    let stateful_types = if stateful {
        types.clone()
    } else {
        Some(vec![])
    };
    let cfg = MembershipConfig {
        drift_margin: DRIFT,
        ..MembershipConfig::with_timing(BEAT, TTL)
    };
    let d = HostDescriptor::new(id, format!("{id}:7000"), types, stateful_types);
    let h = start(hub.provider(id), d, cfg, Arc::new(clock.clone()))
        .await
        .expect("join");
    h.set_status(HostStatus::Active).await.expect("active");
    h
}

fn clock() -> ManualClock {
    ManualClock::new(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
}

#[tokio::test(start_paused = true)]
async fn the_turn_bound_is_lease_validity_minus_the_margin() {
    let hub = MemoryHub::new();
    let c = clock();
    let h = host(&hub, "a", true, &c).await;
    for _ in 0..5 {
        let bound = h
            .turn_bound()
            .unwrap()
            .expect("a stateful host bounds its turns");
        let now = c.wall();
        // Validity is the start of the last confirmed beat (at most a beat ago) plus TTL.
        assert!(bound <= now + TTL - DRIFT, "{bound:?} vs {now:?}");
        assert!(bound > now + TTL - DRIFT - BEAT - Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(370)).await;
    }
    // A suspend: the bound is already behind the wall clock, and the host fences on asking.
    c.suspend(TTL * 2);
    assert_eq!(h.turn_bound(), Err(FenceReason::SuspectWall));

    let w = host(&hub, "w", false, &clock()).await;
    assert_eq!(w.turn_bound(), Ok(None), "a worker-only host never fences");
}

#[tokio::test(start_paused = true)]
async fn a_fenced_host_withdraws_its_record_only_once_its_turns_are_over() {
    let hub = MemoryHub::new();
    let c = clock();
    let h = host(&hub, "a", true, &c).await;
    let (over_tx, over_rx) = tokio::sync::watch::channel(false);
    h.hold_withdrawal_until(move || {
        let mut rx = over_rx.clone();
        async move {
            let _ = rx.wait_for(|over| *over).await;
        }
        .boxed()
    });
    let mut fenced = h.fenced_signal();
    c.suspend(TTL * 2);
    assert!(h.check_lease().is_err());
    fenced.wait_for(|f| f.is_some()).await.unwrap();
    tokio::time::sleep(TTL / 2).await;
    assert!(
        hub.record("a").is_some(),
        "withdrew while a turn it handed out may still run"
    );
    let released = Instant::now();
    over_tx.send_replace(true);
    while hub.record("a").is_some() {
        assert!(
            released.elapsed() < Duration::from_secs(1),
            "not withdrawn once the turns were over"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_hold_is_capped_at_the_longest_possible_not_after() {
    let hub = MemoryHub::new();
    let c = clock();
    let h = host(&hub, "a", true, &c).await;
    h.hold_withdrawal_until(|| futures::future::pending().boxed());
    let mut fenced = h.fenced_signal();
    c.suspend(TTL * 2);
    assert!(h.check_lease().is_err());
    fenced.wait_for(|f| f.is_some()).await.unwrap();
    let fenced_at = Instant::now();
    while hub.record("a").is_some() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let held = fenced_at.elapsed();
    assert!(
        held >= TTL + DRIFT && held < TTL + DRIFT + Duration::from_secs(1),
        "held {held:?}"
    );
}
