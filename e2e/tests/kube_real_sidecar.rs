//! Real `sigx-sidecar` processes in `kubernetes` membership mode on real Leases
//! (`sigx_e2e::controlplane`): join (one Lease per host), renewal, kill -9 (peers expire the
//! host after the TTL), graceful leave (the Lease is withdrawn), and a Lease deleted under a
//! live host (it fences: /livez answers 503 "fenced"), also when the real garbage collector
//! deletes it because its Pod was deleted.
//!
//! Each sidecar names a real Pod (created here, Pending: there is no kubelet) as its Lease's
//! owner, as in a cluster: the real garbage collector deletes a Lease whose owner does not exist.
//!
//! Needs `make controlplane` and the workspace binaries (`make test` builds both).

mod sdk_support;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use sdk_support::Scratch;
use sdk_support::kube_host::{self, KubeHost, KubeHostSpec, start_kube_host};
use sigx_e2e::controlplane::{self, ControlPlane};

const NS: &str = "apps";
const BEAT_MS: u64 = 500;
const TTL_MS: u64 = 3000;
const SELECTOR: &str = "actors.sigx.dev/cluster=demo";

type Host = KubeHost;

fn host(scratch: &Scratch, config: &Path, name: &str, uid: &str) -> Host {
    start_kube_host(
        scratch,
        config,
        KubeHostSpec {
            namespace: NS,
            pod: name,
            uid,
            node: "node-1",
            zone: Some("zone-a"),
            beat_ms: BEAT_MS,
            ttl_ms: TTL_MS,
            health_on_any: false,
        },
    )
}

async fn pod_object(client: &kube::Client, name: &str) -> String {
    kube_host::pod_object(client, NS, name).await
}

async fn leases(client: &kube::Client) -> Vec<Lease> {
    Api::<Lease>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .expect("list Leases")
        .items
}

fn lease_of<'a>(leases: &'a [Lease], pod: &str) -> Option<&'a Lease> {
    leases
        .iter()
        .find(|l| l.name_any().starts_with(&format!("{pod}-")))
}

async fn view_size(socket: &Path) -> usize {
    let c = sigx_sdk::Client::lazy(socket).with_timeout(Duration::from_secs(5));
    c.status()
        .await
        .ok()
        .and_then(|s| s.view)
        .map(|v| v.hosts.len())
        .unwrap_or(0)
}

/// Waits up to `within` until `probe` holds; how long it took.
async fn within(what: &str, within: Duration, mut probe: impl AsyncFnMut() -> bool) -> Duration {
    let t0 = tokio::time::Instant::now();
    while !probe().await {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_on_real_leases_join_renew_expire_leave_and_fence() {
    let cp = ControlPlane::start();
    let client = cp.client(NS).await;
    controlplane::create_namespace(&client, NS).await;
    let config = cp.kubeconfig_for(NS);
    let scratch = Scratch::new("kreal");
    let mut hosts = Vec::new();
    for name in ["engine-a", "engine-b", "engine-c"] {
        let uid = pod_object(&client, name).await;
        hosts.push(host(&scratch, &config, name, &uid));
    }
    let [a, mut b, mut c] = <[Host; 3]>::try_from(hosts).ok().unwrap();

    // Join: one Lease per host, owned by its Pod, held by the host's incarnation.
    let list = leases(&client).await;
    assert_eq!(list.len(), 3, "one Lease per host");
    for pod in ["engine-a", "engine-b", "engine-c"] {
        let lease = lease_of(&list, pod).unwrap_or_else(|| panic!("no Lease for {pod}"));
        let owner = &lease.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Pod", pod));
        let holder = lease
            .spec
            .as_ref()
            .unwrap()
            .holder_identity
            .clone()
            .unwrap();
        assert!(holder.starts_with(&lease.name_any()), "{holder}");
        // The descriptor peers read publishes the node and zone (locality's input).
        let descriptor: serde_json::Value =
            serde_json::from_str(&lease.annotations()["actors.sigx.dev/descriptor"]).unwrap();
        assert_eq!(
            (&descriptor["meta"]["node"], &descriptor["meta"]["zone"]),
            (&serde_json::json!("node-1"), &serde_json::json!("zone-a")),
            "{descriptor}"
        );
    }
    within(
        "every host sees three",
        Duration::from_secs(10),
        async || view_size(&a.socket).await == 3 && view_size(&b.socket).await == 3,
    )
    .await;

    // Renewal: the real server stores a later renewTime (and a new resourceVersion).
    let first = lease_of(&list, "engine-a").unwrap().clone();
    let renewed = within(
        "engine-a renews",
        Duration::from_millis(BEAT_MS * 6),
        async || {
            let now = leases(&client).await;
            let l = lease_of(&now, "engine-a").cloned();
            l.is_some_and(|l| {
                l.resource_version() != first.resource_version()
                    && l.spec.and_then(|s| s.renew_time)
                        > first.spec.clone().and_then(|s| s.renew_time)
            })
        },
    )
    .await;
    eprintln!("engine-a renewed within {renewed:?}");

    // kill -9: no withdrawal; the peers expire it once its Lease is TTL old.
    c.sidecar.signal("KILL");
    let _ = c.sidecar.child.wait();
    let expired = within(
        "the peers expire the killed host",
        Duration::from_millis(TTL_MS * 4),
        async || view_size(&a.socket).await == 2 && view_size(&b.socket).await == 2,
    )
    .await;
    eprintln!("kill -9 → expired by peers after {expired:?} (TTL {TTL_MS} ms)");
    assert!(
        expired >= Duration::from_millis(TTL_MS / 2),
        "expired after {expired:?}: sooner than the Lease could have lapsed"
    );

    // Graceful leave: the Lease is withdrawn.
    let _ = b.sidecar.terminate(Duration::from_secs(20));
    within(
        "engine-b's Lease withdrawn",
        Duration::from_secs(10),
        async || lease_of(&leases(&client).await, "engine-b").is_none(),
    )
    .await;

    // A Lease deleted under a live host: it fences (terminal; /livez says so).
    assert_eq!(sigx_e2e::probe::http_status(a.health, "/livez"), 200);
    let name = lease_of(&leases(&client).await, "engine-a")
        .expect("engine-a's Lease")
        .name_any();
    Api::<Lease>::namespaced(client.clone(), NS)
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete engine-a's Lease");
    let fenced = within(
        "engine-a fences",
        Duration::from_millis(TTL_MS * 2),
        async || sigx_e2e::probe::http_status(a.health, "/livez") == 503,
    )
    .await;
    eprintln!("Lease deleted → fenced after {fenced:?}");
    assert!(
        a.sidecar.log_text().contains("fenced"),
        "the log names the fence:\n{}",
        a.sidecar.log_text()
    );
    // A fenced host does not re-create its Lease.
    tokio::time::sleep(Duration::from_millis(BEAT_MS * 3)).await;
    assert!(lease_of(&leases(&client).await, "engine-a").is_none());
    drop(c);

    // The Pod deleted under a live host: the real garbage collector deletes the Lease the Pod
    // owns, and the host fences as above.
    let uid = pod_object(&client, "engine-d").await;
    let d = host(&scratch, &config, "engine-d", &uid);
    assert!(lease_of(&leases(&client).await, "engine-d").is_some());
    Api::<Pod>::namespaced(client.clone(), NS)
        .delete("engine-d", &DeleteParams::default())
        .await
        .expect("delete Pod engine-d");
    let collected = within(
        "engine-d fences once the GC deletes its Lease",
        Duration::from_secs(30),
        async || sigx_e2e::probe::http_status(d.health, "/livez") == 503,
    )
    .await;
    eprintln!("Pod deleted → Lease collected → fenced after {collected:?}");
    assert!(lease_of(&leases(&client).await, "engine-d").is_none());
}
