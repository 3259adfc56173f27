//! The operator's API load at rest, read from the real API server's own
//! `apiserver_request_total` (issue 20): 2 ActorClusters and 4 ActorRoles, reconciled, then a
//! quiet minute. The control plane's own background traffic is measured first, without the
//! operator, and subtracted. At rest the operator must write nothing and read no Secret: it
//! reconciles on change (a spec, an owned object, a Lease appearing, going or lapsing).
//!
//! Prints the per-minute table BENCHMARKS.md quotes ("Operator idle API load"). Needs
//! `make controlplane` and `cargo build --workspace --bins`.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use sigx_crds::{ActorCluster, ActorRole};
use sigx_e2e::controlplane::{self, ControlPlane};

const NS: &str = "idle";
const WINDOW: Duration = Duration::from_secs(60);
const BASELINE: Duration = Duration::from_secs(30);

/// (verb, resource[/subresource]) → requests so far, WATCH excluded (one long request each).
async fn requests(client: &kube::Client) -> BTreeMap<(String, String), f64> {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.expect("GET /metrics");
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let (labels, value) = line.rsplit_once(' ').unwrap();
        let label = |name: &str| {
            labels
                .split(&format!("{name}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_owned()
        };
        let verb = label("verb");
        if verb == "WATCH" {
            continue;
        }
        let sub = label("subresource");
        let resource = if sub.is_empty() {
            label("resource")
        } else {
            format!("{}/{sub}", label("resource"))
        };
        *out.entry((verb, resource)).or_default() += value.parse::<f64>().unwrap();
    }
    out
}

/// Requests per minute in `after - before` over `over`.
fn per_minute(
    before: &BTreeMap<(String, String), f64>,
    after: &BTreeMap<(String, String), f64>,
    over: Duration,
) -> BTreeMap<(String, String), f64> {
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (v - before.get(k).unwrap_or(&0.0)) * 60.0 / over.as_secs_f64(),
            )
        })
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

struct Operator(Child);
impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_at_rest_writes_nothing() {
    let cp = ControlPlane::start_with_crds();
    let client = cp.client(NS).await;
    controlplane::create_namespace(&client, NS).await;
    controlplane::create_namespace(&client, "ops").await;

    // The control plane alone (its own leases, the controllers' resyncs).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let t0 = requests(&client).await;
    tokio::time::sleep(BASELINE).await;
    let baseline = per_minute(&t0, &requests(&client).await, BASELINE);

    let bin = sigx_e2e::chaos::bin_dir().join("sigx-operator");
    let log = std::fs::File::create(cp.dir().join("operator.log")).unwrap();
    let _operator = Operator(
        Command::new(bin)
            .env("KUBECONFIG", cp.kubeconfig_for("ops"))
            .env("POD_NAME", "op-a")
            .env("POD_NAMESPACE", "ops")
            .env("SIGX_WATCH_NAMESPACE", NS)
            .env("SIGX_METRICS_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn sigx-operator"),
    );
    let pp = PostParams::default();
    let clusters: Api<ActorCluster> = Api::namespaced(client.clone(), NS);
    let roles: Api<ActorRole> = Api::namespaced(client.clone(), NS);
    for c in ["alpha", "beta"] {
        let cluster = serde_json::from_value(json!({
            "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
            "metadata": {"name": c}, "spec": {"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}},
        }))
        .unwrap();
        clusters.create(&pp, &cluster).await.unwrap();
        for r in ["engine", "web"] {
            let role = serde_json::from_value(json!({
                "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorRole",
                "metadata": {"name": format!("{c}-{r}")},
                "spec": {"clusterRef": {"name": c}, "replicas": 1, "actors": ["Counter"],
                    "template": {"spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
            }))
            .unwrap();
            roles.create(&pp, &role).await.unwrap();
        }
    }
    // Reconciled: every role and cluster carries its conditions.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let c = clusters.list(&Default::default()).await.unwrap().items;
        let r = roles.list(&Default::default()).await.unwrap().items;
        let done = |s: Option<usize>| s.is_some_and(|n| n > 0);
        if c.iter()
            .all(|c| done(c.status.as_ref().map(|s| s.conditions.len())))
            && r.iter()
                .all(|r| done(r.status.as_ref().map(|s| s.conditions.len())))
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not reconciled in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Past the first status writes and the watches' echoes of them.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let t1 = requests(&client).await;
    tokio::time::sleep(WINDOW).await;
    let rest = per_minute(&t1, &requests(&client).await, WINDOW);

    let mut total = 0.0;
    let mut writes = Vec::new();
    eprintln!(
        "operator at rest, 2 clusters and 4 roles: requests per minute, control plane's own subtracted"
    );
    for (k, v) in &rest {
        let own = v - baseline.get(k).unwrap_or(&0.0);
        if own >= 1.0 {
            eprintln!("  {:>6} {:<40} {own:>6.1}", k.0, k.1);
            total += own;
            if k.0 != "GET" && k.0 != "LIST" || k.1 == "secrets" {
                writes.push((k.clone(), own));
            }
        }
    }
    eprintln!("  total {total:.1} per minute");
    let operator_objects = [
        "serviceaccounts",
        "roles",
        "rolebindings",
        "secrets",
        "actorclusters",
        "actorclusters/status",
        "actorroles/status",
        "deployments",
        "poddisruptionbudgets",
    ];
    let at_rest: Vec<_> = writes
        .iter()
        .filter(|((_, r), _)| operator_objects.contains(&r.as_str()))
        .collect();
    assert!(
        at_rest.is_empty(),
        "at rest the operator must not write or read Secrets; per minute: {at_rest:?}"
    );
}
