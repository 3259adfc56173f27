//! Actor enumeration (issue 16): `Locate` and `ListActors` on the app socket, in a 3-host
//! in-process cluster (memory membership, the real authenticated mesh over loopback TCP, the
//! real directory) and on a single host, cross-checked with each runtime's live activations.

mod support;

use sigx_proto::{ErrorKind, v1};
use sigx_sidecar::host::{Host, HostOptions, StopKind};
use sigx_sidecar::membership::MemoryHub;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use support::*;
use tokio::time::Instant;

struct Node {
    host: Host,
    _app: TestApp,
}

async fn node(dir: &std::path::Path, hub: &MemoryHub, id: &str) -> Node {
    // The listing is compared with where each runtime says its actors are: rebalancing
    // (placement_least_loaded.rs, rebalance_scale_up.rs) must not move one in between.
    let mut cfg = cluster_host_config(dir, id, &["--rebalance", "false"]);
    cfg.beat = Duration::from_millis(250);
    cfg.ttl = Duration::from_secs(3);
    let host = Host::start_with(
        cfg,
        HostOptions {
            provider: Some(hub.provider(id)),
            ..HostOptions::default()
        },
    )
    .await
    .unwrap();
    let app = TestApp::start(
        &host.socket,
        v1::Register {
            actors: vec![actor_spec("Counter", false, 0)],
            workers: vec![],
            app_name: id.into(),
        },
        HashMap::new(),
    )
    .await
    .unwrap();
    wait_ready(host.health_addr, Duration::from_secs(10)).await;
    Node { host, _app: app }
}

/// Waits until every host sees all three active and owns only ready partitions.
async fn settled(nodes: &[Node]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut ok = true;
        for n in nodes {
            let parts = n.host.cluster.get().expect("joined");
            let view = parts.membership.view();
            let active = view.active_stateful_ids().len();
            ok &= active == 3 && parts.directory.counters().partitions_recovering == 0;
        }
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "the cluster never settled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// key -> (host, activation id), from the runtimes themselves.
fn truth(nodes: &[Node]) -> BTreeMap<String, (String, String)> {
    let mut all = BTreeMap::new();
    for n in nodes {
        for (id, act) in n.host.runtime.live_activations() {
            let prev = all.insert(
                id.key.to_string(),
                (n.host.id().to_string(), act.to_string()),
            );
            assert!(prev.is_none(), "{} is live on two hosts", id.key);
        }
    }
    all
}

async fn list_all(
    socket: &std::path::Path,
    ty: &str,
    page_size: u32,
) -> (Vec<v1::ActorLocation>, usize) {
    let mut c = client(socket).await;
    let (mut all, mut pages, mut token) = (Vec::new(), 0, String::new());
    loop {
        let page = c
            .list_actors(v1::ListActorsRequest {
                actor_type: ty.into(),
                page_size,
                page_token: token,
                timeout_ms: 10_000,
                with_reminders: false,
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        assert!(
            !page.incomplete && page.skipped.is_empty(),
            "a settled cluster lists every partition: {:?}",
            page.skipped
        );
        assert!(page.actors.len() <= page_size as usize);
        all.extend(page.actors);
        if page.next_page_token.is_empty() {
            return (all, pages);
        }
        token = page.next_page_token;
        assert!(pages < 1000, "paging never ended");
    }
}

fn as_map(listed: &[v1::ActorLocation]) -> BTreeMap<String, (String, String)> {
    let mut m = BTreeMap::new();
    for a in listed {
        let r = a.actor.as_ref().unwrap();
        assert_eq!(r.actor_type, "Counter");
        let prev = m.insert(r.key.clone(), (a.host_id.clone(), a.activation_id.clone()));
        assert!(prev.is_none(), "{} listed twice", r.key);
    }
    m
}

async fn locate(socket: &std::path::Path, key: &str) -> v1::LocateResponse {
    client(socket)
        .await
        .locate(v1::LocateRequest {
            actor: Some(v1::ActorRef {
                actor_type: "Counter".into(),
                key: key.into(),
            }),
            timeout_ms: 10_000,
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_locate_match_the_runtimes_across_three_hosts() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let mut nodes = Vec::new();
    for id in ["h1", "h2", "h3"] {
        nodes.push(node(dir.path(), &hub, id).await);
    }
    settled(&nodes).await;
    // 40 actors, each called through a different host in turn.
    for k in 0..40 {
        let mut c = client(&nodes[k % 3].host.socket).await;
        call(&mut c, "Counter", &format!("k{k}"), "m", b"", 15_000)
            .await
            .unwrap();
    }
    let truth = truth(&nodes);
    assert_eq!(truth.len(), 40);
    let holders: std::collections::BTreeSet<&str> =
        truth.values().map(|(h, _)| h.as_str()).collect();
    assert!(
        holders.len() > 1,
        "placement spread the actors: {holders:?}"
    );

    // One big page, asked of each host: every live actor exactly once, with its real host.
    for n in &nodes {
        let (listed, pages) = list_all(&n.host.socket, "Counter", 1000).await;
        assert_eq!(pages, 1);
        assert_eq!(as_map(&listed), truth, "asked {}", n.host.id());
    }
    // Small pages return the same set, in the same order as the big page.
    let (big, _) = list_all(&nodes[0].host.socket, "Counter", 1000).await;
    let (small, pages) = list_all(&nodes[1].host.socket, "Counter", 3).await;
    assert!(
        pages >= 14,
        "40 actors in pages of 3 take at least 14 pages, got {pages}"
    );
    assert_eq!(small, big, "paging changes neither the set nor the order");
    // A type nobody activated lists nothing.
    let (none, _) = list_all(&nodes[2].host.socket, "Ghost", 10).await;
    assert!(none.is_empty());

    // Locate names the holder and the activation from any host; the epoch only on the holder.
    for (key, (host, act)) in truth.iter().take(12) {
        for n in &nodes {
            let r = locate(&n.host.socket, key).await;
            assert!(r.active, "{key} asked on {}", n.host.id());
            assert_eq!((&r.host_id, &r.activation_id), (host, act), "{key}");
            if n.host.id() == host {
                assert!(r.epoch > 0, "the holder knows the epoch of {key}");
            } else {
                assert_eq!(r.epoch, 0, "{key} asked on {}", n.host.id());
            }
        }
    }
    let never = locate(&nodes[0].host.socket, "never-called").await;
    assert_eq!(never, v1::LocateResponse::default(), "not active");
    assert!(
        !nodes.iter().any(|n| n
            .host
            .runtime
            .live_activations()
            .iter()
            .any(|(id, _)| &*id.key == "never-called")),
        "Locate activates nothing"
    );

    // A page token that no ListActors gave is refused, naming the field.
    let e = client(&nodes[0].host.socket)
        .await
        .list_actors(v1::ListActorsRequest {
            actor_type: "Counter".into(),
            page_size: 5,
            page_token: "from-somewhere-else".into(),
            timeout_ms: 0,
            with_reminders: false,
        })
        .await
        .unwrap_err();
    let e = sigx_proto::ActorError::from_status(&e);
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("page_token"), "{}", e.message);
    for n in nodes {
        n.host.stop(StopKind::Graceful).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_host_lists_and_locates_its_own_runtime() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let _app = TestApp::start(
        &host.socket,
        v1::Register {
            actors: vec![actor_spec("Counter", false, 0)],
            workers: vec![v1::WorkerTypeSpec {
                name: "Echo".into(),
                max_concurrency: 4,
                methods: vec![],
            }],
            app_name: "one".into(),
        },
        HashMap::new(),
    )
    .await
    .unwrap();
    let mut c = client(&host.socket).await;
    for k in 0..7 {
        call(&mut c, "Counter", &format!("s{k}"), "m", b"", 10_000)
            .await
            .unwrap();
    }
    let live: BTreeMap<String, (String, String)> = host
        .runtime
        .live_activations()
        .into_iter()
        .map(|(id, act)| (id.key.to_string(), (host.id().to_string(), act.to_string())))
        .collect();
    let (big, _) = list_all(&host.socket, "Counter", 100).await;
    assert_eq!(as_map(&big), live);
    let (small, pages) = list_all(&host.socket, "Counter", 2).await;
    assert_eq!(small, big);
    assert!(pages >= 4, "{pages}");
    let r = locate(&host.socket, "s3").await;
    assert!(r.active && r.epoch > 0, "{r:?}");
    assert_eq!(
        (&r.host_id, &r.activation_id),
        (&live["s3"].0, &live["s3"].1)
    );
    assert!(!locate(&host.socket, "nobody").await.active);

    // With reminders: each listed actor carries its stored reminders, the others none.
    for (key, name) in [("s1", "daily"), ("s1", "hourly"), ("s4", "once")] {
        c.set_reminder(v1::SetReminderRequest {
            actor: Some(v1::ActorRef {
                actor_type: "Counter".into(),
                key: key.into(),
            }),
            name: name.into(),
            due: Some(v1::set_reminder_request::Due::DueInMs(3_600_000)),
            period_ms: if name == "once" { 0 } else { 60_000 },
            payload: Default::default(),
            epoch: 0,
        })
        .await
        .unwrap();
    }
    let page = c
        .list_actors(v1::ListActorsRequest {
            actor_type: "Counter".into(),
            page_size: 100,
            page_token: String::new(),
            timeout_ms: 10_000,
            with_reminders: true,
        })
        .await
        .unwrap()
        .into_inner();
    let reminders: BTreeMap<String, Vec<String>> = page
        .actors
        .iter()
        .map(|a| {
            let names = a.reminders.iter().map(|r| r.name.clone()).collect();
            (a.actor.as_ref().unwrap().key.clone(), names)
        })
        .filter(|(_, names): &(String, Vec<String>)| !names.is_empty())
        .collect();
    assert_eq!(
        reminders,
        BTreeMap::from([
            (
                "s1".to_string(),
                vec!["daily".to_string(), "hourly".to_string()]
            ),
            ("s4".to_string(), vec!["once".to_string()]),
        ])
    );
    assert_eq!(page.actors.len(), 7);
    // Without the flag the listing reads no reminders.
    assert!(big.iter().all(|a| a.reminders.is_empty()));
    // A worker has no location: refused, saying so.
    let e = c
        .locate(v1::LocateRequest {
            actor: Some(v1::ActorRef {
                actor_type: "Echo".into(),
                key: "x".into(),
            }),
            timeout_ms: 0,
        })
        .await
        .unwrap_err();
    let e = sigx_proto::ActorError::from_status(&e);
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(e.message.contains("worker type"), "{}", e.message);
    host.stop(StopKind::Graceful).await;
}
