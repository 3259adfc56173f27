//! The real `sigx` binary's `status --kubernetes` against the Kubernetes API double: the
//! ActorCluster's status and conditions and the fleet table from the cluster's Leases, read with
//! the real kube client from a kube config named by `KUBECONFIG`.
//!
//! Needs the binary built (`cargo build -p sigx-cli`, which `make test` does).

mod sdk_support;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use sdk_support::{Scratch, bin, free_port};
use serde_json::json;
use sigx_crds::ActorCluster;
use sigx_e2e::kube_double::KubeDouble;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

const NS: &str = "apps";

fn kubeconfig(dir: &std::path::Path, url: &str) -> PathBuf {
    sigx_e2e::kube_double::write_kubeconfig(dir, url, NS)
}

/// `sigx <args>` with only `config` as its kube config.
async fn sigx(config: &Path, args: &[&str]) -> Output {
    tokio::process::Command::new(bin("sigx"))
        .args(args)
        .env("KUBECONFIG", config)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("SIGX_SOCKET")
        .output()
        .await
        .expect("run sigx")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// An ActorCluster named `name`, with `status` written through the status subresource (as the
/// operator writes it).
async fn cluster(double: &KubeDouble, name: &str, status: serde_json::Value) {
    let api: Api<ActorCluster> = Api::namespaced(double.client(), NS);
    let c: ActorCluster = serde_json::from_value(json!({
        "apiVersion": "actors.sigx.dev/v1alpha1",
        "kind": "ActorCluster",
        "metadata": {"name": name},
        "spec": {"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &c).await.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap();
}

/// A host's Lease as the sidecar's Kubernetes membership provider writes it (DESIGN.md §3).
async fn host_lease(double: &KubeDouble, cluster: &str, id: &str, node: Option<&str>) {
    let mut d = json!({
        "id": id,
        "advertise": format!("{id}.pods:7311"),
        "types": ["Counter"],
        "statefulTypes": ["Counter"],
        "meta": {},
        "status": "active",
        "startedAtUnixMs": 1_700_000_000_000i64,
    });
    if let Some(n) = node {
        d["meta"]["node"] = json!(n);
    }
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(id.into()),
            labels: Some(BTreeMap::from([
                ("actors.sigx.dev/cluster".into(), cluster.into()),
                ("actors.sigx.dev/role".into(), "engine".into()),
            ])),
            annotations: Some(BTreeMap::from([(
                "actors.sigx.dev/descriptor".into(),
                d.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(id.into()),
            lease_duration_seconds: Some(5),
            ..Default::default()
        }),
    };
    let api: Api<Lease> = Api::namespaced(double.client(), NS);
    api.create(&PostParams::default(), &lease).await.unwrap();
}

/// `demo`: three hosts on one node, Ready; `quiet`: two hosts that report no node, no status.
async fn two_clusters(double: &KubeDouble) {
    cluster(
        double,
        "demo",
        json!({
            "hosts": 3, "nodes": "1", "active": 3,
            "summary": "3 host(s) / 1 node(s)",
            "roles": [{"name": "engine", "hosts": 3, "active": 3}],
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "HostsActive",
                "message": "3 of 3 hosts active", "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        }),
    )
    .await;
    for id in ["engine-a", "engine-b", "engine-c"] {
        host_lease(double, "demo", id, Some("node-1")).await;
    }
    cluster(double, "quiet", json!({"hosts": 2, "nodes": "unknown"})).await;
    for id in ["quiet-a", "quiet-b"] {
        host_lease(double, "quiet", id, None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_kubernetes_shows_the_cluster_status_conditions_and_fleet() {
    let double = KubeDouble::start().await;
    let scratch = Scratch::new("kstatus");
    let config = kubeconfig(&scratch.0, &double.url());
    two_clusters(&double).await;

    let out = sigx(&config, &["status", "--kubernetes", "--cluster", "demo"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    for needle in [
        "cluster      demo (namespace apps)",
        "status       3 host(s) / 1 node(s)",
        "roles        engine 3 host(s) (3 active, 0 fenced)",
        "  Ready  True    HostsActive  3 of 3 hosts active",
        "fleet (3 Lease(s) labelled actors.sigx.dev/cluster=demo)",
        "\nengine-a  active  node-1  Counter",
        "\nengine-b  active  node-1  Counter",
        "\nengine-c  active  node-1  Counter",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    assert!(
        stdout.ends_with("\n3 host(s) / 1 node(s)\n"),
        "the fleet's own summary line closes the output:\n{stdout}"
    );
    assert!(
        !stdout.contains("quiet-"),
        "another cluster's Leases: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_kubernetes_says_when_no_host_reports_a_node() {
    let double = KubeDouble::start().await;
    let scratch = Scratch::new("kquiet");
    let config = kubeconfig(&scratch.0, &double.url());
    two_clusters(&double).await;

    let out = sigx(
        &config,
        &[
            "status",
            "--kubernetes",
            "--namespace",
            NS,
            "--cluster",
            "quiet",
        ],
    )
    .await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    assert!(
        stdout.contains(
            "2 host(s); no host reports a node: the fleet said nothing about where it runs"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nquiet-a  active  -     Counter"),
        "{stdout}"
    );
    assert!(!stdout.contains("node(s)\n"), "never a guess: {stdout}");
    assert!(stdout.contains("conditions   (none)"), "{stdout}");

    // Without --cluster: every cluster in the namespace, each with its own fleet.
    let out = sigx(&config, &["status", "--kubernetes"]).await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("cluster      demo"), "{stdout}");
    assert!(stdout.contains("cluster      quiet"), "{stdout}");
    assert!(stdout.contains("3 host(s) / 1 node(s)\n"), "{stdout}");
    assert!(
        stdout.contains("2 host(s); no host reports a node"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_kubernetes_names_what_is_missing_and_exits_non_zero() {
    let double = KubeDouble::start().await;
    let scratch = Scratch::new("kmiss");
    let config = kubeconfig(&scratch.0, &double.url());

    let out = sigx(&config, &["status", "--kubernetes"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no ActorCluster in namespace \"apps\""),
        "{}",
        text(&out.stderr)
    );

    cluster(&double, "demo", json!({"hosts": 0})).await;
    let out = sigx(&config, &["status", "--kubernetes", "--cluster", "nope"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("no ActorCluster \"nope\" in namespace \"apps\""),
        "{err}"
    );

    // --cluster means nothing without --kubernetes: bad usage.
    let out = sigx(&config, &["status", "--cluster", "demo"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    // An API nobody serves: unreachable, exit 3, naming what it tried to read.
    let dead_dir = scratch.path("dead");
    std::fs::create_dir_all(&dead_dir).unwrap();
    let dead = kubeconfig(&dead_dir, &format!("http://127.0.0.1:{}", free_port()));
    let out = sigx(&dead, &["status", "--kubernetes", "--cluster", "demo"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("ActorCluster apps/demo"),
        "{}",
        text(&out.stderr)
    );
}
