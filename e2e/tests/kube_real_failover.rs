//! A 3-host cluster on real Leases (`sigx_e2e::controlplane`) serving a load of increments with
//! the chaos ledger (`sigx_e2e::chaos::ledger`): every call recorded, the final counts read back
//! and judged, the counter-app trace checked for duplicate activations.
//!
//! * kill -9 of one sidecar and its app under load: every actor is callable again within
//!   TTL + 1 s, no call fails, no acknowledged increment is lost, no activation is doubled.
//! * The API server paused (SIGSTOP of the control-plane process, which holds etcd, the API
//!   server and the controller manager) for less than the TTL: no host fences and the load
//!   loses nothing. For more than the TTL: every stateful host fences while the server is still
//!   stopped (none can prove its Lease; by design, `sidecar/src/membership/kubernetes`), its
//!   `/livez` answers 503, and after SIGCONT the harness does what the kubelet does on a failed
//!   liveness probe of the sidecar container (the operator renders `livenessProbe: /livez`):
//!   SIGTERM and a new sidecar process on the same socket, a new incarnation with a new Lease,
//!   while the app process lives on and its SDK reconnects. What the real server showed: the
//!   fenced hosts withdraw their old Leases as soon as it answers again (so the new
//!   incarnations need not wait for their expiry), the counts committed before and during the
//!   outage are all there afterwards, and no old incarnation runs a turn after the resume. A
//!   fenced sidecar exits within a second of SIGTERM (it used to wait out the drain timeout).
//!
//! Actor state lives in one SQLite state file shared by the three hosts (`--state sqlite`): in
//! a cluster it would be PostgreSQL; one machine's file is the same epoch-fenced store.
//!
//! Needs `make controlplane` and the workspace binaries (`make test` builds both).

mod sdk_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use sdk_support::{Proc, Scratch, bin, free_port};
use sigx_e2e::chaos::ledger::{Ledger, Outcome, Report, read_finals, start_load_into};
use sigx_e2e::chaos::trace;
use sigx_e2e::controlplane::{self, ControlPlane};
use sigx_e2e::probe::http_status;
use sigx_sdk::{Client, ErrorKind};
use tokio::time::Instant;

const NS: &str = "apps";
const BEAT_MS: u64 = 500;
/// Long enough that a 2-core machine running the control plane, three sidecars, three apps and
/// the load never starves a renewal past it; short enough for the tests to stay under a minute.
const TTL_MS: u64 = 3000;
const COUNTERS: usize = 40;
const WORKERS: usize = 8;
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn ttl() -> Duration {
    Duration::from_millis(TTL_MS)
}

fn actors() -> Vec<String> {
    (0..COUNTERS).map(|k| format!("Counter/c{k}")).collect()
}

/// One pod: its sidecar (restartable, as the kubelet restarts a container) and its app.
struct Host {
    name: String,
    uid: String,
    sidecar: Proc,
    app: Proc,
    socket: PathBuf,
    health: SocketAddr,
    restarts: u32,
}

/// What every host of the cluster shares.
struct Cluster {
    scratch: Scratch,
    config: PathBuf,
    state: PathBuf,
    trace: PathBuf,
}

impl Cluster {
    fn new(cp: &ControlPlane) -> Cluster {
        let scratch = Scratch::new("kfail");
        Cluster {
            config: cp.kubeconfig_for(NS),
            state: scratch.path("state.db"),
            trace: scratch.path("trace.jsonl"),
            scratch,
        }
    }

    fn sidecar(&self, name: &str, uid: &str, socket: &Path, health: SocketAddr, n: u32) -> Proc {
        let mesh = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(bin("sigx-sidecar"));
        cmd.args(["--socket", socket.to_str().unwrap()])
            .args(["--health-addr", &health.to_string()])
            .args(["--mesh-addr", &mesh, "--advertise", &mesh])
            .args(["--beat-ms", &BEAT_MS.to_string()])
            .args(["--ttl-ms", &TTL_MS.to_string()])
            .args(["--state", "sqlite", "--state-path"])
            .arg(&self.state)
            .env("SIGX_MEMBERSHIP", "kubernetes")
            .env("SIGX_INSECURE", "true")
            .env("SIGX_CLUSTER", "demo")
            .env("SIGX_ROLE", "engine")
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", NS)
            .env("POD_UID", uid)
            .env("NODE_NAME", "node-1")
            .env("KUBECONFIG", &self.config)
            .env("SIGX_LOG", "info")
            .env_remove("KUBERNETES_SERVICE_HOST");
        let log = self.scratch.path(&format!("{name}-sidecar-{n}.log"));
        Proc::spawn(cmd, log)
    }

    async fn host(&self, client: &kube::Client, name: &str) -> Host {
        let uid = pod_object(client, name).await;
        let socket = self.scratch.path(&format!("{name}.sock"));
        let health: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let sidecar = self.sidecar(name, &uid, &socket, health, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "{name}: no socket");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let mut cmd = Command::new(bin("counter-app"));
        cmd.arg("--socket")
            .arg(&socket)
            .env("COUNTER_TRACE_FILE", &self.trace)
            .env("SIGX_LOG", "warn");
        let app = Proc::spawn(cmd, self.scratch.path(&format!("{name}-app.log")));
        let host = Host {
            name: name.to_string(),
            uid,
            sidecar,
            app,
            socket,
            health,
            restarts: 0,
        };
        host.wait_ready().await;
        host
    }

    /// The kubelet's answer to a failed liveness probe of the sidecar container: SIGTERM, and a
    /// new process of the same container on the same socket and ports (a new incarnation). The
    /// app container is not restarted.
    async fn restart_sidecar(&self, h: &mut Host) {
        let t = Instant::now();
        let status = h.sidecar.terminate(Duration::from_secs(10));
        let took = t.elapsed();
        eprintln!(
            "{}: fenced, SIGTERM → exit {status:?} after {took:?}",
            h.name
        );
        // The kubelet waits for the exit (up to the grace period) before it starts the
        // container again: a fenced sidecar that lingered would hold the way back.
        assert!(
            status.is_some() && took < Duration::from_secs(3),
            "a fenced sidecar took {took:?} to exit on SIGTERM ({status:?}); its log:\n{}",
            h.sidecar.log_text()
        );
        h.restarts += 1;
        h.sidecar = self.sidecar(&h.name, &h.uid, &h.socket, h.health, h.restarts);
    }
}

impl Host {
    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_status(self.health, "/readyz") != 200 {
            assert!(
                Instant::now() < deadline,
                "{} not ready within 30 s; its log:\n{}",
                self.name,
                self.sidecar.log_text()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn kill9(&mut self) {
        self.sidecar.signal("KILL");
        self.app.signal("KILL");
        let _ = self.sidecar.child.wait();
        let _ = self.app.child.wait();
    }
}

/// A Pod object for `name` (never scheduled: there is no kubelet), the owner of its Lease.
/// Retries while the namespace's default ServiceAccount does not exist yet.
async fn pod_object(client: &kube::Client, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "ghcr.io/sigx/counter-app:0.1.0"}]}
    }))
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pods.create(&PostParams::default(), &pod).await {
            Ok(p) => return p.uid().unwrap(),
            Err(e) if Instant::now() < deadline => {
                eprintln!("pod {name} not created yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create pod {name}: {e}"),
        }
    }
}

async fn start(cp: &ControlPlane) -> (Cluster, Vec<Host>) {
    let client = cp.client(NS).await;
    controlplane::create_namespace(&client, NS).await;
    let cluster = Cluster::new(cp);
    let mut hosts = Vec::new();
    for name in ["engine-a", "engine-b", "engine-c"] {
        hosts.push(cluster.host(&client, name).await);
    }
    for h in &hosts {
        within(
            "every host sees three",
            Duration::from_secs(10),
            async || view_size(&h.socket).await == 3,
        )
        .await;
    }
    (cluster, hosts)
}

async fn view_size(socket: &Path) -> usize {
    let c = Client::lazy(socket).with_timeout(Duration::from_secs(5));
    c.status()
        .await
        .ok()
        .and_then(|s| s.view)
        .map(|v| v.hosts.len())
        .unwrap_or(0)
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

/// How long after `since` every actor answered a call through `socket`: each probed
/// concurrently, its time taken when its first call succeeds; `None` if one did not within
/// `limit`.
async fn all_callable(socket: &Path, since: Instant, limit: Duration) -> Option<Duration> {
    let c = Client::lazy(socket).with_timeout(Duration::from_secs(3));
    let probes: Vec<_> = (0..COUNTERS)
        .map(|k| {
            let c = c.clone();
            tokio::spawn(async move {
                loop {
                    let r = c
                        .call_json::<(), i64>("Counter", &format!("c{k}"), "get", &())
                        .await;
                    if r.is_ok() {
                        return Some(since.elapsed());
                    }
                    if since.elapsed() > limit {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for p in probes {
        slowest = slowest.max(p.await.unwrap()?);
    }
    Some(slowest)
}

/// Waits (bounded) until the load has recorded `n` successful calls: how fast a loaded 2-core
/// machine runs the load varies tenfold (every increment commits to the shared SQLite file),
/// and a fault injected before the load has run proves nothing.
async fn wait_for_successes(ledger: &Ledger, n: usize) -> usize {
    let ok = || {
        ledger
            .entries()
            .iter()
            .filter(|e| matches!(e.outcome, Outcome::Ok(_)))
            .count()
    };
    let t0 = Instant::now();
    while ok() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the load made only {} successful calls in 20 s (wanted {n})",
            ok()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ok()
}

fn targets(hosts: &[Host]) -> Arc<RwLock<Vec<PathBuf>>> {
    Arc::new(RwLock::new(
        hosts.iter().map(|h| h.socket.clone()).collect(),
    ))
}

async fn judge(scenario: &str, ledger: &Ledger, socket: &Path, trace_file: &Path) -> Report {
    let c = Client::lazy(socket).with_timeout(Duration::from_secs(5));
    let finals: HashMap<String, i64> = read_finals(&c, &actors()).await;
    Report::judge(
        scenario,
        ledger,
        &finals,
        trace::duplicate_activations(trace_file),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_on_real_leases_under_load_loses_nothing_and_actors_return_within_ttl() {
    let cp = ControlPlane::start();
    let (cluster, mut hosts) = start(&cp).await;
    let targets = targets(&hosts);
    let ledger = Arc::new(Ledger::default());
    let load = start_load_into(
        ledger.clone(),
        targets.clone(),
        0..COUNTERS,
        WORKERS,
        CALL_TIMEOUT,
    );
    let before_kill = wait_for_successes(&ledger, 100).await;

    // No new calls through the victim's socket (its app is going away with it), then kill -9.
    targets.write().unwrap().retain(|s| *s != hosts[2].socket);
    hosts[2].kill9();
    let killed_at = Instant::now();
    let back = all_callable(&hosts[0].socket, killed_at, Duration::from_secs(15)).await;
    // The load goes on through the survivors.
    wait_for_successes(&ledger, before_kill + 100).await;
    let ledger = load.stop().await;
    let mut report = judge(
        "kill -9 of one of 3 hosts on real Leases under load",
        &ledger,
        &hosts[0].socket,
        &cluster.trace,
    )
    .await;
    report.notes.push(format!(
        "{before_kill} calls before the kill; every actor callable again {back:?} after it \
         (TTL {TTL_MS} ms)"
    ));
    println!("{}", report.render());

    let back = back.expect("every actor callable again within 15 s of the kill");
    assert!(
        back <= ttl() + Duration::from_secs(1),
        "actors not all callable within TTL + 1 s: {back:?}"
    );
    assert_eq!(report.failed(), 0, "{}", report.render());
    // Only calls in flight on the killed host may end ambiguous, and only as outcome-unknown.
    for kind in report.ambiguous_by_kind.keys() {
        assert_eq!(
            kind,
            &ErrorKind::OutcomeUnknown.to_string(),
            "{}",
            report.render()
        );
    }
    assert!(
        report.duplicate_activations.is_empty(),
        "{}",
        report.render()
    );
    assert!(report.ledger_problems.is_empty(), "{}", report.render());
    // The survivors stayed unfenced.
    for h in &hosts[..2] {
        assert_eq!(http_status(h.health, "/livez"), 200, "{} fenced", h.name);
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the counter-app trace.
fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

async fn lease_names(client: &kube::Client) -> Vec<String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let lp = kube::api::ListParams::default().labels("actors.sigx.dev/cluster=demo");
    let mut names: Vec<String> = Api::<Lease>::namespaced(client.clone(), NS)
        .list(&lp)
        .await
        .expect("list Leases")
        .items
        .iter()
        .map(|l| l.name_any())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_paused_below_the_ttl_fences_nobody_and_past_it_fences_every_host_until_restarted()
 {
    let cp = ControlPlane::start();
    let client = cp.client(NS).await;
    let (cluster, mut hosts) = start(&cp).await;
    let targets = targets(&hosts);
    let ledger = Arc::new(Ledger::default());

    // 1. Paused for a third of the TTL under load: renewals wait for the server and land
    //    before any Lease lapses; the mesh never needed the server.
    let load = start_load_into(
        ledger.clone(),
        targets.clone(),
        0..COUNTERS,
        WORKERS,
        CALL_TIMEOUT,
    );
    wait_for_successes(&ledger, 50).await;
    cp.pause();
    let paused_at = Instant::now();
    tokio::time::sleep(ttl() / 3).await;
    cp.resume();
    let at_resume = ledger.len();
    // Calls succeed after the resume, and past the moment a host that missed its renewals
    // would have fenced.
    wait_for_successes(&ledger, at_resume + 50).await;
    tokio::time::sleep((ttl() + Duration::from_secs(1)).saturating_sub(paused_at.elapsed())).await;
    let ledger = load.stop().await;
    let short = ledger.entries();
    let not_ok: Vec<_> = short
        .iter()
        .filter(|e| !matches!(e.outcome, Outcome::Ok(_)))
        .collect();
    assert!(
        not_ok.is_empty(),
        "calls failed across a short pause: {not_ok:?}"
    );
    for h in &hosts {
        assert_eq!(http_status(h.health, "/livez"), 200, "{} fenced", h.name);
        assert!(
            !h.sidecar.log_text().contains("fenced"),
            "{} fenced on a pause shorter than the TTL:\n{}",
            h.name,
            h.sidecar.log_text()
        );
        assert_eq!(view_size(&h.socket).await, 3, "{} lost a peer", h.name);
    }
    eprintln!(
        "pause of {:?} (TTL {TTL_MS} ms): {} calls, none failed, no fence",
        ttl() / 3,
        short.len()
    );

    // 2. Paused for twice the TTL under load: every host fences while the server is still
    //    stopped, at TTL after its last confirmed renewal started.
    let old_leases = lease_names(&client).await;
    assert_eq!(old_leases.len(), 3, "{old_leases:?}");
    let load = start_load_into(
        ledger.clone(),
        targets.clone(),
        0..COUNTERS,
        WORKERS,
        CALL_TIMEOUT,
    );
    wait_for_successes(&ledger, short.len() + 50).await;
    cp.pause();
    let paused_at = Instant::now();
    // Each host's fence time is when its /livez is first seen 503, all polled together.
    let mut fenced_after: Vec<Option<Duration>> = vec![None; hosts.len()];
    while fenced_after.iter().any(Option::is_none) {
        assert!(
            paused_at.elapsed() < ttl() + Duration::from_millis(1500),
            "not every host fenced within TTL + 1.5 s of the API server stopping: {fenced_after:?}"
        );
        for (h, t) in hosts.iter().zip(&mut fenced_after) {
            if t.is_none() && http_status(h.health, "/livez") == 503 {
                *t = Some(paused_at.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fenced_after: Vec<Duration> = fenced_after.into_iter().flatten().collect();
    eprintln!("API server stopped → hosts fenced after {fenced_after:?} (TTL {TTL_MS} ms)");
    // A host fences TTL after the start of its last confirmed renewal: at most a beat before
    // the pause, or two when the renewal in flight at the pause had itself started late. A host
    // that fenced on the first unanswered request would show up here.
    for t in &fenced_after {
        assert!(
            *t >= ttl() - Duration::from_millis(2 * BEAT_MS),
            "a host fenced after {t:?}: sooner than its Lease could have lapsed"
        );
    }
    let e = Client::lazy(&hosts[0].socket)
        .with_timeout(Duration::from_secs(3))
        .call_json::<_, i64>("Counter", "c1", "increment", &1)
        .await
        .unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::Fenced,
        "a fenced host's app is told so: {e}"
    );
    tokio::time::sleep((ttl() * 2).saturating_sub(paused_at.elapsed())).await;
    let resumed_ns = monotonic_ns();
    cp.resume();
    let resumed_at = Instant::now();

    // 3. Fencing is terminal; the way back is the kubelet restarting the sidecar container on
    //    its failed liveness probe: a new incarnation, a new Lease; the app reconnects.
    for h in &hosts {
        assert_eq!(
            http_status(h.health, "/livez"),
            503,
            "{} unfenced itself",
            h.name
        );
    }
    for h in &mut hosts {
        cluster.restart_sidecar(h).await;
    }
    for h in &hosts {
        h.wait_ready().await;
    }
    let back = all_callable(&hosts[0].socket, resumed_at, Duration::from_secs(30)).await;
    eprintln!("API server resumed → sidecars restarted → every actor callable after {back:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ledger = load.stop().await;
    let report = judge(
        "API server stopped for 2 × TTL under load, hosts restarted",
        &ledger,
        &hosts[0].socket,
        &cluster.trace,
    )
    .await;
    println!("{}", report.render());
    let back = back.expect("every actor callable within 30 s of the resume");
    // The new incarnations wait out the old Leases (withdrawn by the fenced hosts once the
    // server answers, else expired after TTL) before their directory can place the actors.
    assert!(
        back <= ttl() * 2 + Duration::from_secs(5),
        "recovery took {back:?}"
    );
    assert!(
        report.duplicate_activations.is_empty(),
        "{}",
        report.render()
    );
    assert!(report.ledger_problems.is_empty(), "{}", report.render());
    // Calls may fail (fenced, or unreachable while a sidecar restarts: both prove the call
    // never ran) or end ambiguous (in flight through a sidecar that fenced or restarted); the
    // ledger above shows that none of them lost or doubled an increment.
    assert!(
        report
            .failed_by_kind
            .keys()
            .all(|k| k == "fenced" || k == "unreachable"),
        "{}",
        report.render()
    );

    // No old incarnation ran a turn after the resume; the old Leases are gone and the new
    // incarnations hold one each.
    let events = trace::events(&cluster.trace);
    assert!(
        events.iter().any(|e| old_leases.contains(&e.host)),
        "the trace names hosts as their Leases are named (else the check below sees nothing)"
    );
    let late: Vec<_> = events
        .into_iter()
        .filter(|e| e.event == "turn-start" && e.t_ns > resumed_ns)
        .filter(|e| old_leases.contains(&e.host))
        .collect();
    assert!(
        late.is_empty(),
        "fenced incarnations served turns: {late:?}"
    );
    let now = within(
        "the old Leases go and the new ones stay",
        ttl() * 3,
        async || {
            let names = lease_names(&client).await;
            names.len() == 3 && names.iter().all(|n| !old_leases.contains(n))
        },
    )
    .await;
    eprintln!("old Leases gone {now:?} after the recovery");
}
