//! Locality on in-process hosts with the real mesh, directory and runtime: a call asking for
//! `LOCALITY_SAME_ZONE` / `LOCALITY_SAME_NODE` places its new activation near the host it
//! entered, an actor already active elsewhere is called where it is, and a preference no host
//! meets falls back instead of failing.

mod support;

use bytes::Bytes;
use sigx_proto::v1;
use sigx_sidecar::membership::{MemberFilter, MemoryHub};
use std::collections::HashMap;
use std::time::Duration;
use support::*;

async fn call_near(
    socket: &std::path::Path,
    key: &str,
    locality: i32,
) -> Result<Bytes, sigx_proto::ActorError> {
    let mut c = client(socket).await;
    c.call(v1::CallRequest {
        actor: Some(v1::ActorRef {
            actor_type: "Counter".into(),
            key: key.into(),
        }),
        method: "work".into(),
        payload: Bytes::from_static(b"x"),
        timeout_ms: 10_000,
        trace: None,
        locality,
    })
    .await
    .map(|r| r.into_inner().payload)
    .map_err(|s| sigx_proto::ActorError::from_status(&s))
}

const ANY: i32 = v1::Locality::Any as i32;
const SAME_NODE: i32 = v1::Locality::SameNode as i32;
const SAME_ZONE: i32 = v1::Locality::SameZone as i32;

/// Five hosts: a1, a1b and a2 in zone `za`, b1 and b2 in zone `zb`; each on its own node but
/// a1b, which shares a1's node `n1`.
async fn fleet(dir: &std::path::Path, hub: &MemoryHub) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (id, node, zone) in [
        ("a1", "n1", "za"),
        ("a1b", "n1", "za"),
        ("a2", "n2", "za"),
        ("b1", "n3", "zb"),
        ("b2", "n4", "zb"),
    ] {
        nodes.push(
            cluster_node_with(
                dir,
                hub,
                id,
                &["Counter"],
                &[],
                HashMap::new(),
                &["--node", node, "--zone", zone, "--rebalance", "false"],
            )
            .await,
        );
    }
    for n in &nodes {
        n.host
            .cluster
            .get()
            .unwrap()
            .membership
            .wait_for_view(Duration::from_secs(10), |v| {
                v.members(&MemberFilter::active()).len() == 5
                    && v.hosts().iter().all(|h| h.zone().is_some())
            })
            .await
            .expect("five active hosts, each with its zone");
    }
    nodes
}

fn counts(nodes: &[Node]) -> Vec<(String, usize)> {
    nodes
        .iter()
        .map(|n| (n.host.id().to_string(), n.host.runtime.activation_count()))
        .collect()
}

fn on(nodes: &[Node], ids: &[&str]) -> usize {
    nodes
        .iter()
        .filter(|n| ids.contains(&n.host.id()))
        .map(|n| n.host.runtime.activation_count())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_zone_caller_places_in_its_zone_and_no_preference_spreads() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let nodes = fleet(dir.path(), &hub).await;
    let b2 = &nodes[4].host.socket;
    for k in 0..40 {
        call_near(b2, &format!("z{k}"), SAME_ZONE).await.unwrap();
    }
    let got = counts(&nodes);
    assert_eq!(on(&nodes, &["b1", "b2"]), 40, "same-zone from b2: {got:?}");
    // Both hosts of zb, not one: the policy (random) still spreads within the zone.
    assert!(
        nodes[3].host.runtime.activation_count() > 0
            && nodes[4].host.runtime.activation_count() > 0,
        "{got:?}"
    );
    // The control: the same calls with no preference reach the other zone too.
    for k in 0..40 {
        call_near(b2, &format!("any{k}"), ANY).await.unwrap();
    }
    let got = counts(&nodes);
    assert!(
        on(&nodes, &["a1", "a1b", "a2"]) >= 10,
        "no preference spreads over both zones: {got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_node_places_on_the_callers_node_and_an_active_actor_stays_where_it_is() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let nodes = fleet(dir.path(), &hub).await;
    let (a1, a2, b1) = (&nodes[0].host, &nodes[2].host, &nodes[3].host);
    for k in 0..30 {
        call_near(&a1.socket, &format!("n{k}"), SAME_NODE)
            .await
            .unwrap();
    }
    let got = counts(&nodes);
    assert_eq!(on(&nodes, &["a1", "a1b"]), 30, "same node n1: {got:?}");
    // a2 is alone on n2: same-node from a2 is a2 itself.
    for k in 0..10 {
        call_near(&a2.socket, &format!("m{k}"), SAME_NODE)
            .await
            .unwrap();
    }
    assert_eq!(a2.runtime.activation_count(), 10, "{:?}", counts(&nodes));

    // An actor active on b1 is called on b1, whatever a caller in another zone prefers.
    call_near(&b1.socket, "held", SAME_NODE).await.unwrap();
    assert_eq!(b1.runtime.activation_count(), 1);
    let before = counts(&nodes);
    for _ in 0..5 {
        call_near(&a1.socket, "held", SAME_NODE).await.unwrap();
        call_near(&a2.socket, "held", SAME_ZONE).await.unwrap();
    }
    assert_eq!(counts(&nodes), before, "a preference never moves an actor");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preference_no_host_meets_falls_back_and_a_bad_value_is_named() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let nodes = fleet(dir.path(), &hub).await;
    // A caller host that registers no Counter, alone in zone zc: its calls still place.
    let lone = cluster_node_with(
        dir.path(),
        &hub,
        "c1",
        &["Other"],
        &[],
        HashMap::new(),
        &["--node", "n9", "--zone", "zc", "--rebalance", "false"],
    )
    .await;
    lone.host
        .cluster
        .get()
        .unwrap()
        .membership
        .wait_for_view(Duration::from_secs(10), |v| {
            v.members(&MemberFilter::active()).len() == 6
        })
        .await
        .unwrap();
    for k in 0..12 {
        call_near(&lone.host.socket, &format!("f{k}"), SAME_NODE)
            .await
            .unwrap_or_else(|e| panic!("fallback placement failed: {e}"));
    }
    let placed: usize = counts(&nodes).iter().map(|(_, n)| n).sum();
    assert_eq!(placed, 12, "{:?}", counts(&nodes));

    let err = call_near(&nodes[0].host.socket, "bad", 9)
        .await
        .unwrap_err();
    assert_eq!(err.kind, sigx_proto::ErrorKind::Invalid, "{err:?}");
    assert!(err.message.contains("locality 9"), "{}", err.message);
    assert_eq!(counts(&nodes).iter().map(|(_, n)| n).sum::<usize>(), 12);
}
