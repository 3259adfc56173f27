//! `least-loaded` placement on in-process hosts with the real mesh, directory and runtime: a
//! host's activation count reaches its peers on its renewals, and new activations go to the
//! emptier hosts of a scaled-up fleet; per-type policies override the cluster's.

mod support;

use sigx_sidecar::host::Host;
use sigx_sidecar::membership::{MemberFilter, MemoryHub};
use std::collections::HashMap;
use std::time::Duration;
use support::*;

fn placed_on(hosts: &[&Host]) -> Vec<usize> {
    hosts.iter().map(|h| h.runtime.activation_count()).collect()
}

async fn calls(socket: &std::path::Path, ty: &str, keys: std::ops::Range<usize>) {
    let mut c = client(socket).await;
    for k in keys {
        call(&mut c, ty, &format!("k{k}"), "work", b"x", 10_000)
            .await
            .unwrap_or_else(|e| panic!("{ty}/k{k}: {e}"));
    }
}

/// Waits until `observer` sees `of` publish exactly `activations`.
async fn wait_load(observer: &Host, of: &str, activations: u64) {
    let loads = observer
        .cluster
        .get()
        .expect("clustered")
        .membership
        .loads();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while loads.published(of).map(|l| l.activations) != Some(activations) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never saw {of} publish {activations} activations (board: {:?})",
            observer.id(),
            loads.published(of)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_activations_go_to_the_new_hosts_of_a_scaled_up_fleet() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    // Placement alone: rebalancing (rebalance_scale_up.rs) would also move a's 90 away.
    let flags = [
        "--placement",
        "random",
        "--placement-type",
        "Counter=least-loaded",
        "--rebalance",
        "false",
    ];
    let node = |id: &'static str| {
        cluster_node_with(
            dir.path(),
            &hub,
            id,
            &["Counter", "Echo"],
            &[],
            HashMap::new(),
            &flags,
        )
    };
    // One host takes 90 activations alone.
    let a = node("a").await;
    calls(&a.host.socket, "Counter", 0..90).await;
    assert_eq!(a.host.runtime.activation_count(), 90);
    // Two more join; every host sees all three active and a's published count.
    let b = node("b").await;
    let c = node("c").await;
    for n in [&a, &b, &c] {
        n.host
            .cluster
            .get()
            .unwrap()
            .membership
            .wait_for_view(Duration::from_secs(10), |v| {
                v.members(&MemberFilter::active()).len() == 3
            })
            .await
            .expect("three active hosts");
        wait_load(&n.host, "a", 90).await;
    }
    // 90 new Counters, called from every host in turn: least-loaded sends them to b and c.
    for (i, n) in [&a, &b, &c].iter().enumerate() {
        calls(&n.host.socket, "Counter", 90 + i * 30..90 + (i + 1) * 30).await;
    }
    let got = placed_on(&[&a.host, &b.host, &c.host]);
    let new_on_a = got[0] - 90;
    // Two choices pick a only when both draws are a: never, with three hosts and distinct
    // draws. Each of b and c should get about half of the 90.
    assert_eq!(new_on_a, 0, "a got new activations: {got:?}");
    assert!(
        (30..=60).contains(&got[1]) && (30..=60).contains(&got[2]),
        "b and c should share the 90 new activations: {got:?}"
    );
    // Echo keeps the cluster's `random`: a gets its share of 90 new Echo actors.
    let before = placed_on(&[&a.host, &b.host, &c.host]);
    calls(&b.host.socket, "Echo", 0..90).await;
    let after = placed_on(&[&a.host, &b.host, &c.host]);
    let echo_on_a = after[0] - before[0];
    assert!(
        (15..=50).contains(&echo_on_a),
        "random placement of Echo gives a about a third: {before:?} -> {after:?}"
    );
}
