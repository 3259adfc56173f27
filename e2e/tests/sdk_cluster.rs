//! The SDK against a real two-host cluster (two `sigx-sidecar` processes sharing a SQLite
//! membership file, each with a real `counter-app`): one activation per actor whichever host is
//! called, `members`, targeted worker calls to a chosen host, and `on_change` seeing a host
//! leave.

mod sdk_support;

use sdk_support::{Proc, Scratch, Sidecar, counter_app};
use sigx_sdk::{Client, ErrorKind, MemberFilter};
use std::time::Duration;

struct Host {
    sidecar: Sidecar,
    _app: Proc,
    client: Client,
}

fn two_hosts(scratch: &Scratch) -> Vec<Host> {
    let db = scratch.path("membership.db");
    let secret = scratch.path("secret");
    std::fs::write(&secret, "a-test-secret-that-is-not-empty").unwrap();
    (1..=2)
        .map(|i| {
            let socket = scratch.path(&format!("h{i}.sock"));
            let sidecar =
                Sidecar::start_clustered(scratch, &socket, &format!("h{i}"), &db, &secret);
            // Counts are durable in the state store both sidecars share (beside the SQLite
            // membership file), so an actor that moves keeps its count and a handoff that lost
            // or doubled an increment would show.
            let app = counter_app(scratch, &socket, &[]);
            Host {
                sidecar,
                _app: app,
                client: Client::lazy(&socket).with_timeout(Duration::from_secs(10)),
            }
        })
        .collect()
}

/// Waits (bounded) until every host's view shows `n` active hosts.
async fn converge(hosts: &[Host], n: usize) {
    for _ in 0..200 {
        let mut ok = true;
        for h in hosts {
            match h.client.members(&MemberFilter::active()).await {
                Ok(m) if m.hosts.len() == n => {}
                _ => ok = false,
            }
        }
        if ok {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the hosts did not all see {n} active hosts within 10s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_one_activation_targeted_workers_and_a_departure_seen() {
    let scratch = Scratch::new("cluster");
    let mut hosts = two_hosts(&scratch);
    for h in &hosts {
        h.sidecar.wait_ready();
    }
    converge(&hosts, 2).await;

    // One actor, called through both hosts, concurrently: one activation, one count.
    let calls = (0..20).map(|i| {
        let c = hosts[i % 2].client.clone();
        async move {
            c.call_json::<_, i64>("Counter", "shared", "increment", &1)
                .await
                .unwrap()
        }
    });
    let mut seen = futures::future::join_all(calls).await;
    seen.sort();
    assert_eq!(
        seen,
        (1..=20).collect::<Vec<i64>>(),
        "one activation across the hosts"
    );
    let info: serde_json::Value = hosts[1]
        .client
        .call_json("Counter", "shared", "info", &())
        .await
        .unwrap();
    let info_again: serde_json::Value = hosts[0]
        .client
        .call_json("Counter", "shared", "info", &())
        .await
        .unwrap();
    assert_eq!(info["activation_id"], info_again["activation_id"]);
    assert_eq!(info["value"], 20);

    // Members, and a worker call to each chosen host, made through host 1's sidecar.
    let echo_hosts = hosts[0]
        .client
        .members(&MemberFilter::active().registers("Echo"))
        .await
        .unwrap();
    assert_eq!(echo_hosts.hosts.len(), 2, "{echo_hosts:?}");
    for target in &echo_hosts.hosts {
        let ran_on: String = sigx_sdk::payload::from_json(
            &hosts[0]
                .client
                .worker_on(&target.id, "Echo")
                .call("whereami", "")
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!(ran_on, target.id, "the worker ran on the chosen host");
    }
    let e = hosts[0]
        .client
        .worker_on(&echo_hosts.hosts[1].id, "Counter")
        .call("get", "")
        .await
        .unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Invalid,
        "a stateful type is refused: {e}"
    );

    // Host 2 leaves; host 1's on_change subscriber sees the view without it.
    let leaving = hosts[1].client.status().await.unwrap().host.unwrap().id;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _sub = hosts[0].client.on_change(MemberFilter::any(), move |m| {
        let _ = tx.send(m.hosts.iter().map(|h| h.id.clone()).collect::<Vec<_>>());
    });
    let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(first.contains(&leaving), "{first:?}");
    let mut gone = hosts.pop().unwrap();
    gone.sidecar.proc.terminate(Duration::from_secs(30));
    let without = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let ids = rx.recv().await.expect("the subscription lives");
            if !ids.contains(&leaving) {
                return ids;
            }
        }
    })
    .await
    .expect("the departure reached on_change");
    assert_eq!(without.len(), 1, "{without:?}");
    let e = hosts[0]
        .client
        .worker_on(&leaving, "Echo")
        .call("whereami", "")
        .await
        .unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Unreachable,
        "a departed host is an answer: {e}"
    );

    // The actor is still callable after the departure, with its count: it either stayed on
    // host 1 or was handed over (deactivated on host 2, re-activated here from the store).
    let n: i64 = hosts[0]
        .client
        .call_json("Counter", "shared", "increment", &1)
        .await
        .unwrap();
    assert_eq!(n, 21);
}
