//! The real `sigx-sidecar` in Kubernetes mode against the Kubernetes API double: two pods whose
//! identity and node come from the downward-API environment the operator sets, membership on one
//! Lease per host (labels, descriptor annotation, holder, owner reference to the Pod), calls
//! across the two, and a graceful stop that withdraws its Lease.
//!
//! Needs the binaries built (`make test` builds them first).

mod sdk_support;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use sdk_support::{Proc, Scratch, bin, counter_app, free_port};
use sigx_e2e::kube_double::KubeDouble;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const NS: &str = "apps";

fn kubeconfig(dir: &std::path::Path, url: &str) -> PathBuf {
    sigx_e2e::kube_double::write_kubeconfig(dir, url, NS)
}

struct Pod {
    sidecar: Proc,
    _app: Proc,
    socket: PathBuf,
    health: SocketAddr,
}

fn health_status(addr: SocketAddr, path: &str) -> u16 {
    sigx_e2e::probe::http_status(addr, path)
}

/// A pod as the operator renders it: sidecar env from the downward API, then the app.
fn pod(scratch: &Scratch, config: &Path, name: &str, node: &str) -> Pod {
    let socket = scratch.path(&format!("{name}.sock"));
    let health: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mesh = format!("127.0.0.1:{}", free_port());
    let mut cmd = Command::new(bin("sigx-sidecar"));
    cmd.args(["--socket", socket.to_str().unwrap()])
        .args([
            "--health-addr",
            &health.to_string(),
            "--mesh-addr",
            &mesh,
            "--advertise",
            &mesh,
        ])
        .args(["--beat-ms", "500", "--ttl-ms", "3000"])
        .env("SIGX_MEMBERSHIP", "kubernetes")
        .env("SIGX_INSECURE", "true")
        .env("SIGX_CLUSTER", "demo")
        .env("SIGX_ROLE", "engine")
        .env("POD_NAME", name)
        .env("POD_NAMESPACE", NS)
        .env("POD_UID", format!("uid-{name}"))
        .env("NODE_NAME", node)
        .env("KUBECONFIG", config)
        .env_remove("KUBERNETES_SERVICE_HOST");
    let sidecar = Proc::spawn(cmd, scratch.path(&format!("{name}-sidecar.log")));
    for _ in 0..400 {
        if socket.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let app = counter_app(scratch, &socket, &[]);
    for _ in 0..400 {
        if health_status(health, "/readyz") == 200 {
            return Pod {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_in_kubernetes_mode_join_on_leases_serve_calls_and_withdraw_on_stop() {
    let double = KubeDouble::start().await;
    let scratch = Scratch::new("sidecar-k8s");
    let config = kubeconfig(&scratch.0, &double.url());
    let a = pod(&scratch, &config, "engine-a", "node-1");
    let mut b = pod(&scratch, &config, "engine-b", "node-2");

    let leases: Api<Lease> = Api::namespaced(double.client(), NS);
    let list = leases
        .list(&ListParams::default().labels("actors.sigx.dev/cluster=demo"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 2, "one Lease per host");
    for lease in &list.items {
        let meta = &lease.metadata;
        let name = meta.name.clone().unwrap();
        assert!(
            name.starts_with("engine-a-") || name.starts_with("engine-b-"),
            "{name}"
        );
        let labels = meta.labels.clone().unwrap();
        assert_eq!(labels["actors.sigx.dev/role"], "engine");
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "Pod");
        assert!(owner.uid.starts_with("uid-engine-"));
        let spec = lease.spec.as_ref().unwrap();
        // The holder is the host id plus the process's incarnation nonce (one identity, one
        // process).
        let holder = spec.holder_identity.clone().unwrap();
        assert!(
            holder
                .strip_prefix(&format!("{name}/"))
                .is_some_and(|nonce| nonce.len() == 16),
            "{holder}"
        );
        let d: serde_json::Value =
            serde_json::from_str(&meta.annotations.as_ref().unwrap()["actors.sigx.dev/descriptor"])
                .unwrap();
        assert_eq!(d["status"], "active");
        assert!(
            d["meta"]["node"] == "node-1" || d["meta"]["node"] == "node-2",
            "{d}"
        );
    }

    // Calls from both pods reach one activation per counter.
    let ca = sigx_sdk::Client::lazy(&a.socket).with_timeout(Duration::from_secs(10));
    let cb = sigx_sdk::Client::lazy(&b.socket).with_timeout(Duration::from_secs(10));
    for k in 0..10 {
        let key = format!("k{k}");
        let x: i64 = ca
            .call_json("Counter", &key, "increment", &1)
            .await
            .unwrap();
        let y: i64 = cb
            .call_json("Counter", &key, "increment", &1)
            .await
            .unwrap();
        assert_eq!((x, y), (1, 2), "{key}: one activation, seen from both pods");
    }
    let status = ca.status().await.unwrap();
    assert_eq!(status.view.unwrap().hosts.len(), 2);

    // A graceful stop withdraws the Lease.
    b.sidecar.signal("TERM");
    let _ = b.sidecar.terminate(Duration::from_secs(20));
    let mut gone = false;
    for _ in 0..100 {
        let list = leases
            .list(&ListParams::default().labels("actors.sigx.dev/cluster=demo"))
            .await
            .unwrap();
        if list.items.len() == 1 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the stopped host's Lease was withdrawn");
    assert_eq!(health_status(a.health, "/readyz"), 200);
    // Its actors are served by the survivor.
    let z: i64 = ca
        .call_json("Counter", "k0", "increment", &1)
        .await
        .unwrap();
    assert!(z >= 1);
}
