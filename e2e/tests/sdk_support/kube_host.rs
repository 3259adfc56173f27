//! A real `sigx-sidecar` in `kubernetes` membership mode on the real control plane, with a
//! counter app, as a pod would run it: it names a real Pod (created here, never scheduled: there
//! is no kubelet) as its Lease's owner, so the real garbage collector treats the Lease as it
//! would in a cluster.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, PostParams};

use super::{Proc, Scratch, bin, counter_app, free_port};

/// One host: the sidecar, its app, its socket and its health address (on loopback).
pub struct KubeHost {
    pub sidecar: Proc,
    pub _app: Proc,
    pub socket: PathBuf,
    pub health: SocketAddr,
}

/// How to start one host.
pub struct KubeHostSpec<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    /// The Pod's uid (`pod_object`).
    pub uid: &'a str,
    pub node: &'a str,
    pub zone: Option<&'a str>,
    pub beat_ms: u64,
    pub ttl_ms: u64,
    /// Bind the health listener on 0.0.0.0 (the sidecar then publishes its advertise host with
    /// the bound port as `meta.health`) instead of 127.0.0.1.
    pub health_on_any: bool,
}

/// A Pod object for `name` in `namespace` (never scheduled); its uid, which the sidecar puts in
/// its Lease's owner reference. Retries while the namespace's default ServiceAccount does not
/// exist yet (the real ServiceAccount admission refuses Pods until the controller creates it).
pub async fn pod_object(client: &kube::Client, namespace: &str, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "ghcr.io/sigx/counter-app:0.1.0"}]}
    }))
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match pods.create(&PostParams::default(), &pod).await {
            Ok(p) => return p.uid().unwrap(),
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("pod {name} not created yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create pod {name}: {e}"),
        }
    }
}

/// Starts the host of `spec` against the API server of `kubeconfig`; ready on return.
pub fn start_kube_host(scratch: &Scratch, kubeconfig: &Path, spec: KubeHostSpec<'_>) -> KubeHost {
    let name = spec.pod;
    let socket = scratch.path(&format!("{name}.sock"));
    let health: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let bind = if spec.health_on_any {
        format!("0.0.0.0:{}", health.port())
    } else {
        health.to_string()
    };
    let mesh = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(bin("sigx-sidecar"));
    cmd.args(["--socket", socket.to_str().unwrap()])
        .args(["--health-addr", &bind])
        .args(["--mesh-addr", &mesh, "--advertise", &mesh])
        .args([
            "--beat-ms",
            &spec.beat_ms.to_string(),
            "--ttl-ms",
            &spec.ttl_ms.to_string(),
        ])
        .env("SIGX_MEMBERSHIP", "kubernetes")
        .env("SIGX_INSECURE", "true")
        .env("SIGX_CLUSTER", "demo")
        .env("SIGX_ROLE", "engine")
        .env("POD_NAME", name)
        .env("POD_NAMESPACE", spec.namespace)
        .env("POD_UID", spec.uid)
        .env("NODE_NAME", spec.node)
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "info")
        .env_remove("KUBERNETES_SERVICE_HOST");
    if let Some(zone) = spec.zone {
        cmd.env("SIGX_ZONE", zone);
    }
    let sidecar = Proc::spawn(cmd, scratch.path(&format!("{name}-sidecar.log")));
    for _ in 0..400 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let app = counter_app(scratch, &socket, &[]);
    for _ in 0..800 {
        if sigx_e2e::probe::http_status(health, "/readyz") == 200 {
            return KubeHost {
                sidecar,
                _app: app,
                socket,
                health,
            };
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("{name} not ready; its log:\n{}", sidecar.log_text());
}
