//! Two operator replicas against the Kubernetes API double: only the holder of the leader
//! Lease reconciles, and killing it hands over within the Lease duration.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use sigx_crds::ActorCluster;
use sigx_e2e::kube_double::{KubeDouble, Mode};
use sigx_operator::leader::LeaderSettings;
use sigx_operator::metrics::Metrics;
use sigx_operator::{Operator, Settings};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const NS: &str = "apps";
const LEASE_SECONDS: u64 = 3;

struct Replica {
    name: &'static str,
    task: JoinHandle<()>,
    metrics: std::sync::Arc<Metrics>,
    leading: watch::Receiver<bool>,
}

fn replica(double: &KubeDouble, name: &'static str) -> Replica {
    let mut s = Settings::single(name);
    s.namespace = Some(NS.into());
    s.debounce = Duration::from_millis(10);
    s.watch_backoff = (Duration::from_millis(50), Duration::from_millis(300));
    s.leader = Some(LeaderSettings {
        lease_name: "sigx-operator".into(),
        lease_namespace: NS.into(),
        duration_seconds: LEASE_SECONDS,
        grace_seconds: 1,
    });
    let operator = Operator::new(double.client_named(name), s).with_random(|| [1u8; 32]);
    let metrics = operator.metrics();
    let leading = operator.leading();
    let task = tokio::spawn(async move {
        operator
            .run(std::future::pending())
            .await
            .expect("leader election runs");
    });
    Replica {
        name,
        task,
        metrics,
        leading,
    }
}

fn cluster(name: &str) -> ActorCluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "actors.sigx.dev/v1alpha1",
        "kind": "ActorCluster",
        "metadata": {"name": name},
        "spec": {"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}, "auth": {"insecure": true}}
    }))
    .unwrap()
}

async fn wait_for_status(api: &Api<ActorCluster>, name: &str, within: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    loop {
        if api.get(name).await.unwrap().status.is_some() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "no replica reconciled {name} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn only_the_leader_reconciles_and_a_killed_leader_hands_over() {
    let double = KubeDouble::start().await;
    let a = replica(&double, "op-a");
    let b = replica(&double, "op-b");
    let clusters: Api<ActorCluster> = Api::namespaced(double.client(), NS);
    clusters
        .create(&PostParams::default(), &cluster("first"))
        .await
        .unwrap();
    wait_for_status(&clusters, "first", Duration::from_secs(10)).await;
    // Let both run side by side for a while: the standby must stay idle throughout.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let count = |r: &Replica| r.metrics.reconcile_count("ActorCluster");
    let (leader, standby) = if count(&a) > 0 { (a, b) } else { (b, a) };
    assert!(count(&leader) > 0);
    assert_eq!(
        count(&standby),
        0,
        "{} reconciled while {} held the Lease",
        standby.name,
        leader.name
    );
    assert!(*leader.leading.borrow());
    assert!(!*standby.leading.borrow());
    let lease: Lease = Api::namespaced(double.client(), NS)
        .get("sigx-operator")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some(leader.name)
    );
    let status_writer = double
        .field_managers(
            &sigx_e2e::kube_double::ResourceRef::new(
                "actors.sigx.dev",
                "v1alpha1",
                "actorclusters",
            ),
            Some(NS),
            "first",
        )
        .unwrap();
    assert!(
        status_writer.contains(&"sigx-operator".to_string()),
        "{status_writer:?}"
    );

    // Kill the leader: no release, its Lease must lapse.
    leader.task.abort();
    let _ = leader.task.await;
    let killed = tokio::time::Instant::now();
    clusters
        .create(&PostParams::default(), &cluster("second"))
        .await
        .unwrap();
    let bound = Duration::from_secs(LEASE_SECONDS) + Duration::from_secs(3);
    wait_for_status(&clusters, "second", bound).await;
    let handover = killed.elapsed();
    assert!(count(&standby) > 0, "the standby took over");
    assert!(*standby.leading.borrow());
    eprintln!("handover after {handover:?} (lease {LEASE_SECONDS} s)");
    let second = clusters.get("second").await.unwrap();
    assert!(second.status.is_some(), "{}", second.name_any());
    standby.task.abort();
}

#[tokio::test]
async fn a_partitioned_leader_steps_down_before_the_standby_takes_over() {
    let double = KubeDouble::start().await;
    let a = replica(&double, "op-a");
    let b = replica(&double, "op-b");
    let started = tokio::time::Instant::now();
    let (leader, standby) = loop {
        match (*a.leading.borrow(), *b.leading.borrow()) {
            (true, false) => break (&a, &b),
            (false, true) => break (&b, &a),
            (true, true) => panic!("two leaders"),
            (false, false) => {}
        }
        assert!(started.elapsed() < Duration::from_secs(10), "nobody leads");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };

    // The leader can no longer reach the API (its renewals fail); the standby still can.
    double.partition(leader.name, Mode::Failing);
    let cut = tokio::time::Instant::now();
    let mut stepped_down = None;
    let took_over = loop {
        let (l, s) = (*leader.leading.borrow(), *standby.leading.borrow());
        assert!(!(l && s), "both replicas lead at once");
        if !l && stepped_down.is_none() {
            stepped_down = Some(cut.elapsed());
        }
        if s {
            break cut.elapsed();
        }
        assert!(
            cut.elapsed() < Duration::from_secs(LEASE_SECONDS + 5),
            "no handover"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let stepped_down = stepped_down.expect("the cut-off leader stepped down");
    eprintln!(
        "partitioned leader stepped down after {stepped_down:?}; standby led after {took_over:?}"
    );
    assert!(stepped_down < took_over);
    assert!(
        stepped_down <= Duration::from_secs(LEASE_SECONDS),
        "{stepped_down:?}"
    );
    double.partition(leader.name, Mode::Serving);
    // Healed, the old leader stays a standby: the Lease is someone else's now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!*leader.leading.borrow());
    assert!(*standby.leading.borrow());
    a.task.abort();
    b.task.abort();
}
