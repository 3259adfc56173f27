//! Helpers of the tests that run the real `sigx-operator` against the real control plane
//! ([`crate::controlplane`]): the operator process, polling, and one namespace's view of the API.

use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use sigx_crds::{ActorCluster, ActorRole};

use crate::controlplane::ControlPlane;

/// How long the real controllers (GC, Deployment, ReplicaSet) and the operator may take.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `probe` every 100 ms until it yields, failing the test after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {PATIENCE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The operator process, killed on drop; its log is printed when the test fails.
pub struct Operator {
    child: Child,
    log: std::path::PathBuf,
}

impl Operator {
    /// Starts `sigx-operator` from [`crate::chaos::bin_dir`], watching every namespace, its
    /// leader Lease in `ops` (5 s).
    pub fn spawn(cp: &ControlPlane) -> Operator {
        Operator::spawn_in(cp, "ops", false)
    }

    /// Like [`Operator::spawn`], with its kubeconfig and leader Lease in `ns`; `watch_only`
    /// confines it to `ns` (`SIGX_WATCH_NAMESPACE`, a namespaced install).
    pub fn spawn_in(cp: &ControlPlane, ns: &str, watch_only: bool) -> Operator {
        Operator::spawn_with(cp, &cp.kubeconfig_for(ns), ns, watch_only)
    }

    /// Like [`Operator::spawn_in`], with the credentials of `kubeconfig` (say, a ServiceAccount
    /// token bound by the chart's RBAC, rather than the admin's certificate).
    pub fn spawn_with(
        cp: &ControlPlane,
        kubeconfig: &std::path::Path,
        ns: &str,
        watch_only: bool,
    ) -> Operator {
        Operator::spawn_watching(cp, kubeconfig, ns, watch_only.then_some(ns))
    }

    /// Like [`Operator::spawn_with`], its leader Lease in `ns`, watching `watch` only (`None`:
    /// every namespace): the operator's namespace and the watched one may differ.
    pub fn spawn_watching(
        cp: &ControlPlane,
        kubeconfig: &std::path::Path,
        ns: &str,
        watch: Option<&str>,
    ) -> Operator {
        let bin = crate::chaos::bin_dir().join("sigx-operator");
        assert!(
            bin.is_file(),
            "{} is missing: `cargo build --workspace --bins` first",
            bin.display()
        );
        let log = cp.dir().join("operator.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(bin);
        if let Some(watch) = watch {
            cmd.env("SIGX_WATCH_NAMESPACE", watch);
        } else {
            cmd.env_remove("SIGX_WATCH_NAMESPACE");
        }
        let child = cmd
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", "op-a")
            .env("POD_NAMESPACE", ns)
            .env("SIGX_LEADER_LEASE_SECONDS", "5")
            .env("SIGX_LEADER_GRACE_SECONDS", "1")
            .env("SIGX_METRICS_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn sigx-operator");
        Operator { child, log }
    }
}

impl Operator {
    /// What the operator logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            print_log_tail("sigx-operator", &self.log, 40);
        }
    }
}

/// A fresh control plane with the CRDs, the namespace `ops`, a client for it, and an operator
/// watching every namespace: what the real-operator tests start from.
pub async fn start_in_ops() -> (ControlPlane, kube::Client, Operator) {
    let cp = ControlPlane::start_with_crds();
    let client = cp.client("ops").await;
    crate::controlplane::create_namespace(&client, "ops").await;
    let operator = Operator::spawn(&cp);
    (cp, client, operator)
}

/// Prints the last `n` lines of a process's log to stderr (for a failing test's output).
pub fn print_log_tail(name: &str, log: &std::path::Path, n: usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    eprintln!(
        "--- {name} log (last {n} lines) ---\n{}",
        lines[lines.len().saturating_sub(n)..].join("\n")
    );
}

/// A namespace's view of the API (created by [`Ns::create`]).
pub struct Ns {
    pub client: kube::Client,
    pub name: &'static str,
}

impl Ns {
    pub async fn create(
        client: &kube::Client,
        name: &'static str,
        labels: serde_json::Value,
    ) -> Ns {
        let ns: Namespace = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
        )
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        Ns {
            client: client.clone(),
            name,
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), self.name)
    }

    pub async fn get<K>(&self, name: &str) -> Option<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        self.api::<K>().get_opt(name).await.expect("GET")
    }

    pub async fn create_json<K>(&self, value: serde_json::Value) -> K
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let obj: K = serde_json::from_value(value).unwrap();
        self.api::<K>()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create in {}: {e}", self.name))
    }

    /// An ActorCluster `demo` with this `spec.sidecar`.
    pub async fn cluster(&self, sidecar: serde_json::Value) -> ActorCluster {
        self.create_json(json!({
            "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
            "metadata": {"name": "demo"},
            "spec": {"sidecar": sidecar},
        }))
        .await
    }

    /// An ActorRole of `demo` (app container with requests), `extra` merged into its spec.
    pub async fn role(&self, name: &str, replicas: i32, extra: serde_json::Value) -> ActorRole {
        let mut spec = json!({
            "clusterRef": {"name": "demo"},
            "replicas": replicas,
            "actors": ["Counter"],
            "template": {"spec": {"containers": [{
                "name": "app", "image": "ghcr.io/sigx/counter-app:0.1.0",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}
            }]}}
        });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        self.create_json(json!({
            "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorRole",
            "metadata": {"name": name}, "spec": spec,
        }))
        .await
    }

    /// The pods of the Deployment `name` (through its ReplicaSets).
    pub async fn pods_of(&self, name: &str) -> Vec<Pod> {
        let Some(d) = self.get::<Deployment>(name).await else {
            return Vec::new();
        };
        let d_uid = d.uid().unwrap();
        let sets: Vec<String> = self
            .api::<ReplicaSet>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|r| r.owner_references().iter().any(|o| o.uid == d_uid))
            .filter_map(|r| r.uid())
            .collect();
        self.api::<Pod>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.owner_references().iter().any(|o| sets.contains(&o.uid)))
            .collect()
    }

    pub async fn role_condition(&self, role: &str, type_: &str) -> Option<Condition> {
        self.get::<ActorRole>(role)
            .await?
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == type_)
    }

    pub async fn events_for(&self, name: &str, reason: &str) -> Vec<Event> {
        self.api::<Event>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some(name)
                    && e.reason.as_deref() == Some(reason)
            })
            .collect()
    }
}
