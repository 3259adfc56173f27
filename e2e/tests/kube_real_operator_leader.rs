//! Leader election of two real `sigx-operator` processes on a real Lease
//! (`sigx_e2e::controlplane`): one holds the Lease and reconciles, the other stays idle; kill -9
//! of the leader hands over within the Lease duration, and the new leader reconciles an
//! ActorCluster created after the kill. The Events on the ActorClusters (events.k8s.io/v1, read
//! back through the events API) name the replica that reconciled each one.
//!
//! `operator_leader.rs` runs the same scenario in process against the API double; this one
//! runs the binaries, whose leader election is kube's Lease lock against the real server's
//! optimistic concurrency.
//!
//! Needs `make controlplane` and the workspace binaries (`make test` builds both).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use sigx_crds::ActorCluster;
use sigx_e2e::controlplane::{self, ControlPlane};
use tokio::time::Instant;

const NS: &str = "apps";
const LEASE_SECONDS: u64 = 3;

/// One operator replica, killed on drop; its log is printed when the test fails.
struct Replica {
    name: &'static str,
    child: Child,
    metrics: SocketAddr,
    log: std::path::PathBuf,
}

impl Replica {
    fn spawn(cp: &ControlPlane, name: &'static str) -> Replica {
        let bin = sigx_e2e::chaos::bin_dir().join("sigx-operator");
        assert!(
            bin.is_file(),
            "{} is missing: `cargo build --workspace --bins` first (make test does)",
            bin.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let metrics: SocketAddr = ([127, 0, 0, 1], port).into();
        let log = cp.dir().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .env("KUBECONFIG", cp.kubeconfig_for(NS))
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", NS)
            .env("SIGX_WATCH_NAMESPACE", NS)
            .env("SIGX_LEADER_LEASE_SECONDS", LEASE_SECONDS.to_string())
            .env("SIGX_LEADER_GRACE_SECONDS", "1")
            .env("SIGX_METRICS_ADDR", metrics.to_string())
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn sigx-operator");
        Replica {
            name,
            child,
            metrics,
            log,
        }
    }

    /// `sigx_operator_<name>` from the replica's /metrics (`None` while it does not answer).
    fn metric(&self, series: &str) -> Option<f64> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.metrics).ok()?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    fn reconciles(&self) -> f64 {
        self.metric("sigx_operator_reconciles_total{kind=\"ActorCluster\"}")
            .unwrap_or(0.0)
    }

    fn leading(&self) -> bool {
        self.metric("sigx_operator_leader ") == Some(1.0)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            sigx_e2e::real_operator::print_log_tail(self.name, &self.log, 30);
        }
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

/// Waits up to `within` until `probe` holds; how long it took.
async fn within(what: &str, within: Duration, mut probe: impl AsyncFnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !probe().await {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    t0.elapsed()
}

async fn has_status(api: &Api<ActorCluster>, name: &str) -> bool {
    api.get(name).await.is_ok_and(|c| c.status.is_some())
}

async fn holder(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), NS)
        .get_opt("sigx-operator")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// The reporting instances of the Events about ActorCluster `name`, read through the events
/// API (events.k8s.io/v1, which the operator's recorder writes).
async fn reporters(client: &kube::Client, name: &str) -> Vec<(String, String)> {
    let lp = ListParams::default().fields(&format!(
        "regarding.kind=ActorCluster,regarding.name={name}"
    ));
    Api::<Event>::namespaced(client.clone(), NS)
        .list(&lp)
        .await
        .expect("list Events")
        .items
        .into_iter()
        .map(|e| {
            (
                e.reporting_instance.unwrap_or_default(),
                e.reason.unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_real_operators_one_leads_and_a_killed_leader_hands_over_within_the_lease() {
    let cp = ControlPlane::start_with_crds();
    let client = cp.client(NS).await;
    controlplane::create_namespace(&client, NS).await;
    let mut replicas = [Replica::spawn(&cp, "op-a"), Replica::spawn(&cp, "op-b")];
    let clusters: Api<ActorCluster> = Api::namespaced(client.clone(), NS);
    clusters
        .create(&PostParams::default(), &cluster("first"))
        .await
        .expect("create ActorCluster first");
    within(
        "a replica reconciles first",
        Duration::from_secs(30),
        async || has_status(&clusters, "first").await,
    )
    .await;
    // Both run side by side a while longer: the standby must stay idle throughout.
    tokio::time::sleep(Duration::from_millis(LEASE_SECONDS * 1000)).await;

    let lead = holder(&client)
        .await
        .expect("the leader Lease names a holder");
    let (leader, standby) = match replicas.iter().position(|r| r.name == lead) {
        Some(0) => (0, 1),
        Some(1) => (1, 0),
        _ => panic!("the Lease names {lead:?}, neither replica"),
    };
    let (l, s) = (&replicas[leader], &replicas[standby]);
    assert!(
        l.reconciles() > 0.0,
        "{} leads but never reconciled",
        l.name
    );
    assert_eq!(s.reconciles(), 0.0, "{} reconciled on standby", s.name);
    assert!(
        l.leading() && !s.leading(),
        "the leader gauges disagree with the Lease"
    );
    let first_events = reporters(&client, "first").await;
    assert!(!first_events.is_empty(), "no Event on ActorCluster first");
    assert!(
        first_events.iter().all(|(who, _)| who == l.name),
        "Events on first not all from the leader {}: {first_events:?}",
        l.name
    );

    // kill -9: the Lease is not released; the standby takes it once it has not been renewed
    // for its duration, then reconciles what was created meanwhile.
    let standby_name = replicas[standby].name;
    replicas[leader].child.kill().expect("kill -9 the leader");
    let _ = replicas[leader].child.wait();
    let killed = Instant::now();
    clusters
        .create(&PostParams::default(), &cluster("second"))
        .await
        .expect("create ActorCluster second");
    let bound = Duration::from_secs(LEASE_SECONDS + 3);
    let took_lease = within("the standby takes the Lease", bound, async || {
        holder(&client).await.as_deref() == Some(standby_name)
    })
    .await;
    within("the new leader reconciles second", bound, async || {
        has_status(&clusters, "second").await
    })
    .await;
    let reconciled = killed.elapsed();
    eprintln!(
        "kill -9 of {lead} → {standby_name} held the Lease after {took_lease:?} and reconciled \
         second after {reconciled:?} (Lease {LEASE_SECONDS} s)"
    );
    // Not sooner than the Lease allows: the leader may have renewed just before its death.
    assert!(
        took_lease >= Duration::from_secs(LEASE_SECONDS) - Duration::from_secs(2),
        "took the Lease after {took_lease:?}: before it could have expired"
    );
    assert!(replicas[standby].leading(), "the new leader's gauge");
    let second_events = within("Events on second", bound, async || {
        !reporters(&client, "second").await.is_empty()
    })
    .await;
    let second = reporters(&client, "second").await;
    eprintln!("Events on second after {second_events:?}: {second:?}");
    assert!(
        second.iter().all(|(who, _)| who == standby_name),
        "Events on second not all from the new leader {standby_name}: {second:?}"
    );
}
