//! The walkthrough of `examples/k8s/README.md`, run as written: helm installs the chart, kubectl
//! applies the examples and reads the fleet's status, and the pods run as processes started from
//! their own rendered specs (`sigx_e2e::kubelet`), on the real control plane.
//!
//! What this proves that the other `kube_real_*` suites do not: the chart's operator runs with
//! the chart's RBAC and its own bound token; the pods the operator renders start from that
//! rendering alone (env references, the secret and token mounts, the socket volume, ports and
//! probes), join by Leases on the real API server, become Ready, and serve calls across roles
//! over the mesh; and the columns a user reads with kubectl say so.
//!
//! Differences from a real cluster, each on the kubelet's side (see its module doc): the pods are
//! processes on one machine with loopback IPs of their own; `kubectl exec` is replaced by
//! [`Kubelet::exec`], which runs the same command with the container's environment, because
//! exec goes through a kubelet's API; the control plane runs no root-CA publisher, so the
//! kubelet writes `kube-root-ca.crt`. The deletion step is left out: the chart installs the
//! CRDs after the controller manager started, and its garbage collector discovers new kinds
//! only every 30 s (`kube_real_operator_lifecycle` tests the cascade).
//!
//! Needs `make controlplane`, `bash scripts/install-tools.sh manifests` (helm and kubectl) and
//! `cargo build --workspace --bins`.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use sigx_e2e::controlplane::{self, ControlPlane};
use sigx_e2e::kubelet::Kubelet;

const NS: &str = "sigx-demo";

/// How long a rollout may take: five sidecars joining by Leases, with the example's 5 s beat,
/// on a loaded 2-core machine.
const ROLLOUT: Duration = Duration::from_secs(180);

struct Cli {
    kubeconfig: PathBuf,
}

impl Cli {
    fn run(&self, tool: PathBuf, args: &[&str]) -> Output {
        Command::new(&tool)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .current_dir(controlplane::repo_root())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", tool.display()))
    }

    /// `kubectl ARGS`, its stdout; the test fails with its stderr when it fails.
    fn kubectl(&self, args: &[&str]) -> String {
        self.ok("kubectl", controlplane::kubectl(), args)
    }

    /// `helm ARGS`, its stdout, likewise.
    fn helm(&self, args: &[&str]) -> String {
        self.ok("helm", controlplane::helm(), args)
    }

    fn ok(&self, name: &str, tool: PathBuf, args: &[&str]) -> String {
        let out = self.run(tool, args);
        assert!(
            out.status.success(),
            "{name} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Polls `probe` every 500 ms until it yields, failing the test after `limit`; the kubelet
/// is checked on every round, so a pod it could not run fails the test by name at once.
async fn within<T>(
    kubelet: &Kubelet,
    what: &str,
    limit: Duration,
    probe: impl Fn() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        kubelet.check();
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The columns of `kubectl get KIND NAME --no-headers` (the CRD's printer columns), without AGE.
fn columns(cli: &Cli, kind: &str, name: &str) -> Vec<String> {
    let line = cli.kubectl(&["-n", NS, "get", kind, name, "--no-headers"]);
    let mut cols: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    cols.pop();
    cols
}

/// Waits until `kubectl get KIND NAME` reads `want` (its columns without AGE).
async fn reads(kubelet: &Kubelet, cli: &Cli, kind: &str, name: &str, want: &[&str]) {
    let what = format!("{kind} {name} to read {want:?}");
    within(kubelet, &what, ROLLOUT, || {
        (columns(cli, kind, name) == want).then_some(())
    })
    .await;
}

/// The names of the cluster's Leases (one per host).
fn leases(cli: &Cli) -> Vec<String> {
    let selector = "actors.sigx.dev/cluster=demo";
    cli.kubectl(&["-n", NS, "get", "leases", "-l", selector, "-o", "name"])
        .lines()
        .map(|l| {
            l.trim_start_matches("lease.coordination.k8s.io/")
                .to_owned()
        })
        .collect()
}

/// The names of the pods matching `selector`.
fn pods(cli: &Cli, selector: &str) -> Vec<String> {
    cli.kubectl(&["-n", NS, "get", "pods", "-l", selector, "-o", "name"])
        .lines()
        .map(|l| l.trim_start_matches("pod/").to_owned())
        .collect()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_walkthrough_runs_as_written() {
    let cp = ControlPlane::start();
    let kubelet = Kubelet::start(&cp).await;
    let cli = Cli {
        kubeconfig: cp.kubeconfig().to_path_buf(),
    };

    // 1. Install the operator and the CRDs.
    cli.helm(&[
        "install",
        "sigx",
        "charts/sigx",
        "--namespace",
        "sigx-system",
        "--create-namespace",
        "--set",
        "image.repository=ghcr.io/sigx/operator",
        "--set",
        "image.tag=0.1.0",
    ]);
    let limit = format!("--timeout={}s", ROLLOUT.as_secs());
    cli.kubectl(&[
        "-n",
        "sigx-system",
        "rollout",
        "status",
        "deploy/sigx-operator",
        &limit,
    ]);
    let crds = cli.kubectl(&[
        "get",
        "crd",
        "actorclusters.actors.sigx.dev",
        "actorroles.actors.sigx.dev",
        "-o",
        "name",
    ]);
    assert_eq!(crds.lines().count(), 2, "{crds}");

    // 2. Create the cluster and the roles.
    cli.kubectl(&["create", "namespace", NS]);
    cli.kubectl(&["-n", NS, "apply", "-f", "examples/k8s/cluster.yaml"]);
    cli.kubectl(&[
        "-n",
        NS,
        "apply",
        "-f",
        "examples/k8s/role-web.yaml",
        "-f",
        "examples/k8s/role-engine.yaml",
    ]);
    let made = within(&kubelet, "the objects the operator makes", ROLLOUT, || {
        let out = cli.kubectl(&[
            "-n",
            NS,
            "get",
            "deploy,pdb,sa,role,rolebinding,secret",
            "-l",
            "actors.sigx.dev/cluster=demo",
            "-o",
            "name",
        ]);
        let want = [
            "deployment.apps/web",
            "deployment.apps/engine",
            "poddisruptionbudget.policy/web",
            "poddisruptionbudget.policy/engine",
            "serviceaccount/demo-sigx",
            "role.rbac.authorization.k8s.io/demo-sigx-leases",
            "rolebinding.rbac.authorization.k8s.io/demo-sigx-leases",
            "secret/demo-sigx-secret",
        ];
        want.iter()
            .all(|w| out.lines().any(|l| l == *w))
            .then_some(out)
    })
    .await;
    eprintln!("{made}");
    for deploy in ["deploy/engine", "deploy/web"] {
        cli.kubectl(&["-n", NS, "rollout", "status", deploy, &limit]);
    }
    assert_eq!(pods(&cli, "actors.sigx.dev/type.Counter=true").len(), 3);

    // An invalid spec is refused by the API server, naming the rule.
    let refused = cli.run(
        controlplane::kubectl(),
        &[
            "-n",
            NS,
            "patch",
            "actorcluster",
            "demo",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"membership":{"ttlSeconds":10}}}"#,
        ],
    );
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && why.contains("ttlSeconds"),
        "{why}"
    );

    // 3. Watch the fleet: 5 hosts on 2 nodes, all active, none fenced.
    let five = ["demo", "5", "2", "5", "0", "True"];
    reads(&kubelet, &cli, "actorclusters", "demo", &five).await;
    let wide = cli.kubectl(&["-n", NS, "get", "actorclusters", "-o", "wide"]);
    assert!(wide.contains("5 host(s) / 2 node(s)"), "{wide}");
    reads(
        &kubelet,
        &cli,
        "actorroles",
        "engine",
        &["engine", "demo", "3", "3", "3", "True"],
    )
    .await;
    let hosts = leases(&cli);
    assert_eq!(hosts.len(), 5, "one Lease per host: {hosts:?}");

    // 4. Call an actor through a pod's sidecar; from a web pod over the mesh.
    let engine = pods(&cli, "actors.sigx.dev/role=engine");
    let web = pods(&cli, "actors.sigx.dev/role=web");
    let call = |pod: &str, args: &[&str]| {
        let argv: Vec<&str> = ["sigx", "call"].iter().chain(args).copied().collect();
        stdout(&kubelet.exec(NS, pod, "sigx-sidecar", &argv))
    };
    assert_eq!(call(&engine[0], &["Counter/a", "increment"]), "1");
    let info: serde_json::Value =
        serde_json::from_str(&call(&engine[0], &["Counter/a", "info"])).unwrap();
    assert_eq!(info["value"], 1, "{info}");
    let host = info["host_id"].as_str().unwrap().to_owned();
    assert!(
        engine.iter().any(|p| host.starts_with(p.as_str())),
        "Counter/a is active on an engine pod: {host} of {engine:?}"
    );
    assert_eq!(call(&web[0], &["Counter/a", "increment"]), "2");
    let echo: String = serde_json::from_str(&call(&web[0], &["Echo/x", "whereami"])).unwrap();
    assert!(
        web.iter().any(|p| echo.starts_with(p.as_str())),
        "Echo runs on a web pod only: {echo} of {web:?}"
    );
    let status = stdout(&kubelet.exec(NS, &engine[0], "sigx-sidecar", &["sigx", "status"]));
    assert!(status.contains(&engine[0]), "{status}");

    // 5. Scale through the scale subresource: the fleet grows to 6 hosts.
    cli.kubectl(&["-n", NS, "scale", "actorrole", "engine", "--replicas=4"]);
    reads(
        &kubelet,
        &cli,
        "actorclusters",
        "demo",
        &["demo", "6", "2", "6", "0", "True"],
    )
    .await;
    reads(
        &kubelet,
        &cli,
        "actorroles",
        "engine",
        &["engine", "demo", "4", "4", "4", "True"],
    )
    .await;
    // Counter/a kept its activation (and its count) through the scale-up.
    assert_eq!(call(&web[1], &["Counter/a", "increment"]), "3");

    // Back to 3: the pod the ReplicaSet removes stops as "How a pod stops" says. The app's
    // preStop hook drains its sidecar with the role's token (200), then the app and the
    // sidecar exit on SIGTERM by themselves within the grace period; the host's Lease goes
    // with it, and nobody fences.
    cli.kubectl(&["-n", NS, "scale", "actorrole", "engine", "--replicas=3"]);
    let stopped = within(&kubelet, "an engine pod to stop", ROLLOUT, || {
        kubelet.stopped().into_iter().find(|s| s.namespace == NS)
    })
    .await;
    assert_eq!(stopped.pre_stop, [("app".to_owned(), 200)], "{stopped:?}");
    assert_eq!(
        stopped.exits,
        [
            ("app".to_owned(), Some(0)),
            ("sigx-sidecar".to_owned(), Some(0))
        ],
        "{stopped:?}"
    );
    reads(&kubelet, &cli, "actorclusters", "demo", &five).await;
    let hosts = leases(&cli);
    assert_eq!(hosts.len(), 5, "one Lease per host: {hosts:?}");
    assert!(
        !hosts.iter().any(|h| h.starts_with(&stopped.name)),
        "{} withdrew its Lease: {hosts:?}",
        stopped.name
    );
    // Counter/a answers from wherever it lives now (the example keeps no state, so a move
    // would restart its count; it is called, not counted).
    call(&web[0], &["Counter/a", "info"]);
    kubelet.check();
}
