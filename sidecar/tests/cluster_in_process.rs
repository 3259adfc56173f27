//! Several hosts in one process: memory membership, the real authenticated mesh over loopback
//! TCP, the real directory, the routing loop, and raw-protocol apps.

mod support;

use sigx_proto::{ErrorKind, v1};
use sigx_sidecar::host::{Host, HostOptions, StopKind};
use sigx_sidecar::membership::MemoryHub;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use support::*;

async fn node(
    dir: &std::path::Path,
    hub: &MemoryHub,
    id: &str,
    actors: &[&str],
    workers: &[&str],
) -> Node {
    cluster_node(dir, hub, id, actors, workers, HashMap::new()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_activation_per_actor_across_three_hosts_under_concurrent_calls() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let mut nodes = Vec::new();
    for id in ["h1", "h2", "h3"] {
        nodes.push(node(dir.path(), &hub, id, &["Counter"], &[]).await);
    }
    // Every host sees every host active before the workload.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sockets: Vec<_> = nodes.iter().map(|n| n.host.socket.clone()).collect();
    let mut calls = Vec::new();
    for round in 0..4 {
        for (i, socket) in sockets.iter().enumerate() {
            for k in 0..25 {
                let socket = socket.clone();
                calls.push(tokio::spawn(async move {
                    let mut c = client(&socket).await;
                    call(
                        &mut c,
                        "Counter",
                        &format!("k{k}"),
                        "work",
                        format!("{round}-{i}").as_bytes(),
                        15_000,
                    )
                    .await
                }));
            }
        }
    }
    let mut failures = Vec::new();
    for c in calls {
        if let Err(e) = c.await.unwrap() {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "failed calls: {failures:?}");
    let apps: Vec<(&str, &TestApp)> = nodes.iter().map(|n| (n.host.id(), &n.app)).collect();
    let overlaps = overlapping_activations(&apps);
    assert!(overlaps.is_empty(), "duplicate activations: {overlaps:?}");
    // Every actor is active exactly once across the fleet.
    let total: usize = nodes
        .iter()
        .map(|n| n.host.runtime.live_activations().len())
        .sum();
    assert_eq!(total, 25);
    // Calls crossed hosts.
    let mut c = client(&nodes[0].host.socket).await;
    let status = c.status(v1::StatusRequest {}).await.unwrap().into_inner();
    assert_eq!(status.view.unwrap().hosts.len(), 3);
    for n in nodes {
        n.host.stop(StopKind::Graceful).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_is_registration_aware_and_unplaceable_names_the_type() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let engine = node(dir.path(), &hub, "engine", &["Counter"], &[]).await;
    let web = node(dir.path(), &hub, "web", &[], &["Relay"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = client(&web.host.socket).await;
    for k in 0..10 {
        call(&mut c, "Counter", &format!("k{k}"), "work", b"x", 10_000)
            .await
            .unwrap();
    }
    assert_eq!(engine.host.runtime.live_activations().len(), 10);
    assert_eq!(
        web.host.runtime.live_activations().len(),
        0,
        "Counter never lands on web"
    );
    let e = call(&mut c, "Report", "r1", "work", b"x", 5_000)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Activation, "{e}");
    let cause = e.cause.expect("cause");
    assert_eq!(cause.kind, ErrorKind::Unplaceable);
    assert!(
        cause.message.starts_with(
            "actor type \"Report\" is registered by no ACTIVE host (view: 2 hosts, 2 active)."
        ),
        "{}",
        cause.message
    );
    // Targeted worker calls: one attempt on a chosen host; stateful types refused.
    let mut ce = client(&engine.host.socket).await;
    let r = ce
        .dispatch_on(v1::DispatchOnRequest {
            host_id: "web".into(),
            worker: Some(v1::ActorRef {
                actor_type: "Relay".into(),
                key: String::new(),
            }),
            method: "work".into(),
            payload: bytes::Bytes::from_static(b"hello"),
            timeout_ms: 5_000,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(&r.payload[..], b"hello");
    let e = ce
        .dispatch_on(v1::DispatchOnRequest {
            host_id: "engine".into(),
            worker: Some(v1::ActorRef {
                actor_type: "Counter".into(),
                key: "k1".into(),
            }),
            method: "work".into(),
            payload: bytes::Bytes::new(),
            timeout_ms: 5_000,
        })
        .await
        .unwrap_err();
    assert_eq!(
        sigx_proto::ActorError::from_status(&e).kind,
        ErrorKind::Invalid
    );
    let members = ce
        .members(v1::MembersRequest {
            status: 0,
            registers: "Relay".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        members
            .hosts
            .iter()
            .map(|h| h.id.as_str())
            .collect::<Vec<_>>(),
        vec!["web"]
    );
    engine.host.stop(StopKind::Graceful).await;
    web.host.stop(StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_leave_hands_actors_over_with_no_failed_calls() {
    let dir = tempdir();
    let hub = MemoryHub::new();
    let a = node(dir.path(), &hub, "a", &["Counter"], &[]).await;
    let b = node(dir.path(), &hub, "b", &["Counter"], &[]).await;
    let c = node(dir.path(), &hub, "c", &["Counter"], &[]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let socket = a.host.socket.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let load = tokio::spawn(async move {
        let mut cl = client(&socket).await;
        let mut failures = Vec::new();
        let mut n = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            for k in 0..20 {
                n += 1;
                if let Err(e) =
                    call(&mut cl, "Counter", &format!("k{k}"), "work", b"x", 10_000).await
                {
                    failures.push(e);
                }
            }
        }
        (n, failures)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.host.stop(StopKind::Graceful).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (n, failures) = load.await.unwrap();
    assert!(n >= 40, "the load ran ({n} calls)");
    assert!(
        failures.is_empty(),
        "{} of {n} calls failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let overlaps = overlapping_activations(&[("a", &a.app), ("b", &b.app), ("c", &c.app)]);
    assert!(overlaps.is_empty(), "duplicate activations: {overlaps:?}");
    a.host.stop(StopKind::Graceful).await;
    c.host.stop(StopKind::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_configured_with_mutual_tls_and_no_secret_form_one_cluster() {
    let dir = tempdir();
    let mtls = dir.path().join("mtls");
    let hub = MemoryHub::new();
    // A host holding another host's certificate does not start: its peers would refuse every
    // request it signs as itself, so the sidecar names the identity it needs instead.
    let front_dir = make_mtls_dir(&mtls, "default", "front");
    let mut cfg = cluster_host_config(
        dir.path(),
        "intruder",
        &["--mtls-dir", front_dir.to_str().unwrap()],
    );
    cfg.secret = None;
    let err = Host::start_with(
        cfg,
        HostOptions {
            provider: Some(hub.provider("intruder")),
            ..HostOptions::default()
        },
    )
    .await
    .err()
    .expect("a host with another host's certificate must not start");
    assert!(
        err.to_string().contains("spiffe://default/host/intruder"),
        "{err}"
    );
    let mut hosts = Vec::new();
    let mut apps = Vec::new();
    for (id, actors) in [("front", vec![]), ("back", vec!["Counter"])] {
        let own = make_mtls_dir(&mtls, "default", id);
        let mut cfg = cluster_host_config(dir.path(), id, &["--mtls-dir", own.to_str().unwrap()]);
        // mTLS alone authenticates the mesh (in a sidecar process that takes --insecure too).
        cfg.secret = None;
        let host = Host::start_with(
            cfg,
            HostOptions {
                provider: Some(hub.provider(id)),
                ..HostOptions::default()
            },
        )
        .await
        .unwrap();
        let register = v1::Register {
            actors: actors.iter().map(|a| actor_spec(a, false, 0)).collect(),
            workers: vec![v1::WorkerTypeSpec {
                name: format!("W{id}"),
                max_concurrency: 1,
                methods: vec![],
            }],
            app_name: id.into(),
        };
        apps.push(
            TestApp::start(&host.socket, register, HashMap::new())
                .await
                .unwrap(),
        );
        wait_ready(host.health_addr, Duration::from_secs(10)).await;
        hosts.push(host);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = client(&hosts[0].socket).await;
    let r = call(&mut c, "Counter", "k", "work", b"over tls", 10_000)
        .await
        .unwrap();
    assert_eq!(&r[..], b"over tls");
    assert_eq!(
        hosts[1].runtime.live_activations().len(),
        1,
        "the actor lives on back"
    );
    // A host without the cluster's certificates cannot reach the others (the mesh is TLS).
    let plain = Host::start_with(
        cluster_host_config(dir.path(), "plain", &["--insecure"]),
        HostOptions {
            provider: Some(hub.provider("plain")),
            ..HostOptions::default()
        },
    )
    .await
    .unwrap();
    let register = v1::Register {
        actors: vec![],
        workers: vec![v1::WorkerTypeSpec {
            name: "Wplain".into(),
            max_concurrency: 1,
            methods: vec![],
        }],
        app_name: "plain".into(),
    };
    let _plain_app = TestApp::start(&plain.socket, register, HashMap::new())
        .await
        .unwrap();
    wait_ready(plain.health_addr, Duration::from_secs(10)).await;
    let mut cp = client(&plain.socket).await;
    let e = call(&mut cp, "Counter", "k", "work", b"x", 1_500)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::Timeout | ErrorKind::Activation | ErrorKind::Unreachable
        ),
        "a plaintext peer must not get through: {e}"
    );
    plain.stop(StopKind::Fast).await;
    for h in hosts {
        h.stop(StopKind::Fast).await;
    }
}
