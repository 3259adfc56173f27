//! The real `sigx-operator` binary against the Kubernetes API double: configuration errors are
//! named before anything starts; two replica processes elect one leader; SIGKILL of the leader
//! hands over within the Lease duration.
//!
//! Needs the binary built (`cargo build -p sigx-operator`, which `make test` does).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use sigx_crds::ActorCluster;
use sigx_e2e::kube_double::KubeDouble;

const NS: &str = "apps";
const LEASE_SECONDS: u64 = 3;

fn operator_bin() -> PathBuf {
    let path = sigx_e2e::chaos::bin_dir().join("sigx-operator");
    assert!(
        path.exists(),
        "{} is missing: build it first (`cargo build -p sigx-operator`), or set SIGX_BIN_DIR",
        path.display()
    );
    path
}

fn kubeconfig(dir: &std::path::Path, url: &str) -> PathBuf {
    sigx_e2e::kube_double::write_kubeconfig(dir, url, NS)
}

/// Kills the process on drop, so a failing test leaves nothing behind.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(kubeconfig: &std::path::Path, name: &str) -> Proc {
    Proc(
        Command::new(operator_bin())
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", NS)
            .env("SIGX_WATCH_NAMESPACE", NS)
            .env("SIGX_LEADER_LEASE_SECONDS", LEASE_SECONDS.to_string())
            .env("SIGX_LEADER_GRACE_SECONDS", "1")
            .env("SIGX_METRICS_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sigx-operator"),
    )
}

fn cluster(name: &str) -> ActorCluster {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "actors.sigx.dev/v1alpha1",
        "kind": "ActorCluster",
        "metadata": {"name": name},
        "spec": {"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}}
    }))
    .unwrap()
}

async fn status_within(api: &Api<ActorCluster>, name: &str, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while api.get(name).await.unwrap().status.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} not reconciled within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn holder(double: &KubeDouble) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    leases
        .get_opt("sigx-operator")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
}

#[test]
fn bad_configuration_is_named_and_exits_2() {
    let out = Command::new(operator_bin())
        .env("SIGX_LEADER_LEASE_SECONDS", "5")
        .env("SIGX_LEADER_GRACE_SECONDS", "5")
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SIGX_LEADER_GRACE_SECONDS"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_operator_processes_elect_one_leader_and_sigkill_hands_over() {
    let double = KubeDouble::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &double.url());
    let mut a = Some(spawn(&config, "op-a"));
    let mut b = Some(spawn(&config, "op-b"));

    let clusters: Api<ActorCluster> = Api::namespaced(double.client(), NS);
    clusters
        .create(&PostParams::default(), &cluster("first"))
        .await
        .unwrap();
    status_within(&clusters, "first", Duration::from_secs(15)).await;
    let leader = holder(&double).await.expect("a leader holds the Lease");
    let secret_managers = double
        .field_managers(
            &sigx_e2e::kube_double::ResourceRef::new("", "v1", "serviceaccounts"),
            Some(NS),
            "first-sigx",
        )
        .unwrap();
    assert_eq!(secret_managers, ["sigx-operator"]);

    // SIGKILL the leader: no release, the standby waits out the Lease.
    let (killed, survivor) = if leader == "op-a" {
        (a.take(), "op-b")
    } else {
        (b.take(), "op-a")
    };
    drop(killed);
    let t0 = tokio::time::Instant::now();
    clusters
        .create(&PostParams::default(), &cluster("second"))
        .await
        .unwrap();
    status_within(&clusters, "second", Duration::from_secs(LEASE_SECONDS + 4)).await;
    eprintln!(
        "handover to {survivor} after {:?} (lease {LEASE_SECONDS} s)",
        t0.elapsed()
    );
    assert_eq!(holder(&double).await.as_deref(), Some(survivor));
    drop((a, b));
}
