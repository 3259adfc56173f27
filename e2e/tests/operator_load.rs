//! What a heartbeating fleet costs the operator: with 50 hosts renewing their Leases five
//! times a second, the operator's own API traffic must stay at its periodic resync, not grow
//! with the heartbeat rate. Prints the measured rates (see BENCHMARKS.md).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use sigx_crds::ActorCluster;
use sigx_e2e::kube_double::KubeDouble;
use sigx_operator::{Operator, Settings};

const NS: &str = "apps";
const HOSTS: usize = 50;
const BEAT: Duration = Duration::from_millis(200);
const WINDOW: Duration = Duration::from_secs(3);

fn lease(id: &str) -> Lease {
    let descriptor = serde_json::json!({
        "id": id, "advertise": format!("{id}:7311"), "types": ["Counter"],
        "statefulTypes": ["Counter"], "meta": {"node": format!("node-{}", id.len() % 3)},
        "status": "active", "startedAtUnixMs": 1,
    });
    Lease {
        metadata: ObjectMeta {
            name: Some(id.into()),
            labels: Some(BTreeMap::from([
                ("actors.sigx.dev/cluster".into(), "demo".into()),
                ("actors.sigx.dev/role".into(), "engine".into()),
            ])),
            annotations: Some(BTreeMap::from([(
                "actors.sigx.dev/descriptor".into(),
                descriptor.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(id.into()),
            lease_duration_seconds: Some(3),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_do_not_drive_operator_traffic() {
    let double = KubeDouble::start().await;
    let mut settings = Settings::single("op-load");
    settings.namespace = Some(NS.into());
    let operator = Operator::new(double.client_named("operator"), settings);
    let metrics = operator.metrics();
    let task = tokio::spawn(operator.run(std::future::pending()));

    let client = double.client();
    let clusters: Api<ActorCluster> = Api::namespaced(client.clone(), NS);
    let cluster: ActorCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
        "metadata": {"name": "demo"},
        "spec": {"sidecar": {"image": "x"}, "membership": {"heartbeatSeconds": 1, "ttlSeconds": 3}}
    }))
    .unwrap();
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let leases: Api<Lease> = Api::namespaced(client, NS);
    let ids: Vec<String> = (0..HOSTS).map(|i| format!("engine-{i}")).collect();
    for id in &ids {
        leases
            .create(&PostParams::default(), &lease(id))
            .await
            .unwrap();
    }
    // Let the operator see the whole fleet.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let hosts = clusters.get("demo").await.unwrap().status.map(|s| s.hosts);
        if hosts == Some(HOSTS as i32) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "operator never saw {HOSTS} hosts"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let before = double.stats();
    let reconciles_before = metrics.reconcile_count("ActorCluster");
    let started = tokio::time::Instant::now();
    let mut renewals = 0u64;
    while started.elapsed() < WINDOW {
        let round = tokio::time::Instant::now();
        for id in &ids {
            let mut l = leases.get(id).await.unwrap();
            l.spec.as_mut().unwrap().renew_time =
                Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
            leases
                .replace(id, &PostParams::default(), &l)
                .await
                .unwrap();
            renewals += 1;
        }
        tokio::time::sleep_until(round + BEAT).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = double.stats();
    let op = |s: &sigx_e2e::kube_double::Stats| s.by_client.get("operator").copied().unwrap_or(0);
    let operator_requests = op(&after) - op(&before);
    let reconciles = metrics.reconcile_count("ActorCluster") - reconciles_before;
    let status = clusters.get("demo").await.unwrap().status.unwrap();
    eprintln!(
        "{HOSTS} hosts, {:.0} renewals/s: operator made {:.1} requests/s ({} cluster reconciles in {elapsed:.1} s); watch events sent {}",
        renewals as f64 / elapsed,
        operator_requests as f64 / elapsed,
        reconciles,
        after.watch_events_sent - before.watch_events_sent,
    );
    assert_eq!(status.hosts, HOSTS as i32);
    assert_eq!(status.counts.fenced, 0, "renewed hosts are not lapsed");
    // Periodic resync only: one cluster reconcile per heartbeatSeconds (1 s) → ~3, each a few
    // requests; a heartbeat-driven operator would make hundreds.
    assert!(
        reconciles <= 5,
        "{reconciles} reconciles: heartbeats are driving the operator"
    );
    assert!(
        (operator_requests as f64) < 10.0 * elapsed,
        "{operator_requests} requests in {elapsed:.1} s"
    );
    task.abort();
}
