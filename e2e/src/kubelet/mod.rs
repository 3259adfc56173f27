//! The node side of a Kubernetes cluster for the test control plane ([`crate::controlplane`]),
//! which has an API server and controllers but no scheduler and no kubelet: pods the
//! Deployment controller creates are bound here to two fake Nodes and run as local processes
//! from their own rendered specs, the way a kubelet would run them.
//!
//! Why: the walkthrough (`examples/k8s/README.md`) is what a user runs. With this, a test can
//! run it as written — helm installs the chart, the operator runs as the chart's pod with the
//! chart's RBAC, kubectl applies the examples, and the pods the operator renders start as real
//! sidecar and app processes with what their spec gives them and nothing else. A field the
//! operator or the chart renders wrong (a path, an env reference, a probe, a token mount)
//! fails the test instead of being restated by hand in the test.
//!
//! What it does, per pod, as the kubelet does:
//! - binds it round-robin to `node-a` (zone `zone-a`) and `node-b` (zone `zone-b`), through the
//!   `binding` subresource, as the scheduler does;
//! - gives it an IP of its own on the loopback network (`127.77.0.N`) and rewrites a listen
//!   address `0.0.0.0:P` to `IP:P`: the pod's network namespace, on one machine;
//! - materialises its volumes (emptyDir, secret, configMap, projected ServiceAccount token
//!   bound to the pod, configMap and downward API) in a directory of its own, and rewrites
//!   the mount paths in env values and args to them;
//! - resolves env as the kubelet does (`$(VAR)`, fieldRef, secretKeyRef, configMapKeyRef);
//! - gives a container that mounts the ServiceAccount token directory a kubeconfig built from
//!   that mount (server, ca.crt, tokenFile): the in-cluster configuration, whose path kube-rs
//!   does not let a test move;
//! - starts native sidecars (init containers with `restartPolicy: Always`) first, each after
//!   the one before passed its startup probe, then the containers;
//! - reports readiness from the readiness probes, with the pod IP, in the pod's status;
//! - on deletion runs the app containers' `preStop` httpGet hooks, SIGTERMs the containers, then
//!   the sidecars (each within the grace period), and removes the pod.
//!
//! Images map to the workspace's binaries ([`crate::chaos::bin_dir`]), with the entrypoints of
//! `scripts/build-images.sh`. Anything the emulation does not support (another image, a volume
//! kind, an env source) fails the test by name: nothing is silently skipped.
//!
//! The control plane runs no root-CA publisher, so the `kube-root-ca.crt` ConfigMap every pod's
//! token mount reads is written here into each namespace before its first pod starts.
//! `kubectl exec` goes through a kubelet's own API, which this one does not serve:
//! [`Kubelet::exec`] runs a command with a container's resolved environment instead.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::controlplane::ControlPlane;

mod container;
mod stop;
mod volumes;

use container::{probe_ok, running_probe, start_container};
use stop::stop_pod;
use volumes::{materialise_volumes, publish_root_ca};

/// The fake nodes pods are bound to, with their zones.
pub const NODES: [(&str, &str); 2] = [("node-a", "zone-a"), ("node-b", "zone-b")];

/// How often the kubelet looks at the pods.
const SYNC: Duration = Duration::from_millis(300);

/// Where a container that mounts it finds its ServiceAccount credentials.
const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The scheduler and kubelet of two fake nodes, running until dropped; dropping it kills every
/// process it started.
pub struct Kubelet {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

struct Shared {
    client: kube::Client,
    server: String,
    ca_pem: String,
    dir: tempfile::TempDir,
    pods: Mutex<HashMap<String, RunningPod>>,
    /// Pods being started or stopped (by uid): the sync loop leaves them alone.
    busy: Mutex<HashSet<String>>,
    /// Pods bound so far: the round-robin's position.
    bound: AtomicU32,
    /// Pods started so far: each gets the next IP and directory.
    started: AtomicU32,
    failure: Mutex<Option<String>>,
    stopped: Mutex<Vec<Stopped>>,
}

struct RunningPod {
    namespace: String,
    name: String,
    ip: String,
    started: Time,
    /// Sidecars first, in start order; then the containers.
    containers: Vec<RunningContainer>,
    /// The readiness last written to the pod's status.
    reported: Option<bool>,
}

struct RunningContainer {
    name: String,
    image: String,
    sidecar: bool,
    child: Child,
    env: Vec<(String, String)>,
    readiness: Option<HttpGet>,
    pre_stop: Option<HttpGet>,
    log: PathBuf,
}

/// How a deleted pod stopped: what its preStop hooks answered and how each container ended.
#[derive(Clone, Debug)]
pub struct Stopped {
    pub namespace: String,
    pub name: String,
    /// Each app container's preStop httpGet status (0: nothing answered in the grace period).
    pub pre_stop: Vec<(String, u16)>,
    /// Each container's exit code after SIGTERM, in stop order (`None`: it had to be killed
    /// at the end of the grace period, or died of a signal).
    pub exits: Vec<(String, Option<i32>)>,
}

/// An httpGet probe or hook, resolved to an address.
#[derive(Clone, Debug)]
struct HttpGet {
    addr: SocketAddr,
    path: String,
    headers: Vec<(String, String)>,
}

impl Kubelet {
    /// Creates the two Nodes and starts binding and running pods of every namespace.
    pub async fn start(cp: &ControlPlane) -> Kubelet {
        let client = cp.client("default").await;
        let nodes: Api<Node> = Api::all(client.clone());
        for (name, zone) in NODES {
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
            }))
            .expect("a Node");
            nodes
                .create(&PostParams::default(), &node)
                .await
                .unwrap_or_else(|e| panic!("create node {name}: {e}"));
        }
        let shared = Arc::new(Shared {
            client,
            server: cp.server_url(),
            ca_pem: admin_ca(cp.kubeconfig()),
            dir: tempfile::Builder::new()
                .prefix("kl")
                .tempdir_in("/tmp")
                .expect("a kubelet dir"),
            pods: Mutex::new(HashMap::new()),
            busy: Mutex::new(HashSet::new()),
            bound: AtomicU32::new(0),
            started: AtomicU32::new(0),
            failure: Mutex::new(None),
            stopped: Mutex::new(Vec::new()),
        });
        let task = tokio::spawn(sync_loop(shared.clone()));
        Kubelet { shared, task }
    }

    /// Panics with what went wrong if the kubelet failed to run a pod (an unsupported field, a
    /// process that would not start, a probe that never passed).
    pub fn check(&self) {
        if let Some(failure) = self.shared.failure.lock().unwrap().clone() {
            panic!("the test kubelet failed: {failure}");
        }
        assert!(!self.task.is_finished(), "the test kubelet's loop ended");
    }

    /// Runs `argv` (its first word a binary of the workspace, like `sigx`) with the resolved
    /// environment of `container` of pod `namespace/pod`: what `kubectl exec` runs in it.
    pub fn exec(&self, namespace: &str, pod: &str, container: &str, argv: &[&str]) -> Output {
        self.check();
        let env = {
            let pods = self.shared.pods.lock().unwrap();
            let p = pods
                .values()
                .find(|p| p.namespace == namespace && p.name == pod)
                .unwrap_or_else(|| panic!("pod {namespace}/{pod} is not running here"));
            let c = p
                .containers
                .iter()
                .find(|c| c.name == container)
                .unwrap_or_else(|| panic!("pod {namespace}/{pod} has no container {container}"));
            c.env.clone()
        };
        let bin = crate::chaos::bin_dir().join(argv[0]);
        Command::new(&bin)
            .args(&argv[1..])
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("exec {}: {e}", bin.display()))
    }

    /// The pods stopped so far, in the order they finished stopping.
    pub fn stopped(&self) -> Vec<Stopped> {
        self.shared.stopped.lock().unwrap().clone()
    }

    /// The log of `container` of pod `namespace/pod` so far.
    pub fn log(&self, namespace: &str, pod: &str, container: &str) -> String {
        let pods = self.shared.pods.lock().unwrap();
        pods.values()
            .filter(|p| p.namespace == namespace && p.name == pod)
            .flat_map(|p| &p.containers)
            .find(|c| c.name == container)
            .map(|c| std::fs::read_to_string(&c.log).unwrap_or_default())
            .unwrap_or_default()
    }

    /// Prints the tail of every container's log (for a failing test's output).
    pub fn print_logs(&self, lines: usize) {
        let pods = self.shared.pods.lock().unwrap();
        for p in pods.values() {
            for c in &p.containers {
                let name = format!("{}/{} {}", p.namespace, p.name, c.name);
                crate::real_operator::print_log_tail(&name, &c.log, lines);
            }
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
        let mut pods = self.shared.pods.lock().unwrap();
        if std::thread::panicking() {
            for p in pods.values() {
                for c in &p.containers {
                    let name = format!("{}/{} {}", p.namespace, p.name, c.name);
                    crate::real_operator::print_log_tail(&name, &c.log, 30);
                }
            }
        }
        for p in pods.values_mut() {
            for c in &mut p.containers {
                let _ = c.child.kill();
                let _ = c.child.wait();
            }
        }
    }
}

/// The CA certificate (PEM) of the admin kubeconfig: what `kube-root-ca.crt` publishes.
fn admin_ca(kubeconfig: &Path) -> String {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("read the admin kubeconfig");
    let cluster = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .expect("a cluster in the admin kubeconfig");
    if let Some(data) = cluster.certificate_authority_data {
        // ByteString is base64 in JSON, as in a kubeconfig.
        let pem: k8s_openapi::ByteString =
            serde_json::from_value(json!(data)).expect("base64 CA data");
        return String::from_utf8(pem.0).expect("a PEM CA");
    }
    let path = cluster
        .certificate_authority
        .expect("a CA in the admin kubeconfig");
    std::fs::read_to_string(path).expect("read the CA file")
}

async fn sync_loop(shared: Arc<Shared>) {
    loop {
        if let Err(e) = sync(&shared).await {
            // The API server answers every request of a healthy control plane; a failure here
            // is the test's, so it is reported, not retried forever.
            let mut failure = shared.failure.lock().unwrap();
            failure.get_or_insert(e);
        }
        tokio::time::sleep(SYNC).await;
    }
}

fn fail(shared: &Shared, what: String) {
    let mut failure = shared.failure.lock().unwrap();
    failure.get_or_insert(what);
}

async fn sync(shared: &Arc<Shared>) -> Result<(), String> {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("list pods: {e}"))?;
    let mut seen = HashSet::new();
    for pod in list {
        let uid = pod.uid().unwrap_or_default();
        seen.insert(uid.clone());
        if shared.busy.lock().unwrap().contains(&uid) {
            continue;
        }
        let running = shared.pods.lock().unwrap().contains_key(&uid);
        let spec = pod.spec.clone().unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            shared.busy.lock().unwrap().insert(uid.clone());
            let shared = shared.clone();
            tokio::spawn(async move {
                stop_pod(&shared, &pod, running).await;
                shared.busy.lock().unwrap().remove(&uid);
            });
            continue;
        }
        if spec.node_name.is_none() {
            bind(shared, &pod).await?;
            continue;
        }
        if !running {
            shared.busy.lock().unwrap().insert(uid.clone());
            let shared = shared.clone();
            tokio::spawn(async move {
                if let Err(e) = start_pod(&shared, &pod).await {
                    fail(
                        &shared,
                        format!("{}/{}: {e}", pod.namespace().unwrap(), pod.name_any()),
                    );
                }
                shared.busy.lock().unwrap().remove(&uid);
            });
        }
    }
    // Pods gone from the API (force-deleted by someone else): their processes go too.
    let gone: Vec<RunningPod> = {
        let mut pods = shared.pods.lock().unwrap();
        let uids: Vec<String> = pods
            .keys()
            .filter(|u| !seen.contains(*u))
            .cloned()
            .collect();
        uids.iter().filter_map(|u| pods.remove(u)).collect()
    };
    for mut p in gone {
        for c in &mut p.containers {
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }
    report_status(shared).await
}

/// Binds `pod` to the next node, round-robin, as the scheduler would.
async fn bind(shared: &Shared, pod: &Pod) -> Result<(), String> {
    let n = shared.bound.fetch_add(1, Ordering::Relaxed) as usize;
    let (node, _) = NODES[n % NODES.len()];
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let binding: Binding = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }))
    .expect("a Binding");
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
    match api
        .create_subresource::<Binding, serde_json::Value>(
            "binding",
            &name,
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => Ok(()),
        // Deleted or bound meanwhile: the next sync sees what it is now.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(format!("bind {ns}/{name} to {node}: {e}")),
    }
}

async fn start_pod(shared: &Arc<Shared>, pod: &Pod) -> Result<(), String> {
    let ns = pod.namespace().unwrap_or_default();
    let uid = pod.uid().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let n = shared.started.fetch_add(1, Ordering::Relaxed);
    let ip = format!("127.77.{}.{}", 1 + n / 200, 10 + n % 200);
    let dir = shared.dir.path().join(format!("p{n}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("pod dir: {e}"))?;
    publish_root_ca(shared, &ns).await?;
    let volumes = materialise_volumes(shared, pod, &ip, &dir).await?;
    shared.pods.lock().unwrap().insert(
        uid.clone(),
        RunningPod {
            namespace: ns.clone(),
            name: pod.name_any(),
            ip: ip.clone(),
            started: Time(k8s_openapi::jiff::Timestamp::now()),
            containers: Vec::new(),
            reported: None,
        },
    );
    let mut order: Vec<(Container, bool)> = Vec::new();
    for c in spec.init_containers.clone().unwrap_or_default() {
        if c.restart_policy.as_deref() != Some("Always") {
            return Err(format!(
                "init container {} runs to completion, which the test kubelet does not support",
                c.name
            ));
        }
        order.push((c, true));
    }
    order.extend(spec.containers.iter().cloned().map(|c| (c, false)));
    for (c, sidecar) in order {
        let running = start_container(shared, pod, &c, sidecar, &ip, &dir, &volumes).await?;
        let startup = running_probe(&c, c.startup_probe.as_ref(), &ip)?;
        shared
            .pods
            .lock()
            .unwrap()
            .get_mut(&uid)
            .ok_or("the pod went away while it started")?
            .containers
            .push(running);
        if let (Some(get), Some(probe)) = (startup, c.startup_probe.as_ref()) {
            let period = Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64);
            let tries = probe.failure_threshold.unwrap_or(3).max(1);
            let mut passed = false;
            for _ in 0..tries {
                if probe_ok(&get).await {
                    passed = true;
                    break;
                }
                tokio::time::sleep(period.min(Duration::from_secs(1))).await;
            }
            if !passed {
                return Err(format!("container {}'s startup probe never passed", c.name));
            }
        }
    }
    Ok(())
}

/// A container as the readiness pass sees it: whether its process runs, and its probe.
type ContainerCheck = (bool, Option<HttpGet>);

/// Writes each running pod's readiness into its status when it changed.
async fn report_status(shared: &Arc<Shared>) -> Result<(), String> {
    // Probe outside the lock: a probe may wait for a slow answer.
    let busy = shared.busy.lock().unwrap().clone();
    let targets: Vec<(String, Vec<ContainerCheck>)> = {
        let mut pods = shared.pods.lock().unwrap();
        pods.iter_mut()
            .filter(|(uid, _)| !busy.contains(*uid))
            .map(|(uid, p)| {
                let cs = p
                    .containers
                    .iter_mut()
                    .map(|c| (matches!(c.child.try_wait(), Ok(None)), c.readiness.clone()))
                    .collect();
                (uid.clone(), cs)
            })
            .collect()
    };
    for (uid, containers) in targets {
        let mut ready = Vec::new();
        for (alive, probe) in containers {
            ready.push(alive && probe_ok_or_none(probe).await);
        }
        let patch = {
            let mut pods = shared.pods.lock().unwrap();
            let Some(p) = pods.get_mut(&uid) else {
                continue;
            };
            let all = ready.iter().all(|r| *r) && ready.len() == p.containers.len();
            if p.reported == Some(all) {
                continue;
            }
            p.reported = Some(all);
            (
                p.namespace.clone(),
                p.name.clone(),
                status_patch(p, &ready, all),
            )
        };
        let (ns, name, body) = patch;
        Api::<Pod>::namespaced(shared.client.clone(), &ns)
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(|e| format!("status of {ns}/{name}: {e}"))?;
    }
    Ok(())
}

async fn probe_ok_or_none(probe: Option<HttpGet>) -> bool {
    match probe {
        None => true,
        Some(get) => probe_ok(&get).await,
    }
}

fn status_patch(p: &RunningPod, ready: &[bool], all: bool) -> serde_json::Value {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let flag = |b: bool| if b { "True" } else { "False" };
    let condition = |type_: &str, status: bool| json!({"type": type_, "status": flag(status), "lastTransitionTime": now});
    let status_of = |c: &RunningContainer, ready: bool| {
        json!({"name": c.name, "image": c.image, "imageID": "", "ready": ready, "started": true,
            "restartCount": 0, "state": {"running": {"startedAt": p.started}}})
    };
    let (mut init, mut main) = (Vec::new(), Vec::new());
    for (c, r) in p.containers.iter().zip(ready) {
        if c.sidecar {
            init.push(status_of(c, *r));
        } else {
            main.push(status_of(c, *r));
        }
    }
    json!({"status": {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": p.ip,
        "podIPs": [{"ip": p.ip}],
        "startTime": p.started,
        "conditions": [
            condition("PodScheduled", true),
            condition("Initialized", true),
            condition("ContainersReady", all),
            condition("Ready", all),
        ],
        "initContainerStatuses": init,
        "containerStatuses": main,
    }})
}
