//! `sigx dashboard --kubernetes` against the real control plane (`sigx_e2e::controlplane`): three
//! real `sigx-sidecar` processes in `kubernetes` membership mode on real Leases, each on its own
//! node, each publishing its health address in its Lease descriptor (`meta.health`; the health
//! listener binds 0.0.0.0, so the advertise host is published with the bound port). The
//! dashboard finds them through the ActorCluster and its Leases only (no socket), scrapes each
//! `/metrics`, and its `/api/fleet` must show the three hosts, their nodes, and the activations
//! each host's own `Status` reports for the calls made. A one-socket dashboard (as in one pod)
//! must show the other two hosts' metrics too, through their `meta.health`. A SIGSTOPped host's
//! row turns unreachable and stays listed; a paused API server is reported, and the hosts seen
//! before are still shown.
//!
//! Needs `make controlplane` and the workspace binaries (`make test` builds both).

mod sdk_support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use sdk_support::kube_host::{self, KubeHost, KubeHostSpec, start_kube_host};
use sdk_support::{Proc, Scratch, bin, free_port};
use serde_json::{Value, json};
use sigx_crds::ActorCluster;
use sigx_e2e::controlplane::{self, ControlPlane};

const NS: &str = "apps";
/// Distinct actors called; where each activates is placement's choice.
const ACTORS: usize = 9;

type Host = KubeHost;

fn host(scratch: &Scratch, config: &Path, name: &str, uid: &str, node: &str) -> Host {
    start_kube_host(
        scratch,
        config,
        KubeHostSpec {
            namespace: NS,
            pod: name,
            uid,
            node,
            zone: None,
            beat_ms: 500,
            ttl_ms: 3000,
            health_on_any: true,
        },
    )
}

async fn pod_object(client: &kube::Client, name: &str) -> String {
    kube_host::pod_object(client, NS, name).await
}

/// `GET /api/fleet` of the dashboard at `addr`, as JSON (`None` while it does not answer).
fn fleet(addr: SocketAddr) -> Option<Value> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET /api/fleet HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (_, body) = buf.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

fn dashboard(scratch: &Scratch, config: &Path, tag: &str, args: &[&str]) -> (Proc, SocketAddr) {
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut cmd = Command::new(bin("sigx"));
    cmd.arg("dashboard")
        .args(args)
        .args(["--listen", &addr.to_string()])
        .args(["--interval", "200ms", "--probe-timeout", "700ms"])
        .env("KUBECONFIG", config)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("SIGX_SOCKET");
    (
        Proc::spawn(cmd, scratch.path(&format!("dashboard-{tag}.log"))),
        addr,
    )
}

/// The row of host `id` (a host id starts with its pod name).
fn row<'a>(snap: &'a Value, pod: &str) -> Option<&'a Value> {
    snap["hosts"].as_array()?.iter().find(|h| {
        h["id"]
            .as_str()
            .is_some_and(|id| id.starts_with(&format!("{pod}-")))
    })
}

/// Polls the dashboard until `ok` holds of a snapshot; the snapshot.
async fn until(addr: SocketAddr, dash: &Proc, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut last = None;
    while tokio::time::Instant::now() < deadline {
        if let Some(s) = tokio::task::block_in_place(|| fleet(addr)) {
            if ok(&s) {
                return s;
            }
            last = Some(s);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "{what}: not within 30 s; the last snapshot:\n{}\nthe dashboard's log:\n{}",
        serde_json::to_string_pretty(&last).unwrap(),
        dash.log_text()
    );
}

/// Live `Counter` activations per host, as each host's own `Status` says.
async fn status_activations(hosts: &[(&str, &Host)]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for (pod, h) in hosts {
        let c = sigx_sdk::Client::lazy(&h.socket).with_timeout(Duration::from_secs(5));
        let s = c.status().await.expect("Status");
        let n = s
            .activations
            .iter()
            .find(|a| a.actor_type == "Counter")
            .map_or(0, |a| a.activations);
        out.push((pod.to_string(), n));
    }
    out
}

fn row_activations(snap: &Value, pod: &str) -> Option<u64> {
    row(snap, pod)?["activations"]
        .as_object()
        .map(|a| a.get("Counter").and_then(Value::as_u64).unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_reads_a_cluster_from_its_leases_and_scrapes_every_host() {
    let cp = ControlPlane::start_with_crds();
    let client = cp.client(NS).await;
    controlplane::create_namespace(&client, NS).await;
    let config = cp.kubeconfig_for(NS);
    let scratch = Scratch::new("kdash");

    // The ActorCluster, with a status as the operator writes it (no operator runs here).
    let clusters: Api<ActorCluster> = Api::namespaced(client.clone(), NS);
    let c: ActorCluster = serde_json::from_value(json!({
        "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
        "metadata": {"name": "demo"},
        "spec": {"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}},
    }))
    .unwrap();
    clusters.create(&PostParams::default(), &c).await.unwrap();
    clusters
        .patch_status(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hosts": 3, "nodes": "3",
                "summary": "3 host(s) / 3 node(s)"}})),
        )
        .await
        .unwrap();

    let pods = ["engine-a", "engine-b", "engine-c"];
    let mut hosts = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let uid = pod_object(&client, pod).await;
        hosts.push(host(
            &scratch,
            &config,
            pod,
            &uid,
            &format!("node-{}", i + 1),
        ));
    }
    let [a, b, c] = <[Host; 3]>::try_from(hosts).ok().unwrap();
    let named = [("engine-a", &a), ("engine-b", &b), ("engine-c", &c)];

    // Calls through every host; each actor activates on one host of placement's choosing.
    for i in 0..ACTORS {
        let via = &named[i % 3].1.socket;
        let client = sigx_sdk::Client::lazy(via).with_timeout(Duration::from_secs(10));
        let n: i64 = client
            .call_json("Counter", &format!("k{i}"), "increment", &1)
            .await
            .expect("increment");
        assert_eq!(n, 1);
    }
    let truth = status_activations(&named).await;
    assert_eq!(
        truth.iter().map(|(_, n)| n).sum::<u64>(),
        ACTORS as u64,
        "one activation per actor called: {truth:?}"
    );

    // --kubernetes: no socket, only the API server and each host's published health address.
    let (kdash, kaddr) = dashboard(
        &scratch,
        &config,
        "kube",
        &["--kubernetes", "-n", NS, "--cluster", "demo"],
    );
    let snap = until(kaddr, &kdash, "three hosts scraped", |s| {
        truth
            .iter()
            .all(|(pod, n)| row_activations(s, pod) == Some(*n))
    })
    .await;
    assert_eq!(snap["summary"]["hosts"], json!(3), "{snap:#}");
    assert_eq!(snap["summary"]["text"], json!("3 host(s) / 3 node(s)"));
    assert_eq!(snap["hosts"].as_array().unwrap().len(), 3, "{snap:#}");
    assert_eq!(snap["activationsByType"]["Counter"], json!(ACTORS));
    assert_eq!(snap["kubernetes"]["cluster"], json!("demo"), "{snap:#}");
    assert_eq!(
        snap["kubernetes"]["summary"],
        json!("3 host(s) / 3 node(s)")
    );
    for (i, (pod, h)) in named.iter().enumerate() {
        let r = row(&snap, pod).unwrap();
        assert_eq!(r["reachable"], json!(true), "{r:#}");
        assert_eq!(r["state"], json!("ready"), "{r:#}");
        assert_eq!(r["node"], json!(format!("node-{}", i + 1)), "{r:#}");
        assert_eq!(r["viewStatus"], json!("active"), "{r:#}");
        // The wildcard bind is published under the advertise host, with the bound port.
        assert_eq!(
            r["source"],
            json!(format!("http://127.0.0.1:{}/metrics", h.health.port())),
            "{r:#}"
        );
        // Placement may leave a host with none of the few actors: each host ran at least the
        // turns of the actors it holds.
        let holds = truth.iter().find(|(p, _)| p == pod).map_or(0, |(_, n)| *n);
        assert!(
            r["counters"]["turns"].as_u64().unwrap() >= holds,
            "{pod} holds {holds}: {r:#}"
        );
    }
    let turns: u64 = named
        .iter()
        .map(|(pod, _)| {
            row(&snap, pod).unwrap()["counters"]["turns"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(turns >= ACTORS as u64, "{turns} turns for {ACTORS} calls");
    assert!(
        snap["latency"]["calls"].as_u64().unwrap() >= ACTORS as u64,
        "{snap:#}"
    );

    // One socket (as `kubectl exec` into one pod): the other hosts through their meta.health.
    let a_socket = a.socket.to_str().unwrap().to_string();
    let (sdash, saddr) = dashboard(&scratch, &config, "socket", &["--socket", &a_socket]);
    let snap = until(saddr, &sdash, "every host through one socket", |s| {
        truth
            .iter()
            .all(|(pod, n)| row_activations(s, pod) == Some(*n))
    })
    .await;
    assert_eq!(snap["hosts"].as_array().unwrap().len(), 3, "{snap:#}");
    assert_eq!(row(&snap, "engine-a").unwrap()["source"], json!(a_socket));
    for pod in ["engine-b", "engine-c"] {
        let r = row(&snap, pod).unwrap();
        assert_eq!(r["reachable"], json!(true), "{r:#}");
        assert!(r["source"].as_str().unwrap().ends_with("/metrics"), "{r:#}");
    }
    drop(sdash);

    // SIGSTOP engine-c: its /metrics stops answering; its row turns unreachable, still listed
    // under its id and node.
    c.sidecar.signal("STOP");
    let snap = until(kaddr, &kdash, "engine-c unreachable", |s| {
        row(s, "engine-c").is_some_and(|r| r["reachable"] == json!(false))
    })
    .await;
    let r = row(&snap, "engine-c").unwrap();
    assert_eq!(r["state"], json!("unreachable"), "{r:#}");
    assert_eq!(r["node"], json!("node-3"), "{r:#}");
    assert!(r["error"].as_str().unwrap().contains("no answer"), "{r:#}");
    assert_eq!(snap["summary"]["unreachable"], json!(1), "{snap:#}");
    for pod in ["engine-a", "engine-b"] {
        assert_eq!(
            row(&snap, pod).unwrap()["reachable"],
            json!(true),
            "{snap:#}"
        );
    }
    // Still listed after its Lease has lapsed and its peers have expired it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let snap = tokio::task::block_in_place(|| fleet(kaddr)).expect("the dashboard answers");
    let r = row(&snap, "engine-c").expect("engine-c still listed");
    assert_eq!(r["reachable"], json!(false), "{r:#}");

    // The API server stops answering: the page says so and still shows every host it knew.
    cp.pause();
    let snap = until(kaddr, &kdash, "the API's silence reported", |s| {
        s["kubernetes"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("did not answer"))
    })
    .await;
    cp.resume();
    assert_eq!(snap["hosts"].as_array().unwrap().len(), 3, "{snap:#}");
    for pod in ["engine-a", "engine-b"] {
        // Reachable (their leases may lapse meanwhile: fenced, but answering).
        assert_eq!(
            row(&snap, pod).unwrap()["reachable"],
            json!(true),
            "{snap:#}"
        );
    }
    c.sidecar.signal("CONT");
    drop(kdash);
}
